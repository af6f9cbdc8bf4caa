// Tests of the device collectives (Backend::NewCollectives): the CPU has
// none and says why; on a CUDA device (skipped, with the reason, where there
// is none) NCCL joins a job of one rank and reduces device buffers in place,
// ordered with the compute stream, with the wire conversions rounding as the
// host communicator's do. Several ranks need several GPUs (NCCL refuses two
// ranks on one): data-parallel.test covers the ranks' agreement on the CPU.

#include <cstring>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/backend.h"
#include "runtime/backend_factory.h"
#include "runtime/comm/communicator.h"
#include "runtime/half_float.h"

namespace graphc::runtime {
namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
float Float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

TEST(DeviceCollectivesTest, TheCpuHasNone) {
  BackendOptions options;
  options.cpu_threads = 1;
  StatusOr<CreatedBackend> cpu = CreateBackend(DeviceKind::kCpu, options);
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  StatusOr<std::unique_ptr<DeviceCollectives>> made = cpu->backend->NewCollectives({}, false);
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(made.status().message().find("host memory"), std::string::npos);
}

class CudaCollectivesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (Status available = CudaAvailable(); !available.ok())
      GTEST_SKIP() << "cuda: " << available.message();
    StatusOr<CreatedBackend> created = CreateBackend(DeviceKind::kCuda, {});
    ASSERT_TRUE(created.ok()) << created.status().ToString();
    backend_ = std::move(created->backend);
    StatusOr<std::unique_ptr<DeviceCollectives>> made = backend_->NewCollectives({}, false);
    if (!made.ok() && made.status().code() == ErrorCode::kUnsupported)
      GTEST_SKIP() << made.status().message();
    // A build with NCCL on a GPU machine must find the library.
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    collectives_ = std::move(*made);
    comm_ = NewSingleRankCommunicator();
    ASSERT_TRUE(collectives_->Join(*comm_).ok());
  }
  void TearDown() override {
    for (DeviceMemory m : allocations_) backend_->Free(m);
  }
  template <typename T>
  DeviceMemory Upload(const std::vector<T>& values) {
    StatusOr<DeviceMemory> m = backend_->Allocate(values.size() * sizeof(T));
    EXPECT_TRUE(m.ok());
    allocations_.push_back(*m);
    EXPECT_TRUE(backend_->CopyToDevice(*m, 0, values.data(), m->bytes).ok());
    return *m;
  }
  template <typename T>
  std::vector<T> Download(DeviceMemory m) {
    std::vector<T> values(m.bytes / sizeof(T));
    EXPECT_TRUE(backend_->CopyToHost(values.data(), m, 0, m.bytes).ok());
    return values;
  }

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<DeviceCollectives> collectives_;
  std::vector<DeviceMemory> allocations_;
};

// One rank: a sum or mean leaves every dtype as it is; an F32 tensor on a
// half wire comes back rounded through it (on the device, as the host
// communicator rounds).
TEST_F(CudaCollectivesTest, OneRankReducesInPlace) {
  EXPECT_NE(collectives_->Describe().find("nccl 2."), std::string::npos) << collectives_->Describe();
  const std::vector<float> f = {0.1f, -3.0f, 1e-8f, 65519.0f, 1.0f / 3};
  const std::vector<uint16_t> h = {F32ToF16Bits(Bits(1.5f)), F32ToF16Bits(Bits(-0.25f))};
  const std::vector<uint16_t> b = {F32ToBf16Bits(Bits(2.5f)), F32ToBf16Bits(Bits(-7.0f))};
  const std::vector<int32_t> i = {3, -4, 1 << 30};
  const std::vector<uint8_t> flags = {0, 1, 1, 0};
  for (fb::DType wire : {fb::DType::F32, fb::DType::F16, fb::DType::BF16}) {
    for (Reduction reduction : {Reduction::kSum, Reduction::kMean}) {
      DeviceMemory df = Upload(f), dh = Upload(h), db = Upload(b), di = Upload(i),
                   dflags = Upload(flags);
      std::vector<CommTensor> tensors = {{df.address, fb::DType::F32, f.size()},
                                         {dh.address, fb::DType::F16, h.size()},
                                         {db.address, fb::DType::BF16, b.size()}};
      if (reduction == Reduction::kSum) {  // integers have no mean
        tensors.push_back({di.address, fb::DType::I32, i.size()});
        tensors.push_back({dflags.address, fb::DType::I1, flags.size()});
      }
      StatusOr<int64_t> handle = collectives_->StartAllreduce("bucket", tensors, reduction, wire);
      ASSERT_TRUE(handle.ok()) << handle.status().ToString();
      ASSERT_TRUE(collectives_->Wait(*handle).ok());
      EXPECT_EQ(collectives_->Wait(*handle).code(), ErrorCode::kInvalidArgument);
      ASSERT_TRUE(backend_->Synchronize().ok());
      std::vector<float> expected = f;
      for (float& x : expected) {
        if (wire == fb::DType::F16) x = Float(F16ToF32Bits(F32ToF16Bits(Bits(x))));
        if (wire == fb::DType::BF16) x = Float(Bf16ToF32Bits(F32ToBf16Bits(Bits(x))));
      }
      EXPECT_EQ(Download<float>(df), expected) << static_cast<int>(wire);
      EXPECT_EQ(Download<uint16_t>(dh), h);
      EXPECT_EQ(Download<uint16_t>(db), b);
      EXPECT_EQ(Download<uint8_t>(dflags), flags);
      EXPECT_EQ(Download<int32_t>(di), i);
    }
  }
}

// The compute stream waits for the allreduce: a copy enqueued after Wait
// sees the reduced values (here: rounded through the wire).
TEST_F(CudaCollectivesTest, ComputeStreamWaitsForTheTransfer) {
  std::vector<float> big(1 << 22);
  for (size_t k = 0; k < big.size(); ++k) big[k] = 1.0f + static_cast<float>(k % 1000) * 1e-4f;
  DeviceMemory d = Upload(big), copy = Upload(std::vector<float>(big.size(), 0.0f));
  for (int step = 0; step < 3; ++step) {
    StatusOr<int64_t> handle = collectives_->StartAllreduce(
        "bucket", {{d.address, fb::DType::F32, big.size()}}, Reduction::kMean, fb::DType::BF16);
    ASSERT_TRUE(handle.ok()) << handle.status().ToString();
    ASSERT_TRUE(collectives_->Wait(*handle).ok());
    ASSERT_TRUE(backend_->CopyOnDevice(copy, d, d.bytes, Stream::kCompute).ok());
  }
  std::vector<float> seen = Download<float>(copy);
  for (size_t k = 0; k < big.size(); k += 4097)
    ASSERT_EQ(seen[k], Float(Bf16ToF32Bits(F32ToBf16Bits(Bits(big[k]))))) << k;
}

TEST_F(CudaCollectivesTest, RefusesBadCallsAndSharedDevices) {
  DeviceMemory d = Upload(std::vector<int32_t>{1, 2});
  StatusOr<int64_t> mean_of_ints = collectives_->StartAllreduce(
      "ints", {{d.address, fb::DType::I32, 2}}, Reduction::kMean, fb::DType::F32);
  EXPECT_EQ(mean_of_ints.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(collectives_->Wait(12345).code(), ErrorCode::kInvalidArgument);
  StatusOr<std::unique_ptr<DeviceCollectives>> shared = backend_->NewCollectives({}, true);
  EXPECT_EQ(shared.status().code(), ErrorCode::kUnavailable);
  EXPECT_TRUE(collectives_->Finalize().ok());
  StatusOr<int64_t> after = collectives_->StartAllreduce(
      "late", {{d.address, fb::DType::I32, 2}}, Reduction::kSum, fb::DType::F32);
  EXPECT_EQ(after.status().code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace graphc::runtime
