//===- OptimizerKernels.cpp - optimizer updates and loss scaling ------------===//
//
// The learning-rate schedule, the optimizer updates (SGD, momentum, LARS,
// Adam) with gradient unscaling and skip-on-overflow, the multi-tensor
// updates of many parameters in one kernel, the overflow flags, and the
// orthonormalization of PowerSGD's factors.
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
#include "llvm/ADT/TypeSwitch.h"

#include <functional>
#include "compiler/Lowering/KernelLoops.h"
#include "compiler/Lowering/ReductionNest.h"

using namespace mlir;

namespace graphc::kernel {

/// The schedule of nn.lr_schedule in f64, stored as f32.
KernelSignature emitLrSchedule(nn::LrScheduleOp op, ModuleOp kernels, StringRef name) {
  OpBuilder b(op->getContext());
  Location loc = op.getLoc();
  func::FuncOp func = createKernelFunc(
      b, kernels, name, loc,
      {naturalType(op.getStep().getType()), naturalType(op.getType())});
  Type f64 = b.getF64Type();
  auto c = [&](double v) { return constFloat(b, loc, f64, v); };
  Value stepInt = b.create<memref::LoadOp>(loc, func.getArgument(0), ValueRange{});
  Value step = b.create<arith::SIToFPOp>(loc, f64, stepInt);
  double base = op.getBaseLr().convertToDouble();
  int64_t warmup = op.getWarmupSteps();
  Value t = b.create<arith::SubFOp>(loc, step, c(static_cast<double>(warmup)));
  Value lr;
  switch (op.getDecay()) {
  case nn::LrDecay::constant:
    lr = c(base);
    break;
  case nn::LrDecay::cosine: {
    double total = static_cast<double>(std::max<int64_t>(op.getTotalSteps() - warmup, 1));
    double final = op.getFinalLr().convertToDouble();
    Value clamped = b.create<arith::MinimumFOp>(
        loc, b.create<arith::MaximumFOp>(loc, t, c(0.0)), c(total));
    Value angle = b.create<arith::MulFOp>(loc, clamped, c(M_PI / total));
    Value cosine = b.create<math::CosOp>(loc, angle);
    Value factor = b.create<arith::MulFOp>(
        loc, b.create<arith::AddFOp>(loc, cosine, c(1.0)), c(0.5));
    lr = b.create<arith::AddFOp>(loc, c(final),
                                 b.create<arith::MulFOp>(loc, factor, c(base - final)));
    break;
  }
  case nn::LrDecay::step: {
    Value periods = b.create<math::FloorOp>(
        loc, b.create<arith::DivFOp>(
                 loc, b.create<arith::MaximumFOp>(loc, t, c(0.0)),
                 c(static_cast<double>(op.getStepSize()))));
    lr = b.create<arith::MulFOp>(
        loc, c(base),
        b.create<math::PowFOp>(loc, c(op.getGamma().convertToDouble()), periods));
    break;
  }
  }
  if (warmup > 0) {
    Value ramp = b.create<arith::MulFOp>(
        loc, b.create<arith::AddFOp>(loc, step, c(1.0)), c(base / warmup));
    Value warming = b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::OLT, step,
                                            c(static_cast<double>(warmup)));
    lr = b.create<arith::SelectOp>(loc, warming, ramp, lr);
  }
  Value lr32 = b.create<arith::TruncFOp>(loc, b.getF32Type(), lr);
  b.create<memref::StoreOp>(loc, lr32, func.getArgument(1), ValueRange{});
  b.create<func::ReturnOp>(loc);
  return {{op.getStep()}, false};
}

/// An optimizer op's loss-scaling operands (graphc-mixed-precision): the
/// gradient's factor and the skip flag, or null. Both are optional operands
/// after every other one, in that order.
struct GradScaling {
  Value scale, skip;
  unsigned scaleIndex = 0, skipIndex = 0;
};
GradScaling gradScalingOf(Operation *op) {
  GradScaling g;
  llvm::TypeSwitch<Operation *>(op)
      .Case<nn::SgdOp, nn::SgdMomentumOp, nn::LarsOp, nn::AdamOp>([&](auto o) {
        g.scale = o.getGradScale();
        g.skip = o.getSkip();
      });
  unsigned n = op->getNumOperands();
  g.skipIndex = n - 1;
  g.scaleIndex = n - 1 - (g.skip ? 1 : 0);
  return g;
}

/// The gradient as the rule reads it: widened to the parameter's type and
/// multiplied by the loss-scaling factor, if any.
Value scaledGradient(OpBuilder &b, Location l, Value grad, Type elem, Value factor) {
  grad = castScalar(b, l, grad, elem);
  return factor ? b.create<arith::MulFOp>(l, grad, factor).getResult() : grad;
}

/// With a skip flag that is not 0, every result is the operand it replaces
/// (result 0 the parameter, result k the operand k + 1: its state).
SmallVector<Value> skippable(OpBuilder &b, Location l, ValueRange s,
                             SmallVector<Value> results, Value skip) {
  if (!skip)
    return results;
  Value apply = b.create<arith::CmpFOp>(l, arith::CmpFPredicate::OEQ, skip,
                                        constFloat(b, l, skip.getType(), 0.0));
  for (auto [k, r] : llvm::enumerate(results))
    r = b.create<arith::SelectOp>(l, apply, r, s[k == 0 ? 0 : k + 1]);
  return results;
}

SmallVector<Value> emitScalarRule(OpBuilder &b, Location l, Operation *op, ValueRange s);

/// The per-element rule of an elementwise optimizer op (sgd, sgd_momentum,
/// adam): `s` holds one scalar per operand (the rank-0 ones included), the
/// result is one scalar per op result. Empty for ops that are not
/// elementwise (lars). The gradient is widened and unscaled first, and the
/// update skipped on overflow (the loss-scaling operands).
SmallVector<Value> emitScalarUpdate(OpBuilder &b, Location l, Operation *op,
                                    ValueRange s) {
  GradScaling g = gradScalingOf(op);
  SmallVector<Value> scalars(s);
  scalars[1] = scaledGradient(b, l, s[1], s[0].getType(),
                              g.scale ? s[g.scaleIndex] : Value());
  SmallVector<Value> results = emitScalarRule(b, l, op, scalars);
  if (results.empty())
    return results;
  return skippable(b, l, s, std::move(results), g.skip ? s[g.skipIndex] : Value());
}

SmallVector<Value> emitScalarRule(OpBuilder &b, Location l, Operation *op, ValueRange s) {
  Type elem = s[0].getType();
  auto c = [&](double v) { return constFloat(b, l, elem, v); };
  auto mul = [&](Value x, Value y) -> Value { return b.create<arith::MulFOp>(l, x, y); };
  auto add = [&](Value x, Value y) -> Value { return b.create<arith::AddFOp>(l, x, y); };
  auto sub = [&](Value x, Value y) -> Value { return b.create<arith::SubFOp>(l, x, y); };
  // g + wd * p, without the product when wd is 0 (as PyTorch).
  auto decayed = [&](Value g, Value p, const APFloat &wd) {
    return wd.isZero() ? g : add(g, mul(c(wd.convertToDouble()), p));
  };
  if (auto sgd = llvm::dyn_cast<nn::SgdOp>(op)) {
    // s = p, g, lr
    Value d = decayed(s[1], s[0], sgd.getWeightDecay());
    return {sub(s[0], mul(s[2], d))};
  }
  if (auto momentum = llvm::dyn_cast<nn::SgdMomentumOp>(op)) {
    // s = p, g, v, lr
    double mu = momentum.getMomentum().convertToDouble();
    Value d = decayed(s[1], s[0], momentum.getWeightDecay());
    Value v = add(mul(c(mu), s[2]), d);
    Value step = momentum.getNesterov() ? add(d, mul(c(mu), v)) : v;
    return {sub(s[0], mul(s[3], step)), v};
  }
  if (auto adam = llvm::dyn_cast<nn::AdamOp>(op)) {
    // s = p, g, m, v, lr, corr1, corr2
    double beta1 = adam.getBeta1().convertToDouble();
    double beta2 = adam.getBeta2().convertToDouble();
    double wd = adam.getWeightDecay().convertToDouble();
    bool decoupled = adam.getDecoupled();
    Value p = s[0], lr = s[4];
    Value d = decoupled ? s[1] : decayed(s[1], p, adam.getWeightDecay());
    Value m = add(mul(c(beta1), s[2]), mul(c(1.0 - beta1), d));
    Value v = add(mul(c(beta2), s[3]), mul(c(1.0 - beta2), mul(d, d)));
    Value denom = add(mul(b.create<math::SqrtOp>(l, v), s[6]), c(adam.getEpsilon().convertToDouble()));
    Value step = b.create<arith::DivFOp>(l, mul(mul(lr, s[5]), m), denom);
    if (decoupled && wd != 0.0)
      p = mul(p, sub(c(1.0), mul(lr, c(wd))));
    return {sub(p, step), m, v};
  }
  return {};
}

/// The optimizer ops: one flat loop over (param, grad, state...) with the
/// rank-0 operands as scalars; LARS first reduces the two norms.
KernelSignature emitOptimizer(Operation *op, ModuleOp kernels, StringRef name) {
  OpBuilder b(op->getContext());
  Location loc = op->getLoc();
  SmallVector<Type> types;
  for (Value v : op->getOperands())
    types.push_back(llvm::cast<RankedTensorType>(v.getType()).getRank() == 0
                        ? naturalType(v.getType())
                        : flatType(v.getType()));
  for (Value v : op->getResults())
    types.push_back(flatType(v.getType()));
  func::FuncOp func = createKernelFunc(b, kernels, name, loc, types);
  auto args = func.getArguments();
  unsigned numInputs = op->getNumOperands();
  ValueRange inputs = args.take_front(numInputs);
  ValueRange outputs = args.drop_front(numInputs);
  Type elem = llvm::cast<MemRefType>(args[0].getType()).getElementType();
  auto c = [&](double v) { return constFloat(b, loc, elem, v); };
  auto mul = [](OpBuilder &nb, Location l, Value x, Value y) -> Value {
    return nb.create<arith::MulFOp>(l, x, y);
  };
  auto add = [](OpBuilder &nb, Location l, Value x, Value y) -> Value {
    return nb.create<arith::AddFOp>(l, x, y);
  };

  if (auto lars = llvm::dyn_cast<nn::LarsOp>(op)) {
    double wd = lars.getWeightDecay().convertToDouble();
    double mu = lars.getMomentum().convertToDouble();
    double eta = lars.getEta().convertToDouble();
    GradScaling scaling = gradScalingOf(op);
    Value factor = scaling.scale ? b.create<memref::LoadOp>(loc, inputs[scaling.scaleIndex],
                                                            ValueRange{})
                                       .getResult()
                                 : Value();
    // Squared norms into two rank-0 scratch values (of the unscaled
    // gradient), then the trust ratio.
    MemRefType scalarType = MemRefType::get({}, elem);
    SmallVector<Value> norms;
    for (Value tensor : {inputs[0], inputs[1]}) {
      Value acc = b.create<memref::AllocaOp>(loc, scalarType);
      b.create<linalg::FillOp>(loc, c(0.0), acc);
      MLIRContext *ctx = b.getContext();
      bool isGrad = tensor == inputs[1];
      buildGeneric(b, loc, tensor, acc,
                   {AffineMap::getMultiDimIdentityMap(1, ctx), AffineMap::get(1, 0, {}, ctx)},
                   {IteratorType::reduction},
                   [&](OpBuilder &nb, Location l, ValueRange s) -> SmallVector<Value> {
                     Value x = isGrad ? scaledGradient(nb, l, s[0], elem, factor) : s[0];
                     return {add(nb, l, s[1], mul(nb, l, x, x))};
                   });
      norms.push_back(b.create<math::SqrtOp>(
          loc, b.create<memref::LoadOp>(loc, acc, ValueRange{})));
    }
    Value zero = c(0.0);
    Value pPositive = b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::OGT, norms[0], zero);
    Value gPositive = b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::OGT, norms[1], zero);
    Value ratio = b.create<arith::DivFOp>(
        loc, mul(b, loc, c(eta), norms[0]),
        add(b, loc, norms[1], mul(b, loc, c(wd), norms[0])));
    Value local = b.create<arith::SelectOp>(
        loc, b.create<arith::AndIOp>(loc, pPositive, gPositive), ratio, c(1.0));
    buildFlatGeneric(b, loc, inputs, outputs,
                     [&](OpBuilder &nb, Location l, ValueRange s) -> SmallVector<Value> {
                       Value g = scaledGradient(nb, l, s[1], elem,
                                                factor ? s[scaling.scaleIndex] : Value());
                       Value d = add(nb, l, g, mul(nb, l, constFloat(nb, l, elem, wd), s[0]));
                       Value v = add(nb, l, mul(nb, l, constFloat(nb, l, elem, mu), s[2]),
                                     mul(nb, l, mul(nb, l, s[3], local), d));
                       return skippable(nb, l, s, {nb.create<arith::SubFOp>(l, s[0], v), v},
                                        scaling.skip ? s[scaling.skipIndex] : Value());
                     });
  } else {
    buildFlatGeneric(b, loc, inputs, outputs,
                     [&](OpBuilder &nb, Location l, ValueRange s) {
                       return emitScalarUpdate(nb, l, op, s.take_front(numInputs));
                     });
  }
  b.create<func::ReturnOp>(loc);
  return {llvm::to_vector(op->getOperands()), /*elementwise=*/true};
}

/// Calls `leaf(j, ...)` for the part j whose blocks [firstBlock[j],
/// firstBlock[j + 1]) hold `block`: a binary search of compares against
/// constants.
void searchPart(OpBuilder &b, Location loc, ArrayRef<int64_t> firstBlock, unsigned lo,
                unsigned hi, Value block, llvm::function_ref<void(OpBuilder &, unsigned)> leaf) {
  if (hi - lo == 1)
    return leaf(b, lo);
  unsigned mid = (lo + hi) / 2;
  Value below = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ult, block,
                                        constIndex(b, loc, firstBlock[mid]));
  auto branch = b.create<scf::IfOp>(loc, below, /*withElseRegion=*/true);
  OpBuilder tb = branch.getThenBodyBuilder();
  searchPart(tb, loc, firstBlock, lo, mid, block, leaf);
  OpBuilder eb = branch.getElseBodyBuilder();
  searchPart(eb, loc, firstBlock, mid, hi, block, leaf);
}

/// The multi-tensor loop: one 2-D scf.parallel over (block, lane) with
/// `firstBlock.back()` blocks of `lanes` lanes, where part j owns blocks
/// [firstBlock[j], firstBlock[j + 1]); searchPart on the block index calls
/// `leaf(j, block, lane)` for its part.
void buildMultiTensorLoop(
    OpBuilder &b, Location loc, ArrayRef<int64_t> firstBlock, int64_t lanes,
    llvm::function_ref<void(OpBuilder &, Location, unsigned, Value, Value)> leaf) {
  b.create<scf::ParallelOp>(
      loc, ValueRange{constIndex(b, loc, 0), constIndex(b, loc, 0)},
      ValueRange{constIndex(b, loc, firstBlock.back()), constIndex(b, loc, lanes)},
      ValueRange{constIndex(b, loc, 1), constIndex(b, loc, 1)},
      [&](OpBuilder &nb, Location l, ValueRange ivs) {
        searchPart(nb, l, firstBlock, 0, firstBlock.size() - 1, ivs[0],
                   [&](OpBuilder &lb, unsigned j) { leaf(lb, l, j, ivs[0], ivs[1]); });
      });
}

/// nn.multi_tensor: every member's elements in blocks of kBlock, all members'
/// blocks in a row; a binary search on the block index (compares against
/// constants) picks the member; the last block of a member is partial. On
/// CUDA one 2-D parallel loop over (block, element in block), both mapped
/// onto the grid, each element guarded. On the CPU the blocks are split over
/// the threads, and the search runs once per block: its elements are a loop
/// of their own up to the member's end (unguarded, so it vectorizes; with the
/// search per element, ResNet-50's momentum update ran at a third of the
/// bandwidth of the other elementwise kernels).
KernelSignature emitMultiTensor(nn::MultiTensorOp op, ModuleOp kernels, StringRef name) {
  constexpr int64_t kBlock = 1024;
  OpBuilder b(op->getContext());
  Location loc = op.getLoc();
  SmallVector<Type> types;
  for (Value v : op.getInputs())
    types.push_back(llvm::cast<RankedTensorType>(v.getType()).getRank() == 0
                        ? naturalType(v.getType())
                        : flatType(v.getType()));
  for (Value v : op.getResults())
    types.push_back(flatType(v.getType()));
  func::FuncOp func = createKernelFunc(b, kernels, name, loc, types);
  auto args = func.getArguments();
  const unsigned numInputs = op.getInputs().size();

  Block &body = op.getBody().front();
  SmallVector<Operation *> members;
  for (Operation &m : body.without_terminator())
    members.push_back(&m);
  SmallVector<int64_t> firstBlock = {0}; // per member, then the total
  SmallVector<unsigned> firstResult = {0};
  for (Operation *m : members) {
    int64_t n = llvm::cast<RankedTensorType>(m->getResult(0).getType()).getNumElements();
    firstBlock.push_back(firstBlock.back() + std::max<int64_t>(1, (n + kBlock - 1) / kBlock));
    firstResult.push_back(firstResult.back() + m->getNumResults());
  }

  auto numElements = [&](unsigned j) {
    return llvm::cast<RankedTensorType>(members[j]->getResult(0).getType()).getNumElements();
  };
  // Member j's update of its element `index`.
  auto compute = [&](OpBuilder &cb, Location cl, unsigned j, Value index) {
    Operation *m = members[j];
    SmallVector<Value> scalars;
    for (Value operand : m->getOperands()) {
      Value buffer = args[llvm::cast<BlockArgument>(operand).getArgNumber()];
      bool scalar = llvm::cast<MemRefType>(buffer.getType()).getRank() == 0;
      scalars.push_back(
          cb.create<memref::LoadOp>(cl, buffer, scalar ? ValueRange{} : ValueRange{index}));
    }
    SmallVector<Value> results = emitScalarUpdate(cb, cl, m, scalars);
    for (auto [r, value] : llvm::enumerate(results))
      cb.create<memref::StoreOp>(cl, value, args[numInputs + firstResult[j] + r],
                                 ValueRange{index});
  };
  // The first element of `block` within member j.
  auto blockStart = [&](OpBuilder &nb, Location l, unsigned j, Value block) -> Value {
    return nb.create<arith::MulIOp>(
        l, nb.create<arith::SubIOp>(l, block, constIndex(nb, l, firstBlock[j])),
        constIndex(nb, l, kBlock));
  };
  auto cuda = [&](OpBuilder &cb) {
    buildMultiTensorLoop(
        cb, loc, firstBlock, kBlock,
        [&](OpBuilder &nb, Location l, unsigned j, Value block, Value element) {
          Value index = nb.create<arith::AddIOp>(l, blockStart(nb, l, j, block), element);
          if (numElements(j) % kBlock == 0)
            return compute(nb, l, j, index);
          Value inside = nb.create<arith::CmpIOp>(l, arith::CmpIPredicate::ult, index,
                                                  constIndex(nb, l, numElements(j)));
          auto guard = nb.create<scf::IfOp>(l, inside, /*withElseRegion=*/false);
          OpBuilder gb = guard.getThenBodyBuilder();
          compute(gb, l, j, index);
        });
  };
  auto cpu = [&](OpBuilder &cb) {
    cb.create<scf::ParallelOp>(
        loc, ValueRange{constIndex(cb, loc, 0)}, ValueRange{constIndex(cb, loc, firstBlock.back())},
        ValueRange{constIndex(cb, loc, 1)}, [&](OpBuilder &nb, Location l, ValueRange ivs) {
          searchPart(nb, l, firstBlock, 0, firstBlock.size() - 1, ivs[0],
                     [&](OpBuilder &lb, unsigned j) {
                       Value begin = blockStart(lb, l, j, ivs[0]);
                       Value end = lb.create<arith::MinSIOp>(
                           l, lb.create<arith::AddIOp>(l, begin, constIndex(lb, l, kBlock)),
                           constIndex(lb, l, numElements(j)));
                       auto elements = lb.create<scf::ForOp>(
                           l, begin, end, constIndex(lb, l, 1), ValueRange{},
                           [&](OpBuilder &fb, Location fl, Value index, ValueRange) {
                             compute(fb, fl, j, index);
                             fb.create<scf::YieldOp>(fl);
                           });
                       elements->setAttr(kParallelLoopAttrName, lb.getUnitAttr());
                     });
        });
  };
  buildPerTarget(b, loc, cpu, cuda);
  b.create<func::ReturnOp>(loc);
  // Elementwise within a member, not across members: an output may overwrite
  // its own member's operands only; a shared input (the learning rate) none.
  KernelSignature signature{llvm::to_vector(op.getInputs()), /*elementwise=*/true, {}};
  for (BlockArgument arg : body.getArguments()) {
    SmallVector<Operation *> readers(arg.getUsers());
    bool own = readers.size() == 1 && llvm::cast<RankedTensorType>(arg.getType()).getRank() > 0;
    signature.groups.push_back(own ? llvm::find(members, readers[0]) - members.begin() : -1);
  }
  for (auto [j, m] : llvm::enumerate(members))
    signature.groups.append(m->getNumResults(), static_cast<int64_t>(j));
  return signature;
}

/// A multi-tensor pass of `op` (nn.nonfinite_flags, nn.sum_squares): one 2-D
/// parallel loop over (chunk, lane), the chunks of all operands in a row (a
/// binary search on the chunk index picks the operand, as nn.multi_tensor
/// does); lane l of a chunk folds `step` over its elements l, l + kLanes, ...
/// (each read as f32) from `init`, in order, and writes `finish` of the result
/// to its own slot, so no two iterations write one element and the result is
/// the same on any thread count. On CUDA the lanes of a chunk are consecutive
/// threads reading consecutive addresses.
static KernelSignature emitLaneScan(
    Operation *op, ValueRange inputs, Type resultType, ModuleOp kernels, StringRef name,
    llvm::function_ref<Value(OpBuilder &, Location)> init,
    llvm::function_ref<Value(OpBuilder &, Location, Value acc, Value x)> step,
    llvm::function_ref<Value(OpBuilder &, Location, Value acc)> finish) {
  using Flags = nn::NonfiniteFlagsOp;
  OpBuilder b(op->getContext());
  Location loc = op->getLoc();
  SmallVector<Type> types;
  for (Value v : inputs)
    types.push_back(flatType(v.getType()));
  types.push_back(flatType(resultType));
  func::FuncOp func = createKernelFunc(b, kernels, name, loc, types);
  auto args = func.getArguments();
  Value out = args.back();
  Type f32 = b.getF32Type();

  SmallVector<int64_t> firstChunk = {0}; // per operand, then the total
  SmallVector<int64_t> sizes;
  for (Value v : inputs) {
    sizes.push_back(llvm::cast<RankedTensorType>(v.getType()).getNumElements());
    firstChunk.push_back(firstChunk.back() + Flags::chunksOf(sizes.back()));
  }
  auto leaf = [&](OpBuilder &nb, Location l, unsigned j, Value chunk, Value lane) {
    Value local = nb.create<arith::SubIOp>(l, chunk, constIndex(nb, l, firstChunk[j]));
    Value start = nb.create<arith::AddIOp>(
        l, nb.create<arith::MulIOp>(l, local, constIndex(nb, l, Flags::kChunk)), lane);
    Value end = nb.create<arith::MinUIOp>(
        l,
        nb.create<arith::MulIOp>(
            l, nb.create<arith::AddIOp>(l, local, constIndex(nb, l, 1)),
            constIndex(nb, l, Flags::kChunk)),
        constIndex(nb, l, sizes[j]));
    auto scan = nb.create<scf::ForOp>(
        l, start, end, constIndex(nb, l, Flags::kLanes), ValueRange{init(nb, l)},
        [&](OpBuilder &fb, Location fl, Value i, ValueRange acc) {
          Value x = castScalar(fb, fl, fb.create<memref::LoadOp>(fl, args[j], ValueRange{i}),
                               f32);
          fb.create<scf::YieldOp>(fl, ValueRange{step(fb, fl, acc[0], x)});
        });
    Value at = nb.create<arith::AddIOp>(
        l, nb.create<arith::MulIOp>(l, chunk, constIndex(nb, l, Flags::kLanes)), lane);
    nb.create<memref::StoreOp>(l, finish(nb, l, scan.getResult(0)), out, ValueRange{at});
  };
  buildMultiTensorLoop(b, loc, firstChunk, Flags::kLanes, leaf);
  b.create<func::ReturnOp>(loc);
  return {llvm::to_vector(inputs), /*elementwise=*/false};
}

/// nn.nonfinite_flags: each lane's flag, 1.0 when one of its elements is an
/// inf or NaN, else 0.0.
KernelSignature emitNonfiniteFlags(nn::NonfiniteFlagsOp op, ModuleOp kernels,
                                   StringRef name) {
  Type f32 = Float32Type::get(op->getContext());
  return emitLaneScan(
      op, op.getInputs(), op.getType(), kernels, name,
      [](OpBuilder &b, Location l) -> Value { return b.create<arith::ConstantIntOp>(l, 0, 1); },
      [&](OpBuilder &b, Location l, Value acc, Value x) -> Value {
        // Unordered or >= inf: NaN and +-inf.
        Value bad = b.create<arith::CmpFOp>(
            l, arith::CmpFPredicate::UGE, b.create<math::AbsFOp>(l, x),
            constFloat(b, l, f32, std::numeric_limits<double>::infinity()));
        return b.create<arith::OrIOp>(l, acc, bad);
      },
      [&](OpBuilder &b, Location l, Value found) -> Value {
        return b.create<arith::SelectOp>(l, found, constFloat(b, l, f32, 1.0),
                                         constFloat(b, l, f32, 0.0));
      });
}

/// nn.sum_squares: each lane's sum of the squares of its elements, in f32.
KernelSignature emitSumSquares(nn::SumSquaresOp op, ModuleOp kernels, StringRef name) {
  Type f32 = Float32Type::get(op->getContext());
  return emitLaneScan(
      op, op.getInputs(), op.getType(), kernels, name,
      [&](OpBuilder &b, Location l) { return constFloat(b, l, f32, 0.0); },
      [](OpBuilder &b, Location l, Value acc, Value x) -> Value {
        return b.create<arith::AddFOp>(l, acc, b.create<arith::MulFOp>(l, x, x));
      },
      [](OpBuilder &, Location, Value sum) { return sum; });
}

/// nn.orthonormalize: modified Gram-Schmidt over the rows, serially (r rows
/// of n, about 2 r^2 n multiply-adds), sums in f64. `out` is written from
/// `in` first, then worked on in place.
KernelSignature emitOrthonormalize(nn::OrthonormalizeOp op, ModuleOp kernels, StringRef name) {
  OpBuilder b(op->getContext());
  Location loc = op.getLoc();
  auto type = llvm::cast<RankedTensorType>(op.getType());
  func::FuncOp func =
      createKernelFunc(b, kernels, name, loc, {flatType(type), flatType(type)});
  Value in = func.getArgument(0), out = func.getArgument(1);
  const int64_t rows = type.getDimSize(0), cols = type.getDimSize(1);
  Type f32 = b.getF32Type(), f64 = b.getF64Type();
  Value zero = constIndex(b, loc, 0), one = constIndex(b, loc, 1);
  Value n = constIndex(b, loc, cols);
  auto loop = [&](OpBuilder &ob, Location l, Value from, Value to,
                  llvm::function_ref<void(OpBuilder &, Location, Value)> body) {
    ob.create<scf::ForOp>(l, from, to, one, ValueRange{},
                          [&](OpBuilder &fb, Location fl, Value i, ValueRange) {
                            body(fb, fl, i);
                            fb.create<scf::YieldOp>(fl);
                          });
  };
  auto at = [&](OpBuilder &ob, Location l, Value row, Value col) {
    return ob.create<arith::AddIOp>(l, ob.create<arith::MulIOp>(l, row, n), col).getResult();
  };
  // sum_k out[r1, k] * out[r2, k], in f64.
  auto dot = [&](OpBuilder &ob, Location l, Value r1, Value r2) {
    auto sum = ob.create<scf::ForOp>(
        l, zero, n, one, ValueRange{constFloat(ob, l, f64, 0.0)},
        [&](OpBuilder &fb, Location fl, Value k, ValueRange acc) {
          Value x = fb.create<arith::ExtFOp>(
              fl, f64, fb.create<memref::LoadOp>(fl, out, ValueRange{at(fb, fl, r1, k)}).getResult());
          Value y = fb.create<arith::ExtFOp>(
              fl, f64, fb.create<memref::LoadOp>(fl, out, ValueRange{at(fb, fl, r2, k)}).getResult());
          fb.create<scf::YieldOp>(
              fl, ValueRange{fb.create<arith::AddFOp>(fl, acc[0],
                                                      fb.create<arith::MulFOp>(fl, x, y))});
        });
    return sum.getResult(0);
  };
  // out[to, :] -= (out[unit, :] . out[to, :]) out[unit, :], for a unit row.
  auto removeProjection = [&](OpBuilder &ob, Location l, Value unit, Value to) {
    Value d = ob.create<arith::TruncFOp>(l, f32, dot(ob, l, unit, to));
    loop(ob, l, zero, n, [&](OpBuilder &fb, Location fl, Value k) {
      Value index = at(fb, fl, to, k);
      Value x = fb.create<memref::LoadOp>(fl, out, ValueRange{at(fb, fl, unit, k)});
      Value y = fb.create<memref::LoadOp>(fl, out, ValueRange{index});
      fb.create<memref::StoreOp>(
          fl, fb.create<arith::SubFOp>(fl, y, fb.create<arith::MulFOp>(fl, d, x)), out,
          ValueRange{index});
    });
  };
  loop(b, loc, zero, constIndex(b, loc, rows * cols), [&](OpBuilder &fb, Location fl, Value k) {
    fb.create<memref::StoreOp>(fl, fb.create<memref::LoadOp>(fl, in, ValueRange{k}), out,
                               ValueRange{k});
  });
  loop(b, loc, zero, constIndex(b, loc, rows), [&](OpBuilder &rb, Location rl, Value i) {
    // A row with (next to) nothing left, say from a gradient that was zero:
    // a fixed pseudo-random row (the same on every rank), made orthogonal
    // to the rows before it. Normalizing it by its tiny norm would leave it
    // zero for good (PowerSGD's Q would stay zero, and so its layer).
    Value degenerate = rb.create<arith::CmpFOp>(rl, arith::CmpFPredicate::OLT,
                                                dot(rb, rl, i, i),
                                                constFloat(rb, rl, f64, 1e-30));
    rb.create<scf::IfOp>(rl, degenerate, [&](OpBuilder &tb, Location tl) {
      Type i64 = tb.getI64Type();
      auto c64 = [&](int64_t v) { return constInt(tb, tl, i64, v); };
      Value row = tb.create<arith::IndexCastOp>(tl, i64, i);
      Value rowHash = tb.create<arith::MulIOp>(
          tl, tb.create<arith::AddIOp>(tl, row, c64(1)), c64(0x85EBCA77));
      loop(tb, tl, zero, n, [&](OpBuilder &fb, Location fl, Value k) {
        Value col = fb.create<arith::IndexCastOp>(fl, i64, k);
        Value h = fb.create<arith::XOrIOp>(
            fl,
            fb.create<arith::MulIOp>(fl, fb.create<arith::AddIOp>(fl, col, c64(1)),
                                     c64(0x9E3779B1)),
            rowHash);
        Value bits = fb.create<arith::AndIOp>(fl, fb.create<arith::ShRUIOp>(fl, h, c64(7)),
                                              c64(0xFFFF));
        Value v = fb.create<arith::SubFOp>(
            fl,
            fb.create<arith::MulFOp>(fl, fb.create<arith::UIToFPOp>(fl, f32, bits),
                                     constFloat(fb, fl, f32, 1.0 / 32768.0)),
            constFloat(fb, fl, f32, 1.0));
        fb.create<memref::StoreOp>(fl, v, out, ValueRange{at(fb, fl, i, k)});
      });
      loop(tb, tl, zero, i, [&](OpBuilder &jb, Location jl, Value j) {
        removeProjection(jb, jl, j, i);
      });
      tb.create<scf::YieldOp>(tl);
    });
    Value norm = rb.create<math::SqrtOp>(
        rl, rb.create<arith::MaximumFOp>(rl, dot(rb, rl, i, i), constFloat(rb, rl, f64, 1e-60)));
    Value scale = rb.create<arith::TruncFOp>(
        rl, f32, rb.create<arith::DivFOp>(rl, constFloat(rb, rl, f64, 1.0), norm));
    loop(rb, rl, zero, n, [&](OpBuilder &fb, Location fl, Value k) {
      Value index = at(fb, fl, i, k);
      Value x = fb.create<memref::LoadOp>(fl, out, ValueRange{index});
      fb.create<memref::StoreOp>(fl, fb.create<arith::MulFOp>(fl, x, scale), out,
                                 ValueRange{index});
    });
    Value next = rb.create<arith::AddIOp>(rl, i, one);
    loop(rb, rl, next, constIndex(rb, rl, rows), [&](OpBuilder &jb, Location jl, Value j) {
      removeProjection(jb, jl, i, j);
    });
  });
  b.create<func::ReturnOp>(loc);
  return {{op.getInput()}, /*elementwise=*/false};
}

/// nn.topk_select, exact: the magnitudes' bits (|x| as i32 orders like |x|)
/// radix selected, 11 + 11 + 9 bits from the top, each level a histogram
/// pass over the entries that share the bits chosen so far; then a pass that
/// collects every entry above the count-th largest key and as many equal to
/// it as are needed, in index order. Serial.
///
/// A histogram pass costs about a nanosecond an entry (neighbouring entries
/// fall in the same few bins, so each increment waits for the last): four
/// of them over ResNet-50's gradients took 94 ms of a 2.2 s one-thread step.
/// So when `count` is small beside the input (at least 64, at most an
/// eighth of the input and of K), the kernel first samples: S = max(1024,
/// 8 n / count) entries, one at a hashed offset in each stretch of n / S,
/// and takes the threshold t as the sample's C-th largest key, C = 4 count
/// S / n (at least 32), which about 4 count entries reach. One pass over the
/// input in blocks of 16 (each block's largest key first, which vectorizes;
/// the entries one by one only in the rare block that reaches t) gathers
/// the entries at or above t into the results, in index order. When between
/// count and K of them arrived, the count largest of everything are among
/// them, and the radix select and the collecting pass run over those few
/// instead (11 ms a step for ResNet-50 at 0.1%). Fewer than count (the
/// sample drew more than its share of large entries: C of them where C/4
/// are expected, a tail under 1e-9 for C >= 32) or more than K (many equal
/// magnitudes) fall back to the exact passes over the input. Either way the
/// result is the same, bit for bit.
KernelSignature emitTopkSelect(nn::TopkSelectOp op, ModuleOp kernels, StringRef name) {
  OpBuilder b(op->getContext());
  Location loc = op.getLoc();
  auto inType = llvm::cast<RankedTensorType>(op.getInput().getType());
  auto valuesType = llvm::cast<RankedTensorType>(op.getValues().getType());
  const int64_t n = inType.getNumElements(), capacity = valuesType.getDimSize(0);
  SmallVector<Type> argTypes = {flatType(inType)};
  if (op.getCount())
    argTypes.push_back(flatType(op.getCount().getType()));
  argTypes.push_back(flatType(valuesType));
  argTypes.push_back(flatType(op.getIndices().getType()));
  func::FuncOp func = createKernelFunc(b, kernels, name, loc, argTypes);
  Value in = func.getArgument(0);
  Value values = func.getArgument(argTypes.size() - 2);
  Value indices = func.getArgument(argTypes.size() - 1);
  Type i1 = b.getI1Type(), i32 = b.getI32Type(), i64 = b.getI64Type(), f32 = b.getF32Type();
  Type indexType = b.getIndexType();
  Value zero = constIndex(b, loc, 0), one = constIndex(b, loc, 1);
  using Body =
      llvm::function_ref<SmallVector<Value>(OpBuilder &, Location, Value, ValueRange)>;
  auto loop = [&](OpBuilder &ob, Location l, Value from, Value to, ValueRange init, Body body) {
    return ob
        .create<scf::ForOp>(l, from, to, one, init,
                            [&](OpBuilder &fb, Location fl, Value i, ValueRange acc) {
                              fb.create<scf::YieldOp>(fl, body(fb, fl, i, acc));
                            })
        .getResults();
  };
  auto i64c = [&](OpBuilder &ob, Location l, int64_t v) { return constInt(ob, l, i64, v); };
  auto i32c = [&](OpBuilder &ob, Location l, int64_t v) { return constInt(ob, l, i32, v); };
  Value count = i64c(b, loc, capacity);
  if (op.getCount()) {
    Value c = b.create<memref::LoadOp>(loc, func.getArgument(1), ValueRange{zero});
    c = b.create<arith::MaxSIOp>(loc, c, i64c(b, loc, 1));
    count = b.create<arith::MinSIOp>(loc, c, count);
  }
  using KeyAt = std::function<Value(OpBuilder &, Location, Value)>;
  auto magnitude = [&](OpBuilder &ob, Location l, Value x) -> Value {
    return ob.create<arith::AndIOp>(l, ob.create<arith::BitcastOp>(l, i32, x),
                                    i32c(ob, l, 0x7fffffff));
  };
  auto keyOf = [&](Value buffer) -> KeyAt {
    return [&, buffer](OpBuilder &ob, Location l, Value i) {
      return magnitude(ob, l, ob.create<memref::LoadOp>(l, buffer, ValueRange{i}));
    };
  };
  Value histogram = b.create<memref::AllocaOp>(loc, MemRefType::get({2048}, i64));
  // The `want`-th largest of `length` keys: its bits, and how many of the
  // keys equal to it are among the `want` largest.
  auto select = [&](OpBuilder &ob, Location l, Value length, Value want,
                    const KeyAt &keyAt) -> std::pair<Value, Value> {
    Value prefix = i32c(ob, l, 0);
    Value need = want;  // of the entries sharing `prefix`'s bits, how many to take
    for (auto [shift, bits] : {std::pair<int, int>{20, 11}, {9, 11}, {0, 9}}) {
      const int64_t bins = int64_t{1} << bits, high = shift + bits;
      loop(ob, l, zero, constIndex(ob, l, bins), {},
           [&](OpBuilder &fb, Location fl, Value bin, ValueRange) {
             fb.create<memref::StoreOp>(fl, i64c(fb, fl, 0), histogram, ValueRange{bin});
             return SmallVector<Value>{};
           });
      loop(ob, l, zero, length, {}, [&](OpBuilder &fb, Location fl, Value i, ValueRange) {
        Value key = keyAt(fb, fl, i);
        Value matches = constInt(fb, fl, i1, 1);
        if (high < 31)
          matches = fb.create<arith::CmpIOp>(
              fl, arith::CmpIPredicate::eq,
              fb.create<arith::ShRUIOp>(fl, key, i32c(fb, fl, high)),
              fb.create<arith::ShRUIOp>(fl, prefix, i32c(fb, fl, high)));
        Value bin = fb.create<arith::AndIOp>(
            fl, fb.create<arith::ShRUIOp>(fl, key, i32c(fb, fl, shift)), i32c(fb, fl, bins - 1));
        Value at = fb.create<arith::IndexCastUIOp>(fl, indexType, bin);
        Value old = fb.create<memref::LoadOp>(fl, histogram, ValueRange{at});
        fb.create<memref::StoreOp>(
            fl, fb.create<arith::AddIOp>(fl, old, fb.create<arith::ExtUIOp>(fl, i64, matches)),
            histogram, ValueRange{at});
        return SmallVector<Value>{};
      });
      // From the top bin down: the bin where the running count reaches `need`.
      ValueRange found = loop(
          ob, l, zero, constIndex(ob, l, bins),
          {i64c(ob, l, 0), i32c(ob, l, 0), constInt(ob, l, i1, 0), need},
          [&](OpBuilder &fb, Location fl, Value r, ValueRange acc) {
            Value bin = fb.create<arith::SubIOp>(fl, constIndex(fb, fl, bins - 1), r);
            Value h = fb.create<memref::LoadOp>(fl, histogram, ValueRange{bin});
            Value reached = fb.create<arith::CmpIOp>(fl, arith::CmpIPredicate::sge,
                                                     fb.create<arith::AddIOp>(fl, acc[0], h), need);
            Value open = fb.create<arith::XOrIOp>(fl, acc[2], constInt(fb, fl, i1, 1));
            Value take = fb.create<arith::AndIOp>(fl, open, reached);
            Value binI32 = fb.create<arith::IndexCastUIOp>(fl, i32, bin);
            return SmallVector<Value>{
                fb.create<arith::SelectOp>(fl, open, fb.create<arith::AddIOp>(fl, acc[0], h),
                                           acc[0]),
                fb.create<arith::SelectOp>(fl, take, binI32, acc[1]),
                fb.create<arith::OrIOp>(fl, acc[2], take),
                fb.create<arith::SelectOp>(fl, take, fb.create<arith::SubIOp>(fl, need, acc[0]),
                                           acc[3])};
          });
      prefix = ob.create<arith::OrIOp>(
          l, prefix, ob.create<arith::ShLIOp>(l, found[1], i32c(ob, l, shift)));
      need = found[3];
    }
    return {prefix, need};
  };
  // Collect into the results, in order, of `source`'s first `length`
  // entries: keys above the threshold and `need` of those equal to it;
  // returns how many. Reading the results themselves is safe: entry j is
  // written at a place <= j.
  Value countIndex = b.create<arith::IndexCastOp>(loc, indexType, count);
  auto collect = [&](OpBuilder &ob, Location l, Value source, Value length, Value threshold,
                     Value need,
                     llvm::function_ref<Value(OpBuilder &, Location, Value)> indexAt) -> Value {
    return loop(
        ob, l, zero, length, {zero, i64c(ob, l, 0)},
        [&](OpBuilder &fb, Location fl, Value i, ValueRange acc) {
          Value x = fb.create<memref::LoadOp>(fl, source, ValueRange{i});
          Value key = magnitude(fb, fl, x);
          Value above = fb.create<arith::CmpIOp>(fl, arith::CmpIPredicate::ugt, key, threshold);
          Value equal = fb.create<arith::CmpIOp>(fl, arith::CmpIPredicate::eq, key, threshold);
          Value takeEqual = fb.create<arith::AndIOp>(
              fl, equal, fb.create<arith::CmpIOp>(fl, arith::CmpIPredicate::slt, acc[1], need));
          Value take = fb.create<arith::AndIOp>(
              fl, fb.create<arith::OrIOp>(fl, above, takeEqual),
              fb.create<arith::CmpIOp>(fl, arith::CmpIPredicate::ult, acc[0], countIndex));
          fb.create<scf::IfOp>(fl, take, [&](OpBuilder &tb, Location tl) {
            tb.create<memref::StoreOp>(tl, x, values, ValueRange{acc[0]});
            tb.create<memref::StoreOp>(tl, indexAt(tb, tl, i), indices, ValueRange{acc[0]});
            tb.create<scf::YieldOp>(tl);
          });
          return SmallVector<Value>{
              fb.create<arith::SelectOp>(fl, take, fb.create<arith::AddIOp>(fl, acc[0], one),
                                         acc[0]),
              fb.create<arith::SelectOp>(fl, takeEqual,
                                         fb.create<arith::AddIOp>(fl, acc[1], i64c(fb, fl, 1)),
                                         acc[1])};
        })[0];
  };

  // The sample's size S and whether to take the sampled path (all i64).
  Value nI64 = i64c(b, loc, n), capI64 = i64c(b, loc, capacity);
  auto ceilDiv = [](OpBuilder &ob, Location l, Value x, Value y) -> Value {
    Value yMinusOne = ob.create<arith::SubIOp>(l, y, constInt(ob, l, y.getType(), 1));
    return ob.create<arith::DivSIOp>(l, ob.create<arith::AddIOp>(l, x, yMinusOne), y);
  };
  Value sampleSize =
      b.create<arith::MaxSIOp>(loc, i64c(b, loc, 1024), ceilDiv(b, loc, i64c(b, loc, 8 * n), count));
  auto atMostEighth = [&](Value x, Value of) {
    return b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::sle,
                                   b.create<arith::MulIOp>(loc, x, i64c(b, loc, 8)), of);
  };
  Value sampled = b.create<arith::AndIOp>(
      loc, atMostEighth(sampleSize, nI64),
      b.create<arith::AndIOp>(loc, atMostEighth(count, nI64), atMostEighth(count, capI64)));
  // Sampled: the threshold, then the candidates gathered into the results;
  // yields how many reached it (0 when not sampled).
  auto ifSampled = b.create<scf::IfOp>(
      loc, sampled,
      [&](OpBuilder &sb, Location sl) {
        Value s = sb.create<arith::IndexCastOp>(sl, indexType, sampleSize);
        Value stride = sb.create<arith::DivSIOp>(sl, nI64, sampleSize);
        // Sample j: at a hashed offset in [j stride, (j + 1) stride). Read
        // where it lies at each level (S lines stay in cache after the first).
        KeyAt sampleKey = [&, stride](OpBuilder &fb, Location fl, Value j) -> Value {
          Value j64 = fb.create<arith::IndexCastOp>(fl, i64, j);
          Value hash = fb.create<arith::ShRUIOp>(
              fl,
              fb.create<arith::MulIOp>(fl, fb.create<arith::AddIOp>(fl, j64, i64c(fb, fl, 1)),
                                       i64c(fb, fl, static_cast<int64_t>(0x9E3779B97F4A7C15ull))),
              i64c(fb, fl, 33));
          Value at = fb.create<arith::AddIOp>(fl, fb.create<arith::MulIOp>(fl, j64, stride),
                                              fb.create<arith::RemUIOp>(fl, hash, stride));
          return keyOf(in)(fb, fl, fb.create<arith::IndexCastOp>(fl, indexType, at));
        };
        Value want = ceilDiv(
            sb, sl,
            sb.create<arith::MulIOp>(sl, sb.create<arith::MulIOp>(sl, count, i64c(sb, sl, 4)),
                                     sampleSize),
            nI64);
        Value threshold = select(sb, sl, s, want, sampleKey).first;
        Value capacityIndex = constIndex(sb, sl, capacity);
        // Entries [from, to) at or above the threshold into the results.
        auto gather = [&](OpBuilder &gb, Location gl, Value from, Value to, Value m) -> Value {
          return loop(
              gb, gl, from, to, {m}, [&](OpBuilder &fb, Location fl, Value i, ValueRange acc) {
                Value x = fb.create<memref::LoadOp>(fl, in, ValueRange{i});
                Value at = fb.create<arith::CmpIOp>(fl, arith::CmpIPredicate::uge,
                                                    magnitude(fb, fl, x), threshold);
                Value room = fb.create<arith::CmpIOp>(fl, arith::CmpIPredicate::ult, acc[0],
                                                      capacityIndex);
                fb.create<scf::IfOp>(
                    fl, fb.create<arith::AndIOp>(fl, at, room), [&](OpBuilder &tb, Location tl) {
                      tb.create<memref::StoreOp>(tl, x, values, ValueRange{acc[0]});
                      tb.create<memref::StoreOp>(tl, tb.create<arith::IndexCastOp>(tl, i32, i),
                                                 indices, ValueRange{acc[0]});
                      tb.create<scf::YieldOp>(tl);
                    });
                return SmallVector<Value>{fb.create<arith::SelectOp>(
                    fl, at, fb.create<arith::AddIOp>(fl, acc[0], one), acc[0])};
              })[0];
        };
        // In blocks of 16: the block's largest key first (no dependence
        // between entries, so it vectorizes), the entries one by one only
        // in the rare block that holds a candidate.
        constexpr int64_t kBlock = 16;
        Value block = constIndex(sb, sl, kBlock);
        Value blocksEnd = constIndex(sb, sl, n / kBlock * kBlock);
        Value inBlocks =
            sb.create<scf::ForOp>(
                  sl, zero, blocksEnd, block, ValueRange{zero},
                  [&](OpBuilder &fb, Location fl, Value base, ValueRange acc) {
                    Value largest = loop(
                        fb, fl, zero, block, {i32c(fb, fl, 0)},
                        [&](OpBuilder &eb, Location el, Value e, ValueRange most) {
                          Value key = keyOf(in)(eb, el, eb.create<arith::AddIOp>(el, base, e));
                          return SmallVector<Value>{
                              eb.create<arith::MaxUIOp>(el, most[0], key)};
                        })[0];
                    Value hit = fb.create<arith::CmpIOp>(fl, arith::CmpIPredicate::uge, largest,
                                                         threshold);
                    auto ifHit = fb.create<scf::IfOp>(
                        fl, hit,
                        [&](OpBuilder &tb, Location tl) {
                          tb.create<scf::YieldOp>(
                              tl, gather(tb, tl, base, tb.create<arith::AddIOp>(tl, base, block),
                                         acc[0]));
                        },
                        [&](OpBuilder &tb, Location tl) { tb.create<scf::YieldOp>(tl, acc[0]); });
                    fb.create<scf::YieldOp>(fl, ifHit.getResult(0));
                  })
                .getResult(0);
        Value reached = gather(sb, sl, blocksEnd, constIndex(sb, sl, n), inBlocks);
        sb.create<scf::YieldOp>(sl, reached);
      },
      [&](OpBuilder &sb, Location sl) { sb.create<scf::YieldOp>(sl, zero); });
  Value reached = ifSampled.getResult(0);
  Value candidatesHold = b.create<arith::AndIOp>(
      loc, sampled,
      b.create<arith::AndIOp>(
          loc, b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::uge, reached, countIndex),
          b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ule, reached,
                                  constIndex(b, loc, capacity))));
  auto ifCandidates = b.create<scf::IfOp>(
      loc, candidatesHold,
      [&](OpBuilder &cb, Location cl) {
        auto [threshold, need] = select(cb, cl, reached, count, keyOf(values));
        Value taken = collect(cb, cl, values, reached, threshold, need,
                              [&](OpBuilder &tb, Location tl, Value j) -> Value {
                                return tb.create<memref::LoadOp>(tl, indices, ValueRange{j});
                              });
        cb.create<scf::YieldOp>(cl, taken);
      },
      [&](OpBuilder &eb, Location el) {
        Value all = constIndex(eb, el, n);
        auto [threshold, need] = select(eb, el, all, count, keyOf(in));
        Value taken = collect(eb, el, in, all, threshold, need,
                              [&](OpBuilder &tb, Location tl, Value i) -> Value {
                                return tb.create<arith::IndexCastOp>(tl, i32, i);
                              });
        eb.create<scf::YieldOp>(el, taken);
      });
  Value taken = ifCandidates.getResult(0);
  // Padding past the last entry taken: where a sparse set ends.
  loop(b, loc, taken, constIndex(b, loc, capacity), {},
       [&](OpBuilder &fb, Location fl, Value j, ValueRange) {
         fb.create<memref::StoreOp>(fl, constFloat(fb, fl, f32, 0.0), values, ValueRange{j});
         fb.create<memref::StoreOp>(fl, i32c(fb, fl, -1), indices, ValueRange{j});
         return SmallVector<Value>{};
       });
  b.create<func::ReturnOp>(loc);
  SmallVector<Value> inputs = {op.getInput()};
  if (op.getCount())
    inputs.push_back(op.getCount());
  return {inputs, /*elementwise=*/false};
}

/// nn.zero_at: the input copied (skipped when written in place over it),
/// then the named positions zeroed, bounds-checked.
KernelSignature emitZeroAt(nn::ZeroAtOp op, ModuleOp kernels, StringRef name) {
  OpBuilder b(op->getContext());
  Location loc = op.getLoc();
  auto type = llvm::cast<RankedTensorType>(op.getType());
  auto indexType = llvm::cast<RankedTensorType>(op.getIndices().getType());
  func::FuncOp func = createKernelFunc(b, kernels, name, loc,
                                       {flatType(type), flatType(indexType), flatType(type)});
  Value in = func.getArgument(0), indices = func.getArgument(1), out = func.getArgument(2);
  Type i32 = b.getI32Type(), f32 = b.getF32Type();
  Value zero = constIndex(b, loc, 0), one = constIndex(b, loc, 1);
  // In place (the plan gives the input's buffer to the result), only the
  // named entries are written.
  Value apart = b.create<arith::CmpIOp>(
      loc, arith::CmpIPredicate::ne, b.create<memref::ExtractAlignedPointerAsIndexOp>(loc, in),
      b.create<memref::ExtractAlignedPointerAsIndexOp>(loc, out));
  b.create<scf::IfOp>(loc, apart, [&](OpBuilder &cb, Location cl) {
    cb.create<scf::ForOp>(cl, zero, constIndex(cb, cl, type.getNumElements()), one, ValueRange{},
                          [&](OpBuilder &fb, Location fl, Value i, ValueRange) {
                            fb.create<memref::StoreOp>(
                                fl, fb.create<memref::LoadOp>(fl, in, ValueRange{i}), out,
                                ValueRange{i});
                            fb.create<scf::YieldOp>(fl);
                          });
    cb.create<scf::YieldOp>(cl);
  });
  b.create<scf::ForOp>(
      loc, zero, constIndex(b, loc, indexType.getNumElements()), one, ValueRange{},
      [&](OpBuilder &fb, Location fl, Value j, ValueRange) {
        Value at = fb.create<memref::LoadOp>(fl, indices, ValueRange{j});
        Value inside = fb.create<arith::AndIOp>(
            fl, fb.create<arith::CmpIOp>(fl, arith::CmpIPredicate::sge, at, constInt(fb, fl, i32, 0)),
            fb.create<arith::CmpIOp>(fl, arith::CmpIPredicate::slt, at,
                                     constInt(fb, fl, i32, type.getNumElements())));
        fb.create<scf::IfOp>(fl, inside, [&](OpBuilder &tb, Location tl) {
          tb.create<memref::StoreOp>(tl, constFloat(tb, tl, f32, 0.0), out,
                                     ValueRange{tb.create<arith::IndexCastOp>(tl, tb.getIndexType(), at)});
          tb.create<scf::YieldOp>(tl);
        });
        fb.create<scf::YieldOp>(fl);
      });
  b.create<func::ReturnOp>(loc);
  return {{op.getInput(), op.getIndices()}, /*elementwise=*/true};
}

} // namespace graphc::kernel
