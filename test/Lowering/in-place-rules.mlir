// RUN: graphc-opt %s --graphc-fuse-elementwise --graphc-lower-to-plan --graphc-plan-memory --split-input-file | FileCheck %s

// Tests that a fused kernel's output never overwrites an input it reads
// through a broadcast: the [8] f32 input has the bytes of the [2, 8] f16
// output, but row 1 still reads what row 0 would have written. The broadcast
// input is in no group (-1).
// CHECK-LABEL: plan.buffer @train_step.input0 : memref<2x8xf32>
// CHECK: plan.launch @k1 [@train_step.v0, @train_step.input0] -> [@train_step.v1]{{$}}
// CHECK: plan.kernel @k1 ops ["nn.broadcast", "nn.add", "nn.cast"] inputs 2 outputs 1 bytes [32, 64, 32] elementwise groups [-1, 0, 0]
func.func @train_step(%x: tensor<2x8xf32>, %s0: tensor<8xf32>) -> tensor<8xf16> {
  %s = nn.neg %s0 : tensor<8xf32>
  %b = nn.broadcast %s to %x dims [1] : tensor<8xf32>, tensor<2x8xf32>
  %c = nn.add %x, %b : tensor<2x8xf32>
  %h = nn.cast %c : tensor<2x8xf32> to f16
  %r = nn.reduce_max %h dims [0] : tensor<2x8xf16>
  return %r : tensor<8xf16>
}

// -----

// Tests that an output overwrites an input in place only when the input's
// other views are all in the output's group: member 0's result would take
// %g's memory, which member 1 reads through a reshape.
// CHECK-LABEL: plan.buffer @a : memref<4xf32>
// CHECK: plan.launch @k1 [@a, @train_step.v0, @train_step.input1, @b, @train_step.v1] -> [@train_step.v2, @train_step.v3]{{$}}
// CHECK: plan.kernel @k1 ops ["nn.sgd", "nn.sgd"] inputs 5 outputs 2 bytes [16, 16, 4, 16, 16, 16, 16] elementwise groups [0, 0, -1, 1, 1, 0, 1]
nn.parameter @a : tensor<4xf32> = zeros
nn.parameter @b : tensor<2x2xf32> = zeros
func.func @train_step(%x: tensor<4xf32>, %lr: tensor<f32>) -> (tensor<4xf32>, tensor<2x2xf32>) {
  %g = nn.relu %x : tensor<4xf32>
  %gb = nn.reshape %g shape [2, 2] : tensor<4xf32>
  %a = nn.load @a : tensor<4xf32>
  %na = nn.sgd %a, %g, %lr weight_decay 0.0 : tensor<4xf32>
  %b = nn.load @b : tensor<2x2xf32>
  %nb = nn.sgd %b, %gb, %lr weight_decay 0.0 : tensor<2x2xf32>
  %ra = nn.neg %na : tensor<4xf32>
  %rb = nn.neg %nb : tensor<2x2xf32>
  return %ra, %rb : tensor<4xf32>, tensor<2x2xf32>
}

