//===- BuildEvalStep.cpp - the inference-mode evaluation step -------------===//
//
// Implements --graphc-build-eval-step: adds `@eval_step(images, labels) ->
// (logits, correct)` beside @forward, so the runtime can measure test accuracy
// with the same compiled plan that trains; and --graphc-build-infer, the
// `@infer` of an inference-only plan (graphc compile --forward).
//
//===----------------------------------------------------------------------===//

#include "compiler/Transforms/Passes.h"

#include "compiler/Transforms/BuildUtils.h"
#include "dialects/nn/IR/NNOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"

#define DEBUG_TYPE "graphc-build-eval-step"

namespace graphc {
#define GEN_PASS_DEF_BUILDEVALSTEP
#define GEN_PASS_DEF_BUILDINFER
#include "compiler/Transforms/Passes.h.inc"
} // namespace graphc

using namespace mlir;

namespace graphc {
namespace {

/// y = x * factor + offset with factor = scale * rsqrt(running_var + eps) and
/// offset = shift - running_mean * factor, both per channel: the running
/// statistics replace the batch's.
Value inferenceBatchNorm(OpBuilder &b, nn::BatchNormOp bn) {
  Location loc = bn.getLoc();
  Value eps = splatLike(b, loc, bn.getRunningVar(), bn.getEpsilon().convertToDouble());
  Value inv = b.create<nn::RsqrtOp>(loc, b.create<nn::AddOp>(loc, bn.getRunningVar(), eps));
  Value factor = b.create<nn::MulOp>(loc, bn.getScale(), inv);
  Value offset = b.create<nn::SubOp>(
      loc, bn.getShift(), b.create<nn::MulOp>(loc, bn.getRunningMean(), factor));
  Value input = bn.getInput();
  Value scaled = b.create<nn::MulOp>(loc, input, broadcastChannels(b, loc, factor, input));
  return b.create<nn::AddOp>(loc, scaled, broadcastChannels(b, loc, offset, input));
}

/// Replaces each batch norm of `func` by its running-statistics form and
/// each dropout by its input.
void useInferenceForms(func::FuncOp func) {
  SmallVector<Operation *> ops;
  func.walk([&](Operation *op) {
    if (llvm::isa<nn::BatchNormOp, nn::DropoutOp>(op))
      ops.push_back(op);
  });
  OpBuilder b(func);
  for (Operation *op : ops) {
    b.setInsertionPoint(op);
    Value replacement = llvm::isa<nn::DropoutOp>(op)
                            ? op->getOperand(0)
                            : inferenceBatchNorm(b, llvm::cast<nn::BatchNormOp>(op));
    op->getResult(0).replaceAllUsesWith(replacement);
    op->erase();
  }
}

/// Algorithm: 1) clone @forward as @eval_step; 2) replace each batch norm by
/// its running-statistics form and each dropout by its input; 3) replace the
/// loss by the logits and the count of rows whose argmax equals the label.
struct BuildEvalStepPass : impl::BuildEvalStepBase<BuildEvalStepPass> {
  using BuildEvalStepBase::BuildEvalStepBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    FailureOr<func::FuncOp> found = lookupModelFunction(module, "forward");
    if (failed(found))
      return signalPassFailure();
    func::FuncOp forward = *found;
    OpBuilder b(forward);
    b.setInsertionPointAfter(forward);
    auto eval = llvm::cast<func::FuncOp>(b.clone(*forward));
    eval.setSymName("eval_step");

    useInferenceForms(eval);

    Operation *terminator = eval.getBody().front().getTerminator();
    auto loss = terminator->getOperand(0).getDefiningOp<nn::SoftmaxCrossEntropyOp>();
    if (!loss) {
      forward.emitError("@forward must return the result of nn.softmax_cross_entropy");
      return signalPassFailure();
    }
    b.setInsertionPoint(terminator);
    Location loc = loss.getLoc();
    Value logits = loss.getLogits();
    Value predicted = b.create<nn::ArgmaxOp>(loc, logits, b.getI64IntegerAttr(1));
    Value labels = loss.getLabels();
    if (!llvm::cast<RankedTensorType>(labels.getType()).getElementType().isInteger(64))
      labels = b.create<nn::CastOp>(loc, labels, TypeAttr::get(b.getI64Type()));
    Value hit = b.create<nn::CmpOp>(loc, nn::CmpPredicate::eq, predicted, labels);
    Value hits = b.create<nn::CastOp>(loc, hit, TypeAttr::get(b.getI64Type()));
    Value correct = b.create<nn::ReduceSumOp>(loc, hits, b.getDenseI64ArrayAttr({0}),
                                              /*keep_dims=*/UnitAttr());
    b.create<func::ReturnOp>(loc, ValueRange{logits, correct});
    terminator->erase();
    loss.erase();
    eval.setFunctionType(b.getFunctionType(
        eval.getArgumentTypes(), {logits.getType(), correct.getType()}));
    if (microBatches < 1) {
      module.emitError("graphc-build-eval-step: micro-batches must be positive, got ")
          << static_cast<int64_t>(microBatches);
      return signalPassFailure();
    }
    if (microBatches > 1 && failed(evaluateInSlices(eval)))
      return signalPassFailure();
  }

  /// The step's batch in micro-batches: their logits concatenated in order,
  /// their hits summed.
  LogicalResult evaluateInSlices(func::FuncOp eval) {
    FailureOr<MicroBatches> split = splitMicroBatches(eval, microBatches);
    if (failed(split))
      return failure();
    Operation *terminator = eval.getBody().front().getTerminator();
    OpBuilder b(terminator);
    Location loc = terminator->getLoc();
    SmallVector<Value> logits;
    Value correct;
    for (ArrayRef<Value> results : split->results) {
      logits.push_back(results[0]);
      correct = correct ? b.create<nn::AddOp>(loc, correct, results[1]).getResult() : results[1];
    }
    Value all = b.create<nn::ConcatOp>(loc, logits, /*dim=*/0);
    terminator->setOperands({all, correct});
    eval.setFunctionType(
        b.getFunctionType(eval.getArgumentTypes(), {all.getType(), correct.getType()}));
    return success();
  }
};

/// Algorithm: a training model's @forward becomes `@infer(images) -> logits`
/// (its labels argument and loss dropped); an inference model's @infer (what
/// graphc import --forward writes) is kept; either way batch norm takes its
/// running-statistics form and dropout is the identity.
struct BuildInferPass : impl::BuildInferBase<BuildInferPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto forward = module.lookupSymbol<func::FuncOp>("forward");
    auto infer = module.lookupSymbol<func::FuncOp>("infer");
    if (!forward == !infer || (forward && forward.isExternal()) ||
        (infer && infer.isExternal())) {
      module.emitError("graphc-build-infer needs a func.func @forward (a training model) or "
                       "@infer (an inference model), not both");
      return signalPassFailure();
    }
    if (infer) {
      useInferenceForms(infer);
      return;
    }
    Block &body = forward.getBody().front();
    Operation *terminator = body.getTerminator();
    auto loss = terminator->getNumOperands() == 1
                    ? terminator->getOperand(0).getDefiningOp<nn::SoftmaxCrossEntropyOp>()
                    : nn::SoftmaxCrossEntropyOp();
    if (!loss || forward.getNumArguments() != 2 || loss.getLabels() != forward.getArgument(1) ||
        !loss->hasOneUse() || !forward.getArgument(1).hasOneUse()) {
      forward.emitError("@forward must return the result of nn.softmax_cross_entropy on its "
                        "labels, which nothing else reads");
      return signalPassFailure();
    }
    OpBuilder b(terminator);
    Value logits = loss.getLogits();
    b.create<func::ReturnOp>(loss.getLoc(), logits);
    terminator->erase();
    loss.erase();
    forward.eraseArgument(1);
    forward.setFunctionType(b.getFunctionType(forward.getArgumentTypes(), {logits.getType()}));
    forward.setSymName("infer");
    useInferenceForms(forward);
  }
};

} // namespace
} // namespace graphc
