// Fused attention on the CPU (see attention.h).

#include "runtime/backends/cpu/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "contract/exp_f32.h"
#include "contract/half_float.h"
#include "oneapi/dnnl/dnnl.h"

namespace graphc::runtime {
namespace {

// The rows' exponentials are contract/exp_f32.h's, the generated kernels'
// own e^x, in loops that vectorize (this file is compiled with
// -fno-trapping-math and -ffp-contract=off): each is built for AVX2 and for
// the baseline, the CPU's picked when the library loads.
#define GRAPHC_ROW_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))

constexpr int kLanes = 8;  // independent partial maxima and sums per row

// row[j] = e^(row[j] - shift), j < n.
GRAPHC_ROW_CLONES void ExpShifted(float* row, int64_t n, float shift) {
  for (int64_t j = 0; j < n; ++j) row[j] = ExpF32(row[j] - shift);
}

// The row's softmax, in place (max-subtracted; the sum in double); returns
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
  for (j = 0; j < n; ++j) row[j] = ExpF32(row[j] - max);
  double lane_sum[kLanes] = {};
  for (j = 0; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) lane_sum[l] += row[j + l];
  double sum = 0;
  for (int l = 0; l < kLanes; ++l) sum += lane_sum[l];
  for (; j < n; ++j) sum += row[j];
  const float inverse = static_cast<float>(1.0 / sum);
  for (j = 0; j < n; ++j) row[j] *= inverse;
  return max + static_cast<float>(std::log(sum));
}

// C = alpha op(A) op(B) + beta C, row-major (oneDNN's sgemm).
void Gemm(char ta, char tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  dnnl_sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

// s = q_block k^T: [rows, Lk].
void Scores(const AttentionShape& s, const float* q_block, int64_t rows, const float* kg,
            float* scores) {
  if (s.transpose_k)
    Gemm('N', 'N', rows, s.keys, s.depth, q_block, s.depth, kg, s.keys, 0.0f, scores, s.keys);
  else
    Gemm('N', 'T', rows, s.keys, s.depth, q_block, s.depth, kg, s.depth, 0.0f, scores, s.keys);
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

// Group g's dq and its dk and dv, whole, from its operands as floats (qg ..
// dog; lseg its rows' log-sum-exps); each bias's gradient rows added to
// dbias[i] (a [P_i, Lq, Lk] sum). p, dp (and ph, for half operands): block
// x Lk scratch.
void BackwardGroup(const AttentionShape& s, int64_t g, const float* qg, const float* kg,
                   const float* vg, const float* og, const float* lseg, const float* dog,
                   const std::vector<AttentionBias>& biases, float* dqg, float* dkg, float* dvg,
                   float* const* dbias, float* p, float* dp, float* ph) {
  const int64_t kStride = s.keys * s.depth, vStride = s.keys * s.values;
  std::memset(dkg, 0, sizeof(float) * kStride);
  std::memset(dvg, 0, sizeof(float) * vStride);
  for (int64_t i0 = 0; i0 < s.queries; i0 += kAttentionBlock) {
    const int64_t rows = std::min(kAttentionBlock, s.queries - i0);
    const float* qb = qg + i0 * s.depth;
    const float* ob = og + i0 * s.values;
    const float* dob = dog + i0 * s.values;
    // P = exp(s - lse), the forward's probabilities, recomputed.
    Scores(s, qb, rows, kg, p);
    AddBiases(s, biases, g, i0, rows, p);
    for (int64_t r = 0; r < rows; ++r) ExpShifted(p + r * s.keys, s.keys, lseg[i0 + r]);
    // dv += P^T do (P rounded to the half type when the operands are); dP =
    // do v^T.
    const float* pv = p;
    if (IsHalf(s)) {
      std::memcpy(ph, p, sizeof(float) * rows * s.keys);
      Round(s.type, ph, rows * s.keys);
      pv = ph;
    }
    Gemm('T', 'N', s.keys, s.values, rows, pv, s.keys, dob, s.values, 1.0f, dvg, s.values);
    Gemm('N', 'T', rows, s.keys, s.values, dob, s.values, vg, s.values, 0.0f, dp, s.keys);
    // dS = P (dP - rowsum(do o)).
    for (int64_t r = 0; r < rows; ++r) {
      double dot = 0;
      for (int64_t c = 0; c < s.values; ++c)
        dot += double{dob[r * s.values + c]} * ob[r * s.values + c];
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
    Round(s.type, dp, rows * s.keys);
    float* dqb = dqg + i0 * s.depth;
    if (s.transpose_k) {
      Gemm('N', 'T', rows, s.depth, s.keys, dp, s.keys, kg, s.keys, 0.0f, dqb, s.depth);
      Gemm('T', 'N', s.depth, s.keys, rows, qb, s.depth, dp, s.keys, 1.0f, dkg, s.keys);
    } else {
      Gemm('N', 'N', rows, s.depth, s.keys, dp, s.keys, kg, s.depth, 0.0f, dqb, s.depth);
      Gemm('T', 'N', s.keys, s.depth, rows, dp, s.keys, qb, s.depth, 1.0f, dkg, s.depth);
    }
  }
}

// One thread's scratch for the backward: the scores' blocks and, for half
// operands, a group's operands and gradients as floats.
struct BackwardScratch {
  std::vector<float> p, dp, ph;
  std::vector<float> q, k, v, o, dout, dq, dk, dv;

  explicit BackwardScratch(const AttentionShape& s)
      : p(static_cast<size_t>(kAttentionBlock * s.keys)), dp(p.size()) {
    if (!IsHalf(s)) return;
    ph.resize(p.size());
    dq.resize(static_cast<size_t>(s.queries * s.depth));
    dk.resize(static_cast<size_t>(s.keys * s.depth));
    dv.resize(static_cast<size_t>(s.keys * s.values));
  }
};

// Group g of the backward, on the operands as they are stored.
void BackwardGroupOf(const AttentionShape& s, int64_t g, const void* q, const void* k,
                     const void* v, const void* o, const float* lse, const void* dout,
                     const std::vector<AttentionBias>& biases, void* dq, void* dk, void* dv,
                     float* const* dbias, BackwardScratch& w) {
  const int64_t qn = s.queries * s.depth, kn = s.keys * s.depth, vn = s.keys * s.values,
                on = s.queries * s.values;
  const float* qg = Floats(s, q, g * qn, qn, w.q);
  const float* kg = Floats(s, k, g * kn, kn, w.k);
  const float* vg = Floats(s, v, g * vn, vn, w.v);
  const float* og = Floats(s, o, g * on, on, w.o);
  const float* dog = Floats(s, dout, g * on, on, w.dout);
  const bool half = IsHalf(s);
  float* dqg = half ? w.dq.data() : static_cast<float*>(dq) + g * qn;
  float* dkg = half ? w.dk.data() : static_cast<float*>(dk) + g * kn;
  float* dvg = half ? w.dv.data() : static_cast<float*>(dv) + g * vn;
  BackwardGroup(s, g, qg, kg, vg, og, lse + g * s.queries, dog, biases, dqg, dkg, dvg, dbias,
                w.p.data(), w.dp.data(), half ? w.ph.data() : nullptr);
  if (!half) return;
  Narrow(s.type, dqg, At(s, dq, g * qn), qn);
  Narrow(s.type, dkg, At(s, dk, g * kn), kn);
  Narrow(s.type, dvg, At(s, dv, g * vn), vn);
}

int Threads(int threads, int64_t tasks) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, tasks)));
}

}  // namespace

void AttentionForward(const AttentionShape& s, const void* q, const void* k, const void* v,
                      const std::vector<AttentionBias>& biases, void* o, float* lse,
                      int threads) {
  const int64_t blocks = (s.queries + kAttentionBlock - 1) / kAttentionBlock;
  const int64_t tasks = s.groups * blocks;
  const bool half = IsHalf(s);
#pragma omp parallel num_threads(Threads(threads, tasks))
  {
    std::vector<float> scores(static_cast<size_t>(kAttentionBlock * s.keys));
    // Half operands: the block's q and output, the group's k and v as
    // floats (k and v kept while the thread's tasks stay in one group).
    std::vector<float> qf, kf, vf, of(half ? static_cast<size_t>(kAttentionBlock * s.values) : 0);
    int64_t widened = -1;  // the group kf and vf hold
    const float *kg = nullptr, *vg = nullptr;
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t g = task / blocks, i0 = (task % blocks) * kAttentionBlock;
      const int64_t rows = std::min(kAttentionBlock, s.queries - i0);
      const int64_t first = g * s.queries + i0;
      const float* qb = Floats(s, q, first * s.depth, rows * s.depth, qf);
      if (!half || widened != g) {
        kg = Floats(s, k, g * s.keys * s.depth, s.keys * s.depth, kf);
        vg = Floats(s, v, g * s.keys * s.values, s.keys * s.values, vf);
        widened = g;
      }
      Scores(s, qb, rows, kg, scores.data());
      AddBiases(s, biases, g, i0, rows, scores.data());
      for (int64_t r = 0; r < rows; ++r)
        lse[first + r] = SoftmaxRow(scores.data() + r * s.keys, s.keys);
      // Half operands: P rounded to their type, the product rounded once.
      Round(s.type, scores.data(), rows * s.keys);
      float* ob = half ? of.data() : static_cast<float*>(o) + first * s.values;
      Gemm('N', 'N', rows, s.values, s.keys, scores.data(), s.keys, vg, s.values, 0.0f, ob,
           s.values);
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
