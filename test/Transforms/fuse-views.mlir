// RUN: graphc-opt %s --graphc-fuse-elementwise --split-input-file | FileCheck %s

// Tests the exporter's q/k split (ViT's MultiheadAttention): the transposes,
// the slice and the reshapes between the in-projection and the scale-and-cast
// become strided reads of the projection inside the two kernels; no
// transpose or slice is left outside a fusion, and no copy of the projection
// is written.
// CHECK-LABEL: func.func @qk_split
// CHECK-SAME: (%[[X:.*]]: tensor<5x2x24xf32>, %[[S:.*]]: tensor<f32>)
// CHECK: %[[Q:.*]] = nn.fusion %[[S]], %[[X]] : tensor<f32>, tensor<5x2x24xf32> -> tensor<2x2x5x4xf16> {
// CHECK-NEXT: ^bb0(%{{.*}}: tensor<f32>, %[[A:.*]]: tensor<5x2x24xf32>):
// CHECK-NEXT: nn.reshape %[[A]] shape [5, 2, 3, 8]
// CHECK: nn.transpose
// CHECK: nn.slice %{{.*}} dim 0 start 0 size 1
// CHECK: nn.transpose %{{.*}} permutation [1, 0, 2]
// CHECK: nn.mul
// CHECK-NEXT: nn.cast
// CHECK-NEXT: nn.yield
// CHECK: %[[K:.*]] = nn.fusion %{{.*}}, %[[X]] : tensor<f32>, tensor<5x2x24xf32> -> tensor<2x2x4x5xf16> {
// CHECK: nn.slice %{{.*}} dim 0 start 1 size 1
// CHECK: nn.transpose %{{.*}} permutation [0, 1, 3, 2]
// CHECK: nn.cast
// CHECK-NOT: nn.transpose
// CHECK-NOT: nn.slice
// CHECK: return
func.func @qk_split(%x: tensor<5x2x24xf32>, %s: tensor<f32>) -> (tensor<4x5x4xf16>, tensor<4x4x5xf16>) {
  %0 = nn.reshape %x shape [5, 2, 3, 8] : tensor<5x2x24xf32>
  %1 = nn.reshape %0 shape [1, 5, 2, 3, 8] : tensor<5x2x3x8xf32>
  %2 = nn.transpose %1 permutation [3, 1, 2, 0, 4] : tensor<1x5x2x3x8xf32>
  %3 = nn.reshape %2 shape [3, 5, 2, 8] : tensor<3x5x2x1x8xf32>
  %q0 = nn.slice %3 dim 0 start 0 size 1 : tensor<3x5x2x8xf32>
  %k0 = nn.slice %3 dim 0 start 1 size 1 : tensor<3x5x2x8xf32>
  %q1 = nn.reshape %q0 shape [5, 4, 4] : tensor<1x5x2x8xf32>
  %k1 = nn.reshape %k0 shape [5, 4, 4] : tensor<1x5x2x8xf32>
  %q2 = nn.transpose %q1 permutation [1, 0, 2] : tensor<5x4x4xf32>
  %k2 = nn.transpose %k1 permutation [1, 0, 2] : tensor<5x4x4xf32>
  %q3 = nn.reshape %q2 shape [2, 2, 5, 4] : tensor<4x5x4xf32>
  %k3 = nn.reshape %k2 shape [2, 2, 5, 4] : tensor<4x5x4xf32>
  %k4 = nn.transpose %k3 permutation [0, 1, 3, 2] : tensor<2x2x5x4xf32>
  %bq = nn.broadcast %s to %q3 dims [] : tensor<f32>, tensor<2x2x5x4xf32>
  %q5 = nn.mul %q3, %bq : tensor<2x2x5x4xf32>
  %bk = nn.broadcast %s to %k4 dims [] : tensor<f32>, tensor<2x2x4x5xf32>
  %k5 = nn.mul %k4, %bk : tensor<2x2x4x5xf32>
  // The exporter's reshape before the cast to half: the cast moves above it.
  %q6 = nn.reshape %q5 shape [4, 5, 4] : tensor<2x2x5x4xf32>
  %q7 = nn.cast %q6 : tensor<4x5x4xf32> to f16
  %k6 = nn.reshape %k5 shape [4, 4, 5] : tensor<2x2x4x5xf32>
  %k7 = nn.cast %k6 : tensor<4x4x5xf32> to f16
  return %q7, %k7 : tensor<4x5x4xf16>, tensor<4x4x5xf16>
}

// -----

// Tests a lone cast reading a transpose: one kernel reading the transpose's
// input, where there were two.
// CHECK-LABEL: func.func @transpose_cast
// CHECK: %[[F:.*]] = nn.fusion %{{.*}} : tensor<3x4xf32> -> tensor<4x3xf16> {
// CHECK-NEXT: ^bb0(%[[A:.*]]: tensor<3x4xf32>):
// CHECK-NEXT: %[[T:.*]] = nn.transpose %[[A]] permutation [1, 0]
// CHECK-NEXT: %[[C:.*]] = nn.cast %[[T]]
// CHECK-NEXT: nn.yield %[[C]]
// CHECK-NOT: nn.transpose
// CHECK: return %[[F]]
func.func @transpose_cast(%x: tensor<3x4xf32>) -> tensor<4x3xf16> {
  %t = nn.transpose %x permutation [1, 0] : tensor<3x4xf32>
  %c = nn.cast %t : tensor<4x3xf32> to f16
  return %c : tensor<4x3xf16>
}

// -----

// Tests a transpose also read by a library call: the fusion reads through it
// all the same, and the matmul reads a copy, a fusion of its own (a kernel
// either way; the matmul between them keeps the two apart).
// CHECK-LABEL: func.func @shared_transpose
// CHECK: %[[T:.*]] = nn.fusion %[[X:.*]] : tensor<4x4xf32> -> tensor<4x4xf32> {
// CHECK-NEXT: ^bb0(%[[A:.*]]: tensor<4x4xf32>):
// CHECK-NEXT: %[[V:.*]] = nn.transpose %[[A]] permutation [1, 0]
// CHECK-NEXT: nn.yield %[[V]]
// CHECK: nn.matmul %[[T]]
// CHECK: nn.fusion %[[X]] :
// CHECK: nn.transpose
// CHECK: nn.relu
func.func @shared_transpose(%x: tensor<4x4xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>) {
  %t = nn.transpose %x permutation [1, 0] : tensor<4x4xf32>
  %m = nn.matmul %t, %x : tensor<4x4xf32>, tensor<4x4xf32>
  %r = nn.relu %t : tensor<4x4xf32>
  return %m, %r : tensor<4x4xf32>, tensor<4x4xf32>
}

// -----

// Tests two copies read by a library call (a transpose, a slice, a transpose
// again): one copy, a fusion of the three views.
// CHECK-LABEL: func.func @copy_chain
// CHECK: %[[C:.*]] = nn.fusion %[[X:.*]] : tensor<6x4xf32> -> tensor<2x4xf32> {
// CHECK-NEXT: ^bb0(%[[A:.*]]: tensor<6x4xf32>):
// CHECK-NEXT: nn.transpose %[[A]]
// CHECK-NEXT: nn.slice
// CHECK-NEXT: %[[E:.*]] = nn.transpose
// CHECK-NEXT: nn.yield %[[E]]
// CHECK: nn.matmul %[[C]]
// CHECK-NOT: nn.transpose
func.func @copy_chain(%x: tensor<6x4xf32>, %w: tensor<4x3xf32>) -> tensor<2x3xf32> {
  %t = nn.transpose %x permutation [1, 0] : tensor<6x4xf32>
  %s = nn.slice %t dim 1 start 2 size 2 : tensor<4x6xf32>
  %u = nn.transpose %s permutation [1, 0] : tensor<4x2xf32>
  %m = nn.matmul %u, %w : tensor<2x4xf32>, tensor<4x3xf32>
  return %m : tensor<2x3xf32>
}

// -----

// Tests that a view is not read past an nn.assign to the state it views: the
// transpose runs before the assign, and the cast after it reads its copy.
// CHECK-LABEL: func.func @assigned_state
// CHECK: %[[T:.*]] = nn.transpose
// CHECK: nn.assign @s
// CHECK: nn.cast %[[T]]
nn.state @s : tensor<2x3xf32> = zeros
func.func @assigned_state(%v: tensor<2x3xf32>) -> tensor<3x2xf16> {
  %l = nn.load @s : tensor<2x3xf32>
  %t = nn.transpose %l permutation [1, 0] : tensor<2x3xf32>
  nn.assign @s, %v : tensor<2x3xf32>
  %c = nn.cast %t : tensor<3x2xf32> to f16
  return %c : tensor<3x2xf16>
}

// -----

// Tests that a reshape is not sunk when a reader could fuse with the op where
// it is: the add stays at [2, 6], fused with the exp after it.
// CHECK-LABEL: func.func @no_sink_before_fusible
// CHECK: %[[R:.*]] = nn.reshape
// CHECK: nn.fusion %[[R]]
// CHECK: nn.add
// CHECK-NEXT: nn.exp
func.func @no_sink_before_fusible(%x: tensor<3x4xf32>) -> tensor<2x6xf32> {
  %e = nn.exp %x : tensor<3x4xf32>
  %r = nn.reshape %e shape [2, 6] : tensor<3x4xf32>
  %a = nn.add %r, %r : tensor<2x6xf32>
  %b = nn.exp %a : tensor<2x6xf32>
  return %b : tensor<2x6xf32>
}

// -----

// Tests a reduction reading a transpose (a bias gradient summed over a
// [L, N] -> [N, L] copy): a one-member fusion reading through the view.
// CHECK-LABEL: func.func @reduce_view
// CHECK: %[[F:.*]] = nn.fusion %{{.*}} : tensor<3x4x5xf32> -> tensor<5xf32> {
// CHECK-NEXT: ^bb0(%[[A:.*]]: tensor<3x4x5xf32>):
// CHECK-NEXT: %[[T:.*]] = nn.transpose %[[A]] permutation [1, 0, 2]
// CHECK-NEXT: %[[R:.*]] = nn.reshape %[[T]] shape [12, 5]
// CHECK-NEXT: %[[S:.*]] = nn.reduce_sum %[[R]] dims [0]
// CHECK-NEXT: nn.yield %[[S]]
// CHECK-NOT: nn.transpose
func.func @reduce_view(%x: tensor<3x4x5xf32>) -> tensor<5xf32> {
  %t = nn.transpose %x permutation [1, 0, 2] : tensor<3x4x5xf32>
  %r = nn.reshape %t shape [12, 5] : tensor<4x3x5xf32>
  %s = nn.reduce_sum %r dims [0] : tensor<12x5xf32>
  return %s : tensor<5xf32>
}

// -----

// Tests a cast after a fusion whose result a reduction also sums (backward's
// gradient, cast to half for the next GEMM, its bias gradient summed): the
// reduction closes the group before the cast, which then joins the fusion
// as one more result, and the f32 gradient is no result any more.
// CHECK-LABEL: func.func @cast_after_reduction
// CHECK: %[[F:.*]]:2 = nn.fusion %{{.*}}, %{{.*}} : tensor<4x6xf32>, tensor<4x6xf32> -> tensor<6xf32>, tensor<4x6xf16> {
// CHECK: nn.mul
// CHECK: nn.reduce_sum
// CHECK: nn.cast
// CHECK: nn.yield
// CHECK-NOT: nn.cast
// CHECK: return %[[F]]#0, %[[F]]#1
func.func @cast_after_reduction(%x: tensor<4x6xf32>, %y: tensor<4x6xf32>) -> (tensor<6xf32>, tensor<4x6xf16>) {
  %m = nn.mul %x, %y : tensor<4x6xf32>
  %s = nn.reduce_sum %m dims [0] : tensor<4x6xf32>
  %c = nn.cast %m : tensor<4x6xf32> to f16
  return %s, %c : tensor<6xf32>, tensor<4x6xf16>
}

// -----

// Tests that an op far from the fusion whose result it reads (here, after a
// GEMM: backward reading a forward value) is not pulled into it.
// CHECK-LABEL: func.func @far_consumer
// CHECK: nn.fusion
// CHECK: nn.matmul
// CHECK: nn.cast
func.func @far_consumer(%x: tensor<4x4xf32>, %y: tensor<4x4xf32>) -> (tensor<4xf32>, tensor<4x4xf32>, tensor<4x4xf16>) {
  %m = nn.mul %x, %y : tensor<4x4xf32>
  %s = nn.reduce_sum %m dims [0] : tensor<4x4xf32>
  %g = nn.matmul %m, %y : tensor<4x4xf32>, tensor<4x4xf32>
  %c = nn.cast %m : tensor<4x4xf32> to f16
  return %s, %g, %c : tensor<4xf32>, tensor<4x4xf32>, tensor<4x4xf16>
}

// -----

// Tests that a slice of a prefix (the outermost dim from 0) stays a copy: a
// kernel argument is a whole buffer, and linalg would take the loop bound
// from it.
// CHECK-LABEL: func.func @prefix_slice
// CHECK: %[[S:.*]] = nn.slice %{{.*}} dim 0 start 0 size 2
// CHECK: nn.fusion %[[S]]
// CHECK-NOT: nn.slice
func.func @prefix_slice(%x: tensor<4x16xf32>) -> tensor<2x16xf16> {
  %s = nn.slice %x dim 0 start 0 size 2 : tensor<4x16xf32>
  %e = nn.exp %s : tensor<2x16xf32>
  %c = nn.cast %e : tensor<2x16xf32> to f16
  return %c : tensor<2x16xf16>
}

// -----

// Tests two kernels reading one buffer through one transpose, a bias
// gradient's sum and a cast to half for the next GEMM at another shape
// (with an allreduce of the sum between them): one kernel at the sum's
// position, the cast at the sum's iteration shape and reshaped back.
// CHECK-LABEL: func.func @siblings
// CHECK: %[[F:.*]]:2 = nn.fusion %[[X:.*]] : tensor<3x4x6xf32> -> tensor<1x1x6xf32>, tensor<4x3x6xf16> {
// CHECK: nn.reduce_sum
// CHECK: nn.cast
// CHECK: nn.yield
// CHECK: nn.reshape %[[F]]#1 shape [12, 6]
// CHECK: dist.allreduce_start
// CHECK-NOT: nn.fusion
func.func @siblings(%x: tensor<3x4x6xf32>) -> (tensor<6xf32>, tensor<12x6xf16>) {
  %t = nn.transpose %x permutation [1, 0, 2] : tensor<3x4x6xf32>
  %s = nn.reduce_sum %t dims [0, 1] keep_dims : tensor<4x3x6xf32>
  %r = nn.reshape %s shape [6] : tensor<1x1x6xf32>
  %a = dist.allreduce_start mean %r bucket 0 : tensor<6xf32>
  %w = dist.allreduce_wait %a : tensor<6xf32>
  %f = nn.reshape %t shape [12, 6] : tensor<4x3x6xf32>
  %c = nn.cast %f : tensor<12x6xf32> to f16
  return %w, %c : tensor<6xf32>, tensor<12x6xf16>
}

// -----

// Tests a bias add read only through views (a projection plus bias, split
// into k and v as the second and third of three parts): each reader computes
// it again from the half projection and the bias, read through the same
// views (the bias broadcast first), and the f32 sum is never written. The
// two readers, reading the same buffers over the same elements, are then one
// kernel.
// CHECK-LABEL: func.func @inline_bias
// CHECK-SAME: (%[[P:.*]]: tensor<4x2x6xf16>, %[[B:.*]]: tensor<6xf32>)
// CHECK-NOT: -> tensor<4x2x6xf32>
// CHECK: nn.fusion %[[P]], %[[B]] : tensor<4x2x6xf16>, tensor<6xf32> -> tensor<2x4x2xf16>, tensor<2x4x2xf16>
// CHECK: nn.slice %{{.*}} dim 0 start 1 size 1 : tensor<3x2x4x2xf16>
// CHECK: nn.broadcast %{{.*}} to %{{.*}} dims [2] : tensor<6xf32>, tensor<4x2x6xf16>
// CHECK: nn.slice %{{.*}} dim 0 start 1 size 1 : tensor<3x2x4x2xf32>
// CHECK: nn.add
// CHECK: nn.slice %{{.*}} dim 0 start 2 size 1 : tensor<3x2x4x2xf16>
// CHECK: nn.add
// CHECK-NOT: nn.fusion
func.func @inline_bias(%p: tensor<4x2x6xf16>, %b: tensor<6xf32>) -> (tensor<2x4x2xf16>, tensor<2x4x2xf16>) {
  %c = nn.cast %p : tensor<4x2x6xf16> to f32
  %bb = nn.broadcast %b to %c dims [2] : tensor<6xf32>, tensor<4x2x6xf32>
  %s = nn.add %c, %bb : tensor<4x2x6xf32>
  %r = nn.reshape %s shape [4, 2, 3, 2] : tensor<4x2x6xf32>
  %t = nn.transpose %r permutation [2, 1, 0, 3] : tensor<4x2x3x2xf32>
  %k = nn.slice %t dim 0 start 1 size 1 : tensor<3x2x4x2xf32>
  %v = nn.slice %t dim 0 start 2 size 1 : tensor<3x2x4x2xf32>
  %k2 = nn.reshape %k shape [2, 4, 2] : tensor<1x2x4x2xf32>
  %v2 = nn.reshape %v shape [2, 4, 2] : tensor<1x2x4x2xf32>
  %kh = nn.cast %k2 : tensor<2x4x2xf32> to f16
  %vh = nn.cast %v2 : tensor<2x4x2xf32> to f16
  return %kh, %vh : tensor<2x4x2xf16>, tensor<2x4x2xf16>
}

// -----

// Tests that the first part (q) is not computed again by its reader: the
// bias's part it reads is the bias's first elements, read in order by one
// loop (a prefix), which no kernel reads through; the sum is written for it.
// CHECK-LABEL: func.func @no_inline_prefix
// CHECK: %[[S:.*]] = nn.fusion %{{.*}}, %{{.*}} : tensor<4x2x6xf16>, tensor<6xf32> -> tensor<4x2x6xf32>
// CHECK: nn.fusion %[[S]] : tensor<4x2x6xf32> -> tensor<2x4x2xf16>
func.func @no_inline_prefix(%p: tensor<4x2x6xf16>, %b: tensor<6xf32>) -> tensor<2x4x2xf16> {
  %c = nn.cast %p : tensor<4x2x6xf16> to f32
  %bb = nn.broadcast %b to %c dims [2] : tensor<6xf32>, tensor<4x2x6xf32>
  %s = nn.add %c, %bb : tensor<4x2x6xf32>
  %r = nn.reshape %s shape [4, 2, 3, 2] : tensor<4x2x6xf32>
  %t = nn.transpose %r permutation [2, 1, 0, 3] : tensor<4x2x3x2xf32>
  %q = nn.slice %t dim 0 start 0 size 1 : tensor<3x2x4x2xf32>
  %q2 = nn.reshape %q shape [2, 4, 2] : tensor<1x2x4x2xf32>
  %qh = nn.cast %q2 : tensor<2x4x2xf32> to f16
  return %qh : tensor<2x4x2xf16>
}

// -----

// Tests two lone ops after a fusion a reduction closed: the cast joins it;
// the sigmoid, after a GEMM, does not (the cast's old place, between the two,
// holds nothing once the cast has moved).
// CHECK-LABEL: func.func @two_consumers
// CHECK: %[[F:.*]]:3 = nn.fusion
// CHECK: nn.cast
// CHECK: nn.yield
// CHECK: nn.matmul
// CHECK: nn.sigmoid %[[F]]#0
func.func @two_consumers(%x: tensor<4x6xf32>, %y: tensor<4x6xf32>, %w: tensor<6x6xf32>) -> (tensor<6xf32>, tensor<4x6xf16>, tensor<4x6xf32>, tensor<4x6xf32>) {
  %m = nn.mul %x, %y : tensor<4x6xf32>
  %s = nn.reduce_sum %m dims [0] : tensor<4x6xf32>
  %c = nn.cast %m : tensor<4x6xf32> to f16
  %g = nn.matmul %x, %w : tensor<4x6xf32>, tensor<6x6xf32>
  %d = nn.sigmoid %m : tensor<4x6xf32>
  return %s, %c, %g, %d : tensor<6xf32>, tensor<4x6xf16>, tensor<4x6xf32>, tensor<4x6xf32>
}

// -----

// Tests one transpose of a fusion's result read by a concat (attention's q
// gradient, scaled, then packed with k's and v's): the copy becomes a fusion
// too, which computes the scaled value itself through the transpose, so the
// f32 product is never written and read back.
// CHECK-LABEL: func.func @copy_of_fusion
// CHECK-SAME: (%[[Q:.*]]: tensor<4x3x2xf16>, %[[S:.*]]: tensor<f32>, %[[K:.*]]: tensor<1x3x4x2xf32>)
// CHECK-NOT: -> tensor<4x3x2xf32>
// CHECK: %[[T:.*]] = nn.fusion %[[Q]], %[[S]] : tensor<4x3x2xf16>, tensor<f32> -> tensor<1x3x4x2xf32> {
// CHECK: nn.transpose %{{.*}} permutation [1, 0, 2] : tensor<4x3x2xf16>
// CHECK: nn.mul
// CHECK-NEXT: nn.yield
// CHECK: nn.concat %[[T]], %[[K]] dim 0
func.func @copy_of_fusion(%q: tensor<4x3x2xf16>, %s: tensor<f32>, %k: tensor<1x3x4x2xf32>) -> tensor<2x3x4x2xf32> {
  %c = nn.cast %q : tensor<4x3x2xf16> to f32
  %sb = nn.broadcast %s to %c dims [] : tensor<f32>, tensor<4x3x2xf32>
  %m = nn.mul %c, %sb : tensor<4x3x2xf32>
  %t = nn.transpose %m permutation [1, 0, 2] : tensor<4x3x2xf32>
  %r = nn.reshape %t shape [1, 3, 4, 2] : tensor<3x4x2xf32>
  %cat = nn.concat %r, %k dim 0 : tensor<1x3x4x2xf32>, tensor<1x3x4x2xf32>
  return %cat : tensor<2x3x4x2xf32>
}

// -----

// Tests that a copy of a fusion's result read by two library ops, one of
// them through a reshape, stays one copy: a fusion per reader would compute
// the same values twice.
// CHECK-LABEL: func.func @copy_read_twice
// CHECK: %[[M:.*]] = nn.fusion
// CHECK: nn.mul
// CHECK: %[[T:.*]] = nn.transpose %[[M]] permutation [0, 2, 1]
// CHECK-NOT: nn.fusion
// CHECK: nn.reshape %[[T]] shape [4, 24]
// CHECK: nn.matmul %{{.*}}, %[[T]]
func.func @copy_read_twice(%x: tensor<4x4x6xf32>, %p: tensor<6xf32>, %w: tensor<10x24xf32>) -> (tensor<4x10xf32>, tensor<4x4x4xf32>) {
  %pb = nn.broadcast %p to %x dims [2] : tensor<6xf32>, tensor<4x4x6xf32>
  %b = nn.mul %x, %pb : tensor<4x4x6xf32>
  %t = nn.transpose %b permutation [0, 2, 1] : tensor<4x4x6xf32>
  %tr = nn.reshape %t shape [4, 24] : tensor<4x6x4xf32>
  %l = nn.linear %tr, %w : tensor<4x24xf32>, tensor<10x24xf32>
  %m = nn.matmul %x, %t : tensor<4x4x6xf32>, tensor<4x6x4xf32>
  return %l, %m : tensor<4x10xf32>, tensor<4x4x4xf32>
}

// -----

// Tests a packed gradient (a concat of half pieces, the attention's q, k
// and v gradients) transposed for a GEMM and summed into its bias gradient
// through the same transpose: the copy for the GEMM becomes a fusion, and
// then one kernel with the bias gradient's (the copy first here, the sum
// first in ViT's backward), so the packed buffer is read once.
// CHECK-LABEL: func.func @packed_gradient
// CHECK: %[[P:.*]] = nn.concat
// CHECK: %[[F:.*]]:2 = nn.fusion %[[P]] : tensor<3x2x4xbf16> -> tensor<2x12xbf16>, tensor<1x12xf32> {
// CHECK: nn.transpose
// CHECK: nn.reduce_sum
// CHECK: nn.yield
// CHECK-NOT: nn.fusion
// CHECK: nn.matmul %[[F]]#0
func.func @packed_gradient(%q: tensor<1x2x4xbf16>, %k: tensor<1x2x4xbf16>, %v: tensor<1x2x4xbf16>, %w: tensor<12x5xbf16>) -> (tensor<1x12xf32>, tensor<2x5xbf16>) {
  %p = nn.concat %q, %k, %v dim 0 : tensor<1x2x4xbf16>, tensor<1x2x4xbf16>, tensor<1x2x4xbf16>
  %pt = nn.transpose %p permutation [1, 0, 2] : tensor<3x2x4xbf16>
  %pr = nn.reshape %pt shape [2, 12] : tensor<2x3x4xbf16>
  %pw = nn.cast %pr : tensor<2x12xbf16> to f32
  %b = nn.reduce_sum %pw dims [0] keep_dims : tensor<2x12xf32>
  %m = nn.matmul %pr, %w : tensor<2x12xbf16>, tensor<12x5xbf16>
  return %b, %m : tensor<1x12xf32>, tensor<2x5xbf16>
}

// -----

// Tests views that put every element back (ConvNeXt's permute to channels
// first and back, in a channels-last plan): no copy, their readers read the
// start of the chain (reshaped where the shape differs: the view of a
// transpose and its inverse with a reshape between).
// CHECK-LABEL: func.func @identity_views
// CHECK-SAME: (%[[X:.*]]: tensor<2x3x4x5xf32>, %[[W:.*]]: tensor<5x6xf32>)
// CHECK-NOT: nn.transpose
// CHECK: %[[R:.*]] = nn.reshape %[[X]] shape [24, 5]
// CHECK-NOT: nn.transpose
// CHECK: nn.matmul %[[R]], %[[W]]
// CHECK-NOT: nn.transpose
// CHECK: nn.relu %[[X]]
func.func @identity_views(%x: tensor<2x3x4x5xf32>, %w: tensor<5x6xf32>) -> (tensor<24x6xf32>, tensor<2x3x4x5xf32>) {
  %a = nn.transpose %x permutation [0, 3, 1, 2] : tensor<2x3x4x5xf32>
  %b = nn.transpose %a permutation [0, 2, 3, 1] : tensor<2x5x3x4xf32>
  %r = nn.reshape %b shape [24, 5] : tensor<2x3x4x5xf32>
  %m = nn.matmul %r, %w : tensor<24x5xf32>, tensor<5x6xf32>
  %y = nn.relu %b : tensor<2x3x4x5xf32>
  return %m, %y : tensor<24x6xf32>, tensor<2x3x4x5xf32>
}

// Tests a transpose and its inverse with a slice between: a view that
// leaves elements out stays (here the first rows, in order).
// CHECK-LABEL: func.func @sliced_identity
// CHECK: nn.transpose
// CHECK: nn.slice
// CHECK: nn.transpose
func.func @sliced_identity(%x: tensor<3x4xf32>, %w: tensor<4x6xf32>) -> tensor<2x6xf32> {
  %a = nn.transpose %x permutation [1, 0] : tensor<3x4xf32>
  %s = nn.slice %a dim 1 start 0 size 2 : tensor<4x3xf32>
  %b = nn.transpose %s permutation [1, 0] : tensor<4x2xf32>
  %m = nn.matmul %b, %w : tensor<2x4xf32>, tensor<4x6xf32>
  return %m : tensor<2x6xf32>
}

// -----

// Tests views that put every element back, of a state assigned before the
// copy is read: the copy holds the value from before the assign, so it stays.
// CHECK-LABEL: func.func @identity_views_assigned
// CHECK: nn.load @s
// CHECK: nn.transpose
// CHECK: nn.assign @s
// CHECK: nn.matmul
nn.state @s : tensor<2x3xf32> = zeros
func.func @identity_views_assigned(%x: tensor<2x3xf32>, %w: tensor<3x4xf32>) -> tensor<2x4xf32> {
  %p = nn.load @s : tensor<2x3xf32>
  %a = nn.transpose %p permutation [1, 0] : tensor<2x3xf32>
  %b = nn.transpose %a permutation [1, 0] : tensor<3x2xf32>
  nn.assign @s, %x : tensor<2x3xf32>
  %m = nn.matmul %b, %w : tensor<2x3xf32>, tensor<3x4xf32>
  return %m : tensor<2x4xf32>
}

// -----

// Tests views that put every element back, of a value also read elsewhere,
// where the copy is reduced in place by an allreduce: the copy stays (the
// allreduce would otherwise reduce the value the matmul reads).
// CHECK-LABEL: func.func @identity_views_reduced
// CHECK: %[[G:.+]] = nn.relu
// CHECK: %[[C:.+]] = nn.fusion %[[G]]
// CHECK: nn.transpose
// CHECK: dist.allreduce_start mean %[[C]] bucket 0
// CHECK: nn.matmul %[[G]]
func.func @identity_views_reduced(%x: tensor<2x3xf32>, %v: tensor<3x4xf32>) -> (tensor<2x4xf32>, tensor<2x3xf32>) {
  %g = nn.relu %x : tensor<2x3xf32>
  %a = nn.transpose %g permutation [1, 0] : tensor<2x3xf32>
  %b = nn.transpose %a permutation [1, 0] : tensor<3x2xf32>
  %s = dist.allreduce_start mean %b bucket 0 : tensor<2x3xf32>
  %m = nn.matmul %g, %v : tensor<2x3xf32>, tensor<3x4xf32>
  %r = dist.allreduce_wait %s : tensor<2x3xf32>
  return %m, %r : tensor<2x4xf32>, tensor<2x3xf32>
}

// -----

// Tests the same copy when nothing else reads its start (a 1x1 filter's
// gradient, put back from OHWI to OIHW, then reduced): no copy, the
// allreduce reduces the start in place.
// CHECK-LABEL: func.func @identity_views_reduced_alone
// CHECK: %[[G:.+]] = nn.relu
// CHECK-NOT: nn.transpose
// CHECK: dist.allreduce_start mean %[[G]] bucket 0
func.func @identity_views_reduced_alone(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %g = nn.relu %x : tensor<2x3xf32>
  %a = nn.transpose %g permutation [1, 0] : tensor<2x3xf32>
  %b = nn.transpose %a permutation [1, 0] : tensor<3x2xf32>
  %s = dist.allreduce_start mean %b bucket 0 : tensor<2x3xf32>
  %r = dist.allreduce_wait %s : tensor<2x3xf32>
  return %r : tensor<2x3xf32>
}
