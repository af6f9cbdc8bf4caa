// The backend conformance suite's model (runtime/backend_conformance_test.cc):
// small, and holding every library command in the forms a backend must map:
// a convolution with bias; a grouped, dilated, strided one with padding that
// differs between sides; max pooling; average pooling including padding
// (differing between sides) and excluding it; a linear layer (gemm with bias)
// and a plain matmul; with their backward commands, generated kernels and copies.
// Compiled at batch 256 so that CUDA's reduction forms all appear: a block per
// output (the global average pool), chunks and a second launch (the bias
// gradients), the loss's block forms.
module {
  nn.parameter @w1 : tensor<4x2x3x3xf32> = kaiming_normal
  nn.parameter @b1 : tensor<4xf32> = zeros
  nn.parameter @w2 : tensor<4x1x3x3xf32> = kaiming_normal
  nn.parameter @fw : tensor<5x32xf32> = kaiming_uniform
  nn.parameter @fb : tensor<5xf32> = zeros
  nn.parameter @m : tensor<100x5xf32> = kaiming_uniform
  nn.parameter @gw : tensor<5x4xf32> = kaiming_uniform

  func.func @forward(%images: tensor<?x2x9x9xf32>, %labels: tensor<?xi32>) -> tensor<f32> {
    %w1 = nn.load @w1 : tensor<4x2x3x3xf32>
    %b1 = nn.load @b1 : tensor<4xf32>
    %c1 = nn.conv2d %images, %w1, %b1 padding [1, 1, 1, 1] : tensor<?x2x9x9xf32>, tensor<4x2x3x3xf32>, tensor<4xf32>
    %w2 = nn.load @w2 : tensor<4x1x3x3xf32>
    %c2 = nn.conv2d %c1, %w2 strides [2, 1] padding [2, 1, 2, 0] dilations [2, 2] groups 4 : tensor<?x4x9x9xf32>, tensor<4x1x3x3xf32>
    %r = nn.relu %c2 : tensor<?x4x4x7xf32>
    %p1 = nn.max_pool2d %r window [3, 3] strides [2, 2] padding [1, 1, 1, 1] : tensor<?x4x4x7xf32>
    %p2 = nn.avg_pool2d %c1 window [2, 2] strides [1, 1] padding [1, 0, 1, 0] : tensor<?x4x9x9xf32>
    %p3 = nn.avg_pool2d %p2 window [3, 3] strides [2, 2] padding [1, 1, 1, 1] exclude_padding : tensor<?x4x9x9xf32>
    %f1 = nn.flatten %p1 start_dim 1 : tensor<?x4x2x4xf32>
    %f3 = nn.flatten %p3 start_dim 1 : tensor<?x4x5x5xf32>
    %fw = nn.load @fw : tensor<5x32xf32>
    %fb = nn.load @fb : tensor<5xf32>
    %l1 = nn.linear %f1, %fw, %fb : tensor<?x32xf32>, tensor<5x32xf32>, tensor<5xf32>
    %m = nn.load @m : tensor<100x5xf32>
    %l3 = nn.matmul %f3, %m : tensor<?x100xf32>, tensor<100x5xf32>
    %g = nn.global_avg_pool %c1 : tensor<?x4x9x9xf32>
    %gw = nn.load @gw : tensor<5x4xf32>
    %lg = nn.linear %g, %gw : tensor<?x4xf32>, tensor<5x4xf32>
    %l13 = nn.add %l1, %l3 : tensor<?x5xf32>
    %logits = nn.add %l13, %lg : tensor<?x5xf32>
    %loss = nn.softmax_cross_entropy %logits, %labels label_smoothing 0.000000e+00 : tensor<?x5xf32>, tensor<?xi32>
    return %loss : tensor<f32>
  }
}
