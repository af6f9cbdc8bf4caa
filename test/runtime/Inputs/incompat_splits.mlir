// Two bias adds, [8,12] + b1[8] (dims [0]) and [12,8] + b2[12] (dims [0]),
// each read flat through a copying identity view, multiplied in one kernel.
// Computed again inside the one reader, the two biases would split its 96
// elements as 8 x 12 and as 12 x 8: the bias adds stay kernels of their own.
// test/runtime/fusion.test trains it fused and unfused.
module {
  nn.parameter @w1 : tensor<24x16xf32> = xavier_uniform
  nn.parameter @w2 : tensor<24x16xf32> = xavier_uniform
  nn.parameter @b1 : tensor<8xf32> = normal(0.5)
  nn.parameter @b2 : tensor<12xf32> = normal(0.5)
  nn.parameter @fc : tensor<10x96xf32> = xavier_uniform
  nn.parameter @fw : tensor<10x16xf32> = xavier_uniform
  func.func @forward(%images: tensor<4x1x4x4xf32>, %labels: tensor<4xi32>) -> tensor<f32> {
    %x = nn.flatten %images start_dim 1 : tensor<4x1x4x4xf32>
    %w1 = nn.load @w1 : tensor<24x16xf32>
    %w1t = nn.transpose %w1 permutation [1, 0] : tensor<24x16xf32>
    %m1 = nn.matmul %x, %w1t : tensor<4x16xf32>, tensor<16x24xf32>
    %m1r = nn.reshape %m1 shape [8, 12] : tensor<4x24xf32>
    %b1 = nn.load @b1 : tensor<8xf32>
    %bb1 = nn.broadcast %b1 to %m1r dims [0] : tensor<8xf32>, tensor<8x12xf32>
    %y1 = nn.add %m1r, %bb1 : tensor<8x12xf32>
    %w2 = nn.load @w2 : tensor<24x16xf32>
    %w2t = nn.transpose %w2 permutation [1, 0] : tensor<24x16xf32>
    %m2 = nn.matmul %x, %w2t : tensor<4x16xf32>, tensor<16x24xf32>
    %m2r = nn.reshape %m2 shape [12, 8] : tensor<4x24xf32>
    %b2 = nn.load @b2 : tensor<12xf32>
    %bb2 = nn.broadcast %b2 to %m2r dims [0] : tensor<12xf32>, tensor<12x8xf32>
    %y2 = nn.add %m2r, %bb2 : tensor<12x8xf32>
    %t1 = nn.transpose %y1 permutation [1, 0] : tensor<8x12xf32>
    %t1b = nn.transpose %t1 permutation [1, 0] : tensor<12x8xf32>
    %f1 = nn.reshape %t1b shape [96] : tensor<8x12xf32>
    %t2 = nn.transpose %y2 permutation [1, 0] : tensor<12x8xf32>
    %t2b = nn.transpose %t2 permutation [1, 0] : tensor<8x12xf32>
    %f2 = nn.reshape %t2b shape [96] : tensor<12x8xf32>
    %z = nn.mul %f1, %f2 : tensor<96xf32>
    %g = nn.sigmoid %z : tensor<96xf32>
    %g2 = nn.reshape %g shape [1, 96] : tensor<96xf32>
    %fc = nn.load @fc : tensor<10x96xf32>
    %lg1 = nn.linear %g2, %fc : tensor<1x96xf32>, tensor<10x96xf32>
    %bias = nn.reshape %lg1 shape [10] : tensor<1x10xf32>
    %fw = nn.load @fw : tensor<10x16xf32>
    %lg = nn.linear %x, %fw, %bias : tensor<4x16xf32>, tensor<10x16xf32>, tensor<10xf32>
    %loss = nn.softmax_cross_entropy %lg, %labels label_smoothing 0.000000e+00 : tensor<4x10xf32>, tensor<4xi32>
    return %loss : tensor<f32>
  }
}
