//===- NNDialect.cpp - nn dialect registration ----------------------------===//
//
// Registers the ops of the `nn` dialect and materializes folded
// constants as `nn.constant`.
//
//===----------------------------------------------------------------------===//

#include "dialects/nn/IR/NNDialect.h"

#include "dialects/nn/IR/NNOps.h"
#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace graphc::nn;

#include "dialects/nn/IR/NNDialect.cpp.inc"
#include "dialects/nn/IR/NNEnums.cpp.inc"

void NNDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/nn/IR/NNOps.cpp.inc"
      >();
}

Operation *NNDialect::materializeConstant(OpBuilder &builder, Attribute value,
                                          Type type, Location loc) {
  auto elements = llvm::dyn_cast<ElementsAttr>(value);
  if (!elements || elements.getType() != type)
    return nullptr;
  return builder.create<ConstantOp>(loc, elements);
}
