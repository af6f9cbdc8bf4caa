// RUN: not graphc-opt %s -graphc-mixed-precision="precision=fp8" 2>&1 | FileCheck %s --check-prefix=PRECISION
// RUN: not graphc-opt %s -graphc-mixed-precision="precision=bf16 loss-scale=dynamic" 2>&1 | FileCheck %s --check-prefix=BF16
// RUN: not graphc-opt %s -graphc-mixed-precision="loss-scale=-2" 2>&1 | FileCheck %s --check-prefix=SCALE
// RUN: not graphc-opt %s -graphc-mixed-precision="loss-scale=lots" 2>&1 | FileCheck %s --check-prefix=SCALE-WORD
// RUN: not graphc-opt %s -graphc-mixed-precision="initial-loss-scale=0.5" 2>&1 | FileCheck %s --check-prefix=INITIAL
// RUN: not graphc-opt %s -graphc-mixed-precision="loss-scale-window=0" 2>&1 | FileCheck %s --check-prefix=WINDOW
// RUN: not graphc-opt %s -graphc-mixed-precision="loss-scale=1e39" 2>&1 | FileCheck %s --check-prefix=HUGE
// RUN: not graphc-opt %s -graphc-mixed-precision="initial-loss-scale=1e39" 2>&1 | FileCheck %s --check-prefix=HUGEINITIAL
// RUN: not graphc-opt %s -graphc-mixed-precision="loss-scale=8 loss-scale-window=10" 2>&1 | FileCheck %s --check-prefix=STATIC
// RUN: not graphc-opt %s -graphc-mixed-precision -graphc-mixed-precision 2>&1 | FileCheck %s --check-prefix=TWICE

// Tests that bad options are reported by name, and that the pass refuses a
// module it already converted.
// PRECISION: error: graphc-mixed-precision: precision must be fp16 or bf16, got 'fp8'
// BF16: error: graphc-mixed-precision: bf16 has the range of fp32 and needs no loss scaling; loss-scale applies to fp16 only
// SCALE: error: graphc-mixed-precision: loss-scale must be dynamic, none or a number > 0 that is finite as an f32, got '-2'
// SCALE-WORD: error: graphc-mixed-precision: loss-scale must be dynamic, none or a number > 0 that is finite as an f32, got 'lots'
// INITIAL: error: graphc-mixed-precision: initial-loss-scale must be a finite f32 >= 1, got 0.5{{$}}
// HUGE: error: graphc-mixed-precision: loss-scale must be dynamic, none or a number > 0 that is finite as an f32, got '1e39'
// HUGEINITIAL: error: graphc-mixed-precision: initial-loss-scale must be a finite f32 >= 1, got 1e+39
// WINDOW: error: graphc-mixed-precision: loss-scale-window must be >= 1, got 0
// STATIC: error: graphc-mixed-precision: initial-loss-scale and loss-scale-window apply to loss-scale=dynamic only
// TWICE: error: graphc-mixed-precision: the module is already in mixed precision
nn.parameter @w : tensor<3x4xf32> = zeros
func.func @train_step(%x: tensor<2x4xf32>, %y: tensor<2xi32>) -> tensor<f32> {
  %w = nn.load @w : tensor<3x4xf32>
  %0 = nn.linear %x, %w : tensor<2x4xf32>, tensor<3x4xf32>
  %1 = nn.softmax_cross_entropy %0, %y label_smoothing 0.0 : tensor<2x3xf32>, tensor<2xi32>
  %one = nn.constant {graphc.loss_seed} dense<1.0> : tensor<f32>
  %d = nn.softmax_cross_entropy_backward %one, %0, %y label_smoothing 0.0 : tensor<f32>, tensor<2x3xf32>, tensor<2xi32>
  %dw = nn.matmul %d, %x transpose_a : tensor<2x3xf32>, tensor<2x4xf32>
  nn.apply_gradient @w, %dw : tensor<3x4xf32>
  return %1 : tensor<f32>
}
