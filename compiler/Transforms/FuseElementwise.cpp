//===- FuseElementwise.cpp - elementwise chains into nn.fusion ------------===//
//
// Greedy producer-consumer grouping in program order (see Passes.td for the
// rules). Groups are kept as sets of ops with union-by-merging; legality of a
// merge is one check: no member's result is used outside the merged group
// before the op being added, which is where the fusion will be emitted.
//
//===----------------------------------------------------------------------===//

#include "compiler/Transforms/Passes.h"
#include "dialects/nn/IR/NNOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetVector.h"

namespace graphc {
#define GEN_PASS_DEF_FUSEELEMENTWISE
#include "compiler/Transforms/Passes.h.inc"
} // namespace graphc

using namespace mlir;
using namespace graphc;

namespace {

bool isFusible(Operation *op) {
  return nn::isFusibleElementwise(op) || isa<nn::BroadcastOp>(op);
}

ArrayRef<int64_t> shapeOf(Operation *op) {
  return llvm::cast<RankedTensorType>(op->getResult(0).getType()).getShape();
}

struct Group {
  SmallVector<Operation *> members; // in program order
  ArrayRef<int64_t> shape;
};

class FuseElementwisePass : public graphc::impl::FuseElementwiseBase<FuseElementwisePass> {
public:
  using FuseElementwiseBase::FuseElementwiseBase;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<NamedAttribute> savings;
    Builder b(module.getContext());
    for (auto func : module.getOps<func::FuncOp>()) {
      if (!func.getBody().hasOneBlock())
        continue;
      launchesSaved = bytesSaved = 0;
      fuseBlock(func.getBody().front());
      savings.push_back(b.getNamedAttr(
          func.getSymName(), b.getDenseI64ArrayAttr({launchesSaved, bytesSaved})));
    }
    // For the fusion report: what each step function's kernels would have cost
    // unfused, beyond what they cost now.
    module->setAttr(kFusionSavingsAttr, b.getDictionaryAttr(savings));
  }

private:
  void fuseBlock(Block &block);
  void emitFusion(ArrayRef<Operation *> members);

  int64_t launchesSaved = 0, bytesSaved = 0;
};

int64_t bytesOf(Value v) {
  auto type = llvm::cast<RankedTensorType>(v.getType());
  unsigned bits = type.getElementType().getIntOrFloatBitWidth();
  return type.getNumElements() * std::max<int64_t>(1, bits / 8);
}

/// The bytes a kernel for `op` alone reads and writes (a broadcast's
/// `shape_of` is not read).
int64_t unfusedBytes(Operation *op) {
  int64_t bytes = 0;
  for (OpOperand &operand : op->getOpOperands())
    if (!isa<nn::BroadcastOp>(op) || operand.getOperandNumber() == 0)
      bytes += bytesOf(operand.get());
  for (Value result : op->getResults())
    bytes += bytesOf(result);
  return bytes;
}

/// The values from outside `members` they read, in first-use order, and their
/// results used outside them.
void boundary(ArrayRef<Operation *> members, const llvm::SmallPtrSetImpl<Operation *> &set,
              llvm::SetVector<Value> &inputs, SmallVector<Value> &outputs) {
  for (Operation *op : members) {
    for (Value operand : op->getOperands())
      if (!set.contains(operand.getDefiningOp()))
        inputs.insert(operand);
    for (Value result : op->getResults())
      if (llvm::any_of(result.getUsers(), [&](Operation *u) { return !set.contains(u); }))
        outputs.push_back(result);
  }
}

void FuseElementwisePass::fuseBlock(Block &block) {
  DenseMap<Operation *, unsigned> position;
  unsigned pos = 0;
  for (Operation &op : block)
    position[&op] = pos++;

  std::vector<Group> groups;
  DenseMap<Operation *, int> groupOf;
  for (Operation &op : block) {
    if (!isFusible(&op))
      continue;
    ArrayRef<int64_t> shape = shapeOf(&op);
    // A broadcast joins no producer: its operand has another shape.
    SmallVector<int> candidates;
    if (!isa<nn::BroadcastOp>(op))
      for (Value operand : op.getOperands()) {
        auto it = groupOf.find(operand.getDefiningOp());
        if (it != groupOf.end() && groups[it->second].shape == shape &&
            !llvm::is_contained(candidates, it->second))
          candidates.push_back(it->second);
      }
    // The latest group first: it is the one the chain continues.
    llvm::sort(candidates, [&](int a, int b) {
      return position[groups[a].members.back()] > position[groups[b].members.back()];
    });

    SmallVector<Operation *> merged = {&op};
    llvm::SmallPtrSet<Operation *, 32> set = {&op};
    SmallVector<int> taken;
    for (int g : candidates) {
      SmallVector<Operation *> trial(merged);
      llvm::append_range(trial, groups[g].members);
      llvm::SmallPtrSet<Operation *, 32> trialSet(set);
      trialSet.insert(groups[g].members.begin(), groups[g].members.end());
      // No member read outside the group before `op` (where it is emitted).
      // And a broadcast reads a group input, never a member.
      bool legal = llvm::all_of(trial, [&](Operation *m) {
        if (isa<nn::BroadcastOp>(m) && trialSet.contains(m->getOperand(0).getDefiningOp()))
          return false;
        return llvm::all_of(m->getUsers(), [&](Operation *u) {
          return trialSet.contains(u) || position[u] > position[&op];
        });
      });
      if (legal) {
        llvm::SetVector<Value> inputs;
        SmallVector<Value> outputs;
        boundary(trial, trialSet, inputs, outputs);
        // `op`'s own result counts as an output once it has outside users.
        legal = static_cast<int64_t>(inputs.size() + std::max<size_t>(outputs.size(), 1)) <=
                maxOperands;
      }
      if (!legal)
        continue;
      merged = std::move(trial);
      set = std::move(trialSet);
      taken.push_back(g);
    }
    llvm::sort(merged, [&](Operation *a, Operation *b) { return position[a] < position[b]; });
    int index = groups.size();
    groups.push_back({merged, shape});
    for (int g : taken)
      groups[g].members.clear();
    for (Operation *m : merged)
      groupOf[m] = index;
  }

  for (const Group &group : groups)
    if (group.members.size() >= 2)
      emitFusion(group.members);
}

void FuseElementwisePass::emitFusion(ArrayRef<Operation *> members) {
  llvm::SmallPtrSet<Operation *, 32> set(members.begin(), members.end());
  llvm::SetVector<Value> inputs;
  SmallVector<Value> outputs;
  boundary(members, set, inputs, outputs);
  if (outputs.empty())
    return; // dead code: leave it to the canonicalizer

  Operation *last = members.back();
  OpBuilder b(last->getContext());
  b.setInsertionPointAfter(last);
  SmallVector<Location> locs;
  for (Operation *m : members)
    locs.push_back(m->getLoc());
  Location loc = b.getFusedLoc(locs);
  SmallVector<Type> resultTypes;
  for (Value v : outputs)
    resultTypes.push_back(v.getType());
  auto fusion = b.create<nn::FusionOp>(loc, resultTypes, inputs.getArrayRef());
  Block *body = b.createBlock(&fusion.getBody());
  IRMapping mapping;
  for (Value input : inputs)
    mapping.map(input, body->addArgument(input.getType(), input.getLoc()));
  for (Operation *m : members)
    b.clone(*m, mapping);
  SmallVector<Value> yielded;
  for (Value v : outputs)
    yielded.push_back(mapping.lookup(v));
  b.create<nn::YieldOp>(loc, yielded);

  // One launch instead of one per member; the intermediates never reach memory.
  int64_t fusedBytes = 0;
  for (auto [i, input] : llvm::enumerate(inputs))
    if (fusion.isInputRead(i))
      fusedBytes += bytesOf(input);
  for (Value v : outputs)
    fusedBytes += bytesOf(v);
  for (Operation *m : members)
    bytesSaved += unfusedBytes(m);
  bytesSaved -= fusedBytes;
  launchesSaved += static_cast<int64_t>(members.size()) - 1;

  for (auto [from, to] : llvm::zip(outputs, fusion.getResults()))
    from.replaceUsesWithIf(to, [&](OpOperand &use) { return !set.contains(use.getOwner()); });
  for (Operation *m : llvm::reverse(members))
    m->erase();
}

} // namespace
