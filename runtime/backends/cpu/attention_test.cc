// The CPU attention's bf16 products (oneDNN's bf16 matmul, where the CPU
// has bf16 instructions) against its products on widened copies (sgemm),
// both against float64: the same rounding points, so the same accuracy.

#include "runtime/backends/cpu/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "contract/half_float.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace graphc::runtime {
namespace {

double Value(uint16_t h) {
  const uint32_t bits = Bf16ToF32Bits(h);
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

std::vector<uint16_t> Random(size_t n, float scale, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<uint16_t> v(n);
  for (uint16_t& x : v) {
    const float f = normal(rng);
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    x = F32ToBf16Bits(bits);
  }
  return v;
}

// `n` draws of `normal`, in order (one distribution across calls: the
// same values as drawing them one by one).
std::vector<float> Floats(int64_t n, std::normal_distribution<float>& normal, std::mt19937& rng) {
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = normal(rng);
  return v;
}

TEST(CpuAttention, Bf16ProductsAreAsAccurateAsWidenedOnes) {
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  if (isa != dnnl::cpu_isa::avx512_core_bf16 && isa != dnnl::cpu_isa::avx512_core_amx)
    GTEST_SKIP() << "no bf16 instructions here (oneDNN's ISA): the backend never asks for "
                    "bf16 products";
  // 197 keys: three full blocks of queries and a partial one, lanes of 8
  // with a remainder; k stored both ways.
  for (bool transpose_k : {false, true}) {
    AttentionShape s;
    s.groups = 3, s.queries = 197, s.keys = 197, s.depth = 64, s.values = 32;
    s.transpose_k = transpose_k;
    s.type = AttentionType::kBf16;
    std::mt19937 rng(7);
    const auto q = Random(s.groups * s.queries * s.depth, 1.0f, rng);
    const auto k = Random(s.groups * s.keys * s.depth, 1.0f, rng);
    const auto v = Random(s.groups * s.keys * s.values, 1.0f, rng);
    std::vector<uint16_t> widened(s.groups * s.queries * s.values), native(widened.size());
    std::vector<float> lse_widened(s.groups * s.queries), lse_native(lse_widened.size());
    s.bf16_products = false;
    AttentionForward(s, q.data(), k.data(), v.data(), {}, widened.data(), lse_widened.data(), 2);
    s.bf16_products = true;
    AttentionForward(s, q.data(), k.data(), v.data(), {}, native.data(), lse_native.data(), 2);
    double error_widened = 0, error_native = 0, squares = 0;
    for (int64_t g = 0; g < s.groups; ++g)
      for (int64_t i = 0; i < s.queries; ++i) {
        std::vector<double> p(s.keys);
        double max = -INFINITY, sum = 0;
        for (int64_t j = 0; j < s.keys; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < s.depth; ++d)
            dot += Value(q[(g * s.queries + i) * s.depth + d]) *
                   Value(transpose_k ? k[(g * s.depth + d) * s.keys + j]
                                     : k[(g * s.keys + j) * s.depth + d]);
          p[j] = dot;
          max = std::max(max, dot);
        }
        for (double& x : p) sum += (x = std::exp(x - max));
        EXPECT_NEAR(lse_native[g * s.queries + i], max + std::log(sum), 1e-4 * (1 + std::fabs(max)));
        for (int64_t c = 0; c < s.values; ++c) {
          double want = 0;
          for (int64_t j = 0; j < s.keys; ++j)
            want += p[j] / sum * Value(v[(g * s.keys + j) * s.values + c]);
          const size_t e = (g * s.queries + i) * s.values + c;
          error_widened += std::pow(Value(widened[e]) - want, 2);
          error_native += std::pow(Value(native[e]) - want, 2);
          squares += want * want;
        }
      }
    // Both within bf16's rounding of the result (2^-9 relative, as an rms),
    // and the native products no worse than the widened ones beyond noise.
    EXPECT_LT(std::sqrt(error_native / squares), 0x1p-8) << "transpose_k " << transpose_k;
    EXPECT_LT(error_native, 1.2 * error_widened) << "transpose_k " << transpose_k;

    // Backward: the same gradients both ways, but for bf16 rounding flips
    // (the f32 sums in another order; dS = P (dP - rowsum(do o)) cancels).
    const auto dout = Random(widened.size(), 1e-2f, rng);
    std::vector<uint16_t> grads[2][3];
    for (int native_products = 0; native_products < 2; ++native_products) {
      s.bf16_products = native_products == 1;
      auto& [dq, dk, dv] = grads[native_products];
      dq.resize(q.size()), dk.resize(k.size()), dv.resize(v.size());
      AttentionBackward(s, q.data(), k.data(), v.data(), widened.data(), lse_widened.data(),
                        dout.data(), {}, dq.data(), dk.data(), dv.data(), {}, 2);
    }
    for (int t = 0; t < 3; ++t) {
      double diff = 0, norm = 0;
      for (size_t e = 0; e < grads[0][t].size(); ++e) {
        diff += std::pow(Value(grads[1][t][e]) - Value(grads[0][t][e]), 2);
        norm += std::pow(Value(grads[0][t][e]), 2);
      }
      EXPECT_GT(norm, 0);
      EXPECT_LT(std::sqrt(diff / norm), 0x1p-7)
          << "gradient " << "qkv"[t] << ", transpose_k " << transpose_k;
    }
  }
  EXPECT_EQ(AttentionBf16ProductFallbacks(), 0) << "oneDNN refused bf16 products";
}

}  // namespace
}  // namespace graphc::runtime

namespace graphc::runtime {
namespace {

// The same bits on any thread count, even where a region gets one thread
// (one group in the backward; one block in the forward): its products must
// not spread over the cores themselves, summing in another order.
TEST(CpuAttention, SameBitsOnAnyThreadCount) {
  for (int64_t groups : {1, 3}) {
    AttentionShape s;
    s.groups = groups, s.queries = 64, s.keys = 197, s.depth = 64, s.values = 64;
    std::mt19937 rng(11);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    auto random = [&](int64_t n) { return Floats(n, normal, rng); };
    const auto q = random(groups * s.queries * s.depth), k = random(groups * s.keys * s.depth),
               v = random(groups * s.keys * s.values), dout = random(groups * s.queries * s.values);
    std::vector<float> results[2];
    for (int threads : {1, 2}) {
      std::vector<float> o(dout.size()), lse(groups * s.queries), dq(q.size()), dk(k.size()),
          dv(v.size());
      AttentionForward(s, q.data(), k.data(), v.data(), {}, o.data(), lse.data(), threads);
      AttentionBackward(s, q.data(), k.data(), v.data(), o.data(), lse.data(), dout.data(), {},
                        dq.data(), dk.data(), dv.data(), {}, threads);
      auto& all = results[threads - 1];
      for (const auto* part : {&o, &lse, &dq, &dk, &dv}) all.insert(all.end(), part->begin(), part->end());
    }
    EXPECT_EQ(std::memcmp(results[0].data(), results[1].data(), results[0].size() * sizeof(float)), 0)
        << "groups " << groups;
  }
}

}  // namespace
}  // namespace graphc::runtime

namespace graphc::runtime {
namespace {

// A key a mask pushes 100 below the others (Swin's shift mask) has a
// probability of e^-100, a subnormal float: it is computed as +0, so the
// masked keys contribute exactly nothing (their v and k gradients and the
// mask's gradient are +0, no subnormal anywhere), and the rest is as
// float64 computes it.
TEST(CpuAttention, MaskedKeysGetExactlyZeroProbability) {
  AttentionShape s;
  s.groups = 2, s.queries = 49, s.keys = 49, s.depth = 32, s.values = 32;
  constexpr int64_t kMasked = 20;  // keys 0 .. 19, for every query
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  auto random = [&](int64_t n) { return Floats(n, normal, rng); };
  const auto q = random(s.groups * s.queries * s.depth), k = random(s.groups * s.keys * s.depth),
             v = random(s.groups * s.keys * s.values), dout = random(s.groups * s.queries * s.values);
  std::vector<float> mask(s.queries * s.keys);
  for (int64_t i = 0; i < s.queries; ++i)
    for (int64_t j = 0; j < s.keys; ++j) mask[i * s.keys + j] = j < kMasked ? -100.0f : 0.0f;
  const std::vector<AttentionBias> biases = {{mask.data(), 1, 1}};
  std::vector<float> o(dout.size()), lse(s.groups * s.queries), dq(q.size()), dk(k.size()),
      dv(v.size()), dmask(mask.size());
  AttentionForward(s, q.data(), k.data(), v.data(), biases, o.data(), lse.data(), 2);
  AttentionBackward(s, q.data(), k.data(), v.data(), o.data(), lse.data(), dout.data(), biases,
                    dq.data(), dk.data(), dv.data(), {dmask.data()}, 2);
  for (const auto* part : {&o, &lse, &dq, &dk, &dv, &dmask})
    for (float x : *part) ASSERT_NE(std::fpclassify(x), FP_SUBNORMAL);
  for (int64_t g = 0; g < s.groups; ++g)
    for (int64_t j = 0; j < kMasked; ++j)
      for (int64_t d = 0; d < s.depth; ++d) {
        ASSERT_EQ(dk[(g * s.keys + j) * s.depth + d], 0.0f) << "key " << j;
        ASSERT_EQ(dv[(g * s.keys + j) * s.values + d], 0.0f) << "key " << j;
      }
  for (int64_t i = 0; i < s.queries; ++i)
    for (int64_t j = 0; j < kMasked; ++j) ASSERT_EQ(dmask[i * s.keys + j], 0.0f);
  // The output against float64 over every key (the masked ones' share is
  // below 1e-40 there too).
  double worst = 0;
  for (int64_t g = 0; g < s.groups; ++g)
    for (int64_t i = 0; i < s.queries; ++i) {
      std::vector<double> p(s.keys);
      double max = -INFINITY, sum = 0;
      for (int64_t j = 0; j < s.keys; ++j) {
        double dot = mask[i * s.keys + j];
        for (int64_t d = 0; d < s.depth; ++d)
          dot += double{q[(g * s.queries + i) * s.depth + d]} * k[(g * s.keys + j) * s.depth + d];
        max = std::max(max, p[j] = dot);
      }
      for (double& x : p) sum += (x = std::exp(x - max));
      EXPECT_NEAR(lse[g * s.queries + i], max + std::log(sum), 1e-5);
      for (int64_t c = 0; c < s.values; ++c) {
        double want = 0;
        for (int64_t j = 0; j < s.keys; ++j) want += p[j] / sum * v[(g * s.keys + j) * s.values + c];
        worst = std::max(worst, std::fabs(o[(g * s.queries + i) * s.values + c] - want));
      }
    }
  EXPECT_LT(worst, 1e-6);
}

}  // namespace
}  // namespace graphc::runtime

namespace graphc::runtime {
namespace {

// bf16 products only where they gain: not for Swin's 7x7 windows (49 tokens,
// 32 per head), for ViT-B's 197 tokens of 64 per head.
TEST(CpuAttention, Bf16ProductsOnlyForLargeEnoughProducts) {
  AttentionShape swin;
  swin.groups = 1536, swin.queries = swin.keys = 49, swin.depth = swin.values = 32;
  EXPECT_FALSE(Bf16ProductsPay(swin));
  AttentionShape vit;
  vit.groups = 96, vit.queries = vit.keys = 197, vit.depth = vit.values = 64;
  EXPECT_TRUE(Bf16ProductsPay(vit));
  // A block's products: 64 queries at most, however long the sequence.
  AttentionShape long_windows = swin;
  long_windows.queries = 4096;
  EXPECT_FALSE(Bf16ProductsPay(long_windows));
  // 2^18 multiply-adds exactly, the larger of q's and v's depths.
  AttentionShape even;
  even.groups = 8, even.queries = even.keys = 64, even.depth = even.values = 64;
  EXPECT_TRUE(Bf16ProductsPay(even));
  even.depth = 16;
  EXPECT_TRUE(Bf16ProductsPay(even));
  even.values = 63;
  EXPECT_FALSE(Bf16ProductsPay(even));
}

// Scores that make the cut only after the row's scaling (e^-86.9 is kept,
// half of it is below e^-87), a NaN score, and a row masked to -inf: the
// scaled probability is +0 too, a NaN still makes its row NaN (a diverged
// model must not train on), and -inf everywhere is NaN as 0/0 is.
TEST(CpuAttention, SmallProbabilitiesAndNaNsAfterScaling) {
  AttentionShape s;
  s.groups = 1, s.queries = 3, s.keys = 3, s.depth = 1, s.values = 1;
  const std::vector<float> q(3, 0.0f), k(3, 0.0f), v = {0.0f, 0.0f, 1.0f};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> bias = {0.0f, 0.0f, -86.9f,  // row 0
                                   0.0f, nan,  0.0f,    // row 1
                                   -inf, -inf, -inf};   // row 2
  std::vector<float> o(3), lse(3);
  AttentionForward(s, q.data(), k.data(), v.data(), {{bias.data(), 1, 1}}, o.data(), lse.data(),
                   2);
  EXPECT_EQ(o[0], 0.0f);  // e^-86.9 / 2, below e^-87: not a subnormal 9.4e-39
  EXPECT_NEAR(lse[0], std::log(2.0), 1e-6);
  EXPECT_TRUE(std::isnan(o[1]) && std::isnan(lse[1]));
  EXPECT_TRUE(std::isnan(o[2]));
  // The backward recomputes the same cut from lse: key 2 gets nothing.
  const std::vector<float> dout = {1.0f, 0.0f, 0.0f};
  std::vector<float> dq(3), dk(3), dv(3), dbias(9);
  const std::vector<float> bias0 = {0.0f, 0.0f, -86.9f, 0, 0, 0, 0, 0, 0};
  AttentionShape one = s;
  one.queries = 1;
  AttentionBackward(one, q.data(), k.data(), v.data(), o.data(), lse.data(), dout.data(),
                    {{bias0.data(), 1, 1}}, dq.data(), dk.data(), dv.data(), {dbias.data()}, 2);
  EXPECT_EQ(dv[2], 0.0f);
  EXPECT_EQ(dbias[2], 0.0f);
}

}  // namespace
}  // namespace graphc::runtime
