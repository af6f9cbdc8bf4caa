//===- BuildUtils.cpp - small IR builders shared by the passes ------------===//

#include "compiler/Transforms/BuildUtils.h"

#include "dialects/nn/IR/NNOps.h"

using namespace mlir;

namespace graphc {

FailureOr<func::FuncOp> lookupModelFunction(ModuleOp module, StringRef name) {
  auto func = module.lookupSymbol<func::FuncOp>(name);
  if (!func || func.isExternal())
    return module.emitError("the model has no func.func @") << name << " with a body";
  return func;
}

Value scalarConstant(OpBuilder &b, Location loc, Type elementType, double value) {
  auto type = RankedTensorType::get({}, elementType);
  Attribute element = llvm::isa<FloatType>(elementType)
                          ? Attribute(b.getFloatAttr(elementType, value))
                          : Attribute(b.getIntegerAttr(elementType,
                                                       static_cast<int64_t>(value)));
  return b.create<nn::ConstantOp>(loc, DenseElementsAttr::get(type, element));
}

Value splatLike(OpBuilder &b, Location loc, Value like, double value) {
  auto type = llvm::cast<RankedTensorType>(like.getType());
  Value scalar = scalarConstant(b, loc, type.getElementType(), value);
  if (type.getRank() == 0)
    return scalar;
  return b.create<nn::BroadcastOp>(loc, scalar, like, b.getDenseI64ArrayAttr({}));
}

Value broadcastChannels(OpBuilder &b, Location loc, Value channels, Value like) {
  return b.create<nn::BroadcastOp>(loc, channels, like, b.getDenseI64ArrayAttr({1}));
}

Value loadStepCounter(OpBuilder &b, Location loc, ModuleOp module) {
  auto type = RankedTensorType::get({}, b.getI64Type());
  if (!module.lookupSymbol(kStepCounter)) {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(module.getBody());
    b.create<nn::StateOp>(module.getLoc(), kStepCounter, type, nn::Initializer::zeros,
                          /*init_value=*/nullptr);
  }
  return b.create<nn::LoadOp>(loc, type, kStepCounter);
}

} // namespace graphc
