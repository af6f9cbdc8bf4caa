"""The weights' average (graphc compile --ema-decay D), through the real
path, against its rule: after step 1 every average is a copy of its tensor
(parameters and batch norm's running statistics), and after each later step
ema_t = ema_{t-1} + (1 - D) (x_t - ema_{t-1}), x_t the tensor after step t
(PyTorch's AveragedModel with get_ema_multi_avg_fn(D), use_buffers=True),
with graphc.ema_updates counting the steps. Three steps run one at a time
(each resuming the last one's checkpoint) end in the same bytes as three
steps in one run.

  ema_check.py WORKDIR MODEL.mlir

Prints one line per check and exits 1 on any mismatch.
"""
import os
import re
import subprocess
import sys

import numpy as np

from gradcheck_ops import load_safetensors

DECAY = 0.75


def run(args):
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)


def main():
    work, model = sys.argv[1], sys.argv[2]
    with open(model) as f:
        text = f.read()
    tensors = sorted(re.findall(r"nn\.parameter @([\w.]+)", text) +
                     re.findall(r"nn\.state @([\w.]+running_(?:mean|var))", text))
    plan = os.path.join(work, "ema.plan")
    run(["graphc", "compile", model, "-o", plan, "--batch-size", "8", "--optimizer", "sgd",
         "--lr", "0.1", "--ema-decay", str(DECAY)])
    states, previous = [], None
    for t in range(1, 4):
        saved = os.path.join(work, f"step{t}.st")
        run(["graphrun", plan, "--steps", "1", "--warmup", "0", "--save", saved] +
            (["--resume", previous] if previous else []))
        states.append(load_safetensors(saved))
        previous = saved
    whole = os.path.join(work, "whole.st")
    run(["graphrun", plan, "--steps", "3", "--warmup", "0", "--save", whole])
    ok = True

    def report(good, message):
        nonlocal ok
        ok &= good
        print(f"{'ok' if good else 'FAIL'}: {message}")

    first = states[0]
    copies = [k for k in tensors if not np.array_equal(first["graphc.ema." + k], first[k])]
    report(not copies and int(first["graphc.ema_updates"]) == 1,
           f"step 1: {len(tensors)} averages are copies of their tensors"
           + (" (not: " + ", ".join(copies) + ")" if copies else ""))
    for t in (1, 2):
        before, after = states[t - 1], states[t]
        worst = 0.0
        for k in tensors:
            ema = before["graphc.ema." + k].astype(np.float64)
            expect = ema + (1 - DECAY) * (after[k].astype(np.float64) - ema)
            got = after["graphc.ema." + k]
            worst = max(worst, float(np.max(np.abs(got - expect) / np.maximum(1, np.abs(expect)))))
        moved = any(not np.array_equal(after[k], before[k]) for k in tensors)
        report(worst < 1e-6 and moved and int(after["graphc.ema_updates"]) == t + 1,
               f"step {t + 1}: every average moved a quarter of the way (worst {worst:.1e})")
    last, together = states[-1], load_safetensors(whole)
    differ = [k for k in together if not np.array_equal(together[k], last[k])]
    report(together.keys() == last.keys() and not differ,
           "three steps resumed one by one = three in one run"
           + (" (not: " + ", ".join(differ) + ")" if differ else ""))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
