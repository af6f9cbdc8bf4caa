// A softmax classifier whose @forward also updates a state: the bias is
// scaled by @scale, which the step then doubles. The backward pass reads the
// value @scale had when it was loaded, after the forward's nn.assign has
// overwritten it, so the plan must copy it (runtime/gradient_check_test.cc
// checks the bias gradient, which is wrong by 2x if the new value is read).
module {
  nn.parameter @fc.weight : tensor<10x784xf32> = kaiming_uniform
  nn.parameter @fc.bias : tensor<10xf32> = ones
  nn.state @scale : tensor<10xf32> = ones
  func.func @forward(%images: tensor<?x1x28x28xf32>, %labels: tensor<?xi32>) -> tensor<f32> {
    %flatten = nn.flatten %images start_dim 1 : tensor<?x1x28x28xf32>
    %w = nn.load @fc.weight : tensor<10x784xf32>
    %b = nn.load @fc.bias : tensor<10xf32>
    %s = nn.load @scale : tensor<10xf32>
    %scaled = nn.mul %b, %s : tensor<10xf32>
    %doubled = nn.add %s, %s : tensor<10xf32>
    nn.assign @scale, %doubled : tensor<10xf32>
    %logits = nn.linear %flatten, %w, %scaled : tensor<?x784xf32>, tensor<10x784xf32>, tensor<10xf32>
    %loss = nn.softmax_cross_entropy %logits, %labels label_smoothing 0.000000e+00 : tensor<?x10xf32>, tensor<?xi32>
    return %loss : tensor<f32>
  }
}
