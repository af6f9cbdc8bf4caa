// The CPU backend's library calls through oneDNN: convolution forward,
// backward-data and backward-weights, matmul (Gemm) and max/average pooling
// forward and backward, on the plan's plain layouts (activations NCHW or
// NHWC, filters OIHW, row-major). An NHWC convolution's filter is reordered
// into the layout oneDNN chooses for it (its gradient back into OIHW) in
// memory of the command's own: with a plain filter oneDNN 2.6 has only its
// reference kernel for NHWC.
//
// Every primitive, its memory objects and the scratchpad are created once, in
// Prepare; Run only points the memory objects at the operands and executes, so
// a training step allocates nothing.
//
// Convolutions run in chunks of the batch (about four per thread), which the
// threads take as they come free, each chunk a primitive created for one
// thread: oneDNN splits a convolution statically between the threads, so one
// thread slowed by another process would hold up all of them. The chunks of
// a filter gradient write partial gradients, summed in chunk order, so the
// result does not depend on which thread ran which chunk.
//
// Half-precision commands (every operand F16, or every operand BF16) compute
// as cuDNN does with FP32 compute: products accumulated in FP32, the output
// rounded once to the half type. BF16 runs as oneDNN's bf16 primitives where
// the CPU has bf16 instructions (AVX512-BF16, AMX). Elsewhere, and for F16
// always (oneDNN 2.6 has no f16 convolution or matmul on CPUs), a command is
// widened: its half inputs are converted to FP32 copies (exact), the FP32
// primitive runs on them, and its FP32 result is converted to the half
// output. The copies live in one conversion area shared by all commands,
// sized to the largest, as the scratchpad is.

#ifndef GRAPHC_RUNTIME_BACKENDS_CPU_ONEDNN_OPS_H_
#define GRAPHC_RUNTIME_BACKENDS_CPU_ONEDNN_OPS_H_

#include <memory>
#include <string>

#include "runtime/core/backend.h"
#include "runtime/core/plan_loader.h"
#include "contract/status.h"

namespace graphc::runtime {

class OneDnnOps {
 public:
  OneDnnOps();
  ~OneDnnOps();
  OneDnnOps(const OneDnnOps&) = delete;
  OneDnnOps& operator=(const OneDnnOps&) = delete;

  // Creates the primitives of every library command of every program, for
  // `threads` OpenMP threads (the backend's).
  Status Prepare(const Plan& plan, int threads);
  // Runs a library command of the prepared plan; operands as in Backend::Run.
  Status Run(const fb::Command& command, const DeviceMemory* operands);
  // Backend::LibraryMath for the float dtypes (F32, F16, BF16).
  std::string LibraryMath(fb::DType dtype) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace graphc::runtime

#endif  // GRAPHC_RUNTIME_BACKENDS_CPU_ONEDNN_OPS_H_
