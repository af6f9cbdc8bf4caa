// Fused attention on the CPU (the plan's Attention and AttentionBackward
// commands): softmax(q k^T + biases) v a block of queries at a time, the scores of
// one block in a per-thread scratch of kAttentionBlock x Lk floats and never
// for the whole sequence, so memory grows with L, not L^2. The products are
// oneDNN's sgemm (single-threaded inside the parallel region); the softmax
// and its gradient are loops here. Forward saves each row's log-sum-exp, from
// which the backward recomputes the probabilities (FlashAttention's scheme).

#ifndef GRAPHC_RUNTIME_BACKENDS_CPU_ATTENTION_H_
#define GRAPHC_RUNTIME_BACKENDS_CPU_ATTENTION_H_

#include <cstdint>
#include <vector>

namespace graphc::runtime {

// Rows of queries whose scores are computed together.
inline constexpr int64_t kAttentionBlock = 64;

struct AttentionShape {
  int64_t groups = 0;   // G: the batch and the heads
  int64_t queries = 0;  // Lq
  int64_t keys = 0;     // Lk
  int64_t depth = 0;    // D, of q and k
  int64_t values = 0;   // Dv, of v and the output
  bool transpose_k = false;  // k stored [G, D, Lk] rather than [G, Lk, D]
};

// A bias added to the scores: `count` slices of [Lq, Lk]; group g adds
// slice (g / stride) % count.
struct AttentionBias {
  const float* data = nullptr;
  int64_t count = 1;
  int64_t stride = 1;
};

// With biases, the backward sums each bias's gradient over this many
// chunks of consecutive groups, then the chunks in order: fixed by the
// shapes, not the threads, so the sums are too. Fewer when the partial
// sums would pass kAttentionBiasScratchBytes.
inline constexpr int64_t kAttentionBiasChunks = 32;
inline constexpr int64_t kAttentionBiasScratchBytes = int64_t{256} << 20;

// o = softmax(q k^T + biases) v per group; lse[g, i] = log(sum_j exp(s_ij -
// m_i)) + m_i. Every group and block of queries is independent: the result
// does not depend on `threads`.
void AttentionForward(const AttentionShape& shape, const float* q, const float* k,
                      const float* v, const std::vector<AttentionBias>& biases, float* o,
                      float* lse, int threads);

// dq, dk, dv and each bias's gradient (dbias[i], bias i's shape) from the
// forward's operands, o, lse and do. Groups run in parallel, a group's
// blocks in order (dk and dv sum over them); bias gradients sum by chunks
// (above), so the result does not depend on `threads` either.
void AttentionBackward(const AttentionShape& shape, const float* q, const float* k,
                       const float* v, const float* o, const float* lse, const float* dout,
                       const std::vector<AttentionBias>& biases, float* dq, float* dk,
                       float* dv, const std::vector<float*>& dbias, int threads);

}  // namespace graphc::runtime

#endif  // GRAPHC_RUNTIME_BACKENDS_CPU_ATTENTION_H_
