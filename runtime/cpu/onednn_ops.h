// The CPU backend's library calls through oneDNN: convolution forward,
// backward-data and backward-weights, matmul (Gemm) and max/average pooling
// forward and backward, on the plan's plain layouts (NCHW, OIHW, row-major).
//
// Every primitive, its memory objects and the scratchpad are created once, in
// Prepare; Run only points the memory objects at the operands and executes, so
// a training step allocates nothing.

#ifndef GRAPHC_RUNTIME_CPU_ONEDNN_OPS_H_
#define GRAPHC_RUNTIME_CPU_ONEDNN_OPS_H_

#include <memory>

#include "runtime/backend.h"
#include "runtime/plan/plan_loader.h"
#include "runtime/status.h"

namespace graphc::runtime {

class OneDnnOps {
 public:
  OneDnnOps();
  ~OneDnnOps();
  OneDnnOps(const OneDnnOps&) = delete;
  OneDnnOps& operator=(const OneDnnOps&) = delete;

  // Creates the primitives of every library command of every program.
  Status Prepare(const Plan& plan);
  // Runs a library command of the prepared plan; operands as in Backend::Run.
  Status Run(const fb::Command& command, const DeviceMemory* operands);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace graphc::runtime

#endif  // GRAPHC_RUNTIME_CPU_ONEDNN_OPS_H_
