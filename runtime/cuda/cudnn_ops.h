// The CUDA backend's library calls through cuDNN: convolution forward,
// backward-data and backward-filter, and max/average pooling forward and
// backward, on the plan's plain layouts (activations NCHW or NHWC, filters
// OIHW), in FP32 or, for mixed precision, on FP16 or BF16 tensors with FP32
// compute (accumulated in FP32, rounded once to the half type).
//
// Descriptors and algorithms are chosen once, in Prepare: each distinct
// convolution is benchmarked once (cudnnFind*), restricted to FMA math
// unless TF32 is allowed (half data: tensor-core math), and all of them
// share one workspace. Run only enqueues on the handle's stream.

#ifndef GRAPHC_RUNTIME_CUDA_CUDNN_OPS_H_
#define GRAPHC_RUNTIME_CUDA_CUDNN_OPS_H_

#include <cuda_runtime_api.h>

#include <memory>

#include "runtime/backend.h"
#include "runtime/plan/plan_loader.h"
#include "runtime/status.h"

namespace graphc::runtime {

class CudnnOps {
 public:
  CudnnOps();
  ~CudnnOps();
  CudnnOps(const CudnnOps&) = delete;
  CudnnOps& operator=(const CudnnOps&) = delete;

  // Creates the cuDNN handle on `stream` (fails with the library's reason,
  // e.g. when libcudnn cannot be loaded).
  Status Initialize(cudaStream_t stream, bool tf32);
  // Descriptors, algorithms and the workspace for every convolution and
  // pooling command of every program.
  Status Prepare(const Plan& plan);
  // Enqueues a prepared command; operands as in Backend::Run.
  Status Run(const fb::Command& command, const DeviceMemory* operands);
  // The bytes of device memory Prepare reserved (workspace and scratch).
  uint64_t workspace_bytes() const;
  // Distinct convolutions benchmarked, for the load report.
  int algorithms_chosen() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace graphc::runtime

#endif  // GRAPHC_RUNTIME_CUDA_CUDNN_OPS_H_
