// The CPU backend: host memory, generated kernels loaded from the plan's x86-64
// shared object (from memory, via memfd_create + dlopen), copies, and the
// library calls (convolutions, gemm, pooling) through oneDNN (onednn_ops.cc).
// It executes every call at once: streams are the caller's thread, an event
// is the time it was recorded.
//
// Each kernel is a sequence of launches; a launch's iterations are split into
// a few contiguous chunks per OpenMP thread, which the threads take as they
// finish. oneDNN runs on the same OpenMP (libgomp) thread pool, so the two
// never compete for the cores. Commands run one at a time and each launch
// returns only when all its iterations have: the generated kernels rely on it
// (a reduction's two launches share partial sums in a global of the library;
// each backend loads its own copy of the library).

#include <dlfcn.h>
#include <omp.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "contract/cpu_levels.h"
#include "runtime/backends/cpu/cpu_backend.h"
#include "runtime/backends/cpu/onednn_ops.h"

namespace graphc::runtime {
namespace {

// `void graphc_kernel_<entry>(void **buffers, int64_t begin, int64_t end)`.
using LaunchEntry = void (*)(void**, int64_t, int64_t);

// A launch touching fewer bytes than this runs on one thread: waking the
// others would cost more than it saves.
constexpr uint64_t kParallelMinBytes = 64 * 1024;
// Chunks of a parallel launch per thread (see CpuBackend::Run).
constexpr int64_t kChunksPerThread = 4;

struct Launch {
  LaunchEntry entry = nullptr;
  int64_t iterations = 1;
  uint64_t bytes = 0;           // of the buffers it uses
  std::vector<uint32_t> args;   // indices into the command's operands
};

// Whether this CPU runs code generated for `cpu` (an LLVM -mcpu name): the
// SIMD and bit-manipulation features of the psABI's x86-64 level.
bool CpuSupports(const std::string& cpu) {
  __builtin_cpu_init();
  if (cpu == "x86-64") return true;
  const bool v2 = __builtin_cpu_supports("sse3") && __builtin_cpu_supports("ssse3") &&
                  __builtin_cpu_supports("sse4.1") && __builtin_cpu_supports("sse4.2") &&
                  __builtin_cpu_supports("popcnt");
  if (cpu == "x86-64-v2") return v2;
  const bool v3 = v2 && __builtin_cpu_supports("avx") && __builtin_cpu_supports("avx2") &&
                  __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi") &&
                  __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("f16c") &&
                  __builtin_cpu_supports("movbe");
  if (cpu == "x86-64-v3") return v3;
  if (cpu == "x86-64-v4")
    return v3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vl");
  return false;
}

// The x86-64 levels of the plan's kernel libraries: "x86-64-v3, x86-64-v4",
// or with `quoted` "'x86-64-v3', 'x86-64-v4'".
std::string CpuLevelsOf(const Plan& plan, bool quoted) {
  const std::string quote = quoted ? "'" : "";
  std::string levels;
  for (const fb::KernelBinary* binary : *plan.root().binaries())
    if (binary->target() == fb::Target::CpuX86_64)
      levels += (levels.empty() ? "" : ", ") + quote + PrintableOf(binary->cpu()) + quote;
  return levels;
}

// The plan's x86-64 kernel library to load: the one for `wanted` where given
// (graphrun --kernel-cpu), else the highest level this CPU runs; a plan may
// carry one per level (graphc --kernel-cpu=x86-64-v3,x86-64-v4).
StatusOr<const fb::KernelBinary*> ChooseCpuLibrary(const Plan& plan, const std::string& wanted) {
  const fb::KernelBinary* best = nullptr;
  for (const fb::KernelBinary* binary : *plan.root().binaries()) {
    if (binary->target() != fb::Target::CpuX86_64) continue;
    const std::string cpu = binary->cpu() ? binary->cpu()->str() : "";
    if (!wanted.empty() ? cpu == wanted
                        : CpuSupports(cpu) && (best == nullptr || X86LevelIndex(cpu) >
                                                                      X86LevelIndex(best->cpu()->str())))
      best = binary;
  }
  const std::string levels = CpuLevelsOf(plan, /*quoted=*/true);
  if (levels.empty() ||
      (best != nullptr && best->format() != fb::BinaryFormat::ElfSharedObject))
    return Status(ErrorCode::kPlanMissingKernel, "no x86-64 shared object in the plan");
  if (best == nullptr && !wanted.empty())
    return Status(ErrorCode::kInvalidArgument, "--kernel-cpu " + Printable(wanted) +
                                                   ": the plan's kernels are for " + levels);
  if (best != nullptr && !CpuSupports(best->cpu()->str()))
    return Status(ErrorCode::kUnsupported,
                  "--kernel-cpu " + Printable(wanted) + ": this CPU does not run " +
                      Printable(wanted) + " code (leave --kernel-cpu out to load the best of " +
                      levels + " it runs)");
  if (best == nullptr)
    return Status(ErrorCode::kUnsupported,
                  "the plan's kernels need a " + levels +
                      " CPU, which this one is not; recompile with graphc --kernel-cpu=x86-64");
  return best;
}

class CpuBackend final : public Backend {
 public:
  using Clock = std::chrono::steady_clock;

  CpuBackend(int threads, std::string kernel_cpu) : kernel_cpu_(std::move(kernel_cpu)) {
    if (threads > 0) omp_set_num_threads(threads);
    threads_ = omp_get_max_threads();
  }
  ~CpuBackend() override {
    if (library_ != nullptr) dlclose(library_);
    if (library_fd_ >= 0) close(library_fd_);
  }
  const char* name() const override { return "cpu"; }
  std::string Describe() const override {
    const char* policy = std::getenv("OMP_WAIT_POLICY");
    std::string waiting = policy != nullptr ? ", OMP_WAIT_POLICY=" + Printable(policy) : "";
    // The level loaded; or, for a plan without generated kernels that
    // --kernel-cpu was given, that it picked nothing.
    std::string kernels = !loaded_cpu_.empty()    ? ", " + loaded_cpu_ + " kernels"
                          : !load_summary_.empty() ? ", " + load_summary_
                                                   : "";
    return "cpu (" + std::to_string(threads_) + (threads_ == 1 ? " thread" : " threads") +
           kernels + waiting + ")";
  }
  std::string LoadSummary() const override { return load_summary_; }
  std::vector<fb::Target> targets() const override { return {fb::Target::CpuX86_64}; }
  bool asynchronous() const override { return false; }
  std::string LibraryMath(fb::DType dtype) const override {
    if (dtype == fb::DType::F32 || dtype == fb::DType::F16 || dtype == fb::DType::BF16)
      return library_ops_.LibraryMath(dtype);
    return Backend::LibraryMath(dtype);
  }

  StatusOr<DeviceMemory> Allocate(uint64_t bytes) override {
    uint64_t rounded = (bytes + 63) / 64 * 64;
    void* address = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
    if (address == nullptr)
      return Status(ErrorCode::kBackend,
                    "cannot allocate " + std::to_string(bytes) + " bytes");
    return DeviceMemory{address, bytes};
  }
  void Free(DeviceMemory memory) override { std::free(memory.address); }
  StatusOr<HostMemory> AllocateHost(uint64_t bytes) override {
    StatusOr<DeviceMemory> memory = Allocate(bytes);
    if (!memory.ok()) return memory.status();
    return HostMemory{memory->address, bytes};
  }
  void FreeHost(HostMemory memory) override { std::free(memory.address); }

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

  Status CopyToDeviceAsync(DeviceMemory dst, HostMemory src, uint64_t bytes,
                           Stream) override {
    if (bytes > src.bytes)
      return Status(ErrorCode::kInvalidArgument, "copy past the end of a host buffer");
    return CopyToDevice(dst, 0, src.address, bytes);
  }
  Status CopyToHostAsync(HostMemory dst, DeviceMemory src, uint64_t bytes, Stream) override {
    if (bytes > dst.bytes)
      return Status(ErrorCode::kInvalidArgument, "copy past the end of a host buffer");
    return CopyToHost(dst.address, src, 0, bytes);
  }
  Status CopyOnDevice(DeviceMemory dst, DeviceMemory src, uint64_t bytes, Stream) override {
    if (bytes > dst.bytes || bytes > src.bytes)
      return Status(ErrorCode::kInvalidArgument, "copy past the end of an allocation");
    std::memmove(dst.address, src.address, bytes);
    return Status::Ok();
  }

  StatusOr<Event> CreateEvent(bool) override { return Event{new Clock::time_point()}; }
  void DestroyEvent(Event event) override { delete static_cast<Clock::time_point*>(event.handle); }
  Status RecordEvent(Event event, Stream) override {
    if (event.handle == nullptr) return Status(ErrorCode::kInvalidArgument, "a null event");
    *static_cast<Clock::time_point*>(event.handle) = Clock::now();
    return Status::Ok();
  }
  Status WaitEvent(Stream, Event) override { return Status::Ok(); }
  Status SynchronizeEvent(Event) override { return Status::Ok(); }
  StatusOr<double> ElapsedMilliseconds(Event start, Event end) override {
    if (start.handle == nullptr || end.handle == nullptr)
      return Status(ErrorCode::kInvalidArgument, "a null event");
    return std::chrono::duration<double, std::milli>(
               *static_cast<Clock::time_point*>(end.handle) -
               *static_cast<Clock::time_point*>(start.handle))
        .count();
  }

  Status LoadKernels(const Plan& plan) override;
  Status Run(const fb::Command& command, const DeviceMemory* operands) override;
  Status Synchronize() override { return Status::Ok(); }
  StatusOr<uint64_t> CountNonFinite(DeviceMemory memory, fb::DType dtype) override;

 private:
  Status LoadGeneratedKernels(const Plan& plan);

  int threads_ = 1;
  std::string kernel_cpu_;  // the kernel library to load; empty: the best this CPU runs
  std::string loaded_cpu_;  // the level of the one loaded
  std::string load_summary_;
  void* library_ = nullptr;
  // The memfd the library was loaded from, open while it is loaded: the
  // dynamic loader knows a library by its path, "/proc/self/fd/N", so no
  // later library may get the same N while this one is loaded.
  int library_fd_ = -1;
  std::vector<std::vector<Launch>> kernels_;  // per plan kernel
  OneDnnOps library_ops_;
};

Status CpuBackend::LoadKernels(const Plan& plan) {
  StatusOr<fb::Target> target = ChooseTarget(plan, targets());
  if (!target.ok()) return target.status();
  Status status = LoadGeneratedKernels(plan);
  if (!status.ok()) return status;
  return library_ops_.Prepare(plan, threads_);
}

Status CpuBackend::LoadGeneratedKernels(const Plan& plan) {
  const fb::Plan& root = plan.root();
  kernels_.clear();
  loaded_cpu_.clear();
  load_summary_.clear();
  if (root.kernels() == nullptr || root.kernels()->size() == 0) {
    // Every command is a library call: say so where a level was asked for.
    if (!kernel_cpu_.empty())
      load_summary_ = "no generated kernels: --kernel-cpu " + Printable(kernel_cpu_) +
                      " has nothing to pick";
    return Status::Ok();
  }
  if (root.binaries() == nullptr)
    return Status(ErrorCode::kPlanMissingKernel, "no x86-64 shared object in the plan");
  StatusOr<const fb::KernelBinary*> chosen = ChooseCpuLibrary(plan, kernel_cpu_);
  if (!chosen.ok()) return chosen.status();
  const fb::KernelBinary* binary = *chosen;
  loaded_cpu_ = binary->cpu()->str();
  const std::string levels = CpuLevelsOf(plan, /*quoted=*/false);
  load_summary_ = loaded_cpu_ + " kernels" + (levels == loaded_cpu_ ? "" : " (of " + levels + ")");
  // The loader checked the library's ELF (runtime/plan/elf_check.h): handing
  // it to the dynamic loader runs none of its code.

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
  // The previous plan's library stays loaded (and its memfd open) until this
  // one is: "/proc/self/fd/N" names only this library meanwhile, so dlopen
  // cannot hand back the previous one, which it would for a path it knows.
  std::string path = "/proc/self/fd/" + std::to_string(fd);
  void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    close(fd);
    return Status(ErrorCode::kPlanMissingKernel,
                  std::string("cannot load the kernel library: ") + dlerror());
  }
  if (library_ != nullptr) dlclose(library_);
  if (library_fd_ >= 0) close(library_fd_);
  library_ = library;
  library_fd_ = fd;
  StatusOr<std::vector<const fb::GpuKernel*>> lists =
      LaunchListsOf(plan, *binary, "the x86-64 library");
  if (!lists.ok()) return lists.status();
  for (uint32_t k = 0; k < root.kernels()->size(); ++k) {
    const fb::Kernel* kernel = root.kernels()->Get(k);
    std::vector<Launch>& list = kernels_.emplace_back();
    for (const fb::GpuLaunch* launch : *(*lists)[k]->launches()) {
      std::string symbol = "graphc_kernel_" + launch->entry()->str();
      Launch& l = list.emplace_back();
      l.entry = reinterpret_cast<LaunchEntry>(dlsym(library_, symbol.c_str()));
      if (l.entry == nullptr)
        return Status(ErrorCode::kPlanMissingKernel,
                      "launch '" + PrintableOf(launch->entry()) + "' of kernel '" +
                          PrintableOf(kernel->name()) + "' is not in the x86-64 library");
      l.iterations = launch->grid()->Get(0);
      for (uint32_t arg : *launch->args()) {
        l.args.push_back(arg);
        if (kernel->arg_bytes() != nullptr && arg < kernel->arg_bytes()->size())
          l.bytes += kernel->arg_bytes()->Get(arg);
      }
    }
  }
  return Status::Ok();
}

Status CpuBackend::Run(const fb::Command& command, const DeviceMemory* operands) {
  switch (command.op()) {
    case fb::Opcode::Kernel: {
      int32_t k = command.kernel();
      if (k < 0 || static_cast<size_t>(k) >= kernels_.size())
        return Status(ErrorCode::kInvalidArgument, "kernels are not loaded");
      void* addresses[64];
      std::vector<void*> many;
      for (const Launch& launch : kernels_[k]) {
        void** args = addresses;
        if (launch.args.size() > 64) {
          many.resize(launch.args.size());
          args = many.data();
        }
        // The loader proved every launch argument one of the command's buffers.
        for (size_t i = 0; i < launch.args.size(); ++i)
          args[i] = operands[launch.args[i]].address;
        const int64_t n = launch.iterations;
        const int threads = threads_;
        if (n < 2 || threads < 2 || launch.bytes < kParallelMinBytes) {
          launch.entry(args, 0, n);
          continue;
        }
        // kChunksPerThread contiguous chunks per thread, handed out as threads
        // finish: a thread the OS takes away (another process on the core)
        // leaves its remaining chunks to the others instead of holding up
        // the launch. Iterations are independent, so the split changes no bit.
        const int64_t parts = std::min<int64_t>(n, int64_t{threads} * kChunksPerThread);
#pragma omp parallel for schedule(dynamic, 1) \
    num_threads(static_cast<int>(std::min<int64_t>(threads, n)))
        for (int64_t part = 0; part < parts; ++part) {
          const int64_t begin = n * part / parts, end = n * (part + 1) / parts;
          if (begin < end) launch.entry(args, begin, end);
        }
      }
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

// An IEEE value is NaN or infinite when its exponent bits are all ones:
// counted on the bits, so it vectorizes and no float compare is involved.
template <typename Bits>
uint64_t CountAllOnesExponent(const Bits* values, int64_t count, Bits exponent, int threads) {
  uint64_t bad = 0;
#pragma omp parallel for num_threads(threads) reduction(+ : bad) schedule(static) \
    if (count >= (int64_t{1} << 16))
  for (int64_t i = 0; i < count; ++i) bad += (values[i] & exponent) == exponent;
  return bad;
}

StatusOr<uint64_t> CpuBackend::CountNonFinite(DeviceMemory memory, fb::DType dtype) {
  switch (dtype) {
    case fb::DType::F32:
      return CountAllOnesExponent(static_cast<const uint32_t*>(memory.address),
                                  static_cast<int64_t>(memory.bytes / 4), uint32_t{0x7f800000},
                                  threads_);
    case fb::DType::F16:
      return CountAllOnesExponent(static_cast<const uint16_t*>(memory.address),
                                  static_cast<int64_t>(memory.bytes / 2), uint16_t{0x7c00},
                                  threads_);
    case fb::DType::BF16:
      return CountAllOnesExponent(static_cast<const uint16_t*>(memory.address),
                                  static_cast<int64_t>(memory.bytes / 2), uint16_t{0x7f80},
                                  threads_);
    default:
      return uint64_t{0};
  }
}

}  // namespace

Status CheckCpuThreads(int threads) {
  if (threads > kMaxCpuThreads)
    return Status(ErrorCode::kInvalidArgument,
                  std::to_string(threads) + " CPU threads: at most " +
                      std::to_string(kMaxCpuThreads));
  if (threads > 0) return Status::Ok();
  const int fallback = omp_get_max_threads();  // OMP_NUM_THREADS, else the cores
  if (fallback < 1 || fallback > kMaxCpuThreads) {
    // libgomp keeps the count as an unsigned long; omp_get_max_threads()
    // truncates it to an int, so the message quotes the variable itself.
    const char* env = std::getenv("OMP_NUM_THREADS");
    return Status(ErrorCode::kInvalidArgument,
                  (env != nullptr ? "OMP_NUM_THREADS=" + Printable(env) + " asks for more"
                                  : "OpenMP's default is " + std::to_string(fallback)) +
                      " threads than the " + std::to_string(kMaxCpuThreads) +
                      " a CPU backend runs on; pass --threads N or lower it");
  }
  return Status::Ok();
}

std::unique_ptr<Backend> CreateCpuBackend(int threads, const std::string& kernel_cpu) {
  return std::make_unique<CpuBackend>(threads, kernel_cpu);
}

}  // namespace graphc::runtime
