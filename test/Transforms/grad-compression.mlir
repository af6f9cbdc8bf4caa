// RUN: graphc-opt %s -graphc-data-parallel="first-bucket-mb=0.0001 bucket-mb=0.01 grad-compression=powersgd:2" | FileCheck %s
// RUN: graphc-opt %s -graphc-data-parallel="grad-compression=powersgd:2 allreduce-dtype=fp16" | FileCheck %s --check-prefix=WIRE
// RUN: graphc-opt %s -graphc-data-parallel="grad-compression=fp16" | FileCheck %s --check-prefix=HALF
// RUN: not graphc-opt %s -graphc-data-parallel="grad-compression=powersgd:0" 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not graphc-opt %S/Inputs/loss-scaled-step.mlir -graphc-data-parallel="grad-compression=powersgd:1" 2>&1 | FileCheck %s --check-prefix=SCALED

// Two buckets: @w's [16, 32] gradient first (its own, by the 0.0001 MiB
// first bucket), then @b's [16] and @k's [8, 4, 3, 3] together. @w and @k
// go as rank-2 factors ((16 + 32) * 2 and (8 + 36) * 2, under half of 512
// and 288); @b stays in its bucket, a vector.
nn.parameter @w : tensor<16x32xf32> = zeros
nn.parameter @b : tensor<16xf32> = zeros
nn.parameter @k : tensor<8x4x3x3xf32> = zeros

func.func @train_step(%x: tensor<16x32xf32>, %y: tensor<8x4x3x3xf32>) -> tensor<f32> {
  %gw = nn.add %x, %x : tensor<16x32xf32>
  %gb = nn.reduce_sum %gw dims [1] : tensor<16x32xf32>
  %gk = nn.add %y, %y : tensor<8x4x3x3xf32>
  nn.apply_gradient @w, %gw : tensor<16x32xf32>
  nn.apply_gradient @b, %gb : tensor<16xf32>
  nn.apply_gradient @k, %gk : tensor<8x4x3x3xf32>
  %loss = nn.constant dense<0.0> : tensor<f32>
  return %loss : tensor<f32>
}

// The P phase where each bucket starts: M = G + E, P^T = orth(Q^T) M^T,
// summed across ranks.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[GW:.*]] = nn.add %arg0, %arg0
// CHECK: %[[EW:.*]] = nn.load @graphc.powersgd.w.error : tensor<16x32xf32>
// CHECK: %[[MW:.*]] = nn.add %[[GW]], %[[EW]]
// CHECK: %[[QW:.*]] = nn.load @graphc.powersgd.w.q : tensor<2x32xf32>
// CHECK: %[[OW:.*]] = nn.orthonormalize %[[QW]]
// CHECK: %[[PW:.*]] = nn.matmul %[[OW]], %[[MW]] transpose_b
// CHECK: %[[FW:.*]] = dist.allreduce_start sum %[[PW]] bucket 0 : tensor<2x16xf32>
// The second bucket: @b's allreduce starts first, then @k's factor.
// CHECK: %[[FB:.*]] = dist.allreduce_start mean %{{.*}} bucket 1 : tensor<16xf32>
// CHECK: %[[RK:.*]] = nn.reshape %{{.*}} shape [8, 36]
// CHECK: nn.load @graphc.powersgd.k.error : tensor<8x36xf32>
// CHECK: %[[FK:.*]] = dist.allreduce_start sum %{{.*}} bucket 2 : tensor<2x8xf32>
// The Q phase of every bucket after backward, before the first wait:
// Q^T = orth(sum P^T) M, averaged.
// CHECK: %[[SW:.*]] = dist.allreduce_wait %[[FW]]
// CHECK: %[[PWO:.*]] = nn.orthonormalize %[[SW]] : tensor<2x16xf32>
// CHECK: %[[QNW:.*]] = nn.matmul %[[PWO]], %[[MW]] :
// CHECK: %[[GQW:.*]] = dist.allreduce_start mean %[[QNW]] bucket 3 : tensor<2x32xf32>
// CHECK: dist.allreduce_wait %[[FK]]
// CHECK: dist.allreduce_start mean %{{.*}} bucket 4 : tensor<2x36xf32>
// Then, where each bucket's wait was: G' = P Q^T, E = M - G', Q kept.
// CHECK: %[[MQW:.*]] = dist.allreduce_wait %[[GQW]]
// CHECK: %[[AW:.*]] = nn.matmul %[[PWO]], %[[MQW]] transpose_a
// CHECK: %[[NEW:.*]] = nn.sub %[[MW]], %[[AW]]
// CHECK: nn.assign @graphc.powersgd.w.error, %[[NEW]]
// CHECK: nn.assign @graphc.powersgd.w.q, %[[MQW]]
// CHECK: nn.apply_gradient @w, %[[AW]] : tensor<16x32xf32>
// CHECK: %[[AK:.*]] = nn.reshape %{{.*}} shape [8, 4, 3, 3]
// CHECK: dist.allreduce_wait %[[FB]]
// CHECK: nn.apply_gradient @b
// CHECK: nn.apply_gradient @k, %[[AK]] : tensor<8x4x3x3xf32>
// CHECK-DAG: nn.state @graphc.powersgd.w.error : tensor<16x32xf32> = zeros
// CHECK-DAG: nn.state @graphc.powersgd.w.q : tensor<2x32xf32> = normal(1.000000e+00)
// CHECK-DAG: nn.state @graphc.powersgd.k.q : tensor<2x36xf32> = normal(1.000000e+00)

// The factors travel as the bucket would: fp16 on the wire.
// WIRE: dist.allreduce_start sum %{{.*}} wire f16 : tensor<2x16xf32>
// WIRE: dist.allreduce_start mean %{{.*}} wire f16 : tensor<2x32xf32>

// fp16 alone is the half wire, and no factors.
// HALF-NOT: nn.orthonormalize
// HALF: dist.allreduce_start mean {{.*}} wire f16
// HALF-NOT: nn.orthonormalize

// BAD: error: graphc-data-parallel: grad-compression: expected none, fp16 or powersgd:RANK with RANK in [1, 64], got 'powersgd:0'
// SCALED: error: grad-compression=powersgd does not combine with loss scaling
