// What CheckPlanSemantics proves of a plan the FlatBuffers Verifier accepted
// (plan_loader.h): the buffers and regions, the state and constant
// initializers, the kernels and binaries, and every program's commands and
// dataflow, each family of rules in a file of its own (plan_checks.h).

#include "runtime/core/plan_checks.h"

#include <cmath>
#include <cstring>
#include <set>

#include "contract/cpu_levels.h"
#include "contract/launch_record.h"

namespace graphc::runtime::verify {

std::string BufferName(const fb::Plan& plan, int32_t index) {
  const fb::Buffer* buffer = plan.buffers()->Get(index);
  std::string name = PrintableOf(buffer->name());
  return "buffer " + Str(index) + (name.empty() ? "" : " '" + name + "'");
}

std::string KernelName(const fb::Kernel& kernel) { return "'" + PrintableOf(kernel.name()) + "'"; }

uint64_t RegionSize(const fb::Plan& plan, fb::Region region) {
  switch (region) {
    case fb::Region::Arena: return plan.arena_size();
    case fb::Region::State: return plan.state_size();
    case fb::Region::Constant: return plan.constant_size();
  }
  return 0;
}

Status CheckBuffers(const fb::Plan& plan, const LoaderLimits& limits) {
  for (uint32_t i = 0; i < plan.buffers()->size(); ++i) {
    const fb::Buffer* b = plan.buffers()->Get(i);
    std::string where = BufferName(plan, i);
    if (b->dtype() < fb::DType::MIN || b->dtype() > fb::DType::MAX)
      return Fail(ErrorCode::kPlanBadValue, where + ": unknown dtype");
    if (b->region() < fb::Region::MIN || b->region() > fb::Region::MAX)
      return Fail(ErrorCode::kPlanBadValue, where + ": unknown region");
    if (Misaligned(b->shape()))
      return Fail(ErrorCode::kPlanMalformed, where + ": shape is misaligned");
    if (b->shape() == nullptr || b->shape()->size() > limits.max_rank)
      return Fail(ErrorCode::kPlanBadShape, where + ": needs a shape of rank <= " +
                                                Str(limits.max_rank));
    uint64_t elements = 1;
    for (int64_t dim : *b->shape()) {
      if (dim < 1)
        return Fail(ErrorCode::kPlanBadShape,
                    where + ": dimension " + Str(dim) + " is not positive");
      if (__builtin_mul_overflow(elements, static_cast<uint64_t>(dim), &elements) ||
          elements > (uint64_t{1} << 62))
        return Fail(ErrorCode::kPlanBadShape, where + ": too many elements");
    }
    uint64_t bytes;
    if (__builtin_mul_overflow(elements, DTypeBytes(b->dtype()), &bytes) || bytes != b->size())
      return Fail(ErrorCode::kPlanBadShape,
                  where + ": size " + Str(b->size()) + " does not match its shape");
    uint64_t end;
    if (__builtin_add_overflow(b->offset(), b->size(), &end))
      return Fail(ErrorCode::kPlanOffsetOverflow,
                  where + ": offset " + Str(b->offset()) + " + size " + Str(b->size()) +
                      " overflows 64 bits");
    if (end > RegionSize(plan, b->region()))
      return Fail(ErrorCode::kPlanBufferOutOfRange,
                  where + ": ends at " + Str(end) + ", past its region's " +
                      Str(RegionSize(plan, b->region())) + " bytes");
    // Version 6 kernels may access any buffer 16 bytes at a time (graphc
    // places every buffer at a multiple of 64): a misaligned one would fault.
    if (plan.version() >= 6 && b->offset() % kBufferAlignment != 0)
      return Fail(ErrorCode::kPlanBadValue,
                  where + ": offset " + Str(b->offset()) + " is not a multiple of " +
                      Str(kBufferAlignment) + " (the kernels access buffers " +
                      Str(kBufferAlignment) + " bytes at a time)");
  }
  return Status::Ok();
}

Status CheckBufferRef(const fb::Plan& plan, int32_t index, fb::Region region,
                      const std::string& where) {
  if (index < 0 || static_cast<uint32_t>(index) >= plan.buffers()->size())
    return Fail(ErrorCode::kPlanBadIndex, where + ": buffer " + Str(index) +
                                              " outside [0, " +
                                              Str(plan.buffers()->size()) + ")");
  if (plan.buffers()->Get(index)->region() != region)
    return Fail(ErrorCode::kPlanBadValue,
                where + ": " + BufferName(plan, index) + " is in the wrong region");
  return Status::Ok();
}

}  // namespace graphc::runtime::verify

namespace graphc::runtime {

using namespace verify;

uint64_t DTypeBytes(fb::DType dtype) {
  switch (dtype) {
    case fb::DType::F32: case fb::DType::I32: return 4;
    case fb::DType::F16: case fb::DType::BF16: return 2;
    case fb::DType::I64: return 8;
    case fb::DType::I1: case fb::DType::U8: return 1;
  }
  return 0;
}

std::string LaunchSignature(const fb::Kernel& kernel, uint32_t index,
                            const fb::GpuLaunch& launch) {
  std::vector<uint32_t> args(launch.args()->begin(), launch.args()->end());
  std::vector<uint64_t> bytes;
  for (uint32_t arg : args) bytes.push_back(kernel.arg_bytes()->Get(arg));
  return LaunchRecord(StringOf(kernel.name()), index, launch.grid()->Get(0), args, bytes);
}

Status CheckPlanSemantics(const fb::Plan& plan, const LoaderLimits& limits) {
  if (plan.buffers() == nullptr || plan.programs() == nullptr)
    return Fail(ErrorCode::kPlanMalformed, "plan has no buffers or no programs");
  // graphc's --batch-size range; the trainer checks it against the inputs.
  if (plan.batch_size() < 1 || plan.batch_size() > (int64_t{1} << 20))
    return Fail(ErrorCode::kPlanBadValue,
                "batch_size " + Str(plan.batch_size()) + " is outside [1, 1048576]");
  // graphc's --grad-accumulation range; each micro-batch has whole rows.
  if (plan.micro_batches() < 0 || plan.micro_batches() > 1024 ||
      (plan.micro_batches() > 1 && plan.batch_size() % plan.micro_batches() != 0))
    return Fail(ErrorCode::kPlanBadValue,
                "micro_batches " + Str(plan.micro_batches()) +
                    " is outside [0, 1024] or does not divide batch_size " +
                    Str(plan.batch_size()));
  for (uint64_t size : {plan.arena_size(), plan.state_size(), plan.constant_size()})
    if (size > limits.max_region_bytes)
      return Fail(ErrorCode::kPlanBufferOutOfRange,
                  "a region of " + Str(size) + " bytes exceeds the limit of " +
                      Str(limits.max_region_bytes));
  GRAPHC_RETURN_IF_ERROR(CheckBuffers(plan, limits));

  ByteRanges initialized;
  std::set<std::string> state_names;
  if (plan.states())
    for (uint32_t i = 0; i < plan.states()->size(); ++i) {
      const fb::State* s = plan.states()->Get(i);
      std::string where = "state " + Str(i);
      GRAPHC_RETURN_IF_ERROR(CheckBufferRef(plan, s->buffer(), fb::Region::State, where));
      if (s->init() < fb::Initializer::MIN || s->init() > fb::Initializer::MAX)
        return Fail(ErrorCode::kPlanBadValue, where + ": unknown initializer");
      if (!std::isfinite(s->value()) ||
          (s->value() < 0 && (s->init() == fb::Initializer::Normal ||
                              s->init() == fb::Initializer::Uniform)))
        return Fail(ErrorCode::kPlanBadValue,
                    where + " (" + BufferName(plan, s->buffer()) + "): initializer value " +
                        Str(s->value()) + " is not a finite, valid parameter");
      const fb::Buffer* b = plan.buffers()->Get(s->buffer());
      // Checkpoints store the state by name: found now, not after training.
      const std::string state_name = StringOf(b->name());
      if (state_name.empty() || !IsUtf8(state_name) || !state_names.insert(state_name).second)
        return Fail(ErrorCode::kPlanBadValue,
                    where + " (" + BufferName(plan, s->buffer()) +
                        "): a state needs a name, in UTF-8, that no other state has");
      if (initialized.Intersects(b->offset(), b->offset() + b->size()))
        return Fail(ErrorCode::kPlanAliasedOperands,
                    where + ": " + BufferName(plan, s->buffer()) +
                        " shares memory with another state that has its own initializer");
      initialized.Add(b->offset(), b->offset() + b->size());
    }
  GRAPHC_RETURN_IF_ERROR(CheckRegionInitialized(plan, fb::Region::State, initialized, "state"));
  ByteRanges constant_bytes;
  if (plan.constants())
    for (uint32_t i = 0; i < plan.constants()->size(); ++i) {
      const fb::Constant* c = plan.constants()->Get(i);
      std::string where = "constant " + Str(i);
      GRAPHC_RETURN_IF_ERROR(CheckBufferRef(plan, c->buffer(), fb::Region::Constant, where));
      const fb::Buffer* b = plan.buffers()->Get(c->buffer());
      if (c->data() == nullptr || c->data()->size() != b->size())
        return Fail(ErrorCode::kPlanBadShape, where + ": data does not fill its buffer");
      if (constant_bytes.Intersects(b->offset(), b->offset() + b->size()))
        return Fail(ErrorCode::kPlanAliasedOperands,
                    where + ": " + BufferName(plan, c->buffer()) +
                        " shares memory with another constant that has its own data");
      constant_bytes.Add(b->offset(), b->offset() + b->size());
    }
  GRAPHC_RETURN_IF_ERROR(
      CheckRegionInitialized(plan, fb::Region::Constant, constant_bytes, "constant's data"));
  if (plan.kernels()) {
    std::set<std::string> names;
    for (uint32_t i = 0; i < plan.kernels()->size(); ++i) {
      const fb::Kernel* k = plan.kernels()->Get(i);
      std::string where = "kernel " + Str(i);
      if (k->name() == nullptr || k->name()->size() == 0 || k->ops() == nullptr)
        return Fail(ErrorCode::kPlanBadValue, where + ": has no name or no op list");
      if (!names.insert(k->name()->str()).second)
        return Fail(ErrorCode::kPlanBadValue, where + ": name " + KernelName(*k) + " is taken");
      if (Misaligned(k->arg_bytes()))
        return Fail(ErrorCode::kPlanMalformed, where + ": arg_bytes is misaligned");
      // int64: two int32 counts from the file may overflow int32 (the fuzzer).
      const int64_t arity = int64_t{k->num_inputs()} + k->num_outputs();
      if (k->num_inputs() < 0 || k->num_outputs() < 1 || k->arg_bytes() == nullptr ||
          static_cast<int64_t>(k->arg_bytes()->size()) != arity || arity > limits.max_operands)
        return Fail(ErrorCode::kPlanBadValue, where + ": inconsistent arity");
      if (const auto* groups = k->arg_groups(); groups != nullptr && groups->size() != 0) {
        if (static_cast<int64_t>(groups->size()) != arity)
          return Fail(ErrorCode::kPlanBadValue, where + ": needs one group per argument");
        for (uint32_t a = static_cast<uint32_t>(k->num_inputs()); a < groups->size(); ++a)
          if (groups->Get(a) < 0)
            return Fail(ErrorCode::kPlanBadValue, where + ": puts an output in no group");
      }
    }
  }
  if (plan.binaries()) {
    // One binary per CUDA target; x86-64 code may come once per CPU level
    // (the runtime loads the best its CPU runs).
    std::set<std::pair<fb::Target, std::string>> targets;
    for (uint32_t i = 0; i < plan.binaries()->size(); ++i) {
      const fb::KernelBinary* b = plan.binaries()->Get(i);
      const std::string where = "binary " + Str(i);
      if (b->target() > fb::Target::MAX || b->format() > fb::BinaryFormat::MAX ||
          b->target() < fb::Target::MIN || b->format() < fb::BinaryFormat::MIN ||
          b->data() == nullptr || b->symbols() == nullptr)
        return Fail(ErrorCode::kPlanBadValue, where + ": malformed");
      const bool cpu = b->target() == fb::Target::CpuX86_64;
      const std::string level = cpu && b->cpu() != nullptr ? b->cpu()->str() : "";
      if (cpu && X86LevelIndex(level) < 0)
        return Fail(ErrorCode::kPlanBadValue,
                    where + ": x86-64 code for CPU '" + PrintableOf(b->cpu()) +
                        "', which is none of x86-64, x86-64-v2, x86-64-v3, x86-64-v4");
      if (!targets.insert({b->target(), level}).second)
        return Fail(ErrorCode::kPlanBadValue,
                    where + ": a second binary for " + fb::EnumNameTarget(b->target()) +
                        (cpu ? " " + level : ""));
      const bool elf = b->format() == fb::BinaryFormat::ElfSharedObject;
      if (elf != (b->target() == fb::Target::CpuX86_64))
        return Fail(ErrorCode::kPlanBadValue,
                    where + ": " + fb::EnumNameBinaryFormat(b->format()) + " code for " +
                        fb::EnumNameTarget(b->target()));
      GRAPHC_RETURN_IF_ERROR(CheckLaunches(plan, *b, where));
      if (elf)
        GRAPHC_RETURN_IF_ERROR(CheckCpuLibrary(plan, *b, where + " (x86-64 kernel library)"));
      else
        GRAPHC_RETURN_IF_ERROR(CheckPtx(*b, where + " (" + fb::EnumNameTarget(b->target()) + " PTX)"));
    }
  }

  CommandChecker checker(plan, limits);
  for (uint32_t p = 0; p < plan.programs()->size(); ++p) {
    const fb::Program* program = plan.programs()->Get(p);
    std::string name = program->name() ? PrintableOf(program->name()) : Str(p);
    if (program->commands() == nullptr || program->inputs() == nullptr ||
        program->outputs() == nullptr)
      return Fail(ErrorCode::kPlanMalformed, "program '" + name + "' is incomplete");
    for (auto* list : {program->inputs(), program->outputs()})
      if (list->size() > limits.max_operands)
        return Fail(ErrorCode::kPlanBadValue, "program '" + name + "': more than " +
                                                  Str(limits.max_operands) + " inputs or outputs");
    for (auto* list : {program->inputs(), program->outputs()})
      for (int32_t index : *list)
        if (index < 0 || static_cast<uint32_t>(index) >= plan.buffers()->size())
          return Fail(ErrorCode::kPlanBadIndex, "program '" + name + "': I/O buffer " +
                                                    Str(index) + " out of range");
    for (uint32_t c = 0; c < program->commands()->size(); ++c) {
      const fb::Command* command = program->commands()->Get(c);
      std::string where = "program '" + name + "' command " + Str(c);
      if (command->location() && command->location()->size())
        where += " (" + PrintableOf(command->location()) + ")";
      GRAPHC_RETURN_IF_ERROR(checker.Check(*command, where));
    }
    GRAPHC_RETURN_IF_ERROR(CheckProgramDataflow(plan, *program, name, checker));
    GRAPHC_RETURN_IF_ERROR(CheckCollectives(plan, *program, name, checker));
  }
  return Status::Ok();
}

}  // namespace graphc::runtime
