// SplitMix64 (Steele, Lea, Flood 2014): a tiny, portable, seedable generator.
// The runtime uses it wherever a seed must give the same bits on every machine
// and C++ library (std::normal_distribution and friends do not promise that).

#ifndef GRAPHC_RUNTIME_CORE_RANDOM_H_
#define GRAPHC_RUNTIME_CORE_RANDOM_H_

#include <cstdint>

namespace graphc::runtime {

struct SplitMix64 {
  uint64_t state;
  uint64_t Next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in (0, 1): 53 random bits, never 0 (Box-Muller takes its log).
  double Uniform() { return ((Next() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
};

}  // namespace graphc::runtime

#endif  // GRAPHC_RUNTIME_CORE_RANDOM_H_
