// RUN: graphc-opt %s -graphc-data-parallel | FileCheck %s --check-prefix=ONE
// RUN: graphc-opt %s -graphc-data-parallel="first-bucket-mb=0.0000668 bucket-mb=0.0002" | FileCheck %s
// RUN: graphc-opt %s -graphc-data-parallel="first-bucket-mb=0.0000668 bucket-mb=0.0002 allreduce-dtype=fp16" | FileCheck %s --check-prefix=WIRE
// RUN: graphc-opt %s -graphc-data-parallel -graphc-optimizer="optimizer=sgd" | FileCheck %s --check-prefix=UPDATE
// RUN: graphc-opt %s -graphc-data-parallel="first-bucket-mb=0.0000668 bucket-mb=0.0002 overlap=false" | FileCheck %s --check-prefix=AFTER
// RUN: graphc-opt %S/Inputs/dropout-step.mlir -graphc-data-parallel | FileCheck %s --check-prefix=DROPOUT

// Gradients in the order backward completes them: @a (64 bytes), @b (16),
// @c (128); @d's is a constant, the same on every rank.
nn.parameter @a : tensor<4x4xf32> = zeros
nn.parameter @b : tensor<4xf32> = zeros
nn.parameter @c : tensor<8x4xf32> = zeros
nn.parameter @d : tensor<2xf32> = zeros

func.func @train_step(%x: tensor<4x4xf32>, %z: tensor<8x4xf32>) -> tensor<f32> {
  %ga = nn.add %x, %x : tensor<4x4xf32>
  nn.apply_gradient @a, %ga : tensor<4x4xf32>
  %gb = nn.reduce_sum %ga dims [0] : tensor<4x4xf32>
  %gd = nn.constant dense<0.0> : tensor<2xf32>
  nn.apply_gradient @d, %gd : tensor<2xf32>
  %gc = nn.mul %z, %z : tensor<8x4xf32>
  nn.apply_gradient @c, %gc : tensor<8x4xf32>
  nn.apply_gradient @b, %gb : tensor<4xf32>
  %loss = nn.reduce_sum %gc dims [0, 1] : tensor<8x4xf32>
  return %loss : tensor<f32>
}

// Tests that with the default caps (1 MiB first, 25 MiB after) every gradient
// of a small model is one bucket, started once the last gradient is computed
// and the loss (which reads a gradient as a plain value) has read it, and
// waited for before the first update; the constant gradient is not reduced
// and its update comes last.
// ONE: module attributes {graphc.allreduce_buckets = array<i64: 208>}
// ONE-LABEL: func.func @train_step
// ONE: %[[GA:.+]] = nn.add
// ONE: %[[GB:.+]] = nn.reduce_sum %[[GA]]
// ONE: %[[GC:.+]] = nn.mul
// ONE-NEXT: %[[LOSS:.+]] = nn.reduce_sum %[[GC]] dims [0, 1]
// ONE-NEXT: %[[F:.+]]:3 = dist.allreduce_start mean %[[GA]], %[[GB]], %[[GC]] bucket 0 : tensor<4x4xf32>, tensor<4xf32>, tensor<8x4xf32>
// ONE-NEXT: %[[R:.+]]:3 = dist.allreduce_wait %[[F]]#0, %[[F]]#1, %[[F]]#2
// ONE-NEXT: nn.apply_gradient @a, %[[R]]#0
// ONE-NEXT: nn.apply_gradient @c, %[[R]]#2
// ONE-NEXT: nn.apply_gradient @b, %[[R]]#1
// ONE-NEXT: nn.apply_gradient @d, %{{.+}} : tensor<2xf32>
// ONE-NEXT: return %[[LOSS]]

// Tests that a small first bucket starts as soon as @a's gradient exists and
// has been read by backward (@b's gradient is its sum), overlapping the rest
// of backward; the second closes with @c's (after the
// loss reads it). Each wait comes just before the updates that read its
// bucket, the first bucket's first.
// CHECK: module attributes {graphc.allreduce_buckets = array<i64: 64, 144>}
// CHECK-LABEL: func.func @train_step
// CHECK: %[[GA:.+]] = nn.add
// CHECK-NEXT: %[[GB:.+]] = nn.reduce_sum %[[GA]]
// CHECK-NEXT: %[[F0:.+]] = dist.allreduce_start mean %[[GA]] bucket 0 : tensor<4x4xf32>
// CHECK-NEXT: nn.constant
// CHECK-NEXT: %[[GC:.+]] = nn.mul
// CHECK-NEXT: nn.reduce_sum %[[GC]] dims [0, 1]
// CHECK-NEXT: %[[F1:.+]]:2 = dist.allreduce_start mean %[[GB]], %[[GC]] bucket 1 : tensor<4xf32>, tensor<8x4xf32>
// CHECK-NEXT: %[[R0:.+]] = dist.allreduce_wait %[[F0]] : tensor<4x4xf32>
// CHECK-NEXT: nn.apply_gradient @a, %[[R0]]
// CHECK-NEXT: %[[R1:.+]]:2 = dist.allreduce_wait %[[F1]]#0, %[[F1]]#1
// CHECK-NEXT: nn.apply_gradient @c, %[[R1]]#1
// CHECK-NEXT: nn.apply_gradient @b, %[[R1]]#0
// CHECK-NEXT: nn.apply_gradient @d

// Tests that fp16 on the wire marks the buckets of f32 gradients.
// WIRE: dist.allreduce_start mean %{{.+}} bucket 0 wire f16 : tensor<4x4xf32>
// WIRE: dist.allreduce_start mean %{{.+}}, %{{.+}} bucket 1 wire f16 : tensor<4xf32>, tensor<8x4xf32>

// Tests that the optimizer updates the parameters from the reduced gradients.
// UPDATE: %[[R:.+]]:3 = dist.allreduce_wait
// UPDATE: nn.sgd %{{.+}}, %[[R]]#0
// UPDATE: nn.sgd %{{.+}}, %[[R]]#2
// UPDATE: nn.sgd %{{.+}}, %[[R]]#1

// Tests that without overlap both buckets start only after backward, just
// before the first update.
// AFTER: %[[GC:.+]] = nn.mul
// AFTER-NEXT: nn.reduce_sum %[[GC]] dims [0, 1]
// AFTER-NEXT: %[[F0:.+]] = dist.allreduce_start mean %{{.+}} bucket 0
// AFTER-NEXT: %[[F1:.+]]:2 = dist.allreduce_start mean %{{.+}}, %[[GC]] bucket 1
// AFTER-NEXT: dist.allreduce_wait %[[F0]]

// Tests that a dropout mask draws from the rank's place in the global batch:
// offset = @graphc.rank * the mask's 64 elements (a state graphrun sets).
// DROPOUT: %[[RANK:.+]] = nn.load @graphc.rank : tensor<i64>
// DROPOUT: %[[SIZE:.+]] = nn.constant dense<64> : tensor<i64>
// DROPOUT-NEXT: %[[OFFSET:.+]] = nn.mul %[[RANK]], %[[SIZE]] : tensor<i64>
// DROPOUT-NEXT: nn.dropout_mask %{{.+}}, %{{.+}} offset %[[OFFSET]] rate 5.000000e-01 seed 3 : tensor<8x8xf32>, tensor<i64>, tensor<i64>
// DROPOUT: nn.state @graphc.rank : tensor<i64> = zeros
