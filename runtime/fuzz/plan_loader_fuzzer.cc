// libFuzzer target for the plan loader: any byte string must either load (and
// then be printable and checkable for every target) or fail with a Status;
// ASan and UBSan turn every out-of-bounds read, overflow or leak into a crash.
// runtime/fuzz/run-fuzz.sh builds it with clang and runs it for a bounded time.

#include <cstddef>
#include <cstdint>
#include <sstream>
#include <vector>

#include "runtime/plan/plan_loader.h"
#include "runtime/plan/plan_printer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace graphc::runtime;
  StatusOr<std::unique_ptr<Plan>> plan =
      Plan::FromBytes(std::vector<uint8_t>(data, data + size));
  if (!plan.ok()) return 0;
  for (graphc::fb::Target target : graphc::fb::EnumValuesTarget()) (void)(*plan)->CheckTarget(target);
  std::ostringstream sink;
  PrintPlan(**plan, PrintOptions(), sink);
  return 0;
}
