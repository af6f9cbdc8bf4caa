//===- NNDialect.cpp - nn dialect registration ----------------------------===//
//
// Registers the ops and attributes of the `nn` dialect and materializes folded
// constants as `nn.constant`.
//
//===----------------------------------------------------------------------===//

#include "dialects/nn/IR/NNDialect.h"

#include "dialects/nn/IR/NNOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace graphc::nn;

#include "dialects/nn/IR/NNDialect.cpp.inc"
#include "dialects/nn/IR/NNEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/nn/IR/NNAttrs.cpp.inc"

void NNDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/nn/IR/NNOps.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/nn/IR/NNAttrs.cpp.inc"
      >();
}

Operation *NNDialect::materializeConstant(OpBuilder &builder, Attribute value,
                                          Type type, Location loc) {
  auto elements = llvm::dyn_cast<ElementsAttr>(value);
  if (!elements || elements.getType() != type)
    return nullptr;
  return builder.create<ConstantOp>(loc, elements);
}
