// The plan verifier's parts, private to runtime/core (plan_loader.h is the
// interface): what the verifier's files share. One file per family of rules:
//   plan_verifier.cc   buffers, regions, states, constants, kernels, and the
//                      order of the rest (CheckPlanSemantics)
//   command_checks.cc  each command: indices, arity, overlaps, shapes per op
//   binary_checks.cc   kernel binaries: launch tables, the x86-64 library, PTX
//   dataflow_checks.cc each program: every read initialized, collectives paired

#ifndef GRAPHC_RUNTIME_CORE_PLAN_CHECKS_H_
#define GRAPHC_RUNTIME_CORE_PLAN_CHECKS_H_

#include <cstdint>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "contract/status.h"
#include "runtime/core/plan_loader.h"

namespace graphc::runtime::verify {

inline Status Fail(ErrorCode code, const std::string& message) { return Status(code, message); }

template <typename T>
std::string Str(const T& value) {
  std::ostringstream os;
  os << value;
  return os.str();
}

// Whether two buffers share bytes, or are the same bytes.
inline bool Overlaps(const fb::Buffer& a, const fb::Buffer& b) {
  return a.region() == b.region() && a.offset() < b.offset() + b.size() &&
         b.offset() < a.offset() + a.size();
}
inline bool SameMemory(const fb::Buffer& a, const fb::Buffer& b) {
  return a.region() == b.region() && a.offset() == b.offset() && a.size() == b.size();
}

// "buffer 3 'name'" and "'kernel'", for messages.
std::string BufferName(const fb::Plan& plan, int32_t index);
std::string KernelName(const fb::Kernel& kernel);

// A union of byte ranges [begin, end): what a program has written so far, or
// what the state initializers cover.
class ByteRanges {
 public:
  void Add(uint64_t begin, uint64_t end) {
    if (begin >= end) return;
    // Merge with every range that overlaps or touches [begin, end).
    auto it = ranges_.upper_bound(begin);
    if (it != ranges_.begin() && std::prev(it)->second >= begin) --it;
    while (it != ranges_.end() && it->first <= end) {
      begin = std::min(begin, it->first);
      end = std::max(end, it->second);
      it = ranges_.erase(it);
    }
    ranges_.emplace(begin, end);
  }
  // Whether any byte of [begin, end) is in the union.
  bool Intersects(uint64_t begin, uint64_t end) const {
    auto it = ranges_.lower_bound(end);  // the first range starting at or after end
    if (it == ranges_.begin()) return false;
    --it;
    return it->second > begin;
  }
  bool Covers(uint64_t begin, uint64_t end) const {
    auto it = ranges_.upper_bound(begin);
    if (it == ranges_.begin()) return false;
    --it;
    return it->first <= begin && it->second >= end;
  }

 private:
  std::map<uint64_t, uint64_t> ranges_;  // begin -> end; disjoint, not touching
};

// Checks and numbers every command of a program; `where` prefixes messages.
class CommandChecker {
 public:
  CommandChecker(const fb::Plan& plan, const LoaderLimits& limits)
      : plan_(plan), limits_(limits) {}
  Status Check(const fb::Command& command, const std::string& where);
  // Counts `pairs` operand comparisons against the plan's budget.
  Status Spend(uint64_t pairs) {
    pairs_ += pairs;
    if (pairs_ > limits_.max_operand_pairs)
      return Fail(ErrorCode::kPlanBadValue,
                  "the plan's commands compare more than " + Str(limits_.max_operand_pairs) +
                      " operand pairs in all; no plan graphc writes comes near");
    return Status::Ok();
  }

 private:
  Status CheckIndices(const flatbuffers::Vector<int32_t>* indices,
                      const std::string& what, const std::string& where);
  Status CheckArity(size_t inputs, size_t min_inputs, size_t max_inputs,
                    size_t outputs, const std::string& where);
  Status CheckOverlap(const fb::Command& command, bool may_be_in_place,
                      const std::string& where);
  Status CheckShapes(const fb::Command& command, const std::string& where);
  const fb::Buffer& Buf(int32_t index) const { return *plan_.buffers()->Get(index); }
  int64_t Elements(int32_t index) const {
    int64_t count = 1;
    for (int64_t d : *Buf(index).shape()) count *= d;  // bounded by the buffer checks
    return count;
  }
  std::vector<int64_t> Shape(int32_t index) const {
    const fb::Buffer& b = Buf(index);
    return std::vector<int64_t>(b.shape()->begin(), b.shape()->end());
  }

  const fb::Plan& plan_;
  const LoaderLimits& limits_;
  uint64_t pairs_ = 0;
};

// FlatBuffers 2.0.8's Verifier checks a vector's 4-byte length field but not
// that 8-byte elements after it are 8-byte aligned; reading them would be
// undefined behaviour (the fuzzer found it), so every 8-byte vector is checked.
template <typename T>
bool Misaligned(const flatbuffers::Vector<T>* values) {
  return values != nullptr && values->size() != 0 &&
         reinterpret_cast<uintptr_t>(values->data()) % alignof(T) != 0;
}

// ---- plan_verifier.cc
uint64_t RegionSize(const fb::Plan& plan, fb::Region region);
Status CheckBuffers(const fb::Plan& plan, const LoaderLimits& limits);
Status CheckBufferRef(const fb::Plan& plan, int32_t index, fb::Region region,
                      const std::string& where);

// ---- binary_checks.cc
Status CheckLaunches(const fb::Plan& plan, const fb::KernelBinary& binary,
                     const std::string& where);
Status CheckCpuLibrary(const fb::Plan& plan, const fb::KernelBinary& binary,
                       const std::string& where);
Status CheckPtx(const fb::KernelBinary& binary, const std::string& where);

// ---- dataflow_checks.cc
Status CheckRegionInitialized(const fb::Plan& plan, fb::Region region, const ByteRanges& covered,
                              const char* what);
Status CheckProgramDataflow(const fb::Plan& plan, const fb::Program& program,
                            const std::string& name, CommandChecker& budget);
Status CheckCollectives(const fb::Plan& plan, const fb::Program& program,
                        const std::string& name, CommandChecker& budget);

}  // namespace graphc::runtime::verify

#endif  // GRAPHC_RUNTIME_CORE_PLAN_CHECKS_H_
