//===- SimplifyReductions.cpp - sums that need no pass over memory ---------===//
//
// Implements --graphc-simplify-reductions. Autodiff of a decomposed batch norm
// differentiates the centring d = x - mean(x) with respect to the mean: the
// mean's gradient is -sum(dd) over the normalized dims, where dd, the
// gradient reaching d, is g * s + c * d + c * d (g: the gradient of the
// normalized output, s and c per-channel factors). Summing dd is one more
// reduction over the activation, and everything downstream of it (the input's
// gradient) becomes one more pass too: ResNet-50 paid two passes over every
// batch-norm activation in backward for it. Yet the sum is
// s * sum(g) + 2c * sum(d), sum(g) is the bias gradient backward computes
// anyway, and sum(d) is zero: the deviations from a mean sum to zero over the
// dims the mean was taken over. See Passes.td for the rule.
//
//===----------------------------------------------------------------------===//

#include "compiler/Transforms/Passes.h"

#include "dialects/nn/IR/NNOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace graphc {
#define GEN_PASS_DEF_SIMPLIFYREDUCTIONS
#include "compiler/Transforms/Passes.h.inc"
} // namespace graphc

using namespace mlir;

namespace graphc {
namespace {

/// Terms a sum is split into at most; a longer linear combination is left as
/// it is.
constexpr size_t kMaxTerms = 8;

/// One term of a linear combination: sign * product(factors) * atom, each
/// factor constant along the reduced dims.
struct Term {
  Value atom;
  SmallVector<Value> factors;
  bool negative = false;
};

bool sameSet(ArrayRef<int64_t> a, ArrayRef<int64_t> b) {
  SmallVector<int64_t> x(a), y(b);
  llvm::sort(x);
  llvm::sort(y);
  return x == y;
}

class Simplifier {
public:
  Simplifier(nn::ReduceSumOp sum) : sum(sum), dims(sum.getDims()) {}

  /// Whether `v` is the same along every reduced dim: a broadcast that maps
  /// no operand dim onto one, or a product of such values.
  bool invariant(Value v) const {
    Operation *def = v.getDefiningOp();
    if (auto broadcast = dyn_cast_or_null<nn::BroadcastOp>(def))
      return llvm::none_of(broadcast.getDims(),
                           [&](int64_t d) { return llvm::is_contained(dims, d); });
    if (auto mul = dyn_cast_or_null<nn::MulOp>(def))
      return invariant(mul.getLhs()) && invariant(mul.getRhs());
    return false;
  }

  /// `v` as a linear combination over the reduced dims: through add, sub and
  /// neg, and multiplications by invariant values. False when it has more
  /// than kMaxTerms terms.
  bool linearize(Value v, SmallVector<Term> &terms, Term current) const {
    // Known sums end the walk (a centred value is itself a subtraction, and a
    // value summed already is an atom, whatever computes it).
    if (sumsToZero(v) || existingSum(v)) {
      current.atom = v;
      terms.push_back(current);
      return terms.size() <= kMaxTerms;
    }
    Operation *def = v.getDefiningOp();
    if (auto add = dyn_cast_or_null<nn::AddOp>(def))
      return linearize(add.getLhs(), terms, current) && linearize(add.getRhs(), terms, current);
    if (auto sub = dyn_cast_or_null<nn::SubOp>(def)) {
      if (!linearize(sub.getLhs(), terms, current))
        return false;
      current.negative = !current.negative;
      return linearize(sub.getRhs(), terms, current);
    }
    if (auto neg = dyn_cast_or_null<nn::NegOp>(def)) {
      current.negative = !current.negative;
      return linearize(neg.getInput(), terms, current);
    }
    if (auto mul = dyn_cast_or_null<nn::MulOp>(def)) {
      for (auto [factor, rest] : {std::pair(mul.getRhs(), mul.getLhs()),
                                  std::pair(mul.getLhs(), mul.getRhs())})
        if (invariant(factor) && !invariant(rest)) {
          current.factors.push_back(factor);
          return linearize(rest, terms, current);
        }
    }
    current.atom = v;
    terms.push_back(current);
    return terms.size() <= kMaxTerms;
  }

  /// Whether `v` sums to zero over the reduced dims: x - mean(x), the mean
  /// over exactly these dims, broadcast back along them.
  bool sumsToZero(Value v) const {
    auto sub = v.getDefiningOp<nn::SubOp>();
    if (!sub)
      return false;
    auto broadcast = sub.getRhs().getDefiningOp<nn::BroadcastOp>();
    if (!broadcast)
      return false;
    auto mean = broadcast.getInput().getDefiningOp<nn::ReduceMeanOp>();
    if (!mean || mean.getInput() != sub.getLhs() || mean.getKeepDims() ||
        !sameSet(mean.getDims(), dims))
      return false;
    // The mean's dims, in order, are the kept ones, and the broadcast puts
    // each back where it came from.
    SmallVector<int64_t> kept;
    int64_t rank = llvm::cast<RankedTensorType>(v.getType()).getRank();
    for (int64_t d = 0; d < rank; ++d)
      if (!llvm::is_contained(dims, d))
        kept.push_back(d);
    return llvm::equal(broadcast.getDims(), kept);
  }

  /// Another reduce_sum of `atom` over the same dims, in the same form,
  /// before this one in its block.
  nn::ReduceSumOp existingSum(Value atom) const {
    for (Operation *user : atom.getUsers()) {
      auto other = dyn_cast<nn::ReduceSumOp>(user);
      if (other && other != sum && other->getBlock() == sum->getBlock() &&
          other->isBeforeInBlock(sum) && other.getKeepDims() == sum.getKeepDims() &&
          sameSet(other.getDims(), dims))
        return other;
    }
    return {};
  }

  /// The invariant `factor` at the reduction's result shape; `like` has that
  /// shape.
  Value reduced(OpBuilder &b, Location loc, Value factor, Value like) const {
    if (auto mul = factor.getDefiningOp<nn::MulOp>()) {
      // In this order (a call's arguments are evaluated in any).
      Value lhs = reduced(b, loc, mul.getLhs(), like);
      Value rhs = reduced(b, loc, mul.getRhs(), like);
      return b.create<nn::MulOp>(loc, lhs, rhs);
    }
    auto broadcast = factor.getDefiningOp<nn::BroadcastOp>();
    SmallVector<int64_t> mapped;
    for (int64_t d : broadcast.getDims()) {
      int64_t before = sum.getKeepDims()
                           ? 0
                           : llvm::count_if(dims, [&](int64_t r) { return r < d; });
      mapped.push_back(d - before);
    }
    Value input = broadcast.getInput();
    auto target = llvm::cast<RankedTensorType>(like.getType());
    bool identity = input.getType() == target &&
                    llvm::equal(mapped, llvm::seq<int64_t>(0, target.getRank()));
    if (identity)
      return input;
    return b.create<nn::BroadcastOp>(loc, input, like, b.getDenseI64ArrayAttr(mapped));
  }

  /// Replaces the sum when every term is zero or already summed; true if it
  /// did.
  bool run() {
    SmallVector<Term> terms;
    if (!linearize(sum.getInput(), terms, Term{}))
      return false;
    // Every term zero or summed already, and some term zero. (Without one
    // the rewrite would only re-associate sums already taken; a sum of a
    // value summed before stays its own op: fusion computes both in one pass
    // anyway, and a gradient must not become a view of another one, which
    // data-parallel would reduce twice.)
    SmallVector<std::pair<const Term *, nn::ReduceSumOp>> kept;
    bool zero = false;
    for (const Term &term : terms) {
      if (sumsToZero(term.atom)) {
        zero = true;
        continue;
      }
      nn::ReduceSumOp other = existingSum(term.atom);
      if (!other)
        return false;
      kept.push_back({&term, other});
    }
    if (!zero)
      return false;
    // One plain sum left would make this sum that value itself: two results
    // one buffer (two gradients one buffer, which data-parallel would reduce
    // twice). Fusion computes both sums in one pass anyway.
    if (kept.size() == 1 && kept.front().first->factors.empty() &&
        !kept.front().first->negative)
      return false;
    auto type = llvm::cast<RankedTensorType>(sum.getResult().getType());
    if (!type.hasStaticShape())
      return false;
    OpBuilder b(sum);
    Location loc = sum.getLoc();
    // Each term as (its signed factors) * sum: the sum is read last, so the
    // ops reading it end where it is read (data-parallel starts a gradient's
    // allreduce right after its last reader, and the factors' ops, fused with
    // that reader, would otherwise read it after the start).
    Value total;
    for (auto [term, other] : kept) {
      Value sumValue = other.getResult();
      Value coefficient;
      for (Value factor : term->factors) {
        Value f = reduced(b, loc, factor, sumValue);
        coefficient = coefficient ? b.create<nn::MulOp>(loc, coefficient, f).getResult() : f;
      }
      if (term->negative)
        coefficient = coefficient ? b.create<nn::NegOp>(loc, coefficient).getResult() : Value();
      Value value = coefficient ? b.create<nn::MulOp>(loc, coefficient, sumValue).getResult()
                    : term->negative ? b.create<nn::NegOp>(loc, sumValue).getResult()
                                     : sumValue;
      total = total ? b.create<nn::AddOp>(loc, total, value).getResult() : value;
    }
    if (!total)
      total = b.create<nn::ConstantOp>(
          loc, DenseElementsAttr::get(type, b.getZeroAttr(type.getElementType())));
    sum.getResult().replaceAllUsesWith(total);
    sum.erase();
    return true;
  }

private:
  mutable nn::ReduceSumOp sum;
  ArrayRef<int64_t> dims;
};

struct SimplifyReductionsPass : impl::SimplifyReductionsBase<SimplifyReductionsPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    int64_t simplified = 0;
    for (auto func : module.getOps<func::FuncOp>()) {
      SmallVector<nn::ReduceSumOp> sums;
      func.walk([&](nn::ReduceSumOp sum) { sums.push_back(sum); });
      bool changed = false;
      for (nn::ReduceSumOp sum : sums)
        if (llvm::isa<FloatType>(getElementTypeOrSelf(sum.getResult().getType())) &&
            Simplifier(sum).run()) {
          ++simplified;
          changed = true;
        }
      // What computed only the sums' operands.
      if (changed)
        for (Operation &op : llvm::make_early_inc_range(
                 llvm::reverse(func.getBody().front().getOperations())))
          if (isOpTriviallyDead(&op))
            op.erase();
    }
    module->setAttr(kSimplifiedReductionsAttr,
                    Builder(module.getContext()).getI64IntegerAttr(simplified));
  }
};

} // namespace
} // namespace graphc
