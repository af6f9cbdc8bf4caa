//===- KernelBuilders.cpp - kernel-building helpers -------------------------===//
//
// What every kernel family builds with: constants, memref types of a tensor,
// the kernel function, scalar casts and comparisons, and linalg.generic
// skeletons (KernelBuilders.h).
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
    // f16 <-> bf16: no single arith cast; through f32, which holds either
    // exactly, so the one rounding is the final truncation.
    if (fromFloat.getWidth() == toFloat.getWidth())
      return b.create<arith::TruncFOp>(loc, to,
                                       b.create<arith::ExtFOp>(loc, b.getF32Type(), x));
    if (fromFloat.getWidth() < toFloat.getWidth())
      return b.create<arith::ExtFOp>(loc, to, x);
    return b.create<arith::TruncFOp>(loc, to, x);
  }
  if (fromFloat)
    return b.create<arith::FPToSIOp>(loc, to, x);
  // i1 and i8 (bytes: pixels) are unsigned.
  const bool fromUnsigned = from.isInteger(1) || from.isInteger(8);
  if (toFloat)
    return fromUnsigned ? b.create<arith::UIToFPOp>(loc, to, x).getResult()
                        : b.create<arith::SIToFPOp>(loc, to, x).getResult();
  if (fromUnsigned && from.getIntOrFloatBitWidth() < to.getIntOrFloatBitWidth())
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

} // namespace graphc::kernel
