//===- Optimizer.cpp - the optimizer update of every parameter ------------===//
//
// Implements --graphc-optimizer: replaces each nn.apply_gradient with the update
// rule of the chosen optimizer, applied in place on the parameter and its
// momentum buffer, with the learning rate computed on the device from the step
// counter, which the step then increments.
//
//===----------------------------------------------------------------------===//

#include "compiler/Transforms/Passes.h"

#include "compiler/Transforms/BuildUtils.h"
#include "compiler/Transforms/GradCompression.h"
#include "dialects/nn/IR/NNOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>
#include <limits>

#define DEBUG_TYPE "graphc-optimizer"

namespace graphc {
#define GEN_PASS_DEF_OPTIMIZER
#include "compiler/Transforms/Passes.h.inc"
} // namespace graphc

using namespace mlir;

namespace graphc {
namespace {

enum class Kind { Sgd, Momentum, Nesterov, Lars, Adam, AdamW };

/// `value` as printf's %g writes it: 0.999, 1e-08.
std::string num(double value) { return llvm::formatv("{0}", llvm::format("%g", value)).str(); }

struct OptimizerPass : impl::OptimizerBase<OptimizerPass> {
  using OptimizerBase::OptimizerBase;

  /// Checks the options; reports the first bad one on the module.
  LogicalResult checkOptions(ModuleOp module) {
    auto bad = [&](const llvm::Twine &message) {
      return module.emitError("graphc-optimizer: ") << message;
    };
    if (optimizer == "sgd")
      kind = Kind::Sgd;
    else if (optimizer == "momentum")
      kind = Kind::Momentum;
    else if (optimizer == "nesterov")
      kind = Kind::Nesterov;
    else if (optimizer == "lars")
      kind = Kind::Lars;
    else if (optimizer == "adam")
      kind = Kind::Adam;
    else if (optimizer == "adamw")
      kind = Kind::AdamW;
    else
      return bad("unknown optimizer '" + optimizer +
                 "'; expected sgd, momentum, nesterov, lars, adam or adamw");
    if (lrDecay == "constant")
      decay = nn::LrDecay::constant;
    else if (lrDecay == "cosine")
      decay = nn::LrDecay::cosine;
    else if (lrDecay == "step")
      decay = nn::LrDecay::step;
    else
      return bad("unknown lr-decay '" + lrDecay + "'; expected constant, cosine or step");
    // The update kernels compute in f32: every rate, decay and epsilon is a
    // finite f32, and one that is not 0 is a normal one (1e-50 would become
    // 0, 1e39 infinity, and inf an update that only ever diverges).
    auto f32 = [](double v) {
      return v == 0.0 || (std::fabs(v) >= std::numeric_limits<float>::min() &&
                          std::fabs(v) <= std::numeric_limits<float>::max());
    };
    for (auto [name, value] : {std::pair<const char *, double>{"lr", lr},
                               {"final-lr", finalLr},
                               {"weight-decay", weightDecay},
                               {"adam-eps", epsilon},
                               {"lars-eta", larsEta},
                               {"momentum", momentum},
                               {"adam-beta1", beta1},
                               {"adam-beta2", beta2},
                               {"decay-gamma", decayGamma},
                               {"clip-grad-norm", clipGradNorm}})
      if (!std::isnan(value) && !f32(value))
        return bad(std::string(name) + " must be 0 or a normal, finite f32 (magnitude in [" +
                   num(std::numeric_limits<float>::min()) + ", " +
                   num(std::numeric_limits<float>::max()) + "]), got " + num(value));
    if (!(lr > 0.0))
      return bad("lr must be > 0, got " + num(lr));
    if (!(finalLr >= 0.0))
      return bad("final-lr must be >= 0, got " + num(finalLr));
    bool adam = kind == Kind::Adam || kind == Kind::AdamW;
    if (!adam && kind != Kind::Sgd && !(momentum > 0.0 && momentum < 1.0))
      return bad("momentum must be in (0, 1), got " + num(momentum));
    if (!(weightDecay >= 0.0))
      return bad("weight-decay must be >= 0, got " + num(weightDecay));
    if (adam && !(beta1 >= 0.0 && beta1 < 1.0 && beta2 >= 0.0 && beta2 < 1.0))
      return bad("adam-beta1 and adam-beta2 must be in [0, 1), got " + num(beta1) + " and " +
                 num(beta2));
    if (adam && !(epsilon > 0.0))
      return bad("adam-eps must be > 0, got " + num(epsilon));
    if (kind == Kind::Lars && !(larsEta > 0.0))
      return bad("lars-eta must be > 0, got " + num(larsEta));
    if (!(clipGradNorm >= 0.0))
      return bad("clip-grad-norm must be >= 0 (0: no clipping), got " + num(clipGradNorm));
    if (!(emaDecay >= 0.0 && emaDecay < 1.0))
      return bad("ema-decay must be in [0, 1) (0: no average), got " + num(emaDecay));
    if (warmupSteps < 0)
      return bad(llvm::formatv("warmup-steps must be >= 0, got {0}", int64_t(warmupSteps))
                     .str());
    if (decay == nn::LrDecay::cosine && totalSteps <= warmupSteps)
      return bad("lr-decay=cosine needs total-steps > warmup-steps");
    if (decay == nn::LrDecay::step && (decayStepSize < 1 || !(decayGamma > 0.0) ||
                                       decayGamma > 1.0))
      return bad("lr-decay=step needs decay-step-size >= 1 and decay-gamma in (0, 1]");
    return success();
  }

  /// The state `<param>.<suffix>` (PyTorch's optimizer state names), declared
  /// zero-initialized on first use.
  StringRef stateOf(OpBuilder &b, ModuleOp module, nn::ParameterOp param,
                    StringRef suffix) {
    std::string name = (param.getSymName() + "." + suffix).str();
    if (!module.lookupSymbol(name)) {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointAfter(param);
      b.create<nn::StateOp>(param.getLoc(), name, param.getType(),
                            nn::Initializer::zeros, /*init_value=*/nullptr);
    }
    return llvm::cast<nn::StateOp>(module.lookupSymbol(name)).getSymName();
  }

  /// Algorithm: 1) at the first nn.apply_gradient, load the step counter and
  /// compute the learning rate; 2) replace each nn.apply_gradient with the
  /// update op (weight decay off for rank-1 parameters, i.e. batch-norm scales
  /// and shifts and biases, unless exclude-bn-bias=false; LARS falls back to
  /// momentum SGD for them) and nn.assign the parameter and its buffer; 3) at
  /// the end of the step, increment the step counter.
  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (failed(checkOptions(module)))
      return signalPassFailure();
    auto step = module.lookupSymbol<func::FuncOp>("train_step");
    if (!step || step.isExternal()) {
      module.emitError("graphc-optimizer needs @train_step (run graphc-autodiff first)");
      return signalPassFailure();
    }
    SmallVector<nn::ApplyGradientOp> updates(step.getOps<nn::ApplyGradientOp>());
    if (updates.empty()) {
      step.emitError("@train_step applies no gradient");
      return signalPassFailure();
    }
    // One skip flag for the whole step, or none.
    for (nn::ApplyGradientOp update : updates)
      if (update.getSkip() != updates.front().getSkip()) {
        update.emitError("graphc-optimizer: every nn.apply_gradient of a step must share "
                         "one skip_if flag");
        return signalPassFailure();
      }

    // Read before the updates are replaced (and erased).
    Value stepSkip = updates.front().getSkip();
    OpBuilder b(updates.front());
    Location stepLoc = step.getLoc();
    Value counter = loadStepCounter(b, stepLoc, module);
    NamedAttrList schedule;
    schedule.append("base_lr", b.getF64FloatAttr(lr));
    schedule.append("decay", nn::LrDecayAttr::get(&getContext(), decay));
    schedule.append("warmup_steps", b.getI64IntegerAttr(warmupSteps));
    if (decay == nn::LrDecay::cosine) {
      schedule.append("total_steps", b.getI64IntegerAttr(totalSteps));
      schedule.append("final_lr", b.getF64FloatAttr(finalLr));
    } else if (decay == nn::LrDecay::step) {
      schedule.append("step_size", b.getI64IntegerAttr(decayStepSize));
      schedule.append("gamma", b.getF64FloatAttr(decayGamma));
    }
    Value rate =
        b.create<nn::LrScheduleOp>(stepLoc, ValueRange{counter}, schedule.getAttrs())
            .getResult();
    // Adam's bias corrections of step t = counter + 1: 1 / (1 - beta1^t) and
    // 1 / sqrt(1 - beta2^t), with beta^t = exp(t * ln beta); rank-0 ops the
    // fusion pass makes one small kernel of.
    Value corrections[2];
    if (kind == Kind::Adam || kind == Kind::AdamW) {
      Type f32 = b.getF32Type();
      Value t = b.create<nn::AddOp>(
          stepLoc, b.create<nn::CastOp>(stepLoc, counter, TypeAttr::get(f32)),
          scalarConstant(b, stepLoc, f32, 1.0));
      auto complement = [&](double beta) -> Value {
        Value power = b.create<nn::ExpOp>(
            stepLoc, b.create<nn::MulOp>(stepLoc, t,
                                         scalarConstant(b, stepLoc, f32, std::log(beta))));
        return b.create<nn::SubOp>(stepLoc, scalarConstant(b, stepLoc, f32, 1.0), power);
      };
      corrections[0] = b.create<nn::DivOp>(stepLoc, scalarConstant(b, stepLoc, f32, 1.0),
                                           complement(beta1));
      corrections[1] = b.create<nn::RsqrtOp>(stepLoc, complement(beta2));
    }

    // Gradient clipping: one factor for every gradient, computed where the
    // last one is ready; every update moves after it. Each factor of an
    // update's `scaled_by` (loss scaling's unscale) is multiplied once.
    DenseMap<Value, Value> clipped;
    if (clipGradNorm > 0.0) {
      Value clip = clipFactor(b, stepLoc, module, updates, stepSkip);
      if (!clip)
        return signalPassFailure();
      for (nn::ApplyGradientOp update : updates) {
        Value &scale = clipped[update.getGradScale()];
        if (!scale)
          scale = update.getGradScale()
                      ? b.create<nn::MulOp>(stepLoc, update.getGradScale(), clip).getResult()
                      : clip;
      }
      for (nn::ApplyGradientOp update : ArrayRef(updates).drop_back())
        update->moveBefore(updates.back());
    }

    for (nn::ApplyGradientOp update : updates) {
      b.setInsertionPoint(update);
      Location loc = update.getLoc();
      auto param = module.lookupSymbol<nn::ParameterOp>(update.getParameter());
      bool excluded = excludeBnBias && param.getType().getRank() == 1;
      double decayFactor = excluded ? 0.0 : double(weightDecay);
      FloatAttr wd = b.getF64FloatAttr(decayFactor);
      Value p = b.create<nn::LoadOp>(loc, param.getType(), param.getSymName());
      Value g = update.getGradient();
      // Loss scaling's unscale factor and overflow flag (graphc-mixed-precision).
      Value gs = update.getGradScale(), skip = update.getSkip();
      if (Value scale = clipped.lookup(gs))
        gs = scale;
      // Deep gradient compression applied momentum and weight decay before
      // it sparsified the gradient: what is left is a plain SGD step.
      if (update->hasAttr(kMomentumAppliedAttr)) {
        if (kind != Kind::Sgd && kind != Kind::Momentum) {
          update.emitError("grad-compression=topk applies momentum before the allreduce, as "
                           "SGD with momentum does; it does not combine with --optimizer=")
              << optimizer;
          return signalPassFailure();
        }
        Value next = b.create<nn::SgdOp>(loc, p, g, rate, b.getF64FloatAttr(0.0), gs, skip);
        b.create<nn::AssignOp>(loc, param.getSymName(), next);
        update.erase();
        continue;
      }
      if (kind == Kind::Sgd) {
        Value next = b.create<nn::SgdOp>(loc, p, g, rate, wd, gs, skip);
        b.create<nn::AssignOp>(loc, param.getSymName(), next);
      } else if (kind == Kind::Adam || kind == Kind::AdamW) {
        StringRef mName = stateOf(b, module, param, "exp_avg");
        StringRef vName = stateOf(b, module, param, "exp_avg_sq");
        Value m = b.create<nn::LoadOp>(loc, param.getType(), mName);
        Value v = b.create<nn::LoadOp>(loc, param.getType(), vName);
        auto rule = b.create<nn::AdamOp>(
            loc, p, g, m, v, rate, corrections[0], corrections[1],
            b.getF64FloatAttr(beta1), b.getF64FloatAttr(beta2),
            b.getF64FloatAttr(epsilon), wd,
            kind == Kind::AdamW ? b.getUnitAttr() : UnitAttr(), gs, skip);
        b.create<nn::AssignOp>(loc, param.getSymName(), rule.getNewParam());
        b.create<nn::AssignOp>(loc, mName, rule.getNewExpAvg());
        b.create<nn::AssignOp>(loc, vName, rule.getNewExpAvgSq());
      } else {
        StringRef velocityName = stateOf(b, module, param, "momentum_buffer");
        Value v = b.create<nn::LoadOp>(loc, param.getType(), velocityName);
        FloatAttr m = b.getF64FloatAttr(momentum);
        Operation *rule;
        if (kind == Kind::Lars && !excluded)
          rule = b.create<nn::LarsOp>(loc, p, g, v, rate, m, wd,
                                      b.getF64FloatAttr(larsEta), gs, skip);
        else
          rule = b.create<nn::SgdMomentumOp>(
              loc, p, g, v, rate, m, wd,
              kind == Kind::Nesterov ? b.getUnitAttr() : UnitAttr(), gs, skip);
        b.create<nn::AssignOp>(loc, param.getSymName(), rule->getResult(0));
        b.create<nn::AssignOp>(loc, velocityName, rule->getResult(1));
      }
      update.erase();
    }

    if (emaDecay > 0.0 && failed(averageWeights(b, module, step)))
      return signalPassFailure();

    // A step skipped on overflow (loss scaling) is not counted: the schedule
    // and Adam's bias correction see applied updates only.
    b.setInsertionPoint(step.getBody().front().getTerminator());
    Value increment = scalarConstant(b, stepLoc, b.getI64Type(), 1);
    if (stepSkip)
      increment = b.create<nn::CastOp>(
          stepLoc,
          b.create<nn::SubOp>(stepLoc, scalarConstant(b, stepLoc, b.getF32Type(), 1.0),
                              stepSkip),
          TypeAttr::get(b.getI64Type()));
    Value next = b.create<nn::AddOp>(stepLoc, counter, increment);
    b.create<nn::AssignOp>(stepLoc, kStepCounter, next);
  }

  /// min(1, clip-grad-norm / (norm + 1e-6)), the norm being the L2 norm of
  /// every update's gradient times its `scaled_by` (the gradients loss scaling
  /// unscales), built at `b`'s point before the last update: one
  /// nn.sum_squares pass over the gradients that share a scale (all of them:
  /// mixed precision gives every update the same one), its lanes summed, times
  /// the scale squared. The sums have a fixed order, so every run and every
  /// rank (whose gradients the allreduce made equal) gets the same factor.
  /// `skip` is the step's overflow flag (loss scaling), or null. Null, with
  /// an error, for an update that cannot be clipped.
  Value clipFactor(OpBuilder &b, Location loc, ModuleOp module,
                   ArrayRef<nn::ApplyGradientOp> updates, Value skip) {
    b.setInsertionPoint(updates.back());
    Type f32 = b.getF32Type();
    llvm::MapVector<Value, SmallVector<Value>> byScale;
    for (nn::ApplyGradientOp update : updates) {
      if (update->hasAttr(kMomentumAppliedAttr)) {
        update.emitError("graphc-optimizer: clip-grad-norm does not combine with "
                         "grad-compression=topk, whose update is no longer the gradient");
        return {};
      }
      byScale[update.getGradScale()].push_back(update.getGradient());
    }
    Value total;
    for (auto &[scale, gradients] : byScale) {
      Value sums = b.create<nn::SumSquaresOp>(loc, gradients);
      Value sum = b.create<nn::ReduceSumOp>(loc, sums, b.getDenseI64ArrayAttr({0}), UnitAttr());
      if (scale)
        sum = b.create<nn::MulOp>(loc, sum, b.create<nn::MulOp>(loc, scale, scale));
      total = total ? b.create<nn::AddOp>(loc, total, sum).getResult() : sum;
    }
    // sqrt(total) as 1 / rsqrt(total): 0 for 0, infinity for infinity.
    Value one = scalarConstant(b, loc, f32, 1.0);
    Value norm = b.create<nn::DivOp>(loc, one, b.create<nn::RsqrtOp>(loc, total));
    // The norm, for graphrun to report: a step skipped on overflow (whose
    // norm is not finite) leaves the last applied step's.
    auto scalar = RankedTensorType::get({}, f32);
    if (!module.lookupSymbol(kGradNormState)) {
      // Last: the states before it keep their places, and with them their
      // seeded initial values.
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToEnd(module.getBody());
      b.create<nn::StateOp>(module.getLoc(), kGradNormState, scalar, nn::Initializer::zeros,
                            /*init_value=*/nullptr);
    }
    Value recorded = norm;
    if (skip)
      recorded = b.create<nn::SelectOp>(
          loc, b.create<nn::CmpOp>(loc, nn::CmpPredicate::ne, skip, scalarConstant(b, loc, f32, 0.0)),
          b.create<nn::LoadOp>(loc, scalar, kGradNormState), norm);
    b.create<nn::AssignOp>(loc, kGradNormState, recorded);
    Value factor = b.create<nn::DivOp>(
        loc, scalarConstant(b, loc, f32, clipGradNorm),
        b.create<nn::AddOp>(loc, norm, scalarConstant(b, loc, f32, 1e-6)));
    Value below = b.create<nn::CmpOp>(loc, nn::CmpPredicate::lt, factor, one);
    return b.create<nn::SelectOp>(loc, below, factor, one);
  }

  /// The weights' exponential moving average, at the end of the step: for
  /// every parameter and every float state of the model's own (not graphc.*,
  /// not an optimizer's slot), `ema += w (x - ema)` with w = 1 - ema-decay,
  /// or 1 at the first update, which makes it a copy of x (the averages start
  /// at zero). A step skipped on overflow moves the averages towards
  /// unchanged weights, as PyTorch's does after a skipped `scaler.step`.
  /// Then @eval_ema_step: @eval_step reading the averages.
  LogicalResult averageWeights(OpBuilder &b, ModuleOp module, func::FuncOp step) {
    llvm::StringSet<> parameters;
    for (auto param : module.getOps<nn::ParameterOp>())
      parameters.insert(param.getSymName());
    auto slotOfParameter = [&](StringRef name) {
      auto [owner, slot] = name.rsplit('.');
      return !slot.empty() && parameters.contains(owner) &&
             llvm::is_contained({"momentum_buffer", "exp_avg", "exp_avg_sq"}, slot);
    };
    SmallVector<std::pair<StringRef, RankedTensorType>> averaged;
    for (Operation &op : *module.getBody()) {
      auto name = op.getAttrOfType<StringAttr>(SymbolTable::getSymbolAttrName());
      auto typeAttr = op.getAttrOfType<TypeAttr>("type");
      if (!isa<nn::ParameterOp, nn::StateOp>(op) || !name || !typeAttr)
        continue;
      auto type = llvm::dyn_cast<RankedTensorType>(typeAttr.getValue());
      if (!type || !isa<FloatType>(type.getElementType()) ||
          name.getValue().starts_with("graphc.") || slotOfParameter(name.getValue()))
        continue;
      averaged.push_back({name.getValue(), type});
    }
    // Last in the module: the other variables keep their places and seeded
    // initial values, so a plan with the average trains the same weights.
    auto declare = [&](StringRef name, RankedTensorType type) {
      if (module.lookupSymbol(name))
        return;
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToEnd(module.getBody());
      b.create<nn::StateOp>(module.getLoc(), name, type, nn::Initializer::zeros,
                            /*init_value=*/nullptr);
    };
    Location loc = step.getLoc();
    Type f32 = b.getF32Type(), i64 = b.getI64Type();
    auto scalarI64 = RankedTensorType::get({}, i64);
    // The averages are this pass's own: a module that declares one already
    // (graphc-opt input; graphc's verifier refuses graphc.* names) is refused.
    for (StringRef taken : {StringRef(kEmaUpdatesState), StringRef(kEmaPrefix)})
      for (Operation &op : *module.getBody())
        if (auto symbol = op.getAttrOfType<StringAttr>(SymbolTable::getSymbolAttrName());
            symbol && (symbol.getValue() == taken ||
                       (taken.ends_with(".") && symbol.getValue().starts_with(taken))))
          return op.emitError("graphc-optimizer: @")
                 << symbol.getValue() << " is the weights' average's own name";
    declare(kEmaUpdatesState, scalarI64);
    llvm::StringMap<std::string> averageOf;
    for (auto [name, type] : averaged) {
      averageOf[name] = (kEmaPrefix + name).str();
      declare(averageOf[name], type);
    }

    b.setInsertionPoint(step.getBody().front().getTerminator());
    Value updates = b.create<nn::LoadOp>(loc, scalarI64, kEmaUpdatesState);
    Value first = b.create<nn::CmpOp>(loc, nn::CmpPredicate::eq, updates,
                                      scalarConstant(b, loc, i64, 0.0));
    Value weight = b.create<nn::SelectOp>(loc, first, scalarConstant(b, loc, f32, 1.0),
                                          scalarConstant(b, loc, f32, 1.0 - emaDecay));
    for (auto [name, type] : averaged) {
      // After the update's nn.assign: the new value.
      Value x = b.create<nn::LoadOp>(loc, type, name);
      Value ema = b.create<nn::LoadOp>(loc, type, averageOf[name]);
      Value w = weight;
      if (type.getElementType() != f32)
        w = b.create<nn::CastOp>(loc, w, TypeAttr::get(type.getElementType()));
      if (type.getRank() > 0)
        w = b.create<nn::BroadcastOp>(loc, w, x, b.getDenseI64ArrayAttr({}));
      Value next = b.create<nn::AddOp>(
          loc, ema, b.create<nn::MulOp>(loc, w, b.create<nn::SubOp>(loc, x, ema)));
      b.create<nn::AssignOp>(loc, averageOf[name], next);
    }
    b.create<nn::AssignOp>(
        loc, kEmaUpdatesState,
        b.create<nn::AddOp>(loc, updates, scalarConstant(b, loc, i64, 1.0)));

    // @eval_ema_step: @eval_step on the averages.
    auto eval = module.lookupSymbol<func::FuncOp>("eval_step");
    if (!eval || eval.isExternal())
      return success();
    if (module.lookupSymbol("eval_ema_step"))
      return module.emitError("graphc-optimizer: the module has an @eval_ema_step already");
    b.setInsertionPointAfter(eval);
    auto averagedEval = cast<func::FuncOp>(b.clone(*eval));
    averagedEval.setSymName("eval_ema_step");
    averagedEval.walk([&](nn::LoadOp load) {
      auto it = averageOf.find(load.getVariable());
      if (it != averageOf.end())
        load.setVariableAttr(FlatSymbolRefAttr::get(b.getContext(), it->second));
    });
    return success();
  }

  Kind kind = Kind::Sgd;
  nn::LrDecay decay = nn::LrDecay::constant;
};

} // namespace
} // namespace graphc
