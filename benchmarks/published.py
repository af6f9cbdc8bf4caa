#!/usr/bin/python3
"""Predicted beside published: the distributed ResNet-50 tables of GPU
clusters no machine here has, predicted on paper by `graphrun --predict`.

  benchmarks/published.py [--threads T] [--out benchmarks/results] [--build DIR]

For each anchor, graphc compiles ResNet-50 v1.5 at the anchor's batch per
GPU; one rank trains 2 profiled steps on this CPU, which says where in a step
each command falls and so when backward fills each gradient bucket; then
`graphrun --predict --step-profile REPORT --step-ms MS` takes the anchor's
published one-GPU step (its batch over its one-GPU images/sec) as the step
and the anchor's links as the network, and predicts every GPU count the
anchor published. Inputs that are assumed, not measured, are listed with
each anchor (the links' achievable bandwidths, most of all); the compute
shape is this CPU's, not the GPU's. Writes published.json into --out.

The anchors (figures checked against their sources):
  - DLPerf (Oneflow-Inc/DLPerf, reports/dlperf_benchmark_test_report_v1.md,
    2020): 4 nodes of 8 V100-SXM2-16GB (NVLink), 100 Gbit/s InfiniBand EDR
    between nodes, FP32, batch 128 per GPU; NGC TensorFlow 1.15 (Horovod),
    NGC PyTorch and OneFlow 0.2 on the same machines, 1, 8, 16 and 32 GPUs.
  - Goyal et al. 2017, "Accurate, Large Minibatch SGD" (arXiv 1706.02677):
    Big Basin servers of 8 P100 (NVLink), 50 Gbit/s Ethernet, batch 32 per
    GPU, Caffe2 + Gloo's halving/doubling allreduce (Rabenseifner's), ~90%
    efficiency from 8 to 256 GPUs. The paper prints no iteration time; 0.19 s
    at 8 GPUs is derived from its 16 minutes per epoch (5005 iterations).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fusion import ROOT, machine, tool  # noqa: E402

DLPERF = "Oneflow-Inc/DLPerf reports/dlperf_benchmark_test_report_v1.md (FP32, batch 128)"
# NVLink of a DGX-1-like V100 node: NCCL's allreduce bus bandwidth there is
# about 130 GB/s (assumed); EDR InfiniBand: 100 Gbit/s, one card per node.
V100_NODE = {"per_node": 8, "intra": "130GB/s,5us", "link": "100gbit,5us", "algorithm": "ring"}
ANCHORS = [
    {"name": "DLPerf NGC TensorFlow 1.15 (Horovod)", "source": DLPERF, "batch": 128,
     "published": {1: 362.44, 8: 2721.98, 16: 5099.42, 32: 9514.64}, **V100_NODE},
    {"name": "DLPerf NGC PyTorch (DDP)", "source": DLPERF, "batch": 128,
     "published": {1: 367.29, 8: 2887.65, 16: 5716.79, 32: 10917.09}, **V100_NODE},
    {"name": "DLPerf OneFlow 0.2", "source": DLPERF, "batch": 128,
     "published": {1: 397.64, 8: 3130.34, 16: 6260.30, 32: 12411.97}, **V100_NODE},
    # P100 NVLink (DGX-1-like): about 60 GB/s allreduce bus bandwidth (assumed).
    {"name": "Goyal et al. 2017 (Caffe2 + Gloo)",
     "source": "arXiv 1706.02677: ~90% from 8 to 256 GPUs; 0.19 s per 8-GPU iteration "
               "derived from 16 min per epoch",
     "batch": 32, "step_ms": 190.0, "baseline": 8, "published_efficiency": {256: 0.90},
     "per_node": 8, "intra": "60GB/s,5us", "link": "50gbit,10us", "algorithm": "rabenseifner"},
]


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"))
    parser.add_argument("--build", default=os.environ.get("GRAPHC_BUILD_DIR",
                                                          os.path.join(ROOT, "build")))
    args = parser.parse_args()
    graphc, graphrun = tool("graphc", args.build), tool("graphrun", args.build)
    work = tempfile.mkdtemp(prefix="graphc-published-")
    model = os.path.join(ROOT, "models", "resnet50.mlir")
    profiles = {}
    for batch in sorted({a["batch"] for a in ANCHORS}):
        plan = os.path.join(work, f"resnet50-b{batch}.plan")
        report = os.path.join(work, f"profile-b{batch}.json")
        run([graphc, "compile", model, "--batch-size", str(batch), "-o", plan])
        print(f"profiling ResNet-50 at batch {batch} on this CPU ({args.threads} threads)...",
              flush=True)
        run([graphrun, plan, "--steps", "3", "--warmup", "1", "--profile", "--threads",
             str(args.threads), "--report", report])
        profiles[batch] = (plan, report)

    rows = []
    for a in ANCHORS:
        plan, report = profiles[a["batch"]]
        if "published" in a:
            step_ms = a["batch"] * 1000.0 / a["published"][1]
            counts = sorted(a["published"])
        else:
            step_ms = a["step_ms"]
            counts = sorted({a["baseline"], *a["published_efficiency"]})
        out = os.path.join(work, "predicted.json")
        cmd = [graphrun, plan, "--predict", ",".join(map(str, counts)), "--step-profile", report,
               "--step-ms", f"{step_ms:.3f}", "--ranks-per-node", str(a["per_node"]),
               "--intra-link", a["intra"], "--link", a["link"], "--predict-algorithm",
               a["algorithm"], "--report", out]
        print(f"\n{a['name']}: " + " ".join(cmd[1:]).replace(work + "/", ""), flush=True)
        print(run(cmd).stdout, end="", flush=True)
        with open(out) as f:
            predicted = {r["ranks"]: r for r in json.load(f)["prediction"]["rows"]}
        for n in counts:
            p = predicted[n]
            row = {"anchor": a["name"], "source": a["source"], "gpus": n,
                   "nodes": p["nodes"], "batch_per_gpu": a["batch"], "step_ms": step_ms,
                   "intra_link": a["intra"], "link": a["link"], "algorithm": a["algorithm"],
                   "predicted_images_per_sec": p["total_images_per_sec"],
                   "predicted_exposed_comm_ms": p["exposed_comm_ms"]}
            if "published" in a:
                row["published_images_per_sec"] = a["published"][n]
                row["published_efficiency"] = a["published"][n] / (n * a["published"][1])
                row["predicted_efficiency"] = p["scaling_efficiency"]
            else:
                base = predicted[a["baseline"]]["total_images_per_sec"] / a["baseline"]
                row["predicted_efficiency"] = p["total_images_per_sec"] / (n * base)
                row["published_efficiency"] = (1.0 if n == a["baseline"]
                                               else a["published_efficiency"].get(n))
                row["efficiency_relative_to_gpus"] = a["baseline"]
            rows.append(row)

    summary = {"machine": machine(), "date": time.strftime("%Y-%m-%d"),
               "profiled_on": "this CPU (the shape of a step: where each bucket is ready)",
               "rows": rows}
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "published.json")
    with open(path, "w") as f:
        json.dump(summary, f, indent=1)
    print()
    print(f"{'anchor':<38} {'GPUs':>5} {'published img/s':>16} {'predicted img/s':>16} "
          f"{'published eff':>14} {'predicted eff':>14}")
    for r in rows:
        pub = r.get("published_images_per_sec")
        print(f"{r['anchor']:<38} {r['gpus']:>5} {pub if pub else '-':>16} "
              f"{r['predicted_images_per_sec']:>16.1f} "
              f"{r['published_efficiency'] if r['published_efficiency'] is not None else '-':>14.3} "
              f"{r['predicted_efficiency']:>14.3f}")
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
