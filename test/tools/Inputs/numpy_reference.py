"""What the NumPy float64 checks of imported models share: graphrun's
safetensors files read back, softmax cross-entropy, and a loss's gradient
by central finite differences."""
import json
import struct

import numpy as np


def load_safetensors(path):
    """Every float32 tensor of a safetensors file, as float64 (graphrun's
    step counter, an integer, left out)."""
    with open(path, "rb") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(size))
        data = f.read()
    out = {}
    for k, v in header.items():
        if k == "__metadata__" or v["dtype"] != "F32":
            continue
        lo, hi = v["data_offsets"]
        out[k] = np.frombuffer(data[lo:hi], dtype=np.float32).reshape(v["shape"]).astype(np.float64)
    return out


def cross_entropy(z, y):
    """Mean softmax cross-entropy of logits z [N, classes] against labels y."""
    z = z - z.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return -logp[np.arange(len(y)), y].mean()


def central_gradient(loss, p, name):
    """d loss(p) / d p[name], element by element (steps of 1e-6 relative)."""
    grad = np.zeros_like(p[name])
    flat = p[name].reshape(-1)
    for k in range(flat.size):
        keep = flat[k]
        h = 1e-6 * max(1.0, abs(keep))
        flat[k] = keep + h
        up = loss(p)
        flat[k] = keep - h
        down = loss(p)
        flat[k] = keep
        grad.reshape(-1)[k] = (up - down) / (2 * h)
    return grad


def worst_step_error(loss, init, final, names):
    """One SGD step at lr 1 (init - final is the gradient graphrun took)
    against loss's central differences at init: the worst error relative to
    each gradient's largest element, and the tensor it is in."""
    p = {k: init[k].copy() for k in names}
    worst, where = 0.0, ""
    for name in names:
        grad = central_gradient(loss, p, name)
        error = np.abs((init[name] - final[name]) - grad).max() / max(np.abs(grad).max(), 1e-12)
        if error > worst:
            worst, where = error, name
    return worst, where
