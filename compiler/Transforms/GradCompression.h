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

struct GradCompression {
  enum class Kind { None, Fp16, PowerSgd };
  Kind kind = Kind::None;
  /// PowerSGD's rank r.
  int64_t rank = 0;
};

/// Parses `none`, `fp16` or `powersgd:R`; on failure `error` says what is
/// wrong with `spec`, naming it.
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

} // namespace graphc

#endif // GRAPHC_COMPILER_TRANSFORMS_GRADCOMPRESSION_H
