// A linear plus bias whose first half a sigmoid reads: the bias add is
// computed again by its reader, the bias broadcast and sliced, which reads
// the bias's first elements in order: that read stays a copy (a prefix);
// test/runtime/fusion.test.
module {
  nn.parameter @w : tensor<8x16xf32> = xavier_uniform
  nn.parameter @b : tensor<8xf32> = normal(0.5)
  nn.parameter @fc : tensor<10x4xf32> = xavier_uniform
  func.func @forward(%images: tensor<4x1x4x4xf32>, %labels: tensor<4xi32>) -> tensor<f32> {
    %x = nn.flatten %images start_dim 1 : tensor<4x1x4x4xf32>
    %w = nn.load @w : tensor<8x16xf32>
    %wt = nn.transpose %w permutation [1, 0] : tensor<8x16xf32>
    %m = nn.matmul %x, %wt : tensor<4x16xf32>, tensor<16x8xf32>
    %b = nn.load @b : tensor<8xf32>
    %bb = nn.broadcast %b to %m dims [1] : tensor<8xf32>, tensor<4x8xf32>
    %s = nn.add %m, %bb : tensor<4x8xf32>
    %h = nn.slice %s dim 1 start 0 size 4 : tensor<4x8xf32>
    %g = nn.sigmoid %h : tensor<4x4xf32>
    %fc = nn.load @fc : tensor<10x4xf32>
    %lg = nn.linear %g, %fc : tensor<4x4xf32>, tensor<10x4xf32>
    %loss = nn.softmax_cross_entropy %lg, %labels label_smoothing 0.000000e+00 : tensor<4x10xf32>, tensor<4xi32>
    return %loss : tensor<f32>
  }
}
