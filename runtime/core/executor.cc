// The executor (see executor.h).

#include "runtime/core/executor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/core/random.h"

namespace graphc::runtime {

void InitializeTensor(fb::Initializer init, double value, const std::vector<int64_t>& shape,
                      uint64_t seed, float* values) {
  int64_t count = 1;
  for (int64_t d : shape) count *= d;
  // PyTorch's fans: dim 1 (inputs) and dim 0 (outputs) times the receptive field.
  int64_t receptive = 1;
  for (size_t i = 2; i < shape.size(); ++i) receptive *= shape[i];
  const double fan_in = shape.size() >= 2 ? static_cast<double>(shape[1] * receptive) : 1;
  const double fan_out = shape.size() >= 2 ? static_cast<double>(shape[0] * receptive) : 1;
  SplitMix64 rng{seed};
  auto normal = [&](double stddev) {
    for (int64_t i = 0; i < count; i += 2) {
      double r = std::sqrt(-2.0 * std::log(rng.Uniform()));
      double theta = 2.0 * M_PI * rng.Uniform();
      values[i] = static_cast<float>(stddev * r * std::cos(theta));
      if (i + 1 < count) values[i + 1] = static_cast<float>(stddev * r * std::sin(theta));
    }
  };
  auto uniform = [&](double bound) {
    for (int64_t i = 0; i < count; ++i)
      values[i] = static_cast<float>(bound * (2.0 * rng.Uniform() - 1.0));
  };
  switch (init) {
    case fb::Initializer::Zeros:
      std::fill(values, values + count, 0.0f);
      break;
    case fb::Initializer::Ones:
      std::fill(values, values + count, 1.0f);
      break;
    case fb::Initializer::Constant:
      std::fill(values, values + count, static_cast<float>(value));
      break;
    case fb::Initializer::Normal:
      normal(value);
      break;
    case fb::Initializer::Uniform:
      uniform(value);
      break;
    case fb::Initializer::KaimingNormal:  // ReLU gain sqrt(2)
      normal(std::sqrt(2.0 / fan_in));
      break;
    case fb::Initializer::KaimingNormalFanOut:
      normal(std::sqrt(2.0 / fan_out));
      break;
    case fb::Initializer::KaimingUniform:  // bound = gain * sqrt(3 / fan_in)
      uniform(std::sqrt(6.0 / fan_in));
      break;
    case fb::Initializer::XavierUniform:
      uniform(std::sqrt(6.0 / (fan_in + fan_out)));
      break;
  }
}

StatusOr<std::unique_ptr<Executor>> Executor::Create(const Plan& plan, Backend& backend) {
  std::unique_ptr<Executor> executor(new Executor(plan, backend));
  const fb::Plan& root = plan.root();
  for (auto [size, memory] : {std::pair{root.arena_size(), &executor->arena_},
                              std::pair{root.state_size(), &executor->state_},
                              std::pair{root.constant_size(), &executor->constants_}}) {
    StatusOr<DeviceMemory> allocated = backend.Allocate(size);
    if (!allocated.ok()) return allocated.status();
    *memory = *allocated;
  }
  Status loaded = backend.LoadKernels(plan);
  if (!loaded.ok()) return loaded;
  for (const fb::Program* program : *root.programs()) {
    auto& commands = executor->operands_.emplace_back();
    for (const fb::Command* command : *program->commands()) {
      auto& operands = commands.emplace_back();
      for (auto* list : {command->inputs(), command->outputs()})
        for (int32_t index : *list) operands.push_back(executor->MemoryOf(index));
    }
    executor->command_seconds_.emplace_back(program->commands()->size(), 0.0);
    executor->has_collectives_.push_back(
        std::any_of(program->commands()->begin(), program->commands()->end(),
                    [](const fb::Command* c) { return IsCollective(c->op()); }));
    executor->has_sparse_.push_back(
        std::any_of(program->commands()->begin(), program->commands()->end(),
                    [](const fb::Command* c) {
                      return IsCollective(c->op()) && c->collective()->sparse();
                    }));
  }
  executor->graph_of_.resize(root.programs()->size());
  executor->in_flight_.resize(root.programs()->size());
  return executor;
}

Executor::~Executor() {
  for (ProgramGraph& g : graph_of_) backend_.DestroyGraph(g.graph);
  // A run that failed between a start and its wait leaves the communication
  // thread writing into the arena: it is left allocated (the process is
  // about to exit with the error) rather than freed under that thread
  // (deliberately leaked, as the staging areas below).
  const bool in_flight = std::any_of(in_flight_.begin(), in_flight_.end(),
                                     [](const auto& buckets) { return !buckets.empty(); });
  for (DeviceMemory* memory : {&arena_, &state_, &constants_})
    if (memory->address != nullptr && !(in_flight && memory == &arena_)) backend_.Free(*memory);
  // The host staging areas of an asynchronous device likewise.
  if (in_flight) new std::map<std::pair<int, uint32_t>, std::vector<uint8_t>>(std::move(staging_));
}

DeviceMemory Executor::RegionMemory(fb::Region region) const {
  return region == fb::Region::Arena ? arena_ : region == fb::Region::State ? state_ : constants_;
}

DeviceMemory Executor::MemoryOf(int32_t index) const {
  const fb::Buffer& b = buffer(index);
  const DeviceMemory region = RegionMemory(b.region());
  // The loader proved offset + size inside the region.
  return DeviceMemory{static_cast<char*>(region.address) + b.offset(), b.size()};
}

const fb::Buffer& Executor::buffer(int32_t index) const {
  return *plan_.root().buffers()->Get(index);
}

const fb::Program& Executor::program(int index) const {
  return *plan_.root().programs()->Get(index);
}

StatusOr<int> Executor::FindProgram(const std::string& name) const {
  const auto* programs = plan_.root().programs();
  for (uint32_t i = 0; i < programs->size(); ++i)
    if (StringOf(programs->Get(i)->name()) == name)
      return static_cast<int>(i);
  return Status(ErrorCode::kInvalidArgument, "the plan has no program '" + name + "'");
}

Status Executor::InitializeState(uint64_t seed) {
  const fb::Plan& root = plan_.root();
  std::vector<float> values;
  if (root.states())
    for (uint32_t i = 0; i < root.states()->size(); ++i) {
      const fb::State& s = *root.states()->Get(i);
      const fb::Buffer& b = buffer(s.buffer());
      std::vector<int64_t> shape(b.shape()->begin(), b.shape()->end());
      if (b.dtype() != fb::DType::F32) {
        // Integer state (the step counter) starts at zero or at its constant.
        std::vector<uint8_t> bytes(b.size(), 0);
        if (s.init() != fb::Initializer::Zeros) {
          if (b.dtype() != fb::DType::I64 || s.init() != fb::Initializer::Constant)
            return Status(ErrorCode::kUnsupported,
                          "state '" + PrintableOf(b.name()) + "': only zeros or a constant for " +
                              fb::EnumNameDType(b.dtype()));
          for (uint64_t k = 0; k + 8 <= b.size(); k += 8) {
            int64_t v = static_cast<int64_t>(s.value());
            std::memcpy(bytes.data() + k, &v, 8);
          }
        }
        Status st = Write(s.buffer(), bytes.data(), bytes.size());
        if (!st.ok()) return st;
        continue;
      }
      values.resize(b.size() / 4);
      // One stream per state tensor: adding a tensor leaves the others alone.
      InitializeTensor(s.init(), s.value(), shape, seed * 0x100000001b3ull + i, values.data());
      Status st = Write(s.buffer(), values.data(), b.size());
      if (!st.ok()) return st;
    }
  if (root.constants())
    for (const fb::Constant* c : *root.constants()) {
      Status st = Write(c->buffer(), c->data()->data(), c->data()->size());
      if (!st.ok()) return st;
    }
  return Status::Ok();
}

Status Executor::CheckStateFinite() const {
  const fb::Plan& root = plan_.root();
  if (root.states() == nullptr) return Status::Ok();
  for (const fb::State* s : *root.states()) {
    const fb::Buffer& b = buffer(s->buffer());
    StatusOr<uint64_t> bad = backend_.CountNonFinite(MemoryOf(s->buffer()), b.dtype());
    if (!bad.ok()) return bad.status();
    if (*bad != 0)
      return Status(ErrorCode::kNonFinite,
                    std::string(s->trainable() ? "parameter" : "state tensor") + " '" +
                        PrintableOf(b.name()) + "' holds " + std::to_string(*bad) + " NaN or "
                        "infinite values (of " + std::to_string(b.size() / DTypeBytes(b.dtype())) +
                        ")");
  }
  return Status::Ok();
}

Status Executor::Write(int32_t index, const void* data, uint64_t bytes) {
  DeviceMemory m = MemoryOf(index);
  if (bytes != m.bytes)
    return Status(ErrorCode::kInvalidArgument,
                  "buffer '" + PrintableOf(buffer(index).name()) + "' holds " +
                      std::to_string(m.bytes) + " bytes, not " + std::to_string(bytes));
  return backend_.CopyToDevice(m, 0, data, bytes);
}

Status Executor::Read(int32_t index, void* data, uint64_t bytes) const {
  DeviceMemory m = MemoryOf(index);
  if (bytes != m.bytes)
    return Status(ErrorCode::kInvalidArgument,
                  "buffer '" + PrintableOf(buffer(index).name()) + "' holds " +
                      std::to_string(m.bytes) + " bytes, not " + std::to_string(bytes));
  return backend_.CopyToHost(data, m, 0, bytes);
}

bool Executor::distributed() const { return comm_ != nullptr && comm_->size() > 1; }

Status Executor::Enqueue(int index) {
  // A collective is host work between the device's commands: no graph.
  if (!graphs_ || !backend_.supports_graphs() || profiling_ || sync_debug_ || tracing_ ||
      ((distributed() || has_sparse_[index]) && has_collectives_[index]))
    return EnqueueCommands(index);
  ProgramGraph& g = graph_of_[index];
  const std::string what = "program '" + PrintableOf(program(index).name()) + "'";
  if (g.graph.handle == nullptr && g.eager_runs++ >= 1) {
    Status status = backend_.BeginCapture();
    if (status.ok()) {
      status = EnqueueCommands(index);
      StatusOr<Graph> graph = backend_.EndCapture();  // ends the capture either way
      if (graph.ok() && !status.ok()) backend_.DestroyGraph(*graph);
      if (status.ok()) status = graph.status();
      if (graph.ok() && status.ok()) g.graph = *graph;
    }
    if (!status.ok())
      return Status(status.code(), what + ", captured as a graph: " + status.message() +
                                       " (graphrun --no-cuda-graphs runs without graphs)");
  }
  if (g.graph.handle == nullptr) return EnqueueCommands(index);
  Status status = backend_.LaunchGraph(g.graph);
  if (!status.ok()) return Status(status.code(), what + ": " + status.message());
  return status;
}

double Executor::MicrosecondsSinceCreation() const {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - created_)
      .count();
}

Status Executor::EnqueueCommands(int index) {
  const fb::Program& p = program(index);
  const auto& commands = operands_[index];
  using Clock = std::chrono::steady_clock;
  for (uint32_t c = 0; c < p.commands()->size(); ++c) {
    const fb::Command& command = *p.commands()->Get(c);
    Clock::time_point start;
    if (profiling_) start = Clock::now();
    const double traced_from = tracing_ ? MicrosecondsSinceCreation() : 0;
    const bool collective = IsCollective(command.op());
    Status status = collective ? RunCollective(index, c) : backend_.Run(command, commands[c].data());
    if ((profiling_ || sync_debug_ || (tracing_ && backend_.asynchronous())) && status.ok())
      status = backend_.Synchronize();
    if (tracing_ && status.ok() && command.op() != fb::Opcode::AllreduceStart) {
      std::string name;
      const char* category = "library";
      if (command.op() == fb::Opcode::Kernel) {
        const fb::Kernel& k = *plan_.root().kernels()->Get(command.kernel());
        name = PrintableOf(k.name());
        if (k.ops() && k.ops()->size()) name += " " + PrintableOf(k.ops()->Get(0));
        if (k.ops() && k.ops()->size() > 1) name += " +" + std::to_string(k.ops()->size() - 1);
        category = "kernel";
      } else if (collective) {
        name = "wait bucket " + std::to_string(command.collective()->bucket());
        category = "wait";
      } else {
        name = fb::EnumNameOpcode(command.op());
        if (command.op() == fb::Opcode::Copy) category = "copy";
      }
      trace_.push_back(TraceSpan{std::move(name), category, 0, traced_from,
                                 MicrosecondsSinceCreation() - traced_from,
                                 static_cast<int32_t>(c)});
    }
    if (profiling_ && status.ok())
      command_seconds_[index][c] += std::chrono::duration<double>(Clock::now() - start).count();
    if (!status.ok()) {
      std::string where = command.location() ? " (" + PrintableOf(command.location()) + ")" : "";
      return Status(status.code(), "program '" + PrintableOf(p.name()) + "' command " +
                                       std::to_string(c) + " " + fb::EnumNameOpcode(command.op()) +
                                       where + ": " + status.message());
    }
  }
  return Status::Ok();
}

// A bucket's buffers, in the command's order, go to the communicator as
// they are (host memory: the CPU), to the device collectives where they lie
// (NCCL: ordered with the compute stream, the host never waits for the
// device), or through one host staging area (an asynchronous device without
// device collectives: copied out after the compute stream has produced them,
// and back in once reduced).
Status Executor::RunCollective(int index, uint32_t c) {
  const fb::Command& command = *program(index).commands()->Get(c);
  // A sparse allreduce writes its dense buffers even on one rank.
  const bool sparse = command.collective()->sparse();
  if (!distributed() && !sparse) return Status::Ok();
  if (!distributed() && local_comm_ == nullptr) local_comm_ = NewSingleRankCommunicator();
  Communicator* comm = distributed() ? comm_ : local_comm_.get();
  const std::vector<DeviceMemory>& operands = operands_[index][c];
  const uint32_t count = command.inputs()->size();
  const int32_t bucket = command.collective()->bucket();  // the loader proved both
  std::map<int32_t, InFlight>& in_flight = in_flight_[index];
  // Sparse allreduces (deep gradient compression) gather on the host: the
  // device collectives reduce dense buckets only.
  const bool on_device = device_collectives_ != nullptr && !sparse;
  const bool staged = backend_.asynchronous() && !on_device;
  const Reduction reduction =
      command.collective()->reduction() == fb::Reduction::Mean ? Reduction::kMean : Reduction::kSum;
  if (command.op() == fb::Opcode::AllreduceStart) {
    std::vector<uint8_t>* staging = nullptr;
    if (staged) {
      staging = &staging_[{index, c}];
      uint64_t total = 0;
      for (uint32_t i = 0; i < count; ++i) total += operands[i].bytes;
      staging->resize(total);
    }
    std::vector<CommTensor> tensors;
    uint64_t offset = 0;
    for (uint32_t i = 0; i < count; ++i) {
      const fb::Buffer& b = buffer(command.inputs()->Get(i));
      void* data = operands[i].address;
      if (staged) {
        data = staging->data() + offset;
        Status copied = backend_.CopyToHost(data, operands[i], 0, operands[i].bytes);
        if (!copied.ok()) return copied;
        offset += operands[i].bytes;
      }
      tensors.push_back(CommTensor{data, b.dtype(), b.size() / DTypeBytes(b.dtype())});
    }
    const std::string what = std::string(sparse ? "sparse " : "") + "allreduce of bucket " +
                             std::to_string(bucket) + " (" + PrintableOf(program(index).name()) +
                             " command " + std::to_string(c) + ")";
    StatusOr<int64_t> handle =
        sparse      ? comm->StartSparseAllreduce(what, std::move(tensors), reduction)
        : on_device ? device_collectives_->StartAllreduce(what, std::move(tensors), reduction,
                                                          command.collective()->wire())
                    : comm->StartAllreduce(what, std::move(tensors), reduction,
                                            command.collective()->wire());
    if (!handle.ok()) return handle.status();
    in_flight[bucket] =
        InFlight{*handle, c, tracing_ ? MicrosecondsSinceCreation() : 0, staging, on_device};
    return Status::Ok();
  }
  auto it = in_flight.find(bucket);
  if (it == in_flight.end())  // the loader proved every wait has its start
    return Status(ErrorCode::kInternal, "a wait for bucket " + std::to_string(bucket) +
                                            " that was never started");
  const InFlight flight = it->second;
  in_flight.erase(it);
  Status status =
      flight.on_device ? device_collectives_->Wait(flight.handle) : comm->Wait(flight.handle);
  if (tracing_ && status.ok()) {
    uint64_t bytes = 0;
    for (uint32_t i = 0; i < count; ++i) bytes += operands[i].bytes;
    trace_.push_back(TraceSpan{"allreduce bucket " + std::to_string(bucket) + " (" +
                                   std::to_string(count) + " tensors, " + std::to_string(bytes) +
                                   " bytes)",
                               "collective", 1, flight.started_us,
                               MicrosecondsSinceCreation() - flight.started_us,
                               static_cast<int32_t>(flight.start)});
  }
  if (!status.ok() || flight.staging == nullptr) return status;
  uint64_t offset = 0;
  for (uint32_t i = 0; i < count; ++i) {
    status = backend_.CopyToDevice(operands[i], 0, flight.staging->data() + offset,
                                   operands[i].bytes);
    if (!status.ok()) return status;
    offset += operands[i].bytes;
  }
  return Status::Ok();
}

Status Executor::Run(int index) {
  Status status = Enqueue(index);
  if (!status.ok()) return status;
  status = backend_.Synchronize();
  if (!status.ok())
    return Status(status.code(), "program '" + PrintableOf(program(index).name()) + "': " +
                                     status.message() +
                                     " (graphrun --sync-debug names the command)");
  return status;
}

Status Executor::RunCommand(int index, uint32_t c) {
  if (c >= command_count(index))
    return Status(ErrorCode::kInvalidArgument, "no command " + std::to_string(c) + " in program '" +
                                                   PrintableOf(program(index).name()) + "'");
  const fb::Command& command = *program(index).commands()->Get(c);
  if (IsCollective(command.op())) {
    if (distributed())
      return Status(ErrorCode::kUnsupported,
                    "a collective cannot run alone: RunCommand is for one rank");
    // One rank's sparse allreduce scatters its own set (at the start).
    return RunCollective(index, c);
  }
  Status status = backend_.Run(command, operands_[index][c].data());
  if (status.ok()) status = backend_.Synchronize();
  return status;
}

uint32_t Executor::command_count(int index) const { return program(index).commands()->size(); }

}  // namespace graphc::runtime
