//===- ReductionKernels.cpp - reductions, pools, argmax ---------------------===//
//
// Sums, means and maxima over dims (blocked, with several accumulators:
// ReductionNest.h), the global average pool and argmax.
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
#include "compiler/Lowering/ReductionNest.h"
#include "compiler/Lowering/KernelLoops.h"

using namespace mlir;

namespace graphc::kernel {

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

KernelSignature emitReduction(Operation *op, ModuleOp kernels, StringRef name) {
  if (auto o = dyn_cast<nn::ReduceSumOp>(op))
    return emitReduce(o, kernels, name, /*isMax=*/false, /*isMean=*/false);
  if (auto o = dyn_cast<nn::ReduceMeanOp>(op))
    return emitReduce(o, kernels, name, /*isMax=*/false, /*isMean=*/true);
  return emitReduce(cast<nn::ReduceMaxOp>(op), kernels, name, /*isMax=*/true, /*isMean=*/false);
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

} // namespace graphc::kernel
