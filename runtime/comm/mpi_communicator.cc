// The MPI communicator. One communication thread makes every MPI call, from
// MPI_Init_thread to MPI_Finalize, so MPI only needs MPI_THREAD_FUNNELED (it
// is asked for SERIALIZED, which Open MPI gives without the locking cost of
// MULTIPLE). Callers queue jobs; the thread starts them in queue order (every
// rank queues the same collectives in the same order, so sequence numbers
// match across ranks), packs each allreduce's tensors into a staging buffer
// (one per job in flight, reused across steps; tensors of 1 MiB and more are
// reduced in place instead), issues one nonblocking collective per wire dtype
// (and per in-place tensor), and polls them with MPI_Test, sleeping ~80 us
// between polls that found nothing: the compute threads need the cores, and
// Open MPI only moves data when polled. Meanwhile the callers compute: that is
// the overlap.
//
// Failure is fatal and explained. Each rank tells every other rank, on a
// communicator of its own, the sequence number of each collective it starts
// with a signature of its arguments (kind, element count, a hash of the dtypes
// and sizes); the thread keeps a receive posted per peer, so it always knows
// how far each peer has got. A collective running longer than the timeout
// ends the process with one line naming the ranks that never started it, and
// the same knowledge feeds the line a SIGTERM prints (termination.h). The
// thread issues a collective only once every peer's signature for it has come
// in and matches: ranks whose collectives differ (another plan, a bug) get a
// line saying how, where MPI would hang, corrupt data, or crash (Open MPI
// 4.1.4's libnbc double-frees on a truncated message). That costs one small
// message's latency per collective, a few microseconds on one machine.

#include "runtime/comm/mpi_communicator.h"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime/comm/termination.h"
#include "runtime/comm/wire_format.h"

namespace graphc::runtime::comm {
namespace {

using Clock = std::chrono::steady_clock;

// How long the thread sleeps after a poll that completed nothing. A 25 MiB
// allreduce polled every 50 or 100 us took as long as one polled without a
// pause (measured), and the sleeping thread leaves the cores to compute.
constexpr auto kPollInterval = std::chrono::microseconds(80);
// MPI counts are ints: larger transfers go in pieces of this many elements.
constexpr uint64_t kMaxCount = uint64_t{1} << 30;
constexpr int kArrivalTag = 1;
// The caller's own clock gives the thread this long to report first.
constexpr auto kCallerGrace = std::chrono::seconds(1);
// Tensors this large (in their own dtype) are reduced in place, each by its
// own call, rather than packed: on one machine the two copies of a 25 MiB
// bucket took longer than its transfer (measured: 9 ms in place, 19 ms packed).
constexpr uint64_t kInPlaceBytes = uint64_t{1} << 20;

enum class JobKind {
  kAllreduce,
  kDoubles,
  kAllgather,
  kBroadcast,
  kBarrier,
  kFinalize,
  kArrival,
  kSparse
};

const char* KindName(int64_t kind) {
  switch (static_cast<JobKind>(kind)) {
    case JobKind::kAllreduce: return "allreduce";
    case JobKind::kDoubles: return "allreduce of doubles";
    case JobKind::kAllgather: return "allgather";
    case JobKind::kBroadcast: return "broadcast";
    case JobKind::kBarrier: return "barrier";
    case JobKind::kFinalize: return "finalize";
    case JobKind::kArrival: return "device allreduce";
    case JobKind::kSparse: return "sparse allreduce";
  }
  return "unknown collective";
}

// What a rank tells the others when it starts a collective.
struct Arrival {
  int64_t seq = 0;
  int64_t kind = 0;
  int64_t elements = 0;  // tensor elements, doubles, or bytes
  int64_t hash = 0;      // of the dtypes, sizes and reduction
};
constexpr int kArrivalWords = sizeof(Arrival) / sizeof(int64_t);
static_assert(sizeof(Arrival) == 4 * sizeof(int64_t), "sent as 4 MPI_INT64_T");

// A growable, 64-byte aligned buffer.
class Staging {
 public:
  ~Staging() { std::free(data_); }
  char* data() { return data_; }
  uint64_t capacity() const { return capacity_; }
  bool Reserve(uint64_t bytes) {
    if (bytes <= capacity_) return true;
    const uint64_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    if (p == nullptr) return false;
    std::free(data_);
    data_ = static_cast<char*>(p);
    capacity_ = rounded;
    return true;
  }

 private:
  char* data_ = nullptr;
  uint64_t capacity_ = 0;
};

// What one MPI call reduces: the tensors of a bucket that travel in one
// dtype, packed, or one tensor where it lies.
struct Group {
  fb::DType wire;
  std::vector<size_t> tensors;  // indices into Job::tensors
  uint64_t elements = 0;
  uint64_t offset = 0;          // into the staging buffer
  char* base = nullptr;         // what MPI reduces: the staging, or the tensor itself
  bool direct = false;          // one tensor in its own dtype, not packed
};

struct Job {
  JobKind kind;
  int64_t seq = 0;
  std::string what;
  // kAllreduce
  std::vector<CommTensor> tensors;
  Reduction reduction = Reduction::kSum;
  fb::DType wire = fb::DType::F32;
  std::vector<Group> groups;
  std::unique_ptr<Staging> staging;
  // kSparse (tensors and reduction as above): this rank's count per set, then
  // every rank's (phase 1, after the counts are gathered), and where the
  // pairs land.
  std::vector<uint32_t> counts;
  std::vector<uint32_t> all_counts;
  int phase = 0;
  std::unique_ptr<Staging> received;
  // kDoubles, kAllgather
  double* doubles = nullptr;
  uint64_t count = 0;
  ScalarReduction scalar = ScalarReduction::kSum;
  double* gathered = nullptr;
  // kBroadcast
  char* bytes = nullptr;
  uint64_t byte_count = 0;
  // On the communication thread.
  Arrival signature;
  int matched = 0;      // peers whose signature for this collective matched
  bool issued = false;  // the MPI call is made (once every peer matched)
  std::vector<MPI_Request> requests;
  Clock::time_point started;
  // Under MpiCommunicator::mutex_.
  bool done = false;
  Status status;  // kFinalize's outcome
};

// FNV-1a, over 64-bit words.
class Hash {
 public:
  Hash& Add(uint64_t word) {
    for (int i = 0; i < 8; ++i) {
      value_ ^= (word >> (8 * i)) & 0xff;
      value_ *= 0x100000001b3ull;
    }
    return *this;
  }
  int64_t value() const { return static_cast<int64_t>(value_); }

 private:
  uint64_t value_ = 0xcbf29ce484222325ull;
};

Arrival SignatureOf(const Job& job) {
  Arrival a;
  a.seq = job.seq;
  a.kind = static_cast<int64_t>(job.kind);
  Hash hash;
  switch (job.kind) {
    case JobKind::kAllreduce:
    case JobKind::kArrival:
    case JobKind::kSparse:
      hash.Add(static_cast<uint64_t>(job.reduction)).Add(static_cast<uint64_t>(job.wire));
      for (const CommTensor& t : job.tensors) {
        hash.Add(static_cast<uint64_t>(t.dtype)).Add(t.elements);
        a.elements += static_cast<int64_t>(t.elements);
      }
      break;
    case JobKind::kDoubles:
      hash.Add(static_cast<uint64_t>(job.scalar));
      a.elements = static_cast<int64_t>(job.count);
      break;
    case JobKind::kAllgather:
      a.elements = static_cast<int64_t>(job.count);
      break;
    case JobKind::kBroadcast:
      a.elements = static_cast<int64_t>(job.byte_count);
      break;
    case JobKind::kBarrier:
    case JobKind::kFinalize:
      break;
  }
  a.hash = hash.value();
  return a;
}

std::string ArrivalText(const Arrival& a) {
  std::string text = KindName(a.kind);
  switch (static_cast<JobKind>(a.kind)) {
    case JobKind::kAllreduce:
    case JobKind::kArrival:
    case JobKind::kSparse: return text + " of " + std::to_string(a.elements) + " elements";
    case JobKind::kDoubles:
    case JobKind::kAllgather: return text + " of " + std::to_string(a.elements) + " values";
    case JobKind::kBroadcast: return text + " of " + std::to_string(a.elements) + " bytes";
    default: return text;
  }
}

void SumHalvesOp(void* in, void* inout, int* len, MPI_Datatype*) {
  AddHalves(static_cast<const uint16_t*>(in), static_cast<uint16_t*>(inout),
            static_cast<uint64_t>(*len));
}
void SumBf16sOp(void* in, void* inout, int* len, MPI_Datatype*) {
  AddBf16s(static_cast<const uint16_t*>(in), static_cast<uint16_t*>(inout),
           static_cast<uint64_t>(*len));
}

std::string MpiErrorString(int code) {
  char text[MPI_MAX_ERROR_STRING + 1] = {0};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) {
    return "MPI error " + std::to_string(code);
  }
  return std::string(text, static_cast<size_t>(length));
}

std::string FormatSeconds(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", seconds);
  return text;
}

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(const CommOptions& options) : options_(options) {}
  ~MpiCommunicator() override;

  Status Start();

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }
  std::string Describe() const override;

  StatusOr<int64_t> StartAllreduce(std::string what, std::vector<CommTensor> tensors,
                                   Reduction reduction, fb::DType wire) override;
  StatusOr<int64_t> StartArrival(std::string what, const std::vector<CommTensor>& tensors,
                                 Reduction reduction, fb::DType wire) override;
  StatusOr<int64_t> StartSparseAllreduce(std::string what, std::vector<CommTensor> tensors,
                                         Reduction reduction) override;
  Status Wait(int64_t handle) override;
  Status AllreduceDoubles(std::string what, std::vector<double>& values,
                          ScalarReduction reduction) override;
  StatusOr<std::vector<double>> AllgatherDoubles(std::string what,
                                                 std::vector<double> values) override;
  Status Broadcast(std::string what, void* data, uint64_t bytes) override;
  Status Barrier(std::string what) override;
  double seconds_waiting() const override { return waiting_ns_.load() * 1e-9; }
  Status Finalize() override;

 private:
  // The callers' side.
  Status Submit(const std::shared_ptr<Job>& job, bool finalizing = false);
  Status WaitFor(const std::shared_ptr<Job>& job);
  std::vector<int> Missing(int64_t seq) const;
  std::string Prefix() const { return options_.program + ": rank " + std::to_string(rank_) + ": "; }
  std::string Name(const Job& job) const {
    return "collective #" + std::to_string(job.seq) + " (" + job.what + ")";
  }
  [[noreturn]] void TimedOut(const Job& job) const;

  // The communication thread's side.
  void ThreadMain(std::promise<Status> initialized);
  Status InitializeMpi();
  void Loop();
  void Begin(Job& job);
  void Pack(Job& job);
  bool Progress(Job& job);
  void Unpack(Job& job);
  void GatherPairs(Job& job);
  void AddPairs(Job& job);
  void Finish(Job& job);
  void Issue(Job& job);
  void SendArrival(const Arrival& arrival);
  bool PollArrivals();
  void PostArrivalReceive(int peer);
  void Match(Job& job, int peer);
  Job* ActiveJob(int64_t seq);
  void PollSends();
  void CheckTimeouts();
  void UpdateTerminationLine();
  Status Teardown(const Job& finalize);
  void Check(int code, const char* call, const Job* job);
  std::unique_ptr<Staging> AcquireStaging(uint64_t bytes, const Job& job);

  const CommOptions options_;
  // Set by the thread before Start returns, then constant.
  int rank_ = 0;
  int size_ = 1;
  int local_rank_ = 0;
  int local_size_ = 1;
  int nodes_ = 1;
  std::string library_;
  std::unique_ptr<std::atomic<int64_t>[]> arrived_;  // per rank: the last collective it started

  std::thread thread_;
  mutable std::mutex mutex_;
  std::condition_variable work_cv_;  // the thread waits for jobs
  std::condition_variable done_cv_;  // callers wait for their jobs
  std::deque<std::shared_ptr<Job>> queue_;
  std::unordered_map<int64_t, std::shared_ptr<Job>> unwaited_;  // StartAllreduce handles
  int64_t last_seq_ = 0;
  bool finalizing_ = false;  // Finalize was called: nothing more may start
  bool stop_ = false;        // the destructor: the thread leaves at once
  std::atomic<int64_t> waiting_ns_{0};

  // The communication thread's own.
  MPI_Comm comm_ = MPI_COMM_NULL;           // the collectives
  MPI_Comm arrivals_comm_ = MPI_COMM_NULL;  // the arrival messages, apart from them
  // Sparse allreduces' pairs. Their gathers are posted once the counts are
  // in, which happens at different times on different ranks, while other
  // collectives go on being posted on comm_: on a communicator of their own,
  // posted in the sparse jobs' order, they match across ranks all the same.
  MPI_Comm sparse_comm_ = MPI_COMM_NULL;
  MPI_Op sum_halves_ = MPI_OP_NULL;
  MPI_Op sum_bf16s_ = MPI_OP_NULL;
  std::vector<std::shared_ptr<Job>> active_;  // started, in start order
  std::vector<std::unique_ptr<Staging>> free_staging_;
  std::vector<Arrival> arrival_values_;  // per peer: the receive buffer
  std::vector<MPI_Request> arrival_receives_;
  // Per peer: its message is for a collective this rank has not begun; it is
  // matched, and the receive posted again, when this rank begins it.
  std::vector<char> arrival_held_;
  std::vector<int> testsome_indices_;
  int64_t begun_seq_ = 0;
  struct ArrivalSend {
    Arrival message;
    std::vector<MPI_Request> requests;
  };
  std::deque<std::unique_ptr<ArrivalSend>> arrival_sends_;
  int64_t completed_seq_ = 0;
  bool line_dirty_ = true;
  std::string line_;
};

MpiCommunicator::~MpiCommunicator() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  work_cv_.notify_one();
  thread_.join();
}

Status MpiCommunicator::Start() {
  // The thread owns the promise, so that it outlives set_value.
  std::promise<Status> initialized;
  std::future<Status> result = initialized.get_future();
  thread_ = std::thread(&MpiCommunicator::ThreadMain, this, std::move(initialized));
  Status status = result.get();
  if (!status.ok()) thread_.join();  // it has returned
  return status;
}

std::string MpiCommunicator::Describe() const {
  return "mpi: " + std::to_string(size_) + (size_ == 1 ? " rank" : " ranks") + " on " +
         std::to_string(nodes_) + (nodes_ == 1 ? " node" : " nodes") + " (" + library_ + ")";
}

// ---- the callers' side -------------------------------------------------------

Status MpiCommunicator::Submit(const std::shared_ptr<Job>& job, bool finalizing) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (finalizing_ && !finalizing) {
      return Status(ErrorCode::kInvalidArgument, job->what + ": the communicator is finalized");
    }
    job->seq = ++last_seq_;
    queue_.push_back(job);
    if (job->kind == JobKind::kAllreduce || job->kind == JobKind::kArrival ||
        job->kind == JobKind::kSparse) {
      unwaited_.emplace(job->seq, job);
    }
  }
  work_cv_.notify_one();
  return Status::Ok();
}

Status MpiCommunicator::WaitFor(const std::shared_ptr<Job>& job) {
  const Clock::time_point start = Clock::now();
  const auto timeout = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(options_.timeout_seconds));
  const Clock::time_point deadline = start + timeout + kCallerGrace;
  std::unique_lock<std::mutex> lock(mutex_);
  while (!job->done) {
    if (done_cv_.wait_until(lock, deadline) == std::cv_status::timeout && !job->done) {
      lock.unlock();
      TimedOut(*job);  // the thread itself is stuck
    }
  }
  lock.unlock();
  waiting_ns_.fetch_add(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count());
  return job->status;
}

std::vector<int> MpiCommunicator::Missing(int64_t seq) const {
  std::vector<int> missing;
  for (int r = 0; r < size_; ++r) {
    if (r != rank_ && arrived_[r].load() < seq) missing.push_back(r);
  }
  return missing;
}

void MpiCommunicator::TimedOut(const Job& job) const {
  const std::vector<int> missing = Missing(job.seq);
  std::string line = Prefix() + Name(job) + " timed out after " +
                     FormatSeconds(options_.timeout_seconds) + " s: ";
  if (missing.empty()) {
    line += "every rank arrived, but the transfer did not finish";
  } else {
    line += "rank(s) " + RankList(missing) + " did not arrive";
  }
  ExitWithReport(line, kCommFatalExitCode);
}

StatusOr<int64_t> MpiCommunicator::StartAllreduce(std::string what,
                                                  std::vector<CommTensor> tensors,
                                                  Reduction reduction, fb::DType wire) {
  if (Status s = CheckAllreduce(what, tensors, reduction, wire); !s.ok()) return s;
  auto job = std::make_shared<Job>();
  job->kind = JobKind::kAllreduce;
  job->what = std::move(what);
  job->tensors = std::move(tensors);
  job->reduction = reduction;
  job->wire = wire;
  if (Status s = Submit(job); !s.ok()) return s;
  return job->seq;
}

StatusOr<int64_t> MpiCommunicator::StartArrival(std::string what,
                                                const std::vector<CommTensor>& tensors,
                                                Reduction reduction, fb::DType wire) {
  if (Status s = CheckAllreduce(what, tensors, reduction, wire); !s.ok()) return s;
  auto job = std::make_shared<Job>();
  job->kind = JobKind::kArrival;
  job->what = std::move(what);
  job->tensors = tensors;  // for the signature only: never read or written
  job->reduction = reduction;
  job->wire = wire;
  if (Status s = Submit(job); !s.ok()) return s;
  return job->seq;
}

StatusOr<int64_t> MpiCommunicator::StartSparseAllreduce(std::string what,
                                                        std::vector<CommTensor> tensors,
                                                        Reduction reduction) {
  std::vector<uint32_t> counts;
  if (Status s = comm::CheckSparse(what, tensors, counts); !s.ok()) return s;
  // Every rank's pairs arrive in one MPI_Iallgatherv, whose counts are ints.
  uint64_t capacity = 0;
  for (size_t s = 0; s < tensors.size(); s += 3) capacity += tensors[s].elements;
  if (capacity * 2 * static_cast<uint64_t>(size_) > INT_MAX)
    return Status(ErrorCode::kInvalidArgument,
                  what + ": " + std::to_string(capacity) + " pairs per rank on " +
                      std::to_string(size_) + " ranks are too many for one gather");
  auto job = std::make_shared<Job>();
  job->kind = JobKind::kSparse;
  job->what = std::move(what);
  job->tensors = std::move(tensors);
  job->reduction = reduction;
  job->counts = std::move(counts);
  if (Status s = Submit(job); !s.ok()) return s;
  return job->seq;
}

Status MpiCommunicator::Wait(int64_t handle) {
  std::shared_ptr<Job> job;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = unwaited_.find(handle);
    if (it == unwaited_.end()) {
      return Status(ErrorCode::kInvalidArgument,
                    "Wait: handle " + std::to_string(handle) + " is unknown or already waited for");
    }
    job = std::move(it->second);
    unwaited_.erase(it);
  }
  return WaitFor(job);
}

Status MpiCommunicator::AllreduceDoubles(std::string what, std::vector<double>& values,
                                         ScalarReduction reduction) {
  if (values.size() > INT_MAX) {
    return Status(ErrorCode::kInvalidArgument, what + ": too many values");
  }
  auto job = std::make_shared<Job>();
  job->kind = JobKind::kDoubles;
  job->what = std::move(what);
  job->doubles = values.data();
  job->count = values.size();
  job->scalar = reduction;
  if (Status s = Submit(job); !s.ok()) return s;
  return WaitFor(job);
}

StatusOr<std::vector<double>> MpiCommunicator::AllgatherDoubles(std::string what,
                                                                std::vector<double> values) {
  if (values.size() > INT_MAX / static_cast<size_t>(size_)) {
    return Status(ErrorCode::kInvalidArgument, what + ": too many values");
  }
  std::vector<double> gathered(values.size() * static_cast<size_t>(size_));
  auto job = std::make_shared<Job>();
  job->kind = JobKind::kAllgather;
  job->what = std::move(what);
  job->doubles = values.data();
  job->count = values.size();
  job->gathered = gathered.data();
  if (Status s = Submit(job); !s.ok()) return s;
  if (Status s = WaitFor(job); !s.ok()) return s;
  return gathered;
}

Status MpiCommunicator::Broadcast(std::string what, void* data, uint64_t bytes) {
  if (bytes > 0 && data == nullptr) {
    return Status(ErrorCode::kInvalidArgument, what + ": no data to broadcast");
  }
  auto job = std::make_shared<Job>();
  job->kind = JobKind::kBroadcast;
  job->what = std::move(what);
  job->bytes = static_cast<char*>(data);
  job->byte_count = bytes;
  if (Status s = Submit(job); !s.ok()) return s;
  return WaitFor(job);
}

Status MpiCommunicator::Barrier(std::string what) {
  auto job = std::make_shared<Job>();
  job->kind = JobKind::kBarrier;
  job->what = std::move(what);
  if (Status s = Submit(job); !s.ok()) return s;
  return WaitFor(job);
}

Status MpiCommunicator::Finalize() {
  auto job = std::make_shared<Job>();
  job->kind = JobKind::kFinalize;
  job->what = "finalize";
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (finalizing_) return Status::Ok();
    finalizing_ = true;
  }
  if (Status s = Submit(job, /*finalizing=*/true); !s.ok()) return s;
  Status status = WaitFor(job);
  thread_.join();
  return status;
}

// ---- the communication thread --------------------------------------------------

void MpiCommunicator::ThreadMain(std::promise<Status> initialized) {
  Status status = InitializeMpi();
  const bool ok = status.ok();
  initialized.set_value(std::move(status));
  if (ok) Loop();
}

Status MpiCommunicator::InitializeMpi() {
  int flag = 0;
  MPI_Initialized(&flag);
  if (flag) {
    return Status(ErrorCode::kUnavailable,
                  "MPI is already initialized in this process: one communicator per process");
  }
  // Open MPI's nonblocking allreduce (coll/libnbc) sends the whole buffer up
  // a binomial tree and back down whenever there are fewer than 4 ranks or
  // the buffer is in place, as every one here is; its reduce-scatter +
  // allgather schedule (Rabenseifner's) halves a 2-rank 25 MiB allreduce
  // (measured: 19 ms -> 10 ms). A setting the user made wins. (The caller's
  // thread waits in Start meanwhile; other MPIs ignore the variable.)
  setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "3", /*overwrite=*/0);
  int provided = 0;
  int code = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
  if (code != MPI_SUCCESS) {
    return Status(ErrorCode::kBackend, "MPI_Init_thread failed: " + MpiErrorString(code));
  }
  if (provided < MPI_THREAD_FUNNELED) {
    return Status(ErrorCode::kBackend,
                  "MPI offers no thread support (MPI_THREAD_FUNNELED is needed: the "
                  "communication thread is not the main thread)");
  }
  auto fail = [](const char* call, int code) {
    return Status(ErrorCode::kBackend, std::string(call) + " failed: " + MpiErrorString(code));
  };
  // Errors come back as codes, reported as one line, instead of MPI aborting
  // the job; the duplicated communicators inherit the handler.
  if ((code = MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN)) != MPI_SUCCESS) {
    return fail("MPI_Comm_set_errhandler", code);
  }
  if ((code = MPI_Comm_dup(MPI_COMM_WORLD, &comm_)) != MPI_SUCCESS) {
    return fail("MPI_Comm_dup", code);
  }
  if ((code = MPI_Comm_dup(MPI_COMM_WORLD, &sparse_comm_)) != MPI_SUCCESS) {
    return fail("MPI_Comm_dup", code);
  }
  if ((code = MPI_Comm_dup(MPI_COMM_WORLD, &arrivals_comm_)) != MPI_SUCCESS) {
    return fail("MPI_Comm_dup", code);
  }
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  MPI_Comm local = MPI_COMM_NULL;
  if ((code = MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local)) !=
      MPI_SUCCESS) {
    return fail("MPI_Comm_split_type", code);
  }
  MPI_Comm_rank(local, &local_rank_);
  MPI_Comm_size(local, &local_size_);
  MPI_Comm_free(&local);
  int leader = local_rank_ == 0 ? 1 : 0;
  if ((code = MPI_Allreduce(&leader, &nodes_, 1, MPI_INT, MPI_SUM, comm_)) != MPI_SUCCESS) {
    return fail("MPI_Allreduce", code);
  }
  char version[MPI_MAX_LIBRARY_VERSION_STRING + 1] = {0};
  int length = 0;
  MPI_Get_library_version(version, &length);
  library_.assign(version, static_cast<size_t>(length));
  library_ = library_.substr(0, library_.find_first_of(",\n"));  // "Open MPI v4.1.4"
  MPI_Op_create(&SumHalvesOp, /*commute=*/1, &sum_halves_);
  MPI_Op_create(&SumBf16sOp, /*commute=*/1, &sum_bf16s_);

  arrived_ = std::make_unique<std::atomic<int64_t>[]>(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) arrived_[r].store(0);
  arrival_values_.assign(static_cast<size_t>(size_), Arrival());
  arrival_receives_.assign(static_cast<size_t>(size_), MPI_REQUEST_NULL);
  arrival_held_.assign(static_cast<size_t>(size_), 0);
  testsome_indices_.assign(static_cast<size_t>(size_), 0);
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    if ((code = MPI_Irecv(&arrival_values_[r], kArrivalWords, MPI_INT64_T, r, kArrivalTag,
                          arrivals_comm_, &arrival_receives_[r])) != MPI_SUCCESS) {
      return fail("MPI_Irecv", code);
    }
  }
  UpdateTerminationLine();
  return Status::Ok();
}

void MpiCommunicator::Check(int code, const char* call, const Job* job) {
  if (code == MPI_SUCCESS) return;
  const std::string where = job != nullptr ? Name(*job) : std::string("arrival tracking");
  ExitWithReport(Prefix() + where + ": " + call + " failed: " + MpiErrorString(code),
                 kCommFatalExitCode);
}

void MpiCommunicator::Loop() {
  std::vector<std::shared_ptr<Job>> incoming;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (active_.empty()) {
        work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      }
      if (stop_) break;
      incoming.assign(queue_.begin(), queue_.end());
      queue_.clear();
    }
    bool progressed = !incoming.empty();
    for (std::shared_ptr<Job>& job : incoming) {
      Begin(*job);
      active_.push_back(std::move(job));
    }
    incoming.clear();
    progressed |= PollArrivals();
    for (size_t i = 0; i < active_.size();) {
      Job& job = *active_[i];
      if (!Progress(job)) {
        ++i;
        continue;
      }
      progressed = true;
      if (job.kind == JobKind::kFinalize) {
        Status status = Teardown(job);
        std::lock_guard<std::mutex> lock(mutex_);
        job.status = std::move(status);
        job.done = true;
        done_cv_.notify_all();
        return;  // MPI is finalized; Finalize() joins this thread
      }
      Finish(job);
      active_.erase(active_.begin() + static_cast<std::ptrdiff_t>(i));
    }
    PollSends();
    CheckTimeouts();
    UpdateTerminationLine();
    if (!progressed && !active_.empty()) {
      std::unique_lock<std::mutex> lock(mutex_);
      work_cv_.wait_for(lock, kPollInterval, [&] { return stop_ || !queue_.empty(); });
    }
  }
  // Abandoned by the destructor: MPI stays initialized, the requests pending;
  // the process is on its way out with an error, and mpirun ends the job.
  active_.clear();
  line_dirty_ = true;
  UpdateTerminationLine();
}

void MpiCommunicator::SendArrival(const Arrival& arrival) {
  auto send = std::make_unique<ArrivalSend>();
  send->message = arrival;
  send->requests.reserve(static_cast<size_t>(size_ - 1));
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    MPI_Request request;
    Check(MPI_Isend(&send->message, kArrivalWords, MPI_INT64_T, r, kArrivalTag, arrivals_comm_,
                    &request),
          "MPI_Isend", nullptr);
    send->requests.push_back(request);
  }
  arrival_sends_.push_back(std::move(send));
}

void MpiCommunicator::PostArrivalReceive(int peer) {
  Check(MPI_Irecv(&arrival_values_[peer], kArrivalWords, MPI_INT64_T, peer, kArrivalTag,
                  arrivals_comm_, &arrival_receives_[peer]),
        "MPI_Irecv", nullptr);
}

Job* MpiCommunicator::ActiveJob(int64_t seq) {
  for (const std::shared_ptr<Job>& job : active_) {
    if (job->seq == seq) return job.get();
  }
  return nullptr;
}

void MpiCommunicator::Match(Job& job, int peer) {
  const Arrival& theirs = arrival_values_[peer];
  const Arrival& ours = job.signature;
  if (theirs.kind != ours.kind || theirs.elements != ours.elements || theirs.hash != ours.hash) {
    std::string how = ArrivalText(ours) + " here, " + ArrivalText(theirs) + " there";
    if (theirs.kind == ours.kind && theirs.elements == ours.elements) {
      how = ArrivalText(ours) + " on both, but other dtypes, sizes or reduction";
    }
    ExitWithReport(Prefix() + Name(job) + " does not match rank " + std::to_string(peer) +
                       "'s: " + how +
                       " (every rank must start the same collectives in the same order)",
                   kCommFatalExitCode);
  }
  if (++job.matched == size_ - 1) Issue(job);
}

bool MpiCommunicator::PollArrivals() {
  bool any = false;
  for (;;) {
    int count = 0;
    Check(MPI_Testsome(size_, arrival_receives_.data(), &count, testsome_indices_.data(),
                       MPI_STATUSES_IGNORE),
          "MPI_Testsome", nullptr);
    if (count == MPI_UNDEFINED || count == 0) break;
    for (int k = 0; k < count; ++k) {
      // Each peer's messages come in order (MPI does not reorder messages
      // between two ranks on one communicator and tag), one per collective.
      const int r = testsome_indices_[k];
      const int64_t seq = arrival_values_[r].seq;
      arrived_[r].store(seq);
      if (seq > begun_seq_) {
        arrival_held_[r] = 1;  // Begin matches it
        continue;
      }
      Job* job = ActiveJob(seq);
      if (job == nullptr) {
        ExitWithReport(Prefix() + "arrival tracking: rank " + std::to_string(r) +
                           " started collective #" + std::to_string(seq) +
                           ", which this rank has finished",
                       kCommFatalExitCode);
      }
      Match(*job, r);
      PostArrivalReceive(r);
    }
    any = true;
    line_dirty_ = true;
  }
  return any;
}

void MpiCommunicator::PollSends() {
  while (!arrival_sends_.empty()) {
    ArrivalSend& send = *arrival_sends_.front();
    int done = 0;
    Check(MPI_Testall(static_cast<int>(send.requests.size()), send.requests.data(), &done,
                      MPI_STATUSES_IGNORE),
          "MPI_Testall", nullptr);
    if (!done) break;
    arrival_sends_.pop_front();
  }
}

std::unique_ptr<Staging> MpiCommunicator::AcquireStaging(uint64_t bytes, const Job& job) {
  // The smallest free buffer that fits, else the largest, grown: each step
  // starts the same buckets, so the buffers settle on their sizes.
  size_t best = free_staging_.size();
  for (size_t i = 0; i < free_staging_.size(); ++i) {
    const uint64_t capacity = free_staging_[i]->capacity();
    if (best == free_staging_.size()) {
      best = i;
      continue;
    }
    const uint64_t best_capacity = free_staging_[best]->capacity();
    const bool fits = capacity >= bytes, best_fits = best_capacity >= bytes;
    if ((fits && (!best_fits || capacity < best_capacity)) ||
        (!fits && !best_fits && capacity > best_capacity)) {
      best = i;
    }
  }
  std::unique_ptr<Staging> staging;
  if (best < free_staging_.size()) {
    staging = std::move(free_staging_[best]);
    free_staging_.erase(free_staging_.begin() + static_cast<std::ptrdiff_t>(best));
  } else {
    staging = std::make_unique<Staging>();
  }
  if (!staging->Reserve(bytes)) {
    ExitWithReport(Prefix() + Name(job) + ": cannot allocate " + std::to_string(bytes) +
                       " bytes of staging memory",
                   kCommFatalExitCode);
  }
  return staging;
}

void MpiCommunicator::Begin(Job& job) {
  job.started = Clock::now();
  line_dirty_ = true;
  job.signature = SignatureOf(job);
  SendArrival(job.signature);
  begun_seq_ = job.seq;
  if (job.kind == JobKind::kAllreduce) Pack(job);  // while the peers' signatures come in
  if (job.kind == JobKind::kSparse) {
    uint64_t pairs = 0;
    for (uint32_t count : job.counts) pairs += count;
    job.staging = AcquireStaging(std::max<uint64_t>(pairs, 1) * 8, job);
    comm::PackSparse(job.tensors, job.counts,
                     static_cast<uint32_t*>(static_cast<void*>(job.staging->data())));
  }
  if (size_ == 1) Issue(job);
  for (int r = 0; r < size_; ++r) {
    if (!arrival_held_[r]) continue;
    arrival_held_[r] = 0;
    // Held when it was for the collective after the last one begun: this one.
    if (arrival_values_[r].seq != job.seq) {
      ExitWithReport(Prefix() + Name(job) + ": rank " + std::to_string(r) + " sent collective #" +
                         std::to_string(arrival_values_[r].seq) + " out of order",
                     kCommFatalExitCode);
    }
    Match(job, r);
    PostArrivalReceive(r);
  }
}

void MpiCommunicator::Issue(Job& job) {
  job.issued = true;
  // Called as add(MPI_Ixxx(..., &request), "MPI_Ixxx"): the request is read
  // after the call has filled it in.
  MPI_Request request = MPI_REQUEST_NULL;
  auto add = [&](int code, const char* call) {
    Check(code, call, &job);
    job.requests.push_back(request);
  };
  switch (job.kind) {
    case JobKind::kAllreduce:
      for (const Group& group : job.groups) {
        MPI_Datatype type = MPI_FLOAT;
        MPI_Op op = MPI_SUM;
        switch (group.wire) {
          case fb::DType::F32: type = MPI_FLOAT; break;
          case fb::DType::F16: type = MPI_UINT16_T; op = sum_halves_; break;
          case fb::DType::BF16: type = MPI_UINT16_T; op = sum_bf16s_; break;
          case fb::DType::I32: type = MPI_INT32_T; break;
          case fb::DType::I64: type = MPI_INT64_T; break;
          case fb::DType::I1: type = MPI_UNSIGNED_CHAR; op = MPI_LOR; break;
          // The plan verifier allows float collectives only.
          case fb::DType::U8: type = MPI_UNSIGNED_CHAR; break;
        }
        const uint64_t element_bytes = CommDTypeBytes(group.wire);
        for (uint64_t first = 0; first < group.elements; first += kMaxCount) {
          const uint64_t count = std::min(kMaxCount, group.elements - first);
          add(MPI_Iallreduce(MPI_IN_PLACE, group.base + first * element_bytes,
                             static_cast<int>(count), type, op, comm_, &request),
              "MPI_Iallreduce");
        }
      }
      break;
    case JobKind::kDoubles: {
      MPI_Op op = job.scalar == ScalarReduction::kMax   ? MPI_MAX
                  : job.scalar == ScalarReduction::kMin ? MPI_MIN
                                                        : MPI_SUM;
      add(MPI_Iallreduce(MPI_IN_PLACE, job.doubles, static_cast<int>(job.count), MPI_DOUBLE, op,
                         comm_, &request),
          "MPI_Iallreduce");
      break;
    }
    case JobKind::kAllgather:
      add(MPI_Iallgather(job.doubles, static_cast<int>(job.count), MPI_DOUBLE, job.gathered,
                         static_cast<int>(job.count), MPI_DOUBLE, comm_, &request),
          "MPI_Iallgather");
      break;
    case JobKind::kBroadcast:
      for (uint64_t first = 0; first < job.byte_count; first += kMaxCount) {
        const uint64_t count = std::min(kMaxCount, job.byte_count - first);
        add(MPI_Ibcast(job.bytes + first, static_cast<int>(count), MPI_BYTE, 0, comm_, &request),
            "MPI_Ibcast");
      }
      break;
    case JobKind::kBarrier:
    case JobKind::kFinalize:
      add(MPI_Ibarrier(comm_, &request), "MPI_Ibarrier");
      break;
    case JobKind::kArrival:
      break;  // every peer's matching signature is the whole collective
    case JobKind::kSparse:
      // First the counts; GatherPairs then gathers the pairs themselves.
      job.all_counts.assign(job.counts.size() * static_cast<size_t>(size_), 0);
      add(MPI_Iallgather(job.counts.data(), static_cast<int>(job.counts.size()), MPI_UINT32_T,
                         job.all_counts.data(), static_cast<int>(job.counts.size()),
                         MPI_UINT32_T, comm_, &request),
          "MPI_Iallgather");
      break;
  }
}

// A sparse allreduce's second phase: every rank's counts are in; each count
// is checked against its set's capacity before any pair is received.
void MpiCommunicator::GatherPairs(Job& job) {
  job.phase = 1;
  job.requests.clear();
  const size_t sets = job.counts.size();
  std::vector<int> words(static_cast<size_t>(size_)), displacements(static_cast<size_t>(size_));
  uint64_t total = 0;
  for (int r = 0; r < size_; ++r) {
    uint64_t pairs = 0;
    for (size_t s = 0; s < sets; ++s) {
      const uint32_t count = job.all_counts[static_cast<size_t>(r) * sets + s];
      if (count > job.tensors[3 * s].elements) {
        ExitWithReport(Prefix() + Name(job) + ": rank " + std::to_string(r) + " sends " +
                           std::to_string(count) + " entries for set " + std::to_string(s) +
                           ", which holds " + std::to_string(job.tensors[3 * s].elements),
                       kCommFatalExitCode);
      }
      pairs += count;
    }
    displacements[static_cast<size_t>(r)] = static_cast<int>(total * 2);
    words[static_cast<size_t>(r)] = static_cast<int>(pairs * 2);
    total += pairs;  // at most the capacity StartSparseAllreduce bounded
  }
  job.received = AcquireStaging(std::max<uint64_t>(total, 1) * 8, job);
  MPI_Request request = MPI_REQUEST_NULL;
  Check(MPI_Iallgatherv(job.staging->data(), words[static_cast<size_t>(rank_)], MPI_UINT32_T,
                        job.received->data(), words.data(), displacements.data(), MPI_UINT32_T,
                        sparse_comm_, &request),
        "MPI_Iallgatherv", &job);
  job.requests.push_back(request);
}

// Every rank's sets into the dense tensors, rank by rank in order (the same
// sums on every rank), then the mean.
void MpiCommunicator::AddPairs(Job& job) {
  const size_t sets = job.counts.size();
  for (size_t s = 0; s < sets; ++s) {
    const CommTensor& dense = job.tensors[3 * s + 2];
    std::fill_n(static_cast<float*>(dense.data), dense.elements, 0.0f);
  }
  // A mean scales each value as it is added: a pass over the pairs, not
  // over the dense tensors.
  const float scale =
      job.reduction == Reduction::kMean && size_ > 1 ? 1.0f / static_cast<float>(size_) : 1.0f;
  const uint32_t* pairs = static_cast<const uint32_t*>(static_cast<void*>(job.received->data()));
  for (int r = 0; r < size_; ++r) {
    for (size_t s = 0; s < sets; ++s) {
      const uint32_t count = job.all_counts[static_cast<size_t>(r) * sets + s];
      const CommTensor& dense = job.tensors[3 * s + 2];
      const int64_t bad =
          comm::AddSparse(pairs, count, static_cast<float*>(dense.data), dense.elements, scale);
      if (bad >= 0) {
        ExitWithReport(Prefix() + Name(job) + ": rank " + std::to_string(r) + " sent index " +
                           std::to_string(bad) + " for set " + std::to_string(s) + " of " +
                           std::to_string(dense.elements) + " elements",
                       kCommFatalExitCode);
      }
      pairs += 2 * uint64_t{count};
    }
  }
}

void MpiCommunicator::Pack(Job& job) {
  // Groups in dtype order, the same on every rank since the tensors are.
  const bool mean = job.reduction == Reduction::kMean;
  const float inverse = 1.0f / static_cast<float>(size_);
  const bool scale = mean && size_ > 1;
  // A large tensor that travels in its own dtype is reduced where it lies:
  // copying it in and out would cost more than the MPI call it saves.
  for (fb::DType wire : {fb::DType::F32, fb::DType::F16, fb::DType::BF16, fb::DType::I32,
                         fb::DType::I64, fb::DType::I1}) {
    Group packed;
    packed.wire = wire;
    for (size_t i = 0; i < job.tensors.size(); ++i) {
      const CommTensor& t = job.tensors[i];
      if (t.elements == 0 || WireDType(t.dtype, job.wire) != wire) continue;
      if (t.dtype == wire && t.elements * CommDTypeBytes(wire) >= kInPlaceBytes) {
        Group direct;
        direct.wire = wire;
        direct.tensors.push_back(i);
        direct.elements = t.elements;
        direct.direct = true;
        direct.base = static_cast<char*>(t.data);
        job.groups.push_back(std::move(direct));
        continue;
      }
      packed.tensors.push_back(i);
      packed.elements += t.elements;
    }
    if (packed.tensors.empty()) continue;
    const CommTensor& first = job.tensors[packed.tensors.front()];
    packed.direct = packed.tensors.size() == 1 && first.dtype == wire;  // nothing to pack
    if (packed.direct) packed.base = static_cast<char*>(first.data);
    job.groups.push_back(std::move(packed));
  }
  uint64_t bytes = 0;
  for (Group& group : job.groups) {
    if (group.direct) continue;
    group.offset = (bytes + 63) / 64 * 64;
    bytes = group.offset + group.elements * CommDTypeBytes(group.wire);
  }
  if (bytes > 0) job.staging = AcquireStaging(bytes, job);
  for (Group& group : job.groups) {
    const bool half = group.wire == fb::DType::F16 || group.wire == fb::DType::BF16;
    if (group.direct) {
      // Halves are scaled before the sum (communicator.h says why).
      if (half && scale) {
        uint16_t* x = static_cast<uint16_t*>(static_cast<void*>(group.base));
        if (group.wire == fb::DType::F16) ScaleHalves(x, group.elements, inverse);
        else ScaleBf16s(x, group.elements, inverse);
      }
      continue;
    }
    group.base = job.staging->data() + group.offset;
    char* cursor = group.base;
    const uint64_t element_bytes = CommDTypeBytes(group.wire);
    for (size_t i : group.tensors) {
      const CommTensor& t = job.tensors[i];
      uint16_t* halves = static_cast<uint16_t*>(static_cast<void*>(cursor));
      if (t.dtype == fb::DType::F32 && group.wire == fb::DType::F16) {
        FloatsToHalves(static_cast<const float*>(t.data), halves, t.elements,
                       scale ? inverse : 1.0f);
      } else if (t.dtype == fb::DType::F32 && group.wire == fb::DType::BF16) {
        FloatsToBf16s(static_cast<const float*>(t.data), halves, t.elements,
                      scale ? inverse : 1.0f);
      } else {
        std::memcpy(cursor, t.data, t.elements * element_bytes);
        if (half && scale) {
          if (group.wire == fb::DType::F16) ScaleHalves(halves, t.elements, inverse);
          else ScaleBf16s(halves, t.elements, inverse);
        }
      }
      cursor += t.elements * element_bytes;
    }
  }
}

bool MpiCommunicator::Progress(Job& job) {
  if (!job.issued) return false;  // waiting for the peers' signatures
  int done = 0;
  Check(MPI_Testall(static_cast<int>(job.requests.size()), job.requests.data(), &done,
                    MPI_STATUSES_IGNORE),
        "MPI_Testall", &job);
  // Finalizing waits for every earlier collective too. Its issue means that
  // every peer's last arrival message has come in: none is left in flight to
  // a process that is shutting MPI down.
  if (done && job.kind == JobKind::kFinalize) return active_.size() == 1;
  if (done && job.kind == JobKind::kSparse && job.phase == 0) {
    // The pairs' gathers are posted in the sparse jobs' order (active_ is
    // in start order, and an earlier one still gathering counts waits).
    for (const std::shared_ptr<Job>& other : active_) {
      if (other.get() == &job) break;
      if (other->kind == JobKind::kSparse && other->phase == 0) return false;
    }
    GatherPairs(job);
    return false;
  }
  return done != 0;
}

void MpiCommunicator::Unpack(Job& job) {
  const bool scale = job.reduction == Reduction::kMean && size_ > 1;
  const float inverse = 1.0f / static_cast<float>(size_);
  for (const Group& group : job.groups) {
    if (group.direct) {
      if (group.wire == fb::DType::F32 && scale) {
        float* x = static_cast<float*>(static_cast<void*>(group.base));
        for (uint64_t k = 0; k < group.elements; ++k) x[k] *= inverse;
      }
      continue;
    }
    const char* cursor = group.base;
    const uint64_t element_bytes = CommDTypeBytes(group.wire);
    for (size_t i : group.tensors) {
      const CommTensor& t = job.tensors[i];
      const uint16_t* halves = static_cast<const uint16_t*>(static_cast<const void*>(cursor));
      if (t.dtype == fb::DType::F32 && group.wire == fb::DType::F16) {
        HalvesToFloats(halves, static_cast<float*>(t.data), t.elements, 1.0f);
      } else if (t.dtype == fb::DType::F32 && group.wire == fb::DType::BF16) {
        Bf16sToFloats(halves, static_cast<float*>(t.data), t.elements, 1.0f);
      } else if (t.dtype == fb::DType::F32 && scale) {
        const float* src = static_cast<const float*>(static_cast<const void*>(cursor));
        float* dst = static_cast<float*>(t.data);
        for (uint64_t k = 0; k < t.elements; ++k) dst[k] = src[k] * inverse;
      } else {
        std::memcpy(t.data, cursor, t.elements * element_bytes);
      }
      cursor += t.elements * element_bytes;
    }
  }
}

void MpiCommunicator::Finish(Job& job) {
  switch (job.kind) {
    case JobKind::kAllreduce:
      Unpack(job);
      if (job.staging) free_staging_.push_back(std::move(job.staging));
      break;
    case JobKind::kSparse:
      AddPairs(job);
      free_staging_.push_back(std::move(job.staging));
      free_staging_.push_back(std::move(job.received));
      break;
    case JobKind::kDoubles:
      if (job.scalar == ScalarReduction::kMean) {
        for (uint64_t k = 0; k < job.count; ++k) job.doubles[k] /= size_;
      }
      break;
    default:
      break;
  }
  completed_seq_ = std::max(completed_seq_, job.seq);
  line_dirty_ = true;
  std::lock_guard<std::mutex> lock(mutex_);
  job.done = true;
  done_cv_.notify_all();
}

void MpiCommunicator::CheckTimeouts() {
  if (active_.empty()) return;
  const auto timeout = std::chrono::duration<double>(options_.timeout_seconds);
  const Clock::time_point now = Clock::now();
  for (const std::shared_ptr<Job>& job : active_) {
    if (now - job->started > timeout) {
      PollArrivals();  // the latest word on who has arrived
      TimedOut(*job);
    }
  }
}

void MpiCommunicator::UpdateTerminationLine() {
  if (!line_dirty_) return;
  line_dirty_ = false;
  std::string line;
  // The oldest collective some rank has not reached, else the oldest running.
  const Job* waiting = nullptr;
  std::vector<int> missing;
  for (const std::shared_ptr<Job>& job : active_) {
    missing = Missing(job->seq);
    if (!missing.empty()) {
      waiting = job.get();
      break;
    }
  }
  if (waiting == nullptr && !active_.empty()) waiting = active_.front().get();
  if (waiting != nullptr) {
    line = Prefix() + "terminated while waiting in " + Name(*waiting) + ": " +
           (missing.empty() ? std::string("every rank had arrived")
                            : "rank(s) " + RankList(missing) + " did not arrive");
  } else {
    line = Prefix() + "terminated by SIGTERM (another rank failed?) " +
           (completed_seq_ == 0 ? std::string("before the first collective")
                                : "after collective #" + std::to_string(completed_seq_));
  }
  if (line != line_) {
    line_ = std::move(line);
    PublishTerminationLine(line_);
  }
}

Status MpiCommunicator::Teardown(const Job& finalize) {
  // Every peer sent its last arrival message (the finalize barrier's) and it
  // came in: the receives posted now can never match; cancel them. Our own
  // sends were matched by the peers' receives, which stay posted until ours
  // came in; wait for them to complete.
  for (int r = 0; r < size_; ++r) {
    if (arrival_receives_[r] == MPI_REQUEST_NULL) continue;
    MPI_Cancel(&arrival_receives_[r]);
    MPI_Wait(&arrival_receives_[r], MPI_STATUS_IGNORE);
  }
  const auto timeout = std::chrono::duration<double>(options_.timeout_seconds);
  while (!arrival_sends_.empty()) {
    PollSends();
    if (Clock::now() - finalize.started > timeout) TimedOut(finalize);
    if (!arrival_sends_.empty()) std::this_thread::sleep_for(kPollInterval);
  }
  active_.clear();
  free_staging_.clear();
  completed_seq_ = finalize.seq;
  line_dirty_ = true;
  UpdateTerminationLine();
  MPI_Op_free(&sum_halves_);
  MPI_Op_free(&sum_bf16s_);
  MPI_Comm_free(&arrivals_comm_);
  MPI_Comm_free(&sparse_comm_);
  MPI_Comm_free(&comm_);
  const int code = MPI_Finalize();
  // SIGTERM is no longer about a collective.
  WithdrawTerminationLine();
  if (code != MPI_SUCCESS) {
    return Status(ErrorCode::kBackend, "MPI_Finalize failed: " + MpiErrorString(code));
  }
  return Status::Ok();
}

}  // namespace

StatusOr<std::unique_ptr<Communicator>> CreateMpiCommunicator(const CommOptions& options) {
  static std::atomic<bool> created{false};
  if (created.exchange(true)) {
    return Status(ErrorCode::kUnavailable,
                  "an MPI communicator was already created in this process (MPI can be "
                  "initialized once)");
  }
  auto communicator = std::make_unique<MpiCommunicator>(options);
  if (Status s = communicator->Start(); !s.ok()) return s;
  return std::unique_ptr<Communicator>(std::move(communicator));
}

}  // namespace graphc::runtime::comm
