//===- CodegenPtx.h - kernel bodies to PTX ----------------------*- C++ -*-===//
//
// The GPU half of graphc-codegen-kernels: the same `module @kernels` bodies,
// mapped onto CUDA grids and compiled to PTX for one or more SM versions.
//
//===----------------------------------------------------------------------===//

#ifndef GRAPHC_COMPILER_LOWERING_CODEGENPTX_H
#define GRAPHC_COMPILER_LOWERING_CODEGENPTX_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/SmallVector.h"

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace graphc {

/// One `cuLaunchKernel` of a plan kernel. A kernel body may need several
/// (e.g. a fill, then a reduction), issued in order on one stream.
struct GpuLaunch {
  std::string entry;               // the .entry name in the PTX module
  std::array<uint32_t, 3> grid{};  // blocks, x y z
  std::array<uint32_t, 3> block{}; // threads per block, x y z
  /// The entry's pointer parameters, as indices into the plan kernel's
  /// buffers (inputs, then outputs).
  llvm::SmallVector<uint32_t> args;
};

struct PtxKernels {
  /// (chip, PTX text) per requested chip, e.g. ("sm_90", ".version 8.0 ...").
  std::vector<std::pair<std::string, std::string>> ptx;
  /// Per kernel name, in the order given to compilePtx.
  std::vector<llvm::SmallVector<GpuLaunch>> launches;
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
