// The kernel-library check, on libraries built to differ from graphc's in one
// way each (testing/elf_builder.h), on a real library with a constructor built
// by the system compiler, and on every single-byte corruption of a valid one.

#include "runtime/core/elf_check.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "runtime/core/testing/elf_builder.h"

namespace graphc::runtime {
namespace {

using testing::BuildElf;
using testing::ElfSpec;

ElfSpec Clean() {
  ElfSpec spec;
  spec.entries = {{"k0_l0", "graphc-launch-v1 kernel=k0 launch=0 iterations=4 args=0 bytes=16"},
                  {"k1_l0", "graphc-launch-v1 kernel=k1 launch=0 iterations=1 args=0,1 bytes=4,4"}};
  spec.imports = {"memset", "expf", "logf"};
  return spec;
}

// The first problem the check names, or "" when it accepts the library.
std::string Problem(const std::vector<uint8_t>& bytes) {
  StatusOr<KernelLibrary> library = CheckKernelLibrary(bytes.data(), bytes.size());
  if (library.ok()) return "";
  EXPECT_EQ(library.status().code(), ErrorCode::kPlanUnsafeCode);
  return library.status().message();
}

// dlopen from memory, as the CPU backend does.
void* LoadFromMemory(const std::vector<uint8_t>& bytes) {
  int fd = memfd_create("elf-check-test", MFD_CLOEXEC);
  if (fd < 0 || write(fd, bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size()))
    return nullptr;
  std::string path = "/proc/self/fd/" + std::to_string(fd);
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  close(fd);
  return handle;
}

TEST(ElfCheckTest, TheCleanFixtureIsARealLibraryAndPasses) {
  std::vector<uint8_t> bytes = BuildElf(Clean());
  StatusOr<KernelLibrary> library = CheckKernelLibrary(bytes.data(), bytes.size());
  ASSERT_TRUE(library.ok()) << library.status().ToString();
  EXPECT_EQ(library->entries, (std::set<std::string>{"k0_l0", "k1_l0"}));
  EXPECT_EQ(library->signatures.at("k1_l0"),
            "graphc-launch-v1 kernel=k1 launch=0 iterations=1 args=0,1 bytes=4,4");
  // The dynamic loader agrees it is a library, and its entries resolve.
  void* handle = LoadFromMemory(bytes);
  ASSERT_NE(handle, nullptr) << dlerror();
  auto entry = reinterpret_cast<void (*)(void**, int64_t, int64_t)>(
      dlsym(handle, "graphc_kernel_k1_l0"));
  ASSERT_NE(entry, nullptr);
  entry(nullptr, 0, 1);  // `ret`
  dlclose(handle);
}

TEST(ElfCheckTest, CodeThatRunsWhenLoadedIsRefused) {
  for (auto [tag, name] : std::vector<std::pair<int64_t, std::string>>{
           {DT_INIT, "DT_INIT"}, {DT_INIT_ARRAY, "DT_INIT_ARRAY"},
           {DT_PREINIT_ARRAY, "DT_PREINIT_ARRAY"}, {DT_FINI, "DT_FINI"},
           {DT_FINI_ARRAY, "DT_FINI_ARRAY"}, {DT_AUDIT, "DT_AUDIT"},
           {DT_FILTER, "DT_FILTER"}, {DT_RUNPATH, "DT_RUNPATH"}, {DT_TEXTREL, "DT_TEXTREL"}}) {
    ElfSpec spec = Clean();
    spec.extra_tags = {{tag, 0x1000}};
    EXPECT_NE(Problem(BuildElf(spec)).find(name), std::string::npos) << name;
  }
  ElfSpec ifunc = Clean();
  ifunc.ifunc_entries = true;
  EXPECT_NE(Problem(BuildElf(ifunc)).find("IFUNC"), std::string::npos);
  ElfSpec irelative = Clean();
  irelative.import_relocation = R_X86_64_IRELATIVE;
  EXPECT_NE(Problem(BuildElf(irelative)).find("IRELATIVE"), std::string::npos);
  ElfSpec copy = Clean();
  copy.import_relocation = R_X86_64_COPY;
  EXPECT_NE(Problem(BuildElf(copy)), "");
  ElfSpec tls = Clean();
  tls.tls_segment = true;
  EXPECT_NE(Problem(BuildElf(tls)).find("thread-local"), std::string::npos);
}

TEST(ElfCheckTest, ImportsAndLibrariesAreAllowListed) {
  ElfSpec system = Clean();
  system.imports.push_back("system");
  EXPECT_NE(Problem(BuildElf(system)).find("imports 'system'"), std::string::npos);
  ElfSpec dlopen_import = Clean();
  dlopen_import.imports = {"dlopen"};
  EXPECT_NE(Problem(BuildElf(dlopen_import)), "");
  // Defining `system` and binding to it by name would reach libc's (default
  // symbols interpose): only graphc's own names may be defined, and
  // relocations may name imports only.
  ElfSpec defines = Clean();
  defines.other_functions = {"system"};
  EXPECT_NE(Problem(BuildElf(defines)).find("defines 'system'"), std::string::npos);
  ElfSpec own = Clean();
  own.relocate_own_symbol = true;
  own.import_relocation = R_X86_64_64;
  EXPECT_NE(Problem(BuildElf(own)).find("binds the library's own symbol"), std::string::npos);
  ElfSpec libm = Clean();
  libm.needed = {"libm.so.6"};
  EXPECT_EQ(Problem(BuildElf(libm)), "");
  ElfSpec foreign = Clean();
  foreign.needed = {"libevil.so"};
  EXPECT_NE(Problem(BuildElf(foreign)).find("libevil.so"), std::string::npos);
}

TEST(ElfCheckTest, MemoryProtectionIsWXorXWithAStackThatIsNotExecutable) {
  ElfSpec stack = Clean();
  stack.executable_stack = true;
  EXPECT_NE(Problem(BuildElf(stack)).find("executable stack"), std::string::npos);
  ElfSpec no_stack = Clean();
  no_stack.gnu_stack = false;
  EXPECT_NE(Problem(BuildElf(no_stack)).find("PT_GNU_STACK"), std::string::npos);
  ElfSpec wx = Clean();
  wx.writable_code = true;
  EXPECT_NE(Problem(BuildElf(wx)).find("writable and executable"), std::string::npos);
}

TEST(ElfCheckTest, OnlyTheHeadersGraphcWritesAreAccepted) {
  // Notes are parsed by the loader at their addresses; an interpreter is a
  // program's, not a library's; graphc's libraries have neither.
  for (uint32_t type : {uint32_t{PT_NOTE}, uint32_t{PT_GNU_PROPERTY}, uint32_t{PT_INTERP},
                        uint32_t{PT_SHLIB}, uint32_t{0x60000001}}) {
    ElfSpec spec = Clean();
    spec.extra_segments = {type};
    EXPECT_NE(Problem(BuildElf(spec)), "") << type;
  }
  // A RELRO range over read-only memory, or a PT_PHDR that is not the
  // program headers, would mislead the loader after the check.
  ElfSpec relro = Clean();
  relro.extra_segments = {PT_GNU_RELRO};
  EXPECT_NE(Problem(BuildElf(relro)).find("PT_GNU_RELRO"), std::string::npos);
  ElfSpec phdr = Clean();
  phdr.extra_segments = {PT_PHDR};
  EXPECT_NE(Problem(BuildElf(phdr)).find("PT_PHDR"), std::string::npos);
  ElfSpec got = Clean();
  got.pltgot_in_code = true;
  EXPECT_NE(Problem(BuildElf(got)).find("DT_PLTGOT"), std::string::npos);
}

TEST(ElfCheckTest, TruncatedLibrariesAreRefusedBeforeTheLoaderMapsThem) {
  std::vector<uint8_t> bytes = BuildElf(Clean());
  for (size_t keep : {size_t{0}, size_t{16}, size_t{64}, size_t{200}, bytes.size() / 2,
                      bytes.size() - 1}) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + keep);
    EXPECT_NE(Problem(cut), "") << keep;
  }
}

// Not a proof, but every single-byte change of a valid library is either
// refused with a Status or still a library the check accepts; none crashes
// the check (the fuzzer covers this under ASan with the plans around it).
TEST(ElfCheckTest, EverySingleByteCorruptionIsHandled) {
  const std::vector<uint8_t> bytes = BuildElf(Clean());
  size_t refused = 0;
  for (size_t i = 0; i < bytes.size(); ++i)
    for (uint8_t value : {uint8_t{0x00}, uint8_t{0xff}, uint8_t(bytes[i] ^ 0x80)}) {
      if (value == bytes[i]) continue;
      std::vector<uint8_t> changed = bytes;
      changed[i] = value;
      StatusOr<KernelLibrary> library = CheckKernelLibrary(changed.data(), changed.size());
      refused += !library.ok();
    }
  EXPECT_GT(refused, 100u);
}

// A library built by the system compiler with a real constructor: the check
// names it, while the dynamic loader, given the same bytes, runs it.
TEST(ElfCheckTest, AConstructorBuiltByTheCompilerIsRefused) {
  const char* path = std::getenv("GRAPHC_CONSTRUCTOR_LIBRARY");
  if (path == nullptr) GTEST_SKIP() << "GRAPHC_CONSTRUCTOR_LIBRARY is not set (run through ctest)";
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(bytes.empty()) << path;
  std::string problem = Problem(bytes);
  EXPECT_NE(problem.find("constructor"), std::string::npos) << problem;

  char marker[] = "/tmp/graphc-constructor-XXXXXX";
  int fd = mkstemp(marker);
  ASSERT_GE(fd, 0);
  close(fd);
  unlink(marker);
  setenv("GRAPHC_CONSTRUCTOR_MARKER", marker, 1);
  void* handle = LoadFromMemory(bytes);
  ASSERT_NE(handle, nullptr) << dlerror();
  struct stat st;
  EXPECT_EQ(stat(marker, &st), 0) << "the fixture's constructor did not run when loaded";
  dlclose(handle);
  unlink(marker);
  unsetenv("GRAPHC_CONSTRUCTOR_MARKER");
}

}  // namespace
}  // namespace graphc::runtime
