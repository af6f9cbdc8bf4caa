// Linear + bias [4,6], flattened, a slice of 12 of its 24 values read by neg+sigmoid.
// Computed again inside its reader, the bias would be no strided view (the
// slice cuts across its repeats): the bias add stays a kernel of its own.
// test/runtime/fusion.test trains it fused and unfused.
module {
  nn.parameter @w : tensor<6x16xf32> = xavier_uniform
  nn.parameter @b : tensor<6xf32> = normal(0.5)
  nn.parameter @fc : tensor<10x12xf32> = xavier_uniform
  nn.parameter @fw : tensor<10x16xf32> = xavier_uniform
  func.func @forward(%images: tensor<4x1x4x4xf32>, %labels: tensor<4xi32>) -> tensor<f32> {
    %x = nn.flatten %images start_dim 1 : tensor<4x1x4x4xf32>
    %w = nn.load @w : tensor<6x16xf32>
    %wt = nn.transpose %w permutation [1, 0] : tensor<6x16xf32>
    %m = nn.matmul %x, %wt : tensor<4x16xf32>, tensor<16x6xf32>
    %b = nn.load @b : tensor<6xf32>
    %bb = nn.broadcast %b to %m dims [1] : tensor<6xf32>, tensor<4x6xf32>
    %s = nn.add %m, %bb : tensor<4x6xf32>
    %f = nn.reshape %s shape [24] : tensor<4x6xf32>
    %h = nn.slice %f dim 0 start 3 size 12 : tensor<24xf32>
    %gn = nn.neg %h : tensor<12xf32>
    %g = nn.sigmoid %gn : tensor<12xf32>
    %g2 = nn.reshape %g shape [1, 12] : tensor<12xf32>
    %fc = nn.load @fc : tensor<10x12xf32>
    %lg1 = nn.linear %g2, %fc : tensor<1x12xf32>, tensor<10x12xf32>
    %bias = nn.reshape %lg1 shape [10] : tensor<1x10xf32>
    %fw = nn.load @fw : tensor<10x16xf32>
    %lg = nn.linear %x, %fw, %bias : tensor<4x16xf32>, tensor<10x16xf32>, tensor<10xf32>
    %loss = nn.softmax_cross_entropy %lg, %labels label_smoothing 0.000000e+00 : tensor<4x10xf32>, tensor<4xi32>
    return %loss : tensor<f32>
  }
}
