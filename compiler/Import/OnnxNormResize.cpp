//===- OnnxNormResize.cpp - normalizations and Resize for graphc import ---===//
//
// The ops timm's models add to torchvision's, as compositions of nn ops whose
// gradients autodiff already knows:
//  - BatchNormalization of rank 2 or 3 (BatchNorm1d) with running statistics:
//    nn.batch_norm between reshapes to rank 4 ([N, C] -> [N, C, 1, 1]);
//  - BatchNormalization in training form whose mean and variance inputs are
//    not running statistics (BiT's and NFNet's weight standardization, which
//    PyTorch writes as F.batch_norm(weight.reshape(1, O, -1), None, None,
//    training=True)): the normalization itself, over every dim but 1;
//  - InstanceNormalization (GroupNorm(1) as PyTorch exports it): the same
//    over dims 2 and on;
//  - Resize (nearest, linear, cubic; every coordinate mode but
//    tf_crop_and_resize) of the last two dims: each dim's resize is a linear
//    map, an [out, in] matrix built here from ONNX's reference definition
//    (edge-clamped neighbours, exclude_outside renormalized), applied as a
//    product with a constant: y = A_H x A_W^T.
//
//===----------------------------------------------------------------------===//

#include "compiler/Import/Importer.h"

#include <cmath>

namespace graphc {
namespace onnx_import {

using namespace mlir;
using onnx_model::ElementType;

Value Importer::channelVector(const std::string &name, nn::Initializer init) {
  if (values.count(name))
    return values[name];
  if (auto it = initializers.find(name);
      it != initializers.end() && it->second->type == ElementType::Float)
    return variable(name, true, init);
  if (Value constant = constantValue(name))
    return constant;
  return variable(name, true, init);  // its error
}

std::optional<double> Importer::positiveEpsilon(const Node &n) {
  auto epsilon = floatAttr(n, "epsilon", 1e-5);
  if (epsilon && !(*epsilon > 0 && std::isfinite(*epsilon))) {
    fail("epsilon must be positive");
    return std::nullopt;
  }
  return epsilon;
}

Value Importer::normalized(Value x, ArrayRef<int64_t> dims, double epsilon, Value scale,
                           Value bias) {
  const int64_t rank = llvm::cast<RankedTensorType>(x.getType()).getRank();
  SmallVector<int64_t> all;
  for (int64_t d = 0; d < rank; ++d)
    all.push_back(d);
  auto spread = [&](Value stat) -> Value {
    return stat ? tryCreate<nn::BroadcastOp>(stat, x, b.getDenseI64ArrayAttr(all)) : Value();
  };
  auto alongChannels = [&](Value v) -> Value {
    return tryCreate<nn::BroadcastOp>(v, x, b.getDenseI64ArrayAttr({1}));
  };
  auto reduceDims = b.getDenseI64ArrayAttr(dims);
  Value mean = tryCreate<nn::ReduceMeanOp>(x, reduceDims, b.getUnitAttr());
  Value centered = mean ? tryCreate<nn::SubOp>(x, spread(mean)) : Value();
  Value squares = centered ? tryCreate<nn::MulOp>(centered, centered) : Value();
  Value var = squares ? tryCreate<nn::ReduceMeanOp>(squares, reduceDims, b.getUnitAttr())
                      : Value();
  Value eps = var ? scalarLike(epsilon, var) : Value();
  Value shifted = eps ? tryCreate<nn::AddOp>(var, eps) : Value();
  Value inv = shifted ? tryCreate<nn::RsqrtOp>(shifted) : Value();
  Value y = inv ? tryCreate<nn::MulOp>(centered, spread(inv)) : Value();
  if (y && scale) {
    Value wide = alongChannels(scale);
    y = wide ? tryCreate<nn::MulOp>(y, wide) : Value();
  }
  if (y && bias) {
    Value wide = alongChannels(bias);
    y = wide ? tryCreate<nn::AddOp>(y, wide) : Value();
  }
  return y;
}

Value Importer::byGivenStatistics(const Node &n, Value x, double epsilon, int64_t channels) {
  Value scale = channelVector(n.inputs[1], nn::Initializer::ones);
  Value shift = scale ? channelVector(n.inputs[2], nn::Initializer::zeros) : Value();
  Value mean = shift ? values[n.inputs[3]] : Value();
  Value var = shift ? values[n.inputs[4]] : Value();
  if (!var)
    return nullptr;
  for (Value v : {scale, shift, mean, var})
    if (llvm::cast<RankedTensorType>(v.getType()).getShape() != ArrayRef<int64_t>{channels}) {
      fail("scale, B, mean and var must be vectors of the " + std::to_string(channels) +
           " channels");
      return nullptr;
    }
  auto alongChannels = [&](Value v) -> Value {
    return v ? tryCreate<nn::BroadcastOp>(v, x, b.getDenseI64ArrayAttr({1})) : Value();
  };
  Value eps = scalarLike(epsilon, var);
  Value shifted = eps ? tryCreate<nn::AddOp>(var, eps) : Value();
  Value inv = shifted ? tryCreate<nn::RsqrtOp>(shifted) : Value();
  Value gain = inv ? tryCreate<nn::MulOp>(inv, scale) : Value();
  Value centered = gain ? tryCreate<nn::SubOp>(x, alongChannels(mean)) : Value();
  Value y = centered ? tryCreate<nn::MulOp>(centered, alongChannels(gain)) : Value();
  return y ? tryCreate<nn::AddOp>(y, alongChannels(shift)) : Value();
}

bool Importer::batchNormOtherRank(const Node &n, Value x, double epsilon, double momentum) {
  auto type = llvm::cast<RankedTensorType>(x.getType());
  const int64_t rank = type.getRank();
  if (rank < 2 || ShapedType::isDynamic(type.getDimSize(1)))
    return fail("the input must be [N, C, ...] with C fixed");
  const int64_t channels = type.getDimSize(1);
  const bool statistics = initializers.count(n.inputs[3]) && initializers.count(n.inputs[4]);
  if (!statistics) {
    // No running statistics: the batch's own, and nothing to update.
    auto training = intAttr(n, "training_mode", 0);
    if (!training)
      return false;
    if (*training == 0 && !(n.outputs.size() > 1 && !n.outputs[1].empty())) {
      // Given statistics the graph computes (torch.export writes weight
      // standardization's batch norm so: its mean and variance are
      // ReduceMeans of the input): normalized by them as they are, the
      // gradient flowing through them too.
      if (!values.count(n.inputs[3]) || !values.count(n.inputs[4]))
        return fail("in inference form, its mean and variance must be initializers or "
                    "computed");
      return define(n, byGivenStatistics(n, x, epsilon, channels));
    }
    if (options.forward)
      return fail("training-mode batch norm in an inference model");
    Value scale = channelVector(n.inputs[1], nn::Initializer::ones);
    Value shift = scale ? channelVector(n.inputs[2], nn::Initializer::zeros) : Value();
    if (!shift)
      return false;
    for (Value v : {scale, shift})
      if (llvm::cast<RankedTensorType>(v.getType()).getShape() != ArrayRef<int64_t>{channels})
        return fail("scale and B must be vectors of the " + std::to_string(channels) +
                    " channels");
    SmallVector<int64_t> dims;
    for (int64_t d = 0; d < rank; ++d)
      if (d != 1)
        dims.push_back(d);
    return define(n, normalized(x, dims, epsilon, scale, shift));
  }
  if (rank > 4)
    return fail("graphc's batch norm takes inputs of rank 2 to 4");
  // BatchNorm1d: the same statistics as a rank-4 batch norm of [N, C, L, 1].
  SmallVector<int64_t> wide(type.getShape());
  wide.resize(4, 1);
  Value x4 = reshaped(x, wide);
  Value scale = x4 ? variable(n.inputs[1], true, nn::Initializer::ones, 1) : Value();
  Value shift = scale ? variable(n.inputs[2], true, nn::Initializer::zeros, 1) : Value();
  Value mean = shift ? variable(n.inputs[3], false, nn::Initializer::zeros, 1) : Value();
  Value var = mean ? variable(n.inputs[4], false, nn::Initializer::ones, 1) : Value();
  Value y = var ? tryCreate<nn::BatchNormOp>(x4, scale, shift, mean, var,
                                             b.getF64FloatAttr(epsilon),
                                             b.getF64FloatAttr(momentum))
                : Value();
  return define(n, y ? reshaped(y, type.getShape()) : Value());
}

bool Importer::instanceNorm(const Node &n) {
  if (!knownAttributes(n, {"epsilon"}))
    return false;
  if (n.inputs.size() != 3)
    return fail("expected 3 inputs (input, scale, B)");
  auto epsilon = positiveEpsilon(n);
  if (!epsilon)
    return false;
  Value x = activation(n.inputs[0]);
  if (!x)
    return false;
  auto type = llvm::cast<RankedTensorType>(x.getType());
  if (type.getRank() < 3 || ShapedType::isDynamic(type.getDimSize(1)))
    return fail("the input must be [N, C, D1, ...] with C fixed");
  Value scale = channelVector(n.inputs[1], nn::Initializer::ones);
  Value shift = scale ? channelVector(n.inputs[2], nn::Initializer::zeros) : Value();
  if (!shift)
    return false;
  for (Value v : {scale, shift})
    if (llvm::cast<RankedTensorType>(v.getType()).getShape() !=
        ArrayRef<int64_t>{type.getDimSize(1)})
      return fail("scale and B must be vectors of the " + std::to_string(type.getDimSize(1)) +
                  " channels");
  SmallVector<int64_t> dims;
  for (int64_t d = 2; d < type.getRank(); ++d)
    dims.push_back(d);
  return define(n, normalized(x, dims, *epsilon, scale, shift));
}

namespace {

// ONNX's cubic convolution weights of the four neighbours of a point at
// `ratio` in (0, 1] past the second of them.
std::array<double, 4> cubicCoefficients(double ratio, double a) {
  auto near = [&](double t) { return ((a + 2) * t - (a + 3)) * t * t + 1; };
  auto far = [&](double t) { return ((a * t - 5 * a) * t + 8 * a) * t - 4 * a; };
  return {far(ratio + 1), near(ratio), near(1 - ratio), far(2 - ratio)};
}

} // namespace

// Resize of the last two dims (the others kept), per ONNX (opsets 11 to 18,
// antialias off), each dim a linear map applied as a product.
bool Importer::resize(const Node &n) {
  if (!knownAttributes(n, {"coordinate_transformation_mode", "cubic_coeff_a", "exclude_outside",
                           "extrapolation_value", "mode", "nearest_mode", "antialias", "axes",
                           "keep_aspect_ratio_policy"}))
    return false;
  if (model.opset < 11)
    return fail("Resize before opset 11 is not supported (convert the model to opset 11 or "
                "later with onnx.version_converter)");
  auto coordinates = stringAttr(n, "coordinate_transformation_mode", "half_pixel");
  auto mode = stringAttr(n, "mode", "nearest");
  auto nearestMode = stringAttr(n, "nearest_mode", "round_prefer_floor");
  auto cubicA = floatAttr(n, "cubic_coeff_a", -0.75);
  auto exclude = intAttr(n, "exclude_outside", 0);
  auto antialias = intAttr(n, "antialias", 0);
  auto policy = stringAttr(n, "keep_aspect_ratio_policy", "stretch");
  if (!coordinates || !mode || !nearestMode || !cubicA || !exclude || !antialias || !policy)
    return false;
  if (n.attributes.count("axes"))
    return fail("the 'axes' attribute is not supported (resize the last two dims)");
  if (*antialias != 0)
    return fail("antialias is not supported");
  if (*policy != "stretch")
    return fail("keep_aspect_ratio_policy '" + onnx_model::shown(*policy) +
                "' is not supported (stretch only)");
  if (*mode != "nearest" && *mode != "linear" && *mode != "cubic")
    return fail("mode '" + onnx_model::shown(*mode) + "' is not supported");
  static const char *const transforms[] = {"half_pixel", "pytorch_half_pixel", "align_corners",
                                           "asymmetric", "tf_half_pixel_for_nn"};
  if (std::none_of(std::begin(transforms), std::end(transforms),
                   [&](const char *t) { return *coordinates == t; }))
    return fail("coordinate_transformation_mode '" + onnx_model::shown(*coordinates) +
                "' is not supported");
  if (*mode == "nearest" && *nearestMode != "round_prefer_floor" &&
      *nearestMode != "round_prefer_ceil" && *nearestMode != "floor" && *nearestMode != "ceil")
    return fail("nearest_mode '" + onnx_model::shown(*nearestMode) + "' is not supported");
  if (n.inputs.empty())
    return fail("expected an input");
  Value x = activation(n.inputs[0]);
  if (!x)
    return false;
  auto type = llvm::cast<RankedTensorType>(x.getType());
  const int64_t rank = type.getRank();
  if (rank < 2 || type.isDynamicDim(rank - 1) || type.isDynamicDim(rank - 2))
    return fail("the input must have at least two dims, the last two fixed");
  // An input is given when named and not empty (opsets 11 and 12 take an
  // empty scales tensor beside sizes).
  auto given = [&](size_t i) {
    if (i >= n.inputs.size() || n.inputs[i].empty())
      return false;
    const Folded *t = constantTensor(n.inputs[i]);
    auto init = initializers.find(n.inputs[i]);
    const bool empty = (t && t->values.empty()) ||
                       (init != initializers.end() &&
                        llvm::is_contained(init->second->dims, int64_t{0}));
    return !empty;
  };
  // The scale and output size of every dim.
  std::vector<double> scales(rank, 1.0);
  std::vector<int64_t> sizes(type.getShape().begin(), type.getShape().end());
  if (given(2) && given(3))
    return fail("scales and sizes are both given (ONNX takes one)");
  if (*exclude != 0 && *exclude != 1)
    return fail("exclude_outside must be 0 or 1");
  if (given(3)) {
    auto known = knownInts(n.inputs[3]);
    if (!known || static_cast<int64_t>(known->size()) != rank)
      return fail("its sizes must be " + std::to_string(rank) + " constants");
    for (int64_t d = 0; d < rank; ++d) {
      if (type.isDynamicDim(d))
        continue;  // the batch: the open size the folded shape carries
      if ((*known)[d] < 1 || (*known)[d] > (1 << 20))
        return fail("sizes must be in [1, 2^20]");
      sizes[d] = (*known)[d];
      scales[d] = double(sizes[d]) / double(type.getDimSize(d));
    }
  } else if (given(2)) {
    // Folded, or an initializer (never trained: it is no tensor's data).
    const std::vector<double> *given = nullptr;
    if (const Folded *t = constantTensor(n.inputs[2]))
      given = &t->values;
    else if (auto it = initializers.find(n.inputs[2]);
             it != initializers.end() && it->second->hasValues)
      given = &it->second->values;
    if (!given || static_cast<int64_t>(given->size()) != rank)
      return fail("its scales must be " + std::to_string(rank) + " constants");
    for (int64_t d = 0; d < rank; ++d) {
      const double s = (*given)[d];
      if (!(s > 0) || !std::isfinite(s))
        return fail("scales must be positive");
      scales[d] = s;
      if (!type.isDynamicDim(d)) {
        const double out = std::floor(double(type.getDimSize(d)) * s);
        if (out < 1 || out > double(1 << 20))
          return fail("scales must give sizes in [1, 2^20]");
        sizes[d] = static_cast<int64_t>(out);
      } else if (s != 1.0) {
        return fail("the batch cannot be resized");
      }
    }
  } else {
    return fail("expected scales or sizes");
  }
  for (int64_t d = 0; d + 2 < rank; ++d)
    if (sizes[d] != type.getDimSize(d) || scales[d] != 1.0)
      return fail("only the last two dims can be resized");

  // The [out, in] matrix of dim d's resize.
  auto matrix = [&](int64_t d) {
    const int64_t in = type.getDimSize(d), out = sizes[d];
    const double scale = scales[d];
    std::vector<double> a(static_cast<size_t>(out * in), 0.0);
    for (int64_t i = 0; i < out; ++i) {
      const double xi = double(i);
      double original;
      // ONNX's output width here is in * scale unrounded (given scales of
      // a downsample make it fractional).
      const double width = scale * double(in);
      if (*coordinates == "align_corners")
        original = width == 1.0 ? 0.0 : xi * double(in - 1) / (width - 1);
      else if (*coordinates == "asymmetric")
        original = xi / scale;
      else if (*coordinates == "tf_half_pixel_for_nn")
        original = (xi + 0.5) / scale;
      else if (*coordinates == "pytorch_half_pixel")
        original = width == 1.0 ? -0.5 : (xi + 0.5) / scale - 0.5;
      else
        original = (xi + 0.5) / scale - 0.5;
      // The neighbours start at `base`; `ratio` in (0, 1] is how far past
      // the one before the point lies (ONNX's reference prefers the left).
      const double floor = std::floor(original);
      const double ratio = original == floor ? 1.0 : original - floor;
      const int64_t left = static_cast<int64_t>(original == floor ? floor - 1 : floor);
      std::vector<double> weights;
      int64_t base = left;
      if (*mode == "nearest") {
        bool right;
        if (ratio == 1.0)
          right = true;
        else if (*nearestMode == "round_prefer_floor")
          right = ratio > 0.5;
        else if (*nearestMode == "round_prefer_ceil")
          right = ratio >= 0.5;
        else
          right = *nearestMode == "ceil";
        weights = {right ? 0.0 : 1.0, right ? 1.0 : 0.0};
      } else if (*mode == "linear") {
        weights = {1 - ratio, ratio};
      } else {
        auto c = cubicCoefficients(ratio, *cubicA);
        weights.assign(c.begin(), c.end());
        base = left - 1;
      }
      if (*exclude) {
        double total = 0;
        for (size_t k = 0; k < weights.size(); ++k) {
          const int64_t at = base + static_cast<int64_t>(k);
          if (at < 0 || at >= in)
            weights[k] = 0;
          total += weights[k];
        }
        if (total != 0)
          for (double &w : weights)
            w /= total;
      }
      for (size_t k = 0; k < weights.size(); ++k) {
        const int64_t at = std::clamp<int64_t>(base + static_cast<int64_t>(k), 0, in - 1);
        a[static_cast<size_t>(i * in + at)] += weights[k];
      }
    }
    return a;
  };
  // Each resized dim's matrix is built whole: at most 2^24 entries.
  auto changed = [&](int64_t d) { return sizes[d] != type.getDimSize(d) || scales[d] != 1.0; };
  for (int64_t d = rank - 2; d < rank; ++d)
    if (changed(d) && sizes[d] * type.getDimSize(d) > (int64_t{1} << 24))
      return fail("resizing dim " + std::to_string(d) + " from " +
                  std::to_string(type.getDimSize(d)) + " to " + std::to_string(sizes[d]) +
                  " takes a matrix of more than 2^24 entries");
  // y[..., out] = x[..., in] A^T along the last dim, unless A is the identity.
  auto alongLast = [&](Value v, int64_t d) -> Value {
    const int64_t in = type.getDimSize(d), out = sizes[d];
    if (!changed(d))
      return v;
    std::vector<double> a = matrix(d);
    bool identity = in == out;
    for (int64_t i = 0; identity && i < out; ++i)
      for (int64_t j = 0; identity && j < in; ++j)
        identity = a[static_cast<size_t>(i * in + j)] == (i == j ? 1.0 : 0.0);
    if (identity)
      return v;
    std::vector<float> data(a.begin(), a.end());
    Value constant = tryCreate<nn::ConstantOp>(llvm::cast<ElementsAttr>(DenseElementsAttr::get(
        RankedTensorType::get({out, in}, b.getF32Type()), ArrayRef<float>(data))));
    auto vt = llvm::cast<RankedTensorType>(v.getType());
    Value rows = constant ? reshaped(v, {ShapedType::kDynamic, in}) : Value();
    Value y = rows ? tryCreate<nn::MatmulOp>(rows, constant, UnitAttr(), b.getUnitAttr())
                   : Value();
    SmallVector<int64_t> shape(vt.getShape().drop_back());
    shape.push_back(out);
    return y ? reshaped(y, shape) : Value();
  };
  SmallVector<int64_t> swap;
  for (int64_t d = 0; d < rank; ++d)
    swap.push_back(d);
  std::swap(swap[rank - 1], swap[rank - 2]);
  Value y = alongLast(x, rank - 1);
  if (y && changed(rank - 2)) {
    Value t = tryCreate<nn::TransposeOp>(y, b.getDenseI64ArrayAttr(swap));
    Value r = t ? alongLast(t, rank - 2) : Value();
    y = r == t ? y : r ? tryCreate<nn::TransposeOp>(r, b.getDenseI64ArrayAttr(swap)) : Value();
  }
  return define(n, y);
}

} // namespace onnx_import
} // namespace graphc
