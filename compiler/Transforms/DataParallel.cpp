//===- DataParallel.cpp - bucketed, overlapped gradient allreduce ---------===//
//
// Implements --graphc-data-parallel: every gradient of @train_step is averaged
// across the ranks of the job before the optimizer reads it, in buckets whose
// allreduces start while backward is still running. See Passes.td for the
// algorithm.
//
//===----------------------------------------------------------------------===//

#include "compiler/Transforms/Passes.h"

#include "compiler/Transforms/BuildUtils.h"
#include "compiler/Transforms/GradCompression.h"
#include "dialects/dist/IR/DistOps.h"
#include "dialects/nn/IR/NNOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/Support/Debug.h"

#define DEBUG_TYPE "graphc-data-parallel"

namespace graphc {
#define GEN_PASS_DEF_DATAPARALLEL
#include "compiler/Transforms/Passes.h.inc"
} // namespace graphc

using namespace mlir;

namespace graphc {
namespace {

/// The plan command's operand limit (plan.allreduce_start takes at most 1024).
constexpr size_t kMaxBucketTensors = 1024;

/// Every value that shares `value`'s memory once bufferized: reshapes and
/// flattens are views (graphc-lower-to-plan), so the chain up to the value
/// they view and every view of that, transitively.
SmallVector<Value> viewsOf(Value value) {
  Value root = value;
  while (Operation *producer = root.getDefiningOp()) {
    if (!llvm::isa<nn::ReshapeOp, nn::FlattenOp>(producer))
      break;
    root = producer->getOperand(0);
  }
  SmallVector<Value> views = {root};
  for (size_t i = 0; i < views.size(); ++i)
    for (Operation *user : views[i].getUsers())
      if (llvm::isa<nn::ReshapeOp, nn::FlattenOp>(user))
        views.push_back(user->getResult(0));
  return views;
}

int64_t bytesOf(Value tensor) {
  auto type = llvm::cast<RankedTensorType>(tensor.getType());
  return type.getNumElements() * llvm::divideCeil(type.getElementTypeBitWidth(), 8);
}

struct DataParallelPass : impl::DataParallelBase<DataParallelPass> {
  using DataParallelBase::DataParallelBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (!(bucketMb > 0.0) || !(firstBucketMb > 0.0)) {
      module.emitError("graphc-data-parallel: bucket-mb and first-bucket-mb must be > 0");
      return signalPassFailure();
    }
    if (!allreduceDtype.empty() && allreduceDtype != "fp32" && allreduceDtype != "fp16") {
      module.emitError("graphc-data-parallel: unknown allreduce-dtype '")
          << allreduceDtype << "'; expected fp32 or fp16";
      return signalPassFailure();
    }
    std::string compressionError;
    GradCompression compression = parseGradCompression(gradCompression, compressionError);
    if (!compressionError.empty()) {
      module.emitError("graphc-data-parallel: grad-compression: ") << compressionError;
      return signalPassFailure();
    }
    const bool halfWire =
        allreduceDtype == "fp16" || compression.kind == GradCompression::Kind::Fp16;
    auto step = module.lookupSymbol<func::FuncOp>("train_step");
    if (!step || step.isExternal()) {
      module.emitError("graphc-data-parallel needs @train_step (run graphc-autodiff first)");
      return signalPassFailure();
    }
    Block &body = step.getBody().front();
    if (!body.getOps<dist::AllreduceStartOp>().empty()) {
      step.emitError("graphc-data-parallel: @train_step already has allreduces");
      return signalPassFailure();
    }

    // 1) The gradients, each once, in the order backward completes them. A
    // gradient that is a constant (a parameter the loss does not depend on
    // through the batch) is the same on every rank.
    SmallVector<nn::ApplyGradientOp> updates(body.getOps<nn::ApplyGradientOp>());
    if (updates.empty()) {
      step.emitError("graphc-data-parallel: @train_step applies no gradient");
      return signalPassFailure();
    }
    llvm::SetVector<Value> gradients;
    for (nn::ApplyGradientOp update : updates) {
      Value g = update.getGradient();
      Operation *producer = g.getDefiningOp();
      if (producer && llvm::isa<nn::ConstantOp>(producer))
        continue;
      // Anything else that is not computed in the step's body would be left
      // out silently, and the ranks' parameters would drift apart.
      if (!producer || producer->getBlock() != &body || update->getBlock() != &body) {
        update.emitOpError("graphc-data-parallel: the gradient of @")
            << update.getParameter()
            << " is not computed in @train_step's body, so it cannot be averaged across ranks";
        return signalPassFailure();
      }
      for (Value view : viewsOf(g))
        for (Operation *user : view.getUsers())
          if (user == body.getTerminator()) {
            user->emitOpError("graphc-data-parallel: @train_step returns the gradient of @")
                << update.getParameter()
                << " (or a view of it), whose memory the allreduce reduces in place";
            return signalPassFailure();
          }
      gradients.insert(g);
    }
    SmallVector<Value> order(gradients.begin(), gradients.end());
    llvm::stable_sort(order, [](Value a, Value b) {
      Operation *pa = a.getDefiningOp(), *pb = b.getDefiningOp();
      if (pa == pb)
        return llvm::cast<OpResult>(a).getResultNumber() <
               llvm::cast<OpResult>(b).getResultNumber();
      return pa->isBeforeInBlock(pb);
    });

    // 2) Buckets, closed when the next gradient would overflow the cap (a
    // gradient larger than the cap gets a bucket of its own).
    SmallVector<SmallVector<Value>> buckets;
    int64_t bucketBytes = 0;
    for (Value g : order) {
      // The cap of the bucket being filled: the first one's is smaller.
      double capMb = buckets.size() == 1 ? firstBucketMb : bucketMb;
      int64_t cap = static_cast<int64_t>(capMb * 1024.0 * 1024.0);
      if (buckets.empty() || bucketBytes + bytesOf(g) > cap ||
          buckets.back().size() == kMaxBucketTensors) {
        buckets.emplace_back();
        bucketBytes = 0;
      }
      buckets.back().push_back(g);
      bucketBytes += bytesOf(g);
    }

    // 3) The updates move to the end of the step, bucket by bucket, so each
    // bucket's wait comes as late as the step allows.
    DenseMap<Value, unsigned> bucketOf;
    for (auto [index, bucket] : llvm::enumerate(buckets))
      for (Value g : bucket)
        bucketOf[g] = index;
    auto bucketOfUpdate = [&](nn::ApplyGradientOp update) {
      // Updates from unreduced (constant) gradients go last.
      auto it = bucketOf.find(update.getGradient());
      return it == bucketOf.end() ? static_cast<unsigned>(buckets.size()) : it->second;
    };
    llvm::stable_sort(updates, [&](nn::ApplyGradientOp x, nn::ApplyGradientOp y) {
      return bucketOfUpdate(x) < bucketOfUpdate(y);
    });
    Operation *terminator = body.getTerminator();
    for (nn::ApplyGradientOp update : updates)
      update->moveBefore(terminator);

    // 4) Starts, right after each bucket's last gradient is computed, and
    // after any other reader of its gradients (one that is not an update or
    // the overflow check reads the rank's own value, which is in flight once
    // the collective starts).
    auto readsReduced = [](Operation *user) {
      return llvm::isa<nn::ApplyGradientOp, nn::NonfiniteFlagsOp>(user);
    };
    OpBuilder b(&getContext());
    Type f16 = b.getF16Type();
    SmallVector<dist::AllreduceStartOp> starts;
    Operation *previousAnchor = nullptr;
    // Without overlap every bucket starts where the first reduced value is
    // needed, after all of backward.
    Operation *firstConsumer = nullptr;
    if (!overlap)
      for (Value g : order)
        for (Operation *user : g.getUsers())
          if (Operation *top = body.findAncestorOpInBlock(*user);
              top && readsReduced(user) && (!firstConsumer || top->isBeforeInBlock(firstConsumer)))
            firstConsumer = top;
    for (auto [index, bucket] : llvm::enumerate(buckets)) {
      Operation *anchor = bucket.back().getDefiningOp();
      if (firstConsumer && firstConsumer->getPrevNode() &&
          anchor->isBeforeInBlock(firstConsumer->getPrevNode()))
        anchor = firstConsumer->getPrevNode();
      // Readers of the gradient's memory, through any view of it, that are
      // not the updates (views themselves only alias it).
      for (Value g : bucket)
        for (Value view : viewsOf(g))
          for (Operation *user : view.getUsers()) {
            if ((view == g && readsReduced(user)) ||
                llvm::isa<nn::ReshapeOp, nn::FlattenOp>(user))
              continue;
            Operation *top = body.findAncestorOpInBlock(*user);
            if (top && top != body.getTerminator() && anchor->isBeforeInBlock(top))
              anchor = top;
          }
      // Starts are made in bucket order and never move back past another.
      if (!starts.empty() && anchor->isBeforeInBlock(starts.back()))
        anchor = starts.back();
      // Buckets ending at one op follow each other in bucket order.
      if (previousAnchor == anchor && !starts.empty())
        b.setInsertionPointAfter(starts.back());
      else
        b.setInsertionPointAfter(anchor);
      previousAnchor = anchor;
      bool compress = halfWire && llvm::any_of(bucket, [](Value g) {
        return llvm::cast<RankedTensorType>(g.getType()).getElementType().isF32();
      });
      Location loc = b.getFusedLoc(llvm::to_vector(
          llvm::map_range(bucket, [](Value g) { return g.getLoc(); })));
      starts.push_back(b.create<dist::AllreduceStartOp>(
          loc, ValueRange(bucket).getTypes(), ValueRange(bucket),
          dist::ReductionAttr::get(&getContext(), dist::Reduction::mean),
          b.getI64IntegerAttr(index),
          compress ? TypeAttr::get(f16) : TypeAttr(), UnitAttr(), IntegerAttr()));
    }

    // 5) Each wait goes before the first update or overflow check that reads
    // one of the bucket's gradients; those reads take the reduced values.
    for (auto [start, bucket] : llvm::zip(starts, buckets)) {
      Operation *first = nullptr;
      for (Value g : bucket)
        for (Operation *user : g.getUsers())
          if (Operation *top = body.findAncestorOpInBlock(*user);
              top && readsReduced(user) && (!first || top->isBeforeInBlock(first)))
            first = top;
      if (first && first->isBeforeInBlock(start)) {
        first->emitOpError("reads a reduced gradient before its allreduce can start "
                           "(another op reads the rank's own value later)");
        return signalPassFailure();
      }
      b.setInsertionPoint(first ? first : terminator);
      auto wait = b.create<dist::AllreduceWaitOp>(start.getLoc(), start.getResultTypes(),
                                                  start.getResults());
      for (auto [g, reduced] : llvm::zip(bucket, wait.getResults()))
        g.replaceUsesWithIf(reduced,
                            [&](OpOperand &use) { return readsReduced(use.getOwner()); });
      LLVM_DEBUG(llvm::dbgs() << "bucket " << start.getBucket() << ": " << bucket.size()
                              << " gradients\n");
    }

    // 6) Dropout masks of the step draw from this rank's place in the global
    // batch: element i of rank r is element r * size + i of the global mask,
    // size being the rank's whole mask (a micro-batch's times the number of
    // micro-batches, whose masks graphc-autodiff already offset within it).
    int64_t microBatches = 1;
    if (auto count = module->getAttrOfType<IntegerAttr>(kMicroBatchesAttr))
      microBatches = count.getInt();
    SmallVector<nn::DropoutMaskOp> masks(body.getOps<nn::DropoutMaskOp>());
    if (!masks.empty()) {
      auto scalar = RankedTensorType::get({}, b.getI64Type());
      if (!module.lookupSymbol(kRankState)) {
        b.setInsertionPointToEnd(module.getBody());
        b.create<nn::StateOp>(module.getLoc(), kRankState, scalar, nn::Initializer::zeros,
                              /*init_value=*/nullptr);
      }
      b.setInsertionPointToStart(&body);
      Value rank = b.create<nn::LoadOp>(step.getLoc(), scalar, kRankState);
      for (nn::DropoutMaskOp mask : masks) {
        b.setInsertionPoint(mask);
        int64_t size =
            llvm::cast<RankedTensorType>(mask.getType()).getNumElements() * microBatches;
        Value offset = b.create<nn::MulOp>(mask.getLoc(), rank,
                                           scalarConstant(b, mask.getLoc(), b.getI64Type(),
                                                          static_cast<double>(size)));
        if (Value within = mask.getOffset())
          offset = b.create<nn::AddOp>(mask.getLoc(), offset, within);
        mask.getOffsetMutable().assign(offset);
      }
    }

    // For graphc's summary: per bucket, its bytes.
    SmallVector<int64_t> sizes;
    for (auto &bucket : buckets) {
      int64_t total = 0;
      for (Value g : bucket)
        total += bytesOf(g);
      sizes.push_back(total);
    }
    module->setAttr(kAllreduceBucketsAttr, b.getDenseI64ArrayAttr(sizes));

    // 7) PowerSGD, on the buckets built above.
    if (compression.kind == GradCompression::Kind::PowerSgd &&
        failed(applyPowerSgd(module, step, compression.rank)))
      return signalPassFailure();
    // 8) Or deep gradient compression.
    if (compression.kind == GradCompression::Kind::TopK) {
      if (!(momentum >= 0.0 && momentum < 1.0) || !(weightDecay >= 0.0)) {
        module.emitError("graphc-data-parallel: grad-compression=topk needs momentum in [0, 1) "
                         "and weight-decay >= 0");
        return signalPassFailure();
      }
      if (failed(applyTopk(module, step, compression, momentum, weightDecay)))
        return signalPassFailure();
    }
  }
};

} // namespace
} // namespace graphc
