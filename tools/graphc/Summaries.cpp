//===- Summaries.cpp - what graphc prints about a model and a plan --------===//

#include "Summaries.h"

#include "compiler/Export/PlanExport.h"
#include "compiler/Lowering/Passes.h"
#include "compiler/Transforms/BuildUtils.h"
#include "compiler/Transforms/GradCompression.h"
#include "dialects/plan/IR/PlanDialect.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

namespace graphc {
namespace {

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

/// "97.8 MiB", "43.1 KiB", "128 B".
std::string mebibytes(int64_t bytes) {
  if (bytes >= (int64_t(1) << 20))
    return llvm::formatv("{0:f1} MiB", bytes / (1024.0 * 1024.0)).str();
  if (bytes >= 1024)
    return llvm::formatv("{0:f1} KiB", bytes / 1024.0).str();
  return llvm::formatv("{0} B", bytes).str();
}

/// What graphc-data-parallel did: how many bytes travel per step, in how many
/// buckets, or that the plan trains on one rank only.
void printAllreduceSummary(ModuleOp module, const PipelineOptions &options) {
  const bool fp16Wire = options.distributed.allreduceDtype == "fp16";
  const bool overlap = options.distributed.overlap;
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
  if (options.syncBn)
    os << "; batch norm synchronized across ranks";
  os << "\n";
  // rank, gradients as factors, gradients, wire bytes without and with.
  if (auto powerSgd = module->getAttrOfType<DenseI64ArrayAttr>(graphc::kGradCompressionAttr);
      powerSgd && powerSgd.size() == 5) {
    ArrayRef<int64_t> s = powerSgd.asArrayRef();
    os << "grad-compression: powersgd rank " << s[0] << ": " << s[1] << " of " << s[2]
       << " gradients sent as rank-" << s[0] << " factors (error feedback, warm-started Q); "
       << mebibytes(s[3]) << " -> " << mebibytes(s[4]) << " on the wire per step ("
       << llvm::formatv("{0:f1}", s[4] > 0 ? double(s[3]) / double(s[4]) : 0.0)
       << "x less)\n";
  }
  // gradients sparsified, gradients, wire bytes without and with.
  if (auto topk = module->getAttrOfType<DenseI64ArrayAttr>(graphc::kTopkCompressionAttr);
      topk && topk.size() == 4) {
    ArrayRef<int64_t> s = topk.asArrayRef();
    os << "grad-compression: " << options.distributed.gradCompression << ": " << s[0] << " of "
       << s[1] << " gradients sent as sparse sets ("
       << (options.distributed.momentum > 0
               ? "momentum correction, local accumulation, momentum factor masking"
               : "local accumulation")
       << "); " << mebibytes(s[2]) << " -> " << mebibytes(s[3])
       << " sent per rank per step"
       << (llvm::StringRef(options.distributed.gradCompression).count(':') == 2
               ? " after the warm-up"
               : "")
       << " (" << llvm::formatv("{0:f1}", s[3] > 0 ? double(s[2]) / double(s[3]) : 0.0)
       << "x less)\n";
  }
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

} // namespace

void printInfo(const ModelStats &stats, llvm::StringRef path) {
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

void printLayers(const ModelStats &stats) {
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
    // With micro-batches, forward and backward alternate: the loss is the
    // first micro-batch's.
    const bool microBatches = module->hasAttr(graphc::kMicroBatchesAttr);
    os << llvm::formatv("  {0}: arena {1}; live peak {2} at command {3} of {4}", program.getSymName(),
                        mebibytes(arena), mebibytes(peak), at, profile[graphc::kCommands]);
    if (loss >= 0 && program.getSymName() == "train_step" && !microBatches)
      os << (at <= loss ? " (forward)" : " (backward)");
    if (peak > 0)
      os << llvm::formatv(", placement {0:f1}% over it", 100.0 * (arena - peak) / peak);
    os << "\n";
    if (loss >= 0 && program.getSymName() == "train_step")
      os << llvm::formatv("    kept from forward for backward (live across the {0}loss, command "
                          "{1}): {2} in {3} tensors\n",
                          microBatches ? "first micro-batch's " : "", loss,
                          mebibytes(profile[graphc::kKeptBytes]),
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

/// What the plan trains with: learning rate, precision and loss scaling, and
/// what the memory-saving passes did.
void printTrainingSummary(ModuleOp module, const CompileOptions &options,
                          const PipelineOptions &pipeline, llvm::StringRef lrChoice) {
  llvm::raw_ostream &os = llvm::outs();
  const std::string precision = options.amp.empty() ? "fp32" : options.amp.getValue();
  if (pipeline.microBatches > 1)
    os << "gradient accumulation: each step sums the gradients of " << pipeline.microBatches
       << " micro-batches of " << pipeline.batchSize << " (a step trains on "
       << pipeline.microBatches * pipeline.batchSize
       << " images; activations are kept for one micro-batch at a time)\n";
  os << "learning rate: " << llvm::format("%g", pipeline.optimizer.lr) << " (" << lrChoice
     << ")\n";
  if (pipeline.optimizer.emaDecay > 0.0) {
    int64_t averaged = 0;
    for (auto state : module.getOps<graphc::plan::StateOp>())
      if (state.getBuffer().starts_with(graphc::kEmaPrefix))
        ++averaged;
    os << "weight average: " << averaged << " tensors (parameters and batch-norm statistics) "
       << "averaged after every step, decay " << llvm::format("%.12g", pipeline.optimizer.emaDecay)
       << "; graphrun --eval evaluates it too (eval_ema_step)\n";
  }
  os << "precision: " << precision;
  if (options.amp == "fp16") {
    if (options.lossScale.empty() || options.lossScale == "dynamic")
      os << llvm::format(", dynamic loss scaling (initial %g, x2 after %lld finite steps, x0.5 "
                         "on overflow)",
                         double(options.initialLossScale),
                         static_cast<long long>(options.lossScaleWindow));
    else
      os << ", static loss scale " << options.lossScale;
  } else if (options.amp == "bf16") {
    os << " (no loss scaling: bf16 has fp32's range)";
  }
  os << "\n";
  // What storing activations in half saves (each would be twice the bytes),
  // summed like "sum of tensor sizes": without reuse.
  if (auto storage = module->getAttrOfType<DictionaryAttr>(graphc::kHalfStorageAttr))
    if (auto train = storage.getAs<DenseI64ArrayAttr>("train_step"); train && train.size() == 2)
      os << "half storage: train_step stores " << train[0] << " activations in " << precision
         << ", " << mebibytes(train[1]) << " summed without reuse (fp32: "
         << mebibytes(2 * train[1]) << ")\n";
  printAllreduceSummary(module, pipeline);
  if (auto sums = module->getAttrOfType<IntegerAttr>(graphc::kSimplifiedReductionsAttr);
      sums && sums.getInt() > 0)
    os << "reductions: " << sums.getInt() << " sum" << (sums.getInt() == 1 ? "" : "s")
       << " in backward taken from sums already computed, without a pass over memory (batch "
          "norm's mean gradients: deviations from a mean sum to zero)\n";
  if (auto placed = module->getAttrOfType<IntegerAttr>(graphc::kPlacedConcatsAttr))
    os << "concats: " << placed.getInt() << " made by computing their operands where the concat "
       << "puts them, without a copy\n";
  printRematerializeSummary(module, pipeline.remat);
}

} // namespace graphc
