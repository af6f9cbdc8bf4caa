// Crafted plans, one per class of bad input the loader must refuse with a named
// error (the classes behind TFLite's loader CVEs), plus the valid plan they are
// all mutated from.

#include "runtime/core/plan_loader.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/core/backend.h"
#include "runtime/backends/cpu/cpu_backend.h"
#include "runtime/core/plan_printer.h"
#include "runtime/core/testing/elf_builder.h"

namespace graphc::runtime {
namespace {

struct BufferSpec {
  std::string name;
  std::vector<int64_t> shape;
  fb::Region region = fb::Region::Arena;
  uint64_t offset = 0;
  int64_t size = -1;  // -1: from the shape
  fb::DType dtype = fb::DType::F32;
};

struct CommandSpec {
  fb::Opcode op = fb::Opcode::Copy;
  std::vector<int32_t> inputs, outputs, in_place;
  int32_t kernel = -1;
  std::vector<int64_t> strides = {1, 1}, padding = {0, 0, 0, 0}, dilations = {1, 1};
  int64_t groups = 1;
  // For AllreduceStart / AllreduceWait: bucket, reduction, wire type.
  struct Collective {
    int32_t bucket = 0;
    fb::Reduction reduction = fb::Reduction::Mean;
    fb::DType wire = fb::DType::F32;
    bool sparse = false;
    uint64_t sent_entries = 0;
  };
  std::optional<Collective> collective;
  // Convolutions and poolings: the activations' layout; a pooling's window
  // (empty: no pooling attributes).
  fb::Layout layout = fb::Layout::NCHW;
  std::vector<int64_t> window;
  fb::Layout filter_layout = fb::Layout::NCHW;  // convolutions: OIHW, or NHWC = OHWI
  std::optional<bool> transpose_k;  // attention: its attributes (none: absent)
  std::vector<int64_t> bias_strides;  // attention: one per bias (none: no vector)
};

// A small valid plan: x[2x3x4x4] conv w[5x3x3x3] -> y[2x5x2x2] (arena and
// state), a relu-like elementwise kernel over y in place, a copy, a gemm.
struct PlanSpec {
  uint32_t version = kPlanSchemaVersion;
  std::string identifier = "GPLN";
  uint64_t arena_size = 4096, state_size = 1024, constant_size = 64;
  int64_t batch = 2;
  int64_t micro_batches = 0;
  std::vector<BufferSpec> buffers = {
      {"x", {2, 3, 4, 4}, fb::Region::Arena, 0},        // 0: 384 bytes
      {"w", {5, 3, 3, 3}, fb::Region::State, 0},        // 1: 540 bytes
      {"y", {2, 5, 2, 2}, fb::Region::Arena, 512},      // 2: 160 bytes
      {"y2", {2, 5, 2, 2}, fb::Region::Arena, 1024},    // 3: 160 bytes
      {"a", {2, 4}, fb::Region::Arena, 2048},           // 4: 32 bytes
      {"b", {4, 3}, fb::Region::Constant, 0},           // 5: 48 bytes
      {"c", {2, 3}, fb::Region::Arena, 2112},           // 6: 24 bytes
  };
  std::vector<CommandSpec> commands = {
      {fb::Opcode::Conv2d, {0, 1}, {2}, {}, -1, {1, 1}, {0, 0, 0, 0}, {1, 1}, 1},
      {fb::Opcode::Kernel, {2}, {2}, {0}, 0},
      {fb::Opcode::Copy, {2}, {3}},
      {fb::Opcode::Gemm, {4, 5}, {6}},
  };
  std::vector<int32_t> program_inputs = {0, 4}, program_outputs = {3, 6};
  int32_t state_buffer = 1;
  int32_t constant_buffer = 5;
  std::vector<uint64_t> kernel_arg_bytes = {160, 160};
  std::vector<int32_t> kernel_arg_groups;  // empty: none (one group)
  uint32_t kernel_inputs = 1;
  std::vector<std::string> binary_symbols = {"k0"};
  // A CudaSm90 PTX binary too, with these launches for k0 (none: no list).
  struct LaunchSpec {
    std::vector<uint32_t> grid = {1, 1, 1}, block = {256, 1, 1}, args = {0, 1};
  };
  bool with_ptx = false;
  size_t ptx_params = 2;   // k0_kernel's .u64 parameters
  std::string ptx_suffix;  // more PTX text
  std::string ptx_entry = "k0_kernel";  // what the PTX launch table names
  std::vector<LaunchSpec> ptx_launches = {LaunchSpec()};
  // The CPU binary's launches of every symbol (none: no list at all); launch
  // l of kernel K runs entry K_l<l>.
  std::vector<LaunchSpec> cpu_launches = {LaunchSpec{{10, 1, 1}, {1, 1, 1}, {0, 1}}};
  // The library's record of an entry, when it should differ from what the
  // launch table says ("" drops the record).
  std::map<std::string, std::string> signature_overrides;
  // The CPU binary's code instead of the library built from the launches.
  std::optional<std::vector<uint8_t>> library;
  bool with_digest = true;  // a 32-byte Plan.digest and KernelBinary.sha256
  bool seal = true;         // fill them in
  bool with_cpu_binary = true;
  // The x86-64 levels of the CPU binaries: one binary each, the same code.
  std::vector<std::string> cpu_levels = {"x86-64"};
  std::optional<SecretKey> key;  // sign with it
  // More State entries, over these buffers (zeros), and the first one's.
  std::vector<int32_t> more_state_buffers;
  fb::Initializer state_init = fb::Initializer::KaimingNormal;
  double state_value = 0;

  // What graphc's library records for launch l of `kernel` (plan.fbs).
  std::string Signature(const std::string& kernel, size_t l, const LaunchSpec& launch) const {
    std::string args, bytes;
    for (size_t a = 0; a < launch.args.size(); ++a) {
      uint32_t arg = launch.args[a];
      args += (a ? "," : "") + std::to_string(arg);
      bytes += (a ? "," : "") +
               std::to_string(arg < kernel_arg_bytes.size() ? kernel_arg_bytes[arg] : 0);
    }
    return "graphc-launch-v1 kernel=" + kernel + " launch=" + std::to_string(l) +
           " iterations=" + std::to_string(launch.grid.empty() ? 0 : launch.grid[0]) +
           " args=" + args + " bytes=" + bytes;
  }

  std::vector<uint8_t> Library() const {
    if (library) return *library;
    testing::ElfSpec elf;
    for (const std::string& symbol : binary_symbols)
      for (size_t l = 0; l < cpu_launches.size(); ++l) {
        std::string entry = symbol + "_l" + std::to_string(l);
        auto override = signature_overrides.find(entry);
        elf.entries.emplace_back(entry, override != signature_overrides.end()
                                            ? override->second
                                            : Signature(symbol, l, cpu_launches[l]));
      }
    elf.imports = {"expf", "memset"};
    return testing::BuildElf(elf);
  }

  std::vector<uint8_t> Build() const {
    flatbuffers::FlatBufferBuilder fbb;
    std::vector<flatbuffers::Offset<fb::Buffer>> buffer_offsets;
    for (const BufferSpec& b : buffers) {
      int64_t elements = 1;
      for (int64_t d : b.shape) elements *= d;
      uint64_t size = b.size >= 0 ? b.size : elements * DTypeBytes(b.dtype);
      buffer_offsets.push_back(fb::CreateBuffer(fbb, fbb.CreateString(b.name),
                                                b.dtype, fbb.CreateVector(b.shape),
                                                b.region, b.offset, size));
    }
    std::vector<flatbuffers::Offset<fb::Command>> command_offsets;
    for (const CommandSpec& c : commands) {
      auto conv = fb::CreateConvAttrs(fbb, fbb.CreateVector(c.strides),
                                      fbb.CreateVector(c.padding),
                                      fbb.CreateVector(c.dilations), c.groups, c.layout,
                                      c.filter_layout);
      flatbuffers::Offset<fb::PoolAttrs> pool;
      if (!c.window.empty())
        pool = fb::CreatePoolAttrs(fbb, fbb.CreateVector(c.window), fbb.CreateVector(c.strides),
                                   fbb.CreateVector(c.padding), false, c.layout);
      flatbuffers::Offset<fb::CollectiveAttrs> collective;
      if (c.collective)
        collective = fb::CreateCollectiveAttrs(fbb, c.collective->bucket,
                                               c.collective->reduction, c.collective->wire,
                                               c.collective->sparse,
                                               c.collective->sent_entries);
      flatbuffers::Offset<fb::AttentionAttrs> attention;
      if (c.transpose_k)
        attention = fb::CreateAttentionAttrs(
            fbb, *c.transpose_k,
            c.bias_strides.empty() ? 0 : fbb.CreateVector(c.bias_strides));
      command_offsets.push_back(fb::CreateCommand(
          fbb, c.op, fbb.CreateVector(c.inputs), fbb.CreateVector(c.outputs),
          fbb.CreateVector(c.in_place), c.kernel, conv, fb::CreateGemmAttrs(fbb), pool,
          fbb.CreateString("test.mlir:1:1"), collective, attention));
    }
    std::vector<flatbuffers::Offset<fb::Program>> programs = {fb::CreateProgram(
        fbb, fbb.CreateString("train_step"), fbb.CreateVector(program_inputs),
        fbb.CreateVector(program_outputs), fbb.CreateVector(command_offsets), arena_size)};
    std::vector<flatbuffers::Offset<fb::State>> states = {
        fb::CreateState(fbb, state_buffer, state_init, state_value, true)};
    for (int32_t b : more_state_buffers)
      states.push_back(fb::CreateState(fbb, b, fb::Initializer::Zeros, 0, false));
    std::vector<uint8_t> constant_data(48, 0);
    std::vector<flatbuffers::Offset<fb::Constant>> constants = {
        fb::CreateConstant(fbb, constant_buffer, fbb.CreateVector(constant_data))};
    std::vector<std::string> ops = {"nn.relu"};
    std::vector<flatbuffers::Offset<fb::Kernel>> kernels = {fb::CreateKernel(
        fbb, fbb.CreateString("k0"), fbb.CreateVectorOfStrings(ops), kernel_inputs, 1, true,
        fbb.CreateVector(kernel_arg_bytes),
        kernel_arg_groups.empty() ? 0 : fbb.CreateVector(kernel_arg_groups))};
    std::vector<uint8_t> code = Library();
    std::vector<flatbuffers::Offset<fb::GpuKernel>> cpu_per_kernel;
    if (!cpu_launches.empty())
      for (const std::string& symbol : binary_symbols) {
        std::vector<flatbuffers::Offset<fb::GpuLaunch>> launches;
        for (size_t l = 0; l < cpu_launches.size(); ++l)
          launches.push_back(fb::CreateGpuLaunch(
              fbb, fbb.CreateString(symbol + "_l" + std::to_string(l)),
              fbb.CreateVector(cpu_launches[l].grid), fbb.CreateVector(cpu_launches[l].block),
              fbb.CreateVector(cpu_launches[l].args)));
        cpu_per_kernel.push_back(fb::CreateGpuKernel(fbb, fbb.CreateVector(launches)));
      }
    auto hash_of = [&](const std::vector<uint8_t>& data) {
      Sha256Digest hash = Sha256Of(data.data(), data.size());
      return with_digest ? fbb.CreateVector(hash.data(), hash.size()) : 0;
    };
    std::vector<flatbuffers::Offset<fb::KernelBinary>> binaries;
    std::vector<fb::Target> targets;
    if (with_cpu_binary) {
      for (const std::string& level : cpu_levels)
        binaries.push_back(fb::CreateKernelBinary(
            fbb, fb::Target::CpuX86_64, fb::BinaryFormat::ElfSharedObject,
            fbb.CreateString(level), fbb.CreateVector(code),
            fbb.CreateVectorOfStrings(binary_symbols), fbb.CreateVector(cpu_per_kernel),
            hash_of(code)));
      targets.push_back(fb::Target::CpuX86_64);
    }
    if (with_ptx) {
      std::vector<flatbuffers::Offset<fb::GpuLaunch>> launches;
      for (const LaunchSpec& l : ptx_launches)
        launches.push_back(fb::CreateGpuLaunch(fbb, fbb.CreateString(ptx_entry),
                                               fbb.CreateVector(l.grid),
                                               fbb.CreateVector(l.block),
                                               fbb.CreateVector(l.args)));
      std::vector<flatbuffers::Offset<fb::GpuKernel>> per_kernel;
      if (!ptx_launches.empty())
        per_kernel.push_back(fb::CreateGpuKernel(fbb, fbb.CreateVector(launches)));
      std::string ptx = ".version 8.0\n.target sm_90\n.visible .entry k0_kernel(\n";
      for (size_t p = 0; p < ptx_params; ++p)
        ptx += std::string(p ? ",\n" : "") + "\t.param .u64 k0_kernel_param_" + std::to_string(p);
      ptx += "\n)\n{\n\tret;\n}\n" + ptx_suffix;
      std::vector<uint8_t> ptx_bytes(ptx.begin(), ptx.end());
      binaries.push_back(fb::CreateKernelBinary(
          fbb, fb::Target::CudaSm90, fb::BinaryFormat::Ptx, fbb.CreateString("sm_90"),
          fbb.CreateVector(ptx_bytes), fbb.CreateVectorOfStrings(binary_symbols),
          fbb.CreateVector(per_kernel), hash_of(ptx_bytes)));
      targets.push_back(fb::Target::CudaSm90);
    }
    auto plan = fb::CreatePlan(
        fbb, version, fbb.CreateString("test"), batch, fbb.CreateString("fp32"), false,
        fbb.CreateVector(targets), arena_size, state_size, constant_size, 0,
        fbb.CreateVector(buffer_offsets), fbb.CreateVector(states),
        fbb.CreateVector(constants), fbb.CreateVector(kernels), fbb.CreateVector(binaries),
        fbb.CreateVector(programs),
        with_digest ? fbb.CreateVector(std::vector<uint8_t>(32, 0)) : 0,
        key ? fbb.CreateVector(std::vector<uint8_t>(kSignatureBytes, 0)) : 0,
        key ? fbb.CreateVector(PublicKeyOf(*key).data(), 32) : 0, micro_batches);
    fbb.Finish(plan, identifier.c_str());
    std::vector<uint8_t> bytes(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
    if (seal && with_digest && identifier == "GPLN")
      EXPECT_TRUE(SealPlan(bytes.data(), bytes.size(), key ? &*key : nullptr).ok());
    return bytes;
  }
};

ErrorCode LoadError(const std::vector<uint8_t>& bytes) {
  StatusOr<std::unique_ptr<Plan>> plan = Plan::FromBytes(bytes);
  return plan.ok() ? ErrorCode::kOk : plan.status().code();
}

ErrorCode LoadError(const PlanSpec& spec) { return LoadError(spec.Build()); }

// "loaded", or the loader's whole error line (class, place, message).
std::string LoadedOrError(const PlanSpec& spec) {
  StatusOr<std::unique_ptr<Plan>> plan = Plan::FromBytes(spec.Build());
  return plan.ok() ? std::string("loaded") : plan.status().ToString();
}

TEST(PlanLoaderTest, ValidPlanLoads) {
  StatusOr<std::unique_ptr<Plan>> plan = Plan::FromBytes(PlanSpec().Build());
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ((*plan)->root().buffers()->size(), 7u);
  EXPECT_TRUE((*plan)->CheckTarget(fb::Target::CpuX86_64).ok());
}

TEST(PlanLoaderTest, ScalarBuffersLoadWhereverTheirEmptyShapeLies) {
  // An empty vector's data pointer may be 4-byte aligned; with no elements
  // that is not a misaligned read. Shift it through a name of every length.
  for (int length = 0; length < 8; ++length) {
    PlanSpec spec;
    spec.buffers.push_back({std::string(length, 's'), {}, fb::Region::Arena, 3072});
    StatusOr<std::unique_ptr<Plan>> plan = Plan::FromBytes(spec.Build());
    EXPECT_TRUE(plan.ok()) << length << ": " << plan.status().ToString();
  }
}

TEST(PlanLoaderTest, TruncatedFileIsMalformed) {
  std::vector<uint8_t> bytes = PlanSpec().Build();
  for (size_t keep : {bytes.size() / 2, bytes.size() - 1, size_t{64}}) {
    std::vector<uint8_t> truncated(bytes.begin(), bytes.begin() + keep);
    EXPECT_EQ(LoadError(truncated), ErrorCode::kPlanMalformed) << keep;
  }
}

TEST(PlanLoaderTest, EightByteFileIsMalformedAndShorterIsTooSmall) {
  std::vector<uint8_t> bytes = PlanSpec().Build();
  EXPECT_EQ(LoadError(std::vector<uint8_t>(bytes.begin(), bytes.begin() + 8)),
            ErrorCode::kPlanMalformed);
  EXPECT_EQ(LoadError(std::vector<uint8_t>(bytes.begin(), bytes.begin() + 7)),
            ErrorCode::kPlanTooSmall);
  EXPECT_EQ(LoadError(std::vector<uint8_t>()), ErrorCode::kPlanTooSmall);
}

TEST(PlanLoaderTest, WrongIdentifier) {
  PlanSpec spec;
  spec.identifier = "TFL3";
  EXPECT_EQ(LoadError(spec), ErrorCode::kPlanWrongIdentifier);
}

TEST(PlanLoaderTest, NewerOrZeroVersionIsRefused) {
  PlanSpec spec;
  spec.version = kPlanSchemaVersion + 1;
  EXPECT_EQ(LoadError(spec), ErrorCode::kPlanUnsupportedVersion);
  spec.version = 0;
  EXPECT_EQ(LoadError(spec), ErrorCode::kPlanUnsupportedVersion);
}

TEST(PlanLoaderTest, IndexMinusOneAndOutOfRange) {
  for (int32_t bad : {-1, 7, std::numeric_limits<int32_t>::max()}) {
    PlanSpec input;
    input.commands[2].inputs = {bad};
    EXPECT_EQ(LoadError(input), ErrorCode::kPlanBadIndex) << bad;
    PlanSpec output;
    output.commands[0].outputs = {bad};
    EXPECT_EQ(LoadError(output), ErrorCode::kPlanBadIndex) << bad;
    PlanSpec state;
    state.state_buffer = bad;
    EXPECT_EQ(LoadError(state), ErrorCode::kPlanBadIndex) << bad;
    PlanSpec kernel;
    kernel.commands[1].kernel = bad;
    EXPECT_EQ(LoadError(kernel), ErrorCode::kPlanBadIndex) << bad;
  }
}

TEST(PlanLoaderTest, MissingBuffer) {
  PlanSpec spec;
  spec.program_outputs = {3, 6, 9};
  EXPECT_EQ(LoadError(spec), ErrorCode::kPlanBadIndex);
  PlanSpec no_output;
  no_output.commands[2].outputs = {};
  EXPECT_EQ(LoadError(no_output), ErrorCode::kPlanBadIndex);
}

// Version 6 kernels take every buffer as 16-byte aligned: an offset that is
// not a multiple of 16 is refused (a version 5 plan's kernels assume nothing).
TEST(PlanLoaderTest, BufferOffsetsAreMultiplesOf16) {
  PlanSpec misaligned;
  misaligned.buffers[3].offset = 1032;
  StatusOr<std::unique_ptr<Plan>> plan = Plan::FromBytes(misaligned.Build());
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), ErrorCode::kPlanBadValue);
  EXPECT_NE(plan.status().message().find("buffer 3 'y2': offset 1032 is not a multiple of 16"),
            std::string::npos)
      << plan.status().message();
  misaligned.version = 5;
  EXPECT_EQ(LoadError(misaligned), ErrorCode::kOk);
}

TEST(PlanLoaderTest, SameBufferAsInputAndOutput) {
  PlanSpec copy;
  copy.commands[2].outputs = {2};
  EXPECT_EQ(LoadError(copy), ErrorCode::kPlanAliasedOperands);
  // An elementwise kernel over its input is fine only when declared in place.
  PlanSpec undeclared;
  undeclared.commands[1].in_place = {};
  EXPECT_EQ(LoadError(undeclared), ErrorCode::kPlanAliasedOperands);
  // Partial overlap through another buffer at an overlapping offset.
  PlanSpec overlapping;
  overlapping.buffers[3].offset = 608;  // y spans [512, 672)
  EXPECT_EQ(LoadError(overlapping), ErrorCode::kPlanAliasedOperands);
  // A library op cannot be declared in place.
  PlanSpec library;
  library.commands[3].in_place = {0};
  EXPECT_EQ(LoadError(library), ErrorCode::kPlanAliasedOperands);
}

// The batch size is one graphc could have compiled for.
TEST(PlanLoaderTest, BatchSizeIsInGraphcsRange) {
  for (int64_t batch : {int64_t{0}, int64_t{-8}, (int64_t{1} << 20) + 1}) {
    PlanSpec spec;
    spec.batch = batch;
    EXPECT_EQ(LoadError(spec), ErrorCode::kPlanBadValue) << batch;
  }
  PlanSpec largest;
  largest.batch = int64_t{1} << 20;
  EXPECT_EQ(LoadError(largest), ErrorCode::kOk);
}

// The micro-batches a step accumulates over (graphc's --grad-accumulation):
// at most 1024, whole rows each; 0 (absent) and 1 both mean one.
TEST(PlanLoaderTest, MicroBatchesDivideTheBatch) {
  for (int64_t micro : {int64_t{-1}, int64_t{3}, int64_t{1025}}) {
    PlanSpec spec;
    spec.batch = 8;
    spec.micro_batches = micro;
    EXPECT_EQ(LoadError(spec), ErrorCode::kPlanBadValue) << micro;
  }
  for (int64_t micro : {int64_t{0}, int64_t{1}, int64_t{4}, int64_t{8}}) {
    PlanSpec spec;
    spec.batch = 8;
    spec.micro_batches = micro;
    EXPECT_EQ(LoadError(spec), ErrorCode::kOk) << micro;
  }
  // The bound itself (graphc's --grad-accumulation limit), where it divides.
  PlanSpec most;
  most.batch = 1024;
  most.micro_batches = 1024;
  EXPECT_EQ(LoadError(most), ErrorCode::kOk);
  most.batch = most.micro_batches = 2048;
  EXPECT_EQ(LoadError(most), ErrorCode::kPlanBadValue);
}

// A kernel of independent parts (nn.multi_tensor) writes in place only over an
// input of the output's own part; a shared input (group -1) never.
TEST(PlanLoaderTest, GroupedKernelRunsInPlaceOnlyWithinAGroup) {
  PlanSpec same;
  same.kernel_arg_groups = {3, 3};
  EXPECT_EQ(LoadError(same), ErrorCode::kOk);
  PlanSpec other;
  other.kernel_arg_groups = {0, 1};
  EXPECT_EQ(LoadError(other), ErrorCode::kPlanAliasedOperands);
  PlanSpec shared;
  shared.kernel_arg_groups = {-1, 0};
  EXPECT_EQ(LoadError(shared), ErrorCode::kPlanAliasedOperands);
  PlanSpec ungrouped_output;
  ungrouped_output.kernel_arg_groups = {0, -1};
  EXPECT_EQ(LoadError(ungrouped_output), ErrorCode::kPlanBadValue);
  PlanSpec short_list;
  short_list.kernel_arg_groups = {0};
  EXPECT_EQ(LoadError(short_list), ErrorCode::kPlanBadValue);
}

// In place means element i over element i: an output over an input of the
// same bytes but another element count (f16 over f32) is refused.
TEST(PlanLoaderTest, InPlaceNeedsTheSameElementCount) {
  PlanSpec spec;
  spec.buffers.push_back({"y16", {2, 5, 2, 2, 2}, fb::Region::Arena, 512, -1, fb::DType::F16});
  spec.commands[1].outputs = {7};
  EXPECT_EQ(LoadError(spec), ErrorCode::kPlanAliasedOperands);
}

// A view of the overwritten input read by another part of the kernel is
// refused too: that part would read what the output already wrote.
TEST(PlanLoaderTest, GroupedKernelReadsNoViewOfItsInPlaceInputInAnotherGroup) {
  PlanSpec spec;
  spec.buffers.push_back({"yv", {2, 20}, fb::Region::Arena, 512});  // 7: y's memory
  spec.commands[1].inputs = {2, 7};
  spec.kernel_inputs = 2;
  spec.kernel_arg_bytes = {160, 160, 160};
  spec.cpu_launches = {PlanSpec::LaunchSpec{{10, 1, 1}, {1, 1, 1}, {0, 1, 2}}};
  spec.kernel_arg_groups = {0, 0, 0};
  EXPECT_EQ(LoadError(spec), ErrorCode::kOk);
  spec.kernel_arg_groups = {0, 1, 0};
  EXPECT_EQ(LoadError(spec), ErrorCode::kPlanAliasedOperands);
}

TEST(PlanLoaderTest, OffsetPlusSizeOverflows) {
  PlanSpec spec;
  spec.buffers[2].offset = std::numeric_limits<uint64_t>::max() - 16;
  EXPECT_EQ(LoadError(spec), ErrorCode::kPlanOffsetOverflow);
}

TEST(PlanLoaderTest, BufferOutsideItsRegion) {
  PlanSpec spec;
  spec.buffers[1].offset = 600;  // state region is 1024 bytes, w is 540
  EXPECT_EQ(LoadError(spec), ErrorCode::kPlanBufferOutOfRange);
  PlanSpec huge;
  huge.arena_size = uint64_t{1} << 50;
  EXPECT_EQ(LoadError(huge), ErrorCode::kPlanBufferOutOfRange);
}

TEST(PlanLoaderTest, ZeroOrNegativeChannelCount) {
  for (int64_t channels : {0, -3}) {
    PlanSpec spec;
    spec.buffers[1].shape = {5, channels, 3, 3};
    spec.buffers[1].size = 0;
    EXPECT_EQ(LoadError(spec), ErrorCode::kPlanBadShape) << channels;
  }
  PlanSpec groups;
  groups.commands[0].groups = 0;
  EXPECT_EQ(LoadError(groups), ErrorCode::kPlanBadValue);
}

TEST(PlanLoaderTest, ShapesInconsistentWithTheOp) {
  PlanSpec conv;
  conv.commands[0].strides = {2, 2};  // y would be 2x5x1x1
  EXPECT_EQ(LoadError(conv), ErrorCode::kPlanBadShape);
  PlanSpec size;
  size.buffers[4].size = 16;  // declared smaller than its shape
  EXPECT_EQ(LoadError(size), ErrorCode::kPlanBadShape);
  PlanSpec kernel;
  kernel.kernel_arg_bytes = {160, 320};  // the kernel would write past y
  EXPECT_EQ(LoadError(kernel), ErrorCode::kPlanBadShape);
}

// The plan's convolution with NHWC activations: x [2x4x4x3] by w [5x3x3x3]
// (OIHW in every layout) gives y [2x2x2x5]; then a 2x2 max pooling of y.
PlanSpec NhwcSpec() {
  PlanSpec spec;
  spec.buffers[0].shape = {2, 4, 4, 3};
  spec.buffers[2].shape = {2, 2, 2, 5};
  spec.buffers.push_back({"p", {2, 1, 1, 5}, fb::Region::Arena, 3072});  // 7
  spec.commands[0].layout = fb::Layout::NHWC;
  CommandSpec pool{fb::Opcode::MaxPool2d, {2}, {7}, {}, -1, {2, 2}, {0, 0, 0, 0}};
  pool.window = {2, 2};
  pool.layout = fb::Layout::NHWC;
  spec.commands.insert(spec.commands.begin() + 1, pool);
  return spec;
}

TEST(PlanLoaderTest, NhwcCommandsLoadWithShapesInTheirLayout) {
  StatusOr<std::unique_ptr<Plan>> plan = Plan::FromBytes(NhwcSpec().Build());
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  // Version 5's field is absent from older plans: they are NCHW and load.
  PlanSpec old;
  old.version = 4;
  EXPECT_EQ(LoadError(old), ErrorCode::kOk);
}

// The libraries read activations by the dims the layout names: shapes that
// fit only another layout are refused, as is a layout the schema lacks.
TEST(PlanLoaderTest, ShapesMustFitTheLayoutTheCommandNames) {
  PlanSpec nchw_shapes;  // the NCHW plan's shapes, read as NHWC
  nchw_shapes.commands[0].layout = fb::Layout::NHWC;
  EXPECT_EQ(LoadedOrError(nchw_shapes),
            "error[plan-bad-shape]: program 'train_step' command 0 (test.mlir:1:1): filter "
            "[5x3x3x3] does not match 4 input channels in 1 groups (NHWC)");
  PlanSpec nhwc_shapes = NhwcSpec();  // NHWC shapes, read as NCHW
  nhwc_shapes.commands[0].layout = fb::Layout::NCHW;
  EXPECT_EQ(LoadError(nhwc_shapes), ErrorCode::kPlanBadShape);
  PlanSpec output = NhwcSpec();  // y as NCHW would have it
  output.buffers[2].shape = {2, 5, 2, 2};
  output.buffers[7].shape = {2, 5, 1, 1};
  EXPECT_EQ(LoadedOrError(output),
            "error[plan-bad-shape]: program 'train_step' command 0 (test.mlir:1:1): "
            "convolution of [2x4x4x3] by [5x3x3x3] gives [2x2x2x5], not [2x5x2x2] (NHWC)");
  PlanSpec pool = NhwcSpec();  // the pooling read as NCHW
  pool.commands[1].layout = fb::Layout::NCHW;
  EXPECT_EQ(LoadedOrError(pool),
            "error[plan-bad-shape]: program 'train_step' command 1 (test.mlir:1:1): "
            "pooling [2x2x2x5] cannot give [2x1x1x5]");
  PlanSpec unknown = NhwcSpec();
  unknown.commands[0].layout = static_cast<fb::Layout>(7);
  EXPECT_EQ(LoadedOrError(unknown),
            "error[plan-bad-value]: program 'train_step' command 0 (test.mlir:1:1): "
            "convolution with unknown layout 7");
  PlanSpec unknown_pool = NhwcSpec();
  unknown_pool.commands[1].layout = static_cast<fb::Layout>(-1);
  EXPECT_EQ(LoadError(unknown_pool), ErrorCode::kPlanBadValue);
  // A version 4 runtime would read an NHWC command as NCHW: such a plan is
  // no plan graphc writes.
  PlanSpec old = NhwcSpec();
  old.version = 4;
  EXPECT_EQ(LoadedOrError(old),
            "error[plan-bad-value]: program 'train_step' command 0 (test.mlir:1:1): an NHWC "
            "convolution in a plan of schema version 4 (layouts are version 5)");
}

// The valid plan and a fused attention (v7): q [2x3x4], k [2x5x4], v [2x5x6]
// (program inputs) give o [2x3x6] and lse [2x3].
PlanSpec AttentionSpec() {
  PlanSpec spec;
  spec.buffers.push_back({"q", {2, 3, 4}, fb::Region::Arena, 3072});    // 7: 96 bytes
  spec.buffers.push_back({"k", {2, 5, 4}, fb::Region::Arena, 3200});    // 8: 160 bytes
  spec.buffers.push_back({"v", {2, 5, 6}, fb::Region::Arena, 3392});    // 9: 240 bytes
  spec.buffers.push_back({"o", {2, 3, 6}, fb::Region::Arena, 3648});    // 10: 144 bytes
  spec.buffers.push_back({"lse", {2, 3}, fb::Region::Arena, 3840});     // 11: 24 bytes
  CommandSpec attention{fb::Opcode::Attention, {7, 8, 9}, {10, 11}};
  attention.transpose_k = false;
  spec.commands.push_back(attention);
  spec.program_inputs = {0, 4, 7, 8, 9};
  return spec;
}

TEST(PlanLoaderTest, AttentionLoadsWithConsistentShapesOnly) {
  EXPECT_EQ(LoadedOrError(AttentionSpec()), "loaded");
  PlanSpec transposed = AttentionSpec();  // k read as [G, D, Lk]: 4 keys of depth 5
  transposed.commands.back().transpose_k = true;
  EXPECT_EQ(LoadedOrError(transposed),
            "error[plan-bad-shape]: program 'train_step' command 4 (test.mlir:1:1): attention "
            "of q [2x3x4], k [2x5x4] (transposed) and v [2x5x6]");
  PlanSpec lse = AttentionSpec();
  lse.buffers[11].shape = {2, 3, 1};
  lse.buffers[11].size = 24;
  EXPECT_EQ(LoadError(lse), ErrorCode::kPlanBadShape);
  PlanSpec old = AttentionSpec();
  old.version = 6;
  EXPECT_EQ(LoadedOrError(old),
            "error[plan-bad-value]: program 'train_step' command 4 (test.mlir:1:1): fused "
            "attention in a plan of schema version 6 (attention is version 7)");
  PlanSpec bare = AttentionSpec();
  bare.commands.back().transpose_k.reset();
  EXPECT_EQ(LoadError(bare), ErrorCode::kPlanBadValue);
  PlanSpec arity = AttentionSpec();
  arity.commands.back().outputs = {10};
  EXPECT_EQ(LoadError(arity), ErrorCode::kPlanBadIndex);
  // In mixed precision q, k, v and o are F16 or BF16, lse stays F32.
  for (fb::DType type : {fb::DType::F16, fb::DType::BF16}) {
    PlanSpec half = AttentionSpec();
    for (int b : {7, 8, 9, 10}) half.buffers[b].dtype = type;
    EXPECT_EQ(LoadedOrError(half), "loaded") << fb::EnumNameDType(type);
    half.buffers[11].dtype = type;
    EXPECT_EQ(LoadedOrError(half),
              std::string("error[plan-bad-value]: program 'train_step' command 4 "
                          "(test.mlir:1:1): attention output 1 is ") +
                  fb::EnumNameDType(type) + ", not F32 (lse and biases are F32)");
  }
  PlanSpec mixed = AttentionSpec();  // q alone in half
  mixed.buffers[7].dtype = fb::DType::F16;
  EXPECT_EQ(LoadedOrError(mixed),
            "error[plan-bad-value]: program 'train_step' command 4 (test.mlir:1:1): attention "
            "input 1 is F32, not F16 (q's dtype)");
  PlanSpec integers = AttentionSpec();
  for (int b : {7, 8, 9, 10}) integers.buffers[b].dtype = fb::DType::I32;
  EXPECT_EQ(LoadedOrError(integers),
            "error[plan-bad-value]: program 'train_step' command 4 (test.mlir:1:1): attention "
            "on I32 (F32, F16 or BF16)");
  PlanSpec overlap = AttentionSpec();  // o written over q
  overlap.buffers[10].offset = 3072;
  EXPECT_EQ(LoadError(overlap), ErrorCode::kPlanAliasedOperands);
}

// Attention's biases follow its inputs, one per bias stride: [P, Lq, Lk]
// each, with a gradient of that shape per bias after the backward's dv.
TEST(PlanLoaderTest, AttentionBiasesLoadWithTheirShapesAndStridesOnly) {
  auto biased = [](std::vector<int64_t> bias_shape, std::vector<int64_t> strides) {
    PlanSpec spec = AttentionSpec();
    spec.buffers.push_back({"bias", std::move(bias_shape), fb::Region::Arena, 3904});  // 12
    spec.commands.back().inputs.push_back(12);
    spec.commands.back().bias_strides = std::move(strides);
    spec.program_inputs.push_back(12);
    return spec;
  };
  EXPECT_EQ(LoadedOrError(biased({2, 3, 5}, {1})), "loaded");
  EXPECT_EQ(LoadedOrError(biased({1, 3, 5}, {7})), "loaded");  // any stride reads slice 0
  EXPECT_EQ(LoadedOrError(biased({2, 5, 3}, {1})),
            "error[plan-bad-shape]: program 'train_step' command 4 (test.mlir:1:1): attention "
            "bias 0 [2x5x3] is not [P, 3, 5]");
  EXPECT_EQ(LoadedOrError(biased({2, 3, 5}, {0})),
            "error[plan-bad-value]: program 'train_step' command 4 (test.mlir:1:1): attention "
            "bias stride 0 (>= 1)");
  EXPECT_EQ(LoadError(biased({2, 3, 5}, {-4})), ErrorCode::kPlanBadValue);
  EXPECT_EQ(LoadedOrError(biased({2, 3, 5}, {1, 1})),
            "error[plan-bad-index]: program 'train_step' command 4 (test.mlir:1:1): takes 5 "
            "inputs and 2 outputs (2 biases), has 4 and 2");
  PlanSpec half_bias = biased({2, 3, 5}, {1});  // half attention, a half bias
  for (int b : {7, 8, 9, 10, 12}) half_bias.buffers[b].dtype = fb::DType::BF16;
  EXPECT_EQ(LoadedOrError(half_bias),
            "error[plan-bad-value]: program 'train_step' command 4 (test.mlir:1:1): attention "
            "input 3 is BF16, not F32 (lse and biases are F32)");
  PlanSpec unstrided = biased({2, 3, 5}, {});  // a fourth input without a stride
  EXPECT_EQ(LoadError(unstrided), ErrorCode::kPlanBadIndex);
  PlanSpec many = AttentionSpec();
  many.commands.back().bias_strides = {1, 1, 1, 1, 1};
  EXPECT_EQ(LoadedOrError(many),
            "error[plan-bad-value]: program 'train_step' command 4 (test.mlir:1:1): attention "
            "with 5 biases (at most 4)");
}

// An OHWI filter (v6) is checked as the OIHW filter it holds; it needs NHWC
// activations and a version 6 plan, which an older runtime refuses.
TEST(PlanLoaderTest, OhwiFiltersLoadWithNhwcActivationsOnly) {
  PlanSpec ohwi = NhwcSpec();
  ohwi.commands[0].filter_layout = fb::Layout::NHWC;  // w [5x3x3x3] is square: HWI = IHW
  EXPECT_EQ(LoadedOrError(ohwi), "loaded");
  PlanSpec channels = NhwcSpec();  // 4 input channels: OIHW [5x4x3x3] is OHWI [5x3x3x4]
  channels.buffers[0].shape = {2, 4, 4, 4};
  channels.buffers[1].shape = {5, 3, 3, 4};
  channels.commands[0].filter_layout = fb::Layout::NHWC;
  EXPECT_EQ(LoadedOrError(channels), "loaded");
  channels.commands[0].filter_layout = fb::Layout::NCHW;
  EXPECT_EQ(LoadedOrError(channels),
            "error[plan-bad-shape]: program 'train_step' command 0 (test.mlir:1:1): filter "
            "[5x3x3x4] does not match 4 input channels in 1 groups (NHWC)");
  PlanSpec nchw;  // OHWI filters with NCHW activations
  nchw.commands[0].filter_layout = fb::Layout::NHWC;
  EXPECT_EQ(LoadedOrError(nchw),
            "error[plan-bad-value]: program 'train_step' command 0 (test.mlir:1:1): an OHWI "
            "filter needs NHWC activations");
  PlanSpec old = ohwi;
  old.version = 5;
  EXPECT_EQ(LoadedOrError(old),
            "error[plan-bad-value]: program 'train_step' command 0 (test.mlir:1:1): an OHWI "
            "filter in a plan of schema version 5 (OHWI filters are version 6)");
  PlanSpec unknown = ohwi;
  unknown.commands[0].filter_layout = static_cast<fb::Layout>(9);
  EXPECT_EQ(LoadedOrError(unknown),
            "error[plan-bad-value]: program 'train_step' command 0 (test.mlir:1:1): "
            "convolution with unknown filter layout 9");
  std::ostringstream os;
  PrintPlan(**Plan::FromBytes(ohwi.Build()), PrintOptions(), os);
  EXPECT_NE(os.str().find("0 Conv2d layout nhwc filters ohwi [x, w] -> [y]"), std::string::npos)
      << os.str();
}

TEST(PlanLoaderTest, InspectNamesNhwcCommandsOnly) {
  for (bool nhwc : {false, true}) {
    StatusOr<std::unique_ptr<Plan>> plan =
        Plan::FromBytes(nhwc ? NhwcSpec().Build() : PlanSpec().Build());
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    std::ostringstream os;
    PrintPlan(**plan, PrintOptions(), os);
    const std::string text = os.str();
    EXPECT_NE(text.find(nhwc ? "0 Conv2d layout nhwc [x, w] -> [y]" : "0 Conv2d [x, w] -> [y]"),
              std::string::npos)
        << text;
    EXPECT_EQ(text.find("layout nhwc") != std::string::npos, nhwc) << text;
    if (nhwc)
      EXPECT_NE(text.find("1 MaxPool2d layout nhwc window 2x2 stride 2x2 [y] -> [p]"),
                std::string::npos)
          << text;
  }
}

TEST(PlanLoaderTest, KernelMissingForTheDevice) {
  StatusOr<std::unique_ptr<Plan>> plan = Plan::FromBytes(PlanSpec().Build());
  ASSERT_TRUE(plan.ok());
  Status cuda = (*plan)->CheckTarget(fb::Target::CudaSm90);
  EXPECT_EQ(cuda.code(), ErrorCode::kPlanMissingKernel);
  EXPECT_NE(cuda.message().find("CudaSm90"), std::string::npos) << cuda.message();

  // A binary defines every kernel of the plan, or the plan is refused.
  PlanSpec spec;
  spec.binary_symbols = {};
  EXPECT_EQ(LoadError(spec), ErrorCode::kPlanMissingKernel);

  // No binary at all: the plan loads (inspect can show it), no device runs it.
  PlanSpec none;
  none.with_cpu_binary = false;
  StatusOr<std::unique_ptr<Plan>> unrunnable = Plan::FromBytes(none.Build());
  ASSERT_TRUE(unrunnable.ok()) << unrunnable.status().ToString();
  EXPECT_EQ((*unrunnable)->CheckTarget(fb::Target::CpuX86_64).code(),
            ErrorCode::kPlanMissingKernel);
  // ... and the CPU backend says so instead of dereferencing the absent list.
  EXPECT_EQ(CreateCpuBackend(1)->LoadKernels(**unrunnable).code(),
            ErrorCode::kPlanMissingKernel);

  // A symbol that is no kernel of the plan has no arity to check launches by.
  spec.binary_symbols = {"k1"};
  EXPECT_EQ(LoadError(spec), ErrorCode::kPlanBadValue);
}

TEST(PlanLoaderTest, OneCpuLibraryPerX86Level) {
  // graphc --kernel-cpu=x86-64-v3,x86-64-v4: a library per level.
  PlanSpec levels;
  levels.cpu_levels = {"x86-64-v3", "x86-64-v4"};
  EXPECT_EQ(LoadedOrError(levels), "loaded");
  PlanSpec twice;
  twice.cpu_levels = {"x86-64-v3", "x86-64-v3"};
  EXPECT_EQ(LoadedOrError(twice),
            "error[plan-bad-value]: binary 1: a second binary for CpuX86_64 x86-64-v3");
  // The runtime picks a library by its level: only the four exist.
  for (std::string level : {"pentium", "", "x86-64-v5", "X86-64-V3"}) {
    PlanSpec unknown;
    unknown.cpu_levels = {"x86-64-v3", level};
    EXPECT_EQ(LoadedOrError(unknown),
              "error[plan-bad-value]: binary 1: x86-64 code for CPU '" + level +
                  "', which is none of x86-64, x86-64-v2, x86-64-v3, x86-64-v4");
  }
  // A level the plan lacks, asked for by name (graphrun --kernel-cpu), is an
  // error naming the plan's levels, before anything is loaded.
  StatusOr<std::unique_ptr<Plan>> plan = Plan::FromBytes(levels.Build());
  ASSERT_TRUE(plan.ok());
  Status absent = CreateCpuBackend(1, "x86-64-v2")->LoadKernels(**plan);
  EXPECT_EQ(absent.code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(absent.message(),
            "--kernel-cpu x86-64-v2: the plan's kernels are for 'x86-64-v3', 'x86-64-v4'");
}

TEST(PlanLoaderTest, PtxLaunchesWithinCudaLimitsAndTheKernelsBuffers) {
  PlanSpec spec;
  spec.with_ptx = true;
  StatusOr<std::unique_ptr<Plan>> plan = Plan::FromBytes(spec.Build());
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_TRUE((*plan)->CheckTarget(fb::Target::CudaSm90).ok());

  // k0 has one input and one output: buffer index 2 does not exist.
  spec.ptx_launches[0].args = {0, 2};
  StatusOr<std::unique_ptr<Plan>> bad_arg = Plan::FromBytes(spec.Build());
  ASSERT_FALSE(bad_arg.ok());
  EXPECT_EQ(bad_arg.status().code(), ErrorCode::kPlanBadIndex);
  EXPECT_NE(bad_arg.status().message().find("kernel 'k0' launch 0"), std::string::npos)
      << bad_arg.status().message();

  const std::vector<std::pair<std::vector<uint32_t>, std::vector<uint32_t>>> bad_sizes = {
      {{0, 1, 1}, {256, 1, 1}},      // an empty grid
      {{1, 1}, {256, 1, 1}},         // not 3-D
      {{1, 70000, 1}, {256, 1, 1}},  // grid y past 65535
      {{1, 1, 1}, {2048, 1, 1}},     // block x past 1024
      {{1, 1, 1}, {32, 32, 2}},      // 2048 threads per block
      {{1, 1, 1}, {1, 1, 128}},      // block z past 64
  };
  for (const auto& [grid, block] : bad_sizes) {
    PlanSpec sized;
    sized.with_ptx = true;
    sized.ptx_launches[0].grid = grid;
    sized.ptx_launches[0].block = block;
    EXPECT_EQ(LoadError(sized), ErrorCode::kPlanBadValue)
        << grid.size() << "-D grid " << grid[0] << ", block " << block[0];
  }

  PlanSpec no_launches;
  no_launches.with_ptx = true;
  no_launches.ptx_launches.clear();  // a PTX binary with no launch list
  EXPECT_EQ(LoadError(no_launches), ErrorCode::kPlanBadValue);

  // The entry must exist and take one pointer per buffer the table passes.
  PlanSpec fewer;
  fewer.with_ptx = true;
  fewer.ptx_params = 3;
  EXPECT_EQ(LoadError(fewer), ErrorCode::kPlanUnsafeCode);
  PlanSpec missing;
  missing.with_ptx = true;
  missing.ptx_entry = "k0_kern";  // a prefix of the real entry is not it
  EXPECT_EQ(LoadError(missing), ErrorCode::kPlanMissingKernel);
  PlanSpec nul;
  nul.with_ptx = true;
  nul.ptx_suffix = std::string("// \0", 4);
  EXPECT_EQ(LoadError(nul), ErrorCode::kPlanBadValue);
}

TEST(PlanLoaderTest, CpuLaunchesAreOneDimensionalLoopsOverTheKernelsBuffers) {
  PlanSpec spec;
  ASSERT_EQ(LoadError(spec.Build()), ErrorCode::kOk);

  PlanSpec bad_arg;
  bad_arg.cpu_launches[0].args = {3};
  EXPECT_EQ(LoadError(bad_arg.Build()), ErrorCode::kPlanBadIndex);

  // A grid or block in y, z, or threads per iteration: CUDA's, not the CPU's.
  const std::vector<std::pair<std::vector<uint32_t>, std::vector<uint32_t>>> bad_sizes = {
      {{0, 1, 1}, {1, 1, 1}}, {{4, 2, 1}, {1, 1, 1}}, {{4, 1, 1}, {256, 1, 1}},
      {{4, 1, 1}, {1, 1, 2}}, {{4, 1}, {1, 1, 1}},
  };
  for (const auto& [grid, block] : bad_sizes) {
    PlanSpec sized;
    sized.cpu_launches[0].grid = grid;
    sized.cpu_launches[0].block = block;
    EXPECT_EQ(LoadError(sized.Build()), ErrorCode::kPlanBadValue)
        << "grid " << grid[0] << ", block " << block[0];
  }

  // Version 1 plans (no CPU launches) are refused by name, not misread.
  PlanSpec old;
  old.version = 1;
  old.cpu_launches.clear();
  StatusOr<std::unique_ptr<Plan>> plan = Plan::FromBytes(old.Build());
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), ErrorCode::kPlanUnsupportedVersion);
  EXPECT_NE(plan.status().message().find("recompile"), std::string::npos);

  PlanSpec no_list;
  no_list.cpu_launches.clear();
  EXPECT_EQ(LoadError(no_list.Build()), ErrorCode::kPlanBadValue);
}

TEST(PlanLoaderTest, ErrorsNameTheirClassAndPlace) {
  PlanSpec spec;
  spec.commands[2].inputs = {-1};
  StatusOr<std::unique_ptr<Plan>> plan = Plan::FromBytes(spec.Build());
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().ToString(),
            "error[plan-bad-index]: program 'train_step' command 2 (test.mlir:1:1): "
            "input 0 is buffer -1, outside [0, 7)");
}

TEST(PlanLoaderTest, MissingFileIsAnIoError) {
  StatusOr<std::unique_ptr<Plan>> plan = Plan::FromFile("/nonexistent/plan.fb");
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), ErrorCode::kIo);
}


// Every error message from here on is checked for its class; these are the
// holes an adversarial review found in loaded-and-accepted plans.

TEST(PlanLoaderTest, ByteSizeOfAHugeShapeDoesNotWrap) {
  // 2^62 f32 elements are 2^64 bytes: the size wrapped to 0 and was accepted,
  // then the state initializer ran 2^62 elements off the buffer.
  PlanSpec spec;
  spec.buffers[4].shape = {int64_t{1} << 31, int64_t{1} << 31};
  spec.buffers[4].size = 0;
  EXPECT_EQ(LoadError(spec), ErrorCode::kPlanBadShape);
}

// The launch table must be what the code was compiled for: the library records
// each launch, and any difference is refused by name.
TEST(PlanLoaderTest, LaunchTableIsTiedToTheCodeItLaunches) {
  const PlanSpec original;
  const std::string compiled = original.Signature("k0", 0, original.cpu_launches[0]);
  auto load = [&](PlanSpec spec) {
    spec.signature_overrides["k0_l0"] = compiled;  // the library as compiled
    return Plan::FromBytes(spec.Build());
  };
  PlanSpec permuted;
  permuted.cpu_launches[0].args = {1, 0};
  PlanSpec empty;
  empty.cpu_launches[0].args = {};
  PlanSpec fewer_iterations;
  fewer_iterations.cpu_launches[0].grid = {5, 1, 1};
  PlanSpec other_sizes;  // the same kernel over buffers of another size
  other_sizes.kernel_arg_bytes = {320, 320};
  other_sizes.buffers[2].shape = {2, 5, 2, 4};
  other_sizes.buffers[3].shape = {2, 5, 2, 4};
  for (const PlanSpec* spec : {&permuted, &empty, &fewer_iterations, &other_sizes}) {
    StatusOr<std::unique_ptr<Plan>> plan = load(*spec);
    ASSERT_FALSE(plan.ok());
    EXPECT_EQ(plan.status().code(), ErrorCode::kPlanUnsafeCode) << plan.status().ToString();
    EXPECT_NE(plan.status().message().find("compiled for"), std::string::npos)
        << plan.status().message();
  }
  // Another kernel's entry: the record names the kernel it belongs to.
  PlanSpec foreign;
  foreign.signature_overrides["k0_l0"] =
      "graphc-launch-v1 kernel=k7 launch=0 iterations=10 args=0,1 bytes=160,160";
  EXPECT_EQ(LoadError(foreign), ErrorCode::kPlanUnsafeCode);
  // No record at all, or no function for the entry.
  PlanSpec unrecorded;
  unrecorded.signature_overrides["k0_l0"] = "";
  EXPECT_EQ(LoadError(unrecorded), ErrorCode::kPlanUnsafeCode);
  PlanSpec missing;
  testing::ElfSpec elf;
  elf.entries = {{"k9_l0", compiled}};
  missing.library = testing::BuildElf(elf);
  EXPECT_EQ(LoadError(missing), ErrorCode::kPlanMissingKernel);
}

TEST(PlanLoaderTest, EmbeddedLibraryMustRunNoCodeWhenLoaded) {
  testing::ElfSpec elf;
  PlanSpec spec;
  elf.entries = {{"k0_l0", spec.Signature("k0", 0, spec.cpu_launches[0])}};
  elf.extra_tags = {{DT_INIT_ARRAY, 0x1000}, {DT_INIT_ARRAYSZ, 8}};
  spec.library = testing::BuildElf(elf);
  StatusOr<std::unique_ptr<Plan>> plan = Plan::FromBytes(spec.Build());
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), ErrorCode::kPlanUnsafeCode);
  EXPECT_NE(plan.status().message().find("DT_INIT_ARRAY"), std::string::npos)
      << plan.status().message();
  // A truncated library: its segments map bytes past its end (a SIGBUS in
  // dlopen before this check).
  PlanSpec truncated;
  std::vector<uint8_t> cut = truncated.Library();
  cut.resize(cut.size() - 100);
  truncated.library = cut;
  EXPECT_EQ(LoadError(truncated), ErrorCode::kPlanUnsafeCode);
}

TEST(PlanLoaderTest, ProgramsReadOnlyMemorySomethingWrote) {
  PlanSpec unwritten;  // the copy reads arena bytes no command or input wrote
  unwritten.buffers.push_back({"ghost", {2, 5, 2, 2}, fb::Region::Arena, 3008});
  unwritten.commands[2].inputs = {7};
  StatusOr<std::unique_ptr<Plan>> plan = Plan::FromBytes(unwritten.Build());
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), ErrorCode::kPlanUndefinedRead);
  EXPECT_NE(plan.status().message().find("buffer 7 'ghost'"), std::string::npos)
      << plan.status().message();
  PlanSpec early;  // the copy of y moved before the convolution that writes y
  std::swap(early.commands[0], early.commands[2]);
  EXPECT_EQ(LoadError(early), ErrorCode::kPlanUndefinedRead);
  PlanSpec output;  // an output nothing writes
  output.buffers.push_back({"never", {4}, fb::Region::Arena, 3008});
  output.program_outputs.push_back(7);
  EXPECT_EQ(LoadError(output), ErrorCode::kPlanUndefinedRead);
}

// The valid plan with a collective: the gemm's output c (buffer 6) reduced
// by bucket 0, started and waited right after it; z (buffer 7) is spare
// arena memory, zv (8) a view of y2's bytes.
PlanSpec WithCollective() {
  PlanSpec spec;
  spec.buffers.push_back({"z", {2, 5, 2, 2}, fb::Region::Arena, 1536});
  spec.buffers.push_back({"zv", {2, 5, 2, 2}, fb::Region::Arena, 1024});
  CommandSpec start{fb::Opcode::AllreduceStart, {6}, {6}, {0}};
  start.collective = CommandSpec::Collective{};
  CommandSpec wait{fb::Opcode::AllreduceWait, {6}, {6}, {0}};
  wait.collective = CommandSpec::Collective{};
  spec.commands.push_back(start);
  spec.commands.push_back(wait);
  return spec;
}

std::string LoadMessage(const PlanSpec& spec) {
  StatusOr<std::unique_ptr<Plan>> plan = Plan::FromBytes(spec.Build());
  return plan.ok() ? "" : plan.status().message();
}

// The valid plan with a sparse allreduce: values (buffer 7) and indices (8),
// six of each copied from c, and c (6) as the dense buffer that receives the
// ranks' sets.
PlanSpec WithSparse() {
  PlanSpec spec;
  spec.buffers.push_back({"values", {6}, fb::Region::Arena, 2176});
  spec.buffers.push_back({"indices", {6}, fb::Region::Arena, 2240, -1, fb::DType::I32});
  spec.commands.push_back({fb::Opcode::Copy, {6}, {7}});
  spec.commands.push_back({fb::Opcode::Copy, {6}, {8}});
  CommandSpec start{fb::Opcode::AllreduceStart, {7, 8, 6}, {7, 8, 6}, {0, 1, 2}};
  start.collective = CommandSpec::Collective{0, fb::Reduction::Mean, fb::DType::F32, true};
  CommandSpec wait{fb::Opcode::AllreduceWait, {7, 8, 6}, {7, 8, 6}, {0, 1, 2}};
  wait.collective = CommandSpec::Collective{0, fb::Reduction::Sum, fb::DType::F32, true};
  spec.commands.push_back(start);
  spec.commands.push_back(wait);
  return spec;
}

TEST(PlanLoaderTest, SparseAllreducesTakeThreesOfValuesIndicesAndDense) {
  EXPECT_EQ(LoadMessage(WithSparse()), "");
  PlanSpec dtype = WithSparse();
  dtype.buffers[8].dtype = fb::DType::F32;
  EXPECT_EQ(LoadError(dtype), ErrorCode::kPlanBadValue);
  EXPECT_NE(LoadMessage(dtype).find("sparse allreduce buffer 8 'indices' is F32, not I32"),
            std::string::npos)
      << LoadMessage(dtype);
  PlanSpec two = WithSparse();
  for (size_t c : {two.commands.size() - 2, two.commands.size() - 1})
    two.commands[c].inputs = two.commands[c].outputs = {7, 6}, two.commands[c].in_place = {0, 1};
  EXPECT_NE(LoadMessage(two).find("takes threes of buffers"), std::string::npos)
      << LoadMessage(two);
  PlanSpec wire = WithSparse();
  wire.commands[wire.commands.size() - 2].collective->wire = fb::DType::F16;
  EXPECT_NE(LoadMessage(wire).find("travels as F32"), std::string::npos) << LoadMessage(wire);
  PlanSpec more = WithSparse();  // 8 values (copied from a) into a dense buffer of 6
  more.buffers[7].shape = {8};
  more.buffers[8].shape = {8};
  more.commands[4].inputs = more.commands[5].inputs = {4};
  EXPECT_NE(LoadMessage(more).find("a sparse set of 8 values, 8 indices and 6 dense elements"),
            std::string::npos)
      << LoadMessage(more);
  PlanSpec mismatch = WithSparse();
  mismatch.buffers[8].shape = {8};
  mismatch.commands[5].inputs = {4};
  EXPECT_NE(LoadMessage(mismatch).find("6 values, 8 indices"), std::string::npos)
      << LoadMessage(mismatch);
  // What it sends after a warm-up: at most what its set holds (6 here), and
  // only a sparse start says.
  PlanSpec sends = WithSparse();
  sends.commands[sends.commands.size() - 2].collective->sent_entries = 6;
  EXPECT_EQ(LoadMessage(sends), "");
  sends.commands[sends.commands.size() - 2].collective->sent_entries = 7;
  EXPECT_EQ(LoadError(sends), ErrorCode::kPlanBadValue);
  EXPECT_NE(LoadMessage(sends).find("sends 7 entries; its sets hold 6"), std::string::npos)
      << LoadMessage(sends);
  PlanSpec waitSends = WithSparse();
  waitSends.commands.back().collective->sent_entries = 1;
  EXPECT_NE(LoadMessage(waitSends).find("only a sparse start says what it sends"),
            std::string::npos)
      << LoadMessage(waitSends);
  PlanSpec denseSends = WithCollective();
  denseSends.commands[denseSends.commands.size() - 2].collective->sent_entries = 1;
  EXPECT_NE(LoadMessage(denseSends).find("only a sparse start says what it sends"),
            std::string::npos)
      << LoadMessage(denseSends);
  PlanSpec dense = WithSparse();  // waited for as a dense bucket: its indices do not reduce
  dense.commands.back().collective->sparse = false;
  EXPECT_EQ(LoadError(dense), ErrorCode::kPlanBadValue);
  EXPECT_NE(LoadMessage(dense).find("command 7 (test.mlir:1:1): reduces buffer 8 'indices' of "
                                    "type I32"),
            std::string::npos)
      << LoadMessage(dense);
}

TEST(PlanLoaderTest, CollectivesLoadWhenEveryStartHasItsWait) {
  EXPECT_EQ(LoadMessage(WithCollective()), "");
  // Two buckets in flight at once, each over its own bytes.
  PlanSpec spec = WithCollective();
  CommandSpec start{fb::Opcode::AllreduceStart, {3}, {3}, {0}};
  start.collective = CommandSpec::Collective{1, fb::Reduction::Sum, fb::DType::F16};
  CommandSpec wait{fb::Opcode::AllreduceWait, {3}, {3}, {0}};
  wait.collective = CommandSpec::Collective{1};
  spec.commands.insert(spec.commands.begin() + 3, start);  // after the copy into y2
  spec.commands.push_back(wait);
  EXPECT_EQ(LoadMessage(spec), "");
}

TEST(PlanLoaderTest, EveryStartHasExactlyOneLaterWaitOnTheSameBuffers) {
  PlanSpec never = WithCollective();
  never.commands.pop_back();
  EXPECT_EQ(LoadError(never), ErrorCode::kPlanBadValue);
  EXPECT_NE(LoadMessage(never).find("starts bucket 0, which the program never waits for"),
            std::string::npos)
      << LoadMessage(never);

  PlanSpec orphan = WithCollective();
  orphan.commands.erase(orphan.commands.end() - 2);
  EXPECT_EQ(LoadError(orphan), ErrorCode::kPlanBadValue);
  EXPECT_NE(LoadMessage(orphan).find("waits for bucket 0, which no earlier command started"),
            std::string::npos);

  PlanSpec twice = WithCollective();
  twice.commands.push_back(twice.commands.back());
  EXPECT_EQ(LoadError(twice), ErrorCode::kPlanBadValue);

  PlanSpec restarted = WithCollective();
  restarted.commands.insert(restarted.commands.end() - 1, restarted.commands.end()[-2]);
  EXPECT_EQ(LoadError(restarted), ErrorCode::kPlanBadValue);
  EXPECT_NE(LoadMessage(restarted).find("again while it is in flight"), std::string::npos);

  PlanSpec other = WithCollective();
  other.commands.back().inputs = other.commands.back().outputs = {3};
  EXPECT_EQ(LoadError(other), ErrorCode::kPlanBadValue);
  EXPECT_NE(LoadMessage(other).find("with other buffers than its start"), std::string::npos);

  PlanSpec bucket = WithCollective();
  bucket.commands.back().collective->bucket = 1;
  EXPECT_EQ(LoadError(bucket), ErrorCode::kPlanBadValue);
}

TEST(PlanLoaderTest, NothingTouchesABucketInFlight) {
  // y2 (buffer 3) in flight while a copy reads it.
  PlanSpec read = WithCollective();
  read.commands.pop_back();
  read.commands.pop_back();
  CommandSpec start{fb::Opcode::AllreduceStart, {3}, {3}, {0}};
  start.collective = CommandSpec::Collective{};
  CommandSpec wait{fb::Opcode::AllreduceWait, {3}, {3}, {0}};
  wait.collective = CommandSpec::Collective{};
  read.commands.insert(read.commands.begin() + 3, start);
  read.commands.insert(read.commands.begin() + 4, CommandSpec{fb::Opcode::Copy, {3}, {7}});
  read.commands.insert(read.commands.begin() + 5, wait);
  EXPECT_EQ(LoadError(read), ErrorCode::kPlanAliasedOperands);
  EXPECT_NE(LoadMessage(read).find("command 4 (test.mlir:1:1): reads buffer 3 'y2' while the allreduce "
                                   "of bucket 0 (command 3) has its bytes in flight"),
            std::string::npos)
      << LoadMessage(read);

  // A write through another buffer over the same bytes (zv is y2's memory).
  PlanSpec write = read;
  write.commands[4] = CommandSpec{fb::Opcode::Copy, {2}, {8}};
  EXPECT_EQ(LoadError(write), ErrorCode::kPlanAliasedOperands);
  EXPECT_NE(LoadMessage(write).find("writes buffer 8 'zv' while the allreduce of bucket 0"),
            std::string::npos)
      << LoadMessage(write);

  // After the wait the bytes are free again.
  PlanSpec after = read;
  std::swap(after.commands[4], after.commands[5]);
  EXPECT_EQ(LoadMessage(after), "");
}

TEST(PlanLoaderTest, CollectivesReduceDisjointFloatArenaBuffersInPlace) {
  auto mutate = [](auto change) {
    PlanSpec spec = WithCollective();
    for (size_t c = spec.commands.size() - 2; c < spec.commands.size(); ++c)
      change(spec.commands[c]);
    return spec;
  };
  // The state (w, buffer 1): parameters are never reduced in place.
  EXPECT_EQ(LoadError(mutate([](CommandSpec& c) { c.inputs = c.outputs = {1}; })),
            ErrorCode::kPlanBadValue);
  EXPECT_EQ(LoadError(mutate([](CommandSpec& c) { c.in_place = {}; })),
            ErrorCode::kPlanAliasedOperands);
  EXPECT_EQ(LoadError(mutate([](CommandSpec& c) { c.outputs = {3}; })),
            ErrorCode::kPlanAliasedOperands);
  EXPECT_EQ(LoadError(mutate([](CommandSpec& c) { c.collective.reset(); })),
            ErrorCode::kPlanBadValue);
  EXPECT_EQ(LoadError(mutate([](CommandSpec& c) { c.collective->wire = fb::DType::BF16; })),
            ErrorCode::kPlanBadValue);
  EXPECT_EQ(LoadError(mutate([](CommandSpec& c) {
              c.collective->reduction = static_cast<fb::Reduction>(7);
            })),
            ErrorCode::kPlanBadValue);
  EXPECT_EQ(LoadError(mutate([](CommandSpec& c) { c.collective->bucket = -1; })),
            ErrorCode::kPlanBadValue);
  // y2 and zv share bytes: one bucket cannot reduce both.
  PlanSpec overlap = WithCollective();
  for (size_t c = overlap.commands.size() - 2; c < overlap.commands.size(); ++c) {
    overlap.commands[c].inputs = overlap.commands[c].outputs = {3, 8};
    overlap.commands[c].in_place = {0, 1};
  }
  EXPECT_EQ(LoadError(overlap), ErrorCode::kPlanAliasedOperands);
  // Integer buffers do not reduce.
  PlanSpec integers = WithCollective();
  integers.buffers[6].dtype = fb::DType::I32;
  integers.commands[3] = CommandSpec{fb::Opcode::Copy, {2}, {3}};  // no gemm into it
  integers.program_outputs = {3};
  EXPECT_EQ(LoadError(integers), ErrorCode::kPlanBadValue);
  // Collective attributes on any other command are refused.
  PlanSpec stray = WithCollective();
  stray.commands[2].collective = CommandSpec::Collective{};
  EXPECT_EQ(LoadError(stray), ErrorCode::kPlanBadValue);
}

TEST(PlanLoaderTest, ProgramInputsAndOutputsShareNoMemory) {
  PlanSpec twice;
  twice.program_inputs = {0, 0};
  EXPECT_EQ(LoadError(twice), ErrorCode::kPlanAliasedOperands);
  PlanSpec overlapping;  // a second input over x's bytes
  overlapping.buffers.push_back({"x2", {4}, fb::Region::Arena, 16});
  overlapping.program_inputs = {0, 4, 7};
  EXPECT_EQ(LoadError(overlapping), ErrorCode::kPlanAliasedOperands);
  PlanSpec outputs;
  outputs.program_outputs = {3, 6, 3};
  EXPECT_EQ(LoadError(outputs), ErrorCode::kPlanAliasedOperands);
  // An output computed, then written over by a later command.
  PlanSpec clobbered;
  clobbered.program_outputs = {2, 6};  // y, then a copy of y2 over half of y
  clobbered.buffers.push_back({"z", {2, 5, 2, 2}, fb::Region::Arena, 592});
  clobbered.commands.push_back({fb::Opcode::Copy, {3}, {7}});
  EXPECT_EQ(LoadError(clobbered), ErrorCode::kPlanAliasedOperands);
  clobbered.program_outputs = {3, 6};  // y2 is untouched: fine
  EXPECT_EQ(LoadError(clobbered), ErrorCode::kOk);
  PlanSpec state_input;  // filling an "input" in the State region
  state_input.program_inputs = {0, 4, 1};
  EXPECT_EQ(LoadError(state_input), ErrorCode::kPlanBadValue);
}

// The loader compares operands pairwise: a crafted plan with huge operand
// lists is refused by count rather than checked for hours.
TEST(PlanLoaderTest, OperandListsAreBounded) {
  PlanSpec spec;
  spec.commands[2].inputs.assign(5000, 2);
  EXPECT_EQ(LoadError(spec), ErrorCode::kPlanBadValue);
  PlanSpec io;
  io.program_outputs.assign(5000, 3);
  EXPECT_EQ(LoadError(io), ErrorCode::kPlanBadValue);
  PlanSpec arity;
  arity.kernel_inputs = 5000;
  arity.kernel_arg_bytes.assign(5001, 160);
  EXPECT_EQ(LoadError(arity), ErrorCode::kPlanBadValue);
  // Within the per-list bound, the pairs compared over the whole plan are
  // bounded too (many commands of thousands of operands would take hours):
  // the small plan's checks compare a dozen pairs.
  LoaderLimits limits;
  limits.max_operand_pairs = 8;
  StatusOr<std::unique_ptr<Plan>> plan = Plan::FromBytes(PlanSpec().Build(), limits);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), ErrorCode::kPlanBadValue);
  EXPECT_NE(plan.status().message().find("operand pairs"), std::string::npos)
      << plan.status().message();
}

TEST(PlanLoaderTest, EveryStateByteHasOneInitializer) {
  PlanSpec uninitialized;  // State memory without an initializer
  uninitialized.buffers.push_back({"s", {16}, fb::Region::State, 768});
  EXPECT_EQ(LoadError(uninitialized), ErrorCode::kPlanUndefinedRead);
  uninitialized.more_state_buffers = {7};
  EXPECT_EQ(LoadError(uninitialized), ErrorCode::kOk);
  PlanSpec view;  // a view of an initialized state needs no initializer of its own
  view.buffers.push_back({"w_view", {135}, fb::Region::State, 0});
  EXPECT_EQ(LoadError(view), ErrorCode::kOk);
  view.more_state_buffers = {7};  // ... and may not have a second one
  EXPECT_EQ(LoadError(view), ErrorCode::kPlanAliasedOperands);
  PlanSpec nan;
  nan.state_init = fb::Initializer::Normal;
  nan.state_value = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(LoadError(nan), ErrorCode::kPlanBadValue);
  nan.state_value = -1;  // a negative standard deviation
  EXPECT_EQ(LoadError(nan), ErrorCode::kPlanBadValue);
  PlanSpec twins;  // two states of one name: no checkpoint could hold both
  twins.buffers.push_back({"w", {16}, fb::Region::State, 768});
  twins.more_state_buffers = {7};
  EXPECT_EQ(LoadError(twins), ErrorCode::kPlanBadValue);
  twins.buffers[7].name = "w\xff";  // not UTF-8
  EXPECT_EQ(LoadError(twins), ErrorCode::kPlanBadValue);
  twins.buffers[7].name = "w.momentum_buffer";
  EXPECT_EQ(LoadError(twins), ErrorCode::kOk);
  PlanSpec constant;  // Constant memory without data
  constant.buffers.push_back({"k", {4}, fb::Region::Constant, 48});
  EXPECT_EQ(LoadError(constant), ErrorCode::kPlanUndefinedRead);
}

TEST(PlanLoaderTest, NamesFromThePlanAreEscapedInMessages) {
  PlanSpec spec;
  spec.buffers[4].name = "evil\x1b[2J\xc2\x9b\xe2\x80\xae\xff";
  spec.buffers[4].size = 16;
  StatusOr<std::unique_ptr<Plan>> plan = Plan::FromBytes(spec.Build());
  ASSERT_FALSE(plan.ok());
  const std::string& message = plan.status().message();
  EXPECT_NE(message.find("'evil\\x1b[2J\\xc2\\x9b\\xe2\\x80\\xae\\xff'"), std::string::npos)
      << message;
  EXPECT_EQ(message.find('\x1b'), std::string::npos);
  EXPECT_EQ(Printable("conv1.weight \xc3\xa9t\xc3\xa9"), "conv1.weight \xc3\xa9t\xc3\xa9");
  EXPECT_EQ(Printable("a\\b\n"), "a\\\\b\\x0a");
  EXPECT_EQ(Printable(std::string(300, 'x')), std::string(256, 'x') + "...");
}

TEST(PlanLoaderTest, CorruptionIsCaughtByTheDigests) {
  std::vector<uint8_t> bytes = PlanSpec().Build();
  ASSERT_EQ(LoadError(bytes), ErrorCode::kOk);
  // A flipped bit anywhere the Verifier does not notice: the model name.
  std::vector<uint8_t> flipped = bytes;
  const std::string model = "test";
  auto at = std::search(flipped.begin(), flipped.end(), model.begin(), model.end());
  ASSERT_NE(at, flipped.end());
  *at ^= 1;
  StatusOr<std::unique_ptr<Plan>> plan = Plan::FromBytes(flipped);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), ErrorCode::kPlanIntegrity);
  EXPECT_NE(plan.status().message().find("SHA-256 mismatch"), std::string::npos);
  // The kernel code changed and the plan digest recomputed (as a careless
  // tool would): the kernel binary's own hash names it.
  std::vector<uint8_t> patched = bytes;
  const std::string magic = "\x7f" "ELF";
  auto elf = std::search(patched.begin(), patched.end(), magic.begin(), magic.end());
  ASSERT_NE(elf, patched.end());
  ASSERT_EQ(*(elf + 0x1000), 0xc3);  // the first kernel's `ret` (elf_builder.h)
  *(elf + 0x1000) = 0xcc;
  ASSERT_TRUE(SealPlan(patched.data(), patched.size()).ok());
  plan = Plan::FromBytes(patched);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), ErrorCode::kPlanIntegrity);
  EXPECT_NE(plan.status().message().find("kernel binary 0"), std::string::npos)
      << plan.status().message();
  PlanSpec undigested;
  undigested.with_digest = false;
  EXPECT_EQ(LoadError(undigested), ErrorCode::kPlanIntegrity);
  PlanSpec unsealed;
  unsealed.seal = false;
  EXPECT_EQ(LoadError(unsealed), ErrorCode::kPlanIntegrity);
}

TEST(PlanLoaderTest, SignedPlansVerifyOnlyAgainstTrustedKeys) {
  char dir[] = "/tmp/graphc-keys-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string base = dir;
  ASSERT_TRUE(GenerateKeyPair(base + "/a.key", base + "/a.pub").ok());
  ASSERT_TRUE(GenerateKeyPair(base + "/b.key", base + "/b.pub").ok());
  // Keys are never overwritten.
  EXPECT_EQ(GenerateKeyPair(base + "/a.key", base + "/c.pub").code(), ErrorCode::kIo);
  StatusOr<SecretKey> a = ReadSecretKey(base + "/a.key");
  StatusOr<PublicKey> a_pub = ReadPublicKey(base + "/a.pub");
  StatusOr<PublicKey> b_pub = ReadPublicKey(base + "/b.pub");
  ASSERT_TRUE(a.ok() && a_pub.ok() && b_pub.ok());
  EXPECT_EQ(PublicKeyOf(*a), *a_pub);
  EXPECT_EQ(ReadPublicKey(base + "/a.key").status().code(), ErrorCode::kInvalidArgument);

  PlanSpec spec;
  spec.key = *a;
  std::vector<uint8_t> bytes = spec.Build();
  StatusOr<std::unique_ptr<Plan>> plan = Plan::FromBytes(bytes);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_TRUE((*plan)->CheckSignature({*b_pub, *a_pub}).ok());
  Status untrusted = (*plan)->CheckSignature({*b_pub});
  EXPECT_EQ(untrusted.code(), ErrorCode::kPlanUntrusted);
  EXPECT_NE(untrusted.message().find(HexOf(*a_pub)), std::string::npos) << untrusted.message();
  // Edited, then resealed without the key: the digest is right, the signature not.
  const std::string model = "test";
  auto at = std::search(bytes.begin(), bytes.end(), model.begin(), model.end());
  *at = 'T';
  ASSERT_TRUE(SealPlan(bytes.data(), bytes.size()).ok());
  StatusOr<std::unique_ptr<Plan>> edited = Plan::FromBytes(bytes);
  ASSERT_TRUE(edited.ok()) << edited.status().ToString();
  EXPECT_EQ((*edited)->CheckSignature({*a_pub}).code(), ErrorCode::kPlanUntrusted);
  // `graphrun inspect` checks the signature against the key the plan names:
  // it says a signature verifies only when it does.
  std::ostringstream good, bad;
  PrintPlan(**plan, PrintOptions(), good);
  PrintPlan(**edited, PrintOptions(), bad);
  EXPECT_NE(good.str().find("signed by key " + HexOf(*a_pub) + " (the signature verifies"),
            std::string::npos) << good.str();
  EXPECT_NE(bad.str().find("signed by key " + HexOf(*a_pub) + ", but NOT VALIDLY: "),
            std::string::npos) << bad.str();
  EXPECT_EQ(bad.str().find("the signature verifies"), std::string::npos) << bad.str();
  // An unsigned plan is untrusted.
  StatusOr<std::unique_ptr<Plan>> unsigned_plan = Plan::FromBytes(PlanSpec().Build());
  ASSERT_TRUE(unsigned_plan.ok());
  EXPECT_EQ((*unsigned_plan)->CheckSignature({*a_pub}).code(), ErrorCode::kPlanUntrusted);
  // The loader checks trusted keys right after the digests: an untrusted plan
  // is refused before its semantics are read (this one's are broken too).
  PlanSpec broken;
  broken.buffers[0].offset = 1 << 30;  // past the arena
  EXPECT_EQ(Plan::FromBytes(broken.Build()).status().code(), ErrorCode::kPlanBufferOutOfRange);
  EXPECT_EQ(Plan::FromBytes(broken.Build(), LoaderLimits(), {*a_pub}).status().code(),
            ErrorCode::kPlanUntrusted);
  EXPECT_TRUE(Plan::FromBytes(std::vector<uint8_t>((*plan)->bytes()), LoaderLimits(),
                              {*b_pub, *a_pub})
                  .ok());
  StatusOr<std::vector<PublicKey>> keys = ReadTrustedKeys(base + "/b.pub,," + base + "/a.pub");
  ASSERT_TRUE(keys.ok()) << keys.status().ToString();
  EXPECT_EQ(keys->size(), 2u);
  EXPECT_EQ(ReadTrustedKeys(",").status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(ReadTrustedKeys(base + "/nothing.pub").status().code(), ErrorCode::kIo);
  for (const char* file : {"a.key", "a.pub", "b.key", "b.pub"}) unlink((base + "/" + file).c_str());
  rmdir(dir);
}

TEST(PlanLoaderTest, NonRegularFilesAreRefusedBeforeReading) {
  for (const char* path : {"/tmp", "/dev/zero", "/dev/null"}) {
    StatusOr<std::unique_ptr<Plan>> plan = Plan::FromFile(path);
    ASSERT_FALSE(plan.ok()) << path;
    EXPECT_EQ(plan.status().code(), ErrorCode::kIo) << path;
    EXPECT_NE(plan.status().message().find("not a regular file"), std::string::npos)
        << plan.status().message();
  }
}

}  // namespace
}  // namespace graphc::runtime
