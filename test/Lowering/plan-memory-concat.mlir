// RUN: graphc-opt %s --graphc-plan-memory --split-input-file | FileCheck %s

// Tests that a concat whose operands are consecutive byte ranges of its result
// (every dim before the concat dim of extent 1) is made by computing each
// operand where the concat puts it: the operands become aliases of the result
// at their offsets (one through a reshape of it), the copy is gone, the
// result is live from its first operand's producer, and the operand's
// producer does not write over an input in place (it would move the operand
// off its range). Operands read after the concat still see their values.
// CHECK-LABEL: module attributes {graphc.memory_profile = {p = array<i64: 260, 4, 5, 3, 192, 1>}, graphc.placed_concats = 1 : i64, plan.arena_size = 320 : i64
// CHECK: plan.buffer @x : memref<1x16xf32> in arena at 192
// CHECK: plan.buffer @a : memref<1x16xf32> in arena at 0 alias @out + 0
// CHECK: plan.buffer @b : memref<16xf32> in arena at 64 alias @out + 64
// CHECK: plan.buffer @bview : memref<1x16xf32> in arena at 64 alias @b
// CHECK: plan.buffer @c : memref<1x16xf32> in arena at 128 alias @out + 128
// CHECK: plan.buffer @out : memref<3x16xf32> in arena at 0
// CHECK: plan.buffer @sum : memref<f32> in arena at 256
// CHECK: plan.buffer @last : memref<1x16xf32> in arena at 192
// CHECK: plan.program @p inputs [@x] outputs [@sum, @last] arena 320 {
// CHECK-NEXT: plan.launch @relu [@x] -> [@a]{{$}}
// CHECK-NEXT: plan.launch @relu16 [@x] -> [@b]{{$}}
// CHECK-NEXT: plan.launch @relu [@a] -> [@c]{{$}}
// CHECK-NEXT: plan.launch @total [@out] -> [@sum]{{$}}
// CHECK-NEXT: plan.launch @relu [@c] -> [@last]{{$}}
// CHECK-NEXT: }
plan.kernel @relu ops ["nn.relu"] inputs 1 outputs 1 bytes [64, 64] elementwise
plan.kernel @relu16 ops ["nn.relu"] inputs 1 outputs 1 bytes [64, 64] elementwise
plan.kernel @cat3 ops ["nn.concat"] inputs 3 outputs 1 bytes [64, 64, 64, 192]
plan.kernel @total ops ["nn.reduce_sum"] inputs 1 outputs 1 bytes [192, 4]
plan.buffer @x : memref<1x16xf32> in arena
plan.buffer @a : memref<1x16xf32> in arena
plan.buffer @b : memref<16xf32> in arena
plan.buffer @bview : memref<1x16xf32> in arena alias @b
plan.buffer @c : memref<1x16xf32> in arena
plan.buffer @out : memref<3x16xf32> in arena
plan.buffer @sum : memref<f32> in arena
plan.buffer @last : memref<1x16xf32> in arena
plan.program @p inputs [@x] outputs [@sum, @last] {
  plan.launch @relu [@x] -> [@a]
  plan.launch @relu16 [@x] -> [@b]
  plan.launch @relu [@a] -> [@c]
  plan.launch @cat3 [@a, @bview, @c] -> [@out]
  plan.launch @total [@out] -> [@sum]
  plan.launch @relu [@c] -> [@last]
}

// -----

// Tests the concats that stay copies: along a dim after one of extent 2 (the
// operands interleave in the result), an operand the caller writes (a
// program input), one written twice (in place by a later kernel), the same
// operand twice, and operands whose ranges would start off a 64-byte boundary.
// CHECK-LABEL: module attributes
// CHECK-NOT: graphc.placed_concats
// CHECK-NOT: alias @{{[a-z]+}} +
// CHECK: plan.launch @catInner [@a, @a2] -> [@inner]
// CHECK: plan.launch @cat2 [@x, @a] -> [@fromInput]
// CHECK: plan.launch @cat2 [@a, @a] -> [@twice]
// CHECK: plan.launch @cat2 [@w, @a] -> [@rewritten]
// CHECK: plan.launch @small [@s, @t] -> [@unaligned]
plan.kernel @relu ops ["nn.relu"] inputs 1 outputs 1 bytes [64, 64] elementwise
plan.kernel @relu8 ops ["nn.relu"] inputs 1 outputs 1 bytes [8, 8] elementwise
plan.kernel @add ops ["nn.add"] inputs 2 outputs 1 bytes [64, 64, 64] elementwise
plan.kernel @catInner ops ["nn.concat"] inputs 2 outputs 1 bytes [64, 64, 128]
plan.kernel @cat2 ops ["nn.concat"] inputs 2 outputs 1 bytes [64, 64, 128]
plan.kernel @small ops ["nn.concat"] inputs 2 outputs 1 bytes [8, 8, 16]
plan.kernel @total ops ["nn.reduce_sum"] inputs 1 outputs 1 bytes [128, 4]
plan.kernel @total16 ops ["nn.reduce_sum"] inputs 1 outputs 1 bytes [16, 4]
plan.buffer @x : memref<1x16xf32> in arena
plan.buffer @a : memref<2x8xf32> in arena
plan.buffer @a2 : memref<2x8xf32> in arena
plan.buffer @w : memref<1x16xf32> in arena
plan.buffer @y : memref<1x2xf32> in arena
plan.buffer @s : memref<1x2xf32> in arena
plan.buffer @t : memref<1x2xf32> in arena
plan.buffer @inner : memref<2x16xf32> in arena
plan.buffer @fromInput : memref<2x16xf32> in arena
plan.buffer @twice : memref<2x16xf32> in arena
plan.buffer @rewritten : memref<2x16xf32> in arena
plan.buffer @unaligned : memref<2x2xf32> in arena
plan.buffer @r0 : memref<f32> in arena
plan.buffer @r1 : memref<f32> in arena
plan.buffer @r2 : memref<f32> in arena
plan.buffer @r3 : memref<f32> in arena
plan.buffer @r4 : memref<f32> in arena
plan.program @p inputs [@x, @y] outputs [@r0, @r1, @r2, @r3, @r4] {
  plan.launch @relu [@x] -> [@a]
  plan.launch @relu [@x] -> [@a2]
  plan.launch @relu [@x] -> [@w]
  plan.launch @relu8 [@y] -> [@s]
  plan.launch @relu8 [@s] -> [@t]
  plan.launch @catInner [@a, @a2] -> [@inner]
  plan.launch @cat2 [@x, @a] -> [@fromInput]
  plan.launch @cat2 [@a, @a] -> [@twice]
  plan.launch @cat2 [@w, @a] -> [@rewritten]
  plan.launch @add [@w, @a] -> [@w] in_place [0]
  plan.launch @small [@s, @t] -> [@unaligned]
  plan.launch @total [@inner] -> [@r0]
  plan.launch @total [@fromInput] -> [@r1]
  plan.launch @total [@twice] -> [@r2]
  plan.launch @total [@rewritten] -> [@r3]
  plan.launch @total16 [@unaligned] -> [@r4]
}
