// Bulk conversions and sums between F32 and the half types. The fp16 loops use
// the F16C instructions where the CPU has them (checked at run time, so the
// build needs no -m flag and runs on any x86-64): a 25 MiB gradient bucket is
// 6.5 million conversions each way, which the scalar code takes tens of
// milliseconds for. Both paths round to nearest even and agree bit for bit,
// signaling NaNs included (quieted, as F16C quiets them).

#include "runtime/comm/wire_format.h"

#include <cstring>
#include <limits>
#include <string>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define GRAPHC_COMM_F16C 1
#endif

namespace graphc::runtime::comm {
namespace {

#if GRAPHC_COMM_F16C
bool HaveF16c() {
  static const bool have = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
  return have;
}

__attribute__((target("avx,f16c"))) uint64_t FloatsToHalvesF16c(const float* src, uint16_t* dst,
                                                               uint64_t n, float scale) {
  const __m256 s = _mm256_set1_ps(scale);
  uint64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 x = _mm256_loadu_ps(src + i);
    if (scale != 1.0f) x = _mm256_mul_ps(x, s);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
  }
  return i;
}

__attribute__((target("avx,f16c"))) uint64_t HalvesToFloatsF16c(const uint16_t* src, float* dst,
                                                               uint64_t n, float scale) {
  const __m256 s = _mm256_set1_ps(scale);
  uint64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    if (scale != 1.0f) x = _mm256_mul_ps(x, s);
    _mm256_storeu_ps(dst + i, x);
  }
  return i;
}

__attribute__((target("avx,f16c"))) uint64_t ScaleHalvesF16c(uint16_t* x, uint64_t n,
                                                            float scale) {
  const __m256 s = _mm256_set1_ps(scale);
  uint64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i* p = reinterpret_cast<__m128i*>(x + i);
    const __m256 v = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(p)), s);
    _mm_storeu_si128(p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  return i;
}

__attribute__((target("avx,f16c"))) uint64_t AddHalvesF16c(const uint16_t* in, uint16_t* inout,
                                                          uint64_t n) {
  uint64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i* p = reinterpret_cast<__m128i*>(inout + i);
    const __m256 a = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
    const __m256 b = _mm256_cvtph_ps(_mm_loadu_si128(p));
    _mm_storeu_si128(p, _mm256_cvtps_ph(_mm256_add_ps(a, b), _MM_FROUND_TO_NEAREST_INT));
  }
  return i;
}
#endif  // GRAPHC_COMM_F16C

}  // namespace

void FloatsToHalves(const float* src, uint16_t* dst, uint64_t n, float scale) {
  uint64_t i = 0;
#if GRAPHC_COMM_F16C
  if (HaveF16c()) i = FloatsToHalvesF16c(src, dst, n, scale);
#endif
  for (; i < n; ++i) dst[i] = FloatToHalf(src[i] * scale);
}

void FloatsToBf16s(const float* src, uint16_t* dst, uint64_t n, float scale) {
  for (uint64_t i = 0; i < n; ++i) dst[i] = FloatToBf16(src[i] * scale);
}

void HalvesToFloats(const uint16_t* src, float* dst, uint64_t n, float scale) {
  uint64_t i = 0;
#if GRAPHC_COMM_F16C
  if (HaveF16c()) i = HalvesToFloatsF16c(src, dst, n, scale);
#endif
  for (; i < n; ++i) dst[i] = HalfToFloat(src[i]) * scale;
}

void Bf16sToFloats(const uint16_t* src, float* dst, uint64_t n, float scale) {
  for (uint64_t i = 0; i < n; ++i) dst[i] = Bf16ToFloat(src[i]) * scale;
}

void ScaleHalves(uint16_t* x, uint64_t n, float scale) {
  uint64_t i = 0;
#if GRAPHC_COMM_F16C
  if (HaveF16c()) i = ScaleHalvesF16c(x, n, scale);
#endif
  for (; i < n; ++i) x[i] = FloatToHalf(HalfToFloat(x[i]) * scale);
}

void ScaleBf16s(uint16_t* x, uint64_t n, float scale) {
  for (uint64_t i = 0; i < n; ++i) x[i] = FloatToBf16(Bf16ToFloat(x[i]) * scale);
}

void AddHalves(const uint16_t* in, uint16_t* inout, uint64_t n) {
  uint64_t i = 0;
#if GRAPHC_COMM_F16C
  if (HaveF16c()) i = AddHalvesF16c(in, inout, n);
#endif
  for (; i < n; ++i) inout[i] = FloatToHalf(HalfToFloat(in[i]) + HalfToFloat(inout[i]));
}

void AddBf16s(const uint16_t* in, uint16_t* inout, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) {
    inout[i] = FloatToBf16(Bf16ToFloat(in[i]) + Bf16ToFloat(inout[i]));
  }
}

uint64_t CommDTypeBytes(fb::DType dtype) {
  switch (dtype) {
    case fb::DType::F32: return 4;
    case fb::DType::F16: return 2;
    case fb::DType::BF16: return 2;
    case fb::DType::I32: return 4;
    case fb::DType::I64: return 8;
    case fb::DType::I1: return 1;
    case fb::DType::U8: return 1;
  }
  return 0;
}

const char* CommDTypeName(fb::DType dtype) {
  switch (dtype) {
    case fb::DType::F32: return "f32";
    case fb::DType::F16: return "f16";
    case fb::DType::BF16: return "bf16";
    case fb::DType::I32: return "i32";
    case fb::DType::I64: return "i64";
    case fb::DType::I1: return "i1";
    case fb::DType::U8: return "u8";
  }
  return "?";
}

Status CheckAllreduce(const std::string& what, const std::vector<CommTensor>& tensors,
                      Reduction reduction, fb::DType wire) {
  auto invalid = [&](const std::string& message) {
    return Status(ErrorCode::kInvalidArgument, what + ": " + message);
  };
  if (wire != fb::DType::F32 && wire != fb::DType::F16 && wire != fb::DType::BF16) {
    return invalid(std::string("the wire type must be f32 (each tensor in its own dtype), f16 "
                               "or bf16, not ") + CommDTypeName(wire));
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    const CommTensor& t = tensors[i];
    const std::string which = "tensor " + std::to_string(i);
    const uint64_t bytes = CommDTypeBytes(t.dtype);
    if (bytes == 0) {
      return invalid(which + " has dtype value " + std::to_string(static_cast<int>(t.dtype)) +
                     ", which is none of f32, f16, bf16, i32, i64, i1");
    }
    if (t.elements > std::numeric_limits<uint64_t>::max() / 8) {
      return invalid(which + " has " + std::to_string(t.elements) + " elements, too many");
    }
    if (t.elements > 0 && t.data == nullptr) return invalid(which + " has no data");
    const bool floating =
        t.dtype == fb::DType::F32 || t.dtype == fb::DType::F16 || t.dtype == fb::DType::BF16;
    if (reduction == Reduction::kMean && !floating) {
      return invalid(which + " is " + CommDTypeName(t.dtype) +
                     ", and an integer tensor has no mean (use kSum)");
    }
  }
  return Status::Ok();
}

Status CheckSparse(const std::string& what, const std::vector<CommTensor>& tensors,
                   std::vector<uint32_t>& counts) {
  auto invalid = [&](const std::string& message) {
    return Status(ErrorCode::kInvalidArgument, what + ": " + message);
  };
  if (tensors.empty() || tensors.size() % 3 != 0)
    return invalid("a sparse allreduce takes threes of values, indices and a dense tensor, not " +
                   std::to_string(tensors.size()) + " tensors");
  counts.clear();
  for (size_t s = 0; s < tensors.size(); s += 3) {
    const CommTensor &values = tensors[s], &indices = tensors[s + 1], &dense = tensors[s + 2];
    const std::string which = "set " + std::to_string(s / 3);
    if (values.dtype != fb::DType::F32 || indices.dtype != fb::DType::I32 ||
        dense.dtype != fb::DType::F32)
      return invalid(which + " is not values f32, indices i32 and a dense f32 tensor");
    if (values.elements != indices.elements || values.elements == 0 ||
        values.elements > dense.elements || dense.elements >= (uint64_t{1} << 31))
      return invalid(which + " has " + std::to_string(values.elements) + " values, " +
                     std::to_string(indices.elements) + " indices and " +
                     std::to_string(dense.elements) +
                     " dense elements (needs 1 <= values = indices <= dense < 2^31)");
    if (values.data == nullptr || indices.data == nullptr || dense.data == nullptr)
      return invalid(which + " has no data");
    const int32_t* index = static_cast<const int32_t*>(indices.data);
    uint32_t count = 0;
    while (count < indices.elements && index[count] >= 0) {
      if (static_cast<uint64_t>(index[count]) >= dense.elements)
        return invalid(which + " has index " + std::to_string(index[count]) + " at " +
                       std::to_string(count) + ", outside its " + std::to_string(dense.elements) +
                       " elements");
      ++count;
    }
    counts.push_back(count);
  }
  return Status::Ok();
}

void PackSparse(const std::vector<CommTensor>& tensors, const std::vector<uint32_t>& counts,
                uint32_t* pairs) {
  for (size_t s = 0; s < counts.size(); ++s) {
    const uint32_t* values = static_cast<const uint32_t*>(tensors[3 * s].data);
    const uint32_t* indices = static_cast<const uint32_t*>(tensors[3 * s + 1].data);
    for (uint32_t k = 0; k < counts[s]; ++k) {
      *pairs++ = values[k];
      *pairs++ = indices[k];
    }
  }
}

int64_t AddSparse(const uint32_t* pairs, uint64_t count, float* dense, uint64_t elements,
                  float scale) {
  for (uint64_t k = 0; k < count; ++k) {
    float value;
    std::memcpy(&value, &pairs[2 * k], sizeof value);
    const uint32_t index = pairs[2 * k + 1];
    if (index >= elements) return static_cast<int64_t>(index);
    dense[index] += value * scale;
  }
  return -1;
}

}  // namespace graphc::runtime::comm
