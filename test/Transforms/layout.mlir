// RUN: graphc-opt %s -split-input-file -graphc-layout | FileCheck %s
// RUN: graphc-opt %s -split-input-file -graphc-layout="layout=nchw" | FileCheck %s --check-prefix=NCHW
// RUN: not graphc-opt %s -split-input-file -graphc-layout="layout=chwn" 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: graphc-opt %s -split-input-file -graphc-layout="filters=ohwi" | FileCheck %s --check-prefix=OHWI
// RUN: not graphc-opt %s -split-input-file -graphc-layout="filters=hwio" 2>&1 | FileCheck %s --check-prefix=BAD-FILTERS

// A conv + batch norm (decomposed, as graphc-decompose-training-ops leaves
// it) + ReLU + max pool + flatten + linear forward. Channels-last from the
// images' transpose to the flatten: the convolution and the pool take
// `channels_last`, the statistics reduce [0, 1, 2], the per-channel
// broadcasts go along dim 3, and one transpose back feeds the flatten.
nn.parameter @conv.weight : tensor<4x3x3x3xf32> = kaiming_normal
nn.parameter @fc.weight : tensor<10x64xf32> = kaiming_uniform
func.func @forward(%x: tensor<2x3x8x8xf32>, %y: tensor<2xi32>) -> tensor<f32> {
  %w = nn.load @conv.weight : tensor<4x3x3x3xf32>
  %c = nn.conv2d %x, %w padding [1, 1, 1, 1] : tensor<2x3x8x8xf32>, tensor<4x3x3x3xf32>
  %mean = nn.reduce_mean %c dims [0, 2, 3] : tensor<2x4x8x8xf32>
  %m = nn.broadcast %mean to %c dims [1] : tensor<4xf32>, tensor<2x4x8x8xf32>
  %d = nn.sub %c, %m : tensor<2x4x8x8xf32>
  %zero = nn.constant dense<0.0> : tensor<f32>
  %z = nn.broadcast %zero to %d dims [] : tensor<f32>, tensor<2x4x8x8xf32>
  %r = nn.max %d, %z : tensor<2x4x8x8xf32>
  %p = nn.max_pool2d %r window [2, 2] : tensor<2x4x8x8xf32>
  %f = nn.flatten %p start_dim 1 : tensor<2x4x4x4xf32>
  %fw = nn.load @fc.weight : tensor<10x64xf32>
  %logits = nn.linear %f, %fw : tensor<2x64xf32>, tensor<10x64xf32>
  %loss = nn.softmax_cross_entropy %logits, %y label_smoothing 0.0 : tensor<2x10xf32>, tensor<2xi32>
  return %loss : tensor<f32>
}

// CHECK-LABEL: func.func @forward
// CHECK-NEXT: %[[X:.*]] = nn.transpose %arg0 permutation [0, 2, 3, 1] : tensor<2x3x8x8xf32>
// CHECK-NEXT: nn.load @conv.weight
// CHECK-NEXT: %[[C:.*]] = nn.conv2d %[[X]], %{{.*}} padding [1, 1, 1, 1] channels_last : tensor<2x8x8x3xf32>, tensor<4x3x3x3xf32>
// CHECK-NEXT: %[[MEAN:.*]] = nn.reduce_mean %[[C]] dims [0, 1, 2] : tensor<2x8x8x4xf32>
// CHECK-NEXT: %[[M:.*]] = nn.broadcast %[[MEAN]] to %[[C]] dims [3] : tensor<4xf32>, tensor<2x8x8x4xf32>
// CHECK-NEXT: %[[D:.*]] = nn.sub %[[C]], %[[M]] : tensor<2x8x8x4xf32>
// CHECK-NEXT: %[[ZERO:.*]] = nn.constant
// CHECK-NEXT: %[[Z:.*]] = nn.broadcast %[[ZERO]] to %[[D]] dims [] : tensor<f32>, tensor<2x8x8x4xf32>
// CHECK-NEXT: %[[R:.*]] = nn.max %[[D]], %[[Z]] : tensor<2x8x8x4xf32>
// CHECK-NEXT: %[[P:.*]] = nn.max_pool2d %[[R]] window [2, 2] channels_last : tensor<2x8x8x4xf32>
// CHECK-NEXT: %[[BACK:.*]] = nn.transpose %[[P]] permutation [0, 3, 1, 2] : tensor<2x4x4x4xf32>
// CHECK-NEXT: nn.flatten %[[BACK]] start_dim 1 : tensor<2x4x4x4xf32>
// CHECK-NOT: nn.transpose
// CHECK: return

// NCHW-LABEL: func.func @forward
// NCHW-NOT: nn.transpose
// NCHW-NOT: channels_last
// NCHW: return

// BAD: graphc-layout: layout must be nhwc or nchw, got 'chwn'

// With filters=ohwi the convolution reads its filter through one transpose
// to [O, KH, KW, I] (filter_ohwi); the parameter itself stays OIHW.
// OHWI-LABEL: func.func @forward
// OHWI: %[[W:.*]] = nn.load @conv.weight : tensor<4x3x3x3xf32>
// OHWI-NEXT: %[[WT:.*]] = nn.transpose %[[W]] permutation [0, 2, 3, 1] : tensor<4x3x3x3xf32>
// OHWI: nn.conv2d %{{.*}}, %[[WT]] padding [1, 1, 1, 1] channels_last filter_ohwi : tensor<2x8x8x3xf32>, tensor<4x3x3x3xf32>
// OHWI: return

// BAD-FILTERS: graphc-layout: filters must be oihw or ohwi, got 'hwio'

// -----

// A global average pool becomes the mean over H and W, whose [N, C] is the
// NCHW op's (no transpose back); a reduction that would leave [N, H, C]
// rather than [N, C, H] reads an NCHW copy instead. @eval_step converts too.
nn.parameter @conv.weight : tensor<4x3x1x1xf32> = kaiming_normal
func.func @eval_step(%x: tensor<2x3x8x8xf32>, %y: tensor<2xi32>) -> (tensor<2x4xf32>, tensor<2x4x8xf32>) {
  %w = nn.load @conv.weight : tensor<4x3x1x1xf32>
  %c = nn.conv2d %x, %w : tensor<2x3x8x8xf32>, tensor<4x3x1x1xf32>
  %g = nn.global_avg_pool %c : tensor<2x4x8x8xf32>
  %s = nn.reduce_sum %c dims [3] : tensor<2x4x8x8xf32>
  return %g, %s : tensor<2x4xf32>, tensor<2x4x8xf32>
}

// CHECK-LABEL: func.func @eval_step
// CHECK: %[[C:.*]] = nn.conv2d %{{.*}}, %{{.*}} channels_last : tensor<2x8x8x3xf32>
// CHECK-NEXT: %[[BACK:.*]] = nn.transpose %[[C]] permutation [0, 3, 1, 2] : tensor<2x8x8x4xf32>
// CHECK-NEXT: %[[G:.*]] = nn.reduce_mean %[[C]] dims [1, 2] : tensor<2x8x8x4xf32>
// CHECK-NEXT: %[[S:.*]] = nn.reduce_sum %[[BACK]] dims [3] : tensor<2x4x8x8xf32>
// CHECK-NEXT: return %[[G]], %[[S]]
