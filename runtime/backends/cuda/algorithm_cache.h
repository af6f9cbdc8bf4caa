// cuDNN's convolution algorithm choices, kept in a file across processes.
//
// Choosing an algorithm means timing every candidate (cudnnFind*), which
// takes seconds per distinct convolution on a large batch; a ResNet-50 plan
// has about 60 of them, and a benchmark starts many processes on the same
// problems. The choice depends only on the GPU model, the cuDNN version, the
// math allowed and the problem, so those make the key (CudnnOps builds it)
// and the first process's choice serves the others.
//
// The file is a hint, never trusted: lines that do not parse, keys that are
// not printable, numbers out of range are skipped (and counted), a file over
// kMaxFileBytes is ignored whole, and the caller still checks that cuDNN
// accepts a cached algorithm (falling back to timing when it does not).
// Saving merges with what other processes wrote meanwhile and replaces the
// file atomically; a cache that cannot be read or written costs time, never
// the run. No CUDA here, so it is tested on any machine.

#ifndef GRAPHC_RUNTIME_BACKENDS_CUDA_ALGORITHM_CACHE_H_
#define GRAPHC_RUNTIME_BACKENDS_CUDA_ALGORITHM_CACHE_H_

#include <cstddef>
#include <map>
#include <optional>
#include <string>

#include "contract/status.h"

namespace graphc::runtime {

class AlgorithmCache {
 public:
  struct Choice {
    int algorithm = 0;  // a cudnnConvolution*Algo_t
    int math = 0;       // a cudnnMathType_t
    bool operator==(const Choice& other) const {
      return algorithm == other.algorithm && math == other.math;
    }
  };

  static constexpr size_t kMaxFileBytes = size_t{4} << 20;
  static constexpr size_t kMaxKeyBytes = 1024;
  static constexpr int kMaxValue = 63;  // algorithms and math types are small enums

  // The cache in `path`; "" disables it (lookups miss, Save writes nothing).
  explicit AlgorithmCache(std::string path);

  // Where graphrun keeps it: $GRAPHC_CUDNN_CACHE ("off" disables it), else
  // $XDG_CACHE_HOME/graphc/cudnn-algorithms.tsv, else
  // $HOME/.cache/graphc/cudnn-algorithms.tsv; "" when none applies.
  static std::string DefaultPath();

  // The cached choice for `key`, reading the file on first use.
  std::optional<Choice> Find(const std::string& key);
  // Records a choice made in this process (written by Save).
  void Put(const std::string& key, Choice choice);
  // Forgets a cached choice cuDNN no longer accepts (it is timed again).
  void Drop(const std::string& key);
  // Writes this process's new choices, merged over the file as it is now.
  // Ok when there was nothing to write or the cache is disabled.
  Status Save();

  const std::string& path() const { return path_; }
  int hits() const { return hits_; }
  // Lines of the file that were skipped, and why the file was not read ("").
  int skipped_lines() const { return skipped_; }
  const std::string& load_problem() const { return load_problem_; }

 private:
  // Reads `path_` into `into`, adding the lines it skips to `*skipped`;
  // returns why the file could not be read ("" when it could, or is absent).
  std::string Read(std::map<std::string, Choice>& into, int* skipped) const;

  std::string path_;
  bool loaded_ = false;
  std::map<std::string, Choice> cached_;  // from the file
  std::map<std::string, Choice> added_;   // this process's, to write
  int hits_ = 0;
  int skipped_ = 0;
  std::string load_problem_;
};

}  // namespace graphc::runtime

#endif  // GRAPHC_RUNTIME_BACKENDS_CUDA_ALGORITHM_CACHE_H_
