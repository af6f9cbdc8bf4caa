//===- PlanDialect.h - plan dialect -----------------------------*- C++ -*-===//
//
// The `plan` dialect (PlanOps.td): the runtime contract of runtime/schema/plan.fbs
// as MLIR ops, so the lowering passes can build, check and print it.
//
//===----------------------------------------------------------------------===//

#ifndef GRAPHC_DIALECTS_PLAN_IR_PLANDIALECT_H
#define GRAPHC_DIALECTS_PLAN_IR_PLANDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"

#include "dialects/plan/IR/PlanDialect.h.inc"
#include "dialects/plan/IR/PlanEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/plan/IR/PlanAttrs.h.inc"

#define GET_OP_CLASSES
#include "dialects/plan/IR/PlanOps.h.inc"

namespace graphc::plan {

/// Bytes one element of `type` occupies in a plan buffer (i1 takes a byte), or 0
/// for an element type plans cannot hold.
int64_t elementBytes(mlir::Type type);

} // namespace graphc::plan

#endif // GRAPHC_DIALECTS_PLAN_IR_PLANDIALECT_H
