// RUN: graphc-opt %s -graphc-mixed-precision="precision=bf16" | FileCheck %s

// A concat whose result is rounded to half (stored, or read by a GEMM) is
// made of half pieces instead: each piece is rounded where it is computed,
// before the views that carry it to the concat, and a piece that was half
// already is no longer widened for it. The values are the same bits; the
// concat's buffer holds half the bytes. This is attention's packed q/k/v
// gradient: q's and k's scaled gradients (k's transposed), v's from a half
// op, packed, transposed for the projection's backward GEMM and summed into
// the bias gradient.
nn.parameter @w : tensor<6x4xf32> = zeros
nn.parameter @u : tensor<12x5xf32> = zeros
func.func @train_step(%x: tensor<2x4xf32>, %y: tensor<2xi32>) -> (tensor<12xf32>, tensor<2x5xf32>, tensor<2x5xf32>) {
  %w = nn.load @w : tensor<6x4xf32>
  %l = nn.linear %x, %w : tensor<2x4xf32>, tensor<6x4xf32>
  %v = nn.slice %l dim 1 start 0 size 4 : tensor<2x6xf32>
  %vr = nn.reshape %v shape [1, 2, 4] : tensor<2x4xf32>
  %q = nn.mul %x, %x : tensor<2x4xf32>
  %qr = nn.reshape %q shape [1, 2, 4] : tensor<2x4xf32>
  %k = nn.relu %x : tensor<2x4xf32>
  %kt = nn.transpose %k permutation [1, 0] : tensor<2x4xf32>
  %kr = nn.reshape %kt shape [1, 2, 4] : tensor<4x2xf32>
  %p = nn.concat %qr, %kr, %vr dim 0 : tensor<1x2x4xf32>, tensor<1x2x4xf32>, tensor<1x2x4xf32>
  %pt = nn.transpose %p permutation [1, 0, 2] : tensor<3x2x4xf32>
  %pr = nn.reshape %pt shape [2, 12] : tensor<2x3x4xf32>
  %b = nn.reduce_sum %pr dims [0] : tensor<2x12xf32>
  %u = nn.load @u : tensor<12x5xf32>
  %m = nn.matmul %pr, %u : tensor<2x12xf32>, tensor<12x5xf32>
  %r = nn.relu %x : tensor<2x4xf32>
  %ng = nn.neg %x : tensor<2x4xf32>
  %c = nn.concat %r, %ng dim 1 : tensor<2x4xf32>, tensor<2x4xf32>
  %u8 = nn.slice %u dim 0 start 0 size 8 : tensor<12x5xf32>
  %o = nn.matmul %c, %u8 : tensor<2x8xf32>, tensor<8x5xf32>
  return %b, %m, %o : tensor<12xf32>, tensor<2x5xf32>, tensor<2x5xf32>
}

// CHECK-LABEL: func.func @train_step
// CHECK: %[[L:.+]] = nn.linear {{.*}} : tensor<2x4xbf16>, tensor<6x4xbf16>
// CHECK: %[[V:.+]] = nn.slice %[[L]] {{.*}} : tensor<2x6xbf16>
// CHECK: %[[VR:.+]] = nn.reshape %[[V]] shape [1, 2, 4] : tensor<2x4xbf16>
// CHECK: %[[Q:.+]] = nn.mul
// CHECK: %[[QH:.+]] = nn.cast %[[Q]] : tensor<2x4xf32> to bf16
// CHECK: %[[QR:.+]] = nn.reshape %[[QH]] shape [1, 2, 4] : tensor<2x4xbf16>
// CHECK: %[[K:.+]] = nn.relu
// CHECK: %[[KH:.+]] = nn.cast %[[K]] : tensor<2x4xf32> to bf16
// CHECK: %[[KT:.+]] = nn.transpose %[[KH]] permutation [1, 0] : tensor<2x4xbf16>
// CHECK: %[[KR:.+]] = nn.reshape %[[KT]]
// CHECK: %[[P:.+]] = nn.concat %[[QR]], %[[KR]], %[[VR]] dim 0 : tensor<1x2x4xbf16>, tensor<1x2x4xbf16>, tensor<1x2x4xbf16>
// CHECK: %[[PT:.+]] = nn.transpose %[[P]] permutation [1, 0, 2] : tensor<3x2x4xbf16>
// CHECK: %[[PR:.+]] = nn.reshape %[[PT]] shape [2, 12] : tensor<2x3x4xbf16>
// CHECK: %[[PW:.+]] = nn.cast %[[PR]] : tensor<2x12xbf16> to f32
// CHECK: nn.reduce_sum %[[PW]] dims [0]
// CHECK: nn.matmul %[[PR]], %{{.+}} : tensor<2x12xbf16>, tensor<12x5xbf16>
// A concat that copies its pieces, each computed by an op of its own (the
// ReLUs of SqueezeNet's fire modules): they round where they are computed.
// CHECK: %[[R:.+]] = nn.relu
// CHECK: %[[NG:.+]] = nn.neg
// CHECK: %[[RH:.+]] = nn.cast %[[R]] : tensor<2x4xf32> to bf16
// CHECK: %[[NH:.+]] = nn.cast %[[NG]] : tensor<2x4xf32> to bf16
// CHECK: %[[C:.+]] = nn.concat %[[RH]], %[[NH]] dim 1 : tensor<2x4xbf16>, tensor<2x4xbf16>
// CHECK: nn.matmul %[[C]]

// No concat, no move: a transpose of a value computed in f32 is rounded
// after it, where the fused kernel computing the value writes it (moving
// the rounding before it would make the transpose a copy of its own). A
// concat whose piece is read elsewhere too stays f32: the piece is in
// memory in f32 anyway. So does a concat that copies its pieces (along a
// dim after one of extent > 1) when a piece is only a view: it would become
// a kernel of its own to round.
func.func @eval_step(%x: tensor<2x4xf32>, %y: tensor<2xi32>) -> (tensor<4xf32>, tensor<4x4xf32>, tensor<2x5xf32>, tensor<2x4xf32>, tensor<2x5xf32>) {
  %k = nn.relu %x : tensor<2x4xf32>
  %kt = nn.transpose %k permutation [1, 0] : tensor<2x4xf32>
  %s = nn.reduce_sum %kt dims [1] : tensor<4x2xf32>
  %m = nn.matmul %kt, %x : tensor<4x2xf32>, tensor<2x4xf32>
  %q = nn.mul %x, %x : tensor<2x4xf32>
  %c = nn.concat %x, %q dim 1 : tensor<2x4xf32>, tensor<2x4xf32>
  %u = nn.load @u : tensor<12x5xf32>
  %u8 = nn.slice %u dim 0 start 0 size 8 : tensor<12x5xf32>
  %n = nn.matmul %c, %u8 : tensor<2x8xf32>, tensor<8x5xf32>
  %e = nn.exp %q : tensor<2x4xf32>
  %a = nn.relu %x : tensor<2x4xf32>
  %ng = nn.neg %x : tensor<2x4xf32>
  %nr = nn.reshape %ng shape [4, 2] : tensor<2x4xf32>
  %n2 = nn.transpose %nr permutation [1, 0] : tensor<4x2xf32>
  %c2 = nn.concat %a, %n2 dim 1 : tensor<2x4xf32>, tensor<2x4xf32>
  %o = nn.matmul %c2, %u8 : tensor<2x8xf32>, tensor<8x5xf32>
  return %s, %m, %n, %e, %o : tensor<4xf32>, tensor<4x4xf32>, tensor<2x5xf32>, tensor<2x4xf32>, tensor<2x5xf32>
}

// CHECK-LABEL: func.func @eval_step
// CHECK: %[[K:.+]] = nn.relu
// CHECK: %[[KT:.+]] = nn.transpose %[[K]] permutation [1, 0] : tensor<2x4xf32>
// CHECK: nn.cast %[[KT]] : tensor<4x2xf32> to bf16
// CHECK: %[[C:.+]] = nn.concat %arg0, %{{.+}} dim 1 : tensor<2x4xf32>, tensor<2x4xf32>
// CHECK: %[[CH:.+]] = nn.cast %[[C]] : tensor<2x8xf32> to bf16
// CHECK: nn.matmul %[[CH]]
// CHECK: %[[A:.+]] = nn.relu
// CHECK: nn.neg
// CHECK: %[[N:.+]] = nn.transpose
// CHECK: %[[C2:.+]] = nn.concat %[[A]], %[[N]] dim 1 : tensor<2x4xf32>, tensor<2x4xf32>
// CHECK: %[[C2H:.+]] = nn.cast %[[C2]] : tensor<2x8xf32> to bf16
// CHECK: nn.matmul %[[C2H]]
