// Checkpoints: a plan's state (parameters, optimizer buffers, batch-norm
// statistics, the step counter) in the safetensors format, each tensor under
// its name in the model file (`conv1.weight`, `conv1.weight.momentum_buffer`,
// `graphc.step`), so `safetensors.torch.load_file` or a few lines of NumPy
// read it and PyTorch-trained weights can be fed back.
//
// Writes are atomic: a temporary file in the same directory, fsync, rename,
// fsync of the directory. A run killed mid-save leaves the previous
// checkpoint whole.

#ifndef GRAPHC_RUNTIME_CHECKPOINT_H_
#define GRAPHC_RUNTIME_CHECKPOINT_H_

#include <cstdint>
#include <map>
#include <string>

#include "runtime/executor.h"
#include "runtime/status.h"

namespace graphc::runtime {

// Writes every state tensor of the executor's plan to `path`, with `metadata`
// as the file's __metadata__ (string to string, as safetensors requires).
Status SaveCheckpoint(const Executor& exec, const std::string& path,
                      const std::map<std::string, std::string>& metadata);

// Sets every state tensor of the executor's plan from `path`. Like PyTorch's
// strict load_state_dict: a tensor missing from the file, one the plan does
// not have, or one of another dtype or shape is an error naming it, and
// nothing is written unless the whole file checks out.
Status LoadCheckpoint(Executor& exec, const std::string& path);

}  // namespace graphc::runtime

#endif  // GRAPHC_RUNTIME_CHECKPOINT_H_
