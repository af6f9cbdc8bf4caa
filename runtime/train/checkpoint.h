// Checkpoints: a plan's state (parameters, optimizer buffers, batch-norm
// statistics, the step counter) in the safetensors format, each tensor under
// its name in the model file (`conv1.weight`, `conv1.weight.momentum_buffer`,
// `graphc.step`), so `safetensors.torch.load_file` or a few lines of NumPy
// read it and PyTorch-trained weights can be fed back.
//
// Writes are atomic: a temporary file in the same directory (PATH.tmp.XXXXXX,
// locked while it is written), fsync, rename, fsync of the directory. A run
// killed mid-save leaves the previous checkpoint whole; the temporary files
// such runs leave behind are removed by the next save to the same path (those
// no live writer holds). State holding NaN or infinity is never saved, and a
// checkpoint holding it is never loaded: a diverged run cannot replace the
// last good checkpoint.

#ifndef GRAPHC_RUNTIME_TRAIN_CHECKPOINT_H_
#define GRAPHC_RUNTIME_TRAIN_CHECKPOINT_H_

#include <cstdint>
#include <map>
#include <string>

#include "runtime/core/executor.h"
#include "contract/status.h"

namespace graphc::runtime {

// The states a run sets itself from the job it runs in (graphc.rank, the
// process's rank; graphc.world_size, the number of ranks): not part of a
// model's checkpoint, so one resumes on any number of ranks, and from before
// a plan had them.
bool IsRuntimeOwnedState(const std::string& name);

// Writes every state tensor of the executor's plan to `path` (but the
// runtime-owned ones), with `metadata`
// as the file's __metadata__ (string to string, as safetensors requires).
// Fails with kNonFinite naming the tensor, without touching `path`, when a
// tensor holds NaN or infinity; with kIo when `path` exists and is not a
// regular file.
Status SaveCheckpoint(const Executor& exec, const std::string& path,
                      const std::map<std::string, std::string>& metadata);

// Sets every state tensor of the executor's plan (but the runtime-owned
// ones) from `path`. Like PyTorch's
// strict load_state_dict: a tensor missing from the file, one the plan does
// not have, or one of another dtype or shape is an error naming it, and
// nothing is written unless the whole file checks out, NaN and infinity
// (kNonFinite, naming the tensor) included. With `metadata`, also gives the
// file's "__metadata__" strings (others are left out). One exception: a
// checkpoint without any gradient compression state (IsCompressionState,
// saved by a plan without compression) leaves them as they started, so that
// PowerSGD or top-k can take over from plain allreduces (a warm-up); `fresh`
// then counts them. A file with some of them must have all. The same for the
// weights' average (IsWeightAverageState): a checkpoint without it starts the
// average, and a plan without it passes over a checkpoint's (as over
// clipping's graphc.grad_norm).
Status LoadCheckpoint(Executor& exec, const std::string& path,
                      std::map<std::string, std::string>* metadata = nullptr,
                      size_t* fresh = nullptr);

// Whether `name` is one of gradient compression's states, which
// graphc-data-parallel adds: PowerSGD's (graphc.powersgd.<param>.error and
// .q) or deep gradient compression's (graphc.dgc.<param>.accumulation; its
// momentum is the parameter's momentum_buffer, as momentum SGD's).
bool IsCompressionState(const std::string& name);
// Whether `name` is one of the weights' average's states (graphc compile
// --ema-decay): graphc.ema.<tensor> and the count graphc.ema_updates.
bool IsWeightAverageState(const std::string& name);
// The rank's own part of those states (PowerSGD's error, DGC's
// accumulation), as opposed to what every rank holds alike (PowerSGD's Q).
bool IsPerRankCompressionState(const std::string& name);

// Whether state `name` of `plan` is the model's own: a parameter, or state
// the model declared (batch-norm statistics), not one the compiler added
// (an optimizer slot of a parameter, graphc.step and the other graphc.*).
bool IsModelState(const Plan& plan, const std::string& name);

// Sets the model's own state (IsModelState) from the safetensors file `path`,
// as `graphrun --init` starts a run from given weights (PyTorch's
// state_dict, or what graphc import wrote): strict like LoadCheckpoint for
// those tensors (missing, mis-shaped, another dtype, NaN or infinity: an error
// naming it, nothing written), PyTorch's num_batches_tracked ignored; the
// rest of the state (optimizer slots, the step counter) is left as it is.
// `loaded` (if given) gets the number of tensors set.
Status LoadInitialWeights(Executor& exec, const std::string& path, size_t* loaded = nullptr);

// As LoadInitialWeights, for an inference-only plan (graphrun infer): the
// file may also be a training checkpoint (--save), whose optimizer slots of
// the model's tensors and graphc.* states are left out.
Status LoadInferenceWeights(Executor& exec, const std::string& path, size_t* loaded = nullptr);

}  // namespace graphc::runtime

#endif  // GRAPHC_RUNTIME_TRAIN_CHECKPOINT_H_
