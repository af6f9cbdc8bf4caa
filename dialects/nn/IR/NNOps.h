//===- NNOps.h - nn dialect ops ---------------------------------*- C++ -*-===//
//
// The ops of the `nn` dialect (NNOps.td) and the shape arithmetic they share
// with the analyses (conv and pool output sizes).
//
//===----------------------------------------------------------------------===//

#ifndef GRAPHC_DIALECTS_NN_IR_NNOPS_H
#define GRAPHC_DIALECTS_NN_IR_NNOPS_H

#include "dialects/nn/IR/NNDialect.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace graphc::nn {

/// Output extent of a sliding window over one spatial dimension, or a value below
/// 1 when the window does not fit. Dynamic input extents stay dynamic.
int64_t slidingWindowOutputSize(int64_t inputSize, int64_t window, int64_t stride,
                                int64_t padBegin, int64_t padEnd,
                                int64_t dilation = 1);

} // namespace graphc::nn

#define GET_OP_CLASSES
#include "dialects/nn/IR/NNOps.h.inc"

namespace graphc::nn {
/// The elementwise ops an nn.fusion may compute (one scalar function each).
bool isFusibleElementwise(mlir::Operation *op);
/// The optimizer updates an nn.multi_tensor may batch (elementwise per
/// parameter: sgd, sgd_momentum, adam; not lars, which needs per-tensor norms).
bool isBatchableUpdate(mlir::Operation *op);
/// Whether `use` reads only its value's shape: a broadcast's `shape_of`, or
/// an input of a fusion that only broadcasts to its shape (no kernel takes
/// an argument for either).
bool readsShapeOnly(mlir::OpOperand &use);
} // namespace graphc::nn

#endif // GRAPHC_DIALECTS_NN_IR_NNOPS_H
