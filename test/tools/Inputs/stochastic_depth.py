#!/usr/bin/env python3
"""Stochastic depth (torchvision's StochasticDepth, mode "row") as ONNX with
python3-onnx, and the check of what graphc trained from it
(test/tools/stochastic-depth.test).

  stochastic_depth.py make OUT_DIR
      sd_open.onnx: the mask shaped [N, 1, 1, 1] through Shape, Gather,
        Unsqueeze, Concat and ConstantOfShape (an export with an open batch);
      sd_traced.onnx: the same from a constant [B, 1, 1, 1] (the batch the
        legacy exporter traced, B = 64);
      sd_shared.onnx: two blocks' chains whose noises share one
        ConstantOfShape (as a graph simplifier merges them);
      bad_sd_*.onnx: a noise per element, a divisor that is not the survival
        rate, a noise read twice, a noise of rank 1 or 2 (numpy would align
        its batch with the last axes), a survival rate of 1e-45, a noise
        traced at batch 1.
      Both models: y = Gemm(Flatten(x * mask)), W and b zero, K = 4 classes;
      data.npy / labels.npy: 64 samples of 2·64 channels (1x1), sample j
      has ones in channels j and 64 + j, labels j % 4.
  stochastic_depth.py check SAVED.safetensors KEEP [COMPARE.safetensors]
      After one SGD step at lr 1 from zero weights, W's column c moved by
      -(1/B)(1/K - onehot(label)) m_j x_j[c], so W[label_j, j] reveals sample
      j's mask m_j: 0 or 1/KEEP, the same in both of its channels (one draw
      per sample), and about a fraction 1 - KEEP of the 64 samples dropped.
      COMPARE (another run's save, e.g. 2 ranks): the same masks.
"""
import json
import os
import struct
import sys

import numpy as np

B, K, KEEP = 64, 4, 0.5
C = 2 * B


def make(out):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    def model(traced=False, fault=None, batch=B):
        i64 = lambda name, values: numpy_helper.from_array(np.array(values, np.int64), name)
        f32 = lambda name, value: numpy_helper.from_array(np.array(value, np.float32), name)
        keep = 1e-45 if fault == "denormal" else KEEP
        inits = [numpy_helper.from_array(np.zeros((K, C), np.float32), "fc.weight"),
                 numpy_helper.from_array(np.zeros(K, np.float32), "fc.bias"),
                 f32("keep", keep), f32("divisor", 0.25 if fault == "divisor" else keep)]
        nodes = []
        if traced:
            inits.append(numpy_helper.from_array(np.zeros((batch, 1, 1, 1), np.float32), "zeros"))
            like = "zeros"
        else:
            rest = {"elementwise": [C, 1, 1], "rank1": [], "rank2": [1]}.get(fault, [1, 1, 1])
            inits += [i64("zero", 0), i64("axis0", [0]), i64("rest", rest)]
            nodes += [
                helper.make_node("Shape", ["input"], ["shape"], name="/sd/Shape"),
                helper.make_node("Gather", ["shape", "zero"], ["n"], name="/sd/Gather", axis=0),
                helper.make_node("Unsqueeze", ["n", "axis0"], ["n1"], name="/sd/Unsqueeze"),
                helper.make_node("Concat", ["n1", "rest"], ["noise_shape"], name="/sd/Concat",
                                 axis=0) if rest else
                helper.make_node("Identity", ["n1"], ["noise_shape"], name="/sd/Identity"),
                helper.make_node("ConstantOfShape", ["noise_shape"], ["zeros"],
                                 name="/sd/ConstantOfShape",
                                 value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.0])),
            ]
            like = "zeros"
        nodes += [
            helper.make_node("RandomUniformLike", [like], ["u"], name="/sd/RandomUniformLike",
                             dtype=1, high=1.0, low=0.0),
            helper.make_node("Less", ["u", "keep"], ["kept"], name="/sd/Less"),
            helper.make_node("Cast", ["kept"], ["kept_f"], name="/sd/Cast", to=1),
            helper.make_node("Div", ["kept_f", "divisor"], ["mask"], name="/sd/Div"),
            helper.make_node("Mul", ["input", "mask"], ["dropped"], name="/sd/Mul"),
        ]
        if fault == "shared":  # a second block's chain shares the first's ConstantOfShape
            nodes += [
                helper.make_node("RandomUniformLike", [like], ["u2"], name="/sd2/RandomUniformLike",
                                 dtype=1, high=1.0, low=0.0),
                helper.make_node("Less", ["u2", "keep"], ["kept2"], name="/sd2/Less"),
                helper.make_node("Cast", ["kept2"], ["kept2_f"], name="/sd2/Cast", to=1),
                helper.make_node("Div", ["kept2_f", "divisor"], ["mask2"], name="/sd2/Div"),
                helper.make_node("Mul", ["dropped", "mask2"], ["dropped2"], name="/sd2/Mul"),
                helper.make_node("Identity", ["dropped2"], ["dropped_"], name="/sd2/Identity"),
            ]
        nodes += [
            helper.make_node("Flatten", ["dropped_" if fault == "shared" else "dropped"], ["flat"],
                             name="/Flatten", axis=1),
            helper.make_node("Gemm", ["flat", "fc.weight", "fc.bias"], ["logits"],
                             name="/fc/Gemm", transB=1),
        ]
        if fault == "read_twice":  # the noise also leaves the chain
            nodes.append(helper.make_node("Add", ["logits", "u"], ["logits2"], name="/Add"))
        graph = helper.make_graph(
            nodes, "stochastic_depth",
            [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                           [batch if traced else "batch", C, 1, 1])],
            [helper.make_tensor_value_info("logits2" if fault == "read_twice" else "logits",
                                           TensorProto.FLOAT, [batch, K])], inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 8
        onnx.checker.check_model(m)
        return m

    os.makedirs(out, exist_ok=True)
    onnx.save(model(), os.path.join(out, "sd_open.onnx"))
    onnx.save(model(traced=True), os.path.join(out, "sd_traced.onnx"))
    onnx.save(model(fault="shared"), os.path.join(out, "sd_shared.onnx"))
    for fault in ["elementwise", "divisor", "read_twice", "rank1", "rank2", "denormal"]:
        onnx.save(model(fault=fault), os.path.join(out, f"bad_sd_{fault}.onnx"))
    onnx.save(model(traced=True, batch=1), os.path.join(out, "bad_sd_batch1.onnx"))
    x = np.zeros((B, C, 1, 1), np.float32)
    for j in range(B):
        x[j, j] = x[j, B + j] = 1
    np.save(os.path.join(out, "data.npy"), x)
    np.save(os.path.join(out, "labels.npy"), (np.arange(B) % K).astype(np.int32))


def tensor(path, name):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    begin, end = header[name]["data_offsets"]
    return np.frombuffer(data[8 + n + begin:8 + n + end], np.float32).reshape(header[name]["shape"])


def masks(path, keep):
    w = tensor(path, "fc.weight").astype(np.float64)
    scale = B / (1 - 1 / K)
    first = np.array([w[j % K, j] for j in range(B)]) * scale
    second = np.array([w[j % K, B + j] for j in range(B)]) * scale
    assert np.allclose(first, second, atol=1e-5), ("one draw per sample", first, second)
    dropped = np.abs(first) < 1e-5
    kept = np.abs(first - 1 / keep) < 1e-4 * (1 / keep)
    assert np.all(dropped | kept), ("masks are 0 or 1/keep", first)
    return dropped


def check(path, keep, compare=None):
    dropped = masks(path, keep)
    # Binomial(64, 1 - keep): 5 standard deviations either side.
    mean, sd = B * (1 - keep), np.sqrt(B * keep * (1 - keep))
    assert abs(dropped.sum() - mean) <= 5 * sd, ("dropped", dropped.sum(), mean)
    print(f"stochastic depth: {dropped.sum()} of {B} samples dropped, the rest scaled by "
          f"1/{keep}, one draw per sample")
    if compare:
        other = masks(compare, keep)
        assert np.array_equal(dropped, other), ("the same masks", dropped, other)
        print("the same samples dropped in", compare)


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2])
    else:
        check(sys.argv[2], float(sys.argv[3]), sys.argv[4] if len(sys.argv) > 4 else None)
