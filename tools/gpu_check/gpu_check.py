#!/usr/bin/env python3
"""Every GPU check of graphc's CUDA backend, shaped to fit one short GPU loan.

  tools/gpu-check prepare [DIR]             here, where graphc builds
  tools/gpu-check run [DIR] [OUT] [PHASE...] on the GPU machine
  tools/gpu-check summarize OUT SOURCE...   here, over what several calls sent back

`prepare` builds graphc, compiles the plans and gathers graphrun, the runtime
tests and the few libraries they need (oneDNN xz-packed) into DIR (default
.gpu-check). `run` runs the phases in the order one loan wants them:

  p0     the environment (~20 s): GPU, driver, which cudart/cuDNN/cuBLAS/NCCL
         the loader finds and where, their versions, ldd of graphrun and of
         every cuDNN sub-library, PyTorch
  p1     does it run and agree (~200 s cap): the backend conformance suite on
         CUDA (deterministic algorithms), NCCL on one rank, CPU == CUDA after
         training steps (and one ResNet-50 step at batch 64, whose large
         kernels run vectorized), the library-heavy gradient checks
  p2     a ResNet-50 smoke run at batch 64 (~60 s): load and step times
  pdiag  only when p1 or p2 failed: the first failing command again with
         --sync-debug and cuDNN's debug log, then under compute-sanitizer
  p3     throughput at batch 256, each graphrun variant next to its PyTorch
         counterpart on the same math (fp16 AMP, channels-last, vs autocast +
         GradScaler; fp32; fp32 channels-last; unfused; TF32; and CUDA Graphs
         off at batch 64), so that a cut still leaves ratios

Every process runs under a timeout; a run whose estimate would pass the
deadline (GPU_CHECK_DEADLINE seconds after `run` starts, default 540) is
skipped and recorded as such. After every stage OUT holds at most five files:
gpu-check.log (timestamped), gpu-check.json (every stage and run, margins,
goals), gpu-check.png, environment.txt and gpu-check.tar.gz (everything else:
reports, test JSON, cuDNN logs, sanitizer output).

Knobs (environment): GPU_CHECK_DEADLINE, GPU_CHECK_BATCHES (p3, default
"256"), GPU_CHECK_VARIANTS (p3, default "fp16 fp32 nhwc unfused tf32 nographs"),
GPU_CHECK_GRADCHECK_CASES, GPU_CHECK_STEPS / GPU_CHECK_WARMUP (p2/p3 timed
and warmup steps), GPU_CHECK_DEVICE=cpu and GPU_CHECK_QUICK=1 (CTest's dry run
on the CPU, with small models), GPU_CHECK_FORCE_DIAG=1 (run pdiag anyway),
GPU_CHECK_PYTHON (a Python with torch for the PyTorch side).
"""
import datetime
import glob
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PHASES = ["p0", "p1", "p2", "pdiag", "pprof", "p3"]
# Each phase's most seconds (p3: whatever the deadline leaves), so that a slow
# or hanging stage cannot eat the phases after it; time a phase leaves unused
# passes to the next.
PHASE_BUDGET = {"p0": 30, "p1": 240, "p2": 90, "pdiag": 150, "pprof": 90, "p3": None}
# The five files `run` leaves in OUT (the device tool brings back eight).
OUT_FILES = ["gpu-check.log", "gpu-check.json", "gpu-check.png", "environment.txt",
             "gpu-check.tar.gz"]
# The gradient checks whose ops run through cuDNN and cuBLAS, and the
# reductions: what a GPU can get wrong that the CPU run did not.
LIBRARY_CASES = ["conv2d_strided_dilated_grouped", "max_pool2d", "avg_pool2d",
                 "avg_pool2d_exclude_padding", "linear_matmul", "batch_norm", "global_avg_pool",
                 # generated kernels no GPU has run yet: concat and slice copies, sigmoid,
                 # erf (libdevice), softmax and layer norm as imported, batched matmul
                 "concat_slice", "split_shuffle", "sigmoid", "erf", "softmax_layer_norm",
                 "batched_matmul", "gather",
                 # fused attention on CUDA (cuBLAS strided-batched products and
                 # the row kernels of runtime/backends/cuda/attention.cu)
                 "attention", "attention_transposed_k", "attention_bias"]
QUICK_CASES = ["relu", "conv2d_strided_dilated_grouped", "avg_pool2d"]
VARIANTS = ["fp16", "fp32", "nhwc", "unfused", "tf32", "nographs"]
# graphrun variant -> (plan name, graphrun flags, PyTorch counterpart flags or None)
VARIANT_RUNS = {
    "fp16": ("fp16", [], ["--amp"]),
    "fp32": ("fused", [], []),
    # FP32 channels-last (OHWI filters): decides CUDA's FP32 default layout.
    "nhwc": ("nhwc", [], None),
    "unfused": ("unfused", [], None),
    "tf32": ("fused", ["--tf32"], ["--tf32"]),
    "nographs": ("fused", ["--no-cuda-graphs"], None),
}
# models/vit_b_16.mlir's fixed batch (attention merges the batch with the
# heads, so an imported ViT compiles at the batch it was imported at).
VIT_BATCH = 128
# The archive's most (the device tool brings back files of up to 16 MiB).
ARCHIVE_LIMIT = 15 * 2**20
CUDNN_LIBRARIES = ["libcudnn.so.9", "libcudnn_graph.so.9", "libcudnn_ops.so.9",
                   "libcudnn_cnn.so.9", "libcudnn_adv.so.9", "libcudnn_heuristic.so.9",
                   "libcudnn_engines_precompiled.so.9", "libcudnn_engines_runtime_compiled.so.9"]
OTHER_LIBRARIES = ["libcudart.so.13", "libcublas.so.13", "libcublasLt.so.13", "libnccl.so.2",
                   "libnvrtc.so.13"]


def env_int(name, default):
    value = os.environ.get(name, "")
    try:
        return int(value) if value else default
    except ValueError:
        sys.exit(f"gpu-check: {name} must be an integer, got {value!r}")


def settings():
    quick = os.environ.get("GPU_CHECK_QUICK", "0") == "1"
    s = {
        "device": os.environ.get("GPU_CHECK_DEVICE", "cuda"),
        "quick": quick,
        "model": "resnet_tiny" if quick else "resnet50",
        "smoke_batch": 4 if quick else 64,
        "batches": os.environ.get("GPU_CHECK_BATCHES", "8" if quick else "256").split(),
        "variants": os.environ.get("GPU_CHECK_VARIANTS", " ".join(VARIANTS)).split(),
        "gradcheck_cases": os.environ.get("GPU_CHECK_GRADCHECK_CASES",
                                          " ".join(QUICK_CASES if quick else LIBRARY_CASES)).split(),
        "steps": env_int("GPU_CHECK_STEPS", 4 if quick else 30),
        "warmup": env_int("GPU_CHECK_WARMUP", 1 if quick else 10),
        "equivalence_steps": 3 if quick else 20,
        "deadline": env_int("GPU_CHECK_DEADLINE", 540),
        # ViT-B/16 (models/vit_b_16.mlir, imported from torchvision at batch
        # VIT_BATCH) in fp16 AMP beside PyTorch's autocast, in p3: not in the
        # quick run, nor in a CPU dry run (minutes a step), nor with
        # GPU_CHECK_VIT=0.
        "vit": not quick and os.environ.get("GPU_CHECK_VIT", "1") == "1" and
               os.environ.get("GPU_CHECK_DEVICE", "cuda") == "cuda",
    }
    for v in s["variants"]:
        if v not in VARIANT_RUNS:
            sys.exit(f"gpu-check: unknown variant {v!r} in GPU_CHECK_VARIANTS ({' '.join(VARIANTS)})")
    for b in s["batches"] + [str(s["smoke_batch"])]:
        if not b.isdigit() or int(b) < 1:
            sys.exit(f"gpu-check: bad batch {b!r} in GPU_CHECK_BATCHES")
    return s


def kill_group(pid, sig):
    """Signals a process group that may have ended already."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


_PYTHONS = {}


def python_with(module):
    """A Python that imports `module` (GPU_CHECK_PYTHON first), or None;
    asked once per module, each try bounded."""
    if module in _PYTHONS:
        return _PYTHONS[module]
    found = None
    for candidate in [os.environ.get("GPU_CHECK_PYTHON", ""), sys.executable, "python3",
                      "/usr/bin/python3"]:
        try:
            if candidate and subprocess.run([candidate, "-c", f"import {module}"],
                                            capture_output=True, timeout=60).returncode == 0:
                found = candidate
                break
        except (OSError, subprocess.TimeoutExpired):
            continue
    _PYTHONS[module] = found
    return found


# ------------------------------------------------------------------ prepare

def prepare(args):
    s = settings()
    prepared = os.path.abspath(args[0] if args else os.path.join(ROOT, ".gpu-check"))
    build = os.environ.get("GPU_CHECK_BUILD_DIR", os.path.join(ROOT, "build"))
    if os.environ.get("GPU_CHECK_NO_BUILD", "0") != "1":
        env = dict(os.environ, GRAPHC_BUILD_DIR=build)
        if subprocess.run([os.path.join(ROOT, "setup.sh"), "build"], env=env).returncode != 0:
            sys.exit("gpu-check: the build failed")
    graphrun = os.path.join(build, "bin", "graphrun")
    if not os.access(graphrun, os.X_OK):
        sys.exit(f"gpu-check: no {graphrun} (build first)")
    shutil.rmtree(prepared, ignore_errors=True)
    for d in ("bin", "lib", "plans"):
        os.makedirs(os.path.join(prepared, d))
    for tool in ("graphrun", "graphc-runtime-tests"):
        shutil.copy2(os.path.join(build, "bin", tool), os.path.join(prepared, "bin"))
    # The libraries graphrun needs beyond what any Linux with a CUDA driver
    # has (the CUDA ones come from the machine: the wheels' or the toolkit's).
    # Open MPI's libraries let graphrun start; one process never initializes
    # MPI, so its plugins are not needed (the GPU machines have no mpirun).
    ldd = subprocess.run(["ldd", graphrun], capture_output=True, text=True).stdout
    carried = re.compile(r"^(libdnnl|libsodium|libgomp|libOpenCL|libz\.so|libmpi|libopen-rte|"
                         r"libopen-pal|libhwloc|libevent|libudev)")
    for line in ldd.splitlines():
        m = re.match(r"\s*(\S+) => (\S+)", line)
        if not m or not carried.match(m.group(1)):
            continue
        name, path = m.groups()
        if name.startswith("libdnnl"):
            import lzma
            with open(path, "rb") as src, lzma.open(os.path.join(prepared, "lib", name + ".xz"),
                                                    "wb", preset=6) as dst:
                shutil.copyfileobj(src, dst)
        else:
            shutil.copy(path, os.path.join(prepared, "lib", name))
    graphc = os.path.join(build, "bin", "graphc")

    def compile_plan(model, batch, name, *flags, target="all"):
        out = subprocess.run([graphc, "compile", model, "--batch-size", str(batch),
                              f"--target={target}", *flags, "-o",
                              os.path.join(prepared, "plans", name + ".plan")],
                             stdout=subprocess.DEVNULL)
        if out.returncode != 0:
            sys.exit(f"gpu-check: cannot compile {name}")

    conformance = os.path.join(ROOT, "test", "runtime", "Inputs", "conformance.mlir")
    for target in ("all", "cpu", "cuda"):
        compile_plan(conformance, 256, f"conformance_{target}", target=target)
    # Fused attention's (the conformance suite's plans 3 to 8): Swin-style
    # windows with two biases, a ViT whose k comes transposed; in FP32, then
    # in BF16 and FP16 (attention in half).
    for amp in ("", "bf16", "fp16"):
        for source in ("window_attention.mlir", "vit_tiny.onnx"):
            compile_plan(os.path.join(ROOT, "test", "tools", "Inputs", source), 2,
                         "conformance_" + source.split(".")[0] + (f"_{amp}" if amp else ""),
                         *([f"--amp={amp}"] if amp else []))
    models = os.path.join(ROOT, "models")
    compile_plan(f"{models}/fmnist_cnn.mlir", 32, "fmnist_cnn", "--lr", "0.02")
    # FP16 with gradient clipping (the norm is about 25 at the start): the
    # multi-tensor sum of squares (nn.sum_squares) over half gradients, the
    # factor joining the unscale, the norm kept through skipped steps.
    compile_plan(f"{models}/fmnist_cnn.mlir", 32, "fmnist_cnn_fp16", "--lr", "0.02", "--amp=fp16",
                 "--clip-grad-norm", "5")
    compile_plan(f"{models}/resnet_tiny.mlir", 8, "resnet_tiny", "--lr", "0.02")
    # 8-bit images normalized in the plan: the byte loads and the unsigned
    # cast in a PTX kernel.
    compile_plan(f"{models}/resnet_tiny.mlir", 8, "resnet_tiny_u8", "--lr", "0.02",
                 "--input-normalize=imagenet")
    # PowerSGD: the factors' GEMMs and the one-thread Gram-Schmidt kernel
    # (nn.orthonormalize) on the GPU, its error feedback fused.
    compile_plan(f"{models}/fmnist_cnn.mlir", 32, "fmnist_cnn_powersgd", "--lr", "0.02",
                 "--grad-compression=powersgd:2")
    # Top-k: the one-thread selection (nn.topk_select; without a warm-up the
    # crosschecked first step takes the sampled threshold and its candidates)
    # and the in-place masking (nn.zero_at) kernels, and the sparse
    # collective staged through the host.
    compile_plan(f"{models}/fmnist_cnn.mlir", 32, "fmnist_cnn_topk", "--lr", "0.02",
                 "--grad-compression=topk:0.01")
    # One step of the headline model at a batch whose large elementwise
    # kernels run vectorized on the GPU (four elements a thread, 16-byte
    # accesses), which the small models' kernels are too short for.
    compile_plan(f"{models}/{s['model']}.mlir", s["smoke_batch"], "equivalence_resnet",
                 "--lr", "0.02")
    # Mixed precision on the headline model, small enough for the CPU side
    # of a command-by-command crosscheck. At the default first loss scale
    # (65536) the H200 run's conv1 filter gradient came out NaN on cuDNN and
    # finite (about 1e4) on the CPU: most likely an overflow inside cuDNN's
    # fp16 sum, which dynamic loss scaling answers by skipping the step and
    # halving the scale. The crosscheck compares the ops at a scale where
    # partial sums stay in range, and the conformance suite's stem case
    # checks that kernel on data of its own: a NaN in either is a fault.
    compile_plan(f"{models}/{s['model']}.mlir", 4 if s["quick"] else 16, "crosscheck_amp",
                 "--lr", "0.02", "--amp=fp16", "--initial-loss-scale", "1024")
    # The throughput plans run on the GPU only (on the CPU in the dry run).
    target = "all" if s["device"] == "cpu" else "cuda"
    model = f"{models}/{s['model']}.mlir"
    plans = {("fused", s["smoke_batch"])}
    for b in s["batches"]:
        for v in s["variants"]:
            plans.add((VARIANT_RUNS[v][0], s["smoke_batch"] if v == "nographs" else int(b)))
    flags = {"fused": [], "unfused": ["--no-fuse"], "fp16": ["--amp=fp16"],
             "nhwc": ["--layout=nhwc"]}
    for kind, batch in sorted(plans):
        compile_plan(model, batch, f"resnet_b{batch}_{kind}", *flags[kind], target=target)
    if s["vit"]:
        # Fused attention in half on the tensor cores, with everything else a
        # transformer adds (layer norm, GELU, the batched products).
        compile_plan(f"{models}/vit_b_16.mlir", VIT_BATCH, f"vit_b{VIT_BATCH}_fp16",
                     "--amp=fp16", target=target)
    cases = s["gradcheck_cases"]
    gradcheck = subprocess.run(
        [sys.executable, os.path.join(ROOT, "test", "runtime", "Inputs", "gradcheck_ops.py"),
         os.path.join(prepared, "gradcheck"), *cases, "--compile-only", "--target=all"],
        env=dict(os.environ, GRAPHC_TOOLS=os.path.join(build, "bin")), stdout=subprocess.DEVNULL)
    if gradcheck.returncode != 0:
        sys.exit("gpu-check: cannot compile the gradient-check cases")
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    manifest = {"model": s["model"], "quick": s["quick"], "device": s["device"], "vit": s["vit"],
                "smoke_batch": s["smoke_batch"], "batches": s["batches"],
                "variants": s["variants"], "gradcheck_cases": cases,
                "prepared": datetime.datetime.now(datetime.timezone.utc).isoformat(
                    timespec="seconds"), "commit": commit}
    with open(os.path.join(prepared, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
    size = sum(os.path.getsize(p) for p in glob.glob(f"{prepared}/**/*", recursive=True)
               if os.path.isfile(p))
    print(f"gpu-check: prepared {prepared} ({size / 2**20:.1f} MiB)")


# ---------------------------------------------------------------------- run

class Check:
    def __init__(self, prepared, out, s):
        self.s = s
        self.prepared = prepared
        self.out = out
        self.start = time.monotonic()
        self.work = tempfile.mkdtemp(prefix="gpu-check.")
        self.results = os.path.join(self.work, "results")
        os.makedirs(self.results)
        os.makedirs(out, exist_ok=True)
        self.log = open(os.path.join(out, "gpu-check.log"), "a", buffering=1)
        with open(os.path.join(prepared, "manifest.json")) as f:
            self.manifest = json.load(f)
        self.summary = {"started": datetime.datetime.now(datetime.timezone.utc).isoformat(
            timespec="seconds"), "device_kind": s["device"], "manifest": self.manifest,
            "deadline_s": s["deadline"], "phases": {}, "stages": {}, "runs": [],
            "environment": {}}
        self.failed = []  # (stage, argv, env) of the commands that failed, in order
        self.phase_end = s["deadline"]
        self.library_env = None

    # -- time, log, records
    def elapsed(self):
        return time.monotonic() - self.start

    def say(self, text):
        line = f"[{self.elapsed():6.1f}s] {text}"
        print(line, flush=True)
        self.log.write(line + "\n")

    def stage(self, name, ok, summary, **extra):
        self.summary["stages"][name] = {"ok": ok, "summary": summary,
                                        "at_s": round(self.elapsed(), 1), **extra}
        self.say(f"{name}: {'ok' if ok else 'FAILED'}: {summary}")
        self.save()

    def run(self, name, argv, estimate, cap, env=None, stage="", output=None):
        """Runs argv under a timeout unless its estimate would pass the
        deadline; returns its record (rc None when skipped)."""
        record = {"name": name, "stage": stage, "argv": argv, "estimate_s": estimate,
                  "start_s": round(self.elapsed(), 1)}
        left = min(self.s["deadline"], self.phase_end) - self.elapsed()
        if estimate > left:
            which = "deadline" if self.phase_end >= self.s["deadline"] else "phase's budget"
            record.update(rc=None, skipped=f"would pass the {which} ({left:.0f} s left, "
                                           f"estimate {estimate} s)")
            self.say(f"  skip {name}: {record['skipped']}")
            self.summary["runs"].append(record)
            return record
        timeout = max(1.0, min(cap, left))
        output = output or os.path.join(self.results, f"{name}.txt")
        self.say(f"  run {name} (timeout {timeout:.0f} s): {shlex.join(argv)}")
        began = time.monotonic()
        with open(output, "w") as f:
            proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True)
            try:
                rc = proc.wait(timeout=timeout)
                timed_out = False
            except subprocess.TimeoutExpired:
                kill_group(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    kill_group(proc.pid, signal.SIGKILL)
                    proc.wait()
                rc, timed_out = 124, True
        record.update(rc=rc, seconds=round(time.monotonic() - began, 1), timed_out=timed_out,
                      output=os.path.relpath(output, self.results))
        with open(output, errors="replace") as f:
            tail = f.read()[-3000:]
        self.log.write(tail + ("\n" if tail and not tail.endswith("\n") else ""))
        self.say(f"  {name}: exit {rc}{' (timed out)' if timed_out else ''} after "
                 f"{record['seconds']} s")
        if rc != 0:
            self.failed.append((stage or name, argv, env))
        self.summary["runs"].append(record)
        return record

    def save(self):
        """The summary, chart and archive in OUT, complete after every stage.
        The archive stays under the device tool's 16 MiB a file: long logs
        keep their head and tail, and if it is still too large its largest
        files are left out (and named in the summary)."""
        self.summary["elapsed_s"] = round(self.elapsed(), 1)
        self.summary["goals"] = goals(self.summary)
        archive = os.path.join(self.out, "gpu-check.tar.gz")
        left_out = self.summary.setdefault("left_out_of_archive", [])
        while True:
            for path in glob.glob(os.path.join(self.results, "*")):
                trim(path)
            with tarfile.open(archive + ".part", "w:gz") as tar:
                tar.add(self.results, arcname="results")
            files = sorted(glob.glob(os.path.join(self.results, "*")), key=os.path.getsize)
            if os.path.getsize(archive + ".part") <= ARCHIVE_LIMIT or not files:
                break
            left_out.append(os.path.basename(files[-1]))
            os.remove(files[-1])
        os.replace(archive + ".part", archive)
        write_json(os.path.join(self.out, "gpu-check.json"), self.summary)
        chart(self.summary, os.path.join(self.out, "gpu-check.png"))

    # -- the environment the CUDA processes see
    def libraries(self):
        """LD_LIBRARY_PATH for graphrun and the tests only (PyTorch keeps its
        own): the carried libraries, then the PyTorch wheels' CUDA libraries,
        then the toolkit's."""
        lib = os.path.join(self.work, "lib")
        os.makedirs(lib, exist_ok=True)
        import lzma
        for path in glob.glob(os.path.join(self.prepared, "lib", "*")):
            target = os.path.join(lib, os.path.basename(path))
            if path.endswith(".xz"):
                with lzma.open(path) as src, open(target[:-3], "wb") as dst:
                    shutil.copyfileobj(src, dst)
            else:
                shutil.copy(path, target)
        paths = [lib]
        python = python_with("site") or sys.executable
        wheels = subprocess.run([python, "-c", (
            "import glob, os, site\n"
            "roots = site.getsitepackages() + [site.getusersitepackages()]\n"
            "for r in roots:\n"
            "    for d in sorted(glob.glob(os.path.join(r, 'nvidia', '*', 'lib'))):\n"
            "        print(d)\n")], capture_output=True, text=True).stdout.split()
        paths += wheels + [d for d in ("/usr/local/cuda/lib64", "/usr/local/cuda/lib")
                           if os.path.isdir(d)]
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = ":".join(paths + ([os.environ["LD_LIBRARY_PATH"]]
                                                   if os.environ.get("LD_LIBRARY_PATH") else []))
        # Every process shares one algorithm cache: cuDNN times each distinct
        # convolution once per loan, not once per process.
        env["GRAPHC_CUDNN_CACHE"] = os.path.join(self.work, "cudnn-algorithms.tsv")
        self.library_env = env
        self.library_paths = paths
        return env

    def tool(self, name):
        return os.path.join(self.prepared, "bin", name)

    # ------------------------------------------------------------- phases
    def p0(self):
        env = self.libraries()
        lines = [f"gpu-check environment probe, {self.summary['started']}",
                 f"prepared: {json.dumps(self.manifest)}", ""]
        e = self.summary["environment"]

        def capture(argv, environment=None, timeout=30):
            try:
                r = subprocess.run(argv, capture_output=True, text=True, env=environment,
                                   timeout=timeout)
                return (r.stdout + r.stderr).strip()
            except (OSError, subprocess.TimeoutExpired) as error:
                return f"({argv[0]}: {error})"

        e["gpu"] = capture(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,"
                            "clocks.max.sm,pci.bus_id", "--format=csv,noheader"])
        lines += ["## nvidia-smi", capture(["nvidia-smi"]), ""]
        with open("/proc/cpuinfo") as f:
            cpu = re.search(r"model name\s*:\s*(.*)", f.read())
        e["cpu"] = f"{cpu.group(1) if cpu else '?'}, {os.cpu_count()} cores"
        e["graphrun_version"] = capture([self.tool("graphrun"), "--version"], env)
        lines += ["## graphrun", e["graphrun_version"], ""]
        # Which CUDA libraries the loader finds, where, and their versions
        # (the file a soname resolves to names its full version).
        found = {}
        for name in OTHER_LIBRARIES + CUDNN_LIBRARIES:
            for d in self.library_paths:
                path = os.path.join(d, name)
                if os.path.exists(path):
                    found[name] = os.path.realpath(path)
                    break
        e["libraries"] = found
        lines += ["## libraries on graphrun's LD_LIBRARY_PATH (first found)",
                  "LD_LIBRARY_PATH=" + env["LD_LIBRARY_PATH"]]
        lines += [f"{name}: {found.get(name, 'NOT FOUND')}" for name in
                  OTHER_LIBRARIES + CUDNN_LIBRARIES] + [""]
        ldd = capture(["ldd", self.tool("graphrun")], env)
        e["graphrun_missing"] = re.findall(r"(\S+) => not found", ldd)
        lines += ["## ldd graphrun", ldd, ""]
        cudnn_dir = os.path.dirname(found.get("libcudnn.so.9", "")) or None
        for name in CUDNN_LIBRARIES:
            if cudnn_dir and os.path.exists(os.path.join(cudnn_dir, name)):
                lines += [f"## ldd {name}", capture(["ldd", os.path.join(cudnn_dir, name)], env),
                          ""]
        torch_python = python_with("torch")
        e["torch"] = capture([torch_python, "-c", (
            "import torch; print(torch.__version__, 'cuda', torch.version.cuda, 'cudnn', "
            "torch.backends.cudnn.version(), 'available', torch.cuda.is_available())")]) \
            if torch_python else "no PyTorch"
        e["compute_sanitizer"] = capture(["compute-sanitizer", "--version"]).splitlines()[-1:] \
            if shutil.which("compute-sanitizer") else "not found"
        e["python"] = sys.version.split()[0]
        lines += ["## PyTorch", e["torch"], "", "## compute-sanitizer", str(e["compute_sanitizer"]),
                  "", "## cpu", e["cpu"], "", "## disk", capture(["df", "-h", self.work])]
        with open(os.path.join(self.out, "environment.txt"), "w") as f:
            f.write("\n".join(lines) + "\n")
        missing = e["graphrun_missing"]
        # A GPU run needs the GPU; the CPU dry run only graphrun's libraries.
        no_gpu = self.s["device"] == "cuda" and not re.search(r"\d+ MiB", e["gpu"])
        self.stage("environment", not missing and not no_gpu,
                   f"{e['gpu'] or 'no nvidia-smi'}; cuDNN {found.get('libcudnn.so.9', 'NOT FOUND')}"
                   + (f"; graphrun cannot find {' '.join(missing)}" if missing else ""))

    def gtest(self, stage, gtest_filter, estimate, cap, env):
        json_out = os.path.join(self.results, f"{stage}-gtest.json")
        r = self.run(stage, [self.tool("graphc-runtime-tests"), f"--gtest_filter={gtest_filter}",
                             f"--gtest_output=json:{json_out}"], estimate, cap, env, stage)
        if r["rc"] is None:
            return self.stage(stage, False, r["skipped"], skipped=True)
        passed = skipped = 0
        margins = {}
        try:
            with open(json_out) as f:
                report = json.load(f)
            for suite in report.get("testsuites", []):
                for test in suite.get("testsuite", []):
                    name = f"{suite['name']}.{test['name']}"
                    if test.get("result") == "SKIPPED" or test.get("status") == "NOTRUN":
                        skipped += 1
                    elif not test.get("failures"):
                        passed += 1
                    if "worst_fraction_of_tolerance" in test:
                        margins[name] = float(test["worst_fraction_of_tolerance"])
        except (OSError, ValueError, KeyError):
            pass
        ok = r["rc"] == 0 and passed > 0 and skipped == 0
        self.stage(stage, ok, f"exit {r['rc']}, {passed} passed, {skipped} skipped" +
                   (f"; worst {max(margins.values()):.3f} of a tolerance" if margins else ""),
                   margins=margins)

    def p1(self):
        env = dict(self.library_env)
        plans = os.path.join(self.prepared, "plans")
        env["GRAPHC_CONFORMANCE_PLANS"] = ":".join(
            os.path.join(plans, f"conformance_{t}.plan")
            for t in ("all", "cpu", "cuda", "window_attention", "vit_tiny",
                      "window_attention_bf16", "vit_tiny_bf16", "window_attention_fp16",
                      "vit_tiny_fp16"))
        device = self.s["device"]
        self.gtest("conformance", f"Backends/BackendConformance.*/{device}", 40, 120, env)
        self.gtest("collectives", "DeviceCollectivesTest.*" if device == "cpu"
                   else "CudaCollectivesTest.*", 15, 60, env)
        # CPU == CUDA: the same plan, seed and batches on both devices.
        equivalence, ok = {}, True
        for model in ("fmnist_cnn", "resnet_tiny", "fmnist_cnn_fp16", "equivalence_resnet"):
            steps = "1" if model == "equivalence_resnet" else str(self.s["equivalence_steps"])
            runs = []
            # The CPU perturbed (another oneDNN instruction set, half the
            # threads: other summation orders) measures how far this model
            # carries a rounding difference: the noise floor the device is
            # judged against.
            perturbed = dict(env, ONEDNN_MAX_CPU_ISA="SSE41")
            threads = str(max(1, len(os.sched_getaffinity(0)) // 2))
            for side, d, flags, side_env in (
                    ("cpu", "cpu", [], env),
                    ("cpu_perturbed", "cpu", ["--threads", threads], perturbed),
                    ("device", device, ["--deterministic"] if device == "cuda" else [], env)):
                runs.append(self.run(f"equivalence_{model}_{side}", [
                    self.tool("graphrun"), os.path.join(plans, f"{model}.plan"), "--device", d,
                    "--steps", steps, "--warmup", "0", "--display-every", steps,
                    "--save", os.path.join(self.work, f"{model}_{side}.st"),
                    "--report", os.path.join(self.results, f"{model}_{side}.json")] + flags,
                    30 if model == "equivalence_resnet" else 10, 90, side_env, "equivalence"))
            if runs[0]["rc"] != 0 or runs[2]["rc"] != 0:
                equivalence[model] = {"ok": False, "why": "a run failed or was skipped"}
                ok = False
                continue
            # fp16: both sides round the same values to half, but cuDNN's
            # fp32 sums come in another order, so a value now and then rounds
            # to the neighbouring half (2^-11 apart) and the steps carry it
            # on (measured on an H200: fmnist_cnn 1.7 of these tolerances
            # after 20 steps, the CPU against itself perturbed 1.1).
            tolerance = (["--rtol", "2e-2", "--atol", "2e-3", "--loss-rtol", "1e-2"]
                         if model.endswith("fp16") else [])
            compared = os.path.join(self.results, f"equivalence_{model}.json")
            r = self.run(f"compare_{model}", [
                sys.executable, os.path.join(ROOT, "tools", "gpu_check", "compare_state.py"),
                os.path.join(self.work, f"{model}_cpu.st"),
                os.path.join(self.work, f"{model}_device.st"), "--reports",
                os.path.join(self.results, f"{model}_cpu.json"),
                os.path.join(self.results, f"{model}_device.json"), "--json", compared]
                + (["--floor", os.path.join(self.work, f"{model}_cpu_perturbed.st")]
                   if runs[1]["rc"] == 0 else [])
                + tolerance, 5, 60, None, "equivalence")
            try:
                with open(compared) as f:
                    equivalence[model] = json.load(f)
            except (OSError, ValueError):
                equivalence[model] = {"ok": False}
            if r["rc"] != 0 and ok:
                # The first pair that differs travels back whole where it fits
                # the archive (the small models'; ResNet-50's 195 MiB do not).
                pair = [os.path.join(self.work, f"{model}_{side}.st") for side in ("cpu", "device")]
                if sum(os.path.getsize(f) for f in pair) < ARCHIVE_LIMIT // 2:
                    for f in pair:
                        shutil.copy(f, self.results)
            if r["rc"] != 0 and device == "cuda" and model in ("resnet_tiny", "equivalence_resnet"):
                # A difference that --sync-debug (the device waits after every
                # command) makes go away is a race between commands.
                synced = self.run(f"equivalence_{model}_device_synced", [
                    self.tool("graphrun"), os.path.join(plans, f"{model}.plan"), "--device",
                    device, "--steps", steps, "--warmup", "0", "--display-every", steps,
                    "--save", os.path.join(self.work, f"{model}_synced.st"), "--deterministic",
                    "--sync-debug"], 30 if model == "equivalence_resnet" else 10, 90, env,
                    "equivalence")
                if synced["rc"] == 0:
                    again = self.run(f"compare_{model}_synced", [
                        sys.executable, os.path.join(ROOT, "tools", "gpu_check",
                                                     "compare_state.py"),
                        os.path.join(self.work, f"{model}_cpu.st"),
                        os.path.join(self.work, f"{model}_synced.st")]
                        + (["--floor", os.path.join(self.work, f"{model}_cpu_perturbed.st")]
                           if runs[1]["rc"] == 0 else []), 5, 60, None, "equivalence")
                    equivalence[model]["with_sync_debug"] = (
                        "agrees" if again["rc"] == 0 else "differs")
            ok = ok and r["rc"] == 0
        self.stage("equivalence", ok, f"cpu vs {device} after "
                   f"{self.s['equivalence_steps']} steps (the ResNet one step): " + "; ".join(
            f"{m} {'ok' if v.get('ok') else 'DIFFERS'}"
            + (f" ({v['worst_fraction_of_tolerance']:.3f} of the tolerance; the CPU's own "
               f"floor {v.get('floor_fraction_of_tolerance', 0):.3f})"
               if "worst_fraction_of_tolerance" in v else "")
            + (f", with --sync-debug it {v['with_sync_debug']}" if "with_sync_debug" in v else "")
            for m, v in equivalence.items()), models=equivalence)
        # Command by command: each of one step's commands on the device from
        # the CPU's inputs, so that a difference names the command that makes
        # it instead of growing through the step.
        crosschecks, ok = {}, True
        for model in os.environ.get("GPU_CHECK_CROSSCHECK", "resnet_tiny resnet_tiny_u8 "
                                    "fmnist_cnn_powersgd fmnist_cnn_topk fmnist_cnn_fp16 "
                                    "crosscheck_amp "
                                    "equivalence_resnet").split():
            report = os.path.join(self.results, f"crosscheck_{model}.json")
            flags = ["--deterministic"] if device == "cuda" else []
            r = self.run(f"crosscheck_{model}", [
                self.tool("graphrun"), "crosscheck", os.path.join(plans, f"{model}.plan"),
                "--device", device, "--report", report, "--show", "40"] + flags,
                {"equivalence_resnet": 100, "crosscheck_amp": 40}.get(model, 5), 120, env,
                "crosscheck")
            try:
                with open(report) as f:
                    j = json.load(f)
                first = j["first_failure"]
                crosschecks[model] = {
                    "commands": len(j["commands"]), "over_tolerance": j["over_tolerance"],
                    "first": j["commands"][first] if first >= 0 else None}
            except (OSError, ValueError, KeyError, IndexError):
                crosschecks[model] = {"over_tolerance": None, "rc": r["rc"]}
            ok = ok and r["rc"] == 0
        self.stage("crosscheck", ok, "; ".join(
            f"{m}: " + (f"{v['over_tolerance']} of {v['commands']} commands over tolerance"
                        + (f", first {v['first']['command']} {v['first']['what']}"
                           if v.get("first") else "")
                        if v.get("over_tolerance") is not None else "no report")
            for m, v in crosschecks.items()), models=crosschecks)
        # The per-op gradient checks against float64 finite differences.
        gradcheck = os.path.join(self.work, "gradcheck")
        shutil.copytree(os.path.join(self.prepared, "gradcheck"), gradcheck)
        genv = dict(env, GRAPHC_TOOLS=os.path.join(self.prepared, "bin"))
        r = self.run("gradcheck", [sys.executable, os.path.join(
            ROOT, "test", "runtime", "Inputs", "gradcheck_ops.py"), gradcheck,
            *self.manifest["gradcheck_cases"], "--precompiled", "--device", device],
            5 * len(self.manifest["gradcheck_cases"]), 120, genv, "gradcheck")
        last = ""
        if r["rc"] is not None:
            with open(os.path.join(self.results, "gradcheck.txt"), errors="replace") as f:
                lines = f.read().strip().splitlines()
                last = lines[-1] if lines else ""
        self.stage("gradcheck", r["rc"] == 0, last or r.get("skipped", f"exit {r['rc']}"))

    def graphrun_run(self, name, plan, flags, steps, warmup, stage):
        report = os.path.join(self.results, f"{name}.json")
        estimate = 30 if not self.s["quick"] else 5
        r = self.run(name, [self.tool("graphrun"), os.path.join(self.prepared, "plans",
                                                                plan + ".plan"),
                            "--device", self.s["device"], "--steps", str(steps + warmup),
                            "--warmup", str(warmup), "--display-every", str(steps + warmup),
                            "--report", report] + flags, estimate, 180, self.library_env, stage)
        result = {"system": "graphrun", "name": name, "rc": r["rc"], "seconds": r.get("seconds")}
        if r["rc"] is None:
            result["skipped"] = r["skipped"]
        if r["rc"] == 0:
            with open(report) as f:
                j = json.load(f)
            for key in ("batch_size", "images_per_sec", "step_ms_median", "load_ms",
                        "load_summary", "cuda_graphs", "precision", "math", "fused",
                        "device_description", "final_loss", "library_math"):
                if key in j:
                    result[key] = j[key]
        return result

    def pytorch_run(self, name, batch, flags, stage, model=None):
        python = python_with("torchvision")
        if self.s["device"] != "cuda" or not python:
            return {"system": "pytorch", "name": name, "rc": None,
                    "skipped": "no PyTorch with CUDA here" if self.s["device"] == "cuda"
                    else "a CPU dry run"}
        report = os.path.join(self.results, f"{name}.json")
        r = self.run(name, [python, os.path.join(ROOT, "benchmarks", "pytorch_cuda.py"),
                            "--model", model or self.manifest["model"], "--batch-size", str(batch),
                            "--steps", str(self.s["steps"]), "--warmup", str(self.s["warmup"]),
                            "--report", report] + flags, 40, 180, None, stage)
        result = {"system": "pytorch", "name": name, "rc": r["rc"], "seconds": r.get("seconds")}
        if r["rc"] is None:
            result["skipped"] = r["skipped"]
        if r["rc"] == 0:
            with open(report) as f:
                result.update(json.load(f))
        return result

    def p2(self):
        b = self.s["smoke_batch"]
        result = self.graphrun_run(f"smoke_b{b}_fp32", f"resnet_b{b}_fused", [],
                                   self.s["steps"], self.s["warmup"], "smoke")
        self.summary.setdefault("throughput", []).append(result)
        ok = result["rc"] == 0
        self.stage("smoke", ok, (f"{self.manifest['model']} batch {b}: loaded in "
                                 f"{result.get('load_ms', 0) / 1000:.1f} s, "
                                 f"{result.get('images_per_sec', 0):.1f} images/sec, median step "
                                 f"{result.get('step_ms_median', 0):.1f} ms") if ok else
                   result.get("skipped", f"exit {result['rc']}"))

    def pdiag(self):
        forced = os.environ.get("GPU_CHECK_FORCE_DIAG", "0") == "1"
        # A crosscheck's failure names its command already (and it waits
        # for the device after every command): the first other failure is
        # what a rerun can tell more about.
        failed = [f for f in self.failed if f[0] != "crosscheck"]
        if not failed and not forced:
            return
        stage, argv, env = failed[0] if failed else (
            "smoke", [self.tool("graphrun"), os.path.join(
                self.prepared, "plans", f"resnet_b{self.s['smoke_batch']}_fused.plan"),
                "--device", self.s["device"], "--steps", "2", "--warmup", "0"],
            self.library_env)
        env = dict(env or self.library_env)
        env.update(CUDNN_LOGLEVEL_DBG="3", CUDNN_LOGDEST_DBG=os.path.join(self.results,
                                                                        "cudnn-debug.log"),
                   CUDA_LAUNCH_BLOCKING="1")
        notes = [f"first failure: {stage}: {shlex.join(argv)}"]
        # Which test failed, read before the rerun could write its own JSON.
        failing = None
        if os.path.basename(argv[0]) == "graphc-runtime-tests":
            failing = first_failing_test(os.path.join(self.results, f"{stage}-gtest.json"))
        short = list(argv)
        if os.path.basename(argv[0]) == "graphrun":
            # A few steps show a failure (and keep cuDNN's log to a size).
            for flag, value in (("--steps", "3"), ("--warmup", "0")):
                if flag in short:
                    short[short.index(flag) + 1] = value
        # The rerun's outputs go to files of their own: the first run's stay.
        for i, word in enumerate(short):
            if i > 0 and short[i - 1] in ("--report", "--save"):
                short[i] = word + ".diag"
            elif word.startswith("--gtest_output=json:"):
                short[i] = word + ".diag.json"
        if failing:
            short = [argv[0], f"--gtest_filter={failing}"]
        again = short + (["--sync-debug"] if os.path.basename(argv[0]) == "graphrun" else [])
        r = self.run("diag_again", again, 20, 120, env, "pdiag")
        notes.append(f"again with --sync-debug and cuDNN's debug log: exit {r['rc']}")
        sanitizer = shutil.which("compute-sanitizer")
        if sanitizer and self.s["device"] == "cuda":
            # The first failing gtest alone, else the shortened command.
            r = self.run("diag_sanitizer", [sanitizer, "--tool", "memcheck",
                                            "--error-exitcode", "99"] + short, 60, 180,
                         self.library_env, "pdiag")
            notes.append(f"compute-sanitizer memcheck: exit {r['rc']}")
        else:
            notes.append("compute-sanitizer: not run (" + ("none here" if not sanitizer
                                                           else "not a GPU run") + ")")
        self.stage("diagnosis", True, "; ".join(notes), forced=forced and not failed)

    def pprof(self):
        # Where a step's time goes (graphrun --profile: every command timed
        # alone), for the mixed-precision and FP32 plans of the first batch.
        b = self.s["batches"][0]
        rows = []
        for variant in [v for v in ("fp16", "fp32") if v in self.manifest["variants"]]:
            plan = f"resnet_b{b}_{VARIANT_RUNS[variant][0]}"
            r = self.run(f"profile_b{b}_{variant}", [
                self.tool("graphrun"), os.path.join(self.prepared, "plans", plan + ".plan"),
                "--device", self.s["device"], "--steps", "4", "--warmup", "1",
                "--display-every", "4", "--profile"], 25 if not self.s["quick"] else 3, 90,
                self.library_env, "profile")
            rows.append((variant, r))
        if not rows:
            self.stage("profile", True, "not run: neither fp16 nor fp32 is in GPU_CHECK_VARIANTS")
            return
        self.stage("profile", all(r["rc"] == 0 for _, r in rows), "; ".join(
            f"{v}: " + (f"exit {r['rc']}" if r["rc"] is not None else f"skipped ({r['skipped']})")
            + (f" (results/profile_b{b}_{v}.txt)" if r["rc"] == 0 else "") for v, r in rows))

    def p3(self):
        results = self.summary.setdefault("throughput", [])
        steps, warmup = self.s["steps"], self.s["warmup"]
        for b in self.s["batches"]:
            for v in self.s["variants"]:
                plan_kind, flags, torch_flags = VARIANT_RUNS[v]
                batch = self.s["smoke_batch"] if v == "nographs" else int(b)
                g = self.graphrun_run(f"graphrun_b{batch}_{v}", f"resnet_b{batch}_{plan_kind}",
                                      flags, steps, warmup, "throughput")
                g["variant"] = v
                results.append(g)
                if torch_flags is not None:
                    t = self.pytorch_run(f"pytorch_b{batch}_{v}", batch, torch_flags,
                                         "throughput")
                    t["variant"] = v
                    results.append(t)
                self.save()
                if v == "fp16" and b == self.s["batches"][0]:
                    self.vit(results, steps, warmup)
        if "fp16" not in self.s["variants"]:
            self.vit(results, steps, warmup)
        ran = [r for r in results
               if r.get("images_per_sec") and r["name"].startswith(("graphrun_", "pytorch_"))]
        failed = [r["name"] for r in results if r.get("rc") not in (0, None)]
        skipped = [r["name"] for r in results if r.get("rc") is None and r["system"] == "graphrun"]
        self.stage("throughput", bool(ran) and not failed, f"{len(ran)} runs measured" +
                   (f"; failed: {' '.join(failed)}" if failed else "") +
                   (f"; skipped: {' '.join(skipped)}" if skipped else "") +
                   "".join(f"; {k} {v:.2f}x" for g in self.summary["goals"]
                           for k, v in g.items() if k not in ("batch", "model")))


    def vit(self, results, steps, warmup):
        """ViT-B/16 in fp16 AMP, graphrun beside PyTorch's autocast (after
        ResNet-50's fp16 pair, so that a short loan still gets it)."""
        if not self.manifest.get("vit"):
            return
        name = f"vit_b{VIT_BATCH}_fp16"
        g = self.graphrun_run(f"graphrun_{name}", name, [], steps, warmup, "throughput")
        g["variant"] = "vit_fp16"
        results.append(g)
        t = self.pytorch_run(f"pytorch_{name}", VIT_BATCH, ["--amp"], "throughput",
                             model="vit_b_16")
        t["variant"] = "vit_fp16"
        results.append(t)
        self.save()


def trim(path, limit=4 * 2**20, head=2**20):
    """Keeps a text file over `limit` bytes to its first `head` bytes and its
    last limit - head (what a long log's failure is near)."""
    if path.endswith(".st") or os.path.getsize(path) <= limit:
        return
    with open(path, "rb") as f:
        first = f.read(head)
        f.seek(-(limit - head), os.SEEK_END)
        last = f.read()
    with open(path, "wb") as f:
        f.write(first + b"\n[... gpu-check cut the middle of this file ...]\n" + last)


def first_failing_test(path):
    try:
        with open(path) as f:
            report = json.load(f)
    except (OSError, ValueError):
        return None
    for suite in report.get("testsuites", []):
        for test in suite.get("testsuite", []):
            if test.get("failures"):
                return f"{suite['name']}.{test['name']}"
    return None


def goals(summary):
    """The issue's ratios, from whatever throughput runs there are."""
    rows = summary.get("throughput", [])

    def rate(system, variant, batch=None):
        for r in rows:
            if r.get("system") == system and r.get("variant", "fp32") == variant and \
                    r.get("images_per_sec") and (batch is None or r.get("batch_size") == batch):
                return r["images_per_sec"], r.get("batch_size")
        return None, None

    found = []
    batches = sorted({r.get("batch_size") for r in rows if r.get("variant")
                      and r.get("variant") not in ("nographs", "vit_fp16")
                      and r.get("batch_size")})
    for b in batches:
        g = {"batch": b}
        fp16, _ = rate("graphrun", "fp16", b)
        fp32, _ = rate("graphrun", "fp32", b)
        for variant, key in (("fp16", "fp16_amp_over_pytorch_amp"),
                             ("fp32", "fp32_over_pytorch_fp32"), ("tf32", "tf32_over_pytorch_tf32")):
            ours, _ = rate("graphrun", variant, b)
            theirs, _ = rate("pytorch", variant, b)
            if ours and theirs:
                g[key] = ours / theirs
        unfused, _ = rate("graphrun", "unfused", b)
        if fp32 and unfused:
            g["fused_over_unfused"] = fp32 / unfused
        nhwc, _ = rate("graphrun", "nhwc", b)
        if fp32 and nhwc:
            g["nhwc_over_nchw_fp32"] = nhwc / fp32
        if fp16 and fp32:
            g["fp16_amp_over_fp32"] = fp16 / fp32
        found.append(g)
    nographs, nb = rate("graphrun", "nographs")
    if nographs:
        graphs = next((r["images_per_sec"] for r in rows if r.get("name", "").startswith("smoke")
                       and r.get("batch_size") == nb and r.get("images_per_sec")), None)
        if graphs:
            found.append({"batch": nb, "graphs_over_no_graphs": graphs / nographs})
    ours, vb = rate("graphrun", "vit_fp16")
    theirs, _ = rate("pytorch", "vit_fp16")
    if ours and theirs:
        found.append({"batch": vb, "model": "vit_b_16", "vit_fp16_amp_over_pytorch_amp":
                      ours / theirs})
    return found


def write_json(path, value):
    with open(path + ".part", "w") as f:
        json.dump(value, f, indent=2)
    os.replace(path + ".part", path)


def chart(summary, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    rows = [r for r in summary.get("throughput", []) if r.get("images_per_sec")]
    if not rows:
        return
    labels = [r["name"].replace("graphrun_", "g ").replace("pytorch_", "pt ") for r in rows]
    colors = ["#1f77b4" if r["system"] == "graphrun" else "#ff7f0e" for r in rows]
    fig, ax = plt.subplots(figsize=(max(6, 0.7 * len(rows)), 4))
    bars = ax.bar(labels, [r["images_per_sec"] for r in rows], color=colors)
    for bar, r in zip(bars, rows):
        ax.text(bar.get_x() + bar.get_width() / 2, r["images_per_sec"],
                f"{r['images_per_sec']:.0f}", ha="center", va="bottom", fontsize=7)
    ax.set_ylabel("images/sec (median step)")
    ax.tick_params(axis="x", labelsize=7, rotation=45)
    device = next((r.get("device_description") or r.get("device") for r in rows
                   if r.get("device_description") or r.get("device")), "")
    ax.set_title(f"{summary['manifest']['model']} training: graphrun (blue) and PyTorch "
                 f"(orange)\n{device[:110]}", fontsize=8)
    fig.tight_layout()
    fig.savefig(path + ".part.png", dpi=110)
    plt.close(fig)
    os.replace(path + ".part.png", path)


def check_out_limits(out):
    """What the device tool brings back: at most 8 files of at most 16 MiB,
    no deeper than two folders, names of letters, digits, '.', '_', '-'."""
    problems, files = [], []
    for dirpath, dirnames, filenames in os.walk(out):
        depth = os.path.relpath(dirpath, out).count(os.sep) + (dirpath != out)
        for name in filenames + dirnames:
            if not re.fullmatch(r"[A-Za-z0-9._-]+", name):
                problems.append(f"bad name {name!r}")
        for name in filenames:
            path = os.path.join(dirpath, name)
            files.append(path)
            if depth > 2:
                problems.append(f"{path} is too deep")
            if os.path.getsize(path) > 16 * 2**20:
                problems.append(f"{path} is over 16 MiB")
    if len(files) > 8:
        problems.append(f"{len(files)} files (at most 8 come back)")
    return files, problems


def run(args):
    s = settings()
    prepared = os.path.abspath(args[0] if args else os.path.join(ROOT, ".gpu-check"))
    out = os.path.abspath(args[1] if len(args) > 1 else os.path.join(ROOT, "gpu-check-out"))
    phases = args[2:] or list(PHASES)
    for phase in phases:
        if phase not in PHASES:
            sys.exit(f"gpu-check: unknown phase {phase!r} ({' '.join(PHASES)})")
    if not os.path.exists(os.path.join(prepared, "manifest.json")):
        sys.exit(f"gpu-check: {prepared} is not prepared (tools/gpu-check prepare {prepared})")
    check = Check(prepared, out, s)
    check.say(f"gpu-check: device {s['device']}, phases {' '.join(phases)}, deadline "
              f"{s['deadline']} s; prepared {check.manifest['prepared']} at "
              f"{check.manifest['commit']}")
    if "p0" not in phases:
        check.libraries()
    for phase in phases:
        check.say(f"==== {phase}")
        started = check.elapsed()
        budget = PHASE_BUDGET[phase]
        check.phase_end = s["deadline"] if budget is None else min(s["deadline"], started + budget)
        getattr(check, phase)()
        check.summary["phases"][phase] = {"start_s": round(started, 1),
                                          "seconds": round(check.elapsed() - started, 1)}
        check.save()
    failed = [name for name, st in check.summary["stages"].items() if not st["ok"]]
    for g in check.summary["goals"]:
        check.say(f"{g.get('model', '')} batch {g['batch']}: ".lstrip() + ", ".join(
            f"{k} {v:.2f}x" for k, v in g.items() if k not in ("batch", "model")))
    check.say(f"gpu-check: {'FAILED: ' + ' '.join(failed) if failed else 'all stages ok'} "
              f"in {check.elapsed():.0f} s")
    check.log.close()
    files, problems = check_out_limits(out)
    print(f"gpu-check: OUT holds {len(files)} files"
          + (f"; PROBLEMS: {'; '.join(problems)}" if problems else " within the device tool's limits"))
    shutil.rmtree(check.work, ignore_errors=True)
    return 1 if failed or problems else 0


def summarize(args):
    """Merges the gpu-check.json of several calls (folders or the archives'
    folders) into OUT/gpu-check.json and .png."""
    if len(args) < 2:
        sys.exit("usage: tools/gpu-check summarize OUT SOURCE...")
    out, sources = args[0], args[1:]
    merged = None
    for source in sources:
        path = os.path.join(source, "gpu-check.json") if os.path.isdir(source) else source
        with open(path) as f:
            part = json.load(f)
        if merged is None:
            merged = part
            continue
        merged["stages"].update(part.get("stages", {}))
        merged["runs"] += part.get("runs", [])
        merged.setdefault("throughput", []).extend(part.get("throughput", []))
        merged["phases"].update(part.get("phases", {}))
        merged["environment"] = merged.get("environment") or part.get("environment", {})
    merged["goals"] = goals(merged)
    os.makedirs(out, exist_ok=True)
    write_json(os.path.join(out, "gpu-check.json"), merged)
    chart(merged, os.path.join(out, "gpu-check.png"))
    for name, st in merged["stages"].items():
        print(f"{name}: {'ok' if st['ok'] else 'FAILED'}: {st['summary']}")
    for r in merged.get("throughput", []):
        if r.get("images_per_sec"):
            print(f"{r['name']:28} {r.get('batch_size', 0):>5} {r['images_per_sec']:>9.1f} img/s")
    for g in merged["goals"]:
        print(f"{g.get('model', '')} batch {g['batch']}: ".lstrip() + ", ".join(
            f"{k} {v:.2f}x" for k, v in g.items() if k not in ("batch", "model")))


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in ("prepare", "run", "summarize"):
        sys.exit("usage: tools/gpu-check prepare [DIR] | run [DIR] [OUT] [PHASE...] | "
                 "summarize OUT SOURCE...")
    command, args = sys.argv[1], sys.argv[2:]
    if command == "prepare":
        return prepare(args)
    if command == "run":
        return run(args)
    return summarize(args)


if __name__ == "__main__":
    sys.exit(main())
