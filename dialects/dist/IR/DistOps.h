//===- DistOps.h - dist dialect ---------------------------------*- C++ -*-===//
//
// The `dist` dialect (collectives of data-parallel training): its class, enums
// and ops.
//
//===----------------------------------------------------------------------===//

#ifndef GRAPHC_DIALECTS_DIST_IR_DISTOPS_H
#define GRAPHC_DIALECTS_DIST_IR_DISTOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "dialects/dist/IR/DistDialect.h.inc"
#include "dialects/dist/IR/DistEnums.h.inc"

#define GET_OP_CLASSES
#include "dialects/dist/IR/DistOps.h.inc"

#endif // GRAPHC_DIALECTS_DIST_IR_DISTOPS_H
