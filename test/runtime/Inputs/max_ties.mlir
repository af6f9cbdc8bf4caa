// A random model (from an adversarial pass) whose full reduce_max reads a
// value bf16 rounds into ties: test/runtime/max-ties.test.
module {
  nn.parameter @p1 : tensor<2x3xf32> = kaiming_uniform
  nn.parameter @p2 : tensor<2x3xf32> = xavier_uniform
  nn.parameter @p3 : tensor<2x3xf32> = xavier_uniform
  nn.parameter @p4 : tensor<10x10xf32> = kaiming_uniform
  func.func @forward(%images: tensor<5x1x5x3xf32>, %labels: tensor<5xi32>) -> tensor<f32> {
      %v1 = nn.reshape %images shape [5, 5, 3] : tensor<5x1x5x3xf32>
      %v2 = nn.relu %v1 : tensor<5x5x3xf32>
      %v3 = nn.constant dense<0.000000e+00> : tensor<f32>
      %v4 = nn.broadcast %v3 to %v1 dims [] : tensor<f32>, tensor<5x5x3xf32>
      %v5 = nn.cmp ge, %v1, %v4 : tensor<5x5x3xf32>
      %v6 = nn.select %v5, %v1, %v2 : tensor<5x5x3xi1>, tensor<5x5x3xf32>
      %v7 = nn.sigmoid %v6 : tensor<5x5x3xf32>
      %v8 = nn.exp %v7 : tensor<5x5x3xf32>
      %v9 = nn.reshape %v8 shape [25, 3] : tensor<5x5x3xf32>
      %v10 = nn.load @p1 : tensor<2x3xf32>
      %v11 = nn.linear %v9, %v10 : tensor<25x3xf32>, tensor<2x3xf32>
      %v12 = nn.reshape %v11 shape [5, 5, 2] : tensor<25x2xf32>
      %v13 = nn.load @p2 : tensor<2x3xf32>
      %v14 = nn.linear %v9, %v13 : tensor<25x3xf32>, tensor<2x3xf32>
      %v15 = nn.reshape %v14 shape [5, 5, 2] : tensor<25x2xf32>
      %v16 = nn.load @p3 : tensor<2x3xf32>
      %v17 = nn.linear %v9, %v16 : tensor<25x3xf32>, tensor<2x3xf32>
      %v18 = nn.reshape %v17 shape [5, 5, 2] : tensor<25x2xf32>
      %v19 = nn.constant dense<5.000000e-01> : tensor<f32>
      %v20 = nn.broadcast %v19 to %v12 dims [] : tensor<f32>, tensor<5x5x2xf32>
      %v21 = nn.mul %v12, %v20 : tensor<5x5x2xf32>
      %v22 = nn.matmul %v21, %v15 transpose_b : tensor<5x5x2xf32>, tensor<5x5x2xf32>
      %v23 = nn.constant dense<5.000000e-01> : tensor<f32>
      %v24 = nn.broadcast %v23 to %v22 dims [] : tensor<f32>, tensor<5x5x5xf32>
      %v25 = nn.mul %v22, %v24 : tensor<5x5x5xf32>
      %v26 = nn.reduce_max %v25 dims [2] keep_dims : tensor<5x5x5xf32>
      %v27 = nn.broadcast %v26 to %v25 dims [0, 1, 2] : tensor<5x5x1xf32>, tensor<5x5x5xf32>
      %v28 = nn.sub %v25, %v27 : tensor<5x5x5xf32>
      %v29 = nn.exp %v28 : tensor<5x5x5xf32>
      %v30 = nn.reduce_sum %v29 dims [2] keep_dims : tensor<5x5x5xf32>
      %v31 = nn.broadcast %v30 to %v29 dims [0, 1, 2] : tensor<5x5x1xf32>, tensor<5x5x5xf32>
      %v32 = nn.div %v29, %v31 : tensor<5x5x5xf32>
      %v33 = nn.matmul %v32, %v18 : tensor<5x5x5xf32>, tensor<5x5x2xf32>
      %v34 = nn.reduce_max %v33 dims [0, 1, 2] : tensor<5x5x2xf32>
      %v35 = nn.broadcast %v34 to %v33 dims [] : tensor<f32>, tensor<5x5x2xf32>
      %v36 = nn.mul %v33, %v35 : tensor<5x5x2xf32>
      %v37 = nn.transpose %v36 permutation [0, 2, 1] : tensor<5x5x2xf32>
      %v38 = nn.flatten %v37 start_dim 1 : tensor<5x2x5xf32>
      %v39 = nn.load @p4 : tensor<10x10xf32>
      %v40 = nn.linear %v38, %v39 : tensor<5x10xf32>, tensor<10x10xf32>
      %loss = nn.softmax_cross_entropy %v40, %labels label_smoothing 0.000000e+00 : tensor<5x10xf32>, tensor<5xi32>
      return %loss : tensor<f32>
  }
}
