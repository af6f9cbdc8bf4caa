// cuDNN convolutions and pooling (see cudnn_ops.h). cuDNN 9 still ships the
// descriptor API this file uses and marks it deprecated in favour of its
// graph API; it is the shortest correct path for plain NCHW and NHWC calls
// (FP32, and FP16 or BF16 with FP32 compute), so the warnings are silenced for
// this file only.

#include "runtime/backends/cuda/cudnn_ops.h"

#include <cudnn.h>

#include "runtime/backends/cuda/algorithm_cache.h"
#include "runtime/backends/cuda/device_kernels.h"
#include "contract/printable.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace graphc::runtime {
namespace {

// "9.19.0": the version of the cuDNN library loaded (not of the headers).
std::string CudnnVersion() {
  int major = 0, minor = 0, patch = 0;
  cudnnGetProperty(MAJOR_VERSION, &major);
  cudnnGetProperty(MINOR_VERSION, &minor);
  cudnnGetProperty(PATCH_LEVEL, &patch);
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

// The status, and cuDNN's own account of its last error on this thread
// (cudnnGetLastErrorString, cuDNN 9), which often names the parameter or
// the engine that refused: the one run on a borrowed GPU must be readable
// afterwards.
Status CudnnFailed(cudnnStatus_t status, const std::string& what) {
  char last[1024] = {0};
  cudnnGetLastErrorString(last, sizeof(last));
  std::string message = "cuDNN " + CudnnVersion() + " " + what + ": " + cudnnGetErrorString(status);
  if (last[0] != '\0') message += " (" + Printable(last) + ")";
  return Status(ErrorCode::kBackend, message);
}

#define GRAPHC_CUDNN(call, what)                                  \
  do {                                                            \
    cudnnStatus_t graphc_status_ = (call);                        \
    if (graphc_status_ != CUDNN_STATUS_SUCCESS)                   \
      return CudnnFailed(graphc_status_, what);                   \
  } while (0)

std::vector<int64_t> Shape(const fb::Plan& plan, int32_t buffer) {
  const auto* shape = plan.buffers()->Get(buffer)->shape();
  return std::vector<int64_t>(shape->begin(), shape->end());
}

bool FitsInt(const std::vector<int64_t>& dims) {
  return std::all_of(dims.begin(), dims.end(),
                     [](int64_t d) { return d > 0 && d <= INT32_MAX; });
}

// cuDNN pads both sides of a dimension alike. The plan's padding may differ
// between the sides (before, after); the call is the same as long as padding
// both sides by `before` gives the plan's output size: the windows then start
// at the same place and no window reads further than the plan's padding.
bool SymmetricEnough(int64_t in, int64_t window, int64_t stride, int64_t dilation,
                     int64_t before, int64_t out) {
  const int64_t span = dilation * (window - 1) + 1;
  return in + 2 * before >= span && (in + 2 * before - span) / stride + 1 == out;
}

struct Descriptors {
  cudnnTensorDescriptor_t a = nullptr, b = nullptr, bias = nullptr;
  // A filter stored OIHW under NHWC activations, as tensors of its two
  // layouts (cudnnTransformTensor reorders between them).
  cudnnTensorDescriptor_t oihw = nullptr, ohwi = nullptr;
  cudnnFilterDescriptor_t filter = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnPoolingDescriptor_t pool = nullptr;

  ~Descriptors() {
    if (a) cudnnDestroyTensorDescriptor(a);
    if (b) cudnnDestroyTensorDescriptor(b);
    if (bias) cudnnDestroyTensorDescriptor(bias);
    if (oihw) cudnnDestroyTensorDescriptor(oihw);
    if (ohwi) cudnnDestroyTensorDescriptor(ohwi);
    if (filter) cudnnDestroyFilterDescriptor(filter);
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
    if (pool) cudnnDestroyPoolingDescriptor(pool);
  }
};

// cuDNN takes an activation's logical dims [N, C, H, W] and its layout; the
// plan's shape is its dims in memory order ([N, H, W, C] for NHWC).
std::vector<int64_t> Logical(const std::vector<int64_t>& shape, bool nhwc) {
  if (!nhwc || shape.size() != 4) return shape;
  return {shape[0], shape[3], shape[1], shape[2]};
}

// `dims` are logical (NCHW order) whatever the layout.
Status Tensor4d(cudnnTensorDescriptor_t* desc, const std::vector<int64_t>& dims,
                cudnnDataType_t type, bool nhwc = false) {
  GRAPHC_CUDNN(cudnnCreateTensorDescriptor(desc), "tensor descriptor");
  const cudnnTensorFormat_t format = nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  GRAPHC_CUDNN(cudnnSetTensor4dDescriptor(*desc, format, type,
                                          static_cast<int>(dims[0]), static_cast<int>(dims[1]),
                                          static_cast<int>(dims[2]), static_cast<int>(dims[3])),
               "tensor descriptor");
  return Status::Ok();
}

// The most workspace one convolution algorithm may take.
constexpr size_t kMaxWorkspace = size_t{1} << 30;

size_t Bytes(const std::vector<int64_t>& dims, size_t element_bytes) {
  size_t bytes = element_bytes;
  for (int64_t v : dims) bytes *= static_cast<size_t>(v);
  return (bytes + 255) / 256 * 256;
}

// The cuDNN and CUDA names of a library command's dtype (the loader proved
// every operand F32, F16 or BF16, all alike).
struct ElementType {
  cudnnDataType_t cudnn;
  cudaDataType_t cuda;
  size_t bytes;
  bool half;
};

ElementType ElementTypeOf(fb::DType dtype) {
  switch (dtype) {
    case fb::DType::F16:
      return {CUDNN_DATA_HALF, CUDA_R_16F, 2, true};
    case fb::DType::BF16:
      return {CUDNN_DATA_BFLOAT16, CUDA_R_16BF, 2, true};
    default:
      return {CUDNN_DATA_FLOAT, CUDA_R_32F, 4, false};
  }
}

// A prepared command: descriptors (a: the input side of the forward call, b:
// its output side), the algorithm, and where in the scratch memory the call
// keeps what cuDNN needs beyond the plan's operands.
struct Call {
  Descriptors d;
  ElementType type = ElementTypeOf(fb::DType::F32);
  int algorithm = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  size_t workspace = 0;
  // Padding that differs between sides: the input side is padded explicitly
  // into scratch (xp: [planes, hp, wp] around [planes, h, w] at (top, left),
  // filled with pad_value) and cuDNN runs unpadded on it; a gradient of it
  // (dxp) is cropped back.
  bool padded = false;
  int64_t planes = 0, h = 0, w = 0, top = 0, left = 0, hp = 0, wp = 0;
  float pad_value = 0;
  // An OIHW filter under NHWC activations: cuDNN runs the convolution with
  // the filter OHWI (it has no backward-data algorithm for the mixed
  // layouts), reordered into scratch at `wr` before the call (forward,
  // backward data) or from it after (backward filter).
  bool reorder_filter = false;
  size_t xp = 0, y = 0, dxp = 0, x_stand_in = 0, wr = 0;  // scratch offsets
};

// Sets up `call` for explicit padding of x (logical dims) by `pad` [t, b,
// l, r]; returns the padded input's logical dims. NCHW pads N*C planes of
// [H, W]; NHWC pads N planes of [H, W*C], a column being C elements, so the
// same kernels serve both.
std::vector<int64_t> Pad(Call& call, const std::vector<int64_t>& x, bool nhwc,
                         const flatbuffers::Vector<int64_t>& pad, float value) {
  const int64_t channels = nhwc ? x[1] : 1;
  const int64_t hp = x[2] + pad.Get(0) + pad.Get(1), wp = x[3] + pad.Get(2) + pad.Get(3);
  call.padded = true;
  call.planes = nhwc ? x[0] : x[0] * x[1];
  call.h = x[2];
  call.w = x[3] * channels;
  call.top = pad.Get(0);
  call.left = pad.Get(2) * channels;
  call.hp = hp;
  call.wp = wp * channels;
  call.pad_value = value;
  return {x[0], x[1], hp, wp};
}

// One algorithm cudnnFind* timed, whichever direction.
struct Candidate {
  int algorithm = 0;
  cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
  float ms = 0;
  size_t memory = 0;
  cudnnDeterminism_t determinism = CUDNN_NON_DETERMINISTIC;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};

template <typename Perf>
std::vector<Candidate> CandidatesOf(const Perf* perf, int returned) {
  std::vector<Candidate> candidates;
  for (int i = 0; i < returned; ++i)
    candidates.push_back({static_cast<int>(perf[i].algo), perf[i].status, perf[i].time,
                          perf[i].memory, perf[i].determinism, perf[i].mathType});
  return candidates;
}

// FFT and Winograd algorithms trade exactness for speed (their transforms
// round where a direct or implicit-GEMM sum would not).
bool Transformed(fb::Opcode op, int algorithm) {
  switch (op) {
    case fb::Opcode::Conv2d:
      return algorithm == CUDNN_CONVOLUTION_FWD_ALGO_FFT ||
             algorithm == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING ||
             algorithm == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD ||
             algorithm == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
    case fb::Opcode::Conv2dBackwardData:
      return algorithm == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT ||
             algorithm == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING ||
             algorithm == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD ||
             algorithm == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
    default:
      return algorithm == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT ||
             algorithm == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING ||
             algorithm == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD ||
             algorithm == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
  }
}

int AlgorithmCount(fb::Opcode op) {
  if (op == fb::Opcode::Conv2d) return CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
  if (op == fb::Opcode::Conv2dBackwardData) return CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
  return CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
}

const char* MathName(cudnnMathType_t math) {
  switch (math) {
    case CUDNN_DEFAULT_MATH:
      return "default";
    case CUDNN_TENSOR_OP_MATH:
      return "tensor-op";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION:
      return "tensor-op-allow-conversion";
    case CUDNN_FMA_MATH:
      return "fma";
  }
  return "unknown";
}

}  // namespace

struct CudnnOps::Impl {
  cudnnHandle_t handle = nullptr;
  CudnnOptions options;
  const fb::Plan* plan = nullptr;
  std::unordered_map<const fb::Command*, Call> calls;
  // Distinct convolutions (the cache key) -> the chosen algorithm.
  std::map<std::string, std::pair<int, cudnnMathType_t>> chosen;
  std::unique_ptr<AlgorithmCache> cache;
  int timed = 0, from_cache = 0;  // distinct convolutions, by how they were chosen
  double timing_seconds = 0;      // in cudnnFind*
  std::string cache_note;         // why the cache was not saved
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  // What calls keep beyond their operands (padded inputs, the recomputed
  // forward output of max-pooling backward, average pooling's stand-in for
  // x); calls run one at a time on the stream, so they share it.
  void* scratch = nullptr;
  size_t scratch_bytes = 0;

  ~Impl() {
    calls.clear();
    if (workspace) cudaFree(workspace);
    if (scratch) cudaFree(scratch);
    if (handle) cudnnDestroy(handle);
  }

  Status PrepareConv(const fb::Command& c, Call& call);
  Status PreparePool(const fb::Command& c, Call& call);
  Status ChooseAlgorithm(const fb::Command& c, Call& call, const std::string& problem);
  // The math a convolution may use, as its descriptor states it: half data on
  // tensor cores (FP32 accumulation, never a conversion to FP16), FP32 with
  // TF32 allowed, or strict FP32 (FMA math: cuDNN then runs no tensor-core
  // kernel, whatever it calls the one it picks).
  cudnnMathType_t Allowed(const Call& call) const {
    return call.type.half ? CUDNN_TENSOR_OP_MATH
           : options.tf32 ? CUDNN_DEFAULT_MATH
                          : CUDNN_FMA_MATH;
  }
  // Whether a candidate's math may run `call`: never a conversion of FP32
  // data to FP16; in strict FP32 the descriptor's FMA math already rules
  // tensor cores out, and a candidate labelled tensor-op is refused all the
  // same (FMA- and default-labelled ones are taken: cuDNN's labels differ
  // between versions, the descriptor is what binds it).
  bool MathAllowed(cudnnMathType_t math, const Call& call) const {
    if (math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) return false;
    return call.type.half || options.tf32 || math != CUDNN_TENSOR_OP_MATH;
  }
  // The math a chosen candidate runs with: in strict FP32 always FMA math,
  // whatever cuDNN labelled it (a "default" label run as default math would
  // allow TF32 on sm_80 and newer).
  cudnnMathType_t RunMath(cudnnMathType_t labelled, const Call& call) const {
    return call.type.half || options.tf32 ? labelled : CUDNN_FMA_MATH;
  }
  // Algorithms cuDNN documents as non-deterministic (the cache records no
  // determinism, so precise mode refuses these by name).
  static bool NonDeterministic(fb::Opcode op, int algorithm) {
    if (op == fb::Opcode::Conv2dBackwardData) return algorithm == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0;
    if (op == fb::Opcode::Conv2dBackwardFilter)
      return algorithm == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 ||
             algorithm == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3;
    return false;
  }
  std::string MathMode(const Call& call) const {
    return std::string(call.type.half ? "half" : options.tf32 ? "tf32" : "strict fp32") +
           (options.precise ? ", precise" : "");
  }
  // Times the candidates of `c` (cudnnFind*) with `call`'s descriptors.
  Status Time(const fb::Command& c, const Call& call, std::vector<Candidate>* candidates);
  // The workspace `call`'s algorithm needs, or cuDNN's refusal of it.
  Status WorkspaceOf(const fb::Command& c, Call& call);
};

Status CudnnOps::Impl::PrepareConv(const fb::Command& c, Call& call) {
  const fb::ConvAttrs& attrs = *c.conv();
  const bool nhwc = attrs.layout() == fb::Layout::NHWC;
  // x, w and y as the forward convolution sees them, whichever direction.
  std::vector<int64_t> x, w, y;
  if (c.op() == fb::Opcode::Conv2d) {
    x = Shape(*plan, c.inputs()->Get(0));
    w = Shape(*plan, c.inputs()->Get(1));
    y = Shape(*plan, c.outputs()->Get(0));
  } else if (c.op() == fb::Opcode::Conv2dBackwardData) {
    y = Shape(*plan, c.inputs()->Get(0));
    w = Shape(*plan, c.inputs()->Get(1));
    x = Shape(*plan, c.outputs()->Get(0));
  } else {
    x = Shape(*plan, c.inputs()->Get(0));
    y = Shape(*plan, c.inputs()->Get(1));
    w = Shape(*plan, c.outputs()->Get(0));
  }
  if (x.size() != 4 || w.size() != 4 || y.size() != 4 || !FitsInt(x) || !FitsInt(w) ||
      !FitsInt(y))
    return Status(ErrorCode::kUnsupported, "cuDNN takes 4-d convolutions below 2^31 per dimension");
  // From here x, y and w are logical (NCHW order; the filter [K, C, R, S]
  // whether stored OIHW or, with an NHWC filter layout, OHWI: KRSC).
  const bool ohwi = attrs.filter_layout() == fb::Layout::NHWC;
  x = Logical(x, nhwc);
  y = Logical(y, nhwc);
  w = Logical(w, ohwi);
  const int64_t sh = attrs.strides()->Get(0), sw = attrs.strides()->Get(1);
  const int64_t dh = attrs.dilations()->Get(0), dw = attrs.dilations()->Get(1);
  int64_t top = attrs.padding()->Get(0), left = attrs.padding()->Get(2);
  std::vector<int64_t> a = x;
  if (!SymmetricEnough(x[2], w[2], sh, dh, top, y[2]) ||
      !SymmetricEnough(x[3], w[3], sw, dw, left, y[3])) {
    a = Pad(call, x, nhwc, *attrs.padding(), 0.0f);
    top = left = 0;
    if (c.op() == fb::Opcode::Conv2dBackwardData)
      call.dxp = 0;  // dx padded, then cropped
    else
      call.xp = 0;  // x padded
    scratch_bytes = std::max(scratch_bytes, Bytes(a, call.type.bytes));
  }
  Descriptors& d = call.d;
  Status status = Tensor4d(&d.a, a, call.type.cudnn, nhwc);
  if (status.ok()) status = Tensor4d(&d.b, y, call.type.cudnn, nhwc);
  if (!status.ok()) return status;
  if (nhwc && !ohwi) {
    call.reorder_filter = true;
    call.wr = call.padded ? Bytes(a, call.type.bytes) : 0;
    scratch_bytes = std::max(scratch_bytes, call.wr + Bytes(w, call.type.bytes));
    status = Tensor4d(&d.oihw, w, call.type.cudnn, false);
    if (status.ok()) status = Tensor4d(&d.ohwi, w, call.type.cudnn, true);
    if (!status.ok()) return status;
  }
  GRAPHC_CUDNN(cudnnCreateFilterDescriptor(&d.filter), "filter descriptor");
  GRAPHC_CUDNN(cudnnSetFilter4dDescriptor(d.filter, call.type.cudnn,
                                          nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                                          static_cast<int>(w[0]), static_cast<int>(w[1]),
                                          static_cast<int>(w[2]), static_cast<int>(w[3])),
               "filter descriptor");
  GRAPHC_CUDNN(cudnnCreateConvolutionDescriptor(&d.conv), "convolution descriptor");
  // FP32 compute whatever the data: half operands accumulate in FP32.
  GRAPHC_CUDNN(cudnnSetConvolution2dDescriptor(d.conv, static_cast<int>(top),
                                               static_cast<int>(left), static_cast<int>(sh),
                                               static_cast<int>(sw), static_cast<int>(dh),
                                               static_cast<int>(dw), CUDNN_CROSS_CORRELATION,
                                               CUDNN_DATA_FLOAT),
               "convolution descriptor");
  GRAPHC_CUDNN(cudnnSetConvolutionGroupCount(d.conv, static_cast<int>(attrs.groups())),
               "convolution groups");
  if (c.op() == fb::Opcode::Conv2d && c.inputs()->size() == 3) {
    // [1, C, 1, 1] lies alike in both layouts.
    status = Tensor4d(&d.bias, {1, y[1], 1, 1}, call.type.cudnn);
    if (!status.ok()) return status;
  }
  std::string key = std::to_string(static_cast<int>(c.op())) + ":" +
                    std::to_string(static_cast<int>(call.type.cudnn)) +
                    (nhwc ? ":nhwc:ohwi" : "");
  for (const auto* dims : {&a, &w, &y})
    for (int64_t v : *dims) key += "," + std::to_string(v);
  for (int64_t v : {sh, sw, dh, dw, top, left, static_cast<int64_t>(attrs.groups())})
    key += ";" + std::to_string(v);
  return ChooseAlgorithm(c, call, key);
}

Status CudnnOps::Impl::Time(const fb::Command& c, const Call& call,
                            std::vector<Candidate>* candidates) {
  constexpr int kMax = 16;
  int returned = 0;
  const Descriptors& d = call.d;
  const auto started = std::chrono::steady_clock::now();
  if (c.op() == fb::Opcode::Conv2d) {
    cudnnConvolutionFwdAlgoPerf_t perf[kMax];
    GRAPHC_CUDNN(cudnnFindConvolutionForwardAlgorithm(handle, d.a, d.filter, d.conv, d.b, kMax,
                                                      &returned, perf),
                 "timing forward convolution algorithms");
    *candidates = CandidatesOf(perf, returned);
  } else if (c.op() == fb::Opcode::Conv2dBackwardData) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[kMax];
    GRAPHC_CUDNN(cudnnFindConvolutionBackwardDataAlgorithm(handle, d.filter, d.b, d.conv, d.a,
                                                           kMax, &returned, perf),
                 "timing backward-data convolution algorithms");
    *candidates = CandidatesOf(perf, returned);
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[kMax];
    GRAPHC_CUDNN(cudnnFindConvolutionBackwardFilterAlgorithm(handle, d.a, d.b, d.conv, d.filter,
                                                             kMax, &returned, perf),
                 "timing backward-filter convolution algorithms");
    *candidates = CandidatesOf(perf, returned);
  }
  timing_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return Status::Ok();
}

Status CudnnOps::Impl::WorkspaceOf(const fb::Command& c, Call& call) {
  const Descriptors& d = call.d;
  GRAPHC_CUDNN(cudnnSetConvolutionMathType(call.d.conv, call.math), "math type");
  if (c.op() == fb::Opcode::Conv2d)
    GRAPHC_CUDNN(cudnnGetConvolutionForwardWorkspaceSize(
                     handle, d.a, d.filter, d.conv, d.b,
                     static_cast<cudnnConvolutionFwdAlgo_t>(call.algorithm), &call.workspace),
                 "workspace size");
  else if (c.op() == fb::Opcode::Conv2dBackwardData)
    GRAPHC_CUDNN(cudnnGetConvolutionBackwardDataWorkspaceSize(
                     handle, d.filter, d.b, d.conv, d.a,
                     static_cast<cudnnConvolutionBwdDataAlgo_t>(call.algorithm), &call.workspace),
                 "workspace size");
  else
    GRAPHC_CUDNN(cudnnGetConvolutionBackwardFilterWorkspaceSize(
                     handle, d.a, d.b, d.conv, d.filter,
                     static_cast<cudnnConvolutionBwdFilterAlgo_t>(call.algorithm),
                     &call.workspace),
                 "workspace size");
  if (call.workspace > kMaxWorkspace)
    return Status(ErrorCode::kBackend, "algorithm " + std::to_string(call.algorithm) +
                                           " needs " + std::to_string(call.workspace) +
                                           " bytes of workspace");
  return Status::Ok();
}

// Chooses each distinct convolution's algorithm once: from this process's
// earlier choice, else from the algorithm cache (if cuDNN still accepts it),
// else by timing every candidate and keeping the fastest that succeeds with
// the allowed math, a workspace within kMaxWorkspace (all calls share one)
// and, in precise mode, a deterministic algorithm without FFT or Winograd
// transforms. With none, the error lists every candidate.
Status CudnnOps::Impl::ChooseAlgorithm(const fb::Command& c, Call& call,
                                       const std::string& problem) {
  const cudnnMathType_t allowed = Allowed(call);
  const std::string key = options.device_key + "|cudnn " + CudnnVersion() + "|" +
                          MathMode(call) + "|" + problem;
  auto found = chosen.find(key);
  if (found != chosen.end()) {
    call.algorithm = found->second.first;
    call.math = found->second.second;
    Status status = WorkspaceOf(c, call);
    if (!status.ok()) return status;
    workspace_bytes = std::max(workspace_bytes, call.workspace);
    return Status::Ok();
  }
  // The key holds the math mode, so a cached choice was made under these
  // rules; it is checked again all the same (the file is only a hint).
  if (std::optional<AlgorithmCache::Choice> cached = cache->Find(key);
      cached && cached->algorithm < AlgorithmCount(c.op()) &&
      cached->math <= CUDNN_FMA_MATH &&
      MathAllowed(static_cast<cudnnMathType_t>(cached->math), call) &&
      !(options.precise && (Transformed(c.op(), cached->algorithm) ||
                            NonDeterministic(c.op(), cached->algorithm)))) {
    call.algorithm = cached->algorithm;
    call.math = RunMath(static_cast<cudnnMathType_t>(cached->math), call);
    if (WorkspaceOf(c, call).ok()) {
      chosen.emplace(key, std::make_pair(call.algorithm, call.math));
      ++from_cache;
      workspace_bytes = std::max(workspace_bytes, call.workspace);
      return Status::Ok();
    }
    cache->Drop(key);  // cuDNN no longer takes it: timed again below
  }
  GRAPHC_CUDNN(cudnnSetConvolutionMathType(call.d.conv, allowed), "math type");
  std::vector<Candidate> candidates;
  Status timed_ok = Time(c, call, &candidates);
  if (!timed_ok.ok()) return timed_ok;
  ++timed;
  auto acceptable = [&](const Candidate& k) {
    if (k.status != CUDNN_STATUS_SUCCESS || k.memory > kMaxWorkspace) return false;
    if (!MathAllowed(k.math, call)) return false;
    if (options.precise &&
        (k.determinism != CUDNN_DETERMINISTIC || Transformed(c.op(), k.algorithm)))
      return false;
    return true;
  };
  // cudnnFind* returns the candidates fastest first: the first acceptable
  // one whose workspace cuDNN then confirms.
  auto best = candidates.end();
  for (auto k = candidates.begin(); k != candidates.end() && best == candidates.end(); ++k) {
    if (!acceptable(*k)) continue;
    call.algorithm = k->algorithm;
    call.math = RunMath(k->math, call);
    if (WorkspaceOf(c, call).ok()) best = k;
  }
  if (best == candidates.end()) {
    std::string listed;
    for (const Candidate& k : candidates)
      listed += "\n  algorithm " + std::to_string(k.algorithm) + ": " +
                cudnnGetErrorString(k.status) + ", " + std::to_string(k.ms) + " ms, " +
                std::to_string(k.memory) + " bytes of workspace, " + MathName(k.math) +
                " math, " +
                (k.determinism == CUDNN_DETERMINISTIC ? "deterministic" : "non-deterministic") +
                (Transformed(c.op(), k.algorithm) ? ", FFT/Winograd" : "");
    return Status(ErrorCode::kBackend,
                  "cuDNN " + CudnnVersion() + " offers no acceptable algorithm for " +
                      fb::EnumNameOpcode(c.op()) + " in " + MathMode(call) + " (of " +
                      std::to_string(candidates.size()) + " candidates" +
                      (candidates.empty() ? ")" : "):" + listed) +
                      (call.type.half || options.tf32 ? "" : "\n(--tf32 allows tensor cores)"));
  }
  chosen.emplace(key, std::make_pair(call.algorithm, call.math));
  cache->Put(key, {call.algorithm, static_cast<int>(call.math)});
  workspace_bytes = std::max(workspace_bytes, call.workspace);
  return Status::Ok();
}

Status CudnnOps::Impl::PreparePool(const fb::Command& c, Call& call) {
  const fb::PoolAttrs& attrs = *c.pool();
  const bool max = c.op() == fb::Opcode::MaxPool2d || c.op() == fb::Opcode::MaxPool2dBackward;
  const bool forward = c.op() == fb::Opcode::MaxPool2d || c.op() == fb::Opcode::AvgPool2d;
  const bool nhwc = attrs.layout() == fb::Layout::NHWC;
  // x and y as the forward pooling sees them.
  std::vector<int64_t> x, y;
  if (forward) {
    x = Shape(*plan, c.inputs()->Get(0));
    y = Shape(*plan, c.outputs()->Get(0));
  } else {
    y = Shape(*plan, c.inputs()->Get(max ? 1 : 0));
    x = Shape(*plan, c.outputs()->Get(0));
  }
  if (x.size() != 4 || y.size() != 4 || !FitsInt(x) || !FitsInt(y))
    return Status(ErrorCode::kUnsupported, "cuDNN takes 4-d pooling below 2^31 per dimension");
  x = Logical(x, nhwc);
  y = Logical(y, nhwc);
  const int64_t wh = attrs.window()->Get(0), ww = attrs.window()->Get(1);
  const int64_t sh = attrs.strides()->Get(0), sw = attrs.strides()->Get(1);
  int64_t top = attrs.padding()->Get(0), left = attrs.padding()->Get(2);
  std::vector<int64_t> a = x;
  const bool symmetric =
      SymmetricEnough(x[2], wh, sh, 1, top, y[2]) && SymmetricEnough(x[3], ww, sw, 1, left, y[3]);
  if (!symmetric) {
    // Explicit padding: -inf never wins a max; zeros counted in an average
    // that includes padding. An average that excludes it cannot be made so.
    if (!max && attrs.exclude_padding())
      return Status(ErrorCode::kUnsupported,
                    "average pooling that excludes padding differing between sides has no "
                    "cuDNN form");
    a = Pad(call, x, nhwc, *attrs.padding(),
            max ? -std::numeric_limits<float>::infinity() : 0.0f);
    top = left = 0;
  }
  size_t need = 0;
  const size_t element = call.type.bytes;
  if (c.op() == fb::Opcode::MaxPool2dBackward) {
    // The plan keeps x, not y: the forward output is recomputed into scratch.
    if (call.padded) {
      call.xp = 0;
      call.y = Bytes(a, element);
      call.dxp = call.y + Bytes(y, element);
      need = call.dxp + Bytes(a, element);
    } else {
      call.y = 0;
      need = Bytes(y, element);
    }
  } else if (c.op() == fb::Opcode::AvgPool2dBackward) {
    // cuDNN's signature wants x, which average pooling's backward does not
    // read: a stand-in of x's shape in scratch, never the output dx (an
    // input aliasing the output is undefined), after the padded dx if any.
    call.dxp = 0;
    call.x_stand_in = call.padded ? Bytes(a, element) : 0;
    need = call.x_stand_in + Bytes(a, element);
  } else if (call.padded) {
    call.xp = 0;  // the forward pads x
    need = Bytes(a, element);
  }
  scratch_bytes = std::max(scratch_bytes, need);
  Descriptors& d = call.d;
  Status status = Tensor4d(&d.a, a, call.type.cudnn, nhwc);
  if (status.ok()) status = Tensor4d(&d.b, y, call.type.cudnn, nhwc);
  if (!status.ok()) return status;
  const cudnnPoolingMode_t mode = max ? CUDNN_POOLING_MAX_DETERMINISTIC
                                  : attrs.exclude_padding()
                                      ? CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING
                                      : CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING;
  GRAPHC_CUDNN(cudnnCreatePoolingDescriptor(&d.pool), "pooling descriptor");
  GRAPHC_CUDNN(cudnnSetPooling2dDescriptor(d.pool, mode, CUDNN_PROPAGATE_NAN,
                                           static_cast<int>(wh), static_cast<int>(ww),
                                           static_cast<int>(top), static_cast<int>(left),
                                           static_cast<int>(sh), static_cast<int>(sw)),
               "pooling descriptor");
  return Status::Ok();
}

CudnnOps::CudnnOps() : impl_(std::make_unique<Impl>()) {}
CudnnOps::~CudnnOps() = default;

Status CudnnOps::Initialize(cudaStream_t stream, const CudnnOptions& options) {
  impl_->options = options;
  impl_->cache = std::make_unique<AlgorithmCache>(options.cache_path);
  GRAPHC_CUDNN(cudnnCreate(&impl_->handle), "cannot start");
  GRAPHC_CUDNN(cudnnSetStream(impl_->handle, stream), "stream");
  return Status::Ok();
}

std::string CudnnOps::Version() { return CudnnVersion(); }

Status CudnnOps::Prepare(const Plan& plan) {
  Impl& impl = *impl_;
  impl.plan = &plan.root();
  impl.calls.clear();
  for (const fb::Program* program : *impl.plan->programs())
    for (const fb::Command* c : *program->commands()) {
      const fb::Opcode op = c->op();
      const bool conv = op == fb::Opcode::Conv2d || op == fb::Opcode::Conv2dBackwardData ||
                        op == fb::Opcode::Conv2dBackwardFilter;
      const bool pool = op == fb::Opcode::MaxPool2d || op == fb::Opcode::AvgPool2d ||
                        op == fb::Opcode::MaxPool2dBackward ||
                        op == fb::Opcode::AvgPool2dBackward;
      if (!conv && !pool) continue;
      Call& call = impl.calls[c];
      call.type = ElementTypeOf(impl.plan->buffers()->Get(c->outputs()->Get(0))->dtype());
      Status status = conv ? impl.PrepareConv(*c, call) : impl.PreparePool(*c, call);
      if (!status.ok()) {
        std::string where = c->location() ? " (" + PrintableOf(c->location()) + ")" : "";
        return Status(status.code(), std::string(fb::EnumNameOpcode(op)) + where + ": " +
                                         status.message());
      }
    }
  // Choices this process timed, for the next one; failing to write them
  // costs the next process time, not this one its run.
  Status saved = impl.cache->Save();
  impl.cache_note = saved.ok() ? "" : "not saved: " + saved.message();
  for (auto [memory, bytes] : {std::pair{&impl.workspace, impl.workspace_bytes},
                               std::pair{&impl.scratch, impl.scratch_bytes}}) {
    if (*memory != nullptr) cudaFree(*memory);
    *memory = nullptr;
    if (bytes == 0) continue;
    cudaError_t error = cudaMalloc(memory, bytes);
    if (error == cudaSuccess && memory == &impl.scratch) error = cudaMemset(*memory, 0, bytes);
    if (error != cudaSuccess)
      return Status(ErrorCode::kBackend, "cannot allocate " + std::to_string(bytes) +
                                             " bytes of cuDNN workspace: " +
                                             cudaGetErrorString(error));
  }
  return Status::Ok();
}

std::string CudnnOps::Summary() const {
  const Impl& impl = *impl_;
  if (impl.chosen.empty()) return "";
  char seconds[32];
  std::snprintf(seconds, sizeof(seconds), "%.1f", impl.timing_seconds);
  std::string summary = "cuDNN " + CudnnVersion() + ": " + std::to_string(impl.chosen.size()) +
                        " distinct convolutions, " + std::to_string(impl.timed) + " timed (" +
                        seconds + " s), " + std::to_string(impl.from_cache) + " from ";
  if (impl.cache->path().empty())
    summary += "no algorithm cache (GRAPHC_CUDNN_CACHE=off)";
  else
    summary += Printable(impl.cache->path());
  if (!impl.cache->load_problem().empty())
    summary += " (unreadable: " + impl.cache->load_problem() + ")";
  else if (impl.cache->skipped_lines() > 0)
    summary += " (" + std::to_string(impl.cache->skipped_lines()) + " bad lines skipped)";
  if (!impl.cache_note.empty()) summary += "; " + impl.cache_note;
  if (impl.options.precise) summary += "; precise algorithms only";
  return summary;
}

Status CudnnOps::Run(const fb::Command& command, const DeviceMemory* operands) {
  Impl& impl = *impl_;
  auto it = impl.calls.find(&command);
  if (it == impl.calls.end())
    return Status(ErrorCode::kInvalidArgument, "library command was not prepared");
  const Call& call = it->second;
  const Descriptors& d = call.d;
  const float one = 1.0f, zero = 0.0f;
  const int out = static_cast<int>(command.inputs()->size());
  cudaStream_t stream = nullptr;
  GRAPHC_CUDNN(cudnnGetStream(impl.handle, &stream), "stream");
  auto at = [&](int operand) { return operands[operand].address; };
  auto scratch = [&](size_t offset) {
    return static_cast<void*>(static_cast<char*>(impl.scratch) + offset);
  };
  // The explicitly padded input (x copied into scratch with its padding).
  auto padded_input = [&](int operand) -> StatusOr<void*> {
    if (!call.padded) return at(operand);
    cudaError_t error = cuda::PadPlanes(at(operand), scratch(call.xp), call.type.cuda,
                                        call.planes, call.h, call.w, call.top, call.left, call.hp,
                                        call.wp, call.pad_value, stream);
    if (error != cudaSuccess)
      return Status(ErrorCode::kBackend, std::string("CUDA padding: ") + cudaGetErrorString(error));
    return scratch(call.xp);
  };
  // Where a gradient of the input side goes, and its crop into the output.
  void* const dx = call.padded ? scratch(call.dxp) : at(out);
  auto crop = [&]() -> Status {
    if (!call.padded) return Status::Ok();
    cudaError_t error = cuda::CropPlanes(dx, at(out), call.type.cuda, call.planes, call.h,
                                         call.w, call.top, call.left, call.hp, call.wp, stream);
    if (error != cudaSuccess)
      return Status(ErrorCode::kBackend, std::string("CUDA cropping: ") + cudaGetErrorString(error));
    return Status::Ok();
  };
  // The filter as cuDNN takes it: OHWI under NHWC activations, reordered
  // into scratch when the plan stores it OIHW.
  auto filter_in = [&]() -> StatusOr<void*> {
    if (!call.reorder_filter) return at(1);
    GRAPHC_CUDNN(cudnnTransformTensor(impl.handle, &one, d.oihw, at(1), &zero, d.ohwi,
                                      scratch(call.wr)),
                 "filter reorder to OHWI");
    return scratch(call.wr);
  };
  switch (command.op()) {
    case fb::Opcode::Conv2d: {
      StatusOr<void*> x = padded_input(0);
      if (!x.ok()) return x.status();
      // The bias is broadcast into y first and the convolution added onto
      // it (beta = 1), so that the sum is formed at the FP32 compute type
      // and rounded once: adding it afterwards would round a half y twice.
      const float* beta = &zero;
      if (d.bias != nullptr) {
        GRAPHC_CUDNN(cudnnAddTensor(impl.handle, &one, d.bias, at(2), &zero, d.b, at(out)),
                     "convolution bias");
        beta = &one;
      }
      StatusOr<void*> w = filter_in();
      if (!w.ok()) return w.status();
      GRAPHC_CUDNN(cudnnConvolutionForward(impl.handle, &one, d.a, *x, d.filter, *w, d.conv,
                                           static_cast<cudnnConvolutionFwdAlgo_t>(call.algorithm),
                                           impl.workspace, call.workspace, beta, d.b, at(out)),
                   "convolution forward");
      return Status::Ok();
    }
    case fb::Opcode::Conv2dBackwardData: {  // dy, w -> dx
      StatusOr<void*> w = filter_in();
      if (!w.ok()) return w.status();
      GRAPHC_CUDNN(cudnnConvolutionBackwardData(
                       impl.handle, &one, d.filter, *w, d.b, at(0), d.conv,
                       static_cast<cudnnConvolutionBwdDataAlgo_t>(call.algorithm), impl.workspace,
                       call.workspace, &zero, d.a, dx),
                   "convolution backward-data");
      return crop();
    }
    case fb::Opcode::Conv2dBackwardFilter: {  // x, dy -> dw
      StatusOr<void*> x = padded_input(0);
      if (!x.ok()) return x.status();
      GRAPHC_CUDNN(cudnnConvolutionBackwardFilter(
                       impl.handle, &one, d.a, *x, d.b, at(1), d.conv,
                       static_cast<cudnnConvolutionBwdFilterAlgo_t>(call.algorithm),
                       impl.workspace, call.workspace, &zero, d.filter,
                       call.reorder_filter ? scratch(call.wr) : at(out)),
                   "convolution backward-filter");
      if (call.reorder_filter)
        GRAPHC_CUDNN(cudnnTransformTensor(impl.handle, &one, d.ohwi, scratch(call.wr), &zero,
                                          d.oihw, at(out)),
                     "filter gradient reorder to OIHW");
      return Status::Ok();
    }
    case fb::Opcode::MaxPool2d:
    case fb::Opcode::AvgPool2d: {
      StatusOr<void*> x = padded_input(0);
      if (!x.ok()) return x.status();
      GRAPHC_CUDNN(cudnnPoolingForward(impl.handle, d.pool, &one, d.a, *x, &zero, d.b, at(out)),
                   "pooling forward");
      return Status::Ok();
    }
    case fb::Opcode::MaxPool2dBackward: {  // x, dy -> dx; y = pool(x) into scratch first
      StatusOr<void*> x = padded_input(0);
      if (!x.ok()) return x.status();
      GRAPHC_CUDNN(cudnnPoolingForward(impl.handle, d.pool, &one, d.a, *x, &zero, d.b,
                                       scratch(call.y)),
                   "pooling forward (for its backward)");
      GRAPHC_CUDNN(cudnnPoolingBackward(impl.handle, d.pool, &one, d.b, scratch(call.y), d.b,
                                        at(1), d.a, *x, &zero, d.a, dx),
                   "pooling backward");
      return crop();
    }
    case fb::Opcode::AvgPool2dBackward:
      // dy -> dx. Average pooling reads neither y nor x: dy stands in for
      // y (same shape, an input), zeroed scratch for x.
      GRAPHC_CUDNN(cudnnPoolingBackward(impl.handle, d.pool, &one, d.b, at(0), d.b, at(0), d.a,
                                        scratch(call.x_stand_in), &zero, d.a, dx),
                   "pooling backward");
      return crop();
    default:
      return Status(ErrorCode::kInternal, "not a cuDNN command");
  }
}

uint64_t CudnnOps::workspace_bytes() const {
  return impl_->workspace_bytes + impl_->scratch_bytes;
}

}  // namespace graphc::runtime
