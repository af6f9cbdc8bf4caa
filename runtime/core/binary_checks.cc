// The plan's kernel binaries (plan_checks.h): each launch table against the
// kernels it runs, the x86-64 library's ELF structure and its own record of
// every launch (elf_check.h), and each PTX module's declared entries.

#include "runtime/core/plan_checks.h"

#include <set>
#include <unordered_map>

#include "contract/launch_record.h"
#include "runtime/core/elf_check.h"

namespace graphc::runtime::verify {

// A binary's launch table: one launch list per symbol; every launch a named
// entry with CUDA-legal grid and block sizes whose pointer parameters are
// buffers of the kernel it runs. The kernels' arities were checked before.
Status CheckLaunches(const fb::Plan& plan, const fb::KernelBinary& binary,
                     const std::string& where) {
  bool ptx = binary.format() == fb::BinaryFormat::Ptx;
  if (binary.launches() == nullptr || binary.launches()->size() != binary.symbols()->size())
    return Fail(ErrorCode::kPlanBadValue, where + ": needs one launch list per symbol");
  std::unordered_map<std::string, const fb::Kernel*> kernels;
  if (plan.kernels())
    for (const fb::Kernel* k : *plan.kernels()) kernels.emplace(k->name()->str(), k);
  std::set<std::string> seen;
  for (uint32_t i = 0; i < binary.symbols()->size(); ++i) {
    std::string symbol = StringOf(binary.symbols()->Get(i));
    std::string at = where + " kernel '" + Printable(symbol) + "'";
    auto kernel = kernels.find(symbol);
    if (kernel == kernels.end())
      return Fail(ErrorCode::kPlanBadValue, at + ": not a kernel of the plan");
    if (!seen.insert(symbol).second)
      return Fail(ErrorCode::kPlanBadValue, at + ": listed twice");
    const int64_t arity = int64_t{kernel->second->num_inputs()} + kernel->second->num_outputs();
    const fb::GpuKernel* gpu = binary.launches()->Get(i);
    if (gpu->launches() == nullptr || gpu->launches()->size() == 0)
      return Fail(ErrorCode::kPlanBadValue, at + ": has no launches");
    for (uint32_t l = 0; l < gpu->launches()->size(); ++l) {
      const fb::GpuLaunch* launch = gpu->launches()->Get(l);
      std::string on = at + " launch " + Str(l);
      if (launch->entry() == nullptr || launch->entry()->size() == 0 ||
          launch->grid() == nullptr || launch->grid()->size() != 3 ||
          launch->block() == nullptr || launch->block()->size() != 3 || launch->args() == nullptr)
        return Fail(ErrorCode::kPlanBadValue, on + ": needs an entry, a 3-D grid and block, args");
      // CUDA's limits (compute capability 8.0 and 9.0); on the CPU, iterations
      // of a 1-D loop.
      constexpr uint32_t kMaxGrid[3] = {0x7fffffffu, 65535, 65535};
      constexpr uint32_t kMaxBlock[3] = {1024, 1024, 64};
      if (!ptx && (launch->grid()->Get(1) != 1 || launch->grid()->Get(2) != 1 ||
                   launch->block()->Get(0) != 1 || launch->block()->Get(1) != 1 ||
                   launch->block()->Get(2) != 1))
        return Fail(ErrorCode::kPlanBadValue,
                    on + ": a CPU launch needs a 1-D grid and a 1x1x1 block");
      uint64_t threads = 1;
      for (int d = 0; d < 3; ++d) {
        uint32_t g = launch->grid()->Get(d), b = launch->block()->Get(d);
        if (g == 0 || g > kMaxGrid[d] || b == 0 || b > kMaxBlock[d])
          return Fail(ErrorCode::kPlanBadValue, on + ": grid or block size out of CUDA's range");
        threads *= b;
      }
      if (threads > 1024)
        return Fail(ErrorCode::kPlanBadValue, on + ": more than 1024 threads per block");
      if (launch->args()->size() > arity)
        return Fail(ErrorCode::kPlanBadIndex, on + ": passes more buffers than the kernel has");
      for (uint32_t arg : *launch->args())
        if (arg >= arity)
          return Fail(ErrorCode::kPlanBadIndex,
                      on + ": argument " + Str(arg) + " is not one of the kernel's " +
                          Str(arity) + " buffers");
    }
  }
  if (seen.size() != kernels.size())
    return Fail(ErrorCode::kPlanMissingKernel,
                where + ": defines " + Str(seen.size()) + " of the plan's " +
                    Str(kernels.size()) + " kernels");
  return Status::Ok();
}

// An x86-64 library: its ELF (elf_check.h), an entry for every launch, and
// the library's own record of each launch equal to the launch table's (the
// kernel, the launch's index, its iterations, its buffers and their sizes), so
// the table cannot send code another kernel's buffers, too few of them, or
// buffers of other sizes than it was compiled for.
Status CheckCpuLibrary(const fb::Plan& plan, const fb::KernelBinary& binary,
                       const std::string& where) {
  StatusOr<KernelLibrary> library =
      CheckKernelLibrary(binary.data()->data(), binary.data()->size());
  if (!library.ok())
    return Status(library.status().code(), where + ": " + library.status().message());
  std::unordered_map<std::string, const fb::Kernel*> kernels;
  if (plan.kernels())
    for (const fb::Kernel* k : *plan.kernels()) kernels.emplace(k->name()->str(), k);
  std::set<std::string> entries;
  for (uint32_t i = 0; i < binary.symbols()->size(); ++i) {
    const fb::Kernel& kernel = *kernels.at(StringOf(binary.symbols()->Get(i)));
    const auto& launches = *binary.launches()->Get(i)->launches();
    for (uint32_t l = 0; l < launches.size(); ++l) {
      const fb::GpuLaunch& launch = *launches.Get(l);
      const std::string entry = StringOf(launch.entry());
      const std::string on = where + " kernel " + KernelName(kernel) + " launch " + Str(l) +
                             " (entry '" + Printable(entry) + "')";
      if (!entries.insert(entry).second)
        return Fail(ErrorCode::kPlanUnsafeCode, on + ": the entry is launched twice");
      if (!library->entries.count(entry))
        return Fail(ErrorCode::kPlanMissingKernel,
                    on + ": the library has no function " + kKernelEntryPrefix + Printable(entry));
      auto recorded = library->signatures.find(entry);
      if (recorded == library->signatures.end())
        return Fail(ErrorCode::kPlanUnsafeCode,
                    on + ": the library has no record of this launch (" +
                        kKernelSignaturePrefix + Printable(entry) + ")");
      const std::string expected = LaunchSignature(kernel, l, launch);
      if (recorded->second != expected)
        return Fail(ErrorCode::kPlanUnsafeCode,
                    on + ": the launch table says \"" + Printable(expected) +
                        "\" but the code was compiled for \"" + Printable(recorded->second) +
                        "\"");
    }
  }
  return Status::Ok();
}

// A PTX binary: text without NUL (the CUDA driver takes a C string), and each
// launch's entry declared in it with one .u64 parameter per buffer the launch
// table passes (graphc's PTX takes bare pointers): a table passing fewer
// would have the driver read parameters nobody wrote.
Status CheckPtx(const fb::KernelBinary& binary, const std::string& where) {
  const std::string text(reinterpret_cast<const char*>(binary.data()->data()),
                         binary.data()->size());
  if (text.find('\0') != std::string::npos)
    return Fail(ErrorCode::kPlanBadValue, where + ": PTX text holds a NUL byte");
  // One pass over the text: every `.entry NAME(...)` with its parameters
  // (how many, how many of them .u64).
  struct Entry {
    size_t params = 0, pointers = 0;
  };
  std::unordered_map<std::string, Entry> entries;
  const char* space = " \t\r\n";
  for (size_t from = 0; (from = text.find(".entry", from)) != std::string::npos;) {
    from += 6;
    const size_t name = text.find_first_not_of(space, from);
    const size_t open = name == std::string::npos ? name : text.find_first_of(std::string(space) + "(", name);
    if (open == std::string::npos) break;
    const size_t paren = text.find_first_not_of(space, open);
    if (paren == std::string::npos || text[paren] != '(') continue;
    const size_t close = text.find(')', paren);
    if (close == std::string::npos)
      return Fail(ErrorCode::kPlanBadValue, where + ": an .entry's parameter list does not end");
    Entry entry;
    for (size_t p = paren; (p = text.find(".param", p)) != std::string::npos && p < close; p += 6) {
      ++entry.params;
      const size_t type = text.find_first_not_of(space, p + 6);
      entry.pointers += type != std::string::npos && text.compare(type, 4, ".u64") == 0;
    }
    entries[text.substr(name, open - name)] = entry;
    from = close;
  }
  for (uint32_t i = 0; i < binary.symbols()->size(); ++i) {
    const auto& launches = *binary.launches()->Get(i)->launches();
    for (uint32_t l = 0; l < launches.size(); ++l) {
      const fb::GpuLaunch& launch = *launches.Get(l);
      const std::string entry = StringOf(launch.entry());
      const std::string on = where + " launch '" + Printable(entry) + "'";
      auto found = entries.find(entry);
      if (found == entries.end())
        return Fail(ErrorCode::kPlanMissingKernel, on + ": no such .entry in the PTX");
      if (found->second.params != launch.args()->size() ||
          found->second.pointers != found->second.params)
        return Fail(ErrorCode::kPlanUnsafeCode,
                    on + ": the launch table passes " + Str(launch.args()->size()) +
                        " buffers, the entry takes " + Str(found->second.params) +
                        " parameters (" + Str(found->second.pointers) + " of them pointers)");
    }
  }
  return Status::Ok();
}

}  // namespace graphc::runtime::verify
