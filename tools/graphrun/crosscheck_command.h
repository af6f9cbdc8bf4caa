// `graphrun crosscheck PLAN`: one training step's commands on the CPU and
// each again on a device from the CPU's inputs (runtime/train/crosscheck.h),
// printed and optionally reported as JSON.
#ifndef GRAPHC_TOOLS_GRAPHRUN_CROSSCHECK_COMMAND_H_
#define GRAPHC_TOOLS_GRAPHRUN_CROSSCHECK_COMMAND_H_

#include <cstdint>
#include <string>

#include "CLI/CLI.hpp"

namespace graphc::runtime {

struct CrosscheckFlags {
  std::string plan, device = "cuda", report, trusted_keys;
  uint64_t seed = 1;
  double tolerance = 0;
  int64_t threads = 0, show = 20;
  bool all = false, tf32 = false, deterministic = false;
};

// Adds the subcommand to `app`; its flags land in `flags`.
CLI::App* AddCrosscheckCommand(CLI::App& app, CrosscheckFlags& flags);

// Runs it: 0 when every command agrees, 1 with one error line otherwise.
int RunCrosscheckCommand(const CrosscheckFlags& flags);

}  // namespace graphc::runtime

#endif  // GRAPHC_TOOLS_GRAPHRUN_CROSSCHECK_COMMAND_H_
