//===- ModelStats.cpp - parameter, MAC and FLOP counts of a model ---------===//
//
// Per-op costs, by output (or input) element and for the whole batch:
//   conv2d       MACs = out_elems * (C / groups) * KH * KW; bias 1 FLOP/out elem
//   linear       MACs = N * in * out;                        bias 1 FLOP/out elem
//   matmul       MACs = batch * M * N * K
//   batch_norm   8 FLOPs/elem (mean 1, variance 3, normalize 2, affine 2)
//   elementwise  1 FLOP/elem (relu, add, ..., cast, select, cmp); dropout 2
//   max_pool2d   KH*KW - 1 compares/out elem; avg_pool2d KH*KW adds + 1 div
//   global_avg   1 add/in elem + 1 div/out elem; reduce_* 1 FLOP/in elem
//   softmax_ce   5 FLOPs/logit (max, sub, exp, sum, scale); the per-row log ignored
//
//===----------------------------------------------------------------------===//

#include "compiler/Analysis/ModelStats.h"

#include "dialects/nn/IR/NNOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;

namespace graphc {
namespace {

/// Counts stay below 2^62 so that 2 * MACs + other FLOPs fits in int64.
constexpr int64_t kMaxCount = int64_t(1) << 62;

/// a * b, or -1 when it leaves [0, kMaxCount]; callers report -1 as overflow.
int64_t checkedMul(int64_t a, int64_t b) {
  int64_t product;
  if (a < 0 || b < 0 || llvm::MulOverflow(a, b, product) || product > kMaxCount)
    return -1;
  return product;
}

int64_t numElements(Value value) {
  return llvm::cast<RankedTensorType>(value.getType()).getNumElements();
}

int64_t windowArea(ArrayRef<int64_t> window) { return window[0] * window[1]; }

/// MACs and other FLOPs of one op, for its whole batch.
std::pair<int64_t, int64_t> opCost(Operation *op) {
  int64_t out = op->getNumResults() == 1 ? numElements(op->getResult(0)) : 0;
  return llvm::TypeSwitch<Operation *, std::pair<int64_t, int64_t>>(op)
      .Case([&](nn::Conv2DOp conv) {
        auto filter = llvm::cast<RankedTensorType>(conv.getFilter().getType());
        int64_t perOutput = filter.getDimSize(1) * filter.getDimSize(2) *
                            filter.getDimSize(3);
        return std::make_pair(checkedMul(out, perOutput), conv.getBias() ? out : 0);
      })
      .Case([&](nn::LinearOp linear) {
        auto weight = llvm::cast<RankedTensorType>(linear.getWeight().getType());
        return std::make_pair(checkedMul(out, weight.getDimSize(1)),
                              linear.getBias() ? out : 0);
      })
      .Case([&](nn::MatmulOp matmul) {
        auto lhs = llvm::cast<RankedTensorType>(matmul.getLhs().getType());
        int64_t k = matmul.getTransposeA() ? lhs.getDimSize(lhs.getRank() - 2)
                                           : lhs.getDimSize(lhs.getRank() - 1);
        return std::make_pair(checkedMul(out, k), int64_t(0));
      })
      .Case([&](nn::BatchNormOp) { return std::make_pair(int64_t(0), checkedMul(8, out)); })
      .Case([&](nn::DropoutOp) { return std::make_pair(int64_t(0), 2 * out); })
      .Case([&](nn::MaxPool2DOp pool) {
        return std::make_pair(int64_t(0),
                              checkedMul(windowArea(pool.getWindow()) - 1, out));
      })
      .Case([&](nn::AvgPool2DOp pool) {
        return std::make_pair(int64_t(0), checkedMul(windowArea(pool.getWindow()), out));
      })
      .Case([&](nn::GlobalAvgPoolOp pool) {
        return std::make_pair(int64_t(0), numElements(pool.getInput()) + out);
      })
      .Case<nn::ReduceSumOp, nn::ReduceMeanOp, nn::ReduceMaxOp>([&](auto reduce) {
        return std::make_pair(int64_t(0), numElements(reduce.getInput()));
      })
      .Case([&](nn::SoftmaxCrossEntropyOp loss) {
        return std::make_pair(int64_t(0), checkedMul(5, numElements(loss.getLogits())));
      })
      .Case<nn::ReluOp, nn::NegOp, nn::ExpOp, nn::LogOp, nn::RsqrtOp, nn::SigmoidOp, nn::ErfOp,
            nn::AddOp, nn::SubOp, nn::MulOp, nn::DivOp, nn::MaxOp, nn::SelectOp, nn::CmpOp,
            nn::CastOp>([&](Operation *) { return std::make_pair(int64_t(0), out); })
      .Default([](Operation *) { return std::make_pair(int64_t(0), int64_t(0)); });
}

/// "layer1.0.conv1.weight" -> "layer1.0.conv1".
std::string layerName(StringRef variable) {
  for (StringRef suffix : {".weight", ".bias"})
    if (variable.ends_with(suffix))
      return variable.drop_back(suffix.size()).str();
  return variable.str();
}

} // namespace

FailureOr<ModelStats> computeModelStats(ModuleOp module) {
  ModelStats stats;
  llvm::StringMap<int64_t> parameterSizes;
  for (auto param : module.getOps<nn::ParameterOp>()) {
    stats.parameters += param.getNumElements();
    ++stats.parameterTensors;
    parameterSizes[param.getSymName()] = param.getNumElements();
  }
  for (auto state : module.getOps<nn::StateOp>()) {
    stats.stateElements += state.getNumElements();
    ++stats.stateTensors;
  }

  auto forward = module.lookupSymbol<func::FuncOp>("forward");
  if (!forward || forward.isExternal())
    return module.emitError("the model has no func.func @forward with a body");
  auto images = llvm::dyn_cast<RankedTensorType>(forward.getArgumentTypes()[0]);
  if (!images || images.getRank() == 0 || ShapedType::isDynamic(images.getDimSize(0)))
    return forward.emitError("counting costs needs a static batch size; run "
                             "graphc-set-batch-size first");
  stats.batchSize = images.getDimSize(0);

  for (Operation &op : forward.getBody().front()) {
    if (llvm::isa<nn::LoadOp, nn::ConstantOp, func::ReturnOp>(op))
      continue;
    for (Value result : op.getResults()) {
      auto type = llvm::dyn_cast<RankedTensorType>(result.getType());
      if (!type || !type.hasStaticShape())
        return op.emitError("counting costs needs static shapes, got ")
               << result.getType();
      int64_t bytes = checkedMul(type.getNumElements(),
                                 std::max<int64_t>(1, type.getElementTypeBitWidth() / 8));
      if (bytes < 0 || llvm::AddOverflow(stats.activationBytes, bytes,
                                         stats.activationBytes))
        return op.emitError("the activations of this batch overflow graphc's "
                            "64-bit counters; use a smaller --batch-size");
    }
    LayerStats layer;
    layer.op = &op;
    for (Value operand : op.getOperands()) {
      auto load = operand.getDefiningOp<nn::LoadOp>();
      if (!load)
        continue;
      auto size = parameterSizes.find(load.getVariable());
      if (size == parameterSizes.end())
        continue; // state, e.g. batch-norm running statistics
      if (layer.name.empty())
        layer.name = layerName(load.getVariable());
      layer.parameters += size->second;
    }
    std::tie(layer.macs, layer.otherFlops) = opCost(&op);
    if (layer.macs < 0 || layer.otherFlops < 0 ||
        llvm::AddOverflow(stats.macs, layer.macs, stats.macs) ||
        llvm::AddOverflow(stats.otherFlops, layer.otherFlops, stats.otherFlops) ||
        stats.macs > kMaxCount || stats.otherFlops > kMaxCount)
      return op.emitError("the forward cost of this batch overflows graphc's "
                          "64-bit counters; use a smaller --batch-size");
    stats.layers.push_back(std::move(layer));
  }
  return stats;
}

} // namespace graphc
