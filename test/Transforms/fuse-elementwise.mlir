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

// Tests multiple consumers: %e feeds the group and a reduction after it, so
// the fusion has two results; nothing is computed twice.
// CHECK-LABEL: func.func @two_results
// CHECK: %[[F:.*]]:2 = nn.fusion %{{.*}}, %{{.*}} : tensor<8xf32>, tensor<8xf32> -> tensor<8xf32>, tensor<8xf32>
// CHECK-COUNT-1: nn.exp
// CHECK: nn.yield
// CHECK: nn.reduce_sum %[[F]]#0
// CHECK: return %{{.*}}, %[[F]]#1
func.func @two_results(%x: tensor<8xf32>, %y: tensor<8xf32>) -> (tensor<f32>, tensor<8xf32>) {
  %e = nn.exp %x : tensor<8xf32>
  %m = nn.mul %e, %y : tensor<8xf32>
  %r = nn.relu %m : tensor<8xf32>
  %s = nn.reduce_sum %e dims [0] : tensor<8xf32>
  return %s, %r : tensor<f32>, tensor<8xf32>
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
// whose broadcast feeds the multiply. exp stays alone; the broadcast and the
// multiply fuse, reading exp's result and the reduction as inputs.
// CHECK-LABEL: func.func @softmax_like
// CHECK: %[[E:.*]] = nn.exp
// CHECK: %[[S:.*]] = nn.reduce_sum %[[E]]
// CHECK: nn.fusion %[[S]], %[[E]] : tensor<4xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
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
