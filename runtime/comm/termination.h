// How the MPI communicator ends a process whose job is broken: one line on
// stderr, then _exit, because after a timeout or an MPI error the library's
// state is unusable and neither a Status nor MPI_Finalize would get anywhere.
// Also the state behind InstallTerminationHandler(): the line a SIGTERM prints,
// kept formatted by the communication thread so that the handler only writes
// it. Published for the device collectives (NCCL), whose watchdog ends a
// broken job the same way.

#ifndef GRAPHC_RUNTIME_COMM_TERMINATION_H_
#define GRAPHC_RUNTIME_COMM_TERMINATION_H_

#include <string>
#include <vector>

namespace graphc::runtime::comm {

// The longest line a SIGTERM prints; longer lines are cut.
inline constexpr size_t kTerminationLineMax = 1024;

// Sets the line the SIGTERM handler prints (a newline is added). One writer
// only: the communication thread. Withdrawn, SIGTERM keeps its default action.
void PublishTerminationLine(const std::string& line);
void WithdrawTerminationLine();

// Writes `line` and a newline to stderr and _exits with `exit_code`; the first
// thread to get here does, any other (and a SIGTERM) waits for it to.
[[noreturn]] void ExitWithReport(const std::string& line, int exit_code);

// "1", "1,3,4", or the first 16 and "... (20 ranks)".
std::string RankList(const std::vector<int>& ranks);

}  // namespace graphc::runtime::comm

#endif  // GRAPHC_RUNTIME_COMM_TERMINATION_H_
