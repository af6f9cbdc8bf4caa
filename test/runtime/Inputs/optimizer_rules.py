"""Optimizer rules against NumPy: each optimizer's update, run through the real
path (graphc compile, graphrun on the CPU), matches PyTorch's rule computed in
float64 from the same gradient.

The model is mnist_softmax (a weight, which gets weight decay, and a bias,
which does not). For each optimizer:
  1. two steps from the initializers, saved: parameters and optimizer state
     (momentum buffers, Adam's moments) are then non-trivial;
  2. the gradient of step 3: a probe plan (plain SGD, lr 1, no weight decay)
     resumed from that checkpoint (minus the optimizer state) moves each
     parameter by exactly -gradient on the same batch;
  3. step 3 of the optimizer, resumed from the checkpoint, against the NumPy
     rule applied to that gradient.

  optimizer_rules.py WORKDIR MODEL.mlir [--no-fuse]

Prints one line per optimizer and exits 1 on any mismatch.
"""
import os
import subprocess
import sys

import numpy as np

import safetensors_tool
from gradcheck_ops import load_safetensors, save_npy, save_safetensors

N = 16
LR, WD, MU = 0.05, 0.01, 0.8
BETA1, BETA2, EPS = 0.85, 0.995, 1e-6
CLIP = 0.05

CASES = {
    "sgd": ["--optimizer", "sgd"],
    "momentum": ["--optimizer", "momentum", "--momentum", str(MU)],
    "nesterov": ["--optimizer", "nesterov", "--momentum", str(MU)],
    "adam": ["--optimizer", "adam", "--adam-beta1", str(BETA1), "--adam-beta2", str(BETA2),
             "--adam-eps", str(EPS)],
    "adamw": ["--optimizer", "adamw", "--adam-beta1", str(BETA1), "--adam-beta2",
              str(BETA2), "--adam-eps", str(EPS)],
    # With the gradients clipped to a global norm of CLIP (smaller than the
    # norm: every gradient is scaled).
    "momentum+clip": ["--optimizer", "momentum", "--momentum", str(MU),
                      "--clip-grad-norm", str(CLIP)],
    "adamw+clip": ["--optimizer", "adamw", "--adam-beta1", str(BETA1), "--adam-beta2",
                   str(BETA2), "--adam-eps", str(EPS), "--clip-grad-norm", str(CLIP)],
}


def expected(kind, p, g, state, name, t):
    """PyTorch's rule (torch.optim.SGD / Adam / AdamW) in float64, `kind`
    without its "+clip" (the caller clips `g`)."""
    kind = kind.split("+")[0]
    wd = WD if p.ndim > 1 else 0.0  # graphc's default: no decay for rank-1
    if kind in ("sgd", "momentum", "nesterov"):
        d = g + wd * p
        if kind == "sgd":
            return {name: p - LR * d}
        v = MU * state[name + ".momentum_buffer"] + d
        step = d + MU * v if kind == "nesterov" else v
        return {name: p - LR * step, name + ".momentum_buffer": v}
    d = g + wd * p if kind == "adam" else g
    m = BETA1 * state[name + ".exp_avg"] + (1 - BETA1) * d
    v = BETA2 * state[name + ".exp_avg_sq"] + (1 - BETA2) * d * d
    base = p * (1 - LR * wd) if kind == "adamw" else p
    denom = np.sqrt(v) / np.sqrt(1 - BETA2 ** t) + EPS
    return {name: base - LR / (1 - BETA1 ** t) * m / denom,
            name + ".exp_avg": m, name + ".exp_avg_sq": v}


def run(args):
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)


def check(kind, work, model, extra):
    d = os.path.join(work, kind)
    os.makedirs(d, exist_ok=True)
    common = ["--batch-size", str(N), "--lr", str(LR), "--weight-decay", str(WD)] + extra
    run(["graphc", "compile", model, "-o", f"{d}/opt.plan"] + common + CASES[kind])
    run(["graphc", "compile", model, "-o", f"{d}/probe.plan", "--batch-size", str(N),
         "--optimizer", "sgd", "--lr", "1", "--weight-decay", "0"] + extra)
    data = ["--data", f"npy:{work}/x.npy,{work}/y.npy", "--warmup", "0"]
    run(["graphrun", f"{d}/opt.plan", "--steps", "2", "--save", f"{d}/s2.st"] + data)
    s2 = load_safetensors(f"{d}/s2.st")
    params = [k for k in s2 if k.startswith("fc.") and k.count(".") == 1]
    save_safetensors(f"{d}/probe-in.st",
                     {k: v for k, v in s2.items() if k in params or k == "graphc.step"})
    run(["graphrun", f"{d}/probe.plan", "--steps", "1", "--resume", f"{d}/probe-in.st",
         "--save", f"{d}/probe-out.st"] + data)
    probe = load_safetensors(f"{d}/probe-out.st")
    run(["graphrun", f"{d}/opt.plan", "--steps", "1", "--resume", f"{d}/s2.st",
         "--save", f"{d}/s3.st"] + data)
    s3 = load_safetensors(f"{d}/s3.st")

    state = {k: v.astype(np.float64) for k, v in s2.items() if k != "graphc.step"}
    failures, worst = [], 0.0
    grads = {name: state[name] - probe[name].astype(np.float64) for name in params}
    if kind.endswith("+clip"):
        # torch.nn.utils.clip_grad_norm_(params, CLIP): one factor for all.
        norm = np.sqrt(sum(float((g * g).sum()) for g in grads.values()))
        factor = min(1.0, CLIP / (norm + 1e-6))
        if factor > 0.9:
            failures.append(f"the gradients' norm {norm:.4g} is not clipped by {CLIP}")
        grads = {name: g * factor for name, g in grads.items()}
    for name in params:
        g = grads[name]
        for key, want in expected(kind, state[name], g, state, name, 3).items():
            got = s3[key].astype(np.float64)
            # float32: the probe's `p - g` rounds at p's last bit, the step's
            # arithmetic at the result's.
            ulp = np.spacing(np.maximum(np.abs(s2[name]), np.abs(s3[key])).astype(np.float32))
            err = np.abs(got - want)
            bound = 1e-4 * np.abs(want - state[key]) + 8 * ulp.astype(np.float64)
            worst = max(worst, float((err / np.maximum(bound, 1e-30)).max()))
            for index in np.argwhere(err > bound)[:3]:
                index = tuple(int(i) for i in index)
                failures.append(f"{key}{list(index)}: graphc {got[index]:.8g}, "
                                f"NumPy {want[index]:.8g}")
    if int(s3["graphc.step"]) != 3:
        failures.append(f"graphc.step is {int(s3['graphc.step'])}, expected 3")
    print(f"{'ok' if not failures else 'FAIL'}: {kind}: worst error {worst:.2f} of the bound")
    for f in failures:
        print(f"  {f}")
    return not failures


def main():
    work, model = sys.argv[1], sys.argv[2]
    extra = sys.argv[3:]
    rng = np.random.default_rng(7)
    save_npy(os.path.join(work, "x.npy"), rng.uniform(size=(N, 1, 28, 28)).astype(np.float32))
    save_npy(os.path.join(work, "y.npy"), rng.integers(0, 10, size=N).astype(np.int32))
    results = [check(kind, work, model, extra) for kind in CASES]
    print(f"{sum(results)} of {len(results)} optimizers match NumPy")
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
