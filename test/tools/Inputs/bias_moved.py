"""Prints how far the window attention's bias @rel moved between two
checkpoints, and exits 1 unless it moved by more than 1e-3."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "runtime", "Inputs"))
import safetensors_tool  # noqa: E402


def rel(path):
    header, body = safetensors_tool.read(path)
    begin, end = safetensors_tool.tensors(header)["rel"]["data_offsets"]
    return np.frombuffer(body[begin:end], dtype=np.float32)


moved = float(np.abs(rel(sys.argv[2]) - rel(sys.argv[1])).max())
print(f"rel moved by {moved:.2e}, more than 1e-3" if moved > 1e-3 else f"rel moved by {moved:.2e}")
sys.exit(0 if moved > 1e-3 else 1)
