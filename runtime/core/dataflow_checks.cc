// Each program's dataflow (plan_checks.h): every byte it reads was written by
// its inputs, an earlier command, a state initializer or a constant, and its
// collectives start and wait in pairs, each bucket once.

#include "runtime/core/plan_checks.h"

#include <map>
#include <set>

namespace graphc::runtime::verify {

// Every byte of the State (or Constant) region that a buffer covers belongs to
// exactly one initializer: nothing is read that was never written, and no two
// initializers fight over bytes.
Status CheckRegionInitialized(const fb::Plan& plan, fb::Region region, const ByteRanges& covered,
                              const char* what) {
  for (uint32_t i = 0; i < plan.buffers()->size(); ++i) {
    const fb::Buffer* b = plan.buffers()->Get(i);
    if (b->region() == region && !covered.Covers(b->offset(), b->offset() + b->size()))
      return Fail(ErrorCode::kPlanUndefinedRead,
                  BufferName(plan, i) + " lies in " + fb::EnumNameRegion(region) +
                      " memory that no " + what + " initializes");
  }
  return Status::Ok();
}

// A program's inputs are arena buffers the caller fills before a run and its
// outputs buffers the caller reads after it: no two inputs (filling one would
// change the other) and no two outputs may share a byte, and no command may
// write over an output after computing it. (An output may reuse the bytes of
// an input read for the last time: inputs are written before every run.)
// Every command reads only arena bytes that the inputs or earlier commands of
// the same program wrote: the arena's contents are not kept between runs.
Status CheckProgramDataflow(const fb::Plan& plan, const fb::Program& program,
                            const std::string& name, CommandChecker& budget) {
  const auto& inputs = *program.inputs();
  const auto& outputs = *program.outputs();
  GRAPHC_RETURN_IF_ERROR(budget.Spend(uint64_t{inputs.size()} * inputs.size() +
                               uint64_t{outputs.size()} * outputs.size()));
  for (uint32_t i = 0; i < inputs.size(); ++i)
    if (plan.buffers()->Get(inputs.Get(i))->region() != fb::Region::Arena)
      return Fail(ErrorCode::kPlanBadValue, "program '" + name + "': input " +
                                                BufferName(plan, inputs.Get(i)) +
                                                " is not in the arena");
  for (const auto* list : {&inputs, &outputs}) {
    const char* what = list == &inputs ? "inputs " : "outputs ";
    for (uint32_t a = 0; a < list->size(); ++a)
      for (uint32_t b = a + 1; b < list->size(); ++b)
        if (Overlaps(*plan.buffers()->Get(list->Get(a)), *plan.buffers()->Get(list->Get(b))))
          return Fail(ErrorCode::kPlanAliasedOperands,
                      "program '" + name + "': " + what + BufferName(plan, list->Get(a)) +
                          " and " + BufferName(plan, list->Get(b)) + " share memory");
  }
  // Per output: the last command that computes it, and the last that writes
  // over part of it otherwise.
  std::vector<int64_t> computed(outputs.size(), -1), clobbered(outputs.size(), -1);
  ByteRanges written;
  for (int32_t index : inputs) {
    const fb::Buffer* b = plan.buffers()->Get(index);
    written.Add(b->offset(), b->offset() + b->size());
  }
  auto reads_unwritten = [&](int32_t index) {
    const fb::Buffer* b = plan.buffers()->Get(index);
    return b->region() == fb::Region::Arena &&
           !written.Covers(b->offset(), b->offset() + b->size());
  };
  for (uint32_t c = 0; c < program.commands()->size(); ++c) {
    const fb::Command* command = program.commands()->Get(c);
    for (int32_t index : *command->inputs())
      if (reads_unwritten(index)) {
        std::string where = "program '" + name + "' command " + Str(c);
        if (command->location() && command->location()->size())
          where += " (" + PrintableOf(command->location()) + ")";
        const fb::Buffer* b = plan.buffers()->Get(index);
        return Fail(ErrorCode::kPlanUndefinedRead,
                    where + ": reads " + BufferName(plan, index) + " (arena bytes [" +
                        Str(b->offset()) + ", " + Str(b->offset() + b->size()) +
                        ")), which neither the program's inputs nor an earlier command wrote");
      }
    GRAPHC_RETURN_IF_ERROR(budget.Spend(uint64_t{command->outputs()->size()} * outputs.size()));
    for (int32_t index : *command->outputs()) {
      const fb::Buffer* b = plan.buffers()->Get(index);
      if (b->region() == fb::Region::Arena) written.Add(b->offset(), b->offset() + b->size());
      for (uint32_t o = 0; o < outputs.size(); ++o) {
        const fb::Buffer* out = plan.buffers()->Get(outputs.Get(o));
        if (SameMemory(*b, *out))
          computed[o] = c;
        else if (Overlaps(*b, *out))
          clobbered[o] = c;
      }
    }
  }
  for (uint32_t o = 0; o < outputs.size(); ++o) {
    if (reads_unwritten(outputs.Get(o)))
      return Fail(ErrorCode::kPlanUndefinedRead,
                  "program '" + name + "': output " + BufferName(plan, outputs.Get(o)) +
                      " is never written");
    if (clobbered[o] > computed[o])
      return Fail(ErrorCode::kPlanAliasedOperands,
                  "program '" + name + "': command " + Str(clobbered[o]) + " writes over output " +
                      BufferName(plan, outputs.Get(o)) + " after it is computed");
  }
  return Status::Ok();
}

// Collectives: every AllreduceStart has exactly one later AllreduceWait of the
// same bucket over the same buffers, in the same program, and between the two
// no command reads or writes a byte of the bucket (the communicator is
// reading and writing it). Checked on bytes, not buffer names, since the
// arena reuses memory.
Status CheckCollectives(const fb::Plan& plan, const fb::Program& program,
                        const std::string& name, CommandChecker& budget) {
  struct InFlight {
    uint32_t start;
    const fb::Command* command;
    ByteRanges bytes;
  };
  std::map<int32_t, InFlight> in_flight;  // by bucket
  auto where_of = [&](uint32_t c) {
    const fb::Command* command = program.commands()->Get(c);
    std::string where = "program '" + name + "' command " + Str(c);
    if (command->location() && command->location()->size())
      where += " (" + PrintableOf(command->location()) + ")";
    return where;
  };
  for (uint32_t c = 0; c < program.commands()->size(); ++c) {
    const fb::Command* command = program.commands()->Get(c);
    const bool start = command->op() == fb::Opcode::AllreduceStart;
    const bool wait = command->op() == fb::Opcode::AllreduceWait;
    const int32_t bucket = (start || wait) ? command->collective()->bucket() : -1;
    if (wait) {
      auto it = in_flight.find(bucket);
      if (it == in_flight.end())
        return Fail(ErrorCode::kPlanBadValue, where_of(c) + ": waits for bucket " + Str(bucket) +
                                                  ", which no earlier command started");
      const auto& started = *it->second.command->inputs();
      const auto& waited = *command->inputs();
      if (it->second.command->collective()->sparse() != command->collective()->sparse())
        return Fail(ErrorCode::kPlanBadValue,
                    where_of(c) + ": waits for bucket " + Str(bucket) +
                        (command->collective()->sparse() ? " as sparse" : " as dense") +
                        ", and its start (command " + Str(it->second.start) + ") is not");
      if (!std::equal(started.begin(), started.end(), waited.begin(), waited.end()))
        return Fail(ErrorCode::kPlanBadValue,
                    where_of(c) + ": waits for bucket " + Str(bucket) +
                        " with other buffers than its start (command " +
                        Str(it->second.start) + ") reduces");
      in_flight.erase(it);
      continue;
    }
    if (start && in_flight.count(bucket))
      return Fail(ErrorCode::kPlanBadValue,
                  where_of(c) + ": starts bucket " + Str(bucket) +
                      " again while it is in flight (command " +
                      Str(in_flight[bucket].start) + ")");
    // Every operand against every bucket in flight.
    GRAPHC_RETURN_IF_ERROR(budget.Spend(uint64_t{in_flight.size()} *
                                 (command->inputs()->size() + command->outputs()->size())));
    for (const auto* list : {command->inputs(), command->outputs()})
      for (int32_t index : *list) {
        const fb::Buffer* b = plan.buffers()->Get(index);
        if (b->region() != fb::Region::Arena) continue;
        for (const auto& [other, flight] : in_flight)
          if (flight.bytes.Intersects(b->offset(), b->offset() + b->size()))
            return Fail(ErrorCode::kPlanAliasedOperands,
                        where_of(c) + ": " + (list == command->inputs() ? "reads " : "writes ") +
                            BufferName(plan, index) + " while the allreduce of bucket " +
                            Str(other) + " (command " + Str(flight.start) +
                            ") has its bytes in flight");
      }
    if (start) {
      InFlight flight{c, command, {}};
      for (int32_t index : *command->inputs()) {
        const fb::Buffer* b = plan.buffers()->Get(index);
        flight.bytes.Add(b->offset(), b->offset() + b->size());
      }
      in_flight.emplace(bucket, std::move(flight));
    }
  }
  if (!in_flight.empty())
    return Fail(ErrorCode::kPlanBadValue,
                where_of(in_flight.begin()->second.start) + ": starts bucket " +
                    Str(in_flight.begin()->first) + ", which the program never waits for");
  return Status::Ok();
}

}  // namespace graphc::runtime::verify
