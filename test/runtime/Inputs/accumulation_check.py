"""Gradient accumulation's batch norm, through the real path: a step of two
micro-batches of 8 against a step of one batch of 8, on data whose every
image is the same (so every micro-batch, in any shuffled order, has the
statistics of the one batch):
  - the parameters move exactly as the one batch's (two halves of the
    gradient, each seeded with 1/2, sum to it: powers of two);
  - the running statistics were updated once per micro-batch, as PyTorch's
    are when it accumulates: with momentum 0.1 from mean 0 and variance 1,
    0.19 mu and 0.81 + 0.19 var against the one batch's 0.1 mu and
    0.9 + 0.1 var.

  accumulation_check.py WORKDIR MODEL.mlir

Prints one line per check and exits 1 on any mismatch.
"""
import os
import re
import subprocess
import sys

import numpy as np

from gradcheck_ops import load_safetensors, save_npy


def run(args):
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)


def main():
    work, model = sys.argv[1], sys.argv[2]
    rng = np.random.default_rng(5)
    image = rng.uniform(size=(1, 1, 28, 28)).astype(np.float32)
    save_npy(os.path.join(work, "x.npy"), np.repeat(image, 16, axis=0))
    save_npy(os.path.join(work, "y.npy"), np.full(16, 3, dtype=np.int32))
    with open(model) as f:
        text = f.read()
    params = sorted(re.findall(r"nn\.parameter @([\w.]+)", text))
    means = sorted(re.findall(r"nn\.state @([\w.]+running_mean)", text))
    states = {}
    for name, extra in {"one": [], "two": ["--grad-accumulation", "2"]}.items():
        plan = os.path.join(work, name + ".plan")
        run(["graphc", "compile", model, "-o", plan, "--batch-size", "8", "--optimizer", "sgd",
             "--lr", "0.5", "--weight-decay", "0"] + extra)
        saved = os.path.join(work, name + ".st")
        run(["graphrun", plan, "--steps", "1", "--warmup", "0", "--save", saved,
             "--data", f"npy:{work}/x.npy,{work}/y.npy"])
        states[name] = load_safetensors(saved)
    one, two = states["one"], states["two"]
    ok = True
    moved = [k for k in params if not np.array_equal(one[k], two[k])]
    good = not moved
    ok &= good
    print(f"{'ok' if good else 'FAIL'}: {len(params)} parameters after the step "
          f"{'identical' if good else 'differ: ' + ', '.join(moved)}")
    for mean in means:
        var = mean.replace("running_mean", "running_var")
        mu, sigma2 = one[mean].astype(np.float64) / 0.1, (one[var] - 0.9) / 0.1
        expect_mean, expect_var = 0.19 * mu, 0.81 + 0.19 * sigma2
        err = max(np.max(np.abs(two[mean] - expect_mean) / np.maximum(1e-3, np.abs(expect_mean))),
                  np.max(np.abs(two[var] - expect_var) / expect_var))
        good = err < 1e-5 and np.max(np.abs(mu)) > 1e-3
        ok &= good
        print(f"{'ok' if good else 'FAIL'}: {mean[:-len('.running_mean')]}: running statistics "
              f"updated twice (relative error {err:.1e})")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
