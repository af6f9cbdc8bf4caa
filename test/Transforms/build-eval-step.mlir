// RUN: graphc-opt %s -graphc-build-eval-step | FileCheck %s

// Tests that @eval_step normalizes with the running statistics (one
// per-channel multiply-add: factor = scale * rsqrt(var + eps), offset = shift -
// mean * factor), drops dropout, and returns the logits and the number of rows
// whose argmax equals the label; @forward is left as it was.
// CHECK-LABEL: func.func @forward
// CHECK: nn.batch_norm
// CHECK: nn.dropout
// CHECK-LABEL: func.func @eval_step
// CHECK-SAME: (%[[X:.+]]: tensor<2x3x2x2xf32>, %[[Y:.+]]: tensor<2xi32>) -> (tensor<2x3xf32>, tensor<i64>)
// CHECK: %[[G:.+]] = nn.load @bn.weight
// CHECK: %[[B:.+]] = nn.load @bn.bias
// CHECK: %[[M:.+]] = nn.load @bn.running_mean
// CHECK: %[[V:.+]] = nn.load @bn.running_var
// CHECK: %[[VE:.+]] = nn.add %[[V]], %{{.+}} : tensor<3xf32>
// CHECK: %[[INV:.+]] = nn.rsqrt %[[VE]]
// CHECK: %[[F:.+]] = nn.mul %[[G]], %[[INV]]
// CHECK: %[[MF:.+]] = nn.mul %[[M]], %[[F]]
// CHECK: %[[OFF:.+]] = nn.sub %[[B]], %[[MF]]
// CHECK: nn.mul %[[X]], %{{.+}} : tensor<2x3x2x2xf32>
// CHECK: %[[LOGITS:.+]] = nn.global_avg_pool
// CHECK-NOT: nn.dropout
// CHECK: %[[PRED:.+]] = nn.argmax %[[LOGITS]] dim 1 : tensor<2x3xf32>
// CHECK: %[[Y64:.+]] = nn.cast %[[Y]] : tensor<2xi32> to i64
// CHECK: %[[HIT:.+]] = nn.cmp eq, %[[PRED]], %[[Y64]] : tensor<2xi64>
// CHECK: %[[HITS:.+]] = nn.cast %[[HIT]] : tensor<2xi1> to i64
// CHECK: %[[N:.+]] = nn.reduce_sum %[[HITS]] dims [0] : tensor<2xi64>
// CHECK: return %[[LOGITS]], %[[N]] : tensor<2x3xf32>, tensor<i64>
nn.parameter @bn.weight : tensor<3xf32> = ones
nn.parameter @bn.bias : tensor<3xf32> = zeros
nn.state @bn.running_mean : tensor<3xf32> = zeros
nn.state @bn.running_var : tensor<3xf32> = ones
func.func @forward(%x: tensor<2x3x2x2xf32>, %y: tensor<2xi32>) -> tensor<f32> {
  %g = nn.load @bn.weight : tensor<3xf32>
  %b = nn.load @bn.bias : tensor<3xf32>
  %m = nn.load @bn.running_mean : tensor<3xf32>
  %v = nn.load @bn.running_var : tensor<3xf32>
  %0 = nn.batch_norm %x, %g, %b, %m, %v epsilon 1.0e-05 momentum 0.1 : tensor<2x3x2x2xf32>, tensor<3xf32>
  %1 = nn.global_avg_pool %0 : tensor<2x3x2x2xf32>
  %2 = nn.dropout %1 rate 0.5 seed 7 : tensor<2x3xf32>
  %3 = nn.softmax_cross_entropy %2, %y label_smoothing 0.0 : tensor<2x3xf32>, tensor<2xi32>
  return %3 : tensor<f32>
}
