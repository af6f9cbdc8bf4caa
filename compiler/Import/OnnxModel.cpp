//===- OnnxModel.cpp - an ONNX file, read and checked ---------------------===//

#include "compiler/Import/OnnxModel.h"

#include "onnx/checker.h"
#include "onnx/onnx_pb.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <set>

namespace graphc {
namespace onnx_model {

// A name from the file, shown on one line: control characters and bytes
// outside printable ASCII as \xNN.
std::string shown(const std::string &name) {
  static const char hex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : name)
    if (c >= 0x20 && c < 0x7f && c != '\\')
      out += static_cast<char>(c);
    else
      out += std::string("\\x") + hex[c >> 4] + hex[c & 15];
  return out;
}

namespace {

ElementType elementTypeOf(int32_t type) {
  switch (type) {
  case onnx::TensorProto::FLOAT:
    return ElementType::Float;
  case onnx::TensorProto::DOUBLE:
    return ElementType::Double;
  case onnx::TensorProto::FLOAT16:
    return ElementType::Float16;
  case onnx::TensorProto::BFLOAT16:
    return ElementType::BFloat16;
  case onnx::TensorProto::INT64:
    return ElementType::Int64;
  case onnx::TensorProto::INT32:
    return ElementType::Int32;
  case onnx::TensorProto::BOOL:
    return ElementType::Bool;
  default:
    return ElementType::Other;
  }
}

// One line: an ONNX message may span several.
std::string oneLine(std::string text) {
  for (char &c : text)
    if (c == '\n' || c == '\r' || c == '\t')
      c = ' ';
  while (!text.empty() && text.back() == ' ')
    text.pop_back();
  return text;
}

// Reads the file whole: a regular file (a FIFO or a device is refused before
// it is read) of at most kMaxModelBytes.
std::string readFile(const std::string &path, std::string &bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    return std::strerror(errno);
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > kMaxModelBytes) {
    const bool directory = S_ISDIR(st.st_mode), regular = S_ISREG(st.st_mode);
    ::close(fd);
    return directory ? "it is a directory"
           : !regular ? "it is not a regular file"
                      : "it is larger than 1 GiB";
  }
  bytes.resize(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::read(fd, &bytes[done], bytes.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      std::string why = n < 0 ? std::strerror(errno) : "it shrank while being read";
      ::close(fd);
      return why;
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return "";
}

// The values of a numeric tensor of at most kMaxFoldedElements elements
// (kMaxFoldedIndices for integers and booleans: index tables and masks).
void copyValues(const onnx::TensorProto &proto, Tensor &tensor) {
  const bool integral = tensor.type == ElementType::Int64 || tensor.type == ElementType::Int32 ||
                        tensor.type == ElementType::Bool;
  const int64_t most = integral ? kMaxFoldedIndices : kMaxFoldedElements;
  int64_t count = 1;
  for (int64_t d : tensor.dims) {
    if (d < 0 || d > most)
      return;
    count *= d;
    if (count > most)
      return;
  }
  const size_t n = static_cast<size_t>(count);
  std::vector<double> &v = tensor.values;
  if (proto.has_raw_data()) {
    const std::string &raw = proto.raw_data();
    auto take = [&](auto sample) {
      using T = decltype(sample);
      if (raw.size() != n * sizeof(T))
        return false;
      for (size_t i = 0; i < n; ++i) {
        T x;
        std::memcpy(&x, raw.data() + i * sizeof(T), sizeof(T));
        v.push_back(static_cast<double>(x));
      }
      return true;
    };
    bool ok = false;
    switch (tensor.type) {
    case ElementType::Float:
      ok = take(float{});
      break;
    case ElementType::Double:
      ok = take(double{});
      break;
    case ElementType::Int64:
      ok = take(int64_t{});
      break;
    case ElementType::Int32:
      ok = take(int32_t{});
      break;
    case ElementType::Bool:
      ok = take(uint8_t{});
      break;
    default:
      break;
    }
    tensor.hasValues = ok && v.size() == n;
    if (!tensor.hasValues)
      v.clear();
    return;
  }
  switch (tensor.type) {
  case ElementType::Float:
    for (float x : proto.float_data())
      v.push_back(x);
    break;
  case ElementType::Double:
    for (double x : proto.double_data())
      v.push_back(x);
    break;
  case ElementType::Int64:
    for (int64_t x : proto.int64_data())
      v.push_back(static_cast<double>(x));
    break;
  case ElementType::Int32:
  case ElementType::Bool:
    for (int32_t x : proto.int32_data())
      v.push_back(x);
    break;
  default:
    return;
  }
  tensor.hasValues = v.size() == n;
  if (!tensor.hasValues)
    v.clear();
}

std::string copyTensor(const onnx::TensorProto &proto, Tensor &tensor) {
  tensor.name = proto.name();
  tensor.type = elementTypeOf(proto.data_type());
  for (int64_t d : proto.dims()) {
    if (d < 0)
      return "tensor '" + shown(tensor.name) + "' has a negative dimension";
    tensor.dims.push_back(d);
  }
  if (proto.data_location() == onnx::TensorProto::EXTERNAL || proto.external_data_size() > 0)
    return "tensor '" + shown(tensor.name) +
           "' keeps its data in an external file, which graphc does not read; save the "
           "model with its weights inside (onnx.save_model(..., save_as_external_data=False))";
  copyValues(proto, tensor);
  if (tensor.type == ElementType::Float) {
    uint64_t count = 1;
    bool fits = true;
    for (int64_t d : tensor.dims) {
      if (d != 0 && count > (uint64_t(kMaxModelBytes) / 4) / uint64_t(d))
        fits = false;
      count *= uint64_t(d);
    }
    if (fits && proto.has_raw_data() && proto.raw_data().size() == count * 4) {
      tensor.float32Bytes = proto.raw_data();
    } else if (fits && !proto.has_raw_data() && uint64_t(proto.float_data_size()) == count) {
      tensor.float32Bytes.resize(count * 4);
      for (uint64_t i = 0; i < count; ++i) {
        const float x = proto.float_data(static_cast<int>(i));
        std::memcpy(&tensor.float32Bytes[i * 4], &x, 4);
      }
    }
  }
  return "";
}

Value copyValue(const onnx::ValueInfoProto &info) {
  Value value;
  value.name = info.name();
  if (info.type().has_tensor_type()) {
    const onnx::TypeProto::Tensor &tensor = info.type().tensor_type();
    value.type = elementTypeOf(tensor.elem_type());
    if (tensor.has_shape()) {
      value.hasShape = true;
      for (const onnx::TensorShapeProto::Dimension &dim : tensor.shape().dim())
        value.dims.push_back(dim.has_dim_value() ? dim.dim_value() : -1);
    }
  }
  return value;
}

std::string where(const onnx::NodeProto &node, int index) {
  return "node " + std::to_string(index) + " '" + shown(node.name()) + "' (" +
         (node.domain().empty() ? "" : shown(node.domain()) + ".") + shown(node.op_type()) + ")";
}

} // namespace

const char *elementTypeName(ElementType type) {
  switch (type) {
  case ElementType::Float:
    return "float32";
  case ElementType::Double:
    return "float64";
  case ElementType::Float16:
    return "float16";
  case ElementType::BFloat16:
    return "bfloat16";
  case ElementType::Int64:
    return "int64";
  case ElementType::Int32:
    return "int32";
  case ElementType::Bool:
    return "bool";
  case ElementType::Other:
    break;
  }
  return "another element type";
}

std::string readModel(const std::string &path, Model &model) {
  model = Model();
  model.path = path;
  std::string bytes;
  if (std::string error = readFile(path, bytes); !error.empty())
    return error;
  onnx::ModelProto proto;
  if (bytes.empty() || !proto.ParseFromString(bytes))
    return "not an ONNX model (the protobuf does not parse)";
  bytes.clear();
  bytes.shrink_to_fit();
  model.irVersion = proto.ir_version();
  model.producer = proto.producer_name();
  if (!proto.producer_version().empty())
    model.producer += " " + proto.producer_version();
  bool found = false;
  for (const onnx::OperatorSetIdProto &set : proto.opset_import())
    if (set.domain().empty() || set.domain() == "ai.onnx") {
      if (found && set.version() != model.opset)
        return "the model imports two opsets of the default ONNX domain (" +
               std::to_string(model.opset) + " and " + std::to_string(set.version()) + ")";
      model.opset = set.version();
      found = true;
    }
  if (!found)
    return "the model imports no opset of the default ONNX domain";
  if (model.opset < kMinOpset || model.opset > kMaxOpset)
    return "opset " + std::to_string(model.opset) + " is not supported (graphc imports opsets " +
           std::to_string(kMinOpset) + " to " + std::to_string(kMaxOpset) +
           "; onnx.version_converter can convert a model)";
  if (!proto.has_graph())
    return "the model has no graph";
  const onnx::GraphProto &graph = proto.graph();
  // What graphc does not take, refused before ONNX's checker sees it (the
  // checker itself can crash on a malformed sparse tensor, and function
  // bodies would escape the checks below).
  if (proto.functions_size() > 0)
    return "model-local functions are not supported (export without them)";
  if (graph.sparse_initializer_size() > 0)
    return "sparse initializers are not supported";
  // External data first: the checker would try to open the files.
  for (const onnx::TensorProto &tensor : graph.initializer())
    if (tensor.data_location() == onnx::TensorProto::EXTERNAL || tensor.external_data_size() > 0)
      return "tensor '" + shown(tensor.name()) +
             "' keeps its data in an external file, which graphc does not read; save the "
             "model with its weights inside (onnx.save_model(..., save_as_external_data=False))";
  for (int i = 0; i < graph.node_size(); ++i) {
    const onnx::NodeProto &node = graph.node(i);
    if (!node.domain().empty() && node.domain() != "ai.onnx")
      return where(node, i) + ": ops of domain '" + shown(node.domain()) + "' are not supported";
    for (const onnx::AttributeProto &attribute : node.attribute())
      if (attribute.has_sparse_tensor() || attribute.sparse_tensors_size() > 0 ||
          attribute.type() == onnx::AttributeProto::SPARSE_TENSOR ||
          attribute.type() == onnx::AttributeProto::SPARSE_TENSORS)
        return where(node, i) + ": sparse tensor attribute '" + attribute.name() +
               "' is not supported";
      else if (attribute.has_g() || attribute.graphs_size() > 0 ||
          attribute.type() == onnx::AttributeProto::GRAPH ||
          attribute.type() == onnx::AttributeProto::GRAPHS)
        return where(node, i) +
               ": control flow (a subgraph in attribute '" + shown(attribute.name()) +
               "') is not supported: graphc trains static graphs";
      else if (attribute.has_t() && (attribute.t().data_location() == onnx::TensorProto::EXTERNAL ||
                                     attribute.t().external_data_size() > 0))
        return where(node, i) + ": attribute '" + attribute.name() +
               "' keeps its data in an external file, which graphc does not read";
  }
  try {
    onnx::checker::check_model(proto);
  } catch (const std::exception &e) {
    return "the ONNX checker refuses the model: " + oneLine(e.what());
  }

  std::set<std::string> initialized;
  for (const onnx::TensorProto &proto : graph.initializer()) {
    Tensor &tensor = model.initializers.emplace_back();
    if (std::string error = copyTensor(proto, tensor); !error.empty())
      return error;
    if (!initialized.insert(tensor.name).second)
      return "initializer '" + shown(tensor.name) + "' is defined twice";
  }
  for (const onnx::ValueInfoProto &input : graph.input())
    if (!initialized.count(input.name()))
      model.inputs.push_back(copyValue(input));
  for (const onnx::ValueInfoProto &output : graph.output())
    model.outputs.push_back(copyValue(output));
  for (int i = 0; i < graph.node_size(); ++i) {
    const onnx::NodeProto &proto = graph.node(i);
    Node &node = model.nodes.emplace_back();
    node.index = i;
    node.name = proto.name();
    node.opType = proto.op_type();
    node.domain = proto.domain();
    node.inputs.assign(proto.input().begin(), proto.input().end());
    node.outputs.assign(proto.output().begin(), proto.output().end());
    for (const onnx::AttributeProto &a : proto.attribute()) {
      Attribute &attribute = node.attributes[a.name()];
      switch (a.type()) {
      case onnx::AttributeProto::INT:
        attribute.kind = Attribute::Kind::Int;
        attribute.i = a.i();
        break;
      case onnx::AttributeProto::FLOAT:
        attribute.kind = Attribute::Kind::Float;
        attribute.f = a.f();
        break;
      case onnx::AttributeProto::INTS:
        attribute.kind = Attribute::Kind::Ints;
        attribute.ints.assign(a.ints().begin(), a.ints().end());
        break;
      case onnx::AttributeProto::FLOATS:
        attribute.kind = Attribute::Kind::Floats;
        attribute.floats.assign(a.floats().begin(), a.floats().end());
        break;
      case onnx::AttributeProto::STRING:
        attribute.kind = Attribute::Kind::String;
        attribute.s = a.s();
        break;
      case onnx::AttributeProto::TENSOR:
        attribute.kind = Attribute::Kind::Tensor;
        if (std::string error = copyTensor(a.t(), attribute.tensor); !error.empty())
          return where(proto, i) + ": " + error;
        break;
      default:
        attribute.kind = Attribute::Kind::Other;
        break;
      }
    }
  }
  return "";
}

} // namespace onnx_model
} // namespace graphc
