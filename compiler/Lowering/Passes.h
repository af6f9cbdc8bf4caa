//===- Passes.h - lowering passes -------------------------------*- C++ -*-===//
//
// Declarations and registration of the passes in Passes.td.
//
//===----------------------------------------------------------------------===//

#ifndef GRAPHC_COMPILER_LOWERING_PASSES_H
#define GRAPHC_COMPILER_LOWERING_PASSES_H

#include "dialects/plan/IR/PlanDialect.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace graphc {

#define GEN_PASS_DECL
#include "compiler/Lowering/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "compiler/Lowering/Passes.h.inc"

/// Module attributes graphc-plan-memory sets and the exporter reads.
constexpr llvm::StringLiteral kArenaSizeAttr = "plan.arena_size";
constexpr llvm::StringLiteral kTensorBytesAttr = "plan.tensor_bytes";
constexpr llvm::StringLiteral kStateSizeAttr = "plan.state_size";
constexpr llvm::StringLiteral kConstantSizeAttr = "plan.constant_size";
/// Module attribute graphc-plan-memory leaves for `graphc compile
/// --memory-report`: per program, array<i64: ...> indexed by MemoryProfile.
constexpr llvm::StringLiteral kMemoryProfileAttr = "graphc.memory_profile";
enum MemoryProfile : int64_t {
  kPeakLiveBytes,   // the most bytes live at once (the arena is at least this)
  kPeakCommand,     // the first command where they are
  kCommands,        // commands in the program
  kLossCommand,     // the command writing the first output (-1: an input)
  kKeptBytes,       // bytes live across it: forward's values kept for backward
  kKeptBuffers,     // how many buffers those are
  kMemoryProfileSize
};
/// Module attribute graphc-plan-memory sets when it removed concats by
/// computing their operands in place (graphc compile prints it).
constexpr llvm::StringLiteral kPlacedConcatsAttr = "graphc.placed_concats";
/// Name of the nested module holding kernel bodies until codegen.
constexpr llvm::StringLiteral kKernelsModuleName = "kernels";

} // namespace graphc

#endif // GRAPHC_COMPILER_LOWERING_PASSES_H
