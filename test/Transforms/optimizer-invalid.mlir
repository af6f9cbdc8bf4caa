// RUN: not graphc-opt %s -graphc-optimizer="optimizer=adagrad" 2>&1 | FileCheck %s --check-prefix=KIND
// RUN: not graphc-opt %s -graphc-optimizer="lr=0" 2>&1 | FileCheck %s --check-prefix=LR
// RUN: not graphc-opt %s -graphc-optimizer="momentum=1.0" 2>&1 | FileCheck %s --check-prefix=MOMENTUM
// RUN: not graphc-opt %s -graphc-optimizer="lr-decay=cosine total-steps=5 warmup-steps=5" 2>&1 | FileCheck %s --check-prefix=COSINE
// RUN: not graphc-opt %s -graphc-optimizer="lr-decay=step decay-gamma=2" 2>&1 | FileCheck %s --check-prefix=STEP
// RUN: not graphc-opt %s -graphc-optimizer="lr-decay=linear" 2>&1 | FileCheck %s --check-prefix=DECAY
// RUN: not graphc-opt %s -graphc-optimizer="optimizer=adam adam-beta2=1" 2>&1 | FileCheck %s --check-prefix=BETA
// RUN: not graphc-opt %s -graphc-optimizer="optimizer=adamw adam-eps=0" 2>&1 | FileCheck %s --check-prefix=EPS
// RUN: not graphc-opt %s -graphc-optimizer="lr=inf" 2>&1 | FileCheck %s --check-prefix=LRINF
// RUN: not graphc-opt %s -graphc-optimizer="lr=1e39" 2>&1 | FileCheck %s --check-prefix=LRBIG
// RUN: not graphc-opt %s -graphc-optimizer="lr=1e-50" 2>&1 | FileCheck %s --check-prefix=LRTINY
// RUN: not graphc-opt %s -graphc-optimizer="weight-decay=inf" 2>&1 | FileCheck %s --check-prefix=WDINF
// RUN: not graphc-opt %s -graphc-optimizer="optimizer=adam adam-eps=inf" 2>&1 | FileCheck %s --check-prefix=EPSINF
// RUN: not graphc-opt %s -graphc-optimizer="optimizer=lars lars-eta=1e40" 2>&1 | FileCheck %s --check-prefix=ETA
// RUN: not graphc-opt %s -graphc-optimizer="lr-decay=cosine total-steps=9 final-lr=-1" 2>&1 | FileCheck %s --check-prefix=FINAL

// Tests that bad optimizer options are reported by name.
// KIND: error: graphc-optimizer: unknown optimizer 'adagrad'; expected sgd, momentum, nesterov, lars, adam or adamw
// LR: error: graphc-optimizer: lr must be > 0, got 0
// MOMENTUM: error: graphc-optimizer: momentum must be in (0, 1), got 1
// COSINE: error: graphc-optimizer: lr-decay=cosine needs total-steps > warmup-steps
// STEP: error: graphc-optimizer: lr-decay=step needs decay-step-size >= 1 and decay-gamma in (0, 1]
// DECAY: error: graphc-optimizer: unknown lr-decay 'linear'; expected constant, cosine or step
// BETA: error: graphc-optimizer: adam-beta1 and adam-beta2 must be in [0, 1), got 0.9 and 1
// EPS: error: graphc-optimizer: adam-eps must be > 0, got 0
// Every rate, decay and epsilon is a finite f32 the kernels can compute with.
// LRINF: error: graphc-optimizer: lr must be 0 or a normal, finite f32 (magnitude in [1.17549e-38, 3.40282e+38]), got inf
// LRBIG: error: graphc-optimizer: lr must be 0 or a normal, finite f32 {{.*}}, got 1e+39
// LRTINY: error: graphc-optimizer: lr must be 0 or a normal, finite f32 {{.*}}, got 1e-50
// WDINF: error: graphc-optimizer: weight-decay must be 0 or a normal, finite f32 {{.*}}, got inf
// EPSINF: error: graphc-optimizer: adam-eps must be 0 or a normal, finite f32 {{.*}}, got inf
// ETA: error: graphc-optimizer: lars-eta must be 0 or a normal, finite f32 {{.*}}, got 1e+40
// FINAL: error: graphc-optimizer: final-lr must be >= 0, got -1
nn.parameter @w : tensor<3xf32> = zeros
func.func @train_step(%g: tensor<3xf32>) {
  nn.apply_gradient @w, %g : tensor<3xf32>
  return
}
