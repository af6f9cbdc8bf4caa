// What every backend shares (see backend.h).

#include "runtime/core/backend.h"

#include <algorithm>
#include <cctype>
#include <string>
#include <unordered_map>

namespace graphc::runtime {

std::string Backend::LibraryMath(fb::DType dtype) const {
  // Float types as users name them, the others as the plan does.
  std::string name = dtype == fb::DType::F32    ? "fp32"
                     : dtype == fb::DType::F16  ? "fp16"
                     : dtype == fb::DType::BF16 ? "bf16"
                                                : fb::EnumNameDType(dtype);
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return name + ": not supported";
}

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

const fb::KernelBinary* BinaryFor(const Plan& plan, fb::Target target) {
  const fb::KernelBinary* found = nullptr;
  if (plan.root().binaries() != nullptr)
    for (const fb::KernelBinary* binary : *plan.root().binaries())
      if (binary->target() == target) found = binary;
  return found;
}

StatusOr<std::vector<const fb::GpuKernel*>> LaunchListsOf(const Plan& plan,
                                                          const fb::KernelBinary& binary,
                                                          const std::string& what) {
  // The loader proved one launch list per symbol, with args in range.
  std::unordered_map<std::string, const fb::GpuKernel*> by_symbol;
  for (uint32_t i = 0; i < binary.symbols()->size(); ++i)
    by_symbol.emplace(binary.symbols()->Get(i)->str(), binary.launches()->Get(i));
  std::vector<const fb::GpuKernel*> lists;
  if (plan.root().kernels() == nullptr) return lists;
  for (const fb::Kernel* kernel : *plan.root().kernels()) {
    auto found = by_symbol.find(StringOf(kernel->name()));
    if (found == by_symbol.end())
      return Status(ErrorCode::kPlanMissingKernel,
                    "kernel '" + PrintableOf(kernel->name()) + "' is not in " + what);
    lists.push_back(found->second);
  }
  return lists;
}

}  // namespace graphc::runtime
