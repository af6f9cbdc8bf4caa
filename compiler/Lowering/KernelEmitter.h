//===- KernelEmitter.h - nn ops as kernel bodies on memrefs -----*- C++ -*-===//
//
// Builds, for one nn op the runtime does not call a library for, the body of a
// generated kernel: a `func.func` whose arguments are memrefs (the op's inputs,
// then its outputs) and whose body is linalg / scf / arith / math. The codegen
// pass lowers these functions to x86-64 object code and to PTX.
//
// The scalar half (emitScalarOp) is kept apart so a fused group can compose the
// bodies of several elementwise ops into one linalg.generic.
//
//===----------------------------------------------------------------------===//

#ifndef GRAPHC_COMPILER_LOWERING_KERNELEMITTER_H
#define GRAPHC_COMPILER_LOWERING_KERNELEMITTER_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Operation.h"

namespace graphc {

/// What a kernel reads and writes, and whether it may run in place.
struct KernelSignature {
  /// The op's operands the kernel reads, in argument order. Operands whose
  /// values are never read (a broadcast's or dropout mask's `shape_of`) are left
  /// out.
  llvm::SmallVector<mlir::Value> inputs;
  /// Each output may overwrite an input of the same size: every element is read
  /// before the same element is written, and no other element is read after.
  bool elementwise = false;
  /// For an elementwise kernel of independent parts (nn.multi_tensor): one
  /// group per input, then per output; an output may overwrite only inputs of
  /// its own group, never one of group -1. Empty: all one group.
  llvm::SmallVector<int64_t> groups;
};

/// True for the nn ops that become generated kernels (as opposed to library
/// calls, views and constants).
bool isKernelOp(mlir::Operation *op);

/// Emits `func.func @name` for `op` at the end of `kernels` and returns its
/// signature, or fails with a diagnostic on `op`.
mlir::FailureOr<KernelSignature> emitKernel(mlir::Operation *op,
                                            mlir::ModuleOp kernels,
                                            llvm::StringRef name);

/// The scalar computation of one elementwise nn op applied to `args` (one scalar
/// per operand, in operand order); nullptr if `op` is not elementwise.
mlir::Value emitScalarOp(mlir::OpBuilder &b, mlir::Location loc,
                         mlir::Operation *op, mlir::ValueRange args);

} // namespace graphc

#endif // GRAPHC_COMPILER_LOWERING_KERNELEMITTER_H
