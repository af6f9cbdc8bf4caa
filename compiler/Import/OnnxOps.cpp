//===- OnnxOps.cpp - each ONNX op as nn ops -------------------------------===//
//
// The conversions Importer::importNode dispatches to (OnnxImport.h lists
// them). Each checks its node's attributes and operands, and creates its nn
// ops through tryCreate; a refusal is the node's error.
//
//===----------------------------------------------------------------------===//

#include "compiler/Import/Importer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>

namespace graphc {
namespace onnx_import {

// 1 - x without the binary residue (1 - 0.9 is 0.09999999999999998).
double complement(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.15g", 1.0 - x);
  return std::strtod(text, nullptr);
}

bool Importer::optionalBias(const Node &n, size_t index, Value &bias, int64_t outputs) {
  if (n.inputs.size() <= index || n.inputs[index].empty())
    return true;
  // A bias the graph computes from constants (torch.export writes a
  // convolution without one as a bias of zeros, Expand(0, Shape(weight))):
  // none where it is zero, else a constant.
  if (const Folded *folded = constantTensor(n.inputs[index]);
      folded && folded->dims.size() == 1 &&
      (folded->type == ElementType::Float || folded->type == ElementType::Double)) {
    if (static_cast<int64_t>(folded->values.size()) != outputs)
      return fail("its bias has " + std::to_string(folded->values.size()) + " values for " +
                  std::to_string(outputs) + " outputs");
    if (llvm::all_of(folded->values, [](double v) { return v == 0; }))
      return true;
    bias = constantValue(n.inputs[index]);
    return static_cast<bool>(bias);
  }
  bias = variable(n.inputs[index], true, nn::Initializer::zeros, 1);
  return static_cast<bool>(bias);
}

bool Importer::conv(const Node &n) {
  if (!knownAttributes(n, {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"}))
    return false;
  if (n.inputs.size() < 2)
    return fail("expected an input and a weight");
  Value x = activation(n.inputs[0]);
  if (!x)
    return false;
  // A weight computed in the graph (standardized, as BiT's and NFNet's
  // convolutions do) is an operand like any other.
  Value w;
  if (values.count(n.inputs[1]) && !options.forward) {
    w = values[n.inputs[1]];
    auto wt = llvm::cast<RankedTensorType>(w.getType());
    if (wt.getRank() != 4 || !wt.hasStaticShape())
      return fail("a computed weight must be of rank 4, its shape fixed");
  } else {
    w = variable(n.inputs[1], true, nn::Initializer::kaiming_normal_fan_out, 4);
  }
  if (!w)
    return false;
  Value bias;
  if (!optionalBias(n, 2, bias, llvm::cast<RankedTensorType>(w.getType()).getDimSize(0)))
    return false;
  auto strides = intsAttr(n, "strides", {1, 1});
  auto dilations = intsAttr(n, "dilations", {1, 1});
  auto group = intAttr(n, "group", 1);
  if (!strides || !dilations || !group)
    return false;
  auto kernel = intsAttr(n, "kernel_shape", {});
  if (!kernel)
    return false;
  auto wShape = llvm::cast<RankedTensorType>(w.getType()).getShape();
  auto padding = pads(n, x, wShape.drop_front(2), *strides, *dilations);
  if (!padding)
    return false;
  if (!kernel->empty() && (kernel->size() != 2 || (*kernel)[0] != wShape[2] ||
                           (*kernel)[1] != wShape[3]))
    return fail("kernel_shape does not match the weight's shape");
  if (strides->size() != 2 || dilations->size() != 2)
    return fail("strides and dilations must have two entries (a 2-D convolution)");
  auto positive = [](const std::vector<int64_t> &v) {
    return llvm::all_of(v, [](int64_t x) { return x >= 1 && x <= (1 << 20); });
  };
  if (!positive(*strides) || !positive(*dilations) || *group < 1 || *group > (1 << 20))
    return fail("strides, dilations and group must be positive");
  auto ones = [](const std::vector<int64_t> &v) {
    return llvm::all_of(v, [](int64_t x) { return x == 1; });
  };
  auto unlessOnes = [&](const std::vector<int64_t> &v) {
    return ones(v) ? DenseI64ArrayAttr() : b.getDenseI64ArrayAttr(v);
  };
  DenseI64ArrayAttr padAttr = llvm::all_of(*padding, [](int64_t p) { return p == 0; })
                                  ? DenseI64ArrayAttr()
                                  : b.getDenseI64ArrayAttr(*padding);
  return define(n, tryCreate<nn::Conv2DOp>(
                       x, w, bias, unlessOnes(*strides), padAttr, unlessOnes(*dilations),
                       *group == 1 ? IntegerAttr() : b.getI64IntegerAttr(*group), UnitAttr(),
                       UnitAttr()));
}

bool Importer::batchNorm(const Node &n) {
  if (!knownAttributes(n, {"epsilon", "momentum", "training_mode", "spatial"}))
    return false;
  if (n.inputs.size() != 5)
    return fail("expected 5 inputs (X, scale, B, input_mean, input_var)");
  // The training form's running-statistic outputs are what nn.batch_norm
  // updates in place: nothing may read them.
  for (size_t i = 1; i < n.outputs.size(); ++i)
    if (std::optional<int> reader = n.outputs[i].empty() ? std::nullopt : readerOf(n.outputs[i]))
      return fail("output '" + onnx_model::shown(n.outputs[i]) +
                  "' (a running statistic) is read by node " + std::to_string(*reader) +
                  "; graphc updates the statistics in place");
  auto epsilon = floatAttr(n, "epsilon", 1e-5);
  auto momentum = floatAttr(n, "momentum", 0.9);
  auto training = intAttr(n, "training_mode", 0);
  if (!epsilon || !momentum || !training)
    return false;
  if (!(*epsilon > 0) || !(*momentum >= 0 && *momentum <= 1))
    return fail("epsilon must be > 0 and momentum in [0, 1]");
  // An inference model normalizes with the running statistics; a training
  // form (training_mode, or before opset 14 the statistics' outputs) would
  // normalize with the batch's.
  if (options.forward &&
      (*training != 0 ||
       std::any_of(n.outputs.begin() + 1, n.outputs.end(),
                   [](const std::string &o) { return !o.empty(); })))
    return fail("training-mode batch norm in an inference model");
  Value x = activation(n.inputs[0]);
  if (!x)
    return false;
  // BatchNorm1d, and the batch norm a weight is standardized with.
  const bool statistics = initializers.count(n.inputs[3]) && initializers.count(n.inputs[4]);
  if (llvm::cast<RankedTensorType>(x.getType()).getRank() != 4 ||
      (!statistics && !options.forward))
    return batchNormOtherRank(n, x, *epsilon, complement(*momentum));
  Value scale = variable(n.inputs[1], true, nn::Initializer::ones, 1);
  Value shift = scale ? variable(n.inputs[2], true, nn::Initializer::zeros, 1) : Value();
  Value mean = shift ? variable(n.inputs[3], false, nn::Initializer::zeros, 1) : Value();
  Value var = mean ? variable(n.inputs[4], false, nn::Initializer::ones, 1) : Value();
  if (!var)
    return false;
  // ONNX's running statistic is momentum * old + (1 - momentum) * batch;
  // nn's (PyTorch's) is (1 - momentum) * old + momentum * batch.
  return define(n, tryCreate<nn::BatchNormOp>(x, scale, shift, mean, var,
                                              b.getF64FloatAttr(*epsilon),
                                              b.getF64FloatAttr(complement(*momentum))));
}

bool Importer::pool(const Node &n, bool max) {
  if (max ? !knownAttributes(n, {"auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads",
                                 "storage_order", "strides"})
          : !knownAttributes(n, {"auto_pad", "ceil_mode", "count_include_pad", "dilations",
                                 "kernel_shape", "pads", "strides"}))
    return false;
  if (n.outputs.size() > 1 && !n.outputs[1].empty())
    if (std::optional<int> reader = readerOf(n.outputs[1]))
      return fail("its indices output is read by node " + std::to_string(*reader) +
                  "; graphc's max pooling has none");
  Value x = n.inputs.empty() ? Value() : activation(n.inputs[0]);
  if (!x)
    return n.inputs.empty() ? fail("expected an input") : false;
  auto kernel = intsAttr(n, "kernel_shape", {});
  auto strides = intsAttr(n, "strides", {1, 1});
  auto ceil = intAttr(n, "ceil_mode", 0);
  auto dilations = intsAttr(n, "dilations", {1, 1});
  auto includePad = intAttr(n, "count_include_pad", 0);
  if (!kernel || !strides || !ceil || !dilations || !includePad)
    return false;
  auto padding = pads(n, x, *kernel, *strides, *dilations);
  if (!padding)
    return false;
  if (kernel->size() != 2 || strides->size() != 2 ||
      llvm::any_of(*kernel, [](int64_t k) { return k < 1 || k > (1 << 20); }) ||
      llvm::any_of(*strides, [](int64_t s) { return s < 1 || s > (1 << 20); }))
    return fail("kernel_shape and strides must be two positive sizes (a 2-D pooling)");
  if (llvm::any_of(*dilations, [](int64_t d) { return d != 1; }))
    return fail("dilated pooling is not supported");
  if (*ceil != 0) {
    // Rounding the output size up is rounding down over more padding at the
    // bottom and right, which max pooling never picks and an average
    // without padding never counts. PyTorch's rule: the last window starts
    // inside the input or its top/left padding.
    if (!max && *includePad)
      return fail("ceil_mode with count_include_pad is not supported (the extra cells "
                  "would count)");
    auto type = llvm::cast<RankedTensorType>(x.getType());
    if (type.getRank() != 4)
      return fail("only NCHW inputs (rank 4) are supported");
    for (int axis = 0; axis < 2; ++axis) {
      const int64_t size = type.getDimSize(2 + axis), k = (*kernel)[axis],
                    s = (*strides)[axis];
      const int64_t before = (*padding)[2 * axis], after = (*padding)[2 * axis + 1];
      const int64_t span = size + before + after - k;
      if (span < 0)
        break; // the window does not fit: nn's error
      int64_t out = (span + s - 1) / s + 1;
      if ((out - 1) * s >= size + before)
        --out;
      (*padding)[2 * axis + 1] += std::max<int64_t>(0, (out - 1) * s + k - (size + before + after));
    }
  }
  // Always given: nn's pooling strides default to the window, ONNX's to 1.
  auto stridesAttr = b.getDenseI64ArrayAttr(*strides);
  auto padAttr = llvm::all_of(*padding, [](int64_t p) { return p == 0; })
                     ? DenseI64ArrayAttr()
                     : b.getDenseI64ArrayAttr(*padding);
  if (max)
    return define(n, tryCreate<nn::MaxPool2DOp>(x, b.getDenseI64ArrayAttr(*kernel), stridesAttr,
                                                padAttr, UnitAttr()));
  return define(n, tryCreate<nn::AvgPool2DOp>(x, b.getDenseI64ArrayAttr(*kernel), stridesAttr,
                                              padAttr,
                                              *includePad ? UnitAttr() : b.getUnitAttr(),
                                              UnitAttr()));
}

bool Importer::gemm(const Node &n) {
  if (!knownAttributes(n, {"alpha", "beta", "transA", "transB"}))
    return false;
  auto alpha = floatAttr(n, "alpha", 1.0);
  auto beta = floatAttr(n, "beta", 1.0);
  auto transA = intAttr(n, "transA", 0);
  auto transB = intAttr(n, "transB", 0);
  if (!alpha || !beta || !transA || !transB)
    return false;
  if (n.inputs.size() < 2)
    return fail("expected an input and a weight");
  Value x = activation(n.inputs[0]);
  if (!x)
    return false;
  if (llvm::cast<RankedTensorType>(x.getType()).getRank() != 2)
    return fail("the input must have rank 2");
  // C, if given, as a vector initializer (a bias) or anything else.
  auto isBiasVector = [&](const std::string &name) {
    auto it = initializers.find(name), weight = initializers.find(n.inputs[1]);
    return it != initializers.end() && weight != initializers.end() &&
           it->second->dims.size() == 1 && !weight->second->dims.empty() &&
           it->second->dims[0] == weight->second->dims[0];
  };
  if (*alpha == 1.0 && *beta == 1.0 && *transA == 0 && *transB == 1 &&
      (n.inputs.size() < 3 || n.inputs[2].empty() || isBiasVector(n.inputs[2]))) {
    // PyTorch's linear layer: an [out, in] weight and a bias vector.
    Value w = variable(n.inputs[1], true, nn::Initializer::kaiming_uniform, 2);
    if (!w)
      return false;
    Value bias;
    if (!optionalBias(n, 2, bias, llvm::cast<RankedTensorType>(w.getType()).getDimSize(0)))
      return false;
    return define(n, tryCreate<nn::LinearOp>(x, w, bias));
  }
  // alpha * op(A) op(B) + beta * C, C broadcast as numpy does.
  Value w = variable(n.inputs[1], true, nn::Initializer::kaiming_uniform, 2);
  if (!w)
    return false;
  Value y = tryCreate<nn::MatmulOp>(x, w, *transA ? b.getUnitAttr() : UnitAttr(),
                                    *transB ? b.getUnitAttr() : UnitAttr());
  if (y && *alpha != 1.0) {
    Value a = scalarLike(*alpha, y);
    y = a ? tryCreate<nn::MulOp>(y, a) : Value();
  }
  if (y && n.inputs.size() > 2 && !n.inputs[2].empty() && *beta != 0.0) {
    Value c = values.count(n.inputs[2])
                  ? values[n.inputs[2]]
                  : variable(n.inputs[2], true, nn::Initializer::zeros);
    if (c && c.getType() != y.getType())
      c = broadcastTo(c, y);
    if (c && *beta != 1.0) {
      Value s = scalarLike(*beta, c);
      c = s ? tryCreate<nn::MulOp>(c, s) : Value();
    }
    y = c ? tryCreate<nn::AddOp>(y, c) : Value();
  }
  return define(n, y);
}

bool Importer::dropout(const Node &n) {
  if (!knownAttributes(n, {"seed"}))
    return false;
  Value x = n.inputs.empty() ? Value() : activation(n.inputs[0]);
  if (!x)
    return n.inputs.empty() ? fail("expected an input") : false;
  if (options.forward) {
    // Inference: the identity, unless training_mode is given and not a
    // constant false and the ratio is not a constant 0.
    if (n.inputs.size() > 2 && !n.inputs[2].empty()) {
      std::optional<double> training = scalar(n.inputs[2]);
      std::optional<double> ratio =
          n.inputs.size() > 1 && !n.inputs[1].empty() ? scalar(n.inputs[1]) : std::nullopt;
      if ((!training || *training != 0) && ratio != 0.0)
        return fail("training-mode dropout in an inference model");
    }
    return define(n, x);
  }
  double ratio = 0.5;
  if (n.inputs.size() > 1 && !n.inputs[1].empty()) {
    std::optional<double> given = scalar(n.inputs[1]);
    if (!given)
      return fail("its ratio must be a constant scalar");
    ratio = *given;
  }
  if (!(ratio >= 0 && ratio < 1))
    return fail("its ratio must be in [0, 1)");
  if (n.outputs.size() > 1 && !n.outputs[1].empty())
    if (std::optional<int> reader = readerOf(n.outputs[1]))
      return fail("its mask output is read by node " + std::to_string(*reader));
  if (ratio == 0)
    return define(n, x);
  auto seed = intAttr(n, "seed", n.index + 1);
  if (!seed)
    return false;
  return define(n, tryCreate<nn::DropoutOp>(x, b.getF64FloatAttr(ratio),
                                            b.getI64IntegerAttr(static_cast<int64_t>(static_cast<uint64_t>(*seed) % (uint64_t(1) << 31)))));
}

void Importer::findStochasticDepth() {
  // Each name's readers; a graph output counts as one more.
  std::map<std::string, std::vector<int>> readers;
  for (const Node &n : model.nodes)
    for (const std::string &input : n.inputs)
      if (!input.empty())
        readers[input].push_back(n.index);
  for (const onnx_model::Value &output : model.outputs)
    readers[output.name].push_back(-1);
  const std::map<std::string, int> &producer = producerOf;
  // The node that alone reads `name` as its first input, if it is an `op`.
  auto onlyReader = [&](const std::string &name, const char *op) -> const Node * {
    auto it = readers.find(name);
    if (it == readers.end() || it->second.size() != 1 || it->second.front() < 0)
      return nullptr;
    const Node &reader = model.nodes[it->second.front()];
    return reader.opType == op && !reader.inputs.empty() && reader.inputs[0] == name &&
                   reader.outputs.size() == 1
               ? &reader
               : nullptr;
  };
  // A Cast to float32 of `name` alone (torch.export casts the noise's shape
  // tensor before the draw).
  auto floatCastOf = [&](const Node *n) {
    if (!n || n->opType != "Cast" || n->inputs.size() != 1 || n->outputs.size() != 1)
      return false;
    auto to = n->attributes.find("to");
    return to != n->attributes.end() && to->second.kind == Attribute::Kind::Int &&
           to->second.i == 1;
  };
  // The CastLikes that turn a chain's comparison into floats (torch.export's
  // form of the Cast).
  std::set<int> chainCastLikes;
  for (const Node &noise : model.nodes) {
    if (noise.opType != "RandomUniformLike" || noise.inputs.size() != 1 ||
        noise.outputs.size() != 1)
      continue;
    // The Less reading the noise; CastLikes taking the noise's type (the
    // rate cast to it, torch.export's form) may read it too.
    const Node *less = nullptr;
    if (auto r = readers.find(noise.outputs[0]); r != readers.end()) {
      std::vector<int> others;
      for (int reader : r->second)
        if (reader < 0 || model.nodes[reader].opType != "CastLike" ||
            model.nodes[reader].inputs.size() != 2 ||
            model.nodes[reader].inputs[0] == noise.outputs[0])
          others.push_back(reader);
      if (others.size() == 1 && others.front() >= 0) {
        const Node &reader = model.nodes[others.front()];
        if (reader.opType == "Less" && !reader.inputs.empty() &&
            reader.inputs[0] == noise.outputs[0] && reader.outputs.size() == 1)
          less = &reader;
      }
    }
    const Node *cast = less ? onlyReader(less->outputs[0], "Cast") : nullptr;
    // CastLike to the noise's own input, or to what that is a float cast of.
    const Node *castLike = less && !cast ? onlyReader(less->outputs[0], "CastLike") : nullptr;
    if (castLike) {
      auto from = producer.find(noise.inputs[0]);
      const Node *noiseCast = from == producer.end() ? nullptr : &model.nodes[from->second];
      const bool floatTarget =
          castLike->inputs.size() == 2 &&
          (castLike->inputs[1] == noise.inputs[0] ||
           (floatCastOf(noiseCast) && castLike->inputs[1] == noiseCast->inputs[0]));
      cast = floatTarget ? castLike : nullptr;
    }
    const Node *div = cast ? onlyReader(cast->outputs[0], "Div") : nullptr;
    if (!div || less->inputs.size() != 2 || div->inputs.size() != 2 ||
        (!castLike && !floatCastOf(cast)))
      continue;
    if (castLike)
      chainCastLikes.insert(castLike->index);
    drawnFloats.insert(noise.outputs[0]);
    importedWithChain.insert({noise.index, less->index, cast->index});
    stochasticDepthAt[div->index] = StochasticDepth{noise.index, less->index, -1};
  }
  // A noise shaped by ConstantOfShape of the batch (an export with an open
  // batch), or by Expand of a scalar to it (torch.export's torch.empty), is
  // imported with it when only noises read that tensor (one tensor may shape
  // several chains' noises, as a graph simplifier merges them); a random
  // tensor that is no stochastic depth is then refused at its own node.
  auto isNoise = [&](int r) { return r >= 0 && model.nodes[r].opType == "RandomUniformLike"; };
  std::map<int, StochasticDepth *> chainOf;
  for (auto &[div, chain] : stochasticDepthAt)
    chainOf[chain.noise] = &chain;
  for (const Node &noise : model.nodes) {
    if (noise.opType != "RandomUniformLike" || noise.inputs.size() != 1)
      continue;
    auto it = producer.find(noise.inputs[0]);
    if (it == producer.end())
      continue;
    // Through a float cast read by noises alone.
    const Node *noiseCast = nullptr;
    if (floatCastOf(&model.nodes[it->second]) &&
        llvm::all_of(readers[noise.inputs[0]], isNoise)) {
      noiseCast = &model.nodes[it->second];
      it = producer.find(noiseCast->inputs[0]);
      if (it == producer.end())
        continue;
    }
    const Node &shaped = model.nodes[it->second];
    const bool shapes = (shaped.opType == "ConstantOfShape" && shaped.inputs.size() == 1) ||
                        (shaped.opType == "Expand" && shaped.inputs.size() == 2);
    // Its readers: noises, that cast, or chains' CastLikes (as their target).
    auto ofChain = [&](int r) {
      return isNoise(r) || (noiseCast && r == noiseCast->index) || chainCastLikes.count(r) > 0;
    };
    if (!shapes || shaped.outputs.size() != 1 || !llvm::all_of(readers[shaped.outputs[0]], ofChain))
      continue;
    importedWithChain.insert(shaped.index);
    if (noiseCast)
      importedWithChain.insert(noiseCast->index);
    if (auto chain = chainOf.find(noise.index); chain != chainOf.end())
      chain->second->shapeOf = shaped.index;
  }
}

// Stochastic depth's masks draw from seeds of their own, 2^30 + the node's
// index + 1, away from Dropout's (its 'seed' attribute, or its index + 1),
// so that no chain shares a dropout's stream.
constexpr int64_t kStochasticDepthSeeds = int64_t{1} << 30;

bool Importer::stochasticDepth(const Node &n, const StochasticDepth &chain) {
  const Node &noise = model.nodes[chain.noise];
  const Node &less = model.nodes[chain.less];
  const std::string what = "stochastic depth's mask (nodes " + std::to_string(chain.noise) +
                           " to " + std::to_string(n.index) + ")";
  if (options.forward)
    return fail(what + " in an inference model: export the model in eval mode");
  for (const auto &[name, attribute] : noise.attributes) {
    const bool ok = name == "seed" ||
                    (name == "dtype" && attribute.kind == Attribute::Kind::Int &&
                     attribute.i == 1) ||
                    (name == "low" && attribute.kind == Attribute::Kind::Float &&
                     attribute.f == 0) ||
                    (name == "high" && attribute.kind == Attribute::Kind::Float &&
                     attribute.f == 1);
    if (!ok)
      return fail(what + ": its RandomUniformLike has attribute '" + onnx_model::shown(name) +
                  "' other than a float32 draw from [0, 1)");
  }
  // The survival rate: the noise is kept below it, and the kept samples are
  // divided by it.
  std::optional<double> keep = scalar(less.inputs[1]);
  std::optional<double> divisor = scalar(n.inputs[1]);
  if (!keep || !(*keep > 0 && *keep <= 1))
    return fail(what + ": its survival rate (Less's second input) must be a constant in (0, 1]");
  if (!(1.0 - *keep < 1)) {
    char shown[32];
    std::snprintf(shown, sizeof shown, "%g", *keep);
    return fail(what + ": its survival rate " + shown +
                " is too small for a drop rate under 1 (1 - rate rounds to 1)");
  }
  if (!divisor || !(std::abs(*divisor - *keep) <= 1e-6 * *keep)) {
    char shown[32];
    std::snprintf(shown, sizeof shown, "%g", *keep);
    return fail(what + ": it must divide by its survival rate " + shown);
  }
  // The noise's shape: [N, 1, ..., 1], N the batch.
  std::vector<int64_t> dims;
  bool batchFirst = false;
  // The activation the noise is shaped like, where it is one (a draw per
  // element: torch.export's dropout, Expand of a scalar to its Shape).
  Value shapedLike;
  const onnx_model::Value &images = model.inputs.front();
  const int64_t fileBatch = images.dims.empty() ? -1 : images.dims[0];
  // A dim that is the batch: left open, as the file traced it, or as fixed
  // at import (--batch: the shape arithmetic then folds to that number).
  auto isBatch = [&](int64_t d) {
    return d == kBatch || (fileBatch > 0 && d == fileBatch) ||
           (options.batch > 0 && d == options.batch);
  };
  // A batch of 1 cannot tell a draw per sample from one for the whole batch
  // (torchvision's mode "batch": [1, 1, ..., 1]).
  auto ambiguous = [&](int64_t d) { return d == 1; };
  if (chain.shapeOf >= 0) {
    // ConstantOfShape's shape, or Expand's (of a one-element constant).
    const Node &shaped = model.nodes[chain.shapeOf];
    const bool expand = shaped.opType == "Expand";
    std::optional<std::vector<int64_t>> shape =
        expand && !scalar(shaped.inputs[0]) ? std::nullopt : knownInts(shaped.inputs[expand ? 1 : 0]);
    if (auto from = expand ? producerOf.find(shaped.inputs[1]) : producerOf.end();
        from != producerOf.end()) {
      const Node &m = model.nodes[from->second];
      if (m.opType == "Shape" && m.inputs.size() == 1 && values.count(m.inputs[0]))
        shapedLike = values[m.inputs[0]];
    }
    if (shape) {
      dims = *shape;
      batchFirst = !dims.empty() && isBatch(dims[0]);
    }
  } else if (const Folded *like = constantTensor(noise.inputs[0])) {
    dims = like->dims;
    batchFirst = !dims.empty() && isBatch(dims[0]);
  } else if (auto init = initializers.find(noise.inputs[0]); init != initializers.end()) {
    dims = init->second->dims;
    batchFirst = !dims.empty() && isBatch(dims[0]);
  } else if (auto like = values.find(noise.inputs[0]); like != values.end()) {
    shapedLike = like->second;
    auto type = llvm::cast<RankedTensorType>(like->second.getType());
    dims.assign(type.getShape().begin(), type.getShape().end());
    batchFirst = !dims.empty() && (ShapedType::isDynamic(dims[0]) ||
                                   dims[0] == llvm::cast<RankedTensorType>(
                                                  body->getArgument(0).getType())
                                                  .getDimSize(0));
  }
  if (batchFirst && ambiguous(dims[0]))
    return fail(what + ": its noise is [1, ..., 1] at a batch of 1, which cannot tell a draw "
                "per sample from one for the whole batch: export with a batch of 2 or more, or "
                "with a symbolic batch axis, and import with --batch other than 1");
  // A draw per element of an activation: dropout, as torch.export writes
  // it (the mask is nn.dropout of ones shaped like the activation).
  auto likeType = shapedLike ? llvm::cast<RankedTensorType>(shapedLike.getType()) : nullptr;
  const bool perElement =
      batchFirst && likeType && likeType.getRank() == static_cast<int64_t>(dims.size()) &&
      likeType.getRank() > 1 &&
      likeType.getDimSize(0) ==
          llvm::cast<RankedTensorType>(body->getArgument(0).getType()).getDimSize(0) &&
      llvm::all_of(llvm::seq<int64_t>(1, likeType.getRank()),
                   [&](int64_t d) { return likeType.getDimSize(d) == dims[d]; }) &&
      llvm::any_of(llvm::ArrayRef(dims).drop_front(), [](int64_t d) { return d != 1; });
  if (!perElement && (!batchFirst || dims.size() > 8 ||
                      llvm::any_of(llvm::ArrayRef(dims).drop_front(),
                                   [](int64_t d) { return d != 1; })))
    return fail(what + ": its noise must be shaped [N, 1, ..., 1] with N the batch (one draw "
                "per sample, torchvision's mode \"row\"), or like an activation (dropout)");
  // Ones of that shape: like the activation, or from the images' batch
  // ([N, 1, 1, 1] sliced out of them, reshaped to the noise's rank).
  Value ones = perElement ? shapedLike : body->getArgument(0);
  for (int64_t d = 1; d < 4 && ones && !perElement; ++d)
    ones = sliceOf(ones, d, 0, 1);
  if (!ones)
    return false;
  if (!perElement && dims.size() != 4) {
    SmallVector<int64_t> shape(dims.size(), 1);
    shape[0] = llvm::cast<RankedTensorType>(ones.getType()).getDimSize(0);
    ones = reshaped(ones, shape);
    if (!ones)
      return false;
  }
  ones = scalarLike(1.0, ones);
  if (!ones)
    return false;
  const double rate = 1.0 - *keep;
  if (rate == 0)
    return define(n, ones);
  return define(n, tryCreate<nn::DropoutOp>(
                       ones, b.getF64FloatAttr(rate),
                       b.getI64IntegerAttr(
                           (kStochasticDepthSeeds + chain.noise + 1) % (int64_t{1} << 31))));
}

Value Importer::scalarLike(double value, Value like) {
  auto scalar = RankedTensorType::get({}, b.getF32Type());
  Value c = tryCreate<nn::ConstantOp>(
      llvm::cast<ElementsAttr>(DenseElementsAttr::get(scalar, static_cast<float>(value))));
  if (!c)
    return nullptr;
  return tryCreate<nn::BroadcastOp>(c, like, b.getDenseI64ArrayAttr({}));
}

Value Importer::broadcastTo(Value v, Value like) {
  if (v.getType() == like.getType())
    return v;
  auto from = llvm::cast<RankedTensorType>(v.getType());
  auto to = llvm::cast<RankedTensorType>(like.getType());
  if (from.getRank() > to.getRank()) {
    fail("cannot broadcast a tensor of rank " + std::to_string(from.getRank()) + " to rank " +
         std::to_string(to.getRank()));
    return nullptr;
  }
  SmallVector<int64_t> dims;
  for (int64_t d = 0; d < from.getRank(); ++d) {
    const int64_t onto = to.getRank() - from.getRank() + d;
    // numpy aligns the last axes. An open axis (the batch) can only meet the
    // batch: meeting a fixed one it would broadcast the batch along another
    // axis (a [N] or [N, 1] tensor times [N, C, 1, 1]).
    if (ShapedType::isDynamic(from.getDimSize(d)) && !ShapedType::isDynamic(to.getDimSize(onto))) {
      auto shown = [](RankedTensorType t) {
        std::string text = "[";
        for (int64_t i = 0; i < t.getRank(); ++i)
          text += (i ? ", " : "") + (ShapedType::isDynamic(t.getDimSize(i))
                                         ? std::string("N")
                                         : std::to_string(t.getDimSize(i)));
        return text + "]";
      };
      fail("cannot broadcast " + shown(from) + " to " + shown(to) +
           ": aligned at the last axes, its axis " + std::to_string(d) +
           " (the batch) meets axis " + std::to_string(onto) + " (" +
           std::to_string(to.getDimSize(onto)) + ")");
      return nullptr;
    }
    dims.push_back(onto);
  }
  return tryCreate<nn::BroadcastOp>(v, like, b.getDenseI64ArrayAttr(dims));
}

Value Importer::clamp(Value x, std::optional<double> lo, std::optional<double> hi) {
  Value y = x;
  if (lo) {
    // ReLU where the bound is 0 (its gradient at 0 is PyTorch's: none).
    Value bound = *lo == 0 ? Value() : scalarLike(*lo, x);
    if (*lo != 0 && !bound)
      return nullptr;
    y = *lo == 0 ? tryCreate<nn::ReluOp>(x) : tryCreate<nn::MaxOp>(x, bound);
    if (!y)
      return nullptr;
  }
  if (hi) {
    Value bound = scalarLike(*hi, y);
    Value above = bound ? tryCreate<nn::CmpOp>(nn::CmpPredicate::gt, y, bound) : Value();
    y = above ? tryCreate<nn::SelectOp>(above, bound, y) : Value();
  }
  return y;
}

// Add, Sub, Mul, Div: two activations of one shape, one broadcast to the
// other's (a squeeze-excite gate [N, C, 1, 1] on [N, C, H, W]), or an
// activation and a constant scalar.
bool Importer::binary(const Node &n) {
  if (!knownAttributes(n, {}))
    return false;
  if (n.inputs.size() != 2)
    return fail("expected two inputs");
  // A float initializer of rank 1 or more is a trained parameter, whatever
  // its size (StarReLU's scale and bias are one-element parameters); a
  // scalar the export wrote as a Constant node is a constant.
  auto trainedInitializer = [&](const std::string &name) {
    auto it = initializers.find(name);
    return it != initializers.end() && it->second->type == ElementType::Float &&
           !it->second->dims.empty();
  };
  auto operand = [&](const std::string &name, Value other) -> Value {
    if (values.count(name))
      return values[name];
    if (trainedInitializer(name))
      return activation(name);
    // A one-element constant of no higher rank than the activation (a
    // higher one would raise the result's rank, as numpy broadcasts).
    if (std::optional<double> c =
            other ? scalar(name, llvm::cast<RankedTensorType>(other.getType()).getRank())
                  : std::nullopt)
      return scalarLike(*c, other);
    return activation(name);
  };
  Value lhs = values.count(n.inputs[0]) ? values[n.inputs[0]] : Value();
  Value rhs = values.count(n.inputs[1]) ? values[n.inputs[1]] : Value();
  // Neither computed: a trained initializer (NFNet's gain times a constant
  // scale) is the activation, if one is.
  if (!lhs && !rhs && trainedInitializer(n.inputs[0]))
    lhs = activation(n.inputs[0]);
  else if (!lhs && !rhs && trainedInitializer(n.inputs[1]))
    rhs = activation(n.inputs[1]);
  if (!lhs && !rhs)
    return error.empty() ? fail("graphc takes at least one activation operand") : false;
  lhs = lhs ? lhs : operand(n.inputs[0], rhs);
  rhs = rhs ? rhs : operand(n.inputs[1], lhs);
  if (!lhs || !rhs)
    return error.empty() ? fail("an operand must be an activation or a constant scalar") : false;
  auto lt = llvm::cast<RankedTensorType>(lhs.getType());
  auto rt = llvm::cast<RankedTensorType>(rhs.getType());
  if (lt != rt) {
    // The operand with fewer elements (or lower rank) is broadcast; both
    // needing it ([N, 1] and [1, C]) is refused.
    auto count = [](RankedTensorType t) {
      double c = 1;
      for (int64_t d : t.getShape())
        c *= ShapedType::isDynamic(d) ? double(1 << 20) : double(d);
      return c;
    };
    const bool rightSmaller =
        rt.getRank() < lt.getRank() || (rt.getRank() == lt.getRank() && count(rt) <= count(lt));
    if (rightSmaller)
      rhs = broadcastTo(rhs, lhs);
    else
      lhs = broadcastTo(lhs, rhs);
    if (!lhs || !rhs)
      return false;
  }
  const std::string &op = n.opType;
  return define(n, op == "Add"   ? tryCreate<nn::AddOp>(lhs, rhs)
                   : op == "Sub" ? tryCreate<nn::SubOp>(lhs, rhs)
                   : op == "Mul" ? tryCreate<nn::MulOp>(lhs, rhs)
                                 : tryCreate<nn::DivOp>(lhs, rhs));
}

// An inference model's Clip whose bounds are inputs: max(x, lo), then the
// select of min(., hi), each bound broadcast to x (a scalar, as ONNX has it).
bool Importer::clipByInputs(const Node &n, Value x) {
  Value y = x;
  for (size_t i = 1; i < 3 && i < n.inputs.size(); ++i) {
    if (n.inputs[i].empty())
      continue;
    Value bound;
    if (values.count(n.inputs[i])) {
      bound = values[n.inputs[i]];
      if (bound.getType() != y.getType())
        bound = broadcastTo(bound, y);
    } else if (std::optional<double> c = scalar(n.inputs[i])) {
      bound = scalarLike(*c, y);
    } else {
      return fail("its bounds must be scalars");
    }
    if (!bound)
      return false;
    if (i == 1) {
      y = tryCreate<nn::MaxOp>(y, bound);
    } else {
      Value above = tryCreate<nn::CmpOp>(nn::CmpPredicate::gt, y, bound);
      y = above ? tryCreate<nn::SelectOp>(above, bound, y) : Value();
    }
    if (!y)
      return false;
  }
  return define(n, y);
}

bool Importer::clip(const Node &n) {
  if (!knownAttributes(n, {}))
    return false;
  Value x = n.inputs.empty() ? Value() : activation(n.inputs[0]);
  if (!x)
    return n.inputs.empty() ? fail("expected an input") : false;
  std::optional<double> lo, hi;
  for (size_t i = 1; i < 3 && i < n.inputs.size(); ++i) {
    if (n.inputs[i].empty())
      continue;
    if (options.forward && values.count(n.inputs[i]))
      return clipByInputs(n, x);
    std::optional<double> bound = scalar(n.inputs[i]);
    if (!bound || !std::isfinite(*bound))
      return fail("its bounds must be constant finite scalars");
    (i == 1 ? lo : hi) = bound;
  }
  if (lo && hi && *lo > *hi)
    return fail("min is above max");
  return define(n, clamp(x, lo, hi));
}

// LeakyRelu: x where x > 0, else alpha * x (PyTorch's gradient: alpha at 0).
bool Importer::leakyRelu(const Node &n) {
  if (!knownAttributes(n, {"alpha"}))
    return false;
  Value x = n.inputs.size() == 1 ? activation(n.inputs[0]) : Value();
  if (!x)
    return n.inputs.size() == 1 ? false : fail("expected one input");
  auto alpha = floatAttr(n, "alpha", 0.01);
  if (!alpha)
    return false;
  if (!std::isfinite(*alpha))
    return fail("alpha must be finite");
  Value a = scalarLike(*alpha, x);
  Value scaled = a ? tryCreate<nn::MulOp>(x, a) : Value();
  Value zero = scaled ? scalarLike(0.0, x) : Value();
  Value positive = zero ? tryCreate<nn::CmpOp>(nn::CmpPredicate::gt, x, zero) : Value();
  return define(n, positive ? tryCreate<nn::SelectOp>(positive, x, scaled) : Value());
}

// Pow of an activation by a constant whole exponent from 1 to 4 (StarReLU's
// square): products.
bool Importer::power(const Node &n) {
  if (!knownAttributes(n, {}))
    return false;
  if (n.inputs.size() != 2)
    return fail("expected two inputs");
  Value x = activation(n.inputs[0]);
  if (!x)
    return false;
  // A one-element constant of no higher rank than x (a higher one would
  // raise the result's rank, as numpy broadcasts); not a trained one.
  std::optional<double> p =
      initializers.count(n.inputs[1]) && initializers[n.inputs[1]]->type == ElementType::Float
          ? std::nullopt
          : scalar(n.inputs[1], llvm::cast<RankedTensorType>(x.getType()).getRank());
  if (!p || !(*p == 1 || *p == 2 || *p == 3 || *p == 4))
    return fail("the exponent must be a constant 1, 2, 3 or 4");
  Value y = x;
  for (int i = 1; y && i < static_cast<int>(*p); ++i)
    y = tryCreate<nn::MulOp>(y, x);
  return define(n, y);
}

// HardSigmoid: clamp(alpha * x + beta, 0, 1); HardSwish: x * HardSigmoid(x)
// with alpha 1/6 and beta 1/2.
bool Importer::hardSigmoid(const Node &n, bool swish) {
  if (!knownAttributes(n, swish ? std::initializer_list<const char *>{}
                                : std::initializer_list<const char *>{"alpha", "beta"}))
    return false;
  Value x = n.inputs.size() == 1 ? activation(n.inputs[0]) : Value();
  if (!x)
    return n.inputs.size() == 1 ? false : fail("expected one input");
  auto alpha = swish ? std::optional<double>(1.0 / 6.0) : floatAttr(n, "alpha", 0.2);
  auto beta = swish ? std::optional<double>(0.5) : floatAttr(n, "beta", 0.5);
  if (!alpha || !beta)
    return false;
  Value a = scalarLike(*alpha, x);
  Value scaled = a ? tryCreate<nn::MulOp>(x, a) : Value();
  Value bias = scaled ? scalarLike(*beta, x) : Value();
  Value shifted = bias ? tryCreate<nn::AddOp>(scaled, bias) : Value();
  Value gate = shifted ? clamp(shifted, 0.0, 1.0) : Value();
  if (!gate)
    return false;
  return define(n, swish ? tryCreate<nn::MulOp>(x, gate) : gate);
}

} // namespace onnx_import
} // namespace graphc
