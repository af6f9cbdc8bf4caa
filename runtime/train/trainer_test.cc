// The trainer on a plan graphc compiled (GRAPHC_TEST_PLAN: mnist_softmax at
// batch 8, from ctest) on the CPU backend, through Train() as graphrun calls
// it: what it prints and reports, that saving and resuming continue a run
// bit for bit (and that the comparison sees a different run), that outputs the run reads or shares are refused before
// anything runs, and where each rank's trace goes.

#include "runtime/train/trainer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>

#include "nlohmann/json.hpp"
#include "runtime/backends/cpu/cpu_backend.h"
#include "runtime/core/plan_loader.h"

namespace graphc::runtime {
namespace {

std::string Contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* path = std::getenv("GRAPHC_TEST_PLAN");
    if (path == nullptr) GTEST_SKIP() << "GRAPHC_TEST_PLAN is not set (run through ctest)";
    plan_path_ = path;
    StatusOr<std::unique_ptr<Plan>> plan = Plan::FromFile(path);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    plan_ = std::move(*plan);
    char dir[] = "/tmp/graphc-trainer-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
  }
  void TearDown() override {
    if (!dir_.empty()) std::system(("rm -rf '" + dir_ + "'").c_str());
  }

  TrainOptions Options(int64_t steps) {
    TrainOptions o;
    o.plan_path = plan_path_;
    o.steps = steps;
    o.warmup = 1;
    o.display_every = 2;
    return o;
  }
  // Trains on a fresh CPU backend; returns the status and what rank 0 printed.
  Status Run(const TrainOptions& o, std::string* printed = nullptr) {
    std::unique_ptr<Backend> backend = CreateCpuBackend(2);
    std::ostringstream out;
    Status status = Train(*plan_, *backend, o, out);
    if (printed) *printed = out.str();
    return status;
  }

  std::string plan_path_, dir_;
  std::unique_ptr<Plan> plan_;
};

TEST_F(TrainerTest, PrintsTheRunAndReportsItsFigures) {
  TrainOptions o = Options(4);
  o.report = dir_ + "/report.json";
  o.report_extra["device_choice"] = "cpu";
  std::string printed;
  Status status = Run(o, &printed);
  ASSERT_TRUE(status.ok()) << status.ToString();
  for (const char* line : {"loaded in ", "model: mnist_softmax, batch 8, ", "4 steps, 1 warmup",
                           "Step\tImg/sec\ttotal_loss", "2\timages/sec: ", "4\timages/sec: ",
                           "total images/sec: ", "step time: median ", "final loss: "})
    EXPECT_NE(printed.find(line), std::string::npos) << line << " in\n" << printed;
  nlohmann::json r = nlohmann::json::parse(Contents(o.report));
  EXPECT_EQ(r["model"], "mnist_softmax");
  EXPECT_EQ(r["steps"], 4);
  EXPECT_EQ(r["warmup"], 1);
  EXPECT_EQ(r["batch_size"], 8);
  EXPECT_EQ(r["world_size"], 1);
  EXPECT_EQ(r["device_choice"], "cpu");  // report_extra passes through
  EXPECT_GT(r["images_per_sec"].get<double>(), 0);
  EXPECT_GT(r["load_ms"].get<double>(), 0);
  EXPECT_TRUE(std::isfinite(r["final_loss"].get<double>()));
}

TEST_F(TrainerTest, SavingAndResumingContinueTheRunBitForBit) {
  TrainOptions straight = Options(6);
  straight.save = dir_ + "/six.st";
  ASSERT_TRUE(Run(straight).ok());
  TrainOptions first = Options(3);
  first.save = dir_ + "/three.st";
  ASSERT_TRUE(Run(first).ok());
  TrainOptions rest = Options(3);
  rest.resume = first.save;
  rest.save = dir_ + "/resumed.st";
  std::string printed;
  ASSERT_TRUE(Run(rest, &printed).ok());
  EXPECT_NE(printed.find("at step 3"), std::string::npos) << printed;
  EXPECT_EQ(Contents(rest.save), Contents(straight.save));
  // A resume that continues it differently (another step count) ends elsewhere.
  TrainOptions longer = Options(4);
  longer.resume = first.save;
  longer.save = dir_ + "/seven.st";
  ASSERT_TRUE(Run(longer).ok());
  EXPECT_NE(Contents(longer.save), Contents(straight.save));
}

TEST_F(TrainerTest, RefusesOutputsItReadsOrSharesBeforeRunning) {
  TrainOptions onto_plan = Options(2);
  onto_plan.save = plan_path_;
  Status status = Run(onto_plan);
  EXPECT_EQ(status.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(status.message().find("is the plan"), std::string::npos) << status.message();
  TrainOptions same = Options(2);
  same.save = same.report = dir_ + "/out";
  status = Run(same);
  EXPECT_EQ(status.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(status.message().find("name the same file"), std::string::npos) << status.message();
  EXPECT_NE(access((dir_ + "/out").c_str(), F_OK), 0) << "nothing was written";
  TrainOptions nowhere = Options(2);
  nowhere.save = dir_ + "/no/such/dir/x.st";
  EXPECT_EQ(Run(nowhere).code(), ErrorCode::kIo);
}

TEST_F(TrainerTest, AMissingCheckpointIsNamedBeforeAnyStep) {
  TrainOptions o = Options(2);
  o.resume = dir_ + "/missing.st";
  Status status = Run(o);
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("missing.st"), std::string::npos) << status.message();
}

TEST(TracePathOfTest, OneFilePerRankBeforeTheExtension) {
  EXPECT_EQ(TracePathOf("t.json", 0, 1), "t.json");
  EXPECT_EQ(TracePathOf("t.json", 1, 2), "t.rank1.json");
  EXPECT_EQ(TracePathOf("dir.d/trace", 0, 2), "dir.d/trace.rank0");
  EXPECT_EQ(TracePathOf(".trace", 1, 2), ".trace.rank1");
}

}  // namespace
}  // namespace graphc::runtime
