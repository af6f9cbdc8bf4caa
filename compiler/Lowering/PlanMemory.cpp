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
  /// Step 0: concats whose operands can be computed where the concat puts
  /// them; returns how many it removed.
  int64_t placeConcats(plan::ProgramOp program, SymbolTable &symbols);
  /// Bytes from the start of the buffer's root to the start of the buffer.
  int64_t offsetInRoot(StringRef name) {
    int64_t offset = 0;
    for (auto it = parent.find(name); it != parent.end(); it = parent.find(it->second)) {
      offset += within.lookup(name);
      name = it->second;
    }
    return offset;
  }
  /// Where the program's live bytes peak and what lives across the command
  /// that writes its first output (for a training step: the loss).
  SmallVector<int64_t> profile(plan::ProgramOp program,
                               const llvm::MapVector<StringRef, Interval> &intervals);

  /// Per program, the MemoryProfile array.
  SmallVector<NamedAttribute> profiles;

  llvm::StringMap<plan::BufferOp> buffers;
  llvm::StringMap<StringRef> parent;
  /// An alias's byte offset in what it aliases (absent: 0).
  llvm::StringMap<int64_t> within;
};

/// A concat's operands are byte ranges of its result, one after another,
/// when every dim before the concat dim has extent 1 ([3, L, N, E] from three
/// [1, L, N, E]: a packed q/k/v projection's gradient). Then each operand can
/// be computed straight into its range and the copy is never made (XLA's
/// buffer assignment does the same for concats it can place). An operand
/// qualifies when it is a whole arena buffer (or a reshape of one) that one
/// earlier command writes, not in place and as nothing else: nothing but its
/// producer ever writes its bytes, and nothing but the concat the result's, so
/// the operand's readers before and after the concat see the same bytes.
/// Liveness then follows the root: the result is live from its first
/// operand's producer on.
int64_t PlanMemoryPass::placeConcats(plan::ProgramOp program, SymbolTable &symbols) {
  auto nameOf = [](Attribute ref) { return llvm::cast<FlatSymbolRefAttr>(ref).getValue(); };
  llvm::StringSet<> boundary; // the program's inputs and outputs: the caller's
  for (ArrayAttr list : {program.getInputs(), program.getOutputs()})
    for (Attribute ref : list)
      boundary.insert(rootOf(nameOf(ref)));
  // Per root: the commands that write it, and whether one writes it in place.
  Block &body = program.getBody().front();
  llvm::StringMap<SmallVector<Operation *, 1>> writers;
  llvm::StringSet<> writtenInPlace;
  for (Operation &command : body) {
    auto outputs = command.getAttrOfType<ArrayAttr>("outputs");
    auto inPlace = command.getAttrOfType<DenseI64ArrayAttr>("in_place");
    for (auto [o, ref] : llvm::enumerate(outputs)) {
      StringRef root = rootOf(nameOf(ref));
      writers[root].push_back(&command);
      if (inPlace && o < static_cast<size_t>(inPlace.size()) && inPlace[o] >= 0)
        writtenInPlace.insert(root);
    }
  }
  auto soleWriter = [&](StringRef root) -> Operation * {
    auto it = writers.find(root);
    if (it == writers.end() || it->second.size() != 1 || writtenInPlace.contains(root) ||
        boundary.contains(root) || buffers.lookup(root).getRegion() != plan::Region::arena)
      return nullptr;
    return it->second.front();
  };

  SmallVector<plan::LaunchOp> removed;
  for (Operation &command : body) {
    auto launch = llvm::dyn_cast<plan::LaunchOp>(command);
    if (!launch || launch.getInPlace() || launch.getOutputs().size() != 1)
      continue;
    auto kernel = symbols.lookup<plan::KernelOp>(launch.getKernel());
    if (!kernel || kernel.getOps().size() != 1 ||
        llvm::cast<StringAttr>(kernel.getOps()[0]).getValue() != "nn.concat")
      continue;
    StringRef result = nameOf(launch.getOutputs()[0]);
    if (rootOf(result) != result || soleWriter(result) != launch)
      continue;
    plan::BufferOp out = buffers.lookup(result);
    ArrayRef<int64_t> shape = out.getMemRefType().getShape();
    // The concat dim: where the first operand differs from the result (none:
    // a one-operand concat, a copy).
    ArrayRef<int64_t> first =
        buffers.lookup(nameOf(launch.getInputs()[0])).getMemRefType().getShape();
    if (first.size() != shape.size())
      continue;
    size_t dim = 0;
    while (dim < shape.size() && first[dim] == shape[dim])
      ++dim;
    if (llvm::any_of(shape.take_front(std::min(dim, shape.size())),
                     [](int64_t extent) { return extent != 1; }))
      continue;
    // Each operand: a whole root that only its producer, earlier, writes; no
    // two the same; each range starting 64-byte aligned as every buffer does.
    SmallVector<std::pair<StringRef, int64_t>> pieces;
    llvm::StringSet<> seen;
    int64_t offset = 0;
    bool ok = true;
    for (Attribute ref : launch.getInputs()) {
      StringRef root = rootOf(nameOf(ref));
      plan::BufferOp piece = buffers.lookup(nameOf(ref));
      Operation *producer = soleWriter(root);
      ok = producer && producer->isBeforeInBlock(launch) && root != result &&
           seen.insert(root).second && offsetInRoot(nameOf(ref)) == 0 &&
           piece.getSizeInBytes() == buffers.lookup(root).getSizeInBytes() &&
           piece.getMemRefType().getElementType() == out.getMemRefType().getElementType() &&
           offset % kAlignment == 0;
      if (!ok)
        break;
      pieces.push_back({root, offset});
      offset += piece.getSizeInBytes();
    }
    if (!ok || offset != out.getSizeInBytes())
      continue;
    Builder b(program.getContext());
    for (auto [root, at] : pieces) {
      plan::BufferOp piece = buffers.lookup(root);
      piece.setAliasAttr(FlatSymbolRefAttr::get(out.getSymNameAttr()));
      piece.setAliasOffsetAttr(b.getI64IntegerAttr(at));
      parent[root] = result;
      within[root] = at;
    }
    removed.push_back(launch);
  }
  for (plan::LaunchOp launch : removed)
    launch.erase();
  return static_cast<int64_t>(removed.size());
}

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
      StringRef outName = llvm::cast<FlatSymbolRefAttr>(outRef).getValue();
      StringRef out = rootOf(outName);
      // An operand placed inside a concat's result is not the whole root:
      // moving the root onto an input would move the operand off it.
      if (inPlace[o] != -1 || !isArena(out) || intervals[out].begin != at ||
          offsetInRoot(outName) != 0 ||
          buffers.lookup(outName).getSizeInBytes() != intervals[out].size)
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
                  elements(view.value()) == elements(outRef) && offsetInRoot(name) == 0 &&
                  buffers.lookup(name).getSizeInBytes() == intervals[in].size);
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
  within.clear();
  profiles.clear();
  int64_t tensorBytes = 0, stateSize = 0, constantSize = 0;
  for (auto buffer : module.getOps<plan::BufferOp>()) {
    buffers[buffer.getSymName()] = buffer;
    if (auto alias = buffer.getAlias()) {
      parent[buffer.getSymName()] = *alias;
      if (auto offset = buffer.getAliasOffset())
        within[buffer.getSymName()] = *offset;
    }
  }
  for (auto &[name, target] : parent)
    if (!buffers.count(target)) {
      buffers.lookup(name).emitOpError("aliases unknown buffer @") << target;
      return signalPassFailure();
    }
  SymbolTable symbols(module);
  int64_t placedConcats = 0;
  for (auto program : module.getOps<plan::ProgramOp>())
    placedConcats += placeConcats(program, symbols);

  for (auto buffer : module.getOps<plan::BufferOp>()) {
    if (buffer.getAlias())
      continue;
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
  int64_t arenaSize = 0;
  for (auto program : module.getOps<plan::ProgramOp>()) {
    int64_t size = planProgram(program, symbols);
    program.setArenaSize(size);
    arenaSize = std::max(arenaSize, size);
  }
  // Aliases and merged buffers take their root's offset, plus theirs in it.
  for (auto &[name, buffer] : buffers)
    if (parent.count(name))
      buffer.setOffset(*buffers.lookup(rootOf(name)).getOffset() + offsetInRoot(name));

  Builder b(module.getContext());
  module->setAttr(kArenaSizeAttr, b.getI64IntegerAttr(arenaSize));
  module->setAttr(kTensorBytesAttr, b.getI64IntegerAttr(tensorBytes));
  module->setAttr(kStateSizeAttr, b.getI64IntegerAttr(stateSize));
  module->setAttr(kConstantSizeAttr, b.getI64IntegerAttr(constantSize));
  module->setAttr(kMemoryProfileAttr, b.getDictionaryAttr(profiles));
  if (placedConcats > 0)
    module->setAttr(kPlacedConcatsAttr, b.getI64IntegerAttr(placedConcats));
}

} // namespace
