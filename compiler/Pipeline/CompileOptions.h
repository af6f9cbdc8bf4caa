//===- CompileOptions.h - the options of a graphc compile ------*- C++ -*-===//
//
// Every option of `graphc compile` that shapes the training step, defined
// once: its name, default and description here, the rules between options in
// validate(), and the defaults that depend on other options (layout by target
// and precision, the learning rate by batch size) in resolve(). The same
// struct is
//  - graphc's `compile` (and, for --batch-size, `info`) command line
//    (exposeOn), so `graphc compile --help` lists these descriptions;
//  - the `graphc-compile` pass pipeline of graphc-opt (registerCompilePipeline),
//    e.g. --pass-pipeline='builtin.module(graphc-compile{batch-size=8
//    compile-to=autodiff amp=fp16})', which runs what graphc compile runs.
// What only the driver does (the output file, signing, reports) stays in the
// driver.
//
//===----------------------------------------------------------------------===//

#ifndef GRAPHC_COMPILER_PIPELINE_COMPILEOPTIONS_H
#define GRAPHC_COMPILER_PIPELINE_COMPILEOPTIONS_H

#include "compiler/Pipeline/Pipeline.h"
#include "mlir/Pass/PassOptions.h"
#include "llvm/Support/CommandLine.h"

#include <string>
#include <vector>

namespace graphc {

/// The help groups of the options below.
llvm::cl::OptionCategory &codegenCategory();
llvm::cl::OptionCategory &distributedCategory();
llvm::cl::OptionCategory &precisionCategory();
llvm::cl::OptionCategory &trainingCategory();

/// The largest --batch-size: it keeps every per-batch count (FLOPs, bytes)
/// far inside int64.
constexpr int64_t kMaxBatchSize = int64_t(1) << 20;

/// The most micro-batches --grad-accumulation takes: each is a copy of the
/// forward and backward in the step.
constexpr int64_t kMaxGradAccumulation = 1024;

struct CompileOptions : public mlir::PassPipelineOptions<CompileOptions> {
  Option<int64_t> batchSize{*this, "batch-size",
                            llvm::cl::desc("Batch size to infer every shape with "
                                           "(info: default 1; compile: default 32)"),
                            llvm::cl::init(32)};
  Option<Phase> compileTo{
      *this, "compile-to", llvm::cl::desc("Stop after this phase and print the IR"),
      llvm::cl::values(
          clEnumValN(Phase::Verify, "verify", "model contract checked, batch size set"),
          clEnumValN(Phase::MixedPrecision, "mixed-precision",
                     "@train_step with gradients, in mixed precision with --amp, "
                     "before the optimizer"),
          clEnumValN(Phase::DataParallel, "data-parallel",
                     "gradients averaged across ranks in bucketed allreduces, "
                     "before the optimizer"),
          clEnumValN(Phase::Autodiff, "autodiff",
                     "@train_step with gradients and optimizer, @eval_step"),
          clEnumValN(Phase::Lower, "lower",
                     "plan buffers and commands, memory planned, kernels as MLIR"),
          clEnumValN(Phase::Plan, "plan",
                     "compiled kernels, contract checked (default; -o writes the plan)")),
      llvm::cl::init(kLastPhase)};

  // Code generation.
  Option<std::string> target{
      *this, "target",
      llvm::cl::desc("Devices to generate kernels for: cpu (x86-64), cuda (PTX for sm_80 and "
                     "sm_90; libdevice from $CUDA_HOME, default /usr/local/cuda) or all"),
      llvm::cl::init("cpu"), llvm::cl::cat(codegenCategory())};
  Option<std::string> kernelCpu{
      *this, "kernel-cpu",
      llvm::cl::desc("x86-64 level the CPU kernels target (x86-64, x86-64-v2, x86-64-v3, "
                     "x86-64-v4), or several comma-separated (x86-64-v3,x86-64-v4): a kernel "
                     "library each, of which graphrun loads the highest its CPU runs"),
      llvm::cl::init("x86-64-v3"), llvm::cl::cat(codegenCategory())};
  Option<std::string> dumpKernels{
      *this, "dump-kernels",
      llvm::cl::desc("Also write the kernel binaries into this directory (e.g. to "
                     "disassemble them), and the CPU kernels' optimized LLVM IR "
                     "(cpu_x86_64.ll)"),
      llvm::cl::cat(codegenCategory())};
  Option<bool> forward{
      *this, "forward",
      llvm::cl::desc("An inference-only plan: one program, infer (the model's forward with "
                     "batch norm on its running statistics and dropout off, returning the "
                     "logits; or an inference model's @infer), run by graphrun infer; no "
                     "training step")};
  Option<bool> noFuse{*this, "no-fuse",
                      llvm::cl::desc("Do not fuse elementwise ops: one kernel per op (the "
                                     "unfused baseline; numerically the same)"),
                      llvm::cl::cat(codegenCategory())};
  Option<std::string> remat{
      *this, "remat",
      llvm::cl::desc("What backward recomputes instead of forward keeping it: all (every "
                     "cheap elementwise value, those convolutions read included: least "
                     "memory), fused (only values the backward kernels that read them can "
                     "recompute: no extra memory traffic) or off (keep everything backward "
                     "reads; numerically the same)"),
      llvm::cl::value_desc("all|fused|off"), llvm::cl::init("all"),
      llvm::cl::cat(codegenCategory())};
  Option<std::string> layout{
      *this, "layout",
      llvm::cl::desc("Activation layout through convolutions, pooling and batch norm: nhwc "
                     "(channels last: a transpose where the images enter and before a "
                     "flatten; the default for --target=cpu, where oneDNN's NHWC kernels "
                     "are faster, and with --amp, where cuDNN's tensor cores want it; with "
                     "a CUDA target the filters go OHWI too) or nchw (as written; the "
                     "default for fp32 with a CUDA target, where NHWC measured slower)"),
      llvm::cl::value_desc("nhwc|nchw"), llvm::cl::cat(codegenCategory())};

  // Data-parallel training.
  Option<bool> noDataParallel{
      *this, "no-data-parallel",
      llvm::cl::desc("Leave out the gradient allreduces: the plan trains on one rank only "
                     "(by default a plan averages gradients across however many ranks run "
                     "it; on one rank the allreduces are skipped)"),
      llvm::cl::cat(distributedCategory())};
  Option<bool> syncBn{
      *this, "sync-bn",
      llvm::cl::desc("Batch norm over the global batch of all ranks (PyTorch's "
                     "SyncBatchNorm): statistics averaged across ranks in forward and "
                     "backward, the same on every rank (default: each rank's own batch, as "
                     "PyTorch DDP)"),
      llvm::cl::cat(distributedCategory())};
  Option<bool> noAllreduceOverlap{
      *this, "no-allreduce-overlap",
      llvm::cl::desc("Start every gradient allreduce only after backward (to measure what "
                     "overlap gains; by default each bucket starts as backward completes "
                     "it)"),
      llvm::cl::cat(distributedCategory())};
  Option<double> bucketMb{*this, "bucket-mb",
                          llvm::cl::desc("Most MiB of gradients per allreduce bucket (the "
                                         "first bucket holds at most 1 MiB, so it starts "
                                         "early)"),
                          llvm::cl::init(25.0), llvm::cl::cat(distributedCategory())};
  Option<std::string> allreduceDtype{
      *this, "allreduce-dtype",
      llvm::cl::desc("Wire type of fp32 gradients: fp32 (default) or fp16 (compressed: half "
                     "the bytes, each rank's share rounded to fp16)"),
      llvm::cl::value_desc("fp32|fp16"), llvm::cl::init("fp32"),
      llvm::cl::cat(distributedCategory())};
  Option<std::string> gradCompression{
      *this, "grad-compression",
      llvm::cl::desc("How gradients travel between ranks: none (default), fp16 (the same as "
                     "--allreduce-dtype=fp16), powersgd:RANK (PowerSGD: each large "
                     "gradient matrix as two rank-RANK factors, with error feedback and a "
                     "warm-started Q kept as state; RANK 1 to 64) or "
                     "topk:RATIO[:WARMUP_STEPS] (deep gradient compression: the RATIO "
                     "share of each large gradient's accumulated entries, largest first, "
                     "with momentum correction and masking; the share falls from 25% over "
                     "WARMUP_STEPS; SGD or momentum only)"),
      llvm::cl::value_desc("none|fp16|powersgd:RANK|topk:RATIO[:WARMUP_STEPS]"),
      llvm::cl::init("none"),
      llvm::cl::cat(distributedCategory())};

  // The images' form.
  Option<std::string> inputNormalize{
      *this, "input-normalize",
      llvm::cl::desc("Take the images as 8-bit pixels (0 to 255) and normalize them in the "
                     "step's first kernel, (x / 255 - mean) / std: imagenet (mean 0.485, "
                     "0.456, 0.406, std 0.229, 0.224, 0.225), MEAN,STD for all channels, or "
                     "MEAN1,...,MEANC,STD1,...,STDC per channel (default none: float "
                     "images, normalized by whoever feeds them)"),
      llvm::cl::value_desc("none|imagenet|MEAN,STD"), llvm::cl::cat(trainingCategory())};

  // Mixed precision.
  Option<std::string> amp{
      *this, "amp",
      llvm::cl::desc("Mixed precision: fp16 (with loss scaling) or bf16; convolutions and "
                     "matmuls in half with fp32 accumulation, activations stored in half, "
                     "fp32 master weights, batch-norm statistics, loss and optimizer "
                     "(default: fp32 throughout)"),
      llvm::cl::value_desc("fp16|bf16"), llvm::cl::cat(precisionCategory())};
  Option<std::string> lossScale{
      *this, "loss-scale",
      llvm::cl::desc("fp16's loss scaling: dynamic (default: x2 after --loss-scale-window "
                     "finite steps, x0.5 on overflow, never below 1) or a number (a static "
                     "scale)"),
      llvm::cl::value_desc("dynamic|N"), llvm::cl::cat(precisionCategory())};
  Option<double> initialLossScale{*this, "initial-loss-scale",
                                  llvm::cl::desc("Dynamic loss scaling's first scale"),
                                  llvm::cl::init(65536.0), llvm::cl::cat(precisionCategory())};
  Option<int64_t> lossScaleWindow{
      *this, "loss-scale-window",
      llvm::cl::desc("Finite steps in a row after which dynamic loss scaling doubles the "
                     "scale"),
      llvm::cl::init(2000), llvm::cl::cat(precisionCategory())};

  // The training step.
  Option<std::string> optimizer{*this, "optimizer",
                                llvm::cl::desc("sgd, momentum, nesterov, lars, adam or adamw"),
                                llvm::cl::init("momentum"), llvm::cl::cat(trainingCategory())};
  Option<double> lr{*this, "lr",
                    llvm::cl::desc("Base learning rate (default: 0.1 x batch / 256, the "
                                   "linear scaling rule, for SGD, momentum, Nesterov and "
                                   "LARS; 0.001 for Adam and AdamW)"),
                    llvm::cl::init(0.1), llvm::cl::cat(trainingCategory())};
  Option<double> momentum{*this, "momentum", llvm::cl::desc("Momentum"), llvm::cl::init(0.9),
                          llvm::cl::cat(trainingCategory())};
  Option<double> weightDecay{*this, "weight-decay",
                             llvm::cl::desc("Weight decay (L2; decoupled for adamw)"),
                             llvm::cl::init(1e-4), llvm::cl::cat(trainingCategory())};
  Option<bool> excludeBnBias{*this, "exclude-bn-bias",
                             llvm::cl::desc("No weight decay or LARS scaling for batch-norm "
                                            "and bias parameters (default true)"),
                             llvm::cl::init(true), llvm::cl::cat(trainingCategory())};
  Option<double> larsEta{*this, "lars-eta", llvm::cl::desc("LARS trust coefficient"),
                         llvm::cl::init(0.001), llvm::cl::cat(trainingCategory())};
  Option<double> adamBeta1{*this, "adam-beta1", llvm::cl::desc("Adam's first-moment decay"),
                           llvm::cl::init(0.9), llvm::cl::cat(trainingCategory())};
  Option<double> adamBeta2{*this, "adam-beta2", llvm::cl::desc("Adam's second-moment decay"),
                           llvm::cl::init(0.999), llvm::cl::cat(trainingCategory())};
  Option<double> adamEps{*this, "adam-eps", llvm::cl::desc("Adam's denominator term"),
                         llvm::cl::init(1e-8), llvm::cl::cat(trainingCategory())};
  Option<std::string> lrDecay{*this, "lr-decay",
                              llvm::cl::desc("After warmup: constant, cosine or step"),
                              llvm::cl::init("constant"), llvm::cl::cat(trainingCategory())};
  Option<int64_t> warmupSteps{*this, "warmup-steps", llvm::cl::desc("Steps of linear warmup"),
                              llvm::cl::init(0), llvm::cl::cat(trainingCategory())};
  Option<int64_t> totalSteps{*this, "total-steps",
                             llvm::cl::desc("Length of the cosine schedule"), llvm::cl::init(0),
                             llvm::cl::cat(trainingCategory())};
  Option<double> finalLr{*this, "final-lr",
                         llvm::cl::desc("Learning rate at the cosine's end"),
                         llvm::cl::init(0.0), llvm::cl::cat(trainingCategory())};
  Option<int64_t> decayStepSize{*this, "decay-step-size",
                                llvm::cl::desc("Steps between step decays"), llvm::cl::init(1),
                                llvm::cl::cat(trainingCategory())};
  Option<double> decayGamma{*this, "decay-gamma", llvm::cl::desc("Factor of each step decay"),
                            llvm::cl::init(0.1), llvm::cl::cat(trainingCategory())};
  Option<double> emaDecay{
      *this, "ema-decay",
      llvm::cl::desc("Keep an exponential moving average of the weights and batch-norm "
                     "statistics, moved after every step: ema += (1 - X) (w - ema), the "
                     "first step copying w (PyTorch's AveragedModel with "
                     "get_ema_multi_avg_fn(X), use_buffers=True); graphrun --eval "
                     "evaluates it too; 0: none (default)"),
      llvm::cl::init(0.0), llvm::cl::cat(trainingCategory())};
  Option<int64_t> gradAccumulation{
      *this, "grad-accumulation",
      llvm::cl::desc("Sum the gradients of N micro-batches of --batch-size images in each "
                     "step before the update (gradient accumulation): the step trains on N x "
                     "--batch-size images in the memory of one micro-batch (default 1)"),
      llvm::cl::init(1), llvm::cl::cat(trainingCategory())};
  Option<double> clipGradNorm{
      *this, "clip-grad-norm",
      llvm::cl::desc("Scale every gradient by min(1, X / (norm + 1e-6)), norm being the L2 "
                     "norm of all gradients together, before the update (PyTorch's "
                     "clip_grad_norm_, after loss scaling's unscale and the allreduce); "
                     "0: no clipping (default)"),
      llvm::cl::init(0.0), llvm::cl::cat(trainingCategory())};

  /// Whether the user gave `option` (on graphc's command line or in the
  /// pipeline's option string), as opposed to its default.
  static bool given(const llvm::cl::Option &option) { return option.getNumOccurrences() > 0; }

  /// Registers every option above on `compile` as well (so graphc's own
  /// command line parses into this struct), and --batch-size on `info` too.
  void exposeOn(llvm::cl::SubCommand &compile, llvm::cl::SubCommand &info);

  /// The rules between options, checked before any work: "" when they hold,
  /// else one line naming the option at fault ("--remat must be all, fused or
  /// off, got 'some'").
  std::string validate() const;

  /// The pipeline these options ask for, with the defaults that depend on
  /// other options filled in; `lrChoice` (if given) says where the learning
  /// rate came from.
  PipelineOptions resolve(std::string *lrChoice = nullptr) const;
};

/// Registers the `graphc-compile` pass pipeline (graphc-opt): the passes
/// graphc compile runs for these options, after validate().
void registerCompilePipeline();

/// --input-normalize's value as graphc-input-normalize's options: empty for
/// none; an error message in `error` (when given) for a malformed value.
struct InputNormalization {
  std::vector<double> mean, std;
};
InputNormalization parseInputNormalize(llvm::StringRef text, std::string *error);

} // namespace graphc

#endif // GRAPHC_COMPILER_PIPELINE_COMPILEOPTIONS_H
