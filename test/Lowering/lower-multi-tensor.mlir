// RUN: graphc-opt %s --graphc-lower-to-plan | FileCheck %s
// RUN: graphc-opt %s --graphc-lower-to-plan | FileCheck %s --check-prefix=CPU

// Tests that an nn.multi_tensor becomes one kernel and one launch:
//  - each update writes its parameter and momentum buffer in place, over its
//    own member's inputs (in_place), which the kernel's groups allow; the
//    shared learning rate is in no group;
//  - one 2-D parallel loop over (block, element): 3 blocks of 1024 for the
//    3000-element weight, then 2 for the 2048-element bias;
//  - a compare against the first block of the second member picks the member;
//  - the weight's last block is partial (a guard), the bias's is not;
//  - weight decay 0 multiplies nothing.
// The CPU variant (CPU) searches once per block instead: a 1-D parallel loop
// over the blocks, then each block's elements a loop of their own, up to the
// member's end (no guard per element).
// CPU: scf.execute_region {
// CPU: scf.parallel (%[[I:.*]]) = (%{{.*}}) to (%c5)
// CPU: arith.cmpi ult, %[[I]], %c3 : index
// CPU: %[[END:.*]] = arith.minsi %{{.*}}, %c3000 : index
// CPU: scf.for %[[E:.*]] = %{{.*}} to %[[END]]
// CPU-NEXT: memref.load %{{.*}}[%[[E]]] : memref<3000xf32>
// CPU: } else {
// CPU: %[[END2:.*]] = arith.minsi %{{.*}}, %c2048 : index
// CPU: scf.for %{{.*}} = %{{.*}} to %[[END2]]
// CPU: } {graphc.target = "cpu"}
// CHECK: plan.launch @[[K:k[0-9]+]] [@w, @train_step.input0, @w.momentum_buffer, @train_step.input2, @b, @train_step.input1, @b.momentum_buffer] -> [@w, @w.momentum_buffer, @b, @b.momentum_buffer] in_place [0, 2, 4, 6]
// CHECK-NOT: plan.copy
// CHECK: plan.kernel @[[K]] ops ["nn.sgd_momentum", "nn.sgd_momentum"] inputs 7 outputs 4 bytes [12000, 12000, 12000, 4, 8192, 8192, 8192, 12000, 12000, 8192, 8192] elementwise groups [0, 0, 0, -1, 1, 1, 1, 0, 0, 1, 1]
// CHECK: func.func @[[K]](%[[P:[^:]*]]: memref<3000xf32>, %{{.*}}: memref<3000xf32>, %{{.*}}: memref<3000xf32>, %[[LR:[^:]*]]: memref<f32>, %[[B:[^:]*]]: memref<2048xf32>,
// CHECK-DAG: %[[FIVE:.*]] = arith.constant 5 : index
// CHECK-DAG: %[[BLOCK:.*]] = arith.constant 1024 : index
// CHECK: scf.parallel (%[[I:.*]], %[[E:.*]]) = (%{{.*}}, %{{.*}}) to (%[[FIVE]], %[[BLOCK]])
// CHECK: %[[THREE:.*]] = arith.constant 3 : index
// CHECK-NEXT: %[[FIRST:.*]] = arith.cmpi ult, %[[I]], %[[THREE]] : index
// CHECK-NEXT: scf.if %[[FIRST]] {
// CHECK: %[[N:.*]] = arith.constant 3000 : index
// CHECK-NEXT: %[[IN:.*]] = arith.cmpi ult, %[[X:.*]], %[[N]] : index
// CHECK-NEXT: scf.if %[[IN]] {
// CHECK-NEXT: memref.load %[[P]][%[[X]]] : memref<3000xf32>
// CHECK: arith.mulf
// CHECK-NEXT: arith.addf
// CHECK: } else {
// CHECK-NOT: scf.if
// CHECK: memref.load %[[B]][%{{.*}}] : memref<2048xf32>
// CHECK: memref.load %[[LR]][] : memref<f32>
// CHECK-NEXT: arith.constant 0.899999976 : f32
nn.parameter @w : tensor<3000xf32> = zeros
nn.state @w.momentum_buffer : tensor<3000xf32> = zeros
nn.parameter @b : tensor<2048xf32> = zeros
nn.state @b.momentum_buffer : tensor<2048xf32> = zeros
func.func @train_step(%gw: tensor<3000xf32>, %gb: tensor<2048xf32>, %lr: tensor<f32>) {
  %w = nn.load @w : tensor<3000xf32>
  %vw = nn.load @w.momentum_buffer : tensor<3000xf32>
  %b = nn.load @b : tensor<2048xf32>
  %vb = nn.load @b.momentum_buffer : tensor<2048xf32>
  %r:4 = nn.multi_tensor %w, %gw, %vw, %lr, %b, %gb, %vb : tensor<3000xf32>, tensor<3000xf32>, tensor<3000xf32>, tensor<f32>, tensor<2048xf32>, tensor<2048xf32>, tensor<2048xf32> -> tensor<3000xf32>, tensor<3000xf32>, tensor<2048xf32>, tensor<2048xf32> {
  ^bb0(%a: tensor<3000xf32>, %g: tensor<3000xf32>, %v: tensor<3000xf32>, %l: tensor<f32>, %c: tensor<2048xf32>, %h: tensor<2048xf32>, %u: tensor<2048xf32>):
    %0:2 = nn.sgd_momentum %a, %g, %v, %l momentum 0.9 weight_decay 0.0001 : tensor<3000xf32>
    %1:2 = nn.sgd_momentum %c, %h, %u, %l momentum 0.9 weight_decay 0.0 : tensor<2048xf32>
    nn.yield %0#0, %0#1, %1#0, %1#1 : tensor<3000xf32>, tensor<3000xf32>, tensor<2048xf32>, tensor<2048xf32>
  }
  nn.assign @w, %r#0 : tensor<3000xf32>
  nn.assign @w.momentum_buffer, %r#1 : tensor<3000xf32>
  nn.assign @b, %r#2 : tensor<2048xf32>
  nn.assign @b.momentum_buffer, %r#3 : tensor<2048xf32>
  return
}
