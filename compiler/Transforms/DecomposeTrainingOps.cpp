//===- DecomposeTrainingOps.cpp - batch norm and dropout for training -----===//
//
// Implements --graphc-decompose-training-ops: rewrites the training-mode
// nn.batch_norm and nn.dropout of @forward into reductions and elementwise ops,
// so autodiff needs no rule of its own for them and fusion sees their
// elementwise parts.
//
//===----------------------------------------------------------------------===//

#include "compiler/Transforms/Passes.h"

#include "compiler/Transforms/BuildUtils.h"
#include "dialects/dist/IR/DistOps.h"
#include "dialects/nn/IR/NNOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"

#define DEBUG_TYPE "graphc-decompose-training-ops"

namespace graphc {
#define GEN_PASS_DEF_DECOMPOSETRAININGOPS
#include "compiler/Transforms/Passes.h.inc"
} // namespace graphc

using namespace mlir;

namespace graphc {
namespace {

/// The nn.state a batch-norm running statistic is loaded from.
FailureOr<StringRef> runningStatistic(nn::BatchNormOp bn, Value value,
                                      StringRef which) {
  auto load = value.getDefiningOp<nn::LoadOp>();
  if (load && SymbolTable::lookupNearestSymbolFrom<nn::StateOp>(
                  bn, load.getVariableAttr()))
    return load.getVariable();
  return bn.emitError("the running ")
         << which << " of a training batch norm must be an nn.load of an nn.state";
}

/// Algorithm (per channel c over the reduced dims R = {N, H, W}, n = |R|):
///   1) mean = sum_R(x) / n; xc = x - mean; var = sum_R(xc^2) / n (biased);
///   2) y = xc * (scale * rsqrt(var + eps)) + shift;
///   3) running_mean += momentum * (mean - running_mean);
///      running_var += momentum * (var * n / (n - 1) - running_var)
///      (unbiased, as PyTorch), written back with nn.assign.
/// Synchronized (`worldSize` set: the loaded @graphc.world_size): mean and var
/// are each averaged across ranks right after their reduction, and n counts
/// the global batch, n * world size.
LogicalResult decomposeBatchNorm(OpBuilder &b, nn::BatchNormOp bn, Value worldSize) {
  Location loc = bn.getLoc();
  Value x = bn.getInput();
  auto type = llvm::cast<RankedTensorType>(x.getType());
  if (!type.hasStaticShape())
    return bn.emitError("training batch norm needs static shapes; run "
                        "graphc-set-batch-size first");
  if (type.getElementType() != llvm::cast<RankedTensorType>(bn.getScale().getType())
                                   .getElementType())
    return bn.emitError("training batch norm with ")
           << type.getElementType() << " input and f32 parameters is not supported yet";
  FailureOr<StringRef> meanName = runningStatistic(bn, bn.getRunningMean(), "mean");
  if (failed(meanName))
    return failure();
  FailureOr<StringRef> varName = runningStatistic(bn, bn.getRunningVar(), "variance");
  if (failed(varName))
    return failure();

  SmallVector<int64_t> dims = type.getRank() == 4 ? SmallVector<int64_t>{0, 2, 3}
                                                  : SmallVector<int64_t>{0};
  int64_t count = type.getNumElements() / type.getDimSize(1);
  DenseI64ArrayAttr reduced = b.getDenseI64ArrayAttr(dims);

  auto global = [&](Value perRank) -> Value {
    if (!worldSize)
      return perRank;
    return b.create<dist::AllreduceOp>(loc, perRank, dist::Reduction::mean);
  };
  Value mean = global(b.create<nn::ReduceMeanOp>(loc, x, reduced, UnitAttr()));
  Value centered = b.create<nn::SubOp>(loc, x, broadcastChannels(b, loc, mean, x));
  Value squares = b.create<nn::MulOp>(loc, centered, centered);
  Value var = global(b.create<nn::ReduceMeanOp>(loc, squares, reduced, UnitAttr()));
  Value eps = splatLike(b, loc, var, bn.getEpsilon().convertToDouble());
  Value inv = b.create<nn::RsqrtOp>(loc, b.create<nn::AddOp>(loc, var, eps));
  Value factor = b.create<nn::MulOp>(loc, bn.getScale(), inv);
  Value normalized =
      b.create<nn::MulOp>(loc, centered, broadcastChannels(b, loc, factor, x));
  Value y = b.create<nn::AddOp>(loc, normalized,
                                broadcastChannels(b, loc, bn.getShift(), x));

  double momentum = bn.getMomentum().convertToDouble();
  auto update = [&](Value old, Value batch, StringRef name) {
    Value delta = b.create<nn::SubOp>(loc, batch, old);
    Value step = b.create<nn::MulOp>(loc, delta, splatLike(b, loc, old, momentum));
    b.create<nn::AssignOp>(loc, name, b.create<nn::AddOp>(loc, old, step));
  };
  update(bn.getRunningMean(), mean, *meanName);
  // Bessel's correction; a batch of one element per channel keeps the biased one.
  double bessel = count > 1 ? double(count) / double(count - 1) : 1.0;
  Value besselFactor = splatLike(b, loc, var, bessel);
  if (worldSize) {
    // n_global / (n_global - 1), n_global = count * world size (>= 1 rank).
    Value global = b.create<nn::MulOp>(
        loc, worldSize, scalarConstant(b, loc, b.getF32Type(), double(count)));
    Value ratio = b.create<nn::DivOp>(
        loc, global,
        b.create<nn::MaxOp>(loc,
                            b.create<nn::SubOp>(loc, global,
                                                scalarConstant(b, loc, b.getF32Type(), 1.0)),
                            scalarConstant(b, loc, b.getF32Type(), 1.0)));
    besselFactor = b.create<nn::BroadcastOp>(loc, ratio, var, b.getDenseI64ArrayAttr({}));
  }
  Value unbiased = b.create<nn::MulOp>(loc, var, besselFactor);
  update(bn.getRunningVar(), unbiased, *varName);

  bn.getResult().replaceAllUsesWith(y);
  bn.erase();
  return success();
}

struct DecomposeTrainingOpsPass
    : impl::DecomposeTrainingOpsBase<DecomposeTrainingOpsPass> {
  using DecomposeTrainingOpsBase::DecomposeTrainingOpsBase;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    FailureOr<func::FuncOp> found = lookupModelFunction(module, "forward");
    if (failed(found))
      return signalPassFailure();
    func::FuncOp forward = *found;
    SmallVector<Operation *> ops;
    forward.walk([&](Operation *op) {
      if (llvm::isa<nn::BatchNormOp, nn::DropoutOp>(op))
        ops.push_back(op);
    });
    OpBuilder b(module.getContext());
    Value step, worldSize;
    for (Operation *op : ops) {
      b.setInsertionPoint(op);
      if (auto bn = llvm::dyn_cast<nn::BatchNormOp>(op)) {
        if (syncBn && !worldSize) {
          // Declared last, so the other states keep their initializers' streams.
          auto scalar = RankedTensorType::get({}, b.getF32Type());
          if (!module.lookupSymbol(kWorldSizeState)) {
            OpBuilder::InsertionGuard guard(b);
            b.setInsertionPointToEnd(module.getBody());
            b.create<nn::StateOp>(module.getLoc(), kWorldSizeState, scalar,
                                  nn::Initializer::ones, /*init_value=*/nullptr);
          }
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPointToStart(&forward.getBody().front());
          worldSize = b.create<nn::LoadOp>(bn.getLoc(), scalar, kWorldSizeState);
        }
        if (failed(decomposeBatchNorm(b, bn, worldSize)))
          return signalPassFailure();
        continue;
      }
      // Training dropout: x * mask, the mask keyed by seed and step counter.
      auto dropout = llvm::cast<nn::DropoutOp>(op);
      if (dropout.getRate().isZero()) {
        dropout.getResult().replaceAllUsesWith(dropout.getInput());
        dropout.erase();
        continue;
      }
      if (!step) {
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(&forward.getBody().front());
        step = loadStepCounter(b, dropout.getLoc(), module);
      }
      Value mask = b.create<nn::DropoutMaskOp>(
          dropout.getLoc(), dropout.getInput(), step, /*offset=*/Value(), dropout.getRateAttr(),
          dropout.getSeedAttr());
      Value y = b.create<nn::MulOp>(dropout.getLoc(), dropout.getInput(), mask);
      dropout.getResult().replaceAllUsesWith(y);
      dropout.erase();
    }
  }
};

} // namespace
} // namespace graphc
