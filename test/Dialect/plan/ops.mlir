// RUN: graphc-opt %s | graphc-opt | FileCheck %s

// Tests that every plan op round-trips through the printer and the parser.
// CHECK-LABEL: plan.buffer @x : memref<2x3x4x4xf32> in arena at 0
// CHECK: plan.buffer @w : memref<5x3x3x3xf32> in state at 0
// CHECK: plan.buffer @y : memref<2x5x2x2xf32> in arena at 512
// CHECK: plan.buffer @yflat : memref<2x20xf32> in arena at 512 alias @y
// CHECK: plan.buffer @yhalf : memref<1x5x2x2xf32> in arena at 592 alias @y + 80
// CHECK: plan.buffer @c : memref<f32> in constant at 0
// CHECK: plan.state @w = kaiming_normal trainable
// CHECK: plan.state @s = constant 5.000000e-01
// CHECK: plan.constant @c = dense<1.000000e+00> : tensor<f32>
// CHECK: plan.kernel @k0 ops ["nn.relu"] inputs 1 outputs 1 bytes [160, 160] elementwise
// CHECK: plan.binary cpu_x86_64 elf_shared_object cpu "x86-64-v3" symbols ["k0"] data "\7FELF" launches {{\[\[}}{args = array<i32: 0, 1>, block = array<i32: 1, 1, 1>, entry = "k0_l0", grid = array<i32: 2, 1, 1>}]]
// CHECK: plan.program @train_step inputs [@x] outputs [@yflat] arena 1024 {
// CHECK-NEXT: plan.conv2d [@x, @w] -> [@y] {dilations = array<i64: 1, 1>, groups = 1 : i64, padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>}
// CHECK-NEXT: plan.launch @k0 [@y] -> [@y] in_place [0]
// CHECK-NEXT: plan.gemm [@yflat, @m] -> [@g] {transpose_b}
// CHECK-NEXT: plan.max_pool2d [@y] -> [@p] {padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>, window = array<i64: 2, 2>}
// CHECK-NEXT: plan.copy [@g] -> [@g2]
plan.buffer @x : memref<2x3x4x4xf32> in arena at 0
plan.buffer @w : memref<5x3x3x3xf32> in state at 0
plan.buffer @s : memref<f32> in state at 576
plan.buffer @y : memref<2x5x2x2xf32> in arena at 512
plan.buffer @yflat : memref<2x20xf32> in arena at 512 alias @y
plan.buffer @yhalf : memref<1x5x2x2xf32> in arena at 592 alias @y + 80
plan.buffer @m : memref<3x20xf32> in state at 640
plan.buffer @g : memref<2x3xf32> in arena at 0
plan.buffer @g2 : memref<2x3xf32> in arena at 64
plan.buffer @p : memref<2x5x1x1xf32> in arena at 128
plan.buffer @c : memref<f32> in constant at 0
plan.state @w = kaiming_normal trainable
plan.state @s = constant 0.5
plan.constant @c = dense<1.0> : tensor<f32>
plan.kernel @k0 ops ["nn.relu"] inputs 1 outputs 1 bytes [160, 160] elementwise
plan.binary cpu_x86_64 elf_shared_object cpu "x86-64-v3" symbols ["k0"] data "\7FELF" launches [[{entry = "k0_l0", grid = array<i32: 2, 1, 1>, block = array<i32: 1, 1, 1>, args = array<i32: 0, 1>}]]
plan.program @train_step inputs [@x] outputs [@yflat] arena 1024 {
  plan.conv2d [@x, @w] -> [@y] {strides = array<i64: 1, 1>, padding = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64}
  plan.launch @k0 [@y] -> [@y] in_place [0]
  plan.gemm [@yflat, @m] -> [@g] {transpose_b}
  plan.max_pool2d [@y] -> [@p] {window = array<i64: 2, 2>, strides = array<i64: 2, 2>, padding = array<i64: 0, 0, 0, 0>}
  plan.copy [@g] -> [@g2]
}
