#!/usr/bin/env python3
"""ONNX's own backend node tests through graphc's forward-only path.

  onnx_node_tests.py WORK [--data DIR] [--ops Relu,Conv,...] [--only NAME,...]

For every node test in DIR (Debian's libonnx-testdata: test_NAME/model.onnx
and test_data_set_*/input_*.pb, output_*.pb) whose graph uses an op graphc
import takes: `graphc import --forward` (the inference model and its
weights), `graphc compile --forward`, and for each data set `graphrun infer`
on the inputs, outputs compared with ONNX's expected ones as ONNX's backend
test runner does (numpy's assert_allclose, rtol 1e-3, atol 1e-7; shape and
NaN places must agree).

graphc compiles static graphs: a test's integer inputs (a reshape's target
shape, a slice's starts, a split's sizes) and a Resize's float scales are baked into the model as
initializers from its one data set, and a model of an opset before 11 is
converted to opset 13 with onnx.version_converter first (the line says so).
An input whose data holds the declared shape's elements in another shape
([1] for []) is fed in the declared shape. A test belongs to the op its name
starts with (batchnorm: BatchNormalization) if its graph has that op; the
expanded forms of ONNX functions (test_*_expanded) are left out.

Prints one line per test, `pass`, `FAIL` (compiled and ran, wrong numbers;
or a tool crashed) or `refused` (graphc import or compile said no, on one
line, which is printed), then a count per op and in all. Exits 1 on any
FAIL. Needs python3-onnx and numpy (Debian's, /usr/bin/python3) and graphc
and graphrun on PATH.
"""
import argparse
import collections
import glob
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

DATA = "/usr/share/libonnx-testdata/data/node"
# The ops graphc import takes (compiler/Import/OnnxImport.h).
OPS = ["Add", "AveragePool", "BatchNormalization", "Cast", "Clip", "Concat", "Conv", "Div",
       "Dropout", "Erf", "Exp", "Expand", "Flatten", "Gather", "Gemm", "GlobalAveragePool",
       "HardSigmoid", "HardSwish", "Identity", "InstanceNormalization", "LayerNormalization",
       "LeakyRelu", "Log", "MatMul", "MaxPool", "Mul", "Neg", "Pow", "ReduceMean", "ReduceSum", "Relu",
       "ReduceL2", "Reshape", "Resize", "Sigmoid", "Slice", "Softmax", "Split", "Squeeze", "Sub",
       "Transpose", "Unsqueeze", "Pad"]


# Test-name prefixes that are not the op's name.
ALIASES = {"BatchNormalization": "batchnorm", "InstanceNormalization": "instancenorm",
           "Pad": "constantpad"}


def tensor_of(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def one_line(text):
    lines = [l for l in text.strip().splitlines() if l.strip()]
    return lines[0][:300] if lines else "(no message)"


def data_sets(model_path):
    return sorted(glob.glob(os.path.join(os.path.dirname(model_path), "test_data_set_*")))


def numbered(data, kind):
    return sorted(glob.glob(os.path.join(data, f"{kind}_*.pb")),
                  key=lambda p: int(p.rsplit("_", 1)[1].split(".")[0]))


def prepared(model_path, d):
    """The model as graphc compiles it (module docstring), its float inputs'
    declared shapes, and a note of what was changed."""
    model = onnx.load(model_path, load_external_data=False)
    notes = []
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if 0 < opset < 11:
        from onnx import version_converter
        model = version_converter.convert_version(model, 13)
        notes.append(f"converted from opset {opset}")
    sets = data_sets(model_path)
    initializers = {t.name for t in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in initializers]
    baked, shapes = [], []
    # A float input read only as a Resize's roi or scales is shape
    # arithmetic too.
    resize_args = {}
    for node in model.graph.node:
        for position, name in enumerate(node.input):
            resize_args.setdefault(name, []).append(node.op_type == "Resize" and
                                                    position in (1, 2))
    for k, value in enumerate(inputs):
        shape_like = value.type.tensor_type.elem_type in (TensorProto.INT64, TensorProto.INT32) \
            or all(resize_args.get(value.name, [False]))
        if shape_like and len(sets) == 1:
            array = tensor_of(numbered(sets[0], "input")[k])
            model.graph.initializer.append(numpy_helper.from_array(array, value.name))
            baked.append(k)
        else:
            dims = value.type.tensor_type.shape.dim
            shapes.append(tuple(x.dim_value for x in dims) if all(x.HasField("dim_value")
                                                                  for x in dims) else None)
    for k in reversed(baked):
        del model.graph.input[[i.name for i in model.graph.input].index(inputs[k].name)]
    if baked:
        notes.append(f"constant input(s) {baked} baked in")
    path = os.path.join(d, "model.onnx")
    onnx.save(model, path)
    return path, baked, shapes, notes


def run_test(name, model_path, work):
    """(verdict, detail) of one node test."""
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    mlir, plan = os.path.join(d, "model.mlir"), os.path.join(d, "model.plan")
    weights = os.path.join(d, "model.safetensors")
    try:
        source, baked, shapes, notes = prepared(model_path, d)
    except Exception as e:  # onnx's converter refuses some
        return "refused", "preparing: " + one_line(str(e))
    note = f" ({'; '.join(notes)})" if notes else ""
    verdict, detail = run_prepared(source, model_path, d, mlir, plan, weights, baked, shapes)
    return verdict, detail + note


def run_prepared(source, model_path, d, mlir, plan, weights, baked, shapes):
    r = subprocess.run(["graphc", "import", "--forward", source, "-o", mlir],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return ("FAIL" if r.returncode != 1 else "refused"), "import: " + one_line(r.stderr)
    r = subprocess.run(["graphc", "compile", "--forward", mlir, "-o", plan],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return ("FAIL" if r.returncode != 1 else "refused"), "compile: " + one_line(r.stderr)
    sets = data_sets(model_path)
    if not sets:
        return "refused", "no test data"
    worst = 0.0
    for k, data in enumerate(sets):
        inputs = [p for i, p in enumerate(numbered(data, "input")) if i not in baked]
        expected = numbered(data, "output")
        in_files, out_files = [], []
        for i, p in enumerate(inputs):
            array = tensor_of(p)
            if array.dtype != np.float32:
                return "refused", f"input {i} is {array.dtype}"
            if i < len(shapes) and shapes[i] is not None and array.shape != shapes[i] and \
                    array.size == int(np.prod(shapes[i])):
                array = array.reshape(shapes[i])
            in_files.append(os.path.join(d, f"in{k}_{i}.npy"))
            np.save(in_files[-1], np.array(array, dtype=np.float32, order="C"))
        out_files = [os.path.join(d, f"out{k}_{i}.npy") for i in range(len(expected))]
        r = subprocess.run(["graphrun", "infer", plan, "--init", weights, "--threads", "1",
                            "--inputs", ",".join(in_files), "--outputs", ",".join(out_files)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            return "FAIL", f"graphrun infer (data set {k}): " + one_line(r.stderr)
        for i, p in enumerate(expected):
            want = tensor_of(p)
            have = np.load(out_files[i])
            if have.shape != want.shape:
                return "FAIL", f"output {i}: shape {have.shape}, expected {want.shape}"
            try:
                np.testing.assert_allclose(have, want.astype(np.float32), rtol=1e-3, atol=1e-7)
            except AssertionError:
                error = np.abs(have.astype(np.float64) - want.astype(np.float64)).max()
                return "FAIL", f"output {i} (data set {k}): worst |error| {error:.3g}"
            if want.size:
                worst = max(worst, float(np.nanmax(np.abs(have.astype(np.float64) - want))))
    return "pass", f"{len(sets)} data set(s), worst |error| {worst:.2g}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("work")
    parser.add_argument("--data", default=DATA)
    parser.add_argument("--ops", default=",".join(OPS))
    parser.add_argument("--only", default="", help="test names (without test_), comma-separated")
    args = parser.parse_args()
    ops = set(args.ops.split(","))
    only = set(args.only.split(",")) if args.only else None
    tests = []
    for model_path in sorted(glob.glob(os.path.join(args.data, "test_*", "model.onnx"))):
        name = os.path.basename(os.path.dirname(model_path))[len("test_"):]
        if only is not None and name not in only:
            continue
        if name.endswith("_expanded"):
            continue
        flat = name.replace("_", "")
        op = next((o for o in sorted(ops, key=len, reverse=True)
                   if flat.startswith(ALIASES.get(o, o.lower()))), None)
        if op is None or op not in {n.op_type for n in onnx.load(model_path).graph.node}:
            continue  # another op's test (convtranspose_* is not Conv's)
        tests.append((op, name, model_path))
    counts = collections.defaultdict(collections.Counter)
    for op, name, model_path in tests:
        verdict, detail = run_test(name, model_path, args.work)
        counts[op][verdict] += 1
        print(f"{verdict}: {op}: {name}: {detail}", flush=True)
    print()
    total = collections.Counter()
    for op in sorted(counts):
        c = counts[op]
        total.update(c)
        print(f"{op}: {c['pass']} pass, {c['FAIL']} fail, {c['refused']} refused")
    print(f"all: {total['pass']} pass, {total['FAIL']} fail, {total['refused']} refused "
          f"of {len(tests)} node tests")
    return 1 if total["FAIL"] else 0


if __name__ == "__main__":
    sys.exit(main())
