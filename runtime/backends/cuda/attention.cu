// Fused attention on CUDA (see attention.h).

#include "runtime/backends/cuda/attention.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <type_traits>

namespace graphc::runtime::cuda {
namespace {

constexpr int kThreads = 256;          // 8 warps
constexpr int kRowsPerBlock = kThreads / 32;

// The rows of one chunk and block: group gl < groups, query row r < rows,
// the group g0 + gl and the query i0 + r; scratch row (gl, r) at
// (gl * rows + r) * keys.
struct Rows {
  int64_t g0 = 0, groups = 0, i0 = 0, rows = 0;
  int64_t queries = 0, keys = 0, values = 0;
};

__device__ float WarpMax(float x) {
  for (int offset = 16; offset > 0; offset /= 2)
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}

__device__ float WarpSum(float x) {
  for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

// Adds the biases to scores row `row` in place; the warp's lanes take every
// 32nd key.
__device__ void AddBiases(float* s, const Rows& d, const AttentionBiases& b, int64_t g, int64_t i,
                          int lane) {
  for (int t = 0; t < b.n; ++t) {
    const float* bias = b.data[t] + (((g / b.stride[t]) % b.count[t]) * d.queries + i) * d.keys;
    for (int64_t j = lane; j < d.keys; j += 32) s[j] += bias[j];
  }
}

// An element of q, k, v, o or their gradients as a float, and back (round
// to nearest even); an F32 command's rows keep no half copy (H = float).
__device__ float Wide(float x) { return x; }
__device__ float Wide(__half x) { return __half2float(x); }
__device__ float Wide(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T>
__device__ T Narrow(float x);
template <>
__device__ __half Narrow<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __nv_bfloat16 Narrow<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// Forward: scores + biases, softmax in place, the row's log-sum-exp; a half
// command (H not float) also writes P rounded to H into `ph`, [groups, rows,
// Lk] like the scores.
template <typename H>
__global__ void SoftmaxRowsKernel(float* scores, float* lse, Rows d, AttentionBiases b, H* ph) {
  const int64_t row = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (row >= d.groups * d.rows) return;  // the whole warp alike
  const int64_t g = d.g0 + row / d.rows, i = d.i0 + row % d.rows;
  float* s = scores + row * d.keys;
  AddBiases(s, d, b, g, i, lane);
  __syncwarp();
  float m = -INFINITY;
  for (int64_t j = lane; j < d.keys; j += 32) m = fmaxf(m, s[j]);
  m = WarpMax(m);
  float sum = 0;
  for (int64_t j = lane; j < d.keys; j += 32) {
    const float e = expf(s[j] - m);
    s[j] = e;
    sum += e;
  }
  sum = WarpSum(sum);
  const float inverse = 1.0f / sum;
  for (int64_t j = lane; j < d.keys; j += 32) s[j] *= inverse;
  if constexpr (!std::is_same_v<H, float>) {
    H* h = ph + row * d.keys;
    for (int64_t j = lane; j < d.keys; j += 32) h[j] = Narrow<H>(s[j]);
  }
  if (lane == 0) lse[g * d.queries + i] = m + logf(sum);
}

// Backward: the forward's probabilities again, exp(scores + biases - lse);
// in half also rounded to H into `ph`.
template <typename H>
__global__ void ProbabilityRowsKernel(float* scores, const float* lse, Rows d, AttentionBiases b,
                                      H* ph) {
  const int64_t row = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (row >= d.groups * d.rows) return;
  const int64_t g = d.g0 + row / d.rows, i = d.i0 + row % d.rows;
  float* s = scores + row * d.keys;
  AddBiases(s, d, b, g, i, lane);
  __syncwarp();
  const float l = lse[g * d.queries + i];
  for (int64_t j = lane; j < d.keys; j += 32) s[j] = expf(s[j] - l);
  if constexpr (!std::is_same_v<H, float>) {
    H* h = ph + row * d.keys;
    for (int64_t j = lane; j < d.keys; j += 32) h[j] = Narrow<H>(s[j]);
  }
}

// out[e] = in[e] rounded to T, e < n.
template <typename T>
__global__ void NarrowKernel(const float* in, T* out, int64_t n) {
  for (int64_t e = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; e < n;
       e += int64_t{gridDim.x} * blockDim.x)
    out[e] = Narrow<T>(in[e]);
}

// dS = P (dP - rowsum(do o)), in dP's place (do and o of type T, widened);
// in half (T not float) also dS rounded to T into `dsh`, for dq and dk (the
// bias gradients read the FP32 dS).
template <typename T>
__global__ void ScoreGradientRowsKernel(const float* p, float* dp, const T* dout, const T* o,
                                        Rows d, T* dsh) {
  const int64_t row = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (row >= d.groups * d.rows) return;
  const int64_t g = d.g0 + row / d.rows, i = d.i0 + row % d.rows;
  const T* dor = dout + (g * d.queries + i) * d.values;
  const T* orow = o + (g * d.queries + i) * d.values;
  float dot = 0;
  for (int64_t c = lane; c < d.values; c += 32) dot += Wide(dor[c]) * Wide(orow[c]);
  dot = WarpSum(dot);
  const float* prow = p + row * d.keys;
  float* drow = dp + row * d.keys;
  for (int64_t j = lane; j < d.keys; j += 32) drow[j] = prow[j] * (drow[j] - dot);
  if constexpr (!std::is_same_v<T, float>) {
    T* h = dsh + row * d.keys;
    for (int64_t j = lane; j < d.keys; j += 32) h[j] = Narrow<T>(drow[j]);
  }
}

// dbias[c, i0 + r, j] += the sum, in group order, of dS[gl, r, j] over the
// chunk's groups g with (g / stride) % count == c, for the slices c the
// chunk reads: those of its runs of `stride` groups q_first .. q_first +
// `touched` - 1 (touched <= count, so each slice once). A thread per element.
__global__ void BiasGradientKernel(const float* ds, float* dbias, int64_t count, int64_t stride,
                                   int64_t touched, Rows d) {
  const int64_t plane = d.rows * d.keys;
  const int64_t e = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (e >= touched * plane) return;
  const int64_t end = d.g0 + d.groups;
  const int64_t q_first = d.g0 / stride;
  const int64_t c = (q_first + e / plane) % count, within = e % plane;
  // The groups of slice c: g = q * stride + u with q % count == c.
  int64_t q = q_first + ((c - q_first % count) % count + count) % count;
  float sum = 0;
  for (; q * stride < end; q += count) {
    const int64_t from = q * stride > d.g0 ? q * stride : d.g0;
    const int64_t to = q * stride + stride < end ? q * stride + stride : end;
    for (int64_t g = from; g < to; ++g) sum += ds[(g - d.g0) * plane + within];
  }
  float* out = dbias + (c * d.queries + d.i0) * d.keys + within;
  *out += sum;
}

// Adds dS (the chunk's block, FP32) to each bias's gradient.
cudaError_t AddBiasGradients(cudaStream_t stream, const float* ds, const AttentionBiases& biases,
                             const Rows& d) {
  for (int i = 0; i < biases.n; ++i) {
    const int64_t runs = (d.g0 + d.groups - 1) / biases.stride[i] - d.g0 / biases.stride[i] + 1;
    const int64_t touched = std::min(biases.count[i], runs);
    const int64_t elements = touched * d.rows * d.keys;
    BiasGradientKernel<<<static_cast<unsigned>((elements + kThreads - 1) / kThreads), kThreads, 0,
                         stream>>>(ds, biases.grad[i], biases.count[i], biases.stride[i], touched,
                                   d);
    const cudaError_t error = cudaGetLastError();
    if (error != cudaSuccess) return error;
  }
  return cudaSuccess;
}

int RowBlocks(const Rows& d) {
  return static_cast<int>((d.groups * d.rows + kRowsPerBlock - 1) / kRowsPerBlock);
}

// Row-major, batched over `batch` groups: C = op(A) op(B) + beta C, C
// [m, n]. cuBLAS is column-major, so it computes C^T = op(B)^T op(A)^T.
cublasStatus_t Gemm(cublasHandle_t h, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                    const float* a, int64_t lda, int64_t stride_a, const float* b, int64_t ldb,
                    int64_t stride_b, float beta, float* c, int64_t ldc, int64_t stride_c,
                    int64_t batch) {
  const float one = 1.0f;
  return cublasSgemmStridedBatched(
      h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(n),
      static_cast<int>(m), static_cast<int>(k), &one, b, static_cast<int>(ldb), stride_b, a,
      static_cast<int>(lda), stride_a, &beta, c, static_cast<int>(ldc), stride_c,
      static_cast<int>(batch));
}

// The same with A and B of `type` (half) and C of `c_type` (half or FP32),
// FP32 accumulation (tensor cores); offsets are the callers', in elements.
cublasStatus_t GemmEx(cublasHandle_t h, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                      const void* a, int64_t lda, int64_t stride_a, const void* b, int64_t ldb,
                      int64_t stride_b, cudaDataType_t type, float beta, void* c,
                      cudaDataType_t c_type, int64_t ldc, int64_t stride_c, int64_t batch) {
  const float one = 1.0f;
  return cublasGemmStridedBatchedEx(
      h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(n),
      static_cast<int>(m), static_cast<int>(k), &one, b, type, static_cast<int>(ldb), stride_b,
      a, type, static_cast<int>(lda), stride_a, &beta, c, c_type, static_cast<int>(ldc),
      stride_c, static_cast<int>(batch), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

// Element `i` of a half buffer.
const void* At(const void* base, int64_t i) { return static_cast<const __half*>(base) + i; }
void* At(void* base, int64_t i) { return static_cast<__half*>(base) + i; }

// `n` floats rounded into a half buffer of H (a chunk's dk or dv).
template <typename H>
cudaError_t NarrowInto(cudaStream_t stream, const float* in, void* out, int64_t n) {
  const int blocks = static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, 65536));
  NarrowKernel<<<blocks, kThreads, 0, stream>>>(in, static_cast<H*>(out), n);
  return cudaGetLastError();
}

// Where a command's scratch holds what, in floats from its start (each part
// 64 floats aligned): the scores, (backward) their gradient, (half) their
// half copy (P, then backward dS: the same [chunk, block, Lk] elements of H),
// (half backward) the chunk's FP32 sums of dk and dv.
struct Scratch {
  int64_t scores = 0, grads = 0, half = 0, dk = 0, dv = 0, end = 0;
};

int64_t Aligned(int64_t floats) { return (floats + 63) / 64 * 64; }

Scratch ScratchOf(const AttentionDims& s, const AttentionTiling& t, bool backward) {
  Scratch x;
  const int64_t n = Aligned(t.chunk * t.block * s.keys);
  const bool half = s.type != CUDA_R_32F;
  x.grads = n;
  x.half = x.grads + (backward ? n : 0);
  x.dk = x.half + (half ? Aligned((n + 1) / 2) : 0);
  x.dv = x.dk + (half && backward ? Aligned(t.chunk * s.keys * s.depth) : 0);
  x.end = x.dv + (half && backward ? Aligned(t.chunk * s.keys * s.values) : 0);
  return x;
}

// S = q_block k^T for the chunk's groups: [groups, rows, Lk] in `scores`.
cublasStatus_t Scores(cublasHandle_t h, const AttentionDims& s, const Rows& d, const float* q,
                      const float* k, float* scores) {
  const float* qb = q + (d.g0 * s.queries + d.i0) * s.depth;
  const float* kg = k + d.g0 * s.keys * s.depth;
  if (s.transpose_k)  // k [D, Lk]: S = q k
    return Gemm(h, false, false, d.rows, s.keys, s.depth, qb, s.depth, s.queries * s.depth, kg,
                s.keys, s.keys * s.depth, 0.0f, scores, s.keys, d.rows * s.keys, d.groups);
  return Gemm(h, false, true, d.rows, s.keys, s.depth, qb, s.depth, s.queries * s.depth, kg,
              s.depth, s.keys * s.depth, 0.0f, scores, s.keys, d.rows * s.keys, d.groups);
}

// The same for half q and k (FP32 scores).
cublasStatus_t HalfScores(cublasHandle_t h, const AttentionDims& s, const Rows& d, const void* q,
                          const void* k, float* scores) {
  const void* qb = At(q, (d.g0 * s.queries + d.i0) * s.depth);
  const void* kg = At(k, d.g0 * s.keys * s.depth);
  if (s.transpose_k)
    return GemmEx(h, false, false, d.rows, s.keys, s.depth, qb, s.depth, s.queries * s.depth, kg,
                  s.keys, s.keys * s.depth, s.type, 0.0f, scores, CUDA_R_32F, s.keys,
                  d.rows * s.keys, d.groups);
  return GemmEx(h, false, true, d.rows, s.keys, s.depth, qb, s.depth, s.queries * s.depth, kg,
                s.depth, s.keys * s.depth, s.type, 0.0f, scores, CUDA_R_32F, s.keys,
                d.rows * s.keys, d.groups);
}

AttentionStatus Failed(AttentionStatus status, const char* what) {
  status.what = what;
  return status;
}

// Why a command cannot run here, or nullptr.
const char* Refused(const AttentionDims& s) {
  for (int64_t v : {s.groups, s.queries, s.keys, s.depth, s.values})
    if (v <= 0 || v > INT_MAX) return "attention dimensions must be below 2^31";
  if (s.type != CUDA_R_32F && s.type != CUDA_R_16F && s.type != CUDA_R_16BF)
    return "attention takes F32, F16 or BF16";
  return nullptr;
}

}  // namespace

AttentionTiling TileAttention(const AttentionDims& s, int64_t scratch_floats, bool backward) {
  AttentionTiling t;
  if (s.type == CUDA_R_32F) {  // the scores alone fit (backward: twice that)
    const int64_t floats = std::max<int64_t>(scratch_floats, 1);
    const int64_t per_group = s.queries * s.keys;
    if (per_group <= floats) {
      t.block = s.queries;
      t.chunk = std::min(s.groups, floats / per_group);
    } else {
      t.chunk = 1;
      t.block = std::clamp<int64_t>(floats / std::max<int64_t>(s.keys, 1), 1, s.queries);
    }
    // cuBLAS counts a batch in an int.
    t.chunk = std::clamp<int64_t>(t.chunk, 1, INT_MAX);
    return t;
  }
  // Half: the whole scratch (ScratchOf's end) fits what an F32 command takes,
  // `scratch_floats` (backward: twice that). Capped so that no product below
  // overflows; a term that alone is over the budget leaves the least tiling.
  const int64_t floats =
      std::clamp<int64_t>(scratch_floats, 1, int64_t{1} << 40) * (backward ? 2 : 1);
  const auto end = [&](int64_t chunk, int64_t block) {
    return ScratchOf(s, AttentionTiling{chunk, block}, backward).end;
  };
  // The largest x in [1, hi] with end(x) <= floats (end grows with x), else 1.
  const auto largest = [&](int64_t hi, auto&& end_of) {
    int64_t lo = 1;
    while (lo < hi) {
      const int64_t mid = hi - (hi - lo) / 2;
      if (end_of(mid) <= floats)
        lo = mid;
      else
        hi = mid - 1;
    }
    return lo;
  };
  if (s.keys > floats || (backward && (s.keys * s.depth > floats || s.keys * s.values > floats)))
    return t;  // chunk 1, block 1
  if (s.queries * s.keys <= floats && end(1, s.queries) <= floats) {
    t.block = s.queries;
    int64_t hi = std::min<int64_t>({s.groups, floats / (s.queries * s.keys), INT_MAX});
    if (backward)
      hi = std::min({hi, floats / (s.keys * s.depth), floats / (s.keys * s.values)});
    t.chunk = largest(hi, [&](int64_t c) { return end(c, s.queries); });
  } else {
    t.block = largest(std::min(s.queries, floats / s.keys), [&](int64_t b) { return end(1, b); });
  }
  return t;
}

int64_t AttentionScratchFloats(const AttentionDims& s, const AttentionTiling& t,
                               bool backward) {
  return ScratchOf(s, t, backward).end;
}

namespace {

// Forward in half (H): P rounded to H by the softmax before it multiplies v,
// o = P_H v rounded to H once by cuBLAS (a block's products span all keys).
template <typename H>
AttentionStatus HalfForward(cublasHandle_t h, cudaStream_t stream, const AttentionDims& s,
                            const AttentionTiling& t, const void* q, const void* k,
                            const void* v, const AttentionBiases& biases, void* o, float* lse,
                            float* scratch) {
  AttentionStatus status;
  const Scratch x = ScratchOf(s, t, false);
  float* scores = scratch + x.scores;
  H* ph = reinterpret_cast<H*>(scratch + x.half);
  for (int64_t g0 = 0; g0 < s.groups; g0 += t.chunk)
    for (int64_t i0 = 0; i0 < s.queries; i0 += t.block) {
      Rows d{g0, std::min(t.chunk, s.groups - g0), i0, std::min(t.block, s.queries - i0),
             s.queries, s.keys, s.values};
      status.blas = HalfScores(h, s, d, q, k, scores);
      if (status.blas != CUBLAS_STATUS_SUCCESS) return Failed(status, "attention scores");
      SoftmaxRowsKernel<<<RowBlocks(d), kThreads, 0, stream>>>(scores, lse, d, biases, ph);
      status.cuda = cudaGetLastError();
      if (status.cuda != cudaSuccess) return Failed(status, "attention softmax");
      // o_block = P_H v, rounded to H by cuBLAS.
      status.blas = GemmEx(h, false, false, d.rows, s.values, s.keys, ph, s.keys,
                           d.rows * s.keys, At(v, g0 * s.keys * s.values), s.values,
                           s.keys * s.values, s.type, 0.0f,
                           At(o, (g0 * s.queries + i0) * s.values), s.type, s.values,
                           s.queries * s.values, d.groups);
      if (status.blas != CUBLAS_STATUS_SUCCESS) return Failed(status, "attention output");
    }
  return status;
}

// Backward in half (H): P and dS rounded to H by their row kernels before
// their products (one half buffer: dS_H overwrites P_H once dv has read it,
// in stream order), dq = dS_H k rounded once by cuBLAS, dk and dv summed in
// FP32 over the query blocks and rounded once at the chunk's last block.
template <typename H>
AttentionStatus HalfBackward(cublasHandle_t h, cudaStream_t stream, const AttentionDims& s,
                             const AttentionTiling& t, const void* q, const void* k,
                             const void* v, const void* o, const float* lse, const void* dout,
                             const AttentionBiases& biases, void* dq, void* dk, void* dv,
                             float* scratch) {
  AttentionStatus status;
  const Scratch x = ScratchOf(s, t, true);
  float* p = scratch + x.scores;
  float* dp = scratch + x.grads;
  H* ph = reinterpret_cast<H*>(scratch + x.half);  // P_H, then dS_H
  float* dk_sum = scratch + x.dk;
  float* dv_sum = scratch + x.dv;
  for (int64_t g0 = 0; g0 < s.groups; g0 += t.chunk)
    for (int64_t i0 = 0; i0 < s.queries; i0 += t.block) {
      Rows d{g0, std::min(t.chunk, s.groups - g0), i0, std::min(t.block, s.queries - i0),
             s.queries, s.keys, s.values};
      // The first block of a chunk writes the FP32 sums, the others add.
      const float beta = i0 == 0 ? 0.0f : 1.0f;
      const int64_t first = g0 * s.queries + i0;
      const void* qb = At(q, first * s.depth);
      const void* dob = At(dout, first * s.values);
      const void* kg = At(k, g0 * s.keys * s.depth);
      const void* vg = At(v, g0 * s.keys * s.values);
      // P = exp(s - lse), recomputed (FP32), and P_H.
      status.blas = HalfScores(h, s, d, q, k, p);
      if (status.blas != CUBLAS_STATUS_SUCCESS) return Failed(status, "attention scores");
      ProbabilityRowsKernel<<<RowBlocks(d), kThreads, 0, stream>>>(p, lse, d, biases, ph);
      status.cuda = cudaGetLastError();
      if (status.cuda != cudaSuccess) return Failed(status, "attention probabilities");
      // dv (+)= P_H^T do: [Lk, Dv], in FP32.
      status.blas = GemmEx(h, true, false, s.keys, s.values, d.rows, ph, s.keys,
                           d.rows * s.keys, dob, s.values, s.queries * s.values, s.type, beta,
                           dv_sum, CUDA_R_32F, s.values, s.keys * s.values, d.groups);
      if (status.blas != CUBLAS_STATUS_SUCCESS) return Failed(status, "attention dv");
      // dP = do v^T: [rows, Lk], FP32.
      status.blas = GemmEx(h, false, true, d.rows, s.keys, s.values, dob, s.values,
                           s.queries * s.values, vg, s.values, s.keys * s.values, s.type, 0.0f,
                           dp, CUDA_R_32F, s.keys, d.rows * s.keys, d.groups);
      if (status.blas != CUBLAS_STATUS_SUCCESS) return Failed(status, "attention dP");
      // dS (FP32, from the FP32 P) in dP's place, and dS_H over P_H.
      ScoreGradientRowsKernel<<<RowBlocks(d), kThreads, 0, stream>>>(
          p, dp, static_cast<const H*>(dout), static_cast<const H*>(o), d, ph);
      status.cuda = cudaGetLastError();
      if (status.cuda != cudaSuccess) return Failed(status, "attention dS");
      // Each bias's gradient is dS (FP32), summed over the groups that read it.
      status.cuda = AddBiasGradients(stream, dp, biases, d);
      if (status.cuda != cudaSuccess) return Failed(status, "attention bias gradient");
      void* dqb = At(dq, first * s.depth);
      if (s.transpose_k) {
        // dq = dS_H k^T (k stored [D, Lk]), rounded by cuBLAS; dk^T (+)= q^T dS_H.
        status.blas = GemmEx(h, false, true, d.rows, s.depth, s.keys, ph, s.keys,
                             d.rows * s.keys, kg, s.keys, s.keys * s.depth, s.type, 0.0f, dqb,
                             s.type, s.depth, s.queries * s.depth, d.groups);
        if (status.blas != CUBLAS_STATUS_SUCCESS) return Failed(status, "attention dq");
        status.blas = GemmEx(h, true, false, s.depth, s.keys, d.rows, qb, s.depth,
                             s.queries * s.depth, ph, s.keys, d.rows * s.keys, s.type, beta,
                             dk_sum, CUDA_R_32F, s.keys, s.keys * s.depth, d.groups);
      } else {
        // dq = dS_H k; dk (+)= dS_H^T q.
        status.blas = GemmEx(h, false, false, d.rows, s.depth, s.keys, ph, s.keys,
                             d.rows * s.keys, kg, s.depth, s.keys * s.depth, s.type, 0.0f, dqb,
                             s.type, s.depth, s.queries * s.depth, d.groups);
        if (status.blas != CUBLAS_STATUS_SUCCESS) return Failed(status, "attention dq");
        status.blas = GemmEx(h, true, false, s.keys, s.depth, d.rows, ph, s.keys,
                             d.rows * s.keys, qb, s.depth, s.queries * s.depth, s.type, beta,
                             dk_sum, CUDA_R_32F, s.depth, s.keys * s.depth, d.groups);
      }
      if (status.blas != CUBLAS_STATUS_SUCCESS) return Failed(status, "attention dk");
      if (i0 + d.rows < s.queries) continue;
      // The chunk's last block: its dk and dv, rounded once.
      status.cuda = NarrowInto<H>(stream, dk_sum, At(dk, g0 * s.keys * s.depth),
                                  d.groups * s.keys * s.depth);
      if (status.cuda == cudaSuccess)
        status.cuda = NarrowInto<H>(stream, dv_sum, At(dv, g0 * s.keys * s.values),
                                    d.groups * s.keys * s.values);
      if (status.cuda != cudaSuccess) return Failed(status, "attention dk and dv in half");
    }
  return status;
}

}  // namespace

AttentionStatus AttentionForward(cublasHandle_t h, cudaStream_t stream, const AttentionDims& s,
                                 const AttentionTiling& t, const void* q_in, const void* k_in,
                                 const void* v_in, const AttentionBiases& biases, void* o_out,
                                 float* lse, float* scratch) {
  AttentionStatus status;
  if (const char* why = Refused(s)) {
    status.blas = CUBLAS_STATUS_INVALID_VALUE;
    status.what = why;
    return status;
  }
  if (s.type == CUDA_R_16F)
    return HalfForward<__half>(h, stream, s, t, q_in, k_in, v_in, biases, o_out, lse, scratch);
  if (s.type == CUDA_R_16BF)
    return HalfForward<__nv_bfloat16>(h, stream, s, t, q_in, k_in, v_in, biases, o_out, lse,
                                      scratch);
  const float* q = static_cast<const float*>(q_in);
  const float* k = static_cast<const float*>(k_in);
  const float* v = static_cast<const float*>(v_in);
  float* o = static_cast<float*>(o_out);
  float* scores = scratch + ScratchOf(s, t, false).scores;
  for (int64_t g0 = 0; g0 < s.groups; g0 += t.chunk)
    for (int64_t i0 = 0; i0 < s.queries; i0 += t.block) {
      Rows d{g0, std::min(t.chunk, s.groups - g0), i0, std::min(t.block, s.queries - i0),
             s.queries, s.keys, s.values};
      status.blas = Scores(h, s, d, q, k, scores);
      if (status.blas != CUBLAS_STATUS_SUCCESS) return Failed(status, "attention scores");
      SoftmaxRowsKernel<<<RowBlocks(d), kThreads, 0, stream>>>(scores, lse, d, biases,
                                                               static_cast<float*>(nullptr));
      status.cuda = cudaGetLastError();
      if (status.cuda != cudaSuccess) return Failed(status, "attention softmax");
      // o_block = P v.
      status.blas = Gemm(h, false, false, d.rows, s.values, s.keys, scores, s.keys,
                         d.rows * s.keys, v + g0 * s.keys * s.values, s.values,
                         s.keys * s.values, 0.0f, o + (g0 * s.queries + i0) * s.values, s.values,
                         s.queries * s.values, d.groups);
      if (status.blas != CUBLAS_STATUS_SUCCESS) return Failed(status, "attention output");
    }
  return status;
}

AttentionStatus AttentionBackward(cublasHandle_t h, cudaStream_t stream, const AttentionDims& s,
                                  const AttentionTiling& t, const void* q_in, const void* k_in,
                                  const void* v_in, const void* o_in, const float* lse,
                                  const void* dout_in, const AttentionBiases& biases,
                                  void* dq_out, void* dk_out, void* dv_out, float* scratch) {
  AttentionStatus status;
  if (const char* why = Refused(s)) {
    status.blas = CUBLAS_STATUS_INVALID_VALUE;
    status.what = why;
    return status;
  }
  for (int i = 0; i < biases.n; ++i) {
    status.cuda = cudaMemsetAsync(biases.grad[i], 0,
                                  sizeof(float) * biases.count[i] * s.queries * s.keys, stream);
    if (status.cuda != cudaSuccess) return Failed(status, "attention bias gradient");
  }
  if (s.type == CUDA_R_16F)
    return HalfBackward<__half>(h, stream, s, t, q_in, k_in, v_in, o_in, lse, dout_in, biases,
                                dq_out, dk_out, dv_out, scratch);
  if (s.type == CUDA_R_16BF)
    return HalfBackward<__nv_bfloat16>(h, stream, s, t, q_in, k_in, v_in, o_in, lse, dout_in,
                                       biases, dq_out, dk_out, dv_out, scratch);
  const float* q = static_cast<const float*>(q_in);
  const float* k = static_cast<const float*>(k_in);
  const float* v = static_cast<const float*>(v_in);
  const float* o = static_cast<const float*>(o_in);
  const float* dout = static_cast<const float*>(dout_in);
  float* dq = static_cast<float*>(dq_out);
  float* dk = static_cast<float*>(dk_out);
  float* dv = static_cast<float*>(dv_out);
  const Scratch x = ScratchOf(s, t, true);
  float* p = scratch + x.scores;
  float* dp = scratch + x.grads;
  for (int64_t g0 = 0; g0 < s.groups; g0 += t.chunk)
    for (int64_t i0 = 0; i0 < s.queries; i0 += t.block) {
      Rows d{g0, std::min(t.chunk, s.groups - g0), i0, std::min(t.block, s.queries - i0),
             s.queries, s.keys, s.values};
      // The first block of a chunk writes dk and dv, the others add to them.
      const float beta = i0 == 0 ? 0.0f : 1.0f;
      const int64_t first = g0 * s.queries + i0;
      const float* qb = q + first * s.depth;
      const float* dob = dout + first * s.values;
      const float* kg = k + g0 * s.keys * s.depth;
      const float* vg = v + g0 * s.keys * s.values;
      // P = exp(s - lse), recomputed.
      status.blas = Scores(h, s, d, q, k, p);
      if (status.blas != CUBLAS_STATUS_SUCCESS) return Failed(status, "attention scores");
      ProbabilityRowsKernel<<<RowBlocks(d), kThreads, 0, stream>>>(p, lse, d, biases,
                                                                   static_cast<float*>(nullptr));
      status.cuda = cudaGetLastError();
      if (status.cuda != cudaSuccess) return Failed(status, "attention probabilities");
      // dv (+)= P^T do: [Lk, Dv].
      status.blas = Gemm(h, true, false, s.keys, s.values, d.rows, p, s.keys, d.rows * s.keys,
                         dob, s.values, s.queries * s.values, beta,
                         dv + g0 * s.keys * s.values, s.values, s.keys * s.values, d.groups);
      if (status.blas != CUBLAS_STATUS_SUCCESS) return Failed(status, "attention dv");
      // dP = do v^T: [rows, Lk].
      status.blas = Gemm(h, false, true, d.rows, s.keys, s.values, dob, s.values,
                         s.queries * s.values, vg, s.values, s.keys * s.values, 0.0f, dp, s.keys,
                         d.rows * s.keys, d.groups);
      if (status.blas != CUBLAS_STATUS_SUCCESS) return Failed(status, "attention dP");
      ScoreGradientRowsKernel<<<RowBlocks(d), kThreads, 0, stream>>>(p, dp, dout, o, d,
                                                                     static_cast<float*>(nullptr));
      status.cuda = cudaGetLastError();
      if (status.cuda != cudaSuccess) return Failed(status, "attention dS");
      // Each bias's gradient is dS (FP32), summed over the groups that read it.
      status.cuda = AddBiasGradients(stream, dp, biases, d);
      if (status.cuda != cudaSuccess) return Failed(status, "attention bias gradient");
      float* dqb = dq + first * s.depth;
      if (s.transpose_k) {
        // dq = dS k^T (k stored [D, Lk]); dk^T (+)= q^T dS: [D, Lk].
        status.blas = Gemm(h, false, true, d.rows, s.depth, s.keys, dp, s.keys, d.rows * s.keys,
                           kg, s.keys, s.keys * s.depth, 0.0f, dqb, s.depth,
                           s.queries * s.depth, d.groups);
        if (status.blas != CUBLAS_STATUS_SUCCESS) return Failed(status, "attention dq");
        status.blas = Gemm(h, true, false, s.depth, s.keys, d.rows, qb, s.depth,
                           s.queries * s.depth, dp, s.keys, d.rows * s.keys, beta,
                           dk + g0 * s.keys * s.depth, s.keys, s.keys * s.depth, d.groups);
      } else {
        // dq = dS k; dk (+)= dS^T q: [Lk, D].
        status.blas = Gemm(h, false, false, d.rows, s.depth, s.keys, dp, s.keys,
                           d.rows * s.keys, kg, s.depth, s.keys * s.depth, 0.0f, dqb, s.depth,
                           s.queries * s.depth, d.groups);
        if (status.blas != CUBLAS_STATUS_SUCCESS) return Failed(status, "attention dq");
        status.blas = Gemm(h, true, false, s.keys, s.depth, d.rows, dp, s.keys, d.rows * s.keys,
                           qb, s.depth, s.queries * s.depth, beta, dk + g0 * s.keys * s.depth,
                           s.depth, s.keys * s.depth, d.groups);
      }
      if (status.blas != CUBLAS_STATUS_SUCCESS) return Failed(status, "attention dk");
    }
  return status;
}

}  // namespace graphc::runtime::cuda
