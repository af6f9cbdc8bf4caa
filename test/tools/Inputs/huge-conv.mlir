nn.parameter @w : tensor<512x3x7x7xf32> = kaiming_normal
func.func @forward(%images: tensor<?x3x16384x16384xf32>, %labels: tensor<?xi32>) -> tensor<f32> {
  %w = nn.load @w : tensor<512x3x7x7xf32>
  %0 = nn.conv2d %images, %w padding [3, 3, 3, 3] : tensor<?x3x16384x16384xf32>, tensor<512x3x7x7xf32>
  %1 = nn.global_avg_pool %0 : tensor<?x512x16384x16384xf32>
  %2 = nn.softmax_cross_entropy %1, %labels label_smoothing 0.0 : tensor<?x512xf32>, tensor<?xi32>
  return %2 : tensor<f32>
}
