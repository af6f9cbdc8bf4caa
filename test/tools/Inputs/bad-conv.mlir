nn.parameter @w : tensor<8x3x3x3xf32> = kaiming_normal
func.func @forward(%images: tensor<?x4x8x8xf32>, %labels: tensor<?xi32>) -> tensor<f32> {
  %w = nn.load @w : tensor<8x3x3x3xf32>
  %0 = nn.conv2d %images, %w : tensor<?x4x8x8xf32>, tensor<8x3x3x3xf32>
  %1 = nn.global_avg_pool %0 : tensor<?x8x6x6xf32>
  %2 = nn.softmax_cross_entropy %1, %labels label_smoothing 0.0 : tensor<?x8xf32>, tensor<?xi32>
  return %2 : tensor<f32>
}
