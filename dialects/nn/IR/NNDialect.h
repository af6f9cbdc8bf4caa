//===- NNDialect.h - nn dialect ---------------------------------*- C++ -*-===//
//
// The `nn` dialect's class, enums and attributes. Ops are in NNOps.h.
//
//===----------------------------------------------------------------------===//

#ifndef GRAPHC_DIALECTS_NN_IR_NNDIALECT_H
#define GRAPHC_DIALECTS_NN_IR_NNDIALECT_H

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Dialect.h"

#include "dialects/nn/IR/NNDialect.h.inc"
#include "dialects/nn/IR/NNEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/nn/IR/NNAttrs.h.inc"

#endif // GRAPHC_DIALECTS_NN_IR_NNDIALECT_H
