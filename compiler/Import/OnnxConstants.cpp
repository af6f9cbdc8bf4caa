//===- OnnxConstants.cpp - constant tensors folded at import ---------------===//
//
// Exporters compute some tensors from constants alone: Swin's attention mask
// (ConstantOfShape, index_put as Range/ScatterND, Reshape, Transpose, Sub,
// Equal, Not, Where), F.pad's pad vector (Reshape to pairs, a reversing
// Slice, Transpose), index tables. Every node whose inputs are all known
// constants (Constant nodes, integer and boolean initializers, tensors folded
// here, and shape vectors folded without the batch) is evaluated here in
// double precision with ONNX's rules, float32 results rounded to float32, so
// what reaches the compiler is the model's compute and at most one
// nn.constant per tensor the model reads. Float initializers are never
// constants: they are trained.
//
//===----------------------------------------------------------------------===//

#include "compiler/Import/Importer.h"

#include "llvm/ADT/bit.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

namespace graphc {
namespace onnx_import {

namespace {

using Folded = Importer::Folded;
using onnx_model::kMaxFoldedElements;
using onnx_model::kMaxFoldedIndices;
using onnx_model::kMaxFoldedTensor;
using onnx_model::kMaxFoldedTotal;

// The element count, saturating at 2^40 (beyond any limit here) so that
// dims whose product overflows int64 are never taken for a small tensor.
int64_t countOf(const std::vector<int64_t> &dims) {
  constexpr int64_t kHuge = int64_t{1} << 40;
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0)
      return kHuge;
    if (d != 0 && n > kHuge / d)
      return kHuge;
    n *= d;
  }
  return std::min(n, kHuge);
}

// The iterations of a loop nest over `dims`, a dim of 0 counted as 1
// (saturating as countOf): what bounds a folder's loops and index products
// even where a tensor has no elements ([2^24, 2^24, 0] has none).
int64_t spanOf(const std::vector<int64_t> &dims) {
  std::vector<int64_t> nonzero;
  for (int64_t d : dims)
    nonzero.push_back(d == 0 ? 1 : d);
  return countOf(nonzero);
}

// Row-major strides.
std::vector<int64_t> stridesOf(const std::vector<int64_t> &dims) {
  std::vector<int64_t> strides(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;)
    strides[i - 1] = strides[i] * dims[i];
  return strides;
}

bool isInteger(ElementType t) {
  return t == ElementType::Int64 || t == ElementType::Int32 || t == ElementType::Bool;
}

// A value stored as `type` stores it: float32 rounded, integers truncated
// (saturating at int64's extremes, which exporters write for "to the end").
double stored(double v, ElementType type) {
  switch (type) {
  case ElementType::Float:
    return static_cast<double>(static_cast<float>(v));
  case ElementType::Bool:
    return v != 0 ? 1 : 0;
  case ElementType::Int32: {
    // Wrapped to 32 bits, as a cast does (values beyond 2^53 are not exact
    // here: the folder holds doubles).
    if (!std::isfinite(v))
      return 0;
    const double wrapped = std::fmod(std::trunc(v), 4294967296.0);
    const double positive = wrapped < 0 ? wrapped + 4294967296.0 : wrapped;
    return positive >= 2147483648.0 ? positive - 4294967296.0 : positive;
  }
  case ElementType::Int64:
    if (std::isnan(v))
      return 0;
    return std::clamp(std::trunc(v), -9.2e18, 9.2e18);
  default:
    return v;
  }
}

int64_t asIndex(double v) {
  return v >= 9.2e18 ? std::numeric_limits<int64_t>::max()
         : v <= -9.2e18 ? std::numeric_limits<int64_t>::min() + 1
                        : static_cast<int64_t>(v);
}

std::optional<ElementType> typeFromOnnx(int64_t to) {
  switch (to) {
  case 1:
    return ElementType::Float;
  case 6:
    return ElementType::Int32;
  case 7:
    return ElementType::Int64;
  case 9:
    return ElementType::Bool;
  case 11:
    return ElementType::Double;
  default:
    return std::nullopt;
  }
}

// numpy's broadcast of two shapes, if they broadcast.
std::optional<std::vector<int64_t>> broadcastShapes(const std::vector<int64_t> &a,
                                                    const std::vector<int64_t> &b) {
  std::vector<int64_t> out(std::max(a.size(), b.size()));
  for (size_t i = 0; i < out.size(); ++i) {
    const int64_t x = i < out.size() - a.size() ? 1 : a[i - (out.size() - a.size())];
    const int64_t y = i < out.size() - b.size() ? 1 : b[i - (out.size() - b.size())];
    if (x != y && x != 1 && y != 1)
      return std::nullopt;
    out[i] = x == 1 ? y : x;
  }
  return out;
}

// The element of `t` that result index `flat` (of `dims`) reads under
// broadcasting.
int64_t broadcastIndex(const Folded &t, const std::vector<int64_t> &dims, int64_t flat) {
  int64_t at = 0, stride = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    const int64_t coord = flat % dims[i];
    flat /= dims[i];
    const size_t rank = t.dims.size(), offset = dims.size() - rank;
    if (i >= offset) {
      const int64_t d = t.dims[i - offset];
      if (d != 1)
        at += coord * stride;
      stride *= d;
    }
  }
  return at;
}

} // namespace

const Folded *Importer::constantTensor(const std::string &name) {
  if (name.empty() || values.count(name))
    return nullptr;
  if (auto it = tensors.find(name); it != tensors.end())
    return &it->second;
  Folded t;
  if (auto it = known.find(name); it != known.end()) {
    if (llvm::is_contained(it->second, kBatch))
      return nullptr;
    t.type = ElementType::Int64;
    if (!scalarInts.count(name))
      t.dims = {static_cast<int64_t>(it->second.size())};
    for (int64_t v : it->second)
      t.values.push_back(static_cast<double>(v));
  } else if (auto it = knownScalars.find(name); it != knownScalars.end()) {
    t.type = ElementType::Float;
    t.values = {it->second};
  } else {
    const Tensor *source = constants.count(name) ? constants[name] : nullptr;
    if (!source && initializers.count(name) && isInteger(initializers[name]->type))
      source = initializers[name];
    if (!source || !source->hasValues ||
        (!isInteger(source->type) && source->type != ElementType::Float &&
         source->type != ElementType::Double))
      return nullptr;
    t.type = source->type;
    t.dims = source->dims;
    t.values = source->values;
  }
  if (static_cast<int64_t>(t.values.size()) != countOf(t.dims) ||
      spanOf(t.dims) > kMaxFoldedTensor)
    return nullptr;
  return &tensors.emplace(name, std::move(t)).first->second;
}

bool Importer::foldsToTensor(const Node &n) {
  static const char *const ops[] = {
      "Identity", "Cast",  "Shape",     "Reshape", "Squeeze", "Unsqueeze", "Transpose",
      "Concat",   "Slice", "Gather",    "Expand",  "Range",   "ConstantOfShape",
      "ScatterND", "Where", "Not",      "And",     "Or",      "Equal",   "Less",
      "Greater",  "LessOrEqual", "GreaterOrEqual", "Add", "Sub", "Mul", "Div", "Mod", "Pow",
      "Neg",      "Sqrt",  "Reciprocal", "Abs",    "Floor",   "Ceil",    "Clip",  "CumSum", "Sin",  "Cos",     "Exp",     "Log",
      "Max",      "Min",   "Sign"};
  if (std::none_of(std::begin(ops), std::end(ops), [&](const char *op) { return n.opType == op; }))
    return false;
  bool any = false;
  for (const std::string &input : n.inputs) {
    if (input.empty())
      continue;
    if (!constantTensor(input))
      return false;
    any = true;
  }
  return any;
}

std::optional<std::vector<int64_t>> Importer::scatterOffsets(const std::vector<int64_t> &dims,
                                                             const Folded &indices,
                                                             const Folded &updates,
                                                             int64_t &slice) {
  auto reduction = stringAttr(*node, "reduction", "none");
  if (!reduction)
    return std::nullopt;
  if (*reduction != "none") {
    fail("reduction '" + onnx_model::shown(*reduction) + "' (only none)");
    return std::nullopt;
  }
  const auto rank = static_cast<int64_t>(dims.size());
  if (!isInteger(indices.type)) {
    fail("indices must be integers");
    return std::nullopt;
  }
  if (indices.dims.empty() || indices.dims.back() > rank || indices.dims.back() < 1) {
    fail("indices of shape whose last dim is not in [1, the data's rank]");
    return std::nullopt;
  }
  const int64_t k = indices.dims.back();
  slice = countOf(std::vector<int64_t>(dims.begin() + k, dims.end()));
  const int64_t rows = static_cast<int64_t>(indices.values.size()) / k;
  std::vector<int64_t> wanted(indices.dims.begin(), indices.dims.end() - 1);
  wanted.insert(wanted.end(), dims.begin() + k, dims.end());
  if (updates.dims != wanted) {
    fail("updates are not of the shape the indices and data give");
    return std::nullopt;
  }
  const std::vector<int64_t> strides = stridesOf(dims);
  std::vector<int64_t> offsets;
  for (int64_t r = 0; r < rows; ++r) {
    int64_t at = 0;
    for (int64_t j = 0; j < k; ++j) {
      int64_t i = asIndex(indices.values[r * k + j]);
      if (i < -dims[j] || i >= dims[j]) {
        fail("index " + std::to_string(i) + " is outside dim " + std::to_string(j) +
             " of size " + std::to_string(dims[j]));
        return std::nullopt;
      }
      at += (i < 0 ? i + dims[j] : i) * strides[j];
    }
    offsets.push_back(at);
  }
  return offsets;
}

// ScatterND into an activation or a parameter (Swin V2's qkv bias with its
// key part zeroed, PyTorch's clone and zero_ of a slice) of constant updates
// at constant indices: a select between the updates and x by a constant
// mask, so those elements get no gradient, the rest all of it, and an inf
// or NaN that x held there is replaced as ONNX replaces it.
bool Importer::scatterInto(const Node &n) {
  if (!knownAttributes(n, {"reduction"}))
    return false;
  if (n.inputs.size() != 3)
    return fail("expected data, indices and updates");
  Value x = activation(n.inputs[0]);
  if (!x)
    return false;
  const Folded *indices = constantTensor(n.inputs[1]);
  const Folded *updates = constantTensor(n.inputs[2]);
  if (indices && !updates && values.count(n.inputs[2]))
    return scatterWhole(n, x, *indices, values[n.inputs[2]]);
  if (!indices || !updates || isInteger(updates->type))
    return fail("its indices and updates must be constants (float updates)");
  auto type = llvm::cast<RankedTensorType>(x.getType());
  if (!type.hasStaticShape())
    return failBatch("the data's shape must be fixed");
  if (type.getNumElements() > kMaxFoldedIndices)
    return fail("the data must have at most 2^20 elements");
  std::vector<int64_t> dims(type.getShape().begin(), type.getShape().end());
  int64_t slice = 0;
  std::optional<std::vector<int64_t>> at = scatterOffsets(dims, *indices, *updates, slice);
  if (!at)
    return false;
  std::vector<float> keep(static_cast<size_t>(type.getNumElements()), 1.0f);
  std::vector<float> placed(keep.size(), 0.0f);
  for (size_t r = 0; r < at->size(); ++r)
    for (int64_t e = 0; e < slice; ++e) {
      keep[(*at)[r] + e] = 0.0f;
      placed[(*at)[r] + e] =
          static_cast<float>(updates->values[static_cast<int64_t>(r) * slice + e]);
    }
  auto constant = [&](const std::vector<float> &v) {
    return tryCreate<nn::ConstantOp>(
        llvm::cast<ElementsAttr>(DenseElementsAttr::get(type, ArrayRef<float>(v))));
  };
  Value mask = constant(keep);
  Value half = mask ? scalarLike(0.5, mask) : Value();
  Value replaced = half ? tryCreate<nn::CmpOp>(nn::CmpPredicate::lt, mask, half) : Value();
  Value p = replaced ? constant(placed) : Value();
  return define(n, p ? tryCreate<nn::SelectOp>(replaced, p, x) : Value());
}

bool Importer::scatterWhole(const Node &n, Value x, const Folded &indices, Value updates) {
  // torch.export's slice_scatter of a whole dim (GhostNet's): every element
  // of x replaced by the updates' in order, which are then the result.
  auto type = llvm::cast<RankedTensorType>(x.getType());
  auto updatesType = llvm::cast<RankedTensorType>(updates.getType());
  if (!type.hasStaticShape() || !updatesType.hasStaticShape())
    return failBatch("the data's shape must be fixed");
  Folded shape;
  shape.dims.assign(updatesType.getShape().begin(), updatesType.getShape().end());
  std::vector<int64_t> dims(type.getShape().begin(), type.getShape().end());
  int64_t slice = 0;
  std::optional<std::vector<int64_t>> at = scatterOffsets(dims, indices, shape, slice);
  if (!at)
    return false;
  bool whole = static_cast<int64_t>(at->size()) * slice == type.getNumElements();
  for (size_t r = 0; whole && r < at->size(); ++r)
    whole = (*at)[r] == static_cast<int64_t>(r) * slice;
  if (!whole)
    return fail("its updates are an activation, which graphc takes only when they replace "
                "every element in order (constant updates anywhere)");
  return define(n, reshaped(updates, type.getShape()));
}

bool Importer::foldTensor(const Node &n) {
  const std::string &op = n.opType;
  std::vector<const Folded *> in;
  for (const std::string &input : n.inputs)
    in.push_back(input.empty() ? nullptr : constantTensor(input));
  auto input = [&](size_t i) -> const Folded * { return i < in.size() ? in[i] : nullptr; };
  if (!input(0))
    return fail("expected a first input");
  // The values of an optional integer input (or attribute) as int64s.
  auto ints = [&](const Folded *t) {
    std::vector<int64_t> v;
    for (double x : t->values)
      v.push_back(asIndex(x));
    return v;
  };
  const Folded &x = *input(0);
  const auto rank = static_cast<int64_t>(x.dims.size());
  Folded result;
  result.type = x.type;
  // The inputs' shapes broadcast together (numpy's rules); nullopt after an
  // error.
  auto broadcastAll = [&]() -> std::optional<std::vector<int64_t>> {
    std::vector<int64_t> dims = x.dims;
    for (const Folded *t : in) {
      auto joined = broadcastShapes(dims, t->dims);
      if (!joined) {
        fail("constants of shapes that do not broadcast");
        return std::nullopt;
      }
      dims = *joined;
    }
    if (spanOf(dims) > kMaxFoldedTensor) {
      fail("a constant of more than 2^24 elements");
      return std::nullopt;
    }
    return dims;
  };
  // The node's 'axis' (its only attribute) in x's rank; nullopt after an error.
  auto axisOf = [&]() -> std::optional<int64_t> {
    if (!knownAttributes(n, {"axis"}))
      return std::nullopt;
    auto attr = intAttr(n, "axis", 0);
    if (!attr)
      return std::nullopt;
    auto axis = normalizedAxis(*attr, rank);
    if (!axis)
      fail("axis " + std::to_string(*attr) + " is outside rank " + std::to_string(rank));
    return axis;
  };

  if (op == "Identity") {
    if (!knownAttributes(n, {}))
      return false;
    result = x;
  } else if (op == "Cast") {
    if (!knownAttributes(n, {"to", "saturate"}))
      return false;
    auto to = intAttr(n, "to", 0);
    if (!to)
      return false;
    auto type = typeFromOnnx(*to);
    if (!type)
      return fail("a constant is cast to type " + std::to_string(*to) +
                  " (folded: float, double, int32, int64, bool)");
    result.type = *type;
    result.dims = x.dims;
    for (double v : x.values)
      result.values.push_back(stored(v, *type));
  } else if (op == "Shape") {
    if (!knownAttributes(n, {"start", "end"}))
      return false;
    auto start = intAttr(n, "start", 0), end = intAttr(n, "end", rank);
    if (!start || !end)
      return false;
    int64_t s = std::clamp(*start < 0 ? *start + rank : *start, int64_t{0}, rank);
    int64_t e = std::clamp(*end < 0 ? *end + rank : *end, int64_t{0}, rank);
    result.type = ElementType::Int64;
    for (int64_t i = s; i < e; ++i)
      result.values.push_back(static_cast<double>(x.dims[i]));
    result.dims = {static_cast<int64_t>(result.values.size())};
  } else if (op == "Reshape") {
    if (!knownAttributes(n, {"allowzero"}) || !input(1))
      return input(1) ? false : fail("expected data and shape");
    auto allowZero = intAttr(n, "allowzero", 0);
    if (!allowZero)
      return false;
    std::vector<int64_t> shape = ints(input(1));
    int64_t known = 1, infer = -1;
    for (size_t i = 0; i < shape.size(); ++i) {
      if (shape[i] == 0 && !*allowZero) {
        if (i >= x.dims.size())
          return fail("reshape copies dim " + std::to_string(i) + " of a rank " +
                      std::to_string(rank) + " constant");
        shape[i] = x.dims[i];
      }
      if (shape[i] == -1) {
        if (infer >= 0)
          return fail("reshape to a shape with two -1 entries");
        infer = static_cast<int64_t>(i);
      } else if (shape[i] < 0 || shape[i] > kMaxFoldedTensor) {
        return fail("reshape to dim " + std::to_string(shape[i]));
      } else {
        // Saturates past any constant's size (each factor <= 2^24).
        known = known > (int64_t{1} << 36) ? known : known * shape[i];
      }
    }
    const auto count = static_cast<int64_t>(x.values.size());
    if (infer >= 0) {
      if (known == 0 || count % known)
        return fail("cannot reshape " + std::to_string(count) + " elements");
      shape[infer] = count / known;
    }
    if (countOf(shape) != count || shape.size() > 8)
      return fail("cannot reshape " + std::to_string(count) + " elements to this shape");
    result = x;
    result.dims = shape;
  } else if (op == "Squeeze" || op == "Unsqueeze") {
    if (!knownAttributes(n, {"axes"}))
      return false;
    auto attr = intsAttr(n, "axes", {});
    if (!attr)
      return false;
    std::vector<int64_t> axes = input(1) ? ints(input(1)) : *attr;
    result = x;
    if (op == "Squeeze") {
      std::vector<bool> drop(x.dims.size(), axes.empty());
      for (int64_t a : axes) {
        auto d = normalizedAxis(a, rank);
        if (!d || x.dims[*d] != 1)
          return fail("squeeze of axis " + std::to_string(a) + " of a constant");
        drop[*d] = true;
      }
      result.dims.clear();
      for (size_t i = 0; i < x.dims.size(); ++i)
        if (!drop[i] || x.dims[i] != 1)
          result.dims.push_back(x.dims[i]);
    } else {
      const auto outRank = rank + static_cast<int64_t>(axes.size());
      std::vector<bool> added(outRank, false);
      for (int64_t a : axes) {
        auto d = normalizedAxis(a, outRank);
        if (!d || added[*d])
          return fail("unsqueeze to axis " + std::to_string(a) + " of a constant");
        added[*d] = true;
      }
      if (outRank > 8)
        return fail("a constant of rank over 8");
      result.dims.clear();
      for (int64_t i = 0, j = 0; i < outRank; ++i)
        result.dims.push_back(added[i] ? 1 : x.dims[j++]);
    }
  } else if (op == "Transpose") {
    if (!knownAttributes(n, {"perm"}))
      return false;
    std::vector<int64_t> reversed(rank);
    std::iota(reversed.rbegin(), reversed.rend(), 0);
    auto perm = intsAttr(n, "perm", reversed);
    if (!perm)
      return false;
    std::vector<int64_t> sorted = *perm;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int64_t> identity(rank);
    std::iota(identity.begin(), identity.end(), 0);
    if (sorted != identity)
      return fail("perm is not a permutation of the constant's " + std::to_string(rank) +
                  " dims");
    const std::vector<int64_t> inStrides = stridesOf(x.dims);
    for (int64_t p : *perm)
      result.dims.push_back(x.dims[p]);
    const std::vector<int64_t> outStrides = stridesOf(result.dims);
    result.values.resize(x.values.size());
    for (int64_t flat = 0; flat < static_cast<int64_t>(x.values.size()); ++flat) {
      int64_t from = 0;
      for (int64_t i = 0; i < rank; ++i)
        from += (flat / outStrides[i]) % result.dims[i] * inStrides[(*perm)[i]];
      result.values[flat] = x.values[from];
    }
  } else if (op == "Concat") {
    auto axis = axisOf();
    if (!axis)
      return false;
    result.dims = x.dims;
    result.dims[*axis] = 0;
    std::vector<const Folded *> parts;
    for (const Folded *t : in) {
      if (!t)
        continue;
      std::vector<int64_t> a = t->dims, b = x.dims;
      if (a.size() != b.size())
        return fail("constants of ranks " + std::to_string(a.size()) + " and " +
                    std::to_string(b.size()) + " are concatenated");
      a[*axis] = b[*axis] = 0;
      if (a != b)
        return fail("constants of other shapes off the axis are concatenated");
      result.dims[*axis] += t->dims[*axis];
      parts.push_back(t);
    }
    if (spanOf(result.dims) > kMaxFoldedTensor)
      return fail("a constant of more than 2^24 elements");
    const int64_t outer = countOf(std::vector<int64_t>(x.dims.begin(), x.dims.begin() + *axis));
    for (int64_t o = 0; o < outer; ++o)
      for (const Folded *t : parts) {
        const int64_t inner = t->dims[*axis] *
            countOf(std::vector<int64_t>(t->dims.begin() + *axis + 1, t->dims.end()));
        result.values.insert(result.values.end(), t->values.begin() + o * inner,
                             t->values.begin() + (o + 1) * inner);
      }
  } else if (op == "Slice") {
    if (!knownAttributes(n, {}) || !input(1) || !input(2))
      return fail("expected data, starts and ends");
    std::vector<int64_t> starts = ints(input(1)), ends = ints(input(2));
    std::vector<int64_t> axes(starts.size()), steps(starts.size(), 1);
    std::iota(axes.begin(), axes.end(), 0);
    if (input(3))
      axes = ints(input(3));
    if (input(4))
      steps = ints(input(4));
    if (ends.size() != starts.size() || axes.size() != starts.size() ||
        steps.size() != starts.size())
      return fail("starts, ends, axes and steps of different lengths");
    std::vector<int64_t> first(rank, 0), step(rank, 1);
    std::vector<bool> seen(rank, false);
    result.dims = x.dims;
    for (size_t i = 0; i < starts.size(); ++i) {
      auto d = normalizedAxis(axes[i], rank);
      if (!d || steps[i] == 0)
        return fail("slice along axis " + std::to_string(axes[i]) + " with step " +
                    std::to_string(steps[i]));
      const int64_t extent = x.dims[*d];
      auto clampTo = [&](int64_t v, int64_t lo, int64_t hi) {
        if (v < 0)
          v = v < -extent ? lo : v + extent;
        return std::clamp(v, lo, hi);
      };
      int64_t s, e;
      if (steps[i] > 0) {
        s = clampTo(starts[i], 0, extent);
        e = clampTo(ends[i], 0, extent);
      } else {
        s = clampTo(starts[i], 0, extent - 1);
        e = clampTo(ends[i], -1, extent - 1);
      }
      if (seen[*d])
        return fail("axis " + std::to_string(axes[i]) + " is sliced twice");
      seen[*d] = true;
      const int64_t span = steps[i] > 0 ? e - s : s - e;
      const int64_t magnitude = steps[i] > 0 ? steps[i] : -std::max(steps[i], -std::numeric_limits<int64_t>::max());
      first[*d] = s;
      step[*d] = steps[i];
      result.dims[*d] = span <= 0 ? 0 : 1 + (span - 1) / magnitude;
    }
    const std::vector<int64_t> inStrides = stridesOf(x.dims), outStrides = stridesOf(result.dims);
    for (int64_t flat = 0; flat < countOf(result.dims); ++flat) {
      int64_t from = 0;
      for (int64_t i = 0; i < rank; ++i)
        from += (first[i] + (flat / outStrides[i]) % result.dims[i] * step[i]) * inStrides[i];
      result.values.push_back(x.values[from]);
    }
  } else if (op == "Gather") {
    if (!input(1))
      return fail("expected data and indices");
    auto axis = axisOf();
    if (!axis)
      return false;
    const Folded &indices = *input(1);
    result.dims.assign(x.dims.begin(), x.dims.begin() + *axis);
    result.dims.insert(result.dims.end(), indices.dims.begin(), indices.dims.end());
    result.dims.insert(result.dims.end(), x.dims.begin() + *axis + 1, x.dims.end());
    if (result.dims.size() > 8)
      return fail("a constant of rank over 8");
    const int64_t extent = x.dims[*axis];
    const int64_t inner = countOf(std::vector<int64_t>(x.dims.begin() + *axis + 1, x.dims.end()));
    const int64_t outer = countOf(std::vector<int64_t>(x.dims.begin(), x.dims.begin() + *axis));
    if (double(std::max<int64_t>(outer, 1)) * double(std::max<size_t>(indices.values.size(), 1)) *
            double(std::max<int64_t>(inner, 1)) >
        double(kMaxFoldedTensor))
      return fail("a constant of more than 2^24 elements");
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t index : ints(&indices)) {
        if (index < -extent || index >= extent)
          return fail("index " + std::to_string(index) + " is outside dim " +
                      std::to_string(*axis) + " of size " + std::to_string(extent));
        const int64_t row = index < 0 ? index + extent : index;
        auto begin = x.values.begin() + (o * extent + row) * inner;
        result.values.insert(result.values.end(), begin, begin + inner);
      }
  } else if (op == "Expand") {
    if (!knownAttributes(n, {}) || !input(1))
      return input(1) ? false : fail("expected data and shape");
    auto shape = broadcastShapes(x.dims, ints(input(1)));
    if (!shape || shape->size() > 8 ||
        std::any_of(shape->begin(), shape->end(), [](int64_t d) { return d < 0; }))
      return fail("cannot expand the constant to this shape");
    if (std::any_of(shape->begin(), shape->end(),
                    [](int64_t d) { return d > kMaxFoldedTensor; }) ||
        spanOf(*shape) > kMaxFoldedTensor)
      return fail("a constant of more than 2^24 elements");
    result.dims = *shape;
    for (int64_t flat = 0; flat < countOf(*shape); ++flat)
      result.values.push_back(x.values[broadcastIndex(x, *shape, flat)]);
  } else if (op == "Range") {
    if (!knownAttributes(n, {}) || !input(1) || !input(2) || x.values.size() != 1 ||
        input(1)->values.size() != 1 || input(2)->values.size() != 1)
      return fail("expected scalar start, limit and delta");
    const double start = x.values[0], limit = input(1)->values[0], delta = input(2)->values[0];
    if (delta == 0 || !std::isfinite(start) || !std::isfinite(limit) || !std::isfinite(delta))
      return fail("a range with delta 0 or bounds that are not finite");
    const double count = std::max(std::ceil((limit - start) / delta), 0.0);
    if (count > double(kMaxFoldedTensor))
      return fail("a constant of more than 2^24 elements");
    for (int64_t i = 0; i < static_cast<int64_t>(count); ++i)
      result.values.push_back(stored(start + static_cast<double>(i) * delta, x.type));
    result.dims = {static_cast<int64_t>(count)};
  } else if (op == "ConstantOfShape") {
    if (!knownAttributes(n, {"value"}))
      return false;
    std::vector<int64_t> shape = ints(&x);
    if (x.dims.size() != 1)
      return fail("the shape must be a vector");
    if (shape.size() > 8 || std::any_of(shape.begin(), shape.end(), [](int64_t d) {
          return d < 0 || d > kMaxFoldedTensor;
        }) || spanOf(shape) > kMaxFoldedTensor)
      return fail("a constant of more than 2^24 elements, or of rank over 8");
    double value = 0;
    result.type = ElementType::Float;
    if (auto it = n.attributes.find("value"); it != n.attributes.end()) {
      const Tensor &t = it->second.tensor;
      if (it->second.kind != Attribute::Kind::Tensor || !t.hasValues || t.values.size() != 1)
        return fail("'value' must be a tensor of one element");
      result.type = t.type;
      value = t.values.front();
    }
    if (!isInteger(result.type) && result.type != ElementType::Float &&
        result.type != ElementType::Double)
      return fail("a constant of a type graphc does not fold");
    result.dims = shape;
    result.values.assign(countOf(shape), stored(value, result.type));
  } else if (op == "Clip") {
    // TensorFlow-style "same" padding computes its pads in floats (timm's
    // tf_ models): max(..., 0) as a Clip with no upper bound.
    if (!knownAttributes(n, {}))
      return false;
    double lo = -INFINITY, hi = INFINITY;
    for (size_t i = 1; i < 3; ++i) {
      if (!input(i))
        continue;
      if (input(i)->values.size() != 1)
        return fail("its bounds must be scalars");
      (i == 1 ? lo : hi) = input(i)->values.front();
    }
    result = x;
    for (double &v : result.values)
      v = stored(std::min(std::max(v, lo), hi), x.type);
  } else if (op == "CumSum") {
    // Position encodings from a mask (EdgeNeXt's): sums along an axis.
    if (!knownAttributes(n, {"exclusive", "reverse"}) || !input(1) ||
        input(1)->values.size() != 1)
      return input(1) && input(1)->values.size() == 1 ? false : fail("expected a scalar axis");
    auto exclusive = intAttr(n, "exclusive", 0), reverse = intAttr(n, "reverse", 0);
    if (!exclusive || !reverse)
      return false;
    if ((*exclusive != 0 && *exclusive != 1) || (*reverse != 0 && *reverse != 1))
      return fail("exclusive and reverse must be 0 or 1");
    auto axis = normalizedAxis(asIndex(input(1)->values.front()), rank);
    if (!axis)
      return fail("axis outside rank " + std::to_string(rank));
    result = x;
    const std::vector<int64_t> strides = stridesOf(x.dims);
    const int64_t extent = x.dims[*axis], stride = strides[*axis];
    for (int64_t start = 0; start < static_cast<int64_t>(x.values.size()); ++start) {
      if ((start / stride) % extent != 0)
        continue;  // not the first element of its line along the axis
      double sum = 0;
      for (int64_t k = 0; k < extent; ++k) {
        const int64_t j = *reverse ? extent - 1 - k : k;
        const size_t at = static_cast<size_t>(start + j * stride);
        const double v = x.values[at];
        if (*exclusive) {
          result.values[at] = stored(sum, x.type);
          sum += v;
        } else {
          sum += v;
          result.values[at] = stored(sum, x.type);
        }
      }
    }
  } else if (op == "ScatterND") {
    if (!knownAttributes(n, {"reduction"}) || !input(1) || !input(2))
      return input(1) && input(2) ? false : fail("expected data, indices and updates");
    int64_t slice = 0;
    std::optional<std::vector<int64_t>> at = scatterOffsets(x.dims, *input(1), *input(2), slice);
    if (!at)
      return false;
    result = x;
    for (size_t r = 0; r < at->size(); ++r)
      for (int64_t e = 0; e < slice; ++e)
        result.values[(*at)[r] + e] =
            stored(input(2)->values[static_cast<int64_t>(r) * slice + e], x.type);
  } else if (op == "Max" || op == "Min") {
    // Variadic, numpy broadcasting (torch.export writes a one-input Max to
    // broadcast index tensors).
    if (!knownAttributes(n, {}))
      return false;
    if (in.size() > 16 || std::any_of(in.begin(), in.end(), [&](const Folded *t) {
          return !t || t->type != x.type;
        }))
      return fail("expected 1 to 16 constants of one element type");
    auto joined = broadcastAll();
    if (!joined)
      return false;
    const std::vector<int64_t> dims = *joined;
    result.dims = dims;
    for (int64_t flat = 0; flat < countOf(dims); ++flat) {
      double v = x.values[broadcastIndex(x, dims, flat)];
      for (size_t i = 1; i < in.size(); ++i) {
        const double w = in[i]->values[broadcastIndex(*in[i], dims, flat)];
        v = op == "Max" ? std::max(v, w) : std::min(v, w);
      }
      result.values.push_back(v);
    }
  } else {
    // Elementwise, numpy broadcasting.
    static const char *const unary[] = {"Not", "Neg", "Sqrt", "Reciprocal", "Abs", "Floor",
                                        "Ceil", "Sin", "Cos", "Exp", "Log", "Sign"};
    const bool isUnary =
        std::any_of(std::begin(unary), std::end(unary), [&](const char *u) { return op == u; });
    const size_t arity = op == "Where" ? 3 : isUnary ? 1 : 2;
    if (!knownAttributes(n, op == "Mod" ? std::initializer_list<const char *>{"fmod"}
                                        : std::initializer_list<const char *>{}))
      return false;
    if (in.size() != arity || std::any_of(in.begin(), in.end(), [](auto *t) { return !t; }))
      return fail("expected " + std::to_string(arity) + " inputs");
    if ((op == "Sin" || op == "Cos" || op == "Exp" || op == "Log") && isInteger(x.type))
      return fail("op " + op + " of integers (ONNX takes floats)");
    auto fmod = intAttr(n, "fmod", 0);
    if (!fmod)
      return false;
    auto joined = broadcastAll();
    if (!joined)
      return false;
    const std::vector<int64_t> dims = *joined;
    const bool comparison = op == "Equal" || op == "Less" || op == "Greater" ||
                            op == "LessOrEqual" || op == "GreaterOrEqual" || op == "Not" ||
                            op == "And" || op == "Or";
    result.type = comparison ? ElementType::Bool : op == "Where" ? input(1)->type : x.type;
    const bool integer = isInteger(result.type);
    result.dims = dims;
    for (int64_t flat = 0; flat < countOf(dims); ++flat) {
      double a = x.values[broadcastIndex(x, dims, flat)];
      double b = arity > 1 ? in[1]->values[broadcastIndex(*in[1], dims, flat)] : 0;
      double v = 0;
      if (op == "Where") {
        v = a != 0 ? b : in[2]->values[broadcastIndex(*in[2], dims, flat)];
      } else if (op == "Not") {
        v = a == 0;
      } else if (op == "And" || op == "Or") {
        v = op == "And" ? (a != 0 && b != 0) : (a != 0 || b != 0);
      } else if (comparison) {
        v = op == "Equal"         ? a == b
            : op == "Less"        ? a < b
            : op == "Greater"     ? a > b
            : op == "LessOrEqual" ? a <= b
                                  : a >= b;
      } else if (op == "Div" || op == "Mod") {
        if (integer && b == 0)
          return fail("integer division by zero in a constant");
        if (op == "Div")
          v = integer ? std::trunc(a / b) : a / b;
        else if (!integer && !*fmod)
          return fail("a float Mod must have fmod 1");
        else if (*fmod)
          v = std::fmod(a, b);
        else
          v = std::fmod(std::fmod(a, b) + b, b);  // the divisor's sign, as Python
      } else {
        v = op == "Add"          ? a + b
            : op == "Sub"        ? a - b
            : op == "Mul"        ? a * b
            : op == "Pow"        ? std::pow(a, b)
            : op == "Neg"        ? -a
            : op == "Sqrt"       ? std::sqrt(a)
            : op == "Reciprocal" ? 1 / a
            : op == "Abs"        ? std::fabs(a)
            : op == "Sign"       ? double((a > 0) - (a < 0))
            : op == "Floor"      ? std::floor(a)
            : op == "Sin"        ? std::sin(a)
            : op == "Cos"        ? std::cos(a)
            : op == "Exp"        ? std::exp(a)
            : op == "Log"        ? std::log(a)
                                 : std::ceil(a);
      }
      result.values.push_back(stored(v, result.type));
    }
  }
  if (spanOf(result.dims) > kMaxFoldedTensor)
    return fail("a constant of more than 2^24 elements");
  // An integer vector is held twice (as a vector of indices too).
  const bool vector = isInteger(result.type) && result.dims.size() <= 1;
  foldedElements += static_cast<int64_t>(result.values.size()) * (vector ? 2 : 1);
  if (foldedElements > kMaxFoldedTotal)
    return fail("the constants folded so far hold more than 2^27 elements");
  if (n.outputs.empty() || n.outputs[0].empty())
    return true;
  const std::string &out = n.outputs[0];
  if (values.count(out) || known.count(out) || knownScalars.count(out) || tensors.count(out))
    return fail("output '" + onnx_model::shown(out) + "' is defined twice");
  // What the other folders and readers of shapes and scalars look up.
  if (isInteger(result.type) && result.dims.size() <= 1) {
    std::vector<int64_t> vector;
    for (double v : result.values)
      vector.push_back(asIndex(v));
    known.emplace(out, std::move(vector));
    if (result.dims.empty())
      scalarInts.insert(out);
  } else if (!isInteger(result.type) && result.values.size() == 1 && result.dims.size() <= 1) {
    knownScalars.emplace(out, result.values.front());
  }
  tensors.emplace(out, std::move(result));
  return true;
}

Value Importer::constantValue(const std::string &name) {
  const Folded *t = constantTensor(name);
  if (!t) {
    // A Constant node too large to fold (timm's Swin attention mask): its
    // float32 bytes as they are.
    auto it = constants.find(name);
    const Tensor *c = it == constants.end() ? nullptr : it->second;
    if (!c || c->type != ElementType::Float || c->dims.empty() ||
        countOf(c->dims) > kMaxFoldedIndices ||
        c->float32Bytes.size() != static_cast<size_t>(countOf(c->dims)) * 4)
      return nullptr;
    auto type = RankedTensorType::get(c->dims, b.getF32Type());
    std::vector<float> data(static_cast<size_t>(countOf(c->dims)));
    std::memcpy(data.data(), c->float32Bytes.data(), c->float32Bytes.size());
    return tryCreate<nn::ConstantOp>(DenseElementsAttr::get(type, ArrayRef<float>(data)));
  }
  if (isInteger(t->type) || t->values.empty())
    return nullptr;
  auto type = RankedTensorType::get(t->dims, b.getF32Type());
  std::vector<float> data(t->values.begin(), t->values.end());
  // A constant that repeats along its first dim (a position encoding
  // computed for every image of the batch): one row of it, broadcast.
  const int64_t rows = t->dims.empty() ? 1 : t->dims.front();
  const size_t row = rows > 1 ? data.size() / static_cast<size_t>(rows) : 0;
  bool repeats = row > 0 && data.size() > static_cast<size_t>(kMaxFoldedElements);
  for (size_t i = row; repeats && i < data.size(); ++i)
    repeats = llvm::bit_cast<uint32_t>(data[i]) == llvm::bit_cast<uint32_t>(data[i % row]);
  if (!repeats)
    return tryCreate<nn::ConstantOp>(DenseElementsAttr::get(type, ArrayRef<float>(data)));
  auto rowType = RankedTensorType::get(ArrayRef(t->dims).drop_front(), b.getF32Type());
  Value one = tryCreate<nn::ConstantOp>(
      DenseElementsAttr::get(rowType, ArrayRef<float>(data).take_front(row)));
  // nn.broadcast takes its shape from a tensor: a zero constant of it.
  Value like = one ? tryCreate<nn::ConstantOp>(DenseElementsAttr::get(type, 0.0f)) : Value();
  SmallVector<int64_t> dims(rowType.getRank());
  std::iota(dims.begin(), dims.end(), 1);
  return like ? tryCreate<nn::BroadcastOp>(one, like, b.getDenseI64ArrayAttr(dims)) : Value();
}

} // namespace onnx_import
} // namespace graphc
