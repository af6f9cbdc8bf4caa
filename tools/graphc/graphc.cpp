//===- graphc.cpp - the graphc compiler driver ----------------------------===//
//
//   graphc info MODEL [--batch-size N] [--layers]
//   graphc compile MODEL [--batch-size N] [--compile-to=PHASE] [-o OUT]
//                        (a plan goes to plan.fb when -o is not given)
//                        [--optimizer=...] [--lr=...] [...training options]
//   graphc import MODEL.onnx [-o MODEL.mlir] [--weights-out W.safetensors]
//                            [--label-smoothing X] [--logits OUTPUT]
//                            [--freeze PATTERN,...]
//
// `info` prints the model's parameter count and forward cost; `compile` runs the
// pipeline (compiler/Pipeline) up to a phase and writes the IR; `import` writes
// an ONNX classifier as an nn model (compiler/Import), which `info` and
// `compile` also do in memory for a MODEL ending in .onnx. Every error is one
// located diagnostic (file:line:col: error: ...) or one line naming the problem,
// and exit status 1.
//
//===----------------------------------------------------------------------===//

#include "compiler/Analysis/ModelStats.h"
#include "compiler/Export/PlanExport.h"
#include "compiler/Import/OnnxImport.h"
#include "compiler/Pipeline/CompileOptions.h"
#include "EscapingStream.h"
#include "NestingCheck.h"
#include "Summaries.h"
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
cl::SubCommand importCommand("import",
                             "Import an ONNX classifier as an nn model (MODEL.mlir): its forward "
                             "graph, softmax cross-entropy appended");
cl::SubCommand keygenCommand("keygen",
                             "Write an Ed25519 key pair for signing plans: NAME.key (secret) "
                             "and NAME.pub (for graphrun --trusted-keys)");
cl::opt<std::string> keyName(cl::Positional, cl::Required, cl::desc("<name>"),
                             cl::sub(keygenCommand));

cl::opt<std::string> modelPath(cl::Positional, cl::Required,
                               cl::desc("<model.mlir or model.onnx>"), cl::sub(infoCommand),
                               cl::sub(compileCommand), cl::sub(importCommand));
cl::opt<bool> showLayers("layers", cl::desc("Also print one line per op"),
                         cl::sub(infoCommand));
cl::opt<std::string> outputPath("o", cl::desc("Output file: the plan (default: plan.fb), "
                                              "or the IR of --compile-to (default: stdout); "
                                              "import: the nn model (default: MODEL.mlir "
                                              "in the current directory)"),
                                cl::value_desc("file"), cl::init("-"),
                                cl::sub(compileCommand), cl::sub(importCommand));
cl::opt<std::string> weightsOut("weights-out",
                               cl::desc("Where the model's initial weights go (safetensors; "
                                        "default: the output's name with .safetensors)"),
                               cl::value_desc("file"), cl::sub(importCommand));
cl::opt<double> labelSmoothing("label-smoothing",
                               cl::desc("The appended loss's label smoothing (default 0)"),
                               cl::init(0.0), cl::sub(importCommand));
cl::opt<std::string> importLogits(
    "logits",
    cl::desc("The graph output trained as the logits, for a graph of several (GoogLeNet's and "
             "Inception's auxiliary classifiers): the others, and the nodes only they need, "
             "are left out"),
    cl::value_desc("output"), cl::sub(importCommand));
cl::list<std::string> importFreeze(
    "freeze",
    cl::desc("Initializers imported as constants, not trained: name patterns (glob: * and ?), "
             "comma-separated: PyTorch's float buffers (Swin V2's relative_coords_table), or "
             "layers to freeze"),
    cl::value_desc("pattern,..."), cl::CommaSeparated, cl::sub(importCommand));
cl::opt<int64_t> importBatch(
    "batch",
    cl::desc("Fix the batch size (default: left open, set by graphc compile --batch-size): "
             "for models whose graph merges the batch with other dims, as attention does; "
             "compile with the same --batch-size. With --forward: the size of a symbolic "
             "batch axis"),
    cl::init(0), cl::sub(importCommand));
cl::opt<bool> importForward(
    "forward",
    cl::desc("An inference model instead (@infer): every graph input an argument and every "
             "output a result, shapes as in the file, no loss; for graphc compile --forward"),
    cl::sub(importCommand));

// What shapes the training step (compiler/Pipeline/CompileOptions.h: names,
// defaults, descriptions and rules), registered on `compile` in main; below,
// what only the driver does with the result.
graphc::CompileOptions &compileOptions() {
  static graphc::CompileOptions options;
  return options;
}

cl::opt<bool> memoryReport("memory-report",
                           cl::desc("Print where train_step's memory peaks and what forward "
                                    "keeps for backward"),
                           cl::sub(compileCommand), cl::cat(graphc::codegenCategory()));

cl::opt<std::string> signKey("sign-key",
                            cl::desc("Sign the plan with this secret key (graphc keygen); "
                                     "graphrun --trusted-keys then runs it only if it trusts "
                                     "the key"),
                            cl::value_desc("file"), cl::sub(compileCommand),
                            cl::cat(graphc::codegenCategory()));

cl::opt<bool> fusionReport("fusion-report",
                           cl::desc("Print each program's generated-kernel launches and the "
                                    "bytes they move per run, fused vs unfused"),
                           cl::sub(compileCommand), cl::cat(graphc::codegenCategory()));

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

/// A plan is for graphrun, which feeds f32 NCHW images and i32 labels; the
/// model contract also admits rank-2 images and i64 labels (for graphc-opt
/// and the IR phases), so a plan checks it before the long work.
bool trainsOnGraphrunInputs(ModuleOp module) {
  auto forward = module.lookupSymbol<func::FuncOp>("forward");
  if (!forward || forward.getFunctionType().getNumInputs() != 2)
    return true;  // the model contract's own check says what is wrong
  FunctionType type = forward.getFunctionType();
  auto images = llvm::dyn_cast<RankedTensorType>(type.getInput(0));
  auto labels = llvm::dyn_cast<RankedTensorType>(type.getInput(1));
  if (images && images.getRank() == 4 && images.getElementType().isF32() && labels &&
      labels.getRank() == 1 && labels.getElementType().isSignlessInteger(32))
    return true;
  forward.emitError("a plan trains on f32 NCHW images (rank 4) and i32 labels, as "
                    "graphrun feeds them; @forward takes ")
      << type.getInput(0) << " and " << type.getInput(1)
      << " (--compile-to=PHASE prints the IR of such a model)";
  return false;
}

bool isOnnx(llvm::StringRef path) { return path.ends_with_insensitive(".onnx"); }

/// Prints the diagnostics of an imported model, whose locations name ONNX
/// nodes ("node 3 'Conv_3' (Conv)"), not lines of a file.
void printImportedDiagnostic(Diagnostic &diagnostic) {
  std::string where;
  if (auto name = llvm::dyn_cast<NameLoc>(diagnostic.getLocation()))
    where = name.getName().str() + ": ";
  const char *kind = diagnostic.getSeverity() == DiagnosticSeverity::Error     ? "error"
                     : diagnostic.getSeverity() == DiagnosticSeverity::Warning ? "warning"
                                                                               : "note";
  errorStream() << "graphc: " << kind << ": " << where << diagnostic.str() << "\n";
}

/// graphc keygen: a key pair for signing plans.
int keygen() {
  std::string secretPath = keyName + ".key", publicPath = keyName + ".pub";
  graphc::Status made = graphc::GenerateKeyPair(secretPath, publicPath);
  if (!made.ok())
    return fail(made.message());
  llvm::outs() << "wrote " << secretPath << " (the secret key, mode 0600: keep it private) and "
               << publicPath << " (give it to graphrun --trusted-keys)\n";
  return 0;
}

/// graphc import: the ONNX model as an nn model file.
int importModel() {
  if (!(labelSmoothing >= 0.0 && labelSmoothing < 1.0))
    return fail("--label-smoothing must be in [0, 1)");
  if (importForward && labelSmoothing.getNumOccurrences())
    return fail("--label-smoothing does not apply to --forward (no loss)");
  if (importForward && importLogits.getNumOccurrences())
    return fail("--logits does not apply to --forward (every output is kept)");
  MLIRContext context;
  context.printOpOnDiagnostic(false);
  ScopedDiagnosticHandler diagnostics(&context, [](Diagnostic &diagnostic) {
    printImportedDiagnostic(diagnostic);
    return success();
  });
  graphc::OnnxImportOptions importOptions;
  importOptions.labelSmoothing = labelSmoothing;
  importOptions.forward = importForward;
  importOptions.logits = importLogits;
  for (const std::string &pattern : importFreeze) {
    llvm::Expected<llvm::GlobPattern> glob = llvm::GlobPattern::create(pattern);
    if (!glob)
      return fail("--freeze '" + pattern + "': " + llvm::toString(glob.takeError()));
    importOptions.frozen.push_back(std::move(*glob));
    importOptions.frozenText.push_back(pattern);
  }
  if (importBatch.getNumOccurrences() && importBatch < 1)
    return fail("--batch must be at least 1");
  importOptions.batch = importBatch;
  std::string why;
  std::vector<graphc::ImportedWeight> weights;
  OwningOpRef<ModuleOp> module =
      graphc::importOnnx(context, modelPath, importOptions, why, &weights);
  if (!module)
    return fail("cannot import '" + modelPath + "': " + why);
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "// " << llvm::sys::path::stem(modelPath) << ": imported from "
     << llvm::sys::path::filename(modelPath) << " by graphc import.\n"
     << (importForward
             ? std::string("// An inference model: graphc compile --forward.")
             : "// Loss: softmax cross-entropy, " +
                   (labelSmoothing == 0.0
                        ? std::string("no label smoothing")
                        : llvm::formatv("label smoothing {0}", double(labelSmoothing)).str()) +
                   ".")
     << "\n";
  if (importBatch > 0)
    os << "// Batch size fixed at " << importBatch << ": graphc compile --batch-size "
       << importBatch << ".\n";
  module->print(os);
  os << "\n";
  std::string out = outputPath.getNumOccurrences()
                        ? outputPath.getValue()
                        : (llvm::sys::path::stem(modelPath) + ".mlir").str();
  llvm::SmallString<256> weightsPath(out == "-" ? llvm::sys::path::filename(modelPath) : out);
  llvm::sys::path::replace_extension(weightsPath, ".safetensors");
  if (weightsOut.getNumOccurrences())
    weightsPath = weightsOut.getValue();
  if (weightsPath.empty())
    return fail("--weights-out is empty");
  for (const std::string &written : {out, std::string(weightsPath)}) {
    bool same = false;
    if (written != "-" && llvm::sys::fs::exists(written) &&
        !llvm::sys::fs::equivalent(modelPath, written, same) && same)
      return fail("'" + written + "' is the model file; refusing to overwrite it");
  }
  if (out == weightsPath)
    return fail("the model and its weights would both be written to '" + out + "'");
  const std::string safetensors = graphc::safetensorsOf(
      weights, {{"format", "pt"},
                {"graphc.imported_from", llvm::sys::path::filename(modelPath).str()}});
  if (!writeOutput(std::string(weightsPath), safetensors))
    return 1;
  if (out == "-") {
    llvm::outs() << text;
    return 0;
  }
  if (!writeOutput(out, text))
    return 1;
  int64_t parameters = 0, tensors = 0;
  for (auto parameter : module->getOps<graphc::nn::ParameterOp>()) {
    parameters += parameter.getNumElements();
    ++tensors;
  }
  llvm::outs() << "wrote " << out << ": " << parameters << " parameters in " << tensors
               << " tensors; graphc compile " << (importForward ? "--forward " : "") << out
               << (importForward ? " builds its inference plan\n" : " builds its training step\n")
               << "wrote " << weightsPath << ": the model file's values of its " << weights.size()
               << " parameters and statistics; graphrun PLAN --init " << weightsPath
               << " starts from them\n";
  return 0;
}


/// --sign-key's key, read before the work so that a wrong file fails at once.
bool readSigningKey(graphc::Phase compileTo, std::optional<graphc::SecretKey> &signingKey) {
  if (compileTo != graphc::Phase::Plan) {
    fail("--sign-key signs plans; it does not apply to --compile-to=" +
         llvm::Twine(compileTo == graphc::Phase::Verify           ? "verify"
                     : compileTo == graphc::Phase::MixedPrecision ? "mixed-precision"
                     : compileTo == graphc::Phase::DataParallel   ? "data-parallel"
                     : compileTo == graphc::Phase::Autodiff       ? "autodiff"
                                                                  : "lower"));
    return false;
  }
  auto key = graphc::ReadSecretKey(signKey);
  if (!key.ok()) {
    fail("--sign-key: " + key.status().message());
    return false;
  }
  signingKey = *key;
  return true;
}

/// Where a model's diagnostics go: file:line:col of an MLIR file, or the
/// ONNX node of an imported one. Lives as long as the module.
struct ModelSource {
  llvm::SourceMgr sourceMgr;
  std::optional<SourceMgrDiagnosticHandler> diagnostics;
  std::optional<ScopedDiagnosticHandler> importedDiagnostics;
};

/// The model of info and compile: an nn model file, or an ONNX model
/// imported in memory (graphc import writes it out). Null after an error,
/// which it printed.
OwningOpRef<ModuleOp> loadModel(MLIRContext &context, ModelSource &source) {
  if (isOnnx(modelPath)) {
    source.importedDiagnostics.emplace(&context, [](Diagnostic &diagnostic) {
      printImportedDiagnostic(diagnostic);
      return success();
    });
    std::string why;
    graphc::OnnxImportOptions importOptions;
    importOptions.forward = compileOptions().forward;
    importOptions.fallbackBatch = compileOptions().batchSize;
    OwningOpRef<ModuleOp> module = graphc::importOnnx(context, modelPath, importOptions, why);
    if (!module)
      fail("cannot import '" + modelPath + "': " + why);
    return module;
  }
  std::string errorMessage;
  std::unique_ptr<llvm::MemoryBuffer> file = readModel(modelPath, errorMessage);
  if (!file) {
    fail("cannot read model '" + modelPath + "': " + errorMessage);
    return nullptr;
  }
  source.sourceMgr.AddNewSourceBuffer(std::move(file), llvm::SMLoc());
  source.diagnostics.emplace(source.sourceMgr, &context, errorStream());
  if (!graphc::checkNesting(source.sourceMgr, errorStream()))
    return nullptr;
  // Diagnostics go to stderr as file:line:col: error: ...
  OwningOpRef<ModuleOp> module =
      parseSourceFile<ModuleOp>(source.sourceMgr, ParserConfig(&context));
  if (!module)
    return nullptr;
  // The module the parser wraps around top-level ops sits at line 0; errors
  // about the model as a whole (e.g. no @forward) read better at 1:1.
  if (auto loc = llvm::dyn_cast<FileLineColLoc>(module->getLoc()); loc && !loc.getLine())
    (*module)->setLoc(FileLineColLoc::get(loc.getFilename(), 1, 1));
  return module;
}

/// graphc compile's plan: exported, written, summarized.
int writePlanFile(ModuleOp module, const graphc::PipelineOptions &pipeline,
                  const std::optional<graphc::SecretKey> &signingKey, bool defaultOutput,
                  llvm::StringRef lrChoice) {
  const graphc::CompileOptions &options = compileOptions();
  graphc::PlanMetadata metadata;
  metadata.signingKey = signingKey;
  metadata.model = llvm::sys::path::stem(modelPath).str();
  // The batch graphrun feeds each step: every micro-batch's.
  metadata.batchSize = pipeline.batchSize * (pipeline.forward ? 1 : pipeline.microBatches);
  metadata.fused = pipeline.fuse;
  metadata.microBatches = pipeline.forward ? 1 : pipeline.microBatches;
  if (!options.amp.empty())
    metadata.precision = options.amp;
  std::string plan;
  llvm::raw_string_ostream planStream(plan);
  if (failed(graphc::exportPlan(module, metadata, planStream)))
    return 1;
  if (!writeOutput(outputPath, plan))
    return 1;
  graphc::printPlanSummary(module, outputPath, plan.size());
  if (defaultOutput)
    llvm::outs() << "wrote plan.fb in the current directory (no -o given); run it with "
                    "graphrun plan.fb\n";
  if (pipeline.forward)
    llvm::outs() << "inference only (--forward): graphrun infer " << outputPath
                 << " --inputs X.npy[,...] --outputs Y.npy[,...] runs it\n";
  else
    graphc::printTrainingSummary(module, options, pipeline, lrChoice);
  if (memoryReport)
    graphc::printMemoryReport(module);
  if (fusionReport)
    graphc::printFusionReport(module, pipeline.fuse);
  return 0;
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
  graphc::CompileOptions &options = compileOptions();
  options.exposeOn(compileCommand, infoCommand);
  cl::SetVersionPrinter([](llvm::raw_ostream &os) {
    os << "graphc " GRAPHC_VERSION " (writes plan schema version "
       << graphc::kPlanSchemaVersion << "; MLIR " LLVM_VERSION_STRING ")\n";
  });
  if (!cl::ParseCommandLineOptions(argc, argv,
                                   "graphc: a training-graph compiler\n\n"
                                   "  graphc info MODEL [--batch-size N] [--layers]\n"
                                   "  graphc compile MODEL [--batch-size N] "
                                   "[--compile-to=PHASE] [-o OUT]\n"
                                   "  graphc import MODEL.onnx [-o MODEL.mlir]\n"
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
  if (!infoCommand && !compileCommand && !keygenCommand && !importCommand)
    return fail("expected a command, 'info', 'compile', 'import' or 'keygen' (see graphc --help)");
  // An option given an empty value (an unset $VARIABLE) is an error, never
  // the option left out: --sign-key '' would write an unsigned plan.
  for (const cl::Option *option : {static_cast<const cl::Option *>(&signKey),
                                   static_cast<const cl::Option *>(&outputPath)})
    if (option->getNumOccurrences() &&
        static_cast<const cl::opt<std::string> *>(option)->getValue().empty())
      return fail("-" + llvm::Twine(option->ArgStr.size() > 1 ? "-" : "") + option->ArgStr +
                  " is empty");
  if ((keygenCommand && keyName.empty()) ||
      ((infoCommand || compileCommand || importCommand) && modelPath.empty()))
    return fail(keygenCommand ? "keygen: NAME is empty" : "the model path is empty");
  if (keygenCommand)
    return keygen();
  if (importCommand)
    return importModel();
  // info's shapes default to one image.
  if (infoCommand && !options.given(options.batchSize))
    options.batchSize = 1;
  if (std::string error = options.validate(); !error.empty())
    return fail(error);
  const graphc::Phase compileTo = infoCommand ? graphc::Phase::Verify : options.compileTo;
  bool writePlan = compileCommand && compileTo == graphc::Phase::Plan;
  // A plan is binary: without -o it goes to plan.fb (the file graphrun's
  // examples run), never to a terminal.
  const bool defaultOutput = writePlan && !outputPath.getNumOccurrences();
  if (defaultOutput)
    outputPath = "plan.fb";
  if (writePlan && (outputPath.empty() || outputPath == "-"))
    return fail("a plan is a binary file: give -o PLAN (or --compile-to=PHASE to "
                "print the IR)");

  // The key is read before the work, so a wrong file fails at once.
  std::optional<graphc::SecretKey> signingKey;
  if (!signKey.empty() && !readSigningKey(compileTo, signingKey))
    return 1;

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
  ModelSource source;
  OwningOpRef<ModuleOp> module = loadModel(context, source);
  if (!module)
    return 1;
  // A model imported at a fixed batch size (graphc import --batch) compiles
  // at it unless --batch-size says otherwise (graphc-set-batch-size then
  // refuses, naming both).
  if (auto fixed = (*module)->getAttrOfType<IntegerAttr>("graphc.fixed_batch");
      fixed && !options.given(options.batchSize) && fixed.getInt() >= 1 &&
      fixed.getInt() <= graphc::kMaxBatchSize)
    options.batchSize = fixed.getInt();

  std::string lrChoice;
  graphc::PipelineOptions pipeline = options.resolve(&lrChoice);
  pipeline.stopAfter = compileTo;
  if (writePlan && !pipeline.forward && !trainsOnGraphrunInputs(*module))
    return 1;
  PassManager pm(&context, ModuleOp::getOperationName());
  graphc::buildCompilePipeline(pm, pipeline);
  if (failed(pm.run(*module)))
    return 1;

  if (infoCommand) {
    FailureOr<graphc::ModelStats> stats = graphc::computeModelStats(*module);
    if (failed(stats))
      return 1;
    graphc::printInfo(*stats, modelPath);
    if (showLayers)
      graphc::printLayers(*stats);
    return 0;
  }

  if (writePlan)
    return writePlanFile(*module, pipeline, signingKey, defaultOutput, lrChoice);
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
