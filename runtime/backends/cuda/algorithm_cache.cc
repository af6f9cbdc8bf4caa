// The file format (see algorithm_cache.h): a header line, then one choice
// per line, "KEY<TAB>ALGORITHM<TAB>MATH", KEY printable ASCII without tabs.

#include "runtime/backends/cuda/algorithm_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "contract/files.h"

namespace graphc::runtime {
namespace {

constexpr char kHeader[] = "# graphc cuDNN algorithm cache, version 1";

bool PrintableKey(const std::string& key) {
  if (key.empty() || key.size() > AlgorithmCache::kMaxKeyBytes) return false;
  for (char c : key)
    if (c < 0x20 || c > 0x7e || c == '\t') return false;
  return true;
}

// A decimal in [0, kMaxValue], nothing else.
std::optional<int> SmallNumber(const std::string& text) {
  if (text.empty() || text.size() > 2) return std::nullopt;
  int value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
  }
  if (value > AlgorithmCache::kMaxValue) return std::nullopt;
  return value;
}

}  // namespace

AlgorithmCache::AlgorithmCache(std::string path) : path_(std::move(path)) {}

std::string AlgorithmCache::DefaultPath() {
  if (const char* set = std::getenv("GRAPHC_CUDNN_CACHE"); set != nullptr) {
    const std::string path = set;
    return path == "off" ? std::string() : path;
  }
  const std::string name = "/graphc/cudnn-algorithms.tsv";
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && xdg[0] == '/')
    return xdg + name;
  if (const char* home = std::getenv("HOME"); home != nullptr && home[0] == '/')
    return std::string(home) + "/.cache" + name;
  return "";
}

std::string AlgorithmCache::Read(std::map<std::string, Choice>& into, int* skipped) const {
  struct stat st;
  if (stat(path_.c_str(), &st) != 0) return errno == ENOENT ? "" : std::strerror(errno);
  if (!S_ISREG(st.st_mode)) return "not a regular file";
  if (static_cast<size_t>(st.st_size) > kMaxFileBytes)
    return "larger than " + std::to_string(kMaxFileBytes) + " bytes";
  std::ifstream in(path_, std::ios::binary);
  if (!in) return "cannot be opened";
  std::string line;
  size_t read = 0;
  bool first = true;
  while (read <= kMaxFileBytes && std::getline(in, line)) {
    read += line.size() + 1;
    if (first) {
      first = false;
      if (line != kHeader) return "not a graphc algorithm cache (its first line differs)";
      continue;
    }
    const size_t tab1 = line.find('\t');
    const size_t tab2 = tab1 == std::string::npos ? tab1 : line.find('\t', tab1 + 1);
    if (tab2 == std::string::npos) {
      ++*skipped;
      continue;
    }
    const std::string key = line.substr(0, tab1);
    std::optional<int> algorithm = SmallNumber(line.substr(tab1 + 1, tab2 - tab1 - 1));
    std::optional<int> math = SmallNumber(line.substr(tab2 + 1));
    if (!PrintableKey(key) || !algorithm || !math) {
      ++*skipped;
      continue;
    }
    into[key] = Choice{*algorithm, *math};
  }
  return "";
}

std::optional<AlgorithmCache::Choice> AlgorithmCache::Find(const std::string& key) {
  if (path_.empty()) return std::nullopt;
  if (!loaded_) {
    loaded_ = true;
    load_problem_ = Read(cached_, &skipped_);
  }
  auto it = cached_.find(key);
  if (it == cached_.end()) return std::nullopt;
  ++hits_;
  return it->second;
}

void AlgorithmCache::Put(const std::string& key, Choice choice) {
  if (path_.empty() || !PrintableKey(key) || choice.algorithm < 0 ||
      choice.algorithm > kMaxValue || choice.math < 0 || choice.math > kMaxValue)
    return;
  added_[key] = choice;
}

void AlgorithmCache::Drop(const std::string& key) {
  if (cached_.erase(key) > 0 && hits_ > 0) --hits_;
}

Status AlgorithmCache::Save() {
  if (path_.empty() || added_.empty()) return Status::Ok();
  std::error_code error;
  const std::filesystem::path directory = std::filesystem::path(path_).parent_path();
  if (!directory.empty()) std::filesystem::create_directories(directory, error);
  if (error)
    return Status(ErrorCode::kIo, "cannot create " + directory.string() + ": " + error.message());
  // One writer at a time (ranks of a job share the file): an advisory lock
  // on a file beside it, held from reading to renaming. Without the lock
  // (a file system that refuses it) the save goes ahead: a lost entry costs
  // the next process a timing, nothing more.
  const std::string lock_path = path_ + ".lock";
  const int lock = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock >= 0) flock(lock, LOCK_EX);
  // What other processes saved since this one read the file, then ours. A
  // file that is there but cannot be read as a cache is left alone.
  std::map<std::string, Choice> merged;
  int skipped = 0;
  const std::string problem = Read(merged, &skipped);
  Status written;
  if (!problem.empty()) {
    written = Status(ErrorCode::kIo, path_ + " was left as it is: " + problem);
  } else {
    for (const auto& [key, choice] : added_) merged.erase(key);
    // This process's choices first: a file at its size limit drops older
    // entries, never the ones just timed.
    std::ostringstream out;
    out << kHeader << "\n";
    size_t bytes = sizeof(kHeader);
    for (const auto* entries : {&added_, &merged})
      for (const auto& [key, choice] : *entries) {
        bytes += key.size() + 8;
        if (bytes > kMaxFileBytes) break;  // the file stays readable
        out << key << '\t' << choice.algorithm << '\t' << choice.math << '\n';
      }
    written = WriteFileAtomically(path_, out.str());
  }
  if (lock >= 0) close(lock);  // releases the lock
  if (written.ok()) {
    for (const auto& [key, choice] : added_) cached_[key] = choice;
    added_.clear();
  }
  return written;
}

}  // namespace graphc::runtime
