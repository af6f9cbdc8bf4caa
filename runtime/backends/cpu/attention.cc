// Fused attention on the CPU (see attention.h).

#include "runtime/backends/cpu/attention.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <tuple>
#include <vector>

#include "contract/exp_f32.h"
#include "contract/half_float.h"
#include "oneapi/dnnl/dnnl.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace graphc::runtime {
namespace {

// The rows' exponentials are contract/exp_f32.h's, the generated kernels'
// own e^x, in loops that vectorize (this file is compiled with
// -fno-trapping-math and -ffp-contract=off): each is built for AVX2 and for
// the baseline, the CPU's picked when the library loads.
#define GRAPHC_ROW_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))

constexpr int kLanes = 8;  // independent partial maxima and sums per row

// Below this, e^x is flushed to +0: e^-87 (1.6e-38) is just above the least
// normal float (1.2e-38, e^-87.34), so the exponential never forms a
// subnormal; kProbabilityMin is e^-87 as a float, the same cut for the
// forward's scaled probabilities as the backward's recomputed ones.
constexpr float kExpNormalLow = -87.0f;
constexpr float kProbabilityMin = 1.64581143e-38f;

// e^x, or +0 below e^-87 (where e^x nears the subnormals). A probability
// that small is
// nothing to a row whose largest is 1, but subnormal operands make x86's
// products an order of magnitude slower (a microcode assist per operation),
// in the exponential itself, the products with v, and the whole backward:
// Swin's shift mask (-100 on the scores of pixels from other regions) made
// its masked attention 3 to 10x slower than the unmasked one. x is clamped
// first so that the exponential never forms a subnormal either; NaN stays
// NaN.
inline float ExpNormal(float x) {
  const float y = ExpF32(x < kExpNormalLow ? kExpNormalLow : x);
  return x < kExpNormalLow ? 0.0f : y;
}

// row[j] = e^(row[j] - shift), j < n (+0 below e^-87, as in SoftmaxRow).
GRAPHC_ROW_CLONES void ExpShifted(float* row, int64_t n, float shift) {
  for (int64_t j = 0; j < n; ++j) row[j] = ExpNormal(row[j] - shift);
}

// The row's softmax, in place (max-subtracted; the sum in double; a
// probability below e^-87 is +0, see ExpNormal); returns
// its log-sum-exp. A NaN score makes the row NaN.
GRAPHC_ROW_CLONES float SoftmaxRow(float* row, int64_t n) {
  float lane_max[kLanes];
  for (float& m : lane_max) m = -std::numeric_limits<float>::infinity();
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l)
      lane_max[l] = lane_max[l] < row[j + l] ? row[j + l] : lane_max[l];
  float max = lane_max[0];
  for (int l = 1; l < kLanes; ++l) max = max < lane_max[l] ? lane_max[l] : max;
  for (; j < n; ++j) max = max < row[j] ? row[j] : max;
  for (j = 0; j < n; ++j) row[j] = ExpNormal(row[j] - max);
  double lane_sum[kLanes] = {};
  for (j = 0; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) lane_sum[l] += row[j + l];
  double sum = 0;
  for (int l = 0; l < kLanes; ++l) sum += lane_sum[l];
  for (; j < n; ++j) sum += row[j];
  // The scaled probabilities flushed as the backward's e^(s - lse) is
  // (scaling may take a kept exponential below e^-87, even below the least
  // normal float).
  const float inverse = static_cast<float>(1.0 / sum);
  for (j = 0; j < n; ++j) {
    const float p = row[j] * inverse;
    row[j] = p < kProbabilityMin ? 0.0f : p;
  }
  return max + static_cast<float>(std::log(sum));
}

// s += the biases' rows i0 .. i0 + rows of group g.
void AddBiases(const AttentionShape& s, const std::vector<AttentionBias>& biases, int64_t g,
               int64_t i0, int64_t rows, float* scores) {
  for (const AttentionBias& bias : biases) {
    const float* b = bias.data + (((g / bias.stride) % bias.count) * s.queries + i0) * s.keys;
    for (int64_t e = 0; e < rows * s.keys; ++e) scores[e] += b[e];
  }
}

// ---- Half operands: widened into F32 copies, results narrowed ----

bool IsHalf(const AttentionShape& s) { return s.type != AttentionType::kF32; }

void Widen(AttentionType type, const void* in, float* out, int64_t n) {
  const uint16_t* h = static_cast<const uint16_t*>(in);
  uint32_t* bits = reinterpret_cast<uint32_t*>(out);
  if (type == AttentionType::kBf16)
    for (int64_t i = 0; i < n; ++i) bits[i] = Bf16ToF32Bits(h[i]);
  else
    for (int64_t i = 0; i < n; ++i) bits[i] = F16ToF32Bits(h[i]);
}

void Narrow(AttentionType type, const float* in, void* out, int64_t n) {
  uint16_t* h = static_cast<uint16_t*>(out);
  const uint32_t* bits = reinterpret_cast<const uint32_t*>(in);
  if (type == AttentionType::kBf16)
    for (int64_t i = 0; i < n; ++i) h[i] = F32ToBf16Bits(bits[i]);
  else
    for (int64_t i = 0; i < n; ++i) h[i] = F32ToF16Bits(bits[i]);
}

// x rounded to the half type's nearest value, kept as floats.
void Round(AttentionType type, float* x, int64_t n) {
  uint32_t* bits = reinterpret_cast<uint32_t*>(x);
  if (type == AttentionType::kBf16)
    for (int64_t i = 0; i < n; ++i) bits[i] = Bf16ToF32Bits(F32ToBf16Bits(bits[i]));
  else if (type == AttentionType::kF16)
    for (int64_t i = 0; i < n; ++i) bits[i] = F16ToF32Bits(F32ToF16Bits(bits[i]));
}

// Element `i` of an operand of shape.type, as a byte address.
const void* At(const AttentionShape& s, const void* base, int64_t i) {
  return static_cast<const char*>(base) + i * (IsHalf(s) ? 2 : 4);
}
void* At(const AttentionShape& s, void* base, int64_t i) {
  return static_cast<char*>(base) + i * (IsHalf(s) ? 2 : 4);
}

// `n` elements of an operand from element `first`, as floats: the operand
// itself when it is F32, else widened into `copy`.
const float* Floats(const AttentionShape& s, const void* base, int64_t first, int64_t n,
                    std::vector<float>& copy) {
  if (!IsHalf(s)) return static_cast<const float*>(base) + first;
  copy.resize(static_cast<size_t>(n));
  Widen(s.type, At(s, base, first), copy.data(), n);
  return copy.data();
}

// A product's operand: as floats, and where the products run in bf16 (shape
// .bf16_products) as the bf16 values those floats hold. A product takes
// the bf16 form when both operands have one.
struct Operand {
  const float* f = nullptr;
  const uint16_t* h = nullptr;
};

std::atomic<int64_t> bf16_fallbacks{0};

// c = op(a) op(b) + beta c in bf16 on oneDNN's matmul (AMX or AVX512-BF16:
// the bf16 products exact, summed in f32), row-major with leading
// dimensions as sgemm's. Primitives are kept per thread and shape, each
// with its own stream and scratchpad, so threads never share one. Where
// oneDNN refuses one (it throws, inside the threads' parallel region), the
// product runs as sgemm on widened copies instead, as without bf16
// products.
void HalfGemm(char ta, char tb, int64_t m, int64_t n, int64_t k, const uint16_t* a,
              int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  using dnnl::memory;
  struct Cached {
    dnnl::matmul primitive;  // empty: oneDNN refused this product
    memory::desc a, b, c, scratchpad;
  };
  struct Products {
    dnnl::engine engine{dnnl::engine::kind::cpu, 0};
    dnnl::stream stream{engine};
    std::map<std::tuple<char, char, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, float>,
             Cached>
        cache;
    std::vector<uint8_t> scratchpad;
  };
  thread_local Products products;
  // beta is the sum post-op's scale, part of the primitive.
  const auto key = std::make_tuple(ta, tb, m, n, k, lda, ldb, ldc, beta);
  auto widened = [&] {
    // op(a)'s stored rows: m (or k, transposed) of lda; op(b)'s likewise.
    thread_local std::vector<float> af, bf;
    const int64_t an = ((ta == 'N' ? m : k) - 1) * lda + (ta == 'N' ? k : m);
    const int64_t bn = ((tb == 'N' ? k : n) - 1) * ldb + (tb == 'N' ? n : k);
    af.resize(static_cast<size_t>(an));
    bf.resize(static_cast<size_t>(bn));
    Widen(AttentionType::kBf16, a, af.data(), an);
    Widen(AttentionType::kBf16, b, bf.data(), bn);
    dnnl_sgemm(ta, tb, m, n, k, 1.0f, af.data(), lda, bf.data(), ldb, beta, c, ldc);
    bf16_fallbacks.fetch_add(1, std::memory_order_relaxed);
  };
  auto it = products.cache.find(key);
  if (it == products.cache.end()) try {
    // op(a) is [m, k], op(b) [k, n]: a transposed operand by its strides.
    const memory::desc ad({m, k}, memory::data_type::bf16,
                          ta == 'N' ? memory::dims{lda, 1} : memory::dims{1, lda});
    const memory::desc bd({k, n}, memory::data_type::bf16,
                          tb == 'N' ? memory::dims{ldb, 1} : memory::dims{1, ldb});
    const memory::desc cd({m, n}, memory::data_type::f32, memory::dims{ldc, 1});
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (beta != 0.0f) {
      dnnl::post_ops sum;
      sum.append_sum(beta);
      attr.set_post_ops(sum);
    }
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(ad, bd, cd), attr, products.engine);
    it = products.cache.emplace(key, Cached{dnnl::matmul(pd), ad, bd, cd, pd.scratchpad_desc()})
             .first;
  } catch (const dnnl::error&) {
    it = products.cache.emplace(key, Cached{}).first;
  }
  const Cached& mm = it->second;
  if (!mm.primitive) return widened();
  if (products.scratchpad.size() < mm.scratchpad.get_size())
    products.scratchpad.resize(mm.scratchpad.get_size());
  dnnl::engine& engine = products.engine;
  try {
    mm.primitive.execute(
        products.stream,
        {{DNNL_ARG_SRC, memory(mm.a, engine, const_cast<uint16_t*>(a))},
         {DNNL_ARG_WEIGHTS, memory(mm.b, engine, const_cast<uint16_t*>(b))},
         {DNNL_ARG_DST, memory(mm.c, engine, c)},
         {DNNL_ARG_SCRATCHPAD, memory(mm.scratchpad, engine, products.scratchpad.data())}});
    products.stream.wait();
  } catch (const dnnl::error&) {
    widened();  // c untouched: oneDNN checks its arguments before it writes
  }
}

// C = op(A) op(B) + beta C, row-major: oneDNN's sgemm on the floats, or
// HalfGemm on the bf16 values when both operands have them.
void Gemm(char ta, char tb, int64_t m, int64_t n, int64_t k, Operand a, int64_t lda, Operand b,
          int64_t ldb, float beta, float* c, int64_t ldc) {
  if (a.h != nullptr && b.h != nullptr)
    HalfGemm(ta, tb, m, n, k, a.h, lda, b.h, ldb, beta, c, ldc);
  else
    dnnl_sgemm(ta, tb, m, n, k, 1.0f, a.f, lda, b.f, ldb, beta, c, ldc);
}

// s = q_block k^T: [rows, Lk].
void Scores(const AttentionShape& s, Operand q_block, int64_t rows, Operand kg, float* scores) {
  if (s.transpose_k)
    Gemm('N', 'N', rows, s.keys, s.depth, q_block, s.depth, kg, s.keys, 0.0f, scores, s.keys);
  else
    Gemm('N', 'T', rows, s.keys, s.depth, q_block, s.depth, kg, s.depth, 0.0f, scores, s.keys);
}

// The bf16 values at element `first` of an operand of shape.type, where
// the products run in bf16 (else none: the products take the floats).
const uint16_t* Bf16At(const AttentionShape& s, const void* base, int64_t first) {
  return s.bf16_products ? static_cast<const uint16_t*>(base) + first : nullptr;
}

// `n` elements of an operand from element `first`, as the products take
// them: its bf16 values where the products run in bf16, else its floats
// (widened into `copy` for a half type).
Operand ForProducts(const AttentionShape& s, const void* base, int64_t first, int64_t n,
                    std::vector<float>& copy) {
  if (s.bf16_products) return {nullptr, Bf16At(s, base, first)};
  return {Floats(s, base, first, n, copy), nullptr};
}

// `n` floats narrowed to bf16 into `to` where the products run in bf16, or
// else rounded to the half type in place (the float products then take
// them as the half values); the operand to multiply with either way.
Operand Rounded(const AttentionShape& s, float* x, int64_t n, uint16_t* to) {
  if (s.bf16_products) {
    Narrow(s.type, x, to, n);
    return {nullptr, to};
  }
  Round(s.type, x, n);
  return {x, nullptr};
}

// Group g's dq and its dk and dv, whole, from its operands (qg .. dog,
// og as floats; lseg its rows' log-sum-exps); each bias's gradient rows
// added to dbias[i] (a [P_i, Lq, Lk] sum). p, dp and ph (and p16, ds16 for
// bf16 products): block x Lk scratch.
void BackwardGroup(const AttentionShape& s, int64_t g, Operand qg, Operand kg, Operand vg,
                   const float* og, const float* lseg, Operand dog,
                   const std::vector<AttentionBias>& biases, float* dqg, float* dkg, float* dvg,
                   float* const* dbias, float* p, float* dp, float* ph, uint16_t* p16,
                   uint16_t* ds16) {
  const int64_t kStride = s.keys * s.depth, vStride = s.keys * s.values;
  auto at = [](Operand x, int64_t i) {
    return Operand{x.f ? x.f + i : nullptr, x.h ? x.h + i : nullptr};
  };
  std::memset(dkg, 0, sizeof(float) * kStride);
  std::memset(dvg, 0, sizeof(float) * vStride);
  for (int64_t i0 = 0; i0 < s.queries; i0 += kAttentionBlock) {
    const int64_t rows = std::min(kAttentionBlock, s.queries - i0);
    const Operand qb = at(qg, i0 * s.depth), dob = at(dog, i0 * s.values);
    const float* ob = og + i0 * s.values;
    // P = exp(s - lse), the forward's probabilities, recomputed.
    Scores(s, qb, rows, kg, p);
    AddBiases(s, biases, g, i0, rows, p);
    for (int64_t r = 0; r < rows; ++r) ExpShifted(p + r * s.keys, s.keys, lseg[i0 + r]);
    // dv += P^T do (P rounded to the half type when the operands are); dP =
    // do v^T.
    Operand pv{p, nullptr};
    if (IsHalf(s)) {
      std::memcpy(ph, p, sizeof(float) * rows * s.keys);
      pv = Rounded(s, ph, rows * s.keys, p16);
    }
    Gemm('T', 'N', s.keys, s.values, rows, pv, s.keys, dob, s.values, 1.0f, dvg, s.values);
    Gemm('N', 'T', rows, s.keys, s.values, dob, s.values, vg, s.values, 0.0f, dp, s.keys);
    // dS = P (dP - rowsum(do o)).
    for (int64_t r = 0; r < rows; ++r) {
      double dot = 0;
      for (int64_t c = 0; c < s.values; ++c)
        dot += double{dob.f[r * s.values + c]} * ob[r * s.values + c];
      const float shift = static_cast<float>(dot);
      float* prow = p + r * s.keys;
      float* drow = dp + r * s.keys;
      for (int64_t j = 0; j < s.keys; ++j) drow[j] = prow[j] * (drow[j] - shift);
    }
    // Each bias's gradient is dS, summed over the groups that read it.
    for (size_t i = 0; i < biases.size(); ++i) {
      const AttentionBias& bias = biases[i];
      float* db = dbias[i] + (((g / bias.stride) % bias.count) * s.queries + i0) * s.keys;
      for (int64_t e = 0; e < rows * s.keys; ++e) db[e] += dp[e];
    }
    // dq = dS k; dk += dS^T q (stored transposed: dk^T += q^T dS); dS
    // rounded to the half type first when the operands are.
    const Operand ds = Rounded(s, dp, rows * s.keys, ds16);
    float* dqb = dqg + i0 * s.depth;
    if (s.transpose_k) {
      Gemm('N', 'T', rows, s.depth, s.keys, ds, s.keys, kg, s.keys, 0.0f, dqb, s.depth);
      Gemm('T', 'N', s.depth, s.keys, rows, qb, s.depth, ds, s.keys, 1.0f, dkg, s.keys);
    } else {
      Gemm('N', 'N', rows, s.depth, s.keys, ds, s.keys, kg, s.depth, 0.0f, dqb, s.depth);
      Gemm('T', 'N', s.keys, s.depth, rows, ds, s.keys, qb, s.depth, 1.0f, dkg, s.depth);
    }
  }
}

// One thread's scratch for the backward: the scores' blocks and, for half
// operands, a group's operands and gradients as floats (and the blocks'
// bf16 P and dS for bf16 products).
struct BackwardScratch {
  std::vector<float> p, dp, ph;
  std::vector<float> q, k, v, o, dout, dq, dk, dv;
  std::vector<uint16_t> p16, ds16;

  explicit BackwardScratch(const AttentionShape& s)
      : p(static_cast<size_t>(kAttentionBlock * s.keys)), dp(p.size()) {
    if (!IsHalf(s)) return;
    ph.resize(p.size());
    dq.resize(static_cast<size_t>(s.queries * s.depth));
    dk.resize(static_cast<size_t>(s.keys * s.depth));
    dv.resize(static_cast<size_t>(s.keys * s.values));
    if (!s.bf16_products) return;
    p16.resize(p.size());
    ds16.resize(p.size());
  }
};

// Group g of the backward, on the operands as they are stored (widened
// to floats for the loops; the products take the bf16 values themselves
// where they run in bf16).
void BackwardGroupOf(const AttentionShape& s, int64_t g, const void* q, const void* k,
                     const void* v, const void* o, const float* lse, const void* dout,
                     const std::vector<AttentionBias>& biases, void* dq, void* dk, void* dv,
                     float* const* dbias, BackwardScratch& w) {
  const int64_t qn = s.queries * s.depth, kn = s.keys * s.depth, vn = s.keys * s.values,
                on = s.queries * s.values;
  const Operand qg = ForProducts(s, q, g * qn, qn, w.q);
  const Operand kg = ForProducts(s, k, g * kn, kn, w.k);
  const Operand vg = ForProducts(s, v, g * vn, vn, w.v);
  const float* og = Floats(s, o, g * on, on, w.o);
  // do as floats for the row dots, as bf16 for the products too.
  const Operand dog{Floats(s, dout, g * on, on, w.dout), Bf16At(s, dout, g * on)};
  const bool half = IsHalf(s);
  float* dqg = half ? w.dq.data() : static_cast<float*>(dq) + g * qn;
  float* dkg = half ? w.dk.data() : static_cast<float*>(dk) + g * kn;
  float* dvg = half ? w.dv.data() : static_cast<float*>(dv) + g * vn;
  BackwardGroup(s, g, qg, kg, vg, og, lse + g * s.queries, dog, biases, dqg, dkg, dvg, dbias,
                w.p.data(), w.dp.data(), half ? w.ph.data() : nullptr, w.p16.data(),
                w.ds16.data());
  if (!half) return;
  Narrow(s.type, dqg, At(s, dq, g * qn), qn);
  Narrow(s.type, dkg, At(s, dk, g * kn), kn);
  Narrow(s.type, dvg, At(s, dv, g * vn), vn);
}

// Called first in each parallel region: the products (sgemm, matmul) run
// on the calling thread alone. A region of one thread (one group in the
// backward) is not nested parallelism, and oneDNN would spread the product
// over the cores, summing it in another order than on a team's thread: the
// bits would depend on the thread count. Sets only this thread's implicit
// task's count, which ends with the region.
void OneThreadProducts() { omp_set_num_threads(1); }

int Threads(int threads, int64_t tasks) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, tasks)));
}

}  // namespace

int64_t AttentionBf16ProductFallbacks() { return bf16_fallbacks.load(); }

bool Bf16ProductsPay(const AttentionShape& s) {
  return std::min(s.queries, kAttentionBlock) * s.keys * std::max(s.depth, s.values) >=
         kAttentionBf16MinProduct;
}

void AttentionForward(const AttentionShape& s, const void* q, const void* k, const void* v,
                      const std::vector<AttentionBias>& biases, void* o, float* lse,
                      int threads) {
  const int64_t blocks = (s.queries + kAttentionBlock - 1) / kAttentionBlock;
  const int64_t tasks = s.groups * blocks;
  const bool half = IsHalf(s);
#pragma omp parallel num_threads(Threads(threads, tasks))
  {
    OneThreadProducts();
    std::vector<float> scores(static_cast<size_t>(kAttentionBlock * s.keys));
    // Half operands: the block's q and output, the group's k and v as
    // floats (k and v kept while the thread's tasks stay in one group).
    // bf16 products: the operands as stored, P narrowed into p16.
    std::vector<float> qf, kf, vf, of(half ? static_cast<size_t>(kAttentionBlock * s.values) : 0);
    std::vector<uint16_t> p16(s.bf16_products ? scores.size() : 0);
    int64_t widened = -1;  // the group kf and vf hold
    Operand kg, vg;
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t g = task / blocks, i0 = (task % blocks) * kAttentionBlock;
      const int64_t rows = std::min(kAttentionBlock, s.queries - i0);
      const int64_t first = g * s.queries + i0;
      const Operand qb = ForProducts(s, q, first * s.depth, rows * s.depth, qf);
      if (!half || s.bf16_products || widened != g) {
        kg = ForProducts(s, k, g * s.keys * s.depth, s.keys * s.depth, kf);
        vg = ForProducts(s, v, g * s.keys * s.values, s.keys * s.values, vf);
        widened = g;
      }
      Scores(s, qb, rows, kg, scores.data());
      AddBiases(s, biases, g, i0, rows, scores.data());
      for (int64_t r = 0; r < rows; ++r)
        lse[first + r] = SoftmaxRow(scores.data() + r * s.keys, s.keys);
      // Half operands: P rounded to their type, the product rounded once.
      Operand pv{scores.data(), nullptr};
      if (half) pv = Rounded(s, scores.data(), rows * s.keys, p16.data());
      float* ob = half ? of.data() : static_cast<float*>(o) + first * s.values;
      Gemm('N', 'N', rows, s.values, s.keys, pv, s.keys, vg, s.values, 0.0f, ob, s.values);
      if (half) Narrow(s.type, ob, At(s, o, first * s.values), rows * s.values);
    }
  }
}

void AttentionBackward(const AttentionShape& s, const void* q, const void* k, const void* v,
                       const void* o, const float* lse, const void* dout,
                       const std::vector<AttentionBias>& biases, void* dq, void* dk, void* dv,
                       const std::vector<float*>& dbias, int threads) {
  if (biases.empty()) {
#pragma omp parallel num_threads(Threads(threads, s.groups))
    {
      OneThreadProducts();
      BackwardScratch w(s);
#pragma omp for schedule(dynamic, 1)
      for (int64_t g = 0; g < s.groups; ++g)
        BackwardGroupOf(s, g, q, k, v, o, lse, dout, biases, dq, dk, dv, nullptr, w);
    }
    return;
  }
  // Chunk c of consecutive groups sums its bias gradients into partial c
  // (chunk 0 into dbias itself); then the partials are added in order.
  std::vector<int64_t> sizes;  // each bias's elements
  int64_t bytes = 0;
  for (const AttentionBias& bias : biases) {
    sizes.push_back(bias.count * s.queries * s.keys);
    bytes += sizes.back() * static_cast<int64_t>(sizeof(float));
  }
  const int64_t chunks = std::max<int64_t>(
      1, std::min({s.groups, kAttentionBiasChunks, kAttentionBiasScratchBytes / bytes + 1}));
  std::vector<std::vector<float>> partial(static_cast<size_t>(chunks - 1));
  std::vector<std::vector<float*>> sums(static_cast<size_t>(chunks));
  for (int64_t c = 0; c < chunks; ++c)
    for (size_t i = 0; i < biases.size(); ++i) {
      float* sum = dbias[i];
      if (c > 0) {
        std::vector<float>& own = partial[static_cast<size_t>(c - 1)];
        if (own.empty()) own.resize(static_cast<size_t>(bytes / sizeof(float)));
        int64_t offset = 0;
        for (size_t j = 0; j < i; ++j) offset += sizes[j];
        sum = own.data() + offset;
      }
      std::memset(sum, 0, sizeof(float) * static_cast<size_t>(sizes[i]));
      sums[static_cast<size_t>(c)].push_back(sum);
    }
#pragma omp parallel num_threads(Threads(threads, chunks))
  {
    OneThreadProducts();
    BackwardScratch w(s);
#pragma omp for schedule(dynamic, 1)
    for (int64_t c = 0; c < chunks; ++c)
      for (int64_t g = c * s.groups / chunks; g < (c + 1) * s.groups / chunks; ++g)
        BackwardGroupOf(s, g, q, k, v, o, lse, dout, biases, dq, dk, dv,
                        sums[static_cast<size_t>(c)].data(), w);
    for (size_t i = 0; i < biases.size(); ++i) {
#pragma omp for schedule(static)
      for (int64_t e = 0; e < sizes[i]; ++e)
        for (int64_t c = 1; c < chunks; ++c) dbias[i][e] += sums[static_cast<size_t>(c)][i][e];
    }
  }
}

}  // namespace graphc::runtime
