#!/usr/bin/env python3
"""The ONNX forms timm's models add, trained: one SGD step of a small
training-form model through graphc import, graphc compile and graphrun,
against a NumPy float64 forward and its central finite differences.

The model (images [2, 3, 8, 8], 4 classes), node by node as PyTorch exports
timm's layers:
- pads computed in floats and folded (Sub, Clip without a max, Div, Cast:
  TensorFlow-style "same" padding), then Pad;
- weight standardization (BiT's and NFNet's StdConv2d): the weight reshaped
  to [1, O, -1], a training-mode BatchNormalization with constant scale and
  bias whose mean and variance inputs are computed (no running statistics),
  reshaped back by the Shape of the weight; times a gain parameter scaled by
  a constant (Mul of a parameter and a scalar); the convolution reads the
  computed weight (and a bias, so that the instance norm after it keeps
  the gain's gradient);
- LeakyRelu (alpha 0.1); InstanceNormalization (GroupNorm(1));
- Resize up (linear, half_pixel, by sizes), a constant of 4,356 elements
  added (more than the importer folds: a Constant node taken as it is),
  and a position encoding as EdgeNeXt's computes it from the activation's
  shape (ConstantOfShape of [N, 33, 33], CumSum along each axis, Sin, Cos,
  Concat, Transpose: folded to the same values for every image, one
  image's broadcast over the batch), and then times 1 + 0.01 x that
  encoding x [1, 2] per image (folded too, and different per image: kept
  whole); Resize down (cubic, half_pixel, by scales 0.4);
- Pow 2; ReduceSum over the last axis; BatchNormalization of rank 3
  (BatchNorm1d, with running statistics); Flatten at axis 2 (the batch
  merged: a fixed batch); LayerNormalization with a constant bias; a
  one-element parameter times it (StarReLU's scale); Gemm, its bias a
  parameter with one element replaced by a constant (ScatterND: Swin V2's
  qkv bias), which then gets no gradient.

  timm_ops_check.py make DIR [--fault F]  model.onnx, images.npy, labels.npy
                               in DIR; F breaks it: pow-half (an exponent
                               of 0.5), resize-crop (tf_crop_and_resize),
                               resize-huge (33 columns to 1,023,000: a
                               matrix past 2^24 entries), aux (a second output, an
                               auxiliary classifier), fold-huge (the position
                               encoding of 4097 x 4097 images), no-pe
                               (without the position encoding)
  timm_ops_check.py check DIR  DIR/init.safetensors (graphc import's weights),
                               DIR/final.safetensors (after one step at lr 1)
                               and DIR/report.json against NumPy
"""
import json
import sys

import numpy as np

from numpy_reference import cross_entropy, load_safetensors, worst_step_error

N, CLASSES = 2, 4
BIG = (1, 4, 33, 33)
PARAMS = {  # name: (shape, scale)
    "W": ((4, 3, 3, 3), 0.3), "gain": ((4, 1, 1, 1), 1.0), "conv_b": ((4,), 0.5), "in_s": ((4,), 1.0),
    "in_b": ((4,), 0.1), "bn_s": ((4,), 1.0), "bn_b": ((4,), 0.1), "ln_s": ((52,), 1.0),
    "star": ((1,), 0.8), "fc_w": ((CLASSES, 52), 0.2), "fc_b": ((CLASSES,), 0.1),
}
STATS = {"bn_mean": 0.1, "bn_var": 1.0}


def make(d, fault=None):
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(7)
    inits = []
    for name, (shape, scale) in PARAMS.items():
        v = rng.standard_normal(shape) * scale
        if name in ("gain", "in_s", "bn_s", "ln_s"):
            v = 1 + 0.2 * rng.standard_normal(shape)
        inits.append(numpy_helper.from_array(v.astype(np.float32), name))
    inits.append(numpy_helper.from_array(np.full(4, STATS["bn_mean"], np.float32), "bn_mean"))
    inits.append(numpy_helper.from_array(np.full(4, STATS["bn_var"], np.float32), "bn_var"))

    def const(name, array):
        return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(array, name))
    f32 = lambda *v: np.array(v, dtype=np.float32)
    i64 = lambda *v: np.array(v, dtype=np.int64)
    position_encoding = [
        # EdgeNeXt's PositionalEncodingFourier, smaller: a mask of ones the
        # shape of the activation's batch and pixels, summed along rows and
        # columns, through Sin and Cos.
        helper.make_node("Shape", ["u"], ["u_shape"]),
        const("nhw", i64(0, 2, 3)),
        helper.make_node("Gather", ["u_shape", "nhw"], ["mask_shape"]) if fault != "fold-huge"
        else const("mask_shape", i64(N, 4097, 4097)),
        helper.make_node("ConstantOfShape", ["mask_shape"], ["mask"],
                         value=numpy_helper.from_array(f32(1), "one")),
        const("axis1", i64(1)), const("axis2", i64(2)),
        helper.make_node("CumSum", ["mask", "axis1"], ["pos_y"]),
        helper.make_node("CumSum", ["mask", "axis2"], ["pos_x"]),
        const("tenth", f32(0.1).reshape(())),
        helper.make_node("Mul", ["pos_y", "tenth"], ["pos_y10"]),
        helper.make_node("Mul", ["pos_x", "tenth"], ["pos_x10"]),
        helper.make_node("Sin", ["pos_y10"], ["sin_y"]),
        helper.make_node("Cos", ["pos_x10"], ["cos_x"]),
        const("last", i64(3)),
        helper.make_node("Unsqueeze", ["sin_y", "last"], ["sin_y4"]),
        helper.make_node("Unsqueeze", ["cos_x", "last"], ["cos_x4"]),
        helper.make_node("Concat", ["sin_y4", "cos_x4"], ["pe2"], axis=3),
        helper.make_node("Mul", ["pe2", "half"], ["pe2_half"]),
        helper.make_node("Concat", ["pe2", "pe2_half"], ["pe4"], axis=3),
        helper.make_node("Transpose", ["pe4"], ["pe_nchw"], perm=[0, 3, 1, 2]),
        const("pe_scale", f32(0.05).reshape(())),
        helper.make_node("Mul", ["pe_nchw", "pe_scale"], ["pe"]),
        helper.make_node("Add", ["ub", "pe"], ["upe"]),
        # A folded constant of as many elements that differs from image to
        # image (kept whole): 1 + 0.01 * pe * [1, 2] per image.
        const("per_image", f32(1, 2).reshape(N, 1, 1, 1)),
        helper.make_node("Mul", ["pe", "per_image"], ["pe_img"]),
        const("hundredth", f32(0.01).reshape(())),
        helper.make_node("Mul", ["pe_img", "hundredth"], ["pe_small"]),
        const("one_s", f32(1).reshape(())),
        helper.make_node("Add", ["pe_small", "one_s"], ["gainmap"]),
        helper.make_node("Mul", ["upe", "gainmap"], ["k"]),
    ]
    nodes = [
        const("padf", f32(0, 0, 0, 0, 0, 0, 2, 2)), const("one", f32(1)),
        const("zero", f32(0)),
        helper.make_node("Sub", ["padf", "one"], ["pads_sub"]),
        helper.make_node("Clip", ["pads_sub", "zero"], ["pads_clip"]),
        helper.make_node("Div", ["pads_clip", "one"], ["pads_div"]),
        helper.make_node("Cast", ["pads_div"], ["pads"], to=TensorProto.INT64),
        helper.make_node("Pad", ["x", "pads"], ["xp"]),
        const("wshape", i64(1, 4, -1)),
        helper.make_node("Reshape", ["W", "wshape"], ["Wr"]),
        helper.make_node("Transpose", ["Wr"], ["Wt"], perm=[0, 2, 1]),
        helper.make_node("ReduceMean", ["Wt"], ["wmean"], axes=[0, 1], keepdims=0),
        helper.make_node("Mul", ["Wt", "Wt"], ["Wsq"]),
        helper.make_node("ReduceMean", ["Wsq"], ["wvar"], axes=[0, 1], keepdims=0),
        const("ones4", np.ones(4, np.float32)), const("zeros4", np.zeros(4, np.float32)),
        helper.make_node("BatchNormalization", ["Wr", "ones4", "zeros4", "wmean", "wvar"],
                         ["Wn"], epsilon=1e-5, momentum=1.0, training_mode=1),
        helper.make_node("Shape", ["W"], ["Wshape"]),
        helper.make_node("Reshape", ["Wn", "Wshape"], ["Ws"]),
        const("half", f32(0.5).reshape(())),
        helper.make_node("Mul", ["gain", "half"], ["gain_half"]),
        helper.make_node("Mul", ["Ws", "gain_half"], ["Wg"]),
        helper.make_node("Conv", ["xp", "Wg", "conv_b"], ["c"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
        helper.make_node("LeakyRelu", ["c"], ["a"], alpha=0.1),
        helper.make_node("InstanceNormalization", ["a", "in_s", "in_b"], ["i"], epsilon=1e-5),
        const("sizes", i64(N, 4, 33, 33)),
        helper.make_node("Resize", ["i", "", "", "sizes"], ["u"], mode="linear",
                         coordinate_transformation_mode="tf_crop_and_resize"
                         if fault == "resize-crop" else "half_pixel"),
        const("big", (np.random.default_rng(8).standard_normal(BIG) * 0.1).astype(np.float32)),
        helper.make_node("Add", ["u", "big"], ["ub"]),
    ] + (position_encoding if fault != "no-pe" else [
        helper.make_node("Identity", ["ub"], ["k"])]) + [
        const("scales", f32(1, 1, 0.4, 31000 if fault == "resize-huge" else 0.4)),
        helper.make_node("Resize", ["k", "", "scales"], ["dn"], mode="cubic",
                         coordinate_transformation_mode="half_pixel"),
        const("two", f32(0.5 if fault == "pow-half" else 2)),
        helper.make_node("Pow", ["dn", "two"], ["p"]),
        const("axis3", i64(3)),
        helper.make_node("ReduceSum", ["p", "axis3"], ["r"], keepdims=0),
        helper.make_node("BatchNormalization", ["r", "bn_s", "bn_b", "bn_mean", "bn_var"],
                         ["bn", "bn_mean_out", "bn_var_out"], epsilon=1e-5, momentum=0.9,
                         training_mode=1),
        helper.make_node("Flatten", ["bn"], ["fl"], axis=2),
        const("rows", i64(N, 52)),
        helper.make_node("Reshape", ["fl", "rows"], ["f2"]),
        const("lnb", np.zeros(52, np.float32)),
        helper.make_node("LayerNormalization", ["f2", "ln_s", "lnb"], ["ln"], axis=-1,
                         epsilon=1e-5),
        helper.make_node("Mul", ["ln", "star"], ["st"]),
        # Swin V2's qkv bias: a parameter with a part replaced by constants
        # (ScatterND of constant updates at constant indices).
        const("scatter_at", i64(1).reshape(1, 1)), const("scatter_to", f32(0.25)),
        helper.make_node("ScatterND", ["fc_b", "scatter_at", "scatter_to"], ["fc_b_set"]),
        helper.make_node("Gemm", ["st", "fc_w", "fc_b_set"], ["logits"], transB=1),
    ]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [N, CLASSES])]
    if fault == "aux":
        # An auxiliary classifier of its own weights (GoogLeNet's, Inception's).
        inits.append(numpy_helper.from_array(
            (rng.standard_normal((CLASSES, 52)) * 0.2).astype(np.float32), "aux_w"))
        nodes.append(helper.make_node("Relu", ["f2"], ["aux_in"]))
        nodes.append(helper.make_node("Gemm", ["aux_in", "aux_w"], ["aux"], transB=1))
        outputs.append(helper.make_tensor_value_info("aux", TensorProto.FLOAT, [N, CLASSES]))
    graph = helper.make_graph(
        nodes, "timm_ops",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [N, 3, 8, 8])], outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    if fault in (None, "aux"):
        onnx.checker.check_model(model)
    onnx.save(model, f"{d}/model.onnx")
    rng = np.random.default_rng(9)
    np.save(f"{d}/images.npy", rng.standard_normal((N, 3, 8, 8)).astype(np.float32))
    np.save(f"{d}/labels.npy", np.array([1, 3], dtype=np.int32))
    np.save(f"{d}/big.npy", (np.random.default_rng(8).standard_normal(BIG) * 0.1)
            .astype(np.float32))


def resize_matrix(n_in, n_out, scale, cubic):
    """ONNX Resize along one dim, half_pixel, edge-clamped neighbours."""
    a = np.zeros((n_out, n_in))
    for i in range(n_out):
        x = (i + 0.5) / scale - 0.5
        base = int(np.floor(x))
        t = x - base
        if cubic:
            A = -0.75
            near = lambda s: ((A + 2) * s - (A + 3)) * s * s + 1
            far = lambda s: ((A * s - 5 * A) * s + 8 * A) * s - 4 * A
            weights = [far(t + 1), near(t), near(1 - t), far(2 - t)]
            first = base - 1
        else:
            weights, first = [1 - t, t], base
        for k, w in enumerate(weights):
            a[i, min(max(first + k, 0), n_in - 1)] += w
    return a


def forward(p, x, big, stats=None):
    eps = 1e-5
    xp = np.pad(x, ((0, 0), (0, 0), (0, 1), (0, 1)))
    wr = p["W"].reshape(1, 4, -1)
    wn = (wr - wr.mean(axis=(0, 2), keepdims=True)) / np.sqrt(wr.var(axis=(0, 2), keepdims=True) + eps)
    w = wn.reshape(4, 3, 3, 3) * (p["gain"] * 0.5)
    xpp = np.pad(xp, ((0, 0), (0, 0), (1, 1), (1, 1)))
    h = xp.shape[2]
    c = np.zeros((N, 4, h, h))
    for i in range(h):
        for j in range(h):
            c[:, :, i, j] = np.einsum("ncij,ocij->no", xpp[:, :, i:i + 3, j:j + 3], w) + p["conv_b"]
    a = np.where(c > 0, c, 0.1 * c)
    m = a.mean(axis=(2, 3), keepdims=True)
    v = a.var(axis=(2, 3), keepdims=True)
    i_ = (a - m) / np.sqrt(v + eps) * p["in_s"][None, :, None, None] + p["in_b"][None, :, None, None]
    up = resize_matrix(h, 33, 33 / h, False)
    rows = np.sin(0.1 * np.arange(1, 34))[:, None] * np.ones(33)
    cols = np.ones(33)[:, None] * np.cos(0.1 * np.arange(1, 34))
    pe = 0.05 * np.stack([rows, cols, 0.5 * rows, 0.5 * cols])  # [4, 33, 33], every image's
    per_image = np.array([1.0, 2.0])[:, None, None, None]
    u = (np.einsum("ah,nchw,bw->ncab", up, i_, up) + big + pe) * (1 + 0.01 * pe * per_image)
    down = resize_matrix(33, 13, 0.4, True)
    dn = np.einsum("ah,nchw,bw->ncab", down, u, down)
    r = (dn ** 2).sum(axis=3)                       # [N, 4, 13]
    bm, bv = r.mean(axis=(0, 2)), r.var(axis=(0, 2))
    if stats is not None:
        stats.update(mean=bm, var=bv * r[:, 0, :].size / (r[:, 0, :].size - 1))
    bn = (r - bm[None, :, None]) / np.sqrt(bv[None, :, None] + eps) * p["bn_s"][None, :, None] + \
        p["bn_b"][None, :, None]
    f2 = bn.reshape(N, 52)
    ln = (f2 - f2.mean(axis=1, keepdims=True)) / np.sqrt(f2.var(axis=1, keepdims=True) + eps)
    st = ln * p["ln_s"] * p["star"]
    fc_b = p["fc_b"].copy()
    fc_b[1] = 0.25
    return st @ p["fc_w"].T + fc_b


def loss_of(p, x, y, big):
    return cross_entropy(forward(p, x, big), y)


def check(d):
    init, final = load_safetensors(f"{d}/init.safetensors"), load_safetensors(f"{d}/final.safetensors")
    x = np.load(f"{d}/images.npy").astype(np.float64)
    y = np.load(f"{d}/labels.npy").astype(np.int64)
    big = np.load(f"{d}/big.npy").astype(np.float64)
    p = {k: init[k] for k in PARAMS}
    want = loss_of(p, x, y, big)
    have = json.load(open(f"{d}/report.json"))["final_loss"]
    loss_error = abs(have - want) / abs(want)
    worst, where = worst_step_error(lambda q: loss_of(q, x, y, big), init, final, PARAMS)
    stats = {}
    forward(p, x, big, stats)
    stat_error = max(
        np.abs(final["bn_mean"] - (0.9 * init["bn_mean"] + 0.1 * stats["mean"])).max() /
        np.abs(stats["mean"]).max(),
        np.abs(final["bn_var"] - (0.9 * init["bn_var"] + 0.1 * stats["var"])).max() /
        np.abs(stats["var"]).max())
    print(f"timm_ops_check: loss {have:.6f} (float64 {want:.6f}), "
          f"loss {'ok' if loss_error < 1e-5 else 'WRONG'}, "
          f"gradients {'ok' if worst < 1e-3 else 'WRONG'} (worst {worst:.1e}, {where}), "
          f"running statistics {'ok' if stat_error < 1e-5 else 'WRONG'}")
    return 0 if loss_error < 1e-5 and worst < 1e-3 and stat_error < 1e-5 else 1


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2], sys.argv[4] if len(sys.argv) > 4 and sys.argv[3] == "--fault" else None)
    else:
        sys.exit(check(sys.argv[2]))
