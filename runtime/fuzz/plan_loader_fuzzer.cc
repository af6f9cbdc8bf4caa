// libFuzzer target for the plan loader: any byte string must either load (and
// then be printable and checkable for every target) or fail with a Status;
// ASan and UBSan turn every out-of-bounds read, overflow or leak into a crash.
// runtime/fuzz/run-fuzz.sh builds it with clang and runs it for a bounded time.
//
// A mutated plan almost always fails its SHA-256 digest first, so each input
// is also loaded resealed (its digest recomputed, as graphc would write it):
// the semantic checks, the launch tables and the embedded kernel library's
// ELF check (elf_check.h) see every mutation, not just the digest.

#include <cstddef>
#include <cstdint>
#include <sstream>
#include <vector>

#include "runtime/core/elf_check.h"
#include "contract/plan_integrity.h"
#include "runtime/core/plan_loader.h"
#include "runtime/core/plan_printer.h"

namespace {

void Exercise(std::vector<uint8_t> bytes) {
  using namespace graphc;
  using namespace graphc::runtime;
  StatusOr<std::unique_ptr<Plan>> plan = Plan::FromBytes(std::move(bytes));
  if (!plan.ok()) return;
  for (graphc::fb::Target target : graphc::fb::EnumValuesTarget())
    (void)(*plan)->CheckTarget(target);
  (void)(*plan)->CheckSignature({});
  std::ostringstream sink;
  PrintPlan(**plan, PrintOptions(), sink);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace graphc;
  using namespace graphc::runtime;
  std::vector<uint8_t> bytes(data, data + size);
  Exercise(bytes);
  // The semantic checks alone on any verifiable buffer, whatever its version
  // or digest (the regressions include plans of older versions).
  flatbuffers::Verifier verifier(bytes.data(), size, 64, 10'000'000);
  if (size >= 8 && graphc::fb::VerifyPlanBuffer(verifier))
    (void)CheckPlanSemantics(*graphc::fb::GetPlan(bytes.data()));
  // Resealed: only possible for a verifiable plan with room for a digest.
  if (SealPlan(bytes.data(), bytes.size()).ok()) Exercise(std::move(bytes));
  // And the library check alone, on whatever the input's first ELF is.
  for (size_t i = 0; i + 4 <= size; ++i)
    if (data[i] == 0x7f && data[i + 1] == 'E' && data[i + 2] == 'L' && data[i + 3] == 'F') {
      (void)CheckKernelLibrary(data + i, size - i);
      break;
    }
  return 0;
}
