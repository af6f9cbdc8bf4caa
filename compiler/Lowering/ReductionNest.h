//===- ReductionNest.h - precise, vectorizable reduction loops -*- C++ -*-===//
//
// A reduction written as a linalg.generic becomes, on both targets, one
// sequential chain per output element: a float32 add and a store per input
// element. Over a batch norm's N*H*W values per channel (3.2M for ResNet-50 at
// batch 256) that chain loses precision linearly in the length (a DC offset
// of 30 over 147,456 values put a weight update 1.2e-2 off float64) and runs
// at one add per cycle-latency.
//
// buildReductionNest emits the same computation as explicit loops instead:
//  - one scf.parallel iteration per output element (the parallel dims);
//  - the innermost reduced dim in blocks of kBlockGroups x kLanes elements:
//    kLanes independent accumulators (unrolled: the vectorizer makes them
//    vector registers), each block summed from zero, then added into per-lane
//    totals; the last extent % kLanes elements in a loop of their own; the
//    lanes combine as a tree;
//  - each outer reduced dim one more accumulation level (a loop-carried value);
//  - float32 sums accumulate in float64: each iteration's contribution is
//    computed in float32 as before and widened, so the sum itself adds next
//    to no error (PyTorch's CPU batch norm accumulates in double too); the
//    kernels are memory-bound, and a widening convert and a double add per
//    element cost no measurable time on the CPU (and half-rate float64 is
//    plenty on A100/H100);
//  - means scaled at the end (in the accumulator's precision), and every
//    output stored once.
// So a sum of E * R values is a chain of at most kBlockGroups, E / (kLanes *
// kBlockGroups) and R terms at its three levels, the summation order depends
// only on the shapes (the same bits on any thread count; the CUDA variant
// below has an order of its own, as fixed),
// and elementwise outputs of a fused kernel are stored in the same pass.
// On CUDA the same nest would map one thread per output element: a batch-norm
// statistic over N*H*W values on one thread per channel, its loads a channel
// apart. So when the outputs alone give fewer than kGpuMinThreads threads, the
// CUDA variant (KernelLoops.h: both are emitted, each codegen keeps its own)
// is a block reduction instead: one thread block per output element, each
// thread summing the elements r = t, t + B, t + 2B, ... of the flattened
// reduced range (consecutive threads read consecutive addresses of the
// innermost reduced dim: coalesced), float32 sums again in float64, then the
// block's B partial sums combined as a tree in shared memory (a fixed order:
// the same bits every run) and stored by thread 0. B is chosen so that the
// launch has at least kGpuMinThreads threads where the outputs allow
// (B <= 1024): ResNet-50's smallest per-channel statistic, 64 channels over
// 3.2M values at batch 256, runs on 256K threads instead of 64. Fewer than
// kGpuMinBlocks outputs would leave SMs idle (and fewer than 64 cannot fill
// kGpuMinThreads threads at all): then each output's range is split into
// chunks, a block per chunk writing its partial to a device global, and a
// second launch combines each output's partials, again as a tree (the same
// order every run). A reduction that keeps the innermost dim (channels-last
// batch-norm statistics: [N*H*W, C] -> [C]) would read a row apart from
// thread to thread that way; its CUDA variant instead gives each warp up to
// 32 consecutive columns of one row (coalesced), a block several such row
// lanes, combined per column in shared memory, and chunks of rows over the
// blocks, combined per output in chunk order by a second launch.
// Measured (test/runtime/reduction-precision.test): batch norm's weight
// gradient over 147,456 values at a DC offset of 30 went from 2.1e-4 to
// 3.3e-7 off float64 (PyTorch float32: 1.6e-6), and ResNet-50's generated
// kernels from 357 to 271 ms per step at batch 8 on 2 cores.
//
//===----------------------------------------------------------------------===//

#ifndef GRAPHC_COMPILER_LOWERING_REDUCTIONNEST_H
#define GRAPHC_COMPILER_LOWERING_REDUCTIONNEST_H

#include "mlir/Dialect/Utils/StructuredOpsUtils.h"
#include "mlir/IR/AffineMap.h"
#include "mlir/IR/Builders.h"

#include <string>

namespace graphc {

/// Independent accumulators per reduced output, and groups of them per block.
constexpr int64_t kLanes = 8;
constexpr int64_t kBlockGroups = 16;
/// Consecutive outputs per iteration of a reduction that keeps the innermost
/// dim (each reduced row then gives 128 contiguous bytes of float32).
constexpr int64_t kColumnLanes = 32;
/// The parallel iterations such a reduction keeps before using fewer lanes.
constexpr int64_t kColumnMinIterations = 16;
/// A reduction that keeps only the innermost dim (channels-last batch-norm
/// statistics) runs in two stages on the CPU: its rows in fixed chunks of at
/// least kColumnChunkElements elements (at most kColumnMaxChunks chunks), each
/// summed into its own row of partials, then the partials per output in
/// chunk order. The partials live in one module global per accumulator type
/// of kCpuPartialsCapacity elements (zero-filled .bss: only the pages a
/// kernel uses are ever touched).
constexpr int64_t kColumnChunkElements = 16384;
constexpr int64_t kColumnMaxChunks = 64;
constexpr int64_t kCpuPartialsCapacity = int64_t{1} << 22;

/// The fewest threads a reduction's CUDA launch should have (when its
/// iteration space has that many elements), and the largest thread block.
constexpr int64_t kGpuMinThreads = 65536;
constexpr int64_t kGpuMaxBlock = 1024;
/// The fewest blocks a large reduction should have: two per SM of an H100.
constexpr int64_t kGpuMinBlocks = 256;
/// The static shared memory a block may use (48 KiB on every CUDA GPU).
constexpr int64_t kGpuSharedBytes = 48 * 1024;
/// Elements of each device global holding the two-stage form's partials.
constexpr int64_t kGpuPartialsCapacity = 65536;
/// A CUDA reduction that keeps the innermost dim: threads per block (a tile
/// of up to 32 columns by row lanes), the blocks it aims for (eight per SM of
/// an H100: a memory-bound kernel needs loads in flight), and the fewest rows
/// each thread sums before its rows are split over more blocks.
constexpr int64_t kGpuColumnBlock = 256;
constexpr int64_t kGpuColumnMinBlocks = 1024;
constexpr int64_t kGpuColumnRowsPerThread = 16;

/// How an output is computed: stored per iteration, or reduced.
enum class Accumulate { None, Sum, Max };

/// Loops over the iteration space of `extents` (per dim: `iterators` says
/// parallel or reduction) like a linalg.generic with these `maps` (inputs,
/// then outputs) would. `body` gets one scalar per input (and per output, with
/// an undefined value: it must not read them) and returns one per output: for
/// a reduced output, the iteration's contribution (the value summed, or
/// maxed); for the others, the value stored at the iteration's element. A
/// reduced output is multiplied by its `scale` (1 / count for a mean) before
/// it is stored.
void buildReductionNest(
    mlir::OpBuilder &b, mlir::Location loc, mlir::ValueRange inputs,
    mlir::ValueRange outputs, llvm::ArrayRef<mlir::AffineMap> maps,
    llvm::ArrayRef<mlir::utils::IteratorType> iterators, llvm::ArrayRef<int64_t> extents,
    llvm::ArrayRef<Accumulate> accumulate, llvm::ArrayRef<double> scales,
    llvm::function_ref<llvm::SmallVector<mlir::Value>(mlir::OpBuilder &, mlir::Location,
                                                      mlir::ValueRange)>
        body);

/// A CUDA block reduction (the building block of the above, also used by the
/// loss): a gpu.launch of `grid` blocks of `block` threads (a power of two).
/// `perThread` returns the thread's accumulators (one per entry of `types`),
/// `combine` merges two of entry `i`, and `finish`, run by thread 0 of each
/// block, gets the block's totals, combined as a tree in shared memory.
void buildBlockReduction(
    mlir::OpBuilder &b, mlir::Location loc, int64_t grid, int64_t block, mlir::TypeRange types,
    llvm::function_ref<llvm::SmallVector<mlir::Value>(mlir::OpBuilder &, mlir::Location,
                                                      mlir::Value blockId, mlir::Value threadId)>
        perThread,
    llvm::function_ref<mlir::Value(mlir::OpBuilder &, mlir::Location, unsigned, mlir::Value,
                                   mlir::Value)>
        combine,
    llvm::function_ref<void(mlir::OpBuilder &, mlir::Location, mlir::Value blockId,
                            mlir::ValueRange totals)>
        finish);

/// A gpu.launch of `grid` blocks of `block` threads, with one shared-memory
/// buffer of `block` elements per entry of `shared`: `body` fills it (the
/// launch's terminator is added after).
void buildBlockLaunch(
    mlir::OpBuilder &b, mlir::Location loc, int64_t grid, int64_t block, mlir::TypeRange shared,
    llvm::function_ref<void(mlir::OpBuilder &, mlir::Location, mlir::Value blockId,
                            mlir::Value threadId, llvm::ArrayRef<mlir::BlockArgument> buffers)>
        body);

/// Inside such a launch: every thread's `value` combined as a tree in
/// `buffer` (a fixed order); every thread gets the total. All threads of the
/// block must reach it; `buffer` must not be reused for another reduction.
mlir::Value blockAllReduce(
    mlir::OpBuilder &b, mlir::Location loc, mlir::Value threadId, int64_t block,
    mlir::Value buffer, mlir::Value value,
    llvm::function_ref<mlir::Value(mlir::OpBuilder &, mlir::Location, mlir::Value, mlir::Value)>
        combine);

/// The block size for `outputs` blocks reducing `count` elements each: enough
/// threads in all for kGpuMinThreads, no more than the next power of two at or
/// above the elements, a power of two in [32, kGpuMaxBlock].
int64_t gpuBlockSize(int64_t outputs, int64_t count);

/// Declares (once per module) the device global of kGpuPartialsCapacity
/// elements of `type` that CUDA kernels keep partial results in between two
/// launches, and returns its symbol name. `b` must be inside the module (not
/// inside an op being built). Kernels run one at a time on one stream, so one
/// global per type serves them all.
std::string declarePartials(mlir::OpBuilder &b, mlir::Location loc, mlir::Type type);

/// The same for the CPU's two-stage column reductions: a global of
/// kCpuPartialsCapacity elements (a plan's commands run one at a time, each
/// launch joined before the next starts).
std::string declareCpuPartials(mlir::OpBuilder &b, mlir::Location loc, mlir::Type type);

/// The largest power-of-two block whose shared buffers (one element of each
/// of `types` per thread) fit kGpuSharedBytes.
int64_t largestBlock(mlir::TypeRange types);

} // namespace graphc

#endif // GRAPHC_COMPILER_LOWERING_REDUCTIONNEST_H
