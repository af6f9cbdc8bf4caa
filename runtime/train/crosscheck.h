// A backend checked against another command by command (graphrun
// crosscheck): one training step of a plan runs on a reference backend (the
// CPU, whose kernels the parity tests check against PyTorch and float64), and
// every command runs again on the device under test from the reference's
// inputs, copied in just before it. Errors therefore never carry from one
// command to the next: a command over its tolerance is where the device
// computes differently, whatever the training step as a whole looks like.
//
// A command's difference is its worst |device - reference| over an output,
// as a fraction of that output's largest |reference| value: a scale-free
// number that floating-point reordering keeps far below the tolerance of the
// output's type (FP32 1e-4, FP16 4e-3, BF16 3e-2: a few units in the last
// place at the output's scale). Before its inputs are copied in, the device's
// own copies of them are compared with the reference's too: one that drifted
// since the command that wrote it was changed by something else. Integer outputs must match exactly, and a
// NaN or infinity on one side only is a failure at any tolerance. So is a
// command that writes next to its outputs (CommandCheck::stray_bytes).

#ifndef GRAPHC_RUNTIME_TRAIN_CROSSCHECK_H_
#define GRAPHC_RUNTIME_TRAIN_CROSSCHECK_H_

#include <cstdint>
#include <string>
#include <vector>

#include "contract/status.h"
#include "runtime/core/backend.h"
#include "runtime/core/plan_loader.h"

namespace graphc::runtime {

struct CrosscheckOptions {
  uint64_t seed = 1;       // the initial state and the synthetic batch
  double tolerance = 0;    // for every float output; 0: by type (above)
};

// One command's outputs on the device against the reference.
struct CommandCheck {
  uint32_t command = 0;     // in train_step
  std::string what;         // "Conv2dBackwardData", "kernel fused_3 (add +2)"
  std::string location;     // the source location the compiler recorded, or ""
  std::string output;       // the name of its worst output buffer
  fb::DType dtype = fb::DType::F32;
  uint64_t elements = 0;    // compared, over all its outputs
  double difference = 0;    // worst |device - reference| / max |reference| (floats)
  double tolerance = 0;
  uint64_t mismatches = 0;  // integers differing, or a non-finite value on one side only
  int64_t worst_element = -1;
  double reference_value = 0, device_value = 0;
  // Bytes the command changed outside its outputs, within kGuardBytes after
  // or kGuardBytes / 16 before each of them (a write out of bounds landing
  // on a neighbouring buffer, which its inputs being copied in afresh for
  // every command would otherwise hide), on either backend; `stray` says
  // where the first lies.
  uint64_t stray_bytes = 0;
  std::string stray;
  // Inputs whose device copy no longer matched the reference's when the
  // command came to read them (before they were copied in afresh): memory
  // that something changed after the command that wrote it, from further
  // away than the guards watch; `stale` names the first and who wrote it.
  uint64_t stale_inputs = 0;
  std::string stale;
  bool ok() const {
    return mismatches == 0 && stray_bytes == 0 && stale_inputs == 0 && difference <= tolerance;
  }
};

struct CrosscheckResult {
  std::vector<CommandCheck> commands;  // every command that ran, in order
  uint32_t collectives = 0;            // skipped (one rank)
  float reference_loss = 0, device_loss = 0;
  // The first command over its tolerance, or -1.
  int64_t first_failure() const;
};

// Runs `plan`'s train_step once on both backends as described above, from
// the same seeded state and synthetic batch. Fails (with the command named)
// only where a backend cannot run a command; differences are the result's.
StatusOr<CrosscheckResult> Crosscheck(const Plan& plan, Backend& reference, Backend& device,
                                      const CrosscheckOptions& options);

// How far after each output a crosscheck watches for stray writes.
inline constexpr uint64_t kGuardBytes = 64 << 10;

// The default tolerance for float outputs of `dtype`.
double CrosscheckTolerance(fb::DType dtype);

}  // namespace graphc::runtime

#endif  // GRAPHC_RUNTIME_TRAIN_CROSSCHECK_H_
