//===- SetBatchSize.cpp - set the batch size and re-infer shapes ----------===//
//
// Implements --graphc-set-batch-size: the batch size is a compile option, not
// something users edit in the model file.
//
//===----------------------------------------------------------------------===//

#include "compiler/Transforms/Passes.h"

#include "compiler/Transforms/BuildUtils.h"

#include "dialects/nn/IR/NNOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"

#define DEBUG_TYPE "graphc-set-batch-size"

namespace graphc {
#define GEN_PASS_DEF_SETBATCHSIZE
#include "compiler/Transforms/Passes.h.inc"
} // namespace graphc

using namespace mlir;

namespace graphc {
namespace {

/// Algorithm: 1) rewrite dimension 0 of every @forward argument; 2) walk the
/// body in order and replace each op's result types with what its
/// InferTypeOpInterface returns for the new operand types; 3) rebuild the
/// function type from the arguments and the returned values.
struct SetBatchSizePass : impl::SetBatchSizeBase<SetBatchSizePass> {
  using SetBatchSizeBase::SetBatchSizeBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (batchSize <= 0) {
      module.emitError("graphc-set-batch-size needs batch-size > 0, got ")
          << static_cast<int64_t>(batchSize);
      return signalPassFailure();
    }
    // An inference model (@infer, graphc import --forward) is static as
    // imported: it has no batch dimension to set.
    if (!module.lookupSymbol("forward") && module.lookupSymbol<func::FuncOp>("infer"))
      return;
    // A model imported at a fixed batch size (graphc import --batch) has
    // shapes that hold it (attention's heads merged with the batch).
    if (auto fixed = module->getAttrOfType<IntegerAttr>("graphc.fixed_batch");
        fixed && fixed.getInt() != batchSize) {
      module.emitError("the model was imported for batch size ")
          << fixed.getInt() << " (graphc import --batch " << fixed.getInt()
          << "), not " << static_cast<int64_t>(batchSize)
          << ": compile with --batch-size " << fixed.getInt() << " or import it again";
      return signalPassFailure();
    }
    FailureOr<func::FuncOp> found = lookupModelFunction(module, "forward");
    if (failed(found))
      return signalPassFailure();
    func::FuncOp forward = *found;
    Block &body = forward.getBody().front();
    for (BlockArgument arg : body.getArguments()) {
      auto type = llvm::dyn_cast<RankedTensorType>(arg.getType());
      if (!type || type.getRank() == 0) {
        forward.emitError("input #")
            << arg.getArgNumber() << " has no batch dimension: " << arg.getType();
        return signalPassFailure();
      }
      SmallVector<int64_t> shape(type.getShape());
      shape[0] = static_cast<int64_t>(batchSize);
      arg.setType(type.clone(shape));
    }

    WalkResult walk = forward.walk([&](InferTypeOpInterface op) {
      SmallVector<Type> types;
      Operation *raw = op.getOperation();
      if (failed(op.inferReturnTypes(raw->getContext(), raw->getLoc(),
                                     raw->getOperands(), raw->getAttrDictionary(),
                                     raw->getPropertiesStorage(), raw->getRegions(),
                                     types)))
        return WalkResult::interrupt();
      for (auto [result, type] : llvm::zip_equal(raw->getResults(), types))
        result.setType(type);
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return signalPassFailure();

    Operation *terminator = body.getTerminator();
    forward.setFunctionType(FunctionType::get(
        &getContext(), body.getArgumentTypes(), terminator->getOperandTypes()));
  }
};

} // namespace
} // namespace graphc
