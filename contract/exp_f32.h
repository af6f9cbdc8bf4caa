// e^x in float32 without libm: the one algorithm both the CPU kernels graphc
// generates (nn.exp, sigmoid, GELU's gradient; built from these constants as
// arith ops) and the CPU runtime's fused attention (ExpF32 below) use, so
// that either vectorizes, where a call to expf runs one element at a time.
//
// Cody-Waite range reduction and Cephes' degree-7 minimax polynomial:
//   k = round(x log2 e), r = x - k ln2_hi - k ln2_lo (k ln2_hi exact),
//   e^r = 1 + r + r^2 P(r) on [-ln2/2, ln2/2],
//   e^x = e^r 2^k1 2^k2 (k1 = floor(k/2), k2 = k - k1),
// in that order, with no fused multiply-add, so that every CPU level gives
// the same bits. x is first clamped to [kExpLow, kExpHigh]: below it e^x is
// +0 (it is under half the least subnormal), above it +inf, which the two
// power-of-two factors produce without an overflow of the exponent field; k
// = round(...) is the nearest-even integer that adding and subtracting 1.5
// 2^23 leaves, read from the sum's low mantissa bits. NaN stays NaN.
// Accuracy: within 0.991 ulp of e^x for every float32 x whose e^x is a
// normal float (measured exhaustively against float64 exp); subnormal
// results are rounded twice, at most 1 ulp of the least subnormal off.

#ifndef GRAPHC_CONTRACT_EXP_F32_H_
#define GRAPHC_CONTRACT_EXP_F32_H_

#include <cstdint>
#include <cstring>

namespace graphc {

inline constexpr float kExpLow = -104.0f;
inline constexpr float kExpHigh = 89.0f;
inline constexpr float kExpLog2e = 1.44269504088896341f;
inline constexpr float kExpRound = 12582912.0f;  // 1.5 * 2^23
inline constexpr int32_t kExpRoundBits = 0x4B400000;
inline constexpr float kExpLn2Hi = 0.693359375f;
inline constexpr float kExpLn2Lo = -2.12194440e-4f;
// P(r), highest coefficient first (Horner).
inline constexpr float kExpPoly[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                      4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

// The algorithm above, branch-free so that a loop over it vectorizes (GCC
// needs -fno-trapping-math to if-convert the selects, and -ffp-contract=off
// keeps its products and sums apart, as the generated kernels do).
inline float ExpF32(float x) {
  float c = x < kExpLow ? kExpLow : x;
  c = c > kExpHigh ? kExpHigh : c;
  const float t = c * kExpLog2e + kExpRound;
  const float k = t - kExpRound;
  // The exponent arithmetic in uint32_t: for a NaN it is garbage (the
  // select below drops it), never signed overflow.
  uint32_t tb;
  std::memcpy(&tb, &t, sizeof tb);
  const uint32_t ki = tb - static_cast<uint32_t>(kExpRoundBits);
  float r = c - k * kExpLn2Hi;
  r = r - k * kExpLn2Lo;
  float p = kExpPoly[0];
  for (int i = 1; i < 6; ++i) p = p * r + kExpPoly[i];
  float y = p * (r * r) + r + 1.0f;
  const uint32_t k1 = static_cast<uint32_t>(static_cast<int32_t>(ki) >> 1), k2 = ki - k1;
  const uint32_t b1 = (k1 + 127u) << 23, b2 = (k2 + 127u) << 23;
  float s1, s2;
  std::memcpy(&s1, &b1, sizeof s1);
  std::memcpy(&s2, &b2, sizeof s2);
  y = y * s1 * s2;
  return x != x ? x : y;
}

}  // namespace graphc

#endif  // GRAPHC_CONTRACT_EXP_F32_H_
