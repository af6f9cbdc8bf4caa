// RUN: graphc-opt %s | graphc-opt | FileCheck %s
// RUN: graphc-opt %s -mlir-print-op-generic | graphc-opt | FileCheck %s

// CHECK: nn.parameter @conv.weight : tensor<8x4x3x3xf32> = kaiming_normal_fan_out
nn.parameter @conv.weight : tensor<8x4x3x3xf32> = kaiming_normal_fan_out
// CHECK: nn.parameter @fc.weight : tensor<10x8xf32> = normal(1.000000e-02)
nn.parameter @fc.weight : tensor<10x8xf32> = normal(0.01)
// CHECK: nn.parameter @fc.bias : tensor<10xf32> = uniform(5.000000e-01)
nn.parameter @fc.bias : tensor<10xf32> = uniform(0.5)
// CHECK: nn.parameter @gain : tensor<2x2xf32> = constant(2.500000e-01)
nn.parameter @gain : tensor<2x2xf32> = constant(0.25)
// CHECK: nn.state @bn.running_var : tensor<8xf32> = ones
nn.state @bn.running_var : tensor<8xf32> = ones
// CHECK: nn.state @step : tensor<i64> = zeros
nn.state @step : tensor<i64> = zeros

// CHECK-LABEL: func.func @variables
func.func @variables() -> tensor<8x4x3x3xf32> {
  // CHECK: nn.load @conv.weight : tensor<8x4x3x3xf32>
  %w = nn.load @conv.weight : tensor<8x4x3x3xf32>
  return %w : tensor<8x4x3x3xf32>
}

// CHECK-LABEL: func.func @elementwise
// CHECK-SAME: (%[[A:.+]]: tensor<?x4xf32>, %[[B:.+]]: tensor<?x4xf32>)
func.func @elementwise(%a: tensor<?x4xf32>, %b: tensor<?x4xf32>) -> tensor<?x4xf16> {
  // CHECK: %[[C:.+]] = nn.constant dense<5.000000e-01> : tensor<f32>
  %c = nn.constant dense<0.5> : tensor<f32>
  // CHECK: nn.relu %[[A]] : tensor<?x4xf32>
  %0 = nn.relu %a : tensor<?x4xf32>
  // CHECK: nn.neg
  %1 = nn.neg %0 : tensor<?x4xf32>
  // CHECK: nn.exp
  %2 = nn.exp %1 : tensor<?x4xf32>
  // CHECK: nn.log
  %3 = nn.log %2 : tensor<?x4xf32>
  // CHECK: nn.rsqrt
  %4 = nn.rsqrt %3 : tensor<?x4xf32>
  // CHECK: nn.add %{{.+}}, %[[B]] : tensor<?x4xf32>
  %5 = nn.add %4, %b : tensor<?x4xf32>
  // CHECK: nn.sub
  %6 = nn.sub %5, %b : tensor<?x4xf32>
  // CHECK: nn.mul
  %7 = nn.mul %6, %b : tensor<?x4xf32>
  // CHECK: nn.div
  %8 = nn.div %7, %b : tensor<?x4xf32>
  // CHECK: nn.max
  %9 = nn.max %8, %b : tensor<?x4xf32>
  // CHECK: %[[HALF:.+]] = nn.broadcast %[[C]] to %[[A]] dims [] : tensor<f32>, tensor<?x4xf32>
  %half = nn.broadcast %c to %a dims [] : tensor<f32>, tensor<?x4xf32>
  // CHECK: %[[M:.+]] = nn.cmp gt, %{{.+}}, %[[HALF]] : tensor<?x4xf32>
  %m = nn.cmp gt, %9, %half : tensor<?x4xf32>
  // CHECK: nn.select %[[M]], %{{.+}}, %[[HALF]] : tensor<?x4xi1>, tensor<?x4xf32>
  %s = nn.select %m, %9, %half : tensor<?x4xi1>, tensor<?x4xf32>
  // CHECK: nn.cast %{{.+}} : tensor<?x4xf32> to f16
  %h = nn.cast %s : tensor<?x4xf32> to f16
  return %h : tensor<?x4xf16>
}

// CHECK-LABEL: func.func @reductions
func.func @reductions(%x: tensor<?x8x5x5xf32>) -> (tensor<8xf32>, tensor<1x8x1x1xf32>, tensor<?x8xf32>) {
  // CHECK: nn.reduce_sum %{{.+}} dims [0, 2, 3] : tensor<?x8x5x5xf32>
  %0 = nn.reduce_sum %x dims [0, 2, 3] : tensor<?x8x5x5xf32>
  // CHECK: nn.reduce_mean %{{.+}} dims [0, 2, 3] keep_dims : tensor<?x8x5x5xf32>
  %1 = nn.reduce_mean %x dims [0, 2, 3] keep_dims : tensor<?x8x5x5xf32>
  // CHECK: nn.reduce_max %{{.+}} dims [2, 3] : tensor<?x8x5x5xf32>
  %2 = nn.reduce_max %x dims [2, 3] : tensor<?x8x5x5xf32>
  return %0, %1, %2 : tensor<8xf32>, tensor<1x8x1x1xf32>, tensor<?x8xf32>
}

// CHECK-LABEL: func.func @conv_norm_pool
func.func @conv_norm_pool(%x: tensor<?x4x16x16xf32>, %w: tensor<8x4x3x3xf32>,
                          %gw: tensor<8x2x3x3xf32>, %b: tensor<8xf32>)
    -> (tensor<?x8x8x8xf32>, tensor<?x8x6x6xf32>, tensor<?x8x4x4xf32>, tensor<?x8xf32>) {
  // CHECK: nn.conv2d %{{.+}}, %{{.+}}, %{{.+}} strides [2, 2] padding [1, 1, 1, 1] : tensor<?x4x16x16xf32>, tensor<8x4x3x3xf32>, tensor<8xf32>
  %0 = nn.conv2d %x, %w, %b strides [2, 2] padding [1, 1, 1, 1]
      : tensor<?x4x16x16xf32>, tensor<8x4x3x3xf32>, tensor<8xf32>
  // CHECK: nn.conv2d %{{.+}}, %{{.+}} strides [2, 2] dilations [2, 2] groups 2 : tensor<?x4x16x16xf32>, tensor<8x2x3x3xf32>
  %1 = nn.conv2d %x, %gw strides [2, 2] dilations [2, 2] groups 2
      : tensor<?x4x16x16xf32>, tensor<8x2x3x3xf32>
  // CHECK: nn.batch_norm %{{.+}} epsilon 1.000000e-03 momentum 1.000000e-01 : tensor<?x8x8x8xf32>, tensor<8xf32>
  %2 = nn.batch_norm %0, %b, %b, %b, %b epsilon 1.0e-3 momentum 0.1
      : tensor<?x8x8x8xf32>, tensor<8xf32>
  // CHECK: nn.max_pool2d %{{.+}} window [3, 3] strides [2, 2] padding [1, 1, 1, 1] : tensor<?x8x8x8xf32>
  %3 = nn.max_pool2d %2 window [3, 3] strides [2, 2] padding [1, 1, 1, 1]
      : tensor<?x8x8x8xf32>
  // CHECK: nn.avg_pool2d %{{.+}} window [2, 2] strides [1, 1] exclude_padding : tensor<?x8x4x4xf32>
  %4 = nn.avg_pool2d %3 window [2, 2] strides [1, 1] exclude_padding : tensor<?x8x4x4xf32>
  // CHECK: nn.global_avg_pool %{{.+}} : tensor<?x8x6x6xf32>
  %5 = nn.global_avg_pool %1 : tensor<?x8x6x6xf32>
  return %2, %1, %3, %5 : tensor<?x8x8x8xf32>, tensor<?x8x6x6xf32>, tensor<?x8x4x4xf32>, tensor<?x8xf32>
}

// CHECK-LABEL: func.func @dense_and_loss
func.func @dense_and_loss(%x: tensor<?x8x2x2xf32>, %w: tensor<10x32xf32>, %b: tensor<10xf32>,
                          %labels: tensor<?xi64>, %m: tensor<3x4x5xf32>, %n: tensor<3x6x5xf32>)
    -> (tensor<f32>, tensor<3x4x6xf32>) {
  // CHECK: nn.flatten %{{.+}} start_dim 1 : tensor<?x8x2x2xf32>
  %0 = nn.flatten %x start_dim 1 : tensor<?x8x2x2xf32>
  // CHECK: nn.reshape %{{.+}} shape [-1, 32] : tensor<?x32xf32>
  %1 = nn.reshape %0 shape [-1, 32] : tensor<?x32xf32>
  // CHECK: nn.dropout %{{.+}} rate 2.500000e-01 seed 3 : tensor<?x32xf32>
  %2 = nn.dropout %1 rate 0.25 seed 3 : tensor<?x32xf32>
  // CHECK: nn.linear %{{.+}}, %{{.+}}, %{{.+}} : tensor<?x32xf32>, tensor<10x32xf32>, tensor<10xf32>
  %3 = nn.linear %2, %w, %b : tensor<?x32xf32>, tensor<10x32xf32>, tensor<10xf32>
  // CHECK: nn.softmax_cross_entropy %{{.+}}, %{{.+}} label_smoothing 1.000000e-01 : tensor<?x10xf32>, tensor<?xi64>
  %4 = nn.softmax_cross_entropy %3, %labels label_smoothing 0.1 : tensor<?x10xf32>, tensor<?xi64>
  // CHECK: nn.matmul %{{.+}}, %{{.+}} transpose_b : tensor<3x4x5xf32>, tensor<3x6x5xf32>
  %5 = nn.matmul %m, %n transpose_b : tensor<3x4x5xf32>, tensor<3x6x5xf32>
  return %4, %5 : tensor<f32>, tensor<3x4x6xf32>
}

// CHECK-LABEL: func.func @attention
func.func @attention(%q: tensor<6x7x4xf32>, %k: tensor<6x4x7xf32>, %v: tensor<6x7x5xf32>,
                     %rel: tensor<3x7x7xf32>, %mask: tensor<2x7x7xf32>, %dy: tensor<6x7x5xf32>)
    -> (tensor<6x7x5xf32>, tensor<3x7x7xf32>) {
  // CHECK: %[[O:.*]], %[[L:.*]] = nn.attention %{{.+}}, %{{.+}}, %{{.+}} transpose_k biases(%{{.+}}, %{{.+}} : tensor<3x7x7xf32>, tensor<2x7x7xf32>) strides [1, 3] : tensor<6x7x4xf32>, tensor<6x4x7xf32>, tensor<6x7x5xf32>
  %o, %l = nn.attention %q, %k, %v transpose_k biases(%rel, %mask : tensor<3x7x7xf32>, tensor<2x7x7xf32>) strides [1, 3]
      : tensor<6x7x4xf32>, tensor<6x4x7xf32>, tensor<6x7x5xf32>
  // CHECK: nn.attention_backward {{.*}} transpose_k biases(%{{.+}}, %{{.+}} : tensor<3x7x7xf32>, tensor<2x7x7xf32>) strides [1, 3] : tensor<6x7x4xf32>, tensor<6x4x7xf32>, tensor<6x7x5xf32>, tensor<6x7x5xf32>, tensor<6x7xf32>, tensor<6x7x5xf32>
  %dq, %dk, %dv, %drel, %dmask = nn.attention_backward %q, %k, %v, %o, %l, %dy transpose_k
      biases(%rel, %mask : tensor<3x7x7xf32>, tensor<2x7x7xf32>) strides [1, 3]
      : tensor<6x7x4xf32>, tensor<6x4x7xf32>, tensor<6x7x5xf32>, tensor<6x7x5xf32>, tensor<6x7xf32>,
        tensor<6x7x5xf32>
  return %o, %drel : tensor<6x7x5xf32>, tensor<3x7x7xf32>
}

// Half attention: the output in q's type, lse f32, biases f32.
// CHECK-LABEL: func.func @attention_half
func.func @attention_half(%q: tensor<6x7x4xbf16>, %k: tensor<6x7x4xbf16>, %v: tensor<6x7x5xbf16>,
                          %rel: tensor<3x7x7xf32>, %dy: tensor<6x7x5xbf16>)
    -> (tensor<6x7x5xbf16>, tensor<6x7xf32>, tensor<6x7x4xbf16>, tensor<3x7x7xf32>) {
  // CHECK: nn.attention {{.*}} : tensor<6x7x4xbf16>, tensor<6x7x4xbf16>, tensor<6x7x5xbf16>
  %o, %l = nn.attention %q, %k, %v biases(%rel : tensor<3x7x7xf32>) strides [1]
      : tensor<6x7x4xbf16>, tensor<6x7x4xbf16>, tensor<6x7x5xbf16>
  %dq, %dk, %dv, %drel = nn.attention_backward %q, %k, %v, %o, %l, %dy
      biases(%rel : tensor<3x7x7xf32>) strides [1]
      : tensor<6x7x4xbf16>, tensor<6x7x4xbf16>, tensor<6x7x5xbf16>, tensor<6x7x5xbf16>,
        tensor<6x7xf32>, tensor<6x7x5xbf16>
  return %o, %l, %dq, %drel : tensor<6x7x5xbf16>, tensor<6x7xf32>, tensor<6x7x4xbf16>, tensor<3x7x7xf32>
}

// CHECK-LABEL: func.func @training_step_ops
func.func @training_step_ops(%x: tensor<8x4x16x16xf32>, %w: tensor<8x4x3x3xf32>,
                             %dy: tensor<8x8x8x8xf32>, %logits: tensor<8x10xf32>,
                             %labels: tensor<8xi32>, %dloss: tensor<f32>,
                             %step: tensor<i64>, %p: tensor<8x4x3x3xf32>) {
  // CHECK: nn.conv2d_backward_data %{{.+}}, %{{.+}} input_size [16, 16] strides [2, 2] padding [1, 1, 1, 1] : tensor<8x8x8x8xf32>, tensor<8x4x3x3xf32>
  %dx = nn.conv2d_backward_data %dy, %w input_size [16, 16] strides [2, 2] padding [1, 1, 1, 1]
      : tensor<8x8x8x8xf32>, tensor<8x4x3x3xf32>
  // CHECK: nn.conv2d_backward_filter %{{.+}}, %{{.+}} kernel_size [3, 3] strides [2, 2] padding [1, 1, 1, 1] : tensor<8x4x16x16xf32>, tensor<8x8x8x8xf32>
  %dw = nn.conv2d_backward_filter %x, %dy kernel_size [3, 3] strides [2, 2] padding [1, 1, 1, 1]
      : tensor<8x4x16x16xf32>, tensor<8x8x8x8xf32>
  // CHECK: nn.max_pool2d_backward %{{.+}}, %{{.+}} window [2, 2] : tensor<8x4x16x16xf32>, tensor<8x4x8x8xf32>
  %pooled = nn.max_pool2d %x window [2, 2] : tensor<8x4x16x16xf32>
  %dmax = nn.max_pool2d_backward %x, %pooled window [2, 2] : tensor<8x4x16x16xf32>, tensor<8x4x8x8xf32>
  // CHECK: nn.avg_pool2d_backward %{{.+}} input_size [16, 16] window [2, 2] : tensor<8x4x8x8xf32>
  %davg = nn.avg_pool2d_backward %pooled input_size [16, 16] window [2, 2] : tensor<8x4x8x8xf32>
  // CHECK: nn.softmax_cross_entropy_backward %{{.+}}, %{{.+}}, %{{.+}} label_smoothing 1.000000e-01 : tensor<f32>, tensor<8x10xf32>, tensor<8xi32>
  %dlogits = nn.softmax_cross_entropy_backward %dloss, %logits, %labels label_smoothing 0.1
      : tensor<f32>, tensor<8x10xf32>, tensor<8xi32>
  // CHECK: nn.dropout_mask %{{.+}}, %{{.+}} rate 5.000000e-01 seed 1 : tensor<8x10xf32>, tensor<i64>
  %mask = nn.dropout_mask %logits, %step rate 0.5 seed 1 : tensor<8x10xf32>, tensor<i64>
  // CHECK: nn.argmax %{{.+}} dim 1 : tensor<8x10xf32>
  %pred = nn.argmax %logits dim 1 : tensor<8x10xf32>
  // CHECK: nn.lr_schedule %{{.+}} {base_lr = 1.000000e-01 : f64, decay = 1 : i32, total_steps = 100 : i64, warmup_steps = 5 : i64} : tensor<i64>
  %lr = nn.lr_schedule %step {base_lr = 0.1 : f64, decay = 1 : i32, total_steps = 100 : i64, warmup_steps = 5 : i64} : tensor<i64>
  // CHECK: nn.sgd %{{.+}}, %{{.+}}, %{{.+}} weight_decay 1.000000e-04 : tensor<8x4x3x3xf32>
  %p1 = nn.sgd %p, %dw, %lr weight_decay 1.0e-4 : tensor<8x4x3x3xf32>
  // CHECK: nn.sgd_momentum %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}} momentum 9.000000e-01 weight_decay 1.000000e-04 nesterov : tensor<8x4x3x3xf32>
  %p2, %v2 = nn.sgd_momentum %p, %dw, %p, %lr momentum 0.9 weight_decay 1.0e-4 nesterov : tensor<8x4x3x3xf32>
  // CHECK: nn.lars %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}} momentum 9.000000e-01 weight_decay 5.000000e-05 eta 1.000000e-03 : tensor<8x4x3x3xf32>
  %p3, %v3 = nn.lars %p, %dw, %p, %lr momentum 0.9 weight_decay 5.0e-5 eta 1.0e-3 : tensor<8x4x3x3xf32>
  // CHECK: nn.adam %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}} beta1 9.000000e-01 beta2 0.99899999999999999 epsilon 1.000000e-08 weight_decay 1.000000e-02 decoupled : tensor<8x4x3x3xf32>
  %p4, %m4, %v4 = nn.adam %p, %dw, %p, %p, %lr, %lr, %lr beta1 0.9 beta2 0.999 epsilon 1.0e-8 weight_decay 0.01 decoupled : tensor<8x4x3x3xf32>
  return
}

// CHECK-LABEL: func.func @state_updates
func.func @state_updates(%g: tensor<8x4x3x3xf32>, %v: tensor<8xf32>) {
  // CHECK: nn.apply_gradient @conv.weight, %{{.+}} : tensor<8x4x3x3xf32>
  nn.apply_gradient @conv.weight, %g : tensor<8x4x3x3xf32>
  // CHECK: nn.assign @bn.running_var, %{{.+}} : tensor<8xf32>
  nn.assign @bn.running_var, %v : tensor<8xf32>
  return
}

// A channels-last convolution may take its filter OHWI ([O, KH, KW, I]):
// its filter gradient then comes out OHWI too.
// CHECK-LABEL: func.func @filter_ohwi
func.func @filter_ohwi(%x: tensor<8x16x16x4xf32>, %w: tensor<8x3x3x2xf32>,
                       %dy: tensor<8x8x8x8xf32>) -> (tensor<8x8x8x8xf32>,
    tensor<8x16x16x4xf32>, tensor<8x3x3x2xf32>) {
  // CHECK: nn.conv2d %{{.+}}, %{{.+}} strides [2, 2] padding [1, 1, 1, 1] groups 2 channels_last filter_ohwi : tensor<8x16x16x4xf32>, tensor<8x3x3x2xf32>
  %y = nn.conv2d %x, %w strides [2, 2] padding [1, 1, 1, 1] groups 2 channels_last filter_ohwi
      : tensor<8x16x16x4xf32>, tensor<8x3x3x2xf32>
  // CHECK: nn.conv2d_backward_data %{{.+}}, %{{.+}} input_size [16, 16] strides [2, 2] padding [1, 1, 1, 1] groups 2 channels_last filter_ohwi : tensor<8x8x8x8xf32>, tensor<8x3x3x2xf32>
  %dx = nn.conv2d_backward_data %dy, %w input_size [16, 16] strides [2, 2] padding [1, 1, 1, 1]
      groups 2 channels_last filter_ohwi : tensor<8x8x8x8xf32>, tensor<8x3x3x2xf32>
  // CHECK: nn.conv2d_backward_filter %{{.+}}, %{{.+}} kernel_size [3, 3] strides [2, 2] padding [1, 1, 1, 1] groups 2 channels_last filter_ohwi : tensor<8x16x16x4xf32>, tensor<8x8x8x8xf32>
  %dw = nn.conv2d_backward_filter %x, %dy kernel_size [3, 3] strides [2, 2] padding [1, 1, 1, 1]
      groups 2 channels_last filter_ohwi : tensor<8x16x16x4xf32>, tensor<8x8x8x8xf32>
  return %y, %dx, %dw : tensor<8x8x8x8xf32>, tensor<8x16x16x4xf32>, tensor<8x3x3x2xf32>
}

// Channels-last ops keep their activations [N, H, W, C] and the filter OIHW;
// the result types below are inferred (the second run re-parses them).
// CHECK-LABEL: func.func @channels_last
func.func @channels_last(%x: tensor<8x16x16x4xf32>, %w: tensor<8x4x3x3xf32>,
                         %dy: tensor<8x8x8x8xf32>) -> (tensor<8x8x8x8xf32>,
    tensor<8x16x16x4xf32>, tensor<8x4x3x3xf32>, tensor<8x8x8x4xf32>,
    tensor<8x16x16x4xf32>, tensor<8x16x16x4xf32>, tensor<8x4x16x16xf32>) {
  // CHECK: nn.conv2d %{{.+}}, %{{.+}} strides [2, 2] padding [1, 1, 1, 1] channels_last : tensor<8x16x16x4xf32>, tensor<8x4x3x3xf32>
  %y = nn.conv2d %x, %w strides [2, 2] padding [1, 1, 1, 1] channels_last
      : tensor<8x16x16x4xf32>, tensor<8x4x3x3xf32>
  // CHECK: nn.conv2d_backward_data %{{.+}}, %{{.+}} input_size [16, 16] strides [2, 2] padding [1, 1, 1, 1] channels_last : tensor<8x8x8x8xf32>, tensor<8x4x3x3xf32>
  %dx = nn.conv2d_backward_data %dy, %w input_size [16, 16] strides [2, 2] padding [1, 1, 1, 1]
      channels_last : tensor<8x8x8x8xf32>, tensor<8x4x3x3xf32>
  // CHECK: nn.conv2d_backward_filter %{{.+}}, %{{.+}} kernel_size [3, 3] strides [2, 2] padding [1, 1, 1, 1] channels_last : tensor<8x16x16x4xf32>, tensor<8x8x8x8xf32>
  %dw = nn.conv2d_backward_filter %x, %dy kernel_size [3, 3] strides [2, 2] padding [1, 1, 1, 1]
      channels_last : tensor<8x16x16x4xf32>, tensor<8x8x8x8xf32>
  // CHECK: nn.max_pool2d %{{.+}} window [2, 2] channels_last : tensor<8x16x16x4xf32>
  %p = nn.max_pool2d %x window [2, 2] channels_last : tensor<8x16x16x4xf32>
  %dmax = nn.max_pool2d_backward %x, %p window [2, 2] channels_last
      : tensor<8x16x16x4xf32>, tensor<8x8x8x4xf32>
  // CHECK: nn.avg_pool2d_backward %{{.+}} input_size [16, 16] window [2, 2] channels_last : tensor<8x8x8x4xf32>
  %davg = nn.avg_pool2d_backward %p input_size [16, 16] window [2, 2] channels_last
      : tensor<8x8x8x4xf32>
  // CHECK: nn.transpose %{{.+}} permutation [0, 3, 1, 2] : tensor<8x16x16x4xf32>
  %t = nn.transpose %x permutation [0, 3, 1, 2] : tensor<8x16x16x4xf32>
  return %y, %dx, %dw, %p, %dmax, %davg, %t : tensor<8x8x8x8xf32>, tensor<8x16x16x4xf32>,
      tensor<8x4x3x3xf32>, tensor<8x8x8x4xf32>, tensor<8x16x16x4xf32>, tensor<8x16x16x4xf32>,
      tensor<8x4x16x16xf32>
}

// Concat, slice and sigmoid: the joined dim sums, dynamic batch kept.
// CHECK-LABEL: func.func @concat_slice_sigmoid
func.func @concat_slice_sigmoid(%a: tensor<?x3x5x5xf32>, %b: tensor<?x2x5x5xf32>)
    -> (tensor<?x5x5x5xf32>, tensor<?x2x5x5xf32>, tensor<?x3x5x5xf32>) {
  // CHECK: nn.concat %{{.+}}, %{{.+}} dim 1 : tensor<?x3x5x5xf32>, tensor<?x2x5x5xf32>
  %c = nn.concat %a, %b dim 1 : tensor<?x3x5x5xf32>, tensor<?x2x5x5xf32>
  // CHECK: nn.slice %{{.+}} dim 1 start 3 size 2 : tensor<?x5x5x5xf32>
  %s = nn.slice %c dim 1 start 3 size 2 : tensor<?x5x5x5xf32>
  // CHECK: nn.sigmoid %{{.+}} : tensor<?x3x5x5xf32>
  %g = nn.sigmoid %a : tensor<?x3x5x5xf32>
  return %c, %s, %g : tensor<?x5x5x5xf32>, tensor<?x2x5x5xf32>, tensor<?x3x5x5xf32>
}

// CHECK-LABEL: func.func @topk_select
func.func @topk_select(%v: tensor<4x5xf32>, %k: tensor<i64>) -> (tensor<3xf32>, tensor<3xi32>, tensor<4x5xf32>) {
  // CHECK: nn.topk_select %{{.+}} count %{{.+}} : tensor<4x5xf32> -> tensor<3xf32>, tensor<3xi32>
  %values, %indices = nn.topk_select %v count %k : tensor<4x5xf32> -> tensor<3xf32>, tensor<3xi32>
  // CHECK: nn.topk_select %{{.+}} : tensor<4x5xf32> -> tensor<3xf32>, tensor<3xi32>
  %values2, %indices2 = nn.topk_select %v : tensor<4x5xf32> -> tensor<3xf32>, tensor<3xi32>
  // CHECK: nn.zero_at %{{.+}}, %{{.+}} : tensor<4x5xf32>, tensor<3xi32>
  %z = nn.zero_at %v, %indices : tensor<4x5xf32>, tensor<3xi32>
  return %values, %indices2, %z : tensor<3xf32>, tensor<3xi32>, tensor<4x5xf32>
}

// CHECK-LABEL: func.func @orthonormalize
func.func @orthonormalize(%p: tensor<4x5xf32>) -> tensor<4x5xf32> {
  // CHECK: nn.orthonormalize %{{.+}} : tensor<4x5xf32>
  %0 = nn.orthonormalize %p : tensor<4x5xf32>
  return %0 : tensor<4x5xf32>
}

// Tests the lanes of the multi-tensor passes: one chunk of 1024 lanes for
// each of the small tensors, two for 40000 elements (chunks of 32768).
// CHECK-LABEL: func.func @multi_tensor_lanes
func.func @multi_tensor_lanes(%a: tensor<3xf32>, %b: tensor<200x200xf16>) -> (tensor<3072xf32>, tensor<3072xf32>) {
  // CHECK: nn.sum_squares %{{.+}}, %{{.+}} : tensor<3xf32>, tensor<200x200xf16>
  %s = nn.sum_squares %a, %b : tensor<3xf32>, tensor<200x200xf16>
  // CHECK: nn.nonfinite_flags %{{.+}}, %{{.+}} : tensor<3xf32>, tensor<200x200xf16>
  %f = nn.nonfinite_flags %a, %b : tensor<3xf32>, tensor<200x200xf16>
  return %s, %f : tensor<3072xf32>, tensor<3072xf32>
}
