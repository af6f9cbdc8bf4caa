// The few kernels the CUDA backend needs of its own (compiled by nvcc into
// the backend; the plan's kernels come as PTX): counting non-finite values,
// broadcasting a gemm's bias over the rows of its output, and padding and
// cropping planes (NCHW's [H, W], NHWC's [H, W*C]) for the convolutions and
// poolings whose padding differs between sides (cuDNN pads both sides
// alike), and the device collectives' conversions to and from their wire
// types. All but the count take the elements' type: CUDA_R_32F, CUDA_R_16F
// or CUDA_R_16BF.

#ifndef GRAPHC_RUNTIME_BACKENDS_CUDA_DEVICE_KERNELS_H_
#define GRAPHC_RUNTIME_BACKENDS_CUDA_DEVICE_KERNELS_H_

#include <cuda_runtime_api.h>
#include <library_types.h>

#include <cstdint>

namespace graphc::runtime::cuda {

// Adds to `*count` how many of the `n` IEEE values of `bits` bits (32 or 16)
// at `data` have all of `exponent`'s bits set (NaN or infinity).
cudaError_t CountAllOnesExponent(const void* data, int64_t n, int bits, uint32_t exponent,
                                 unsigned long long* count, cudaStream_t stream);

// c[r][j] = bias[j] for every row r < rows, j < cols.
cudaError_t BroadcastRows(const void* bias, void* c, cudaDataType_t type, int64_t rows,
                          int64_t cols, cudaStream_t stream);

// Each of `planes` planes of x [h, w] into xp [h + top + bottom, w + left +
// right] (hp x wp), with `value` (converted to `type`) around it.
cudaError_t PadPlanes(const void* x, void* xp, cudaDataType_t type, int64_t planes, int64_t h,
                      int64_t w, int64_t top, int64_t left, int64_t hp, int64_t wp, float value,
                      cudaStream_t stream);

// The inverse: x [h, w] = the interior of each xp [hp, wp] plane at (top, left).
cudaError_t CropPlanes(const void* xp, void* x, cudaDataType_t type, int64_t planes, int64_t h,
                       int64_t w, int64_t top, int64_t left, int64_t hp, int64_t wp,
                       cudaStream_t stream);

// The device collectives' wire conversions and scaling, rounding as the
// communicator's host arithmetic does (runtime/comm/wire_format.h): to
// nearest even, after the product in float.
// dst[i] = round(src[i] * scale) in `to` (CUDA_R_16F or CUDA_R_16BF).
cudaError_t FloatsToWire(const float* src, void* dst, cudaDataType_t to, int64_t n, float scale,
                         cudaStream_t stream);
// dst[i] = float(src[i]), `from` CUDA_R_16F or CUDA_R_16BF (exact).
cudaError_t WireToFloats(const void* src, float* dst, cudaDataType_t from, int64_t n,
                         cudaStream_t stream);
// x[i] = round(x[i] * scale) in x's type: CUDA_R_32F, CUDA_R_16F or CUDA_R_16BF.
cudaError_t ScaleInPlace(void* x, cudaDataType_t type, int64_t n, float scale,
                         cudaStream_t stream);

}  // namespace graphc::runtime::cuda

#endif  // GRAPHC_RUNTIME_BACKENDS_CUDA_DEVICE_KERNELS_H_
