// RUN: graphc-opt %s --graphc-plan-memory | FileCheck %s

// Tests that the memory planner itself writes in place only over an input of
// as many elements, not just as many bytes (a kernel with no groups).
// CHECK-LABEL: plan.program @p
// CHECK-NEXT: plan.launch @widen [@s] -> [@h]{{$}}
// CHECK-NEXT: plan.launch @same [@h] -> [@o] in_place [0]
plan.kernel @widen ops ["nn.broadcast", "nn.cast"] inputs 1 outputs 1 bytes [32, 32] elementwise
plan.kernel @same ops ["nn.relu"] inputs 1 outputs 1 bytes [32, 32] elementwise
plan.buffer @s : memref<8xf32> in arena
plan.buffer @h : memref<2x8xf16> in arena
plan.buffer @o : memref<2x8xf16> in arena
plan.program @p inputs [@s] outputs [@o] {
  plan.launch @widen [@s] -> [@h]
  plan.launch @same [@h] -> [@o]
}
