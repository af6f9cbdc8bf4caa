// RUN: graphc-opt %s --graphc-lower-to-plan | FileCheck %s --check-prefixes=CHECK,CUDA

// Tests the CPU kernel of a reduction that keeps only the innermost dim
// (channels-last batch-norm statistics: [N, H, W, C] summed over N, H, W),
// after the loops collapse to [2048 rows, 64 channels]:
//  - two launches (two top-level scf.parallel loops);
//  - the first over 8 fixed chunks of 256 rows (131072 elements, at least
//    16384 a chunk): each sets its row of 64 float64 partials in the module
//    global to zero, then reads its rows in memory order, each element
//    widened and added into its channel's partial (the loop over channels
//    marked parallel: each channel its own partial);
//  - the second over the 64 channels: the 8 partials in chunk order, then
//    truncated and stored once.
// CHECK: memref.global "private" @graphc_cpu_partials_f64 : memref<4194304xf64> = uninitialized {alignment = 64 : i64}
// CHECK: func.func @[[K:k[0-9]+]](%[[X:[^:]*]]: memref<2048x64xf32>, %[[Y:[^:]*]]: memref<64xf32>)
// CHECK: scf.execute_region {
// CHECK: scf.parallel (%[[P:.*]]) = (%{{.*}}) to (%c8)
// CHECK-NEXT: %[[G:.*]] = memref.get_global @graphc_cpu_partials_f64
// CHECK: scf.for
// CHECK: memref.store %{{.*}}, %[[G]][%{{.*}}] : memref<4194304xf64>
// CHECK: %[[FIRST:.*]] = arith.muli %[[P]], %c256 : index
// CHECK: %[[LAST:.*]] = arith.minsi %{{.*}}, %c2048{{.*}} : index
// CHECK: scf.for %[[R:.*]] = %[[FIRST]] to %[[LAST]]
// CHECK: scf.for %[[C:.*]] = %{{.*}} to %c64
// CHECK: %[[OLD:.*]] = memref.load %[[G]][%[[SLOT:.*]]] : memref<4194304xf64>
// CHECK: %[[V:.*]] = memref.load %[[X]]
// CHECK-NEXT: %[[W:.*]] = arith.extf %[[V]] : f32 to f64
// CHECK-NEXT: %[[NEW:.*]] = arith.addf %[[OLD]], %[[W]] : f64
// CHECK-NEXT: memref.store %[[NEW]], %[[G]][%[[SLOT]]]
// CHECK-NEXT: } {graphc.parallel_loop}
// CHECK: scf.parallel (%[[CH:.*]]) = (%{{.*}}) to (%c64)
// CHECK: %[[SUM:.*]] = scf.for %{{.*}} = %{{.*}} to %c8{{.*}} iter_args(%[[ACC:.*]] = %{{.*}}) -> (f64)
// CHECK: %[[PART:.*]] = memref.load
// CHECK-NEXT: %[[ADD:.*]] = arith.addf %[[ACC]], %[[PART]] : f64
// CHECK: arith.truncf %[[SUM]] : f64 to f32
// CHECK: memref.store %{{.*}}, %[[Y]]
// CHECK: } {graphc.target = "cpu"}
// The CUDA variant: a block is 32 consecutive channels by 8 row lanes (a
// warp reads 32 consecutive floats of one row: coalesced); 2 channel tiles x
// 16 chunks of 128 rows = 32 blocks of 256 threads, each thread summing every
// 8th row of its chunk; the row lanes combine per channel in shared memory
// (strides 128, 64, 32), and the first 32 threads store their channel's
// chunk partial at [chunk * 64 + channel]; then one thread per channel sums
// its 16 partials in chunk order and stores it.
// CUDA: scf.execute_region {
// CUDA: gpu.launch blocks(%{{.*}}) in (%{{.*}} = %c32, %{{.*}} = %c1, %{{.*}} = %c1) threads(%[[T:[^,]*]], %{{.*}}) in (%{{.*}} = %c256, {{.*}} workgroup(%[[SH:.*]] : memref<256xf64, #gpu.address_space<workgroup>>)
// CUDA: %[[LANE:.*]] = arith.remui %[[T]], %c32{{.*}} : index
// CUDA: %[[ROWLANE:.*]] = arith.divui %[[T]], %c32{{.*}} : index
// CUDA: %[[C:.*]] = arith.addi %{{.*}}, %[[LANE]] : index
// CUDA: %[[VALID:.*]] = arith.cmpi ult, %[[C]], %c64{{.*}} : index
// CUDA: arith.minui %[[C]], %c63{{.*}} : index
// CUDA: %[[END:.*]] = arith.select %[[VALID]]
// CUDA: %[[FROM:.*]] = arith.addi %{{.*}}, %[[ROWLANE]] : index
// CUDA: scf.for %{{.*}} = %[[FROM]] to %[[END]] step %c8{{.*}} iter_args
// CUDA: memref.load %{{.*}}[%{{.*}}, %{{.*}}] : memref<2048x64xf32>
// CUDA: arith.addf {{.*}} : f64
// CUDA: memref.store %{{.*}}, %[[SH]][%[[T]]]
// CUDA-NEXT: gpu.barrier
// CUDA-NEXT: %c128{{.*}} = arith.constant 128 : index
// CUDA: gpu.barrier
// CUDA-NEXT: %c64{{.*}} = arith.constant 64 : index
// CUDA: gpu.barrier
// CUDA-NEXT: %c32{{.*}} = arith.constant 32 : index
// CUDA: gpu.barrier
// CUDA-NOT: gpu.barrier
// CUDA: memref.store %{{.*}}, %{{.*}} : memref<65536xf64>
// CUDA: gpu.terminator
// CUDA: gpu.launch blocks(%{{.*}}) in (%{{.*}} = %c1{{.*}}, %{{.*}}) threads(%{{.*}}) in (%{{.*}} = %c64,
// CUDA-NOT: gpu.barrier
// CUDA: scf.for %{{.*}} = %{{.*}} to %c16 step
// CUDA: memref.load %{{.*}} : memref<65536xf64>
// CUDA: arith.truncf
// CUDA: memref.store %{{.*}} : memref<64xf32>
// CUDA: } {graphc.target = "cuda"}
func.func @train_step(%x: tensor<32x8x8x64xf32>) -> tensor<64xf32> {
  %s = nn.reduce_sum %x dims [0, 1, 2] : tensor<32x8x8x64xf32>
  return %s : tensor<64xf32>
}
