// A model that computes some of its activations in both half formats
// (fp16 and bf16), as a user simulating lower-precision hardware would:
// under --amp=bf16 the first cast is bf16 -> f16, under --amp=fp16 the
// second is f16 -> bf16, and without --amp the kernels compute the f16
// sigmoid and the bf16 relu, mul, row sum and subtraction themselves; test/runtime/half-casts.test.
module {
  nn.parameter @w : tensor<12x16xf32> = xavier_uniform
  nn.parameter @fc : tensor<10x12xf32> = xavier_uniform
  func.func @forward(%images: tensor<4x1x4x4xf32>, %labels: tensor<4xi32>) -> tensor<f32> {
    %x = nn.flatten %images start_dim 1 : tensor<4x1x4x4xf32>
    %w = nn.load @w : tensor<12x16xf32>
    %h = nn.linear %x, %w : tensor<4x16xf32>, tensor<12x16xf32>
    %r = nn.relu %h : tensor<4x12xf32>
    %a = nn.cast %r : tensor<4x12xf32> to f16
    %a2 = nn.sigmoid %a : tensor<4x12xf16>
    %b = nn.cast %a2 : tensor<4x12xf16> to bf16
    %b2 = nn.relu %b : tensor<4x12xbf16>
    %b3 = nn.mul %b2, %b : tensor<4x12xbf16>
    %m = nn.reduce_sum %b3 dims [1] keep_dims : tensor<4x12xbf16>
    %mb = nn.broadcast %m to %b3 dims [0, 1] : tensor<4x1xbf16>, tensor<4x12xbf16>
    %b4 = nn.sub %b3, %mb : tensor<4x12xbf16>
    %c = nn.cast %b4 : tensor<4x12xbf16> to f32
    %s = nn.sigmoid %c : tensor<4x12xf32>
    %fc = nn.load @fc : tensor<10x12xf32>
    %lg = nn.linear %s, %fc : tensor<4x12xf32>, tensor<10x12xf32>
    %loss = nn.softmax_cross_entropy %lg, %labels label_smoothing 0.000000e+00 : tensor<4x10xf32>, tensor<4xi32>
    return %loss : tensor<f32>
  }
}
