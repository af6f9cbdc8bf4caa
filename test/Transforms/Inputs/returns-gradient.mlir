// A step that returns a view of a gradient, for data-parallel-invalid.mlir:
// the allreduce reduces a gradient's memory in place, so the pass refuses it.
nn.parameter @w : tensor<2x4xf32> = zeros
func.func @train_step(%x: tensor<2x4xf32>) -> tensor<8xf32> {
  %g = nn.add %x, %x : tensor<2x4xf32>
  nn.apply_gradient @w, %g : tensor<2x4xf32>
  %flat = nn.reshape %g shape [8] : tensor<2x4xf32>
  return %flat : tensor<8xf32>
}
