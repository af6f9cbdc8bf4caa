//===- FusionKernel.cpp - one kernel per nn.fusion --------------------------===//
//
// An nn.fusion region becomes one linalg.generic whose body composes the
// scalar functions of its ops, reductions included (ReductionNest.h).
//
//===----------------------------------------------------------------------===//

#include "compiler/Lowering/KernelBuilders.h"

#include "dialects/nn/IR/NNOps.h"
#include "dialects/nn/IR/Views.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "compiler/Lowering/ReductionNest.h"

using namespace mlir;

namespace graphc::kernel {

/// An nn.fusion: one linalg.generic over the iteration space, every op's
/// scalar function composed in its body, intermediates in registers.
///
/// Every buffer is passed flat (bare pointers are all the runtime has) and
/// indexed by a linearized map. Output dims that every broadcast treats alike
/// (all read, or all stretched) are collapsed first, so the innermost loop
/// runs over as many contiguous elements as possible: a per-channel scale of
/// [N, C, H, W] loops over (n, c, h*w), not over w alone.
///
/// An input read through views (transposes, slices, reshapes: Views.h) is
/// read at offset + sum(index * stride) over the refined iteration space
/// (each dim split into the factors its views need); dims collapse only
/// where every view reads them contiguously too.
KernelSignature emitFusion(nn::FusionOp op, ModuleOp kernels, StringRef name) {
  OpBuilder b(op->getContext());
  Location loc = op.getLoc();
  MLIRContext *ctx = b.getContext();
  Block &body = op.getBody().front();
  // Broadcasts read through a map of their own; one a view reads starts
  // that view instead.
  SmallVector<nn::BroadcastOp> broadcasts;
  for (nn::BroadcastOp bc : body.getOps<nn::BroadcastOp>())
    if (!nn::isViewStart(bc))
      broadcasts.push_back(bc);
  ArrayRef<int64_t> shape = op.getIterationShape();
  ArrayRef<int64_t> reducedDims = op.getReducedDims();
  auto isReduced = [&](int64_t d) { return llvm::is_contained(reducedDims, d); };

  // The views: each chain's last op, the argument it reads and its view (the
  // verifier checked that each is one).
  struct ViewRead {
    Value end;
    BlockArgument arg;
    nn::StridedView view;
  };
  SmallVector<ViewRead> views;
  for (Operation &inner : body.without_terminator()) {
    if (!nn::isViewOp(&inner) || llvm::any_of(inner.getUsers(), nn::isViewOp))
      continue;
    SmallVector<Operation *> chain = {&inner};
    while (Operation *def = chain.back()->getOperand(0).getDefiningOp())
      chain.push_back(def);
    std::reverse(chain.begin(), chain.end());
    auto arg = llvm::cast<BlockArgument>(chain.front()->getOperand(0));
    views.push_back({inner.getResult(0), arg,
                     *nn::viewOfChain(chain, llvm::cast<RankedTensorType>(arg.getType()).getShape())});
  }
  SmallVector<const nn::StridedView *> viewPtrs;
  for (const ViewRead &v : views)
    viewPtrs.push_back(&v.view);
  // The refined iteration space: dim d split into factors, outermost first;
  // `within` is a factor's stride inside its dim.
  struct Refined {
    int64_t dim, size, within;
  };
  SmallVector<Refined> refined;
  auto refinedSizes = *nn::refineDims(shape, viewPtrs);
  for (auto [d, sizes] : llvm::enumerate(refinedSizes)) {
    int64_t within = 1;
    SmallVector<Refined> dimFactors;
    for (int64_t size : llvm::reverse(sizes)) {
      dimFactors.push_back({static_cast<int64_t>(d), size, within});
      within *= size;
    }
    llvm::append_range(refined, llvm::reverse(dimFactors));
  }
  SmallVector<SmallVector<int64_t>> viewStrides;
  for (const ViewRead &v : views)
    viewStrides.push_back(nn::stridesOn(v.view, refinedSizes));

  // Which output dims broadcast j reads (not absent, not stretched).
  auto reads = [&](nn::BroadcastOp bc, int64_t d) {
    auto inType = llvm::cast<RankedTensorType>(bc.getInput().getType());
    for (auto [i, dim] : llvm::enumerate(bc.getDims()))
      if (dim == d)
        return !(inType.getDimSize(i) == 1 && shape[d] != 1);
    return false;
  };
  SmallVector<SmallVector<int64_t>> groups; // consecutive refined dims
  for (int64_t q = 0; q < static_cast<int64_t>(refined.size()); ++q) {
    bool same = false;
    if (!groups.empty()) {
      int64_t p = groups.back().back();
      int64_t dq = refined[q].dim, dp = refined[p].dim;
      same = isReduced(dq) == isReduced(dp) &&
             llvm::all_of(broadcasts,
                          [&](nn::BroadcastOp bc) { return reads(bc, dq) == reads(bc, dp); }) &&
             llvm::all_of(viewStrides, [&](ArrayRef<int64_t> st) {
               return st[p] == refined[q].size * st[q];
             });
    }
    if (same)
      groups.back().push_back(q);
    else
      groups.push_back({q});
  }
  const unsigned loops = groups.size();
  auto strides = [](ArrayRef<int64_t> dims) {
    SmallVector<int64_t> st(dims.size(), 1);
    for (int64_t i = static_cast<int64_t>(dims.size()) - 2; i >= 0; --i)
      st[i] = st[i + 1] * dims[i + 1];
    return st;
  };
  // Outputs, and inputs of the iteration shape, are passed as the collapsed
  // shape (so linalg sees the loop bounds); broadcast and viewed inputs flat;
  // rank-0 inputs as scalars.
  SmallVector<int64_t> collapsed;
  for (const auto &group : groups) {
    int64_t size = 1;
    for (int64_t q : group)
      size *= refined[q].size;
    collapsed.push_back(size);
  }
  AffineMap identity = AffineMap::getMultiDimIdentityMap(loops, ctx);
  auto viewed = [&](BlockArgument arg) {
    return llvm::any_of(views, [&](const ViewRead &v) { return v.arg == arg; });
  };
  auto typeOf = [&](Type tensorType) -> MemRefType {
    auto type = llvm::cast<RankedTensorType>(tensorType);
    if (type.getRank() == 0)
      return naturalType(type);
    if (type.getShape() == shape)
      return MemRefType::get(collapsed, type.getElementType());
    return flatType(type);
  };
  auto mapOf = [&](nn::BroadcastOp bc) {
    auto inType = llvm::cast<RankedTensorType>(bc.getInput().getType());
    if (inType.getRank() == 0)
      return AffineMap::get(loops, 0, {}, ctx);
    if (inType.getShape() == shape)
      return identity;
    SmallVector<int64_t> inStrides = strides(inType.getShape());
    AffineExpr e = getAffineConstantExpr(0, ctx);
    for (unsigned g = 0; g < loops; ++g) {
      const Refined &last = refined[groups[g].back()];
      if (!reads(bc, last.dim))
        continue;
      // The input dim mapped to the group's last output dim: its stride.
      for (auto [i, dim] : llvm::enumerate(bc.getDims()))
        if (dim == last.dim)
          e = e + getAffineDimExpr(g, ctx) * (inStrides[i] * last.within);
    }
    return AffineMap::get(loops, 0, e, ctx);
  };
  auto viewMapOf = [&](size_t v) {
    AffineExpr e = getAffineConstantExpr(views[v].view.offset, ctx);
    for (unsigned g = 0; g < loops; ++g)
      e = e + getAffineDimExpr(g, ctx) * viewStrides[v][groups[g].back()];
    return AffineMap::get(loops, 0, e, ctx);
  };

  // Inputs that are only a broadcast's `shape_of` are never read: no buffer.
  SmallVector<Type> types;
  SmallVector<Value> read;
  SmallVector<bool> readViewed;
  DenseMap<unsigned, unsigned> argIndex; // block argument -> kernel argument
  for (BlockArgument arg : body.getArguments()) {
    if (!op.isInputRead(arg.getArgNumber()))
      continue;
    argIndex[arg.getArgNumber()] = types.size();
    types.push_back(viewed(arg) ? flatType(arg.getType()) : typeOf(arg.getType()));
    read.push_back(op.getInputs()[arg.getArgNumber()]);
    readViewed.push_back(viewed(arg));
  }
  const size_t numInputs = types.size();
  // A reduction's result: the collapsed shape without the reduced loops.
  auto yield = llvm::cast<nn::YieldOp>(body.getTerminator());
  auto reductionOf = [](Value v) -> Operation * {
    Operation *def = v.getDefiningOp();
    return def && isa<nn::ReduceSumOp, nn::ReduceMeanOp>(def) ? def : nullptr;
  };
  SmallVector<int64_t> reducedShape;
  SmallVector<AffineExpr> reducedExprs;
  for (unsigned g = 0; g < loops; ++g)
    if (!isReduced(refined[groups[g].front()].dim)) {
      reducedShape.push_back(collapsed[g]);
      reducedExprs.push_back(getAffineDimExpr(g, ctx));
    }
  for (Value v : yield.getValues())
    types.push_back(reductionOf(v)
                        ? MemRefType::get(reducedShape,
                                          llvm::cast<RankedTensorType>(v.getType())
                                              .getElementType())
                        : typeOf(v.getType()));
  func::FuncOp func = createKernelFunc(b, kernels, name, loc, types);
  auto funcArgs = func.getArguments();

  // The generic's inputs: each argument read elementwise, then each broadcast.
  SmallVector<Value> ins;
  SmallVector<AffineMap> maps;
  DenseMap<Value, unsigned> slot; // body value -> generic input index
  for (BlockArgument arg : body.getArguments()) {
    bool direct = llvm::any_of(arg.getUsers(), [](Operation *u) {
      return !isa<nn::BroadcastOp>(u) && !nn::isViewOp(u);
    });
    if (!direct)
      continue;
    slot[arg] = ins.size();
    ins.push_back(funcArgs[argIndex.lookup(arg.getArgNumber())]);
    maps.push_back(identity);
  }
  for (nn::BroadcastOp bc : broadcasts) {
    auto input = llvm::cast<BlockArgument>(bc.getInput());
    slot[bc.getResult()] = ins.size();
    ins.push_back(funcArgs[argIndex.lookup(input.getArgNumber())]);
    maps.push_back(mapOf(bc));
  }
  for (auto [v, view] : llvm::enumerate(views)) {
    slot[view.end] = ins.size();
    ins.push_back(funcArgs[argIndex.lookup(view.arg.getArgNumber())]);
    maps.push_back(viewMapOf(v));
  }
  SmallVector<Value> outs(funcArgs.drop_front(numInputs));
  AffineMap reducedMap = AffineMap::get(loops, 0, reducedExprs, ctx);
  SmallVector<Accumulate> accumulate;
  SmallVector<double> scales;
  int64_t count = 1;
  for (int64_t d : reducedDims)
    count *= shape[d];
  for (Value v : yield.getValues()) {
    maps.push_back(reductionOf(v) ? reducedMap : identity);
    accumulate.push_back(reductionOf(v) ? Accumulate::Sum : Accumulate::None);
    // Means: the sums scaled by 1 / (elements reduced), as nn.reduce_mean's kernel.
    scales.push_back(isa_and_nonnull<nn::ReduceMeanOp>(v.getDefiningOp())
                         ? 1.0 / static_cast<double>(count)
                         : 1.0);
  }
  SmallVector<IteratorType> iterators;
  for (const auto &group : groups)
    iterators.push_back(isReduced(refined[group.front()].dim) ? IteratorType::reduction
                                                 : IteratorType::parallel);
  auto scalarBody = [&](OpBuilder &nb, Location nloc, ValueRange scalars) {
    DenseMap<Value, Value> value;
    for (auto [v, index] : slot)
      value[v] = scalars[index];
    for (Operation &inner : body.without_terminator()) {
      if (isa<nn::BroadcastOp>(inner) || nn::isViewOp(&inner) || reductionOf(inner.getResult(0)))
        continue;
      SmallVector<Value> args;
      for (Value operand : inner.getOperands())
        args.push_back(value.lookup(operand));
      value[inner.getResult(0)] = emitScalarOp(nb, nloc, &inner, args);
    }
    // A reduced output's result is what the iteration adds to it.
    SmallVector<Value> results;
    for (Value v : yield.getValues()) {
      Operation *reduction = reductionOf(v);
      results.push_back(value.lookup(reduction ? reduction->getOperand(0) : v));
    }
    return results;
  };
  if (reducedDims.empty())
    buildGeneric(b, loc, ins, outs, maps, iterators, scalarBody);
  else
    buildReductionNest(b, loc, ins, outs, maps, iterators, collapsed, accumulate, scales,
                       scalarBody);
  b.create<func::ReturnOp>(loc);
  // An elementwise output may overwrite an input read at the iteration
  // shape (element i read only to write element i), never one read through a
  // broadcast map: fewer elements, but not necessarily fewer bytes (an f16 or
  // i1 output over an f32 input), nor one read through views (a transpose of
  // a square matrix has the iteration shape, and element i is not read to
  // write element i). A reduction's output is accumulated over many
  // iterations: it overwrites nothing (a group of its own).
  KernelSignature signature{read, /*elementwise=*/true, {}};
  auto elementForElement = [&](unsigned i) {
    return llvm::cast<RankedTensorType>(read[i].getType()).getShape() == shape &&
           !readViewed[i];
  };
  bool stretched = false;
  for (unsigned i = 0; i < read.size(); ++i)
    stretched |= !elementForElement(i);
  if (stretched || !reducedDims.empty()) {
    for (unsigned i = 0; i < read.size(); ++i)
      signature.groups.push_back(elementForElement(i) ? 0 : -1);
    for (Value v : yield.getValues())
      signature.groups.push_back(reductionOf(v) ? 1 : 0);
  }
  return signature;
}

} // namespace graphc::kernel
