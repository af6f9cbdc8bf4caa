nn.parameter @w : tensor<4x4xf32> = zeros
