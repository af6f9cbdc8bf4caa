//===- onnx_import_fuzzer.cc - graphc import under libFuzzer ---------------===//
//
// An ONNX file is user input: whatever the bytes, graphc import gives a
// verified module or a one-line error, never a crash, a hang or both. Each
// input is written to a file (the importer reads paths, with its size
// limits) and imported into a fresh context, weights included, both as a
// classifier to train and as an inference model (--forward).
//
//===----------------------------------------------------------------------===//

#include "compiler/Import/OnnxImport.h"

#include "mlir/IR/MLIRContext.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const std::string path =
      "/tmp/graphc-onnx-fuzz-" + std::to_string(getpid()) + ".onnx";
  // The file goes when the fuzzer exits (a crash leaves it, beside the
  // artifact libFuzzer writes).
  static const bool removedAtExit = [] {
    return std::atexit([] { std::remove(path.c_str()); }) == 0;
  }();
  (void)removedAtExit;
  FILE *f = std::fopen(path.c_str(), "wb");
  if (!f || std::fwrite(data, 1, size, f) != size || std::fclose(f) != 0)
    std::abort();
  // Both kinds of import: a classifier to train, and an inference model.
  for (bool forward : {false, true}) {
    mlir::MLIRContext context(mlir::MLIRContext::Threading::DISABLED);
    std::string error;
    std::vector<graphc::ImportedWeight> weights;
    graphc::OnnxImportOptions options;
    options.forward = forward;
    // A graph that needs the batch size is imported again at 2 (what
    // graphc compile MODEL.onnx --batch-size 2 does).
    options.fallbackBatch = 2;
    mlir::OwningOpRef<mlir::ModuleOp> module =
        graphc::importOnnx(context, path, options, error, &weights);
    // A refusal says why, on one line; a module comes with no error.
    if (static_cast<bool>(module) == !error.empty() || error.find('\n') != std::string::npos)
      std::abort();
    if (module)
      (void)graphc::safetensorsOf(weights, {{"format", "pt"}});
  }
  return 0;
}
