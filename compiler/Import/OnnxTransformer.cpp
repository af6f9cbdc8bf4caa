//===- OnnxTransformer.cpp - the ops vision transformers add ---------------===//
//
// ViT's and ConvNeXt's exports beyond the convolutional zoo: MatMul (batched,
// a 2-D weight or two activations), Softmax, LayerNormalization, Erf (GELU),
// Expand (the class token), Gather of constant indices, Squeeze and Unsqueeze, Cast
// between float types, and the float scalars exporters compute from shapes
// (attention's 1 / sqrt(head_dim) is Sqrt(Cast(Slice(Shape(q))))), folded
// here. Softmax and layer norm become the reductions and elementwise ops the
// fuser already groups, statistics in fp32 (graphc-mixed-precision keeps
// reductions there).
//
//===----------------------------------------------------------------------===//

#include "compiler/Import/Importer.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <utility>

namespace graphc {
namespace onnx_import {

namespace {

std::string shapeString(ArrayRef<int64_t> shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    text += (i ? ", " : "") + (shape[i] < 0 ? std::string("?") : std::to_string(shape[i]));
  return text + "]";
}

} // namespace

bool Importer::foldsToScalar(const Node &n) {
  const std::string &op = n.opType;
  if (op == "Cast") {
    // An integer folded from shapes, as a float.
    auto to = intAttr(n, "to", 0);
    if (!to || (*to != 1 && *to != 11) || n.inputs.size() != 1)
      return false;
    auto ints = knownInts(n.inputs[0]);
    return (ints && ints->size() == 1) || knownScalars.count(n.inputs[0]);
  }
  static const char *const folded[] = {"Sqrt", "Div", "Mul", "Add", "Sub", "Reciprocal"};
  if (std::none_of(std::begin(folded), std::end(folded), [&](const char *f) { return op == f; }))
    return false;
  // Constants and folded scalars of rank 0 or 1 only (a higher rank would
  // raise the rank of what they meet), at least one of them float.
  bool anyFloat = false;
  for (const std::string &input : n.inputs) {
    if (input.empty() || values.count(input) || !scalar(input, 1))
      return false;
    const Tensor *t = constants.count(input)      ? constants[input]
                      : initializers.count(input) ? initializers[input]
                                                  : nullptr;
    anyFloat = anyFloat || knownScalars.count(input) ||
               (t && (t->type == ElementType::Float || t->type == ElementType::Double));
  }
  return anyFloat && !n.inputs.empty();
}

bool Importer::foldScalar(const Node &n) {
  const std::string &op = n.opType;
  double result = 0;
  if (op == "Cast") {
    if (!knownAttributes(n, {"to", "saturate"}))
      return false;
    if (auto ints = knownInts(n.inputs[0])) {
      if (ints->front() == kBatch)
        return failBatch("the batch size as a number, which graphc leaves open until compile");
      result = static_cast<double>(ints->front());
    } else {
      result = knownScalars[n.inputs[0]];
    }
    // Rounded as the cast rounds (float32 holds integers exactly only to 2^24).
    if (intAttr(n, "to", 1) == 1)
      result = static_cast<double>(static_cast<float>(result));
  } else {
    if (!knownAttributes(n, {}))
      return false;
    const size_t arity = op == "Sqrt" || op == "Reciprocal" ? 1 : 2;
    if (n.inputs.size() != arity)
      return fail("expected " + std::to_string(arity) + " inputs");
    double x = *scalar(n.inputs[0]), y = arity == 2 ? *scalar(n.inputs[1]) : 0;
    result = op == "Sqrt"         ? std::sqrt(x)
             : op == "Reciprocal" ? 1 / x
             : op == "Div"        ? x / y
             : op == "Mul"        ? x * y
             : op == "Add"        ? x + y
                                  : x - y;
  }
  if (!std::isfinite(result))
    return fail("constant arithmetic gives a value that is not finite");
  if (n.outputs.empty() || n.outputs[0].empty())
    return true;
  if (values.count(n.outputs[0]) || !knownScalars.emplace(n.outputs[0], result).second)
    return fail("output '" + onnx_model::shown(n.outputs[0]) + "' is defined twice");
  return true;
}

Value Importer::reshaped(Value x, ArrayRef<int64_t> shape) {
  auto type = llvm::cast<RankedTensorType>(x.getType());
  if (type.getShape() == shape)
    return x;
  SmallVector<int64_t> target(shape);
  for (int64_t &d : target)
    if (ShapedType::isDynamic(d))
      d = -1;
  return tryCreate<nn::ReshapeOp>(x, b.getDenseI64ArrayAttr(target));
}

Value Importer::operand(const std::string &name) {
  if (values.count(name))
    return values[name];
  return activation(name);
}

/// The input of `x`'s nn.transpose when it swaps the last two dims and keeps
/// the rest, else null. PyTorch exports `x @ w.T` (a linear on more than two
/// dims) as MatMul(x, Transpose(w)) and `q @ k.transpose(-2, -1)` likewise: the
/// product reads the untransposed operand with its transpose flag instead, so
/// no copy is made in the step and autodiff's gradient needs none either.
static Value swappedLastTwo(Value x) {
  auto transpose = x.getDefiningOp<nn::TransposeOp>();
  if (!transpose)
    return nullptr;
  ArrayRef<int64_t> perm = transpose.getPermutation();
  const int64_t rank = static_cast<int64_t>(perm.size());
  if (rank < 2 || perm[rank - 2] != rank - 1 || perm[rank - 1] != rank - 2)
    return nullptr;
  for (int64_t d = 0; d < rank - 2; ++d)
    if (perm[d] != d)
      return nullptr;
  return transpose.getInput();
}

bool Importer::matmul(const Node &n) {
  if (!knownAttributes(n, {}))
    return false;
  if (n.inputs.size() != 2)
    return fail("expected two inputs");
  Value a = operand(n.inputs[0]), c = operand(n.inputs[1]);
  if (!a || !c)
    return false;
  auto at = llvm::cast<RankedTensorType>(a.getType());
  auto ct = llvm::cast<RankedTensorType>(c.getType());
  if (at.getRank() < 2 || ct.getRank() < 2)
    return fail("a vector operand (rank 1) is not supported");
  const int64_t m = at.getDimSize(at.getRank() - 2), k = at.getShape().back();
  const int64_t n2 = ct.getShape().back();
  if (ShapedType::isDynamic(k) || ShapedType::isDynamic(ct.getDimSize(ct.getRank() - 2)) ||
      ShapedType::isDynamic(n2) || (ct.getRank() == 2 && ct.isDynamicDim(0)))
    return failBatch("it multiplies along the batch, which graphc leaves open until compile");
  auto resultShape = [&](RankedTensorType batchFrom) {
    SmallVector<int64_t> shape(batchFrom.getShape().drop_back(2));
    shape.push_back(m);
    shape.push_back(n2);
    return shape;
  };
  // A transposed operand is read through its transpose flag (above).
  const Value aSwapped = swappedLastTwo(a), cSwapped = swappedLastTwo(c);
  const UnitAttr flagA = aSwapped ? b.getUnitAttr() : UnitAttr();
  const UnitAttr flagC = cSwapped ? b.getUnitAttr() : UnitAttr();
  if (ct.getRank() == 2) {
    // [..., M, K] x [K, N]: the leading dims as rows of one product.
    Value rhs = cSwapped ? cSwapped : c;
    if (at.getRank() == 2)
      return define(n, tryCreate<nn::MatmulOp>(aSwapped ? aSwapped : a, rhs, flagA, flagC));
    Value rows = reshaped(a, {ShapedType::kDynamic, k});
    Value y = rows ? tryCreate<nn::MatmulOp>(rows, rhs, UnitAttr(), flagC) : Value();
    SmallVector<int64_t> shape(at.getShape().drop_back());
    shape.push_back(n2);
    return define(n, y ? reshaped(y, shape) : Value());
  }
  if (at.getRank() != ct.getRank() || at.getShape().drop_back(2) != ct.getShape().drop_back(2))
    return fail("batched operands of shapes " + shapeString(at.getShape()) + " and " +
                shapeString(ct.getShape()) +
                " (graphc takes equal batch dims, or a 2-D right operand)");
  // [..., M, K] x [..., K, N]: the batch dims as one.
  Value a3 = aSwapped ? reshaped(aSwapped, {ShapedType::kDynamic, k, m})
                      : reshaped(a, {ShapedType::kDynamic, m, k});
  const int64_t ck = ct.getDimSize(ct.getRank() - 2);
  Value c3 = !a3       ? Value()
             : cSwapped ? reshaped(cSwapped, {ShapedType::kDynamic, n2, ck})
                        : reshaped(c, {ShapedType::kDynamic, ck, n2});
  Value y = c3 ? tryCreate<nn::MatmulOp>(a3, c3, flagA, flagC) : Value();
  return define(n, y ? reshaped(y, resultShape(at)) : Value());
}

Value Importer::keptReduction(Value x, ArrayRef<int64_t> dims, bool max) {
  auto attr = b.getDenseI64ArrayAttr(dims);
  Value r = max ? tryCreate<nn::ReduceMaxOp>(x, attr, b.getUnitAttr())
                : tryCreate<nn::ReduceMeanOp>(x, attr, b.getUnitAttr());
  if (!r)
    return nullptr;
  // keep_dims leaves size-1 dims: broadcast back over them.
  SmallVector<int64_t> all;
  for (int64_t d = 0; d < llvm::cast<RankedTensorType>(x.getType()).getRank(); ++d)
    all.push_back(d);
  return tryCreate<nn::BroadcastOp>(r, x, b.getDenseI64ArrayAttr(all));
}

bool Importer::softmax(const Node &n) {
  if (!knownAttributes(n, {"axis"}))
    return false;
  Value x = n.inputs.size() == 1 ? activation(n.inputs[0]) : Value();
  if (!x)
    return n.inputs.size() == 1 ? false : fail("expected one input");
  const int64_t rank = llvm::cast<RankedTensorType>(x.getType()).getRank();
  auto axisAttr = intAttr(n, "axis", model.opset >= 13 ? -1 : 1);
  if (!axisAttr)
    return false;
  auto axis = normalizedAxis(*axisAttr, rank);
  // Before opset 13 Softmax flattens from `axis`: the same only for the last.
  if (!axis || (model.opset < 13 && *axis != rank - 1))
    return fail("axis " + std::to_string(*axisAttr) + " of a rank-" + std::to_string(rank) +
                " input is not supported" + (model.opset < 13 ? " before opset 13 (only the last)" : ""));
  auto type = llvm::cast<RankedTensorType>(x.getType());
  if (type.isDynamicDim(*axis))
    return failBatch("a softmax over the batch");
  // e^(x - max) / sum: the max subtracted, as every framework does.
  Value max = keptReduction(x, {*axis}, /*max=*/true);
  Value e = max ? tryCreate<nn::ExpOp>(tryCreate<nn::SubOp>(x, max)) : Value();
  Value sum = e ? tryCreate<nn::ReduceSumOp>(e, b.getDenseI64ArrayAttr({*axis}), b.getUnitAttr())
                : Value();
  SmallVector<int64_t> all;
  for (int64_t d = 0; d < rank; ++d)
    all.push_back(d);
  Value spread = sum ? tryCreate<nn::BroadcastOp>(sum, e, b.getDenseI64ArrayAttr(all)) : Value();
  return define(n, spread ? tryCreate<nn::DivOp>(e, spread) : Value());
}

bool Importer::layerNorm(const Node &n) {
  if (!knownAttributes(n, {"axis", "epsilon", "stash_type"}))
    return false;
  auto axisAttr = intAttr(n, "axis", -1);
  auto stash = intAttr(n, "stash_type", 1);
  if (!axisAttr || !stash)
    return false;
  if (n.inputs.size() < 2 || n.inputs.size() > 3)
    return fail("expected an input, a scale and an optional bias");
  auto epsilon = positiveEpsilon(n);
  if (!epsilon)
    return false;
  Value x = activation(n.inputs[0]);
  if (!x)
    return false;
  auto type = llvm::cast<RankedTensorType>(x.getType());
  const int64_t rank = type.getRank();
  auto axis = normalizedAxis(*axisAttr, rank);
  if (!axis || type.isDynamicDim(*axis))
    return failBatch("axis " + std::to_string(*axisAttr) + " must be a non-batch dim of the rank-" +
                     std::to_string(rank) + " input");
  SmallVector<int64_t> dims, normalized;
  for (int64_t d = *axis; d < rank; ++d) {
    dims.push_back(d);
    normalized.push_back(type.getDimSize(d));
  }
  // Scale and bias: parameters of the normalized shape (ones and zeros
  // when training starts without the file's values).
  auto parameter = [&](const std::string &name, nn::Initializer init) -> Value {
    Value v = channelVector(name, init);
    if (v && llvm::cast<RankedTensorType>(v.getType()).getShape() != ArrayRef(normalized)) {
      fail("'" + onnx_model::shown(name) + "' is not of the normalized shape " +
           shapeString(normalized));
      return nullptr;
    }
    return v;
  };
  Value scale = parameter(n.inputs[1], nn::Initializer::ones);
  Value bias = n.inputs.size() > 2 && !n.inputs[2].empty()
                   ? parameter(n.inputs[2], nn::Initializer::zeros)
                   : Value();
  if (!scale || (n.inputs.size() > 2 && !n.inputs[2].empty() && !bias))
    return false;
  // (x - mean) * rsqrt(mean((x - mean)^2) + eps) * scale + bias: the
  // biased variance, as ONNX and PyTorch define it. The statistics keep the
  // normalized dims as size 1, ONNX's optional Mean and InvStdDev outputs.
  SmallVector<int64_t> all;
  for (int64_t d = 0; d < rank; ++d)
    all.push_back(d);
  auto spread = [&](Value stat) -> Value {
    return stat ? tryCreate<nn::BroadcastOp>(stat, x, b.getDenseI64ArrayAttr(all)) : Value();
  };
  auto reduceDims = b.getDenseI64ArrayAttr(dims);
  Value mean = tryCreate<nn::ReduceMeanOp>(x, reduceDims, b.getUnitAttr());
  Value centered = mean ? tryCreate<nn::SubOp>(x, spread(mean)) : Value();
  Value var = centered ? tryCreate<nn::ReduceMeanOp>(tryCreate<nn::MulOp>(centered, centered),
                                                     reduceDims, b.getUnitAttr())
                       : Value();
  Value eps = var ? scalarLike(*epsilon, var) : Value();
  Value inv = eps ? tryCreate<nn::RsqrtOp>(tryCreate<nn::AddOp>(var, eps)) : Value();
  Value y = inv ? tryCreate<nn::MulOp>(centered, spread(inv)) : Value();
  Value scaleWide = y ? broadcastTo(scale, y) : Value();
  y = scaleWide ? tryCreate<nn::MulOp>(y, scaleWide) : Value();
  if (y && bias) {
    Value biasWide = broadcastTo(bias, y);
    y = biasWide ? tryCreate<nn::AddOp>(y, biasWide) : Value();
  }
  return define(n, y) && define(n, mean, 1) && define(n, inv, 2);
}

bool Importer::expand(const Node &n) {
  if (!knownAttributes(n, {}))
    return false;
  if (n.inputs.size() != 2)
    return fail("expected data and a shape");
  Value x = operand(n.inputs[0]);
  if (!x)
    return false;
  auto shape = knownInts(n.inputs[1]);
  if (!shape)
    return fail("its shape '" + onnx_model::shown(n.inputs[1]) + "' is not known at import");
  auto type = llvm::cast<RankedTensorType>(x.getType());
  if (shape->size() > 8)
    return fail("a shape of more than 8 dims");
  const int64_t rank = std::max<int64_t>(type.getRank(), shape->size());
  // numpy broadcasting of the input's shape and `shape`, right-aligned.
  SmallVector<int64_t> result(rank, 1);
  for (int64_t i = 0; i < rank; ++i) {
    const int64_t fromX = i - (rank - type.getRank()), fromShape = i - (rank - shape->size());
    int64_t have = fromX >= 0 ? type.getDimSize(fromX) : 1;
    int64_t want = fromShape >= 0 ? (*shape)[fromShape] : 1;
    // The batch, or the size the file was exported at standing for it.
    const int64_t exported = options.forward ? 0 : model.inputs.front().dims.front();
    if (want == kBatch || (i == 0 && !options.batch && exported > 1 && want == exported &&
                           have == 1 && fromShape == 0))
      return failBatch("it expands to the batch size, which graphc leaves open until compile");
    if (want == 1)
      want = have;
    if ((want < 1 && !ShapedType::isDynamic(want)) || want > (int64_t{1} << 31) ||
        (have != 1 && have != want))
      return fail("cannot expand " + shapeString(type.getShape()) + " to " +
                  shapeString(*shape));
    result[i] = want;
  }
  if (type.getShape() == ArrayRef(result))
    return define(n, x);
  int64_t count = 1;
  for (int64_t d : result)
    if (!ShapedType::isDynamic(d) && (count *= d) > (int64_t{1} << 24))
      return fail("it expands to more than 2^24 elements (graphc materializes the shape)");
  if (llvm::any_of(result, ShapedType::isDynamic))
    return failBatch("an expand of the open batch");
  // nn.broadcast takes its shape from a tensor: a zero constant of it.
  auto to = RankedTensorType::get(result, type.getElementType());
  Value like = tryCreate<nn::ConstantOp>(DenseElementsAttr::get(to, b.getZeroAttr(type.getElementType())));
  SmallVector<int64_t> dims;
  for (int64_t d = 0; d < type.getRank(); ++d)
    dims.push_back(rank - type.getRank() + d);
  return define(n, like ? tryCreate<nn::BroadcastOp>(x, like, b.getDenseI64ArrayAttr(dims))
                        : Value());
}

bool Importer::gatherOne(const Node &n, const Folded *given) {
  if (!knownAttributes(n, {"axis"}))
    return false;
  auto axisAttr = intAttr(n, "axis", 0);
  if (!axisAttr)
    return false;
  if (n.inputs.size() != 2)
    return fail("expected data and indices");
  if (auto flat = flattenedWithBatch.find(n.inputs[0]); flat != flattenedWithBatch.end()) {
    // A Gather from a vector (the flattened tensor) along its one axis.
    const Folded *indices = given ? given : constantTensor(n.inputs[1]);
    if ((*axisAttr != 0 && *axisAttr != -1) || !indices ||
        (indices->type != ElementType::Int64 && indices->type != ElementType::Int32))
      return fail("a Gather from the reshape to [-1] '" + onnx_model::shown(n.inputs[0]) +
                  "' takes integer constant indices along axis 0");
    return unflatten(n, flat->second, indices);
  }
  Value x = operand(n.inputs[0]);
  if (!x)
    return false;
  auto type = llvm::cast<RankedTensorType>(x.getType());
  auto axis = normalizedAxis(*axisAttr, type.getRank());
  if (!axis)
    return fail("axis " + std::to_string(*axisAttr) + " is outside rank " +
                std::to_string(type.getRank()));
  // The indices: an integer constant of any rank (a Constant, an
  // initializer, or folded at import).
  std::vector<int64_t> indices, indexShape;
  const Folded *t = given ? given : constantTensor(n.inputs[1]);
  if (!t || (t->type != ElementType::Int64 && t->type != ElementType::Int32))
    return fail("its indices must be integer constants");
  indexShape = t->dims;
  for (double v : t->values)
    indices.push_back(std::abs(v) > double(int64_t{1} << 40) ? int64_t{1} << 40
                                                              : static_cast<int64_t>(v));
  if (indices.empty() || indices.size() > (int64_t{1} << 24) ||
      type.getRank() - 1 + static_cast<int64_t>(indexShape.size()) > 8)
    return fail("graphc gathers 1 to 2^24 constant indices, into a result of rank 8 at most");
  if (type.isDynamicDim(*axis))
    return failBatch("it gathers from the batch, which graphc leaves open until compile");
  const int64_t extent = type.getDimSize(*axis);
  for (int64_t &index : indices) {
    if (index < -extent || index >= extent)
      return fail("index " + std::to_string(index) + " is outside dim " +
                  std::to_string(*axis) + " of size " + std::to_string(extent));
    if (index < 0)
      index += extent;
  }
  // The result: the indices' shape in place of `axis` (the dim dropped for
  // a scalar index).
  SmallVector<int64_t> shape(type.getShape().take_front(*axis));
  shape.append(indexShape.begin(), indexShape.end());
  shape.append(type.getShape().begin() + *axis + 1, type.getShape().end());
  // Every index in order (torch.export's as_strided to a contiguous layout:
  // a Gather of arange from the flattened tensor): a reshape.
  bool identity = static_cast<int64_t>(indices.size()) == extent;
  for (size_t i = 0; identity && i < indices.size(); ++i)
    identity = indices[i] == static_cast<int64_t>(i);
  if (identity)
    return define(n, reshaped(x, shape));
  if (indices.size() <= 64) {
    // x[..., i, ...] as slices, joined along `axis`.
    SmallVector<Value> parts;
    for (int64_t i : indices) {
      Value part = sliceOf(x, *axis, i, i + 1);
      if (!part)
        return false;
      parts.push_back(part);
    }
    Value y = parts.size() == 1 ? parts.front()
                                : tryCreate<nn::ConcatOp>(ValueRange(parts),
                                                          b.getI64IntegerAttr(*axis));
    return y && define(n, reshaped(y, shape));
  }
  // More: nn.gather of rows, with `axis` moved to the front and back.
  SmallVector<int64_t> toFront = {*axis};
  for (int64_t d = 0; d < type.getRank(); ++d)
    if (d != *axis)
      toFront.push_back(d);
  Value table = *axis ? tryCreate<nn::TransposeOp>(x, b.getDenseI64ArrayAttr(toFront)) : x;
  std::vector<int32_t> rows(indices.begin(), indices.end());
  auto indexType = RankedTensorType::get({static_cast<int64_t>(rows.size())}, b.getI32Type());
  Value picked = table ? tryCreate<nn::GatherOp>(
                             table, tryCreate<nn::ConstantOp>(
                                        DenseIntElementsAttr::get(indexType, ArrayRef(rows))))
                       : Value();
  if (!picked || !*axis)
    return picked && define(n, reshaped(picked, shape));
  // [count, the other dims in order] back to the result's order.
  SmallVector<int64_t> back;
  for (int64_t d = 1; d <= *axis; ++d)
    back.push_back(d);
  back.push_back(0);
  for (int64_t d = *axis + 1; d < type.getRank(); ++d)
    back.push_back(d);
  Value y = tryCreate<nn::TransposeOp>(picked, b.getDenseI64ArrayAttr(back));
  return y && define(n, reshaped(y, shape));
}

bool Importer::pad(const Node &n) {
  if (!knownAttributes(n, {"mode"}))
    return false;
  auto mode = stringAttr(n, "mode", "constant");
  if (!mode)
    return false;
  if (*mode != "constant")
    return fail("mode '" + onnx_model::shown(*mode) + "' (graphc pads with a constant)");
  if (n.inputs.size() < 2 || n.inputs.size() > 4)
    return fail("expected data, pads, an optional constant and optional axes");
  Value x = operand(n.inputs[0]);
  if (!x)
    return false;
  auto type = llvm::cast<RankedTensorType>(x.getType());
  const int64_t rank = type.getRank();
  // The dims padded: every one, or (opset 18) those `axes` names, in order.
  std::vector<int64_t> padded;
  if (n.inputs.size() == 4 && !n.inputs[3].empty()) {
    auto axes = knownInts(n.inputs[3]);
    if (!axes)
      return fail("its axes must be constants");
    for (int64_t a : *axes) {
      auto d = normalizedAxis(a, rank);
      if (!d || llvm::is_contained(padded, *d))
        return fail("axes must be distinct dims of the rank-" + std::to_string(rank) + " data");
      padded.push_back(*d);
    }
  } else {
    for (int64_t d = 0; d < rank; ++d)
      padded.push_back(d);
  }
  const auto count = static_cast<int64_t>(padded.size());
  const Folded *given = constantTensor(n.inputs[1]);
  if (!given || (given->type != ElementType::Int64 && given->type != ElementType::Int32) ||
      static_cast<int64_t>(given->values.size()) != 2 * count)
    return fail("pads must be " + std::to_string(2 * count) + " integer constants (" +
                (count == rank ? "the data's rank is " + std::to_string(rank)
                               : std::to_string(count) + " axes") +
                ")");
  // [begin of each dim..., end of each dim...] over all dims.
  Folded all;
  all.values.assign(static_cast<size_t>(2 * rank), 0.0);
  for (int64_t i = 0; i < count; ++i) {
    all.values[padded[i]] = given->values[i];
    all.values[padded[i] + rank] = given->values[i + count];
  }
  const Folded *pads = &all;
  // The pad value: a rank-0 tensor, constant or computed.
  Value fill;
  if (n.inputs.size() >= 3 && !n.inputs[2].empty()) {
    if (auto c = scalar(n.inputs[2]))
      fill = tryCreate<nn::ConstantOp>(llvm::cast<ElementsAttr>(DenseElementsAttr::get(
          RankedTensorType::get({}, type.getElementType()),
          b.getFloatAttr(type.getElementType(), *c))));
    else if (Value v = operand(n.inputs[2]);
             v && llvm::cast<RankedTensorType>(v.getType()).getNumElements() == 1)
      fill = reshaped(v, {});
    else
      return v ? fail("the pad value must be one element") : false;
  } else {
    fill = tryCreate<nn::ConstantOp>(llvm::cast<ElementsAttr>(
        DenseElementsAttr::get(RankedTensorType::get({}, type.getElementType()),
                               b.getZeroAttr(type.getElementType()))));
  }
  if (!fill)
    return false;
  // Dim by dim: a negative pad crops (a slice), a positive one concatenates
  // the constant before or after.
  Value y = x;
  for (int64_t d = 0; d < type.getRank() && y; ++d) {
    const double before = pads->values[d], after = pads->values[d + type.getRank()];
    if (before == 0 && after == 0)
      continue;
    if (type.isDynamicDim(d))
      return failBatch("it pads the batch, which graphc leaves open until compile");
    const int64_t extent = type.getDimSize(d);
    if (std::abs(before) > (1 << 20) || std::abs(after) > (1 << 20) ||
        before + after + extent < 1)
      return fail("pads " + std::to_string(static_cast<int64_t>(before)) + " and " +
                  std::to_string(static_cast<int64_t>(after)) + " of dim " +
                  std::to_string(d) + " (size " + std::to_string(extent) + ")");
    const auto lo = static_cast<int64_t>(before), hi = static_cast<int64_t>(after);
    y = sliceOf(y, d, std::max<int64_t>(-lo, 0), extent - std::max<int64_t>(-hi, 0));
    if (!y)
      return false;
    auto filler = [&](int64_t count) -> Value {
      // The pad value broadcast to `count` rows of y along d: to a zero
      // constant of that shape, or (the batch open) to one row, repeated.
      auto shape = llvm::to_vector(llvm::cast<RankedTensorType>(y.getType()).getShape());
      shape[d] = count;
      auto to = RankedTensorType::get(shape, type.getElementType());
      const bool open = llvm::any_of(shape, ShapedType::isDynamic);
      if (open && count > 64) {
        fail("a pad of more than 64 rows beside the open batch");
        return nullptr;
      }
      Value like = open ? sliceOf(y, d, 0, 1)
                        : tryCreate<nn::ConstantOp>(llvm::cast<ElementsAttr>(
                              DenseElementsAttr::get(to, b.getZeroAttr(type.getElementType()))));
      Value rows = like ? tryCreate<nn::BroadcastOp>(fill, like, b.getDenseI64ArrayAttr({}))
                        : Value();
      if (!open || !rows || count == 1)
        return rows;
      SmallVector<Value> copies(count, rows);
      return tryCreate<nn::ConcatOp>(ValueRange(copies), b.getI64IntegerAttr(d));
    };
    SmallVector<Value> parts;
    if (lo > 0)
      parts.push_back(filler(lo));
    parts.push_back(y);
    if (hi > 0)
      parts.push_back(filler(hi));
    if (llvm::any_of(parts, [](Value v) { return !v; }))
      return false;
    y = parts.size() == 1 ? y
                          : tryCreate<nn::ConcatOp>(ValueRange(parts), b.getI64IntegerAttr(d));
  }
  return define(n, y);
}

bool Importer::squeeze(const Node &n, bool unsqueeze) {
  if (!knownAttributes(n, {"axes"}))
    return false;
  Value x = n.inputs.empty() ? Value() : operand(n.inputs[0]);
  if (!x)
    return n.inputs.empty() ? fail("expected an input") : false;
  auto axesAttr = intsAttr(n, "axes", {});
  if (!axesAttr)
    return false;
  std::vector<int64_t> axes = *axesAttr;
  if (n.inputs.size() > 1 && !n.inputs[1].empty()) {
    auto given = knownInts(n.inputs[1]);
    if (!given)
      return fail("its axes must be constants");
    axes = *given;
  }
  auto type = llvm::cast<RankedTensorType>(x.getType());
  SmallVector<int64_t> shape(type.getShape());
  const int64_t rank = type.getRank() + (unsqueeze ? static_cast<int64_t>(axes.size()) : 0);
  if ((axes.empty() && unsqueeze) || rank > 8)
    return fail("expected axes, and a result of rank 8 at most");
  std::vector<int64_t> dims;
  for (int64_t a : axes) {
    auto d = normalizedAxis(a, rank);
    if (!d || llvm::is_contained(dims, *d))
      return fail("axes must be distinct dims of rank " + std::to_string(rank));
    dims.push_back(*d);
  }
  llvm::sort(dims);
  if (unsqueeze) {
    for (int64_t d : dims)
      shape.insert(shape.begin() + d, 1);
  } else {
    if (dims.empty())
      for (int64_t d = 0; d < type.getRank(); ++d)
        if (shape[d] == 1)
          dims.push_back(d);
    for (auto it = dims.rbegin(); it != dims.rend(); ++it) {
      if (shape[*it] != 1)
        return fail("dim " + std::to_string(*it) + " is not of size 1");
      shape.erase(shape.begin() + *it);
    }
  }
  if (!shape.empty() && llvm::count_if(shape, ShapedType::isDynamic) == 1 &&
      !ShapedType::isDynamic(shape[0]))
    return failBatch("the batch must stay dim 0");
  return define(n, reshaped(x, shape));
}

bool Importer::castActivation(const Node &n) {
  if (!knownAttributes(n, {"to", "saturate"}))
    return false;
  auto to = intAttr(n, "to", 0);
  if (!to)
    return false;
  if (*to != 1)
    return fail("an activation is cast to ONNX type " + std::to_string(*to) +
                "; graphc takes casts to float32 (it computes in float32 and chooses its own "
                "precisions, --amp)");
  Value x = n.inputs.size() == 1 ? activation(n.inputs[0]) : Value();
  if (!x)
    return n.inputs.size() == 1 ? false : fail("expected one input");
  // Activations are float32 already.
  return define(n, x);
}

bool Importer::castLike(const Node &n) {
  if (!knownAttributes(n, {"saturate"}))
    return false;
  if (n.inputs.size() != 2 || n.inputs[1].empty())
    return fail("expected an input and a target");
  // The target's element type: an activation's is float32 (graphc computes
  // in it), a constant's or initializer's its own, a graph input's as declared.
  const std::string &target = n.inputs[1];
  ElementType type = ElementType::Other;
  if (values.count(target) || knownScalars.count(target) || drawnFloats.count(target))
    type = ElementType::Float;
  else if (auto it = initializers.find(target); it != initializers.end())
    type = it->second->type;
  else if (auto it = constants.find(target); it != constants.end())
    type = it->second->type;
  else if (const Folded *folded = constantTensor(target))
    type = folded->type;
  else
    for (const onnx_model::Value &input : model.inputs)
      if (input.name == target)
        type = input.type;
  static const std::pair<ElementType, int64_t> codes[] = {
      {ElementType::Float, 1},  {ElementType::Int32, 6},    {ElementType::Int64, 7},
      {ElementType::Bool, 9},   {ElementType::Float16, 10}, {ElementType::Double, 11},
      {ElementType::BFloat16, 16}};
  const auto *code = std::find_if(std::begin(codes), std::end(codes),
                                  [&](const auto &c) { return c.first == type; });
  if (code == std::end(codes))
    return fail("the element type of its target '" + onnx_model::shown(target) +
                "' is not one graphc knows at import");
  // The Cast it stands for, imported in its place (folded when its input is
  // a constant).
  Node cast = n;
  cast.opType = "Cast";
  cast.inputs.resize(1);
  Attribute &to = cast.attributes["to"];
  to.kind = Attribute::Kind::Int;
  to.i = code->second;
  return importAs(n, cast);
}

bool Importer::importAs(const Node &n, const Node &as) {
  const std::string shownAs = where(as);
  const bool imported = importNode(as);
  node = &n;  // not the copy, gone on return
  if (!imported && error.rfind(shownAs, 0) == 0)
    error = where(n) + error.substr(shownAs.size());
  return imported;
}

bool Importer::unflatten(const Node &n, Value x, const Folded *indices) {
  // Every element of the batch the file was traced at, in order, into
  // [batch, ...]: x reshaped, the batch kept open.
  auto type = llvm::cast<RankedTensorType>(x.getType());
  const int64_t traced = model.inputs.front().dims.front();
  int64_t perSample = 1;
  for (int64_t d : type.getShape().drop_front())
    perSample *= d;
  int64_t rest = 1;
  bool identity = indices && !indices->dims.empty() && indices->dims.front() == traced &&
                  traced > 0 && static_cast<int64_t>(indices->values.size()) == traced * perSample;
  for (size_t d = 1; identity && d < indices->dims.size(); ++d)
    rest *= indices->dims[d];
  identity = identity && rest == perSample;
  for (size_t i = 0; identity && i < indices->values.size(); ++i)
    identity = indices->values[i] == static_cast<double>(i);
  if (!identity)
    return failBatch("it gathers from '" + onnx_model::shown(n.inputs[0]) +
                     "', a reshape to [-1] that merges the batch with the other dims");
  SmallVector<int64_t> shape(indices->dims.begin(), indices->dims.end());
  shape[0] = ShapedType::kDynamic;
  return define(n, reshaped(x, shape));
}

bool Importer::gatherND(const Node &n) {
  if (!knownAttributes(n, {"batch_dims"}))
    return false;
  auto batchDims = intAttr(n, "batch_dims", 0);
  if (!batchDims)
    return false;
  if (n.inputs.size() != 2 || n.outputs.size() != 1)
    return fail("expected data and indices");
  // Indices [..., 1] pick rows of dim 0: a Gather of indices[..., 0].
  const Folded *indices = constantTensor(n.inputs[1]);
  if (*batchDims != 0 || !indices || indices->dims.empty() || indices->dims.back() != 1 ||
      (indices->type != ElementType::Int64 && indices->type != ElementType::Int32))
    return fail("graphc takes integer constant indices [..., 1] and batch_dims 0 (rows of "
                "dim 0)");
  Folded rows = *indices;
  rows.dims.pop_back();
  Node gather = n;
  gather.attributes.clear();  // axis 0
  return gatherOne(gather, &rows);
}

bool Importer::gelu(const Node &n) {
  if (!knownAttributes(n, {"approximate"}))
    return false;
  auto approximate = stringAttr(n, "approximate", "none");
  if (!approximate)
    return false;
  if (*approximate != "none" && *approximate != "tanh")
    return fail("approximate '" + onnx_model::shown(*approximate) + "' (none or tanh)");
  Value x = n.inputs.size() == 1 ? activation(n.inputs[0]) : Value();
  if (!x)
    return n.inputs.size() == 1 ? false : fail("expected one input");
  auto constant = [&](double c) { return scalarLike(c, x); };
  if (*approximate == "none") {
    // x * (erf(x / sqrt(2)) + 1) * 0.5, op for op as the TorchScript
    // exporter writes GELU before opset 20.
    Value root2 = constant(M_SQRT2);
    Value scaled = root2 ? tryCreate<nn::DivOp>(x, root2) : Value();
    Value erf = scaled ? tryCreate<nn::ErfOp>(scaled) : Value();
    Value one = erf ? constant(1.0) : Value();
    Value sum = one ? tryCreate<nn::AddOp>(erf, one) : Value();
    Value product = sum ? tryCreate<nn::MulOp>(x, sum) : Value();
    Value half = product ? constant(0.5) : Value();
    return define(n, half ? tryCreate<nn::MulOp>(product, half) : Value());
  }
  // 0.5 x (1 + tanh(u)), u = sqrt(2 / pi) (x + 0.044715 x^3), is
  // x * sigmoid(2u) exactly, and 2u = x (a + b x^2).
  const double a = 2.0 * std::sqrt(2.0 / M_PI), bCoefficient = a * 0.044715;
  Value squared = tryCreate<nn::MulOp>(x, x);
  Value bc = squared ? constant(bCoefficient) : Value();
  Value cubic = bc ? tryCreate<nn::MulOp>(squared, bc) : Value();
  Value ac = cubic ? constant(a) : Value();
  Value inner = ac ? tryCreate<nn::AddOp>(cubic, ac) : Value();
  Value twoU = inner ? tryCreate<nn::MulOp>(x, inner) : Value();
  Value gate = twoU ? tryCreate<nn::SigmoidOp>(twoU) : Value();
  return define(n, gate ? tryCreate<nn::MulOp>(x, gate) : Value());
}

} // namespace onnx_import
} // namespace graphc
