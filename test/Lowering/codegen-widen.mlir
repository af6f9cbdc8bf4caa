// RUN: rm -rf %t && mkdir -p %t
// RUN: graphc-opt %s --graphc-lower-to-plan --graphc-codegen-kernels="dump-dir=%t" > /dev/null
// RUN: FileCheck %s < %t/cpu_x86_64.ll

// Tests that a loop reading f32 and summing in f64 vectorizes at 8 f32
// lanes (two vectors of f64 sums): LLVM's cost model sizes it by its widest
// type, 4 lanes of f64, which runs the f32 work fused into such a loop (a
// bias's gradient beside the elementwise kernel it fuses with) in half
// vectors. The column sums of a [2048, 256] tensor: the first launch widens
// each value into its column's f64 partial, the second adds the partials.
// CHECK-LABEL: define void @graphc_kernel_k0_l0
// CHECK: fpext <8 x float> {{.*}} to <8 x double>
// CHECK-LABEL: define void @graphc_kernel_k0_l1
func.func @train_step(%x: tensor<2048x256xf32>) -> tensor<256xf32> {
  %s = nn.reduce_sum %x dims [0] : tensor<2048x256xf32>
  return %s : tensor<256xf32>
}
