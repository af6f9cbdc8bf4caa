// RUN: graphc-opt %s -split-input-file '-graphc-input-normalize=mean=0.485,0.456,0.406 std=0.229,0.224,0.225' | FileCheck %s
// RUN: graphc-opt %s -split-input-file '-graphc-input-normalize=mean=0.5 std=0.25' | FileCheck %s --check-prefix=ONE

// Tests that the images become bytes, cast and multiply-added per channel
// (1 / (255 std), -mean / std) before anything else reads them, and that
// the function type follows.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: (%[[X:.+]]: tensor<8x3x4x4xi8>, %{{.+}}: tensor<8xi32>) -> tensor<f32>
// CHECK: %[[F:.+]] = nn.cast %[[X]] : tensor<8x3x4x4xi8> to f32
// CHECK: %[[S:.+]] = nn.constant dense<[0.0171247534, 0.0175070036, 0.0174291935]> : tensor<3xf32>
// CHECK: %[[SB:.+]] = nn.broadcast %[[S]] to %[[F]] dims [1] : tensor<3xf32>, tensor<8x3x4x4xf32>
// CHECK: %[[M:.+]] = nn.mul %[[F]], %[[SB]] : tensor<8x3x4x4xf32>
// CHECK: %[[B:.+]] = nn.constant dense<[-2.11790395, -2.03571439, -1.80444443]> : tensor<3xf32>
// CHECK: %[[BB:.+]] = nn.broadcast %[[B]] to %[[F]] dims [1] : tensor<3xf32>, tensor<8x3x4x4xf32>
// CHECK: %[[N:.+]] = nn.add %[[M]], %[[BB]] : tensor<8x3x4x4xf32>
// CHECK: nn.conv2d %[[N]], %{{.+}} padding [1, 1, 1, 1]
// CHECK: nn.relu %[[N]] : tensor<8x3x4x4xf32>
// With one mean and std: scalars for every element.
// ONE-LABEL: func.func @forward
// ONE-SAME: tensor<8x3x4x4xi8>
// ONE: nn.constant dense<0.0156862754> : tensor<f32>
// ONE: nn.broadcast %{{.+}} to %{{.+}} dims [] : tensor<f32>, tensor<8x3x4x4xf32>
// ONE: nn.constant dense<-2.000000e+00> : tensor<f32>
nn.parameter @w : tensor<2x3x3x3xf32> = kaiming_normal
func.func @forward(%images: tensor<8x3x4x4xf32>, %labels: tensor<8xi32>) -> tensor<f32> {
  %w = nn.load @w : tensor<2x3x3x3xf32>
  %0 = nn.conv2d %images, %w padding [1, 1, 1, 1] : tensor<8x3x4x4xf32>, tensor<2x3x3x3xf32>
  %r = nn.relu %images : tensor<8x3x4x4xf32>
  %1 = nn.reshape %0 shape [8, 32] : tensor<8x2x4x4xf32>
  %2 = nn.softmax_cross_entropy %1, %labels label_smoothing 0.0 : tensor<8x32xf32>, tensor<8xi32>
  return %2 : tensor<f32>
}

// -----

// An inference model (@infer, no @forward) is normalized the same way.
// CHECK-LABEL: func.func @infer
// CHECK-SAME: tensor<2x3x4x4xi8>
// CHECK: nn.cast
// ONE-LABEL: func.func @infer
// ONE-SAME: tensor<2x3x4x4xi8>
func.func @infer(%images: tensor<2x3x4x4xf32>) -> tensor<2x3x4x4xf32> {
  %0 = nn.relu %images : tensor<2x3x4x4xf32>
  return %0 : tensor<2x3x4x4xf32>
}
