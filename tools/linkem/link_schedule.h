// When a packet crossing graphc-linkem's emulated network arrives: a star of
// ports (one per "node"), each joined to a switch by a link of one bandwidth
// in each direction, with a one-way delay between them. Header only, so that
// its arithmetic is tested without TUN devices (link_schedule_test.cc).

#ifndef GRAPHC_TOOLS_LINKEM_LINK_SCHEDULE_H_
#define GRAPHC_TOOLS_LINKEM_LINK_SCHEDULE_H_

#include <algorithm>
#include <cstddef>
#include <optional>
#include <vector>

namespace graphc::linkem {

// A packet of b bytes that port s offers at time t (seconds):
//   - leaves s's uplink once the bytes queued before it are out:
//       up = max(t, up_free[s]) + b / rate,  up_free[s] = up;
//   - crosses the link in `delay`, and is delivered when the destination's
//     downlink has carried the packets before it (an idle downlink adds
//     nothing: the switch cuts through, so a lone flow sees one link):
//       at = max(up + delay, down_free[d] + b / rate),  down_free[d] = at.
// A packet that would wait behind more than `queue_bytes` in its uplink is
// dropped (a tail-drop queue, as tc's tbf), and leaves no trace.
class LinkSchedule {
 public:
  LinkSchedule(int ports, double bytes_per_second, double delay_seconds, double queue_bytes)
      : rate_(bytes_per_second), delay_(delay_seconds), queue_(queue_bytes),
        up_free_(static_cast<size_t>(ports), 0.0), down_free_(static_cast<size_t>(ports), 0.0) {}

  // The delivery time of the packet, or nullopt when it is dropped.
  std::optional<double> Offer(double now, int src, int dst, size_t bytes) {
    double& up_free = up_free_[static_cast<size_t>(src)];
    double& down_free = down_free_[static_cast<size_t>(dst)];
    const double start = std::max(now, up_free);
    if ((start - now) * rate_ + static_cast<double>(bytes) > queue_) return std::nullopt;
    const double transfer = static_cast<double>(bytes) / rate_;
    up_free = start + transfer;
    down_free = std::max(up_free + delay_, down_free + transfer);
    return down_free;
  }

 private:
  double rate_, delay_, queue_;
  std::vector<double> up_free_, down_free_;
};

}  // namespace graphc::linkem

#endif  // GRAPHC_TOOLS_LINKEM_LINK_SCHEDULE_H_
