// RUN: graphc-opt %s --graphc-plan-memory | FileCheck %s

// Tests liveness-based placement: an elementwise kernel writes over an input
// that dies at it (declared in_place), values alive at the same time get
// disjoint offsets, a view keeps what it views alive and shares its offset,
// and state / constants are packed in their own regions. The memory profile
// (graphc compile --memory-report) gives the peak of live bytes and where.
// CHECK-LABEL: module attributes {graphc.memory_profile = {p = array<i64: 8192, 1, 4, 3, 0, 0>}, plan.arena_size = 8192 : i64, plan.constant_size = 64 : i64, plan.state_size = 4096 : i64, plan.tensor_bytes = 16388 : i64}
// CHECK: plan.buffer @in : memref<1024xf32> in arena at 0
// CHECK: plan.buffer @a : memref<1024xf32> in arena at 0
// CHECK: plan.buffer @b : memref<1024xf32> in arena at 0
// CHECK: plan.buffer @c : memref<1024xf32> in arena at 4096
// CHECK: plan.buffer @bview : memref<32x32xf32> in arena at 0 alias @b
// CHECK: plan.buffer @out : memref<f32> in arena at 4096
// CHECK: plan.buffer @w : memref<1024xf32> in state at 0
// CHECK: plan.buffer @k : memref<f32> in constant at 0
// CHECK: plan.program @p inputs [@in] outputs [@out] arena 8192 {
// CHECK-NEXT: plan.launch @relu [@in] -> [@a] in_place [0]
// CHECK-NEXT: plan.launch @relu [@w] -> [@c]{{$}}
// CHECK-NEXT: plan.launch @add [@a, @c] -> [@b] in_place [0]
// CHECK-NEXT: plan.launch @sum [@bview, @k] -> [@out]{{$}}
plan.kernel @relu ops ["nn.relu"] inputs 1 outputs 1 bytes [4096, 4096] elementwise
plan.kernel @add ops ["nn.add"] inputs 2 outputs 1 bytes [4096, 4096, 4096] elementwise
plan.kernel @sum ops ["nn.reduce_sum"] inputs 2 outputs 1 bytes [4096, 4, 4]
plan.buffer @in : memref<1024xf32> in arena
plan.buffer @a : memref<1024xf32> in arena
plan.buffer @b : memref<1024xf32> in arena
plan.buffer @c : memref<1024xf32> in arena
plan.buffer @bview : memref<32x32xf32> in arena alias @b
plan.buffer @out : memref<f32> in arena
plan.buffer @w : memref<1024xf32> in state
plan.buffer @k : memref<f32> in constant
plan.program @p inputs [@in] outputs [@out] {
  plan.launch @relu [@in] -> [@a]
  plan.launch @relu [@w] -> [@c]
  plan.launch @add [@a, @c] -> [@b]
  plan.launch @sum [@bview, @k] -> [@out]
}
