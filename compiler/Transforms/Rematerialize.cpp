//===- Rematerialize.cpp - recompute cheap forward values in backward -----===//
//
// Implements --graphc-rematerialize: backward reads batch norm's normalized
// activations, ReLU's outputs and the like from values forward computed with
// a few elementwise ops. Keeping each of them costs an activation of memory
// from the moment forward computes it until backward reads it; recomputing it
// from what backward keeps anyway costs an elementwise pass, which fusion
// folds into the kernel that reads it. See Passes.td for the rule.
//
//===----------------------------------------------------------------------===//

#include "compiler/Transforms/Passes.h"

#include "compiler/Transforms/BuildUtils.h"
#include "dialects/nn/IR/NNOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/Support/Debug.h"

#define DEBUG_TYPE "graphc-rematerialize"

namespace graphc {
#define GEN_PASS_DEF_REMATERIALIZE
#include "compiler/Transforms/Passes.h.inc"
} // namespace graphc

using namespace mlir;

namespace graphc {
namespace {

/// Ops a clone of costs one elementwise pass (fused: nothing but registers).
bool isCheap(Operation *op) {
  return op && op->getNumResults() == 1 &&
         (nn::isFusibleElementwise(op) || isa<nn::BroadcastOp>(op));
}

/// Values that occupy no arena memory: views of a state, constants.
bool isFree(Value v) {
  return isa_and_nonnull<nn::LoadOp, nn::ConstantOp>(v.getDefiningOp());
}

int64_t bytesOf(Value v) {
  auto type = llvm::dyn_cast<RankedTensorType>(v.getType());
  if (!type || !type.hasStaticShape() || !type.getElementType().isIntOrFloat())
    return 0;
  unsigned bits = type.getElementType().getIntOrFloatBitWidth();
  return type.getNumElements() * std::max<int64_t>(1, (bits + 7) / 8);
}

/// A broadcast's `shape_of` is measured, never read (no fusions exist yet).
using nn::readsShapeOnly;

struct RematerializePass : impl::RematerializeBase<RematerializePass> {
  using RematerializeBase::RematerializeBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (maxOps < 1) {
      module.emitError("graphc-rematerialize needs max-ops >= 1, got ")
          << static_cast<int64_t>(maxOps);
      return signalPassFailure();
    }
    auto step = module.lookupSymbol<func::FuncOp>("train_step");
    if (!step || step.getBody().empty())
      return; // nothing to do before autodiff
    rematerialize(step);
  }

  void rematerialize(func::FuncOp step);

  /// Values recomputed, and the bytes forward kept for backward before and
  /// after.
  struct Counts {
    int64_t recomputed, keptBefore, keptAfter;
  };
  Counts rematerializeSegment(Block &body, ArrayRef<Operation *> order,
                              const DenseMap<Operation *, int64_t> &position,
                              const llvm::StringMap<SmallVector<int64_t>> &assigns,
                              int64_t begin, int64_t boundary);
};

/// One recomputed value: the ops to clone (operands first) and the values the
/// clones read from forward.
struct Recompute {
  SmallVector<Operation *> ops;
  llvm::SetVector<Value> leaves;
};

/// Algorithm, for each micro-batch (one, or those graphc-autodiff split the
/// step into, each a forward and then its backward):
///  1) Forward is everything up to the op that computes the micro-batch's
///     loss (without micro-batches, the returned loss);
///     the values forward computes and backward reads (other than to measure
///     them) are what the step keeps across the loss: `kept`.
///  2) In forward order, for each kept value of at least min-bytes computed
///     by a cheap op, collect
///     its cone: walk its operands back through cheap ops whose values are
///     not kept (or were already chosen for recomputation), stopping at kept,
///     free (state, constant) and small values (at most 1/8 of its size),
///     and at anything else. Recompute it when the cone has at most
///     `max-ops` ops and the cone's leaves not kept yet are fewer bytes than
///     the value itself; those leaves are kept from then on. A state read
///     (nn.load) qualifies only if no nn.assign to that state lies between
///     it and where backward first reads the value.
///  3) Clone each chosen value's cone just before backward's first read of
///     it, and point every backward use at the clone.
void RematerializePass::rematerialize(func::FuncOp step) {
  Block &body = step.getBody().front();
  auto ret = llvm::dyn_cast<func::ReturnOp>(body.getTerminator());
  if (!ret || ret.getNumOperands() == 0)
    return;
  Operation *loss = ret.getOperand(0).getDefiningOp();
  if (!loss || loss->getBlock() != &body)
    return;

  // The step's ops as they are now (clones are added as it goes).
  SmallVector<Operation *> order;
  DenseMap<Operation *, int64_t> position;
  for (auto [i, op] : llvm::enumerate(body)) {
    position[&op] = static_cast<int64_t>(i);
    order.push_back(&op);
  }
  llvm::StringMap<SmallVector<int64_t>> assigns;
  for (Operation &op : body)
    if (auto assign = dyn_cast<nn::AssignOp>(op))
      assigns[assign.getVariable()].push_back(position.lookup(&op));

  // Each micro-batch: where its forward begins (its slices of the step's
  // arguments) and its loss.
  SmallVector<std::pair<int64_t, int64_t>> segments;
  for (Operation *op : order)
    if (op->hasAttr(kMicroBatchLossAttr)) {
      int64_t begin = segments.empty() ? 0 : segments.back().second + 1;
      while (begin < position.lookup(op) &&
             llvm::none_of(order[begin]->getOperands(),
                           [](Value v) { return isa<BlockArgument>(v); }))
        ++begin;
      segments.push_back({segments.empty() ? 0 : begin, position.lookup(op)});
    }
  if (segments.empty())
    segments.push_back({0, position.lookup(loss)});

  int64_t recomputed = 0, keptBefore = 0, keptAfter = 0;
  for (auto [begin, boundary] : segments) {
    Counts counts = rematerializeSegment(body, order, position, assigns, begin, boundary);
    recomputed += counts.recomputed;
    keptBefore += counts.keptBefore;
    keptAfter += counts.keptAfter;
  }
  if (recomputed == 0)
    return;
  Builder b(step.getContext());
  step->getParentOfType<ModuleOp>()->setAttr(
      kRematerializedAttr, b.getDenseI64ArrayAttr({recomputed, keptBefore, keptAfter}));
}

/// Steps 1-3 for the forward ops order[begin..boundary] (the last computes
/// the loss) and the backward after them.
RematerializePass::Counts RematerializePass::rematerializeSegment(
    Block &body, ArrayRef<Operation *> order, const DenseMap<Operation *, int64_t> &position,
    const llvm::StringMap<SmallVector<int64_t>> &assigns, int64_t begin, int64_t boundary) {
  // The first backward op that uses `v` (for any reason); -1 if none.
  auto firstBackwardUse = [&](Value v) -> int64_t {
    int64_t first = -1;
    for (Operation *user : v.getUsers()) {
      int64_t at = position.lookup(user);
      if (at > boundary && (first < 0 || at < first))
        first = at;
    }
    return first;
  };
  auto readInBackward = [&](Value v) {
    return llvm::any_of(v.getUses(), [&](OpOperand &use) {
      return position.lookup(use.getOwner()) > boundary && !readsShapeOnly(use);
    });
  };

  // 1) What forward keeps for backward (the step's arguments: counted with
  // the first micro-batch).
  llvm::DenseSet<Value> kept;
  if (begin == 0)
    for (BlockArgument arg : body.getArguments())
      if (readInBackward(arg))
        kept.insert(arg);
  for (Operation *op : order.slice(begin, boundary - begin + 1))
    for (Value result : op->getResults())
      if (!isFree(result) && bytesOf(result) > 0 && readInBackward(result))
        kept.insert(result);
  int64_t keptBefore = 0;
  for (Value v : kept)
    keptBefore += bytesOf(v);

  // 2) Choose, in forward order.
  llvm::MapVector<Value, Recompute> chosen;
  for (Operation *forwardOp : order.slice(begin, boundary - begin)) {
    Operation &op = *forwardOp;
    if (!isCheap(&op) || !kept.contains(op.getResult(0)))
      continue;
    Value value = op.getResult(0);
    if (bytesOf(value) < minBytes)
      continue;
    // A value a library op (a convolution, a pool, a gemm) reads in backward
    // must be written to memory there: recomputing it moves more bytes than
    // keeping it, so only a value whose every backward reader takes it into a
    // kernel is recomputed, unless `library-inputs` says otherwise.
    if (!libraryInputs && llvm::any_of(value.getUses(), [&](OpOperand &use) {
          Operation *user = use.getOwner();
          return position.lookup(user) > boundary && !readsShapeOnly(use) &&
                 !isCheap(user) && !isa<nn::ReduceSumOp, nn::ReduceMeanOp>(user);
        }))
      continue;
    const int64_t size = bytesOf(value), firstUse = firstBackwardUse(value);
    Recompute cone;
    llvm::SmallPtrSet<Operation *, 16> visited;
    bool ok = true;
    // Whether a state read may move to `firstUse`: no assign in between.
    auto stableUntilUse = [&](Value v) {
      auto load = dyn_cast_or_null<nn::LoadOp>(v.getDefiningOp());
      if (!load)
        return true;
      auto it = assigns.find(load.getVariable());
      if (it == assigns.end())
        return true;
      int64_t from = position.lookup(load);
      return llvm::none_of(it->second, [&](int64_t at) { return at > from && at < firstUse; });
    };
    std::function<void(Operation *)> visit = [&](Operation *def) {
      if (!ok || !visited.insert(def).second)
        return;
      if (static_cast<int64_t>(visited.size()) > maxOps) {
        ok = false;
        return;
      }
      for (OpOperand &operand : def->getOpOperands()) {
        Value v = operand.get();
        Operation *producer = v.getDefiningOp();
        if (readsShapeOnly(operand)) {
          // Measured only: a clone may measure any value of this shape (3).
          continue;
        }
        if (isFree(v)) {
          ok &= stableUntilUse(v);
          continue;
        }
        if (kept.contains(v))
          continue;
        bool mustExpand = chosen.count(v) != 0;
        bool expand = mustExpand || (isCheap(producer) && bytesOf(v) * 8 > size);
        if (expand && producer && producer->getBlock() == &body) {
          visit(producer);
          continue;
        }
        if (mustExpand) {
          ok = false;
          return;
        }
        cone.leaves.insert(v);
      }
      cone.ops.push_back(def);
    };
    visit(&op);
    if (!ok)
      continue;
    int64_t added = 0;
    for (Value leaf : cone.leaves)
      added += bytesOf(leaf);
    if (added >= size)
      continue;
    LLVM_DEBUG(llvm::dbgs() << "recompute " << value << " (" << size << " bytes) from "
                            << cone.leaves.size() << " new leaves (" << added << " bytes), "
                            << cone.ops.size() << " ops\n");
    kept.erase(value);
    for (Value leaf : cone.leaves)
      kept.insert(leaf);
    chosen[value] = std::move(cone);
  }
  int64_t keptAfter = 0;
  for (Value v : kept)
    keptAfter += bytesOf(v);
  if (chosen.empty())
    return {0, keptBefore, keptAfter};

  // 3) Clone each cone before backward's first use of its value.
  for (auto &[value, cone] : chosen) {
    Operation *first = nullptr;
    for (Operation *user : value.getUsers())
      if (position.lookup(user) > boundary &&
          (!first || position.lookup(user) < position.lookup(first)))
        first = user;
    OpBuilder b(first);
    IRMapping mapping;
    for (Operation *op : cone.ops) {
      Operation *clone = b.clone(*op, mapping);
      // A broadcast measures a value of its result's shape that backward
      // already has, rather than keeping its forward shape_of alive.
      if (auto broadcast = dyn_cast<nn::BroadcastOp>(clone)) {
        // Measuring a recomputed or kept value costs nothing more.
        Value measured = cast<nn::BroadcastOp>(op).getShapeOf();
        if (mapping.contains(measured) || kept.contains(measured))
          continue;
        auto shape = llvm::cast<RankedTensorType>(measured.getType()).getShape();
        auto sameShape = [&](Value v) {
          return llvm::cast<RankedTensorType>(v.getType()).getShape() == shape;
        };
        // Candidates, in order: what the cone reads from forward, the
        // cone's earlier results, then what `first` reads (live there).
        Value stand;
        auto consider = [&](Value v) {
          if (!stand && v != measured && !chosen.count(v) && sameShape(v))
            stand = v;
        };
        for (Operation *member : cone.ops)
          for (OpOperand &operand : member->getOpOperands())
            if (!readsShapeOnly(operand) && !isFree(operand.get()) &&
                !llvm::is_contained(cone.ops, operand.get().getDefiningOp()))
              consider(operand.get());
        for (Operation *earlier : cone.ops) {
          if (stand || earlier == op)
            break;
          if (sameShape(earlier->getResult(0)))
            stand = mapping.lookup(earlier->getResult(0));
        }
        for (Value v : first->getOperands())
          consider(v);
        if (stand)
          broadcast.getShapeOfMutable().assign(stand);
      }
    }
    Value recomputed = mapping.lookup(value);
    value.replaceUsesWithIf(recomputed, [&](OpOperand &use) {
      auto it = position.find(use.getOwner());
      return it != position.end() && it->second > boundary;
    });
  }
  return {static_cast<int64_t>(chosen.size()), keptBefore, keptAfter};
}

} // namespace
} // namespace graphc
