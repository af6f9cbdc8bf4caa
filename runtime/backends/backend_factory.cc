// The backend factory (see backend_factory.h). GRAPHC_HAVE_CUDA is defined
// when the build found the CUDA toolkit and built runtime/cuda.

#include "runtime/backends/backend_factory.h"

#include "runtime/backends/cpu/cpu_backend.h"
#ifdef GRAPHC_HAVE_CUDA
#include "runtime/backends/cuda/cuda_backend.h"
#endif

namespace graphc::runtime {

StatusOr<DeviceKind> ParseDeviceKind(const std::string& name) {
  if (name == "auto") return DeviceKind::kAuto;
  if (name == "cpu") return DeviceKind::kCpu;
  if (name == "cuda") return DeviceKind::kCuda;
  return Status(ErrorCode::kInvalidArgument,
                "unknown device '" + Printable(name) + "' (auto, cpu or cuda)");
}

Status CudaAvailable(int device) {
#ifdef GRAPHC_HAVE_CUDA
  return CudaUsable(device);
#else
  (void)device;
  return Status(ErrorCode::kUnsupported,
                "this build has no CUDA backend (the CUDA toolkit was not found when it was "
                "configured)");
#endif
}

std::vector<std::string> BuiltBackends() {
#ifdef GRAPHC_HAVE_CUDA
  return {"cpu", "cuda"};
#else
  return {"cpu"};
#endif
}

int MaxCpuThreads() { return kMaxCpuThreads; }

StatusOr<CreatedBackend> CreateBackend(DeviceKind kind, const BackendOptions& options) {
  CreatedBackend created;
  if (kind != DeviceKind::kCpu) {
    Status available = CudaAvailable(options.cuda_device);
#ifdef GRAPHC_HAVE_CUDA
    if (available.ok()) {
      CudaOptions cuda;
      cuda.device = options.cuda_device;
      cuda.tf32 = options.tf32;
      cuda.precise = options.deterministic;
      if (options.attention_scratch_bytes > 0)
        cuda.attention_scratch_bytes = options.attention_scratch_bytes;
      StatusOr<std::unique_ptr<Backend>> backend = CreateCudaBackend(cuda);
      if (backend.ok()) {
        created.backend = std::move(*backend);
        if (kind == DeviceKind::kAuto) created.reason = "auto: a usable CUDA device";
        return created;
      }
      available = backend.status();
    }
#endif
    if (kind == DeviceKind::kCuda)
      return Status(available.code(), "--device cuda: " + available.message());
    created.reason = "auto: " + available.message() + "; using the CPU";
  }
  if (Status threads = CheckCpuThreads(options.cpu_threads); !threads.ok()) return threads;
  created.backend = CreateCpuBackend(options.cpu_threads, options.cpu_kernels);
  return created;
}

}  // namespace graphc::runtime
