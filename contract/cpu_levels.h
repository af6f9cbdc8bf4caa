// The x86-64 levels a plan's CPU kernel libraries are compiled for: LLVM
// -mcpu names of the psABI's microarchitecture levels, lowest first. graphc
// --kernel-cpu takes them, the plan verifier allows one library per level,
// and the CPU backend loads the highest its CPU runs.

#ifndef GRAPHC_CONTRACT_CPU_LEVELS_H_
#define GRAPHC_CONTRACT_CPU_LEVELS_H_

#include <array>
#include <string_view>

namespace graphc {

inline constexpr std::array<std::string_view, 4> kX86Levels = {"x86-64", "x86-64-v2",
                                                               "x86-64-v3", "x86-64-v4"};

// The index of `level` in kX86Levels, or -1 for anything else.
inline int X86LevelIndex(std::string_view level) {
  for (size_t i = 0; i < kX86Levels.size(); ++i)
    if (level == kX86Levels[i]) return static_cast<int>(i);
  return -1;
}

}  // namespace graphc

#endif  // GRAPHC_CONTRACT_CPU_LEVELS_H_
