// graphrun: trains with a plan. `graphrun PLAN [options]` runs train_step on
// synthetic or real data and reports throughput the way tf_cnn_benchmarks does;
// `graphrun PLAN --nodes N` does so on N ranks (data-parallel), re-executing
// itself under Open MPI's mpirun unless an MPI launcher already started it;
// `graphrun inspect PLAN` verifies the plan fully, then prints what it holds;
// `graphrun infer PLAN` runs an inference-only plan on .npy arrays.
// Every error is one line on stderr and exit code 1.

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <fstream>
#include <iostream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "contract/cpu_levels.h"
#include "contract/files.h"
#include "runtime/backends/backend_factory.h"
#include "runtime/comm/communicator.h"
#include "runtime/train/dataset.h"
#include "runtime/core/plan_loader.h"
#include "runtime/core/plan_printer.h"
#include "runtime/train/trainer.h"
#include "tools/graphrun/crosscheck_command.h"
#include "tools/graphrun/infer_command.h"
#include "tools/graphrun/load_plan.h"

namespace {

using namespace graphc;
using namespace graphc::runtime;
namespace fb = graphc::fb;

// In a job of several ranks, errors say whose they are.
std::string g_rank_prefix;

int Fail(const Status& status) {
  // One write, so that the lines of several ranks do not interleave.
  const std::string line = "graphrun: " + g_rank_prefix + status.ToString() + "\n";
  std::cerr.write(line.data(), static_cast<std::streamsize>(line.size()));
  std::cerr.flush();
  return 1;
}

const int64_t kMaxThreads = MaxCpuThreads();


struct DeviceOptions;
int RunTrainingOn(TrainOptions& o, const DeviceOptions& d, Communicator& comm);

struct DeviceOptions {
  std::string device = "auto";
  int64_t threads = 0;
  std::string kernel_cpu;
  bool tf32 = false;
  bool deterministic = false;
};

// `local_rank`: this rank's index on its machine, which picks its GPU (one
// rank per GPU); where the machine has fewer GPUs, ranks share device 0 (the
// communicator stages their buffers through host memory).
StatusOr<CreatedBackend> MakeBackend(const DeviceOptions& d, int local_rank = 0) {
  StatusOr<DeviceKind> kind = ParseDeviceKind(d.device);
  if (!kind.ok()) return kind.status();
  BackendOptions options;
  options.cpu_threads = static_cast<int>(d.threads);
  options.cpu_kernels = d.kernel_cpu;
  options.tf32 = d.tf32;
  options.deterministic = d.deterministic;
  options.cuda_device = local_rank;
  StatusOr<CreatedBackend> created = CreateBackend(*kind, options);
  if (local_rank == 0 || (created.ok() && created->backend->name() == std::string("cuda")))
    return created;
  options.cuda_device = 0;
  StatusOr<CreatedBackend> shared = CreateBackend(*kind, options);
  if (shared.ok() && shared->backend->name() == std::string("cuda"))
    shared->reason = "local rank " + std::to_string(local_rank) + " shares cuda:0" +
                     (created.ok() ? std::string() : ": " + created.status().message());
  if (shared.ok() || !created.ok()) return shared;
  return created;
}

struct LaunchOptions {
  int64_t nodes = 0;  // 0: not given (one rank, or what the MPI launcher started)
  int64_t ranks_per_node = 1;
  std::string hostfile;
  double collective_timeout = 300;
};

// An Open MPI hostfile graphrun hands to mpirun: a regular file (mpirun would
// wait forever on a FIFO) naming at least one host. Each line's first word is
// the host, [USER@]HOST, and it is never something mpirun or ssh would take
// for an option ("-oProxyCommand=..."); the rest of the line (slots=N,
// max_slots=N, ...) is mpirun's to read, as are "#" and "//" comments.
Status CheckHostfile(const std::string& path) {
  const std::string shown = "--hostfile " + Printable(path);
  struct stat st;
  if (stat(path.c_str(), &st) != 0)
    return Status(ErrorCode::kIo, shown + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return Status(ErrorCode::kIo, shown + ": not a regular file");
  if (st.st_size > (1 << 20))
    return Status(ErrorCode::kInvalidArgument, shown + ": larger than 1 MiB; not a hostfile");
  std::ifstream in(path);
  if (!in) return Status(ErrorCode::kIo, shown + ": cannot read it (" + std::strerror(errno) + ")");
  auto name_ok = [](const std::string& word, const char* allowed) {
    return !word.empty() && word[0] != '-' && word.find_first_not_of(allowed) == std::string::npos;
  };
  constexpr const char* kUser = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-";
  constexpr const char* kHost =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-:[]";
  int hosts = 0, number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    line = line.substr(0, line.find('#'));
    std::stringstream words(line);
    std::string first;
    if (!(words >> first) || first.rfind("//", 0) == 0 || first.rfind("/*", 0) == 0) continue;
    const size_t at = first.find('@');
    const bool ok = at == std::string::npos
                        ? name_ok(first, kHost)
                        : name_ok(first.substr(0, at), kUser) && name_ok(first.substr(at + 1), kHost);
    if (!ok)
      return Status(ErrorCode::kInvalidArgument,
                    shown + ":" + std::to_string(number) + ": '" + Printable(first) +
                        "' is not a host name or address ([USER@]HOST)");
    ++hosts;
  }
  if (in.bad()) return Status(ErrorCode::kIo, shown + ": cannot read it");
  if (hosts == 0) return Status(ErrorCode::kInvalidArgument, shown + ": names no host");
  return Status::Ok();
}

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

// `graphrun PLAN --nodes N ...` outside an MPI job: the same command line, run
// by mpirun on N x K ranks. On one machine (no --hostfile) the ranks share its
// cores: each gets an equal share of threads unless --threads says otherwise,
// and mpirun may place more ranks than cores. As root, Open MPI needs its
// consent variables. Replaces this process; returns only on failure.
int Relaunch(int argc, char** argv, const LaunchOptions& l, const DeviceOptions& d) {
  const int64_t ranks = l.nodes * l.ranks_per_node;
  if (!l.hostfile.empty()) {
    Status hosts = CheckHostfile(l.hostfile);
    if (!hosts.ok()) return Fail(hosts);
  }
  std::vector<std::string> args = {"mpirun", "-np", std::to_string(ranks), "--bind-to", "none"};
  // The ranks on other machines get the OpenMP waiting policy too (local ones
  // inherit it).
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) args.insert(args.end(), {"-x", "OMP_WAIT_POLICY"});
  if (l.hostfile.empty()) {
    args.push_back("--oversubscribe");
  } else {
    args.insert(args.end(), {"--hostfile", l.hostfile, "--map-by",
                             "ppr:" + std::to_string(l.ranks_per_node) + ":node"});
  }
  char self[4096];
  const ssize_t length = readlink("/proc/self/exe", self, sizeof(self) - 1);
  args.push_back(length > 0 ? std::string(self, length) : std::string(argv[0]));
  for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
  if (d.threads == 0) {
    // The machine's threads: OMP_NUM_THREADS where set, else every core;
    // each rank on a machine gets its share.
    int64_t cores = std::max<unsigned>(1, std::thread::hardware_concurrency());
    if (const char* omp = std::getenv("OMP_NUM_THREADS"); omp != nullptr && *omp != '\0') {
      std::string value = omp;
      const std::string problem = InRange(1, kMaxThreads)(value);
      if (!problem.empty())
        return Fail(Status(ErrorCode::kInvalidArgument, "OMP_NUM_THREADS: " + problem));
      cores = std::atoll(omp);
    }
    const int64_t per_machine = l.hostfile.empty() ? ranks : l.ranks_per_node;
    args.insert(args.end(), {"--threads", std::to_string(std::max<int64_t>(1, cores / per_machine))});
  }
  if (geteuid() == 0) {
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  }
  // Seen by the ranks: a rank that finds itself outside an MPI job (an
  // mpirun that is not Open MPI's) says so instead of launching again.
  setenv("GRAPHC_RELAUNCHED", "1", 1);
  std::vector<char*> exec_args;
  for (std::string& a : args) exec_args.push_back(a.data());
  exec_args.push_back(nullptr);
  std::cout << "graphrun: launching " << ranks << " ranks with mpirun"
            << (l.hostfile.empty() ? " on this machine" : " from " + Printable(l.hostfile))
            << std::endl;
  execvp("mpirun", exec_args.data());
  return Fail(Status(ErrorCode::kUnavailable,
                     std::string("--nodes needs Open MPI's mpirun (Debian: openmpi-bin): ") +
                         std::strerror(errno)));
}

int RunTraining(TrainOptions& o, const DeviceOptions& d, const LaunchOptions& l) {
  CommOptions comm_options;
  comm_options.timeout_seconds = l.collective_timeout;
  o.collective_timeout = l.collective_timeout;
  StatusOr<std::unique_ptr<Communicator>> comm = Communicator::Create(comm_options);
  if (!comm.ok()) return Fail(comm.status());
  Communicator& c = **comm;
  if (c.size() > 1) {
    g_rank_prefix = "rank " + std::to_string(c.rank()) + ": ";
    InstallTerminationHandler();
  }
  const int64_t expected = l.nodes > 0 ? l.nodes * l.ranks_per_node : 0;
  if (expected > 0 && expected != c.size())
    return Fail(Status(ErrorCode::kInvalidArgument,
                       "--nodes " + std::to_string(l.nodes) + " x --ranks-per-node " +
                           std::to_string(l.ranks_per_node) + " asks for " +
                           std::to_string(expected) + " ranks, but the MPI job has " +
                           std::to_string(c.size())));
  int code = RunTrainingOn(o, d, c);
  if (code == 0) {
    Status finalized = c.Finalize();
    if (!finalized.ok()) return Fail(finalized);
  }
  return code;
}

int RunTrainingOn(TrainOptions& o, const DeviceOptions& d, Communicator& comm) {
  StatusOr<std::unique_ptr<Plan>> loaded = LoadPlan(o.plan_path, o.trusted_keys);
  if (!loaded.ok()) return Fail(loaded.status());
  const Plan& plan = **loaded;
  // Outputs are checked before the device starts (which may take seconds).
  Status status = CheckOutputs(o, comm.rank(), comm.size());
  if (!status.ok()) return Fail(status);
  StatusOr<CreatedBackend> created = MakeBackend(d, comm.local_rank());
  if (!created.ok()) return Fail(created.status());
  Backend& backend = *created->backend;
  if (o.data_threads == 0) {
    // Image decoding takes the cores the model's threads leave, at least one.
    const int64_t cores = std::max<unsigned>(1, std::thread::hardware_concurrency());
    o.data_threads = static_cast<int>(std::max<int64_t>(1, cores - (d.threads > 0 ? d.threads : cores)));
  }
  // Only rank 0 speaks (the trainer does the same).
  std::ostream null_out(nullptr);
  std::ostream& out = comm.rank() == 0 ? std::cout : null_out;
  out << "device: " << backend.Describe()
      << (created->reason.empty() ? "" : " (" + created->reason + ")") << "\n";
  if (d.tf32 && backend.name() == std::string("cpu"))
    out << "note: --tf32 has no effect on the CPU (its FP32 math is strict)\n";
  if (!d.kernel_cpu.empty() && backend.name() != std::string("cpu"))
    out << "note: --kernel-cpu has no effect on " << backend.name()
        << " (it picks the plan's x86-64 kernels)\n";
  if (d.deterministic && backend.name() == std::string("cpu"))
    out << "note: --deterministic has no effect on the CPU (its convolutions are direct)\n";
  o.report_extra["device_choice"] = d.device;
  if (!created->reason.empty()) o.report_extra["device_reason"] = created->reason;
  o.report_extra["math"] = backend.name() == std::string("cuda") && d.tf32 ? "tf32" : "fp32";
  o.report_extra["deterministic"] = d.deterministic;
  o.report_extra["sync_debug"] = o.sync_debug;
  if (!o.predict.ranks.empty() && comm.size() > 1)
    return Fail(Status(ErrorCode::kInvalidArgument,
                       "--predict measures one rank's step: run it without mpirun (or give "
                       "--step-profile, a report of such a run)"));
  status = graphc::runtime::Train(plan, backend, o, std::cout, &comm);
  if (!status.ok()) return Fail(status);
  return 0;
}

// graphrun PLAN --predict N,... --step-profile REPORT: the prediction alone,
// from an earlier one-rank run's --profile --report (no device is started).
int RunPrediction(const TrainOptions& o) {
  StatusOr<std::unique_ptr<Plan>> loaded = LoadPlan(o.plan_path, o.trusted_keys);
  if (!loaded.ok()) return Fail(loaded.status());
  const fb::Plan& root = (*loaded)->root();
  const fb::Program* step = nullptr;
  for (const fb::Program* program : *root.programs())
    if (StringOf(program->name()) == "train_step") step = program;
  if (step == nullptr)
    return Fail(Status(ErrorCode::kInvalidArgument,
                       "--predict: the plan has no program 'train_step' (an inference plan?)"));
  Status status = CheckOutputs(o, 0, 1);
  if (!status.ok()) return Fail(status);
  StatusOr<MeasuredStep> measured = ReadStepProfile(o.predict.step_profile, root, *step);
  if (!measured.ok()) return Fail(measured.status());
  StatusOr<nlohmann::json> predicted = PredictScaling(root, *step, *measured, o.predict, std::cout);
  if (!predicted.ok()) return Fail(predicted.status());
  if (!o.report.empty()) {
    nlohmann::json j = {{"model", StringOf(root.model())}, {"prediction", *predicted}};
    status = WriteFileAtomically(
        o.report, j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
    if (!status.ok()) return Fail(status);
  }
  return 0;
}

}  // namespace

// Seconds in (0, highest], or a one-line error that says so (NaN, infinity
// and trailing text are refused, as InRange refuses them for integers).
CLI::Validator Seconds(double highest) {
  return CLI::Validator(
      [highest](std::string& value) -> std::string {
        errno = 0;
        char* end = nullptr;
        const double v = std::strtod(value.c_str(), &end);
        if (!value.empty() && errno == 0 && *end == '\0' && v > 0 && v <= highest) return "";
        return "must be a number of seconds in (0, " + std::to_string(int64_t(highest)) +
               "], got '" + Printable(value) + "'";
      },
      "SECONDS in (0, " + std::to_string(int64_t(highest)) + "]");
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

// libgomp reads its environment when it is loaded, before main. By default a
// thread that reaches a barrier (the end of every parallel kernel launch and
// oneDNN call) spins for a while before it sleeps; beside another busy process
// on the same cores that spinning takes the core from the thread everyone is
// waiting for. ResNet-50 at batch 8 on 2 cores next to one busy process: 1.8
// images/sec spinning, 2.7 waiting passively, and no difference on a quiet
// machine. So unless the environment already chooses (OMP_WAIT_POLICY or
// GOMP_SPINCOUNT set), graphrun asks for passive waiting and executes itself
// again, once (GRAPHC_REEXECUTED marks the second start); if that cannot be
// done (no /proc, graphrun started through the dynamic loader) it runs as it
// is, and says nothing it does not do.
void PreferPassiveWaiting(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr ||
      std::getenv("GRAPHC_REEXECUTED") != nullptr)
    return;
  char self[4096];
  const ssize_t length = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (length <= 0) return;
  self[length] = '\0';
  const char* name = std::strrchr(self, '/');
  if (std::strncmp(name != nullptr ? name + 1 : self, "ld-", 3) == 0) return;
  if (setenv("GRAPHC_REEXECUTED", "1", 1) != 0) return;
  if (setenv("OMP_WAIT_POLICY", "PASSIVE", 1) != 0) return;
  execv(self, argv);
  unsetenv("OMP_WAIT_POLICY");
}

int main(int argc, char** argv) {
  PreferPassiveWaiting(argv);
  return Guarded([&] { return Main(argc, argv); });
}

int Main(int argc, char** argv) {
  CLI::App app("graphrun: run graphc training plans");
  app.require_subcommand(0, 1);
  {
    std::string version = "graphrun " GRAPHC_VERSION " (runs plan schema versions " +
                          std::to_string(kOldestPlanSchemaVersion) + " to " +
                          std::to_string(kPlanSchemaVersion) + "; backends:";
    for (const std::string& backend : BuiltBackends()) version += " " + backend;
    app.set_version_flag("--version", version + ")");
  }
  TrainOptions train;
  train.data_threads = 0;  // the default, resolved once the threads are known
  DeviceOptions device_options;
  app.add_option("plan", train.plan_path, "the plan file (graphc compile -o)");
  app.add_option("--device", device_options.device,
                 "auto (CUDA when a GPU is usable, else the CPU; says why), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app.add_flag("--tf32", device_options.tf32,
               "CUDA: let cuBLAS and cuDNN use TF32 tensor cores for FP32 math (default: "
               "strict FP32); the report says which");
  app.add_flag("--deterministic", device_options.deterministic,
               "CUDA: only deterministic cuDNN convolution algorithms without FFT or Winograd "
               "transforms (repeatable bits, closest to exact sums; as the GPU checks compare "
               "against the CPU)");
  bool no_graphs = false;
  app.add_flag("--no-cuda-graphs", no_graphs,
               "CUDA: launch train_step's commands one by one every step instead of replaying "
               "them as a CUDA Graph (to compare)");
  app.add_flag("--sync-debug", train.sync_debug,
               "wait for the device after every command, so that an asynchronous failure is "
               "reported against the command that caused it (slow)");
  CLI::Option* steps_option =
      app.add_option("--steps", train.steps,
                     "training steps (default 100; not with --epochs; 0 with --save writes the "
                     "initial state)")
          ->check(InRange(0, kMaxSteps));
  app.add_option("--warmup", train.warmup, "steps left out of the timing (default 10)")
      ->check(InRange(0, kMaxSteps));
  app.add_option("--epochs", train.epochs, "train for E passes over the data")
      ->check(InRange(1, kMaxSteps))
      ->excludes(steps_option);
  app.add_option("--data", train.data,
                 "synthetic (default), fashion-mnist[:DIR] (default DIR " +
                     std::string(kFashionMnistDir) +
                     "), npy:IMAGES.npy,LABELS.npy[,TEST_IMAGES.npy,TEST_LABELS.npy] "
                     "(float32 or uint8 NCHW images, int32 or int64 labels), imagefolder:DIR "
                     "(JPEGs and PNGs in class folders, DIR/train and DIR/val or DIR alone) or "
                     "shards:PATTERN (WebDataset tar shards of KEY.jpg or KEY.png with KEY.cls, e.g. "
                     "train-{0000..0127}.tar); images' pixels in [0, 1], RGB normalized with "
                     "ImageNet's mean and deviation; see --augment");
  app.add_option("--augment", train.augment,
                 "image folders and shards: imagenet (default: random resized crops and flips for training, "
                 "resize and center crop for --eval) or none (whole images resized to the "
                 "model's input; --flip flips them)")
      ->check(CLI::IsMember({"imagenet", "none"}));
  app.add_flag("--strict-data", train.strict_data,
               "image folders and shards: stop at the first image that does not decode (default: skip it "
               "with a warning and count it)");
  app.add_option("--prefetch", train.prefetch,
                 "batches made ahead of the step on a background thread (default 2; each "
                 "holds a batch of images on the host)")
      ->check(InRange(1, 64));
  app.add_option("--data-threads", train.data_threads,
                 "threads that decode image batches (default: the cores --threads "
                 "leaves, at least 1)")
      ->check(InRange(1, kMaxThreads));
  CLI::Option* eval_option =
      app.add_flag("--eval", train.eval, "evaluate test accuracy after training");
  app.add_option("--eval-data", train.eval_data,
                 "--eval's images, when --data does not hold them: imagefolder:DIR (class "
                 "folders) or shards:PATTERN")
      ->needs(eval_option);
  app.add_flag("--flip", train.flip,
               "augment: flip each training image left-right with probability 1/2 (seeded)");
  app.add_flag("--profile", train.profile,
               "time every command of the timed steps and print where a step's time goes "
               "(synchronizes after each command)");
  app.add_option("--threads", device_options.threads,
                 "CPU threads for generated kernels and oneDNN (default: every core)")
      ->check(InRange(1, kMaxThreads));
  app.add_option("--kernel-cpu", device_options.kernel_cpu,
                 "run the plan's kernel library for this x86-64 level (default: the highest "
                 "of the plan's that this CPU runs)")
      ->check(CLI::IsMember(std::vector<std::string>(kX86Levels.begin(), kX86Levels.end())));
  CLI::Option* save_option =
      app.add_option("--save", train.save,
                     "write the parameters and state to this safetensors file after the run "
                     "(atomically)");
  app.add_option("--save-every", train.save_every, "also save every K steps (needs --save)")
      ->check(InRange(1, kMaxSteps))
      ->needs(save_option);
  auto* resume_option = app.add_option(
      "--resume", train.resume,
      "start from this safetensors checkpoint (its step counter positions the data "
      "and the schedules; --steps/--epochs count from there)");
  app.add_option("--init", train.init,
                 "start from these weights (safetensors, e.g. what graphc import wrote or a "
                 "PyTorch state_dict): the model's parameters and batch-norm statistics by "
                 "name, strictly (num_batches_tracked ignored); optimizer state zero, step 0")
      ->excludes(resume_option);
  app.add_option("--seed", train.seed, "seed of the initial parameters and data order")
      ->check(InRange(0, std::numeric_limits<int64_t>::max()));
  app.add_option(
      "--trusted-keys", train.trusted_keys,
      "run only plans signed by one of these public keys (comma-separated files written by "
      "graphc keygen)");
  app.add_option("--report", train.report, "write the run's figures as JSON to this file");
  app.add_option("--trace", train.trace,
                 "write a Chrome trace of " + std::to_string(kTraceSteps) +
                     " steps after the warmup to this file (one per rank: FILE.rankR with "
                     "several): kernels, library calls and waits on one track, allreduces in "
                     "flight on another; opens in chrome://tracing or ui.perfetto.dev");
  app.add_option("--display-every", train.display_every,
                 "print images/sec and the loss every K steps (default 10)")
      ->check(InRange(1, kMaxSteps));
  LaunchOptions launch;
  app.add_option("--nodes", launch.nodes,
                 "train data-parallel on N nodes (ranks: N x --ranks-per-node); outside an MPI "
                 "job graphrun re-executes itself under mpirun, on this machine unless "
                 "--hostfile names others")
      ->check(InRange(1, 1 << 16));
  app.add_option("--ranks-per-node", launch.ranks_per_node,
                 "ranks on each node (default 1; one per GPU)")
      ->check(InRange(1, 1 << 10));
  app.add_option("--hostfile", launch.hostfile,
                 "Open MPI hostfile of the nodes to run on (with --nodes)");
  app.add_option("--collective-timeout", launch.collective_timeout,
                 "seconds a collective may take before every rank stops with an error naming "
                 "it and the ranks that did not arrive (default 300)")
      ->check(Seconds(1e6));
  app.add_option("--collectives", train.collectives,
                 "how several ranks allreduce gradients: auto (default: on GPUs, NCCL on the "
                 "device buffers where every rank can use it, else through host memory and "
                 "MPI; on the CPU, MPI), nccl (an error where NCCL cannot run) or mpi")
      ->check(CLI::IsMember({"auto", "nccl", "mpi"}));
  CLI::Option* predict_option =
      app.add_option("--predict", train.predict.ranks,
                     "after the run (profiled: one rank), predict the step on these numbers of "
                     "ranks (e.g. 1,2,4,8,16) from each command's measured time, the plan's "
                     "gradient buckets and the links: step time, images/sec, speedup, scaling "
                     "efficiency, exposed communication")
          ->delimiter(',')
          ->check(InRange(1, 1 << 20));
  app.add_option("--link", train.predict.link,
                 "--predict: the link between nodes, BANDWIDTH[,LATENCY] (10gbit,50us; "
                 "100gbit; 12.5GB/s,2us): one per node, its ranks share it")
      ->needs(predict_option);
  app.add_option("--intra-link", train.predict.intra_link,
                 "--predict: the link between ranks of one node (default 10GB/s,1us: shared "
                 "memory; NVLink is about 450GB/s,3us)")
      ->needs(predict_option);
  app.add_option("--step-profile", train.predict.step_profile,
                 "--predict from this --report of an earlier one-rank run with --profile "
                 "(of this plan, or of one that computes the same: other buckets, overlap or "
                 "wire) instead of training now")
      ->needs(predict_option);
  app.add_option("--busy-share", train.predict.busy_share,
                 "--predict: the share of its speed an allreduce keeps while the ranks compute "
                 "(default 1; on a CPU whose cores all compute, less: measure an allreduce beside "
                 "a computing process and alone, and give the ratio)")
      ->check(CLI::Range(1e-3, 1.0))
      ->needs(predict_option);
  app.add_option("--compute-share", train.predict.compute_share,
                 "--predict: the share of its speed compute keeps while an allreduce is in flight "
                 "(default 1; on a CPU the network stack and reductions take cores: measure a "
                 "training beside an allreduce loop and alone, and give the ratio)")
      ->check(CLI::Range(1e-3, 1.0))
      ->needs(predict_option);
  app.add_option("--step-jitter", train.predict.step_jitter_ms,
                 "--predict: the spread of one rank's step times in ms (a robust standard "
                 "deviation) for the stragglers every bucket waits for (default: as measured; 0 "
                 "with --step-ms)")
      ->check(CLI::Range(0.0, 1e9))
      ->needs(predict_option);
  app.add_option("--step-ms", train.predict.step_ms,
                 "--predict from a one-rank step of this many ms instead of the measured one "
                 "(e.g. a GPU's published step): the profile then only places each command in it")
      ->check(CLI::Range(1e-3, 1e9))
      ->needs(predict_option);
  app.add_option("--predict-algorithm", train.predict.algorithm,
                 "--predict: the communicator: auto (default: NCCL for a profile measured on a "
                 "GPU, Open MPI on the CPU), ring (NCCL: a ring allreduce, one bucket at a time) "
                 "or rabenseifner (Open MPI: Rabenseifner's, the buckets sharing the link)")
      ->check(CLI::IsMember({"auto", "ring", "rabenseifner"}))
      ->needs(predict_option);
  std::string bucket_sweep;
  CLI::Option* sweep_option =
      app.add_option("--bucket-sweep", bucket_sweep,
                     "--predict: also predict the plan's gradients re-cut into buckets of "
                     "these MiB (e.g. --bucket-sweep=1,4,16,64; alone: 0.25 to 256) and name the "
                     "best cap for graphc compile --bucket-mb")
          ->expected(0, 1)
          ->needs(predict_option);
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
  std::string inspect_kernel_cpu;
  CLI::Option* inspect_kernel_cpu_option =
      inspect
          ->add_option("--kernel-cpu", inspect_kernel_cpu,
                       "with --load-kernels=cpu: load the plan's kernel library for this x86-64 "
                       "level (default: the highest of the plan's that this CPU runs)")
          ->check(CLI::IsMember(std::vector<std::string>(kX86Levels.begin(), kX86Levels.end())));
  CrosscheckFlags crosscheck_flags;
  CLI::App* crosscheck = AddCrosscheckCommand(app, crosscheck_flags);
  InferFlags infer_flags;
  CLI::App* infer = AddInferCommand(app, infer_flags);
  std::string inspect_keys;
  inspect->add_option("--trusted-keys", inspect_keys,
                      "also check the plan is signed by one of these public keys");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "graphrun: error[invalid-argument]: " << e.what() << "\n";
    return 1;
  }

  // An option given an empty value ("--save ''", an unset $VARIABLE) is an
  // error, never the option left out: --trusted-keys '' would otherwise run
  // unsigned plans. (A flag given reports "true", so flags never trip it.)
  for (const CLI::App* command :
       std::initializer_list<const CLI::App*>{&app, inspect, crosscheck, infer})
    for (const CLI::Option* option : command->get_options()) {
      // --bucket-sweep alone (its value optional) means the default caps.
      if (option->count() == 0 || option == sweep_option) continue;
      for (const std::string& value : option->results())
        if (value.empty()) {
          std::cerr << "graphrun: error[invalid-argument]: "
                    << (option->get_name().empty() ? std::string("an argument")
                                                   : option->get_name())
                    << " is empty\n";
          return 1;
        }
    }
  // A training run's options given before a subcommand belong to no one:
  // an error, never an option silently left out (graphrun --threads 1 infer).
  for (const CLI::App* command : {crosscheck, infer, inspect}) {
    if (!*command) continue;
    for (const CLI::Option* option : app.get_options())
      if (option->count() > 0) {
        std::cerr << "graphrun: error[invalid-argument]: " << option->get_name()
                  << " before '" << command->get_name()
                  << "' is an option of training runs; give the subcommand's options after it\n";
        return 1;
      }
  }
  if (inspect_kernel_cpu_option->count() > 0 && device != "cpu") {
    std::cerr << "graphrun: error[invalid-argument]: inspect --kernel-cpu goes with "
                 "--load-kernels=cpu\n";
    return 1;
  }
  train.graphs = !no_graphs;
  if (*crosscheck) return RunCrosscheckCommand(crosscheck_flags);
  if (*infer) return RunInferCommand(infer_flags);
  if (!*inspect) {
    if (train.plan_path.empty()) {
      // "--bucket-sweep PLAN" takes the plan as its caps.
      if (sweep_option->count() > 0 && !bucket_sweep.empty()) {
        std::cerr << "graphrun: error[invalid-argument]: give a plan: --bucket-sweep took '"
                  << Printable(bucket_sweep)
                  << "' as its caps; write --bucket-sweep=CAPS, or put the plan first\n";
        return 1;
      }
      std::cerr << "graphrun: error[invalid-argument]: give a plan: graphrun PLAN [options] "
                   "or graphrun inspect PLAN\n";
      return 1;
    }
    const bool predict = !train.predict.ranks.empty();
    if (predict && launch.nodes > 0)
      return Fail(Status(ErrorCode::kInvalidArgument,
                         "--predict measures one rank's step: leave out --nodes"));
    if (launch.nodes == 0 && !launch.hostfile.empty())
      return Fail(Status(ErrorCode::kInvalidArgument, "--hostfile goes with --nodes"));
    if (launch.nodes == 0 && !predict && launch.ranks_per_node != 1)
      return Fail(Status(ErrorCode::kInvalidArgument,
                         "--ranks-per-node goes with --nodes (or --predict)"));
    train.predict.ranks_per_node = launch.ranks_per_node;
    if (predict) {
      if (sweep_option->count() > 0) {
        StatusOr<std::vector<double>> caps = ParseBucketSweep(bucket_sweep);
        if (!caps.ok()) return Fail(caps.status());
        train.predict.bucket_sweep_mb = *caps;
      }
      if (Status status = CheckPredictOptions(train.predict); !status.ok()) return Fail(status);
      if (!train.predict.step_profile.empty()) {
        // Nothing trains: options of a training run would be silently unused.
        for (const char* name : {"--steps", "--epochs", "--warmup", "--data", "--eval",
                                 "--eval-data", "--save", "--resume", "--init", "--trace",
                                 "--profile", "--device", "--threads", "--kernel-cpu"})
          if (app.count(name) > 0)
            return Fail(Status(ErrorCode::kInvalidArgument,
                               std::string("--step-profile predicts without training: ") +
                                   name + " has nothing to do"));
        return RunPrediction(train);
      }
      if (train.steps >= 0 && train.steps <= train.warmup)
        return Fail(Status(ErrorCode::kInvalidArgument,
                           "--predict needs timed steps: --steps more than --warmup"));
      train.profile = true;
    }
    if (launch.nodes * launch.ranks_per_node > 1 && !InsideMpiJob()) {
      if (std::getenv("GRAPHC_RELAUNCHED") != nullptr)
        return Fail(Status(ErrorCode::kUnavailable,
                           "started by mpirun, but this process sees no Open MPI job: is the "
                           "mpirun on PATH Open MPI's? (graphrun is built against Open MPI)"));
      return Relaunch(argc, argv, launch, device_options);
    }
    return RunTraining(train, device_options, launch);
  }
  StatusOr<std::unique_ptr<Plan>> plan = LoadPlan(plan_path, inspect_keys);
  if (!plan.ok()) return Fail(plan.status());
  PrintOptions options;
  options.buffers = !no_buffers;
  options.commands = !no_commands;
  options.launches = launches;
  PrintPlan(**plan, options, std::cout);
  if (device != "none") {
    DeviceOptions on;
    on.device = device;
    on.kernel_cpu = inspect_kernel_cpu;
    StatusOr<CreatedBackend> created = MakeBackend(on);
    if (!created.ok()) return Fail(created.status());
    Status status = created->backend->LoadKernels(**plan);
    if (!status.ok()) return Fail(status);
    std::cout << "kernels: loaded " << (*plan)->root().kernels()->size() << " on "
              << created->backend->Describe() << "\n";
  }
  return 0;
}
