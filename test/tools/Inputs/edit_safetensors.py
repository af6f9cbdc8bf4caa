#!/usr/bin/env python3
"""Reads and rewrites safetensors files for the --init tests (NumPy only).

  edit_safetensors.py compare ONNX_MODEL FILE   every initializer of the model
                                                the file holds, bit for bit
  edit_safetensors.py drop IN OUT NAME          OUT = IN without NAME
  edit_safetensors.py add IN OUT NAME           OUT = IN with an extra F32 [2]
  edit_safetensors.py reshape IN OUT NAME       OUT = IN with NAME flattened
  edit_safetensors.py nan IN OUT NAME           OUT = IN with NAME's first value NaN
  edit_safetensors.py counter IN OUT NAME       OUT = IN with NAME.num_batches_tracked (I64)
"""
import json
import struct
import sys

import numpy as np

DTYPES = {"F32": np.float32, "I64": np.int64, "F16": np.float16, "F64": np.float64}


def load(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    tensors = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        begin, end = t["data_offsets"]
        tensors[name] = np.frombuffer(body[begin:end], DTYPES[t["dtype"]]).reshape(t["shape"]).copy()
    return tensors


def save(path, tensors):
    header, body = {}, b""
    for name, array in tensors.items():
        raw = np.ascontiguousarray(array).tobytes()
        dtype = {v: k for k, v in DTYPES.items()}[array.dtype.type]
        header[name] = {"dtype": dtype, "shape": list(array.shape),
                        "data_offsets": [len(body), len(body) + len(raw)]}
        body += raw
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + body)


def main():
    command = sys.argv[1]
    if command == "compare":
        import onnx
        from onnx import numpy_helper
        model = onnx.load(sys.argv[2])
        tensors = load(sys.argv[3])
        inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
        used = [name for name in inits if name in tensors]
        bad = [name for name in used if not np.array_equal(inits[name], tensors[name])]
        print(f"{len(used)} tensors compared, {len(bad)} differ", bad)
        return
    _, _, src, dst, name = sys.argv
    tensors = load(src)
    if command == "drop":
        del tensors[name]
    elif command == "add":
        tensors[name] = np.zeros(2, np.float32)
    elif command == "reshape":
        tensors[name] = tensors[name].reshape(-1)
    elif command == "nan":
        tensors[name] = tensors[name].copy()
        tensors[name].flat[0] = np.nan
    elif command == "counter":
        tensors[name + ".num_batches_tracked"] = np.array(7, np.int64)
    save(dst, tensors)


if __name__ == "__main__":
    main()
