// A step after graphc-mixed-precision's fp16 loss scaling: its scale is a
// state, which PowerSGD's error feedback refuses to mix with.
nn.parameter @w : tensor<16x32xf32> = zeros
nn.state @graphc.loss_scale : tensor<f32> = constant(6.553600e+04)

func.func @train_step(%x: tensor<16x32xf32>) -> tensor<f32> {
  %gw = nn.add %x, %x : tensor<16x32xf32>
  nn.apply_gradient @w, %gw : tensor<16x32xf32>
  %loss = nn.constant dense<0.0> : tensor<f32>
  return %loss : tensor<f32>
}
