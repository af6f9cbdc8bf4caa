#!/usr/bin/python3
"""Fused vs unfused training throughput: the mission's central measurement.

  benchmarks/fusion.py [--repeats 5] [--out benchmarks/results]

Compiles ResNet-50 (224 px) and fmnist_cnn twice each, fused (the default) and
unfused (`graphc compile --no-fuse`), then runs the four plans alternately on
this machine (unfused, fused, unfused, fused, ...) so that drifts in machine
speed hit both alike. Each run reports the median images/sec of its timed
steps (warmup excluded); the table gives the median over the runs, the
fused/unfused ratio, and the fusion report (kernel launches and bytes per step).
Writes fusion.json and fusion.png (a bar chart) into --out.

Needs a build (`./setup.sh build`) and Debian's python3-matplotlib (setup.sh
installs it); runs under /usr/bin/python3 for that reason.
"""
import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = [
    # name, file, batch, steps, warmup, extra compile flags
    ("resnet50", "models/resnet50.mlir", 8, 3, 1, []),
    ("fmnist_cnn", "models/fmnist_cnn.mlir", 64, 30, 5, ["--lr", "0.01"]),
]


def tool(name, build):
    path = os.path.join(build, "bin", name)
    if not os.path.exists(path):
        sys.exit(f"fusion.py: {path} not found; run ./setup.sh build first")
    return path


def machine():
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = re.search(r"model name\s*:\s*(.*)", f.read()).group(1)
    except (OSError, AttributeError):
        pass
    return f"{cpu}, {os.cpu_count()} cores"


def save_summary(summary, out, name):
    """Writes OUT/NAME.json and returns matplotlib's pyplot (Agg), or exits
    saying the chart needs python3-matplotlib (the JSON is written)."""
    with open(os.path.join(out, f"{name}.json"), "w") as f:
        json.dump(summary, f, indent=2)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit(f"{name}.py: matplotlib is missing (apt-get install python3-matplotlib); "
                 "the JSON is written")
    return plt


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="runs per plan (median)")
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"))
    parser.add_argument("--build", default=os.environ.get("GRAPHC_BUILD_DIR",
                                                          os.path.join(ROOT, "build")))
    parser.add_argument("--models", default=",".join(m[0] for m in MODELS))
    args = parser.parse_args()
    if args.repeats < 1:
        sys.exit("fusion.py: --repeats must be at least 1")
    graphc, graphrun = tool("graphc", args.build), tool("graphrun", args.build)
    os.makedirs(args.out, exist_ok=True)
    plans = os.path.join(args.out, "plans")
    os.makedirs(plans, exist_ok=True)
    models = [m for m in MODELS if m[0] in args.models.split(",")]
    if not models:
        sys.exit(f"fusion.py: --models must name some of {[m[0] for m in MODELS]}")

    results = {}
    for name, path, batch, steps, warmup, flags in models:
        for variant in ("unfused", "fused"):
            plan = os.path.join(plans, f"{name}-{variant}.plan")
            cmd = [graphc, "compile", os.path.join(ROOT, path), "--batch-size", str(batch),
                   "--fusion-report", "-o", plan] + flags
            if variant == "unfused":
                cmd.append("--no-fuse")
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            line = re.search(r"train_step: (\d+) launches, ([\d.]+ \w+)", out)
            results[(name, variant)] = {"plan": plan, "runs": [], "launches": int(line.group(1)),
                                        "kernel_traffic": line.group(2)}
        print(f"compiled {name} (batch {batch}): "
              f"{results[(name, 'unfused')]['launches']} kernel launches per step unfused, "
              f"{results[(name, 'fused')]['launches']} fused", flush=True)

    for r in range(args.repeats):
        for name, path, batch, steps, warmup, flags in models:
            for variant in ("unfused", "fused"):
                entry = results[(name, variant)]
                report = os.path.join(plans, f"{name}-{variant}.json")
                subprocess.run([graphrun, entry["plan"], "--steps", str(steps), "--warmup",
                                str(warmup), "--report", report],
                               check=True, stdout=subprocess.DEVNULL)
                with open(report) as f:
                    entry["runs"].append(json.load(f)["images_per_sec"])
            u, f_ = results[(name, "unfused")]["runs"][-1], results[(name, "fused")]["runs"][-1]
            print(f"run {r + 1}/{args.repeats} {name}: unfused {u:.2f}, fused {f_:.2f} "
                  f"images/sec", flush=True)

    table = []
    for name, path, batch, steps, warmup, flags in models:
        u, f_ = results[(name, "unfused")], results[(name, "fused")]
        mu, mf = statistics.median(u["runs"]), statistics.median(f_["runs"])
        table.append({
            "model": name, "batch_size": batch, "steps": steps, "warmup": warmup,
            "repeats": args.repeats,
            "unfused_images_per_sec": mu, "fused_images_per_sec": mf, "ratio": mf / mu,
            "unfused_runs": u["runs"], "fused_runs": f_["runs"],
            "unfused_kernel_launches": u["launches"], "fused_kernel_launches": f_["launches"],
            "unfused_kernel_traffic": u["kernel_traffic"],
            "fused_kernel_traffic": f_["kernel_traffic"],
        })
    summary = {"machine": machine(), "date": time.strftime("%Y-%m-%d"),
               "precision": "fp32", "device": "cpu", "results": table}

    print()
    print(f"machine: {summary['machine']}; FP32 training on the CPU, median of "
          f"{args.repeats} runs each")
    print(f"{'model':<12} {'batch':>5} {'unfused img/s':>14} {'fused img/s':>12} "
          f"{'fused/unfused':>14} {'launches/step':>16} {'kernel bytes/step':>24}")
    for row in table:
        launches = f"{row['unfused_kernel_launches']} -> {row['fused_kernel_launches']}"
        traffic = f"{row['unfused_kernel_traffic']} -> {row['fused_kernel_traffic']}"
        print(f"{row['model']:<12} {row['batch_size']:>5} {row['unfused_images_per_sec']:>14.2f} "
              f"{row['fused_images_per_sec']:>12.2f} {row['ratio']:>13.2f}x {launches:>16} "
              f"{traffic:>24}")

    plt = save_summary(summary, args.out, "fusion")
    fig, axes = plt.subplots(1, len(table), figsize=(4 * len(table), 3.6))
    if len(table) == 1:
        axes = [axes]
    for ax, row in zip(axes, table):
        values = [row["unfused_images_per_sec"], row["fused_images_per_sec"]]
        bars = ax.bar(["unfused", "fused"], values, color=["#9e9e9e", "#1f77b4"])
        for bar, v in zip(bars, values):
            ax.text(bar.get_x() + bar.get_width() / 2, v, f"{v:.1f}", ha="center",
                    va="bottom")
        ax.set_title(f"{row['model']} (batch {row['batch_size']}): {row['ratio']:.2f}x")
        ax.set_ylabel("images/sec")
        ax.set_ylim(0, max(values) * 1.2)
    fig.suptitle(f"graphc FP32 training, CPU: {summary['machine']}", fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "fusion.png"), dpi=120)
    print(f"\nwrote {os.path.join(args.out, 'fusion.json')} and fusion.png")


if __name__ == "__main__":
    main()
