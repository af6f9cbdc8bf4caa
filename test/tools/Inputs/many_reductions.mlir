// Eight reductions fused into one kernel (a relu, then products, each summed
// per channel): the CUDA block reduction's shared buffers, 8 bytes per output
// per thread, must stay within a block's 48 KiB (test/tools/ptx.test).
module {
  nn.parameter @w1 : tensor<4x2x3x3xf32> = kaiming_normal
  nn.parameter @gw : tensor<5x4xf32> = kaiming_uniform
  func.func @forward(%images: tensor<?x2x9x9xf32>, %labels: tensor<?xi32>) -> tensor<f32> {
    %w1 = nn.load @w1 : tensor<4x2x3x3xf32>
    %c1 = nn.conv2d %images, %w1 padding [1, 1, 1, 1] : tensor<?x2x9x9xf32>, tensor<4x2x3x3xf32>
    %a0 = nn.relu %c1 : tensor<?x4x9x9xf32>
    %a1 = nn.mul %a0, %c1 : tensor<?x4x9x9xf32>
    %a2 = nn.mul %a1, %c1 : tensor<?x4x9x9xf32>
    %a3 = nn.mul %a2, %c1 : tensor<?x4x9x9xf32>
    %a4 = nn.mul %a3, %c1 : tensor<?x4x9x9xf32>
    %a5 = nn.mul %a4, %c1 : tensor<?x4x9x9xf32>
    %a6 = nn.mul %a5, %c1 : tensor<?x4x9x9xf32>
    %a7 = nn.mul %a6, %c1 : tensor<?x4x9x9xf32>
    %s0 = nn.reduce_sum %a0 dims [0, 2, 3] : tensor<?x4x9x9xf32>
    %s1 = nn.reduce_sum %a1 dims [0, 2, 3] : tensor<?x4x9x9xf32>
    %s2 = nn.reduce_sum %a2 dims [0, 2, 3] : tensor<?x4x9x9xf32>
    %s3 = nn.reduce_sum %a3 dims [0, 2, 3] : tensor<?x4x9x9xf32>
    %s4 = nn.reduce_sum %a4 dims [0, 2, 3] : tensor<?x4x9x9xf32>
    %s5 = nn.reduce_sum %a5 dims [0, 2, 3] : tensor<?x4x9x9xf32>
    %s6 = nn.reduce_sum %a6 dims [0, 2, 3] : tensor<?x4x9x9xf32>
    %s7 = nn.reduce_sum %a7 dims [0, 2, 3] : tensor<?x4x9x9xf32>
    %t1 = nn.add %s0, %s1 : tensor<4xf32>
    %t2 = nn.add %t1, %s2 : tensor<4xf32>
    %t3 = nn.add %t2, %s3 : tensor<4xf32>
    %t4 = nn.add %t3, %s4 : tensor<4xf32>
    %t5 = nn.add %t4, %s5 : tensor<4xf32>
    %t6 = nn.add %t5, %s6 : tensor<4xf32>
    %t7 = nn.add %t6, %s7 : tensor<4xf32>
    %ub = nn.broadcast %t7 to %c1 dims [1] : tensor<4xf32>, tensor<?x4x9x9xf32>
    %h = nn.mul %c1, %ub : tensor<?x4x9x9xf32>
    %gp = nn.global_avg_pool %h : tensor<?x4x9x9xf32>
    %gw = nn.load @gw : tensor<5x4xf32>
    %logits = nn.linear %gp, %gw : tensor<?x4xf32>, tensor<5x4xf32>
    %loss = nn.softmax_cross_entropy %logits, %labels label_smoothing 0.000000e+00 : tensor<?x5xf32>, tensor<?xi32>
    return %loss : tensor<f32>
  }
}
