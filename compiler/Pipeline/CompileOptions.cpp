//===- CompileOptions.cpp - the options of a graphc compile ---------------===//

#include "compiler/Pipeline/CompileOptions.h"

#include "compiler/Transforms/GradCompression.h"
#include "contract/cpu_levels.h"

#include "mlir/Pass/PassRegistry.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>
#include <cstdlib>
#include <vector>

namespace graphc {

llvm::cl::OptionCategory &codegenCategory() {
  static llvm::cl::OptionCategory category("Code generation (compile)");
  return category;
}
llvm::cl::OptionCategory &distributedCategory() {
  static llvm::cl::OptionCategory category("Data-parallel training (compile)");
  return category;
}
llvm::cl::OptionCategory &precisionCategory() {
  static llvm::cl::OptionCategory category("Mixed precision (compile)");
  return category;
}
llvm::cl::OptionCategory &trainingCategory() {
  static llvm::cl::OptionCategory category("Training step (compile)");
  return category;
}

InputNormalization parseInputNormalize(llvm::StringRef text, std::string *error) {
  InputNormalization options;
  auto fail = [&](const std::string &why) {
    if (error)
      *error = "--input-normalize " + why;
    return InputNormalization{};
  };
  if (text.empty() || text == "none")
    return options;
  if (text == "imagenet") {
    options.mean = {0.485, 0.456, 0.406};
    options.std = {0.229, 0.224, 0.225};
    return options;
  }
  llvm::SmallVector<llvm::StringRef> parts;
  text.split(parts, ',');
  std::vector<double> values;
  for (llvm::StringRef part : parts) {
    double v = 0;
    if (part.trim().getAsDouble(v) || !std::isfinite(v))
      return fail("takes none, imagenet or MEAN,STD numbers; '" + part.str() +
                  "' is not a finite number");
    values.push_back(v);
  }
  if (values.size() % 2 != 0)
    return fail("takes as many means as standard deviations (MEAN,STD or "
                "MEAN1,...,MEANC,STD1,...,STDC), got " +
                std::to_string(values.size()) + " numbers");
  const size_t half = values.size() / 2;
  options.mean.assign(values.begin(), values.begin() + half);
  options.std.assign(values.begin() + half, values.end());
  for (size_t i = 0; i < half; ++i)
    if (!(options.std[i] > 0))
      return fail("needs positive standard deviations, got '" + parts[half + i].trim().str() +
                  "'");
  return options;
}

void CompileOptions::exposeOn(llvm::cl::SubCommand &compile, llvm::cl::SubCommand &info) {
  // Each option is registered with this struct's own sub-command (where the
  // pipeline's option strings are parsed); registering it again with
  // `compile` makes graphc's command line write the same storage.
  std::vector<llvm::cl::Option *> options;
  for (auto &entry : llvm::cl::SubCommand::OptionsMap)
    options.push_back(entry.getValue());
  for (llvm::cl::Option *option : options) {
    option->removeArgument();
    option->addSubCommand(compile);
    if (option == &batchSize)
      option->addSubCommand(info);
    option->addArgument();
  }
}

std::string CompileOptions::validate() const {
  if (batchSize < 1 || batchSize > kMaxBatchSize)
    return ("--batch-size must be in [1, " + llvm::Twine(kMaxBatchSize) + "], got " +
            llvm::Twine(int64_t(batchSize)))
        .str();
  if (gradAccumulation < 1 || gradAccumulation > kMaxGradAccumulation)
    return ("--grad-accumulation must be in [1, " + llvm::Twine(kMaxGradAccumulation) +
            "], got " + llvm::Twine(int64_t(gradAccumulation)))
        .str();
  if (batchSize * gradAccumulation > kMaxBatchSize)
    return ("--batch-size " + llvm::Twine(int64_t(batchSize)) + " x --grad-accumulation " +
            llvm::Twine(int64_t(gradAccumulation)) + " is over the largest step batch, " +
            llvm::Twine(kMaxBatchSize))
        .str();
  if (!(emaDecay >= 0.0 && emaDecay < 1.0))
    return llvm::formatv("--ema-decay must be in [0, 1) (0: no average), got {0}",
                         double(emaDecay))
        .str();
  if (!(bucketMb > 0.0) || bucketMb > 1024.0 * 1024.0)
    return llvm::formatv("--bucket-mb must be in (0, 1048576], got {0}", double(bucketMb)).str();
  if (allreduceDtype != "fp32" && allreduceDtype != "fp16")
    return "--allreduce-dtype must be fp32 or fp16, got '" + allreduceDtype + "'";
  {
    std::string error;
    GradCompression compression = parseGradCompression(gradCompression, error);
    if (!error.empty())
      return "--grad-compression: " + error;
    // fp32 on the wire is what PowerSGD's factors use; fp16 is the fp16 wire.
    const bool conflict =
        given(allreduceDtype) &&
        ((compression.kind == GradCompression::Kind::Fp16 && allreduceDtype != "fp16") ||
         ((compression.kind == GradCompression::Kind::PowerSgd ||
           compression.kind == GradCompression::Kind::TopK) &&
          allreduceDtype != "fp32"));
    if (conflict)
      return "--grad-compression=" + gradCompression + " and --allreduce-dtype=" +
             allreduceDtype + " both say how gradients travel; give one";
    if (compression.kind == GradCompression::Kind::PowerSgd && amp == "fp16")
      return "--grad-compression=powersgd does not combine with --amp fp16 (its loss "
             "scaling would leave an overflowed step's infinities in the error feedback); "
             "use --amp bf16 or fp32";
    if (compression.kind == GradCompression::Kind::TopK && amp == "fp16")
      return "--grad-compression=topk does not combine with --amp fp16 (its loss scaling "
             "would leave an overflowed step's infinities in the accumulated gradient); use "
             "--amp bf16 or fp32";
    if (compression.kind == GradCompression::Kind::TopK && optimizer != "sgd" &&
        optimizer != "momentum")
      return "--grad-compression=topk applies momentum before the allreduce (momentum "
             "correction), as --optimizer=momentum (or sgd) does; it does not combine with "
             "--optimizer=" +
             optimizer;
    if (compression.kind == GradCompression::Kind::TopK && clipGradNorm != 0.0)
      return "--clip-grad-norm does not combine with --grad-compression=topk (the update "
             "it sends is the selected momentum, not the gradient)";
  }
  if (noDataParallel)
    for (const llvm::cl::Option *option :
         {static_cast<const llvm::cl::Option *>(&bucketMb),
          static_cast<const llvm::cl::Option *>(&allreduceDtype),
          static_cast<const llvm::cl::Option *>(&gradCompression),
          static_cast<const llvm::cl::Option *>(&syncBn),
          static_cast<const llvm::cl::Option *>(&noAllreduceOverlap)})
      if (given(*option))
        return ("--" + option->ArgStr + " does not apply to --no-data-parallel").str();
  if (given(layout) && layout != "nchw" && layout != "nhwc")
    return "--layout must be nchw or nhwc, got '" + layout + "'";
  if (remat != "all" && remat != "fused" && remat != "off")
    return "--remat must be all, fused or off, got '" + remat + "'";
  if (target != "cpu" && target != "cuda" && target != "all")
    return "--target must be cpu, cuda or all, got '" + target + "'";
  {
    // One level, or several comma-separated: a kernel library each.
    llvm::SmallVector<llvm::StringRef> levels;
    llvm::StringRef(kernelCpu).split(levels, ',');
    for (auto [index, level] : llvm::enumerate(levels)) {
      if (X86LevelIndex(level) < 0)
        return ("--kernel-cpu takes x86-64, x86-64-v2, x86-64-v3 or x86-64-v4 (or several, "
                "comma-separated), got '" +
                level + "'" + (levels.size() > 1 ? " in '" + kernelCpu + "'" : ""))
            .str();
      if (llvm::is_contained(llvm::ArrayRef(levels).take_front(index), level))
        return ("--kernel-cpu names '" + level + "' twice").str();
    }
  }
  if (given(dumpKernels) && dumpKernels.empty())
    return "--dump-kernels is empty";
  if (!dumpKernels.empty() && !llvm::sys::fs::is_directory(dumpKernels))
    return "--dump-kernels: '" + dumpKernels + "' is not a directory";

  if (given(inputNormalize)) {
    std::string error;
    parseInputNormalize(inputNormalize, &error);
    if (!error.empty())
      return error;
  }

  // An inference-only plan trains nothing.
  if (forward)
    for (const llvm::cl::Option *option :
         {static_cast<const llvm::cl::Option *>(&amp),
          static_cast<const llvm::cl::Option *>(&optimizer),
          static_cast<const llvm::cl::Option *>(&lr),
          static_cast<const llvm::cl::Option *>(&remat),
          static_cast<const llvm::cl::Option *>(&syncBn),
          static_cast<const llvm::cl::Option *>(&bucketMb),
          static_cast<const llvm::cl::Option *>(&allreduceDtype),
          static_cast<const llvm::cl::Option *>(&gradCompression),
          static_cast<const llvm::cl::Option *>(&noAllreduceOverlap),
          static_cast<const llvm::cl::Option *>(&noDataParallel),
          static_cast<const llvm::cl::Option *>(&gradAccumulation),
          static_cast<const llvm::cl::Option *>(&emaDecay)})
      if (given(*option))
        return ("--" + option->ArgStr + " does not apply to --forward (nothing trains)").str();

  // Mixed precision: the combinations graphc-mixed-precision cannot see.
  if (given(amp) && amp != "fp16" && amp != "bf16")
    return "--amp must be fp16 or bf16, got '" + amp + "'";
  for (const llvm::cl::Option *option :
       {static_cast<const llvm::cl::Option *>(&lossScale),
        static_cast<const llvm::cl::Option *>(&initialLossScale),
        static_cast<const llvm::cl::Option *>(&lossScaleWindow)})
    if (given(*option) && amp != "fp16")
      return ("--" + option->ArgStr + " applies to --amp=fp16 only" +
              (amp == "bf16" ? " (bf16 needs no loss scaling)" : ""))
          .str();
  // Below x86-64-v3 there is no F16C: LLVM would convert halves with
  // compiler-rt calls, which a plan's kernel library may not import.
  if (amp == "fp16" && target != "cuda")
    for (llvm::StringRef level : llvm::split(llvm::StringRef(kernelCpu), ','))
      if (level == "x86-64" || level == "x86-64-v2")
        return ("--amp=fp16 needs --kernel-cpu=x86-64-v3 or x86-64-v4 (F16C converts halves), "
                "got '" +
                level + "'")
            .str();
  if (given(lossScale) && lossScale != "dynamic" &&
      (given(initialLossScale) || given(lossScaleWindow)))
    return "--initial-loss-scale and --loss-scale-window apply to --loss-scale=dynamic";
  return "";
}

PipelineOptions CompileOptions::resolve(std::string *lrChoice) const {
  PipelineOptions options;
  options.batchSize = batchSize;
  options.microBatches = gradAccumulation;
  options.stopAfter = compileTo;
  OptimizerOptions &opt = options.optimizer;
  opt.optimizer = optimizer;
  // Unless --lr is given: Goyal et al.'s linear scaling rule (0.1 at batch
  // 256) for the SGD family, so a small batch does not start with a step
  // sized for 256 images (ResNet-50 at batch 8 diverged in three steps at
  // 0.1), and PyTorch's default for Adam, whose steps do not scale with the
  // batch.
  std::string choice = "--lr";
  opt.lr = lr;
  if (!given(lr)) {
    if (optimizer == "adam" || optimizer == "adamw") {
      opt.lr = 0.001;
      choice = "Adam's default";
    } else {
      // The batch each update averages over: every micro-batch's.
      const int64_t batch = options.batchSize * options.microBatches;
      opt.lr = 0.1 * static_cast<double>(batch) / 256.0;
      choice = llvm::formatv("0.1 x batch {0} / 256, the linear scaling rule; --lr sets it",
                             batch)
                   .str();
    }
  }
  if (lrChoice)
    *lrChoice = choice;
  opt.momentum = momentum;
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
  opt.clipGradNorm = clipGradNorm;
  opt.emaDecay = emaDecay;
  options.fuse = !noFuse;
  options.forward = forward;
  options.remat = remat != "off";
  options.rematerialize.libraryInputs = remat == "all";
  // Channels-last where its kernels are the fast ones: oneDNN's on the CPU,
  // cuDNN's tensor-core kernels for half precision on CUDA (which take OHWI
  // filters; the CPU reads those as well). FP32 on CUDA stays NCHW: on an
  // H200 NHWC ran ResNet-50 at 0.37x of NCHW.
  options.layout = given(layout)                         ? layout.getValue()
                   : target == "cpu" || !amp.empty() ? "nhwc"
                                                         : "nchw";
  options.filters = options.layout == "nhwc" && target != "cpu" ? "ohwi" : "oihw";
  options.dataParallel = !noDataParallel;
  options.syncBn = syncBn;
  options.distributed.bucketMb = bucketMb;
  {
    // fp16 is the fp16 wire, so the plan is the one --allreduce-dtype=fp16
    // gives; PowerSGD is the data-parallel pass's to build.
    std::string error;
    GradCompression compression = parseGradCompression(gradCompression, error);
    options.distributed.allreduceDtype =
        compression.kind == GradCompression::Kind::Fp16 ? std::string("fp16")
                                                        : allreduceDtype.getValue();
    if (compression.kind == GradCompression::Kind::PowerSgd ||
        compression.kind == GradCompression::Kind::TopK)
      options.distributed.gradCompression = gradCompression;
    options.distributed.momentum = optimizer == "sgd" ? 0.0 : double(momentum);
    options.distributed.weightDecay = weightDecay;
  }
  options.distributed.overlap = !noAllreduceOverlap;
  if (!amp.empty()) {
    MixedPrecisionOptions &mixed = options.mixedPrecision;
    mixed.precision = amp;
    mixed.lossScale = lossScale;
    mixed.initialScale = initialLossScale;
    mixed.window = lossScaleWindow;
  }
  InputNormalization normalization = parseInputNormalize(inputNormalize, nullptr);
  options.normalizeMean = normalization.mean;
  options.normalizeStd = normalization.std;
  options.codegen.cpu = kernelCpu;
  options.codegen.targets = target;
  if (const char *cudaHome = std::getenv("CUDA_HOME"))
    options.codegen.cudaPath = cudaHome;
  options.codegen.dumpDir = dumpKernels;
  return options;
}

void registerCompilePipeline() {
  mlir::registerPassPipeline(
      "graphc-compile",
      "What graphc compile runs: the whole training step, through every phase up to "
      "compile-to, with graphc compile's options",
      [](mlir::OpPassManager &pm, llvm::StringRef text,
         llvm::function_ref<mlir::LogicalResult(const llvm::Twine &)> errorHandler) {
        CompileOptions options;
        if (mlir::failed(options.parseFromString(text)))
          return mlir::failure();
        if (std::string error = options.validate(); !error.empty())
          return errorHandler("graphc-compile: " + error);
        buildCompilePipeline(pm, options.resolve());
        return mlir::success();
      },
      [](llvm::function_ref<void(const mlir::detail::PassOptions &)> handler) {
        handler(CompileOptions());
      });
}

} // namespace graphc
