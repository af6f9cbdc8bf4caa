// Creates the backend a user asks for: `--device auto|cpu|cuda`. The one
// place that knows which backends this build has; the core and the tools
// see only the Backend interface.

#ifndef GRAPHC_RUNTIME_BACKENDS_BACKEND_FACTORY_H_
#define GRAPHC_RUNTIME_BACKENDS_BACKEND_FACTORY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/core/backend.h"
#include "contract/status.h"

namespace graphc::runtime {

enum class DeviceKind { kAuto, kCpu, kCuda };

// "auto", "cpu" or "cuda"; kInvalidArgument otherwise.
StatusOr<DeviceKind> ParseDeviceKind(const std::string& name);

// The most threads a CPU backend runs on (--threads, or OMP_NUM_THREADS):
// the CPU backend's kMaxCpuThreads.
int MaxCpuThreads();

struct BackendOptions {
  int cpu_threads = 0;  // 0: OpenMP's default, at most MaxCpuThreads()
  // CPU: the plan's kernel library for this x86-64 level; empty: the highest
  // level among the plan's that this CPU runs.
  std::string cpu_kernels;
  int cuda_device = 0;
  bool tf32 = false;    // CUDA: allow TF32 tensor cores for FP32 math
  // CUDA: only deterministic cuDNN algorithms without FFT or Winograd (the
  // conformance and CPU-equivalence checks); the CPU's are always direct.
  bool deterministic = false;
  // CUDA: fused attention's score scratch (CudaOptions); 0: its default.
  uint64_t attention_scratch_bytes = 0;
};

struct CreatedBackend {
  std::unique_ptr<Backend> backend;
  // Why this device, for the user: for auto, what was tried ("auto: no CUDA
  // driver (...); using the CPU"); empty when the user named it.
  std::string reason;
};

// The backend for `kind`. cuda fails with kUnavailable and the reason when no
// CUDA device is usable (or kUnsupported when this build has no CUDA
// backend); auto takes CUDA when it is usable, else the CPU, and says why.
StatusOr<CreatedBackend> CreateBackend(DeviceKind kind, const BackendOptions& options);

// Ok when this build has a CUDA backend and device `device` is usable;
// otherwise why not (kUnsupported: not built; kUnavailable: no driver/GPU).
Status CudaAvailable(int device = 0);

// The backends this build has, e.g. {"cpu", "cuda"}.
std::vector<std::string> BuiltBackends();

}  // namespace graphc::runtime

#endif  // GRAPHC_RUNTIME_BACKENDS_BACKEND_FACTORY_H_
