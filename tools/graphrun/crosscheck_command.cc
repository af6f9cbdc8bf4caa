#include "tools/graphrun/crosscheck_command.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <vector>

#include "contract/files.h"
#include "contract/printable.h"
#include "nlohmann/json.hpp"
#include "runtime/backends/backend_factory.h"
#include "runtime/core/plan_loader.h"
#include "runtime/train/crosscheck.h"
#include "tools/graphrun/load_plan.h"

namespace graphc::runtime {
namespace {

int Fail(const Status& status) {
  std::cerr << "graphrun: " << status.ToString() << "\n";
  return 1;
}

std::string Number(double value, const char* format = "%.3g") {
  char text[32];
  std::snprintf(text, sizeof(text), format, value);
  return text;
}

std::string Line(const CommandCheck& c) {
  std::string line = "  " + std::to_string(c.command) + "\t";
  if (c.stray_bytes > 0)
    line += "stray writes";
  else if (c.stale_inputs > 0)
    line += "stale input";
  else if (c.mismatches > 0)
    line += std::to_string(c.mismatches) + " mismatched";
  else
    line += Number(c.difference) + " (" + Number(c.difference / c.tolerance, "%.2f") + "x)";
  line += "\t" + c.what + (c.location.empty() ? "" : " at " + c.location) + "\t" + c.output;
  if (c.worst_element >= 0)
    line += "[" + std::to_string(c.worst_element) + "]: cpu " + Number(c.reference_value, "%.7g") +
            ", device " + Number(c.device_value, "%.7g");
  if (c.stray_bytes > 0) line += "; " + c.stray;
  if (c.stale_inputs > 0) line += "; input " + c.stale;
  return line;
}

nlohmann::ordered_json Json(const CommandCheck& c) {
  return {{"command", c.command},         {"what", c.what},
          {"location", c.location},       {"output", c.output},
          {"dtype", fb::EnumNameDType(c.dtype)},
          {"elements", c.elements},       {"difference", c.difference},
          {"tolerance", c.tolerance},     {"mismatches", c.mismatches},
          {"worst_element", c.worst_element},
          {"reference_value", c.reference_value},
          {"device_value", c.device_value},
          {"stray_bytes", c.stray_bytes},    {"stray", c.stray},
          {"stale_inputs", c.stale_inputs},  {"stale", c.stale},
          {"ok", c.ok()}};
}

}  // namespace

CLI::App* AddCrosscheckCommand(CLI::App& app, CrosscheckFlags& f) {
  CLI::App* c = app.add_subcommand(
      "crosscheck",
      "run one training step on the CPU and each of its commands again on a device from the "
      "CPU's inputs; print the commands whose outputs differ beyond their type's tolerance (an "
      "error never carries from one command to the next, so the first one listed is where the "
      "device computes differently)");
  c->add_option("plan", f.plan, "the plan file (graphc compile -o)")->required();
  c->add_option("--device", f.device, "the device checked against the CPU: cuda (default) or cpu")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  c->add_option("--seed", f.seed, "seed of the initial state and the synthetic batch (default 1)");
  c->add_option("--tolerance", f.tolerance,
                "worst |device - cpu| as a fraction of an output's largest |cpu| value, for "
                "every float output (default by type: fp32 1e-4, fp16 4e-3, bf16 3e-2)")
      ->check(CLI::Validator(
          [](std::string& value) -> std::string {
            char* end = nullptr;
            const double x = std::strtod(value.c_str(), &end);
            return end != value.c_str() && *end == '\0' && x > 0 && x <= 1e6
                       ? std::string()
                       : "must be a number above 0 and at most 1e6";
          },
          "X in (0, 1e6]"));
  c->add_flag("--all", f.all, "print every command, not only those over tolerance");
  c->add_option("--show", f.show, "print at most this many commands (default 20)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  c->add_option("--report", f.report, "write every command's figures as JSON to this file");
  c->add_option("--threads", f.threads, "the CPU's threads (default: every core)")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  c->add_flag("--tf32", f.tf32, "CUDA: allow TF32 for FP32 math (default: strict FP32)");
  c->add_flag("--deterministic", f.deterministic,
              "CUDA: deterministic convolution algorithms only");
  c->add_option("--trusted-keys", f.trusted_keys,
                "run only plans signed by one of these public keys");
  return c;
}

int RunCrosscheckCommand(const CrosscheckFlags& f) {
  if (!f.report.empty()) {
    Status replaceable = CheckReplaceable(f.report);
    if (!replaceable.ok()) return Fail(replaceable);
  }
  StatusOr<std::unique_ptr<Plan>> plan = LoadPlan(f.plan, f.trusted_keys);
  if (!plan.ok()) return Fail(plan.status());
  BackendOptions options;
  options.cpu_threads = static_cast<int>(f.threads);
  StatusOr<CreatedBackend> cpu = CreateBackend(DeviceKind::kCpu, options);
  if (!cpu.ok()) return Fail(cpu.status());
  options.tf32 = f.tf32;
  options.deterministic = f.deterministic;
  StatusOr<DeviceKind> kind = ParseDeviceKind(f.device);
  if (!kind.ok()) return Fail(kind.status());
  StatusOr<CreatedBackend> device = CreateBackend(*kind, options);
  if (!device.ok()) return Fail(device.status());
  std::cout << "crosscheck: " << cpu->backend->Describe() << " (reference) and "
            << device->backend->Describe() << ", seed " << f.seed << "\n";
  CrosscheckOptions how;
  how.seed = f.seed;
  how.tolerance = f.tolerance;
  StatusOr<CrosscheckResult> result = Crosscheck(**plan, *cpu->backend, *device->backend, how);
  if (!result.ok()) return Fail(result.status());
  const std::vector<CommandCheck>& commands = result->commands;
  std::vector<const CommandCheck*> failing;
  for (const CommandCheck& c : commands)
    if (!c.ok()) failing.push_back(&c);
  const std::vector<const CommandCheck*>* shown = &failing;
  std::vector<const CommandCheck*> every;
  if (f.all) {
    for (const CommandCheck& c : commands) every.push_back(&c);
    shown = &every;
  }
  if (!shown->empty())
    std::cout << "  command\tdifference (of tolerance)\twhat\tworst output[element]\n";
  for (size_t i = 0; i < shown->size() && static_cast<int64_t>(i) < f.show; ++i)
    std::cout << Line(*(*shown)[i]) << "\n";
  if (static_cast<int64_t>(shown->size()) > f.show)
    std::cout << "  ... " << shown->size() - f.show << " more\n";
  // The largest difference of the commands without mismatches or stray writes.
  const CommandCheck* largest = nullptr;
  for (const CommandCheck& c : commands)
    if (c.mismatches == 0 && c.stray_bytes == 0 && c.stale_inputs == 0 &&
        (largest == nullptr ||
         c.difference / c.tolerance > largest->difference / largest->tolerance))
      largest = &c;
  std::cout << commands.size() << " commands compared (" << result->collectives
            << " collectives skipped), " << failing.size() << " over tolerance";
  if (largest != nullptr)
    std::cout << "; largest difference " << Number(largest->difference) << " ("
              << Number(largest->difference / largest->tolerance, "%.3g")
              << " of its tolerance) at command " << largest->command << " " << largest->what;
  std::cout << "; loss cpu " << Number(result->reference_loss, "%.7g") << ", device "
            << Number(result->device_loss, "%.7g") << "\n";
  if (!f.report.empty()) {
    nlohmann::ordered_json j;
    j["plan"] = f.plan;
    j["reference"] = cpu->backend->Describe();
    j["device"] = device->backend->Describe();
    j["seed"] = f.seed;
    j["collectives_skipped"] = result->collectives;
    j["reference_loss"] = result->reference_loss;
    j["device_loss"] = result->device_loss;
    j["over_tolerance"] = failing.size();
    j["first_failure"] = result->first_failure();
    j["commands"] = nlohmann::ordered_json::array();
    for (const CommandCheck& c : commands) j["commands"].push_back(Json(c));
    Status written = WriteFileAtomically(f.report, j.dump(1) + "\n");
    if (!written.ok()) return Fail(written);
  }
  if (failing.empty()) return 0;
  const CommandCheck& first = *failing.front();
  return Fail(Status(ErrorCode::kMismatch,
                     std::string(device->backend->name()) + " differs from the CPU at " +
                         std::to_string(failing.size()) + " of " +
                         std::to_string(commands.size()) + " commands, first at command " +
                         std::to_string(first.command) + " " + first.what +
                         (first.location.empty() ? "" : " (" + first.location + ")") +
                         (first.stray_bytes > 0 ? ": " + first.stray : "") +
                         (first.stale_inputs > 0 ? ": input " + first.stale : "")));
}

}  // namespace graphc::runtime
