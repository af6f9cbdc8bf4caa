// A two-layer perceptron with dropout between the layers, small enough for
// the data-parallel tests: every rank draws its rows of the global mask.
module {
  nn.parameter @fc1.weight : tensor<32x784xf32> = kaiming_uniform
  nn.parameter @fc1.bias : tensor<32xf32> = zeros
  nn.parameter @fc2.weight : tensor<10x32xf32> = kaiming_uniform
  nn.parameter @fc2.bias : tensor<10xf32> = zeros

  func.func @forward(%images: tensor<?x1x28x28xf32>, %labels: tensor<?xi32>) -> tensor<f32> {
    %x = nn.flatten %images start_dim 1 : tensor<?x1x28x28xf32>
    %w1 = nn.load @fc1.weight : tensor<32x784xf32>
    %b1 = nn.load @fc1.bias : tensor<32xf32>
    %h = nn.linear %x, %w1, %b1 : tensor<?x784xf32>, tensor<32x784xf32>, tensor<32xf32>
    %r = nn.relu %h : tensor<?x32xf32>
    %d = nn.dropout %r rate 5.000000e-01 seed 7 : tensor<?x32xf32>
    %w2 = nn.load @fc2.weight : tensor<10x32xf32>
    %b2 = nn.load @fc2.bias : tensor<10xf32>
    %logits = nn.linear %d, %w2, %b2 : tensor<?x32xf32>, tensor<10x32xf32>, tensor<10xf32>
    %loss = nn.softmax_cross_entropy %logits, %labels label_smoothing 0.000000e+00 : tensor<?x10xf32>, tensor<?xi32>
    return %loss : tensor<f32>
  }
}
