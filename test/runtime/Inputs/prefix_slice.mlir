// A slice of a parameter from its start along the outermost dim, read by a
// sigmoid: a prefix of its buffer, which a fused kernel must not read as a
// view (linalg takes the loop bound from the whole buffer); test/runtime/fusion.test.
module {
  nn.parameter @p : tensor<20x16xf32> = xavier_uniform
  func.func @forward(%images: tensor<?x1x4x4xf32>, %labels: tensor<?xi32>) -> tensor<f32> {
    %x = nn.flatten %images start_dim 1 : tensor<?x1x4x4xf32>
    %p = nn.load @p : tensor<20x16xf32>
    %s = nn.slice %p dim 0 start 0 size 10 : tensor<20x16xf32>
    %g = nn.sigmoid %s : tensor<10x16xf32>
    %logits = nn.linear %x, %g : tensor<?x16xf32>, tensor<10x16xf32>
    %loss = nn.softmax_cross_entropy %logits, %labels label_smoothing 0.000000e+00 : tensor<?x10xf32>, tensor<?xi32>
    return %loss : tensor<f32>
  }
}
