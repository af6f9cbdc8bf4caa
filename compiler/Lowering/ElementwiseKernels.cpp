//===- ElementwiseKernels.cpp - elementwise and copy kernels ----------------===//
//
// Elementwise ops (one flat loop), broadcasts, transposes and slices (one
// indexed copy each), concats (one copy per operand) and the dropout keep
// mask.
//
//===----------------------------------------------------------------------===//

#include "compiler/Lowering/KernelBuilders.h"

#include "dialects/nn/IR/NNOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;

namespace graphc::kernel {

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

/// One parallel loop over the elements of `from` (the input when
/// `shiftOutput`, else the output) copying input to output, with the index of
/// the side that is not iterated shifted by `shift` along `dim`.
static void buildShiftedCopy(OpBuilder &b, Location loc, Value input, Value output,
                             unsigned dim, int64_t shift, bool shiftOutput) {
  Value from = shiftOutput ? input : output;
  auto type = llvm::cast<MemRefType>(from.getType());
  SmallVector<Value> lower, upper, steps;
  for (unsigned d = 0; d < type.getRank(); ++d) {
    lower.push_back(constIndex(b, loc, 0));
    steps.push_back(constIndex(b, loc, 1));
    upper.push_back(type.isDynamicDim(d) ? b.create<memref::DimOp>(loc, from, d).getResult()
                                         : constIndex(b, loc, type.getDimSize(d)));
  }
  b.create<scf::ParallelOp>(
      loc, lower, upper, steps, [&](OpBuilder &nb, Location l, ValueRange ivs) {
        SmallVector<Value> shifted(ivs);
        if (shift != 0)
          shifted[dim] = nb.create<arith::AddIOp>(l, ivs[dim], constIndex(nb, l, shift));
        Value x = nb.create<memref::LoadOp>(l, input, shiftOutput ? ValueRange(ivs)
                                                                  : ValueRange(shifted));
        nb.create<memref::StoreOp>(l, x, output,
                                   shiftOutput ? ValueRange(shifted) : ValueRange(ivs));
      });
}

/// A slice: one loop over the result, reading the input `start` further
/// along `dim`.
KernelSignature emitSlice(nn::SliceOp op, ModuleOp kernels, StringRef name) {
  OpBuilder b(op->getContext());
  Location loc = op->getLoc();
  func::FuncOp func = createKernelFunc(
      b, kernels, name, loc, {naturalType(op.getInput().getType()), naturalType(op.getType())});
  buildShiftedCopy(b, loc, func.getArgument(0), func.getArgument(1),
                   static_cast<unsigned>(op.getDim()), op.getStart(), /*shiftOutput=*/false);
  b.create<func::ReturnOp>(loc);
  return {{op.getInput()}, false};
}

/// A concat: one loop per operand (one launch each, in order) over that
/// operand, storing each element the extents of the operands before it
/// further along `dim`.
KernelSignature emitConcat(nn::ConcatOp op, ModuleOp kernels, StringRef name) {
  OpBuilder b(op->getContext());
  Location loc = op->getLoc();
  SmallVector<Type> types;
  for (Value v : op.getInputs())
    types.push_back(naturalType(v.getType()));
  types.push_back(naturalType(op.getType()));
  func::FuncOp func = createKernelFunc(b, kernels, name, loc, types);
  auto dim = static_cast<unsigned>(op.getDim());
  int64_t offset = 0;
  for (auto [i, v] : llvm::enumerate(op.getInputs())) {
    buildShiftedCopy(b, loc, func.getArgument(static_cast<unsigned>(i)),
                     func.getArguments().back(), dim, offset, /*shiftOutput=*/true);
    offset += llvm::cast<RankedTensorType>(v.getType()).getDimSize(dim);
  }
  b.create<func::ReturnOp>(loc);
  return {llvm::to_vector(op.getInputs()), false};
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

} // namespace graphc::kernel
