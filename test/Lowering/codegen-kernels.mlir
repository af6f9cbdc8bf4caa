// RUN: rm -rf %t && mkdir -p %t
// RUN: graphc-opt %s --graphc-codegen-kernels="dump-dir=%t" | FileCheck %s
// RUN: llvm-objdump -d --no-show-raw-insn %t/cpu_x86_64.so | FileCheck %s --check-prefix=ASM
// RUN: llvm-objdump -T %t/cpu_x86_64.so | FileCheck %s --check-prefix=SYMBOLS
// RUN: graphc-opt %s --graphc-codegen-kernels="cpu=x86-64 dump-dir=%t" > /dev/null
// RUN: llvm-objdump -d --no-show-raw-insn %t/cpu_x86_64.so | FileCheck %s --check-prefix=SSE

// Tests that the kernel bodies become one shared object with an entry point per
// launch, vectorized for the requested CPU: AVX2 (ymm) for x86-64-v3, SSE (xmm,
// no ymm) for baseline x86-64. A launch runs [begin, end) of its outermost
// parallel loop; grid[0] is that loop's trip count, which the runtime splits
// over its threads.
// - k0, k1: elementwise over 1024 elements, one launch of 1024 iterations each.
// - k2, a fill then a reduction whose reduced loop comes first in the model:
//   two launches, the second over the 10 outputs (parallel loop outermost).
// - k3, scalar code: one launch of one iteration.
// - k4, a seed hashed before a parallel loop (dropout): the hash is recomputed
//   per iteration, so the loop still splits.
// - k5, host code that stores, then a loop using its value: one launch of one
//   iteration runs it all.
// - k6, a loop with a step of 3 over [1, 101): 34 iterations.
// CHECK-LABEL: module
// CHECK: plan.binary cpu_x86_64 elf_shared_object cpu "x86-64-v3" symbols ["k0", "k1", "k2", "k3", "k4", "k5", "k6"] data "\7FELF
// CHECK-SAME: launches [
// CHECK-SAME: [{args = array<i32: 0, 1, 2>, block = array<i32: 1, 1, 1>, entry = "k0_l0", grid = array<i32: 1024, 1, 1>}],
// CHECK-SAME: [{args = array<i32: 0, 1>, block = array<i32: 1, 1, 1>, entry = "k1_l0", grid = array<i32: 1024, 1, 1>}],
// CHECK-SAME: [{args = array<i32: 1>, block = array<i32: 1, 1, 1>, entry = "k2_l0", grid = array<i32: 10, 1, 1>},
// CHECK-SAME:  {args = array<i32: 0, 1>, block = array<i32: 1, 1, 1>, entry = "k2_l1", grid = array<i32: 10, 1, 1>}],
// CHECK-SAME: [{args = array<i32: 0, 1>, block = array<i32: 1, 1, 1>, entry = "k3_l0", grid = array<i32: 1, 1, 1>}],
// CHECK-SAME: [{args = array<i32: 0, 1>, block = array<i32: 1, 1, 1>, entry = "k4_l0", grid = array<i32: 1000, 1, 1>}],
// CHECK-SAME: [{args = array<i32: 0, 1, 2>, block = array<i32: 1, 1, 1>, entry = "k5_l0", grid = array<i32: 1, 1, 1>}],
// CHECK-SAME: [{args = array<i32: 0>, block = array<i32: 1, 1, 1>, entry = "k6_l0", grid = array<i32: 34, 1, 1>}]]
// CHECK-NOT: module @kernels
// CHECK-NOT: func.func

// SYMBOLS-DAG: graphc_kernel_k0_l0
// SYMBOLS-DAG: graphc_kernel_k1_l0
// SYMBOLS-DAG: graphc_kernel_k2_l0
// SYMBOLS-DAG: graphc_kernel_k2_l1
// SYMBOLS-DAG: graphc_kernel_k3_l0
// SYMBOLS-DAG: graphc_kernel_k4_l0
// SYMBOLS-DAG: graphc_kernel_k5_l0
// SYMBOLS-DAG: graphc_kernel_k6_l0

// ASM-LABEL: <graphc_kernel_k0_l0>:
// ASM: vaddps {{.*}}%ymm
// ASM-LABEL: <graphc_kernel_k1_l0>:
// ASM: vmaxps {{.*}}%ymm

// SSE-LABEL: <graphc_kernel_k0_l0>:
// SSE-NOT: ymm
// SSE: addps {{.*}}%xmm
plan.kernel @k0 ops ["nn.add"] inputs 2 outputs 1 bytes [4096, 4096, 4096] elementwise
plan.kernel @k1 ops ["nn.relu"] inputs 1 outputs 1 bytes [4096, 4096] elementwise
plan.kernel @k2 ops ["nn.reduce_sum"] inputs 1 outputs 1 bytes [1280, 40]
plan.kernel @k3 ops ["nn.lr_schedule"] inputs 1 outputs 1 bytes [8, 4]
plan.kernel @k4 ops ["nn.dropout_mask"] inputs 1 outputs 1 bytes [8, 4000]
plan.kernel @k5 ops ["test.serial"] inputs 1 outputs 2 bytes [4, 4, 1200]
plan.kernel @k6 ops ["test.strided"] inputs 0 outputs 1 bytes [400]
module @kernels {
  func.func @k0(%a: memref<1024xf32>, %b: memref<1024xf32>, %c: memref<1024xf32>) {
    linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
                    iterator_types = ["parallel"]}
        ins(%a, %b : memref<1024xf32>, memref<1024xf32>) outs(%c : memref<1024xf32>) {
    ^bb0(%x: f32, %y: f32, %z: f32):
      %s = arith.addf %x, %y : f32
      linalg.yield %s : f32
    }
    return
  }
  func.func @k1(%a: memref<1024xf32>, %c: memref<1024xf32>) {
    %zero = arith.constant 0.0 : f32
    linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
                    iterator_types = ["parallel"]}
        ins(%a : memref<1024xf32>) outs(%c : memref<1024xf32>) {
    ^bb0(%x: f32, %z: f32):
      %r = arith.maximumf %x, %zero : f32
      linalg.yield %r : f32
    }
    return
  }
  func.func @k2(%a: memref<32x10xf32>, %r: memref<10xf32>) {
    %zero = arith.constant 0.0 : f32
    linalg.fill ins(%zero : f32) outs(%r : memref<10xf32>)
    linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>],
                    iterator_types = ["reduction", "parallel"]}
        ins(%a : memref<32x10xf32>) outs(%r : memref<10xf32>) {
    ^bb0(%x: f32, %acc: f32):
      %s = arith.addf %acc, %x : f32
      linalg.yield %s : f32
    }
    return
  }
  func.func @k3(%step: memref<i64>, %lr: memref<f32>) {
    %0 = memref.load %step[] : memref<i64>
    %1 = arith.sitofp %0 : i64 to f64
    %c = arith.constant 0.5 : f64
    %2 = arith.mulf %1, %c : f64
    %3 = arith.truncf %2 : f64 to f32
    memref.store %3, %lr[] : memref<f32>
    return
  }
  func.func @k4(%seed: memref<i64>, %mask: memref<1000xf32>) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c1000 = arith.constant 1000 : index
    %k = arith.constant 7 : i64
    %s = memref.load %seed[] : memref<i64>
    %h = arith.muli %s, %k : i64
    scf.parallel (%i) = (%c0) to (%c1000) step (%c1) {
      %ii = arith.index_cast %i : index to i64
      %x = arith.xori %h, %ii : i64
      %f = arith.uitofp %x : i64 to f32
      memref.store %f, %mask[%i] : memref<1000xf32>
      scf.reduce
    }
    return
  }
  func.func @k5(%a: memref<f32>, %b: memref<f32>, %c: memref<300xf32>) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c300 = arith.constant 300 : index
    %v = memref.load %a[] : memref<f32>
    memref.store %v, %b[] : memref<f32>
    scf.parallel (%i) = (%c0) to (%c300) step (%c1) {
      memref.store %v, %c[%i] : memref<300xf32>
      scf.reduce
    }
    return
  }
  func.func @k6(%o: memref<100xf32>) {
    %c1 = arith.constant 1 : index
    %c3 = arith.constant 3 : index
    %c101 = arith.constant 101 : index
    %one = arith.constant 1.0 : f32
    scf.parallel (%i) = (%c1) to (%c101) step (%c3) {
      %j = arith.subi %i, %c1 : index
      memref.store %one, %o[%j] : memref<100xf32>
      scf.reduce
    }
    return
  }
}
