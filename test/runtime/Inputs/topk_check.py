"""Deep gradient compression against NumPy: steps of a plan compiled with
--grad-compression=topk:RATIO, run through the real path (graphc compile,
graphrun on the CPU), match the algorithm of Lin et al. (momentum
correction, local accumulation, top-k selection, momentum factor masking)
computed in float64 from the same gradients and states.

  one WORKDIR MODEL.mlir RATIO [graphc compile options...]
    1. two steps from the initializers, saved: the momentum and the
       accumulation are then non-trivial;
    2. the gradient of step 3: a probe plan (uncompressed, plain SGD, lr 1,
       no weight decay) resumed from that checkpoint (less top-k's states)
       moves each parameter by exactly -gradient on the same batch;
    3. step 3, resumed from the checkpoint, against NumPy:
         g' = G + wd W;  u = m u + g';  v = v + u;  S = top-k of |v|;
         W' = W - lr v[S] (zero elsewhere);  v[S] = 0;  u[S] = 0
       and every other parameter against momentum SGD. Also: the entries
       graphc sent are those NumPy selects (ties to the lower index), and
       from graphc's own numbers, the accumulation's conservation:
       v + u = v' + sent (nothing of the gradient is lost, only deferred).

  zeros CHECKPOINT NAME
    How many of NAME's entries are exactly zero (after a step, those sent).

  ranks WORKDIR MODEL.mlir RATIO
    Two ranks, one example each (so which rank takes which does not
    matter), one step from zero state: W' = W - lr (S(g_a') + S(g_b')) / 2,
    the mean of the two ranks' sparse sets, and the checkpoint's states the
    ranks' mean of what each kept.

Prints one line per quantity and exits 1 on any mismatch.
"""
import os
import subprocess
import sys

import numpy as np

from gradcheck_ops import load_safetensors, save_npy, save_safetensors

LR = 0.05
MOMENTUM = 0.9
WD = 0.01
PREFIX = "graphc.dgc."


def run(args):
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)


def topk(v, k):
    """The k flat indices of largest |v|, ties to the lower index, sorted."""
    order = np.argsort(-np.abs(v.ravel()), kind="stable")
    return np.sort(order[:k])


def sparse(v, k):
    out = np.zeros(v.size)
    sel = topk(v, k)
    out[sel] = v.ravel()[sel]
    return out.reshape(v.shape), sel


class Checker:
    def __init__(self):
        self.worst = {}
        self.failures = []

    def compare(self, kind, key, got, want, scale, tolerance=2e-4):
        err = float(np.abs(got - want).max() / max(scale, 1e-30))
        self.worst[kind] = max(self.worst.get(kind, 0.0), err)
        if err > tolerance:
            self.failures.append(f"{key}: worst difference {err:.2e} of its scale")

    def report(self, summary):
        for kind, value in self.worst.items():
            print(f"{kind}: worst {value:.1e} of its scale")
        print(f"{'ok' if not self.failures else 'FAIL'}: {summary}")
        for f in self.failures:
            print(f"  {f}")
        sys.exit(1 if self.failures else 0)


def model_parameters(states):
    return [k for k in states if not k.startswith("graphc.") and "running_" not in k
            and not k.endswith("num_batches_tracked") and not k.endswith("momentum_buffer")]


def one(work, model, ratio, extra):
    n = 16
    rng = np.random.default_rng(5)
    save_npy(f"{work}/x.npy", rng.uniform(size=(n, 1, 28, 28)).astype(np.float32))
    save_npy(f"{work}/y.npy", rng.integers(0, 10, size=n).astype(np.int32))
    common = ["--batch-size", str(n)] + extra
    run(["graphc", "compile", model, "-o", f"{work}/topk.plan", "--lr", str(LR),
         "--optimizer", "momentum", "--momentum", str(MOMENTUM), "--weight-decay", str(WD),
         f"--grad-compression=topk:{ratio}"] + common)
    run(["graphc", "compile", model, "-o", f"{work}/probe.plan", "--lr", "1", "--optimizer",
         "sgd", "--weight-decay", "0"] + common)
    data = ["--data", f"npy:{work}/x.npy,{work}/y.npy", "--warmup", "0"]
    run(["graphrun", f"{work}/topk.plan", "--steps", "2", "--save", f"{work}/s2.st"] + data)
    s2 = load_safetensors(f"{work}/s2.st")
    sparsified = sorted(k[len(PREFIX):-len(".accumulation")] for k in s2
                        if k.startswith(PREFIX) and k.endswith(".accumulation"))
    if not sparsified:
        sys.exit("FAIL: the plan sparsifies no gradient")
    params = model_parameters(s2)
    save_safetensors(f"{work}/probe-in.st", {k: v for k, v in s2.items()
                                             if not k.startswith(PREFIX)
                                             and not k.endswith("momentum_buffer")})
    run(["graphrun", f"{work}/probe.plan", "--steps", "1", "--resume", f"{work}/probe-in.st",
         "--save", f"{work}/probe-out.st"] + data)
    probe = load_safetensors(f"{work}/probe-out.st")
    run(["graphrun", f"{work}/topk.plan", "--steps", "1", "--resume", f"{work}/s2.st",
         "--save", f"{work}/s3.st"] + data)
    s3 = load_safetensors(f"{work}/s3.st")
    f64 = {k: v.astype(np.float64) for k, v in s2.items() if v.dtype == np.float32}
    check = Checker()
    selected = 0
    for name in params:
        w = f64[name]
        g = w - probe[name].astype(np.float64)
        got = s3[name].astype(np.float64)
        if name not in sparsified:
            # Momentum SGD, weight decay off for rank-1 parameters.
            decay = 0.0 if w.ndim == 1 else WD
            buf = MOMENTUM * f64[f"{name}.momentum_buffer"] + g + decay * w
            want = w - LR * buf
            check.compare("parameter", name, got, want, np.abs(want - w).max())
            continue
        k = int(np.ceil(ratio * w.size))
        u = MOMENTUM * f64[f"{name}.momentum_buffer"] + g + WD * w
        v = f64[f"{PREFIX}{name}.accumulation"] + u
        sent, sel = sparse(v, k)
        want = w - LR * sent
        check.compare("parameter", name, got, want, np.abs(want - w).max())
        v_new = s3[f"{PREFIX}{name}.accumulation"].astype(np.float64)
        u_new = s3[f"{name}.momentum_buffer"].astype(np.float64)
        kept_v, kept_u = v.copy().ravel(), u.copy().ravel()
        kept_v[sel] = 0
        kept_u[sel] = 0
        check.compare("accumulation", name + " accumulation", v_new.ravel(), kept_v,
                      np.abs(v).max())
        check.compare("momentum", name + " momentum", u_new.ravel(), kept_u, np.abs(u).max())
        # graphc's selection: where it zeroed its accumulation.
        theirs = np.flatnonzero(v_new.ravel() == 0)
        if not np.array_equal(theirs, sel):
            check.failures.append(f"{name}: graphc sent {theirs.size} entries, "
                                  f"{np.setdiff1d(theirs, sel).size} of them not NumPy's top {k}")
        selected += sel.size
        # Conservation, from graphc's update and accumulation: what was sent
        # plus what is kept is everything accumulated.
        applied = (w - got) / LR
        check.compare("conservation", name + " v + u = v' + sent", (applied + v_new).ravel(),
                      v.ravel(), np.abs(v).max())
    if int(s3["graphc.step"]) != 3:
        check.failures.append(f"graphc.step is {int(s3['graphc.step'])}, expected 3")
    check.report(f"{len(sparsified)} of {len(params)} parameters sent as sparse sets "
                 f"({', '.join(sparsified)}), {selected} entries selected as NumPy selects")


def ranks(work, model, ratio):
    rng = np.random.default_rng(7)
    xs = rng.uniform(size=(2, 1, 28, 28)).astype(np.float32)
    ys = rng.integers(0, 10, size=2).astype(np.int32)
    save_npy(f"{work}/x.npy", xs)
    save_npy(f"{work}/y.npy", ys)
    for e in range(2):
        save_npy(f"{work}/x{e}.npy", xs[e:e + 1])
        save_npy(f"{work}/y{e}.npy", ys[e:e + 1])
    common = ["--batch-size", "1"]
    run(["graphc", "compile", model, "-o", f"{work}/topk.plan", "--lr", str(LR),
         "--optimizer", "momentum", "--momentum", str(MOMENTUM), "--weight-decay", str(WD),
         f"--grad-compression=topk:{ratio}"] + common)
    run(["graphc", "compile", model, "-o", f"{work}/probe.plan", "--lr", "1", "--optimizer",
         "sgd", "--weight-decay", "0"] + common)
    run(["graphrun", f"{work}/topk.plan", "--nodes", "2", "--threads", "1", "--steps", "1",
         "--warmup", "0", "--data", f"npy:{work}/x.npy,{work}/y.npy", "--save",
         f"{work}/two.st"])
    two = load_safetensors(f"{work}/two.st")
    grads = []
    for e in range(2):
        run(["graphrun", f"{work}/probe.plan", "--steps", "1", "--warmup", "0", "--data",
             f"npy:{work}/x{e}.npy,{work}/y{e}.npy", "--save", f"{work}/probe{e}.st"])
        grads.append(load_safetensors(f"{work}/probe{e}.st"))
    check = Checker()
    sparsified = sorted(k[len(PREFIX):-len(".accumulation")] for k in two
                        if k.startswith(PREFIX) and k.endswith(".accumulation"))
    if not sparsified:
        sys.exit("FAIL: the plan sparsifies no gradient")
    run(["graphrun", f"{work}/probe.plan", "--steps", "0", "--warmup", "0", "--save",
         f"{work}/init.st"])
    init = load_safetensors(f"{work}/init.st")
    for name in sparsified:
        w = init[name].astype(np.float64)
        k = int(np.ceil(ratio * w.size))
        sent, kept_v, kept_u = 0, 0, 0
        for e in range(2):
            g = w - grads[e][name].astype(np.float64)
            u = g + WD * w  # momentum and accumulation start at zero
            s, sel = sparse(u, k)
            sent = sent + s / 2
            left = u.ravel().copy()
            left[sel] = 0
            kept_v = kept_v + left / 2
            kept_u = kept_u + left / 2
        want = w - LR * sent
        check.compare("parameter", name, two[name].astype(np.float64), want,
                      np.abs(want - w).max())
        check.compare("accumulation", name + " accumulation (the ranks' mean)",
                      two[f"{PREFIX}{name}.accumulation"].astype(np.float64).ravel(), kept_v,
                      np.abs(kept_v).max())
        check.compare("momentum", name + " momentum (the ranks' mean)",
                      two[f"{name}.momentum_buffer"].astype(np.float64).ravel(), kept_u,
                      np.abs(kept_u).max())
    check.report(f"2 ranks: the mean of their sparse sets ({', '.join(sparsified)})")


def main():
    if sys.argv[1] == "zeros":  # zeros CHECKPOINT NAME: the entries exactly 0
        print(int(np.count_nonzero(load_safetensors(sys.argv[2])[sys.argv[3]] == 0)))
        return
    mode, work, model, ratio = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    os.makedirs(work, exist_ok=True)
    if mode == "one":
        one(work, model, ratio, sys.argv[5:])
    else:
        ranks(work, model, ratio)


if __name__ == "__main__":
    main()
