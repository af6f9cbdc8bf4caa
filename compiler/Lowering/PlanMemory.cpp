//===- PlanMemory.cpp - liveness-based arena placement --------------------===//
//
// Places every plan buffer: arena buffers by liveness (with in-place reuse by
// elementwise kernels), state and constant buffers packed in order. See
// Passes.td for the algorithm.
//
//===----------------------------------------------------------------------===//

#include "compiler/Lowering/Passes.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Debug.h"
#include "llvm/Support/MathExtras.h"

#define DEBUG_TYPE "graphc-plan-memory"

namespace graphc {
#define GEN_PASS_DEF_PLANMEMORY
#include "compiler/Lowering/Passes.h.inc"
} // namespace graphc

using namespace mlir;
using namespace graphc;

namespace {

constexpr int64_t kAlignment = 64;

struct Interval {
  int64_t begin = std::numeric_limits<int64_t>::max();
  int64_t end = -1;
  int64_t size = 0;
  int64_t offset = -1;
  bool merged = false; // taken over by an in-place input: placed as that input
};

class PlanMemoryPass : public graphc::impl::PlanMemoryBase<PlanMemoryPass> {
public:
  void runOnOperation() override;

private:
  /// The buffer a name finally occupies: through aliases and in-place merges.
  StringRef rootOf(StringRef name) {
    while (true) {
      auto it = parent.find(name);
      if (it == parent.end())
        return name;
      name = it->second;
    }
  }
  int64_t planProgram(plan::ProgramOp program, SymbolTable &symbols);
  /// Where the program's live bytes peak and what lives across the command
  /// that writes its first output (for a training step: the loss).
  SmallVector<int64_t> profile(plan::ProgramOp program,
                               const llvm::MapVector<StringRef, Interval> &intervals);

  /// Per program, the MemoryProfile array.
  SmallVector<NamedAttribute> profiles;

  llvm::StringMap<plan::BufferOp> buffers;
  llvm::StringMap<StringRef> parent;
};

int64_t PlanMemoryPass::planProgram(plan::ProgramOp program, SymbolTable &symbols) {
  // 1) Live intervals over the command order, per root buffer.
  llvm::MapVector<StringRef, Interval> intervals;
  auto isArena = [&](StringRef root) {
    return buffers.lookup(root).getRegion() == plan::Region::arena;
  };
  auto touch = [&](StringRef name, int64_t at) {
    StringRef root = rootOf(name);
    if (!isArena(root))
      return;
    Interval &interval = intervals[root];
    interval.begin = std::min(interval.begin, at);
    interval.end = std::max(interval.end, at);
    interval.size = buffers.lookup(root).getSizeInBytes();
  };
  Block &body = program.getBody().front();
  int64_t numCommands = std::distance(body.begin(), body.end());
  for (Attribute ref : program.getInputs())
    touch(llvm::cast<FlatSymbolRefAttr>(ref).getValue(), -1);
  int64_t index = 0;
  for (Operation &command : body) {
    for (StringRef key : {"inputs", "outputs"})
      for (Attribute ref : command.getAttrOfType<ArrayAttr>(key))
        touch(llvm::cast<FlatSymbolRefAttr>(ref).getValue(), index);
    ++index;
  }
  llvm::StringSet<> programOutputs;
  for (Attribute ref : program.getOutputs()) {
    StringRef name = llvm::cast<FlatSymbolRefAttr>(ref).getValue();
    programOutputs.insert(rootOf(name));
    touch(name, numCommands);
  }

  // 2) In-place reuse: an elementwise kernel's output takes the place of a
  // same-sized input that dies at that command.
  index = 0;
  for (Operation &command : body) {
    auto launch = llvm::dyn_cast<plan::LaunchOp>(command);
    int64_t at = index++;
    if (!launch)
      continue;
    auto kernel = symbols.lookup<plan::KernelOp>(launch.getKernel());
    if (!kernel || !kernel.getElementwise())
      continue;
    SmallVector<int64_t> inPlace(launch.getOutputs().size(), -1);
    if (auto existing = launch.getInPlace())
      inPlace.assign(existing->begin(), existing->end());
    bool changed = false;
    llvm::SmallDenseSet<StringRef> taken;
    for (auto [o, outRef] : llvm::enumerate(launch.getOutputs())) {
      StringRef out = rootOf(llvm::cast<FlatSymbolRefAttr>(outRef).getValue());
      if (inPlace[o] != -1 || !isArena(out) || intervals[out].begin != at)
        continue;
      auto elements = [&](Attribute ref) {
        return buffers.lookup(llvm::cast<FlatSymbolRefAttr>(ref).getValue())
            .getMemRefType()
            .getNumElements();
      };
      for (auto [i, inRef] : llvm::enumerate(launch.getInputs())) {
        StringRef in = rootOf(llvm::cast<FlatSymbolRefAttr>(inRef).getValue());
        if (!isArena(in) || taken.contains(in) || programOutputs.contains(in) ||
            intervals[in].end != at || intervals[in].size != intervals[out].size)
          continue;
        // Every input view of `in` is read at this command only (its interval
        // ends here), and each must be one the output may overwrite: element
        // for element (same count), within the output's group.
        bool every = llvm::all_of(llvm::enumerate(launch.getInputs()), [&](auto view) {
          StringRef name = llvm::cast<FlatSymbolRefAttr>(view.value()).getValue();
          return rootOf(name) != in ||
                 (kernel.mayOverwrite(o, view.index()) &&
                  elements(view.value()) == elements(outRef));
        });
        if (!every)
          continue;
        LLVM_DEBUG(llvm::dbgs() << out << " reuses " << in << "\n");
        Interval merged = intervals[in];
        merged.end = intervals[out].end;
        intervals[in] = merged;
        // Not intervals.erase(out): MapVector::erase is O(size) (it renumbers
        // every later entry), so one per in-place merge made this quadratic.
        intervals[out].merged = true;
        parent[out] = in;
        taken.insert(in);
        inPlace[o] = i;
        changed = true;
        break;
      }
    }
    if (changed)
      launch.setInPlace(inPlace);
  }

  // 3) Greedy by size: largest first, lowest aligned offset that fits.
  SmallVector<Interval *> order;
  for (auto &entry : intervals)
    if (!entry.second.merged)
      order.push_back(&entry.second);
  llvm::stable_sort(order, [](Interval *a, Interval *b) { return a->size > b->size; });
  // `placed` is kept sorted by offset, so the intervals live with this one
  // come in offset order without sorting them for every interval.
  SmallVector<Interval *> placed;
  int64_t arenaSize = 0;
  for (Interval *interval : order) {
    int64_t offset = 0;
    for (Interval *other : placed) {
      if (!(other->begin <= interval->end && interval->begin <= other->end))
        continue;
      if (offset + interval->size <= other->offset)
        break;
      offset = std::max<int64_t>(offset, llvm::alignTo(other->offset + other->size, kAlignment));
    }
    interval->offset = offset;
    placed.insert(llvm::upper_bound(placed, offset,
                                    [](int64_t o, Interval *p) { return o < p->offset; }),
                  interval);
    arenaSize = std::max(arenaSize, offset + interval->size);
  }
  for (auto &[name, interval] : intervals)
    if (!interval.merged)
      buffers.lookup(name).setOffset(interval.offset);
  Builder b(program.getContext());
  profiles.push_back(b.getNamedAttr(program.getSymName(),
                                    b.getDenseI64ArrayAttr(profile(program, intervals))));
  return llvm::alignTo(arenaSize, kAlignment);
}

SmallVector<int64_t>
PlanMemoryPass::profile(plan::ProgramOp program,
                        const llvm::MapVector<StringRef, Interval> &intervals) {
  Block &body = program.getBody().front();
  const int64_t numCommands = std::distance(body.begin(), body.end());
  // Live bytes at each point from -1 (inputs) to numCommands (outputs), as a
  // difference array over the intervals' [begin, end].
  SmallVector<int64_t> delta(numCommands + 3, 0);
  for (const auto &entry : intervals) {
    const Interval &interval = entry.second;
    if (interval.merged)
      continue;
    delta[interval.begin + 1] += interval.size;
    delta[interval.end + 2] -= interval.size;
  }
  SmallVector<int64_t> result(kMemoryProfileSize, 0);
  int64_t live = 0;
  for (int64_t at = -1; at <= numCommands; ++at) {
    live += delta[at + 1];
    if (live > result[kPeakLiveBytes]) {
      result[kPeakLiveBytes] = live;
      result[kPeakCommand] = at;
    }
  }
  result[kCommands] = numCommands;
  result[kLossCommand] = -1;
  if (program.getOutputs().empty())
    return result;
  StringRef loss =
      rootOf(llvm::cast<FlatSymbolRefAttr>(program.getOutputs()[0]).getValue());
  int64_t index = 0;
  for (Operation &command : body) {
    for (Attribute ref : command.getAttrOfType<ArrayAttr>("outputs"))
      if (rootOf(llvm::cast<FlatSymbolRefAttr>(ref).getValue()) == loss)
        result[kLossCommand] = index;
    if (result[kLossCommand] >= 0)
      break;
    ++index;
  }
  const int64_t at = result[kLossCommand];
  for (const auto &entry : intervals) {
    const Interval &interval = entry.second;
    if (interval.merged || entry.first == loss || interval.begin > at || interval.end <= at)
      continue;
    result[kKeptBytes] += interval.size;
    result[kKeptBuffers] += 1;
  }
  return result;
}

void PlanMemoryPass::runOnOperation() {
  ModuleOp module = getOperation();
  buffers.clear();
  parent.clear();
  profiles.clear();
  int64_t tensorBytes = 0, stateSize = 0, constantSize = 0;
  for (auto buffer : module.getOps<plan::BufferOp>()) {
    buffers[buffer.getSymName()] = buffer;
    if (auto alias = buffer.getAlias()) {
      parent[buffer.getSymName()] = *alias;
      continue;
    }
    int64_t size = buffer.getSizeInBytes();
    switch (buffer.getRegion()) {
    case plan::Region::arena:
      tensorBytes += size;
      break;
    case plan::Region::state:
      buffer.setOffset(stateSize);
      stateSize = llvm::alignTo(stateSize + size, kAlignment);
      break;
    case plan::Region::constant:
      buffer.setOffset(constantSize);
      constantSize = llvm::alignTo(constantSize + size, kAlignment);
      break;
    }
  }
  for (auto &[name, target] : parent)
    if (!buffers.count(target)) {
      buffers.lookup(name).emitOpError("aliases unknown buffer @") << target;
      return signalPassFailure();
    }

  int64_t arenaSize = 0;
  SymbolTable symbols(module);
  for (auto program : module.getOps<plan::ProgramOp>()) {
    int64_t size = planProgram(program, symbols);
    program.setArenaSize(size);
    arenaSize = std::max(arenaSize, size);
  }
  // Aliases and merged buffers take their root's offset.
  for (auto &[name, buffer] : buffers)
    if (parent.count(name))
      buffer.setOffset(*buffers.lookup(rootOf(name)).getOffset());

  Builder b(module.getContext());
  module->setAttr(kArenaSizeAttr, b.getI64IntegerAttr(arenaSize));
  module->setAttr(kTensorBytesAttr, b.getI64IntegerAttr(tensorBytes));
  module->setAttr(kStateSizeAttr, b.getI64IntegerAttr(stateSize));
  module->setAttr(kConstantSizeAttr, b.getI64IntegerAttr(constantSize));
  module->setAttr(kMemoryProfileAttr, b.getDictionaryAttr(profiles));
}

} // namespace
