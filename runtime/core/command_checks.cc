// Each command of a program against the plan (plan_checks.h): its buffer
// indices, its arity, which operands may overlap (in place only where
// declared), and its shapes as its op defines them, in its layout.

#include "runtime/core/plan_checks.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace graphc::runtime::verify {

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

Status CommandChecker::CheckOverlap(const fb::Command& command, bool may_be_in_place,
                                    const std::string& where) {
  const auto& inputs = *command.inputs();
  const auto& outputs = *command.outputs();
  GRAPHC_RETURN_IF_ERROR(Spend(uint64_t{outputs.size()} * (inputs.size() + outputs.size())));
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
      GRAPHC_RETURN_IF_ERROR(CheckArity(in.size(), 2, command.op() == fb::Opcode::Conv2d ? 3 : 2,
                                 out.size(), where));
      GRAPHC_RETURN_IF_ERROR(same_float_dtype());
      const fb::ConvAttrs* attrs = command.conv();
      if (attrs == nullptr)
        return Fail(ErrorCode::kPlanBadValue, where + ": convolution without attributes");
      GRAPHC_RETURN_IF_ERROR(CheckAttrArray(attrs->strides(), 2, 1, "strides", where));
      GRAPHC_RETURN_IF_ERROR(CheckAttrArray(attrs->dilations(), 2, 1, "dilations", where));
      GRAPHC_RETURN_IF_ERROR(CheckAttrArray(attrs->padding(), 4, 0, "padding", where));
      int64_t groups = attrs->groups();
      if (groups < 1 || groups > (int64_t{1} << 24))
        return Fail(ErrorCode::kPlanBadValue,
                    where + ": groups " + Str(groups) + " is not positive");
      ActivationDims a;
      GRAPHC_RETURN_IF_ERROR(LayoutDims(attrs->layout(), plan_.version(), "convolution", where, &a));
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
      GRAPHC_RETURN_IF_ERROR(CheckArity(in.size(), 2, 3, out.size(), where));
      GRAPHC_RETURN_IF_ERROR(same_float_dtype());
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
      GRAPHC_RETURN_IF_ERROR(CheckArity(in.size(), max_backward ? 2 : 1, max_backward ? 2 : 1,
                                 out.size(), where));
      GRAPHC_RETURN_IF_ERROR(same_float_dtype());
      const fb::PoolAttrs* attrs = command.pool();
      if (attrs == nullptr)
        return Fail(ErrorCode::kPlanBadValue, where + ": pooling without attributes");
      GRAPHC_RETURN_IF_ERROR(CheckAttrArray(attrs->window(), 2, 1, "window", where));
      GRAPHC_RETURN_IF_ERROR(CheckAttrArray(attrs->strides(), 2, 1, "strides", where));
      GRAPHC_RETURN_IF_ERROR(CheckAttrArray(attrs->padding(), 4, 0, "padding", where));
      const auto& k = *attrs->window();
      const auto& s = *attrs->strides();
      const auto& p = *attrs->padding();
      if (p[0] >= k[0] || p[1] >= k[0] || p[2] >= k[1] || p[3] >= k[1])
        return Fail(ErrorCode::kPlanBadValue, where + ": padding must be below the window");
      ActivationDims a;
      GRAPHC_RETURN_IF_ERROR(LayoutDims(attrs->layout(), plan_.version(), "pooling", where, &a));
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
    case fb::Opcode::Attention:
    case fb::Opcode::AttentionBackward: {
      // q [G, Lq, D], k [G, Lk, D] (or [G, D, Lk]), v [G, Lk, Dv], then one
      // bias [P, Lq, Lk] per bias stride; forward outputs o [G, Lq, Dv] and
      // lse [G, Lq]; backward reads those and do after v and writes dq, dk,
      // dv of q's, k's and v's shapes and one gradient per bias. q, k, v, o,
      // do, dq, dk and dv of one dtype (F32, or F16 or BF16: attention in
      // mixed precision); lse, the biases and their gradients F32.
      const bool forward = command.op() == fb::Opcode::Attention;
      if (plan_.version() < 7)
        return Fail(ErrorCode::kPlanBadValue,
                    where + ": fused attention in a plan of schema version " +
                        Str(plan_.version()) + " (attention is version 7)");
      if (command.attention() == nullptr)
        return Fail(ErrorCode::kPlanBadValue, where + ": attention without attributes");
      const auto* strides = command.attention()->bias_strides();
      const uint32_t biases = strides ? strides->size() : 0;
      if (biases > kMaxAttentionBiases)
        return Fail(ErrorCode::kPlanBadValue, where + ": attention with " + Str(biases) +
                                                  " biases (at most " +
                                                  Str(kMaxAttentionBiases) + ")");
      const uint32_t operands = forward ? 3 : 6;
      const uint32_t results = forward ? 2 : 3 + biases;
      if (in.size() != operands + biases || out.size() != results)
        return Fail(ErrorCode::kPlanBadIndex,
                    where + ": takes " + Str(operands + biases) + " inputs and " +
                        Str(results) + " outputs (" + Str(biases) + " biases), has " +
                        Str(in.size()) + " and " + Str(out.size()));
      const fb::DType dtype = Buf(in.Get(0)).dtype();
      if (dtype != fb::DType::F32 && dtype != fb::DType::F16 && dtype != fb::DType::BF16)
        return Fail(ErrorCode::kPlanBadValue,
                    where + ": attention on " + fb::EnumNameDType(dtype) +
                        " (F32, F16 or BF16)");
      for (uint32_t i = 0; i < in.size() + out.size(); ++i) {
        const bool input = i < in.size();
        const uint32_t at = input ? i : i - static_cast<uint32_t>(in.size());
        // lse and the biases (inputs and their gradients) are F32.
        const bool wide = input ? (at >= operands || (!forward && at == 4))
                                : (forward ? at == 1 : at >= 3);
        const fb::DType want = wide ? fb::DType::F32 : dtype;
        const fb::DType got = Buf(input ? in.Get(at) : out.Get(at)).dtype();
        if (got != want)
          return Fail(ErrorCode::kPlanBadValue,
                      where + ": attention " + (input ? "input " : "output ") + Str(at) +
                          " is " + fb::EnumNameDType(got) + ", not " + fb::EnumNameDType(want) +
                          (wide ? " (lse and biases are F32)" : " (q's dtype)"));
      }
      std::vector<int64_t> q = Shape(in.Get(0)), k = Shape(in.Get(1)), v = Shape(in.Get(2));
      if (q.size() != 3 || k.size() != 3 || v.size() != 3)
        return ShapeError(where, "attention operands must be rank 3");
      const bool tk = command.attention()->transpose_k();
      const int64_t g = q[0], lq = q[1], d = q[2], lk = k[tk ? 2 : 1];
      if (k[0] != g || v[0] != g || k[tk ? 1 : 2] != d || v[1] != lk || g < 1 || lq < 1 ||
          lk < 1 || d < 1 || v[2] < 1)
        return ShapeError(where, "attention of q " + ShapeStr(q) + ", k " + ShapeStr(k) +
                                     (tk ? " (transposed)" : "") + " and v " + ShapeStr(v));
      for (uint32_t i = 0; i < biases; ++i) {
        const std::vector<int64_t> bias = Shape(in.Get(operands + i));
        if (bias.size() != 3 || bias[0] < 1 || bias[1] != lq || bias[2] != lk)
          return ShapeError(where, "attention bias " + Str(i) + " " + ShapeStr(bias) +
                                       " is not [P, " + Str(lq) + ", " + Str(lk) + "]");
        if (strides->Get(i) < 1)
          return Fail(ErrorCode::kPlanBadValue,
                      where + ": attention bias stride " + Str(strides->Get(i)) + " (>= 1)");
        if (!forward && Shape(out.Get(3 + i)) != bias)
          return ShapeError(where, "attention bias gradient " + Str(i) + " " +
                                       ShapeStr(Shape(out.Get(3 + i))) + " for bias " +
                                       ShapeStr(bias));
      }
      const std::vector<int64_t> o = {g, lq, v[2]}, lse = {g, lq};
      if (forward) {
        if (Shape(out.Get(0)) != o || Shape(out.Get(1)) != lse)
          return ShapeError(where, "attention gives " + ShapeStr(o) + " and " + ShapeStr(lse));
      } else if (Shape(in.Get(3)) != o || Shape(in.Get(4)) != lse || Shape(in.Get(5)) != o ||
                 Shape(out.Get(0)) != q || Shape(out.Get(1)) != k || Shape(out.Get(2)) != v) {
        return ShapeError(where, "attention gradients of q " + ShapeStr(q) + ", k " +
                                     ShapeStr(k) + " and v " + ShapeStr(v));
      }
      return Status::Ok();
    }
    case fb::Opcode::Copy:
      GRAPHC_RETURN_IF_ERROR(CheckArity(in.size(), 1, 1, out.size(), where));
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
      const bool sparse = attrs->sparse();
      if (sparse && (in.size() % 3 != 0 || attrs->wire() != fb::DType::F32))
        return Fail(ErrorCode::kPlanBadValue,
                    where + ": a sparse allreduce takes threes of buffers (values, indices, "
                            "dense) and travels as F32");
      const auto* in_place = command.in_place();
      if (in_place == nullptr || in_place->size() != in.size())
        return Fail(ErrorCode::kPlanAliasedOperands,
                    where + ": a collective must declare every buffer in place");
      if (attrs->sent_entries() != 0) {
        uint64_t room = 0;
        for (uint32_t i = 0; sparse && command.op() == fb::Opcode::AllreduceStart &&
                             i + 2 < in.size();
             i += 3)
          room += Buf(in.Get(i)).size() / 4;
        if (room == 0 || attrs->sent_entries() > room)
          return Fail(ErrorCode::kPlanBadValue,
                      where + ": sends " + Str(attrs->sent_entries()) + " entries; " +
                          (room == 0 ? std::string("only a sparse start says what it sends")
                                     : "its sets hold " + Str(room)));
      }
      GRAPHC_RETURN_IF_ERROR(Spend(uint64_t{in.size()} * in.size()));
      for (uint32_t i = 0; i < in.size(); ++i) {
        const fb::Buffer& b = Buf(in.Get(i));
        if (in.Get(i) != out.Get(i) || in_place->Get(i) != static_cast<int32_t>(i))
          return Fail(ErrorCode::kPlanAliasedOperands,
                      where + ": output " + Str(i) + " is not input " + Str(i) + " in place");
        if (b.region() != fb::Region::Arena)
          return Fail(ErrorCode::kPlanBadValue,
                      where + ": reduces " + BufferName(plan_, in.Get(i)) +
                          ", which is not in the arena");
        if (sparse) {
          // Values F32 [k], indices I32 [k], dense F32 [n], 1 <= k <= n < 2^31.
          const fb::DType expected = i % 3 == 1 ? fb::DType::I32 : fb::DType::F32;
          if (b.dtype() != expected)
            return Fail(ErrorCode::kPlanBadValue,
                        where + ": sparse allreduce " + BufferName(plan_, in.Get(i)) +
                            " is " + fb::EnumNameDType(b.dtype()) + ", not " +
                            fb::EnumNameDType(expected));
          if (i % 3 == 2) {
            const uint64_t k = Buf(in.Get(i - 2)).size() / 4, n = b.size() / 4;
            if (k == 0 || Buf(in.Get(i - 1)).size() != k * 4 || k > n || n >= (uint64_t{1} << 31))
              return ShapeError(where, "a sparse set of " + Str(k) + " values, " +
                                           Str(Buf(in.Get(i - 1)).size() / 4) + " indices and " +
                                           Str(n) + " dense elements");
          }
        } else if (b.dtype() != fb::DType::F32 && b.dtype() != fb::DType::F16 &&
                   b.dtype() != fb::DType::BF16) {
          return Fail(ErrorCode::kPlanBadValue,
                      where + ": reduces " + BufferName(plan_, in.Get(i)) + " of type " +
                          fb::EnumNameDType(b.dtype()) + "; only F32, F16 and BF16 reduce");
        }
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
  GRAPHC_RETURN_IF_ERROR(CheckIndices(command.inputs(), "input", where));
  GRAPHC_RETURN_IF_ERROR(CheckIndices(command.outputs(), "output", where));
  if (command.outputs()->size() == 0)
    return Fail(ErrorCode::kPlanBadIndex, where + ": has no output");
  GRAPHC_RETURN_IF_ERROR(CheckShapes(command, where));
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

}  // namespace graphc::runtime::verify
