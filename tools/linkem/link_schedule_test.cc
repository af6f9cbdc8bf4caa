// graphc-linkem's schedule on hand-computed cases.

#include "tools/linkem/link_schedule.h"

#include <gtest/gtest.h>

namespace graphc::linkem {
namespace {

constexpr double kTol = 1e-12;

// 1000 bytes per second, 0.5 s one way, room for 10000 bytes.
TEST(LinkSchedule, ALonePacketTakesItsTransferAndTheDelay) {
  LinkSchedule s(2, 1000, 0.5, 10000);
  EXPECT_NEAR(*s.Offer(1.0, 0, 1, 100), 1.0 + 0.1 + 0.5, kTol);
}

TEST(LinkSchedule, BackToBackPacketsQueueInTheUplink) {
  LinkSchedule s(2, 1000, 0.5, 10000);
  EXPECT_NEAR(*s.Offer(0.0, 0, 1, 100), 0.6, kTol);
  EXPECT_NEAR(*s.Offer(0.0, 0, 1, 100), 0.7, kTol);  // behind the first
  EXPECT_NEAR(*s.Offer(0.05, 0, 1, 300), 1.0, kTol);  // starts at 0.2
  // After the link went idle, a packet starts when offered.
  EXPECT_NEAR(*s.Offer(5.0, 0, 1, 100), 5.6, kTol);
}

TEST(LinkSchedule, DirectionsAndSourcesHaveTheirOwnUplinks) {
  LinkSchedule s(3, 1000, 0.5, 10000);
  EXPECT_NEAR(*s.Offer(0.0, 0, 1, 1000), 1.5, kTol);
  EXPECT_NEAR(*s.Offer(0.0, 1, 0, 1000), 1.5, kTol);  // the other direction
  EXPECT_NEAR(*s.Offer(0.0, 2, 0, 1000), 2.5, kTol);  // to 0 as well: its downlink is busy
}

TEST(LinkSchedule, TwoSendersShareADownlink) {
  // Incast: 0 and 1 each send 10 packets of 100 bytes to 2 at once. Each
  // uplink would deliver one per 0.1 s; the shared downlink delivers one per
  // 0.1 s in all, so the 20th arrives 2 s after the first bytes left.
  LinkSchedule s(3, 1000, 0.5, 10000);
  double last = 0;
  for (int i = 0; i < 10; ++i) {
    last = *s.Offer(0.0, 0, 2, 100);
    last = std::max(last, *s.Offer(0.0, 1, 2, 100));
  }
  EXPECT_NEAR(last, 0.1 + 0.5 + 19 * 0.1, kTol);
}

TEST(LinkSchedule, AFullUplinkDropsAndKeepsNoTrace) {
  LinkSchedule s(2, 1000, 0.0, 250);
  EXPECT_TRUE(s.Offer(0.0, 0, 1, 100));   // queue 0 + 100
  EXPECT_TRUE(s.Offer(0.0, 0, 1, 100));   // 100 ahead + 100
  EXPECT_FALSE(s.Offer(0.0, 0, 1, 100));  // 200 ahead + 100 > 250
  EXPECT_NEAR(*s.Offer(0.0, 0, 1, 50), 0.25, kTol);  // fits; the drop took no time
  EXPECT_FALSE(s.Offer(0.0, 0, 1, 1000));  // larger than the queue: never fits
}

TEST(LinkSchedule, NoDelayIsJustTheLinksRate) {
  // 1 Gbit/s: a 9000-byte packet takes 72 us.
  LinkSchedule s(2, 125e6, 0.0, 1e7);
  double t = 0;
  for (int i = 0; i < 1000; ++i) t = *s.Offer(0.0, 0, 1, 9000);
  EXPECT_NEAR(t, 1000 * 72e-6, 1e-9);
}

}  // namespace
}  // namespace graphc::linkem
