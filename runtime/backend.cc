// What every backend shares (see backend.h).

#include "runtime/backend.h"

#include <string>

namespace graphc::runtime {

StatusOr<fb::Target> ChooseTarget(const Plan& plan, const std::vector<fb::Target>& targets) {
  const fb::Plan& root = plan.root();
  bool has_kernels = false;
  for (const fb::Program* program : *root.programs())
    for (const fb::Command* command : *program->commands())
      has_kernels = has_kernels || command->op() == fb::Opcode::Kernel;
  if (targets.empty()) return Status(ErrorCode::kInternal, "a backend with no target");
  if (!has_kernels) return targets.front();
  std::string present;
  for (fb::Target wanted : targets)
    if (root.binaries() != nullptr)
      for (const fb::KernelBinary* binary : *root.binaries())
        if (binary->target() == wanted) return wanted;
  if (root.binaries() != nullptr)
    for (const fb::KernelBinary* binary : *root.binaries())
      present += std::string(present.empty() ? "" : ", ") + fb::EnumNameTarget(binary->target());
  std::string wanted;
  for (fb::Target t : targets)
    wanted += std::string(wanted.empty() ? "" : " or ") + fb::EnumNameTarget(t);
  return Status(ErrorCode::kPlanMissingKernel,
                "the plan has no kernels for this device (" + wanted + "); it has " +
                    (present.empty() ? std::string("none") : present) +
                    " (compile with graphc --target=" +
                    (targets.front() == fb::Target::CpuX86_64 ? "cpu" : "cuda") + " or all)");
}

}  // namespace graphc::runtime
