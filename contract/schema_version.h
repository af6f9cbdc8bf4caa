// The plan schema's version (schema/plan.fbs): what graphc writes and the
// newest graphrun reads, defined once for both. Bump it whenever a plan
// written by the new compiler would be misread by an older runtime; a
// runtime refuses plans newer than its own.

#ifndef GRAPHC_CONTRACT_SCHEMA_VERSION_H_
#define GRAPHC_CONTRACT_SCHEMA_VERSION_H_

#include <cstdint>

namespace graphc {

inline constexpr uint32_t kPlanSchemaVersion = 7;
// The oldest version graphrun still runs. Version 1 plans have no CPU
// launches, version 2 plans no digests and no launch signatures; they are
// refused, not guessed at. Version 3 plans are version 4 plans without
// collectives (they train on one rank), version 4 plans version 5 plans
// without NHWC convolutions and pools, version 5 plans version 6 plans
// without OHWI filters, version 6 plans version 7 plans without fused
// attention.
inline constexpr uint32_t kOldestPlanSchemaVersion = 3;

}  // namespace graphc

#endif  // GRAPHC_CONTRACT_SCHEMA_VERSION_H_
