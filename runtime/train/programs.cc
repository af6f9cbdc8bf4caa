// The plan's programs for training, and evaluation (programs.h).

#include "runtime/train/programs.h"

#include <string>

namespace graphc::runtime {

StatusOr<Programs> FindPrograms(const Executor& exec) {
  Programs p;
  const fb::Plan& root = exec.plan().root();
  if (root.states())
    for (const fb::State* state : *root.states()) {
      const fb::Buffer& b = exec.buffer(state->buffer());
      const std::string name = StringOf(b.name());
      if (name == "graphc.step" && b.dtype() == fb::DType::I64 && b.size() == 8)
        p.step_counter = state->buffer();
      else if (name == "graphc.loss_scale" && b.dtype() == fb::DType::F32 && b.size() == 4)
        p.loss_scale = state->buffer();
      else if (name == "graphc.skipped_steps" && b.dtype() == fb::DType::I64 && b.size() == 8)
        p.skipped_steps = state->buffer();
      else if (name == "graphc.world_size" && b.dtype() == fb::DType::F32 && b.size() == 4)
        p.world_size = state->buffer();
      else if (name == "graphc.rank" && b.dtype() == fb::DType::I64 && b.size() == 8)
        p.rank_state = state->buffer();
      else if (name == "graphc.grad_norm" && b.dtype() == fb::DType::F32 && b.size() == 4)
        p.grad_norm = state->buffer();
      else if (name == "graphc.ema_updates" && b.dtype() == fb::DType::I64 && b.size() == 8)
        p.average_updates = state->buffer();
    }
  if ((p.loss_scale < 0) != (p.skipped_steps < 0))
    return Status(ErrorCode::kUnsupported,
                  "the plan has only one of graphc.loss_scale and graphc.skipped_steps");
  StatusOr<int> train = exec.FindProgram("train_step");
  if (!train.ok()) return train.status();
  p.train = *train;
  const fb::Program& step = exec.program(p.train);
  if (step.inputs()->size() != 2 || step.outputs()->size() < 1)
    return Status(ErrorCode::kInvalidArgument,
                  "train_step must take (images, labels) and return the loss");
  p.images = step.inputs()->Get(0);
  p.labels = step.inputs()->Get(1);
  p.loss = step.outputs()->Get(0);
  p.image_shape = ShapeOf(exec.buffer(p.images));
  p.batch = p.image_shape.empty() ? 0 : p.image_shape[0];
  p.images_u8 = exec.buffer(p.images).dtype() == fb::DType::U8;
  if (p.image_shape.size() != 4 ||
      (exec.buffer(p.images).dtype() != fb::DType::F32 && !p.images_u8) ||
      exec.buffer(p.labels).dtype() != fb::DType::I32 ||
      exec.buffer(p.loss).dtype() != fb::DType::F32 || exec.buffer(p.loss).size() != 4)
    return Status(ErrorCode::kUnsupported,
                  "train_step must take f32 or u8 NCHW images and i32 labels and return an f32 "
                  "loss");
  if (p.batch < 1 || root.batch_size() != p.batch ||
      ShapeOf(exec.buffer(p.labels)) != std::vector<int64_t>{p.batch})
    return Status(ErrorCode::kInvalidArgument,
                  "the plan says batch " + std::to_string(root.batch_size()) +
                      ", but train_step takes images " + ShapeString(p.image_shape) +
                      " and labels " + ShapeString(ShapeOf(exec.buffer(p.labels))));
  StatusOr<int> eval = exec.FindProgram("eval_step");
  if (eval.ok()) {
    const fb::Program& e = exec.program(*eval);
    // The same inputs as train_step, then the logits and the count of
    // correct predictions.
    if (e.inputs()->size() != 2 || e.outputs()->size() != 2 ||
        exec.buffer(e.inputs()->Get(0)).size() != exec.buffer(p.images).size() ||
        exec.buffer(e.inputs()->Get(0)).dtype() != exec.buffer(p.images).dtype() ||
        exec.buffer(e.inputs()->Get(1)).size() != exec.buffer(p.labels).size() ||
        exec.buffer(e.outputs()->Get(1)).dtype() != fb::DType::I64 ||
        exec.buffer(e.outputs()->Get(1)).size() != 8)
      return Status(ErrorCode::kUnsupported,
                    "eval_step must take train_step's images and labels and return the logits "
                    "and an i64 count of correct predictions");
    p.eval = *eval;
    p.correct = e.outputs()->Get(1);
    std::vector<int64_t> logits = ShapeOf(exec.buffer(e.outputs()->Get(0)));
    if (logits.size() != 2 || logits[0] != p.batch || logits[1] < 1 ||
        exec.buffer(e.outputs()->Get(0)).dtype() != fb::DType::F32)
      return Status(ErrorCode::kUnsupported,
                    "eval_step's logits must be f32 [batch " + std::to_string(p.batch) +
                        ", classes], got " + ShapeString(logits));
    p.classes = logits[1];
    // The same on the weights' average: the same buffers' shapes.
    StatusOr<int> average = exec.FindProgram("eval_ema_step");
    if (average.ok() && p.average_updates < 0)
      return Status(ErrorCode::kUnsupported,
                    "the plan has eval_ema_step but no i64 state graphc.ema_updates");
    if (average.ok()) {
      const fb::Program& a = exec.program(*average);
      auto same = [&](int32_t x, int32_t y) {
        return exec.buffer(x).size() == exec.buffer(y).size() &&
               exec.buffer(x).dtype() == exec.buffer(y).dtype();
      };
      if (a.inputs()->size() != 2 || a.outputs()->size() != 2 ||
          !same(a.inputs()->Get(0), e.inputs()->Get(0)) ||
          !same(a.inputs()->Get(1), e.inputs()->Get(1)) ||
          !same(a.outputs()->Get(0), e.outputs()->Get(0)) ||
          !same(a.outputs()->Get(1), e.outputs()->Get(1)))
        return Status(ErrorCode::kUnsupported,
                      "eval_ema_step must take and return what eval_step does");
      p.eval_average = *average;
      p.correct_average = a.outputs()->Get(1);
    }
  }
  if (p.classes <= 0)
    return Status(ErrorCode::kUnsupported,
                  "cannot tell the number of classes: the plan has no eval_step returning "
                  "[batch, classes] logits");
  return p;
}

StatusOr<double> Evaluate(Executor& exec, const Programs& p, BatchSource& test,
                          Communicator& comm, int64_t* evaluated, bool average) {
  if (average && p.eval_average < 0)
    return Status(ErrorCode::kInvalidArgument, "the plan has no program 'eval_ema_step'");
  const int program = average ? p.eval_average : p.eval;
  const int32_t correct_buffer = average ? p.correct_average : p.correct;
  const fb::Program& e = exec.program(program);
  int64_t correct_total = 0;
  *evaluated = 0;
  Batch b;
  for (int64_t i = 0; i < test.batches_per_epoch(); ++i) {
    test.Next(b);
    if (!b.error.empty()) return Status(ErrorCode::kIo, b.error);
    int64_t correct = 0;
    Status status = exec.Write(e.inputs()->Get(0), ImageData(b), ImageBytes(b));
    if (status.ok()) status = exec.Write(e.inputs()->Get(1), b.labels.data(), b.labels.size() * 4);
    if (status.ok()) status = exec.Run(program);
    if (status.ok()) status = exec.Read(correct_buffer, &correct, sizeof(correct));
    if (!status.ok()) return status;
    correct_total += correct;
    *evaluated += p.batch;
  }
  std::vector<double> counts = {double(correct_total), double(*evaluated)};
  Status summed = comm.AllreduceDoubles("the test accuracy's counts", counts,
                                        ScalarReduction::kSum);
  if (!summed.ok()) return summed;
  *evaluated = static_cast<int64_t>(counts[1]);
  return *evaluated ? counts[0] / *evaluated : 0.0;
}

}  // namespace graphc::runtime
