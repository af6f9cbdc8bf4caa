// A small MPI program for what a unit test cannot do from inside one
// process: the failure modes, where a rank stops (SIGSTOP) or dies (SIGKILL)
// in the middle of a job and the others must end with a line that names it
// (run_mpi_tests.sh asserts the lines), and the timing of a 25 MiB allreduce
// through the communicator against a plain blocking MPI_Allreduce.
//
//   mpirun -np 2 graphc-comm-probe stop TIMEOUT   rank 1 stops before collective #2
//   mpirun -np 2 graphc-comm-probe kill           rank 1 dies before collective #2
//   mpirun -np 2 graphc-comm-probe mismatch       the ranks' buckets differ in size
//   mpirun -np 2 graphc-comm-probe device-mismatch rank 1 announces the bucket for a
//                                                  device transport (StartArrival)
//                                                  where rank 0 allreduces it
//   mpirun -np 2 graphc-comm-probe bench          25 MiB (and 1 MiB) through the communicator
//   mpirun -np 2 graphc-comm-probe bench-mpi      25 MiB through MPI_Allreduce

#include <mpi.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "runtime/comm/communicator.h"

namespace {

using graphc::runtime::CommOptions;
using graphc::runtime::CommTensor;
using graphc::runtime::Communicator;
using graphc::runtime::Reduction;
using graphc::Status;
using graphc::StatusOr;
namespace fb = graphc::fb;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kBenchElements = 25ull * 1024 * 1024 / 4;  // 25 MiB of f32
constexpr int kBenchRuns = 15;

int Fail(const Status& status) {
  std::fprintf(stderr, "graphc-comm-probe: %s\n", status.message().c_str());
  return 1;
}

// Prints the median and the best of `seconds` on rank 0.
void Report(int rank, const char* what, std::vector<double> seconds) {
  if (rank != 0) return;
  std::sort(seconds.begin(), seconds.end());
  std::printf("%-44s median %7.2f ms  best %7.2f ms  (%zu runs)\n", what,
              seconds[seconds.size() / 2] * 1e3, seconds.front() * 1e3, seconds.size());
  std::fflush(stdout);
}

int BenchMpi() {
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::vector<float> data(kBenchElements, 1.0f), out(kBenchElements);
  std::vector<double> seconds;
  for (int run = 0; run < kBenchRuns + 2; ++run) {
    MPI_Barrier(MPI_COMM_WORLD);
    const Clock::time_point start = Clock::now();
    MPI_Allreduce(MPI_IN_PLACE, data.data(), static_cast<int>(data.size()), MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);
    if (run >= 2) seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  Report(rank, "MPI_Allreduce (blocking, f32)", seconds);
  MPI_Finalize();
  return 0;
}

int Bench(Communicator& comm) {
  if (comm.rank() == 0) std::printf("%s\n", comm.Describe().c_str());
  std::vector<float> data(kBenchElements, 1.0f);
  struct Case {
    const char* name;
    int tensors;
    fb::DType wire;
    Reduction reduction;
    uint64_t elements = kBenchElements;
  };
  for (const Case& c :
       {Case{"communicator, f32 sum, 1 tensor (in place)", 1, fb::DType::F32, Reduction::kSum},
        Case{"communicator, f32 mean, 1 tensor (in place)", 1, fb::DType::F32, Reduction::kMean},
        // Beside the 25 MiB case, a latency and a bandwidth fit one link.
        Case{"communicator, f32 mean, 1 MiB (in place)", 1, fb::DType::F32, Reduction::kMean,
             1024 * 1024 / 4},
        Case{"communicator, f32 mean, 2 tensors (in place)", 2, fb::DType::F32, Reduction::kMean},
        Case{"communicator, f32 mean, 1000 tensors (packed)", 1000, fb::DType::F32,
             Reduction::kMean},
        Case{"communicator, f32 mean over an f16 wire", 1, fb::DType::F16, Reduction::kMean},
        Case{"communicator, f32 mean over a bf16 wire", 1, fb::DType::BF16, Reduction::kMean}}) {
    std::vector<double> seconds;
    for (int run = 0; run < kBenchRuns + 2; ++run) {
      std::fill(data.begin(), data.begin() + c.elements, 1.0f);
      if (Status s = comm.Barrier("bench barrier"); !s.ok()) return Fail(s);
      const Clock::time_point start = Clock::now();
      std::vector<CommTensor> tensors;
      const uint64_t part = c.elements / c.tensors;
      for (int t = 0; t < c.tensors; ++t) {
        tensors.push_back({data.data() + t * part, fb::DType::F32,
                           t + 1 == c.tensors ? c.elements - t * part : part});
      }
      StatusOr<int64_t> handle =
          comm.StartAllreduce("bench bucket", std::move(tensors), c.reduction, c.wire);
      if (!handle.ok()) return Fail(handle.status());
      if (Status s = comm.Wait(*handle); !s.ok()) return Fail(s);
      if (run >= 2) seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
      const float expected = c.reduction == Reduction::kSum ? comm.size() : 1.0f;
      if (data[12345] != expected) {
        std::fprintf(stderr, "graphc-comm-probe: wrong result %g\n", data[12345]);
        return 1;
      }
    }
    Report(comm.rank(), c.name, seconds);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "bench-mpi") return BenchMpi();
  if (mode != "stop" && mode != "kill" && mode != "mismatch" && mode != "device-mismatch" &&
      mode != "bench") {
    std::fprintf(stderr,
                 "usage: graphc-comm-probe stop [TIMEOUT] | kill | mismatch | device-mismatch | "
                 "bench | bench-mpi\n");
    return 2;
  }
  CommOptions options;
  const bool timeout_given = (mode == "stop" || mode == "mismatch") && argc > 2;
  options.timeout_seconds = timeout_given ? std::atof(argv[2]) : 30;
  StatusOr<std::unique_ptr<Communicator>> created = Communicator::Create(options);
  if (!created.ok()) return Fail(created.status());
  Communicator& comm = **created;
  graphc::runtime::InstallTerminationHandler();
  if (mode == "bench") {
    const int result = Bench(comm);
    if (Status s = comm.Finalize(); !s.ok()) return Fail(s);
    return result;
  }

  if (Status s = comm.Barrier("warm-up"); !s.ok()) return Fail(s);  // collective #1
  const bool mismatch = mode == "mismatch" || mode == "device-mismatch";
  if (comm.rank() == 1 && !mismatch) {
    // Late enough that rank 0 is waiting in collective #2.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    raise(mode == "stop" ? SIGSTOP : SIGKILL);
  }
  // A bucket of another size on rank 1 breaks the contract (MPI reports a
  // truncated message, or the collective never completes).
  std::vector<float> bucket(mode == "mismatch" && comm.rank() == 1 ? 300000 : 1000, 1.0f);
  std::vector<CommTensor> tensors = {{bucket.data(), fb::DType::F32, bucket.size()}};
  StatusOr<int64_t> handle =
      mode == "device-mismatch" && comm.rank() == 1
          ? comm.StartArrival("allreduce of bucket 0 (probe)", tensors, Reduction::kMean,
                              fb::DType::F32)
          : comm.StartAllreduce("allreduce of bucket 0 (probe)", tensors, Reduction::kMean,
                                fb::DType::F32);
  if (!handle.ok()) return Fail(handle.status());
  if (Status s = comm.Wait(*handle); !s.ok()) return Fail(s);
  std::fprintf(stderr, "graphc-comm-probe: rank %d: collective #2 finished, unexpectedly\n",
               comm.rank());
  if (Status s = comm.Finalize(); !s.ok()) return Fail(s);
  return 0;
}
