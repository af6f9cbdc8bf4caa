//===- OnnxImport.cpp - ONNX model -> nn training model -------------------===//
//
// Walks the graph's nodes in order (ONNX's checker has made sure they are
// topologically sorted), keeping the nn value of every ONNX tensor name.
// Every op is created through tryCreate, which infers its result type first
// and turns a refusal (shapes that do not fit) into the node's error instead
// of the fatal error an inferring builder would raise.
//
//===----------------------------------------------------------------------===//

#include "compiler/Import/OnnxImport.h"

#include "compiler/Import/Importer.h"

#include <algorithm>
#include "dialects/nn/IR/NNDialect.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/Support/ConvertUTF.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <numeric>

using namespace mlir;

namespace graphc {
namespace onnx_import {

std::optional<int64_t> Importer::intAttr(const Node &n, const char *name, int64_t fallback) {
  auto it = n.attributes.find(name);
  if (it == n.attributes.end())
    return fallback;
  if (it->second.kind != Attribute::Kind::Int) {
    fail(std::string("attribute '") + onnx_model::shown(name) + "' is not an integer");
    return std::nullopt;
  }
  return it->second.i;
}

// ONNX's float attributes are float32: the shortest decimal that rounds to
// the same float, as a double (1e-5, not 9.9999997473787516e-6).
double shortestDecimal(double value) {
  const float f = static_cast<float>(value);
  char text[32];
  for (int digits = 1; digits <= 9; ++digits) {
    std::snprintf(text, sizeof text, "%.*g", digits, static_cast<double>(f));
    if (static_cast<float>(std::strtod(text, nullptr)) == f)
      break;
  }
  return std::strtod(text, nullptr);
}

std::optional<double> Importer::floatAttr(const Node &n, const char *name, double fallback) {
  auto it = n.attributes.find(name);
  if (it == n.attributes.end())
    return fallback;
  if (it->second.kind != Attribute::Kind::Float || !std::isfinite(it->second.f)) {
    fail(std::string("attribute '") + onnx_model::shown(name) + "' is not a finite float");
    return std::nullopt;
  }
  return shortestDecimal(it->second.f);
}

std::optional<std::vector<int64_t>> Importer::intsAttr(const Node &n, const char *name,
                                                       std::vector<int64_t> fallback) {
  auto it = n.attributes.find(name);
  if (it == n.attributes.end())
    return fallback;
  if (it->second.kind != Attribute::Kind::Ints) {
    fail(std::string("attribute '") + onnx_model::shown(name) + "' is not a list of integers");
    return std::nullopt;
  }
  return it->second.ints;
}

std::optional<std::string> Importer::stringAttr(const Node &n, const char *name,
                                                const std::string &fallback) {
  auto it = n.attributes.find(name);
  if (it == n.attributes.end())
    return fallback;
  if (it->second.kind != Attribute::Kind::String) {
    fail(std::string("attribute '") + onnx_model::shown(name) + "' is not a string");
    return std::nullopt;
  }
  return it->second.s;
}

bool Importer::knownAttributes(const Node &n, std::initializer_list<const char *> names) {
  for (const auto &attribute : n.attributes) {
    const std::string &name = attribute.first;
    if (std::none_of(names.begin(), names.end(), [&](const char *known) { return name == known; }))
      return fail("attribute '" + onnx_model::shown(name) + "' is not supported");
  }
  return true;
}

std::optional<std::vector<int64_t>> Importer::pads(const Node &n, Value x,
                                                   llvm::ArrayRef<int64_t> kernel,
                                                   llvm::ArrayRef<int64_t> strides,
                                                   llvm::ArrayRef<int64_t> dilations) {
  std::optional<std::string> autoPad = stringAttr(n, "auto_pad", "NOTSET");
  if (!autoPad)
    return std::nullopt;
  if (*autoPad == "SAME_UPPER" || *autoPad == "SAME_LOWER") {
    // Output ceil(in / stride), the padding split evenly, the odd one at the
    // end (UPPER) or the start (LOWER).
    auto type = llvm::cast<RankedTensorType>(x.getType());
    if (type.getRank() != 4 || type.isDynamicDim(2) || type.isDynamicDim(3) ||
        kernel.size() != 2 || strides.size() != 2 || dilations.size() != 2) {
      fail("auto_pad " + *autoPad + " needs a 2-D op on static H and W");
      return std::nullopt;
    }
    auto inRange = [](llvm::ArrayRef<int64_t> v) {
      return llvm::all_of(v, [](int64_t x) { return x >= 1 && x <= (1 << 20); });
    };
    if (!inRange(kernel) || !inRange(strides) || !inRange(dilations)) {
      fail("kernel, strides and dilations must be in [1, 2^20]");
      return std::nullopt;
    }
    std::vector<int64_t> result(4);
    for (int axis = 0; axis < 2; ++axis) {
      const int64_t in = type.getDimSize(2 + axis), s = strides[axis];
      const int64_t out = (in + s - 1) / s;
      const int64_t span = (kernel[axis] - 1) * dilations[axis] + 1;
      const int64_t total = std::max<int64_t>(0, (out - 1) * s + span - in);
      const int64_t small = total / 2, large = total - small;
      result[2 * axis] = *autoPad == "SAME_UPPER" ? small : large;
      result[2 * axis + 1] = *autoPad == "SAME_UPPER" ? large : small;
    }
    return result;
  }
  if (*autoPad != "NOTSET" && *autoPad != "VALID") {
    fail("auto_pad " + *autoPad + " is not supported");
    return std::nullopt;
  }
  std::optional<std::vector<int64_t>> onnxPads = intsAttr(n, "pads", {0, 0, 0, 0});
  if (!onnxPads)
    return std::nullopt;
  if (*autoPad == "VALID")
    onnxPads = std::vector<int64_t>{0, 0, 0, 0};
  const std::vector<int64_t> &p = *onnxPads;
  if (p.size() != 4 || llvm::any_of(p, [](int64_t v) { return v < 0 || v > (1 << 20); })) {
    fail("pads must be four sizes in [0, 2^20] (a 2-D op)");
    return std::nullopt;
  }
  return std::vector<int64_t>{p[0], p[2], p[1], p[3]};
}

Value Importer::activation(const std::string &name) {
  auto it = values.find(name);
  if (it != values.end())
    return it->second;
  if (flattenedWithBatch.count(name)) {
    failBatch("'" + onnx_model::shown(name) +
              "' is a reshape to [-1], which merges the batch with the other dims");
    return nullptr;
  }
  // A float initializer read as a tensor (ViT's class token and position
  // embedding, a bias added by Add, a weight MatMul reads) is trained.
  if (auto init = initializers.find(name);
      init != initializers.end() && init->second->type == ElementType::Float &&
      !init->second->dims.empty())
    return variable(name, true,
                    init->second->dims.size() == 1 ? nn::Initializer::zeros
                                                   : nn::Initializer::xavier_uniform);
  // A float constant (Swin's attention mask, folded at import).
  if (Value constant = constantValue(name))
    return constant;
  if (auto c = constants.find(name); c != constants.end() && !known.count(name) &&
                                      !tensors.count(name)) {
    // A Constant node constantValue() could not take: say why.
    const Tensor &t = *c->second;
    if (t.type != ElementType::Float)
      fail("constant '" + onnx_model::shown(name) + "' is " + onnx_model::elementTypeName(t.type) +
           "; graphc takes float32 constants here");
    else if (std::any_of(t.dims.begin(), t.dims.end(),
                         [](int64_t d) { return d > onnx_model::kMaxFoldedIndices; }) ||
             static_cast<double>(std::accumulate(t.dims.begin(), t.dims.end(), 1.0,
                                                 std::multiplies<double>())) >
                 double(onnx_model::kMaxFoldedIndices))
      fail("constant '" + onnx_model::shown(name) + "' has more than 2^20 elements");
    else
      fail("constant '" + onnx_model::shown(name) + "' holds data of another size than its shape");
    return nullptr;
  }
  if (initializers.count(name) || constants.count(name) || known.count(name) ||
      tensors.count(name))
    fail("input '" + onnx_model::shown(name) + "' is a constant where graphc takes an activation");
  else
    fail("input '" + onnx_model::shown(name) + "' is not defined before it is used");
  return nullptr;
}

// Why a name cannot be a parameter's or statistic's, or "": graphc's own
// names (graphc.*, the optimizer's slots of another initializer, @forward),
// safetensors' __metadata__, and what is not printable UTF-8 (the rule of
// graphc-verify-model, which names become checkpoint keys under).
std::string Importer::unusableName(const std::string &name) const {
  if (name.empty())
    return "is empty";
  if (name == "forward" || name == "__metadata__" || name.rfind("graphc.", 0) == 0)
    return "is reserved (forward, __metadata__ and graphc.* are graphc's own)";
  for (const char *suffix : {".momentum_buffer", ".exp_avg", ".exp_avg_sq"}) {
    const size_t n = std::strlen(suffix);
    if (name.size() > n && name.compare(name.size() - n, n, suffix) == 0 &&
        initializers.count(name.substr(0, name.size() - n)))
      return "is the name graphc's optimizer gives a slot of '" +
             onnx_model::shown(name.substr(0, name.size() - n)) + "'";
  }
  const auto *bytes = reinterpret_cast<const llvm::UTF8 *>(name.data());
  if (llvm::any_of(name, [](char c) { return c >= 0 && c < 0x20; }) ||
      !llvm::isLegalUTF8String(&bytes, bytes + name.size()))
    return "is not printable UTF-8";
  return "";
}

Value Importer::variable(const std::string &name, bool trained, nn::Initializer init,
                         std::optional<int64_t> rank) {
  // An inference model takes weights as inputs too (ONNX's node tests do).
  if (options.forward && values.count(name)) {
    Value v = values[name];
    if (rank && llvm::cast<RankedTensorType>(v.getType()).getRank() != *rank) {
      fail("input '" + onnx_model::shown(name) + "' has rank " +
           std::to_string(llvm::cast<RankedTensorType>(v.getType()).getRank()) + ", not " +
           std::to_string(*rank));
      return nullptr;
    }
    return v;
  }
  auto it = variables.find(name);
  if (it != variables.end()) {
    if (it->second.second != trained) {
      fail("initializer '" + onnx_model::shown(name) +
           "' is used both as a trained parameter and as state");
      return nullptr;
    }
    // A parameter may be shared (its gradients add up); a running statistic
    // is updated by its batch norm, once.
    if (!trained) {
      fail("statistic '" + onnx_model::shown(name) +
           "' is used twice; each batch norm updates statistics of its own");
      return nullptr;
    }
    return it->second.first;
  }
  auto tensor = initializers.find(name);
  if (tensor == initializers.end()) {
    fail("input '" + onnx_model::shown(name) + "' must be an initializer (a " +
         (trained ? std::string("trained parameter") : std::string("statistic")) +
         "), not an activation or a missing tensor");
    return nullptr;
  }
  const Tensor &t = *tensor->second;
  if (t.type != ElementType::Float) {
    fail("initializer '" + onnx_model::shown(name) + "' is " + onnx_model::elementTypeName(t.type) +
         "; graphc imports float32 models");
    return nullptr;
  }
  if (rank && static_cast<int64_t>(t.dims.size()) != *rank) {
    fail("initializer '" + onnx_model::shown(name) + "' has rank " + std::to_string(t.dims.size()) + ", not " +
         std::to_string(*rank));
    return nullptr;
  }
  for (int64_t d : t.dims)
    if (d < 1) {
      fail("initializer '" + onnx_model::shown(name) + "' has an empty dimension");
      return nullptr;
    }
  if (std::string why = unusableName(name); !why.empty()) {
    fail("initializer name '" + onnx_model::shown(name) + "' " + why);
    return nullptr;
  }
  auto type = RankedTensorType::get(t.dims, b.getF32Type());
  // A frozen initializer (a float buffer PyTorch does not train, as Swin V2's
  // relative coordinates table: --freeze, or a buffer in torch.export's
  // signature): its values, a constant.
  if (trained && (model.torchBuffers.count(name) ||
                  llvm::any_of(options.frozen, [&](const llvm::GlobPattern &pattern) {
                    return pattern.match(name);
                  }))) {
    if (t.float32Bytes.size() != static_cast<size_t>(type.getNumElements()) * 4) {
      fail("frozen initializer '" + onnx_model::shown(name) + "' has no float32 values");
      return nullptr;
    }
    std::vector<float> data(static_cast<size_t>(type.getNumElements()));
    std::memcpy(data.data(), t.float32Bytes.data(), t.float32Bytes.size());
    Value constant =
        tryCreate<nn::ConstantOp>(DenseElementsAttr::get(type, ArrayRef<float>(data)));
    if (constant)
      variables[name] = {constant, trained};
    return constant;
  }
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(module.getBody(), std::prev(module.getBody()->end()));
    if (trained)
      b.create<nn::ParameterOp>(loc, name, type, init, /*init_value=*/nullptr);
    else
      b.create<nn::StateOp>(loc, name, type, init, /*init_value=*/nullptr);
  }
  Value loaded = b.create<nn::LoadOp>(loc, type, name);
  variables[name] = {loaded, trained};
  declared.push_back(&t);
  if (trained)
    parameterCount += type.getNumElements();
  return loaded;
}

std::optional<double> Importer::scalar(const std::string &name, int64_t maxRank) {
  if (auto it = knownScalars.find(name); it != knownScalars.end())
    return it->second;
  if (auto it = known.find(name); it != known.end())
    return it->second.size() == 1 && it->second[0] != kBatch
               ? std::optional<double>(static_cast<double>(it->second[0]))
               : std::nullopt;
  // A one-element tensor folded at import (a Cast of a constant).
  if (auto it = tensors.find(name); it != tensors.end())
    return it->second.values.size() == 1 && static_cast<int64_t>(it->second.dims.size()) <= maxRank
               ? std::optional<double>(it->second.values.front())
               : std::nullopt;
  const Tensor *t = nullptr;
  if (auto it = initializers.find(name); it != initializers.end())
    t = it->second;
  else if (auto it = constants.find(name); it != constants.end())
    t = it->second;
  if (!t || !t->hasValues || t->values.size() != 1 ||
      static_cast<int64_t>(t->dims.size()) > maxRank)
    return std::nullopt;
  return t->values.front();
}

bool Importer::define(const Node &n, Value value, size_t output) {
  if (!value)
    return false;
  if (output >= n.outputs.size() || n.outputs[output].empty())
    return true;
  if (!values.emplace(n.outputs[output], value).second)
    return fail("output '" + onnx_model::shown(n.outputs[output]) + "' is defined twice");
  return true;
}

bool Importer::importNode(const Node &n) {
  node = &n;
  loc = NameLoc::get(b.getStringAttr(where(n)),
                     FileLineColLoc::get(b.getStringAttr(model.path), 0, 0));
  const std::string &op = n.opType;
  if (importedWithChain.count(n.index))
    return true;
  if (auto chain = stochasticDepthAt.find(n.index); chain != stochasticDepthAt.end())
    return stochasticDepth(n, chain->second);
  if (op == "Constant") {
    auto it = n.attributes.find("value");
    if (it == n.attributes.end() || it->second.kind != Attribute::Kind::Tensor)
      return fail("only a tensor 'value' is supported");
    if (n.outputs.empty())
      return fail("expected an output");
    constants[n.outputs[0]] = &it->second.tensor;
    return true;
  }
  if (foldsToTensor(n))
    return foldTensor(n);
  if (foldsToScalar(n))
    return foldScalar(n);
  if (foldsToInts(n))
    return foldInts(n);
  if (op == "Conv")
    return conv(n);
  if (op == "BatchNormalization")
    return batchNorm(n);
  if (op == "MaxPool" || op == "AveragePool")
    return pool(n, op == "MaxPool");
  if (op == "Gemm")
    return gemm(n);
  if (op == "Dropout")
    return dropout(n);
  if (op == "Relu" || op == "Sigmoid" || op == "Identity" || op == "Exp" || op == "Log" ||
      op == "Neg") {
    if (!knownAttributes(n, {}))
      return false;
    Value x = n.inputs.size() == 1 ? activation(n.inputs[0]) : Value();
    if (!x)
      return n.inputs.size() == 1 ? false : fail("expected one input");
    return define(n, op == "Relu"      ? tryCreate<nn::ReluOp>(x)
                     : op == "Sigmoid" ? tryCreate<nn::SigmoidOp>(x)
                     : op == "Exp"     ? tryCreate<nn::ExpOp>(x)
                     : op == "Log"     ? tryCreate<nn::LogOp>(x)
                     : op == "Neg"     ? tryCreate<nn::NegOp>(x)
                                       : x);
  }
  if (op == "MatMul")
    return matmul(n);
  if (op == "Softmax")
    return softmax(n);
  if (op == "LayerNormalization")
    return layerNorm(n);
  if (op == "Erf") {
    if (!knownAttributes(n, {}))
      return false;
    Value x = n.inputs.size() == 1 ? activation(n.inputs[0]) : Value();
    if (!x)
      return n.inputs.size() == 1 ? false : fail("expected one input");
    return define(n, tryCreate<nn::ErfOp>(x));
  }
  if (op == "Expand")
    return expand(n);
  if (op == "Gather")
    return gatherOne(n);
  if (op == "Squeeze" || op == "Unsqueeze")
    return squeeze(n, op == "Unsqueeze");
  if (op == "Gelu")
    return gelu(n);
  if (op == "CastLike")
    return castLike(n);
  if (op == "GatherND")
    return gatherND(n);
  if (op == "Cast")
    return castActivation(n);
  if (op == "Pad")
    return pad(n);
  if (op == "Concat")
    return concat(n);
  if (op == "Slice")
    return slice(n);
  if (op == "Split")
    return split(n);
  if (op == "SplitToSequence")
    return splitToSequence(n);
  if (op == "SequenceAt")
    return sequenceAt(n);
  if (op == "Transpose")
    return transpose(n);
  if (op == "Reshape")
    return reshape(n);
  if (op == "ReduceMean" || op == "ReduceSum" || op == "ReduceL2")
    return reduce(n, op != "ReduceMean");
  if (op == "LeakyRelu")
    return leakyRelu(n);
  if (op == "Pow")
    return power(n);
  if (op == "ScatterND")
    return scatterInto(n);
  if (op == "InstanceNormalization")
    return instanceNorm(n);
  if (op == "Resize")
    return resize(n);
  if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div")
    return binary(n);
  if (op == "Clip")
    return clip(n);
  if (op == "HardSigmoid" || op == "HardSwish")
    return hardSigmoid(n, op == "HardSwish");
  if (op == "GlobalAveragePool") {
    Value x = n.inputs.size() == 1 ? activation(n.inputs[0]) : Value();
    if (!x)
      return n.inputs.size() == 1 ? false : fail("expected one input");
    auto type = llvm::cast<RankedTensorType>(x.getType());
    if (type.getRank() != 4)
      return fail("only NCHW inputs (rank 4) are supported");
    Value pooled = tryCreate<nn::GlobalAvgPoolOp>(x);
    if (!pooled)
      return false;
    // ONNX keeps the spatial dims, as size 1.
    return define(n, tryCreate<nn::ReshapeOp>(
                         pooled, b.getDenseI64ArrayAttr({-1, type.getDimSize(1), 1, 1})));
  }
  if (op == "Flatten") {
    if (!knownAttributes(n, {"axis"}))
      return false;
    auto axis = intAttr(n, "axis", 1);
    if (!axis)
      return false;
    Value x = n.inputs.size() == 1 ? activation(n.inputs[0]) : Value();
    if (!x)
      return n.inputs.size() == 1 ? false : fail("expected one input");
    auto type = llvm::cast<RankedTensorType>(x.getType());
    if (*axis != 1 && type.hasStaticShape() && *axis >= -type.getRank() &&
        *axis <= type.getRank()) {
      // An inference model's: [prod(dims before axis), prod(the rest)].
      const int64_t at = *axis < 0 ? *axis + type.getRank() : *axis;
      int64_t outer = 1;
      for (int64_t d = 0; d < at; ++d)
        outer *= type.getDimSize(d);
      return define(n, tryCreate<nn::ReshapeOp>(
                           x, b.getDenseI64ArrayAttr({outer, type.getNumElements() / outer})));
    }
    if (*axis != 1)
      return failBatch("axis " + std::to_string(*axis) +
                       " merges the batch with other dims, which graphc leaves open until "
                       "compile");
    return define(n, tryCreate<nn::FlattenOp>(x, b.getI64IntegerAttr(1)));
  }
  if (op == "RandomUniformLike" || op == "RandomUniform" || op == "RandomNormalLike" ||
      op == "RandomNormal" || op == "Bernoulli")
    return fail("op " + op + " (opset " + std::to_string(model.opset) +
                ") is not supported: graphc's randomness is dropout's and stochastic depth's "
                "(RandomUniformLike of a [N, 1, ..., 1] tensor, Less, Cast, Div, as torchvision "
                "exports it), and this random tensor is neither");
  return fail("op " + op + " (opset " + std::to_string(model.opset) +
              ") is not supported by graphc import");
}

/// The transposes that products now read through their flags (matmul()),
/// where nothing else reads them.
static void eraseUnreadTransposes(Block *body) {
  for (Operation &op : llvm::make_early_inc_range(llvm::reverse(*body)))
    if (llvm::isa<nn::TransposeOp>(op) && op.use_empty())
      op.erase();
}

OwningOpRef<ModuleOp> Importer::run() {
  context.getOrLoadDialect<nn::NNDialect>();
  context.getOrLoadDialect<func::FuncDialect>();
  // An op's own diagnostics (an inferring op that refuses its operands) are
  // the node's error.
  ScopedDiagnosticHandler capture(&context, [&](Diagnostic &diagnostic) {
    if (diagnostic.getSeverity() == DiagnosticSeverity::Error && error.empty())
      error = (node ? where(*node) + ": " : std::string()) + diagnostic.str();
    return success();
  });
  const Location fileLoc = FileLineColLoc::get(b.getStringAttr(model.path), 1, 1);
  OwningOpRef<ModuleOp> owned = ModuleOp::create(fileLoc);
  module = *owned;

  // A file with torch.export's signature: its float initializers that the
  // program has as neither parameters nor buffers are constants the
  // exporter computed (Swin's masks, a convolution's zero bias), read as
  // Constant nodes are; the parameters it folded into such constants
  // (batch norm into convolutions, transposed weights: torch.onnx.export's
  // optimizer, for inference) cannot be trained.
  for (const Node &n : model.nodes)
    for (const std::string &output : n.outputs)
      producerOf.emplace(output, n.index);
  std::set<std::string> initializerNames;
  for (const Tensor &t : model.initializers)
    initializerNames.insert(t.name);
  std::vector<std::string> folded;
  for (const std::string &name : model.torchParameters)
    if (!initializerNames.count(name))
      folded.push_back(name);
  for (const Tensor &t : model.initializers)
    if (model.hasTorchSignature && t.type == ElementType::Float &&
        !model.torchParameters.count(t.name) && !model.torchBuffers.count(t.name))
      constants[t.name] = &t;
    else
      initializers[t.name] = &t;
  if (!folded.empty() && !options.forward) {
    error = "the file lacks " + std::to_string(folded.size()) + " of the " +
            std::to_string(model.torchParameters.size()) +
            " parameters its torch.export signature names (";
    for (size_t i = 0; i < folded.size() && i < 3; ++i)
      error += (i ? ", '" : "'") + onnx_model::shown(folded[i]) + "'";
    error += std::string(folded.size() > 3 ? ", ..." : "") +
             "): torch.onnx.export's optimizer folded them into constants (batch norm into "
             "convolutions, transposed weights), which graphc cannot train; export with "
             "optimize=False to train the model, or import it with --forward for inference";
    return nullptr;
  }
  // A constant of the exporter's (so far, `constants` holds only those) of
  // a parameter's shape or its transpose's, read by a product or a
  // convolution (through copies, transposes and reshapes), is a parameter
  // its optimizer transposed or folded, though it kept the parameter too (a
  // tied weight).
  if (model.hasTorchSignature && !options.forward) {
    std::set<std::vector<int64_t>> parameterShapes;
    for (const Tensor &t : model.initializers)
      if (model.torchParameters.count(t.name)) {
        parameterShapes.insert(t.dims);
        parameterShapes.insert(std::vector<int64_t>(t.dims.rbegin(), t.dims.rend()));
      }
    auto foldedWeight = [&](std::string name) -> const Tensor * {
      static const char *const through[] = {"Identity", "Transpose", "Reshape", "Squeeze",
                                            "Unsqueeze", "Cast",      "CastLike", "Flatten",
                                            "Expand"};
      for (int hops = 0; hops < 16; ++hops) {
        // (A constant torch.export lifted from the module, a fixed matrix,
        // is the model's own.)
        if (auto c = constants.find(name);
            c != constants.end() && !model.torchConstants.count(name))
          return parameterShapes.count(c->second->dims) ? c->second : nullptr;
        auto p = producerOf.find(name);
        if (p == producerOf.end())
          return nullptr;
        const Node &m = model.nodes[p->second];
        if (m.inputs.empty() || std::none_of(std::begin(through), std::end(through),
                                             [&](const char *op) { return m.opType == op; }))
          return nullptr;
        name = m.inputs[0];
      }
      return nullptr;
    };
    // A parameter no node reads, beside a constant of its shape (an
    // initializer or a Constant node's), was replaced by that folded copy.
    std::set<std::string> read;
    for (const Node &n : model.nodes)
      read.insert(n.inputs.begin(), n.inputs.end());
    std::set<std::vector<int64_t>> constantShapes;
    for (const auto &[name, t] : constants)
      if (!model.torchConstants.count(name))
        constantShapes.insert(t->dims);
    for (const Node &n : model.nodes)
      if (n.opType == "Constant")
        for (const auto &[name, a] : n.attributes)
          if (a.kind == Attribute::Kind::Tensor && a.tensor.type == ElementType::Float)
            constantShapes.insert(a.tensor.dims);
    for (const Tensor &t : model.initializers)
      if (model.torchParameters.count(t.name) && !read.count(t.name) &&
          (constantShapes.count(t.dims) ||
           constantShapes.count(std::vector<int64_t>(t.dims.rbegin(), t.dims.rend())))) {
        error = "parameter '" + onnx_model::shown(t.name) +
                "' is read by no node, and a constant of its shape is: a copy "
                "torch.onnx.export's optimizer folded, which graphc cannot train; export with "
                "optimize=False to train the model, or import it with --forward for inference";
        return nullptr;
      }
    for (const Node &n : model.nodes) {
      if (n.opType != "Conv" && n.opType != "Gemm" && n.opType != "MatMul")
        continue;
      for (size_t i = n.opType == "Conv" ? 1 : 0; i < 2 && i < n.inputs.size(); ++i)
        if (const Tensor *t = foldedWeight(n.inputs[i])) {
          error = where(n) + ": its operand '" + onnx_model::shown(t->name) +
                  "' is an initializer of a parameter's shape that torch.export's signature "
                  "does not name as a parameter (torch.onnx.export's optimizer computes such "
                  "from parameters, which graphc cannot train): export with optimize=False "
                  "to train the model, or import it with --forward for inference";
          return nullptr;
        }
    }
  }
  for (const Node &n : model.nodes)
    for (const std::string &input : n.inputs)
      firstReader.emplace(input, n.index);
  findStochasticDepth();
  if (options.forward)
    return runInference(fileLoc, std::move(owned));
  if (model.inputs.size() != 1) {
    error = "the graph has " + std::to_string(model.inputs.size()) +
            " inputs besides its initializers; graphc imports classifiers of one image input";
    return nullptr;
  }
  // The logits: the one output, or the one named.
  const onnx_model::Value *logitsOutput = model.outputs.size() == 1 && options.logits.empty()
                                              ? &model.outputs.front()
                                              : nullptr;
  for (const onnx_model::Value &output : model.outputs)
    if (!options.logits.empty() && output.name == options.logits)
      logitsOutput = &output;
  if (!logitsOutput) {
    std::string names;
    for (const onnx_model::Value &output : model.outputs)
      names += (names.empty() ? "'" : ", '") + onnx_model::shown(output.name) + "'";
    error = options.logits.empty()
                ? "the graph has " + std::to_string(model.outputs.size()) + " outputs (" + names +
                      "); graphc trains one as the logits: name it with --logits"
                : "--logits '" + onnx_model::shown(options.logits) +
                      "' is not an output of the graph (" + names + ")";
    return nullptr;
  }
  // Only the nodes the logits need: an auxiliary classifier's are left out.
  std::vector<bool> needed(model.nodes.size(), false);
  {
    std::vector<std::string> pending{logitsOutput->name};
    while (!pending.empty()) {
      auto it = producerOf.find(pending.back());
      pending.pop_back();
      if (it == producerOf.end() || needed[it->second])
        continue;
      needed[it->second] = true;
      for (const std::string &input : model.nodes[it->second].inputs)
        if (!input.empty())
          pending.push_back(input);
    }
  }
  const onnx_model::Value &images = model.inputs.front();
  if (images.type != ElementType::Float || !images.hasShape || images.dims.size() != 4 ||
      llvm::any_of(llvm::ArrayRef(images.dims).drop_front(),
                   [](int64_t d) { return d < 1 || d > (1 << 20); })) {
    error = "input '" + onnx_model::shown(images.name) +
            "' must be float32 images [N, C, H, W] with C, H and W fixed";
    return nullptr;
  }
  SmallVector<int64_t> imageShape(images.dims.begin(), images.dims.end());
  const int64_t batch = options.batch > 0 ? options.batch : ShapedType::kDynamic;
  imageShape[0] = batch;
  auto imageType = RankedTensorType::get(imageShape, b.getF32Type());
  auto labelType = RankedTensorType::get({batch}, b.getI32Type());
  if (options.batch > 0)
    module->setAttr("graphc.fixed_batch", b.getI64IntegerAttr(options.batch));
  b.setInsertionPointToEnd(module.getBody());
  auto forward = b.create<func::FuncOp>(
      fileLoc, "forward",
      b.getFunctionType({imageType, labelType}, {RankedTensorType::get({}, b.getF32Type())}));
  body = forward.addEntryBlock();
  values[images.name] = body->getArgument(0);
  b.setInsertionPointToEnd(body);

  for (const Node &n : model.nodes)
    if (needed[static_cast<size_t>(&n - model.nodes.data())] && !importNode(n))
      return nullptr;
  node = nullptr;
  loc = fileLoc;
  auto logits = values.find(logitsOutput->name);
  if (logits == values.end()) {
    error = "output '" + onnx_model::shown(logitsOutput->name) + "' is not an activation graphc computes";
    return nullptr;
  }
  auto logitsType = llvm::cast<RankedTensorType>(logits->second.getType());
  if (logitsType.getRank() == 2 && options.batch > 0 && logitsType.getDimSize(0) != options.batch) {
    error = "output '" + onnx_model::shown(logitsOutput->name) + "' has " +
            std::to_string(logitsType.getDimSize(0)) + " rows, not the batch of " +
            std::to_string(options.batch) + ": the graph resizes or reduces the batch dim";
    return nullptr;
  }
  if (logitsType.getRank() != 2) {
    error = "output '" + onnx_model::shown(logitsOutput->name) +
            "' must be logits [N, classes] (it has rank " +
            std::to_string(logitsType.getRank()) + ")";
    return nullptr;
  }
  Value loss = tryCreate<nn::SoftmaxCrossEntropyOp>(
      logits->second, body->getArgument(1), b.getF64FloatAttr(options.labelSmoothing));
  if (!loss)
    return nullptr;
  b.create<func::ReturnOp>(fileLoc, loss);
  eraseUnreadTransposes(body);
  // A --freeze pattern that froze nothing is a mistake (a typo, a batch-norm
  // statistic, which is state and never trained).
  for (const auto &[pattern, text] : llvm::zip(options.frozen, options.frozenText))
    if (llvm::none_of(variables, [&](const std::pair<const std::string, std::pair<Value, bool>> &entry) {
          return entry.second.second && !entry.second.first.getDefiningOp<nn::LoadOp>() &&
                 pattern.match(entry.first);
        })) {
      error = "--freeze '" + text + "' matches no trained initializer the logits need";
      return nullptr;
    }
  // Training needs something to train (a signature naming only buffers, or
  // --freeze of everything, leaves nothing).
  if (llvm::none_of(variables, [](const std::pair<const std::string, std::pair<Value, bool>> &entry) {
        return entry.second.second && entry.second.first.getDefiningOp<nn::LoadOp>();
      })) {
    error = "the model has no parameter to train: every initializer the logits need is a "
            "constant or a statistic";
    return nullptr;
  }
  // Every op was verified as it was made; the module's symbols now too.
  if (failed(verify(module))) {
    if (error.empty())
      error = "the imported module does not verify";
    return nullptr;
  }
  return owned;
}

OwningOpRef<ModuleOp> Importer::runInference(Location fileLoc, OwningOpRef<ModuleOp> owned) {
  // @infer(inputs...) -> (outputs...), every shape as the file gives it.
  SmallVector<Type> inputTypes;
  const int64_t batch = options.batch > 0 ? options.batch : options.fallbackBatch;
  for (const onnx_model::Value &input : model.inputs) {
    int64_t count = 1;
    bool bounded = input.dims.size() <= 8;
    std::vector<int64_t> dims = input.dims;
    // A symbolic batch axis (an export's dynamic_axes) takes the batch size
    // given (graphc import --batch, graphc compile --batch-size).
    if (!dims.empty() && dims[0] < 0 && batch > 0)
      dims[0] = batch;
    for (int64_t d : dims)
      bounded = bounded && d >= 1 && d <= (1 << 20) && d <= (int64_t{1} << 31) / count &&
                (count *= d) > 0;
    if (input.type != ElementType::Float || !input.hasShape || !bounded) {
      error = "input '" + onnx_model::shown(input.name) +
              "' must be a float32 tensor of fixed, non-empty shape, at most 2^31 values and "
              "rank 8 (an inference model's shapes are the file's; a symbolic batch axis "
              "takes --batch)";
      return nullptr;
    }
    inputTypes.push_back(RankedTensorType::get(dims, b.getF32Type()));
  }
  if (model.outputs.empty()) {
    error = "the graph has no outputs";
    return nullptr;
  }
  b.setInsertionPointToEnd(module.getBody());
  auto infer = b.create<func::FuncOp>(fileLoc, "infer", b.getFunctionType(inputTypes, {}));
  body = infer.addEntryBlock();
  for (auto [i, input] : llvm::enumerate(model.inputs))
    if (!values.emplace(input.name, body->getArgument(static_cast<unsigned>(i))).second) {
      error = "input '" + onnx_model::shown(input.name) + "' is named twice";
      return nullptr;
    }
  b.setInsertionPointToEnd(body);
  for (const Node &n : model.nodes)
    if (!importNode(n))
      return nullptr;
  node = nullptr;
  loc = fileLoc;
  SmallVector<Value> results;
  for (const onnx_model::Value &output : model.outputs) {
    auto it = values.find(output.name);
    if (it == values.end()) {
      error = "output '" + onnx_model::shown(output.name) +
              "' is not an activation graphc computes (a constant or a shape)";
      return nullptr;
    }
    results.push_back(it->second);
  }
  b.create<func::ReturnOp>(fileLoc, results);
  eraseUnreadTransposes(body);
  infer.setFunctionType(b.getFunctionType(inputTypes, ValueRange(results).getTypes()));
  if (failed(verify(module))) {
    if (error.empty())
      error = "the imported module does not verify";
    return nullptr;
  }
  return owned;
}

} // namespace onnx_import

using onnx_import::Importer;
using onnx_import::Tensor;

OwningOpRef<ModuleOp> importOnnx(MLIRContext &context, llvm::StringRef path,
                                 const OnnxImportOptions &options, std::string &error,
                                 std::vector<ImportedWeight> *weights) {
  error.clear();
  if (!(options.labelSmoothing >= 0 && options.labelSmoothing < 1)) {
    error = "--label-smoothing must be in [0, 1)";
    return nullptr;
  }
  onnx_model::Model model;
  if (std::string why = onnx_model::readModel(path.str(), model); !why.empty()) {
    error = why;
    return nullptr;
  }
  if (options.batch < 0 || options.batch > (1 << 20)) {
    error = "--batch must be in [1, 2^20]";
    return nullptr;
  }
  std::optional<Importer> importer;
  importer.emplace(context, model, options);
  OwningOpRef<ModuleOp> module = importer->run();
  OnnxImportOptions fixed = options;
  if (!module && importer->needsFixedBatch && !options.batch && options.fallbackBatch > 0) {
    // The graph needs the batch size: import at the one compile uses.
    fixed.batch = options.fallbackBatch;
    importer.emplace(context, model, fixed);
    module = importer->run();
  }
  if (!module) {
    error = importer->error.empty() ? "import failed" : importer->error;
    return nullptr;
  }
  if (weights) {
    weights->clear();
    for (const Tensor *t : importer->declared) {
      uint64_t count = 1;
      for (int64_t d : t->dims)
        count *= static_cast<uint64_t>(d);
      if (t->float32Bytes.size() != count * 4) {
        error = "initializer '" + onnx_model::shown(t->name) + "' does not hold the " + std::to_string(count) +
                " float32 values its shape says";
        return nullptr;
      }
      weights->push_back({t->name, t->dims, t->float32Bytes});
    }
  }
  return module;
}

std::string safetensorsOf(const std::vector<ImportedWeight> &weights,
                          const std::vector<std::pair<std::string, std::string>> &metadata) {
  std::string header;
  llvm::raw_string_ostream os(header);
  llvm::json::OStream json(os);
  uint64_t offset = 0;
  json.object([&] {
    for (const ImportedWeight &w : weights) {
      json.attributeObject(w.name, [&] {
        json.attribute("dtype", "F32");
        json.attributeArray("shape", [&] {
          for (int64_t d : w.shape)
            json.value(d);
        });
        json.attributeArray("data_offsets", [&] {
          json.value(static_cast<int64_t>(offset));
          json.value(static_cast<int64_t>(offset + w.bytes.size()));
        });
      });
      offset += w.bytes.size();
    }
    json.attributeObject("__metadata__", [&] {
      for (const auto &[key, value] : metadata)
        json.attribute(key, value);
    });
  });
  os.flush();
  // The format pads the header with spaces to a multiple of 8 bytes.
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i)
    file[i] = static_cast<char>((static_cast<uint64_t>(header.size()) >> (8 * i)) & 0xff);
  file += header;
  for (const ImportedWeight &w : weights)
    file += w.bytes;
  return file;
}

} // namespace graphc
