// The record an x86-64 kernel library keeps of each launch
// (`graphc_signature_<entry>`, plan.fbs): graphc writes it, the loader checks
// the launch table against it. One formatter for both sides of the contract.

#ifndef GRAPHC_CONTRACT_LAUNCH_RECORD_H_
#define GRAPHC_CONTRACT_LAUNCH_RECORD_H_

#include <cstdint>
#include <string>
#include <vector>

namespace graphc {

// "graphc-launch-v1 kernel=K launch=I iterations=N args=A,B bytes=X,Y": the
// kernel, the launch's index in its list, its iterations (grid x), the
// kernel buffers it passes, and the byte size of each.
std::string LaunchRecord(const std::string& kernel, uint32_t launch, uint64_t iterations,
                         const std::vector<uint32_t>& args, const std::vector<uint64_t>& bytes);

}  // namespace graphc

#endif  // GRAPHC_CONTRACT_LAUNCH_RECORD_H_
