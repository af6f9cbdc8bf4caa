#!/usr/bin/env python3
"""graphc's tiny ViT against PyTorch float64 (vit_tiny_ref.json, written by
make_vit_tiny.py).

  vit_check.py losses REF REPORT1 REPORT2 REPORT3 [TOLERANCE]
      the final loss of graphrun runs of 1, 2 and 3 steps (--report) against
      PyTorch's losses of those steps: within TOLERANCE relative (1e-4)
  vit_check.py logits REF LOGITS.npy
      graphrun infer's logits against PyTorch's: within 1e-4 of their scale
"""
import json
import sys

import numpy as np


def main():
    ref = json.load(open(sys.argv[2]))
    if sys.argv[1] == "losses":
        reports = [a for a in sys.argv[3:] if a.endswith(".json")]
        tolerance = float(sys.argv[-1]) if not sys.argv[-1].endswith(".json") else 1e-4
        got = [json.load(open(p))["final_loss"] for p in reports]
        want = ref["losses"][:len(got)]
        worst = max(abs(g - w) / abs(w) for g, w in zip(got, want))
        print(f"vit_check: losses {' '.join(f'{g:.3f}' for g in got)}, worst relative error "
              f"{worst:.1e}, {'ok' if worst < tolerance else 'FAILED'} (tolerance {tolerance:g})")
        return 0 if worst < tolerance else 1
    got = np.load(sys.argv[3]).astype(np.float64)
    want = np.array(ref["logits"])
    if got.shape != want.shape:
        print(f"vit_check: logits {got.shape}, expected {want.shape}")
        return 1
    worst = np.abs(got - want).max() / np.abs(want).max()
    print(f"vit_check: logits {got.shape}, worst error {worst:.1e} of their scale, "
          f"{'ok' if worst < 1e-4 else 'FAILED'}")
    return 0 if worst < 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
