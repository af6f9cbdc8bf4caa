//===- BuildUtils.cpp - small IR builders shared by the passes ------------===//

#include "compiler/Transforms/BuildUtils.h"

#include "dialects/nn/IR/NNOps.h"
#include "mlir/IR/IRMapping.h"

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

FailureOr<MicroBatches> splitMicroBatches(func::FuncOp func, int64_t count) {
  Block &body = func.getBody().front();
  Operation *terminator = body.getTerminator();
  SmallVector<Operation *> original;
  for (Operation &op : body.without_terminator())
    original.push_back(&op);

  // The step's arguments: every one `count` times as many rows.
  const unsigned arguments = body.getNumArguments();
  SmallVector<int64_t> rows;
  SmallVector<Value> whole;
  for (unsigned a = 0; a < arguments; ++a) {
    BlockArgument arg = body.getArgument(a); // (adding arguments moves them)
    auto type = llvm::dyn_cast<RankedTensorType>(arg.getType());
    if (!type || type.getRank() == 0 || type.isDynamicDim(0))
      return func.emitError("micro-batches: argument #")
             << arg.getArgNumber() << " of @" << func.getSymName()
             << " has no static batch dim to split";
    SmallVector<int64_t> shape(type.getShape());
    rows.push_back(shape[0]);
    shape[0] *= count;
    whole.push_back(body.addArgument(
        RankedTensorType::get(shape, type.getElementType(), type.getEncoding()), arg.getLoc()));
  }

  OpBuilder b(terminator);
  MicroBatches split;
  for (int64_t i = 0; i < count; ++i) {
    SmallVector<Operation *> &ops = split.ops.emplace_back();
    IRMapping map;
    for (unsigned a = 0; a < arguments; ++a) {
      auto slice = b.create<nn::SliceOp>(whole[a].getLoc(), whole[a], /*dim=*/0,
                                         i * rows[a], rows[a]);
      ops.push_back(slice);
      map.map(body.getArgument(a), slice.getResult());
    }
    for (Operation *op : original) {
      Operation *copy = b.clone(*op, map);
      auto mask = llvm::dyn_cast<nn::DropoutMaskOp>(copy);
      if (mask && i > 0) {
        // Micro-batch i's rows of the step's mask.
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPoint(mask);
        const int64_t size = llvm::cast<RankedTensorType>(mask.getType()).getNumElements();
        Value offset = scalarConstant(b, mask.getLoc(), b.getI64Type(),
                                      static_cast<double>(i * size));
        ops.push_back(offset.getDefiningOp());
        if (Value old = mask.getOffset()) {
          offset = b.create<nn::AddOp>(mask.getLoc(), old, offset);
          ops.push_back(offset.getDefiningOp());
        }
        mask.getOffsetMutable().assign(offset);
      }
      ops.push_back(copy);
    }
    SmallVector<Value> &results = split.results.emplace_back();
    for (Value v : terminator->getOperands())
      results.push_back(map.lookupOrDefault(v));
  }
  terminator->setOperands(split.results.back());
  for (Operation *op : llvm::reverse(original))
    op->erase();
  body.eraseArguments(0, arguments);
  func.setFunctionType(FunctionType::get(func.getContext(), body.getArgumentTypes(),
                                         func.getResultTypes()));
  return split;
}

} // namespace graphc
