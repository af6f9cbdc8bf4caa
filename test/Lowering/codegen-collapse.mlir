// RUN: rm -rf %t && mkdir -p %t
// RUN: graphc-opt %s --graphc-codegen-kernels | FileCheck %s
// RUN: graphc-opt %s --graphc-codegen-kernels="cpu=x86-64-v3,x86-64-v4 dump-dir=%t" | FileCheck %s --check-prefix=LEVELS
// RUN: llvm-objdump -T %t/cpu_x86-64-v3.so | FileCheck %s --check-prefix=SYMBOLS
// RUN: llvm-objdump -T %t/cpu_x86-64-v4.so | FileCheck %s --check-prefix=SYMBOLS
// RUN: not graphc-opt %s --graphc-codegen-kernels="cpu=x86-64-v3,," 2>&1 | FileCheck %s --check-prefix=BAD-CPU
// BAD-CPU: error: cpu must be x86-64 levels, each once, comma-separated; got 'x86-64-v3,,'

// Tests that the CPU path merges the adjacent loops of a kernel that is one
// all-parallel linalg.generic of its own arguments wherever every operand
// reads them contiguously, so a launch's outermost loop (its grid, which the
// runtime splits over the threads) covers them all:
// - k0, a scalar broadcast into 8x28x28x1x96: one loop of 602112 iterations;
// - k1, a bias broadcast along the last dim of 8x56x96: 448 rows of 96;
// - k2, a transpose of the last two dims: nothing to merge, 4 iterations;
// - k3, an argument both read and written, and k4, which reads its indices
//   (linalg.index): left as they are, 8 iterations;
// - k5, a scalar broadcast into 2x1073741824: merged, the grid would pass
//   int32, so it stays 2 iterations of 2^30.
// With two CPU levels, each gets a shared object with the same launches.
// CHECK: plan.binary cpu_x86_64 elf_shared_object cpu "x86-64-v3" symbols ["k0", "k1", "k2", "k3", "k4", "k5"]
// CHECK-SAME: launches [
// CHECK-SAME: [{args = array<i32: 0, 1>, block = array<i32: 1, 1, 1>, entry = "k0_l0", grid = array<i32: 602112, 1, 1>}],
// CHECK-SAME: [{args = array<i32: 0, 1>, block = array<i32: 1, 1, 1>, entry = "k1_l0", grid = array<i32: 448, 1, 1>}],
// CHECK-SAME: [{args = array<i32: 0, 1>, block = array<i32: 1, 1, 1>, entry = "k2_l0", grid = array<i32: 4, 1, 1>}],
// CHECK-SAME: [{args = array<i32: 1>, block = array<i32: 1, 1, 1>, entry = "k3_l0", grid = array<i32: 8, 1, 1>}],
// CHECK-SAME: [{args = array<i32: 0>, block = array<i32: 1, 1, 1>, entry = "k4_l0", grid = array<i32: 8, 1, 1>}],
// CHECK-SAME: [{args = array<i32: 0, 1>, block = array<i32: 1, 1, 1>, entry = "k5_l0", grid = array<i32: 2, 1, 1>}]]
// CHECK-NOT: plan.binary

// LEVELS: plan.binary cpu_x86_64 elf_shared_object cpu "x86-64-v3" symbols ["k0", "k1", "k2", "k3", "k4", "k5"]
// LEVELS-SAME: entry = "k0_l0", grid = array<i32: 602112, 1, 1>
// LEVELS: plan.binary cpu_x86_64 elf_shared_object cpu "x86-64-v4" symbols ["k0", "k1", "k2", "k3", "k4", "k5"]
// LEVELS-SAME: entry = "k0_l0", grid = array<i32: 602112, 1, 1>
// LEVELS-NOT: plan.binary

// SYMBOLS-DAG: graphc_kernel_k0_l0
// SYMBOLS-DAG: graphc_kernel_k1_l0
// SYMBOLS-DAG: graphc_kernel_k2_l0
// SYMBOLS-DAG: graphc_kernel_k3_l0
// SYMBOLS-DAG: graphc_kernel_k4_l0
// SYMBOLS-DAG: graphc_kernel_k5_l0
plan.kernel @k0 ops ["nn.broadcast"] inputs 1 outputs 1 bytes [4, 2408448]
plan.kernel @k1 ops ["nn.broadcast"] inputs 1 outputs 1 bytes [384, 172032]
plan.kernel @k2 ops ["nn.transpose"] inputs 1 outputs 1 bytes [480, 480]
plan.kernel @k3 ops ["test.in_place"] inputs 1 outputs 1 bytes [960, 960]
plan.kernel @k4 ops ["test.index"] inputs 0 outputs 1 bytes [960]
plan.kernel @k5 ops ["nn.broadcast"] inputs 1 outputs 1 bytes [4, 8589934592]
module @kernels {
  func.func @k0(%s: memref<f32>, %out: memref<8x28x28x1x96xf32>) {
    linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3, d4) -> ()>, affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3, d4)>],
                    iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]}
        ins(%s : memref<f32>) outs(%out : memref<8x28x28x1x96xf32>) {
    ^bb0(%x: f32, %y: f32):
      linalg.yield %x : f32
    }
    return
  }
  func.func @k1(%b: memref<96xf32>, %out: memref<8x56x96xf32>) {
    linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>],
                    iterator_types = ["parallel", "parallel", "parallel"]}
        ins(%b : memref<96xf32>) outs(%out : memref<8x56x96xf32>) {
    ^bb0(%x: f32, %y: f32):
      linalg.yield %x : f32
    }
    return
  }
  func.func @k2(%in: memref<4x6x5xf32>, %out: memref<4x5x6xf32>) {
    linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2, d1)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>],
                    iterator_types = ["parallel", "parallel", "parallel"]}
        ins(%in : memref<4x6x5xf32>) outs(%out : memref<4x5x6xf32>) {
    ^bb0(%x: f32, %y: f32):
      linalg.yield %x : f32
    }
    return
  }
  func.func @k3(%in: memref<8x30xf32>, %out: memref<8x30xf32>) {
    linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>],
                    iterator_types = ["parallel", "parallel"]}
        ins(%out : memref<8x30xf32>) outs(%out : memref<8x30xf32>) {
    ^bb0(%x: f32, %y: f32):
      %r = arith.addf %x, %x : f32
      linalg.yield %r : f32
    }
    return
  }
  func.func @k4(%out: memref<8x30xf32>) {
    linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>],
                    iterator_types = ["parallel", "parallel"]}
        outs(%out : memref<8x30xf32>) {
    ^bb0(%y: f32):
      %i = linalg.index 1 : index
      %c = arith.index_cast %i : index to i32
      %f = arith.sitofp %c : i32 to f32
      linalg.yield %f : f32
    }
    return
  }
  func.func @k5(%s: memref<f32>, %out: memref<2x1073741824xf32>) {
    linalg.generic {indexing_maps = [affine_map<(d0, d1) -> ()>, affine_map<(d0, d1) -> (d0, d1)>],
                    iterator_types = ["parallel", "parallel"]}
        ins(%s : memref<f32>) outs(%out : memref<2x1073741824xf32>) {
    ^bb0(%x: f32, %y: f32):
      linalg.yield %x : f32
    }
    return
  }
}
