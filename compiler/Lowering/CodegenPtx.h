//===- CodegenPtx.h - kernel bodies to PTX ----------------------*- C++ -*-===//
//
// The GPU half of graphc-codegen-kernels: the same `module @kernels` bodies,
// mapped onto CUDA grids and compiled to PTX for one or more SM versions.
//
//===----------------------------------------------------------------------===//

#ifndef GRAPHC_COMPILER_LOWERING_CODEGENPTX_H
#define GRAPHC_COMPILER_LOWERING_CODEGENPTX_H

#include "compiler/Lowering/KernelLoops.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/SmallVector.h"

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace graphc {

struct PtxKernels {
  /// (chip, PTX text) per requested chip, e.g. ("sm_90", ".version 8.0 ...").
  std::vector<std::pair<std::string, std::string>> ptx;
  /// Per kernel name, in the order given to compilePtx.
  std::vector<llvm::SmallVector<KernelLaunch>> launches;
};

/// Compiles the kernels (func.func bodies in linalg / scf / memref form) in
/// `kernels`, which this consumes, to PTX. `toolkitPath` holds
/// nvvm/libdevice/libdevice.10.bc (math functions).
mlir::FailureOr<PtxKernels> compilePtx(mlir::ModuleOp kernels,
                                       llvm::ArrayRef<std::string> names,
                                       llvm::ArrayRef<std::string> chips,
                                       llvm::StringRef toolkitPath);

} // namespace graphc

#endif // GRAPHC_COMPILER_LOWERING_CODEGENPTX_H
