#!/usr/bin/env python3
"""graphrun infer against NumPy for graphc's MNIST softmax model.

  infer_check.py make DIR               images x.npy [4, 1, 28, 28], and wrong inputs
  infer_check.py check CHECKPOINT X Y   Y == X.reshape(4, 784) @ W^T + b, W and b
                                        from the checkpoint (within 1e-5)
"""
import json
import struct
import sys

import numpy as np


def tensor(path, name):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    t = json.loads(data[8:8 + n])[name]
    begin, end = t["data_offsets"]
    return np.frombuffer(data[8 + n + begin:8 + n + end], np.float32).reshape(t["shape"])


def main():
    if sys.argv[1] == "make":
        d = sys.argv[2]
        x = np.random.default_rng(0).standard_normal((4, 1, 28, 28)).astype(np.float32)
        np.save(f"{d}/x.npy", x)
        np.save(f"{d}/x_wrong_shape.npy", x[:2])
        np.save(f"{d}/x_float64.npy", x.astype(np.float64))
        return 0
    checkpoint, x, y = sys.argv[2:5]
    w, b = tensor(checkpoint, "fc.weight"), tensor(checkpoint, "fc.bias")
    x, y = np.load(x), np.load(y)
    want = x.reshape(4, 784).astype(np.float64) @ w.T.astype(np.float64) + b
    error = np.abs(y - want).max()
    print(f"infer_check: logits {y.shape}, worst |error| {error:.2g}, "
          f"weights moved {np.abs(w).max() > 0}")
    return 0 if y.shape == (4, 10) and error < 1e-5 * max(1, np.abs(want).max()) else 1


if __name__ == "__main__":
    sys.exit(main())
