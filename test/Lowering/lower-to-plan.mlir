// RUN: graphc-opt %s --graphc-lower-to-plan --split-input-file --verify-diagnostics | FileCheck %s

// Tests the bufferization: state buffers and initializers, an arena buffer per
// value, views as aliases, deduplicated constants and kernels, library calls,
// a state written in place when nothing reads its old value later, and a copy
// when something does.
// CHECK-LABEL: plan.buffer @w : memref<4xf32> in state
// CHECK-NEXT: plan.state @w = ones trainable
// CHECK: plan.buffer @s : memref<4xf32> in state
// CHECK-NEXT: plan.state @s = constant 5.000000e-01
// CHECK: plan.buffer @train_step.input0 : memref<2x4xf32> in arena
// CHECK: plan.buffer @train_step.input1 : memref<2xi32> in arena
// CHECK: plan.constant @const0 = dense<2.000000e+00> : tensor<4xf32>
// CHECK: plan.buffer @{{train_step.v[0-9]+}} : memref<8xf32> in arena alias @[[RELU:train_step.v[0-9]+]]
// CHECK-NEXT: plan.buffer @[[VIEW:train_step.v[0-9]+]] : memref<2x4xf32> in arena alias @[[RELU]]
// CHECK-NOT: plan.constant
// CHECK: plan.program @train_step inputs [@train_step.input0, @train_step.input1] outputs [@{{train_step.v[0-9]+}}] {
// CHECK-NEXT: plan.launch @[[BCAST:k[0-9]+]] [@w] -> [@[[B:train_step.v[0-9]+]]]
// CHECK-NEXT: plan.launch @[[MUL:k[0-9]+]] [@train_step.input0, @[[B]]] -> [@[[M:train_step.v[0-9]+]]]
// CHECK-NEXT: plan.launch @{{k[0-9]+}} [@[[M]]] -> [@[[RELU]]]
// CHECK-NEXT: plan.launch @[[MUL]] [@[[RELU]], @[[B]]] -> [@{{train_step.v[0-9]+}}]
// CHECK-NEXT: plan.gemm [@train_step.input0, @w2] -> [@{{train_step.v[0-9]+}}] {transpose_b}
// CHECK-NEXT: plan.launch @[[ADD:k[0-9]+]] [@s, @const0] -> [@s] in_place [0]
// CHECK-NEXT: plan.launch @{{k[0-9]+}} [@t, @const0] -> [@[[T2:train_step.v[0-9]+]]]
// CHECK-NEXT: plan.launch @[[ADD]] [@t, @[[T2]]] -> [@{{train_step.v[0-9]+}}]
// CHECK-NEXT: plan.copy [@[[T2]]] -> [@t]
// CHECK-NEXT: plan.launch @{{k[0-9]+}} [@[[VIEW]], @train_step.input1]
// CHECK: plan.kernel @[[BCAST]] ops ["nn.broadcast"] inputs 1 outputs 1 bytes [16, 32]
// CHECK: plan.kernel @[[MUL]] ops ["nn.mul"] inputs 2 outputs 1 bytes [32, 32, 32] elementwise
// CHECK: module @kernels {
// CHECK: func.func @[[BCAST]](%{{.*}}: memref<4xf32>, %{{.*}}: memref<2x4xf32>)
// CHECK: linalg.generic
// CHECK: func.func @[[MUL]](%{{.*}}: memref<8xf32>, %{{.*}}: memref<8xf32>, %{{.*}}: memref<8xf32>)
// CHECK-NOT: func.func @train_step
// CHECK-NOT: nn.
nn.parameter @w : tensor<4xf32> = ones
nn.parameter @w2 : tensor<3x4xf32> = zeros
nn.state @s : tensor<4xf32> = constant(0.5)
nn.state @t : tensor<4xf32> = zeros
func.func @train_step(%x: tensor<2x4xf32>, %y: tensor<2xi32>) -> tensor<f32> {
  %w = nn.load @w : tensor<4xf32>
  %b = nn.broadcast %w to %x dims [1] : tensor<4xf32>, tensor<2x4xf32>
  %m = nn.mul %x, %b : tensor<2x4xf32>
  %r = nn.relu %m : tensor<2x4xf32>
  %m2 = nn.mul %r, %b : tensor<2x4xf32>
  %w2 = nn.load @w2 : tensor<3x4xf32>
  %g = nn.linear %x, %w2 : tensor<2x4xf32>, tensor<3x4xf32>
  %c1 = nn.constant dense<2.0> : tensor<4xf32>
  %s = nn.load @s : tensor<4xf32>
  %s2 = nn.add %s, %c1 : tensor<4xf32>
  nn.assign @s, %s2 : tensor<4xf32>
  %c2 = nn.constant dense<2.0> : tensor<4xf32>
  %t = nn.load @t : tensor<4xf32>
  %t2 = nn.mul %t, %c2 : tensor<4xf32>
  %u = nn.add %t, %t2 : tensor<4xf32>
  nn.assign @t, %t2 : tensor<4xf32>
  %f = nn.reshape %r shape [8] : tensor<2x4xf32>
  %ff = nn.reshape %f shape [2, 4] : tensor<8xf32>
  %l = nn.softmax_cross_entropy %ff, %y label_smoothing 0.0 : tensor<2x4xf32>, tensor<2xi32>
  return %l : tensor<f32>
}

// -----

// Tests that ops the autodiff phase should have decomposed are refused.
func.func @train_step(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  // expected-error@+1 {{has no lowering to the plan}}
  %y = nn.dropout %x rate 0.5 seed 1 : tensor<2x4xf32>
  return %y : tensor<2x4xf32>
}

// -----

// Tests that a value loaded from a state and still read after an nn.assign
// overwrites that state (a model updating a state in @forward whose backward
// reads the old value) is a copy taken where it is loaded, not a view of the
// state's buffer; its views alias the copy.
// CHECK-LABEL: plan.buffer @snap : memref<4xf32> in state
// CHECK: plan.buffer @[[OLD:train_step.v[0-9]+]] : memref<4xf32> in arena{{$}}
// CHECK-NEXT: plan.buffer @[[VIEW:train_step.v[0-9]+]] : memref<2x2xf32> in arena alias @[[OLD]]
// CHECK: plan.program @train_step
// CHECK-NEXT: plan.copy [@snap] -> [@[[OLD]]]
// CHECK-NEXT: plan.copy [@train_step.input0] -> [@snap]
// CHECK-NEXT: plan.launch @{{k[0-9]+}} [@[[VIEW]]]
nn.state @snap : tensor<4xf32> = zeros
func.func @train_step(%x: tensor<4xf32>) -> tensor<2x2xf32> {
  %l = nn.load @snap : tensor<4xf32>
  %v = nn.reshape %l shape [2, 2] : tensor<4xf32>
  nn.assign @snap, %x : tensor<4xf32>
  %a = nn.neg %v : tensor<2x2xf32>
  return %a : tensor<2x2xf32>
}

// -----

// Tests a state assigned twice, as micro-batches update batch norm's running
// statistics: each update is computed straight into the state, the second
// reading what the first wrote (its load comes after the first assign). A
// state read between the op computing its new value and the assign is
// written there by a copy instead: @r's second update is computed while the
// old @r is still read.
// CHECK-LABEL: plan.buffer @m : memref<4xf32> in state
// CHECK: plan.program @train_step
// CHECK-NEXT: plan.launch @[[K:k[0-9]+]] [@m, @{{.*}}] -> [@m]
// CHECK-NEXT: plan.launch @[[K]] [@m, @{{.*}}] -> [@m]
// CHECK-NEXT: plan.launch @{{k[0-9]+}} [@r, @{{.*}}] -> [@[[NEW:train_step.v[0-9]+]]]
// CHECK-NEXT: plan.launch @{{k[0-9]+}} [@r] -> [@{{.*}}]
// CHECK-NEXT: plan.copy [@[[NEW]]] -> [@r]
// CHECK-NOT: plan.copy
nn.state @m : tensor<4xf32> = zeros
nn.state @r : tensor<4xf32> = zeros
func.func @train_step(%x: tensor<4xf32>) -> tensor<4xf32> {
  %m0 = nn.load @m : tensor<4xf32>
  %m1 = nn.add %m0, %x : tensor<4xf32>
  nn.assign @m, %m1 : tensor<4xf32>
  %m2 = nn.load @m : tensor<4xf32>
  %m3 = nn.add %m2, %x : tensor<4xf32>
  nn.assign @m, %m3 : tensor<4xf32>
  %r0 = nn.load @r : tensor<4xf32>
  %r1 = nn.add %r0, %x : tensor<4xf32>
  %e = nn.exp %r0 : tensor<4xf32>
  nn.assign @r, %r1 : tensor<4xf32>
  return %e : tensor<4xf32>
}

// -----

// Tests that a module without a step function is refused.
// expected-error@+1 {{nothing to lower: the module has no step function}}
module {
  nn.parameter @w : tensor<4xf32> = ones
}

// -----

// Tests that an integer maximum starts from the smallest value of its own
// width (an int64 minimum truncated to i32 would be 0: the maximum of
// all-negative values would come out 0), on both targets' variants.
// CHECK-LABEL: func.func @k0(%{{.*}}: memref<2x60000xi32>, %{{.*}}: memref<2xi32>)
// CHECK: scf.execute_region
// CHECK: iter_args(%{{.*}} = %c-2147483648_i32
// CHECK: graphc.target = "cpu"
// CHECK: gpu.launch
// CHECK: iter_args(%{{.*}} = %c-2147483648_i32
// CHECK: graphc.target = "cuda"
func.func @train_step(%x: tensor<2x60000xi32>) -> tensor<2xi32> {
  %r = nn.reduce_max %x dims [1] : tensor<2x60000xi32>
  return %r : tensor<2xi32>
}

// -----

// Tests that a kernel whose result is only measured (a broadcast's shape_of,
// a fusion's input it only broadcasts to) is not run: no command and no
// buffer for the transpose, and the kernels that measure it take no argument
// for it.
// CHECK-LABEL: plan.program @train_step
// CHECK-NEXT: plan.launch @[[B:k[0-9]+]] [@train_step.input1] -> [@{{train_step.v[0-9]+}}]
// CHECK-NEXT: plan.launch @[[F:k[0-9]+]] [@train_step.input1] -> [@{{train_step.v[0-9]+}}]
// CHECK-NEXT: }
// CHECK: plan.kernel @[[B]] ops ["nn.broadcast"] inputs 1 outputs 1 bytes [4, 24]
// CHECK: plan.kernel @[[F]] ops ["nn.broadcast", "nn.neg"] inputs 1 outputs 1
// CHECK-NOT: nn.transpose
func.func @train_step(%x: tensor<2x3xf32>, %s: tensor<f32>) -> (tensor<3x2xf32>, tensor<3x2xf32>) {
  %t = nn.transpose %x permutation [1, 0] : tensor<2x3xf32>
  %b = nn.broadcast %s to %t dims [] : tensor<f32>, tensor<3x2xf32>
  %n = nn.fusion %s, %t : tensor<f32>, tensor<3x2xf32> -> tensor<3x2xf32> {
  ^bb0(%a: tensor<f32>, %m: tensor<3x2xf32>):
    %c = nn.broadcast %a to %m dims [] : tensor<f32>, tensor<3x2xf32>
    %d = nn.neg %c : tensor<3x2xf32>
    nn.yield %d : tensor<3x2xf32>
  }
  return %b, %n : tensor<3x2xf32>, tensor<3x2xf32>
}
