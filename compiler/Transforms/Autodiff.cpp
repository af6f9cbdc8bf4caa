//===- Autodiff.cpp - reverse-mode differentiation of @forward ------------===//
//
// Implements --graphc-autodiff: turns the (decomposed) forward function into
// `@train_step`, which computes the loss, then the gradient of every parameter,
// and hands each to the optimizer with nn.apply_gradient, in the order backward
// produces them (the order data-parallel buckets need).
//
//===----------------------------------------------------------------------===//

#include "compiler/Transforms/Passes.h"

#include "compiler/Transforms/BuildUtils.h"
#include "dialects/dist/IR/DistOps.h"
#include "dialects/nn/IR/NNOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/TypeSwitch.h"

#define DEBUG_TYPE "graphc-autodiff"

namespace graphc {
#define GEN_PASS_DEF_AUTODIFF
#include "compiler/Transforms/Passes.h.inc"
} // namespace graphc

using namespace mlir;

namespace graphc {
namespace {

RankedTensorType typeOf(Value v) { return llvm::cast<RankedTensorType>(v.getType()); }

/// Holds the adjoint of every value on a path from a parameter to the loss and
/// applies one gradient rule per op.
class Differentiator {
public:
  Differentiator(OpBuilder &b) : b(b) {}

  /// Marks the values that depend on a parameter: only they get adjoints, so
  /// nothing is spent on, e.g., the gradient of the images.
  void markActive(func::FuncOp func) {
    for (Operation &op : func.getBody().front()) {
      bool activeInput = false;
      if (auto load = llvm::dyn_cast<nn::LoadOp>(op))
        activeInput = static_cast<bool>(
            SymbolTable::lookupNearestSymbolFrom<nn::ParameterOp>(
                &op, load.getVariableAttr()));
      else if (auto broadcast = llvm::dyn_cast<nn::BroadcastOp>(op))
        // Its shape_of is only measured: a constant broadcast to an
        // activation's shape (GELU's 1/sqrt(2), attention's scale) is no
        // function of the parameters, and an adjoint for it would be computed
        // for nothing.
        activeInput = active.contains(broadcast.getInput());
      else
        activeInput = llvm::any_of(op.getOperands(),
                                   [&](Value v) { return active.contains(v); });
      if (!activeInput || llvm::isa<nn::CmpOp, nn::ArgmaxOp, nn::DropoutMaskOp>(op))
        continue;
      for (Value result : op.getResults())
        if (llvm::isa<FloatType>(typeOf(result).getElementType()))
          active.insert(result);
    }
  }

  /// d(step loss)/d(loss) = `value` (1, or 1/N for one of N micro-batches).
  void seed(Value loss, Location loc, double value) {
    adjoints[loss] = scalarConstant(b, loc, b.getF32Type(), value);
    adjoints[loss].getDefiningOp()->setAttr(kLossSeedAttr, b.getUnitAttr());
  }

  Value adjointOf(Value v) const { return adjoints.lookup(v); }

  /// Emits the gradient ops of `op` given its result's adjoint.
  LogicalResult backprop(Operation *op);

private:
  bool isActive(Value v) const { return active.contains(v); }

  /// Adds `grad()` to `v`'s adjoint when `v` is active; `grad` builds lazily so
  /// inactive operands cost nothing.
  template <typename Fn> void accumulate(Value v, Fn &&grad) {
    if (!isActive(v))
      return;
    Value g = grad();
    auto [it, inserted] = adjoints.try_emplace(v, g);
    if (!inserted)
      it->second = sum(g.getLoc(), it->second, g);
  }

  /// Whether `v` is zeros the rules built (a 0 broadcast, or a slice of one).
  static bool isZeros(Value v) {
    Operation *def = v.getDefiningOp();
    while (auto slice = llvm::dyn_cast_or_null<nn::SliceOp>(def))
      def = slice.getInput().getDefiningOp();
    auto broadcast = llvm::dyn_cast_or_null<nn::BroadcastOp>(def);
    DenseFPElementsAttr value;
    return broadcast && matchPattern(broadcast.getInput(), m_Constant(&value)) &&
           value.isSplat() && value.getSplatValue<APFloat>().isZero();
  }

  /// a + g. When both are the slice rule's zero-padded concats along one dim
  /// (the adjoint of a tensor several slices read, as the q, k and v of a
  /// packed projection), the concat of the pieces' sums instead, a piece of
  /// zeros adding nothing: concat(dq, dk, dv), not two adds of three
  /// mostly-zero tensors of the whole shape. The concats summed into it are
  /// dead then, and erased at the end.
  Value sum(Location loc, Value a, Value g) {
    auto ca = a.getDefiningOp<nn::ConcatOp>(), cg = g.getDefiningOp<nn::ConcatOp>();
    if (!ca || !cg || ca.getDim() != cg.getDim() || a.getType() != g.getType())
      return b.create<nn::AddOp>(loc, a, g);
    const int64_t dim = ca.getDim();
    auto extent = [&](Value v) { return typeOf(v).getDimSize(dim); };
    // The boundaries of both concats' pieces.
    SmallVector<int64_t> cuts = {0};
    for (nn::ConcatOp c : {ca, cg}) {
      int64_t at = 0;
      for (Value piece : c.getInputs())
        cuts.push_back(at += extent(piece));
    }
    llvm::sort(cuts);
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    // The part [from, to) of `c`: a whole piece, or a slice of zeros.
    auto part = [&](nn::ConcatOp c, int64_t from, int64_t to) -> Value {
      int64_t at = 0;
      for (Value piece : c.getInputs()) {
        int64_t end = at + extent(piece);
        if (from >= at && to <= end) {
          if (from == at && to == end)
            return piece;
          if (!isZeros(piece))
            return Value();
          return b.create<nn::SliceOp>(loc, piece, dim, from - at, to - from);
        }
        at = end;
      }
      return Value();
    };
    SmallVector<std::pair<Value, Value>> parts;
    for (size_t i = 0; i + 1 < cuts.size(); ++i) {
      Value x = part(ca, cuts[i], cuts[i + 1]), y = part(cg, cuts[i], cuts[i + 1]);
      if (!x || !y)
        return b.create<nn::AddOp>(loc, a, g);
      parts.push_back({x, y});
    }
    SmallVector<Value> sums;
    for (auto [x, y] : parts)
      sums.push_back(isZeros(y)   ? x
                     : isZeros(x) ? y
                                  : b.create<nn::AddOp>(loc, x, y).getResult());
    if (sums.size() == 1)
      return sums.front();
    return b.create<nn::ConcatOp>(loc, sums, dim);
  }

  Value zerosLike(Location loc, Value like) { return splatLike(b, loc, like, 0.0); }

  /// Broadcasts `g`, the adjoint of a reduction of `input` over `dims`, back
  /// to `input`'s shape.
  Value unreduce(Location loc, Value g, Value input, ArrayRef<int64_t> dims,
                 bool keepDims) {
    int64_t rank = typeOf(input).getRank();
    SmallVector<int64_t> kept;
    for (int64_t d = 0; d < rank; ++d)
      if (keepDims || !llvm::is_contained(dims, d))
        kept.push_back(d);
    return b.create<nn::BroadcastOp>(loc, g, input, b.getDenseI64ArrayAttr(kept));
  }

  /// The adjoint of a broadcast's operand: sum over the dims it was broadcast
  /// along, then drop them.
  Value unbroadcast(Location loc, Value g, nn::BroadcastOp op) {
    RankedTensorType in = typeOf(op.getInput()), out = typeOf(op.getResult());
    SmallVector<int64_t> summed;
    for (int64_t d = 0; d < out.getRank(); ++d) {
      auto pos = llvm::find(op.getDims(), d);
      if (pos == op.getDims().end() ||
          (in.getDimSize(pos - op.getDims().begin()) == 1 && out.getDimSize(d) != 1))
        summed.push_back(d);
    }
    if (!summed.empty())
      g = b.create<nn::ReduceSumOp>(loc, g, b.getDenseI64ArrayAttr(summed),
                                    b.getUnitAttr());
    if (typeOf(g) == in)
      return g;
    return b.create<nn::ReshapeOp>(loc, g, b.getDenseI64ArrayAttr(in.getShape()));
  }

  OpBuilder &b;
  llvm::DenseSet<Value> active;
  llvm::DenseMap<Value, Value> adjoints;
};

LogicalResult Differentiator::backprop(Operation *op) {
  if (auto attention = dyn_cast<nn::AttentionOp>(op)) {
    // Its second result (lse) is for the backward alone.
    if (!adjoints.count(attention.getOutput()))
      return success();
    auto grads = b.create<nn::AttentionBackwardOp>(
        attention.getLoc(), attention.getQ(), attention.getK(), attention.getV(),
        attention.getOutput(), attention.getLse(), adjoints.lookup(attention.getOutput()),
        attention.getBiases(), attention.getTransposeK(), attention.getBiasStridesAttr());
    accumulate(attention.getQ(), [&] { return grads.getGradQ(); });
    accumulate(attention.getK(), [&] { return grads.getGradK(); });
    accumulate(attention.getV(), [&] { return grads.getGradV(); });
    for (auto [bias, grad] : llvm::zip(attention.getBiases(), grads.getGradBiases()))
      accumulate(bias, [&] { return grad; });
    return success();
  }
  if (op->getNumResults() != 1 || !adjoints.count(op->getResult(0)))
    return success(); // not on a path to the loss
  Value dy = adjoints.lookup(op->getResult(0));
  Location loc = op->getLoc();
  auto mul = [&](Value a, Value c) -> Value { return b.create<nn::MulOp>(loc, a, c); };
  auto select = [&](Value c, Value t, Value f) -> Value {
    return b.create<nn::SelectOp>(loc, c, t, f);
  };

  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](nn::ReluOp relu) {
        accumulate(relu.getInput(), [&] {
          Value zero = zerosLike(loc, dy);
          Value positive = b.create<nn::CmpOp>(loc, nn::CmpPredicate::gt,
                                               relu.getInput(), zero);
          return select(positive, dy, zero);
        });
        return success();
      })
      .Case([&](nn::NegOp neg) {
        accumulate(neg.getInput(), [&] { return b.create<nn::NegOp>(loc, dy); });
        return success();
      })
      .Case([&](nn::ExpOp exp) {
        accumulate(exp.getInput(), [&] { return mul(dy, exp.getResult()); });
        return success();
      })
      .Case([&](nn::LogOp log) {
        accumulate(log.getInput(),
                   [&] { return b.create<nn::DivOp>(loc, dy, log.getInput()); });
        return success();
      })
      .Case([&](nn::RsqrtOp rsqrt) {
        // d/dx x^(-1/2) = -1/2 y^3.
        accumulate(rsqrt.getInput(), [&] {
          Value y = rsqrt.getResult();
          Value y3 = mul(mul(y, y), y);
          return mul(mul(dy, y3), splatLike(b, loc, y, -0.5));
        });
        return success();
      })
      .Case([&](nn::SigmoidOp sigmoid) {
        // d/dx sigmoid(x) = y (1 - y).
        accumulate(sigmoid.getInput(), [&] {
          Value y = sigmoid.getResult();
          Value oneMinusY = b.create<nn::SubOp>(loc, splatLike(b, loc, y, 1.0), y);
          return mul(dy, mul(y, oneMinusY));
        });
        return success();
      })
      .Case([&](nn::ErfOp erf) {
        // d/dx erf(x) = 2 / sqrt(pi) e^(-x^2).
        accumulate(erf.getInput(), [&] {
          Value x = erf.getInput();
          Value gauss = b.create<nn::ExpOp>(loc, b.create<nn::NegOp>(loc, mul(x, x)));
          return mul(dy, mul(gauss, splatLike(b, loc, x, 1.1283791670955126)));
        });
        return success();
      })
      .Case([&](nn::AddOp add) {
        accumulate(add.getLhs(), [&] { return dy; });
        accumulate(add.getRhs(), [&] { return dy; });
        return success();
      })
      .Case([&](nn::SubOp sub) {
        accumulate(sub.getLhs(), [&] { return dy; });
        accumulate(sub.getRhs(), [&] { return b.create<nn::NegOp>(loc, dy); });
        return success();
      })
      .Case([&](nn::MulOp m) {
        accumulate(m.getLhs(), [&] { return mul(dy, m.getRhs()); });
        accumulate(m.getRhs(), [&] { return mul(dy, m.getLhs()); });
        return success();
      })
      .Case([&](nn::DivOp div) {
        // y = a / b: da = dy / b, db = -dy * y / b.
        accumulate(div.getLhs(),
                   [&] { return b.create<nn::DivOp>(loc, dy, div.getRhs()); });
        accumulate(div.getRhs(), [&] {
          Value q = b.create<nn::DivOp>(loc, mul(dy, div.getResult()), div.getRhs());
          return b.create<nn::NegOp>(loc, q);
        });
        return success();
      })
      .Case([&](nn::MaxOp max) {
        // Ties send the gradient to the left operand, as PyTorch's maximum.
        Value zero = zerosLike(loc, dy);
        Value left = b.create<nn::CmpOp>(loc, nn::CmpPredicate::ge, max.getLhs(),
                                         max.getRhs());
        accumulate(max.getLhs(), [&] { return select(left, dy, zero); });
        accumulate(max.getRhs(), [&] { return select(left, zero, dy); });
        return success();
      })
      .Case([&](nn::SelectOp sel) {
        Value zero = zerosLike(loc, dy);
        accumulate(sel.getTrueValue(),
                   [&] { return select(sel.getCondition(), dy, zero); });
        accumulate(sel.getFalseValue(),
                   [&] { return select(sel.getCondition(), zero, dy); });
        return success();
      })
      .Case([&](nn::CastOp cast) {
        accumulate(cast.getInput(), [&] {
          return b.create<nn::CastOp>(
              loc, dy, TypeAttr::get(typeOf(cast.getInput()).getElementType()));
        });
        return success();
      })
      .Case([&](nn::BroadcastOp broadcast) {
        accumulate(broadcast.getInput(), [&] { return unbroadcast(loc, dy, broadcast); });
        return success();
      })
      .Case<nn::ReduceSumOp, nn::ReduceMeanOp>([&](auto reduce) {
        accumulate(reduce.getInput(), [&] {
          Value g = unreduce(loc, dy, reduce.getInput(), reduce.getDims(),
                             reduce.getKeepDims());
          if (!llvm::isa<nn::ReduceMeanOp>(reduce.getOperation()))
            return g;
          int64_t count = 1;
          for (int64_t d : reduce.getDims())
            count *= typeOf(reduce.getInput()).getDimSize(d);
          return mul(g, splatLike(b, loc, g, 1.0 / double(count)));
        });
        return success();
      })
      .Case([&](nn::ReduceMaxOp reduce) {
        // The elements equal to the max share its gradient evenly, as
        // PyTorch's amax does: with ties (common once values are rounded to
        // half) each gets dy / ties, where giving each dy multiplied the
        // gradient by the number of ties (an AMP run diverged on it).
        accumulate(reduce.getInput(), [&] {
          Value x = reduce.getInput();
          Value max = unreduce(loc, reduce.getResult(), x, reduce.getDims(),
                               reduce.getKeepDims());
          Value isMax = b.create<nn::CmpOp>(loc, nn::CmpPredicate::eq, x, max);
          Value hits = b.create<nn::CastOp>(loc, isMax, TypeAttr::get(typeOf(dy).getElementType()));
          Value ties = b.create<nn::ReduceSumOp>(loc, hits, reduce.getDimsAttr(),
                                                 reduce.getKeepDimsAttr());
          Value share = b.create<nn::DivOp>(loc, dy, ties);
          Value g = unreduce(loc, share, x, reduce.getDims(), reduce.getKeepDims());
          return select(isMax, g, zerosLike(loc, x));
        });
        return success();
      })
      .Case([&](nn::Conv2DOp conv) {
        RankedTensorType x = typeOf(conv.getInput()), w = typeOf(conv.getFilter());
        // Channels-last activations are [N, H, W, C]; the filter is OIHW, or
        // OHWI with filter_ohwi (its gradient then too).
        const bool nhwc = conv.getChannelsLast();
        auto spatial = [&](RankedTensorType t) {
          return nhwc ? t.getShape().slice(1, 2) : t.getShape().drop_front(2);
        };
        accumulate(conv.getInput(), [&] {
          return b.create<nn::Conv2DBackwardDataOp>(
              loc, dy, conv.getFilter(), b.getDenseI64ArrayAttr(spatial(x)),
              conv.getStridesAttr(), conv.getPaddingAttr(), conv.getDilationsAttr(),
              conv.getGroupsAttr(), conv.getChannelsLastAttr(), conv.getFilterOhwiAttr());
        });
        accumulate(conv.getFilter(), [&] {
          return b.create<nn::Conv2DBackwardFilterOp>(
              loc, conv.getInput(), dy,
              b.getDenseI64ArrayAttr(conv.getFilterOhwi() ? w.getShape().slice(1, 2)
                                                          : w.getShape().drop_front(2)),
              conv.getStridesAttr(), conv.getPaddingAttr(), conv.getDilationsAttr(),
              conv.getGroupsAttr(), conv.getChannelsLastAttr(), conv.getFilterOhwiAttr());
        });
        if (conv.getBias())
          accumulate(conv.getBias(), [&] {
            return b.create<nn::ReduceSumOp>(
                loc, dy,
                b.getDenseI64ArrayAttr(nhwc ? ArrayRef<int64_t>{0, 1, 2}
                                            : ArrayRef<int64_t>{0, 2, 3}),
                UnitAttr());
          });
        return success();
      })
      .Case([&](nn::MaxPool2DOp pool) {
        accumulate(pool.getInput(), [&] {
          return b.create<nn::MaxPool2DBackwardOp>(
              loc, pool.getInput(), dy, pool.getWindowAttr(), pool.getStridesAttr(),
              pool.getPaddingAttr(), pool.getChannelsLastAttr());
        });
        return success();
      })
      .Case([&](nn::AvgPool2DOp pool) {
        accumulate(pool.getInput(), [&] {
          ArrayRef<int64_t> x = typeOf(pool.getInput()).getShape();
          return b.create<nn::AvgPool2DBackwardOp>(
              loc, dy,
              b.getDenseI64ArrayAttr(pool.getChannelsLast() ? x.slice(1, 2)
                                                            : x.drop_front(2)),
              pool.getWindowAttr(), pool.getStridesAttr(), pool.getPaddingAttr(),
              pool.getExcludePaddingAttr(), pool.getChannelsLastAttr());
        });
        return success();
      })
      .Case([&](nn::TransposeOp transpose) {
        accumulate(transpose.getInput(), [&] {
          ArrayRef<int64_t> perm = transpose.getPermutation();
          SmallVector<int64_t> inverse(perm.size());
          for (auto [i, p] : llvm::enumerate(perm))
            inverse[p] = static_cast<int64_t>(i);
          return b.create<nn::TransposeOp>(loc, dy, b.getDenseI64ArrayAttr(inverse));
        });
        return success();
      })
      .Case([&](nn::ConcatOp concat) {
        // Each operand's adjoint is its window of dy.
        int64_t dim = concat.getDim(), start = 0;
        for (Value input : concat.getInputs()) {
          int64_t size = typeOf(input).getDimSize(dim);
          accumulate(input, [&]() -> Value {
            return b.create<nn::SliceOp>(loc, dy, dim, start, size);
          });
          start += size;
        }
        return success();
      })
      .Case([&](nn::SliceOp slice) {
        // dy written into zeros of the input's shape: a concat of dy with the
        // zeros before and after its window.
        accumulate(slice.getInput(), [&]() -> Value {
          int64_t dim = slice.getDim(), start = slice.getStart(), size = slice.getSize();
          int64_t extent = typeOf(slice.getInput()).getDimSize(dim);
          Value zeros;
          auto zerosOf = [&](int64_t from, int64_t count) -> Value {
            if (count == size)
              return zerosLike(loc, dy);
            if (!zeros)
              zeros = zerosLike(loc, slice.getInput());
            return b.create<nn::SliceOp>(loc, zeros, dim, from, count);
          };
          SmallVector<Value> parts;
          if (start > 0)
            parts.push_back(zerosOf(0, start));
          parts.push_back(dy);
          if (start + size < extent)
            parts.push_back(zerosOf(start + size, extent - start - size));
          if (parts.size() == 1)
            return dy;
          return b.create<nn::ConcatOp>(loc, parts, dim).getResult();
        });
        return success();
      })
      .Case([&](nn::GatherOp gather) -> LogicalResult {
        // The table's adjoint sums dy's rows by the index lists of each
        // table row, built here from the constant indices (in index order,
        // so the sums are deterministic).
        DenseIntElementsAttr indices;
        if (!matchPattern(gather.getIndices(), m_Constant(&indices)))
          return gather.emitError("the indices of 'nn.gather' must be an nn.constant "
                                  "to differentiate it");
        const int64_t rows = typeOf(gather.getTable()).getDimSize(0);
        SmallVector<int32_t> offsets(rows + 1, 0), sources(indices.getNumElements());
        for (const APInt &index : indices)
          ++offsets[index.getSExtValue() + 1];
        for (int64_t r = 0; r < rows; ++r)
          offsets[r + 1] += offsets[r];
        SmallVector<int32_t> next(offsets.begin(), offsets.end() - 1);
        for (auto [i, index] : llvm::enumerate(indices))
          sources[next[index.getSExtValue()]++] = static_cast<int32_t>(i);
        accumulate(gather.getTable(), [&]() -> Value {
          auto vector = [&](ArrayRef<int32_t> values) -> Value {
            auto type = RankedTensorType::get({static_cast<int64_t>(values.size())},
                                              b.getI32Type());
            return b.create<nn::ConstantOp>(loc, DenseIntElementsAttr::get(type, values));
          };
          return b.create<nn::ScatterAddOp>(loc, dy, vector(offsets), vector(sources));
        });
        return success();
      })
      .Case([&](nn::GlobalAvgPoolOp pool) {
        accumulate(pool.getInput(), [&] {
          RankedTensorType x = typeOf(pool.getInput());
          Value spread = b.create<nn::BroadcastOp>(loc, dy, pool.getInput(),
                                                   b.getDenseI64ArrayAttr({0, 1}));
          double area = double(x.getDimSize(2) * x.getDimSize(3));
          return mul(spread, splatLike(b, loc, spread, 1.0 / area));
        });
        return success();
      })
      .Case<nn::ReshapeOp, nn::FlattenOp>([&](auto reshape) {
        accumulate(reshape.getInput(), [&] {
          return b.create<nn::ReshapeOp>(
              loc, dy, b.getDenseI64ArrayAttr(typeOf(reshape.getInput()).getShape()));
        });
        return success();
      })
      .Case([&](nn::LinearOp linear) {
        // y = x W^T + b: dx = dy W, dW = dy^T x, db = sum_N dy.
        accumulate(linear.getInput(), [&] {
          return b.create<nn::MatmulOp>(loc, dy, linear.getWeight(), UnitAttr(),
                                        UnitAttr());
        });
        accumulate(linear.getWeight(), [&] {
          return b.create<nn::MatmulOp>(loc, dy, linear.getInput(), b.getUnitAttr(),
                                        UnitAttr());
        });
        if (linear.getBias())
          accumulate(linear.getBias(), [&] {
            return b.create<nn::ReduceSumOp>(loc, dy, b.getDenseI64ArrayAttr({0}),
                                             UnitAttr());
          });
        return success();
      })
      .Case([&](nn::MatmulOp mm) {
        // C = op(A) op(B); the four transpose cases, each as one matmul.
        Value a = mm.getLhs(), c = mm.getRhs();
        bool ta = mm.getTransposeA(), tb = mm.getTransposeB();
        auto mat = [&](Value l, Value r, bool tl, bool tr) -> Value {
          return b.create<nn::MatmulOp>(loc, l, r, tl ? b.getUnitAttr() : UnitAttr(),
                                        tr ? b.getUnitAttr() : UnitAttr());
        };
        accumulate(a, [&] {
          if (!ta)
            return mat(dy, c, false, !tb);
          return tb ? mat(c, dy, true, true) : mat(c, dy, false, true);
        });
        accumulate(c, [&] {
          if (!tb)
            return ta ? mat(a, dy, false, false) : mat(a, dy, true, false);
          return ta ? mat(dy, a, true, true) : mat(dy, a, true, false);
        });
        return success();
      })
      .Case([&](nn::SoftmaxCrossEntropyOp loss) {
        accumulate(loss.getLogits(), [&] {
          return b.create<nn::SoftmaxCrossEntropyBackwardOp>(
              loc, dy, loss.getLogits(), loss.getLabels(), loss.getLabelSmoothingAttr());
        });
        return success();
      })
      .Case([&](dist::AllreduceOp reduce) {
        // Ranks' losses summed: d/dx_r of (sum or mean over ranks of x) is the
        // sum or mean of every rank's adjoint.
        accumulate(reduce.getInput(), [&] {
          return b.create<dist::AllreduceOp>(loc, dy, reduce.getReductionAttr());
        });
        return success();
      })
      .Case<nn::BatchNormOp, nn::DropoutOp>([&](Operation *training) {
        return training->emitError("'")
               << training->getName()
               << "' must be decomposed before autodiff "
                  "(graphc-decompose-training-ops)";
      })
      .Case<nn::LoadOp, nn::ConstantOp, nn::CmpOp, nn::ArgmaxOp, nn::DropoutMaskOp>(
          [](Operation *) { return success(); })
      .Default([](Operation *other) {
        return other->emitError("no gradient rule for '") << other->getName() << "'";
      });
}

/// Algorithm: 1) check that shapes are static; 2) with N micro-batches, run
/// @forward's body on N slices of an N times larger batch (splitMicroBatches)
/// and return the mean of their losses; 3) mark the values that depend on a
/// parameter; 4) per micro-batch, right after its forward: seed d(loss) = 1/N
/// and walk it backwards, applying each op's rule and summing adjoints at
/// fan-out (and each parameter's gradient over the micro-batches); 5) when the
/// last micro-batch's walk reaches a parameter's first nn.load, its gradient
/// is complete: emit nn.apply_gradient; 6) a parameter with no gradient is an
/// error naming it; 7) rename to @train_step.
struct AutodiffPass : impl::AutodiffBase<AutodiffPass> {
  using AutodiffBase::AutodiffBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    FailureOr<func::FuncOp> found = lookupModelFunction(module, "forward");
    if (failed(found))
      return signalPassFailure();
    func::FuncOp forward = *found;
    Block &body = forward.getBody().front();
    for (Operation &op : body)
      for (Value result : op.getResults())
        if (!typeOf(result).hasStaticShape()) {
          op.emitError("autodiff needs static shapes; run graphc-set-batch-size first");
          return signalPassFailure();
        }
    if (microBatches < 1) {
      module.emitError("graphc-autodiff: micro-batches must be positive, got ")
          << static_cast<int64_t>(microBatches);
      return signalPassFailure();
    }

    // The forward ops of each micro-batch, and its loss.
    Operation *terminator = body.getTerminator();
    SmallVector<SmallVector<Operation *>> segments;
    SmallVector<Value> losses;
    if (microBatches == 1) {
      SmallVector<Operation *> &ops = segments.emplace_back();
      for (Operation &op : body.without_terminator())
        ops.push_back(&op);
      losses.push_back(terminator->getOperand(0));
    } else {
      FailureOr<MicroBatches> split = splitMicroBatches(forward, microBatches);
      if (failed(split))
        return signalPassFailure();
      segments = std::move(split->ops);
      OpBuilder b(terminator);
      Location loc = terminator->getLoc();
      Value total;
      for (ArrayRef<Value> results : split->results) {
        losses.push_back(results[0]);
        if (Operation *loss = results[0].getDefiningOp())
          loss->setAttr(kMicroBatchLossAttr, b.getUnitAttr());
        total = total ? b.create<nn::AddOp>(loc, total, results[0]).getResult() : results[0];
      }
      Type element = typeOf(total).getElementType();
      total = b.create<nn::MulOp>(
          loc, total, scalarConstant(b, loc, element, 1.0 / static_cast<double>(microBatches)));
      terminator->setOperand(0, total);
      module->setAttr(kMicroBatchesAttr, b.getI64IntegerAttr(microBatches));
    }

    // A parameter's gradient is complete when the backward walk of the last
    // micro-batch reaches its first load there in program order.
    llvm::StringMap<Operation *> firstLoad;
    for (Operation *op : segments.back())
      if (auto load = llvm::dyn_cast<nn::LoadOp>(op))
        firstLoad.try_emplace(load.getVariable(), op);

    OpBuilder b(terminator);
    Differentiator diff(b);
    diff.markActive(forward);
    const double seed = 1.0 / static_cast<double>(microBatches);
    llvm::StringMap<Value> gradients;
    llvm::StringMap<size_t> summedIn; // the micro-batch gradients[name] was summed in
    for (auto [index, segment] : llvm::enumerate(segments)) {
      const bool last = index + 1 == segments.size();
      // Backward right after this micro-batch's forward, before the next one's.
      if (!last)
        b.setInsertionPoint(segments[index + 1].front());
      else
        b.setInsertionPoint(terminator);
      diff.seed(losses[index], terminator->getLoc(), seed);
      for (Operation *op : llvm::reverse(segment)) {
        if (failed(diff.backprop(op)))
          return signalPassFailure();
        auto load = llvm::dyn_cast<nn::LoadOp>(op);
        if (!load || !diff.adjointOf(load.getResult()))
          continue;
        Value &sum = gradients[load.getVariable()];
        if (!sum) {
          sum = diff.adjointOf(load.getResult());
        } else {
          auto add = b.create<nn::AddOp>(load.getLoc(), sum, diff.adjointOf(load));
          if (summedIn.lookup(load.getVariable()) != index)
            add->setAttr(kGradientSumAttr, b.getUnitAttr());
          sum = add.getResult();
        }
        summedIn[load.getVariable()] = index;
        if (last && firstLoad.lookup(load.getVariable()) == op)
          b.create<nn::ApplyGradientOp>(load.getLoc(), load.getVariable(), sum,
                                        /*grad_scale=*/Value(), /*skip=*/Value());
      }
    }

    // What no gradient reads (the concats sum merged into others).
    for (Operation &op : llvm::make_early_inc_range(llvm::reverse(body.getOperations())))
      if (isOpTriviallyDead(&op))
        op.erase();

    for (auto param : module.getOps<nn::ParameterOp>())
      if (!gradients.count(param.getSymName())) {
        param.emitError("parameter @")
            << param.getSymName()
            << " does not reach the loss, so it gets no gradient";
        return signalPassFailure();
      }
    forward.setSymName("train_step");
  }
};

} // namespace
} // namespace graphc
