//===- Passes.h - graphc compiler passes ------------------------*- C++ -*-===//
//
// Declarations and registration of the passes in Passes.td.
//
//===----------------------------------------------------------------------===//

#ifndef GRAPHC_COMPILER_TRANSFORMS_PASSES_H
#define GRAPHC_COMPILER_TRANSFORMS_PASSES_H

#include "dialects/dist/IR/DistOps.h"
#include "dialects/nn/IR/NNDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace graphc {

/// Module attribute graphc-fuse-elementwise leaves for the fusion report: per
/// step function, array<i64: kernel launches saved, kernel bytes saved>.
inline constexpr llvm::StringLiteral kFusionSavingsAttr = "graphc.fusion_savings";

/// Module attribute graphc-mixed-precision leaves for graphc's summary: per
/// step function, array<i64: activations stored in half, their bytes in half>.
inline constexpr llvm::StringLiteral kHalfStorageAttr = "graphc.half_storage";

/// Module attribute graphc-data-parallel leaves for graphc's summary: the bytes
/// of each allreduce bucket of @train_step, in start order.
inline constexpr llvm::StringLiteral kAllreduceBucketsAttr = "graphc.allreduce_buckets";

/// Module attribute graphc-rematerialize leaves for graphc's summary:
/// @train_step's array<i64: values recomputed in backward, bytes forward kept
/// for backward before, bytes it keeps after>.
inline constexpr llvm::StringLiteral kRematerializedAttr = "graphc.rematerialized";

/// Module attribute graphc-simplify-reductions leaves for graphc's summary:
/// the number of sums it replaced (an i64).
inline constexpr llvm::StringLiteral kSimplifiedReductionsAttr = "graphc.simplified_reductions";

#define GEN_PASS_DECL
#include "compiler/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "compiler/Transforms/Passes.h.inc"

} // namespace graphc

#endif // GRAPHC_COMPILER_TRANSFORMS_PASSES_H
