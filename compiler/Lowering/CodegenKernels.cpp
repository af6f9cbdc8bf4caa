//===- CodegenKernels.cpp - kernel bodies to native code and PTX ----------===//
//
// Compiles `module @kernels` into a `plan.binary` per target. The PTX path is
// in CodegenPtx.cpp. The CPU path:
//  1) clone the bodies, lower linalg to parallel loops and split each kernel
//     into launches (KernelLoops.h): every top-level scf.parallel is outlined
//     into a function of the buffers it uses plus [begin, end) of its outermost
//     dimension, which the runtime spreads over the cores; code outside the
//     loops runs in one-iteration launches;
//  2) lower to the LLVM dialect (bare-pointer calling
//     convention, since every shape is static), translate to LLVM IR and add
//     `void graphc_kernel_<entry>(void **buffers, int64_t begin, int64_t end)`
//     per launch, the one signature the runtime calls;
//  3) optimize at O3 for the requested CPU through a real TargetMachine
//     (without one, LLVM's cost model refuses to vectorize, silently);
//  4) emit an object and link it into a shared object with ld.lld, which the
//     runtime loads from memory. Next to each entry the library exports
//     `graphc_signature_<entry>`, a string recording what the code was
//     compiled for (its kernel, launch index, iterations, buffers and their
//     sizes); the runtime refuses a plan whose launch table says otherwise.
//
//===----------------------------------------------------------------------===//

#include "compiler/Lowering/CodegenPtx.h"
#include "compiler/Lowering/KernelLoops.h"
#include "compiler/Lowering/Passes.h"
#include "contract/cpu_levels.h"
#include "contract/exp_f32.h"
#include "contract/files.h"
#include "contract/launch_record.h"
#include "mlir/Conversion/AffineToStandard/AffineToStandard.h"
#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVMPass.h"
#include "mlir/Conversion/MathToLLVM/MathToLLVM.h"
#include "mlir/Conversion/MemRefToLLVM/MemRefToLLVM.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Transforms/Passes.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/TypeUtilities.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVM/NVVM/Target.h"
#include "mlir/Target/LLVMIR/Dialect/GPU/GPUToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/NVVM/NVVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "mlir/Transforms/Passes.h"
#include "mlir/Transforms/RegionUtils.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/Analysis/LoopInfo.h"
#include "llvm/Analysis/VectorUtils.h"
#include "llvm/Bitcode/BitcodeReader.h"
#include "llvm/Bitcode/BitcodeWriter.h"
#include "llvm/IR/Constants.h"
#include "llvm/IR/Dominators.h"
#include "llvm/IR/GlobalVariable.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/InstIterator.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/Linker/Linker.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/Signals.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/ThreadPool.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"
#include "llvm/Transforms/Utils/SplitModule.h"
#include <algorithm>
#include <utility>

namespace graphc {
#define GEN_PASS_DEF_CODEGENKERNELS
#include "compiler/Lowering/Passes.h.inc"
} // namespace graphc

using namespace mlir;
using namespace graphc;

namespace {

constexpr llvm::StringLiteral kCpuTriple = "x86_64-unknown-linux-gnu";
constexpr llvm::StringLiteral kEntryPrefix = "graphc_kernel_";
constexpr llvm::StringLiteral kSignaturePrefix = "graphc_signature_";
/// A call marking a parallel loop's body between markParallelLoops and
/// annotateParallelLoops; none is left in the library.
constexpr llvm::StringLiteral kParallelMarker = "graphc_parallel_iteration";
/// The CPU kernels are optimized and compiled in partitions of about this
/// many launches, at most kMaxCpuPartitions of them, on as many threads.
constexpr size_t kLaunchesPerPartition = 24;
constexpr size_t kMaxCpuPartitions = 16;

/// The --dump-kernels file of CPU level `index` in `cpus`: cpu_x86_64.EXT for
/// a plan of one level, cpu_LEVEL.EXT for several.
std::string cpuDumpName(ArrayRef<std::string> cpus, size_t index, StringRef ext) {
  return (cpus.size() == 1 ? std::string("cpu_x86_64") : "cpu_" + cpus[index]) + "." +
         ext.str();
}

/// Calls kParallelMarker at the start of the body of every scf.parallel (and
/// of every scf.for built as one: kParallelLoopAttrName), before the loops
/// become branches: how annotateParallelLoops finds them in LLVM IR.
void markParallelLoops(ModuleOp kernels) {
  OpBuilder b = OpBuilder::atBlockEnd(kernels.getBody());
  auto marker = b.create<func::FuncOp>(kernels.getLoc(), kParallelMarker,
                                       b.getFunctionType({}, {}));
  marker.setPrivate();
  kernels.walk([&](Operation *op) {
    Block *body = nullptr;
    if (auto parallel = dyn_cast<scf::ParallelOp>(op))
      body = parallel.getBody();
    else if (auto loop = dyn_cast<scf::ForOp>(op); loop && loop->hasAttr(kParallelLoopAttrName))
      body = loop.getBody();
    if (body)
      OpBuilder::atBlockBegin(body).create<func::CallOp>(op->getLoc(), marker, ValueRange{});
  });
}

/// A 256-bit vector's f32 lanes: the vectorization factor of a loop that
/// computes in f32 and accumulates in f64 (two f64 vectors per step).
constexpr unsigned kFloatLanes = 8;

/// Whether the innermost `loop` widens f32 values to f64: a kernel that sums
/// in f64 (a bias's or batch norm's gradient beside the elementwise values
/// it fuses). LLVM's cost model sizes such a loop by its widest type, 4 lanes
/// of f64, so all of its f32 work would run in halves of vectors; at 8 lanes
/// ViT's GELU gradient with its bias gradient takes two thirds of the time.
/// Each lane is its own sum (a column's partial), so the width changes no
/// result.
bool widensFloatToDouble(const llvm::Loop &loop) {
  if (!loop.isInnermost())
    return false;
  for (llvm::BasicBlock *block : loop.blocks())
    for (llvm::Instruction &inst : *block)
      if (auto *ext = llvm::dyn_cast<llvm::FPExtInst>(&inst))
        if (ext->getSrcTy()->isFloatTy() && ext->getDestTy()->isDoubleTy())
          return true;
  return false;
}

/// Tells LLVM that the loops markParallelLoops marked carry no dependence
/// through memory from one iteration to the next (llvm.loop.parallel_accesses,
/// every memory access in the loop in its access group), and removes the
/// markers. Without it the vectorizer guards each loop with a check that its
/// buffers do not overlap, and an elementwise kernel running in place (the
/// output in an input's buffer, element i written where element i was read:
/// no dependence at all) failed the check and ran the scalar loop: ResNet-50's
/// in-place kernels moved their bytes at 60-70% of the others' rate. The
/// claim is the scf.parallel's own: its iterations are independent, which the
/// runtime relies on anyway by running them on different cores. An innermost
/// loop that widens f32 to f64 gets kFloatLanes as its vector width too.
void annotateParallelLoops(llvm::Module &module) {
  llvm::Function *marker = module.getFunction(kParallelMarker);
  if (!marker)
    return;
  SmallVector<llvm::CallInst *> calls;
  llvm::MapVector<llvm::Function *, SmallVector<llvm::BasicBlock *>> marked;
  for (llvm::User *user : marker->users())
    if (auto *call = llvm::dyn_cast<llvm::CallInst>(user)) {
      calls.push_back(call);
      marked[call->getFunction()].push_back(call->getParent());
    }
  llvm::LLVMContext &context = module.getContext();
  for (auto &[function, blocks] : marked) {
    llvm::DominatorTree dominators(*function);
    llvm::LoopInfo loops(dominators);
    llvm::SmallSetVector<llvm::Loop *, 8> parallel;
    for (llvm::BasicBlock *block : blocks)
      if (llvm::Loop *loop = loops.getLoopFor(block))
        parallel.insert(loop);
    for (llvm::Loop *loop : parallel) {
      llvm::MDNode *group = llvm::MDNode::getDistinct(context, {});
      for (llvm::BasicBlock *block : loop->blocks())
        for (llvm::Instruction &inst : *block) {
          if (!inst.mayReadOrWriteMemory())
            continue;
          llvm::MDNode *groups = inst.getMetadata(llvm::LLVMContext::MD_access_group);
          inst.setMetadata(llvm::LLVMContext::MD_access_group,
                           groups ? llvm::uniteAccessGroups(groups, group) : group);
        }
      SmallVector<llvm::Metadata *> properties = {nullptr};
      if (llvm::MDNode *old = loop->getLoopID())
        for (unsigned i = 1; i < old->getNumOperands(); ++i)
          properties.push_back(old->getOperand(i));
      properties.push_back(llvm::MDNode::get(
          context, {llvm::MDString::get(context, "llvm.loop.parallel_accesses"), group}));
      if (widensFloatToDouble(*loop))
        properties.push_back(llvm::MDNode::get(
            context, {llvm::MDString::get(context, "llvm.loop.vectorize.width"),
                      llvm::ConstantAsMetadata::get(llvm::ConstantInt::get(
                          llvm::Type::getInt32Ty(context), kFloatLanes))}));
      llvm::MDNode *id = llvm::MDNode::getDistinct(context, properties);
      id->replaceOperandWith(0, id);
      loop->setLoopID(id);
    }
  }
  for (llvm::CallInst *call : calls)
    call->eraseFromParent();
  marker->eraseFromParent();
}

/// i16 for bfloat, <N x i16> for <N x bfloat>, else null.
llvm::Type *bfloatBits(llvm::Type *type) {
  llvm::Type *i16 = llvm::Type::getInt16Ty(type->getContext());
  if (type->isBFloatTy())
    return i16;
  if (auto *vector = llvm::dyn_cast<llvm::VectorType>(type))
    if (vector->getElementType()->isBFloatTy())
      return llvm::VectorType::get(i16, vector->getElementCount());
  return nullptr;
}

/// The bits of `value` (bfloat or a vector of it) as `type`: the operand of the
/// bitcast that made `value`, a folded constant, or a new bitcast before `at`.
llvm::Value *asBits(llvm::Value *value, llvm::Type *type, llvm::Instruction *at) {
  if (auto *cast = llvm::dyn_cast<llvm::BitCastInst>(value))
    if (cast->getSrcTy() == type)
      return cast->getOperand(0);
  if (auto *constant = llvm::dyn_cast<llvm::Constant>(value))
    return llvm::ConstantExpr::getBitCast(constant, type);
  return new llvm::BitCastInst(value, type, "", at->getIterator());
}

/// Makes every bfloat that the kernels move (load, store, phi, select, vector
/// element and shuffle) move as i16. The kernels compute nothing in bfloat
/// (its conversions were expanded into integer arithmetic), but x86-64 without
/// AVX512-BF16 holds a bfloat value in a register as a float and stores it
/// through compiler-rt's __truncsfbf2, an import the kernel library may not
/// have (graphrun refuses such a plan): a one-element bf16 tensor broadcast
/// (its load hoisted out of the loop) or a select between bf16 values did.
/// Runs after the optimizer, whose instcombine would turn a store of a
/// bitcast back into a store of bfloat.
void moveBFloatAsBits(llvm::Module &module) {
  for (llvm::Function &function : module) {
    SmallVector<llvm::Instruction *> work;
    for (llvm::Instruction &inst : llvm::instructions(function))
      work.push_back(&inst);
    for (llvm::Instruction *inst : work) {
      if (auto *store = llvm::dyn_cast<llvm::StoreInst>(inst)) {
        if (llvm::Type *bits = bfloatBits(store->getValueOperand()->getType()))
          store->setOperand(0, asBits(store->getValueOperand(), bits, store));
        continue;
      }
      llvm::Type *bits = bfloatBits(inst->getType());
      if (!bits)
        continue;
      llvm::IRBuilder<> b(inst);
      llvm::Value *moved = nullptr;
      if (auto *load = llvm::dyn_cast<llvm::LoadInst>(inst)) {
        llvm::LoadInst *copy = b.CreateAlignedLoad(bits, load->getPointerOperand(),
                                                   load->getAlign(), load->isVolatile());
        copy->copyMetadata(*load);
        copy->setAtomic(load->getOrdering(), load->getSyncScopeID());
        moved = copy;
      } else if (auto *phi = llvm::dyn_cast<llvm::PHINode>(inst)) {
        llvm::PHINode *copy = b.CreatePHI(bits, phi->getNumIncomingValues());
        for (unsigned i = 0; i < phi->getNumIncomingValues(); ++i) {
          llvm::BasicBlock *from = phi->getIncomingBlock(i);
          copy->addIncoming(asBits(phi->getIncomingValue(i), bits, from->getTerminator()),
                            from);
        }
        moved = copy;
      } else if (auto *select = llvm::dyn_cast<llvm::SelectInst>(inst)) {
        moved = b.CreateSelect(select->getCondition(),
                               asBits(select->getTrueValue(), bits, inst),
                               asBits(select->getFalseValue(), bits, inst));
      } else if (auto *insert = llvm::dyn_cast<llvm::InsertElementInst>(inst)) {
        moved = b.CreateInsertElement(asBits(insert->getOperand(0), bits, inst),
                                      asBits(insert->getOperand(1), b.getInt16Ty(), inst),
                                      insert->getOperand(2));
      } else if (auto *extract = llvm::dyn_cast<llvm::ExtractElementInst>(inst)) {
        llvm::Value *vector = extract->getVectorOperand();
        moved = b.CreateExtractElement(
            asBits(vector, bfloatBits(vector->getType()), inst), extract->getIndexOperand());
      } else if (auto *shuffle = llvm::dyn_cast<llvm::ShuffleVectorInst>(inst)) {
        llvm::Value *first = shuffle->getOperand(0), *second = shuffle->getOperand(1);
        moved = b.CreateShuffleVector(asBits(first, bfloatBits(first->getType()), inst),
                                      asBits(second, bfloatBits(second->getType()), inst),
                                      shuffle->getShuffleMask());
      } else {
        continue; // a bitcast, or a conversion x86 does with shifts
      }
      llvm::BasicBlock::iterator after =
          llvm::isa<llvm::PHINode>(inst) ? inst->getParent()->getFirstInsertionPt()
                                         : inst->getIterator();
      auto *back = new llvm::BitCastInst(moved, inst->getType(), "", after);
      inst->replaceAllUsesWith(back);
      inst->eraseFromParent();
    }
    // bitcast(bitcast(x) to bfloat) to i16 is x; then the dead bitcasts go.
    for (bool changed = true; changed;) {
      changed = false;
      for (llvm::Instruction &inst : llvm::make_early_inc_range(llvm::instructions(function))) {
        auto *cast = llvm::dyn_cast<llvm::BitCastInst>(&inst);
        if (!cast)
          continue;
        if (auto *inner = llvm::dyn_cast<llvm::BitCastInst>(cast->getOperand(0));
            inner && inner->getSrcTy() == cast->getType()) {
          cast->replaceAllUsesWith(inner->getOperand(0));
          changed = true;
        }
        if (cast->use_empty()) {
          cast->eraseFromParent();
          changed = true;
        }
      }
    }
  }
}

/// The PTX targets of `targets=cuda`: Ampere and Hopper.
constexpr std::pair<llvm::StringLiteral, plan::Target> kCudaChips[] = {
    {"sm_80", plan::Target::cuda_sm80}, {"sm_90", plan::Target::cuda_sm90}};

/// Removes a temporary file when it goes out of scope.
struct TempFile {
  llvm::SmallString<128> path;
  /// Removed on SIGINT or SIGTERM too (graphc interrupted mid-codegen), not
  /// only when the compile ends.
  void removeOnSignal() { llvm::sys::RemoveFileOnSignal(path); }
  ~TempFile() {
    if (path.empty())
      return;
    llvm::sys::fs::remove(path);
    llvm::sys::DontRemoveFileOnSignal(path);
  }
};

/// Moves `ops` (contiguous, in order) into a one-iteration scf.parallel: a
/// launch the runtime runs on one core.
LogicalResult wrapInSingleIterationLoop(ArrayRef<Operation *> ops) {
  Location loc = ops.front()->getLoc();
  OpBuilder b(ops.front());
  Value zero = b.create<arith::ConstantIndexOp>(loc, 0);
  Value one = b.create<arith::ConstantIndexOp>(loc, 1);
  auto loop = b.create<scf::ParallelOp>(loc, ValueRange{zero}, ValueRange{one}, ValueRange{one});
  Block *body = loop.getBody();
  if (!body->mightHaveTerminator())
    OpBuilder::atBlockEnd(body).create<scf::ReduceOp>(loc);
  for (Operation *op : ops)
    op->moveBefore(body->getTerminator());
  return success();
}

/// Outlines each top-level scf.parallel of `func` (which must be nothing
/// else, besides constants) into a function of the buffers it uses and
/// (begin, end): the iterations of its outermost dimension to run. Erases
/// `func` and returns its launches, in order.
FailureOr<SmallVector<KernelLaunch>> outlineCpuLaunches(func::FuncOp func,
                                                        SymbolTable &symbols) {
  MLIRContext *context = func.getContext();
  Block &body = func.getBody().front();
  SmallVector<scf::ParallelOp> loops;
  for (Operation &op : body) {
    if (op.hasTrait<OpTrait::ConstantLike>() || op.hasTrait<OpTrait::IsTerminator>())
      continue;
    auto loop = dyn_cast<scf::ParallelOp>(op);
    if (!loop)
      return op.emitError("CPU codegen: code left outside the launches of kernel ")
             << func.getSymName();
    loops.push_back(loop);
  }
  SmallVector<KernelLaunch> launches;
  OpBuilder b(func);
  Type index = b.getIndexType();
  for (auto [n, loop] : llvm::enumerate(loops)) {
    Location loc = loop.getLoc();
    // What the loop reads from outside: buffers (in argument order) and constants.
    llvm::SetVector<Value> captured(loop->getOperands().begin(), loop->getOperands().end());
    getUsedValuesDefinedAbove(loop.getRegion(), captured);
    SmallVector<BlockArgument> buffers;
    SmallVector<Operation *> constants;
    for (Value v : captured) {
      if (auto arg = dyn_cast<BlockArgument>(v); arg && arg.getOwner() == &body)
        buffers.push_back(arg);
      else if (Operation *def = v.getDefiningOp(); def && def->hasTrait<OpTrait::ConstantLike>())
        constants.push_back(def);
      else
        return loop.emitError("CPU codegen: a launch of kernel ")
               << func.getSymName() << " reads a value computed outside it";
    }
    llvm::sort(buffers, [](BlockArgument x, BlockArgument y) {
      return x.getArgNumber() < y.getArgNumber();
    });
    SmallVector<Type> types;
    for (BlockArgument arg : buffers)
      types.push_back(arg.getType());
    types.append({index, index});
    auto outlined = b.create<func::FuncOp>(
        loc, (func.getSymName() + "_l" + Twine(n)).str(), FunctionType::get(context, types, {}));
    symbols.insert(outlined); // renamed if taken
    Block *entry = outlined.addEntryBlock();
    OpBuilder ob = OpBuilder::atBlockBegin(entry);
    IRMapping mapping;
    for (auto [i, arg] : llvm::enumerate(buffers))
      mapping.map(arg, entry->getArgument(i));
    for (Operation *c : constants)
      ob.clone(*c, mapping);
    auto chunked = cast<scf::ParallelOp>(ob.clone(*loop, mapping));
    ob.create<func::ReturnOp>(loc);

    // Iterations [begin, end) of the outermost dimension.
    std::optional<int64_t> lb = getConstantIntValue(chunked.getLowerBound()[0]);
    std::optional<int64_t> ub = getConstantIntValue(chunked.getUpperBound()[0]);
    std::optional<int64_t> step = getConstantIntValue(chunked.getStep()[0]);
    if (!lb || !ub || !step || *step < 1)
      return loop.emitError("CPU codegen: the outermost loop of kernel ")
             << func.getSymName() << " has no static bounds";
    int64_t extent = *ub > *lb ? (*ub - *lb + *step - 1) / *step : 0;
    if (extent < 1 || extent > std::numeric_limits<int32_t>::max())
      return loop.emitError("CPU codegen: the outermost loop of kernel ")
             << func.getSymName() << " has " << extent << " iterations";
    ob.setInsertionPoint(chunked);
    Value begin = entry->getArgument(buffers.size());
    Value end = entry->getArgument(buffers.size() + 1);
    Value stepValue = ob.create<arith::ConstantIndexOp>(loc, *step);
    Value lbValue = ob.create<arith::ConstantIndexOp>(loc, *lb);
    Value ubValue = ob.create<arith::ConstantIndexOp>(loc, *ub);
    Value from = ob.create<arith::AddIOp>(loc, lbValue,
                                          ob.create<arith::MulIOp>(loc, begin, stepValue));
    Value to = ob.create<arith::MinSIOp>(
        loc, ubValue,
        ob.create<arith::AddIOp>(loc, lbValue, ob.create<arith::MulIOp>(loc, end, stepValue)));
    chunked->setOperand(0, from);
    chunked->setOperand(chunked.getNumLoops(), to);

    KernelLaunch &launch = launches.emplace_back();
    launch.entry = outlined.getSymName().str();
    launch.grid = {static_cast<uint32_t>(extent), 1, 1};
    launch.block = {1, 1, 1};
    for (BlockArgument arg : buffers) {
      launch.args.push_back(arg.getArgNumber());
      auto type = llvm::cast<MemRefType>(arg.getType());
      launch.argBytes.push_back(type.getNumElements() *
                                plan::elementBytes(type.getElementType()));
    }
  }
  symbols.erase(func);
  return launches;
}

/// Splits every kernel of `kernels` into CPU launches (see above); per kernel
/// name, in order.
FailureOr<std::vector<SmallVector<KernelLaunch>>>
splitCpuLaunches(ModuleOp kernels, ArrayRef<std::string> names) {
  if (failed(selectTarget(kernels, "cpu")))
    return failure();
  collapseContiguousLoops(kernels);
  if (failed(lowerToParallelLoops(kernels)))
    return failure();
  SymbolTable symbols(kernels);
  std::vector<SmallVector<KernelLaunch>> result;
  for (const std::string &name : names) {
    auto func = symbols.lookup<func::FuncOp>(name);
    if (!func)
      return emitError(kernels.getLoc(), "CPU codegen: kernel ") << name << " vanished";
    if (failed(wrapHostCode(func, wrapInSingleIterationLoop)))
      return failure();
    auto launches = outlineCpuLaunches(func, symbols);
    if (failed(launches))
      return failure();
    result.push_back(std::move(*launches));
  }
  return result;
}

class CodegenKernelsPass : public graphc::impl::CodegenKernelsBase<CodegenKernelsPass> {
public:
  using CodegenKernelsBase::CodegenKernelsBase;
  void runOnOperation() override;
  void getDependentDialects(DialectRegistry &registry) const override {
    CodegenKernelsBase::getDependentDialects(registry);
    NVVM::registerNVVMTargetInterfaceExternalModels(registry);
    registerBuiltinDialectTranslation(registry);
    registerGPUDialectTranslation(registry);
    registerLLVMDialectTranslation(registry);
    registerNVVMDialectTranslation(registry);
  }

private:
  LogicalResult dump(StringRef file, StringRef bytes);
  /// One shared object per CPU level in `cpus`.
  FailureOr<SmallVector<std::string>> compileCpu(ModuleOp kernels, ArrayRef<std::string> names,
                                                 ArrayRef<SmallVector<KernelLaunch>> launches,
                                                 ArrayRef<std::string> cpus);
  LogicalResult lowerToLLVMDialect(ModuleOp kernels);
};

/// `type` (a scalar or vector of bf16) with f32 elements; null for others.
Type widenBFloat(Type type) {
  Type f32 = Float32Type::get(type.getContext());
  if (type.isBF16())
    return f32;
  if (auto vector = llvm::dyn_cast<VectorType>(type); vector && vector.getElementType().isBF16())
    return vector.clone(f32);
  return nullptr;
}

/// Computes every arith and math op on bf16 in f32, its result rounded to
/// bf16 once, as the op's type says (a model's own op on a bf16 tensor:
/// nn.relu in bf16 without --amp). x86-64-v3 has no bf16 arithmetic: LLVM
/// would promote each op and round its result through compiler-rt's
/// __truncsfbf2. The conversions, bitcasts, constants and selects are left
/// to the expansion below and to the bf16 moves after the optimizer.
void computeBFloatInF32(ModuleOp kernels) {
  SmallVector<Operation *> work;
  kernels.walk([&](Operation *op) {
    if (!isa<arith::ArithDialect, math::MathDialect>(op->getDialect()) ||
        isa<arith::ExtFOp, arith::TruncFOp, arith::BitcastOp, arith::ConstantOp,
            arith::SelectOp>(op))
      return;
    if (llvm::any_of(op->getResultTypes(), [](Type t) { return widenBFloat(t) != nullptr; }))
      work.push_back(op);
  });
  for (Operation *op : work) {
    OpBuilder b(op);
    Location loc = op->getLoc();
    SmallVector<Value> operands;
    for (Value v : op->getOperands())
      operands.push_back(widenBFloat(v.getType())
                             ? b.create<arith::ExtFOp>(loc, widenBFloat(v.getType()), v)
                             : v);
    SmallVector<Type> types;
    for (Type t : op->getResultTypes())
      types.push_back(widenBFloat(t) ? widenBFloat(t) : t);
    OperationState state(loc, op->getName().getIdentifier(), operands, types, op->getAttrs());
    Operation *wide = b.create(state);
    SmallVector<Value> results;
    for (auto [old, computed] : llvm::zip_equal(op->getResults(), wide->getResults()))
      results.push_back(old.getType() == computed.getType()
                            ? Value(computed)
                            : b.create<arith::TruncFOp>(loc, old.getType(), computed).getResult());
    op->replaceAllUsesWith(results);
    op->erase();
  }
}

/// math.exp on f32 (and f16, through f32 as LLVM would compute it) as
/// contract/exp_f32.h's branch-free algorithm in arith ops, op for op as
/// ExpF32 writes it: LLVM has no vector exp without a vector math library,
/// so llvm.exp in a vectorized loop is one call to libm's expf per lane.
struct ExpandExpF32 : OpRewritePattern<math::ExpOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(math::ExpOp op, PatternRewriter &rewriter) const override {
    Type type = op.getType();
    if (!type.isF32() && !type.isF16())
      return failure();
    Location loc = op.getLoc();
    OpBuilder &b = rewriter;
    Type f32 = b.getF32Type(), i32 = b.getI32Type();
    auto f = [&](float v) -> Value {
      return b.create<arith::ConstantOp>(loc, b.getF32FloatAttr(v));
    };
    auto i = [&](int64_t v) -> Value {
      return b.create<arith::ConstantOp>(loc, b.getI32IntegerAttr(static_cast<int32_t>(v)));
    };
    auto mul = [&](Value x, Value y) -> Value { return b.create<arith::MulFOp>(loc, x, y); };
    auto add = [&](Value x, Value y) -> Value { return b.create<arith::AddFOp>(loc, x, y); };
    auto sub = [&](Value x, Value y) -> Value { return b.create<arith::SubFOp>(loc, x, y); };
    auto pick = [&](arith::CmpFPredicate pred, Value x, Value y, Value then, Value other) {
      Value cond = b.create<arith::CmpFOp>(loc, pred, x, y);
      return b.create<arith::SelectOp>(loc, cond, then, other).getResult();
    };
    Value x = op.getOperand();
    if (type.isF16())
      x = b.create<arith::ExtFOp>(loc, f32, x);
    Value low = f(kExpLow), high = f(kExpHigh), round = f(kExpRound);
    Value c = pick(arith::CmpFPredicate::OLT, x, low, low, x);
    c = pick(arith::CmpFPredicate::OGT, c, high, high, c);
    Value t = add(mul(c, f(kExpLog2e)), round);
    Value k = sub(t, round);
    Value ki = b.create<arith::SubIOp>(loc, b.create<arith::BitcastOp>(loc, i32, t),
                                       i(kExpRoundBits));
    Value r = sub(c, mul(k, f(kExpLn2Hi)));
    r = sub(r, mul(k, f(kExpLn2Lo)));
    Value p = f(kExpPoly[0]);
    for (int n = 1; n < 6; ++n)
      p = add(mul(p, r), f(kExpPoly[n]));
    Value y = add(add(mul(p, mul(r, r)), r), f(1.0f));
    Value k1 = b.create<arith::ShRSIOp>(loc, ki, i(1));
    Value k2 = b.create<arith::SubIOp>(loc, ki, k1);
    auto power = [&](Value e) -> Value {
      Value bits = b.create<arith::ShLIOp>(loc, b.create<arith::AddIOp>(loc, e, i(127)), i(23));
      return b.create<arith::BitcastOp>(loc, f32, bits);
    };
    y = mul(mul(y, power(k1)), power(k2));
    Value result = pick(arith::CmpFPredicate::UNO, x, x, x, y);
    if (type.isF16())
      result = b.create<arith::TruncFOp>(loc, type, result);
    rewriter.replaceOp(op, result);
    return success();
  }
};

LogicalResult CodegenKernelsPass::lowerToLLVMDialect(ModuleOp kernels) {
  computeBFloatInF32(kernels);
  // bf16 <-> f32 as integer arithmetic (round to nearest even): LLVM would
  // call compiler-rt's __truncsfbf2 on CPUs without AVX512-BF16, and the
  // kernel library may import nothing but a few libc/libm functions.
  {
    RewritePatternSet patterns(kernels->getContext());
    arith::populateExpandBFloat16Patterns(patterns);
    // erf has no LLVM intrinsic and libm's erff would be an import: MLIR's
    // rational approximation instead (nn.erf, GELU).
    populatePolynomialApproximateErfPattern(patterns);
    patterns.add<ExpandExpF32>(kernels->getContext());
    if (failed(applyPatternsAndFoldGreedily(kernels, std::move(patterns))))
      return kernels.emitError("cannot expand the kernels' bf16 conversions");
  }
  PassManager pm(kernels->getContext(), ModuleOp::getOperationName());
  pm.addPass(createLowerAffinePass());
  pm.addPass(createConvertSCFToCFPass());
  pm.addPass(createArithToLLVMConversionPass());
  pm.addPass(createConvertMathToLLVMPass());
  pm.addPass(createFinalizeMemRefToLLVMConversionPass());
  ConvertFuncToLLVMPassOptions funcOptions;
  funcOptions.useBarePtrCallConv = true;
  pm.addPass(createConvertFuncToLLVMPass(funcOptions));
  pm.addPass(createConvertControlFlowToLLVMPass());
  pm.addPass(createReconcileUnrealizedCastsPass());
  pm.addPass(createCanonicalizerPass());
  return pm.run(kernels);
}

/// Optimizes one partition of the kernels (bitcode) at O3 for `cpu`, in its
/// own LLVMContext so that partitions compile on several threads at once, and
/// writes its object to `objectFd`; `ir`, when given, gets the optimized
/// module as bitcode. Returns the error, or an empty string.
std::string compilePartition(const llvm::Target &target, StringRef cpu, StringRef bitcode,
                             int objectFd, std::string *ir) {
  llvm::raw_fd_ostream out(objectFd, /*shouldClose=*/true);
  llvm::LLVMContext context;
  llvm::Expected<std::unique_ptr<llvm::Module>> module =
      llvm::parseBitcodeFile(llvm::MemoryBufferRef(bitcode, "graphc_kernels"), context);
  if (!module)
    return "reading a kernel partition back failed: " + llvm::toString(module.takeError());
  std::unique_ptr<llvm::TargetMachine> machine(target.createTargetMachine(
      kCpuTriple, cpu, "", llvm::TargetOptions(), llvm::Reloc::PIC_, std::nullopt,
      llvm::CodeGenOptLevel::Aggressive));
  if (!machine)
    return "cannot create a target machine for cpu '" + cpu.str() + "'";
  auto optimize = makeOptimizingTransformer(/*optLevel=*/3, /*sizeLevel=*/0, machine.get());
  if (llvm::Error err = optimize(module->get()))
    return "optimizing the kernels failed: " + llvm::toString(std::move(err));
  moveBFloatAsBits(**module);
  if (ir) {
    llvm::raw_string_ostream os(*ir);
    llvm::WriteBitcodeToFile(**module, os);
  }
  llvm::legacy::PassManager codegen;
  if (machine->addPassesToEmitFile(codegen, out, nullptr, llvm::CodeGenFileType::ObjectFile))
    return "the target cannot emit object files";
  codegen.run(**module);
  out.close();
  if (out.has_error())
    return "writing a kernel object failed: " + out.error().message();
  return "";
}

FailureOr<SmallVector<std::string>>
CodegenKernelsPass::compileCpu(ModuleOp kernels, ArrayRef<std::string> names,
                               ArrayRef<SmallVector<KernelLaunch>> launches,
                               ArrayRef<std::string> cpus) {
  Location loc = kernels.getLoc();
  markParallelLoops(kernels);
  if (failed(lowerToLLVMDialect(kernels)))
    return emitError(loc, "lowering the kernels to the LLVM dialect failed");

  // x86-64 explicitly, not the host: plans are generated for the runtime's CPU.
  LLVMInitializeX86TargetInfo();
  LLVMInitializeX86Target();
  LLVMInitializeX86TargetMC();
  LLVMInitializeX86AsmPrinter();
  std::string error;
  const llvm::Target *target = llvm::TargetRegistry::lookupTarget(kCpuTriple.str(), error);
  if (!target)
    return emitError(loc, "no x86-64 code generator: ") << error;
  std::unique_ptr<llvm::TargetMachine> machine;
  for (const std::string &cpu : cpus) {
    machine.reset(target->createTargetMachine(kCpuTriple, cpu, "", llvm::TargetOptions(),
                                              llvm::Reloc::PIC_, std::nullopt,
                                              llvm::CodeGenOptLevel::Aggressive));
    if (!machine)
      return emitError(loc, "cannot create a target machine for cpu '") << cpu << "'";
    // Without F16C, LLVM converts f16 through compiler-rt calls, which a
    // plan's kernel library may not import (graphrun would refuse the plan):
    // a model's own f16 tensors need a CPU level that has it, as --amp=fp16
    // does.
    if (machine->getMCSubtargetInfo()->checkFeatures("+f16c"))
      continue;
    WalkResult half = kernels.walk([&](Operation *op) {
      if (llvm::none_of(op->getResultTypes(),
                        [](Type t) { return getElementTypeOrSelf(t).isF16(); }))
        return WalkResult::advance();
      auto func = op->getParentOfType<LLVM::LLVMFuncOp>();
      emitError(isa<UnknownLoc>(op->getLoc()) ? loc : op->getLoc(), "kernel ")
          << (func ? func.getName() : StringRef("?"))
          << " has f16 values, which need a kernel CPU with F16C (--kernel-cpu=x86-64-v3 or "
             "x86-64-v4), got '"
          << cpu << "'";
      return WalkResult::interrupt();
    });
    if (half.wasInterrupted())
      return failure();
  }

  registerBuiltinDialectTranslation(*kernels->getContext());
  registerLLVMDialectTranslation(*kernels->getContext());
  llvm::LLVMContext llvmContext;
  std::unique_ptr<llvm::Module> llvmModule =
      translateModuleToLLVMIR(kernels, llvmContext, "graphc_kernels");
  if (!llvmModule)
    return emitError(loc, "translating the kernels to LLVM IR failed");
  annotateParallelLoops(*llvmModule);
  llvmModule->setTargetTriple(kCpuTriple);
  // The x86-64 levels share one data layout.
  llvmModule->setDataLayout(machine->createDataLayout());

  // The runtime's entry points: unpack the buffer array, pass the iteration
  // range and call the launch, which becomes internal so it can be inlined.
  llvm::Type *ptrType = llvm::PointerType::getUnqual(llvmContext);
  llvm::Type *i64Type = llvm::Type::getInt64Ty(llvmContext);
  llvm::FunctionType *entryType = llvm::FunctionType::get(
      llvm::Type::getVoidTy(llvmContext), {ptrType, i64Type, i64Type}, false);
  size_t entries = 0;
  for (auto [kernelName, perKernel] : llvm::zip_equal(names, launches))
    for (auto [index, launch] : llvm::enumerate(perKernel)) {
      ++entries;
      llvm::Constant *record = llvm::ConstantDataArray::getString(
          llvmContext,
          graphc::LaunchRecord(
              kernelName, index, launch.grid[0],
              std::vector<uint32_t>(launch.args.begin(), launch.args.end()),
              std::vector<uint64_t>(launch.argBytes.begin(), launch.argBytes.end())),
          /*AddNull=*/true);
      new llvm::GlobalVariable(*llvmModule, record->getType(), /*isConstant=*/true,
                               llvm::GlobalValue::ExternalLinkage, record,
                               kSignaturePrefix + launch.entry);
      llvm::Function *body = llvmModule->getFunction(launch.entry);
      if (!body || body->arg_size() != launch.args.size() + 2)
        return emitError(loc, "launch ") << launch.entry << " vanished during lowering";
      body->setLinkage(llvm::GlobalValue::InternalLinkage);
      llvm::Function *entry = llvm::Function::Create(
          entryType, llvm::GlobalValue::ExternalLinkage, kEntryPrefix + launch.entry,
          *llvmModule);
      llvm::IRBuilder<> builder(llvm::BasicBlock::Create(llvmContext, "entry", entry));
      SmallVector<llvm::Value *> args;
      for (unsigned i = 0; i < launch.args.size(); ++i) {
        llvm::Value *slot = builder.CreateConstInBoundsGEP1_64(ptrType, entry->getArg(0), i);
        args.push_back(builder.CreateLoad(ptrType, slot));
      }
      args.push_back(entry->getArg(1));
      args.push_back(entry->getArg(2));
      builder.CreateCall(body, args);
      builder.CreateRetVoid();
    }

  // The launches are independent functions: split them into partitions
  // (each entry with the internal body it calls) and optimize and compile
  // the partitions on all cores, every CPU level at once. The partition count
  // depends on the kernels alone, so the library is the same bytes on any
  // machine.
  unsigned partitions = static_cast<unsigned>(
      std::clamp<size_t>(entries / kLaunchesPerPartition, 1, kMaxCpuPartitions));
  SmallVector<SmallString<0>> bitcode;
  llvm::SplitModule(
      *llvmModule, partitions,
      [&](std::unique_ptr<llvm::Module> part) {
        llvm::raw_svector_ostream os(bitcode.emplace_back());
        llvm::WriteBitcodeToFile(*part, os);
      },
      /*PreserveLocals=*/true);
  llvmModule.reset();

  struct Job {
    size_t cpu, part;
    TempFile object;
    int fd = -1; // the object's, until its worker takes it
    std::string ir, error;
    ~Job() {
      if (fd >= 0)
        llvm::sys::Process::SafelyCloseFileDescriptor(fd);
    }
  };
  std::vector<Job> jobs(cpus.size() * bitcode.size());
  for (size_t c = 0; c < cpus.size(); ++c)
    for (size_t p = 0; p < bitcode.size(); ++p) {
      Job &job = jobs[c * bitcode.size() + p];
      job.cpu = c;
      job.part = p;
      if (llvm::sys::fs::createTemporaryFile("graphc-kernels", "o", job.fd, job.object.path))
        return emitError(loc, "cannot create a temporary object file");
      job.object.removeOnSignal();
    }
  {
    llvm::DefaultThreadPool pool(llvm::optimal_concurrency(jobs.size()));
    for (Job &job : jobs)
      pool.async([&] {
        job.error = compilePartition(*target, cpus[job.cpu], bitcode[job.part],
                                     std::exchange(job.fd, -1),
                                     dumpDir.empty() ? nullptr : &job.ir);
      });
    pool.wait();
  }
  for (const Job &job : jobs)
    if (!job.error.empty())
      return emitError(loc, job.error);

  llvm::ErrorOr<std::string> lld = llvm::sys::findProgramByName("ld.lld-19");
  if (!lld)
    lld = llvm::sys::findProgramByName("ld.lld");
  if (!lld)
    return emitError(loc, "ld.lld not found (install lld-19; setup.sh does)");
  SmallVector<std::string> libraries;
  for (size_t c = 0; c < cpus.size(); ++c) {
    if (!dumpDir.empty()) {
      // The optimized partitions linked back into one module.
      llvm::LLVMContext context;
      std::unique_ptr<llvm::Module> whole;
      for (const Job &job : jobs) {
        if (job.cpu != c)
          continue;
        llvm::Expected<std::unique_ptr<llvm::Module>> part = llvm::parseBitcodeFile(
            llvm::MemoryBufferRef(job.ir, "graphc_kernels"), context);
        if (!part)
          return emitError(loc, "reading an optimized partition back failed: ")
                 << llvm::toString(part.takeError());
        if (!whole)
          whole = std::move(*part);
        else if (llvm::Linker::linkModules(*whole, std::move(*part)))
          return emitError(loc, "linking the optimized partitions for --dump-kernels failed");
      }
      std::string text;
      llvm::raw_string_ostream os(text);
      whole->print(os, nullptr);
      if (failed(dump(cpuDumpName(cpus, c, "ll"), text)))
        return failure();
    }
    TempFile shared;
    if (llvm::sys::fs::createTemporaryFile("graphc-kernels", "so", shared.path))
      return emitError(loc, "cannot create a temporary shared object");
    shared.removeOnSignal();
    SmallVector<StringRef> argv = {*lld, "-shared", "--hash-style=gnu", "-O2",
                                   "-z", "now", "-o", shared.path};
    for (const Job &job : jobs)
      if (job.cpu == c)
        argv.push_back(job.object.path);
    std::string message;
    if (llvm::sys::ExecuteAndWait(*lld, argv, std::nullopt, {}, 0, 0, &message) != 0)
      return emitError(loc, "linking the kernels failed: ") << message;
    auto bytes = llvm::MemoryBuffer::getFile(shared.path);
    if (!bytes)
      return emitError(loc, "cannot read the linked kernels");
    libraries.push_back((*bytes)->getBuffer().str());
  }
  return libraries;
}

LogicalResult CodegenKernelsPass::dump(StringRef file, StringRef bytes) {
  if (dumpDir.empty())
    return success();
  llvm::SmallString<128> path(dumpDir);
  llvm::sys::path::append(path, file);
  // Through a new file renamed over the old: never following a symlink
  // planted at the name, never blocking on a FIFO.
  graphc::Status written =
      graphc::WriteFileAtomically(path.str().str(), bytes.str());
  if (!written.ok())
    return emitError(getOperation().getLoc(), "--dump-kernels: ") << written.message();
  return success();
}

void CodegenKernelsPass::runOnOperation() {
  ModuleOp module = getOperation();
  MLIRContext *context = &getContext();
  if (targets != "cpu" && targets != "cuda" && targets != "all") {
    emitError(module.getLoc(), "targets must be cpu, cuda or all, got '") << targets << "'";
    return signalPassFailure();
  }
  ModuleOp kernels;
  for (auto nested : module.getOps<ModuleOp>())
    if (nested.getSymName() == kKernelsModuleName)
      kernels = nested;
  if (!kernels)
    return; // Nothing to compile (already compiled, or no kernels).

  std::vector<std::string> names;
  for (auto func : kernels.getOps<func::FuncOp>())
    names.push_back(func.getSymName().str());
  OpBuilder b(kernels);
  SmallVector<StringRef> symbols(names.begin(), names.end());
  // The plan.binary `launches` attribute: per kernel, a list of launches.
  auto launchesAttr = [&](ArrayRef<SmallVector<KernelLaunch>> launches) {
    auto dims = [&](const std::array<uint32_t, 3> &d) {
      return b.getDenseI32ArrayAttr(
          {static_cast<int32_t>(d[0]), static_cast<int32_t>(d[1]), static_cast<int32_t>(d[2])});
    };
    SmallVector<Attribute> perKernel;
    for (const auto &list : launches) {
      SmallVector<Attribute> entries;
      for (const KernelLaunch &launch : list) {
        SmallVector<int32_t> args(launch.args.begin(), launch.args.end());
        entries.push_back(b.getDictionaryAttr({
            b.getNamedAttr("entry", b.getStringAttr(launch.entry)),
            b.getNamedAttr("grid", dims(launch.grid)),
            b.getNamedAttr("block", dims(launch.block)),
            b.getNamedAttr("args", b.getDenseI32ArrayAttr(args)),
        }));
      }
      perKernel.push_back(b.getArrayAttr(entries));
    }
    return b.getArrayAttr(perKernel);
  };
  if (!names.empty() && targets != "cuda") {
    OwningOpRef<ModuleOp> cpuModule(kernels.clone());
    (*cpuModule)->removeAttr(SymbolTable::getSymbolAttrName());
    auto launches = splitCpuLaunches(*cpuModule, names);
    if (failed(launches))
      return signalPassFailure();
    // `cpu` is one x86-64 level or several, comma-separated: a library each,
    // of which the runtime loads the best its CPU runs.
    SmallVector<StringRef> levels;
    StringRef(cpu).split(levels, ',');
    for (auto [index, level] : llvm::enumerate(levels))
      if (X86LevelIndex(level) < 0 ||
          llvm::is_contained(ArrayRef(levels).take_front(index), level)) {
        emitError(module.getLoc(), "cpu must be x86-64 levels, each once, comma-separated; got '")
            << cpu << "'";
        return signalPassFailure();
      }
    std::vector<std::string> cpus(levels.begin(), levels.end());
    FailureOr<SmallVector<std::string>> libraries =
        compileCpu(*cpuModule, names, *launches, cpus);
    if (failed(libraries))
      return signalPassFailure();
    ArrayAttr launchList = launchesAttr(*launches);
    for (auto [index, library] : llvm::enumerate(*libraries)) {
      if (failed(dump(cpuDumpName(cpus, index, "so"), library)))
        return signalPassFailure();
      b.create<plan::BinaryOp>(
          module.getLoc(), plan::TargetAttr::get(context, plan::Target::cpu_x86_64),
          plan::BinaryFormatAttr::get(context, plan::BinaryFormat::elf_shared_object),
          b.getStringAttr(cpus[index]), b.getStrArrayAttr(symbols), b.getStringAttr(library),
          launchList);
    }
  }
  if (!names.empty() && targets != "cpu") {
    OwningOpRef<ModuleOp> gpuModule(kernels.clone());
    (*gpuModule)->removeAttr(SymbolTable::getSymbolAttrName());
    SmallVector<std::string> chips;
    for (auto [chip, target] : kCudaChips)
      chips.push_back(chip.str());
    FailureOr<PtxKernels> ptx = compilePtx(*gpuModule, names, chips, cudaPath);
    if (failed(ptx))
      return signalPassFailure();
    ArrayAttr launches = launchesAttr(ptx->launches);
    for (auto [chip, target] : kCudaChips) {
      auto it = llvm::find_if(ptx->ptx, [&](const auto &p) { return p.first == chip; });
      if (it == ptx->ptx.end()) {
        emitError(module.getLoc(), "no PTX was produced for ") << chip;
        return signalPassFailure();
      }
      if (failed(dump(("cuda_" + chip + ".ptx").str(), it->second)))
        return signalPassFailure();
      b.create<plan::BinaryOp>(
          module.getLoc(), plan::TargetAttr::get(context, target),
          plan::BinaryFormatAttr::get(context, plan::BinaryFormat::ptx), b.getStringAttr(chip),
          b.getStrArrayAttr(symbols), b.getStringAttr(it->second), launches);
    }
  }
  kernels.erase();
}

} // namespace
