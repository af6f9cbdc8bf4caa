// The launch record's one formatter (see launch_record.h).

#include "contract/launch_record.h"

namespace graphc {

std::string LaunchRecord(const std::string& kernel, uint32_t launch, uint64_t iterations,
                         const std::vector<uint32_t>& args, const std::vector<uint64_t>& bytes) {
  std::string out = "graphc-launch-v1 kernel=" + kernel + " launch=" + std::to_string(launch) +
                    " iterations=" + std::to_string(iterations) + " args=";
  for (size_t a = 0; a < args.size(); ++a) out += (a ? "," : "") + std::to_string(args[a]);
  out += " bytes=";
  for (size_t a = 0; a < bytes.size(); ++a) out += (a ? "," : "") + std::to_string(bytes[a]);
  return out;
}

}  // namespace graphc
