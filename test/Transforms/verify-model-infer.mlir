// RUN: graphc-opt %s -split-input-file -graphc-verify-model=forward-only=true -verify-diagnostics | FileCheck %s

// An inference model: static tensors in and out, nn ops only.
// CHECK: func.func @infer
func.func @infer(%x: tensor<2x3xf32>, %w: tensor<4x3xf32>) -> tensor<2x4xf32> {
  %y = nn.linear %x, %w : tensor<2x3xf32>, tensor<4x3xf32>
  return %y : tensor<2x4xf32>
}

// -----

// Tests that an inference model's shapes are static.
// expected-error@+1 {{@infer's inputs and outputs must be non-empty tensors of static shape with at most 2^31 values, got 'tensor<?x3xf32>'}}
func.func @infer(%x: tensor<?x3xf32>) -> tensor<?x3xf32> {
  %y = nn.relu %x : tensor<?x3xf32>
  return %y : tensor<?x3xf32>
}

// -----

// Tests that an inference model computes no loss.
func.func @infer(%x: tensor<2x3xf32>, %l: tensor<2xi32>) -> tensor<f32> {
  // expected-error@+1 {{an inference model computes no loss and assigns no state}}
  %y = nn.softmax_cross_entropy %x, %l label_smoothing 0.0 : tensor<2x3xf32>, tensor<2xi32>
  return %y : tensor<f32>
}

// -----

// Tests that an inference model returns something.
// expected-error@+1 {{@infer must return at least one value}}
func.func @infer(%x: tensor<2x3xf32>) {
  return
}
