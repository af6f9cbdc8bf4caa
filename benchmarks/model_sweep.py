#!/usr/bin/env python3
"""Which models graphc takes: export, import, compile and train a few steps.

  benchmarks/model_sweep.py [--models timm:resnet50,vit_b_16,...] [--size 224]
                            [--batch 2] [--steps 2 | 0] [--work DIR]
                            [--exporter torchscript|dynamo]

Runs under a Python with torch, torchvision, onnx and (for timm:NAME) timm:
~/torch/bin/python benchmarks/model_sweep.py. For each model, built with
random weights (timm's stochastic depth and dropout off):

  1. torch.onnx.export in training form (opset 17, TrainingMode.TRAINING, no
     constant folding, a symbolic batch axis), or with --exporter dynamo
     through torch.export (opset 20, external data, its optimizer off);
  2. graphc import MODEL.onnx --batch B (the batch fixed: many graphs merge
     it with other dims; PyTorch's float buffers other than batch norm's
     statistics --freeze'd, constants as in PyTorch), graphc compile;
  3. graphrun PLAN --steps S on synthetic data, one thread (--steps 0:
     none, to see what imports and compiles at a batch too large to train
     quickly);

and prints one row per model: its parameters and ONNX nodes, the import
and compile time, the loss after the steps, or the first line of the error of the stage
that refused it (an export error is PyTorch's, not graphc's). The default
list is the timm sweep of the README. Parity with PyTorch in float64 is
benchmarks/zoo.py's (which takes timm:NAME too); this is coverage.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time
import warnings

import onnx
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zoo import build, export_training, frozen_buffers  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(os.environ.get("GRAPHC_BUILD_DIR", os.path.join(ROOT, "build")), "bin")

TIMM = ("resnet50 vit_small_patch16_224 deit_tiny_patch16_224 convnext_atto efficientnet_b0 "
        "mobilenetv3_large_100 swin_tiny_patch4_window7_224 regnetx_002 mixer_s16_224 "
        "convmixer_768_32 levit_128 poolformer_s12 coatnet_nano_rw_224 edgenext_x_small "
        "mobilevit_xs cspdarknet53 dla34 xception41 inception_v3 densenet121 ghostnet_100 "
        "rexnet_100 tf_efficientnet_b0 vgg11 beit_base_patch16_224 caformer_s18 fastvit_t8 "
        "repvit_m1 efficientvit_b0 tiny_vit_5m_224 nfnet_l0 resnetv2_50x1_bit "
        "seresnext26d_32x4d hrnet_w18_small mobilenetv4_conv_small efficientformer_l1 "
        "pvt_v2_b0 twins_svt_small crossvit_tiny_240 cait_xxs24_224 res2net50_26w_4s "
        "resnest14d dpn68 selecsls42b hardcorenas_a lcnet_050 tinynet_a").split()


def first_line(text):
    lines = [l for l in text.strip().splitlines() if l.strip()]
    error = [l for l in lines if "error" in l.lower()]
    return (error[0] if error else lines[-1] if lines else "(no message)")[:240]


def one(name, args):
    work = os.path.join(args.work, name.replace(":", "_"))
    os.makedirs(work, exist_ok=True)
    row = {"model": name}
    torch.manual_seed(0)
    try:
        model = build(name, args.size).train()
        row["parameters"] = int(sum(p.numel() for p in model.parameters()))
        x = torch.randn(args.batch, 3, args.size, args.size)
        onnx_path = os.path.join(work, "model.onnx")
        export_training(model, x, onnx_path, exporter=args.exporter)
        row["nodes"] = len(onnx.load(onnx_path, load_external_data=False).graph.node)
    except Exception as e:  # PyTorch's exporter, not graphc
        row["result"] = "export: " + first_line(str(e) or repr(e))
        return row
    buffers = frozen_buffers(model, onnx_path)
    mlir, plan = os.path.join(work, "model.mlir"), os.path.join(work, "model.plan")
    started = time.time()
    r = subprocess.run([os.path.join(BIN, "graphc"), "import", onnx_path, "--batch",
                        str(args.batch), "-o", mlir] +
                       (["--freeze", ",".join(buffers)] if buffers else []),
                       capture_output=True, text=True)
    if r.returncode == 0:
        r = subprocess.run([os.path.join(BIN, "graphc"), "compile", mlir, "--batch-size",
                            str(args.batch), "-o", plan], capture_output=True, text=True)
    row["compile_s"] = round(time.time() - started, 1)
    if r.returncode != 0:
        row["result"] = "graphc: " + first_line(r.stderr)
        return row
    if args.steps == 0:
        row["result"] = "compiles"
        return row
    r = subprocess.run([os.path.join(BIN, "graphrun"), plan, "--steps", str(args.steps),
                        "--warmup", "0", "--threads", "1"], capture_output=True, text=True)
    if r.returncode != 0:
        row["result"] = "graphrun: " + first_line(r.stderr)
        return row
    loss = re.search(r"final loss: (\S+)", r.stdout)
    row["loss"] = float(loss.group(1)) if loss else None
    row["result"] = "trains"
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join("timm:" + m for m in TIMM))
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--steps", type=int, default=2,
                        help="steps graphrun trains (0: import and compile only)")
    parser.add_argument("--work", default="/tmp/graphc-sweep")
    parser.add_argument("--exporter", choices=["torchscript", "dynamo"], default="torchscript",
                        help="zoo.export_training's: the TorchScript exporter (opset 17, "
                        "training form) or torch.export's (opset 20, external data)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    versions = f"torch {torch.__version__}"
    try:
        import timm
        versions += f", timm {timm.__version__}"
    except ImportError:
        pass
    print(f"{versions}; {args.size} px, batch {args.batch}, {args.steps} steps, "
          f"{args.exporter} export\n")
    print("| model | params | ONNX nodes | import + compile s | result |")
    print("|---|---:|---:|---:|---|")
    rows = []
    for name in args.models.split(","):
        row = one(name, args)
        rows.append(row)
        params = f"{row['parameters'] / 1e6:.1f} M" if "parameters" in row else ""
        result = row["result"] if row["result"] != "trains" else \
            f"trains (loss {row['loss']:.4f} after {args.steps} steps)"
        print(f"| {name} | {params} | {row.get('nodes', '')} | {row.get('compile_s', '')} | "
              f"{result} |", flush=True)
    done = "compile" if args.steps == 0 else "train"
    trained = sum(r["result"] in ("trains", "compiles") for r in rows)
    refused = sum(r["result"].startswith(("graphc", "graphrun")) for r in rows)
    print(f"\n{trained} of {len(rows)} {done}; {refused} refused by graphc; "
          f"{len(rows) - trained - refused} not exportable by torch.onnx")
    with open(os.path.join(args.work, "sweep.json"), "w") as f:
        json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
