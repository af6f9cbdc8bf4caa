// RUN: graphc-opt %s -split-input-file -graphc-set-batch-size=batch-size=8 -verify-diagnostics | FileCheck %s

// Tests that the batch dimension reaches every inferred type and the function
// type, including a reshape whose -1 becomes static.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: (%{{.+}}: tensor<8x1x4x4xf32>, %{{.+}}: tensor<8xi32>) -> tensor<f32>
// CHECK: nn.conv2d %{{.+}}, %{{.+}} padding [1, 1, 1, 1] : tensor<8x1x4x4xf32>, tensor<2x1x3x3xf32>
// CHECK: nn.relu %{{.+}} : tensor<8x2x4x4xf32>
// CHECK: nn.reshape %{{.+}} shape [-1, 32] : tensor<8x2x4x4xf32>
// CHECK: nn.linear %{{.+}}, %{{.+}} : tensor<8x32xf32>, tensor<3x32xf32>
// CHECK: nn.softmax_cross_entropy %{{.+}}, %{{.+}} label_smoothing 0.000000e+00 : tensor<8x3xf32>, tensor<8xi32>
nn.parameter @w : tensor<2x1x3x3xf32> = kaiming_normal
nn.parameter @fc : tensor<3x32xf32> = zeros
func.func @forward(%images: tensor<?x1x4x4xf32>, %labels: tensor<?xi32>) -> tensor<f32> {
  %w = nn.load @w : tensor<2x1x3x3xf32>
  %0 = nn.conv2d %images, %w padding [1, 1, 1, 1] : tensor<?x1x4x4xf32>, tensor<2x1x3x3xf32>
  %1 = nn.relu %0 : tensor<?x2x4x4xf32>
  %2 = nn.reshape %1 shape [-1, 32] : tensor<?x2x4x4xf32>
  %fc = nn.load @fc : tensor<3x32xf32>
  %3 = nn.linear %2, %fc : tensor<?x32xf32>, tensor<3x32xf32>
  %4 = nn.softmax_cross_entropy %3, %labels label_smoothing 0.0 : tensor<?x3xf32>, tensor<?xi32>
  return %4 : tensor<f32>
}

// -----

// Tests that a batch size already written in the file is overridden.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: (%{{.+}}: tensor<8x10xf32>, %{{.+}}: tensor<8xi64>)
// CHECK: nn.relu %{{.+}} : tensor<8x10xf32>
func.func @forward(%images: tensor<2x10xf32>, %labels: tensor<2xi64>) -> tensor<f32> {
  %0 = nn.relu %images : tensor<2x10xf32>
  %1 = nn.softmax_cross_entropy %0, %labels label_smoothing 0.0 : tensor<2x10xf32>, tensor<2xi64>
  return %1 : tensor<f32>
}

// -----

// Tests that an op whose shape no longer works at this batch size is reported
// at its location.
func.func @forward(%images: tensor<?x3xf32>, %labels: tensor<?xi32>) -> tensor<f32> {
  // expected-error@+1 {{'nn.reshape' op cannot reshape 24 elements into [5, -1]}}
  %0 = nn.reshape %images shape [5, -1] : tensor<?x3xf32>
  %1 = nn.softmax_cross_entropy %0, %labels label_smoothing 0.0 : tensor<5x?xf32>, tensor<?xi32>
  return %1 : tensor<f32>
}

// -----

// Tests that a model without @forward is refused.
// expected-error@+1 {{the model has no func.func @forward with a body}}
module {
  func.func private @other(tensor<?xf32>)
}

// -----

// Tests that every input needs a batch dimension.
// expected-error@+1 {{input #1 has no batch dimension: 'tensor<i32>'}}
func.func @forward(%images: tensor<?x3xf32>, %labels: tensor<i32>) -> tensor<f32> {
  %0 = nn.reduce_sum %images dims [0, 1] : tensor<?x3xf32>
  return %0 : tensor<f32>
}
