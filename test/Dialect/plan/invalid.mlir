// RUN: graphc-opt %s -split-input-file -verify-diagnostics

// Tests that a command operand must name a plan.buffer.
plan.kernel @k0 ops ["nn.relu"] inputs 1 outputs 1 bytes [16, 16] elementwise
plan.buffer @a : memref<4xf32> in arena
plan.program @p inputs [] outputs [] {
  // expected-error@+1 {{operand @nope is not a plan.buffer}}
  plan.launch @k0 [@nope] -> [@a]
}

// -----

// Tests that a launch matches its kernel's arity.
plan.kernel @k0 ops ["nn.add"] inputs 2 outputs 1 bytes [16, 16, 16] elementwise
plan.buffer @a : memref<4xf32> in arena
plan.buffer @b : memref<4xf32> in arena
plan.program @p inputs [] outputs [] {
  // expected-error@+1 {{kernel @k0 takes 2 inputs and 1 outputs}}
  plan.launch @k0 [@a] -> [@b]
}

// -----

// Tests that a launch passes buffers of exactly the sizes the kernel was generated for.
plan.kernel @k0 ops ["nn.relu"] inputs 1 outputs 1 bytes [16, 16] elementwise
plan.buffer @a : memref<4xf32> in arena
plan.buffer @b : memref<8xf32> in arena
plan.program @p inputs [] outputs [] {
  // expected-error@+1 {{argument 1 (@b) has 32 bytes, kernel @k0 expects 16}}
  plan.launch @k0 [@a] -> [@b]
}

// -----

// Tests that nothing writes a constant buffer.
plan.buffer @a : memref<4xf32> in arena
plan.buffer @c : memref<4xf32> in constant
plan.program @p inputs [] outputs [] {
  // expected-error@+1 {{writes constant buffer @c}}
  plan.copy [@a] -> [@c]
}

// -----

// Tests that an in_place entry names an input.
plan.kernel @k0 ops ["nn.relu"] inputs 1 outputs 1 bytes [16, 16] elementwise
plan.buffer @a : memref<4xf32> in arena
plan.program @p inputs [] outputs [] {
  // expected-error@+1 {{in_place entry 0 names no input}}
  plan.launch @k0 [@a] -> [@a] in_place [3]
}

// -----

// Tests that only elementwise kernels run in place.
plan.kernel @k0 ops ["nn.reduce_sum"] inputs 1 outputs 1 bytes [16, 16]
plan.buffer @a : memref<4xf32> in arena
plan.program @p inputs [] outputs [] {
  // expected-error@+1 {{runs in place but kernel @k0 is not elementwise}}
  plan.launch @k0 [@a] -> [@a] in_place [0]
}

// -----

// Tests that library calls never run in place.
plan.buffer @a : memref<4x4xf32> in arena
plan.buffer @b : memref<4x4xf32> in arena
plan.program @p inputs [] outputs [] {
  // expected-error@+1 {{library calls cannot run in place}}
  plan.gemm [@a, @b] -> [@a] in_place [0]
}

// -----

// Tests that a library call has its input count.
plan.buffer @a : memref<4x4xf32> in arena
plan.program @p inputs [] outputs [] {
  // expected-error@+1 {{takes 2 to 3 inputs, got 1}}
  plan.gemm [@a] -> [@a]
}

// -----

// Tests that a copy joins buffers of one size.
plan.buffer @a : memref<4xf32> in arena
plan.buffer @b : memref<5xf32> in arena
plan.program @p inputs [] outputs [] {
  // expected-error@+1 {{copies between buffers of different sizes}}
  plan.copy [@a] -> [@b]
}

// -----

// Tests that buffers are contiguous.
// expected-error@+1 {{needs a contiguous row-major (identity layout) memref}}
plan.buffer @a : memref<4x4xf32, strided<[1, 4]>> in arena

// -----

// Tests that a buffer's element type can be stored.
// expected-error@+1 {{element type 'f64' cannot be stored in a plan}}
plan.buffer @a : memref<4xf64> in arena

// -----

// Tests that a kernel declares one byte size per argument.
// expected-error@+1 {{needs one byte size per argument}}
plan.kernel @k0 ops ["nn.add"] inputs 2 outputs 1 bytes [16, 16] elementwise

// -----

// Tests that every binary says how to launch each of its symbols.
// expected-error@+1 {{'plan.binary' op needs one launch list per symbol}}
plan.binary cpu_x86_64 elf_shared_object cpu "x86-64-v3" symbols ["k0"] data "\7FELF"

// -----

// Tests that a CPU launch is a 1-D loop, not a CUDA grid.
// expected-error@+1 {{CPU launch 'k0_l0' must have a 1-D grid and a 1x1x1 block}}
plan.binary cpu_x86_64 elf_shared_object cpu "x86-64-v3" symbols ["k0"] data "\7FELF" launches [[{entry = "k0_l0", grid = array<i32: 4, 1, 1>, block = array<i32: 256, 1, 1>, args = array<i32: 0>}]]

// -----

// Tests that a kernel of independent parts runs in place only within a part.
plan.kernel @k0 ops ["nn.sgd", "nn.sgd"] inputs 5 outputs 2 bytes [16, 16, 4, 16, 16, 16, 16] elementwise groups [0, 0, -1, 1, 1, 0, 1]
plan.buffer @p : memref<4xf32> in state
plan.buffer @g : memref<4xf32> in arena
plan.buffer @lr : memref<f32> in arena
plan.buffer @q : memref<4xf32> in state
plan.buffer @h : memref<4xf32> in arena
plan.buffer @o : memref<4xf32> in arena
plan.program @prog inputs [] outputs [] {
  // expected-error@+1 {{writes output 1 over input 1, which kernel @k0 does not allow (another group)}}
  plan.launch @k0 [@p, @g, @lr, @q, @h] -> [@o, @g] in_place [-1, 1]
}

// -----

// Tests that no other group reads a view of the memory an output overwrites.
plan.kernel @k0 ops ["nn.sgd", "nn.sgd"] inputs 5 outputs 2 bytes [16, 16, 4, 16, 16, 16, 16] elementwise groups [0, 0, -1, 1, 1, 0, 1]
plan.buffer @p : memref<4xf32> in state
plan.buffer @g : memref<4xf32> in arena
plan.buffer @lr : memref<f32> in arena
plan.buffer @q : memref<2x2xf32> in state
plan.buffer @gv : memref<2x2xf32> in arena alias @g
plan.buffer @o : memref<2x2xf32> in arena
plan.program @prog inputs [] outputs [] {
  // expected-error@+1 {{writes output 0 over input 4, which kernel @k0 does not allow (another group)}}
  plan.launch @k0 [@p, @g, @lr, @q, @gv] -> [@g, @o] in_place [1, -1]
}

// -----

// Tests that every view of the overwritten memory is read element for element.
plan.kernel @k0 ops ["nn.add"] inputs 2 outputs 1 bytes [32, 32, 32] elementwise
plan.buffer @a : memref<8xf32> in arena
plan.buffer @v : memref<16xf16> in arena alias @a
plan.program @prog inputs [] outputs [] {
  // expected-error@+1 {{writes output 0 over input 1, a view of another element count}}
  plan.launch @k0 [@a, @v] -> [@a] in_place [0]
}

// -----

// Tests that an output runs in place only over an input of as many elements
// (here the same 32 bytes: 8 x f32 read, 16 x f16 written).
plan.kernel @k0 ops ["nn.broadcast", "nn.cast"] inputs 1 outputs 1 bytes [32, 32] elementwise
plan.buffer @s : memref<8xf32> in arena
plan.buffer @h : memref<2x8xf16> in arena
plan.program @prog inputs [] outputs [] {
  // expected-error@+1 {{in_place output 0 and input 0 differ in element count}}
  plan.launch @k0 [@s] -> [@h] in_place [0]
}

// -----

// Tests that every output of a grouped kernel is in a group.
// expected-error@+1 {{puts an output in no group}}
plan.kernel @k0 ops ["nn.sgd"] inputs 2 outputs 1 bytes [16, 16, 16] elementwise groups [0, -1, -1]

// -----

// Tests that an attention command has one bias input per bias stride.
plan.buffer @q : memref<6x7x4xf32> in arena
plan.buffer @b : memref<3x7x7xf32> in arena
plan.buffer @o : memref<6x7x4xf32> in arena
plan.buffer @l : memref<6x7xf32> in arena
plan.program @prog inputs [] outputs [] {
  // expected-error@+1 {{has 4 inputs for 0 bias strides; expects 3}}
  plan.attention [@q, @q, @q, @b] -> [@o, @l]
}

// -----

// Tests that an attention backward writes one gradient per bias.
plan.buffer @q : memref<6x7x4xf32> in arena
plan.buffer @b : memref<3x7x7xf32> in arena
plan.buffer @l : memref<6x7xf32> in arena
plan.program @prog inputs [] outputs [] {
  // expected-error@+1 {{has exactly 4 outputs}}
  plan.attention_backward [@q, @q, @q, @q, @l, @q, @b] -> [@q, @q, @q] {bias_strides = array<i64: 1>}
}

// -----

// Tests that a sparse start sends at most what its sets hold.
plan.buffer @v : memref<2xf32> in arena
plan.buffer @i : memref<2xi32> in arena
plan.buffer @d : memref<6xf32> in arena
plan.program @p inputs [] outputs [] {
  // expected-error@+1 {{sends 3 entries; a sparse start sends 1 to 2, what its sets hold}}
  plan.allreduce_start sparse mean bucket 0 sends 3 [@v, @i, @d] -> [@v, @i, @d] in_place [0, 1, 2]
  plan.allreduce_wait sparse bucket 0 [@v, @i, @d] -> [@v, @i, @d] in_place [0, 1, 2]
}

// -----

// Tests that an alias offset needs an alias.
// expected-error@+1 {{alias offset needs an alias and must be non-negative}}
plan.buffer @a : memref<8xf32> in arena + 64
