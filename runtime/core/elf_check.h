// Checks the x86-64 kernel library a plan embeds before anything hands it to
// the dynamic loader. A plan's CPU kernels are native code: verification cannot
// make a hostile library safe to *run*, but it can make sure that loading it
// runs nothing (no constructors, no IFUNC resolvers, no audit or filter
// libraries, no interpreter, no TLS), that the loader maps only bytes the file
// holds (a truncated library is an error here, not a SIGBUS inside dlopen),
// that it imports only what graphc's kernels import (a few libc/libm
// functions), that no segment is both writable and executable and the stack is
// not executable, and it reads the library's own record of every launch (the
// `graphc_signature_<entry>` strings graphc writes) so the plan loader can tie
// the launch table to the code it launches.
//
// The parser reads only the structures the dynamic loader reads (program
// headers, the dynamic section, the symbol, string and hash tables, the
// relocations), never section headers, and bounds-checks every read.

#ifndef GRAPHC_RUNTIME_CORE_ELF_CHECK_H_
#define GRAPHC_RUNTIME_CORE_ELF_CHECK_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "contract/status.h"

namespace graphc::runtime {

// What a checked library defines.
struct KernelLibrary {
  std::set<std::string> entries;                  // `graphc_kernel_<entry>` functions
  std::map<std::string, std::string> signatures;  // entry -> its launch signature
};

// The prefixes of the symbols graphc exports per launch.
inline constexpr const char* kKernelEntryPrefix = "graphc_kernel_";
inline constexpr const char* kKernelSignaturePrefix = "graphc_signature_";

// Checks `data` as described above; fails with kPlanUnsafeCode naming the
// first problem.
StatusOr<KernelLibrary> CheckKernelLibrary(const uint8_t* data, size_t size);

// The undefined symbols a kernel library may import: what graphc's generated
// code calls (memset for fills, libm for exp/log and the learning-rate
// schedules), and nothing that reaches the file system, the network or the
// process.
const std::set<std::string>& AllowedKernelImports();

}  // namespace graphc::runtime

#endif  // GRAPHC_RUNTIME_CORE_ELF_CHECK_H_
