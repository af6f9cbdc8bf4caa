// RUN: graphc-opt %s --graphc-plan-contract --split-input-file --verify-diagnostics

// Tests that memory must be planned before the contract holds.
// expected-error@+1 {{plan contract: memory was not planned (missing plan.arena_size)}}
module {
  plan.buffer @a : memref<4xf32> in arena
}

// -----

// Tests that kernel bodies must have been compiled.
module attributes {plan.arena_size = 64 : i64, plan.state_size = 0 : i64, plan.constant_size = 0 : i64} {
  plan.buffer @a : memref<4xf32> in arena at 0
  plan.program @p inputs [] outputs [] {
  }
  // expected-error@+1 {{plan contract: kernel bodies in module @kernels were not compiled}}
  module @kernels {
  }
}

// -----

// Tests that an op the runtime cannot execute is refused.
module attributes {plan.arena_size = 64 : i64, plan.state_size = 0 : i64, plan.constant_size = 0 : i64} {
  plan.program @p inputs [] outputs [] {
  }
  // expected-error@+1 {{plan contract: 'func.func' cannot be executed by the runtime}}
  func.func @forward() {
    return
  }
}

// -----

// Tests that every buffer is placed inside its region.
module attributes {plan.arena_size = 64 : i64, plan.state_size = 0 : i64, plan.constant_size = 0 : i64} {
  // expected-error@+1 {{plan contract: buffer @a ends past its region}}
  plan.buffer @a : memref<32xf32> in arena at 0
  // expected-error@+1 {{plan contract: buffer @b has no offset}}
  plan.buffer @b : memref<4xf32> in arena
  plan.program @p inputs [] outputs [] {
  }
}

// -----

// Tests that every kernel is in the binary.
module attributes {plan.arena_size = 64 : i64, plan.state_size = 0 : i64, plan.constant_size = 0 : i64} {
  plan.binary cpu_x86_64 elf_shared_object cpu "x86-64-v3" symbols ["k0"] data "\7FELF" launches [[{entry = "k0_l0", grid = array<i32: 4, 1, 1>, block = array<i32: 1, 1, 1>, args = array<i32: 0, 1>}]]
  plan.kernel @k0 ops ["nn.relu"] inputs 1 outputs 1 bytes [16, 16] elementwise
  // expected-error@+1 {{plan contract: kernel @k1 is missing from the cpu_x86_64 binary}}
  plan.kernel @k1 ops ["nn.exp"] inputs 1 outputs 1 bytes [16, 16] elementwise
  plan.program @p inputs [] outputs [] {
  }
}

// -----

// Tests that a plan needs a program.
// expected-error@+1 {{plan contract: the plan has no program}}
module attributes {plan.arena_size = 64 : i64, plan.state_size = 0 : i64, plan.constant_size = 0 : i64} {
  plan.buffer @a : memref<4xf32> in arena at 0
}

// -----

// Tests that an alias lies where it says in what it aliases: at its offset
// (plus the one it gives), and within it.
module attributes {plan.arena_size = 256 : i64, plan.state_size = 0 : i64, plan.constant_size = 0 : i64} {
  plan.buffer @a : memref<32xf32> in arena at 0
  plan.buffer @part : memref<16xf32> in arena at 64 alias @a + 64
  // expected-error@+1 {{plan contract: alias @off does not match the buffer it views}}
  plan.buffer @off : memref<16xf32> in arena at 0 alias @a + 64
  // expected-error@+1 {{plan contract: alias @past does not match the buffer it views}}
  plan.buffer @past : memref<16xf32> in arena at 128 alias @a + 128
  plan.program @p inputs [] outputs [] {
  }
}
