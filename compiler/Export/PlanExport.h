//===- PlanExport.h - plan dialect to a FlatBuffers plan file ---*- C++ -*-===//
//
// The only writer of contract/schema/plan.fbs files: translates a module that
// passed graphc-plan-contract into the serialized plan.
//
//===----------------------------------------------------------------------===//

#ifndef GRAPHC_COMPILER_EXPORT_PLANEXPORT_H
#define GRAPHC_COMPILER_EXPORT_PLANEXPORT_H

#include "mlir/IR/BuiltinOps.h"
#include "contract/plan_integrity.h"
#include "contract/schema_version.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>
#include <string>

namespace graphc {

struct PlanMetadata {
  std::string model;
  int64_t batchSize = 0;
  std::string precision = "fp32";
  bool fused = false;
  /// The micro-batches each training step accumulates gradients over
  /// (batchSize is the step's: their rows together); 1 for none.
  int64_t microBatches = 1;
  /// Signs the plan (Ed25519) when set; every plan gets a SHA-256 digest.
  std::optional<graphc::SecretKey> signingKey;
};

/// What a program's generated kernels cost per run: launches, and bytes they
/// read and write; and the same unfused (equal when fusion did not run).
struct KernelTraffic {
  int64_t launches = 0, bytes = 0;
  int64_t unfusedLaunches = 0, unfusedBytes = 0;
};
/// Per program (by name) of a plan-dialect module.
llvm::StringMap<KernelTraffic> kernelTraffic(mlir::ModuleOp module);

/// Serializes `module` (plan dialect only) to `os`, sealed with its digest
/// (and signature); fails with a diagnostic.
mlir::LogicalResult exportPlan(mlir::ModuleOp module, const PlanMetadata &metadata,
                               llvm::raw_ostream &os);

} // namespace graphc

#endif // GRAPHC_COMPILER_EXPORT_PLANEXPORT_H
