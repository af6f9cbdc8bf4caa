// The ranks' agreements (rank_sync.h).

#include "runtime/train/rank_sync.h"

#include <unistd.h>

#include <cstdint>
#include <set>
#include <vector>

namespace graphc::runtime {
namespace {

// FNV-1a over every state tensor's bytes (but the rank's own number), as two
// exact 32-bit halves.
StatusOr<std::vector<double>> StateChecksum(const Executor& exec) {
  uint64_t hash = 0xcbf29ce484222325ull;
  const fb::Plan& root = exec.plan().root();
  std::vector<uint8_t> bytes;
  if (root.states())
    for (const fb::State* state : *root.states()) {
      if (StringOf(exec.buffer(state->buffer()).name()) == "graphc.rank") continue;
      bytes.resize(exec.buffer(state->buffer()).size());
      Status read = exec.Read(state->buffer(), bytes.data(), bytes.size());
      if (!read.ok()) return read;
      for (uint8_t byte : bytes) hash = (hash ^ byte) * 0x100000001b3ull;
    }
  return std::vector<double>{double(hash >> 32), double(hash & 0xffffffffu)};
}

// The ranks' number for "the same device": a hash (52 bits, exact in a
// double) of the host's name and the device's id there (a GPU's UUID).
double DeviceKey(const Backend& backend) {
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  const std::string key = std::string(host) + "/" + backend.device_id();
  uint64_t hash = 0xcbf29ce484222325ull;  // FNV-1a
  for (unsigned char c : key) hash = (hash ^ c) * 0x100000001b3ull;
  return static_cast<double>(hash & ((uint64_t{1} << 52) - 1));
}

}  // namespace

StatusOr<std::unique_ptr<DeviceCollectives>> SetUpDeviceCollectives(Backend& backend,
                                                                   Communicator& comm,
                                                                   const TrainOptions& o,
                                                                   std::string& how) {
  const int rank = comm.rank(), ranks = comm.size();
  how = "mpi";
  if (ranks == 1 || o.collectives == "mpi") {
    if (backend.asynchronous()) how += " (host-staged)";
    return std::unique_ptr<DeviceCollectives>();
  }
  // NCCL refuses two ranks on one GPU (the lent machines have one each).
  const double mine = DeviceKey(backend);
  StatusOr<std::vector<double>> keys = comm.AllgatherDoubles("the ranks' devices", {mine});
  if (!keys.ok()) return keys.status();
  bool shared = false;
  for (int r = 0; r < ranks; ++r) shared |= r != rank && (*keys)[r] == mine;
  CommOptions options;
  options.timeout_seconds = o.collective_timeout;
  StatusOr<std::unique_ptr<DeviceCollectives>> made = backend.NewCollectives(options, shared);
  StatusOr<std::vector<double>> votes =
      comm.AllgatherDoubles("the device collectives", {made.ok() ? 1.0 : 0.0});
  if (!votes.ok()) return votes.status();
  std::vector<int> without;
  for (int r = 0; r < ranks; ++r)
    if ((*votes)[r] == 0) without.push_back(r);
  Status fallback;
  if (!without.empty()) {
    std::string ranks_text;
    for (int r : without) ranks_text += (ranks_text.empty() ? "" : ",") + std::to_string(r);
    fallback = Status(made.ok() ? ErrorCode::kUnavailable : made.status().code(),
                      "rank(s) " + ranks_text + " have no NCCL" +
                          (made.ok() ? std::string() : " (here: " + made.status().message() + ")"));
  } else {
    fallback = (*made)->Join(comm);
    if (fallback.ok()) {
      how = (*made)->Describe() + " (device buffers)";
      return std::move(*made);
    }
  }
  if (o.collectives == "nccl")
    return Status(fallback.code(), "--collectives nccl: " + fallback.message());
  // A job of CPU ranks has nothing to fall back from.
  if (backend.asynchronous()) how += " (host-staged: " + fallback.message() + ")";
  return std::unique_ptr<DeviceCollectives>();
}

Status CheckSameStateOnEveryRank(const Executor& exec, Communicator& comm) {
  StatusOr<std::vector<double>> mine = StateChecksum(exec);
  if (!mine.ok()) return mine.status();
  StatusOr<std::vector<double>> all =
      comm.AllgatherDoubles("the initial state's checksum", *mine);
  if (!all.ok()) return all.status();
  std::string differing;
  for (int r = 1; r < comm.size(); ++r)
    if ((*all)[2 * r] != (*all)[0] || (*all)[2 * r + 1] != (*all)[1])
      differing += (differing.empty() ? "" : ", ") + std::to_string(r);
  if (differing.empty()) return Status::Ok();
  return Status(ErrorCode::kInvalidArgument,
                "the initial state of rank(s) " + differing +
                    " differs from rank 0's: every rank must start from the same seed or the "
                    "same checkpoint");
}

Status BroadcastPlainState(Executor& exec, Communicator& comm) {
  const fb::Plan& root = exec.plan().root();
  if (root.states() == nullptr) return Status::Ok();
  // A model's own plain states (batch-norm statistics): not graphc's
  // (graphc.*) and not an optimizer's (named after their parameter); and
  // the weights' average (graphc.ema.*).
  std::set<std::string> parameters;
  for (const fb::State* state : *root.states())
    if (state->trainable()) parameters.insert(StringOf(exec.buffer(state->buffer()).name()));
  auto optimizer_state = [&](const std::string& name) {
    const size_t dot = name.rfind('.');
    return dot != std::string::npos && parameters.count(name.substr(0, dot));
  };
  std::vector<uint8_t> bytes;
  for (const fb::State* state : *root.states()) {
    const std::string name = StringOf(exec.buffer(state->buffer()).name());
    // And the weights' average, whose batch-norm statistics are each rank's.
    const bool average = name.rfind("graphc.ema.", 0) == 0;
    if (!average &&
        (state->trainable() || name.rfind("graphc.", 0) == 0 || optimizer_state(name)))
      continue;
    const fb::Buffer& b = exec.buffer(state->buffer());
    bytes.resize(b.size());
    Status status = exec.Read(state->buffer(), bytes.data(), bytes.size());
    if (status.ok())
      status = comm.Broadcast("state '" + PrintableOf(b.name()) + "'", bytes.data(), bytes.size());
    if (status.ok()) status = exec.Write(state->buffer(), bytes.data(), bytes.size());
    if (!status.ok()) return status;
  }
  return Status::Ok();
}

}  // namespace graphc::runtime
