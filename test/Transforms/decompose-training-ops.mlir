// RUN: graphc-opt %s -split-input-file -graphc-decompose-training-ops -verify-diagnostics | FileCheck %s

// Tests that training batch norm becomes per-channel reductions plus
// elementwise normalize/affine, and updates the running statistics in place:
// mean += 0.1 * (batch_mean - mean); var += 0.1 * (batch_var * 8/7 - var), with
// 8 = N*H*W values per channel (Bessel's correction).
// CHECK: nn.state @bn.running_mean
// CHECK-LABEL: func.func @forward
// CHECK-SAME: (%[[X:.+]]: tensor<2x3x2x2xf32>
// CHECK-NOT: nn.batch_norm
// CHECK: %[[OLDMEAN:.+]] = nn.load @bn.running_mean
// CHECK: %[[OLDVAR:.+]] = nn.load @bn.running_var
// CHECK: %[[MEAN:.+]] = nn.reduce_mean %[[X]] dims [0, 2, 3] : tensor<2x3x2x2xf32>
// CHECK: %[[MEANB:.+]] = nn.broadcast %[[MEAN]] to %[[X]] dims [1]
// CHECK: %[[XC:.+]] = nn.sub %[[X]], %[[MEANB]]
// CHECK: %[[SQ:.+]] = nn.mul %[[XC]], %[[XC]]
// CHECK: %[[VAR:.+]] = nn.reduce_mean %[[SQ]] dims [0, 2, 3]
// CHECK: nn.constant dense<9.99999974E-6>
// CHECK: %[[INV:.+]] = nn.rsqrt
// CHECK: %[[FACTOR:.+]] = nn.mul %{{.+}}, %[[INV]] : tensor<3xf32>
// CHECK: %[[FB:.+]] = nn.broadcast %[[FACTOR]] to %[[X]] dims [1]
// CHECK: %[[NORM:.+]] = nn.mul %[[XC]], %[[FB]]
// CHECK: %[[Y:.+]] = nn.add %[[NORM]], %{{.+}} : tensor<2x3x2x2xf32>
// CHECK: nn.sub %[[MEAN]], %[[OLDMEAN]]
// CHECK: nn.assign @bn.running_mean
// CHECK: nn.constant dense<1.14285719> : tensor<f32>
// CHECK: nn.assign @bn.running_var
// CHECK: nn.global_avg_pool %[[Y]]
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
  %2 = nn.softmax_cross_entropy %1, %y label_smoothing 0.0 : tensor<2x3xf32>, tensor<2xi32>
  return %2 : tensor<f32>
}

// -----

// Tests that training dropout becomes x * mask, keyed by the seed and the step
// counter, which is declared on first use; a zero-rate dropout disappears.
// CHECK: nn.state @graphc.step : tensor<i64> = zeros
// CHECK-LABEL: func.func @forward
// CHECK: %[[STEP:.+]] = nn.load @graphc.step : tensor<i64>
// CHECK: %[[MASK:.+]] = nn.dropout_mask %[[X:.+]], %[[STEP]] rate 5.000000e-01 seed 7 : tensor<2x3xf32>, tensor<i64>
// CHECK: %[[D:.+]] = nn.mul %[[X]], %[[MASK]] : tensor<2x3xf32>
// CHECK-NOT: nn.dropout
// CHECK: nn.softmax_cross_entropy %[[D]]
func.func @forward(%x: tensor<2x3xf32>, %y: tensor<2xi32>) -> tensor<f32> {
  %0 = nn.dropout %x rate 0.0 seed 1 : tensor<2x3xf32>
  %1 = nn.dropout %0 rate 0.5 seed 7 : tensor<2x3xf32>
  %2 = nn.softmax_cross_entropy %1, %y label_smoothing 0.0 : tensor<2x3xf32>, tensor<2xi32>
  return %2 : tensor<f32>
}

// -----

// Tests that the running statistics must be state the step can update.
nn.parameter @g : tensor<3xf32> = ones
func.func @forward(%x: tensor<2x3xf32>, %y: tensor<2xi32>, %m: tensor<3xf32>) -> tensor<f32> {
  %g = nn.load @g : tensor<3xf32>
  // expected-error@+1 {{the running mean of a training batch norm must be an nn.load of an nn.state}}
  %0 = nn.batch_norm %x, %g, %g, %m, %m epsilon 1.0e-05 momentum 0.1 : tensor<2x3xf32>, tensor<3xf32>
  %1 = nn.softmax_cross_entropy %0, %y label_smoothing 0.0 : tensor<2x3xf32>, tensor<2xi32>
  return %1 : tensor<f32>
}
