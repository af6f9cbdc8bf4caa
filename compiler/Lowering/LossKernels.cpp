//===- LossKernels.cpp - softmax cross-entropy and its gradient -------------===//
//
// The loss and its gradient: a row per parallel iteration on the CPU, a
// block per row on CUDA (rows reduced across the block).
//
//===----------------------------------------------------------------------===//

#include "compiler/Lowering/KernelBuilders.h"

#include "dialects/nn/IR/NNOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "compiler/Lowering/KernelLoops.h"
#include "compiler/Lowering/ReductionNest.h"

using namespace mlir;

namespace graphc::kernel {

/// Whether `label` is a class in [0, classes): an invalid one makes its row's
/// loss and gradient NaN, never a silently wrong value.
Value isValidLabel(OpBuilder &b, Location loc, Value label, int64_t classes) {
  Type type = label.getType();
  return b.create<arith::AndIOp>(
      loc,
      b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::sge, label, constInt(b, loc, type, 0)),
      b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::slt, label,
                              constInt(b, loc, type, classes)));
}

/// On CUDA, inside a launch of `block` threads per row: this thread's share
/// of `step` folded over row `row` of `logits` (classes t, t + block, ...)
/// from `init`.
Value stridedOverRow(OpBuilder &b, Location loc, Value logits, Value row, Value thread,
                     int64_t classes, int64_t block, Value init,
                     function_ref<Value(OpBuilder &, Location, Value, Value)> step) {
  return b
      .create<scf::ForOp>(loc, thread, constIndex(b, loc, classes), constIndex(b, loc, block),
                          ValueRange{init},
                          [&](OpBuilder &fb, Location floc, Value c, ValueRange acc) {
                            Value x = fb.create<memref::LoadOp>(floc, logits, ValueRange{row, c});
                            fb.create<scf::YieldOp>(floc, step(fb, floc, x, acc[0]));
                          })
      .getResult(0);
}

/// The row's max and sum of exp(x - max), combined across the block (in
/// shared buffers 0 and 1); every thread gets both.
std::pair<Value, Value> blockRowStats(OpBuilder &b, Location loc, Value logits, Value row,
                                      Value thread, int64_t classes, int64_t block,
                                      ArrayRef<BlockArgument> buffers) {
  Type f32 = b.getF32Type();
  auto maxOf = [](OpBuilder &cb, Location cloc, Value x, Value y) {
    return cb.create<arith::MaximumFOp>(cloc, x, y).getResult();
  };
  auto add = [](OpBuilder &cb, Location cloc, Value x, Value y) {
    return cb.create<arith::AddFOp>(cloc, x, y).getResult();
  };
  Value max = blockAllReduce(
      b, loc, thread, block, buffers[0],
      stridedOverRow(b, loc, logits, row, thread, classes, block,
                     constFloat(b, loc, f32, -INFINITY), maxOf),
      maxOf);
  Value sumExp = blockAllReduce(
      b, loc, thread, block, buffers[1],
      stridedOverRow(b, loc, logits, row, thread, classes, block, constFloat(b, loc, f32, 0.0),
                     [&](OpBuilder &fb, Location floc, Value x, Value acc) {
                       Value e = fb.create<math::ExpOp>(floc, fb.create<arith::SubFOp>(floc, x, max));
                       return add(fb, floc, acc, e);
                     }),
      add);
  return {max, sumExp};
}

/// Per row of logits [N, C]: max, log-sum-exp, sum of logits, the label's logit,
/// and whether the label is a valid class (an invalid one makes the row NaN:
/// never a silently wrong loss).
struct RowStats {
  Value max, sumExp, sum, labelLogit, valid;
};

RowStats buildRowStats(OpBuilder &b, Location loc, Value logits, Value labels,
                       Value row, int64_t classes) {
  Type f32 = b.getF32Type();
  Value c0 = constIndex(b, loc, 0), c1 = constIndex(b, loc, 1);
  Value cC = constIndex(b, loc, classes);
  auto rowLoop = [&](ValueRange init,
                     llvm::function_ref<SmallVector<Value>(OpBuilder &, Location,
                                                           Value, Value, ValueRange)>
                         step) {
    return b.create<scf::ForOp>(
        loc, c0, cC, c1, init,
        [&](OpBuilder &fb, Location floc, Value c, ValueRange acc) {
          Value x = fb.create<memref::LoadOp>(floc, logits, ValueRange{row, c});
          fb.create<scf::YieldOp>(floc, step(fb, floc, c, x, acc));
        });
  };
  RowStats s;
  s.max = rowLoop({constFloat(b, loc, f32, -INFINITY)},
                  [](OpBuilder &fb, Location floc, Value, Value x, ValueRange acc) {
                    return SmallVector<Value>{fb.create<arith::MaximumFOp>(floc, acc[0], x)};
                  }).getResult(0);
  auto sums = rowLoop({constFloat(b, loc, f32, 0.0), constFloat(b, loc, f32, 0.0)},
                      [&](OpBuilder &fb, Location floc, Value, Value x, ValueRange acc) {
                        Value e = fb.create<math::ExpOp>(
                            floc, fb.create<arith::SubFOp>(floc, x, s.max));
                        return SmallVector<Value>{
                            fb.create<arith::AddFOp>(floc, acc[0], e),
                            fb.create<arith::AddFOp>(floc, acc[1], x)};
                      });
  s.sumExp = sums.getResult(0);
  s.sum = sums.getResult(1);
  Value label = b.create<memref::LoadOp>(loc, labels, row);
  s.valid = isValidLabel(b, loc, label, classes);
  Value index = b.create<arith::IndexCastOp>(loc, b.getIndexType(), label);
  index = b.create<arith::SelectOp>(loc, s.valid, index, c0);
  s.labelLogit = b.create<memref::LoadOp>(loc, logits, ValueRange{row, index});
  return s;
}

/// mean over rows of `lse - (1 - ls) * x[label] - ls / C * sum(x)`.
KernelSignature emitSoftmaxCrossEntropy(nn::SoftmaxCrossEntropyOp op,
                                        ModuleOp kernels, StringRef name) {
  OpBuilder b(op->getContext());
  Location loc = op.getLoc();
  auto logitsType = llvm::cast<RankedTensorType>(op.getLogits().getType());
  int64_t rows = logitsType.getDimSize(0), classes = logitsType.getDimSize(1);
  func::FuncOp func = createKernelFunc(
      b, kernels, name, loc,
      {naturalType(logitsType), naturalType(op.getLabels().getType()),
       naturalType(op.getType())});
  Value logits = func.getArgument(0), labels = func.getArgument(1);
  Type f32 = b.getF32Type();
  double smoothing = op.getLabelSmoothing().convertToDouble();
  // One row's loss: lse - (1 - ls) * x[label] - ls / C * sum(x), NaN for an
  // invalid label.
  auto rowLoss = [&](OpBuilder &fb, Location floc, Value row) {
    RowStats s = buildRowStats(fb, floc, logits, labels, row, classes);
    Value lse = fb.create<arith::AddFOp>(floc, s.max, fb.create<math::LogOp>(floc, s.sumExp));
    Value loss = fb.create<arith::SubFOp>(
        floc, lse,
        fb.create<arith::MulFOp>(floc, constFloat(fb, floc, f32, 1.0 - smoothing), s.labelLogit));
    loss = fb.create<arith::SubFOp>(
        floc, loss,
        fb.create<arith::MulFOp>(floc, constFloat(fb, floc, f32, smoothing / classes), s.sum));
    return fb.create<arith::SelectOp>(floc, s.valid, loss, constFloat(fb, floc, f32, NAN))
        .getResult();
  };
  // The CPU: rows in order, one core. CUDA: row-parallel, a block of threads
  // each taking every B-th row, their float64 sums combined as a tree.
  auto cpu = [&](OpBuilder &nb) {
    Value c0 = constIndex(nb, loc, 0), c1 = constIndex(nb, loc, 1);
    auto loop = nb.create<scf::ForOp>(
        loc, c0, constIndex(nb, loc, rows), c1, ValueRange{constFloat(nb, loc, f32, 0.0)},
        [&](OpBuilder &fb, Location floc, Value row, ValueRange acc) {
          fb.create<scf::YieldOp>(
              floc, ValueRange{fb.create<arith::AddFOp>(floc, acc[0], rowLoss(fb, floc, row))});
        });
    Value mean = nb.create<arith::MulFOp>(loc, loop.getResult(0),
                                          constFloat(nb, loc, f32, 1.0 / rows));
    nb.create<memref::StoreOp>(loc, mean, func.getArgument(2), ValueRange{});
  };
  // CUDA: a block per row (its threads striding over the classes: the row's
  // max, sum of exponentials and sum combined across the block), thread 0
  // writing the row's loss to a device global; a second launch, one block,
  // sums the rows as a tree. A small loss (fewer logits than kGpuMinThreads),
  // or a batch beyond the global's capacity, is one block striding over the
  // rows instead.
  auto cuda = [&](OpBuilder &nb) {
    Type f64 = nb.getF64Type();
    auto add = [](OpBuilder &cb, Location cloc, Value x, Value y) {
      return cb.create<arith::AddFOp>(cloc, x, y).getResult();
    };
    auto finishMean = [&](OpBuilder &fb, Location floc, Value, ValueRange totals) {
      Value mean =
          fb.create<arith::MulFOp>(floc, totals[0], constFloat(fb, floc, f64, 1.0 / rows));
      fb.create<memref::StoreOp>(floc, fb.create<arith::TruncFOp>(floc, f32, mean),
                                 func.getArgument(2), ValueRange{});
    };
    if (rows > kGpuPartialsCapacity || rows * classes < kGpuMinThreads) {
      const int64_t block = gpuBlockSize(1, rows);
      buildBlockReduction(
          nb, loc, /*grid=*/1, block, TypeRange{f64},
          [&](OpBuilder &tb, Location tloc, Value, Value thread) {
            auto loop = tb.create<scf::ForOp>(
                tloc, thread, constIndex(tb, tloc, rows), constIndex(tb, tloc, block),
                ValueRange{constFloat(tb, tloc, f64, 0.0)},
                [&](OpBuilder &fb, Location floc, Value row, ValueRange acc) {
                  Value loss = fb.create<arith::ExtFOp>(floc, f64, rowLoss(fb, floc, row));
                  fb.create<scf::YieldOp>(floc, ValueRange{add(fb, floc, acc[0], loss)});
                });
            return SmallVector<Value>{loop.getResult(0)};
          },
          [&](OpBuilder &cb, Location cloc, unsigned, Value x, Value y) {
            return add(cb, cloc, x, y);
          },
          finishMean);
      return;
    }
    const std::string partials = declarePartials(nb, loc, f64);
    const int64_t block = gpuBlockSize(rows, classes);
    buildBlockLaunch(
        nb, loc, rows, block, TypeRange{f32, f32, f32},
        [&](OpBuilder &lb, Location ll, Value row, Value thread,
            ArrayRef<BlockArgument> buffers) {
          auto [max, sumExp] =
              blockRowStats(lb, ll, logits, row, thread, classes, block, buffers);
          Value sum = blockAllReduce(
              lb, ll, thread, block, buffers[2],
              stridedOverRow(lb, ll, logits, row, thread, classes, block,
                             constFloat(lb, ll, f32, 0.0), add),
              add);
          Value zero = constIndex(lb, ll, 0);
          Value first = lb.create<arith::CmpIOp>(ll, arith::CmpIPredicate::eq, thread, zero);
          lb.create<scf::IfOp>(ll, first, [&](OpBuilder &ib, Location il) {
            Value label = ib.create<memref::LoadOp>(il, labels, row);
            Value valid = isValidLabel(ib, il, label, classes);
            Value index = ib.create<arith::SelectOp>(
                il, valid, ib.create<arith::IndexCastOp>(il, ib.getIndexType(), label), zero);
            Value labelLogit = ib.create<memref::LoadOp>(il, logits, ValueRange{row, index});
            Value lse = ib.create<arith::AddFOp>(il, max, ib.create<math::LogOp>(il, sumExp));
            Value loss = ib.create<arith::SubFOp>(
                il, lse,
                ib.create<arith::MulFOp>(il, constFloat(ib, il, f32, 1.0 - smoothing), labelLogit));
            loss = ib.create<arith::SubFOp>(
                il, loss,
                ib.create<arith::MulFOp>(il, constFloat(ib, il, f32, smoothing / classes), sum));
            loss = ib.create<arith::SelectOp>(il, valid, loss, constFloat(ib, il, f32, NAN));
            ib.create<memref::StoreOp>(il, ib.create<arith::ExtFOp>(il, f64, loss),
                                       ib.create<memref::GetGlobalOp>(
                                           il, MemRefType::get({kGpuPartialsCapacity}, f64),
                                           partials),
                                       row);
            ib.create<scf::YieldOp>(il);
          });
        });
    // The mean over the rows, in the same tree order every run.
    int64_t meanBlock = 32;
    while (meanBlock < std::min<int64_t>(rows, kGpuMaxBlock))
      meanBlock *= 2;
    buildBlockReduction(
        nb, loc, /*grid=*/1, meanBlock, TypeRange{f64},
        [&](OpBuilder &tb, Location tloc, Value, Value thread) {
          Value global = tb.create<memref::GetGlobalOp>(
              tloc, MemRefType::get({kGpuPartialsCapacity}, f64), partials);
          auto loop = tb.create<scf::ForOp>(
              tloc, thread, constIndex(tb, tloc, rows), constIndex(tb, tloc, meanBlock),
              ValueRange{constFloat(tb, tloc, f64, 0.0)},
              [&](OpBuilder &fb, Location floc, Value row, ValueRange acc) {
                Value loss = fb.create<memref::LoadOp>(floc, global, row);
                fb.create<scf::YieldOp>(floc, ValueRange{add(fb, floc, acc[0], loss)});
              });
          return SmallVector<Value>{loop.getResult(0)};
        },
        [&](OpBuilder &cb, Location cloc, unsigned, Value x, Value y) {
          return add(cb, cloc, x, y);
        },
        finishMean);
  };
  buildPerTarget(b, loc, cpu, cuda);
  b.create<func::ReturnOp>(loc);
  return {{op.getLogits(), op.getLabels()}, false};
}

/// `grad_loss * (softmax(x) - target) / N`, one scf.parallel iteration per row.
KernelSignature emitSoftmaxCrossEntropyBackward(nn::SoftmaxCrossEntropyBackwardOp op,
                                                ModuleOp kernels, StringRef name) {
  OpBuilder b(op->getContext());
  Location loc = op.getLoc();
  auto logitsType = llvm::cast<RankedTensorType>(op.getLogits().getType());
  int64_t rows = logitsType.getDimSize(0), classes = logitsType.getDimSize(1);
  func::FuncOp func = createKernelFunc(
      b, kernels, name, loc,
      {naturalType(op.getGradLoss().getType()), naturalType(logitsType),
       naturalType(op.getLabels().getType()), naturalType(op.getType())});
  Value gradLoss = func.getArgument(0), logits = func.getArgument(1);
  Value labels = func.getArgument(2), out = func.getArgument(3);
  Type f32 = b.getF32Type();
  double smoothing = op.getLabelSmoothing().convertToDouble();
  // dx[row, c] for one class, given the row's max, 1 / sum(exp), label and
  // scale (NaN for an invalid label).
  auto writeClass = [&](OpBuilder &fb, Location floc, Value row, Value c, Value max,
                        Value invSum, Value label, Value scale) {
    Value x = fb.create<memref::LoadOp>(floc, logits, ValueRange{row, c});
    Value p = fb.create<arith::MulFOp>(
        floc, fb.create<math::ExpOp>(floc, fb.create<arith::SubFOp>(floc, x, max)), invSum);
    Value isLabel = fb.create<arith::CmpIOp>(floc, arith::CmpIPredicate::eq, c, label);
    Value target = fb.create<arith::SelectOp>(
        floc, isLabel, constFloat(fb, floc, f32, 1.0 - smoothing + smoothing / classes),
        constFloat(fb, floc, f32, smoothing / classes));
    Value grad = fb.create<arith::MulFOp>(floc, fb.create<arith::SubFOp>(floc, p, target), scale);
    fb.create<memref::StoreOp>(floc, grad, out, ValueRange{row, c});
  };
  auto rowScale = [&](OpBuilder &pb, Location ploc, Value valid) {
    Value scale = pb.create<arith::MulFOp>(
        ploc, pb.create<memref::LoadOp>(ploc, gradLoss, ValueRange{}),
        constFloat(pb, ploc, f32, 1.0 / rows));
    return pb.create<arith::SelectOp>(ploc, valid, scale, constFloat(pb, ploc, f32, NAN))
        .getResult();
  };
  // The CPU: one parallel iteration per row. CUDA: a block per row, its
  // threads striding over the classes (coalesced), the row's max and sum of
  // exponentials combined across the block.
  auto cpu = [&](OpBuilder &nb) {
    Value c0 = constIndex(nb, loc, 0), c1 = constIndex(nb, loc, 1);
    nb.create<scf::ParallelOp>(
        loc, ValueRange{c0}, ValueRange{constIndex(nb, loc, rows)}, ValueRange{c1},
        [&](OpBuilder &pb, Location ploc, ValueRange ivs) {
          Value row = ivs[0];
          RowStats s = buildRowStats(pb, ploc, logits, labels, row, classes);
          Value scale = rowScale(pb, ploc, s.valid);
          Value invSum = pb.create<arith::DivFOp>(ploc, constFloat(pb, ploc, f32, 1.0), s.sumExp);
          Value label = pb.create<arith::IndexCastOp>(
              ploc, pb.getIndexType(), pb.create<memref::LoadOp>(ploc, labels, row));
          pb.create<scf::ForOp>(ploc, c0, constIndex(pb, ploc, classes), c1, std::nullopt,
                                [&](OpBuilder &fb, Location floc, Value c, ValueRange) {
                                  writeClass(fb, floc, row, c, s.max, invSum, label, scale);
                                  fb.create<scf::YieldOp>(floc);
                                });
        });
  };
  auto cuda = [&](OpBuilder &nb) {
    const int64_t block = gpuBlockSize(rows, classes);
    buildBlockLaunch(
        nb, loc, rows, block, TypeRange{f32, f32},
        [&](OpBuilder &lb, Location ll, Value row, Value thread,
            ArrayRef<BlockArgument> buffers) {
          auto [max, sumExp] =
              blockRowStats(lb, ll, logits, row, thread, classes, block, buffers);
          Value rawLabel = lb.create<memref::LoadOp>(ll, labels, row);
          Value valid = isValidLabel(lb, ll, rawLabel, classes);
          Value scale = rowScale(lb, ll, valid);
          Value invSum = lb.create<arith::DivFOp>(ll, constFloat(lb, ll, f32, 1.0), sumExp);
          Value label = lb.create<arith::IndexCastOp>(ll, lb.getIndexType(), rawLabel);
          lb.create<scf::ForOp>(ll, thread, constIndex(lb, ll, classes), constIndex(lb, ll, block),
                                std::nullopt,
                                [&](OpBuilder &fb, Location floc, Value c, ValueRange) {
                                  writeClass(fb, floc, row, c, max, invSum, label, scale);
                                  fb.create<scf::YieldOp>(floc);
                                });
        });
  };
  buildPerTarget(b, loc, cpu, cuda);
  b.create<func::ReturnOp>(loc);
  return {{op.getGradLoss(), op.getLogits(), op.getLabels()}, false};
}

} // namespace graphc::kernel
