//===- CodegenKernels.cpp - kernel bodies to native code and PTX ----------===//
//
// Compiles `module @kernels` into a `plan.binary` per target. The PTX path is
// in CodegenPtx.cpp. The CPU path:
//  1) clone the bodies and lower them to the LLVM dialect (toolchain.md's
//     pipeline; bare-pointer calling convention, since every shape is static);
//  2) translate to LLVM IR and add `void graphc_kernel_<k>(void **buffers)` per
//     kernel, the one signature the runtime calls;
//  3) optimize at O3 for the requested CPU through a real TargetMachine
//     (without one, LLVM's cost model refuses to vectorize, silently);
//  4) emit an object and link it into a shared object with ld.lld, which the
//     runtime loads from memory.
//
//===----------------------------------------------------------------------===//

#include "compiler/Lowering/CodegenPtx.h"
#include "compiler/Lowering/Passes.h"
#include "mlir/Conversion/AffineToStandard/AffineToStandard.h"
#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVMPass.h"
#include "mlir/Conversion/MathToLLVM/MathToLLVM.h"
#include "mlir/Conversion/MemRefToLLVM/MemRefToLLVM.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/Passes.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVM/NVVM/Target.h"
#include "mlir/Target/LLVMIR/Dialect/GPU/GPUToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/NVVM/NVVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"

namespace graphc {
#define GEN_PASS_DEF_CODEGENKERNELS
#include "compiler/Lowering/Passes.h.inc"
} // namespace graphc

using namespace mlir;
using namespace graphc;

namespace {

constexpr llvm::StringLiteral kCpuTriple = "x86_64-unknown-linux-gnu";
constexpr llvm::StringLiteral kEntryPrefix = "graphc_kernel_";
/// The PTX targets of `targets=cuda`: Ampere and Hopper.
constexpr std::pair<llvm::StringLiteral, plan::Target> kCudaChips[] = {
    {"sm_80", plan::Target::cuda_sm80}, {"sm_90", plan::Target::cuda_sm90}};

/// Removes a temporary file when it goes out of scope.
struct TempFile {
  llvm::SmallString<128> path;
  ~TempFile() {
    if (!path.empty())
      llvm::sys::fs::remove(path);
  }
};

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
  FailureOr<std::string> compileCpu(ModuleOp kernels, ArrayRef<std::string> names);
  LogicalResult lowerToLLVMDialect(ModuleOp kernels);
};

LogicalResult CodegenKernelsPass::lowerToLLVMDialect(ModuleOp kernels) {
  PassManager pm(kernels->getContext(), ModuleOp::getOperationName());
  pm.addNestedPass<func::FuncOp>(createConvertLinalgToLoopsPass());
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

FailureOr<std::string> CodegenKernelsPass::compileCpu(ModuleOp kernels,
                                                      ArrayRef<std::string> names) {
  Location loc = kernels.getLoc();
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
  std::unique_ptr<llvm::TargetMachine> machine(target->createTargetMachine(
      kCpuTriple, cpu, "", llvm::TargetOptions(), llvm::Reloc::PIC_, std::nullopt,
      llvm::CodeGenOptLevel::Aggressive));
  if (!machine)
    return emitError(loc, "cannot create a target machine for cpu '") << cpu << "'";

  registerBuiltinDialectTranslation(*kernels->getContext());
  registerLLVMDialectTranslation(*kernels->getContext());
  llvm::LLVMContext llvmContext;
  std::unique_ptr<llvm::Module> llvmModule =
      translateModuleToLLVMIR(kernels, llvmContext, "graphc_kernels");
  if (!llvmModule)
    return emitError(loc, "translating the kernels to LLVM IR failed");
  llvmModule->setTargetTriple(kCpuTriple);
  llvmModule->setDataLayout(machine->createDataLayout());

  // The runtime's entry points: unpack the buffer array and call the kernel,
  // which becomes internal so it can be inlined and specialized.
  llvm::Type *ptrType = llvm::PointerType::getUnqual(llvmContext);
  llvm::FunctionType *entryType = llvm::FunctionType::get(
      llvm::Type::getVoidTy(llvmContext), {ptrType}, false);
  for (const std::string &name : names) {
    llvm::Function *kernel = llvmModule->getFunction(name);
    if (!kernel)
      return emitError(loc, "kernel ") << name << " vanished during lowering";
    kernel->setLinkage(llvm::GlobalValue::InternalLinkage);
    llvm::Function *entry = llvm::Function::Create(
        entryType, llvm::GlobalValue::ExternalLinkage, kEntryPrefix + name, *llvmModule);
    llvm::IRBuilder<> builder(llvm::BasicBlock::Create(llvmContext, "entry", entry));
    SmallVector<llvm::Value *> args;
    for (unsigned i = 0; i < kernel->arg_size(); ++i) {
      llvm::Value *slot = builder.CreateConstInBoundsGEP1_64(ptrType, entry->getArg(0), i);
      args.push_back(builder.CreateLoad(ptrType, slot));
    }
    builder.CreateCall(kernel, args);
    builder.CreateRetVoid();
  }

  auto optimize = makeOptimizingTransformer(/*optLevel=*/3, /*sizeLevel=*/0, machine.get());
  if (llvm::Error err = optimize(llvmModule.get()))
    return emitError(loc, "optimizing the kernels failed: ")
           << llvm::toString(std::move(err));

  TempFile object, shared;
  int objectFd;
  if (llvm::sys::fs::createTemporaryFile("graphc-kernels", "o", objectFd, object.path))
    return emitError(loc, "cannot create a temporary object file");
  {
    llvm::raw_fd_ostream out(objectFd, /*shouldClose=*/true);
    llvm::legacy::PassManager codegen;
    if (machine->addPassesToEmitFile(codegen, out, nullptr,
                                     llvm::CodeGenFileType::ObjectFile))
      return emitError(loc, "the target cannot emit object files");
    codegen.run(*llvmModule);
  }
  if (llvm::sys::fs::createTemporaryFile("graphc-kernels", "so", shared.path))
    return emitError(loc, "cannot create a temporary shared object");

  llvm::ErrorOr<std::string> lld = llvm::sys::findProgramByName("ld.lld-19");
  if (!lld)
    lld = llvm::sys::findProgramByName("ld.lld");
  if (!lld)
    return emitError(loc, "ld.lld not found (install lld-19; setup.sh does)");
  SmallVector<StringRef> argv = {*lld, "-shared", "--hash-style=gnu", "-O2",
                                 "-z", "now", "-o", shared.path, object.path};
  std::string message;
  if (llvm::sys::ExecuteAndWait(*lld, argv, std::nullopt, {}, 0, 0, &message) != 0)
    return emitError(loc, "linking the kernels failed: ") << message;
  auto bytes = llvm::MemoryBuffer::getFile(shared.path);
  if (!bytes)
    return emitError(loc, "cannot read the linked kernels");
  return (*bytes)->getBuffer().str();
}

LogicalResult CodegenKernelsPass::dump(StringRef file, StringRef bytes) {
  if (dumpDir.empty())
    return success();
  llvm::SmallString<128> path(dumpDir);
  llvm::sys::path::append(path, file);
  std::error_code ec;
  llvm::raw_fd_ostream out(path, ec);
  if (ec)
    return emitError(getOperation().getLoc(), "cannot write ") << path << ": " << ec.message();
  out << bytes;
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
  if (!names.empty() && targets != "cuda") {
    OwningOpRef<ModuleOp> cpuModule(kernels.clone());
    (*cpuModule)->removeAttr(SymbolTable::getSymbolAttrName());
    FailureOr<std::string> cpuBinary = compileCpu(*cpuModule, names);
    if (failed(cpuBinary) || failed(dump("cpu_x86_64.so", *cpuBinary)))
      return signalPassFailure();
    b.create<plan::BinaryOp>(
        module.getLoc(), plan::TargetAttr::get(context, plan::Target::cpu_x86_64),
        plan::BinaryFormatAttr::get(context, plan::BinaryFormat::elf_shared_object),
        b.getStringAttr(cpu), b.getStrArrayAttr(symbols), b.getStringAttr(*cpuBinary),
        ArrayAttr());
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
    SmallVector<Attribute> launches;
    for (const auto &perKernel : ptx->launches) {
      SmallVector<Attribute> list;
      for (const GpuLaunch &launch : perKernel) {
        auto dims = [&](const std::array<uint32_t, 3> &d) {
          return b.getDenseI32ArrayAttr({static_cast<int32_t>(d[0]), static_cast<int32_t>(d[1]),
                                         static_cast<int32_t>(d[2])});
        };
        SmallVector<int32_t> args(launch.args.begin(), launch.args.end());
        list.push_back(b.getDictionaryAttr({
            b.getNamedAttr("entry", b.getStringAttr(launch.entry)),
            b.getNamedAttr("grid", dims(launch.grid)),
            b.getNamedAttr("block", dims(launch.block)),
            b.getNamedAttr("args", b.getDenseI32ArrayAttr(args)),
        }));
      }
      launches.push_back(b.getArrayAttr(list));
    }
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
          b.getStrArrayAttr(symbols), b.getStringAttr(it->second), b.getArrayAttr(launches));
    }
  }
  kernels.erase();
}

} // namespace
