// RUN: rm -rf %t && mkdir -p %t
// RUN: graphc-opt %s --graphc-codegen-kernels="targets=cuda dump-dir=%t" | FileCheck %s
// RUN: FileCheck %s --check-prefix=PTX < %t/cuda_sm_90.ptx
// RUN: FileCheck %s --check-prefix=SM80 < %t/cuda_sm_80.ptx
// RUN: graphc-opt %s --graphc-codegen-kernels="targets=all" | FileCheck %s --check-prefix=ALL
// RUN: not graphc-opt %s --graphc-codegen-kernels="targets=tpu" 2>&1 | FileCheck %s --check-prefix=BAD

// Tests the PTX half of kernel codegen: one PTX module per SM with an entry
// per launch, and each kernel's launch sequence.
// - k0, elementwise over 1000 elements: ceil(1000/256) = 4 blocks of 256
//   threads (the tail is guarded, not left on the host).
// - k1, a fill then a reduction whose reduced loop comes first in the model:
//   two launches, the second with the parallel loop outermost (a thread per
//   output), so nothing is launched per reduced index.
// - k2, scalar code: a one-thread launch.
// - k3, rows in parallel with math.exp: libdevice is linked in, so the PTX
//   calls no external __nv_ function.
// - k4, a seed loaded and hashed before a parallel loop (dropout): each thread
//   recomputes it, so the loop still spans the grid.
// - k5, host code that stores, then a loop using its value: nothing can be
//   recomputed, so the whole kernel runs in one thread (correct, slow).
// CHECK: plan.binary cuda_sm80 ptx cpu "sm_80" symbols ["k0", "k1", "k2", "k3", "k4", "k5"] data "
// CHECK-SAME: launches [
// CHECK-SAME: [{args = array<i32: 0, 1, 2>, block = array<i32: 256, 1, 1>, entry = "k0_kernel", grid = array<i32: 4, 1, 1>}],
// CHECK-SAME: [{args = array<i32: 1>, block = array<i32: 256, 1, 1>, entry = "k1_kernel", grid = array<i32: 1, 1, 1>},
// CHECK-SAME:  {args = array<i32: 0, 1>, block = array<i32: 256, 1, 1>, entry = "k1_kernel_0", grid = array<i32: 1, 1, 1>}],
// CHECK-SAME: [{args = array<i32: 0, 1>, block = array<i32: 1, 1, 1>, entry = "k2_kernel", grid = array<i32: 1, 1, 1>}],
// CHECK-SAME: [{args = array<i32: 0, 1>, block = array<i32: 256, 1, 1>, entry = "k3_kernel", grid = array<i32: 1, 1, 1>}],
// CHECK-SAME: [{args = array<i32: 0, 1>, block = array<i32: 256, 1, 1>, entry = "k4_kernel", grid = array<i32: 4, 1, 1>}],
// CHECK-SAME: [{args = array<i32: 0, 1, 2>, block = array<i32: 1, 1, 1>, entry = "k5_kernel", grid = array<i32: 1, 1, 1>}]]
// CHECK: plan.binary cuda_sm90 ptx cpu "sm_90"
// CHECK-NOT: cpu_x86_64
// CHECK-NOT: module @kernels

// PTX: .target sm_90
// PTX-DAG: .visible .entry k0_kernel(
// PTX-DAG: .visible .entry k1_kernel(
// PTX-DAG: .visible .entry k1_kernel_0(
// PTX-DAG: .visible .entry k2_kernel(
// PTX-DAG: .visible .entry k3_kernel(
// PTX-NOT: .extern .func __nv_
// SM80: .target sm_80

// ALL: plan.binary cpu_x86_64 elf_shared_object
// ALL: plan.binary cuda_sm80 ptx
// ALL: plan.binary cuda_sm90 ptx

// BAD: targets must be cpu, cuda or all, got 'tpu'
plan.kernel @k0 ops ["nn.add"] inputs 2 outputs 1 bytes [4000, 4000, 4000] elementwise
plan.kernel @k1 ops ["nn.reduce_sum"] inputs 1 outputs 1 bytes [1280, 40]
plan.kernel @k2 ops ["nn.lr_schedule"] inputs 1 outputs 1 bytes [8, 4]
plan.kernel @k3 ops ["nn.exp"] inputs 1 outputs 1 bytes [1280, 1280]
plan.kernel @k4 ops ["nn.dropout_mask"] inputs 1 outputs 1 bytes [8, 4000]
plan.kernel @k5 ops ["test.serial"] inputs 1 outputs 2 bytes [4, 4, 1200]
module @kernels {
  func.func @k0(%a: memref<1000xf32>, %b: memref<1000xf32>, %c: memref<1000xf32>) {
    linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
                    iterator_types = ["parallel"]}
        ins(%a, %b : memref<1000xf32>, memref<1000xf32>) outs(%c : memref<1000xf32>) {
    ^bb0(%x: f32, %y: f32, %z: f32):
      %s = arith.addf %x, %y : f32
      linalg.yield %s : f32
    }
    return
  }
  func.func @k1(%a: memref<32x10xf32>, %r: memref<10xf32>) {
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
  func.func @k2(%step: memref<i64>, %lr: memref<f32>) {
    %0 = memref.load %step[] : memref<i64>
    %1 = arith.sitofp %0 : i64 to f64
    %c = arith.constant 0.5 : f64
    %2 = arith.mulf %1, %c : f64
    %3 = arith.truncf %2 : f64 to f32
    memref.store %3, %lr[] : memref<f32>
    return
  }
  func.func @k3(%a: memref<32x10xf32>, %b: memref<32x10xf32>) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c10 = arith.constant 10 : index
    %c32 = arith.constant 32 : index
    scf.parallel (%i) = (%c0) to (%c32) step (%c1) {
      scf.for %j = %c0 to %c10 step %c1 {
        %x = memref.load %a[%i, %j] : memref<32x10xf32>
        %e = math.exp %x : f32
        memref.store %e, %b[%i, %j] : memref<32x10xf32>
      }
      scf.reduce
    }
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
}
