// e^x of every input, as the logits: graphc compile --forward makes a plan
// whose output is nn.exp's (exp-accuracy.test).
module {
  func.func @forward(%x: tensor<?x32768xf32>, %labels: tensor<?xi32>) -> tensor<f32> {
    %e = nn.exp %x : tensor<?x32768xf32>
    %loss = nn.softmax_cross_entropy %e, %labels label_smoothing 0.000000e+00 : tensor<?x32768xf32>, tensor<?xi32>
    return %loss : tensor<f32>
  }
}
