// `graphrun infer PLAN --inputs X.npy[,...] --outputs Y.npy[,...]`: runs the
// `infer` program of an inference-only plan (graphc compile --forward) once,
// on NumPy arrays in and out.
#ifndef GRAPHC_TOOLS_GRAPHRUN_INFER_COMMAND_H_
#define GRAPHC_TOOLS_GRAPHRUN_INFER_COMMAND_H_

#include <cstdint>
#include <string>

#include "CLI/CLI.hpp"

namespace graphc::runtime {

struct InferFlags {
  std::string plan, inputs, outputs, init, device = "auto", trusted_keys;
  uint64_t seed = 1;
  int64_t threads = 0;
  std::string kernel_cpu;
  bool tf32 = false;
};

// Adds the subcommand to `app`; its flags land in `flags`.
CLI::App* AddInferCommand(CLI::App& app, InferFlags& flags);

// Runs it: 0 with every output written, 1 with one error line otherwise.
int RunInferCommand(const InferFlags& flags);

}  // namespace graphc::runtime

#endif  // GRAPHC_TOOLS_GRAPHRUN_INFER_COMMAND_H_
