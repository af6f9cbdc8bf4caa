//===- OnnxImport.h - ONNX model -> nn training model -----------*- C++ -*-===//
//
// `graphc import MODEL.onnx` (and `graphc compile|info MODEL.onnx`, which
// import in memory): an ONNX classifier's forward graph becomes an nn model
// like the zoo's: @forward(images, labels) -> loss, the graph's one image
// input with its batch dim made dynamic, its one output taken as logits and
// softmax cross-entropy against i32 labels appended. Every initializer a node
// trains becomes an nn.parameter, batch norm's running statistics nn.state,
// named by their ONNX names (a PyTorch export's state_dict keys).
//
// What is imported (opsets 11 to 17), and how:
//   Conv (2-D, groups, dilations, explicit or VALID padding, bias) -> conv2d;
//   BatchNormalization (training or inference form; ONNX's momentum m is
//     nn's 1 - m) -> batch_norm;
//   Relu -> relu; Sigmoid -> sigmoid; Add, Sub, Mul, Div (two activations,
//     one broadcast to the other's shape, or an activation and a constant
//     scalar) -> add, sub, mul, div (with broadcast);
//   Clip (constant bounds: ReLU6) -> relu or max, then cmp + select;
//   HardSigmoid, HardSwish -> mul, add, the same clamp (and mul);
//   MaxPool, AveragePool (2-D; ceil_mode as more bottom/right padding, for
//     max pooling or an average that excludes padding) -> max_pool2d,
//     avg_pool2d;
//   GlobalAveragePool -> global_avg_pool, reshaped to [N, C, 1, 1];
//   ReduceMean, ReduceSum (non-batch axes) -> reduce_mean, reduce_sum;
//     ReduceL2 -> the sum of squares s, then s * rsqrt(max(s, FLT_MIN));
//   LeakyRelu -> cmp + select; Pow by a constant 1 to 4 -> muls;
//   InstanceNormalization, and BatchNormalization of rank 2 or 3 or without
//     running statistics (weight standardization), Resize (a constant
//     matrix per resized dim) -> OnnxNormResize.cpp;
//   Concat -> concat; Slice (step 1), Split -> slice each;
//   Transpose (batch kept first) -> transpose; Reshape (batch kept first) ->
//     reshape;
//   Flatten (axis 1) -> flatten; Gemm (B transposed, alpha = beta = 1) -> linear;
//   Dropout -> dropout (its ratio, a seed per node); Identity.
//   MatMul (a 2-D weight, or equal batch dims) -> matmul between reshapes;
//   Softmax -> reduce_max, sub, exp, reduce_sum, div; LayerNormalization ->
//     reduce_mean twice, rsqrt, mul, add; Erf -> erf; Expand -> broadcast;
//     Gather of constant indices -> slices, concat, reshape (up to 64), or
//     nn.gather of rows (more, along any axis by transposes); Squeeze,
//     Unsqueeze -> reshape; Cast between float types -> nothing
//     (OnnxTransformer.cpp).
// A float initializer read as a tensor is a trained parameter. Shape
// arithmetic (Shape, Gather, Unsqueeze, Squeeze, Concat, Cast, Slice, Add,
// Sub, Mul, Div, Mod, Equal, Where, ConstantOfShape, Reshape, Expand on
// integer vectors; Cast, Sqrt, Div, ... of them as floats) is folded at
// import, the batch size kept open (OnnxShapes.cpp) unless fixed. Anything else is a one-line error naming the
// node (index, name, op type) and the opset. With `forward`, an inference
// model instead (@infer: the graph's inputs and outputs as they are, no
// loss), where dim 0 is an ordinary static dim and weights may be inputs.
//
//===----------------------------------------------------------------------===//

#ifndef GRAPHC_COMPILER_IMPORT_ONNXIMPORT_H
#define GRAPHC_COMPILER_IMPORT_ONNXIMPORT_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/GlobPattern.h"

#include <string>
#include <utility>
#include <vector>

namespace graphc {

struct OnnxImportOptions {
  /// The appended loss's label smoothing.
  double labelSmoothing = 0.0;
  /// An inference model instead of a classifier to train: `@infer` takes
  /// every graph input (static shapes, as in the file) and returns every
  /// graph output; no loss. A node's weight may then be a graph input too.
  bool forward = false;
  /// A fixed batch size (0: the batch left open, set at compile; with
  /// `forward`, what a symbolic dim 0 of an input becomes): the images
  /// [batch, C, H, W] and every shape static, so that the graph may move the
  /// batch out of dim 0 or merge it with another dim (attention's heads).
  /// The module then records it (graphc.fixed_batch), and compiling it at
  /// another batch size is an error.
  int64_t batch = 0;
  /// The graph output trained as the logits, by name ("": the graph's one
  /// output). The other outputs (GoogLeNet's and Inception's auxiliary
  /// classifiers) are dropped with every node only they need, so their
  /// parameters are not part of the model.
  std::string logits;
  /// Float initializers imported as constants, not trained (PyTorch's float
  /// buffers, or layers to freeze), by name pattern (llvm::GlobPattern).
  std::vector<llvm::GlobPattern> frozen;
  /// The patterns as given, for errors (one per entry of `frozen`).
  std::vector<std::string> frozenText;
  /// When the open batch fails and `batch` is 0, import again with this one
  /// (graphc compile MODEL.onnx passes its --batch-size).
  int64_t fallbackBatch = 0;
};

/// The value of one nn.parameter or nn.state of an imported model, as the
/// ONNX file gives it: float32, little-endian.
struct ImportedWeight {
  std::string name;
  std::vector<int64_t> shape;
  std::string bytes;
};

/// Imports the ONNX model at `path` into a new module of `context` (which
/// gets the nn and func dialects loaded). On failure returns null and sets
/// `error` to one line naming what is wrong and where. With `weights`, also
/// gives every parameter's and statistic's value, in declaration order (an
/// initializer without its values is then an error).
mlir::OwningOpRef<mlir::ModuleOp> importOnnx(mlir::MLIRContext &context, llvm::StringRef path,
                                             const OnnxImportOptions &options,
                                             std::string &error,
                                             std::vector<ImportedWeight> *weights = nullptr);

/// `weights` as a safetensors file (F32 tensors in order, `metadata` as its
/// __metadata__): what `graphrun --init` and PyTorch's safetensors read.
std::string safetensorsOf(const std::vector<ImportedWeight> &weights,
                          const std::vector<std::pair<std::string, std::string>> &metadata);

} // namespace graphc

#endif // GRAPHC_COMPILER_IMPORT_ONNXIMPORT_H
