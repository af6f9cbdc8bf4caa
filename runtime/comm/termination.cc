// The fatal report and the SIGTERM handler. The handler may run on any thread
// at any moment, so it may only call async-signal-safe functions: it writes a
// line from one of two static buffers. The communication thread formats each
// new line into the buffer that is not published, then publishes it with one
// atomic store; once a report has begun it stops writing, so the buffer the
// handler reads is never written while it reads.

#include "runtime/comm/termination.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "runtime/comm/communicator.h"

namespace graphc::runtime::comm {
namespace {

char g_lines[2][kTerminationLineMax + 2];
std::atomic<int> g_published{-1};  // index into g_lines, -1: none
// Set by whoever reports first (a fatal error or the handler).
std::atomic<bool> g_reporting{false};
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<bool>::is_always_lock_free,
              "the SIGTERM handler needs lock-free atomics");

void WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
}

void OnSigterm(int) {
  const int saved_errno = errno;
  if (g_reporting.exchange(true)) {  // a report is under way; it exits the process
    errno = saved_errno;
    return;
  }
  const int index = g_published.load();
  if (index < 0) {
    // No MPI communicator: SIGTERM's default action, as if never handled.
    struct sigaction action;
    std::memset(&action, 0, sizeof action);
    action.sa_handler = SIG_DFL;
    sigaction(SIGTERM, &action, nullptr);
    raise(SIGTERM);  // pending until this handler returns
    errno = saved_errno;
    return;
  }
  const char* line = g_lines[index];
  size_t size = 0;
  while (line[size] != '\0') ++size;
  WriteAll(STDERR_FILENO, line, size);
  _exit(kCommTerminatedExitCode);
}

}  // namespace

void PublishTerminationLine(const std::string& line) {
  if (g_reporting.load()) return;
  const int next = g_published.load() == 0 ? 1 : 0;
  const size_t size = std::min(line.size(), kTerminationLineMax);
  std::memcpy(g_lines[next], line.data(), size);
  g_lines[next][size] = '\n';
  g_lines[next][size + 1] = '\0';
  g_published.store(next);
}

void WithdrawTerminationLine() { g_published.store(-1); }

void ExitWithReport(const std::string& line, int exit_code) {
  if (g_reporting.exchange(true)) {
    for (;;) pause();  // the first reporter is exiting the process
  }
  std::fflush(stdout);
  std::fflush(stderr);
  const std::string text = line + "\n";
  WriteAll(STDERR_FILENO, text.data(), text.size());
  _exit(exit_code);
}

std::string RankList(const std::vector<int>& ranks) {
  constexpr size_t kShown = 16;
  std::string out;
  for (size_t i = 0; i < ranks.size() && i < kShown; ++i) {
    if (i > 0) out += ',';
    out += std::to_string(ranks[i]);
  }
  if (ranks.size() > kShown) out += ",... (" + std::to_string(ranks.size()) + " ranks)";
  return out;
}

}  // namespace graphc::runtime::comm

namespace graphc::runtime {

void InstallTerminationHandler() {
  struct sigaction action;
  std::memset(&action, 0, sizeof action);
  action.sa_handler = comm::OnSigterm;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
}

}  // namespace graphc::runtime
