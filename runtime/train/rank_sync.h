// What the ranks of a data-parallel job agree on before and while training:
// the same initial state, which collectives carry the gradients (NCCL on
// device buffers where every rank has it, else MPI), and rank 0's
// batch-norm statistics before an evaluation.

#ifndef GRAPHC_RUNTIME_TRAIN_RANK_SYNC_H_
#define GRAPHC_RUNTIME_TRAIN_RANK_SYNC_H_

#include <memory>
#include <string>

#include "contract/status.h"
#include "runtime/comm/communicator.h"
#include "runtime/core/backend.h"
#include "runtime/core/executor.h"
#include "runtime/train/trainer.h"

namespace graphc::runtime {

// The device collectives every rank of the job uses, or none (the
// communicator's host allreduces; an asynchronous device stages its buckets
// through host memory), decided by every rank alike. `how` says which, for
// the user.
StatusOr<std::unique_ptr<DeviceCollectives>> SetUpDeviceCollectives(Backend& backend,
                                                                   Communicator& comm,
                                                                   const TrainOptions& o,
                                                                   std::string& how);

// Every rank must start from the same parameters and optimizer state (the
// same seed, or the same checkpoint): checked once, by comparing checksums.
Status CheckSameStateOnEveryRank(const Executor& exec, Communicator& comm);

// Batch-norm running statistics follow each rank's own batches; before an
// evaluation every rank takes rank 0's (PyTorch DDP's broadcast_buffers), so
// that the ranks evaluate one model.
Status BroadcastPlainState(Executor& exec, Communicator& comm);

}  // namespace graphc::runtime

#endif  // GRAPHC_RUNTIME_TRAIN_RANK_SYNC_H_
