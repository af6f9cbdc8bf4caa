// RUN: graphc-opt %s -graphc-optimizer="optimizer=sgd ema-decay=0.9" | FileCheck %s
// RUN: not graphc-opt %s -graphc-optimizer="ema-decay=1.5" 2>&1 | FileCheck %s --check-prefix=BAD

// Tests the weights' average: after the updates, every parameter and the
// model's own float states (batch norm's running statistics; not the step
// counter, not an optimizer slot) move a tenth of the way towards their new
// values, or all the way at the first update (graphc.ema_updates = 0); the
// averages are declared last (the other variables keep their seeded initial
// values), and @eval_ema_step is @eval_step reading them.
nn.parameter @fc.weight : tensor<3x4xf32> = zeros
nn.state @bn.running_mean : tensor<3xf32> = zeros
func.func @train_step(%x: tensor<2x4xf32>, %g: tensor<3x4xf32>, %m: tensor<3xf32>) -> tensor<3x4xf32> {
  nn.assign @bn.running_mean, %m : tensor<3xf32>
  nn.apply_gradient @fc.weight, %g : tensor<3x4xf32>
  return %g : tensor<3x4xf32>
}
func.func @eval_step(%x: tensor<2x4xf32>) -> tensor<3x4xf32> {
  %w = nn.load @fc.weight : tensor<3x4xf32>
  %m = nn.load @bn.running_mean : tensor<3xf32>
  return %w : tensor<3x4xf32>
}

// CHECK: nn.assign @fc.weight, %[[NEW:.*]] :
// CHECK: %[[N:.*]] = nn.load @graphc.ema_updates
// CHECK: %[[FIRST:.*]] = nn.cmp eq, %[[N]]
// CHECK: %[[TENTH:.*]] = nn.constant dense<1.000000e-01> : tensor<f32>
// CHECK: %[[ONE:.*]] = nn.constant dense<1.000000e+00> : tensor<f32>
// CHECK: %[[W:.*]] = nn.select %[[FIRST]], %[[ONE]], %[[TENTH]]
// CHECK: %[[X:.*]] = nn.load @fc.weight
// CHECK: %[[E:.*]] = nn.load @graphc.ema.fc.weight
// CHECK: %[[WB:.*]] = nn.broadcast %[[W]] to %[[X]]
// CHECK: %[[D:.*]] = nn.sub %[[X]], %[[E]]
// CHECK: %[[S:.*]] = nn.mul %[[WB]], %[[D]]
// CHECK: %[[A:.*]] = nn.add %[[E]], %[[S]]
// CHECK: nn.assign @graphc.ema.fc.weight, %[[A]]
// CHECK: nn.load @bn.running_mean
// CHECK: nn.assign @graphc.ema.bn.running_mean
// CHECK: nn.add %[[N]], %{{.*}} : tensor<i64>
// CHECK: nn.assign @graphc.ema_updates
// CHECK-NOT: graphc.ema.graphc
// CHECK-LABEL: func.func @eval_step
// CHECK: nn.load @fc.weight
// CHECK: nn.load @bn.running_mean
// CHECK-LABEL: func.func @eval_ema_step
// CHECK: nn.load @graphc.ema.fc.weight
// CHECK: nn.load @graphc.ema.bn.running_mean
// CHECK: nn.state @graphc.ema_updates : tensor<i64> = zeros
// CHECK-NEXT: nn.state @graphc.ema.fc.weight : tensor<3x4xf32> = zeros
// CHECK-NEXT: nn.state @graphc.ema.bn.running_mean : tensor<3xf32> = zeros
// CHECK-NOT: nn.state

// BAD: graphc-optimizer: ema-decay must be in [0, 1) (0: no average), got 1.5
