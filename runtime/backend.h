// The one narrow interface every device implements: allocate, copy, load
// kernels, run a command, synchronize, and count non-finite values (checked
// before a checkpoint is written and at display steps). The core never
// includes a backend's headers.
//
// Run only enqueues: on CUDA it puts the command on the compute stream and
// returns, on the CPU it may execute at once. Synchronize waits for everything
// enqueued, so a communication thread can overlap with compute once it exists.

#ifndef GRAPHC_RUNTIME_BACKEND_H_
#define GRAPHC_RUNTIME_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>

#include "runtime/plan/plan_loader.h"
#include "runtime/status.h"

namespace graphc::runtime {

// A device allocation: a host pointer on the CPU, a device pointer on CUDA.
struct DeviceMemory {
  void* address = nullptr;
  uint64_t bytes = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual const char* name() const = 0;
  // The device as the user should see it, e.g. "cpu (2 threads)".
  virtual std::string Describe() const { return name(); }
  // The kernel binary this device executes.
  virtual fb::Target target() const = 0;

  virtual StatusOr<DeviceMemory> Allocate(uint64_t bytes) = 0;
  virtual void Free(DeviceMemory memory) = 0;
  virtual Status CopyToDevice(DeviceMemory dst, uint64_t offset, const void* src,
                              uint64_t bytes) = 0;
  virtual Status CopyToHost(void* dst, DeviceMemory src, uint64_t offset,
                            uint64_t bytes) = 0;

  // Loads the plan's kernels for target() and prepares its library calls
  // (primitives, workspaces); fails with kPlanMissingKernel when a kernel the
  // plan declares is not in the binary. Run takes only this plan's commands.
  virtual Status LoadKernels(const Plan& plan) = 0;

  // Enqueues `command`; `operands` holds the memory of each input, then of each
  // output, in the command's order (sizes as the plan declares them).
  virtual Status Run(const fb::Command& command, const DeviceMemory* operands) = 0;

  virtual Status Synchronize() = 0;

  // How many of the `memory.bytes / size(dtype)` elements of `memory` are NaN
  // or infinite (0 for integer dtypes), computed where the memory lives (on
  // a GPU, a kernel and one number back), after everything enqueued before.
  virtual StatusOr<uint64_t> CountNonFinite(DeviceMemory memory, fb::DType dtype) = 0;
};

// The CPU backend (runtime/cpu/cpu_backend.cc), on `threads` OpenMP threads
// (generated kernels and oneDNN alike); 0 keeps OpenMP's default (every core,
// or OMP_NUM_THREADS).
std::unique_ptr<Backend> CreateCpuBackend(int threads = 0);

}  // namespace graphc::runtime

#endif  // GRAPHC_RUNTIME_BACKEND_H_
