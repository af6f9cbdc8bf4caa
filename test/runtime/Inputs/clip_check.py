"""Gradient clipping through the real path, in every precision: with plain
SGD (lr 1, no weight decay) a clipped step moves the parameters by exactly
-g * C / |g|, so the update's L2 norm over all parameters is C, in the
direction of the unclipped step, and graphrun's report gives the norm
before clipping. In mixed precision the norm is of the unscaled gradients (fp16's loss scale is 65536 at the first step: a norm of
the scaled ones would make the step 65536 times smaller).

  clip_check.py WORKDIR MODEL.mlir

Prints one line per case and exits 1 on any mismatch.
"""
import json
import os
import re
import subprocess
import sys

import numpy as np

from gradcheck_ops import load_safetensors, save_npy

N, CLIP = 16, 0.25
# fp16 with a static scale of 512: the first step of dynamic scaling (65536)
# may overflow and be skipped.
CASES = {"fp32": [], "fp32 unfused": ["--no-fuse"], "bf16": ["--amp=bf16"],
         "fp16": ["--amp=fp16", "--loss-scale", "512"]}


def run(args):
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)


def step(work, model, name, extra, params):
    plan = os.path.join(work, name + ".plan")
    run(["graphc", "compile", model, "-o", plan, "--batch-size", str(N), "--optimizer", "sgd",
         "--lr", "1", "--weight-decay", "0"] + extra)
    before, after, report = plan + ".0.st", plan + ".1.st", plan + ".json"
    run(["graphrun", plan, "--steps", "0", "--save", before])
    run(["graphrun", plan, "--steps", "1", "--warmup", "0", "--resume", before, "--save", after,
         "--data", f"npy:{work}/x.npy,{work}/y.npy", "--report", report])
    p0, p1 = load_safetensors(before), load_safetensors(after)
    with open(report) as f:
        recorded = json.load(f).get("grad_norm")
    return np.concatenate([(p1[k].astype(np.float64) - p0[k]).ravel() for k in params]), recorded


def main():
    work, model = sys.argv[1], sys.argv[2]
    rng = np.random.default_rng(3)
    save_npy(os.path.join(work, "x.npy"), rng.uniform(size=(N, 1, 28, 28)).astype(np.float32))
    save_npy(os.path.join(work, "y.npy"), rng.integers(0, 10, size=N).astype(np.int32))
    # The parameters (not batch norm's running statistics, which move too).
    with open(model) as f:
        params = sorted(re.findall(r"nn\.parameter @([\w.]+)", f.read()))
    ok = True
    for case, extra in CASES.items():
        tag = case.replace(" ", "-")
        free, none = step(work, model, tag + "-free", extra, params)
        clipped, recorded = step(work, model, tag + "-clipped",
                                 extra + ["--clip-grad-norm", str(CLIP)], params)
        norm, free_norm = np.linalg.norm(clipped), np.linalg.norm(free)
        cosine = float(clipped @ free) / max(norm * free_norm, 1e-300)
        # The report's grad_norm: the gradients' norm before clipping, which
        # the unclipped step moved by (none without clipping).
        good = (abs(norm / CLIP - 1) < 1e-4 and free_norm > 1.5 * CLIP and cosine > 1 - 1e-6
                and none is None and recorded is not None
                and abs(recorded / free_norm - 1) < 1e-4)
        ok &= good
        print(f"{'ok' if good else 'FAIL'}: {case}: step norm {norm:.7g} (clip {CLIP}), "
              f"unclipped {free_norm:.4g} (reported {recorded}), cosine {cosine:.8f}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
