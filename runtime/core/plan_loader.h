// Loads a plan file and verifies all of it before anything runs: the
// FlatBuffers Verifier (structure, with limits), the version, the SHA-256 of
// the file and of each kernel binary (plan_integrity.h), then semantic checks:
// indices, buffer ranges, byte sizes without overflow, shapes per op, in-place
// declarations, every program reading only memory that its inputs or earlier
// commands wrote (or state and constants, each with an initializer), program
// inputs and outputs apart, and the x86-64 kernel library's ELF structure and
// its record of every launch against the launch table (elf_check.h). After
// FromBytes returns, the executor and the backends trust the plan's structure
// and do no further checking.
//
// What this does not do: make a plan's code safe to run. A plan carries native
// code (the x86-64 kernels, the PTX); loading a verified plan runs none of it,
// but training with it runs it with the user's rights, as running any program
// does. Run plans you compiled, or plans signed by a key you trust
// (CheckSignature, graphrun --trusted-keys). `graphrun inspect PLAN` verifies
// and prints without loading the code; `--load-kernels=cpu` also hands the
// checked library to the dynamic loader (which runs none of its code) and
// resolves every entry.

#ifndef GRAPHC_RUNTIME_CORE_PLAN_LOADER_H_
#define GRAPHC_RUNTIME_CORE_PLAN_LOADER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "contract/plan_integrity.h"
#include "contract/printable.h"
#include "contract/status.h"
#include "contract/schema/plan_generated.h"
#include "contract/schema_version.h"

namespace graphc::runtime {


// Collective commands are run by the executor's communicator, never by a
// backend.
inline bool IsCollective(fb::Opcode op) {
  return op == fb::Opcode::AllreduceStart || op == fb::Opcode::AllreduceWait;
}

// Fused attention, forward or backward (schema version 7).
inline bool IsAttention(fb::Opcode op) {
  return op == fb::Opcode::Attention || op == fb::Opcode::AttentionBackward;
}

// The most biases one attention command adds to its scores.
inline constexpr uint32_t kMaxAttentionBiases = 4;

// A plan string, "" when absent (the schema makes every string optional).
inline std::string StringOf(const flatbuffers::String* s) { return s ? s->str() : std::string(); }

inline std::string PrintableOf(const flatbuffers::String* s) { return Printable(StringOf(s)); }

// A buffer's shape, empty when absent (a scalar).
inline std::vector<int64_t> ShapeOf(const fb::Buffer& b) {
  if (b.shape() == nullptr) return {};
  return std::vector<int64_t>(b.shape()->begin(), b.shape()->end());
}

// A shape as "[2, 3]", for messages.
inline std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// The alignment every buffer's offset has in a version 6 plan (the CUDA
// kernels take their arguments as 16-byte aligned).
inline constexpr uint64_t kBufferAlignment = 16;

struct LoaderLimits {
  uint64_t max_file_bytes = uint64_t{1} << 31;  // FlatBuffers' own maximum
  uint32_t max_depth = 64;
  uint32_t max_tables = 10'000'000;
  uint64_t max_region_bytes = uint64_t{1} << 40;  // 1 TiB
  uint32_t max_rank = 8;
  // Buffers one command, kernel, launch or program's input or output list
  // may name (a multi-tensor kernel has a few hundred): the loader's checks
  // compare operands pairwise, so this bounds their time on a crafted plan.
  uint32_t max_operands = 4096;
  // Operand pairs the checks may compare over the whole plan (each command's
  // outputs against its inputs and each other, and against its program's
  // outputs): real plans need thousands; a crafted one cannot make loading
  // take hours.
  uint64_t max_operand_pairs = uint64_t{1} << 28;
};

class Plan {
 public:
  // With `trusted` keys, the plan must be signed by one of them: checked
  // right after its digests, before anything else of it is read.
  static StatusOr<std::unique_ptr<Plan>> FromFile(const std::string& path,
                                                  const LoaderLimits& limits = {},
                                                  const std::vector<PublicKey>& trusted = {});
  static StatusOr<std::unique_ptr<Plan>> FromBytes(std::vector<uint8_t> bytes,
                                                   const LoaderLimits& limits = {},
                                                   const std::vector<PublicKey>& trusted = {});

  const fb::Plan& root() const { return *root_; }
  size_t file_size() const { return bytes_.size(); }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

  // Succeeds when the plan is signed by one of `trusted` (plan_integrity.h).
  Status CheckSignature(const std::vector<PublicKey>& trusted) const {
    return CheckPlanSignature(bytes_.data(), bytes_.size(), trusted);
  }

  // Succeeds when a binary for `target` defines every kernel a command launches.
  Status CheckTarget(fb::Target target) const;

 private:
  explicit Plan(std::vector<uint8_t> bytes) : bytes_(std::move(bytes)) {}
  std::vector<uint8_t> bytes_;
  const fb::Plan* root_ = nullptr;
};

// The semantic half of loading, on a buffer the FlatBuffers Verifier accepted,
// whatever its version or digest (exposed for tests and the fuzzer).
Status CheckPlanSemantics(const fb::Plan& plan, const LoaderLimits& limits = {});

// The record an x86-64 kernel library must hold for launch `index` of
// `kernel` per the launch table (launch_record.h).
std::string LaunchSignature(const fb::Kernel& kernel, uint32_t index,
                            const fb::GpuLaunch& launch);

// Bytes per element of a dtype as plans store it (I1 takes one byte).
uint64_t DTypeBytes(fb::DType dtype);

}  // namespace graphc::runtime

#endif  // GRAPHC_RUNTIME_CORE_PLAN_LOADER_H_
