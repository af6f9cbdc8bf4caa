// graphrun: trains with a plan. `graphrun PLAN [options]` runs train_step on
// synthetic or real data and reports throughput the way tf_cnn_benchmarks does;
// `graphrun inspect PLAN` verifies the plan fully, then prints what it holds.
// Every error is one line on stderr and exit code 1.

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "nlohmann/json.hpp"
#include "runtime/backend.h"
#include "runtime/checkpoint.h"
#include "runtime/data/dataset.h"
#include "runtime/executor.h"
#include "runtime/files.h"
#include "runtime/plan/plan_loader.h"
#include "runtime/plan/plan_printer.h"

namespace {

int Fail(const graphc::runtime::Status& status) {
  std::cerr << "graphrun: " << status.ToString() << "\n";
  return 1;
}

struct TrainOptions {
  std::string plan_path;
  std::string device = "auto";
  int64_t steps = -1, warmup = 10, epochs = 0, display_every = 10, threads = 0;
  std::string data = "synthetic";
  bool eval = false, profile = false, flip = false;
  uint64_t seed = 42;
  std::string report;
  std::string save, resume;
  int64_t save_every = 0;
  std::string trusted_keys;  // comma-separated public key files
};

// Bounds of the counts graphrun accepts: far beyond any real run, small
// enough that no step, sample or checkpoint arithmetic can overflow.
constexpr int64_t kMaxSteps = int64_t{1} << 40;
constexpr int64_t kMaxThreads = 4096;

using namespace graphc::runtime;
namespace fb = graphc::fb;

// tf_cnn_benchmarks' statistics of per-step images/sec: mean, its standard
// error, and the jitter (1.4826 x the median absolute deviation).
struct Speed {
  double mean = 0, error = 0, jitter = 0;
};
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
  std::vector<double> sorted = rates;
  std::sort(sorted.begin(), sorted.end());
  double median = sorted[sorted.size() / 2];
  std::vector<double> deviations;
  for (double r : rates) deviations.push_back(std::fabs(r - median));
  std::sort(deviations.begin(), deviations.end());
  s.jitter = 1.4826 * deviations[deviations.size() / 2];
  return s;
}

double Percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  size_t index = static_cast<size_t>(std::ceil(q * values.size())) - 1;
  return values[std::min(index, values.size() - 1)];
}

// Prints where a step's time goes, from the per-command times of `steps`
// profiled steps: per command class, then the slowest generated kernels.
// Returns the same as JSON for --report.
nlohmann::json Profile(const fb::Plan& root, const fb::Program& program,
                       const std::vector<double>& seconds, size_t steps) {
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
  std::cout << "profile of " << PrintableOf(program.name()) << " over " << steps
            << " steps (each command timed alone):\n"
            << std::fixed << std::setprecision(2);
  nlohmann::json j = {{"ms_per_step", total}, {"steps", steps}};
  for (const auto& [name, k] : sorted) {
    std::cout << "  " << std::left << std::setw(22) << name << std::right << std::setw(9)
              << k.ms << " ms " << std::setw(6) << 100.0 * k.ms / total << "%  x" << k.count
              << "\n";
    j["classes"][name] = {{"ms_per_step", k.ms}, {"commands", k.count}};
  }
  std::cout << "  " << std::left << std::setw(22) << "total" << std::right << std::setw(9)
            << total << " ms\n"
            << "slowest kernels:\n";
  for (size_t i = 0; i < std::min<size_t>(kernels.size(), 10); ++i) {
    const fb::Command& command = *program.commands()->Get(kernels[i].second);
    const fb::Kernel& kernel = *root.kernels()->Get(command.kernel());
    std::string ops = KernelOpsString(kernel, ", ");
    std::cout << "  " << std::setw(9) << kernels[i].first << " ms " << std::setw(6)
              << 100.0 * kernels[i].first / total << "%  " << PrintableOf(kernel.name()) << " ["
              << ops << "] " << PrintableOf(command.location()) << "\n";
    j["kernels"].push_back({{"kernel", StringOf(kernel.name())},
                            {"ops", ops},
                            {"location", StringOf(command.location())},
                            {"ms_per_step", kernels[i].first}});
  }
  std::cout << std::defaultfloat;
  return j;
}

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

// --save and --report replace only regular files, and neither may be the
// plan, a data or key file, or the other output (--save may be the file
// --resume reads: continuing a checkpoint in place is the usual way).
Status CheckOutputs(const TrainOptions& o) {
  std::vector<std::pair<std::string, std::string>> inputs = {{"the plan", o.plan_path},
                                                             {"--resume", o.resume}};
  for (const std::string* list : {&o.data, &o.trusted_keys}) {
    std::string items = list == &o.data ? (o.data.rfind("npy:", 0) == 0 ? o.data.substr(4) : "")
                                        : *list;
    std::stringstream split(items);
    for (std::string path; std::getline(split, path, ',');)
      inputs.emplace_back(list == &o.data ? "--data" : "--trusted-keys", path);
  }
  const std::pair<const char*, const std::string*> outputs[] = {{"--save", &o.save},
                                                                 {"--report", &o.report}};
  for (const auto& [flag, path] : outputs) {
    if (path->empty()) continue;
    Status replaceable = CheckReplaceable(*path);
    if (!replaceable.ok()) return replaceable;
    const std::string identity = FileIdentity(*path);
    for (const auto& [what, input] : inputs)
      if (!input.empty() && !(std::string(flag) == "--save" && what == "--resume") &&
          FileIdentity(input) == identity)
        return Status(ErrorCode::kInvalidArgument,
                      std::string(flag) + " " + Printable(*path) + " is " +
                          (what == "the plan" ? "the plan" : "the file " + what + " reads") +
                          "; refusing to overwrite it");
  }
  if (!o.save.empty() && !o.report.empty() && FileIdentity(o.save) == FileIdentity(o.report))
    return Status(ErrorCode::kInvalidArgument,
                  "--save and --report name the same file, " + Printable(o.save));
  return Status::Ok();
}

int Train(const TrainOptions& o) {
  StatusOr<std::unique_ptr<Plan>> loaded = Plan::FromFile(o.plan_path);
  if (!loaded.ok()) return Fail(loaded.status());
  const Plan& plan = **loaded;
  const fb::Plan& root = plan.root();
  if (!o.trusted_keys.empty()) {
    Status signed_by = CheckTrusted(plan, o.trusted_keys);
    if (!signed_by.ok()) return Fail(signed_by);
  }

  if (o.device == "cuda")
    return Fail(Status(ErrorCode::kUnsupported,
                       "--device cuda: this build has no CUDA backend yet; use --device cpu"));
  std::unique_ptr<Backend> backend = CreateCpuBackend(static_cast<int>(o.threads));
  std::cout << "device: " << backend->Describe()
            << (o.device == "auto" ? " (auto: no CUDA backend in this build)" : "") << "\n";

  StatusOr<std::unique_ptr<Executor>> created = Executor::Create(plan, *backend);
  if (!created.ok()) return Fail(created.status());
  Executor& exec = **created;
  Status status = exec.InitializeState(o.seed);
  if (!status.ok()) return Fail(status);
  // The step counter: where a resumed run's data and schedules continue.
  int32_t step_buffer = -1;
  if (root.states())
    for (const fb::State* state : *root.states())
      if (StringOf(exec.buffer(state->buffer()).name()) == "graphc.step" &&
          exec.buffer(state->buffer()).dtype() == fb::DType::I64)
        step_buffer = state->buffer();
  // Outputs are written by renaming a new file over the path, which would
  // replace whatever is there: only a regular file may be, and never one the
  // run reads or another output (checked now, not after training).
  status = CheckOutputs(o);
  if (!status.ok()) return Fail(status);
  if (!o.save.empty()) {
    // Fail now, not after the first K steps.
    size_t slash = o.save.rfind('/');
    std::string dir = slash == std::string::npos ? "." : o.save.substr(0, slash + 1);
    if (access(dir.c_str(), W_OK) != 0)
      return Fail(Status(ErrorCode::kIo, "--save " + Printable(o.save) + ": cannot write to " +
                                             Printable(dir)));
  }
  int64_t start_step = 0;
  if (!o.resume.empty()) {
    status = LoadCheckpoint(exec, o.resume);
    if (status.ok() && step_buffer >= 0)
      status = exec.Read(step_buffer, &start_step, sizeof(start_step));
    if (!status.ok()) return Fail(status);
    if (start_step < 0 || start_step > kMaxSteps)
      return Fail(Status(ErrorCode::kInvalidArgument,
                         Printable(o.resume) + ": its step counter graphc.step is " +
                             std::to_string(start_step) + ", outside [0, " +
                             std::to_string(kMaxSteps) + "]"));
    std::cout << "resumed from " << Printable(o.resume) << " at step " << start_step << "\n";
  }

  StatusOr<int> train = exec.FindProgram("train_step");
  if (!train.ok()) return Fail(train.status());
  const fb::Program& step_program = exec.program(*train);
  if (step_program.inputs()->size() != 2 || step_program.outputs()->size() < 1)
    return Fail(Status(ErrorCode::kInvalidArgument,
                       "train_step must take (images, labels) and return the loss"));
  const int32_t images_buffer = step_program.inputs()->Get(0);
  const int32_t labels_buffer = step_program.inputs()->Get(1);
  const int32_t loss_buffer = step_program.outputs()->Get(0);
  const std::vector<int64_t> image_shape = ShapeOf(exec.buffer(images_buffer));
  const int64_t batch = image_shape.empty() ? 0 : image_shape[0];
  if (image_shape.size() != 4 || exec.buffer(images_buffer).dtype() != fb::DType::F32 ||
      exec.buffer(labels_buffer).dtype() != fb::DType::I32 ||
      exec.buffer(loss_buffer).dtype() != fb::DType::F32 || exec.buffer(loss_buffer).size() != 4)
    return Fail(Status(ErrorCode::kUnsupported,
                       "train_step must take f32 NCHW images and i32 labels and return an f32 "
                       "loss"));
  StatusOr<int> eval = exec.FindProgram("eval_step");
  int64_t classes = 0;
  if (eval.ok()) {
    const fb::Program& e = exec.program(*eval);
    // What the evaluation writes and reads: the same inputs as train_step,
    // then the logits and the count of correct predictions.
    if (e.inputs()->size() != 2 || e.outputs()->size() != 2 ||
        exec.buffer(e.inputs()->Get(0)).size() != exec.buffer(images_buffer).size() ||
        exec.buffer(e.inputs()->Get(1)).size() != exec.buffer(labels_buffer).size() ||
        exec.buffer(e.outputs()->Get(1)).dtype() != fb::DType::I64 ||
        exec.buffer(e.outputs()->Get(1)).size() != 8)
      return Fail(Status(ErrorCode::kUnsupported,
                         "eval_step must take train_step's images and labels and return the "
                         "logits and an i64 count of correct predictions"));
    std::vector<int64_t> logits = ShapeOf(exec.buffer(e.outputs()->Get(0)));
    if (logits.size() == 2) classes = logits[1];
  }
  if (classes <= 0)
    return Fail(Status(ErrorCode::kUnsupported, "cannot tell the number of classes: the plan "
                                                "has no eval_step returning [batch, classes] "
                                                "logits"));

  // Data.
  std::unique_ptr<BatchSource> source, test_source;
  std::string data_name = o.data;
  if (o.data == "synthetic") {
    source = BatchSource::Synthetic(batch, image_shape, classes, 4, o.seed);
  } else if (o.data == "fashion-mnist" ||
             (o.data.rfind("fashion-mnist:", 0) == 0 && o.data.size() > 14)) {
    std::string dir = o.data == "fashion-mnist" ? kFashionMnistDir : o.data.substr(14);
    data_name = "fashion-mnist";
    for (bool train_split : {true, false}) {
      StatusOr<Examples> examples = ReadFashionMnist(dir, train_split);
      if (!examples.ok()) return Fail(examples.status());
      auto made = BatchSource::Create(std::move(*examples), batch, image_shape, classes,
                                      /*shuffle=*/train_split, o.seed);
      if (!made.ok()) return Fail(made.status());
      (train_split ? source : test_source) = std::move(*made);
    }
  } else if (o.data.rfind("npy:", 0) == 0) {
    std::vector<std::string> paths;
    std::stringstream list(o.data.substr(4));
    for (std::string path; std::getline(list, path, ',');) paths.push_back(path);
    if ((paths.size() != 2 && paths.size() != 4) ||
        std::any_of(paths.begin(), paths.end(), [](const std::string& p) { return p.empty(); }))
      return Fail(Status(ErrorCode::kInvalidArgument,
                         "--data npy: needs IMAGES.npy,LABELS.npy[,TEST_IMAGES.npy,"
                         "TEST_LABELS.npy], got '" + Printable(o.data) + "'"));
    if (o.eval && paths.size() != 4)
      return Fail(Status(ErrorCode::kInvalidArgument,
                         "--eval with --data npy: needs the test arrays too: "
                         "npy:IMAGES.npy,LABELS.npy,TEST_IMAGES.npy,TEST_LABELS.npy"));
    data_name = "npy";
    for (size_t split = 0; split < paths.size() / 2; ++split) {
      StatusOr<Examples> examples = ReadNpy(paths[2 * split], paths[2 * split + 1]);
      if (!examples.ok()) return Fail(examples.status());
      auto made = BatchSource::Create(std::move(*examples), batch, image_shape, classes,
                                      /*shuffle=*/split == 0, o.seed);
      if (!made.ok()) return Fail(made.status());
      (split == 0 ? source : test_source) = std::move(*made);
    }
  } else {
    return Fail(Status(ErrorCode::kInvalidArgument,
                       "--data must be synthetic, fashion-mnist[:DIR] or "
                       "npy:IMAGES.npy,LABELS.npy[,...], got '" + Printable(o.data) + "'"));
  }
  if (!test_source) test_source = BatchSource::Synthetic(batch, image_shape, classes, 4, o.seed);
  source->set_flip(o.flip);

  int64_t steps = o.steps;
  if (o.epochs > 0 && (__builtin_mul_overflow(o.epochs, source->batches_per_epoch(), &steps) ||
                       steps > kMaxSteps))
    return Fail(Status(ErrorCode::kInvalidArgument,
                       "--epochs " + std::to_string(o.epochs) + " is more than " +
                           std::to_string(kMaxSteps) + " steps of " +
                           std::to_string(source->batches_per_epoch()) + " batches per epoch"));
  if (steps < 0) steps = 100;
  if (start_step > kMaxSteps - steps)
    return Fail(Status(ErrorCode::kInvalidArgument,
                       "resuming at step " + std::to_string(start_step) + " for " +
                           std::to_string(steps) + " more steps passes " +
                           std::to_string(kMaxSteps)));
  const int64_t warmup = std::min<int64_t>(o.warmup, std::max<int64_t>(steps - 1, 0));
  std::cout << "model: " << PrintableOf(root.model()) << ", batch " << batch << ", "
            << (root.fused() ? "fused" : "unfused") << ", " << PrintableOf(root.precision())
            << "; data: " << data_name << " (" << source->examples() << " examples); "
            << steps << " steps, " << warmup << " warmup\n";

  // Train.
  const bool terminal = isatty(STDOUT_FILENO);
  std::vector<double> step_ms, rates;
  float loss = 0;
  source->Seek(start_step);
  Prefetcher prefetch(*source);
  auto save = [&](int64_t done) {
    std::map<std::string, std::string> metadata = {
        {"format", "pt"},
        {"graphc.model", StringOf(root.model())},
        {"graphc.step", std::to_string(start_step + done)},
        {"graphc.batch_size", std::to_string(batch)},
        {"graphc.seed", std::to_string(o.seed)},
    };
    Status saved = SaveCheckpoint(exec, o.save, metadata);
    if (saved.ok() && !terminal)
      std::cout << "saved " << Printable(o.save) << " at step " << start_step + done << "\n";
    return saved;
  };
  std::cout << "Step\tImg/sec\ttotal_loss\n";
  using Clock = std::chrono::steady_clock;
  for (int64_t step = 0; step < steps; ++step) {
    const Batch& b = prefetch.Next();
    Clock::time_point start = Clock::now();
    status = exec.Write(images_buffer, b.images.data(), b.images.size() * sizeof(float));
    if (status.ok()) status = exec.Write(labels_buffer, b.labels.data(), b.labels.size() * 4);
    exec.set_profiling(o.profile && step >= warmup);
    if (status.ok()) status = exec.Run(*train);
    if (status.ok()) status = exec.Read(loss_buffer, &loss, sizeof(loss));
    if (!status.ok()) return Fail(status);
    double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    if (!std::isfinite(loss))
      return Fail(Status(ErrorCode::kBackend, "the loss is " + std::to_string(loss) +
                                                  " at step " + std::to_string(step + 1) +
                                                  " (diverged; try a lower --lr)"));
    if (step >= warmup) {
      step_ms.push_back(ms);
      rates.push_back(batch * 1000.0 / ms);
    }
    const int64_t done = step + 1;
    if (terminal)
      std::cout << "\r\033[K" << done << "/" << steps << "  loss " << loss << std::flush;
    if (done % o.display_every == 0 || done == steps) {
      // A parameter or batch-norm statistic gone NaN stops the run here,
      // named, before it can reach a checkpoint or a report.
      status = exec.CheckStateFinite();
      if (!status.ok())
        return Fail(Status(status.code(), "after step " + std::to_string(start_step + done) +
                                              ": " + status.message() +
                                              " (diverged; try a lower --lr)"));
      Speed s = SpeedOf(rates);
      if (terminal) std::cout << "\r\033[K";
      std::cout << done << "\timages/sec: " << std::fixed << std::setprecision(1);
      if (rates.empty())
        std::cout << "(warmup)";
      else
        std::cout << s.mean << " +/- " << s.error << " (jitter = " << s.jitter << ")";
      std::cout << "\t" << std::setprecision(3) << loss << std::defaultfloat << "\n";
    }
    if (!o.save.empty() && (done == steps || (o.save_every > 0 && done % o.save_every == 0))) {
      status = save(done);
      if (!status.ok()) return Fail(status);
    }
  }
  // --steps 0 --save FILE: the initial state, exactly as the first step sees it.
  if (steps == 0 && !o.save.empty()) {
    status = save(0);
    if (!status.ok()) return Fail(status);
  }
  double total_ms = 0;
  for (double ms : step_ms) total_ms += ms;
  const double total_rate = step_ms.empty() ? 0 : batch * step_ms.size() * 1000.0 / total_ms;
  const double median_ms = Percentile(step_ms, 0.5), p90_ms = Percentile(step_ms, 0.9);
  std::cout << "----------------------------------------------------------------\n"
            << "total images/sec: " << std::fixed << std::setprecision(2) << total_rate << "\n"
            << "step time: median " << median_ms << " ms, p90 " << p90_ms << " ms over "
            << step_ms.size() << " timed steps\n"
            << "final loss: ";
  if (steps == 0)
    std::cout << "none (no step run)\n";
  else
    std::cout << std::setprecision(4) << loss << std::defaultfloat << "\n";

  nlohmann::json profile;
  if (o.profile && !step_ms.empty()) {
    exec.set_profiling(false);
    profile = Profile(root, step_program, exec.command_seconds(*train), step_ms.size());
  }

  // Evaluate: whole batches of the test split (the remainder is dropped).
  double accuracy = -1;
  int64_t evaluated = 0;
  if (o.eval) {
    if (!eval.ok()) return Fail(eval.status());
    const fb::Program& e = exec.program(*eval);
    const int32_t correct_buffer = e.outputs()->Get(1);  // checked above
    int64_t correct_total = 0;
    Batch b;
    for (int64_t i = 0; i < test_source->batches_per_epoch(); ++i) {
      test_source->Next(b);
      int64_t correct = 0;
      status = exec.Write(e.inputs()->Get(0), b.images.data(), b.images.size() * sizeof(float));
      if (status.ok()) status = exec.Write(e.inputs()->Get(1), b.labels.data(), b.labels.size() * 4);
      if (status.ok()) status = exec.Run(*eval);
      if (status.ok()) status = exec.Read(correct_buffer, &correct, sizeof(correct));
      if (!status.ok()) return Fail(status);
      correct_total += correct;
      evaluated += batch;
    }
    accuracy = evaluated ? double(correct_total) / evaluated : 0;
    std::cout << "test accuracy: " << std::setprecision(4) << std::fixed << accuracy
              << std::defaultfloat << " (" << evaluated << " of " << test_source->examples()
              << " test examples)\n";
  }
  std::cout << "----------------------------------------------------------------\n";

  if (!o.report.empty()) {
    nlohmann::json j = {
        {"model", StringOf(root.model())},
        {"device", backend->name()},
        {"device_description", backend->Describe()},
        {"data", data_name},
        {"batch_size", batch},
        {"steps", steps},
        {"warmup", warmup},
        {"fused", root.fused()},
        {"kernel_launches_per_step",
         std::count_if(step_program.commands()->begin(), step_program.commands()->end(),
                       [](const fb::Command* c) { return c->op() == fb::Opcode::Kernel; })},
        {"precision", StringOf(root.precision())},
        {"images_per_sec", step_ms.empty() ? 0.0 : batch * 1000.0 / median_ms},
        {"images_per_sec_mean", SpeedOf(rates).mean},
        {"total_images_per_sec", total_rate},
        {"step_ms_median", median_ms},
        {"step_ms_p90", p90_ms},
        {"final_loss", steps == 0 ? nlohmann::json() : nlohmann::json(loss)},
        {"seed", o.seed},
    };
    if (!profile.is_null()) j["profile"] = profile;
    if (o.eval) {
      j["test_accuracy"] = accuracy;
      j["test_examples"] = evaluated;
    }
    // Names from the plan may not be UTF-8: replaced, not fatal.
    status = WriteFileAtomically(
        o.report, j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
    if (!status.ok()) return Fail(status);
  }
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
  app.add_option("plan", train.plan_path, "the plan file (graphc compile -o)");
  app.add_option("--device", train.device,
                 "auto (CUDA when a GPU is usable, else the CPU), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
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
  app.add_option("--threads", train.threads,
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
  inspect->add_option("--load-kernels", device,
                      "also load the kernels on a device: none or cpu (hands the checked "
                      "kernel library to the dynamic loader; runs none of its code)")
      ->check(CLI::IsMember({"none", "cpu"}));
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

  if (!*inspect) {
    if (train.plan_path.empty()) {
      std::cerr << "graphrun: error[invalid-argument]: give a plan: graphrun PLAN [options] "
                   "or graphrun inspect PLAN\n";
      return 1;
    }
    return Train(train);
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
  PrintPlan(**plan, options, std::cout);
  if (device == "cpu") {
    std::unique_ptr<Backend> backend = CreateCpuBackend();
    Status status = backend->LoadKernels(**plan);
    if (!status.ok()) return Fail(status);
    std::cout << "kernels: loaded " << (*plan)->root().kernels()->size() << " on "
              << backend->name() << "\n";
  }
  return 0;
}
