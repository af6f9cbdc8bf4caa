//===- NestBuilder.h - the builder behind ReductionNest.h -------*- C++ -*-===//
//
// Private to compiler/Lowering: the state one reduction nest is built with,
// shared by ReductionNest.cpp (the loop nests and the CPU's column forms) and
// ReductionNestGpu.cpp (CUDA's block reductions). ReductionNest.h says what
// each form is for.
//
//===----------------------------------------------------------------------===//

#ifndef GRAPHC_COMPILER_LOWERING_NESTBUILDER_H
#define GRAPHC_COMPILER_LOWERING_NESTBUILDER_H

#include "compiler/Lowering/ReductionNest.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/BuiltinTypes.h"

#include <string>

namespace graphc {
namespace reduction {
using namespace mlir;

using BodyFn = llvm::function_ref<SmallVector<Value>(OpBuilder &, Location, ValueRange)>;

/// Decomposes `flat` into the ivs of `dims` (the last fastest).
void setIvs(OpBuilder &b, Location loc, Value flat, ArrayRef<unsigned> dims,
            ArrayRef<int64_t> extents, SmallVector<Value> &ivs);

/// The tree over `buffers` in shared memory (each thread's values already
/// stored at its index): at stride s, thread t < s folds in t + s; a barrier
/// before each level and after the last, so every read sees the level
/// before. Stopping at a `lastStride` above 1 leaves `lastStride` totals, in
/// threads 0 to lastStride - 1 (each the tree over the threads congruent to
/// it).
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
  SmallVector<Value> strided(OpBuilder &b, Value from, Value end, int64_t step);
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

} // namespace reduction
} // namespace graphc

#endif // GRAPHC_COMPILER_LOWERING_NESTBUILDER_H
