"""Compares two graphrun checkpoints (safetensors) and two --report files:
the CPU ≡ CUDA check of tools/gpu-check.

  compare_state.py CPU.st CUDA.st --reports CPU.json CUDA.json [--json OUT.json]

Passes when the final losses agree within --loss-rtol (relative) and every
float32 tensor agrees elementwise within
    |cuda - cpu| <= rtol * |cpu| + atol * max(1, max |cpu| of the tensor),
integer tensors exactly (the step counter). The two devices sum in different
orders (cuDNN and oneDNN pick their own algorithms), so after N steps the
states differ by rounding carried through N updates, not by 0; the defaults
(rtol 1e-3, atol 1e-4, loss 1e-3) are what float32 allows for 20 steps of
the small models, and the worst errors are printed so the margin shows.
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("cpu")
    parser.add_argument("cuda")
    parser.add_argument("--reports", nargs=2, metavar=("CPU_JSON", "CUDA_JSON"))
    parser.add_argument("--rtol", type=float, default=1e-3)
    parser.add_argument("--atol", type=float, default=1e-4)
    parser.add_argument("--loss-rtol", type=float, default=1e-3)
    parser.add_argument("--json", default="")
    args = parser.parse_args()

    a, b = read_safetensors(args.cpu), read_safetensors(args.cuda)
    result = {"tensors": len(a), "rtol": args.rtol, "atol": args.atol,
              "loss_rtol": args.loss_rtol, "failures": []}
    if sorted(a) != sorted(b):
        result["failures"].append(f"different tensors: {sorted(set(a) ^ set(b))}")
    worst_name, worst = "", 0.0
    for name in sorted(set(a) & set(b)):
        x, y = a[name], b[name]
        if x.shape != y.shape or x.dtype != y.dtype:
            result["failures"].append(f"{name}: {x.dtype}{list(x.shape)} vs {y.dtype}{list(y.shape)}")
            continue
        if x.dtype.kind != "f":
            if not np.array_equal(x, y):
                result["failures"].append(f"{name}: integer values differ")
            continue
        x64, y64 = x.astype(np.float64), y.astype(np.float64)
        if not (np.isfinite(x64).all() and np.isfinite(y64).all()):
            result["failures"].append(f"{name}: non-finite values")
            continue
        scale = max(1.0, float(np.abs(x64).max(initial=0.0)))
        bound = args.rtol * np.abs(x64) + args.atol * scale
        excess = np.abs(y64 - x64) / bound
        if excess.size and float(excess.max()) > worst:
            worst, worst_name = float(excess.max()), name
        if excess.size and float(excess.max()) > 1:
            i = np.unravel_index(int(np.argmax(excess)), x.shape)
            result["failures"].append(f"{name}{list(map(int, i))}: cpu {x64[i]:.7g}, cuda "
                                      f"{y64[i]:.7g}")
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
