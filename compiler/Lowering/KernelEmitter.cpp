//===- KernelEmitter.cpp - nn ops as kernel bodies on memrefs -------------===//
//
// One emitter per kind of op:
//  - elementwise ops (and the optimizer updates) become one linalg.generic over
//    the flattened tensors: a single loop the CPU vectorizer and the GPU mapper
//    both handle well;
//  - broadcasts and reductions keep their rank so indexing maps express them;
//  - the loss, its gradient, argmax and the learning-rate schedule are small
//    scf loop nests; rows are scf.parallel so the GPU path can map them.
//
//===----------------------------------------------------------------------===//

#include "compiler/Lowering/KernelEmitter.h"

#include "compiler/Lowering/KernelLoops.h"
#include "compiler/Lowering/ReductionNest.h"

#include "dialects/nn/IR/NNOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>
#include <functional>
#include <limits>

using namespace mlir;

namespace graphc {
namespace {

using IteratorType = utils::IteratorType;

Value constIndex(OpBuilder &b, Location loc, int64_t v) {
  return b.create<arith::ConstantIndexOp>(loc, v);
}

Value constFloat(OpBuilder &b, Location loc, Type type, double v) {
  return b.create<arith::ConstantOp>(loc, type, b.getFloatAttr(type, v));
}

Value constInt(OpBuilder &b, Location loc, Type type, int64_t v) {
  return b.create<arith::ConstantOp>(loc, type, b.getIntegerAttr(type, v));
}

MemRefType flatType(Type tensorType) {
  auto type = llvm::cast<RankedTensorType>(tensorType);
  return MemRefType::get({std::max<int64_t>(type.getNumElements(), 1)},
                         type.getElementType());
}

MemRefType naturalType(Type tensorType) {
  auto type = llvm::cast<RankedTensorType>(tensorType);
  return MemRefType::get(type.getShape(), type.getElementType());
}

/// Creates `func.func @name(types...)` in `kernels` and positions `b` in its
/// entry block.
func::FuncOp createKernelFunc(OpBuilder &b, ModuleOp kernels, StringRef name,
                              Location loc, TypeRange argTypes) {
  b.setInsertionPointToEnd(kernels.getBody());
  auto func = b.create<func::FuncOp>(loc, name, b.getFunctionType(argTypes, {}));
  b.setInsertionPointToStart(func.addEntryBlock());
  return func;
}

Value maxOf(OpBuilder &b, Location loc, Value x, Value y) {
  if (llvm::isa<FloatType>(x.getType()))
    return b.create<arith::MaximumFOp>(loc, x, y);
  return b.create<arith::MaxSIOp>(loc, x, y);
}

Value castScalar(OpBuilder &b, Location loc, Value x, Type to) {
  Type from = x.getType();
  if (from == to)
    return x;
  auto fromFloat = llvm::dyn_cast<FloatType>(from);
  auto toFloat = llvm::dyn_cast<FloatType>(to);
  if (to.isInteger(1)) {
    if (fromFloat)
      return b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::UNE, x,
                                     constFloat(b, loc, from, 0.0));
    return b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ne, x,
                                   constInt(b, loc, from, 0));
  }
  if (fromFloat && toFloat) {
    if (fromFloat.getWidth() < toFloat.getWidth())
      return b.create<arith::ExtFOp>(loc, to, x);
    return b.create<arith::TruncFOp>(loc, to, x);
  }
  if (fromFloat)
    return b.create<arith::FPToSIOp>(loc, to, x);
  if (toFloat)
    return from.isInteger(1) ? b.create<arith::UIToFPOp>(loc, to, x).getResult()
                             : b.create<arith::SIToFPOp>(loc, to, x).getResult();
  if (from.isInteger(1))
    return b.create<arith::ExtUIOp>(loc, to, x);
  if (from.getIntOrFloatBitWidth() < to.getIntOrFloatBitWidth())
    return b.create<arith::ExtSIOp>(loc, to, x);
  return b.create<arith::TruncIOp>(loc, to, x);
}

Value compare(OpBuilder &b, Location loc, nn::CmpPredicate predicate, Value x,
              Value y) {
  if (llvm::isa<FloatType>(x.getType())) {
    // Ordered predicates, except `ne`, so a NaN compares unequal to everything.
    arith::CmpFPredicate p = arith::CmpFPredicate::OEQ;
    switch (predicate) {
    case nn::CmpPredicate::eq: p = arith::CmpFPredicate::OEQ; break;
    case nn::CmpPredicate::ne: p = arith::CmpFPredicate::UNE; break;
    case nn::CmpPredicate::lt: p = arith::CmpFPredicate::OLT; break;
    case nn::CmpPredicate::le: p = arith::CmpFPredicate::OLE; break;
    case nn::CmpPredicate::gt: p = arith::CmpFPredicate::OGT; break;
    case nn::CmpPredicate::ge: p = arith::CmpFPredicate::OGE; break;
    }
    return b.create<arith::CmpFOp>(loc, p, x, y);
  }
  arith::CmpIPredicate p = arith::CmpIPredicate::eq;
  switch (predicate) {
  case nn::CmpPredicate::eq: p = arith::CmpIPredicate::eq; break;
  case nn::CmpPredicate::ne: p = arith::CmpIPredicate::ne; break;
  case nn::CmpPredicate::lt: p = arith::CmpIPredicate::slt; break;
  case nn::CmpPredicate::le: p = arith::CmpIPredicate::sle; break;
  case nn::CmpPredicate::gt: p = arith::CmpIPredicate::sgt; break;
  case nn::CmpPredicate::ge: p = arith::CmpIPredicate::sge; break;
  }
  return b.create<arith::CmpIOp>(loc, p, x, y);
}

/// linalg.generic over `numLoops` loops; the body gets one scalar per input and
/// output and returns the values to yield.
void buildGeneric(
    OpBuilder &b, Location loc, ValueRange inputs, ValueRange outputs,
    ArrayRef<AffineMap> maps, ArrayRef<IteratorType> iterators,
    llvm::function_ref<SmallVector<Value>(OpBuilder &, Location, ValueRange)> body) {
  b.create<linalg::GenericOp>(
      loc, TypeRange{}, inputs, outputs, maps, iterators,
      [&](OpBuilder &nb, Location nloc, ValueRange args) {
        nb.create<linalg::YieldOp>(nloc, body(nb, nloc, args));
      });
}

/// A 1-D elementwise generic: rank-0 operands (a learning rate) are broadcast,
/// every other operand is indexed like the output.
void buildFlatGeneric(
    OpBuilder &b, Location loc, ValueRange inputs, ValueRange outputs,
    llvm::function_ref<SmallVector<Value>(OpBuilder &, Location, ValueRange)> body) {
  MLIRContext *ctx = b.getContext();
  AffineMap identity = AffineMap::getMultiDimIdentityMap(1, ctx);
  AffineMap scalar = AffineMap::get(1, 0, {}, ctx);
  SmallVector<AffineMap> maps;
  for (ValueRange values : {inputs, outputs})
    for (Value v : values)
      maps.push_back(llvm::cast<MemRefType>(v.getType()).getRank() == 0 ? scalar
                                                                        : identity);
  buildGeneric(b, loc, inputs, outputs, maps, {IteratorType::parallel}, body);
}

//===----------------------------------------------------------------------===//
// Emitters
//===----------------------------------------------------------------------===//

/// Elementwise ops: one flat loop.
KernelSignature emitElementwise(Operation *op, ModuleOp kernels, StringRef name) {
  OpBuilder b(op->getContext());
  Location loc = op->getLoc();
  SmallVector<Type> types;
  for (Value v : op->getOperands())
    types.push_back(flatType(v.getType()));
  types.push_back(flatType(op->getResult(0).getType()));
  func::FuncOp func = createKernelFunc(b, kernels, name, loc, types);
  auto args = func.getArguments();
  buildFlatGeneric(b, loc, args.drop_back(), args.take_back(),
                   [&](OpBuilder &nb, Location nloc, ValueRange scalars) {
                     return SmallVector<Value>{emitScalarOp(
                         nb, nloc, op, scalars.drop_back())};
                   });
  b.create<func::ReturnOp>(loc);
  return {llvm::to_vector(op->getOperands()), /*elementwise=*/true};
}

/// A kernel that copies `op`'s one input into its result, one loop per result
/// dim, reading the input at `inExprs` of the result's indices.
KernelSignature emitIndexedCopy(Operation *op, ArrayRef<AffineExpr> inExprs,
                                ModuleOp kernels, StringRef name) {
  OpBuilder b(op->getContext());
  Location loc = op->getLoc();
  auto inType = llvm::cast<RankedTensorType>(op->getOperand(0).getType());
  auto outType = llvm::cast<RankedTensorType>(op->getResult(0).getType());
  func::FuncOp func = createKernelFunc(
      b, kernels, name, loc, {naturalType(inType), naturalType(outType)});
  unsigned rank = outType.getRank();
  SmallVector<AffineMap> maps = {AffineMap::get(rank, 0, inExprs, b.getContext()),
                                 AffineMap::getMultiDimIdentityMap(rank, b.getContext())};
  SmallVector<IteratorType> iterators(rank, IteratorType::parallel);
  buildGeneric(b, loc, func.getArgument(0), func.getArgument(1), maps, iterators,
               [](OpBuilder &, Location, ValueRange s) {
                 return SmallVector<Value>{s[0]};
               });
  b.create<func::ReturnOp>(loc);
  return {{op->getOperand(0)}, false};
}

KernelSignature emitBroadcast(nn::BroadcastOp op, ModuleOp kernels, StringRef name) {
  auto inType = llvm::cast<RankedTensorType>(op.getInput().getType());
  auto outType = llvm::cast<RankedTensorType>(op.getType());
  MLIRContext *ctx = op->getContext();
  SmallVector<AffineExpr> inExprs;
  for (auto [i, dim] : llvm::enumerate(op.getDims())) {
    bool stretched = inType.getDimSize(i) == 1 && outType.getDimSize(dim) != 1;
    inExprs.push_back(stretched ? getAffineConstantExpr(0, ctx)
                                : getAffineDimExpr(dim, ctx));
  }
  return emitIndexedCopy(op, inExprs, kernels, name);
}

/// A transpose: the input read through the inverse permutation (result dim i
/// is input dim permutation[i]).
KernelSignature emitTranspose(nn::TransposeOp op, ModuleOp kernels, StringRef name) {
  SmallVector<AffineExpr> inExprs(op.getPermutation().size());
  for (auto [i, p] : llvm::enumerate(op.getPermutation()))
    inExprs[p] = getAffineDimExpr(static_cast<unsigned>(i), op->getContext());
  return emitIndexedCopy(op, inExprs, kernels, name);
}

/// An nn.fusion: one linalg.generic over the iteration space, every op's
/// scalar function composed in its body, intermediates in registers.
///
/// Every buffer is passed flat (bare pointers are all the runtime has) and
/// indexed by a linearized map. Output dims that every broadcast treats alike
/// (all read, or all stretched) are collapsed first, so the innermost loop
/// runs over as many contiguous elements as possible: a per-channel scale of
/// [N, C, H, W] loops over (n, c, h*w), not over w alone.
KernelSignature emitFusion(nn::FusionOp op, ModuleOp kernels, StringRef name) {
  OpBuilder b(op->getContext());
  Location loc = op.getLoc();
  MLIRContext *ctx = b.getContext();
  Block &body = op.getBody().front();
  SmallVector<nn::BroadcastOp> broadcasts(body.getOps<nn::BroadcastOp>());
  ArrayRef<int64_t> shape = op.getIterationShape();
  const int64_t rank = shape.size();
  ArrayRef<int64_t> reducedDims = op.getReducedDims();
  auto isReduced = [&](int64_t d) { return llvm::is_contained(reducedDims, d); };

  // Which output dims broadcast j reads (not absent, not stretched).
  auto reads = [&](nn::BroadcastOp bc, int64_t d) {
    auto inType = llvm::cast<RankedTensorType>(bc.getInput().getType());
    for (auto [i, dim] : llvm::enumerate(bc.getDims()))
      if (dim == d)
        return !(inType.getDimSize(i) == 1 && shape[d] != 1);
    return false;
  };
  SmallVector<SmallVector<int64_t>> groups; // consecutive output dims
  for (int64_t d = 0; d < rank; ++d) {
    bool same = !groups.empty() && isReduced(d) == isReduced(groups.back().back()) &&
                llvm::all_of(broadcasts, [&](nn::BroadcastOp bc) {
                  return reads(bc, d) == reads(bc, groups.back().back());
                });
    if (same)
      groups.back().push_back(d);
    else
      groups.push_back({d});
  }
  const unsigned loops = groups.size();
  auto strides = [](ArrayRef<int64_t> dims) {
    SmallVector<int64_t> st(dims.size(), 1);
    for (int64_t i = static_cast<int64_t>(dims.size()) - 2; i >= 0; --i)
      st[i] = st[i + 1] * dims[i + 1];
    return st;
  };
  // Outputs, and inputs of the iteration shape, are passed as the collapsed
  // shape (so linalg sees the loop bounds); broadcast inputs flat; rank-0
  // inputs as scalars.
  SmallVector<int64_t> collapsed;
  for (const auto &group : groups) {
    int64_t size = 1;
    for (int64_t d : group)
      size *= shape[d];
    collapsed.push_back(size);
  }
  AffineMap identity = AffineMap::getMultiDimIdentityMap(loops, ctx);
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
      if (!reads(bc, groups[g].back()))
        continue;
      // The input dim mapped to the group's last output dim: its stride.
      for (auto [i, dim] : llvm::enumerate(bc.getDims()))
        if (dim == groups[g].back())
          e = e + getAffineDimExpr(g, ctx) * inStrides[i];
    }
    return AffineMap::get(loops, 0, e, ctx);
  };

  // Inputs that are only a broadcast's `shape_of` are never read: no buffer.
  SmallVector<Type> types;
  SmallVector<Value> read;
  DenseMap<unsigned, unsigned> argIndex; // block argument -> kernel argument
  for (BlockArgument arg : body.getArguments()) {
    if (!op.isInputRead(arg.getArgNumber()))
      continue;
    argIndex[arg.getArgNumber()] = types.size();
    types.push_back(typeOf(arg.getType()));
    read.push_back(op.getInputs()[arg.getArgNumber()]);
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
    if (!isReduced(groups[g].front())) {
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
    bool direct = llvm::any_of(arg.getUsers(),
                               [](Operation *u) { return !isa<nn::BroadcastOp>(u); });
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
    iterators.push_back(isReduced(group.front()) ? IteratorType::reduction
                                                 : IteratorType::parallel);
  auto scalarBody = [&](OpBuilder &nb, Location nloc, ValueRange scalars) {
    DenseMap<Value, Value> value;
    for (auto [v, index] : slot)
      value[v] = scalars[index];
    for (Operation &inner : body.without_terminator()) {
      if (isa<nn::BroadcastOp>(inner) || reductionOf(inner.getResult(0)))
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
  // i1 output over an f32 input). A reduction's output is accumulated over
  // many iterations: it overwrites nothing (a group of its own).
  KernelSignature signature{read, /*elementwise=*/true, {}};
  bool stretched = llvm::any_of(read, [&](Value v) {
    return llvm::cast<RankedTensorType>(v.getType()).getShape() != shape;
  });
  if (stretched || !reducedDims.empty()) {
    for (Value v : read)
      signature.groups.push_back(
          llvm::cast<RankedTensorType>(v.getType()).getShape() == shape ? 0 : -1);
    for (Value v : yield.getValues())
      signature.groups.push_back(reductionOf(v) ? 1 : 0);
  }
  return signature;
}

/// Sum / max / mean over `dims` of `input` into `output` (declared without the
/// reduced dims); `scale` multiplies the result (mean, global average pool).
/// Blocked, with several accumulators (ReductionNest.h).
void buildReduction(OpBuilder &b, Location loc, Value input, Value output,
                    ArrayRef<int64_t> dims, bool isMax, double scale) {
  MLIRContext *ctx = b.getContext();
  auto inType = llvm::cast<MemRefType>(input.getType());
  unsigned rank = inType.getRank();
  SmallVector<AffineExpr> outExprs;
  SmallVector<IteratorType> iterators;
  for (unsigned i = 0; i < rank; ++i) {
    bool reduced = llvm::is_contained(dims, i);
    iterators.push_back(reduced ? IteratorType::reduction : IteratorType::parallel);
    if (!reduced)
      outExprs.push_back(getAffineDimExpr(i, ctx));
  }
  SmallVector<AffineMap> maps = {AffineMap::getMultiDimIdentityMap(rank, ctx),
                                 AffineMap::get(rank, 0, outExprs, ctx)};
  buildReductionNest(b, loc, input, output, maps, iterators, inType.getShape(),
                     {isMax ? Accumulate::Max : Accumulate::Sum}, {scale},
                     [](OpBuilder &, Location, ValueRange s) -> SmallVector<Value> {
                       return {s[0]};
                     });
}

/// A reduction's input viewed with each run of consecutive reduced (or
/// kept) dims as one dim: the same bytes, the longest innermost loop, and the
/// same loop structure (so the same summation order) as an nn.fusion ending
/// in the same reduction. Returns the collapsed input type and reduced dims.
std::pair<MemRefType, SmallVector<int64_t>> collapseForReduction(RankedTensorType type,
                                                                 ArrayRef<int64_t> dims) {
  SmallVector<int64_t> shape, reduced;
  bool lastReduced = false;
  for (int64_t d = 0; d < type.getRank(); ++d) {
    bool isReduced = llvm::is_contained(dims, d);
    if (d > 0 && isReduced == lastReduced) {
      shape.back() *= type.getDimSize(d);
    } else {
      if (isReduced)
        reduced.push_back(shape.size());
      shape.push_back(type.getDimSize(d));
    }
    lastReduced = isReduced;
  }
  return {MemRefType::get(shape, type.getElementType()), reduced};
}

template <typename OpT>
KernelSignature emitReduce(OpT op, ModuleOp kernels, StringRef name, bool isMax,
                           bool isMean) {
  OpBuilder b(op->getContext());
  Location loc = op.getLoc();
  auto inType = llvm::cast<RankedTensorType>(op.getInput().getType());
  ArrayRef<int64_t> dims = op.getDims();
  auto [collapsed, collapsedDims] = collapseForReduction(inType, dims);
  // The output as the collapsed kept dims (the same bytes as its natural shape).
  SmallVector<int64_t> keptShape;
  for (int64_t d = 0; d < collapsed.getRank(); ++d)
    if (!llvm::is_contained(collapsedDims, d))
      keptShape.push_back(collapsed.getDimSize(d));
  func::FuncOp func =
      createKernelFunc(b, kernels, name, loc,
                       {collapsed, MemRefType::get(keptShape, inType.getElementType())});
  double scale = 1.0;
  if (isMean) {
    int64_t count = 1;
    for (int64_t d : dims)
      count *= inType.getDimSize(d);
    scale = 1.0 / static_cast<double>(count);
  }
  Value output = func.getArgument(1);
  buildReduction(b, loc, func.getArgument(0), output, collapsedDims, isMax, scale);
  b.create<func::ReturnOp>(loc);
  return {{op.getInput()}, false};
}

KernelSignature emitGlobalAvgPool(nn::GlobalAvgPoolOp op, ModuleOp kernels,
                                  StringRef name) {
  OpBuilder b(op->getContext());
  Location loc = op.getLoc();
  auto inType = llvm::cast<RankedTensorType>(op.getInput().getType());
  // [N, C, H, W] as [N*C, H*W], the output [N, C, 1, 1] as [N*C].
  int64_t rows = inType.getDimSize(0) * inType.getDimSize(1);
  int64_t pixels = inType.getDimSize(2) * inType.getDimSize(3);
  Type elem = inType.getElementType();
  func::FuncOp func = createKernelFunc(b, kernels, name, loc,
                                       {MemRefType::get({rows, pixels}, elem),
                                        MemRefType::get({rows}, elem)});
  buildReduction(b, loc, func.getArgument(0), func.getArgument(1), {1}, false,
                 1.0 / static_cast<double>(pixels));
  b.create<func::ReturnOp>(loc);
  return {{op.getInput()}, false};
}

/// argmax along `dim` (first index on ties): the input viewed as
/// [outer, extent, inner], one scf.parallel iteration per (outer, inner).
KernelSignature emitArgmax(nn::ArgmaxOp op, ModuleOp kernels, StringRef name) {
  OpBuilder b(op->getContext());
  Location loc = op.getLoc();
  auto inType = llvm::cast<RankedTensorType>(op.getInput().getType());
  int64_t dim = op.getDim();
  int64_t outer = 1, inner = 1, extent = inType.getDimSize(dim);
  for (int64_t i = 0; i < dim; ++i)
    outer *= inType.getDimSize(i);
  for (int64_t i = dim + 1; i < inType.getRank(); ++i)
    inner *= inType.getDimSize(i);
  Type elem = inType.getElementType();
  func::FuncOp func = createKernelFunc(
      b, kernels, name, loc,
      {MemRefType::get({outer, extent, inner}, elem),
       MemRefType::get({outer, inner}, b.getI64Type())});
  Value in = func.getArgument(0), out = func.getArgument(1);
  Value c0 = constIndex(b, loc, 0), c1 = constIndex(b, loc, 1);
  b.create<scf::ParallelOp>(
      loc, ValueRange{c0, c0},
      ValueRange{constIndex(b, loc, outer), constIndex(b, loc, inner)},
      ValueRange{c1, c1}, [&](OpBuilder &pb, Location ploc, ValueRange ivs) {
        Value first = pb.create<memref::LoadOp>(ploc, in, ValueRange{ivs[0], c0, ivs[1]});
        auto loop = pb.create<scf::ForOp>(
            ploc, c1, constIndex(pb, ploc, extent), c1, ValueRange{first, c0},
            [&](OpBuilder &fb, Location floc, Value k, ValueRange acc) {
              Value x = fb.create<memref::LoadOp>(floc, in, ValueRange{ivs[0], k, ivs[1]});
              Value better = llvm::isa<FloatType>(elem)
                                 ? fb.create<arith::CmpFOp>(floc, arith::CmpFPredicate::OGT,
                                                            x, acc[0]).getResult()
                                 : fb.create<arith::CmpIOp>(floc, arith::CmpIPredicate::sgt,
                                                            x, acc[0]).getResult();
              Value best = fb.create<arith::SelectOp>(floc, better, x, acc[0]);
              Value index = fb.create<arith::SelectOp>(floc, better, k, acc[1]);
              fb.create<scf::YieldOp>(floc, ValueRange{best, index});
            });
        Value index = pb.create<arith::IndexCastOp>(ploc, pb.getI64Type(),
                                                    loop.getResult(1));
        pb.create<memref::StoreOp>(ploc, index, out, ivs);
      });
  b.create<func::ReturnOp>(loc);
  return {{op.getInput()}, false};
}

/// Whether `label` is a class in [0, classes): an invalid one makes its row's
/// loss and gradient NaN, never a silently wrong value.
Value isValidLabel(OpBuilder &b, Location loc, Value label, int64_t classes) {
  Type type = label.getType();
  return b.create<arith::AndIOp>(
      loc,
      b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::sge, label, constInt(b, loc, type, 0)),
      b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::slt, label,
                              constInt(b, loc, type, classes)));
}

/// On CUDA, inside a launch of `block` threads per row: this thread's share
/// of `step` folded over row `row` of `logits` (classes t, t + block, ...)
/// from `init`.
Value stridedOverRow(OpBuilder &b, Location loc, Value logits, Value row, Value thread,
                     int64_t classes, int64_t block, Value init,
                     function_ref<Value(OpBuilder &, Location, Value, Value)> step) {
  return b
      .create<scf::ForOp>(loc, thread, constIndex(b, loc, classes), constIndex(b, loc, block),
                          ValueRange{init},
                          [&](OpBuilder &fb, Location floc, Value c, ValueRange acc) {
                            Value x = fb.create<memref::LoadOp>(floc, logits, ValueRange{row, c});
                            fb.create<scf::YieldOp>(floc, step(fb, floc, x, acc[0]));
                          })
      .getResult(0);
}

/// The row's max and sum of exp(x - max), combined across the block (in
/// shared buffers 0 and 1); every thread gets both.
std::pair<Value, Value> blockRowStats(OpBuilder &b, Location loc, Value logits, Value row,
                                      Value thread, int64_t classes, int64_t block,
                                      ArrayRef<BlockArgument> buffers) {
  Type f32 = b.getF32Type();
  auto maxOf = [](OpBuilder &cb, Location cloc, Value x, Value y) {
    return cb.create<arith::MaximumFOp>(cloc, x, y).getResult();
  };
  auto add = [](OpBuilder &cb, Location cloc, Value x, Value y) {
    return cb.create<arith::AddFOp>(cloc, x, y).getResult();
  };
  Value max = blockAllReduce(
      b, loc, thread, block, buffers[0],
      stridedOverRow(b, loc, logits, row, thread, classes, block,
                     constFloat(b, loc, f32, -INFINITY), maxOf),
      maxOf);
  Value sumExp = blockAllReduce(
      b, loc, thread, block, buffers[1],
      stridedOverRow(b, loc, logits, row, thread, classes, block, constFloat(b, loc, f32, 0.0),
                     [&](OpBuilder &fb, Location floc, Value x, Value acc) {
                       Value e = fb.create<math::ExpOp>(floc, fb.create<arith::SubFOp>(floc, x, max));
                       return add(fb, floc, acc, e);
                     }),
      add);
  return {max, sumExp};
}

/// Per row of logits [N, C]: max, log-sum-exp, sum of logits, the label's logit,
/// and whether the label is a valid class (an invalid one makes the row NaN:
/// never a silently wrong loss).
struct RowStats {
  Value max, sumExp, sum, labelLogit, valid;
};

RowStats buildRowStats(OpBuilder &b, Location loc, Value logits, Value labels,
                       Value row, int64_t classes) {
  Type f32 = b.getF32Type();
  Value c0 = constIndex(b, loc, 0), c1 = constIndex(b, loc, 1);
  Value cC = constIndex(b, loc, classes);
  auto rowLoop = [&](ValueRange init,
                     llvm::function_ref<SmallVector<Value>(OpBuilder &, Location,
                                                           Value, Value, ValueRange)>
                         step) {
    return b.create<scf::ForOp>(
        loc, c0, cC, c1, init,
        [&](OpBuilder &fb, Location floc, Value c, ValueRange acc) {
          Value x = fb.create<memref::LoadOp>(floc, logits, ValueRange{row, c});
          fb.create<scf::YieldOp>(floc, step(fb, floc, c, x, acc));
        });
  };
  RowStats s;
  s.max = rowLoop({constFloat(b, loc, f32, -INFINITY)},
                  [](OpBuilder &fb, Location floc, Value, Value x, ValueRange acc) {
                    return SmallVector<Value>{fb.create<arith::MaximumFOp>(floc, acc[0], x)};
                  }).getResult(0);
  auto sums = rowLoop({constFloat(b, loc, f32, 0.0), constFloat(b, loc, f32, 0.0)},
                      [&](OpBuilder &fb, Location floc, Value, Value x, ValueRange acc) {
                        Value e = fb.create<math::ExpOp>(
                            floc, fb.create<arith::SubFOp>(floc, x, s.max));
                        return SmallVector<Value>{
                            fb.create<arith::AddFOp>(floc, acc[0], e),
                            fb.create<arith::AddFOp>(floc, acc[1], x)};
                      });
  s.sumExp = sums.getResult(0);
  s.sum = sums.getResult(1);
  Value label = b.create<memref::LoadOp>(loc, labels, row);
  s.valid = isValidLabel(b, loc, label, classes);
  Value index = b.create<arith::IndexCastOp>(loc, b.getIndexType(), label);
  index = b.create<arith::SelectOp>(loc, s.valid, index, c0);
  s.labelLogit = b.create<memref::LoadOp>(loc, logits, ValueRange{row, index});
  return s;
}

/// mean over rows of `lse - (1 - ls) * x[label] - ls / C * sum(x)`.
KernelSignature emitSoftmaxCrossEntropy(nn::SoftmaxCrossEntropyOp op,
                                        ModuleOp kernels, StringRef name) {
  OpBuilder b(op->getContext());
  Location loc = op.getLoc();
  auto logitsType = llvm::cast<RankedTensorType>(op.getLogits().getType());
  int64_t rows = logitsType.getDimSize(0), classes = logitsType.getDimSize(1);
  func::FuncOp func = createKernelFunc(
      b, kernels, name, loc,
      {naturalType(logitsType), naturalType(op.getLabels().getType()),
       naturalType(op.getType())});
  Value logits = func.getArgument(0), labels = func.getArgument(1);
  Type f32 = b.getF32Type();
  double smoothing = op.getLabelSmoothing().convertToDouble();
  // One row's loss: lse - (1 - ls) * x[label] - ls / C * sum(x), NaN for an
  // invalid label.
  auto rowLoss = [&](OpBuilder &fb, Location floc, Value row) {
    RowStats s = buildRowStats(fb, floc, logits, labels, row, classes);
    Value lse = fb.create<arith::AddFOp>(floc, s.max, fb.create<math::LogOp>(floc, s.sumExp));
    Value loss = fb.create<arith::SubFOp>(
        floc, lse,
        fb.create<arith::MulFOp>(floc, constFloat(fb, floc, f32, 1.0 - smoothing), s.labelLogit));
    loss = fb.create<arith::SubFOp>(
        floc, loss,
        fb.create<arith::MulFOp>(floc, constFloat(fb, floc, f32, smoothing / classes), s.sum));
    return fb.create<arith::SelectOp>(floc, s.valid, loss, constFloat(fb, floc, f32, NAN))
        .getResult();
  };
  // The CPU: rows in order, one core. CUDA: row-parallel, a block of threads
  // each taking every B-th row, their float64 sums combined as a tree.
  auto cpu = [&](OpBuilder &nb) {
    Value c0 = constIndex(nb, loc, 0), c1 = constIndex(nb, loc, 1);
    auto loop = nb.create<scf::ForOp>(
        loc, c0, constIndex(nb, loc, rows), c1, ValueRange{constFloat(nb, loc, f32, 0.0)},
        [&](OpBuilder &fb, Location floc, Value row, ValueRange acc) {
          fb.create<scf::YieldOp>(
              floc, ValueRange{fb.create<arith::AddFOp>(floc, acc[0], rowLoss(fb, floc, row))});
        });
    Value mean = nb.create<arith::MulFOp>(loc, loop.getResult(0),
                                          constFloat(nb, loc, f32, 1.0 / rows));
    nb.create<memref::StoreOp>(loc, mean, func.getArgument(2), ValueRange{});
  };
  // CUDA: a block per row (its threads striding over the classes: the row's
  // max, sum of exponentials and sum combined across the block), thread 0
  // writing the row's loss to a device global; a second launch, one block,
  // sums the rows as a tree. A small loss (fewer logits than kGpuMinThreads),
  // or a batch beyond the global's capacity, is one block striding over the
  // rows instead.
  auto cuda = [&](OpBuilder &nb) {
    Type f64 = nb.getF64Type();
    auto add = [](OpBuilder &cb, Location cloc, Value x, Value y) {
      return cb.create<arith::AddFOp>(cloc, x, y).getResult();
    };
    auto finishMean = [&](OpBuilder &fb, Location floc, Value, ValueRange totals) {
      Value mean =
          fb.create<arith::MulFOp>(floc, totals[0], constFloat(fb, floc, f64, 1.0 / rows));
      fb.create<memref::StoreOp>(floc, fb.create<arith::TruncFOp>(floc, f32, mean),
                                 func.getArgument(2), ValueRange{});
    };
    if (rows > kGpuPartialsCapacity || rows * classes < kGpuMinThreads) {
      const int64_t block = gpuBlockSize(1, rows);
      buildBlockReduction(
          nb, loc, /*grid=*/1, block, TypeRange{f64},
          [&](OpBuilder &tb, Location tloc, Value, Value thread) {
            auto loop = tb.create<scf::ForOp>(
                tloc, thread, constIndex(tb, tloc, rows), constIndex(tb, tloc, block),
                ValueRange{constFloat(tb, tloc, f64, 0.0)},
                [&](OpBuilder &fb, Location floc, Value row, ValueRange acc) {
                  Value loss = fb.create<arith::ExtFOp>(floc, f64, rowLoss(fb, floc, row));
                  fb.create<scf::YieldOp>(floc, ValueRange{add(fb, floc, acc[0], loss)});
                });
            return SmallVector<Value>{loop.getResult(0)};
          },
          [&](OpBuilder &cb, Location cloc, unsigned, Value x, Value y) {
            return add(cb, cloc, x, y);
          },
          finishMean);
      return;
    }
    const std::string partials = declarePartials(nb, loc, f64);
    const int64_t block = gpuBlockSize(rows, classes);
    buildBlockLaunch(
        nb, loc, rows, block, TypeRange{f32, f32, f32},
        [&](OpBuilder &lb, Location ll, Value row, Value thread,
            ArrayRef<BlockArgument> buffers) {
          auto [max, sumExp] =
              blockRowStats(lb, ll, logits, row, thread, classes, block, buffers);
          Value sum = blockAllReduce(
              lb, ll, thread, block, buffers[2],
              stridedOverRow(lb, ll, logits, row, thread, classes, block,
                             constFloat(lb, ll, f32, 0.0), add),
              add);
          Value zero = constIndex(lb, ll, 0);
          Value first = lb.create<arith::CmpIOp>(ll, arith::CmpIPredicate::eq, thread, zero);
          lb.create<scf::IfOp>(ll, first, [&](OpBuilder &ib, Location il) {
            Value label = ib.create<memref::LoadOp>(il, labels, row);
            Value valid = isValidLabel(ib, il, label, classes);
            Value index = ib.create<arith::SelectOp>(
                il, valid, ib.create<arith::IndexCastOp>(il, ib.getIndexType(), label), zero);
            Value labelLogit = ib.create<memref::LoadOp>(il, logits, ValueRange{row, index});
            Value lse = ib.create<arith::AddFOp>(il, max, ib.create<math::LogOp>(il, sumExp));
            Value loss = ib.create<arith::SubFOp>(
                il, lse,
                ib.create<arith::MulFOp>(il, constFloat(ib, il, f32, 1.0 - smoothing), labelLogit));
            loss = ib.create<arith::SubFOp>(
                il, loss,
                ib.create<arith::MulFOp>(il, constFloat(ib, il, f32, smoothing / classes), sum));
            loss = ib.create<arith::SelectOp>(il, valid, loss, constFloat(ib, il, f32, NAN));
            ib.create<memref::StoreOp>(il, ib.create<arith::ExtFOp>(il, f64, loss),
                                       ib.create<memref::GetGlobalOp>(
                                           il, MemRefType::get({kGpuPartialsCapacity}, f64),
                                           partials),
                                       row);
            ib.create<scf::YieldOp>(il);
          });
        });
    // The mean over the rows, in the same tree order every run.
    int64_t meanBlock = 32;
    while (meanBlock < std::min<int64_t>(rows, kGpuMaxBlock))
      meanBlock *= 2;
    buildBlockReduction(
        nb, loc, /*grid=*/1, meanBlock, TypeRange{f64},
        [&](OpBuilder &tb, Location tloc, Value, Value thread) {
          Value global = tb.create<memref::GetGlobalOp>(
              tloc, MemRefType::get({kGpuPartialsCapacity}, f64), partials);
          auto loop = tb.create<scf::ForOp>(
              tloc, thread, constIndex(tb, tloc, rows), constIndex(tb, tloc, meanBlock),
              ValueRange{constFloat(tb, tloc, f64, 0.0)},
              [&](OpBuilder &fb, Location floc, Value row, ValueRange acc) {
                Value loss = fb.create<memref::LoadOp>(floc, global, row);
                fb.create<scf::YieldOp>(floc, ValueRange{add(fb, floc, acc[0], loss)});
              });
          return SmallVector<Value>{loop.getResult(0)};
        },
        [&](OpBuilder &cb, Location cloc, unsigned, Value x, Value y) {
          return add(cb, cloc, x, y);
        },
        finishMean);
  };
  buildPerTarget(b, loc, cpu, cuda);
  b.create<func::ReturnOp>(loc);
  return {{op.getLogits(), op.getLabels()}, false};
}

/// `grad_loss * (softmax(x) - target) / N`, one scf.parallel iteration per row.
KernelSignature emitSoftmaxCrossEntropyBackward(nn::SoftmaxCrossEntropyBackwardOp op,
                                                ModuleOp kernels, StringRef name) {
  OpBuilder b(op->getContext());
  Location loc = op.getLoc();
  auto logitsType = llvm::cast<RankedTensorType>(op.getLogits().getType());
  int64_t rows = logitsType.getDimSize(0), classes = logitsType.getDimSize(1);
  func::FuncOp func = createKernelFunc(
      b, kernels, name, loc,
      {naturalType(op.getGradLoss().getType()), naturalType(logitsType),
       naturalType(op.getLabels().getType()), naturalType(op.getType())});
  Value gradLoss = func.getArgument(0), logits = func.getArgument(1);
  Value labels = func.getArgument(2), out = func.getArgument(3);
  Type f32 = b.getF32Type();
  double smoothing = op.getLabelSmoothing().convertToDouble();
  // dx[row, c] for one class, given the row's max, 1 / sum(exp), label and
  // scale (NaN for an invalid label).
  auto writeClass = [&](OpBuilder &fb, Location floc, Value row, Value c, Value max,
                        Value invSum, Value label, Value scale) {
    Value x = fb.create<memref::LoadOp>(floc, logits, ValueRange{row, c});
    Value p = fb.create<arith::MulFOp>(
        floc, fb.create<math::ExpOp>(floc, fb.create<arith::SubFOp>(floc, x, max)), invSum);
    Value isLabel = fb.create<arith::CmpIOp>(floc, arith::CmpIPredicate::eq, c, label);
    Value target = fb.create<arith::SelectOp>(
        floc, isLabel, constFloat(fb, floc, f32, 1.0 - smoothing + smoothing / classes),
        constFloat(fb, floc, f32, smoothing / classes));
    Value grad = fb.create<arith::MulFOp>(floc, fb.create<arith::SubFOp>(floc, p, target), scale);
    fb.create<memref::StoreOp>(floc, grad, out, ValueRange{row, c});
  };
  auto rowScale = [&](OpBuilder &pb, Location ploc, Value valid) {
    Value scale = pb.create<arith::MulFOp>(
        ploc, pb.create<memref::LoadOp>(ploc, gradLoss, ValueRange{}),
        constFloat(pb, ploc, f32, 1.0 / rows));
    return pb.create<arith::SelectOp>(ploc, valid, scale, constFloat(pb, ploc, f32, NAN))
        .getResult();
  };
  // The CPU: one parallel iteration per row. CUDA: a block per row, its
  // threads striding over the classes (coalesced), the row's max and sum of
  // exponentials combined across the block.
  auto cpu = [&](OpBuilder &nb) {
    Value c0 = constIndex(nb, loc, 0), c1 = constIndex(nb, loc, 1);
    nb.create<scf::ParallelOp>(
        loc, ValueRange{c0}, ValueRange{constIndex(nb, loc, rows)}, ValueRange{c1},
        [&](OpBuilder &pb, Location ploc, ValueRange ivs) {
          Value row = ivs[0];
          RowStats s = buildRowStats(pb, ploc, logits, labels, row, classes);
          Value scale = rowScale(pb, ploc, s.valid);
          Value invSum = pb.create<arith::DivFOp>(ploc, constFloat(pb, ploc, f32, 1.0), s.sumExp);
          Value label = pb.create<arith::IndexCastOp>(
              ploc, pb.getIndexType(), pb.create<memref::LoadOp>(ploc, labels, row));
          pb.create<scf::ForOp>(ploc, c0, constIndex(pb, ploc, classes), c1, std::nullopt,
                                [&](OpBuilder &fb, Location floc, Value c, ValueRange) {
                                  writeClass(fb, floc, row, c, s.max, invSum, label, scale);
                                  fb.create<scf::YieldOp>(floc);
                                });
        });
  };
  auto cuda = [&](OpBuilder &nb) {
    const int64_t block = gpuBlockSize(rows, classes);
    buildBlockLaunch(
        nb, loc, rows, block, TypeRange{f32, f32},
        [&](OpBuilder &lb, Location ll, Value row, Value thread,
            ArrayRef<BlockArgument> buffers) {
          auto [max, sumExp] =
              blockRowStats(lb, ll, logits, row, thread, classes, block, buffers);
          Value rawLabel = lb.create<memref::LoadOp>(ll, labels, row);
          Value valid = isValidLabel(lb, ll, rawLabel, classes);
          Value scale = rowScale(lb, ll, valid);
          Value invSum = lb.create<arith::DivFOp>(ll, constFloat(lb, ll, f32, 1.0), sumExp);
          Value label = lb.create<arith::IndexCastOp>(ll, lb.getIndexType(), rawLabel);
          lb.create<scf::ForOp>(ll, thread, constIndex(lb, ll, classes), constIndex(lb, ll, block),
                                std::nullopt,
                                [&](OpBuilder &fb, Location floc, Value c, ValueRange) {
                                  writeClass(fb, floc, row, c, max, invSum, label, scale);
                                  fb.create<scf::YieldOp>(floc);
                                });
        });
  };
  buildPerTarget(b, loc, cpu, cuda);
  b.create<func::ReturnOp>(loc);
  return {{op.getGradLoss(), op.getLogits(), op.getLabels()}, false};
}

/// The schedule of nn.lr_schedule in f64, stored as f32.
KernelSignature emitLrSchedule(nn::LrScheduleOp op, ModuleOp kernels, StringRef name) {
  OpBuilder b(op->getContext());
  Location loc = op.getLoc();
  func::FuncOp func = createKernelFunc(
      b, kernels, name, loc,
      {naturalType(op.getStep().getType()), naturalType(op.getType())});
  Type f64 = b.getF64Type();
  auto c = [&](double v) { return constFloat(b, loc, f64, v); };
  Value stepInt = b.create<memref::LoadOp>(loc, func.getArgument(0), ValueRange{});
  Value step = b.create<arith::SIToFPOp>(loc, f64, stepInt);
  double base = op.getBaseLr().convertToDouble();
  int64_t warmup = op.getWarmupSteps();
  Value t = b.create<arith::SubFOp>(loc, step, c(static_cast<double>(warmup)));
  Value lr;
  switch (op.getDecay()) {
  case nn::LrDecay::constant:
    lr = c(base);
    break;
  case nn::LrDecay::cosine: {
    double total = static_cast<double>(std::max<int64_t>(op.getTotalSteps() - warmup, 1));
    double final = op.getFinalLr().convertToDouble();
    Value clamped = b.create<arith::MinimumFOp>(
        loc, b.create<arith::MaximumFOp>(loc, t, c(0.0)), c(total));
    Value angle = b.create<arith::MulFOp>(loc, clamped, c(M_PI / total));
    Value cosine = b.create<math::CosOp>(loc, angle);
    Value factor = b.create<arith::MulFOp>(
        loc, b.create<arith::AddFOp>(loc, cosine, c(1.0)), c(0.5));
    lr = b.create<arith::AddFOp>(loc, c(final),
                                 b.create<arith::MulFOp>(loc, factor, c(base - final)));
    break;
  }
  case nn::LrDecay::step: {
    Value periods = b.create<math::FloorOp>(
        loc, b.create<arith::DivFOp>(
                 loc, b.create<arith::MaximumFOp>(loc, t, c(0.0)),
                 c(static_cast<double>(op.getStepSize()))));
    lr = b.create<arith::MulFOp>(
        loc, c(base),
        b.create<math::PowFOp>(loc, c(op.getGamma().convertToDouble()), periods));
    break;
  }
  }
  if (warmup > 0) {
    Value ramp = b.create<arith::MulFOp>(
        loc, b.create<arith::AddFOp>(loc, step, c(1.0)), c(base / warmup));
    Value warming = b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::OLT, step,
                                            c(static_cast<double>(warmup)));
    lr = b.create<arith::SelectOp>(loc, warming, ramp, lr);
  }
  Value lr32 = b.create<arith::TruncFOp>(loc, b.getF32Type(), lr);
  b.create<memref::StoreOp>(loc, lr32, func.getArgument(1), ValueRange{});
  b.create<func::ReturnOp>(loc);
  return {{op.getStep()}, false};
}

/// An optimizer op's loss-scaling operands (graphc-mixed-precision): the
/// gradient's factor and the skip flag, or null. Both are optional operands
/// after every other one, in that order.
struct GradScaling {
  Value scale, skip;
  unsigned scaleIndex = 0, skipIndex = 0;
};
GradScaling gradScalingOf(Operation *op) {
  GradScaling g;
  llvm::TypeSwitch<Operation *>(op)
      .Case<nn::SgdOp, nn::SgdMomentumOp, nn::LarsOp, nn::AdamOp>([&](auto o) {
        g.scale = o.getGradScale();
        g.skip = o.getSkip();
      });
  unsigned n = op->getNumOperands();
  g.skipIndex = n - 1;
  g.scaleIndex = n - 1 - (g.skip ? 1 : 0);
  return g;
}

/// The gradient as the rule reads it: widened to the parameter's type and
/// multiplied by the loss-scaling factor, if any.
Value scaledGradient(OpBuilder &b, Location l, Value grad, Type elem, Value factor) {
  grad = castScalar(b, l, grad, elem);
  return factor ? b.create<arith::MulFOp>(l, grad, factor).getResult() : grad;
}

/// With a skip flag that is not 0, every result is the operand it replaces
/// (result 0 the parameter, result k the operand k + 1: its state).
SmallVector<Value> skippable(OpBuilder &b, Location l, ValueRange s,
                             SmallVector<Value> results, Value skip) {
  if (!skip)
    return results;
  Value apply = b.create<arith::CmpFOp>(l, arith::CmpFPredicate::OEQ, skip,
                                        constFloat(b, l, skip.getType(), 0.0));
  for (auto [k, r] : llvm::enumerate(results))
    r = b.create<arith::SelectOp>(l, apply, r, s[k == 0 ? 0 : k + 1]);
  return results;
}

SmallVector<Value> emitScalarRule(OpBuilder &b, Location l, Operation *op, ValueRange s);

/// The per-element rule of an elementwise optimizer op (sgd, sgd_momentum,
/// adam): `s` holds one scalar per operand (the rank-0 ones included), the
/// result is one scalar per op result. Empty for ops that are not
/// elementwise (lars). The gradient is widened and unscaled first, and the
/// update skipped on overflow (the loss-scaling operands).
SmallVector<Value> emitScalarUpdate(OpBuilder &b, Location l, Operation *op,
                                    ValueRange s) {
  GradScaling g = gradScalingOf(op);
  SmallVector<Value> scalars(s);
  scalars[1] = scaledGradient(b, l, s[1], s[0].getType(),
                              g.scale ? s[g.scaleIndex] : Value());
  SmallVector<Value> results = emitScalarRule(b, l, op, scalars);
  if (results.empty())
    return results;
  return skippable(b, l, s, std::move(results), g.skip ? s[g.skipIndex] : Value());
}

SmallVector<Value> emitScalarRule(OpBuilder &b, Location l, Operation *op, ValueRange s) {
  Type elem = s[0].getType();
  auto c = [&](double v) { return constFloat(b, l, elem, v); };
  auto mul = [&](Value x, Value y) -> Value { return b.create<arith::MulFOp>(l, x, y); };
  auto add = [&](Value x, Value y) -> Value { return b.create<arith::AddFOp>(l, x, y); };
  auto sub = [&](Value x, Value y) -> Value { return b.create<arith::SubFOp>(l, x, y); };
  // g + wd * p, without the product when wd is 0 (as PyTorch).
  auto decayed = [&](Value g, Value p, const APFloat &wd) {
    return wd.isZero() ? g : add(g, mul(c(wd.convertToDouble()), p));
  };
  if (auto sgd = llvm::dyn_cast<nn::SgdOp>(op)) {
    // s = p, g, lr
    Value d = decayed(s[1], s[0], sgd.getWeightDecay());
    return {sub(s[0], mul(s[2], d))};
  }
  if (auto momentum = llvm::dyn_cast<nn::SgdMomentumOp>(op)) {
    // s = p, g, v, lr
    double mu = momentum.getMomentum().convertToDouble();
    Value d = decayed(s[1], s[0], momentum.getWeightDecay());
    Value v = add(mul(c(mu), s[2]), d);
    Value step = momentum.getNesterov() ? add(d, mul(c(mu), v)) : v;
    return {sub(s[0], mul(s[3], step)), v};
  }
  if (auto adam = llvm::dyn_cast<nn::AdamOp>(op)) {
    // s = p, g, m, v, lr, corr1, corr2
    double beta1 = adam.getBeta1().convertToDouble();
    double beta2 = adam.getBeta2().convertToDouble();
    double wd = adam.getWeightDecay().convertToDouble();
    bool decoupled = adam.getDecoupled();
    Value p = s[0], lr = s[4];
    Value d = decoupled ? s[1] : decayed(s[1], p, adam.getWeightDecay());
    Value m = add(mul(c(beta1), s[2]), mul(c(1.0 - beta1), d));
    Value v = add(mul(c(beta2), s[3]), mul(c(1.0 - beta2), mul(d, d)));
    Value denom = add(mul(b.create<math::SqrtOp>(l, v), s[6]), c(adam.getEpsilon().convertToDouble()));
    Value step = b.create<arith::DivFOp>(l, mul(mul(lr, s[5]), m), denom);
    if (decoupled && wd != 0.0)
      p = mul(p, sub(c(1.0), mul(lr, c(wd))));
    return {sub(p, step), m, v};
  }
  return {};
}

/// The optimizer ops: one flat loop over (param, grad, state...) with the
/// rank-0 operands as scalars; LARS first reduces the two norms.
KernelSignature emitOptimizer(Operation *op, ModuleOp kernels, StringRef name) {
  OpBuilder b(op->getContext());
  Location loc = op->getLoc();
  SmallVector<Type> types;
  for (Value v : op->getOperands())
    types.push_back(llvm::cast<RankedTensorType>(v.getType()).getRank() == 0
                        ? naturalType(v.getType())
                        : flatType(v.getType()));
  for (Value v : op->getResults())
    types.push_back(flatType(v.getType()));
  func::FuncOp func = createKernelFunc(b, kernels, name, loc, types);
  auto args = func.getArguments();
  unsigned numInputs = op->getNumOperands();
  ValueRange inputs = args.take_front(numInputs);
  ValueRange outputs = args.drop_front(numInputs);
  Type elem = llvm::cast<MemRefType>(args[0].getType()).getElementType();
  auto c = [&](double v) { return constFloat(b, loc, elem, v); };
  auto mul = [](OpBuilder &nb, Location l, Value x, Value y) -> Value {
    return nb.create<arith::MulFOp>(l, x, y);
  };
  auto add = [](OpBuilder &nb, Location l, Value x, Value y) -> Value {
    return nb.create<arith::AddFOp>(l, x, y);
  };

  if (auto lars = llvm::dyn_cast<nn::LarsOp>(op)) {
    double wd = lars.getWeightDecay().convertToDouble();
    double mu = lars.getMomentum().convertToDouble();
    double eta = lars.getEta().convertToDouble();
    GradScaling scaling = gradScalingOf(op);
    Value factor = scaling.scale ? b.create<memref::LoadOp>(loc, inputs[scaling.scaleIndex],
                                                            ValueRange{})
                                       .getResult()
                                 : Value();
    // Squared norms into two rank-0 scratch values (of the unscaled
    // gradient), then the trust ratio.
    MemRefType scalarType = MemRefType::get({}, elem);
    SmallVector<Value> norms;
    for (Value tensor : {inputs[0], inputs[1]}) {
      Value acc = b.create<memref::AllocaOp>(loc, scalarType);
      b.create<linalg::FillOp>(loc, c(0.0), acc);
      MLIRContext *ctx = b.getContext();
      bool isGrad = tensor == inputs[1];
      buildGeneric(b, loc, tensor, acc,
                   {AffineMap::getMultiDimIdentityMap(1, ctx), AffineMap::get(1, 0, {}, ctx)},
                   {IteratorType::reduction},
                   [&](OpBuilder &nb, Location l, ValueRange s) -> SmallVector<Value> {
                     Value x = isGrad ? scaledGradient(nb, l, s[0], elem, factor) : s[0];
                     return {add(nb, l, s[1], mul(nb, l, x, x))};
                   });
      norms.push_back(b.create<math::SqrtOp>(
          loc, b.create<memref::LoadOp>(loc, acc, ValueRange{})));
    }
    Value zero = c(0.0);
    Value pPositive = b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::OGT, norms[0], zero);
    Value gPositive = b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::OGT, norms[1], zero);
    Value ratio = b.create<arith::DivFOp>(
        loc, mul(b, loc, c(eta), norms[0]),
        add(b, loc, norms[1], mul(b, loc, c(wd), norms[0])));
    Value local = b.create<arith::SelectOp>(
        loc, b.create<arith::AndIOp>(loc, pPositive, gPositive), ratio, c(1.0));
    buildFlatGeneric(b, loc, inputs, outputs,
                     [&](OpBuilder &nb, Location l, ValueRange s) -> SmallVector<Value> {
                       Value g = scaledGradient(nb, l, s[1], elem,
                                                factor ? s[scaling.scaleIndex] : Value());
                       Value d = add(nb, l, g, mul(nb, l, constFloat(nb, l, elem, wd), s[0]));
                       Value v = add(nb, l, mul(nb, l, constFloat(nb, l, elem, mu), s[2]),
                                     mul(nb, l, mul(nb, l, s[3], local), d));
                       return skippable(nb, l, s, {nb.create<arith::SubFOp>(l, s[0], v), v},
                                        scaling.skip ? s[scaling.skipIndex] : Value());
                     });
  } else {
    buildFlatGeneric(b, loc, inputs, outputs,
                     [&](OpBuilder &nb, Location l, ValueRange s) {
                       return emitScalarUpdate(nb, l, op, s.take_front(numInputs));
                     });
  }
  b.create<func::ReturnOp>(loc);
  return {llvm::to_vector(op->getOperands()), /*elementwise=*/true};
}

/// Calls `leaf(j, ...)` for the part j whose blocks [firstBlock[j],
/// firstBlock[j + 1]) hold `block`: a binary search of compares against
/// constants.
void searchPart(OpBuilder &b, Location loc, ArrayRef<int64_t> firstBlock, unsigned lo,
                unsigned hi, Value block, llvm::function_ref<void(OpBuilder &, unsigned)> leaf) {
  if (hi - lo == 1)
    return leaf(b, lo);
  unsigned mid = (lo + hi) / 2;
  Value below = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ult, block,
                                        constIndex(b, loc, firstBlock[mid]));
  auto branch = b.create<scf::IfOp>(loc, below, /*withElseRegion=*/true);
  OpBuilder tb = branch.getThenBodyBuilder();
  searchPart(tb, loc, firstBlock, lo, mid, block, leaf);
  OpBuilder eb = branch.getElseBodyBuilder();
  searchPart(eb, loc, firstBlock, mid, hi, block, leaf);
}

/// The multi-tensor loop: one 2-D scf.parallel over (block, lane) with
/// `firstBlock.back()` blocks of `lanes` lanes, where part j owns blocks
/// [firstBlock[j], firstBlock[j + 1]); searchPart on the block index calls
/// `leaf(j, block, lane)` for its part.
void buildMultiTensorLoop(
    OpBuilder &b, Location loc, ArrayRef<int64_t> firstBlock, int64_t lanes,
    llvm::function_ref<void(OpBuilder &, Location, unsigned, Value, Value)> leaf) {
  b.create<scf::ParallelOp>(
      loc, ValueRange{constIndex(b, loc, 0), constIndex(b, loc, 0)},
      ValueRange{constIndex(b, loc, firstBlock.back()), constIndex(b, loc, lanes)},
      ValueRange{constIndex(b, loc, 1), constIndex(b, loc, 1)},
      [&](OpBuilder &nb, Location l, ValueRange ivs) {
        searchPart(nb, l, firstBlock, 0, firstBlock.size() - 1, ivs[0],
                   [&](OpBuilder &lb, unsigned j) { leaf(lb, l, j, ivs[0], ivs[1]); });
      });
}

/// nn.multi_tensor: every member's elements in blocks of kBlock, all members'
/// blocks in a row; a binary search on the block index (compares against
/// constants) picks the member; the last block of a member is partial. On
/// CUDA one 2-D parallel loop over (block, element in block), both mapped
/// onto the grid, each element guarded. On the CPU the blocks are split over
/// the threads, and the search runs once per block: its elements are a loop
/// of their own up to the member's end (unguarded, so it vectorizes; with the
/// search per element, ResNet-50's momentum update ran at a third of the
/// bandwidth of the other elementwise kernels).
KernelSignature emitMultiTensor(nn::MultiTensorOp op, ModuleOp kernels, StringRef name) {
  constexpr int64_t kBlock = 1024;
  OpBuilder b(op->getContext());
  Location loc = op.getLoc();
  SmallVector<Type> types;
  for (Value v : op.getInputs())
    types.push_back(llvm::cast<RankedTensorType>(v.getType()).getRank() == 0
                        ? naturalType(v.getType())
                        : flatType(v.getType()));
  for (Value v : op.getResults())
    types.push_back(flatType(v.getType()));
  func::FuncOp func = createKernelFunc(b, kernels, name, loc, types);
  auto args = func.getArguments();
  const unsigned numInputs = op.getInputs().size();

  Block &body = op.getBody().front();
  SmallVector<Operation *> members;
  for (Operation &m : body.without_terminator())
    members.push_back(&m);
  SmallVector<int64_t> firstBlock = {0}; // per member, then the total
  SmallVector<unsigned> firstResult = {0};
  for (Operation *m : members) {
    int64_t n = llvm::cast<RankedTensorType>(m->getResult(0).getType()).getNumElements();
    firstBlock.push_back(firstBlock.back() + std::max<int64_t>(1, (n + kBlock - 1) / kBlock));
    firstResult.push_back(firstResult.back() + m->getNumResults());
  }

  auto numElements = [&](unsigned j) {
    return llvm::cast<RankedTensorType>(members[j]->getResult(0).getType()).getNumElements();
  };
  // Member j's update of its element `index`.
  auto compute = [&](OpBuilder &cb, Location cl, unsigned j, Value index) {
    Operation *m = members[j];
    SmallVector<Value> scalars;
    for (Value operand : m->getOperands()) {
      Value buffer = args[llvm::cast<BlockArgument>(operand).getArgNumber()];
      bool scalar = llvm::cast<MemRefType>(buffer.getType()).getRank() == 0;
      scalars.push_back(
          cb.create<memref::LoadOp>(cl, buffer, scalar ? ValueRange{} : ValueRange{index}));
    }
    SmallVector<Value> results = emitScalarUpdate(cb, cl, m, scalars);
    for (auto [r, value] : llvm::enumerate(results))
      cb.create<memref::StoreOp>(cl, value, args[numInputs + firstResult[j] + r],
                                 ValueRange{index});
  };
  // The first element of `block` within member j.
  auto blockStart = [&](OpBuilder &nb, Location l, unsigned j, Value block) -> Value {
    return nb.create<arith::MulIOp>(
        l, nb.create<arith::SubIOp>(l, block, constIndex(nb, l, firstBlock[j])),
        constIndex(nb, l, kBlock));
  };
  auto cuda = [&](OpBuilder &cb) {
    buildMultiTensorLoop(
        cb, loc, firstBlock, kBlock,
        [&](OpBuilder &nb, Location l, unsigned j, Value block, Value element) {
          Value index = nb.create<arith::AddIOp>(l, blockStart(nb, l, j, block), element);
          if (numElements(j) % kBlock == 0)
            return compute(nb, l, j, index);
          Value inside = nb.create<arith::CmpIOp>(l, arith::CmpIPredicate::ult, index,
                                                  constIndex(nb, l, numElements(j)));
          auto guard = nb.create<scf::IfOp>(l, inside, /*withElseRegion=*/false);
          OpBuilder gb = guard.getThenBodyBuilder();
          compute(gb, l, j, index);
        });
  };
  auto cpu = [&](OpBuilder &cb) {
    cb.create<scf::ParallelOp>(
        loc, ValueRange{constIndex(cb, loc, 0)}, ValueRange{constIndex(cb, loc, firstBlock.back())},
        ValueRange{constIndex(cb, loc, 1)}, [&](OpBuilder &nb, Location l, ValueRange ivs) {
          searchPart(nb, l, firstBlock, 0, firstBlock.size() - 1, ivs[0],
                     [&](OpBuilder &lb, unsigned j) {
                       Value begin = blockStart(lb, l, j, ivs[0]);
                       Value end = lb.create<arith::MinSIOp>(
                           l, lb.create<arith::AddIOp>(l, begin, constIndex(lb, l, kBlock)),
                           constIndex(lb, l, numElements(j)));
                       auto elements = lb.create<scf::ForOp>(
                           l, begin, end, constIndex(lb, l, 1), ValueRange{},
                           [&](OpBuilder &fb, Location fl, Value index, ValueRange) {
                             compute(fb, fl, j, index);
                             fb.create<scf::YieldOp>(fl);
                           });
                       elements->setAttr(kParallelLoopAttrName, lb.getUnitAttr());
                     });
        });
  };
  buildPerTarget(b, loc, cpu, cuda);
  b.create<func::ReturnOp>(loc);
  // Elementwise within a member, not across members: an output may overwrite
  // its own member's operands only; a shared input (the learning rate) none.
  KernelSignature signature{llvm::to_vector(op.getInputs()), /*elementwise=*/true, {}};
  for (BlockArgument arg : body.getArguments()) {
    SmallVector<Operation *> readers(arg.getUsers());
    bool own = readers.size() == 1 && llvm::cast<RankedTensorType>(arg.getType()).getRank() > 0;
    signature.groups.push_back(own ? llvm::find(members, readers[0]) - members.begin() : -1);
  }
  for (auto [j, m] : llvm::enumerate(members))
    signature.groups.append(m->getNumResults(), static_cast<int64_t>(j));
  return signature;
}

/// nn.nonfinite_flags: one 2-D parallel loop over (chunk, lane), the chunks
/// of all operands in a row (a binary search on the chunk index picks the
/// operand, as nn.multi_tensor does); lane l of a chunk strides over its
/// elements l, l + kLanes, ... and writes its own flag, so no two iterations
/// write one element and the result is the same on any thread count. On
/// CUDA the lanes of a chunk are consecutive threads reading consecutive
/// addresses.
KernelSignature emitNonfiniteFlags(nn::NonfiniteFlagsOp op, ModuleOp kernels,
                                   StringRef name) {
  using Flags = nn::NonfiniteFlagsOp;
  OpBuilder b(op->getContext());
  Location loc = op.getLoc();
  SmallVector<Type> types;
  for (Value v : op.getInputs())
    types.push_back(flatType(v.getType()));
  types.push_back(flatType(op.getType()));
  func::FuncOp func = createKernelFunc(b, kernels, name, loc, types);
  auto args = func.getArguments();
  Value flags = args.back();
  Type f32 = b.getF32Type();

  SmallVector<int64_t> firstChunk = {0}; // per operand, then the total
  SmallVector<int64_t> sizes;
  for (Value v : op.getInputs()) {
    sizes.push_back(llvm::cast<RankedTensorType>(v.getType()).getNumElements());
    firstChunk.push_back(firstChunk.back() + Flags::chunksOf(sizes.back()));
  }
  auto leaf = [&](OpBuilder &nb, Location l, unsigned j, Value chunk, Value lane) {
    Value local = nb.create<arith::SubIOp>(l, chunk, constIndex(nb, l, firstChunk[j]));
    Value start = nb.create<arith::AddIOp>(
        l, nb.create<arith::MulIOp>(l, local, constIndex(nb, l, Flags::kChunk)), lane);
    Value end = nb.create<arith::MinUIOp>(
        l,
        nb.create<arith::MulIOp>(
            l, nb.create<arith::AddIOp>(l, local, constIndex(nb, l, 1)),
            constIndex(nb, l, Flags::kChunk)),
        constIndex(nb, l, sizes[j]));
    Value none = nb.create<arith::ConstantIntOp>(l, 0, 1);
    auto scan = nb.create<scf::ForOp>(
        l, start, end, constIndex(nb, l, Flags::kLanes), ValueRange{none},
        [&](OpBuilder &fb, Location fl, Value i, ValueRange acc) {
          Value x = castScalar(fb, fl, fb.create<memref::LoadOp>(fl, args[j], ValueRange{i}),
                               f32);
          // Unordered or >= inf: NaN and +-inf.
          Value bad = fb.create<arith::CmpFOp>(
              fl, arith::CmpFPredicate::UGE, fb.create<math::AbsFOp>(fl, x),
              constFloat(fb, fl, f32, std::numeric_limits<double>::infinity()));
          fb.create<scf::YieldOp>(fl, ValueRange{fb.create<arith::OrIOp>(fl, acc[0], bad)});
        });
    Value flag = nb.create<arith::SelectOp>(l, scan.getResult(0), constFloat(nb, l, f32, 1.0),
                                            constFloat(nb, l, f32, 0.0));
    Value at = nb.create<arith::AddIOp>(
        l, nb.create<arith::MulIOp>(l, chunk, constIndex(nb, l, Flags::kLanes)), lane);
    nb.create<memref::StoreOp>(l, flag, flags, ValueRange{at});
  };
  buildMultiTensorLoop(b, loc, firstChunk, Flags::kLanes, leaf);
  b.create<func::ReturnOp>(loc);
  return {llvm::to_vector(op.getInputs()), /*elementwise=*/false};
}

/// Inverted-dropout keep mask from a counter-based hash of (seed, step, index):
/// splitmix64's finalizer, top 24 bits as a uniform in [0, 1).
KernelSignature emitDropoutMask(nn::DropoutMaskOp op, ModuleOp kernels, StringRef name) {
  OpBuilder b(op->getContext());
  Location loc = op.getLoc();
  SmallVector<Type> args = {naturalType(op.getStep().getType())};
  if (op.getOffset())
    args.push_back(naturalType(op.getOffset().getType()));
  args.push_back(flatType(op.getType()));
  func::FuncOp func = createKernelFunc(b, kernels, name, loc, args);
  Type i64 = b.getI64Type();
  Type elem = llvm::cast<RankedTensorType>(op.getType()).getElementType();
  double rate = op.getRate().convertToDouble();
  Value step = b.create<memref::LoadOp>(loc, func.getArgument(0), ValueRange{});
  Value offset = op.getOffset()
                     ? b.create<memref::LoadOp>(loc, func.getArgument(1), ValueRange{})
                           .getResult()
                     : Value();
  Value output = func.getArguments().back();
  auto k = [&](OpBuilder &nb, Location l, uint64_t v) {
    return constInt(nb, l, i64, static_cast<int64_t>(v));
  };
  Value key = b.create<arith::XOrIOp>(
      loc, b.create<arith::MulIOp>(loc, k(b, loc, static_cast<uint64_t>(op.getSeed())),
                                   k(b, loc, 0x9E3779B97F4A7C15ull)),
      b.create<arith::MulIOp>(loc, step, k(b, loc, 0xD1B54A32D192ED03ull)));
  if (offset)
    key = b.create<arith::AddIOp>(loc, key, offset);
  MLIRContext *ctx = b.getContext();
  buildGeneric(
      b, loc, ValueRange{}, output,
      {AffineMap::getMultiDimIdentityMap(1, ctx)}, {IteratorType::parallel},
      [&](OpBuilder &nb, Location l, ValueRange) -> SmallVector<Value> {
        Value index = nb.create<arith::IndexCastOp>(l, i64, nb.create<linalg::IndexOp>(l, 0));
        Value x = nb.create<arith::AddIOp>(l, key, index);
        auto mix = [&](Value v, unsigned shift, uint64_t mult) {
          Value shifted = nb.create<arith::ShRUIOp>(l, v, k(nb, l, shift));
          Value mixed = nb.create<arith::XOrIOp>(l, v, shifted);
          return mult ? nb.create<arith::MulIOp>(l, mixed, k(nb, l, mult)).getResult()
                      : mixed;
        };
        x = mix(x, 30, 0xBF58476D1CE4E5B9ull);
        x = mix(x, 27, 0x94D049BB133111EBull);
        x = mix(x, 31, 0);
        Value bits = nb.create<arith::ShRUIOp>(l, x, k(nb, l, 40));
        Value u = nb.create<arith::MulFOp>(
            l, nb.create<arith::UIToFPOp>(l, nb.getF64Type(), bits),
            constFloat(nb, l, nb.getF64Type(), 1.0 / 16777216.0));
        Value keep = nb.create<arith::CmpFOp>(l, arith::CmpFPredicate::OGE, u,
                                              constFloat(nb, l, nb.getF64Type(), rate));
        return {nb.create<arith::SelectOp>(l, keep, constFloat(nb, l, elem, 1.0 / (1.0 - rate)),
                                           constFloat(nb, l, elem, 0.0))};
      });
  b.create<func::ReturnOp>(loc);
  SmallVector<Value> inputs = {op.getStep()};
  if (op.getOffset())
    inputs.push_back(op.getOffset());
  return {inputs, false};
}

} // namespace

Value emitScalarOp(OpBuilder &b, Location loc, Operation *op, ValueRange args) {
  Type resultElem =
      llvm::cast<RankedTensorType>(op->getResult(0).getType()).getElementType();
  bool isFloat = llvm::isa<FloatType>(resultElem);
  return llvm::TypeSwitch<Operation *, Value>(op)
      .Case([&](nn::ReluOp) {
        // maximumf, not maxnumf: a NaN activation must stay NaN.
        return b.create<arith::MaximumFOp>(loc, args[0], constFloat(b, loc, resultElem, 0.0));
      })
      .Case([&](nn::NegOp) { return b.create<arith::NegFOp>(loc, args[0]); })
      .Case([&](nn::ExpOp) { return b.create<math::ExpOp>(loc, args[0]); })
      .Case([&](nn::LogOp) { return b.create<math::LogOp>(loc, args[0]); })
      .Case([&](nn::RsqrtOp) { return b.create<math::RsqrtOp>(loc, args[0]); })
      .Case([&](nn::AddOp) -> Value {
        if (isFloat)
          return b.create<arith::AddFOp>(loc, args[0], args[1]);
        return b.create<arith::AddIOp>(loc, args[0], args[1]);
      })
      .Case([&](nn::SubOp) -> Value {
        if (isFloat)
          return b.create<arith::SubFOp>(loc, args[0], args[1]);
        return b.create<arith::SubIOp>(loc, args[0], args[1]);
      })
      .Case([&](nn::MulOp) -> Value {
        if (isFloat)
          return b.create<arith::MulFOp>(loc, args[0], args[1]);
        return b.create<arith::MulIOp>(loc, args[0], args[1]);
      })
      .Case([&](nn::DivOp) -> Value {
        if (isFloat)
          return b.create<arith::DivFOp>(loc, args[0], args[1]);
        return b.create<arith::DivSIOp>(loc, args[0], args[1]);
      })
      .Case([&](nn::MaxOp) { return maxOf(b, loc, args[0], args[1]); })
      .Case([&](nn::SelectOp) {
        return b.create<arith::SelectOp>(loc, args[0], args[1], args[2]);
      })
      .Case([&](nn::CmpOp cmp) {
        return compare(b, loc, cmp.getPredicate(), args[0], args[1]);
      })
      .Case([&](nn::CastOp) { return castScalar(b, loc, args[0], resultElem); })
      .Default([](Operation *) { return Value(); });
}

bool isKernelOp(Operation *op) {
  return llvm::isa<nn::ReluOp, nn::NegOp, nn::ExpOp, nn::LogOp, nn::RsqrtOp, nn::AddOp,
                   nn::SubOp, nn::MulOp, nn::DivOp, nn::MaxOp, nn::SelectOp, nn::CmpOp,
                   nn::CastOp, nn::BroadcastOp, nn::ReduceSumOp, nn::ReduceMeanOp,
                   nn::ReduceMaxOp, nn::GlobalAvgPoolOp, nn::ArgmaxOp,
                   nn::SoftmaxCrossEntropyOp, nn::SoftmaxCrossEntropyBackwardOp,
                   nn::LrScheduleOp, nn::SgdOp, nn::SgdMomentumOp, nn::LarsOp, nn::AdamOp,
                   nn::DropoutMaskOp, nn::NonfiniteFlagsOp, nn::FusionOp,
                   nn::MultiTensorOp, nn::TransposeOp>(op);
}

FailureOr<KernelSignature> emitKernel(Operation *op, ModuleOp kernels, StringRef name) {
  return llvm::TypeSwitch<Operation *, FailureOr<KernelSignature>>(op)
      .Case([&](nn::BroadcastOp o) { return emitBroadcast(o, kernels, name); })
      .Case([&](nn::TransposeOp o) { return emitTranspose(o, kernels, name); })
      .Case([&](nn::FusionOp o) { return emitFusion(o, kernels, name); })
      .Case([&](nn::MultiTensorOp o) { return emitMultiTensor(o, kernels, name); })
      .Case([&](nn::ReduceSumOp o) { return emitReduce(o, kernels, name, false, false); })
      .Case([&](nn::ReduceMeanOp o) { return emitReduce(o, kernels, name, false, true); })
      .Case([&](nn::ReduceMaxOp o) { return emitReduce(o, kernels, name, true, false); })
      .Case([&](nn::GlobalAvgPoolOp o) { return emitGlobalAvgPool(o, kernels, name); })
      .Case([&](nn::ArgmaxOp o) { return emitArgmax(o, kernels, name); })
      .Case([&](nn::SoftmaxCrossEntropyOp o) {
        return emitSoftmaxCrossEntropy(o, kernels, name);
      })
      .Case([&](nn::SoftmaxCrossEntropyBackwardOp o) {
        return emitSoftmaxCrossEntropyBackward(o, kernels, name);
      })
      .Case([&](nn::LrScheduleOp o) { return emitLrSchedule(o, kernels, name); })
      .Case([&](nn::DropoutMaskOp o) { return emitDropoutMask(o, kernels, name); })
      .Case([&](nn::NonfiniteFlagsOp o) { return emitNonfiniteFlags(o, kernels, name); })
      .Case<nn::SgdOp, nn::SgdMomentumOp, nn::LarsOp, nn::AdamOp>(
          [&](Operation *o) { return emitOptimizer(o, kernels, name); })
      .Default([&](Operation *o) -> FailureOr<KernelSignature> {
        if (!isKernelOp(o))
          return o->emitOpError("has no generated-kernel lowering");
        return emitElementwise(o, kernels, name);
      });
}

} // namespace graphc
