// `graphrun inspect`: metadata, memory, kernels, commands and state of a plan.

#include "runtime/core/plan_printer.h"

#include <cstring>
#include <iomanip>
#include <sstream>
#include <map>
#include <string>
#include <unordered_map>

namespace graphc::runtime {
namespace {

std::string MiB(uint64_t bytes) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(2) << bytes / (1024.0 * 1024.0) << " MiB";
  return os.str();
}

std::string TypeString(const fb::Buffer& b) {
  std::string s = fb::EnumNameDType(b.dtype());
  s += "[";
  for (uint32_t i = 0; i < b.shape()->size(); ++i)
    s += (i ? "x" : "") + std::to_string(b.shape()->Get(i));
  return s + "]";
}

std::string NameOf(const fb::Plan& plan, int32_t index) {
  const fb::Buffer* b = plan.buffers()->Get(index);
  return b->name() ? PrintableOf(b->name()) : "#" + std::to_string(index);
}

std::string List(const fb::Plan& plan, const flatbuffers::Vector<int32_t>& indices) {
  std::string s;
  for (uint32_t i = 0; i < indices.size(); ++i)
    s += (i ? ", " : "") + NameOf(plan, indices.Get(i));
  return s;
}

bool IsConvolution(fb::Opcode op) {
  return op == fb::Opcode::Conv2d || op == fb::Opcode::Conv2dBackwardData ||
         op == fb::Opcode::Conv2dBackwardFilter;
}

bool IsPooling(fb::Opcode op) {
  return op == fb::Opcode::MaxPool2d || op == fb::Opcode::AvgPool2d ||
         op == fb::Opcode::MaxPool2dBackward || op == fb::Opcode::AvgPool2dBackward;
}

// The activation layout of a convolution or pooling command; NCHW for others.
fb::Layout LayoutOf(const fb::Command& c) {
  if (IsConvolution(c.op()) && c.conv()) return c.conv()->layout();
  if (IsPooling(c.op()) && c.pool()) return c.pool()->layout();
  return fb::Layout::NCHW;
}

// A vector attribute's values joined by `sep` ("" for an absent one).
std::string Joined(const flatbuffers::Vector<int64_t>* v, const char* sep) {
  std::string s;
  if (v == nullptr) return s;
  for (uint32_t i = 0; i < v->size(); ++i) s += (i ? sep : "") + std::to_string(v->Get(i));
  return s;
}

bool AllEqual(const flatbuffers::Vector<int64_t>* v, int64_t value) {
  if (v == nullptr) return true;
  for (uint32_t i = 0; i < v->size(); ++i)
    if (v->Get(i) != value) return false;
  return true;
}

// A library command's attributes that differ from their defaults (a 1x1
// stride, no padding, no dilation, one group, no transposes), as
// ` name value` pairs: what decides which computation the library runs.
std::string AttributesOf(const fb::Command& c) {
  std::ostringstream os;
  const fb::Opcode op = c.op();
  if (const fb::ConvAttrs* conv = c.conv(); conv != nullptr && IsConvolution(op)) {
    if (!AllEqual(conv->strides(), 1)) os << " stride " << Joined(conv->strides(), "x");
    if (!AllEqual(conv->padding(), 0)) os << " padding " << Joined(conv->padding(), ",");
    if (!AllEqual(conv->dilations(), 1)) os << " dilation " << Joined(conv->dilations(), "x");
    if (conv->groups() != 1) os << " groups " << conv->groups();
  }
  if (const fb::PoolAttrs* pool = c.pool(); pool != nullptr && IsPooling(op)) {
    os << " window " << Joined(pool->window(), "x");
    if (!AllEqual(pool->strides(), 1)) os << " stride " << Joined(pool->strides(), "x");
    if (!AllEqual(pool->padding(), 0)) os << " padding " << Joined(pool->padding(), ",");
    if (pool->exclude_padding()) os << " exclude_padding";
  }
  if (const fb::GemmAttrs* gemm = c.gemm(); gemm != nullptr && op == fb::Opcode::Gemm) {
    if (gemm->transpose_a()) os << " transpose_a";
    if (gemm->transpose_b()) os << " transpose_b";
  }
  if (const fb::AttentionAttrs* attention = c.attention();
      attention != nullptr &&
      (op == fb::Opcode::Attention || op == fb::Opcode::AttentionBackward)) {
    if (attention->transpose_k()) os << " transpose_k";
    if (attention->bias_strides() && attention->bias_strides()->size())
      os << " bias_strides " << Joined(attention->bias_strides(), ",");
  }
  return os.str();
}

// ", N launches, M of one thread" for a PTX binary (one-thread launches run
// what the GPU mapping could not parallelize, such as full reductions).
std::string LaunchSummary(const fb::KernelBinary& binary) {
  if (binary.launches() == nullptr) return "";
  uint64_t launches = 0, single = 0;
  for (const fb::GpuKernel* kernel : *binary.launches())
    for (const fb::GpuLaunch* launch : *kernel->launches()) {
      ++launches;
      uint64_t threads = 1;
      for (int d = 0; d < 3; ++d) threads *= uint64_t{launch->grid()->Get(d)} * launch->block()->Get(d);
      single += threads == 1;
    }
  return ", " + std::to_string(launches) + " launches, " + std::to_string(single) +
         " of one thread";
}

}  // namespace

std::string KernelOpsString(const fb::Kernel& kernel, const char* separator) {
  std::string out;
  if (kernel.ops() == nullptr) return out;
  const auto& ops = *kernel.ops();
  for (uint32_t i = 0; i < ops.size();) {
    uint32_t end = i + 1;
    while (end < ops.size() && ops.Get(end)->str() == ops.Get(i)->str()) ++end;
    out += (out.empty() ? "" : separator) + Printable(ops.Get(i)->str());
    if (end - i > 1) out += " x" + std::to_string(end - i);
    i = end;
  }
  return out;
}

void PrintPlan(const Plan& loaded, const PrintOptions& options, std::ostream& os) {
  const fb::Plan& plan = loaded.root();
  os << "plan: model " << PrintableOf(plan.model()) << ", batch " << plan.batch_size();
  if (plan.micro_batches() > 1)
    os << " (" << plan.micro_batches() << " micro-batches of "
       << plan.batch_size() / plan.micro_batches() << ")";
  os << ", precision " << PrintableOf(plan.precision()) << ", "
     << (plan.fused() ? "fused" : "unfused") << ", schema v" << plan.version() << ", "
     << loaded.file_size() << " bytes\n";
  os << "targets:";
  if (plan.binaries())
    for (const fb::KernelBinary* b : *plan.binaries())
      os << " " << fb::EnumNameTarget(b->target()) << " ("
         << fb::EnumNameBinaryFormat(b->format()) << ", " << PrintableOf(b->cpu()) << ", "
         << b->data()->size() << " bytes" << LaunchSummary(*b) << ")";
  os << "\n";
  // What the loader verified: the digests (so a user can compare a kernel
  // binary with `sha256sum` of graphc --dump-kernels), and who signed it.
  // A signature is checked against the key the plan names: whether it
  // verifies is a fact about the file; whether that key is trusted is the
  // user's to say (--trusted-keys).
  if (plan.digest() && plan.digest()->size() == 32) {
    std::string signature = "unsigned";
    if (plan.signature() && plan.signature()->size() != 0) {
      if (plan.signer() == nullptr || plan.signer()->size() != 32) {
        signature = "signed, but the signature is malformed (no 32-byte signer key)";
      } else {
        PublicKey signer;
        std::memcpy(signer.data(), plan.signer()->data(), 32);
        const Status verified = loaded.CheckSignature({signer});
        signature = verified.ok()
                        ? "signed by key " + HexOf(signer) +
                              " (the signature verifies; --trusted-keys checks the key is "
                              "trusted)"
                        : "signed by key " + HexOf(signer) +
                              ", but NOT VALIDLY: " + verified.message();
      }
    }
    os << "integrity: sha256 " << HexOf(plan.digest()->data(), 32) << " (verified), "
       << signature << "\n";
  }
  if (plan.binaries())
    for (const fb::KernelBinary* b : *plan.binaries())
      if (b->sha256() && b->sha256()->size() == 32)
        os << "  " << fb::EnumNameTarget(b->target()) << " code sha256 "
           << HexOf(b->sha256()->data(), 32) << "\n";
  uint64_t parameters = 0, parameter_tensors = 0;
  if (plan.states())
    for (const fb::State* s : *plan.states())
      if (s->trainable()) {
        ++parameter_tensors;
        const fb::Buffer* b = plan.buffers()->Get(s->buffer());
        parameters += b->size() / DTypeBytes(b->dtype());
      }
  os << "memory: arena " << plan.arena_size() << " bytes (" << MiB(plan.arena_size())
     << ", peak of all programs), tensors without reuse " << plan.tensor_bytes() << " bytes ("
     << MiB(plan.tensor_bytes()) << "), state " << plan.state_size() << " bytes ("
     << MiB(plan.state_size()) << "), constants " << plan.constant_size() << " bytes\n";
  os << "counts: " << plan.buffers()->size() << " buffers, "
     << (plan.states() ? plan.states()->size() : 0) << " state tensors ("
     << parameter_tensors << " parameters, " << parameters << " values), "
     << (plan.constants() ? plan.constants()->size() : 0) << " constants, "
     << (plan.kernels() ? plan.kernels()->size() : 0) << " kernels\n";
  for (const fb::Program* program : *plan.programs()) {
    std::map<std::string, int> by_op;
    for (const fb::Command* c : *program->commands())
      ++by_op[c->op() == fb::Opcode::Kernel
                  ? std::string("kernel")
                  : std::string(fb::EnumNameOpcode(c->op()))];
    os << "program " << PrintableOf(program->name()) << ": " << program->commands()->size()
       << " commands (";
    bool first = true;
    for (const auto& [op, count] : by_op) {
      os << (first ? "" : ", ") << count << " " << op;
      first = false;
    }
    os << "), arena " << program->arena_size() << " bytes, inputs ["
       << List(plan, *program->inputs()) << "], outputs [" << List(plan, *program->outputs())
       << "]\n";
    // The fusion report: generated kernels' launches and traffic per run.
    uint64_t launches = 0, bytes = 0;
    for (const fb::Command* c : *program->commands()) {
      if (c->op() != fb::Opcode::Kernel || !plan.kernels() || c->kernel() < 0 ||
          static_cast<uint32_t>(c->kernel()) >= plan.kernels()->size())
        continue;
      ++launches;
      const fb::Kernel* k = plan.kernels()->Get(c->kernel());
      if (k->arg_bytes())
        for (uint64_t b : *k->arg_bytes()) bytes += b;
    }
    os << "  kernels: " << launches << " launches, " << MiB(bytes) << " read and written";
    if (program->unfused_kernel_launches() != 0)
      os << " (unfused: " << program->unfused_kernel_launches() << " launches, "
         << MiB(program->unfused_kernel_bytes()) << ")";
    os << "\n";
  }

  if (options.states && plan.states()) {
    os << "\nstate:\n";
    for (const fb::State* s : *plan.states()) {
      const fb::Buffer* b = plan.buffers()->Get(s->buffer());
      os << "  " << PrintableOf(b->name()) << " " << TypeString(*b) << " = "
         << fb::EnumNameInitializer(s->init());
      if (s->init() == fb::Initializer::Constant || s->init() == fb::Initializer::Normal ||
          s->init() == fb::Initializer::Uniform)
        os << "(" << s->value() << ")";
      os << (s->trainable() ? " trainable" : "") << " @" << b->offset() << "\n";
    }
  }
  if (options.buffers) {
    os << "\nbuffers:\n";
    for (uint32_t i = 0; i < plan.buffers()->size(); ++i) {
      const fb::Buffer* b = plan.buffers()->Get(i);
      os << "  " << i << " " << PrintableOf(b->name()) << " " << TypeString(*b) << " "
         << fb::EnumNameRegion(b->region()) << " [" << b->offset() << ", "
         << b->offset() + b->size() << ")\n";
    }
  }
  if (options.kernels && plan.kernels()) {
    os << "\nkernels:\n";
    for (const fb::Kernel* k : *plan.kernels()) {
      os << "  " << PrintableOf(k->name()) << ":";
      os << " " << KernelOpsString(*k, " ");
      os << " (" << k->num_inputs() << " in, " << k->num_outputs() << " out"
         << (k->elementwise() ? ", elementwise" : "") << ")\n";
    }
  }
  if (options.launches && plan.binaries() && plan.kernels()) {
    for (const fb::KernelBinary* binary : *plan.binaries()) {
      if (binary->launches() == nullptr || binary->symbols() == nullptr) continue;
      os << "\nlaunches of " << fb::EnumNameTarget(binary->target())
         << (binary->target() == fb::Target::CpuX86_64 ? " " + PrintableOf(binary->cpu()) : "")
         << " (kernel: entry grid block = threads, bytes passed):\n";
      // The loader proved one launch list per symbol and args in range.
      std::unordered_map<std::string, const fb::Kernel*> kernels;
      for (const fb::Kernel* k : *plan.kernels()) kernels.emplace(StringOf(k->name()), k);
      for (uint32_t i = 0; i < binary->symbols()->size(); ++i) {
        const std::string name = StringOf(binary->symbols()->Get(i));
        auto found = kernels.find(name);
        for (const fb::GpuLaunch* launch : *binary->launches()->Get(i)->launches()) {
          uint64_t threads = 1, bytes = 0;
          for (uint32_t d = 0; d < 3; ++d)
            threads *= uint64_t{launch->grid()->Get(d)} * launch->block()->Get(d);
          if (found != kernels.end() && found->second->arg_bytes())
            for (uint32_t arg : *launch->args())
              if (arg < found->second->arg_bytes()->size())
                bytes += found->second->arg_bytes()->Get(arg);
          auto dims = [](const flatbuffers::Vector<uint32_t>& v) {
            return std::to_string(v.Get(0)) + "x" + std::to_string(v.Get(1)) + "x" +
                   std::to_string(v.Get(2));
          };
          os << "  " << Printable(name) << ": " << PrintableOf(launch->entry()) << " "
             << dims(*launch->grid()) << " " << dims(*launch->block()) << " = " << threads
             << ", " << bytes << "\n";
        }
      }
    }
  }
  if (options.commands) {
    for (const fb::Program* program : *plan.programs()) {
      os << "\ncommands of " << PrintableOf(program->name()) << ":\n";
      uint32_t index = 0;
      for (const fb::Command* c : *program->commands()) {
        os << "  " << index++ << " ";
        if (c->op() == fb::Opcode::Kernel)
          os << "kernel " << PrintableOf(plan.kernels()->Get(c->kernel())->name());
        else
          os << fb::EnumNameOpcode(c->op());
        if (IsCollective(c->op()) && c->collective()) {
          os << (c->collective()->sparse() ? " sparse" : "") << " bucket "
             << c->collective()->bucket();
          if (c->op() == fb::Opcode::AllreduceStart)
            os << " " << fb::EnumNameReduction(c->collective()->reduction())
               << (c->collective()->wire() == fb::DType::F16 ? " wire F16" : "");
          if (c->collective()->sent_entries() != 0)
            os << " sends " << c->collective()->sent_entries();
        }
        // NCHW, the default, goes unsaid: plans before layouts print as they did.
        if (LayoutOf(*c) == fb::Layout::NHWC) os << " layout nhwc";
        if (c->conv() && c->conv()->filter_layout() == fb::Layout::NHWC) os << " filters ohwi";
        os << AttributesOf(*c);
        os << " [" << List(plan, *c->inputs()) << "] -> [" << List(plan, *c->outputs())
           << "]";
        if (c->in_place() && c->in_place()->size()) os << " in place";
        if (c->location() && c->location()->size()) os << "  ; " << PrintableOf(c->location());
        os << "\n";
      }
    }
  }
}

}  // namespace graphc::runtime
