// The executor: owns a plan's device memory (arena, state, constants), fills
// the state from its initializers and a seed, and runs programs command by
// command on a backend. Every operand address is computed once, in Create, so
// running a program allocates nothing.

#ifndef GRAPHC_RUNTIME_CORE_EXECUTOR_H_
#define GRAPHC_RUNTIME_CORE_EXECUTOR_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <utility>
#include <memory>
#include <string>
#include <vector>

#include "runtime/core/backend.h"
#include "runtime/core/plan_loader.h"
#include "contract/status.h"

namespace graphc::runtime {

class Communicator;

class Executor {
 public:
  // Allocates the plan's memory on `backend`, loads its kernels and prepares
  // its library calls. `plan` and `backend` must outlive the executor.
  static StatusOr<std::unique_ptr<Executor>> Create(const Plan& plan, Backend& backend);
  ~Executor();

  // Sets every state tensor from its initializer; the same seed gives the same
  // bits on every run and every machine. Also writes the constants.
  Status InitializeState(uint64_t seed);

  // The index of program `name`, or kInvalidArgument.
  StatusOr<int> FindProgram(const std::string& name) const;
  const fb::Program& program(int index) const;
  const Plan& plan() const { return plan_; }
  const fb::Buffer& buffer(int32_t index) const;

  // Copies host bytes into / out of a buffer (exactly its size).
  Status Write(int32_t buffer, const void* data, uint64_t bytes);
  Status Read(int32_t buffer, void* data, uint64_t bytes) const;

  // Fails with kNonFinite naming the first state tensor (parameter,
  // optimizer buffer, batch-norm statistic) holding NaN or infinity, and how
  // many of its values do; counted on the device.
  Status CheckStateFinite() const;

  // Enqueues every command of the program on the backend's compute stream
  // and returns (an asynchronous device may still be running them). The
  // program's inputs live in the arena and may be overwritten once last read,
  // so they are written before every run; its outputs are valid until the next.
  Status Enqueue(int program);
  // Enqueue, then wait for the device.
  Status Run(int program);
  // Runs command `command` of `program` alone and waits for the device (a
  // collective does nothing, as in a job of one rank, and is refused in a
  // distributed one): for tools that check a program command by command
  // (graphrun crosscheck).
  Status RunCommand(int program, uint32_t command);
  // The program's commands.
  uint32_t command_count(int program) const;

  // The device memory of a buffer (for copies the caller orders itself).
  DeviceMemory MemoryOf(int32_t buffer) const;
  // The whole allocation of a region (arena, state or constants).
  DeviceMemory RegionMemory(fb::Region region) const;

  // While on, every command is followed by a synchronization, so that an
  // asynchronous device failure is reported against the command that caused
  // it (graphrun --sync-debug). Slow; for finding faults.
  void set_sync_debug(bool on) { sync_debug_ = on; }

  // On a backend with graphs (CUDA Graphs), a program's first run is eager
  // (libraries load their code then), its second is recorded as a graph, and
  // every run from then on replays it: one launch instead of a host call per
  // command. Operand addresses are fixed at Create, so replays are exact.
  // Profiling and sync-debug runs are always eager.
  void set_graphs(bool on) { graphs_ = on; }
  // Whether runs of `program` now replay a graph.
  bool replays_graph(int program) const { return graph_of_[program].graph.handle != nullptr; }

  // While on, Run synchronizes after every command and adds its wall time to
  // command_seconds(program)[c] (for graphrun --profile; it serializes the
  // device, so it is off for throughput runs).
  void set_profiling(bool on) { profiling_ = on; }

  // The communicator that runs the plan's collectives (not owned; it must
  // outlive the runs). Without one, or in a job of one rank, collectives are
  // skipped: a mean over one rank is the value itself. On an asynchronous
  // device a bucket is staged through host memory (the communicator reduces
  // host buffers), and programs with collectives are not replayed as graphs.
  void set_communicator(Communicator* comm) { comm_ = comm; }
  // Device collectives (joined; not owned; they must outlive the runs): with
  // them an asynchronous device reduces its buckets in place on the device,
  // ordered with its compute stream, instead of through host memory.
  void set_device_collectives(DeviceCollectives* collectives) { device_collectives_ = collectives; }
  bool distributed() const;
  // Whether `program` has collectives (a data-parallel plan's train_step).
  bool has_collectives(int program) const { return has_collectives_[program]; }

  // While on, every command of a run is recorded as a span (graphrun
  // --trace): kernels and library calls on the compute track, and each
  // bucket's allreduce from its start to the end of its wait on the
  // collectives track (the time it overlapped compute), its wait on the
  // compute track (the time it did not). An asynchronous device synchronizes
  // after each command while tracing, so spans are the device's time.
  struct TraceSpan {
    std::string name;
    const char* category;  // "kernel", "library", "copy", "collective", "wait"
    int track;             // 0 compute, 1 collectives
    double start_us, duration_us;  // from the executor's creation
    int32_t command;               // in its program
  };
  void set_tracing(bool on) { tracing_ = on; }
  // The trace's clock: microseconds since the executor was created.
  double MicrosecondsSinceCreation() const;
  const std::vector<TraceSpan>& trace() const { return trace_; }
  const std::vector<double>& command_seconds(int program) const {
    return command_seconds_[program];
  }

 private:
  Executor(const Plan& plan, Backend& backend) : plan_(plan), backend_(backend) {}

  const Plan& plan_;
  Backend& backend_;
  DeviceMemory arena_, state_, constants_;
  // Per program, per command: the operands (inputs, then outputs).
  std::vector<std::vector<std::vector<DeviceMemory>>> operands_;
  Status EnqueueCommands(int program);

  bool profiling_ = false;
  bool sync_debug_ = false;
  bool graphs_ = false;
  struct ProgramGraph {
    int eager_runs = 0;
    Graph graph;
  };
  std::vector<ProgramGraph> graph_of_;  // per program
  std::vector<std::vector<double>> command_seconds_;  // per program, per command

  Status RunCollective(int program, uint32_t command);
  bool tracing_ = false;
  std::vector<TraceSpan> trace_;
  std::chrono::steady_clock::time_point created_ = std::chrono::steady_clock::now();
  Communicator* comm_ = nullptr;
  DeviceCollectives* device_collectives_ = nullptr;
  std::vector<bool> has_collectives_;  // per program
  std::vector<bool> has_sparse_;       // per program: a sparse allreduce among them
  // A job of one's communicator for sparse allreduces when there is no other.
  std::unique_ptr<Communicator> local_comm_;
  struct InFlight {
    int64_t handle = -1;
    uint32_t start = 0;                 // the start command
    double started_us = 0;              // when it started (for the trace)
    std::vector<uint8_t>* staging = nullptr;  // host copy on an asynchronous device
    bool on_device = false;                   // a DeviceCollectives handle
  };
  // Per program, per bucket in flight.
  std::vector<std::map<int32_t, InFlight>> in_flight_;
  // Host staging per (program, start command), kept across steps.
  std::map<std::pair<int, uint32_t>, std::vector<uint8_t>> staging_;
};

// The state initializers, exposed for tests: fills `values` (a tensor of
// `shape`) for initializer `init` with parameter `value`, from `seed`.
void InitializeTensor(fb::Initializer init, double value, const std::vector<int64_t>& shape,
                      uint64_t seed, float* values);

}  // namespace graphc::runtime

#endif  // GRAPHC_RUNTIME_CORE_EXECUTOR_H_
