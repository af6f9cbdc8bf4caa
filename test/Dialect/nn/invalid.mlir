// RUN: graphc-opt %s -split-input-file -verify-diagnostics

// One split per verifier rule of the nn dialect, in NNOps.td order.

// Tests that a constant initializer needs its value.
// expected-error@+1 {{initializer 'constant' needs a value}}
nn.parameter @p : tensor<4xf32> = constant

// -----

// Tests that normal needs its standard deviation.
// expected-error@+1 {{initializer 'normal' needs a value}}
nn.parameter @p : tensor<4xf32> = normal

// -----

// Tests that zeros takes no value.
// expected-error@+1 {{initializer 'zeros' takes no value}}
nn.parameter @p : tensor<4xf32> = zeros(1.0)

// -----

// Tests that a normal or uniform scale must be positive.
// expected-error@+1 {{initializer 'uniform' needs a positive scale, got -1}}
nn.parameter @p : tensor<4xf32> = uniform(-1.0)

// -----

// Tests that fan-based initializers need rank >= 2.
// expected-error@+1 {{initializer 'kaiming_normal' needs a tensor of rank >= 2 to compute fans, got rank 1}}
nn.parameter @p : tensor<4xf32> = kaiming_normal

// -----

// Tests that parameters must be float.
// expected-error@+1 {{parameters are trainable and must be float}}
nn.parameter @p : tensor<4xi32> = zeros

// -----

// Tests that state must be float, i32 or i64.
// expected-error@+1 {{state must be float, i32 or i64}}
nn.state @s : tensor<4xi8> = zeros

// -----

// Tests that variables have static shapes.
// expected-error@+1 {{type attribute of statically shaped tensor}}
nn.parameter @p : tensor<?x4xf32> = zeros

// -----

// Tests that variables are not empty.
// expected-error@+1 {{declares an empty tensor}}
nn.state @s : tensor<0x4xf32> = zeros

// -----

// Tests that variables stay far from overflowing int64 sizes.
// expected-error@+1 {{declares more than 2^40 elements: 'tensor<1048576x1048576x2xf32>'}}
nn.parameter @p : tensor<1048576x1048576x2xf32> = zeros

// -----

// Tests that variables are declared at module level.
func.func @f() {
  // expected-error@+1 {{expects parent op 'builtin.module'}}
  nn.parameter @p : tensor<4xf32> = zeros
  return
}

// -----

// Tests that a load names a declared variable.
func.func @f() -> tensor<4xf32> {
  // expected-error@+1 {{'missing' does not name an nn.parameter or nn.state}}
  %0 = nn.load @missing : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// Tests that a load names a variable, not another symbol.
func.func @g() { return }
func.func @f() -> tensor<4xf32> {
  // expected-error@+1 {{'g' does not name an nn.parameter or nn.state}}
  %0 = nn.load @g : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// Tests that a load has the declared type.
nn.parameter @p : tensor<4xf32> = zeros
func.func @f() -> tensor<5xf32> {
  // expected-error@+1 {{type 'tensor<5xf32>' does not match the declared type 'tensor<4xf32>' of @p}}
  %0 = nn.load @p : tensor<5xf32>
  return %0 : tensor<5xf32>
}

// -----

// Tests that float-only elementwise ops reject integers.
func.func @f(%x: tensor<4xi32>) -> tensor<4xi32> {
  // expected-error@+1 {{must be ranked tensor of 16-bit float or bfloat16 type or 32-bit float or 64-bit float values}}
  %0 = nn.exp %x : tensor<4xi32>
  return %0 : tensor<4xi32>
}

// -----

// Tests that binary operands have one type.
func.func @f(%a: tensor<4xf32>, %b: tensor<5xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{failed to verify that all of {lhs, rhs, result} have same type}}
  %0 = "nn.add"(%a, %b) : (tensor<4xf32>, tensor<5xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// Tests that select's condition is i1.
func.func @f(%c: tensor<4xf32>, %a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{must be ranked tensor of 1-bit signless integer values}}
  %0 = nn.select %c, %a, %a : tensor<4xf32>, tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// Tests that select's condition has the values' shape.
func.func @f(%c: tensor<3xi1>, %a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{failed to verify that all of {condition, result} have same shape}}
  %0 = nn.select %c, %a, %a : tensor<3xi1>, tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// Tests that comparison operands have one type.
func.func @f(%a: tensor<4xf32>, %b: tensor<4xf16>) -> tensor<4xi1> {
  // expected-error@+1 {{failed to verify that all of {lhs, rhs} have same type}}
  %0 = "nn.cmp"(%a, %b) {predicate = 2 : i32} : (tensor<4xf32>, tensor<4xf16>) -> tensor<4xi1>
  return %0 : tensor<4xi1>
}

// -----

// Tests that casts go to a supported element type.
func.func @f(%x: tensor<4xf32>) -> tensor<4xi8> {
  // expected-error@+1 {{cannot cast to 'i8'; expects a float, i1, i32 or i64 element type}}
  %0 = nn.cast %x : tensor<4xf32> to i8
  return %0 : tensor<4xi8>
}

// -----

// Tests that broadcast has one dims entry per operand dimension.
func.func @f(%v: tensor<8xf32>, %x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  // expected-error@+1 {{expects one entry in 'dims' per operand dimension (1), got 2}}
  %0 = nn.broadcast %v to %x dims [0, 1] : tensor<8xf32>, tensor<2x8xf32>
  return %0 : tensor<2x8xf32>
}

// -----

// Tests that broadcast dims are in range.
func.func @f(%v: tensor<8xf32>, %x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  // expected-error@+1 {{'dims' entry 2 is out of range for a result of rank 2}}
  %0 = nn.broadcast %v to %x dims [2] : tensor<8xf32>, tensor<2x8xf32>
  return %0 : tensor<2x8xf32>
}

// -----

// Tests that broadcast dims strictly increase.
func.func @f(%v: tensor<2x8xf32>, %x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  // expected-error@+1 {{'dims' must be strictly increasing}}
  %0 = nn.broadcast %v to %x dims [1, 0] : tensor<2x8xf32>, tensor<2x8xf32>
  return %0 : tensor<2x8xf32>
}

// -----

// Tests that a broadcast dimension is 1 or equal to the result's.
func.func @f(%v: tensor<3xf32>, %x: tensor<?x64x7x7xf32>) -> tensor<?x64x7x7xf32> {
  // expected-error@+1 {{operand dimension 0 (3) must be 1 or equal result dimension 1 (64)}}
  %0 = nn.broadcast %v to %x dims [1] : tensor<3xf32>, tensor<?x64x7x7xf32>
  return %0 : tensor<?x64x7x7xf32>
}

// -----

// Tests that a reduction names at least one dimension.
func.func @f(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  // expected-error@+1 {{expects at least one dimension to reduce}}
  %0 = nn.reduce_sum %x dims [] : tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

// Tests that reduction dimensions are in range.
func.func @f(%x: tensor<2x3xf32>) -> tensor<2xf32> {
  // expected-error@+1 {{reduction dimension 2 is out of range for rank 2}}
  %0 = nn.reduce_mean %x dims [2] : tensor<2x3xf32>
  return %0 : tensor<2xf32>
}

// -----

// Tests that reduction dimensions strictly increase.
func.func @f(%x: tensor<2x3xf32>) -> tensor<f32> {
  // expected-error@+1 {{reduction dimensions must be strictly increasing}}
  %0 = nn.reduce_max %x dims [1, 1] : tensor<2x3xf32>
  return %0 : tensor<f32>
}

// -----

// Tests that conv2d takes an NCHW input.
func.func @f(%x: tensor<4x16x16xf32>, %w: tensor<8x4x3x3xf32>) {
  // expected-error@+1 {{expects an NCHW input of rank 4, got rank 3}}
  %0 = nn.conv2d %x, %w : tensor<4x16x16xf32>, tensor<8x4x3x3xf32>
  return
}

// -----

// Tests that conv2d takes an OIHW filter.
func.func @f(%x: tensor<1x4x16x16xf32>, %w: tensor<8x4x3xf32>) {
  // expected-error@+1 {{expects an OIHW filter of rank 4, got rank 3}}
  %0 = nn.conv2d %x, %w : tensor<1x4x16x16xf32>, tensor<8x4x3xf32>
  return
}

// -----

// Tests that conv2d input and filter share an element type.
func.func @f(%x: tensor<1x4x16x16xf16>, %w: tensor<8x4x3x3xf32>) {
  // expected-error@+1 {{input element type 'f16' differs from filter element type 'f32'}}
  %0 = nn.conv2d %x, %w : tensor<1x4x16x16xf16>, tensor<8x4x3x3xf32>
  return
}

// -----

// Tests that conv2d strides have two entries.
func.func @f(%x: tensor<1x4x16x16xf32>, %w: tensor<8x4x3x3xf32>) {
  // expected-error@+1 {{expects 'strides' to have 2 entries, got 1}}
  %0 = nn.conv2d %x, %w strides [2] : tensor<1x4x16x16xf32>, tensor<8x4x3x3xf32>
  return
}

// -----

// Tests that conv2d strides are positive.
func.func @f(%x: tensor<1x4x16x16xf32>, %w: tensor<8x4x3x3xf32>) {
  // expected-error@+1 {{expects every 'strides' entry to be >= 1, got 0}}
  %0 = nn.conv2d %x, %w strides [1, 0] : tensor<1x4x16x16xf32>, tensor<8x4x3x3xf32>
  return
}

// -----

// Tests that conv2d padding has four entries.
func.func @f(%x: tensor<1x4x16x16xf32>, %w: tensor<8x4x3x3xf32>) {
  // expected-error@+1 {{expects 'padding' to have 4 entries, got 2}}
  %0 = nn.conv2d %x, %w padding [1, 1] : tensor<1x4x16x16xf32>, tensor<8x4x3x3xf32>
  return
}

// -----

// Tests that conv2d padding is not negative.
func.func @f(%x: tensor<1x4x16x16xf32>, %w: tensor<8x4x3x3xf32>) {
  // expected-error@+1 {{expects every 'padding' entry to be >= 0, got -1}}
  %0 = nn.conv2d %x, %w padding [1, 1, -1, 1] : tensor<1x4x16x16xf32>, tensor<8x4x3x3xf32>
  return
}

// -----

// Tests that conv2d dilations are positive.
func.func @f(%x: tensor<1x4x16x16xf32>, %w: tensor<8x4x3x3xf32>) {
  // expected-error@+1 {{expects every 'dilations' entry to be >= 1, got 0}}
  %0 = nn.conv2d %x, %w dilations [0, 1] : tensor<1x4x16x16xf32>, tensor<8x4x3x3xf32>
  return
}

// -----

// Tests that conv2d groups are positive.
func.func @f(%x: tensor<1x4x16x16xf32>, %w: tensor<8x4x3x3xf32>) {
  // expected-error@+1 {{expects 'groups' >= 1, got 0}}
  %0 = nn.conv2d %x, %w groups 0 : tensor<1x4x16x16xf32>, tensor<8x4x3x3xf32>
  return
}

// -----

// Tests that an OHWI filter needs channels-last activations.
func.func @f(%x: tensor<1x4x16x16xf32>, %w: tensor<8x3x3x4xf32>) {
  // expected-error@+1 {{an OHWI filter ('filter_ohwi') needs channels_last activations}}
  %0 = nn.conv2d %x, %w filter_ohwi : tensor<1x4x16x16xf32>, tensor<8x3x3x4xf32>
  return
}

// -----

// Tests that an OHWI filter's channels (its last dim) must match the input's.
func.func @f(%x: tensor<1x16x16x4xf32>, %w: tensor<8x4x3x3xf32>) {
  // expected-error@+1 {{filter expects 3 input channels per group but the input has 4 channels in 1 group(s)}}
  %0 = nn.conv2d %x, %w channels_last filter_ohwi : tensor<1x16x16x4xf32>, tensor<8x4x3x3xf32>
  return
}

// -----

// Tests that conv2d groups divide the output channels.
func.func @f(%x: tensor<1x6x16x16xf32>, %w: tensor<8x2x3x3xf32>) {
  // expected-error@+1 {{output channels (8) must be divisible by groups (3)}}
  %0 = nn.conv2d %x, %w groups 3 : tensor<1x6x16x16xf32>, tensor<8x2x3x3xf32>
  return
}

// -----

// Tests that conv2d groups divide the input channels.
func.func @f(%x: tensor<1x5x16x16xf32>, %w: tensor<8x2x3x3xf32>) {
  // expected-error@+1 {{input channels (5) must be divisible by groups (2)}}
  %0 = nn.conv2d %x, %w groups 2 : tensor<1x5x16x16xf32>, tensor<8x2x3x3xf32>
  return
}

// -----

// Tests that the conv2d filter matches the input channels per group.
func.func @f(%x: tensor<1x3x16x16xf32>, %w: tensor<8x4x3x3xf32>) {
  // expected-error@+1 {{filter expects 4 input channels per group but the input has 3 channels in 1 group(s)}}
  %0 = nn.conv2d %x, %w : tensor<1x3x16x16xf32>, tensor<8x4x3x3xf32>
  return
}

// -----

// Tests that the conv2d bias has one entry per output channel.
func.func @f(%x: tensor<1x4x16x16xf32>, %w: tensor<8x4x3x3xf32>, %b: tensor<4xf32>) {
  // expected-error@+1 {{expects a bias of shape [8], got [4]}}
  %0 = nn.conv2d %x, %w, %b : tensor<1x4x16x16xf32>, tensor<8x4x3x3xf32>, tensor<4xf32>
  return
}

// -----

// Tests that the conv2d bias has the input's element type.
func.func @f(%x: tensor<1x4x16x16xf32>, %w: tensor<8x4x3x3xf32>, %b: tensor<8xf16>) {
  // expected-error@+1 {{bias element type 'f16' differs from input element type 'f32'}}
  %0 = nn.conv2d %x, %w, %b : tensor<1x4x16x16xf32>, tensor<8x4x3x3xf32>, tensor<8xf16>
  return
}

// -----

// Tests that the conv2d window fits the padded input.
func.func @f(%x: tensor<1x4x4x16xf32>, %w: tensor<8x4x3x3xf32>) {
  // expected-error@+1 {{the 3-wide window (dilation 2) does not fit the padded height 4}}
  %0 = nn.conv2d %x, %w dilations [2, 1] : tensor<1x4x4x16xf32>, tensor<8x4x3x3xf32>
  return
}

// -----

// Tests that a spelled-out result type must match the inferred one.
func.func @f(%x: tensor<1x4x16x16xf32>, %w: tensor<8x4x3x3xf32>) {
  // expected-error@+2 {{inferred type(s) 'tensor<1x8x14x14xf32>' are incompatible with return type(s) of operation 'tensor<1x8x16x16xf32>'}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = "nn.conv2d"(%x, %w) : (tensor<1x4x16x16xf32>, tensor<8x4x3x3xf32>) -> tensor<1x8x16x16xf32>
  return
}

// -----

// Tests that batch_norm takes an NC or NCHW input.
func.func @f(%x: tensor<2x8x5xf32>, %p: tensor<8xf32>) {
  // expected-error@+1 {{expects an NC or NCHW input, got rank 3}}
  %0 = nn.batch_norm %x, %p, %p, %p, %p epsilon 1.0e-5 momentum 0.1 : tensor<2x8x5xf32>, tensor<8xf32>
  return
}

// -----

// Tests that batch_norm parameters have one entry per channel.
func.func @f(%x: tensor<2x8x5x5xf32>, %p: tensor<4xf32>) {
  // expected-error@+1 {{expects per-channel parameters of shape [8], got [4]}}
  %0 = nn.batch_norm %x, %p, %p, %p, %p epsilon 1.0e-5 momentum 0.1 : tensor<2x8x5x5xf32>, tensor<4xf32>
  return
}

// -----

// Tests that batch_norm parameters are of the input's type or f32.
func.func @f(%x: tensor<2x8x5x5xf16>, %p: tensor<8xf64>) {
  // expected-error@+1 {{parameters must be 'f16' or f32, got 'f64'}}
  %0 = nn.batch_norm %x, %p, %p, %p, %p epsilon 1.0e-5 momentum 0.1 : tensor<2x8x5x5xf16>, tensor<8xf64>
  return
}

// -----

// Tests that the four batch_norm parameters share one type.
func.func @f(%x: tensor<2x8xf32>, %p: tensor<8xf32>, %q: tensor<8xf16>) {
  // expected-error@+1 {{failed to verify that all of {scale, shift, running_mean, running_var} have same type}}
  %0 = "nn.batch_norm"(%x, %p, %q, %p, %p) : (tensor<2x8xf32>, tensor<8xf32>, tensor<8xf16>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  return
}

// -----

// Tests that batch_norm epsilon is positive.
func.func @f(%x: tensor<2x8xf32>, %p: tensor<8xf32>) {
  // expected-error@+1 {{expects epsilon > 0, got 0}}
  %0 = nn.batch_norm %x, %p, %p, %p, %p epsilon 0.0 momentum 0.1 : tensor<2x8xf32>, tensor<8xf32>
  return
}

// -----

// Tests that batch_norm momentum is in [0, 1].
func.func @f(%x: tensor<2x8xf32>, %p: tensor<8xf32>) {
  // expected-error@+1 {{expects momentum in [0, 1], got 1.5}}
  %0 = nn.batch_norm %x, %p, %p, %p, %p epsilon 1.0e-5 momentum 1.5 : tensor<2x8xf32>, tensor<8xf32>
  return
}

// -----

// Tests that pooling takes an NCHW input.
func.func @f(%x: tensor<2x8xf32>) {
  // expected-error@+1 {{expects an NCHW input of rank 4, got rank 2}}
  %0 = nn.max_pool2d %x window [2, 2] : tensor<2x8xf32>
  return
}

// -----

// Tests that the pooling window has two positive entries.
func.func @f(%x: tensor<1x8x6x6xf32>) {
  // expected-error@+1 {{expects every 'window' entry to be >= 1, got 0}}
  %0 = nn.max_pool2d %x window [0, 2] : tensor<1x8x6x6xf32>
  return
}

// -----

// Tests that the pooling window has exactly two entries.
func.func @f(%x: tensor<1x8x6x6xf32>) {
  // expected-error@+1 {{expects 'window' to have 2 entries, got 3}}
  %0 = nn.avg_pool2d %x window [2, 2, 2] : tensor<1x8x6x6xf32>
  return
}

// -----

// Tests that pooling strides are positive.
func.func @f(%x: tensor<1x8x6x6xf32>) {
  // expected-error@+1 {{expects every 'strides' entry to be >= 1, got 0}}
  %0 = nn.avg_pool2d %x window [2, 2] strides [0, 0] : tensor<1x8x6x6xf32>
  return
}

// -----

// Tests that pooling pads at most half the window.
func.func @f(%x: tensor<1x8x6x6xf32>) {
  // expected-error@+1 {{padding must be at most half the window (3) on each side}}
  %0 = nn.max_pool2d %x window [3, 3] padding [2, 2, 1, 1] : tensor<1x8x6x6xf32>
  return
}

// -----

// Tests that the pooling window fits the padded input.
func.func @f(%x: tensor<1x8x6x2xf32>) {
  // expected-error@+1 {{the 3-wide window does not fit the padded width 2}}
  %0 = nn.max_pool2d %x window [3, 3] : tensor<1x8x6x2xf32>
  return
}

// -----

// Tests that global_avg_pool takes an NCHW input.
func.func @f(%x: tensor<2x8xf32>) {
  // expected-error@+1 {{expects an NCHW input of rank 4}}
  %0 = nn.global_avg_pool %x : tensor<2x8xf32>
  return
}

// -----

// Tests that reshape infers at most one dimension.
func.func @f(%x: tensor<2x6xf32>) {
  // expected-error@+1 {{at most one 'shape' entry may be -1}}
  %0 = nn.reshape %x shape [-1, -1] : tensor<2x6xf32>
  return
}

// -----

// Tests that reshape sizes are positive.
func.func @f(%x: tensor<2x6xf32>) {
  // expected-error@+1 {{'shape' entries must be positive or -1, got 0}}
  %0 = nn.reshape %x shape [0, 12] : tensor<2x6xf32>
  return
}

// -----

// Tests that reshape keeps the element count.
func.func @f(%x: tensor<2x6xf32>) {
  // expected-error@+1 {{cannot reshape 12 elements into 10}}
  %0 = nn.reshape %x shape [2, 5] : tensor<2x6xf32>
  return
}

// -----

// Tests that reshape's inferred dimension divides the element count.
func.func @f(%x: tensor<2x6xf32>) {
  // expected-error@+1 {{cannot reshape 12 elements into [5, -1]}}
  %0 = nn.reshape %x shape [5, -1] : tensor<2x6xf32>
  return
}

// -----

// Tests that flatten's start_dim is in range.
func.func @f(%x: tensor<2x6xf32>) {
  // expected-error@+1 {{'start_dim' 2 is out of range for rank 2}}
  %0 = nn.flatten %x start_dim 2 : tensor<2x6xf32>
  return
}

// -----

// Tests that linear takes a rank-2 input and weight.
func.func @f(%x: tensor<2x3x4xf32>, %w: tensor<5x4xf32>) {
  // expected-error@+1 {{expects a [N, in] input and an [out, in] weight, got [2, 3, 4] and [5, 4]}}
  %0 = nn.linear %x, %w : tensor<2x3x4xf32>, tensor<5x4xf32>
  return
}

// -----

// Tests that linear's input features match the weight.
func.func @f(%x: tensor<?x3xf32>, %w: tensor<5x4xf32>) {
  // expected-error@+1 {{input features (3) differ from weight input features (4)}}
  %0 = nn.linear %x, %w : tensor<?x3xf32>, tensor<5x4xf32>
  return
}

// -----

// Tests that linear's input and weight share an element type.
func.func @f(%x: tensor<?x4xf16>, %w: tensor<5x4xf32>) {
  // expected-error@+1 {{input element type 'f16' differs from weight element type 'f32'}}
  %0 = nn.linear %x, %w : tensor<?x4xf16>, tensor<5x4xf32>
  return
}

// -----

// Tests that linear's bias has one entry per output.
func.func @f(%x: tensor<?x4xf32>, %w: tensor<5x4xf32>, %b: tensor<4xf32>) {
  // expected-error@+1 {{expects a bias of shape [5], got [4]}}
  %0 = nn.linear %x, %w, %b : tensor<?x4xf32>, tensor<5x4xf32>, tensor<4xf32>
  return
}

// -----

// Tests that matmul operands have rank 2 or 3, the same.
func.func @f(%a: tensor<2x3xf32>, %b: tensor<1x3x4xf32>) {
  // expected-error@+1 {{expects two operands of rank 2, or two of rank 3 (batched), got 2 and 3}}
  %0 = nn.matmul %a, %b : tensor<2x3xf32>, tensor<1x3x4xf32>
  return
}

// -----

// Tests that matmul contraction dimensions agree, after transposes.
func.func @f(%a: tensor<2x3xf32>, %b: tensor<3x4xf32>) {
  // expected-error@+1 {{contraction dimensions differ: 3 and 4}}
  %0 = nn.matmul %a, %b transpose_b : tensor<2x3xf32>, tensor<3x4xf32>
  return
}

// -----

// Tests that batched matmul batch dimensions agree.
func.func @f(%a: tensor<2x2x3xf32>, %b: tensor<5x3x4xf32>) {
  // expected-error@+1 {{batch dimensions differ: 2 and 5}}
  %0 = nn.matmul %a, %b : tensor<2x2x3xf32>, tensor<5x3x4xf32>
  return
}

// -----

// Tests that topk_select gives no more entries than its input has.
func.func @f(%a: tensor<2x3xf32>) {
  // expected-error@+1 {{expects values tensor<Kxf32> and indices tensor<Kxi32> with 1 <= K <= 6, got 'tensor<7xf32>' and 'tensor<7xi32>'}}
  %v, %i = nn.topk_select %a : tensor<2x3xf32> -> tensor<7xf32>, tensor<7xi32>
  return
}

// -----

func.func @f(%a: tensor<?x3xf32>) {
  // expected-error@+1 {{expects a static f32 input of under 2^31 elements, got 'tensor<?x3xf32>'}}
  %v, %i = nn.topk_select %a : tensor<?x3xf32> -> tensor<2xf32>, tensor<2xi32>
  return
}

// -----

func.func @f(%a: tensor<2x3xf32>, %i: tensor<2xi64>) {
  // expected-error@+1 {{expects indices tensor<Kxi32>, got 'tensor<2xi64>'}}
  %z = nn.zero_at %a, %i : tensor<2x3xf32>, tensor<2xi64>
  return
}

// -----

// Tests that orthonormalize takes a static f32 matrix with no more rows than
// columns.
func.func @f(%a: tensor<5x3xf32>) {
  // expected-error@+1 {{expects 1 <= rows <= columns, got 'tensor<5x3xf32>'}}
  %0 = nn.orthonormalize %a : tensor<5x3xf32>
  return
}

// -----

func.func @f(%a: tensor<2x3xf16>) {
  // expected-error@+1 {{expects a static rank-2 f32 tensor, got 'tensor<2x3xf16>'}}
  %0 = nn.orthonormalize %a : tensor<2x3xf16>
  return
}

// -----

func.func @f(%a: tensor<?x3xf32>) {
  // expected-error@+1 {{expects a static rank-2 f32 tensor}}
  %0 = nn.orthonormalize %a : tensor<?x3xf32>
  return
}

// -----

// Tests that matmul operands share an element type.
func.func @f(%a: tensor<2x3xf32>, %b: tensor<3x4xf16>) {
  // expected-error@+1 {{operand element types differ: 'f32' and 'f16'}}
  %0 = nn.matmul %a, %b : tensor<2x3xf32>, tensor<3x4xf16>
  return
}

// -----

// Tests that attention's q, k and v fit: k's depth is q's.
func.func @f(%q: tensor<6x7x4xf32>, %k: tensor<6x7x5xf32>, %v: tensor<6x7x4xf32>) {
  // expected-error@+1 {{q [6, 7, 4], k [6, 7, 5] and v [6, 7, 4] do not fit}}
  %o, %l = nn.attention %q, %k, %v : tensor<6x7x4xf32>, tensor<6x7x5xf32>, tensor<6x7x4xf32>
  return
}

// -----

// Tests that attention's q, k and v share one element type.
func.func @f(%q: tensor<6x7x4xf16>, %k: tensor<6x7x4xf32>, %v: tensor<6x7x4xf16>) {
  // expected-error@+1 {{expects q, k and v all f32, all f16 or all bf16, got 'f16', 'f32' and 'f16'}}
  %o, %l = nn.attention %q, %k, %v : tensor<6x7x4xf16>, tensor<6x7x4xf32>, tensor<6x7x4xf16>
  return
}

// -----

// Tests that a half attention's backward takes its output gradient in q's type.
func.func @f(%q: tensor<6x7x4xf16>, %o: tensor<6x7x4xf16>, %l: tensor<6x7xf32>,
             %dy: tensor<6x7x4xf32>) {
  // expected-error@+1 {{expects the forward's output (in q's element type) and f32 lse}}
  %dq, %dk, %dv = nn.attention_backward %q, %q, %q, %o, %l, %dy
      : tensor<6x7x4xf16>, tensor<6x7x4xf16>, tensor<6x7x4xf16>, tensor<6x7x4xf16>,
        tensor<6x7xf32>, tensor<6x7x4xf32>
  return
}

// -----

// Tests that an attention bias is [P, Lq, Lk].
func.func @f(%q: tensor<6x7x4xf32>, %k: tensor<6x4x9xf32>, %v: tensor<6x9x4xf32>,
             %b: tensor<3x9x7xf32>) {
  // expected-error@+1 {{expects bias 0 to be a static f32 [P, 7, 9], got 'tensor<3x9x7xf32>'}}
  %o, %l = nn.attention %q, %k, %v transpose_k biases(%b : tensor<3x9x7xf32>) strides [1]
      : tensor<6x7x4xf32>, tensor<6x4x9xf32>, tensor<6x9x4xf32>
  return
}

// -----

// Tests that attention has one stride per bias.
func.func @f(%q: tensor<6x7x4xf32>, %k: tensor<6x7x4xf32>, %v: tensor<6x7x4xf32>,
             %b: tensor<3x7x7xf32>) {
  // expected-error@+1 {{has 1 biases and 2 bias strides}}
  %o, %l = nn.attention %q, %k, %v biases(%b : tensor<3x7x7xf32>) strides [1, 2]
      : tensor<6x7x4xf32>, tensor<6x7x4xf32>, tensor<6x7x4xf32>
  return
}

// -----

// Tests that attention bias strides are positive.
func.func @f(%q: tensor<6x7x4xf32>, %k: tensor<6x7x4xf32>, %v: tensor<6x7x4xf32>,
             %b: tensor<3x7x7xf32>) {
  // expected-error@+1 {{expects bias strides >= 1, got 0}}
  %o, %l = nn.attention %q, %k, %v biases(%b : tensor<3x7x7xf32>) strides [0]
      : tensor<6x7x4xf32>, tensor<6x7x4xf32>, tensor<6x7x4xf32>
  return
}

// -----

// Tests that the dropout rate is below 1.
func.func @f(%x: tensor<4xf32>) {
  // expected-error@+1 {{expects a rate in [0, 1), got 1}}
  %0 = nn.dropout %x rate 1.0 seed 0 : tensor<4xf32>
  return
}

// -----

// Tests that the dropout rate is not negative.
func.func @f(%x: tensor<4xf32>) {
  // expected-error@+1 {{expects a rate in [0, 1), got -0.5}}
  %0 = nn.dropout %x rate -0.5 seed 0 : tensor<4xf32>
  return
}

// -----

// Tests that loss logits are [N, classes].
func.func @f(%x: tensor<8xf32>, %y: tensor<8xi32>) {
  // expected-error@+1 {{expects float logits of shape [N, classes]}}
  %0 = nn.softmax_cross_entropy %x, %y label_smoothing 0.0 : tensor<8xf32>, tensor<8xi32>
  return
}

// -----

// Tests that labels are integer class indices.
func.func @f(%x: tensor<8x10xf32>, %y: tensor<8xf32>) {
  // expected-error@+1 {{expects i32 or i64 class-index labels, got 'f32'}}
  %0 = nn.softmax_cross_entropy %x, %y label_smoothing 0.0 : tensor<8x10xf32>, tensor<8xf32>
  return
}

// -----

// Tests that labels are one index per example.
func.func @f(%x: tensor<8x10xf32>, %y: tensor<8x10xi32>) {
  // expected-error@+1 {{expects labels of shape [N], got rank 2}}
  %0 = nn.softmax_cross_entropy %x, %y label_smoothing 0.0 : tensor<8x10xf32>, tensor<8x10xi32>
  return
}

// -----

// Tests that logits and labels have one batch size.
func.func @f(%x: tensor<8x10xf32>, %y: tensor<4xi32>) {
  // expected-error@+1 {{batch of logits (8) differs from batch of labels (4)}}
  %0 = nn.softmax_cross_entropy %x, %y label_smoothing 0.0 : tensor<8x10xf32>, tensor<4xi32>
  return
}

// -----

// Tests that label smoothing is in [0, 1).
func.func @f(%x: tensor<8x10xf32>, %y: tensor<8xi32>) {
  // expected-error@+1 {{expects label_smoothing in [0, 1), got 1}}
  %0 = nn.softmax_cross_entropy %x, %y label_smoothing 1.0 : tensor<8x10xf32>, tensor<8xi32>
  return
}

// -----

// Tests that an assign names a declared variable.
func.func @f(%v: tensor<4xf32>) {
  // expected-error@+1 {{'missing' does not name an nn.parameter or nn.state}}
  nn.assign @missing, %v : tensor<4xf32>
  return
}

// -----

// Tests that an assign has the declared type.
nn.state @s : tensor<4xf32> = zeros
func.func @f(%v: tensor<5xf32>) {
  // expected-error@+1 {{type 'tensor<5xf32>' does not match the declared type 'tensor<4xf32>' of @s}}
  nn.assign @s, %v : tensor<5xf32>
  return
}

// -----

// Tests that gradients go to parameters, not state.
nn.state @s : tensor<4xf32> = zeros
func.func @f(%g: tensor<4xf32>) {
  // expected-error@+1 {{'s' does not name an nn.parameter}}
  nn.apply_gradient @s, %g : tensor<4xf32>
  return
}

// -----

// Tests that conv2d_backward_data's input_size has two entries.
func.func @f(%dy: tensor<1x8x8x8xf32>, %w: tensor<8x4x3x3xf32>) {
  // expected-error@+1 {{expects 'input_size' to have 2 entries, got 1}}
  %0 = nn.conv2d_backward_data %dy, %w input_size [8] padding [1, 1, 1, 1] : tensor<1x8x8x8xf32>, tensor<8x4x3x3xf32>
  return
}

// -----

// Tests that conv2d_backward_data's grad_output matches the forward output.
func.func @f(%dy: tensor<1x8x8x8xf32>, %w: tensor<8x4x3x3xf32>) {
  // expected-error@+1 {{grad_output is [1, 8, 8, 8] but the forward op produces 16x16 spatially}}
  %0 = nn.conv2d_backward_data %dy, %w input_size [16, 16] padding [1, 1, 1, 1] : tensor<1x8x8x8xf32>, tensor<8x4x3x3xf32>
  return
}

// -----

// Tests that conv2d_backward_data's grad_output has the filter's output channels.
func.func @f(%dy: tensor<1x6x8x8xf32>, %w: tensor<8x4x3x3xf32>) {
  // expected-error@+1 {{grad_output has 6 channels but the filter 8 outputs}}
  %0 = nn.conv2d_backward_data %dy, %w input_size [8, 8] padding [1, 1, 1, 1] : tensor<1x6x8x8xf32>, tensor<8x4x3x3xf32>
  return
}

// -----

// Tests that conv2d_backward_filter's kernel_size is positive.
func.func @f(%x: tensor<1x4x8x8xf32>, %dy: tensor<1x8x8x8xf32>) {
  // expected-error@+1 {{expects every 'kernel_size' entry to be >= 1, got 0}}
  %0 = nn.conv2d_backward_filter %x, %dy kernel_size [0, 3] : tensor<1x4x8x8xf32>, tensor<1x8x8x8xf32>
  return
}

// -----

// Tests that conv2d_backward_filter's grad_output matches the forward output.
func.func @f(%x: tensor<1x4x8x8xf32>, %dy: tensor<1x8x8x8xf32>) {
  // expected-error@+1 {{grad_output is [1, 8, 8, 8] but the forward op produces 6x6 spatially}}
  %0 = nn.conv2d_backward_filter %x, %dy kernel_size [3, 3] : tensor<1x4x8x8xf32>, tensor<1x8x8x8xf32>
  return
}

// -----

// Tests that conv2d_backward_filter's operands share the batch.
func.func @f(%x: tensor<2x4x8x8xf32>, %dy: tensor<1x8x8x8xf32>) {
  // expected-error@+1 {{input and grad_output batch sizes differ}}
  %0 = nn.conv2d_backward_filter %x, %dy kernel_size [1, 1] : tensor<2x4x8x8xf32>, tensor<1x8x8x8xf32>
  return
}

// -----

// Tests that conv2d_backward_filter's groups divide both channel counts.
func.func @f(%x: tensor<1x4x8x8xf32>, %dy: tensor<1x6x8x8xf32>) {
  // expected-error@+1 {{groups (4) must divide input and output channels (4, 6)}}
  %0 = nn.conv2d_backward_filter %x, %dy kernel_size [1, 1] groups 4 : tensor<1x4x8x8xf32>, tensor<1x6x8x8xf32>
  return
}

// -----

// Tests that max_pool2d_backward's grad_output matches the forward output.
func.func @f(%x: tensor<1x4x8x8xf32>, %dy: tensor<1x4x8x8xf32>) {
  // expected-error@+1 {{grad_output 'tensor<1x4x8x8xf32>' does not match the forward output 'tensor<1x4x4x4xf32>'}}
  %0 = nn.max_pool2d_backward %x, %dy window [2, 2] : tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>
  return
}

// -----

// Tests that avg_pool2d_backward's grad_output matches the forward output.
func.func @f(%dy: tensor<1x4x4x4xf32>) {
  // expected-error@+1 {{grad_output 'tensor<1x4x4x4xf32>' does not match the forward output 'tensor<1x4x5x5xf32>'}}
  %0 = nn.avg_pool2d_backward %dy input_size [10, 10] window [2, 2] : tensor<1x4x4x4xf32>
  return
}

// -----

// Tests that softmax_cross_entropy_backward takes integer labels.
func.func @f(%d: tensor<f32>, %x: tensor<8x10xf32>, %y: tensor<8xf32>) {
  // expected-error@+1 {{must be ranked tensor of 32-bit signless integer or 64-bit signless integer values}}
  %0 = "nn.softmax_cross_entropy_backward"(%d, %x, %y) : (tensor<f32>, tensor<8x10xf32>, tensor<8xf32>) -> tensor<8x10xf32>
  return
}

// -----

// Tests that softmax_cross_entropy_backward's smoothing is in [0, 1).
func.func @f(%d: tensor<f32>, %x: tensor<8x10xf32>, %y: tensor<8xi32>) {
  // expected-error@+1 {{expects label_smoothing in [0, 1), got -0.1}}
  %0 = nn.softmax_cross_entropy_backward %d, %x, %y label_smoothing -0.1 : tensor<f32>, tensor<8x10xf32>, tensor<8xi32>
  return
}

// -----

// Tests that the dropout_mask rate is in [0, 1).
func.func @f(%x: tensor<8x10xf32>, %s: tensor<i64>) {
  // expected-error@+1 {{expects a rate in [0, 1), got 1}}
  %0 = nn.dropout_mask %x, %s rate 1.0 seed 0 : tensor<8x10xf32>, tensor<i64>
  return
}

// -----

// Tests that argmax's dim is in range.
func.func @f(%x: tensor<8x10xf32>) {
  // expected-error@+1 {{'dim' 2 is out of range for rank 2}}
  %0 = nn.argmax %x dim 2 : tensor<8x10xf32>
  return
}

// -----

// Tests that the base learning rate is positive.
func.func @f(%s: tensor<i64>) {
  // expected-error@+1 {{expects base_lr > 0, got 0}}
  %0 = nn.lr_schedule %s {base_lr = 0.0 : f64, decay = 0 : i32} : tensor<i64>
  return
}

// -----

// Tests that warmup is not negative.
func.func @f(%s: tensor<i64>) {
  // expected-error@+1 {{expects warmup_steps >= 0, got -1}}
  %0 = nn.lr_schedule %s {base_lr = 0.1 : f64, decay = 0 : i32, warmup_steps = -1 : i64} : tensor<i64>
  return
}

// -----

// Tests that cosine decay runs past the warmup.
func.func @f(%s: tensor<i64>) {
  // expected-error@+1 {{cosine decay needs total_steps > warmup_steps, got 5 and 5}}
  %0 = nn.lr_schedule %s {base_lr = 0.1 : f64, decay = 1 : i32, warmup_steps = 5 : i64, total_steps = 5 : i64} : tensor<i64>
  return
}

// -----

// Tests that cosine decay ends between 0 and the base rate.
func.func @f(%s: tensor<i64>) {
  // expected-error@+1 {{expects final_lr in [0, base_lr], got 0.5}}
  %0 = nn.lr_schedule %s {base_lr = 0.1 : f64, decay = 1 : i32, total_steps = 5 : i64, final_lr = 0.5 : f64} : tensor<i64>
  return
}

// -----

// Tests that step decay has a positive step size.
func.func @f(%s: tensor<i64>) {
  // expected-error@+1 {{step decay needs step_size >= 1, got 0}}
  %0 = nn.lr_schedule %s {base_lr = 0.1 : f64, decay = 2 : i32, step_size = 0 : i64} : tensor<i64>
  return
}

// -----

// Tests that step decay's gamma is in (0, 1].
func.func @f(%s: tensor<i64>) {
  // expected-error@+1 {{step decay needs gamma in (0, 1], got 2}}
  %0 = nn.lr_schedule %s {base_lr = 0.1 : f64, decay = 2 : i32, step_size = 10 : i64, gamma = 2.0 : f64} : tensor<i64>
  return
}

// -----

// Tests that weight decay is not negative.
func.func @f(%p: tensor<4xf32>, %lr: tensor<f32>) {
  // expected-error@+1 {{expects weight_decay >= 0, got -0.1}}
  %0 = nn.sgd %p, %p, %lr weight_decay -0.1 : tensor<4xf32>
  return
}

// -----

// Tests that momentum is in [0, 1).
func.func @f(%p: tensor<4xf32>, %lr: tensor<f32>) {
  // expected-error@+1 {{expects momentum in [0, 1), got 1}}
  %0:2 = nn.sgd_momentum %p, %p, %p, %lr momentum 1.0 weight_decay 0.0 : tensor<4xf32>
  return
}

// -----

// Tests that Nesterov needs momentum.
func.func @f(%p: tensor<4xf32>, %lr: tensor<f32>) {
  // expected-error@+1 {{Nesterov momentum needs momentum > 0}}
  %0:2 = nn.sgd_momentum %p, %p, %p, %lr momentum 0.0 weight_decay 0.0 nesterov : tensor<4xf32>
  return
}

// -----

// Tests that the LARS coefficient is positive.
func.func @f(%p: tensor<4xf32>, %lr: tensor<f32>) {
  // expected-error@+1 {{expects eta > 0, got 0}}
  %0:2 = nn.lars %p, %p, %p, %lr momentum 0.9 weight_decay 0.0 eta 0.0 : tensor<4xf32>
  return
}

// -----

// Tests that Adam's decays are in [0, 1).
func.func @f(%p: tensor<4xf32>, %lr: tensor<f32>) {
  // expected-error@+1 {{expects beta2 in [0, 1), got 1}}
  %0:3 = nn.adam %p, %p, %p, %p, %lr, %lr, %lr beta1 0.9 beta2 1.0 epsilon 1.0e-8 weight_decay 0.0 : tensor<4xf32>
  return
}

// -----

// Tests that Adam's epsilon is positive.
func.func @f(%p: tensor<4xf32>, %lr: tensor<f32>) {
  // expected-error@+1 {{expects epsilon > 0, got 0}}
  %0:3 = nn.adam %p, %p, %p, %p, %lr, %lr, %lr beta1 0.9 beta2 0.999 epsilon 0.0 weight_decay 0.0 : tensor<4xf32>
  return
}

// -----

// Tests that an optimizer's parameter and velocity share a type.
func.func @f(%p: tensor<4xf32>, %v: tensor<4xf16>, %lr: tensor<f32>) {
  // expected-error@+1 {{failed to verify that all of {param, velocity, new_param, new_velocity} have same type}}
  %0:2 = "nn.sgd_momentum"(%p, %p, %v, %lr) {momentum = 0.9, weight_decay = 0.0, operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0>} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf16>, tensor<f32>) -> (tensor<4xf32>, tensor<4xf32>)
  return
}

// -----

// Tests that a gradient has its parameter's shape.
func.func @f(%p: tensor<4xf32>, %g: tensor<5xf32>, %lr: tensor<f32>) {
  // expected-error@+1 {{expects a gradient of the parameter's shape and at most its width, got 'tensor<5xf32>' for 'tensor<4xf32>'}}
  %0:2 = nn.sgd_momentum %p, %g, %p, %lr momentum 0.9 weight_decay 0.0 : tensor<4xf32>, tensor<5xf32>
  return
}

// -----

// Tests that a gradient is not wider than its parameter.
func.func @f(%p: tensor<4xf16>, %g: tensor<4xf32>, %lr: tensor<f32>) {
  // expected-error@+1 {{expects a gradient of the parameter's shape and at most its width}}
  %0 = nn.sgd %p, %g, %lr weight_decay 0.0 : tensor<4xf16>, tensor<4xf32>
  return
}

// -----

// Tests that the overflow check takes at least one tensor.
func.func @f() {
  // expected-error@+1 {{'nn.nonfinite_flags' op needs at least one operand}}
  %0 = "nn.nonfinite_flags"() : () -> tensor<0xf32>
  return
}

// -----

// Tests that the clipping norm's pass takes at least one tensor.
func.func @f() {
  // expected-error@+1 {{'nn.sum_squares' op needs at least one operand}}
  %0 = "nn.sum_squares"() : () -> tensor<0xf32>
  return
}

// -----

// Tests that a gradient handed to the optimizer has its parameter's shape.
module {
  nn.parameter @w : tensor<4xf32> = zeros
  func.func @f(%g: tensor<5xf16>) {
    // expected-error@+1 {{gradient type 'tensor<5xf16>' does not fit the declared type 'tensor<4xf32>' of @w}}
    nn.apply_gradient @w, %g : tensor<5xf16>
    return
  }
}

// -----

// Tests that binary operands have exactly one type: no implicit broadcast of a size-1 dimension.
func.func @f(%a: tensor<?x10xf32>, %b: tensor<1x10xf32>) -> tensor<?x10xf32> {
  // expected-error@+1 {{failed to verify that all of {lhs, rhs, result} have same type}}
  %0 = "nn.add"(%a, %b) : (tensor<?x10xf32>, tensor<1x10xf32>) -> tensor<?x10xf32>
  return %0 : tensor<?x10xf32>
}

// -----

// Tests that a unary op's result has exactly its operand's type.
func.func @f(%a: tensor<?x10xf32>) -> tensor<1x10xf32> {
  // expected-error@+1 {{failed to verify that all of {input, result} have same type}}
  %0 = "nn.relu"(%a) : (tensor<?x10xf32>) -> tensor<1x10xf32>
  return %0 : tensor<1x10xf32>
}

// -----

// Tests that constants are ranked tensors.
func.func @f() {
  // expected-error@+1 {{expects a ranked tensor value}}
  %0 = nn.constant dense<1.0> : vector<4xf32>
  return
}

// -----

// Tests that window entries stay far from overflow.
func.func @f(%x: tensor<1x1x28x28xf32>, %w: tensor<1x1x5x5xf32>) {
  // expected-error@+1 {{expects every 'dilations' entry to be <= 16777216, got 4611686018427387904}}
  %0 = nn.conv2d %x, %w dilations [4611686018427387904, 1] : tensor<1x1x28x28xf32>, tensor<1x1x5x5xf32>
  return
}

// -----

// Tests that no output extent exceeds 2^40.
func.func @f(%x: tensor<1x1x1099511627777x1xf32>) {
  // expected-error@+1 {{output extent exceeds 2^40}}
  %0 = nn.avg_pool2d %x window [1, 1] : tensor<1x1x1099511627777x1xf32>
  return
}

// -----

// Tests that a reshape's shape stays under 2^40 elements.
func.func @f(%x: tensor<4xf32>) {
  // expected-error@+1 {{'shape' has more than 2^40 elements}}
  %0 = nn.reshape %x shape [4611686018427387905, 4] : tensor<4xf32>
  return
}

// -----

// Tests that a reshape with a huge inferred dimension does not divide by zero.
func.func @f(%x: tensor<2x4xf32>) {
  // expected-error@+1 {{'shape' has more than 2^40 elements}}
  %0 = nn.reshape %x shape [-1, 4294967296, 4294967296] : tensor<2x4xf32>
  return
}

// -----

// Tests that flatten stays under 2^40 elements.
func.func @f(%x: tensor<?x4294967296x4294967296xf32>) {
  // expected-error@+1 {{the flattened dimension exceeds 2^40}}
  %0 = nn.flatten %x start_dim 1 : tensor<?x4294967296x4294967296xf32>
  return
}

// -----

// Tests that global_avg_pool averages a non-empty plane.
func.func @f(%x: tensor<2x3x0x0xf32>) {
  // expected-error@+1 {{cannot average an empty 0x0 plane}}
  %0 = nn.global_avg_pool %x : tensor<2x3x0x0xf32>
  return
}

// -----

// Tests that the loss has at least one class.
func.func @f(%x: tensor<8x0xf32>, %y: tensor<8xi32>) {
  // expected-error@+1 {{expects at least one class}}
  %0 = nn.softmax_cross_entropy %x, %y label_smoothing 0.0 : tensor<8x0xf32>, tensor<8xi32>
  return
}

// -----

// Tests that linear's bias has the input's element type.
func.func @f(%x: tensor<?x4xf32>, %w: tensor<5x4xf32>, %b: tensor<5xf16>) {
  // expected-error@+1 {{bias element type 'f16' differs from input element type 'f32'}}
  %0 = nn.linear %x, %w, %b : tensor<?x4xf32>, tensor<5x4xf32>, tensor<5xf16>
  return
}

// -----

// Tests that pooling padding has four entries.
func.func @f(%x: tensor<1x8x6x6xf32>) {
  // expected-error@+1 {{expects 'padding' to have 4 entries, got 2}}
  %0 = nn.max_pool2d %x window [2, 2] padding [1, 1] : tensor<1x8x6x6xf32>
  return
}

// -----

// Tests that pooling padding is not negative.
func.func @f(%x: tensor<1x8x6x6xf32>) {
  // expected-error@+1 {{expects every 'padding' entry to be >= 0, got -1}}
  %0 = nn.avg_pool2d %x window [2, 2] padding [0, 0, -1, 0] : tensor<1x8x6x6xf32>
  return
}

// -----

// Tests that an nn.fusion computes only elementwise ops, broadcasts and views
// of inputs (and reductions at its end).
func.func @fusion_with_library_op(%x: tensor<2x4xf32>) -> tensor<2xi64> {
  %r = nn.fusion %x : tensor<2x4xf32> -> tensor<2xi64> {
  ^bb0(%a: tensor<2x4xf32>):
    // expected-error@+1 {{cannot be fused: only elementwise ops, broadcasts and views of inputs are}}
    %s = nn.argmax %a dim 1 : tensor<2x4xf32>
    nn.yield %s : tensor<2xi64>
  }
  return %r : tensor<2xi64>
}

// -----

// Tests that a view in an nn.fusion reads an input (through views), not a
// value the fusion computes.
func.func @fusion_view_of_computed(%x: tensor<2x3xf32>) -> tensor<3x2xf32> {
  %r = nn.fusion %x : tensor<2x3xf32> -> tensor<3x2xf32> {
  ^bb0(%a: tensor<2x3xf32>):
    %e = nn.exp %a : tensor<2x3xf32>
    // expected-error@+1 {{in an nn.fusion must view one of its inputs (through views)}}
    %t = nn.transpose %e permutation [1, 0] : tensor<2x3xf32>
    %n = nn.neg %t : tensor<3x2xf32>
    nn.yield %n : tensor<3x2xf32>
  }
  return %r : tensor<3x2xf32>
}

// -----

// Tests that an input a fusion views is read only through views (the kernel
// takes it flat, through the views' strided maps).
func.func @fusion_view_and_direct(%x: tensor<3x3xf32>) -> tensor<3x3xf32> {
  %r = nn.fusion %x : tensor<3x3xf32> -> tensor<3x3xf32> {
  ^bb0(%a: tensor<3x3xf32>):
    // expected-error@+1 {{in an nn.fusion must view an input nothing else reads}}
    %t = nn.transpose %a permutation [1, 0] : tensor<3x3xf32>
    %s = nn.add %t, %a : tensor<3x3xf32>
    nn.yield %s : tensor<3x3xf32>
  }
  return %r : tensor<3x3xf32>
}

// -----

// Tests that a view in an nn.fusion does not read a prefix of its input in
// order (a kernel argument is the whole buffer; that read is a copy's).
func.func @fusion_view_prefix(%x: tensor<4x16xf32>) -> tensor<2x16xf32> {
  %r = nn.fusion %x : tensor<4x16xf32> -> tensor<2x16xf32> {
  ^bb0(%a: tensor<4x16xf32>):
    // expected-error@+1 {{in an nn.fusion cannot read a prefix of its input in order (a contiguous copy, not a view)}}
    %s = nn.slice %a dim 0 start 0 size 2 : tensor<4x16xf32>
    %e = nn.exp %s : tensor<2x16xf32>
    nn.yield %e : tensor<2x16xf32>
  }
  return %r : tensor<2x16xf32>
}

// -----

// Tests that a chain of views in an nn.fusion ends at the iteration shape.
func.func @fusion_view_shape(%x: tensor<2x3xf32>, %y: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %r = nn.fusion %x, %y : tensor<2x3xf32>, tensor<2x3xf32> -> tensor<2x3xf32> {
  ^bb0(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>):
    %n = nn.neg %b : tensor<2x3xf32>
    // expected-error@+1 {{in an nn.fusion must end at the iteration shape}}
    %t = nn.slice %a dim 1 start 0 size 2 : tensor<2x3xf32>
    %e = nn.exp %t : tensor<2x2xf32>
    nn.yield %n : tensor<2x3xf32>
  }
  return %r : tensor<2x3xf32>
}

// -----

// Tests that a reduction in an nn.fusion reduces a value of the iteration
// shape (the elementwise ops' shape; a fusion of a reduction alone iterates
// over what it reduces).
func.func @fusion_reduction_shape(%x: tensor<4xf32>, %y: tensor<2x2xf32>) -> (tensor<4xf32>, tensor<f32>) {
  %r:2 = nn.fusion %x, %y : tensor<4xf32>, tensor<2x2xf32> -> tensor<4xf32>, tensor<f32> {
  ^bb0(%a: tensor<4xf32>, %b: tensor<2x2xf32>):
    %e = nn.exp %a : tensor<4xf32>
    // expected-error@+1 {{in an nn.fusion must reduce a value of the iteration shape}}
    %s = nn.reduce_sum %b dims [0, 1] : tensor<2x2xf32>
    nn.yield %e, %s : tensor<4xf32>, tensor<f32>
  }
  return %r#0, %r#1 : tensor<4xf32>, tensor<f32>
}

// -----

// Tests that the reductions of an nn.fusion share their dims (the loop nest's
// reduction loops).
func.func @fusion_reduction_dims(%x: tensor<2x4xf32>) -> (tensor<4xf32>, tensor<2xf32>) {
  %r:2 = nn.fusion %x : tensor<2x4xf32> -> tensor<4xf32>, tensor<2xf32> {
  ^bb0(%a: tensor<2x4xf32>):
    %e = nn.exp %a : tensor<2x4xf32>
    %s = nn.reduce_sum %e dims [0] : tensor<2x4xf32>
    // expected-error@+1 {{in an nn.fusion must reduce the same dims as the others}}
    %t = nn.reduce_mean %e dims [1] : tensor<2x4xf32>
    nn.yield %s, %t : tensor<4xf32>, tensor<2xf32>
  }
  return %r#0, %r#1 : tensor<4xf32>, tensor<2xf32>
}

// -----

// Tests that a reduction in an nn.fusion only ends it: nothing reads it but
// the yield.
func.func @fusion_reduction_read(%x: tensor<2x4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %r:2 = nn.fusion %x : tensor<2x4xf32> -> tensor<4xf32>, tensor<4xf32> {
  ^bb0(%a: tensor<2x4xf32>):
    %e = nn.exp %a : tensor<2x4xf32>
    // expected-error@+1 {{in an nn.fusion must only be yielded}}
    %s = nn.reduce_sum %e dims [0] : tensor<2x4xf32>
    %n = nn.neg %s : tensor<4xf32>
    nn.yield %s, %n : tensor<4xf32>, tensor<4xf32>
  }
  return %r#0, %r#1 : tensor<4xf32>, tensor<4xf32>
}

// -----

// Tests that a broadcast in an nn.fusion reads an input, not a member.
func.func @fusion_broadcast_of_member(%x: tensor<4xf32>, %y: tensor<2x4xf32>) -> tensor<2x4xf32> {
  %r = nn.fusion %x, %y : tensor<4xf32>, tensor<2x4xf32> -> tensor<2x4xf32> {
  ^bb0(%a: tensor<4xf32>, %b: tensor<2x4xf32>):
    %e = nn.exp %b : tensor<2x4xf32>
    // expected-error@+1 {{in an nn.fusion must broadcast one of its inputs}}
    %c = nn.broadcast %e to %b dims [0, 1] : tensor<2x4xf32>, tensor<2x4xf32>
    nn.yield %c : tensor<2x4xf32>
  }
  return %r : tensor<2x4xf32>
}

// -----

// Tests that every result of an nn.fusion has the iteration shape.
func.func @fusion_shapes(%x: tensor<4xf32>, %y: tensor<8xf32>) -> (tensor<4xf32>, tensor<8xf32>) {
  // expected-error@+1 {{results must share one shape (the iteration space)}}
  %r:2 = nn.fusion %x, %y : tensor<4xf32>, tensor<8xf32> -> tensor<4xf32>, tensor<8xf32> {
  ^bb0(%a: tensor<4xf32>, %b: tensor<8xf32>):
    %e = nn.exp %a : tensor<4xf32>
    nn.yield %e, %b : tensor<4xf32>, tensor<8xf32>
  }
  return %r#0, %r#1 : tensor<4xf32>, tensor<8xf32>
}

// -----

// Tests that an nn.multi_tensor batches optimizer updates only.
func.func @multi_tensor_member(%x: tensor<4xf32>) -> tensor<4xf32> {
  %r = nn.multi_tensor %x : tensor<4xf32> -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    // expected-error@+1 {{cannot be a member of an nn.multi_tensor: only sgd, sgd_momentum and adam are}}
    %e = nn.relu %a : tensor<4xf32>
    nn.yield %e : tensor<4xf32>
  }
  return %r : tensor<4xf32>
}

// -----

// Tests that members are independent: each reads block arguments only.
func.func @multi_tensor_chain(%p: tensor<4xf32>, %lr: tensor<f32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %r:2 = nn.multi_tensor %p, %lr : tensor<4xf32>, tensor<f32> -> tensor<4xf32>, tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>, %l: tensor<f32>):
    %0 = nn.sgd %a, %a, %l weight_decay 0.0 : tensor<4xf32>
    // expected-error@+1 {{in an nn.multi_tensor must read its block arguments only}}
    %1 = nn.sgd %0, %a, %l weight_decay 0.0 : tensor<4xf32>
    nn.yield %0, %1 : tensor<4xf32>, tensor<4xf32>
  }
  return %r#0, %r#1 : tensor<4xf32>, tensor<4xf32>
}

// -----

// Tests that results are yielded member by member (the kernel's layout).
func.func @multi_tensor_order(%p: tensor<4xf32>, %q: tensor<8xf32>, %lr: tensor<f32>) -> (tensor<8xf32>, tensor<4xf32>) {
  %r:2 = nn.multi_tensor %p, %q, %lr : tensor<4xf32>, tensor<8xf32>, tensor<f32> -> tensor<8xf32>, tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>, %b: tensor<8xf32>, %l: tensor<f32>):
    // expected-error@+1 {{results must be yielded in member order, each once}}
    %0 = nn.sgd %a, %a, %l weight_decay 0.0 : tensor<4xf32>
    %1 = nn.sgd %b, %b, %l weight_decay 0.0 : tensor<8xf32>
    nn.yield %1, %0 : tensor<8xf32>, tensor<4xf32>
  }
  return %r#0, %r#1 : tensor<8xf32>, tensor<4xf32>
}

// -----

// Tests that a transpose's permutation permutes the input's dims.
func.func @transpose_not_a_permutation(%x: tensor<2x3x4x5xf32>) {
  // expected-error@+1 {{is not a permutation of [0, 4)}}
  %0 = nn.transpose %x permutation [0, 2, 2, 1] : tensor<2x3x4x5xf32>
  return
}

// -----

func.func @transpose_rank(%x: tensor<2x3x4x5xf32>) {
  // expected-error@+1 {{permutation has 3 entries for a rank-4 input}}
  %0 = nn.transpose %x permutation [0, 2, 1] : tensor<2x3x4x5xf32>
  return
}

// -----

// Tests that a channels-last convolution reads its channels from dim 3.
func.func @channels_last_channels(%x: tensor<8x16x16x4xf32>, %w: tensor<8x3x3x3xf32>) {
  // expected-error@+1 {{filter expects 3 input channels per group but the input has 4 channels}}
  %0 = nn.conv2d %x, %w channels_last : tensor<8x16x16x4xf32>, tensor<8x3x3x3xf32>
  return
}

// -----

// Tests that a concat never joins along the dynamic batch dim.
func.func @concat_batch(%a: tensor<?x3x5x5xf32>) {
  // expected-error@+1 {{joins along dim 0, the dynamic batch}}
  %0 = nn.concat %a, %a dim 0 : tensor<?x3x5x5xf32>, tensor<?x3x5x5xf32>
  return
}

// -----

// Tests that concat operands agree outside the joined dim.
func.func @concat_shapes(%a: tensor<?x3x5x5xf32>, %b: tensor<?x3x4x5xf32>) {
  // expected-error@+1 {{operand 1 has shape [?, 3, 4, 5], which differs from operand 0's [?, 3, 5, 5] outside dim 1}}
  %0 = nn.concat %a, %b dim 1 : tensor<?x3x5x5xf32>, tensor<?x3x4x5xf32>
  return
}

// -----

// Tests that concat operands share an element type and rank.
func.func @concat_types(%a: tensor<?x3x5x5xf32>, %b: tensor<?x3x5x5xf16>) {
  // expected-error@+1 {{operand 1 is not a rank-4 tensor of 'f32'}}
  %0 = nn.concat %a, %b dim 1 : tensor<?x3x5x5xf32>, tensor<?x3x5x5xf16>
  return
}

// -----

// Tests that a slice is a non-empty window inside its dim.
func.func @slice_window(%a: tensor<?x3x5x5xf32>) {
  // expected-error@+1 {{[2, 2 + 2) is not a non-empty window of dim 1 (size 3)}}
  %0 = nn.slice %a dim 1 start 2 size 2 : tensor<?x3x5x5xf32>
  return
}

// -----

// Tests that a slice never cuts the dynamic batch dim.
func.func @slice_batch(%a: tensor<?x3x5x5xf32>) {
  // expected-error@+1 {{dim 0 of the input is dynamic}}
  %0 = nn.slice %a dim 0 start 0 size 2 : tensor<?x3x5x5xf32>
  return
}

// -----

// Tests that a slice's dim is one of the input's.
func.func @slice_dim(%a: tensor<?x3x5x5xf32>) {
  // expected-error@+1 {{'dim' 4 is not in [0, 4)}}
  %0 = nn.slice %a dim 4 start 0 size 2 : tensor<?x3x5x5xf32>
  return
}
