// Plan loading: identifier, FlatBuffers Verifier, version, then the semantic
// checks. The classes of bad plan follow the CVEs of TFLite's loader
// (CVE-2020-15209/15210/15211, CVE-2023-27579): null or out-of-range indices,
// buffers outside their memory, offset arithmetic that overflows, shapes that
// make a kernel read past a buffer, an op writing a buffer it reads.

#include "runtime/core/plan_loader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <sstream>

#include "runtime/core/plan_checks.h"

namespace graphc::runtime {

using verify::Fail;
using verify::Str;

StatusOr<std::unique_ptr<Plan>> Plan::FromBytes(std::vector<uint8_t> bytes,
                                                const LoaderLimits& limits,
                                                const std::vector<PublicKey>& trusted) {
  // A FlatBuffer starts with a 4-byte root offset and the 4-byte identifier.
  if (bytes.size() < 8)
    return Fail(ErrorCode::kPlanTooSmall,
                "plan is " + Str(bytes.size()) + " bytes; a plan has at least 8");
  if (bytes.size() > limits.max_file_bytes)
    return Fail(ErrorCode::kPlanMalformed, "plan is larger than " +
                                               Str(limits.max_file_bytes) + " bytes");
  if (!fb::PlanBufferHasIdentifier(bytes.data()))
    return Fail(ErrorCode::kPlanWrongIdentifier,
                "not a graphc plan (file identifier is not \"GPLN\")");
  std::unique_ptr<Plan> plan(new Plan(std::move(bytes)));
  flatbuffers::Verifier verifier(plan->bytes_.data(), plan->bytes_.size(),
                                 limits.max_depth, limits.max_tables);
  if (!fb::VerifyPlanBuffer(verifier))
    return Fail(ErrorCode::kPlanMalformed,
                "FlatBuffers verification failed (truncated or corrupt plan)");
  plan->root_ = fb::GetPlan(plan->bytes_.data());
  const uint32_t version = plan->root_->version();
  if (version < kOldestPlanSchemaVersion || version > kPlanSchemaVersion)
    return Fail(ErrorCode::kPlanUnsupportedVersion,
                "plan schema version " + Str(version) + " (this runtime reads " +
                    (kOldestPlanSchemaVersion == kPlanSchemaVersion
                         ? "version " + Str(kPlanSchemaVersion)
                         : Str(kOldestPlanSchemaVersion) + " to " + Str(kPlanSchemaVersion)) +
                    "; recompile the model with this graphc)");
  GRAPHC_RETURN_IF_ERROR(CheckPlanIntegrity(plan->bytes_.data(), plan->bytes_.size()));
  if (!trusted.empty()) GRAPHC_RETURN_IF_ERROR(plan->CheckSignature(trusted));
  GRAPHC_RETURN_IF_ERROR(CheckPlanSemantics(*plan->root_, limits));
  return plan;
}

StatusOr<std::unique_ptr<Plan>> Plan::FromFile(const std::string& path,
                                               const LoaderLimits& limits,
                                               const std::vector<PublicKey>& trusted) {
  // Open first, then ask the open file what it is: a directory, a device
  // (/dev/zero) or a FIFO is refused before a byte is read, and a regular
  // file's size before it is read whole.
  const std::string shown = Printable(path);
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // a FIFO must not block
  if (fd < 0)
    return Fail(ErrorCode::kIo, "cannot open plan '" + shown + "' (" + std::strerror(errno) + ")");
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return Fail(ErrorCode::kIo, "plan '" + shown + "' is not a regular file" +
                                    (S_ISDIR(st.st_mode) ? " (it is a directory)" : ""));
  }
  if (static_cast<uint64_t>(st.st_size) > limits.max_file_bytes) {
    close(fd);
    return Fail(ErrorCode::kPlanMalformed, shown + ": plan is " + Str(st.st_size) +
                                               " bytes, more than the limit of " +
                                               Str(limits.max_file_bytes));
  }
  std::vector<uint8_t> bytes(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t got = read(fd, bytes.data() + done, bytes.size() - done);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    done += static_cast<size_t>(got);
  }
  close(fd);
  if (done != bytes.size())
    return Fail(ErrorCode::kIo, "cannot read plan '" + shown + "' (it changed while read)");
  StatusOr<std::unique_ptr<Plan>> plan = FromBytes(std::move(bytes), limits, trusted);
  if (!plan.ok())
    return Status(plan.status().code(), shown + ": " + plan.status().message());
  return plan;
}

Status Plan::CheckTarget(fb::Target target) const {
  const fb::KernelBinary* binary = nullptr;
  if (root_->binaries())
    for (const fb::KernelBinary* b : *root_->binaries())
      if (b->target() == target) binary = b;
  // The loader proved that a binary defines every kernel of the plan.
  for (const fb::Program* program : *root_->programs())
    for (const fb::Command* command : *program->commands())
      if (command->op() == fb::Opcode::Kernel && binary == nullptr)
        return Fail(ErrorCode::kPlanMissingKernel, std::string("the plan has no kernel binary "
                                                               "for target ") +
                                                       fb::EnumNameTarget(target));
  return Status::Ok();
}

}  // namespace graphc::runtime
