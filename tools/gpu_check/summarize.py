"""Gathers what tools/gpu-check's stages wrote into one JSON and one chart.

  summarize.py OUT_DIR [MORE_DIRS...]

Reads every stage's files from the folders given (the stages may have run in
separate calls on the GPU machine, their outputs fetched into several folders),
writes OUT_DIR/gpu-check.json and OUT_DIR/gpu-check.png (ResNet-50 images/sec:
graphrun fused/unfused, with and without CUDA Graphs, beside PyTorch eager, per
batch size) and prints the figures and the issue's three goals:
fused >= PyTorch eager (same batch, same math), fused / unfused >= 1.3,
graphs on >= off. matplotlib is optional (no chart without it).
"""
import glob
import json
import os
import sys


def load(dirs, pattern):
    found = {}
    for d in dirs:
        for path in sorted(glob.glob(os.path.join(d, pattern))):
            with open(path) as f:
                try:
                    found[os.path.basename(path)] = json.load(f)
                except json.JSONDecodeError as e:
                    found[os.path.basename(path)] = {"error": f"unreadable: {e}"}
    return found


def main():
    out, dirs = sys.argv[1], sys.argv[1:]
    summary = {"stages": {}}
    for name in ("environment", "conformance", "collectives", "equivalence", "gradcheck"):
        for d in dirs:
            path = os.path.join(d, f"{name}.json")
            if os.path.exists(path):
                with open(path) as f:
                    summary["stages"][name] = json.load(f)
    runs = load(dirs, "graphrun_*.json")
    torch = load(dirs, "pytorch_*.json")
    # graphrun_BATCH_{fused,unfused}_{graphs,nographs}_{fp32,tf32,fp16}.json:
    # what the run asked for (the report's cuda_graphs says what it got);
    # fp16 is --amp=fp16, PyTorch's reference for it pytorch_BATCH_fp16.json
    # (autocast + GradScaler, math "fp16 amp").
    table, asked = [], {}
    for key, r in sorted(runs.items()):
        name = key[len("graphrun_"):-len(".json")]
        parts = name.split("_")
        if len(parts) == 4:
            asked[(int(parts[0]), parts[1] == "fused", parts[2] == "graphs", parts[3])] = r
        table.append({"run": name, "batch": r.get("batch_size"),
                      "fused": r.get("fused"), "cuda_graphs": r.get("cuda_graphs"),
                      "math": r.get("math"), "images_per_sec": r.get("images_per_sec"),
                      "step_ms_median": r.get("step_ms_median"), "device": r.get("device_description")})
    for key, r in sorted(torch.items()):
        table.append({"run": key[:-5], "batch": r.get("batch_size"), "fused": None,
                      "cuda_graphs": None, "math": r.get("math"),
                      "images_per_sec": r.get("images_per_sec"),
                      "step_ms_median": r.get("step_ms_median"), "device": r.get("device")})
    summary["throughput"] = table

    def rate(batch, fused, graphs, math="fp32"):
        return asked.get((batch, fused, graphs, math), {}).get("images_per_sec")

    def torch_rate(batch, math="fp32"):
        for r in torch.values():
            if r.get("batch_size") == batch and r.get("math") == math:
                return r.get("images_per_sec")
        return None

    goals = []
    for batch in sorted({key[0] for key in asked}):
        fused, unfused = rate(batch, True, True), rate(batch, False, True)
        eager_fused, ref = rate(batch, True, False), torch_rate(batch)
        g = {"batch": batch}
        if fused and ref:
            g["fused_over_pytorch"] = fused / ref
        if fused and unfused:
            g["fused_over_unfused"] = fused / unfused
        if fused and eager_fused:
            g["graphs_over_no_graphs"] = fused / eager_fused
        amp, amp_ref = rate(batch, True, True, "fp16"), torch_rate(batch, "fp16 amp")
        if amp and amp_ref:
            g["fp16_amp_over_pytorch_amp"] = amp / amp_ref
        if amp and fused:
            g["fp16_amp_over_fp32"] = amp / fused
        goals.append(g)
    summary["goals"] = goals
    with open(os.path.join(out, "gpu-check.json"), "w") as f:
        json.dump(summary, f, indent=2)

    for name, stage in summary["stages"].items():
        print(f"{name}: {'ok' if stage.get('ok') else 'FAILED'} {stage.get('summary', '')}")
    print(f"{'run':30} {'batch':>5} {'images/sec':>11} {'step ms':>9}  graphs replayed")
    for r in table:
        ips = r["images_per_sec"]
        ms = r["step_ms_median"]
        print(f"{r['run']:30} {r['batch'] or 0:>5} {ips if ips is not None else float('nan'):>11.1f} "
              f"{ms if ms is not None else float('nan'):>9.1f}  {r['cuda_graphs']}")
    for g in goals:
        print(f"batch {g['batch']}: " + ", ".join(
            f"{k} {v:.2f}x" for k, v in g.items() if k != "batch"))

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("summarize: no matplotlib, no chart")
        return
    batches = sorted({r["batch"] for r in table if r["batch"]})
    series = [("graphrun fused, graphs", lambda b: rate(b, True, True)),
              ("graphrun fused, no graphs", lambda b: rate(b, True, False)),
              ("graphrun unfused, graphs", lambda b: rate(b, False, True)),
              ("graphrun unfused, no graphs", lambda b: rate(b, False, False)),
              ("PyTorch eager", torch_rate)]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    width = 0.8 / len(series)
    for i, (label, f) in enumerate(series):
        values = [f(b) or 0 for b in batches]
        ax.bar([x + i * width for x in range(len(batches))], values, width, label=label)
    ax.set_xticks([x + width * (len(series) - 1) / 2 for x in range(len(batches))])
    ax.set_xticklabels([f"batch {b}" for b in batches])
    ax.set_ylabel("images/sec (median step)")
    device = next((r["device"] for r in table if r["device"]), "GPU")
    model = next((r.get("model") for r in runs.values() if r.get("model")), "resnet50")
    ax.set_title(f"{model} FP32 training on {device}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "gpu-check.png"), dpi=120)


if __name__ == "__main__":
    main()
