// The Chrome trace of a run's traced steps (graphrun --trace). The checks on
// every output and TracePathOf are part of the trainer's interface
// (trainer.h) and defined with it in outputs.cc.

#ifndef GRAPHC_RUNTIME_TRAIN_OUTPUTS_H_
#define GRAPHC_RUNTIME_TRAIN_OUTPUTS_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "nlohmann/json.hpp"
#include "runtime/core/executor.h"
#include "runtime/core/plan_loader.h"
#include "runtime/train/trainer.h"

namespace graphc::runtime {

// The Chrome trace event format (one complete event, "ph": "X", per span;
// process = rank, threads = tracks), which chrome://tracing and Perfetto
// read: the executor's spans, and `steps` (start, end, microseconds) from
// step `first_step` + 1 on.
nlohmann::json TraceJson(const Executor& exec, const Plan& plan, int rank, int ranks,
                         const std::vector<std::pair<double, double>>& steps,
                         int64_t first_step);

}  // namespace graphc::runtime

#endif  // GRAPHC_RUNTIME_TRAIN_OUTPUTS_H_
