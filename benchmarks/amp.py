#!/usr/bin/python3
"""FP32 vs BF16 vs FP16 (AMP) training on the CPU, side by side in one run.

  benchmarks/amp.py [--repeats 3] [--out benchmarks/results] [--models resnet50,fmnist_cnn]

Compiles each model three times (no --amp, --amp=bf16, --amp=fp16 with dynamic
loss scaling), records each plan's arena (peak memory), then runs the plans
alternately (fp32, bf16, fp16, fp32, ...) so that drifts in machine speed hit
all alike. Each run reports the median images/sec of its timed steps (warmup
excluded) and its final loss; the table gives the median over the runs, the
ratios to FP32, the arena ratios, and how graphrun computed the half library
calls (natively, or emulated through fp32 on CPUs without BF16 hardware).
Writes amp.json and amp.png into --out.

Needs a build (`./setup.sh build`) and Debian's python3-matplotlib; runs
under /usr/bin/python3 for that reason.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fusion import ROOT, machine, save_summary, tool  # noqa: E402

MODELS = [
    # name, file, batch, steps, warmup, extra compile flags
    ("resnet50", "models/resnet50.mlir", 8, 3, 1, []),
    ("fmnist_cnn", "models/fmnist_cnn.mlir", 64, 30, 5, ["--lr", "0.01"]),
]
PRECISIONS = [("fp32", []), ("bf16", ["--amp=bf16"]), ("fp16", ["--amp=fp16"])]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs per plan (median)")
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"))
    parser.add_argument("--build", default=os.environ.get("GRAPHC_BUILD_DIR",
                                                          os.path.join(ROOT, "build")))
    parser.add_argument("--models", default=",".join(m[0] for m in MODELS))
    args = parser.parse_args()
    if args.repeats < 1:
        sys.exit("amp.py: --repeats must be at least 1")
    graphc, graphrun = tool("graphc", args.build), tool("graphrun", args.build)
    plans = os.path.join(args.out, "plans")
    os.makedirs(plans, exist_ok=True)
    models = [m for m in MODELS if m[0] in args.models.split(",")]
    if not models:
        sys.exit(f"amp.py: --models must name some of {[m[0] for m in MODELS]}")

    results = {}
    for name, path, batch, steps, warmup, flags in models:
        for precision, amp in PRECISIONS:
            plan = os.path.join(plans, f"{name}-{precision}.plan")
            out = subprocess.run([graphc, "compile", os.path.join(ROOT, path), "--batch-size",
                                  str(batch), "-o", plan] + flags + amp,
                                 check=True, capture_output=True, text=True).stdout
            arena = int(re.search(r"peak memory \(arena\): .* \((\d+) bytes\)", out).group(1))
            results[(name, precision)] = {"plan": plan, "arena": arena, "runs": [],
                                          "losses": []}
        arenas = ", ".join(f"{p} {results[(name, p)]['arena'] / 2**20:.1f} MiB"
                           for p, _ in PRECISIONS)
        print(f"compiled {name} (batch {batch}): arena {arenas}", flush=True)

    for r in range(args.repeats):
        for name, path, batch, steps, warmup, flags in models:
            line = []
            for precision, _ in PRECISIONS:
                entry = results[(name, precision)]
                report = os.path.join(plans, f"{name}-{precision}.json")
                subprocess.run([graphrun, entry["plan"], "--steps", str(steps), "--warmup",
                                str(warmup), "--report", report],
                               check=True, stdout=subprocess.DEVNULL)
                with open(report) as f:
                    j = json.load(f)
                entry["runs"].append(j["images_per_sec"])
                entry["losses"].append(j["final_loss"])
                entry["library_math"] = j.get("library_math", "fp32")
                entry["skipped_steps"] = j.get("skipped_steps")
                line.append(f"{precision} {j['images_per_sec']:.2f}")
            print(f"run {r + 1}/{args.repeats} {name}: " + ", ".join(line) + " images/sec",
                  flush=True)

    table = []
    for name, path, batch, steps, warmup, flags in models:
        base = results[(name, "fp32")]
        base_rate = statistics.median(base["runs"])
        for precision, _ in PRECISIONS:
            e = results[(name, precision)]
            rate = statistics.median(e["runs"])
            table.append({
                "model": name, "precision": precision, "batch_size": batch, "steps": steps,
                "warmup": warmup, "repeats": args.repeats, "images_per_sec": rate,
                "speedup_vs_fp32": rate / base_rate, "runs": e["runs"],
                "arena_bytes": e["arena"], "arena_vs_fp32": e["arena"] / base["arena"],
                "final_loss": statistics.median(e["losses"]),
                "library_math": e["library_math"], "skipped_steps": e["skipped_steps"],
            })
    summary = {"machine": machine(), "date": time.strftime("%Y-%m-%d"), "device": "cpu",
               "results": table}

    print()
    print(f"machine: {summary['machine']}; median of {args.repeats} runs each")
    print(f"{'model':<11} {'prec':<5} {'batch':>5} {'img/s':>8} {'vs fp32':>8} "
          f"{'arena MiB':>10} {'vs fp32':>8} {'final loss':>10}  library math")
    for row in table:
        print(f"{row['model']:<11} {row['precision']:<5} {row['batch_size']:>5} "
              f"{row['images_per_sec']:>8.2f} {row['speedup_vs_fp32']:>7.2f}x "
              f"{row['arena_bytes'] / 2**20:>10.1f} {row['arena_vs_fp32']:>7.2f}x "
              f"{row['final_loss']:>10.4f}  {row['library_math']}")

    plt = save_summary(summary, args.out, "amp")
    fig, axes = plt.subplots(2, len(models), figsize=(4 * len(models), 6), squeeze=False)
    colors = ["#9e9e9e", "#2ca02c", "#1f77b4"]
    for col, (name, *_rest) in enumerate(models):
        rows = [row for row in table if row["model"] == name]
        labels = [row["precision"] for row in rows]
        for ax, key, unit in ((axes[0][col], "images_per_sec", "images/sec"),
                              (axes[1][col], "arena_bytes", "arena (MiB)")):
            values = [row[key] / (2**20 if key == "arena_bytes" else 1) for row in rows]
            bars = ax.bar(labels, values, color=colors)
            for bar, v in zip(bars, values):
                ax.text(bar.get_x() + bar.get_width() / 2, v, f"{v:.1f}", ha="center",
                        va="bottom")
            ax.set_ylabel(unit)
            ax.set_ylim(0, max(values) * 1.2)
        axes[0][col].set_title(f"{name} (batch {rows[0]['batch_size']})")
    fig.suptitle(f"graphc AMP training, CPU: {summary['machine']}", fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "amp.png"), dpi=120)
    print(f"\nwrote {os.path.join(args.out, 'amp.json')} and amp.png")


if __name__ == "__main__":
    main()
