// Tests of the communicator: the half-type arithmetic, the single-rank
// communicator, and, when started by mpirun (the CTest entry
// comm-mpi-unittests runs it on 2 ranks), the MPI communicator's collectives
// with rank-dependent inputs and exact expected results. Run plainly, the MPI
// tests skip. Every rank runs every test in the same order, so a test's
// collectives match across ranks; the assertions never skip a collective,
// since a rank that did would leave the others waiting until the timeout.

#include "runtime/comm/communicator.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "runtime/comm/wire_format.h"

namespace graphc::runtime {
namespace {

using comm::Bf16ToFloat;
using comm::FloatToBf16;
using comm::FloatToHalf;
using comm::HalfToFloat;

// The MPI communicator when this process runs under mpirun, else null.
Communicator* g_mpi = nullptr;

float Pow2(int e) { return std::ldexp(1.0f, e); }

// ---- the half types ------------------------------------------------------------

TEST(WireFormatTest, HalfRoundsToNearestEven) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(1.0f + Pow2(-11)), 0x3c00);      // a tie: down to even
  EXPECT_EQ(FloatToHalf(1.0f + 3 * Pow2(-11)), 0x3c02);  // a tie: up to even
  EXPECT_EQ(FloatToHalf(1.0f + Pow2(-11) + Pow2(-20)), 0x3c01);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);  // rounds past the largest half
  EXPECT_EQ(FloatToHalf(-1e10f), 0xfc00);
  EXPECT_EQ(FloatToHalf(Pow2(-14)), 0x0400);  // the smallest normal
  EXPECT_EQ(FloatToHalf(Pow2(-24)), 0x0001);  // the smallest subnormal
  EXPECT_EQ(FloatToHalf(Pow2(-25)), 0x0000);  // a tie: down to even (zero)
  EXPECT_EQ(FloatToHalf(3 * Pow2(-25)), 0x0002);
  EXPECT_EQ(FloatToHalf(Pow2(-14) - Pow2(-25)), 0x0400);  // subnormal rounding up to normal
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(INFINITY), 0x7c00);
  const uint16_t nan = FloatToHalf(NAN);
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x3ff, 0);
  for (uint32_t h = 0; h < 0x10000; ++h) {  // every half survives the round trip
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToHalf(f), h) << std::hex << h;
  }
  EXPECT_EQ(HalfToFloat(0x0001), Pow2(-24));
  EXPECT_EQ(HalfToFloat(0x3c01), 1.0f + Pow2(-10));
  EXPECT_TRUE(std::isinf(HalfToFloat(0xfc00)) && HalfToFloat(0xfc00) < 0);
}

TEST(WireFormatTest, Bf16RoundsToNearestEven) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBf16(1.0f + Pow2(-8)), 0x3f80);      // a tie: down to even
  EXPECT_EQ(FloatToBf16(1.0f + 3 * Pow2(-8)), 0x3f82);  // a tie: up to even
  EXPECT_EQ(FloatToBf16(1.0f + Pow2(-8) + Pow2(-20)), 0x3f81);
  EXPECT_EQ(FloatToBf16(3.4e38f), 0x7f80);  // rounds past the largest bf16
  EXPECT_EQ(FloatToBf16(-INFINITY), 0xff80);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(NAN))));
  EXPECT_EQ(Bf16ToFloat(0x3f81), 1.0f + Pow2(-7));
}

// The vector (F16C) and scalar paths agree; lengths not multiples of 8 cover
// both in one call.
TEST(WireFormatTest, BulkConversionsMatchTheScalarOnes) {
  std::mt19937 random(7);
  std::vector<float> floats(1003);
  for (float& f : floats) {
    const uint32_t bits = random();
    f = comm::BitsFloat(bits);
    if (std::isnan(f)) f = 1.5f;
    if (random() % 2) {
      f = std::ldexp(static_cast<float>(random() % 100000) / 997.0f - 50,
                     static_cast<int>(random() % 40) - 30);
    }
  }
  std::vector<uint16_t> halves(floats.size());
  comm::FloatsToHalves(floats.data(), halves.data(), floats.size(), 0.5f);
  for (size_t i = 0; i < floats.size(); ++i) {
    ASSERT_EQ(halves[i], FloatToHalf(floats[i] * 0.5f)) << i << " " << floats[i];
  }
  std::vector<uint16_t> all(0x10000);
  for (uint32_t h = 0; h < all.size(); ++h) all[h] = static_cast<uint16_t>(h);
  std::vector<float> back(all.size());
  comm::HalvesToFloats(all.data(), back.data(), all.size(), 1.0f);
  for (uint32_t h = 0; h < all.size(); ++h) {
    const float expected = HalfToFloat(all[h]);
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(back[h]));
    } else {
      ASSERT_EQ(comm::FloatBits(back[h]), comm::FloatBits(expected)) << std::hex << h;
    }
  }
  std::vector<uint16_t> sum(all.rbegin(), all.rend());
  comm::AddHalves(all.data(), sum.data(), all.size());
  for (uint32_t h = 0; h < all.size(); ++h) {
    const float expected = HalfToFloat(all[h]) + HalfToFloat(static_cast<uint16_t>(0xffff - h));
    if (std::isnan(expected)) continue;
    ASSERT_EQ(sum[h], FloatToHalf(expected)) << std::hex << h;
  }
}

// ---- the single-rank communicator --------------------------------------------------

TEST(SingleRankTest, CollectivesLeaveTheDataAsItIs) {
  std::unique_ptr<Communicator> c = NewSingleRankCommunicator();
  EXPECT_EQ(c->rank(), 0);
  EXPECT_EQ(c->size(), 1);
  EXPECT_EQ(c->local_rank(), 0);
  EXPECT_EQ(c->local_size(), 1);
  EXPECT_EQ(c->Describe(), "single process (no MPI)");

  std::vector<float> f = {0.1f, -3.0f, 1e-8f};
  std::vector<uint16_t> h = {FloatToHalf(1.5f), FloatToHalf(-0.25f)};
  const std::vector<float> f0 = f;
  const std::vector<uint16_t> h0 = h;
  for (fb::DType wire : {fb::DType::F32, fb::DType::F16, fb::DType::BF16}) {
    for (Reduction reduction : {Reduction::kSum, Reduction::kMean}) {
      StatusOr<int64_t> handle = c->StartAllreduce(
          "bucket", {{f.data(), fb::DType::F32, f.size()}, {h.data(), fb::DType::F16, h.size()}},
          reduction, wire);
      ASSERT_TRUE(handle.ok()) << handle.status().message();
      EXPECT_TRUE(c->Wait(*handle).ok());
      EXPECT_EQ(c->Wait(*handle).code(), ErrorCode::kInvalidArgument);  // waited already
    }
  }
  EXPECT_EQ(f, f0);
  EXPECT_EQ(h, h0);
  EXPECT_EQ(c->Wait(12345).code(), ErrorCode::kInvalidArgument);
  // The host half of a device allreduce: the arguments checked, nothing moved.
  StatusOr<int64_t> arrival =
      c->StartArrival("device bucket", {{f.data(), fb::DType::F32, f.size()}}, Reduction::kMean,
                      fb::DType::F16);
  ASSERT_TRUE(arrival.ok()) << arrival.status().message();
  EXPECT_TRUE(c->Wait(*arrival).ok());
  EXPECT_EQ(c->Wait(*arrival).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(f, f0);

  std::vector<double> d = {1.5, -2};
  for (ScalarReduction r : {ScalarReduction::kSum, ScalarReduction::kMean, ScalarReduction::kMax,
                            ScalarReduction::kMin}) {
    EXPECT_TRUE(c->AllreduceDoubles("loss", d, r).ok());
    EXPECT_EQ(d, (std::vector<double>{1.5, -2}));
  }
  StatusOr<std::vector<double>> gathered = c->AllgatherDoubles("times", {4, 5});
  ASSERT_TRUE(gathered.ok());
  EXPECT_EQ(*gathered, (std::vector<double>{4, 5}));
  char bytes[3] = {1, 2, 3};
  EXPECT_TRUE(c->Broadcast("state", bytes, sizeof bytes).ok());
  EXPECT_EQ(bytes[2], 3);
  EXPECT_TRUE(c->Barrier("end").ok());
  EXPECT_EQ(c->seconds_waiting(), 0);
  EXPECT_TRUE(c->Finalize().ok());
  EXPECT_EQ(c->Barrier("after").code(), ErrorCode::kInvalidArgument);
}

// Bad arguments fail the same way on every communicator, before any transfer.
void ExpectBadArgumentsRejected(Communicator& c) {
  float f = 1;
  int32_t i = 1;
  auto code = [&](std::vector<CommTensor> tensors, Reduction reduction, fb::DType wire) {
    StatusOr<int64_t> handle = c.StartAllreduce("bad bucket", std::move(tensors), reduction, wire);
    if (handle.ok()) {
      c.Wait(*handle);
      return ErrorCode::kOk;
    }
    EXPECT_NE(handle.status().message().find("bad bucket"), std::string::npos);
    return handle.status().code();
  };
  EXPECT_EQ(code({{nullptr, fb::DType::F32, 4}}, Reduction::kSum, fb::DType::F32),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(code({{&f, fb::DType::F32, 1}}, Reduction::kSum, fb::DType::I32),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(code({{&i, fb::DType::I32, 1}}, Reduction::kMean, fb::DType::F32),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(code({{&f, static_cast<fb::DType>(42), 1}}, Reduction::kSum, fb::DType::F32),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(c.Broadcast("bad broadcast", nullptr, 4).code(), ErrorCode::kInvalidArgument);
  // An arrival is checked as the allreduce it stands for.
  StatusOr<int64_t> arrival =
      c.StartArrival("bad arrival", {{&i, fb::DType::I32, 1}}, Reduction::kMean, fb::DType::F32);
  EXPECT_EQ(arrival.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(arrival.status().message().find("bad arrival"), std::string::npos);
}

TEST(SingleRankTest, RejectsBadArguments) {
  std::unique_ptr<Communicator> c = NewSingleRankCommunicator();
  ExpectBadArgumentsRejected(*c);
}

// A sparse allreduce's bad arguments, on any communicator: no threes, the
// wrong dtypes, more values than dense elements, an index outside its tensor.
void ExpectBadSparseRejected(Communicator& c) {
  std::vector<float> values = {1, 2}, dense(4);
  std::vector<int32_t> indices = {0, 4};  // 4 is past the end
  auto code = [&](std::vector<CommTensor> tensors) {
    StatusOr<int64_t> handle = c.StartSparseAllreduce("bad set", std::move(tensors),
                                                      Reduction::kMean);
    if (handle.ok()) {
      c.Wait(*handle);
      return ErrorCode::kOk;
    }
    EXPECT_NE(handle.status().message().find("bad set"), std::string::npos);
    return handle.status().code();
  };
  const CommTensor v{values.data(), fb::DType::F32, 2}, i{indices.data(), fb::DType::I32, 2},
      d{dense.data(), fb::DType::F32, 4};
  EXPECT_EQ(code({v, i}), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code({v, {indices.data(), fb::DType::F32, 2}, d}), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code({v, i, {dense.data(), fb::DType::F32, 1}}), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code({v, i, d}), ErrorCode::kInvalidArgument);
  StatusOr<int64_t> handle = c.StartSparseAllreduce("bad set", {v, i, d}, Reduction::kSum);
  EXPECT_NE(handle.status().message().find("index 4 at 1, outside its 4 elements"),
            std::string::npos)
      << handle.status().message();
}

TEST(SingleRankTest, SparseAllreduceScattersItsOwnSet) {
  std::unique_ptr<Communicator> c = NewSingleRankCommunicator();
  std::vector<float> values = {0.5f, -2.0f, 7.0f}, dense = {9, 9, 9, 9, 9, 9};
  std::vector<int32_t> indices = {4, 1, -1};  // the set ends at -1: 7 is padding
  std::vector<float> v2 = {3.0f}, dense2(2, 1.0f);
  std::vector<int32_t> i2 = {0};
  StatusOr<int64_t> handle = c->StartSparseAllreduce(
      "sets",
      {{values.data(), fb::DType::F32, 3}, {indices.data(), fb::DType::I32, 3},
       {dense.data(), fb::DType::F32, 6}, {v2.data(), fb::DType::F32, 1},
       {i2.data(), fb::DType::I32, 1}, {dense2.data(), fb::DType::F32, 2}},
      Reduction::kMean);
  ASSERT_TRUE(handle.ok()) << handle.status().message();
  EXPECT_TRUE(c->Wait(*handle).ok());
  EXPECT_EQ(dense, (std::vector<float>{0, -2, 0, 0, 0.5f, 0}));
  EXPECT_EQ(dense2, (std::vector<float>{3, 0}));
  EXPECT_EQ(values, (std::vector<float>{0.5f, -2.0f, 7.0f}));  // left as they were
  ExpectBadSparseRejected(*c);
}

TEST(SingleRankTest, CreateOutsideMpiIsSingleRank) {
  if (InsideMpiJob()) GTEST_SKIP() << "under mpirun Create makes the MPI communicator";
  StatusOr<std::unique_ptr<Communicator>> c = Communicator::Create({});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)->Describe(), "single process (no MPI)");
  CommOptions bad;
  bad.timeout_seconds = 0;
  EXPECT_EQ(Communicator::Create(bad).status().code(), ErrorCode::kInvalidArgument);
}

TEST(TerminationTest, SigtermKeepsItsDefaultActionWithoutMpi) {
  if (InsideMpiJob()) GTEST_SKIP() << "an MPI process should not fork";
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    InstallTerminationHandler();
    raise(SIGTERM);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << status;
}

// ---- the MPI communicator ------------------------------------------------------------

class MpiTest : public testing::Test {
 protected:
  void SetUp() override {
    if (g_mpi == nullptr) {
      GTEST_SKIP() << "not started by mpirun (ctest's comm-mpi-unittests runs these on 2 ranks)";
    }
  }
  Communicator& c() { return *g_mpi; }
  int rank() { return g_mpi->rank(); }
  int size() { return g_mpi->size(); }

  // Starts an allreduce and waits for it; the bucket must be valid.
  void Allreduce(std::vector<CommTensor> tensors, Reduction reduction, fb::DType wire) {
    StatusOr<int64_t> handle =
        c().StartAllreduce("test bucket", std::move(tensors), reduction, wire);
    ASSERT_TRUE(handle.ok()) << handle.status().message();
    Status status = c().Wait(*handle);
    EXPECT_TRUE(status.ok()) << status.message();
  }

  // What the ranks' values `value(r)` reduce to through the half type
  // `to`/`from` (a fold in rank order, rounding after each addition; with the
  // mean, each value is scaled by 1/size before rounding).
  template <typename To, typename From, typename Value>
  float HalfReduce(To to, From from, Value value, Reduction reduction) {
    const float scale = reduction == Reduction::kMean ? 1.0f / size() : 1.0f;
    float sum = from(to(value(0) * scale));
    for (int r = 1; r < size(); ++r) sum = from(to(sum + from(to(value(r) * scale))));
    return sum;
  }

  // `actual` is `expected` from HalfReduce. On 2 ranks exactly; on more, MPI
  // may add in another order, each addition rounding: within one rounding
  // (of a type with `bits` mantissa bits) per addition.
  static testing::AssertionResult HalfSumIs(float actual, float expected, int ranks, int bits) {
    if (actual == expected) return testing::AssertionSuccess();
    int exponent = 0;
    std::frexp(std::max(std::fabs(actual), std::fabs(expected)), &exponent);
    const float ulp = std::ldexp(1.0f, exponent - bits);
    if (ranks > 2 && std::fabs(actual - expected) <= (ranks - 1) * ulp) {
      return testing::AssertionSuccess();
    }
    return testing::AssertionFailure() << actual << " is not " << expected;
  }
};

TEST_F(MpiTest, Describes) {
  EXPECT_GE(size(), 2);
  EXPECT_LT(rank(), size());
  EXPECT_LT(c().local_rank(), c().local_size());
  const std::string text = c().Describe();
  EXPECT_EQ(text.rfind("mpi: " + std::to_string(size()) + " ranks on ", 0), 0u) << text;
  EXPECT_NE(text.find("MPI"), std::string::npos) << text;
}

TEST_F(MpiTest, SumAndMeanOfF32) {
  auto value = [](int r, size_t i) {
    return (r + 1) * 0.5f * static_cast<float>(i % 97) - static_cast<float>(i % 13);
  };
  for (Reduction reduction : {Reduction::kSum, Reduction::kMean}) {
    std::vector<float> a(1000), b(37);  // two small tensors: packed
    std::vector<float> single(5000);    // alone: reduced in place
    std::vector<float> big(300000);     // over 1 MiB: in place, beside a packed one
    for (size_t i = 0; i < a.size(); ++i) a[i] = value(rank(), i);
    for (size_t i = 0; i < b.size(); ++i) b[i] = value(rank(), i + 7);
    for (size_t i = 0; i < single.size(); ++i) single[i] = value(rank(), i);
    for (size_t i = 0; i < big.size(); ++i) big[i] = value(rank(), i);
    Allreduce({{a.data(), fb::DType::F32, a.size()}, {b.data(), fb::DType::F32, b.size()}},
              reduction, fb::DType::F32);
    Allreduce({{single.data(), fb::DType::F32, single.size()}}, reduction, fb::DType::F32);
    std::vector<float> small = b;
    for (size_t i = 0; i < small.size(); ++i) small[i] = value(rank(), i + 7);
    Allreduce({{small.data(), fb::DType::F32, small.size()},
               {big.data(), fb::DType::F32, big.size()}},
              reduction, fb::DType::F32);
    auto expected = [&](size_t i) {
      float sum = 0;  // exact: small multiples of 1/2
      for (int r = 0; r < size(); ++r) sum += value(r, i);
      return reduction == Reduction::kMean ? sum * (1.0f / size()) : sum;
    };
    for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], expected(i)) << i;
    for (size_t i = 0; i < b.size(); ++i) ASSERT_EQ(b[i], expected(i + 7)) << i;
    for (size_t i = 0; i < single.size(); ++i) ASSERT_EQ(single[i], expected(i)) << i;
    for (size_t i = 0; i < small.size(); ++i) ASSERT_EQ(small[i], expected(i + 7)) << i;
    for (size_t i = 0; i < big.size(); ++i) ASSERT_EQ(big[i], expected(i)) << i;
  }
}

TEST_F(MpiTest, SumAndMeanOfF16) {
  auto value = [](int r, size_t i) { return (r + 1) * 0.25f * static_cast<float>(i % 31) - 3; };
  for (Reduction reduction : {Reduction::kSum, Reduction::kMean}) {
    std::vector<uint16_t> a(1001), single(300), big(600000);  // big: over 1 MiB, in place
    for (size_t i = 0; i < a.size(); ++i) a[i] = FloatToHalf(value(rank(), i));
    for (size_t i = 0; i < single.size(); ++i) single[i] = FloatToHalf(value(rank(), i));
    for (size_t i = 0; i < big.size(); ++i) big[i] = FloatToHalf(value(rank(), i));
    Allreduce({{a.data(), fb::DType::F16, 600}, {a.data() + 600, fb::DType::F16, 401}}, reduction,
              fb::DType::F32);
    Allreduce({{single.data(), fb::DType::F16, single.size()}}, reduction, fb::DType::F16);
    Allreduce({{big.data(), fb::DType::F16, big.size()}, {single.data(), fb::DType::F16, 0}},
              reduction, fb::DType::F32);
    for (size_t i = 0; i < big.size(); ++i) {
      const float expected =
          HalfReduce(FloatToHalf, HalfToFloat, [&](int r) { return value(r, i); }, reduction);
      if (i < a.size()) {
        ASSERT_EQ(HalfToFloat(a[i]), expected) << i;
      }
      if (i < single.size()) {
        ASSERT_EQ(HalfToFloat(single[i]), expected) << i;
      }
      ASSERT_EQ(HalfToFloat(big[i]), expected) << i;
    }
  }
  if (size() == 2) {
    // Rounded to nearest even after the addition: 1 + 2^-11 is a tie that
    // rounds down, 1 + 3 * 2^-11 one that rounds up.
    std::vector<uint16_t> ties = {FloatToHalf(rank() == 0 ? 1.0f : Pow2(-11)),
                                  FloatToHalf(rank() == 0 ? 1.0f : 3 * Pow2(-11))};
    Allreduce({{ties.data(), fb::DType::F16, ties.size()}}, Reduction::kSum, fb::DType::F32);
    EXPECT_EQ(ties[0], 0x3c00);
    EXPECT_EQ(ties[1], 0x3c02);
  }
}

TEST_F(MpiTest, SumAndMeanOfBf16) {
  auto value = [](int r, size_t i) { return (r + 1) * 0.5f * static_cast<float>(i % 17) - 1; };
  for (Reduction reduction : {Reduction::kSum, Reduction::kMean}) {
    std::vector<uint16_t> a(777);
    for (size_t i = 0; i < a.size(); ++i) a[i] = FloatToBf16(value(rank(), i));
    Allreduce({{a.data(), fb::DType::BF16, 77}, {a.data() + 77, fb::DType::BF16, 700}}, reduction,
              fb::DType::F32);
    for (size_t i = 0; i < a.size(); ++i) {
      const float expected =
          HalfReduce(FloatToBf16, Bf16ToFloat, [&](int r) { return value(r, i); }, reduction);
      ASSERT_EQ(Bf16ToFloat(a[i]), expected) << i;
    }
  }
  if (size() == 2) {
    std::vector<uint16_t> ties = {FloatToBf16(rank() == 0 ? 1.0f : Pow2(-8)),
                                  FloatToBf16(rank() == 0 ? 1.0f : 3 * Pow2(-8))};
    Allreduce({{ties.data(), fb::DType::BF16, ties.size()}}, Reduction::kSum, fb::DType::F32);
    EXPECT_EQ(ties[0], 0x3f80);
    EXPECT_EQ(ties[1], 0x3f82);
  }
}

// F32 tensors over a half wire: each rank rounds (after scaling, for the
// mean), the sum is rounded after each addition, and the result is widened.
TEST_F(MpiTest, F32OverAHalfWire) {
  auto value = [](int r, size_t i) { return 0.1f * static_cast<float>(i + 1) + 0.013f * r - 7; };
  for (fb::DType wire : {fb::DType::F16, fb::DType::BF16}) {
    for (Reduction reduction : {Reduction::kSum, Reduction::kMean}) {
      std::vector<float> a(2049), single(100);
      for (size_t i = 0; i < a.size(); ++i) a[i] = value(rank(), i);
      for (size_t i = 0; i < single.size(); ++i) single[i] = value(rank(), i);
      Allreduce({{a.data(), fb::DType::F32, 1000}, {a.data() + 1000, fb::DType::F32, 1049}},
                reduction, wire);
      Allreduce({{single.data(), fb::DType::F32, single.size()}}, reduction, wire);
      for (size_t i = 0; i < a.size(); ++i) {
        auto v = [&](int r) { return value(r, i); };
        const float expected = wire == fb::DType::F16
                                   ? HalfReduce(FloatToHalf, HalfToFloat, v, reduction)
                                   : HalfReduce(FloatToBf16, Bf16ToFloat, v, reduction);
        const int bits = wire == fb::DType::F16 ? 11 : 8;
        ASSERT_TRUE(HalfSumIs(a[i], expected, size(), bits)) << comm::CommDTypeName(wire) << i;
        if (i < single.size()) {
          ASSERT_TRUE(HalfSumIs(single[i], expected, size(), bits)) << i;
        }
      }
    }
  }
}

// Several buckets in flight before any wait, waited for out of order, over a
// few steps (the staging buffers are reused and regrown).
TEST_F(MpiTest, SeveralBucketsInFlight) {
  const std::vector<size_t> sizes = {1000, 3 << 20, 17, 100000};
  for (int step = 0; step < 3; ++step) {
    std::vector<std::vector<float>> buckets(sizes.size());
    std::vector<int64_t> handles;
    for (size_t b = 0; b < sizes.size(); ++b) {
      const size_t n = sizes[b] + step * 1000;
      buckets[b].resize(n);
      for (size_t i = 0; i < n; ++i) {
        buckets[b][i] = static_cast<float>((rank() + 1) * (i % 50 + b));
      }
      const size_t half = n / 2;
      StatusOr<int64_t> handle = c().StartAllreduce(
          "bucket " + std::to_string(b),
          {{buckets[b].data(), fb::DType::F32, half},
           {buckets[b].data() + half, fb::DType::F32, n - half}},
          Reduction::kSum, fb::DType::F32);
      ASSERT_TRUE(handle.ok());
      handles.push_back(*handle);
    }
    for (size_t b : {2, 0, 3, 1}) EXPECT_TRUE(c().Wait(handles[b]).ok());
    const float ranks = static_cast<float>(size() * (size() + 1) / 2);
    for (size_t b = 0; b < sizes.size(); ++b) {
      for (size_t i = 0; i < buckets[b].size(); ++i) {
        ASSERT_EQ(buckets[b][i], ranks * static_cast<float>(i % 50 + b)) << b << " " << i;
      }
    }
  }
}

TEST_F(MpiTest, ABucketMixingDtypes) {
  std::vector<float> f1(5), f2(2);
  std::vector<uint16_t> h(7), bf(3);
  std::vector<int32_t> i32(4);
  std::vector<int64_t> i64(6);
  std::vector<uint8_t> i1(8);
  auto fvalue = [](int r, size_t i) { return 0.3f * static_cast<float>(i) + r; };
  for (size_t i = 0; i < f1.size(); ++i) f1[i] = fvalue(rank(), i);
  for (size_t i = 0; i < f2.size(); ++i) f2[i] = fvalue(rank(), i + 10);
  for (size_t i = 0; i < h.size(); ++i) h[i] = FloatToHalf(static_cast<float>(i) * (rank() + 1));
  for (size_t i = 0; i < bf.size(); ++i) bf[i] = FloatToBf16(static_cast<float>(i) - rank());
  for (size_t i = 0; i < i32.size(); ++i) i32[i] = static_cast<int32_t>(i) * 1000 - rank();
  for (size_t i = 0; i < i64.size(); ++i) i64[i] = (int64_t{1} << 40) * (rank() + 1) + i;
  for (size_t i = 0; i < i1.size(); ++i) i1[i] = rank() == 0 ? (i % 2) : (i % 3 == 0);
  Allreduce({{f1.data(), fb::DType::F32, f1.size()},
             {h.data(), fb::DType::F16, h.size()},
             {i32.data(), fb::DType::I32, i32.size()},
             {bf.data(), fb::DType::BF16, bf.size()},
             {i64.data(), fb::DType::I64, i64.size()},
             {i1.data(), fb::DType::I1, i1.size()},
             {f2.data(), fb::DType::F32, f2.size()}},
            Reduction::kSum, fb::DType::F16);
  const int n = size();
  for (size_t i = 0; i < f1.size(); ++i) {
    const float expected =
        HalfReduce(FloatToHalf, HalfToFloat, [&](int r) { return fvalue(r, i); }, Reduction::kSum);
    ASSERT_TRUE(HalfSumIs(f1[i], expected, n, 11)) << i;
  }
  for (size_t i = 0; i < f2.size(); ++i) {
    const float expected = HalfReduce(FloatToHalf, HalfToFloat,
                                      [&](int r) { return fvalue(r, i + 10); }, Reduction::kSum);
    ASSERT_TRUE(HalfSumIs(f2[i], expected, n, 11)) << i;
  }
  for (size_t i = 0; i < h.size(); ++i) {
    ASSERT_EQ(HalfToFloat(h[i]), static_cast<float>(i) * n * (n + 1) / 2) << i;
  }
  for (size_t i = 0; i < bf.size(); ++i) {
    ASSERT_EQ(Bf16ToFloat(bf[i]), static_cast<float>(i) * n - n * (n - 1) / 2.0f) << i;
  }
  for (size_t i = 0; i < i32.size(); ++i) {
    ASSERT_EQ(i32[i], static_cast<int32_t>(i) * 1000 * n - n * (n - 1) / 2) << i;
  }
  for (size_t i = 0; i < i64.size(); ++i) {
    ASSERT_EQ(i64[i], (int64_t{1} << 40) * n * (n + 1) / 2 + static_cast<int64_t>(i) * n) << i;
  }
  for (size_t i = 0; i < i1.size(); ++i) {
    ASSERT_EQ(i1[i], (i % 2 == 1 || i % 3 == 0) ? 1 : 0) << i;
  }
}

TEST_F(MpiTest, ZeroElementTensors) {
  std::vector<float> a = {static_cast<float>(rank()), 1, 2};
  Allreduce({{nullptr, fb::DType::F32, 0}, {a.data(), fb::DType::F32, a.size()},
             {nullptr, fb::DType::F16, 0}},
            Reduction::kSum, fb::DType::F32);
  EXPECT_EQ(a, (std::vector<float>{static_cast<float>(size() * (size() - 1) / 2),
                                   static_cast<float>(size()), 2.0f * size()}));
  Allreduce({{nullptr, fb::DType::BF16, 0}}, Reduction::kMean, fb::DType::F16);
  Allreduce({}, Reduction::kSum, fb::DType::F32);
  std::vector<double> none;
  EXPECT_TRUE(c().AllreduceDoubles("none", none, ScalarReduction::kSum).ok());
  StatusOr<std::vector<double>> gathered = c().AllgatherDoubles("none", {});
  ASSERT_TRUE(gathered.ok());
  EXPECT_TRUE(gathered->empty());
  EXPECT_TRUE(c().Broadcast("nothing", nullptr, 0).ok());
}

// The allreduce runs while the caller computes: rank 1 starts late, rank 0
// computes meanwhile, and finds the work done when it waits.
TEST_F(MpiTest, OverlapsCompute) {
  using Clock = std::chrono::steady_clock;
  std::vector<float> data(4 << 20, static_cast<float>(rank()));
  EXPECT_TRUE(c().Barrier("overlap: start").ok());
  const Clock::time_point start = Clock::now();
  const double waited_before = c().seconds_waiting();
  if (rank() != 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  StatusOr<int64_t> handle = c().StartAllreduce(
      "overlap bucket", {{data.data(), fb::DType::F32, data.size()}}, Reduction::kSum,
      fb::DType::F32);
  ASSERT_TRUE(handle.ok());
  const double start_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (rank() == 0) {
    EXPECT_LT(start_seconds, 0.2) << "StartAllreduce should return at once";
    volatile double sink = 0;  // compute, well past rank 1's arrival
    while (Clock::now() - start < std::chrono::milliseconds(1500)) sink = sink + 1;
  }
  const Clock::time_point wait_start = Clock::now();
  EXPECT_TRUE(c().Wait(*handle).ok());
  const double waited = std::chrono::duration<double>(Clock::now() - wait_start).count();
  if (rank() == 0) EXPECT_LT(waited, 0.5) << "the allreduce should have finished during compute";
  const double counted = c().seconds_waiting() - waited_before;  // Wait's own clock, inside ours
  EXPECT_LE(counted, waited + 1e-3);
  EXPECT_GE(counted, waited * 0.5 - 1e-3);
  const float expected = static_cast<float>(size() * (size() - 1) / 2);
  for (size_t i = 0; i < data.size(); i += 4099) ASSERT_EQ(data[i], expected) << i;
}

// An arrival moves nothing, completes once every rank has started it, and
// keeps its place in the order of collectives between real allreduces.
TEST_F(MpiTest, ArrivalsMoveNothing) {
  const int r = rank();
  std::vector<float> device_bucket(1000, r + 1.0f), host_bucket(10, r + 1.0f);
  for (int step = 0; step < 3; ++step) {
    StatusOr<int64_t> arrival =
        c().StartArrival("device bucket", {{device_bucket.data(), fb::DType::F32, 1000}},
                         Reduction::kMean, fb::DType::F32);
    ASSERT_TRUE(arrival.ok()) << arrival.status().message();
    StatusOr<int64_t> host = c().StartAllreduce(
        "host bucket", {{host_bucket.data(), fb::DType::F32, 10}}, Reduction::kSum, fb::DType::F32);
    ASSERT_TRUE(host.ok()) << host.status().message();
    EXPECT_TRUE(c().Wait(*host).ok());
    EXPECT_TRUE(c().Wait(*arrival).ok());
    EXPECT_EQ(c().Wait(*arrival).code(), ErrorCode::kInvalidArgument);
  }
  for (float v : device_bucket) ASSERT_EQ(v, r + 1.0f);
  const float sum = static_cast<float>(size() * (size() + 1) / 2);
  float expected = r + 1.0f;
  for (int step = 0; step < 3; ++step) expected = step == 0 ? sum : expected * size();
  for (float v : host_bucket) ASSERT_EQ(v, expected);
}

// Each rank sends its own set, of its own size (rank r: r + 1 entries, one
// index shared by all), into two dense tensors; the ranks' sets are summed
// (or averaged), duplicates adding up.
TEST_F(MpiTest, SparseAllreduceSumsTheRanksSets) {
  for (Reduction reduction : {Reduction::kSum, Reduction::kMean}) {
    const int n = 1000;
    std::vector<float> values(8, 0.0f), dense(n, 5.0f), other(3, 5.0f);
    std::vector<int32_t> indices(8, -1);
    for (int j = 0; j <= rank() && j < 7; ++j) {
      indices[j] = j == 0 ? 999 : 10 * rank() + j;  // 999 from every rank
      values[j] = 0.5f * (rank() + 1) + j;
    }
    std::vector<float> ov = {1.0f};
    std::vector<int32_t> oi = {rank() % 3};
    StatusOr<int64_t> handle = c().StartSparseAllreduce(
        "sparse test",
        {{values.data(), fb::DType::F32, 8}, {indices.data(), fb::DType::I32, 8},
         {dense.data(), fb::DType::F32, n}, {ov.data(), fb::DType::F32, 1},
         {oi.data(), fb::DType::I32, 1}, {other.data(), fb::DType::F32, 3}},
        reduction);
    ASSERT_TRUE(handle.ok()) << handle.status().message();
    Status status = c().Wait(*handle);
    ASSERT_TRUE(status.ok()) << status.message();
    // Each value scaled for a mean as it is added, in rank order.
    const float scale = reduction == Reduction::kMean ? 1.0f / size() : 1.0f;
    std::vector<float> want(n, 0.0f), want_other(3, 0.0f);
    for (int r = 0; r < size(); ++r) {
      for (int j = 0; j <= r && j < 7; ++j)
        want[j == 0 ? 999 : 10 * r + j] += (0.5f * (r + 1) + j) * scale;
      want_other[r % 3] += 1.0f * scale;
    }
    for (int i = 0; i < n; ++i) ASSERT_EQ(dense[i], want[i]) << i;
    EXPECT_EQ(other, want_other);
  }
  ExpectBadSparseRejected(c());
}

// Sparse allreduces between dense ones, several in flight: each posts its
// pairs' gather only once its counts are in, at a different moment on each
// rank, while the dense ones keep being posted. (Before the pairs had a
// communicator of their own, the two kinds could be posted in different
// orders on the two ranks, and Open MPI failed with MPI_ERR_TRUNCATE after
// some thousands of them.)
TEST_F(MpiTest, SparseAndDenseAllreducesInterleave) {
  for (int round = 0; round < 300; ++round) {
    std::vector<float> va(3, 1.0f), da(50), vc(2, 2.0f), dc(7);
    std::vector<int32_t> ia = {rank(), 10 + round % 30, -1}, ic = {round % 7, -1};
    if (round % 3 == rank() % 3) ia[2] = 49;  // counts that differ between ranks
    std::vector<float> b(64 + round % 5, static_cast<float>(rank())), d(3, 1.0f);
    std::vector<int64_t> handles;
    auto start = [&](StatusOr<int64_t> h) {
      ASSERT_TRUE(h.ok()) << h.status().message();
      handles.push_back(*h);
    };
    start(c().StartSparseAllreduce("a", {{va.data(), fb::DType::F32, 3},
                                         {ia.data(), fb::DType::I32, 3},
                                         {da.data(), fb::DType::F32, 50}},
                                   Reduction::kSum));
    start(c().StartAllreduce("b", {{b.data(), fb::DType::F32, b.size()}}, Reduction::kSum,
                             fb::DType::F32));
    start(c().StartSparseAllreduce("c", {{vc.data(), fb::DType::F32, 2},
                                         {ic.data(), fb::DType::I32, 2},
                                         {dc.data(), fb::DType::F32, 7}},
                                   Reduction::kMean));
    start(c().StartAllreduce("d", {{d.data(), fb::DType::F32, 3}}, Reduction::kSum,
                             fb::DType::F32));
    for (size_t h = handles.size(); h-- > 0;) ASSERT_TRUE(c().Wait(handles[h]).ok());
    float ranks_sum = 0;
    for (int r = 0; r < size(); ++r) ranks_sum += static_cast<float>(r);
    ASSERT_EQ(b[0], ranks_sum) << round;
    ASSERT_EQ(d[0], static_cast<float>(size())) << round;
    ASSERT_EQ(dc[round % 7], 2.0f) << round;  // every rank sent 2 there: their mean
    float sent49 = 0;
    for (int r = 0; r < size(); ++r) sent49 += round % 3 == r % 3 ? 1.0f : 0.0f;
    ASSERT_EQ(da[49], sent49) << round;
  }
}

TEST_F(MpiTest, DoublesBroadcastAndBarrier) {
  const int n = size(), r = rank();
  std::vector<double> values = {r + 1.0, -r * 1.0, r * 0.5};
  std::vector<double> sum = values, mean = values, max = values, min = values;
  EXPECT_TRUE(c().AllreduceDoubles("sum", sum, ScalarReduction::kSum).ok());
  EXPECT_TRUE(c().AllreduceDoubles("mean", mean, ScalarReduction::kMean).ok());
  EXPECT_TRUE(c().AllreduceDoubles("max", max, ScalarReduction::kMax).ok());
  EXPECT_TRUE(c().AllreduceDoubles("min", min, ScalarReduction::kMin).ok());
  const double ranks = n * (n - 1) / 2.0;
  EXPECT_EQ(sum, (std::vector<double>{ranks + n, -ranks, ranks * 0.5}));
  EXPECT_EQ(mean, (std::vector<double>{(ranks + n) / n, -ranks / n, ranks * 0.5 / n}));
  EXPECT_EQ(max, (std::vector<double>{1.0 * n, 0, (n - 1) * 0.5}));
  EXPECT_EQ(min, (std::vector<double>{1, -(n - 1.0), 0}));

  StatusOr<std::vector<double>> gathered = c().AllgatherDoubles("times", {r * 1.0, r * 10.0});
  ASSERT_TRUE(gathered.ok());
  std::vector<double> expected;
  for (int k = 0; k < n; ++k) {
    expected.push_back(k);
    expected.push_back(k * 10.0);
  }
  EXPECT_EQ(*gathered, expected);

  std::vector<uint8_t> bytes(100003);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = r == 0 ? static_cast<uint8_t>(i * 7) : 0;
  EXPECT_TRUE(c().Broadcast("initial state", bytes.data(), bytes.size()).ok());
  for (size_t i = 0; i < bytes.size(); ++i) ASSERT_EQ(bytes[i], static_cast<uint8_t>(i * 7)) << i;
  EXPECT_TRUE(c().Barrier("barrier").ok());
  EXPECT_GT(c().seconds_waiting(), 0);
}

TEST_F(MpiTest, RejectsBadArguments) {
  ExpectBadArgumentsRejected(c());
  EXPECT_EQ(c().Wait(-1).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(Communicator::Create({}).status().code(), ErrorCode::kUnavailable);  // MPI: once
}

// Ranks other than 0 print only their failures, each line marked with the rank.
class FailuresOnly : public testing::EmptyTestEventListener {
 public:
  explicit FailuresOnly(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: failure\n%s\n", rank_,
                 result.file_name() ? result.file_name() : "?", result.line_number(),
                 result.summary());
  }

 private:
  int rank_;
};

}  // namespace
}  // namespace graphc::runtime

int main(int argc, char** argv) {
  using namespace graphc;
  using namespace graphc::runtime;
  testing::InitGoogleTest(&argc, argv);
  std::unique_ptr<Communicator> mpi;
  if (InsideMpiJob()) {
    CommOptions options;
    options.timeout_seconds = 20;  // a rank out of step fails the run, never hangs it
    options.program = "graphc-comm-tests";
    StatusOr<std::unique_ptr<Communicator>> created = Communicator::Create(options);
    if (!created.ok()) {
      std::fprintf(stderr, "graphc-comm-tests: %s\n", created.status().message().c_str());
      return 1;
    }
    mpi = std::move(created.value());
    g_mpi = mpi.get();
    InstallTerminationHandler();
    if (mpi->rank() != 0) {
      testing::TestEventListeners& listeners = testing::UnitTest::GetInstance()->listeners();
      delete listeners.Release(listeners.default_result_printer());
      listeners.Append(new FailuresOnly(mpi->rank()));
    }
  }
  const int result = RUN_ALL_TESTS();
  if (mpi) {
    Status finalized = mpi->Finalize();
    if (!finalized.ok()) {
      std::fprintf(stderr, "graphc-comm-tests: %s\n", finalized.message().c_str());
      return 1;
    }
  }
  return result;
}
