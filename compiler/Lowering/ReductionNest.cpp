//===- ReductionNest.cpp - precise, vectorizable reduction loops ----------===//
//
// Algorithm (see ReductionNest.h for why):
//  1) split the dims into parallel and reduced ones (in their order);
//  2) per output element (scf.parallel over the parallel dims, or straight
//     code when there are none), carry one accumulator per reduced output
//     (float64 for a float32 sum) through scf.for loops over the outer
//     reduced dims;
//  3) in the innermost reduced dim, run blocks of (at most) kBlockGroups
//     groups of kLanes consecutive iterations, each lane its own accumulator,
//     each block from zero into per-lane totals; then the remaining
//     iterations in a loop of their own, added to lane 0; combine the lanes
//     as a tree. The body is emitted kLanes + 1 times, whatever the shapes;
//  4) scale, and store every reduced output once.
//
//===----------------------------------------------------------------------===//

#include "compiler/Lowering/ReductionNest.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <cmath>
#include <limits>

using namespace mlir;

namespace graphc {
namespace {

using BodyFn = llvm::function_ref<SmallVector<Value>(OpBuilder &, Location, ValueRange)>;

class NestBuilder {
public:
  NestBuilder(Location loc, ValueRange inputs, ValueRange outputs, ArrayRef<AffineMap> maps,
              ArrayRef<int64_t> extents, ArrayRef<Accumulate> accumulate,
              ArrayRef<double> scales, BodyFn body)
      : loc(loc), inputs(inputs), outputs(outputs), maps(maps), extents(extents),
        accumulate(accumulate), scales(scales), body(body), ivs(extents.size()) {
    for (auto [o, kind] : llvm::enumerate(accumulate))
      if (kind != Accumulate::None)
        reduced.push_back(o);
  }

  void build(OpBuilder &b, ArrayRef<utils::IteratorType> iterators);

private:
  Type elementType(unsigned output) const {
    return llvm::cast<MemRefType>(outputs[output].getType()).getElementType();
  }
  // What an output accumulates in: float32 sums in float64 (the contributions
  // stay float32; see ReductionNest.h), everything else in its own type.
  Type accumulatorType(unsigned output) const {
    Type type = elementType(output);
    if (accumulate[output] == Accumulate::Sum && type.isF32())
      return Float64Type::get(type.getContext());
    return type;
  }

  Value constIndex(OpBuilder &b, int64_t v) { return b.create<arith::ConstantIndexOp>(loc, v); }
  Value identity(OpBuilder &b, unsigned output);
  Value combine(OpBuilder &b, unsigned output, Value x, Value y);
  SmallVector<Value> indices(OpBuilder &b, AffineMap map);
  SmallVector<Value> iterate(OpBuilder &b, ValueRange accumulators);
  SmallVector<Value> lanesOfGroup(OpBuilder &b, Value base, ValueRange lanes);
  SmallVector<Value> innermost(OpBuilder &b);
  SmallVector<Value> outerLevels(OpBuilder &b, size_t level, ValueRange accumulators);
  void storeResults(OpBuilder &b, ValueRange finals);

  Location loc;
  ValueRange inputs, outputs;
  ArrayRef<AffineMap> maps;
  ArrayRef<int64_t> extents;
  ArrayRef<Accumulate> accumulate;
  ArrayRef<double> scales;
  BodyFn body;
  SmallVector<unsigned> reduced;      // outputs with an accumulator, in order
  SmallVector<unsigned> reducedDims;  // in order; the last is the innermost
  SmallVector<Value> ivs;             // the current iteration, per dim
  SmallVector<Value> undefined;       // per output: what the body sees for it
};

Value NestBuilder::identity(OpBuilder &b, unsigned output) {
  Type type = accumulatorType(output);
  bool max = accumulate[output] == Accumulate::Max;
  if (llvm::isa<FloatType>(type))
    return b.create<arith::ConstantOp>(
        loc, type, b.getFloatAttr(type, max ? -INFINITY : 0.0));
  return b.create<arith::ConstantOp>(
      loc, type, b.getIntegerAttr(type, max ? std::numeric_limits<int64_t>::min() : 0));
}

Value NestBuilder::combine(OpBuilder &b, unsigned output, Value x, Value y) {
  bool isFloat = llvm::isa<FloatType>(x.getType());
  if (accumulate[output] == Accumulate::Max)
    return isFloat ? b.create<arith::MaximumFOp>(loc, x, y).getResult()
                   : b.create<arith::MaxSIOp>(loc, x, y).getResult();
  return isFloat ? b.create<arith::AddFOp>(loc, x, y).getResult()
                 : b.create<arith::AddIOp>(loc, x, y).getResult();
}

SmallVector<Value> NestBuilder::indices(OpBuilder &b, AffineMap map) {
  SmallVector<Value> result;
  for (AffineExpr expr : map.getResults())
    result.push_back(b.create<affine::AffineApplyOp>(
        loc, AffineMap::get(map.getNumDims(), 0, expr), ivs));
  return result;
}

// One iteration at `ivs`: load every input, run the body, store the outputs
// that are not reduced; the accumulators updated with the contributions.
SmallVector<Value> NestBuilder::iterate(OpBuilder &b, ValueRange accumulators) {
  // The body returns each reduced output's contribution, which is combined
  // here at the accumulator's precision.
  SmallVector<Value> scalars;
  for (auto [i, input] : llvm::enumerate(inputs))
    scalars.push_back(b.create<memref::LoadOp>(loc, input, indices(b, maps[i])));
  llvm::append_range(scalars, undefined);
  SmallVector<Value> results = body(b, loc, scalars);
  SmallVector<Value> updated;
  unsigned next = 0;
  for (unsigned o = 0; o < outputs.size(); ++o) {
    if (accumulate[o] != Accumulate::None) {
      Value contribution = results[o];
      if (accumulatorType(o) != contribution.getType())
        contribution = b.create<arith::ExtFOp>(loc, accumulatorType(o), contribution);
      updated.push_back(combine(b, o, accumulators[next++], contribution));
    } else {
      b.create<memref::StoreOp>(loc, results[o], outputs[o],
                                indices(b, maps[inputs.size() + o]));
    }
  }
  return updated;
}

// kLanes consecutive iterations of the innermost reduced dim from `base`,
// iteration l into lane l. `lanes` holds kLanes values per reduced output.
SmallVector<Value> NestBuilder::lanesOfGroup(OpBuilder &b, Value base, ValueRange lanes) {
  SmallVector<Value> out(lanes.begin(), lanes.end());
  const unsigned dim = reducedDims.back();
  for (int64_t l = 0; l < kLanes; ++l) {
    ivs[dim] = b.create<arith::AddIOp>(loc, base, constIndex(b, l));
    SmallVector<Value> accumulators;
    for (size_t a = 0; a < reduced.size(); ++a)
      accumulators.push_back(out[a * kLanes + l]);
    SmallVector<Value> updated = iterate(b, accumulators);
    for (size_t a = 0; a < reduced.size(); ++a)
      out[a * kLanes + l] = updated[a];
  }
  return out;
}

SmallVector<Value> NestBuilder::innermost(OpBuilder &b) {
  const unsigned dim = reducedDims.back();
  const int64_t extent = extents[dim];
  const int64_t groups = extent / kLanes;
  const int64_t blocks = (groups + kBlockGroups - 1) / kBlockGroups;
  auto identities = [&](OpBuilder &ib, int64_t copies) {
    SmallVector<Value> values;
    for (unsigned output : reduced)
      for (int64_t l = 0; l < copies; ++l)
        values.push_back(identity(ib, output));
    return values;
  };
  SmallVector<Value> lanes = identities(b, kLanes);
  // Whole groups, kBlockGroups to a block (the last block may be shorter):
  // one copy of the body per lane.
  if (groups > 0) {
    auto loop = b.create<scf::ForOp>(
        loc, constIndex(b, 0), constIndex(b, blocks), constIndex(b, 1), lanes,
        [&](OpBuilder &nb, Location, Value block, ValueRange totals) {
          Value first = nb.create<arith::MulIOp>(loc, block, constIndex(nb, kBlockGroups));
          Value last = nb.create<arith::MinSIOp>(
              loc, nb.create<arith::AddIOp>(loc, first, constIndex(nb, kBlockGroups)),
              constIndex(nb, groups));
          auto inner = nb.create<scf::ForOp>(
              loc, first, last, constIndex(nb, 1), identities(nb, kLanes),
              [&](OpBuilder &ib, Location, Value group, ValueRange partial) {
                Value base = ib.create<arith::MulIOp>(loc, group, constIndex(ib, kLanes));
                ib.create<scf::YieldOp>(loc, lanesOfGroup(ib, base, partial));
              });
          SmallVector<Value> merged;
          for (size_t a = 0; a < reduced.size(); ++a)
            for (int64_t l = 0; l < kLanes; ++l)
              merged.push_back(combine(nb, reduced[a], totals[a * kLanes + l],
                                       inner.getResult(a * kLanes + l)));
          nb.create<scf::YieldOp>(loc, merged);
        });
    lanes.assign(loop.getResults().begin(), loop.getResults().end());
  }
  // The last extent % kLanes iterations: a loop of their own, added to lane 0.
  if (extent > groups * kLanes) {
    auto loop = b.create<scf::ForOp>(
        loc, constIndex(b, groups * kLanes), constIndex(b, extent), constIndex(b, 1),
        identities(b, 1), [&](OpBuilder &nb, Location, Value iv, ValueRange tail) {
          ivs[dim] = iv;
          nb.create<scf::YieldOp>(loc, iterate(nb, tail));
        });
    for (size_t a = 0; a < reduced.size(); ++a)
      lanes[a * kLanes] = combine(b, reduced[a], lanes[a * kLanes], loop.getResult(a));
  }
  // The lanes as a tree: (0+1)+(2+3), ...
  SmallVector<Value> partials;
  for (size_t a = 0; a < reduced.size(); ++a) {
    SmallVector<Value> level(lanes.begin() + a * kLanes, lanes.begin() + (a + 1) * kLanes);
    while (level.size() > 1) {
      SmallVector<Value> next;
      for (size_t i = 0; i < level.size(); i += 2)
        next.push_back(combine(b, reduced[a], level[i], level[i + 1]));
      level = std::move(next);
    }
    partials.push_back(level.front());
  }
  return partials;
}

SmallVector<Value> NestBuilder::outerLevels(OpBuilder &b, size_t level,
                                            ValueRange accumulators) {
  if (level + 1 == reducedDims.size()) {
    SmallVector<Value> partials = innermost(b);
    SmallVector<Value> result;
    for (size_t a = 0; a < reduced.size(); ++a)
      result.push_back(combine(b, reduced[a], accumulators[a], partials[a]));
    return result;
  }
  const unsigned dim = reducedDims[level];
  auto loop = b.create<scf::ForOp>(
      loc, constIndex(b, 0), constIndex(b, extents[dim]), constIndex(b, 1), accumulators,
      [&](OpBuilder &nb, Location, Value iv, ValueRange current) {
        ivs[dim] = iv;
        nb.create<scf::YieldOp>(loc, outerLevels(nb, level + 1, current));
      });
  return SmallVector<Value>(loop.getResults().begin(), loop.getResults().end());
}

void NestBuilder::storeResults(OpBuilder &b, ValueRange finals) {
  // A reduced output's map reads no reduced dim; their loop values are out of
  // scope here, so the maps get zeros for them.
  for (unsigned d : reducedDims)
    ivs[d] = constIndex(b, 0);
  for (auto [a, output] : llvm::enumerate(reduced)) {
    Value value = finals[a];
    if (scales[output] != 1.0)
      value = b.create<arith::MulFOp>(
          loc, value,
          b.create<arith::ConstantOp>(loc, value.getType(),
                                      b.getFloatAttr(value.getType(), scales[output])));
    if (value.getType() != elementType(output))
      value = b.create<arith::TruncFOp>(loc, elementType(output), value);
    b.create<memref::StoreOp>(loc, value, outputs[output],
                              indices(b, maps[inputs.size() + output]));
  }
}

void NestBuilder::build(OpBuilder &b, ArrayRef<utils::IteratorType> iterators) {
  SmallVector<unsigned> parallelDims;
  for (auto [d, kind] : llvm::enumerate(iterators))
    (kind == utils::IteratorType::parallel ? parallelDims : reducedDims).push_back(d);
  for (unsigned o = 0; o < outputs.size(); ++o) {
    Type type = elementType(o);
    TypedAttr zero = llvm::isa<FloatType>(type) ? TypedAttr(b.getFloatAttr(type, 0.0))
                                                : TypedAttr(b.getIntegerAttr(type, 0));
    undefined.push_back(b.create<arith::ConstantOp>(loc, type, zero));
  }
  auto perElement = [&](OpBuilder &nb) {
    SmallVector<Value> start;
    for (unsigned output : reduced)
      start.push_back(identity(nb, output));
    storeResults(nb, outerLevels(nb, 0, start));
  };
  if (parallelDims.empty()) {
    perElement(b);
    return;
  }
  SmallVector<Value> lower, upper, steps;
  for (unsigned d : parallelDims) {
    lower.push_back(constIndex(b, 0));
    upper.push_back(constIndex(b, extents[d]));
    steps.push_back(constIndex(b, 1));
  }
  b.create<scf::ParallelOp>(loc, lower, upper, steps,
                            [&](OpBuilder &nb, Location, ValueRange parallelIvs) {
                              for (auto [d, iv] : llvm::zip(parallelDims, parallelIvs))
                                ivs[d] = iv;
                              perElement(nb);
                            });
}

} // namespace

void buildReductionNest(OpBuilder &b, Location loc, ValueRange inputs, ValueRange outputs,
                        ArrayRef<AffineMap> maps, ArrayRef<utils::IteratorType> iterators,
                        ArrayRef<int64_t> extents, ArrayRef<Accumulate> accumulate,
                        ArrayRef<double> scales, BodyFn body) {
  NestBuilder(loc, inputs, outputs, maps, extents, accumulate, scales, body)
      .build(b, iterators);
}

} // namespace graphc
