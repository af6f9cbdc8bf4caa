//===- Pipeline.cpp - the graphc compile pipeline -------------------------===//
//
// Why each pass sits where it does:
//  - graphc-verify-model first: every later pass assumes the model contract
//    (one @forward(images, labels) -> loss, only nn ops), so violations are
//    reported against the user's file, not as a crash three passes later.
//  - graphc-set-batch-size next: from here on shapes are static, which memory
//    planning and kernel generation need; doing it before autodiff means the
//    gradients are built once, with the final shapes.
//
//===----------------------------------------------------------------------===//

#include "compiler/Pipeline/Pipeline.h"

#include "compiler/Transforms/Passes.h"

namespace graphc {

llvm::StringRef phaseName(Phase phase) {
  switch (phase) {
  case Phase::Verify:
    return "verify";
  }
  llvm_unreachable("unknown phase");
}

void buildCompilePipeline(mlir::OpPassManager &pm, const PipelineOptions &options) {
  pm.addPass(createVerifyModel());
  if (options.batchSize > 0)
    pm.addPass(createSetBatchSize(SetBatchSizeOptions{options.batchSize}));
  // Later phases (autodiff, mixed precision, ...) are added here, each guarded
  // by `options.stopAfter`.
}

} // namespace graphc
