// Batch norm over 147,456 values per channel (16 x 96 x 96) whose inputs sit
// at a DC offset of 30 (reduction-precision.test): the batch-norm weight's
// gradient, sum(dy * x_hat), is only as good as the float32 reductions behind
// it (the mean, the variance, the sum itself). A linear layer over every
// normalized value gives every element its own dy.
module {
  nn.parameter @bn.weight : tensor<2xf32> = zeros
  nn.parameter @bn.bias : tensor<2xf32> = zeros
  nn.state @bn.running_mean : tensor<2xf32> = zeros
  nn.state @bn.running_var : tensor<2xf32> = ones
  nn.parameter @fc.weight : tensor<10x18432xf32> = kaiming_uniform
  nn.parameter @fc.bias : tensor<10xf32> = zeros
  func.func @forward(%images: tensor<?x2x96x96xf32>, %labels: tensor<?xi32>) -> tensor<f32> {
    %w = nn.load @bn.weight : tensor<2xf32>
    %b = nn.load @bn.bias : tensor<2xf32>
    %mean = nn.load @bn.running_mean : tensor<2xf32>
    %var = nn.load @bn.running_var : tensor<2xf32>
    %bn = nn.batch_norm %images, %w, %b, %mean, %var epsilon 1.000000e-05 momentum 1.000000e-01 : tensor<?x2x96x96xf32>, tensor<2xf32>
    %flat = nn.flatten %bn start_dim 1 : tensor<?x2x96x96xf32>
    %fc_w = nn.load @fc.weight : tensor<10x18432xf32>
    %fc_b = nn.load @fc.bias : tensor<10xf32>
    %fc = nn.linear %flat, %fc_w, %fc_b : tensor<?x18432xf32>, tensor<10x18432xf32>, tensor<10xf32>
    %loss = nn.softmax_cross_entropy %fc, %labels label_smoothing 0.000000e+00 : tensor<?x10xf32>, tensor<?xi32>
    return %loss : tensor<f32>
  }
}
