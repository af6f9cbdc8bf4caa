// The backend conformance suite: one set of tests, instantiated for every
// backend this build has ("cpu", "cuda"), through the factory as graphrun
// creates them. A backend whose device is absent (no CUDA driver or GPU here)
// skips every test with the reason; a backend this build lacks is not
// instantiated (the list is BuiltBackends()).
//
// What a backend must do: memory and copies (synchronous and on streams, with
// events ordering and timing them); count non-finite values; load a real
// plan's kernels and refuse a plan without its binary; run every command kind
// of a real plan with the numerics the plan means: library commands against
// float64 references written here, generated kernels against the CPU
// backend's, in-place commands as out-of-place ones, copies byte for byte;
// and whole train steps through the executor matching the CPU. Library
// commands on F16 and BF16 buffers (mixed precision) run from a plan crafted
// here: FP32 accumulation, the output rounded once to the half type.
//
// The plans come from CTest fixtures compiling test/runtime/Inputs/
// conformance.mlir (GRAPHC_CONFORMANCE_PLANS: the --target=all plan, then a
// CPU-only and a CUDA-only one); without them the plan tests skip.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "contract/half_float.h"
#include "flatbuffers/flatbuffers.h"
#include "runtime/core/backend.h"
#include "runtime/backends/backend_factory.h"
#include "runtime/core/executor.h"
#include "runtime/core/plan_loader.h"

namespace graphc::runtime {
namespace {

using Bytes = std::vector<uint8_t>;

std::vector<std::string> ConformancePlans() {
  const char* env = std::getenv("GRAPHC_CONFORMANCE_PLANS");
  std::vector<std::string> paths;
  std::stringstream list(env ? env : "");
  for (std::string item; std::getline(list, item, ':');)
    if (!item.empty()) paths.push_back(item);
  return paths;
}

std::vector<int64_t> Shape(const fb::Plan& plan, int32_t buffer) {
  return ShapeOf(*plan.buffers()->Get(buffer));
}

std::vector<float> Floats(const Bytes& bytes) {
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}

// Deterministic test data for a buffer: floats in [-2, 2), integers in
// [0, 5) (labels of the conformance model's 5 classes; the step counter),
// booleans.
Bytes TestData(const fb::Buffer& b, uint32_t& state) {
  Bytes bytes(b.size());
  const uint64_t n = b.size() / DTypeBytes(b.dtype());
  for (uint64_t e = 0; e < n; ++e) {
    state = state * 1664525u + 1013904223u;
    if (b.dtype() == fb::DType::F32) {
      float v = (state >> 8) * 0x1p-22f - 2.0f;
      std::memcpy(bytes.data() + 4 * e, &v, 4);
    } else if (b.dtype() == fb::DType::I32) {
      int32_t v = static_cast<int32_t>((state >> 16) % 5);
      std::memcpy(bytes.data() + 4 * e, &v, 4);
    } else if (b.dtype() == fb::DType::I64) {
      int64_t v = (state >> 16) % 5;
      std::memcpy(bytes.data() + 8 * e, &v, 8);
    } else {
      bytes[e] = (state >> 16) & 1;
    }
  }
  return bytes;
}

// ---- float64 references of the library commands (NCHW, OIHW, row-major) ----

struct Conv {
  int64_t sh, sw, dh, dw, top, left, groups;
};

Conv ConvOf(const fb::Command& c) {
  const fb::ConvAttrs& a = *c.conv();
  return {a.strides()->Get(0),  a.strides()->Get(1), a.dilations()->Get(0),
          a.dilations()->Get(1), a.padding()->Get(0), a.padding()->Get(2), a.groups()};
}

// Calls f(n, o, oh, ow, c, kh, kw, ih, iw) for every product the convolution
// of x [N,C,H,W] by w [O,C/g,KH,KW] into y [N,O,OH,OW] sums (inside x only).
template <typename F>
void ForEachProduct(const std::vector<int64_t>& x, const std::vector<int64_t>& w,
                    const std::vector<int64_t>& y, const Conv& k, F f) {
  const int64_t og = w[0] / k.groups, cg = w[1];
  for (int64_t n = 0; n < y[0]; ++n)
    for (int64_t o = 0; o < y[1]; ++o)
      for (int64_t oh = 0; oh < y[2]; ++oh)
        for (int64_t ow = 0; ow < y[3]; ++ow)
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t i = 0; i < w[2]; ++i)
              for (int64_t j = 0; j < w[3]; ++j) {
                const int64_t ih = oh * k.sh - k.top + i * k.dh;
                const int64_t iw = ow * k.sw - k.left + j * k.dw;
                if (ih < 0 || ih >= x[2] || iw < 0 || iw >= x[3]) continue;
                f(n, o, oh, ow, (o / og) * cg + ci, ci, i, j, ih, iw);
              }
}

// What the library command `c` computes from `in` (its inputs as floats) in
// NCHW, whatever its layout; `shapes` are its inputs' then its output's.
std::vector<double> ReferenceNchw(const fb::Command& c,
                                  const std::vector<std::vector<int64_t>>& shapes,
                                  const std::vector<std::vector<float>>& in) {
  auto idx4 = [](const std::vector<int64_t>& s, int64_t a, int64_t b, int64_t h, int64_t w) {
    return ((a * s[1] + b) * s[2] + h) * s[3] + w;
  };
  const std::vector<int64_t>& out = shapes.back();
  int64_t count = 1;
  for (int64_t d : out) count *= d;
  std::vector<double> r(count, 0.0);
  switch (c.op()) {
    case fb::Opcode::Conv2d: {
      const auto &x = shapes[0], &w = shapes[1];
      ForEachProduct(x, w, out, ConvOf(c),
                     [&](int64_t n, int64_t o, int64_t oh, int64_t ow, int64_t ch, int64_t ci,
                         int64_t i, int64_t j, int64_t ih, int64_t iw) {
                       r[idx4(out, n, o, oh, ow)] += double{in[0][idx4(x, n, ch, ih, iw)]} *
                                                     in[1][idx4(w, o, ci, i, j)];
                     });
      if (in.size() == 3)
        for (int64_t e = 0; e < count; ++e) r[e] += in[2][(e / (out[2] * out[3])) % out[1]];
      return r;
    }
    case fb::Opcode::Conv2dBackwardData: {  // dy, w -> dx
      const auto &dy = shapes[0], &w = shapes[1];
      ForEachProduct(out, w, dy, ConvOf(c),
                     [&](int64_t n, int64_t o, int64_t oh, int64_t ow, int64_t ch, int64_t ci,
                         int64_t i, int64_t j, int64_t ih, int64_t iw) {
                       r[idx4(out, n, ch, ih, iw)] += double{in[0][idx4(dy, n, o, oh, ow)]} *
                                                      in[1][idx4(w, o, ci, i, j)];
                     });
      return r;
    }
    case fb::Opcode::Conv2dBackwardFilter: {  // x, dy -> dw
      const auto &x = shapes[0], &dy = shapes[1];
      ForEachProduct(x, out, dy, ConvOf(c),
                     [&](int64_t n, int64_t o, int64_t oh, int64_t ow, int64_t ch, int64_t ci,
                         int64_t i, int64_t j, int64_t ih, int64_t iw) {
                       r[idx4(out, o, ci, i, j)] += double{in[0][idx4(x, n, ch, ih, iw)]} *
                                                    in[1][idx4(dy, n, o, oh, ow)];
                     });
      return r;
    }
    case fb::Opcode::Gemm: {
      const auto& a = shapes[0];
      const size_t rank = out.size();
      const bool ta = c.gemm() && c.gemm()->transpose_a(), tb = c.gemm() && c.gemm()->transpose_b();
      const int64_t m = out[rank - 2], n = out[rank - 1], k = ta ? a[rank - 2] : a[rank - 1];
      const int64_t batch = rank == 3 ? out[0] : 1;
      const bool a_batched = rank == 3 && a[0] != 1;
      const bool b_batched = rank == 3 && shapes[1][0] != 1;
      for (int64_t bi = 0; bi < batch; ++bi)
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double sum = in.size() == 3 ? in[2][j] : 0.0;
            const float* A = in[0].data() + (a_batched ? bi * m * k : 0);
            const float* B = in[1].data() + (b_batched ? bi * k * n : 0);
            for (int64_t l = 0; l < k; ++l)
              sum += double{A[ta ? l * m + i : i * k + l]} * B[tb ? j * k + l : l * n + j];
            r[(bi * m + i) * n + j] = sum;
          }
      return r;
    }
    default:
      break;
  }
  // Pooling: x [N,C,H,W] -> y [N,C,OH,OW] forward; backward takes dy.
  const fb::PoolAttrs& p = *c.pool();
  const int64_t wh = p.window()->Get(0), ww = p.window()->Get(1);
  const int64_t sh = p.strides()->Get(0), sw = p.strides()->Get(1);
  const int64_t top = p.padding()->Get(0), left = p.padding()->Get(2);
  const int64_t bottom = p.padding()->Get(1), right = p.padding()->Get(3);
  const bool max = c.op() == fb::Opcode::MaxPool2d || c.op() == fb::Opcode::MaxPool2dBackward;
  const bool forward = c.op() == fb::Opcode::MaxPool2d || c.op() == fb::Opcode::AvgPool2d;
  const std::vector<int64_t>& x = forward ? shapes[0] : out;
  const std::vector<int64_t>& y = forward ? out : shapes[max ? 1 : 0];
  const std::vector<float>& dy = forward ? in[0] : in[max ? 1 : 0];
  for (int64_t n = 0; n < y[0]; ++n)
    for (int64_t ch = 0; ch < y[1]; ++ch)
      for (int64_t oh = 0; oh < y[2]; ++oh)
        for (int64_t ow = 0; ow < y[3]; ++ow) {
          double best = -std::numeric_limits<double>::infinity(), sum = 0;
          int64_t arg = -1, inside = 0;
          for (int64_t i = 0; i < wh; ++i)
            for (int64_t j = 0; j < ww; ++j) {
              const int64_t ih = oh * sh - top + i, iw = ow * sw - left + j;
              if (ih < 0 || ih >= x[2] || iw < 0 || iw >= x[3]) continue;
              ++inside;
              if (max) {
                const double v = in[0][idx4(x, n, ch, ih, iw)];
                if (v > best) best = v, arg = idx4(x, n, ch, ih, iw);
              } else if (forward) {
                sum += in[0][idx4(x, n, ch, ih, iw)];
              }
            }
          // The padded window's size, clipped to the padded input.
          const int64_t h0 = oh * sh - top, w0 = ow * sw - left;
          const int64_t span = (std::min(h0 + wh, x[2] + bottom) - std::max(h0, -top)) *
                               (std::min(w0 + ww, x[3] + right) - std::max(w0, -left));
          const double divisor = p.exclude_padding() ? inside : span;
          const int64_t at = idx4(y, n, ch, oh, ow);
          if (forward) {
            r[at] = max ? best : sum / divisor;
            continue;
          }
          if (max) {
            r[arg] += dy[at];
            continue;
          }
          for (int64_t i = 0; i < wh; ++i)
            for (int64_t j = 0; j < ww; ++j) {
              const int64_t ih = h0 + i, iw = w0 + j;
              if (ih < 0 || ih >= x[2] || iw < 0 || iw >= x[3]) continue;
              r[idx4(x, n, ch, ih, iw)] += dy[at] / divisor;
            }
        }
  return r;
}

// The layout of a convolution's or pooling's activations; NCHW otherwise.
fb::Layout LayoutOf(const fb::Command& c) {
  if (c.conv()) return c.conv()->layout();
  if (c.pool()) return c.pool()->layout();
  return fb::Layout::NCHW;
}

// An [N, H, W, C] tensor as [N, C, H, W] (`to_nchw`), or back; `nchw` is its
// NCHW shape.
template <typename T>
std::vector<T> Transpose(const std::vector<T>& v, const std::vector<int64_t>& nchw, bool to_nchw) {
  const int64_t n = nchw[0], c = nchw[1], h = nchw[2], w = nchw[3];
  std::vector<T> r(v.size());
  for (int64_t a = 0; a < n; ++a)
    for (int64_t b = 0; b < c; ++b)
      for (int64_t i = 0; i < h; ++i)
        for (int64_t j = 0; j < w; ++j) {
          const int64_t planar = ((a * c + b) * h + i) * w + j;
          const int64_t last = ((a * h + i) * w + j) * c + b;
          r[to_nchw ? planar : last] = v[to_nchw ? last : planar];
        }
  return r;
}

// What the library command `c` of `plan` computes from `in`: an NHWC
// command's activations are transposed to NCHW, computed there, and its
// result transposed back (filters are OIHW in both layouts).
std::vector<double> Reference(const fb::Plan& plan, const fb::Command& c,
                              const std::vector<std::vector<float>>& in) {
  std::vector<std::vector<int64_t>> shapes;
  for (int32_t index : *c.inputs()) shapes.push_back(Shape(plan, index));
  shapes.push_back(Shape(plan, c.outputs()->Get(0)));
  if (LayoutOf(c) != fb::Layout::NHWC) return ReferenceNchw(c, shapes, in);
  // Which operands (inputs, then the output) are NHWC activations or OHWI
  // filters: both go to NCHW / OIHW by the same permutation.
  const bool ohwi = c.conv() && c.conv()->filter_layout() == fb::Layout::NHWC;
  std::vector<bool> activation(shapes.size(), true);
  if (c.op() == fb::Opcode::Conv2d || c.op() == fb::Opcode::Conv2dBackwardData)
    for (size_t i = 1; i < c.inputs()->size(); ++i) activation[i] = i == 1 && ohwi;  // w, bias
  if (c.op() == fb::Opcode::Conv2dBackwardFilter) activation.back() = ohwi;  // dw
  std::vector<std::vector<float>> planar = in;
  for (size_t i = 0; i < shapes.size(); ++i) {
    if (!activation[i]) continue;
    std::vector<int64_t>& s = shapes[i];
    s = {s[0], s[3], s[1], s[2]};
    if (i < in.size()) planar[i] = Transpose(in[i], s, /*to_nchw=*/true);
  }
  std::vector<double> r = ReferenceNchw(c, shapes, planar);
  return activation.back() ? Transpose(r, shapes.back(), /*to_nchw=*/false) : r;
}

bool IsLibraryCommand(fb::Opcode op) {
  return op != fb::Opcode::Kernel && op != fb::Opcode::Copy && !IsCollective(op);
}

// ---- half-precision library commands, on a plan crafted here ----

// A 16-bit float type: its significand bits after the leading one and frexp's
// exponent of its smallest normal value (below it the spacing stays fixed).
struct HalfType {
  fb::DType dtype;
  int mantissa_bits;
  int min_exponent;
};
constexpr HalfType kF16{fb::DType::F16, 10, -13};
constexpr HalfType kBF16{fb::DType::BF16, 7, -125};

// The spacing of `type`'s values around v.
double UlpAt(const HalfType& type, double v) {
  int e = 0;
  std::frexp(v, &e);
  return std::ldexp(1.0, std::max(e, type.min_exponent) - 1 - type.mantissa_bits);
}

// v rounded to the nearest value of `type`, ties to even (the default
// rounding mode of nearbyint).
double RoundTo(const HalfType& type, double v) {
  if (v == 0) return v;
  const double ulp = UlpAt(type, v);
  return std::nearbyint(v / ulp) * ulp;
}

// The bits of v, a finite value of `type`.
uint16_t BitsOf(const HalfType& type, double v) {
  if (type.dtype == fb::DType::BF16) {  // the high half of the same float
    const float f = static_cast<float>(v);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    return static_cast<uint16_t>(bits >> 16);
  }
  const uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  v = std::fabs(v);
  if (v == 0) return sign;
  int e = 0;
  const double m = std::frexp(v, &e);  // v = m 2^e, m in [0.5, 1)
  if (e < type.min_exponent) return sign | static_cast<uint16_t>(std::ldexp(v, 24));
  return sign | static_cast<uint16_t>((e + 14) << 10) |
         static_cast<uint16_t>(std::ldexp(m, 11) - 1024);
}

double ValueOf(const HalfType& type, uint16_t bits) {
  if (type.dtype == fb::DType::BF16) {
    const uint32_t wide = uint32_t{bits} << 16;
    float f;
    std::memcpy(&f, &wide, 4);
    return f;
  }
  const int exponent = (bits >> 10) & 31, mantissa = bits & 1023;
  double magnitude = exponent == 31 ? (mantissa ? NAN : INFINITY)
                     : exponent == 0 ? std::ldexp(mantissa, -24)
                                     : std::ldexp(1024 + mantissa, exponent - 25);
  return bits & 0x8000 ? -magnitude : magnitude;
}

// A library command of a crafted plan: operand shapes and attributes.
struct LibraryCommand {
  fb::Opcode op;
  std::vector<std::vector<int64_t>> inputs;
  std::vector<int64_t> output;
  std::vector<int64_t> strides = {1, 1}, padding = {0, 0, 0, 0};  // convolution or pooling
  std::vector<int64_t> dilations = {1, 1};
  int64_t groups = 1;
  bool transpose_a = false, transpose_b = false;
  std::vector<int64_t> window;  // pooling
  bool exclude_padding = false;
  fb::Layout layout = fb::Layout::NCHW;  // convolution or pooling
  bool filter_ohwi = false;              // convolution, NHWC only
};

// One program running `commands` on `dtype` buffers of their own (its inputs
// every command's inputs, its outputs every output), as graphc would write it.
std::unique_ptr<Plan> LibraryPlan(fb::DType dtype, const std::vector<LibraryCommand>& commands) {
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<flatbuffers::Offset<fb::Buffer>> buffers;
  std::vector<flatbuffers::Offset<fb::Command>> offsets;
  std::vector<int32_t> inputs, outputs;
  uint64_t arena = 0;
  auto buffer = [&](const std::vector<int64_t>& shape) {
    uint64_t bytes = DTypeBytes(dtype);
    for (int64_t d : shape) bytes *= d;
    buffers.push_back(fb::CreateBuffer(fbb, fbb.CreateString("t" + std::to_string(buffers.size())),
                                       dtype, fbb.CreateVector(shape), fb::Region::Arena, arena,
                                       bytes));
    arena += (bytes + 63) / 64 * 64;
    return static_cast<int32_t>(buffers.size() - 1);
  };
  for (const LibraryCommand& c : commands) {
    std::vector<int32_t> in, out;
    for (const std::vector<int64_t>& shape : c.inputs) in.push_back(buffer(shape));
    out.push_back(buffer(c.output));
    inputs.insert(inputs.end(), in.begin(), in.end());
    outputs.push_back(out[0]);
    const bool pool = !c.window.empty();
    const bool conv = c.op == fb::Opcode::Conv2d || c.op == fb::Opcode::Conv2dBackwardData ||
                      c.op == fb::Opcode::Conv2dBackwardFilter;
    auto conv_attrs = conv ? fb::CreateConvAttrs(fbb, fbb.CreateVector(c.strides),
                                                 fbb.CreateVector(c.padding),
                                                 fbb.CreateVector(c.dilations), c.groups,
                                                 c.layout,
                                                 c.filter_ohwi ? fb::Layout::NHWC
                                                               : fb::Layout::NCHW)
                           : 0;
    auto pool_attrs = pool ? fb::CreatePoolAttrs(fbb, fbb.CreateVector(c.window),
                                                 fbb.CreateVector(c.strides),
                                                 fbb.CreateVector(c.padding), c.exclude_padding,
                                                 c.layout)
                           : 0;
    offsets.push_back(fb::CreateCommand(
        fbb, c.op, fbb.CreateVector(in), fbb.CreateVector(out), 0, -1, conv_attrs,
        fb::CreateGemmAttrs(fbb, c.transpose_a, c.transpose_b), pool_attrs,
        fbb.CreateString("half.mlir:" + std::to_string(offsets.size() + 1) + ":1")));
  }
  std::vector<flatbuffers::Offset<fb::Program>> programs = {fb::CreateProgram(
      fbb, fbb.CreateString("train_step"), fbb.CreateVector(inputs), fbb.CreateVector(outputs),
      fbb.CreateVector(offsets), arena)};
  std::vector<fb::Target> targets = {fb::Target::CpuX86_64};
  auto plan = fb::CreatePlan(fbb, kPlanSchemaVersion, fbb.CreateString("half"), 2,
                             fbb.CreateString(fb::EnumNameDType(dtype)), false,
                             fbb.CreateVector(targets), arena, 0, 0, arena,
                             fbb.CreateVector(buffers), 0, 0, 0, 0, fbb.CreateVector(programs),
                             fbb.CreateVector(std::vector<uint8_t>(32, 0)));
  fbb.Finish(plan, "GPLN");
  std::vector<uint8_t> bytes(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
  EXPECT_TRUE(SealPlan(bytes.data(), bytes.size()).ok());
  StatusOr<std::unique_ptr<Plan>> loaded = Plan::FromBytes(std::move(bytes));
  EXPECT_TRUE(loaded.ok()) << loaded.status().ToString();
  return loaded.ok() ? std::move(*loaded) : nullptr;
}

// Every library opcode: a strided convolution padded unevenly (explicit
// padding on cuDNN) with a bias, a grouped dilated one, both backward
// directions, gemms with both transposes and a bias, plain and of rank 3,
// overlapping poolings, one backward padded unevenly, and pooling backwards
// whose windows do not overlap (each input gradient gets one value; on bf16
// hardware these run natively, the overlapping ones through fp32).
std::vector<LibraryCommand> HalfCommands() {
  using fb::Opcode;
  const std::vector<int64_t> x = {2, 3, 7, 6}, w = {4, 3, 3, 3}, y = {2, 4, 4, 6};
  const std::vector<int64_t> strides = {2, 1}, padding = {1, 1, 2, 0};
  const std::vector<int64_t> pooled = {2, 3, 4, 3};
  const std::vector<int64_t> tiled = {2, 3, 3, 3};  // x in 2x2 windows, stride 2
  std::vector<LibraryCommand> c(14);
  c[0] = {Opcode::Conv2d, {x, w, {4}}, y, strides, padding};
  c[1] = {Opcode::Conv2d, {{1, 4, 6, 6}, {6, 2, 3, 3}}, {1, 6, 6, 6}, {1, 1}, {2, 2, 2, 2},
          {2, 2}, 2};
  c[2] = {Opcode::Conv2dBackwardData, {y, w}, x, strides, padding};
  c[3] = {Opcode::Conv2dBackwardFilter, {x, y}, w, strides, padding};
  c[4] = {Opcode::Gemm, {{37, 3}, {4, 37}, {4}}, {3, 4}};
  c[4].transpose_a = c[4].transpose_b = true;
  c[5] = {Opcode::Gemm, {{6, 33}, {33, 5}}, {6, 5}};
  c[6] = {Opcode::Gemm, {{2, 4, 9}, {2, 3, 9}, {3}}, {2, 4, 3}};
  c[6].transpose_b = true;
  c[7] = {Opcode::MaxPool2d, {x}, pooled, {2, 2}, {1, 1, 1, 1}};
  c[8] = {Opcode::AvgPool2d, {x}, pooled, {2, 2}, {1, 1, 1, 1}};
  c[9] = {Opcode::AvgPool2d, {x}, pooled, {2, 2}, {1, 1, 1, 1}};
  c[9].exclude_padding = true;
  c[10] = {Opcode::MaxPool2dBackward, {x, pooled}, x, {2, 2}, {1, 2, 0, 1}};
  c[11] = {Opcode::AvgPool2dBackward, {pooled}, x, {2, 2}, {1, 1, 1, 1}};
  for (int i = 7; i < 12; ++i) c[i].window = {3, 3};
  c[12] = {Opcode::MaxPool2dBackward, {x, tiled}, x, {2, 2}, {0, 0, 0, 0}};
  c[13] = {Opcode::AvgPool2dBackward, {tiled}, x, {2, 2}, {0, 0, 0, 0}};
  for (int i = 12; i < 14; ++i) c[i].window = {2, 2};
  return c;
}

// The convolutions and poolings of HalfCommands with NHWC activations, and
// convolutions with channels in multiples of 8, where oneDNN's fast kernels
// take the filter in a blocked layout of their own (reordered from and to
// the plan's OIHW): a strided 3x3, a grouped one, a 1x1 with a bias and a
// depthwise one.
std::vector<LibraryCommand> NhwcCommands() {
  using fb::Opcode;
  auto nhwc = [](const std::vector<int64_t>& s) {
    return std::vector<int64_t>{s[0], s[2], s[3], s[1]};
  };
  std::vector<LibraryCommand> commands;
  for (LibraryCommand c : HalfCommands()) {
    if (c.op == Opcode::Gemm) continue;
    const bool conv = c.window.empty();
    // Filters and biases keep their shapes; every other operand is an activation.
    for (size_t i = 0; i < c.inputs.size(); ++i)
      if (!conv || i == 0 || (i == 1 && c.op == Opcode::Conv2dBackwardFilter))
        c.inputs[i] = nhwc(c.inputs[i]);
    if (c.op != Opcode::Conv2dBackwardFilter) c.output = nhwc(c.output);
    c.layout = fb::Layout::NHWC;
    commands.push_back(c);
  }
  const std::vector<int64_t> x = {2, 7, 7, 16}, w = {16, 16, 3, 3}, y = {2, 4, 4, 16};
  const std::vector<int64_t> strides = {2, 2}, padding = {1, 1, 1, 1};
  const std::vector<int64_t> dx = {1, 6, 6, 16}, dw = {16, 1, 3, 3};  // depthwise
  std::vector<LibraryCommand> wide(10);
  wide[0] = {Opcode::Conv2d, {x, w}, y, strides, padding};
  wide[1] = {Opcode::Conv2dBackwardData, {y, w}, x, strides, padding};
  wide[2] = {Opcode::Conv2dBackwardFilter, {x, y}, w, strides, padding};
  wide[3] = {Opcode::Conv2d, {{1, 6, 6, 16}, {16, 8, 3, 3}}, {1, 6, 6, 16}, {1, 1},
             {1, 1, 1, 1}, {1, 1}, 2};
  wide[4] = {Opcode::Conv2dBackwardFilter, {{1, 6, 6, 16}, {1, 6, 6, 16}}, {16, 8, 3, 3},
             {1, 1}, {1, 1, 1, 1}, {1, 1}, 2};
  wide[5] = {Opcode::Conv2dBackwardData, {{1, 6, 6, 16}, {16, 8, 3, 3}}, {1, 6, 6, 16},
             {1, 1}, {1, 1, 1, 1}, {1, 1}, 2};
  wide[6] = {Opcode::Conv2d, {{2, 5, 5, 16}, {32, 16, 1, 1}, {32}}, {2, 5, 5, 32}};
  wide[7] = {Opcode::Conv2d, {dx, dw}, dx, {1, 1}, {1, 1, 1, 1}, {1, 1}, 16};
  wide[8] = {Opcode::Conv2dBackwardData, {dx, dw}, dx, {1, 1}, {1, 1, 1, 1}, {1, 1}, 16};
  wide[9] = {Opcode::Conv2dBackwardFilter, {dx, dx}, dw, {1, 1}, {1, 1, 1, 1}, {1, 1}, 16};
  for (LibraryCommand& c : wide) {
    c.layout = fb::Layout::NHWC;
    commands.push_back(c);
  }
  return commands;
}

// ResNet's stem on channels-last half data: a 7x7 stride-2 convolution of
// 3 channels padded by 3, each direction (cuDNN's tensor-core kernels want
// channels in multiples of 8; 3 takes another path, which on an H200 gave a
// NaN filter gradient in ResNet-50's first fp16 step where the CPU's was
// finite), at 112x112 so that the filter gradient sums 3136 positions.
std::vector<LibraryCommand> StemCommands() {
  using fb::Opcode;
  const std::vector<int64_t> x = {1, 112, 112, 3}, w = {64, 3, 7, 7}, y = {1, 56, 56, 64};
  const std::vector<int64_t> strides = {2, 2}, padding = {3, 3, 3, 3};
  std::vector<LibraryCommand> c(3);
  c[0] = {Opcode::Conv2d, {x, w}, y, strides, padding};
  c[1] = {Opcode::Conv2dBackwardData, {y, w}, x, strides, padding};
  c[2] = {Opcode::Conv2dBackwardFilter, {x, y}, w, strides, padding};
  for (LibraryCommand& command : c) command.layout = fb::Layout::NHWC;
  return c;
}

// The NHWC convolutions of `commands` with their filters (and filter
// gradients) stored OHWI, as graphc writes them for cuDNN's channels-last
// tensor-core kernels.
std::vector<LibraryCommand> Ohwi(std::vector<LibraryCommand> commands) {
  auto ohwi = [](const std::vector<int64_t>& s) {
    return std::vector<int64_t>{s[0], s[2], s[3], s[1]};
  };
  std::vector<LibraryCommand> converted;
  for (LibraryCommand& c : commands) {
    if (c.layout != fb::Layout::NHWC || !c.window.empty() || c.op == fb::Opcode::Gemm) continue;
    if (c.op == fb::Opcode::Conv2dBackwardFilter)
      c.output = ohwi(c.output);
    else
      c.inputs[1] = ohwi(c.inputs[1]);
    c.filter_ohwi = true;
    converted.push_back(std::move(c));
  }
  return converted;
}

// The convolutions of `commands` with the batch `factor` times larger: on
// the CPU a convolution runs in chunks of the batch once there are at least
// two per thread, so these take the chunked path (several images per chunk,
// partial filter gradients summed), where the originals (batch 1 and 2) run
// whole.
std::vector<LibraryCommand> Batched(std::vector<LibraryCommand> commands, int64_t factor) {
  std::vector<LibraryCommand> batched;
  for (LibraryCommand& c : commands) {
    if (c.op != fb::Opcode::Conv2d && c.op != fb::Opcode::Conv2dBackwardData &&
        c.op != fb::Opcode::Conv2dBackwardFilter)
      continue;
    const bool filter_out = c.op == fb::Opcode::Conv2dBackwardFilter;
    for (size_t i = 0; i < c.inputs.size(); ++i)
      if (i == 0 || (i == 1 && filter_out)) c.inputs[i][0] *= factor;
    if (!filter_out) c.output[0] *= factor;
    batched.push_back(std::move(c));
  }
  return batched;
}

// ------------------------------------------------------------------- fixture

class BackendConformance : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    StatusOr<DeviceKind> kind = ParseDeviceKind(GetParam());
    ASSERT_TRUE(kind.ok());
    if (*kind == DeviceKind::kCuda) {
      Status available = CudaAvailable();
      if (!available.ok()) GTEST_SKIP() << "cuda: " << available.message();
    }
    BackendOptions options;
    options.cpu_threads = 2;
    // The references are exact sums: no FFT or Winograd convolutions, no
    // non-deterministic ones (cuDNN; the CPU's are direct anyway).
    options.deterministic = true;
    StatusOr<CreatedBackend> created = CreateBackend(*kind, options);
    ASSERT_TRUE(created.ok()) << created.status().ToString();
    backend_ = std::move(created->backend);
  }
  void TearDown() override {
    // How close the test came to its tolerances, for the GPU check's report
    // (gtest's JSON output carries it as a property of the test).
    if (compared_ > 0) {
      RecordProperty("compared", std::to_string(compared_));
      RecordProperty("worst_fraction_of_tolerance", std::to_string(worst_));
    }
    if (!backend_) return;
    for (DeviceMemory m : allocations_) backend_->Free(m);
  }

  // Records |got - want| against `tolerance`; returns `got` (for the assertion).
  double Tracked(double got, double want, double tolerance) {
    ++compared_;
    if (tolerance > 0 && std::isfinite(got) && std::isfinite(want))
      worst_ = std::max(worst_, std::fabs(got - want) / tolerance);
    return got;
  }

  DeviceMemory Allocate(uint64_t bytes) {
    StatusOr<DeviceMemory> m = backend_->Allocate(bytes);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    allocations_.push_back(*m);
    return *m;
  }
  DeviceMemory Upload(const Bytes& bytes) {
    DeviceMemory m = Allocate(bytes.size());
    EXPECT_TRUE(backend_->CopyToDevice(m, 0, bytes.data(), bytes.size()).ok());
    return m;
  }
  Bytes Download(DeviceMemory m) {
    Bytes bytes(m.bytes);
    EXPECT_TRUE(backend_->CopyToHost(bytes.data(), m, 0, m.bytes).ok());
    return bytes;
  }

  // The plan at `index` of GRAPHC_CONFORMANCE_PLANS, or nullptr (then skip).
  std::unique_ptr<Plan> LoadPlan(size_t index) {
    std::vector<std::string> paths = ConformancePlans();
    if (paths.size() <= index) return nullptr;
    StatusOr<std::unique_ptr<Plan>> plan = Plan::FromFile(paths[index]);
    EXPECT_TRUE(plan.ok()) << plan.status().ToString();
    return plan.ok() ? std::move(*plan) : nullptr;
  }

  // Runs `c` of `plan` on `backend` with `inputs`; returns the outputs. With
  // `in_place`, an output declared in place gets its input's memory.
  std::vector<Bytes> RunCommand(Backend& backend, const fb::Plan& plan, const fb::Command& c,
                                const std::vector<Bytes>& inputs, bool in_place = false) {
    std::vector<DeviceMemory> memory;
    for (const Bytes& bytes : inputs) {
      StatusOr<DeviceMemory> m = backend.Allocate(bytes.size());
      EXPECT_TRUE(m.ok());
      EXPECT_TRUE(backend.CopyToDevice(*m, 0, bytes.data(), bytes.size()).ok());
      memory.push_back(*m);
    }
    std::vector<bool> owned(memory.size(), true);
    for (uint32_t o = 0; o < c.outputs()->size(); ++o) {
      const int32_t source = in_place && c.in_place() && o < c.in_place()->size()
                                 ? c.in_place()->Get(o)
                                 : -1;
      if (source >= 0) {
        memory.push_back(memory[source]);
        owned.push_back(false);
        continue;
      }
      StatusOr<DeviceMemory> m = backend.Allocate(plan.buffers()->Get(c.outputs()->Get(o))->size());
      EXPECT_TRUE(m.ok());
      memory.push_back(*m);
      owned.push_back(true);
    }
    Status status = backend.Run(c, memory.data());
    EXPECT_TRUE(status.ok()) << status.ToString();
    status = backend.Synchronize();
    EXPECT_TRUE(status.ok()) << status.ToString();
    std::vector<Bytes> outputs;
    for (size_t i = inputs.size(); i < memory.size(); ++i) {
      outputs.emplace_back(memory[i].bytes);
      EXPECT_TRUE(backend.CopyToHost(outputs.back().data(), memory[i], 0, memory[i].bytes).ok());
    }
    for (size_t i = 0; i < memory.size(); ++i)
      if (owned[i]) backend.Free(memory[i]);
    return outputs;
  }

  std::unique_ptr<Backend> backend_;
  std::vector<DeviceMemory> allocations_;
  int64_t compared_ = 0;
  double worst_ = 0;
};

TEST_P(BackendConformance, CopiesRoundTripAndStayInBounds) {
  Bytes data(1000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7 + 3);
  DeviceMemory m = Upload(data);
  EXPECT_EQ(Download(m), data);
  // A partial copy at an offset changes only those bytes.
  const uint8_t patch[3] = {0xaa, 0xbb, 0xcc};
  ASSERT_TRUE(backend_->CopyToDevice(m, 500, patch, 3).ok());
  uint8_t back[5];
  ASSERT_TRUE(backend_->CopyToHost(back, m, 499, 5).ok());
  EXPECT_EQ(back[0], data[499]);
  EXPECT_EQ(back[1], 0xaa);
  EXPECT_EQ(back[3], 0xcc);
  EXPECT_EQ(back[4], data[503]);
  EXPECT_EQ(backend_->CopyToDevice(m, 999, patch, 2).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(backend_->CopyToHost(back, m, 1001, 0).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(backend_->CopyToHost(back, m, 0, ~uint64_t{0}).code(), ErrorCode::kInvalidArgument);
  // A zero-byte allocation is valid and can be freed.
  Allocate(0);
}

TEST_P(BackendConformance, StreamsAndEventsOrderAsynchronousCopies) {
  const uint64_t bytes = 1 << 20;
  StatusOr<HostMemory> in = backend_->AllocateHost(bytes);
  StatusOr<HostMemory> out = backend_->AllocateHost(bytes);
  ASSERT_TRUE(in.ok() && out.ok());
  for (uint64_t i = 0; i < bytes; ++i) static_cast<uint8_t*>(in->address)[i] = i % 251;
  std::memset(out->address, 0, bytes);
  DeviceMemory staging = Allocate(bytes), target = Allocate(bytes);
  StatusOr<Event> copied = backend_->CreateEvent(false), start = backend_->CreateEvent(true),
                  done = backend_->CreateEvent(true);
  ASSERT_TRUE(copied.ok() && start.ok() && done.ok());
  // Host -> staging on the copy stream; the compute stream waits for it,
  // moves it on the device and back to the host.
  ASSERT_TRUE(backend_->RecordEvent(*start, Stream::kCompute).ok());
  ASSERT_TRUE(backend_->CopyToDeviceAsync(staging, *in, bytes, Stream::kCopy).ok());
  ASSERT_TRUE(backend_->RecordEvent(*copied, Stream::kCopy).ok());
  ASSERT_TRUE(backend_->WaitEvent(Stream::kCompute, *copied).ok());
  ASSERT_TRUE(backend_->CopyOnDevice(target, staging, bytes, Stream::kCompute).ok());
  ASSERT_TRUE(backend_->CopyToHostAsync(*out, target, bytes, Stream::kCompute).ok());
  ASSERT_TRUE(backend_->RecordEvent(*done, Stream::kCompute).ok());
  ASSERT_TRUE(backend_->SynchronizeEvent(*done).ok());
  EXPECT_EQ(std::memcmp(in->address, out->address, bytes), 0);
  StatusOr<double> ms = backend_->ElapsedMilliseconds(*start, *done);
  ASSERT_TRUE(ms.ok()) << ms.status().ToString();
  EXPECT_GE(*ms, 0.0);
  EXPECT_EQ(backend_->CopyToDeviceAsync(staging, *in, bytes + 1, Stream::kCopy).code(),
            ErrorCode::kInvalidArgument);
  for (Event e : {*copied, *start, *done}) backend_->DestroyEvent(e);
  backend_->FreeHost(*in);
  backend_->FreeHost(*out);
  EXPECT_TRUE(backend_->Synchronize().ok());
}

TEST_P(BackendConformance, CountsNonFiniteValuesOfEveryFloatType) {
  std::vector<float> f32(70001, 1.5f);
  f32[0] = std::numeric_limits<float>::quiet_NaN();
  f32[12345] = std::numeric_limits<float>::infinity();
  f32[70000] = -std::numeric_limits<float>::infinity();
  f32[5] = std::numeric_limits<float>::max();  // finite
  Bytes bytes(f32.size() * 4);
  std::memcpy(bytes.data(), f32.data(), bytes.size());
  StatusOr<uint64_t> bad = backend_->CountNonFinite(Upload(bytes), fb::DType::F32);
  ASSERT_TRUE(bad.ok()) << bad.status().ToString();
  EXPECT_EQ(*bad, 3u);
  // 16-bit: f16 inf 0x7c00 and NaN 0x7e00; bf16 inf 0x7f80; 0x7bff is f16's max.
  std::vector<uint16_t> half = {0x3c00, 0x7c00, 0x7e00, 0x7bff, 0xfc00, 0x7f80};
  Bytes hb(half.size() * 2);
  std::memcpy(hb.data(), half.data(), hb.size());
  DeviceMemory h = Upload(hb);
  bad = backend_->CountNonFinite(h, fb::DType::F16);
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(*bad, 4u);  // 0x7c00, 0x7e00, 0xfc00, and 0x7f80 (an f16 NaN)
  bad = backend_->CountNonFinite(h, fb::DType::BF16);
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(*bad, 1u);  // only 0x7f80 has bf16's exponent all ones
  bad = backend_->CountNonFinite(h, fb::DType::I32);
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(*bad, 0u);
}

TEST_P(BackendConformance, CopyCommandCopiesBytes) {
  flatbuffers::FlatBufferBuilder fbb;
  auto offset = fb::CreateCommand(fbb, fb::Opcode::Copy, fbb.CreateVector<int32_t>({0}),
                                  fbb.CreateVector<int32_t>({1}));
  const fb::Command* copy = flatbuffers::GetTemporaryPointer(fbb, offset);
  Bytes data(4096);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i ^ 0x5a);
  DeviceMemory operands[2] = {Upload(data), Allocate(data.size())};
  ASSERT_TRUE(backend_->Run(*copy, operands).ok());
  ASSERT_TRUE(backend_->Synchronize().ok());
  EXPECT_EQ(Download(operands[1]), data);
}

TEST_P(BackendConformance, LoadsARealPlanAndRefusesOneWithoutItsBinary) {
  std::unique_ptr<Plan> all = LoadPlan(0), cpu_only = LoadPlan(1), cuda_only = LoadPlan(2);
  if (!all || !cpu_only || !cuda_only)
    GTEST_SKIP() << "GRAPHC_CONFORMANCE_PLANS is not set (run through ctest)";
  Status status = backend_->LoadKernels(*all);
  ASSERT_TRUE(status.ok()) << status.ToString();
  const bool is_cpu = backend_->name() == std::string("cpu");
  status = backend_->LoadKernels(is_cpu ? *cpu_only : *cuda_only);
  EXPECT_TRUE(status.ok()) << status.ToString();
  status = backend_->LoadKernels(is_cpu ? *cuda_only : *cpu_only);
  EXPECT_EQ(status.code(), ErrorCode::kPlanMissingKernel) << status.ToString();
  EXPECT_NE(status.message().find("has no kernels for this device"), std::string::npos)
      << status.message();
}

// Every library command of the plan (both programs) against float64.
TEST_P(BackendConformance, LibraryCommandsMatchFloat64References) {
  std::unique_ptr<Plan> plan = LoadPlan(0);
  if (!plan) GTEST_SKIP() << "GRAPHC_CONFORMANCE_PLANS is not set (run through ctest)";
  ASSERT_TRUE(backend_->LoadKernels(*plan).ok());
  const fb::Plan& root = plan->root();
  std::map<fb::Opcode, int> seen;
  uint32_t state = 11;
  for (const fb::Program* program : *root.programs())
    for (uint32_t ci = 0; ci < program->commands()->size(); ++ci) {
      const fb::Command& c = *program->commands()->Get(ci);
      if (!IsLibraryCommand(c.op())) continue;
      std::vector<Bytes> inputs;
      std::vector<std::vector<float>> floats;
      for (int32_t index : *c.inputs()) {
        inputs.push_back(TestData(*root.buffers()->Get(index), state));
        floats.push_back(Floats(inputs.back()));
      }
      std::vector<Bytes> outputs = RunCommand(*backend_, root, c, inputs);
      ASSERT_EQ(outputs.size(), 1u);
      std::vector<float> got = Floats(outputs[0]);
      std::vector<double> want = Reference(root, c, floats);
      ASSERT_EQ(got.size(), want.size());
      double scale = 0;
      for (double v : want) scale = std::max(scale, std::fabs(v));
      for (size_t e = 0; e < want.size(); ++e)
        ASSERT_NEAR(Tracked(got[e], want[e], 1e-5 * (1 + scale)), want[e], 1e-5 * (1 + scale))
            << StringOf(program->name()) << " command " << ci << " "
            << fb::EnumNameOpcode(c.op()) << " (" << StringOf(c.location()) << ") element "
            << e;
      ++seen[c.op()];
    }
  // The model holds every library command kind.
  for (fb::Opcode op : {fb::Opcode::Conv2d, fb::Opcode::Conv2dBackwardData,
                        fb::Opcode::Conv2dBackwardFilter, fb::Opcode::Gemm,
                        fb::Opcode::MaxPool2d, fb::Opcode::AvgPool2d,
                        fb::Opcode::MaxPool2dBackward, fb::Opcode::AvgPool2dBackward})
    EXPECT_GT(seen[op], 0) << fb::EnumNameOpcode(op);
}

TEST_P(BackendConformance, LibraryMathNamesEachFloatType) {
  const std::string f32 = backend_->LibraryMath(fb::DType::F32);
  EXPECT_TRUE(f32 == "fp32" || f32 == "tf32") << f32;
  for (auto [dtype, name] : {std::pair{fb::DType::F16, "fp16: "}, {fb::DType::BF16, "bf16: "}}) {
    const std::string math = backend_->LibraryMath(dtype);
    EXPECT_EQ(math.rfind(name, 0), 0u) << math;
    EXPECT_EQ(math.find("not supported"), std::string::npos) << math;
  }
  EXPECT_EQ(backend_->LibraryMath(fb::DType::I32), "i32: not supported");
}

// Convolutions and poolings on NHWC activations (FP32) against float64, as
// the plan's own commands are: the strided, unevenly padded, grouped and
// dilated ones of HalfCommands and the wider ones whose filters oneDNN
// reorders, with OIHW filters and with OHWI ones; then the convolutions,
// NHWC (both filter layouts) and NCHW, at 8 times the batch.
TEST_P(BackendConformance, NhwcLibraryCommandsMatchFloat64References) {
  for (const auto& commands : {NhwcCommands(), Ohwi(NhwcCommands()), Batched(NhwcCommands(), 8),
                               Batched(Ohwi(NhwcCommands()), 8), Batched(HalfCommands(), 8)}) {
    std::unique_ptr<Plan> plan = LibraryPlan(fb::DType::F32, commands);
    ASSERT_NE(plan, nullptr);
    Status status = backend_->LoadKernels(*plan);
    ASSERT_TRUE(status.ok()) << status.ToString();
    const fb::Plan& root = plan->root();
    uint32_t state = 5;
    for (const fb::Command* c : *root.programs()->Get(0)->commands()) {
      const std::string what =
          std::string(fb::EnumNameOpcode(c->op())) + " (" + StringOf(c->location()) + ")";
      std::vector<Bytes> inputs;
      std::vector<std::vector<float>> floats;
      for (int32_t index : *c->inputs()) {
        inputs.push_back(TestData(*root.buffers()->Get(index), state));
        floats.push_back(Floats(inputs.back()));
      }
      std::vector<Bytes> outputs = RunCommand(*backend_, root, *c, inputs);
      ASSERT_EQ(outputs.size(), 1u);
      std::vector<float> got = Floats(outputs[0]);
      std::vector<double> want = Reference(root, *c, floats);
      ASSERT_EQ(got.size(), want.size()) << what;
      double scale = 0;
      for (double v : want) scale = std::max(scale, std::fabs(v));
      for (size_t e = 0; e < want.size(); ++e)
        ASSERT_NEAR(Tracked(got[e], want[e], 1e-5 * (1 + scale)), want[e], 1e-5 * (1 + scale))
            << what << " element " << e;
    }
  }
}

// Each library command on F16 and on BF16 buffers, NCHW and NHWC, from
// inputs on the half type's grid, against float64: within 2 ulps of the half
// type at the output's scale; and exactly the float64 result rounded to
// nearest wherever that result lies farther from a rounding midpoint than
// FP32 accumulation could move it (a half accumulation, a truncation or a
// second rounding fails there), which must hold for at least half of each
// output (a quarter for the stem's long sums).
TEST_P(BackendConformance, HalfLibraryCommandsRoundOnceFromFp32Accumulation) {
  // Which path this run checks: on the CPU the ISA decides (CTest runs the
  // suite again under ONEDNN_MAX_CPU_ISA caps, so that a CPU with bf16
  // hardware checks the emulated path too).
  for (fb::DType dtype : {fb::DType::F16, fb::DType::BF16}) {
    std::cout << "[   INFO   ] " << backend_->LibraryMath(dtype) << "\n";
    RecordProperty(fb::EnumNameDType(dtype), backend_->LibraryMath(dtype));
  }
  // Each case: the type, the commands, and the least fraction of each output
  // that must lie far enough from a midpoint to be checked exactly (the
  // stem's sums are long: their accumulation bound leaves fewer).
  std::vector<std::tuple<HalfType, std::vector<LibraryCommand>, double>> cases;
  for (const HalfType& type : {kF16, kBF16})
    for (const auto& commands : {HalfCommands(), NhwcCommands(), Ohwi(NhwcCommands())})
      cases.emplace_back(type, commands, 0.5);
  cases.emplace_back(kF16, Batched(NhwcCommands(), 8), 0.5);  // widened, in chunks
  cases.emplace_back(kF16, StemCommands(), 0.25);
  cases.emplace_back(kF16, Ohwi(StemCommands()), 0.25);
  for (const auto& [type, commands, least_exact] : cases) {
    const std::string dtype = fb::EnumNameDType(type.dtype);
    std::unique_ptr<Plan> plan = LibraryPlan(type.dtype, commands);
    ASSERT_NE(plan, nullptr);
    Status status = backend_->LoadKernels(*plan);
    ASSERT_TRUE(status.ok()) << dtype << ": " << status.ToString();
    const fb::Plan& root = plan->root();
    uint32_t state = 3;
    for (const fb::Command* c : *root.programs()->Get(0)->commands()) {
      const std::string what = dtype + " " + fb::EnumNameOpcode(c->op()) + " (" +
                               StringOf(c->location()) + ")";
      // Maxima need distinct values (a tie's gradient may go to either):
      // multiples of 1/64 in [-2, 2), exact in both half types.
      const bool distinct = c->op() == fb::Opcode::MaxPool2d ||
                            c->op() == fb::Opcode::MaxPool2dBackward;
      std::vector<Bytes> inputs;
      std::vector<std::vector<float>> values, magnitudes;
      for (uint32_t i = 0; i < c->inputs()->size(); ++i) {
        const size_t n = root.buffers()->Get(c->inputs()->Get(i))->size() / 2;
        std::vector<float>& v = values.emplace_back(n);
        for (size_t e = 0; e < n; ++e) {
          state = state * 1664525u + 1013904223u;
          v[e] = static_cast<float>(RoundTo(type, (state >> 8) * 0x1p-22 - 2.0));
        }
        if (distinct && i == 0) {
          ASSERT_TRUE(n <= 256 && n % 97 != 0);  // e -> 97 e mod n permutes [0, n)
          for (size_t e = 0; e < n; ++e) v[e] = ((e * 97) % n - n / 2.0) / 64;
        }
        Bytes& bytes = inputs.emplace_back(2 * n);
        for (size_t e = 0; e < n; ++e) {
          const uint16_t bits = BitsOf(type, v[e]);
          std::memcpy(bytes.data() + 2 * e, &bits, 2);
        }
        std::vector<float>& m = magnitudes.emplace_back(n);
        for (size_t e = 0; e < n; ++e) m[e] = std::fabs(v[e]);
      }
      std::vector<Bytes> outputs = RunCommand(*backend_, root, *c, inputs);
      ASSERT_EQ(outputs.size(), 1u);
      const std::vector<double> want = Reference(root, *c, values);
      ASSERT_EQ(outputs[0].size(), 2 * want.size()) << what;
      // The sum of the magnitudes of what the output adds up bounds how far
      // FP32 accumulation strays (about 64 FP32 roundings of it).
      double scale = 0, sum_of_magnitudes = 0;
      for (double v : want) scale = std::max(scale, std::fabs(v));
      for (double v : Reference(root, *c, magnitudes))
        sum_of_magnitudes = std::max(sum_of_magnitudes, v);
      const double accumulation = 0x1p-18 * sum_of_magnitudes;
      const double tolerance = 2 * UlpAt(type, scale) + accumulation;
      size_t exact = 0;
      for (size_t e = 0; e < want.size(); ++e) {
        uint16_t bits;
        std::memcpy(&bits, outputs[0].data() + 2 * e, 2);
        const double got = ValueOf(type, bits), rounded = RoundTo(type, want[e]);
        ASSERT_NEAR(Tracked(got, want[e], tolerance), want[e], tolerance) << what << " element " << e;
        if (UlpAt(type, want[e]) / 2 - std::fabs(want[e] - rounded) <= accumulation) continue;
        ASSERT_EQ(got, rounded) << what << " element " << e << ": float64 gives " << want[e];
        ++exact;
      }
      EXPECT_GE(static_cast<double>(exact), least_exact * want.size())
          << what << ": too few elements far from a midpoint";
    }
  }
}

// Every generated kernel of the plan against the CPU backend's (the CPU's
// kernels are checked against PyTorch and finite differences elsewhere), and
// each in-place command run in place against itself run out of place.
TEST_P(BackendConformance, GeneratedKernelsMatchTheCpuAndRunInPlace) {
  std::unique_ptr<Plan> plan = LoadPlan(0);
  if (!plan) GTEST_SKIP() << "GRAPHC_CONFORMANCE_PLANS is not set (run through ctest)";
  ASSERT_TRUE(backend_->LoadKernels(*plan).ok());
  StatusOr<CreatedBackend> cpu = CreateBackend(DeviceKind::kCpu, BackendOptions{});
  ASSERT_TRUE(cpu.ok());
  ASSERT_TRUE(cpu->backend->LoadKernels(*plan).ok());
  const fb::Plan& root = plan->root();
  int kernels = 0, in_place = 0;
  uint32_t state = 29;
  for (const fb::Program* program : *root.programs())
    for (uint32_t ci = 0; ci < program->commands()->size(); ++ci) {
      const fb::Command& c = *program->commands()->Get(ci);
      if (c.op() != fb::Opcode::Kernel) continue;
      std::vector<Bytes> inputs;
      for (int32_t index : *c.inputs()) inputs.push_back(TestData(*root.buffers()->Get(index), state));
      std::vector<Bytes> want = RunCommand(*cpu->backend, root, c, inputs);
      std::vector<Bytes> got = RunCommand(*backend_, root, c, inputs);
      const std::string where = StringOf(program->name()) + " command " + std::to_string(ci) +
                                " kernel " + StringOf(root.kernels()->Get(c.kernel())->name());
      auto expect_close = [&](const std::vector<Bytes>& a, const std::vector<Bytes>& b,
                              const std::string& what) {
        ASSERT_EQ(a.size(), b.size());
        for (size_t o = 0; o < a.size(); ++o) {
          const fb::Buffer& out = *root.buffers()->Get(c.outputs()->Get(o));
          if (out.dtype() != fb::DType::F32) {
            EXPECT_EQ(a[o], b[o]) << where << " output " << o << what;
            continue;
          }
          std::vector<float> x = Floats(a[o]), y = Floats(b[o]);
          for (size_t e = 0; e < x.size(); ++e) {
            if (std::isnan(x[e]) || std::isnan(y[e])) {
              EXPECT_EQ(std::isnan(x[e]), std::isnan(y[e])) << where << " element " << e << what;
              continue;
            }
            ASSERT_NEAR(Tracked(y[e], x[e], 1e-5 * (1 + std::fabs(x[e]))), x[e], 1e-5 * (1 + std::fabs(x[e])))
                << where << " output " << o << " element " << e << what;
          }
        }
      };
      expect_close(want, got, "");
      ++kernels;
      if (c.in_place() && std::any_of(c.in_place()->begin(), c.in_place()->end(),
                                      [](int32_t i) { return i >= 0; })) {
        expect_close(got, RunCommand(*backend_, root, c, inputs, /*in_place=*/true), " (in place)");
        ++in_place;
      }
    }
  EXPECT_GE(kernels, 10);
  EXPECT_GE(in_place, 1) << "the plan's optimizer update runs in place";
}

// A float rounded to a half type's nearest value (as the backends round an
// F32), or unchanged for F32.
double RoundTo(fb::DType type, double x) {
  uint32_t bits;
  const float f = static_cast<float>(x);
  std::memcpy(&bits, &f, 4);
  if (type == fb::DType::F16) bits = F16ToF32Bits(F32ToF16Bits(bits));
  if (type == fb::DType::BF16) bits = Bf16ToF32Bits(F32ToBf16Bits(bits));
  float r;
  std::memcpy(&r, &bits, 4);
  return type == fb::DType::F32 ? x : r;
}

// The spacing of a half type's values at x's magnitude (one unit in the last
// place).
double UlpOf(fb::DType type, double x) {
  const int bits = type == fb::DType::F16 ? 10 : 7;         // stored mantissa bits
  const int lowest = type == fb::DType::F16 ? -14 : -126;   // the least normal exponent
  int exponent = lowest + 1;
  if (x != 0) std::frexp(std::fabs(x), &exponent);  // |x| = m 2^exponent, m in [1/2, 1)
  return std::ldexp(1.0, std::max(exponent - 1, lowest) - bits);
}

// The elements of a buffer.
size_t Count(const fb::Plan& plan, int32_t buffer) {
  size_t n = 1;
  for (int64_t d : Shape(plan, buffer)) n *= static_cast<size_t>(d);
  return n;
}

// A buffer of `type` holding `values` (rounded), and back.
Bytes BytesOf(fb::DType type, const std::vector<float>& values) {
  Bytes bytes(values.size() * (type == fb::DType::F32 ? 4 : 2));
  for (size_t e = 0; e < values.size(); ++e) {
    uint32_t bits;
    std::memcpy(&bits, &values[e], 4);
    if (type == fb::DType::F32) {
      std::memcpy(bytes.data() + 4 * e, &bits, 4);
      continue;
    }
    const uint16_t h = type == fb::DType::F16 ? F32ToF16Bits(bits) : F32ToBf16Bits(bits);
    std::memcpy(bytes.data() + 2 * e, &h, 2);
  }
  return bytes;
}
std::vector<float> FloatsOf(fb::DType type, const Bytes& bytes) {
  if (type == fb::DType::F32) return Floats(bytes);
  std::vector<float> v(bytes.size() / 2);
  for (size_t e = 0; e < v.size(); ++e) {
    uint16_t h;
    std::memcpy(&h, bytes.data() + 2 * e, 2);
    const uint32_t bits = type == fb::DType::F16 ? F16ToF32Bits(h) : Bf16ToF32Bits(h);
    std::memcpy(&v[e], &bits, 4);
  }
  return v;
}

// Fused attention in float64, as both backends compute it: o =
// softmax(q k^T + biases) v per group with the row's log-sum-exp; backward
// recomputes P = exp(s - lse) from the given lse and takes the given o. In
// half (`type` F16 or BF16) the probabilities are rounded to it before they
// multiply v (and do), the scores' gradient before it multiplies k and q;
// the outputs are the exact sums (the caller rounds them).
struct AttentionRef {
  int64_t groups = 0, queries = 0, keys = 0, depth = 0, values = 0;
  bool transpose_k = false;
  fb::DType type = fb::DType::F32;
  std::vector<int64_t> counts, strides;  // per bias

  double K(const std::vector<double>& k, int64_t g, int64_t j, int64_t d) const {
    return transpose_k ? k[(g * depth + d) * keys + j] : k[(g * keys + j) * depth + d];
  }
  // Scores plus biases of group g, row i.
  std::vector<double> Scores(const std::vector<std::vector<double>>& in, size_t first_bias,
                             int64_t g, int64_t i) const {
    std::vector<double> s(keys, 0.0);
    for (int64_t j = 0; j < keys; ++j) {
      for (int64_t d = 0; d < depth; ++d)
        s[j] += in[0][(g * queries + i) * depth + d] * K(in[1], g, j, d);
      for (size_t b = 0; b < counts.size(); ++b)
        s[j] += in[first_bias + b][(((g / strides[b]) % counts[b]) * queries + i) * keys + j];
    }
    return s;
  }
  // {o, lse} from {q, k, v, biases...}.
  std::vector<std::vector<double>> Forward(const std::vector<std::vector<double>>& in) const {
    std::vector<double> o(groups * queries * values, 0.0), lse(groups * queries);
    for (int64_t g = 0; g < groups; ++g)
      for (int64_t i = 0; i < queries; ++i) {
        std::vector<double> s = Scores(in, 3, g, i);
        double m = -INFINITY, sum = 0;
        for (double x : s) m = std::max(m, x);
        for (double& x : s) sum += (x = std::exp(x - m));
        lse[g * queries + i] = m + std::log(sum);
        for (int64_t j = 0; j < keys; ++j) {
          const double p = RoundTo(type, s[j] / sum);
          for (int64_t c = 0; c < values; ++c)
            o[(g * queries + i) * values + c] += p * in[2][(g * keys + j) * values + c];
        }
      }
    return {o, lse};
  }
  // {dq, dk, dv, dbias...} from {q, k, v, o, lse, do, biases...}.
  std::vector<std::vector<double>> Backward(const std::vector<std::vector<double>>& in) const {
    std::vector<double> dq(in[0].size(), 0.0), dk(in[1].size(), 0.0), dv(in[2].size(), 0.0);
    std::vector<std::vector<double>> dbias;
    for (size_t b = 0; b < counts.size(); ++b) dbias.emplace_back(in[6 + b].size(), 0.0);
    for (int64_t g = 0; g < groups; ++g)
      for (int64_t i = 0; i < queries; ++i) {
        std::vector<double> p = Scores(in, 6, g, i);
        for (double& x : p) x = std::exp(x - in[4][g * queries + i]);
        const int64_t row = g * queries + i;
        double shift = 0;
        for (int64_t c = 0; c < values; ++c)
          shift += in[5][row * values + c] * in[3][row * values + c];
        for (int64_t j = 0; j < keys; ++j) {
          double dp = 0;
          const double pr = RoundTo(type, p[j]);
          for (int64_t c = 0; c < values; ++c) {
            dv[(g * keys + j) * values + c] += pr * in[5][row * values + c];
            dp += in[5][row * values + c] * in[2][(g * keys + j) * values + c];
          }
          const double exact = p[j] * (dp - shift);
          for (size_t b = 0; b < counts.size(); ++b)
            dbias[b][(((g / strides[b]) % counts[b]) * queries + i) * keys + j] += exact;
          const double ds = RoundTo(type, exact);
          for (int64_t d = 0; d < depth; ++d) {
            dq[row * depth + d] += ds * K(in[1], g, j, d);
            (transpose_k ? dk[(g * depth + d) * keys + j] : dk[(g * keys + j) * depth + d]) +=
                ds * in[0][row * depth + d];
          }
        }
      }
    std::vector<std::vector<double>> out = {dq, dk, dv};
    for (auto& d : dbias) out.push_back(std::move(d));
    return out;
  }
};

// Every Attention and AttentionBackward command of two plans (Swin-style
// windows with a bias per head and a mask per window; a ViT whose k comes
// transposed), in FP32 and in mixed precision (BF16 and FP16: q, k, v, o and
// their gradients in half), against float64 on random operands, the
// backward's o and lse from the float64 forward. On CUDA also with scratches
// of 256 bytes (the scores cut into one group and a few query rows at a
// time, the tiling a long sequence gets; dk and dv then sum over blocks) and
// of 3468 bytes (chunks of 3 groups).
//
// FP32 results match to 2e-5 of their scale. A half result is the float64
// value rounded to half: it may be one unit in the last place off (the
// backend's F32 sums round either side of a tie the float64 sum does not
// see) or half the type's epsilon of the output's scale (a probability the
// F32 softmax rounds to the other neighbour than float64's), and at most 3%
// of the elements may differ at all (without the rounding of P and dS, about
// half would). lse and the bias gradients are F32 in every precision.
TEST_P(BackendConformance, FusedAttentionMatchesFloat64References) {
  std::vector<std::unique_ptr<Backend>> tiny;
  // 256 bytes: one group and a few query rows at a time; 3468 (3 x 17 x 17
  // floats): chunks of 3 groups with a shorter last one, a window mask's run
  // of groups cut by a chunk's end.
  if (GetParam() == "cuda")
    for (uint64_t bytes : {256, 3468}) {
      BackendOptions options;
      options.deterministic = true;
      options.attention_scratch_bytes = bytes;
      StatusOr<CreatedBackend> created = CreateBackend(DeviceKind::kCuda, options);
      ASSERT_TRUE(created.ok()) << created.status().ToString();
      tiny.push_back(std::move(created->backend));
    }
  std::map<std::string, int> seen;
  for (size_t index : {3u, 4u, 5u, 6u, 7u, 8u}) {
    std::unique_ptr<Plan> plan = LoadPlan(index);
    if (!plan) GTEST_SKIP() << "GRAPHC_CONFORMANCE_PLANS is not set (run through ctest)";
    ASSERT_TRUE(backend_->LoadKernels(*plan).ok());
    for (auto& b : tiny) ASSERT_TRUE(b->LoadKernels(*plan).ok());
    const fb::Plan& root = plan->root();
    uint32_t state = 41;
    for (const fb::Program* program : *root.programs())
      for (uint32_t ci = 0; ci < program->commands()->size(); ++ci) {
        const fb::Command& c = *program->commands()->Get(ci);
        if (!IsAttention(c.op())) continue;
        const bool forward = c.op() == fb::Opcode::Attention;
        AttentionRef ref;
        std::vector<int64_t> q = Shape(root, c.inputs()->Get(0)), k = Shape(root, c.inputs()->Get(1)),
                             v = Shape(root, c.inputs()->Get(2));
        ref.transpose_k = c.attention()->transpose_k();
        ref.type = root.buffers()->Get(c.inputs()->Get(0))->dtype();
        ref.groups = q[0], ref.queries = q[1], ref.depth = q[2];
        ref.keys = k[ref.transpose_k ? 2 : 1], ref.values = v[2];
        const uint32_t first_bias = forward ? 3 : 6;
        for (uint32_t i = first_bias; i < c.inputs()->size(); ++i) {
          ref.counts.push_back(Shape(root, c.inputs()->Get(i))[0]);
          ref.strides.push_back(c.attention()->bias_strides()->Get(i - first_bias));
        }
        auto type_of = [&](int32_t index) { return root.buffers()->Get(index)->dtype(); };
        // Random operands, halved (scores of a few units), in each buffer's
        // type; the reference reads what the buffers hold.
        std::vector<Bytes> inputs;
        std::vector<std::vector<double>> values;
        for (int32_t index : *c.inputs()) {
          const fb::Buffer& buffer = *root.buffers()->Get(index);
          std::vector<float> f(Count(root, index));
          for (float& x : f) {
            state = state * 1664525u + 1013904223u;
            x = static_cast<float>(RoundTo(buffer.dtype(), ((state >> 8) * 0x1p-22f - 2.0f) * 0.5f));
          }
          inputs.push_back(BytesOf(buffer.dtype(), f));
          ASSERT_EQ(inputs.back().size(), buffer.size());
          values.emplace_back(f.begin(), f.end());
        }
        if (!forward) {
          // o and lse as the forward gives them (in the plan's types).
          std::vector<std::vector<double>> fin = {values[0], values[1], values[2]};
          for (uint32_t i = first_bias; i < values.size(); ++i) fin.push_back(values[i]);
          std::vector<std::vector<double>> ol = ref.Forward(fin);
          for (int t = 0; t < 2; ++t) {
            const fb::DType type = type_of(c.inputs()->Get(3 + t));
            std::vector<float> f(ol[t].size());
            for (size_t e = 0; e < f.size(); ++e) f[e] = static_cast<float>(RoundTo(type, ol[t][e]));
            inputs[3 + t] = BytesOf(type, f);
            values[3 + t].assign(f.begin(), f.end());
          }
        }
        const std::vector<std::vector<double>> want =
            forward ? ref.Forward(values) : ref.Backward(values);
        std::vector<Backend*> runs = {backend_.get()};
        for (auto& b : tiny) runs.push_back(b.get());
        for (size_t r = 0; r < runs.size(); ++r) {
          std::vector<Bytes> got = RunCommand(*runs[r], root, c, inputs);
          ASSERT_EQ(got.size(), want.size());
          for (size_t o = 0; o < want.size(); ++o) {
            const fb::DType type = type_of(c.outputs()->Get(o));
            std::vector<float> g = FloatsOf(type, got[o]);
            ASSERT_EQ(g.size(), want[o].size());
            double scale = 0;
            for (double x : want[o]) scale = std::max(scale, std::fabs(x));
            const double epsilon = type == fb::DType::F16 ? 0x1p-10 : 0x1p-7;
            size_t differ = 0;
            for (size_t e = 0; e < g.size(); ++e) {
              double expected = want[o][e], tolerance = 2e-5 * (1 + scale);
              if (type != fb::DType::F32) {
                expected = RoundTo(type, want[o][e]);
                // One unit in the last place of the value, or half an
                // epsilon of the scale (a probability rounded the other way
                // than float64 rounds it moves a sum by up to an epsilon of
                // that probability's share).
                tolerance = std::max(UlpOf(type, expected), epsilon / 2 * scale);
                differ += g[e] != expected;
              }
              ASSERT_NEAR(Tracked(g[e], expected, tolerance), expected, tolerance)
                  << "plan " << index << " " << StringOf(program->name()) << " command " << ci
                  << " " << fb::EnumNameOpcode(c.op()) << " " << fb::EnumNameDType(ref.type)
                  << (r == 1 ? " (256-byte scratch)" : r == 2 ? " (3468-byte scratch)" : "")
                  << " output " << o << " element " << e;
            }
            EXPECT_LE(differ, g.size() * 3 / 100)
                << "plan " << index << " command " << ci << " " << fb::EnumNameOpcode(c.op())
                << " " << fb::EnumNameDType(ref.type) << " output " << o << ": " << differ
                << " of " << g.size() << " elements are not the rounded float64 value";
          }
        }
        ++seen[std::string(fb::EnumNameOpcode(c.op())) + " " + fb::EnumNameDType(ref.type) +
               (ref.transpose_k ? " transposed k" : "") + (ref.counts.empty() ? "" : " biases")];
      }
  }
  // Both directions, with biases and with k transposed, in every precision.
  for (const char* type : {"F32", "BF16", "F16"})
    for (const char* what : {"Attention %s biases", "AttentionBackward %s biases",
                             "Attention %s transposed k", "AttentionBackward %s transposed k"}) {
      char key[64];
      std::snprintf(key, sizeof key, what, type);
      EXPECT_GT(seen[key], 0) << key;
    }
}

// Three train steps through the executor, on this backend and on the CPU,
// from the same state and batch: the losses and every state tensor agree.
TEST_P(BackendConformance, TrainStepsThroughTheExecutorMatchTheCpu) {
  std::unique_ptr<Plan> plan = LoadPlan(0);
  if (!plan) GTEST_SKIP() << "GRAPHC_CONFORMANCE_PLANS is not set (run through ctest)";
  StatusOr<CreatedBackend> cpu = CreateBackend(DeviceKind::kCpu, BackendOptions{});
  ASSERT_TRUE(cpu.ok());
  const fb::Plan& root = plan->root();
  struct Result {
    std::vector<float> losses;
    std::vector<Bytes> state;
  };
  auto train = [&](Backend& backend) {
    Result r;
    StatusOr<std::unique_ptr<Executor>> created = Executor::Create(*plan, backend);
    EXPECT_TRUE(created.ok()) << created.status().ToString();
    if (!created.ok()) return r;
    Executor& exec = **created;
    EXPECT_TRUE(exec.InitializeState(7).ok());
    const int program = *exec.FindProgram("train_step");
    const fb::Program& p = exec.program(program);
    uint32_t seed = 5;
    std::vector<Bytes> inputs;
    for (int32_t index : *p.inputs()) inputs.push_back(TestData(exec.buffer(index), seed));
    for (int step = 0; step < 3; ++step) {
      for (uint32_t i = 0; i < p.inputs()->size(); ++i)
        EXPECT_TRUE(exec.Write(p.inputs()->Get(i), inputs[i].data(), inputs[i].size()).ok());
      Status status = exec.Run(program);
      EXPECT_TRUE(status.ok()) << status.ToString();
      float loss = 0;
      EXPECT_TRUE(exec.Read(p.outputs()->Get(0), &loss, 4).ok());
      r.losses.push_back(loss);
    }
    for (const fb::State* s : *root.states()) {
      Bytes bytes(exec.buffer(s->buffer()).size());
      EXPECT_TRUE(exec.Read(s->buffer(), bytes.data(), bytes.size()).ok());
      r.state.push_back(bytes);
    }
    return r;
  };
  Result want = train(*cpu->backend), got = train(*backend_);
  ASSERT_EQ(got.losses.size(), 3u);
  for (int step = 0; step < 3; ++step)
    EXPECT_NEAR(Tracked(got.losses[step], want.losses[step],
                        1e-5 * (1 + std::fabs(want.losses[step]))),
                want.losses[step], 1e-5 * (1 + std::fabs(want.losses[step])))
        << "step " << step + 1;
  EXPECT_NE(got.losses[0], got.losses[2]) << "training moved nothing";
  ASSERT_EQ(got.state.size(), want.state.size());
  for (size_t s = 0; s < want.state.size(); ++s) {
    const fb::Buffer& b = *root.buffers()->Get(root.states()->Get(s)->buffer());
    if (b.dtype() != fb::DType::F32) {
      EXPECT_EQ(got.state[s], want.state[s]) << StringOf(b.name());
      continue;
    }
    std::vector<float> x = Floats(want.state[s]), y = Floats(got.state[s]);
    for (size_t e = 0; e < x.size(); ++e)
      ASSERT_NEAR(Tracked(y[e], x[e], 1e-5 * (1 + std::fabs(x[e]))), x[e], 1e-5 * (1 + std::fabs(x[e])))
          << StringOf(b.name()) << "[" << e << "]";
  }
}

// Graph replay (where the backend has graphs) computes what eager runs do:
// the first run is eager, the second captured, the rest replayed; inputs
// written between runs reach the replays. On a backend without graphs the
// setting changes nothing.
TEST_P(BackendConformance, GraphReplaysMatchEagerRuns) {
  std::unique_ptr<Plan> plan = LoadPlan(0);
  if (!plan) GTEST_SKIP() << "GRAPHC_CONFORMANCE_PLANS is not set (run through ctest)";
  auto train = [&](bool graphs, bool* replayed) {
    std::vector<float> losses;
    StatusOr<std::unique_ptr<Executor>> created = Executor::Create(*plan, *backend_);
    EXPECT_TRUE(created.ok()) << created.status().ToString();
    if (!created.ok()) return losses;
    Executor& exec = **created;
    exec.set_graphs(graphs);
    EXPECT_TRUE(exec.InitializeState(3).ok());
    const int program = *exec.FindProgram("train_step");
    const fb::Program& p = exec.program(program);
    uint32_t seed = 17;
    for (int step = 0; step < 5; ++step) {
      for (int32_t index : *p.inputs()) {  // new data every step
        Bytes bytes = TestData(exec.buffer(index), seed);
        EXPECT_TRUE(exec.Write(index, bytes.data(), bytes.size()).ok());
      }
      Status status = exec.Run(program);
      EXPECT_TRUE(status.ok()) << status.ToString();
      float loss = 0;
      EXPECT_TRUE(exec.Read(p.outputs()->Get(0), &loss, 4).ok());
      losses.push_back(loss);
    }
    *replayed = exec.replays_graph(program);
    return losses;
  };
  bool eager_replayed = true, graph_replayed = false;
  std::vector<float> eager = train(false, &eager_replayed);
  std::vector<float> graphs = train(true, &graph_replayed);
  EXPECT_FALSE(eager_replayed);
  EXPECT_EQ(graph_replayed, backend_->supports_graphs());
  ASSERT_EQ(eager.size(), graphs.size());
  for (size_t i = 0; i < eager.size(); ++i)
    EXPECT_NEAR(Tracked(graphs[i], eager[i], 1e-6 * (1 + std::fabs(eager[i]))), eager[i],
                1e-6 * (1 + std::fabs(eager[i]))) << "step " << i + 1;
  EXPECT_NE(eager[0], eager[4]);
}

INSTANTIATE_TEST_SUITE_P(Backends, BackendConformance, ::testing::ValuesIn(BuiltBackends()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace graphc::runtime
