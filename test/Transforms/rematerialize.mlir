// The tensors here are small: min-bytes=0 lets them be recomputed, and the
// default's run shows that values under 64 KiB are kept.
// RUN: graphc-opt %s -split-input-file -graphc-rematerialize="min-bytes=0" | FileCheck %s
// RUN: graphc-opt %s -split-input-file -graphc-rematerialize="min-bytes=0 library-inputs=false" | FileCheck %s --check-prefix=FUSED
// RUN: graphc-opt %s -split-input-file -graphc-rematerialize="min-bytes=0 max-ops=1" | FileCheck %s --check-prefix=BUDGET
// RUN: graphc-opt %s -split-input-file -graphc-rematerialize | FileCheck %s --check-prefix=SMALL

// A conv + batch-norm + ReLU + conv step as graphc-autodiff writes it
// (shortened). Backward reads the centred activation %d (to be kept: its
// cone would keep the convolution's output, as many bytes), the normalized
// %n (ReLU's mask), ReLU's zero and ReLU's output %r (the second
// convolution's filter gradient).
nn.parameter @conv.weight : tensor<4x3x3x3xf32> = kaiming_normal
nn.parameter @conv2.weight : tensor<4x4x1x1xf32> = kaiming_normal
nn.parameter @fc.weight : tensor<10x256xf32> = kaiming_uniform
func.func @train_step(%x: tensor<2x3x8x8xf32>, %y: tensor<2xi32>) -> tensor<f32> {
  %w = nn.load @conv.weight : tensor<4x3x3x3xf32>
  %c = nn.conv2d %x, %w padding [1, 1, 1, 1] : tensor<2x3x8x8xf32>, tensor<4x3x3x3xf32>
  %mean = nn.reduce_mean %c dims [0, 2, 3] : tensor<2x4x8x8xf32>
  %m = nn.broadcast %mean to %c dims [1] : tensor<4xf32>, tensor<2x4x8x8xf32>
  %d = nn.sub %c, %m : tensor<2x4x8x8xf32>
  %sq = nn.mul %d, %d : tensor<2x4x8x8xf32>
  %var = nn.reduce_mean %sq dims [0, 2, 3] : tensor<2x4x8x8xf32>
  %v = nn.broadcast %var to %sq dims [1] : tensor<4xf32>, tensor<2x4x8x8xf32>
  %n = nn.mul %d, %v : tensor<2x4x8x8xf32>
  %zero = nn.constant dense<0.0> : tensor<f32>
  %z = nn.broadcast %zero to %n dims [] : tensor<f32>, tensor<2x4x8x8xf32>
  %r = nn.max %n, %z : tensor<2x4x8x8xf32>
  %w2 = nn.load @conv2.weight : tensor<4x4x1x1xf32>
  %c2 = nn.conv2d %r, %w2 : tensor<2x4x8x8xf32>, tensor<4x4x1x1xf32>
  %f = nn.flatten %c2 start_dim 1 : tensor<2x4x8x8xf32>
  %fw = nn.load @fc.weight : tensor<10x256xf32>
  %logits = nn.linear %f, %fw : tensor<2x256xf32>, tensor<10x256xf32>
  %loss = nn.softmax_cross_entropy %logits, %y label_smoothing 0.0 : tensor<2x10xf32>, tensor<2xi32>
  %one = nn.constant {graphc.loss_seed} dense<1.0> : tensor<f32>
  %dl = nn.softmax_cross_entropy_backward %one, %logits, %y label_smoothing 0.0 : tensor<f32>, tensor<2x10xf32>, tensor<2xi32>
  %dfw = nn.matmul %dl, %f transpose_a : tensor<2x10xf32>, tensor<2x256xf32>
  nn.apply_gradient @fc.weight, %dfw : tensor<10x256xf32>
  %df = nn.matmul %dl, %fw : tensor<2x10xf32>, tensor<10x256xf32>
  %dc2 = nn.reshape %df shape [2, 4, 8, 8] : tensor<2x256xf32>
  %dw2 = nn.conv2d_backward_filter %r, %dc2 kernel_size [1, 1] : tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>
  nn.apply_gradient @conv2.weight, %dw2 : tensor<4x4x1x1xf32>
  %dr = nn.conv2d_backward_data %dc2, %w2 input_size [8, 8] : tensor<2x4x8x8xf32>, tensor<4x4x1x1xf32>
  %pos = nn.cmp gt, %n, %z : tensor<2x4x8x8xf32>
  %dn = nn.select %pos, %dr, %z : tensor<2x4x8x8xi1>, tensor<2x4x8x8xf32>
  %dd = nn.mul %dn, %d : tensor<2x4x8x8xf32>
  %dw = nn.conv2d_backward_filter %x, %dd kernel_size [3, 3] padding [1, 1, 1, 1] : tensor<2x3x8x8xf32>, tensor<2x4x8x8xf32>
  nn.apply_gradient @conv.weight, %dw : tensor<4x3x3x3xf32>
  return %loss : tensor<f32>
}

// Forward is unchanged; %d stays (recomputing it would keep %c instead).
// With the default min-bytes, nothing here is large enough to recompute: no
// count on the module, and the filter gradient reads forward's ReLU output.
// SMALL-NOT: graphc.rematerialized
// SMALL-LABEL: func.func @train_step
// SMALL: %[[R:[0-9]+]] = nn.max
// SMALL: nn.conv2d_backward_filter %[[R]],
// CHECK-LABEL: func.func @train_step
// CHECK: %[[C:.*]] = nn.conv2d
// CHECK: %[[D:.*]] = nn.sub %[[C]]
// CHECK: %[[VAR:.*]] = nn.reduce_mean %{{.*}} dims [0, 2, 3]
// CHECK: %[[N:.*]] = nn.mul %[[D]], %{{.*}}
// CHECK: %[[ZERO:.*]] = nn.constant dense<0.000000e+00>
// CHECK: %[[R:.*]] = nn.max %[[N]], %{{.*}}
// CHECK: nn.conv2d %[[R]]
// CHECK: nn.softmax_cross_entropy_backward
// The second convolution's filter gradient reads ReLU's output recomputed
// from %d and the variance; the broadcast measures %d, not the forward %sq.
// CHECK: %[[V2:.*]] = nn.broadcast %[[VAR]] to %[[D]] dims [1]
// CHECK-NEXT: %[[N2:.*]] = nn.mul %[[D]], %[[V2]]
// CHECK-NEXT: %[[Z2:.*]] = nn.broadcast %[[ZERO]] to %{{.*}} dims []
// CHECK-NEXT: %[[R2:.*]] = nn.max %[[N2]], %[[Z2]]
// CHECK-NEXT: nn.conv2d_backward_filter %[[R2]]
// ReLU's mask recomputes %n, and the zero, just before the compare.
// CHECK: nn.conv2d_backward_data
// CHECK-NEXT: %[[V3:.*]] = nn.broadcast %[[VAR]] to %[[D]] dims [1]
// CHECK-NEXT: %[[N3:.*]] = nn.mul %[[D]], %[[V3]]
// CHECK-NEXT: %[[Z3:.*]] = nn.broadcast %[[ZERO]]
// CHECK-NEXT: %[[POS:.*]] = nn.cmp gt, %[[N3]], %[[Z3]]
// CHECK-NEXT: nn.select %[[POS]], %{{.*}}, %[[Z3]]
// CHECK-NEXT: nn.mul %{{.*}}, %[[D]]
// CHECK-NOT: nn.sub

// Without library inputs ReLU's output stays: a convolution reads it, so
// recomputing it would write it to memory again.
// FUSED-LABEL: func.func @train_step
// FUSED: %[[R:.*]] = nn.max
// FUSED: nn.softmax_cross_entropy_backward
// FUSED: nn.conv2d_backward_filter %[[R]]
// FUSED: nn.conv2d_backward_data
// FUSED-NEXT: nn.broadcast
// FUSED-NEXT: nn.mul
// FUSED-NEXT: nn.broadcast
// FUSED-NEXT: nn.cmp gt

// With one op per value only the zero (a broadcast of a constant) is cloned:
// %n takes two ops, and %r would take four.
// BUDGET-LABEL: func.func @train_step
// BUDGET: nn.reduce_mean
// BUDGET: nn.reduce_mean
// BUDGET-NEXT: nn.broadcast
// BUDGET-NEXT: %[[N:.*]] = nn.mul
// BUDGET: %[[R:.*]] = nn.max
// BUDGET: nn.conv2d_backward_filter %[[R]]
// BUDGET: nn.conv2d_backward_data
// BUDGET-NEXT: %[[Z:.*]] = nn.broadcast
// BUDGET-NEXT: nn.cmp gt, %[[N]], %[[Z]]

// -----

// A cone that reads a state an nn.assign overwrites before backward's read
// is not recomputed: the clone would read the new value.
nn.state @s : tensor<4xf32> = ones
nn.parameter @fc.weight : tensor<10x4xf32> = kaiming_uniform
func.func @train_step(%x: tensor<2x4xf32>, %y: tensor<2xi32>) -> tensor<f32> {
  %s = nn.load @s : tensor<4xf32>
  %b = nn.broadcast %s to %x dims [1] : tensor<4xf32>, tensor<2x4xf32>
  %a = nn.mul %x, %b : tensor<2x4xf32>
  %two = nn.constant dense<2.0> : tensor<f32>
  %t = nn.broadcast %two to %s dims [] : tensor<f32>, tensor<4xf32>
  %s2 = nn.mul %s, %t : tensor<4xf32>
  nn.assign @s, %s2 : tensor<4xf32>
  %fw = nn.load @fc.weight : tensor<10x4xf32>
  %logits = nn.linear %a, %fw : tensor<2x4xf32>, tensor<10x4xf32>
  %loss = nn.softmax_cross_entropy %logits, %y label_smoothing 0.0 : tensor<2x10xf32>, tensor<2xi32>
  %one = nn.constant {graphc.loss_seed} dense<1.0> : tensor<f32>
  %dl = nn.softmax_cross_entropy_backward %one, %logits, %y label_smoothing 0.0 : tensor<f32>, tensor<2x10xf32>, tensor<2xi32>
  %dfw = nn.matmul %dl, %a transpose_a : tensor<2x10xf32>, tensor<2x4xf32>
  %dx = nn.matmul %dl, %x transpose_a : tensor<2x10xf32>, tensor<2x4xf32>
  %g = nn.add %dfw, %dx : tensor<10x4xf32>
  nn.apply_gradient @fc.weight, %g : tensor<10x4xf32>
  return %loss : tensor<f32>
}

// CHECK-LABEL: func.func @train_step
// CHECK: %[[A:.*]] = nn.mul %arg0
// CHECK: nn.softmax_cross_entropy_backward
// CHECK-NEXT: nn.matmul %{{.*}}, %[[A]] transpose_a

// -----

// The same step without the assign recomputes %a from the input (kept
// anyway) and the state.
nn.state @s : tensor<4xf32> = ones
nn.parameter @fc.weight : tensor<10x4xf32> = kaiming_uniform
func.func @train_step(%x: tensor<2x4xf32>, %y: tensor<2xi32>) -> tensor<f32> {
  %s = nn.load @s : tensor<4xf32>
  %b = nn.broadcast %s to %x dims [1] : tensor<4xf32>, tensor<2x4xf32>
  %a = nn.mul %x, %b : tensor<2x4xf32>
  %fw = nn.load @fc.weight : tensor<10x4xf32>
  %logits = nn.linear %a, %fw : tensor<2x4xf32>, tensor<10x4xf32>
  %loss = nn.softmax_cross_entropy %logits, %y label_smoothing 0.0 : tensor<2x10xf32>, tensor<2xi32>
  %one = nn.constant {graphc.loss_seed} dense<1.0> : tensor<f32>
  %dl = nn.softmax_cross_entropy_backward %one, %logits, %y label_smoothing 0.0 : tensor<f32>, tensor<2x10xf32>, tensor<2xi32>
  %dfw = nn.matmul %dl, %a transpose_a : tensor<2x10xf32>, tensor<2x4xf32>
  %dx = nn.matmul %dl, %x transpose_a : tensor<2x10xf32>, tensor<2x4xf32>
  %g = nn.add %dfw, %dx : tensor<10x4xf32>
  nn.apply_gradient @fc.weight, %g : tensor<10x4xf32>
  return %loss : tensor<f32>
}

// CHECK-LABEL: func.func @train_step
// CHECK: nn.softmax_cross_entropy_backward
// CHECK-NEXT: %[[B:.*]] = nn.broadcast %{{.*}} to %arg0 dims [1]
// CHECK-NEXT: %[[A2:.*]] = nn.mul %arg0, %[[B]]
// CHECK-NEXT: nn.matmul %{{.*}}, %[[A2]] transpose_a
