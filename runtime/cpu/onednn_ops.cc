// oneDNN library calls of the CPU backend (see onednn_ops.h).

#include "runtime/cpu/onednn_ops.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "oneapi/dnnl/dnnl.hpp"

namespace graphc::runtime {
namespace {

using dnnl::algorithm;
using dnnl::memory;
using dnnl::prop_kind;
using Dims = memory::dims;

// Row-major strides: NCHW, OIHW, [M, N] and so on.
Dims RowMajor(const Dims& dims) {
  Dims strides(dims.size(), 1);
  for (int i = static_cast<int>(dims.size()) - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * dims[i + 1];
  return strides;
}

memory::desc Plain(const Dims& dims) {
  return memory::desc(dims, memory::data_type::f32, RowMajor(dims));
}

// One step of a prepared command: a primitive and, per argument, the memory
// object and which operand (input index, then outputs) or scratch it uses.
struct Step {
  dnnl::primitive primitive;
  struct Arg {
    int dnnl_arg;
    memory mem;
    int operand;  // -1: a buffer owned by the command (workspace, scratch)
  };
  std::vector<Arg> args;
  std::unordered_map<int, memory> map;  // the same handles, as execute() takes them
};

struct Prepared {
  std::vector<Step> steps;
  std::vector<void*> owned;  // workspaces and scratch outputs, freed at the end
};

struct ConvGeometry {
  Dims strides, dilates, padding_l, padding_r;
  int64_t groups;
};

ConvGeometry Geometry(const fb::ConvAttrs& attrs) {
  ConvGeometry g;
  g.strides = {attrs.strides()->Get(0), attrs.strides()->Get(1)};
  // oneDNN counts dilation from 0 (no dilation); the plan from 1.
  g.dilates = {attrs.dilations()->Get(0) - 1, attrs.dilations()->Get(1) - 1};
  g.padding_l = {attrs.padding()->Get(0), attrs.padding()->Get(2)};  // top, left
  g.padding_r = {attrs.padding()->Get(1), attrs.padding()->Get(3)};  // bottom, right
  g.groups = attrs.groups();
  return g;
}

// OIHW, or GOIHW with O and I per group for grouped convolutions.
memory::desc Weights(const Dims& oihw, int64_t groups) {
  if (groups == 1) return Plain(oihw);
  return Plain({groups, oihw[0] / groups, oihw[1], oihw[2], oihw[3]});
}


}  // namespace

struct OneDnnOps::Impl {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  const fb::Plan* plan = nullptr;
  std::unordered_map<const fb::Command*, Prepared> prepared;
  // One scratchpad for all primitives (they run one at a time).
  void* scratchpad = nullptr;
  size_t scratchpad_bytes = 0;
  std::vector<std::pair<memory::desc, memory*>> scratchpad_users;

  ~Impl() {
    for (auto& [command, p] : prepared)
      for (void* buffer : p.owned) std::free(buffer);
    std::free(scratchpad);
  }

  const fb::Buffer& Buffer(int32_t index) const { return *plan->buffers()->Get(index); }
  memory::desc Input(const fb::Command& c, int i) const {
    return Plain(ShapeOf(Buffer(c.inputs()->Get(i))));
  }
  memory::desc Output(const fb::Command& c, int i) const {
    return Plain(ShapeOf(Buffer(c.outputs()->Get(i))));
  }
  dnnl::primitive_attr Attr() const {
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    return attr;
  }

  // Adds `primitive` with its arguments; `operands` maps DNNL args to operand
  // indices (inputs, then outputs at inputs()->size() + i).
  template <typename Primitive>
  Step& AddStep(Prepared& p, const typename Primitive::primitive_desc& pd,
                const std::vector<std::pair<int, std::pair<memory::desc, int>>>& operands) {
    Step& step = p.steps.emplace_back();
    step.primitive = Primitive(pd);
    for (const auto& [arg, desc_operand] : operands)
      step.args.push_back({arg, memory(desc_operand.first, engine, DNNL_MEMORY_NONE),
                           desc_operand.second});
    memory::desc scratch = pd.scratchpad_desc();
    step.args.push_back({DNNL_ARG_SCRATCHPAD, memory(scratch, engine, DNNL_MEMORY_NONE), -1});
    scratchpad_bytes = std::max(scratchpad_bytes, scratch.get_size());
    return step;
  }

  // A buffer the command owns (workspace, recomputed forward output).
  memory Owned(Prepared& p, const memory::desc& desc) {
    size_t bytes = std::max<size_t>(desc.get_size(), 64);
    void* buffer = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    p.owned.push_back(buffer);
    return memory(desc, engine, buffer);
  }

  dnnl::convolution_forward::primitive_desc ForwardHint(const memory::desc& x,
                                                        const memory::desc& w,
                                                        const memory::desc& y,
                                                        const ConvGeometry& g) const;
  Status PrepareConv(const fb::Command& c, Prepared& p);
  Status PrepareGemm(const fb::Command& c, Prepared& p);
  Status PreparePool(const fb::Command& c, Prepared& p);
};


// The forward primitive a backward one is created against.
dnnl::convolution_forward::primitive_desc OneDnnOps::Impl::ForwardHint(
    const memory::desc& x, const memory::desc& w, const memory::desc& y,
    const ConvGeometry& g) const {
  return dnnl::convolution_forward::primitive_desc(
      dnnl::convolution_forward::desc(prop_kind::forward_training, algorithm::convolution_direct,
                                      x, w, y, g.strides, g.dilates, g.padding_l, g.padding_r),
      engine);
}

Status OneDnnOps::Impl::PrepareConv(const fb::Command& c, Prepared& p) {
  const ConvGeometry g = Geometry(*c.conv());
  const int out = static_cast<int>(c.inputs()->size());  // the first output's operand index
  auto attr = Attr();
  if (c.op() == fb::Opcode::Conv2d) {
    memory::desc x = Input(c, 0), y = Output(c, 0);
    memory::desc w = Weights(ShapeOf(Buffer(c.inputs()->Get(1))), g.groups);
    bool bias = c.inputs()->size() == 3;
    auto desc = bias ? dnnl::convolution_forward::desc(
                           prop_kind::forward_training, algorithm::convolution_direct, x, w,
                           Input(c, 2), y, g.strides, g.dilates, g.padding_l, g.padding_r)
                     : dnnl::convolution_forward::desc(
                           prop_kind::forward_training, algorithm::convolution_direct, x, w,
                           y, g.strides, g.dilates, g.padding_l, g.padding_r);
    dnnl::convolution_forward::primitive_desc pd(desc, attr, engine);
    std::vector<std::pair<int, std::pair<memory::desc, int>>> args = {
        {DNNL_ARG_SRC, {x, 0}}, {DNNL_ARG_WEIGHTS, {w, 1}}, {DNNL_ARG_DST, {y, out}}};
    if (bias) args.push_back({DNNL_ARG_BIAS, {Input(c, 2), 2}});
    AddStep<dnnl::convolution_forward>(p, pd, args);
    return Status::Ok();
  }
  if (c.op() == fb::Opcode::Conv2dBackwardData) {
    memory::desc dy = Input(c, 0), dx = Output(c, 0);
    memory::desc w = Weights(ShapeOf(Buffer(c.inputs()->Get(1))), g.groups);
    auto hint = ForwardHint(dx, w, dy, g);
    dnnl::convolution_backward_data::primitive_desc pd(
        dnnl::convolution_backward_data::desc(algorithm::convolution_direct, dx, w, dy,
                                              g.strides, g.dilates, g.padding_l, g.padding_r),
        attr, engine, hint);
    AddStep<dnnl::convolution_backward_data>(p, pd,
            {{DNNL_ARG_DIFF_DST, {dy, 0}}, {DNNL_ARG_WEIGHTS, {w, 1}},
             {DNNL_ARG_DIFF_SRC, {dx, out}}});
    return Status::Ok();
  }
  // Conv2dBackwardFilter: inputs x, dy; output dw.
  memory::desc x = Input(c, 0), dy = Input(c, 1);
  memory::desc dw = Weights(ShapeOf(Buffer(c.outputs()->Get(0))), g.groups);
  auto hint = ForwardHint(x, dw, dy, g);
  dnnl::convolution_backward_weights::primitive_desc pd(
      dnnl::convolution_backward_weights::desc(algorithm::convolution_direct, x, dw, dy,
                                               g.strides, g.dilates, g.padding_l,
                                               g.padding_r),
      attr, engine, hint);
  AddStep<dnnl::convolution_backward_weights>(p, pd,
          {{DNNL_ARG_SRC, {x, 0}}, {DNNL_ARG_DIFF_DST, {dy, 1}},
           {DNNL_ARG_DIFF_WEIGHTS, {dw, out}}});
  return Status::Ok();
}

Status OneDnnOps::Impl::PrepareGemm(const fb::Command& c, Prepared& p) {
  // c = op(a) x op(b) [+ bias]; a transposed operand is described by strides.
  Dims a = ShapeOf(Buffer(c.inputs()->Get(0)));
  Dims b = ShapeOf(Buffer(c.inputs()->Get(1)));
  Dims out = ShapeOf(Buffer(c.outputs()->Get(0)));
  const size_t rank = out.size();
  auto logical = [&](Dims stored, bool transposed) {
    if (!transposed) return Plain(stored);
    Dims dims = stored, strides = RowMajor(stored);
    std::swap(dims[rank - 1], dims[rank - 2]);
    std::swap(strides[rank - 1], strides[rank - 2]);
    return memory::desc(dims, memory::data_type::f32, strides);
  };
  bool ta = c.gemm() && c.gemm()->transpose_a(), tb = c.gemm() && c.gemm()->transpose_b();
  memory::desc amd = logical(a, ta), bmd = logical(b, tb), cmd = Plain(out);
  const int result = static_cast<int>(c.inputs()->size());
  std::vector<std::pair<int, std::pair<memory::desc, int>>> args = {
      {DNNL_ARG_SRC, {amd, 0}}, {DNNL_ARG_WEIGHTS, {bmd, 1}}, {DNNL_ARG_DST, {cmd, result}}};
  auto attr = Attr();
  if (c.inputs()->size() == 3) {
    Dims bias(rank, 1);
    bias[rank - 1] = out[rank - 1];
    memory::desc biasmd = Plain(bias);
    args.push_back({DNNL_ARG_BIAS, {biasmd, 2}});
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(amd, bmd, biasmd, cmd), attr, engine);
    AddStep<dnnl::matmul>(p, pd, args);
  } else {
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(amd, bmd, cmd), attr, engine);
    AddStep<dnnl::matmul>(p, pd, args);
  }
  return Status::Ok();
}

Status OneDnnOps::Impl::PreparePool(const fb::Command& c, Prepared& p) {
  const fb::PoolAttrs& attrs = *c.pool();
  Dims window = {attrs.window()->Get(0), attrs.window()->Get(1)};
  Dims strides = {attrs.strides()->Get(0), attrs.strides()->Get(1)};
  Dims padding_l = {attrs.padding()->Get(0), attrs.padding()->Get(2)};
  Dims padding_r = {attrs.padding()->Get(1), attrs.padding()->Get(3)};
  bool max = c.op() == fb::Opcode::MaxPool2d || c.op() == fb::Opcode::MaxPool2dBackward;
  algorithm kind = max ? algorithm::pooling_max
                   : attrs.exclude_padding() ? algorithm::pooling_avg_exclude_padding
                                             : algorithm::pooling_avg_include_padding;
  const int out = static_cast<int>(c.inputs()->size());
  auto attr = Attr();
  if (c.op() == fb::Opcode::MaxPool2d || c.op() == fb::Opcode::AvgPool2d) {
    memory::desc x = Input(c, 0), y = Output(c, 0);
    dnnl::pooling_forward::primitive_desc pd(
        dnnl::pooling_forward::desc(prop_kind::forward_inference, kind, x, y, strides, window,
                                    padding_l, padding_r),
        attr, engine);
    AddStep<dnnl::pooling_forward>(p, pd, {{DNNL_ARG_SRC, {x, 0}}, {DNNL_ARG_DST, {y, out}}});
    return Status::Ok();
  }
  // Backward: max pooling recomputes the forward pass for its workspace (the
  // argmax positions), since the plan keeps x rather than oneDNN's workspace.
  memory::desc dy = Input(c, max ? 1 : 0), dx = Output(c, 0);
  dnnl::pooling_forward::primitive_desc forward(
      dnnl::pooling_forward::desc(prop_kind::forward_training, kind, dx, dy, strides, window,
                                  padding_l, padding_r),
      attr, engine);
  dnnl::pooling_backward::primitive_desc pd(
      dnnl::pooling_backward::desc(kind, dx, dy, strides, window, padding_l, padding_r), attr,
      engine, forward);
  if (!max) {
    AddStep<dnnl::pooling_backward>(p, pd, {{DNNL_ARG_DIFF_DST, {dy, 0}}, {DNNL_ARG_DIFF_SRC, {dx, out}}});
    return Status::Ok();
  }
  memory workspace = Owned(p, forward.workspace_desc());
  memory y = Owned(p, dy);
  Step& fwd = AddStep<dnnl::pooling_forward>(p, forward, {{DNNL_ARG_SRC, {dx, 0}}});
  fwd.args.push_back({DNNL_ARG_DST, y, -1});
  fwd.args.push_back({DNNL_ARG_WORKSPACE, workspace, -1});
  Step& bwd = AddStep<dnnl::pooling_backward>(p, pd, {{DNNL_ARG_DIFF_DST, {dy, 1}}, {DNNL_ARG_DIFF_SRC, {dx, out}}});
  bwd.args.push_back({DNNL_ARG_WORKSPACE, workspace, -1});
  return Status::Ok();
}

OneDnnOps::OneDnnOps() : impl_(std::make_unique<Impl>()) {}
OneDnnOps::~OneDnnOps() = default;

Status OneDnnOps::Prepare(const Plan& plan) {
  Impl& impl = *impl_;
  impl.plan = &plan.root();
  for (const fb::Program* program : *impl.plan->programs())
    for (const fb::Command* c : *program->commands()) {
      if (c->op() == fb::Opcode::Kernel || c->op() == fb::Opcode::Copy) continue;
      for (auto* list : {c->inputs(), c->outputs()})
        for (int32_t index : *list)
          if (impl.Buffer(index).dtype() != fb::DType::F32)
            return Status(ErrorCode::kUnsupported,
                          std::string("oneDNN ") + fb::EnumNameOpcode(c->op()) +
                              " on the CPU supports f32 operands only");
      Prepared& p = impl.prepared[c];
      try {
        Status status;
        switch (c->op()) {
          case fb::Opcode::Conv2d:
          case fb::Opcode::Conv2dBackwardData:
          case fb::Opcode::Conv2dBackwardFilter:
            status = impl.PrepareConv(*c, p);
            break;
          case fb::Opcode::Gemm:
            status = impl.PrepareGemm(*c, p);
            break;
          default:
            status = impl.PreparePool(*c, p);
        }
        if (!status.ok()) return status;
      } catch (const dnnl::error& e) {
        std::string where = c->location() ? " (" + PrintableOf(c->location()) + ")" : "";
        return Status(ErrorCode::kBackend, std::string("oneDNN cannot create ") +
                                               fb::EnumNameOpcode(c->op()) + where + ": " +
                                               e.what());
      }
    }
  std::free(impl.scratchpad);
  impl.scratchpad = std::aligned_alloc(64, (std::max<size_t>(impl.scratchpad_bytes, 64) + 63) /
                                               64 * 64);
  if (impl.scratchpad == nullptr)
    return Status(ErrorCode::kBackend, "cannot allocate the oneDNN scratchpad");
  for (auto& [command, p] : impl.prepared)
    for (Step& step : p.steps)
      for (Step::Arg& arg : step.args) {
        if (arg.dnnl_arg == DNNL_ARG_SCRATCHPAD) arg.mem.set_data_handle(impl.scratchpad);
        step.map.emplace(arg.dnnl_arg, arg.mem);
      }
  return Status::Ok();
}

Status OneDnnOps::Run(const fb::Command& command, const DeviceMemory* operands) {
  auto it = impl_->prepared.find(&command);
  if (it == impl_->prepared.end())
    return Status(ErrorCode::kInvalidArgument, "library command was not prepared");
  try {
    for (Step& step : it->second.steps) {
      for (Step::Arg& arg : step.args)
        if (arg.operand >= 0) arg.mem.set_data_handle(operands[arg.operand].address);
      step.primitive.execute(impl_->stream, step.map);
    }
    impl_->stream.wait();
  } catch (const dnnl::error& e) {
    return Status(ErrorCode::kBackend, std::string("oneDNN ") +
                                           fb::EnumNameOpcode(command.op()) + ": " + e.what());
  }
  return Status::Ok();
}

}  // namespace graphc::runtime
