// RUN: rm -rf %t && mkdir -p %t
// RUN: graphc-opt %s --graphc-codegen-kernels="dump-dir=%t" > /dev/null
// RUN: FileCheck %s < %t/cpu_x86_64.ll
// RUN: llvm-objdump -T %t/cpu_x86_64.so | FileCheck %s --check-prefix=SYMBOLS

// Tests that bf16 data moves through the x86-64 kernels as 16-bit integers.
// x86-64-v3 has no bf16 registers: LLVM holds a bfloat as a float and stores
// it through compiler-rt's __truncsfbf2, an import graphrun refuses. The
// kernels compute in f32; these only move bf16 values:
// - k0 broadcasts one element (its load hoisted out of the loop),
// - k1 selects between two bf16 inputs (vectorized),
// - k2 carries a bf16 value from one iteration to the next (a phi) and
//   compares in f32,
// - k3 computes in bf16 (a model's own bf16 ops): each op runs in f32 and
//   rounds its result (no bf16 arithmetic is left for LLVM to promote).
// CHECK-NOT: load bfloat
// CHECK-NOT: load <{{[0-9]+}} x bfloat>
// CHECK-NOT: store bfloat
// CHECK-NOT: store <{{[0-9]+}} x bfloat>
// CHECK-NOT: phi bfloat
// CHECK-NOT: select {{.*}}bfloat
// No compiler-rt import (__truncsfbf2 and kin).
// SYMBOLS-NOT: *UND*{{.*}} __
// SYMBOLS: graphc_kernel_k0_l0
// SYMBOLS-NOT: *UND*{{.*}} __
plan.kernel @k0 ops ["nn.broadcast"] inputs 1 outputs 1 bytes [2, 2048] elementwise
plan.kernel @k1 ops ["nn.select"] inputs 3 outputs 1 bytes [1024, 2048, 2048, 2048] elementwise
plan.kernel @k2 ops ["nn.max"] inputs 1 outputs 1 bytes [2048, 2]
plan.kernel @k3 ops ["nn.relu", "nn.exp", "nn.add"] inputs 2 outputs 1 bytes [2048, 2048, 2048] elementwise
module @kernels {
  func.func @k0(%a: memref<bf16>, %c: memref<1024xbf16>) {
    linalg.generic {indexing_maps = [affine_map<(d0) -> ()>, affine_map<(d0) -> (d0)>],
                    iterator_types = ["parallel"]}
        ins(%a : memref<bf16>) outs(%c : memref<1024xbf16>) {
    ^bb0(%x: bf16, %z: bf16):
      linalg.yield %x : bf16
    }
    return
  }
  func.func @k1(%p: memref<1024xi8>, %a: memref<1024xbf16>, %b: memref<1024xbf16>, %c: memref<1024xbf16>) {
    linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
                    iterator_types = ["parallel"]}
        ins(%p, %a, %b : memref<1024xi8>, memref<1024xbf16>, memref<1024xbf16>) outs(%c : memref<1024xbf16>) {
    ^bb0(%q: i8, %x: bf16, %y: bf16, %z: bf16):
      %zero = arith.constant 0 : i8
      %t = arith.cmpi ne, %q, %zero : i8
      %s = arith.select %t, %x, %y : bf16
      linalg.yield %s : bf16
    }
    return
  }
  func.func @k2(%a: memref<1024xbf16>, %c: memref<bf16>) {
    %init = arith.constant 0.0 : bf16
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c1024 = arith.constant 1024 : index
    %r = scf.for %i = %c0 to %c1024 step %c1 iter_args(%acc = %init) -> bf16 {
      %x = memref.load %a[%i] : memref<1024xbf16>
      %xf = arith.extf %x : bf16 to f32
      %af = arith.extf %acc : bf16 to f32
      %lt = arith.cmpf olt, %af, %xf : f32
      %m = arith.select %lt, %x, %acc : bf16
      scf.yield %m : bf16
    }
    memref.store %r, %c[] : memref<bf16>
    return
  }
  func.func @k3(%a: memref<1024xbf16>, %b: memref<1024xbf16>, %c: memref<1024xbf16>) {
    %zero = arith.constant 0.0 : bf16
    linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
                    iterator_types = ["parallel"]}
        ins(%a, %b : memref<1024xbf16>, memref<1024xbf16>) outs(%c : memref<1024xbf16>) {
    ^bb0(%x: bf16, %y: bf16, %z: bf16):
      %r = arith.maximumf %x, %zero : bf16
      %e = math.exp %y : bf16
      %s = arith.addf %r, %e : bf16
      linalg.yield %s : bf16
    }
    return
  }
}
