// graphc-linkem: a network of "nodes" on one machine with a bandwidth and a
// delay, for the scaling benchmarks where tc's netem is not available (a
// kernel built without it). Each port is a TUN device; the benchmark moves
// each into a node's network namespace and gives it the address named here.
// IPv4 packets one port's namespace sends to another port's address cross
// the emulated star (link_schedule.h): the source's uplink at the link's
// bandwidth, the delay, the destination's downlink.
//
//   graphc-linkem --link 1gbit,10ms [--queue-ms 50] NAME=ADDRESS...
//
// It prints one "ready" line once every device exists, runs until SIGINT or
// SIGTERM, then prints what each port sent, received and dropped. The devices
// vanish with the process. Needs CAP_NET_ADMIN (root). Every error is one
// line on stderr and exit code 1.

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "runtime/train/scaling_model.h"
#include "tools/linkem/link_schedule.h"

namespace {

volatile sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

[[noreturn]] void Die(const std::string& message) {
  std::cerr << "graphc-linkem: " << message << "\n";
  std::exit(1);
}

double Now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

struct Packet {
  double due;
  std::vector<uint8_t> bytes;
};

struct Port {
  std::string name;
  uint32_t address = 0;  // network order
  int fd = -1;
  std::deque<Packet> to_deliver;  // due times ascending (link_schedule.h)
  uint64_t sent = 0, sent_bytes = 0, received = 0, dropped_queue = 0, unroutable = 0,
           write_failed = 0;
};

int OpenTun(const std::string& name) {
  const int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) Die("cannot open /dev/net/tun: " + std::string(std::strerror(errno)));
  ifreq request;
  std::memset(&request, 0, sizeof(request));
  request.ifr_flags = IFF_TUN | IFF_NO_PI;
  std::memcpy(request.ifr_name, name.data(), name.size());
  if (ioctl(fd, TUNSETIFF, &request) < 0)
    Die("cannot create the TUN device '" + name + "': " + std::strerror(errno) +
        (errno == EPERM ? " (needs root)" : errno == EBUSY ? " (the name is taken)" : ""));
  return fd;
}

}  // namespace

int main(int argc, char** argv) {
  std::string link_text;
  double queue_ms = 50;
  std::vector<std::string> port_texts;
  CLI::App app{"graphc-linkem: nodes joined by an emulated link (bandwidth and delay) "
               "through TUN devices"};
  app.add_option("--link", link_text,
                 "BANDWIDTH[,DELAY] of each node's link, each direction, as graphrun --predict "
                 "--link reads it (e.g. 1gbit,10ms); DELAY is one way")
      ->required();
  app.add_option("--queue-ms", queue_ms,
                 "an uplink drops packets that would wait longer than this (tail drop)")
      ->check(CLI::Range(0.1, 10000.0));
  app.add_option("ports", port_texts, "NAME=IPV4 ADDRESS, one per node (2 to 64)")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  auto link = graphc::runtime::ParseLink(link_text, "--link");
  if (!link.ok()) Die(link.status().ToString());

  std::vector<Port> ports;
  std::map<uint32_t, size_t> by_address;
  if (port_texts.size() < 2 || port_texts.size() > 64)
    Die("needs 2 to 64 ports, got " + std::to_string(port_texts.size()));
  for (const std::string& text : port_texts) {
    const size_t eq = text.find('=');
    if (eq == std::string::npos || eq == 0 || eq >= IFNAMSIZ)
      Die("a port is NAME=ADDRESS with a NAME of 1 to " + std::to_string(IFNAMSIZ - 1) +
          " characters, got '" + text + "'");
    Port port;
    port.name = text.substr(0, eq);
    in_addr address;
    if (inet_pton(AF_INET, text.c_str() + eq + 1, &address) != 1)
      Die("'" + text.substr(eq + 1) + "' (port " + port.name + ") is not an IPv4 address");
    port.address = address.s_addr;
    if (!by_address.emplace(port.address, ports.size()).second)
      Die("two ports have the address " + text.substr(eq + 1));
    ports.push_back(std::move(port));
  }
  for (Port& port : ports) port.fd = OpenTun(port.name);

  // Signals only while waiting (ppoll unblocks them), so that a stop is never
  // lost between a check and the wait.
  sigset_t blocked, waiting;
  sigemptyset(&blocked);
  sigaddset(&blocked, SIGINT);
  sigaddset(&blocked, SIGTERM);
  sigprocmask(SIG_BLOCK, &blocked, &waiting);
  sigdelset(&waiting, SIGINT);
  sigdelset(&waiting, SIGTERM);
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_handler = OnSignal;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);  // wake on time (default slack: 50 us)

  const double rate = link->bytes_per_second, delay = link->latency_seconds;
  graphc::linkem::LinkSchedule schedule(static_cast<int>(ports.size()), rate, delay,
                                        std::max(65536.0, rate * queue_ms / 1000));
  std::printf("graphc-linkem: ready: %zu ports, %s each way\n", ports.size(),
              graphc::runtime::DescribeLink(*link).c_str());
  std::fflush(stdout);

  std::vector<pollfd> polls(ports.size());
  for (size_t i = 0; i < ports.size(); ++i) polls[i] = {ports[i].fd, POLLIN, 0};
  std::vector<uint8_t> buffer(65536);
  while (!g_stop) {
    // Deliver what is due; then wait for a packet or the next due time.
    double now = Now(), next = INFINITY;
    for (Port& port : ports) {
      while (!port.to_deliver.empty() && port.to_deliver.front().due <= now) {
        const std::vector<uint8_t>& bytes = port.to_deliver.front().bytes;
        if (write(port.fd, bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size()))
          ++port.write_failed;  // the namespace's stack refused it: a loss TCP repairs
        else
          ++port.received;
        port.to_deliver.pop_front();
      }
      if (!port.to_deliver.empty()) next = std::min(next, port.to_deliver.front().due);
    }
    timespec wait{}, *timeout = nullptr;
    if (next < INFINITY) {
      const double left = std::max(0.0, next - now);
      wait.tv_sec = static_cast<time_t>(left);
      wait.tv_nsec = static_cast<long>((left - static_cast<double>(wait.tv_sec)) * 1e9);
      timeout = &wait;
    }
    const int ready = ppoll(polls.data(), polls.size(), timeout, &waiting);
    if (ready < 0) {
      if (errno == EINTR) continue;
      Die(std::string("poll: ") + std::strerror(errno));
    }
    for (size_t i = 0; i < ports.size() && ready > 0; ++i) {
      if (polls[i].revents & (POLLERR | POLLNVAL))
        Die("the TUN device " + ports[i].name + " failed");
      if (!(polls[i].revents & POLLIN)) continue;
      // A bounded batch per port, so that one busy port does not starve the rest.
      for (int batch = 0; batch < 64; ++batch) {
        const ssize_t n = read(ports[i].fd, buffer.data(), buffer.size());
        if (n < 0) {
          if (errno == EAGAIN || errno == EINTR) break;
          Die("reading " + ports[i].name + ": " + std::strerror(errno));
        }
        const size_t size = static_cast<size_t>(n);
        // IPv4 only; anything else (IPv6 neighbour discovery) goes nowhere.
        uint32_t destination = 0;
        if (size < 20 || (buffer[0] >> 4) != 4) {
          ++ports[i].unroutable;
          continue;
        }
        std::memcpy(&destination, buffer.data() + 16, 4);
        auto to = by_address.find(destination);
        if (to == by_address.end() || to->second == i) {
          ++ports[i].unroutable;
          continue;
        }
        auto due = schedule.Offer(Now(), static_cast<int>(i), static_cast<int>(to->second), size);
        if (!due) {
          ++ports[i].dropped_queue;
          continue;
        }
        ++ports[i].sent;
        ports[i].sent_bytes += size;
        ports[to->second].to_deliver.push_back({*due, {buffer.begin(), buffer.begin() + n}});
      }
    }
  }
  for (const Port& port : ports)
    std::printf("graphc-linkem: %s: sent %llu packets (%llu bytes), received %llu; dropped %llu "
                "(queue full), %llu (no such address), %llu (refused by the receiver)\n",
                port.name.c_str(), static_cast<unsigned long long>(port.sent),
                static_cast<unsigned long long>(port.sent_bytes),
                static_cast<unsigned long long>(port.received),
                static_cast<unsigned long long>(port.dropped_queue),
                static_cast<unsigned long long>(port.unroutable),
                static_cast<unsigned long long>(port.write_failed));
  return 0;
}
