//===- Importer.h - the state of one ONNX import (private) ------*- C++ -*-===//
//
// Private to compiler/Import: the importer's state, shared by OnnxImport.cpp
// (the walk over the graph, variables, attributes, the module) and
// OnnxOps.cpp (each ONNX op as nn ops). OnnxImport.h says what is imported.
//
//===----------------------------------------------------------------------===//

#ifndef GRAPHC_COMPILER_IMPORT_IMPORTER_H
#define GRAPHC_COMPILER_IMPORT_IMPORTER_H

#include "compiler/Import/OnnxImport.h"
#include "compiler/Import/OnnxModel.h"
#include "dialects/nn/IR/NNOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Verifier.h"

#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

namespace graphc {
namespace onnx_import {
using namespace mlir;

using onnx_model::Attribute;
using onnx_model::ElementType;
using onnx_model::Node;
using onnx_model::Tensor;

/// `axis` of a rank-`rank` tensor, negative counting from the end; nullopt
/// when out of range.
inline std::optional<int64_t> normalizedAxis(int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank)
    return std::nullopt;
  return axis < 0 ? axis + rank : axis;
}

class Importer {
public:
  Importer(MLIRContext &context, const onnx_model::Model &model,
           const OnnxImportOptions &options)
      : context(context), model(model), options(options), b(&context) {}

  /// The module, or null with `error` set.
  OwningOpRef<ModuleOp> run();
  /// run()'s inference model (options.forward): @infer.
  OwningOpRef<ModuleOp> runInference(Location fileLoc, OwningOpRef<ModuleOp> owned);
  std::string error;
  /// Whether the error is one a fixed batch size would avoid.
  bool needsFixedBatch = false;
  /// The initializers declared as nn.parameter or nn.state, in order.
  std::vector<const Tensor *> declared;

private:
  // The error of the node being imported ("" when none).
  bool fail(const std::string &message) {
    if (error.empty())
      error = (node ? where(*node) + ": " : std::string()) + message;
    return false;
  }
  // An error the open batch causes: the graph merges it with other dims or
  // moves it from dim 0. A fixed batch (OnnxImportOptions::batch) imports it.
  bool failBatch(const std::string &message) {
    needsFixedBatch = true;
    return fail(message + (options.batch ? std::string()
                                         : " (graphc import --batch N fixes the batch size)"));
  }
  static std::string where(const Node &n) {
    return "node " + std::to_string(n.index) + " '" + onnx_model::shown(n.name) + "' (" +
           onnx_model::shown(n.opType) + ")";
  }

  bool importNode(const Node &n);
  bool conv(const Node &n);
  bool batchNorm(const Node &n);
  bool pool(const Node &n, bool max);
  bool gemm(const Node &n);
  bool dropout(const Node &n);
  // Stochastic depth (drop path) as torchvision exports it: RandomUniformLike
  // of a [N, 1, ..., 1] tensor, Less than the survival rate, Cast to float,
  // Div by the rate. findStochasticDepth() finds each chain by its shape
  // before the walk; the walk imports it whole at its Div as nn.dropout of
  // ones [N, 1, ..., 1] (a mask per sample, scaled by 1 / rate).
  struct StochasticDepth {
    int noise = 0;         // the RandomUniformLike
    int less = 0;          // the Less
    int shapeOf = -1;      // the ConstantOfShape (or Expand of a scalar) shaping the noise, if any
  };
  void findStochasticDepth();
  // The chains' noises (float32, not imported): a CastLike may take their type.
  std::set<std::string> drawnFloats;
  // The node writing each name (the first, if several do), by index.
  std::map<std::string, int> producerOf;
  bool stochasticDepth(const Node &n, const StochasticDepth &chain);
  // Input `index` of `n`, if given, as a trained bias vector (zeros), or a
  // constant one of `outputs` values the graph computes (none if zero);
  // false after an error.
  bool optionalBias(const Node &n, size_t index, Value &bias, int64_t outputs);
  bool binary(const Node &n);
  bool clip(const Node &n);
  bool clipByInputs(const Node &n, Value x);
  bool hardSigmoid(const Node &n, bool swish);
  bool leakyRelu(const Node &n);
  bool power(const Node &n);
  // BatchNormalization of rank 2 or 3, or without running statistics (a
  // weight standardized); InstanceNormalization.
  bool batchNormOtherRank(const Node &n, Value x, double epsilon, double momentum);
  // Inference-form batch norm by statistics the graph computes (inputs 3 and 4).
  Value byGivenStatistics(const Node &n, Value x, double epsilon, int64_t channels);
  bool instanceNorm(const Node &n);
  // The node's 'epsilon' (default 1e-5), positive and finite; nullopt
  // after an error.
  std::optional<double> positiveEpsilon(const Node &n);
  // x normalized over `dims` (biased variance), times scale plus bias
  // (either may be null), both broadcast along dim 1.
  Value normalized(Value x, ArrayRef<int64_t> dims, double epsilon, Value scale, Value bias);
  // A float input read as a per-channel vector: an activation, a parameter
  // (`init`) or a constant.
  Value channelVector(const std::string &name, nn::Initializer init);
  bool resize(const Node &n);
  // OnnxShapes.cpp: shape arithmetic folded at import, and the data movers.
  bool foldsToInts(const Node &n);
  bool foldInts(const Node &n);
  // A folded vector, or an integer constant of rank 0 or 1.
  std::optional<std::vector<int64_t>> knownInts(const std::string &name);
  bool concat(const Node &n);
  bool slice(const Node &n);
  // `axis` of `x` in its rank, a dim of fixed size (not the open batch);
  // nullopt after an error.
  std::optional<int64_t> fixedAxis(Value x, int64_t axis);
  bool split(const Node &n);
  // SplitToSequence's parts, each read by a SequenceAt (torch.export's chunk).
  bool splitToSequence(const Node &n);
  bool sequenceAt(const Node &n);
  std::map<std::string, std::vector<Value>> sequences;
  bool transpose(const Node &n);
  bool reshape(const Node &n);
  bool reduce(const Node &n, bool sum);
  // OnnxTransformer.cpp: the ops vision transformers add.
  bool foldsToScalar(const Node &n);
  bool foldScalar(const Node &n);
  bool matmul(const Node &n);
  bool softmax(const Node &n);
  bool layerNorm(const Node &n);
  bool expand(const Node &n);
  bool squeeze(const Node &n, bool unsqueeze);
  bool pad(const Node &n);
  bool castActivation(const Node &n);
  // Opset 20's Gelu, as the ops PyTorch's TorchScript exporter writes for it.
  bool gelu(const Node &n);
  // CastLike: a Cast to its second input's element type.
  bool castLike(const Node &n);
  // GatherND of rows (indices [..., 1]): a Gather.
  bool gatherND(const Node &n);
  // Reshapes to [-1] of a value with the open batch (reshape), by name: a
  // Gather of every element in order from one (unflatten) restores the batch.
  std::map<std::string, Value> flattenedWithBatch;
  // `n` imported as `as`, a node of another op standing for it; errors name `n`.
  bool importAs(const Node &n, const Node &as);
public:
  // A constant tensor's value, as OnnxConstants.cpp folds it.
  struct Folded {
    std::vector<int64_t> dims;
    std::vector<double> values;
    ElementType type = ElementType::Float;
  };

private:
  // Gather of constant indices (`given`, or its second input's).
  bool gatherOne(const Node &n, const Folded *given = nullptr);
  bool unflatten(const Node &n, Value x, const Folded *indices);
  // OnnxConstants.cpp: nodes of constants alone, evaluated at import.
  bool foldsToTensor(const Node &n);
  bool foldTensor(const Node &n);
  // ScatterND's rows: each row's flat offset into `dims` and the elements it
  // replaces (`slice`); nullopt after an error.
  std::optional<std::vector<int64_t>> scatterOffsets(const std::vector<int64_t> &dims,
                                                     const Folded &indices,
                                                     const Folded &updates, int64_t &slice);
  bool scatterInto(const Node &n);
  // ScatterND of an activation's updates that replace all of x, in order.
  bool scatterWhole(const Node &n, Value x, const Folded &indices, Value updates);
  // `name`'s value if it is a constant: a Constant node, an integer or
  // boolean initializer, a folded tensor, vector (without the batch) or
  // float scalar; null otherwise.
  const Folded *constantTensor(const std::string &name);
  // A float constant tensor as an nn.constant (f32); null if it is none.
  Value constantValue(const std::string &name);
  // `x` reduced over `dims` (mean, or max) and broadcast back to its shape.
  Value keptReduction(Value x, ArrayRef<int64_t> dims, bool max);
  // `x` reshaped to `shape` (a dynamic entry: the open batch, dim 0).
  Value reshaped(Value x, ArrayRef<int64_t> shape);
  // An activation, or an initializer as a trained parameter.
  Value operand(const std::string &name);
  // [start, end) of `dim`, numpy's rules (negative from the end, clamped);
  // null after an error.
  Value sliceOf(Value x, int64_t dim, int64_t start, int64_t end);
  // Every `step`-th element of `dim` from the first (a strided slice).
  Value everyNth(Value x, int64_t dim, int64_t step);

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
  std::optional<double> scalar(const std::string &name, int64_t maxRank = 8);
  std::string unusableName(const std::string &name) const;
  // The first node reading `name`, if any (its extra outputs: none may).
  std::optional<int> readerOf(const std::string &name) const {
    auto it = firstReader.find(name);
    return it == firstReader.end() ? std::nullopt : std::optional<int>(it->second);
  }
  bool define(const Node &n, Value value, size_t output = 0);

  // Attribute accessors: the default when absent, an error when of another kind.
  std::optional<int64_t> intAttr(const Node &n, const char *name, int64_t fallback);
  std::optional<double> floatAttr(const Node &n, const char *name, double fallback);
  std::optional<std::vector<int64_t>> intsAttr(const Node &n, const char *name,
                                               std::vector<int64_t> fallback);
  std::optional<std::string> stringAttr(const Node &n, const char *name,
                                        const std::string &fallback);
  // Pads as nn writes them ([top, bottom, left, right]), from ONNX's
  // [top, left, bottom, right] and auto_pad (NOTSET, VALID, or SAME_UPPER /
  // SAME_LOWER computed from `x`'s H and W and the window).
  std::optional<std::vector<int64_t>> pads(const Node &n, Value x, llvm::ArrayRef<int64_t> kernel,
                                           llvm::ArrayRef<int64_t> strides,
                                           llvm::ArrayRef<int64_t> dilations);
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
  std::map<std::string, int> firstReader;
  // Stochastic depth chains by their Div's index, and the nodes imported
  // with them (skipped where they stand).
  std::map<int, StochasticDepth> stochasticDepthAt;
  std::set<int> importedWithChain;
  std::map<std::string, const Tensor *> constants;  // Constant nodes' outputs
  // Integer vectors folded at import (shapes), the batch as kBatch.
  static constexpr int64_t kBatch = std::numeric_limits<int64_t>::min();
  std::map<std::string, std::vector<int64_t>> known;
  // The entries of `known` that are scalars (rank 0) in the file.
  std::set<std::string> scalarInts;
  // Float scalars folded at import (attention's scale from a shape).
  std::map<std::string, double> knownScalars;
  // Constant tensors folded at import, and constants read by the folder.
  std::map<std::string, Folded> tensors;
  int64_t foldedElements = 0;  // of the tensors folded (kMaxFoldedTotal)
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

} // namespace onnx_import
} // namespace graphc

#endif // GRAPHC_COMPILER_IMPORT_IMPORTER_H
