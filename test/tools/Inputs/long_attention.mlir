// One attention over 1024 tokens (a 32x32 image's pixels, each embedded in
// 16 dims by q, k and v projections), softmax written out as graphc import
// writes it: the [N, 1024, 1024] scores are the tensor fused attention never
// stores.
module {
  nn.parameter @wq : tensor<16x1xf32> = xavier_uniform
  nn.parameter @wk : tensor<16x1xf32> = xavier_uniform
  nn.parameter @wv : tensor<16x1xf32> = xavier_uniform
  nn.parameter @fc.weight : tensor<10x16384xf32> = zeros
  nn.parameter @fc.bias : tensor<10xf32> = zeros

  func.func @forward(%images: tensor<?x1x32x32xf32>, %labels: tensor<?xi32>) -> tensor<f32> {
    %x = nn.reshape %images shape [-1, 1] : tensor<?x1x32x32xf32>
    %wq = nn.load @wq : tensor<16x1xf32>
    %wk = nn.load @wk : tensor<16x1xf32>
    %wv = nn.load @wv : tensor<16x1xf32>
    %q2 = nn.linear %x, %wq : tensor<?x1xf32>, tensor<16x1xf32>
    %k2 = nn.linear %x, %wk : tensor<?x1xf32>, tensor<16x1xf32>
    %v2 = nn.linear %x, %wv : tensor<?x1xf32>, tensor<16x1xf32>
    %q = nn.reshape %q2 shape [-1, 1024, 16] : tensor<?x16xf32>
    %k = nn.reshape %k2 shape [-1, 1024, 16] : tensor<?x16xf32>
    %v = nn.reshape %v2 shape [-1, 1024, 16] : tensor<?x16xf32>
    %s = nn.matmul %q, %k transpose_b : tensor<?x1024x16xf32>, tensor<?x1024x16xf32>
    %m = nn.reduce_max %s dims [2] keep_dims : tensor<?x1024x1024xf32>
    %mb = nn.broadcast %m to %s dims [0, 1, 2] : tensor<?x1024x1xf32>, tensor<?x1024x1024xf32>
    %d = nn.sub %s, %mb : tensor<?x1024x1024xf32>
    %e = nn.exp %d : tensor<?x1024x1024xf32>
    %z = nn.reduce_sum %e dims [2] keep_dims : tensor<?x1024x1024xf32>
    %zb = nn.broadcast %z to %e dims [0, 1, 2] : tensor<?x1024x1xf32>, tensor<?x1024x1024xf32>
    %p = nn.div %e, %zb : tensor<?x1024x1024xf32>
    %o = nn.matmul %p, %v : tensor<?x1024x1024xf32>, tensor<?x1024x16xf32>
    %f = nn.reshape %o shape [-1, 16384] : tensor<?x1024x16xf32>
    %fc_w = nn.load @fc.weight : tensor<10x16384xf32>
    %fc_b = nn.load @fc.bias : tensor<10xf32>
    %logits = nn.linear %f, %fc_w, %fc_b : tensor<?x16384xf32>, tensor<10x16384xf32>, tensor<10xf32>
    %loss = nn.softmax_cross_entropy %logits, %labels label_smoothing 0.000000e+00 : tensor<?x10xf32>, tensor<?xi32>
    return %loss : tensor<f32>
  }
}
