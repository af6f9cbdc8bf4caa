#include "tools/graphrun/infer_command.h"

#include <iostream>
#include <memory>
#include <sstream>
#include <vector>

#include "contract/cpu_levels.h"
#include "contract/files.h"
#include "contract/printable.h"
#include "runtime/backends/backend_factory.h"
#include "runtime/core/executor.h"
#include "runtime/core/plan_loader.h"
#include "runtime/train/checkpoint.h"
#include "runtime/train/dataset.h"
#include "tools/graphrun/load_plan.h"

namespace graphc::runtime {
namespace {

int Fail(const Status& status) {
  std::cerr << "graphrun: " << status.ToString() << "\n";
  return 1;
}

std::vector<std::string> SplitList(const std::string& list) {
  std::vector<std::string> items;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) items.push_back(item);
  return items;
}

}  // namespace

CLI::App* AddInferCommand(CLI::App& app, InferFlags& f) {
  CLI::App* c = app.add_subcommand(
      "infer",
      "run an inference-only plan (graphc compile --forward) once: its inputs from float32 "
      "(or, for 8-bit images, uint8) .npy files, its outputs written as .npy files");
  c->add_option("plan", f.plan, "the plan file (graphc compile --forward -o)")->required();
  c->add_option("--inputs", f.inputs,
                "the program's inputs in order, comma-separated .npy files (float32, or uint8 "
                "for images compiled with --input-normalize; exactly the plan's shapes)")
      ->required();
  c->add_option("--outputs", f.outputs,
                "where its outputs go, in order, comma-separated (written atomically as "
                "float32 .npy)")
      ->required();
  c->add_option("--init", f.init,
                "the weights (safetensors: what graphc import wrote, a PyTorch state_dict, or "
                "a training checkpoint of graphrun --save, its optimizer slots left out); "
                "without it, parameters start as the model's initializers say (--seed)");
  c->add_option("--device", f.device, "auto (default), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  c->add_option("--seed", f.seed, "seed of the initial parameters without --init (default 1)");
  c->add_option("--threads", f.threads, "the CPU's threads (default: every core)")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  c->add_option("--kernel-cpu", f.kernel_cpu,
                "run the plan's kernel library for this x86-64 level (default: the highest "
                "of the plan's that this CPU runs)")
      ->check(CLI::IsMember(std::vector<std::string>(kX86Levels.begin(), kX86Levels.end())));
  c->add_flag("--tf32", f.tf32, "CUDA: allow TF32 for FP32 math (default: strict FP32)");
  c->add_option("--trusted-keys", f.trusted_keys,
                "run only plans signed by one of these public keys");
  return c;
}

int RunInferCommand(const InferFlags& f) {
  const std::vector<std::string> inputs = SplitList(f.inputs), outputs = SplitList(f.outputs);
  for (const std::string& path : outputs) {
    if (path.empty()) return Fail(Status(ErrorCode::kInvalidArgument, "--outputs names an empty path"));
    Status replaceable = CheckReplaceable(path);
    if (!replaceable.ok()) return Fail(replaceable);
  }
  StatusOr<std::unique_ptr<Plan>> plan = LoadPlan(f.plan, f.trusted_keys);
  if (!plan.ok()) return Fail(plan.status());
  StatusOr<DeviceKind> kind = ParseDeviceKind(f.device);
  if (!kind.ok()) return Fail(kind.status());
  BackendOptions options;
  options.cpu_threads = static_cast<int>(f.threads);
  options.cpu_kernels = f.kernel_cpu;
  options.tf32 = f.tf32;
  StatusOr<CreatedBackend> created = CreateBackend(*kind, options);
  if (!created.ok()) return Fail(created.status());
  StatusOr<std::unique_ptr<Executor>> made = Executor::Create(**plan, *created->backend);
  if (!made.ok()) return Fail(made.status());
  Executor& exec = **made;
  StatusOr<int> program = exec.FindProgram("infer");
  if (!program.ok())
    return Fail(Status(ErrorCode::kInvalidArgument,
                       Printable(f.plan) + " has no program 'infer': compile the model with "
                                           "graphc compile --forward"));
  const fb::Program& infer = exec.program(*program);
  if (inputs.size() != infer.inputs()->size() || outputs.size() != infer.outputs()->size())
    return Fail(Status(ErrorCode::kInvalidArgument,
                       "the plan's infer takes " + std::to_string(infer.inputs()->size()) +
                           " inputs and gives " + std::to_string(infer.outputs()->size()) +
                           " outputs; --inputs names " + std::to_string(inputs.size()) +
                           " and --outputs " + std::to_string(outputs.size())));
  if (Status s = exec.InitializeState(f.seed); !s.ok()) return Fail(s);
  if (!f.init.empty())
    if (Status s = LoadInferenceWeights(exec, f.init); !s.ok()) return Fail(s);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const int32_t buffer = infer.inputs()->Get(static_cast<flatbuffers::uoffset_t>(i));
    const fb::Buffer& b = exec.buffer(buffer);
    // 8-bit images (graphc compile --input-normalize) from uint8 arrays.
    const bool bytes = b.dtype() == fb::DType::U8;
    std::vector<int64_t> shape;
    std::vector<float> floats;
    std::vector<uint8_t> pixels;
    if (bytes) {
      StatusOr<NpyBytes> array = ReadNpyUint8(inputs[i]);
      if (!array.ok()) return Fail(array.status());
      shape = array->shape;
      pixels = std::move(array->values);
    } else {
      StatusOr<NpyArray> array = ReadNpyFloat32(inputs[i]);
      if (!array.ok()) return Fail(array.status());
      shape = array->shape;
      floats = std::move(array->values);
    }
    if ((b.dtype() != fb::DType::F32 && !bytes) || shape != ShapeOf(b))
      return Fail(Status(ErrorCode::kInvalidArgument,
                         Printable(inputs[i]) + ": input " + std::to_string(i) + " ('" +
                             Printable(StringOf(b.name())) + "') is " +
                             fb::EnumNameDType(b.dtype()) + " " + ShapeString(ShapeOf(b)) +
                             ", the file " + (bytes ? "uint8 " : "float32 ") +
                             ShapeString(shape)));
    Status written = bytes ? exec.Write(buffer, pixels.data(), pixels.size())
                           : exec.Write(buffer, floats.data(), floats.size() * 4);
    if (!written.ok()) return Fail(written);
  }
  if (Status s = exec.Run(*program); !s.ok()) return Fail(s);
  std::cout << "infer: " << created->backend->Describe() << "\n";
  for (size_t i = 0; i < outputs.size(); ++i) {
    const int32_t buffer = infer.outputs()->Get(static_cast<flatbuffers::uoffset_t>(i));
    const fb::Buffer& b = exec.buffer(buffer);
    if (b.dtype() != fb::DType::F32)
      return Fail(Status(ErrorCode::kUnsupported,
                         "output " + std::to_string(i) + " is " + fb::EnumNameDType(b.dtype()) +
                             "; graphrun infer writes float32"));
    std::vector<float> values(b.size() / 4);
    if (Status s = exec.Read(buffer, values.data(), values.size() * 4); !s.ok()) return Fail(s);
    const std::vector<int64_t> shape = ShapeOf(b);
    Status written =
        WriteFileAtomically(outputs[i], NpyFloat32File(shape, values.data(), values.size()));
    if (!written.ok()) return Fail(written);
    std::cout << "wrote " << Printable(outputs[i]) << ": float32 " << ShapeString(shape) << "\n";
  }
  return 0;
}

}  // namespace graphc::runtime
