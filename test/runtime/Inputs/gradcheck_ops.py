"""Per-op gradient check: every differentiable nn op's gradient, computed by
graphc's autodiff and run through the real path (graphc compile, graphrun on
the CPU: generated kernels and oneDNN, float32), against central finite
differences of a float64 NumPy reference of the same model.

Each case is a tiny model around the op under test: images [4, 2, 5, 5] go
through parameterized convolutions into the op, then flatten, a linear layer
and softmax cross-entropy over 3 classes, so every parameter's gradient flows
through the op's backward. The plan is compiled with plain SGD at lr 1 and no
weight decay, so one step moves each parameter by exactly -gradient: the
gradient is read back from the checkpoints before and after it.

  gradcheck_ops.py WORKDIR [CASE...] [--device D] [--target T]
                   [--compile-only | --precompiled]

--device runs graphrun on that device (default: graphrun's auto). A GPU
machine has no MLIR, so tools/gpu-check compiles the cases here with
--compile-only --target=all and runs them there with --precompiled.

Prints one line per case and exits 1 if any parameter element differs from the
reference by more than 1e-3 relative (with a floor of 1e-4 of the tensor's
largest gradient, below which float32's rounding of `p - g` dominates).
"""
import argparse
import math
import os
import struct
import subprocess
import sys

import numpy as np

import safetensors_tool  # the format, shared with the checkpoint tests

N, C, H, W, K = 4, 2, 5, 5, 3
REL, FLOOR = 1e-3, 1e-4
GATHER = [3, 0, 3, 5, 1, 1, 2, 0, 4, 5, 3, 2, 0, 1, 4]


# ---------------------------------------------------------------- references


def pad4(x, pad, value=0.0):
    t, b, l, r = pad
    return np.pad(x, ((0, 0), (0, 0), (t, b), (l, r)), constant_values=value)


def conv2d(x, w, bias=None, strides=(1, 1), pad=(0, 0, 0, 0), dil=(1, 1), groups=1):
    x = pad4(x, pad)
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh = (h - dil[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (wd - dil[1] * (kw - 1) - 1) // strides[1] + 1
    y = np.zeros((n, o, oh, ow))
    og = o // groups
    for g in range(groups):
        xs = x[:, g * cg:(g + 1) * cg]
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i * dil[0]:i * dil[0] + strides[0] * (oh - 1) + 1:strides[0],
                           j * dil[1]:j * dil[1] + strides[1] * (ow - 1) + 1:strides[1]]
                y[:, g * og:(g + 1) * og] += np.einsum("nchw,oc->nohw", patch,
                                                       w[g * og:(g + 1) * og, :, i, j])
    if bias is not None:
        y += bias[None, :, None, None]
    return y


def pool(x, window, strides, pad, kind, exclude_padding=False):
    fill = -np.inf if kind == "max" else 0.0
    xp = pad4(x, pad, fill)
    ones = pad4(np.ones_like(x), pad, 0.0)
    n, c, h, w = xp.shape
    oh = (h - window[0]) // strides[0] + 1
    ow = (w - window[1]) // strides[1] + 1
    y = np.zeros((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            cell = xp[:, :, i * strides[0]:i * strides[0] + window[0],
                      j * strides[1]:j * strides[1] + window[1]]
            if kind == "max":
                y[:, :, i, j] = cell.max(axis=(2, 3))
            else:
                count = (ones[:, :, i * strides[0]:i * strides[0] + window[0],
                              j * strides[1]:j * strides[1] + window[1]].sum(axis=(2, 3))
                         if exclude_padding else window[0] * window[1])
                y[:, :, i, j] = cell.sum(axis=(2, 3)) / count
    return y


def batch_norm(x, gamma, beta, eps=1e-5):
    axes = (0, 2, 3) if x.ndim == 4 else (0,)
    shape = (1, -1, 1, 1) if x.ndim == 4 else (1, -1)
    mean = x.mean(axis=axes, keepdims=True)
    var = x.var(axis=axes, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma.reshape(shape) + beta.reshape(shape)


def cross_entropy(logits, labels, smoothing=0.0):
    z = logits - logits.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    q = np.full(logits.shape, smoothing / logits.shape[1])
    q[np.arange(len(labels)), labels] += 1.0 - smoothing
    return -(q * logp).sum(axis=1).mean()


def erf(x):
    return np.vectorize(math.erf)(x)


def softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def layer_norm(x, axes, eps=1e-5):
    c = x - x.mean(axis=axes, keepdims=True)
    return c / np.sqrt((c * c).mean(axis=axes, keepdims=True) + eps)


# --------------------------------------------------------------------- cases
# Each case: parameters {name: shape}, the MLIR of the op under test from
# %a and %b ([N, 3, 5, 5], convolutions of the images by @wa and @wb) to %y,
# and the same in NumPy. `t(shape)` spells a tensor type with a dynamic batch.


def t(shape):
    return "tensor<?x" + "x".join(str(d) for d in shape[1:]) + "xf32>"


A = (N, 3, H, W)


def attention_lines(transposed_k):
    """softmax(a b^T) b over groups of [5, 5] (the batch merged with the
    channels), as graphc import writes attention; with transposed_k, k is
    transposed by an op first (nn.attention's transpose_k)."""
    if transposed_k:
        scores = ["%kt = nn.transpose %kb permutation [0, 2, 1] : tensor<?x5x5xf32>",
                  "%s = nn.matmul %qa, %kt : tensor<?x5x5xf32>, tensor<?x5x5xf32>"]
    else:
        scores = ["%s = nn.matmul %qa, %kb transpose_b : tensor<?x5x5xf32>, tensor<?x5x5xf32>"]
    return [
        f"%qa = nn.reshape %a shape [-1, 5, 5] : {t(A)}",
        f"%kb = nn.reshape %b shape [-1, 5, 5] : {t(A)}"] + scores + [
        "%s4 = nn.reshape %s shape [-1, 3, 5, 5] : tensor<?x5x5xf32>"] + softmax_times_kb("s4")


def softmax_times_kb(x):
    """softmax(%x) over its last dim as graphc import writes it, times %kb,
    into %y: the end of an attention over groups of [5, 5]."""
    return [
        f"%m = nn.reduce_max %{x} dims [3] keep_dims : {t(A)}",
        f"%mb = nn.broadcast %m to %{x} dims [0, 1, 2, 3] : {t((N, 3, 5, 1))}, {t(A)}",
        f"%d = nn.sub %{x}, %mb : {t(A)}", f"%e = nn.exp %d : {t(A)}",
        f"%z = nn.reduce_sum %e dims [3] keep_dims : {t(A)}",
        f"%zb = nn.broadcast %z to %e dims [0, 1, 2, 3] : {t((N, 3, 5, 1))}, {t(A)}",
        f"%p = nn.div %e, %zb : {t(A)}",
        f"%p3 = nn.reshape %p shape [-1, 5, 5] : {t(A)}",
        "%o = nn.matmul %p3, %kb : tensor<?x5x5xf32>, tensor<?x5x5xf32>",
        "%y = nn.reshape %o shape [-1, 3, 5, 5] : tensor<?x5x5xf32>"]


def attention_bias_lines():
    """attention_lines' product plus Swin's two biases: @rel per head
    ([3, 5, 5], broadcast from rank 3) and @mask per window, with the
    groups split as [N / 2 images, 2 windows, 3 heads] ([1, 2, 1, 5, 5], on
    the add's left): nn.attention biases of strides 1 and 3. Both are
    parameters here, so both gradients (the sums over the groups that read
    each slice) are checked."""
    a5 = t((N // 2, 2, 3, 5, 5))
    return [
        f"%qa = nn.reshape %a shape [-1, 5, 5] : {t(A)}",
        f"%kb = nn.reshape %b shape [-1, 5, 5] : {t(A)}",
        "%s = nn.matmul %qa, %kb transpose_b : tensor<?x5x5xf32>, tensor<?x5x5xf32>",
        "%s4 = nn.reshape %s shape [-1, 3, 5, 5] : tensor<?x5x5xf32>",
        "%rel = nn.load @rel : tensor<3x5x5xf32>",
        f"%relb = nn.broadcast %rel to %s4 dims [1, 2, 3] : tensor<3x5x5xf32>, {t(A)}",
        f"%sr = nn.add %s4, %relb : {t(A)}",
        f"%s5 = nn.reshape %sr shape [-1, 2, 3, 5, 5] : {t(A)}",
        "%mask = nn.load @mask : tensor<1x2x1x5x5xf32>",
        f"%maskb = nn.broadcast %mask to %s5 dims [0, 1, 2, 3, 4] : tensor<1x2x1x5x5xf32>, {a5}",
        f"%sm = nn.add %maskb, %s5 : {a5}",
        f"%x = nn.reshape %sm shape [-1, 3, 5, 5] : {a5}"] + softmax_times_kb("x")


def attention_bias_reference(p, a, b):
    s = a @ b.transpose(0, 1, 3, 2) + p["rel"][None]
    s = (s.reshape(N // 2, 2, 3, 5, 5) + p["mask"]).reshape(N, 3, 5, 5)
    return softmax(s, 3) @ b


CASES = {
    "relu": ({}, lambda: [f"%y = nn.relu %a : {t(A)}"],
             lambda p, a, b: np.maximum(a, 0)),
    "add_sub_mul_neg": ({}, lambda: [
        f"%s = nn.sub %a, %b : {t(A)}", f"%n = nn.neg %b : {t(A)}",
        f"%m = nn.mul %s, %n : {t(A)}", f"%y = nn.add %m, %a : {t(A)}"],
        lambda p, a, b: (a - b) * -b + a),
    "exp_log_div_rsqrt": ({}, lambda: [
        f"%ea = nn.exp %a : {t(A)}", f"%eb = nn.exp %b : {t(A)}",
        f"%s = nn.add %ea, %eb : {t(A)}", f"%l = nn.log %s : {t(A)}",
        f"%r = nn.rsqrt %s : {t(A)}", f"%y = nn.div %l, %r : {t(A)}"],
        lambda p, a, b: np.log(np.exp(a) + np.exp(b)) * np.sqrt(np.exp(a) + np.exp(b))),
    "sigmoid": ({}, lambda: [
        f"%s = nn.sigmoid %a : {t(A)}", f"%y = nn.mul %s, %b : {t(A)}"],
        lambda p, a, b: b / (1 + np.exp(-a))),
    "erf": ({}, lambda: [
        f"%e = nn.erf %a : {t(A)}", f"%y = nn.mul %e, %b : {t(A)}"],
        lambda p, a, b: erf(a) * b),
    # Softmax and layer norm as graphc import writes them (OnnxTransformer.cpp).
    "softmax_layer_norm": ({}, lambda: [
        f"%m = nn.reduce_max %a dims [3] keep_dims : {t(A)}",
        f"%mb = nn.broadcast %m to %a dims [0, 1, 2, 3] : {t((N, 3, 5, 1))}, {t(A)}",
        f"%d = nn.sub %a, %mb : {t(A)}", f"%e = nn.exp %d : {t(A)}",
        f"%s = nn.reduce_sum %e dims [3] keep_dims : {t(A)}",
        f"%sb = nn.broadcast %s to %e dims [0, 1, 2, 3] : {t((N, 3, 5, 1))}, {t(A)}",
        f"%sm = nn.div %e, %sb : {t(A)}",
        f"%mu = nn.reduce_mean %b dims [2, 3] keep_dims : {t(A)}",
        f"%mub = nn.broadcast %mu to %b dims [0, 1, 2, 3] : {t((N, 3, 1, 1))}, {t(A)}",
        f"%c = nn.sub %b, %mub : {t(A)}", f"%c2 = nn.mul %c, %c : {t(A)}",
        f"%v = nn.reduce_mean %c2 dims [2, 3] keep_dims : {t(A)}",
        f"%vb = nn.broadcast %v to %b dims [0, 1, 2, 3] : {t((N, 3, 1, 1))}, {t(A)}",
        "%eps = nn.constant dense<1.0e-05> : tensor<f32>",
        f"%epsb = nn.broadcast %eps to %b dims [] : tensor<f32>, {t(A)}",
        f"%ve = nn.add %vb, %epsb : {t(A)}", f"%r = nn.rsqrt %ve : {t(A)}",
        f"%ln = nn.mul %c, %r : {t(A)}", f"%y = nn.mul %sm, %ln : {t(A)}"],
        lambda p, a, b: softmax(a, 3) * layer_norm(b, (2, 3))),
    # Attention's batched product: the batch merged with the channels.
    "batched_matmul": ({}, lambda: [
        f"%ra = nn.reshape %a shape [-1, 5, 5] : {t(A)}",
        f"%rb = nn.reshape %b shape [-1, 5, 5] : {t(A)}",
        "%p = nn.matmul %ra, %rb transpose_b : tensor<?x5x5xf32>, tensor<?x5x5xf32>",
        "%y = nn.reshape %p shape [-1, 3, 5, 5] : tensor<?x5x5xf32>"],
        lambda p, a, b: a @ b.transpose(0, 1, 3, 2)),
    # A table's rows picked by constant indices (repeats, one row unused):
    # the gradient is a scatter-add.
    "gather": ({"table": (7, 5)}, lambda: [
        "%tb = nn.load @table : tensor<7x5xf32>",
        f"%ix = nn.constant dense<{GATHER}> : tensor<15xi32>",
        "%g = nn.gather %tb, %ix : tensor<7x5xf32>, tensor<15xi32>",
        "%r = nn.reshape %g shape [3, 5, 5] : tensor<15x5xf32>",
        f"%gb = nn.broadcast %r to %a dims [1, 2, 3] : tensor<3x5x5xf32>, {t(A)}",
        f"%y = nn.mul %a, %gb : {t(A)}"],
        lambda p, a, b: a * p["table"][GATHER].reshape(3, 5, 5)[None]),
    # Attention, fused by graphc-fuse-attention (nn.attention and its
    # backward on the CPU), with k as [G, Lk, D] and as [G, D, Lk].
    "attention": ({}, lambda: attention_lines(transposed_k=False),
                  lambda p, a, b: softmax(a @ b.transpose(0, 1, 3, 2), 3) @ b),
    "attention_transposed_k": ({}, lambda: attention_lines(transposed_k=True),
                               lambda p, a, b: softmax(a @ b.transpose(0, 1, 3, 2), 3) @ b),
    "attention_bias": ({"rel": (3, 5, 5), "mask": (1, 2, 1, 5, 5)}, attention_bias_lines,
                       attention_bias_reference),
    "concat_slice": ({}, lambda: [
        f"%c = nn.concat %a, %b dim 1 : {t(A)}, {t(A)}",
        f"%s = nn.slice %c dim 1 start 2 size 3 : {t((N, 6, 5, 5))}",
        f"%y = nn.slice %s dim 3 start 1 size 3 : {t((N, 3, 5, 5))}"],
        lambda p, a, b: np.concatenate([a, b], axis=1)[:, 2:5, :, 1:4]),
    "split_shuffle": ({}, lambda: [
        f"%c = nn.concat %a, %b dim 1 : {t(A)}, {t(A)}",
        f"%l = nn.slice %c dim 1 start 0 size 3 : {t((N, 6, 5, 5))}",
        f"%r = nn.slice %c dim 1 start 3 size 3 : {t((N, 6, 5, 5))}",
        f"%y = nn.concat %r, %l, %a dim 2 : {t(A)}, {t(A)}, {t(A)}"],
        lambda p, a, b: np.concatenate([b, a, a], axis=2)),
    # Three slices of one tensor, two overlapping: autodiff sums the slice
    # rule's zero-padded concats piece by piece (a packed q/k/v projection's
    # gradient is one concat), splitting zero pieces where the windows cut.
    "packed_slices": ({}, lambda: [
        f"%c = nn.concat %a, %b dim 1 : {t(A)}, {t(A)}",
        f"%q = nn.slice %c dim 1 start 0 size 2 : {t((N, 6, 5, 5))}",
        f"%k = nn.slice %c dim 1 start 2 size 2 : {t((N, 6, 5, 5))}",
        f"%v = nn.slice %c dim 1 start 1 size 2 : {t((N, 6, 5, 5))}",
        f"%p = nn.mul %q, %k : {t((N, 2, 5, 5))}",
        f"%y = nn.concat %p, %v dim 1 : {t((N, 2, 5, 5))}, {t((N, 2, 5, 5))}"],
        lambda p, a, b: (lambda c: np.concatenate([c[:, 0:2] * c[:, 2:4], c[:, 1:3]],
                                                  axis=1))(np.concatenate([a, b], axis=1))),
    "max": ({}, lambda: [f"%y = nn.max %a, %b : {t(A)}"],
            lambda p, a, b: np.maximum(a, b)),
    "select_cmp": ({}, lambda: [
        f"%c = nn.cmp gt, %a, %b : {t(A)}",
        f"%y = nn.select %c, %b, %a : tensor<?x3x5x5xi1>, {t(A)}"],
        lambda p, a, b: np.where(a > b, b, a)),
    "broadcast": ({"scale": (3,), "shift": (3,)}, lambda: [
        "%sc = nn.load @scale : tensor<3xf32>", "%sh = nn.load @shift : tensor<3xf32>",
        f"%bs = nn.broadcast %sc to %a dims [1] : tensor<3xf32>, {t(A)}",
        f"%bh = nn.broadcast %sh to %a dims [1] : tensor<3xf32>, {t(A)}",
        f"%m = nn.mul %a, %bs : {t(A)}", f"%y = nn.add %m, %bh : {t(A)}"],
        lambda p, a, b: a * p["scale"][None, :, None, None] + p["shift"][None, :, None, None]),
    "reduce_sum_mean": ({}, lambda: [
        f"%r = nn.reduce_sum %a dims [2] : {t(A)}",
        f"%s = nn.reduce_mean %b dims [3] : {t(A)}",
        f"%y = nn.mul %r, %s : {t((N, 3, 5))}"],
        lambda p, a, b: a.sum(axis=2) * b.mean(axis=3)),
    "reduce_max_keep_dims": ({}, lambda: [
        f"%r = nn.reduce_max %a dims [2, 3] keep_dims : {t(A)}",
        f"%y = nn.add %r, %r : {t((N, 3, 1, 1))}"],
        lambda p, a, b: 2 * a.max(axis=(2, 3), keepdims=True)),
    "conv2d_strided_dilated_grouped": ({"g": (3, 1, 3, 3), "gb": (3,)}, lambda: [
        "%g = nn.load @g : tensor<3x1x3x3xf32>", "%gb = nn.load @gb : tensor<3xf32>",
        f"%y = nn.conv2d %a, %g, %gb strides [2, 1] padding [2, 1, 2, 0] dilations [2, 2] "
        f"groups 3 : {t(A)}, tensor<3x1x3x3xf32>, tensor<3xf32>"],
        lambda p, a, b: conv2d(a, p["g"], p["gb"], (2, 1), (2, 1, 2, 0), (2, 2), 3)),
    "batch_norm": ({"gamma": (3,), "beta": (3,)}, lambda: [
        "%ga = nn.load @gamma : tensor<3xf32>", "%be = nn.load @beta : tensor<3xf32>",
        "%rm = nn.load @running_mean : tensor<3xf32>",
        "%rv = nn.load @running_var : tensor<3xf32>",
        f"%y = nn.batch_norm %a, %ga, %be, %rm, %rv epsilon 1.000000e-05 momentum "
        f"1.000000e-01 : {t(A)}, tensor<3xf32>"],
        lambda p, a, b: batch_norm(a, p["gamma"], p["beta"])),
    "max_pool2d": ({}, lambda: [
        f"%y = nn.max_pool2d %a window [3, 3] strides [2, 2] padding [1, 1, 1, 1] : {t(A)}"],
        lambda p, a, b: pool(a, (3, 3), (2, 2), (1, 1, 1, 1), "max")),
    "avg_pool2d": ({}, lambda: [
        f"%y = nn.avg_pool2d %a window [2, 2] strides [1, 1] padding [1, 1, 1, 1] : {t(A)}"],
        lambda p, a, b: pool(a, (2, 2), (1, 1), (1, 1, 1, 1), "avg")),
    "avg_pool2d_exclude_padding": ({}, lambda: [
        f"%y = nn.avg_pool2d %a window [3, 3] strides [2, 2] padding [1, 1, 1, 1] "
        f"exclude_padding : {t(A)}"],
        lambda p, a, b: pool(a, (3, 3), (2, 2), (1, 1, 1, 1), "avg", True)),
    "global_avg_pool": ({}, lambda: [f"%y = nn.global_avg_pool %a : {t(A)}"],
                        lambda p, a, b: a.mean(axis=(2, 3))),
    "reshape": ({}, lambda: [f"%y = nn.reshape %a shape [-1, 15, 5] : {t(A)}"],
                lambda p, a, b: a.reshape(-1, 15, 5)),
    "linear_matmul": ({"h": (6, 75), "m": (5, 6)}, lambda: [
        f"%f = nn.flatten %a start_dim 1 : {t(A)}",
        "%h = nn.load @h : tensor<6x75xf32>", "%m = nn.load @m : tensor<5x6xf32>",
        f"%l = nn.linear %f, %h : {t((N, 75))}, tensor<6x75xf32>",
        f"%y = nn.matmul %l, %m transpose_b : {t((N, 6))}, tensor<5x6xf32>"],
        lambda p, a, b: (a.reshape(N, 75) @ p["h"].T) @ p["m"].T),
}
# The loss itself, with label smoothing, checked through the plain relu case.
SMOOTHING = {"softmax_cross_entropy_smoothing": 0.1}
CASES["softmax_cross_entropy_smoothing"] = CASES["relu"]


def model_text(case):
    params, mlir, _ = CASES[case]
    body = mlir()
    # The op's output shape, from the reference.
    rng = np.random.default_rng(0)
    fake = {k: rng.normal(size=s) for k, s in params.items()}
    out = CASES[case][2](fake, np.ones(A), np.ones(A)).shape
    features = int(np.prod(out[1:]))
    smoothing = SMOOTHING.get(case, 0.0)
    uses_b = any("%b," in l or "%b " in l or l.endswith("%b") for l in body)
    decls = ["nn.parameter @wa : tensor<3x2x3x3xf32> = zeros"]
    if uses_b:
        decls.append("nn.parameter @wb : tensor<3x2x3x3xf32> = zeros")
    decls += [f"nn.parameter @{k} : tensor<{'x'.join(map(str, s))}xf32> = zeros"
              for k, s in params.items()]
    if case == "batch_norm":
        decls += ["nn.state @running_mean : tensor<3xf32> = zeros",
                  "nn.state @running_var : tensor<3xf32> = ones"]
    decls += [f"nn.parameter @fc.weight : tensor<{K}x{features}xf32> = zeros",
              f"nn.parameter @fc.bias : tensor<{K}xf32> = zeros"]
    lines = [
        f"%wa = nn.load @wa : tensor<3x2x3x3xf32>",
        f"%a = nn.conv2d %images, %wa padding [1, 1, 1, 1] : {t((N, C, H, W))}, tensor<3x2x3x3xf32>",
    ]
    if uses_b:
        lines += [
            f"%wb = nn.load @wb : tensor<3x2x3x3xf32>",
            f"%b = nn.conv2d %images, %wb padding [1, 1, 1, 1] : {t((N, C, H, W))}, tensor<3x2x3x3xf32>",
        ]
    lines += body + [
        f"%flat = nn.flatten %y start_dim 1 : {t(out)}" if len(out) > 2
        else f"%flat = nn.reshape %y shape [-1, {features}] : {t(out)}",
    ]
    lines += [
        f"%fw = nn.load @fc.weight : tensor<{K}x{features}xf32>",
        f"%fb = nn.load @fc.bias : tensor<{K}xf32>",
        f"%logits = nn.linear %flat, %fw, %fb : {t((N, features))}, tensor<{K}x{features}xf32>, tensor<{K}xf32>",
        f"%loss = nn.softmax_cross_entropy %logits, %labels label_smoothing {smoothing:e} : {t((N, K))}, tensor<?xi32>",
        "return %loss : tensor<f32>",
    ]
    text = "module {\n" + "".join(f"  {d}\n" for d in decls)
    text += f"  func.func @forward(%images: {t((N, C, H, W))}, %labels: tensor<?xi32>) -> tensor<f32> {{\n"
    text += "".join(f"    {l}\n" for l in lines) + "  }\n}\n"
    return text, params, features, uses_b


def reference_loss(case, p, x, y):
    a = conv2d(x, p["wa"], pad=(1, 1, 1, 1))
    b = conv2d(x, p["wb"], pad=(1, 1, 1, 1)) if "wb" in p else None
    out = CASES[case][2](p, a, b)
    logits = out.reshape(N, -1) @ p["fc.weight"].T + p["fc.bias"]
    return cross_entropy(logits, y, SMOOTHING.get(case, 0.0))


# ------------------------------------------------------------- file formats


def save_npy(path, array):
    descr = {np.dtype("float32"): "<f4", np.dtype("int32"): "<i4"}[array.dtype]
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (
        descr, ", ".join(str(d) for d in array.shape) + ("," if array.ndim == 1 else ""))
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(np.ascontiguousarray(array).tobytes())


def save_safetensors(path, tensors):
    header, body, offset = {}, b"", 0
    for name, value in tensors.items():
        raw = value.tobytes()
        dtype = {np.dtype("float32"): "F32", np.dtype("int64"): "I64"}[value.dtype]
        header[name] = {"dtype": dtype, "shape": list(value.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        body += raw
        offset += len(raw)
    safetensors_tool.write(path, header, body)


def load_safetensors(path):
    header, body = safetensors_tool.read(path)
    out = {}
    for name, info in safetensors_tool.tensors(header).items():
        dtype = {"F32": np.float32, "I64": np.int64}[info["dtype"]]
        out[name] = np.frombuffer(body[slice(*info["data_offsets"])], dtype).reshape(info["shape"])
    return out


# ------------------------------------------------------------------- driver


def check(case, work, tools, args):
    d = os.path.join(work, case)
    os.makedirs(d, exist_ok=True)
    text, params, features, uses_b = model_text(case)
    if not args.precompiled:
        with open(os.path.join(d, "model.mlir"), "w") as f:
            f.write(text)
        subprocess.run([os.path.join(tools, "graphc"), "compile", os.path.join(d, "model.mlir"),
                        "--batch-size", str(N), "--optimizer", "sgd", "--lr", "1",
                        "--weight-decay", "0", "--target", args.target,
                        "-o", os.path.join(d, "model.plan")],
                       check=True, stdout=subprocess.DEVNULL)
    if args.compile_only:
        print(f"compiled: {case}")
        return True
    rng = np.random.default_rng(sum(map(ord, case)))
    x = rng.normal(size=(N, C, H, W)).astype(np.float32)
    y = rng.integers(0, K, size=N).astype(np.int32)
    shapes = {"wa": (3, C, 3, 3), **({"wb": (3, C, 3, 3)} if uses_b else {}), **params,
              "fc.weight": (K, features), "fc.bias": (K,)}
    p = {k: (rng.normal(size=s) * (0.5 if k != "fc.weight" else 1 / np.sqrt(features)))
         .astype(np.float32) for k, s in shapes.items()}
    if "gamma" in p:
        p["gamma"] = (1 + 0.3 * rng.normal(size=3)).astype(np.float32)
    state = dict(p)
    state["graphc.step"] = np.zeros((), np.int64)
    if case == "batch_norm":
        state["running_mean"] = np.zeros(3, np.float32)
        state["running_var"] = np.ones(3, np.float32)
    save_npy(os.path.join(d, "x.npy"), x)
    save_npy(os.path.join(d, "y.npy"), y)
    save_safetensors(os.path.join(d, "before.st"), state)
    # On CUDA, cuDNN's deterministic algorithms without FFT or Winograd: the
    # check compares against float64, not against another GPU run.
    device = (["--device", args.device] if args.device else []) + \
        (["--deterministic"] if args.device == "cuda" else [])
    subprocess.run([os.path.join(tools, "graphrun"), os.path.join(d, "model.plan"),
                    "--data", f"npy:{d}/x.npy,{d}/y.npy", "--steps", "1", "--warmup", "0",
                    "--resume", os.path.join(d, "before.st"),
                    "--save", os.path.join(d, "after.st")] + device,
                   check=True, stdout=subprocess.DEVNULL)
    after = load_safetensors(os.path.join(d, "after.st"))

    # lr 1: the step moved each parameter by -gradient (as float32 arithmetic).
    p64 = {k: v.astype(np.float64) for k, v in p.items()}
    worst, failures = 0.0, []
    for name in shapes:
        got = p64[name] - after[name].astype(np.float64)
        want = np.zeros_like(got)
        flat = p64[name].reshape(-1)
        for i in range(flat.size):
            h = 1e-5 * max(1.0, abs(flat[i]))
            saved = flat[i]
            flat[i] = saved + h
            up = reference_loss(case, p64, x.astype(np.float64), y)
            flat[i] = saved - h
            down = reference_loss(case, p64, x.astype(np.float64), y)
            flat[i] = saved
            want.reshape(-1)[i] = (up - down) / (2 * h)
        scale = np.abs(want).max()
        # float32 `p - g` loses what lies below p's last bit.
        ulp = np.spacing(np.abs(p[name]).astype(np.float32)).astype(np.float64)
        bound = REL * np.maximum(np.abs(want), FLOOR / REL * scale) + ulp
        err = np.abs(got - want) / np.maximum(np.abs(want), FLOOR / REL * scale + 1e-30)
        worst = max(worst, float(err.max()))
        bad = np.argwhere(np.abs(got - want) > bound)
        for index in bad[:3]:
            index = tuple(int(i) for i in index)
            failures.append(f"{name}{list(index)}: autodiff {got[index]:.6g}, "
                            f"float64 differences {want[index]:.6g}")
    status = "ok" if not failures else "FAIL"
    count = sum(int(np.prod(s)) for s in shapes.values())
    print(f"{status}: {case}: {count} gradient elements of {len(shapes)} tensors, "
          f"worst relative error {worst:.1e}")
    for f in failures:
        print(f"  {f}")
    return not failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("work")
    parser.add_argument("cases", nargs="*")
    parser.add_argument("--device", default="")
    parser.add_argument("--target", default="cpu")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--compile-only", action="store_true")
    mode.add_argument("--precompiled", action="store_true")
    args = parser.parse_args()
    tools = os.environ.get("GRAPHC_TOOLS", "")
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        sys.exit(f"gradcheck_ops.py: unknown case(s) {', '.join(unknown)}")
    cases = args.cases or list(CASES)
    results = [check(case, args.work, tools, args) for case in cases]
    if args.compile_only:
        print(f"compiled {len(results)} cases")
        return
    print(f"{sum(results)} of {len(results)} ops match float64 finite differences")
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
