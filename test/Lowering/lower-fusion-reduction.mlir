// RUN: graphc-opt %s --graphc-lower-to-plan | FileCheck %s

// Tests that an nn.fusion ending in a reduction (batch-norm statistics: the
// mean of the squared centered input, per channel) is one kernel, one pass:
//  - the loops collapse by (broadcast read, reduced): (n, c, h*w), iterators
//    reduction, parallel, reduction;
//  - the reduced output is zeroed, indexed by c alone, accumulated in the
//    body next to the elementwise output, then scaled by 1/32 for the mean;
//  - the squared value is never an argument;
//  - the reduced output is a group of its own (nothing runs in place over
//    it), and the broadcast [C] input is in none (never overwritten).
// CHECK-DAG: #[[ID:map[0-9]*]] = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
// CHECK-DAG: #[[C:map[0-9]*]] = affine_map<(d0, d1, d2) -> (d1)>
// CHECK: plan.launch @[[K:k[0-9]+]] [@train_step.input1, @train_step.input0] -> [@train_step.v0, @train_step.v1]{{$}}
// CHECK: plan.kernel @[[K]] ops ["nn.broadcast", "nn.sub", "nn.mul", "nn.reduce_mean"] inputs 2 outputs 2 bytes [12, 384, 384, 12] elementwise groups [-1, 0, 0, 1]
// CHECK: func.func @[[K]](%[[M:.*]]: memref<3xf32>, %[[X:.*]]: memref<2x3x16xf32>, %[[Y:.*]]: memref<2x3x16xf32>, %[[V:.*]]: memref<3xf32>)
// CHECK: linalg.fill ins(%{{.*}} : f32) outs(%[[V]] : memref<3xf32>)
// CHECK-NEXT: linalg.generic {indexing_maps = [#[[ID]], #[[C]], #[[ID]], #[[C]]], iterator_types = ["reduction", "parallel", "reduction"]} ins(%[[X]], %[[M]] : memref<2x3x16xf32>, memref<3xf32>) outs(%[[Y]], %[[V]] : memref<2x3x16xf32>, memref<3xf32>)
// CHECK-NEXT: ^bb0(%{{.*}}: f32, %{{.*}}: f32, %{{.*}}: f32, %[[ACC:.*]]: f32):
// CHECK-NEXT: %[[D:.*]] = arith.subf
// CHECK-NEXT: %[[Q:.*]] = arith.mulf %[[D]], %[[D]] : f32
// CHECK-NEXT: %[[S:.*]] = arith.addf %[[ACC]], %[[Q]] : f32
// CHECK-NEXT: linalg.yield %[[D]], %[[S]] : f32, f32
// CHECK: arith.constant 3.125000e-02 : f32
// CHECK-NEXT: linalg.generic {{.*}} outs(%[[V]] : memref<3xf32>)
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
