// RUN: graphc-opt %s -graphc-set-batch-size=batch-size=0 -verify-diagnostics

// Tests that the batch size must be positive.
// expected-error@+1 {{graphc-set-batch-size needs batch-size > 0, got 0}}
module {
  func.func @forward(%images: tensor<?x3xf32>, %labels: tensor<?xi32>) -> tensor<f32> {
    %1 = nn.softmax_cross_entropy %images, %labels label_smoothing 0.0 : tensor<?x3xf32>, tensor<?xi32>
    return %1 : tensor<f32>
  }
}
