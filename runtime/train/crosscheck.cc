#include "runtime/train/crosscheck.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <utility>

#include "contract/half_float.h"
#include "runtime/core/executor.h"
#include "runtime/train/dataset.h"
#include "runtime/train/programs.h"

namespace graphc::runtime {
namespace {

using Bytes = std::vector<uint8_t>;

std::string Number(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.7g", value);
  return text;
}

bool IsFloat(fb::DType dtype) {
  return dtype == fb::DType::F32 || dtype == fb::DType::F16 || dtype == fb::DType::BF16;
}

// Element `e` of a float buffer of `dtype`, widened.
double FloatAt(const Bytes& bytes, fb::DType dtype, uint64_t e) {
  uint32_t bits;
  if (dtype == fb::DType::F32) {
    std::memcpy(&bits, bytes.data() + 4 * e, 4);
  } else {
    uint16_t half;
    std::memcpy(&half, bytes.data() + 2 * e, 2);
    bits = dtype == fb::DType::F16 ? F16ToF32Bits(half) : Bf16ToF32Bits(half);
  }
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

uint64_t ElementBytes(fb::DType dtype) {
  switch (dtype) {
    case fb::DType::F32:
    case fb::DType::I32: return 4;
    case fb::DType::F16:
    case fb::DType::BF16: return 2;
    case fb::DType::I64: return 8;
    default: return 1;
  }
}

// One output of a command: how far `got` lies from `want`.
struct OutputCheck {
  uint64_t elements = 0, mismatches = 0;
  double difference = 0;
  double scale = 0, absolute = 0;  // max |want|; max |got - want|
  int64_t worst = -1;
  double want = 0, got = 0;
};

OutputCheck CompareOutput(const fb::Buffer& buffer, const Bytes& want, const Bytes& got) {
  OutputCheck check;
  const fb::DType dtype = buffer.dtype();
  const uint64_t size = ElementBytes(dtype);
  check.elements = want.size() / size;
  if (want == got) {
    // Bit for bit (most generated kernels, every input copied in): nothing
    // to measure, and no scale needed (a later drift of these bytes is a
    // change, whatever its size).
    if (check.elements > 0) {
      check.worst = 0;
      check.want = check.got = IsFloat(dtype) ? FloatAt(want, dtype, 0) : 0;
    }
    return check;
  }
  if (!IsFloat(dtype)) {
    auto value = [&](const Bytes& bytes, uint64_t e) -> double {
      if (size == 8) {
        int64_t v;
        std::memcpy(&v, bytes.data() + 8 * e, 8);
        return static_cast<double>(v);
      }
      if (size == 4) {
        int32_t v;
        std::memcpy(&v, bytes.data() + 4 * e, 4);
        return v;
      }
      return bytes[e];
    };
    for (uint64_t e = 0; e < check.elements; ++e)
      if (std::memcmp(want.data() + e * size, got.data() + e * size, size) != 0 &&
          check.mismatches++ == 0) {
        check.worst = static_cast<int64_t>(e);
        check.want = value(want, e);
        check.got = value(got, e);
      }
    return check;
  }
  double scale = 0, worst = 0;
  int64_t first_bad = -1;
  double bad_want = 0, bad_got = 0;
  for (uint64_t e = 0; e < check.elements; ++e) {
    const double w = FloatAt(want, dtype, e), g = FloatAt(got, dtype, e);
    if (std::isfinite(w)) scale = std::max(scale, std::fabs(w));
    if (!std::isfinite(w) || !std::isfinite(g)) {
      // The same NaN, or the same infinity, agrees; anything else does not.
      if ((std::isnan(w) && std::isnan(g)) || w == g) continue;
      if (check.mismatches++ == 0) first_bad = static_cast<int64_t>(e), bad_want = w, bad_got = g;
      continue;
    }
    const double d = std::fabs(g - w);
    if (check.worst < 0 || d > worst) {
      worst = d;
      check.worst = static_cast<int64_t>(e);
      check.want = w;
      check.got = g;
    }
  }
  if (first_bad >= 0) check.worst = first_bad, check.want = bad_want, check.got = bad_got;
  // As a fraction of the output's scale; an output whose reference is all
  // zeros is measured absolutely (rounding residue then passes, an error of
  // any size does not).
  check.difference = worst == 0 ? 0 : scale > 0 ? worst / scale : worst;
  check.scale = scale;
  check.absolute = worst;
  return check;
}

std::string Describe(const fb::Plan& plan, const fb::Command& command) {
  if (command.op() != fb::Opcode::Kernel) return fb::EnumNameOpcode(command.op());
  const fb::Kernel& k = *plan.kernels()->Get(command.kernel());
  std::string what = "kernel " + PrintableOf(k.name());
  if (k.ops() && k.ops()->size()) {
    what += " (" + PrintableOf(k.ops()->Get(0));
    if (k.ops()->size() > 1) what += " +" + std::to_string(k.ops()->size() - 1);
    what += ")";
  }
  return what;
}

// Reads a buffer into `bytes`, reusing its memory: a step's activations are
// hundreds of MiB, and fresh vectors would be page-faulted and zeroed for
// every command.
void ReadBuffer(const Executor& exec, int32_t index, Bytes* bytes, Status* status) {
  bytes->resize(exec.buffer(index).size());
  if (status->ok()) *status = exec.Read(index, bytes->data(), bytes->size());
}

// Memory next to a command's outputs, which it must not change: a range of
// a region, outside every output of the command.
struct Guard {
  fb::Region region;
  uint64_t begin, end;
  int32_t output;  // the buffer it lies next to
  bool after;      // after its end, or before its start
  Bytes bytes;     // as it was before the command ran
};

std::vector<Guard> GuardsOf(const Executor& exec, const fb::Command& command) {
  struct Range {
    fb::Region region;
    uint64_t begin, end;
  };
  std::vector<Range> outputs;
  for (int32_t o : *command.outputs()) {
    const fb::Buffer& b = exec.buffer(o);
    outputs.push_back({b.region(), b.offset(), b.offset() + b.size()});
  }
  std::vector<Guard> guards;
  for (int32_t o : *command.outputs()) {
    const fb::Buffer& b = exec.buffer(o);
    const uint64_t limit = exec.RegionMemory(b.region()).bytes, end = b.offset() + b.size();
    const uint64_t before = kGuardBytes / 16;
    std::vector<Guard> pieces = {
        {b.region(), end, std::min(limit, end + kGuardBytes), o, true, {}},
        {b.region(), b.offset() >= before ? b.offset() - before : 0, b.offset(), o, false, {}}};
    // Less every output's own bytes.
    for (const Range& r : outputs) {
      std::vector<Guard> kept;
      for (const Guard& g : pieces) {
        if (r.region != g.region || r.end <= g.begin || r.begin >= g.end) {
          kept.push_back(g);
          continue;
        }
        if (g.begin < r.begin) kept.push_back({g.region, g.begin, r.begin, g.output, g.after, {}});
        if (r.end < g.end) kept.push_back({g.region, r.end, g.end, g.output, g.after, {}});
      }
      pieces = std::move(kept);
    }
    for (Guard& g : pieces)
      if (g.end > g.begin) guards.push_back(std::move(g));
  }
  return guards;
}

Status ReadGuard(Backend& backend, const Executor& exec, const Guard& g, Bytes* bytes) {
  bytes->resize(g.end - g.begin);
  return backend.CopyToHost(bytes->data(), exec.RegionMemory(g.region), g.begin, bytes->size());
}

// Runs `command` on `exec`, then counts the guard bytes it changed and says
// where the first one lies.
Status RunWatched(Backend& backend, Executor& exec, int program, uint32_t c,
                  const fb::Command& command, CommandCheck* check) {
  std::vector<Guard> guards = GuardsOf(exec, command);
  for (Guard& g : guards) GRAPHC_RETURN_IF_ERROR(ReadGuard(backend, exec, g, &g.bytes));
  GRAPHC_RETURN_IF_ERROR(exec.RunCommand(program, c));
  Bytes now;
  for (const Guard& g : guards) {
    GRAPHC_RETURN_IF_ERROR(ReadGuard(backend, exec, g, &now));
    // The changed byte nearest the output: the first after it, the last
    // before it.
    uint64_t changed = 0, first = 0;
    for (uint64_t i = 0; i < now.size(); ++i)
      if (now[i] != g.bytes[i] && (changed++ == 0 || !g.after)) first = i;
    if (changed == 0) continue;
    if (check->stray_bytes == 0) {
      const fb::Buffer& b = exec.buffer(g.output);
      const uint64_t at = g.begin + first;
      check->stray = std::string(backend.name()) + ": " + std::to_string(changed) +
                     " bytes changed " + (g.after ? "after " : "before ") +
                     PrintableOf(b.name()) + " (the first " +
                     std::to_string(g.after ? at - (b.offset() + b.size()) : b.offset() - at) +
                     " bytes " + (g.after ? "past its end" : "before its start") + ")";
    }
    check->stray_bytes += changed;
  }
  return Status::Ok();
}

// The same seeded state, the number of ranks (one) and the same batch on
// every executor.
Status Prepare(Executor& exec, const Programs& p, const Batch& batch, uint64_t seed) {
  GRAPHC_RETURN_IF_ERROR(exec.InitializeState(seed));
  if (p.world_size >= 0) {
    const float one = 1.0f;
    GRAPHC_RETURN_IF_ERROR(exec.Write(p.world_size, &one, sizeof(one)));
  }
  if (p.rank_state >= 0) {
    const int64_t zero = 0;
    GRAPHC_RETURN_IF_ERROR(exec.Write(p.rank_state, &zero, sizeof(zero)));
  }
  GRAPHC_RETURN_IF_ERROR(exec.Write(p.images, ImageData(batch), ImageBytes(batch)));
  return exec.Write(p.labels, batch.labels.data(), batch.labels.size() * sizeof(int32_t));
}

}  // namespace

double CrosscheckTolerance(fb::DType dtype) {
  switch (dtype) {
    case fb::DType::F16: return 4e-3;
    case fb::DType::BF16: return 3e-2;
    default: return 1e-4;
  }
}

int64_t CrosscheckResult::first_failure() const {
  for (size_t i = 0; i < commands.size(); ++i)
    if (!commands[i].ok()) return static_cast<int64_t>(i);
  return -1;
}

StatusOr<CrosscheckResult> Crosscheck(const Plan& plan, Backend& reference, Backend& device,
                                      const CrosscheckOptions& options) {
  StatusOr<std::unique_ptr<Executor>> want_exec = Executor::Create(plan, reference);
  if (!want_exec.ok()) return want_exec.status();
  StatusOr<std::unique_ptr<Executor>> got_exec = Executor::Create(plan, device);
  if (!got_exec.ok()) return got_exec.status();
  Executor& want = **want_exec;
  Executor& got = **got_exec;
  StatusOr<Programs> programs = FindPrograms(want);
  if (!programs.ok()) return programs.status();
  const Programs& p = *programs;
  std::unique_ptr<BatchSource> source = BatchSource::Synthetic(
      p.batch, p.image_shape, p.classes, 1, options.seed, /*unit=*/p.images_u8);
  source->set_pixels_u8(p.images_u8);
  Batch batch;
  source->Next(batch);
  GRAPHC_RETURN_IF_ERROR(Prepare(want, p, batch, options.seed));
  GRAPHC_RETURN_IF_ERROR(Prepare(got, p, batch, options.seed));

  const fb::Plan& root = plan.root();
  const fb::Program& program = want.program(p.train);
  CrosscheckResult result;
  // Who last wrote each byte range of the device's memory, in order: a
  // command (its output checked), or crosscheck copying the reference's
  // bytes in. Buffer indices would not do: a reshape is a second buffer over
  // the same bytes.
  struct Written {
    fb::Region region;
    uint64_t begin, end;
    int64_t command;  // -1: set before the step
    bool copied;      // crosscheck's copy before `command`
    bool wrong;       // the command's outputs did not match
    double scale;     // the largest |value| the reference wrote there
  };
  std::vector<Written> written;
  // Host copies, reused from command to command.
  std::vector<Bytes> inputs;
  Bytes held, want_out, got_out;
  auto first_suspect = [](const Written* w) -> int64_t {
    return w == nullptr ? 0 : w->copied ? w->command : w->command + 1;
  };
  auto last_write = [&](const fb::Buffer& b) -> const Written* {
    for (auto w = written.rbegin(); w != written.rend(); ++w)
      if (w->region == b.region() && w->begin < b.offset() + b.size() &&
          b.offset() < w->end)
        return &*w;
    return nullptr;
  };
  for (uint32_t c = 0; c < want.command_count(p.train); ++c) {
    const fb::Command& command = *program.commands()->Get(c);
    if (IsCollective(command.op())) {
      ++result.collectives;
      continue;
    }
    const std::string where =
        "command " + std::to_string(c) + " " + Describe(root, command) +
        (command.location() ? " (" + PrintableOf(command.location()) + ")" : "");
    // The inputs as the reference has them, before the command (an in-place
    // output overwrites its input).
    Status status;
    CommandCheck check;
    if (inputs.size() < command.inputs()->size()) inputs.resize(command.inputs()->size());
    for (uint32_t i = 0; i < command.inputs()->size(); ++i)
      ReadBuffer(want, command.inputs()->Get(i), &inputs[i], &status);
    if (status.ok()) status = RunWatched(reference, want, p.train, c, command, &check);
    if (!status.ok())
      return Status(status.code(), std::string(reference.name()) + ", " + where + ": " +
                                       status.message());
    // What the device holds of each input now, against the reference.
    for (uint32_t i = 0; i < command.inputs()->size() && status.ok(); ++i) {
      const int32_t index = command.inputs()->Get(i);
      const fb::Buffer& buffer = got.buffer(index);
      ReadBuffer(got, index, &held, &status);
      if (!status.ok()) break;
      const OutputCheck drift = CompareOutput(buffer, inputs[i], held);
      const double tolerance =
          options.tolerance > 0 ? options.tolerance : CrosscheckTolerance(buffer.dtype());
      if (drift.mismatches == 0 && drift.difference <= tolerance) continue;
      const Written* w = last_write(buffer);
      if (w != nullptr && w->wrong) continue;  // reported at its writer
      // Measured at the scale of what the writer wrote, where this input is
      // a view of part of it (whose own largest value may be smaller).
      if (w != nullptr && drift.mismatches == 0 && w->scale > drift.scale &&
          drift.absolute / w->scale <= tolerance)
        continue;
      if (check.stale_inputs++ == 0) {
        const int64_t writer = w == nullptr ? -1 : w->command;
        check.stale =
            PrintableOf(buffer.name()) + "[" + std::to_string(drift.worst) + "]: cpu " +
            Number(drift.want) + ", device held " + Number(drift.got) + "; " +
            (writer < 0  ? std::string("set before the step")
             : w->copied ? "copied in before command " + std::to_string(writer)
                         : "written by command " + std::to_string(writer)) +
            // A copy precedes its command, which may itself be the culprit.
            (first_suspect(w) <= static_cast<int64_t>(c) - 1
                 ? ", changed since by one of commands " + std::to_string(first_suspect(w)) +
                       " to " + std::to_string(static_cast<int64_t>(c) - 1)
                 : ", and nothing ran since");
      }
    }
    for (uint32_t i = 0; i < command.inputs()->size() && status.ok(); ++i) {
      const fb::Buffer& b = got.buffer(command.inputs()->Get(i));
      status = got.Write(command.inputs()->Get(i), inputs[i].data(), inputs[i].size());
      written.push_back({b.region(), b.offset(), b.offset() + b.size(), c, true, false, 0});
    }
    if (status.ok()) status = RunWatched(device, got, p.train, c, command, &check);
    if (!status.ok())
      return Status(status.code(), std::string(device.name()) + ", " + where + ": " +
                                       status.message());
    check.command = c;
    check.what = Describe(root, command);
    check.location = command.location() ? PrintableOf(command.location()) : "";
    double worst_ratio = -1;
    std::vector<double> scales;
    for (int32_t index : *command.outputs()) {
      const fb::Buffer& buffer = got.buffer(index);
      ReadBuffer(want, index, &want_out, &status);
      ReadBuffer(got, index, &got_out, &status);
      if (!status.ok()) return status;
      const OutputCheck out = CompareOutput(buffer, want_out, got_out);
      scales.push_back(out.scale);
      const double tolerance =
          options.tolerance > 0 ? options.tolerance : CrosscheckTolerance(buffer.dtype());
      check.elements += out.elements;
      check.mismatches += out.mismatches;
      const double ratio = out.mismatches > 0 ? 1e300 : out.difference / tolerance;
      if (ratio > worst_ratio) {
        worst_ratio = ratio;
        check.output = PrintableOf(buffer.name());
        check.dtype = buffer.dtype();
        check.difference = out.difference;
        check.tolerance = tolerance;
        check.worst_element = out.worst;
        check.reference_value = out.want;
        check.device_value = out.got;
      }
    }
    for (uint32_t o = 0; o < command.outputs()->size(); ++o) {
      const fb::Buffer& b = got.buffer(command.outputs()->Get(o));
      written.push_back(
          {b.region(), b.offset(), b.offset() + b.size(), c, false, !check.ok(), scales[o]});
    }
    result.commands.push_back(std::move(check));
  }
  if (p.loss >= 0) {
    GRAPHC_RETURN_IF_ERROR(want.Read(p.loss, &result.reference_loss, sizeof(float)));
    GRAPHC_RETURN_IF_ERROR(got.Read(p.loss, &result.device_loss, sizeof(float)));
  }
  return result;
}

}  // namespace graphc::runtime
