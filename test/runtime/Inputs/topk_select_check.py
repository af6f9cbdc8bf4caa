"""nn.topk_select's kernel against NumPy, through graphc's inference path.

  topk_select_check.py WORKDIR

For each case an @infer model selects `count` of an f32 input's entries by
magnitude (graphc compile --forward, graphrun infer on the CPU), and the
result must be exactly NumPy's: the count entries of largest |x| (ties to
the lower index, NaN largest), in index order, values bit for bit, then
padding (value 0, index -1). The cases reach each of the kernel's paths: the
exact radix passes (small counts, large counts), the sampled threshold with
its candidates (inputs of all shapes, a length that is no multiple of 16),
and its fallbacks, when more entries than the results hold reach the
threshold (all magnitudes equal) and when the sample draws more than its
share of large entries (large entries placed exactly where it reads: the
kernel's hash, replicated here). Prints one line per case and "ok" at the
end; exits 1 at the first mismatch.
"""
import os
import subprocess
import sys

import numpy as np


def sample_positions(n, count):
    """Where the kernel's sample reads (OptimizerKernels.cpp)."""
    s = max(1024, -(-8 * n // count))
    stride = n // s
    j = np.arange(s, dtype=np.uint64)
    h = ((j + np.uint64(1)) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(33)
    return (j * np.uint64(stride) + h % np.uint64(stride)).astype(np.int64)


def run(work, name, x, count, room):
    n = x.size
    model = os.path.join(work, f"{name}.mlir")
    with open(model, "w") as f:
        f.write(
            f"func.func @infer(%x: tensor<{n}xf32>, %kf: tensor<f32>) -> "
            f"(tensor<{room}xf32>, tensor<{room}xf32>) {{\n"
            f"  %k = nn.cast %kf : tensor<f32> to i64\n"
            f"  %v, %i = nn.topk_select %x count %k : tensor<{n}xf32> -> "
            f"tensor<{room}xf32>, tensor<{room}xi32>\n"
            f"  %f = nn.cast %i : tensor<{room}xi32> to f32\n"
            f"  return %v, %f : tensor<{room}xf32>, tensor<{room}xf32>\n}}\n")
    plan = os.path.join(work, f"{name}.plan")
    subprocess.run(["graphc", "compile", "--forward", model, "-o", plan], check=True,
                   stdout=subprocess.DEVNULL)
    xs, ks = os.path.join(work, f"{name}.x.npy"), os.path.join(work, f"{name}.k.npy")
    vs, is_ = os.path.join(work, f"{name}.v.npy"), os.path.join(work, f"{name}.i.npy")
    np.save(xs, x.astype(np.float32))
    np.save(ks, np.array(count, dtype=np.float32))
    subprocess.run(["graphrun", "infer", plan, "--inputs", f"{xs},{ks}", "--outputs",
                    f"{vs},{is_}", "--threads", "1"], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    values, indices = np.load(vs), np.load(is_).astype(np.int64)
    k = min(max(count, 1), room)
    key = x.astype(np.float32).view(np.int32) & 0x7FFFFFFF
    expected = np.sort(np.argsort(-key.astype(np.int64), kind="stable")[:k])
    got_bits = values[:k].view(np.int32)
    want_bits = x.astype(np.float32)[expected].view(np.int32)
    if not ((indices[:k] == expected).all() and (got_bits == want_bits).all() and
            (indices[k:] == -1).all() and (values[k:] == 0).all()):
        wrong = np.flatnonzero(indices[:k] != expected)
        print(f"{name}: n={n} count={count} K={room}: MISMATCH "
              f"(first differing entry {wrong[:1].tolist()} of {wrong.size})")
        sys.exit(1)
    print(f"{name}: n={n} count={count} K={room}: as NumPy selects")


def main():
    work = sys.argv[1]
    os.makedirs(work, exist_ok=True)
    r = np.random.default_rng(7)
    n = 300_007  # no multiple of 16: the blocks' tail
    run(work, "normal", r.standard_normal(n), 300, 2400)
    run(work, "laplace", r.laplace(size=n) * 1e-4, 1000, 8000)
    run(work, "few", r.standard_normal(n), 63, 504)          # under 64: exact
    run(work, "many", r.standard_normal(n), 40_000, 75_002)  # over an eighth: exact
    run(work, "no-room", r.standard_normal(n), 300, 300)     # K = count: exact
    ties = np.round(r.standard_normal(n) * 2) / 2
    run(work, "ties", ties, 2000, 16_000)
    run(work, "equal", np.full(n, 0.5), 300, 2400)           # all reach t: fallback
    nan = r.standard_normal(n)
    nan[r.integers(0, n, 100)] = np.nan
    nan[r.integers(0, n, 100)] = -np.inf
    run(work, "nan", nan, 300, 2400)
    fooled = r.standard_normal(n) * 1e-3
    at = sample_positions(n, 300)
    fooled[at] = 1.0 + r.random(at.size)                     # few reach t: fallback
    run(work, "fooled", fooled, 300, 2400)
    run(work, "zeros", np.zeros(n), 300, 2400)
    print("ok")


if __name__ == "__main__":
    main()
