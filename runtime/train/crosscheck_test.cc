// Crosscheck on a small ResNet's plan (batch norm, residual adds, pooling,
// fused kernels; from ctest's gradient-check plans) between two CPU
// backends: every command agrees; and against a CPU backend that computes
// one command wrongly: that command, and only it, is reported, however far
// its error would have travelled through the step.

#include "runtime/train/crosscheck.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>

#include "runtime/backends/cpu/cpu_backend.h"

namespace graphc::runtime {
namespace {

// The resnet_tiny plan of GRAPHC_GRADCHECK_PLANS, or "".
std::string ResnetPlan() {
  const char* plans = std::getenv("GRAPHC_GRADCHECK_PLANS");
  if (plans == nullptr) return "";
  std::stringstream list(plans);
  std::string path;
  while (std::getline(list, path, ':'))
    if (path.find("resnet_tiny_fused") != std::string::npos) return path;
  return "";
}

// A CPU backend that adds `delta` to the first element of the first output
// of its `nth` run of `op` (the device under test, wrong in one place).
class WrongOnce : public Backend {
 public:
  // Where the wrong value goes: the output, just past its end, or the
  // command's second input (which it must not write).
  enum class Where { kOutput, kPastOutput, kSecondInput };
  WrongOnce(fb::Opcode op, int nth, float delta, Where where = Where::kOutput)
      : cpu_(CreateCpuBackend(1)), op_(op), nth_(nth), delta_(delta), where_(where) {}
  const char* name() const override { return "wrong-once"; }
  std::vector<fb::Target> targets() const override { return cpu_->targets(); }
  bool asynchronous() const override { return false; }
  StatusOr<DeviceMemory> Allocate(uint64_t bytes) override { return cpu_->Allocate(bytes); }
  void Free(DeviceMemory m) override { cpu_->Free(m); }
  StatusOr<HostMemory> AllocateHost(uint64_t bytes) override { return cpu_->AllocateHost(bytes); }
  void FreeHost(HostMemory m) override { cpu_->FreeHost(m); }
  Status CopyToDevice(DeviceMemory d, uint64_t o, const void* s, uint64_t n) override {
    return cpu_->CopyToDevice(d, o, s, n);
  }
  Status CopyToHost(void* d, DeviceMemory s, uint64_t o, uint64_t n) override {
    return cpu_->CopyToHost(d, s, o, n);
  }
  Status CopyToDeviceAsync(DeviceMemory d, HostMemory s, uint64_t n, Stream st) override {
    return cpu_->CopyToDeviceAsync(d, s, n, st);
  }
  Status CopyToHostAsync(HostMemory d, DeviceMemory s, uint64_t n, Stream st) override {
    return cpu_->CopyToHostAsync(d, s, n, st);
  }
  Status CopyOnDevice(DeviceMemory d, DeviceMemory s, uint64_t n, Stream st) override {
    return cpu_->CopyOnDevice(d, s, n, st);
  }
  StatusOr<Event> CreateEvent(bool timed) override { return cpu_->CreateEvent(timed); }
  void DestroyEvent(Event e) override { cpu_->DestroyEvent(e); }
  Status RecordEvent(Event e, Stream s) override { return cpu_->RecordEvent(e, s); }
  Status WaitEvent(Stream s, Event e) override { return cpu_->WaitEvent(s, e); }
  Status SynchronizeEvent(Event e) override { return cpu_->SynchronizeEvent(e); }
  StatusOr<double> ElapsedMilliseconds(Event a, Event b) override {
    return cpu_->ElapsedMilliseconds(a, b);
  }
  Status LoadKernels(const Plan& plan) override { return cpu_->LoadKernels(plan); }
  Status Synchronize() override { return cpu_->Synchronize(); }
  StatusOr<uint64_t> CountNonFinite(DeviceMemory m, fb::DType t) override {
    return cpu_->CountNonFinite(m, t);
  }
  Status Run(const fb::Command& command, const DeviceMemory* operands) override {
    Status status = cpu_->Run(command, operands);
    if (status.ok() && command.op() == op_ && seen_++ == nth_) {
      const DeviceMemory& out = operands[command.inputs()->size()];
      if (where_ == Where::kPastOutput) {
        // Every bit of four bytes flipped: exactly four bytes change.
        uint8_t* past = static_cast<uint8_t*>(out.address) + out.bytes + 32;
        for (int i = 0; i < 4; ++i) past[i] ^= 0xff;
        return status;
      }
      float* at = static_cast<float*>(out.address);
      if (where_ == Where::kSecondInput) at = static_cast<float*>(operands[1].address);
      *at += delta_;
    }
    return status;
  }

 private:
  std::unique_ptr<Backend> cpu_;
  fb::Opcode op_;
  int nth_, seen_ = 0;
  float delta_;
  Where where_;
};

class CrosscheckTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = ResnetPlan();
    if (path.empty()) GTEST_SKIP() << "GRAPHC_GRADCHECK_PLANS is not set (run through ctest)";
    StatusOr<std::unique_ptr<Plan>> plan = Plan::FromFile(path);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    plan_ = std::move(*plan);
  }
  const fb::Program* TrainStep() const {
    for (const fb::Program* program : *plan_->root().programs())
      if (StringOf(program->name()) == "train_step") return program;
    return nullptr;
  }
  // train_step's commands that are not collectives.
  size_t Commands() const {
    size_t n = 0;
    for (const fb::Command* c : *TrainStep()->commands()) n += !IsCollective(c->op());
    return n;
  }
  // The index in train_step of the `nth` command of `op`.
  uint32_t NthOf(fb::Opcode op, int nth) const {
    const auto& commands = *TrainStep()->commands();
    uint32_t c = 0;
    for (int seen = 0; c < commands.size(); ++c)
      if (commands.Get(c)->op() == op && seen++ == nth) break;
    return c;
  }
  static int Failures(const CrosscheckResult& result) {
    int failures = 0;
    for (const CommandCheck& c : result.commands) failures += !c.ok();
    return failures;
  }
  std::unique_ptr<Plan> plan_;
};

TEST_F(CrosscheckTest, TwoCpuBackendsAgreeOnEveryCommand) {
  std::unique_ptr<Backend> one = CreateCpuBackend(1), two = CreateCpuBackend(2);
  StatusOr<CrosscheckResult> result = Crosscheck(*plan_, *one, *two, {});
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  ASSERT_EQ(result->commands.size(), Commands());
  EXPECT_GT(result->commands.size(), 50u);
  EXPECT_EQ(result->first_failure(), -1);
  bool library = false, kernel = false;
  for (const CommandCheck& c : result->commands) {
    EXPECT_TRUE(c.ok()) << c.command << " " << c.what << " " << c.difference;
    EXPECT_GT(c.elements, 0u) << c.what;
    EXPECT_EQ(c.tolerance, CrosscheckTolerance(c.dtype));
    library |= c.what.rfind("Conv2d", 0) == 0;
    kernel |= c.what.rfind("kernel ", 0) == 0;
  }
  EXPECT_TRUE(library && kernel);
  EXPECT_TRUE(std::isfinite(result->reference_loss));
  EXPECT_FLOAT_EQ(result->reference_loss, result->device_loss);
}

// The wrong command is named with how wrong it is, and the commands after
// it, which read its output, still agree: each runs from the reference's
// inputs.
TEST_F(CrosscheckTest, NamesTheOneCommandComputedWrongly) {
  for (fb::Opcode op : {fb::Opcode::Conv2dBackwardData, fb::Opcode::Kernel}) {
    std::unique_ptr<Backend> cpu = CreateCpuBackend(1);
    WrongOnce wrong(op, 1, 0.5f);
    StatusOr<CrosscheckResult> result = Crosscheck(*plan_, *cpu, wrong, {});
    ASSERT_TRUE(result.ok()) << result.status().ToString();
    const int64_t first = result->first_failure();
    ASSERT_GE(first, 0) << fb::EnumNameOpcode(op);
    const CommandCheck& bad = result->commands[first];
    EXPECT_EQ(bad.command, NthOf(op, 1));
    EXPECT_EQ(bad.worst_element, 0);
    EXPECT_NEAR(bad.device_value - bad.reference_value, 0.5, 1e-3);
    EXPECT_GT(bad.difference, bad.tolerance);
    EXPECT_FALSE(bad.output.empty());
    EXPECT_EQ(Failures(*result), 1) << "the error stayed in its command";
  }
}

// A non-finite value on one side only fails at any tolerance.
TEST_F(CrosscheckTest, ANanOnOneSideIsAMismatch) {
  std::unique_ptr<Backend> cpu = CreateCpuBackend(1);
  WrongOnce wrong(fb::Opcode::Kernel, 0, std::nanf(""));
  CrosscheckOptions options;
  options.tolerance = 1e30;
  StatusOr<CrosscheckResult> result = Crosscheck(*plan_, *cpu, wrong, options);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  const int64_t first = result->first_failure();
  ASSERT_GE(first, 0);
  EXPECT_EQ(result->commands[first].mismatches, 1u);
  EXPECT_EQ(result->commands[first].worst_element, 0);
  EXPECT_TRUE(std::isnan(result->commands[first].device_value));
}

// A command that writes past the end of its output (into a buffer that a
// later command reads, or would read) is named, though its outputs agree.
TEST_F(CrosscheckTest, NamesACommandThatWritesPastItsOutput) {
  std::unique_ptr<Backend> cpu = CreateCpuBackend(1);
  WrongOnce wrong(fb::Opcode::Kernel, 2, 1.0f, WrongOnce::Where::kPastOutput);
  StatusOr<CrosscheckResult> result = Crosscheck(*plan_, *cpu, wrong, {});
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  const int64_t first = result->first_failure();
  ASSERT_GE(first, 0);
  const CommandCheck& bad = result->commands[first];
  EXPECT_EQ(bad.mismatches, 0u);
  EXPECT_LE(bad.difference, bad.tolerance);
  EXPECT_EQ(bad.stray_bytes, 4u);
  EXPECT_NE(bad.stray.find("wrong-once: 4 bytes changed after "), std::string::npos) << bad.stray;
  EXPECT_NE(bad.stray.find("(the first 32 bytes past its end)"), std::string::npos) << bad.stray;
  EXPECT_EQ(Failures(*result), 1);
}

// A command that changes memory it does not own, far from its outputs (here
// the first convolution's filter, a parameter), is found where the changed
// buffer is read next: the device's copy of that input no longer matches.
TEST_F(CrosscheckTest, FindsAnInputChangedSinceItWasWritten) {
  std::unique_ptr<Backend> cpu = CreateCpuBackend(1);
  WrongOnce wrong(fb::Opcode::Conv2d, 0, 1.0f, WrongOnce::Where::kSecondInput);
  StatusOr<CrosscheckResult> result = Crosscheck(*plan_, *cpu, wrong, {});
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  const int64_t first = result->first_failure();
  ASSERT_GE(first, 0);
  const CommandCheck& bad = result->commands[first];
  EXPECT_GT(bad.command, 0u);
  EXPECT_EQ(bad.stray_bytes, 0u);
  EXPECT_EQ(bad.stale_inputs, 1u);
  // The filter was copied in before the convolution, which changed it.
  const std::string c = std::to_string(NthOf(fb::Opcode::Conv2d, 0));
  EXPECT_NE(bad.stale.find("copied in before command " + c + ", changed since by one of commands " +
                           c + " to " + std::to_string(bad.command - 1)),
            std::string::npos)
      << bad.stale;
  EXPECT_LE(bad.difference, bad.tolerance) << "its output is right: its inputs came afresh";
}

}  // namespace
}  // namespace graphc::runtime
