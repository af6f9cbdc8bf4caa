// RUN: graphc-opt %s --graphc-lower-to-plan --split-input-file | FileCheck %s

// Tests a batch-norm statistic of [N, C, 1, 1] (BatchNorm1d on a linear
// layer's [N, C] output, as graphc import writes it; LeViT has one per linear
// layer): the reduced dims of extent 1 loop once, so the reduction keeps its
// innermost dim, C, and reads rows in memory order in the two-stage column
// form (lower-column-reduction.mlir: 8 chunks of 256 rows into the partials,
// then the channels' partials in chunk order), not one channel at a time, a
// row apart. The unit dim's index is the constant 0.
// CHECK-DAG: #[[UNIT:.*]] = affine_map<(d0, d1) -> (0)>
// CHECK: memref.global "private" @graphc_cpu_partials_f64
// CHECK: func.func @{{k[0-9]+}}(%[[X:[^:]*]]: memref<2048x64x1xf32>, %[[Y:[^:]*]]: memref<64xf32>)
// CHECK: scf.parallel (%{{.*}}) = (%{{.*}}) to (%c8)
// CHECK: %[[ROW:.*]] = arith.remui
// CHECK: scf.for %[[C:.*]] = %{{.*}} to %c64
// CHECK: %[[Z:.*]] = affine.apply #[[UNIT]](%[[ROW]], %[[C]])
// CHECK: memref.load %[[X]][%{{.*}}, %{{.*}}, %[[Z]]] : memref<2048x64x1xf32>
// CHECK: arith.extf
// CHECK: } {graphc.parallel_loop}
// CHECK: scf.parallel (%{{.*}}) = (%{{.*}}) to (%c64)
// CHECK: arith.truncf
// CHECK: memref.store %{{.*}}, %[[Y]]
// CHECK: } {graphc.target = "cpu"}
func.func @train_step(%x: tensor<2048x64x1x1xf32>) -> tensor<64xf32> {
  %s = nn.reduce_sum %x dims [0, 2, 3] : tensor<2048x64x1x1xf32>
  return %s : tensor<64xf32>
}

// -----

// Tests a sum over a batch of 1 (a parameter's gradient summed over the
// batch, graphc compile --batch-size 1): its one reduced dim is of extent
// 1, and the reduction keeps it (a nest needs a reduced dim to sum over).
// CHECK-LABEL: func.func @{{k[0-9]+}}(%{{[^:]*}}: memref<1x64xf32>, %{{[^:]*}}: memref<64xf32>)
// CHECK: arith.extf
// CHECK: arith.truncf
// CHECK: memref.store %{{.*}}, %{{.*}} : memref<64xf32>
func.func @train_step(%x: tensor<1x64xf32>) -> tensor<64xf32> {
  %s = nn.reduce_sum %x dims [0] : tensor<1x64xf32>
  return %s : tensor<64xf32>
}
