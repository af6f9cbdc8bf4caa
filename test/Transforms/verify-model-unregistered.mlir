// RUN: graphc-opt %s --allow-unregistered-dialect -split-input-file -graphc-verify-model -verify-diagnostics

// Tests that an op of an unregistered dialect is reported, not dereferenced.
func.func @forward(%images: tensor<?x4xf32>, %labels: tensor<?xi32>) -> tensor<f32> {
  // expected-error@+1 {{op 'foo.bar' is not an nn op; a model body holds only nn ops}}
  "foo.bar"() : () -> ()
  %0 = nn.softmax_cross_entropy %images, %labels label_smoothing 0.0 : tensor<?x4xf32>, tensor<?xi32>
  return %0 : tensor<f32>
}

// -----

// Tests that @forward is one block (control flow needs an unregistered
// dialect here: graphc-opt registers none).
// expected-error@+1 {{@forward must be a single block (no control flow)}}
func.func @forward(%images: tensor<?x4xf32>, %labels: tensor<?xi32>) -> tensor<f32> {
  %0 = nn.softmax_cross_entropy %images, %labels label_smoothing 0.0 : tensor<?x4xf32>, tensor<?xi32>
  "cf.br"()[^next] : () -> ()
^next:
  return %0 : tensor<f32>
}
