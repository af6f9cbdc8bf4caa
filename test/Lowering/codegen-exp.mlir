// RUN: rm -rf %t && mkdir -p %t
// RUN: graphc-opt %s --graphc-codegen-kernels="dump-dir=%t" > /dev/null
// RUN: FileCheck %s < %t/cpu_x86_64.ll
// RUN: llvm-objdump -T %t/cpu_x86_64.so | FileCheck %s --check-prefix=SYMBOLS

// Tests that e^x in the x86-64 kernels is computed in the kernel, not by
// libm: math.exp on f32 (and f16, through f32) expands into
// contract/exp_f32.h's branch-free arithmetic, so a loop of it vectorizes
// (llvm.exp would be one expf call per lane). f64 keeps libm's exp.
// (test/tools/exp-accuracy.test checks its values.)
// CHECK-LABEL: define void @graphc_kernel_k0_l0
// CHECK-NOT: exp
// CHECK: fmul <8 x float>
// CHECK-NOT: exp
// CHECK: bitcast <8 x i32> {{.*}} to <8 x float>
// CHECK-NOT: exp
// CHECK: ret void
// CHECK-LABEL: define void @graphc_kernel_k1_l0
// CHECK-NOT: exp
// CHECK: fpext <{{[0-9]+}} x half>
// CHECK-NOT: exp
// CHECK: ret void
// CHECK-LABEL: define void @graphc_kernel_k2_l0
// CHECK: @llvm.exp.v4f64
// SYMBOLS-NOT: expf
// SYMBOLS: exp
// SYMBOLS-NOT: expf
plan.kernel @k0 ops ["nn.exp"] inputs 1 outputs 1 bytes [4096, 4096] elementwise
plan.kernel @k1 ops ["nn.exp"] inputs 1 outputs 1 bytes [2048, 2048] elementwise
plan.kernel @k2 ops ["nn.exp"] inputs 1 outputs 1 bytes [8192, 8192] elementwise
module @kernels {
  func.func @k0(%a: memref<1024xf32>, %c: memref<1024xf32>) {
    linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
                    iterator_types = ["parallel"]}
        ins(%a : memref<1024xf32>) outs(%c : memref<1024xf32>) {
    ^bb0(%x: f32, %z: f32):
      %e = math.exp %x : f32
      linalg.yield %e : f32
    }
    return
  }
  func.func @k1(%a: memref<1024xf16>, %c: memref<1024xf16>) {
    linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
                    iterator_types = ["parallel"]}
        ins(%a : memref<1024xf16>) outs(%c : memref<1024xf16>) {
    ^bb0(%x: f16, %z: f16):
      %e = math.exp %x : f16
      linalg.yield %e : f16
    }
    return
  }
  func.func @k2(%a: memref<1024xf64>, %c: memref<1024xf64>) {
    linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
                    iterator_types = ["parallel"]}
        ins(%a : memref<1024xf64>) outs(%c : memref<1024xf64>) {
    ^bb0(%x: f64, %z: f64):
      %e = math.exp %x : f64
      linalg.yield %e : f64
    }
    return
  }
}
