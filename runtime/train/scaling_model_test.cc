// The scaling model's arithmetic on cases worked out by hand: links as
// written, each algorithm's cost, and steps with one bucket and no overlap,
// perfect overlap, partial overlap, buckets taking the link in turn or
// sharing it, and latency-bound small buckets.

#include "runtime/train/scaling_model.h"

#include <gtest/gtest.h>

#include <cmath>

namespace graphc::runtime {
namespace {

TEST(ScalingModelTest, ParsesLinksInBitsAndBytes) {
  StatusOr<Link> l = ParseLink("10gbit,50us", "--link");
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_DOUBLE_EQ(l->bytes_per_second, 1.25e9);
  EXPECT_DOUBLE_EQ(l->latency_seconds, 50e-6);
  l = ParseLink("1Gbit/s", "--link");
  ASSERT_TRUE(l.ok());
  EXPECT_DOUBLE_EQ(l->bytes_per_second, 1.25e8);
  EXPECT_EQ(l->latency_seconds, 0);
  l = ParseLink("12.5GB/s, 2us", "--link");
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_DOUBLE_EQ(l->bytes_per_second, 12.5e9);
  EXPECT_DOUBLE_EQ(l->latency_seconds, 2e-6);
  l = ParseLink("100mbit,1.5ms", "--link");
  ASSERT_TRUE(l.ok());
  EXPECT_DOUBLE_EQ(l->bytes_per_second, 12.5e6);
  EXPECT_DOUBLE_EQ(l->latency_seconds, 1.5e-3);
  EXPECT_EQ(DescribeLink(*ParseLink("1gbit,50us", "x")), "1 Gbit/s, 50 us");
  EXPECT_EQ(DescribeLink(*ParseLink("100mbit,2ms", "x")), "100 Mbit/s, 2 ms");
  EXPECT_EQ(DescribeLink(*ParseLink("12.3GB/s", "x")), "12.3 GB/s, 0 us");
}

TEST(ScalingModelTest, ReadsBucketCapsSortedAndOnce) {
  StatusOr<std::vector<double>> caps = ParseBucketSweep("64, 2,0.5,2");
  ASSERT_TRUE(caps.ok()) << caps.status().ToString();
  EXPECT_EQ(*caps, (std::vector<double>{0.5, 2, 64}));
  caps = ParseBucketSweep("");
  ASSERT_TRUE(caps.ok());
  EXPECT_EQ(*caps, DefaultBucketSweep());
  EXPECT_EQ(caps->front(), 0.25);
  EXPECT_EQ(caps->back(), 256);
  for (const char* text : {"x", "0", "-1", "2,,4", "4,", "1e7", "0x10", "inf", "nan", "2MiB",
                           "1048577"}) {
    caps = ParseBucketSweep(text);
    EXPECT_EQ(caps.status().code(), ErrorCode::kInvalidArgument) << text;
  }
  std::string many = "1";
  for (int i = 2; i <= 65; ++i) many += "," + std::to_string(i);
  EXPECT_FALSE(ParseBucketSweep(many).ok());
  // The limit counts different caps: 64 of them, each given 10 times, pass.
  std::string repeated = "1";
  for (int k = 0; k < 10; ++k)
    for (int i = 1; i <= 64; ++i) repeated += "," + std::to_string(i);
  caps = ParseBucketSweep(repeated);
  ASSERT_TRUE(caps.ok()) << caps.status().ToString();
  EXPECT_EQ(caps->size(), 64u);
  EXPECT_TRUE(ParseBucketSweep("1048576").ok());
}

TEST(ScalingModelTest, PredictsAtMost64DifferentSizes) {
  PredictOptions options;
  options.ranks_per_node = 1000;
  for (int k = 0; k < 3; ++k)
    for (int64_t n = 1; n <= 64; ++n) options.ranks.push_back(n);
  EXPECT_TRUE(CheckPredictOptions(options).ok());
  options.ranks.push_back(65);
  Status s = CheckPredictOptions(options);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.ToString().find("more than 64 different numbers of ranks"), std::string::npos)
      << s.ToString();
}

TEST(ScalingModelTest, RefusesLinksItCannotRead) {
  for (const char* text : {"10gbps", "fast", "10gbit,50", "10gbit,50us,1", "-1gbit", "0gbit",
                           "10 parsecs", "1e400gbit", "10gbit,20s", ",50us", "nangbit"}) {
    StatusOr<Link> l = ParseLink(text, "--link");
    ASSERT_FALSE(l.ok()) << text;
    EXPECT_EQ(l.status().code(), ErrorCode::kInvalidArgument) << text;
    EXPECT_NE(l.status().message().find("--link"), std::string::npos) << l.status().ToString();
  }
  EXPECT_NE(ParseLink("10gbps", "--link").status().message().find("ambiguous"),
            std::string::npos);
}

Cluster Flat(int64_t ranks, double bytes_per_second, double latency, Algorithm a) {
  Cluster c;
  c.ranks = ranks;
  c.inter = {bytes_per_second, latency};
  c.intra = {1e12, 0};
  c.algorithm = a;
  return c;
}

TEST(ScalingModelTest, AllreduceCostsAsTheAlgorithmsSend) {
  // One rank sends nothing.
  EXPECT_EQ(AllreduceCostOf(1e8, Flat(1, 1e8, 1e-5, Algorithm::kRing)).total(), 0);
  // Two ranks, Rabenseifner: one halving and one doubling step, each moving
  // half the buffer: S / B, and 2 messages over Open MPI's eager limit of
  // 3 latencies each (its rendezvous: request, clear-to-send, data).
  AllreduceCost c = AllreduceCostOf(1e8, Flat(2, 1e8, 1e-5, Algorithm::kRabenseifner));
  EXPECT_DOUBLE_EQ(c.latency_seconds, 6e-5);
  EXPECT_DOUBLE_EQ(c.transfer_seconds, 1.0);
  // Four ranks on a ring: 6 steps of S/4 each.
  c = AllreduceCostOf(1e9, Flat(4, 1e9, 1e-5, Algorithm::kRing));
  EXPECT_DOUBLE_EQ(c.latency_seconds, 6e-5);
  EXPECT_DOUBLE_EQ(c.transfer_seconds, 1.5);
  // Four ranks, Rabenseifner: log2(4) = 2 steps each way, the same bytes.
  c = AllreduceCostOf(1e9, Flat(4, 1e9, 1e-5, Algorithm::kRabenseifner));
  EXPECT_DOUBLE_EQ(c.latency_seconds, 12e-5);
  EXPECT_DOUBLE_EQ(c.transfer_seconds, 1.5);
  // Three ranks, Rabenseifner: the third hands its whole buffer to a partner
  // and gets it back (2 messages, 2 S / B) around a 2-rank allreduce.
  c = AllreduceCostOf(1e9, Flat(3, 1e9, 1e-5, Algorithm::kRabenseifner));
  EXPECT_DOUBLE_EQ(c.latency_seconds, 12e-5);
  EXPECT_DOUBLE_EQ(c.transfer_seconds, 3.0);
  // Messages up to the eager limit go at once: one latency each. Four ranks,
  // 256 KiB: halving sends 128 KiB (rendezvous), then 64 KiB (eager).
  c = AllreduceCostOf(262144, Flat(4, 1e9, 1e-5, Algorithm::kRabenseifner));
  EXPECT_NEAR(c.latency_seconds, 2 * (3e-5 + 1e-5), 1e-18);
  c = AllreduceCostOf(131072, Flat(2, 1e9, 1e-5, Algorithm::kRabenseifner));
  EXPECT_DOUBLE_EQ(c.latency_seconds, 2e-5);
  c = AllreduceCostOf(131074, Flat(2, 1e9, 1e-5, Algorithm::kRabenseifner));
  EXPECT_DOUBLE_EQ(c.latency_seconds, 6e-5);
  // A ring (NCCL) has no rendezvous: 2 (p - 1) latencies whatever the size.
  c = AllreduceCostOf(1e9, Flat(2, 1e9, 1e-5, Algorithm::kRing));
  EXPECT_DOUBLE_EQ(c.latency_seconds, 2e-5);
}

TEST(ScalingModelTest, RanksOfOneNodeUseItsLinkAndNodesOfSeveralReduceHierarchically) {
  Cluster c = Flat(2, 1e9, 1e-5, Algorithm::kRing);
  c.ranks_per_node = 2;
  c.intra = {1e10, 1e-6};
  AllreduceCost one_node = AllreduceCostOf(1e9, c);
  EXPECT_DOUBLE_EQ(one_node.latency_seconds, 2e-6);
  EXPECT_DOUBLE_EQ(one_node.transfer_seconds, 0.1);
  // 2 nodes of 4: a reduce-scatter and an allgather in the node (3 steps of
  // S/4 each at 10 GB/s), and between the nodes the whole buffer's worth
  // through each node's link (1 step each way of S/2, for 4 ranks at once).
  c.ranks = 8;
  c.ranks_per_node = 4;
  AllreduceCost two_nodes = AllreduceCostOf(1e9, c);
  EXPECT_NEAR(two_nodes.latency_seconds, 6e-6 + 2e-5, 1e-18);
  EXPECT_NEAR(two_nodes.transfer_seconds, 0.15 + 1.0, 1e-12);
}

TEST(ScalingModelTest, SparseAllreducesGatherEveryRanksSet) {
  EXPECT_EQ(SparseAllreduceCostOf(1e6, Flat(1, 1e8, 1e-5, Algorithm::kRing)).total(), 0);
  // Two ranks: the counts, then the other's set (S / B).
  AllreduceCost c = SparseAllreduceCostOf(1e8, Flat(2, 1e8, 1e-5, Algorithm::kRing));
  EXPECT_DOUBLE_EQ(c.latency_seconds, 2e-5);
  EXPECT_DOUBLE_EQ(c.transfer_seconds, 1.0);
  // Four ranks: three sets in, whatever the allreduce algorithm.
  c = SparseAllreduceCostOf(1e8, Flat(4, 1e8, 1e-5, Algorithm::kRabenseifner));
  EXPECT_DOUBLE_EQ(c.latency_seconds, 6e-5);
  EXPECT_DOUBLE_EQ(c.transfer_seconds, 3.0);
  // 2 nodes of 2: a ring in the node (1 set at 10 GB/s), the node's 2 sets
  // across (at 1 GB/s), and the other node's 2 sets spread in the node.
  Cluster nodes = Flat(4, 1e9, 1e-5, Algorithm::kRing);
  nodes.ranks_per_node = 2;
  nodes.intra = {1e10, 1e-6};
  c = SparseAllreduceCostOf(1e9, nodes);
  EXPECT_NEAR(c.latency_seconds, 2e-6 + 2e-5, 1e-18);
  EXPECT_NEAR(c.transfer_seconds, 0.1 + 2.0 + 0.1, 1e-12);
}

// A 2-rank cluster on which a bucket of `bytes` takes bytes / 1e9 seconds
// (Rabenseifner's S / B for 2 ranks) and no latency.
Cluster TwoRanks(Sharing sharing) {
  Cluster c = Flat(2, 1e9, 0, Algorithm::kRabenseifner);
  c.sharing = sharing;
  return c;
}

StepEvent Compute(double s) { return {StepEvent::kCompute, s, -1, 0}; }
StepEvent Start(int bucket, double bytes) { return {StepEvent::kStart, 0, bucket, bytes}; }
StepEvent Wait(int bucket) { return {StepEvent::kWait, 0, bucket, 0}; }

TEST(ScalingModelTest, OneBucketWithoutOverlapAddsItsWholeTime) {
  StatusOr<StepPrediction> p = SimulateStep(
      {Compute(1.0), Start(0, 0.5e9), Wait(0), Compute(0.2)}, TwoRanks(Sharing::kShared));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_DOUBLE_EQ(p->step_seconds, 1.7);
  EXPECT_DOUBLE_EQ(p->exposed_seconds, 0.5);
  EXPECT_DOUBLE_EQ(p->comm_seconds, 0.5);
  EXPECT_DOUBLE_EQ(p->wire_bytes, 0.5e9);
}

TEST(ScalingModelTest, OverlapHidesWhatComputeCovers) {
  // Perfect: 0.5 s of allreduce under 2 s of compute.
  StatusOr<StepPrediction> p = SimulateStep(
      {Compute(1.0), Start(0, 0.5e9), Compute(2.0), Wait(0)}, TwoRanks(Sharing::kShared));
  ASSERT_TRUE(p.ok());
  EXPECT_DOUBLE_EQ(p->step_seconds, 3.0);
  EXPECT_DOUBLE_EQ(p->exposed_seconds, 0);
  // Partial: 1.5 s of allreduce, 1 s of it covered.
  p = SimulateStep({Compute(1.0), Start(0, 1.5e9), Compute(1.0), Wait(0)},
                   TwoRanks(Sharing::kShared));
  ASSERT_TRUE(p.ok());
  EXPECT_DOUBLE_EQ(p->step_seconds, 2.5);
  EXPECT_DOUBLE_EQ(p->exposed_seconds, 0.5);
}

TEST(ScalingModelTest, BucketsInTurnFinishInOrderAndSharedOnesTogether) {
  // Two 1-second buckets start together; the step waits for the first, then
  // computes 1 s, then waits for the second.
  const std::vector<StepEvent> events = {Start(0, 1e9), Start(1, 1e9), Wait(0), Compute(1.0),
                                         Wait(1)};
  // In turn: the first is done at 1 s, the second at 2 s, under the compute.
  StatusOr<StepPrediction> in_turn = SimulateStep(events, TwoRanks(Sharing::kInTurn));
  ASSERT_TRUE(in_turn.ok());
  EXPECT_DOUBLE_EQ(in_turn->step_seconds, 2.0);
  EXPECT_DOUBLE_EQ(in_turn->exposed_seconds, 1.0);
  // Sharing the link, both finish at 2 s: the compute starts only then.
  StatusOr<StepPrediction> shared = SimulateStep(events, TwoRanks(Sharing::kShared));
  ASSERT_TRUE(shared.ok());
  EXPECT_DOUBLE_EQ(shared->step_seconds, 3.0);
  EXPECT_DOUBLE_EQ(shared->exposed_seconds, 2.0);
  // A bucket started later joins the share: A (2 s of bytes) alone for 1 s,
  // then A and B (1 s) at half speed each: both finish at 3 s.
  StatusOr<StepPrediction> joined = SimulateStep(
      {Start(0, 2e9), Compute(1.0), Start(1, 1e9), Wait(1), Wait(0)}, TwoRanks(Sharing::kShared));
  ASSERT_TRUE(joined.ok());
  EXPECT_NEAR(joined->step_seconds, 3.0, 1e-12);
  EXPECT_NEAR(joined->exposed_seconds, 2.0, 1e-12);
}

TEST(ScalingModelTest, BesideComputeAllreducesKeepTheirBusyShare) {
  // A 1-second bucket beside 1 s of compute at half speed is half done when
  // the step waits for it; the other half goes at full speed.
  Cluster c = TwoRanks(Sharing::kShared);
  c.busy_share = 0.5;
  StatusOr<StepPrediction> p =
      SimulateStep({Compute(1.0), Start(0, 1e9), Compute(1.0), Wait(0)}, c);
  ASSERT_TRUE(p.ok());
  EXPECT_DOUBLE_EQ(p->step_seconds, 2.5);
  EXPECT_DOUBLE_EQ(p->exposed_seconds, 0.5);
  EXPECT_DOUBLE_EQ(p->comm_seconds, 1.0);  // alone, at full speed
  // Without compute beside it the share does not apply.
  p = SimulateStep({Compute(1.0), Start(0, 1e9), Wait(0)}, c);
  ASSERT_TRUE(p.ok());
  EXPECT_DOUBLE_EQ(p->step_seconds, 2.0);
}

TEST(ScalingModelTest, BesideAllreducesComputeKeepsItsShare) {
  // 1 s of compute at half speed beside a 1-second bucket: when the bucket is
  // done (1 s later) half the compute is left, and goes at full speed.
  Cluster c = TwoRanks(Sharing::kShared);
  c.compute_share = 0.5;
  StatusOr<StepPrediction> p =
      SimulateStep({Compute(1.0), Start(0, 1e9), Compute(1.0), Wait(0)}, c);
  ASSERT_TRUE(p.ok());
  EXPECT_DOUBLE_EQ(p->step_seconds, 2.5);
  EXPECT_DOUBLE_EQ(p->exposed_seconds, 0);
  // Both shares at once: the network at half speed needs 2 s for the
  // bucket, during which the compute (at half speed) does its 1 s.
  c.busy_share = 0.5;
  p = SimulateStep({Compute(1.0), Start(0, 1e9), Compute(1.0), Wait(0)}, c);
  ASSERT_TRUE(p.ok());
  EXPECT_NEAR(p->step_seconds, 3.0, 1e-12);
  EXPECT_NEAR(p->exposed_seconds, 0, 1e-12);
}

TEST(ScalingModelTest, ComputeSharesSettleFarFromTheClocksOrigin) {
  // Far from t = 0 the clock's resolution is coarser than the compute left
  // after a network event (this once looped forever): 1 s of allreduce
  // beside compute at 0.8 leaves 99.2 of the second 100 s.
  Cluster c = TwoRanks(Sharing::kShared);
  c.compute_share = 0.8;
  for (double start : {100.0, 3e4, 1e7}) {
    StatusOr<StepPrediction> p =
        SimulateStep({Compute(start), Start(0, 1e9), Compute(100.0), Wait(0)}, c);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_NEAR(p->step_seconds, start + 1.0 + 99.2, 1e-6 * start) << start;
  }
}

TEST(ScalingModelTest, StragglersAddTheExpectedLongestOfNSteps) {
  EXPECT_EQ(ExpectedMaxOfNormals(1), 0);
  EXPECT_NEAR(ExpectedMaxOfNormals(2), 1 / std::sqrt(M_PI), 1e-9);  // 0.5642
  EXPECT_NEAR(ExpectedMaxOfNormals(3), 1.5 / std::sqrt(M_PI), 1e-9);
  EXPECT_NEAR(ExpectedMaxOfNormals(4), 1.0293754, 1e-6);
  EXPECT_NEAR(ExpectedMaxOfNormals(32), 2.0696, 1e-3);
  Cluster c = TwoRanks(Sharing::kShared);
  c.step_jitter_seconds = 0.1;
  StatusOr<StepPrediction> p = SimulateStep({Compute(1.0)}, c);
  ASSERT_TRUE(p.ok());
  EXPECT_NEAR(p->step_seconds, 1.0 + 0.1 / std::sqrt(M_PI), 1e-9);
  EXPECT_NEAR(p->straggler_seconds, 0.1 / std::sqrt(M_PI), 1e-9);
  c.ranks = 1;  // nobody to wait for
  p = SimulateStep({Compute(1.0)}, c);
  EXPECT_EQ(p->step_seconds, 1.0);
}

TEST(ScalingModelTest, SmallBucketsAreLatencyBound) {
  // 100 buckets of 1 kB on 2 ranks with 50 us per message: each costs 2
  // latencies (100 us) and 1 us of bytes; one at a time they add up.
  Cluster c = Flat(2, 1e9, 50e-6, Algorithm::kRabenseifner);
  c.sharing = Sharing::kInTurn;
  std::vector<StepEvent> events = {Compute(0.01)};
  for (int b = 0; b < 100; ++b) events.push_back(Start(b, 1000));
  for (int b = 0; b < 100; ++b) events.push_back(Wait(b));
  StatusOr<StepPrediction> p = SimulateStep(events, c);
  ASSERT_TRUE(p.ok());
  EXPECT_NEAR(p->step_seconds, 0.01 + 100 * 101e-6, 1e-12);
  EXPECT_NEAR(p->comm_seconds, 100 * 101e-6, 1e-12);
  // The same bytes in one bucket: one latency pair.
  p = SimulateStep({Compute(0.01), Start(0, 100 * 1000), Wait(0)}, c);
  ASSERT_TRUE(p.ok());
  EXPECT_NEAR(p->step_seconds, 0.01 + 100e-6 + 100e-6, 1e-12);
}

TEST(ScalingModelTest, OneRankIsItsComputeAlone) {
  Cluster c = TwoRanks(Sharing::kShared);
  c.ranks = 1;
  StatusOr<StepPrediction> p =
      SimulateStep({Compute(1.25), Start(0, 1e12), Wait(0), Compute(0.5)}, c);
  ASSERT_TRUE(p.ok());
  EXPECT_DOUBLE_EQ(p->step_seconds, 1.75);
  EXPECT_EQ(p->exposed_seconds, 0);
  EXPECT_EQ(p->comm_seconds, 0);
  EXPECT_EQ(p->wire_bytes, 0);
}

TEST(ScalingModelTest, RefusesSchedulesThatAreNotASteps) {
  const Cluster c = TwoRanks(Sharing::kShared);
  EXPECT_FALSE(SimulateStep({Wait(0)}, c).ok());
  EXPECT_FALSE(SimulateStep({Start(0, 1e9), Compute(1.0)}, c).ok());
  EXPECT_FALSE(SimulateStep({Start(0, 1e9), Start(0, 1e9), Wait(0)}, c).ok());
  // A bucket number may come back once its wait has passed.
  StatusOr<StepPrediction> p =
      SimulateStep({Start(0, 1e9), Wait(0), Start(0, 1e9), Wait(0)}, c);
  ASSERT_TRUE(p.ok());
  EXPECT_DOUBLE_EQ(p->step_seconds, 2.0);
}

}  // namespace
}  // namespace graphc::runtime
