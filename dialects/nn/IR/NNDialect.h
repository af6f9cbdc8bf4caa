//===- NNDialect.h - nn dialect ---------------------------------*- C++ -*-===//
//
// The `nn` dialect's class and enums. Ops are in NNOps.h.
//
//===----------------------------------------------------------------------===//

#ifndef GRAPHC_DIALECTS_NN_IR_NNDIALECT_H
#define GRAPHC_DIALECTS_NN_IR_NNDIALECT_H

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Dialect.h"

#include "dialects/nn/IR/NNDialect.h.inc"
#include "dialects/nn/IR/NNEnums.h.inc"

#endif // GRAPHC_DIALECTS_NN_IR_NNDIALECT_H
