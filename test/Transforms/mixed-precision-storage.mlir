// RUN: graphc-opt %s -graphc-mixed-precision="precision=bf16" | FileCheck %s

// Which values mixed precision stores in half: batch-sized f32 values with
// several readers, wherever the batch went.
// - A class token (f32, no batch) concatenated before half patch embeddings:
//   the concat widens the embeddings and the batch goes with them, so the sum
//   after it (read by two ops) is stored in half. (Once the concat lost the
//   batch, and so did every activation after it: ViT stored one.)
// - A view read only by views (the exporter's reshape before q, k and v's
//   slices) is not stored: its readers read it where it is computed.
nn.parameter @cls : tensor<1x1x8xf32> = zeros
nn.parameter @pos : tensor<1x5x8xf32> = zeros
nn.parameter @w : tensor<8x16xf32> = zeros
func.func @train_step(%x: tensor<8x16xf32>, %y: tensor<2xi32>) -> (tensor<5x2x8xf32>, tensor<5x2x8xf32>) {
  %w = nn.load @w : tensor<8x16xf32>
  %l = nn.linear %x, %w : tensor<8x16xf32>, tensor<8x16xf32>
  %e = nn.reshape %l shape [2, 4, 8] : tensor<8x8xf32>
  %cls = nn.load @cls : tensor<1x1x8xf32>
  %zero = nn.constant dense<0.0> : tensor<2x1x8xf32>
  %c = nn.broadcast %cls to %zero dims [0, 1, 2] : tensor<1x1x8xf32>, tensor<2x1x8xf32>
  %t = nn.concat %c, %e dim 1 : tensor<2x1x8xf32>, tensor<2x4x8xf32>
  %pos = nn.load @pos : tensor<1x5x8xf32>
  %p = nn.broadcast %pos to %t dims [0, 1, 2] : tensor<1x5x8xf32>, tensor<2x5x8xf32>
  %s = nn.add %t, %p : tensor<2x5x8xf32>
  %r = nn.relu %s : tensor<2x5x8xf32>
  %m = nn.mul %s, %r : tensor<2x5x8xf32>
  %v = nn.transpose %m permutation [1, 0, 2] : tensor<2x5x8xf32>
  %a = nn.slice %v dim 2 start 0 size 4 : tensor<5x2x8xf32>
  %b = nn.slice %v dim 2 start 4 size 4 : tensor<5x2x8xf32>
  %ar = nn.relu %a : tensor<5x2x4xf32>
  %br = nn.sigmoid %b : tensor<5x2x4xf32>
  %ac = nn.concat %ar, %ar dim 2 : tensor<5x2x4xf32>, tensor<5x2x4xf32>
  %bc = nn.concat %br, %br dim 2 : tensor<5x2x4xf32>, tensor<5x2x4xf32>
  return %ac, %bc : tensor<5x2x8xf32>, tensor<5x2x8xf32>
}

// CHECK: nn.linear {{.*}} : tensor<8x16xbf16>, tensor<8x16xbf16>
// CHECK: %[[E:.+]] = nn.reshape
// CHECK: %[[EW:.+]] = nn.cast %[[E]] : tensor<2x4x8xbf16> to f32
// CHECK: %[[T:.+]] = nn.concat %{{.+}}, %[[EW]] dim 1 : tensor<2x1x8xf32>, tensor<2x4x8xf32>
// CHECK: %[[S:.+]] = nn.add %[[T]], %{{.+}} : tensor<2x5x8xf32>
// CHECK: %[[SH:.+]] = nn.cast %[[S]] : tensor<2x5x8xf32> to bf16
// CHECK: %[[SW:.+]] = nn.cast %[[SH]] : tensor<2x5x8xbf16> to f32
// CHECK: nn.relu %[[SW]]
// CHECK: %[[M:.+]] = nn.mul
// CHECK-NOT: nn.cast %[[M]]
// CHECK: %[[V:.+]] = nn.transpose %[[M]] permutation [1, 0, 2] : tensor<2x5x8xf32>
// CHECK-NOT: nn.cast %[[V]]
// CHECK: nn.slice %[[V]] dim 2 start 0
// CHECK: nn.slice %[[V]] dim 2 start 4

// Statistics stay f32 even when batch-sized with several readers: a
// layer norm's mean, and 1/sqrt(var + eps) computed from it (statistics and
// stretched values alone). What they normalize is an activation and is
// stored in half. A view read by two other ops (ConvNeXt's permute before
// its residual add and backward) is stored as any value is.
func.func @eval_step(%x: tensor<8x16xf32>, %y: tensor<2xi32>) -> (tensor<2x8x4xf32>, tensor<2x8x4xf32>, tensor<2x4x1xf32>, tensor<2x4x1xf32>) {
  %w = nn.load @w : tensor<8x16xf32>
  %l = nn.linear %x, %w : tensor<8x16xf32>, tensor<8x16xf32>
  %e = nn.reshape %l shape [2, 4, 8] : tensor<8x8xf32>
  %mean = nn.reduce_mean %e dims [2] keep_dims : tensor<2x4x8xf32>
  %mb = nn.broadcast %mean to %e dims [0, 1, 2] : tensor<2x4x1xf32>, tensor<2x4x8xf32>
  %c = nn.sub %e, %mb : tensor<2x4x8xf32>
  %sq = nn.mul %c, %c : tensor<2x4x8xf32>
  %var = nn.reduce_mean %sq dims [2] keep_dims : tensor<2x4x8xf32>
  %eps = nn.constant dense<1.0e-5> : tensor<f32>
  %epsb = nn.broadcast %eps to %var dims [] : tensor<f32>, tensor<2x4x1xf32>
  %ve = nn.add %var, %epsb : tensor<2x4x1xf32>
  %rstd = nn.rsqrt %ve : tensor<2x4x1xf32>
  %rb = nn.broadcast %rstd to %e dims [0, 1, 2] : tensor<2x4x1xf32>, tensor<2x4x8xf32>
  %n = nn.mul %c, %rb : tensor<2x4x8xf32>
  %nt = nn.transpose %n permutation [0, 2, 1] : tensor<2x4x8xf32>
  %nr = nn.relu %nt : tensor<2x8x4xf32>
  %ns = nn.sigmoid %nt : tensor<2x8x4xf32>
  return %nr, %ns, %mean, %rstd : tensor<2x8x4xf32>, tensor<2x8x4xf32>, tensor<2x4x1xf32>, tensor<2x4x1xf32>
}

// CHECK-LABEL: func.func @eval_step
// CHECK: %[[MEAN:.+]] = nn.reduce_mean %{{.+}} dims [2] keep_dims : tensor<2x4x8xf32>
// CHECK-NOT: nn.cast %[[MEAN]]
// CHECK: %[[C:.+]] = nn.sub
// CHECK: nn.cast %[[C]] : tensor<2x4x8xf32> to bf16
// CHECK: %[[RSTD:.+]] = nn.rsqrt %{{.+}} : tensor<2x4x1xf32>
// CHECK-NOT: nn.cast %[[RSTD]]
// CHECK: %[[N:.+]] = nn.mul
// CHECK-NOT: nn.cast %[[N]]
// CHECK: %[[NT:.+]] = nn.transpose %[[N]]
// CHECK: nn.cast %[[NT]] : tensor<2x8x4xf32> to bf16
// CHECK: return
