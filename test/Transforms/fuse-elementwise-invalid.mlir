// RUN: not graphc-opt %s --graphc-fuse-elementwise="max-operands=1" 2>&1 | FileCheck %s --check-prefix=OPERANDS
// RUN: not graphc-opt %s --graphc-fuse-elementwise="max-batch-operands=-3" 2>&1 | FileCheck %s --check-prefix=BATCH

// Tests that limits too small for any kernel are refused by name, not taken
// as "fuse nothing".
// OPERANDS: error: graphc-fuse-elementwise: max-operands must be >= 2, got 1
// BATCH: error: graphc-fuse-elementwise: max-batch-operands must be >= 2, got -3

func.func @train_step(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = nn.relu %x : tensor<4xf32>
  %1 = nn.neg %0 : tensor<4xf32>
  return %1 : tensor<4xf32>
}
