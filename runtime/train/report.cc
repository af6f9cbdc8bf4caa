// Run statistics and the profile breakdown (see report.h).

#include "runtime/train/report.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <map>
#include <utility>

#include "runtime/core/plan_printer.h"

namespace graphc::runtime {

Speed SpeedOf(const std::vector<double>& rates) {
  Speed s;
  if (rates.empty()) return s;
  for (double r : rates) s.mean += r;
  s.mean /= rates.size();
  if (rates.size() > 1) {
    double var = 0;
    for (double r : rates) var += (r - s.mean) * (r - s.mean);
    s.error = std::sqrt(var / (rates.size() - 1)) / std::sqrt(double(rates.size()));
  }
  const double median = Median(rates);
  std::vector<double> deviations;
  for (double r : rates) deviations.push_back(std::fabs(r - median));
  s.jitter = 1.4826 * Median(deviations);
  return s;
}

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  const size_t half = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + half, values.end());
  const double upper = values[half];
  if (values.size() % 2 == 1) return upper;
  const double lower = *std::max_element(values.begin(), values.begin() + half);
  return (lower + upper) / 2;
}

double StepJitterMs(const std::vector<double>& ms) {
  if (ms.size() < 2) return 0;
  const double median = Median(ms);
  std::vector<double> deviations;
  for (double v : ms) deviations.push_back(std::fabs(v - median));
  return 1.4826 * Median(deviations);
}

double Percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = std::ceil(q * values.size());
  const size_t index = rank < 1 ? 0 : static_cast<size_t>(rank) - 1;
  return values[std::min(index, values.size() - 1)];
}

std::vector<double> StepTimes::Rates() const {
  std::vector<double> rates;
  for (double step_ms : ms) rates.push_back(step_ms > 0 ? batch * 1000.0 / step_ms : 0.0);
  return rates;
}

double StepTimes::TotalImagesPerSecond() const {
  double total = 0;
  for (double step_ms : ms) total += step_ms;
  return total > 0 ? batch * ms.size() * 1000.0 / total : 0.0;
}

nlohmann::json PrintProfile(const fb::Plan& root, const fb::Program& program,
                            const std::vector<double>& seconds, size_t steps, std::ostream& out) {
  struct Class {
    double ms = 0;
    int count = 0;
  };
  std::map<std::string, Class> classes;
  std::vector<std::pair<double, uint32_t>> kernels;  // (ms per step, command)
  double total = 0;
  for (uint32_t c = 0; c < program.commands()->size(); ++c) {
    const fb::Command& command = *program.commands()->Get(c);
    const double ms = seconds[c] * 1000.0 / steps;
    Class& k = classes[fb::EnumNameOpcode(command.op())];
    k.ms += ms;
    k.count += 1;
    total += ms;
    if (command.op() == fb::Opcode::Kernel) kernels.emplace_back(ms, c);
  }
  std::vector<std::pair<std::string, Class>> sorted(classes.begin(), classes.end());
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
  std::sort(kernels.rbegin(), kernels.rend());
  const std::ios::fmtflags flags = out.flags();
  out << "profile of " << PrintableOf(program.name()) << " over " << steps
      << " steps (each command timed alone):\n"
      << std::fixed << std::setprecision(2);
  nlohmann::json j = {{"ms_per_step", total}, {"steps", steps}};
  for (const auto& [name, k] : sorted) {
    out << "  " << std::left << std::setw(22) << name << std::right << std::setw(9) << k.ms
        << " ms " << std::setw(6) << 100.0 * k.ms / total << "%  x" << k.count << "\n";
    j["classes"][name] = {{"ms_per_step", k.ms}, {"commands", k.count}};
  }
  out << "  " << std::left << std::setw(22) << "total" << std::right << std::setw(9) << total
      << " ms\n"
      << "slowest kernels:\n";
  for (size_t i = 0; i < std::min<size_t>(kernels.size(), 10); ++i) {
    const fb::Command& command = *program.commands()->Get(kernels[i].second);
    const fb::Kernel& kernel = *root.kernels()->Get(command.kernel());
    std::string ops = KernelOpsString(kernel, ", ");
    out << "  " << std::setw(9) << kernels[i].first << " ms " << std::setw(6)
        << 100.0 * kernels[i].first / total << "%  " << PrintableOf(kernel.name()) << " [" << ops
        << "] " << PrintableOf(command.location()) << "\n";
    j["kernels"].push_back({{"kernel", StringOf(kernel.name())},
                            {"ops", ops},
                            {"location", StringOf(command.location())},
                            {"ms_per_step", kernels[i].first}});
  }
  out.flags(flags);
  return j;
}

}  // namespace graphc::runtime
