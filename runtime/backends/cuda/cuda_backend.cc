// The CUDA backend (see cuda_backend.h): one device, a compute stream and a
// copy stream (both non-blocking, so nothing serializes on the legacy default
// stream), the plan's PTX loaded once with cudaLibraryLoadData and launched
// from the plan's launch lists, cuDNN for convolutions and pooling
// (cudnn_ops.cc), cuBLAS for gemms.

#include "runtime/backends/cuda/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/backends/cuda/algorithm_cache.h"
#include "runtime/backends/cuda/attention.h"
#include "runtime/core/plan_loader.h"
#include "runtime/backends/cuda/cudnn_ops.h"
#include "runtime/backends/cuda/device_kernels.h"
#ifdef GRAPHC_HAVE_NCCL
#include "runtime/backends/cuda/nccl_collectives.h"
#endif

namespace graphc::runtime {
namespace {

// "13.0" from CUDA's 13000.
std::string CudaVersionString(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

// The driver's and the libraries' versions as loaded (not as compiled
// against): what a failure report needs to be diagnosed afterwards.
std::string LibraryVersions() {
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  int major = 0, minor = 0, patch = 0;
  cublasGetProperty(MAJOR_VERSION, &major);
  cublasGetProperty(MINOR_VERSION, &minor);
  cublasGetProperty(PATCH_LEVEL, &patch);
  return "driver " + CudaVersionString(driver) + ", CUDA runtime " + CudaVersionString(runtime) +
         ", cuDNN " + CudnnOps::Version() + ", cuBLAS " + std::to_string(major) + "." +
         std::to_string(minor) + "." + std::to_string(patch);
}

Status CudaFailed(cudaError_t error, const std::string& what) {
  int runtime = 0;
  cudaRuntimeGetVersion(&runtime);
  return Status(ErrorCode::kBackend, "CUDA " + CudaVersionString(runtime) + " " + what + ": " +
                                         cudaGetErrorName(error) + " (" +
                                         cudaGetErrorString(error) + ")");
}

#define GRAPHC_CUDA(call, what)                                      \
  do {                                                               \
    cudaError_t graphc_error_ = (call);                              \
    if (graphc_error_ != cudaSuccess) return CudaFailed(graphc_error_, what); \
  } while (0)

Status CublasFailed(cublasStatus_t status, const std::string& what) {
  int major = 0, minor = 0;
  cublasGetProperty(MAJOR_VERSION, &major);
  cublasGetProperty(MINOR_VERSION, &minor);
  return Status(ErrorCode::kBackend, "cuBLAS " + std::to_string(major) + "." +
                                         std::to_string(minor) + " " + what + ": " +
                                         cublasGetStatusName(status) + " (" +
                                         cublasGetStatusString(status) + ")");
}

struct Launch {
  cudaKernel_t kernel = nullptr;
  dim3 grid, block;
  std::vector<uint32_t> args;  // indices into the command's operands
};

// A gemm as cuBLAS sees it: column-major, so the row-major C = op(A) op(B)
// is computed as C^T = op(B)^T op(A)^T, batched over a leading dimension.
struct Gemm {
  int m = 0, n = 0, k = 0;
  int batch = 1;
  long long stride_a = 0, stride_b = 0, stride_c = 0;  // 0: broadcast over the batch
  bool ta = false, tb = false, bias = false;
  cudaDataType_t type = CUDA_R_32F;  // of every operand
};

// A fused attention command's shape and how its scores are cut.
struct Attention {
  cuda::AttentionDims dims;
  cuda::AttentionTiling tiling;
  std::vector<int64_t> bias_slices;  // each bias's count of [Lq, Lk] slices
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const CudaOptions& options) : options_(options) {}
  ~CudaBackend() override;

  Status Initialize();

  const char* name() const override { return "cuda"; }
  std::string Describe() const override { return description_; }
  std::string LoadSummary() const override { return cudnn_->Summary(); }
  std::vector<fb::Target> targets() const override { return targets_; }
  int device_index() const override { return options_.device; }
  std::string device_id() const override { return uuid_; }
  bool asynchronous() const override { return true; }
  std::string LibraryMath(fb::DType dtype) const override {
    switch (dtype) {
      case fb::DType::F32:
        return options_.tf32 ? "tf32" : "fp32";
      case fb::DType::F16:
        return "fp16: cuDNN and cuBLAS on tensor cores, fp32 accumulation";
      case fb::DType::BF16:
        return "bf16: cuDNN and cuBLAS on tensor cores, fp32 accumulation";
      default:
        return Backend::LibraryMath(dtype);
    }
  }

  StatusOr<DeviceMemory> Allocate(uint64_t bytes) override {
    void* address = nullptr;
    cudaError_t error = cudaMalloc(&address, std::max<uint64_t>(bytes, 1));
    if (error != cudaSuccess)
      return Status(ErrorCode::kBackend, "cannot allocate " + std::to_string(bytes) +
                                             " bytes on " + description_ + ": " +
                                             cudaGetErrorString(error));
    return DeviceMemory{address, bytes};
  }
  void Free(DeviceMemory memory) override { cudaFree(memory.address); }
  StatusOr<HostMemory> AllocateHost(uint64_t bytes) override {
    void* address = nullptr;
    cudaError_t error = cudaMallocHost(&address, std::max<uint64_t>(bytes, 1));
    if (error != cudaSuccess)
      return Status(ErrorCode::kBackend, "cannot allocate " + std::to_string(bytes) +
                                             " bytes of pinned host memory: " +
                                             cudaGetErrorString(error));
    return HostMemory{address, bytes};
  }
  void FreeHost(HostMemory memory) override { cudaFreeHost(memory.address); }

  Status CopyToDevice(DeviceMemory dst, uint64_t offset, const void* src,
                      uint64_t bytes) override {
    if (offset > dst.bytes || bytes > dst.bytes - offset)
      return Status(ErrorCode::kInvalidArgument, "copy past the end of an allocation");
    GRAPHC_CUDA(cudaMemcpyAsync(static_cast<char*>(dst.address) + offset, src, bytes,
                                cudaMemcpyHostToDevice, compute_),
                "copy to the device");
    GRAPHC_CUDA(cudaStreamSynchronize(compute_), "copy to the device");
    return Status::Ok();
  }
  Status CopyToHost(void* dst, DeviceMemory src, uint64_t offset, uint64_t bytes) override {
    if (offset > src.bytes || bytes > src.bytes - offset)
      return Status(ErrorCode::kInvalidArgument, "copy past the end of an allocation");
    GRAPHC_CUDA(cudaMemcpyAsync(dst, static_cast<const char*>(src.address) + offset, bytes,
                                cudaMemcpyDeviceToHost, compute_),
                "copy to the host");
    GRAPHC_CUDA(cudaStreamSynchronize(compute_), "copy to the host");
    return Status::Ok();
  }
  Status CopyToDeviceAsync(DeviceMemory dst, HostMemory src, uint64_t bytes,
                           Stream stream) override {
    if (bytes > dst.bytes || bytes > src.bytes)
      return Status(ErrorCode::kInvalidArgument, "copy past the end of an allocation");
    GRAPHC_CUDA(cudaMemcpyAsync(dst.address, src.address, bytes, cudaMemcpyHostToDevice,
                                StreamOf(stream)),
                "asynchronous copy to the device");
    return Status::Ok();
  }
  Status CopyToHostAsync(HostMemory dst, DeviceMemory src, uint64_t bytes,
                         Stream stream) override {
    if (bytes > dst.bytes || bytes > src.bytes)
      return Status(ErrorCode::kInvalidArgument, "copy past the end of an allocation");
    GRAPHC_CUDA(cudaMemcpyAsync(dst.address, src.address, bytes, cudaMemcpyDeviceToHost,
                                StreamOf(stream)),
                "asynchronous copy to the host");
    return Status::Ok();
  }
  Status CopyOnDevice(DeviceMemory dst, DeviceMemory src, uint64_t bytes,
                      Stream stream) override {
    if (bytes > dst.bytes || bytes > src.bytes)
      return Status(ErrorCode::kInvalidArgument, "copy past the end of an allocation");
    GRAPHC_CUDA(cudaMemcpyAsync(dst.address, src.address, bytes, cudaMemcpyDeviceToDevice,
                                StreamOf(stream)),
                "copy on the device");
    return Status::Ok();
  }

  StatusOr<Event> CreateEvent(bool timed) override {
    cudaEvent_t event = nullptr;
    GRAPHC_CUDA(cudaEventCreateWithFlags(&event, timed ? cudaEventDefault : cudaEventDisableTiming),
                "event");
    return Event{event};
  }
  void DestroyEvent(Event event) override {
    if (event.handle != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(event.handle));
  }
  Status RecordEvent(Event event, Stream stream) override {
    GRAPHC_CUDA(cudaEventRecord(static_cast<cudaEvent_t>(event.handle), StreamOf(stream)),
                "recording an event");
    return Status::Ok();
  }
  Status WaitEvent(Stream stream, Event event) override {
    GRAPHC_CUDA(cudaStreamWaitEvent(StreamOf(stream), static_cast<cudaEvent_t>(event.handle), 0),
                "waiting for an event");
    return Status::Ok();
  }
  Status SynchronizeEvent(Event event) override {
    GRAPHC_CUDA(cudaEventSynchronize(static_cast<cudaEvent_t>(event.handle)),
                "waiting for an event");
    return Status::Ok();
  }
  StatusOr<double> ElapsedMilliseconds(Event start, Event end) override {
    float ms = 0;
    GRAPHC_CUDA(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start.handle),
                                     static_cast<cudaEvent_t>(end.handle)),
                "event timing");
    return static_cast<double>(ms);
  }

  Status LoadKernels(const Plan& plan) override;
  Status Run(const fb::Command& command, const DeviceMemory* operands) override;
  Status Synchronize() override {
    GRAPHC_CUDA(cudaStreamSynchronize(copy_), "copy stream");
    GRAPHC_CUDA(cudaStreamSynchronize(compute_), "compute stream");
    return Status::Ok();
  }
  StatusOr<uint64_t> CountNonFinite(DeviceMemory memory, fb::DType dtype) override;

  bool supports_graphs() const override { return true; }
  Status BeginCapture() override {
    // Thread-local: the data thread's host work is not part of the capture.
    GRAPHC_CUDA(cudaStreamBeginCapture(compute_, cudaStreamCaptureModeThreadLocal),
                "starting a graph capture");
    return Status::Ok();
  }
  StatusOr<Graph> EndCapture() override {
    cudaGraph_t graph = nullptr;
    GRAPHC_CUDA(cudaStreamEndCapture(compute_, &graph), "ending a graph capture");
    cudaGraphExec_t exec = nullptr;
    cudaError_t error = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    if (error != cudaSuccess) return CudaFailed(error, "instantiating a graph");
    return Graph{exec};
  }
  Status LaunchGraph(Graph graph) override {
    GRAPHC_CUDA(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph.handle), compute_),
                "graph launch");
    return Status::Ok();
  }
  void DestroyGraph(Graph graph) override {
    if (graph.handle != nullptr) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(graph.handle));
  }

  StatusOr<std::unique_ptr<DeviceCollectives>> NewCollectives(const CommOptions& options,
                                                              bool shared_device) override {
#ifdef GRAPHC_HAVE_NCCL
    if (shared_device)
      return Status(ErrorCode::kUnavailable,
                    "cuda:" + std::to_string(options_.device) +
                        " also runs another rank of the job, and NCCL needs a GPU per rank");
    return NewNcclCollectives(options_.device, compute_, options);
#else
    (void)options;
    (void)shared_device;
    return Status(ErrorCode::kUnsupported,
                  "this graphrun was built without NCCL (nccl.h was not found)");
#endif
  }

 private:
  cudaStream_t StreamOf(Stream stream) const {
    return stream == Stream::kCopy ? copy_ : compute_;
  }
  Status LoadGeneratedKernels(const Plan& plan, fb::Target target);
  Status PrepareGemms(const Plan& plan);
  Status RunGemm(const fb::Command& command, const DeviceMemory* operands);
  Status PrepareAttention(const Plan& plan);
  Status RunAttention(const fb::Command& command, const DeviceMemory* operands);

  CudaOptions options_;
  std::string description_;
  std::string uuid_;  // "GPU-" and the UUID's 32 hex digits
  std::vector<fb::Target> targets_;
  cudaStream_t compute_ = nullptr, copy_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  std::unique_ptr<CudnnOps> cudnn_ = std::make_unique<CudnnOps>();
  cudaLibrary_t library_ = nullptr;
  char jit_log_[4096] = {0};  // the PTX compiler's errors (it may compile lazily)
  std::vector<std::vector<Launch>> kernels_;  // per plan kernel
  std::unordered_map<const fb::Command*, Gemm> gemms_;
  void* cublas_workspace_ = nullptr;  // set explicitly, so graph capture allocates nothing
  std::unordered_map<const fb::Command*, Attention> attentions_;
  // Fused attention's scores (and, backward, their gradient; in half also
  // their half copy and FP32 sums of dk and dv): allocated at load for the
  // plan's largest, so graph capture allocates nothing.
  float* attention_scratch_ = nullptr;
  unsigned long long* counter_ = nullptr;       // device: CountNonFinite's result
  unsigned long long* counter_host_ = nullptr;  // pinned
};

CudaBackend::~CudaBackend() {
  if (compute_ != nullptr) cudaStreamSynchronize(compute_);
  if (copy_ != nullptr) cudaStreamSynchronize(copy_);
  cudnn_.reset();  // its handle is bound to compute_: destroyed before the stream
  if (library_ != nullptr) cudaLibraryUnload(library_);
  if (cublas_ != nullptr) cublasDestroy(cublas_);
  if (cublas_workspace_ != nullptr) cudaFree(cublas_workspace_);
  if (attention_scratch_ != nullptr) cudaFree(attention_scratch_);
  if (counter_ != nullptr) cudaFree(counter_);
  if (counter_host_ != nullptr) cudaFreeHost(counter_host_);
  if (compute_ != nullptr) cudaStreamDestroy(compute_);
  if (copy_ != nullptr) cudaStreamDestroy(copy_);
}

Status CudaBackend::Initialize() {
  Status usable = CudaUsable(options_.device);
  if (!usable.ok()) return usable;
  GRAPHC_CUDA(cudaSetDevice(options_.device), "selecting the device");
  cudaDeviceProp props;
  GRAPHC_CUDA(cudaGetDeviceProperties(&props, options_.device), "device properties");
  const int sm = props.major * 10 + props.minor;
  if (sm < 80)
    return Status(ErrorCode::kUnsupported,
                  std::string("CUDA device ") + std::to_string(options_.device) + " (" +
                      props.name + ") is sm_" + std::to_string(sm) +
                      "; graphc's PTX needs sm_80 or newer");
  // PTX is forward-compatible: newer GPUs JIT the sm_90 module, else sm_80's.
  targets_ = sm >= 90 ? std::vector<fb::Target>{fb::Target::CudaSm90, fb::Target::CudaSm80}
                      : std::vector<fb::Target>{fb::Target::CudaSm80};
  uuid_ = "GPU-";
  for (unsigned char byte : props.uuid.bytes) {
    char hex[3];
    std::snprintf(hex, sizeof(hex), "%02x", byte);
    uuid_ += hex;
  }
  char memory[32];
  std::snprintf(memory, sizeof(memory), "%.1f GiB", props.totalGlobalMem / 1073741824.0);
  description_ = "cuda:" + std::to_string(options_.device) + " (" + props.name + ", sm_" +
                 std::to_string(sm) + ", " + std::to_string(props.multiProcessorCount) +
                 " SMs, " + memory + "; " + (options_.tf32 ? "tf32" : "strict fp32") +
                 (options_.precise ? ", deterministic convolutions" : "") + "; " +
                 LibraryVersions() + ")";
  GRAPHC_CUDA(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking), "compute stream");
  GRAPHC_CUDA(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking), "copy stream");
  GRAPHC_CUDA(cudaMalloc(reinterpret_cast<void**>(&counter_), sizeof(*counter_)), "allocation");
  GRAPHC_CUDA(cudaMallocHost(reinterpret_cast<void**>(&counter_host_), sizeof(*counter_host_)), "pinned allocation");
  cublasStatus_t blas = cublasCreate(&cublas_);
  if (blas != CUBLAS_STATUS_SUCCESS) return CublasFailed(blas, "cannot start");
  // NVIDIA's recommended workspace for Hopper (32 MiB), owned here: cuBLAS
  // then allocates nothing itself, which graph capture requires.
  constexpr size_t kCublasWorkspace = size_t{32} << 20;
  GRAPHC_CUDA(cudaMalloc(&cublas_workspace_, kCublasWorkspace), "cuBLAS workspace");
  blas = cublasSetStream(cublas_, compute_);
  if (blas == CUBLAS_STATUS_SUCCESS) blas = cublasSetWorkspace(cublas_, cublas_workspace_, kCublasWorkspace);
  // Half gemms reduce split-K partial sums in FP32 too (cuBLAS may otherwise
  // reduce them in the output type, rounding more than once).
  if (blas == CUBLAS_STATUS_SUCCESS)
    blas = cublasSetMathMode(
        cublas_, static_cast<cublasMath_t>(
                     (options_.tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH) |
                     CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION));
  if (blas != CUBLAS_STATUS_SUCCESS) return CublasFailed(blas, "setup");
  CudnnOptions cudnn;
  cudnn.tf32 = options_.tf32;
  cudnn.precise = options_.precise;
  cudnn.cache_path = options_.cudnn_cache.value_or(AlgorithmCache::DefaultPath());
  cudnn.device_key = std::string(props.name) + " sm_" + std::to_string(sm);
  return cudnn_->Initialize(compute_, cudnn);
}

Status CudaBackend::LoadKernels(const Plan& plan) {
  StatusOr<fb::Target> target = ChooseTarget(plan, targets());
  if (!target.ok()) return target.status();
  Status status = LoadGeneratedKernels(plan, *target);
  if (status.ok()) status = PrepareGemms(plan);
  if (status.ok()) status = PrepareAttention(plan);
  if (status.ok()) status = cudnn_->Prepare(plan);
  if (status.ok()) GRAPHC_CUDA(cudaStreamSynchronize(compute_), "loading the plan");
  return status;
}

Status CudaBackend::LoadGeneratedKernels(const Plan& plan, fb::Target target) {
  const fb::Plan& root = plan.root();
  kernels_.clear();
  if (root.kernels() == nullptr || root.kernels()->size() == 0) return Status::Ok();
  const fb::KernelBinary* binary = BinaryFor(plan, target);
  if (binary == nullptr || binary->format() != fb::BinaryFormat::Ptx)
    return Status(ErrorCode::kPlanMissingKernel,
                  std::string("no PTX for ") + fb::EnumNameTarget(target) + " in the plan");
  // The loader checked the PTX declares every launched entry with one .u64
  // parameter per buffer; cudaLibraryLoadData wants it NUL-terminated.
  std::string ptx(reinterpret_cast<const char*>(binary->data()->data()), binary->data()->size());
  char* log = jit_log_;
  std::memset(jit_log_, 0, sizeof(jit_log_));
  cudaJitOption options[] = {cudaJitErrorLogBuffer, cudaJitErrorLogBufferSizeBytes};
  void* values[] = {log, reinterpret_cast<void*>(static_cast<uintptr_t>(sizeof(jit_log_)))};
  if (library_ != nullptr) cudaLibraryUnload(library_);
  library_ = nullptr;
  cudaError_t error =
      cudaLibraryLoadData(&library_, ptx.c_str(), options, values, 2, nullptr, nullptr, 0);
  if (error != cudaSuccess) {
    library_ = nullptr;
    std::string detail =
        log[0] ? ": " + Printable(std::string(log, strnlen(log, sizeof(jit_log_)))) : "";
    return Status(ErrorCode::kBackend, std::string("cannot load the plan's ") +
                                           fb::EnumNameTarget(target) + " PTX: " +
                                           cudaGetErrorName(error) + detail);
  }
  StatusOr<std::vector<const fb::GpuKernel*>> lists = LaunchListsOf(plan, *binary, "the PTX");
  if (!lists.ok()) return lists.status();
  for (uint32_t k = 0; k < root.kernels()->size(); ++k) {
    const fb::Kernel* kernel = root.kernels()->Get(k);
    std::vector<Launch>& list = kernels_.emplace_back();
    for (const fb::GpuLaunch* launch : *(*lists)[k]->launches()) {
      Launch& l = list.emplace_back();
      error = cudaLibraryGetKernel(&l.kernel, library_, launch->entry()->c_str());
      if (error != cudaSuccess)
        return Status(ErrorCode::kPlanMissingKernel,
                      "launch '" + PrintableOf(launch->entry()) + "' of kernel '" +
                          PrintableOf(kernel->name()) + "' is not in the PTX (" +
                          cudaGetErrorName(error) + ")");
      l.grid = dim3(launch->grid()->Get(0), launch->grid()->Get(1), launch->grid()->Get(2));
      l.block = dim3(launch->block()->Get(0), launch->block()->Get(1), launch->block()->Get(2));
      // Loading is lazy by default (CUDA 12.2+): asking for the attributes
      // compiles the PTX now, so its errors surface here, with the log, and
      // a block larger than the compiled kernel allows (registers) is
      // refused at load rather than in the first step.
      cudaFuncAttributes attributes;
      error = cudaFuncGetAttributes(&attributes, reinterpret_cast<const void*>(l.kernel));
      if (error != cudaSuccess) {
        std::string detail =
            log[0] ? ": " + Printable(std::string(log, strnlen(log, sizeof(jit_log_)))) : "";
        return Status(ErrorCode::kBackend, "cannot compile launch '" +
                                               PrintableOf(launch->entry()) + "' of the plan's " +
                                               fb::EnumNameTarget(target) + " PTX: " +
                                               cudaGetErrorName(error) + detail);
      }
      const uint64_t threads = uint64_t{l.block.x} * l.block.y * l.block.z;
      if (threads > static_cast<uint64_t>(attributes.maxThreadsPerBlock))
        return Status(ErrorCode::kUnsupported,
                      "launch '" + PrintableOf(launch->entry()) + "' of kernel '" +
                          PrintableOf(kernel->name()) + "' has " + std::to_string(threads) +
                          " threads per block; compiled for this GPU it allows " +
                          std::to_string(attributes.maxThreadsPerBlock));
      l.args.assign(launch->args()->begin(), launch->args()->end());
    }
  }
  return Status::Ok();
}

Status CudaBackend::PrepareGemms(const Plan& plan) {
  const fb::Plan& root = plan.root();
  gemms_.clear();
  auto shape = [&](int32_t index) { return ShapeOf(*root.buffers()->Get(index)); };
  for (const fb::Program* program : *root.programs())
    for (const fb::Command* c : *program->commands()) {
      if (c->op() != fb::Opcode::Gemm) continue;
      std::vector<int64_t> a = shape(c->inputs()->Get(0)), b = shape(c->inputs()->Get(1));
      std::vector<int64_t> out = shape(c->outputs()->Get(0));
      const size_t rank = out.size();
      if ((rank != 2 && rank != 3) || a.size() != rank || b.size() != rank)
        return Status(ErrorCode::kUnsupported, "cuBLAS Gemm takes operands of rank 2 or 3");
      Gemm g;
      g.ta = c->gemm() && c->gemm()->transpose_a();
      g.tb = c->gemm() && c->gemm()->transpose_b();
      g.bias = c->inputs()->size() == 3;
      // The loader proved every operand F32, F16 or BF16, all alike.
      switch (root.buffers()->Get(c->outputs()->Get(0))->dtype()) {
        case fb::DType::F16:
          g.type = CUDA_R_16F;
          break;
        case fb::DType::BF16:
          g.type = CUDA_R_16BF;
          break;
        default:
          g.type = CUDA_R_32F;
      }
      const int64_t m = out[rank - 2], n = out[rank - 1];
      const int64_t k = g.ta ? a[rank - 2] : a[rank - 1];
      const int64_t batch = rank == 3 ? out[0] : 1;
      for (int64_t v : {m, n, k, batch})
        if (v <= 0 || v > INT32_MAX)
          return Status(ErrorCode::kUnsupported, "cuBLAS Gemm dimensions must be below 2^31");
      g.m = static_cast<int>(m);
      g.n = static_cast<int>(n);
      g.k = static_cast<int>(k);
      g.batch = static_cast<int>(batch);
      if (rank == 3) {
        g.stride_a = a[0] == 1 ? 0 : m * k;
        g.stride_b = b[0] == 1 ? 0 : k * n;
        g.stride_c = m * n;
      }
      gemms_[c] = g;
    }
  return Status::Ok();
}

Status CudaBackend::RunGemm(const fb::Command& command, const DeviceMemory* operands) {
  auto it = gemms_.find(&command);
  if (it == gemms_.end())
    return Status(ErrorCode::kInvalidArgument, "gemm command was not prepared");
  const Gemm& g = it->second;
  const float one = 1.0f, zero = 0.0f;
  const int result = static_cast<int>(command.inputs()->size());
  const void* a = operands[0].address;
  const void* b = operands[1].address;
  void* c = operands[result].address;
  // The bias is broadcast into C and the product added onto it (beta = 1):
  // at the FP32 compute type, so a half C is rounded once.
  if (g.bias) {
    GRAPHC_CUDA(cuda::BroadcastRows(operands[2].address, c, g.type, int64_t{g.batch} * g.m, g.n,
                                    compute_),
                "gemm bias");
  }
  // Row-major C[m,n] is column-major C^T[n,m] = op(B)^T[n,k] op(A)^T[k,m].
  const cublasOperation_t op_b = g.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = g.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int ldb = g.tb ? g.k : g.n, lda = g.ta ? g.m : g.k;
  const float* beta = g.bias ? &one : &zero;
  cublasStatus_t status;
  if (g.type == CUDA_R_32F) {
    const auto* af = static_cast<const float*>(a);
    const auto* bf = static_cast<const float*>(b);
    auto* cf = static_cast<float*>(c);
    status = g.batch == 1
                 ? cublasSgemm(cublas_, op_b, op_a, g.n, g.m, g.k, &one, bf, ldb, af, lda, beta,
                               cf, g.n)
                 : cublasSgemmStridedBatched(cublas_, op_b, op_a, g.n, g.m, g.k, &one, bf, ldb,
                                             g.stride_b, af, lda, g.stride_a, beta, cf, g.n,
                                             g.stride_c, g.batch);
  } else {
    // Half operands, FP32 accumulation and FP32 alpha and beta.
    status = g.batch == 1
                 ? cublasGemmEx(cublas_, op_b, op_a, g.n, g.m, g.k, &one, b, g.type, ldb, a,
                                g.type, lda, beta, c, g.type, g.n, CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT)
                 : cublasGemmStridedBatchedEx(cublas_, op_b, op_a, g.n, g.m, g.k, &one, b,
                                              g.type, ldb, g.stride_b, a, g.type, lda,
                                              g.stride_a, beta, c, g.type, g.n, g.stride_c,
                                              g.batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  }
  if (status != CUBLAS_STATUS_SUCCESS) return CublasFailed(status, "gemm");
  return Status::Ok();
}

Status CudaBackend::PrepareAttention(const Plan& plan) {
  const fb::Plan& root = plan.root();
  attentions_.clear();
  if (attention_scratch_ != nullptr) cudaFree(attention_scratch_);
  attention_scratch_ = nullptr;
  auto shape = [&](int32_t index) { return ShapeOf(*root.buffers()->Get(index)); };
  // At most 4 GiB of scores a buffer: a grid of a warp per row then stays
  // far below 2^31 blocks.
  const int64_t budget = static_cast<int64_t>(
      std::min<uint64_t>(options_.attention_scratch_bytes, uint64_t{4} << 30) / sizeof(float));
  int64_t floats = 0;
  for (const fb::Program* program : *root.programs())
    for (const fb::Command* c : *program->commands()) {
      if (!IsAttention(c->op())) continue;
      // The loader proved the shapes (q [G, Lq, D], k [G, Lk, D] or
      // [G, D, Lk], v [G, Lk, Dv]) and the dtypes (q's for q, k, v, o and
      // their gradients: F32, F16 or BF16; F32 for lse and the biases).
      std::vector<int64_t> q = shape(c->inputs()->Get(0)), k = shape(c->inputs()->Get(1)),
                           v = shape(c->inputs()->Get(2));
      Attention a;
      a.dims.transpose_k = c->attention()->transpose_k();
      a.dims.groups = q[0], a.dims.queries = q[1], a.dims.depth = q[2];
      a.dims.keys = k[a.dims.transpose_k ? 2 : 1], a.dims.values = v[2];
      const fb::DType dtype = root.buffers()->Get(c->inputs()->Get(0))->dtype();
      if (dtype != fb::DType::F32 && dtype != fb::DType::F16 && dtype != fb::DType::BF16)
        return Status(ErrorCode::kUnsupported, "fused attention on CUDA takes F32, F16 or BF16");
      a.dims.type = dtype == fb::DType::F16    ? CUDA_R_16F
                    : dtype == fb::DType::BF16 ? CUDA_R_16BF
                                               : CUDA_R_32F;
      for (int64_t d : {a.dims.groups, a.dims.queries, a.dims.keys, a.dims.depth, a.dims.values})
        if (d <= 0 || d > INT32_MAX)
          return Status(ErrorCode::kUnsupported,
                        "fused attention on CUDA takes dimensions below 2^31 (cuBLAS)");
      const uint32_t first_bias = c->op() == fb::Opcode::Attention ? 3 : 6;
      if (c->inputs()->size() - first_bias > static_cast<uint32_t>(cuda::kAttentionMaxBiases))
        return Status(ErrorCode::kUnsupported, "fused attention on CUDA takes at most " +
                                                   std::to_string(cuda::kAttentionMaxBiases) +
                                                   " biases");
      for (uint32_t i = first_bias; i < c->inputs()->size(); ++i)
        a.bias_slices.push_back(shape(c->inputs()->Get(i))[0]);
      const bool backward = c->op() == fb::Opcode::AttentionBackward;
      a.tiling = cuda::TileAttention(a.dims, budget, backward);
      floats = std::max(floats, cuda::AttentionScratchFloats(a.dims, a.tiling, backward));
      attentions_[c] = a;
    }
  if (floats > 0) {
    cudaError_t error = cudaMalloc(reinterpret_cast<void**>(&attention_scratch_),
                                   static_cast<size_t>(floats) * sizeof(float));
    if (error != cudaSuccess) {
      attentions_.clear();
      attention_scratch_ = nullptr;
      return CudaFailed(error, "allocating fused attention's scratch (" +
                                   std::to_string(floats * sizeof(float) >> 20) + " MiB)");
    }
  }
  return Status::Ok();
}

Status CudaBackend::RunAttention(const fb::Command& command, const DeviceMemory* operands) {
  auto it = attentions_.find(&command);
  if (it == attentions_.end())
    return Status(ErrorCode::kInvalidArgument, "attention command was not prepared");
  const Attention& a = it->second;
  auto f = [&](uint32_t i) { return static_cast<float*>(operands[i].address); };
  auto raw = [&](uint32_t i) { return operands[i].address; };
  // Operands in the plan's order: the inputs (biases last), then the outputs
  // (bias gradients last).
  const bool forward = command.op() == fb::Opcode::Attention;
  const uint32_t first_bias = forward ? 3 : 6;
  const uint32_t inputs = command.inputs()->size();
  const auto* strides = command.attention()->bias_strides();
  cuda::AttentionBiases biases;
  for (uint32_t i = first_bias; i < inputs; ++i) {
    const int n = biases.n++;
    biases.data[n] = f(i);
    biases.count[n] = a.bias_slices[n];
    biases.stride[n] = strides->Get(i - first_bias);
    if (!forward) biases.grad[n] = f(inputs + 3 + (i - first_bias));
  }
  cuda::AttentionStatus status =
      forward ? cuda::AttentionForward(cublas_, compute_, a.dims, a.tiling, raw(0), raw(1),
                                       raw(2), biases, raw(inputs), f(inputs + 1),
                                       attention_scratch_)
              : cuda::AttentionBackward(cublas_, compute_, a.dims, a.tiling, raw(0), raw(1),
                                        raw(2), raw(3), f(4), raw(5), biases, raw(inputs),
                                        raw(inputs + 1), raw(inputs + 2), attention_scratch_);
  if (status.cuda != cudaSuccess) return CudaFailed(status.cuda, status.what);
  if (status.blas != CUBLAS_STATUS_SUCCESS) return CublasFailed(status.blas, status.what);
  return Status::Ok();
}

Status CudaBackend::Run(const fb::Command& command, const DeviceMemory* operands) {
  switch (command.op()) {
    case fb::Opcode::Kernel: {
      int32_t k = command.kernel();
      if (k < 0 || static_cast<size_t>(k) >= kernels_.size())
        return Status(ErrorCode::kInvalidArgument, "kernels are not loaded");
      void* addresses[64];
      void* params[64];
      std::vector<void*> many_addresses, many_params;
      for (const Launch& launch : kernels_[k]) {
        void** address = addresses;
        void** param = params;
        if (launch.args.size() > 64) {
          many_addresses.resize(launch.args.size());
          many_params.resize(launch.args.size());
          address = many_addresses.data();
          param = many_params.data();
        }
        // The loader proved every launch argument one of the command's buffers.
        for (size_t i = 0; i < launch.args.size(); ++i) {
          address[i] = operands[launch.args[i]].address;
          param[i] = &address[i];
        }
        GRAPHC_CUDA(cudaLaunchKernel(reinterpret_cast<const void*>(launch.kernel), launch.grid,
                                     launch.block, param, 0, compute_),
                    "kernel launch");
      }
      return Status::Ok();
    }
    case fb::Opcode::Copy:
      if (operands[0].address != operands[1].address)
        GRAPHC_CUDA(cudaMemcpyAsync(operands[1].address, operands[0].address, operands[0].bytes,
                                    cudaMemcpyDeviceToDevice, compute_),
                    "copy");
      return Status::Ok();
    case fb::Opcode::Gemm:
      return RunGemm(command, operands);
    case fb::Opcode::Attention:
    case fb::Opcode::AttentionBackward:
      return RunAttention(command, operands);
    default:
      return cudnn_->Run(command, operands);
  }
}

StatusOr<uint64_t> CudaBackend::CountNonFinite(DeviceMemory memory, fb::DType dtype) {
  int bits = 0;
  uint32_t exponent = 0;
  switch (dtype) {
    case fb::DType::F32:
      bits = 32, exponent = 0x7f800000u;
      break;
    case fb::DType::F16:
      bits = 16, exponent = 0x7c00u;
      break;
    case fb::DType::BF16:
      bits = 16, exponent = 0x7f80u;
      break;
    default:
      return uint64_t{0};
  }
  GRAPHC_CUDA(cudaMemsetAsync(counter_, 0, sizeof(*counter_), compute_), "non-finite count");
  GRAPHC_CUDA(cuda::CountAllOnesExponent(memory.address,
                                         static_cast<int64_t>(memory.bytes / (bits / 8)), bits,
                                         exponent, counter_, compute_),
              "non-finite count");
  GRAPHC_CUDA(cudaMemcpyAsync(counter_host_, counter_, sizeof(*counter_), cudaMemcpyDeviceToHost,
                              compute_),
              "non-finite count");
  GRAPHC_CUDA(cudaStreamSynchronize(compute_), "non-finite count");
  return static_cast<uint64_t>(*counter_host_);
}

}  // namespace

Status CudaUsable(int device) {
  int count = 0;
  cudaError_t error = cudaGetDeviceCount(&count);
  if (error == cudaErrorInsufficientDriver || error == cudaErrorNoDevice) {
    cudaGetLastError();  // not sticky, but leave no error behind
    return Status(ErrorCode::kUnavailable,
                  error == cudaErrorNoDevice
                      ? std::string("no CUDA device (cudaErrorNoDevice)")
                      : std::string("no CUDA driver (cudaErrorInsufficientDriver: the driver is "
                                    "absent or older than this build's CUDA runtime)"));
  }
  if (error != cudaSuccess) {
    cudaGetLastError();
    return Status(ErrorCode::kUnavailable, std::string("CUDA is unusable: ") +
                                               cudaGetErrorName(error) + " (" +
                                               cudaGetErrorString(error) + ")");
  }
  if (count == 0) return Status(ErrorCode::kUnavailable, "no CUDA device");
  if (device < 0 || device >= count)
    return Status(ErrorCode::kUnavailable, "no CUDA device " + std::to_string(device) + " (" +
                                               std::to_string(count) + " present)");
  return Status::Ok();
}

StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(const CudaOptions& options) {
  auto backend = std::make_unique<CudaBackend>(options);
  Status status = backend->Initialize();
  if (!status.ok()) return status;
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace graphc::runtime
