// Checkpoints in the safetensors format (see checkpoint.h). The layout, from
// https://github.com/huggingface/safetensors: an 8-byte little-endian header
// length N, N bytes of JSON {name: {dtype, shape, data_offsets: [begin, end]},
// "__metadata__": {...}} padded with spaces, then the tensors' bytes, with
// offsets relative to the end of the header.

#include "runtime/train/checkpoint.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <optional>
#include <set>
#include <vector>

#include "nlohmann/json.hpp"
#include "contract/files.h"

namespace graphc::runtime {
namespace {

// A header larger than this is not a checkpoint of any plan we load.
constexpr uint64_t kMaxHeaderBytes = 64ull << 20;

struct DTypeInfo {
  const char* name;
  uint64_t bytes;
};

DTypeInfo InfoOf(fb::DType dtype) {
  switch (dtype) {
    case fb::DType::F32: return {"F32", 4};
    case fb::DType::F16: return {"F16", 2};
    case fb::DType::BF16: return {"BF16", 2};
    case fb::DType::I32: return {"I32", 4};
    case fb::DType::I64: return {"I64", 8};
    case fb::DType::I1: return {"BOOL", 1};
    case fb::DType::U8: return {"U8", 1};
  }
  return {"?", 0};
}

// Paths, and names read from a file, are escaped before they are printed.
Status Io(const std::string& path, const std::string& what) {
  return Status(ErrorCode::kIo, Printable(path) + ": " + what);
}

Status SysIo(const std::string& path, const std::string& what) {
  return Io(path, what + " (" + std::strerror(errno) + ")");
}

// Reads exactly `size` bytes at `offset`.
bool ReadAt(int fd, uint64_t offset, char* out, uint64_t size) {
  while (size > 0) {
    ssize_t got = pread(fd, out, size, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    out += got;
    offset += static_cast<uint64_t>(got);
    size -= static_cast<uint64_t>(got);
  }
  return true;
}

// Removes PATH.tmp.XXXXXX files that interrupted saves left behind. A live
// writer holds an exclusive lock on its temporary file until it is renamed,
// so a file whose lock this process can take (and which is more than a few
// seconds old, which covers the instant between mkstemp and flock) belongs to
// nobody. Only files that are what a save writes first are removed: the six
// characters mkstemp makes, and a safetensors header length (8 bytes, under
// 64 MiB) followed by '{'; a user's file that merely has such a name stays.
void RemoveStaleTemporaries(const std::string& path) {
  const std::string dir = DirectoryOf(path);
  const size_t slash = path.rfind('/');
  const std::string prefix = (slash == std::string::npos ? path : path.substr(slash + 1)) + ".tmp.";
  DIR* listing = opendir(dir.c_str());
  if (listing == nullptr) return;
  const time_t now = time(nullptr);
  while (dirent* entry = readdir(listing)) {
    const std::string name = entry->d_name;
    if (name.size() != prefix.size() + 6 || name.compare(0, prefix.size(), prefix) != 0 ||
        !std::all_of(name.end() - 6, name.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)); }))
      continue;
    const std::string stale = dir + "/" + name;
    int fd = open(stale.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) continue;
    struct stat st;
    uint8_t head[9];
    uint64_t header_length = 0;
    bool ours = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && ReadAt(fd, 0, reinterpret_cast<char*>(head), 9);
    for (int i = 0; ours && i < 8; ++i) header_length |= uint64_t(head[i]) << (8 * i);
    ours = ours && header_length <= kMaxHeaderBytes && head[8] == '{';
    if (ours && now - st.st_mtime >= 5 && flock(fd, LOCK_EX | LOCK_NB) == 0)
      unlink(stale.c_str());
    close(fd);
  }
  closedir(listing);
}

// Opens `path` for reading when it is a regular file; kIo naming it otherwise.
StatusOr<int> OpenRegular(const std::string& path, const std::string& what) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return SysIo(path, "cannot open " + what);
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    bool directory = S_ISDIR(st.st_mode);
    close(fd);
    return Io(path, "not a regular file" + std::string(directory ? " (a directory)" : "") +
                        "; a " + what + " is one");
  }
  return fd;
}

// How many values of a tensor's host bytes are NaN or infinite.
uint64_t NonFiniteValues(const char* data, uint64_t bytes, fb::DType dtype) {
  uint64_t bad = 0;
  if (dtype == fb::DType::F32) {
    for (uint64_t i = 0; i + 4 <= bytes; i += 4) {
      uint32_t v;
      std::memcpy(&v, data + i, 4);
      bad += (v & 0x7f800000u) == 0x7f800000u;
    }
  } else if (dtype == fb::DType::F16 || dtype == fb::DType::BF16) {
    const uint16_t exponent = dtype == fb::DType::F16 ? 0x7c00 : 0x7f80;
    for (uint64_t i = 0; i + 2 <= bytes; i += 2) {
      uint16_t v;
      std::memcpy(&v, data + i, 2);
      bad += (v & exponent) == exponent;
    }
  }
  return bad;
}

}  // namespace

bool IsRuntimeOwnedState(const std::string& name) {
  return name == "graphc.rank" || name == "graphc.world_size";
}

Status SaveCheckpoint(const Executor& exec, const std::string& path,
                      const std::map<std::string, std::string>& metadata) {
  Status replaceable = CheckReplaceable(path);
  if (!replaceable.ok()) return replaceable;
  // Never replace the last good checkpoint with a diverged state.
  Status finite = exec.CheckStateFinite();
  if (!finite.ok())
    return Status(ErrorCode::kNonFinite, Printable(path) + ": not saved, " + finite.message() +
                                             "; the previous checkpoint (if any) is kept");
  RemoveStaleTemporaries(path);
  const fb::Plan& root = exec.plan().root();
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  header["__metadata__"] = metadata;
  std::vector<int32_t> buffers;
  uint64_t offset = 0;
  if (root.states() != nullptr)
    for (const fb::State* state : *root.states()) {
      const fb::Buffer& b = exec.buffer(state->buffer());
      std::string name = StringOf(b.name());
      if (IsRuntimeOwnedState(name)) continue;
      if (name.empty() || header.contains(name))
        return Status(ErrorCode::kInvalidArgument,
                      "state buffer " + std::to_string(state->buffer()) +
                          " has no name or a repeated one ('" + Printable(name) + "')");
      header[name] = {{"dtype", InfoOf(b.dtype()).name},
                      {"shape", ShapeOf(b)},
                      {"data_offsets", {offset, offset + b.size()}}};
      offset += b.size();
      buffers.push_back(state->buffer());
    }
  std::string json;
  try {
    json = header.dump();
  } catch (const nlohmann::json::exception&) {
    return Status(ErrorCode::kInvalidArgument,
                  Printable(path) + ": a state tensor's name is not UTF-8, which safetensors "
                                    "headers (JSON) require");
  }
  json.append((8 - json.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  uint8_t length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(uint64_t(json.size()) >> (8 * i));

  std::string temp = path + ".tmp.XXXXXX";
  int fd = mkstemp(temp.data());
  if (fd < 0) return SysIo(path, "cannot create a temporary file next to it");
  // Held until the file is renamed or removed: the mark of a live writer.
  flock(fd, LOCK_EX);
  auto fail = [&](const std::string& what) {
    Status status = SysIo(path, what);
    close(fd);
    unlink(temp.c_str());
    return status;
  };
  if (fchmod(fd, 0644) != 0) return fail("cannot set the file mode");
  if (!WriteAll(fd, reinterpret_cast<const char*>(length), 8) ||
      !WriteAll(fd, json.data(), json.size()))
    return fail("cannot write");
  std::vector<char> data;
  for (int32_t index : buffers) {
    data.resize(exec.buffer(index).size());
    Status status = exec.Read(index, data.data(), data.size());
    if (!status.ok()) {
      close(fd);
      unlink(temp.c_str());
      return status;
    }
    if (!WriteAll(fd, data.data(), data.size())) return fail("cannot write");
  }
  if (fsync(fd) != 0) return fail("cannot flush to disk");
  // Renamed while still open, so the lock that marks a live writer is held
  // until the file has its final name.
  if (std::rename(temp.c_str(), path.c_str()) != 0) return fail("cannot replace");
  close(fd);
  // The rename itself reaches the disk with the directory.
  int dir = open(DirectoryOf(path).c_str(), O_RDONLY | O_DIRECTORY);
  if (dir >= 0) {
    fsync(dir);
    close(dir);
  }
  return Status::Ok();
}

namespace {

// What a load takes from the file: every state (a checkpoint), or the model's
// own (initial weights: parameters and batch-norm statistics).
enum class LoadKind { kCheckpoint, kInitialWeights, kInferenceWeights };

// The optimizer's slots of trainable `names` (momentum_buffer, exp_avg,
// exp_avg_sq), which initial weights leave at zero.
bool IsOptimizerSlot(const std::string& name, const std::set<std::string>& trainable) {
  for (const char* suffix : {".momentum_buffer", ".exp_avg", ".exp_avg_sq"}) {
    const size_t n = std::strlen(suffix);
    if (name.size() > n && name.compare(name.size() - n, n, suffix) == 0 &&
        trainable.count(name.substr(0, name.size() - n)))
      return true;
  }
  return false;
}

Status LoadStates(Executor& exec, const std::string& path, LoadKind kind,
                  std::map<std::string, std::string>* metadata, size_t* loaded,
                  size_t* fresh = nullptr);

}  // namespace

bool IsWeightAverageState(const std::string& name) {
  return name.rfind("graphc.ema.", 0) == 0 || name == "graphc.ema_updates";
}

bool IsCompressionState(const std::string& name) {
  return name.rfind("graphc.powersgd.", 0) == 0 || name.rfind("graphc.dgc.", 0) == 0;
}

bool IsPerRankCompressionState(const std::string& name) {
  const std::string error = ".error";
  return name.rfind("graphc.dgc.", 0) == 0 ||
         (name.rfind("graphc.powersgd.", 0) == 0 && name.size() > error.size() &&
          name.compare(name.size() - error.size(), error.size(), error) == 0);
}

bool IsModelState(const Plan& plan, const std::string& name) {
  std::set<std::string> trainable;
  bool found = false, found_trainable = false;
  if (plan.root().states() != nullptr)
    for (const fb::State* state : *plan.root().states()) {
      const std::string n = StringOf(plan.root().buffers()->Get(state->buffer())->name());
      if (state->trainable()) trainable.insert(n);
      if (n == name) {
        found = true;
        found_trainable = state->trainable();
      }
    }
  if (!found) return false;
  return found_trainable || (name.rfind("graphc.", 0) != 0 && !IsOptimizerSlot(name, trainable));
}

Status LoadInitialWeights(Executor& exec, const std::string& path, size_t* loaded) {
  return LoadStates(exec, path, LoadKind::kInitialWeights, nullptr, loaded);
}

Status LoadInferenceWeights(Executor& exec, const std::string& path, size_t* loaded) {
  return LoadStates(exec, path, LoadKind::kInferenceWeights, nullptr, loaded);
}

Status LoadCheckpoint(Executor& exec, const std::string& path,
                      std::map<std::string, std::string>* metadata, size_t* fresh) {
  return LoadStates(exec, path, LoadKind::kCheckpoint, metadata, nullptr, fresh);
}

namespace {

Status LoadStates(Executor& exec, const std::string& path, LoadKind kind,
                  std::map<std::string, std::string>* metadata, size_t* loaded,
                  size_t* fresh) {
  const bool initial = kind != LoadKind::kCheckpoint;
  const bool inference = kind == LoadKind::kInferenceWeights;
  StatusOr<int> opened = OpenRegular(path, initial ? "initial weights" : "checkpoint");
  if (!opened.ok()) return opened.status();
  const int fd = *opened;
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  struct stat st;
  fstat(fd, &st);
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  uint8_t length[8];
  if (file_size < 8 || !ReadAt(fd, 0, reinterpret_cast<char*>(length), 8))
    return Io(path, "not a safetensors file (shorter than its 8-byte header length)");
  uint64_t header_size = 0;
  for (int i = 0; i < 8; ++i) header_size |= uint64_t(length[i]) << (8 * i);
  if (header_size > kMaxHeaderBytes || header_size > file_size - 8)
    return Io(path, "not a safetensors file (header length " + std::to_string(header_size) +
                        " in a file of " + std::to_string(file_size) + " bytes)");
  std::string json(header_size, '\0');
  if (!ReadAt(fd, 8, json.data(), header_size)) return Io(path, "cannot read the header");
  nlohmann::json header = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!header.is_object()) return Io(path, "not a safetensors file (the header is not JSON)");
  const uint64_t data_size = file_size - 8 - header_size;

  // Check everything before writing anything.
  struct Load {
    int32_t buffer;  // -1: a record the plan does not keep, named `record`
    uint64_t begin, end;
    std::string record;
  };
  std::vector<Load> loads;
  std::set<std::string> wanted;
  const fb::Plan& root = exec.plan().root();
  // A checkpoint of a plan without gradient compression: its states start
  // fresh.
  bool compression_saved = false;
  for (const auto& [name, value] : header.items()) compression_saved |= IsCompressionState(name);
  // graphrun marks a checkpoint that had them: one with them all taken out
  // is not an uncompressed plan's.
  if (!initial && !compression_saved && header.contains("__metadata__") &&
      header["__metadata__"].is_object() &&
      (header["__metadata__"].contains("graphc.powersgd") ||
       header["__metadata__"].contains("graphc.dgc")))
    return Io(path, "was saved with gradient compression's states (its __metadata__ says "
                    "so) but holds none of them");
  size_t started_fresh = 0;
  // A checkpoint of a plan without the weights' average: the average starts
  // here (the first update copies the weights).
  bool average_saved = false, average_kept = false;
  for (const auto& [name, value] : header.items()) average_saved |= IsWeightAverageState(name);
  if (root.states() != nullptr)
    for (const fb::State* state : *root.states())
      average_kept |= StringOf(exec.buffer(state->buffer()).name()) == "graphc.ema_updates";
  if (root.states() != nullptr)
    for (const fb::State* state : *root.states()) {
      const fb::Buffer& b = exec.buffer(state->buffer());
      const std::string name = StringOf(b.name());
      if (IsRuntimeOwnedState(name) || (initial && !IsModelState(exec.plan(), name))) continue;
      if (!initial && !compression_saved && IsCompressionState(name)) {
        ++started_fresh;
        continue;
      }
      // A record, not training state: a checkpoint saved without clipping
      // resumes with clipping on.
      if (!initial && name == "graphc.grad_norm" && !header.contains(name)) continue;
      if (!initial && !average_saved && IsWeightAverageState(name)) continue;
      wanted.insert(name);
      auto it = header.find(name);
      if (it == header.end())
        return Io(path, "has no tensor '" + Printable(name) + "' (the model has it)");
      const nlohmann::json& t = *it;
      const std::string at = "tensor '" + Printable(name) + "'";
      if (!t.is_object() || !t.contains("dtype") || !t["dtype"].is_string() ||
          !t.contains("shape") || !t["shape"].is_array() || !t.contains("data_offsets") ||
          !t["data_offsets"].is_array() || t["data_offsets"].size() != 2 ||
          !t["data_offsets"][0].is_number_unsigned() ||
          !t["data_offsets"][1].is_number_unsigned())
        return Io(path, at + ": needs a dtype, a shape and two data_offsets");
      if (t["dtype"] != InfoOf(b.dtype()).name)
        return Io(path, at + " is " + Printable(t["dtype"].get<std::string>()) + ", the model's is " +
                            InfoOf(b.dtype()).name);
      std::vector<int64_t> shape;
      for (const auto& d : t["shape"]) {
        if (!d.is_number_integer()) return Io(path, at + ": a shape of integers");
        shape.push_back(d.get<int64_t>());
      }
      if (shape != ShapeOf(b))
        return Io(path, at + " has shape " + ShapeString(shape) + ", the model's is " +
                            ShapeString(ShapeOf(b)));
      const uint64_t begin = t["data_offsets"][0], end = t["data_offsets"][1];
      if (begin > end || end > data_size || end - begin != b.size())
        return Io(path, at + ": data_offsets [" + std::to_string(begin) + ", " +
                            std::to_string(end) + ") do not hold its " +
                            std::to_string(b.size()) + " bytes in the file's " +
                            std::to_string(data_size));
      loads.push_back({state->buffer(), begin, end});
    }
  // PyTorch's batch norm counts its batches; graphc's momentum does not.
  // For inference, also what graphc's training keeps beside the weights (a
  // checkpoint of --save): optimizer slots of the model's tensors, graphc.*.
  // Clipping's record of the gradient norm, to a plan that does not clip.
  auto ignored = [&](const std::string& name) {
    if (name == "graphc.grad_norm") return true;
    if (IsWeightAverageState(name) && (initial || inference || !average_kept)) return true;
    const std::string suffix = ".num_batches_tracked";
    if (initial && name.size() > suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      return true;
    return inference && (name.rfind("graphc.", 0) == 0 || IsOptimizerSlot(name, wanted));
  };
  // A checkpoint's records that the plan does not keep (clipping's norm, the
  // weights' average) still tile the data, and are what the plan that saved
  // them wrote: F32 (the norm a scalar), the average's count an I64 scalar.
  if (!initial)
    for (const auto& [name, t] : header.items()) {
      const bool norm = name == "graphc.grad_norm", count = name == "graphc.ema_updates";
      if (wanted.count(name) ||
          !(norm || (IsWeightAverageState(name) && !average_kept && !inference)))
        continue;
      const std::string at = "tensor '" + Printable(name) + "'", dtype = count ? "I64" : "F32";
      // Its elements, when its dtype is `dtype` and its shape well-formed.
      std::optional<uint64_t> elements;
      if (t.is_object() && t.contains("dtype") && t["dtype"] == dtype && t.contains("shape") &&
          t["shape"].is_array()) {
        constexpr uint64_t kMost = uint64_t(1) << 40;
        elements = 1;
        for (const auto& d : t["shape"]) {
          const uint64_t extent = d.is_number_unsigned() ? d.get<uint64_t>() : kMost + 1;
          if (extent > kMost || (extent != 0 && *elements > kMost / extent)) {
            elements.reset();
            break;
          }
          *elements *= extent;
        }
      }
      // Its [begin, end) of the data, when they lie within it.
      std::optional<std::pair<uint64_t, uint64_t>> range;
      if (t.is_object() && t.contains("data_offsets") && t["data_offsets"].is_array() &&
          t["data_offsets"].size() == 2 && t["data_offsets"][0].is_number_unsigned() &&
          t["data_offsets"][1].is_number_unsigned() &&
          t["data_offsets"][0].get<uint64_t>() <= t["data_offsets"][1].get<uint64_t>() &&
          t["data_offsets"][1].get<uint64_t>() <= data_size)
        range = {t["data_offsets"][0].get<uint64_t>(), t["data_offsets"][1].get<uint64_t>()};
      const uint64_t bytes = elements.value_or(0) * (count ? 8 : 4);
      if (norm || count) {
        if (!elements || !t["shape"].empty())
          return Io(path, at + ": must be an " + dtype + " scalar (shape [])");
      } else if (!elements || (range && range->second - range->first != bytes)) {
        return Io(path, at + ": must be an F32 tensor whose data_offsets hold its shape's bytes");
      }
      if (!range || range->second - range->first != bytes)
        return Io(path, at + ": needs data_offsets holding its " + std::to_string(bytes) +
                            " bytes within the data");
      loads.push_back({-1, range->first, range->second, name});
    }
  for (const auto& [name, value] : header.items())
    if (name != "__metadata__" && !wanted.count(name) && !ignored(name))
      return Io(path, "has tensor '" + Printable(name) + "', which the model does not" +
                          (initial && exec.plan().root().states() != nullptr &&
                                   std::any_of(exec.plan().root().states()->begin(),
                                               exec.plan().root().states()->end(),
                                               [&](const fb::State* s) {
                                                 return StringOf(exec.buffer(s->buffer()).name()) ==
                                                        name;
                                               })
                               ? " among its weights (an optimizer slot or a counter: initial "
                                 "weights start those at zero)"
                               : ""));
  // As the safetensors format says: the tensors tile the data, no two sharing
  // a byte, no byte left over (a file that is more is not what was saved).
  std::vector<Load> sorted = loads;
  std::sort(sorted.begin(), sorted.end(), [](const Load& a, const Load& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t covered = 0;
  for (const Load& load : sorted) {
    if (initial ? load.begin < covered : load.begin != covered)
      return Io(path, "tensor '" +
                          (load.buffer < 0 ? Printable(load.record)
                                           : PrintableOf(exec.buffer(load.buffer).name())) +
                          "' starts at " +
                          std::to_string(load.begin) + " of the data, not at " +
                          std::to_string(covered) +
                          (load.begin < covered ? ": tensors overlap" : ": a gap"));
    covered = load.end;
  }
  // Initial weights may hold tensors left out (num_batches_tracked): their
  // bytes are the gaps; a checkpoint is exactly what was saved.
  if (!initial && covered != data_size)
    return Io(path, "holds " + std::to_string(data_size) + " bytes of tensor data, its tensors " +
                        std::to_string(covered));

  // Two passes: every tensor is read and checked for NaN and infinity before
  // the first is written (a diverged run's checkpoint must not be resumed),
  // without holding the whole state twice in memory.
  std::vector<char> data;
  for (bool write : {false, true})
    for (const Load& load : loads) {
      if (load.buffer < 0) continue;  // a record the plan does not keep
      const fb::Buffer& b = exec.buffer(load.buffer);
      data.resize(b.size());
      if (!ReadAt(fd, 8 + header_size + load.begin, data.data(), data.size()))
        return Io(path, "cannot read tensor data");
      if (!write) {
        if (uint64_t bad = NonFiniteValues(data.data(), data.size(), b.dtype()))
          return Status(ErrorCode::kNonFinite,
                        Printable(path) + ": tensor '" + PrintableOf(b.name()) + "' holds " +
                            std::to_string(bad) + " NaN or infinite values; refusing to " +
                            (initial ? "start" : "resume") + " from it");
        continue;
      }
      Status status = exec.Write(load.buffer, data.data(), data.size());
      if (!status.ok()) return status;
    }
  if (metadata != nullptr) {
    metadata->clear();
    auto it = header.find("__metadata__");
    if (it != header.end() && it->is_object())
      for (const auto& [key, value] : it->items())
        if (value.is_string()) (*metadata)[key] = value.get<std::string>();
  }
  if (loaded != nullptr) *loaded = loads.size();
  if (fresh != nullptr) *fresh = started_fresh;
  return Status::Ok();
}

}  // namespace

}  // namespace graphc::runtime
