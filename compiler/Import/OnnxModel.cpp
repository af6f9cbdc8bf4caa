//===- OnnxModel.cpp - an ONNX file, read and checked ---------------------===//

#include "compiler/Import/OnnxModel.h"

#include "onnx/checker.h"
#include "onnx/onnx_pb.h"

#include <google/protobuf/unknown_field_set.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iterator>
#include <map>
#include <set>
#include <utility>

namespace graphc {
namespace onnx_model {

// A name from the file, shown on one line: control characters and bytes
// outside printable ASCII as \xNN.
std::string shown(const std::string &name) {
  static const char hex[] = "0123456789abcdef";
  // A name past kShownBytes (a hostile file's) shown by its start and length.
  constexpr size_t kShownBytes = 256;
  std::string out;
  for (size_t i = 0; i < name.size() && i < kShownBytes; ++i) {
    const auto c = static_cast<unsigned char>(name[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\')
      out += static_cast<char>(c);
    else
      out += std::string("\\x") + hex[c >> 4] + hex[c & 15];
  }
  if (name.size() > kShownBytes)
    out += "... (" + std::to_string(name.size()) + " bytes)";
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

// `raw`, where given, is `proto`'s raw_data to move a float32 tensor's bytes
// from (an initializer's: the weights are not held twice).
std::string copyTensor(const onnx::TensorProto &proto, Tensor &tensor,
                       std::string *raw = nullptr) {
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
      if (raw)
        tensor.float32Bytes.swap(*raw);
      else
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

// Bytes per element of a type stored raw; 0 for strings and unknown types.
int64_t elementBytes(int32_t type) {
  switch (type) {
  case onnx::TensorProto::BOOL:
  case onnx::TensorProto::INT8:
  case onnx::TensorProto::UINT8:
    return 1;
  case onnx::TensorProto::FLOAT16:
  case onnx::TensorProto::BFLOAT16:
  case onnx::TensorProto::INT16:
  case onnx::TensorProto::UINT16:
    return 2;
  case onnx::TensorProto::FLOAT:
  case onnx::TensorProto::INT32:
  case onnx::TensorProto::UINT32:
    return 4;
  case onnx::TensorProto::DOUBLE:
  case onnx::TensorProto::INT64:
  case onnx::TensorProto::UINT64:
    return 8;
  default:
    return 0;
  }
}

// Initializers whose data an external file beside the model holds (ONNX's
// external data: location, offset, length), read into the tensors. A
// location is read only inside the model's directory: relative, without a
// ".." component, and resolved (symlinks followed) to a regular file under
// that directory. At most kMaxExternalBytes in all.
class ExternalData {
public:
  explicit ExternalData(const std::string &modelPath) : modelPath(modelPath) {
    const size_t slash = modelPath.rfind('/');
    directory = slash == std::string::npos ? "." : slash == 0 ? "/" : modelPath.substr(0, slash);
  }
  ~ExternalData() {
    for (auto &[path, file] : files)
      ::close(file.fd);
  }
  ExternalData(const ExternalData &) = delete;
  ExternalData &operator=(const ExternalData &) = delete;

  std::string read(onnx::TensorProto &tensor) {
    const std::string what = "tensor '" + shown(tensor.name()) + "'";
    if (tensor.data_location() != onnx::TensorProto::EXTERNAL)
      return what + " has external data entries but is not stored externally";
    std::string location;
    int64_t offset = 0, length = -1;
    for (const onnx::StringStringEntryProto &entry : tensor.external_data()) {
      const std::string &key = entry.key(), &value = entry.value();
      if (key == "location") {
        location = value;
      } else if (key == "offset" || key == "length") {
        int64_t number = 0;
        bool ok = !value.empty() && value.size() <= 18;
        for (char c : value)
          ok = ok && c >= '0' && c <= '9';
        if (ok)
          number = std::stoll(value);
        if (!ok)
          return what + ": external data " + key + " '" + shown(value) +
                 "' is not a byte count";
        (key == "offset" ? offset : length) = number;
      } else if (key != "checksum") {
        return what + ": external data key '" + shown(key) + "' is not one graphc knows";
      }
    }
    if (location.empty())
      return what + ": external data without a location";
    if (location.find('\0') != std::string::npos || location.front() == '/' ||
        location == ".." || location.rfind("../", 0) == 0 ||
        location.find("/../") != std::string::npos ||
        (location.size() >= 3 && location.compare(location.size() - 3, 3, "/..") == 0))
      return what + ": external data location '" + shown(location) +
             "' is not a relative path inside the model's directory";
    const int64_t bytesPerElement = elementBytes(tensor.data_type());
    if (bytesPerElement == 0)
      return what + ": external data of this element type is not supported";
    int64_t expected = bytesPerElement;
    for (int64_t d : tensor.dims()) {
      if (d < 0)
        return what + " has a negative dimension";
      if (d != 0 && expected > kMaxExternalBytes / d)
        return what + " is larger than graphc reads from external data (4 GiB in all)";
      expected *= d;
    }
    if (length >= 0 && length != expected)
      return what + ": external data length " + std::to_string(length) + " but its shape holds " +
             std::to_string(expected) + " bytes";
    if (expected > kMaxExternalBytes - total)
      return what + ": the external data is larger than graphc reads (4 GiB in all)";
    const File *file = nullptr;
    if (std::string error = open(location, file); !error.empty())
      return what + ": external data file '" + shown(location) + "': " + error;
    const int fd = file->fd;
    const int64_t size = file->size;
    std::map<int64_t, int64_t> *regions = file->regions;
    if (offset > size || expected > size - offset)
      return what + ": external data file '" + shown(location) + "' holds " +
             std::to_string(size) + " bytes, not " + std::to_string(expected) + " from offset " +
             std::to_string(offset);
    // Each byte read once: tensors whose regions overlap would make a small
    // file as large as the tensors named in it.
    if (expected > 0) {
      auto next = regions->lower_bound(offset);
      const bool overlaps =
          (next != regions->end() && next->first < offset + expected) ||
          (next != regions->begin() && std::prev(next)->second > offset);
      if (overlaps)
        return what + ": its external data overlaps another tensor's in '" + shown(location) +
               "'";
      (*regions)[offset] = offset + expected;
    }
    std::string *raw = tensor.mutable_raw_data();
    raw->resize(static_cast<size_t>(expected));
    for (int64_t done = 0; done < expected;) {
      ssize_t n = ::pread(fd, &(*raw)[static_cast<size_t>(done)],
                          static_cast<size_t>(std::min<int64_t>(expected - done, int64_t(1) << 30)),
                          static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        return what + ": external data file '" + shown(location) + "': " +
               (n < 0 ? std::strerror(errno) : "it shrank while being read");
      done += n;
    }
    total += expected;
    tensor.clear_external_data();
    tensor.set_data_location(onnx::TensorProto::DEFAULT);
    return "";
  }

private:
  // An external data file, opened once: its size, and the regions read
  // from it so far ([start, end), by start; shared by every name of it).
  struct File {
    int fd = -1;
    int64_t size = 0;
    std::map<int64_t, int64_t> *regions = nullptr;
  };

  // `location`, resolved under the model's directory (not the model itself,
  // by any name).
  std::string open(const std::string &location, const File *&file) {
    if (root.empty()) {  // the directory and the model, looked up once
      char *base = ::realpath(directory.c_str(), nullptr);
      if (!base)
        return std::string("the model's directory: ") + std::strerror(errno);
      root = base;
      std::free(base);
      struct stat st;
      if (::stat(modelPath.c_str(), &st) == 0)
        model = {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
    }
    char *resolved = ::realpath((directory + "/" + location).c_str(), nullptr);
    if (!resolved)
      return std::strerror(errno);
    std::string path = resolved;
    std::free(resolved);
    if (path.size() <= root.size() || path.compare(0, root.size(), root) != 0 ||
        (root != "/" && path[root.size()] != '/'))
      return "it resolves outside the model's directory";
    if (auto it = files.find(path); it != files.end()) {
      file = &it->second;
      return "";
    }
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
      return std::strerror(errno);
    struct stat st;
    const bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    const std::pair<uint64_t, uint64_t> id = {static_cast<uint64_t>(st.st_dev),
                                              static_cast<uint64_t>(st.st_ino)};
    // The file itself, not its name: a hard link is the same file.
    if (!regular || id == model) {
      ::close(fd);
      return regular ? "it is the model file itself" : "it is not a regular file";
    }
    file = &(files[path] = File{fd, st.st_size, &readRegions[id]});
    return "";
  }

  std::string modelPath, directory;
  std::string root;                      // the directory, resolved
  std::pair<uint64_t, uint64_t> model;   // the model file's device and inode
  std::map<std::string, File> files;     // by resolved path
  std::map<std::pair<uint64_t, uint64_t>, std::map<int64_t, int64_t>> readRegions;
  int64_t total = 0;
};

// torch.export's graph signature from the graph's metadata (field 16 of
// GraphProto, IR version 10, which libonnx 1.12's protobuf keeps as an
// unknown field): lines "NAME: PARAMETER target='layer1.0.conv1.weight'",
// "NAME: BUFFER target='bn1.running_mean' persistent=True", ...
void readTorchSignature(const onnx::GraphProto &graph, Model &model) {
  const google::protobuf::UnknownFieldSet &unknown = graph.unknown_fields();
  for (int f = 0; f < unknown.field_count(); ++f) {
    const google::protobuf::UnknownField &field = unknown.field(f);
    if (field.number() != 16 || field.type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED)
      continue;
    onnx::StringStringEntryProto entry;
    if (!entry.ParseFromString(field.length_delimited()) ||
        entry.key() != "pkg.torch.export.ExportedProgram.graph_signature")
      continue;
    model.hasTorchSignature = true;
    const std::string &text = entry.value();
    for (size_t start = 0; start < text.size();) {
      size_t end = text.find('\n', start);
      if (end == std::string::npos)
        end = text.size();
      const std::string line = text.substr(start, end - start);
      start = end + 1;
      for (const auto &[kind, names] :
           {std::pair<const char *, std::set<std::string> *>{": PARAMETER target='",
                                                             &model.torchParameters},
            {": BUFFER target='", &model.torchBuffers},
            {": CONSTANT_TENSOR target='", &model.torchConstants}}) {
        const size_t at = line.find(kind);
        if (at == std::string::npos)
          continue;
        const size_t from = at + std::strlen(kind), to = line.find('\'', from);
        if (to != std::string::npos)
          names->insert(line.substr(from, to - from));
      }
    }
  }
}

// An element type after BFLOAT16 (16), the last libonnx 1.12 knows: float8,
// 4- and 2-bit integers, float4, float6 (IR versions 9 to 14), or later ones.
std::string newerElementType(int32_t type) {
  static const char *const names[] = {"FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2",
                                      "FLOAT8E5M2FNUZ", "UINT4",        "INT4",
                                      "FLOAT4E2M1",   "FLOAT8E8M0",     "UINT2",
                                      "INT2",         "FLOAT6E2M3",     "FLOAT6E3M2"};
  if (type <= onnx::TensorProto::BFLOAT16)
    return "";
  const size_t at = static_cast<size_t>(type) - 17;
  return at < std::size(names) ? std::string(names[at]) : "number " + std::to_string(type);
}

// Element types libonnx 1.12 cannot check, refused by name wherever a tensor
// or a value declares one (graphc computes in float32 and its own precisions).
std::string checkElementTypes(const onnx::GraphProto &graph) {
  auto refuse = [](const std::string &what, int32_t type) {
    return what + " has element type " + newerElementType(type) + ", which graphc does not take";
  };
  for (const onnx::TensorProto &t : graph.initializer())
    if (!newerElementType(t.data_type()).empty())
      return refuse("initializer '" + shown(t.name()) + "'", t.data_type());
  for (const auto *values : {&graph.input(), &graph.output(), &graph.value_info()})
    for (const onnx::ValueInfoProto &v : *values)
      if (v.type().has_tensor_type() && !newerElementType(v.type().tensor_type().elem_type()).empty())
        return refuse("value '" + shown(v.name()) + "'", v.type().tensor_type().elem_type());
  for (int i = 0; i < graph.node_size(); ++i)
    for (const onnx::AttributeProto &a : graph.node(i).attribute()) {
      if (a.has_t() && !newerElementType(a.t().data_type()).empty())
        return refuse(where(graph.node(i), i) + ": attribute '" + shown(a.name()) + "'",
                      a.t().data_type());
      for (const onnx::TensorProto &t : a.tensors())
        if (!newerElementType(t.data_type()).empty())
          return refuse(where(graph.node(i), i) + ": attribute '" + shown(a.name()) + "'",
                        t.data_type());
      if ((a.name() == "to" || a.name() == "dtype") && a.type() == onnx::AttributeProto::INT &&
          (a.i() < 0 || a.i() > INT32_MAX || !newerElementType(static_cast<int32_t>(a.i())).empty()))
        return where(graph.node(i), i) + ": attribute '" + a.name() + "' names element type " +
               (a.i() < 0 || a.i() > INT32_MAX ? std::to_string(a.i())
                                               : newerElementType(static_cast<int32_t>(a.i()))) +
               ", which graphc does not take";
    }
  return "";
}

// Ops opsets 18 to 22 added, or changed in signature or meaning, that graphc
// does not import: refused by name before the checker, which (knowing opset
// 17) would misread them. Gelu and the changed ops graphc imports are in
// toCheckerForm.
bool isNewerOpNotImported(const std::string &op) {
  static const std::set<std::string> ops = {
      // New in 18 to 22.
      "AffineGrid", "BitwiseAnd", "BitwiseNot", "BitwiseOr", "BitwiseXor", "CenterCropPad",
      "Col2Im", "DeformConv", "GroupNormalization", "ImageDecoder", "Mish", "RegexFullMatch",
      "StringConcat", "StringSplit",
      // Changed: axes as an input, new attributes, inputs or modes.
      "ReduceL1", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMin", "ReduceProd",
      "ReduceSumSquare", "LpPool", "GridSample", "DFT", "ScatterElements", "OptionalGetElement",
      "OptionalHasElement", "QuantizeLinear", "DequantizeLinear", "QLinearMatMul", "IsInf",
      "IsNaN"};
  return ops.count(op) > 0;
}

// A node of an opset-18-to-22 model as its opset-17 form, for ONNX's checker
// only: what those opsets added to the ops graphc imports dropped (the
// importer reads and checks it from the node as written), Gelu as the
// one-input Erf it is shaped like. "" or why the node is refused.
std::string toCheckerForm(onnx::NodeProto &node, int64_t opset) {
  const std::string op = node.op_type();
  auto has = [&](const char *name) {
    for (const onnx::AttributeProto &a : node.attribute())
      if (a.name() == name)
        return true;
    return false;
  };
  // The attributes those opsets added, dropped after checking their kinds
  // (the checker no longer sees them).
  std::string wrongKind;
  auto drop = [&](std::initializer_list<std::pair<const char *, onnx::AttributeProto::AttributeType>>
                      attributes) {
    auto *all = node.mutable_attribute();
    std::set<std::string> seen;
    for (int i = all->size() - 1; i >= 0; --i)
      for (const auto &[name, kind] : attributes)
        if (all->Get(i).name() == name) {
          if (all->Get(i).type() != kind)
            wrongKind = "attribute '" + std::string(name) + "' is of the wrong kind";
          if (!seen.insert(name).second)
            wrongKind = "attribute '" + std::string(name) + "' appears twice";
          all->DeleteSubrange(i, 1);
          break;
        }
  };
  using A = onnx::AttributeProto;
  if (op == "ReduceMean" || op == "ReduceL2") {  // 18: axes an input
    if (has("axes"))
      return "an 'axes' attribute, which opset 18 made ReduceMean's and ReduceL2's second input";
    drop({{"noop_with_empty_axes", A::INT}});
    while (node.input_size() > 1)
      node.mutable_input()->RemoveLast();
  } else if (op == "Pad") {  // 18: axes, a fourth input
    while (node.input_size() > 3)
      node.mutable_input()->RemoveLast();
  } else if (op == "AveragePool" && opset >= 19) {  // 19: dilations
    drop({{"dilations", A::INTS}});
  } else if ((op == "Cast" || op == "CastLike") && opset >= 19) {  // 19: saturate (float8)
    drop({{"saturate", A::INT}});
  } else if (op == "Resize") {  // 18: antialias, axes, keep_aspect_ratio_policy
    drop({{"antialias", A::INT}, {"axes", A::INTS}, {"keep_aspect_ratio_policy", A::STRING}});
  } else if (op == "Split") {  // 18: num_outputs
    drop({{"num_outputs", A::INT}});
  } else if (op == "Gelu" && opset >= 20) {
    int approximate = 0;
    for (const onnx::AttributeProto &a : node.attribute())
      if (a.name() == "approximate" && (a.type() != A::STRING || ++approximate > 1))
        return "attribute 'approximate' is of the wrong kind or appears twice";
    node.set_op_type("Erf");
    node.clear_attribute();
  } else if (isNewerOpNotImported(op)) {
    return "not supported by graphc import";
  }
  return wrongKind;
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
  if (model.irVersion > kMaxIrVersion)
    return "IR version " + std::to_string(model.irVersion) +
           " is newer than graphc reads (IR versions to " + std::to_string(kMaxIrVersion) +
           ", onnx 1.23's)";
  if (!proto.has_graph())
    return "the model has no graph";
  const onnx::GraphProto &graph = proto.graph();
  onnx::GraphProto &mutableGraph = *proto.mutable_graph();
  // What graphc does not take, refused before ONNX's checker sees it (the
  // checker itself can crash on a malformed sparse tensor, and function
  // bodies would escape the checks below).
  if (proto.functions_size() > 0)
    return "model-local functions are not supported (export without them)";
  if (graph.sparse_initializer_size() > 0)
    return "sparse initializers are not supported";
  if (std::string error = checkElementTypes(graph); !error.empty())
    return error;
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
  // External data, read into the tensors before the checker, which would
  // open the files itself, wherever they named.
  {
    ExternalData external(path);
    for (onnx::TensorProto &tensor : *mutableGraph.mutable_initializer())
      if (tensor.data_location() == onnx::TensorProto::EXTERNAL || tensor.external_data_size() > 0)
        if (std::string error = external.read(tensor); !error.empty())
          return error;
  }
  // libonnx 1.12's checker knows opset 17 and IR version 8: a later model is
  // checked as its opset-17 form (toCheckerForm) at IR version 8, and its
  // own nodes put back for the importer.
  const bool later = model.opset > kCheckerOpset || model.irVersion > kCheckerIrVersion;
  google::protobuf::RepeatedPtrField<onnx::NodeProto> written;
  if (later) {
    written = graph.node();
    if (model.opset > kCheckerOpset)
      for (int i = 0; i < graph.node_size(); ++i)
        if (std::string why = toCheckerForm(*proto.mutable_graph()->mutable_node(i), model.opset);
            !why.empty())
          return where(graph.node(i), i) + ": " +
                 (why.rfind("not supported", 0) == 0
                      ? "op " + shown(graph.node(i).op_type()) + " (opset " +
                            std::to_string(model.opset) + ") is " + why
                      : why);
    for (onnx::OperatorSetIdProto &set : *proto.mutable_opset_import())
      if (set.domain().empty() || set.domain() == "ai.onnx")
        set.set_version(std::min(model.opset, kCheckerOpset));
    proto.set_ir_version(std::min(model.irVersion, kCheckerIrVersion));
  }
  try {
    onnx::checker::check_model(proto);
  } catch (const std::exception &e) {
    return "the ONNX checker refuses the model" +
           std::string(later ? " (checked as opset " + std::to_string(std::min(model.opset, kCheckerOpset)) +
                                   ", IR version " + std::to_string(std::min(model.irVersion, kCheckerIrVersion)) + ")"
                             : "") +
           ": " + oneLine(e.what());
  }
  if (later)
    proto.mutable_graph()->mutable_node()->Swap(&written);

  readTorchSignature(graph, model);
  // A signature naming neither a parameter nor a buffer is not one graphc
  // can go by (every weight would be a constant): the file is read without
  // it. (One naming only buffers leaves nothing to train: importNet says so.)
  if (model.torchParameters.empty() && model.torchBuffers.empty())
    model.hasTorchSignature = false;
  for (const std::string &name : model.torchParameters)
    if (model.torchBuffers.count(name))
      return "torch.export's graph signature names '" + shown(name) +
             "' both a parameter and a buffer";
  std::set<std::string> initialized;
  for (onnx::TensorProto &proto : *mutableGraph.mutable_initializer()) {
    Tensor &tensor = model.initializers.emplace_back();
    // (mutable_raw_data would mark raw data present in a tensor of typed lists.)
    if (std::string error =
            copyTensor(proto, tensor, proto.has_raw_data() ? proto.mutable_raw_data() : nullptr);
        !error.empty())
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
    // A Constant's value_float(s) and value_int(s) (opset 12) as the tensor
    // its 'value' would be: float32 or int64, rank 0 or 1.
    if (node.opType == "Constant" && node.domain.empty() && node.attributes.size() == 1) {
      auto [name, attribute] = *node.attributes.begin();
      const bool isFloat = name == "value_float" || name == "value_floats";
      const bool isInt = name == "value_int" || name == "value_ints";
      const bool scalar = name == "value_float" || name == "value_int";
      const bool kindOk = scalar ? (isFloat ? attribute.kind == Attribute::Kind::Float
                                            : attribute.kind == Attribute::Kind::Int)
                                 : (isFloat ? attribute.kind == Attribute::Kind::Floats
                                            : attribute.kind == Attribute::Kind::Ints);
      if ((isFloat || isInt) && kindOk) {
        Tensor value;
        value.name = node.outputs.empty() ? "" : node.outputs[0];
        value.type = isFloat ? ElementType::Float : ElementType::Int64;
        if (scalar) {
          value.values.push_back(isFloat ? static_cast<double>(static_cast<float>(attribute.f))
                                         : static_cast<double>(attribute.i));
        } else if (isFloat) {
          for (double f : attribute.floats)
            value.values.push_back(static_cast<double>(static_cast<float>(f)));
        } else {
          for (int64_t i : attribute.ints)
            value.values.push_back(static_cast<double>(i));
        }
        if (!scalar)
          value.dims.push_back(static_cast<int64_t>(value.values.size()));
        if (static_cast<int64_t>(value.values.size()) > (isFloat ? kMaxFoldedElements
                                                                 : kMaxFoldedIndices))
          return where(proto, i) + ": its '" + name + "' has more values than graphc folds";
        value.hasValues = true;
        node.attributes.clear();
        Attribute &tensor = node.attributes["value"];
        tensor.kind = Attribute::Kind::Tensor;
        tensor.tensor = std::move(value);
      }
    }
  }
  return "";
}

} // namespace onnx_model
} // namespace graphc
