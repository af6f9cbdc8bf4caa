//===- FuseAttention.cpp - matmul, softmax, matmul as nn.attention ---------===//
//
// Implements --graphc-fuse-attention (see Passes.td). The match starts at the
// second product and walks up its left operand through the softmax the
// importer writes, then through reshapes and additions of broadcast biases
// (a relative-position bias per head, Swin's mask per window) and a scale by
// a scalar (LeViT's, applied to q instead) to the first product; every intermediate must be read only by the next step, so the
// chain can go once nn.attention replaces its last value.
//
//===----------------------------------------------------------------------===//

#include "compiler/Transforms/Passes.h"

#include "dialects/nn/IR/NNOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace graphc {
#define GEN_PASS_DEF_FUSEATTENTION
#include "compiler/Transforms/Passes.h.inc"
} // namespace graphc

using namespace mlir;

namespace graphc {
namespace {

/// `v`'s defining op as OpT when `v` has exactly one use.
template <typename OpT>
OpT soleDef(Value v) {
  return v && v.hasOneUse() ? v.getDefiningOp<OpT>() : OpT();
}

/// Whether `op` reduces only the last dim of its operand, keeping it.
template <typename OpT>
bool reducesLastDim(OpT op) {
  auto type = llvm::cast<RankedTensorType>(op.getInput().getType());
  return op.getKeepDims() && op.getDims().size() == 1 &&
         op.getDims()[0] == type.getRank() - 1;
}

/// Whether `b` broadcasts `of` (a kept reduction) to `like` dim for dim.
bool broadcastsBack(nn::BroadcastOp b, Value of, Value like) {
  if (!b || b.getInput() != of || b.getShapeOf() != like)
    return false;
  ArrayRef<int64_t> dims = b.getDims();
  for (auto [i, d] : llvm::enumerate(dims))
    if (d != static_cast<int64_t>(i))
      return false;
  return static_cast<int64_t>(dims.size()) ==
         llvm::cast<RankedTensorType>(like.getType()).getRank();
}

/// Whether `v` is read only by `next`, or by broadcasts into `next` that
/// take only its shape (as an added bias takes the scores').
bool onlyFeeds(Value v, Operation *next) {
  return llvm::all_of(v.getUses(), [&](OpOperand &use) {
    if (use.getOwner() == next)
      return true;
    auto broadcast = dyn_cast<nn::BroadcastOp>(use.getOwner());
    return broadcast && use.getOperandNumber() == 1 && broadcast->hasOneUse() &&
           *broadcast->user_begin() == next;
  });
}

/// Through a reshape, if `v` is one with a single use (the reshape's
/// operand is checked by the caller).
Value throughReshape(Value v, SmallVectorImpl<Operation *> &chain) {
  if (auto reshape = soleDef<nn::ReshapeOp>(v)) {
    chain.push_back(reshape);
    return reshape.getInput();
  }
  return v;
}

/// A scale of the scores (LeViT's `q @ k^T * scale`, or `/ sqrt(d)`): a
/// multiply or divide by a rank-0 f32 tensor broadcast to them, which the
/// fused attention applies to q instead.
struct ScoreScale {
  Operation *op;             // the nn.mul or nn.div
  nn::BroadcastOp broadcast; // of `factor` to the scores
  Value factor, scores;
  bool divides;
};

std::optional<ScoreScale> scaleOf(Value v) {
  Operation *op = v.getDefiningOp();
  const bool divides = isa_and_nonnull<nn::DivOp>(op);
  if (!isa_and_nonnull<nn::MulOp>(op) && !divides)
    return std::nullopt;
  for (unsigned side = 0; side < (divides ? 1u : 2u); ++side) {
    Value scores = op->getOperand(side), other = op->getOperand(1 - side);
    auto broadcast = other.getDefiningOp<nn::BroadcastOp>();
    if (!broadcast || broadcast.getShapeOf() != scores || !broadcast.getDims().empty())
      continue;
    auto type = llvm::cast<RankedTensorType>(broadcast.getInput().getType());
    if (type.getRank() == 0 && type.getElementType().isF32())
      return ScoreScale{op, broadcast, broadcast.getInput(), scores, divides};
  }
  return std::nullopt;
}

/// A bias nn.attention can add to its scores: a broadcast whose input,
/// reshaped to [P, Lq, Lk], group g reads at slice (g / stride) % P.
struct ScoreBias {
  nn::BroadcastOp broadcast;
  SmallVector<int64_t> shape;
  int64_t stride;
};

/// `add`'s broadcast operand as a bias of scores [..., lq, lk]: the
/// broadcast's input, static f32, must span the last two dims whole and one
/// contiguous run of the leading (group) dims whole, and be 1 elsewhere.
std::optional<ScoreBias> biasOf(nn::AddOp add, int64_t lq, int64_t lk) {
  auto broadcast = add.getRhs().getDefiningOp<nn::BroadcastOp>();
  if (!broadcast)
    broadcast = add.getLhs().getDefiningOp<nn::BroadcastOp>();
  auto scores = llvm::cast<RankedTensorType>(add.getType());
  auto input = llvm::cast<RankedTensorType>(broadcast.getInput().getType());
  const int64_t rank = scores.getRank();
  if (!input.hasStaticShape() || !scores.hasStaticShape() || !input.getElementType().isF32() ||
      broadcast.getType() != scores || rank < 2 || scores.getDimSize(rank - 2) != lq ||
      scores.getDimSize(rank - 1) != lk)
    return std::nullopt;
  // The input's extents at the scores' dims (1 where it has none).
  SmallVector<int64_t> extents(rank, 1);
  for (auto [i, d] : llvm::enumerate(broadcast.getDims()))
    extents[d] = input.getDimSize(i);
  if (extents[rank - 2] != lq || extents[rank - 1] != lk)
    return std::nullopt;
  int64_t firstDim = -1, lastDim = -1;
  for (int64_t d = 0; d < rank - 2; ++d)
    if (extents[d] != 1) {
      if (firstDim < 0)
        firstDim = d;
      lastDim = d;
    }
  int64_t count = 1, stride = 1;
  for (int64_t d = 0; d < rank - 2; ++d) {
    if (firstDim >= 0 && d >= firstDim && d <= lastDim) {
      if (extents[d] != scores.getDimSize(d))
        return std::nullopt;  // broadcast inside the run
      count *= extents[d];
    } else if (firstDim >= 0 && d > lastDim) {
      stride *= scores.getDimSize(d);
    }
  }
  return ScoreBias{broadcast, {count, lq, lk}, stride};
}

/// The attention ending in `product` (p x v), rewritten; false if it is none.
bool fuse(nn::MatmulOp product) {
  auto vType = llvm::cast<RankedTensorType>(product.getRhs().getType());
  if (product.getTransposeA() || product.getTransposeB() || vType.getRank() != 3 ||
      !vType.getElementType().isF32())
    return false;
  SmallVector<Operation *> chain = {product};
  // p: div(e, broadcast(reduce_sum(e))), possibly reshaped to rank 3.
  Value p = throughReshape(product.getLhs(), chain);
  auto div = soleDef<nn::DivOp>(p);
  if (!div)
    return false;
  chain.push_back(div);
  Value e = div.getLhs();
  auto sumBroadcast = soleDef<nn::BroadcastOp>(div.getRhs());
  auto sum = sumBroadcast ? soleDef<nn::ReduceSumOp>(sumBroadcast.getInput()) : nn::ReduceSumOp();
  auto exp = e.getDefiningOp<nn::ExpOp>();
  if (!sum || !exp || sum.getInput() != e || !reducesLastDim(sum) ||
      !broadcastsBack(sumBroadcast, sum, e) || !llvm::hasNItems(e.getUses(), 3))
    return false;  // e: read by the sum, the broadcast (its shape) and the div
  chain.append({sumBroadcast, sum, exp});
  // e = exp(sub(x, broadcast(reduce_max(x)))).
  auto sub = soleDef<nn::SubOp>(exp.getInput());
  if (!sub)
    return false;
  Value x = sub.getLhs();
  auto maxBroadcast = soleDef<nn::BroadcastOp>(sub.getRhs());
  auto max = maxBroadcast ? soleDef<nn::ReduceMaxOp>(maxBroadcast.getInput()) : nn::ReduceMaxOp();
  if (!max || max.getInput() != x || !reducesLastDim(max) ||
      !broadcastsBack(maxBroadcast, max, x) || !llvm::hasNItems(x.getUses(), 3))
    return false;
  chain.append({sub, maxBroadcast, max});
  // x: q k^T, possibly reshaped and scaled, plus biases, possibly between
  // reshapes (x itself has three readers, everything above it one).
  SmallVector<nn::AddOp> adds;
  std::optional<ScoreScale> scale;
  Value scores = x;
  for (Operation *next = nullptr;;) {
    if (next && !onlyFeeds(scores, next))
      return false;
    if (auto reshape = scores.getDefiningOp<nn::ReshapeOp>()) {
      chain.push_back(reshape);
      next = reshape;
      scores = reshape.getInput();
    } else if (std::optional<ScoreScale> scaled = scaleOf(scores)) {
      if (scale)
        return false;  // scaled twice
      scale = scaled;
      chain.push_back(scale->op);
      if (scale->broadcast->hasOneUse())
        chain.push_back(scale->broadcast);
      next = scale->op;
      scores = scale->scores;
    } else if (auto add = scores.getDefiningOp<nn::AddOp>()) {
      if (scale)
        return false;  // a bias the scale scales too: (q k^T + b) * s
      const bool rhsIsBias = add.getRhs().getDefiningOp<nn::BroadcastOp>() != nullptr;
      if (!rhsIsBias && !add.getLhs().getDefiningOp<nn::BroadcastOp>())
        return false;
      chain.push_back(add);
      adds.push_back(add);
      next = add;
      scores = rhsIsBias ? add.getLhs() : add.getRhs();
    } else {
      break;
    }
  }
  auto first = scores.getDefiningOp<nn::MatmulOp>();
  if (!first || first.getTransposeA())
    return false;
  auto qType = llvm::cast<RankedTensorType>(first.getLhs().getType());
  auto pType = llvm::cast<RankedTensorType>(product.getLhs().getType());
  if (qType.getRank() != 3 || !qType.getElementType().isF32() ||
      pType != llvm::cast<RankedTensorType>(scores.getType()))
    return false;  // the reshapes must undo each other
  chain.push_back(first);
  SmallVector<ScoreBias> biases;
  for (nn::AddOp add : adds) {
    std::optional<ScoreBias> bias = biasOf(add, pType.getDimSize(1), pType.getDimSize(2));
    if (!bias)
      return false;
    biases.push_back(*bias);
    if (bias->broadcast->hasOneUse())
      chain.push_back(bias->broadcast);
  }

  OpBuilder b(product);
  SmallVector<Operation *> made;  // erased, users first, if the rewrite fails
  SmallVector<Value> biasValues;
  SmallVector<int64_t> strides;
  for (ScoreBias &bias : biases) {
    Value value = bias.broadcast.getInput();
    if (llvm::cast<RankedTensorType>(value.getType()).getShape() != ArrayRef(bias.shape)) {
      value = b.create<nn::ReshapeOp>(bias.broadcast.getLoc(), value,
                                      b.getDenseI64ArrayAttr(bias.shape));
      made.push_back(value.getDefiningOp());
    }
    biasValues.push_back(value);
    strides.push_back(bias.stride);
  }
  // (q k^T) s is (q s) k^T: q is the smaller.
  Value q = first.getLhs();
  if (scale) {
    auto factor = b.create<nn::BroadcastOp>(scale->op->getLoc(), scale->factor, q,
                                            b.getDenseI64ArrayAttr({}));
    Operation *scaled =
        scale->divides
            ? b.create<nn::DivOp>(scale->op->getLoc(), q, factor).getOperation()
            : b.create<nn::MulOp>(scale->op->getLoc(), q, factor).getOperation();
    made.append({factor, scaled});
    q = scaled->getResult(0);
  }
  auto attention = b.create<nn::AttentionOp>(
      product.getLoc(), q, first.getRhs(), product.getRhs(), biasValues,
      /*transpose_k=*/!first.getTransposeB(),
      biases.empty() ? DenseI64ArrayAttr() : b.getDenseI64ArrayAttr(strides));
  if (attention.getOutput().getType() != product.getType()) {
    attention.erase();
    for (Operation *op : llvm::reverse(made))
      op->erase();
    return false;
  }
  product.getResult().replaceAllUsesWith(attention.getOutput());
  // The chain, from the last op to the first, reads only itself.
  for (Operation *op : chain) {
    op->dropAllUses();
    op->erase();
  }
  return true;
}

struct FuseAttentionPass : impl::FuseAttentionBase<FuseAttentionPass> {
  void runOnOperation() override {
    SmallVector<nn::MatmulOp> products;
    getOperation().walk([&](nn::MatmulOp op) { products.push_back(op); });
    for (nn::MatmulOp product : products)
      fuse(product);
  }
};

} // namespace
} // namespace graphc
