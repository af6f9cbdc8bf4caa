// The training loop (see trainer.h), in the stages of a Trainer:
//   Load       executor, kernels and the libraries' choices, initial state
//   Resume     --resume: a checkpoint's state and step; --init: given weights
//   JoinRanks  what every rank agrees on (state, collectives)
//   OpenData   the sources of this rank's shards, the run's length
//   Loop       the steps: feed, enqueue, and at display and save points read
//              the loss, check the state, print, save
//   Finish     trace, summary, profile, evaluation, report
// The host waits for the device only to print (display steps), save, or
// collect step times (every kClockWindow steps, StepClock), and reads the loss
// only then; the next batch's copy overlaps the current step (InputFeeder).

#include "runtime/train/trainer.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <numeric>
#include <set>
#include <utility>
#include <vector>

#include "contract/files.h"
#include "runtime/comm/communicator.h"
#include "runtime/core/executor.h"
#include "runtime/train/checkpoint.h"
#include "runtime/train/dataset.h"
#include "runtime/train/input_feeder.h"
#include "runtime/train/outputs.h"
#include "runtime/train/programs.h"
#include "runtime/train/rank_sync.h"
#include "runtime/train/report.h"
#include "runtime/train/scaling_model.h"
#include "runtime/train/sources.h"
#include "runtime/train/step_clock.h"

namespace graphc::runtime {
namespace {

// This process's peak resident memory so far, MiB (getrusage: KiB on Linux).
double PeakRssMib() {
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return usage.ru_maxrss / 1024.0;
}

// Where ranks other than 0 print: nowhere.
class NullBuffer : public std::streambuf {
 protected:
  int overflow(int c) override { return c; }
};

Status Diverged(int64_t step, const std::string& what) {
  return Status(ErrorCode::kNonFinite,
                "after step " + std::to_string(step) + ": " + what + " (diverged; try a lower --lr)");
}

// Loss scaling skips a step whose gradients overflow. A run where no step
// applies its update any more (the forward pass itself overflows, which no
// scale fixes) is stalled: said so after this many steps.
constexpr int64_t kStalledSteps = 200;

class Trainer {
 public:
  Trainer(const Plan& plan, Backend& backend, const TrainOptions& o, std::ostream& rank_out,
          Communicator& comm)
      : plan_(plan),
        root_(plan.root()),
        backend_(backend),
        o_(o),
        comm_(comm),
        rank_(comm.rank()),
        ranks_(comm.size()),
        null_out_(&null_buffer_),
        out_(rank_ == 0 ? rank_out : null_out_) {}

  Status Run() {
    GRAPHC_RETURN_IF_ERROR(CheckOutputs(o_, rank_, ranks_));
    GRAPHC_RETURN_IF_ERROR(Load());
    GRAPHC_RETURN_IF_ERROR(Resume());
    GRAPHC_RETURN_IF_ERROR(JoinRanks());
    GRAPHC_RETURN_IF_ERROR(OpenData());
    GRAPHC_RETURN_IF_ERROR(Loop());
    return Finish();
  }

 private:
  Status Load();
  Status Resume();
  Status JoinRanks();
  Status OpenData();
  Status Loop();
  // At a display or save point after `done` steps: the loss of the global
  // batch, the loss scale, and the checks that stop a diverged run.
  Status ReadAndCheck(int64_t done);
  void Display(int64_t done);
  Status Save(int64_t done);
  Status WriteCheckpoint(int64_t done);
  // Appends the clock's window of step times (the warmup's left out).
  Status Collect(int64_t done);
  Status Finish();
  Status WriteReport(double total_rate, double median_ms, double p90_ms,
                     const std::vector<double>& rank_rates,
                     const std::vector<double>& rank_median_rates,
                     const std::vector<double>& rank_waits, const nlohmann::json& profile,
                     double accuracy, int64_t evaluated, double average_accuracy);
  const Programs& p() const { return programs_; }

  const Plan& plan_;
  const fb::Plan& root_;
  Backend& backend_;
  const TrainOptions& o_;
  Communicator& comm_;
  const int rank_, ranks_;
  NullBuffer null_buffer_;
  std::ostream null_out_;
  std::ostream& out_;  // rank 0's output; the others print nowhere

  // Load
  std::unique_ptr<Executor> exec_;
  Programs programs_;
  double load_ms_ = 0;
  double data_wait_s_ = 0;  // the timed steps' waits for their batch
  nlohmann::json prediction_;  // --predict's table
  std::string load_summary_, library_math_;
  // Resume
  int64_t start_step_ = 0;
  // JoinRanks
  std::string collectives_how_;
  std::unique_ptr<DeviceCollectives> device_collectives_;
  // OpenData
  std::unique_ptr<DataSources> data_;
  int64_t steps_ = 0, warmup_ = 0;
  std::unique_ptr<InputFeeder> feeder_;
  std::unique_ptr<StepClock> clock_;
  // Loop
  bool terminal_ = false;
  StepTimes times_;
  std::vector<double> window_ms_;
  int64_t timed_from_ = 0;  // the step the clock's window starts at
  float loss_ = 0;
  bool scaled_ = false;
  float loss_scale_ = 0;
  float grad_norm_ = 0;  // the last read of graphc.grad_norm (clipping plans)
  int64_t skipped_ = 0;
  int64_t last_read_done_ = 0, last_read_skipped_ = 0, last_applied_done_ = 0;
  std::vector<std::pair<double, double>> traced_steps_;  // start, end (us)
};

// Loading: memory, kernels, the libraries' choices (cuDNN times its
// algorithms here); then, for a mixed-precision plan, how this device runs
// its half convolutions and gemms (natively, or emulated through fp32, and
// why), which the backend knows once it has prepared them.
Status Trainer::Load() {
  const auto load_started = std::chrono::steady_clock::now();
  StatusOr<std::unique_ptr<Executor>> created = Executor::Create(plan_, backend_);
  if (!created.ok()) return created.status();
  exec_ = std::move(*created);
  load_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                       load_started)
                 .count();
  load_summary_ = backend_.LoadSummary();
  out_ << "loaded in " << std::fixed << std::setprecision(0) << load_ms_ << std::defaultfloat
       << " ms" << (load_summary_.empty() ? "" : "; " + load_summary_) << "\n";
  const std::string precision = StringOf(root_.precision());
  if (precision == "fp16" || precision == "bf16") {
    library_math_ =
        backend_.LibraryMath(precision == "fp16" ? fb::DType::F16 : fb::DType::BF16);
    out_ << "library math: " << library_math_ << "\n";
  }
  exec_->set_sync_debug(o_.sync_debug);
  exec_->set_graphs(o_.graphs);
  exec_->set_communicator(&comm_);
  GRAPHC_RETURN_IF_ERROR(exec_->InitializeState(o_.seed));
  StatusOr<Programs> found = FindPrograms(*exec_);
  if (!found.ok()) return found.status();
  programs_ = std::move(*found);
  if (ranks_ > 1 && !exec_->has_collectives(p().train))
    return Status(ErrorCode::kInvalidArgument,
                  "the plan averages no gradients across ranks (graphc compile "
                  "--no-data-parallel): " + std::to_string(ranks_) +
                      " ranks would train " + std::to_string(ranks_) +
                      " different models; compile it without --no-data-parallel");
  return Status::Ok();
}

Status Trainer::Resume() {
  if (!o_.init.empty()) {
    if (!o_.resume.empty())
      return Status(ErrorCode::kInvalidArgument, "--init excludes --resume");
    size_t loaded = 0;
    GRAPHC_RETURN_IF_ERROR(LoadInitialWeights(*exec_, o_.init, &loaded));
    out_ << "initialized " << loaded << " tensors (parameters and statistics) from "
         << Printable(o_.init) << "\n";
    return Status::Ok();
  }
  if (o_.resume.empty()) return Status::Ok();
  std::map<std::string, std::string> metadata;
  size_t fresh = 0;
  GRAPHC_RETURN_IF_ERROR(LoadCheckpoint(*exec_, o_.resume, &metadata, &fresh));
  if (p().step_counter >= 0)
    GRAPHC_RETURN_IF_ERROR(exec_->Read(p().step_counter, &start_step_, sizeof(start_step_)));
  if (start_step_ < 0 || start_step_ > kMaxSteps)
    return Status(ErrorCode::kInvalidArgument,
                  Printable(o_.resume) + ": its step counter graphc.step is " +
                      std::to_string(start_step_) + ", outside [0, " + std::to_string(kMaxSteps) +
                      "]");
  out_ << "resumed from " << Printable(o_.resume) << " at step " << start_step_ << "\n";
  if (p().average_updates >= 0 && start_step_ > 0) {
    int64_t updates = 0;
    GRAPHC_RETURN_IF_ERROR(exec_->Read(p().average_updates, &updates, sizeof(updates)));
    if (updates == 0)
      out_ << "the weights' average starts here: the checkpoint has none (saved without "
              "--ema-decay), so the first step copies the weights\n";
  }
  if (fresh > 0) {
    bool topk = false;
    for (const fb::State* state : *root_.states())
      topk |= StringOf(exec_->buffer(state->buffer()).name()).rfind("graphc.dgc.", 0) == 0;
    if (topk)
      out_ << "top-k starts here: the checkpoint has none of its " << fresh
           << " states (saved without --grad-compression=topk), so the accumulation starts "
              "at zero (the momentum buffers carry on)\n";
    else
      out_ << "PowerSGD starts here: the checkpoint has none of its " << fresh
           << " states (saved without --grad-compression=powersgd), so the errors start at "
              "zero and Q as initialized\n";
  }
  // The data order continues where the saved run was only with the same
  // global batch and seed (the shuffle, synthetic data and dropout masks
  // follow the seed); otherwise the run trains on, but says so.
  const std::string global = std::to_string(p().batch * ranks_), seed = std::to_string(o_.seed);
  auto saved = [&](const char* key) {
    auto it = metadata.find(key);
    return it == metadata.end() ? std::string() : it->second;
  };
  std::string differs;
  if (!saved("graphc.global_batch_size").empty() && saved("graphc.global_batch_size") != global)
    differs += "a global batch of " + Printable(saved("graphc.global_batch_size")) +
               " (this run: " + global + ")";
  if (!saved("graphc.seed").empty() && saved("graphc.seed") != seed)
    differs += (differs.empty() ? "" : " and ") + std::string("seed ") +
               Printable(saved("graphc.seed")) + " (this run: " + seed + ")";
  if (!differs.empty())
    out_ << "note: " << Printable(o_.resume) << " was saved with " << differs
         << ", so the data order does not continue where it stopped\n";
  return Status::Ok();
}

Status Trainer::JoinRanks() {
  // The number of ranks, where the plan reads it (synchronized batch norm's
  // global batch): set on every run, whatever a checkpoint says.
  if (p().world_size >= 0) {
    const float world = static_cast<float>(ranks_);
    GRAPHC_RETURN_IF_ERROR(exec_->Write(p().world_size, &world, sizeof(world)));
  }
  if (p().rank_state >= 0) {
    const int64_t mine = rank_;
    GRAPHC_RETURN_IF_ERROR(exec_->Write(p().rank_state, &mine, sizeof(mine)));
  }
  if (ranks_ > 1) GRAPHC_RETURN_IF_ERROR(CheckSameStateOnEveryRank(*exec_, comm_));
  StatusOr<std::unique_ptr<DeviceCollectives>> device_collectives =
      SetUpDeviceCollectives(backend_, comm_, o_, collectives_how_);
  if (!device_collectives.ok()) return device_collectives.status();
  device_collectives_ = std::move(*device_collectives);
  exec_->set_device_collectives(device_collectives_.get());
  return Status::Ok();
}

Status Trainer::OpenData() {
  // The sources make batches of the global batch; each rank takes its shard.
  std::vector<int64_t> global_shape = p().image_shape;
  global_shape[0] *= ranks_;
  DataOptions data_options;
  data_options.threads = std::max(1, o_.data_threads);
  data_options.augmentation =
      o_.augment == "none" ? Augmentation::kResize : Augmentation::kImageNet;
  data_options.eval_spec = o_.eval_data;
  data_options.pixels_u8 = p().images_u8;
  StatusOr<DataSources> data =
      CreateDataSources(o_.data, global_shape, p().classes, o_.eval, o_.seed, data_options);
  if (!data.ok()) return data.status();
  data_ = std::make_unique<DataSources>(std::move(*data));
  BatchSource& source = *data_->train;
  source.set_flip(o_.flip);
  source.set_strict(o_.strict_data);
  if (data_->test) data_->test->set_strict(o_.strict_data);
  GRAPHC_RETURN_IF_ERROR(source.SetShard(rank_, ranks_));
  if (data_->test) GRAPHC_RETURN_IF_ERROR(data_->test->SetShard(rank_, ranks_));

  steps_ = o_.steps;
  if (o_.epochs > 0 && (__builtin_mul_overflow(o_.epochs, source.batches_per_epoch(), &steps_) ||
                        steps_ > kMaxSteps))
    return Status(ErrorCode::kInvalidArgument,
                  "--epochs " + std::to_string(o_.epochs) + " is more than " +
                      std::to_string(kMaxSteps) + " steps of " +
                      std::to_string(source.batches_per_epoch()) + " batches per epoch");
  if (steps_ < 0) steps_ = 100;
  if (start_step_ > kMaxSteps - steps_)
    return Status(ErrorCode::kInvalidArgument,
                  "resuming at step " + std::to_string(start_step_) + " for " +
                      std::to_string(steps_) + " more steps passes " + std::to_string(kMaxSteps));
  warmup_ = std::min<int64_t>(o_.warmup, std::max<int64_t>(steps_ - 1, 0));
  out_ << "model: " << PrintableOf(root_.model()) << ", batch " << p().batch;
  if (root_.micro_batches() > 1)
    out_ << " (" << root_.micro_batches() << " micro-batches of "
         << p().batch / root_.micro_batches() << ")";
  if (ranks_ > 1) out_ << " per rank x " << ranks_ << " ranks = " << p().batch * ranks_;
  out_ << ", " << (root_.fused() ? "fused" : "unfused") << ", " << PrintableOf(root_.precision())
       << "; data: " << data_->name << " (" << source.examples() << " examples); " << steps_
       << " steps, " << warmup_ << " warmup\n";
  if (ranks_ > 1)
    out_ << "ranks: " << comm_.Describe() << "; allreduces: " << collectives_how_ << "\n";

  feeder_ = std::make_unique<InputFeeder>(backend_, *exec_, p().images, p().labels);
  clock_ = std::make_unique<StepClock>(backend_);
  GRAPHC_RETURN_IF_ERROR(feeder_->Initialize());
  return clock_->Initialize();
}

Status Trainer::Save(int64_t done) {
  // PowerSGD's error is each rank's own, but the training that follows
  // depends only on the ranks' mean of it (the factors are linear in the
  // mean of the ranks' M = G + E): the checkpoint holds that mean, so that a
  // job resumed on any number of ranks trains on as this one would. Top-k's
  // accumulation and momentum are each rank's own too; their mean keeps
  // their sum over ranks, every bit of gradient not yet sent (a resumed job
  // then selects from the mean, not from each rank's own). The ranks' own
  // states are put back after the write.
  std::vector<std::pair<int32_t, std::vector<float>>> own_errors;
  std::set<std::string> names;
  if (root_.states() != nullptr)
    for (const fb::State* state : *root_.states())
      names.insert(StringOf(exec_->buffer(state->buffer()).name()));
  // Top-k's momentum is its parameter's momentum_buffer.
  auto per_rank = [&](const std::string& name) {
    const std::string buffer = ".momentum_buffer";
    return IsPerRankCompressionState(name) ||
           (name.size() > buffer.size() &&
            name.compare(name.size() - buffer.size(), buffer.size(), buffer) == 0 &&
            names.count("graphc.dgc." + name.substr(0, name.size() - buffer.size()) +
                        ".accumulation"));
  };
  if (ranks_ > 1 && root_.states() != nullptr)
    for (const fb::State* state : *root_.states()) {
      const fb::Buffer& b = exec_->buffer(state->buffer());
      const std::string name = StringOf(b.name());
      if (!per_rank(name) || b.dtype() != fb::DType::F32) continue;
      std::vector<float> own(b.size() / 4);
      GRAPHC_RETURN_IF_ERROR(exec_->Read(state->buffer(), own.data(), b.size()));
      std::vector<double> mean(own.begin(), own.end());
      GRAPHC_RETURN_IF_ERROR(
          comm_.AllreduceDoubles("checkpoint: " + name, mean, ScalarReduction::kMean));
      std::vector<float> saved(mean.begin(), mean.end());
      GRAPHC_RETURN_IF_ERROR(exec_->Write(state->buffer(), saved.data(), b.size()));
      own_errors.emplace_back(state->buffer(), std::move(own));
    }
  Status written = WriteCheckpoint(done);
  for (auto& [buffer, own] : own_errors) {
    Status restored = exec_->Write(buffer, own.data(), own.size() * 4);
    if (!restored.ok()) return restored;
  }
  return written;
}

Status Trainer::WriteCheckpoint(int64_t done) {
  if (rank_ != 0) return Status::Ok();  // one writer; every rank holds the same parameters
  std::map<std::string, std::string> metadata = {
      {"format", "pt"},
      {"graphc.model", StringOf(root_.model())},
      {"graphc.step", std::to_string(start_step_ + done)},
      {"graphc.batch_size", std::to_string(p().batch)},
      {"graphc.global_batch_size", std::to_string(p().batch * ranks_)},
      {"graphc.seed", std::to_string(o_.seed)},
  };
  // So that a PowerSGD checkpoint stripped of those states is not taken for
  // an uncompressed plan's (which would start them fresh).
  if (root_.states() != nullptr)
    for (const fb::State* state : *root_.states())
      if (const std::string name = StringOf(exec_->buffer(state->buffer()).name());
          IsCompressionState(name))
        metadata[name.rfind("graphc.dgc.", 0) == 0 ? "graphc.dgc" : "graphc.powersgd"] =
            name.rfind("graphc.dgc.", 0) == 0 ? "accumulation and momentum"
                                              : "error feedback and Q";
  Status saved = SaveCheckpoint(*exec_, o_.save, metadata);
  if (saved.ok() && !terminal_)
    out_ << "saved " << Printable(o_.save) << " at step " << start_step_ + done << "\n";
  return saved;
}

Status Trainer::Collect(int64_t done) {
  window_ms_.clear();
  GRAPHC_RETURN_IF_ERROR(clock_->Collect(window_ms_));
  for (size_t i = 0; i < window_ms_.size(); ++i)
    if (timed_from_ + static_cast<int64_t>(i) >= warmup_) times_.Add(window_ms_[i]);
  timed_from_ = done;
  return Status::Ok();
}

Status Trainer::ReadAndCheck(int64_t done) {
  const int64_t step = start_step_ + done;
  GRAPHC_RETURN_IF_ERROR(exec_->Read(p().loss, &loss_, sizeof(loss_)));
  // The loss of the global batch: the mean of the ranks' (each a mean over
  // its shard), so that every rank takes the same decisions below.
  if (ranks_ > 1) {
    std::vector<double> mean = {double(loss_)};
    GRAPHC_RETURN_IF_ERROR(comm_.AllreduceDoubles("the loss of step " + std::to_string(step),
                                                  mean, ScalarReduction::kMean));
    loss_ = static_cast<float>(mean[0]);
  }
  if (scaled_) {
    GRAPHC_RETURN_IF_ERROR(exec_->Read(p().loss_scale, &loss_scale_, sizeof(loss_scale_)));
    GRAPHC_RETURN_IF_ERROR(exec_->Read(p().skipped_steps, &skipped_, sizeof(skipped_)));
  }
  if (p().grad_norm >= 0)
    GRAPHC_RETURN_IF_ERROR(exec_->Read(p().grad_norm, &grad_norm_, sizeof(grad_norm_)));
  // With loss scaling a non-finite loss is an overflowed step, skipped on
  // the device; the state check below still stops a real divergence, and a
  // scale down at its floor, or no update applied for kStalledSteps steps,
  // is one too.
  if (!std::isfinite(loss_) && (!scaled_ || loss_scale_ <= 1.0f))
    return Diverged(step, "the loss is " + std::to_string(loss_) +
                              (scaled_ ? " with the loss scale at its floor of 1" : ""));
  if (scaled_) {
    if (done - last_read_done_ > skipped_ - last_read_skipped_) last_applied_done_ = done;
    last_read_done_ = done;
    last_read_skipped_ = skipped_;
    if (done - last_applied_done_ >= kStalledSteps)
      return Diverged(step, "no step applied its update in the last " +
                                std::to_string(done - last_applied_done_) +
                                " steps: every one overflowed (loss scale " +
                                std::to_string(loss_scale_) + ")");
  }
  // A parameter or batch-norm statistic gone NaN stops the run here, named,
  // before it can reach a checkpoint or a report.
  Status status = exec_->CheckStateFinite();
  if (ranks_ > 1) {
    // Decided together: one rank's non-finite batch-norm statistic stops
    // every rank here, not just its own (the others would wait for it in the
    // next collective).
    std::vector<double> failed = {status.ok() ? 0.0 : double(rank_ + 1)};
    GRAPHC_RETURN_IF_ERROR(comm_.AllreduceDoubles(
        "the state check of step " + std::to_string(step), failed, ScalarReduction::kMax));
    if (status.ok() && failed[0] > 0)
      return Diverged(step, "rank " + std::to_string(int(failed[0]) - 1) +
                                "'s state holds NaN or infinity (that rank names the tensor)");
  }
  if (!status.ok()) return Diverged(step, status.message());
  return Status::Ok();
}

void Trainer::Display(int64_t done) {
  const Speed s = SpeedOf(times_.Rates());
  if (terminal_) out_ << "\r\033[K";
  out_ << done << "\timages/sec: " << std::fixed << std::setprecision(1);
  if (times_.ms.empty())
    out_ << "(warmup)";
  else
    out_ << s.mean << " +/- " << s.error << " (jitter = " << s.jitter << ")";
  out_ << "\t" << std::setprecision(3) << loss_ << std::defaultfloat;
  // The scale in full (a power of two under dynamic scaling).
  if (scaled_) out_ << "\t" << std::setprecision(9) << loss_scale_ << "\t" << skipped_;
  if (p().grad_norm >= 0) out_ << "\t" << std::setprecision(4) << grad_norm_;
  out_ << "\n";
}

Status Trainer::Loop() {
  // Under mpirun stdout is a pseudo-terminal even when the user's is not:
  // progress lines only for a single process.
  terminal_ = ranks_ == 1 && isatty(STDOUT_FILENO) && &out_ == &std::cout;
  times_.batch = p().batch;
  scaled_ = p().loss_scale >= 0;
  BatchSource& source = *data_->train;
  source.Seek(start_step_);
  Prefetcher prefetch(source, o_.prefetch);
  out_ << "Step\tImg/sec\ttotal_loss" << (scaled_ ? "\tloss_scale\tskipped" : "")
       << (p().grad_norm >= 0 ? "\tgrad_norm" : "") << "\n";
  GRAPHC_RETURN_IF_ERROR(clock_->Start());
  for (int64_t step = 0; step < steps_; ++step) {
    const auto wait_from = std::chrono::steady_clock::now();
    const Batch& b = prefetch.Next();
    if (!b.error.empty()) return Status(ErrorCode::kIo, b.error);
    if (step >= warmup_)
      data_wait_s_ +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - wait_from).count();
    exec_->set_profiling(o_.profile && step >= warmup_);
    const bool tracing = !o_.trace.empty() && step >= warmup_ && step < warmup_ + kTraceSteps;
    exec_->set_tracing(tracing);
    const double step_from = exec_->MicrosecondsSinceCreation();
    GRAPHC_RETURN_IF_ERROR(feeder_->Feed(b));
    GRAPHC_RETURN_IF_ERROR(exec_->Enqueue(p().train));
    if (tracing) {
      GRAPHC_RETURN_IF_ERROR(backend_.Synchronize());
      traced_steps_.emplace_back(step_from, exec_->MicrosecondsSinceCreation());
    }
    GRAPHC_RETURN_IF_ERROR(clock_->StepDone());
    const int64_t done = step + 1;
    const bool display = done % o_.display_every == 0 || done == steps_;
    const bool saving =
        !o_.save.empty() && (done == steps_ || (o_.save_every > 0 && done % o_.save_every == 0));
    if (!display && !saving && !clock_->full()) {
      if (terminal_) out_ << "\r\033[K" << done << "/" << steps_ << std::flush;
      continue;
    }
    GRAPHC_RETURN_IF_ERROR(Collect(done));
    if (display || saving) GRAPHC_RETURN_IF_ERROR(ReadAndCheck(done));
    if (display)
      Display(done);
    else if (terminal_)
      out_ << "\r\033[K" << done << "/" << steps_ << "  loss " << loss_ << std::flush;
    if (saving) GRAPHC_RETURN_IF_ERROR(Save(done));
    GRAPHC_RETURN_IF_ERROR(clock_->Start());
  }
  if (device_collectives_) GRAPHC_RETURN_IF_ERROR(device_collectives_->Finalize());
  exec_->set_device_collectives(nullptr);
  exec_->set_tracing(false);
  return Status::Ok();
}

Status Trainer::Finish() {
  if (!o_.trace.empty()) {
    const std::string path = TracePathOf(o_.trace, rank_, ranks_);
    GRAPHC_RETURN_IF_ERROR(WriteFileAtomically(
        path, TraceJson(*exec_, plan_, rank_, ranks_, traced_steps_, warmup_)
                      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
                  "\n"));
    out_ << "trace: " << traced_steps_.size() << " steps in " << Printable(path)
         << (ranks_ > 1 ? " (and one file per other rank)" : "")
         << " (open it in chrome://tracing or ui.perfetto.dev)\n";
  }
  // --steps 0 --save FILE: the initial state, exactly as the first step sees it.
  if (steps_ == 0 && !o_.save.empty()) GRAPHC_RETURN_IF_ERROR(Save(0));
  // No display step read the scale (no step ran): the report gives the initial one.
  if (steps_ == 0 && scaled_) {
    GRAPHC_RETURN_IF_ERROR(exec_->Read(p().loss_scale, &loss_scale_, sizeof(loss_scale_)));
    GRAPHC_RETURN_IF_ERROR(exec_->Read(p().skipped_steps, &skipped_, sizeof(skipped_)));
  }
  const double rank_rate = times_.TotalImagesPerSecond();
  const double median_ms = times_.MedianMs(), p90_ms = times_.P90Ms();
  // Per rank: images/sec over the timed steps, and the seconds its steps
  // spent blocked on collectives.
  StatusOr<std::vector<double>> per_rank = comm_.AllgatherDoubles(
      "the per-rank throughput", {rank_rate,
                                  times_.ms.empty() ? 0.0 : p().batch * 1000.0 / median_ms,
                                  comm_.seconds_waiting()});
  if (!per_rank.ok()) return per_rank.status();
  double total_rate = 0;
  std::vector<double> rank_rates, rank_median_rates, rank_waits;
  for (int r = 0; r < ranks_; ++r) {
    rank_rates.push_back((*per_rank)[3 * r]);
    rank_median_rates.push_back((*per_rank)[3 * r + 1]);
    rank_waits.push_back((*per_rank)[3 * r + 2]);
    total_rate += rank_rates.back();
  }
  out_ << "----------------------------------------------------------------\n"
       << "total images/sec: " << std::fixed << std::setprecision(2) << total_rate;
  if (ranks_ > 1) {
    out_ << " (" << ranks_ << " ranks; per rank:";
    for (double r : rank_rates) out_ << " " << r;
    out_ << "; blocked on collectives:";
    for (double w : rank_waits) out_ << " " << w << " s";
    out_ << ")";
  }
  out_ << "\n"
       << "step time: median " << median_ms << " ms, p90 " << p90_ms << " ms over "
       << times_.ms.size() << " timed steps" << (ranks_ > 1 ? " (rank 0)" : "") << "\n";
  if (data_->name != "synthetic" && !times_.ms.empty())
    out_ << "input: each timed step waited " << std::setprecision(2)
         << 1000.0 * data_wait_s_ / times_.ms.size() << " ms for its batch (the pipeline's "
         << "share of the step: " << std::setprecision(1)
         << 100.0 * data_wait_s_ /
                std::max(1e-9, std::accumulate(times_.ms.begin(), times_.ms.end(), 0.0) / 1000.0)
         << "%)" << (ranks_ > 1 ? " (rank 0)" : "") << "\n";
  out_
       << "peak memory: " << std::setprecision(1) << PeakRssMib() << " MiB resident on the host"
       << (ranks_ > 1 ? " (rank 0)" : "") << "; the plan's arena "
       << root_.arena_size() / 1048576.0 << " MiB, state " << root_.state_size() / 1048576.0
       << " MiB" << (std::string(backend_.name()) == "cpu" ? "" : " (on the device)") << "\n"
       << "final loss: ";
  if (steps_ == 0)
    out_ << "none (no step run)\n";
  else
    out_ << std::setprecision(4) << loss_ << std::defaultfloat << "\n";

  nlohmann::json profile;
  if (!o_.predict.ranks.empty() && times_.ms.empty())
    out_ << "prediction: none (no step was timed: --predict needs more steps than --warmup)\n";
  if (o_.profile && !times_.ms.empty()) {
    exec_->set_profiling(false);
    const fb::Program& step_program = exec_->program(p().train);
    profile = PrintProfile(root_, step_program, exec_->command_seconds(p().train),
                           times_.ms.size(), out_);
    // Each command's time per step, for graphrun --predict --step-profile.
    MeasuredStep measured;
    for (double s : exec_->command_seconds(p().train))
      measured.command_ms.push_back(s * 1000.0 / static_cast<double>(times_.ms.size()));
    profile["commands"] = CommandProfileJson(root_, step_program, measured.command_ms);
    if (!o_.predict.ranks.empty()) {
      measured.step_ms = median_ms;
      measured.jitter_ms = StepJitterMs(times_.ms);
      measured.batch = p().batch;
      measured.device = backend_.name();
      measured.source = "this run";
      StatusOr<nlohmann::json> predicted =
          PredictScaling(root_, step_program, measured, o_.predict, out_);
      if (!predicted.ok()) return predicted.status();
      prediction_ = std::move(*predicted);
    }
  }

  double accuracy = -1, average_accuracy = -1;
  int64_t evaluated = 0;
  if (o_.eval) {
    if (p().eval < 0)
      return Status(ErrorCode::kInvalidArgument, "the plan has no program 'eval_step'");
    if (ranks_ > 1) GRAPHC_RETURN_IF_ERROR(BroadcastPlainState(*exec_, comm_));
    StatusOr<double> evaluation = Evaluate(*exec_, p(), *data_->test, comm_, &evaluated);
    if (!evaluation.ok()) return evaluation.status();
    accuracy = *evaluation;
    out_ << "test accuracy: " << std::setprecision(4) << std::fixed << accuracy
         << std::defaultfloat << " (" << evaluated << " of " << data_->test->examples()
         << " test examples";
    // A skipped image's place went to the next one, counted twice.
    if (const int64_t skipped = data_->test->skipped(); skipped > 0)
      out_ << "; " << skipped << " undecodable, each replaced by the next image";
    out_ << ")\n";
    if (p().eval_average >= 0) {
      // The same test batches again, on the weights' average; before its
      // first update the average is the weights themselves (PyTorch's
      // AveragedModel starts as a copy), whose accuracy is the line above.
      int64_t updates = 0, averaged = evaluated;
      GRAPHC_RETURN_IF_ERROR(exec_->Read(p().average_updates, &updates, sizeof(updates)));
      average_accuracy = accuracy;
      if (updates > 0) {
        StatusOr<double> on_average =
            Evaluate(*exec_, p(), *data_->test, comm_, &averaged, /*average=*/true);
        if (!on_average.ok()) return on_average.status();
        average_accuracy = *on_average;
      }
      out_ << "test accuracy of the weights' average: " << std::setprecision(4) << std::fixed
           << average_accuracy << std::defaultfloat << " (" << averaged << " of "
           << data_->test->examples() << " test examples"
           << (updates > 0 ? ")" : "; no step has updated it yet: the weights themselves)")
           << "\n";
    }
  }
  const int64_t skipped = data_->train->skipped() + (data_->test ? data_->test->skipped() : 0);
  if (skipped > 0)
    out_ << "skipped images: " << skipped << " (undecodable; each named on stderr)\n";
  out_ << "----------------------------------------------------------------\n";
  if (o_.report.empty() || rank_ != 0) return Status::Ok();
  return WriteReport(total_rate, median_ms, p90_ms, rank_rates, rank_median_rates, rank_waits,
                     profile, accuracy, evaluated, average_accuracy);
}

Status Trainer::WriteReport(double total_rate, double median_ms, double p90_ms,
                            const std::vector<double>& rank_rates,
                            const std::vector<double>& rank_median_rates,
                            const std::vector<double>& rank_waits,
                            const nlohmann::json& profile, double accuracy, int64_t evaluated,
                            double average_accuracy) {
  const fb::Program& step_program = exec_->program(p().train);
  nlohmann::json j = {
      {"model", StringOf(root_.model())},
      {"device", backend_.name()},
      {"device_description", backend_.Describe()},
      {"data", data_->name},
      {"batch_size", p().batch},
      {"steps", steps_},
      {"warmup", warmup_},
      {"fused", root_.fused()},
      {"kernel_launches_per_step",
       std::count_if(step_program.commands()->begin(), step_program.commands()->end(),
                     [](const fb::Command* c) { return c->op() == fb::Opcode::Kernel; })},
      {"precision", StringOf(root_.precision())},
      {"images_per_sec", times_.ms.empty() ? 0.0 : p().batch * 1000.0 / median_ms},
      {"images_per_sec_mean", SpeedOf(times_.Rates()).mean},
      {"total_images_per_sec", total_rate},
      {"step_ms_median", median_ms},
      {"step_ms_p90", p90_ms},
      {"peak_rss_mib", PeakRssMib()},
      {"arena_mib", root_.arena_size() / 1048576.0},
      {"final_loss", steps_ == 0 ? nlohmann::json() : nlohmann::json(loss_)},
      {"seed", o_.seed},
      {"cuda_graphs", exec_->replays_graph(p().train)},
  };
  j["step_ms_jitter"] = StepJitterMs(times_.ms);
  j["data_wait_ms_per_step"] = times_.ms.empty() ? 0.0 : 1000.0 * data_wait_s_ / times_.ms.size();
  j["skipped_images"] = data_->train->skipped() + (data_->test ? data_->test->skipped() : 0);
  j["world_size"] = ranks_;
  j["ranks_per_node"] = comm_.local_size();
  j["communicator"] = comm_.Describe();
  j["allreduces"] = collectives_how_;
  j["per_rank_images_per_sec"] = rank_median_rates;
  j["per_rank_total_images_per_sec"] = rank_rates;
  j["per_rank_collective_wait_seconds"] = rank_waits;
  j["global_batch_size"] = p().batch * ranks_;
  j["micro_batches"] = std::max<int64_t>(1, root_.micro_batches());
  if (scaled_) {
    j["loss_scale"] = loss_scale_;
    j["skipped_steps"] = skipped_;
  }
  if (p().grad_norm >= 0) j["grad_norm"] = grad_norm_;
  j["load_ms"] = load_ms_;
  if (!load_summary_.empty()) j["load_summary"] = load_summary_;
  if (!library_math_.empty()) j["library_math"] = library_math_;
  for (const auto& [key, value] : o_.report_extra.items()) j[key] = value;
  if (!profile.is_null()) j["profile"] = profile;
  if (!prediction_.is_null()) j["prediction"] = prediction_;
  if (o_.eval) {
    j["test_accuracy"] = accuracy;
    j["test_examples"] = evaluated;
    if (p().eval_average >= 0) j["test_accuracy_ema"] = average_accuracy;
  }
  // Names from the plan may not be UTF-8: replaced, not fatal.
  return WriteFileAtomically(
      o_.report, j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

}  // namespace

Status Train(const Plan& plan, Backend& backend, const TrainOptions& o, std::ostream& rank_out,
             Communicator* comm) {
  std::unique_ptr<Communicator> single;
  if (comm == nullptr) {
    single = NewSingleRankCommunicator();
    comm = single.get();
  }
  return Trainer(plan, backend, o, rank_out, *comm).Run();
}

}  // namespace graphc::runtime
