// The one narrow interface every device implements: memory, copies, kernels,
// commands, streams and events, and a count of non-finite values (checked
// before a checkpoint is written and at display steps). The core (executor,
// checkpoint, trainer) sees devices only through it and never includes a
// backend's headers; backend_factory.h creates them.
//
// The model is an asynchronous device (CUDA's): Run and the *Async copies only
// enqueue work on a stream and return; the compute stream runs the program's
// commands in order, the copy stream moves the next batch while it does, and
// events order the two and time them. Synchronous calls (CopyToDevice,
// CopyToHost, CountNonFinite) are ordered after everything enqueued on the
// compute stream. The CPU backend executes at once, which is one legal
// schedule of the same contract.

#ifndef GRAPHC_RUNTIME_CORE_BACKEND_H_
#define GRAPHC_RUNTIME_CORE_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/core/plan_loader.h"
#include "contract/status.h"

namespace graphc::runtime {

// A device allocation: a host pointer on the CPU, a device pointer on CUDA.
struct DeviceMemory {
  void* address = nullptr;
  uint64_t bytes = 0;
};

// Host memory a device copies from and to asynchronously (page-locked on
// CUDA, so a copy needs no staging and overlaps with compute).
struct HostMemory {
  void* address = nullptr;
  uint64_t bytes = 0;
};

// The device's in-order work queues.
enum class Stream { kCompute = 0, kCopy = 1 };

// A point in a stream's order, with the time the device reached it.
struct Event {
  void* handle = nullptr;
};

// Work recorded from the compute stream once and replayed as one launch
// (a CUDA Graph): a program's commands without a host call per command.
struct Graph {
  void* handle = nullptr;
};

// Allreduces that a device runs on its own memory (NCCL on CUDA), ordered
// with its compute stream, so that a gradient bucket never goes through host
// memory. Made by Backend::NewCollectives on every rank, then joined (a
// collective over the communicator); the executor uses it in place of the
// communicator's host allreduces.
class DeviceCollectives {
 public:
  // Without Finalize, the device's communicator is aborted (the error path).
  virtual ~DeviceCollectives() = default;

  // "nccl 2.28.9", for the user and the report.
  virtual std::string Describe() const = 0;

  // Every rank calls it, after every rank's NewCollectives succeeded: sets up
  // the device communicator, bootstrapped through `comm` (which must outlive
  // this object), within the options' timeout. Fails on every rank alike
  // (they agree through `comm`), so that the caller may fall back to host
  // allreduces everywhere; kUnavailable says which ranks failed and why.
  virtual Status Join(Communicator& comm) = 0;

  // Enqueues an allreduce of `tensors` (device memory, in place; as for
  // Communicator::StartAllreduce, with the same reductions, wire types and
  // rounding, except that F32 tensors on a half wire are rounded through it
  // even in a job of one rank, which the executor never reduces) that starts once the compute stream has done everything
  // enqueued on it so far, and runs beside the work enqueued after it. The
  // tensors must not be touched until Wait(handle). The communicator
  // checks the ranks' buckets against each other and names ranks that never
  // start it (Communicator::StartArrival); a transfer that does not finish
  // within the timeout ends the process with a line naming `what`.
  virtual StatusOr<int64_t> StartAllreduce(std::string what, std::vector<CommTensor> tensors,
                                           Reduction reduction, fb::DType wire) = 0;
  // Work enqueued on the compute stream from now on starts after the
  // allreduce. The host blocks only until every rank has started it.
  virtual Status Wait(int64_t handle) = 0;

  // Waits for every allreduce started and releases the device communicator.
  virtual Status Finalize() = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual const char* name() const = 0;
  // The device as the user should see it, e.g. "cpu (2 threads)" or
  // "cuda:0 (NVIDIA H100 80GB HBM3, sm_90, strict fp32)".
  virtual std::string Describe() const { return name(); }
  // What the last LoadKernels decided beyond the plan, for the load line
  // (CUDA: how cuDNN's algorithms were chosen), or "".
  virtual std::string LoadSummary() const { return ""; }
  // The kernel targets this device executes, best first: an sm_90 GPU runs
  // the plan's sm_90 PTX, else its sm_80 PTX. LoadKernels takes the first
  // one the plan has.
  virtual std::vector<fb::Target> targets() const = 0;
  // The device's index among its kind (the CUDA ordinal; 0 on the CPU).
  virtual int device_index() const { return 0; }
  // What tells this device from the others of its machine whatever the
  // process sees of them (CUDA: the GPU's UUID; CUDA_VISIBLE_DEVICES renumbers
  // ordinals): two ranks with the same id share a device.
  virtual std::string device_id() const { return std::string(name()) + ":" + std::to_string(device_index()); }
  // Whether work runs apart from the caller's thread: false when Run and the
  // *Async copies have finished by the time they return (the CPU), so that a
  // caller can skip staging that only pays off on an asynchronous device.
  virtual bool asynchronous() const = 0;
  // How the device computes library commands (convolutions, gemms, pooling) on
  // `dtype` operands, one line for the user, e.g. "bf16: oneDNN native
  // (avx512_core_amx)" or "fp16: emulated through fp32 (...why...)".
  virtual std::string LibraryMath(fb::DType dtype) const;

  virtual StatusOr<DeviceMemory> Allocate(uint64_t bytes) = 0;
  virtual void Free(DeviceMemory memory) = 0;
  virtual StatusOr<HostMemory> AllocateHost(uint64_t bytes) = 0;
  virtual void FreeHost(HostMemory memory) = 0;

  // Synchronous copies: they wait for everything enqueued on the compute
  // stream, copy, and return when the bytes have arrived.
  virtual Status CopyToDevice(DeviceMemory dst, uint64_t offset, const void* src,
                              uint64_t bytes) = 0;
  virtual Status CopyToHost(void* dst, DeviceMemory src, uint64_t offset,
                            uint64_t bytes) = 0;
  // Asynchronous copies on `stream` between `host` (from AllocateHost; left
  // untouched until an event recorded after the copy has completed) and
  // device memory; `bytes` from the start of both.
  virtual Status CopyToDeviceAsync(DeviceMemory dst, HostMemory src, uint64_t bytes,
                                   Stream stream) = 0;
  virtual Status CopyToHostAsync(HostMemory dst, DeviceMemory src, uint64_t bytes,
                                 Stream stream) = 0;
  // A device-to-device copy of `bytes` (both allocations at least that long).
  virtual Status CopyOnDevice(DeviceMemory dst, DeviceMemory src, uint64_t bytes,
                              Stream stream) = 0;

  // `timed`: ElapsedMilliseconds may measure from or to it; an event only for
  // ordering is cheaper untimed.
  virtual StatusOr<Event> CreateEvent(bool timed) = 0;
  virtual void DestroyEvent(Event event) = 0;
  // Marks the point in `stream` after everything enqueued on it so far.
  virtual Status RecordEvent(Event event, Stream stream) = 0;
  // Work enqueued on `stream` from now on starts after `event`.
  virtual Status WaitEvent(Stream stream, Event event) = 0;
  // The host waits until the device has reached `event`.
  virtual Status SynchronizeEvent(Event event) = 0;
  // Milliseconds between two reached events.
  virtual StatusOr<double> ElapsedMilliseconds(Event start, Event end) = 0;

  // Loads the plan's kernels for the first of targets() the plan has and
  // prepares its library calls (primitives, algorithms, workspaces); fails
  // with kPlanMissingKernel when the plan has none of them or a kernel the
  // plan declares is not in the binary. Run takes only this plan's commands.
  virtual Status LoadKernels(const Plan& plan) = 0;

  // Enqueues `command` on the compute stream; `operands` holds the memory of
  // each input, then of each output, in the command's order (sizes as the
  // plan declares them).
  virtual Status Run(const fb::Command& command, const DeviceMemory* operands) = 0;

  // Waits for everything enqueued on every stream; reports an asynchronous
  // failure of the device (a faulting kernel) here at the latest.
  virtual Status Synchronize() = 0;

  // How many of the `memory.bytes / size(dtype)` elements of `memory` are NaN
  // or infinite (0 for integer dtypes), computed where the memory lives (on
  // a GPU, a kernel and one number back), after everything enqueued before.
  virtual StatusOr<uint64_t> CountNonFinite(DeviceMemory memory, fb::DType dtype) = 0;

  // Graphs, where the device has them (supports_graphs()): between
  // BeginCapture and EndCapture, work enqueued on the compute stream is
  // recorded instead of run (the same operand addresses every replay);
  // LaunchGraph enqueues all of it. A failed capture leaves nothing captured
  // and the stream usable.
  virtual bool supports_graphs() const { return false; }
  virtual Status BeginCapture() {
    return Status(ErrorCode::kUnsupported, std::string(name()) + " has no graphs");
  }
  virtual StatusOr<Graph> EndCapture() {
    return Status(ErrorCode::kUnsupported, std::string(name()) + " has no graphs");
  }
  virtual Status LaunchGraph(Graph graph) {
    (void)graph;
    return Status(ErrorCode::kUnsupported, std::string(name()) + " has no graphs");
  }
  virtual void DestroyGraph(Graph graph) { (void)graph; }

  // Device collectives for this device (not yet joined; see
  // DeviceCollectives), or why there are none: kUnsupported where the device
  // has no collectives of its own (the CPU: its buffers are host memory
  // already) or this build lacks them, kUnavailable where they cannot run
  // (`shared_device`: another rank of the job uses the same device, which
  // NCCL refuses). Local: no collective happens here.
  virtual StatusOr<std::unique_ptr<DeviceCollectives>> NewCollectives(const CommOptions& options,
                                                                      bool shared_device) {
    (void)options;
    (void)shared_device;
    return Status(ErrorCode::kUnsupported,
                  std::string(name()) + " has no device collectives (its buffers are host memory)");
  }
};

// The target of `plan` a backend loads: the first of `targets` the plan has a
// binary for, or the first of `targets` when the plan has no generated kernels
// at all; kPlanMissingKernel naming what the plan has otherwise.
StatusOr<fb::Target> ChooseTarget(const Plan& plan, const std::vector<fb::Target>& targets);

// The plan's kernel binary for `target`, or nullptr.
const fb::KernelBinary* BinaryFor(const Plan& plan, fb::Target target);

// Per kernel of the plan, in the plan's order, its launch list in `binary`;
// kPlanMissingKernel naming the first kernel `binary` (described as `what`,
// e.g. "the x86-64 library") lacks.
StatusOr<std::vector<const fb::GpuKernel*>> LaunchListsOf(const Plan& plan,
                                                          const fb::KernelBinary& binary,
                                                          const std::string& what);

}  // namespace graphc::runtime

#endif  // GRAPHC_RUNTIME_CORE_BACKEND_H_
