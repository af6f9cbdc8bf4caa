#!/usr/bin/env python3
"""Writes the ONNX models test/tools/onnx-import.test imports, with Debian's
python3-onnx (no PyTorch): a small classifier using every op graphc import
takes, and models that must be refused, one fault each.

  make_onnx.py OUT_DIR
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def weight(name, *shape):
    rng = np.random.default_rng(abs(hash(name)) % (1 << 32))
    return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)


def bn(prefix, x, out, c, training=1):
    inits = [numpy_helper.from_array(np.ones(c, np.float32), f"{prefix}.weight"),
             numpy_helper.from_array(np.zeros(c, np.float32), f"{prefix}.bias"),
             numpy_helper.from_array(np.zeros(c, np.float32), f"{prefix}.running_mean"),
             numpy_helper.from_array(np.ones(c, np.float32), f"{prefix}.running_var")]
    outputs = [out] + ([f"{prefix}.mean_out", f"{prefix}.var_out"] if training else [])
    node = helper.make_node(
        "BatchNormalization", [x] + [i.name for i in inits], outputs, name=f"/{prefix}/BN",
        epsilon=1e-5, momentum=0.9, **({"training_mode": 1} if training else {}))
    return node, inits


def classifier(opset=17, **faults):
    """A ResNet-like stem and block, a grouped dilated conv, both poolings, a
    global average pool, dropout and a linear classifier."""
    nodes, inits = [], []
    inits.append(weight("conv1.weight", 8, 5 if faults.get("bad_shapes") else 3, 3, 3))
    nodes.append(helper.make_node("Conv", ["input", "conv1.weight"], ["c1"], name="/conv1/Conv",
                                  pads=[1, 1, 1, 1], strides=[1, 1], kernel_shape=[3, 3]))
    n, i = bn("bn1", "c1", "b1", 8, training=faults.get("bn_training", 1))
    nodes.append(n)
    inits += i
    nodes.append(helper.make_node("Relu", ["b1"], ["r1"], name="/relu/Relu"))
    nodes.append(helper.make_node("MaxPool", ["r1"], ["p1"], name="/maxpool/MaxPool",
                                  kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]))
    inits.append(weight("layer1.0.conv1.weight", 8, 8, 3, 3))
    nodes.append(helper.make_node("Conv", ["p1", "layer1.0.conv1.weight"], ["c2"],
                                  name="/layer1/layer1.0/conv1/Conv", pads=[1, 1, 1, 1]))
    n, i = bn("layer1.0.bn1", "c2", "b2", 8)
    nodes.append(n)
    inits += i
    nodes.append(helper.make_node("Relu", ["b2"], ["r2"], name="/layer1/layer1.0/relu/Relu"))
    # Grouped and dilated, with a bias.
    inits += [weight("layer1.0.conv2.weight", 8, 4, 3, 3),
              numpy_helper.from_array(np.zeros(8, np.float32), "layer1.0.conv2.bias")]
    nodes.append(helper.make_node("Conv", ["r2", "layer1.0.conv2.weight", "layer1.0.conv2.bias"],
                                  ["c3"], name="/layer1/layer1.0/conv2/Conv", group=2,
                                  dilations=[2, 2], pads=[2, 2, 2, 2]))
    skip = "p1" if not faults.get("broadcast_add") else "bias_row"
    if faults.get("broadcast_add"):
        inits.append(numpy_helper.from_array(np.zeros((1, 9, 1, 1), np.float32), "bias_row"))
    nodes.append(helper.make_node("Add", ["c3", skip], ["a1"], name="/layer1/layer1.0/Add"))
    nodes.append(helper.make_node("Relu", ["a1"], ["r3"], name="/layer1/layer1.0/relu_1/Relu"))
    nodes.append(helper.make_node("AveragePool", ["r3"], ["p2"], name="/avgpool2/AveragePool",
                                  kernel_shape=[2, 2], strides=[2, 2],
                                  **({"ceil_mode": 1, "count_include_pad": 1}
                                     if faults.get("ceil_mode") else {})))
    nodes.append(helper.make_node("GlobalAveragePool", ["p2"], ["g"], name="/avgpool/GAP"))
    nodes.append(helper.make_node("Flatten", ["g"], ["f"], name="/Flatten", axis=1))
    inits.append(numpy_helper.from_array(np.array(0.25, np.float32), "ratio"))
    inits.append(numpy_helper.from_array(np.array(True), "training"))
    nodes.append(helper.make_node("Dropout", ["f", "ratio", "training"], ["d"],
                                  name="/dropout/Dropout"))
    inits += [weight("fc.weight", 10, 8) if not faults.get("trans_b0")
              else weight("fc.weight", faults["trans_b0"], 10),
              numpy_helper.from_array(np.zeros(10, np.float32), "fc.bias")]
    nodes.append(helper.make_node("Gemm", ["d", "fc.weight", "fc.bias"], ["logits"], name="/fc/Gemm",
                                  transB=0 if faults.get("trans_b0") else 1))
    if faults.get("tanh"):
        nodes.append(helper.make_node("Tanh", ["logits"], ["out"], name="/act/Tanh"))
    inputs = [helper.make_tensor_value_info("input", TensorProto.FLOAT, [2, 3, 16, 16])]
    if faults.get("two_inputs"):
        inputs.append(helper.make_tensor_value_info("extra", TensorProto.FLOAT, [2, 4]))
    outputs = [helper.make_tensor_value_info("out" if faults.get("tanh") else "logits",
                                             TensorProto.FLOAT, [2, 10])]
    graph = helper.make_graph(nodes, "classifier", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="make_onnx.py")
    model.ir_version = 8
    return model


def mobile():
    """MobileNet's pieces: ReLU6 (Clip with bound inputs), a depthwise
    convolution, HardSwish, a squeeze-excite gate (HardSigmoid) multiplied in
    by broadcasting, and arithmetic with constant scalars."""
    inits = [weight("stem.weight", 8, 3, 3, 3), weight("dw.weight", 8, 1, 3, 3),
             weight("se.weight", 8, 8, 1, 1),
             numpy_helper.from_array(np.zeros(8, np.float32), "se.bias"),
             numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
             numpy_helper.from_array(np.array(6.0, np.float32), "six"),
             numpy_helper.from_array(np.array(2.0, np.float32), "two"),
             weight("fc.weight", 10, 8), numpy_helper.from_array(np.zeros(10, np.float32), "fc.bias")]
    n, bn_inits = bn("bn", "c1", "b1", 8)
    inits += bn_inits
    half = helper.make_tensor("half", TensorProto.FLOAT, [], [0.5])
    nodes = [
        helper.make_node("Conv", ["input", "stem.weight"], ["c1"], name="/stem/Conv", pads=[1, 1, 1, 1]),
        n,
        helper.make_node("Clip", ["b1", "zero", "six"], ["r6"], name="/relu6/Clip"),
        helper.make_node("Conv", ["r6", "dw.weight"], ["dw"], name="/dw/Conv", group=8,
                         pads=[1, 1, 1, 1]),
        helper.make_node("HardSwish", ["dw"], ["hs"], name="/hswish/HardSwish"),
        helper.make_node("GlobalAveragePool", ["hs"], ["squeeze"], name="/se/GAP"),
        helper.make_node("Conv", ["squeeze", "se.weight", "se.bias"], ["excite"], name="/se/Conv"),
        helper.make_node("HardSigmoid", ["excite"], ["gate"], name="/se/HardSigmoid",
                         alpha=1.0 / 6, beta=0.5),
        helper.make_node("Mul", ["hs", "gate"], ["scaled"], name="/se/Mul"),
        helper.make_node("Constant", [], ["half"], name="/Constant", value=half),
        helper.make_node("Sub", ["scaled", "half"], ["shifted"], name="/Sub"),
        helper.make_node("Div", ["shifted", "two"], ["halved"], name="/Div"),
        helper.make_node("GlobalAveragePool", ["halved"], ["g"], name="/pool/GAP"),
        helper.make_node("Flatten", ["g"], ["f"], name="/Flatten"),
        helper.make_node("Gemm", ["f", "fc.weight", "fc.bias"], ["logits"], name="/fc/Gemm", transB=1),
    ]
    graph = helper.make_graph(
        nodes, "mobile", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [2, 3, 16, 16])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [2, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def shuffle(fault=None):
    """ShuffleNet's and SqueezeNet's pieces: max pooling with ceil_mode, a
    channel split (Split), a sigmoid gate, Concat, the channel shuffle as
    Reshape / Transpose / Reshape with its shape computed in the graph
    (Shape, Gather, Div, Unsqueeze, Concat), a Slice, and ReduceMean over
    the spatial dims."""
    i64 = lambda name, values: numpy_helper.from_array(np.array(values, np.int64), name)
    inits = [weight("stem.weight", 8, 3, 3, 3), weight("branch.weight", 4, 4, 1, 1),
             weight("fc.weight", 10, 6), numpy_helper.from_array(np.zeros(10, np.float32), "fc.bias"),
             i64("halves", [4, 4]), i64("zero", 0), i64("one", 1), i64("two", 2), i64("three", 3),
             i64("groups", [2]), i64("axis0", [0]), i64("flat", [0, -1, 8, 8]),
             i64("from", [2]), i64("to", [2**63 - 1]), i64("on", [1]), i64("spatial", [2, 3])]
    n, bn_inits = bn("bn", "c1", "b1", 8)
    inits += bn_inits
    nodes = [
        helper.make_node("Conv", ["input", "stem.weight"], ["c1"], name="/stem/Conv", pads=[1, 1, 1, 1]),
        n,
        helper.make_node("Relu", ["b1"], ["r1"], name="/relu/Relu"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="/maxpool/MaxPool", kernel_shape=[3, 3],
                         strides=[2, 2], ceil_mode=1),
        helper.make_node("Split", ["p1", "halves"], ["left", "right"], name="/Split", axis=1),
        helper.make_node("Conv", ["right", "branch.weight"], ["c2"], name="/branch/Conv"),
        helper.make_node("Sigmoid", ["c2"], ["gate"], name="/branch/Sigmoid"),
        helper.make_node("Mul", ["right", "gate"], ["gated"], name="/branch/Mul"),
        helper.make_node("Concat", ["left", "gated"], ["joined"], name="/Concat", axis=1),
        # The shuffle's shape, computed as torchvision's channel_shuffle exports it.
        helper.make_node("Shape", ["joined"], ["shape"], name="/Shape"),
        helper.make_node("Gather", ["shape", "zero"], ["n"], name="/Gather", axis=0),
        helper.make_node("Gather", ["shape", "one"], ["c"], name="/Gather_1", axis=0),
        helper.make_node("Gather", ["shape", "two"], ["h"], name="/Gather_2", axis=0),
        helper.make_node("Gather", ["shape", "three"], ["w"], name="/Gather_3", axis=0),
        helper.make_node("Div", ["c", "two"], ["per_group"], name="/Div"),
        helper.make_node("Unsqueeze", ["n", "axis0"], ["n1"], name="/Unsqueeze"),
        helper.make_node("Unsqueeze", ["per_group", "axis0"], ["pg1"], name="/Unsqueeze_1"),
        helper.make_node("Unsqueeze", ["h", "axis0"], ["h1"], name="/Unsqueeze_2"),
        helper.make_node("Unsqueeze", ["w", "axis0"], ["w1"], name="/Unsqueeze_3"),
        helper.make_node("Concat", ["n1", "groups", "pg1", "h1", "w1"], ["grouped_shape"],
                         name="/Concat_1", axis=0),
        helper.make_node("Reshape", ["joined", "grouped_shape"], ["grouped"], name="/Reshape"),
        helper.make_node("Transpose", ["grouped"], ["swapped"], name="/Transpose",
                         perm=[0, 2, 1, 3, 4]),
        helper.make_node("Reshape", ["swapped", "flat"], ["shuffled"], name="/Reshape_1"),
        helper.make_node("Slice", ["shuffled", "from", "to", "on"], ["kept"], name="/Slice"),
        helper.make_node("ReduceMean", ["kept"], ["pooled"], name="/ReduceMean", axes=[2, 3],
                         keepdims=0),
        helper.make_node("Gemm", ["pooled", "fc.weight", "fc.bias"], ["logits"], name="/fc/Gemm",
                         transB=1),
    ]
    if fault == "batch_arithmetic":  # the batch size doubled: not a shape graphc can keep
        nodes[15] = helper.make_node("Unsqueeze", ["n2", "axis0"], ["n1"], name="/Unsqueeze")
        nodes.insert(15, helper.make_node("Mul", ["n", "two"], ["n2"], name="/Mul"))
    if fault == "random":  # a random tensor the logits depend on, not a drop-path mask
        reshape = next(i for i, node in enumerate(nodes) if node.name == "/Reshape")
        nodes[reshape].input[0] = "noisy"
        nodes.insert(9, helper.make_node("RandomUniformLike", ["joined"], ["noise"],
                                         name="/RandomUniformLike"))
        nodes.insert(10, helper.make_node("Mul", ["joined", "noise"], ["noisy"], name="/Mul"))
    if fault == "same_stride0":  # SAME padding over a zero stride: no division by it
        nodes[3] = helper.make_node("MaxPool", ["r1"], ["p1"], name="/maxpool/MaxPool",
                                    kernel_shape=[3, 3], strides=[0, 2], auto_pad="SAME_UPPER")
    if fault == "slice_batch":
        nodes[-3] = helper.make_node("Slice", ["shuffled", "from", "one_i", "axis0"], ["kept"],
                                     name="/Slice")
        inits.append(i64("one_i", [1]))
    if fault == "reshape_batch":  # the batch folded into the channels
        inits[inits.index(next(t for t in inits if t.name == "flat"))] = i64("flat", [1, -1, 8, 8])
    graph = helper.make_graph(
        nodes, "shuffle", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [2, 3, 16, 16])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [2, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    model.ir_version = 8
    return model


def attention(fault=None, opset=17):
    """A transformer's pieces: 4x4 patches as tokens (Conv, Reshape,
    Transpose), a class token (Expand of a parameter to the batch, Concat),
    LayerNormalization, one attention head (MatMul by a weight, MatMul of
    two activations, Softmax scaled by 1 / sqrt(Cast(a shape)) folded at
    import), GELU (Div, Erf, Add, Mul), the class token picked by Gather and
    a linear classifier. The batch, 2, is written into the reshapes, as an
    export without a symbolic batch axis does: graphc import --batch 2."""
    i64 = lambda name, values: numpy_helper.from_array(np.array(values, np.int64), name)
    f32 = lambda name, value: numpy_helper.from_array(np.array(value, np.float32), name)
    inits = [weight("patch.weight", 8, 3, 4, 4), weight("cls", 1, 1, 8),
             numpy_helper.from_array(np.ones(8, np.float32), "ln.weight"),
             numpy_helper.from_array(np.zeros(8, np.float32), "ln.bias"),
             weight("qk.weight", 8, 8), weight("head.weight", 10, 8),
             numpy_helper.from_array(np.zeros(10, np.float32), "head.bias"),
             i64("tokens_shape", [2, 8, 4]), i64("cls_shape", [2, 1, 1]), i64("last", [-1]),
             i64("zero", 0), f32("one", 1.0), f32("sqrt2", 1.4142135), f32("half", 0.5)]
    nodes = [
        helper.make_node("Conv", ["input", "patch.weight"], ["patches"], name="/patch/Conv",
                         kernel_shape=[4, 4], strides=[4, 4]),
        helper.make_node("Reshape", ["patches", "tokens_shape"], ["flat"], name="/Reshape"),
        helper.make_node("Transpose", ["flat"], ["tokens"], name="/Transpose", perm=[0, 2, 1]),
        helper.make_node("Expand", ["cls", "cls_shape"], ["cls_all"], name="/Expand"),
        helper.make_node("Concat", ["cls_all", "tokens"], ["seq"], name="/Concat", axis=1),
        helper.make_node("LayerNormalization", ["seq", "ln.weight", "ln.bias"], ["normed"],
                         name="/ln/LayerNormalization", axis=-1, epsilon=1e-6),
        helper.make_node("MatMul", ["normed", "qk.weight"], ["q"], name="/q/MatMul"),
        helper.make_node("Transpose", ["normed"], ["kt"], name="/Transpose_1", perm=[0, 2, 1]),
        helper.make_node("Shape", ["q"], ["q_shape"], name="/Shape"),
        helper.make_node("Slice", ["q_shape", "last", "big"], ["d"], name="/Slice"),
        helper.make_node("Cast", ["d"], ["d_float"], name="/Cast", to=TensorProto.FLOAT),
        helper.make_node("Sqrt", ["d_float"], ["root"], name="/Sqrt"),
        helper.make_node("Div", ["one", "root"], ["scale"], name="/Div"),
        helper.make_node("MatMul", ["q", "kt"], ["scores"], name="/MatMul"),
        helper.make_node("Mul", ["scores", "scale"], ["scaled"], name="/Mul"),
        helper.make_node("Softmax", ["scaled"], ["weights"], name="/Softmax", axis=-1),
        helper.make_node("MatMul", ["weights", "normed"], ["mixed"], name="/MatMul_1"),
        helper.make_node("Div", ["mixed", "sqrt2"], ["mixed_s"], name="/gelu/Div"),
        helper.make_node("Erf", ["mixed_s"], ["erf"], name="/gelu/Erf"),
        helper.make_node("Add", ["erf", "one"], ["erf1"], name="/gelu/Add"),
        helper.make_node("Mul", ["mixed", "erf1"], ["g"], name="/gelu/Mul"),
        helper.make_node("Mul", ["g", "half"], ["gelu"], name="/gelu/Mul_1"),
        helper.make_node("Gather", ["gelu", "zero"], ["picked"], name="/Gather", axis=1),
        helper.make_node("Gemm", ["picked", "head.weight", "head.bias"], ["logits"],
                         name="/head/Gemm", transB=1),
    ]
    inits.append(i64("big", [2**63 - 1]))
    if fault == "matmul_batch":  # batch dims that neither equal nor come from a 2-D weight
        nodes[7] = helper.make_node("Transpose", ["normed"], ["kt"], name="/Transpose_1",
                                    perm=[2, 0, 1])
    if fault == "ln_scale":  # a scale of another shape than the normalized dims
        inits[2] = numpy_helper.from_array(np.ones(7, np.float32), "ln.weight")
    if fault == "gather_range":  # an index past the tokens
        inits[inits.index(next(t for t in inits if t.name == "zero"))] = i64("zero", 9)
    if fault == "cast_int":  # the attention weights through int64 and back
        for node in nodes[16:]:
            node.input[:] = ["weights_f" if x == "weights" else x for x in node.input]
        nodes.insert(16, helper.make_node("Cast", ["weights"], ["weights_i"], name="/Cast_1",
                                          to=TensorProto.INT64))
        nodes.insert(17, helper.make_node("Cast", ["weights_i"], ["weights_f"], name="/Cast_2",
                                          to=TensorProto.FLOAT))
    graph = helper.make_graph(
        nodes, "attention", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [2, 3, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [2, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def transposed_products():
    """Products of transposed operands, as PyTorch exports x @ w.T on more
    than two dims and q @ k.transpose(-2, -1): a weight's Transpose read by a
    MatMul of [2, 5, 8] tokens, an activation's transpose as the left operand
    of a 2-D product, a batched product of an activation and its transpose,
    and a transpose that a product and the graph's outputs both read. An
    inference graph: graphc import --forward."""
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.standard_normal((6, 8)).astype(np.float32), "w")
    rows = numpy_helper.from_array(np.array([10, 6], np.int64), "rows")
    nodes = [
        helper.make_node("Transpose", ["w"], ["wt"], name="/wt", perm=[1, 0]),
        helper.make_node("MatMul", ["x", "wt"], ["y"], name="/linear"),
        helper.make_node("Reshape", ["y", "rows"], ["y2"], name="/rows"),
        helper.make_node("Transpose", ["y2"], ["y2t"], name="/y2t", perm=[1, 0]),
        helper.make_node("MatMul", ["y2t", "y2"], ["gram"], name="/gram"),
        helper.make_node("Transpose", ["y"], ["yt"], name="/yt", perm=[0, 2, 1]),
        helper.make_node("MatMul", ["y", "yt"], ["scores"], name="/scores"),
    ]
    outputs = [helper.make_tensor_value_info("gram", TensorProto.FLOAT, [6, 6]),
               helper.make_tensor_value_info("scores", TensorProto.FLOAT, [2, 5, 5]),
               helper.make_tensor_value_info("yt", TensorProto.FLOAT, [2, 6, 5])]
    graph = helper.make_graph(
        nodes, "transposed_products",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5, 8])], outputs, [w, rows])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def check_transposed(folder):
    """transposed_products' outputs from graphrun infer against float64."""
    model = onnx.load(os.path.join(folder, "transposed.onnx"))
    w = numpy_helper.to_array(model.graph.initializer[0]).astype(np.float64)
    x = np.load(os.path.join(folder, "x.npy")).astype(np.float64)
    y = x @ w.T
    rows = y.reshape(10, 6)
    expected = {"gram": rows.T @ rows, "scores": y @ y.transpose(0, 2, 1),
                "yt": y.transpose(0, 2, 1)}
    for name, want in expected.items():
        got = np.load(os.path.join(folder, name + ".npy"))
        error = np.abs(got - want).max() / np.abs(want).max()
        print(f"{name} {list(got.shape)} {'ok' if got.shape == want.shape and error < 1e-5 else 'WRONG'}")


def main():
    if sys.argv[1] == "check-transposed":
        return check_transposed(sys.argv[2])
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    onnx.save(classifier(), os.path.join(out, "classifier.onnx"))
    onnx.save(classifier(bn_training=0), os.path.join(out, "inference.onnx"))
    onnx.save(mobile(), os.path.join(out, "mobile.onnx"))
    onnx.save(shuffle(), os.path.join(out, "shuffle.onnx"))
    onnx.save(classifier(trans_b0=8), os.path.join(out, "gemm_b0.onnx"))
    onnx.save(attention(), os.path.join(out, "attention.onnx"))
    onnx.save(transposed_products(), os.path.join(out, "transposed.onnx"))
    for fault in ["matmul_batch", "ln_scale", "gather_range", "cast_int"]:
        onnx.save(attention(fault), os.path.join(out, f"bad_attention_{fault}.onnx"))
    for fault in ["batch_arithmetic", "slice_batch", "reshape_batch", "random", "same_stride0"]:
        onnx.save(shuffle(fault), os.path.join(out, f"bad_{fault}.onnx"))
    for name, faults in {"tanh": {"tanh": 1}, "two_inputs": {"two_inputs": 1},
                         "trans_b0": {"trans_b0": 9}, "ceil": {"ceil_mode": 1},
                         "broadcast": {"broadcast_add": 1}, "shapes": {"bad_shapes": 1}}.items():
        onnx.save(classifier(**faults), os.path.join(out, f"bad_{name}.onnx"))
    onnx.save(classifier(opset=10), os.path.join(out, "bad_opset.onnx"))
    # Weights in a file beside the model, which is missing.
    model = classifier()
    onnx.save_model(model, os.path.join(out, "bad_external.onnx"), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="missing.bin", size_threshold=0)
    os.remove(os.path.join(out, "missing.bin"))
    # Control flow: an If whose branches are subgraphs.
    branch = helper.make_graph([helper.make_node("Identity", ["input"], ["y"])], "branch", [],
                               [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 16, 16])])
    cond = numpy_helper.from_array(np.array(True), "cond")
    graph = helper.make_graph(
        [helper.make_node("If", ["cond"], ["logits"], then_branch=branch, else_branch=branch)],
        "control", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [2, 3, 16, 16])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [2, 3, 16, 16])], [cond])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, os.path.join(out, "bad_if.onnx"))
    # Pooling of stride 1 (ONNX's default): the output keeps its size.
    model = classifier()
    for node in model.graph.node:
        if node.op_type == "AveragePool":
            del node.attribute[:]
            node.attribute.extend([helper.make_attribute("kernel_shape", [3, 3]),
                                   helper.make_attribute("pads", [1, 1, 1, 1])])
    onnx.save(model, os.path.join(out, "stride1.onnx"))
    # Names graphc keeps for itself, or that cannot be keys; shared statistics.
    for name, old, new in [("metadata", "fc.bias", "__metadata__"),
                           ("slot", "bn1.running_mean", "bn1.weight.momentum_buffer"),
                           ("graphc_name", "fc.bias", "graphc.step")]:
        model = classifier()
        for t in model.graph.initializer:
            if t.name == old:
                t.name = new
        for node in model.graph.node:
            node.input[:] = [new if i == old else i for i in node.input]
        onnx.save(model, os.path.join(out, f"bad_{name}.onnx"))
    model = classifier()
    bn_node = next(n for n in model.graph.node if n.op_type == "BatchNormalization")
    bn_node.input[4] = bn_node.input[3]  # the mean as the variance too
    onnx.save(model, os.path.join(out, "bad_shared_stat.onnx"))
    # A node name with a line break: the error stays on one line.
    model = classifier(tanh=1)
    model.graph.node[-1].name = "/act/Tanh\nsecond line"
    onnx.save(model, os.path.join(out, "bad_newline.onnx"))
    # Two versions of the default domain; a model-local function; a sparse initializer.
    model = classifier()
    model.opset_import.append(helper.make_opsetid("ai.onnx", 13))
    onnx.save(model, os.path.join(out, "bad_two_opsets.onnx"))
    model = classifier()
    model.functions.append(helper.make_function("local", "f", ["x"], ["y"],
                                                [helper.make_node("Relu", ["x"], ["y"])],
                                                [helper.make_opsetid("", 17)]))
    onnx.save(model, os.path.join(out, "bad_function.onnx"))
    model = classifier()
    values = numpy_helper.from_array(np.ones(2, np.float32), "sparse")
    indices = numpy_helper.from_array(np.array([0, 1], np.int64), "sparse_indices")
    model.graph.sparse_initializer.append(helper.make_sparse_tensor(values, indices, [4]))
    onnx.save(model, os.path.join(out, "bad_sparse.onnx"))
    with open(os.path.join(out, "bad_garbage.onnx"), "wb") as f:
        f.write(b"\xff\xff\xff\xff not a protobuf")
    # A good model cut short.
    data = classifier().SerializeToString()
    with open(os.path.join(out, "bad_truncated.onnx"), "wb") as f:
        f.write(data[: len(data) // 2])
    # A node the checker refuses: a Relu with two inputs.
    model = classifier()
    model.graph.node[2].input.append("c1")
    onnx.save(model, os.path.join(out, "bad_checker.onnx"))


if __name__ == "__main__":
    main()
