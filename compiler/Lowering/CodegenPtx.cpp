//===- CodegenPtx.cpp - kernel bodies to PTX ------------------------------===//
//
// toolchain.md's GPU pipeline over the same bodies the CPU path compiles:
//  1) every linalg.generic gets its parallel loops first (a per-channel
//     reduction becomes a thread per channel, not a launch per reduced index),
//     then linalg becomes scf.parallel / scf.for;
//  2) each top-level scf.parallel is tiled by 256 (no-min-max-bounds: without
//     it, trip counts that are not a multiple of the tile stay on the host),
//     mapped to blocks x threads and becomes a gpu.launch;
//  3) what is left at the top level and is not a constant (a full reduction,
//     a scalar update) runs in a one-thread launch: correct, and rare;
//  4) the launches are outlined, merged into one gpu.module, lowered to NVVM
//     with bare pointers (every shape is static) and serialized to PTX for
//     each requested chip; libdevice supplies the math functions.
// The host side of each kernel is then nothing but its launches, which are
// recorded (entry, grid, block, which buffers) for the runtime to replay.
//
//===----------------------------------------------------------------------===//

#include "compiler/Lowering/CodegenPtx.h"

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
#include "mlir/Dialect/Linalg/Passes.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/SCF/Transforms/Passes.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/ADT/SetVector.h"

using namespace mlir;

namespace graphc {
namespace {

constexpr int64_t kThreadsPerBlock = 256;
constexpr llvm::StringLiteral kGpuModuleName = "graphc_kernels";

/// Reorders each linalg.generic's loops: parallel iterators, then reductions.
LogicalResult parallelLoopsFirst(ModuleOp module) {
  IRRewriter rewriter(module.getContext());
  SmallVector<linalg::GenericOp> generics;
  module.walk([&](linalg::GenericOp op) { generics.push_back(op); });
  for (linalg::GenericOp op : generics) {
    SmallVector<utils::IteratorType> iterators = op.getIteratorTypesArray();
    SmallVector<unsigned> order;
    for (auto kind : {utils::IteratorType::parallel, utils::IteratorType::reduction})
      for (unsigned i = 0; i < iterators.size(); ++i)
        if (iterators[i] == kind)
          order.push_back(i);
    if (llvm::equal(order, llvm::seq<unsigned>(0, iterators.size())))
      continue;
    rewriter.setInsertionPoint(op);
    if (failed(linalg::interchangeGenericOp(rewriter, op, order)))
      return op.emitError("cannot put the parallel loops of this kernel first");
  }
  return success();
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

/// Moves `ops` (contiguous, in order) into a gpu.launch of one thread.
gpu::LaunchOp wrapInSingleThreadLaunch(ArrayRef<Operation *> ops) {
  Location loc = ops.front()->getLoc();
  OpBuilder b(ops.front());
  Value one = b.create<arith::ConstantIndexOp>(loc, 1);
  auto launch = b.create<gpu::LaunchOp>(loc, one, one, one, one, one, one);
  Block &body = launch.getBody().front();
  for (Operation *op : ops)
    op->moveBefore(&body, body.end());
  OpBuilder::atBlockEnd(&body).create<gpu::TerminatorOp>(loc);
  return launch;
}

/// Clones `run` into every scf.parallel that uses its results and erases it,
/// if the run only computes values: ops without regions that are free of
/// memory effects or load memrefs the kernel never writes.
LogicalResult sinkIntoParallelLoops(ArrayRef<Operation *> run, func::FuncOp func) {
  llvm::SmallPtrSet<Value, 8> written;
  bool unknownWrite = false;
  func.walk([&](MemoryEffectOpInterface op) {
    SmallVector<MemoryEffects::EffectInstance> effects;
    op.getEffects(effects);
    for (const auto &effect : effects)
      if (isa<MemoryEffects::Write>(effect.getEffect())) {
        if (Value v = effect.getValue())
          written.insert(v);
        else
          unknownWrite = true;
      }
  });
  if (unknownWrite)
    return failure();
  llvm::SmallPtrSet<Operation *, 16> inRun(run.begin(), run.end());
  llvm::SetVector<scf::ParallelOp> loops;
  for (Operation *op : run) {
    if (op->getNumRegions() != 0)
      return failure();
    auto load = dyn_cast<memref::LoadOp>(op);
    if (load ? written.contains(load.getMemRef()) : !isMemoryEffectFree(op))
      return failure();
    for (Operation *user : op->getUsers()) {
      Operation *top = op->getBlock()->findAncestorOpInBlock(*user);
      if (inRun.contains(top))
        continue;
      auto loop = dyn_cast<scf::ParallelOp>(top);
      if (!loop)
        return failure();
      loops.insert(loop);
    }
  }
  for (scf::ParallelOp loop : loops) {
    OpBuilder b = OpBuilder::atBlockBegin(loop.getBody());
    IRMapping mapping;
    for (Operation *op : run) {
      Operation *copy = b.clone(*op, mapping);
      for (auto [from, to] : llvm::zip(op->getResults(), copy->getResults()))
        from.replaceUsesWithIf(to, [&](OpOperand &use) {
          return loop->isProperAncestor(use.getOwner());
        });
    }
  }
  for (Operation *op : llvm::reverse(run))
    op->erase();
  return success();
}

/// Puts every top-level op of `func` that is neither a constant nor an
/// scf.parallel into one-thread launches: maximal runs of them when no value
/// crosses a run's boundary, else the whole body.
LogicalResult wrapHostCode(func::FuncOp func) {
  Block &body = func.getBody().front();
  auto isLeftOnHost = [](Operation &op) {
    return op.hasTrait<OpTrait::ConstantLike>() || op.hasTrait<OpTrait::IsTerminator>();
  };
  for (auto loop : body.getOps<scf::ParallelOp>())
    if (loop.getNumReductions() != 0)
      return loop.emitError("GPU codegen: parallel loops with reductions are not supported");

  SmallVector<SmallVector<Operation *>> runs;
  bool newRun = true;
  for (Operation &op : body) {
    if (isLeftOnHost(op))
      continue;
    if (isa<scf::ParallelOp>(op)) {
      newRun = true;
      continue;
    }
    if (newRun)
      runs.emplace_back();
    newRun = false;
    runs.back().push_back(&op);
  }
  auto escapes = [](ArrayRef<Operation *> run) {
    llvm::SmallPtrSet<Operation *, 16> inRun(run.begin(), run.end());
    for (Operation *op : run)
      for (Operation *user : op->getUsers())
        if (!inRun.contains(op->getBlock()->findAncestorOpInBlock(*user)))
          return true;
    return false;
  };
  // A scalar computed before a parallel loop (dropout's seed hash) is
  // recomputed by each thread instead, when that is legal.
  llvm::erase_if(runs, [&](ArrayRef<Operation *> run) {
    return escapes(run) && succeeded(sinkIntoParallelLoops(run, func));
  });
  if (llvm::any_of(runs, escapes)) {
    runs.assign(1, {});
    for (Operation &op : body)
      if (!isLeftOnHost(op))
        runs.back().push_back(&op);
  }
  for (ArrayRef<Operation *> run : runs) {
    gpu::LaunchOp launch = wrapInSingleThreadLaunch(run);
    SmallVector<scf::ParallelOp> nested;
    launch.walk([&](scf::ParallelOp loop) { nested.push_back(loop); }); // post-order
    for (scf::ParallelOp loop : nested) {
      if (loop.getNumReductions() != 0)
        return loop.emitError("GPU codegen: parallel loops with reductions are not supported");
      sequentialize(loop);
    }
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

  // 1) linalg to parallel loops, parallel dimensions outermost.
  if (failed(parallelLoopsFirst(kernels)))
    return failure();
  {
    PassManager pm(context, ModuleOp::getOperationName());
    pm.addNestedPass<func::FuncOp>(createConvertLinalgToParallelLoopsPass());
    pm.addPass(createCanonicalizerPass());
    if (failed(pm.run(kernels)))
      return emitError(loc, "GPU codegen: lowering linalg to loops failed");
  }
  // 3) before 2): the host code goes into one-thread launches, so that the
  // mapping below sees only the top-level scf.parallel loops.
  for (auto func : kernels.getOps<func::FuncOp>())
    if (failed(wrapHostCode(func)))
      return failure();
  // 2) tile, map, convert, outline.
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
      GpuLaunch &record = launches.emplace_back();
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
