#!/usr/bin/env python3
"""The generated kernels' e^x against float64.

  exp_check.py make X.npy    [4, 32768] float32: the special values, then
                             bit patterns spread evenly over [-104, 89] and
                             over all other finite floats
  exp_check.py check X Y     Y = e^X: within 1 ulp where e^X is a normal
                             float, within the least subnormal below it;
                             +inf, +0, NaN and 1 exactly where they belong
"""
import sys

import numpy as np

SPECIAL = [np.inf, -np.inf, np.nan, 0.0, -0.0, 88.72283, 88.7229, 89.0, 1e30, -87.33655,
           -103.97, -103.98, -104.0, -104.5, -1e30, 1e-45, -1e-45, 1e-30, 3.4e38, -3.4e38]


def make(path):
    n = 4 * 32768
    bits = lambda v: int(np.array(v, np.float32).view(np.uint32))
    # Negative floats' bit patterns grow with their magnitude.
    neg = np.linspace(bits(-0.0), bits(-104.0), n // 2, dtype=np.uint64)
    pos = np.linspace(0, bits(89.0), n // 4, dtype=np.uint64)
    rest = np.linspace(0, 0xFFFFFFFF, n // 4, dtype=np.uint64)
    x = np.concatenate([neg, pos, rest]).astype(np.uint32).view(np.float32)[:n]
    x[:len(SPECIAL)] = np.array(SPECIAL, np.float32)
    np.save(path, x.reshape(4, 32768))


def check(xpath, ypath):
    x = np.load(xpath).reshape(-1)
    y = np.load(ypath).reshape(-1)
    with np.errstate(all="ignore"):
        ref = np.exp(x.astype(np.float64))
        ref32 = ref.astype(np.float32)
        nan = np.isnan(x)
        assert np.isnan(y[nan]).all(), "e^NaN is not NaN"
        inf = ~nan & (ref32 == np.inf)
        zero = ~nan & (ref32 == 0)
        bad = ~nan & ~inf & ~zero & ~np.isfinite(y)
        assert not bad.any(), f"non-finite e^x at x = {x[bad][:5]}"
        assert (y[inf] == np.inf).all(), f"e^x not +inf at x = {x[inf & (y != np.inf)][:5]}"
        # Past the clamp (x < -104) the result is +0 exactly; a subnormal
        # below it may round to 0 or the least subnormal.
        assert (y[x < -104] == 0).all() and not np.signbit(y[zero]).any()
        normal = ~nan & ~inf & (ref32 >= np.finfo(np.float32).tiny)
        ulp = np.abs(y[normal] - ref[normal]) / np.spacing(ref32[normal]).astype(np.float64)
        sub = ~nan & ~inf & ~normal
        sub_err = np.abs(y[sub] - ref[sub]).max() / 2.0**-149
    exact_one = y[(x == 0)]
    assert (exact_one == 1).all(), "e^0 is not 1"
    worst = int(np.argmax(ulp))
    print(f"exp_check: {normal.sum()} normal results, worst {ulp[worst]:.3f} ulp "
          f"(x = {x[normal][worst]!r}); {sub.sum()} subnormal or zero within "
          f"{sub_err:.2f} of the least subnormal; {nan.sum()} NaN, {inf.sum()} +inf")
    assert ulp.max() <= 1.0, f"{ulp.max()} ulp at x = {x[normal][worst]!r}"
    assert sub_err <= 1.0, f"subnormal results {sub_err} least subnormals off"
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2])
    else:
        sys.exit(check(sys.argv[2], sys.argv[3]))
