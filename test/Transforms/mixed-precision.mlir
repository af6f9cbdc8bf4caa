// RUN: graphc-opt %s -graphc-mixed-precision | FileCheck %s --check-prefix=FP16
// RUN: graphc-opt %s -graphc-mixed-precision="loss-scale=1024" | FileCheck %s --check-prefix=STATIC
// RUN: graphc-opt %s -graphc-mixed-precision="precision=bf16" | FileCheck %s --check-prefix=BF16
// RUN: graphc-opt %s -graphc-mixed-precision -graphc-optimizer | FileCheck %s --check-prefix=UPDATE

// A conv + batch-norm statistics + relu + linear step as graphc-autodiff
// writes it (shortened: one weight gradient of each kind).
nn.parameter @conv.weight : tensor<4x3x3x3xf32> = kaiming_normal
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
  %f = nn.flatten %r start_dim 1 : tensor<2x4x8x8xf32>
  %fw = nn.load @fc.weight : tensor<10x256xf32>
  %logits = nn.linear %f, %fw : tensor<2x256xf32>, tensor<10x256xf32>
  %loss = nn.softmax_cross_entropy %logits, %y label_smoothing 0.0 : tensor<2x10xf32>, tensor<2xi32>
  %one = nn.constant {graphc.loss_seed} dense<1.0> : tensor<f32>
  %dl = nn.softmax_cross_entropy_backward %one, %logits, %y label_smoothing 0.0 : tensor<f32>, tensor<2x10xf32>, tensor<2xi32>
  %dfw = nn.matmul %dl, %f transpose_a : tensor<2x10xf32>, tensor<2x256xf32>
  nn.apply_gradient @fc.weight, %dfw : tensor<10x256xf32>
  %df = nn.matmul %dl, %fw : tensor<2x10xf32>, tensor<10x256xf32>
  %dr = nn.reshape %df shape [2, 4, 8, 8] : tensor<2x256xf32>
  %pos = nn.cmp gt, %n, %z : tensor<2x4x8x8xf32>
  %dn = nn.select %pos, %dr, %z : tensor<2x4x8x8xi1>, tensor<2x4x8x8xf32>
  %dw = nn.conv2d_backward_filter %x, %dn kernel_size [3, 3] padding [1, 1, 1, 1] : tensor<2x3x8x8xf32>, tensor<2x4x8x8xf32>
  nn.apply_gradient @conv.weight, %dw : tensor<4x3x3x3xf32>
  return %loss : tensor<f32>
}

// Tests what becomes half: the convolution's and linear's operands (the
// weight's half copy made once, at its load, and shared by forward and
// backward; the images cast once for both convolutions) and results.
// FP16-LABEL: func.func @train_step
// FP16-SAME: attributes {graphc.precision = "fp16"}
// FP16: %[[XH:.+]] = nn.cast %{{.+}} : tensor<2x3x8x8xf32> to f16
// FP16: %[[W:.+]] = nn.load @conv.weight : tensor<4x3x3x3xf32>
// FP16: %[[WH:.+]] = nn.cast %[[W]] : tensor<4x3x3x3xf32> to f16
// FP16: %[[C:.+]] = nn.conv2d %[[XH]], %[[WH]] padding [1, 1, 1, 1] : tensor<2x3x8x8xf16>, tensor<4x3x3x3xf16>
// Tests what stays f32: the statistics read the half result widened, in
// their own reader (fusion folds the cast in).
// FP16: %[[C32:.+]] = nn.cast %[[C]] : tensor<2x4x8x8xf16> to f32
// FP16: %[[MEAN:.+]] = nn.reduce_mean %[[C32]] dims [0, 2, 3] : tensor<2x4x8x8xf32>
// FP16: %[[C32B:.+]] = nn.cast %[[C]] : tensor<2x4x8x8xf16> to f32
// FP16: %[[D:.+]] = nn.sub %[[C32B]], %{{.+}} : tensor<2x4x8x8xf32>
// Tests that an activation with several readers is stored in half, rounded
// once where it is computed, and that the square feeding the variance (one
// reader) is not: it stays f32 and cannot overflow half's range.
// FP16: %[[DH:.+]] = nn.cast %[[D]] : tensor<2x4x8x8xf32> to f16
// FP16: %[[D32:.+]] = nn.cast %[[DH]] : tensor<2x4x8x8xf16> to f32
// FP16: %[[SQ:.+]] = nn.mul %[[D32]], %[[D32]] : tensor<2x4x8x8xf32>
// FP16-NOT: nn.cast %[[SQ]]
// FP16: nn.reduce_mean %[[SQ]] dims [0, 2, 3] : tensor<2x4x8x8xf32>
// Tests that a per-channel value stretched to the batch's shape is not
// stored (fusion recomputes it), while the normalized value is.
// FP16: %[[V:.+]] = nn.broadcast %{{.+}} to %[[SQ]] dims [1] : tensor<4xf32>, tensor<2x4x8x8xf32>
// FP16-NOT: nn.cast %[[V]]
// FP16: %[[N:.+]] = nn.mul %{{.+}}, %[[V]] : tensor<2x4x8x8xf32>
// FP16: %[[NH:.+]] = nn.cast %[[N]] : tensor<2x4x8x8xf32> to f16
// Tests that the relu output, with one reader (flatten keeps its type), is
// not stored: the linear reads its half copy; the loss reads the logits
// widened.
// FP16: %[[F32:.+]] = nn.flatten %{{.+}} start_dim 1 : tensor<2x4x8x8xf32>
// FP16: %[[F:.+]] = nn.cast %[[F32]] : tensor<2x256xf32> to f16
// FP16: %[[L:.+]] = nn.linear %[[F]], %[[FWH:.+]] : tensor<2x256xf16>, tensor<10x256xf16>
// FP16: %[[L32:.+]] = nn.cast %[[L]] : tensor<2x10xf16> to f32
// FP16: %[[LOSS:.+]] = nn.softmax_cross_entropy %[[L32]], %{{.+}} label_smoothing
// Tests loss scaling: the seed of backward is the scale.
// FP16: %[[S:.+]] = nn.load @graphc.loss_scale : tensor<f32>
// FP16: nn.softmax_cross_entropy_backward %[[S]], %{{.+}}, %{{.+}} label_smoothing
// FP16: %[[DFW:.+]] = nn.matmul %{{.+}}, %[[F]] transpose_a : tensor<2x10xf16>, tensor<2x256xf16>
// FP16: %[[DF:.+]] = nn.matmul %{{.+}}, %[[FWH]] : tensor<2x10xf16>, tensor<10x256xf16>
// FP16: nn.reshape %[[DF]] shape [2, 4, 8, 8] : tensor<2x256xf16>
// FP16: %[[DW:.+]] = nn.conv2d_backward_filter %[[XH]], %{{.+}} kernel_size [3, 3] padding [1, 1, 1, 1] : tensor<2x3x8x8xf16>, tensor<2x4x8x8xf16>
// Tests the one overflow check of every gradient after the last of them, and
// the updates moved after it, unscaled and skipped on overflow.
// FP16: %[[FLAGS:.+]] = nn.nonfinite_flags %[[DFW]], %[[DW]] : tensor<10x256xf16>, tensor<4x3x3x3xf16>
// FP16: %[[FOUND:.+]] = nn.reduce_max %[[FLAGS]] dims [0] : tensor<2048xf32>
// FP16: %[[INV:.+]] = nn.div %{{.+}}, %[[S]] : tensor<f32>
// FP16: nn.apply_gradient @fc.weight, %[[DFW]] scaled_by %[[INV]] skip_if %[[FOUND]] : tensor<10x256xf16>
// FP16: nn.apply_gradient @conv.weight, %[[DW]] scaled_by %[[INV]] skip_if %[[FOUND]] : tensor<4x3x3x3xf16>
// Tests GradScaler's rule: skipped steps counted; x0.5 on overflow, never
// below 1; x2 after 2000 finite steps in a row, to a finite scale only.
// FP16: nn.assign @graphc.skipped_steps
// FP16: %[[OVER:.+]] = nn.cmp gt, %[[FOUND]], %{{.+}} : tensor<f32>
// FP16: %[[STREAK:.+]] = nn.add %{{.+}}, %{{.+}} : tensor<i64>
// FP16: %[[WINDOW:.+]] = nn.constant dense<2000> : tensor<i64>
// FP16: %[[GROW:.+]] = nn.cmp ge, %[[STREAK]], %[[WINDOW]] : tensor<i64>
// FP16: %[[HALF:.+]] = nn.mul %[[S]], %{{.+}} : tensor<f32>
// FP16: %[[FLOOR:.+]] = nn.max %[[HALF]], %{{.+}} : tensor<f32>
// FP16: %[[TWICE:.+]] = nn.mul %[[S]], %{{.+}} : tensor<f32>
// FP16: %[[INF:.+]] = nn.constant dense<0x7F800000> : tensor<f32>
// FP16: %[[FINITE:.+]] = nn.cmp lt, %[[TWICE]], %[[INF]] : tensor<f32>
// FP16: %[[DOUBLE:.+]] = nn.select %[[FINITE]], %[[TWICE]], %[[S]]
// FP16: %[[KEEP:.+]] = nn.select %[[GROW]], %[[DOUBLE]], %[[S]]
// FP16: %[[NEXT:.+]] = nn.select %[[OVER]], %[[FLOOR]], %[[KEEP]]
// FP16: nn.assign @graphc.loss_scale, %[[NEXT]] : tensor<f32>
// FP16: nn.assign @graphc.loss_scale_good_steps
// Tests the loss-scaling state, declared last (every other variable keeps its
// index, so its seeded initial value): the scale, the skipped steps, the run
// of finite steps.
// FP16-DAG: nn.state @graphc.loss_scale : tensor<f32> = constant(6.553600e+04)
// FP16-DAG: nn.state @graphc.skipped_steps : tensor<i64> = zeros
// FP16-DAG: nn.state @graphc.loss_scale_good_steps : tensor<i64> = zeros

// Tests a static scale: the same seed, check and skip, and no update rule.
// STATIC: nn.nonfinite_flags
// STATIC: nn.assign @graphc.skipped_steps
// STATIC-NOT: nn.assign @graphc.loss_scale
// STATIC: nn.state @graphc.loss_scale : tensor<f32> = constant(1.024000e+03)
// STATIC-NOT: @graphc.loss_scale_good_steps

// Tests bf16: the same casts, no loss scaling (bf16 has f32's range).
// BF16: nn.conv2d %{{.+}}, %{{.+}} padding [1, 1, 1, 1] : tensor<2x3x8x8xbf16>, tensor<4x3x3x3xbf16>
// BF16-NOT: loss_scale
// BF16-NOT: nonfinite_flags
// BF16: nn.apply_gradient @fc.weight, %{{.+}} : tensor<10x256xbf16>
// BF16-NOT: skip_if

// Tests that the optimizer takes the half gradient as it is, unscales it and
// skips on overflow, and that a skipped step does not advance the counter.
// UPDATE: %[[FOUND:.+]] = nn.reduce_max
// UPDATE: %[[INV:.+]] = nn.div
// UPDATE: nn.sgd_momentum %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}} momentum 9.000000e-01 weight_decay 1.000000e-04 scaled_by %[[INV]] skip_if %[[FOUND]] : tensor<10x256xf32>, tensor<10x256xf16>
// UPDATE: nn.sgd_momentum %{{.+}} scaled_by %[[INV]] skip_if %[[FOUND]] : tensor<4x3x3x3xf32>, tensor<4x3x3x3xf16>
// UPDATE: %[[APPLIED:.+]] = nn.sub %{{.+}}, %[[FOUND]] : tensor<f32>
// UPDATE: %[[INC:.+]] = nn.cast %[[APPLIED]] : tensor<f32> to i64
// UPDATE: %[[NEXT:.+]] = nn.add %{{.+}}, %[[INC]] : tensor<i64>
// UPDATE: nn.assign @graphc.step, %[[NEXT]] : tensor<i64>
