// RUN: graphc-opt %s --graphc-lower-to-plan | FileCheck %s

// Tests that an nn.fusion becomes one kernel: a single linalg.generic whose
// body composes the members' scalar functions. The output dims the broadcast
// treats alike are collapsed ([2, 3, 4, 4] loops as (n, c, h*w)), the [3]
// input is read through an indexing map (no [2, 3, 4, 4] temporary), the
// `shape_of` operand is not a kernel argument, and both yielded values are
// outputs (multi-output).
// CHECK: plan.launch @[[K:k[0-9]+]] [@train_step.input1, @train_step.input0] -> [@[[M:.*]], @[[R:.*]]]
// CHECK: plan.kernel @[[K]] ops ["nn.broadcast", "nn.mul", "nn.relu"] inputs 2 outputs 2 bytes [12, 384, 384, 384] elementwise
// CHECK: func.func @[[K]](%[[S:.*]]: memref<3xf32>, %[[X:.*]]: memref<2x3x16xf32>, %[[O1:.*]]: memref<2x3x16xf32>, %[[O2:.*]]: memref<2x3x16xf32>)
// CHECK-NEXT: linalg.generic
// CHECK-SAME: indexing_maps = [#[[ID:map[0-9]*]], #[[BC:map[0-9]*]], #[[ID]], #[[ID]]]
// CHECK-SAME: iterator_types = ["parallel", "parallel", "parallel"]
// CHECK-SAME: ins(%[[X]], %[[S]] : memref<2x3x16xf32>, memref<3xf32>) outs(%[[O1]], %[[O2]] : memref<2x3x16xf32>, memref<2x3x16xf32>)
// CHECK: arith.mulf
// CHECK: arith.maximumf
// CHECK-NEXT: linalg.yield
// CHECK-NOT: linalg.generic
module {
  func.func @train_step(%x: tensor<2x3x4x4xf32>, %s: tensor<3xf32>) -> (tensor<2x3x4x4xf32>, tensor<2x3x4x4xf32>) {
    %m, %r = nn.fusion %s, %x : tensor<3xf32>, tensor<2x3x4x4xf32> -> tensor<2x3x4x4xf32>, tensor<2x3x4x4xf32> {
    ^bb0(%a: tensor<3xf32>, %b: tensor<2x3x4x4xf32>):
      %0 = nn.broadcast %a to %b dims [1] : tensor<3xf32>, tensor<2x3x4x4xf32>
      %1 = nn.mul %b, %0 : tensor<2x3x4x4xf32>
      %2 = nn.relu %1 : tensor<2x3x4x4xf32>
      nn.yield %1, %2 : tensor<2x3x4x4xf32>, tensor<2x3x4x4xf32>
    }
    return %m, %r : tensor<2x3x4x4xf32>, tensor<2x3x4x4xf32>
  }
}
