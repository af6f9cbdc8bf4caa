//===- FuseAttention.cpp - matmul, softmax, matmul as nn.attention ---------===//
//
// Implements --graphc-fuse-attention (see Passes.td). The match starts at the
// second product and walks up its left operand through the softmax the
// importer writes; every intermediate must be read only by the next step, so
// the chain can go once nn.attention replaces its last value.
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

/// Through a reshape, if `v` is one with a single use (the reshape's
/// operand is checked by the caller).
Value throughReshape(Value v, SmallVectorImpl<Operation *> &chain) {
  if (auto reshape = soleDef<nn::ReshapeOp>(v)) {
    chain.push_back(reshape);
    return reshape.getInput();
  }
  return v;
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
  // x: q k^T, possibly reshaped to rank 4 (x itself has three readers).
  Value scores = x;
  if (auto reshape = x.getDefiningOp<nn::ReshapeOp>()) {
    chain.push_back(reshape);
    scores = reshape.getInput();
  }
  auto first = scores.getDefiningOp<nn::MatmulOp>();
  if (!first || (scores != x && !scores.hasOneUse()) || first.getTransposeA())
    return false;
  auto qType = llvm::cast<RankedTensorType>(first.getLhs().getType());
  auto pType = llvm::cast<RankedTensorType>(product.getLhs().getType());
  if (qType.getRank() != 3 || !qType.getElementType().isF32() ||
      pType != llvm::cast<RankedTensorType>(scores.getType()))
    return false;  // the reshapes must undo each other
  chain.push_back(first);

  OpBuilder b(product);
  auto attention = b.create<nn::AttentionOp>(
      product.getLoc(), first.getLhs(), first.getRhs(), product.getRhs(),
      /*transpose_k=*/!first.getTransposeB());
  if (attention.getOutput().getType() != product.getType()) {
    attention.erase();
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
