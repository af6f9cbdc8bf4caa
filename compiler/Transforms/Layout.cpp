//===- Layout.cpp - channels-last activations -----------------------------===//
//
// Implements --graphc-layout: convolutions, pooling, batch norm's reductions,
// concats, slices and the elementwise ops between them compute on NHWC
// activations, with a transpose only where an NCHW value enters the region
// (the images) or an op that reads NCHW leaves it (a flatten before a
// linear). See Passes.td.
//
//===----------------------------------------------------------------------===//

#include "compiler/Transforms/Passes.h"

#include "dialects/nn/IR/NNOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/SetVector.h"

#define DEBUG_TYPE "graphc-layout"

namespace graphc {
#define GEN_PASS_DEF_LAYOUT
#include "compiler/Transforms/Passes.h.inc"
} // namespace graphc

using namespace mlir;

namespace graphc {
namespace {

/// NCHW -> NHWC: result dim i is input dim kToNhwc[i]; and back.
constexpr int64_t kToNhwc[4] = {0, 2, 3, 1};
constexpr int64_t kToNchw[4] = {0, 3, 1, 2};
/// Where NCHW dim d sits in NHWC.
constexpr int64_t kNhwcPosition[4] = {0, 3, 1, 2};

bool isRank4(Value v) {
  auto type = llvm::dyn_cast<RankedTensorType>(v.getType());
  return type && type.getRank() == 4;
}

RankedTensorType nhwcType(Type type) {
  auto t = llvm::cast<RankedTensorType>(type);
  ArrayRef<int64_t> s = t.getShape();
  return t.clone({s[0], s[2], s[3], s[1]});
}

class Converter {
public:
  Converter(func::FuncOp func, bool ohwiFilters) : func(func), ohwiFilters(ohwiFilters) {}
  void run();

private:
  /// The NHWC twin of NCHW `v`: its converted producer's result, or a
  /// transpose placed right after `v` is defined.
  Value toNhwc(Value v);
  /// What an op that reads NCHW reads for `v`: `v` itself, unless its
  /// producer was converted, then a transpose of the twin (one per value).
  Value toNchw(Value v);
  bool convert(Operation *op);
  Value convertOperand(Value v) { return twins.count(v) ? twins[v] : toNhwc(v); }

  /// The OHWI transpose of OIHW filter `w` (one per filter value).
  Value toOhwi(Value w);

  func::FuncOp func;
  bool ohwiFilters;
  DenseMap<Value, Value> twins;
  DenseMap<Value, Value> ohwiFiltersOf;
  DenseMap<Value, Value> nchwCopies;
  llvm::SetVector<Operation *> converted;
};

Value Converter::toNhwc(Value v) {
  if (Value twin = twins.lookup(v))
    return twin;
  OpBuilder b(func.getContext());
  if (Operation *def = v.getDefiningOp())
    b.setInsertionPointAfter(def);
  else
    b.setInsertionPointToStart(v.getParentBlock());
  Value twin = b.create<nn::TransposeOp>(v.getLoc(), v, b.getDenseI64ArrayAttr(kToNhwc));
  twins[v] = twin;
  return twin;
}

Value Converter::toNchw(Value v) {
  if (!converted.contains(v.getDefiningOp()))
    return v;
  if (Value copy = nchwCopies.lookup(v))
    return copy;
  Value twin = twins.lookup(v);
  OpBuilder b(func.getContext());
  b.setInsertionPointAfterValue(twin);
  Value copy = b.create<nn::TransposeOp>(v.getLoc(), twin, b.getDenseI64ArrayAttr(kToNchw));
  nchwCopies[v] = copy;
  return copy;
}

Value Converter::toOhwi(Value w) {
  if (Value ohwi = ohwiFiltersOf.lookup(w))
    return ohwi;
  OpBuilder b(func.getContext());
  b.setInsertionPointAfterValue(w);
  // [O, I, KH, KW] -> [O, KH, KW, I]: the permutation activations take.
  Value ohwi = b.create<nn::TransposeOp>(w.getLoc(), w, b.getDenseI64ArrayAttr(kToNhwc));
  ohwiFiltersOf[w] = ohwi;
  return ohwi;
}

/// Builds the channels-last version of `op` before it when it has one and
/// it pays (its activation operands are channels-last already, or it is a
/// convolution); records its results' twins.
bool Converter::convert(Operation *op) {
  OpBuilder b(op);
  auto anyTwin = [&] {
    return llvm::any_of(op->getOperands(), [&](Value v) { return twins.count(v) != 0; });
  };
  auto cloneWith = [&](ArrayRef<Value> operands) {
    Operation *clone = b.clone(*op);
    for (auto [i, v] : llvm::enumerate(operands))
      clone->setOperand(static_cast<unsigned>(i), v);
    return clone;
  };

  // Already channels-last (a model written NHWC): nothing to convert.
  if (op->hasAttr("channels_last"))
    return false;
  if (isa<nn::Conv2DOp>(op) || (isa<nn::MaxPool2DOp, nn::AvgPool2DOp>(op) && anyTwin())) {
    if (!isRank4(op->getOperand(0)))
      return false;
    SmallVector<Value> operands(op->getOperands());
    operands[0] = convertOperand(operands[0]);
    const bool ohwi = ohwiFilters && isa<nn::Conv2DOp>(op) && isRank4(operands[1]);
    if (ohwi)
      operands[1] = toOhwi(operands[1]);
    Operation *clone = cloneWith(operands);
    clone->setAttr("channels_last", b.getUnitAttr());
    if (ohwi)
      clone->setAttr("filter_ohwi", b.getUnitAttr());
    clone->getResult(0).setType(nhwcType(op->getResult(0).getType()));
    twins[op->getResult(0)] = clone->getResult(0);
    return true;
  }
  if (nn::isFusibleElementwise(op)) {
    if (op->getNumResults() != 1 || !isRank4(op->getResult(0)) || !anyTwin() ||
        !llvm::all_of(op->getOperands(), isRank4))
      return false;
    SmallVector<Value> operands;
    for (Value v : op->getOperands())
      operands.push_back(convertOperand(v));
    Operation *clone = cloneWith(operands);
    clone->getResult(0).setType(nhwcType(op->getResult(0).getType()));
    twins[op->getResult(0)] = clone->getResult(0);
    return true;
  }
  if (auto broadcast = dyn_cast<nn::BroadcastOp>(op)) {
    Value input = broadcast.getInput(), shapeOf = broadcast.getShapeOf();
    if (!isRank4(broadcast.getResult()) || !isRank4(shapeOf) ||
        !(twins.count(shapeOf) || twins.count(input)))
      return false;
    SmallVector<int64_t> dims;
    if (isRank4(input)) {
      dims = {0, 1, 2, 3};
      input = convertOperand(input);
    } else {
      for (int64_t d : broadcast.getDims())
        dims.push_back(kNhwcPosition[d]);
      if (!llvm::is_sorted(dims) ||
          std::adjacent_find(dims.begin(), dims.end()) != dims.end())
        return false; // would need its input transposed too
    }
    auto clone = b.create<nn::BroadcastOp>(broadcast.getLoc(), input,
                                           convertOperand(shapeOf),
                                           b.getDenseI64ArrayAttr(dims));
    twins[broadcast.getResult()] = clone.getResult();
    return true;
  }
  if (isa<nn::ReduceSumOp, nn::ReduceMeanOp, nn::ReduceMaxOp>(op)) {
    Value input = op->getOperand(0);
    if (!twins.count(input))
      return false;
    auto dimsAttr = op->getAttrOfType<DenseI64ArrayAttr>("dims");
    bool keepDims = op->hasAttr("keep_dims");
    SmallVector<int64_t> dims;
    for (int64_t d : dimsAttr.asArrayRef())
      dims.push_back(kNhwcPosition[d]);
    llvm::sort(dims);
    if (!keepDims) {
      // The dims that remain must keep their order, so that the result is
      // the NCHW op's, element for element.
      SmallVector<int64_t> kept;
      for (int64_t d = 0; d < 4; ++d)
        if (!llvm::is_contained(dimsAttr.asArrayRef(), d))
          kept.push_back(kNhwcPosition[d]);
      if (!llvm::is_sorted(kept))
        return false;
    }
    Operation *clone = cloneWith({twins[input]});
    clone->setAttr("dims", b.getDenseI64ArrayAttr(dims));
    if (keepDims) {
      clone->getResult(0).setType(nhwcType(op->getResult(0).getType()));
      twins[op->getResult(0)] = clone->getResult(0);
    } else {
      op->getResult(0).replaceAllUsesWith(clone->getResult(0));
    }
    return true;
  }
  if (isa<nn::ConcatOp, nn::SliceOp>(op)) {
    // Copies along one dim: the same copy along that dim's NHWC position.
    if (!isRank4(op->getResult(0)) || !anyTwin())
      return false;
    SmallVector<Value> operands;
    for (Value v : op->getOperands())
      operands.push_back(convertOperand(v));
    Operation *clone = cloneWith(operands);
    int64_t dim = op->getAttrOfType<IntegerAttr>("dim").getInt();
    clone->setAttr("dim", b.getI64IntegerAttr(kNhwcPosition[dim]));
    clone->getResult(0).setType(nhwcType(op->getResult(0).getType()));
    twins[op->getResult(0)] = clone->getResult(0);
    return true;
  }
  if (auto pool = dyn_cast<nn::GlobalAvgPoolOp>(op)) {
    // The mean over H and W of [N, H, W, C] is [N, C], as the NCHW op's.
    if (!twins.count(pool.getInput()))
      return false;
    auto mean = b.create<nn::ReduceMeanOp>(pool.getLoc(), twins[pool.getInput()],
                                           b.getDenseI64ArrayAttr({1, 2}), UnitAttr());
    pool.getResult().replaceAllUsesWith(mean.getResult());
    return true;
  }
  return false;
}

/// In program order: convert what converts, and give every other op the NCHW
/// values it reads; then erase the converted ops, whose results nothing reads
/// any more.
void Converter::run() {
  Block &body = func.getBody().front();
  for (Operation &op : llvm::make_early_inc_range(body)) {
    if (convert(&op)) {
      converted.insert(&op);
      continue;
    }
    for (OpOperand &operand : op.getOpOperands())
      operand.set(toNchw(operand.get()));
  }
  for (Operation *op : llvm::reverse(converted)) {
    assert(op->use_empty() && "a converted op is still read");
    op->erase();
  }
}

struct LayoutPass : impl::LayoutBase<LayoutPass> {
  using LayoutBase::LayoutBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (layout == "nchw")
      return;
    if (layout != "nhwc") {
      module.emitError("graphc-layout: layout must be nhwc or nchw, got '") << layout << "'";
      return signalPassFailure();
    }
    if (filters != "oihw" && filters != "ohwi") {
      module.emitError("graphc-layout: filters must be oihw or ohwi, got '") << filters << "'";
      return signalPassFailure();
    }
    for (StringRef name : {"forward", "eval_step", "infer"})
      if (auto func = module.lookupSymbol<func::FuncOp>(name); func && !func.isExternal())
        Converter(func, filters == "ohwi").run();
  }
};

} // namespace
} // namespace graphc
