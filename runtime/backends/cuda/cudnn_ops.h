// The CUDA backend's library calls through cuDNN: convolution forward,
// backward-data and backward-filter, and max/average pooling forward and
// backward, on the plan's plain layouts (activations NCHW or NHWC, filters
// OIHW or, with NHWC activations, OHWI), in FP32 or, for mixed precision, on FP16 or BF16 tensors with FP32
// compute (accumulated in FP32, rounded once to the half type).
//
// Descriptors and algorithms are chosen once, in Prepare: each distinct
// convolution is benchmarked once (cudnnFind*), restricted to FMA math
// unless TF32 is allowed (half data: tensor-core math), and all of them
// share one workspace. The choices are kept in a file across processes
// (algorithm_cache.h), keyed by GPU model, cuDNN version, math and problem.
// Run only enqueues on the handle's stream.

#ifndef GRAPHC_RUNTIME_BACKENDS_CUDA_CUDNN_OPS_H_
#define GRAPHC_RUNTIME_BACKENDS_CUDA_CUDNN_OPS_H_

#include <cuda_runtime_api.h>

#include <memory>
#include <string>

#include "runtime/core/backend.h"
#include "runtime/core/plan_loader.h"
#include "contract/status.h"

namespace graphc::runtime {

struct CudnnOptions {
  // Let FP32 convolutions use TF32 tensor cores; off, they run in FMA math.
  bool tf32 = false;
  // Only deterministic algorithms without FFT or Winograd transforms: the
  // conformance and CPU-equivalence checks compare against exact sums.
  bool precise = false;
  // The algorithm cache's file ("" for none) and the GPU's part of its key
  // (model and compute capability).
  std::string cache_path;
  std::string device_key;
};

class CudnnOps {
 public:
  CudnnOps();
  ~CudnnOps();
  CudnnOps(const CudnnOps&) = delete;
  CudnnOps& operator=(const CudnnOps&) = delete;

  // Creates the cuDNN handle on `stream` (fails with the library's reason,
  // e.g. when libcudnn cannot be loaded).
  Status Initialize(cudaStream_t stream, const CudnnOptions& options);
  // The loaded library's version, "9.19.0".
  static std::string Version();
  // Descriptors, algorithms and the workspace for every convolution and
  // pooling command of every program.
  Status Prepare(const Plan& plan);
  // Enqueues a prepared command; operands as in Backend::Run.
  Status Run(const fb::Command& command, const DeviceMemory* operands);
  // The bytes of device memory Prepare reserved (workspace and scratch).
  uint64_t workspace_bytes() const;
  // How the last Prepare chose its algorithms (for the load line), or "".
  std::string Summary() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace graphc::runtime

#endif  // GRAPHC_RUNTIME_BACKENDS_CUDA_CUDNN_OPS_H_
