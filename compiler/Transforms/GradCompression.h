//===- GradCompression.h - gradient compression for data parallel -*- C++ -*-===//
//
// What graphc-data-parallel's `grad-compression` option names, and PowerSGD:
// the rewrite of @train_step's allreduce buckets into low-rank factors with
// error feedback (GradCompression.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef GRAPHC_COMPILER_TRANSFORMS_GRADCOMPRESSION_H
#define GRAPHC_COMPILER_TRANSFORMS_GRADCOMPRESSION_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

#include <string>

namespace graphc {

/// Module attribute graphc-data-parallel leaves for graphc's summary under
/// PowerSGD: array<i64: the rank, gradients as factors, gradients in all,
/// bytes per step on the wire without compression, with it>.
inline constexpr llvm::StringLiteral kGradCompressionAttr = "graphc.grad_compression";

/// The largest PowerSGD rank accepted (PyTorch's examples use 1 to 4; past
/// a few dozen the factors cost more than the matrices they stand for).
inline constexpr int64_t kMaxPowerSgdRank = 64;

/// Module attribute graphc-data-parallel leaves for graphc's summary under
/// top-k: array<i64: gradients sparsified, gradients in all, bytes per step
/// on the wire without compression, with it (after any warm-up)>.
inline constexpr llvm::StringLiteral kTopkCompressionAttr = "graphc.topk_compression";

/// Unit attribute on an nn.apply_gradient whose gradient already holds the
/// momentum and weight decay (deep gradient compression's momentum
/// correction): graphc-optimizer applies it as plain SGD.
inline constexpr llvm::StringLiteral kMomentumAppliedAttr = "graphc.momentum_applied";

/// Top-k's ratio bounds: at least one entry in a million, at most a fifth
/// (a gradient is sparsified only when its k (value, index) pairs weigh
/// under half its f32 entries, k < n / 4).
inline constexpr double kMinTopkRatio = 1e-6, kMaxTopkRatio = 0.2;

struct GradCompression {
  enum class Kind { None, Fp16, PowerSgd, TopK };
  Kind kind = Kind::None;
  /// PowerSGD's rank r.
  int64_t rank = 0;
  /// Top-k: the share of each gradient's entries sent, and the steps over
  /// which the share falls from 25% to it (0: none).
  double ratio = 0;
  int64_t warmupSteps = 0;
};

/// Parses `none`, `fp16`, `powersgd:R` or `topk:RATIO[:WARMUP_STEPS]`; on
/// failure `error` says what is wrong with `spec`, naming it.
GradCompression parseGradCompression(llvm::StringRef spec, std::string &error);

/// PowerSGD (Vogels et al., 2019, as PyTorch DDP's powerSGD_hook) on the
/// allreduce buckets graphc-data-parallel built in `step`. Each gradient (f32,
/// or bf16 under --amp bf16, factored in f32 all the same)
/// of rank >= 2 seen as an [n, m] matrix (dim 0 by the rest) whose rank-r
/// factors are under half its size leaves its bucket; in its place:
///   M = G + E                      E: the error state, zero at first
///   P = M orthonormalize(Q)        Q: the warm-started state, normal at first
///   P = orthonormalize(allreduce sum P)
///   Q = allreduce mean (M^T P)
///   G' = P Q^T;  E = M - G'         what the optimizer and the next step get
/// (P and Q are kept transposed, [r, n] and [r, m], so the rows are what
/// Gram-Schmidt walks.) The P allreduces start where the bucket did; the Q
/// phase of every bucket comes after backward, before the first wait; each
/// bucket's Q wait and the decompression where its wait was. Other gradients
/// keep their bucket. The states are `graphc.powersgd.<param>.error` and
/// `.q`. Fails, on the step, with loss scaling (an overflowed step would
/// carry its infinities on in E).
mlir::LogicalResult applyPowerSgd(mlir::ModuleOp module, mlir::func::FuncOp step, int64_t rank);

/// Deep gradient compression (Lin et al., 2018) on the allreduce buckets
/// graphc-data-parallel built in `step`. Each gradient of rank >= 2 whose
/// k = ceil(ratio * n) entries (8 bytes each) weigh less than half its dense
/// bytes leaves its bucket; in its place, where the bucket started:
///   g' = g + weight_decay * w           (f32)
///   u = momentum * u + g'               momentum correction
///   v = v + u                           local accumulation
///   values, indices = top-k of |v|      nn.topk_select
///   v, u zeroed at indices              momentum factor masking
///   dist.allreduce_start sparse mean values, indices, g'
/// and where its wait was, the dense mean of every rank's sparse set goes to
/// the optimizer, marked kMomentumAppliedAttr (plain SGD from there). With
/// warm-up, K holds 25% of the entries and the count sent falls as
/// 25%, 6.25%, 1.5625%, 0.390625% over four quarters of the warm-up steps
/// (never under k), then k. The states are `<param>.momentum_buffer` (when
/// momentum > 0: u is what momentum SGD keeps in its buffer, until masking
/// clears what was sent) and `graphc.dgc.<param>.accumulation`. Fails, on the step, with
/// loss scaling.
mlir::LogicalResult applyTopk(mlir::ModuleOp module, mlir::func::FuncOp step,
                              const GradCompression &compression, double momentum,
                              double weightDecay);

} // namespace graphc

#endif // GRAPHC_COMPILER_TRANSFORMS_GRADCOMPRESSION_H
