// RUN: graphc-opt %s -graphc-optimizer | FileCheck %s --check-prefix=MOMENTUM
// RUN: graphc-opt %s -graphc-optimizer="optimizer=sgd lr=0.5 weight-decay=0.01" | FileCheck %s --check-prefix=SGD
// RUN: graphc-opt %s -graphc-optimizer="optimizer=nesterov exclude-bn-bias=false" | FileCheck %s --check-prefix=NESTEROV
// RUN: graphc-opt %s -graphc-optimizer="optimizer=lars lars-eta=0.002 weight-decay=5e-5 lr-decay=cosine warmup-steps=5 total-steps=100 final-lr=0.001" | FileCheck %s --check-prefix=LARS
// RUN: graphc-opt %s -graphc-optimizer="lr-decay=step decay-step-size=30 decay-gamma=0.5" | FileCheck %s --check-prefix=STEPDECAY
// RUN: graphc-opt %s -graphc-optimizer="optimizer=adam lr=0.001 adam-beta1=0.8 weight-decay=0.01" | FileCheck %s --check-prefix=ADAM
// RUN: graphc-opt %s -graphc-optimizer="optimizer=adamw" | FileCheck %s --check-prefix=ADAMW

nn.parameter @fc.weight : tensor<3x4xf32> = zeros
nn.parameter @fc.bias : tensor<3xf32> = zeros
func.func @train_step(%x: tensor<2x4xf32>, %y: tensor<2xi32>) -> tensor<f32> {
  %w = nn.load @fc.weight : tensor<3x4xf32>
  %b = nn.load @fc.bias : tensor<3xf32>
  %0 = nn.linear %x, %w, %b : tensor<2x4xf32>, tensor<3x4xf32>, tensor<3xf32>
  %1 = nn.softmax_cross_entropy %0, %y label_smoothing 0.0 : tensor<2x3xf32>, tensor<2xi32>
  %one = nn.constant dense<1.0> : tensor<f32>
  %d = nn.softmax_cross_entropy_backward %one, %0, %y label_smoothing 0.0 : tensor<f32>, tensor<2x3xf32>, tensor<2xi32>
  %dw = nn.matmul %d, %x transpose_a : tensor<2x3xf32>, tensor<2x4xf32>
  %db = nn.reduce_sum %d dims [0] : tensor<2x3xf32>
  nn.apply_gradient @fc.bias, %db : tensor<3xf32>
  nn.apply_gradient @fc.weight, %dw : tensor<3x4xf32>
  return %1 : tensor<f32>
}

// Tests the default: momentum 0.9, weight decay 1e-4 but not on the bias, a
// momentum buffer per parameter, a constant rate from the step counter, and
// the counter incremented at the end of the step.
// MOMENTUM-DAG: nn.state @graphc.step : tensor<i64> = zeros
// MOMENTUM-DAG: nn.state @fc.weight.momentum_buffer : tensor<3x4xf32> = zeros
// MOMENTUM-DAG: nn.state @fc.bias.momentum_buffer : tensor<3xf32> = zeros
// MOMENTUM-LABEL: func.func @train_step
// MOMENTUM: %[[STEP:.+]] = nn.load @graphc.step : tensor<i64>
// MOMENTUM: %[[LR:.+]] = nn.lr_schedule %[[STEP]] {base_lr = 1.000000e-01 : f64, decay = 0 : i32} : tensor<i64>
// MOMENTUM: %[[B:.+]] = nn.load @fc.bias : tensor<3xf32>
// MOMENTUM: %[[BV:.+]] = nn.load @fc.bias.momentum_buffer : tensor<3xf32>
// MOMENTUM: %[[NB:.+]], %[[NBV:.+]] = nn.sgd_momentum %[[B]], %{{.+}}, %[[BV]], %[[LR]] momentum 9.000000e-01 weight_decay 0.000000e+00 : tensor<3xf32>
// MOMENTUM: nn.assign @fc.bias, %[[NB]] : tensor<3xf32>
// MOMENTUM: nn.assign @fc.bias.momentum_buffer, %[[NBV]] : tensor<3xf32>
// MOMENTUM: nn.sgd_momentum %{{.+}} momentum 9.000000e-01 weight_decay 1.000000e-04 : tensor<3x4xf32>
// MOMENTUM: nn.assign @fc.weight,
// MOMENTUM: %[[NEXT:.+]] = nn.add %[[STEP]], %{{.+}} : tensor<i64>
// MOMENTUM: nn.assign @graphc.step, %[[NEXT]] : tensor<i64>
// MOMENTUM-NOT: nn.apply_gradient

// SGD-NOT: momentum_buffer
// SGD: nn.lr_schedule %{{.+}} {base_lr = 5.000000e-01 : f64, decay = 0 : i32}
// SGD: %[[NB:.+]] = nn.sgd %{{.+}}, %{{.+}}, %{{.+}} weight_decay 0.000000e+00 : tensor<3xf32>
// SGD: nn.assign @fc.bias, %[[NB]]
// SGD: nn.sgd %{{.+}} weight_decay 1.000000e-02 : tensor<3x4xf32>

// With exclude-bn-bias=false the bias gets weight decay too.
// NESTEROV: nn.sgd_momentum %{{.+}} weight_decay 1.000000e-04 nesterov : tensor<3xf32>
// NESTEROV: nn.sgd_momentum %{{.+}} weight_decay 1.000000e-04 nesterov : tensor<3x4xf32>

// LARS scales the weight, not the bias (You et al. 2017), with a warmup and a
// cosine decay computed on the device.
// LARS: nn.lr_schedule %{{.+}} {base_lr = 1.000000e-01 : f64, decay = 1 : i32, final_lr = 1.000000e-03 : f64, total_steps = 100 : i64, warmup_steps = 5 : i64}
// LARS: nn.sgd_momentum %{{.+}} weight_decay 0.000000e+00 : tensor<3xf32>
// LARS: nn.lars %{{.+}} momentum 9.000000e-01 weight_decay 5.000000e-05 eta 2.000000e-03 : tensor<3x4xf32>

// STEPDECAY: nn.lr_schedule %{{.+}} {base_lr = 1.000000e-01 : f64, decay = 2 : i32, gamma = 5.000000e-01 : f64, step_size = 30 : i64}

// Adam: two moments per parameter (PyTorch's state names), the bias
// corrections 1 / (1 - beta1^t) and 1 / sqrt(1 - beta2^t) of t = step + 1 as
// rank-0 ops computed once, shared by every update.
// ADAM-DAG: nn.state @fc.weight.exp_avg : tensor<3x4xf32> = zeros
// ADAM-DAG: nn.state @fc.weight.exp_avg_sq : tensor<3x4xf32> = zeros
// ADAM-DAG: nn.state @fc.bias.exp_avg : tensor<3xf32> = zeros
// ADAM-NOT: momentum_buffer
// ADAM: %[[STEP:.+]] = nn.load @graphc.step : tensor<i64>
// ADAM: %[[LR:.+]] = nn.lr_schedule %[[STEP]] {base_lr = 1.000000e-03 : f64, decay = 0 : i32}
// ADAM: %[[F:.+]] = nn.cast %[[STEP]] : tensor<i64> to f32
// ADAM: %[[T:.+]] = nn.add %[[F]], %{{.+}} : tensor<f32>
// ADAM: %[[C1:.+]] = nn.div
// ADAM: %[[C2:.+]] = nn.rsqrt
// ADAM: %[[M:.+]] = nn.load @fc.bias.exp_avg : tensor<3xf32>
// ADAM: %[[V:.+]] = nn.load @fc.bias.exp_avg_sq : tensor<3xf32>
// ADAM: %[[NB:.+]], %[[NM:.+]], %[[NV:.+]] = nn.adam %{{.+}}, %{{.+}}, %[[M]], %[[V]], %[[LR]], %[[C1]], %[[C2]] beta1 8.000000e-01 beta2 0.99899999999999999 epsilon 1.000000e-08 weight_decay 0.000000e+00 : tensor<3xf32>
// ADAM: nn.assign @fc.bias, %[[NB]]
// ADAM: nn.assign @fc.bias.exp_avg, %[[NM]]
// ADAM: nn.assign @fc.bias.exp_avg_sq, %[[NV]]
// ADAM: nn.adam {{.+}} weight_decay 1.000000e-02 : tensor<3x4xf32>

// ADAMW: nn.adam {{.+}} weight_decay 0.000000e+00 decoupled : tensor<3xf32>
// ADAMW: nn.adam {{.+}} weight_decay 1.000000e-04 decoupled : tensor<3x4xf32>
