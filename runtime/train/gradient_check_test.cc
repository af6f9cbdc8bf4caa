// Autodiff against central finite differences, through the real execution path
// (the executor, oneDNN's backward primitives, the generated kernels).
//
// The plans (GRAPHC_GRADCHECK_PLANS, colon-separated; ctest compiles each
// model fused and unfused) are built with plain SGD, learning rate 1, no
// momentum and no weight decay, so one train_step moves every parameter by
// exactly minus its gradient: g = theta - theta', read right after that step.
// Each finite difference restores the saved state *and the inputs* (a step
// may reuse an input's arena bytes after its last read) and reruns
// train_step with one coordinate moved by +-eps, reading the loss it computes
// before updating; a rerun of the unperturbed state must reproduce the first
// step bit for bit. The loss is float32, so the check allows its rounding
// noise (an absolute term) on top of 1e-2 relative, and tries smaller steps
// where a larger one crosses a ReLU or max-pool kink.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/core/backend.h"
#include "runtime/backends/cpu/cpu_backend.h"
#include "runtime/train/dataset.h"
#include "runtime/core/executor.h"

namespace graphc::runtime {
namespace {

std::vector<std::string> PlanPaths() {
  std::vector<std::string> paths;
  const char* env = std::getenv("GRAPHC_GRADCHECK_PLANS");
  if (env == nullptr) return paths;
  std::stringstream list(env);
  for (std::string path; std::getline(list, path, ':');)
    if (!path.empty()) paths.push_back(path);
  return paths;
}

class GradientCheck : public ::testing::TestWithParam<std::string> {};

TEST(GradientCheckSetup, PlansAreGiven) {
  if (PlanPaths().empty())
    GTEST_SKIP() << "GRAPHC_GRADCHECK_PLANS is not set (run through ctest)";
}

TEST_P(GradientCheck, AutodiffMatchesCentralDifferences) {
  StatusOr<std::unique_ptr<Plan>> plan = Plan::FromFile(GetParam());
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  std::unique_ptr<Backend> backend = CreateCpuBackend();
  StatusOr<std::unique_ptr<Executor>> created = Executor::Create(**plan, *backend);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  Executor& exec = **created;
  ASSERT_TRUE(exec.InitializeState(3).ok());
  StatusOr<int> train = exec.FindProgram("train_step");
  ASSERT_TRUE(train.ok());
  const fb::Program& program = exec.program(*train);
  const int32_t images = program.inputs()->Get(0), labels = program.inputs()->Get(1);
  const int32_t loss_buffer = program.outputs()->Get(0);
  const fb::Buffer& image_buffer = exec.buffer(images);
  std::vector<int64_t> shape(image_buffer.shape()->begin(), image_buffer.shape()->end());
  std::unique_ptr<BatchSource> data = BatchSource::Synthetic(shape[0], shape, 10, 1, 5);
  Batch batch;
  data->Next(batch);
  ASSERT_TRUE(exec.Write(images, batch.images.data(), batch.images.size() * 4).ok());
  ASSERT_TRUE(exec.Write(labels, batch.labels.data(), batch.labels.size() * 4).ok());

  // Snapshot every state tensor (parameters, BN statistics, the step counter).
  const fb::Plan& root = (*plan)->root();
  std::vector<std::vector<uint8_t>> saved;
  for (const fb::State* s : *root.states()) {
    saved.emplace_back(exec.buffer(s->buffer()).size());
    ASSERT_TRUE(exec.Read(s->buffer(), saved.back().data(), saved.back().size()).ok());
  }
  auto restore = [&] {
    for (uint32_t i = 0; i < root.states()->size(); ++i)
      ASSERT_TRUE(exec.Write(root.states()->Get(i)->buffer(), saved[i].data(), saved[i].size())
                      .ok());
    ASSERT_TRUE(exec.Write(images, batch.images.data(), batch.images.size() * 4).ok());
    ASSERT_TRUE(exec.Write(labels, batch.labels.data(), batch.labels.size() * 4).ok());
  };
  auto loss_at = [&](int32_t buffer, int64_t index, float value) {
    restore();
    std::vector<float> values(exec.buffer(buffer).size() / 4);
    EXPECT_TRUE(exec.Read(buffer, values.data(), values.size() * 4).ok());
    values[index] = value;
    EXPECT_TRUE(exec.Write(buffer, values.data(), values.size() * 4).ok());
    EXPECT_TRUE(exec.Run(*train).ok());
    float loss = 0;
    EXPECT_TRUE(exec.Read(loss_buffer, &loss, 4).ok());
    return double{loss};
  };

  // One step: the gradient of every parameter.
  ASSERT_TRUE(exec.Run(*train).ok());
  float loss0 = 0;
  ASSERT_TRUE(exec.Read(loss_buffer, &loss0, 4).ok());
  std::vector<std::vector<uint8_t>> stepped;
  for (const fb::State* s : *root.states()) {
    stepped.emplace_back(exec.buffer(s->buffer()).size());
    ASSERT_TRUE(exec.Read(s->buffer(), stepped.back().data(), stepped.back().size()).ok());
  }
  // The protocol's premise: a step from the restored state and inputs repeats
  // the first one exactly (no command reads bytes an earlier run left behind).
  restore();
  ASSERT_TRUE(exec.Run(*train).ok());
  float loss_again = 0;
  ASSERT_TRUE(exec.Read(loss_buffer, &loss_again, 4).ok());
  EXPECT_EQ(loss_again, loss0) << "rerunning the step from the restored state";
  for (uint32_t i = 0; i < root.states()->size(); ++i) {
    std::vector<uint8_t> again(stepped[i].size());
    ASSERT_TRUE(exec.Read(root.states()->Get(i)->buffer(), again.data(), again.size()).ok());
    EXPECT_TRUE(again == stepped[i])
        << exec.buffer(root.states()->Get(i)->buffer()).name()->str()
        << " differs after rerunning the step from the restored state";
  }
  int checked = 0, mismatched = 0;
  for (uint32_t i = 0; i < root.states()->size(); ++i) {
    const fb::State& s = *root.states()->Get(i);
    if (!s.trainable()) continue;
    const fb::Buffer& b = exec.buffer(s.buffer());
    const int64_t n = b.size() / 4;
    std::vector<float> before(n), after(n);
    std::memcpy(before.data(), saved[i].data(), b.size());
    std::memcpy(after.data(), stepped[i].data(), b.size());
    std::vector<double> grad(n);
    for (int64_t k = 0; k < n; ++k) grad[k] = double{before[k]} - double{after[k]};
    // The largest-gradient coordinate and two spread through the tensor.
    int64_t largest = std::max_element(grad.begin(), grad.end(), [](double x, double y) {
                        return std::fabs(x) < std::fabs(y);
                      }) - grad.begin();
    for (int64_t k : {largest, n / 3, (2 * n) / 3}) {
      // Steps from large to small: a large step may cross a ReLU or max-pool
      // kink (with batch-2 batch norm, every channel has ~1000 values near
      // one), a small one drowns in float32 rounding. A correct gradient
      // agrees at some step; a wrong one at none.
      std::ostringstream tried;
      bool agrees = false;
      for (double step : {1e-2, 3e-3, 1e-3, 3e-4}) {
        const double eps = step * std::max(1.0, std::fabs(double{before[k]}));
        const float plus = before[k] + static_cast<float>(eps);
        const float minus = before[k] - static_cast<float>(eps);
        const double fd = (loss_at(s.buffer(), k, plus) - loss_at(s.buffer(), k, minus)) /
                          (double{plus} - double{minus});
        // float32 loss rounding, amplified by 1 / (2 eps), plus the update's.
        const double noise = 4 * 6e-8 * std::fabs(double{loss0}) / eps +
                             2 * 6e-8 * std::fabs(double{before[k]});
        const double tolerance = 1e-2 * std::max(std::fabs(fd), std::fabs(grad[k])) + noise;
        tried << " " << fd << " (step " << eps << ", tolerance " << tolerance << ")";
        if (std::fabs(fd - grad[k]) <= tolerance) {
          agrees = true;
          break;
        }
      }
      ++checked;
      if (!agrees) {
        ++mismatched;
        ADD_FAILURE() << GetParam() << ": " << b.name()->str() << "[" << k
                      << "]: autodiff " << grad[k] << ", central differences" << tried.str();
      }
    }
  }
  EXPECT_GT(checked, 0);
  RecordProperty("checked", checked);
  std::cout << GetParam() << ": " << checked << " coordinates checked, " << mismatched
            << " mismatched\n";
}

INSTANTIATE_TEST_SUITE_P(Plans, GradientCheck, ::testing::ValuesIn(PlanPaths()));
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GradientCheck);

}  // namespace
}  // namespace graphc::runtime
