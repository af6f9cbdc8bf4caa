// Checkpoints refuse non-finite state in both directions, on the real
// executor over a plan graphc compiled (GRAPHC_TEST_PLAN, from ctest): a save
// of a diverged state leaves the last good file as it was; the device counts
// NaN and infinity in every float format.

#include "runtime/train/checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "runtime/core/backend.h"
#include "runtime/backends/cpu/cpu_backend.h"

namespace graphc::runtime {
namespace {

std::vector<char> Contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(CheckpointTest, NonFiniteStateIsNeverSavedOverAGoodCheckpoint) {
  const char* path = std::getenv("GRAPHC_TEST_PLAN");
  if (path == nullptr) GTEST_SKIP() << "GRAPHC_TEST_PLAN is not set (run through ctest)";
  StatusOr<std::unique_ptr<Plan>> plan = Plan::FromFile(path);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  std::unique_ptr<Backend> backend = CreateCpuBackend(1);
  StatusOr<std::unique_ptr<Executor>> created = Executor::Create(**plan, *backend);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  Executor& exec = **created;
  ASSERT_TRUE(exec.InitializeState(1).ok());

  char dir[] = "/tmp/graphc-checkpoint-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string file = std::string(dir) + "/state.safetensors";
  ASSERT_TRUE(SaveCheckpoint(exec, file, {{"format", "pt"}}).ok());
  const std::vector<char> good = Contents(file);
  ASSERT_FALSE(good.empty());
  EXPECT_TRUE(exec.CheckStateFinite().ok());

  // One infinity in the bias.
  int32_t bias = -1;
  for (const fb::State* s : *(*plan)->root().states())
    if (StringOf(exec.buffer(s->buffer()).name()) == "fc.bias") bias = s->buffer();
  ASSERT_GE(bias, 0);
  std::vector<float> values(exec.buffer(bias).size() / 4, 0.5f);
  values[3] = std::numeric_limits<float>::infinity();
  ASSERT_TRUE(exec.Write(bias, values.data(), values.size() * 4).ok());
  Status finite = exec.CheckStateFinite();
  EXPECT_EQ(finite.code(), ErrorCode::kNonFinite);
  EXPECT_NE(finite.message().find("'fc.bias' holds 1 NaN or infinite"), std::string::npos)
      << finite.message();
  Status saved = SaveCheckpoint(exec, file, {{"format", "pt"}});
  EXPECT_EQ(saved.code(), ErrorCode::kNonFinite);
  EXPECT_NE(saved.message().find("fc.bias"), std::string::npos) << saved.message();
  EXPECT_EQ(Contents(file), good);

  // The good file loads back and clears the state.
  ASSERT_TRUE(LoadCheckpoint(exec, file).ok());
  EXPECT_TRUE(exec.CheckStateFinite().ok());
  unlink(file.c_str());
  rmdir(dir);
}

TEST(CheckpointTest, TheDeviceCountsNaNAndInfinityInEveryFloatFormat) {
  std::unique_ptr<Backend> backend = CreateCpuBackend(2);
  // 2^17 values, enough for the threaded path; NaN, +-inf planted, and the
  // largest finite values and denormals that must not count.
  const int64_t n = int64_t{1} << 17;
  StatusOr<DeviceMemory> memory = backend->Allocate(n * 4);
  ASSERT_TRUE(memory.ok());
  std::vector<float> f32(n, 1.0f);
  f32[0] = std::nanf("");
  f32[n / 2] = -std::numeric_limits<float>::infinity();
  f32[n - 1] = std::numeric_limits<float>::infinity();
  f32[7] = std::numeric_limits<float>::max();
  f32[8] = std::numeric_limits<float>::denorm_min();
  ASSERT_TRUE(backend->CopyToDevice(*memory, 0, f32.data(), n * 4).ok());
  EXPECT_EQ(*backend->CountNonFinite(*memory, fb::DType::F32), 3u);
  EXPECT_EQ(*backend->CountNonFinite(*memory, fb::DType::I32), 0u);
  // f16: 0x7c00 inf, 0x7e00 NaN, 0x7bff the largest finite; bf16: 0x7f80 inf.
  std::vector<uint16_t> half(2 * n, 0x3c00);
  half[0] = 0x7c00, half[1] = 0xfe00, half[2] = 0x7bff;
  ASSERT_TRUE(backend->CopyToDevice(*memory, 0, half.data(), n * 4).ok());
  EXPECT_EQ(*backend->CountNonFinite(*memory, fb::DType::F16), 2u);
  std::vector<uint16_t> bf16(2 * n, 0x3f80);
  bf16[5] = 0x7f80, bf16[6] = 0x7fc1, bf16[7] = 0x7f7f;
  ASSERT_TRUE(backend->CopyToDevice(*memory, 0, bf16.data(), n * 4).ok());
  EXPECT_EQ(*backend->CountNonFinite(*memory, fb::DType::BF16), 2u);
  backend->Free(*memory);
}

}  // namespace
}  // namespace graphc::runtime
