//===- ElementwiseKernels.cpp - elementwise and copy kernels ----------------===//
//
// Elementwise ops (one flat loop), broadcasts, transposes and slices (one
// indexed copy each), concats (one copy per operand), gathers and their
// scatter-add gradients (a loop over result rows and columns each), and the
// dropout keep mask.
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

/// The product of `shape[from:]`.
static int64_t extentFrom(ArrayRef<int64_t> shape, size_t from) {
  int64_t n = 1;
  for (int64_t d : shape.drop_front(from))
    n *= d;
  return n;
}

/// A copy between flat buffers as a 2-D loop [outer, inner]: element (o, i)
/// goes from `input[o * inStride + inOffset + i]` to
/// `output[o * outStride + outOffset + i]`. A concat's operand or a slice
/// along dim d of a row-major tensor is one: outer runs over dims [0, d),
/// inner over the contiguous rest, so loops stay two deep whatever the rank
/// and the inner one reads and writes consecutive elements.
static void buildStridedCopy(OpBuilder &b, Location loc, Value input, Value output,
                             int64_t outer, int64_t inner, int64_t inStride, int64_t inOffset,
                             int64_t outStride, int64_t outOffset) {
  Value zero = constIndex(b, loc, 0), one = constIndex(b, loc, 1);
  b.create<scf::ParallelOp>(
      loc, ValueRange{zero, zero}, ValueRange{constIndex(b, loc, outer), constIndex(b, loc, inner)},
      ValueRange{one, one}, [&](OpBuilder &nb, Location l, ValueRange ivs) {
        auto at = [&](int64_t stride, int64_t offset) -> Value {
          Value row = nb.create<arith::MulIOp>(l, ivs[0], constIndex(nb, l, stride));
          Value base = nb.create<arith::AddIOp>(l, row, ivs[1]);
          return offset ? nb.create<arith::AddIOp>(l, base, constIndex(nb, l, offset)).getResult()
                        : base;
        };
        Value x = nb.create<memref::LoadOp>(l, input, at(inStride, inOffset));
        nb.create<memref::StoreOp>(l, x, output, at(outStride, outOffset));
      });
}

/// A slice: one copy over the result, reading each row of the input `start`
/// further along `dim`.
KernelSignature emitSlice(nn::SliceOp op, ModuleOp kernels, StringRef name) {
  OpBuilder b(op->getContext());
  Location loc = op->getLoc();
  func::FuncOp func = createKernelFunc(
      b, kernels, name, loc, {flatType(op.getInput().getType()), flatType(op.getType())});
  ArrayRef<int64_t> in = op.getInput().getType().getShape(), out = op.getType().getShape();
  const auto dim = static_cast<size_t>(op.getDim());
  const int64_t inner = extentFrom(out, dim);
  buildStridedCopy(b, loc, func.getArgument(0), func.getArgument(1),
                   extentFrom(out, 0) / inner, inner, extentFrom(in, dim),
                   op.getStart() * extentFrom(in, dim + 1), inner, 0);
  b.create<func::ReturnOp>(loc);
  return {{op.getInput()}, false};
}

/// A concat: one copy per operand (one launch each, in order), each row
/// stored the extents of the operands before it further along `dim`.
KernelSignature emitConcat(nn::ConcatOp op, ModuleOp kernels, StringRef name) {
  OpBuilder b(op->getContext());
  Location loc = op->getLoc();
  SmallVector<Type> types;
  for (Value v : op.getInputs())
    types.push_back(flatType(v.getType()));
  types.push_back(flatType(op.getType()));
  func::FuncOp func = createKernelFunc(b, kernels, name, loc, types);
  const auto dim = static_cast<size_t>(op.getDim());
  ArrayRef<int64_t> out = op.getType().getShape();
  int64_t offset = 0;
  for (auto [i, v] : llvm::enumerate(op.getInputs())) {
    ArrayRef<int64_t> in = llvm::cast<RankedTensorType>(v.getType()).getShape();
    const int64_t inner = extentFrom(in, dim);
    buildStridedCopy(b, loc, func.getArgument(static_cast<unsigned>(i)),
                     func.getArguments().back(), extentFrom(in, 0) / inner, inner, inner, 0,
                     extentFrom(out, dim), offset * extentFrom(out, dim + 1));
    offset += in[dim];
  }
  b.create<func::ReturnOp>(loc);
  return {llvm::to_vector(op.getInputs()), false};
}

/// A gather: one copy over the result [count, inner], row o read from the
/// table's row indices[o].
KernelSignature emitGather(nn::GatherOp op, ModuleOp kernels, StringRef name) {
  OpBuilder b(op->getContext());
  Location loc = op->getLoc();
  func::FuncOp func = createKernelFunc(b, kernels, name, loc,
                                       {flatType(op.getTable().getType()),
                                        flatType(op.getIndices().getType()),
                                        flatType(op.getType())});
  ArrayRef<int64_t> out = op.getType().getShape();
  const int64_t inner = extentFrom(out, 1);
  Value zero = constIndex(b, loc, 0), one = constIndex(b, loc, 1);
  Value table = func.getArgument(0), indices = func.getArgument(1),
        output = func.getArgument(2);
  b.create<scf::ParallelOp>(
      loc, ValueRange{zero, zero}, ValueRange{constIndex(b, loc, out[0]), constIndex(b, loc, inner)},
      ValueRange{one, one}, [&](OpBuilder &nb, Location l, ValueRange ivs) {
        Value row = nb.create<arith::IndexCastOp>(
            l, nb.getIndexType(), nb.create<memref::LoadOp>(l, indices, ivs[0]));
        Value width = constIndex(nb, l, inner);
        Value from = nb.create<arith::AddIOp>(l, nb.create<arith::MulIOp>(l, row, width), ivs[1]);
        Value to = nb.create<arith::AddIOp>(l, nb.create<arith::MulIOp>(l, ivs[0], width), ivs[1]);
        nb.create<memref::StoreOp>(l, nb.create<memref::LoadOp>(l, table, from), output, to);
      });
  b.create<func::ReturnOp>(loc);
  return {{op.getTable(), op.getIndices()}, false};
}

/// A scatter-add as a gather of sums: each result element [r, i] adds the
/// input's [sources[j], i] for j in [offsets[r], offsets[r + 1]) in order,
/// in f32 for half types, so no two threads write one element.
KernelSignature emitScatterAdd(nn::ScatterAddOp op, ModuleOp kernels, StringRef name) {
  OpBuilder b(op->getContext());
  Location loc = op->getLoc();
  func::FuncOp func = createKernelFunc(
      b, kernels, name, loc,
      {flatType(op.getInput().getType()), flatType(op.getOffsets().getType()),
       flatType(op.getSources().getType()), flatType(op.getType())});
  ArrayRef<int64_t> out = op.getType().getShape();
  const int64_t inner = extentFrom(out, 1);
  Type elem = op.getType().getElementType();
  Type acc = elem.getIntOrFloatBitWidth() < 32 ? b.getF32Type() : elem;
  Value zero = constIndex(b, loc, 0), one = constIndex(b, loc, 1);
  Value input = func.getArgument(0), offsets = func.getArgument(1),
        sources = func.getArgument(2), output = func.getArgument(3);
  b.create<scf::ParallelOp>(
      loc, ValueRange{zero, zero}, ValueRange{constIndex(b, loc, out[0]), constIndex(b, loc, inner)},
      ValueRange{one, one}, [&](OpBuilder &nb, Location l, ValueRange ivs) {
        auto indexAt = [&](Value buffer, Value at) -> Value {
          return nb.create<arith::IndexCastOp>(l, nb.getIndexType(),
                                               nb.create<memref::LoadOp>(l, buffer, at));
        };
        Value width = constIndex(nb, l, inner);
        Value begin = indexAt(offsets, ivs[0]);
        Value end = indexAt(offsets, nb.create<arith::AddIOp>(l, ivs[0], constIndex(nb, l, 1)));
        auto loop = nb.create<scf::ForOp>(
            l, begin, end, constIndex(nb, l, 1), ValueRange{constFloat(nb, l, acc, 0.0)},
            [&](OpBuilder &fb, Location fl, Value j, ValueRange sum) {
              Value row = indexAt(sources, j);
              Value at = fb.create<arith::AddIOp>(fl, fb.create<arith::MulIOp>(fl, row, width),
                                                  ivs[1]);
              Value x = castScalar(fb, fl, fb.create<memref::LoadOp>(fl, input, at), acc);
              fb.create<scf::YieldOp>(fl, ValueRange{fb.create<arith::AddFOp>(fl, sum[0], x)});
            });
        Value to = nb.create<arith::AddIOp>(l, nb.create<arith::MulIOp>(l, ivs[0], width), ivs[1]);
        nb.create<memref::StoreOp>(l, castScalar(nb, l, loop.getResult(0), elem), output, to);
      });
  b.create<func::ReturnOp>(loc);
  return {{op.getInput(), op.getOffsets(), op.getSources()}, false};
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
