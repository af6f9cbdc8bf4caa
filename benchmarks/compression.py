#!/usr/bin/python3
"""Does gradient compression keep accuracy? fmnist_cnn trained data-parallel
on 2 ranks of this machine (graphrun --nodes 2) on Fashion-MNIST for the same
number of epochs with each --grad-compression, from the same seed, and its
test accuracy on the 10,000 test images beside the uncompressed run's.

  benchmarks/compression.py [--epochs 2] [--batch 32] [--lr 0.02]
                            [--methods none,fp16,powersgd:1,powersgd:4]  (or topk:RATIO[:WARMUP])
                            [--plain-steps K] [--seeds 1,2] [--name compression]
                            [--data /usr/share/datasets/fashion-mnist]
                            [--out benchmarks/results]

--batch is per rank (the global batch is twice it); every method trains
--epochs epochs' worth of steps. With --plain-steps K, PowerSGD's runs take
their first K steps uncompressed and then resume with PowerSGD (its warm-up,
PyTorch's start_powerSGD_iter; graphrun resumes a PowerSGD plan from an
uncompressed plan's checkpoint with fresh error and Q). Each seed is a run of
its own; the table gives each method's mean over the seeds. Writes
NAME.json into --out. The goal it checks: each method within 0.5
points of none.
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
    parser.add_argument("--seeds", default="1")
    parser.add_argument("--plain-steps", type=int, default=0,
                        help="PowerSGD's warm-up: steps with uncompressed allreduces first")
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"))
    parser.add_argument("--name", default="compression", help="writes OUT/NAME.json")
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
    seeds = [int(x) for x in args.seeds.split(",")]
    steps = args.epochs * (60000 // (2 * args.batch))
    rows = []

    def compile_plan(method, path):
        return subprocess.run(
            [graphc, "compile", model, "--batch-size", str(args.batch), "--lr", str(args.lr),
             "--grad-compression", method, "-o", path],
            check=True, capture_output=True, text=True).stdout

    with tempfile.TemporaryDirectory(prefix="graphc-compression-") as work:
        plain = os.path.join(work, "none.plan")
        compile_plan("none", plain)
        for method in methods:
            plan = os.path.join(work, method.replace(":", "") + ".plan")
            compiled = compile_plan(method, plan)
            wire = [l for l in compiled.splitlines()
                    if l.startswith(("grad-compression:", "data-parallel:"))]
            warm = args.plain_steps if method.startswith("powersgd") else 0
            for seed in seeds:
                report = os.path.join(work, "r.json")
                common = [graphrun, "--nodes", "2", "--threads", "1", "--data",
                          f"fashion-mnist:{args.data}", "--seed", str(seed)]
                start = time.time()
                if warm:
                    saved = os.path.join(work, "warm.st")
                    subprocess.run(common[:1] + [plain] + common[1:] +
                                   ["--steps", str(warm), "--save", saved],
                                   check=True, stdout=subprocess.DEVNULL)
                    resume = ["--resume", saved]
                else:
                    resume = []
                subprocess.run(common[:1] + [plan] + common[1:] + resume +
                               ["--steps", str(steps - warm), "--eval", "--report", report],
                               check=True, stdout=subprocess.DEVNULL)
                with open(report) as f:
                    r = json.load(f)
                rows.append({"method": method, "seed": seed, "plain_steps": warm,
                             "steps": steps, "test_accuracy": r["test_accuracy"],
                             "test_examples": r["test_examples"],
                             "final_loss": r["final_loss"], "seconds": time.time() - start,
                             "summary": wire[-1] if wire else ""})
                print(f"{method} (seed {seed}{f', first {warm} steps plain' if warm else ''}): "
                      f"test accuracy {r['test_accuracy']:.4f} ({r['test_examples']} images), "
                      f"final loss {r['final_loss']:.4f}; {rows[-1]['summary']}", flush=True)
    means = {}
    for method in methods:
        accs = [r["test_accuracy"] for r in rows if r["method"] == method]
        means[method] = sum(accs) / len(accs)
    reference = means["none"]
    table = [{"method": m, "mean_test_accuracy": a, "points_vs_none": 100 * (a - reference),
              "within_half_a_point": abs(100 * (a - reference)) <= 0.5}
             for m, a in means.items()]
    summary = {"machine": machine(), "date": time.strftime("%Y-%m-%d"), "model": "fmnist_cnn",
               "ranks": 2, "batch_per_rank": args.batch, "lr": args.lr,
               "epochs": args.epochs, "steps": steps, "plain_steps": args.plain_steps,
               "seeds": seeds, "runs": rows, "results": table}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"{args.name}.json"), "w") as f:
        json.dump(summary, f, indent=2)
    print(f"\nmachine: {summary['machine']}; fmnist_cnn, 2 ranks x batch {args.batch}, "
          f"lr {args.lr}, {steps} steps ({args.epochs} epochs), seeds {args.seeds}"
          + (f", PowerSGD's first {args.plain_steps} steps plain" if args.plain_steps else ""))
    print(f"{'method':<12} {'test accuracy (mean)':>21} {'vs none':>9}   per seed")
    for row in table:
        per_seed = " ".join(f"{r['test_accuracy']:.4f}" for r in rows
                            if r["method"] == row["method"])
        print(f"{row['method']:<12} {row['mean_test_accuracy']:>21.4f} "
              f"{row['points_vs_none']:>+8.2f}p   {per_seed}")
    print(f"\nwrote {os.path.join(args.out, args.name + '.json')}")


if __name__ == "__main__":
    main()
