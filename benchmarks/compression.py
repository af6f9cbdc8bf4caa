#!/usr/bin/python3
"""Does gradient compression keep accuracy? fmnist_cnn trained data-parallel
on 2 ranks of this machine (graphrun --nodes 2) on Fashion-MNIST for the same
number of epochs with each --grad-compression, from the same seed, and its
test accuracy on the 10,000 test images beside the uncompressed run's.

  benchmarks/compression.py [--epochs 2] [--batch 32] [--lr 0.02]
                            [--methods none,fp16,powersgd:1,powersgd:4]
                            [--data /usr/share/datasets/fashion-mnist]
                            [--out benchmarks/results]

--batch is per rank (the global batch is twice it). Writes compression.json
into --out. The goal it checks: each method within 0.5 points of none.
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32, help="batch per rank")
    parser.add_argument("--lr", type=float, default=0.02)
    parser.add_argument("--methods", default="none,fp16,powersgd:1,powersgd:4")
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"))
    parser.add_argument("--build", default=os.environ.get("GRAPHC_BUILD_DIR",
                                                          os.path.join(ROOT, "build")))
    args = parser.parse_args()
    methods = args.methods.split(",")
    if methods[0] != "none":
        sys.exit("compression.py: --methods must start with none (the reference)")
    if not os.path.isdir(args.data):
        sys.exit(f"compression.py: no Fashion-MNIST in {args.data} (./setup.sh run fetches it)")
    graphc, graphrun = tool("graphc", args.build), tool("graphrun", args.build)
    model = os.path.join(ROOT, "models", "fmnist_cnn.mlir")
    os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    rows = []
    with tempfile.TemporaryDirectory(prefix="graphc-compression-") as work:
        for method in methods:
            plan, report = os.path.join(work, "p.plan"), os.path.join(work, "r.json")
            compiled = subprocess.run(
                [graphc, "compile", model, "--batch-size", str(args.batch), "--lr",
                 str(args.lr), "--grad-compression", method, "-o", plan],
                check=True, capture_output=True, text=True).stdout
            wire = [l for l in compiled.splitlines()
                    if l.startswith(("grad-compression:", "data-parallel:"))]
            start = time.time()
            subprocess.run([graphrun, plan, "--nodes", "2", "--threads", "1", "--data",
                            f"fashion-mnist:{args.data}", "--epochs", str(args.epochs),
                            "--eval", "--seed", str(args.seed), "--report", report],
                           check=True, stdout=subprocess.DEVNULL)
            with open(report) as f:
                r = json.load(f)
            rows.append({"method": method, "test_accuracy": r["test_accuracy"],
                         "test_examples": r["test_examples"], "final_loss": r["final_loss"],
                         "steps": r.get("steps"), "seconds": time.time() - start,
                         "summary": wire[-1] if wire else ""})
            print(f"{method}: test accuracy {r['test_accuracy']:.4f} "
                  f"({r['test_examples']} images), final loss {r['final_loss']:.4f}; "
                  f"{rows[-1]['summary']}", flush=True)
    reference = rows[0]["test_accuracy"]
    for row in rows:
        row["points_vs_none"] = 100 * (row["test_accuracy"] - reference)
        row["within_half_a_point"] = abs(row["points_vs_none"]) <= 0.5
    summary = {"machine": machine(), "date": time.strftime("%Y-%m-%d"), "model": "fmnist_cnn",
               "ranks": 2, "batch_per_rank": args.batch, "lr": args.lr,
               "epochs": args.epochs, "seed": args.seed, "results": rows}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "compression.json"), "w") as f:
        json.dump(summary, f, indent=2)
    print(f"\nmachine: {summary['machine']}; fmnist_cnn, 2 ranks x batch {args.batch}, "
          f"lr {args.lr}, {args.epochs} epochs, seed {args.seed}")
    print(f"{'method':<12} {'test accuracy':>14} {'vs none':>9} {'final loss':>11}")
    for row in rows:
        print(f"{row['method']:<12} {row['test_accuracy']:>14.4f} "
              f"{row['points_vs_none']:>+8.2f}p {row['final_loss']:>11.4f}")
    print(f"\nwrote {os.path.join(args.out, 'compression.json')}")


if __name__ == "__main__":
    main()
