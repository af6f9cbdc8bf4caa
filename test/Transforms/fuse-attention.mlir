// RUN: graphc-opt %s --graphc-fuse-attention --split-input-file | FileCheck %s

// Tests attention as graphc import writes a ViT's: q k^T reshaped to
// [B, H, L, L], the decomposed softmax, reshaped back, times v. One
// nn.attention replaces the chain; transpose_k because k is not transposed
// by the product.
// CHECK-LABEL: func.func @plain
// CHECK-SAME: (%[[Q:.*]]: tensor<6x7x4xf32>, %[[K:.*]]: tensor<6x7x4xf32>, %[[V:.*]]: tensor<6x7x5xf32>)
// CHECK-NEXT: %[[O:.*]], %{{.*}} = nn.attention %[[Q]], %[[K]], %[[V]] : tensor<6x7x4xf32>, tensor<6x7x4xf32>, tensor<6x7x5xf32>
// CHECK-NEXT: return %[[O]]
func.func @plain(%q: tensor<6x7x4xf32>, %k: tensor<6x7x4xf32>, %v: tensor<6x7x5xf32>) -> tensor<6x7x5xf32> {
  %s = nn.matmul %q, %k transpose_b : tensor<6x7x4xf32>, tensor<6x7x4xf32>
  %x = nn.reshape %s shape [2, 3, 7, 7] : tensor<6x7x7xf32>
  %m = nn.reduce_max %x dims [3] keep_dims : tensor<2x3x7x7xf32>
  %mb = nn.broadcast %m to %x dims [0, 1, 2, 3] : tensor<2x3x7x1xf32>, tensor<2x3x7x7xf32>
  %d = nn.sub %x, %mb : tensor<2x3x7x7xf32>
  %e = nn.exp %d : tensor<2x3x7x7xf32>
  %z = nn.reduce_sum %e dims [3] keep_dims : tensor<2x3x7x7xf32>
  %zb = nn.broadcast %z to %e dims [0, 1, 2, 3] : tensor<2x3x7x1xf32>, tensor<2x3x7x7xf32>
  %p = nn.div %e, %zb : tensor<2x3x7x7xf32>
  %p3 = nn.reshape %p shape [6, 7, 7] : tensor<2x3x7x7xf32>
  %o = nn.matmul %p3, %v : tensor<6x7x7xf32>, tensor<6x7x5xf32>
  return %o : tensor<6x7x5xf32>
}

// -----

// Tests Swin's shifted-window attention: a relative-position bias per head
// ([1, H, L, L]: stride 1, 3 slices) and a mask per window, added between
// reshapes that split the groups into [batch, windows, heads] ([1, W, 1, L,
// L]: stride 3, the heads, and 2 slices), with the bias on the add's left.
// Both become nn.attention biases (the last added first), reshaped to
// [P, L, L]; the adds, their
// broadcasts and the score reshapes go.
// CHECK-LABEL: func.func @shifted_window
// CHECK-SAME: (%[[Q:.*]]: tensor<12x7x4xf32>, %[[K:.*]]: tensor<12x4x7xf32>, %[[V:.*]]: tensor<12x7x4xf32>, %[[REL:.*]]: tensor<1x3x7x7xf32>, %[[MASK:.*]]: tensor<1x2x1x7x7xf32>)
// CHECK-DAG: %[[R:.*]] = nn.reshape %[[REL]] shape [3, 7, 7]
// CHECK-DAG: %[[M:.*]] = nn.reshape %[[MASK]] shape [2, 7, 7]
// CHECK: %[[O:.*]], %{{.*}} = nn.attention %[[Q]], %[[K]], %[[V]] transpose_k biases(%[[M]], %[[R]] : tensor<2x7x7xf32>, tensor<3x7x7xf32>) strides [3, 1]
// CHECK-NOT: nn.add
// CHECK-NOT: nn.broadcast
// CHECK: return %[[O]]
func.func @shifted_window(%q: tensor<12x7x4xf32>, %k: tensor<12x4x7xf32>, %v: tensor<12x7x4xf32>,
                          %rel: tensor<1x3x7x7xf32>, %mask: tensor<1x2x1x7x7xf32>) -> tensor<12x7x4xf32> {
  %s = nn.matmul %q, %k : tensor<12x7x4xf32>, tensor<12x4x7xf32>
  %s4 = nn.reshape %s shape [4, 3, 7, 7] : tensor<12x7x7xf32>
  %rb = nn.broadcast %rel to %s4 dims [0, 1, 2, 3] : tensor<1x3x7x7xf32>, tensor<4x3x7x7xf32>
  %a = nn.add %s4, %rb : tensor<4x3x7x7xf32>
  %a5 = nn.reshape %a shape [2, 2, 3, 7, 7] : tensor<4x3x7x7xf32>
  %mb = nn.broadcast %mask to %a5 dims [0, 1, 2, 3, 4] : tensor<1x2x1x7x7xf32>, tensor<2x2x3x7x7xf32>
  %b = nn.add %mb, %a5 : tensor<2x2x3x7x7xf32>
  %x = nn.reshape %b shape [4, 3, 7, 7] : tensor<2x2x3x7x7xf32>
  %m = nn.reduce_max %x dims [3] keep_dims : tensor<4x3x7x7xf32>
  %xb = nn.broadcast %m to %x dims [0, 1, 2, 3] : tensor<4x3x7x1xf32>, tensor<4x3x7x7xf32>
  %d = nn.sub %x, %xb : tensor<4x3x7x7xf32>
  %e = nn.exp %d : tensor<4x3x7x7xf32>
  %z = nn.reduce_sum %e dims [3] keep_dims : tensor<4x3x7x7xf32>
  %zb = nn.broadcast %z to %e dims [0, 1, 2, 3] : tensor<4x3x7x1xf32>, tensor<4x3x7x7xf32>
  %p = nn.div %e, %zb : tensor<4x3x7x7xf32>
  %p3 = nn.reshape %p shape [12, 7, 7] : tensor<4x3x7x7xf32>
  %o = nn.matmul %p3, %v : tensor<12x7x7xf32>, tensor<12x7x4xf32>
  return %o : tensor<12x7x4xf32>
}

// -----

// Tests a bias with no group dims ([L, L], all groups) broadcast from rank
// 2: one slice, stride 1, already [1, L, L] after its reshape.
// CHECK-LABEL: func.func @shared_bias
// CHECK: %[[B:.*]] = nn.reshape %{{.*}} shape [1, 7, 7] : tensor<7x7xf32>
// CHECK: nn.attention %{{.*}}, %{{.*}}, %{{.*}} transpose_k biases(%[[B]] : tensor<1x7x7xf32>) strides [1]
func.func @shared_bias(%q: tensor<6x7x4xf32>, %k: tensor<6x4x7xf32>, %v: tensor<6x7x4xf32>,
                       %bias: tensor<7x7xf32>) -> tensor<6x7x4xf32> {
  %s = nn.matmul %q, %k : tensor<6x7x4xf32>, tensor<6x4x7xf32>
  %bb = nn.broadcast %bias to %s dims [1, 2] : tensor<7x7xf32>, tensor<6x7x7xf32>
  %x = nn.add %s, %bb : tensor<6x7x7xf32>
  %m = nn.reduce_max %x dims [2] keep_dims : tensor<6x7x7xf32>
  %xb = nn.broadcast %m to %x dims [0, 1, 2] : tensor<6x7x1xf32>, tensor<6x7x7xf32>
  %d = nn.sub %x, %xb : tensor<6x7x7xf32>
  %e = nn.exp %d : tensor<6x7x7xf32>
  %z = nn.reduce_sum %e dims [2] keep_dims : tensor<6x7x7xf32>
  %zb = nn.broadcast %z to %e dims [0, 1, 2] : tensor<6x7x1xf32>, tensor<6x7x7xf32>
  %p = nn.div %e, %zb : tensor<6x7x7xf32>
  %o = nn.matmul %p, %v : tensor<6x7x7xf32>, tensor<6x7x4xf32>
  return %o : tensor<6x7x4xf32>
}

// -----

// Tests a bias nn.attention cannot take, left unfused: a mask that broadcasts
// inside its run of group dims ([2, 1, 2] over [2, 3, 2]: no single stride
// reaches it).
// CHECK-LABEL: func.func @inner_broadcast
// CHECK-NOT: nn.attention
// CHECK: return
func.func @inner_broadcast(%q: tensor<12x7x4xf32>, %k: tensor<12x4x7xf32>, %v: tensor<12x7x4xf32>,
    %mask: tensor<2x1x2x7x7xf32>) -> (tensor<12x7x4xf32>) {
  %s = nn.matmul %q, %k : tensor<12x7x4xf32>, tensor<12x4x7xf32>
  %s5 = nn.reshape %s shape [2, 3, 2, 7, 7] : tensor<12x7x7xf32>
  %kb = nn.broadcast %mask to %s5 dims [0, 1, 2, 3, 4] : tensor<2x1x2x7x7xf32>, tensor<2x3x2x7x7xf32>
  %a = nn.add %s5, %kb : tensor<2x3x2x7x7xf32>
  %x = nn.reshape %a shape [12, 7, 7] : tensor<2x3x2x7x7xf32>
  %sm_m = nn.reduce_max %x dims [2] keep_dims : tensor<12x7x7xf32>
  %sm_mb = nn.broadcast %sm_m to %x dims [0, 1, 2] : tensor<12x7x1xf32>, tensor<12x7x7xf32>
  %sm_d = nn.sub %x, %sm_mb : tensor<12x7x7xf32>
  %sm_e = nn.exp %sm_d : tensor<12x7x7xf32>
  %sm_z = nn.reduce_sum %sm_e dims [2] keep_dims : tensor<12x7x7xf32>
  %sm_zb = nn.broadcast %sm_z to %sm_e dims [0, 1, 2] : tensor<12x7x1xf32>, tensor<12x7x7xf32>
  %sm_p = nn.div %sm_e, %sm_zb : tensor<12x7x7xf32>
  %o = nn.matmul %sm_p, %v : tensor<12x7x7xf32>, tensor<12x7x4xf32>
  return %o : tensor<12x7x4xf32>
}

// -----

// Tests a bias nn.attention cannot take, left unfused: a key-padding mask ([G,
// 1, L]: not whole rows of scores).
// CHECK-LABEL: func.func @key_padding
// CHECK-NOT: nn.attention
// CHECK: return
func.func @key_padding(%q: tensor<12x7x4xf32>, %k: tensor<12x4x7xf32>, %v: tensor<12x7x4xf32>,
    %pad: tensor<12x1x7xf32>) -> (tensor<12x7x4xf32>) {
  %s = nn.matmul %q, %k : tensor<12x7x4xf32>, tensor<12x4x7xf32>
  %pb = nn.broadcast %pad to %s dims [0, 1, 2] : tensor<12x1x7xf32>, tensor<12x7x7xf32>
  %x = nn.add %s, %pb : tensor<12x7x7xf32>
  %sm_m = nn.reduce_max %x dims [2] keep_dims : tensor<12x7x7xf32>
  %sm_mb = nn.broadcast %sm_m to %x dims [0, 1, 2] : tensor<12x7x1xf32>, tensor<12x7x7xf32>
  %sm_d = nn.sub %x, %sm_mb : tensor<12x7x7xf32>
  %sm_e = nn.exp %sm_d : tensor<12x7x7xf32>
  %sm_z = nn.reduce_sum %sm_e dims [2] keep_dims : tensor<12x7x7xf32>
  %sm_zb = nn.broadcast %sm_z to %sm_e dims [0, 1, 2] : tensor<12x7x1xf32>, tensor<12x7x7xf32>
  %sm_p = nn.div %sm_e, %sm_zb : tensor<12x7x7xf32>
  %o = nn.matmul %sm_p, %v : tensor<12x7x7xf32>, tensor<12x7x4xf32>
  return %o : tensor<12x7x4xf32>
}

// -----

// Tests a bias nn.attention cannot take, left unfused: scores read by another
// op on the way to the softmax.
// CHECK-LABEL: func.func @scores_read_twice
// CHECK-NOT: nn.attention
// CHECK: return
func.func @scores_read_twice(%q: tensor<12x7x4xf32>, %k: tensor<12x4x7xf32>, %v: tensor<12x7x4xf32>,
    %w: tensor<12x7x7xf32>) -> (tensor<12x7x4xf32>, tensor<12x7x7xf32>) {
  %s = nn.matmul %q, %k : tensor<12x7x4xf32>, tensor<12x4x7xf32>
  %wb = nn.broadcast %w to %s dims [0, 1, 2] : tensor<12x7x7xf32>, tensor<12x7x7xf32>
  %a = nn.add %s, %wb : tensor<12x7x7xf32>
  %x = nn.reshape %a shape [12, 7, 7] : tensor<12x7x7xf32>
  %sm_m = nn.reduce_max %x dims [2] keep_dims : tensor<12x7x7xf32>
  %sm_mb = nn.broadcast %sm_m to %x dims [0, 1, 2] : tensor<12x7x1xf32>, tensor<12x7x7xf32>
  %sm_d = nn.sub %x, %sm_mb : tensor<12x7x7xf32>
  %sm_e = nn.exp %sm_d : tensor<12x7x7xf32>
  %sm_z = nn.reduce_sum %sm_e dims [2] keep_dims : tensor<12x7x7xf32>
  %sm_zb = nn.broadcast %sm_z to %sm_e dims [0, 1, 2] : tensor<12x7x1xf32>, tensor<12x7x7xf32>
  %sm_p = nn.div %sm_e, %sm_zb : tensor<12x7x7xf32>
  %o = nn.matmul %sm_p, %v : tensor<12x7x7xf32>, tensor<12x7x4xf32>
  return %o, %a : tensor<12x7x4xf32>, tensor<12x7x7xf32>
}

// -----

// Tests LeViT's attention: q k^T reshaped, times a scalar, plus a bias per
// head, then the softmax. The scale moves to q (the smaller: (q k^T) s is
// (q s) k^T), and the multiply of the scores, its broadcast and the add go.
// CHECK-LABEL: func.func @scaled_then_bias
// CHECK-SAME: (%[[Q:.*]]: tensor<6x7x4xf32>, %[[K:.*]]: tensor<6x4x7xf32>, %[[V:.*]]: tensor<6x7x8xf32>, %[[REL:.*]]: tensor<3x7x7xf32>)
// CHECK: %[[S:.*]] = nn.constant dense<2.500000e-01> : tensor<f32>
// CHECK: %[[SB:.*]] = nn.broadcast %[[S]] to %[[Q]] dims [] : tensor<f32>, tensor<6x7x4xf32>
// CHECK-NEXT: %[[QS:.*]] = nn.mul %[[Q]], %[[SB]] : tensor<6x7x4xf32>
// CHECK-NEXT: %[[O:.*]], %{{.*}} = nn.attention %[[QS]], %[[K]], %[[V]] transpose_k biases(%{{.*}} : tensor<3x7x7xf32>) strides [1]
// CHECK-NEXT: return %[[O]]
func.func @scaled_then_bias(%q: tensor<6x7x4xf32>, %k: tensor<6x4x7xf32>, %v: tensor<6x7x8xf32>,
                            %rel: tensor<3x7x7xf32>) -> tensor<6x7x8xf32> {
  %s = nn.matmul %q, %k : tensor<6x7x4xf32>, tensor<6x4x7xf32>
  %s4 = nn.reshape %s shape [2, 3, 7, 7] : tensor<6x7x7xf32>
  %c = nn.constant dense<0.25> : tensor<f32>
  %cb = nn.broadcast %c to %s4 dims [] : tensor<f32>, tensor<2x3x7x7xf32>
  %sc = nn.mul %s4, %cb : tensor<2x3x7x7xf32>
  %rb = nn.broadcast %rel to %sc dims [1, 2, 3] : tensor<3x7x7xf32>, tensor<2x3x7x7xf32>
  %x = nn.add %sc, %rb : tensor<2x3x7x7xf32>
  %m = nn.reduce_max %x dims [3] keep_dims : tensor<2x3x7x7xf32>
  %mb = nn.broadcast %m to %x dims [0, 1, 2, 3] : tensor<2x3x7x1xf32>, tensor<2x3x7x7xf32>
  %d = nn.sub %x, %mb : tensor<2x3x7x7xf32>
  %e = nn.exp %d : tensor<2x3x7x7xf32>
  %z = nn.reduce_sum %e dims [3] keep_dims : tensor<2x3x7x7xf32>
  %zb = nn.broadcast %z to %e dims [0, 1, 2, 3] : tensor<2x3x7x1xf32>, tensor<2x3x7x7xf32>
  %p = nn.div %e, %zb : tensor<2x3x7x7xf32>
  %p3 = nn.reshape %p shape [6, 7, 7] : tensor<2x3x7x7xf32>
  %o = nn.matmul %p3, %v : tensor<6x7x7xf32>, tensor<6x7x8xf32>
  return %o : tensor<6x7x8xf32>
}

// -----

// Tests the scale's broadcast on the multiply's left, and no bias.
// CHECK-LABEL: func.func @scale_on_left
// CHECK-SAME: (%[[Q:.*]]: tensor<6x7x4xf32>, %[[K:.*]]: tensor<6x7x4xf32>, %[[V:.*]]: tensor<6x7x5xf32>, %[[T:.*]]: tensor<f32>)
// CHECK-NEXT: %[[TB:.*]] = nn.broadcast %[[T]] to %[[Q]] dims [] : tensor<f32>, tensor<6x7x4xf32>
// CHECK-NEXT: %[[QS:.*]] = nn.mul %[[Q]], %[[TB]] : tensor<6x7x4xf32>
// CHECK-NEXT: %[[O:.*]], %{{.*}} = nn.attention %[[QS]], %[[K]], %[[V]] : tensor<6x7x4xf32>, tensor<6x7x4xf32>, tensor<6x7x5xf32>
// CHECK-NEXT: return %[[O]]
func.func @scale_on_left(%q: tensor<6x7x4xf32>, %k: tensor<6x7x4xf32>, %v: tensor<6x7x5xf32>,
                         %t: tensor<f32>) -> tensor<6x7x5xf32> {
  %s = nn.matmul %q, %k transpose_b : tensor<6x7x4xf32>, tensor<6x7x4xf32>
  %tb = nn.broadcast %t to %s dims [] : tensor<f32>, tensor<6x7x7xf32>
  %x = nn.mul %tb, %s : tensor<6x7x7xf32>
  %m = nn.reduce_max %x dims [2] keep_dims : tensor<6x7x7xf32>
  %mb = nn.broadcast %m to %x dims [0, 1, 2] : tensor<6x7x1xf32>, tensor<6x7x7xf32>
  %d = nn.sub %x, %mb : tensor<6x7x7xf32>
  %e = nn.exp %d : tensor<6x7x7xf32>
  %z = nn.reduce_sum %e dims [2] keep_dims : tensor<6x7x7xf32>
  %zb = nn.broadcast %z to %e dims [0, 1, 2] : tensor<6x7x1xf32>, tensor<6x7x7xf32>
  %p = nn.div %e, %zb : tensor<6x7x7xf32>
  %o = nn.matmul %p, %v : tensor<6x7x7xf32>, tensor<6x7x5xf32>
  return %o : tensor<6x7x5xf32>
}

// -----

// Tests scores divided by a scalar (`q @ k^T / sqrt(d)`), the divisor a
// function argument: q is divided by it.
// CHECK-LABEL: func.func @divided
// CHECK-SAME: (%[[Q:.*]]: tensor<6x7x4xf32>, %[[K:.*]]: tensor<6x7x4xf32>, %[[V:.*]]: tensor<6x7x5xf32>, %[[T:.*]]: tensor<f32>)
// CHECK-NEXT: %[[TB:.*]] = nn.broadcast %[[T]] to %[[Q]] dims [] : tensor<f32>, tensor<6x7x4xf32>
// CHECK-NEXT: %[[QS:.*]] = nn.div %[[Q]], %[[TB]] : tensor<6x7x4xf32>
// CHECK-NEXT: %[[O:.*]], %{{.*}} = nn.attention %[[QS]], %[[K]], %[[V]] : tensor<6x7x4xf32>, tensor<6x7x4xf32>, tensor<6x7x5xf32>
// CHECK-NEXT: return %[[O]]
func.func @divided(%q: tensor<6x7x4xf32>, %k: tensor<6x7x4xf32>, %v: tensor<6x7x5xf32>,
                   %t: tensor<f32>) -> tensor<6x7x5xf32> {
  %s = nn.matmul %q, %k transpose_b : tensor<6x7x4xf32>, tensor<6x7x4xf32>
  %tb = nn.broadcast %t to %s dims [] : tensor<f32>, tensor<6x7x7xf32>
  %x = nn.div %s, %tb : tensor<6x7x7xf32>
  %m = nn.reduce_max %x dims [2] keep_dims : tensor<6x7x7xf32>
  %mb = nn.broadcast %m to %x dims [0, 1, 2] : tensor<6x7x1xf32>, tensor<6x7x7xf32>
  %d = nn.sub %x, %mb : tensor<6x7x7xf32>
  %e = nn.exp %d : tensor<6x7x7xf32>
  %z = nn.reduce_sum %e dims [2] keep_dims : tensor<6x7x7xf32>
  %zb = nn.broadcast %z to %e dims [0, 1, 2] : tensor<6x7x1xf32>, tensor<6x7x7xf32>
  %p = nn.div %e, %zb : tensor<6x7x7xf32>
  %o = nn.matmul %p, %v : tensor<6x7x7xf32>, tensor<6x7x5xf32>
  return %o : tensor<6x7x5xf32>
}

// -----

// Tests what stays unfused: a scale applied after the bias (it would scale
// the bias too), a divisor on the left (s / (q k^T)), a scale of more
// than one element, and scaled scores read by something else too.
// CHECK-LABEL: func.func @bias_then_scaled
// CHECK-NOT: nn.attention
// CHECK: return
func.func @bias_then_scaled(%q: tensor<6x7x4xf32>, %k: tensor<6x4x7xf32>, %v: tensor<6x7x8xf32>,
                            %rel: tensor<6x7x7xf32>, %t: tensor<f32>) -> tensor<6x7x8xf32> {
  %s = nn.matmul %q, %k : tensor<6x7x4xf32>, tensor<6x4x7xf32>
  %rb = nn.broadcast %rel to %s dims [0, 1, 2] : tensor<6x7x7xf32>, tensor<6x7x7xf32>
  %a = nn.add %s, %rb : tensor<6x7x7xf32>
  %tb = nn.broadcast %t to %a dims [] : tensor<f32>, tensor<6x7x7xf32>
  %x = nn.mul %a, %tb : tensor<6x7x7xf32>
  %m = nn.reduce_max %x dims [2] keep_dims : tensor<6x7x7xf32>
  %mb = nn.broadcast %m to %x dims [0, 1, 2] : tensor<6x7x1xf32>, tensor<6x7x7xf32>
  %d = nn.sub %x, %mb : tensor<6x7x7xf32>
  %e = nn.exp %d : tensor<6x7x7xf32>
  %z = nn.reduce_sum %e dims [2] keep_dims : tensor<6x7x7xf32>
  %zb = nn.broadcast %z to %e dims [0, 1, 2] : tensor<6x7x1xf32>, tensor<6x7x7xf32>
  %p = nn.div %e, %zb : tensor<6x7x7xf32>
  %o = nn.matmul %p, %v : tensor<6x7x7xf32>, tensor<6x7x8xf32>
  return %o : tensor<6x7x8xf32>
}

// CHECK-LABEL: func.func @divisor_left
// CHECK-NOT: nn.attention
// CHECK: return
func.func @divisor_left(%q: tensor<6x7x4xf32>, %k: tensor<6x4x7xf32>, %v: tensor<6x7x8xf32>,
                        %t: tensor<f32>) -> tensor<6x7x8xf32> {
  %s = nn.matmul %q, %k : tensor<6x7x4xf32>, tensor<6x4x7xf32>
  %tb = nn.broadcast %t to %s dims [] : tensor<f32>, tensor<6x7x7xf32>
  %x = nn.div %tb, %s : tensor<6x7x7xf32>
  %m = nn.reduce_max %x dims [2] keep_dims : tensor<6x7x7xf32>
  %mb = nn.broadcast %m to %x dims [0, 1, 2] : tensor<6x7x1xf32>, tensor<6x7x7xf32>
  %d = nn.sub %x, %mb : tensor<6x7x7xf32>
  %e = nn.exp %d : tensor<6x7x7xf32>
  %z = nn.reduce_sum %e dims [2] keep_dims : tensor<6x7x7xf32>
  %zb = nn.broadcast %z to %e dims [0, 1, 2] : tensor<6x7x1xf32>, tensor<6x7x7xf32>
  %p = nn.div %e, %zb : tensor<6x7x7xf32>
  %o = nn.matmul %p, %v : tensor<6x7x7xf32>, tensor<6x7x8xf32>
  return %o : tensor<6x7x8xf32>
}

// CHECK-LABEL: func.func @scale_per_key
// CHECK-NOT: nn.attention
// CHECK: return
func.func @scale_per_key(%q: tensor<6x7x4xf32>, %k: tensor<6x4x7xf32>, %v: tensor<6x7x8xf32>,
                         %t: tensor<7xf32>) -> tensor<6x7x8xf32> {
  %s = nn.matmul %q, %k : tensor<6x7x4xf32>, tensor<6x4x7xf32>
  %tb = nn.broadcast %t to %s dims [2] : tensor<7xf32>, tensor<6x7x7xf32>
  %x = nn.mul %s, %tb : tensor<6x7x7xf32>
  %m = nn.reduce_max %x dims [2] keep_dims : tensor<6x7x7xf32>
  %mb = nn.broadcast %m to %x dims [0, 1, 2] : tensor<6x7x1xf32>, tensor<6x7x7xf32>
  %d = nn.sub %x, %mb : tensor<6x7x7xf32>
  %e = nn.exp %d : tensor<6x7x7xf32>
  %z = nn.reduce_sum %e dims [2] keep_dims : tensor<6x7x7xf32>
  %zb = nn.broadcast %z to %e dims [0, 1, 2] : tensor<6x7x1xf32>, tensor<6x7x7xf32>
  %p = nn.div %e, %zb : tensor<6x7x7xf32>
  %o = nn.matmul %p, %v : tensor<6x7x7xf32>, tensor<6x7x8xf32>
  return %o : tensor<6x7x8xf32>
}

// CHECK-LABEL: func.func @scaled_read_twice
// CHECK-NOT: nn.attention
// CHECK: return
func.func @scaled_read_twice(%q: tensor<6x7x4xf32>, %k: tensor<6x4x7xf32>, %v: tensor<6x7x8xf32>,
                             %t: tensor<f32>) -> (tensor<6x7x8xf32>, tensor<6x7x7xf32>) {
  %s = nn.matmul %q, %k : tensor<6x7x4xf32>, tensor<6x4x7xf32>
  %tb = nn.broadcast %t to %s dims [] : tensor<f32>, tensor<6x7x7xf32>
  %x = nn.mul %s, %tb : tensor<6x7x7xf32>
  %m = nn.reduce_max %x dims [2] keep_dims : tensor<6x7x7xf32>
  %mb = nn.broadcast %m to %x dims [0, 1, 2] : tensor<6x7x1xf32>, tensor<6x7x7xf32>
  %d = nn.sub %x, %mb : tensor<6x7x7xf32>
  %e = nn.exp %d : tensor<6x7x7xf32>
  %z = nn.reduce_sum %e dims [2] keep_dims : tensor<6x7x7xf32>
  %zb = nn.broadcast %z to %e dims [0, 1, 2] : tensor<6x7x1xf32>, tensor<6x7x7xf32>
  %p = nn.div %e, %zb : tensor<6x7x7xf32>
  %o = nn.matmul %p, %v : tensor<6x7x7xf32>, tensor<6x7x8xf32>
  return %o, %s : tensor<6x7x8xf32>, tensor<6x7x7xf32>
}
