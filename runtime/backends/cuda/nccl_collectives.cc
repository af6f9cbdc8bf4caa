// NCCL device collectives (see nccl_collectives.h).

#include "runtime/backends/cuda/nccl_collectives.h"

#include <dlfcn.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime/comm/termination.h"
#include "runtime/backends/cuda/device_kernels.h"

namespace graphc::runtime {
namespace {

using Clock = std::chrono::steady_clock;

// How long an abort may take before the communicator is left as it is: NCCL's
// abort can wait for peers (and has hung in some versions), and the paths that
// abort are on their way to reporting an error that must not wait for it.
constexpr auto kAbortBound = std::chrono::seconds(3);
// The longest NCCL's init may take (it connects the ranks).
constexpr double kInitSecondsMax = 120;

// NCCL is loaded when a job first asks for it, not linked: graphrun then
// starts (and trains on one GPU, or stages through MPI) where libnccl is
// absent, and a CPU run does not map its 200 MB. The functions used, by name.
// (nccl.h declares them; their types are taken from it.)
#define GRAPHC_NCCL_FUNCTIONS(X)                                                        \
  X(ncclGetVersion) X(ncclGetUniqueId) X(ncclCommInitRankConfig) X(ncclCommGetAsyncError) \
  X(ncclGetErrorString) X(ncclGetLastError) X(ncclCommAbort) X(ncclCommFinalize)          \
  X(ncclCommDestroy) X(ncclGroupStart) X(ncclGroupEnd) X(ncclAllReduce)

struct NcclApi {
#define GRAPHC_NCCL_MEMBER(name) decltype(&::name) name = nullptr;
  GRAPHC_NCCL_FUNCTIONS(GRAPHC_NCCL_MEMBER)
#undef GRAPHC_NCCL_MEMBER
};

// The loaded library, or why it cannot be (once per process).
const StatusOr<NcclApi>& Nccl() {
  static const StatusOr<NcclApi> api = []() -> StatusOr<NcclApi> {
    constexpr const char* kLibrary = "libnccl.so.2";
    void* library = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      const char* error = dlerror();
      return Status(ErrorCode::kUnavailable,
                    std::string("NCCL cannot be loaded: ") +
                        (error != nullptr ? Printable(error) : std::string(kLibrary)));
    }
    NcclApi loaded;
#define GRAPHC_NCCL_LOAD(name)                                                         \
  loaded.name = reinterpret_cast<decltype(&::name)>(dlsym(library, #name));            \
  if (loaded.name == nullptr)                                                          \
    return Status(ErrorCode::kUnavailable,                                             \
                  std::string(kLibrary) + " has no " #name " (NCCL 2.14 or newer is needed)");
    GRAPHC_NCCL_FUNCTIONS(GRAPHC_NCCL_LOAD)
#undef GRAPHC_NCCL_LOAD
    return loaded;  // the library stays loaded for the life of the process
  }();
  return api;
}

const NcclApi& nccl() { return Nccl().value(); }  // after NewNcclCollectives checked it

// Aborts `comm` on a thread of its own and waits at most kAbortBound for it;
// past that the thread is left to finish (or not) and the caller goes on.
void AbortBounded(ncclComm_t comm) {
  if (comm == nullptr) return;
  struct Shared {
    std::mutex mutex;
    std::condition_variable done_cv;
    bool done = false;
  };
  auto shared = std::make_shared<Shared>();
  std::thread([comm, shared] {
    nccl().ncclCommAbort(comm);
    std::lock_guard<std::mutex> lock(shared->mutex);
    shared->done = true;
    shared->done_cv.notify_all();
  }).detach();
  std::unique_lock<std::mutex> lock(shared->mutex);
  shared->done_cv.wait_for(lock, kAbortBound, [&] { return shared->done; });
}

// How often the watchdog looks at the transfers in flight.
constexpr auto kWatchInterval = std::chrono::milliseconds(20);
// The communicator's arrival timeout runs from when this rank's host reached
// the bucket, which is before its device did: the watchdog waits this much
// longer, so that a rank that never arrived is named by that line first.
constexpr auto kArrivalGrace = std::chrono::seconds(2);

std::string NcclText(ncclResult_t result, ncclComm_t comm) {
  std::string text = nccl().ncclGetErrorString(result);
  const char* last = comm != nullptr ? nccl().ncclGetLastError(comm) : nullptr;
  if (last != nullptr && last[0] != '\0') text += ": " + Printable(last);
  return text;
}

std::string FormatSeconds(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", seconds);
  return text;
}

ncclDataType_t NcclType(fb::DType dtype) {
  switch (dtype) {
    case fb::DType::F16: return ncclFloat16;
    case fb::DType::BF16: return ncclBfloat16;
    case fb::DType::I32: return ncclInt32;
    case fb::DType::I64: return ncclInt64;
    case fb::DType::I1: return ncclUint8;
    case fb::DType::F32:
    default: return ncclFloat32;
  }
}

cudaDataType_t CudaType(fb::DType dtype) {
  return dtype == fb::DType::F16 ? CUDA_R_16F : dtype == fb::DType::BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

// One bucket on the communication stream.
struct Transfer {
  int64_t seq = 0;  // the communicator's number for its arrival
  std::string what;
  cudaEvent_t begun = nullptr;  // the stream reached it
  cudaEvent_t done = nullptr;   // the stream finished it
  // The watchdog's.
  bool begun_seen = false;
  Clock::time_point begun_at;

  ~Transfer() {
    if (begun != nullptr) cudaEventDestroy(begun);
    if (done != nullptr) cudaEventDestroy(done);
  }
};

class NcclCollectives final : public DeviceCollectives {
 public:
  NcclCollectives(int device, cudaStream_t compute, const CommOptions& options)
      : device_(device), compute_(compute), options_(options) {}
  ~NcclCollectives() override;

  Status Initialize();
  std::string Describe() const override { return description_; }
  Status Join(Communicator& comm) override;
  StatusOr<int64_t> StartAllreduce(std::string what, std::vector<CommTensor> tensors,
                                   Reduction reduction, fb::DType wire) override;
  Status Wait(int64_t handle) override;
  Status Finalize() override;

 private:
  Status Cuda(cudaError_t error, const std::string& what) const {
    if (error == cudaSuccess) return Status::Ok();
    return Status(ErrorCode::kBackend, what + ": CUDA " + cudaGetErrorName(error) + " (" +
                                           cudaGetErrorString(error) + ")");
  }
  // Waits until the non-blocking communicator has finished the call that
  // returned `result` (ncclInProgress), within `seconds`.
  Status Settle(ncclResult_t result, const std::string& what, double seconds);
  Status EnsureStaging(uint64_t bytes);
  std::string Prefix() const {
    return options_.program + ": rank " + std::to_string(rank_) + ": ";
  }
  void Watch();
  [[noreturn]] void Fatal(const std::string& line);
  void StopWatchdog();

  const int device_;
  const cudaStream_t compute_;
  const CommOptions options_;
  std::string description_;
  Communicator* comm_ = nullptr;
  int rank_ = 0, size_ = 1;
  ncclComm_t nccl_ = nullptr;
  cudaStream_t stream_ = nullptr;
  void* staging_ = nullptr;  // F32 tensors on a half wire, packed
  uint64_t staging_bytes_ = 0;
  bool finalized_ = false;
  // The caller's: transfers started and not yet waited for, by handle.
  std::unordered_map<int64_t, std::shared_ptr<Transfer>> unwaited_;

  std::thread watchdog_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::vector<std::shared_ptr<Transfer>> watched_;  // under mutex_
};

NcclCollectives::~NcclCollectives() {
  StopWatchdog();
  // Not finalized: the error path, on the way to reporting an error. Aborting
  // frees whatever the device is stuck in, if it does so in time.
  AbortBounded(nccl_);
  if (staging_ != nullptr) cudaFree(staging_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

Status NcclCollectives::Initialize() {
  int version = 0;
  if (nccl().ncclGetVersion(&version) != ncclSuccess)
    return Status(ErrorCode::kUnavailable, "NCCL does not say its version");
  description_ = "nccl " + std::to_string(version / 10000) + "." +
                 std::to_string(version / 100 % 100) + "." + std::to_string(version % 100);
  // The highest priority: a bucket's transfer should not queue behind the
  // backward kernels it is meant to overlap.
  int least = 0, greatest = 0;
  if (Status s = Cuda(cudaSetDevice(device_), "selecting the device"); !s.ok()) return s;
  if (Status s = Cuda(cudaDeviceGetStreamPriorityRange(&least, &greatest), "stream priorities");
      !s.ok())
    return s;
  return Cuda(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, greatest),
              "the collectives' stream");
}

Status NcclCollectives::Settle(ncclResult_t result, const std::string& what, double seconds) {
  const Clock::time_point deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  while (result == ncclInProgress) {
    if (Clock::now() > deadline)
      return Status(ErrorCode::kUnavailable,
                    what + ": NCCL did not finish within " + FormatSeconds(seconds) + " s");
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    ncclResult_t state = ncclSuccess;
    const ncclResult_t asked = nccl().ncclCommGetAsyncError(nccl_, &state);
    result = asked != ncclSuccess ? asked : state;
  }
  if (result != ncclSuccess)
    return Status(ErrorCode::kBackend, what + ": NCCL " + NcclText(result, nccl_));
  return Status::Ok();
}

Status NcclCollectives::Join(Communicator& comm) {
  comm_ = &comm;
  rank_ = comm.rank();
  size_ = comm.size();
  // Rank 0 makes the id; every rank learns whether it could before waiting
  // for it.
  ncclUniqueId id{};
  std::string why;
  if (rank_ == 0) {
    const ncclResult_t made = nccl().ncclGetUniqueId(&id);
    if (made != ncclSuccess) why = std::string("ncclGetUniqueId: ") + nccl().ncclGetErrorString(made);
  }
  std::vector<double> made = {why.empty() ? 1.0 : 0.0};
  if (Status s = comm.AllreduceDoubles("NCCL bootstrap", made, ScalarReduction::kMin); !s.ok())
    return s;
  if (made[0] == 0)
    return Status(ErrorCode::kUnavailable,
                  rank_ == 0 ? why : std::string("rank 0 could not make NCCL's unique id"));
  if (Status s = comm.Broadcast("NCCL unique id", &id, sizeof(id)); !s.ok()) return s;

  // Every rank joins, or every rank gives up (the caller then falls back
  // alike). The ranks vote twice: once the (non-blocking) init has started,
  // so that a rank failing at once stops the others at once, and once it has
  // finished. A rank that fails aborts its communicator before voting, which
  // closes its bootstrap connections and so fails its peers' init fast; the
  // init may take half the collective timeout, so that a rank waiting in the
  // second vote for one still settling never times out first.
  auto vote = [&](const char* what, Status& mine) -> Status {
    if (!mine.ok()) {
      AbortBounded(nccl_);
      nccl_ = nullptr;
    }
    StatusOr<std::vector<double>> votes = comm.AllgatherDoubles(what, {mine.ok() ? 1.0 : 0.0});
    if (!votes.ok()) return votes.status();
    std::vector<int> failed;
    for (int r = 0; r < size_; ++r)
      if ((*votes)[r] == 0) failed.push_back(r);
    if (failed.empty()) return Status::Ok();
    AbortBounded(nccl_);
    nccl_ = nullptr;
    return Status(ErrorCode::kUnavailable,
                  "NCCL could not start on rank(s) " + comm::RankList(failed) +
                      (mine.ok() ? std::string() : " (here: " + mine.message() + ")"));
  };
  Status started = Cuda(cudaSetDevice(device_), "selecting the device");
  ncclResult_t init = ncclSuccess;
  if (started.ok()) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // a rank that never joins costs a timeout, not a hang
    init = nccl().ncclCommInitRankConfig(&nccl_, size_, id, rank_, &config);
    if (init != ncclSuccess && init != ncclInProgress)
      started = Status(ErrorCode::kUnavailable, "ncclCommInitRankConfig: " + NcclText(init, nccl_));
  }
  if (Status s = vote("NCCL init started", started); !s.ok()) return s;
  Status joined = Settle(init, "ncclCommInitRankConfig",
                         std::min(options_.timeout_seconds / 2, kInitSecondsMax));
  if (Status s = vote("NCCL joined", joined); !s.ok()) return s;
  watchdog_ = std::thread(&NcclCollectives::Watch, this);
  return Status::Ok();
}

Status NcclCollectives::EnsureStaging(uint64_t bytes) {
  if (bytes <= staging_bytes_) return Status::Ok();
  if (staging_ != nullptr) {
    // Every transfer that used it is ordered before the ones to come on the
    // stream; the old buffer goes once the stream is past them.
    if (Status s = Cuda(cudaStreamSynchronize(stream_), "the collectives' stream"); !s.ok())
      return s;
    cudaFree(staging_);
    staging_ = nullptr;
    staging_bytes_ = 0;
  }
  if (Status s = Cuda(cudaMalloc(&staging_, bytes), "allocating " + std::to_string(bytes) +
                                                        " bytes for the allreduce's wire");
      !s.ok())
    return s;
  staging_bytes_ = bytes;
  return Status::Ok();
}

StatusOr<int64_t> NcclCollectives::StartAllreduce(std::string what,
                                                  std::vector<CommTensor> tensors,
                                                  Reduction reduction, fb::DType wire) {
  if (nccl_ == nullptr || finalized_)
    return Status(ErrorCode::kInvalidArgument, what + ": the NCCL collectives are not joined");
  // The host half first: it checks the arguments and the ranks' buckets.
  StatusOr<int64_t> arrival = comm_->StartArrival(what, tensors, reduction, wire);
  if (!arrival.ok()) return arrival.status();

  auto transfer = std::make_shared<Transfer>();
  transfer->seq = *arrival;
  transfer->what = "collective #" + std::to_string(*arrival) + " (" + what + ", on NCCL)";
  const std::string& name = transfer->what;
  cudaEvent_t ready = nullptr;
  auto cleanup = [&] {
    if (ready != nullptr) cudaEventDestroy(ready);
  };
  // F32 tensors on a half wire are packed into the staging buffer, grown
  // here, before the stream waits for the compute stream (growing waits for
  // the stream).
  const bool half_wire = wire == fb::DType::F16 || wire == fb::DType::BF16;
  uint64_t packed = 0;
  for (const CommTensor& t : tensors)
    if (half_wire && t.dtype == fb::DType::F32) packed += t.elements;
  Status status = packed > 0 ? EnsureStaging(packed * 2) : Status::Ok();
  if (status.ok())
    status = Cuda(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), name);
  if (status.ok())
    status = Cuda(cudaEventCreateWithFlags(&transfer->begun, cudaEventDisableTiming), name);
  if (status.ok())
    status = Cuda(cudaEventCreateWithFlags(&transfer->done, cudaEventDisableTiming), name);
  // The stream starts once the compute stream has produced the bucket.
  if (status.ok()) status = Cuda(cudaEventRecord(ready, compute_), name);
  if (status.ok()) status = Cuda(cudaStreamWaitEvent(stream_, ready, 0), name);
  if (status.ok()) status = Cuda(cudaEventRecord(transfer->begun, stream_), name);

  const bool mean = reduction == Reduction::kMean && size_ > 1;
  const float inverse = 1.0f / static_cast<float>(size_);

  // Before the sum: halves scaled (a mean), F32 tensors converted.
  uint64_t offset = 0;
  for (const CommTensor& t : tensors) {
    if (!status.ok() || t.elements == 0) continue;
    const int64_t n = static_cast<int64_t>(t.elements);
    if (half_wire && t.dtype == fb::DType::F32) {
      status = Cuda(cuda::FloatsToWire(static_cast<const float*>(t.data),
                                       static_cast<char*>(staging_) + offset * 2, CudaType(wire),
                                       n, mean ? inverse : 1.0f, stream_),
                    name);
      offset += t.elements;
    } else if (mean && (t.dtype == fb::DType::F16 || t.dtype == fb::DType::BF16)) {
      status = Cuda(cuda::ScaleInPlace(t.data, CudaType(t.dtype), n, inverse, stream_), name);
    }
  }
  if (status.ok()) {
    ncclResult_t result = nccl().ncclGroupStart();
    if (packed > 0 && result == ncclSuccess)
      result = nccl().ncclAllReduce(staging_, staging_, packed, NcclType(wire), ncclSum, nccl_, stream_);
    for (const CommTensor& t : tensors) {
      if (result != ncclSuccess || t.elements == 0) continue;
      if (half_wire && t.dtype == fb::DType::F32) continue;  // packed
      const ncclRedOp_t op = t.dtype == fb::DType::I1 ? ncclMax : ncclSum;
      result = nccl().ncclAllReduce(t.data, t.data, t.elements, NcclType(t.dtype), op, nccl_, stream_);
    }
    const ncclResult_t ended = nccl().ncclGroupEnd();
    if (result == ncclSuccess || result == ncclInProgress) result = ended;
    status = Settle(result, name + ": ncclAllReduce", options_.timeout_seconds);
  }
  // After: F32 means scaled, the wire widened back.
  offset = 0;
  for (const CommTensor& t : tensors) {
    if (!status.ok() || t.elements == 0) continue;
    const int64_t n = static_cast<int64_t>(t.elements);
    if (half_wire && t.dtype == fb::DType::F32) {
      status = Cuda(cuda::WireToFloats(static_cast<const char*>(staging_) + offset * 2,
                                       static_cast<float*>(t.data), CudaType(wire), n, stream_),
                    name);
      offset += t.elements;
    } else if (mean && t.dtype == fb::DType::F32) {
      status = Cuda(cuda::ScaleInPlace(t.data, CUDA_R_32F, n, inverse, stream_), name);
    }
  }
  if (status.ok()) status = Cuda(cudaEventRecord(transfer->done, stream_), name);
  cleanup();
  if (!status.ok()) {
    // The arrival is waited for, so that the communicator keeps no handle;
    // the caller fails the run.
    comm_->Wait(*arrival);
    return status;
  }
  unwaited_.emplace(*arrival, transfer);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    watched_.push_back(std::move(transfer));
  }
  return *arrival;
}

Status NcclCollectives::Wait(int64_t handle) {
  auto it = unwaited_.find(handle);
  if (it == unwaited_.end())
    return Status(ErrorCode::kInvalidArgument,
                  "Wait: handle " + std::to_string(handle) + " is unknown or already waited for");
  std::shared_ptr<Transfer> transfer = std::move(it->second);
  unwaited_.erase(it);
  // Every rank reached the bucket (else the communicator names who did not).
  if (Status s = comm_->Wait(handle); !s.ok()) return s;
  return Cuda(cudaStreamWaitEvent(compute_, transfer->done, 0), transfer->what);
}

Status NcclCollectives::Finalize() {
  if (finalized_) return Status::Ok();
  finalized_ = true;
  if (!unwaited_.empty())
    return Status(ErrorCode::kInternal, std::to_string(unwaited_.size()) +
                                            " NCCL allreduce(s) were never waited for");
  if (nccl_ == nullptr) return Status::Ok();
  // A transfer that hangs here is the watchdog's to report.
  Status status = Cuda(cudaStreamSynchronize(stream_), "the collectives' stream");
  StopWatchdog();
  if (status.ok())
    status = Settle(nccl().ncclCommFinalize(nccl_), "ncclCommFinalize", options_.timeout_seconds);
  if (status.ok()) {
    const ncclResult_t destroyed = nccl().ncclCommDestroy(nccl_);
    nccl_ = nullptr;
    if (destroyed != ncclSuccess)
      status = Status(ErrorCode::kBackend,
                      std::string("ncclCommDestroy: ") + nccl().ncclGetErrorString(destroyed));
  }
  return status;
}

void NcclCollectives::StopWatchdog() {
  if (!watchdog_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_one();
  watchdog_.join();
}

void NcclCollectives::Fatal(const std::string& line) {
  // No ncclCommAbort here: the main thread may be inside an NCCL call on the
  // same communicator (NCCL allows one thread per communicator at a time),
  // and an abort may block. The process exit ends the device's kernels.
  comm::ExitWithReport(Prefix() + line, kCommFatalExitCode);
}

void NcclCollectives::Watch() {
  // Runtime API calls act on the calling thread's current device.
  if (cudaSetDevice(device_) != cudaSuccess)
    Fatal("the NCCL watchdog cannot select cuda:" + std::to_string(device_));
  const auto timeout = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(options_.timeout_seconds));
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    wake_.wait_for(lock, kWatchInterval, [&] { return stop_; });
    if (stop_) break;
    ncclResult_t state = ncclSuccess;
    const ncclResult_t asked = nccl().ncclCommGetAsyncError(nccl_, &state);
    if (asked != ncclSuccess || (state != ncclSuccess && state != ncclInProgress)) {
      const std::string during = watched_.empty() ? "between allreduces" : watched_.front()->what;
      Fatal(during + ": NCCL failed: " + NcclText(asked != ncclSuccess ? asked : state, nccl_));
    }
    const Clock::time_point now = Clock::now();
    for (size_t i = 0; i < watched_.size();) {
      Transfer& t = *watched_[i];
      const cudaError_t finished = cudaEventQuery(t.done);
      if (finished == cudaSuccess) {
        watched_.erase(watched_.begin() + static_cast<std::ptrdiff_t>(i));
        continue;
      }
      if (finished != cudaErrorNotReady)
        Fatal(t.what + ": the device failed: CUDA " + cudaGetErrorName(finished) + " (" +
              cudaGetErrorString(finished) + ")");
      if (!t.begun_seen && cudaEventQuery(t.begun) == cudaSuccess) {
        t.begun_seen = true;
        t.begun_at = now;
      }
      if (t.begun_seen && now - t.begun_at > timeout + kArrivalGrace)
        Fatal(t.what + " timed out after " + FormatSeconds(options_.timeout_seconds) +
              " s: every rank arrived, but the transfer did not finish");
      ++i;
    }
  }
}

}  // namespace

StatusOr<std::unique_ptr<DeviceCollectives>> NewNcclCollectives(int device, cudaStream_t compute,
                                                                const CommOptions& options) {
  if (!Nccl().ok()) return Nccl().status();
  auto collectives = std::make_unique<NcclCollectives>(device, compute, options);
  if (Status s = collectives->Initialize(); !s.ok()) return s;
  return std::unique_ptr<DeviceCollectives>(std::move(collectives));
}

}  // namespace graphc::runtime
