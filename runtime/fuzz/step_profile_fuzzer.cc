// libFuzzer target for `graphrun PLAN --predict N --step-profile REPORT.json`:
// the report is user input read beside a loaded plan, so any byte string must
// either be refused with a Status or be read and predicted from, on every
// path the simulator has (ring and Rabenseifner, nodes of several ranks,
// shares below one, a bucket sweep), in bounded time: no crash, no sanitizer report, no hang
// (libFuzzer's -timeout). The plan is GRAPHC_FUZZ_PLAN, loaded once;
// runtime/fuzz/run-fuzz.sh builds and runs this after the plan loader's
// fuzzer, seeded with real reports of that plan.

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>

#include "runtime/core/plan_loader.h"
#include "runtime/fuzz/fuzz_input.h"
#include "runtime/train/scaling_model.h"

namespace {

std::unique_ptr<graphc::runtime::Plan> g_plan;
const graphc::fb::Program* g_step = nullptr;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* path = std::getenv("GRAPHC_FUZZ_PLAN");
  if (path == nullptr) {
    std::fprintf(stderr, "step_profile_fuzzer: set GRAPHC_FUZZ_PLAN to a training plan\n");
    std::abort();
  }
  auto plan = graphc::runtime::Plan::FromFile(path);
  if (!plan.ok()) {
    std::fprintf(stderr, "step_profile_fuzzer: %s\n", plan.status().ToString().c_str());
    std::abort();
  }
  g_plan = std::move(*plan);
  for (const graphc::fb::Program* program : *g_plan->root().programs())
    if (graphc::runtime::StringOf(program->name()) == "train_step") g_step = program;
  if (g_step == nullptr) std::abort();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace graphc;
  using namespace graphc::runtime;
  const std::string path =
      graphc::fuzz::WriteInput("graphc-step-profile-fuzz", data, size, ".json");
  StatusOr<MeasuredStep> measured = ReadStepProfile(path, g_plan->root(), *g_step);
  if (!measured.ok()) return 0;
  // What a user could ask of any profile that reads: small and large jobs,
  // both algorithms, nodes of several ranks, a slow and shared link.
  for (const char* algorithm : {"ring", "rabenseifner"}) {
    PredictOptions options;
    options.ranks = {1, 2, 3, 8, 256};
    options.ranks_per_node = size % 2 == 0 ? 1 : 4;
    options.link = "1gbit,50us";
    options.algorithm = algorithm;
    options.busy_share = 0.6;
    options.compute_share = 0.5;
    // And the plan's gradients re-cut at two caps (--bucket-sweep).
    if (std::string(algorithm) == "rabenseifner") options.bucket_sweep_mb = {0.5, 25};
    std::ostringstream sink;
    (void)PredictScaling(g_plan->root(), *g_step, *measured, options, sink);
  }
  return 0;
}
