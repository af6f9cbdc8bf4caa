// RUN: graphc-opt %s --graphc-fuse-elementwise --split-input-file | FileCheck %s
// RUN: graphc-opt %s --graphc-fuse-elementwise="max-batch-operands=11" --split-input-file | FileCheck %s --check-prefix=LIMIT

// Tests that the optimizer updates of all parameters become one nn.multi_tensor
// at the last update: the shared learning rate is one input, each member reads
// its own block arguments, results are yielded member by member, and the
// write-backs of the earlier members move after the batch.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[LR:.*]] = nn.lr_schedule
// CHECK: %[[G2:.*]] = nn.mul
// CHECK: %[[R:.*]]:7 = nn.multi_tensor %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %[[LR]], %{{[^,]*}}, %[[G2]], %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}} :
// CHECK-SAME: -> tensor<4x3xf32>, tensor<4x3xf32>, tensor<7xf32>, tensor<7xf32>, tensor<5xf32>, tensor<5xf32>, tensor<5xf32> {
// CHECK-NEXT: ^bb0(%[[A:[^:]*]]: tensor<4x3xf32>, %[[B:[^:]*]]: tensor<4x3xf32>, %[[C:[^:]*]]: tensor<4x3xf32>, %[[L:[^:]*]]: tensor<f32>,
// CHECK-NEXT: %[[U:[^,]*]], %[[UV:[^ ]*]] = nn.sgd_momentum %[[A]], %[[B]], %[[C]], %[[L]] momentum
// CHECK-NEXT: nn.sgd_momentum %{{.*}}, %{{.*}}, %{{.*}}, %[[L]] momentum
// CHECK-NEXT: nn.adam
// CHECK-NEXT: nn.yield %[[U]], %[[UV]],
// CHECK: nn.assign @w1, %[[R]]#0
// CHECK-NEXT: nn.assign @w1.momentum_buffer, %[[R]]#1
// CHECK-NEXT: nn.assign @w2, %[[R]]#2
// CHECK-NEXT: nn.assign @w2.momentum_buffer, %[[R]]#3
// CHECK-NEXT: nn.assign @w3, %[[R]]#4
// CHECK-NEXT: nn.assign @w3.momentum_buffer, %[[R]]#5
// CHECK-NEXT: nn.assign @w3.momentum_buffer, %[[R]]#6
// CHECK-NOT: nn.sgd_momentum

// With at most 11 buffers a batch: the two momentum updates fit (7 inputs, the
// rate shared, + 4 results); the Adam update (4 more inputs + 3 results) does
// not and stays alone.
// LIMIT-LABEL: func.func @train_step
// LIMIT: nn.multi_tensor
// LIMIT-SAME: -> tensor<4x3xf32>, tensor<4x3xf32>, tensor<7xf32>, tensor<7xf32> {
// LIMIT: nn.yield
// LIMIT: nn.assign @w2.momentum_buffer
// LIMIT: nn.adam
// LIMIT-NOT: nn.multi_tensor
// LIMIT: // -----
nn.parameter @w1 : tensor<4x3xf32> = zeros
nn.state @w1.momentum_buffer : tensor<4x3xf32> = zeros
nn.parameter @w2 : tensor<7xf32> = zeros
nn.state @w2.momentum_buffer : tensor<7xf32> = zeros
nn.parameter @w3 : tensor<5xf32> = zeros
nn.state @w3.momentum_buffer : tensor<5xf32> = zeros
nn.state @graphc.step : tensor<i64> = zeros
func.func @train_step(%g1: tensor<4x3xf32>, %g: tensor<7xf32>, %g3: tensor<5xf32>, %c: tensor<f32>) {
  %step = nn.load @graphc.step : tensor<i64>
  %lr = nn.lr_schedule %step {base_lr = 0.1 : f64, decay = 0 : i32} : tensor<i64>
  %p1 = nn.load @w1 : tensor<4x3xf32>
  %v1 = nn.load @w1.momentum_buffer : tensor<4x3xf32>
  %n1, %m1 = nn.sgd_momentum %p1, %g1, %v1, %lr momentum 0.9 weight_decay 0.0001 : tensor<4x3xf32>
  nn.assign @w1, %n1 : tensor<4x3xf32>
  nn.assign @w1.momentum_buffer, %m1 : tensor<4x3xf32>
  %p2 = nn.load @w2 : tensor<7xf32>
  %v2 = nn.load @w2.momentum_buffer : tensor<7xf32>
  %g2 = nn.mul %g, %g : tensor<7xf32>
  %n2, %m2 = nn.sgd_momentum %p2, %g2, %v2, %lr momentum 0.9 weight_decay 0.0 : tensor<7xf32>
  nn.assign @w2, %n2 : tensor<7xf32>
  nn.assign @w2.momentum_buffer, %m2 : tensor<7xf32>
  %p3 = nn.load @w3 : tensor<5xf32>
  %v3 = nn.load @w3.momentum_buffer : tensor<5xf32>
  %n3, %e3, %s3 = nn.adam %p3, %g3, %v3, %v3, %lr, %c, %c beta1 0.9 beta2 0.999 epsilon 1.0e-8 weight_decay 0.0 : tensor<5xf32>
  nn.assign @w3, %n3 : tensor<5xf32>
  nn.assign @w3.momentum_buffer, %e3 : tensor<5xf32>
  nn.assign @w3.momentum_buffer, %s3 : tensor<5xf32>
  return
}

// -----

// Tests that an update whose result is read before the last update stays out
// of the batch, and so does one that reads a state written in between.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[EARLY:.*]] = nn.sgd %{{.*}} : tensor<3xf32>
// CHECK: nn.relu %[[EARLY]]
// CHECK: nn.sgd %{{.*}} : tensor<2xf32>
// CHECK: nn.assign @b, %{{.*}} : tensor<2xf32>
// CHECK: nn.multi_tensor
// CHECK-SAME: -> tensor<4xf32>, tensor<5xf32>
nn.parameter @a : tensor<3xf32> = zeros
nn.parameter @b : tensor<2xf32> = zeros
nn.parameter @c : tensor<4xf32> = zeros
nn.parameter @d : tensor<5xf32> = zeros
func.func @train_step(%ga: tensor<3xf32>, %gb: tensor<2xf32>, %gc: tensor<4xf32>, %gd: tensor<5xf32>, %lr: tensor<f32>) -> tensor<3xf32> {
  %a = nn.load @a : tensor<3xf32>
  %na = nn.sgd %a, %ga, %lr weight_decay 0.0 : tensor<3xf32>
  nn.assign @a, %na : tensor<3xf32>
  %r = nn.relu %na : tensor<3xf32>
  %b = nn.load @b : tensor<2xf32>
  %nb = nn.sgd %b, %gb, %lr weight_decay 0.0 : tensor<2xf32>
  %c = nn.load @c : tensor<4xf32>
  %nc = nn.sgd %c, %gc, %lr weight_decay 0.0 : tensor<4xf32>
  nn.assign @b, %gb : tensor<2xf32>
  nn.assign @c, %nc : tensor<4xf32>
  %d = nn.load @d : tensor<5xf32>
  %nd = nn.sgd %d, %gd, %lr weight_decay 0.0 : tensor<5xf32>
  nn.assign @d, %nd : tensor<5xf32>
  return %r : tensor<3xf32>
}

// -----

// Tests that leaving a member out withdraws its write-back's exemption: @b's
// update is read early (it stays out), so the nn.assign of it to @a stays in
// place, and @a's update, which reads @a before that assign, cannot move past
// it either. Nothing is batched.
// CHECK-LABEL: func.func @train_step
// CHECK-NOT: nn.multi_tensor
// CHECK: %[[NA:.*]] = nn.sgd
// CHECK: %[[NB:.*]] = nn.sgd
// CHECK: nn.assign @a, %[[NB]]
// CHECK-NOT: nn.multi_tensor
nn.parameter @a : tensor<4xf32> = zeros
nn.parameter @b : tensor<4xf32> = zeros
nn.parameter @c : tensor<5xf32> = zeros
func.func @train_step(%ga: tensor<4xf32>, %gb: tensor<4xf32>, %gc: tensor<5xf32>, %lr: tensor<f32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %a = nn.load @a : tensor<4xf32>
  %na = nn.sgd %a, %ga, %lr weight_decay 0.0 : tensor<4xf32>
  %b = nn.load @b : tensor<4xf32>
  %nb = nn.sgd %b, %gb, %lr weight_decay 0.0 : tensor<4xf32>
  nn.assign @a, %nb : tensor<4xf32>
  %r = nn.relu %nb : tensor<4xf32>
  %c = nn.load @c : tensor<5xf32>
  %nc = nn.sgd %c, %gc, %lr weight_decay 0.0 : tensor<5xf32>
  nn.assign @c, %nc : tensor<5xf32>
  return %na, %r : tensor<4xf32>, tensor<4xf32>
}

// -----

// Tests that a state read through a view (a reshape of the load) counts as a
// read: @a's update stays before the nn.assign to @a.
// CHECK-LABEL: func.func @train_step
// CHECK-NOT: nn.multi_tensor
// CHECK: nn.sgd
// CHECK-NEXT: nn.assign @a
// CHECK-NOT: nn.multi_tensor
nn.parameter @a : tensor<2x2xf32> = zeros
nn.parameter @c : tensor<5xf32> = zeros
func.func @train_step(%ga: tensor<4xf32>, %x: tensor<2x2xf32>, %gc: tensor<5xf32>, %lr: tensor<f32>) -> tensor<4xf32> {
  %a = nn.load @a : tensor<2x2xf32>
  %av = nn.reshape %a shape [4] : tensor<2x2xf32>
  %na = nn.sgd %av, %ga, %lr weight_decay 0.0 : tensor<4xf32>
  nn.assign @a, %x : tensor<2x2xf32>
  %c = nn.load @c : tensor<5xf32>
  %nc = nn.sgd %c, %gc, %lr weight_decay 0.0 : tensor<5xf32>
  nn.assign @c, %nc : tensor<5xf32>
  return %na : tensor<4xf32>
}
