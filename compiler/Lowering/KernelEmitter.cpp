//===- KernelEmitter.cpp - nn ops as kernel bodies on memrefs -------------===//
//
// Which family of emitters builds each op's kernel (KernelBuilders.h lists
// them, one file each), and the scalar function of each elementwise op that
// the elementwise, fusion and optimizer kernels compose:
//  - elementwise ops (and the optimizer updates) become one linalg.generic over
//    the flattened tensors: a single loop the CPU vectorizer and the GPU mapper
//    both handle well;
//  - broadcasts and reductions keep their rank so indexing maps express them;
//  - the loss, its gradient, argmax and the learning-rate schedule are small
//    scf loop nests; rows are scf.parallel so the GPU path can map them.
//
//===----------------------------------------------------------------------===//

#include "compiler/Lowering/KernelEmitter.h"
#include "compiler/Lowering/KernelBuilders.h"

#include "dialects/nn/IR/NNOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;

namespace graphc {

using namespace kernel;

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
      .Case([&](nn::SigmoidOp) -> Value {
        // 1 / (1 + e^-x): e^-x overflows to inf for x below about -88 and
        // the quotient is then 0, the right limit; no NaN either way.
        Value one = constFloat(b, loc, resultElem, 1.0);
        Value e = b.create<math::ExpOp>(loc, b.create<arith::NegFOp>(loc, args[0]));
        return b.create<arith::DivFOp>(loc, one, b.create<arith::AddFOp>(loc, one, e));
      })
      // The CPU codegen expands math.erf into a rational approximation
      // (MLIR's, within a few ulp); the GPU one calls libdevice's erff.
      // Computed in f32 whatever the storage type (the approximation is
      // written for f32).
      .Case([&](nn::ErfOp) -> Value {
        Type f32 = b.getF32Type();
        Value x = resultElem == f32 ? args[0] : castScalar(b, loc, args[0], f32);
        Value y = b.create<math::ErfOp>(loc, x);
        return resultElem == f32 ? y : castScalar(b, loc, y, resultElem);
      })
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
  return llvm::isa<nn::ReluOp, nn::NegOp, nn::ExpOp, nn::LogOp, nn::RsqrtOp, nn::SigmoidOp,
                   nn::ErfOp, nn::AddOp, nn::SubOp, nn::MulOp, nn::DivOp, nn::MaxOp,
                   nn::SelectOp, nn::CmpOp,
                   nn::CastOp, nn::BroadcastOp, nn::ReduceSumOp, nn::ReduceMeanOp,
                   nn::ReduceMaxOp, nn::GlobalAvgPoolOp, nn::ArgmaxOp,
                   nn::SoftmaxCrossEntropyOp, nn::SoftmaxCrossEntropyBackwardOp,
                   nn::LrScheduleOp, nn::SgdOp, nn::SgdMomentumOp, nn::LarsOp, nn::AdamOp,
                   nn::DropoutMaskOp, nn::NonfiniteFlagsOp, nn::SumSquaresOp, nn::FusionOp,
                   nn::MultiTensorOp, nn::TransposeOp, nn::ConcatOp, nn::SliceOp,
                   nn::GatherOp, nn::ScatterAddOp, nn::OrthonormalizeOp, nn::TopkSelectOp,
                   nn::ZeroAtOp>(op);
}

FailureOr<KernelSignature> emitKernel(Operation *op, ModuleOp kernels, StringRef name) {
  return llvm::TypeSwitch<Operation *, FailureOr<KernelSignature>>(op)
      .Case([&](nn::BroadcastOp o) { return emitBroadcast(o, kernels, name); })
      .Case([&](nn::TransposeOp o) { return emitTranspose(o, kernels, name); })
      .Case([&](nn::ConcatOp o) { return emitConcat(o, kernels, name); })
      .Case([&](nn::SliceOp o) { return emitSlice(o, kernels, name); })
      .Case([&](nn::GatherOp o) { return emitGather(o, kernels, name); })
      .Case([&](nn::ScatterAddOp o) { return emitScatterAdd(o, kernels, name); })
      .Case([&](nn::FusionOp o) { return emitFusion(o, kernels, name); })
      .Case([&](nn::MultiTensorOp o) { return emitMultiTensor(o, kernels, name); })
      .Case<nn::ReduceSumOp, nn::ReduceMeanOp, nn::ReduceMaxOp>(
          [&](Operation *o) { return emitReduction(o, kernels, name); })
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
      .Case([&](nn::SumSquaresOp o) { return emitSumSquares(o, kernels, name); })
      .Case([&](nn::OrthonormalizeOp o) { return emitOrthonormalize(o, kernels, name); })
      .Case([&](nn::TopkSelectOp o) { return emitTopkSelect(o, kernels, name); })
      .Case([&](nn::ZeroAtOp o) { return emitZeroAt(o, kernels, name); })
      .Case<nn::SgdOp, nn::SgdMomentumOp, nn::LarsOp, nn::AdamOp>(
          [&](Operation *o) { return emitOptimizer(o, kernels, name); })
      .Default([&](Operation *o) -> FailureOr<KernelSignature> {
        if (!isKernelOp(o))
          return o->emitOpError("has no generated-kernel lowering");
        return emitElementwise(o, kernels, name);
      });
}

} // namespace graphc
