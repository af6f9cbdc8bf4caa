// The data-parallel communicator: what the executor calls to average gradients
// across the ranks of a training job, and what the trainer calls to agree on
// figures (losses, step times), to broadcast the initial state and to wait for
// the other ranks. Inside an MPI job (started by mpirun or srun) it is backed by
// MPI, driven by one communication thread so that an allreduce overlaps the
// compute that the caller goes on with; in a plain process it is a single-rank
// communicator whose collectives are no-ops and which never touches MPI.
//
// A collective that does not finish is fatal, never a hang or a crash: after
// CommOptions.timeout_seconds the process prints one line naming the collective
// and the ranks that never reached it, and exits (MPI's state is unusable
// then). When another rank dies, mpirun sends SIGTERM to the survivors; with
// InstallTerminationHandler() they print which collective they were waiting in
// and for whom before exiting.

#ifndef GRAPHC_RUNTIME_COMM_COMMUNICATOR_H_
#define GRAPHC_RUNTIME_COMM_COMMUNICATOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "contract/status.h"
#include "contract/schema/plan_generated.h"

namespace graphc::runtime {

// How an allreduce combines the ranks' tensors.
enum class Reduction {
  kSum,
  // The sum divided by size(). F32 tensors are summed, then multiplied by
  // 1/size(); F16 and BF16 values (tensors in those dtypes, and F32 tensors
  // sent as F16 or BF16) are multiplied by 1/size() before they are rounded to
  // the half type and summed, as PyTorch DDP does, so that the sum of scaled
  // gradients cannot overflow where the mean would not. Integer tensors have
  // no mean (kInvalidArgument).
  kMean,
};

// How AllreduceDoubles combines the ranks' values.
enum class ScalarReduction { kSum, kMean, kMax, kMin };

// One tensor in host memory (the caller stages device memory). `data` may be
// null when `elements` is 0. I1 tensors are one byte per element; their "sum"
// is the logical or (non-zero where any rank holds a non-zero byte: 1 here,
// the largest byte on NCCL, the same for the plans' 0/1 bytes).
struct CommTensor {
  void* data = nullptr;
  fb::DType dtype = fb::DType::F32;
  uint64_t elements = 0;
};

struct CommOptions {
  // How long one collective may take, measured on the communication thread
  // from when it starts the collective, and, as a backstop should that thread
  // itself be stuck, from when the caller starts waiting (plus one second, so
  // that the communication thread's report, which knows more, comes first).
  double timeout_seconds = 300;
  // The first word of the fatal lines ("graphrun: rank 1: ...").
  std::string program = "graphrun";
};

// The exit status of a process that ended because a collective timed out or
// MPI failed; a process ended by SIGTERM with the handler installed exits 143.
inline constexpr int kCommFatalExitCode = 1;
inline constexpr int kCommTerminatedExitCode = 143;

class Communicator {
 public:
  // An MPI communicator when this process runs inside an MPI job
  // (InsideMpiJob()), else NewSingleRankCommunicator(). MPI can be initialized
  // once per process: a second MPI communicator is kUnavailable.
  static StatusOr<std::unique_ptr<Communicator>> Create(const CommOptions& options = {});

  // Without Finalize() first, an MPI communicator stops its thread and leaves
  // MPI unfinalized: the error path, where the process exits non-zero and
  // mpirun ends the other ranks (a finalize would wait for them forever).
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // This rank's index among the ranks on its node, and their number (from
  // MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)): for picking a local device.
  virtual int local_rank() const = 0;
  virtual int local_size() const = 0;
  // "mpi: 2 ranks on 1 node (Open MPI v4.1.4)" or "single process (no MPI)".
  virtual std::string Describe() const = 0;

  // Starts an allreduce of `tensors` in place and returns at once; the
  // communication thread packs them, reduces and unpacks while the caller
  // computes. The tensors must not be touched, and must stay alive, until
  // Wait(handle) returns. `wire` is F16 or BF16 to send F32 tensors in that
  // type (halving the bytes; each F32 tensor comes back rounded through it),
  // or F32 to send every tensor in its own dtype; other tensors of the bucket
  // always travel in their own dtype. F16 and BF16 values are added in float
  // and rounded to nearest even after each addition. `what` names the bucket
  // in error lines, e.g. "allreduce of bucket 2 (train_step command 311)".
  // Every rank must start the same collectives, with the same tensor dtypes
  // and sizes, in the same order; the ranks compare each collective's
  // signature before any data moves, and a mismatch ends the process with a
  // line saying how they differ. Fails (kInvalidArgument) only for bad
  // arguments; a collective that fails later ends the process (see above).
  virtual StatusOr<int64_t> StartAllreduce(std::string what, std::vector<CommTensor> tensors,
                                           Reduction reduction, fb::DType wire) = 0;
  // Starts the host half of an allreduce that another transport moves (NCCL,
  // on the device): a collective that moves no data, in which every rank says
  // it has reached the bucket `tensors` describes (their data pointers are
  // never read; the arguments are checked as StartAllreduce checks them). It
  // takes its place in the order of collectives and has their signature
  // check, timeout and termination line, so that ranks that disagree on the
  // bucket, or never reach it, are named where the device transport would
  // only hang. Wait(handle) returns once every rank has arrived.
  virtual StatusOr<int64_t> StartArrival(std::string what, const std::vector<CommTensor>& tensors,
                                         Reduction reduction, fb::DType wire) = 0;
  // Starts a sparse allreduce (deep gradient compression's "sum of sparse
  // sets") and returns at once. `tensors` come in threes: values (F32, k),
  // indices (I32, k) and a dense F32 tensor of n elements. A set's entries
  // are the leading ones up to the first negative index (all k if none), each
  // index in [0, n) (one named twice adds twice). Every rank's sets are
  // gathered (at most k pairs of 8 bytes per set travel from each rank), and
  // each dense tensor is overwritten with the sum over ranks of its sparse
  // set (kMean: each value divided by size() as it is added, in rank order).
  // Values and indices are left as they are. Ranks may
  // send different counts; a peer's index outside [0, n) ends the process
  // with a line naming it. Fails (kInvalidArgument) for bad arguments,
  // including this rank's own bad indices.
  virtual StatusOr<int64_t> StartSparseAllreduce(std::string what,
                                                 std::vector<CommTensor> tensors,
                                                 Reduction reduction) = 0;
  // Blocks until the allreduce (or arrival) is done. Each handle is waited
  // for once; an unknown or already-waited handle is kInvalidArgument.
  virtual Status Wait(int64_t handle) = 0;

  // Blocking collectives for the trainer; they queue behind the allreduces
  // already started (one order of collectives on every rank) and have the
  // same timeout.
  // Combines `values` (the same count on every rank) element-wise, in place.
  virtual Status AllreduceDoubles(std::string what, std::vector<double>& values,
                                  ScalarReduction reduction) = 0;
  // Every rank's `values` (the same count on every rank), rank 0's first:
  // size() * values.size() numbers.
  virtual StatusOr<std::vector<double>> AllgatherDoubles(std::string what,
                                                         std::vector<double> values) = 0;
  // Overwrites `data` on every rank with rank 0's `bytes` bytes.
  virtual Status Broadcast(std::string what, void* data, uint64_t bytes) = 0;
  virtual Status Barrier(std::string what) = 0;

  // Total seconds the caller spent blocked in Wait and the blocking
  // collectives: the communication that compute did not hide.
  virtual double seconds_waiting() const = 0;

  // Waits for every collective started, then for every rank to finalize too,
  // and shuts MPI down. Call it once training ends; nothing may follow it.
  virtual Status Finalize() = 0;
};

// True when the environment says an MPI launcher started this process
// (OMPI_COMM_WORLD_SIZE, set by Open MPI's mpirun; PMIX_RANK, set by PMIx
// launchers such as srun --mpi=pmix; PMI_RANK, set by MPICH-style launchers,
// under which this Open MPI build then fails to join, loudly, rather than
// every process training alone).
bool InsideMpiJob();

// The communicator of a job of one: rank 0 of 1, collectives that leave the
// data as it is (the sum and the mean of one rank are its values), no thread
// and no MPI. Arguments are checked as an MPI communicator checks them.
std::unique_ptr<Communicator> NewSingleRankCommunicator();

// Installs a SIGTERM handler that, while an MPI communicator exists, prints
//   PROGRAM: rank R: terminated while waiting in collective #S (WHAT): rank(s) X did not arrive
// when a collective is in flight, or
//   PROGRAM: rank R: terminated by SIGTERM (another rank failed?) after collective #S
// otherwise, and exits with kCommTerminatedExitCode: mpirun sends SIGTERM to
// every surviving rank when one dies, and this line says where each one
// stood. Without an MPI communicator (or after Finalize) SIGTERM keeps its
// default action. The handler is async-signal-safe: it writes a line that the
// communication thread keeps formatted.
void InstallTerminationHandler();

}  // namespace graphc::runtime

#endif  // GRAPHC_RUNTIME_COMM_COMMUNICATOR_H_
