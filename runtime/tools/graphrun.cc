// graphrun: trains with a plan. `graphrun PLAN [options]` runs train_step on
// synthetic or real data and reports throughput the way tf_cnn_benchmarks does;
// `graphrun inspect PLAN` verifies the plan fully, then prints what it holds.
// Every error is one line on stderr and exit code 1.

#include <cerrno>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "runtime/backend_factory.h"
#include "runtime/data/dataset.h"
#include "runtime/plan/plan_loader.h"
#include "runtime/plan/plan_printer.h"
#include "runtime/train/trainer.h"

namespace {

using namespace graphc::runtime;
namespace fb = graphc::fb;

int Fail(const Status& status) {
  std::cerr << "graphrun: " << status.ToString() << "\n";
  return 1;
}

constexpr int64_t kMaxThreads = 4096;

// Succeeds when `plan` is signed by one of the public keys in the
// comma-separated list of files.
Status CheckTrusted(const Plan& plan, const std::string& key_files) {
  std::vector<PublicKey> keys;
  std::stringstream list(key_files);
  for (std::string path; std::getline(list, path, ',');) {
    if (path.empty()) continue;
    StatusOr<PublicKey> key = ReadPublicKey(path);
    if (!key.ok()) return key.status();
    keys.push_back(*key);
  }
  if (keys.empty())
    return Status(ErrorCode::kInvalidArgument, "--trusted-keys names no key file");
  return plan.CheckSignature(keys);
}

struct DeviceOptions {
  std::string device = "auto";
  int64_t threads = 0;
  bool tf32 = false;
};

StatusOr<CreatedBackend> MakeBackend(const DeviceOptions& d) {
  StatusOr<DeviceKind> kind = ParseDeviceKind(d.device);
  if (!kind.ok()) return kind.status();
  BackendOptions options;
  options.cpu_threads = static_cast<int>(d.threads);
  options.tf32 = d.tf32;
  return CreateBackend(*kind, options);
}

int RunTraining(TrainOptions& o, const DeviceOptions& d) {
  StatusOr<std::unique_ptr<Plan>> loaded = Plan::FromFile(o.plan_path);
  if (!loaded.ok()) return Fail(loaded.status());
  const Plan& plan = **loaded;
  if (!o.trusted_keys.empty()) {
    Status signed_by = CheckTrusted(plan, o.trusted_keys);
    if (!signed_by.ok()) return Fail(signed_by);
  }
  // Outputs are checked before the device starts (which may take seconds).
  Status status = CheckOutputs(o);
  if (!status.ok()) return Fail(status);
  StatusOr<CreatedBackend> created = MakeBackend(d);
  if (!created.ok()) return Fail(created.status());
  Backend& backend = *created->backend;
  std::cout << "device: " << backend.Describe()
            << (created->reason.empty() ? "" : " (" + created->reason + ")") << "\n";
  if (d.tf32 && backend.name() == std::string("cpu"))
    std::cout << "note: --tf32 has no effect on the CPU (its FP32 math is strict)\n";
  o.report_extra["device_choice"] = d.device;
  if (!created->reason.empty()) o.report_extra["device_reason"] = created->reason;
  o.report_extra["math"] = backend.name() == std::string("cuda") && d.tf32 ? "tf32" : "fp32";
  // A mixed-precision plan: how this device runs its half convolutions and
  // gemms (natively, or emulated through fp32, and why).
  const std::string precision = StringOf(plan.root().precision());
  if (precision == "fp16" || precision == "bf16") {
    const std::string math =
        backend.LibraryMath(precision == "fp16" ? fb::DType::F16 : fb::DType::BF16);
    std::cout << "library math: " << math << "\n";
    o.report_extra["library_math"] = math;
  }
  o.report_extra["sync_debug"] = o.sync_debug;
  status = graphc::runtime::Train(plan, backend, o, std::cout);
  if (!status.ok()) return Fail(status);
  return 0;
}

}  // namespace

// An integer option in [lowest, highest], or a one-line error that says so: a
// value out of range is refused, never wrapped, clamped or reinterpreted
// (--threads 2147483648 once became a negative count, --seed -1 a huge one).
CLI::Validator InRange(int64_t lowest, int64_t highest) {
  return CLI::Validator(
      [lowest, highest](std::string& value) -> std::string {
        bool digits = !value.empty() &&
                      value.find_first_not_of("0123456789", value[0] == '-' ? 1 : 0) ==
                          std::string::npos &&
                      value != "-";
        if (digits) {
          errno = 0;
          char* end = nullptr;
          long long v = std::strtoll(value.c_str(), &end, 10);
          if (errno == 0 && *end == '\0' && v >= lowest && v <= highest) return "";
        }
        return "must be an integer in [" + std::to_string(lowest) + ", " +
               std::to_string(highest) + "], got '" + Printable(value) + "'";
      },
      "N in [" + std::to_string(lowest) + ", " + std::to_string(highest) + "]");
}

// Runs `body`; whatever escapes it (a bug, or memory running out) is one line
// and exit code 1, never an abort.
template <typename Body>
int Guarded(Body body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    std::cerr << "graphrun: error[internal]: out of memory\n";
  } catch (const std::exception& e) {
    std::cerr << "graphrun: error[internal]: " << Printable(e.what()) << "\n";
  } catch (...) {
    std::cerr << "graphrun: error[internal]: an unknown exception\n";
  }
  return 1;
}

int Main(int argc, char** argv);

int main(int argc, char** argv) {
  return Guarded([&] { return Main(argc, argv); });
}

int Main(int argc, char** argv) {
  CLI::App app("graphrun: run graphc training plans");
  app.require_subcommand(0, 1);
  TrainOptions train;
  DeviceOptions device_options;
  app.add_option("plan", train.plan_path, "the plan file (graphc compile -o)");
  app.add_option("--device", device_options.device,
                 "auto (CUDA when a GPU is usable, else the CPU; says why), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app.add_flag("--tf32", device_options.tf32,
               "CUDA: let cuBLAS and cuDNN use TF32 tensor cores for FP32 math (default: "
               "strict FP32); the report says which");
  bool no_graphs = false;
  app.add_flag("--no-cuda-graphs", no_graphs,
               "CUDA: launch train_step's commands one by one every step instead of replaying "
               "them as a CUDA Graph (to compare)");
  app.add_flag("--sync-debug", train.sync_debug,
               "wait for the device after every command, so that an asynchronous failure is "
               "reported against the command that caused it (slow)");
  app.add_option("--steps", train.steps,
                 "training steps (default 100; --epochs overrides; 0 with --save writes the "
                 "initial state)")
      ->check(InRange(0, kMaxSteps));
  app.add_option("--warmup", train.warmup, "steps left out of the timing (default 10)")
      ->check(InRange(0, kMaxSteps));
  app.add_option("--epochs", train.epochs, "train for E passes over the data")
      ->check(InRange(1, kMaxSteps));
  app.add_option("--data", train.data,
                 "synthetic (default), fashion-mnist[:DIR] (default DIR " +
                     std::string(kFashionMnistDir) +
                     ") or npy:IMAGES.npy,LABELS.npy[,TEST_IMAGES.npy,TEST_LABELS.npy] "
                     "(float32 or uint8 NCHW images, int32 or int64 labels)");
  app.add_flag("--eval", train.eval, "evaluate test accuracy after training");
  app.add_flag("--flip", train.flip,
               "augment: flip each training image left-right with probability 1/2 (seeded)");
  app.add_flag("--profile", train.profile,
               "time every command of the timed steps and print where a step's time goes "
               "(synchronizes after each command)");
  app.add_option("--threads", device_options.threads,
                 "CPU threads for generated kernels and oneDNN (default: every core)")
      ->check(InRange(1, kMaxThreads));
  CLI::Option* save_option =
      app.add_option("--save", train.save,
                     "write the parameters and state to this safetensors file after the run "
                     "(atomically)");
  app.add_option("--save-every", train.save_every, "also save every K steps (needs --save)")
      ->check(InRange(1, kMaxSteps))
      ->needs(save_option);
  app.add_option("--resume", train.resume,
                 "start from this safetensors checkpoint (its step counter positions the data "
                 "and the schedules; --steps/--epochs count from there)");
  app.add_option("--seed", train.seed, "seed of the initial parameters and data order")
      ->check(InRange(0, std::numeric_limits<int64_t>::max()));
  app.add_option(
      "--trusted-keys", train.trusted_keys,
      "run only plans signed by one of these public keys (comma-separated files written by "
      "graphc keygen)");
  app.add_option("--report", train.report, "write the run's figures as JSON to this file");
  app.add_option("--display-every", train.display_every,
                 "print images/sec and the loss every K steps (default 10)")
      ->check(InRange(1, kMaxSteps));
  std::string plan_path;
  std::string device = "none";
  bool no_buffers = false, no_commands = false;
  CLI::App* inspect = app.add_subcommand(
      "inspect", "verify a plan and print its metadata, memory, kernels and commands");
  inspect->add_option("plan", plan_path, "the plan file (graphc compile -o)")->required();
  inspect->add_flag("--no-buffers", no_buffers, "leave out the buffer table");
  inspect->add_flag("--no-commands", no_commands, "leave out the command lists");
  bool launches = false;
  inspect->add_flag("--launches", launches,
                    "also print every launch of every kernel binary (grid, block, threads, "
                    "bytes passed)");
  inspect->add_option("--load-kernels", device,
                      "also load the kernels on a device: none, cpu or cuda (hands the checked "
                      "kernel library to the dynamic loader, or the PTX to the CUDA driver, and "
                      "prepares the library calls; runs none of the plan's code)")
      ->check(CLI::IsMember({"none", "cpu", "cuda"}));
  std::string inspect_keys;
  inspect->add_option("--trusted-keys", inspect_keys,
                      "also check the plan is signed by one of these public keys");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "graphrun: error[invalid-argument]: " << e.what() << "\n";
    return 1;
  }

  train.graphs = !no_graphs;
  if (!*inspect) {
    if (train.plan_path.empty()) {
      std::cerr << "graphrun: error[invalid-argument]: give a plan: graphrun PLAN [options] "
                   "or graphrun inspect PLAN\n";
      return 1;
    }
    return RunTraining(train, device_options);
  }
  StatusOr<std::unique_ptr<Plan>> plan = Plan::FromFile(plan_path);
  if (!plan.ok()) return Fail(plan.status());
  if (!inspect_keys.empty()) {
    Status signed_by = CheckTrusted(**plan, inspect_keys);
    if (!signed_by.ok()) return Fail(signed_by);
  }
  PrintOptions options;
  options.buffers = !no_buffers;
  options.commands = !no_commands;
  options.launches = launches;
  PrintPlan(**plan, options, std::cout);
  if (device != "none") {
    DeviceOptions on;
    on.device = device;
    StatusOr<CreatedBackend> created = MakeBackend(on);
    if (!created.ok()) return Fail(created.status());
    Status status = created->backend->LoadKernels(**plan);
    if (!status.ok()) return Fail(status);
    std::cout << "kernels: loaded " << (*plan)->root().kernels()->size() << " on "
              << created->backend->Describe() << "\n";
  }
  return 0;
}
