//===- MixedPrecision.cpp - FP16 / BF16 training with loss scaling --------===//
//
// Implements --graphc-mixed-precision (see Passes.td for the rules). The
// precision of every value is decided here, at the nn level, so that every
// later pass (fusion, lowering, both codegens) only carries it out: each op
// result's element type says where a value is rounded, and fused and unfused
// kernels round at the same places.
//
// One walk over each step function in program order:
//  1. a value computed in f32 that carries the batch (in whichever dim
//     transposes and reshapes moved it to, alone or merged with another, as
//     attention merges it with its heads) and has more than one reader is
//     *stored* in half: its readers get `cast(v, half)` instead (rounded
//     once, where it is computed);
//  2. convolutions, linear and matmul read half operands (one cast per value,
//     placed at its definition, so a weight's half copy is made once and
//     shared by forward and backward) and produce half results; so does fused
//     attention, for q, k, v (and in backward its output and the output's
//     gradient), while its biases and log-sum-exp stay f32 (the runtime keeps
//     the scores and softmax in f32, as autocast's attention does);
//  3. pooling, reshape, flatten and the copies (transpose, concat, slice)
//     keep the precision of their data operand;
//  4. every other op computes in f32: a half operand is widened by a cast in
//     front of that reader alone, which fusion then folds into the reader's
//     kernel.
// Then, for FP16 with loss scaling, the loss gradient's seed becomes the loss
// scale, every nn.apply_gradient moves after one multi-tensor overflow check
// and gets `scaled_by 1/scale skip_if found`, and the scale's update rule
// ends the step.
//
//===----------------------------------------------------------------------===//

#include "compiler/Transforms/Passes.h"

#include "compiler/Transforms/BuildUtils.h"
#include "dialects/nn/IR/NNOps.h"
#include "dialects/nn/IR/Views.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>
#include <limits>

namespace graphc {
#define GEN_PASS_DEF_MIXEDPRECISION
#include "compiler/Transforms/Passes.h.inc"
} // namespace graphc

using namespace mlir;

namespace graphc {
namespace {

/// Ops that compute in half precision (FP32 accumulation is the library's).
bool isHalfCompute(Operation *op) {
  return isa<nn::Conv2DOp, nn::Conv2DBackwardDataOp, nn::Conv2DBackwardFilterOp,
             nn::LinearOp, nn::MatmulOp>(op);
}

/// Ops that compute in the precision of their data operand (the first):
/// pooling picks or averages values, reshape and flatten move none, the
/// copies (transpose, concat, slice, gather) move them unchanged, and a
/// scatter-add sums in f32 whatever it stores.
bool followsOperand(Operation *op) {
  return isa<nn::MaxPool2DOp, nn::AvgPool2DOp, nn::MaxPool2DBackwardOp,
             nn::AvgPool2DBackwardOp, nn::ReshapeOp, nn::FlattenOp, nn::TransposeOp,
             nn::ConcatOp, nn::SliceOp, nn::GatherOp, nn::ScatterAddOp>(op);
}

bool isFloatTensor(Value v, Type element) {
  auto type = llvm::dyn_cast<RankedTensorType>(v.getType());
  return type && type.getElementType() == element;
}

/// Which dim of `op`'s first result carries the batch of the step's inputs
/// (alone, or merged with other dims as attention merges it with its
/// heads), given where its operands carry it; none when the result does not.
/// Weight gradients contract the batch away (conv2d_backward_filter, a
/// matmul over it), as do reductions over its dim and the loss.
std::optional<int64_t> batchDimOf(Operation *op, const llvm::DenseMap<Value, int64_t> &batched) {
  auto at = [&](unsigned i) -> std::optional<int64_t> {
    if (i >= op->getNumOperands())
      return std::nullopt;
    auto it = batched.find(op->getOperand(i));
    return it == batched.end() ? std::nullopt : std::optional<int64_t>(it->second);
  };
  if (isa<nn::AttentionOp>(op)) {
    // The output [G, Lq, Dv] carries q's groups or queries.
    auto p = at(0);
    return p && *p < 2 ? p : std::nullopt;
  }
  if (op->getNumResults() != 1)
    return std::nullopt;
  auto type = llvm::dyn_cast<RankedTensorType>(op->getResult(0).getType());
  if (!type || type.getRank() == 0)
    return std::nullopt;
  const int64_t rank = type.getRank();
  if (nn::isFusibleElementwise(op)) {
    for (Value v : op->getOperands())
      if (auto it = batched.find(v);
          it != batched.end() &&
          llvm::cast<RankedTensorType>(v.getType()).getShape() == type.getShape())
        return it->second;
    return std::nullopt;
  }
  if (auto broadcast = dyn_cast<nn::BroadcastOp>(op)) {
    auto it = batched.find(broadcast.getShapeOf());
    return it == batched.end() ? std::nullopt : std::optional<int64_t>(it->second);
  }
  if (isa<nn::Conv2DOp, nn::Conv2DBackwardDataOp, nn::LinearOp, nn::MaxPool2DOp,
          nn::AvgPool2DOp, nn::MaxPool2DBackwardOp, nn::GlobalAvgPoolOp,
          nn::AvgPool2DBackwardOp>(op))
    return at(0) == 0 ? std::optional<int64_t>(0) : std::nullopt;
  if (isa<nn::DropoutOp, nn::DropoutMaskOp>(op))
    return at(0);
  if (auto matmul = dyn_cast<nn::MatmulOp>(op)) {
    // The batch dims of a rank-3 product, the left operand's rows or the
    // right one's columns; contracted otherwise.
    auto l = at(0), r = at(1);
    if (rank == 3 && (l == 0 || r == 0))
      return 0;
    if (l && *l == rank - (matmul.getTransposeA() ? 1 : 2))
      return rank - 2;
    if (r && *r == rank - (matmul.getTransposeB() ? 2 : 1))
      return rank - 1;
    return std::nullopt;
  }
  if (isa<nn::SoftmaxCrossEntropyBackwardOp>(op))
    return at(1) == 0 ? std::optional<int64_t>(0) : std::nullopt;
  if (isa<nn::ReshapeOp, nn::FlattenOp>(op)) {
    auto p = at(0);
    auto in = llvm::cast<RankedTensorType>(op->getOperand(0).getType());
    if (!p || !in.hasStaticShape() || !type.hasStaticShape())
      return p == 0 && in.getDimSize(0) == type.getDimSize(0) ? p : std::nullopt;
    // The first result dim that overlaps the batch dim's span of the
    // row-major layout.
    int64_t before = 1, upTo = 1;
    for (int64_t d = 0; d < *p; ++d)
      before *= in.getDimSize(d);
    for (int64_t q = 0; q < rank; ++q)
      if ((upTo *= type.getDimSize(q)) > before)
        return q;
    return std::nullopt;
  }
  if (isa<nn::ConcatOp>(op)) {
    for (unsigned i = 0; i < op->getNumOperands(); ++i)
      if (auto p = at(i))
        return p;
    return std::nullopt;
  }
  if (isa<nn::SliceOp>(op))
    return at(0);
  if (auto transpose = dyn_cast<nn::TransposeOp>(op)) {
    auto p = at(0);
    if (!p)
      return std::nullopt;
    for (auto [q, from] : llvm::enumerate(transpose.getPermutation()))
      if (from == *p)
        return static_cast<int64_t>(q);
    return std::nullopt;
  }
  if (isa<nn::ReduceSumOp, nn::ReduceMeanOp, nn::ReduceMaxOp>(op)) {
    ArrayRef<int64_t> dims = isa<nn::ReduceSumOp>(op)    ? cast<nn::ReduceSumOp>(op).getDims()
                             : isa<nn::ReduceMeanOp>(op) ? cast<nn::ReduceMeanOp>(op).getDims()
                                                         : cast<nn::ReduceMaxOp>(op).getDims();
    const bool keep = isa<nn::ReduceSumOp>(op)    ? cast<nn::ReduceSumOp>(op).getKeepDims()
                      : isa<nn::ReduceMeanOp>(op) ? cast<nn::ReduceMeanOp>(op).getKeepDims()
                                                  : cast<nn::ReduceMaxOp>(op).getKeepDims();
    auto p = at(0);
    if (!p || llvm::is_contained(dims, *p))
      return std::nullopt;
    return keep ? *p : *p - llvm::count_if(dims, [&](int64_t d) { return d < *p; });
  }
  return std::nullopt;
}

/// Whether `use` reads only its value's shape (a broadcast's or dropout
/// mask's `shape_of`): no kernel reads the value's elements for it.
bool readsShapeOnly(OpOperand &use) {
  Operation *user = use.getOwner();
  if (auto broadcast = dyn_cast<nn::BroadcastOp>(user))
    return use.get() == broadcast.getShapeOf() && use.getOperandNumber() == 1;
  if (auto mask = dyn_cast<nn::DropoutMaskOp>(user))
    return use.get() == mask.getShapeOf();
  return false;
}

/// Re-infers `op`'s result types from its (rewritten) operands.
LogicalResult reinfer(Operation *op) {
  auto infer = dyn_cast<InferTypeOpInterface>(op);
  if (!infer)
    return op->emitOpError("graphc-mixed-precision cannot infer its result types");
  SmallVector<Type> types;
  if (failed(infer.inferReturnTypes(op->getContext(), op->getLoc(), op->getOperands(),
                                    op->getRawDictionaryAttrs(), op->getPropertiesStorage(),
                                    op->getRegions(), types)))
    return failure();
  for (auto [result, type] : llvm::zip(op->getResults(), types))
    result.setType(type);
  return success();
}

struct MixedPrecisionPass : impl::MixedPrecisionBase<MixedPrecisionPass> {
  using MixedPrecisionBase::MixedPrecisionBase;

  void runOnOperation() override;
  LogicalResult checkOptions(ModuleOp module);
  LogicalResult convert(func::FuncOp func);
  LogicalResult sinkNarrowings(func::FuncOp func);
  /// Per function: activations stored in half, and their bytes.
  SmallVector<NamedAttribute> storage;
  LogicalResult scaleLoss(ModuleOp module, func::FuncOp step);

  Type half, f32;
  /// 0: no loss scaling; else the initial (dynamic) or fixed (static) scale.
  double scale = 0.0;
  bool dynamic = false;
};

LogicalResult MixedPrecisionPass::checkOptions(ModuleOp module) {
  auto bad = [&](const llvm::Twine &message) {
    return module.emitError("graphc-mixed-precision: ") << message;
  };
  scale = 0.0;
  dynamic = false;
  storage.clear();
  if (precision == "fp16")
    half = Float16Type::get(&getContext());
  else if (precision == "bf16")
    half = BFloat16Type::get(&getContext());
  else
    return bad("precision must be fp16 or bf16, got '" + precision + "'");
  f32 = Float32Type::get(&getContext());
  StringRef mode = lossScale;
  bool bf16 = precision == "bf16";
  if (mode.empty())
    mode = bf16 ? "none" : "dynamic";
  if (bf16 && mode != "none")
    return bad("bf16 has the range of fp32 and needs no loss scaling; loss-scale applies to "
               "fp16 only");
  if (mode == "dynamic") {
    dynamic = true;
    scale = initialScale;
    // The scale is an f32 state: it must be finite as an f32.
    if (!(scale >= 1.0 && std::isfinite(static_cast<float>(scale))))
      return bad("initial-loss-scale must be a finite f32 >= 1, got " +
                 llvm::formatv("{0}", llvm::format("%g", double(initialScale))).str());
    if (window < 1)
      return bad("loss-scale-window must be >= 1, got " + std::to_string(window));
  } else if (mode != "none") {
    if (mode.getAsDouble(scale) || !(static_cast<float>(scale) > 0.0f) ||
        !std::isfinite(static_cast<float>(scale)))
      return bad("loss-scale must be dynamic, none or a number > 0 that is finite as an f32, "
                 "got '" + lossScale + "'");
  }
  if (!dynamic && (initialScale != 65536.0 || window != 2000))
    return bad("initial-loss-scale and loss-scale-window apply to loss-scale=dynamic only");
  return success();
}

void MixedPrecisionPass::runOnOperation() {
  ModuleOp module = getOperation();
  if (failed(checkOptions(module)))
    return signalPassFailure();
  FailureOr<func::FuncOp> step = lookupModelFunction(module, "train_step");
  if (failed(step))
    return signalPassFailure();
  if ((*step)->getAttr("graphc.precision") || module->getAttr("graphc.precision")) {
    module.emitError("graphc-mixed-precision: the module is already in mixed precision");
    return signalPassFailure();
  }
  if (failed(convert(*step)))
    return signalPassFailure();
  if (auto eval = module.lookupSymbol<func::FuncOp>("eval_step"); eval && !eval.isExternal())
    if (failed(convert(eval)))
      return signalPassFailure();
  if (scale > 0.0 && failed(scaleLoss(module, *step)))
    return signalPassFailure();
  module->setAttr("graphc.precision", StringAttr::get(&getContext(), precision));
  module->setAttr(kHalfStorageAttr, DictionaryAttr::get(&getContext(), storage));
}

LogicalResult MixedPrecisionPass::convert(func::FuncOp func) {
  Block &body = func.getBody().front();
  OpBuilder b(&getContext());
  llvm::DenseMap<Value, int64_t> batched;  // where a value carries the batch
  for (BlockArgument arg : body.getArguments())
    if (auto type = llvm::dyn_cast<RankedTensorType>(arg.getType()); type && type.getRank() > 0)
      batched[arg] = 0;

  // The half copy of an f32 value, made once at its definition.
  DenseMap<Value, Value> halfOf;
  auto toHalf = [&](Value v) -> Value {
    if (!isFloatTensor(v, f32))
      return v;
    Value &copy = halfOf[v];
    if (!copy) {
      OpBuilder::InsertionGuard guard(b);
      if (Operation *def = v.getDefiningOp())
        b.setInsertionPointAfter(def);
      else
        b.setInsertionPointToStart(&body);
      copy = b.create<nn::CastOp>(v.getLoc(), v, TypeAttr::get(half));
      if (auto it = batched.find(v); it != batched.end()) {
        const int64_t dim = it->second;
        batched[copy] = dim;
      }
    }
    return copy;
  };

  // Values made of broadcasts and scalars only (a per-channel coefficient
  // stretched to the batch's shape): fusion recomputes them from the small
  // operands in every reader, so they are never stored.
  llvm::DenseSet<Value> stretched;
  // Statistics: a reduction's result, and what is computed from such
  // results and stretched values alone (layer norm's mean, variance and
  // 1/sqrt(var + eps); their gradients). They stay f32, as autocast keeps
  // them: a reduced extent smaller than the activations, half would save
  // little and round the scale of every element they normalize.
  llvm::DenseSet<Value> statistics;
  auto isStretched = [&](Value v) {
    return stretched.contains(v) || llvm::cast<RankedTensorType>(v.getType()).getRank() == 0;
  };
  // An f32 copy of half `v` at the builder's point, carrying v's batch.
  auto widen = [&](Value v, Location loc) -> Value {
    Value wide = b.create<nn::CastOp>(loc, v, TypeAttr::get(f32));
    if (auto it = batched.find(v); it != batched.end()) {
      const int64_t dim = it->second;
      batched[wide] = dim;
    }
    return wide;
  };
  auto hasHalfResult = [&](Operation *op) {
    return llvm::any_of(op->getResults(), [&](Value r) { return isFloatTensor(r, half); });
  };

  DenseMap<Value, Value> wideOf;  // attention's half biases, widened once

  int64_t stored = 0, storedBytes = 0;
  SmallVector<Operation *> ops;
  for (Operation &op : body)
    ops.push_back(&op);
  for (Operation *op : ops) {
    // Operands.
    if (isa<nn::AttentionOp, nn::AttentionBackwardOp>(op)) {
      // q, k, v (backward: also the output and its gradient) in half; the
      // log-sum-exp and the biases in f32.
      const unsigned halves = isa<nn::AttentionOp>(op) ? 3 : 6, lse = 4;
      auto inHalf = [&](OpOperand &operand) {
        const unsigned i = operand.getOperandNumber();
        return i < halves && !(halves == 6 && i == lse);
      };
      // A half bias (computed by a half op) is widened once at its
      // definition, shared by forward and backward: attention is no fused
      // kernel that would fold the cast.
      for (OpOperand &operand : op->getOpOperands()) {
        if (inHalf(operand)) {
          operand.set(toHalf(operand.get()));
          continue;
        }
        Value v = operand.get();
        if (!isFloatTensor(v, half))
          continue;
        Value &wide = wideOf[v];
        if (!wide) {
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPointAfterValue(v);
          wide = b.create<nn::CastOp>(v.getLoc(), v, TypeAttr::get(f32));
        }
        operand.set(wide);
      }
      if (failed(reinfer(op)))
        return failure();
    } else if (isHalfCompute(op)) {
      for (OpOperand &operand : op->getOpOperands())
        operand.set(toHalf(operand.get()));
      if (failed(reinfer(op)))
        return failure();
    } else if (followsOperand(op)) {
      if (isFloatTensor(op->getOperand(0), half)) {
        for (OpOperand &operand : op->getOpOperands())
          operand.set(toHalf(operand.get()));
        if (failed(reinfer(op)))
          return failure();
      } else {
        // An f32 data operand: the others (a pool gradient's, a concat's
        // later pieces) follow it. A widened piece carries the batch where
        // its half value did: ViT's class token (f32) concatenated before
        // the patch embeddings (half) lost it, and with it every activation
        // after, which stayed f32.
        b.setInsertionPoint(op);
        for (OpOperand &operand : op->getOpOperands())
          if (isFloatTensor(operand.get(), half))
            operand.set(widen(operand.get(), op->getLoc()));
        // (A half result, the model's own, follows the f32 data too.)
        if (hasHalfResult(op) && failed(reinfer(op)))
          return failure();
      }
    } else if (auto broadcast = dyn_cast<nn::BroadcastOp>(op)) {
      // Only the data operand is read; `shape_of` gives the shape. Its
      // result takes the data's type (half, or f32 where the model's own
      // half op before it now computes in f32).
      if ((isFloatTensor(broadcast.getInput(), half) || hasHalfResult(op)) && failed(reinfer(op)))
        return failure();
    } else if (!isa<nn::ApplyGradientOp, nn::CastOp>(op)) {
      // Computes in f32: widen each half operand for this reader alone, so
      // the widening becomes part of the reader's kernel. (An optimizer
      // widens its gradient itself.)
      b.setInsertionPoint(op);
      DenseMap<Value, Value> widened; // one cast per value this op reads
      for (OpOperand &operand : op->getOpOperands()) {
        Value v = operand.get();
        if (!isFloatTensor(v, half))
          continue;
        Value &wide = widened[v];
        if (!wide)
          wide = widen(v, op->getLoc());
        operand.set(wide);
      }
      // A model's own op in half (nn.relu or nn.reduce_max on a tensor it
      // cast to f16) computes in f32 like the rest: its result type follows.
      if (isa<InferTypeOpInterface>(op) && hasHalfResult(op) && failed(reinfer(op)))
        return failure();
    }

    if (isa<nn::BroadcastOp>(op) ||
        ((nn::isFusibleElementwise(op) || isa<nn::ConstantOp>(op)) &&
         op->getNumResults() == 1 && llvm::all_of(op->getOperands(), isStretched)))
      stretched.insert(op->getResult(0));
    if (isa<nn::ReduceSumOp, nn::ReduceMeanOp, nn::ReduceMaxOp>(op) ||
        (nn::isFusibleElementwise(op) && op->getNumResults() == 1 &&
         llvm::any_of(op->getOperands(), [&](Value v) { return statistics.contains(v); }) &&
         llvm::all_of(op->getOperands(),
                      [&](Value v) { return statistics.contains(v) || isStretched(v); })))
      statistics.insert(op->getResult(0));

    // Storage: a batch-sized f32 value with several readers lives in memory
    // (they are in different kernels, or backward reads it much later);
    // keep it there in half, rounded where it is computed.
    std::optional<int64_t> batchDim = batchDimOf(op, batched);
    if (!batchDim)
      continue;
    Value result = op->getResult(0);
    batched[result] = *batchDim;
    if (!isFloatTensor(result, f32) || isa<nn::CastOp>(op) || stretched.contains(result) ||
        statistics.contains(result))
      continue;
    // A view read only by further views (the exporter's reshape before q, k
    // and v's slices) is read where its source is computed: fusion reads the
    // views in place, or computes the source again in each reader (ViT's q,
    // k and v each add their share of the packed projection's bias). A half
    // copy would be one more kernel writing it out. (A view read by other
    // ops is stored as any value: ConvNeXt's permutes.)
    if (nn::isViewOp(op) && llvm::all_of(result.getUses(), [](OpOperand &use) {
          return readsShapeOnly(use) || nn::isViewOp(use.getOwner());
        }))
      continue;
    llvm::SmallSetVector<Operation *, 4> readers;
    for (OpOperand &use : result.getUses())
      if (!readsShapeOnly(use))
        readers.insert(use.getOwner());
    if (readers.size() < 2)
      continue;
    Value copy = toHalf(result);
    result.replaceUsesWithIf(copy, [&](OpOperand &use) {
      return use.getOwner() != copy.getDefiningOp() && !readsShapeOnly(use);
    });
    ++stored;
    storedBytes += llvm::cast<RankedTensorType>(copy.getType()).getNumElements() * 2;
  }
  if (failed(sinkNarrowings(func)))
    return failure();
  func->setAttr("graphc.precision", StringAttr::get(&getContext(), precision));
  storage.push_back(NamedAttribute(func.getSymNameAttr(),
                                   DenseI64ArrayAttr::get(&getContext(), {stored, storedBytes})));
  return success();
}

/// Rounds before a concat that leads to a rounding and is computed in place
/// (or copies pieces computed by ops of their own):
/// `cast(concat(a, b), half)` becomes `concat(cast(a, half), cast(b, half))`,
/// through the reshapes, flattens and transposes between the concat and the
/// cast, and then up each piece's chain of such views to the op that
/// computes it. Every view and the concat must have no other reader, and a
/// piece that was widened from half is read as that half value again.
/// Copies move elements without computing, so every value keeps its bits;
/// the concat's buffer, which the pieces' kernels fill in place, then holds
/// half the bytes. ViT's packed q/k/v gradient, three pieces put into one
/// [3, L, N, E] buffer that the projection's backward reads in half, was
/// written and read in f32. (Other views stay after the rounding: fusion
/// reads a view of a kernel's input in place, but would copy a view of a
/// value it computes.)
LogicalResult MixedPrecisionPass::sinkNarrowings(func::FuncOp func) {
  auto isView = [](Operation *op) {
    return op && isa<nn::ReshapeOp, nn::FlattenOp, nn::TransposeOp>(op);
  };
  auto widenedFrom = [&](Value v) -> Value {
    auto wide = v.getDefiningOp<nn::CastOp>();
    return wide && isFloatTensor(wide.getInput(), half) ? wide.getInput() : Value();
  };
  // Whether its pieces are consecutive ranges of its result (every dim
  // before its dim of extent 1), which memory planning then computes in
  // place; or, for a concat that copies its pieces (and would copy half ones
  // as well), whether each is computed by an op of its own (or was half): a
  // piece that is only a view would become a kernel of its own to round
  // (ShuffleNet's channel split), where SqueezeNet's ReLUs round in the
  // kernels that compute them.
  auto worthIt = [&](nn::ConcatOp concat) {
    auto type = llvm::cast<RankedTensorType>(concat.getType());
    if (llvm::all_of(type.getShape().take_front(concat.getDim()),
                     [](int64_t d) { return d == 1; }))
      return true;
    return llvm::all_of(concat.getInputs(), [&](Value piece) {
      Operation *def = piece.getDefiningOp();
      return widenedFrom(piece) || (def && !nn::isViewOp(def) && !isa<nn::ConcatOp>(def));
    });
  };
  // The narrowings to move, each with whether it is past a concat already.
  SmallVector<std::pair<nn::CastOp, bool>> work;
  func.walk([&](nn::CastOp cast) {
    if (!isFloatTensor(cast.getInput(), f32) || !isFloatTensor(cast.getResult(), half))
      return;
    Operation *op = cast.getInput().getDefiningOp();
    while (isView(op) && op->getResult(0).hasOneUse())
      op = op->getOperand(0).getDefiningOp();
    if (op && isa<nn::ConcatOp>(op) && op->getResult(0).hasOneUse() &&
        worthIt(llvm::cast<nn::ConcatOp>(op)))
      work.push_back({cast, false});
  });
  OpBuilder b(&getContext());
  while (!work.empty()) {
    auto [cast, pastConcat] = work.pop_back_val();
    Operation *copy = cast.getInput().getDefiningOp();
    const bool concat = copy && isa<nn::ConcatOp>(copy);
    if (!(isView(copy) || (concat && !pastConcat)) || !copy->getResult(0).hasOneUse() ||
        !llvm::all_of(copy->getOperands(), [&](Value v) {
          return isFloatTensor(v, f32) && (v.hasOneUse() || widenedFrom(v));
        }))
      continue;
    b.setInsertionPoint(copy);
    for (OpOperand &operand : copy->getOpOperands()) {
      Value v = operand.get();
      if (Value narrow = widenedFrom(v)) {
        operand.set(narrow);
        if (v.use_empty())
          v.getDefiningOp()->erase();
        continue;
      }
      auto narrow = b.create<nn::CastOp>(cast.getLoc(), v, TypeAttr::get(half));
      operand.set(narrow);
      work.push_back({narrow, pastConcat || concat});
    }
    if (failed(reinfer(copy)))
      return failure();
    cast.getResult().replaceAllUsesWith(copy->getResult(0));
    cast.erase();
  }
  return success();
}

/// Loss scaling: the seed of backward becomes the scale S; every gradient is
/// checked for inf/NaN in one pass; the updates, moved after the check, read
/// the gradients times 1/S and are skipped on overflow; S follows
/// GradScaler's rule (dynamic) or stays (static).
LogicalResult MixedPrecisionPass::scaleLoss(ModuleOp module, func::FuncOp step) {
  Block &body = step.getBody().front();
  // One seed per micro-batch (graphc-autodiff's micro-batches), each 1/N.
  SmallVector<nn::ConstantOp> seeds;
  for (Operation &op : body)
    if (op.hasAttr(kLossSeedAttr))
      if (auto constant = dyn_cast<nn::ConstantOp>(op))
        seeds.push_back(constant);
  SmallVector<nn::ApplyGradientOp> updates(step.getOps<nn::ApplyGradientOp>());
  if (seeds.empty() || updates.empty())
    return step.emitError("graphc-mixed-precision: loss scaling needs @train_step as "
                          "graphc-autodiff writes it (the loss seed and nn.apply_gradient)");

  OpBuilder b(&getContext());
  Location loc = step.getLoc();
  auto scalarF32 = RankedTensorType::get({}, f32);
  auto scalarI64 = RankedTensorType::get({}, b.getI64Type());
  auto declare = [&](StringRef name, RankedTensorType type, nn::Initializer init,
                     std::optional<double> value) {
    if (module.lookupSymbol(name))
      return;
    // Last in the module: every other variable keeps its place, and with it
    // its initial value (graphrun seeds each from its index), so an AMP run
    // starts from the weights the FP32 run of the same seed starts from.
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToEnd(module.getBody());
    b.create<nn::StateOp>(module.getLoc(), name, type, init,
                          value ? b.getF64FloatAttr(*value) : FloatAttr());
  };
  declare(kLossScaleState, scalarF32, nn::Initializer::constant, scale);
  declare(kSkippedStepsState, scalarI64, nn::Initializer::zeros, std::nullopt);
  if (dynamic)
    declare(kGoodStepsState, scalarI64, nn::Initializer::zeros, std::nullopt);

  // d(loss) = S (S/N for each of N micro-batches, as PyTorch's
  // scaler.scale(loss / N)).
  b.setInsertionPoint(seeds.front());
  Value lossScale = b.create<nn::LoadOp>(loc, scalarF32, kLossScaleState);
  for (nn::ConstantOp seed : seeds) {
    auto value = llvm::dyn_cast<DenseElementsAttr>(seed.getValue());
    if (!value || !value.isSplat() || !value.getElementType().isF32())
      return seed.emitError("graphc-mixed-precision: the loss seed must be an f32 constant");
    const double fraction = value.getSplatValue<APFloat>().convertToDouble();
    Value scaled = lossScale;
    if (fraction != 1.0) {
      b.setInsertionPoint(seed);
      scaled = b.create<nn::MulOp>(loc, lossScale, scalarConstant(b, loc, f32, fraction));
    }
    seed.getResult().replaceAllUsesWith(scaled);
    seed.erase();
  }

  // One overflow check of every gradient, after the last of them.
  Operation *terminator = body.getTerminator();
  b.setInsertionPoint(terminator);
  SmallVector<Value> gradients;
  for (nn::ApplyGradientOp update : updates)
    gradients.push_back(update.getGradient());
  Value flags = b.create<nn::NonfiniteFlagsOp>(loc, gradients);
  Value found = b.create<nn::ReduceMaxOp>(loc, flags, ArrayRef<int64_t>{0},
                                          /*keep_dims=*/false);
  Value inverse = b.create<nn::DivOp>(loc, scalarConstant(b, loc, f32, 1.0), lossScale);
  for (nn::ApplyGradientOp update : updates) {
    update->moveBefore(terminator);
    update.getGradScaleMutable().assign(inverse);
    update.getSkipMutable().assign(found);
  }

  // The count of skipped steps, and the scale's next value.
  Value skipped = b.create<nn::LoadOp>(loc, scalarI64, kSkippedStepsState);
  b.create<nn::AssignOp>(
      loc, kSkippedStepsState,
      b.create<nn::AddOp>(loc, skipped, b.create<nn::CastOp>(loc, found, TypeAttr::get(b.getI64Type()))));
  if (dynamic) {
    // GradScaler: x0.5 on overflow (here never below 1), x2 after `window`
    // finite steps in a row; either resets the run.
    Value overflow = b.create<nn::CmpOp>(loc, nn::CmpPredicate::gt, found,
                                         scalarConstant(b, loc, f32, 0.0));
    Value good = b.create<nn::LoadOp>(loc, scalarI64, kGoodStepsState);
    Value zero = scalarConstant(b, loc, b.getI64Type(), 0.0);
    Value run = b.create<nn::AddOp>(loc, good, scalarConstant(b, loc, b.getI64Type(), 1.0));
    Value grow = b.create<nn::CmpOp>(loc, nn::CmpPredicate::ge, run,
                                     scalarConstant(b, loc, b.getI64Type(), double(window)));
    Value halved = b.create<nn::MaxOp>(
        loc, b.create<nn::MulOp>(loc, lossScale, scalarConstant(b, loc, f32, 0.5)),
        scalarConstant(b, loc, f32, 1.0));
    // Grows only to a finite scale (as PyTorch's _amp_update_scale_).
    Value twice = b.create<nn::MulOp>(loc, lossScale, scalarConstant(b, loc, f32, 2.0));
    Value doubled = b.create<nn::SelectOp>(
        loc,
        b.create<nn::CmpOp>(loc, nn::CmpPredicate::lt, twice,
                            scalarConstant(b, loc, f32, std::numeric_limits<double>::infinity())),
        twice, lossScale);
    Value next = b.create<nn::SelectOp>(
        loc, overflow, halved, b.create<nn::SelectOp>(loc, grow, doubled, lossScale));
    Value nextRun = b.create<nn::SelectOp>(
        loc, overflow, zero, b.create<nn::SelectOp>(loc, grow, zero, run));
    b.create<nn::AssignOp>(loc, kLossScaleState, next);
    b.create<nn::AssignOp>(loc, kGoodStepsState, nextRun);
  }
  return success();
}

} // namespace
} // namespace graphc
