"""Compares two graphrun checkpoints (safetensors) and two --report files:
the CPU ≡ CUDA trajectory check of tools/gpu-check.

  compare_state.py CPU.st CUDA.st --reports CPU.json CUDA.json
                   [--floor CPU_PERTURBED.st] [--json OUT.json]

Every float32 tensor is measured elementwise against
    |cuda - cpu| <= rtol * |cpu| + atol * max(1, max |cpu| of the tensor)
(the worst ratio is "the fraction of the tolerance"), integer tensors
exactly (the step counter), and the final losses within --loss-rtol.

The two devices sum in different orders (cuDNN and oneDNN pick their own
algorithms), so the states differ by rounding carried through the steps.
How far that carries depends on the model: batch norm over a nearly
constant channel divides by a standard deviation near sqrt(eps), so deep
networks at initialization amplify a rounding difference of 1e-7 into
gradients that differ in their first digit (measured: ResNet-50 after one
step differs from itself by 151 times the tolerance between two CPU runs
whose only difference is oneDNN's instruction set). --floor gives that
noise floor: a checkpoint of the same run on the CPU perturbed (another
instruction set and thread count). Each tensor then passes when its worst
fraction is within max(1, --floor-factor x that tensor's own floor), so
noise in one layer never excuses another; without --floor, within 1. Which command computes differently is graphrun crosscheck's
question; this one asks whether whole training runs stay together.
Needs only NumPy.
"""
import argparse
import json
import struct
import sys

import numpy as np

DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
          "BF16": np.uint16, "BOOL": np.bool_, "U8": np.uint8}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    body = data[8 + length:]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        tensors[name] = np.frombuffer(body[begin:end], DTYPES[info["dtype"]]).reshape(
            info["shape"])
    return tensors


def measure(a, b, args, failures):
    """Per float tensor, its worst fraction of the tolerance between two
    states, and a line naming its worst element; structural differences
    (names, shapes, integers, non-finite values) go to `failures`."""
    if sorted(a) != sorted(b):
        failures.append(f"different tensors: {sorted(set(a) ^ set(b))}")
    fractions, differing = {}, {}
    for name in sorted(set(a) & set(b)):
        x, y = a[name], b[name]
        if x.shape != y.shape or x.dtype != y.dtype:
            failures.append(f"{name}: {x.dtype}{list(x.shape)} vs {y.dtype}{list(y.shape)}")
            continue
        if x.dtype.kind != "f":
            if not np.array_equal(x, y):
                failures.append(f"{name}: integer values differ")
            continue
        x64, y64 = x.astype(np.float64), y.astype(np.float64)
        if not (np.isfinite(x64).all() and np.isfinite(y64).all()):
            failures.append(f"{name}: non-finite values")
            continue
        scale = max(1.0, float(np.abs(x64).max(initial=0.0)))
        bound = args.rtol * np.abs(x64) + args.atol * scale
        excess = np.abs(y64 - x64) / bound
        fractions[name] = float(excess.max()) if excess.size else 0.0
        if excess.size:
            i = np.unravel_index(int(np.argmax(excess)), x.shape)
            differing[name] = f"{name}{list(map(int, i))}: cpu {x64[i]:.7g}, cuda {y64[i]:.7g}"
    return fractions, differing


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("cpu")
    parser.add_argument("cuda")
    parser.add_argument("--reports", nargs=2, metavar=("CPU_JSON", "CUDA_JSON"))
    parser.add_argument("--rtol", type=float, default=1e-3)
    parser.add_argument("--atol", type=float, default=1e-4)
    parser.add_argument("--loss-rtol", type=float, default=1e-3)
    parser.add_argument("--floor", default="",
                        help="a checkpoint of the same run on the CPU, perturbed")
    parser.add_argument("--floor-factor", type=float, default=20.0)
    parser.add_argument("--json", default="")
    args = parser.parse_args()

    a, b = read_safetensors(args.cpu), read_safetensors(args.cuda)
    result = {"tensors": len(a), "rtol": args.rtol, "atol": args.atol,
              "loss_rtol": args.loss_rtol, "failures": []}
    fractions, differing = measure(a, b, args, result["failures"])
    floors = measure(a, read_safetensors(args.floor), args, [])[0] if args.floor else {}
    # Each tensor against its own floor: noise in one layer never excuses
    # another.
    limits = {name: max(1.0, args.floor_factor * floors.get(name, 0.0)) for name in fractions}
    over = sorted((f / limits[name], name) for name, f in fractions.items() if f > limits[name])
    worst_name = max(fractions, key=lambda n: fractions[n] / limits[n], default="")
    worst = fractions.get(worst_name, 0.0)
    limit = limits.get(worst_name, 1.0)
    if args.floor:
        result["floor_fraction_of_tolerance"] = max(floors.values(), default=0.0)
        result["floor_of_worst_tensor"] = floors.get(worst_name, 0.0)
    result["limit_fraction_of_tolerance"] = limit
    result["failures"] += [differing[name] for _, name in reversed(over)][:20]
    result["worst_tensor"] = worst_name
    result["worst_fraction_of_tolerance"] = worst
    if args.reports:
        losses = []
        for path in args.reports:
            with open(path) as f:
                losses.append(json.load(f)["final_loss"])
        result["loss_cpu"], result["loss_cuda"] = losses
        rel = abs(losses[1] - losses[0]) / max(abs(losses[0]), 1e-30)
        result["loss_relative_difference"] = rel
        if not rel <= args.loss_rtol:
            result["failures"].append(f"final loss: cpu {losses[0]:.7g}, cuda {losses[1]:.7g}")
    result["ok"] = not result["failures"]
    print(f"{'ok' if result['ok'] else 'FAIL'}: {len(a)} tensors; worst {worst_name} at "
          f"{worst:.3f} of the tolerance" +
          (f" (its floor on the CPU {result['floor_of_worst_tensor']:.3f}, limit "
           f"{limit:.3f})" if args.floor else "") +
          (f"; loss cpu {result['loss_cpu']:.6g} cuda {result['loss_cuda']:.6g}"
           if args.reports else ""))
    for failure in result["failures"][:20]:
        print(f"  {failure}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    sys.exit(0 if result["ok"] else 1)


if __name__ == "__main__":
    main()
