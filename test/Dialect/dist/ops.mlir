// RUN: graphc-opt %s | graphc-opt | FileCheck %s
// RUN: graphc-opt %s -mlir-print-op-generic | graphc-opt | FileCheck %s

// CHECK-LABEL: func.func @bucket
// CHECK-SAME: (%[[A:.+]]: tensor<10x4xf32>, %[[B:.+]]: tensor<10xf16>)
func.func @bucket(%a: tensor<10x4xf32>, %b: tensor<10xf16>) -> (tensor<10x4xf32>, tensor<10xf16>) {
  // CHECK: %[[F:.+]]:2 = dist.allreduce_start mean %[[A]], %[[B]] bucket 3 wire f16 : tensor<10x4xf32>, tensor<10xf16>
  %f:2 = dist.allreduce_start mean %a, %b bucket 3 wire f16 : tensor<10x4xf32>, tensor<10xf16>
  // CHECK: %[[R:.+]]:2 = dist.allreduce_wait %[[F]]#0, %[[F]]#1 : tensor<10x4xf32>, tensor<10xf16>
  %r:2 = dist.allreduce_wait %f#0, %f#1 : tensor<10x4xf32>, tensor<10xf16>
  // CHECK: return %[[R]]#0, %[[R]]#1
  return %r#0, %r#1 : tensor<10x4xf32>, tensor<10xf16>
}

// CHECK-LABEL: func.func @sum
func.func @sum(%a: tensor<4xbf16>) -> tensor<4xbf16> {
  // CHECK: dist.allreduce_start sum %{{.+}} bucket 0 : tensor<4xbf16>
  %f = dist.allreduce_start sum %a bucket 0 : tensor<4xbf16>
  %r = dist.allreduce_wait %f : tensor<4xbf16>
  return %r : tensor<4xbf16>
}

// CHECK-LABEL: func.func @sparse
func.func @sparse(%v: tensor<2xf32>, %i: tensor<2xi32>, %d: tensor<2x3xf32>) -> tensor<2x3xf32> {
  // CHECK: %[[F:.+]]:3 = dist.allreduce_start sparse mean %{{.+}}, %{{.+}}, %{{.+}} bucket 1 {sent_entries = 1 : i64} : tensor<2xf32>, tensor<2xi32>, tensor<2x3xf32>
  %f:3 = dist.allreduce_start sparse mean %v, %i, %d bucket 1 {sent_entries = 1 : i64} : tensor<2xf32>, tensor<2xi32>, tensor<2x3xf32>
  %r:3 = dist.allreduce_wait %f#0, %f#1, %f#2 : tensor<2xf32>, tensor<2xi32>, tensor<2x3xf32>
  return %r#2 : tensor<2x3xf32>
}
