// RUN: graphc-opt %s -split-input-file -verify-diagnostics

// Tests that an in-flight tensor cannot be read by anything but its wait.
func.func @read_in_flight(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'dist.allreduce_start' op in-flight result 0 must have exactly one user, the dist.allreduce_wait}}
  %f = dist.allreduce_start mean %a bucket 0 : tensor<4xf32>
  %r = dist.allreduce_wait %f : tensor<4xf32>
  %s = arith.addf %f, %r : tensor<4xf32>
  return %s : tensor<4xf32>
}

// -----

// Tests that a collective left in flight is refused.
func.func @never_waited(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'dist.allreduce_start' op in-flight result 0 must be operand 0 of a dist.allreduce_wait}}
  %f = dist.allreduce_start mean %a bucket 0 : tensor<4xf32>
  return %f : tensor<4xf32>
}

// -----

// Tests that a wait must take every tensor of its start.
func.func @half_waited(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'dist.allreduce_start' op in-flight result 1 must have exactly one user, the dist.allreduce_wait}}
  %f:2 = dist.allreduce_start mean %a, %b bucket 0 : tensor<4xf32>, tensor<4xf32>
  %r = dist.allreduce_wait %f#0 : tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

// Tests that the tensors come back in the order they went.
func.func @reordered(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'dist.allreduce_start' op in-flight result 0 must be operand 0 of a dist.allreduce_wait}}
  %f:2 = dist.allreduce_start mean %a, %b bucket 0 : tensor<4xf32>, tensor<4xf32>
  %r:2 = dist.allreduce_wait %f#1, %f#0 : tensor<4xf32>, tensor<4xf32>
  return %r#0 : tensor<4xf32>
}

// -----

// Tests that a wait takes in-flight tensors only.
func.func @wait_plain(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'dist.allreduce_wait' op operands must be the results of a dist.allreduce_start}}
  %r = dist.allreduce_wait %a : tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

// Tests that one tensor cannot be reduced twice in a bucket.
func.func @twice(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'dist.allreduce_start' op reduces one tensor twice}}
  %f:2 = dist.allreduce_start mean %a, %a bucket 0 : tensor<4xf32>, tensor<4xf32>
  %r:2 = dist.allreduce_wait %f#0, %f#1 : tensor<4xf32>, tensor<4xf32>
  return %r#0 : tensor<4xf32>
}

// -----

// Tests that only f16 compresses on the wire.
func.func @wire(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'dist.allreduce_start' op wire type must be f16 (or absent: each tensor's own), got 'bf16'}}
  %f = dist.allreduce_start mean %a bucket 0 wire bf16 : tensor<4xf32>
  %r = dist.allreduce_wait %f : tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

// Tests that integer tensors are not reduced.
func.func @integers(%a: tensor<4xi32>) -> tensor<4xi32> {
  // expected-error@+1 {{'dist.allreduce_start' op reduces 'tensor<4xi32>'; only sparse collectives take i32}}
  %f = dist.allreduce_start mean %a bucket 0 : tensor<4xi32>
  %r = dist.allreduce_wait %f : tensor<4xi32>
  return %r : tensor<4xi32>
}

// -----

// Tests that a bucket number is not negative.
func.func @bucket(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'dist.allreduce_start' op bucket must be >= 0, got -1}}
  %f = dist.allreduce_start mean %a bucket -1 : tensor<4xf32>
  %r = dist.allreduce_wait %f : tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

// Tests that a sparse collective takes threes: values, indices, dense.
func.func @sparse_pairs(%v: tensor<4xf32>, %i: tensor<4xi32>) -> tensor<4xf32> {
  // expected-error@+1 {{'dist.allreduce_start' op sparse: takes threes of values, indices and a dense tensor, and no wire type}}
  %f:2 = dist.allreduce_start sparse mean %v, %i bucket 0 : tensor<4xf32>, tensor<4xi32>
  %r:2 = dist.allreduce_wait %f#0, %f#1 : tensor<4xf32>, tensor<4xi32>
  return %r#0 : tensor<4xf32>
}

// -----

// Tests that a sparse set has no more values than its dense tensor.
func.func @sparse_more(%v: tensor<8xf32>, %i: tensor<8xi32>, %d: tensor<2x3xf32>) -> tensor<2x3xf32> {
  // expected-error@+1 {{'dist.allreduce_start' op sparse: set 0 must be values tensor<Kxf32>, indices tensor<Kxi32> and a dense f32 tensor of N >= K elements (N < 2^31)}}
  %f:3 = dist.allreduce_start sparse mean %v, %i, %d bucket 0 : tensor<8xf32>, tensor<8xi32>, tensor<2x3xf32>
  %r:3 = dist.allreduce_wait %f#0, %f#1, %f#2 : tensor<8xf32>, tensor<8xi32>, tensor<2x3xf32>
  return %r#2 : tensor<2x3xf32>
}

// -----

// Tests that a sparse set's indices are i32.
func.func @sparse_float_indices(%v: tensor<2xf32>, %i: tensor<2xf32>, %d: tensor<6xf32>) -> tensor<6xf32> {
  // expected-error@+1 {{'dist.allreduce_start' op sparse: set 0 must be values}}
  %f:3 = dist.allreduce_start sparse sum %v, %i, %d bucket 0 : tensor<2xf32>, tensor<2xf32>, tensor<6xf32>
  %r:3 = dist.allreduce_wait %f#0, %f#1, %f#2 : tensor<2xf32>, tensor<2xf32>, tensor<6xf32>
  return %r#2 : tensor<6xf32>
}

// -----

// Tests that a sparse collective sends at most what its sets hold.
func.func @sparse_sends_more(%v: tensor<2xf32>, %i: tensor<2xi32>, %d: tensor<6xf32>) -> tensor<6xf32> {
  // expected-error@+1 {{'dist.allreduce_start' op sent_entries 3 must be in [1, 2], the entries its sets can hold}}
  %f:3 = dist.allreduce_start sparse sum %v, %i, %d bucket 0 {sent_entries = 3 : i64} : tensor<2xf32>, tensor<2xi32>, tensor<6xf32>
  %r:3 = dist.allreduce_wait %f#0, %f#1, %f#2 : tensor<2xf32>, tensor<2xi32>, tensor<6xf32>
  return %r#2 : tensor<6xf32>
}

// -----

// Tests that only a sparse collective says what it sends.
func.func @dense_sends(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'dist.allreduce_start' op sent_entries is for sparse collectives only}}
  %f = dist.allreduce_start mean %a bucket 0 {sent_entries = 1 : i64} : tensor<4xf32>
  %r = dist.allreduce_wait %f : tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

// Tests that a sparse collective sends at least one entry.
func.func @sparse_sends_negative(%v: tensor<2xf32>, %i: tensor<2xi32>, %d: tensor<6xf32>) -> tensor<6xf32> {
  // expected-error@+1 {{'dist.allreduce_start' op sent_entries -1 must be in [1, 2], the entries its sets can hold}}
  %f:3 = dist.allreduce_start sparse sum %v, %i, %d bucket 0 {sent_entries = -1 : i64} : tensor<2xf32>, tensor<2xi32>, tensor<6xf32>
  %r:3 = dist.allreduce_wait %f#0, %f#1, %f#2 : tensor<2xf32>, tensor<2xi32>, tensor<6xf32>
  return %r#2 : tensor<6xf32>
}
