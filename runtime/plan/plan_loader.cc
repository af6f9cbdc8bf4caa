// Plan loading: identifier, FlatBuffers Verifier, version, then the semantic
// checks. The classes of bad plan follow the CVEs of TFLite's loader
// (CVE-2020-15209/15210/15211, CVE-2023-27579): null or out-of-range indices,
// buffers outside their memory, offset arithmetic that overflows, shapes that
// make a kernel read past a buffer, an op writing a buffer it reads.

#include "runtime/plan/plan_loader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <set>
#include <sstream>
#include <unordered_map>

#include "runtime/plan/elf_check.h"
#include "runtime/plan/launch_record.h"

namespace graphc::runtime {
namespace {

Status Fail(ErrorCode code, const std::string& message) {
  return Status(code, message);
}

#define RETURN_IF_ERROR(expr)        \
  do {                               \
    Status status_ = (expr);         \
    if (!status_.ok()) return status_; \
  } while (0)

template <typename T>
std::string Str(const T& value) {
  std::ostringstream os;
  os << value;
  return os.str();
}

std::string BufferName(const fb::Plan& plan, int32_t index) {
  const fb::Buffer* buffer = plan.buffers()->Get(index);
  std::string name = PrintableOf(buffer->name());
  return "buffer " + Str(index) + (name.empty() ? "" : " '" + name + "'");
}

std::string KernelName(const fb::Kernel& kernel) { return "'" + PrintableOf(kernel.name()) + "'"; }

// A union of byte ranges [begin, end): what a program has written so far, or
// what the state initializers cover.
class ByteRanges {
 public:
  void Add(uint64_t begin, uint64_t end) {
    if (begin >= end) return;
    // Merge with every range that overlaps or touches [begin, end).
    auto it = ranges_.upper_bound(begin);
    if (it != ranges_.begin() && std::prev(it)->second >= begin) --it;
    while (it != ranges_.end() && it->first <= end) {
      begin = std::min(begin, it->first);
      end = std::max(end, it->second);
      it = ranges_.erase(it);
    }
    ranges_.emplace(begin, end);
  }
  // Whether any byte of [begin, end) is in the union.
  bool Intersects(uint64_t begin, uint64_t end) const {
    auto it = ranges_.lower_bound(end);  // the first range starting at or after end
    if (it == ranges_.begin()) return false;
    --it;
    return it->second > begin;
  }
  bool Covers(uint64_t begin, uint64_t end) const {
    auto it = ranges_.upper_bound(begin);
    if (it == ranges_.begin()) return false;
    --it;
    return it->first <= begin && it->second >= end;
  }

 private:
  std::map<uint64_t, uint64_t> ranges_;  // begin -> end; disjoint, not touching
};

// Checks and numbers every command of a program; `where` prefixes messages.
class CommandChecker {
 public:
  CommandChecker(const fb::Plan& plan, const LoaderLimits& limits)
      : plan_(plan), limits_(limits) {}
  Status Check(const fb::Command& command, const std::string& where);
  // Counts `pairs` operand comparisons against the plan's budget.
  Status Spend(uint64_t pairs) {
    pairs_ += pairs;
    if (pairs_ > limits_.max_operand_pairs)
      return Fail(ErrorCode::kPlanBadValue,
                  "the plan's commands compare more than " + Str(limits_.max_operand_pairs) +
                      " operand pairs in all; no plan graphc writes comes near");
    return Status::Ok();
  }

 private:
  Status CheckIndices(const flatbuffers::Vector<int32_t>* indices,
                      const std::string& what, const std::string& where);
  Status CheckArity(size_t inputs, size_t min_inputs, size_t max_inputs,
                    size_t outputs, const std::string& where);
  Status CheckOverlap(const fb::Command& command, bool may_be_in_place,
                      const std::string& where);
  Status CheckShapes(const fb::Command& command, const std::string& where);
  const fb::Buffer& Buf(int32_t index) const { return *plan_.buffers()->Get(index); }
  int64_t Elements(int32_t index) const {
    int64_t count = 1;
    for (int64_t d : *Buf(index).shape()) count *= d;  // bounded by the buffer checks
    return count;
  }
  std::vector<int64_t> Shape(int32_t index) const {
    const fb::Buffer& b = Buf(index);
    return std::vector<int64_t>(b.shape()->begin(), b.shape()->end());
  }

  const fb::Plan& plan_;
  const LoaderLimits& limits_;
  uint64_t pairs_ = 0;
};

Status CommandChecker::CheckIndices(const flatbuffers::Vector<int32_t>* indices,
                                    const std::string& what,
                                    const std::string& where) {
  if (indices == nullptr)
    return Fail(ErrorCode::kPlanBadIndex, where + ": no " + what + " list");
  if (indices->size() > limits_.max_operands)
    return Fail(ErrorCode::kPlanBadValue, where + ": " + Str(indices->size()) + " " + what +
                                              "s, more than " + Str(limits_.max_operands));
  uint32_t count = plan_.buffers()->size();
  for (uint32_t i = 0; i < indices->size(); ++i) {
    int32_t index = indices->Get(i);
    if (index < 0 || static_cast<uint32_t>(index) >= count)
      return Fail(ErrorCode::kPlanBadIndex,
                  where + ": " + what + " " + Str(i) + " is buffer " + Str(index) +
                      ", outside [0, " + Str(count) + ")");
  }
  return Status::Ok();
}

Status CommandChecker::CheckArity(size_t inputs, size_t min_inputs,
                                  size_t max_inputs, size_t outputs,
                                  const std::string& where) {
  if (inputs < min_inputs || inputs > max_inputs || outputs != 1)
    return Fail(ErrorCode::kPlanBadIndex,
                where + ": takes " + Str(min_inputs) + "-" + Str(max_inputs) +
                    " inputs and 1 output, has " + Str(inputs) + " and " +
                    Str(outputs));
  return Status::Ok();
}

bool Overlaps(const fb::Buffer& a, const fb::Buffer& b) {
  return a.region() == b.region() && a.offset() < b.offset() + b.size() &&
         b.offset() < a.offset() + a.size();
}

bool SameMemory(const fb::Buffer& a, const fb::Buffer& b) {
  return a.region() == b.region() && a.offset() == b.offset() && a.size() == b.size();
}

Status CommandChecker::CheckOverlap(const fb::Command& command, bool may_be_in_place,
                                    const std::string& where) {
  const auto& inputs = *command.inputs();
  const auto& outputs = *command.outputs();
  RETURN_IF_ERROR(Spend(uint64_t{outputs.size()} * (inputs.size() + outputs.size())));
  const flatbuffers::Vector<int32_t>* in_place = command.in_place();
  if (in_place != nullptr && in_place->size() != 0) {
    if (!may_be_in_place)
      return Fail(ErrorCode::kPlanAliasedOperands,
                  where + ": declares in_place but its op cannot run in place");
    if (in_place->size() != outputs.size())
      return Fail(ErrorCode::kPlanBadIndex, where + ": in_place needs one entry per output");
    for (uint32_t o = 0; o < in_place->size(); ++o) {
      int32_t i = in_place->Get(o);
      if (i == -1) continue;
      if (i < 0 || static_cast<uint32_t>(i) >= inputs.size())
        return Fail(ErrorCode::kPlanBadIndex,
                    where + ": in_place entry " + Str(o) + " names input " + Str(i));
      if (!SameMemory(Buf(outputs.Get(o)), Buf(inputs.Get(i))))
        return Fail(ErrorCode::kPlanAliasedOperands,
                    where + ": output " + Str(o) + " is declared in place over input " +
                        Str(i) + " but they are not the same memory");
    }
  }
  for (uint32_t o = 0; o < outputs.size(); ++o) {
    const fb::Buffer& out = Buf(outputs.Get(o));
    if (out.region() == fb::Region::Constant)
      return Fail(ErrorCode::kPlanAliasedOperands,
                  where + ": writes constant " + BufferName(plan_, outputs.Get(o)));
    for (uint32_t p = o + 1; p < outputs.size(); ++p)
      if (Overlaps(out, Buf(outputs.Get(p))))
        return Fail(ErrorCode::kPlanAliasedOperands,
                    where + ": outputs " + Str(o) + " and " + Str(p) + " overlap");
    for (uint32_t i = 0; i < inputs.size(); ++i) {
      const fb::Buffer& in = Buf(inputs.Get(i));
      if (!Overlaps(out, in)) continue;
      bool declared = in_place != nullptr && o < in_place->size() &&
                      in_place->Get(o) >= 0 &&
                      SameMemory(in, Buf(inputs.Get(in_place->Get(o))));
      if (!declared)
        return Fail(ErrorCode::kPlanAliasedOperands,
                    where + ": reads " + BufferName(plan_, inputs.Get(i)) +
                        " and writes " + BufferName(plan_, outputs.Get(o)) +
                        ", which overlap, without declaring it in place");
      // Every input in that memory (the declared one and its views) is read
      // element for element, within the output's part of the kernel.
      if (Elements(inputs.Get(i)) != Elements(outputs.Get(o)))
        return Fail(ErrorCode::kPlanAliasedOperands,
                    where + ": writes " + BufferName(plan_, outputs.Get(o)) + " in place over " +
                        BufferName(plan_, inputs.Get(i)) + ", which has another element count");
      const fb::Kernel* kernel = plan_.kernels()->Get(command.kernel());
      if (const auto* groups = kernel->arg_groups(); groups != nullptr && groups->size() != 0) {
        int32_t group = groups->Get(i);
        if (group < 0 || group != groups->Get(kernel->num_inputs() + o))
          return Fail(ErrorCode::kPlanAliasedOperands,
                      where + ": writes output " + Str(o) + " in place over input " + Str(i) +
                          ", which belongs to another part of kernel " + KernelName(*kernel));
      }
    }
  }
  return Status::Ok();
}

// Output extent of a sliding window, or -1 when it does not fit. Inputs are
// bounded by the buffer checks (every dim <= 2^62 / elements), so no overflow.
int64_t WindowOutput(int64_t in, int64_t window, int64_t stride, int64_t pad_begin,
                     int64_t pad_end, int64_t dilation) {
  __int128 span = static_cast<__int128>(dilation) * (window - 1) + 1;
  __int128 padded = static_cast<__int128>(in) + pad_begin + pad_end;
  if (padded < span) return -1;
  return static_cast<int64_t>((padded - span) / stride + 1);
}

// FlatBuffers 2.0.8's Verifier checks a vector's 4-byte length field but not
// that 8-byte elements after it are 8-byte aligned; reading them would be
// undefined behaviour (the fuzzer found it), so every 8-byte vector is checked.
template <typename T>
bool Misaligned(const flatbuffers::Vector<T>* values) {
  return values != nullptr && values->size() != 0 &&
         reinterpret_cast<uintptr_t>(values->data()) % alignof(T) != 0;
}

Status CheckAttrArray(const flatbuffers::Vector<int64_t>* values, uint32_t size,
                      int64_t minimum, const std::string& what, const std::string& where) {
  if (Misaligned(values))
    return Fail(ErrorCode::kPlanMalformed, where + ": " + what + " is misaligned");
  if (values == nullptr || values->size() != size)
    return Fail(ErrorCode::kPlanBadValue,
                where + ": " + what + " needs " + Str(size) + " values");
  for (int64_t v : *values)
    if (v < minimum || v > (int64_t{1} << 24))
      return Fail(ErrorCode::kPlanBadValue,
                  where + ": " + what + " value " + Str(v) + " is out of range");
  return Status::Ok();
}

Status ShapeError(const std::string& where, const std::string& what) {
  return Fail(ErrorCode::kPlanBadShape, where + ": " + what);
}

std::string ShapeStr(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "x" : "") + Str(shape[i]);
  return s + "]";
}

// Where an activation's channel and spatial dims lie in its shape (the
// batch is dim 0 in every layout).
struct ActivationDims {
  int c, h, w;
};

// The dims of `layout` for a command of `what` (convolution, pooling). The
// library reads activations by these dims, so a layout the schema does not
// define (FlatBuffers checks no enum's range) or a plan older than layouts is
// refused, never read as NCHW.
Status LayoutDims(fb::Layout layout, uint32_t version, const std::string& what,
                  const std::string& where, ActivationDims* dims) {
  switch (layout) {
    case fb::Layout::NCHW:
      *dims = {1, 2, 3};
      return Status::Ok();
    case fb::Layout::NHWC:
      if (version < 5)
        return Fail(ErrorCode::kPlanBadValue,
                    where + ": an NHWC " + what + " in a plan of schema version " +
                        Str(version) + " (layouts are version 5)");
      *dims = {3, 1, 2};
      return Status::Ok();
  }
  return Fail(ErrorCode::kPlanBadValue,
              where + ": " + what + " with unknown layout " + Str(static_cast<int>(layout)));
}

// " (NHWC)" after the shapes of a message about an NHWC command; nothing for NCHW.
std::string LayoutSuffix(fb::Layout layout) {
  return layout == fb::Layout::NCHW ? "" : std::string(" (") + fb::EnumNameLayout(layout) + ")";
}

Status CommandChecker::CheckShapes(const fb::Command& command, const std::string& where) {
  const auto& in = *command.inputs();
  const auto& out = *command.outputs();
  auto same_float_dtype = [&]() -> Status {
    fb::DType dtype = Buf(out.Get(0)).dtype();
    if (dtype != fb::DType::F32 && dtype != fb::DType::F16 && dtype != fb::DType::BF16)
      return Fail(ErrorCode::kPlanBadValue, where + ": library ops need float buffers");
    for (int32_t i : in)
      if (Buf(i).dtype() != dtype)
        return Fail(ErrorCode::kPlanBadValue, where + ": operands differ in dtype");
    return Status::Ok();
  };
  switch (command.op()) {
    case fb::Opcode::Conv2d:
    case fb::Opcode::Conv2dBackwardData:
    case fb::Opcode::Conv2dBackwardFilter: {
      RETURN_IF_ERROR(CheckArity(in.size(), 2, command.op() == fb::Opcode::Conv2d ? 3 : 2,
                                 out.size(), where));
      RETURN_IF_ERROR(same_float_dtype());
      const fb::ConvAttrs* attrs = command.conv();
      if (attrs == nullptr)
        return Fail(ErrorCode::kPlanBadValue, where + ": convolution without attributes");
      RETURN_IF_ERROR(CheckAttrArray(attrs->strides(), 2, 1, "strides", where));
      RETURN_IF_ERROR(CheckAttrArray(attrs->dilations(), 2, 1, "dilations", where));
      RETURN_IF_ERROR(CheckAttrArray(attrs->padding(), 4, 0, "padding", where));
      int64_t groups = attrs->groups();
      if (groups < 1 || groups > (int64_t{1} << 24))
        return Fail(ErrorCode::kPlanBadValue,
                    where + ": groups " + Str(groups) + " is not positive");
      ActivationDims a;
      RETURN_IF_ERROR(LayoutDims(attrs->layout(), plan_.version(), "convolution", where, &a));
      // Name the three tensors of the forward relation x * w -> y.
      std::vector<int64_t> x, w, y;
      if (command.op() == fb::Opcode::Conv2d) {
        x = Shape(in.Get(0)), w = Shape(in.Get(1)), y = Shape(out.Get(0));
      } else if (command.op() == fb::Opcode::Conv2dBackwardData) {
        y = Shape(in.Get(0)), w = Shape(in.Get(1)), x = Shape(out.Get(0));
      } else {
        x = Shape(in.Get(0)), y = Shape(in.Get(1)), w = Shape(out.Get(0));
      }
      if (x.size() != 4 || w.size() != 4 || y.size() != 4)
        return ShapeError(where, "convolution operands must be rank 4");
      // The filter is OIHW, or OHWI (v6, channels-last activations only),
      // checked from here on as the OIHW filter it holds.
      const fb::Layout filter_layout = attrs->filter_layout();
      if (filter_layout != fb::Layout::NCHW) {
        if (filter_layout != fb::Layout::NHWC)
          return Fail(ErrorCode::kPlanBadValue,
                      where + ": convolution with unknown filter layout " +
                          Str(static_cast<int>(filter_layout)));
        if (plan_.version() < 6)
          return Fail(ErrorCode::kPlanBadValue,
                      where + ": an OHWI filter in a plan of schema version " +
                          Str(plan_.version()) + " (OHWI filters are version 6)");
        if (attrs->layout() != fb::Layout::NHWC)
          return Fail(ErrorCode::kPlanBadValue,
                      where + ": an OHWI filter needs NHWC activations");
        w = {w[0], w[3], w[1], w[2]};
      }
      if (x[a.c] % groups != 0 || w[0] % groups != 0 || w[1] * groups != x[a.c])
        return ShapeError(where, "filter " + ShapeStr(w) + " does not match " +
                                     Str(x[a.c]) + " input channels in " + Str(groups) +
                                     " groups" + LayoutSuffix(attrs->layout()));
      const auto& s = *attrs->strides();
      const auto& d = *attrs->dilations();
      const auto& p = *attrs->padding();
      std::vector<int64_t> want(4);
      want[0] = x[0];
      want[a.c] = w[0];
      want[a.h] = WindowOutput(x[a.h], w[2], s[0], p[0], p[1], d[0]);
      want[a.w] = WindowOutput(x[a.w], w[3], s[1], p[2], p[3], d[1]);
      if (y != want)
        return ShapeError(where, "convolution of " + ShapeStr(x) + " by " + ShapeStr(w) +
                                     " gives " + ShapeStr(want) + ", not " + ShapeStr(y) +
                                     LayoutSuffix(attrs->layout()));
      if (in.size() == 3) {
        std::vector<int64_t> bias = Shape(in.Get(2));
        if (bias.size() != 1 || bias[0] != w[0])
          return ShapeError(where, "bias must be [" + Str(w[0]) + "]");
      }
      return Status::Ok();
    }
    case fb::Opcode::Gemm: {
      RETURN_IF_ERROR(CheckArity(in.size(), 2, 3, out.size(), where));
      RETURN_IF_ERROR(same_float_dtype());
      std::vector<int64_t> a = Shape(in.Get(0)), b = Shape(in.Get(1)), c = Shape(out.Get(0));
      if (a.size() != b.size() || a.size() != c.size() || a.size() < 2 || a.size() > 3)
        return ShapeError(where, "gemm operands must all be rank 2 or all rank 3");
      const fb::GemmAttrs* attrs = command.gemm();
      bool ta = attrs && attrs->transpose_a(), tb = attrs && attrs->transpose_b();
      size_t r = a.size();
      int64_t m = ta ? a[r - 1] : a[r - 2], ka = ta ? a[r - 2] : a[r - 1];
      int64_t kb = tb ? b[r - 1] : b[r - 2], n = tb ? b[r - 2] : b[r - 1];
      if (ka != kb || c[r - 2] != m || c[r - 1] != n ||
          (r == 3 && (a[0] != b[0] || a[0] != c[0])))
        return ShapeError(where, "gemm " + ShapeStr(a) + " x " + ShapeStr(b) +
                                     " cannot give " + ShapeStr(c));
      if (in.size() == 3) {
        std::vector<int64_t> bias = Shape(in.Get(2));
        if (bias.size() != 1 || bias[0] != n)
          return ShapeError(where, "bias must be [" + Str(n) + "]");
      }
      return Status::Ok();
    }
    case fb::Opcode::MaxPool2d:
    case fb::Opcode::AvgPool2d:
    case fb::Opcode::MaxPool2dBackward:
    case fb::Opcode::AvgPool2dBackward: {
      bool max_backward = command.op() == fb::Opcode::MaxPool2dBackward;
      RETURN_IF_ERROR(CheckArity(in.size(), max_backward ? 2 : 1, max_backward ? 2 : 1,
                                 out.size(), where));
      RETURN_IF_ERROR(same_float_dtype());
      const fb::PoolAttrs* attrs = command.pool();
      if (attrs == nullptr)
        return Fail(ErrorCode::kPlanBadValue, where + ": pooling without attributes");
      RETURN_IF_ERROR(CheckAttrArray(attrs->window(), 2, 1, "window", where));
      RETURN_IF_ERROR(CheckAttrArray(attrs->strides(), 2, 1, "strides", where));
      RETURN_IF_ERROR(CheckAttrArray(attrs->padding(), 4, 0, "padding", where));
      const auto& k = *attrs->window();
      const auto& s = *attrs->strides();
      const auto& p = *attrs->padding();
      if (p[0] >= k[0] || p[1] >= k[0] || p[2] >= k[1] || p[3] >= k[1])
        return Fail(ErrorCode::kPlanBadValue, where + ": padding must be below the window");
      ActivationDims a;
      RETURN_IF_ERROR(LayoutDims(attrs->layout(), plan_.version(), "pooling", where, &a));
      std::vector<int64_t> x, y;
      if (command.op() == fb::Opcode::MaxPool2d || command.op() == fb::Opcode::AvgPool2d) {
        x = Shape(in.Get(0)), y = Shape(out.Get(0));
      } else if (max_backward) {
        x = Shape(in.Get(0)), y = Shape(in.Get(1));
        if (Shape(out.Get(0)) != x)
          return ShapeError(where, "the gradient must have the input's shape");
      } else {
        y = Shape(in.Get(0)), x = Shape(out.Get(0));
      }
      if (x.size() != 4 || y.size() != 4)
        return ShapeError(where, "pooling operands must be rank 4");
      std::vector<int64_t> want = x;
      want[a.h] = WindowOutput(x[a.h], k[0], s[0], p[0], p[1], 1);
      want[a.w] = WindowOutput(x[a.w], k[1], s[1], p[2], p[3], 1);
      if (y != want)
        return ShapeError(where, "pooling " + ShapeStr(x) + " cannot give " + ShapeStr(y) +
                                     LayoutSuffix(attrs->layout()));
      return Status::Ok();
    }
    case fb::Opcode::Copy:
      RETURN_IF_ERROR(CheckArity(in.size(), 1, 1, out.size(), where));
      if (Buf(in.Get(0)).size() != Buf(out.Get(0)).size())
        return ShapeError(where, "copy between buffers of different sizes");
      return Status::Ok();
    case fb::Opcode::AllreduceStart:
    case fb::Opcode::AllreduceWait: {
      // The bucket's buffers, reduced where they are: the same list in and
      // out, each declared in place over itself, disjoint float arena buffers.
      const fb::CollectiveAttrs* attrs = command.collective();
      if (attrs == nullptr)
        return Fail(ErrorCode::kPlanBadValue, where + ": a collective without its attributes");
      if (attrs->bucket() < 0 || attrs->reduction() < fb::Reduction::MIN ||
          attrs->reduction() > fb::Reduction::MAX ||
          (attrs->wire() != fb::DType::F32 && attrs->wire() != fb::DType::F16))
        return Fail(ErrorCode::kPlanBadValue,
                    where + ": bucket " + Str(attrs->bucket()) +
                        " with an unknown reduction or a wire type other than F32 or F16");
      if (in.size() == 0 || in.size() != out.size())
        return Fail(ErrorCode::kPlanBadIndex,
                    where + ": a collective names its buffers as inputs and outputs alike");
      const auto* in_place = command.in_place();
      if (in_place == nullptr || in_place->size() != in.size())
        return Fail(ErrorCode::kPlanAliasedOperands,
                    where + ": a collective must declare every buffer in place");
      RETURN_IF_ERROR(Spend(uint64_t{in.size()} * in.size()));
      for (uint32_t i = 0; i < in.size(); ++i) {
        const fb::Buffer& b = Buf(in.Get(i));
        if (in.Get(i) != out.Get(i) || in_place->Get(i) != static_cast<int32_t>(i))
          return Fail(ErrorCode::kPlanAliasedOperands,
                      where + ": output " + Str(i) + " is not input " + Str(i) + " in place");
        if (b.region() != fb::Region::Arena)
          return Fail(ErrorCode::kPlanBadValue,
                      where + ": reduces " + BufferName(plan_, in.Get(i)) +
                          ", which is not in the arena");
        if (b.dtype() != fb::DType::F32 && b.dtype() != fb::DType::F16 &&
            b.dtype() != fb::DType::BF16)
          return Fail(ErrorCode::kPlanBadValue,
                      where + ": reduces " + BufferName(plan_, in.Get(i)) + " of type " +
                          fb::EnumNameDType(b.dtype()) + "; only F32, F16 and BF16 reduce");
        for (uint32_t j = 0; j < i; ++j)
          if (Overlaps(b, Buf(in.Get(j))))
            return Fail(ErrorCode::kPlanAliasedOperands,
                        where + ": reduces " + BufferName(plan_, in.Get(j)) + " and " +
                            BufferName(plan_, in.Get(i)) + ", which share memory");
      }
      return Status::Ok();
    }
    case fb::Opcode::Kernel: {
      int32_t k = command.kernel();
      uint32_t count = plan_.kernels() ? plan_.kernels()->size() : 0;
      if (k < 0 || static_cast<uint32_t>(k) >= count)
        return Fail(ErrorCode::kPlanBadIndex,
                    where + ": kernel " + Str(k) + " outside [0, " + Str(count) + ")");
      const fb::Kernel& kernel = *plan_.kernels()->Get(k);
      if (static_cast<int64_t>(in.size()) != kernel.num_inputs() ||
          static_cast<int64_t>(out.size()) != kernel.num_outputs())
        return Fail(ErrorCode::kPlanBadIndex,
                    where + ": kernel " + KernelName(kernel) + " takes " +
                        Str(kernel.num_inputs()) + " inputs and " +
                        Str(kernel.num_outputs()) + " outputs");
      for (uint32_t i = 0; i < in.size() + out.size(); ++i) {
        int32_t b = i < in.size() ? in.Get(i) : out.Get(i - in.size());
        if (Buf(b).size() != kernel.arg_bytes()->Get(i))
          return ShapeError(where, BufferName(plan_, b) + " has " + Str(Buf(b).size()) +
                                       " bytes, kernel " + KernelName(kernel) +
                                       " argument " + Str(i) + " needs " +
                                       Str(kernel.arg_bytes()->Get(i)));
      }
      return Status::Ok();
    }
  }
  return Fail(ErrorCode::kPlanBadValue, where + ": unknown opcode");
}

Status CommandChecker::Check(const fb::Command& command, const std::string& where) {
  if (command.op() > fb::Opcode::MAX)
    return Fail(ErrorCode::kPlanBadValue,
                where + ": unknown opcode " + Str(static_cast<int>(command.op())));
  RETURN_IF_ERROR(CheckIndices(command.inputs(), "input", where));
  RETURN_IF_ERROR(CheckIndices(command.outputs(), "output", where));
  if (command.outputs()->size() == 0)
    return Fail(ErrorCode::kPlanBadIndex, where + ": has no output");
  RETURN_IF_ERROR(CheckShapes(command, where));
  bool collective = command.op() == fb::Opcode::AllreduceStart ||
                    command.op() == fb::Opcode::AllreduceWait;
  if (collective) return Status::Ok();  // CheckShapes proved them in place over themselves
  if (command.collective() != nullptr)
    return Fail(ErrorCode::kPlanBadValue,
                where + ": collective attributes on a " + fb::EnumNameOpcode(command.op()));
  bool may_be_in_place = command.op() == fb::Opcode::Kernel &&
                         plan_.kernels()->Get(command.kernel())->elementwise();
  return CheckOverlap(command, may_be_in_place, where);
}

uint64_t RegionSize(const fb::Plan& plan, fb::Region region) {
  switch (region) {
    case fb::Region::Arena: return plan.arena_size();
    case fb::Region::State: return plan.state_size();
    case fb::Region::Constant: return plan.constant_size();
  }
  return 0;
}

Status CheckBuffers(const fb::Plan& plan, const LoaderLimits& limits) {
  for (uint32_t i = 0; i < plan.buffers()->size(); ++i) {
    const fb::Buffer* b = plan.buffers()->Get(i);
    std::string where = BufferName(plan, i);
    if (b->dtype() < fb::DType::MIN || b->dtype() > fb::DType::MAX)
      return Fail(ErrorCode::kPlanBadValue, where + ": unknown dtype");
    if (b->region() < fb::Region::MIN || b->region() > fb::Region::MAX)
      return Fail(ErrorCode::kPlanBadValue, where + ": unknown region");
    if (Misaligned(b->shape()))
      return Fail(ErrorCode::kPlanMalformed, where + ": shape is misaligned");
    if (b->shape() == nullptr || b->shape()->size() > limits.max_rank)
      return Fail(ErrorCode::kPlanBadShape, where + ": needs a shape of rank <= " +
                                                Str(limits.max_rank));
    uint64_t elements = 1;
    for (int64_t dim : *b->shape()) {
      if (dim < 1)
        return Fail(ErrorCode::kPlanBadShape,
                    where + ": dimension " + Str(dim) + " is not positive");
      if (__builtin_mul_overflow(elements, static_cast<uint64_t>(dim), &elements) ||
          elements > (uint64_t{1} << 62))
        return Fail(ErrorCode::kPlanBadShape, where + ": too many elements");
    }
    uint64_t bytes;
    if (__builtin_mul_overflow(elements, DTypeBytes(b->dtype()), &bytes) || bytes != b->size())
      return Fail(ErrorCode::kPlanBadShape,
                  where + ": size " + Str(b->size()) + " does not match its shape");
    uint64_t end;
    if (__builtin_add_overflow(b->offset(), b->size(), &end))
      return Fail(ErrorCode::kPlanOffsetOverflow,
                  where + ": offset " + Str(b->offset()) + " + size " + Str(b->size()) +
                      " overflows 64 bits");
    if (end > RegionSize(plan, b->region()))
      return Fail(ErrorCode::kPlanBufferOutOfRange,
                  where + ": ends at " + Str(end) + ", past its region's " +
                      Str(RegionSize(plan, b->region())) + " bytes");
  }
  return Status::Ok();
}

Status CheckBufferRef(const fb::Plan& plan, int32_t index, fb::Region region,
                      const std::string& where) {
  if (index < 0 || static_cast<uint32_t>(index) >= plan.buffers()->size())
    return Fail(ErrorCode::kPlanBadIndex, where + ": buffer " + Str(index) +
                                              " outside [0, " +
                                              Str(plan.buffers()->size()) + ")");
  if (plan.buffers()->Get(index)->region() != region)
    return Fail(ErrorCode::kPlanBadValue,
                where + ": " + BufferName(plan, index) + " is in the wrong region");
  return Status::Ok();
}

}  // namespace

uint64_t DTypeBytes(fb::DType dtype) {
  switch (dtype) {
    case fb::DType::F32: case fb::DType::I32: return 4;
    case fb::DType::F16: case fb::DType::BF16: return 2;
    case fb::DType::I64: return 8;
    case fb::DType::I1: return 1;
  }
  return 0;
}

std::string LaunchSignature(const fb::Kernel& kernel, uint32_t index,
                            const fb::GpuLaunch& launch) {
  std::vector<uint32_t> args(launch.args()->begin(), launch.args()->end());
  std::vector<uint64_t> bytes;
  for (uint32_t arg : args) bytes.push_back(kernel.arg_bytes()->Get(arg));
  return LaunchRecord(StringOf(kernel.name()), index, launch.grid()->Get(0), args, bytes);
}

namespace {

// A binary's launch table: one launch list per symbol; every launch a named
// entry with CUDA-legal grid and block sizes whose pointer parameters are
// buffers of the kernel it runs. The kernels' arities were checked before.
Status CheckLaunches(const fb::Plan& plan, const fb::KernelBinary& binary,
                     const std::string& where) {
  bool ptx = binary.format() == fb::BinaryFormat::Ptx;
  if (binary.launches() == nullptr || binary.launches()->size() != binary.symbols()->size())
    return Fail(ErrorCode::kPlanBadValue, where + ": needs one launch list per symbol");
  std::unordered_map<std::string, const fb::Kernel*> kernels;
  if (plan.kernels())
    for (const fb::Kernel* k : *plan.kernels()) kernels.emplace(k->name()->str(), k);
  std::set<std::string> seen;
  for (uint32_t i = 0; i < binary.symbols()->size(); ++i) {
    std::string symbol = StringOf(binary.symbols()->Get(i));
    std::string at = where + " kernel '" + Printable(symbol) + "'";
    auto kernel = kernels.find(symbol);
    if (kernel == kernels.end())
      return Fail(ErrorCode::kPlanBadValue, at + ": not a kernel of the plan");
    if (!seen.insert(symbol).second)
      return Fail(ErrorCode::kPlanBadValue, at + ": listed twice");
    const int64_t arity = int64_t{kernel->second->num_inputs()} + kernel->second->num_outputs();
    const fb::GpuKernel* gpu = binary.launches()->Get(i);
    if (gpu->launches() == nullptr || gpu->launches()->size() == 0)
      return Fail(ErrorCode::kPlanBadValue, at + ": has no launches");
    for (uint32_t l = 0; l < gpu->launches()->size(); ++l) {
      const fb::GpuLaunch* launch = gpu->launches()->Get(l);
      std::string on = at + " launch " + Str(l);
      if (launch->entry() == nullptr || launch->entry()->size() == 0 ||
          launch->grid() == nullptr || launch->grid()->size() != 3 ||
          launch->block() == nullptr || launch->block()->size() != 3 || launch->args() == nullptr)
        return Fail(ErrorCode::kPlanBadValue, on + ": needs an entry, a 3-D grid and block, args");
      // CUDA's limits (compute capability 8.0 and 9.0); on the CPU, iterations
      // of a 1-D loop.
      constexpr uint32_t kMaxGrid[3] = {0x7fffffffu, 65535, 65535};
      constexpr uint32_t kMaxBlock[3] = {1024, 1024, 64};
      if (!ptx && (launch->grid()->Get(1) != 1 || launch->grid()->Get(2) != 1 ||
                   launch->block()->Get(0) != 1 || launch->block()->Get(1) != 1 ||
                   launch->block()->Get(2) != 1))
        return Fail(ErrorCode::kPlanBadValue,
                    on + ": a CPU launch needs a 1-D grid and a 1x1x1 block");
      uint64_t threads = 1;
      for (int d = 0; d < 3; ++d) {
        uint32_t g = launch->grid()->Get(d), b = launch->block()->Get(d);
        if (g == 0 || g > kMaxGrid[d] || b == 0 || b > kMaxBlock[d])
          return Fail(ErrorCode::kPlanBadValue, on + ": grid or block size out of CUDA's range");
        threads *= b;
      }
      if (threads > 1024)
        return Fail(ErrorCode::kPlanBadValue, on + ": more than 1024 threads per block");
      if (launch->args()->size() > arity)
        return Fail(ErrorCode::kPlanBadIndex, on + ": passes more buffers than the kernel has");
      for (uint32_t arg : *launch->args())
        if (arg >= arity)
          return Fail(ErrorCode::kPlanBadIndex,
                      on + ": argument " + Str(arg) + " is not one of the kernel's " +
                          Str(arity) + " buffers");
    }
  }
  if (seen.size() != kernels.size())
    return Fail(ErrorCode::kPlanMissingKernel,
                where + ": defines " + Str(seen.size()) + " of the plan's " +
                    Str(kernels.size()) + " kernels");
  return Status::Ok();
}

// An x86-64 library: its ELF (elf_check.h), an entry for every launch, and
// the library's own record of each launch equal to the launch table's (the
// kernel, the launch's index, its iterations, its buffers and their sizes), so
// the table cannot send code another kernel's buffers, too few of them, or
// buffers of other sizes than it was compiled for.
Status CheckCpuLibrary(const fb::Plan& plan, const fb::KernelBinary& binary,
                       const std::string& where) {
  StatusOr<KernelLibrary> library =
      CheckKernelLibrary(binary.data()->data(), binary.data()->size());
  if (!library.ok())
    return Status(library.status().code(), where + ": " + library.status().message());
  std::unordered_map<std::string, const fb::Kernel*> kernels;
  if (plan.kernels())
    for (const fb::Kernel* k : *plan.kernels()) kernels.emplace(k->name()->str(), k);
  std::set<std::string> entries;
  for (uint32_t i = 0; i < binary.symbols()->size(); ++i) {
    const fb::Kernel& kernel = *kernels.at(StringOf(binary.symbols()->Get(i)));
    const auto& launches = *binary.launches()->Get(i)->launches();
    for (uint32_t l = 0; l < launches.size(); ++l) {
      const fb::GpuLaunch& launch = *launches.Get(l);
      const std::string entry = StringOf(launch.entry());
      const std::string on = where + " kernel " + KernelName(kernel) + " launch " + Str(l) +
                             " (entry '" + Printable(entry) + "')";
      if (!entries.insert(entry).second)
        return Fail(ErrorCode::kPlanUnsafeCode, on + ": the entry is launched twice");
      if (!library->entries.count(entry))
        return Fail(ErrorCode::kPlanMissingKernel,
                    on + ": the library has no function " + kKernelEntryPrefix + Printable(entry));
      auto recorded = library->signatures.find(entry);
      if (recorded == library->signatures.end())
        return Fail(ErrorCode::kPlanUnsafeCode,
                    on + ": the library has no record of this launch (" +
                        kKernelSignaturePrefix + Printable(entry) + ")");
      const std::string expected = LaunchSignature(kernel, l, launch);
      if (recorded->second != expected)
        return Fail(ErrorCode::kPlanUnsafeCode,
                    on + ": the launch table says \"" + Printable(expected) +
                        "\" but the code was compiled for \"" + Printable(recorded->second) +
                        "\"");
    }
  }
  return Status::Ok();
}

// A PTX binary: text without NUL (the CUDA driver takes a C string), and each
// launch's entry declared in it with one .u64 parameter per buffer the launch
// table passes (graphc's PTX takes bare pointers): a table passing fewer
// would have the driver read parameters nobody wrote.
Status CheckPtx(const fb::KernelBinary& binary, const std::string& where) {
  const std::string text(reinterpret_cast<const char*>(binary.data()->data()),
                         binary.data()->size());
  if (text.find('\0') != std::string::npos)
    return Fail(ErrorCode::kPlanBadValue, where + ": PTX text holds a NUL byte");
  // One pass over the text: every `.entry NAME(...)` with its parameters
  // (how many, how many of them .u64).
  struct Entry {
    size_t params = 0, pointers = 0;
  };
  std::unordered_map<std::string, Entry> entries;
  const char* space = " \t\r\n";
  for (size_t from = 0; (from = text.find(".entry", from)) != std::string::npos;) {
    from += 6;
    const size_t name = text.find_first_not_of(space, from);
    const size_t open = name == std::string::npos ? name : text.find_first_of(std::string(space) + "(", name);
    if (open == std::string::npos) break;
    const size_t paren = text.find_first_not_of(space, open);
    if (paren == std::string::npos || text[paren] != '(') continue;
    const size_t close = text.find(')', paren);
    if (close == std::string::npos)
      return Fail(ErrorCode::kPlanBadValue, where + ": an .entry's parameter list does not end");
    Entry entry;
    for (size_t p = paren; (p = text.find(".param", p)) != std::string::npos && p < close; p += 6) {
      ++entry.params;
      const size_t type = text.find_first_not_of(space, p + 6);
      entry.pointers += type != std::string::npos && text.compare(type, 4, ".u64") == 0;
    }
    entries[text.substr(name, open - name)] = entry;
    from = close;
  }
  for (uint32_t i = 0; i < binary.symbols()->size(); ++i) {
    const auto& launches = *binary.launches()->Get(i)->launches();
    for (uint32_t l = 0; l < launches.size(); ++l) {
      const fb::GpuLaunch& launch = *launches.Get(l);
      const std::string entry = StringOf(launch.entry());
      const std::string on = where + " launch '" + Printable(entry) + "'";
      auto found = entries.find(entry);
      if (found == entries.end())
        return Fail(ErrorCode::kPlanMissingKernel, on + ": no such .entry in the PTX");
      if (found->second.params != launch.args()->size() ||
          found->second.pointers != found->second.params)
        return Fail(ErrorCode::kPlanUnsafeCode,
                    on + ": the launch table passes " + Str(launch.args()->size()) +
                        " buffers, the entry takes " + Str(found->second.params) +
                        " parameters (" + Str(found->second.pointers) + " of them pointers)");
    }
  }
  return Status::Ok();
}

// Every byte of the State (or Constant) region that a buffer covers belongs to
// exactly one initializer: nothing is read that was never written, and no two
// initializers fight over bytes.
Status CheckRegionInitialized(const fb::Plan& plan, fb::Region region, const ByteRanges& covered,
                              const char* what) {
  for (uint32_t i = 0; i < plan.buffers()->size(); ++i) {
    const fb::Buffer* b = plan.buffers()->Get(i);
    if (b->region() == region && !covered.Covers(b->offset(), b->offset() + b->size()))
      return Fail(ErrorCode::kPlanUndefinedRead,
                  BufferName(plan, i) + " lies in " + fb::EnumNameRegion(region) +
                      " memory that no " + what + " initializes");
  }
  return Status::Ok();
}

// A program's inputs are arena buffers the caller fills before a run and its
// outputs buffers the caller reads after it: no two inputs (filling one would
// change the other) and no two outputs may share a byte, and no command may
// write over an output after computing it. (An output may reuse the bytes of
// an input read for the last time: inputs are written before every run.)
// Every command reads only arena bytes that the inputs or earlier commands of
// the same program wrote: the arena's contents are not kept between runs.
Status CheckProgramDataflow(const fb::Plan& plan, const fb::Program& program,
                            const std::string& name, CommandChecker& budget) {
  const auto& inputs = *program.inputs();
  const auto& outputs = *program.outputs();
  RETURN_IF_ERROR(budget.Spend(uint64_t{inputs.size()} * inputs.size() +
                               uint64_t{outputs.size()} * outputs.size()));
  for (uint32_t i = 0; i < inputs.size(); ++i)
    if (plan.buffers()->Get(inputs.Get(i))->region() != fb::Region::Arena)
      return Fail(ErrorCode::kPlanBadValue, "program '" + name + "': input " +
                                                BufferName(plan, inputs.Get(i)) +
                                                " is not in the arena");
  for (const auto* list : {&inputs, &outputs}) {
    const char* what = list == &inputs ? "inputs " : "outputs ";
    for (uint32_t a = 0; a < list->size(); ++a)
      for (uint32_t b = a + 1; b < list->size(); ++b)
        if (Overlaps(*plan.buffers()->Get(list->Get(a)), *plan.buffers()->Get(list->Get(b))))
          return Fail(ErrorCode::kPlanAliasedOperands,
                      "program '" + name + "': " + what + BufferName(plan, list->Get(a)) +
                          " and " + BufferName(plan, list->Get(b)) + " share memory");
  }
  // Per output: the last command that computes it, and the last that writes
  // over part of it otherwise.
  std::vector<int64_t> computed(outputs.size(), -1), clobbered(outputs.size(), -1);
  ByteRanges written;
  for (int32_t index : inputs) {
    const fb::Buffer* b = plan.buffers()->Get(index);
    written.Add(b->offset(), b->offset() + b->size());
  }
  auto reads_unwritten = [&](int32_t index) {
    const fb::Buffer* b = plan.buffers()->Get(index);
    return b->region() == fb::Region::Arena &&
           !written.Covers(b->offset(), b->offset() + b->size());
  };
  for (uint32_t c = 0; c < program.commands()->size(); ++c) {
    const fb::Command* command = program.commands()->Get(c);
    for (int32_t index : *command->inputs())
      if (reads_unwritten(index)) {
        std::string where = "program '" + name + "' command " + Str(c);
        if (command->location() && command->location()->size())
          where += " (" + PrintableOf(command->location()) + ")";
        const fb::Buffer* b = plan.buffers()->Get(index);
        return Fail(ErrorCode::kPlanUndefinedRead,
                    where + ": reads " + BufferName(plan, index) + " (arena bytes [" +
                        Str(b->offset()) + ", " + Str(b->offset() + b->size()) +
                        ")), which neither the program's inputs nor an earlier command wrote");
      }
    RETURN_IF_ERROR(budget.Spend(uint64_t{command->outputs()->size()} * outputs.size()));
    for (int32_t index : *command->outputs()) {
      const fb::Buffer* b = plan.buffers()->Get(index);
      if (b->region() == fb::Region::Arena) written.Add(b->offset(), b->offset() + b->size());
      for (uint32_t o = 0; o < outputs.size(); ++o) {
        const fb::Buffer* out = plan.buffers()->Get(outputs.Get(o));
        if (SameMemory(*b, *out))
          computed[o] = c;
        else if (Overlaps(*b, *out))
          clobbered[o] = c;
      }
    }
  }
  for (uint32_t o = 0; o < outputs.size(); ++o) {
    if (reads_unwritten(outputs.Get(o)))
      return Fail(ErrorCode::kPlanUndefinedRead,
                  "program '" + name + "': output " + BufferName(plan, outputs.Get(o)) +
                      " is never written");
    if (clobbered[o] > computed[o])
      return Fail(ErrorCode::kPlanAliasedOperands,
                  "program '" + name + "': command " + Str(clobbered[o]) + " writes over output " +
                      BufferName(plan, outputs.Get(o)) + " after it is computed");
  }
  return Status::Ok();
}

// Collectives: every AllreduceStart has exactly one later AllreduceWait of the
// same bucket over the same buffers, in the same program, and between the two
// no command reads or writes a byte of the bucket (the communicator is
// reading and writing it). Checked on bytes, not buffer names, since the
// arena reuses memory.
Status CheckCollectives(const fb::Plan& plan, const fb::Program& program,
                        const std::string& name, CommandChecker& budget) {
  struct InFlight {
    uint32_t start;
    const fb::Command* command;
    ByteRanges bytes;
  };
  std::map<int32_t, InFlight> in_flight;  // by bucket
  auto where_of = [&](uint32_t c) {
    const fb::Command* command = program.commands()->Get(c);
    std::string where = "program '" + name + "' command " + Str(c);
    if (command->location() && command->location()->size())
      where += " (" + PrintableOf(command->location()) + ")";
    return where;
  };
  for (uint32_t c = 0; c < program.commands()->size(); ++c) {
    const fb::Command* command = program.commands()->Get(c);
    const bool start = command->op() == fb::Opcode::AllreduceStart;
    const bool wait = command->op() == fb::Opcode::AllreduceWait;
    const int32_t bucket = (start || wait) ? command->collective()->bucket() : -1;
    if (wait) {
      auto it = in_flight.find(bucket);
      if (it == in_flight.end())
        return Fail(ErrorCode::kPlanBadValue, where_of(c) + ": waits for bucket " + Str(bucket) +
                                                  ", which no earlier command started");
      const auto& started = *it->second.command->inputs();
      const auto& waited = *command->inputs();
      if (!std::equal(started.begin(), started.end(), waited.begin(), waited.end()))
        return Fail(ErrorCode::kPlanBadValue,
                    where_of(c) + ": waits for bucket " + Str(bucket) +
                        " with other buffers than its start (command " +
                        Str(it->second.start) + ") reduces");
      in_flight.erase(it);
      continue;
    }
    if (start && in_flight.count(bucket))
      return Fail(ErrorCode::kPlanBadValue,
                  where_of(c) + ": starts bucket " + Str(bucket) +
                      " again while it is in flight (command " +
                      Str(in_flight[bucket].start) + ")");
    // Every operand against every bucket in flight.
    RETURN_IF_ERROR(budget.Spend(uint64_t{in_flight.size()} *
                                 (command->inputs()->size() + command->outputs()->size())));
    for (const auto* list : {command->inputs(), command->outputs()})
      for (int32_t index : *list) {
        const fb::Buffer* b = plan.buffers()->Get(index);
        if (b->region() != fb::Region::Arena) continue;
        for (const auto& [other, flight] : in_flight)
          if (flight.bytes.Intersects(b->offset(), b->offset() + b->size()))
            return Fail(ErrorCode::kPlanAliasedOperands,
                        where_of(c) + ": " + (list == command->inputs() ? "reads " : "writes ") +
                            BufferName(plan, index) + " while the allreduce of bucket " +
                            Str(other) + " (command " + Str(flight.start) +
                            ") has its bytes in flight");
      }
    if (start) {
      InFlight flight{c, command, {}};
      for (int32_t index : *command->inputs()) {
        const fb::Buffer* b = plan.buffers()->Get(index);
        flight.bytes.Add(b->offset(), b->offset() + b->size());
      }
      in_flight.emplace(bucket, std::move(flight));
    }
  }
  if (!in_flight.empty())
    return Fail(ErrorCode::kPlanBadValue,
                where_of(in_flight.begin()->second.start) + ": starts bucket " +
                    Str(in_flight.begin()->first) + ", which the program never waits for");
  return Status::Ok();
}

}  // namespace

Status CheckPlanSemantics(const fb::Plan& plan, const LoaderLimits& limits) {
  if (plan.buffers() == nullptr || plan.programs() == nullptr)
    return Fail(ErrorCode::kPlanMalformed, "plan has no buffers or no programs");
  // graphc's --batch-size range; the trainer checks it against the inputs.
  if (plan.batch_size() < 1 || plan.batch_size() > (int64_t{1} << 20))
    return Fail(ErrorCode::kPlanBadValue,
                "batch_size " + Str(plan.batch_size()) + " is outside [1, 1048576]");
  for (uint64_t size : {plan.arena_size(), plan.state_size(), plan.constant_size()})
    if (size > limits.max_region_bytes)
      return Fail(ErrorCode::kPlanBufferOutOfRange,
                  "a region of " + Str(size) + " bytes exceeds the limit of " +
                      Str(limits.max_region_bytes));
  RETURN_IF_ERROR(CheckBuffers(plan, limits));

  ByteRanges initialized;
  std::set<std::string> state_names;
  if (plan.states())
    for (uint32_t i = 0; i < plan.states()->size(); ++i) {
      const fb::State* s = plan.states()->Get(i);
      std::string where = "state " + Str(i);
      RETURN_IF_ERROR(CheckBufferRef(plan, s->buffer(), fb::Region::State, where));
      if (s->init() < fb::Initializer::MIN || s->init() > fb::Initializer::MAX)
        return Fail(ErrorCode::kPlanBadValue, where + ": unknown initializer");
      if (!std::isfinite(s->value()) ||
          (s->value() < 0 && (s->init() == fb::Initializer::Normal ||
                              s->init() == fb::Initializer::Uniform)))
        return Fail(ErrorCode::kPlanBadValue,
                    where + " (" + BufferName(plan, s->buffer()) + "): initializer value " +
                        Str(s->value()) + " is not a finite, valid parameter");
      const fb::Buffer* b = plan.buffers()->Get(s->buffer());
      // Checkpoints store the state by name: found now, not after training.
      const std::string state_name = StringOf(b->name());
      if (state_name.empty() || !IsUtf8(state_name) || !state_names.insert(state_name).second)
        return Fail(ErrorCode::kPlanBadValue,
                    where + " (" + BufferName(plan, s->buffer()) +
                        "): a state needs a name, in UTF-8, that no other state has");
      if (initialized.Intersects(b->offset(), b->offset() + b->size()))
        return Fail(ErrorCode::kPlanAliasedOperands,
                    where + ": " + BufferName(plan, s->buffer()) +
                        " shares memory with another state that has its own initializer");
      initialized.Add(b->offset(), b->offset() + b->size());
    }
  RETURN_IF_ERROR(CheckRegionInitialized(plan, fb::Region::State, initialized, "state"));
  ByteRanges constant_bytes;
  if (plan.constants())
    for (uint32_t i = 0; i < plan.constants()->size(); ++i) {
      const fb::Constant* c = plan.constants()->Get(i);
      std::string where = "constant " + Str(i);
      RETURN_IF_ERROR(CheckBufferRef(plan, c->buffer(), fb::Region::Constant, where));
      const fb::Buffer* b = plan.buffers()->Get(c->buffer());
      if (c->data() == nullptr || c->data()->size() != b->size())
        return Fail(ErrorCode::kPlanBadShape, where + ": data does not fill its buffer");
      if (constant_bytes.Intersects(b->offset(), b->offset() + b->size()))
        return Fail(ErrorCode::kPlanAliasedOperands,
                    where + ": " + BufferName(plan, c->buffer()) +
                        " shares memory with another constant that has its own data");
      constant_bytes.Add(b->offset(), b->offset() + b->size());
    }
  RETURN_IF_ERROR(
      CheckRegionInitialized(plan, fb::Region::Constant, constant_bytes, "constant's data"));
  if (plan.kernels()) {
    std::set<std::string> names;
    for (uint32_t i = 0; i < plan.kernels()->size(); ++i) {
      const fb::Kernel* k = plan.kernels()->Get(i);
      std::string where = "kernel " + Str(i);
      if (k->name() == nullptr || k->name()->size() == 0 || k->ops() == nullptr)
        return Fail(ErrorCode::kPlanBadValue, where + ": has no name or no op list");
      if (!names.insert(k->name()->str()).second)
        return Fail(ErrorCode::kPlanBadValue, where + ": name " + KernelName(*k) + " is taken");
      if (Misaligned(k->arg_bytes()))
        return Fail(ErrorCode::kPlanMalformed, where + ": arg_bytes is misaligned");
      // int64: two int32 counts from the file may overflow int32 (the fuzzer).
      const int64_t arity = int64_t{k->num_inputs()} + k->num_outputs();
      if (k->num_inputs() < 0 || k->num_outputs() < 1 || k->arg_bytes() == nullptr ||
          static_cast<int64_t>(k->arg_bytes()->size()) != arity || arity > limits.max_operands)
        return Fail(ErrorCode::kPlanBadValue, where + ": inconsistent arity");
      if (const auto* groups = k->arg_groups(); groups != nullptr && groups->size() != 0) {
        if (static_cast<int64_t>(groups->size()) != arity)
          return Fail(ErrorCode::kPlanBadValue, where + ": needs one group per argument");
        for (uint32_t a = static_cast<uint32_t>(k->num_inputs()); a < groups->size(); ++a)
          if (groups->Get(a) < 0)
            return Fail(ErrorCode::kPlanBadValue, where + ": puts an output in no group");
      }
    }
  }
  if (plan.binaries()) {
    std::set<fb::Target> targets;
    for (uint32_t i = 0; i < plan.binaries()->size(); ++i) {
      const fb::KernelBinary* b = plan.binaries()->Get(i);
      const std::string where = "binary " + Str(i);
      if (b->target() > fb::Target::MAX || b->format() > fb::BinaryFormat::MAX ||
          b->target() < fb::Target::MIN || b->format() < fb::BinaryFormat::MIN ||
          b->data() == nullptr || b->symbols() == nullptr)
        return Fail(ErrorCode::kPlanBadValue, where + ": malformed");
      if (!targets.insert(b->target()).second)
        return Fail(ErrorCode::kPlanBadValue,
                    where + ": a second binary for " + fb::EnumNameTarget(b->target()));
      const bool elf = b->format() == fb::BinaryFormat::ElfSharedObject;
      if (elf != (b->target() == fb::Target::CpuX86_64))
        return Fail(ErrorCode::kPlanBadValue,
                    where + ": " + fb::EnumNameBinaryFormat(b->format()) + " code for " +
                        fb::EnumNameTarget(b->target()));
      RETURN_IF_ERROR(CheckLaunches(plan, *b, where));
      if (elf)
        RETURN_IF_ERROR(CheckCpuLibrary(plan, *b, where + " (x86-64 kernel library)"));
      else
        RETURN_IF_ERROR(CheckPtx(*b, where + " (" + fb::EnumNameTarget(b->target()) + " PTX)"));
    }
  }

  CommandChecker checker(plan, limits);
  for (uint32_t p = 0; p < plan.programs()->size(); ++p) {
    const fb::Program* program = plan.programs()->Get(p);
    std::string name = program->name() ? PrintableOf(program->name()) : Str(p);
    if (program->commands() == nullptr || program->inputs() == nullptr ||
        program->outputs() == nullptr)
      return Fail(ErrorCode::kPlanMalformed, "program '" + name + "' is incomplete");
    for (auto* list : {program->inputs(), program->outputs()})
      if (list->size() > limits.max_operands)
        return Fail(ErrorCode::kPlanBadValue, "program '" + name + "': more than " +
                                                  Str(limits.max_operands) + " inputs or outputs");
    for (auto* list : {program->inputs(), program->outputs()})
      for (int32_t index : *list)
        if (index < 0 || static_cast<uint32_t>(index) >= plan.buffers()->size())
          return Fail(ErrorCode::kPlanBadIndex, "program '" + name + "': I/O buffer " +
                                                    Str(index) + " out of range");
    for (uint32_t c = 0; c < program->commands()->size(); ++c) {
      const fb::Command* command = program->commands()->Get(c);
      std::string where = "program '" + name + "' command " + Str(c);
      if (command->location() && command->location()->size())
        where += " (" + PrintableOf(command->location()) + ")";
      RETURN_IF_ERROR(checker.Check(*command, where));
    }
    RETURN_IF_ERROR(CheckProgramDataflow(plan, *program, name, checker));
    RETURN_IF_ERROR(CheckCollectives(plan, *program, name, checker));
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<Plan>> Plan::FromBytes(std::vector<uint8_t> bytes,
                                                const LoaderLimits& limits) {
  // A FlatBuffer starts with a 4-byte root offset and the 4-byte identifier.
  if (bytes.size() < 8)
    return Fail(ErrorCode::kPlanTooSmall,
                "plan is " + Str(bytes.size()) + " bytes; a plan has at least 8");
  if (bytes.size() > limits.max_file_bytes)
    return Fail(ErrorCode::kPlanMalformed, "plan is larger than " +
                                               Str(limits.max_file_bytes) + " bytes");
  if (!fb::PlanBufferHasIdentifier(bytes.data()))
    return Fail(ErrorCode::kPlanWrongIdentifier,
                "not a graphc plan (file identifier is not \"GPLN\")");
  std::unique_ptr<Plan> plan(new Plan(std::move(bytes)));
  flatbuffers::Verifier verifier(plan->bytes_.data(), plan->bytes_.size(),
                                 limits.max_depth, limits.max_tables);
  if (!fb::VerifyPlanBuffer(verifier))
    return Fail(ErrorCode::kPlanMalformed,
                "FlatBuffers verification failed (truncated or corrupt plan)");
  plan->root_ = fb::GetPlan(plan->bytes_.data());
  const uint32_t version = plan->root_->version();
  if (version < kOldestPlanSchemaVersion || version > kPlanSchemaVersion)
    return Fail(ErrorCode::kPlanUnsupportedVersion,
                "plan schema version " + Str(version) + " (this runtime reads " +
                    (kOldestPlanSchemaVersion == kPlanSchemaVersion
                         ? "version " + Str(kPlanSchemaVersion)
                         : Str(kOldestPlanSchemaVersion) + " to " + Str(kPlanSchemaVersion)) +
                    "; recompile the model with this graphc)");
  RETURN_IF_ERROR(CheckPlanIntegrity(plan->bytes_.data(), plan->bytes_.size()));
  RETURN_IF_ERROR(CheckPlanSemantics(*plan->root_, limits));
  return plan;
}

StatusOr<std::unique_ptr<Plan>> Plan::FromFile(const std::string& path,
                                               const LoaderLimits& limits) {
  // Open first, then ask the open file what it is: a directory, a device
  // (/dev/zero) or a FIFO is refused before a byte is read, and a regular
  // file's size before it is read whole.
  const std::string shown = Printable(path);
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // a FIFO must not block
  if (fd < 0)
    return Fail(ErrorCode::kIo, "cannot open plan '" + shown + "' (" + std::strerror(errno) + ")");
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return Fail(ErrorCode::kIo, "plan '" + shown + "' is not a regular file" +
                                    (S_ISDIR(st.st_mode) ? " (it is a directory)" : ""));
  }
  if (static_cast<uint64_t>(st.st_size) > limits.max_file_bytes) {
    close(fd);
    return Fail(ErrorCode::kPlanMalformed, shown + ": plan is " + Str(st.st_size) +
                                               " bytes, more than the limit of " +
                                               Str(limits.max_file_bytes));
  }
  std::vector<uint8_t> bytes(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t got = read(fd, bytes.data() + done, bytes.size() - done);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    done += static_cast<size_t>(got);
  }
  close(fd);
  if (done != bytes.size())
    return Fail(ErrorCode::kIo, "cannot read plan '" + shown + "' (it changed while read)");
  StatusOr<std::unique_ptr<Plan>> plan = FromBytes(std::move(bytes), limits);
  if (!plan.ok())
    return Status(plan.status().code(), shown + ": " + plan.status().message());
  return plan;
}

Status Plan::CheckTarget(fb::Target target) const {
  const fb::KernelBinary* binary = nullptr;
  if (root_->binaries())
    for (const fb::KernelBinary* b : *root_->binaries())
      if (b->target() == target) binary = b;
  // The loader proved that a binary defines every kernel of the plan.
  for (const fb::Program* program : *root_->programs())
    for (const fb::Command* command : *program->commands())
      if (command->op() == fb::Opcode::Kernel && binary == nullptr)
        return Fail(ErrorCode::kPlanMissingKernel, std::string("the plan has no kernel binary "
                                                               "for target ") +
                                                       fb::EnumNameTarget(target));
  return Status::Ok();
}

}  // namespace graphc::runtime
