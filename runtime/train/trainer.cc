// The training loop (see trainer.h).
//
// Algorithm, per step s, on an asynchronous device:
//   1) the prefetch thread has the batch on the host; it is copied into
//      pinned slot s % 2 (after the copy that last used the slot finished),
//      and from there to a device staging slot on the copy stream;
//   2) the compute stream waits for that copy, moves the batch from staging
//      into the program's input buffers (which live in the arena, so they can
//      only be written once the previous step is done with them: the compute
//      stream's order guarantees it), and runs train_step;
//   3) an event marks the step's end; the host goes on to step s + 1 at once.
// The host waits for the device only to print (display steps), save, or
// collect step times (every kClockWindow steps), and reads the loss only then.
// On a synchronous device (the CPU) the batch is written straight into the
// input buffers: the staging would only add copies.

#include "runtime/train/trainer.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include "runtime/checkpoint.h"
#include "runtime/comm/communicator.h"
#include "runtime/data/dataset.h"
#include "runtime/data/sources.h"
#include "runtime/executor.h"
#include "runtime/files.h"
#include "runtime/train/report.h"

namespace graphc::runtime {
namespace {

// This process's peak resident memory so far, MiB (getrusage: KiB on Linux).
double PeakRssMib() {
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return usage.ru_maxrss / 1024.0;
}

// Moves each batch into the program's input buffers (see the algorithm above).
class InputFeeder {
 public:
  InputFeeder(Backend& backend, Executor& exec, int32_t images, int32_t labels)
      : backend_(backend), exec_(exec), buffers_{images, labels} {}
  ~InputFeeder() {
    if (!staged_) return;
    backend_.Synchronize();  // nothing may still read what is freed
    for (Slot& slot : slots_) {
      for (int i = 0; i < 2; ++i) {
        backend_.FreeHost(slot.host[i]);
        backend_.Free(slot.device[i]);
      }
      for (Event e : {slot.copied, slot.consumed}) backend_.DestroyEvent(e);
    }
  }

  Status Initialize() {
    if (!backend_.asynchronous()) return Status::Ok();
    staged_ = true;
    for (Slot& slot : slots_) {
      for (int i = 0; i < 2; ++i) {
        const uint64_t bytes = exec_.buffer(buffers_[i]).size();
        StatusOr<HostMemory> host = backend_.AllocateHost(bytes);
        if (!host.ok()) return host.status();
        slot.host[i] = *host;
        StatusOr<DeviceMemory> device = backend_.Allocate(bytes);
        if (!device.ok()) return device.status();
        slot.device[i] = *device;
      }
      for (Event* e : {&slot.copied, &slot.consumed}) {
        StatusOr<Event> event = backend_.CreateEvent(/*timed=*/false);
        if (!event.ok()) return event.status();
        *e = *event;
      }
    }
    return Status::Ok();
  }

  // Enqueues the copies that put `batch` into the input buffers, ordered
  // before whatever the compute stream runs next.
  Status Feed(const Batch& batch) {
    const void* data[2] = {batch.images.data(), batch.labels.data()};
    const uint64_t bytes[2] = {batch.images.size() * sizeof(float),
                               batch.labels.size() * sizeof(int32_t)};
    if (!staged_) {
      for (int i = 0; i < 2; ++i) {
        Status status = exec_.Write(buffers_[i], data[i], bytes[i]);
        if (!status.ok()) return status;
      }
      return Status::Ok();
    }
    Slot& slot = slots_[next_];
    next_ = 1 - next_;
    // The copy two steps ago that read this pinned slot, and the step that
    // read its staging buffer, are done once `consumed` is.
    if (slot.used) {
      Status status = backend_.SynchronizeEvent(slot.consumed);
      if (!status.ok()) return status;
    }
    slot.used = true;
    for (int i = 0; i < 2; ++i) {
      if (bytes[i] != slot.host[i].bytes)
        return Status(ErrorCode::kInvalidArgument,
                      "buffer '" + PrintableOf(exec_.buffer(buffers_[i]).name()) + "' holds " +
                          std::to_string(slot.host[i].bytes) + " bytes, not " +
                          std::to_string(bytes[i]));
      std::memcpy(slot.host[i].address, data[i], bytes[i]);
    }
    Status status;
    for (int i = 0; i < 2 && status.ok(); ++i)
      status = backend_.CopyToDeviceAsync(slot.device[i], slot.host[i], bytes[i], Stream::kCopy);
    if (status.ok()) status = backend_.RecordEvent(slot.copied, Stream::kCopy);
    if (status.ok()) status = backend_.WaitEvent(Stream::kCompute, slot.copied);
    for (int i = 0; i < 2 && status.ok(); ++i)
      status = backend_.CopyOnDevice(exec_.MemoryOf(buffers_[i]), slot.device[i], bytes[i],
                                     Stream::kCompute);
    if (status.ok()) status = backend_.RecordEvent(slot.consumed, Stream::kCompute);
    return status;
  }

 private:
  struct Slot {
    HostMemory host[2];      // images, labels (pinned)
    DeviceMemory device[2];  // their staging copies
    Event copied, consumed;
    bool used = false;
  };
  Backend& backend_;
  Executor& exec_;
  int32_t buffers_[2];
  bool staged_ = false;
  Slot slots_[2];
  int next_ = 0;
};

// Times steps with events on the compute stream: a step's time is from the
// previous step's end (or the window's start) to its own end, as the device
// saw it, so enqueueing ahead costs no accuracy and needs no host wait.
class StepClock {
 public:
  explicit StepClock(Backend& backend) : backend_(backend) {}
  ~StepClock() {
    for (Event e : events_) backend_.DestroyEvent(e);
  }
  Status Initialize() {
    for (int i = 0; i <= kClockWindow; ++i) {
      StatusOr<Event> event = backend_.CreateEvent(/*timed=*/true);
      if (!event.ok()) return event.status();
      events_.push_back(*event);
    }
    return Status::Ok();
  }
  // Marks the start of a window (after host work that is not a step's).
  Status Start() {
    pending_ = 0;
    return backend_.RecordEvent(events_[0], Stream::kCompute);
  }
  Status StepDone() { return backend_.RecordEvent(events_[++pending_], Stream::kCompute); }
  bool full() const { return pending_ == kClockWindow; }
  // Waits for the window's steps and appends their milliseconds to `ms`.
  Status Collect(std::vector<double>& ms) {
    if (pending_ == 0) return Status::Ok();
    Status status = backend_.SynchronizeEvent(events_[pending_]);
    if (!status.ok()) return status;
    for (int i = 1; i <= pending_; ++i) {
      StatusOr<double> elapsed = backend_.ElapsedMilliseconds(events_[i - 1], events_[i]);
      if (!elapsed.ok()) return elapsed.status();
      ms.push_back(*elapsed);
    }
    pending_ = 0;
    return Status::Ok();
  }

 private:
  Backend& backend_;
  std::vector<Event> events_;
  int pending_ = 0;
};

// Checks that `plan` has what training needs; fills the buffers it uses.
struct Programs {
  int train = -1, eval = -1;  // eval: -1 when the plan has none
  int32_t images = -1, labels = -1, loss = -1, correct = -1;
  int32_t step_counter = -1;  // graphc.step, where a resumed run continues
  // FP16 loss scaling (graphc compile --amp=fp16): the f32 scale and the i64
  // count of steps skipped on overflow; -1 without.
  int32_t loss_scale = -1, skipped_steps = -1;
  // The f32 number of ranks (graphc compile --sync-bn) and the i64 rank of
  // this process (dropout under data-parallel); -1 without.
  int32_t world_size = -1, rank_state = -1;
  std::vector<int64_t> image_shape;
  int64_t batch = 0, classes = 0;
};

StatusOr<Programs> FindPrograms(const Executor& exec) {
  Programs p;
  const fb::Plan& root = exec.plan().root();
  if (root.states())
    for (const fb::State* state : *root.states()) {
      const fb::Buffer& b = exec.buffer(state->buffer());
      const std::string name = StringOf(b.name());
      if (name == "graphc.step" && b.dtype() == fb::DType::I64 && b.size() == 8)
        p.step_counter = state->buffer();
      else if (name == "graphc.loss_scale" && b.dtype() == fb::DType::F32 && b.size() == 4)
        p.loss_scale = state->buffer();
      else if (name == "graphc.skipped_steps" && b.dtype() == fb::DType::I64 && b.size() == 8)
        p.skipped_steps = state->buffer();
      else if (name == "graphc.world_size" && b.dtype() == fb::DType::F32 && b.size() == 4)
        p.world_size = state->buffer();
      else if (name == "graphc.rank" && b.dtype() == fb::DType::I64 && b.size() == 8)
        p.rank_state = state->buffer();
    }
  if ((p.loss_scale < 0) != (p.skipped_steps < 0))
    return Status(ErrorCode::kUnsupported,
                  "the plan has only one of graphc.loss_scale and graphc.skipped_steps");
  StatusOr<int> train = exec.FindProgram("train_step");
  if (!train.ok()) return train.status();
  p.train = *train;
  const fb::Program& step = exec.program(p.train);
  if (step.inputs()->size() != 2 || step.outputs()->size() < 1)
    return Status(ErrorCode::kInvalidArgument,
                  "train_step must take (images, labels) and return the loss");
  p.images = step.inputs()->Get(0);
  p.labels = step.inputs()->Get(1);
  p.loss = step.outputs()->Get(0);
  p.image_shape = ShapeOf(exec.buffer(p.images));
  p.batch = p.image_shape.empty() ? 0 : p.image_shape[0];
  if (p.image_shape.size() != 4 || exec.buffer(p.images).dtype() != fb::DType::F32 ||
      exec.buffer(p.labels).dtype() != fb::DType::I32 ||
      exec.buffer(p.loss).dtype() != fb::DType::F32 || exec.buffer(p.loss).size() != 4)
    return Status(ErrorCode::kUnsupported,
                  "train_step must take f32 NCHW images and i32 labels and return an f32 loss");
  if (p.batch < 1 || root.batch_size() != p.batch ||
      ShapeOf(exec.buffer(p.labels)) != std::vector<int64_t>{p.batch})
    return Status(ErrorCode::kInvalidArgument,
                  "the plan says batch " + std::to_string(root.batch_size()) +
                      ", but train_step takes images " + ShapeString(p.image_shape) +
                      " and labels " + ShapeString(ShapeOf(exec.buffer(p.labels))));
  StatusOr<int> eval = exec.FindProgram("eval_step");
  if (eval.ok()) {
    const fb::Program& e = exec.program(*eval);
    // The same inputs as train_step, then the logits and the count of
    // correct predictions.
    if (e.inputs()->size() != 2 || e.outputs()->size() != 2 ||
        exec.buffer(e.inputs()->Get(0)).size() != exec.buffer(p.images).size() ||
        exec.buffer(e.inputs()->Get(1)).size() != exec.buffer(p.labels).size() ||
        exec.buffer(e.outputs()->Get(1)).dtype() != fb::DType::I64 ||
        exec.buffer(e.outputs()->Get(1)).size() != 8)
      return Status(ErrorCode::kUnsupported,
                    "eval_step must take train_step's images and labels and return the logits "
                    "and an i64 count of correct predictions");
    p.eval = *eval;
    p.correct = e.outputs()->Get(1);
    std::vector<int64_t> logits = ShapeOf(exec.buffer(e.outputs()->Get(0)));
    if (logits.size() != 2 || logits[0] != p.batch || logits[1] < 1 ||
        exec.buffer(e.outputs()->Get(0)).dtype() != fb::DType::F32)
      return Status(ErrorCode::kUnsupported,
                    "eval_step's logits must be f32 [batch " + std::to_string(p.batch) +
                        ", classes], got " + ShapeString(logits));
    p.classes = logits[1];
  }
  if (p.classes <= 0)
    return Status(ErrorCode::kUnsupported,
                  "cannot tell the number of classes: the plan has no eval_step returning "
                  "[batch, classes] logits");
  return p;
}

// Whole batches of the test split (the remainder is dropped): the fraction
// eval_step counts correct.
// With several ranks each evaluates its shard of every batch and the counts
// are summed.
StatusOr<double> Evaluate(Executor& exec, const Programs& p, BatchSource& test,
                          Communicator& comm, int64_t* evaluated) {
  const fb::Program& e = exec.program(p.eval);
  int64_t correct_total = 0;
  *evaluated = 0;
  Batch b;
  for (int64_t i = 0; i < test.batches_per_epoch(); ++i) {
    test.Next(b);
    int64_t correct = 0;
    Status status =
        exec.Write(e.inputs()->Get(0), b.images.data(), b.images.size() * sizeof(float));
    if (status.ok()) status = exec.Write(e.inputs()->Get(1), b.labels.data(), b.labels.size() * 4);
    if (status.ok()) status = exec.Run(p.eval);
    if (status.ok()) status = exec.Read(p.correct, &correct, sizeof(correct));
    if (!status.ok()) return status;
    correct_total += correct;
    *evaluated += p.batch;
  }
  std::vector<double> counts = {double(correct_total), double(*evaluated)};
  Status summed = comm.AllreduceDoubles("the test accuracy's counts", counts,
                                        ScalarReduction::kSum);
  if (!summed.ok()) return summed;
  *evaluated = static_cast<int64_t>(counts[1]);
  return *evaluated ? counts[0] / *evaluated : 0.0;
}

// FNV-1a over every state tensor's bytes (but the rank's own number), as two
// exact 32-bit halves.
StatusOr<std::vector<double>> StateChecksum(const Executor& exec) {
  uint64_t hash = 0xcbf29ce484222325ull;
  const fb::Plan& root = exec.plan().root();
  std::vector<uint8_t> bytes;
  if (root.states())
    for (const fb::State* state : *root.states()) {
      if (StringOf(exec.buffer(state->buffer()).name()) == "graphc.rank") continue;
      bytes.resize(exec.buffer(state->buffer()).size());
      Status read = exec.Read(state->buffer(), bytes.data(), bytes.size());
      if (!read.ok()) return read;
      for (uint8_t byte : bytes) hash = (hash ^ byte) * 0x100000001b3ull;
    }
  return std::vector<double>{double(hash >> 32), double(hash & 0xffffffffu)};
}

// The ranks' number for "the same device": a hash (52 bits, exact in a
// double) of the host's name and the device's id there (a GPU's UUID).
double DeviceKey(const Backend& backend) {
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  const std::string key = std::string(host) + "/" + backend.device_id();
  uint64_t hash = 0xcbf29ce484222325ull;  // FNV-1a
  for (unsigned char c : key) hash = (hash ^ c) * 0x100000001b3ull;
  return static_cast<double>(hash & ((uint64_t{1} << 52) - 1));
}

// The device collectives every rank of the job uses, or none (the
// communicator's host allreduces; an asynchronous device stages its buckets
// through host memory), decided by every rank alike. `how` says which, for
// the user.
StatusOr<std::unique_ptr<DeviceCollectives>> SetUpDeviceCollectives(Backend& backend,
                                                                   Communicator& comm,
                                                                   const TrainOptions& o,
                                                                   std::string& how) {
  const int rank = comm.rank(), ranks = comm.size();
  how = "mpi";
  if (ranks == 1 || o.collectives == "mpi") {
    if (backend.asynchronous()) how += " (host-staged)";
    return std::unique_ptr<DeviceCollectives>();
  }
  // NCCL refuses two ranks on one GPU (the lent machines have one each).
  const double mine = DeviceKey(backend);
  StatusOr<std::vector<double>> keys = comm.AllgatherDoubles("the ranks' devices", {mine});
  if (!keys.ok()) return keys.status();
  bool shared = false;
  for (int r = 0; r < ranks; ++r) shared |= r != rank && (*keys)[r] == mine;
  CommOptions options;
  options.timeout_seconds = o.collective_timeout;
  StatusOr<std::unique_ptr<DeviceCollectives>> made = backend.NewCollectives(options, shared);
  StatusOr<std::vector<double>> votes =
      comm.AllgatherDoubles("the device collectives", {made.ok() ? 1.0 : 0.0});
  if (!votes.ok()) return votes.status();
  std::vector<int> without;
  for (int r = 0; r < ranks; ++r)
    if ((*votes)[r] == 0) without.push_back(r);
  Status fallback;
  if (!without.empty()) {
    std::string ranks_text;
    for (int r : without) ranks_text += (ranks_text.empty() ? "" : ",") + std::to_string(r);
    fallback = Status(made.ok() ? ErrorCode::kUnavailable : made.status().code(),
                      "rank(s) " + ranks_text + " have no NCCL" +
                          (made.ok() ? std::string() : " (here: " + made.status().message() + ")"));
  } else {
    fallback = (*made)->Join(comm);
    if (fallback.ok()) {
      how = (*made)->Describe() + " (device buffers)";
      return std::move(*made);
    }
  }
  if (o.collectives == "nccl")
    return Status(fallback.code(), "--collectives nccl: " + fallback.message());
  // A job of CPU ranks has nothing to fall back from.
  if (backend.asynchronous()) how += " (host-staged: " + fallback.message() + ")";
  return std::unique_ptr<DeviceCollectives>();
}

// Every rank must start from the same parameters and optimizer state (the same
// seed, or the same checkpoint): checked once, by comparing checksums.
Status CheckSameStateOnEveryRank(const Executor& exec, Communicator& comm) {
  StatusOr<std::vector<double>> mine = StateChecksum(exec);
  if (!mine.ok()) return mine.status();
  StatusOr<std::vector<double>> all =
      comm.AllgatherDoubles("the initial state's checksum", *mine);
  if (!all.ok()) return all.status();
  std::string differing;
  for (int r = 1; r < comm.size(); ++r)
    if ((*all)[2 * r] != (*all)[0] || (*all)[2 * r + 1] != (*all)[1])
      differing += (differing.empty() ? "" : ", ") + std::to_string(r);
  if (differing.empty()) return Status::Ok();
  return Status(ErrorCode::kInvalidArgument,
                "the initial state of rank(s) " + differing +
                    " differs from rank 0's: every rank must start from the same seed or the "
                    "same checkpoint");
}

// Batch-norm running statistics follow each rank's own batches; before an
// evaluation every rank takes rank 0's (PyTorch DDP's broadcast_buffers), so
// that the ranks evaluate one model.
Status BroadcastPlainState(Executor& exec, Communicator& comm) {
  const fb::Plan& root = exec.plan().root();
  if (root.states() == nullptr) return Status::Ok();
  // A model's own plain states (batch-norm statistics): not graphc's
  // (graphc.*) and not an optimizer's (named after their parameter).
  std::set<std::string> parameters;
  for (const fb::State* state : *root.states())
    if (state->trainable()) parameters.insert(StringOf(exec.buffer(state->buffer()).name()));
  auto optimizer_state = [&](const std::string& name) {
    const size_t dot = name.rfind('.');
    return dot != std::string::npos && parameters.count(name.substr(0, dot));
  };
  std::vector<uint8_t> bytes;
  for (const fb::State* state : *root.states()) {
    const std::string name = StringOf(exec.buffer(state->buffer()).name());
    if (state->trainable() || name.rfind("graphc.", 0) == 0 || optimizer_state(name)) continue;
    const fb::Buffer& b = exec.buffer(state->buffer());
    bytes.resize(b.size());
    Status status = exec.Read(state->buffer(), bytes.data(), bytes.size());
    if (status.ok())
      status = comm.Broadcast("state '" + PrintableOf(b.name()) + "'", bytes.data(), bytes.size());
    if (status.ok()) status = exec.Write(state->buffer(), bytes.data(), bytes.size());
    if (!status.ok()) return status;
  }
  return Status::Ok();
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

}  // namespace

std::string TracePathOf(const std::string& path, int rank, int ranks) {
  if (ranks <= 1) return path;
  const size_t slash = path.rfind('/');
  const size_t dot = path.rfind('.');
  const std::string suffix = ".rank" + std::to_string(rank);
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash) || dot == 0 ||
      dot == slash + 1)
    return path + suffix;
  return path.substr(0, dot) + suffix + path.substr(dot);
}

namespace {

// The Chrome trace event format (one complete event, "ph": "X", per span;
// process = rank, threads = tracks), which chrome://tracing and Perfetto read.
nlohmann::json TraceJson(const Executor& exec, const Plan& plan, int rank, int ranks,
                         const std::vector<std::pair<double, double>>& steps,
                         int64_t first_step) {
  nlohmann::json events = nlohmann::json::array();
  const std::string process = ranks > 1 ? "rank " + std::to_string(rank) : "graphrun";
  events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", rank},
                    {"args", {{"name", process}}}});
  const char* tracks[] = {"compute (kernels, library calls, waits)",
                          "collectives (allreduce in flight)", "steps"};
  for (int t = 0; t < 3; ++t)
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", rank}, {"tid", t},
                      {"args", {{"name", tracks[t]}}}});
  const fb::Program* train = nullptr;
  for (const fb::Program* p : *plan.root().programs())
    if (StringOf(p->name()) == "train_step") train = p;
  for (const Executor::TraceSpan& span : exec.trace()) {
    nlohmann::json args = {{"command", span.command}};
    if (train && span.command >= 0 &&
        static_cast<uint32_t>(span.command) < train->commands()->size()) {
      const fb::Command* c = train->commands()->Get(span.command);
      if (c->location() && c->location()->size()) args["location"] = PrintableOf(c->location());
    }
    events.push_back({{"ph", "X"}, {"name", span.name}, {"cat", span.category},
                      {"pid", rank}, {"tid", span.track}, {"ts", span.start_us},
                      {"dur", span.duration_us}, {"args", args}});
  }
  for (size_t s = 0; s < steps.size(); ++s)
    events.push_back({{"ph", "X"}, {"name", "step " + std::to_string(first_step + s + 1)},
                      {"cat", "step"}, {"pid", rank}, {"tid", 2}, {"ts", steps[s].first},
                      {"dur", steps[s].second - steps[s].first}});
  return {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
}

}  // namespace

Status CheckOutputs(const TrainOptions& o, int rank, int ranks) {
  std::vector<std::pair<std::string, std::string>> inputs = {{"the plan", o.plan_path},
                                                             {"--resume", o.resume}};
  for (const std::string& path : DataFiles(o.data)) inputs.emplace_back("--data", path);
  std::stringstream keys(o.trusted_keys);
  for (std::string path; std::getline(keys, path, ',');)
    inputs.emplace_back("--trusted-keys", path);
  // Every file the job writes, and which rank writes it: rank 0 --save and
  // --report, every rank its own --trace file.
  struct Output {
    std::string flag, path;
    int writer;
  };
  std::vector<Output> outputs;
  if (!o.save.empty()) outputs.push_back({"--save", o.save, 0});
  if (!o.report.empty()) outputs.push_back({"--report", o.report, 0});
  if (!o.trace.empty())
    for (int r = 0; r < ranks; ++r)
      outputs.push_back({ranks > 1 ? "--trace (rank " + std::to_string(r) + "'s file)" : "--trace",
                         TracePathOf(o.trace, r, ranks), r});
  // Only a regular file may be replaced (this rank's outputs), never a file
  // the run reads (any rank's outputs, so that every rank refuses; --save may
  // be --resume's file: it is replaced only once the run has read it).
  std::vector<std::pair<std::string, std::string>> input_identities;
  for (const auto& [what, input] : inputs)
    if (!input.empty()) input_identities.emplace_back(what, FileIdentity(input));
  for (const Output& out : outputs) {
    if (out.writer == rank) {
      Status replaceable = CheckReplaceable(out.path);
      if (!replaceable.ok())
        return Status(replaceable.code(), out.flag + ": " + replaceable.message());
    }
    const std::string identity = FileIdentity(out.path);
    for (const auto& [what, input_identity] : input_identities)
      if (!(out.flag == "--save" && what == "--resume") && input_identity == identity)
        return Status(ErrorCode::kInvalidArgument,
                      out.flag + " " + Printable(out.path) + " is " +
                          (what == "the plan" ? "the plan" : "the file " + what + " reads") +
                          "; refusing to overwrite it");
  }
  // No two of the job's outputs are one file (every rank checks all of them,
  // so all refuse together; one identity each, so a job of many ranks costs
  // one lookup per file).
  std::map<std::string, size_t> seen;
  for (size_t b = 0; b < outputs.size(); ++b) {
    auto [it, fresh] = seen.emplace(FileIdentity(outputs[b].path), b);
    if (!fresh)
      return Status(ErrorCode::kInvalidArgument, outputs[it->second].flag + " and " +
                                                     outputs[b].flag + " name the same file, " +
                                                     Printable(outputs[it->second].path));
  }
  if (!o.save.empty() && rank == 0) {
    // Fail now, not after the first K steps.
    const std::string dir = DirectoryOf(o.save);
    if (access(dir.c_str(), W_OK) != 0)
      return Status(ErrorCode::kIo,
                    "--save " + Printable(o.save) + ": cannot write to " + Printable(dir));
  }
  return Status::Ok();
}

Status Train(const Plan& plan, Backend& backend, const TrainOptions& o, std::ostream& rank_out,
             Communicator* comm_arg) {
  const fb::Plan& root = plan.root();
  std::unique_ptr<Communicator> single;
  if (comm_arg == nullptr) single = NewSingleRankCommunicator();
  Communicator& comm = comm_arg ? *comm_arg : *single;
  const int rank = comm.rank(), ranks = comm.size();
  NullBuffer null_buffer;
  std::ostream null_out(&null_buffer);
  std::ostream& out = rank == 0 ? rank_out : null_out;
  Status status = CheckOutputs(o, rank, ranks);
  if (!status.ok()) return status;
  const auto load_started = std::chrono::steady_clock::now();
  StatusOr<std::unique_ptr<Executor>> created = Executor::Create(plan, backend);
  if (!created.ok()) return created.status();
  Executor& exec = **created;
  // Loading: memory, kernels, the libraries' choices (cuDNN times its
  // algorithms here); then, for a mixed-precision plan, how this device runs
  // its half convolutions and gemms (natively, or emulated through fp32, and
  // why), which the backend knows once it has prepared them.
  const double load_ms = std::chrono::duration<double, std::milli>(
                             std::chrono::steady_clock::now() - load_started)
                             .count();
  const std::string load_summary = backend.LoadSummary();
  out << "loaded in " << std::fixed << std::setprecision(0) << load_ms << std::defaultfloat
      << " ms" << (load_summary.empty() ? "" : "; " + load_summary) << "\n";
  const std::string precision = StringOf(root.precision());
  std::string library_math;
  if (precision == "fp16" || precision == "bf16") {
    library_math = backend.LibraryMath(precision == "fp16" ? fb::DType::F16 : fb::DType::BF16);
    out << "library math: " << library_math << "\n";
  }
  exec.set_sync_debug(o.sync_debug);
  exec.set_graphs(o.graphs);
  exec.set_communicator(&comm);
  status = exec.InitializeState(o.seed);
  if (!status.ok()) return status;
  StatusOr<Programs> found = FindPrograms(exec);
  if (!found.ok()) return found.status();
  const Programs& p = *found;
  if (ranks > 1 && !exec.has_collectives(p.train))
    return Status(ErrorCode::kInvalidArgument,
                  "the plan averages no gradients across ranks (graphc compile "
                  "--no-data-parallel): " + std::to_string(ranks) +
                      " ranks would train " + std::to_string(ranks) +
                      " different models; compile it without --no-data-parallel");

  int64_t start_step = 0;
  if (!o.resume.empty()) {
    std::map<std::string, std::string> metadata;
    status = LoadCheckpoint(exec, o.resume, &metadata);
    if (status.ok() && p.step_counter >= 0)
      status = exec.Read(p.step_counter, &start_step, sizeof(start_step));
    if (!status.ok()) return status;
    if (start_step < 0 || start_step > kMaxSteps)
      return Status(ErrorCode::kInvalidArgument,
                    Printable(o.resume) + ": its step counter graphc.step is " +
                        std::to_string(start_step) + ", outside [0, " +
                        std::to_string(kMaxSteps) + "]");
    out << "resumed from " << Printable(o.resume) << " at step " << start_step << "\n";
    // The data order continues where the saved run was only with the same
    // global batch and seed (the shuffle, synthetic data and dropout masks
    // follow the seed); otherwise the run trains on, but says so.
    const std::string global = std::to_string(p.batch * ranks), seed = std::to_string(o.seed);
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
      out << "note: " << Printable(o.resume) << " was saved with " << differs
          << ", so the data order does not continue where it stopped\n";
  }
  // The number of ranks, where the plan reads it (synchronized batch norm's
  // global batch): set on every run, whatever a checkpoint says.
  if (p.world_size >= 0) {
    const float world = static_cast<float>(ranks);
    status = exec.Write(p.world_size, &world, sizeof(world));
    if (!status.ok()) return status;
  }
  if (p.rank_state >= 0) {
    const int64_t mine = rank;
    status = exec.Write(p.rank_state, &mine, sizeof(mine));
    if (!status.ok()) return status;
  }
  if (ranks > 1) {
    status = CheckSameStateOnEveryRank(exec, comm);
    if (!status.ok()) return status;
  }
  std::string collectives_how;
  StatusOr<std::unique_ptr<DeviceCollectives>> device_collectives =
      SetUpDeviceCollectives(backend, comm, o, collectives_how);
  if (!device_collectives.ok()) return device_collectives.status();
  exec.set_device_collectives(device_collectives->get());

  // The sources make batches of the global batch; each rank takes its shard.
  std::vector<int64_t> global_shape = p.image_shape;
  global_shape[0] *= ranks;
  StatusOr<DataSources> data = CreateDataSources(o.data, global_shape, p.classes, o.eval, o.seed);
  if (!data.ok()) return data.status();
  BatchSource& source = *data->train;
  source.set_flip(o.flip);
  status = source.SetShard(rank, ranks);
  if (status.ok() && data->test) status = data->test->SetShard(rank, ranks);
  if (!status.ok()) return status;

  int64_t steps = o.steps;
  if (o.epochs > 0 && (__builtin_mul_overflow(o.epochs, source.batches_per_epoch(), &steps) ||
                       steps > kMaxSteps))
    return Status(ErrorCode::kInvalidArgument,
                  "--epochs " + std::to_string(o.epochs) + " is more than " +
                      std::to_string(kMaxSteps) + " steps of " +
                      std::to_string(source.batches_per_epoch()) + " batches per epoch");
  if (steps < 0) steps = 100;
  if (start_step > kMaxSteps - steps)
    return Status(ErrorCode::kInvalidArgument,
                  "resuming at step " + std::to_string(start_step) + " for " +
                      std::to_string(steps) + " more steps passes " + std::to_string(kMaxSteps));
  const int64_t warmup = std::min<int64_t>(o.warmup, std::max<int64_t>(steps - 1, 0));
  out << "model: " << PrintableOf(root.model()) << ", batch " << p.batch;
  if (ranks > 1) out << " per rank x " << ranks << " ranks = " << p.batch * ranks;
  out << ", " << (root.fused() ? "fused" : "unfused") << ", " << PrintableOf(root.precision())
      << "; data: " << data->name << " (" << source.examples() << " examples); " << steps
      << " steps, " << warmup << " warmup\n";
  if (ranks > 1) out << "ranks: " << comm.Describe() << "; allreduces: " << collectives_how << "\n";

  InputFeeder feeder(backend, exec, p.images, p.labels);
  StepClock clock(backend);
  status = feeder.Initialize();
  if (status.ok()) status = clock.Initialize();
  if (!status.ok()) return status;

  // Under mpirun stdout is a pseudo-terminal even when the user's is not:
  // progress lines only for a single process.
  const bool terminal = ranks == 1 && isatty(STDOUT_FILENO) && &out == &std::cout;
  StepTimes times;
  times.batch = p.batch;
  std::vector<double> window_ms;
  int64_t timed_from = 0;  // the step the clock's window starts at
  float loss = 0;
  source.Seek(start_step);
  Prefetcher prefetch(source);
  auto save = [&](int64_t done) {
    if (rank != 0) return Status::Ok();  // one writer; every rank holds the same parameters
    std::map<std::string, std::string> metadata = {
        {"format", "pt"},
        {"graphc.model", StringOf(root.model())},
        {"graphc.step", std::to_string(start_step + done)},
        {"graphc.batch_size", std::to_string(p.batch)},
        {"graphc.global_batch_size", std::to_string(p.batch * ranks)},
        {"graphc.seed", std::to_string(o.seed)},
    };
    Status saved = SaveCheckpoint(exec, o.save, metadata);
    if (saved.ok() && !terminal)
      out << "saved " << Printable(o.save) << " at step " << start_step + done << "\n";
    return saved;
  };
  // Collects the window's step times (the warmup's are left out).
  auto collect = [&](int64_t done) -> Status {
    window_ms.clear();
    Status collected = clock.Collect(window_ms);
    if (!collected.ok()) return collected;
    for (size_t i = 0; i < window_ms.size(); ++i)
      if (timed_from + static_cast<int64_t>(i) >= warmup) times.Add(window_ms[i]);
    timed_from = done;
    return Status::Ok();
  };
  const bool scaled = p.loss_scale >= 0;
  float loss_scale = 0;
  int64_t skipped = 0;
  // Loss scaling skips a step whose gradients overflow. A run where no step
  // applies its update any more (the forward pass itself overflows, which no
  // scale fixes) is stalled: said so after this many steps.
  constexpr int64_t kStalledSteps = 200;
  int64_t last_read_done = 0, last_read_skipped = 0, last_applied_done = 0;
  out << "Step\tImg/sec\ttotal_loss" << (scaled ? "\tloss_scale\tskipped" : "") << "\n";
  status = clock.Start();
  std::vector<std::pair<double, double>> traced_steps;  // start, end (us)
  for (int64_t step = 0; step < steps && status.ok(); ++step) {
    const Batch& b = prefetch.Next();
    exec.set_profiling(o.profile && step >= warmup);
    const bool tracing = !o.trace.empty() && step >= warmup && step < warmup + kTraceSteps;
    exec.set_tracing(tracing);
    const double step_from = exec.MicrosecondsSinceCreation();
    status = feeder.Feed(b);
    if (status.ok()) status = exec.Enqueue(p.train);
    if (status.ok() && tracing) {
      status = backend.Synchronize();
      traced_steps.emplace_back(step_from, exec.MicrosecondsSinceCreation());
    }
    if (status.ok()) status = clock.StepDone();
    if (!status.ok()) break;
    const int64_t done = step + 1;
    const bool display = done % o.display_every == 0 || done == steps;
    const bool saving =
        !o.save.empty() && (done == steps || (o.save_every > 0 && done % o.save_every == 0));
    if (!display && !saving && !clock.full()) {
      if (terminal) out << "\r\033[K" << done << "/" << steps << std::flush;
      continue;
    }
    status = collect(done);
    if (status.ok() && (display || saving)) status = exec.Read(p.loss, &loss, sizeof(loss));
    // The loss of the global batch: the mean of the ranks' (each a mean over
    // its shard), so that every rank takes the same decisions below.
    if (status.ok() && (display || saving) && ranks > 1) {
      std::vector<double> mean = {double(loss)};
      status = comm.AllreduceDoubles("the loss of step " + std::to_string(start_step + done),
                                     mean, ScalarReduction::kMean);
      loss = static_cast<float>(mean[0]);
    }
    if (status.ok() && scaled && (display || saving)) {
      status = exec.Read(p.loss_scale, &loss_scale, sizeof(loss_scale));
      if (status.ok()) status = exec.Read(p.skipped_steps, &skipped, sizeof(skipped));
    }
    if (!status.ok()) break;
    if (display || saving) {
      // With loss scaling a non-finite loss is an overflowed step, skipped
      // on the device; the state check below still stops a real divergence,
      // and a scale down at its floor, or no update applied for
      // kStalledSteps steps, is one too.
      if (!std::isfinite(loss) && (!scaled || loss_scale <= 1.0f))
        return Diverged(start_step + done,
                        "the loss is " + std::to_string(loss) +
                            (scaled ? " with the loss scale at its floor of 1" : ""));
      if (scaled) {
        if (done - last_read_done > skipped - last_read_skipped) last_applied_done = done;
        last_read_done = done;
        last_read_skipped = skipped;
        if (done - last_applied_done >= kStalledSteps)
          return Diverged(start_step + done,
                          "no step applied its update in the last " +
                              std::to_string(done - last_applied_done) +
                              " steps: every one overflowed (loss scale " +
                              std::to_string(loss_scale) + ")");
      }
      // A parameter or batch-norm statistic gone NaN stops the run here,
      // named, before it can reach a checkpoint or a report.
      status = exec.CheckStateFinite();
      if (ranks > 1) {
        // Decided together: one rank's non-finite batch-norm statistic
        // stops every rank here, not just its own (the others would wait
        // for it in the next collective).
        std::vector<double> failed = {status.ok() ? 0.0 : double(rank + 1)};
        Status agreed = comm.AllreduceDoubles(
            "the state check of step " + std::to_string(start_step + done), failed,
            ScalarReduction::kMax);
        if (!agreed.ok()) return agreed;
        if (status.ok() && failed[0] > 0)
          return Diverged(start_step + done,
                          "rank " + std::to_string(int(failed[0]) - 1) +
                              "'s state holds NaN or infinity (that rank names the tensor)");
      }
      if (!status.ok()) return Diverged(start_step + done, status.message());
    }
    if (display) {
      const Speed s = SpeedOf(times.Rates());
      if (terminal) out << "\r\033[K";
      out << done << "\timages/sec: " << std::fixed << std::setprecision(1);
      if (times.ms.empty())
        out << "(warmup)";
      else
        out << s.mean << " +/- " << s.error << " (jitter = " << s.jitter << ")";
      out << "\t" << std::setprecision(3) << loss << std::defaultfloat;
      // The scale in full (a power of two under dynamic scaling).
      if (scaled) out << "\t" << std::setprecision(9) << loss_scale << "\t" << skipped;
      out << "\n";
    } else if (terminal) {
      out << "\r\033[K" << done << "/" << steps << "  loss " << loss << std::flush;
    }
    if (saving) status = save(done);
    if (status.ok()) status = clock.Start();
  }
  if (status.ok() && *device_collectives) status = (*device_collectives)->Finalize();
  if (!status.ok()) return status;
  exec.set_device_collectives(nullptr);
  exec.set_tracing(false);
  if (!o.trace.empty()) {
    const std::string path = TracePathOf(o.trace, rank, ranks);
    status = WriteFileAtomically(
        path, TraceJson(exec, plan, rank, ranks, traced_steps, warmup)
                      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
                  "\n");
    if (!status.ok()) return status;
    out << "trace: " << traced_steps.size() << " steps in " << Printable(path)
        << (ranks > 1 ? " (and one file per other rank)" : "")
        << " (open it in chrome://tracing or ui.perfetto.dev)\n";
  }
  // --steps 0 --save FILE: the initial state, exactly as the first step sees it.
  if (steps == 0 && !o.save.empty()) {
    status = save(0);
    if (!status.ok()) return status;
  }
  // No display step read the scale (no step ran): the report gives the initial one.
  if (steps == 0 && scaled) {
    status = exec.Read(p.loss_scale, &loss_scale, sizeof(loss_scale));
    if (status.ok()) status = exec.Read(p.skipped_steps, &skipped, sizeof(skipped));
    if (!status.ok()) return status;
  }
  const double rank_rate = times.TotalImagesPerSecond();
  const double median_ms = times.MedianMs(), p90_ms = times.P90Ms();
  // Per rank: images/sec over the timed steps, and the seconds its steps
  // spent blocked on collectives.
  StatusOr<std::vector<double>> per_rank = comm.AllgatherDoubles(
      "the per-rank throughput", {rank_rate,
                                  times.ms.empty() ? 0.0 : p.batch * 1000.0 / median_ms,
                                  comm.seconds_waiting()});
  if (!per_rank.ok()) return per_rank.status();
  double total_rate = 0;
  std::vector<double> rank_rates, rank_median_rates, rank_waits;
  for (int r = 0; r < ranks; ++r) {
    rank_rates.push_back((*per_rank)[3 * r]);
    rank_median_rates.push_back((*per_rank)[3 * r + 1]);
    rank_waits.push_back((*per_rank)[3 * r + 2]);
    total_rate += rank_rates.back();
  }
  out << "----------------------------------------------------------------\n"
      << "total images/sec: " << std::fixed << std::setprecision(2) << total_rate;
  if (ranks > 1) {
    out << " (" << ranks << " ranks; per rank:";
    for (double r : rank_rates) out << " " << r;
    out << "; blocked on collectives:";
    for (double w : rank_waits) out << " " << w << " s";
    out << ")";
  }
  out << "\n"
      << "step time: median " << median_ms << " ms, p90 " << p90_ms << " ms over "
      << times.ms.size() << " timed steps" << (ranks > 1 ? " (rank 0)" : "") << "\n"
      << "peak memory: " << std::setprecision(1) << PeakRssMib() << " MiB resident on the host"
      << (ranks > 1 ? " (rank 0)" : "") << "; the plan's arena " << root.arena_size() / 1048576.0
      << " MiB, state " << root.state_size() / 1048576.0 << " MiB"
      << (std::string(backend.name()) == "cpu" ? "" : " (on the device)") << "\n"
      << "final loss: ";
  if (steps == 0)
    out << "none (no step run)\n";
  else
    out << std::setprecision(4) << loss << std::defaultfloat << "\n";

  nlohmann::json profile;
  if (o.profile && !times.ms.empty()) {
    exec.set_profiling(false);
    profile = PrintProfile(root, exec.program(p.train), exec.command_seconds(p.train),
                           times.ms.size(), out);
  }

  double accuracy = -1;
  int64_t evaluated = 0;
  if (o.eval) {
    if (p.eval < 0) return Status(ErrorCode::kInvalidArgument, "the plan has no program 'eval_step'");
    if (ranks > 1) {
      status = BroadcastPlainState(exec, comm);
      if (!status.ok()) return status;
    }
    StatusOr<double> evaluation = Evaluate(exec, p, *data->test, comm, &evaluated);
    if (!evaluation.ok()) return evaluation.status();
    accuracy = *evaluation;
    out << "test accuracy: " << std::setprecision(4) << std::fixed << accuracy << std::defaultfloat
        << " (" << evaluated << " of " << data->test->examples() << " test examples)\n";
  }
  out << "----------------------------------------------------------------\n";

  if (o.report.empty() || rank != 0) return Status::Ok();
  const fb::Program& step_program = exec.program(p.train);
  nlohmann::json j = {
      {"model", StringOf(root.model())},
      {"device", backend.name()},
      {"device_description", backend.Describe()},
      {"data", data->name},
      {"batch_size", p.batch},
      {"steps", steps},
      {"warmup", warmup},
      {"fused", root.fused()},
      {"kernel_launches_per_step",
       std::count_if(step_program.commands()->begin(), step_program.commands()->end(),
                     [](const fb::Command* c) { return c->op() == fb::Opcode::Kernel; })},
      {"precision", StringOf(root.precision())},
      {"images_per_sec", times.ms.empty() ? 0.0 : p.batch * 1000.0 / median_ms},
      {"images_per_sec_mean", SpeedOf(times.Rates()).mean},
      {"total_images_per_sec", total_rate},
      {"step_ms_median", median_ms},
      {"step_ms_p90", p90_ms},
      {"peak_rss_mib", PeakRssMib()},
      {"arena_mib", root.arena_size() / 1048576.0},
      {"final_loss", steps == 0 ? nlohmann::json() : nlohmann::json(loss)},
      {"seed", o.seed},
      {"cuda_graphs", exec.replays_graph(p.train)},
  };
  j["world_size"] = ranks;
  j["ranks_per_node"] = comm.local_size();
  j["communicator"] = comm.Describe();
  j["allreduces"] = collectives_how;
  j["per_rank_images_per_sec"] = rank_median_rates;
  j["per_rank_total_images_per_sec"] = rank_rates;
  j["per_rank_collective_wait_seconds"] = rank_waits;
  j["global_batch_size"] = p.batch * ranks;
  if (scaled) {
    j["loss_scale"] = loss_scale;
    j["skipped_steps"] = skipped;
  }
  j["load_ms"] = load_ms;
  if (!load_summary.empty()) j["load_summary"] = load_summary;
  if (!library_math.empty()) j["library_math"] = library_math;
  for (const auto& [key, value] : o.report_extra.items()) j[key] = value;
  if (!profile.is_null()) j["profile"] = profile;
  if (o.eval) {
    j["test_accuracy"] = accuracy;
    j["test_examples"] = evaluated;
  }
  // Names from the plan may not be UTF-8: replaced, not fatal.
  return WriteFileAtomically(
      o.report, j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

}  // namespace graphc::runtime
