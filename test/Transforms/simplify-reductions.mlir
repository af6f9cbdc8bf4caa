// RUN: graphc-opt %s --graphc-simplify-reductions --split-input-file | FileCheck %s

// Tests batch norm's mean gradient as autodiff writes it (channels last): the
// sum of dd = g * s + c * d + c * d, d centred on its mean over [0, 1, 2],
// becomes s times the sum of g taken before; the pass over dd is gone, and
// so is the negation that only fed it.
// CHECK-LABEL: func.func @bn_backward
// CHECK-SAME: (%[[X:[^:]*]]: tensor<2x3x3x4xf32>, %[[G:[^:]*]]: tensor<2x3x3x4xf32>, %[[S:[^:]*]]: tensor<4xf32>, %[[C:[^:]*]]: tensor<4xf32>)
// CHECK: %[[SG:.*]] = nn.reduce_sum %[[G]] dims [0, 1, 2] keep_dims
// CHECK: nn.add
// CHECK: %[[DD:.*]] = nn.add
// CHECK-NOT: nn.reduce_sum
// CHECK-NOT: nn.neg {{.*}} : tensor<2x3x3x4xf32>
// CHECK: %[[SR:.*]] = nn.broadcast %[[S]] to %[[SG]] dims [3] : tensor<4xf32>, tensor<1x1x1x4xf32>
// CHECK-NEXT: %[[NS:.*]] = nn.neg %[[SR]] : tensor<1x1x1x4xf32>
// CHECK-NEXT: %[[DM:.*]] = nn.mul %[[NS]], %[[SG]] : tensor<1x1x1x4xf32>
// CHECK-NOT: nn.reduce_sum
// CHECK: return %[[SG]], %[[DD]], %[[DM]]
func.func @bn_backward(%x: tensor<2x3x3x4xf32>, %g: tensor<2x3x3x4xf32>, %s: tensor<4xf32>, %c: tensor<4xf32>)
    -> (tensor<1x1x1x4xf32>, tensor<2x3x3x4xf32>, tensor<1x1x1x4xf32>) {
  %mean = nn.reduce_mean %x dims [0, 1, 2] : tensor<2x3x3x4xf32>
  %m = nn.broadcast %mean to %x dims [3] : tensor<4xf32>, tensor<2x3x3x4xf32>
  %d = nn.sub %x, %m : tensor<2x3x3x4xf32>
  %sg = nn.reduce_sum %g dims [0, 1, 2] keep_dims : tensor<2x3x3x4xf32>
  %sb = nn.broadcast %s to %x dims [3] : tensor<4xf32>, tensor<2x3x3x4xf32>
  %t = nn.mul %g, %sb : tensor<2x3x3x4xf32>
  %cb = nn.broadcast %c to %x dims [3] : tensor<4xf32>, tensor<2x3x3x4xf32>
  %half = nn.constant dense<0.5> : tensor<f32>
  %hb = nn.broadcast %half to %x dims [] : tensor<f32>, tensor<2x3x3x4xf32>
  %coef = nn.mul %cb, %hb : tensor<2x3x3x4xf32>
  %u = nn.mul %coef, %d : tensor<2x3x3x4xf32>
  %tu = nn.add %t, %u : tensor<2x3x3x4xf32>
  %v = nn.mul %coef, %d : tensor<2x3x3x4xf32>
  %dd = nn.add %tu, %v : tensor<2x3x3x4xf32>
  %n = nn.neg %dd : tensor<2x3x3x4xf32>
  %dm = nn.reduce_sum %n dims [0, 1, 2] keep_dims : tensor<2x3x3x4xf32>
  return %sg, %dd, %dm : tensor<1x1x1x4xf32>, tensor<2x3x3x4xf32>, tensor<1x1x1x4xf32>
}

// -----

// Tests the same without keep_dims, channels first: the factor's dim 1 is
// dim 0 of the sum, where it is the per-channel vector itself.
// CHECK-LABEL: func.func @nchw
// CHECK-SAME: %[[S:[^:]*]]: tensor<4xf32>)
// CHECK: %[[SG:.*]] = nn.reduce_sum %{{.*}} dims [0, 2, 3] : tensor<2x4x3x3xf32>
// CHECK-NOT: nn.reduce_sum
// CHECK: %[[T:.*]] = nn.mul %[[S]], %[[SG]] : tensor<4xf32>
// CHECK-NEXT: return %[[SG]], %[[T]]
func.func @nchw(%x: tensor<2x4x3x3xf32>, %g: tensor<2x4x3x3xf32>, %s: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %mean = nn.reduce_mean %x dims [0, 2, 3] : tensor<2x4x3x3xf32>
  %m = nn.broadcast %mean to %x dims [1] : tensor<4xf32>, tensor<2x4x3x3xf32>
  %d = nn.sub %x, %m : tensor<2x4x3x3xf32>
  %sg = nn.reduce_sum %g dims [0, 2, 3] : tensor<2x4x3x3xf32>
  %sb = nn.broadcast %s to %x dims [1] : tensor<4xf32>, tensor<2x4x3x3xf32>
  %t = nn.mul %sb, %g : tensor<2x4x3x3xf32>
  %e = nn.sub %t, %d : tensor<2x4x3x3xf32>
  %r = nn.reduce_sum %e dims [0, 2, 3] : tensor<2x4x3x3xf32>
  return %sg, %r : tensor<4xf32>, tensor<4xf32>
}

// -----

// Tests that deviations alone sum to a zero constant.
// CHECK-LABEL: func.func @centred
// CHECK-NOT: nn.reduce_sum
// CHECK: %[[Z:.*]] = nn.constant dense<0.000000e+00> : tensor<4xf32>
// CHECK-NEXT: return %[[Z]]
func.func @centred(%x: tensor<2x4xf32>) -> tensor<4xf32> {
  %mean = nn.reduce_mean %x dims [0] : tensor<2x4xf32>
  %m = nn.broadcast %mean to %x dims [1] : tensor<4xf32>, tensor<2x4xf32>
  %d = nn.sub %x, %m : tensor<2x4xf32>
  %r = nn.reduce_sum %d dims [0] : tensor<2x4xf32>
  return %r : tensor<4xf32>
}

// -----

// Tests what is left alone: a value centred on another value's mean (a
// synchronized batch norm's is global), a mean over other dims, a term
// nothing sums yet, and a sum that only repeats one taken before (no zero
// term: fusion computes both in one pass, and two gradients must not become
// views of one buffer).
// CHECK-LABEL: func.func @left_alone
// CHECK-COUNT-5: nn.reduce_sum
// CHECK-NOT: nn.constant
func.func @left_alone(%x: tensor<2x4xf32>, %y: tensor<2x4xf32>, %g: tensor<2x4xf32>)
    -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %mean = nn.reduce_mean %y dims [0] : tensor<2x4xf32>
  %m = nn.broadcast %mean to %x dims [1] : tensor<4xf32>, tensor<2x4xf32>
  %d = nn.sub %x, %m : tensor<2x4xf32>
  %r1 = nn.reduce_sum %d dims [0] : tensor<2x4xf32>
  %rows = nn.reduce_mean %x dims [1] : tensor<2x4xf32>
  %mr = nn.broadcast %rows to %x dims [0] : tensor<2xf32>, tensor<2x4xf32>
  %dr = nn.sub %x, %mr : tensor<2x4xf32>
  %r2 = nn.reduce_sum %dr dims [0] : tensor<2x4xf32>
  %xm = nn.reduce_mean %x dims [0] : tensor<2x4xf32>
  %xb = nn.broadcast %xm to %x dims [1] : tensor<4xf32>, tensor<2x4xf32>
  %dx = nn.sub %x, %xb : tensor<2x4xf32>
  %e = nn.add %g, %dx : tensor<2x4xf32>
  %r3 = nn.reduce_sum %e dims [0] : tensor<2x4xf32>
  %sg = nn.reduce_sum %g dims [0] : tensor<2x4xf32>
  %again = nn.reduce_sum %g dims [0] : tensor<2x4xf32>
  return %r1, %r2, %r3, %sg, %again : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}

// -----

// Tests a product factor without keep_dims (the coefficient is c * 0.5, both
// broadcast along the channel): it becomes the product of the two at the
// sum's shape.
// CHECK-LABEL: func.func @product_factor
// CHECK-SAME: (%[[X:[^:]*]]: tensor<2x4xf32>, %[[G:[^:]*]]: tensor<2x4xf32>, %[[C:[^:]*]]: tensor<4xf32>, %[[H:[^:]*]]: tensor<f32>)
// CHECK: %[[SG:.*]] = nn.reduce_sum %[[G]] dims [0] : tensor<2x4xf32>
// CHECK-NOT: nn.reduce_sum
// CHECK: %[[HR:.*]] = nn.broadcast %[[H]] to %[[SG]] dims [] : tensor<f32>, tensor<4xf32>
// CHECK-NEXT: %[[CH:.*]] = nn.mul %[[C]], %[[HR]] : tensor<4xf32>
// CHECK-NEXT: %[[T:.*]] = nn.mul %[[CH]], %[[SG]] : tensor<4xf32>
// CHECK-NEXT: return %[[SG]], %[[T]]
func.func @product_factor(%x: tensor<2x4xf32>, %g: tensor<2x4xf32>, %c: tensor<4xf32>, %h: tensor<f32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %mean = nn.reduce_mean %x dims [0] : tensor<2x4xf32>
  %m = nn.broadcast %mean to %x dims [1] : tensor<4xf32>, tensor<2x4xf32>
  %d = nn.sub %x, %m : tensor<2x4xf32>
  %sg = nn.reduce_sum %g dims [0] : tensor<2x4xf32>
  %cb = nn.broadcast %c to %x dims [1] : tensor<4xf32>, tensor<2x4xf32>
  %hb = nn.broadcast %h to %x dims [] : tensor<f32>, tensor<2x4xf32>
  %coef = nn.mul %cb, %hb : tensor<2x4xf32>
  %t = nn.mul %coef, %g : tensor<2x4xf32>
  %e = nn.add %t, %d : tensor<2x4xf32>
  %r = nn.reduce_sum %e dims [0] : tensor<2x4xf32>
  return %sg, %r : tensor<4xf32>, tensor<4xf32>
}

// -----

// Tests two more cases left alone: a sum that would become an earlier sum as
// it is (sum(g + d) = sum(g): two results one buffer), and an earlier sum of
// another form (keep_dims).
// CHECK-LABEL: func.func @alias_or_form
// CHECK-COUNT-4: nn.reduce_sum
func.func @alias_or_form(%x: tensor<2x4xf32>, %g: tensor<2x4xf32>, %k: tensor<2x4xf32>, %s: tensor<4xf32>)
    -> (tensor<4xf32>, tensor<4xf32>, tensor<1x4xf32>, tensor<4xf32>) {
  %mean = nn.reduce_mean %x dims [0] : tensor<2x4xf32>
  %m = nn.broadcast %mean to %x dims [1] : tensor<4xf32>, tensor<2x4xf32>
  %d = nn.sub %x, %m : tensor<2x4xf32>
  %sg = nn.reduce_sum %g dims [0] : tensor<2x4xf32>
  %e = nn.add %g, %d : tensor<2x4xf32>
  %r = nn.reduce_sum %e dims [0] : tensor<2x4xf32>
  %sk = nn.reduce_sum %k dims [0] keep_dims : tensor<2x4xf32>
  %sb = nn.broadcast %s to %x dims [1] : tensor<4xf32>, tensor<2x4xf32>
  %t = nn.mul %k, %sb : tensor<2x4xf32>
  %f = nn.sub %t, %d : tensor<2x4xf32>
  %q = nn.reduce_sum %f dims [0] : tensor<2x4xf32>
  return %sg, %r, %sk, %q : tensor<4xf32>, tensor<4xf32>, tensor<1x4xf32>, tensor<4xf32>
}
