// Communicator::Create picks the implementation from the environment, and the
// single-rank communicator lives here: a job of one, where every collective
// already holds its result, so a plain `graphrun train` neither starts a
// thread nor loads MPI's state.

#include "runtime/comm/communicator.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <utility>
#include <unordered_set>

#include "runtime/comm/mpi_communicator.h"
#include "runtime/comm/wire_format.h"

namespace graphc::runtime {
namespace {

class SingleRankCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_rank() const override { return 0; }
  int local_size() const override { return 1; }
  std::string Describe() const override { return "single process (no MPI)"; }

  StatusOr<int64_t> StartAllreduce(std::string what, std::vector<CommTensor> tensors,
                                   Reduction reduction, fb::DType wire) override {
    if (Status s = Usable(what); !s.ok()) return s;
    if (Status s = comm::CheckAllreduce(what, tensors, reduction, wire); !s.ok()) return s;
    // The sum and the mean of one rank are its values. With a half wire type
    // they are left unrounded: there is no wire.
    std::lock_guard<std::mutex> lock(mutex_);
    const int64_t handle = ++collectives_;
    outstanding_.insert(handle);
    return handle;
  }

  StatusOr<int64_t> StartArrival(std::string what, const std::vector<CommTensor>& tensors,
                                 Reduction reduction, fb::DType wire) override {
    return StartAllreduce(std::move(what), tensors, reduction, wire);  // one rank: arrived
  }

  StatusOr<int64_t> StartSparseAllreduce(std::string what, std::vector<CommTensor> tensors,
                                         Reduction) override {
    if (Status s = Usable(what); !s.ok()) return s;
    std::vector<uint32_t> counts;
    if (Status s = comm::CheckSparse(what, tensors, counts); !s.ok()) return s;
    // One rank's sum (and mean) is its own set, scattered into zeros.
    for (size_t s = 0; s < counts.size(); ++s) {
      const CommTensor& dense = tensors[3 * s + 2];
      float* out = static_cast<float*>(dense.data);
      std::fill(out, out + dense.elements, 0.0f);
      const float* values = static_cast<const float*>(tensors[3 * s].data);
      const int32_t* indices = static_cast<const int32_t*>(tensors[3 * s + 1].data);
      for (uint32_t k = 0; k < counts[s]; ++k) out[indices[k]] += values[k];
    }
    std::lock_guard<std::mutex> lock(mutex_);
    const int64_t handle = ++collectives_;
    outstanding_.insert(handle);
    return handle;
  }

  Status Wait(int64_t handle) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (outstanding_.erase(handle) == 0) {
      return Status(ErrorCode::kInvalidArgument,
                    "Wait: handle " + std::to_string(handle) + " is unknown or already waited for");
    }
    return Status::Ok();
  }

  Status AllreduceDoubles(std::string what, std::vector<double>&, ScalarReduction) override {
    return Usable(what);
  }
  StatusOr<std::vector<double>> AllgatherDoubles(std::string what,
                                                 std::vector<double> values) override {
    if (Status s = Usable(what); !s.ok()) return s;
    return values;
  }
  Status Broadcast(std::string what, void* data, uint64_t bytes) override {
    if (bytes > 0 && data == nullptr) {
      return Status(ErrorCode::kInvalidArgument, what + ": no data to broadcast");
    }
    return Usable(what);
  }
  Status Barrier(std::string what) override { return Usable(what); }
  double seconds_waiting() const override { return 0; }
  Status Finalize() override {
    std::lock_guard<std::mutex> lock(mutex_);
    finalized_ = true;
    return Status::Ok();
  }

 private:
  Status Usable(const std::string& what) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (finalized_) {
      return Status(ErrorCode::kInvalidArgument, what + ": the communicator is finalized");
    }
    return Status::Ok();
  }

  std::mutex mutex_;
  int64_t collectives_ = 0;
  std::unordered_set<int64_t> outstanding_;
  bool finalized_ = false;
};

}  // namespace

bool InsideMpiJob() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr ||
         std::getenv("PMI_RANK") != nullptr;
}

std::unique_ptr<Communicator> NewSingleRankCommunicator() {
  return std::make_unique<SingleRankCommunicator>();
}

StatusOr<std::unique_ptr<Communicator>> Communicator::Create(const CommOptions& options) {
  if (!(options.timeout_seconds > 0)) {
    return Status(ErrorCode::kInvalidArgument, "the collective timeout must be positive, not " +
                                                   std::to_string(options.timeout_seconds));
  }
  if (!InsideMpiJob()) return NewSingleRankCommunicator();
  return comm::CreateMpiCommunicator(options);
}

}  // namespace graphc::runtime
