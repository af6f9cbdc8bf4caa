// Loads a plan file and proves it safe to execute: the FlatBuffers Verifier
// (structure, with limits), then semantic checks (indices, buffer ranges,
// overflow, shapes per op, in-place declarations). After Load returns, the
// executor and the backends trust the plan and do no further checking.

#ifndef GRAPHC_RUNTIME_PLAN_PLAN_LOADER_H_
#define GRAPHC_RUNTIME_PLAN_PLAN_LOADER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/status.h"
#include "schema/plan_generated.h"

namespace graphc::runtime {

// The schema version this runtime reads; graphc's copy is in
// compiler/Export/PlanExport.h. Newer plans are refused.
inline constexpr uint32_t kPlanSchemaVersion = 2;
// Version 1 plans have no CPU launches; they are refused, not guessed at.
inline constexpr uint32_t kOldestPlanSchemaVersion = 2;

// A plan string, "" when absent (the schema makes every string optional).
inline std::string StringOf(const flatbuffers::String* s) { return s ? s->str() : std::string(); }

// A buffer's shape, empty when absent (a scalar).
inline std::vector<int64_t> ShapeOf(const fb::Buffer& b) {
  if (b.shape() == nullptr) return {};
  return std::vector<int64_t>(b.shape()->begin(), b.shape()->end());
}

struct LoaderLimits {
  uint64_t max_file_bytes = uint64_t{1} << 31;  // FlatBuffers' own maximum
  uint32_t max_depth = 64;
  uint32_t max_tables = 10'000'000;
  uint64_t max_region_bytes = uint64_t{1} << 40;  // 1 TiB
  uint32_t max_rank = 8;
};

class Plan {
 public:
  static StatusOr<std::unique_ptr<Plan>> FromFile(const std::string& path,
                                                  const LoaderLimits& limits = {});
  static StatusOr<std::unique_ptr<Plan>> FromBytes(std::vector<uint8_t> bytes,
                                                   const LoaderLimits& limits = {});

  const fb::Plan& root() const { return *root_; }
  size_t file_size() const { return bytes_.size(); }

  // Succeeds when a binary for `target` defines every kernel a command launches.
  Status CheckTarget(fb::Target target) const;

 private:
  explicit Plan(std::vector<uint8_t> bytes) : bytes_(std::move(bytes)) {}
  std::vector<uint8_t> bytes_;
  const fb::Plan* root_ = nullptr;
};

// The semantic half of loading, on an already verified buffer (exposed for tests).
Status CheckPlanSemantics(const fb::Plan& plan, const LoaderLimits& limits = {});

// Bytes per element of a dtype as plans store it (I1 takes one byte).
uint64_t DTypeBytes(fb::DType dtype);

}  // namespace graphc::runtime

#endif  // GRAPHC_RUNTIME_PLAN_PLAN_LOADER_H_
