// RUN: not graphc-opt %s -graphc-data-parallel="bucket-mb=0" 2>&1 | FileCheck %s --check-prefix=CAP
// RUN: not graphc-opt %s -graphc-data-parallel="first-bucket-mb=-1" 2>&1 | FileCheck %s --check-prefix=CAP
// RUN: not graphc-opt %s -graphc-data-parallel="allreduce-dtype=bf16" 2>&1 | FileCheck %s --check-prefix=DTYPE
// RUN: not graphc-opt %s -graphc-data-parallel -graphc-data-parallel 2>&1 | FileCheck %s --check-prefix=TWICE
// RUN: not graphc-opt %S/Inputs/returns-gradient.mlir -graphc-data-parallel 2>&1 | FileCheck %s --check-prefix=RETURNED

// Tests that bad options are reported by name, and that the pass refuses a
// step it already made data-parallel.
// CAP: error: graphc-data-parallel: bucket-mb and first-bucket-mb must be > 0
// DTYPE: error: graphc-data-parallel: unknown allreduce-dtype 'bf16'; expected fp32 or fp16
// TWICE: error: graphc-data-parallel: @train_step already has allreduces
// Tests that a step returning (a view of) a gradient is refused, naming it:
// the allreduce would change the returned value in place.
// RETURNED: error: 'func.return' op graphc-data-parallel: @train_step returns the gradient of @w (or a view of it), whose memory the allreduce reduces in place
nn.parameter @w : tensor<3x4xf32> = zeros
func.func @train_step(%x: tensor<2x4xf32>, %y: tensor<2xi32>) -> tensor<f32> {
  %w = nn.load @w : tensor<3x4xf32>
  %0 = nn.linear %x, %w : tensor<2x4xf32>, tensor<3x4xf32>
  %1 = nn.softmax_cross_entropy %0, %y label_smoothing 0.0 : tensor<2x3xf32>, tensor<2xi32>
  %one = nn.constant dense<1.0> : tensor<f32>
  %d = nn.softmax_cross_entropy_backward %one, %0, %y label_smoothing 0.0 : tensor<f32>, tensor<2x3xf32>, tensor<2xi32>
  %dw = nn.matmul %d, %x transpose_a : tensor<2x3xf32>, tensor<2x4xf32>
  nn.apply_gradient @w, %dw : tensor<3x4xf32>
  return %1 : tensor<f32>
}
