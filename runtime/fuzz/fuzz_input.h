// The fuzz targets' input as a file, for readers that take paths: one file
// per process under $TMPDIR (or /tmp), rewritten for every input.

#ifndef GRAPHC_RUNTIME_FUZZ_FUZZ_INPUT_H_
#define GRAPHC_RUNTIME_FUZZ_FUZZ_INPUT_H_

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace graphc::fuzz {

inline std::string WriteInput(const char* name, const uint8_t* data, size_t size,
                              const char* suffix) {
  const char* tmp = std::getenv("TMPDIR");
  const std::string path = std::string(tmp != nullptr ? tmp : "/tmp") + "/" + name + "-" +
                           std::to_string(::getpid()) + suffix;
  FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, file) != size) std::abort();
  std::fclose(file);
  return path;
}

}  // namespace graphc::fuzz

#endif  // GRAPHC_RUNTIME_FUZZ_FUZZ_INPUT_H_
