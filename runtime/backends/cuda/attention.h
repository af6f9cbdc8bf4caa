// Fused attention on CUDA (the plan's Attention and AttentionBackward
// commands), as the CPU backend computes it (runtime/backends/cpu/attention.h)
// and with the same memory bound: the scores of a chunk of groups and a
// block of queries at a time, in a scratch whose size the backend fixes at
// load, never [G, Lq, Lk] for a long sequence. The four products are cuBLAS
// strided-batched gemms over the chunk's groups (FP32; TF32 tensor cores when
// the backend allows them); the biases, the softmax, the probabilities'
// recomputation and the scores' gradient are row kernels here, a warp per
// row. Forward keeps each row's log-sum-exp, from which backward recomputes
// the probabilities (FlashAttention's scheme).
//
// Every result is a fixed function of the operands and the tiling (no
// atomics): a bias's gradient sums the chunk's groups in order, and the
// chunks in order.
//
// In mixed precision q, k, v, o, do, dq, dk and dv are F16 or BF16 (lse and
// the biases F32): the products are half on the tensor cores
// (cublasGemmStridedBatchedEx, FP32 accumulation) with the scores, softmax and
// the scores' gradient in FP32, rounded to half only to multiply (P before v
// and do, dS before k and q), as FlashAttention does and as the CPU backend
// rounds; dk and dv sum over the query blocks in FP32 and are rounded once.

#ifndef GRAPHC_RUNTIME_BACKENDS_CUDA_ATTENTION_H_
#define GRAPHC_RUNTIME_BACKENDS_CUDA_ATTENTION_H_

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace graphc::runtime::cuda {

// q [G, Lq, D], k [G, Lk, D] (transpose_k: [G, D, Lk]), v [G, Lk, Dv].
struct AttentionDims {
  int64_t groups = 0, queries = 0, keys = 0, depth = 0, values = 0;
  bool transpose_k = false;
  // Of q, k, v, o and their gradients: CUDA_R_32F, CUDA_R_16F or CUDA_R_16BF.
  cudaDataType_t type = CUDA_R_32F;
};

// At most this many biases (the plan loader's kMaxAttentionBiases).
inline constexpr int kAttentionMaxBiases = 4;

// Bias i: `count[i]` slices of [Lq, Lk]; group g adds slice
// (g / stride[i]) % count[i]. `grad[i]`: its gradient (backward), same shape.
struct AttentionBiases {
  int n = 0;
  const float* data[kAttentionMaxBiases] = {};
  float* grad[kAttentionMaxBiases] = {};
  int64_t count[kAttentionMaxBiases] = {};
  int64_t stride[kAttentionMaxBiases] = {};
};

// How the scores are cut: `chunk` groups at a time, `block` queries of each.
struct AttentionTiling {
  int64_t chunk = 1, block = 1;
};

// The tiling that fits a budget of `scratch_floats`: every group's whole
// sequence at once where it fits, else the most groups that fit, else one
// group and the most query rows (at least one). F32: the scores fit the
// budget (backward also holds their gradient: twice the budget). Half: the
// command's whole scratch (AttentionScratchFloats) fits what an F32 command
// of the budget may take, `scratch_floats` (backward: twice that); only the
// least tiling (one group, one query; backward also one group's FP32 dk and
// dv sums) may take more.
AttentionTiling TileAttention(const AttentionDims& dims, int64_t scratch_floats, bool backward);

// The floats of scratch a command of `tiling` takes, each part rounded up to
// 64 floats: n = chunk x block x Lk scores (backward: and their gradient);
// in half also their copy in half (n elements of 2 bytes: P, then backward
// dS) and, backward, FP32 sums of a chunk's dk and dv (chunk x Lk x D and
// chunk x Lk x Dv floats).
int64_t AttentionScratchFloats(const AttentionDims& dims, const AttentionTiling& tiling,
                               bool backward);

// The first call that failed, if any.
struct AttentionStatus {
  cudaError_t cuda = cudaSuccess;
  cublasStatus_t blas = CUBLAS_STATUS_SUCCESS;
  const char* what = "";
  bool ok() const { return cuda == cudaSuccess && blas == CUBLAS_STATUS_SUCCESS; }
};

// o = softmax(q k^T + biases) v per group, lse[g, i] = the row's log-sum-exp.
// q, k, v and o of dims.type. `scratch`: AttentionScratchFloats(dims, tiling,
// false) floats, 256-byte aligned. On `blas`'s stream (which must be
// `stream`).
AttentionStatus AttentionForward(cublasHandle_t blas, cudaStream_t stream,
                                 const AttentionDims& dims, const AttentionTiling& tiling,
                                 const void* q, const void* k, const void* v,
                                 const AttentionBiases& biases, void* o, float* lse,
                                 float* scratch);

// dq, dk, dv and each bias's gradient from the forward's operands, o, lse
// and do (all but lse and the biases of dims.type). `scratch`:
// AttentionScratchFloats(dims, tiling, true) floats, 256-byte aligned.
AttentionStatus AttentionBackward(cublasHandle_t blas, cudaStream_t stream,
                                  const AttentionDims& dims, const AttentionTiling& tiling,
                                  const void* q, const void* k, const void* v, const void* o,
                                  const float* lse, const void* dout,
                                  const AttentionBiases& biases, void* dq, void* dk, void* dv,
                                  float* scratch);

}  // namespace graphc::runtime::cuda

#endif  // GRAPHC_RUNTIME_BACKENDS_CUDA_ATTENTION_H_
