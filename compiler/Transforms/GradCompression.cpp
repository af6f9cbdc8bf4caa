//===- GradCompression.cpp - PowerSGD on graphc-data-parallel's buckets ---===//
//
// See GradCompression.h for the algorithm. Everything here is ops of the
// step: the factors are nn.matmul (GEMMs), their orthonormalization
// nn.orthonormalize, the error feedback nn.add / nn.sub fused with their
// neighbours, the states ordinary nn.state (checkpointed and checked like any
// other), the collectives dist.allreduce_start / wait.
//
//===----------------------------------------------------------------------===//

#include "compiler/Transforms/GradCompression.h"

#include "compiler/Transforms/BuildUtils.h"
#include "dialects/dist/IR/DistOps.h"
#include "dialects/nn/IR/NNOps.h"
#include "compiler/Transforms/Passes.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"

#include <array>
#include <cmath>
#include <optional>

using namespace mlir;

namespace graphc {

GradCompression parseGradCompression(StringRef spec, std::string &error) {
  GradCompression result;
  if (spec == "none")
    return result;
  if (spec == "fp16") {
    result.kind = GradCompression::Kind::Fp16;
    return result;
  }
  StringRef topk = spec;
  if (topk.consume_front("topk:")) {
    auto [ratioText, warmupText] = topk.split(':');
    double ratio = 0;
    int64_t warmup = 0;
    const bool warmupGiven = topk.contains(':');
    if (!ratioText.empty() && !ratioText.getAsDouble(ratio) && ratio >= kMinTopkRatio &&
        ratio <= kMaxTopkRatio &&
        (!warmupGiven ||
         (!warmupText.empty() && warmupText.size() <= 9 &&
          llvm::all_of(warmupText, [](char c) { return llvm::isDigit(c); }) &&
          !warmupText.getAsInteger(10, warmup)))) {
      result.kind = GradCompression::Kind::TopK;
      result.ratio = ratio;
      result.warmupSteps = warmup;
      return result;
    }
    error = ("expected topk:RATIO[:WARMUP_STEPS] with RATIO in [1e-6, 0.2] and up to 9 "
             "digits of steps, got '" +
             spec + "'")
                .str();
    return result;
  }
  StringRef rank = spec;
  int64_t r = 0;
  if (rank.consume_front("powersgd:") && !rank.empty() &&
      llvm::all_of(rank, [](char c) { return llvm::isDigit(c); }) && rank.size() <= 6 && !rank.getAsInteger(10, r) &&
      r >= 1 && r <= kMaxPowerSgdRank) {
    result.kind = GradCompression::Kind::PowerSgd;
    result.rank = r;
    return result;
  }
  error = ("expected none, fp16, topk:RATIO[:WARMUP_STEPS] or powersgd:RANK with RANK in [1, " +
           llvm::Twine(kMaxPowerSgdRank) + "], got '" + spec + "'")
              .str();
  return result;
}

namespace {

/// One gradient sent as PowerSGD's factors.
struct Factored {
  unsigned index;       // in its bucket
  Value gradient;       // as backward computed it
  int64_t n, m, r;      // its matrix view [n, m], the factors' rank
  StringRef parameter;  // whose gradient it is
  Value matrix;         // M = G + E, [n, m]
  Value p;              // P^T, [r, n]: computed, then reduced and orthonormalized
  Value qNew;           // Q^T, [r, m]: computed in the Q phase
  std::string errorState, qState;
};

int64_t wireBytesOf(Value tensor, bool halfWire) {
  auto type = llvm::cast<RankedTensorType>(tensor.getType());
  int64_t bytes = llvm::divideCeil(type.getElementTypeBitWidth(), 8);
  if (halfWire && type.getElementType().isF32())
    bytes = 2;
  return type.getNumElements() * bytes;
}

/// The gradients of a bucket at `kept` stay dense: a start and a wait of
/// their own where the bucket had them, their readers moved over. Returns
/// that wait (null when none is kept).
dist::AllreduceWaitOp keepDense(OpBuilder &b, dist::AllreduceStartOp start,
                                dist::AllreduceWaitOp wait, ArrayRef<unsigned> kept) {
  if (kept.empty())
    return nullptr;
  SmallVector<Value> tensors;
  for (unsigned i : kept)
    tensors.push_back(start.getTensors()[i]);
  b.setInsertionPoint(start);
  auto keptStart = b.create<dist::AllreduceStartOp>(
      start.getLoc(), ValueRange(tensors).getTypes(), tensors, start.getReductionAttr(),
      start.getBucketAttr(), start.getWireTypeAttr(), UnitAttr(), IntegerAttr());
  b.setInsertionPoint(wait);
  auto keptWait = b.create<dist::AllreduceWaitOp>(wait.getLoc(), keptStart.getResultTypes(),
                                                  keptStart.getResults());
  for (auto [k, i] : llvm::enumerate(kept))
    wait.getResult(i).replaceAllUsesWith(keptWait.getResult(k));
  return keptWait;
}

/// The parameter whose update reads result `index` of `wait`, or "".
StringRef parameterOf(dist::AllreduceWaitOp wait, unsigned index) {
  for (Operation *user : wait.getResult(index).getUsers())
    if (auto update = llvm::dyn_cast<nn::ApplyGradientOp>(user))
      return update.getParameter();
  return "";
}

/// One bucket as a compression rewrites it: the gradients that leave it
/// (indices into the start's tensors, with their parameters) and the wait
/// of those that stay (null when none does).
struct Bucket {
  dist::AllreduceStartOp start;
  dist::AllreduceWaitOp wait, keptWait;
  SmallVector<unsigned> chosen;
  SmallVector<StringRef> parameters;  // per chosen gradient
};

/// Counts for graphc's summary: gradients compressed, gradients, and the
/// bytes per step on the wire without compression and with it.
struct Counts {
  int64_t chosen = 0, total = 0, before = 0, after = 0;
};

/// Walks the allreduce buckets of `step`. `choose(gradient, parameter)`
/// gives the bytes a gradient sends compressed, or nothing when it stays in
/// its bucket; the others stay dense (keepDense), and `rewrite` replaces the
/// bucket's collective for the chosen ones before it is erased. Then the
/// buckets are numbered again in start order.
FailureOr<Counts>
rewriteBuckets(func::FuncOp step, OpBuilder &b,
               llvm::function_ref<std::optional<int64_t>(Value, StringRef)> choose,
               llvm::function_ref<LogicalResult(Bucket &)> rewrite) {
  Block &body = step.getBody().front();
  SmallVector<dist::AllreduceStartOp> starts(body.getOps<dist::AllreduceStartOp>());
  Counts counts;
  for (dist::AllreduceStartOp start : starts) {
    Bucket bucket{start, start.getWait(), nullptr, {}, {}};
    if (!bucket.wait)
      return start.emitOpError("has no wait");
    const bool halfWire = start.getWireType().has_value();
    SmallVector<unsigned> kept;
    for (auto [index, g] : llvm::enumerate(start.getTensors())) {
      ++counts.total;
      counts.before += wireBytesOf(g, halfWire);
      StringRef parameter = parameterOf(bucket.wait, index);
      std::optional<int64_t> bytes = parameter.empty() ? std::nullopt : choose(g, parameter);
      if (bytes) {
        bucket.chosen.push_back(index);
        bucket.parameters.push_back(parameter);
        counts.after += *bytes;
      } else {
        kept.push_back(index);
        counts.after += wireBytesOf(g, halfWire);
      }
    }
    if (bucket.chosen.empty())
      continue;
    counts.chosen += bucket.chosen.size();
    bucket.keptWait = keepDense(b, start, bucket.wait, kept);
    if (failed(rewrite(bucket)))
      return failure();
    bucket.wait.erase();
    start.erase();
  }
  int64_t next = 0;
  for (dist::AllreduceStartOp start : body.getOps<dist::AllreduceStartOp>())
    start.setBucketAttr(b.getI64IntegerAttr(next++));
  return counts;
}

/// A zero-initialized f32 state at the end of the module.
void declareState(OpBuilder &b, ModuleOp module, StringRef name, RankedTensorType type,
                  nn::Initializer init = nn::Initializer::zeros, FloatAttr value = nullptr) {
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToEnd(module.getBody());
  b.create<nn::StateOp>(module.getLoc(), name, type, init, value);
}

} // namespace

LogicalResult applyPowerSgd(ModuleOp module, func::FuncOp step, int64_t rank) {
  if (module.lookupSymbol(kLossScaleState))
    return step.emitError("grad-compression=powersgd does not combine with loss scaling (--amp "
                          "fp16): a step whose gradients overflow would leave its infinities "
                          "in the error feedback; use --amp bf16, or fp32");
  Block &body = step.getBody().front();
  // The Q phases go where backward is over: before the first bucket's wait.
  Operation *qAnchor = nullptr;
  for (dist::AllreduceStartOp start : body.getOps<dist::AllreduceStartOp>())
    if (Operation *wait = start.getWait(); wait && (!qAnchor || wait->isBeforeInBlock(qAnchor)))
      qAnchor = wait;

  OpBuilder b(module.getContext());
  Type f32 = b.getF32Type();
  // A gradient seen as [n, m] = [dim 0, the rest], and its factors' rank.
  auto shapeOf = [&](Value g) {
    auto type = llvm::cast<RankedTensorType>(g.getType());
    int64_t n = type.getRank() >= 2 ? type.getDimSize(0) : 0;
    int64_t m = n > 0 ? type.getNumElements() / n : 0;
    return std::array<int64_t, 3>{n, m, std::min({n, m, rank})};
  };
  // PyTorch's test (min_compression_rate 2): the factors under half the
  // matrix. Half gradients (--amp bf16) are factored in f32, as their error
  // is kept.
  auto choose = [&](Value g, StringRef) -> std::optional<int64_t> {
    auto [n, m, r] = shapeOf(g);
    if (!llvm::isa<FloatType>(llvm::cast<RankedTensorType>(g.getType()).getElementType()) ||
        r < 1 || (n + m) * r * 2 >= n * m)
      return std::nullopt;
    return 0;  // the factors' bytes are counted where they are built
  };
  int64_t factorBytes = 0;
  auto rewrite = [&](Bucket &bucket) -> LogicalResult {
    dist::AllreduceStartOp start = bucket.start;
    dist::AllreduceWaitOp wait = bucket.wait, keptWait = bucket.keptWait;
    const bool halfWire = start.getWireType().has_value();
    SmallVector<Factored> factored;
    for (auto [index, parameter] : llvm::zip(bucket.chosen, bucket.parameters)) {
      Factored f;
      f.index = index;
      f.gradient = start.getTensors()[index];
      auto [n, m, r] = shapeOf(f.gradient);
      f.n = n, f.m = m, f.r = r;
      f.parameter = parameter;
      factored.push_back(std::move(f));
    }

    // P phase, where the bucket started: P^T = orthonormalize(Q^T) M^T.
    b.setInsertionPoint(start);
    SmallVector<Value> ps;
    for (Factored &f : factored) {
      Location loc = f.gradient.getLoc();
      f.errorState = ("graphc.powersgd." + f.parameter + ".error").str();
      f.qState = ("graphc.powersgd." + f.parameter + ".q").str();
      auto matrixType = RankedTensorType::get({f.n, f.m}, f32);
      auto qType = RankedTensorType::get({f.r, f.m}, f32);
      if (module.lookupSymbol(f.errorState) || module.lookupSymbol(f.qState))
        return start.emitOpError("PowerSGD's state for @")
               << f.parameter << " is already declared (a gradient applied twice?)";
      declareState(b, module, f.errorState, matrixType);
      // Q starts as N(0, 1) draws, the same on every rank (graphrun seeds
      // every rank's states alike), as PyTorch's hook seeds its first Q.
      declareState(b, module, f.qState, qType, nn::Initializer::normal, b.getF64FloatAttr(1.0));
      Value g = f.gradient;
      if (llvm::cast<RankedTensorType>(g.getType()).getRank() != 2)
        g = b.create<nn::ReshapeOp>(loc, g, b.getDenseI64ArrayAttr({f.n, f.m}));
      if (!llvm::cast<RankedTensorType>(g.getType()).getElementType().isF32())
        g = b.create<nn::CastOp>(loc, g, TypeAttr::get(f32));
      Value error = b.create<nn::LoadOp>(loc, matrixType, f.errorState);
      f.matrix = b.create<nn::AddOp>(loc, g, error);
      Value q = b.create<nn::LoadOp>(loc, qType, f.qState);
      Value qOrtho = b.create<nn::OrthonormalizeOp>(loc, q);
      f.p = b.create<nn::MatmulOp>(loc, qOrtho, f.matrix, UnitAttr(), b.getUnitAttr());
      ps.push_back(f.p);
    }
    Location bucketLoc = start.getLoc();
    auto sum = dist::ReductionAttr::get(module.getContext(), dist::Reduction::sum);
    auto mean = dist::ReductionAttr::get(module.getContext(), dist::Reduction::mean);
    auto pStart = b.create<dist::AllreduceStartOp>(bucketLoc, ValueRange(ps).getTypes(), ps, sum,
                                                   start.getBucketAttr(), start.getWireTypeAttr(),
                                                   UnitAttr(), IntegerAttr());

    // Q phase, after backward: Q^T = orthonormalize(sum P^T) M.
    b.setInsertionPoint(qAnchor == wait.getOperation() && keptWait ? keptWait.getOperation()
                                                                    : qAnchor);
    auto pWait = b.create<dist::AllreduceWaitOp>(bucketLoc, pStart.getResultTypes(),
                                                 pStart.getResults());
    SmallVector<Value> qs;
    for (auto [f, reduced] : llvm::zip(factored, pWait.getResults())) {
      Location loc = f.gradient.getLoc();
      f.p = b.create<nn::OrthonormalizeOp>(loc, reduced);
      f.qNew = b.create<nn::MatmulOp>(loc, f.p, f.matrix, UnitAttr(), UnitAttr());
      qs.push_back(f.qNew);
      factorBytes += wireBytesOf(f.p, halfWire) + wireBytesOf(f.qNew, halfWire);
    }
    auto qStart = b.create<dist::AllreduceStartOp>(bucketLoc, ValueRange(qs).getTypes(), qs, mean,
                                                   start.getBucketAttr(), start.getWireTypeAttr(),
                                                   UnitAttr(), IntegerAttr());

    // Where the bucket's wait was: G' = P Q^T, E = M - G', Q kept.
    b.setInsertionPoint(keptWait ? keptWait.getOperation() : wait.getOperation());
    auto qWait = b.create<dist::AllreduceWaitOp>(bucketLoc, qStart.getResultTypes(),
                                                 qStart.getResults());
    for (auto [f, q] : llvm::zip(factored, qWait.getResults())) {
      Location loc = f.gradient.getLoc();
      Value approx = b.create<nn::MatmulOp>(loc, f.p, q, b.getUnitAttr(), UnitAttr());
      b.create<nn::AssignOp>(loc, f.errorState, b.create<nn::SubOp>(loc, f.matrix, approx));
      b.create<nn::AssignOp>(loc, f.qState, q);
      // The optimizer takes the f32 approximation (the parameter's type).
      Value gradient = approx;
      if (llvm::cast<RankedTensorType>(f.gradient.getType()).getShape() !=
          llvm::cast<RankedTensorType>(approx.getType()).getShape())
        gradient = b.create<nn::ReshapeOp>(
            loc, approx,
            b.getDenseI64ArrayAttr(
                llvm::cast<RankedTensorType>(f.gradient.getType()).getShape()));
      wait.getResult(f.index).replaceAllUsesWith(gradient);
    }

    // Later buckets' Q phases still go before every wait.
    if (qAnchor == wait.getOperation())
      qAnchor = qWait;
    return success();
  };
  FailureOr<Counts> counts = rewriteBuckets(step, b, choose, rewrite);
  if (failed(counts))
    return failure();
  // (The P and Q collectives are buckets of their own.)
  module->setAttr(kGradCompressionAttr,
                  b.getDenseI64ArrayAttr({rank, counts->chosen, counts->total, counts->before,
                                          counts->after + factorBytes}));
  return success();
}

LogicalResult applyTopk(ModuleOp module, func::FuncOp step, const GradCompression &compression,
                        double momentum, double weightDecay) {
  if (module.lookupSymbol(kLossScaleState))
    return step.emitError("grad-compression=topk does not combine with loss scaling (--amp "
                          "fp16): a step whose gradients overflow would leave its infinities "
                          "in the accumulated gradient; use --amp bf16, or fp32");
  Block &body = step.getBody().front();
  OpBuilder b(module.getContext());
  Type f32 = b.getF32Type(), i64 = b.getI64Type();
  const int64_t warmup = compression.warmupSteps;
  Value stepCounter;  // loaded once, at the top of the step, under warm-up
  auto i64Constant = [&](Location loc, int64_t value) {
    return scalarConstant(b, loc, i64, static_cast<double>(value));
  };
  // k entries of 8 bytes (value, index), under half the f32 gradient's 4 n.
  // The set's size K leaves room for 8 k (nn.topk_select's sampled
  // selection gathers about 4 k candidates there) and for the warm-up's
  // first stage, a quarter of the entries; what is sent is the first count.
  auto sizeOf = [&](Value g) {
    auto type = llvm::cast<RankedTensorType>(g.getType());
    const int64_t n = type.getNumElements();
    const int64_t k = static_cast<int64_t>(std::ceil(compression.ratio * static_cast<double>(n)));
    const int64_t room = std::min(n, std::max(8 * k, warmup > 0 ? (n + 3) / 4 : k));
    return std::array<int64_t, 3>{n, k, room};
  };
  auto choose = [&](Value g, StringRef) -> std::optional<int64_t> {
    auto [n, k, capacity] = sizeOf(g);
    if (llvm::cast<RankedTensorType>(g.getType()).getRank() < 2 || k < 1 || 4 * k >= n ||
        n >= (int64_t{1} << 31))
      return std::nullopt;
    return 8 * k;
  };
  auto rewrite = [&](Bucket &bucket) -> LogicalResult {
    dist::AllreduceStartOp start = bucket.start;
    // Where the bucket started: momentum correction, accumulation, selection.
    b.setInsertionPoint(start);
    SmallVector<Value> sets;
    int64_t sent = 0;
    for (auto [index, parameter] : llvm::zip(bucket.chosen, bucket.parameters)) {
      Value gradient = start.getTensors()[index];
      auto [n, k, capacity] = sizeOf(gradient);
      sent += k;
      Location loc = gradient.getLoc();
      auto param = module.lookupSymbol<nn::ParameterOp>(parameter);
      auto type = llvm::cast<RankedTensorType>(gradient.getType());
      auto f32Type = RankedTensorType::get(type.getShape(), f32);
      if (!param || param.getType() != f32Type)
        return start.emitOpError("top-k: @")
               << parameter << " is not an f32 parameter of its gradient's shape";
      std::string accumulation = ("graphc.dgc." + parameter + ".accumulation").str();
      // u does the work of momentum SGD's buffer (before masking, u is
      // that buffer), under its name: a plain momentum plan's checkpoint
      // hands its momentum over.
      std::string momentumState = (parameter + ".momentum_buffer").str();
      if (module.lookupSymbol(accumulation) || module.lookupSymbol(momentumState))
        return start.emitOpError("top-k's state for @")
               << parameter << " is already declared (a gradient applied twice?)";
      Value g = gradient;
      if (!type.getElementType().isF32())
        g = b.create<nn::CastOp>(loc, g, TypeAttr::get(f32));
      Value corrected = g;
      if (weightDecay > 0.0) {
        Value w = b.create<nn::LoadOp>(loc, f32Type, parameter);
        corrected = b.create<nn::AddOp>(
            loc, g, b.create<nn::MulOp>(loc, w, splatLike(b, loc, w, weightDecay)));
      }
      Value u = corrected;
      if (momentum > 0.0) {
        declareState(b, module, momentumState, f32Type);
        Value previous = b.create<nn::LoadOp>(loc, f32Type, momentumState);
        u = b.create<nn::AddOp>(
            loc, b.create<nn::MulOp>(loc, previous, splatLike(b, loc, previous, momentum)),
            corrected);
      }
      declareState(b, module, accumulation, f32Type);
      Value v = b.create<nn::AddOp>(loc, b.create<nn::LoadOp>(loc, f32Type, accumulation), u);
      Value count = i64Constant(loc, k);
      if (warmup > 0) {
        // 25% of the entries, then a quarter of that, ... over the warm-up.
        if (!stepCounter) {
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPointToStart(&body);
          stepCounter = loadStepCounter(b, step.getLoc(), module);
        }
        double density = std::pow(0.25, 4);
        for (int stage = 3; stage >= 0; --stage, density *= 4.0) {
          const int64_t stageCount = std::min(
              capacity,
              std::max(k, static_cast<int64_t>(std::ceil(density * static_cast<double>(n)))));
          const int64_t end = (warmup * (stage + 1) + 3) / 4;
          Value before = b.create<nn::CmpOp>(loc, nn::CmpPredicate::lt, stepCounter,
                                             i64Constant(loc, end));
          count = b.create<nn::SelectOp>(loc, before, i64Constant(loc, stageCount), count);
        }
      }
      auto values = RankedTensorType::get({capacity}, f32);
      auto indices = RankedTensorType::get({capacity}, b.getI32Type());
      auto select = b.create<nn::TopkSelectOp>(loc, values, indices, v, count);
      b.create<nn::AssignOp>(loc, accumulation,
                             b.create<nn::ZeroAtOp>(loc, v, select.getIndices()));
      if (momentum > 0.0)
        b.create<nn::AssignOp>(loc, momentumState,
                               b.create<nn::ZeroAtOp>(loc, u, select.getIndices()));
      // The gradient's own memory receives the mean of the ranks' sets.
      sets.append({select.getValues(), select.getIndices(), g});
    }
    auto mean = dist::ReductionAttr::get(module.getContext(), dist::Reduction::mean);
    auto sparseStart = b.create<dist::AllreduceStartOp>(
        start.getLoc(), ValueRange(sets).getTypes(), sets, mean, start.getBucketAttr(),
        TypeAttr(), b.getUnitAttr(), b.getI64IntegerAttr(sent));

    // Where the bucket's wait was: the dense means go to the optimizer,
    // which adds no momentum or weight decay of its own to them.
    dist::AllreduceWaitOp wait = bucket.wait;
    b.setInsertionPoint(bucket.keptWait ? bucket.keptWait.getOperation() : wait.getOperation());
    auto sparseWait = b.create<dist::AllreduceWaitOp>(
        start.getLoc(), sparseStart.getResultTypes(), sparseStart.getResults());
    for (auto [i, index] : llvm::enumerate(bucket.chosen)) {
      Value dense = sparseWait.getResult(3 * i + 2);
      for (Operation *user : wait.getResult(index).getUsers())
        if (llvm::isa<nn::ApplyGradientOp>(user))
          user->setAttr(kMomentumAppliedAttr, b.getUnitAttr());
      wait.getResult(index).replaceAllUsesWith(dense);
    }
    return success();
  };
  FailureOr<Counts> counts = rewriteBuckets(step, b, choose, rewrite);
  if (failed(counts))
    return failure();
  module->setAttr(kTopkCompressionAttr, b.getDenseI64ArrayAttr({counts->chosen, counts->total,
                                                               counts->before, counts->after}));
  return success();
}

} // namespace graphc
