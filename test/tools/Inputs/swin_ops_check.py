#!/usr/bin/env python3
"""What Swin's export needs beyond ViT, checked against NumPy through the
inference path (graphc import --forward, graphc compile --forward, graphrun
infer):

- Pad (constant, positive and negative pads) of an activation;
- Slice with steps (patch merging's x[..., 0::2, 1::2, :]);
- a mask folded at import from constants alone: ConstantOfShape, Range,
  ScatterND (index_put), Reshape, Transpose, Sub, Equal, Not, Where, Pow;
- Gather of more than 64 indices (nn.gather), along a middle axis, with
  indices of rank 2; and a Gather of 70 indices along the last axis.

  swin_ops_check.py make DIR [--fault F]  model.onnx and x.npy in DIR; F breaks
                                          it: range-delta-zero, scatter-outside,
                                          pad-reflect
  swin_ops_check.py check DIR   DIR/y.npy against NumPy (within 1e-6)
"""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

X_SHAPE = (2, 3, 10, 12)
TAKE = np.random.default_rng(1).integers(-5, 5, size=70)  # negative ones too
ROWS = np.random.default_rng(2).integers(0, 6, size=(9, 10))


def const(name, array):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(array, name))


def make(d, fault=None):
    i64 = lambda *v: np.array(v, dtype=np.int64)
    nodes = [
        # [2, 3, 10, 12] -> pad H by (1, 2), W by (0, 3) -> [2, 3, 13, 15], then crop
        # one row at the top and one column on the right -> [2, 3, 12, 14].
        const("pads", i64(0, 0, 1, 0, 0, 0, 2, 3)),
        const("fill", np.array(0.5, dtype=np.float32)),
        helper.make_node("Pad", ["x", "pads", "fill"], ["padded"],
                         mode="reflect" if fault == "pad-reflect" else "constant"),
        const("crop", i64(0, 0, -1, 0, 0, 0, 0, -1)),
        helper.make_node("Pad", ["padded", "crop"], ["cropped"]),
        # Every 2nd row from 1 and every 3rd column: [2, 3, 6, 5].
        const("starts", i64(1, 0)), const("ends", i64(2**63 - 1, 13)),
        const("axes", i64(2, 3)), const("steps", i64(2, 3)),
        helper.make_node("Slice", ["cropped", "starts", "ends", "axes", "steps"], ["strided"]),
        # The mask: zeros [5, 6], rows 1..3 of column 2 set to 1 (ScatterND of
        # indices made by Range), transposed to [6, 5], then 0 where equal to
        # 0 and -100 elsewhere, as Swin's masked_fill does; plus 2^-1.
        const("shape", i64(5, 6)),
        helper.make_node("ConstantOfShape", ["shape"], ["zeros"],
                         value=numpy_helper.from_array(np.zeros(1, np.float32))),
        const("r0", i64(1)), const("r1", i64(4)),
        const("r2", i64(0 if fault == "range-delta-zero" else 1)),
        helper.make_node("Range", ["r0", "r1", "r2"], ["rows"]),
        const("unsq", i64(1)),
        helper.make_node("Unsqueeze", ["rows", "unsq"], ["rows1"]),
        const("col", i64(2, 2, 2).reshape(3, 1)),
        helper.make_node("Concat", ["rows1", "col"], ["index0"], axis=1),
        const("shift", i64(6 if fault == "scatter-outside" else 0, 0)),
        helper.make_node("Add", ["index0", "shift"], ["index"]),
        const("ones", np.ones(3, np.float32)),
        helper.make_node("ScatterND", ["zeros", "index", "ones"], ["marked"]),
        helper.make_node("Transpose", ["marked"], ["markedT"], perm=[1, 0]),
        const("zero", np.array(0, dtype=np.float32)),
        helper.make_node("Equal", ["markedT", "zero"], ["isZero"]),
        helper.make_node("Not", ["isZero"], ["notZero"]),
        const("minus", np.array(-100, dtype=np.float32)),
        helper.make_node("Where", ["notZero", "minus", "zero"], ["mask0"]),
        const("two", np.array(2, dtype=np.float32)), const("half", np.array(-1, dtype=np.float32)),
        helper.make_node("Pow", ["two", "half"], ["scale"]),
        helper.make_node("Add", ["mask0", "scale"], ["mask"]),
        helper.make_node("Add", ["strided", "mask"], ["masked"]),
        # 70 picks along the last axis, negative indices among them: [2, 3, 6, 70];
        # then rows by a [9, 10] table along axis 2: [2, 3, 9, 10, 70].
        const("take", TAKE.astype(np.int64)),
        helper.make_node("Gather", ["masked", "take"], ["picked"], axis=3),
        const("rowsIndex", ROWS.astype(np.int64)),
        helper.make_node("Gather", ["picked", "rowsIndex"], ["y"], axis=2),
    ]
    graph = helper.make_graph(
        nodes, "swin_ops",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, X_SHAPE)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (2, 3, 9, 10, 70))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, f"{d}/model.onnx")
    x = np.random.default_rng(0).standard_normal(X_SHAPE).astype(np.float32)
    np.save(f"{d}/x.npy", x)


def reference(x):
    x = x.astype(np.float64)
    padded = np.pad(x, ((0, 0), (0, 0), (1, 2), (0, 3)), constant_values=0.5)
    cropped = padded[:, :, 1:, :-1]
    strided = cropped[:, :, 1::2, 0:13:3]
    marked = np.zeros((5, 6))
    marked[1:4, 2] = 1
    mask = np.where(marked.T != 0, -100.0, 0.0) + 0.5
    picked = (strided + mask)[..., TAKE]
    return picked[:, :, ROWS, :]


def main():
    d = sys.argv[2]
    if sys.argv[1] == "make":
        make(d, sys.argv[4] if len(sys.argv) > 4 and sys.argv[3] == "--fault" else None)
        return 0
    y = np.load(f"{d}/y.npy")
    want = reference(np.load(f"{d}/x.npy"))
    error = np.abs(y - want).max() if y.shape == want.shape else float("inf")
    print(f"swin_ops_check: {y.shape}, worst |error| {error:.2g}")
    return 0 if error <= 1e-6 * np.abs(want).max() else 1


if __name__ == "__main__":
    sys.exit(main())
