// The CUDA backend's own kernels (see device_kernels.h).

#include "runtime/backends/cuda/device_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

namespace graphc::runtime::cuda {
namespace {

constexpr int kThreads = 256;

template <typename Bits>
__global__ void CountKernel(const Bits* values, int64_t n, Bits exponent,
                            unsigned long long* count) {
  unsigned long long found = 0;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride)
    found += (values[i] & exponent) == exponent;
  for (int offset = 16; offset > 0; offset /= 2)
    found += __shfl_down_sync(0xffffffffu, found, offset);
  if ((threadIdx.x & 31) == 0 && found != 0) atomicAdd(count, found);
}

template <typename T>
__global__ void BroadcastRowsKernel(const T* bias, T* c, int64_t rows, int64_t cols) {
  const int64_t total = rows * cols;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < total; i += stride)
    c[i] = bias[i % cols];
}

template <typename T>
__global__ void PadKernel(const T* x, T* xp, int64_t total, int64_t h, int64_t w, int64_t top,
                          int64_t left, int64_t hp, int64_t wp, T value) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t e = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; e < total; e += stride) {
    const int64_t j = e % wp, i = (e / wp) % hp, plane = e / (wp * hp);
    const int64_t si = i - top, sj = j - left;
    xp[e] = si >= 0 && si < h && sj >= 0 && sj < w ? x[(plane * h + si) * w + sj] : value;
  }
}

template <typename T>
__global__ void CropKernel(const T* xp, T* x, int64_t total, int64_t h, int64_t w, int64_t top,
                           int64_t left, int64_t hp, int64_t wp) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t e = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; e < total; e += stride) {
    const int64_t j = e % w, i = (e / w) % h, plane = e / (w * h);
    x[e] = xp[(plane * hp + i + top) * wp + j + left];
  }
}

template <typename T>
__global__ void ToWireKernel(const float* src, T* dst, int64_t n, float scale) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride)
    dst[i] = T(src[i] * scale);  // __half(float) and __nv_bfloat16(float) round to nearest even
}

template <typename T>
__global__ void FromWireKernel(const T* src, float* dst, int64_t n) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride)
    dst[i] = static_cast<float>(src[i]);
}

template <typename T>
__global__ void ScaleKernel(T* x, int64_t n, float scale) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride)
    x[i] = T(static_cast<float>(x[i]) * scale);
}

// cudaGetLastError after a <<<>>> launch returns the last error of any call
// on this thread; one already reported elsewhere is cleared first, so that a
// launch reports only its own.
void ClearReportedError() { (void)cudaGetLastError(); }

unsigned Blocks(int64_t n) {
  return static_cast<unsigned>(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, 4096));
}

// launch(T{}) with T the element type `type` names; the kernels above only
// move elements (and store a padding value), so they run on any of them.
template <typename Launch>
cudaError_t ForElementType(cudaDataType_t type, Launch launch) {
  switch (type) {
    case CUDA_R_32F:
      return launch(float{});
    case CUDA_R_16F:
      return launch(__half{});
    case CUDA_R_16BF:
      return launch(__nv_bfloat16{});
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace

cudaError_t CountAllOnesExponent(const void* data, int64_t n, int bits, uint32_t exponent,
                                 unsigned long long* count, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  ClearReportedError();
  if (bits == 32)
    CountKernel<<<Blocks(n), kThreads, 0, stream>>>(static_cast<const uint32_t*>(data), n,
                                                    exponent, count);
  else
    CountKernel<<<Blocks(n), kThreads, 0, stream>>>(static_cast<const uint16_t*>(data), n,
                                                    static_cast<uint16_t>(exponent), count);
  return cudaGetLastError();
}

cudaError_t BroadcastRows(const void* bias, void* c, cudaDataType_t type, int64_t rows,
                          int64_t cols, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  ClearReportedError();
  return ForElementType(type, [&](auto element) {
    using T = decltype(element);
    BroadcastRowsKernel<<<Blocks(rows * cols), kThreads, 0, stream>>>(
        static_cast<const T*>(bias), static_cast<T*>(c), rows, cols);
    return cudaGetLastError();
  });
}

cudaError_t PadPlanes(const void* x, void* xp, cudaDataType_t type, int64_t planes, int64_t h,
                      int64_t w, int64_t top, int64_t left, int64_t hp, int64_t wp, float value,
                      cudaStream_t stream) {
  const int64_t total = planes * hp * wp;
  if (total <= 0) return cudaSuccess;
  ClearReportedError();
  return ForElementType(type, [&](auto element) {
    using T = decltype(element);
    PadKernel<<<Blocks(total), kThreads, 0, stream>>>(static_cast<const T*>(x),
                                                      static_cast<T*>(xp), total, h, w, top,
                                                      left, hp, wp, T(value));
    return cudaGetLastError();
  });
}

cudaError_t CropPlanes(const void* xp, void* x, cudaDataType_t type, int64_t planes, int64_t h,
                       int64_t w, int64_t top, int64_t left, int64_t hp, int64_t wp,
                       cudaStream_t stream) {
  const int64_t total = planes * h * w;
  if (total <= 0) return cudaSuccess;
  ClearReportedError();
  return ForElementType(type, [&](auto element) {
    using T = decltype(element);
    CropKernel<<<Blocks(total), kThreads, 0, stream>>>(static_cast<const T*>(xp),
                                                       static_cast<T*>(x), total, h, w, top,
                                                       left, hp, wp);
    return cudaGetLastError();
  });
}

cudaError_t FloatsToWire(const float* src, void* dst, cudaDataType_t to, int64_t n, float scale,
                         cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (to != CUDA_R_16F && to != CUDA_R_16BF) return cudaErrorInvalidValue;
  ClearReportedError();
  return ForElementType(to, [&](auto element) {
    using T = decltype(element);
    ToWireKernel<<<Blocks(n), kThreads, 0, stream>>>(src, static_cast<T*>(dst), n, scale);
    return cudaGetLastError();
  });
}

cudaError_t WireToFloats(const void* src, float* dst, cudaDataType_t from, int64_t n,
                         cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (from != CUDA_R_16F && from != CUDA_R_16BF) return cudaErrorInvalidValue;
  ClearReportedError();
  return ForElementType(from, [&](auto element) {
    using T = decltype(element);
    FromWireKernel<<<Blocks(n), kThreads, 0, stream>>>(static_cast<const T*>(src), dst, n);
    return cudaGetLastError();
  });
}

cudaError_t ScaleInPlace(void* x, cudaDataType_t type, int64_t n, float scale,
                         cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  ClearReportedError();
  return ForElementType(type, [&](auto element) {
    using T = decltype(element);
    ScaleKernel<<<Blocks(n), kThreads, 0, stream>>>(static_cast<T*>(x), n, scale);
    return cudaGetLastError();
  });
}

}  // namespace graphc::runtime::cuda
