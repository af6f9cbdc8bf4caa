// The run statistics graphrun reports, against values NumPy computes the way
// tf_cnn_benchmarks does (mean, std(ddof=1)/sqrt(n), 1.4826 * MAD).

#include "runtime/train/report.h"

#include <gtest/gtest.h>

namespace graphc::runtime {
namespace {

TEST(ReportTest, SpeedMatchesTfCnnBenchmarksStatistics) {
  // numpy: r.mean() = 105, r.std(ddof=1)/sqrt(6) = 5.773502691896258,
  // 1.4826 * median(|r - median(r)|) = 11.1195 (median 102.5, an even count).
  Speed s = SpeedOf({100, 110, 90, 130, 95, 105});
  EXPECT_DOUBLE_EQ(s.mean, 105.0);
  EXPECT_NEAR(s.error, 5.773502691896258, 1e-12);
  EXPECT_NEAR(s.jitter, 11.1195, 1e-12);
}

TEST(ReportTest, StepJitterIsTheScaledMedianAbsoluteDeviation) {
  // median 102.5; deviations 2.5 7.5 12.5 27.5 7.5 2.5, their median 7.5.
  EXPECT_NEAR(StepJitterMs({100, 110, 90, 130, 95, 105}), 1.4826 * 7.5, 1e-12);
  EXPECT_EQ(StepJitterMs({250}), 0);
  EXPECT_EQ(StepJitterMs({}), 0);
}

TEST(ReportTest, SpeedOfOneStepHasNoSpread) {
  Speed s = SpeedOf({250});
  EXPECT_EQ(s.mean, 250);
  EXPECT_EQ(s.error, 0);
  EXPECT_EQ(s.jitter, 0);
  Speed none = SpeedOf({});
  EXPECT_EQ(none.mean, 0);
  EXPECT_EQ(none.error, 0);
}

TEST(ReportTest, MedianAveragesTheMiddleOfAnEvenCount) {
  EXPECT_EQ(Median({12, 10, 11, 40, 9}), 11);
  EXPECT_EQ(Median({4, 1, 3, 2}), 2.5);
  EXPECT_EQ(Median({}), 0);
}

TEST(ReportTest, PercentileIsNearestRank) {
  std::vector<double> v = {5, 1, 4, 2, 3, 10, 9, 8, 7, 6};
  EXPECT_EQ(Percentile(v, 0.9), 9);
  EXPECT_EQ(Percentile(v, 1.0), 10);
  EXPECT_EQ(Percentile(v, 0.1), 1);
  EXPECT_EQ(Percentile(v, 0.0), 1);
  EXPECT_EQ(Percentile({}, 0.5), 0);
}

TEST(ReportTest, StepTimesGiveRatesAndTotalThroughput) {
  StepTimes t;
  t.batch = 32;
  t.Add(100);  // 320 images/sec
  t.Add(50);   // 640 images/sec
  t.Add(250);  // 128 images/sec
  std::vector<double> rates = t.Rates();
  ASSERT_EQ(rates.size(), 3u);
  EXPECT_DOUBLE_EQ(rates[0], 320);
  EXPECT_DOUBLE_EQ(rates[1], 640);
  EXPECT_DOUBLE_EQ(rates[2], 128);
  // 96 images in 400 ms, not the mean of the rates (362.67).
  EXPECT_DOUBLE_EQ(t.TotalImagesPerSecond(), 240);
  EXPECT_EQ(t.MedianMs(), 100);
  EXPECT_EQ(t.P90Ms(), 250);
  EXPECT_EQ(StepTimes{}.TotalImagesPerSecond(), 0);
}

}  // namespace
}  // namespace graphc::runtime
