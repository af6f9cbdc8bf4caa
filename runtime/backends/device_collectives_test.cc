// Tests of the device collectives (Backend::NewCollectives): the CPU has
// none and says why; on a CUDA device (skipped, with the reason, where there
// is none) NCCL joins a job of one rank and reduces device buffers in place,
// ordered with the compute stream, with the wire conversions rounding as the
// host communicator's do. Several ranks need several GPUs (NCCL refuses two
// ranks on one): data-parallel.test covers the ranks' agreement on the CPU.
// With one rank a mean does not scale, so the scaling kernels run only in
// multi-GPU jobs.

#include <cstring>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/core/backend.h"
#include "runtime/backends/backend_factory.h"
#include "runtime/comm/communicator.h"
#include "contract/half_float.h"

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

// Both streams wait for each other: each step the compute stream writes new
// values into the bucket just before the allreduce starts (the transfer must
// see them), and copies the bucket just after Wait (the copy must see the
// transfer's result: here the values rounded through the bf16 wire).
TEST_F(CudaCollectivesTest, StreamsWaitForEachOther) {
  const size_t n = size_t{1} << 22;
  DeviceMemory d = Upload(std::vector<float>(n, 0.0f));
  DeviceMemory copy = Upload(std::vector<float>(n, 0.0f));
  for (int step = 1; step <= 3; ++step) {
    std::vector<float> values(n);
    for (size_t k = 0; k < n; ++k) values[k] = step + static_cast<float>(k % 1000) * 1e-4f;
    DeviceMemory source = Upload(values);
    ASSERT_TRUE(backend_->CopyOnDevice(d, source, d.bytes, Stream::kCompute).ok());
    StatusOr<int64_t> handle = collectives_->StartAllreduce(
        "bucket", {{d.address, fb::DType::F32, n}}, Reduction::kMean, fb::DType::BF16);
    ASSERT_TRUE(handle.ok()) << handle.status().ToString();
    ASSERT_TRUE(collectives_->Wait(*handle).ok());
    ASSERT_TRUE(backend_->CopyOnDevice(copy, d, d.bytes, Stream::kCompute).ok());
    std::vector<float> seen = Download<float>(copy);
    for (size_t k = 0; k < n; k += 4097)
      ASSERT_EQ(seen[k], Float(Bf16ToF32Bits(F32ToBf16Bits(Bits(values[k]))))) << step << " " << k;
  }
}

// Buckets of growing F32 size on a half wire regrow the device staging
// buffer; several in flight at once; Finalize after all of them.
TEST_F(CudaCollectivesTest, GrowingBucketsThenFinalize) {
  std::vector<DeviceMemory> buckets;
  std::vector<std::vector<float>> values;
  for (size_t n : {1000, 100000, 3000000}) {
    values.emplace_back(n);
    for (size_t k = 0; k < n; ++k) values.back()[k] = 0.5f + static_cast<float>(k % 77) / 3;
    buckets.push_back(Upload(values.back()));
  }
  std::vector<int64_t> handles;
  for (size_t b = 0; b < buckets.size(); ++b) {
    StatusOr<int64_t> handle = collectives_->StartAllreduce(
        "bucket " + std::to_string(b), {{buckets[b].address, fb::DType::F32, values[b].size()}},
        Reduction::kSum, fb::DType::F16);
    ASSERT_TRUE(handle.ok()) << handle.status().ToString();
    handles.push_back(*handle);
  }
  for (auto it = handles.rbegin(); it != handles.rend(); ++it)
    ASSERT_TRUE(collectives_->Wait(*it).ok());
  for (size_t b = 0; b < buckets.size(); ++b) {
    std::vector<float> seen = Download<float>(buckets[b]);
    for (size_t k = 0; k < seen.size(); k += 997)
      ASSERT_EQ(seen[k], Float(F16ToF32Bits(F32ToF16Bits(Bits(values[b][k]))))) << b << " " << k;
  }
  EXPECT_TRUE(collectives_->Finalize().ok());
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
