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

#include "compiler/Import/OnnxModel.h"
#include "dialects/nn/IR/NNDialect.h"
#include "dialects/nn/IR/NNOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <type_traits>

using namespace mlir;

namespace graphc {
namespace {

using onnx_model::Attribute;
using onnx_model::ElementType;
using onnx_model::Node;
using onnx_model::Tensor;

class Importer {
public:
  Importer(MLIRContext &context, const onnx_model::Model &model,
           const OnnxImportOptions &options)
      : context(context), model(model), options(options), b(&context) {}

  /// The module, or null with `error` set.
  OwningOpRef<ModuleOp> run();
  std::string error;
  /// The initializers declared as nn.parameter or nn.state, in order.
  std::vector<const Tensor *> declared;

private:
  // The error of the node being imported ("" when none).
  bool fail(const std::string &message) {
    if (error.empty())
      error = (node ? where(*node) + ": " : std::string()) + message;
    return false;
  }
  static std::string where(const Node &n) {
    return "node " + std::to_string(n.index) + " '" + n.name + "' (" + n.opType + ")";
  }

  bool importNode(const Node &n);
  bool conv(const Node &n);
  bool batchNorm(const Node &n);
  bool pool(const Node &n, bool max);
  bool gemm(const Node &n);
  bool dropout(const Node &n);
  bool binary(const Node &n);
  bool clip(const Node &n);
  bool hardSigmoid(const Node &n, bool swish);

  // A float32 scalar as a tensor of `like`'s shape.
  Value scalarLike(double value, Value like);
  // `v` broadcast to `like`'s shape (numpy's rules, `v` of no higher rank).
  Value broadcastTo(Value v, Value like);
  // min(max(x, lo), hi), either bound optional: PyTorch's clamp (and ReLU6).
  Value clamp(Value x, std::optional<double> lo, std::optional<double> hi);

  // The activation named `name` (an op's result or the images).
  Value activation(const std::string &name);
  // The initializer `name` as a trained parameter or as state, declared on
  // first use, loaded in @forward.
  Value variable(const std::string &name, bool trained, nn::Initializer init,
                 std::optional<int64_t> rank = std::nullopt);
  // The value of a scalar initializer or Constant, if it has one.
  std::optional<double> scalar(const std::string &name);
  bool define(const Node &n, Value value, size_t output = 0);

  // Attribute accessors: the default when absent, an error when of another kind.
  std::optional<int64_t> intAttr(const Node &n, const char *name, int64_t fallback);
  std::optional<double> floatAttr(const Node &n, const char *name, double fallback);
  std::optional<std::vector<int64_t>> intsAttr(const Node &n, const char *name,
                                               std::vector<int64_t> fallback);
  std::optional<std::string> stringAttr(const Node &n, const char *name,
                                        const std::string &fallback);
  // Pads as nn writes them ([top, bottom, left, right]), from ONNX's
  // [top, left, bottom, right] and auto_pad (NOTSET or VALID).
  std::optional<std::vector<int64_t>> pads(const Node &n);
  bool knownAttributes(const Node &n, std::initializer_list<const char *> names);

  template <typename OpTy, typename... Args>
  Value tryCreate(Args &&...args);

  MLIRContext &context;
  const onnx_model::Model &model;
  const OnnxImportOptions &options;
  OpBuilder b;
  ModuleOp module;
  Block *body = nullptr;  // @forward's
  Location loc = UnknownLoc::get(&context);
  const Node *node = nullptr;
  std::map<std::string, Value> values;
  std::map<std::string, const Tensor *> initializers;
  std::map<std::string, const Tensor *> constants;  // Constant nodes' outputs
  std::map<std::string, std::pair<Value, bool>> variables;  // loaded, trained
  int64_t parameterCount = 0;
};

// Whether an op keeps its inherent attributes as properties (inference then
// reads them from there).
template <typename T, typename = void>
struct HasProperties : std::false_type {};
template <typename T>
struct HasProperties<T, std::void_t<typename T::Properties>> : std::true_type {};

template <typename OpTy, typename... Args>
Value Importer::tryCreate(Args &&...args) {
  OperationState state(loc, OpTy::getOperationName());
  OpTy::build(b, state, TypeRange{}, std::forward<Args>(args)...);
  if constexpr (HasProperties<OpTy>::value)
    state.getOrAddProperties<typename OpTy::Properties>();
  SmallVector<Type> types;
  if (failed(OpTy::inferReturnTypes(&context, loc, state.operands,
                                    state.attributes.getDictionary(&context),
                                    state.getRawProperties(), state.regions, types))) {
    fail("graphc's " + OpTy::getOperationName().str() + " does not take these operands");
    return nullptr;
  }
  state.addTypes(types);
  Operation *op = b.create(state);
  if (failed(verify(op))) {
    fail("graphc's " + OpTy::getOperationName().str() + " refuses these attributes");
    return nullptr;
  }
  return op->getResult(0);
}

std::optional<int64_t> Importer::intAttr(const Node &n, const char *name, int64_t fallback) {
  auto it = n.attributes.find(name);
  if (it == n.attributes.end())
    return fallback;
  if (it->second.kind != Attribute::Kind::Int) {
    fail(std::string("attribute '") + name + "' is not an integer");
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

// 1 - x without the binary residue (1 - 0.9 is 0.09999999999999998).
double complement(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.15g", 1.0 - x);
  return std::strtod(text, nullptr);
}

std::optional<double> Importer::floatAttr(const Node &n, const char *name, double fallback) {
  auto it = n.attributes.find(name);
  if (it == n.attributes.end())
    return fallback;
  if (it->second.kind != Attribute::Kind::Float || !std::isfinite(it->second.f)) {
    fail(std::string("attribute '") + name + "' is not a finite float");
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
    fail(std::string("attribute '") + name + "' is not a list of integers");
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
    fail(std::string("attribute '") + name + "' is not a string");
    return std::nullopt;
  }
  return it->second.s;
}

bool Importer::knownAttributes(const Node &n, std::initializer_list<const char *> names) {
  for (const auto &[name, attribute] : n.attributes)
    if (std::none_of(names.begin(), names.end(), [&](const char *known) { return name == known; }))
      return fail("attribute '" + name + "' is not supported");
  return true;
}

std::optional<std::vector<int64_t>> Importer::pads(const Node &n) {
  std::optional<std::string> autoPad = stringAttr(n, "auto_pad", "NOTSET");
  if (!autoPad)
    return std::nullopt;
  if (*autoPad != "NOTSET" && *autoPad != "VALID") {
    fail("auto_pad " + *autoPad + " is not supported (export with explicit pads)");
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
  if (initializers.count(name) || constants.count(name))
    fail("input '" + name + "' is a constant where graphc takes an activation");
  else
    fail("input '" + name + "' is not defined before it is used");
  return nullptr;
}

Value Importer::variable(const std::string &name, bool trained, nn::Initializer init,
                         std::optional<int64_t> rank) {
  auto it = variables.find(name);
  if (it != variables.end()) {
    if (it->second.second != trained) {
      fail("initializer '" + name + "' is used both as a trained parameter and as state");
      return nullptr;
    }
    return it->second.first;
  }
  auto tensor = initializers.find(name);
  if (tensor == initializers.end()) {
    fail("input '" + name + "' must be an initializer (a " +
         (trained ? std::string("trained parameter") : std::string("statistic")) +
         "), not an activation or a missing tensor");
    return nullptr;
  }
  const Tensor &t = *tensor->second;
  if (t.type != ElementType::Float) {
    fail("initializer '" + name + "' is " + onnx_model::elementTypeName(t.type) +
         "; graphc imports float32 models");
    return nullptr;
  }
  if (rank && static_cast<int64_t>(t.dims.size()) != *rank) {
    fail("initializer '" + name + "' has rank " + std::to_string(t.dims.size()) + ", not " +
         std::to_string(*rank));
    return nullptr;
  }
  for (int64_t d : t.dims)
    if (d < 1) {
      fail("initializer '" + name + "' has an empty dimension");
      return nullptr;
    }
  if (name == "forward" || name.empty()) {
    fail("initializer name '" + name + "' is reserved");
    return nullptr;
  }
  auto type = RankedTensorType::get(t.dims, b.getF32Type());
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

std::optional<double> Importer::scalar(const std::string &name) {
  const Tensor *t = nullptr;
  if (auto it = initializers.find(name); it != initializers.end())
    t = it->second;
  else if (auto it = constants.find(name); it != constants.end())
    t = it->second;
  if (!t || !t->hasValues || t->values.size() != 1)
    return std::nullopt;
  return t->values.front();
}

bool Importer::define(const Node &n, Value value, size_t output) {
  if (!value)
    return false;
  if (output >= n.outputs.size() || n.outputs[output].empty())
    return true;
  if (!values.emplace(n.outputs[output], value).second)
    return fail("output '" + n.outputs[output] + "' is defined twice");
  return true;
}

bool Importer::conv(const Node &n) {
  if (!knownAttributes(n, {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"}))
    return false;
  if (n.inputs.size() < 2)
    return fail("expected an input and a weight");
  Value x = activation(n.inputs[0]);
  if (!x)
    return false;
  Value w = variable(n.inputs[1], true, nn::Initializer::kaiming_normal_fan_out, 4);
  if (!w)
    return false;
  Value bias;
  if (n.inputs.size() > 2 && !n.inputs[2].empty())
    if (!(bias = variable(n.inputs[2], true, nn::Initializer::zeros, 1)))
      return false;
  auto strides = intsAttr(n, "strides", {1, 1});
  auto dilations = intsAttr(n, "dilations", {1, 1});
  auto group = intAttr(n, "group", 1);
  auto padding = pads(n);
  if (!strides || !dilations || !group || !padding)
    return false;
  auto kernel = intsAttr(n, "kernel_shape", {});
  if (!kernel)
    return false;
  auto wShape = llvm::cast<RankedTensorType>(w.getType()).getShape();
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
    if (!n.outputs[i].empty())
      for (const Node &other : model.nodes)
        for (const std::string &input : other.inputs)
          if (input == n.outputs[i])
            return fail("output '" + input + "' (a running statistic) is read by node " +
                        std::to_string(other.index) + "; graphc updates the statistics in place");
  auto epsilon = floatAttr(n, "epsilon", 1e-5);
  auto momentum = floatAttr(n, "momentum", 0.9);
  auto training = intAttr(n, "training_mode", 0);
  if (!epsilon || !momentum || !training)
    return false;
  if (!(*epsilon > 0) || !(*momentum >= 0 && *momentum < 1))
    return fail("epsilon must be > 0 and momentum in [0, 1)");
  Value x = activation(n.inputs[0]);
  if (!x)
    return false;
  if (llvm::cast<RankedTensorType>(x.getType()).getRank() != 4)
    return fail("graphc's batch norm takes NCHW activations (rank 4)");
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
          : !knownAttributes(n, {"auto_pad", "ceil_mode", "count_include_pad", "kernel_shape",
                                 "pads", "strides"}))
    return false;
  if (n.outputs.size() > 1 && !n.outputs[1].empty())
    for (const Node &other : model.nodes)
      for (const std::string &input : other.inputs)
        if (input == n.outputs[1])
          return fail("its indices output is read by node " + std::to_string(other.index) +
                      "; graphc's max pooling has none");
  Value x = n.inputs.empty() ? Value() : activation(n.inputs[0]);
  if (!x)
    return n.inputs.empty() ? fail("expected an input") : false;
  auto kernel = intsAttr(n, "kernel_shape", {});
  auto strides = intsAttr(n, "strides", {1, 1});
  auto ceil = intAttr(n, "ceil_mode", 0);
  auto dilations = intsAttr(n, "dilations", {1, 1});
  auto padding = pads(n);
  auto includePad = intAttr(n, "count_include_pad", 0);
  if (!kernel || !strides || !ceil || !dilations || !padding || !includePad)
    return false;
  if (kernel->size() != 2 || strides->size() != 2 ||
      llvm::any_of(*kernel, [](int64_t k) { return k < 1 || k > (1 << 20); }) ||
      llvm::any_of(*strides, [](int64_t s) { return s < 1 || s > (1 << 20); }))
    return fail("kernel_shape and strides must be two positive sizes (a 2-D pooling)");
  if (*ceil != 0)
    return fail("ceil_mode 1 is not supported (graphc's pooling rounds the output size down)");
  if (llvm::any_of(*dilations, [](int64_t d) { return d != 1; }))
    return fail("dilated pooling is not supported");
  auto stridesAttr = (*strides)[0] == 1 && (*strides)[1] == 1
                         ? DenseI64ArrayAttr()
                         : b.getDenseI64ArrayAttr(*strides);
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
  if (*alpha != 1.0 || *beta != 1.0 || *transA != 0)
    return fail("only alpha = beta = 1 without transA is supported (a linear layer)");
  if (*transB != 1)
    return fail("only transB = 1 is supported (a linear layer's [out, in] weight, as "
                "PyTorch exports it)");
  if (n.inputs.size() < 2)
    return fail("expected an input and a weight");
  Value x = activation(n.inputs[0]);
  if (!x)
    return false;
  if (llvm::cast<RankedTensorType>(x.getType()).getRank() != 2)
    return fail("the input must have rank 2");
  Value w = variable(n.inputs[1], true, nn::Initializer::kaiming_uniform, 2);
  if (!w)
    return false;
  Value bias;
  if (n.inputs.size() > 2 && !n.inputs[2].empty())
    if (!(bias = variable(n.inputs[2], true, nn::Initializer::zeros, 1)))
      return false;
  return define(n, tryCreate<nn::LinearOp>(x, w, bias));
}

bool Importer::dropout(const Node &n) {
  if (!knownAttributes(n, {"seed"}))
    return false;
  Value x = n.inputs.empty() ? Value() : activation(n.inputs[0]);
  if (!x)
    return n.inputs.empty() ? fail("expected an input") : false;
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
    for (const Node &other : model.nodes)
      for (const std::string &input : other.inputs)
        if (input == n.outputs[1])
          return fail("its mask output is read by node " + std::to_string(other.index));
  if (ratio == 0)
    return define(n, x);
  auto seed = intAttr(n, "seed", n.index + 1);
  if (!seed)
    return false;
  return define(n, tryCreate<nn::DropoutOp>(x, b.getF64FloatAttr(ratio),
                                            b.getI64IntegerAttr(std::llabs(*seed) % (int64_t(1) << 31))));
}

Value Importer::scalarLike(double value, Value like) {
  auto scalar = RankedTensorType::get({}, b.getF32Type());
  Value c = tryCreate<nn::ConstantOp>(
      DenseElementsAttr::get(scalar, static_cast<float>(value)).cast<ElementsAttr>());
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
  for (int64_t d = 0; d < from.getRank(); ++d)
    dims.push_back(to.getRank() - from.getRank() + d);
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
  auto operand = [&](const std::string &name, Value other) -> Value {
    if (values.count(name))
      return values[name];
    if (std::optional<double> c = scalar(name)) {
      if (!other)
        return nullptr;
      return scalarLike(*c, other);
    }
    return activation(name);
  };
  Value lhs = values.count(n.inputs[0]) ? values[n.inputs[0]] : Value();
  Value rhs = values.count(n.inputs[1]) ? values[n.inputs[1]] : Value();
  if (!lhs && !rhs)
    return fail("graphc takes at least one activation operand");
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
      int64_t c = 1;
      for (int64_t d : t.getShape())
        c *= ShapedType::isDynamic(d) ? 1 << 20 : d;
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
    std::optional<double> bound = scalar(n.inputs[i]);
    if (!bound || !std::isfinite(*bound))
      return fail("its bounds must be constant finite scalars");
    (i == 1 ? lo : hi) = bound;
  }
  if (lo && hi && *lo > *hi)
    return fail("min is above max");
  return define(n, clamp(x, lo, hi));
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

bool Importer::importNode(const Node &n) {
  node = &n;
  loc = NameLoc::get(b.getStringAttr(where(n)),
                     FileLineColLoc::get(b.getStringAttr(model.path), 0, 0));
  const std::string &op = n.opType;
  if (op == "Constant") {
    auto it = n.attributes.find("value");
    if (it == n.attributes.end() || it->second.kind != Attribute::Kind::Tensor)
      return fail("only a tensor 'value' is supported");
    if (n.outputs.empty())
      return fail("expected an output");
    constants[n.outputs[0]] = &it->second.tensor;
    return true;
  }
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
  if (op == "Relu" || op == "Identity") {
    if (!knownAttributes(n, {}))
      return false;
    Value x = n.inputs.size() == 1 ? activation(n.inputs[0]) : Value();
    if (!x)
      return n.inputs.size() == 1 ? false : fail("expected one input");
    return define(n, op == "Relu" ? tryCreate<nn::ReluOp>(x) : x);
  }
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
    if (*axis != 1)
      return fail("only axis 1 is supported (the batch stays the first dim)");
    Value x = n.inputs.size() == 1 ? activation(n.inputs[0]) : Value();
    if (!x)
      return n.inputs.size() == 1 ? false : fail("expected one input");
    return define(n, tryCreate<nn::FlattenOp>(x, b.getI64IntegerAttr(1)));
  }
  return fail("op " + op + " (opset " + std::to_string(model.opset) +
              ") is not supported by graphc import");
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

  for (const Tensor &t : model.initializers)
    initializers[t.name] = &t;
  if (model.inputs.size() != 1) {
    error = "the graph has " + std::to_string(model.inputs.size()) +
            " inputs besides its initializers; graphc imports classifiers of one image input";
    return nullptr;
  }
  if (model.outputs.size() != 1) {
    error = "the graph has " + std::to_string(model.outputs.size()) +
            " outputs; graphc imports classifiers of one output (the logits)";
    return nullptr;
  }
  const onnx_model::Value &images = model.inputs.front();
  if (images.type != ElementType::Float || !images.hasShape || images.dims.size() != 4 ||
      llvm::any_of(llvm::ArrayRef(images.dims).drop_front(),
                   [](int64_t d) { return d < 1 || d > (1 << 20); })) {
    error = "input '" + images.name +
            "' must be float32 images [N, C, H, W] with C, H and W fixed";
    return nullptr;
  }
  SmallVector<int64_t> imageShape(images.dims.begin(), images.dims.end());
  imageShape[0] = ShapedType::kDynamic;
  auto imageType = RankedTensorType::get(imageShape, b.getF32Type());
  auto labelType = RankedTensorType::get({ShapedType::kDynamic}, b.getI32Type());
  b.setInsertionPointToEnd(module.getBody());
  auto forward = b.create<func::FuncOp>(
      fileLoc, "forward",
      b.getFunctionType({imageType, labelType}, {RankedTensorType::get({}, b.getF32Type())}));
  body = forward.addEntryBlock();
  values[images.name] = body->getArgument(0);
  b.setInsertionPointToEnd(body);

  for (const Node &n : model.nodes)
    if (!importNode(n))
      return nullptr;
  node = nullptr;
  loc = fileLoc;
  auto logits = values.find(model.outputs.front().name);
  if (logits == values.end()) {
    error = "output '" + model.outputs.front().name + "' is not an activation graphc computes";
    return nullptr;
  }
  auto logitsType = llvm::cast<RankedTensorType>(logits->second.getType());
  if (logitsType.getRank() != 2) {
    error = "output '" + model.outputs.front().name +
            "' must be logits [N, classes] (it has rank " +
            std::to_string(logitsType.getRank()) + ")";
    return nullptr;
  }
  Value loss = tryCreate<nn::SoftmaxCrossEntropyOp>(
      logits->second, body->getArgument(1), b.getF64FloatAttr(options.labelSmoothing));
  if (!loss)
    return nullptr;
  b.create<func::ReturnOp>(fileLoc, loss);
  // Every op was verified as it was made; the module's symbols now too.
  if (failed(verify(module))) {
    if (error.empty())
      error = "the imported module does not verify";
    return nullptr;
  }
  return owned;
}

} // namespace

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
  Importer importer(context, model, options);
  OwningOpRef<ModuleOp> module = importer.run();
  if (!module) {
    error = importer.error.empty() ? "import failed" : importer.error;
    return nullptr;
  }
  if (weights) {
    weights->clear();
    for (const Tensor *t : importer.declared) {
      uint64_t count = 1;
      for (int64_t d : t->dims)
        count *= static_cast<uint64_t>(d);
      if (t->float32Bytes.size() != count * 4) {
        error = "initializer '" + t->name + "' does not hold the " + std::to_string(count) +
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
