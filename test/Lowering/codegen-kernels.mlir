// RUN: rm -rf %t && mkdir -p %t
// RUN: graphc-opt %s --graphc-codegen-kernels="dump-dir=%t" | FileCheck %s
// RUN: llvm-objdump -d --no-show-raw-insn %t/cpu_x86_64.so | FileCheck %s --check-prefix=ASM
// RUN: llvm-objdump -T %t/cpu_x86_64.so | FileCheck %s --check-prefix=SYMBOLS
// RUN: graphc-opt %s --graphc-codegen-kernels="cpu=x86-64 dump-dir=%t" > /dev/null
// RUN: llvm-objdump -d --no-show-raw-insn %t/cpu_x86_64.so | FileCheck %s --check-prefix=SSE

// Tests that the kernel bodies become one shared object with an entry point per
// kernel, vectorized for the requested CPU: AVX2 (ymm) for x86-64-v3, SSE (xmm,
// no ymm) for baseline x86-64.
// CHECK-LABEL: module
// CHECK: plan.binary cpu_x86_64 elf_shared_object cpu "x86-64-v3" symbols ["k0", "k1"] data "\7FELF
// CHECK-NOT: module @kernels
// CHECK-NOT: func.func

// SYMBOLS-DAG: graphc_kernel_k0
// SYMBOLS-DAG: graphc_kernel_k1

// ASM-LABEL: <graphc_kernel_k0>:
// ASM: vaddps {{.*}}%ymm
// ASM-LABEL: <graphc_kernel_k1>:
// ASM: vmaxps {{.*}}%ymm

// SSE-LABEL: <graphc_kernel_k0>:
// SSE-NOT: ymm
// SSE: addps {{.*}}%xmm
plan.kernel @k0 ops ["nn.add"] inputs 2 outputs 1 bytes [4096, 4096, 4096] elementwise
plan.kernel @k1 ops ["nn.relu"] inputs 1 outputs 1 bytes [4096, 4096] elementwise
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
}
