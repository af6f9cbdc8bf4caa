//===- graphc.cpp - the graphc compiler driver ----------------------------===//
//
//   graphc info MODEL [--batch-size N] [--layers]
//   graphc compile MODEL [--batch-size N] [--compile-to=PHASE] [-o OUT]
//                        (a plan goes to plan.fb when -o is not given)
//                        [--optimizer=...] [--lr=...] [...training options]
//
// `info` prints the model's parameter count and forward cost; `compile` runs the
// pipeline (compiler/Pipeline) up to a phase and writes the IR. Every error is one
// located diagnostic (file:line:col: error: ...) or one line naming the problem,
// and exit status 1.
//
//===----------------------------------------------------------------------===//

#include "compiler/Analysis/ModelStats.h"
#include "compiler/Export/PlanExport.h"
#include "compiler/Pipeline/Pipeline.h"
#include "EscapingStream.h"
#include "NestingCheck.h"
#include "contract/files.h"
#include "contract/printable.h"
#include "dialects/nn/IR/NNDialect.h"
#include "dialects/nn/IR/NNOps.h"
#include "dialects/plan/IR/PlanDialect.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/WithColor.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

using namespace mlir;
namespace cl = llvm::cl;

namespace {

cl::SubCommand infoCommand("info", "Print a model's parameter count and forward cost");
cl::SubCommand compileCommand("compile", "Compile a model through the pipeline");
cl::SubCommand keygenCommand("keygen",
                             "Write an Ed25519 key pair for signing plans: NAME.key (secret) "
                             "and NAME.pub (for graphrun --trusted-keys)");
cl::opt<std::string> keyName(cl::Positional, cl::Required, cl::desc("<name>"),
                             cl::sub(keygenCommand));

cl::opt<std::string> modelPath(cl::Positional, cl::Required,
                               cl::desc("<model.mlir>"), cl::sub(infoCommand),
                               cl::sub(compileCommand));
cl::opt<int64_t> batchSize("batch-size",
                           cl::desc("Batch size to infer every shape with "
                                    "(info: default 1; compile: default 32)"),
                           cl::init(0), cl::sub(infoCommand), cl::sub(compileCommand));
cl::opt<bool> showLayers("layers", cl::desc("Also print one line per op"),
                         cl::sub(infoCommand));
cl::opt<graphc::Phase> compileTo(
    "compile-to", cl::desc("Stop after this phase and print the IR"),
    cl::values(clEnumValN(graphc::Phase::Verify, "verify",
                          "model contract checked, batch size set"),
               clEnumValN(graphc::Phase::MixedPrecision, "mixed-precision",
                          "@train_step with gradients, in mixed precision with --amp, "
                          "before the optimizer"),
               clEnumValN(graphc::Phase::DataParallel, "data-parallel",
                          "gradients averaged across ranks in bucketed allreduces, "
                          "before the optimizer"),
               clEnumValN(graphc::Phase::Autodiff, "autodiff",
                          "@train_step with gradients and optimizer, @eval_step"),
               clEnumValN(graphc::Phase::Lower, "lower",
                          "plan buffers and commands, memory planned, kernels as MLIR"),
               clEnumValN(graphc::Phase::Plan, "plan",
                          "compiled kernels, contract checked (default; -o writes the plan)")),
    cl::init(graphc::kLastPhase), cl::sub(compileCommand));
cl::opt<std::string> outputPath("o", cl::desc("Output file: the plan (default: plan.fb), "
                                              "or the IR of --compile-to (default: stdout)"),
                                cl::value_desc("file"), cl::init("-"),
                                cl::sub(compileCommand));

// The training-step options, mirrored onto graphc-optimizer's pass options.
cl::OptionCategory codegenCategory("Code generation (compile)");
cl::opt<std::string> targetKind("target",
                                cl::desc("Devices to generate kernels for: cpu (x86-64), "
                                         "cuda (PTX for sm_80 and sm_90; libdevice from "
                                         "$CUDA_HOME, default /usr/local/cuda) or all"),
                                cl::init("cpu"), cl::sub(compileCommand),
                                cl::cat(codegenCategory));
cl::opt<std::string> kernelCpu("kernel-cpu",
                               cl::desc("x86-64 level the CPU kernels target "
                                        "(x86-64, x86-64-v2, x86-64-v3, x86-64-v4)"),
                               cl::init("x86-64-v3"), cl::sub(compileCommand),
                               cl::cat(codegenCategory));
cl::opt<std::string> dumpKernels("dump-kernels",
                                 cl::desc("Also write the kernel binaries into this "
                                          "directory (e.g. to disassemble them), and the "
                                          "CPU kernels' optimized LLVM IR (cpu_x86_64.ll)"),
                                 cl::sub(compileCommand), cl::cat(codegenCategory));

cl::opt<bool> noFuse("no-fuse",
                     cl::desc("Do not fuse elementwise ops: one kernel per op (the unfused "
                              "baseline; numerically the same)"),
                     cl::sub(compileCommand), cl::cat(codegenCategory));

cl::opt<std::string> rematMode(
    "remat",
    cl::desc("What backward recomputes instead of forward keeping it: all (every cheap "
             "elementwise value, those convolutions read included: least memory), fused "
             "(only values the backward kernels that read them can recompute: no extra "
             "memory traffic) or off (keep everything backward reads; numerically the "
             "same)"),
    cl::value_desc("all|fused|off"), cl::init("all"), cl::sub(compileCommand),
    cl::cat(codegenCategory));

cl::opt<std::string> layoutChoice(
    "layout",
    cl::desc("Activation layout through convolutions, pooling and batch norm: nhwc "
             "(channels last: a transpose where the images enter and before a flatten; "
             "the default for --target=cpu, where oneDNN's NHWC kernels are faster, and "
             "with --amp, where cuDNN's tensor cores want it; with a CUDA target the "
             "filters go OHWI too) or nchw (as written; the default for fp32 with a CUDA "
             "target until NHWC has been measured on a GPU)"),
    cl::value_desc("nhwc|nchw"), cl::sub(compileCommand), cl::cat(codegenCategory));

cl::opt<bool> memoryReport("memory-report",
                           cl::desc("Print where train_step's memory peaks and what forward "
                                    "keeps for backward"),
                           cl::sub(compileCommand), cl::cat(codegenCategory));

cl::opt<std::string> signKey("sign-key",
                            cl::desc("Sign the plan with this secret key (graphc keygen); "
                                     "graphrun --trusted-keys then runs it only if it trusts "
                                     "the key"),
                            cl::value_desc("file"), cl::sub(compileCommand),
                            cl::cat(codegenCategory));

cl::opt<bool> fusionReport("fusion-report",
                           cl::desc("Print each program's generated-kernel launches and the "
                                    "bytes they move per run, fused vs unfused"),
                           cl::sub(compileCommand), cl::cat(codegenCategory));

cl::OptionCategory distributedCategory("Data-parallel training (compile)");
cl::opt<bool> noDataParallel(
    "no-data-parallel",
    cl::desc("Leave out the gradient allreduces: the plan trains on one rank only (by "
             "default a plan averages gradients across however many ranks run it; on one "
             "rank the allreduces are skipped)"),
    cl::sub(compileCommand), cl::cat(distributedCategory));
cl::opt<bool> syncBn(
    "sync-bn",
    cl::desc("Batch norm over the global batch of all ranks (PyTorch's SyncBatchNorm): "
             "statistics averaged across ranks in forward and backward, the same on every "
             "rank (default: each rank's own batch, as PyTorch DDP)"),
    cl::sub(compileCommand), cl::cat(distributedCategory));
cl::opt<bool> noAllreduceOverlap(
    "no-allreduce-overlap",
    cl::desc("Start every gradient allreduce only after backward (to measure what overlap "
             "gains; by default each bucket starts as backward completes it)"),
    cl::sub(compileCommand), cl::cat(distributedCategory));
cl::opt<double> bucketMb("bucket-mb",
                         cl::desc("Most MiB of gradients per allreduce bucket (the first "
                                  "bucket holds at most 1 MiB, so it starts early)"),
                         cl::init(25.0), cl::sub(compileCommand), cl::cat(distributedCategory));
cl::opt<std::string> allreduceDtype(
    "allreduce-dtype",
    cl::desc("Wire type of fp32 gradients: fp32 (default) or fp16 (compressed: half the "
             "bytes, each rank's share rounded to fp16)"),
    cl::value_desc("fp32|fp16"), cl::init("fp32"), cl::sub(compileCommand),
    cl::cat(distributedCategory));

cl::OptionCategory precisionCategory("Mixed precision (compile)");
cl::opt<std::string> ampPrecision(
    "amp",
    cl::desc("Mixed precision: fp16 (with loss scaling) or bf16; convolutions and matmuls "
             "in half with fp32 accumulation, activations stored in half, fp32 master "
             "weights, batch-norm statistics, loss and optimizer (default: fp32 throughout)"),
    cl::value_desc("fp16|bf16"), cl::sub(compileCommand), cl::cat(precisionCategory));
cl::opt<std::string> lossScaleMode(
    "loss-scale",
    cl::desc("fp16's loss scaling: dynamic (default: x2 after --loss-scale-window finite "
             "steps, x0.5 on overflow, never below 1) or a number (a static scale)"),
    cl::value_desc("dynamic|N"), cl::sub(compileCommand), cl::cat(precisionCategory));
cl::opt<double> initialLossScale("initial-loss-scale",
                                 cl::desc("Dynamic loss scaling's first scale"),
                                 cl::init(65536.0), cl::sub(compileCommand),
                                 cl::cat(precisionCategory));
cl::opt<int64_t> lossScaleWindow(
    "loss-scale-window",
    cl::desc("Finite steps in a row after which dynamic loss scaling doubles the scale"),
    cl::init(2000), cl::sub(compileCommand), cl::cat(precisionCategory));

cl::OptionCategory trainingCategory("Training step (compile)");
cl::opt<std::string> optimizerKind("optimizer",
                                   cl::desc("sgd, momentum, nesterov, lars, adam or adamw"),
                                   cl::init("momentum"), cl::sub(compileCommand),
                                   cl::cat(trainingCategory));
cl::opt<double> learningRate("lr",
                             cl::desc("Base learning rate (default: 0.1 x batch / 256, the "
                                      "linear scaling rule, for SGD, momentum, Nesterov and "
                                      "LARS; 0.001 for Adam and AdamW)"),
                             cl::init(0.1), cl::sub(compileCommand), cl::cat(trainingCategory));
cl::opt<double> momentumFactor("momentum", cl::desc("Momentum"), cl::init(0.9),
                               cl::sub(compileCommand), cl::cat(trainingCategory));
cl::opt<double> weightDecay("weight-decay",
                            cl::desc("Weight decay (L2; decoupled for adamw)"),
                            cl::init(1e-4), cl::sub(compileCommand),
                            cl::cat(trainingCategory));
cl::opt<bool> excludeBnBias("exclude-bn-bias",
                            cl::desc("No weight decay or LARS scaling for batch-norm "
                                     "and bias parameters (default true)"),
                            cl::init(true), cl::sub(compileCommand),
                            cl::cat(trainingCategory));
cl::opt<double> larsEta("lars-eta", cl::desc("LARS trust coefficient"),
                        cl::init(0.001), cl::sub(compileCommand),
                        cl::cat(trainingCategory));
cl::opt<double> adamBeta1("adam-beta1", cl::desc("Adam's first-moment decay"),
                          cl::init(0.9), cl::sub(compileCommand),
                          cl::cat(trainingCategory));
cl::opt<double> adamBeta2("adam-beta2", cl::desc("Adam's second-moment decay"),
                          cl::init(0.999), cl::sub(compileCommand),
                          cl::cat(trainingCategory));
cl::opt<double> adamEps("adam-eps", cl::desc("Adam's denominator term"), cl::init(1e-8),
                        cl::sub(compileCommand), cl::cat(trainingCategory));
cl::opt<std::string> lrDecay("lr-decay",
                             cl::desc("After warmup: constant, cosine or step"),
                             cl::init("constant"), cl::sub(compileCommand),
                             cl::cat(trainingCategory));
cl::opt<int64_t> warmupSteps("warmup-steps", cl::desc("Steps of linear warmup"),
                             cl::init(0), cl::sub(compileCommand),
                             cl::cat(trainingCategory));
cl::opt<int64_t> totalSteps("total-steps",
                            cl::desc("Length of the cosine schedule"), cl::init(0),
                            cl::sub(compileCommand), cl::cat(trainingCategory));
cl::opt<double> finalLr("final-lr", cl::desc("Learning rate at the cosine's end"),
                        cl::init(0.0), cl::sub(compileCommand),
                        cl::cat(trainingCategory));
cl::opt<int64_t> decayStepSize("decay-step-size", cl::desc("Steps between step decays"),
                               cl::init(1), cl::sub(compileCommand),
                               cl::cat(trainingCategory));
cl::opt<double> decayGamma("decay-gamma", cl::desc("Factor of each step decay"),
                           cl::init(0.1), cl::sub(compileCommand),
                           cl::cat(trainingCategory));

/// Everything graphc prints about its input goes through this stream.
llvm::raw_ostream &errorStream() {
  static graphc::EscapingStream stream(llvm::errs());
  return stream;
}

int fail(const llvm::Twine &message) {
  llvm::WithColor::error(errorStream(), "graphc") << message << "\n";
  return 1;
}

// Writes graphc's output (a plan, or IR) to `path`, only once all of it
// exists. A regular file is replaced through a new file renamed over it, so a
// failed write (disk full) never leaves a truncated plan where a good one
// was; a symlink the user names is followed to the file it names. graphc's
// own standard output (-o /dev/stdout, a pipe or a redirection) and a
// character device (/dev/null) are written directly. Anything else (a FIFO,
// which would block graphc until something read it, a directory) is refused.
bool writeOutput(const std::string &path, const std::string &bytes) {
  struct stat st, out;
  if (::stat(path.c_str(), &st) == 0) {
    if (::fstat(STDOUT_FILENO, &out) == 0 && st.st_dev == out.st_dev &&
        st.st_ino == out.st_ino) {
      llvm::outs().flush();
      if (graphc::WriteAll(STDOUT_FILENO, bytes.data(), bytes.size())) {
        // What graphc prints after (the plan's summary) goes to stderr, so
        // that standard output holds the plan alone.
        ::dup2(STDERR_FILENO, STDOUT_FILENO);
        return true;
      }
      fail("cannot write '" + path + "': " + std::strerror(errno));
      return false;
    }
    if (S_ISCHR(st.st_mode)) {
      int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
      bool ok = fd >= 0 && graphc::WriteAll(fd, bytes.data(), bytes.size());
      int error = ok ? 0 : errno;
      if (fd >= 0 && ::close(fd) != 0 && ok) {
        ok = false;
        error = errno;
      }
      if (!ok)
        fail("cannot write '" + path + "': " + std::strerror(error));
      return ok;
    }
  }
  std::string target = path;
  struct stat link;
  char resolved[PATH_MAX];
  if (::lstat(path.c_str(), &link) == 0 && S_ISLNK(link.st_mode) &&
      ::realpath(path.c_str(), resolved) != nullptr)
    target = resolved;
  graphc::Status written = graphc::WriteFileAtomically(target, bytes);
  if (!written.ok()) {
    llvm::StringRef why = written.message();
    why.consume_front(graphc::Printable(target) + ": ");
    fail("cannot write '" + path + "': " + why);
  }
  return written.ok();
}

/// The model file: a regular file (a FIFO or a device such as /dev/zero is
/// refused before it is read) of at most 1 GiB, or "-" for standard input.
std::unique_ptr<llvm::MemoryBuffer> readModel(const std::string &path, std::string &error) {
  if (path == "-")
    return mlir::openInputFile(path, &error);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    error = std::strerror(errno);
    return nullptr;
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > (int64_t(1) << 30)) {
    error = S_ISDIR(st.st_mode)   ? "it is a directory"
            : !S_ISREG(st.st_mode) ? "it is not a regular file"
                                   : "it is larger than 1 GiB";
    ::close(fd);
    return nullptr;
  }
  auto buffer = llvm::MemoryBuffer::getOpenFile(fd, path, st.st_size,
                                                /*RequiresNullTerminator=*/true);
  ::close(fd);
  if (!buffer) {
    error = buffer.getError().message();
    return nullptr;
  }
  return std::move(*buffer);
}

std::string shapeOf(Value value) {
  std::string text;
  llvm::raw_string_ostream os(text);
  llvm::interleave(llvm::cast<RankedTensorType>(value.getType()).getShape(), os, "x");
  return text;
}

/// "4.09 GMAC", "7.84 kMAC": three significant figures in the largest unit
/// that keeps the value at least 1.
std::string withUnit(double value, llvm::StringRef unit) {
  const std::pair<double, const char *> prefixes[] = {
      {1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}, {1, ""}};
  for (auto [scale, prefix] : prefixes)
    if (value >= scale || scale == 1)
      return llvm::formatv("{0:f2} {1}{2}", value / scale, prefix, unit).str();
  llvm_unreachable("the last prefix always matches");
}

void printInfo(const graphc::ModelStats &stats, llvm::StringRef path) {
  llvm::raw_ostream &os = llvm::outs();
  os << "model:       " << path << "\n";
  os << "parameters:  " << stats.parameters << " in " << stats.parameterTensors
     << " tensors\n";
  os << "state:       " << stats.stateElements << " elements in "
     << stats.stateTensors << " tensors\n";
  os << "forward per image: " << withUnit(stats.macsPerImage(), "MAC") << " = "
     << withUnit(stats.flopsPerImage(), "FLOP") << " (conv2d, linear, matmul: "
     << stats.macs / stats.batchSize << " MAC) + "
     << withUnit(stats.otherFlopsPerImage(), "FLOP") << " other\n";
  os << "forward at batch " << stats.batchSize << ": "
     << withUnit(2.0 * stats.macs + stats.otherFlops, "FLOP") << ", "
     << llvm::formatv("{0:f1}", stats.activationBytes / (1024.0 * 1024.0))
     << " MiB of activations\n";
}

void printLayers(const graphc::ModelStats &stats) {
  llvm::raw_ostream &os = llvm::outs();
  os << "\n" << llvm::right_justify("line", 6) << "  "
     << llvm::left_justify("op", 27) << llvm::left_justify("layer", 29)
     << llvm::left_justify("output", 19) << llvm::right_justify("params", 10)
     << llvm::right_justify("MMAC/img", 11) << "\n";
  for (const graphc::LayerStats &layer : stats.layers) {
    unsigned line = 0;
    if (auto loc = llvm::dyn_cast<FileLineColLoc>(layer.op->getLoc()))
      line = loc.getLine();
    std::string output =
        layer.op->getNumResults() == 1 ? shapeOf(layer.op->getResult(0)) : "";
    if (output.empty())
      output = "scalar";
    os << llvm::format("%6u  %-26s %-28s %-18s %10lld %10.2f\n", line,
                       layer.op->getName().getStringRef().str().c_str(),
                       layer.name.empty() ? "-" : layer.name.c_str(), output.c_str(),
                       static_cast<long long>(layer.parameters),
                       layer.macs / 1e6 / stats.batchSize);
  }
}

/// "97.8 MiB", "43.1 KiB", "128 B".
std::string mebibytes(int64_t bytes) {
  if (bytes >= (int64_t(1) << 20))
    return llvm::formatv("{0:f1} MiB", bytes / (1024.0 * 1024.0)).str();
  if (bytes >= 1024)
    return llvm::formatv("{0:f1} KiB", bytes / 1024.0).str();
  return llvm::formatv("{0} B", bytes).str();
}

/// One line per fact a user checks first: what was written and how much memory
/// a run needs (the arena is the peak; the sum is what no reuse would cost).
void printPlanSummary(ModuleOp module, llvm::StringRef path, uint64_t fileBytes) {
  auto attr = [&](llvm::StringRef name) -> int64_t {
    auto value = module->getAttrOfType<IntegerAttr>(name);
    return value ? value.getInt() : 0;
  };
  int64_t kernels = llvm::range_size(module.getOps<graphc::plan::KernelOp>());
  llvm::raw_ostream &os = llvm::outs();
  os << "plan: " << path << " (" << fileBytes << " bytes), " << kernels << " kernels\n";
  for (auto program : module.getOps<graphc::plan::ProgramOp>())
    os << "  " << program.getSymName() << ": "
       << program.getBody().front().getOperations().size() << " commands, arena "
       << mebibytes(program.getArenaSize().value_or(0)) << "\n";
  int64_t arena = attr(graphc::kArenaSizeAttr), tensors = attr(graphc::kTensorBytesAttr);
  os << "peak memory (arena): " << mebibytes(arena) << " (" << arena
     << " bytes); sum of tensor sizes: " << mebibytes(tensors) << " ("
     << llvm::formatv("{0:f1}", arena ? double(tensors) / arena : 0.0) << "x)\n";
  os << "state: " << mebibytes(attr(graphc::kStateSizeAttr))
     << ", constants: " << attr(graphc::kConstantSizeAttr) << " bytes\n";
}

/// What graphc-data-parallel did: how many bytes travel per step, in how many
/// buckets, or that the plan trains on one rank only.
void printAllreduceSummary(ModuleOp module, bool fp16Wire, bool overlap) {
  llvm::raw_ostream &os = llvm::outs();
  auto buckets = module->getAttrOfType<DenseI64ArrayAttr>(graphc::kAllreduceBucketsAttr);
  if (!buckets) {
    os << "data-parallel: off (--no-data-parallel): the plan trains on one rank\n";
    return;
  }
  int64_t total = 0;
  for (int64_t bytes : buckets.asArrayRef())
    total += bytes;
  os << "data-parallel: gradients averaged across ranks in " << buckets.size()
     << " allreduce bucket" << (buckets.size() == 1 ? "" : "s") << " of " << mebibytes(total)
     << " in all (";
  llvm::interleave(
      buckets.asArrayRef(), os, [&](int64_t bytes) { os << mebibytes(bytes); }, ", ");
  os << (overlap ? "), each started as backward completes it"
                 : "), all started after backward (--no-allreduce-overlap)");
  if (fp16Wire)
    os << "; fp32 gradients travel as fp16";
  if (syncBn)
    os << "; batch norm synchronized across ranks";
  os << "\n";
}

/// What graphc-rematerialize did to train_step's memory.
void printRematerializeSummary(ModuleOp module, bool remat) {
  llvm::raw_ostream &os = llvm::outs();
  if (!remat) {
    os << "rematerialize: off (--remat=off): backward reads every value forward kept\n";
    return;
  }
  auto stats = module->getAttrOfType<DenseI64ArrayAttr>(graphc::kRematerializedAttr);
  if (!stats || stats.size() != 3) {
    os << "rematerialize: nothing to recompute\n";
    return;
  }
  os << "rematerialize: backward recomputes " << stats[0] << " elementwise value"
     << (stats[0] == 1 ? "" : "s") << ", so forward keeps " << mebibytes(stats[2])
     << " for it instead of " << mebibytes(stats[1]) << " (summed without reuse)\n";
}

/// Per program: where live tensors peak and what forward keeps for backward.
void printMemoryReport(ModuleOp module) {
  llvm::raw_ostream &os = llvm::outs();
  auto profiles = module->getAttrOfType<DictionaryAttr>(graphc::kMemoryProfileAttr);
  os << "memory report (arena: the tensors' placement; live: the bytes in use at once):\n";
  for (auto program : module.getOps<graphc::plan::ProgramOp>()) {
    auto profile = profiles ? profiles.getAs<DenseI64ArrayAttr>(program.getSymName())
                            : DenseI64ArrayAttr();
    if (!profile || profile.size() != graphc::kMemoryProfileSize)
      continue;
    int64_t arena = program.getArenaSize().value_or(0);
    int64_t peak = profile[graphc::kPeakLiveBytes], at = profile[graphc::kPeakCommand];
    int64_t loss = profile[graphc::kLossCommand];
    os << llvm::formatv("  {0}: arena {1}; live peak {2} at command {3} of {4}", program.getSymName(),
                        mebibytes(arena), mebibytes(peak), at, profile[graphc::kCommands]);
    if (loss >= 0 && program.getSymName() == "train_step")
      os << (at <= loss ? " (forward)" : " (backward)");
    if (peak > 0)
      os << llvm::formatv(", placement {0:f1}% over it", 100.0 * (arena - peak) / peak);
    os << "\n";
    if (loss >= 0 && program.getSymName() == "train_step")
      os << llvm::formatv("    kept from forward for backward (live across the loss, command "
                          "{0}): {1} in {2} tensors\n",
                          loss, mebibytes(profile[graphc::kKeptBytes]),
                          profile[graphc::kKeptBuffers]);
  }
}

/// Per program: kernel launches and bytes per run, fused vs unfused.
void printFusionReport(ModuleOp module, bool fused) {
  llvm::raw_ostream &os = llvm::outs();
  os << "fusion report (generated kernels per run; "
     << (fused ? "fused" : "unfused: --no-fuse") << "):\n";
  for (const auto &entry : graphc::kernelTraffic(module)) {
    const graphc::KernelTraffic &t = entry.getValue();
    os << llvm::formatv("  {0}: {1} launches, {2}", entry.getKey(), t.launches,
                        mebibytes(t.bytes));
    if (fused)
      os << llvm::formatv("; unfused {0} launches, {1}: {2:f2}x fewer launches, "
                          "{3:f2}x fewer bytes",
                          t.unfusedLaunches, mebibytes(t.unfusedBytes),
                          t.launches ? double(t.unfusedLaunches) / t.launches : 1.0,
                          t.bytes ? double(t.unfusedBytes) / t.bytes : 1.0);
    os << "\n";
  }
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM initLLVM(argc, argv);
  // LLVM's parser may add a "Did you mean" line; keep the first, the one that
  // names the problem.
  std::string parseErrors;
  llvm::raw_string_ostream parseErrorStream(parseErrors);
  // MLIR's libraries register LLVM's own options (code generation, profiling,
  // debugging: about 130 of them) at the top level. None of them means anything
  // to graphc, so `graphc --help` lists only the commands and --help itself;
  // each command's options are in its own --help.
  cl::HideUnrelatedOptions(llvm::ArrayRef<const cl::OptionCategory *>());
  cl::SetVersionPrinter([](llvm::raw_ostream &os) {
    os << "graphc " GRAPHC_VERSION " (writes plan schema version "
       << graphc::kPlanSchemaVersion << "; MLIR " LLVM_VERSION_STRING ")\n";
  });
  if (!cl::ParseCommandLineOptions(argc, argv,
                                   "graphc: a training-graph compiler\n\n"
                                   "  graphc info MODEL [--batch-size N] [--layers]\n"
                                   "  graphc compile MODEL [--batch-size N] "
                                   "[--compile-to=PHASE] [-o OUT]\n"
                                   "  graphc keygen NAME\n",
                                   &parseErrorStream)) {
    // Bad option values were already reported, on one line, by LLVM itself.
    if (parseErrors.empty())
      return 1;
    llvm::StringRef first = llvm::StringRef(parseErrors).split('\n').first;
    first = first.split(".  Try:").first;
    first.consume_front("graphc: ");
    first.consume_front("graphc info: ");
    first.consume_front("graphc compile: ");
    return fail(first.trim() + " (see graphc --help)");
  }
  if (!infoCommand && !compileCommand && !keygenCommand)
    return fail("expected a command, 'info', 'compile' or 'keygen' (see graphc --help)");
  // An option given an empty value (an unset $VARIABLE) is an error, never
  // the option left out: --sign-key '' would write an unsigned plan.
  for (const cl::Option *option : {static_cast<const cl::Option *>(&signKey),
                                   static_cast<const cl::Option *>(&outputPath),
                                   static_cast<const cl::Option *>(&dumpKernels)})
    if (option->getNumOccurrences() &&
        static_cast<const cl::opt<std::string> *>(option)->getValue().empty())
      return fail("-" + llvm::Twine(option->ArgStr.size() > 1 ? "-" : "") + option->ArgStr +
                  " is empty");
  if ((keygenCommand && keyName.empty()) || ((infoCommand || compileCommand) && modelPath.empty()))
    return fail(keygenCommand ? "keygen: NAME is empty" : "the model path is empty");
  if (keygenCommand) {
    std::string secretPath = keyName + ".key", publicPath = keyName + ".pub";
    graphc::Status made = graphc::GenerateKeyPair(secretPath, publicPath);
    if (!made.ok())
      return fail(made.message());
    llvm::outs() << "wrote " << secretPath << " (the secret key, mode 0600: keep it private) and "
                 << publicPath << " (give it to graphrun --trusted-keys)\n";
    return 0;
  }
  // 2^20 keeps every per-batch count (FLOPs, bytes) far inside int64.
  constexpr int64_t kMaxBatchSize = int64_t(1) << 20;
  if (batchSize < 0 || (batchSize == 0 && batchSize.getNumOccurrences()) ||
      batchSize > kMaxBatchSize)
    return fail("--batch-size must be in [1, " + llvm::Twine(kMaxBatchSize) +
                "], got " + llvm::Twine(batchSize));

  bool writePlan = compileCommand && compileTo == graphc::Phase::Plan;
  // A plan is binary: without -o it goes to plan.fb (the file graphrun's
  // examples run), never to a terminal.
  const bool defaultOutput = writePlan && !outputPath.getNumOccurrences();
  if (defaultOutput)
    outputPath = "plan.fb";
  if (writePlan && (outputPath.empty() || outputPath == "-"))
    return fail("a plan is a binary file: give -o PLAN (or --compile-to=PHASE to "
                "print the IR)");
  if (!(bucketMb > 0.0) || bucketMb > 1024.0 * 1024.0)
    return fail(llvm::formatv("--bucket-mb must be in (0, 1048576], got {0}", double(bucketMb)).str());
  if (allreduceDtype != "fp32" && allreduceDtype != "fp16")
    return fail("--allreduce-dtype must be fp32 or fp16, got '" + allreduceDtype + "'");
  if (noDataParallel)
    for (const cl::Option *option : {static_cast<const cl::Option *>(&bucketMb),
                                     static_cast<const cl::Option *>(&allreduceDtype),
                                     static_cast<const cl::Option *>(&syncBn),
                                     static_cast<const cl::Option *>(&noAllreduceOverlap)})
      if (option->getNumOccurrences())
        return fail("--" + option->ArgStr + " does not apply to --no-data-parallel");
  if (layoutChoice.getNumOccurrences() && layoutChoice != "nchw" && layoutChoice != "nhwc")
    return fail("--layout must be nchw or nhwc, got '" + layoutChoice + "'");
  if (rematMode != "all" && rematMode != "fused" && rematMode != "off")
    return fail("--remat must be all, fused or off, got '" + rematMode + "'");
  if (targetKind != "cpu" && targetKind != "cuda" && targetKind != "all")
    return fail("--target must be cpu, cuda or all, got '" + targetKind + "'");
  if (!llvm::is_contained({"x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4"},
                          kernelCpu.getValue()))
    return fail("--kernel-cpu must be x86-64, x86-64-v2, x86-64-v3 or x86-64-v4, got '" +
                kernelCpu + "'");

  // Mixed precision: the combinations graphc-mixed-precision cannot see.
  if (ampPrecision.getNumOccurrences() && ampPrecision != "fp16" && ampPrecision != "bf16")
    return fail("--amp must be fp16 or bf16, got '" + ampPrecision + "'");
  for (const cl::Option *option :
       {static_cast<const cl::Option *>(&lossScaleMode),
        static_cast<const cl::Option *>(&initialLossScale),
        static_cast<const cl::Option *>(&lossScaleWindow)})
    if (option->getNumOccurrences() && ampPrecision != "fp16")
      return fail("--" + option->ArgStr + " applies to --amp=fp16 only" +
                  (ampPrecision == "bf16" ? " (bf16 needs no loss scaling)" : ""));
  // Below x86-64-v3 there is no F16C: LLVM would convert halves with
  // compiler-rt calls, which a plan's kernel library may not import.
  if (ampPrecision == "fp16" && targetKind != "cuda" &&
      (kernelCpu == "x86-64" || kernelCpu == "x86-64-v2"))
    return fail("--amp=fp16 needs --kernel-cpu=x86-64-v3 or x86-64-v4 (F16C converts "
                "halves), got '" + kernelCpu + "'");
  if (lossScaleMode.getNumOccurrences() && lossScaleMode != "dynamic" &&
      (initialLossScale.getNumOccurrences() || lossScaleWindow.getNumOccurrences()))
    return fail("--initial-loss-scale and --loss-scale-window apply to --loss-scale=dynamic");

  // The key is read before the work, so a wrong file fails at once.
  std::optional<graphc::SecretKey> signingKey;
  if (!signKey.empty()) {
    if (!writePlan)
      return fail("--sign-key signs plans; it does not apply to --compile-to=" +
                  llvm::Twine(compileTo.getValue() == graphc::Phase::Verify ? "verify"
                              : compileTo.getValue() == graphc::Phase::MixedPrecision
                                  ? "mixed-precision"
                              : compileTo.getValue() == graphc::Phase::DataParallel
                                  ? "data-parallel"
                              : compileTo.getValue() == graphc::Phase::Autodiff ? "autodiff"
                                                                                : "lower"));
    auto key = graphc::ReadSecretKey(signKey);
    if (!key.ok())
      return fail("--sign-key: " + key.status().message());
    signingKey = *key;
  }

  std::string errorMessage;
  std::unique_ptr<llvm::MemoryBuffer> file = readModel(modelPath, errorMessage);
  if (!file)
    return fail("cannot read model '" + modelPath + "': " + errorMessage);
  // -o names the model itself: writing would destroy the input.
  bool same = false;
  if (modelPath != "-" && outputPath != "-" && llvm::sys::fs::exists(outputPath) &&
      !llvm::sys::fs::equivalent(modelPath, outputPath, same) && same)
    return fail("-o '" + outputPath + "' is the model file; refusing to overwrite it");

  DialectRegistry registry;
  registry.insert<graphc::nn::NNDialect, func::FuncDialect>();
  MLIRContext context(registry);
  // Every pass works on the whole module; threads would only add contention on
  // 2 cores, and codegen loads the LLVM dialect while it runs.
  context.disableMultithreading();
  // Diagnostics point at the user's file; a dump of the IR would bury them.
  context.printOpOnDiagnostic(false);
  llvm::SourceMgr sourceMgr;
  sourceMgr.AddNewSourceBuffer(std::move(file), llvm::SMLoc());
  SourceMgrDiagnosticHandler diagnostics(sourceMgr, &context, errorStream());
  if (!graphc::checkNesting(sourceMgr, errorStream()))
    return 1;

  // Diagnostics go to stderr as file:line:col: error: ...
  OwningOpRef<ModuleOp> module =
      parseSourceFile<ModuleOp>(sourceMgr, ParserConfig(&context));
  if (!module)
    return 1;
  // The module the parser wraps around top-level ops sits at line 0; errors
  // about the model as a whole (e.g. no @forward) read better at 1:1.
  if (auto loc = llvm::dyn_cast<FileLineColLoc>(module->getLoc()); loc && !loc.getLine())
    (*module)->setLoc(FileLineColLoc::get(loc.getFilename(), 1, 1));

  graphc::PipelineOptions options;
  options.batchSize = batchSize != 0 ? int64_t(batchSize) : infoCommand ? 1 : 32;
  options.stopAfter = infoCommand ? graphc::Phase::Verify : compileTo;
  graphc::OptimizerOptions &opt = options.optimizer;
  opt.optimizer = optimizerKind;
  // Unless --lr is given: Goyal et al.'s linear scaling rule (0.1 at batch
  // 256) for the SGD family, so a small batch does not start with a step
  // sized for 256 images (ResNet-50 at batch 8 diverged in three steps at
  // 0.1), and PyTorch's default for Adam, whose steps do not scale with the
  // batch.
  std::string lrChoice = "--lr";
  opt.lr = learningRate;
  if (!learningRate.getNumOccurrences()) {
    if (optimizerKind == "adam" || optimizerKind == "adamw") {
      opt.lr = 0.001;
      lrChoice = "Adam's default";
    } else {
      opt.lr = 0.1 * static_cast<double>(options.batchSize) / 256.0;
      lrChoice = llvm::formatv("0.1 x batch {0} / 256, the linear scaling rule; --lr sets it",
                               options.batchSize)
                     .str();
    }
  }
  opt.momentum = momentumFactor;
  opt.weightDecay = weightDecay;
  opt.excludeBnBias = excludeBnBias;
  opt.larsEta = larsEta;
  opt.beta1 = adamBeta1;
  opt.beta2 = adamBeta2;
  opt.epsilon = adamEps;
  opt.lrDecay = lrDecay;
  opt.warmupSteps = warmupSteps;
  opt.totalSteps = totalSteps;
  opt.finalLr = finalLr;
  opt.decayStepSize = decayStepSize;
  opt.decayGamma = decayGamma;
  options.fuse = !noFuse;
  options.remat = rematMode != "off";
  // Channels-last where its kernels are the fast ones: oneDNN's on the CPU,
  // cuDNN's tensor-core kernels for half precision on CUDA (which take OHWI
  // filters; the CPU reads those as well). FP32 on CUDA stays NCHW until a
  // GPU has measured NHWC against it.
  options.layout = layoutChoice.getNumOccurrences()                  ? layoutChoice.getValue()
                   : targetKind == "cpu" || !ampPrecision.empty() ? "nhwc"
                                                                   : "nchw";
  options.filters = options.layout == "nhwc" && targetKind != "cpu" ? "ohwi" : "oihw";
  options.rematerialize.libraryInputs = rematMode == "all";
  options.dataParallel = !noDataParallel;
  options.syncBn = syncBn;
  options.distributed.bucketMb = bucketMb;
  options.distributed.allreduceDtype = allreduceDtype;
  options.distributed.overlap = !noAllreduceOverlap;
  if (!ampPrecision.empty()) {
    graphc::MixedPrecisionOptions &amp = options.mixedPrecision;
    amp.precision = ampPrecision;
    amp.lossScale = lossScaleMode;
    amp.initialScale = initialLossScale;
    amp.window = lossScaleWindow;
  }
  options.codegen.cpu = kernelCpu;
  options.codegen.targets = targetKind;
  if (const char *cudaHome = std::getenv("CUDA_HOME"))
    options.codegen.cudaPath = cudaHome;
  options.codegen.dumpDir = dumpKernels;
  if (!dumpKernels.empty() && !llvm::sys::fs::is_directory(dumpKernels))
    return fail("--dump-kernels: '" + dumpKernels + "' is not a directory");
  // A plan is for graphrun, which feeds f32 NCHW images and i32 labels; the
  // model contract also admits rank-2 images and i64 labels (for graphc-opt
  // and the IR phases), so a plan checks it here, before the long work.
  if (writePlan)
    if (auto forward = (*module).lookupSymbol<func::FuncOp>("forward");
        forward && forward.getFunctionType().getNumInputs() == 2) {
      FunctionType type = forward.getFunctionType();
      auto images = llvm::dyn_cast<RankedTensorType>(type.getInput(0));
      auto labels = llvm::dyn_cast<RankedTensorType>(type.getInput(1));
      if (!images || images.getRank() != 4 || !images.getElementType().isF32() || !labels ||
          labels.getRank() != 1 || !labels.getElementType().isSignlessInteger(32)) {
        forward.emitError("a plan trains on f32 NCHW images (rank 4) and i32 labels, as "
                          "graphrun feeds them; @forward takes ")
            << type.getInput(0) << " and " << type.getInput(1)
            << " (--compile-to=PHASE prints the IR of such a model)";
        return 1;
      }
    }
  PassManager pm(&context, ModuleOp::getOperationName());
  graphc::buildCompilePipeline(pm, options);
  if (failed(pm.run(*module)))
    return 1;

  if (infoCommand) {
    FailureOr<graphc::ModelStats> stats = graphc::computeModelStats(*module);
    if (failed(stats))
      return 1;
    printInfo(*stats, modelPath);
    if (showLayers)
      printLayers(*stats);
    return 0;
  }

  if (writePlan) {
    graphc::PlanMetadata metadata;
    metadata.signingKey = signingKey;
    metadata.model = llvm::sys::path::stem(modelPath).str();
    metadata.batchSize = options.batchSize;
    metadata.fused = options.fuse;
    if (!ampPrecision.empty())
      metadata.precision = ampPrecision;
    std::string plan;
    llvm::raw_string_ostream planStream(plan);
    if (failed(graphc::exportPlan(*module, metadata, planStream)))
      return 1;
    if (!writeOutput(outputPath, plan))
      return 1;
    printPlanSummary(*module, outputPath, plan.size());
    if (defaultOutput)
      llvm::outs() << "wrote plan.fb in the current directory (no -o given); run it with "
                      "graphrun plan.fb\n";
    llvm::outs() << "learning rate: " << llvm::format("%g", opt.lr) << " (" << lrChoice
                 << ")\n";
    llvm::outs() << "precision: " << metadata.precision;
    if (ampPrecision == "fp16") {
      if (lossScaleMode.empty() || lossScaleMode == "dynamic")
        llvm::outs() << llvm::format(", dynamic loss scaling (initial %g, x2 after %lld "
                                     "finite steps, x0.5 on overflow)",
                                     double(initialLossScale),
                                     static_cast<long long>(lossScaleWindow));
      else
        llvm::outs() << ", static loss scale " << lossScaleMode;
    } else if (ampPrecision == "bf16") {
      llvm::outs() << " (no loss scaling: bf16 has fp32's range)";
    }
    llvm::outs() << "\n";
    // What storing activations in half saves (each would be twice the
    // bytes), summed like "sum of tensor sizes": without reuse.
    if (auto storage = (*module)->getAttrOfType<DictionaryAttr>(graphc::kHalfStorageAttr))
      if (auto train = storage.getAs<DenseI64ArrayAttr>("train_step");
          train && train.size() == 2)
        llvm::outs() << "half storage: train_step stores " << train[0] << " activations in "
                     << metadata.precision << ", " << mebibytes(train[1])
                     << " summed without reuse (fp32: " << mebibytes(2 * train[1]) << ")\n";
    printAllreduceSummary(*module, allreduceDtype == "fp16", !noAllreduceOverlap);
    if (auto sums = (*module)->getAttrOfType<IntegerAttr>(graphc::kSimplifiedReductionsAttr);
        sums && sums.getInt() > 0)
      llvm::outs() << "reductions: " << sums.getInt() << " sum"
                   << (sums.getInt() == 1 ? "" : "s")
                   << " in backward taken from sums already computed, without a pass over "
                      "memory (batch norm's mean gradients: deviations from a mean sum to "
                      "zero)\n";
    printRematerializeSummary(*module, options.remat);
    if (memoryReport)
      printMemoryReport(*module);
    if (fusionReport)
      printFusionReport(*module, options.fuse);
    return 0;
  }
  if (outputPath == "-") {
    module->print(llvm::outs());
    llvm::outs() << "\n";
    return 0;
  }
  std::string ir;
  llvm::raw_string_ostream irStream(ir);
  module->print(irStream);
  irStream << "\n";
  return writeOutput(outputPath, ir) ? 0 : 1;
}
