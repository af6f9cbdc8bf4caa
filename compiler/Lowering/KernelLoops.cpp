//===- KernelLoops.cpp - loop structure shared by both codegen targets ----===//

#include "compiler/Lowering/KernelLoops.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Passes.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/ADT/SetVector.h"

#include <limits>

using namespace mlir;

namespace graphc {
namespace {

/// Reorders each linalg.generic's loops: parallel iterators, then reductions.
LogicalResult parallelLoopsFirst(ModuleOp module) {
  IRRewriter rewriter(module.getContext());
  SmallVector<linalg::GenericOp> generics;
  module.walk([&](linalg::GenericOp op) { generics.push_back(op); });
  for (linalg::GenericOp op : generics) {
    SmallVector<utils::IteratorType> iterators = op.getIteratorTypesArray();
    SmallVector<unsigned> order;
    for (auto kind : {utils::IteratorType::parallel, utils::IteratorType::reduction})
      for (unsigned i = 0; i < iterators.size(); ++i)
        if (iterators[i] == kind)
          order.push_back(i);
    if (llvm::equal(order, llvm::seq<unsigned>(0, iterators.size())))
      continue;
    rewriter.setInsertionPoint(op);
    if (failed(linalg::interchangeGenericOp(rewriter, op, order)))
      return op.emitError("cannot put the parallel loops of this kernel first");
  }
  return success();
}

/// Clones `run` into every scf.parallel that uses its results and erases it,
/// if the run only computes values: ops without regions that are free of
/// memory effects or load memrefs the kernel never writes.
LogicalResult sinkIntoParallelLoops(ArrayRef<Operation *> run, func::FuncOp func) {
  llvm::SmallPtrSet<Value, 8> written;
  bool unknownWrite = false;
  func.walk([&](MemoryEffectOpInterface op) {
    SmallVector<MemoryEffects::EffectInstance> effects;
    op.getEffects(effects);
    for (const auto &effect : effects)
      if (isa<MemoryEffects::Write>(effect.getEffect())) {
        if (Value v = effect.getValue())
          written.insert(v);
        else
          unknownWrite = true;
      }
  });
  if (unknownWrite)
    return failure();
  llvm::SmallPtrSet<Operation *, 16> inRun(run.begin(), run.end());
  llvm::SetVector<scf::ParallelOp> loops;
  for (Operation *op : run) {
    if (op->getNumRegions() != 0)
      return failure();
    auto load = dyn_cast<memref::LoadOp>(op);
    if (load ? written.contains(load.getMemRef()) : !isMemoryEffectFree(op))
      return failure();
    for (Operation *user : op->getUsers()) {
      Operation *top = op->getBlock()->findAncestorOpInBlock(*user);
      if (inRun.contains(top))
        continue;
      auto loop = dyn_cast<scf::ParallelOp>(top);
      if (!loop)
        return failure();
      loops.insert(loop);
    }
  }
  for (scf::ParallelOp loop : loops) {
    OpBuilder b = OpBuilder::atBlockBegin(loop.getBody());
    IRMapping mapping;
    for (Operation *op : run) {
      Operation *copy = b.clone(*op, mapping);
      for (auto [from, to] : llvm::zip(op->getResults(), copy->getResults()))
        from.replaceUsesWithIf(to, [&](OpOperand &use) {
          return loop->isProperAncestor(use.getOwner());
        });
    }
  }
  for (Operation *op : llvm::reverse(run))
    op->erase();
  return success();
}

} // namespace

LogicalResult wrapHostCode(func::FuncOp func,
                           function_ref<LogicalResult(ArrayRef<Operation *>)> wrap) {
  Block &body = func.getBody().front();
  auto isLeftOnHost = [](Operation &op) {
    return op.hasTrait<OpTrait::ConstantLike>() || op.hasTrait<OpTrait::IsTerminator>();
  };
  for (auto loop : body.getOps<scf::ParallelOp>())
    if (loop.getNumReductions() != 0)
      return loop.emitError("codegen: parallel loops with reductions are not supported");

  SmallVector<SmallVector<Operation *>> runs;
  bool newRun = true;
  for (Operation &op : body) {
    if (isLeftOnHost(op))
      continue;
    if (isa<scf::ParallelOp, gpu::LaunchOp>(op)) {  // launches already
      newRun = true;
      continue;
    }
    if (newRun)
      runs.emplace_back();
    newRun = false;
    runs.back().push_back(&op);
  }
  auto escapes = [](ArrayRef<Operation *> run) {
    llvm::SmallPtrSet<Operation *, 16> inRun(run.begin(), run.end());
    for (Operation *op : run)
      for (Operation *user : op->getUsers())
        if (!inRun.contains(op->getBlock()->findAncestorOpInBlock(*user)))
          return true;
    return false;
  };
  // A scalar computed before a parallel loop (dropout's seed hash) is
  // recomputed by each thread instead, when that is legal.
  llvm::erase_if(runs, [&](ArrayRef<Operation *> run) {
    return escapes(run) && succeeded(sinkIntoParallelLoops(run, func));
  });
  if (llvm::any_of(runs, escapes)) {
    // Everything in one serial launch: a launch of its own cannot go inside.
    for (Operation &op : body)
      if (isa<gpu::LaunchOp>(op))
        return op.emitError("codegen: host code around a GPU block reduction in kernel ")
               << func.getSymName();
    runs.assign(1, {});
    for (Operation &op : body)
      if (!isLeftOnHost(op))
        runs.back().push_back(&op);
  }
  for (ArrayRef<Operation *> run : runs)
    if (failed(wrap(run)))
      return failure();
  return success();
}

void buildPerTarget(OpBuilder &b, Location loc, function_ref<void(OpBuilder &)> cpu,
                    function_ref<void(OpBuilder &)> cuda) {
  for (auto [target, build] : {std::pair{"cpu", cpu}, std::pair{"cuda", cuda}}) {
    auto region = b.create<scf::ExecuteRegionOp>(loc, TypeRange{});
    region->setAttr(kTargetAttrName, b.getStringAttr(target));
    OpBuilder::InsertionGuard guard(b);
    b.createBlock(&region.getRegion());
    build(b);
    b.create<scf::YieldOp>(loc);
  }
}

LogicalResult selectTarget(ModuleOp kernels, StringRef target) {
  SmallVector<scf::ExecuteRegionOp> variants;
  kernels.walk([&](scf::ExecuteRegionOp op) {
    if (op->hasAttr(kTargetAttrName))
      variants.push_back(op);
  });
  for (scf::ExecuteRegionOp op : variants) {
    auto name = op->getAttrOfType<StringAttr>(kTargetAttrName);
    if (!name || op.getNumResults() != 0 || !op.getRegion().hasOneBlock())
      return op.emitError("codegen: a malformed per-target variant");
    if (name.getValue() != target) {
      op.erase();
      continue;
    }
    Block &body = op.getRegion().front();
    for (Operation &inner : llvm::make_early_inc_range(body.without_terminator()))
      inner.moveBefore(op);
    op.erase();
  }
  // Globals only the dropped variants used (the CUDA reductions' partials).
  for (auto global : llvm::make_early_inc_range(kernels.getOps<memref::GlobalOp>()))
    if (SymbolTable::symbolKnownUseEmpty(global, kernels))
      global.erase();
  return success();
}

namespace {

/// Where the loop dims of `run` are in `map`'s results: all absent, or in
/// order at adjacent positions (then the position of the first); nullopt
/// when the run cannot be one loop for this operand.
std::optional<int64_t> runPosition(AffineMap map, ArrayRef<int64_t> run) {
  SmallVector<int64_t> positions;
  for (int64_t d : run) {
    std::optional<unsigned> at = map.getResultPosition(getAffineDimExpr(d, map.getContext()));
    positions.push_back(at ? static_cast<int64_t>(*at) : -1);
  }
  if (llvm::all_of(positions, [](int64_t p) { return p < 0; }))
    return -1;
  if (positions[0] < 0)
    return std::nullopt;
  for (size_t i = 0; i < positions.size(); ++i)
    if (positions[i] != positions[0] + static_cast<int64_t>(i))
      return std::nullopt;
  return positions[0];
}

} // namespace

void collapseContiguousLoops(ModuleOp kernels) {
  IRRewriter rewriter(kernels.getContext());
  for (auto func : kernels.getOps<func::FuncOp>()) {
    if (func.isExternal() || !func.getBody().hasOneBlock())
      continue;
    Block &body = func.getBody().front();
    auto op = dyn_cast<linalg::GenericOp>(body.front());
    if (!op || op->getNextNode() != body.getTerminator() || op.getNumLoops() < 2 ||
        op.getNumReductionLoops() != 0 || !op.hasPureBufferSemantics() ||
        !op.getBody()->getOps<linalg::IndexOp>().empty())
      continue;
    // Every operand one of the kernel's arguments, used nowhere else, with
    // the identity layout and a map of loop dims alone: retyping it changes
    // no byte it addresses.
    SmallVector<AffineMap> maps = op.getIndexingMapsArray();
    bool own = llvm::all_of(llvm::enumerate(op->getOperands()), [&](auto indexed) {
      auto arg = dyn_cast<BlockArgument>(indexed.value());
      auto type = dyn_cast<MemRefType>(indexed.value().getType());
      return arg && arg.getOwner() == &body && arg.hasOneUse() && type &&
             type.getLayout().isIdentity() && type.hasStaticShape() &&
             maps[indexed.index()].isProjectedPermutation(/*allowZeroInResults=*/false);
    });
    if (!own)
      continue;
    // Runs of adjacent loops that every operand reads contiguously; the
    // first, which becomes the launch's grid, within int32.
    SmallVector<int64_t> ranges = op.getStaticLoopRanges();
    auto fits = [&](ArrayRef<int64_t> run) {
      int64_t product = 1;
      for (int64_t d : run)
        product *= ranges[d];
      return (run.front() != 0 || product <= std::numeric_limits<int32_t>::max()) &&
             llvm::all_of(maps, [&](AffineMap map) { return runPosition(map, run).has_value(); });
    };
    SmallVector<SmallVector<int64_t>> runs = {{0}};
    for (int64_t d = 1; d < static_cast<int64_t>(op.getNumLoops()); ++d) {
      SmallVector<int64_t> longer = runs.back();
      longer.push_back(d);
      if (fits(longer))
        runs.back() = longer;
      else
        runs.push_back({d});
    }
    if (runs.size() == op.getNumLoops())
      continue;
    // Each operand: its map over the runs and its shape with each run's dims
    // merged.
    SmallVector<AffineMap> newMaps;
    for (auto [index, map] : llvm::enumerate(maps)) {
      auto type = cast<MemRefType>(op->getOperand(index).getType());
      SmallVector<std::pair<int64_t, AffineExpr>> placed; // (position, run dim)
      SmallVector<int64_t> shape(type.getShape());
      SmallVector<bool> merged(shape.size(), false);
      for (auto [r, run] : llvm::enumerate(runs)) {
        int64_t at = *runPosition(map, run);
        if (at < 0)
          continue;
        placed.push_back({at, getAffineDimExpr(r, func.getContext())});
        for (size_t i = 1; i < run.size(); ++i) {
          shape[at] *= shape[at + i];
          merged[at + i] = true;
        }
      }
      llvm::sort(placed, [](const auto &x, const auto &y) { return x.first < y.first; });
      SmallVector<AffineExpr> results;
      for (auto &[at, expr] : placed)
        results.push_back(expr);
      newMaps.push_back(AffineMap::get(runs.size(), 0, results, func.getContext()));
      SmallVector<int64_t> newShape;
      for (size_t i = 0; i < shape.size(); ++i)
        if (!merged[i])
          newShape.push_back(shape[i]);
      cast<BlockArgument>(op->getOperand(index))
          .setType(MemRefType::get(newShape, type.getElementType()));
    }
    rewriter.setInsertionPoint(op);
    SmallVector<utils::IteratorType> iterators(runs.size(), utils::IteratorType::parallel);
    auto collapsed = rewriter.create<linalg::GenericOp>(
        op.getLoc(), TypeRange{}, op.getDpsInputs(), op.getDpsInits(), newMaps, iterators);
    rewriter.inlineRegionBefore(op.getRegion(), collapsed.getRegion(),
                                collapsed.getRegion().end());
    rewriter.eraseOp(op);
    SmallVector<Type> inputs(body.getArgumentTypes());
    func.setFunctionType(rewriter.getFunctionType(inputs, func.getResultTypes()));
  }
}

LogicalResult lowerToParallelLoops(ModuleOp kernels) {
  if (failed(parallelLoopsFirst(kernels)))
    return failure();
  PassManager pm(kernels->getContext(), ModuleOp::getOperationName());
  pm.addNestedPass<func::FuncOp>(createConvertLinalgToParallelLoopsPass());
  pm.addPass(createCanonicalizerPass());
  if (failed(pm.run(kernels)))
    return emitError(kernels.getLoc(), "codegen: lowering linalg to loops failed");
  return success();
}

} // namespace graphc
