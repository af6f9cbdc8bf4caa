// What graphrun reports of a training run: tf_cnn_benchmarks' per-step
// statistics (images/sec mean, standard error, jitter; warmup excluded), step
// time percentiles, the --profile breakdown, and the --report JSON.

#ifndef GRAPHC_RUNTIME_TRAIN_REPORT_H_
#define GRAPHC_RUNTIME_TRAIN_REPORT_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "runtime/core/plan_loader.h"

namespace graphc::runtime {

// Statistics of per-step images/sec as tf_cnn_benchmarks computes them: the
// mean, its standard error (sample standard deviation / sqrt(n)), and the
// jitter, 1.4826 x the median absolute deviation from the median (a robust
// standard deviation). All 0 for no steps.
struct Speed {
  double mean = 0, error = 0, jitter = 0;
};
Speed SpeedOf(const std::vector<double>& rates);

// The median as NumPy takes it (the mean of the middle two of an even
// count); 0 for no values.
double Median(std::vector<double> values);

// A robust standard deviation of step times: 1.4826 x the median absolute
// deviation from the median (0 for fewer than 2 steps).
double StepJitterMs(const std::vector<double>& ms);

// The q-quantile (0 < q <= 1) by the nearest-rank method: the smallest value
// with at least q of the values at or below it; 0 for no values.
double Percentile(std::vector<double> values, double q);

// The timed steps of a run and what they add up to.
struct StepTimes {
  int64_t batch = 0;
  std::vector<double> ms;  // per timed step

  void Add(double step_ms) { ms.push_back(step_ms); }
  std::vector<double> Rates() const;  // images/sec per step
  // Images over the summed time of the timed steps (0 without any).
  double TotalImagesPerSecond() const;
  double MedianMs() const { return Median(ms); }
  double P90Ms() const { return Percentile(ms, 0.9); }
};

// Prints where a step's time goes, from per-command times summed over
// `steps` profiled steps: per command class, then the slowest generated
// kernels. Returns the same as JSON for --report.
nlohmann::json PrintProfile(const fb::Plan& root, const fb::Program& program,
                            const std::vector<double>& seconds, size_t steps, std::ostream& out);

}  // namespace graphc::runtime

#endif  // GRAPHC_RUNTIME_TRAIN_REPORT_H_
