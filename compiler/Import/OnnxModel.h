//===- OnnxModel.h - an ONNX file, read and checked -------------*- C++ -*-===//
//
// The ONNX side of `graphc import`: reads a model file (protobuf, through
// Debian's libonnx), checks it (ONNX's own checker, then what graphc needs:
// the opset, no external data, no subgraphs), and copies what the importer
// uses into plain structs. This file is compiled with exceptions and RTTI,
// which protobuf and ONNX's checker use, and includes nothing from LLVM or
// MLIR (built without either); OnnxImport.cpp builds the nn module from the
// structs.
//
//===----------------------------------------------------------------------===//

#ifndef GRAPHC_COMPILER_IMPORT_ONNXMODEL_H
#define GRAPHC_COMPILER_IMPORT_ONNXMODEL_H

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace graphc {
namespace onnx_model {

/// The largest model file read (ONNX's protobuf limit is 2 GiB).
constexpr int64_t kMaxModelBytes = int64_t(1) << 30;
/// The most bytes of initializers read from external data files, in all
/// (torch.onnx.export's default keeps the weights in MODEL.onnx.data).
constexpr int64_t kMaxExternalBytes = int64_t(4) << 30;
/// Opsets of the default domain whose ops the importer knows.
// Opsets 11 and 12 define the ops graphc takes as 13 does, or differ only in
// attributes the importer refuses by name (Split's and Dropout's old ones).
// Opsets 18 to 22 add inputs and attributes to some of them (and Gelu),
// which the importer reads; ONNX's checker (libonnx 1.12, which knows opset
// 17) checks such a model as its opset-17 form (readModel).
constexpr int64_t kMinOpset = 11, kMaxOpset = 22;
constexpr int64_t kCheckerOpset = 17;
/// IR versions read: to 14 (onnx 1.23). Those after 8 (libonnx 1.12's) add
/// element types, which graphc refuses by name, and fields it ignores
/// (metadata, multi-device placement).
constexpr int64_t kMaxIrVersion = 14, kCheckerIrVersion = 8;
/// Initializers with at most this many elements keep their values (scalars
/// and shapes the importer folds); larger ones keep only their shapes.
constexpr int64_t kMaxFoldedElements = 4096;
constexpr int64_t kMaxFoldedIndices = int64_t{1} << 20;
/// The most elements a constant the importer computes may have (a position
/// encoding folded for the whole batch: EdgeNeXt's is 12.8 M at batch 256),
/// and the most all of them may hold together (8 bytes each).
constexpr int64_t kMaxFoldedTensor = int64_t{1} << 24;
constexpr int64_t kMaxFoldedTotal = int64_t{1} << 27;

/// TensorProto's element types the importer names.
enum class ElementType { Other, Float, Double, Float16, BFloat16, Int64, Int32, Bool };

struct Tensor {
  std::string name;
  ElementType type = ElementType::Other;
  std::vector<int64_t> dims;
  /// The values, for at most kMaxFoldedElements elements of a numeric type
  /// (kMaxFoldedIndices of an integer or boolean one).
  bool hasValues = false;
  std::vector<double> values;
  /// A float32 tensor's bytes, little-endian (the weights graphc import
  /// writes); empty when the file holds fewer or more than its shape says.
  std::string float32Bytes;
};

struct Attribute {
  enum class Kind { Int, Float, Ints, Floats, String, Tensor, Other } kind = Kind::Other;
  int64_t i = 0;
  double f = 0;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::string s;
  Tensor tensor;
};

struct Node {
  int index = 0;  // in the graph's node list
  std::string name, opType, domain;
  std::vector<std::string> inputs, outputs;  // "" for an omitted optional input
  std::map<std::string, Attribute> attributes;
};

/// A graph input or output; a dim that is not a number is -1 (symbolic).
struct Value {
  std::string name;
  ElementType type = ElementType::Other;
  bool hasShape = false;
  std::vector<int64_t> dims;
};

struct Model {
  std::string path;
  int64_t irVersion = 0, opset = 0;
  std::string producer;
  std::vector<Value> inputs, outputs;  // graph inputs that are initializers left out
  std::vector<Tensor> initializers;
  std::vector<Node> nodes;
  /// torch.export's graph signature, where the file records one (the
  /// graph's metadata "pkg.torch.export.ExportedProgram.graph_signature",
  /// which torch.onnx.export(dynamo=True) writes): the state_dict names of
  /// the exported program's parameters, buffers and lifted constant tensors.
  bool hasTorchSignature = false;
  std::set<std::string> torchParameters, torchBuffers, torchConstants;
};

/// Reads, checks and copies `path`. Returns "" on success, else one line
/// saying what is wrong (without the path, which the caller prefixes).
std::string readModel(const std::string &path, Model &model);

/// "float32", ...: the name of `type` as ONNX writes it.
const char *elementTypeName(ElementType type);

/// `name` (from the file) on one line: bytes outside printable ASCII and
/// backslashes as \xNN.
std::string shown(const std::string &name);

} // namespace onnx_model
} // namespace graphc

#endif // GRAPHC_COMPILER_IMPORT_ONNXMODEL_H
