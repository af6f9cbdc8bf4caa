// The CPU backend loads the kernels graphc generated into a real plan and they
// compute what the nn ops mean; it says how it computes half-precision library
// commands. The plan comes from the CTest fixture that runs
// `graphc compile models/mnist_softmax.mlir` (GRAPHC_TEST_PLAN); without it the
// tests skip and say why.

#include <gtest/gtest.h>
#include <omp.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "oneapi/dnnl/dnnl.hpp"

#include "runtime/core/backend.h"
#include "runtime/backends/cpu/cpu_backend.h"

namespace graphc::runtime {
namespace {

class CpuBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* path = std::getenv("GRAPHC_TEST_PLAN");
    if (path == nullptr) GTEST_SKIP() << "GRAPHC_TEST_PLAN is not set (run through ctest)";
    StatusOr<std::unique_ptr<Plan>> plan = Plan::FromFile(path);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    plan_ = std::move(*plan);
    backend_ = CreateCpuBackend();
    Status status = backend_->LoadKernels(*plan_);
    ASSERT_TRUE(status.ok()) << status.ToString();
  }

  // The first command of `program` that launches a kernel computing `op`.
  const fb::Command* FindLaunch(const std::string& program, const std::string& op) {
    for (const fb::Program* p : *plan_->root().programs()) {
      if (p->name()->str() != program) continue;
      for (const fb::Command* c : *p->commands()) {
        if (c->op() != fb::Opcode::Kernel) continue;
        const fb::Kernel* k = plan_->root().kernels()->Get(c->kernel());
        if (k->ops()->Get(0)->str() == op) return c;
      }
    }
    return nullptr;
  }

  // Runs `command` on fresh allocations holding `inputs`; returns the outputs.
  std::vector<std::vector<uint8_t>> RunOn(const fb::Command& command,
                                          const std::vector<std::vector<uint8_t>>& inputs) {
    std::vector<DeviceMemory> memory;
    for (int32_t i : *command.inputs()) {
      memory.push_back(*backend_->Allocate(plan_->root().buffers()->Get(i)->size()));
      const std::vector<uint8_t>& data = inputs[memory.size() - 1];
      EXPECT_EQ(data.size(), memory.back().bytes);
      EXPECT_TRUE(backend_->CopyToDevice(memory.back(), 0, data.data(), data.size()).ok());
    }
    for (int32_t o : *command.outputs())
      memory.push_back(*backend_->Allocate(plan_->root().buffers()->Get(o)->size()));
    Status status = backend_->Run(command, memory.data());
    EXPECT_TRUE(status.ok()) << status.ToString();
    EXPECT_TRUE(backend_->Synchronize().ok());
    std::vector<std::vector<uint8_t>> outputs;
    for (size_t i = command.inputs()->size(); i < memory.size(); ++i) {
      outputs.emplace_back(memory[i].bytes);
      EXPECT_TRUE(backend_->CopyToHost(outputs.back().data(), memory[i], 0, memory[i].bytes).ok());
    }
    for (DeviceMemory m : memory) backend_->Free(m);
    return outputs;
  }

  template <typename T>
  static std::vector<uint8_t> Bytes(const std::vector<T>& values) {
    std::vector<uint8_t> bytes(values.size() * sizeof(T));
    std::memcpy(bytes.data(), values.data(), bytes.size());
    return bytes;
  }

  std::unique_ptr<Plan> plan_;
  std::unique_ptr<Backend> backend_;
};

TEST_F(CpuBackendTest, SoftmaxCrossEntropyKernelMatchesReference) {
  const fb::Command* command = FindLaunch("train_step", "nn.softmax_cross_entropy");
  ASSERT_NE(command, nullptr);
  const fb::Buffer* logits = plan_->root().buffers()->Get(command->inputs()->Get(0));
  int64_t rows = logits->shape()->Get(0), classes = logits->shape()->Get(1);
  std::vector<float> x(rows * classes);
  std::vector<int32_t> labels(rows);
  for (int64_t i = 0; i < rows * classes; ++i) x[i] = std::sin(0.37 * i) * 3.0f;
  for (int64_t r = 0; r < rows; ++r) labels[r] = static_cast<int32_t>((r * 7) % classes);
  std::vector<std::vector<uint8_t>> out = RunOn(*command, {Bytes(x), Bytes(labels)});
  float loss;
  std::memcpy(&loss, out[0].data(), sizeof(float));

  double expected = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double m = -INFINITY, s = 0;
    for (int64_t c = 0; c < classes; ++c) m = std::max<double>(m, x[r * classes + c]);
    for (int64_t c = 0; c < classes; ++c) s += std::exp(x[r * classes + c] - m);
    expected += m + std::log(s) - x[r * classes + labels[r]];
  }
  expected /= rows;
  EXPECT_NEAR(loss, expected, 1e-5 * std::abs(expected) + 1e-6);
}

TEST_F(CpuBackendTest, InvalidLabelGivesNaNNotAWrongLoss) {
  const fb::Command* command = FindLaunch("train_step", "nn.softmax_cross_entropy");
  ASSERT_NE(command, nullptr);
  const fb::Buffer* logits = plan_->root().buffers()->Get(command->inputs()->Get(0));
  int64_t rows = logits->shape()->Get(0), classes = logits->shape()->Get(1);
  std::vector<float> x(rows * classes, 0.5f);
  std::vector<int32_t> labels(rows, 0);
  labels[rows - 1] = static_cast<int32_t>(classes);  // one past the last class
  std::vector<std::vector<uint8_t>> out = RunOn(*command, {Bytes(x), Bytes(labels)});
  float loss;
  std::memcpy(&loss, out[0].data(), sizeof(float));
  EXPECT_TRUE(std::isnan(loss));
}

// Fused (the test plan's default), the momentum updates of both parameters
// are one nn.multi_tensor kernel: per parameter (its group in the kernel's
// arg_groups), inputs p, g, v and outputs p', v', with the rank-0 learning
// rate shared. The weight's 7840 elements end in a partial block of 1024.
TEST_F(CpuBackendTest, SgdMomentumKernelMatchesPyTorchRule) {
  const fb::Command* command = FindLaunch("train_step", "nn.sgd_momentum");
  ASSERT_NE(command, nullptr);
  const fb::Kernel* kernel = plan_->root().kernels()->Get(command->kernel());
  const auto* buffers = plan_->root().buffers();
  const uint32_t num_inputs = command->inputs()->size();
  const uint32_t num_outputs = command->outputs()->size();
  auto group = [&](uint32_t arg) {
    const auto* groups = kernel->arg_groups();
    return groups != nullptr && groups->size() != 0 ? groups->Get(arg) : 0;
  };
  const float lr = 0.25f;
  std::vector<std::vector<float>> in(num_inputs);
  std::map<int32_t, std::vector<uint32_t>> inputs_of, outputs_of;  // per group
  for (uint32_t i = 0; i < num_inputs; ++i) {
    const fb::Buffer* b = buffers->Get(command->inputs()->Get(i));
    if (b->shape()->size() == 0) {
      in[i] = {lr};
      continue;
    }
    std::vector<uint32_t>& mine = inputs_of[group(i)];
    size_t role = mine.size();  // p, g, v
    mine.push_back(i);
    in[i].resize(b->size() / 4);
    for (size_t e = 0; e < in[i].size(); ++e)
      in[i][e] = role == 0 ? std::cos(0.1 * e + i) : role == 1 ? std::sin(0.3 * e)
                                                               : 0.01f * (e % 7);
  }
  for (uint32_t o = 0; o < num_outputs; ++o) outputs_of[group(num_inputs + o)].push_back(o);
  ASSERT_GE(inputs_of.size(), 2u) << "expected the updates of both parameters in one kernel";
  std::vector<std::vector<uint8_t>> bytes;
  for (const std::vector<float>& v : in) bytes.push_back(Bytes(v));
  std::vector<std::vector<uint8_t>> out = RunOn(*command, bytes);

  for (const auto& [g, ins] : inputs_of) {
    ASSERT_EQ(ins.size(), 3u);
    ASSERT_EQ(outputs_of[g].size(), 2u);
    const std::vector<float>& p = in[ins[0]];
    const std::vector<float>& grad = in[ins[1]];
    const std::vector<float>& v = in[ins[2]];
    // graphc's default optimizer: momentum 0.9, and weight decay only on rank > 1.
    const fb::Buffer* param = buffers->Get(command->inputs()->Get(ins[0]));
    double wd = param->shape()->size() > 1 ? 1e-4 : 0.0;
    for (size_t i = 0; i < p.size(); ++i) {
      double d = grad[i] + wd * p[i];
      double v2 = 0.9 * v[i] + d;
      double p2 = p[i] - lr * v2;
      float got_p, got_v;
      std::memcpy(&got_p, out[outputs_of[g][0]].data() + 4 * i, 4);
      std::memcpy(&got_v, out[outputs_of[g][1]].data() + 4 * i, 4);
      ASSERT_NEAR(got_v, v2, 1e-6) << "group " << g << " element " << i;
      ASSERT_NEAR(got_p, p2, 1e-6) << "group " << g << " element " << i;
    }
  }
}

// The oneDNN matmul behind every Gemm command (transposes by strides, bias
// broadcast over rows) against a float64 reference.
TEST_F(CpuBackendTest, GemmMatchesReference) {
  int gemms = 0;
  for (const fb::Program* p : *plan_->root().programs())
    for (const fb::Command* c : *p->commands()) {
      if (c->op() != fb::Opcode::Gemm) continue;
      const auto* buffers = plan_->root().buffers();
      auto shape = [&](int32_t index) {
        const auto* s = buffers->Get(index)->shape();
        return std::vector<int64_t>(s->begin(), s->end());
      };
      std::vector<int64_t> a = shape(c->inputs()->Get(0)), b = shape(c->inputs()->Get(1));
      std::vector<int64_t> out = shape(c->outputs()->Get(0));
      ASSERT_EQ(out.size(), 2u) << "the test covers rank-2 gemms";
      const bool ta = c->gemm()->transpose_a(), tb = c->gemm()->transpose_b();
      const int64_t m = out[0], n = out[1], k = ta ? a[0] : a[1];
      std::vector<std::vector<float>> in;
      uint32_t state = 12345;
      for (int32_t index : *c->inputs()) {
        std::vector<float> values(buffers->Get(index)->size() / 4);
        for (float& v : values) v = ((state = state * 1664525u + 1013904223u) >> 8) * 0x1p-24f - 0.5f;
        in.push_back(values);
      }
      std::vector<std::vector<uint8_t>> bytes;
      for (const auto& v : in)
        bytes.emplace_back(reinterpret_cast<const uint8_t*>(v.data()),
                           reinterpret_cast<const uint8_t*>(v.data() + v.size()));
      std::vector<std::vector<uint8_t>> result = RunOn(*c, bytes);
      ASSERT_EQ(result.size(), 1u);
      const float* got = reinterpret_cast<const float*>(result[0].data());
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double want = c->inputs()->size() == 3 ? in[2][j] : 0.0;
          for (int64_t l = 0; l < k; ++l)
            want += double{in[0][ta ? l * m + i : i * k + l]} *
                    double{in[1][tb ? j * k + l : l * n + j]};
          ASSERT_NEAR(got[i * n + j], want, 1e-4 * (1 + std::fabs(want)))
              << p->name()->str() << " gemm at (" << i << ", " << j << ")";
        }
      ++gemms;
    }
  EXPECT_GE(gemms, 2) << "mnist_softmax's plan has forward and backward gemms";
}

// The ISA cap a run was given (ONEDNN_MAX_CPU_ISA, or its older name
// DNNL_MAX_CPU_ISA), upper case, or "" for none.
std::string IsaCap() {
  for (const char* name : {"ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"})
    if (const char* value = std::getenv(name); value != nullptr && *value != '\0') {
      std::string cap = value;
      for (char& ch : cap) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
      return cap;
    }
  return "";
}

// FP16 is always widened to FP32 (oneDNN has no f16 convolutions on CPUs);
// BF16 runs natively exactly where the CPU has bf16 instructions (CPUID's
// AVX512_BF16, which every CPU with AMX has too) and no ISA cap below them is
// set, and otherwise says which ISA oneDNN found instead. CPUID is read here
// independently of oneDNN, so a CPU with bf16 hardware that the backend fails
// to use natively fails this test.
TEST(CpuBackendLibraryMath, FollowsTheCpuAndTheIsaCap) {
  std::unique_ptr<Backend> backend = CreateCpuBackend();
  EXPECT_EQ(backend->LibraryMath(fb::DType::F32), "fp32");
  const std::string f16 = backend->LibraryMath(fb::DType::F16);
  EXPECT_EQ(f16.rfind("fp16: emulated through fp32 (", 0), 0u) << f16;
  const std::string bf16 = backend->LibraryMath(fb::DType::BF16);
  __builtin_cpu_init();
  const bool bf16_hardware = __builtin_cpu_supports("avx512bf16");
  const std::string cap = IsaCap();
  const bool cap_allows =
      cap.empty() || cap == "ALL" || cap == "AVX512_CORE_BF16" || cap == "AVX512_CORE_AMX";
  std::cout << "[   INFO   ] CPUID avx512_bf16 " << bf16_hardware << ", amx_bf16 "
            << __builtin_cpu_supports("amx-bf16") << ", ISA cap '" << cap << "': " << bf16
            << "\n";
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  if (bf16_hardware && cap_allows) {
    ASSERT_TRUE(isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx)
        << "this CPU has AVX512_BF16 but oneDNN dispatches to ISA " << static_cast<int>(isa);
    const std::string name =
        isa == dnnl::cpu_isa::avx512_core_amx ? "avx512_core_amx" : "avx512_core_bf16";
    EXPECT_EQ(bf16, "bf16: oneDNN native (" + name + ")");
  } else {
    EXPECT_EQ(bf16.rfind("bf16: emulated through fp32 (oneDNN ", 0), 0u)
        << bf16;
    if (isa == dnnl::cpu_isa::avx2)
      EXPECT_NE(bf16.find("'s ISA here is avx2, without bf16 instructions"), std::string::npos)
          << bf16;
  }
}

// A run under an ISA cap (CTest's conformance-isa-* entries) runs the ISA it
// names, or skips where the CPU does not reach it (the run then repeats the
// default one).
TEST(CpuBackendLibraryMath, IsaCapTakesEffect) {
  const std::string cap = IsaCap();
  if (cap.empty()) GTEST_SKIP() << "no ONEDNN_MAX_CPU_ISA set";
  const std::map<std::string, dnnl::cpu_isa> caps = {
      {"AVX2", dnnl::cpu_isa::avx2},
      {"AVX512_CORE", dnnl::cpu_isa::avx512_core},
      {"AVX512_CORE_BF16", dnnl::cpu_isa::avx512_core_bf16}};
  auto wanted = caps.find(cap);
  if (wanted == caps.end()) GTEST_SKIP() << "no check for the cap " << cap;
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  __builtin_cpu_init();
  const bool reaches = cap == "AVX2"          ? __builtin_cpu_supports("avx2")
                       : cap == "AVX512_CORE" ? __builtin_cpu_supports("avx512f") &&
                                                    __builtin_cpu_supports("avx512bw")
                                              : __builtin_cpu_supports("avx512bf16");
  if (!reaches)
    GTEST_SKIP() << "this CPU does not reach " << cap << ": the run under the cap repeats "
                 << "the default one (oneDNN dispatches to ISA " << static_cast<int>(isa) << ")";
  EXPECT_EQ(static_cast<int>(isa), static_cast<int>(wanted->second))
      << "ONEDNN_MAX_CPU_ISA=" << cap << " did not take effect";
}

// Each launch's iterations are split into one chunk per thread; each chunk
// computes exactly what one thread would, so every generated kernel of a real
// plan (fmnist_cnn from the gradient-check fixtures: launches large enough to
// run on several threads) gives the same bits on 1 and 3 threads. (oneDNN's
// library calls promise no such thing across thread counts.)
TEST(CpuBackendThreads, GeneratedKernelsGiveTheSameBitsOnAnyThreadCount) {
  const char* env = std::getenv("GRAPHC_GRADCHECK_PLANS");
  const std::string wanted = "gradcheck_fmnist_cnn_fused.plan";
  std::string path;
  std::stringstream list(env ? env : "");
  for (std::string item; std::getline(list, item, ':');)
    if (item.size() >= wanted.size() && item.compare(item.size() - wanted.size(), wanted.size(), wanted) == 0)
      path = item;
  if (path.empty()) GTEST_SKIP() << "GRAPHC_GRADCHECK_PLANS has no fmnist_cnn plan (run through ctest)";
  StatusOr<std::unique_ptr<Plan>> plan = Plan::FromFile(path);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  // A backend sets OpenMP's thread count for the process (oneDNN reads it):
  // put it back for the tests that follow.
  const int saved_threads = omp_get_max_threads();
  std::unique_ptr<Backend> one = CreateCpuBackend(1), three = CreateCpuBackend(3);
  struct Restore {
    int threads;
    ~Restore() { omp_set_num_threads(threads); }
  } restore{saved_threads};
  ASSERT_TRUE(one->LoadKernels(**plan).ok());
  ASSERT_TRUE(three->LoadKernels(**plan).ok());
  const auto* buffers = (*plan)->root().buffers();
  int kernels = 0;
  uint32_t state = 7;
  for (const fb::Program* p : *(*plan)->root().programs())
    for (const fb::Command* c : *p->commands()) {
      if (c->op() != fb::Opcode::Kernel) continue;
      // The same inputs on both devices: floats in [-2, 2), small integers
      // (labels and the step counter stay in range), booleans.
      std::vector<std::vector<uint8_t>> outputs[2];
      std::vector<std::vector<uint8_t>> inputs;
      for (int32_t index : *c->inputs()) {
        const fb::Buffer* b = buffers->Get(index);
        std::vector<uint8_t> bytes(b->size());
        const uint64_t n = b->size() / DTypeBytes(b->dtype());
        for (uint64_t e = 0; e < n; ++e) {
          state = state * 1664525u + 1013904223u;
          if (b->dtype() == fb::DType::F32) {
            float v = (state >> 8) * 0x1p-22f - 2.0f;
            std::memcpy(bytes.data() + 4 * e, &v, 4);
          } else if (b->dtype() == fb::DType::I32) {
            int32_t v = static_cast<int32_t>((state >> 16) % 10);
            std::memcpy(bytes.data() + 4 * e, &v, 4);
          } else if (b->dtype() == fb::DType::I64) {
            int64_t v = (state >> 16) % 10;
            std::memcpy(bytes.data() + 8 * e, &v, 8);
          } else {
            bytes[e] = (state >> 16) & 1;
          }
        }
        inputs.push_back(std::move(bytes));
      }
      for (int d = 0; d < 2; ++d) {
        Backend& backend = d == 0 ? *one : *three;
        std::vector<DeviceMemory> memory;
        for (size_t i = 0; i < inputs.size(); ++i) {
          memory.push_back(*backend.Allocate(inputs[i].size()));
          ASSERT_TRUE(backend.CopyToDevice(memory.back(), 0, inputs[i].data(), inputs[i].size()).ok());
        }
        for (int32_t o : *c->outputs()) memory.push_back(*backend.Allocate(buffers->Get(o)->size()));
        ASSERT_TRUE(backend.Run(*c, memory.data()).ok());
        for (size_t i = inputs.size(); i < memory.size(); ++i) {
          outputs[d].emplace_back(memory[i].bytes);
          ASSERT_TRUE(backend.CopyToHost(outputs[d].back().data(), memory[i], 0, memory[i].bytes).ok());
        }
        for (DeviceMemory m : memory) backend.Free(m);
      }
      ASSERT_EQ(outputs[0], outputs[1])
          << p->name()->str() << " kernel " << (*plan)->root().kernels()->Get(c->kernel())->name()->str();
      ++kernels;
    }
  EXPECT_GE(kernels, 20);
}

}  // namespace
}  // namespace graphc::runtime
