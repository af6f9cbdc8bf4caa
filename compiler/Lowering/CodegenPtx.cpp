//===- CodegenPtx.cpp - kernel bodies to PTX ------------------------------===//
//
// The GPU pipeline over the same bodies the CPU path compiles:
//  1) the CUDA variants of target-specific code are kept (block reductions:
//     ReductionNest.h), then every linalg.generic gets its parallel loops
//     first, then linalg becomes scf.parallel / scf.for;
//  2) each top-level scf.parallel is collapsed to one dimension, then tiled
//     by 256 (no-min-max-bounds: without it, trip counts that are not a
//     multiple of the tile stay on the host), mapped to blocks x threads and
//     becomes a gpu.launch;
//  3) what is left at the top level and is not a constant or a launch (a
//     scalar update) runs in a one-thread launch;
//  4) the launches are outlined, merged into one gpu.module, lowered to NVVM
//     with bare pointers (every shape is static) and serialized to PTX for
//     each requested chip; libdevice supplies the math functions.
// The host side of each kernel is then nothing but its launches, which are
// recorded (entry, grid, block, which buffers) for the runtime to replay; a
// launch passing more than 1 MiB to fewer than kGpuMinThreads threads is
// warned about (it would leave the GPU all but idle; test/tools/
// gpu-launches.test keeps the model zoo free of them).
//
//===----------------------------------------------------------------------===//

#include "compiler/Lowering/CodegenPtx.h"
#include "compiler/Lowering/KernelLoops.h"
#include "compiler/Lowering/ReductionNest.h"

#include "mlir/Conversion/AffineToStandard/AffineToStandard.h"
#include "mlir/Conversion/GPUToNVVM/GPUToNVVMPass.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Conversion/SCFToGPU/SCFToGPUPass.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/SCF/Transforms/Passes.h"
#include "mlir/Dialect/SCF/Utils/Utils.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"

#include <numeric>

using namespace mlir;

namespace graphc {
namespace {

constexpr int64_t kThreadsPerBlock = 256;
/// Launches above this many bytes must use the GPU: kGpuMinThreads threads.
constexpr uint64_t kBigLaunchBytes = uint64_t{1} << 20;
constexpr llvm::StringLiteral kGpuModuleName = "graphc_kernels";

/// The elements each thread of a flat elementwise kernel takes, and the
/// alignment every kernel argument has (plan buffers lie at multiples of 64
/// bytes; the plan loader refuses offsets that are not multiples of 16).
constexpr int64_t kVectorElements = 4;
constexpr int64_t kKernelArgumentAlignment = 16;

/// A flat loop whose every memory access is to element `iv` of a 1-D memref
/// (or to a scalar), over a multiple of kVectorElements iterations from 0.
bool IsVectorizable(scf::ParallelOp loop) {
  if (loop.getNumLoops() != 1 || loop.getNumReductions() != 0)
    return false;
  std::optional<int64_t> lb = getConstantIntValue(loop.getLowerBound()[0]);
  std::optional<int64_t> ub = getConstantIntValue(loop.getUpperBound()[0]);
  std::optional<int64_t> step = getConstantIntValue(loop.getStep()[0]);
  // A loop too short to fill the GPU once grouped keeps an element a thread.
  if (lb != 0 || step != 1 || !ub || *ub % kVectorElements != 0 ||
      *ub / kVectorElements < kGpuMinThreads)
    return false;
  Value iv = loop.getInductionVars()[0];
  bool ok = true;
  loop.getBody()->walk([&](Operation *op) {
    auto check = [&](Value memref, ValueRange indices) {
      // Loads are hoisted ahead of the body: what they read must come from
      // outside it (the kernel's arguments).
      ok &= loop.isDefinedOutsideOfLoop(memref);
      auto type = cast<MemRefType>(memref.getType());
      if (type.getRank() == 0)
        return;
      ok &= type.getRank() == 1 && indices.size() == 1 && indices[0] == iv;
    };
    if (auto load = dyn_cast<memref::LoadOp>(op))
      check(load.getMemRef(), load.getIndices());
    else if (auto store = dyn_cast<memref::StoreOp>(op))
      ok &= cast<MemRefType>(store.getMemRef().getType()).getRank() == 1 &&
            store.getIndices().size() == 1 && store.getIndices()[0] == iv;
    else if (llvm::any_of(op->getOperandTypes(), [](Type t) { return isa<MemRefType>(t); }) ||
             op->getNumRegions() != 0)
      ok = false;  // another kind of access, or a nested loop: left as it is
  });
  return ok;
}

/// Rewrites `loop` (IsVectorizable) as a loop over its iterations'
/// kVectorElements-sized groups. A group's loads come first, each load of the
/// body for the group's iterations side by side, then each iteration's
/// arithmetic, then each store for the iterations side by side: so the
/// vectorizer finds each operand's accesses adjacent, with no store between
/// them. The order is safe because an iteration reads and writes only its
/// own element of each 1-D buffer (and reads scalars nothing writes), and
/// a kernel's outputs never overlap one another (the plan loader checks).
void GiveEachIterationConsecutiveElements(scf::ParallelOp loop) {
  OpBuilder b(loop);
  Location loc = loop.getLoc();
  const int64_t n = *getConstantIntValue(loop.getUpperBound()[0]);
  Value zero = b.create<arith::ConstantIndexOp>(loc, 0);
  Value one = b.create<arith::ConstantIndexOp>(loc, 1);
  Value groups = b.create<arith::ConstantIndexOp>(loc, n / kVectorElements);
  auto grouped = b.create<scf::ParallelOp>(loc, ValueRange{zero}, ValueRange{groups},
                                           ValueRange{one});
  OpBuilder body = OpBuilder::atBlockBegin(grouped.getBody());
  Value group = grouped.getInductionVars()[0];
  Value first = body.create<arith::MulIOp>(
      loc, group, body.create<arith::ConstantIndexOp>(loc, kVectorElements));
  IRMapping mappings[kVectorElements];
  for (int64_t k = 0; k < kVectorElements; ++k)
    mappings[k].map(loop.getInductionVars()[0],
                    k == 0 ? first
                           : body.create<arith::AddIOp>(
                                 loc, first, body.create<arith::ConstantIndexOp>(loc, k)));
  auto ops = loop.getBody()->without_terminator();
  for (Operation &op : ops)
    if (isa<memref::LoadOp>(op))
      for (IRMapping &mapping : mappings)
        body.clone(op, mapping);
  for (IRMapping &mapping : mappings)
    for (Operation &op : ops)
      if (!isa<memref::LoadOp, memref::StoreOp>(op))
        body.clone(op, mapping);
  for (Operation &op : ops)
    if (isa<memref::StoreOp>(op))
      for (IRMapping &mapping : mappings)
        body.clone(op, mapping);
  loop.erase();
}

/// Rewrites an scf.parallel without reductions as nested scf.for loops.
void sequentialize(scf::ParallelOp op) {
  OpBuilder b(op);
  IRMapping mapping;
  for (auto [iv, lb, ub, step] : llvm::zip(op.getInductionVars(), op.getLowerBound(),
                                           op.getUpperBound(), op.getStep())) {
    auto loop = b.create<scf::ForOp>(op.getLoc(), lb, ub, step);
    mapping.map(iv, loop.getInductionVar());
    b.setInsertionPointToStart(loop.getBody());
  }
  for (Operation &inner : op.getBody()->without_terminator())
    b.clone(inner, mapping);
  op.erase();
}

/// Moves `ops` (contiguous, in order) into a gpu.launch of one thread, where
/// any parallel loop among them runs sequentially.
LogicalResult wrapInSingleThreadLaunch(ArrayRef<Operation *> ops) {
  Location loc = ops.front()->getLoc();
  OpBuilder b(ops.front());
  Value one = b.create<arith::ConstantIndexOp>(loc, 1);
  auto launch = b.create<gpu::LaunchOp>(loc, one, one, one, one, one, one);
  Block &body = launch.getBody().front();
  for (Operation *op : ops)
    op->moveBefore(&body, body.end());
  OpBuilder::atBlockEnd(&body).create<gpu::TerminatorOp>(loc);
  SmallVector<scf::ParallelOp> nested;
  launch.walk([&](scf::ParallelOp loop) { nested.push_back(loop); }); // post-order
  for (scf::ParallelOp loop : nested) {
    if (loop.getNumReductions() != 0)
      return loop.emitError("GPU codegen: parallel loops with reductions are not supported");
    sequentialize(loop);
  }
  return success();
}

FailureOr<uint32_t> constantDim(Value v) {
  std::optional<int64_t> c = getConstantIntValue(v);
  if (!c || *c < 1 || *c > std::numeric_limits<int32_t>::max())
    return failure();
  return static_cast<uint32_t>(*c);
}

} // namespace

FailureOr<PtxKernels> compilePtx(ModuleOp kernels, ArrayRef<std::string> names,
                                 ArrayRef<std::string> chips, StringRef toolkitPath) {
  MLIRContext *context = kernels->getContext();
  Location loc = kernels.getLoc();

  // 1) the CUDA variants of target-specific code (block reductions), then
  // linalg to parallel loops, parallel dimensions outermost.
  if (failed(selectTarget(kernels, "cuda")) || failed(lowerToParallelLoops(kernels)))
    return failure();
  // 3) before 2): the host code goes into one-thread launches, so that the
  // mapping below sees only the top-level scf.parallel loops.
  for (auto func : kernels.getOps<func::FuncOp>())
    if (failed(wrapHostCode(func, wrapInSingleThreadLaunch)))
      return failure();
  // 2a) every multi-dimensional parallel loop (a transpose, a broadcast, a
  // fusion that indexes one) becomes one flat loop over its iterations: the
  // mapper below takes at most three dims and would leave the rest to each
  // thread, and consecutive threads then write consecutive elements of the
  // result (coalesced), whatever its rank.
  {
    IRRewriter rewriter(context);
    for (auto func : kernels.getOps<func::FuncOp>())
      for (auto loop : llvm::make_early_inc_range(
               func.getBody().front().getOps<scf::ParallelOp>())) {
        if (loop.getNumLoops() < 2 || loop.getNumReductions() != 0)
          continue;
        std::vector<unsigned> all(loop.getNumLoops());
        std::iota(all.begin(), all.end(), 0u);
        rewriter.setInsertionPoint(loop);
        collapseParallelLoops(rewriter, loop, {all});
      }
    // 2b) a flat elementwise loop gives each thread kVectorElements
    // consecutive elements, so that LLVM's load-store vectorizer makes one
    // 16-byte access of each operand's (ld.global.v4.f32) where there were
    // four.
    for (auto func : kernels.getOps<func::FuncOp>())
      for (auto loop : llvm::make_early_inc_range(
               func.getBody().front().getOps<scf::ParallelOp>()))
        if (IsVectorizable(loop))
          GiveEachIterationConsecutiveElements(loop);
  }
  // 2c) tile, map, convert, outline.
  {
    PassManager pm(context, ModuleOp::getOperationName());
    pm.addNestedPass<func::FuncOp>(
        createParallelLoopTilingPass({kThreadsPerBlock}, /*noMinMaxBounds=*/true));
    pm.addNestedPass<func::FuncOp>(createGpuMapParallelLoopsPass());
    pm.addPass(createParallelLoopToGpuPass());
    pm.addPass(createLowerAffinePass());
    pm.addPass(createCanonicalizerPass());
    pm.addPass(createGpuLauchSinkIndexComputationsPass());
    pm.addPass(createGpuKernelOutliningPass());
    if (failed(pm.run(kernels)))
      return emitError(loc, "GPU codegen: mapping the kernels onto CUDA grids failed");
  }

  // Record each kernel's launches; the host side must be nothing else.
  PtxKernels result;
  SymbolTable symbols(kernels);
  for (const std::string &name : names) {
    auto func = symbols.lookup<func::FuncOp>(name);
    if (!func)
      return emitError(loc, "GPU codegen: kernel ") << name << " vanished";
    auto &launches = result.launches.emplace_back();
    for (Operation &op : func.getBody().front()) {
      if (op.hasTrait<OpTrait::ConstantLike>() || op.hasTrait<OpTrait::IsTerminator>())
        continue;
      auto launch = dyn_cast<gpu::LaunchFuncOp>(op);
      if (!launch)
        return op.emitError("GPU codegen: host code left in kernel ")
               << name << " after mapping";
      KernelLaunch &record = launches.emplace_back();
      record.entry = launch.getKernelModuleName().str();
      gpu::KernelDim3 grid = launch.getGridSizeOperandValues();
      gpu::KernelDim3 block = launch.getBlockSizeOperandValues();
      Value dims[6] = {grid.x, grid.y, grid.z, block.x, block.y, block.z};
      for (int i = 0; i < 6; ++i) {
        FailureOr<uint32_t> d = constantDim(dims[i]);
        if (failed(d))
          return launch.emitError("GPU codegen: launch dimensions of kernel ")
                 << name << " are not static";
        (i < 3 ? record.grid[i] : record.block[i - 3]) = *d;
      }
      if (launch.getDynamicSharedMemorySize() || launch.hasClusterSize())
        return launch.emitError("GPU codegen: unexpected shared memory or clusters");
      for (Value arg : launch.getKernelOperands()) {
        auto blockArg = dyn_cast<BlockArgument>(arg);
        if (!blockArg || blockArg.getOwner() != &func.getBody().front())
          return launch.emitError("GPU codegen: kernel ")
                 << name << " passes a host-computed value to the device";
        record.args.push_back(blockArg.getArgNumber());
      }
      // The GPU must be used as one: a launch moving more than
      // kBigLaunchBytes runs on at least kGpuMinThreads threads.
      uint64_t bytes = 0;
      for (uint32_t a : record.args)
        if (auto type = dyn_cast<MemRefType>(func.getArgument(a).getType()))
          bytes += static_cast<uint64_t>(type.getNumElements()) *
                   std::max<uint64_t>(1, type.getElementTypeBitWidth() / 8);
      uint64_t threads = 1;
      for (uint32_t d : record.grid)
        threads *= d;
      for (uint32_t d : record.block)
        threads *= d;
      // A shape none of the forms fill (a loss over a few rows of very many
      // classes) still compiles and runs; graphc says what it will cost.
      if (bytes > kBigLaunchBytes && threads < static_cast<uint64_t>(kGpuMinThreads))
        launch.emitWarning("GPU codegen: launch ")
            << record.entry << " of kernel " << name << " passes " << bytes
            << " bytes to only " << threads << " threads (fewer than " << kGpuMinThreads
            << "): the GPU will be mostly idle while it runs";
    }
  }

  // 4) One gpu.module with every entry, named after its outlined module
  // (unique), compiled once per chip.
  OwningOpRef<ModuleOp> device(ModuleOp::create(loc));
  SmallVector<Attribute> targets;
  for (const std::string &chip : chips)
    targets.push_back(NVVM::NVVMTargetAttr::get(context, /*optLevel=*/3,
                                                "nvptx64-nvidia-cuda", chip, "+ptx80"));
  OpBuilder b = OpBuilder::atBlockEnd(device->getBody());
  auto merged = b.create<gpu::GPUModuleOp>(loc, kGpuModuleName, b.getArrayAttr(targets));
  Operation *end = merged.getBody()->getTerminator();
  for (auto outlined : llvm::make_early_inc_range(kernels.getOps<gpu::GPUModuleOp>())) {
    // Device globals (the block reductions' partials), once each.
    for (auto global : llvm::make_early_inc_range(outlined.getOps<memref::GlobalOp>())) {
      if (SymbolTable::lookupSymbolIn(merged, global.getSymName()))
        global.erase();
      else
        global->moveBefore(merged.getBody(), merged.getBody()->begin());
    }
    for (auto fn : llvm::make_early_inc_range(outlined.getOps<gpu::GPUFuncOp>())) {
      if (!fn.isKernel())
        return fn.emitError("GPU codegen: unexpected device function");
      fn.setName(outlined.getSymName());
      // Every buffer a kernel gets lies at a 64-byte offset of a region the
      // runtime allocates aligned (the loader checks the offsets): saying so
      // lets the vectorizer use 16-byte accesses.
      for (unsigned i = 0; i < fn.getNumArguments(); ++i)
        if (isa<MemRefType>(fn.getArgument(i).getType()))
          fn.setArgAttr(i, "llvm.align", IntegerAttr::get(IntegerType::get(context, 64),
                                                          kKernelArgumentAlignment));
      fn->moveBefore(end);
    }
  }
  {
    PassManager pm(context, ModuleOp::getOperationName());
    ConvertGpuOpsToNVVMOpsOptions nvvm;
    nvvm.useBarePtrCallConv = true;
    pm.addNestedPass<gpu::GPUModuleOp>(createConvertSCFToCFPass());
    pm.addNestedPass<gpu::GPUModuleOp>(createConvertGpuOpsToNVVMOps(nvvm));
    pm.addPass(createReconcileUnrealizedCastsPass());
    GpuModuleToBinaryPassOptions binary;
    binary.toolkitPath = toolkitPath.str();
    binary.compilationTarget = "isa";
    pm.addPass(createGpuModuleToBinaryPass(binary));
    if (failed(pm.run(*device)))
      return emitError(loc, "GPU codegen: lowering to NVVM / PTX failed");
  }
  auto binaries = device->getOps<gpu::BinaryOp>();
  if (binaries.empty())
    return emitError(loc, "GPU codegen: no PTX was produced");
  for (Attribute attr : (*binaries.begin()).getObjects()) {
    auto object = cast<gpu::ObjectAttr>(attr);
    auto target = cast<NVVM::NVVMTargetAttr>(object.getTarget());
    StringRef ptx = object.getObject().getValue();
    result.ptx.emplace_back(target.getChip().str(), ptx.rtrim('\0').str());
  }
  return result;
}

} // namespace graphc
