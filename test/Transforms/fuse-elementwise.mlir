// RUN: graphc-opt %s --graphc-fuse-elementwise --split-input-file | FileCheck %s
// RUN: graphc-opt %s --graphc-fuse-elementwise="max-operands=4" --split-input-file | FileCheck %s --check-prefix=LIMIT

// Tests a per-channel affine + relu chain: one fusion, the broadcasts read
// the [C] inputs (no [N, C, H, W] temporaries), only the end result leaves.
// CHECK-LABEL: func.func @affine_relu
// CHECK-SAME: (%[[X:.*]]: tensor<2x3x4x4xf32>, %[[S:.*]]: tensor<3xf32>, %[[T:.*]]: tensor<3xf32>)
// CHECK: %[[R:.*]] = nn.fusion %[[S]], %[[X]], %[[T]] : tensor<3xf32>, tensor<2x3x4x4xf32>, tensor<3xf32> -> tensor<2x3x4x4xf32> {
// CHECK-NEXT: ^bb0(%[[B:.*]]: tensor<3xf32>, %[[A:.*]]: tensor<2x3x4x4xf32>, %[[C:.*]]: tensor<3xf32>):
// CHECK-NEXT: %[[BS:.*]] = nn.broadcast %[[B]] to %[[A]] dims [1]
// CHECK-NEXT: %[[M:.*]] = nn.mul %[[A]], %[[BS]]
// CHECK-NEXT: %[[BT:.*]] = nn.broadcast %[[C]] to %[[A]] dims [1]
// CHECK-NEXT: %[[P:.*]] = nn.add %[[M]], %[[BT]]
// CHECK-NEXT: %[[Q:.*]] = nn.relu %[[P]]
// CHECK-NEXT: nn.yield %[[Q]] : tensor<2x3x4x4xf32>
// CHECK: return %[[R]]
func.func @affine_relu(%x: tensor<2x3x4x4xf32>, %s: tensor<3xf32>, %t: tensor<3xf32>) -> tensor<2x3x4x4xf32> {
  %bs = nn.broadcast %s to %x dims [1] : tensor<3xf32>, tensor<2x3x4x4xf32>
  %m = nn.mul %x, %bs : tensor<2x3x4x4xf32>
  %bt = nn.broadcast %t to %x dims [1] : tensor<3xf32>, tensor<2x3x4x4xf32>
  %p = nn.add %m, %bt : tensor<2x3x4x4xf32>
  %q = nn.relu %p : tensor<2x3x4x4xf32>
  return %q : tensor<2x3x4x4xf32>
}

// -----

// Tests multiple consumers: %e feeds the group, a reduction and the return,
// so the fusion yields it too; nothing is computed twice. The reduction
// joins the fusion as a third result (its prologue is the group).
// CHECK-LABEL: func.func @two_results
// CHECK: %[[F:.*]]:3 = nn.fusion %{{.*}}, %{{.*}} : tensor<8xf32>, tensor<8xf32> -> tensor<8xf32>, tensor<8xf32>, tensor<f32>
// CHECK-COUNT-1: nn.exp
// CHECK: %[[S:.*]] = nn.reduce_sum %{{.*}} dims [0]
// CHECK-NEXT: nn.yield %{{.*}}, %{{.*}}, %[[S]]
// CHECK-NOT: nn.reduce_sum
// CHECK: return %[[F]]#2, %[[F]]#1, %[[F]]#0
func.func @two_results(%x: tensor<8xf32>, %y: tensor<8xf32>) -> (tensor<f32>, tensor<8xf32>, tensor<8xf32>) {
  %e = nn.exp %x : tensor<8xf32>
  %m = nn.mul %e, %y : tensor<8xf32>
  %r = nn.relu %m : tensor<8xf32>
  %s = nn.reduce_sum %e dims [0] : tensor<8xf32>
  return %s, %r, %e : tensor<f32>, tensor<8xf32>, tensor<8xf32>
}

// -----

// Tests the batch-norm statistics and bias-gradient shapes: the square of the
// centered input is only reduced, so it never reaches memory: the fusion
// yields the centered value (read later) and the per-channel mean of its
// square. A lone elementwise op feeding a reduction (the gradient product)
// becomes a fusion with it, and its product is not a result either.
// CHECK-LABEL: func.func @bn_statistics
// CHECK: %[[F:.*]]:2 = nn.fusion %{{.*}}, %{{.*}} : tensor<3xf32>, tensor<2x3x4x4xf32> -> tensor<2x3x4x4xf32>, tensor<3xf32> {
// CHECK: nn.sub
// CHECK-NEXT: %[[Q:.*]] = nn.mul
// CHECK-NEXT: %[[V:.*]] = nn.reduce_mean %[[Q]] dims [0, 2, 3]
// CHECK-NEXT: nn.yield %{{.*}}, %[[V]] : tensor<2x3x4x4xf32>, tensor<3xf32>
// CHECK: %[[G:.*]] = nn.fusion %{{.*}}, %[[F]]#0 : tensor<2x3x4x4xf32>, tensor<2x3x4x4xf32> -> tensor<1x3x1x1xf32> {
// CHECK: nn.mul
// CHECK-NEXT: nn.reduce_sum %{{.*}} dims [0, 2, 3] keep_dims
// CHECK-NOT: nn.reduce
// CHECK: return %[[F]]#1, %[[G]]
func.func @bn_statistics(%x: tensor<2x3x4x4xf32>, %m: tensor<3xf32>, %dy: tensor<2x3x4x4xf32>) -> (tensor<3xf32>, tensor<1x3x1x1xf32>) {
  %b = nn.broadcast %m to %x dims [1] : tensor<3xf32>, tensor<2x3x4x4xf32>
  %c = nn.sub %x, %b : tensor<2x3x4x4xf32>
  %q = nn.mul %c, %c : tensor<2x3x4x4xf32>
  %v = nn.reduce_mean %q dims [0, 2, 3] : tensor<2x3x4x4xf32>
  %p = nn.mul %dy, %c : tensor<2x3x4x4xf32>
  %g = nn.reduce_sum %p dims [0, 2, 3] keep_dims : tensor<2x3x4x4xf32>
  return %v, %g : tensor<3xf32>, tensor<1x3x1x1xf32>
}

// -----

// Tests that nothing fuses across a library op: %a is read by the convolution
// before %d, so fusing %a with %d would need the convolution's result before
// it exists. Both stay single kernels.
// CHECK-LABEL: func.func @across_conv
// CHECK-NOT: nn.fusion
// CHECK: nn.relu
// CHECK: nn.conv2d
// CHECK: nn.add
func.func @across_conv(%x: tensor<1x2x4x4xf32>, %w: tensor<2x2x1x1xf32>) -> tensor<1x2x4x4xf32> {
  %a = nn.relu %x : tensor<1x2x4x4xf32>
  %c = nn.conv2d %a, %w : tensor<1x2x4x4xf32>, tensor<2x2x1x1xf32>
  %d = nn.add %c, %a : tensor<1x2x4x4xf32>
  return %d : tensor<1x2x4x4xf32>
}

// -----

// Tests the cycle a reduction in the middle would make: exp feeds a reduction
// whose broadcast feeds the multiply. exp does not join the multiply; it
// takes the reduction (one pass: exp and its row sums); the broadcast and the
// multiply fuse, reading both as inputs (the broadcast measures exp's input,
// which the kernel takes but does not read).
// CHECK-LABEL: func.func @softmax_like
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>)
// CHECK: %[[ES:.*]]:2 = nn.fusion %{{.*}} : tensor<4x8xf32> -> tensor<4x8xf32>, tensor<4xf32>
// CHECK: nn.exp
// CHECK-NEXT: nn.reduce_sum
// CHECK: nn.fusion %[[ES]]#1, %[[X]], %[[ES]]#0 : tensor<4xf32>, tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
// CHECK: nn.broadcast
// CHECK: nn.div
func.func @softmax_like(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %e = nn.exp %x : tensor<4x8xf32>
  %s = nn.reduce_sum %e dims [1] : tensor<4x8xf32>
  %b = nn.broadcast %s to %e dims [0] : tensor<4xf32>, tensor<4x8xf32>
  %d = nn.div %e, %b : tensor<4x8xf32>
  return %d : tensor<4x8xf32>
}

// -----

// Tests that different shapes do not fuse.
// CHECK-LABEL: func.func @shapes
// CHECK-NOT: nn.fusion
func.func @shapes(%x: tensor<4xf32>, %s: tensor<f32>) -> (tensor<4xf32>, tensor<f32>) {
  %a = nn.relu %x : tensor<4xf32>
  %b = nn.neg %s : tensor<f32>
  return %a, %b : tensor<4xf32>, tensor<f32>
}

// -----

// Tests that a state read does not move past a write of that state: the neg
// reads @s (directly or through a reshape) before the nn.assign, the relu
// after it, so the two are not fused at the relu.
// CHECK-LABEL: func.func @state_read_before_assign
// CHECK-NOT: nn.fusion
// CHECK: nn.neg
// CHECK: nn.assign @s
// CHECK: nn.relu
nn.state @s : tensor<4xf32> = zeros
func.func @state_read_before_assign(%x: tensor<4xf32>) -> tensor<2x2xf32> {
  %l = nn.load @s : tensor<4xf32>
  %v = nn.reshape %l shape [2, 2] : tensor<4xf32>
  %a = nn.neg %v : tensor<2x2xf32>
  nn.assign @s, %x : tensor<4xf32>
  %b = nn.relu %a : tensor<2x2xf32>
  return %b : tensor<2x2xf32>
}

// -----

// Tests that a reduction of a reduction is not absorbed: a keep_dims sum over
// a size-1 dim has the iteration shape, but a reduced value is only yielded.
// CHECK-LABEL: func.func @reduce_of_reduce
// CHECK: %[[F:.*]] = nn.fusion
// CHECK: nn.reduce_sum
// CHECK: nn.yield
// CHECK: nn.reduce_sum %[[F]]
func.func @reduce_of_reduce(%x: tensor<1x4xf32>) -> tensor<1x4xf32> {
  %e = nn.exp %x : tensor<1x4xf32>
  %s = nn.reduce_sum %e dims [0] keep_dims : tensor<1x4xf32>
  %t = nn.reduce_sum %s dims [0] keep_dims : tensor<1x4xf32>
  return %t : tensor<1x4xf32>
}

// -----

// Tests that a value read later only for its shape (a broadcast's shape_of,
// as autodiff measures a batch-norm square) is not written to memory: its
// reduction absorbs it and the readers measure an input of the same shape
// instead; a half input may stand in for an f32 value (it is not read).
// CHECK-LABEL: func.func @measured_only
// CHECK: %[[F:.+]] = nn.fusion %[[XH:.+]] : tensor<2x3xf16> -> tensor<3xf32> {
// CHECK: nn.reduce_sum
// CHECK: nn.yield %{{.+}} : tensor<3xf32>
// CHECK: nn.fusion %{{.+}}, %[[XH]] : tensor<3xf32>, tensor<2x3xf16> -> tensor<2x3xf32>
// CHECK: nn.broadcast %{{.+}} to %{{.+}} dims [1] : tensor<3xf32>, tensor<2x3xf16>
func.func @measured_only(%xh: tensor<2x3xf16>, %s: tensor<3xf32>) -> (tensor<3xf32>, tensor<2x3xf32>) {
  %x = nn.cast %xh : tensor<2x3xf16> to f32
  %sq = nn.mul %x, %x : tensor<2x3xf32>
  %sum = nn.reduce_sum %sq dims [0] : tensor<2x3xf32>
  %b = nn.broadcast %s to %sq dims [1] : tensor<3xf32>, tensor<2x3xf32>
  %y = nn.neg %b : tensor<2x3xf32>
  return %sum, %y : tensor<3xf32>, tensor<2x3xf32>
}

// -----

// Tests the operand limit: five inputs into one chain. With max-operands=4
// (inputs + results) the chain is cut into fusions of at most 3 buffers.
// CHECK-LABEL: func.func @wide
// CHECK-COUNT-1: nn.fusion
// CHECK-NOT: nn.fusion
// LIMIT-LABEL: func.func @wide
// LIMIT-COUNT-2: nn.fusion {{.*}} : tensor<4xf32>, tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
// LIMIT-NOT: nn.fusion
func.func @wide(%a: tensor<4xf32>, %b: tensor<4xf32>, %c: tensor<4xf32>, %d: tensor<4xf32>, %e: tensor<4xf32>) -> tensor<4xf32> {
  %0 = nn.add %a, %b : tensor<4xf32>
  %1 = nn.add %0, %c : tensor<4xf32>
  %2 = nn.add %1, %d : tensor<4xf32>
  %3 = nn.add %2, %e : tensor<4xf32>
  return %3 : tensor<4xf32>
}



// -----

// Tests that a group never reads a buffer past the start of its allreduce:
// %n reads %g, whose reshape %gr is reduced in place from
// dist.allreduce_start on. Fused with %s, %n would be emitted at %s, after
// the start; so the two stay apart (a group of one op stays that op).
// CHECK-LABEL: func.func @allreduce_ends_group
// LIMIT-LABEL: func.func @allreduce_ends_group
// CHECK-NOT: nn.fusion
// CHECK: nn.neg
// CHECK-NEXT: dist.allreduce_start mean
// CHECK-NEXT: nn.mul
func.func @allreduce_ends_group(%g: tensor<1x4xf32>, %c: tensor<1x4xf32>) -> (tensor<1x4xf32>, tensor<4xf32>) {
  %gr = nn.reshape %g shape [4] : tensor<1x4xf32>
  %n = nn.neg %g : tensor<1x4xf32>
  %started = dist.allreduce_start mean %gr bucket 0 : tensor<4xf32>
  %s = nn.mul %n, %c : tensor<1x4xf32>
  %reduced = dist.allreduce_wait %started : tensor<4xf32>
  return %s, %reduced : tensor<1x4xf32>, tensor<4xf32>
}

// -----

// Tests that the same two ops fuse when the allreduce reduces another buffer.
// CHECK-LABEL: func.func @allreduce_of_another
// CHECK: nn.fusion
// CHECK: nn.neg
// CHECK-NEXT: nn.mul
func.func @allreduce_of_another(%g: tensor<1x4xf32>, %c: tensor<1x4xf32>, %h: tensor<4xf32>) -> (tensor<1x4xf32>, tensor<4xf32>) {
  %n = nn.neg %g : tensor<1x4xf32>
  %started = dist.allreduce_start mean %h bucket 0 : tensor<4xf32>
  %s = nn.mul %n, %c : tensor<1x4xf32>
  %reduced = dist.allreduce_wait %started : tensor<4xf32>
  return %s, %reduced : tensor<1x4xf32>, tensor<4xf32>
}

// -----

// Tests batch norm's two backward statistics in one pass: the ReLU-masked
// gradient %g and its sum come first (the sum reads %g before %gd does, so
// %gd cannot join that group); the fusion of %gd and its sum, whose results
// are all reductions, then joins %g's fusion: one kernel, %g never read back.
// %g stays a result for its later reader.
// CHECK-LABEL: func.func @two_statistics
// CHECK: %[[F:.*]]:3 = nn.fusion
// CHECK: nn.select
// CHECK: nn.reduce_sum
// CHECK: nn.mul
// CHECK: nn.reduce_sum
// CHECK: nn.yield
// CHECK-NOT: nn.fusion
// CHECK: nn.conv2d_backward_data %[[F]]#0
// LIMIT-LABEL: func.func @two_statistics
func.func @two_statistics(%y: tensor<2x4x4x8xf32>, %dy: tensor<2x4x4x8xf32>, %d: tensor<2x4x4x8xf32>, %w: tensor<8x8x1x1xf32>)
    -> (tensor<8xf32>, tensor<8xf32>, tensor<2x4x4x8xf32>) {
  %zero = nn.constant dense<0.0> : tensor<f32>
  %z = nn.broadcast %zero to %y dims [] : tensor<f32>, tensor<2x4x4x8xf32>
  %pos = nn.cmp gt, %y, %z : tensor<2x4x4x8xf32>
  %g = nn.select %pos, %dy, %z : tensor<2x4x4x8xi1>, tensor<2x4x4x8xf32>
  %sg = nn.reduce_sum %g dims [0, 1, 2] : tensor<2x4x4x8xf32>
  %gd = nn.mul %g, %d : tensor<2x4x4x8xf32>
  %sgd = nn.reduce_sum %gd dims [0, 1, 2] : tensor<2x4x4x8xf32>
  %dx = nn.conv2d_backward_data %g, %w input_size [4, 4] channels_last : tensor<2x4x4x8xf32>, tensor<8x8x1x1xf32>
  return %sg, %sgd, %dx : tensor<8xf32>, tensor<8xf32>, tensor<2x4x4x8xf32>
}

// -----

// Tests that a broadcast measuring a member of a group from outside it does
// not split the group: GELU's constant broadcast to the f32 bias add, while
// GELU reads the add's half copy (stored for backward), measures the group's
// input instead, and the bias add and the division are one kernel.
// CHECK-LABEL: func.func @measured_member
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf16>, %[[B:.*]]: tensor<8xf32>)
// CHECK: %[[F:.*]]:2 = nn.fusion %[[B]], %[[X]], %{{.*}} : tensor<8xf32>, tensor<4x8xf16>, tensor<f32> -> tensor<4x8xf16>, tensor<4x8xf32>
// CHECK: nn.add
// CHECK: nn.div
// CHECK-NOT: nn.fusion
// CHECK: return %[[F]]#0, %[[F]]#1
func.func @measured_member(%x: tensor<4x8xf16>, %b: tensor<8xf32>) -> (tensor<4x8xf16>, tensor<4x8xf32>) {
  %bb = nn.broadcast %b to %x dims [1] : tensor<8xf32>, tensor<4x8xf16>
  %c = nn.cast %x : tensor<4x8xf16> to f32
  %s = nn.add %bb, %c : tensor<4x8xf32>
  %h = nn.cast %s : tensor<4x8xf32> to f16
  %k = nn.constant dense<2.0> : tensor<f32>
  %kb = nn.broadcast %k to %s dims [] : tensor<f32>, tensor<4x8xf32>
  %w = nn.cast %h : tensor<4x8xf16> to f32
  %d = nn.div %w, %kb : tensor<4x8xf32>
  return %h, %d : tensor<4x8xf16>, tensor<4x8xf32>
}
