// What training needs of a plan: its train_step (and eval_step), their
// buffers, and the states the trainer reads and writes (the step counter,
// loss scaling, the number of ranks); and the evaluation over a test split.

#ifndef GRAPHC_RUNTIME_TRAIN_PROGRAMS_H_
#define GRAPHC_RUNTIME_TRAIN_PROGRAMS_H_

#include <cstdint>
#include <vector>

#include "contract/status.h"
#include "runtime/comm/communicator.h"
#include "runtime/core/executor.h"
#include "runtime/train/dataset.h"

namespace graphc::runtime {

// Checks that `plan` has what training needs; fills the buffers it uses.
struct Programs {
  int train = -1, eval = -1;  // eval: -1 when the plan has none
  // eval_step on the weights' average (graphc compile --ema-decay), or -1.
  int eval_average = -1;
  int32_t correct_average = -1;
  int32_t images = -1, labels = -1, loss = -1, correct = -1;
  int32_t step_counter = -1;  // graphc.step, where a resumed run continues
  int32_t average_updates = -1;  // graphc.ema_updates: the weights' average's count
  // FP16 loss scaling (graphc compile --amp=fp16): the f32 scale and the i64
  // count of steps skipped on overflow; -1 without.
  int32_t loss_scale = -1, skipped_steps = -1;
  // The f32 number of ranks (graphc compile --sync-bn) and the i64 rank of
  // this process (dropout under data-parallel); -1 without.
  int32_t world_size = -1, rank_state = -1;
  // The f32 gradient norm of the last applied step (graphc compile
  // --clip-grad-norm); -1 without.
  int32_t grad_norm = -1;
  std::vector<int64_t> image_shape;
  // The images are 8-bit pixels, normalized by the plan (graphc compile
  // --input-normalize); else float32, normalized by the data source.
  bool images_u8 = false;
  int64_t batch = 0, classes = 0;
};

// The programs and buffers of `exec`'s plan, or why it cannot train.
StatusOr<Programs> FindPrograms(const Executor& exec);

// Whole batches of the test split (the remainder is dropped): the fraction
// eval_step (or, with `average`, eval_ema_step) counts correct. With several ranks each evaluates its shard of
// every batch and the counts are summed; `evaluated` gets the examples.
StatusOr<double> Evaluate(Executor& exec, const Programs& p, BatchSource& test,
                          Communicator& comm, int64_t* evaluated, bool average = false);

}  // namespace graphc::runtime

#endif  // GRAPHC_RUNTIME_TRAIN_PROGRAMS_H_
