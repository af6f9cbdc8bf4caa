"""PowerSGD against NumPy: one step of a plan compiled with
--grad-compression=powersgd:R, run through the real path (graphc compile,
graphrun on the CPU), matches the algorithm of Vogels et al. (PyTorch DDP's
powerSGD_hook) computed in float64 from the same gradient, error and Q.

  1. two steps from the initializers, saved: the error feedback and the
     warm-started Q are then non-trivial;
  2. the gradient of step 3: a probe plan (uncompressed, plain SGD, lr 1)
     resumed from that checkpoint (less PowerSGD's state) moves each parameter
     by exactly -gradient on the same batch;
  3. step 3, resumed from the checkpoint, against NumPy:
       M = G + E;  P = orth(Q) M^T (rows);  P = orth(P);  Q' = P M;
       G' = P^T Q';  E' = M - G';  W' = W - lr G'
     and every uncompressed parameter against W - lr G. Also, from graphc's
     own numbers alone, the error feedback's invariant: G + E = G' + E'
     (nothing of the gradient is lost, only deferred).

  powersgd_check.py WORKDIR MODEL.mlir RANK [graphc compile options...]

Prints one line per tensor kind and exits 1 on any mismatch.
"""
import os
import subprocess
import sys

import numpy as np

from gradcheck_ops import load_safetensors, save_npy, save_safetensors

N = 16
LR = 0.05


def orth(rows):
    """Modified Gram-Schmidt over the rows, as nn.orthonormalize (whose
    replacement of a row with nothing left never happens here)."""
    out = rows.copy()
    for i in range(out.shape[0]):
        norm2 = np.dot(out[i], out[i])
        assert norm2 >= 1e-30, "a degenerate row"
        out[i] /= np.sqrt(norm2)
        for j in range(i + 1, out.shape[0]):
            out[j] -= np.dot(out[i], out[j]) * out[i]
    return out


def run(args):
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)


def main():
    work, model, rank = sys.argv[1], sys.argv[2], int(sys.argv[3])
    extra = sys.argv[4:]
    rng = np.random.default_rng(11)
    shape = (N, 1, 28, 28)
    save_npy(os.path.join(work, "x.npy"), rng.uniform(size=shape).astype(np.float32))
    save_npy(os.path.join(work, "y.npy"), rng.integers(0, 10, size=N).astype(np.int32))
    common = ["--batch-size", str(N), "--optimizer", "sgd", "--weight-decay", "0"] + extra
    run(["graphc", "compile", model, "-o", f"{work}/psgd.plan", "--lr", str(LR),
         f"--grad-compression=powersgd:{rank}"] + common)
    run(["graphc", "compile", model, "-o", f"{work}/probe.plan", "--lr", "1"] + common)
    data = ["--data", f"npy:{work}/x.npy,{work}/y.npy", "--warmup", "0"]
    run(["graphrun", f"{work}/psgd.plan", "--steps", "2", "--save", f"{work}/s2.st"] + data)
    s2 = load_safetensors(f"{work}/s2.st")
    factored = sorted(k[len("graphc.powersgd."):-len(".q")] for k in s2
                      if k.startswith("graphc.powersgd.") and k.endswith(".q"))
    params = [k for k in s2 if not k.startswith("graphc.") and "running_" not in k
              and not k.endswith("num_batches_tracked")]
    if not factored:
        sys.exit("FAIL: the plan compresses no gradient")
    save_safetensors(f"{work}/probe-in.st",
                     {k: v for k, v in s2.items() if not k.startswith("graphc.powersgd.")})
    run(["graphrun", f"{work}/probe.plan", "--steps", "1", "--resume", f"{work}/probe-in.st",
         "--save", f"{work}/probe-out.st"] + data)
    probe = load_safetensors(f"{work}/probe-out.st")
    run(["graphrun", f"{work}/psgd.plan", "--steps", "1", "--resume", f"{work}/s2.st",
         "--save", f"{work}/s3.st"] + data)
    s3 = load_safetensors(f"{work}/s3.st")

    f64 = {k: v.astype(np.float64) for k, v in s2.items() if v.dtype == np.float32}
    worst = {"parameter": 0.0, "error": 0.0, "q": 0.0, "invariant": 0.0}
    failures = []

    def compare(kind, key, got, want, scale):
        err = float(np.abs(got - want).max() / max(scale, 1e-30))
        worst[kind] = max(worst[kind], err)
        if err > 2e-4:
            failures.append(f"{key}: worst difference {err:.2e} of its scale")

    for name in params:
        g = f64[name] - probe[name].astype(np.float64)
        got = s3[name].astype(np.float64)
        if name not in factored:
            want = f64[name] - LR * g
            compare("parameter", name, got, want, np.abs(want - f64[name]).max())
            continue
        e, q = f64[f"graphc.powersgd.{name}.error"], f64[f"graphc.powersgd.{name}.q"]
        m = g.reshape(g.shape[0], -1) + e
        p = orth(orth(q) @ m.T)
        q_new = p @ m
        approx = p.T @ q_new
        want = f64[name] - LR * approx.reshape(g.shape)
        compare("parameter", name, got, want, np.abs(want - f64[name]).max())
        e_new = s3[f"graphc.powersgd.{name}.error"].astype(np.float64)
        compare("error", name + " error", e_new, m - approx, np.abs(m).max())
        compare("q", name + " q", s3[f"graphc.powersgd.{name}.q"].astype(np.float64), q_new,
                np.abs(q_new).max())
        # graphc's own update and error against the gradient they came from.
        applied = (f64[name] - got).reshape(m.shape) / LR
        compare("invariant", name + " G + E = G' + E'", applied + e_new, m, np.abs(m).max())
    if int(s3["graphc.step"]) != 3:
        failures.append(f"graphc.step is {int(s3['graphc.step'])}, expected 3")
    for kind, value in worst.items():
        print(f"{kind}: worst {value:.1e} of its scale")
    print(f"{'ok' if not failures else 'FAIL'}: {len(factored)} of {len(params)} parameters "
          f"as rank-{rank} factors ({', '.join(factored)})")
    for f in failures:
        print(f"  {f}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
