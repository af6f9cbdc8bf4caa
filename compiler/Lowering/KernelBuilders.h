//===- KernelBuilders.h - the kernel families' shared parts -----*- C++ -*-===//
//
// Private to the kernel emitters (KernelEmitter.cpp dispatches to them): the
// helpers every family builds with (KernelBuilders.cpp) and one entry point
// per family file:
//   ElementwiseKernels.cpp  elementwise ops, broadcasts, transposes, concats,
//                           slices, gathers, scatter-adds, dropout masks
//   FusionKernel.cpp        nn.fusion regions
//   ReductionKernels.cpp    reductions, the global average pool, argmax
//   LossKernels.cpp         softmax cross-entropy and its gradient
//   OptimizerKernels.cpp    the learning-rate schedule, optimizer updates,
//                           multi-tensor updates, overflow flags, PowerSGD's
//                           orthonormalization, deep gradient compression's
//                           top-k selection and masking
//
//===----------------------------------------------------------------------===//

#ifndef GRAPHC_COMPILER_LOWERING_KERNELBUILDERS_H
#define GRAPHC_COMPILER_LOWERING_KERNELBUILDERS_H

#include "compiler/Lowering/KernelEmitter.h"

#include "dialects/nn/IR/NNOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Utils/StructuredOpsUtils.h"
#include "mlir/IR/AffineMap.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/STLFunctionalExtras.h"

namespace graphc::kernel {

using IteratorType = mlir::utils::IteratorType;
using BodyBuilder = llvm::function_ref<llvm::SmallVector<mlir::Value>(
    mlir::OpBuilder &, mlir::Location, mlir::ValueRange)>;

// ---- helpers (KernelBuilders.cpp)
mlir::Value constIndex(mlir::OpBuilder &b, mlir::Location loc, int64_t v);
mlir::Value constFloat(mlir::OpBuilder &b, mlir::Location loc, mlir::Type type, double v);
mlir::Value constInt(mlir::OpBuilder &b, mlir::Location loc, mlir::Type type, int64_t v);
/// The tensor as one flat memref (rank 0 as one element).
mlir::MemRefType flatType(mlir::Type tensorType);
/// The tensor's shape as a memref.
mlir::MemRefType naturalType(mlir::Type tensorType);
/// Creates `func.func @name(types...)` in `kernels` and positions `b` in its
/// entry block.
mlir::func::FuncOp createKernelFunc(mlir::OpBuilder &b, mlir::ModuleOp kernels,
                                    llvm::StringRef name, mlir::Location loc,
                                    mlir::TypeRange argTypes);
mlir::Value maxOf(mlir::OpBuilder &b, mlir::Location loc, mlir::Value x, mlir::Value y);
mlir::Value castScalar(mlir::OpBuilder &b, mlir::Location loc, mlir::Value x, mlir::Type to);
mlir::Value compare(mlir::OpBuilder &b, mlir::Location loc, nn::CmpPredicate predicate,
                    mlir::Value x, mlir::Value y);
/// linalg.generic over `maps`' loops; the body gets one scalar per input and
/// output and returns the values to yield.
void buildGeneric(mlir::OpBuilder &b, mlir::Location loc, mlir::ValueRange inputs,
                  mlir::ValueRange outputs, llvm::ArrayRef<mlir::AffineMap> maps,
                  llvm::ArrayRef<IteratorType> iterators, BodyBuilder body);
/// A 1-D elementwise generic: rank-0 operands (a learning rate) are
/// broadcast, every other operand is indexed like the output.
void buildFlatGeneric(mlir::OpBuilder &b, mlir::Location loc, mlir::ValueRange inputs,
                      mlir::ValueRange outputs, BodyBuilder body);

// ---- the families
KernelSignature emitElementwise(mlir::Operation *op, mlir::ModuleOp kernels,
                                llvm::StringRef name);
KernelSignature emitBroadcast(nn::BroadcastOp op, mlir::ModuleOp kernels, llvm::StringRef name);
KernelSignature emitTranspose(nn::TransposeOp op, mlir::ModuleOp kernels, llvm::StringRef name);
KernelSignature emitConcat(nn::ConcatOp op, mlir::ModuleOp kernels, llvm::StringRef name);
KernelSignature emitSlice(nn::SliceOp op, mlir::ModuleOp kernels, llvm::StringRef name);
KernelSignature emitGather(nn::GatherOp op, mlir::ModuleOp kernels, llvm::StringRef name);
KernelSignature emitScatterAdd(nn::ScatterAddOp op, mlir::ModuleOp kernels,
                               llvm::StringRef name);
KernelSignature emitDropoutMask(nn::DropoutMaskOp op, mlir::ModuleOp kernels,
                                llvm::StringRef name);
KernelSignature emitFusion(nn::FusionOp op, mlir::ModuleOp kernels, llvm::StringRef name);
/// nn.reduce_sum, reduce_mean or reduce_max.
KernelSignature emitReduction(mlir::Operation *op, mlir::ModuleOp kernels, llvm::StringRef name);
KernelSignature emitGlobalAvgPool(nn::GlobalAvgPoolOp op, mlir::ModuleOp kernels,
                                  llvm::StringRef name);
KernelSignature emitArgmax(nn::ArgmaxOp op, mlir::ModuleOp kernels, llvm::StringRef name);
KernelSignature emitSoftmaxCrossEntropy(nn::SoftmaxCrossEntropyOp op, mlir::ModuleOp kernels,
                                        llvm::StringRef name);
KernelSignature emitSoftmaxCrossEntropyBackward(nn::SoftmaxCrossEntropyBackwardOp op,
                                                mlir::ModuleOp kernels, llvm::StringRef name);
KernelSignature emitLrSchedule(nn::LrScheduleOp op, mlir::ModuleOp kernels, llvm::StringRef name);
/// nn.sgd, sgd_momentum, lars or adam.
KernelSignature emitOptimizer(mlir::Operation *op, mlir::ModuleOp kernels, llvm::StringRef name);
KernelSignature emitMultiTensor(nn::MultiTensorOp op, mlir::ModuleOp kernels,
                                llvm::StringRef name);
KernelSignature emitNonfiniteFlags(nn::NonfiniteFlagsOp op, mlir::ModuleOp kernels,
                                   llvm::StringRef name);
KernelSignature emitSumSquares(nn::SumSquaresOp op, mlir::ModuleOp kernels,
                               llvm::StringRef name);
KernelSignature emitTopkSelect(nn::TopkSelectOp op, mlir::ModuleOp kernels,
                               llvm::StringRef name);
KernelSignature emitZeroAt(nn::ZeroAtOp op, mlir::ModuleOp kernels, llvm::StringRef name);
KernelSignature emitOrthonormalize(nn::OrthonormalizeOp op, mlir::ModuleOp kernels,
                                   llvm::StringRef name);

} // namespace graphc::kernel

#endif // GRAPHC_COMPILER_LOWERING_KERNELBUILDERS_H
