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
  }
  // 2b) tile, map, convert, outline.
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
