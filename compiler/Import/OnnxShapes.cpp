//===- OnnxShapes.cpp - shape arithmetic and the ops that move data --------===//
//
// Exporters compute shapes inside the graph: ShuffleNet's channel shuffle
// reshapes to Concat(Unsqueeze(Gather(Shape(x), 0)), 2, Div(C, 2), H, W).
// With every non-batch dim of the images fixed, all of it is known at import
// but the batch: such integer vectors are folded here into `known`, the
// batch as the marker kBatch, and the ops that read them (Reshape, Slice,
// Split, ReduceMean's axes) take them as constants. Then the data movers:
// Concat, Slice, Split, Transpose, Reshape, ReduceMean.
//
//===----------------------------------------------------------------------===//

#include "compiler/Import/Importer.h"

#include <algorithm>
#include <limits>

namespace graphc {
namespace onnx_import {

std::optional<std::vector<int64_t>> Importer::knownInts(const std::string &name) {
  if (auto it = known.find(name); it != known.end())
    return it->second;
  const Tensor *t = nullptr;
  if (auto it = constants.find(name); it != constants.end())
    t = it->second;
  else if (auto it = initializers.find(name); it != initializers.end())
    t = it->second;
  if (!t || !t->hasValues || t->dims.size() > 1 ||
      (t->type != ElementType::Int64 && t->type != ElementType::Int32))
    return std::nullopt;
  // Values are kept as doubles: the int64 extremes exporters write for "to
  // the end" (INT64_MAX, INT64_MIN) saturate, never to the batch marker.
  std::vector<int64_t> ints;
  for (double v : t->values)
    ints.push_back(v >= 9.2e18    ? std::numeric_limits<int64_t>::max()
                   : v <= -9.2e18 ? std::numeric_limits<int64_t>::min() + 1
                                  : static_cast<int64_t>(v));
  return ints;
}

bool Importer::foldsToInts(const Node &n) {
  const std::string &op = n.opType;
  if (op == "Shape")
    return n.inputs.size() == 1 && (values.count(n.inputs[0]) || known.count(n.inputs[0]) ||
                                    initializers.count(n.inputs[0]));
  static const char *const folded[] = {"Gather", "Unsqueeze", "Squeeze", "Concat", "Add",
                                       "Sub",    "Mul",       "Div",     "Cast",   "Slice",
                                       "Identity", "Reshape", "ConstantOfShape", "Equal",
                                       "Where",  "Mod",       "Expand"};
  if (std::none_of(std::begin(folded), std::end(folded), [&](const char *f) { return op == f; }))
    return false;
  // Every operand an integer vector known here: folded from the images'
  // shape, or constant (the legacy exporter writes the batch it traced as
  // one).
  bool any = false;
  for (const std::string &input : n.inputs) {
    if (input.empty())
      continue;
    if (!knownInts(input))
      return false;
    any = true;
  }
  return any;
}

bool Importer::foldInts(const Node &n) {
  const std::string &op = n.opType;
  std::vector<int64_t> result;
  auto in = [&](size_t i) { return *knownInts(n.inputs[i]); };
  if (op == "Shape") {
    if (!knownAttributes(n, {"start", "end"}))
      return false;
    if (auto it = known.find(n.inputs[0]); it != known.end()) {
      // The shape of a shape: its length.
      result.push_back(static_cast<int64_t>(it->second.size()));
    } else if (!values.count(n.inputs[0])) {
      // An initializer's (reshape_as of a weight).
      result = initializers[n.inputs[0]]->dims;
    } else {
      auto type = llvm::cast<RankedTensorType>(values[n.inputs[0]].getType());
      for (int64_t d : type.getShape())
        result.push_back(ShapedType::isDynamic(d) ? kBatch : d);
    }
    const auto rank = static_cast<int64_t>(result.size());
    auto start = intAttr(n, "start", 0), end = intAttr(n, "end", rank);
    if (!start || !end)
      return false;
    int64_t s = std::clamp(*start < 0 ? *start + rank : *start, int64_t{0}, rank);
    int64_t e = std::clamp(*end < 0 ? *end + rank : *end, int64_t{0}, rank);
    result = s < e ? std::vector<int64_t>(result.begin() + s, result.begin() + e)
                   : std::vector<int64_t>{};
  } else if (op == "Gather") {
    if (!knownAttributes(n, {"axis"}) || n.inputs.size() != 2)
      return n.inputs.size() == 2 ? false : fail("expected two inputs");
    auto axis = intAttr(n, "axis", 0);
    if (!axis)
      return false;
    if (*axis != 0 && *axis != -1)
      return fail("a shape is gathered along axis 0 only");
    std::vector<int64_t> data = in(0);
    for (int64_t i : in(1)) {
      auto at = normalizedAxis(i, static_cast<int64_t>(data.size()));
      if (!at)
        return fail("index " + std::to_string(i) + " is outside the " +
                    std::to_string(data.size()) + " entries of '" +
                    onnx_model::shown(n.inputs[0]) + "'");
      result.push_back(data[*at]);
    }
  } else if (op == "Unsqueeze" || op == "Squeeze" || op == "Identity" || op == "Cast") {
    if (!knownAttributes(n, op == "Cast" ? std::initializer_list<const char *>{"to", "saturate"}
                                         : std::initializer_list<const char *>{"axes"}))
      return false;
    if (op == "Cast") {
      auto to = intAttr(n, "to", 0);
      if (!to)
        return false;
      if (*to != 7 && *to != 6) // INT64, INT32
        return fail("a shape is cast to an integer type only");
    }
    result = in(0);
    if (op == "Unsqueeze") {
      // A scalar made a vector of one, as exporters build shapes; anything
      // else would raise the rank of a vector, which is not a shape.
      auto axes = intsAttr(n, "axes", {});
      if (!axes)
        return false;
      std::vector<int64_t> given = *axes;
      if (n.inputs.size() > 1 && !n.inputs[1].empty())
        given = in(1);
      if (result.size() != 1 || given.size() != 1 || (given[0] != 0 && given[0] != -1))
        return fail("a shape is unsqueezed from one value along axis 0 only");
    }
  } else if (op == "Concat") {
    if (!knownAttributes(n, {"axis"}))
      return false;
    auto axis = intAttr(n, "axis", 0);
    if (!axis)
      return false;
    if (*axis != 0 && *axis != -1)
      return fail("shape vectors are concatenated along axis 0 only");
    size_t total = 0;
    for (size_t i = 0; i < n.inputs.size(); ++i)
      total += n.inputs[i].empty() ? 0 : knownInts(n.inputs[i])->size();
    if (total > static_cast<size_t>(onnx_model::kMaxFoldedIndices))
      return fail("a concatenated vector of more than 2^20 entries");
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      if (n.inputs[i].empty())
        continue;
      std::vector<int64_t> part = in(i);
      result.insert(result.end(), part.begin(), part.end());
    }
  } else if (op == "Slice") {
    if (!knownAttributes(n, {}) || n.inputs.size() < 3)
      return n.inputs.size() < 3 ? fail("expected data, starts and ends") : false;
    std::vector<int64_t> data = in(0), starts = in(1), ends = in(2);
    if (starts.size() != 1 || ends.size() != 1 ||
        (n.inputs.size() > 3 && !n.inputs[3].empty() && in(3) != std::vector<int64_t>{0}) ||
        (n.inputs.size() > 4 && !n.inputs[4].empty() && in(4) != std::vector<int64_t>{1}))
      return fail("a shape is sliced along axis 0 with step 1 only");
    const auto size = static_cast<int64_t>(data.size());
    auto clampIndex = [&](int64_t i) {
      return std::clamp(i < 0 ? i + size : i, int64_t{0}, size);
    };
    int64_t s = clampIndex(starts[0]), e = clampIndex(ends[0]);
    if (s < e)
      result.assign(data.begin() + s, data.begin() + e);
  } else if (op == "Reshape" || op == "Expand") {
    // Of a vector to a vector: the values as they are (shapes of rank 1 only).
    if (!knownAttributes(n, {"allowzero"}) || n.inputs.size() != 2)
      return n.inputs.size() == 2 ? false : fail("expected data and shape");
    std::vector<int64_t> target = in(1);
    result = in(0);
    const auto count = static_cast<int64_t>(result.size());
    if (op == "Reshape" ? target.size() != 1 || (target[0] != -1 && target[0] != count)
                        : target.size() != 1 || target[0] < 1 ||
                              (target[0] != 1 && target[0] != count && count != 1)) {
      const std::string what = std::string("a shape vector is ") +
                               (op == "Reshape" ? "reshaped" : "expanded") +
                               " to a shape other than a vector";
      // Index arithmetic on the batch (torch.export's as_strided, exported
      // with a symbolic batch) folds once the batch is a number.
      if (llvm::is_contained(result, kBatch) || llvm::is_contained(target, kBatch))
        return failBatch(what + ", from the batch size");
      return fail(what);
    }
    if (op == "Expand" && count == 1 && target[0] > 1) {
      if (target[0] > 8)
        return fail("a shape vector of more than 8 entries");
      result.assign(target[0], result[0]);
    }
  } else if (op == "ConstantOfShape") {
    if (!knownAttributes(n, {"value"}) || n.inputs.size() != 1)
      return n.inputs.size() == 1 ? false : fail("expected a shape");
    std::vector<int64_t> shape = in(0);
    int64_t value = 0;
    if (auto it = n.attributes.find("value"); it != n.attributes.end()) {
      const Tensor &t = it->second.tensor;
      if (it->second.kind != Attribute::Kind::Tensor || !t.hasValues || t.values.size() != 1 ||
          (t.type != ElementType::Int64 && t.type != ElementType::Int32)) {
        // A float tensor shaped by the open batch (EdgeNeXt's position
        // mask): constant once the batch is.
        if (llvm::is_contained(shape, kBatch))
          return failBatch("a constant tensor shaped by the batch");
        return fail("only an integer 'value' is folded");
      }
      const double v = t.values.front();
      value = v >= 9.2e18    ? std::numeric_limits<int64_t>::max()
              : v <= -9.2e18 ? std::numeric_limits<int64_t>::min() + 1
                             : static_cast<int64_t>(v);
    }
    if (shape.size() != 1 || shape[0] < 0 || shape[0] > 8)
      return fail("only a vector of at most 8 entries is folded");
    result.assign(shape[0], value);
  } else if (op == "Where") {
    if (!knownAttributes(n, {}) || n.inputs.size() != 3)
      return n.inputs.size() == 3 ? false : fail("expected a condition and two vectors");
    std::vector<int64_t> cond = in(0), x = in(1), y = in(2);
    const size_t size = std::max({cond.size(), x.size(), y.size()});
    for (const auto *v : {&cond, &x, &y})
      if (v->size() != size && v->size() != 1)
        return fail("vectors of " + std::to_string(cond.size()) + ", " +
                    std::to_string(x.size()) + " and " + std::to_string(y.size()) + " entries");
    auto at = [&](const std::vector<int64_t> &v, size_t i) { return v[v.size() == 1 ? 0 : i]; };
    for (size_t i = 0; i < size; ++i)
      result.push_back(at(cond, i) ? at(x, i) : at(y, i));
  } else { // Add, Sub, Mul, Div, Mod, Equal: numpy broadcasting of vectors
    if (!knownAttributes(n, op == "Mod" ? std::initializer_list<const char *>{"fmod"}
                                        : std::initializer_list<const char *>{}) ||
        n.inputs.size() != 2)
      return n.inputs.size() == 2 ? false : fail("expected two inputs");
    auto fmod = intAttr(n, "fmod", 0);
    if (!fmod)
      return false;
    std::vector<int64_t> lhs = in(0), rhs = in(1);
    if (lhs.size() != rhs.size() && lhs.size() != 1 && rhs.size() != 1)
      return fail("shape arithmetic on " + std::to_string(lhs.size()) + " and " +
                  std::to_string(rhs.size()) + " entries");
    for (size_t i = 0; i < std::max(lhs.size(), rhs.size()); ++i) {
      int64_t l = lhs[lhs.size() == 1 ? 0 : i], r = rhs[rhs.size() == 1 ? 0 : i];
      // The batch passes through arithmetic that leaves it as it is.
      if (op == "Equal") {
        // The batch equals itself and no constant (it is at least 1; the
        // constants compared with shapes are -1 and 0).
        if ((l == kBatch) != (r == kBatch) && (l == kBatch ? r : l) > 0)
          return failBatch("compares the batch size, which graphc leaves open until compile");
        result.push_back(l == r ? 1 : 0);
        continue;
      }
      if (l == kBatch || r == kBatch) {
        const int64_t other = l == kBatch ? r : l;
        const bool identity = (op == "Mul" && other == 1) || (op == "Div" && r == 1) ||
                              (op == "Add" && other == 0) || (op == "Sub" && r == 0);
        if (!identity || (l == kBatch && r == kBatch))
          return failBatch("arithmetic on the batch size, which graphc leaves open until compile");
        result.push_back(kBatch);
        continue;
      }
      if ((op == "Div" || op == "Mod") && r == 0)
        return fail("division by zero in shape arithmetic");
      // Within int32 either way: shapes here are dims of at most 2^20.
      if (std::abs(l) > (int64_t{1} << 31) || std::abs(r) > (int64_t{1} << 31))
        return fail("shape arithmetic on values beyond 2^31");
      // ONNX's integer Div truncates, as C++; Mod (fmod 0) takes the
      // divisor's sign, as Python.
      if (op == "Mod") {
        result.push_back(*fmod ? l % r : ((l % r) + r) % r);
        continue;
      }
      result.push_back(op == "Add"   ? l + r
                       : op == "Sub" ? l - r
                       : op == "Mul" ? l * r
                                     : l / r);
    }
  }
  if (n.outputs.empty() || n.outputs[0].empty())
    return true;
  if (values.count(n.outputs[0]) || !known.emplace(n.outputs[0], result).second)
    return fail("output '" + onnx_model::shown(n.outputs[0]) + "' is defined twice");
  // Whether the result is a scalar in the file (the constant folder keeps ranks).
  auto isScalar = [&](const std::string &name) {
    if (scalarInts.count(name))
      return true;
    const Tensor *t = constants.count(name)      ? constants[name]
                      : initializers.count(name) ? initializers[name]
                                                 : nullptr;
    return t && t->dims.empty();
  };
  bool scalarResult = false;
  if (op == "Gather")
    scalarResult = isScalar(n.inputs[1]);
  else if (op == "Squeeze")
    scalarResult = result.size() == 1;
  else if (op == "Identity" || op == "Cast")
    scalarResult = isScalar(n.inputs[0]);
  else if (op == "Where" || op == "Add" || op == "Sub" || op == "Mul" || op == "Div" ||
           op == "Mod" || op == "Equal")
    scalarResult = std::all_of(n.inputs.begin(), n.inputs.end(), isScalar);
  if (scalarResult)
    scalarInts.insert(n.outputs[0]);
  return true;
}

bool Importer::concat(const Node &n) {
  if (!knownAttributes(n, {"axis"}))
    return false;
  auto axis = intAttr(n, "axis", 0);
  if (!axis)
    return false;
  if (n.inputs.empty())
    return fail("expected at least one input");
  SmallVector<Value> inputs;
  for (const std::string &name : n.inputs) {
    Value v = activation(name);
    if (!v)
      return false;
    inputs.push_back(v);
  }
  auto rank = llvm::cast<RankedTensorType>(inputs.front().getType()).getRank();
  auto dim = normalizedAxis(*axis, rank);
  if (!dim)
    return fail("axis " + std::to_string(*axis) + " is outside rank " + std::to_string(rank));
  if (inputs.size() == 1)
    return define(n, inputs.front());
  return define(n, tryCreate<nn::ConcatOp>(ValueRange(inputs), b.getI64IntegerAttr(*dim)));
}

Value Importer::sliceOf(Value x, int64_t dim, int64_t start, int64_t end) {
  auto type = llvm::cast<RankedTensorType>(x.getType());
  const int64_t extent = type.getDimSize(dim);
  if (dim == 0 && type.isDynamicDim(0)) {
    // The batch is open; only the whole of it can be taken.
    if (start == 0 && end >= (int64_t{1} << 31))
      return x;
    failBatch("it slices the batch dim 0, which graphc leaves open until compile");
    return nullptr;
  }
  start = std::clamp(start < 0 ? start + extent : start, int64_t{0}, extent);
  end = std::clamp(end < 0 ? end + extent : end, int64_t{0}, extent);
  if (start >= end) {
    fail("an empty slice [" + std::to_string(start) + ", " + std::to_string(end) + ") of dim " +
         std::to_string(dim));
    return nullptr;
  }
  if (start == 0 && end == extent)
    return x;
  return tryCreate<nn::SliceOp>(x, b.getI64IntegerAttr(dim), b.getI64IntegerAttr(start),
                                b.getI64IntegerAttr(end - start));
}

bool Importer::slice(const Node &n) {
  if (!knownAttributes(n, {}))
    return false;
  if (n.inputs.size() < 3 || n.inputs.size() > 5)
    return fail("expected data, starts, ends and optional axes and steps");
  Value x = activation(n.inputs[0]);
  if (!x)
    return false;
  const auto rank = llvm::cast<RankedTensorType>(x.getType()).getRank();
  std::vector<std::optional<std::vector<int64_t>>> args;
  for (size_t i = 1; i < 5; ++i)
    args.push_back(i < n.inputs.size() && !n.inputs[i].empty() ? knownInts(n.inputs[i])
                                                               : std::nullopt);
  if (!args[0] || !args[1] || (n.inputs.size() > 3 && !n.inputs[3].empty() && !args[2]) ||
      (n.inputs.size() > 4 && !n.inputs[4].empty() && !args[3]))
    return fail("its starts, ends, axes and steps must be constants");
  const std::vector<int64_t> &starts = *args[0], &ends = *args[1];
  std::vector<int64_t> axes = args[2] ? *args[2] : std::vector<int64_t>();
  if (!args[2])
    for (size_t i = 0; i < starts.size(); ++i)
      axes.push_back(static_cast<int64_t>(i));
  if (ends.size() != starts.size() || axes.size() != starts.size() ||
      (args[3] && args[3]->size() != starts.size()))
    return fail("starts, ends, axes and steps differ in length");
  if (args[3] && llvm::any_of(*args[3], [](int64_t s) { return s < 1 || s > (1 << 20); }))
    return fail("only steps from 1 to 2^20 are supported");
  std::vector<bool> seen(rank, false);
  for (size_t i = 0; i < axes.size(); ++i) {
    auto dim = normalizedAxis(axes[i], rank);
    if (!dim || seen[*dim])
      return fail("axes must be distinct dims of the rank-" + std::to_string(rank) + " input");
    seen[*dim] = true;
    const int64_t step = args[3] ? (*args[3])[i] : 1;
    if (!(x = sliceOf(x, *dim, starts[i], ends[i])) || (step > 1 && !(x = everyNth(x, *dim, step))))
      return false;
  }
  return define(n, x);
}

Value Importer::everyNth(Value x, int64_t dim, int64_t step) {
  auto type = llvm::cast<RankedTensorType>(x.getType());
  const int64_t extent = type.getDimSize(dim);
  if (type.isDynamicDim(dim)) {
    failBatch("it slices the batch dim 0, which graphc leaves open until compile");
    return nullptr;
  }
  if (type.getRank() >= 8) {
    fail("a strided slice of a tensor of rank 8");
    return nullptr;
  }
  // Whole groups of `step`: [.., groups, step, ..] with the first of each
  // group taken, then the last, partial group's first element.
  const int64_t groups = extent / step;
  SmallVector<Value> parts;
  if (groups > 0) {
    Value whole = sliceOf(x, dim, 0, groups * step);
    if (!whole)
      return nullptr;
    auto shape = llvm::to_vector(type.getShape());
    shape[dim] = groups;
    SmallVector<int64_t> split(shape);
    split.insert(split.begin() + dim + 1, step);
    Value grouped = reshaped(whole, split);
    Value firsts = grouped ? sliceOf(grouped, dim + 1, 0, 1) : Value();
    if (!firsts)
      return nullptr;
    parts.push_back(reshaped(firsts, shape));
  }
  if (groups * step < extent)
    parts.push_back(sliceOf(x, dim, groups * step, groups * step + 1));
  if (llvm::any_of(parts, [](Value v) { return !v; }))
    return nullptr;
  return parts.size() == 1 ? parts.front()
                           : tryCreate<nn::ConcatOp>(ValueRange(parts), b.getI64IntegerAttr(dim));
}

std::optional<int64_t> Importer::fixedAxis(Value x, int64_t axis) {
  auto type = llvm::cast<RankedTensorType>(x.getType());
  auto dim = normalizedAxis(axis, type.getRank());
  if (!dim || type.isDynamicDim(*dim)) {
    fail("axis " + std::to_string(axis) + " is not a non-batch dim of rank " +
         std::to_string(type.getRank()));
    return std::nullopt;
  }
  return dim;
}

bool Importer::split(const Node &n) {
  if (!knownAttributes(n, {"axis", "num_outputs"}))
    return false;
  auto axis = intAttr(n, "axis", 0);
  if (!axis)
    return false;
  Value x = n.inputs.empty() ? Value() : activation(n.inputs[0]);
  if (!x)
    return n.inputs.empty() ? fail("expected an input") : false;
  auto dim = fixedAxis(x, *axis);
  if (!dim)
    return false;
  const int64_t extent = llvm::cast<RankedTensorType>(x.getType()).getDimSize(*dim);
  const auto parts = static_cast<int64_t>(n.outputs.size());
  const bool byCount = n.attributes.count("num_outputs") > 0;  // opset 18
  const bool bySizes = n.inputs.size() > 1 && !n.inputs[1].empty();
  if (byCount) {
    auto count = intAttr(n, "num_outputs", parts);
    if (!count)
      return false;
    if (*count != parts)
      return fail("num_outputs is " + std::to_string(*count) + " but it has " +
                  std::to_string(parts) + " outputs");
    if (bySizes)
      return fail("it has both split sizes and num_outputs (ONNX takes one)");
  }
  std::vector<int64_t> sizes;
  if (bySizes) {
    auto given = knownInts(n.inputs[1]);
    if (!given)
      return fail("its split sizes must be constants");
    sizes = *given;
  } else {
    // Equal parts; by num_outputs (opset 18) the last smaller when they do
    // not divide.
    if (parts < 1 || (!byCount && extent % parts != 0))
      return fail("its " + std::to_string(parts) + " outputs do not split dim " +
                  std::to_string(*dim) + " of size " + std::to_string(extent) + " equally");
    const int64_t part = (extent + parts - 1) / parts;
    for (int64_t i = 0, left = extent; i < parts; ++i, left -= part)
      sizes.push_back(std::min(part, left));
  }
  int64_t total = 0;
  for (int64_t s : sizes)
    total += s < 1 || s > extent ? extent + 1 : s;  // at most parts * (extent + 1)
  if (static_cast<int64_t>(sizes.size()) != parts || total != extent)
    return fail("its " + std::to_string(parts) + " outputs do not split dim " +
                std::to_string(*dim) + " of size " + std::to_string(extent));
  for (int64_t i = 0, start = 0; i < parts; start += sizes[i++]) {
    Value part = sliceOf(x, *dim, start, start + sizes[i]);
    if (!define(n, part, static_cast<size_t>(i)))
      return false;
  }
  return true;
}

bool Importer::splitToSequence(const Node &n) {
  if (!knownAttributes(n, {"axis", "keepdims"}))
    return false;
  auto axis = intAttr(n, "axis", 0);
  auto keepDims = intAttr(n, "keepdims", 1);
  if (!axis || !keepDims)
    return false;
  if (n.inputs.empty() || n.inputs.size() > 2 || n.outputs.size() != 1)
    return fail("expected an input, optional split sizes and one output");
  Value x = activation(n.inputs[0]);
  if (!x)
    return false;
  auto dim = fixedAxis(x, *axis);
  if (!dim)
    return false;
  const int64_t extent = llvm::cast<RankedTensorType>(x.getType()).getDimSize(*dim);
  // The parts' sizes: given, chunks of one given size (the last smaller),
  // or every element alone (keepdims 0 then drops the dim).
  std::vector<int64_t> sizes;
  bool squeezed = false;
  if (n.inputs.size() == 2 && !n.inputs[1].empty()) {
    const Folded *given = constantTensor(n.inputs[1]);
    if (!given || (given->type != ElementType::Int64 && given->type != ElementType::Int32) ||
        given->dims.size() > 1)
      return fail("its split must be an integer constant of rank 0 or 1");
    if (given->dims.empty()) {
      const auto chunk = static_cast<int64_t>(given->values.front());
      if (chunk < 1 || (extent + chunk - 1) / chunk > 4096)
        return fail("a chunk size of " + std::to_string(chunk) + " (at most 4096 parts of dim " +
                    std::to_string(*dim) + ", of size " + std::to_string(extent) + ")");
      for (int64_t left = extent; left > 0; left -= chunk)
        sizes.push_back(std::min(chunk, left));
    } else {
      for (double v : given->values)
        sizes.push_back(v < 1 || v > double(extent) ? extent + 1 : static_cast<int64_t>(v));
    }
  } else {
    if (extent > 4096)
      return fail("dim " + std::to_string(*dim) + " of size " + std::to_string(extent) +
                  " split into single elements (at most 4096 parts)");
    sizes.assign(static_cast<size_t>(extent), 1);
    squeezed = *keepDims == 0;
  }
  int64_t total = 0;
  for (int64_t size : sizes)
    total += size;
  if (total != extent || sizes.size() > 4096)
    return fail("its split does not divide dim " + std::to_string(*dim) + " of size " +
                std::to_string(extent) + " into at most 4096 parts");
  std::vector<Value> parts;
  int64_t start = 0;
  for (int64_t size : sizes) {
    Value part = sliceOf(x, *dim, start, start + size);
    if (part && squeezed) {
      auto shape = llvm::to_vector(llvm::cast<RankedTensorType>(part.getType()).getShape());
      shape.erase(shape.begin() + *dim);
      part = reshaped(part, shape);
    }
    if (!part)
      return false;
    parts.push_back(part);
    start += size;
  }
  if (!sequences.emplace(n.outputs[0], std::move(parts)).second)
    return fail("output '" + onnx_model::shown(n.outputs[0]) + "' is defined twice");
  return true;
}

bool Importer::sequenceAt(const Node &n) {
  if (!knownAttributes(n, {}))
    return false;
  if (n.inputs.size() != 2)
    return fail("expected a sequence and a position");
  auto it = sequences.find(n.inputs[0]);
  if (it == sequences.end())
    return fail("its sequence '" + onnx_model::shown(n.inputs[0]) +
                "' is not one SplitToSequence made");
  auto position = knownInts(n.inputs[1]);
  const auto count = static_cast<int64_t>(it->second.size());
  if (!position || position->size() != 1 || (*position)[0] < -count || (*position)[0] >= count)
    return fail("its position must be a constant in [-" + std::to_string(count) + ", " +
                std::to_string(count) + ")");
  const int64_t at = (*position)[0] < 0 ? (*position)[0] + count : (*position)[0];
  return define(n, it->second[static_cast<size_t>(at)]);
}

bool Importer::transpose(const Node &n) {
  if (!knownAttributes(n, {"perm"}))
    return false;
  Value x = n.inputs.size() == 1 ? activation(n.inputs[0]) : Value();
  if (!x)
    return n.inputs.size() == 1 ? false : fail("expected one input");
  const auto rank = llvm::cast<RankedTensorType>(x.getType()).getRank();
  std::vector<int64_t> reversed;
  for (int64_t d = rank - 1; d >= 0; --d)
    reversed.push_back(d);
  auto perm = intsAttr(n, "perm", reversed);
  if (!perm)
    return false;
  auto type = llvm::cast<RankedTensorType>(x.getType());
  if (perm->empty() || (type.isDynamicDim(0) && perm->front() != 0))
    return failBatch("the batch must stay dim 0");
  return define(n, tryCreate<nn::TransposeOp>(x, b.getDenseI64ArrayAttr(*perm)));
}

bool Importer::reshape(const Node &n) {
  if (!knownAttributes(n, {"allowzero"}))
    return false;
  auto allowZero = intAttr(n, "allowzero", 0);
  if (!allowZero)
    return false;
  if (n.inputs.size() != 2)
    return fail("expected data and shape");
  Value x = activation(n.inputs[0]);
  if (!x)
    return false;
  auto shape = knownInts(n.inputs[1]);
  if (!shape)
    return fail("its shape '" + onnx_model::shown(n.inputs[1]) +
                "' is not known at import (a constant, or arithmetic on static shapes)");
  auto type = llvm::cast<RankedTensorType>(x.getType());
  std::vector<int64_t> target = *shape;
  if (type.hasStaticShape()) {
    // An inference model's reshape: every extent known.
    int64_t total = type.getNumElements(), product = 1, inferred = -1;
    for (size_t i = 0; i < target.size(); ++i) {
      int64_t &d = target[i];
      if (d == 0 && !*allowZero) {
        if (static_cast<int64_t>(i) >= type.getRank())
          return fail("entry " + std::to_string(i) + " copies a dim the input does not have");
        d = type.getDimSize(i);
      }
      if (d == -1 && inferred < 0) {
        inferred = static_cast<int64_t>(i);
        continue;
      }
      if (d < 1 || d > total / product)
        return fail("its shape does not hold the input's " + std::to_string(total) +
                    " elements");
      product *= d;
    }
    if (inferred >= 0) {
      if (total % product != 0)
        return fail("the -1 of its shape does not divide " + std::to_string(total));
      target[inferred] = total / product;
      product = total;
    }
    if (product != total)
      return fail("its shape holds " + std::to_string(product) + " elements, the input " +
                  std::to_string(total));
    return define(n, tryCreate<nn::ReshapeOp>(x, b.getDenseI64ArrayAttr(target)));
  }
  // The first entry must be the batch: the batch itself, a copy of dim 0,
  // the batch the file was exported with, or -1 over whole samples.
  if (target.empty())
    return failBatch("a reshape to a scalar drops the batch");
  const int64_t exportedBatch = model.inputs.front().dims.front();
  const bool batchFirst = target[0] == kBatch || (target[0] == 0 && !*allowZero) ||
                          (exportedBatch > 0 && target[0] == exportedBatch) || target[0] == -1;
  if (!batchFirst)
    return failBatch("its shape must keep the batch as dim 0");
  int64_t perSample = 1;
  for (int64_t d : type.getShape().drop_front())
    perSample *= d;
  int64_t product = 1, inferred = -1;
  for (size_t i = 1; i < target.size(); ++i) {
    int64_t &d = target[i];
    if (d == 0 && !*allowZero) {
      if (static_cast<int64_t>(i) >= type.getRank())
        return failBatch("entry " + std::to_string(i) + " copies a dim the input does not have");
      d = type.getDimSize(i);
    }
    if (d == -1 && inferred < 0 && target[0] != -1) {
      inferred = static_cast<int64_t>(i);
      continue;
    }
    if (d < 1 || d > (int64_t{1} << 31))
      return failBatch("entry " + std::to_string(i) + " of its shape is " +
                  (d == kBatch ? std::string("the batch size") : std::to_string(d)));
    if (d > perSample / product)
      return failBatch("its shape holds more than the input's " + std::to_string(perSample) +
                  " elements per sample");
    product *= d;
  }
  if (inferred > 0) {
    if (product == 0 || perSample % product != 0)
      return failBatch("the -1 of its shape does not divide " + std::to_string(perSample));
    target[inferred] = perSample / product;
    product = perSample;
  }
  if (product != perSample) {
    // Everything flattened, batch and all: torch.export's as_strided (a
    // Gather of every element in order from it, gatherOne) may restore the
    // batch; anything else reading it is the batch error (activation).
    if (target.size() == 1 && (*shape)[0] == -1 && n.outputs.size() == 1) {
      flattenedWithBatch[n.outputs[0]] = x;
      return true;
    }
    return failBatch("its shape holds " + std::to_string(product) + " elements per sample, the input " +
                std::to_string(perSample));
  }
  target[0] = -1;
  return define(n, tryCreate<nn::ReshapeOp>(x, b.getDenseI64ArrayAttr(target)));
}

bool Importer::reduce(const Node &n, bool sum) {
  if (!knownAttributes(n, {"axes", "keepdims", "noop_with_empty_axes"}))
    return false;
  auto keepDims = intAttr(n, "keepdims", 1);
  auto noop = intAttr(n, "noop_with_empty_axes", 0);
  auto axesAttr = intsAttr(n, "axes", {});
  if (!keepDims || !noop || !axesAttr)
    return false;
  Value x = n.inputs.empty() ? Value() : activation(n.inputs[0]);
  if (!x)
    return n.inputs.empty() ? fail("expected an input") : false;
  std::vector<int64_t> axes = *axesAttr;
  if (n.inputs.size() > 1 && !n.inputs[1].empty()) {
    auto given = knownInts(n.inputs[1]);
    if (!given)
      return fail("its axes must be constants");
    axes = *given;
  }
  auto type = llvm::cast<RankedTensorType>(x.getType());
  const auto rank = type.getRank();
  if (axes.empty()) {
    if (*noop)
      return define(n, x);
    if (type.isDynamicDim(0))
      return fail(std::string(sum ? "a sum" : "a mean") + " over every dim includes the batch");
    for (int64_t d = 0; d < rank; ++d)
      axes.push_back(d);
  }
  SmallVector<int64_t> dims;
  for (int64_t a : axes) {
    auto dim = normalizedAxis(a, rank);
    if (!dim || type.isDynamicDim(*dim) || llvm::is_contained(dims, *dim))
      return fail("axes must be distinct non-batch dims of the rank-" + std::to_string(rank) +
                  " input");
    dims.push_back(*dim);
  }
  llvm::sort(dims);
  const auto dimsAttr = b.getDenseI64ArrayAttr(dims);
  const UnitAttr keep = *keepDims ? b.getUnitAttr() : UnitAttr();
  if (n.opType == "ReduceL2") {
    // sqrt(s) as s * rsqrt(max(s, the least normal float)): 0 where s is 0
    // (F.normalize's zero rows), and the gradient 0 there too.
    Value squares = tryCreate<nn::MulOp>(x, x);
    Value s = squares ? tryCreate<nn::ReduceSumOp>(squares, dimsAttr, keep) : Value();
    Value least = s ? scalarLike(1.17549435e-38, s) : Value();
    Value floored = least ? tryCreate<nn::MaxOp>(s, least) : Value();
    Value inv = floored ? tryCreate<nn::RsqrtOp>(floored) : Value();
    return define(n, inv ? tryCreate<nn::MulOp>(s, inv) : Value());
  }
  return define(n, sum ? tryCreate<nn::ReduceSumOp>(x, dimsAttr, keep)
                       : tryCreate<nn::ReduceMeanOp>(x, dimsAttr, keep));
}

} // namespace onnx_import
} // namespace graphc
