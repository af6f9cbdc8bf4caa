#!/usr/bin/python3
"""graphrun beside PyTorch on the CPU: throughput, peak memory, and contention.

  benchmarks/pytorch_cpu.py [--rounds 3] [--cases resnet50:8,resnet50:32,resnet50:8x4,vgg16:8]
                            [--torch-python PY] [--out benchmarks/results] [--name NAME]

For each case (model, batch; MODEL:BxN for N micro-batches of B a step,
gradient accumulation: `graphc compile --grad-accumulation N`, and in PyTorch
N `(loss / N).backward()` calls before the optimizer's step) it trains
ResNet-50 v1.5 or VGG16 from graphc's
zoo, or any torchvision classifier graphc import takes (mobilenet_v2,
densenet121, ...: exported to ONNX by --torch-python in training form at
224 px with its stochastic depth, which both sides draw, then imported), or
timm's as timm:NAME (timm installed for --torch-python; imported at each
case's batch with the float buffers the graph reads frozen), at 224 px, FP32,
random data, SGD with momentum 0.9 and weight decay 1e-4, four ways:

  fused     graphrun on graphc's default plan (fusion, recomputation, NHWC)
  nchw      the same with `--layout=nchw` (what channels-last gains)
  unfused   graphrun on `graphc compile --no-fuse`
  eager     PyTorch eager, channels_last (oneDNN's preferred layout)
  compile   torch.compile of the same, channels_last

in alternating rounds (fused, nchw, unfused, eager, compile, fused, ...) so that a
drift in the machine's speed hits all alike. Each PyTorch variant lives in one
worker process for the whole benchmark (torch.compile compiles once) and times
a few steps per round after one warmup step; graphrun runs once per round.
The table gives the median images/sec over the rounds and their spread, the
peak resident memory of each while training (graphrun: its whole run;
PyTorch: from the first timed step, after /proc/self/clear_refs resets the
high-water mark, so torch.compile's compiler is not counted), graphc's arena,
and the slowdown of each with one competing CPU-bound process (a busy loop)
running beside it: the median over the quiet rounds against the median over
the contended ones, which are spread between the quiet ones. The CPU model
is recorded. Writes NAME.json and NAME.png (default pytorch_cpu) into --out.

Needs a build (`./setup.sh build`), Debian's python3-matplotlib (this script
runs under /usr/bin/python3) and a Python with torch and torchvision for the
workers (`pip install torch torchvision`; --torch-python names it).
"""
import argparse
import json
import os
import platform
import re
import select
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = {"resnet50": "models/resnet50.mlir", "vgg16": "models/vgg16.mlir"}
SYSTEMS = ["fused", "nchw", "unfused", "eager", "compile"]
GRAPHRUN = {"fused": [], "nchw": ["--layout=nchw"], "unfused": ["--no-fuse"]}
COLORS = {"fused": "#1f77b4", "nchw": "#6baed6", "unfused": "#9e9e9e", "eager": "#ff7f0e",
          "compile": "#d62728"}


def machine():
    """The CPU model, its family/model numbers and widest vector ISA."""
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
        cpu = re.search(r"model name\s*:\s*(.*)", info).group(1)
        family = re.search(r"cpu family\s*:\s*(\d+)", info).group(1)
        model = re.search(r"^model\s*:\s*(\d+)", info, re.M).group(1)
        flags = set(re.search(r"flags\s*:\s*(.*)", info).group(1).split())
        isa = next((f for f in ("amx_tile", "avx512_bf16", "avx512f", "avx2") if f in flags),
                   "sse")
        cpu += f" (family {family} model {model}, {isa})"
    except (OSError, AttributeError):
        pass
    return f"{cpu}, {os.cpu_count()} cores"


# ---------------------------------------------------------------- the worker

def fmnist_cnn():
    """models/fmnist_cnn.mlir in PyTorch: 2x (conv3x3 + bn + relu + maxpool2),
    fc 3136-128-10."""
    import torch.nn as nn
    def block(cin, cout):
        return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
                nn.ReLU(), nn.MaxPool2d(2)]
    return nn.Sequential(*block(1, 32), *block(32, 64), nn.Flatten(), nn.Linear(3136, 128),
                         nn.ReLU(), nn.Linear(128, 10))


def is_transformer(name):
    """Models imported at a fixed batch: attention merges the batch with its
    heads, and timm's models often merge it with other dims."""
    return name.startswith(("vit_", "swin_", "timm:"))


def torchvision_model(name):
    """torchvision's `name` as constructed, or timm's for timm:NAME (pip
    install timm): its dropout and stochastic depth stay as the model sets
    them (graphc imports both and draws its own masks)."""
    if name.startswith("timm:"):
        import timm
        return timm.create_model(name[5:], pretrained=False, num_classes=1000)
    import torchvision
    return getattr(torchvision.models, name)(num_classes=1000)


def export(name, path):
    """Runs under --torch-python: torchvision's `name` as ONNX, training form."""
    import torch
    import warnings
    warnings.filterwarnings("ignore")
    torch.manual_seed(0)
    model = torchvision_model(name).train()
    import zoo  # beside this file: the exporter and --freeze's list
    # Attention merges the batch with its heads: a symbolic batch axis, which
    # graphc import fixes at each case's batch. Traced at batch 2: at 1,
    # stochastic depth's per-sample noise [1, 1, 1, 1] could be one draw for
    # the whole batch, and graphc import refuses it.
    zoo.export_training(model, torch.randn(2, 3, 224, 224), path,
                        symbolic_batch=is_transformer(name))
    # PyTorch's float buffers the graph reads, beside the file.
    with open(path + ".freeze", "w") as f:
        json.dump(zoo.frozen_buffers(model, path), f)


def worker(model_name, batch, mode, threads, micro_batches=1):
    """One PyTorch variant: builds it, answers `run STEPS` lines on stdin with
    a JSON line of step times and the peak RSS since the timed steps began.
    Modes: eager, compile (torch.compile), bf16 (eager under
    torch.autocast("cpu", dtype=torch.bfloat16)); all channels_last. A step
    is `micro_batches` forward and backward passes of `batch` images, the
    gradients accumulating, then the optimizer's step."""
    import torch
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    if model_name == "fmnist_cnn":
        model, shape, classes = fmnist_cnn(), (1, 28, 28), 10
    else:
        model, shape, classes = torchvision_model(model_name), (3, 224, 224), 1000
    model = model.to(memory_format=torch.channels_last).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    images = torch.randn(batch, *shape).to(memory_format=torch.channels_last)
    labels = torch.randint(0, classes, (batch,))
    loss_fn = torch.nn.CrossEntropyLoss()
    run_model = torch.compile(model) if mode == "compile" else model

    def step():
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for _ in range(micro_batches):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=mode == "bf16"):
                loss = loss_fn(run_model(images), labels) / micro_batches
            loss.backward()
            total += loss.item()
        opt.step()
        return total

    started = time.perf_counter()
    step()  # torch.compile compiles here
    print(json.dumps({"ready": True, "first_step_s": time.perf_counter() - started}),
          flush=True)
    for line in sys.stdin:
        words = line.split()
        if not words or words[0] != "run":
            break
        steps = int(words[1])
        step()  # one warmup step after whatever ran in between
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS
        times = []
        for _ in range(steps):
            t = time.perf_counter()
            step()
            times.append(time.perf_counter() - t)
        with open("/proc/self/status") as f:
            hwm = int(re.search(r"VmHWM:\s*(\d+) kB", f.read()).group(1))
        print(json.dumps({"step_s": times, "peak_rss_kib": hwm}), flush=True)


class Worker:
    def __init__(self, python, model, batch, mode, threads, micro_batches=1):
        self.proc = subprocess.Popen(
            [python, os.path.abspath(__file__), "--worker", model, str(batch), mode,
             str(threads), str(micro_batches)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.ready = self._read(timeout=3600)
        self.peak = 0

    def _read(self, timeout):
        # The worker's answers are JSON lines; anything else it prints is not.
        while True:
            ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
            line = self.proc.stdout.readline() if ready else ""
            if not line:
                self.proc.kill()
                sys.exit(f"pytorch_cpu.py: a PyTorch worker ({self.proc.args[3:6]}) stopped "
                         "without answering (is torch installed for --torch-python?)")
            if line.startswith("{"):
                return json.loads(line)

    def run(self, steps, batch):
        self.proc.stdin.write(f"run {steps}\n")
        self.proc.stdin.flush()
        answer = self._read(timeout=3600)
        self.peak = max(self.peak, answer["peak_rss_kib"])
        return batch / statistics.median(answer["step_s"])

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)


# ---------------------------------------------------------------- the harness

def graphrun(binary, plan, steps, threads, report):
    """One graphrun run: images/sec and its peak RSS (KiB)."""
    proc = subprocess.Popen([binary, plan, "--steps", str(steps), "--warmup", "1",
                             "--threads", str(threads), "--report", report],
                            stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        sys.exit(f"pytorch_cpu.py: graphrun {plan} failed ({status})")
    with open(report) as f:
        return json.load(f)["images_per_sec"], usage.ru_maxrss


def competitor():
    """One CPU-bound process beside the measured one."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        model, batch, mode, threads, micro_batches = sys.argv[2:7]
        return worker(model, int(batch), mode, int(threads), int(micro_batches))
    if len(sys.argv) > 1 and sys.argv[1] == "--export":
        return export(sys.argv[2], sys.argv[3])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="quiet rounds (median)")
    parser.add_argument("--contended-rounds", type=int, default=1,
                        help="rounds with one competing CPU-bound process")
    parser.add_argument("--cases", default="resnet50:8,resnet50:32,vgg16:8",
                        help="MODEL:BATCH[xN],... (models: resnet50, vgg16, or a torchvision "
                             "classifier graphc import takes; xN: N micro-batches of BATCH "
                             "a step)")
    parser.add_argument("--name", default="pytorch_cpu", help="the output files' name")
    parser.add_argument("--steps", type=int, default=0,
                        help="timed steps per run (default: 4 at batch 8, 3 above)")
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--torch-python", default=os.environ.get("GRAPHC_TORCH_PYTHON",
                                                                 "python3"))
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"))
    parser.add_argument("--build", default=os.environ.get("GRAPHC_BUILD_DIR",
                                                          os.path.join(ROOT, "build")))
    args = parser.parse_args()
    if args.rounds < 1 or args.contended_rounds < 0:
        sys.exit("pytorch_cpu.py: --rounds must be at least 1, --contended-rounds at least 0")
    systems = args.systems.split(",")
    if not systems or any(s not in SYSTEMS for s in systems):
        sys.exit(f"pytorch_cpu.py: --systems must name some of {SYSTEMS}")
    cases = []
    for item in args.cases.split(","):
        model, _, size = item.rpartition(":")
        batch, _, micro = size.partition("x")
        if (not re.fullmatch(r"(timm:)?[a-z0-9_]+", model) or not batch.isdigit() or int(batch) < 1
                or not (micro == "" or (micro.isdigit() and int(micro) >= 1))):
            sys.exit(f"pytorch_cpu.py: bad case '{item}' (MODEL:BATCH or MODEL:BATCHxN, MODEL "
                     f"one of {sorted(MODELS)}, a torchvision classifier or timm:NAME)")
        cases.append((model, int(batch), int(micro or 1)))
    graphc = os.path.join(args.build, "bin", "graphc")
    graphrun_bin = os.path.join(args.build, "bin", "graphrun")
    for path in (graphc, graphrun_bin):
        if not os.path.exists(path):
            sys.exit(f"pytorch_cpu.py: {path} not found; run ./setup.sh build first")
    plans = os.path.join(args.out, "plans")
    os.makedirs(plans, exist_ok=True)

    # torchvision models: exported by --torch-python, imported by graphc.
    sources = dict((m, os.path.join(ROOT, f)) for m, f in MODELS.items())
    for model, _, _ in cases:
        if model in sources:
            continue
        onnx_path = os.path.join(plans, f"{model.replace(':', '_')}.onnx")
        if subprocess.run([args.torch_python, os.path.abspath(__file__), "--export", model,
                           onnx_path]).returncode != 0:
            sys.exit(f"pytorch_cpu.py: exporting {model} failed")
        if is_transformer(model):
            # Imported at each case's batch size (below).
            sources[model] = onnx_path
            continue
        sources[model] = os.path.join(plans, f"{model}.mlir")
        subprocess.run([graphc, "import", onnx_path, "-o", sources[model]], check=True,
                       stdout=subprocess.DEVNULL)

    results = {}
    for model, batch, micro in cases:
        steps = args.steps or (4 if batch * micro <= 8 else 3)
        key = f"{model}:{batch}" + (f"x{micro}" if micro > 1 else "")
        accumulate = ["--grad-accumulation", str(micro)] if micro > 1 else []
        entry = results[key] = {"model": model, "batch_size": batch * micro,
                                "micro_batch": batch, "micro_batches": micro, "steps": steps,
                                "systems": {s: {"quiet": [], "contended": [], "peak_rss_mib": 0}
                                            for s in systems}}
        file = model.replace(":", "_")
        source = sources[model]
        frozen = source + ".freeze"
        if os.path.exists(frozen):
            with open(frozen) as f:
                frozen = json.load(f)
            if frozen:
                # graphc compile imports with no --freeze: import here.
                source = os.path.join(plans, f"{file}-b{batch}.mlir")
                subprocess.run([graphc, "import", sources[model], "--batch", str(batch),
                                "--freeze", ",".join(frozen), "-o", source], check=True,
                               stdout=subprocess.DEVNULL)
        # graphc's memory plan at each recomputation setting (compile only).
        entry["arena_mib"] = {}
        for remat in ("all", "fused", "off"):
            plan = os.path.join(plans, f"{file}-b{batch}x{micro}-remat-{remat}.plan")
            out = subprocess.run([graphc, "compile", source,
                                  "--batch-size", str(batch), "--remat", remat,
                                  "--memory-report", "-o", plan] + accumulate,
                                 check=True, capture_output=True, text=True).stdout
            arena = re.search(r"train_step: arena ([\d.]+) MiB", out).group(1)
            entry["arena_mib"][remat] = float(arena)
        for s, flags in GRAPHRUN.items():
            if s in systems:
                plan = os.path.join(plans, f"{file}-b{batch}x{micro}-{s}.plan")
                subprocess.run([graphc, "compile", source,
                                "--batch-size", str(batch), "-o", plan] + flags + accumulate,
                               check=True, stdout=subprocess.DEVNULL)
                entry["systems"][s]["plan"] = plan
        print(f"compiled {key}: arena {entry['arena_mib']} MiB (recompute all / fused / off)",
              flush=True)

    workers = {}

    def measure(key, system, contended):
        entry = results[key]
        runs = entry["systems"][system]
        busy = competitor() if contended else None
        try:
            if system in GRAPHRUN:
                report = os.path.join(plans, "report.json")
                rate, rss = graphrun(graphrun_bin, runs["plan"], entry["steps"], args.threads,
                                     report)
                if not contended:
                    runs["peak_rss_mib"] = max(runs["peak_rss_mib"], rss / 1024)
            else:
                if (key, system) not in workers:
                    workers[(key, system)] = Worker(args.torch_python, entry["model"],
                                                    entry["micro_batch"], system, args.threads,
                                                    entry["micro_batches"])
                w = workers[(key, system)]
                w.peak = 0
                rate = w.run(entry["steps"], entry["batch_size"])
                if not contended:
                    runs["peak_rss_mib"] = max(runs["peak_rss_mib"], w.peak / 1024)
        finally:
            if busy:
                busy.kill()
                busy.wait()
        runs["contended" if contended else "quiet"].append(rate)
        return rate

    try:
        for key in results:
            # Start (and compile) the PyTorch workers before the timed rounds.
            for system in ("eager", "compile"):
                if system in systems:
                    workers[(key, system)] = Worker(args.torch_python, results[key]["model"],
                                                    results[key]["micro_batch"], system,
                                                    args.threads, results[key]["micro_batches"])
            # Contended rounds between the quiet ones, so that a slowdown
            # compares rounds close in time (a shared host's speed drifts).
            order = []
            quiet, busy = args.rounds, args.contended_rounds
            while quiet or busy:
                if quiet and quiet * (args.contended_rounds + 1) >= busy * (args.rounds + 1):
                    order.append(False)
                    quiet -= 1
                else:
                    order.append(True)
                    busy -= 1
            done_quiet = 0
            for contended in order:
                rates = [f"{s} {measure(key, s, contended):.2f}" for s in systems]
                done_quiet += not contended
                label = "contended" if contended else f"round {done_quiet}/{args.rounds}"
                print(f"{key} {label}: " + ", ".join(rates) + " images/sec", flush=True)
            for system in ("eager", "compile"):
                if (key, system) in workers:
                    workers.pop((key, system)).close()
    finally:
        for w in workers.values():
            w.proc.kill()

    table = []
    for key, entry in results.items():
        row = {"model": entry["model"], "batch_size": entry["batch_size"],
               "micro_batches": entry["micro_batches"],
               "steps": entry["steps"], "arena_mib": entry["arena_mib"], "systems": {}}
        for s, runs in entry["systems"].items():
            quiet = statistics.median(runs["quiet"])
            row["systems"][s] = {
                "images_per_sec": quiet,
                "spread": [min(runs["quiet"]), max(runs["quiet"])],
                "rounds": runs["quiet"],
                "peak_rss_mib": runs["peak_rss_mib"],
                "contended_images_per_sec": (statistics.median(runs["contended"])
                                             if runs["contended"] else None),
                "contended": runs["contended"],  # images/sec per contended round
            }
            if runs["contended"]:
                row["systems"][s]["slowdown"] = quiet / row["systems"][s]["contended_images_per_sec"]
        table.append(row)
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    summary = {"machine": machine(), "date": time.strftime("%Y-%m-%d"), "commit": commit,
               "precision": "fp32",
               "device": "cpu", "threads": args.threads, "rounds": args.rounds,
               "contended_rounds": args.contended_rounds, "results": table}
    probe = subprocess.run([args.torch_python, "-c", "import torch; print(torch.__version__)"],
                           capture_output=True, text=True)
    summary["pytorch"] = probe.stdout.strip()

    print()
    print(f"machine: {summary['machine']}; FP32 training, {args.threads} threads, "
          f"PyTorch {summary['pytorch']}; median of {args.rounds} rounds [min, max]")
    for row in table:
        split = (f" in {row['micro_batches']} micro-batches" if row["micro_batches"] > 1 else "")
        print(f"{row['model']} batch {row['batch_size']}{split} (graphc arena: recompute all "
              f"{row['arena_mib']['all']:.0f} MiB, fused {row['arena_mib']['fused']:.0f}, "
              f"off {row['arena_mib']['off']:.0f}):")
        base = row["systems"].get("eager")
        for s, v in row["systems"].items():
            line = (f"  {s:<8} {v['images_per_sec']:6.2f} img/s "
                    f"[{v['spread'][0]:.2f}, {v['spread'][1]:.2f}]")
            if base and s != "eager":
                line += f"  {v['images_per_sec'] / base['images_per_sec']:.2f}x eager"
            line += f"  peak RSS {v['peak_rss_mib']:.0f} MiB"
            if base and s != "eager" and base["peak_rss_mib"]:
                line += f" ({v['peak_rss_mib'] / base['peak_rss_mib']:.2f}x eager)"
            if v.get("slowdown"):
                line += f"  slowdown beside a busy process {v['slowdown']:.2f}x"
            print(line)

    with open(os.path.join(args.out, f"{args.name}.json"), "w") as f:
        json.dump(summary, f, indent=2)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("pytorch_cpu.py: matplotlib is missing (apt-get install python3-matplotlib); "
                 "the JSON is written")
    panels = [("images_per_sec", "images/sec (median)"), ("peak_rss_mib", "peak RSS (MiB)")]
    if args.contended_rounds:
        panels.append(("slowdown", "slowdown beside a busy process"))
    fig, axes = plt.subplots(len(panels), len(table), figsize=(4 * len(table), 2.9 * len(panels)),
                             squeeze=False)
    for c, row in enumerate(table):
        for r, (field, label) in enumerate(panels):
            ax = axes[r][c]
            names = [s for s in row["systems"] if row["systems"][s].get(field)]
            values = [row["systems"][s][field] for s in names]
            bars = ax.bar(names, values, color=[COLORS[s] for s in names])
            for bar, v in zip(bars, values):
                ax.text(bar.get_x() + bar.get_width() / 2, v,
                        f"{v:.0f}" if field == "peak_rss_mib" else f"{v:.2f}",
                        ha="center", va="bottom", fontsize=8)
            if field == "images_per_sec":
                for i, s in enumerate(names):
                    lo, hi = row["systems"][s]["spread"]
                    ax.plot([i, i], [lo, hi], color="black", linewidth=1)
                ax.set_title(f"{row['model']}, batch {row['batch_size']}" +
                             (f" ({row['micro_batches']} x {row['batch_size'] // row['micro_batches']})"
                              if row["micro_batches"] > 1 else ""))
            ax.set_ylabel(label, fontsize=8)
            if values:
                ax.set_ylim(0, max(values) * 1.2)
            ax.tick_params(labelsize=8)
    fig.suptitle(f"graphrun vs PyTorch, FP32 training on the CPU:\n{summary['machine']}, "
                 f"{args.threads} threads, PyTorch {summary['pytorch']}", fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, f"{args.name}.png"), dpi=120)
    print(f"\nwrote {os.path.join(args.out, args.name + '.json')} and {args.name}.png")


if __name__ == "__main__":
    main()
