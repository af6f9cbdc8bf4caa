#include "runtime/train/scaling_model.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "contract/printable.h"

namespace graphc::runtime {

namespace {

Status Invalid(const std::string& message) {
  return Status(ErrorCode::kInvalidArgument, message);
}

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

// A number followed by a unit: the number (finite, not negative) and the
// unit as written, or false.
bool SplitNumber(const std::string& text, double* number, std::string* unit) {
  const std::string t = Trim(text);
  if (t.empty() || !(std::isdigit(static_cast<unsigned char>(t[0])) || t[0] == '.')) return false;
  // Decimal only (strtod would also read hex and "inf").
  const size_t digits = t.find_first_not_of("0123456789.eE+-");
  const std::string number_text = t.substr(0, digits);
  errno = 0;
  char* end = nullptr;
  *number = std::strtod(number_text.c_str(), &end);
  if (errno != 0 || end == number_text.c_str() || *end != '\0' || !std::isfinite(*number) ||
      *number < 0)
    return false;
  end = const_cast<char*>(t.c_str()) + number_text.size();
  *unit = Trim(std::string(end));
  return true;
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

StatusOr<double> ParseBandwidth(const std::string& text, const std::string& shown, bool* in_bytes) {
  double value = 0;
  std::string unit;
  if (!SplitNumber(text, &value, &unit))
    return Invalid(shown + ": the bandwidth '" + Printable(text) +
                   "' is not a number with a unit (e.g. 10gbit, 1Gbit/s, 12.5GB/s)");
  static const std::map<std::string, double> kBits = {
      {"bit", 1}, {"kbit", 1e3}, {"mbit", 1e6}, {"gbit", 1e9}, {"tbit", 1e12}};
  static const std::map<std::string, double> kBytes = {
      {"B/s", 1}, {"KB/s", 1e3}, {"kB/s", 1e3}, {"MB/s", 1e6}, {"GB/s", 1e9}, {"TB/s", 1e12}};
  double bytes_per_second = -1;
  std::string bits = Lower(unit);
  if (bits.size() > 2 && bits.compare(bits.size() - 2, 2, "/s") == 0)
    bits.resize(bits.size() - 2);
  if (auto it = kBits.find(bits); it != kBits.end()) bytes_per_second = value * it->second / 8;
  if (auto it = kBytes.find(unit); it != kBytes.end()) {
    bytes_per_second = value * it->second;
    *in_bytes = true;
  }
  if (bytes_per_second < 0) {
    const std::string l = Lower(unit);
    if (l == "bps" || l == "kbps" || l == "mbps" || l == "gbps" || l == "tbps")
      return Invalid(shown + ": '" + Printable(unit) +
                     "' is ambiguous (tc reads mbps as megabytes per second): write gbit for "
                     "bits or GB/s for bytes");
    return Invalid(shown + ": the bandwidth unit '" + Printable(unit) +
                   "' is none of bit, kbit, mbit, gbit, tbit (optionally with /s), B/s, KB/s, "
                   "MB/s, GB/s, TB/s");
  }
  if (bytes_per_second < 1 || bytes_per_second > 1e15)
    return Invalid(shown + ": a bandwidth of '" + Printable(text) +
                   "' is outside 8 bit/s to 1 PB/s");
  return bytes_per_second;
}

StatusOr<double> ParseLatency(const std::string& text, const std::string& shown) {
  double value = 0;
  std::string unit;
  if (!SplitNumber(text, &value, &unit))
    return Invalid(shown + ": the latency '" + Printable(text) +
                   "' is not a number with a unit (e.g. 50us, 1.5ms)");
  static const std::map<std::string, double> kUnits = {
      {"ns", 1e-9}, {"us", 1e-6}, {"ms", 1e-3}, {"s", 1}};
  auto it = kUnits.find(unit);
  if (it == kUnits.end())
    return Invalid(shown + ": the latency unit '" + Printable(unit) +
                   "' is none of ns, us, ms, s");
  const double seconds = value * it->second;
  if (seconds > 10) return Invalid(shown + ": a latency of '" + Printable(text) + "' is over 10 s");
  return seconds;
}

std::string Number(double value, int digits) {
  std::ostringstream s;
  s << std::setprecision(digits) << value;
  return s.str();
}

// Milliseconds to one decimal, or to two significant digits under 1 ms.
std::string Millis(double ms) {
  const int decimals =
      ms >= 1 || !(ms > 0) ? 1 : std::min(9, 1 - static_cast<int>(std::floor(std::log10(ms))));
  std::ostringstream s;
  s << std::fixed << std::setprecision(decimals) << ms;
  return s.str();
}

// Open MPI sends a message over its eager limit (64 KiB over TCP) by
// rendezvous: a request carrying the first fragment, a clear-to-send back,
// then the rest. Such a message costs three link latencies, a smaller one one.
double OpenMpiMessageLatency(double message_bytes, double latency_seconds) {
  constexpr double kEagerLimitBytes = 65536;
  return (message_bytes > kEagerLimitBytes ? 3.0 : 1.0) * latency_seconds;
}

// One group of `p` ranks on one kind of link.
AllreduceCost FlatCost(double bytes, int64_t p, const Link& link, Algorithm algorithm) {
  AllreduceCost cost;
  if (p <= 1 || bytes <= 0) return cost;
  const double beta = bytes / link.bytes_per_second;
  const double alpha = link.latency_seconds;
  if (algorithm == Algorithm::kRing) {
    cost.latency_seconds = 2.0 * static_cast<double>(p - 1) * alpha;
    cost.transfer_seconds = 2.0 * static_cast<double>(p - 1) / static_cast<double>(p) * beta;
    return cost;
  }
  // Rabenseifner on the largest power of two q <= p; the other p - q ranks
  // first hand their whole buffer to a partner and get the result back.
  int64_t q = 1, steps = 0;
  while (q * 2 <= p) {
    q *= 2;
    ++steps;
  }
  // Each halving step's message and its doubling step's twin: S/2, S/4, ...
  double message = bytes;
  for (int64_t s = 0; s < steps; ++s) {
    message /= 2;
    cost.latency_seconds += 2.0 * OpenMpiMessageLatency(message, alpha);
  }
  cost.transfer_seconds = 2.0 * static_cast<double>(q - 1) / static_cast<double>(q) * beta;
  if (q < p) {
    cost.latency_seconds += 2.0 * OpenMpiMessageLatency(bytes, alpha);
    cost.transfer_seconds += 2 * beta;
  }
  return cost;
}

}  // namespace

StatusOr<Link> ParseLink(const std::string& text, const std::string& option) {
  const std::string shown = option + " " + Printable(text);
  const size_t comma = text.find(',');
  if (comma != std::string::npos && text.find(',', comma + 1) != std::string::npos)
    return Invalid(shown + ": give BANDWIDTH[,LATENCY], e.g. 10gbit,50us");
  Link link;
  StatusOr<double> bandwidth = ParseBandwidth(text.substr(0, comma), shown, &link.in_bytes);
  if (!bandwidth.ok()) return bandwidth.status();
  link.bytes_per_second = *bandwidth;
  if (comma != std::string::npos) {
    StatusOr<double> latency = ParseLatency(text.substr(comma + 1), shown);
    if (!latency.ok()) return latency.status();
    link.latency_seconds = *latency;
  }
  return link;
}

std::string DescribeLink(const Link& link) {
  const double mbit = link.bytes_per_second * 8 / 1e6;
  std::string bandwidth;
  if (!link.in_bytes)
    bandwidth = mbit >= 1000 ? Number(mbit / 1000, 6) + " Gbit/s"
                : mbit >= 1  ? Number(mbit, 6) + " Mbit/s"
                             : Number(mbit * 1000, 6) + " kbit/s";
  else
    bandwidth = link.bytes_per_second >= 1e9 ? Number(link.bytes_per_second / 1e9, 6) + " GB/s"
                                             : Number(link.bytes_per_second / 1e6, 6) + " MB/s";
  const double us = link.latency_seconds * 1e6;
  return bandwidth + ", " + (us >= 1000 ? Number(us / 1000, 6) + " ms" : Number(us, 6) + " us");
}

AllreduceCost AllreduceCostOf(double bytes, const Cluster& c) {
  const int64_t per_node = std::max<int64_t>(1, std::min(c.ranks_per_node, c.ranks));
  const int64_t nodes = (c.ranks + per_node - 1) / per_node;
  if (nodes == 1) return FlatCost(bytes, c.ranks, c.intra, c.algorithm);
  if (per_node == 1) return FlatCost(bytes, nodes, c.inter, c.algorithm);
  // Hierarchical: a ring reduce-scatter within each node, the nodes' allreduce
  // of 1/K of the bytes per rank (K of them through the node's one link: the
  // bytes of one whole buffer), a ring allgather within each node.
  AllreduceCost within = FlatCost(bytes, per_node, c.intra, Algorithm::kRing);
  AllreduceCost across = FlatCost(bytes, nodes, c.inter, c.algorithm);
  return {within.latency_seconds + across.latency_seconds,
          within.transfer_seconds + across.transfer_seconds};
}

AllreduceCost SparseAllreduceCostOf(double bytes, const Cluster& c) {
  AllreduceCost cost;
  if (c.ranks <= 1 || bytes <= 0) return cost;
  const int64_t per_node = std::max<int64_t>(1, std::min(c.ranks_per_node, c.ranks));
  const int64_t nodes = (c.ranks + per_node - 1) / per_node;
  auto ring = [&](int64_t p, double set_bytes, const Link& link) {
    // The counts' gather, then p - 1 steps of one set each.
    cost.latency_seconds += 2.0 * static_cast<double>(p - 1) * link.latency_seconds;
    cost.transfer_seconds += static_cast<double>(p - 1) * set_bytes / link.bytes_per_second;
  };
  if (nodes == 1) {
    ring(c.ranks, bytes, c.intra);
    return cost;
  }
  const double k = static_cast<double>(per_node);
  if (per_node > 1) ring(per_node, bytes, c.intra);
  ring(nodes, k * bytes, c.inter);
  if (per_node > 1)  // the other nodes' sets, spread within the node
    cost.transfer_seconds +=
        static_cast<double>(nodes - 1) * k * bytes * (k - 1) / k / c.intra.bytes_per_second;
  return cost;
}

double ExpectedMaxOfNormals(int64_t n) {
  if (n <= 1) return 0;
  // E[max] = integral of x n phi(x) Phi(x)^(n-1) dx, by Simpson's rule.
  constexpr int kSteps = 4000;
  constexpr double kLow = -12, kHigh = 12, kH = (kHigh - kLow) / kSteps;
  double sum = 0;
  for (int i = 0; i <= kSteps; ++i) {
    const double x = kLow + i * kH;
    const double phi = std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
    const double cdf = 0.5 * std::erfc(-x / std::sqrt(2.0));
    const double f = x * static_cast<double>(n) * phi * std::pow(cdf, static_cast<double>(n - 1));
    sum += f * (i == 0 || i == kSteps ? 1 : i % 2 ? 4 : 2);
  }
  return sum * kH / 3;
}

StatusOr<StepPrediction> SimulateStep(const std::vector<StepEvent>& events,
                                      const Cluster& cluster) {
  struct Flight {
    int bucket;
    double latency_left, work_left;  // seconds: latency, then bytes at full bandwidth
  };
  std::vector<Flight> active;       // in start order
  std::map<int, double> finished;   // bucket -> when its allreduce finished
  std::map<int, bool> in_flight;    // bucket -> started and not yet waited for
  double now = 0;                   // how far the network has been played
  const bool shared = cluster.sharing == Sharing::kShared;
  constexpr double kEpsilon = 1e-15;

  // Plays the network at `speed` up to `limit` or until the next flight
  // finishes or enters its transfer, whichever comes first.
  auto step = [&](double limit, double speed) {
    int transferring = 0;
    for (const Flight& f : active) transferring += f.latency_left <= 0;
    double dt = limit - now;
    for (size_t i = 0; i < active.size(); ++i) {
      const Flight& f = active[i];
      if (!shared && i > 0) break;
      const double rate = speed * (shared && f.latency_left <= 0 ? 1.0 / transferring : 1.0);
      dt = std::min(dt, (f.latency_left > 0 ? f.latency_left / speed : f.work_left / rate));
    }
    dt = std::max(dt, 0.0);
    for (size_t i = 0; i < active.size(); ++i) {
      Flight& f = active[i];
      if (!shared && i > 0) break;
      if (f.latency_left > 0) {
        f.latency_left -= dt * speed;
        if (f.latency_left <= kEpsilon) f.latency_left = 0;
      } else {
        f.work_left -= dt * speed * (shared ? 1.0 / transferring : 1.0);
        if (f.work_left <= kEpsilon) f.work_left = 0;
      }
    }
    now += dt;
    for (size_t i = 0; i < active.size();) {
      if (active[i].latency_left <= 0 && active[i].work_left <= 0) {
        finished[active[i].bucket] = now;
        active.erase(active.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
  };
  // Up to the compute's clock: the ranks were computing all along.
  int64_t rounds = 0;  // a guard: every round moves the network or the compute on
  constexpr int64_t kMaxRounds = int64_t{1} << 26;
  auto NotConverging = [] {
    return Status(ErrorCode::kInternal, "the scaling model did not settle (a bug)");
  };
  auto play_to = [&](double t) {
    while (!active.empty() && now < t && rounds++ < kMaxRounds) step(t, cluster.busy_share);
    now = std::max(now, t);
  };

  StepPrediction p;
  double t = 0;  // the compute's clock
  for (const StepEvent& e : events) {
    switch (e.kind) {
      case StepEvent::kCompute: {
        // Beside allreduces in flight the compute keeps its share of speed;
        // the network plays along (at its busy share) event by event.
        play_to(t);
        double left = e.seconds;
        while (left > 0 && !active.empty() && cluster.compute_share < 1) {
          const double until = t + left / cluster.compute_share;
          if (!(until > t)) break;  // less than the clock resolves
          step(until, cluster.busy_share);
          if (!(now < until)) {
            t = until;
            left = 0;
            break;
          }
          left -= (now - t) * cluster.compute_share;
          t = now;
          if (++rounds > kMaxRounds) return NotConverging();
        }
        if (left > 0) t += left;
        break;
      }
      case StepEvent::kStart: {
        if (in_flight[e.bucket])
          return Status(ErrorCode::kInvalidArgument,
                        "bucket " + std::to_string(e.bucket) + " starts again while in flight");
        play_to(t);
        const AllreduceCost cost = e.sparse ? SparseAllreduceCostOf(e.bytes, cluster)
                                            : AllreduceCostOf(e.bytes, cluster);
        p.comm_seconds += cost.total();
        if (cluster.ranks > 1) p.wire_bytes += e.bytes;
        in_flight[e.bucket] = true;
        finished.erase(e.bucket);
        if (cost.total() <= 0)
          finished[e.bucket] = t;
        else
          active.push_back({e.bucket, cost.latency_seconds, cost.transfer_seconds});
        break;
      }
      case StepEvent::kWait: {
        if (!in_flight[e.bucket])
          return Status(ErrorCode::kInvalidArgument,
                        "bucket " + std::to_string(e.bucket) + " is waited for but not in flight");
        play_to(t);
        while (finished.count(e.bucket) == 0) {
          if (++rounds > kMaxRounds) return NotConverging();
          if (active.empty())
            return Status(ErrorCode::kInternal,
                          "bucket " + std::to_string(e.bucket) + " is lost in the model");
          step(std::numeric_limits<double>::infinity(), 1.0);
        }
        const double done = finished[e.bucket];
        if (done > t) {
          p.exposed_seconds += done - t;
          t = done;
        }
        in_flight[e.bucket] = false;
        break;
      }
    }
  }
  if (rounds > kMaxRounds) return NotConverging();
  for (const auto& [bucket, flying] : in_flight)
    if (flying)
      return Status(ErrorCode::kInvalidArgument,
                    "bucket " + std::to_string(bucket) + " is still in flight at the step's end");
  p.straggler_seconds = cluster.ranks > 1 ? cluster.step_jitter_seconds *
                                                 ExpectedMaxOfNormals(cluster.ranks)
                                           : 0;
  p.step_seconds = t + p.straggler_seconds;
  return p;
}

std::vector<StepEvent> StepEventsOf(const fb::Plan& root, const fb::Program& program,
                                    const std::vector<double>& seconds) {
  std::vector<StepEvent> events;
  double compute = 0;
  auto flush = [&] {
    if (compute > 0) events.push_back({StepEvent::kCompute, compute, -1, 0});
    compute = 0;
  };
  for (uint32_t c = 0; c < program.commands()->size(); ++c) {
    const fb::Command& command = *program.commands()->Get(c);
    const bool start = command.op() == fb::Opcode::AllreduceStart;
    if (!start && command.op() != fb::Opcode::AllreduceWait) {
      compute += c < seconds.size() ? seconds[c] : 0.0;
      continue;
    }
    flush();
    const fb::CollectiveAttrs* attrs = command.collective();
    const int bucket = attrs != nullptr ? attrs->bucket() : -1;
    if (!start) {
      events.push_back({StepEvent::kWait, 0, bucket, 0});
      continue;
    }
    const fb::DType wire = attrs != nullptr ? attrs->wire() : fb::DType::F32;
    double bytes = 0;
    if (attrs != nullptr && attrs->sparse()) {
      // 8 bytes an entry (value, index) of what the sets send after the
      // warm-up, or, where the plan does not say, of their sizes; the dense
      // buffers receive, never travel.
      if (attrs->sent_entries() != 0)
        bytes = 8.0 * static_cast<double>(attrs->sent_entries());
      else if (command.inputs() != nullptr)
        for (uint32_t i = 0; i + 1 < command.inputs()->size(); i += 3)
          bytes += 2.0 * static_cast<double>(
                             root.buffers()->Get(static_cast<uint32_t>(command.inputs()->Get(i)))->size());
      events.push_back({StepEvent::kStart, 0, bucket, bytes, true});
      continue;
    }
    if (command.inputs() != nullptr)
      for (int32_t index : *command.inputs()) {
        const fb::Buffer& b = *root.buffers()->Get(static_cast<uint32_t>(index));
        const uint64_t element = DTypeBytes(b.dtype());
        if (element == 0) continue;
        const bool narrowed = b.dtype() == fb::DType::F32 &&
                              (wire == fb::DType::F16 || wire == fb::DType::BF16);
        bytes += static_cast<double>(b.size() / element) * (narrowed ? 2.0 : double(element));
      }
    events.push_back({StepEvent::kStart, 0, bucket, bytes});
  }
  flush();
  return events;
}

namespace {
// The shortest decimal that reads back as `value` (a cap to type back in).
std::string ExactNumber(double value) {
  char text[40];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(text, sizeof text, "%.*g", digits, value);
    if (std::strtod(text, nullptr) == value) break;
  }
  return text;
}
}  // namespace

std::vector<double> DefaultBucketSweep() {
  return {0.25, 0.5, 1, 2, 4, 8, 16, 25, 32, 64, 128, 256};
}

StatusOr<std::vector<double>> ParseBucketSweep(const std::string& text) {
  if (text.empty()) return DefaultBucketSweep();
  std::vector<double> caps;
  std::string::size_type begin = 0;
  while (true) {
    const std::string::size_type comma = text.find(',', begin);
    const std::string item = Trim(text.substr(begin, comma == std::string::npos ? std::string::npos
                                                                                 : comma - begin));
    double value = 0;
    std::string unit;
    if (!SplitNumber(item, &value, &unit) || !unit.empty() || !(value > 0 && value <= 1048576.0))
      return Invalid("--bucket-sweep '" + Printable(text) + "': '" + Printable(item) +
                     "' is not a bucket cap in MiB in (0, 1048576]");
    caps.push_back(value);
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  std::sort(caps.begin(), caps.end());
  caps.erase(std::unique(caps.begin(), caps.end()), caps.end());
  if (caps.size() > kMaxSweepCaps)
    return Invalid("--bucket-sweep: " + std::to_string(caps.size()) + " different caps; at most " +
                   std::to_string(kMaxSweepCaps));
  return caps;
}

StatusOr<std::vector<Rebucketed>> RebucketStep(const fb::Plan& root, const fb::Program& program,
                                               const std::vector<double>& seconds,
                                               const std::vector<double>& caps_mb,
                                               double first_bucket_mb) {
  for (double mb : caps_mb)
    if (!(mb > 0 && mb <= 1048576.0))
      return Invalid("--bucket-sweep: a bucket cap of " + Number(mb, 6) +
                     " MiB; caps are in (0, 1048576] MiB");
  if (!(first_bucket_mb > 0 && first_bucket_mb <= 1048576.0))
    return Invalid("--bucket-sweep: a first bucket of " + Number(first_bucket_mb, 6) +
                   " MiB; caps are in (0, 1048576] MiB");
  const auto& commands = *program.commands();
  const int64_t n = commands.size();
  auto buffer = [&](int32_t index) -> const fb::Buffer& {
    return *root.buffers()->Get(static_cast<uint32_t>(index));
  };
  // Every command visited and every operand compared counts against one
  // budget: a real plan finds what it looks for a few commands back, a plan
  // made to be slow stops here.
  constexpr uint64_t kMaxWork = 100'000'000;
  uint64_t work = 0;
  auto spend = [&](uint64_t amount) { return (work += amount) <= kMaxWork; };
  const Status too_large = Invalid(
      "--bucket-sweep: the plan is too large to re-cut (over 10^8 commands and operands visited)");
  // Where each bucket is waited for.
  std::map<int32_t, int64_t> wait_of;
  for (int64_t c = 0; c < n; ++c) {
    const fb::Command& command = *commands.Get(c);
    if (command.op() == fb::Opcode::AllreduceWait && command.collective() != nullptr)
      wait_of.emplace(command.collective()->bucket(), c);
  }
  // The gradients, bucket after bucket as the plan starts them: each with
  // the point after which a bucket holding it may start (the slot after
  // that command; -1 before the first) and the command its reduced value is
  // first waited for at.
  struct Gradient {
    int64_t bytes = 0;
    double wire = 0;
    int64_t anchor = -1, wait = 0;
  };
  std::vector<Gradient> gradients;
  int32_t last_bucket = -1;
  bool any_delayed = false;
  int64_t first_start = -1, last_start = -1;
  for (int64_t c = 0; c < n; ++c) {
    const fb::Command& command = *commands.Get(c);
    if (command.op() != fb::Opcode::AllreduceStart) continue;
    const fb::CollectiveAttrs* attrs = command.collective();
    if (attrs == nullptr || command.inputs() == nullptr) continue;  // the loader refuses both
    if (attrs->sparse() || attrs->reduction() != fb::Reduction::Mean)
      return Invalid(
          "--bucket-sweep: the plan's bucket " + std::to_string(attrs->bucket()) + " is " +
          (attrs->sparse() ? "sparse (--grad-compression=topk)"
                           : "a sum (--grad-compression=powersgd's factors)") +
          "; the sweep re-cuts plain gradient buckets: sweep a plan compiled without "
          "compression, then compile this one at the cap it finds");
    if (attrs->bucket() <= last_bucket)
      return Invalid("--bucket-sweep: the plan starts bucket " + std::to_string(attrs->bucket()) +
                     " after bucket " + std::to_string(last_bucket) +
                     " (blocking allreduces, as --sync-bn's, or buckets out of order); the sweep "
                     "re-cuts gradient buckets only: sweep a plan compiled without --sync-bn");
    last_bucket = attrs->bucket();
    if (first_start < 0) first_start = c;
    last_start = c;
    auto wait = wait_of.find(attrs->bucket());
    if (wait == wait_of.end() || wait->second <= c) continue;  // the loader refuses it
    int64_t bucket_ready = -1;
    for (int32_t index : *command.inputs()) {
      const fb::Buffer& g = buffer(index);
      // The last command before the start that writes a byte of it or reads
      // one (batch norm's input gradient reads its weight's gradient): the
      // compiler starts a bucket after both.
      int64_t ready = -1;
      for (int64_t j = c - 1; j >= 0 && ready < 0; --j) {
        if (!spend(1)) return too_large;
        const fb::Command& user = *commands.Get(j);
        if (IsCollective(user.op())) continue;
        for (const auto* list : {user.outputs(), user.inputs()}) {
          if (list == nullptr) continue;
          if (!spend(list->size())) return too_large;
          for (uint32_t k = 0; k < list->size() && ready < 0; ++k) {
            const fb::Buffer& o = buffer(list->Get(k));
            if (o.region() == g.region() && o.offset() < g.offset() + g.size() &&
                g.offset() < o.offset() + o.size())
              ready = j;
          }
        }
      }
      bucket_ready = std::max(bucket_ready, ready);
      Gradient gradient;
      gradient.bytes = static_cast<int64_t>(g.size());
      const uint64_t element = DTypeBytes(g.dtype());
      const bool narrowed = g.dtype() == fb::DType::F32 &&
                            (attrs->wire() == fb::DType::F16 || attrs->wire() == fb::DType::BF16);
      gradient.wire = element == 0 ? 0.0
                                   : static_cast<double>(g.size() / element) *
                                         (narrowed ? 2.0 : static_cast<double>(element));
      gradient.anchor = ready;
      // Waited for before the first command after the plan's wait that
      // reads it (its update): a bucket cut from it waits no earlier.
      gradient.wait = wait->second;
      for (int64_t j = wait->second + 1; j < n && gradient.wait == wait->second; ++j) {
        if (!spend(1)) return too_large;
        const fb::Command& user = *commands.Get(j);
        if (IsCollective(user.op()) || user.inputs() == nullptr) continue;
        if (!spend(user.inputs()->size())) return too_large;
        for (int32_t in : *user.inputs()) {
          const fb::Buffer& o = buffer(in);
          if (o.region() == g.region() && o.offset() < g.offset() + g.size() &&
              g.offset() < o.offset() + o.size()) {
            gradient.wait = j;
            break;
          }
        }
      }
      gradients.push_back(gradient);
    }
    // Whether the plan starts this bucket later than its gradients allow.
    bool delayed = false;
    for (int64_t j = bucket_ready + 1; j < c && !delayed; ++j) {
      if (!spend(1)) return too_large;
      delayed = !IsCollective(commands.Get(j)->op());
    }
    any_delayed = any_delayed || delayed;
  }
  if (gradients.empty())
    return Invalid("--bucket-sweep: the plan averages no gradients (compiled with "
                   "--no-data-parallel?)");
  // A plan that starts its buckets back to back, later than their gradients
  // allow, starts them all after backward (--no-allreduce-overlap): so do
  // its re-cuts. (Otherwise a bucket started late for a reader of its own
  // gradient is placed by the touches above.)
  bool back_to_back = true;
  for (int64_t j = first_start + 1; j < last_start && back_to_back; ++j) {
    if (!spend(1)) return too_large;
    back_to_back = IsCollective(commands.Get(j)->op());
  }
  if (any_delayed && back_to_back)
    for (Gradient& g : gradients) g.anchor = first_start - 1;

  std::vector<Rebucketed> results;
  for (double bucket_mb : caps_mb) {
    // graphc-data-parallel's cut: a bucket is closed when the next gradient
    // would overflow its cap (one larger than the cap gets a bucket of its
    // own).
    constexpr size_t kMaxBucketTensors = 1024;
    std::vector<std::vector<size_t>> buckets;
    int64_t fill = 0;
    for (size_t i = 0; i < gradients.size(); ++i) {
      const double cap_mb = buckets.size() == 1 ? first_bucket_mb : bucket_mb;
      const int64_t cap = static_cast<int64_t>(cap_mb * 1024.0 * 1024.0);
      if (buckets.empty() || fill + gradients[i].bytes > cap ||
          buckets.back().size() == kMaxBucketTensors) {
        buckets.emplace_back();
        fill = 0;
      }
      buckets.back().push_back(i);
      fill += gradients[i].bytes;
    }
    // Starts and waits in the slots after each command (slot 0: before the
    // first); in a slot, starts come before waits.
    std::vector<std::vector<StepEvent>> starts(n + 1), waits(n + 1);
    Rebucketed result;
    int64_t previous_start = -1;
    for (size_t b = 0; b < buckets.size(); ++b) {
      int64_t start = previous_start, wait = n;
      double wire = 0, bytes = 0;
      for (size_t i : buckets[b]) {
        start = std::max(start, gradients[i].anchor);
        wait = std::min(wait, gradients[i].wait - 1);
        wire += gradients[i].wire;
        bytes += static_cast<double>(gradients[i].bytes);
      }
      wait = std::max(wait, start);
      previous_start = start;
      starts[start + 1].push_back({StepEvent::kStart, 0, static_cast<int>(b), wire});
      waits[wait + 1].push_back({StepEvent::kWait, 0, static_cast<int>(b), 0});
      result.bucket_bytes.push_back(bytes);
    }
    double compute = 0;
    auto emit = [&](int64_t slot) {
      if (starts[slot].empty() && waits[slot].empty()) return;
      if (compute > 0) result.events.push_back({StepEvent::kCompute, compute, -1, 0});
      compute = 0;
      for (const auto* list : {&starts[slot], &waits[slot]})
        result.events.insert(result.events.end(), list->begin(), list->end());
    };
    emit(0);
    for (int64_t c = 0; c < n; ++c) {
      if (!IsCollective(commands.Get(c)->op()))
        compute += static_cast<size_t>(c) < seconds.size() ? seconds[c] : 0.0;
      emit(c + 1);
    }
    if (compute > 0) result.events.push_back({StepEvent::kCompute, compute, -1, 0});
    results.push_back(std::move(result));
  }
  return results;
}

namespace {

std::string KernelNameOf(const fb::Plan& root, const fb::Command& command) {
  if (command.op() != fb::Opcode::Kernel || root.kernels() == nullptr || command.kernel() < 0 ||
      static_cast<uint32_t>(command.kernel()) >= root.kernels()->size())
    return "";
  return StringOf(root.kernels()->Get(static_cast<uint32_t>(command.kernel()))->name());
}

}  // namespace

nlohmann::json CommandProfileJson(const fb::Plan& root, const fb::Program& program,
                                  const std::vector<double>& ms_per_step) {
  nlohmann::json commands = nlohmann::json::array();
  for (uint32_t c = 0; c < program.commands()->size(); ++c) {
    const fb::Command& command = *program.commands()->Get(c);
    commands.push_back({fb::EnumNameOpcode(command.op()), KernelNameOf(root, command),
                        StringOf(command.location()),
                        c < ms_per_step.size() ? ms_per_step[c] : 0.0});
  }
  return commands;
}

StatusOr<MeasuredStep> ReadStepProfile(const std::string& path, const fb::Plan& root,
                                       const fb::Program& program) {
  const std::string shown = "--step-profile " + Printable(path);
  auto bad = [&](const std::string& why) { return Status(ErrorCode::kInvalidArgument, shown + ": " + why); };
  struct stat st;
  if (stat(path.c_str(), &st) != 0)
    return Status(ErrorCode::kIo, shown + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return Status(ErrorCode::kIo, shown + ": not a regular file");
  if (st.st_size > (64 << 20)) return bad("larger than 64 MiB; not a graphrun report");
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in && !in.eof()) return Status(ErrorCode::kIo, shown + ": cannot read it");
  nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return bad("not JSON (a graphrun --report file is)");
  auto number = [&](const char* key, double* out) -> Status {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number())
      return bad(std::string("has no number '") + key + "' (not a graphrun --report file?)");
    *out = it->get<double>();
    return Status::Ok();
  };
  MeasuredStep m;
  m.source = path;
  double batch = 0, world = 1;
  GRAPHC_RETURN_IF_ERROR(number("step_ms_median", &m.step_ms));
  GRAPHC_RETURN_IF_ERROR(number("batch_size", &batch));
  if (j.contains("world_size")) GRAPHC_RETURN_IF_ERROR(number("world_size", &world));
  if (world != 1)
    return bad("was measured on " + Number(world, 6) +
               " ranks; the model starts from one rank's step (graphrun PLAN --profile --report "
               "FILE without --nodes)");
  if (!(m.step_ms > 0) || !(m.step_ms <= 1e9))
    return bad("its step_ms_median is not a time in (0, 1e9] ms (did the run time any step?)");
  if (!(batch >= 1 && batch <= double(int64_t{1} << 40)) || batch != std::floor(batch))
    return bad("its batch_size is not a batch");
  m.batch = static_cast<int64_t>(batch);
  if (m.batch != root.batch_size())
    return bad("was measured at batch " + Number(batch, 12) + ", the plan's batch is " +
               std::to_string(root.batch_size()));
  if (auto it = j.find("device"); it != j.end() && it->is_string()) m.device = it->get<std::string>();
  if (auto it = j.find("step_ms_jitter"); it != j.end()) {
    if (!it->is_number() || !(it->get<double>() >= 0 && it->get<double>() <= 1e9))
      return bad("its step_ms_jitter is not a time in [0, 1e9] ms");
    m.jitter_ms = it->get<double>();
  }
  auto profile = j.find("profile");
  if (profile == j.end() || !profile->is_object() || !profile->contains("commands") ||
      !(*profile)["commands"].is_array())
    return bad("has no per-command profile: write it with graphrun PLAN --profile --report FILE");
  const nlohmann::json& commands = (*profile)["commands"];
  // The report's computation, collectives left out, against the plan's.
  std::vector<std::pair<size_t, const nlohmann::json*>> measured;
  for (size_t i = 0; i < commands.size(); ++i) {
    const nlohmann::json& e = commands[i];
    if (!e.is_array() || e.size() != 4 || !e[0].is_string() || !e[1].is_string() ||
        !e[2].is_string() || !e[3].is_number() || !std::isfinite(e[3].get<double>()) ||
        e[3].get<double>() < 0)
      return bad("profile command " + std::to_string(i) +
                 " is not [opcode, kernel, location, ms] with a time of 0 or more");
    if (e[3].get<double>() > 1e9)
      return bad("profile command " + std::to_string(i) + " takes over 1e9 ms");
    const std::string op = e[0].get<std::string>();
    if (op != "AllreduceStart" && op != "AllreduceWait") measured.emplace_back(i, &e);
  }
  m.command_ms.assign(program.commands()->size(), 0.0);
  size_t next = 0;
  for (uint32_t c = 0; c < program.commands()->size(); ++c) {
    const fb::Command& command = *program.commands()->Get(c);
    if (IsCollective(command.op())) continue;
    const std::string op = fb::EnumNameOpcode(command.op());
    const std::string kernel = KernelNameOf(root, command);
    const std::string location = StringOf(command.location());
    if (next == measured.size())
      return bad("was measured on another plan: it ends where this plan's command " +
                 std::to_string(c) + " (" + op + " " + Printable(kernel + " " + location) +
                 ") is still to come");
    const nlohmann::json& e = *measured[next].second;
    if (e[0].get<std::string>() != op || e[1].get<std::string>() != kernel ||
        e[2].get<std::string>() != location)
      return bad("was measured on another plan: its command " +
                 std::to_string(measured[next].first) + " is " +
                 Printable(e[0].get<std::string>() + " " + e[1].get<std::string>() + " " +
                           e[2].get<std::string>()) +
                 ", this plan's command " + std::to_string(c) + " is " +
                 Printable(op + " " + kernel + " " + location));
    m.command_ms[c] = e[3].get<double>();
    ++next;
  }
  if (next != measured.size())
    return bad("was measured on another plan: it has " + std::to_string(measured.size() - next) +
               " more computing commands than this plan");
  return m;
}

StatusOr<Cluster> ClusterOf(const PredictOptions& options, const std::string& device,
                            std::string* algorithm) {
  Cluster cluster;
  cluster.ranks_per_node = options.ranks_per_node;
  StatusOr<Link> intra = ParseLink(options.intra_link, "--intra-link");
  if (!intra.ok()) return intra.status();
  cluster.intra = *intra;
  bool across_nodes = false;
  if (std::set<int64_t>(options.ranks.begin(), options.ranks.end()).size() > kMaxPredictSizes)
    return Invalid("--predict: more than " + std::to_string(kMaxPredictSizes) +
                   " different numbers of ranks");
  for (int64_t n : options.ranks) {
    if (n < 1) return Invalid("--predict: " + std::to_string(n) + " is not a number of ranks");
    if (n > options.ranks_per_node && n % options.ranks_per_node != 0)
      return Invalid("--predict " + std::to_string(n) + ": not a whole number of nodes of " +
                     std::to_string(options.ranks_per_node) + " ranks (--ranks-per-node)");
    across_nodes |= n > options.ranks_per_node;
  }
  if (!options.link.empty()) {
    StatusOr<Link> inter = ParseLink(options.link, "--link");
    if (!inter.ok()) return inter.status();
    cluster.inter = *inter;
  } else if (across_nodes) {
    return Invalid("--predict: ranks on several nodes need the link between them: --link "
                   "BANDWIDTH[,LATENCY], e.g. --link 10gbit,50us");
  }
  // The communicator the run would use: NCCL (a ring, one bucket at a time on
  // its stream) on a GPU, Open MPI (Rabenseifner's schedule, every bucket in
  // flight at once) on the CPU; naming the algorithm names the communicator.
  *algorithm = options.algorithm;
  if (*algorithm == "auto") *algorithm = device == "cuda" ? "ring" : "rabenseifner";
  if (*algorithm == "ring") {
    cluster.algorithm = Algorithm::kRing;
  } else if (*algorithm == "rabenseifner") {
    cluster.algorithm = Algorithm::kRabenseifner;
  } else {
    return Invalid("--predict-algorithm " + Printable(options.algorithm) +
                   ": none of auto, ring, rabenseifner");
  }
  cluster.sharing = *algorithm == "ring" ? Sharing::kInTurn : Sharing::kShared;
  if (!(options.busy_share > 0 && options.busy_share <= 1))
    return Invalid("--busy-share " + Number(options.busy_share, 6) + ": not in (0, 1]");
  cluster.busy_share = options.busy_share;
  if (!(options.compute_share > 0 && options.compute_share <= 1))
    return Invalid("--compute-share " + Number(options.compute_share, 6) + ": not in (0, 1]");
  cluster.compute_share = options.compute_share;
  if (!(options.step_jitter_ms < 0) && !(options.step_jitter_ms <= 1e9))
    return Invalid("--step-jitter: not a time in [0, 1e9] ms");
  if (!(options.step_ms >= 0 && options.step_ms <= 1e9))
    return Invalid("--step-ms " + Number(options.step_ms, 6) + ": not a time in (0, 1e9] ms");
  return cluster;
}

Status CheckPredictOptions(const PredictOptions& options) {
  std::string algorithm;
  return ClusterOf(options, "", &algorithm).status();
}

StatusOr<nlohmann::json> PredictScaling(const fb::Plan& root, const fb::Program& program,
                                        const MeasuredStep& measured,
                                        const PredictOptions& asked, std::ostream& out) {
  // The sizes in ascending order, each once.
  PredictOptions options = asked;
  std::sort(options.ranks.begin(), options.ranks.end());
  options.ranks.erase(std::unique(options.ranks.begin(), options.ranks.end()),
                      options.ranks.end());
  std::string algorithm;
  StatusOr<Cluster> made = ClusterOf(options, measured.device, &algorithm);
  if (!made.ok()) return made.status();
  Cluster cluster = *made;

  // The compute as profiled, scaled so that one rank's step is the measured
  // median (the profile times each command alone; what lies between them,
  // the host's share of a step, is spread in proportion).
  double profiled_ms = 0;
  for (uint32_t c = 0; c < program.commands()->size(); ++c)
    if (!IsCollective(program.commands()->Get(c)->op()) && c < measured.command_ms.size())
      profiled_ms += measured.command_ms[c];
  if (!(profiled_ms >= 1e-6))
    return Invalid("the profile of " + Printable(measured.source) +
                   " gives the step no time (under a nanosecond)");
  const bool given = options.step_ms > 0;
  const double step_ms = given ? options.step_ms : measured.step_ms;
  const double scale = step_ms / profiled_ms;
  std::vector<double> seconds(measured.command_ms.size());
  for (size_t c = 0; c < seconds.size(); ++c) seconds[c] = measured.command_ms[c] * scale / 1000;
  const std::vector<StepEvent> events = StepEventsOf(root, program, seconds);
  // Stragglers: the measured spread unless one is given; a step given by
  // --step-ms comes without a spread of its own.
  const double jitter_ms = options.step_jitter_ms >= 0 ? options.step_jitter_ms
                           : given                      ? 0.0
                                                        : measured.jitter_ms;
  cluster.step_jitter_seconds = jitter_ms / 1000;
  int buckets = 0;
  double bucket_bytes = 0;
  for (const StepEvent& e : events)
    if (e.kind == StepEvent::kStart) {
      ++buckets;
      bucket_bytes += e.bytes;
    }

  const double batch = static_cast<double>(root.batch_size());
  nlohmann::json j = {
      {"measured_step_ms", measured.step_ms},
      {"step_ms", step_ms},
      {"step_ms_given", given},
      {"profiled_step_ms", profiled_ms},
      {"measured_on", measured.device},
      {"measured_from", measured.source},
      {"batch_per_rank", root.batch_size()},
      {"buckets", buckets},
      {"wire_mib_per_step", bucket_bytes / 1048576.0},
      {"algorithm", algorithm},
      {"buckets_share_the_link", cluster.sharing == Sharing::kShared},
      {"ranks_per_node", cluster.ranks_per_node},
      {"busy_share", cluster.busy_share},
      {"compute_share", cluster.compute_share},
      {"step_jitter_ms", jitter_ms},
      {"intra_link",
       {{"bytes_per_second", cluster.intra.bytes_per_second},
        {"latency_seconds", cluster.intra.latency_seconds}}},
  };
  if (!options.link.empty())
    j["link"] = {{"bytes_per_second", cluster.inter.bytes_per_second},
                 {"latency_seconds", cluster.inter.latency_seconds}};

  const std::ios::fmtflags flags = out.flags();
  out << "prediction for " << PrintableOf(root.model()) << ", batch " << root.batch_size()
      << " per rank, from " << (given ? "a given" : "a measured") << " step of "
      << Millis(step_ms) << " ms (" << std::fixed;
  if (given)
    out << "--step-ms; the profile of " << Printable(measured.source) << ", measured on "
        << (measured.device.empty() ? "?" : measured.device) << ", places its commands";
  else
    out << (measured.device.empty() ? "?" : measured.device) << ", " << Printable(measured.source)
        << "; each command's profiled time x" << std::setprecision(3) << scale;
  out << "):\n"
      << "  " << buckets << " gradient bucket" << (buckets == 1 ? "" : "s") << ", "
      << std::setprecision(1) << bucket_bytes / 1048576.0 << " MiB on the wire per rank per step; "
      << (algorithm == "ring" ? "ring allreduce, one bucket at a time (NCCL)"
                              : "Rabenseifner's allreduce, buckets sharing the link (Open MPI)")
      << "\n  links: "
      << (options.link.empty() ? std::string("none between nodes")
                               : "between nodes " + DescribeLink(cluster.inter))
      << "; within a node " << DescribeLink(cluster.intra) << "; " << cluster.ranks_per_node
      << " rank" << (cluster.ranks_per_node == 1 ? "" : "s") << " per node";
  if (cluster.busy_share < 1)
    out << "; beside compute, allreduces at " << std::setprecision(2) << cluster.busy_share
        << " of their speed";
  if (cluster.compute_share < 1)
    out << "; beside allreduces, compute at " << std::setprecision(2) << cluster.compute_share
        << " of its speed";
  if (jitter_ms > 0)
    out << "; stragglers: steps spread by " << std::setprecision(1) << jitter_ms << " ms";
  out << "\n";
  out << "     ranks    nodes       step ms      images/sec    speedup  efficiency      comm ms"
         "   exposed ms\n";
  const double one_rank_rate = batch * 1000.0 / step_ms;
  for (int64_t n : options.ranks) {
    cluster.ranks = n;
    StatusOr<StepPrediction> p = SimulateStep(events, cluster);
    if (!p.ok()) return p.status();
    const double rate = static_cast<double>(n) * batch / p->step_seconds;
    const double speedup = rate / one_rank_rate;
    const int64_t nodes = (n + options.ranks_per_node - 1) / options.ranks_per_node;
    // Every column after a space of its own, so that none runs into the next.
    out << ' ' << std::setw(9) << n << ' ' << std::setw(8) << nodes << std::setprecision(1) << ' '
        << std::setw(13) << p->step_seconds * 1000 << std::setprecision(2) << ' ' << std::setw(15)
        << rate << ' ' << std::setw(10) << speedup << std::setprecision(3) << ' ' << std::setw(11)
        << speedup / static_cast<double>(n) << std::setprecision(1) << ' ' << std::setw(12)
        << p->comm_seconds * 1000 << ' ' << std::setw(12) << p->exposed_seconds * 1000 << "\n";
    j["rows"].push_back({{"ranks", n},
                         {"nodes", nodes},
                         {"step_ms", p->step_seconds * 1000},
                         {"total_images_per_sec", rate},
                         {"speedup", speedup},
                         {"scaling_efficiency", speedup / static_cast<double>(n)},
                         {"comm_ms", p->comm_seconds * 1000},
                         {"exposed_comm_ms", p->exposed_seconds * 1000},
                         {"straggler_ms", p->straggler_seconds * 1000},
                         {"wire_mib_per_rank", p->wire_bytes / 1048576.0}});
  }
  if (!options.bucket_sweep_mb.empty()) {
    // Each cap's step on every size; the best is the shortest step, and of
    // caps within 0.1% of it the largest (fewer, larger messages).
    struct Row {
      double cap_mb;
      size_t buckets;
      double wire_mib;
      std::vector<StepPrediction> steps;
    };
    std::vector<Row> rows;
    StatusOr<std::vector<Rebucketed>> cuts =
        RebucketStep(root, program, seconds, options.bucket_sweep_mb, options.first_bucket_mb);
    if (!cuts.ok()) return cuts.status();
    for (size_t i = 0; i < cuts->size(); ++i) {
      const double cap = options.bucket_sweep_mb[i];
      const Rebucketed* cut = &(*cuts)[i];
      Row row{cap, cut->bucket_bytes.size(), 0, {}};
      for (const StepEvent& e : cut->events)
        if (e.kind == StepEvent::kStart) row.wire_mib += e.bytes / 1048576.0;
      for (int64_t n : options.ranks) {
        cluster.ranks = n;
        StatusOr<StepPrediction> p = SimulateStep(cut->events, cluster);
        if (!p.ok()) return p.status();
        row.steps.push_back(*p);
      }
      rows.push_back(row);
    }
    out << "bucket sweep: the plan's gradients re-cut at each cap (the first bucket at most "
        << ExactNumber(options.first_bucket_mb) << " MiB, as graphc compile --bucket-mb CAP cuts them); images/sec (efficiency):\n"
        << "   cap MiB  buckets";
    for (int64_t n : options.ranks) {
      const std::string head = std::to_string(n) + (n == 1 ? " rank" : " ranks");
      out << ' ' << std::setw(22) << head;
    }
    out << "\n";
    std::vector<size_t> best(options.ranks.size(), 0);
    for (size_t k = 0; k < options.ranks.size(); ++k) {
      double shortest = rows[0].steps[k].step_seconds;
      for (const Row& row : rows) shortest = std::min(shortest, row.steps[k].step_seconds);
      bool found = false;
      for (size_t r = 0; r < rows.size(); ++r)
        if (rows[r].steps[k].step_seconds <= shortest * (1 + 1e-3) &&
            (!found || rows[r].cap_mb > rows[best[k]].cap_mb)) {
          best[k] = r;
          found = true;
        }
    }
    nlohmann::json sweep = {{"first_bucket_mb", options.first_bucket_mb}};
    for (size_t r = 0; r < rows.size(); ++r) {
      const Row& row = rows[r];
      out << ' ' << std::setw(9) << ExactNumber(row.cap_mb) << ' ' << std::setw(8) << row.buckets;
      nlohmann::json jr = {{"bucket_mb", row.cap_mb},
                           {"buckets", row.buckets},
                           {"wire_mib_per_step", row.wire_mib}};
      for (size_t k = 0; k < options.ranks.size(); ++k) {
        const int64_t n = options.ranks[k];
        const StepPrediction& p = row.steps[k];
        const double rate = static_cast<double>(n) * batch / p.step_seconds;
        const double efficiency = rate / one_rank_rate / static_cast<double>(n);
        std::ostringstream cell;
        cell << std::fixed << std::setprecision(2) << rate << " (" << std::setprecision(3)
             << efficiency << ")" << (best[k] == r ? '*' : ' ');
        out << ' ' << std::setw(22) << cell.str();
        jr["predictions"].push_back({{"ranks", n},
                                     {"step_ms", p.step_seconds * 1000},
                                     {"total_images_per_sec", rate},
                                     {"scaling_efficiency", efficiency},
                                     {"exposed_comm_ms", p.exposed_seconds * 1000}});
      }
      out << "\n";
      sweep["rows"].push_back(jr);
    }
    for (size_t k = 0; k < options.ranks.size(); ++k) {
      const Row& row = rows[best[k]];
      const int64_t n = options.ranks[k];
      if (n == 1) continue;  // one rank allreduces nothing: every cap is the same
      const double rate = static_cast<double>(n) * batch / row.steps[k].step_seconds;
      out << "  best for " << n << " ranks: graphc compile --bucket-mb "
          << ExactNumber(row.cap_mb) << " (" << row.buckets
          << " bucket" << (row.buckets == 1 ? "" : "s") << ", " << std::fixed
          << std::setprecision(2) << rate << " images/sec";
      const double own = j["rows"][k]["total_images_per_sec"].get<double>();
      out << ", " << std::showpos << std::setprecision(1) << (rate / own - 1) * 100
          << std::noshowpos << "% over this plan's buckets)\n";
      sweep["best"].push_back({{"ranks", n},
                               {"bucket_mb", row.cap_mb},
                               {"buckets", row.buckets},
                               {"total_images_per_sec", rate},
                               {"over_this_plan", rate / own}});
    }
    j["bucket_sweep"] = sweep;
  }
  out.flags(flags);
  return j;
}

}  // namespace graphc::runtime
