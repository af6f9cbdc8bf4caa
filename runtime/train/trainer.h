// The training loop behind `graphrun PLAN`: state initialized or resumed,
// train_step run on batches from a data source, progress and throughput
// printed the way tf_cnn_benchmarks prints them, checkpoints, evaluation and
// the --report JSON. It runs on any Backend and keeps an asynchronous device
// busy: the next batch's copy overlaps the current step, step times come
// from device events, and the host waits only at display, save and report
// points (every kClockWindow steps at the longest).

#ifndef GRAPHC_RUNTIME_TRAIN_TRAINER_H_
#define GRAPHC_RUNTIME_TRAIN_TRAINER_H_

#include <cstdint>
#include <ostream>
#include <string>

#include "nlohmann/json.hpp"
#include "runtime/train/scaling_model.h"
#include "runtime/core/backend.h"
#include "runtime/core/plan_loader.h"
#include "contract/status.h"

namespace graphc::runtime {

// Bounds of the counts a run accepts: far beyond any real run, small enough
// that no step, sample or checkpoint arithmetic can overflow.
inline constexpr int64_t kMaxSteps = int64_t{1} << 40;

// The host waits for the device at least every this many steps, to collect
// their times.
inline constexpr int kClockWindow = 64;

// The steps --trace records: the first this many after the warmup.
inline constexpr int64_t kTraceSteps = 10;

// Where rank `rank` of `ranks` writes the trace the user named `path`.
std::string TracePathOf(const std::string& path, int rank, int ranks);

struct TrainOptions {
  std::string plan_path;  // for refusing to overwrite the plan
  int64_t steps = -1;     // -1: 100, or what --epochs says
  int64_t warmup = 10, epochs = 0, display_every = 10;
  std::string data = "synthetic";
  std::string eval_data;  // the test split's own spec (imagefolder: or shards:), if set
  int data_threads = 1;  // decoding an image folder's batch (graphrun: 0 = its default)
  int prefetch = 2;      // batches made ahead of the step
  // An image folder's crops: "imagenet" (random resized crops and flips;
  // resize and center crop for evaluation) or "none" (whole images resized,
  // flipped with `flip`).
  std::string augment = "imagenet";
  bool strict_data = false;  // an undecodable image stops the run (else skipped)
  bool eval = false, profile = false, flip = false, sync_debug = false;
  bool graphs = true;  // replay train_step as a CUDA Graph where the device has them
  uint64_t seed = 42;
  std::string report, save, resume;
  // Initial weights (safetensors: the model's parameters and statistics by
  // name), instead of the plan's initializers; excludes `resume`.
  std::string init;
  // A Chrome trace (chrome://tracing, Perfetto) of kTraceSteps timed steps:
  // per rank, FILE itself on one rank, FILE with ".rankR" before its
  // extension on several.
  std::string trace;
  int64_t save_every = 0;
  std::string trusted_keys;  // comma-separated files the run reads
  // How a job of several ranks reduces gradient buckets: "auto" (on a GPU,
  // NCCL on the device buffers where every rank can, else host-staged MPI;
  // the CPU's buffers go to MPI as they are), "nccl" (fail where it cannot)
  // or "mpi".
  std::string collectives = "auto";
  double collective_timeout = 300;  // seconds, for the device collectives too
  // With ranks: after the timed (profiled) steps, predict the step on that
  // many ranks (graphrun --predict; scaling_model.h).
  PredictOptions predict;
  // Added to the --report JSON as they are (e.g. how the device was chosen).
  nlohmann::json report_extra = nlohmann::json::object();
};

// Checks what rank `rank` of a job of `ranks` would write before anything
// runs: rank 0 writes --save and --report, every rank its own --trace file
// (TracePathOf). Only a regular file may be replaced, never one the run reads
// (the plan, data, keys, --resume, which only --save may name), and no two of
// the job's outputs may be one file.
Status CheckOutputs(const TrainOptions& options, int rank, int ranks);

class Communicator;

// Trains `plan` on `backend` as `options` say, printing to `out`. With `comm`
// of more than one rank this process is one rank of a data-parallel job: it
// reads its shard of every global batch (the plan's batch per rank), the
// plan's allreduces average the gradients, only rank 0 prints and writes
// files, and the summary and report give per-rank and total figures.
Status Train(const Plan& plan, Backend& backend, const TrainOptions& options, std::ostream& out,
             Communicator* comm = nullptr);

}  // namespace graphc::runtime

#endif  // GRAPHC_RUNTIME_TRAIN_TRAINER_H_
