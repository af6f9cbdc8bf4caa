// RUN: graphc-opt %s -graphc-data-parallel="first-bucket-mb=0.0001 bucket-mb=0.01 grad-compression=powersgd:2" | FileCheck %s
// RUN: graphc-opt %s -graphc-data-parallel="grad-compression=powersgd:2 allreduce-dtype=fp16" | FileCheck %s --check-prefix=WIRE
// RUN: graphc-opt %s -graphc-data-parallel="grad-compression=fp16" | FileCheck %s --check-prefix=HALF
// RUN: not graphc-opt %s -graphc-data-parallel="grad-compression=powersgd:0" 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not graphc-opt %S/Inputs/loss-scaled-step.mlir -graphc-data-parallel="grad-compression=powersgd:1" 2>&1 | FileCheck %s --check-prefix=SCALED
// RUN: graphc-opt %s -graphc-data-parallel="grad-compression=topk:0.05:100 momentum=0.5 weight-decay=0.25" | FileCheck %s --check-prefix=TOPK
// RUN: graphc-opt %s -graphc-data-parallel="grad-compression=topk:0.05 momentum=0 weight-decay=0" | FileCheck %s --check-prefix=PLAIN
// RUN: not graphc-opt %S/Inputs/loss-scaled-step.mlir -graphc-data-parallel="grad-compression=topk:0.01" 2>&1 | FileCheck %s --check-prefix=TOPK-SCALED
// RUN: not graphc-opt %s -graphc-data-parallel="grad-compression=topk:0.01 momentum=1" 2>&1 | FileCheck %s --check-prefix=TOPK-M

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

// BAD: error: graphc-data-parallel: grad-compression: expected none, fp16, topk:RATIO[:WARMUP_STEPS] or powersgd:RANK with RANK in [1, 64], got 'powersgd:0'
// SCALED: error: grad-compression=powersgd does not combine with loss scaling

// Top-k (one bucket here), where the bucket starts: @b's dense allreduce,
// then for @w and @k g' = g + wd w, u = m u + g', v = v + u, the selection
// (its count from graphc.step under warm-up: 25% of 512 is 128 entries at
// first, then 32, then k = 26; the sets' size 208 = 8k leaves the selection
// room for candidates), the masking, and one sparse collective over the
// gradients' own memory that sends k + 15 entries after the warm-up.
// TOPK-LABEL: func.func @train_step
// TOPK: %[[STEP:.*]] = nn.load @graphc.step : tensor<i64>
// TOPK: %[[GW:.*]] = nn.add %arg0, %arg0
// TOPK: %[[GK:.*]] = nn.add %arg1, %arg1
// TOPK: %[[FB:.*]] = dist.allreduce_start mean %{{.*}} bucket 0 : tensor<16xf32>
// TOPK: %[[W:.*]] = nn.load @w : tensor<16x32xf32>
// TOPK: %[[WD:.*]] = nn.mul %[[W]], %{{.*}} : tensor<16x32xf32>
// TOPK: %[[G1:.*]] = nn.add %[[GW]], %[[WD]]
// TOPK: nn.load @w.momentum_buffer : tensor<16x32xf32>
// TOPK: %[[U:.*]] = nn.add %{{.*}}, %[[G1]]
// TOPK: %[[V0:.*]] = nn.load @graphc.dgc.w.accumulation : tensor<16x32xf32>
// TOPK: %[[V:.*]] = nn.add %[[V0]], %[[U]]
// TOPK: nn.cmp lt, %[[STEP]], %{{.*}}
// TOPK: %[[VAL:.*]], %[[IDX:.*]] = nn.topk_select %[[V]] count %{{.*}} : tensor<16x32xf32> -> tensor<208xf32>, tensor<208xi32>
// TOPK: %[[VZ:.*]] = nn.zero_at %[[V]], %[[IDX]]
// TOPK: nn.assign @graphc.dgc.w.accumulation, %[[VZ]]
// TOPK: %[[UZ:.*]] = nn.zero_at %[[U]], %[[IDX]]
// TOPK: nn.assign @w.momentum_buffer, %[[UZ]]
// TOPK: nn.topk_select %{{.*}} count %{{.*}} : tensor<8x4x3x3xf32> -> tensor<120xf32>, tensor<120xi32>
// TOPK: %[[F:.*]]:6 = dist.allreduce_start sparse mean %[[VAL]], %[[IDX]], %[[GW]], %{{.*}}, %{{.*}}, %[[GK]] bucket 1 {sent_entries = 41 : i64} : tensor<208xf32>, tensor<208xi32>, tensor<16x32xf32>, tensor<120xf32>, tensor<120xi32>, tensor<8x4x3x3xf32>
// TOPK: %[[R:.*]]:6 = dist.allreduce_wait %[[F]]#0, %[[F]]#1, %[[F]]#2, %[[F]]#3, %[[F]]#4, %[[F]]#5
// TOPK: dist.allreduce_wait %[[FB]]
// TOPK: nn.apply_gradient @w, %[[R]]#2 {graphc.momentum_applied} : tensor<16x32xf32>
// TOPK: nn.apply_gradient @b, %{{.*}} : tensor<16xf32>
// TOPK: nn.apply_gradient @k, %[[R]]#5 {graphc.momentum_applied} : tensor<8x4x3x3xf32>
// TOPK-DAG: nn.state @graphc.dgc.w.accumulation : tensor<16x32xf32> = zeros
// TOPK-DAG: nn.state @w.momentum_buffer : tensor<16x32xf32> = zeros

// Without momentum, weight decay or warm-up: no momentum state; the count is
// k = 26 throughout, K = 8k leaves the selection room for its candidates.
// PLAIN-NOT: momentum_buffer
// PLAIN: %[[K:.*]] = nn.constant dense<26> : tensor<i64>
// PLAIN: nn.topk_select %{{.*}} count %[[K]] : tensor<16x32xf32> -> tensor<208xf32>, tensor<208xi32>
// PLAIN-NOT: momentum_buffer

// TOPK-SCALED: error: grad-compression=topk does not combine with loss scaling
// TOPK-M: error: graphc-data-parallel: grad-compression=topk needs momentum in [0, 1) and weight-decay >= 0
