// The CPU backend: host memory, the plan's x86-64 kernels, oneDNN library
// calls, all on one OpenMP thread pool. Created through backend_factory.h;
// included directly only by its own tests.

#ifndef GRAPHC_RUNTIME_BACKENDS_CPU_CPU_BACKEND_H_
#define GRAPHC_RUNTIME_BACKENDS_CPU_CPU_BACKEND_H_

#include <memory>
#include <string>

#include "contract/status.h"
#include "runtime/core/backend.h"

namespace graphc::runtime {

// The most threads a CPU backend runs on (more once crashed libgomp).
inline constexpr int kMaxCpuThreads = 4096;

// On `threads` OpenMP threads (generated kernels and oneDNN alike); 0 keeps
// OpenMP's default (every core, or OMP_NUM_THREADS). A plan may carry a
// kernel library per x86-64 level: the backend loads the one for
// `kernel_cpu` (e.g. "x86-64-v3"), or where that is empty the highest level
// this CPU runs.
std::unique_ptr<Backend> CreateCpuBackend(int threads = 0, const std::string& kernel_cpu = "");

// Ok when CreateCpuBackend(threads) would run on 1 to kMaxCpuThreads threads;
// with threads 0 that is OpenMP's default, which OMP_NUM_THREADS may set to
// anything (100000 threads once crashed libgomp).
Status CheckCpuThreads(int threads);

}  // namespace graphc::runtime

#endif  // GRAPHC_RUNTIME_BACKENDS_CPU_CPU_BACKEND_H_
