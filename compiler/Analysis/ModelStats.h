//===- ModelStats.h - parameter, MAC and FLOP counts of a model -*- C++ -*-===//
//
// What `graphc info` prints: parameter and state counts, and the forward cost
// per image. MACs count the multiply-accumulates of conv2d, linear and matmul
// (the convention behind "ResNet-50: 4.09 GMAC"); FLOPs are 2 per MAC. The rest
// of the forward (normalization, activations, pooling, loss) is counted apart as
// "other FLOPs", by the per-element costs documented in ModelStats.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef GRAPHC_COMPILER_ANALYSIS_MODELSTATS_H
#define GRAPHC_COMPILER_ANALYSIS_MODELSTATS_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LogicalResult.h"
#include "llvm/ADT/SmallVector.h"

#include <string>

namespace graphc {

/// The cost of one op of @forward, for the whole batch.
struct LayerStats {
  mlir::Operation *op = nullptr;
  /// The layer's name: its first parameter's name without ".weight"/".bias",
  /// or empty when it reads no parameter.
  std::string name;
  int64_t parameters = 0;
  int64_t macs = 0;
  int64_t otherFlops = 0;
};

struct ModelStats {
  int64_t parameters = 0;
  int64_t parameterTensors = 0;
  int64_t stateElements = 0;
  int64_t stateTensors = 0;
  int64_t batchSize = 0;
  int64_t macs = 0;          ///< per batch
  int64_t otherFlops = 0;    ///< per batch
  int64_t activationBytes = 0; ///< every op result of @forward, per batch
  llvm::SmallVector<LayerStats> layers;

  double macsPerImage() const { return double(macs) / batchSize; }
  double flopsPerImage() const { return 2.0 * macs / batchSize; }
  double otherFlopsPerImage() const { return double(otherFlops) / batchSize; }
};

/// Counts a verified model whose @forward has static shapes (run
/// graphc-set-batch-size first). Emits a located error and fails on a dynamic
/// shape.
mlir::FailureOr<ModelStats> computeModelStats(mlir::ModuleOp module);

} // namespace graphc

#endif // GRAPHC_COMPILER_ANALYSIS_MODELSTATS_H
