// The communicator's arithmetic on the wire formats: conversions between F32
// and the two half types (round to nearest even, as the CUDA and oneDNN
// backends round), the element-wise half-type sums that MPI lacks (it has no
// half datatypes, so the MPI communicator registers these as its own MPI_Ops),
// and the argument checks that the MPI and the single-rank communicators share,
// so that a bad call fails the same way in a one-process test as under mpirun.
// Private to runtime/comm.

#ifndef GRAPHC_RUNTIME_COMM_WIRE_FORMAT_H_
#define GRAPHC_RUNTIME_COMM_WIRE_FORMAT_H_

#include <cstdint>
#include <cstring>
#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/status.h"

namespace graphc::runtime::comm {

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// IEEE binary16, round to nearest even; overflow gives infinity, a NaN stays a
// (quiet) NaN with its top payload bits, as the F16C instructions do, so that
// the vector and the scalar paths agree bit for bit.
inline uint16_t FloatToHalf(float f) {
  uint32_t u = FloatBits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  u &= 0x7fffffffu;
  if (u >= 0x47800000u) {  // >= 2^16: infinity, or a NaN
    if (u > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((u >> 13) & 0x3ffu));
    return static_cast<uint16_t>(sign | 0x7c00u);
  }
  if (u < 0x38800000u) {  // below 2^-14: a subnormal half or zero
    // Adding 0.5 puts the value's subnormal-half bits at the bottom of the
    // float mantissa; the float addition rounds them to nearest even.
    const float magic = BitsFloat(126u << 23);  // 0.5
    return static_cast<uint16_t>(sign | (FloatBits(BitsFloat(u) + magic) - (126u << 23)));
  }
  const uint32_t odd = (u >> 13) & 1u;
  u += 0xc8000fffu + odd;  // rebias the exponent (-112 << 23), round half to even
  return static_cast<uint16_t>(sign | (u >> 13));
}

inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t bits = static_cast<uint32_t>(h & 0x7fffu) << 13;
  const uint32_t exponent = bits & (0x7c00u << 13);
  if (exponent == (0x7c00u << 13)) {
    bits += (255u - 31u) << 23;  // infinity or NaN
  } else if (exponent == 0) {
    // Zero or subnormal: scale through the float unit, exact.
    bits = FloatBits(BitsFloat(bits + (113u << 23)) - BitsFloat(113u << 23));
  } else {
    bits += (127u - 15u) << 23;
  }
  return BitsFloat(bits | sign);
}

// bfloat16, round to nearest even; a NaN stays a quiet NaN.
inline uint16_t FloatToBf16(float f) {
  uint32_t u = FloatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float Bf16ToFloat(uint16_t b) { return BitsFloat(static_cast<uint32_t>(b) << 16); }

// dst[i] = round(src[i] * scale) to the half type (scale 1 for a plain copy).
void FloatsToHalves(const float* src, uint16_t* dst, uint64_t n, float scale);
void FloatsToBf16s(const float* src, uint16_t* dst, uint64_t n, float scale);
// dst[i] = src[i] * scale (exact for scale 1; one rounding otherwise).
void HalvesToFloats(const uint16_t* src, float* dst, uint64_t n, float scale);
void Bf16sToFloats(const uint16_t* src, float* dst, uint64_t n, float scale);
// In place: x[i] = round(x[i] * scale) in the half type.
void ScaleHalves(uint16_t* x, uint64_t n, float scale);
void ScaleBf16s(uint16_t* x, uint64_t n, float scale);
// inout[i] = round(float(in[i]) + float(inout[i])): the MPI_Op bodies.
void AddHalves(const uint16_t* in, uint16_t* inout, uint64_t n);
void AddBf16s(const uint16_t* in, uint16_t* inout, uint64_t n);

// Bytes per element of a dtype (I1: one byte), 0 for a value outside the enum.
uint64_t CommDTypeBytes(fb::DType dtype);
const char* CommDTypeName(fb::DType dtype);

// The dtype a tensor travels in: F32 tensors in `wire` when it is F16 or
// BF16, every other tensor in its own dtype.
inline fb::DType WireDType(fb::DType tensor, fb::DType wire) {
  if (tensor == fb::DType::F32 && (wire == fb::DType::F16 || wire == fb::DType::BF16)) return wire;
  return tensor;
}

// kInvalidArgument for a bad wire type, dtype, null data, a byte count that
// overflows, or a mean of integers; names `what` and the tensor's index.
Status CheckAllreduce(const std::string& what, const std::vector<CommTensor>& tensors,
                      Reduction reduction, fb::DType wire);

}  // namespace graphc::runtime::comm

#endif  // GRAPHC_RUNTIME_COMM_WIRE_FORMAT_H_
