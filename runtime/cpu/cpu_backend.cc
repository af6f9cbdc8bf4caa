// The CPU backend: host memory, generated kernels loaded from the plan's x86-64
// shared object (from memory, via memfd_create + dlopen), copies, and the
// library calls (convolutions, gemm, pooling) through oneDNN (onednn_ops.cc).

#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/backend.h"
#include "runtime/cpu/onednn_ops.h"

namespace graphc::runtime {
namespace {

using KernelEntry = void (*)(void**);

// Whether this CPU runs code generated for `cpu` (an LLVM -mcpu name).
bool CpuSupports(const std::string& cpu) {
  __builtin_cpu_init();
  if (cpu == "x86-64") return true;
  if (cpu == "x86-64-v2")
    return __builtin_cpu_supports("sse4.2") && __builtin_cpu_supports("popcnt");
  if (cpu == "x86-64-v3")
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("bmi2");
  if (cpu == "x86-64-v4")
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  return false;
}

class CpuBackend final : public Backend {
 public:
  ~CpuBackend() override {
    if (library_ != nullptr) dlclose(library_);
  }
  const char* name() const override { return "cpu"; }
  fb::Target target() const override { return fb::Target::CpuX86_64; }

  StatusOr<DeviceMemory> Allocate(uint64_t bytes) override {
    uint64_t rounded = (bytes + 63) / 64 * 64;
    void* address = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
    if (address == nullptr)
      return Status(ErrorCode::kBackend,
                    "cannot allocate " + std::to_string(bytes) + " bytes");
    return DeviceMemory{address, bytes};
  }
  void Free(DeviceMemory memory) override { std::free(memory.address); }

  Status CopyToDevice(DeviceMemory dst, uint64_t offset, const void* src,
                      uint64_t bytes) override {
    if (offset > dst.bytes || bytes > dst.bytes - offset)
      return Status(ErrorCode::kInvalidArgument, "copy past the end of an allocation");
    std::memcpy(static_cast<char*>(dst.address) + offset, src, bytes);
    return Status::Ok();
  }
  Status CopyToHost(void* dst, DeviceMemory src, uint64_t offset,
                    uint64_t bytes) override {
    if (offset > src.bytes || bytes > src.bytes - offset)
      return Status(ErrorCode::kInvalidArgument, "copy past the end of an allocation");
    std::memcpy(dst, static_cast<const char*>(src.address) + offset, bytes);
    return Status::Ok();
  }

  Status LoadKernels(const Plan& plan) override;
  Status Run(const fb::Command& command, const DeviceMemory* operands) override;
  Status Synchronize() override { return Status::Ok(); }

 private:
  Status LoadGeneratedKernels(const Plan& plan);

  void* library_ = nullptr;
  std::vector<KernelEntry> kernels_;
  OneDnnOps library_ops_;
};

Status CpuBackend::LoadKernels(const Plan& plan) {
  Status status = plan.CheckTarget(target());
  if (!status.ok()) return status;
  status = LoadGeneratedKernels(plan);
  if (!status.ok()) return status;
  return library_ops_.Prepare(plan);
}

Status CpuBackend::LoadGeneratedKernels(const Plan& plan) {
  const fb::Plan& root = plan.root();
  kernels_.clear();
  if (root.kernels() == nullptr || root.kernels()->size() == 0) return Status::Ok();
  const fb::KernelBinary* binary = nullptr;
  for (const fb::KernelBinary* b : *root.binaries())
    if (b->target() == fb::Target::CpuX86_64) binary = b;
  if (binary == nullptr || binary->format() != fb::BinaryFormat::ElfSharedObject)
    return Status(ErrorCode::kPlanMissingKernel, "no x86-64 shared object in the plan");
  std::string cpu = binary->cpu() ? binary->cpu()->str() : "";
  if (!CpuSupports(cpu))
    return Status(ErrorCode::kUnsupported,
                  "the plan's kernels need a '" + cpu +
                      "' CPU; recompile with graphc --kernel-cpu=x86-64");

  int fd = memfd_create("graphc-kernels", MFD_CLOEXEC);
  if (fd < 0) return Status(ErrorCode::kBackend, "memfd_create failed");
  const uint8_t* data = binary->data()->data();
  size_t left = binary->data()->size();
  while (left > 0) {
    ssize_t written = write(fd, data, left);
    if (written <= 0) {
      close(fd);
      return Status(ErrorCode::kBackend, "cannot stage the kernel library");
    }
    data += written;
    left -= static_cast<size_t>(written);
  }
  std::string path = "/proc/self/fd/" + std::to_string(fd);
  void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  close(fd);
  if (library == nullptr)
    return Status(ErrorCode::kPlanMissingKernel,
                  std::string("cannot load the kernel library: ") + dlerror());
  if (library_ != nullptr) dlclose(library_);
  library_ = library;
  for (const fb::Kernel* kernel : *root.kernels()) {
    std::string symbol = "graphc_kernel_" + kernel->name()->str();
    auto entry = reinterpret_cast<KernelEntry>(dlsym(library_, symbol.c_str()));
    if (entry == nullptr)
      return Status(ErrorCode::kPlanMissingKernel,
                    "kernel '" + kernel->name()->str() + "' is not in the x86-64 library");
    kernels_.push_back(entry);
  }
  return Status::Ok();
}

Status CpuBackend::Run(const fb::Command& command, const DeviceMemory* operands) {
  switch (command.op()) {
    case fb::Opcode::Kernel: {
      int32_t k = command.kernel();
      if (k < 0 || static_cast<size_t>(k) >= kernels_.size())
        return Status(ErrorCode::kInvalidArgument, "kernels are not loaded");
      size_t count = command.inputs()->size() + command.outputs()->size();
      void* addresses[64];
      std::vector<void*> many;
      void** args = addresses;
      if (count > 64) {
        many.resize(count);
        args = many.data();
      }
      for (size_t i = 0; i < count; ++i) args[i] = operands[i].address;
      kernels_[k](args);
      return Status::Ok();
    }
    case fb::Opcode::Copy:
      // The loader proved both buffers the same size.
      if (operands[0].address != operands[1].address)
        std::memmove(operands[1].address, operands[0].address, operands[0].bytes);
      return Status::Ok();
    default:
      return library_ops_.Run(command, operands);
  }
}

}  // namespace

std::unique_ptr<Backend> CreateCpuBackend() { return std::make_unique<CpuBackend>(); }

}  // namespace graphc::runtime
