// RUN: graphc-opt %s -split-input-file -graphc-verify-model -verify-diagnostics | FileCheck %s

// Tests that a well-formed model passes unchanged.
// CHECK: nn.parameter @fc.weight
// CHECK-LABEL: func.func @forward
// CHECK: nn.linear
nn.parameter @fc.weight : tensor<10x784xf32> = zeros
func.func @forward(%images: tensor<?x784xf32>, %labels: tensor<?xi32>) -> tensor<f32> {
  %w = nn.load @fc.weight : tensor<10x784xf32>
  %0 = nn.linear %images, %w : tensor<?x784xf32>, tensor<10x784xf32>
  %1 = nn.softmax_cross_entropy %0, %labels label_smoothing 0.0 : tensor<?x10xf32>, tensor<?xi32>
  return %1 : tensor<f32>
}

// -----

// Tests that a model needs @forward.
// expected-error@+1 {{the model has no func.func @forward}}
module {
  nn.parameter @w : tensor<2x2xf32> = zeros
}

// -----

// Tests that a model holds nothing but variables and @forward.
// expected-error@+1 {{a model holds only nn.parameter, nn.state and one func.func @forward (or @infer, an inference model); found func.func @helper}}
func.func @helper() { return }

// -----

// Tests that @forward has a body.
// expected-error@+1 {{@forward has no body}}
func.func private @forward(tensor<?x4xf32>, tensor<?xi32>) -> tensor<f32>

// -----

// Tests that @forward takes images and labels.
// expected-error@+1 {{@forward must take (%images, %labels), got 1 argument(s)}}
func.func @forward(%images: tensor<?x4xf32>) -> tensor<f32> {
  %0 = nn.reduce_sum %images dims [0, 1] : tensor<?x4xf32>
  return %0 : tensor<f32>
}

// -----

// Tests that images are float tensors of rank 2 or 4.
// expected-error@+1 {{@forward's images must be a float tensor of rank 2 or 4 (NCHW), got 'tensor<?x4x4xf32>'}}
func.func @forward(%images: tensor<?x4x4xf32>, %labels: tensor<?xi32>) -> tensor<f32> {
  %0 = nn.reduce_sum %images dims [0, 1, 2] : tensor<?x4x4xf32>
  return %0 : tensor<f32>
}

// -----

// Tests that only the batch dimension of the images may be dynamic.
// expected-error@+1 {{@forward's images may be dynamic only in the batch dimension, got 'tensor<?x?xf32>'}}
func.func @forward(%images: tensor<?x?xf32>, %labels: tensor<?xi32>) -> tensor<f32> {
  %0 = nn.softmax_cross_entropy %images, %labels label_smoothing 0.0 : tensor<?x?xf32>, tensor<?xi32>
  return %0 : tensor<f32>
}

// -----

// Tests that labels are integer class indices.
// expected-error@+1 {{@forward's labels must be a rank-1 i32 or i64 tensor, got 'tensor<?xf32>'}}
func.func @forward(%images: tensor<?x4xf32>, %labels: tensor<?xf32>) -> tensor<f32> {
  %0 = nn.reduce_sum %images dims [0, 1] : tensor<?x4xf32>
  return %0 : tensor<f32>
}

// -----

// Tests that images and labels agree on the batch size.
// expected-error@+1 {{images and labels disagree on the batch size: 8 vs 4}}
func.func @forward(%images: tensor<8x4xf32>, %labels: tensor<4xi32>) -> tensor<f32> {
  %0 = nn.reduce_sum %images dims [0, 1] : tensor<8x4xf32>
  return %0 : tensor<f32>
}

// -----

// Tests that @forward returns exactly the loss.
// expected-error@+1 {{@forward must return exactly one value, the loss; it returns 2}}
func.func @forward(%images: tensor<?x4xf32>, %labels: tensor<?xi32>) -> (tensor<f32>, tensor<?x4xf32>) {
  %0 = nn.softmax_cross_entropy %images, %labels label_smoothing 0.0 : tensor<?x4xf32>, tensor<?xi32>
  return %0, %images : tensor<f32>, tensor<?x4xf32>
}

// -----

// Tests that the loss comes from nn.softmax_cross_entropy.
// expected-error@+1 {{@forward must return the result of nn.softmax_cross_entropy (the loss)}}
func.func @forward(%images: tensor<?x4xf32>, %labels: tensor<?xi32>) -> tensor<f32> {
  %0 = nn.reduce_sum %images dims [0, 1] : tensor<?x4xf32>
  return %0 : tensor<f32>
}

// -----

// Tests that the body holds only nn ops.
func.func @forward(%images: tensor<?x4xf32>, %labels: tensor<?xi32>) -> tensor<f32> {
  // expected-error@+1 {{op 'func.call' is not an nn op; a model body holds only nn ops}}
  %0 = func.call @forward(%images, %labels) : (tensor<?x4xf32>, tensor<?xi32>) -> tensor<f32>
  return %0 : tensor<f32>
}

// -----

// Tests that every parameter is read, or it would get no gradient.
// expected-error@+1 {{parameter @unused is never read by @forward, so it would get no gradient}}
nn.parameter @unused : tensor<4x4xf32> = zeros
func.func @forward(%images: tensor<?x4xf32>, %labels: tensor<?xi32>) -> tensor<f32> {
  %0 = nn.softmax_cross_entropy %images, %labels label_smoothing 0.0 : tensor<?x4xf32>, tensor<?xi32>
  return %0 : tensor<f32>
}

// -----

// Tests that the loss reads %labels itself, not something computed.
func.func @forward(%images: tensor<?x4xf32>, %labels: tensor<?xi32>) -> tensor<f32> {
  %0 = nn.argmax %images dim 1 : tensor<?x4xf32>
  %1 = nn.cast %0 : tensor<?xi64> to i32
  // expected-error@+1 {{the loss must compare the logits with %labels, @forward's second argument}}
  %2 = nn.softmax_cross_entropy %images, %1 label_smoothing 0.0 : tensor<?x4xf32>, tensor<?xi32>
  return %2 : tensor<f32>
}

// -----

// Tests that images have no empty dimension.
// expected-error@+1 {{@forward's images have an empty dimension: 'tensor<?x2x0x4xf32>'}}
func.func @forward(%images: tensor<?x2x0x4xf32>, %labels: tensor<?xi32>) -> tensor<f32> {
  %0 = nn.reduce_sum %images dims [2, 3] : tensor<?x2x0x4xf32>
  %1 = nn.softmax_cross_entropy %0, %labels label_smoothing 0.0 : tensor<?x2xf32>, tensor<?xi32>
  return %1 : tensor<f32>
}

// -----

// Tests that an image holds at most 2^31 values.
// expected-error@+1 {{@forward's images have more than 2^31 values per example: 'tensor<?x3x65536x65536xf32>'}}
func.func @forward(%images: tensor<?x3x65536x65536xf32>, %labels: tensor<?xi32>) -> tensor<f32> {
  %0 = nn.global_avg_pool %images : tensor<?x3x65536x65536xf32>
  %1 = nn.softmax_cross_entropy %0, %labels label_smoothing 0.0 : tensor<?x3xf32>, tensor<?xi32>
  return %1 : tensor<f32>
}

// -----

// Names become safetensors keys and plan state names: printable UTF-8, and
// graphc.* is graphc's own.
// expected-error@+1 {{a parameter or state needs a name in printable UTF-8 that does not start with 'graphc.' (graphc's own states) and is not __metadata__ (safetensors' own key), got ''}}
nn.parameter @"" : tensor<4xf32> = zeros
func.func @forward(%images: tensor<?x4xf32>, %labels: tensor<?xi32>) -> tensor<f32> {
  %loss = nn.softmax_cross_entropy %images, %labels label_smoothing 0.0 : tensor<?x4xf32>, tensor<?xi32>
  return %loss : tensor<f32>
}

// -----

// expected-error@+1 {{got 'b\FF'}}
nn.state @"b\ff" : tensor<4xf32> = zeros
func.func @forward(%images: tensor<?x4xf32>, %labels: tensor<?xi32>) -> tensor<f32> {
  %loss = nn.softmax_cross_entropy %images, %labels label_smoothing 0.0 : tensor<?x4xf32>, tensor<?xi32>
  return %loss : tensor<f32>
}

// -----

// expected-error@+1 {{got 'graphc.step'}}
nn.state @graphc.step : tensor<i64> = zeros
func.func @forward(%images: tensor<?x4xf32>, %labels: tensor<?xi32>) -> tensor<f32> {
  %loss = nn.softmax_cross_entropy %images, %labels label_smoothing 0.0 : tensor<?x4xf32>, tensor<?xi32>
  return %loss : tensor<f32>
}

// -----

// expected-error@+1 {{got '__metadata__'}}
nn.state @__metadata__ : tensor<4xf32> = zeros
func.func @forward(%images: tensor<?x4xf32>, %labels: tensor<?xi32>) -> tensor<f32> {
  %loss = nn.softmax_cross_entropy %images, %labels label_smoothing 0.0 : tensor<?x4xf32>, tensor<?xi32>
  return %loss : tensor<f32>
}

// -----

// The optimizer's slot names of a parameter are its own: a statistic named
// like one would be updated as both.
nn.parameter @s : tensor<4xf32> = ones
// expected-error@+1 {{@s.momentum_buffer is the name graphc's optimizer gives a slot of parameter @s; rename it}}
nn.state @s.momentum_buffer : tensor<4xf32> = zeros
func.func @forward(%images: tensor<?x4xf32>, %labels: tensor<?xi32>) -> tensor<f32> {
  %s = nn.load @s : tensor<4xf32>
  %m = nn.load @s.momentum_buffer : tensor<4xf32>
  %b = nn.broadcast %s to %images dims [1] : tensor<4xf32>, tensor<?x4xf32>
  %c = nn.broadcast %m to %images dims [1] : tensor<4xf32>, tensor<?x4xf32>
  %x = nn.mul %images, %b : tensor<?x4xf32>
  %y = nn.add %x, %c : tensor<?x4xf32>
  %loss = nn.softmax_cross_entropy %y, %labels label_smoothing 0.0 : tensor<?x4xf32>, tensor<?xi32>
  return %loss : tensor<f32>
}

// -----

// Tests that an inference model compiles with --forward only.
// expected-error@+1 {{@infer is an inference model: it compiles with --forward only}}
func.func @infer(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %y = nn.relu %x : tensor<2x3xf32>
  return %y : tensor<2x3xf32>
}
