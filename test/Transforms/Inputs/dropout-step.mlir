// A training step with dropout, for data-parallel.mlir.
nn.parameter @w : tensor<8x8xf32> = zeros
nn.state @graphc.step : tensor<i64> = zeros
func.func @train_step(%x: tensor<8x8xf32>, %y: tensor<8xi32>) -> tensor<f32> {
  %step = nn.load @graphc.step : tensor<i64>
  %w = nn.load @w : tensor<8x8xf32>
  %h = nn.matmul %x, %w : tensor<8x8xf32>, tensor<8x8xf32>
  %m = nn.dropout_mask %h, %step rate 0.5 seed 3 : tensor<8x8xf32>, tensor<i64>
  %d = nn.mul %h, %m : tensor<8x8xf32>
  %loss = nn.softmax_cross_entropy %d, %y label_smoothing 0.0 : tensor<8x8xf32>, tensor<8xi32>
  %dw = nn.matmul %x, %m transpose_a : tensor<8x8xf32>, tensor<8x8xf32>
  nn.apply_gradient @w, %dw : tensor<8x8xf32>
  return %loss : tensor<f32>
}
