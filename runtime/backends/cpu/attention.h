// Fused attention on the CPU (the plan's Attention and AttentionBackward
// commands): softmax(q k^T + biases) v a block of queries at a time, the scores of
// one block in a per-thread scratch of kAttentionBlock x Lk floats and never
// for the whole sequence, so memory grows with L, not L^2. The products are
// oneDNN's sgemm (single-threaded inside the parallel region); the softmax
// and its gradient are loops here. Forward saves each row's log-sum-exp, from
// which the backward recomputes the probabilities (FlashAttention's scheme).
// A probability below e^-87 (1.6e-38, just above the least normal float)
// is computed as +0: subnormal operands cost x86 a microcode assist per
// operation, and masks such as Swin's (-100 on the scores of another
// region) make many.
//
// In mixed precision q, k, v, o, do, dq, dk and dv are F16 or BF16 (lse and
// the biases stay F32). A group's operands are widened into per-thread F32
// copies and the same loops run, rounding where the CUDA backend's half
// products round: the probabilities before they multiply v (and do, for
// dv), the scores' gradient before it multiplies k and q, each result once
// from its F32 sum. The bias gradients take the unrounded scores' gradient.
// On a CPU with bf16 instructions (AMX, AVX512-BF16) BF16 products run on
// oneDNN's bf16 matmul from the stored (or rounded) bf16 values instead,
// where the products are large enough to gain (Bf16ProductsPay): the same
// values multiplied, summed in F32 in oneDNN's order.

#ifndef GRAPHC_RUNTIME_BACKENDS_CPU_ATTENTION_H_
#define GRAPHC_RUNTIME_BACKENDS_CPU_ATTENTION_H_

#include <cstdint>
#include <vector>

namespace graphc::runtime {

// Rows of queries whose scores are computed together.
inline constexpr int64_t kAttentionBlock = 64;

// The element type of q, k, v, o and their gradients.
enum class AttentionType { kF32, kF16, kBf16 };

struct AttentionShape {
  int64_t groups = 0;   // G: the batch and the heads
  int64_t queries = 0;  // Lq
  int64_t keys = 0;     // Lk
  int64_t depth = 0;    // D, of q and k
  int64_t values = 0;   // Dv, of v and the output
  bool transpose_k = false;  // k stored [G, D, Lk] rather than [G, Lk, D]
  AttentionType type = AttentionType::kF32;
  // kBf16 only: the products on oneDNN's bf16 matmul (a CPU with AMX or
  // AVX512-BF16) instead of sgemm on widened copies; the same rounding
  // points, the f32 sums in another order.
  bool bf16_products = false;
};

// Whether a kBf16 attention of this shape runs its products in bf16 on a
// CPU with bf16 instructions: only where a block's products are large
// enough (min(Lq, kAttentionBlock) x Lk x max(D, Dv) multiply-adds, at
// least kAttentionBf16MinProduct). Each oneDNN matmul call costs a few
// microseconds of its own, more than the bf16 instructions save on a small
// product: Swin's 7x7 windows (49 tokens, 32 per head) trained 30-40%
// slower than on widened copies (sgemm), ViT-B's 197 tokens of 64 per head
// 10-20% faster; 64 tokens of 64 break even (Intel Xeon with AMX, 2 cores).
inline constexpr int64_t kAttentionBf16MinProduct = int64_t{1} << 18;
bool Bf16ProductsPay(const AttentionShape& shape);

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
// q, k, v and o are of shape.type (floats, or 16-bit halves).
void AttentionForward(const AttentionShape& shape, const void* q, const void* k,
                      const void* v, const std::vector<AttentionBias>& biases, void* o,
                      float* lse, int threads);

// How many bf16 products oneDNN refused, each run instead as sgemm on
// widened copies (none expected: a count for tests and diagnostics).
int64_t AttentionBf16ProductFallbacks();

// dq, dk, dv and each bias's gradient (dbias[i], bias i's shape) from the
// forward's operands, o, lse and do. Groups run in parallel, a group's
// blocks in order (dk and dv sum over them); bias gradients sum by chunks
// (above), so the result does not depend on `threads` either.
// All but lse, the biases and dbias are of shape.type.
void AttentionBackward(const AttentionShape& shape, const void* q, const void* k,
                       const void* v, const void* o, const float* lse, const void* dout,
                       const std::vector<AttentionBias>& biases, void* dq, void* dk,
                       void* dv, const std::vector<float*>& dbias, int threads);

}  // namespace graphc::runtime

#endif  // GRAPHC_RUNTIME_BACKENDS_CPU_ATTENTION_H_
