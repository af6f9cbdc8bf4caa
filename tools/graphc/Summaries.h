//===- Summaries.h - what graphc prints about a model and a plan -*- C++ -*-===//

#ifndef GRAPHC_TOOLS_GRAPHC_SUMMARIES_H
#define GRAPHC_TOOLS_GRAPHC_SUMMARIES_H

#include "compiler/Analysis/ModelStats.h"
#include "compiler/Pipeline/CompileOptions.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>

namespace graphc {

/// graphc info: the parameter count and forward cost, and (--layers) a line
/// per op.
void printInfo(const ModelStats &stats, llvm::StringRef path);
void printLayers(const ModelStats &stats);

/// After a plan is written: the file, its programs and memory.
void printPlanSummary(mlir::ModuleOp module, llvm::StringRef path, uint64_t fileBytes);
/// What the plan trains with: learning rate, precision and loss scaling, the
/// allreduces, and what the memory-saving passes did.
void printTrainingSummary(mlir::ModuleOp module, const CompileOptions &options,
                          const PipelineOptions &pipeline, llvm::StringRef lrChoice);
/// --memory-report and --fusion-report.
void printMemoryReport(mlir::ModuleOp module);
void printFusionReport(mlir::ModuleOp module, bool fused);

} // namespace graphc

#endif // GRAPHC_TOOLS_GRAPHC_SUMMARIES_H
