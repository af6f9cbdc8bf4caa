//===- Pipeline.h - the graphc compile pipeline -----------------*- C++ -*-===//
//
// The one place that decides which passes `graphc compile` runs and in what
// order. Phases are an ordered enum so the driver can stop after any of them
// (`--compile-to=PHASE`) and print the IR.
//
//===----------------------------------------------------------------------===//

#ifndef GRAPHC_COMPILER_PIPELINE_PIPELINE_H
#define GRAPHC_COMPILER_PIPELINE_PIPELINE_H

#include "compiler/Lowering/Passes.h"
#include "compiler/Transforms/Passes.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/StringRef.h"

#include <optional>

namespace graphc {

/// The phases of the pipeline (docs/design.md) that exist so far, in order.
enum class Phase {
  /// Model contract checked; batch size set and every shape re-inferred.
  Verify,
  /// @train_step differentiated, in mixed precision with --amp, its gradients
  /// still in nn.apply_gradient (before the optimizer); @eval_step built.
  MixedPrecision,
  /// Gradients averaged across ranks (graphc-data-parallel): bucketed
  /// dist.allreduce_start right after backward completes each bucket, waits
  /// before the updates; still before the optimizer.
  DataParallel,
  /// @train_step (forward, loss, backward, optimizer update, in place) and
  /// @eval_step built from @forward.
  Autodiff,
  /// Bufferized into plan buffers and commands, memory planned; kernel bodies
  /// still MLIR (linalg / scf) in `module @kernels`.
  Lower,
  /// Kernels compiled to native code, the contract checked: ready to export.
  Plan,
};
constexpr Phase kLastPhase = Phase::Plan;

struct PipelineOptions {
  /// 0 leaves the model's batch dimension as written; phases after Verify need
  /// a static batch.
  int64_t batchSize = 0;
  Phase stopAfter = kLastPhase;
  /// Micro-batches of `batchSize` rows each step accumulates gradients over
  /// (graphc-autodiff's micro-batches): the step's batch is their product.
  int64_t microBatches = 1;
  /// The optimizer and its learning-rate schedule (graphc-optimizer's options).
  OptimizerOptions optimizer;
  /// Kernel code generation (graphc-codegen-kernels' options).
  CodegenKernelsOptions codegen;
  /// Group elementwise chains into one kernel each (graphc-fuse-elementwise);
  /// false gives the unfused baseline, one kernel per op.
  bool fuse = true;
  /// Recompute cheap forward values in backward instead of keeping them
  /// (graphc-rematerialize); false keeps every value backward reads.
  bool remat = true;
  /// Activation layout (graphc-layout): "nhwc" (channels last) or "nchw".
  std::string layout = "nchw";
  /// Filter layout of channels-last convolutions (graphc-layout's filters):
  /// "oihw" or "ohwi" (what cuDNN's channels-last tensor cores take).
  std::string filters = "oihw";
  RematerializeOptions rematerialize;
  /// Mixed precision (graphc-mixed-precision's options); an empty precision
  /// trains in fp32 and skips the pass.
  MixedPrecisionOptions mixedPrecision{/*precision=*/""};
  /// Average gradients across the ranks of a job (graphc-data-parallel); a
  /// plan without allreduces trains on one rank only.
  bool dataParallel = true;
  DataParallelOptions distributed;
  /// Batch-norm statistics over the global batch (graphc-decompose-training-
  /// ops' sync-bn): identical on every rank, one blocking allreduce each.
  bool syncBn = false;
  /// An inference-only plan: one program, @infer (graphc-build-infer); no
  /// training phases.
  bool forward = false;
  /// graphc-input-normalize's mean and std per channel (or one of each);
  /// empty, the images stay float.
  std::vector<double> normalizeMean, normalizeStd;
};

/// Adds the passes of every phase up to `options.stopAfter` to `pm`, which must
/// be anchored on builtin.module.
void buildCompilePipeline(mlir::OpPassManager &pm, const PipelineOptions &options);

} // namespace graphc

#endif // GRAPHC_COMPILER_PIPELINE_PIPELINE_H
