// Conversions between FP32 and the two 16-bit float types, on bit patterns,
// as the x86 F16C instructions and oneDNN's reorders compute them: round to
// nearest even, overflow to infinity, a NaN kept a quiet NaN with the top of
// its payload. The CPU backend's emulated half library calls and the
// communicator's half wire formats both use them, so the two round alike.
// Header-only: it belongs to no library.

#ifndef GRAPHC_CONTRACT_HALF_FLOAT_H_
#define GRAPHC_CONTRACT_HALF_FLOAT_H_

#include <cstdint>

namespace graphc {

// F16 bits -> FP32 bits, exactly; a signaling NaN is quieted, as F16C does.
inline uint32_t F16ToF32Bits(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  if (exponent == 0x1f)  // infinity, NaN
    return sign | 0x7f800000 | (mantissa << 13) | (mantissa != 0 ? 0x400000 : 0);
  if (exponent != 0) return sign | ((exponent + 112) << 23) | (mantissa << 13);
  if (mantissa == 0) return sign;
  // Subnormal, mantissa x 2^-24: normalized so that bit 10 is the leading one.
  const int shift = __builtin_clz(mantissa) - 21;
  return sign | (static_cast<uint32_t>(113 - shift) << 23) | (((mantissa << shift) & 0x3ff) << 13);
}

// FP32 bits -> F16 bits, rounded to nearest even; NaN -> quiet NaN with the
// top of the payload, as F16C does.
inline uint16_t F32ToF16Bits(uint32_t f) {
  const uint32_t sign = (f >> 16) & 0x8000, magnitude = f & 0x7fffffff;
  if (magnitude > 0x7f800000)
    return static_cast<uint16_t>(sign | 0x7e00 | ((magnitude >> 13) & 0x3ff));
  if (magnitude >= 0x477ff000) return static_cast<uint16_t>(sign | 0x7c00);  // >= 65520: inf
  if (magnitude >= 0x38800000) {  // >= 2^-14: a normal F16
    // Rebias the exponent (127 -> 15) and round the 13 dropped bits; a carry
    // out of the mantissa steps the exponent, as it should.
    const uint32_t odd = (magnitude >> 13) & 1;
    return static_cast<uint16_t>(sign | ((magnitude - (112u << 23) + 0xfff + odd) >> 13));
  }
  const uint32_t exponent = magnitude >> 23;
  if (exponent < 102) return static_cast<uint16_t>(sign);  // < 2^-25: rounds to zero
  // Subnormal F16: the significand in units of 2^-24, rounded.
  const uint32_t significand = (magnitude & 0x7fffff) | 0x800000;
  const uint32_t shift = 126 - exponent;  // 14..24
  const uint32_t kept = significand >> shift, dropped = significand & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  return static_cast<uint16_t>(sign |
                               (kept + (dropped > half || (dropped == half && (kept & 1)))));
}

// BF16 is FP32's top half: widening shifts; narrowing rounds the dropped half
// to nearest even, except that a NaN keeps its top half with the quiet bit set
// (rounding could carry a NaN's payload into infinity). Branch-free, so that
// loops over it vectorize.
inline uint32_t Bf16ToF32Bits(uint16_t b) { return static_cast<uint32_t>(b) << 16; }
inline uint16_t F32ToBf16Bits(uint32_t bits) {
  const uint32_t rounded = (bits + 0x7fff + ((bits >> 16) & 1)) >> 16;
  const uint32_t quiet = (bits >> 16) | 0x40;
  return static_cast<uint16_t>((bits & 0x7fffffff) > 0x7f800000 ? quiet : rounded);
}

}  // namespace graphc

#endif  // GRAPHC_CONTRACT_HALF_FLOAT_H_
