// Human-readable summary of a verified plan, for `graphrun inspect`.

#ifndef GRAPHC_RUNTIME_CORE_PLAN_PRINTER_H_
#define GRAPHC_RUNTIME_CORE_PLAN_PRINTER_H_

#include <ostream>

#include "runtime/core/plan_loader.h"

namespace graphc::runtime {

struct PrintOptions {
  bool buffers = true;
  bool commands = true;
  bool kernels = true;
  bool states = true;
  // Every launch of every kernel binary: entry, grid, block, threads and the
  // bytes of the buffers it is passed.
  bool launches = false;
};

void PrintPlan(const Plan& plan, const PrintOptions& options, std::ostream& os);

// The ops a kernel computes, joined by `separator`, a run of one op written
// once with its count ("nn.sgd_momentum x51": an nn.multi_tensor).
std::string KernelOpsString(const fb::Kernel& kernel, const char* separator);

}  // namespace graphc::runtime

#endif  // GRAPHC_RUNTIME_CORE_PLAN_PRINTER_H_
