// The CUDA backend: device memory, the plan's PTX loaded through the CUDA
// runtime API, cuDNN for convolutions and pooling, cuBLAS for gemms, on one
// compute stream and one copy stream. Created through backend_factory.h;
// included directly only by the factory and its own tests.
//
// It links the CUDA runtime (cudart), never the driver library, so a binary
// built with it starts on a machine without a driver: CudaUsable then says
// why there is no device, and only `--device cuda` fails.

#ifndef GRAPHC_RUNTIME_BACKENDS_CUDA_CUDA_BACKEND_H_
#define GRAPHC_RUNTIME_BACKENDS_CUDA_CUDA_BACKEND_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "runtime/core/backend.h"
#include "contract/status.h"

namespace graphc::runtime {

struct CudaOptions {
  int device = 0;
  // Let cuBLAS and cuDNN use TF32 tensor cores for FP32 math (10-bit
  // mantissa products); off, FP32 math is strict FP32.
  bool tf32 = false;
  // Only deterministic cuDNN convolution algorithms without FFT or Winograd
  // (CudnnOptions::precise).
  bool precise = false;
  // cuDNN's algorithm cache file, "" for none; unset: where
  // AlgorithmCache::DefaultPath() says (the environment decides).
  std::optional<std::string> cudnn_cache;
  // Fused attention's scores: at most this many bytes of them at a time
  // (backward holds twice as many: their gradient too). A half command's
  // whole scratch (the scores, their half copy and, backward, FP32 sums of a
  // chunk's dk and dv) fits the same bytes.
  uint64_t attention_scratch_bytes = uint64_t{64} << 20;
};

// Ok when CUDA device `device` is usable; otherwise kUnavailable with the
// reason in one line ("no CUDA driver (...)", "no CUDA device", ...).
Status CudaUsable(int device = 0);

StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(const CudaOptions& options);

}  // namespace graphc::runtime

#endif  // GRAPHC_RUNTIME_BACKENDS_CUDA_CUDA_BACKEND_H_
