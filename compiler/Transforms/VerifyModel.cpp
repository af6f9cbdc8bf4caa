//===- VerifyModel.cpp - check the model contract -------------------------===//
//
// Implements --graphc-verify-model: the first phase of `graphc compile`. The op
// verifiers have already checked every op; this pass checks what makes a module
// a trainable model (see Passes.td), so later phases can rely on it.
//
//===----------------------------------------------------------------------===//

#include "compiler/Transforms/Passes.h"

#include "dialects/nn/IR/NNOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/ConvertUTF.h"

#define DEBUG_TYPE "graphc-verify-model"

namespace graphc {
#define GEN_PASS_DEF_VERIFYMODEL
#include "compiler/Transforms/Passes.h.inc"
} // namespace graphc

using namespace mlir;

namespace graphc {
namespace {

LogicalResult verifyForwardSignature(func::FuncOp forward) {
  FunctionType type = forward.getFunctionType();
  if (type.getNumInputs() != 2)
    return forward.emitError("@forward must take (%images, %labels), got ")
           << type.getNumInputs() << " argument(s)";
  auto images = llvm::dyn_cast<RankedTensorType>(type.getInput(0));
  if (!images || !llvm::isa<FloatType>(images.getElementType()) ||
      (images.getRank() != 2 && images.getRank() != 4))
    return forward.emitError("@forward's images must be a float tensor of rank 2 "
                             "or 4 (NCHW), got ")
           << type.getInput(0);
  if (llvm::any_of(images.getShape().drop_front(), ShapedType::isDynamic))
    return forward.emitError("@forward's images may be dynamic only in the batch "
                             "dimension, got ")
           << type.getInput(0);
  // 2^31 values per image bounds every per-image count (activations, MACs)
  // far inside int64 once multiplied by weights and the batch.
  int64_t perImage = 1;
  for (int64_t size : images.getShape().drop_front()) {
    if (size < 1)
      return forward.emitError("@forward's images have an empty dimension: ")
             << type.getInput(0);
    perImage *= size;
    if (perImage > (int64_t(1) << 31))
      return forward.emitError("@forward's images have more than 2^31 values "
                               "per example: ")
             << type.getInput(0);
  }
  auto labels = llvm::dyn_cast<RankedTensorType>(type.getInput(1));
  if (!labels || labels.getRank() != 1 ||
      !(labels.getElementType().isSignlessInteger(32) ||
        labels.getElementType().isSignlessInteger(64)))
    return forward.emitError("@forward's labels must be a rank-1 i32 or i64 "
                             "tensor, got ")
           << type.getInput(1);
  int64_t batch = images.getDimSize(0), labelBatch = labels.getDimSize(0);
  if (!ShapedType::isDynamic(batch) && !ShapedType::isDynamic(labelBatch) &&
      batch != labelBatch)
    return forward.emitError("images and labels disagree on the batch size: ")
           << batch << " vs " << labelBatch;
  if (type.getNumResults() != 1)
    return forward.emitError("@forward must return exactly one value, the loss; "
                             "it returns ")
           << type.getNumResults();
  return success();
}

/// An inference model's @infer: static float (or integer) tensors in, at
/// least one tensor out.
LogicalResult verifyInferSignature(func::FuncOp infer) {
  FunctionType type = infer.getFunctionType();
  if (type.getNumResults() == 0)
    return infer.emitError("@infer must return at least one value");
  for (Type t : llvm::concat<const Type>(type.getInputs(), type.getResults())) {
    auto tensor = llvm::dyn_cast<RankedTensorType>(t);
    int64_t count = 1;
    bool bounded = tensor && tensor.hasStaticShape();
    for (int64_t d : bounded ? tensor.getShape() : ArrayRef<int64_t>())
      bounded = bounded && d >= 1 && d <= (int64_t{1} << 31) / count && (count *= d) > 0;
    if (!bounded)
      return infer.emitError("@infer's inputs and outputs must be non-empty tensors of static "
                             "shape with at most 2^31 values, got ")
             << t;
  }
  return success();
}

struct VerifyModelPass : impl::VerifyModelBase<VerifyModelPass> {
  using VerifyModelBase::VerifyModelBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    func::FuncOp forward;
    for (Operation &op : module.getBody()->getOperations()) {
      if (llvm::isa<nn::ParameterOp, nn::StateOp>(op))
        continue;
      auto func = llvm::dyn_cast<func::FuncOp>(op);
      if (func && (func.getSymName() == "forward" || func.getSymName() == "infer") && !forward) {
        forward = func;
        continue;
      }
      op.emitError("a model holds only nn.parameter, nn.state and one "
                   "func.func @forward (or @infer, an inference model); found ")
          << (func ? "func.func @" + func.getSymName().str()
                   : op.getName().getStringRef().str());
      return signalPassFailure();
    }
    if (!forward) {
      module.emitError("the model has no func.func @forward");
      return signalPassFailure();
    }
    const bool inference = forward.getSymName() == "infer";
    if (inference && !forwardOnly) {
      forward.emitError("@infer is an inference model: it compiles with --forward only");
      return signalPassFailure();
    }
    if (forward.isExternal()) {
      forward.emitError("@") << forward.getSymName() << " has no body";
      return signalPassFailure();
    }
    if (inference ? failed(verifyInferSignature(forward))
                  : failed(verifyForwardSignature(forward)))
      return signalPassFailure();
    if (!forward.getBody().hasOneBlock()) {
      forward.emitError("@") << forward.getSymName()
                             << " must be a single block (no control flow)";
      return signalPassFailure();
    }

    llvm::StringSet<> read;
    for (Operation &op : forward.getBody().front()) {
      if (auto load = llvm::dyn_cast<nn::LoadOp>(op))
        read.insert(load.getVariable());
      if (!llvm::isa_and_nonnull<nn::NNDialect>(op.getDialect()) &&
          !llvm::isa<func::ReturnOp>(op)) {
        op.emitError("op '") << op.getName()
                             << "' is not an nn op; a model body holds only nn ops";
        return signalPassFailure();
      }
      if (inference && llvm::isa<nn::SoftmaxCrossEntropyOp, nn::AssignOp>(op)) {
        op.emitError("an inference model computes no loss and assigns no state");
        return signalPassFailure();
      }
    }

    if (!inference) {
      Value loss = forward.getBody().front().getTerminator()->getOperand(0);
      auto lossOp = loss.getDefiningOp<nn::SoftmaxCrossEntropyOp>();
      if (!lossOp) {
        forward.emitError("@forward must return the result of "
                          "nn.softmax_cross_entropy (the loss)");
        return signalPassFailure();
      }
      if (lossOp.getLabels() != forward.getArgument(1)) {
        lossOp.emitError("the loss must compare the logits with %labels, "
                         "@forward's second argument");
        return signalPassFailure();
      }
    }

    // Names become checkpoint tensor names (safetensors keys: UTF-8 JSON
    // strings) and the plan's state names; graphc.* is graphc's own.
    for (Operation &op : module.getBody()->getOperations()) {
      if (!llvm::isa<nn::ParameterOp, nn::StateOp>(op))
        continue;
      StringRef name = SymbolTable::getSymbolName(&op).getValue();
      const llvm::UTF8 *bytes = name.bytes_begin();
      const bool printable =
          llvm::none_of(name, [](char c) { return c >= 0 && c < 0x20; }) &&
          llvm::isLegalUTF8String(&bytes, name.bytes_end());
      if (name.empty() || !printable || name.starts_with("graphc.") || name == "__metadata__") {
        std::string shown;
        llvm::raw_string_ostream os(shown);
        llvm::printEscapedString(name, os);
        op.emitError("a parameter or state needs a name in printable UTF-8 that does not "
                     "start with 'graphc.' (graphc's own states) and is not __metadata__ "
                     "(safetensors' own key), got '")
            << shown << "'";
        return signalPassFailure();
      }
      // The optimizer keeps parameter P's slots as P.momentum_buffer,
      // P.exp_avg and P.exp_avg_sq: a variable of the model may not be one.
      for (StringRef suffix : {".momentum_buffer", ".exp_avg", ".exp_avg_sq"})
        if (name.ends_with(suffix) && name.size() > suffix.size())
          if (auto owner = module.lookupSymbol<nn::ParameterOp>(name.drop_back(suffix.size()))) {
            op.emitError("@") << name << " is the name graphc's optimizer gives a slot of "
                              << "parameter @" << owner.getSymName() << "; rename it";
            return signalPassFailure();
          }
    }

    for (auto param : module.getOps<nn::ParameterOp>()) {
      if (!inference && !read.contains(param.getSymName())) {
        param.emitError("parameter @")
            << param.getSymName()
            << " is never read by @forward, so it would get no gradient";
        return signalPassFailure();
      }
    }
  }
};

} // namespace
} // namespace graphc
