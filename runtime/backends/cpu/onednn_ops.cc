// oneDNN library calls of the CPU backend (see onednn_ops.h).

#include "runtime/backends/cpu/onednn_ops.h"

#include "contract/half_float.h"
#include "runtime/backends/cpu/attention.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "oneapi/dnnl/dnnl.hpp"

namespace graphc::runtime {
namespace {

using dnnl::algorithm;
using dnnl::memory;
using dnnl::prop_kind;
using Dims = memory::dims;
using DataType = memory::data_type;

// Row-major strides: NCHW, OIHW, [M, N] and so on.
Dims RowMajor(const Dims& dims) {
  Dims strides(dims.size(), 1);
  for (int i = static_cast<int>(dims.size()) - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * dims[i + 1];
  return strides;
}

memory::desc Plain(const Dims& dims, DataType type) {
  return memory::desc(dims, type, RowMajor(dims));
}

DataType TypeOf(fb::DType dtype) {
  switch (dtype) {
    case fb::DType::F16:
      return DataType::f16;
    case fb::DType::BF16:
      return DataType::bf16;
    default:
      return DataType::f32;
  }
}

// The name oneDNN gives `isa` (its DNNL_MAX_CPU_ISA values, in lower case).
std::string IsaName(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::sse41:
      return "sse41";
    case dnnl::cpu_isa::avx:
      return "avx";
    case dnnl::cpu_isa::avx2:
      return "avx2";
    case dnnl::cpu_isa::avx2_vnni:
      return "avx2_vnni";
    case dnnl::cpu_isa::avx512_mic:
      return "avx512_mic";
    case dnnl::cpu_isa::avx512_mic_4ops:
      return "avx512_mic_4ops";
    case dnnl::cpu_isa::avx512_core:
      return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx:
      return "avx512_core_amx";
    case dnnl::cpu_isa::all:
      break;
  }
  return "all";
}

// ---- Half <-> FP32 conversions of widened commands ----
//
// Exact widening; narrowing rounded to nearest even, NaN kept a (quiet) NaN,
// F16 overflowing to infinity as IEEE does. Elementwise over contiguous
// buffers: F16 by F16C where the CPU has it (else bit manipulation with the
// same results), BF16 by integer arithmetic the compiler vectorizes, each
// split over the OpenMP threads (oneDNN's pool, at its current size).

enum class Conversion {
  kNone,
  kF16ToF32,
  kBf16ToF32,
  kF32ToF16,
  kF32ToBf16,
};

void F16ToF32Scalar(const uint16_t* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t bits = F16ToF32Bits(in[i]);
    std::memcpy(out + i, &bits, 4);
  }
}

void F32ToF16Scalar(const float* in, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, in + i, 4);
    out[i] = F32ToF16Bits(bits);
  }
}

__attribute__((target("avx2,f16c"))) void F16ToF32F16c(const uint16_t* in, float* out,
                                                        int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i + 8));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(a));
    _mm256_storeu_ps(out + i + 8, _mm256_cvtph_ps(b));
  }
  for (; i < n; i += 8) {  // the last 1 to 15, through a padded block
    const int64_t m = std::min<int64_t>(8, n - i);
    alignas(16) uint16_t block[8] = {};
    alignas(32) float wide[8];
    std::memcpy(block, in + i, 2 * m);
    _mm256_store_ps(wide, _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(block))));
    std::memcpy(out + i, wide, 4 * m);
  }
}

__attribute__((target("avx2,f16c"))) void F32ToF16F16c(const float* in, uint16_t* out,
                                                        int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i a = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    const __m128i b = _mm256_cvtps_ph(_mm256_loadu_ps(in + i + 8), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), a);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i + 8), b);
  }
  for (; i < n; i += 8) {
    const int64_t m = std::min<int64_t>(8, n - i);
    alignas(32) float block[8] = {};
    alignas(16) uint16_t narrow[8];
    std::memcpy(block, in + i, 4 * m);
    _mm_store_si128(reinterpret_cast<__m128i*>(narrow),
                    _mm256_cvtps_ph(_mm256_load_ps(block), _MM_FROUND_TO_NEAREST_INT));
    std::memcpy(out + i, narrow, 2 * m);
  }
}

// BF16 (runtime/half_float.h): plain loops that vectorize; an AVX2 copy of
// each where the CPU has it.
__attribute__((always_inline)) inline void Bf16ToF32Body(const uint16_t* in, uint32_t* out,
                                                         int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = Bf16ToF32Bits(in[i]);
}

__attribute__((always_inline)) inline void F32ToBf16Body(const uint32_t* in, uint16_t* out,
                                                         int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = F32ToBf16Bits(in[i]);
}

void Bf16ToF32Portable(const uint16_t* in, uint32_t* out, int64_t n) { Bf16ToF32Body(in, out, n); }
void F32ToBf16Portable(const uint32_t* in, uint16_t* out, int64_t n) { F32ToBf16Body(in, out, n); }
__attribute__((target("avx2"))) void Bf16ToF32Avx2(const uint16_t* in, uint32_t* out, int64_t n) {
  Bf16ToF32Body(in, out, n);
}
__attribute__((target("avx2"))) void F32ToBf16Avx2(const uint32_t* in, uint16_t* out, int64_t n) {
  F32ToBf16Body(in, out, n);
}

// Whether this CPU (and its OS) runs AVX2 and F16C code; decided once.
bool HasAvx2F16c() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  }();
  return has;
}

// A conversion touching fewer bytes than this runs on one thread: waking the
// others would cost more than it saves (as for the generated kernels' launches).
constexpr int64_t kParallelMinBytes = 64 * 1024;

// Converts `count` elements between a half buffer and its FP32 copy, in the
// direction `kind` says.
void Convert(Conversion kind, void* half, float* wide, int64_t count) {
  const bool vector = HasAvx2F16c();
  auto chunk = [&](int64_t begin, int64_t end) {
    uint16_t* h = static_cast<uint16_t*>(half) + begin;
    float* f = wide + begin;
    uint32_t* u = reinterpret_cast<uint32_t*>(f);
    const int64_t n = end - begin;
    switch (kind) {
      case Conversion::kF16ToF32:
        vector ? F16ToF32F16c(h, f, n) : F16ToF32Scalar(h, f, n);
        break;
      case Conversion::kF32ToF16:
        vector ? F32ToF16F16c(f, h, n) : F32ToF16Scalar(f, h, n);
        break;
      case Conversion::kBf16ToF32:
        vector ? Bf16ToF32Avx2(h, u, n) : Bf16ToF32Portable(h, u, n);
        break;
      case Conversion::kF32ToBf16:
        vector ? F32ToBf16Avx2(u, h, n) : F32ToBf16Portable(u, h, n);
        break;
      case Conversion::kNone:
        break;
    }
  };
  const int threads = omp_get_max_threads();
  if (threads < 2 || 6 * count < kParallelMinBytes) {
    chunk(0, count);
    return;
  }
  // Contiguous parts, cut at multiples of 64 elements (whole cache lines of
  // both buffers, given 64-byte aligned starts).
  const int64_t blocks = (count + 63) / 64;
#pragma omp parallel num_threads(static_cast<int>(std::min<int64_t>(threads, blocks)))
  {
    const int64_t t = omp_get_thread_num(), parts = omp_get_num_threads();
    const int64_t begin = std::min(count, blocks * t / parts * 64);
    const int64_t end = std::min(count, blocks * (t + 1) / parts * 64);
    if (begin < end) chunk(begin, end);
  }
}

// Where the memory of a step's argument is.
enum class Where {
  kOperand,     // the command's operand `operand`, bound at every Run
  kOwned,       // the command's own part of the shared owned area (Prepared::owned)
  kScratchpad,  // the shared scratchpad
  kConversion,  // `offset` bytes into the shared conversion area
  kPartials,    // a chunk's part of the shared partial-sums area (chunk_bytes apart)
};

// One step of a prepared command: a primitive and, per argument, its memory
// object and where that memory is; or, in a widened command, a conversion
// between a half operand and its FP32 copy in the conversion area.
struct Step {
  dnnl::primitive primitive;  // when `conversion` is kNone
  Conversion conversion = Conversion::kNone;
  struct Copy {
    int operand = -1;   // the half operand: an input index, then the outputs
    size_t offset = 0;  // of its FP32 copy in the conversion area
    int64_t count = 0;  // elements
  } copy;
  struct Arg {
    int dnnl_arg;
    memory mem;
    Where where;
    int operand = -1;   // kOperand: an input index, then the outputs
    size_t offset = 0;  // kConversion
    size_t chunk_bytes = 0;  // a chunked step: how far apart the chunks' images lie
  };
  std::vector<Arg> args;
  std::unordered_map<int, memory> map;  // the same handles, as execute() takes them
  // A chunked step (a convolution split along the batch): the primitive is
  // for one chunk of `chunks`, executed once per chunk, the chunks handed out
  // to the threads as they come free. Per thread: its own memory objects
  // (each argument's, in `args` order) and map, its own part of the
  // scratchpad.
  int64_t chunks = 1;
  std::vector<std::vector<memory>> thread_mems;
  std::vector<std::unordered_map<int, memory>> thread_maps;
  // A sum step (after a chunked backward-filter step, whose chunks each
  // wrote their filter gradient into the partial-sums area): args[0] =
  // the `sum_count` floats of the `chunks` partials, added in chunk order
  // (so the result does not depend on which thread ran which chunk).
  bool sum_partials = false;
  int64_t sum_parts = 0;  // the chunks of the step before
  int64_t sum_count = 0;
  size_t partial_bytes = 0;
  // An FP32 product through oneDNN's sgemm instead of a matmul primitive
  // (PrepareGemm says when): args are a, b and c, row-major.
  struct Sgemm {
    bool used = false;
    char transa = 'N', transb = 'N';
    int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0;
  } sgemm;
};

struct Prepared {
  std::vector<Step> steps;
  // Workspaces, recomputed outputs and reordered filters: memory the
  // command's steps pass among themselves within one run, placed at these
  // offsets into the owned area that every command shares (commands run one
  // at a time), which is as large as the largest command's.
  std::vector<std::pair<memory, size_t>> owned;
  size_t owned_bytes = 0;

  void Release() { *this = Prepared(); }
};

struct ConvGeometry {
  Dims strides, dilates, padding_l, padding_r;
  int64_t groups;
};

ConvGeometry Geometry(const fb::ConvAttrs& attrs) {
  ConvGeometry g;
  g.strides = {attrs.strides()->Get(0), attrs.strides()->Get(1)};
  // oneDNN counts dilation from 0 (no dilation); the plan from 1.
  g.dilates = {attrs.dilations()->Get(0) - 1, attrs.dilations()->Get(1) - 1};
  g.padding_l = {attrs.padding()->Get(0), attrs.padding()->Get(2)};  // top, left
  g.padding_r = {attrs.padding()->Get(1), attrs.padding()->Get(3)};  // bottom, right
  g.groups = attrs.groups();
  return g;
}

// OIHW, or GOIHW with O and I per group for grouped convolutions.
// A filter operand of shape `stored`: OIHW (GOIHW when grouped), or with
// `ohwi` [O, KH, KW, I] (GOHWI), which oneDNN takes as the same logical dims
// in another order.
memory::desc Weights(const Dims& stored, int64_t groups, DataType type, bool ohwi = false) {
  if (!ohwi) {
    if (groups == 1) return Plain(stored, type);
    return Plain({groups, stored[0] / groups, stored[1], stored[2], stored[3]}, type);
  }
  const Dims oihw = {stored[0], stored[3], stored[1], stored[2]};
  if (groups == 1) return memory::desc(oihw, type, memory::format_tag::ohwi);
  return memory::desc({groups, oihw[0] / groups, oihw[1], oihw[2], oihw[3]}, type,
                      memory::format_tag::gohwi);
}

size_t Aligned(size_t bytes) { return (std::max<size_t>(bytes, 64) + 63) / 64 * 64; }

// Convolutions are split along the batch into about this many chunks per
// thread, handed out as threads come free: oneDNN splits one convolution
// statically, so a thread slowed by another process (a busy machine) would
// hold up every convolution. Backward-filter chunks each write their part of
// the gradient, summed in chunk order afterwards (deterministic whichever
// thread ran which chunk). GRAPHC_CONV_CHUNKS (chunks per thread; 0: off)
// overrides it.
constexpr int kChunksPerThread = 4;
// A backward-filter step whose chunks' gradients would take more than this
// (many threads, a large filter) runs whole: the partials cost memory and a
// pass over them.
constexpr size_t kPartialsMaxBytes = size_t{128} << 20;

// While it lives (and `on`), OpenMP's thread count is 1, so that the oneDNN
// primitives created meanwhile are shaped for one thread.
class OneThread {
 public:
  explicit OneThread(bool on) {
    if (!on) return;
    saved_ = omp_get_max_threads();
    omp_set_num_threads(1);
  }
  ~OneThread() { Release(); }
  OneThread(const OneThread&) = delete;
  OneThread& operator=(const OneThread&) = delete;
  // The thread count back, for good.
  void Release() {
    if (saved_ > 0) omp_set_num_threads(saved_);
    saved_ = 0;
  }
  // Calls f with the thread count back.
  template <typename F>
  void AllThreads(F f) {
    if (saved_ > 0) omp_set_num_threads(saved_);
    f();
    if (saved_ > 0) omp_set_num_threads(1);
  }

 private:
  int saved_ = 0;
};

// The chunks `batch` images go in: equal chunks (a divisor of the batch), the
// fewest that give each of `threads` threads `per_thread` of them, or as many
// as there are images. 1 (the convolution whole, oneDNN splitting it over
// channels and space too) where that would leave threads idle: fewer than two
// chunks per thread, or a last round of chunks less than 80% full.
int64_t ChunksOf(int64_t batch, int threads, int per_thread) {
  if (threads < 2 || per_thread < 1 || batch < 2) return 1;
  const int64_t wanted = std::min<int64_t>(batch, int64_t{threads} * per_thread);
  int64_t chunks = wanted;
  while (batch % chunks != 0) ++chunks;
  const int64_t rounds = (chunks + threads - 1) / threads;
  if (chunks < 2 * int64_t{threads} || 5 * chunks < 4 * rounds * threads) return 1;
  return chunks;
}

// Whether oneDNN's native bf16 kernel for `c` would add partial results in
// bf16 rather than in fp32: a pooling backward whose windows overlap (a
// stride below the window) adds several windows' gradients into one input
// gradient, and oneDNN 2.6 does so in the bf16 destination, rounding after
// each addition (it gained an fp32 accumulator for max pooling only in
// 3.x). Such commands are widened even on bf16 hardware, so that every bf16
// library command accumulates in fp32 and rounds once, as the emulated path
// and cuDNN do. Without overlap each input gradient receives one value,
// rounded once. Both are memory-bound and rare (ResNet-50 has one).
bool AccumulatesInBf16(const fb::Command& c) {
  if (c.op() != fb::Opcode::MaxPool2dBackward && c.op() != fb::Opcode::AvgPool2dBackward)
    return false;
  const fb::PoolAttrs& attrs = *c.pool();
  for (int d = 0; d < 2; ++d)
    if (attrs.strides()->Get(d) < attrs.window()->Get(d)) return true;
  return false;
}

// A depthwise convolution's filter gradient (one input and one output
// channel per group: MobileNet's, EfficientNet's and ConvNeXt's 3x3 to 7x7
// convolutions) in bf16: oneDNN 2.6's bf16 kernel for it
// (jit_bf16:avx512_core_bf16) takes 2 to 2.4 times as long as its fp32 one
// on the same shapes even on AMX (ConvNeXt-T at batch 8: 125 against 53 ms
// a step at 14x14, 39 against 18 at 7x7), and the fp32 one is split along
// the batch over the threads too. Widened, it runs in fp32 from the bf16
// operands and rounds its result once, as the emulated path does.
bool SlowInBf16(const fb::Command& c, const fb::Buffer& filter_gradient) {
  if (c.op() != fb::Opcode::Conv2dBackwardFilter || c.conv() == nullptr ||
      c.conv()->groups() <= 1)
    return false;
  const auto& shape = *filter_gradient.shape();
  const bool ohwi = c.conv()->filter_layout() == fb::Layout::NHWC;
  return shape.size() == 4 && shape.Get(0) == c.conv()->groups() &&
         shape.Get(ohwi ? 3 : 1) == 1;
}

}  // namespace

struct OneDnnOps::Impl {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  // bf16 commands run as oneDNN bf16 primitives only where the CPU has bf16
  // instructions: on avx512_core oneDNN merely emulates them, and below it
  // has no bf16 convolutions at all. Decided once, from the ISA oneDNN
  // dispatches to (DNNL_MAX_CPU_ISA may lower it).
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  const bool native_bf16 =
      isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
  // bf16 commands widened all the same: oneDNN had no bf16 primitive for
  // them, or its primitive would accumulate in bf16 (AccumulatesInBf16).
  int bf16_widened = 0;
  int bf16_widened_to_accumulate = 0;
  int bf16_widened_for_speed = 0;  // SlowInBf16
  const fb::Plan* plan = nullptr;
  std::unordered_map<const fb::Command*, Prepared> prepared;
  // One scratchpad for all primitives (they run one at a time); a chunked
  // step gives each thread a part of it, Aligned(chunk_scratchpad_bytes) apart.
  void* scratchpad = nullptr;
  size_t scratchpad_bytes = 0;
  size_t chunk_scratchpad_bytes = 0;  // the largest of a chunk primitive's
  // The threads Run may use, and a stream for each (chunked steps).
  int threads = 1;
  int chunks_per_thread = kChunksPerThread;
  std::vector<dnnl::stream> thread_streams;
  // Chunked backward-filter steps' per-chunk gradients, sized to the largest.
  void* partials = nullptr;
  size_t partials_bytes = 0;
  // The FP32 copies of widened commands' operands, likewise shared: each
  // command's copies lie at offsets from its start.
  void* conversion = nullptr;
  size_t conversion_bytes = 0;
  // The commands' owned memory (Prepared::owned), likewise shared.
  void* owned = nullptr;
  size_t owned_bytes = 0;

  ~Impl() {
    for (auto& [command, p] : prepared) p.Release();
    std::free(scratchpad);
    std::free(conversion);
    std::free(partials);
    std::free(owned);
  }

  const fb::Buffer& Buffer(int32_t index) const { return *plan->buffers()->Get(index); }
  memory::desc Input(const fb::Command& c, int i, DataType type) const {
    return Plain(ShapeOf(Buffer(c.inputs()->Get(i))), type);
  }
  // The shape of operand `operand` (inputs, then outputs).
  Dims OperandShape(const fb::Command& c, int operand) const {
    const int inputs = static_cast<int>(c.inputs()->size());
    return ShapeOf(Buffer(operand < inputs ? c.inputs()->Get(operand)
                                           : c.outputs()->Get(operand - inputs)));
  }
  // An activation operand of a convolution or pooling. oneDNN takes logical
  // NCHW dims and a layout; the plan's shape is the dims in memory order, so
  // an NHWC operand's [N, H, W, C] is permuted back to [N, C, H, W].
  // With `chunks`, the desc of one chunk of the batch (N / chunks images).
  memory::desc Activation(const fb::Command& c, int operand, DataType type, bool nhwc,
                          int64_t chunks = 1) const {
    Dims s = OperandShape(c, operand);
    s[0] /= chunks;
    if (!nhwc) return Plain(s, type);
    return memory::desc({s[0], s[3], s[1], s[2]}, type, memory::format_tag::nhwc);
  }
  dnnl::primitive_attr Attr() const {
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    return attr;
  }

  // The command's operands (dnnl arg, its description, the operand index)
  // as `step`'s arguments, bound at every Run.
  void AddOperands(Step& step,
                   const std::vector<std::pair<int, std::pair<memory::desc, int>>>& operands) {
    for (const auto& [arg, desc_operand] : operands)
      step.args.push_back({arg, memory(desc_operand.first, engine, DNNL_MEMORY_NONE),
                           Where::kOperand, desc_operand.second});
  }

  // Adds `primitive` with its arguments; `operands` maps DNNL args to operand
  // indices (inputs, then outputs at inputs()->size() + i).
  template <typename Primitive>
  Step& AddStep(Prepared& p, const typename Primitive::primitive_desc& pd,
                const std::vector<std::pair<int, std::pair<memory::desc, int>>>& operands) {
    Step& step = p.steps.emplace_back();
    step.primitive = Primitive(pd);
    AddOperands(step, operands);
    memory::desc scratch = pd.scratchpad_desc();
    step.args.push_back(
        {DNNL_ARG_SCRATCHPAD, memory(scratch, engine, DNNL_MEMORY_NONE), Where::kScratchpad});
    scratchpad_bytes = std::max(scratchpad_bytes, scratch.get_size());
    return step;
  }

  // A buffer the command owns (workspace, recomputed forward output, weights
  // in the layout a primitive chose).
  memory Owned(Prepared& p, const memory::desc& desc) {
    memory buffer(desc, engine, DNNL_MEMORY_NONE);  // placed once all are prepared
    p.owned.push_back({buffer, p.owned_bytes});
    p.owned_bytes += Aligned(desc.get_size());
    owned_bytes = std::max(owned_bytes, p.owned_bytes);
    return buffer;
  }

  // Adds a reorder step between operand `operand` (described by `desc`, the
  // plan's layout) and the owned buffer `owned`: from the operand into it, or
  // with `to_operand` from it into the operand. Either way the operand side
  // is a kOperand argument, which Widen can point at an FP32 copy.
  void AddReorder(Prepared& p, const memory::desc& desc, int operand, const memory& owned,
                  bool to_operand) {
    const memory::desc owned_desc = owned.get_desc();
    dnnl::reorder::primitive_desc pd(engine, to_operand ? owned_desc : desc, engine,
                                     to_operand ? desc : owned_desc, Attr());
    Step& step = AddStep<dnnl::reorder>(
        p, pd, {{to_operand ? DNNL_ARG_TO : DNNL_ARG_FROM, {desc, operand}}});
    step.args.push_back({to_operand ? DNNL_ARG_FROM : DNNL_ARG_TO, owned, Where::kOwned});
  }

  dnnl::convolution_forward::primitive_desc ForwardHint(const memory::desc& x,
                                                        const memory::desc& w,
                                                        const memory::desc& y,
                                                        const ConvGeometry& g) const;
  // The steps of `c` on operands of `type`; with `widen`, type is f32 and
  // the steps run on FP32 copies of the operands (Widen).
  Status PrepareCommand(const fb::Command& c, Prepared& p, DataType type, bool widen);
  Status PrepareConv(const fb::Command& c, Prepared& p, DataType type);
  Status PrepareGemm(const fb::Command& c, Prepared& p, DataType type);
  Status PreparePool(const fb::Command& c, Prepared& p, DataType type);
  void Widen(const fb::Command& c, Prepared& p);

  // out[i] = the sum of the previous chunked step's partials, in chunk order.
  void SumPartials(const Step& sum, float* out) {
    const int64_t chunks = sum.sum_parts;
    const char* base = static_cast<const char*>(partials);
    const int64_t n = sum.sum_count;
#pragma omp parallel for schedule(static) num_threads(threads) if (n * chunks >= 16384)
    for (int64_t block = 0; block < (n + 1023) / 1024; ++block) {
      const int64_t begin = block * 1024, end = std::min(n, begin + 1024);
      float* o = out + begin;
      const float* first = reinterpret_cast<const float*>(base) + begin;
      for (int64_t i = 0; i < end - begin; ++i) o[i] = first[i];
      for (int64_t k = 1; k < chunks; ++k) {
        const float* part = reinterpret_cast<const float*>(base + sum.partial_bytes * k) + begin;
        for (int64_t i = 0; i < end - begin; ++i) o[i] += part[i];
      }
    }
  }

  // Executes a chunked step: every chunk once, on the threads, each thread
  // taking the next chunk when it is done with one (oneDNN runs a primitive
  // single-threaded inside a parallel region).
  Status RunChunks(Step& step, const DeviceMemory* operands) {
    std::exception_ptr failure;  // nothing may leave the parallel region
#pragma omp parallel num_threads(static_cast<int>(std::min<int64_t>(threads, step.chunks)))
    {
      const int t = omp_get_thread_num();
      std::vector<memory>& mems = step.thread_mems[t];
#pragma omp for schedule(dynamic, 1)
      for (int64_t k = 0; k < step.chunks; ++k) {
        try {
          for (size_t i = 0; i < step.args.size(); ++i) {
            const Step::Arg& arg = step.args[i];
            char* base = nullptr;
            if (arg.where == Where::kOperand)
              base = static_cast<char*>(operands[arg.operand].address);
            else if (arg.where == Where::kConversion)
              base = static_cast<char*>(conversion) + arg.offset;
            else if (arg.where == Where::kPartials)
              base = static_cast<char*>(partials);
            else
              continue;
            mems[i].set_data_handle(base + arg.chunk_bytes * k, thread_streams[t]);
          }
          step.primitive.execute(thread_streams[t], step.thread_maps[t]);
          thread_streams[t].wait();
        } catch (...) {
#pragma omp critical(graphc_chunk_failure)
          if (!failure) failure = std::current_exception();
        }
      }
    }
    if (failure) {
      try {
        std::rethrow_exception(failure);
      } catch (const std::exception& e) {
        return Status(ErrorCode::kBackend, std::string("oneDNN: ") + e.what());
      } catch (...) {
        return Status(ErrorCode::kBackend, "oneDNN: an unknown failure in a convolution chunk");
      }
    }
    return Status::Ok();
  }
};


// The forward primitive a backward one is created against.
dnnl::convolution_forward::primitive_desc OneDnnOps::Impl::ForwardHint(
    const memory::desc& x, const memory::desc& w, const memory::desc& y,
    const ConvGeometry& g) const {
  return dnnl::convolution_forward::primitive_desc(
      dnnl::convolution_forward::desc(prop_kind::forward_training, algorithm::convolution_direct,
                                      x, w, y, g.strides, g.dilates, g.padding_l, g.padding_r),
      engine);
}

Status OneDnnOps::Impl::PrepareConv(const fb::Command& c, Prepared& p, DataType type) {
  const ConvGeometry g = Geometry(*c.conv());
  const int out = static_cast<int>(c.inputs()->size());  // the first output's operand index
  const bool nhwc = c.conv()->layout() == fb::Layout::NHWC;
  auto attr = Attr();
  // The filter operand (OIHW, GOIHW when grouped, or OHWI) and what
  // the primitive is created with. With NHWC activations and a plain filter
  // oneDNN 2.6 has only its reference kernel (two orders of magnitude slower
  // on AVX2), so NHWC commands let it choose the filter's layout and reorder
  // between that and the plan's.
  const int filter = c.op() == fb::Opcode::Conv2dBackwardFilter ? out : 1;
  const memory::desc w_plan = Weights(OperandShape(c, filter), g.groups, type,
                                      c.conv()->filter_layout() == fb::Layout::NHWC);
  const memory::desc w =
      nhwc ? memory::desc(w_plan.dims(), type, memory::format_tag::any) : w_plan;
  // One primitive for a chunk of the batch, run per chunk (ChunksOf). A
  // half-precision filter gradient would be summed from rounded partials:
  // only FP32 (and widened) backward-filter steps are chunked.
  int64_t chunks = ChunksOf(OperandShape(c, 0)[0], threads, chunks_per_thread);
  if (c.op() == fb::Opcode::Conv2dBackwardFilter && type != DataType::f32) chunks = 1;
  // A chunk runs on one thread (oneDNN runs a primitive single-threaded
  // inside a parallel region), and oneDNN shapes a primitive's work for the
  // threads there are when it is created: chunk primitives are created for
  // one (else, measured, a backward-filter chunk computed only the first
  // thread's share of the gradient). The filter's reorders, which run
  // outside the chunks, are created for all (AllThreads).
  OneThread one_thread(chunks > 1);
  // Adds the convolution step of `pd` with `args` and the filter argument
  // `filter_arg`: the operand itself where the primitive chose the plan's
  // layout, else a buffer of the command's own, reordered from the operand
  // before the step or, for the filter's gradient, into it after.
  using Args = std::vector<std::pair<int, std::pair<memory::desc, int>>>;
  auto add = [&](auto primitive, const auto& pd, Args args, int filter_arg,
                 const memory::desc& chosen) {
    using Primitive = decltype(primitive);
    if (!nhwc || chosen == w_plan) {
      args.push_back({filter_arg, {w_plan, filter}});
      AddStep<Primitive>(p, pd, args);
      return;
    }
    memory owned = Owned(p, chosen);
    const bool gradient = filter == out;
    if (!gradient)
      one_thread.AllThreads([&] { AddReorder(p, w_plan, filter, owned, /*to_operand=*/false); });
    AddStep<Primitive>(p, pd, args).args.push_back({filter_arg, owned, Where::kOwned});
    if (gradient)
      one_thread.AllThreads([&] { AddReorder(p, w_plan, filter, owned, /*to_operand=*/true); });
  };
  auto chunk = [&](int image_in, int image_out) {
    if (chunks == 1) return;
    Step& step = p.steps.back();
    step.chunks = chunks;
    for (Step::Arg& arg : step.args) {
      if (arg.dnnl_arg == image_in || arg.dnnl_arg == image_out)
        arg.chunk_bytes = arg.mem.get_desc().get_size();
      if (arg.where == Where::kScratchpad)
        chunk_scratchpad_bytes = std::max(chunk_scratchpad_bytes, arg.mem.get_desc().get_size());
    }
  };
  if (c.op() == fb::Opcode::Conv2d) {
    memory::desc x = Activation(c, 0, type, nhwc, chunks),
                 y = Activation(c, out, type, nhwc, chunks);
    bool bias = c.inputs()->size() == 3;
    auto desc = bias ? dnnl::convolution_forward::desc(
                           prop_kind::forward_training, algorithm::convolution_direct, x, w,
                           Input(c, 2, type), y, g.strides, g.dilates, g.padding_l, g.padding_r)
                     : dnnl::convolution_forward::desc(
                           prop_kind::forward_training, algorithm::convolution_direct, x, w,
                           y, g.strides, g.dilates, g.padding_l, g.padding_r);
    dnnl::convolution_forward::primitive_desc pd(desc, attr, engine);
    Args args = {{DNNL_ARG_SRC, {x, 0}}, {DNNL_ARG_DST, {y, out}}};
    if (bias) args.push_back({DNNL_ARG_BIAS, {Input(c, 2, type), 2}});
    add(dnnl::convolution_forward(), pd, args, DNNL_ARG_WEIGHTS, pd.weights_desc());
    chunk(DNNL_ARG_SRC, DNNL_ARG_DST);
    return Status::Ok();
  }
  if (c.op() == fb::Opcode::Conv2dBackwardData) {
    memory::desc dy = Activation(c, 0, type, nhwc, chunks),
                 dx = Activation(c, out, type, nhwc, chunks);
    auto hint = ForwardHint(dx, w, dy, g);
    dnnl::convolution_backward_data::primitive_desc pd(
        dnnl::convolution_backward_data::desc(algorithm::convolution_direct, dx, w, dy,
                                              g.strides, g.dilates, g.padding_l, g.padding_r),
        attr, engine, hint);
    add(dnnl::convolution_backward_data(), pd,
        {{DNNL_ARG_DIFF_DST, {dy, 0}}, {DNNL_ARG_DIFF_SRC, {dx, out}}}, DNNL_ARG_WEIGHTS,
        pd.weights_desc());
    chunk(DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_SRC);
    return Status::Ok();
  }
  // Conv2dBackwardFilter: inputs x, dy; output dw.
  auto backward_filter = [&](int64_t k) {
    memory::desc x = Activation(c, 0, type, nhwc, k), dy = Activation(c, 1, type, nhwc, k);
    return dnnl::convolution_backward_weights::primitive_desc(
        dnnl::convolution_backward_weights::desc(algorithm::convolution_direct, x, w, dy,
                                                 g.strides, g.dilates, g.padding_l,
                                                 g.padding_r),
        attr, engine, ForwardHint(x, w, dy, g));
  };
  auto pd = backward_filter(chunks);
  // The partials in the layout oneDNN chose (blocked layouts pad): past the
  // bound, this one runs whole.
  if (chunks > 1 &&
      Aligned(pd.diff_weights_desc().get_size()) * static_cast<size_t>(chunks) > kPartialsMaxBytes) {
    one_thread.Release();
    chunks = 1;
    pd = backward_filter(1);
  }
  memory::desc x = Activation(c, 0, type, nhwc, chunks), dy = Activation(c, 1, type, nhwc, chunks);
  if (chunks == 1) {
    add(dnnl::convolution_backward_weights(), pd,
        {{DNNL_ARG_SRC, {x, 0}}, {DNNL_ARG_DIFF_DST, {dy, 1}}}, DNNL_ARG_DIFF_WEIGHTS,
        pd.diff_weights_desc());
    return Status::Ok();
  }
  // Chunked: each chunk's gradient into the partials, then their sum into the
  // filter operand (the plan's layout) or into a buffer of the chosen layout
  // that is reordered into it.
  const memory::desc chosen = pd.diff_weights_desc();
  const size_t partial = Aligned(chosen.get_size());
  Step& conv = AddStep<dnnl::convolution_backward_weights>(
      p, pd, {{DNNL_ARG_SRC, {x, 0}}, {DNNL_ARG_DIFF_DST, {dy, 1}}});
  conv.args.push_back({DNNL_ARG_DIFF_WEIGHTS, memory(chosen, engine, DNNL_MEMORY_NONE),
                       Where::kPartials, -1, 0, partial});
  chunk(DNNL_ARG_SRC, DNNL_ARG_DIFF_DST);
  partials_bytes = std::max(partials_bytes, partial * static_cast<size_t>(chunks));
  const bool plain = !nhwc || chosen == w_plan;
  memory owned = plain ? memory() : Owned(p, chosen);
  Step& sum = p.steps.emplace_back();
  sum.sum_partials = true;
  sum.sum_parts = chunks;
  sum.sum_count = static_cast<int64_t>(chosen.get_size() / sizeof(float));
  sum.partial_bytes = partial;
  sum.args.push_back(plain ? Step::Arg{DNNL_ARG_TO, memory(w_plan, engine, DNNL_MEMORY_NONE),
                                       Where::kOperand, filter}
                           : Step::Arg{DNNL_ARG_TO, owned, Where::kOwned});
  // `sum` and `conv` may have moved: neither is used below.
  if (!plain)
    one_thread.AllThreads([&] { AddReorder(p, w_plan, filter, owned, /*to_operand=*/true); });
  return Status::Ok();
}

Status OneDnnOps::Impl::PrepareGemm(const fb::Command& c, Prepared& p, DataType type) {
  // c = op(a) x op(b) [+ bias]; a transposed operand is described by strides.
  Dims a = ShapeOf(Buffer(c.inputs()->Get(0)));
  Dims b = ShapeOf(Buffer(c.inputs()->Get(1)));
  Dims out = ShapeOf(Buffer(c.outputs()->Get(0)));
  const size_t rank = out.size();
  auto logical = [&](Dims stored, bool transposed) {
    if (!transposed) return Plain(stored, type);
    Dims dims = stored, strides = RowMajor(stored);
    std::swap(dims[rank - 1], dims[rank - 2]);
    std::swap(strides[rank - 1], strides[rank - 2]);
    return memory::desc(dims, type, strides);
  };
  bool ta = c.gemm() && c.gemm()->transpose_a(), tb = c.gemm() && c.gemm()->transpose_b();
  memory::desc amd = logical(a, ta), bmd = logical(b, tb), cmd = Plain(out, type);
  const int result = static_cast<int>(c.inputs()->size());
  std::vector<std::pair<int, std::pair<memory::desc, int>>> args = {
      {DNNL_ARG_SRC, {amd, 0}}, {DNNL_ARG_WEIGHTS, {bmd, 1}}, {DNNL_ARG_DST, {cmd, result}}};
  // A 2-D FP32 product without a bias whose b is not transposed runs as
  // oneDNN's sgemm (its JIT GEMM), which this oneDNN's brgemm matmul trails
  // most there: on an AVX-512 Xeon (2 cores), ViT-B/16's weight gradients
  // (a transposed, [768 x 6304] x [6304 x 3072]) ran at 101 GFLOP/s as a
  // matmul and 271 as sgemm, its input gradients ([6304 x 768] x [768 x
  // 3072]) at 113 and 286; with b transposed (a linear's forward) the two
  // are even, and for small products (a classifier's [32 x 2048] x [2048 x
  // 1000]^T) the matmul is ahead.
  if (type == DataType::f32 && rank == 2 && !tb && c.inputs()->size() == 2) {
    Step& step = p.steps.emplace_back();
    Step::Sgemm& g = step.sgemm;
    g.used = true;
    g.transa = ta ? 'T' : 'N';
    g.m = out[0], g.n = out[1], g.k = ta ? a[0] : a[1];
    g.lda = a[1], g.ldb = b[1], g.ldc = out[1];  // row-major, as stored
    AddOperands(step, args);
    return Status::Ok();
  }
  auto attr = Attr();
  if (c.inputs()->size() == 3) {
    Dims bias(rank, 1);
    bias[rank - 1] = out[rank - 1];
    memory::desc biasmd = Plain(bias, type);
    args.push_back({DNNL_ARG_BIAS, {biasmd, 2}});
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(amd, bmd, biasmd, cmd), attr, engine);
    AddStep<dnnl::matmul>(p, pd, args);
  } else {
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(amd, bmd, cmd), attr, engine);
    AddStep<dnnl::matmul>(p, pd, args);
  }
  return Status::Ok();
}

Status OneDnnOps::Impl::PreparePool(const fb::Command& c, Prepared& p, DataType type) {
  const fb::PoolAttrs& attrs = *c.pool();
  Dims window = {attrs.window()->Get(0), attrs.window()->Get(1)};
  Dims strides = {attrs.strides()->Get(0), attrs.strides()->Get(1)};
  Dims padding_l = {attrs.padding()->Get(0), attrs.padding()->Get(2)};
  Dims padding_r = {attrs.padding()->Get(1), attrs.padding()->Get(3)};
  bool max = c.op() == fb::Opcode::MaxPool2d || c.op() == fb::Opcode::MaxPool2dBackward;
  algorithm kind = max ? algorithm::pooling_max
                   : attrs.exclude_padding() ? algorithm::pooling_avg_exclude_padding
                                             : algorithm::pooling_avg_include_padding;
  const int out = static_cast<int>(c.inputs()->size());
  const bool nhwc = attrs.layout() == fb::Layout::NHWC;
  auto attr = Attr();
  if (c.op() == fb::Opcode::MaxPool2d || c.op() == fb::Opcode::AvgPool2d) {
    memory::desc x = Activation(c, 0, type, nhwc), y = Activation(c, out, type, nhwc);
    dnnl::pooling_forward::primitive_desc pd(
        dnnl::pooling_forward::desc(prop_kind::forward_inference, kind, x, y, strides, window,
                                    padding_l, padding_r),
        attr, engine);
    AddStep<dnnl::pooling_forward>(p, pd, {{DNNL_ARG_SRC, {x, 0}}, {DNNL_ARG_DST, {y, out}}});
    return Status::Ok();
  }
  // Backward: max pooling recomputes the forward pass for its workspace (the
  // argmax positions), since the plan keeps x rather than oneDNN's workspace.
  memory::desc dy = Activation(c, max ? 1 : 0, type, nhwc), dx = Activation(c, out, type, nhwc);
  dnnl::pooling_forward::primitive_desc forward(
      dnnl::pooling_forward::desc(prop_kind::forward_training, kind, dx, dy, strides, window,
                                  padding_l, padding_r),
      attr, engine);
  dnnl::pooling_backward::primitive_desc pd(
      dnnl::pooling_backward::desc(kind, dx, dy, strides, window, padding_l, padding_r), attr,
      engine, forward);
  if (!max) {
    AddStep<dnnl::pooling_backward>(p, pd, {{DNNL_ARG_DIFF_DST, {dy, 0}}, {DNNL_ARG_DIFF_SRC, {dx, out}}});
    return Status::Ok();
  }
  memory workspace = Owned(p, forward.workspace_desc());
  memory y = Owned(p, dy);
  Step& fwd = AddStep<dnnl::pooling_forward>(p, forward, {{DNNL_ARG_SRC, {dx, 0}}});
  fwd.args.push_back({DNNL_ARG_DST, y, Where::kOwned});
  fwd.args.push_back({DNNL_ARG_WORKSPACE, workspace, Where::kOwned});
  Step& bwd = AddStep<dnnl::pooling_backward>(p, pd, {{DNNL_ARG_DIFF_DST, {dy, 1}}, {DNNL_ARG_DIFF_SRC, {dx, out}}});
  bwd.args.push_back({DNNL_ARG_WORKSPACE, workspace, Where::kOwned});
  return Status::Ok();
}

Status OneDnnOps::Impl::PrepareCommand(const fb::Command& c, Prepared& p, DataType type,
                                       bool widen) {
  Status status;
  switch (c.op()) {
    case fb::Opcode::Conv2d:
    case fb::Opcode::Conv2dBackwardData:
    case fb::Opcode::Conv2dBackwardFilter:
      status = PrepareConv(c, p, type);
      break;
    case fb::Opcode::Gemm:
      status = PrepareGemm(c, p, type);
      break;
    default:
      status = PreparePool(c, p, type);
  }
  if (status.ok() && widen) Widen(c, p);
  return status;
}

// Points every operand argument of the steps at an FP32 copy of that operand
// in the conversion area, and brackets the steps with conversions: each half
// input to its copy before (exact), each copy of an output to the half
// output after (rounded once, to nearest even). A copy keeps its operand's
// row-major layout, whole: a transposed gemm operand stays a strided view,
// now of the copy, and an NHWC convolution's filter reorders read the copy
// of the filter (or write the copy of its gradient), in FP32 like the rest.
void OneDnnOps::Impl::Widen(const fb::Command& c, Prepared& p) {
  const int inputs = static_cast<int>(c.inputs()->size());
  // The loader proved every operand of a library command the same dtype.
  const bool f16 = Buffer(c.outputs()->Get(0)).dtype() == fb::DType::F16;
  std::map<int, size_t> copy_of;  // operand -> offset of its copy
  size_t bytes = 0;
  for (Step& step : p.steps)
    for (Step::Arg& arg : step.args) {
      if (arg.where != Where::kOperand) continue;
      auto [copy, added] = copy_of.emplace(arg.operand, bytes);
      if (added) bytes += Aligned(Plain(OperandShape(c, arg.operand), DataType::f32).get_size());
      arg.where = Where::kConversion;
      arg.offset = copy->second;
    }
  conversion_bytes = std::max(conversion_bytes, bytes);

  std::vector<Step> body = std::move(p.steps);
  p.steps.clear();
  auto convert = [&](int operand, size_t offset) {
    int64_t count = 1;
    for (int64_t d : OperandShape(c, operand)) count *= d;
    Step& step = p.steps.emplace_back();
    if (operand < inputs)
      step.conversion = f16 ? Conversion::kF16ToF32 : Conversion::kBf16ToF32;
    else
      step.conversion = f16 ? Conversion::kF32ToF16 : Conversion::kF32ToBf16;
    step.copy = {operand, offset, count};
  };
  for (const auto& [operand, offset] : copy_of)
    if (operand < inputs) convert(operand, offset);
  for (Step& step : body) p.steps.push_back(std::move(step));
  for (const auto& [operand, offset] : copy_of)
    if (operand >= inputs) convert(operand, offset);
}

OneDnnOps::OneDnnOps() : impl_(std::make_unique<Impl>()) {}
OneDnnOps::~OneDnnOps() = default;

Status OneDnnOps::Prepare(const Plan& plan, int threads) {
  Impl& impl = *impl_;
  impl.plan = &plan.root();
  for (auto& [command, p] : impl.prepared) p.Release();
  impl.prepared.clear();
  impl.scratchpad_bytes = impl.chunk_scratchpad_bytes = impl.conversion_bytes =
      impl.partials_bytes = impl.owned_bytes = 0;
  impl.bf16_widened = impl.bf16_widened_to_accumulate = impl.bf16_widened_for_speed = 0;
  impl.threads = std::max(1, threads);
  impl.chunks_per_thread = kChunksPerThread;
  if (const char* chunks = std::getenv("GRAPHC_CONV_CHUNKS"))
    impl.chunks_per_thread = std::max(0, std::atoi(chunks));
  for (const fb::Program* program : *impl.plan->programs())
    for (const fb::Command* c : *program->commands()) {
      if (c->op() == fb::Opcode::Kernel || c->op() == fb::Opcode::Copy ||
          IsCollective(c->op()) || IsAttention(c->op()))
        continue;
      // The loader proved every operand of a library command the same dtype.
      const fb::DType dtype = impl.Buffer(c->outputs()->Get(0)).dtype();
      const bool accumulates_in_bf16 =
          dtype == fb::DType::BF16 && impl.native_bf16 && AccumulatesInBf16(*c);
      impl.bf16_widened_to_accumulate += accumulates_in_bf16;
      const bool slow_in_bf16 = dtype == fb::DType::BF16 && impl.native_bf16 &&
                                SlowInBf16(*c, impl.Buffer(c->outputs()->Get(0)));
      impl.bf16_widened_for_speed += slow_in_bf16;
      const bool widen = dtype == fb::DType::F16 ||
                         (dtype == fb::DType::BF16 && !impl.native_bf16) ||
                         accumulates_in_bf16 || slow_in_bf16;
      Prepared& p = impl.prepared[c];
      // The text of oneDNN's refusal, or "" once the command is prepared.
      auto attempt = [&](DataType type, bool widened) {
        std::string refusal;
        try {
          Status status = impl.PrepareCommand(*c, p, type, widened);
          if (!status.ok()) refusal = status.message();
        } catch (const dnnl::error& e) {
          refusal = e.what();
        }
        if (!refusal.empty()) p.Release();
        return refusal;
      };
      std::string refusal = attempt(widen ? DataType::f32 : TypeOf(dtype), widen);
      if (!refusal.empty() && dtype == fb::DType::BF16 && !widen) {
        // No bf16 primitive for this one (a shape or attribute oneDNN's bf16
        // kernels lack): widened as on a CPU without bf16.
        ++impl.bf16_widened;
        refusal = attempt(DataType::f32, true);
      }
      if (!refusal.empty()) {
        std::string where = c->location() ? " (" + PrintableOf(c->location()) + ")" : "";
        return Status(ErrorCode::kBackend, std::string("oneDNN cannot create ") +
                                               fb::EnumNameOpcode(c->op()) + " on " +
                                               fb::EnumNameDType(dtype) + where + ": " +
                                               refusal);
      }
    }
  // Sized to the largest command, allocated once: a plan of hundreds of
  // widened commands needs only the biggest one's copies.
  // A part of the scratchpad per thread, for chunked steps.
  const size_t scratch_part = Aligned(impl.chunk_scratchpad_bytes);
  const size_t scratch_bytes = std::max(
      Aligned(impl.scratchpad_bytes),
      impl.chunk_scratchpad_bytes > 0 ? scratch_part * impl.threads : size_t{0});
  for (auto [area, bytes] : {std::pair{&impl.scratchpad, scratch_bytes},
                             std::pair{&impl.conversion, impl.conversion_bytes},
                             std::pair{&impl.partials, impl.partials_bytes},
                             std::pair{&impl.owned, impl.owned_bytes}}) {
    std::free(*area);
    *area = std::aligned_alloc(64, Aligned(bytes));
    if (*area == nullptr)
      return Status(ErrorCode::kBackend,
                    "cannot allocate " + std::to_string(bytes) + " bytes for oneDNN's " +
                        (area == &impl.scratchpad   ? "scratchpad"
                         : area == &impl.conversion ? "fp32 conversions"
                         : area == &impl.owned      ? "workspaces and reordered filters"
                                                    : "filter-gradient partial sums"));
  }
  for (auto& [command, p] : impl.prepared)
    for (auto& [buffer, offset] : p.owned)
      buffer.set_data_handle(static_cast<char*>(impl.owned) + offset);
  for (auto& [command, p] : impl.prepared)
    for (Step& step : p.steps)
      for (Step::Arg& arg : step.args) {
        if (arg.where == Where::kScratchpad) arg.mem.set_data_handle(impl.scratchpad);
        if (arg.where == Where::kConversion)
          arg.mem.set_data_handle(static_cast<char*>(impl.conversion) + arg.offset);
        step.map.emplace(arg.dnnl_arg, arg.mem);
      }
  impl.thread_streams.clear();
  for (int t = 0; t < impl.threads; ++t) impl.thread_streams.emplace_back(impl.engine);
  for (auto& [command, p] : impl.prepared)
    for (Step& step : p.steps) {
      if (step.chunks == 1) continue;
      step.thread_mems.assign(impl.threads, {});
      step.thread_maps.assign(impl.threads, {});
      for (int t = 0; t < impl.threads; ++t)
        for (Step::Arg& arg : step.args) {
          // Operands and conversion copies are pointed at per chunk in Run.
          void* handle = arg.where == Where::kScratchpad
                             ? static_cast<char*>(impl.scratchpad) + scratch_part * t
                             : arg.mem.get_data_handle();
          memory mem(arg.mem.get_desc(), impl.engine, handle);
          step.thread_mems[t].push_back(mem);
          step.thread_maps[t].emplace(arg.dnnl_arg, mem);
        }
    }
  return Status::Ok();
}

Status OneDnnOps::Run(const fb::Command& command, const DeviceMemory* operands) {
  if (IsAttention(command.op())) {
    // Unprepared: sgemm calls on the operands (attention.h). The loader
    // proved the shapes and the dtypes: q's for q, k, v, o and their
    // gradients, F32 for lse, the biases and theirs.
    const Impl& impl = *impl_;
    const Dims q = ShapeOf(impl.Buffer(command.inputs()->Get(0)));
    const Dims k = ShapeOf(impl.Buffer(command.inputs()->Get(1)));
    const Dims v = ShapeOf(impl.Buffer(command.inputs()->Get(2)));
    AttentionShape shape;
    shape.transpose_k = command.attention()->transpose_k();
    shape.groups = q[0], shape.queries = q[1], shape.depth = q[2];
    shape.keys = k[shape.transpose_k ? 2 : 1], shape.values = v[2];
    const fb::DType dtype = impl.Buffer(command.inputs()->Get(0)).dtype();
    shape.type = dtype == fb::DType::F16    ? AttentionType::kF16
                 : dtype == fb::DType::BF16 ? AttentionType::kBf16
                                            : AttentionType::kF32;
    shape.bf16_products =
        shape.type == AttentionType::kBf16 && impl.native_bf16 && Bf16ProductsPay(shape);
    auto f = [&](uint32_t i) { return static_cast<float*>(operands[i].address); };
    auto a = [&](uint32_t i) { return operands[i].address; };
    // Operands in the plan's order: the inputs (biases last), then the
    // outputs (bias gradients last).
    const bool forward = command.op() == fb::Opcode::Attention;
    const uint32_t first_bias = forward ? 3 : 6;
    const uint32_t inputs = command.inputs()->size();
    const auto* strides = command.attention()->bias_strides();
    std::vector<AttentionBias> biases;
    std::vector<float*> dbias;
    for (uint32_t i = first_bias; i < inputs; ++i) {
      const Dims b = ShapeOf(impl.Buffer(command.inputs()->Get(i)));
      biases.push_back({f(i), b[0], strides->Get(i - first_bias)});
      if (!forward) dbias.push_back(f(inputs + 3 + (i - first_bias)));
    }
    if (forward)
      AttentionForward(shape, a(0), a(1), a(2), biases, a(inputs), f(inputs + 1), impl.threads);
    else
      AttentionBackward(shape, a(0), a(1), a(2), a(3), f(4), a(5), biases, a(inputs),
                        a(inputs + 1), a(inputs + 2), dbias, impl.threads);
    return Status::Ok();
  }
  auto it = impl_->prepared.find(&command);
  if (it == impl_->prepared.end())
    return Status(ErrorCode::kInvalidArgument, "library command was not prepared");
  try {
    bool pending = false;  // primitives executed but not yet waited for
    for (Step& step : it->second.steps) {
      if (step.conversion != Conversion::kNone) {
        if (pending) impl_->stream.wait();  // the FP32 result is complete
        pending = false;
        Convert(step.conversion, operands[step.copy.operand].address,
                reinterpret_cast<float*>(static_cast<char*>(impl_->conversion) + step.copy.offset),
                step.copy.count);
        continue;
      }
      if (step.sum_partials) {
        if (pending) impl_->stream.wait();
        pending = false;
        const Step::Arg& to = step.args[0];
        void* destination = to.where == Where::kOperand ? operands[to.operand].address
                            : to.where == Where::kConversion
                                ? static_cast<char*>(impl_->conversion) + to.offset
                                : to.mem.get_data_handle();
        impl_->SumPartials(step, static_cast<float*>(destination));
        continue;
      }
      if (step.chunks > 1) {
        if (pending) impl_->stream.wait();
        pending = false;
        Status chunked = impl_->RunChunks(step, operands);
        if (!chunked.ok()) return chunked;
        continue;
      }
      for (Step::Arg& arg : step.args)
        if (arg.where == Where::kOperand) arg.mem.set_data_handle(operands[arg.operand].address);
      if (step.sgemm.used) {
        if (pending) impl_->stream.wait();
        pending = false;
        const Step::Sgemm& g = step.sgemm;
        auto at = [&](int i) { return static_cast<float*>(step.args[i].mem.get_data_handle()); };
        const dnnl_status_t status = dnnl_sgemm(g.transa, g.transb, g.m, g.n, g.k, 1.0f, at(0),
                                                g.lda, at(1), g.ldb, 0.0f, at(2), g.ldc);
        if (status != dnnl_success)
          return Status(ErrorCode::kBackend,
                        "oneDNN sgemm (Gemm): status " + std::to_string(status));
        continue;
      }
      step.primitive.execute(impl_->stream, step.map);
      pending = true;
    }
    if (pending) impl_->stream.wait();
  } catch (const dnnl::error& e) {
    return Status(ErrorCode::kBackend, std::string("oneDNN ") +
                                           fb::EnumNameOpcode(command.op()) + ": " + e.what());
  }
  return Status::Ok();
}

std::string OneDnnOps::LibraryMath(fb::DType dtype) const {
  const dnnl_version_t* version = dnnl::version();
  const std::string onednn =
      "oneDNN " + std::to_string(version->major) + "." + std::to_string(version->minor);
  const std::string isa = IsaName(impl_->isa);
  switch (dtype) {
    case fb::DType::F16:
      return "fp16: emulated through fp32 (" + onednn +
             " has no fp16 convolutions or matmul on CPUs)";
    case fb::DType::BF16: {
      if (!impl_->native_bf16)
        return "bf16: emulated through fp32 (" + onednn + "'s ISA here is " + isa +
               ", without bf16 instructions: the CPU lacks AVX512-BF16 or ONEDNN_MAX_CPU_ISA "
               "caps it)";
      std::string math = "bf16: oneDNN native (" + isa + ")";
      if (impl_->bf16_widened > 0)
        math += "; " + std::to_string(impl_->bf16_widened) +
                " command(s) emulated through fp32 (no oneDNN bf16 primitive for them)";
      if (impl_->bf16_widened_to_accumulate > 0)
        math += "; " + std::to_string(impl_->bf16_widened_to_accumulate) +
                " pooling backward(s) with overlapping windows through fp32 (oneDNN's "
                "would add their gradients in bf16)";
      if (impl_->bf16_widened_for_speed > 0)
        math += "; " + std::to_string(impl_->bf16_widened_for_speed) +
                " depthwise filter gradient(s) through fp32 (" + onednn +
                "'s bf16 kernel for them is slower)";
      return math;
    }
    default:
      return "fp32";
  }
}

}  // namespace graphc::runtime
