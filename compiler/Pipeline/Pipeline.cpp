//===- Pipeline.cpp - the graphc compile pipeline -------------------------===//
//
// Why each pass sits where it does:
//  - graphc-verify-model first: every later pass assumes the model contract
//    (one @forward(images, labels) -> loss, only nn ops), so violations are
//    reported against the user's file, not as a crash three passes later.
//  - graphc-set-batch-size next: from here on shapes are static, which memory
//    planning and kernel generation need; doing it before autodiff means the
//    gradients are built once, with the final shapes (batch-norm means divide
//    by N*H*W, a constant only then).
//  - graphc-input-normalize (--input-normalize) right after: the byte images
//    and their normalization are then part of @forward, so @eval_step and
//    @infer clone them, autodiff never differentiates them (no parameter
//    reaches them), and fusion folds the cast and multiply-add into one
//    kernel (with the layout's transpose where there is one).
//  - graphc-fuse-attention (fusing) before autodiff, which then
//    derives nn.attention_backward, and before @eval_step is cloned.
//  - graphc-build-eval-step before any training rewrite: it clones @forward as
//    written, where batch norm and dropout still say what they mean.
//  - graphc-decompose-training-ops before autodiff: batch norm and dropout
//    become reductions and elementwise ops, whose gradient rules autodiff
//    already has, and whose elementwise parts fusion can later group.
//  - graphc-layout after batch norm is decomposed (its statistics are then
//    reductions whose dims the pass moves like any other) and before
//    autodiff, so that backward is derived in the same layout: the gradient
//    of a channels-last convolution is a channels-last convolution.
//  - graphc-autodiff, then graphc-mixed-precision, then graphc-optimizer:
//    gradients end in nn.apply_gradient, the seam where mixed precision
//    (unscale, skip on overflow) and data-parallel (allreduce) act
//    before the update consumes them. Mixed precision sees backward whole, so
//    it decides what backward keeps in half, and it runs before fusion, which
//    folds its casts into the neighbouring kernels.
//  - graphc-simplify-reductions right after autodiff, while backward is as
//    derived: the batch-norm sums it recognizes are plain float32 chains
//    there (no casts yet), and it only ever removes work the later passes
//    would otherwise plan, cast and fuse.
//  - graphc-data-parallel after mixed precision: it reduces the gradients in
//    the type they are computed in (half ones travel as half), and the
//    overflow check that mixed precision added must read reduced gradients,
//    so every rank skips the same steps. Before the optimizer, whose updates
//    then read the reduced values, and before fusion, which must not group
//    ops across a collective (dist ops are never fused).
//  - graphc-rematerialize after the optimizer, when the step is complete (so
//    it knows every reader of a forward value and every nn.assign a
//    recomputation must not cross), and before fusion, which folds the
//    recomputed ops into the backward kernels that read them.
//  - graphc-fuse-elementwise last at the nn level: it sees the whole step
//    (forward, backward, update) as written, and its groups become kernels.
//  - With --forward, graphc-build-infer right after the contract: @infer is
//    @forward in inference form (or an inference model's own), and of the
//    rest only layout, fusion and lowering apply.
//
//===----------------------------------------------------------------------===//

#include "compiler/Pipeline/Pipeline.h"

#include "compiler/Transforms/Passes.h"

namespace graphc {

/// What every plan ends with, training or inference: fusion (before
/// bufferization, which turns each nn.fusion into one kernel), lowering,
/// memory placement, codegen and the contract.
static void addFusionAndLowering(mlir::OpPassManager &pm, const PipelineOptions &options) {
  if (options.fuse)
    pm.addPass(createFuseElementwise());
  // Bufferize first, then place: placement needs the final command order and
  // the in-place opportunities only the commands show.
  pm.addPass(createLowerToPlan());
  pm.addPass(createPlanMemory());
  if (options.stopAfter == Phase::Lower)
    return;
  pm.addPass(createCodegenKernels(options.codegen));
  // Last, so a compiler bug is a compile error rather than a refused plan.
  pm.addPass(createPlanContract());
}

void buildCompilePipeline(mlir::OpPassManager &pm, const PipelineOptions &options) {
  pm.addPass(createVerifyModel(VerifyModelOptions{options.forward}));
  if (options.batchSize > 0)
    pm.addPass(createSetBatchSize(SetBatchSizeOptions{options.batchSize}));
  if (!options.normalizeMean.empty()) {
    InputNormalizeOptions normalize;
    normalize.mean = options.normalizeMean;
    normalize.std = options.normalizeStd;
    pm.addPass(createInputNormalize(normalize));
  }
  if (options.stopAfter == Phase::Verify)
    return;

  // Fused attention: both backends run nn.attention (blocks of queries
  // through oneDNN's sgemm or cuBLAS's strided-batched gemms).
  const bool fuseAttention = options.fuse;
  if (options.forward) {
    // Inference only: @infer, nothing trained; the training phases have
    // nothing to do.
    pm.addPass(createBuildInfer());
    if (fuseAttention)
      pm.addPass(createFuseAttention());
    if (options.layout != "nchw")
      pm.addPass(createLayout(LayoutOptions{options.layout, options.filters}));
    if (options.stopAfter >= Phase::Lower)
      addFusionAndLowering(pm, options);
    return;
  }

  if (fuseAttention)
    pm.addPass(createFuseAttention());
  pm.addPass(createBuildEvalStep(BuildEvalStepOptions{options.microBatches}));
  pm.addPass(createDecomposeTrainingOps(DecomposeTrainingOpsOptions{options.syncBn}));
  if (options.layout != "nchw")
    pm.addPass(createLayout(LayoutOptions{options.layout, options.filters}));
  pm.addPass(createAutodiff(AutodiffOptions{options.microBatches}));
  pm.addPass(createSimplifyReductions());
  if (!options.mixedPrecision.precision.empty())
    pm.addPass(createMixedPrecision(options.mixedPrecision));
  if (options.stopAfter == Phase::MixedPrecision)
    return;
  if (options.dataParallel)
    pm.addPass(createDataParallel(options.distributed));
  if (options.stopAfter == Phase::DataParallel)
    return;
  pm.addPass(createOptimizer(options.optimizer));
  if (options.stopAfter == Phase::Autodiff)
    return;
  if (options.remat)
    pm.addPass(createRematerialize(options.rematerialize));
  // Fusion after the optimizer, so the update's elementwise ops are visible.
  addFusionAndLowering(pm, options);
}

} // namespace graphc
