//===- ReductionNestGpu.cpp - CUDA variants of reduction nests ------------===//
//
// The CUDA forms of buildReductionNest (ReductionNest.h says when each is
// used), and the block-launch building blocks the loss kernels share:
//  - buildGpu: a block per output striding over its flattened reduced range
//    (consecutive threads, consecutive addresses of the innermost reduced
//    dim), or with too few outputs, chunks of each output's range a block
//    each and a second launch (buildGpuTwoStage);
//  - buildGpuColumns: a reduction that keeps the innermost dim, warps across
//    its columns, row lanes combined in shared memory, chunks of rows over
//    blocks and a second launch;
//  - buildBlockLaunch / blockTree / buildBlockReduction / blockAllReduce: a
//    gpu.launch with shared buffers, and the fixed-order tree over them.
//
//===----------------------------------------------------------------------===//

#include "compiler/Lowering/NestBuilder.h"
#include "compiler/Lowering/ReductionNest.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <algorithm>

using namespace mlir;

namespace graphc {
namespace reduction {

// One thread's share of the flattened reduced range: r = from, from + step,
// ... below `end`, one accumulator per reduced output.
SmallVector<Value> NestBuilder::strided(OpBuilder &b, Value from, Value end, int64_t step) {
  SmallVector<Value> start;
  for (unsigned output : reduced)
    start.push_back(identity(b, output));
  auto loop = b.create<scf::ForOp>(
      loc, from, end, constIndex(b, step), start,
      [&](OpBuilder &fb, Location, Value r, ValueRange accumulators) {
        setIvs(fb, loc, r, reducedDims, extents, ivs);
        fb.create<scf::YieldOp>(loc, iterate(fb, accumulators));
      });
  return SmallVector<Value>(loop.getResults().begin(), loop.getResults().end());
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
        return strided(nb, threadId, constIndex(nb, count), block);
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
        SmallVector<Value> mine =
            strided(lb, lb.create<arith::AddIOp>(loc, begin, rowLane), end, rowLanes);
        SmallVector<Value> shared(buffers.begin(), buffers.end());
        for (auto [value, buffer] : llvm::zip(mine, shared))
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
        return strided(nb, nb.create<arith::AddIOp>(loc, begin, threadId), end, chunkBlock);
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

} // namespace reduction

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

namespace reduction {

// The tree (NestBuilder.h).
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

} // namespace reduction

using reduction::blockTree;

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

} // namespace graphc
