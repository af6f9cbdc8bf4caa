// The executor over a plan graphc compiled (GRAPHC_TEST_PLAN: mnist_softmax
// at batch 8, from ctest) on the CPU backend: seeded initialization is
// deterministic, a step computes a finite loss and moves the parameters in
// place, programs and buffers are found by name, and bad calls are refused.

#include "runtime/core/executor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "runtime/backends/cpu/cpu_backend.h"
#include "runtime/core/plan_loader.h"

namespace graphc::runtime {
namespace {

class ExecutorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* path = std::getenv("GRAPHC_TEST_PLAN");
    if (path == nullptr) GTEST_SKIP() << "GRAPHC_TEST_PLAN is not set (run through ctest)";
    StatusOr<std::unique_ptr<Plan>> plan = Plan::FromFile(path);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    plan_ = std::move(*plan);
    backend_ = CreateCpuBackend(2);
  }

  std::unique_ptr<Executor> Make(uint64_t seed) {
    StatusOr<std::unique_ptr<Executor>> created = Executor::Create(*plan_, *backend_);
    EXPECT_TRUE(created.ok()) << created.status().ToString();
    if (!created.ok()) return nullptr;
    EXPECT_TRUE((*created)->InitializeState(seed).ok());
    return std::move(*created);
  }

  // Every state tensor's bytes, in order.
  std::vector<std::vector<uint8_t>> State(const Executor& exec) {
    std::vector<std::vector<uint8_t>> state;
    for (const fb::State* s : *plan_->root().states()) {
      std::vector<uint8_t>& bytes = state.emplace_back(exec.buffer(s->buffer()).size());
      EXPECT_TRUE(exec.Read(s->buffer(), bytes.data(), bytes.size()).ok());
    }
    return state;
  }

  // Writes a deterministic batch into train_step's inputs.
  void Feed(Executor& exec, int program) {
    const fb::Program& p = exec.program(program);
    const int32_t images = p.inputs()->Get(0), labels = p.inputs()->Get(1);
    std::vector<float> x(exec.buffer(images).size() / 4);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37 * static_cast<double>(i));
    std::vector<int32_t> y(exec.buffer(labels).size() / 4);
    for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<int32_t>(i % 10);
    ASSERT_TRUE(exec.Write(images, x.data(), x.size() * 4).ok());
    ASSERT_TRUE(exec.Write(labels, y.data(), y.size() * 4).ok());
  }

  std::unique_ptr<Plan> plan_;
  std::unique_ptr<Backend> backend_;
};

// On fmnist_cnn (Kaiming-initialized filters; mnist_softmax starts from
// zeros), the first of the gradient check's plans.
TEST_F(ExecutorTest, TheSameSeedGivesTheSameStateAndAnotherSeedAnother) {
  const char* plans = std::getenv("GRAPHC_GRADCHECK_PLANS");
  if (plans == nullptr) GTEST_SKIP() << "GRAPHC_GRADCHECK_PLANS is not set (run through ctest)";
  const std::string first = std::string(plans).substr(0, std::string(plans).find(':'));
  StatusOr<std::unique_ptr<Plan>> plan = Plan::FromFile(first);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  plan_ = std::move(*plan);
  std::unique_ptr<Executor> a = Make(7), b = Make(7), c = Make(8);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(State(*a), State(*b));
  EXPECT_NE(State(*a), State(*c));
}

TEST_F(ExecutorTest, AStepComputesAFiniteLossAndUpdatesTheStateInPlace) {
  std::unique_ptr<Executor> exec = Make(3);
  ASSERT_TRUE(exec);
  StatusOr<int> train = exec->FindProgram("train_step");
  ASSERT_TRUE(train.ok()) << train.status().ToString();
  const std::vector<std::vector<uint8_t>> before = State(*exec);
  float losses[2] = {0, 0};
  for (float& loss : losses) {
    Feed(*exec, *train);
    ASSERT_TRUE(exec->Run(*train).ok());
    ASSERT_TRUE(exec->Read(exec->program(*train).outputs()->Get(0), &loss, 4).ok());
    EXPECT_TRUE(std::isfinite(loss)) << loss;
  }
  // The same batch twice: SGD lowers its loss.
  EXPECT_LT(losses[1], losses[0]);
  EXPECT_NE(State(*exec), before);
  EXPECT_TRUE(exec->CheckStateFinite().ok());
  // The step counter counted both.
  int64_t step = -1;
  for (const fb::State* s : *plan_->root().states())
    if (StringOf(exec->buffer(s->buffer()).name()) == "graphc.step")
      ASSERT_TRUE(exec->Read(s->buffer(), &step, sizeof(step)).ok());
  EXPECT_EQ(step, 2);
}

TEST_F(ExecutorTest, RefusesUnknownProgramsAndWrongSizes) {
  std::unique_ptr<Executor> exec = Make(1);
  ASSERT_TRUE(exec);
  StatusOr<int> missing = exec->FindProgram("no_such_program");
  EXPECT_EQ(missing.status().code(), ErrorCode::kInvalidArgument);
  StatusOr<int> train = exec->FindProgram("train_step");
  ASSERT_TRUE(train.ok());
  const int32_t images = exec->program(*train).inputs()->Get(0);
  std::vector<uint8_t> bytes(exec->buffer(images).size() + 4);
  EXPECT_FALSE(exec->Write(images, bytes.data(), bytes.size()).ok());
  EXPECT_FALSE(exec->Read(images, bytes.data(), bytes.size()).ok());
  EXPECT_TRUE(exec->Read(images, bytes.data(), bytes.size() - 4).ok());
}

}  // namespace
}  // namespace graphc::runtime
