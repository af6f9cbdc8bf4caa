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
// On CUDA, when the outputs alone would give too few threads, the nest is
// emitted twice (KernelLoops.h), the CUDA variant as a block reduction:
//  5) one block per output element (its parallel ivs from the block id),
//     each thread striding over the flattened reduced range by the block
//     size (the innermost reduced dim fastest: coalesced), one accumulator
//     per reduced output, the body emitted once;
//  6) the block's accumulators as a tree in shared memory, thread 0 scaling
//     and storing (buildBlockReduction).
//
//===----------------------------------------------------------------------===//

#include "compiler/Lowering/ReductionNest.h"

#include "compiler/Lowering/KernelLoops.h"
#include "mlir/Dialect/Affine/IR/AffineOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <limits>

using namespace mlir;

namespace graphc {
namespace {

using BodyFn = llvm::function_ref<SmallVector<Value>(OpBuilder &, Location, ValueRange)>;

void blockTree(OpBuilder &b, Location loc, Value threadId, int64_t block,
               ArrayRef<Value> buffers,
               function_ref<Value(OpBuilder &, Location, unsigned, Value, Value)> combine,
               int64_t lastStride = 1);

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
  void buildColumns(OpBuilder &b, ArrayRef<utils::IteratorType> iterators);
  /// The parallel dims, in order; the reduced ones go to `reducedDims`.
  SmallVector<unsigned> splitDims(ArrayRef<utils::IteratorType> iterators) {
    SmallVector<unsigned> parallelDims;
    reducedDims.clear();
    for (auto [d, kind] : llvm::enumerate(iterators))
      (kind == utils::IteratorType::parallel ? parallelDims : reducedDims).push_back(d);
    return parallelDims;
  }
  void buildColumnChunks(OpBuilder &b, ArrayRef<utils::IteratorType> iterators, int64_t parts);
  void buildGpu(OpBuilder &b, ArrayRef<utils::IteratorType> iterators);
  void buildGpuColumns(OpBuilder &b, ArrayRef<utils::IteratorType> iterators);
  void buildGpuTwoStage(OpBuilder &b, ArrayRef<unsigned> parallelDims, int64_t outputsCount,
                        int64_t count, int64_t parts, int64_t block, ArrayRef<Type> types);

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
  // What the body sees for each output (it must not read them): zeros,
  // created at `b` so that they dominate the uses to come.
  void setUndefined(OpBuilder &b) {
    undefined.clear();
    for (unsigned o = 0; o < outputs.size(); ++o) {
      Type type = elementType(o);
      TypedAttr zero = llvm::isa<FloatType>(type) ? TypedAttr(b.getFloatAttr(type, 0.0))
                                                  : TypedAttr(b.getIntegerAttr(type, 0));
      undefined.push_back(b.create<arith::ConstantOp>(loc, type, zero));
    }
  }
  Value identity(OpBuilder &b, unsigned output);
  Value combine(OpBuilder &b, unsigned output, Value x, Value y);
  SmallVector<Value> indices(OpBuilder &b, AffineMap map);
  SmallVector<Value> iterate(OpBuilder &b, ValueRange accumulators);
  SmallVector<Value> lanesOfGroup(OpBuilder &b, Value base, ValueRange lanes);
  SmallVector<Value> innermost(OpBuilder &b);
  SmallVector<Value> outerLevels(OpBuilder &b, size_t level, ValueRange accumulators);
  SmallVector<Value> columnLevels(OpBuilder &b, size_t level, unsigned column, Value base,
                                  int64_t lanes, ValueRange accumulators);
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
  // The smallest value of the integer's own width (an int64 minimum would
  // be truncated to 0 for i32).
  const unsigned width = type.getIntOrFloatBitWidth();
  return b.create<arith::ConstantOp>(
      loc, type,
      b.getIntegerAttr(type, max ? APInt::getSignedMinValue(width) : APInt::getZero(width)));
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
  SmallVector<unsigned> parallelDims = splitDims(iterators);
  setUndefined(b);
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

// The reduced dims as loops, outermost first, around `lanes` iterations of
// the innermost (parallel) dim `column` from `base`, lane l accumulating
// element base + l. `accumulators` holds `lanes` values per reduced output.
SmallVector<Value> NestBuilder::columnLevels(OpBuilder &b, size_t level, unsigned column,
                                             Value base, int64_t lanes,
                                             ValueRange accumulators) {
  if (level == reducedDims.size()) {
    SmallVector<Value> out(accumulators.begin(), accumulators.end());
    for (int64_t l = 0; l < lanes; ++l) {
      ivs[column] = b.create<arith::AddIOp>(loc, base, constIndex(b, l));
      SmallVector<Value> current;
      for (size_t a = 0; a < reduced.size(); ++a)
        current.push_back(out[a * lanes + l]);
      SmallVector<Value> updated = iterate(b, current);
      for (size_t a = 0; a < reduced.size(); ++a)
        out[a * lanes + l] = updated[a];
    }
    return out;
  }
  const unsigned dim = reducedDims[level];
  auto loop = b.create<scf::ForOp>(
      loc, constIndex(b, 0), constIndex(b, extents[dim]), constIndex(b, 1), accumulators,
      [&](OpBuilder &nb, Location, Value iv, ValueRange current) {
        ivs[dim] = iv;
        nb.create<scf::YieldOp>(loc, columnLevels(nb, level + 1, column, base, lanes, current));
      });
  return SmallVector<Value>(loop.getResults().begin(), loop.getResults().end());
}

// A reduction that keeps the innermost dim (channels-last batch-norm
// statistics: [N, H, W, C] summed over N, H, W) would, one output per
// iteration, read its values a row apart: a cache line for every element.
// Instead each parallel iteration takes `lanes` consecutive outputs and walks
// the reduced dims once, every step reading `lanes` consecutive elements into
// `lanes` accumulators (a vector on the CPU). Each output is one chain in the
// reduced dims' order, float32 sums in float64 as above: the order depends
// only on the shapes.
void NestBuilder::buildColumns(OpBuilder &b, ArrayRef<utils::IteratorType> iterators) {
  SmallVector<unsigned> parallelDims = splitDims(iterators);
  const unsigned column = parallelDims.back();
  // Up to kColumnLanes outputs per iteration, as many as divide the dim, but
  // fewer where that would leave fewer than kColumnMinIterations iterations
  // for the cores (the lanes group outputs; each output's sum is the same
  // chain whatever their number).
  int64_t outer = 1;
  for (unsigned d : parallelDims)
    if (d != column)
      outer *= extents[d];
  int64_t lanes = std::gcd(extents[column], kColumnLanes);
  while (lanes > kLanes && outer * (extents[column] / lanes) < kColumnMinIterations)
    lanes /= 2;
  setUndefined(b);
  SmallVector<Value> lower, upper, steps;
  for (unsigned d : parallelDims) {
    lower.push_back(constIndex(b, 0));
    upper.push_back(constIndex(b, d == column ? extents[d] / lanes : extents[d]));
    steps.push_back(constIndex(b, 1));
  }
  b.create<scf::ParallelOp>(
      loc, lower, upper, steps, [&](OpBuilder &nb, Location, ValueRange parallelIvs) {
        for (auto [d, iv] : llvm::zip(parallelDims, parallelIvs))
          ivs[d] = iv;
        Value base = nb.create<arith::MulIOp>(loc, ivs[column], constIndex(nb, lanes));
        SmallVector<Value> start;
        for (unsigned output : reduced)
          for (int64_t l = 0; l < lanes; ++l)
            start.push_back(identity(nb, output));
        SmallVector<Value> totals = columnLevels(nb, 0, column, base, lanes, start);
        for (int64_t l = 0; l < lanes; ++l) {
          ivs[column] = nb.create<arith::AddIOp>(loc, base, constIndex(nb, l));
          SmallVector<Value> finals;
          for (size_t a = 0; a < reduced.size(); ++a)
            finals.push_back(totals[a * lanes + l]);
          storeResults(nb, finals);
        }
      });
}

// Decomposes `flat` into the ivs of `dims` (the last fastest).
void setIvs(OpBuilder &b, Location loc, Value flat, ArrayRef<unsigned> dims,
            ArrayRef<int64_t> extents, SmallVector<Value> &ivs) {
  Value rest = flat;
  for (unsigned d : llvm::reverse(dims)) {
    Value extent = b.create<arith::ConstantIndexOp>(loc, extents[d]);
    ivs[d] = b.create<arith::RemUIOp>(loc, rest, extent);
    rest = b.create<arith::DivUIOp>(loc, rest, extent);
  }
}

// A reduction keeping only the innermost dim, [rows..., C] -> [C], read
// column-wise (buildColumns) takes a cache line from every row per lane
// group: at a row stride of C * 4 bytes the hardware prefetchers lose the
// stream at every page, and each group's loads wait on memory (ResNet-50's
// channels-last statistics ran at half the bandwidth of the elementwise
// kernels). Here the rows are read as they lie instead, in two launches:
//  1) `parts` fixed chunks of rows, a parallel iteration each: the chunk's
//     partials (one row of C accumulators per reduced output, in a module
//     global; 2 KiB per sum at 256 channels, so they stay in the L1 cache)
//     set to the identity,
//     then every element of every row of the chunk in memory order, its
//     contribution combined into its column's partial (a loop over C the
//     vectorizer turns into vector loads, converts and adds);
//  2) per output, its `parts` partials combined in chunk order, scaled and
//     stored.
// The chunks depend only on the shapes, so the sums are the same bits on any
// thread count (each output: chunk sums in row order, then the chunks in
// order; float32 sums in float64 as everywhere).
void NestBuilder::buildColumnChunks(OpBuilder &b, ArrayRef<utils::IteratorType> iterators,
                                    int64_t parts) {
  SmallVector<unsigned> parallelDims = splitDims(iterators);
  const unsigned column = parallelDims.back();
  int64_t rows = 1;
  for (unsigned d : reducedDims)
    rows *= extents[d];
  const int64_t columns = extents[column];
  const int64_t chunk = (rows + parts - 1) / parts;
  const int64_t chunks = (rows + chunk - 1) / chunk;  // none of them empty
  setUndefined(b);
  SmallVector<Type> types;
  SmallVector<std::string> names;
  for (unsigned output : reduced) {
    types.push_back(accumulatorType(output));
    names.push_back(declareCpuPartials(b, loc, types.back()));
  }
  auto partials = [&](OpBuilder &nb, size_t a) -> Value {
    return nb.create<memref::GetGlobalOp>(loc, MemRefType::get({kCpuPartialsCapacity}, types[a]),
                                          names[a]);
  };
  // Output a's partial of chunk p for column c.
  auto slot = [&](OpBuilder &nb, size_t a, Value p, Value c) -> Value {
    Value row = nb.create<arith::AddIOp>(loc, constIndex(nb, static_cast<int64_t>(a) * chunks), p);
    return nb.create<arith::AddIOp>(
        loc, nb.create<arith::MulIOp>(loc, row, constIndex(nb, columns)), c);
  };
  auto setParallelIvs = [&](OpBuilder &nb, Value c) {
    for (unsigned d : parallelDims)
      ivs[d] = d == column ? c : constIndex(nb, 0);
  };
  auto forLoop = [&](OpBuilder &nb, Value lower, Value upper,
                     llvm::function_ref<void(OpBuilder &, Value)> body) {
    return nb.create<scf::ForOp>(loc, lower, upper, constIndex(nb, 1), ValueRange{},
                                 [&](OpBuilder &fb, Location, Value iv, ValueRange) {
                                   body(fb, iv);
                                   fb.create<scf::YieldOp>(loc);
                                 });
  };
  // Stage 1: chunk p's rows into partials[a][p].
  b.create<scf::ParallelOp>(
      loc, ValueRange{constIndex(b, 0)}, ValueRange{constIndex(b, chunks)},
      ValueRange{constIndex(b, 1)}, [&](OpBuilder &nb, Location, ValueRange chunkIvs) {
        Value p = chunkIvs.front();
        SmallVector<Value> globals;
        for (size_t a = 0; a < reduced.size(); ++a)
          globals.push_back(partials(nb, a));
        forLoop(nb, constIndex(nb, 0), constIndex(nb, columns), [&](OpBuilder &fb, Value c) {
          for (size_t a = 0; a < reduced.size(); ++a)
            fb.create<memref::StoreOp>(loc, identity(fb, reduced[a]), globals[a],
                                       slot(fb, a, p, c));
        });
        Value begin = nb.create<arith::MulIOp>(loc, p, constIndex(nb, chunk));
        Value end = nb.create<arith::MinSIOp>(
            loc, nb.create<arith::AddIOp>(loc, begin, constIndex(nb, chunk)),
            constIndex(nb, rows));
        forLoop(nb, begin, end, [&](OpBuilder &rb, Value r) {
          setIvs(rb, loc, r, reducedDims, extents, ivs);
          // Each column its own partial: the iterations touch disjoint memory.
          auto columnLoop = forLoop(rb, constIndex(rb, 0), constIndex(rb, columns), [&](OpBuilder &cb, Value c) {
            setParallelIvs(cb, c);
            SmallVector<Value> slots, current;
            for (size_t a = 0; a < reduced.size(); ++a) {
              slots.push_back(slot(cb, a, p, c));
              current.push_back(cb.create<memref::LoadOp>(loc, globals[a], slots.back()));
            }
            SmallVector<Value> updated = iterate(cb, current);
            for (size_t a = 0; a < reduced.size(); ++a)
              cb.create<memref::StoreOp>(loc, updated[a], globals[a], slots[a]);
          });
          columnLoop->setAttr(kParallelLoopAttrName, rb.getUnitAttr());
        });
      });
  // Stage 2: each output's partials in chunk order.
  b.create<scf::ParallelOp>(
      loc, ValueRange{constIndex(b, 0)}, ValueRange{constIndex(b, columns)},
      ValueRange{constIndex(b, 1)}, [&](OpBuilder &nb, Location, ValueRange columnIvs) {
        Value c = columnIvs.front();
        SmallVector<Value> globals, start;
        for (size_t a = 0; a < reduced.size(); ++a) {
          globals.push_back(partials(nb, a));
          start.push_back(identity(nb, reduced[a]));
        }
        auto loop = nb.create<scf::ForOp>(
            loc, constIndex(nb, 0), constIndex(nb, chunks), constIndex(nb, 1), start,
            [&](OpBuilder &fb, Location, Value p, ValueRange totals) {
              SmallVector<Value> updated;
              for (size_t a = 0; a < reduced.size(); ++a)
                updated.push_back(combine(
                    fb, reduced[a], totals[a],
                    fb.create<memref::LoadOp>(loc, globals[a], slot(fb, a, p, c))));
              fb.create<scf::YieldOp>(loc, updated);
            });
        setParallelIvs(nb, c);
        storeResults(nb, loop.getResults());
      });
}

void NestBuilder::buildGpu(OpBuilder &b, ArrayRef<utils::IteratorType> iterators) {
  SmallVector<unsigned> parallelDims = splitDims(iterators);
  int64_t outputsCount = 1, count = 1;
  for (unsigned d : parallelDims)
    outputsCount *= extents[d];
  for (unsigned d : reducedDims)
    count *= extents[d];
  SmallVector<Type> types;
  for (unsigned output : reduced)
    types.push_back(accumulatorType(output));
  const int64_t maxBlock = largestBlock(types);
  const int64_t block = std::min(gpuBlockSize(outputsCount, count), maxBlock);
  // Too few outputs to fill the GPU one block each (kGpuMinThreads threads,
  // kGpuMinBlocks blocks): each output's range in `parts` chunks of at
  // least kGpuMaxBlock elements, a block each, then a second launch.
  const int64_t parts = std::min<int64_t>(
      std::max((kGpuMinThreads + outputsCount * maxBlock - 1) / (outputsCount * maxBlock),
               (kGpuMinBlocks + outputsCount - 1) / outputsCount),
      std::max<int64_t>(1, count / maxBlock));
  if (parts > 1 &&
      outputsCount * parts * static_cast<int64_t>(reduced.size()) <= kGpuPartialsCapacity)
    return buildGpuTwoStage(b, parallelDims, outputsCount, count, parts, maxBlock, types);
  buildBlockReduction(
      b, loc, outputsCount, block, types,
      [&](OpBuilder &nb, Location, Value blockId, Value threadId) {
        setUndefined(nb);
        setIvs(nb, loc, blockId, parallelDims, extents, ivs);
        SmallVector<Value> start;
        for (unsigned output : reduced)
          start.push_back(identity(nb, output));
        auto loop = nb.create<scf::ForOp>(
            loc, threadId, constIndex(nb, count), constIndex(nb, block), start,
            [&](OpBuilder &fb, Location, Value r, ValueRange accumulators) {
              setIvs(fb, loc, r, reducedDims, extents, ivs);
              fb.create<scf::YieldOp>(loc, iterate(fb, accumulators));
            });
        return SmallVector<Value>(loop.getResults().begin(), loop.getResults().end());
      },
      [&](OpBuilder &nb, Location, unsigned i, Value x, Value y) {
        return combine(nb, reduced[i], x, y);
      },
      [&](OpBuilder &nb, Location, Value, ValueRange totals) { storeResults(nb, totals); });
}

Value partialsOf(OpBuilder &b, Location loc, Type type, StringRef name) {
  return b.create<memref::GetGlobalOp>(loc, MemRefType::get({kGpuPartialsCapacity}, type), name);
}

// A reduction that keeps the innermost dim on CUDA ([rows..., C] -> [C],
// channels-last batch-norm statistics; or [N, rows..., C] -> [N, C]). One
// block per output would read its values a row apart (C elements: each load
// of a warp its own memory transaction). Instead a block is a tile of
// `lanes` consecutive columns by block / lanes row lanes: thread t reads
// column tile * lanes + t % lanes of rows r = begin + t / lanes, + rowLanes,
// ... of its chunk, so a warp reads whole rows' consecutive elements
// (coalesced); then the row lanes of each column combine as a tree in shared
// memory (strides block / 2 down to `lanes`), and the first `lanes` threads
// hold the tile's totals. Blocks: outer x tiles x parts, `parts` chunks of
// rows enough to fill the GPU (kGpuMinThreads, kGpuColumnMinBlocks) while each
// thread keeps at least kGpuColumnRowsPerThread rows; with more than one
// part the totals go to the partials global and a second launch, a thread
// per output, combines each output's partials in chunk order. Every order is
// fixed by the shapes: the same bits every run.
void NestBuilder::buildGpuColumns(OpBuilder &b, ArrayRef<utils::IteratorType> iterators) {
  SmallVector<unsigned> parallelDims = splitDims(iterators);
  const unsigned column = parallelDims.back();
  SmallVector<unsigned> outerDims(parallelDims.begin(), parallelDims.end() - 1);
  int64_t outer = 1, rows = 1;
  for (unsigned d : outerDims)
    outer *= extents[d];
  for (unsigned d : reducedDims)
    rows *= extents[d];
  const int64_t columns = extents[column];
  SmallVector<Type> types;
  for (unsigned output : reduced)
    types.push_back(accumulatorType(output));
  const int64_t block = std::min(kGpuColumnBlock, largestBlock(types));
  int64_t lanes = 1;
  while (lanes < 32 && lanes < columns)
    lanes *= 2;
  lanes = std::min(lanes, block);
  const int64_t rowLanes = block / lanes;
  const int64_t tiles = (columns + lanes - 1) / lanes;
  const int64_t tileBlocks = outer * tiles;
  const int64_t outputsCount = outer * columns;
  int64_t parts = std::max((kGpuMinThreads + tileBlocks * block - 1) / (tileBlocks * block),
                           (kGpuColumnMinBlocks + tileBlocks - 1) / tileBlocks);
  parts = std::min(parts, std::max<int64_t>(1, rows / (rowLanes * kGpuColumnRowsPerThread)));
  const int64_t reducedCount = static_cast<int64_t>(reduced.size());
  parts = std::min(parts, std::max<int64_t>(1, kGpuPartialsCapacity / (outputsCount * reducedCount)));
  const int64_t chunk = (rows + parts - 1) / parts;
  parts = (rows + chunk - 1) / chunk;  // none of them empty
  const int64_t slots = outputsCount * parts;  // per reduced output
  SmallVector<std::string> names;
  if (parts > 1)
    for (Type type : types)
      names.push_back(declarePartials(b, loc, type));
  // The ivs of output (o, c): the outer parallel dims from o.
  auto setOutputIvs = [&](OpBuilder &nb, Value o, Value c) {
    setIvs(nb, loc, o, outerDims, extents, ivs);
    ivs[column] = c;
  };
  buildBlockLaunch(
      b, loc, tileBlocks * parts, block, types,
      [&](OpBuilder &lb, Location, Value blockId, Value threadId,
          ArrayRef<BlockArgument> buffers) {
        setUndefined(lb);
        Value part = lb.create<arith::RemUIOp>(loc, blockId, constIndex(lb, parts));
        Value rest = lb.create<arith::DivUIOp>(loc, blockId, constIndex(lb, parts));
        Value tile = lb.create<arith::RemUIOp>(loc, rest, constIndex(lb, tiles));
        Value o = lb.create<arith::DivUIOp>(loc, rest, constIndex(lb, tiles));
        Value lane = lb.create<arith::RemUIOp>(loc, threadId, constIndex(lb, lanes));
        Value rowLane = lb.create<arith::DivUIOp>(loc, threadId, constIndex(lb, lanes));
        Value c = lb.create<arith::AddIOp>(
            loc, lb.create<arith::MulIOp>(loc, tile, constIndex(lb, lanes)), lane);
        Value valid =
            lb.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ult, c, constIndex(lb, columns));
        // A lane past the last column reads nothing (zero iterations), but
        // its ivs stay in bounds all the same.
        setOutputIvs(lb, o, lb.create<arith::MinUIOp>(loc, c, constIndex(lb, columns - 1)));
        Value begin = lb.create<arith::MulIOp>(loc, part, constIndex(lb, chunk));
        Value end = lb.create<arith::MinUIOp>(
            loc, lb.create<arith::AddIOp>(loc, begin, constIndex(lb, chunk)), constIndex(lb, rows));
        end = lb.create<arith::SelectOp>(loc, valid, end, begin);
        SmallVector<Value> start;
        for (unsigned output : reduced)
          start.push_back(identity(lb, output));
        auto loop = lb.create<scf::ForOp>(
            loc, lb.create<arith::AddIOp>(loc, begin, rowLane), end, constIndex(lb, rowLanes),
            start, [&](OpBuilder &fb, Location, Value r, ValueRange accumulators) {
              setIvs(fb, loc, r, reducedDims, extents, ivs);
              fb.create<scf::YieldOp>(loc, iterate(fb, accumulators));
            });
        SmallVector<Value> shared(buffers.begin(), buffers.end());
        for (auto [value, buffer] : llvm::zip(loop.getResults(), shared))
          lb.create<memref::StoreOp>(loc, value, buffer, threadId);
        blockTree(
            lb, loc, threadId, block, shared,
            [&](OpBuilder &nb, Location, unsigned i, Value x, Value y) {
              return combine(nb, reduced[i], x, y);
            },
            lanes);
        Value first = lb.create<arith::AndIOp>(
            loc, valid,
            lb.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ult, threadId,
                                     constIndex(lb, lanes)));
        lb.create<scf::IfOp>(loc, first, [&](OpBuilder &ib, Location) {
          SmallVector<Value> totals;
          for (Value buffer : shared)
            totals.push_back(ib.create<memref::LoadOp>(loc, buffer, threadId));
          if (parts == 1) {
            setOutputIvs(ib, o, c);
            storeResults(ib, totals);
          } else {
            // partials[a][p][o * columns + c]: stage 2 reads them coalesced.
            Value output = ib.create<arith::AddIOp>(
                loc, ib.create<arith::MulIOp>(loc, o, constIndex(ib, columns)), c);
            Value slot = ib.create<arith::AddIOp>(
                loc, ib.create<arith::MulIOp>(loc, part, constIndex(ib, outputsCount)), output);
            for (auto [a, total] : llvm::enumerate(totals)) {
              Value at = ib.create<arith::AddIOp>(loc, slot, constIndex(ib, a * slots));
              ib.create<memref::StoreOp>(loc, total, partialsOf(ib, loc, types[a], names[a]), at);
            }
          }
          ib.create<scf::YieldOp>(loc);
        });
      });
  if (parts == 1)
    return;
  // Stage 2: a thread per output, its partials in chunk order.
  int64_t finalBlock = 32;
  while (finalBlock < kGpuColumnBlock && finalBlock < outputsCount)
    finalBlock *= 2;
  buildBlockLaunch(
      b, loc, (outputsCount + finalBlock - 1) / finalBlock, finalBlock, TypeRange{},
      [&](OpBuilder &lb, Location, Value blockId, Value threadId, ArrayRef<BlockArgument>) {
        Value output = lb.create<arith::AddIOp>(
            loc, lb.create<arith::MulIOp>(loc, blockId, constIndex(lb, finalBlock)), threadId);
        Value inRange = lb.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ult, output,
                                                 constIndex(lb, outputsCount));
        lb.create<scf::IfOp>(loc, inRange, [&](OpBuilder &ib, Location) {
          SmallVector<Value> start;
          for (unsigned o : reduced)
            start.push_back(identity(ib, o));
          auto loop = ib.create<scf::ForOp>(
              loc, constIndex(ib, 0), constIndex(ib, parts), constIndex(ib, 1), start,
              [&](OpBuilder &fb, Location, Value p, ValueRange totals) {
                Value slot = fb.create<arith::AddIOp>(
                    loc, fb.create<arith::MulIOp>(loc, p, constIndex(fb, outputsCount)), output);
                SmallVector<Value> updated;
                for (auto [a, type] : llvm::enumerate(types)) {
                  Value at = fb.create<arith::AddIOp>(loc, slot, constIndex(fb, a * slots));
                  Value partial =
                      fb.create<memref::LoadOp>(loc, partialsOf(fb, loc, type, names[a]), at);
                  updated.push_back(combine(fb, reduced[a], totals[a], partial));
                }
                fb.create<scf::YieldOp>(loc, updated);
              });
          setOutputIvs(ib,
                       ib.create<arith::DivUIOp>(loc, output, constIndex(ib, columns)),
                       ib.create<arith::RemUIOp>(loc, output, constIndex(ib, columns)));
          storeResults(ib, loop.getResults());
          ib.create<scf::YieldOp>(loc);
        });
      });
}

void NestBuilder::buildGpuTwoStage(OpBuilder &b, ArrayRef<unsigned> parallelDims,
                                   int64_t outputsCount, int64_t count, int64_t parts,
                                   int64_t chunkBlock, ArrayRef<Type> types) {
  // Chunks a whole number of blocks wide, so no warp straddles two.
  const int64_t chunk = ((count + parts - 1) / parts + chunkBlock - 1) / chunkBlock * chunkBlock;
  const int64_t slots = outputsCount * parts;  // per reduced output
  SmallVector<std::string> names;
  for (Type type : types)
    names.push_back(declarePartials(b, loc, type));
  // Stage 1: block (o, p) reduces chunk p of output o into partials[a][o * parts + p].
  buildBlockReduction(
      b, loc, slots, chunkBlock, types,
      [&](OpBuilder &nb, Location, Value blockId, Value threadId) {
        setUndefined(nb);
        Value cParts = constIndex(nb, parts);
        Value output = nb.create<arith::DivUIOp>(loc, blockId, cParts);
        Value part = nb.create<arith::RemUIOp>(loc, blockId, cParts);
        setIvs(nb, loc, output, parallelDims, extents, ivs);
        Value begin = nb.create<arith::MulIOp>(loc, part, constIndex(nb, chunk));
        Value end = nb.create<arith::MinUIOp>(
            loc, nb.create<arith::AddIOp>(loc, begin, constIndex(nb, chunk)), constIndex(nb, count));
        SmallVector<Value> start;
        for (unsigned o : reduced)
          start.push_back(identity(nb, o));
        auto loop = nb.create<scf::ForOp>(
            loc, nb.create<arith::AddIOp>(loc, begin, threadId), end, constIndex(nb, chunkBlock),
            start, [&](OpBuilder &fb, Location, Value r, ValueRange accumulators) {
              setIvs(fb, loc, r, reducedDims, extents, ivs);
              fb.create<scf::YieldOp>(loc, iterate(fb, accumulators));
            });
        return SmallVector<Value>(loop.getResults().begin(), loop.getResults().end());
      },
      [&](OpBuilder &nb, Location, unsigned i, Value x, Value y) {
        return combine(nb, reduced[i], x, y);
      },
      [&](OpBuilder &nb, Location, Value blockId, ValueRange totals) {
        for (auto [a, total] : llvm::enumerate(totals)) {
          Value slot = nb.create<arith::AddIOp>(loc, blockId, constIndex(nb, a * slots));
          nb.create<memref::StoreOp>(loc, total, partialsOf(nb, loc, types[a], names[a]), slot);
        }
      });
  // Stage 2: block o combines its `parts` partials in the same tree order.
  int64_t block = 32;
  while (block < parts)
    block *= 2;
  buildBlockReduction(
      b, loc, outputsCount, block, types,
      [&](OpBuilder &nb, Location, Value blockId, Value threadId) {
        setIvs(nb, loc, blockId, parallelDims, extents, ivs);
        SmallVector<Value> mine;
        Value inRange =
            nb.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ult, threadId, constIndex(nb, parts));
        Value slot = nb.create<arith::AddIOp>(
            loc, nb.create<arith::MulIOp>(loc, blockId, constIndex(nb, parts)),
            nb.create<arith::MinUIOp>(loc, threadId, constIndex(nb, parts - 1)));
        for (auto [a, type] : llvm::enumerate(types)) {
          Value at = nb.create<arith::AddIOp>(loc, slot, constIndex(nb, a * slots));
          Value partial = nb.create<memref::LoadOp>(loc, partialsOf(nb, loc, type, names[a]), at);
          mine.push_back(nb.create<arith::SelectOp>(loc, inRange, partial,
                                                    identity(nb, reduced[a])));
        }
        return mine;
      },
      [&](OpBuilder &nb, Location, unsigned i, Value x, Value y) {
        return combine(nb, reduced[i], x, y);
      },
      [&](OpBuilder &nb, Location, Value, ValueRange totals) { storeResults(nb, totals); });
}

} // namespace

// The partial sums of the two-stage form live in one device global per
// accumulator type, shared by every kernel of the module (commands run one at
// a time on the compute stream). Declared from `b` while its insertion point
// is attached to the module (not inside an op being built).
namespace {
std::string declareGlobal(OpBuilder &b, Location loc, Type type, StringRef prefix,
                          int64_t capacity, IntegerAttr alignment) {
  ModuleOp module = b.getInsertionBlock()->getParentOp()->getParentOfType<ModuleOp>();
  std::string name;
  llvm::raw_string_ostream os(name);
  os << prefix << type;
  if (!SymbolTable::lookupSymbolIn(module, name)) {
    OpBuilder mb = OpBuilder::atBlockBegin(module.getBody());
    mb.create<memref::GlobalOp>(loc, name, mb.getStringAttr("private"),
                                MemRefType::get({capacity}, type), mb.getUnitAttr(),
                                /*constant=*/false, alignment);
  }
  return name;
}
} // namespace

std::string declarePartials(OpBuilder &b, Location loc, Type type) {
  return declareGlobal(b, loc, type, "graphc_partials_", kGpuPartialsCapacity, nullptr);
}

std::string declareCpuPartials(OpBuilder &b, Location loc, Type type) {
  // Cache-line aligned, so each chunk's row of partials starts where its
  // vectors do (C is a multiple of 16 in every layer that matters).
  return declareGlobal(b, loc, type, "graphc_cpu_partials_", kCpuPartialsCapacity,
                       b.getI64IntegerAttr(64));
}

int64_t largestBlock(TypeRange types) {
  int64_t bytes = 0;
  for (Type type : types)
    bytes += std::max<int64_t>(1, type.getIntOrFloatBitWidth() / 8);
  int64_t block = kGpuMaxBlock;
  while (block > 32 && block * bytes > kGpuSharedBytes)
    block /= 2;
  return block;
}

int64_t gpuBlockSize(int64_t outputs, int64_t count) {
  int64_t block = 32;
  while (block < kGpuMaxBlock && block * std::max<int64_t>(outputs, 1) < kGpuMinThreads &&
         block < count)
    block *= 2;
  return block;
}

void buildBlockLaunch(
    OpBuilder &b, Location loc, int64_t grid, int64_t block, TypeRange shared,
    function_ref<void(OpBuilder &, Location, Value, Value, ArrayRef<BlockArgument>)> body) {
  assert(block >= 1 && (block & (block - 1)) == 0 && "the tree needs a power-of-two block");
  MLIRContext *context = b.getContext();
  auto workgroup = gpu::AddressSpaceAttr::get(context, gpu::AddressSpace::Workgroup);
  SmallVector<Type> buffers;
  for (Type type : shared)
    buffers.push_back(MemRefType::get({block}, type, MemRefLayoutAttrInterface(), workgroup));
  Value one = b.create<arith::ConstantIndexOp>(loc, 1);
  auto launch = b.create<gpu::LaunchOp>(
      loc, b.create<arith::ConstantIndexOp>(loc, grid), one, one,
      b.create<arith::ConstantIndexOp>(loc, block), one, one, /*dynamicSharedMemorySize=*/nullptr,
      /*asyncTokenType=*/nullptr, ValueRange{}, buffers);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(&launch.getBody().front());
  body(b, loc, launch.getBlockIds().x, launch.getThreadIds().x,
       launch.getWorkgroupAttributions());
  b.create<gpu::TerminatorOp>(loc);
}

namespace {

// The tree over `buffers` (each thread's values already stored at its index):
// at stride s, thread t < s folds in t + s; a barrier before each level and
// after the last, so every read sees the level before. Stopping at a
// `lastStride` above 1 leaves `lastStride` totals, in threads 0 to
// lastStride - 1 (each the tree over the threads congruent to it).
void blockTree(OpBuilder &b, Location loc, Value threadId, int64_t block,
               ArrayRef<Value> buffers,
               function_ref<Value(OpBuilder &, Location, unsigned, Value, Value)> combine,
               int64_t lastStride) {
  for (int64_t stride = block / 2; stride >= lastStride; stride /= 2) {
    b.create<gpu::BarrierOp>(loc);
    Value s = b.create<arith::ConstantIndexOp>(loc, stride);
    Value active = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ult, threadId, s);
    b.create<scf::IfOp>(loc, active, [&](OpBuilder &ib, Location il) {
      Value other = ib.create<arith::AddIOp>(il, threadId, s);
      for (auto [i, buffer] : llvm::enumerate(buffers)) {
        Value x = ib.create<memref::LoadOp>(il, buffer, threadId);
        Value y = ib.create<memref::LoadOp>(il, buffer, other);
        ib.create<memref::StoreOp>(il, combine(ib, il, i, x, y), buffer, threadId);
      }
      ib.create<scf::YieldOp>(il);
    });
  }
  b.create<gpu::BarrierOp>(loc);
}

} // namespace

Value blockAllReduce(OpBuilder &b, Location loc, Value threadId, int64_t block, Value buffer,
                     Value value, function_ref<Value(OpBuilder &, Location, Value, Value)> combine) {
  b.create<memref::StoreOp>(loc, value, buffer, threadId);
  blockTree(b, loc, threadId, block, {buffer},
            [&](OpBuilder &cb, Location cl, unsigned, Value x, Value y) {
              return combine(cb, cl, x, y);
            });
  return b.create<memref::LoadOp>(loc, buffer, ValueRange{b.create<arith::ConstantIndexOp>(loc, 0)});
}

void buildBlockReduction(
    OpBuilder &b, Location loc, int64_t grid, int64_t block, TypeRange types,
    function_ref<SmallVector<Value>(OpBuilder &, Location, Value, Value)> perThread,
    function_ref<Value(OpBuilder &, Location, unsigned, Value, Value)> combine,
    function_ref<void(OpBuilder &, Location, Value, ValueRange)> finish) {
  buildBlockLaunch(
      b, loc, grid, block, types,
      [&](OpBuilder &lb, Location ll, Value blockId, Value threadId,
          ArrayRef<BlockArgument> buffers) {
        SmallVector<Value> mine = perThread(lb, ll, blockId, threadId);
        SmallVector<Value> shared(buffers.begin(), buffers.end());
        for (auto [value, buffer] : llvm::zip(mine, shared))
          lb.create<memref::StoreOp>(ll, value, buffer, threadId);
        blockTree(lb, ll, threadId, block, shared, combine);
        Value zero = lb.create<arith::ConstantIndexOp>(ll, 0);
        Value first = lb.create<arith::CmpIOp>(ll, arith::CmpIPredicate::eq, threadId, zero);
        lb.create<scf::IfOp>(ll, first, [&](OpBuilder &ib, Location il) {
          SmallVector<Value> totals;
          for (Value buffer : shared)
            totals.push_back(ib.create<memref::LoadOp>(il, buffer, zero));
          finish(ib, il, blockId, totals);
          ib.create<scf::YieldOp>(il);
        });
      });
}

namespace {
// The chunks of buildColumnChunks for a reduction keeping the innermost dim,
// or 0 where it does not apply: another parallel dim longer than 1 (each
// output then has few rows: buildColumns), fewer than two chunks' worth of
// elements, or more partials than the global holds. The count depends only on
// the extents, so a fused kernel and the unfused reduction sum alike (the
// capacity check also counts the kernel's sums, but only refuses beyond 64K
// channel-sums, far past any model here).
int64_t columnChunks(ArrayRef<int64_t> extents, ArrayRef<utils::IteratorType> iterators,
                     ArrayRef<Accumulate> accumulate) {
  const size_t last = extents.size() - 1;
  int64_t rows = 1;
  for (size_t d = 0; d < last; ++d) {
    if (iterators[d] == utils::IteratorType::reduction)
      rows *= extents[d];
    else if (extents[d] != 1)
      return 0;
  }
  const int64_t columns = extents[last];
  const int64_t parts = std::min({rows * columns / kColumnChunkElements, kColumnMaxChunks, rows});
  const int64_t reducedOutputs =
      llvm::count_if(accumulate, [](Accumulate kind) { return kind != Accumulate::None; });
  if (parts < 2 || reducedOutputs * parts * columns > kCpuPartialsCapacity)
    return 0;
  return parts;
}
} // namespace

void buildReductionNest(OpBuilder &b, Location loc, ValueRange inputs, ValueRange outputs,
                        ArrayRef<AffineMap> maps, ArrayRef<utils::IteratorType> iterators,
                        ArrayRef<int64_t> extents, ArrayRef<Accumulate> accumulate,
                        ArrayRef<double> scales, BodyFn body) {
  int64_t outputsCount = 1, count = 1;
  for (auto [extent, kind] : llvm::zip(extents, iterators))
    (kind == utils::IteratorType::parallel ? outputsCount : count) *= extent;
  auto nest = [&](OpBuilder &nb) {
    NestBuilder(loc, inputs, outputs, maps, extents, accumulate, scales, body)
        .build(nb, iterators);
  };
  // A reduction keeping the innermost dim walks it in lanes of consecutive
  // outputs: on the CPU in vectors (buildColumns, buildColumnChunks), on CUDA
  // in warps (buildGpuColumns); a thread per output is coalesced there too,
  // when there are enough outputs for it.
  const bool columns = count > 1 && !iterators.empty() &&
                       iterators.back() == utils::IteratorType::parallel;
  auto cpu = [&](OpBuilder &nb) {
    if (!columns)
      return nest(nb);
    NestBuilder builder(loc, inputs, outputs, maps, extents, accumulate, scales, body);
    if (int64_t parts = columnChunks(extents, iterators, accumulate))
      return builder.buildColumnChunks(nb, iterators, parts);
    builder.buildColumns(nb, iterators);
  };
  // A thread per output is plenty on CUDA when there are that many outputs
  // (or that little to do): the same nest for both targets.
  if (count <= 1 || outputsCount >= kGpuMinThreads || outputsCount * count < kGpuMinThreads)
    return columns ? buildPerTarget(b, loc, cpu, nest) : cpu(b);
  buildPerTarget(b, loc, cpu, [&](OpBuilder &nb) {
    NestBuilder builder(loc, inputs, outputs, maps, extents, accumulate, scales, body);
    columns ? builder.buildGpuColumns(nb, iterators) : builder.buildGpu(nb, iterators);
  });
}

} // namespace graphc
