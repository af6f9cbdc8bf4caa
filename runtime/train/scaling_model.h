// Data-parallel scaling on paper (graphrun PLAN --predict N1,N2,...): a
// training step on N ranks simulated from one rank's measured step.
//
// A data-parallel plan already says everything that decides scaling but the
// network: the order of its commands, the bytes of each gradient bucket, the
// point in backward where each bucket's allreduce starts and the point where
// the step first needs it reduced. A profile of one rank gives each command's
// time. The model replays the step: compute runs command after command as
// measured (each rank computes its own batch, as the one rank did); at a
// bucket's start its allreduce joins the network; at its wait the compute
// stalls until the allreduce is done. What a bucket's allreduce costs is the
// alpha-beta model of the algorithm the communicator uses (latency per step
// of the algorithm, bytes over bandwidth), and concurrent buckets either take
// the link in turn (NCCL: one stream) or share it (Open MPI: every bucket's
// nonblocking allreduce progresses at once).
//
// Three measured terms cover what the hosts do to it: the share of its speed
// communication keeps beside compute, the share compute keeps beside
// communication (on a CPU both use the same cores), and stragglers (every
// bucket waits for the slowest rank: the spread of one rank's step times
// times the expected largest of N normal draws). Not modelled: congestion
// beyond one link per node, and a framework's own overheads.

#ifndef GRAPHC_RUNTIME_TRAIN_SCALING_MODEL_H_
#define GRAPHC_RUNTIME_TRAIN_SCALING_MODEL_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "contract/status.h"
#include "nlohmann/json.hpp"
#include "runtime/core/plan_loader.h"

namespace graphc::runtime {

// A link: bandwidth in bytes per second (each direction) and the latency of
// one message.
struct Link {
  double bytes_per_second = 0;
  double latency_seconds = 0;
  bool in_bytes = false;  // written in bytes per second (shown so)
};

// "BANDWIDTH[,LATENCY]": bandwidth in bits (kbit, mbit, gbit, tbit, each with
// an optional "/s": 10gbit, 1Gbit/s, 100mbit) or bytes (KB/s, MB/s, GB/s,
// TB/s) per second, decimal units; latency in ns, us, ms or s (default 0).
// Anything else is kInvalidArgument naming `option` and the text.
StatusOr<Link> ParseLink(const std::string& text, const std::string& option);
// "1 Gbit/s, 50 us", or "12.5 GB/s, 2 us" for a link written in bytes.
std::string DescribeLink(const Link& link);

enum class Algorithm {
  kRing,          // NCCL: 2(p-1) steps of S/p bytes
  kRabenseifner,  // Open MPI's reduce-scatter by halving, allgather by doubling
};
enum class Sharing {
  kInTurn,  // one bucket on the link at a time, in start order (one stream)
  kShared,  // every bucket in flight progresses at once, sharing the bandwidth
};

struct Cluster {
  int64_t ranks = 1;
  int64_t ranks_per_node = 1;  // ranks sharing a node (and its link)
  Link inter, intra;           // between nodes (per node), within a node
  Algorithm algorithm = Algorithm::kRabenseifner;
  Sharing sharing = Sharing::kShared;
  // The share of its speed communication keeps while the ranks compute (1:
  // all of it). On a CPU whose cores all compute, the communication thread
  // and the network stack wait for a core: an allreduce in flight beside
  // backward progresses slower than one the step waits for.
  double busy_share = 1.0;
  // The share of its speed compute keeps while an allreduce is in flight (1:
  // all of it). On a CPU the network stack and the reductions run on the
  // cores that compute.
  double compute_share = 1.0;
  // The spread of one rank's step times (a robust standard deviation, s):
  // every bucket waits for the slowest rank, so a step of N ranks lasts the
  // longest of N draws, stragglers' time on top of the replay.
  double step_jitter_seconds = 0;
};

// An allreduce of `bytes` (on the wire, per rank) on its own: the latency
// terms and the time its bytes take at full bandwidth. Zero for one rank.
// Ranks on several nodes of several ranks each reduce hierarchically: within
// each node (reduce-scatter), across nodes (each rank's 1/K of the bytes, the
// node's K ranks through its one link), within each node again (allgather).
struct AllreduceCost {
  double latency_seconds = 0, transfer_seconds = 0;
  double total() const { return latency_seconds + transfer_seconds; }
};
AllreduceCost AllreduceCostOf(double bytes, const Cluster& cluster);
// A sparse allreduce's cost (deep gradient compression's allgather of every
// rank's set of `bytes`): each rank receives the others' sets. A ring within
// a node; across nodes, each node's link carries its K ranks' sets out and
// the other nodes' in, then they spread within the node. The gather of the
// sets' counts that comes first adds its latency.
AllreduceCost SparseAllreduceCostOf(double bytes, const Cluster& cluster);

// A step as the model sees it: compute, a bucket's start, a bucket's wait.
struct StepEvent {
  enum Kind { kCompute, kStart, kWait } kind = kCompute;
  double seconds = 0;  // kCompute
  int bucket = -1;     // kStart, kWait
  double bytes = 0;    // kStart: on the wire, per rank
  bool sparse = false;  // kStart: a sparse allreduce (an allgather of sets)
};

struct StepPrediction {
  double step_seconds = 0;     // the replay, and the stragglers' time
  double straggler_seconds = 0;
  double comm_seconds = 0;     // every bucket's allreduce alone, summed
  double exposed_seconds = 0;  // compute stalled at waits
  double wire_bytes = 0;       // per rank per step
};

// Replays `events` on `cluster`: buckets in flight progress at the
// cluster's busy share while compute runs, at full speed while the compute
// waits for them. Every started bucket must be waited for exactly once later
// (the plan loader proves it of a plan).
StatusOr<StepPrediction> SimulateStep(const std::vector<StepEvent>& events,
                                      const Cluster& cluster);

// The step of `program` as events: each command's compute from `seconds`
// (per command, one step), consecutive computes merged, collectives as their
// buckets' starts and waits with their buffers' bytes on the wire. A
// collective's own measured time is left out (on one rank it does nothing).
std::vector<StepEvent> StepEventsOf(const fb::Plan& root, const fb::Program& program,
                                    const std::vector<double>& seconds);

// The plan's gradient buckets re-cut on paper at other caps, as
// graphc compile --bucket-mb would cut them (graphrun --predict ...
// --bucket-sweep), one result per cap. The gradients, in the order the
// plan's buckets list them (the order backward completes them), are packed
// into buckets of at most the cap in MiB, the first of at most
// `first_bucket_mb`, at most 1024 each (graphc-data-parallel's rule). A
// bucket starts after the last command that writes or reads one of its
// gradients (where the plan starts its buckets back to back after backward,
// --no-allreduce-overlap, there), never before the bucket before it; it is
// waited for just before the first command after the plan's wait that reads
// one of its gradients (an update). The compute is the plan's, command for
// command, so only the updates' order can differ from a plan compiled at
// that cap (the compiler groups them by bucket).
struct Rebucketed {
  std::vector<StepEvent> events;
  std::vector<double> bucket_bytes;  // each bucket's gradients, as computed
};
// kInvalidArgument where the plan's collectives are not plain gradient
// buckets (sparse or summed ones: gradient compression; blocking ones:
// --sync-bn), a cap is not in (0, 1048576] MiB, or the plan is too large to
// look through within a bounded time (10^8 commands and operands visited).
StatusOr<std::vector<Rebucketed>> RebucketStep(const fb::Plan& root, const fb::Program& program,
                                               const std::vector<double>& seconds,
                                               const std::vector<double>& caps_mb,
                                               double first_bucket_mb);

// What graphrun --predict asks for.
struct PredictOptions {
  std::vector<int64_t> ranks;  // empty: no prediction
  int64_t ranks_per_node = 1;
  std::string link, intra_link = "10GB/s,1us";
  std::string algorithm = "auto";  // auto, ring, rabenseifner
  double busy_share = 1.0;         // Cluster::busy_share
  double compute_share = 1.0;      // Cluster::compute_share
  double step_jitter_ms = -1;      // < 0: as measured (0 with step_ms)
  // > 0: one rank's step in ms, instead of the measured one; the profile then
  // only says where in the step each command falls (the published step of
  // another device, on paper).
  double step_ms = 0;
  std::string step_profile;        // a --report with --profile, or "" to measure now
  // Bucket caps in MiB to predict beside the plan's own buckets (RebucketStep);
  // empty: none.
  std::vector<double> bucket_sweep_mb;
  double first_bucket_mb = 1.0;  // the first bucket's cap in the sweep
};

// At most this many different sizes to --predict, and caps to sweep.
inline constexpr size_t kMaxPredictSizes = 64;
inline constexpr size_t kMaxSweepCaps = 64;

// The caps graphrun --bucket-sweep tries when given none (MiB).
std::vector<double> DefaultBucketSweep();
// "1,4,16.5" (MiB, each in (0, 1048576], at most 64), sorted and each once;
// "" is DefaultBucketSweep(). Anything else is one kInvalidArgument line.
StatusOr<std::vector<double>> ParseBucketSweep(const std::string& text);

// One rank's measured step: the time of each command of train_step (ms per
// step), the median step, and what it was measured on.
struct MeasuredStep {
  std::vector<double> command_ms;
  double step_ms = 0;
  double jitter_ms = 0;  // the robust spread of the timed steps
  int64_t batch = 0;
  std::string device;  // "cpu", "cuda"
  std::string source;  // "this run", or the report's path
};

// The expected largest of n independent standard normal draws (0 for n = 1;
// 0.5642 for 2, 1.0294 for 4, 2.0697 for 32).
double ExpectedMaxOfNormals(int64_t n);

// The per-command entries --report writes under "profile" ("commands": one
// [opcode, kernel or "", location, ms per step] per command) for `program`.
nlohmann::json CommandProfileJson(const fb::Plan& root, const fb::Program& program,
                                  const std::vector<double>& ms_per_step);

// Reads a --report written by a one-rank run with --profile, and matches its
// commands with `program`'s: the same computation in the same order (the
// collectives may differ: other bucket sizes, overlap, wire). Every mismatch
// is a one-line error naming the report and where it differs.
StatusOr<MeasuredStep> ReadStepProfile(const std::string& path, const fb::Plan& root,
                                       const fb::Program& program);

// Checks `options` as PredictScaling will (links, numbers of ranks, shares,
// times), so that a mistake is named before a run is profiled.
Status CheckPredictOptions(const PredictOptions& options);

// Predicts every size in `options.ranks` (ascending, each once) from `measured` (the compute scaled
// so that one rank's step is the measured median, or options.step_ms),
// prints the table to `out` and returns it as JSON.
StatusOr<nlohmann::json> PredictScaling(const fb::Plan& root, const fb::Program& program,
                                        const MeasuredStep& measured,
                                        const PredictOptions& options, std::ostream& out);

}  // namespace graphc::runtime

#endif  // GRAPHC_RUNTIME_TRAIN_SCALING_MODEL_H_
