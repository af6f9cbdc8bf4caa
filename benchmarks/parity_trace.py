#!/usr/bin/env python3
"""Where a model's parity with PyTorch float64 is lost: one step's gradient,
tensor by tensor and channel by channel.

  benchmarks/parity_trace.py MODEL [--size 64] [--batch 4] [--top 6] [--work DIR]

Runs under a Python with torch, torchvision and onnx (~/torch/bin/python);
MODEL is what benchmarks/zoo.py takes (a torchvision classifier, vit_tiny,
timm:NAME). It exports and imports the model as zoo.py does, trains one step
of plain SGD at learning rate 1 in graphrun (so the update is the gradient),
and computes the same gradient in PyTorch three ways: float64 (the
reference), float32, and float64 from the input times (1 + 1e-7 noise),
which shows how far float32-sized rounding alone can move this model's
gradient. For each it prints the tensors whose gradient strays most from
float64's (error over the tensor's scale) and, within each, the output
channels that stray most. Then, for graphrun's worst channels in batch and
group norms (what the activations read), the value of the layer's
output nearest zero in float64, against the channel's spread: a value some 1e-5 of it from zero sits where float32 rounding
decides which side of a ReLU it falls on, and so whether that element
passes gradient back, which moves the whole channel's gradient and, through
it, everything before it. A channel whose outputs all lie far from zero has
strayed for another reason.
"""
import argparse
import collections
import json
import os
import sys
import warnings

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zoo  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model")
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--top", type=int, default=6, help="tensors listed per system")
    parser.add_argument("--work", default="/tmp/graphc-trace")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    name = args.model
    work = os.path.join(args.work, name.replace(":", "_"))
    os.makedirs(work, exist_ok=True)
    bin_dir = zoo.BIN

    torch.manual_seed(0)
    model = zoo.build(name, args.size)
    zoo.no_randomness(model)
    model.train()
    x = torch.randn(args.batch, 3, args.size, args.size)
    y = torch.randint(0, 1000, (args.batch,))
    onnx_path, mlir = os.path.join(work, "model.onnx"), os.path.join(work, "model.mlir")
    zoo.export_training(model, x, onnx_path)
    frozen = zoo.frozen_buffers(model, onnx_path)
    zoo.run([os.path.join(bin_dir, "graphc"), "import", onnx_path, "-o", mlir,
             "--batch", str(args.batch)] + (["--freeze", ",".join(frozen)] if frozen else []))
    plan = os.path.join(work, "model.plan")
    zoo.run([os.path.join(bin_dir, "graphc"), "compile", mlir, "--batch-size",
             str(args.batch), "--optimizer", "sgd", "--lr", "1", "--weight-decay", "0",
             "-o", plan])
    images, labels = os.path.join(work, "images.npy"), os.path.join(work, "labels.npy")
    np.save(images, x.numpy())
    np.save(labels, y.numpy().astype(np.int32))
    weights = os.path.join(work, "model.safetensors")
    final, report = os.path.join(work, "final.safetensors"), os.path.join(work, "report.json")
    zoo.run([os.path.join(bin_dir, "graphrun"), plan, "--init", weights, "--data",
             f"npy:{images},{labels}", "--steps", "1", "--warmup", "0", "--report", report,
             "--save", final])
    start = collections.OrderedDict(
        (k, torch.from_numpy(v.copy())) for k, v in zoo.load_safetensors(weights).items())
    start._metadata = {"": {"version": 2}}

    def fresh(dtype):
        m = zoo.build(name, args.size)
        zoo.no_randomness(m)
        missing, unexpected = m.load_state_dict(start, strict=False)
        # Every parameter from the file (buffers graphc folds stay the model's).
        assert not unexpected, unexpected
        parameters = {k for k, _ in m.named_parameters()}
        assert not parameters & set(missing), parameters & set(missing)
        return m.to(dtype).train()

    def gradient(dtype, noise=0.0):
        m = fresh(dtype)
        inputs = x.to(dtype)
        if noise:
            g = torch.Generator().manual_seed(1)
            inputs = inputs * (1 + noise * torch.randn(inputs.shape, generator=g, dtype=dtype))
        loss = torch.nn.functional.cross_entropy(m(inputs), y)
        loss.backward()
        return loss.item(), {k: p.grad.double().numpy() for k, p in m.named_parameters()
                             if p.grad is not None}

    loss64, want = gradient(torch.float64)
    loss32, float32 = gradient(torch.float32)
    loss_noisy, noisy = gradient(torch.float64, 1e-7)
    got = zoo.load_safetensors(final)
    graphrun = {k: start[k].double().numpy() - got[k].astype(np.float64) for k in want}
    with open(report) as f:
        loss_graphrun = json.load(f)["final_loss"]
    print(f"{name}, {args.size} px, batch {args.batch}: loss float64 {loss64:.9g}")

    def ranked(have):
        rows = []
        for k, w in want.items():
            scale = np.abs(w).max()
            if scale < 1e-12:  # no gradient in exact arithmetic (a shift before a norm)
                continue
            rows.append((float(np.abs(have[k] - w).max() / scale), k))
        return sorted(rows, reverse=True)

    worst_channels = []
    for label, loss, have in [("graphrun", loss_graphrun, graphrun),
                              ("PyTorch float32", loss32, float32),
                              ("float64, input x (1 + 1e-7 noise)", loss_noisy, noisy)]:
        rows = ranked(have)
        over = sum(1 for e, _ in rows if e > 1e-3)
        print(f"\n{label}: loss error {abs(loss - loss64) / abs(loss64):.1e}, "
              f"{over} of {len(rows)} gradients past 1e-3 of their scale")
        for error, k in rows[:args.top]:
            d = np.abs(have[k] - want[k])
            line = f"  {error:.1e}  {k} {list(want[k].shape)}"
            if d.ndim >= 1 and d.shape[0] > 1:
                per = d.reshape(d.shape[0], -1).max(1)
                top = np.argsort(per)[::-1][:3]
                line += ("; channels " + ", ".join(f"{i} ({per[i]:.1e})" for i in top) +
                         f"; median channel {np.median(per):.1e}")
                if label == "graphrun":
                    worst_channels.append((k.rsplit(".", 1)[0], int(top[0])))
            print(line)

    # The module outputs of graphrun's worst channels, in float64.
    m = fresh(torch.float64)
    modules = dict(m.named_modules())
    outputs = {}
    for module, channel in dict.fromkeys(worst_channels):
        # Batch and group norms: channels on dim 1 of their output.
        if module in modules and isinstance(modules[module], (
                torch.nn.modules.batchnorm._BatchNorm, torch.nn.GroupNorm)):
            modules[module].register_forward_hook(
                lambda _, __, out, key=(module, channel):
                outputs.__setitem__(key, out[:, key[1]].detach().clone()))
    m(x.double())
    print("\ngraphrun's worst channels of batch and group norms, their output in float64:")
    for (module, channel), v in outputs.items():
        a = v.abs().flatten().sort().values
        print(f"  {module} channel {channel}: {v.numel()} values, nearest zero "
              f"{a[0].item():.1e}, next {a[1].item():.1e}, spread {v.std().item():.1e}")


if __name__ == "__main__":
    main()
