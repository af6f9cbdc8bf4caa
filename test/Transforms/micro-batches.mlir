// RUN: graphc-opt %s -graphc-build-eval-step="micro-batches=2" -graphc-decompose-training-ops -graphc-autodiff="micro-batches=2" | FileCheck %s
// RUN: graphc-opt %s -graphc-build-eval-step="micro-batches=2" -graphc-decompose-training-ops -graphc-autodiff="micro-batches=2" -graphc-mixed-precision="loss-scale=1024" | FileCheck %s --check-prefix=SCALED
// RUN: graphc-opt %s -graphc-build-eval-step="micro-batches=2" -graphc-decompose-training-ops -graphc-autodiff="micro-batches=2" -graphc-data-parallel | FileCheck %s --check-prefix=RANKS
// RUN: graphc-opt %s -graphc-build-eval-step="micro-batches=2" -graphc-decompose-training-ops -graphc-autodiff="micro-batches=2" -graphc-optimizer="optimizer=sgd" -graphc-rematerialize="min-bytes=0" | FileCheck %s --check-prefix=REMAT
// RUN: graphc-opt %s -graphc-decompose-training-ops -graphc-autodiff="micro-batches=3" -graphc-optimizer="optimizer=sgd" -graphc-fuse-elementwise | FileCheck %s --check-prefix=FUSED
// RUN: not graphc-opt %s -graphc-autodiff="micro-batches=0" 2>&1 | FileCheck %s --check-prefix=ZERO

// Gradient accumulation: the step takes twice @forward's batch and runs
// forward then backward on each half in turn, each backward seeded with 1/2
// (PyTorch's loss / N); the gradients of the two halves are summed, and each
// nn.apply_gradient comes after the second half's. The step returns the
// mean of the two losses.
module {
  nn.parameter @fc1.weight : tensor<3x4xf32> = zeros
  nn.parameter @fc1.bias : tensor<3xf32> = zeros
  nn.parameter @fc2.weight : tensor<2x3xf32> = zeros
  func.func @forward(%x: tensor<2x4xf32>, %y: tensor<2xi32>) -> tensor<f32> {
    %w1 = nn.load @fc1.weight : tensor<3x4xf32>
    %b1 = nn.load @fc1.bias : tensor<3xf32>
    %h = nn.linear %x, %w1, %b1 : tensor<2x4xf32>, tensor<3x4xf32>, tensor<3xf32>
    %r = nn.relu %h : tensor<2x3xf32>
    %d = nn.dropout %r rate 5.000000e-01 seed 7 : tensor<2x3xf32>
    %w2 = nn.load @fc2.weight : tensor<2x3xf32>
    %o = nn.linear %d, %w2 : tensor<2x3xf32>, tensor<2x3xf32>
    %loss = nn.softmax_cross_entropy %o, %y label_smoothing 0.0 : tensor<2x2xf32>, tensor<2xi32>
    return %loss : tensor<f32>
  }
}

// CHECK: module attributes {graphc.micro_batches = 2 : i64}
// CHECK-LABEL: func.func @train_step(%{{.*}}: tensor<4x4xf32>, %{{.*}}: tensor<4xi32>) -> tensor<f32>
// First half: its rows, forward, then its backward.
// CHECK: %[[X0:.*]] = nn.slice %arg0 dim 0 start 0 size 2 : tensor<4x4xf32>
// CHECK: %[[Y0:.*]] = nn.slice %arg1 dim 0 start 0 size 2 : tensor<4xi32>
// CHECK: %[[M0:.*]] = nn.dropout_mask %{{.*}}, %{{.*}} rate 5.000000e-01 seed 7 :
// CHECK: %[[L0:.*]] = nn.softmax_cross_entropy %{{.*}}, %[[Y0]] {{.*}} {graphc.micro_batch_loss}
// CHECK: %[[S0:.*]] = nn.constant {graphc.loss_seed} dense<5.000000e-01>
// CHECK: nn.softmax_cross_entropy_backward %[[S0]]
// CHECK: %[[DW2_0:.*]] = nn.matmul {{.*}} transpose_a : tensor<2x2xf32>, tensor<2x3xf32>
// CHECK: %[[DW1_0:.*]] = nn.matmul {{.*}} transpose_a : tensor<2x3xf32>, tensor<2x4xf32>
// CHECK-NOT: nn.apply_gradient
// Second half: the next rows, the next rows of the step's dropout mask.
// CHECK: nn.slice %arg0 dim 0 start 2 size 2
// CHECK: nn.slice %arg1 dim 0 start 2 size 2
// CHECK: %[[OFF:.*]] = nn.constant dense<6> : tensor<i64>
// CHECK: nn.dropout_mask %{{.*}}, %{{.*}} offset %[[OFF]] rate 5.000000e-01 seed 7
// CHECK: %[[L1:.*]] = nn.softmax_cross_entropy {{.*}} {graphc.micro_batch_loss}
// CHECK: %[[SUM:.*]] = nn.add %[[L0]], %[[L1]]
// CHECK: %[[HALF:.*]] = nn.constant dense<5.000000e-01>
// CHECK: %[[MEAN:.*]] = nn.mul %[[SUM]], %[[HALF]]
// CHECK: %[[S1:.*]] = nn.constant {graphc.loss_seed} dense<5.000000e-01>
// CHECK: nn.softmax_cross_entropy_backward %[[S1]]
// CHECK: %[[DW2_1:.*]] = nn.matmul {{.*}} transpose_a : tensor<2x2xf32>, tensor<2x3xf32>
// CHECK: %[[DW2:.*]] = nn.add %[[DW2_0]], %[[DW2_1]] {graphc.gradient_sum}
// CHECK: nn.apply_gradient @fc2.weight, %[[DW2]]
// CHECK: %[[DW1_1:.*]] = nn.matmul {{.*}} transpose_a : tensor<2x3xf32>, tensor<2x4xf32>
// CHECK: %[[DW1:.*]] = nn.add %[[DW1_0]], %[[DW1_1]] {graphc.gradient_sum}
// CHECK: nn.apply_gradient @fc1.weight, %[[DW1]]
// CHECK: return %[[MEAN]]

// @eval_step takes the step's batch too: two halves, logits concatenated,
// hits summed.
// CHECK-LABEL: func.func @eval_step(%{{.*}}: tensor<4x4xf32>, %{{.*}}: tensor<4xi32>) -> (tensor<4x2xf32>, tensor<i64>)
// CHECK: %[[H0:.*]] = nn.reduce_sum
// CHECK: %[[H1:.*]] = nn.reduce_sum
// CHECK: %[[HITS:.*]] = nn.add %[[H0]], %[[H1]] : tensor<i64>
// CHECK: %[[LOGITS:.*]] = nn.concat %{{.*}}, %{{.*}} dim 0 : tensor<2x2xf32>, tensor<2x2xf32>
// CHECK: return %[[LOGITS]], %[[HITS]]

// Loss scaling: each half's seed is the scale times 1/2; the gradients are
// unscaled by 1/S once, after the sum.
// SCALED: %[[S:.*]] = nn.load @graphc.loss_scale
// SCALED: %[[F0:.*]] = nn.constant dense<5.000000e-01>
// SCALED: %[[SEED0:.*]] = nn.mul %[[S]], %[[F0]]
// SCALED: nn.softmax_cross_entropy_backward %[[SEED0]]
// SCALED: %[[SEED1:.*]] = nn.mul %[[S]], %{{.*}} : tensor<f32>
// SCALED: nn.softmax_cross_entropy_backward %[[SEED1]]
// SCALED-NOT: graphc.loss_seed

// Ranks: rank r's mask is rows [4r, 4r + 4) of the global one (6 elements a
// half, 12 a rank), the second half's offset by its 6 within it.
// RANKS: %[[RANK:.*]] = nn.load @graphc.rank
// RANKS: %[[SIZE0:.*]] = nn.constant dense<12> : tensor<i64>
// RANKS: %[[AT0:.*]] = nn.mul %[[RANK]], %[[SIZE0]]
// RANKS: nn.dropout_mask %{{.*}}, %{{.*}} offset %[[AT0]]
// RANKS: %[[WITHIN:.*]] = nn.constant dense<6> : tensor<i64>
// RANKS: %[[SIZE1:.*]] = nn.constant dense<12> : tensor<i64>
// RANKS: %[[RANK1:.*]] = nn.mul %[[RANK]], %[[SIZE1]]
// RANKS: %[[AT1:.*]] = nn.add %[[RANK1]], %[[WITHIN]]
// RANKS: nn.dropout_mask %{{.*}}, %{{.*}} offset %[[AT1]]

// Recomputation per half: each half's ReLU output is recomputed in its own
// backward, from its own pre-activation, before the next half begins.
// REMAT: %[[PRE0:.*]] = nn.linear
// REMAT: nn.softmax_cross_entropy {{.*}} {graphc.micro_batch_loss}
// REMAT: nn.relu %[[PRE0]]
// REMAT: nn.slice %arg0 dim 0 start 2 size 2
// REMAT: %[[PRE1:.*]] = nn.linear
// REMAT: nn.softmax_cross_entropy {{.*}} {graphc.micro_batch_loss}
// REMAT: nn.relu %[[PRE1]]

// Fusion keeps each third's gradient sums in that third: the sum of the
// first two is not put off into the last third's kernel (which would keep
// every third's gradients alive until then).
// FUSED: nn.slice %arg0 dim 0 start 2 size 2
// FUSED: nn.add %{{.*}}, %{{.*}} {graphc.gradient_sum} : tensor<3x4xf32>
// FUSED: nn.slice %arg0 dim 0 start 4 size 2
// FUSED: nn.add %{{.*}}, %{{.*}} {graphc.gradient_sum} : tensor<3x4xf32>
// FUSED: nn.multi_tensor

// ZERO: graphc-autodiff: micro-batches must be positive, got 0
