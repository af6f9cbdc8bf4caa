// Fused attention on the CPU (see attention.h).

#include "runtime/backends/cpu/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "oneapi/dnnl/dnnl.h"

namespace graphc::runtime {
namespace {

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

// Group g's dq and its dk and dv, whole; each bias's gradient rows added to
// dbias[i] (a [P_i, Lq, Lk] sum). p and dp: kAttentionBlock x Lk scratch.
void BackwardGroup(const AttentionShape& s, int64_t g, const float* q, const float* k,
                   const float* v, const float* o, const float* lse, const float* dout,
                   const std::vector<AttentionBias>& biases, float* dq, float* dk, float* dv,
                   float* const* dbias, float* p, float* dp) {
  const int64_t kStride = s.keys * s.depth, vStride = s.keys * s.values;
  const float* kg = k + g * kStride;
  const float* vg = v + g * vStride;
  float* dkg = dk + g * kStride;
  float* dvg = dv + g * vStride;
  std::memset(dkg, 0, sizeof(float) * kStride);
  std::memset(dvg, 0, sizeof(float) * vStride);
  for (int64_t i0 = 0; i0 < s.queries; i0 += kAttentionBlock) {
    const int64_t rows = std::min(kAttentionBlock, s.queries - i0);
    const int64_t first = g * s.queries + i0;
    const float* qb = q + first * s.depth;
    const float* ob = o + first * s.values;
    const float* dob = dout + first * s.values;
    // P = exp(s - lse), the forward's probabilities, recomputed.
    Scores(s, qb, rows, kg, p);
    AddBiases(s, biases, g, i0, rows, p);
    for (int64_t r = 0; r < rows; ++r) {
      float* row = p + r * s.keys;
      const float l = lse[first + r];
      for (int64_t j = 0; j < s.keys; ++j) row[j] = std::exp(row[j] - l);
    }
    // dv += P^T do; dP = do v^T.
    Gemm('T', 'N', s.keys, s.values, rows, p, s.keys, dob, s.values, 1.0f, dvg, s.values);
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
    // dq = dS k; dk += dS^T q (stored transposed: dk^T += q^T dS).
    float* dqb = dq + first * s.depth;
    if (s.transpose_k) {
      Gemm('N', 'T', rows, s.depth, s.keys, dp, s.keys, kg, s.keys, 0.0f, dqb, s.depth);
      Gemm('T', 'N', s.depth, s.keys, rows, qb, s.depth, dp, s.keys, 1.0f, dkg, s.keys);
    } else {
      Gemm('N', 'N', rows, s.depth, s.keys, dp, s.keys, kg, s.depth, 0.0f, dqb, s.depth);
      Gemm('T', 'N', s.keys, s.depth, rows, dp, s.keys, qb, s.depth, 1.0f, dkg, s.depth);
    }
  }
}

int Threads(int threads, int64_t tasks) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, tasks)));
}

}  // namespace

void AttentionForward(const AttentionShape& s, const float* q, const float* k, const float* v,
                      const std::vector<AttentionBias>& biases, float* o, float* lse,
                      int threads) {
  const int64_t blocks = (s.queries + kAttentionBlock - 1) / kAttentionBlock;
  const int64_t tasks = s.groups * blocks;
#pragma omp parallel num_threads(Threads(threads, tasks))
  {
    std::vector<float> scores(static_cast<size_t>(kAttentionBlock * s.keys));
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t g = task / blocks, i0 = (task % blocks) * kAttentionBlock;
      const int64_t rows = std::min(kAttentionBlock, s.queries - i0);
      const float* qb = q + (g * s.queries + i0) * s.depth;
      const float* kg = k + g * s.keys * s.depth;
      const float* vg = v + g * s.keys * s.values;
      Scores(s, qb, rows, kg, scores.data());
      AddBiases(s, biases, g, i0, rows, scores.data());
      for (int64_t r = 0; r < rows; ++r) {
        float* row = scores.data() + r * s.keys;
        float max = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j < s.keys; ++j) max = std::max(max, row[j]);
        double sum = 0;
        for (int64_t j = 0; j < s.keys; ++j) {
          row[j] = std::exp(row[j] - max);
          sum += row[j];
        }
        const float inverse = static_cast<float>(1.0 / sum);
        for (int64_t j = 0; j < s.keys; ++j) row[j] *= inverse;
        lse[g * s.queries + i0 + r] = max + static_cast<float>(std::log(sum));
      }
      Gemm('N', 'N', rows, s.values, s.keys, scores.data(), s.keys, vg, s.values, 0.0f,
           o + (g * s.queries + i0) * s.values, s.values);
    }
  }
}

void AttentionBackward(const AttentionShape& s, const float* q, const float* k, const float* v,
                       const float* o, const float* lse, const float* dout,
                       const std::vector<AttentionBias>& biases, float* dq, float* dk,
                       float* dv, const std::vector<float*>& dbias, int threads) {
  const size_t scratch = static_cast<size_t>(kAttentionBlock * s.keys);
  if (biases.empty()) {
#pragma omp parallel num_threads(Threads(threads, s.groups))
    {
      std::vector<float> p(scratch), dp(scratch);
#pragma omp for schedule(dynamic, 1)
      for (int64_t g = 0; g < s.groups; ++g)
        BackwardGroup(s, g, q, k, v, o, lse, dout, biases, dq, dk, dv, nullptr, p.data(),
                      dp.data());
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
    std::vector<float> p(scratch), dp(scratch);
#pragma omp for schedule(dynamic, 1)
    for (int64_t c = 0; c < chunks; ++c)
      for (int64_t g = c * s.groups / chunks; g < (c + 1) * s.groups / chunks; ++g)
        BackwardGroup(s, g, q, k, v, o, lse, dout, biases, dq, dk, dv,
                      sums[static_cast<size_t>(c)].data(), p.data(), dp.data());
    for (size_t i = 0; i < biases.size(); ++i) {
#pragma omp for schedule(static)
      for (int64_t e = 0; e < sizes[i]; ++e)
        for (int64_t c = 1; c < chunks; ++c) dbias[i][e] += sums[static_cast<size_t>(c)][i][e];
    }
  }
}

}  // namespace graphc::runtime
