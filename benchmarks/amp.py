#!/usr/bin/python3
"""FP32 vs BF16 vs FP16 (AMP) training on the CPU, beside PyTorch, in one run.

  benchmarks/amp.py [--repeats 3] [--cases resnet50:32,fmnist_cnn:64]
                    [--torch-python PY] [--threads N] [--out benchmarks/results]

A case's model is one of graphc's own (resnet50, fmnist_cnn) or, with
--torch-python, any torchvision classifier graphc import takes (vit_b_16,
efficientnet_b0, ...): exported to ONNX in training form by that Python
(benchmarks/pytorch_cpu.py's export) and imported.

For each case (model, batch) it compiles the model three times (no --amp,
--amp=bf16, --amp=fp16 with dynamic loss scaling), records each plan's arena
(peak memory), and times these side by side in alternating rounds, so that a
drift in the machine's speed hits all alike:

  fp32        graphrun, the fp32 plan
  bf16        graphrun, the bf16 plan (oneDNN's native bf16 kernels where the
              CPU has AVX512-BF16 or AMX, else emulated through fp32)
  bf16-emul   the bf16 plan under ONEDNN_MAX_CPU_ISA=AVX512_CORE, i.e. emulated
              through fp32: only on CPUs with bf16 hardware, where it shows
              what the hardware buys
  fp16        graphrun, the fp16 plan (always emulated on CPUs)
  torch-fp32  PyTorch eager, channels_last (with --torch-python)
  torch-bf16  the same under torch.autocast("cpu", dtype=torch.bfloat16)

Each graphrun run reports the median images/sec of its timed steps (warmup
excluded) and its final loss; each PyTorch variant lives in one worker
process (benchmarks/pytorch_cpu.py's) that times the same number of steps
per round after a warmup step. The table gives the median over the rounds,
the ratio to graphrun fp32 and, for graphrun bf16, to PyTorch's bf16
autocast; the CPU model and how graphrun computed the half library calls
are recorded. Writes amp.json and amp.png into --out.

Needs a build (`./setup.sh build`) and Debian's python3-matplotlib (this
script runs under /usr/bin/python3); --torch-python names a Python with
torch and torchvision for the PyTorch columns.
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
from fusion import ROOT, save_summary, tool  # noqa: E402
from pytorch_cpu import Worker, is_transformer, machine  # noqa: E402

MODELS = {
    # name: file, timed steps, warmup steps, extra compile flags
    "resnet50": ("models/resnet50.mlir", 3, 1, []),
    "fmnist_cnn": ("models/fmnist_cnn.mlir", 30, 5, ["--lr", "0.01"]),
}
PLANS = [("fp32", []), ("bf16", ["--amp=bf16"]), ("fp16", ["--amp=fp16"])]
# graphrun variants: (name, plan, extra environment)
GRAPHRUN = [("fp32", "fp32", {}), ("bf16", "bf16", {}),
            ("bf16-emul", "bf16", {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE"}),
            ("fp16", "fp16", {})]
TORCH = [("torch-fp32", "eager"), ("torch-bf16", "bf16")]
COLORS = {"fp32": "#9e9e9e", "bf16": "#2ca02c", "bf16-emul": "#98df8a", "fp16": "#1f77b4",
          "torch-fp32": "#ffbb78", "torch-bf16": "#ff7f0e"}


def bf16_hardware():
    """Whether this CPU has bf16 instructions oneDNN uses (AVX512_BF16; every
    CPU with AMX has it too)."""
    try:
        with open("/proc/cpuinfo") as f:
            return "avx512_bf16" in re.search(r"flags\s*:\s*(.*)", f.read()).group(1).split()
    except (OSError, AttributeError):
        return False


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="rounds (median)")
    parser.add_argument("--cases", default="resnet50:32,fmnist_cnn:64",
                        help=f"MODEL:BATCH,... (models: {', '.join(MODELS)}, or with "
                             "--torch-python a torchvision classifier)")
    parser.add_argument("--torch-python", default=os.environ.get("GRAPHC_TORCH_PYTHON"),
                        help="a Python with torch and torchvision: adds PyTorch fp32 and "
                             "bf16 autocast")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"))
    parser.add_argument("--build", default=os.environ.get("GRAPHC_BUILD_DIR",
                                                          os.path.join(ROOT, "build")))
    args = parser.parse_args()
    if args.repeats < 1 or args.threads < 1:
        sys.exit("amp.py: --repeats and --threads must be at least 1")
    cases = []
    for item in args.cases.split(","):
        model, _, batch = item.partition(":")
        if not batch.isdigit() or int(batch) < 1 or (model not in MODELS and
                                                     not args.torch_python):
            sys.exit(f"amp.py: bad case '{item}' (MODEL:BATCH, MODEL one of {sorted(MODELS)}, "
                     "or with --torch-python a torchvision classifier)")
        cases.append((model, int(batch)))
    graphc, graphrun = tool("graphc", args.build), tool("graphrun", args.build)
    plans = os.path.join(args.out, "plans")
    os.makedirs(plans, exist_ok=True)
    native = bf16_hardware()
    systems = [g[0] for g in GRAPHRUN if native or g[0] != "bf16-emul"]
    if args.torch_python:
        systems += [t[0] for t in TORCH]

    # torchvision models: exported by --torch-python, imported by graphc (a
    # transformer at each case's batch, by graphc compile itself).
    models = {m: (os.path.join(ROOT, f), steps, warmup, flags)
              for m, (f, steps, warmup, flags) in MODELS.items()}
    for model, batch in cases:
        if model in models:
            continue
        onnx_path = os.path.join(plans, f"{model}.onnx")
        if subprocess.run([args.torch_python, os.path.join(ROOT, "benchmarks", "pytorch_cpu.py"),
                           "--export", model, onnx_path]).returncode != 0:
            sys.exit(f"amp.py: exporting torchvision's {model} failed")
        source = onnx_path
        if not is_transformer(model):
            source = os.path.join(plans, f"{model}.mlir")
            subprocess.run([graphc, "import", onnx_path, "-o", source], check=True,
                           stdout=subprocess.DEVNULL)
        models[model] = (source, 3, 1, [])

    results = {}
    for model, batch in cases:
        path, steps, warmup, flags = models[model]
        key = f"{model}:{batch}"
        entry = results[key] = {"model": model, "batch_size": batch, "steps": steps,
                                "warmup": warmup, "plans": {},
                                "systems": {s: {"runs": [], "losses": []} for s in systems}}
        for precision, amp in PLANS:
            plan = os.path.join(plans, f"{model}-b{batch}-{precision}.plan")
            out = subprocess.run([graphc, "compile", path, "--batch-size",
                                  str(batch), "-o", plan] + flags + amp,
                                 check=True, capture_output=True, text=True).stdout
            arena = int(re.search(r"peak memory \(arena\): .* \((\d+) bytes\)", out).group(1))
            entry["plans"][precision] = {"plan": plan, "arena": arena}
        arenas = ", ".join(f"{p} {entry['plans'][p]['arena'] / 2**20:.1f} MiB" for p, _ in PLANS)
        print(f"compiled {key}: arena {arenas}", flush=True)

    workers = {}

    def measure(key, system):
        entry = results[key]
        runs = entry["systems"][system]
        graphrun_variant = next((g for g in GRAPHRUN if g[0] == system), None)
        if graphrun_variant:
            _, precision, env = graphrun_variant
            report = os.path.join(plans, "amp-report.json")
            subprocess.run([graphrun, entry["plans"][precision]["plan"], "--steps",
                            str(entry["steps"]), "--warmup", str(entry["warmup"]),
                            "--threads", str(args.threads), "--report", report],
                           check=True, stdout=subprocess.DEVNULL, env={**os.environ, **env})
            with open(report) as f:
                j = json.load(f)
            rate = j["images_per_sec"]
            runs["losses"].append(j["final_loss"])
            runs["library_math"] = j.get("library_math", "fp32")
            runs["skipped_steps"] = j.get("skipped_steps")
        else:
            mode = dict(TORCH)[system]
            if (key, system) not in workers:
                workers[(key, system)] = Worker(args.torch_python, entry["model"],
                                                entry["batch_size"], mode, args.threads)
            rate = workers[(key, system)].run(entry["steps"], entry["batch_size"])
        runs["runs"].append(rate)
        return rate

    try:
        for key in results:
            for system, mode in TORCH:
                if system in systems:  # started (and warmed) before the rounds
                    workers[(key, system)] = Worker(args.torch_python, results[key]["model"],
                                                    results[key]["batch_size"], mode,
                                                    args.threads)
            for r in range(args.repeats):
                rates = [f"{s} {measure(key, s):.2f}" for s in systems]
                print(f"{key} round {r + 1}/{args.repeats}: " + ", ".join(rates) +
                      " images/sec", flush=True)
            for system, _ in TORCH:
                if (key, system) in workers:
                    workers.pop((key, system)).close()
    finally:
        for w in workers.values():
            w.proc.kill()

    table = []
    for key, entry in results.items():
        rates = {s: statistics.median(v["runs"]) for s, v in entry["systems"].items()}
        for s, v in entry["systems"].items():
            plan = next((g[1] for g in GRAPHRUN if g[0] == s), None)
            row = {"model": entry["model"], "system": s, "batch_size": entry["batch_size"],
                   "steps": entry["steps"], "warmup": entry["warmup"],
                   "repeats": args.repeats, "images_per_sec": rates[s],
                   "spread": [min(v["runs"]), max(v["runs"])], "runs": v["runs"],
                   "vs_graphrun_fp32": rates[s] / rates["fp32"]}
            if plan:
                row.update({"arena_bytes": entry["plans"][plan]["arena"],
                            "arena_vs_fp32": entry["plans"][plan]["arena"] /
                            entry["plans"]["fp32"]["arena"],
                            "final_loss": statistics.median(v["losses"]),
                            "library_math": v["library_math"],
                            "skipped_steps": v["skipped_steps"]})
            if s.startswith("bf16") and "torch-bf16" in rates:
                row["vs_torch_bf16"] = rates[s] / rates["torch-bf16"]
            table.append(row)
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    summary = {"machine": machine(), "bf16_hardware": native, "date": time.strftime("%Y-%m-%d"),
               "commit": commit, "device": "cpu", "threads": args.threads, "results": table}
    if args.torch_python:
        probe = subprocess.run([args.torch_python, "-c", "import torch; print(torch.__version__)"],
                               capture_output=True, text=True)
        summary["pytorch"] = probe.stdout.strip()

    print()
    print(f"machine: {summary['machine']}; bf16 hardware: {'yes' if native else 'no'}; "
          f"{args.threads} threads; median of {args.repeats} rounds [min, max]")
    print(f"{'model':<11} {'system':<10} {'batch':>5} {'img/s':>8} {'[min, max]':>16} "
          f"{'vs fp32':>8} {'vs torch-bf16':>13} {'arena MiB':>10} {'final loss':>10}  "
          f"library math")
    for row in table:
        spread = f"[{row['spread'][0]:.2f}, {row['spread'][1]:.2f}]"
        torch_ratio = f"{row['vs_torch_bf16']:.2f}x" if "vs_torch_bf16" in row else ""
        arena = f"{row['arena_bytes'] / 2**20:.1f}" if "arena_bytes" in row else ""
        loss = f"{row['final_loss']:.4f}" if "final_loss" in row else ""
        print(f"{row['model']:<11} {row['system']:<10} {row['batch_size']:>5} "
              f"{row['images_per_sec']:>8.2f} {spread:>16} {row['vs_graphrun_fp32']:>7.2f}x "
              f"{torch_ratio:>13} {arena:>10} {loss:>10}  {row.get('library_math', '')}")

    plt = save_summary(summary, args.out, "amp")
    fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 3.8), squeeze=False)
    for col, key in enumerate(results):
        rows = [row for row in table if f"{row['model']}:{row['batch_size']}" == key]
        ax = axes[0][col]
        values = [row["images_per_sec"] for row in rows]
        bars = ax.bar([row["system"] for row in rows], values,
                      color=[COLORS[row["system"]] for row in rows])
        for i, (bar, row) in enumerate(zip(bars, rows)):
            ax.text(bar.get_x() + bar.get_width() / 2, row["images_per_sec"],
                    f"{row['images_per_sec']:.1f}", ha="center", va="bottom", fontsize=8)
            ax.plot([i, i], row["spread"], color="black", linewidth=1)
        ax.set_ylabel("images/sec (median)")
        ax.set_ylim(0, max(values) * 1.2)
        ax.tick_params(axis="x", labelsize=7, rotation=30)
        ax.set_title(f"{rows[0]['model']} (batch {rows[0]['batch_size']})")
    fig.suptitle(f"graphc AMP training vs PyTorch, CPU: {summary['machine']}", fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "amp.png"), dpi=120)
    print(f"\nwrote {os.path.join(args.out, 'amp.json')} and amp.png")


if __name__ == "__main__":
    main()
