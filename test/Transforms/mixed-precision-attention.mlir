// RUN: graphc-opt %s -graphc-mixed-precision="precision=bf16" | FileCheck %s
// RUN: graphc-opt %s -graphc-mixed-precision="precision=fp16 loss-scale=none" | FileCheck %s --check-prefix=FP16

// Fused attention in mixed precision: q, k and v (and in backward the output
// and its gradient) in half, one cast per value at its definition; the
// log-sum-exp, the biases and their gradients f32. A bias computed in half
// (here a matmul's) is widened in front of the attention; f32 readers of
// the half results widen them.
nn.parameter @rel : tensor<2x5x5xf32> = zeros
nn.parameter @a : tensor<2x5x3xf32> = zeros
nn.parameter @b : tensor<2x3x5xf32> = zeros
func.func @train_step(%q: tensor<4x5x8xf32>, %k: tensor<4x5x8xf32>, %v: tensor<4x5x8xf32>,
                      %dy: tensor<4x5x8xf32>)
    -> (tensor<4x5x8xf32>, tensor<2x5x5xf32>, tensor<4x5x8xf32>, tensor<2x5x5xf32>) {
  %rel = nn.load @rel : tensor<2x5x5xf32>
  %a = nn.load @a : tensor<2x5x3xf32>
  %b = nn.load @b : tensor<2x3x5xf32>
  %mask = nn.matmul %a, %b : tensor<2x5x3xf32>, tensor<2x3x5xf32>
  %o, %lse = nn.attention %q, %k, %v biases(%rel, %mask : tensor<2x5x5xf32>, tensor<2x5x5xf32>)
      strides [1, 2] : tensor<4x5x8xf32>, tensor<4x5x8xf32>, tensor<4x5x8xf32>
  %dq, %dk, %dv, %drel, %dmask = nn.attention_backward %q, %k, %v, %o, %lse, %dy
      biases(%rel, %mask : tensor<2x5x5xf32>, tensor<2x5x5xf32>) strides [1, 2]
      : tensor<4x5x8xf32>, tensor<4x5x8xf32>, tensor<4x5x8xf32>, tensor<4x5x8xf32>,
        tensor<4x5xf32>, tensor<4x5x8xf32>
  %r = nn.add %o, %dq : tensor<4x5x8xf32>
  return %r, %drel, %dv, %dmask
      : tensor<4x5x8xf32>, tensor<2x5x5xf32>, tensor<4x5x8xf32>, tensor<2x5x5xf32>
}

// CHECK-DAG: %[[DY:.+]] = nn.cast %arg3 : tensor<4x5x8xf32> to bf16
// CHECK-DAG: %[[V:.+]] = nn.cast %arg2 : tensor<4x5x8xf32> to bf16
// CHECK-DAG: %[[K:.+]] = nn.cast %arg1 : tensor<4x5x8xf32> to bf16
// CHECK-DAG: %[[Q:.+]] = nn.cast %arg0 : tensor<4x5x8xf32> to bf16
// CHECK: %[[REL:.+]] = nn.load @rel
// CHECK: %[[MASK:.+]] = nn.matmul {{.*}} : tensor<2x5x3xbf16>, tensor<2x3x5xbf16>
// CHECK: %[[WIDE:.+]] = nn.cast %[[MASK]] : tensor<2x5x5xbf16> to f32
// CHECK: %[[O:.+]], %[[LSE:.+]] = nn.attention %[[Q]], %[[K]], %[[V]] biases(%[[REL]], %[[WIDE]] : tensor<2x5x5xf32>, tensor<2x5x5xf32>) strides [1, 2] : tensor<4x5x8xbf16>, tensor<4x5x8xbf16>, tensor<4x5x8xbf16>
// CHECK: %[[DQ:.+]], %{{.+}}, %[[DV:.+]], %[[DB:.+]]:2 = nn.attention_backward %[[Q]], %[[K]], %[[V]], %[[O]], %[[LSE]], %[[DY]] biases(%[[REL]], %[[WIDE]] : tensor<2x5x5xf32>, tensor<2x5x5xf32>) strides [1, 2] : tensor<4x5x8xbf16>, tensor<4x5x8xbf16>, tensor<4x5x8xbf16>, tensor<4x5x8xbf16>, tensor<4x5xf32>, tensor<4x5x8xbf16>
// CHECK-DAG: %[[OW:.+]] = nn.cast %[[O]] : tensor<4x5x8xbf16> to f32
// CHECK-DAG: %[[DQW:.+]] = nn.cast %[[DQ]] : tensor<4x5x8xbf16> to f32
// CHECK: nn.add %[[OW]], %[[DQW]] : tensor<4x5x8xf32>
// CHECK: %[[DVW:.+]] = nn.cast %[[DV]] : tensor<4x5x8xbf16> to f32
// CHECK: return %{{.+}}, %[[DB]]#0, %[[DVW]], %[[DB]]#1 : tensor<4x5x8xf32>, tensor<2x5x5xf32>, tensor<4x5x8xf32>, tensor<2x5x5xf32>

// FP16: nn.attention {{.*}} : tensor<4x5x8xf16>, tensor<4x5x8xf16>, tensor<4x5x8xf16>
// FP16: nn.attention_backward {{.*}} : tensor<4x5x8xf16>, tensor<4x5x8xf16>, tensor<4x5x8xf16>, tensor<4x5x8xf16>, tensor<4x5xf32>, tensor<4x5x8xf16>
