// contract/exp_f32.h's e^x, the CPU attention's (and, as arith ops, the
// generated kernels': test/tools/exp-accuracy.test), against float64 e^x.

#include "contract/exp_f32.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace graphc {
namespace {

float FromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// |y - e^x| in units of the float32 spacing at e^x (at least the least
// subnormal's; below FLT_MAX, where the next float up is inf).
double UlpError(float x, float y) {
  const double ref = std::exp(static_cast<double>(x));
  const float ref32 = static_cast<float>(ref);
  const float inf = std::numeric_limits<float>::infinity();
  const double up = std::nextafter(ref32, inf), down = std::nextafter(ref32, 0.0f);
  const double spacing = std::max(std::isinf(up) ? ref32 - down : up - ref32, std::ldexp(1.0, -149));
  return std::fabs(static_cast<double>(y) - ref) / spacing;
}

TEST(ExpF32, WithinOneUlpOverTheWholeRange) {
  // Every 61st bit pattern of the floats whose e^x is finite and nonzero:
  // [-0, -104] and [+0, 88.72].
  double worst = 0;
  float worst_x = 0;
  int64_t checked = 0;
  const uint32_t ranges[2][2] = {{0x80000000u, 0xC2D00000u}, {0u, 0x42B17217u}};
  for (const auto& range : ranges)
    for (uint64_t bits = range[0]; bits <= range[1]; bits += 61) {
      const float x = FromBits(static_cast<uint32_t>(bits));
      const double error = UlpError(x, ExpF32(x));
      ++checked;
      if (error > worst) worst = error, worst_x = x;
    }
  EXPECT_GT(checked, 30'000'000);
  EXPECT_LE(worst, 1.0) << "at x = " << worst_x;
}

TEST(ExpF32, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(ExpF32(0.0f), 1.0f);
  EXPECT_EQ(ExpF32(-0.0f), 1.0f);
  EXPECT_EQ(ExpF32(inf), inf);
  EXPECT_EQ(ExpF32(-inf), 0.0f);
  EXPECT_FALSE(std::signbit(ExpF32(-inf)));
  EXPECT_TRUE(std::isnan(ExpF32(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(ExpF32(-std::numeric_limits<float>::quiet_NaN())));
  // Overflow: the largest x with a finite e^x, and the next float.
  EXPECT_TRUE(std::isfinite(ExpF32(88.72283f)));
  EXPECT_EQ(ExpF32(88.7229f), inf);
  EXPECT_EQ(ExpF32(1e30f), inf);
  EXPECT_EQ(ExpF32(std::numeric_limits<float>::max()), inf);
  // Underflow: subnormal results, then +0 from the clamp on.
  EXPECT_GT(ExpF32(-100.0f), 0.0f);
  EXPECT_LT(ExpF32(-100.0f), std::numeric_limits<float>::min());
  EXPECT_LE(UlpError(-100.0f, ExpF32(-100.0f)), 1.0);
  EXPECT_EQ(ExpF32(-104.0f), 0.0f);
  EXPECT_EQ(ExpF32(-1e30f), 0.0f);
  EXPECT_EQ(ExpF32(std::numeric_limits<float>::lowest()), 0.0f);
  // Exact where e^x is: e^1 rounds to the float nearest e.
  EXPECT_EQ(ExpF32(1.0f), static_cast<float>(std::exp(1.0)));
}

}  // namespace
}  // namespace graphc
