// RUN: graphc-opt %s -graphc-optimizer="optimizer=sgd clip-grad-norm=2.5" | FileCheck %s
// RUN: not graphc-opt %s -graphc-optimizer="clip-grad-norm=-1" 2>&1 | FileCheck %s --check-prefix=NEGATIVE
// RUN: not graphc-opt %s -graphc-optimizer="clip-grad-norm=1e39" 2>&1 | FileCheck %s --check-prefix=HUGE

// Tests gradient clipping (PyTorch's clip_grad_norm_ after GradScaler's
// unscale_): the squares of every gradient (a weight gradient in half too)
// summed in one multi-tensor pass and its lanes, times the unscale factor
// squared; the factor min(2.5 / (norm + 1e-6), 1) multiplies the updates'
// unscale factor once. The norm is recorded in the state graphc.grad_norm,
// declared last (the other states keep their places and seeded values),
// unless the step is skipped. The bias's update, which came before the
// weight's gradient was computed, moves after it.
nn.parameter @fc.weight : tensor<3x4xf32> = zeros
nn.parameter @fc.bias : tensor<3xf32> = zeros
func.func @train_step(%x: tensor<2x4xf32>, %y: tensor<2xi32>, %s: tensor<f32>, %k: tensor<f32>) -> tensor<f32> {
  %w = nn.load @fc.weight : tensor<3x4xf32>
  %b = nn.load @fc.bias : tensor<3xf32>
  %0 = nn.linear %x, %w, %b : tensor<2x4xf32>, tensor<3x4xf32>, tensor<3xf32>
  %1 = nn.softmax_cross_entropy %0, %y label_smoothing 0.0 : tensor<2x3xf32>, tensor<2xi32>
  %one = nn.constant dense<1.0> : tensor<f32>
  %d = nn.softmax_cross_entropy_backward %one, %0, %y label_smoothing 0.0 : tensor<f32>, tensor<2x3xf32>, tensor<2xi32>
  %db = nn.reduce_sum %d dims [0] : tensor<2x3xf32>
  nn.apply_gradient @fc.bias, %db scaled_by %s skip_if %k : tensor<3xf32>
  %dh = nn.cast %d : tensor<2x3xf32> to f16
  %xh = nn.cast %x : tensor<2x4xf32> to f16
  %dw = nn.matmul %dh, %xh transpose_a : tensor<2x3xf16>, tensor<2x4xf16>
  nn.apply_gradient @fc.weight, %dw scaled_by %s skip_if %k : tensor<3x4xf16>
  return %1 : tensor<f32>
}

// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %[[S:[^:]+]]: tensor<f32>, %[[K:[^:]+]]: tensor<f32>)
// CHECK: %[[DB:.+]] = nn.reduce_sum %{{.+}} dims [0] : tensor<2x3xf32>
// CHECK-NOT: nn.sgd
// CHECK: %[[DW:.+]] = nn.matmul
// CHECK: %[[PARTS:.+]] = nn.sum_squares %[[DB]], %[[DW]] : tensor<3xf32>, tensor<3x4xf16>
// CHECK: %[[SUM:.+]] = nn.reduce_sum %[[PARTS]] dims [0] : tensor<2048xf32>
// CHECK: %[[S2:.+]] = nn.mul %[[S]], %[[S]] : tensor<f32>
// CHECK: %[[TOTAL:.+]] = nn.mul %[[SUM]], %[[S2]] : tensor<f32>
// CHECK: %[[ONE:.+]] = nn.constant dense<1.000000e+00> : tensor<f32>
// CHECK: %[[R:.+]] = nn.rsqrt %[[TOTAL]]
// CHECK: %[[NORM:.+]] = nn.div %[[ONE]], %[[R]]
// CHECK: %[[LAST:.+]] = nn.load @graphc.grad_norm : tensor<f32>
// CHECK: %[[SKIPPED:.+]] = nn.cmp ne, %[[K]], %{{.+}} : tensor<f32>
// CHECK: %[[RECORD:.+]] = nn.select %[[SKIPPED]], %[[LAST]], %[[NORM]]
// CHECK: nn.assign @graphc.grad_norm, %[[RECORD]]
// CHECK: %[[EPS:.+]] = nn.constant dense<9.99999997E-7> : tensor<f32>
// CHECK: %[[D:.+]] = nn.add %[[NORM]], %[[EPS]]
// CHECK: %[[MAX:.+]] = nn.constant dense<2.500000e+00> : tensor<f32>
// CHECK: %[[F:.+]] = nn.div %[[MAX]], %[[D]]
// CHECK: %[[LT:.+]] = nn.cmp lt, %[[F]], %[[ONE]]
// CHECK: %[[CLIP:.+]] = nn.select %[[LT]], %[[F]], %[[ONE]]
// CHECK: %[[SCALE:.+]] = nn.mul %[[S]], %[[CLIP]] : tensor<f32>
// CHECK: nn.sgd %{{.+}}, %[[DB]], %{{.+}} weight_decay 0.000000e+00 scaled_by %[[SCALE]] skip_if %[[K]] : tensor<3xf32>
// CHECK: nn.sgd %{{.+}}, %[[DW]], %{{.+}} weight_decay 1.000000e-04 scaled_by %[[SCALE]] skip_if %[[K]] : tensor<3x4xf32>, tensor<3x4xf16>

// NEGATIVE: error: graphc-optimizer: clip-grad-norm must be >= 0 (0: no clipping), got -1
// HUGE: error: graphc-optimizer: clip-grad-norm must be 0 or a normal, finite f32 {{.*}}, got 1e+39
// CHECK: nn.state @graphc.grad_norm : tensor<f32> = zeros
