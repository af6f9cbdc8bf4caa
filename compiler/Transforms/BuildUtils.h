//===- BuildUtils.h - small IR builders shared by the passes ----*- C++ -*-===//
//
// The model's functions, constants broadcast to a tensor's shape, per-channel
// broadcasts, and the step counter: what the passes look up and build over and
// over.
//
//===----------------------------------------------------------------------===//

#ifndef GRAPHC_COMPILER_TRANSFORMS_BUILDUTILS_H
#define GRAPHC_COMPILER_TRANSFORMS_BUILDUTILS_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

namespace graphc {

/// The symbol of the i64 step counter that dropout masks and the learning-rate
/// schedule read and the optimizer increments.
inline constexpr llvm::StringLiteral kStepCounter = "graphc.step";

/// Loss scaling's state (graphc-mixed-precision, FP16): the f32 scale the loss
/// is multiplied by, the i64 count of steps skipped because a gradient
/// overflowed, and (dynamic scaling) the i64 run of finite steps since the
/// scale last changed. graphrun reports the first two by these names.
inline constexpr llvm::StringLiteral kLossScaleState = "graphc.loss_scale";
inline constexpr llvm::StringLiteral kSkippedStepsState = "graphc.skipped_steps";
inline constexpr llvm::StringLiteral kGoodStepsState = "graphc.loss_scale_good_steps";

/// Gradient clipping's f32 record of the last applied step's gradient norm
/// (before clipping; a skipped step leaves it as it was). graphrun reports it
/// by this name.
inline constexpr llvm::StringLiteral kGradNormState = "graphc.grad_norm";

/// The weights' exponential moving average (graphc-optimizer's ema-decay):
/// `graphc.ema.X` averages X, and the i64 `graphc.ema_updates` counts the
/// updates (the first copies). graphrun evaluates @eval_ema_step on them.
inline constexpr llvm::StringLiteral kEmaPrefix = "graphc.ema.";
inline constexpr llvm::StringLiteral kEmaUpdatesState = "graphc.ema_updates";

/// The f32 scalar state holding the number of ranks of a data-parallel job,
/// which graphrun writes before the first step (synchronized batch norm's
/// Bessel correction counts the global batch with it).
inline constexpr llvm::StringLiteral kWorldSizeState = "graphc.world_size";

/// The i64 scalar state holding this process's rank in a data-parallel job,
/// which graphrun writes before the first step (dropout masks draw from the
/// rank's place in the global batch with it).
inline constexpr llvm::StringLiteral kRankState = "graphc.rank";

/// Unit attribute graphc-autodiff puts on the constant d(loss) = 1 that seeds
/// backward; loss scaling replaces it with the scale.
inline constexpr llvm::StringLiteral kLossSeedAttr = "graphc.loss_seed";

/// Module attribute graphc-autodiff sets to the number of micro-batches each
/// step accumulates gradients over (absent: one). graphc-data-parallel reads
/// it to place a rank's dropout masks in the global batch.
inline constexpr llvm::StringLiteral kMicroBatchesAttr = "graphc.micro_batches";

/// Unit attribute graphc-autodiff puts on each micro-batch's loss op (with
/// more than one): where that micro-batch's forward ends and its backward
/// begins, for graphc-rematerialize.
inline constexpr llvm::StringLiteral kMicroBatchLossAttr = "graphc.micro_batch_loss";

/// Unit attribute graphc-autodiff puts on each nn.add that adds a
/// micro-batch's gradient to the sum of the micro-batches before it:
/// graphc-fuse-elementwise does not join it to the kernel computing that
/// sum, which would put off every earlier sum to the last micro-batch and
/// keep each micro-batch's gradients alive until then.
inline constexpr llvm::StringLiteral kGradientSumAttr = "graphc.gradient_sum";

/// What splitMicroBatches made: per micro-batch, its ops in order (the slices
/// of the arguments first) and the values it returns.
struct MicroBatches {
  llvm::SmallVector<llvm::SmallVector<mlir::Operation *>> ops;
  llvm::SmallVector<llvm::SmallVector<mlir::Value>> results;
};

/// Rewrites `func`, whose every argument has the batch as its leading dim,
/// to take `count` times that batch: its body runs `count` times in a row,
/// each copy on consecutive rows of every argument (nn.slice of dim 0).
/// Dropout masks are offset by the copy's place in the step's batch, so the
/// copies draw what one batch of `count` times the rows would. The old
/// terminator stays, reading copy 0's results, for the caller to replace.
/// Errors (an argument without the batch dim) are reported on `func`.
mlir::FailureOr<MicroBatches> splitMicroBatches(mlir::func::FuncOp func, int64_t count);

/// The function `name` of `module` with its body, or a failure reported on
/// the module ("the model has no func.func @name with a body").
mlir::FailureOr<mlir::func::FuncOp> lookupModelFunction(mlir::ModuleOp module,
                                                        llvm::StringRef name);

/// `value` as a tensor of `like`'s type (a rank-0 constant, broadcast).
mlir::Value splatLike(mlir::OpBuilder &b, mlir::Location loc, mlir::Value like,
                      double value);

/// A rank-0 constant of `elementType`.
mlir::Value scalarConstant(mlir::OpBuilder &b, mlir::Location loc,
                           mlir::Type elementType, double value);

/// A per-channel `[C]` vector broadcast over an NC or NCHW tensor `like`.
mlir::Value broadcastChannels(mlir::OpBuilder &b, mlir::Location loc,
                              mlir::Value channels, mlir::Value like);

/// Loads the step counter, declaring it (a zero-initialized i64 nn.state) in
/// `module` if this is its first use.
mlir::Value loadStepCounter(mlir::OpBuilder &b, mlir::Location loc,
                            mlir::ModuleOp module);

} // namespace graphc

#endif // GRAPHC_COMPILER_TRANSFORMS_BUILDUTILS_H
