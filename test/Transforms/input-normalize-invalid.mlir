// RUN: graphc-opt %s -split-input-file '-graphc-input-normalize=mean=0.1,0.2 std=0.3,0.4' -verify-diagnostics
// RUN: not graphc-opt %s -split-input-file '-graphc-input-normalize=mean=0.1 std=0.3,0.4' 2>&1 | FileCheck %s --check-prefix=COUNT
// RUN: not graphc-opt %s -split-input-file '-graphc-input-normalize=mean=0.1 std=-1' 2>&1 | FileCheck %s --check-prefix=NEGATIVE

// COUNT: needs as many mean values as std values (one, or one per channel), got 1 and 2
// NEGATIVE: graphc-input-normalize: mean 1.000000e-01 and std -1.000000e+00 must be finite, std positive

// Tests that per-channel values must match NCHW images' channels.
// expected-error@+1 {{graphc-input-normalize: 2 mean and std values for images 'tensor<8x3x4x4xf32>'; give one, or one per channel of NCHW images (3)}}
func.func @forward(%images: tensor<8x3x4x4xf32>, %labels: tensor<8xi32>) -> tensor<f32> {
  %0 = nn.reshape %images shape [8, 48] : tensor<8x3x4x4xf32>
  %1 = nn.softmax_cross_entropy %0, %labels label_smoothing 0.0 : tensor<8x48xf32>, tensor<8xi32>
  return %1 : tensor<f32>
}

// -----

// Images of another rank take one value of each only.
// expected-error@+1 {{graphc-input-normalize: 2 mean and std values for images 'tensor<8x48xf32>'; give one, or one per channel of NCHW images (not NCHW)}}
func.func @forward(%images: tensor<8x48xf32>, %labels: tensor<8xi32>) -> tensor<f32> {
  %1 = nn.softmax_cross_entropy %images, %labels label_smoothing 0.0 : tensor<8x48xf32>, tensor<8xi32>
  return %1 : tensor<f32>
}

// -----

// Images that are bytes already (the pass ran twice).
// expected-error@+1 {{graphc-input-normalize: @forward's images are 'tensor<8x48xi8>', not a float tensor (are they 8-bit already?)}}
func.func @forward(%images: tensor<8x48xi8>, %labels: tensor<8xi32>) -> tensor<f32> {
  %0 = nn.cast %images : tensor<8x48xi8> to f32
  %1 = nn.softmax_cross_entropy %0, %labels label_smoothing 0.0 : tensor<8x48xf32>, tensor<8xi32>
  return %1 : tensor<f32>
}
