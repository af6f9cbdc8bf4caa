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
// emitted twice (KernelLoops.h), the CUDA variant (ReductionNestGpu.cpp) as
// a block reduction:
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
#include "compiler/Lowering/NestBuilder.h"
#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <algorithm>
#include <cmath>
#include <numeric>

using namespace mlir;

namespace graphc {
namespace reduction {

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

} // namespace reduction

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

using reduction::BodyFn;
using reduction::NestBuilder;

void buildReductionNest(OpBuilder &b, Location loc, ValueRange inputs, ValueRange outputs,
                        ArrayRef<AffineMap> maps, ArrayRef<utils::IteratorType> iterators,
                        ArrayRef<int64_t> extents, ArrayRef<Accumulate> accumulate,
                        ArrayRef<double> scales, BodyFn body) {
  // Dims of extent 1 loop once whether reduced or kept: without them, a batch
  // norm of [N, C, 1, 1] (BatchNorm1d, LeViT's every linear layer) keeps its
  // innermost dim, C, and is read in rows (the column forms below) instead
  // of a channel at a time, a row apart. Reduced dims of extent 1 stay when
  // no reduced dim is longer (a sum over a batch of 1 still needs one).
  bool longReduced = false;
  for (auto [extent, kind] : llvm::zip(extents, iterators))
    longReduced |= extent != 1 && kind == utils::IteratorType::reduction;
  auto dropped = [&](size_t d) {
    return extents[d] == 1 && (longReduced || iterators[d] == utils::IteratorType::parallel);
  };
  bool drops = false;
  for (size_t d = 0; d < extents.size(); ++d)
    drops |= dropped(d);
  if (drops && llvm::any_of(extents, [](int64_t e) { return e != 1; })) {
    SmallVector<AffineExpr> replacements;
    SmallVector<int64_t> keptExtents;
    SmallVector<utils::IteratorType> keptIterators;
    for (auto [d, extent] : llvm::enumerate(extents)) {
      if (dropped(d)) {
        replacements.push_back(getAffineConstantExpr(0, b.getContext()));
        continue;
      }
      replacements.push_back(getAffineDimExpr(keptExtents.size(), b.getContext()));
      keptExtents.push_back(extent);
      keptIterators.push_back(iterators[d]);
    }
    SmallVector<AffineMap> keptMaps;
    for (AffineMap map : maps)
      keptMaps.push_back(map.replaceDimsAndSymbols(replacements, {}, keptExtents.size(),
                                                   map.getNumSymbols()));
    return buildReductionNest(b, loc, inputs, outputs, keptMaps, keptIterators, keptExtents,
                              accumulate, scales, body);
  }
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
