// RUN: graphc-opt %s --graphc-lower-to-plan | FileCheck %s

// Tests that an nn.fusion ending in a reduction (batch-norm statistics: the
// mean of the squared centered input, per channel) is one kernel, one pass:
//  - the loops collapse by (broadcast read, reduced): (n, c, h*w), and the
//    channel is the one parallel loop;
//  - the batch is a loop carrying one accumulator; h*w runs in blocks of
//    (at most) 16 groups of 8 iterations with 8 independent accumulators (the
//    vectorizer's lanes), each iteration storing the elementwise output next
//    to accumulating, each block's lanes added into the lanes' totals;
//  - the float32 values are summed in float64;
//  - the lanes add as a tree, the batch's partial sums in order, and the
//    mean is scaled by 1/32 and stored once (as float32), indexed by c alone;
//  - the squared value is never an argument;
//  - the reduced output is a group of its own (nothing runs in place over
//    it), and the broadcast [C] input is in none (never overwritten).
// CHECK: plan.launch @[[K:k[0-9]+]] [@train_step.input1, @train_step.input0] -> [@train_step.v0, @train_step.v1]{{$}}
// CHECK: plan.kernel @[[K]] ops ["nn.broadcast", "nn.sub", "nn.mul", "nn.reduce_mean"] inputs 2 outputs 2 bytes [12, 384, 384, 12] elementwise groups [-1, 0, 0, 1]
// CHECK: func.func @[[K]](%[[M:.*]]: memref<3xf32>, %[[X:.*]]: memref<2x3x16xf32>, %[[Y:.*]]: memref<2x3x16xf32>, %[[V:.*]]: memref<3xf32>)
// CHECK-NOT: linalg.
// CHECK: scf.parallel (%[[C:.*]]) = (%{{.*}}) to (%c3)
// CHECK: %[[SUM:.*]] = scf.for %[[N:.*]] = %{{.*}} to %c2{{.*}} iter_args(%[[ACC:.*]] = %{{.*}}) -> (f64)
// CHECK: %[[LANES:.*]]:8 = scf.for %[[B:.*]] = %{{.*}} to %c1{{.*}} iter_args({{.*}}) -> (f64, f64, f64, f64, f64, f64, f64, f64)
// CHECK: %[[LAST:.*]] = arith.minsi %{{.*}}, %c2{{.*}} : index
// CHECK: %[[BLOCK:.*]]:8 = scf.for %[[G:.*]] = %{{.*}} to %[[LAST]] {{.*}} iter_args(%[[L0:[^ ]*]] = %{{.*}}, %[[L1:[^ ]*]] = {{.*}}) -> (f64, f64, f64, f64, f64, f64, f64, f64)
// CHECK: %[[XV:.*]] = memref.load %[[X]]
// CHECK: %[[MV:.*]] = memref.load %[[M]]
// CHECK-NEXT: %[[D:.*]] = arith.subf %[[XV]], %[[MV]] : f32
// CHECK-NEXT: %[[Q:.*]] = arith.mulf %[[D]], %[[D]] : f32
// CHECK: memref.store %[[D]], %[[Y]]
// CHECK-NEXT: %[[WIDE:.*]] = arith.extf %[[Q]] : f32 to f64
// CHECK-NEXT: %{{.*}} = arith.addf %[[L0]], %[[WIDE]] : f64
// CHECK: arith.addf %[[L1]], %{{.*}} : f64
// CHECK: scf.yield {{.*}} : f64, f64, f64, f64, f64, f64, f64, f64
// CHECK: arith.addf %{{.*}}, %[[BLOCK]]#0 : f64
// CHECK: scf.yield {{.*}} : f64, f64, f64, f64, f64, f64, f64, f64
// CHECK: %[[P01:.*]] = arith.addf %[[LANES]]#0, %[[LANES]]#1 : f64
// CHECK-NEXT: %[[P23:.*]] = arith.addf %[[LANES]]#2, %[[LANES]]#3 : f64
// CHECK-NEXT: %[[P45:.*]] = arith.addf %[[LANES]]#4, %[[LANES]]#5 : f64
// CHECK-NEXT: %[[P67:.*]] = arith.addf %[[LANES]]#6, %[[LANES]]#7 : f64
// CHECK-NEXT: %[[P03:.*]] = arith.addf %[[P01]], %[[P23]] : f64
// CHECK-NEXT: %[[P47:.*]] = arith.addf %[[P45]], %[[P67]] : f64
// CHECK-NEXT: %[[TREE:.*]] = arith.addf %[[P03]], %[[P47]] : f64
// CHECK-NEXT: %[[NEXT:.*]] = arith.addf %[[ACC]], %[[TREE]] : f64
// CHECK-NEXT: scf.yield %[[NEXT]] : f64
// CHECK: %[[MEAN:.*]] = arith.mulf %[[SUM]], %{{.*}} : f64
// CHECK-NEXT: %[[NARROW:.*]] = arith.truncf %[[MEAN]] : f64 to f32
// CHECK: memref.store %[[NARROW]], %[[V]]
// CHECK-NOT: memref.store
// CHECK: scf.reduce
func.func @train_step(%x: tensor<2x3x4x4xf32>, %m: tensor<3xf32>) -> (tensor<2x3x4x4xf32>, tensor<3xf32>) {
  %c, %v = nn.fusion %m, %x : tensor<3xf32>, tensor<2x3x4x4xf32> -> tensor<2x3x4x4xf32>, tensor<3xf32> {
  ^bb0(%a: tensor<3xf32>, %b: tensor<2x3x4x4xf32>):
    %0 = nn.broadcast %a to %b dims [1] : tensor<3xf32>, tensor<2x3x4x4xf32>
    %1 = nn.sub %b, %0 : tensor<2x3x4x4xf32>
    %2 = nn.mul %1, %1 : tensor<2x3x4x4xf32>
    %3 = nn.reduce_mean %2 dims [0, 2, 3] : tensor<2x3x4x4xf32>
    nn.yield %1, %3 : tensor<2x3x4x4xf32>, tensor<3xf32>
  }
  return %c, %v : tensor<2x3x4x4xf32>, tensor<3xf32>
}
