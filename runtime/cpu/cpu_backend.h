// The CPU backend: host memory, the plan's x86-64 kernels, oneDNN library
// calls, all on one OpenMP thread pool. Created through backend_factory.h;
// included directly only by its own tests.

#ifndef GRAPHC_RUNTIME_CPU_CPU_BACKEND_H_
#define GRAPHC_RUNTIME_CPU_CPU_BACKEND_H_

#include <memory>

#include "runtime/backend.h"
#include "runtime/backend_factory.h"
#include "runtime/status.h"

namespace graphc::runtime {

// On `threads` OpenMP threads (generated kernels and oneDNN alike); 0 keeps
// OpenMP's default (every core, or OMP_NUM_THREADS).
std::unique_ptr<Backend> CreateCpuBackend(int threads = 0);

// Ok when CreateCpuBackend(threads) would run on 1 to kMaxCpuThreads threads;
// with threads 0 that is OpenMP's default, which OMP_NUM_THREADS may set to
// anything (100000 threads once crashed libgomp).
Status CheckCpuThreads(int threads);

}  // namespace graphc::runtime

#endif  // GRAPHC_RUNTIME_CPU_CPU_BACKEND_H_
