// RUN: graphc-opt %s -split-input-file -verify-diagnostics -graphc-optimizer="ema-decay=0.5"

// Tests that the weights' average's names are its own: a module declaring
// one already is refused.
nn.parameter @fc.weight : tensor<3x4xf32> = zeros
// expected-error@+1 {{graphc-optimizer: @graphc.ema.fc.weight is the weights' average's own name}}
nn.state @graphc.ema.fc.weight : tensor<3x4xf32> = ones
func.func @train_step(%g: tensor<3x4xf32>) -> tensor<3x4xf32> {
  nn.apply_gradient @fc.weight, %g : tensor<3x4xf32>
  return %g : tensor<3x4xf32>
}

// -----

nn.parameter @fc.weight : tensor<3x4xf32> = zeros
// expected-error@+1 {{graphc-optimizer: @graphc.ema_updates is the weights' average's own name}}
nn.state @graphc.ema_updates : tensor<i64> = zeros
func.func @train_step(%g: tensor<3x4xf32>) -> tensor<3x4xf32> {
  nn.apply_gradient @fc.weight, %g : tensor<3x4xf32>
  return %g : tensor<3x4xf32>
}
