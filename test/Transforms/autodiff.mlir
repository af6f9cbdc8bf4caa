// RUN: graphc-opt %s -split-input-file -graphc-autodiff -verify-diagnostics | FileCheck %s

// Tests the linear, relu, fan-out and loss rules: the adjoint of a value used
// twice is the sum of both contributions, the images get no gradient, and each
// parameter's gradient is applied when backward completes it (bias first here).
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[X:.+]]: tensor<2x4xf32>, %[[Y:.+]]: tensor<2xi32>) -> tensor<f32>
// CHECK: %[[LIN:.+]] = nn.linear
// CHECK: %[[SUM:.+]] = nn.add %[[RELU:.+]], %[[LIN]]
// CHECK: %[[LOSS:.+]] = nn.softmax_cross_entropy %[[SUM]], %[[Y]]
// CHECK: %[[ONE:.+]] = nn.constant {graphc.loss_seed} dense<1.000000e+00> : tensor<f32>
// CHECK: %[[DSUM:.+]] = nn.softmax_cross_entropy_backward %[[ONE]], %[[SUM]], %[[Y]]
// CHECK: %[[POS:.+]] = nn.cmp gt, %[[LIN]], %[[ZERO:.+]] : tensor<2x3xf32>
// CHECK: %[[DRELU:.+]] = nn.select %[[POS]], %[[DSUM]], %[[ZERO]]
// CHECK: %[[DLIN:.+]] = nn.add %[[DSUM]], %[[DRELU]] : tensor<2x3xf32>
// CHECK: %[[DW:.+]] = nn.matmul %[[DLIN]], %[[X]] transpose_a : tensor<2x3xf32>, tensor<2x4xf32>
// CHECK: %[[DB:.+]] = nn.reduce_sum %[[DLIN]] dims [0] : tensor<2x3xf32>
// CHECK-NOT: nn.matmul %[[DLIN]], %{{.+}} :
// CHECK: nn.apply_gradient @b, %[[DB]] : tensor<3xf32>
// CHECK: nn.apply_gradient @w, %[[DW]] : tensor<3x4xf32>
// CHECK: return %[[LOSS]] : tensor<f32>
nn.parameter @w : tensor<3x4xf32> = zeros
nn.parameter @b : tensor<3xf32> = zeros
func.func @forward(%x: tensor<2x4xf32>, %y: tensor<2xi32>) -> tensor<f32> {
  %w = nn.load @w : tensor<3x4xf32>
  %b = nn.load @b : tensor<3xf32>
  %0 = nn.linear %x, %w, %b : tensor<2x4xf32>, tensor<3x4xf32>, tensor<3xf32>
  %1 = nn.relu %0 : tensor<2x3xf32>
  %2 = nn.add %1, %0 : tensor<2x3xf32>
  %3 = nn.softmax_cross_entropy %2, %y label_smoothing 0.0 : tensor<2x3xf32>, tensor<2xi32>
  return %3 : tensor<f32>
}

// -----

// Tests the conv2d rule: the filter gradient keeps the forward geometry, the
// bias gradient sums over N, H, W, and the first conv's input (the images)
// gets no backward-data; the second conv's input does.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[C1:.+]] = nn.conv2d %{{.+}}, %{{.+}}, %{{.+}} strides [2, 2] padding [1, 1, 1, 1] : tensor<2x4x8x8xf32>
// CHECK: %[[C2:.+]] = nn.conv2d %[[C1]], %{{.+}} groups 2 : tensor<2x6x4x4xf32>
// CHECK: %[[DC1:.+]] = nn.conv2d_backward_data %[[DC2:.+]], %{{.+}} input_size [4, 4] groups 2 : tensor<2x6x4x4xf32>, tensor<6x3x1x1xf32>
// CHECK: nn.conv2d_backward_filter %[[C1]], %[[DC2]] kernel_size [1, 1] groups 2 : tensor<2x6x4x4xf32>, tensor<2x6x4x4xf32>
// CHECK-NOT: nn.conv2d_backward_data %[[DC1]]
// CHECK: nn.conv2d_backward_filter %{{.+}}, %[[DC1]] kernel_size [3, 3] strides [2, 2] padding [1, 1, 1, 1] : tensor<2x4x8x8xf32>, tensor<2x6x4x4xf32>
// CHECK: nn.reduce_sum %[[DC1]] dims [0, 2, 3] : tensor<2x6x4x4xf32>
nn.parameter @c1.weight : tensor<6x4x3x3xf32> = kaiming_normal
nn.parameter @c1.bias : tensor<6xf32> = zeros
nn.parameter @c2.weight : tensor<6x3x1x1xf32> = kaiming_normal
func.func @forward(%x: tensor<2x4x8x8xf32>, %y: tensor<2xi32>) -> tensor<f32> {
  %w1 = nn.load @c1.weight : tensor<6x4x3x3xf32>
  %b1 = nn.load @c1.bias : tensor<6xf32>
  %0 = nn.conv2d %x, %w1, %b1 strides [2, 2] padding [1, 1, 1, 1] : tensor<2x4x8x8xf32>, tensor<6x4x3x3xf32>, tensor<6xf32>
  %w2 = nn.load @c2.weight : tensor<6x3x1x1xf32>
  %1 = nn.conv2d %0, %w2 groups 2 : tensor<2x6x4x4xf32>, tensor<6x3x1x1xf32>
  %2 = nn.global_avg_pool %1 : tensor<2x6x4x4xf32>
  %3 = nn.softmax_cross_entropy %2, %y label_smoothing 0.0 : tensor<2x6xf32>, tensor<2xi32>
  return %3 : tensor<f32>
}

// -----

// Tests the pooling and shape rules: global average pooling spreads dy / (H*W),
// flatten and reshape reshape back, max and average pooling use their ops.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[D:.+]] = nn.softmax_cross_entropy_backward
// CHECK: %[[R1:.+]] = nn.reshape %[[D]] shape [8] : tensor<2x4xf32>
// CHECK: %[[R:.+]] = nn.reshape %[[R1]] shape [2, 4] : tensor<8xf32>
// CHECK: %[[S:.+]] = nn.broadcast %[[R]] to %{{.+}} dims [0, 1] : tensor<2x4xf32>, tensor<2x4x2x2xf32>
// CHECK: %[[Q:.+]] = nn.constant dense<2.500000e-01> : tensor<f32>
// CHECK: nn.mul %[[S]], %{{.+}} : tensor<2x4x2x2xf32>
// CHECK: nn.avg_pool2d_backward %{{.+}} input_size [4, 4] window [2, 2] : tensor<2x4x2x2xf32>
// CHECK: nn.max_pool2d_backward %{{.+}}, %{{.+}} window [2, 2] : tensor<2x4x8x8xf32>, tensor<2x4x4x4xf32>
// CHECK: nn.apply_gradient @s, %{{.+}} : tensor<2x4x8x8xf32>
nn.parameter @s : tensor<2x4x8x8xf32> = ones
func.func @forward(%x: tensor<2x4x8x8xf32>, %y: tensor<2xi32>) -> tensor<f32> {
  %s = nn.load @s : tensor<2x4x8x8xf32>
  %0 = nn.mul %x, %s : tensor<2x4x8x8xf32>
  %1 = nn.max_pool2d %0 window [2, 2] : tensor<2x4x8x8xf32>
  %2 = nn.avg_pool2d %1 window [2, 2] : tensor<2x4x4x4xf32>
  %3 = nn.global_avg_pool %2 : tensor<2x4x2x2xf32>
  %4 = nn.reshape %3 shape [8] : tensor<2x4xf32>
  %5 = nn.reshape %4 shape [2, 4] : tensor<8xf32>
  %6 = nn.softmax_cross_entropy %5, %y label_smoothing 0.1 : tensor<2x4xf32>, tensor<2xi32>
  return %6 : tensor<f32>
}

// -----

// Tests the elementwise rules: d(a-b) = (dy, -dy); d(a*b) = (dy*b, dy*a);
// d(a/b) = (dy/b, -(dy*y)/b); d exp = dy*y; d log = dy/x; d rsqrt = dy*y^3*-0.5;
// max routes by a >= b; broadcasts sum over the broadcast dims.
// CHECK-LABEL: func.func @train_step
// CHECK-DAG: nn.neg
// CHECK-DAG: nn.cmp ge
// CHECK-DAG: nn.constant dense<-5.000000e-01> : tensor<f32>
// CHECK-DAG: nn.div
// CHECK: %[[G:.+]] = nn.reduce_sum %{{.+}} dims [0] keep_dims : tensor<2x3xf32>
// CHECK: %[[GR:.+]] = nn.reshape %[[G]] shape [3] : tensor<1x3xf32>
// CHECK: nn.apply_gradient @v, %[[GR]] : tensor<3xf32>
nn.parameter @v : tensor<3xf32> = ones
func.func @forward(%x: tensor<2x3xf32>, %y: tensor<2xi32>) -> tensor<f32> {
  %v = nn.load @v : tensor<3xf32>
  %vb = nn.broadcast %v to %x dims [1] : tensor<3xf32>, tensor<2x3xf32>
  %0 = nn.sub %x, %vb : tensor<2x3xf32>
  %1 = nn.mul %0, %vb : tensor<2x3xf32>
  %2 = nn.exp %1 : tensor<2x3xf32>
  %3 = nn.log %2 : tensor<2x3xf32>
  %4 = nn.rsqrt %2 : tensor<2x3xf32>
  %5 = nn.div %3, %4 : tensor<2x3xf32>
  %6 = nn.max %5, %vb : tensor<2x3xf32>
  %7 = nn.softmax_cross_entropy %6, %y label_smoothing 0.0 : tensor<2x3xf32>, tensor<2xi32>
  return %7 : tensor<f32>
}

// -----

// Tests the reduction rules: sums broadcast back, means also scale by 1/count,
// maxes route to the elements equal to the max, shared evenly among ties
// (here all four: @p is ones).
// CHECK-LABEL: func.func @train_step
// CHECK: nn.broadcast %{{.+}} to %{{.+}} dims [0, 1, 2] : tensor<2x3x1xf32>, tensor<2x3x4xf32>
// CHECK: %[[EQ:.+]] = nn.cmp eq
// CHECK: %[[HITS:.+]] = nn.cast %[[EQ]] : tensor<2x3x4xi1> to f32
// CHECK: %[[TIES:.+]] = nn.reduce_sum %[[HITS]] dims [2] keep_dims
// CHECK: %[[SHARE:.+]] = nn.div %{{.+}}, %[[TIES]] : tensor<2x3x1xf32>
// CHECK: %[[G:.+]] = nn.broadcast %[[SHARE]]
// CHECK: nn.select %[[EQ]], %[[G]]
// CHECK: nn.broadcast %{{.+}} to %{{.+}} dims [0, 1] : tensor<2x3xf32>, tensor<2x3x4xf32>
// CHECK: nn.constant dense<2.500000e-01> : tensor<f32>
nn.parameter @p : tensor<2x3x4xf32> = ones
func.func @forward(%x: tensor<2x3x4xf32>, %y: tensor<2xi32>) -> tensor<f32> {
  %p = nn.load @p : tensor<2x3x4xf32>
  %0 = nn.reduce_mean %p dims [2] : tensor<2x3x4xf32>
  %1 = nn.reduce_max %p dims [2] keep_dims : tensor<2x3x4xf32>
  %2 = nn.reduce_sum %1 dims [2] : tensor<2x3x1xf32>
  %3 = nn.add %0, %2 : tensor<2x3xf32>
  %4 = nn.softmax_cross_entropy %3, %y label_smoothing 0.0 : tensor<2x3xf32>, tensor<2xi32>
  return %4 : tensor<f32>
}

// -----

// Tests the matmul rule for C = A B^T: dA = dC B, dB = dC^T A.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[D:.+]] = nn.softmax_cross_entropy_backward
// CHECK-DAG: nn.matmul %[[D]], %[[B:.+]] : tensor<2x3xf32>, tensor<3x5xf32>
// CHECK-DAG: nn.matmul %[[D]], %[[A:.+]] transpose_a : tensor<2x3xf32>, tensor<2x5xf32>
nn.parameter @a : tensor<2x5xf32> = ones
nn.parameter @b : tensor<3x5xf32> = ones
func.func @forward(%x: tensor<2x5xf32>, %y: tensor<2xi32>) -> tensor<f32> {
  %a = nn.load @a : tensor<2x5xf32>
  %b = nn.load @b : tensor<3x5xf32>
  %0 = nn.matmul %a, %b transpose_b : tensor<2x5xf32>, tensor<3x5xf32>
  %1 = nn.softmax_cross_entropy %0, %y label_smoothing 0.0 : tensor<2x3xf32>, tensor<2xi32>
  return %1 : tensor<f32>
}

// -----

// Tests that a parameter that does not reach the loss is an error naming it.
// expected-error@+1 {{parameter @unused does not reach the loss, so it gets no gradient}}
nn.parameter @unused : tensor<2x3xf32> = ones
nn.parameter @w : tensor<2x3xf32> = ones
func.func @forward(%x: tensor<2x3xf32>, %y: tensor<2xi32>) -> tensor<f32> {
  %u = nn.load @unused : tensor<2x3xf32>
  %m = nn.cmp gt, %u, %x : tensor<2x3xf32>
  %w = nn.load @w : tensor<2x3xf32>
  %0 = nn.select %m, %w, %x : tensor<2x3xi1>, tensor<2x3xf32>
  %1 = nn.softmax_cross_entropy %0, %y label_smoothing 0.0 : tensor<2x3xf32>, tensor<2xi32>
  return %1 : tensor<f32>
}

// -----

// Tests that training batch norm must be decomposed first.
nn.parameter @g : tensor<3xf32> = ones
nn.state @m : tensor<3xf32> = zeros
func.func @forward(%x: tensor<2x3xf32>, %y: tensor<2xi32>) -> tensor<f32> {
  %g = nn.load @g : tensor<3xf32>
  %m = nn.load @m : tensor<3xf32>
  // expected-error@+1 {{'nn.batch_norm' must be decomposed before autodiff (graphc-decompose-training-ops)}}
  %0 = nn.batch_norm %x, %g, %g, %m, %m epsilon 1.0e-5 momentum 0.1 : tensor<2x3xf32>, tensor<3xf32>
  %1 = nn.softmax_cross_entropy %0, %y label_smoothing 0.0 : tensor<2x3xf32>, tensor<2xi32>
  return %1 : tensor<f32>
}

// -----

// Tests that autodiff needs static shapes.
nn.parameter @w : tensor<3x4xf32> = zeros
func.func @forward(%x: tensor<?x4xf32>, %y: tensor<?xi32>) -> tensor<f32> {
  %w = nn.load @w : tensor<3x4xf32>
  // expected-error@+1 {{autodiff needs static shapes; run graphc-set-batch-size first}}
  %0 = nn.linear %x, %w : tensor<?x4xf32>, tensor<3x4xf32>
  %1 = nn.softmax_cross_entropy %0, %y label_smoothing 0.0 : tensor<?x3xf32>, tensor<?xi32>
  return %1 : tensor<f32>
}

// -----

// Tests the select, cast, neg and flatten rules: select routes dy by the
// condition, a cast's gradient is cast back, neg negates, flatten reshapes back.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[D:.+]] = nn.softmax_cross_entropy_backward
// CHECK: %[[DN:.+]] = nn.neg %[[D]] : tensor<2x6xf32>
// CHECK: %[[DS:.+]] = nn.select %[[C:.+]], %[[DN]], %{{.+}} : tensor<2x6xi1>, tensor<2x6xf32>
// CHECK: %[[DF:.+]] = nn.reshape %[[DS]] shape [2, 2, 3] : tensor<2x6xf32>
// CHECK: %[[DC:.+]] = nn.cast %[[DF]] : tensor<2x2x3xf32> to f16
// CHECK: nn.apply_gradient @h, %[[DC]] : tensor<2x2x3xf16>
nn.parameter @h : tensor<2x2x3xf16> = ones
func.func @forward(%x: tensor<2x6xf32>, %y: tensor<2xi32>) -> tensor<f32> {
  %h = nn.load @h : tensor<2x2x3xf16>
  %0 = nn.cast %h : tensor<2x2x3xf16> to f32
  %1 = nn.flatten %0 start_dim 1 : tensor<2x2x3xf32>
  %c = nn.cmp lt, %x, %1 : tensor<2x6xf32>
  %2 = nn.select %c, %1, %x : tensor<2x6xi1>, tensor<2x6xf32>
  %3 = nn.neg %2 : tensor<2x6xf32>
  %4 = nn.softmax_cross_entropy %3, %y label_smoothing 0.0 : tensor<2x6xf32>, tensor<2xi32>
  return %4 : tensor<f32>
}

// -----

// Tests that a constant broadcast to an activation's shape gets no adjoint
// (GELU's 1/sqrt(2), attention's scale): its shape_of is only measured, so
// the gradients of x * c and x / c are dy * c and dy / c alone, with no
// dy * x or -(dy * y) / c computed for the constant and left unread.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[D:.+]] = nn.softmax_cross_entropy_backward
// CHECK-NEXT: %[[DM:.+]] = nn.div %[[D]], %[[C2:.+]] : tensor<2x3xf32>
// CHECK-NEXT: %[[DW:.+]] = nn.mul %[[DM]], %[[C1:.+]] : tensor<2x3xf32>
// CHECK-NEXT: nn.apply_gradient @w, %[[DW]]
// CHECK-NOT: nn.neg
// CHECK-NOT: nn.mul
// CHECK: return
nn.parameter @w : tensor<2x3xf32> = ones
func.func @forward(%x: tensor<2x3xf32>, %y: tensor<2xi32>) -> tensor<f32> {
  %w = nn.load @w : tensor<2x3xf32>
  %c = nn.constant dense<0.5> : tensor<f32>
  %c1 = nn.broadcast %c to %w dims [] : tensor<f32>, tensor<2x3xf32>
  %0 = nn.mul %w, %c1 : tensor<2x3xf32>
  %c2 = nn.broadcast %c to %0 dims [] : tensor<f32>, tensor<2x3xf32>
  %1 = nn.div %0, %c2 : tensor<2x3xf32>
  %2 = nn.softmax_cross_entropy %1, %y label_smoothing 0.0 : tensor<2x3xf32>, tensor<2xi32>
  return %2 : tensor<f32>
}

// -----

// Tests the adjoint of a tensor three slices read (a packed q/k/v
// projection): the slice rule's zero-padded concats are summed piecewise
// into one concat of the three gradients, with no add and no zeros left.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[D:.+]] = nn.softmax_cross_entropy_backward
// CHECK: %[[C:.+]] = nn.concat %{{.+}}, %{{.+}}, %{{.+}} dim 1 : tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>
// CHECK-NOT: nn.add
// CHECK-NOT: nn.broadcast
// CHECK: nn.apply_gradient @w, %[[C]]
nn.parameter @w : tensor<2x6xf32> = ones
func.func @forward(%x: tensor<2x6xf32>, %y: tensor<2xi32>) -> tensor<f32> {
  %w = nn.load @w : tensor<2x6xf32>
  %q = nn.slice %w dim 1 start 0 size 2 : tensor<2x6xf32>
  %k = nn.slice %w dim 1 start 2 size 2 : tensor<2x6xf32>
  %v = nn.slice %w dim 1 start 4 size 2 : tensor<2x6xf32>
  %0 = nn.mul %q, %k : tensor<2x2xf32>
  %1 = nn.mul %0, %v : tensor<2x2xf32>
  %2 = nn.softmax_cross_entropy %1, %y label_smoothing 0.0 : tensor<2x2xf32>, tensor<2xi32>
  return %2 : tensor<f32>
}
