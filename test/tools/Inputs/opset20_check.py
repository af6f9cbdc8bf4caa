#!/usr/bin/env python3
"""What ONNX opsets 18 to 20 and torch.export's files add, trained: one SGD
step of a small model through graphc import, graphc compile and graphrun,
against a NumPy float64 forward and its central finite differences.

The model is written as torch.onnx.export(dynamo=True, optimize=False)
writes one: opset 20, IR version 10, the weights in an external data file
beside it (model.onnx.data), and torch.export's graph signature in the
graph's metadata (naming the parameters and a buffer; a float initializer
it does not name is a constant the exporter computed). Debian's onnx 1.12
writes it (it knows neither opset 20 nor that metadata field: the
signature is appended to the file as a second graph message, which
protobuf merges into the first). Images [2, 3, 8, 8], 4 classes:
- a convolution whose bias is torch.export's zeros, Expand(CastLike(a
  Constant's value_float 0, the images), Shape(weight, start 0, end 1));
- Pad with axes (opset 18: the last dim at its start, dim 2 at its end)
  and a pad value;
- Gelu (opset 20), exact, then its tanh approximation;
- AveragePool with dilations (opset 19: all 1);
- Split by num_outputs (opset 18: 5 channels as 2, 2 and 1), the parts
  concatenated in another order;
- ReduceMean with its axes an input (opset 18);
- times a float buffer (the signature's: a constant, not trained);
- dropout as torch.export writes it, at a rate of 0 (Expand of a scalar to
  the activation's Shape, Cast, RandomUniformLike, Less against the rate
  CastLike'd to the noise, CastLike to the expanded tensor, Div, Mul);
- plus rows of a parameter picked by GatherND (indices [..., 1], through
  a one-input Max; one row twice, so its gradient sums);
- flattened and gathered back by an arange (torch.export's as_strided);
- Gemm, plus a float initializer the signature does not name (a constant).

  opset20_check.py make DIR [--fault F]  model.onnx, model.onnx.data,
                            images.npy, labels.npy in DIR; F breaks it (see
                            FAULTS), or inline keeps the weights in model.onnx
  opset20_check.py check DIR  DIR/init.safetensors, DIR/final.safetensors
                            (one step at lr 1) and DIR/report.json against
                            NumPy
"""
import json
import math
import os
import sys

import numpy as np

from numpy_reference import cross_entropy, load_safetensors, worst_step_error

N, CLASSES = 2, 4
PARAMS = {"W": ((5, 3, 3, 3), 0.4), "table": ((7,), 0.5), "fc_w": ((CLASSES, 5), 0.5),
          "fc_b": ((CLASSES,), 0.1)}
BUFFER = np.array([1.0, 0.5, 2.0, -1.0, 1.5])
MASK = np.array([0.0, -0.25, 0.5, 0.125])
PAD = 0.25
ROWS = [3, 0, 6, 2, 2]
# The ways `make --fault F` breaks the model (and variants that import:
# "inline", the weights in model.onnx, for the fuzzer's seed; "typed", the
# same with their values as typed lists (float_data, int64_data); "scatter",
# a ScatterND of the whole batch dim by an activation, at a fixed batch).
FAULTS = ["folded", "tied", "tied-unread", "conflict", "opset23", "ir15", "groupnorm", "axes-attr", "float8",
          "escape", "symlink", "self", "overlap", "short", "gelu-fast", "gelu-opset18",
          "num-outputs", "split-both", "flatten-read", "batch-index"]


def varint(n):
    out = b""
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out += bytes([byte | 0x80])
        else:
            return out + bytes([byte])


def make(d, fault=None):
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(11)
    inits = [numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)
             for name, (shape, scale) in PARAMS.items()]
    inits.append(numpy_helper.from_array(BUFFER.astype(np.float32), "buf_scale"))
    inits.append(numpy_helper.from_array(MASK.astype(np.float32), "val_mask"))
    if fault == "float8":
        f8 = TensorProto()
        f8.name, f8.data_type, f8.raw_data = "f8", 17, b"\x00\x00"
        f8.dims.extend([2])
        inits.append(f8)
    i64 = lambda *v: np.array(v, dtype=np.int64)
    const = lambda name, array: helper.make_node(
        "Constant", [], [name], value=numpy_helper.from_array(array, name))
    nodes = [
        helper.make_node("Constant", [], ["zero_f"], value_float=0.0),
        helper.make_node("CastLike", ["zero_f", "x"], ["zero_c"]),
        helper.make_node("Shape", ["W"], ["wo"], start=0, end=1),
        helper.make_node("Expand", ["zero_c", "wo"], ["bias0"]),
        helper.make_node("Conv", ["x", "W", "bias0"], ["c"], pads=[1, 1, 1, 1],
                         kernel_shape=[3, 3]),
        helper.make_node("Constant", [], ["pad_axes"], value_ints=[-1, 2]),
        helper.make_node("Constant", [], ["pad_pads"], value_ints=[1, 0, 0, 2]),
        helper.make_node("Constant", [], ["pad_value"], value_float=PAD),
        helper.make_node("Pad", ["c", "pad_pads", "pad_value", "pad_axes"], ["p"]),
        helper.make_node("Gelu", ["p"], ["g1"]),
        helper.make_node("Gelu", ["g1"], ["g2"],
                         approximate="fast" if fault == "gelu-fast" else "tanh"),
        helper.make_node("AveragePool", ["g2"], ["ap"], kernel_shape=[2, 2], strides=[2, 2],
                         dilations=[1, 1]),
        helper.make_node("Split", ["ap"] + (["split_sizes"] if fault == "split-both" else []),
                         ["s0", "s1", "s2"], axis=1,
                         num_outputs=2 if fault == "num-outputs" else 3),
        helper.make_node("Concat", ["s2", "s0", "s1"], ["t"], axis=1),
    ] + ([helper.make_node("ReduceMean", ["t"], ["r"], axes=[2, 3], keepdims=0)]
         if fault == "axes-attr" else [
        helper.make_node("Constant", [], ["rm_axes"], value_ints=[2, 3]),
        helper.make_node("ReduceMean", ["t", "rm_axes"], ["r"], keepdims=0)]) + [
        helper.make_node("Mul", ["r", "buf_scale"], ["rs"]),
    ] + ([helper.make_node("Identity", ["rs"], ["rd"])] if fault == "folded" else [
        # Dropout, torch.export's raw form, at a rate of 0 (left out of the
        # folded file: an inference import refuses a training graph's masks).
        helper.make_node("Shape", ["rs"], ["rs_shape"]),
        helper.make_node("Constant", [], ["e0"], value_float=0.0),
        helper.make_node("Expand", ["e0", "rs_shape"], ["empty"]),
        helper.make_node("Cast", ["empty"], ["self_float"], to=TensorProto.FLOAT),
        helper.make_node("RandomUniformLike", ["self_float"], ["rands"], low=0.0, high=1.0),
        helper.make_node("Constant", [], ["keep"], value_float=1.0),
        helper.make_node("CastLike", ["keep", "rands"], ["keep_c"]),
        helper.make_node("Less", ["rands", "keep_c"], ["sampled"]),
        helper.make_node("CastLike", ["sampled", "empty"], ["bern"]),
        helper.make_node("Constant", [], ["keep2"], value_float=1.0),
        helper.make_node("Div", ["bern", "keep2"], ["mask"]),
        helper.make_node("Mul", ["rs", "mask"], ["rd"])]) + [
        # Rows of a parameter.
        const("gidx0", i64(*ROWS).reshape(5, 1)),
        helper.make_node("Max", ["gidx0"], ["gidx"]),
        helper.make_node("GatherND", ["table", "gidx"], ["gb"], batch_dims=0),
        helper.make_node("Add", ["rd", "gb"], ["a" if fault != "scatter" else "a0"]),
    ] + ([] if fault != "scatter" else [
        # torch.export's slice_scatter of the whole batch dim (GhostNet's):
        # every row replaced by an activation's, here twice the rows.
        const("rows_all", i64(0, 1).reshape(N, 1)),
        helper.make_node("Constant", [], ["two"], value_float=2.0),
        helper.make_node("Mul", ["a0", "two"], ["a2"]),
        helper.make_node("ScatterND", ["a0", "rows_all", "a2"], ["a"])]) + [
        # as_strided: flattened, then every element in order.
        helper.make_node("Constant", [], ["flat"], value_ints=[-1]),
        helper.make_node("Reshape", ["a", "flat"], ["af"]),
        const("ar", np.arange(N * 5, dtype=np.int64).reshape(N, 5)),
        helper.make_node("Gather", ["af", "ar"], ["ag"], axis=0) if fault != "flatten-read"
        else helper.make_node("Relu", ["af"], ["ag"]),
        helper.make_node("Gemm", ["ag", "fc_w", "fc_b"], ["z"], transB=1),
        helper.make_node("Add", ["z", "val_mask"], ["logits"]),
    ]
    if fault == "batch-index":
        # torch.export's index arithmetic from a symbolic batch: the batch as
        # a scalar (Squeeze of a Shape slice) reshaped to rank 0, read on the
        # logits' path.
        at = next(i for i, node in enumerate(nodes) if node.op_type == "Gemm")
        nodes[at].input[0] = "ag_n"
        nodes[at:at] = [helper.make_node("Shape", ["x"], ["sb"], start=0, end=1),
                        helper.make_node("Squeeze", ["sb"], ["nb"]),
                        const("scalar_shape", np.zeros(0, np.int64)),
                        helper.make_node("Reshape", ["nb", "scalar_shape"], ["nb0"]),
                        helper.make_node("Cast", ["nb0"], ["nbf"], to=TensorProto.FLOAT),
                        helper.make_node("Mul", ["ag", "nbf"], ["ag_n"])]
    if fault == "split-both":
        nodes.insert(0, const("split_sizes", i64(2, 2, 1)))
    if fault in ("tied", "tied-unread"):
        # The classifier's weight transposed into a constant the signature
        # does not name (what the optimizer folds a tied weight's transpose
        # into), read through Transposes by a MatMul: an initializer while
        # another node still reads the parameter (tied), or a Constant node
        # while none does.
        folded = numpy_helper.to_array(inits[2]).T.copy()
        at = next(i for i, node in enumerate(nodes) if node.op_type == "Gemm")
        nodes[at:at + 1] = [helper.make_node("Transpose", ["val_fcw"], ["fcw_t"], perm=[1, 0]),
                            helper.make_node("Transpose", ["fcw_t"], ["fcw"], perm=[1, 0]),
                            helper.make_node("MatMul", ["ag", "fcw"], ["zm"]),
                            helper.make_node("Add", ["zm", "fc_b"], ["z"])]
        if fault == "tied":
            inits.append(numpy_helper.from_array(folded, "val_fcw"))
            nodes.append(helper.make_node("Identity", ["fc_w"], ["fc_w_elsewhere"]))
        else:
            nodes.insert(at, const("val_fcw", folded))
    if fault == "typed":
        # Values as typed lists (float_data, int64_data), not raw bytes.
        inits = [helper.make_tensor(t.name, t.data_type, t.dims,
                                    numpy_helper.to_array(t).ravel().tolist())
                 for t in inits]
        inits.append(helper.make_tensor("gidx0", TensorProto.INT64, [5, 1], ROWS))
        nodes = [node for node in nodes if node.output[0] != "gidx0"]
    if fault == "groupnorm":
        inits += [numpy_helper.from_array(np.ones(5, np.float32), "gn_s"),
                  numpy_helper.from_array(np.zeros(5, np.float32), "gn_b")]
        nodes.append(helper.make_node("GroupNormalization", ["c", "gn_s", "gn_b"], ["gn"],
                                      num_groups=5, name="gn"))
    graph = helper.make_graph(
        nodes, "opset20",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [N, 3, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [N, CLASSES])], inits)
    opset = 23 if fault == "opset23" else 18 if fault == "gelu-opset18" else 20
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 15 if fault == "ir15" else 10
    path = os.path.join(d, "model.onnx")
    for stale in ("model.onnx.data", "link.data"):
        if os.path.lexists(os.path.join(d, stale)):
            os.remove(os.path.join(d, stale))
    if fault in ("inline", "typed"):  # the weights inside (a fuzzer's seed: one file)
        onnx.save(model, path)
    else:
        onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                        location="model.onnx.data", size_threshold=0)
    if fault in ("escape", "symlink"):
        # The weights outside the model's directory: named so, or through a
        # symlink that leads there.
        outside = os.path.abspath(os.path.join(d, "..", "outside.data"))
        os.replace(os.path.join(d, "model.onnx.data"), outside)
        if fault == "symlink":
            os.symlink(outside, os.path.join(d, "link.data"))
        model = onnx.load(path, load_external_data=False)
        for t in model.graph.initializer:
            for entry in t.external_data:
                if entry.key == "location":
                    entry.value = "../outside.data" if fault == "escape" else "link.data"
        onnx.save(model, path)
    if fault in ("overlap", "self"):
        # fc_b's bytes where fc_w's are, or in the model file itself.
        model = onnx.load(path, load_external_data=False)
        where = {t.name: {e.key: e for e in t.external_data} for t in model.graph.initializer}
        if fault == "overlap":
            where["fc_b"]["offset"].value = where["fc_w"]["offset"].value
        else:
            where["fc_b"]["location"].value = "model.onnx"
        onnx.save(model, path)
    if fault == "short":
        with open(os.path.join(d, "model.onnx.data"), "r+b") as f:
            f.truncate(os.path.getsize(os.path.join(d, "model.onnx.data")) - 8)
    # torch.export's graph signature, in the graph's metadata_props (field
    # 16 of GraphProto): appended as a second graph (field 7 of ModelProto).
    signature = "\n# inputs\n" + "".join(
        f"p_{name}: PARAMETER target='{name}'\n" for name in PARAMS) + \
        "b_buf_scale: BUFFER target='buf_scale' persistent=True\n" + \
        ("p_gone_weight: PARAMETER target='gone.weight'\n" if fault == "folded" else "") + \
        ("b_W: BUFFER target='W' persistent=True\n" if fault == "conflict" else "") + \
        "x: USER_INPUT\n\n# outputs\nlogits: USER_OUTPUT\n"
    entry = onnx.StringStringEntryProto(
        key="pkg.torch.export.ExportedProgram.graph_signature", value=signature)
    entry_bytes = entry.SerializeToString()
    metadata = b"\x82\x01" + varint(len(entry_bytes)) + entry_bytes
    with open(path, "ab") as f:
        f.write(b"\x3a" + varint(len(metadata)) + metadata)
    with open(f"{d}/variant.json", "w") as f:
        json.dump({"scale": 2.0 if fault == "scatter" else 1.0}, f)
    rng = np.random.default_rng(12)
    np.save(f"{d}/images.npy", rng.standard_normal((N, 3, 8, 8)).astype(np.float32))
    np.save(f"{d}/labels.npy", np.array([1, 3], dtype=np.int32))


erf = np.vectorize(math.erf)


def forward(p, x, scale=1.0):
    xpp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    c = np.zeros((N, 5, 8, 8))
    for i in range(8):
        for j in range(8):
            c[:, :, i, j] = np.einsum("ncij,ocij->no", xpp[:, :, i:i + 3, j:j + 3], p["W"])
    pd = np.pad(c, ((0, 0), (0, 0), (0, 2), (1, 0)), constant_values=PAD)  # [N, 5, 10, 9]
    g1 = 0.5 * pd * (1 + erf(pd / math.sqrt(2)))
    g2 = 0.5 * g1 * (1 + np.tanh(math.sqrt(2 / math.pi) * (g1 + 0.044715 * g1 ** 3)))
    ap = g2[:, :, :10, :8].reshape(N, 5, 5, 2, 4, 2).mean(axis=(3, 5))  # [N, 5, 5, 4]
    t = ap[:, [4, 0, 1, 2, 3]]
    r = (t.mean(axis=(2, 3)) * BUFFER + p["table"][ROWS]) * scale
    return r @ p["fc_w"].T + p["fc_b"] + MASK


def loss_of(p, x, y, scale=1.0):
    return cross_entropy(forward(p, x, scale), y)


def check(d):
    init, final = load_safetensors(f"{d}/init.safetensors"), load_safetensors(f"{d}/final.safetensors")
    x = np.load(f"{d}/images.npy").astype(np.float64)
    y = np.load(f"{d}/labels.npy").astype(np.int64)
    p = {k: init[k] for k in PARAMS}
    scale = json.load(open(f"{d}/variant.json"))["scale"]
    want = loss_of(p, x, y, scale)
    have = json.load(open(f"{d}/report.json"))["final_loss"]
    loss_error = abs(have - want) / abs(want)
    worst, where = worst_step_error(lambda q: loss_of(q, x, y, scale), init, final, PARAMS)
    constants = sorted(set(init) - set(PARAMS))
    print(f"opset20_check: loss {have:.6f} (float64 {want:.6f}), "
          f"loss {'ok' if loss_error < 1e-5 else 'WRONG'}, "
          f"gradients {'ok' if worst < 1e-3 else 'WRONG'} (worst {worst:.1e}, {where}), "
          f"trained: {', '.join(sorted(init))}")
    return 0 if loss_error < 1e-5 and worst < 1e-3 and not constants else 1


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2], sys.argv[4] if len(sys.argv) > 4 and sys.argv[3] == "--fault" else None)
    else:
        sys.exit(check(sys.argv[2]))
