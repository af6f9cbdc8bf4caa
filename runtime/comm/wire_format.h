// The communicator's arithmetic on the wire formats: conversions between F32
// and the two half types (round to nearest even, as the CUDA and oneDNN
// backends round), the element-wise half-type sums that MPI lacks (it has no
// half datatypes, so the MPI communicator registers these as its own MPI_Ops),
// and the argument checks that the MPI and the single-rank communicators share,
// so that a bad call fails the same way in a one-process test as under mpirun.
// Private to runtime/comm.

#ifndef GRAPHC_RUNTIME_COMM_WIRE_FORMAT_H_
#define GRAPHC_RUNTIME_COMM_WIRE_FORMAT_H_

#include <cstdint>
#include <cstring>
#include <vector>

#include "runtime/comm/communicator.h"
#include "contract/half_float.h"
#include "contract/status.h"

namespace graphc::runtime::comm {

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// The scalar conversions are the runtime's one set (runtime/half_float.h),
// which the F16C loops agree with bit for bit.
inline uint16_t FloatToHalf(float f) { return F32ToF16Bits(FloatBits(f)); }
inline float HalfToFloat(uint16_t h) { return BitsFloat(F16ToF32Bits(h)); }
inline uint16_t FloatToBf16(float f) { return F32ToBf16Bits(FloatBits(f)); }
inline float Bf16ToFloat(uint16_t b) { return BitsFloat(Bf16ToF32Bits(b)); }

// dst[i] = round(src[i] * scale) to the half type (scale 1 for a plain copy).
void FloatsToHalves(const float* src, uint16_t* dst, uint64_t n, float scale);
void FloatsToBf16s(const float* src, uint16_t* dst, uint64_t n, float scale);
// dst[i] = src[i] * scale (exact for scale 1; one rounding otherwise).
void HalvesToFloats(const uint16_t* src, float* dst, uint64_t n, float scale);
void Bf16sToFloats(const uint16_t* src, float* dst, uint64_t n, float scale);
// In place: x[i] = round(x[i] * scale) in the half type.
void ScaleHalves(uint16_t* x, uint64_t n, float scale);
void ScaleBf16s(uint16_t* x, uint64_t n, float scale);
// inout[i] = round(float(in[i]) + float(inout[i])): the MPI_Op bodies.
void AddHalves(const uint16_t* in, uint16_t* inout, uint64_t n);
void AddBf16s(const uint16_t* in, uint16_t* inout, uint64_t n);

// Bytes per element of a dtype (I1: one byte), 0 for a value outside the enum.
uint64_t CommDTypeBytes(fb::DType dtype);
const char* CommDTypeName(fb::DType dtype);

// The dtype a tensor travels in: F32 tensors in `wire` when it is F16 or
// BF16, every other tensor in its own dtype.
inline fb::DType WireDType(fb::DType tensor, fb::DType wire) {
  if (tensor == fb::DType::F32 && (wire == fb::DType::F16 || wire == fb::DType::BF16)) return wire;
  return tensor;
}

// kInvalidArgument for a bad wire type, dtype, null data, a byte count that
// overflows, or a mean of integers; names `what` and the tensor's index.
Status CheckAllreduce(const std::string& what, const std::vector<CommTensor>& tensors,
                      Reduction reduction, fb::DType wire);

// A sparse allreduce's tensors (Communicator::StartSparseAllreduce): threes
// of values F32 [k], indices I32 [k], dense F32 [n] with k <= n < 2^31.
// Checks the arguments and this rank's indices; `counts` gets each set's
// count of entries (those before the first negative index).
Status CheckSparse(const std::string& what, const std::vector<CommTensor>& tensors,
                   std::vector<uint32_t>& counts);

// One rank's sets, packed for the wire: per set, its count of (value bits,
// index) pairs, the sets one after another.
void PackSparse(const std::vector<CommTensor>& tensors, const std::vector<uint32_t>& counts,
                uint32_t* pairs);

// Adds `count` packed pairs, each value times `scale`, into the dense tensor
// of `elements` floats; an index outside [0, elements) returns it (and adds
// nothing from there on), else -1.
int64_t AddSparse(const uint32_t* pairs, uint64_t count, float* dense, uint64_t elements,
                  float scale);

}  // namespace graphc::runtime::comm

#endif  // GRAPHC_RUNTIME_COMM_WIRE_FORMAT_H_
