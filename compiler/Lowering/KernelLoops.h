//===- KernelLoops.h - loop structure shared by both codegen targets -*- C++ -*-===//
//
// Both targets split a kernel body into launches the runtime issues in order:
// one per top-level scf.parallel (a grid of thread blocks on CUDA, chunks of
// the outermost loop spread over the cores on the CPU), and one serial launch
// per run of code outside them (a full reduction, a scalar update).
//
//===----------------------------------------------------------------------===//

#ifndef GRAPHC_COMPILER_LOWERING_KERNELLOOPS_H
#define GRAPHC_COMPILER_LOWERING_KERNELLOOPS_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/SmallVector.h"

#include <array>
#include <cstdint>
#include <string>

namespace graphc {

/// One launch of a plan kernel; a kernel body may need several (e.g. a fill,
/// then a reduction), issued in order.
///  - PTX: a cuLaunchKernel of `entry` with this grid and block.
///  - CPU: `void graphc_kernel_<entry>(void **buffers, int64_t begin, int64_t
///    end)` runs iterations [begin, end) of its outermost loop, which has
///    grid[0] iterations; block is {1, 1, 1}.
struct KernelLaunch {
  std::string entry;
  std::array<uint32_t, 3> grid{};
  std::array<uint32_t, 3> block{};
  /// The entry's pointer parameters, as indices into the plan kernel's
  /// buffers (inputs, then outputs).
  llvm::SmallVector<uint32_t> args;
  /// CPU: the byte size of each of `args` the code was compiled for (it is
  /// recorded in the library, and the runtime checks the plan against it).
  llvm::SmallVector<uint64_t> argBytes;
};

/// Kernel code that differs between targets (a GPU reduction cooperates
/// across a thread block; the CPU's runs per output on one core) is emitted
/// for both, each in an `scf.execute_region` with this attribute naming its
/// target ("cpu" or "cuda"); each codegen keeps its own and drops the other
/// before anything else. Invariant: no canonicalizer may run on the kernels
/// module before selectTarget (MLIR's single-block execute_region inliner
/// would splice both variants in).
constexpr llvm::StringLiteral kTargetAttrName = "graphc.target";

/// A unit attribute on an scf.for whose iterations touch disjoint memory (an
/// elementwise loop written as a sequential one): the CPU codegen tells LLVM
/// so, as it does for every scf.parallel (see CodegenKernels.cpp).
constexpr llvm::StringLiteral kParallelLoopAttrName = "graphc.parallel_loop";

/// Emits `cpu` and `cuda` as the two variants of one piece of kernel code at
/// `b`'s insertion point.
void buildPerTarget(mlir::OpBuilder &b, mlir::Location loc,
                    llvm::function_ref<void(mlir::OpBuilder &)> cpu,
                    llvm::function_ref<void(mlir::OpBuilder &)> cuda);

/// Keeps the variants for `target` ("cpu" or "cuda"), inlined, and erases the
/// others.
mlir::LogicalResult selectTarget(mlir::ModuleOp kernels, llvm::StringRef target);

/// Merges adjacent loops of a kernel that is one all-parallel linalg.generic
/// of its own arguments where every operand reads them contiguously, by
/// retyping the arguments (a kernel's buffers are bytes): a scalar broadcast
/// into [8, 28, 28, 1, 96] becomes one loop of 602112. For the CPU: long
/// contiguous loops, and no nests that LLVM's loop vectorizer spends seconds
/// on once the unroller has copied the inner loop for every outer index.
void collapseContiguousLoops(mlir::ModuleOp kernels);

/// Lowers every linalg op of `kernels` to loops: each linalg.generic's
/// parallel dimensions outermost (a per-channel reduction becomes one parallel
/// iteration per channel), as scf.parallel, reductions as scf.for inside.
mlir::LogicalResult lowerToParallelLoops(mlir::ModuleOp kernels);

/// Groups the top-level ops of `func` that are neither constants nor
/// scf.parallel loops (nor gpu.launch ops: launches already) into runs and calls `wrap` on each, which must move the
/// run into one op (a one-thread launch, a one-iteration loop). Runs are
/// maximal when no value crosses a run's boundary; a run that only computes
/// values a later loop reads (dropout's seed hash) is cloned into those loops
/// instead; otherwise the whole body is one run.
mlir::LogicalResult
wrapHostCode(mlir::func::FuncOp func,
             llvm::function_ref<mlir::LogicalResult(llvm::ArrayRef<mlir::Operation *>)> wrap);

} // namespace graphc

#endif // GRAPHC_COMPILER_LOWERING_KERNELLOOPS_H
