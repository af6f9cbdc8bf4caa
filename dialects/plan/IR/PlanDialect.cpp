//===- PlanDialect.cpp - plan dialect ops and verifiers -------------------===//
//
// Registration and verifiers of the `plan` dialect. The verifiers check what
// the IR alone can tell (symbols resolve, arities, in-place declarations name a
// same-sized input); offsets are checked by graphc-plan-contract and, again,
// by the runtime's loader.
//
//===----------------------------------------------------------------------===//

#include "dialects/plan/IR/PlanDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace graphc::plan;

#include "dialects/plan/IR/PlanDialect.cpp.inc"
#include "dialects/plan/IR/PlanEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/plan/IR/PlanAttrs.cpp.inc"

void PlanDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/plan/IR/PlanAttrs.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "dialects/plan/IR/PlanOps.cpp.inc"
      >();
}

int64_t graphc::plan::elementBytes(Type type) {
  if (type.isF32() || type.isInteger(32))
    return 4;
  if (type.isF16() || type.isBF16())
    return 2;
  if (type.isInteger(64))
    return 8;
  if (type.isInteger(1) || type.isInteger(8))
    return 1;
  return 0;
}

//===----------------------------------------------------------------------===//
// BufferOp
//===----------------------------------------------------------------------===//

int64_t BufferOp::getSizeInBytes() {
  MemRefType type = getMemRefType();
  return type.getNumElements() * elementBytes(type.getElementType());
}

LogicalResult BufferOp::verify() {
  MemRefType type = getMemRefType();
  if (!type.getLayout().isIdentity())
    return emitOpError("needs a contiguous row-major (identity layout) memref");
  if (elementBytes(type.getElementType()) == 0)
    return emitOpError("element type ") << type.getElementType()
                                         << " cannot be stored in a plan";
  if (getOffsetAttr() && getOffsetAttr().getInt() < 0)
    return emitOpError("offset must be non-negative");
  if (getAliasOffsetAttr() && (!getAlias() || getAliasOffsetAttr().getInt() < 0))
    return emitOpError("alias offset needs an alias and must be non-negative");
  return success();
}

LogicalResult KernelOp::verify() {
  int64_t numInputs = getNumInputsAttr().getInt();
  int64_t numOutputs = getNumOutputsAttr().getInt();
  if (numInputs < 0 || numOutputs < 1)
    return emitOpError("needs a non-negative input count and at least one output");
  if (static_cast<int64_t>(getArgBytes().size()) != numInputs + numOutputs)
    return emitOpError("needs one byte size per argument");
  if (std::optional<ArrayRef<int64_t>> groups = getGroups()) {
    if (!getElementwise())
      return emitOpError("has groups but is not elementwise");
    if (static_cast<int64_t>(groups->size()) != numInputs + numOutputs)
      return emitOpError("needs one group per argument");
    if (llvm::any_of(groups->drop_front(numInputs), [](int64_t g) { return g < 0; }))
      return emitOpError("puts an output in no group");
  }
  return success();
}

bool KernelOp::mayOverwrite(unsigned output, unsigned input) {
  if (!getElementwise())
    return false;
  std::optional<ArrayRef<int64_t>> groups = getGroups();
  if (!groups)
    return true;
  int64_t group = (*groups)[input];
  return group >= 0 && group == (*groups)[getNumInputsAttr().getInt() + output];
}

LogicalResult BinaryOp::verify() {
  bool ptx = getFormat() == BinaryFormat::ptx;
  if (!getLaunchesAttr() || getLaunchesAttr().size() != getSymbols().size())
    return emitOpError("needs one launch list per symbol");
  for (Attribute perKernel : getLaunchesAttr()) {
    auto list = llvm::dyn_cast<ArrayAttr>(perKernel);
    if (!list)
      return emitOpError("launches must be a list of lists");
    for (Attribute attr : list) {
      auto launch = llvm::dyn_cast<DictionaryAttr>(attr);
      auto entry = launch ? launch.getAs<StringAttr>("entry") : StringAttr();
      if (!entry || entry.getValue().empty())
        return emitOpError("each launch needs a non-empty 'entry'");
      for (StringRef key : {"grid", "block"}) {
        auto dims = launch.getAs<DenseI32ArrayAttr>(key);
        if (!dims || dims.size() != 3 || llvm::any_of(dims.asArrayRef(),
                                                      [](int32_t d) { return d < 1; }))
          return emitOpError("launch '") << entry.getValue() << "' needs a positive 3-D '"
                                         << key << "'";
      }
      // A CPU launch runs chunks of grid[0] iterations, one per core.
      if (!ptx && (launch.getAs<DenseI32ArrayAttr>("block").asArrayRef() !=
                       ArrayRef<int32_t>{1, 1, 1} ||
                   launch.getAs<DenseI32ArrayAttr>("grid")[1] != 1 ||
                   launch.getAs<DenseI32ArrayAttr>("grid")[2] != 1))
        return emitOpError("CPU launch '") << entry.getValue()
                                           << "' must have a 1-D grid and a 1x1x1 block";
      auto args = launch.getAs<DenseI32ArrayAttr>("args");
      if (!args || llvm::any_of(args.asArrayRef(), [](int32_t a) { return a < 0; }))
        return emitOpError("launch '") << entry.getValue()
                                       << "' needs 'args', buffer indices";
    }
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Commands
//===----------------------------------------------------------------------===//

static FailureOr<BufferOp> lookupBuffer(Operation *op,
                                        SymbolTableCollection &symbols,
                                        Attribute ref) {
  auto symbol = llvm::cast<FlatSymbolRefAttr>(ref);
  auto buffer = symbols.lookupNearestSymbolFrom<BufferOp>(op, symbol);
  if (!buffer)
    return op->emitOpError("operand ") << symbol << " is not a plan.buffer";
  return buffer;
}

template <typename OpT>
static LogicalResult verifyCommand(OpT op, SymbolTableCollection &symbols) {
  int64_t numInputs = op.getInputs().size();
  int64_t numOutputs = op.getOutputs().size();
  if (numInputs < OpT::kMinInputs || numInputs > OpT::kMaxInputs)
    return op.emitOpError("takes ") << OpT::kMinInputs << " to " << OpT::kMaxInputs
                                    << " inputs, got " << numInputs;
  if (numOutputs < 1)
    return op.emitOpError("needs at least one output");
  SmallVector<BufferOp> inputs, outputs;
  for (Attribute ref : op.getInputs()) {
    FailureOr<BufferOp> buffer = lookupBuffer(op, symbols, ref);
    if (failed(buffer))
      return failure();
    inputs.push_back(*buffer);
  }
  for (Attribute ref : op.getOutputs()) {
    FailureOr<BufferOp> buffer = lookupBuffer(op, symbols, ref);
    if (failed(buffer))
      return failure();
    if (buffer->getRegion() == graphc::plan::Region::constant)
      return op.emitOpError("writes constant buffer @") << buffer->getSymName();
    outputs.push_back(*buffer);
  }
  if (std::optional<ArrayRef<int64_t>> inPlace = op.getInPlace()) {
    if (static_cast<int64_t>(inPlace->size()) != numOutputs)
      return op.emitOpError("in_place needs one entry per output");
    for (auto [i, input] : llvm::enumerate(*inPlace)) {
      if (input == -1)
        continue;
      if (input < 0 || input >= numInputs)
        return op.emitOpError("in_place entry ") << i << " names no input";
      if (inputs[input].getSizeInBytes() != outputs[i].getSizeInBytes())
        return op.emitOpError("in_place output ") << i << " and input " << input
                                                  << " differ in size";
      // Element i overwrites element i only when the counts match (an f16
      // output over an f32 input of the same bytes would overrun its reads).
      if (inputs[input].getMemRefType().getNumElements() !=
          outputs[i].getMemRefType().getNumElements())
        return op.emitOpError("in_place output ") << i << " and input " << input
                                                  << " differ in element count";
    }
  }
  if constexpr (std::is_same_v<OpT, LaunchOp>) {
    auto kernel = symbols.lookupNearestSymbolFrom<KernelOp>(op, op.getKernelAttr());
    if (!kernel)
      return op.emitOpError("kernel ") << op.getKernelAttr() << " is not a plan.kernel";
    if (kernel.getNumInputsAttr().getInt() != numInputs ||
        kernel.getNumOutputsAttr().getInt() != numOutputs)
      return op.emitOpError("kernel ") << op.getKernelAttr() << " takes "
                                       << kernel.getNumInputs() << " inputs and "
                                       << kernel.getNumOutputs() << " outputs";
    ArrayRef<int64_t> bytes = kernel.getArgBytes();
    for (auto [i, buffer] : llvm::enumerate(llvm::concat<BufferOp>(inputs, outputs)))
      if (buffer.getSizeInBytes() != bytes[i])
        return op.emitOpError("argument ") << i << " (@" << buffer.getSymName() << ") has "
                                           << buffer.getSizeInBytes()
                                           << " bytes, kernel " << op.getKernelAttr()
                                           << " expects " << bytes[i];
    if (op.getInPlace() && !kernel.getElementwise())
      return op.emitOpError("runs in place but kernel ") << op.getKernelAttr()
                                                         << " is not elementwise";
    // The buffer a view finally is (aliases are verified acyclic elsewhere;
    // the bound only keeps a malformed chain from looping here).
    auto rootOf = [&](BufferOp buffer) {
      for (int hops = 0; buffer && buffer.getAlias() && hops < 64; ++hops)
        buffer = symbols.lookupNearestSymbolFrom<BufferOp>(op, buffer.getAliasAttr());
      return buffer;
    };
    if (std::optional<ArrayRef<int64_t>> inPlace = op.getInPlace())
      for (auto [o, i] : llvm::enumerate(*inPlace)) {
        if (i < 0)
          continue;
        // The overwritten input and every view of its memory.
        BufferOp overwritten = rootOf(inputs[i]);
        for (auto [j, input] : llvm::enumerate(inputs)) {
          if (static_cast<int64_t>(j) != i && (!overwritten || rootOf(input) != overwritten))
            continue;
          if (!kernel.mayOverwrite(o, j))
            return op.emitOpError("writes output ")
                   << o << " over input " << j << ", which kernel " << op.getKernelAttr()
                   << " does not allow (another group)";
          if (input.getMemRefType().getNumElements() !=
              outputs[o].getMemRefType().getNumElements())
            return op.emitOpError("writes output ")
                   << o << " over input " << j << ", a view of another element count";
        }
      }
  } else if constexpr (std::is_same_v<OpT, AllreduceStartOp> ||
                       std::is_same_v<OpT, AllreduceWaitOp>) {
    // A collective reduces its buffers where they are: outputs == inputs.
    std::optional<ArrayRef<int64_t>> inPlace = op.getInPlace();
    if (op.getInputs() != op.getOutputs() || !inPlace ||
        *inPlace != ArrayRef<int64_t>(llvm::to_vector(llvm::seq<int64_t>(0, numInputs))))
      return op.emitOpError("must name the same buffers as inputs and outputs, in place");
    const bool sparse = op.getSparse();
    if (sparse && (numInputs % 3 != 0 || op->hasAttr("wire_type")))
      return op.emitOpError("sparse: takes threes of values, indices and dense buffers, "
                            "and no wire type");
    if constexpr (std::is_same_v<OpT, AllreduceStartOp>) {
      if (IntegerAttr attr = op.getSentEntriesAttr()) {
        const int64_t sent = attr.getInt();
        int64_t room = 0;
        for (size_t i = 0; sparse && i < inputs.size(); i += 3)
          room += inputs[i].getMemRefType().getNumElements();
        if (!sparse || sent < 1 || sent > room)
          return op.emitOpError("sends ") << sent << " entries; a sparse start sends 1 to "
                                          << room << ", what its sets hold";
      }
    }
    for (auto [i, buffer] : llvm::enumerate(inputs)) {
      if (buffer.getRegion() != graphc::plan::Region::arena)
        return op.emitOpError("reduces @") << buffer.getSymName()
                                           << ", which is not in the arena";
      Type element = buffer.getMemRefType().getElementType();
      if (sparse) {
        if (i % 3 == 1 ? !element.isInteger(32) : !element.isF32())
          return op.emitOpError("sparse: @")
                 << buffer.getSymName() << " must be " << (i % 3 == 1 ? "i32" : "f32");
        continue;
      }
      if (!element.isF32() && !element.isF16() && !element.isBF16())
        return op.emitOpError("reduces @") << buffer.getSymName() << " of type " << element
                                           << "; only f32, f16 and bf16 are reduced";
    }
  } else {
    if (op.getInPlace())
      return op.emitOpError("library calls cannot run in place");
    // Attention's forward also writes lse; its backward dq, dk, dv and one
    // gradient per bias. Its biases follow the operands, one per stride.
    int64_t wanted = 1;
    if constexpr (std::is_same_v<OpT, AttentionOp> || std::is_same_v<OpT, AttentionBackwardOp>) {
      constexpr int64_t operands = std::is_same_v<OpT, AttentionOp> ? 3 : 6;
      const int64_t biases = op.getBiasStrides() ? op.getBiasStrides()->size() : 0;
      if (numInputs != operands + biases)
        return op.emitOpError("has ") << numInputs << " inputs for " << biases
                                      << " bias strides; expects " << operands + biases;
      wanted = std::is_same_v<OpT, AttentionOp> ? 2 : 3 + biases;
    }
    if (numOutputs != wanted)
      return op.emitOpError("has exactly ") << wanted << (wanted == 1 ? " output" : " outputs");
  }
  if constexpr (std::is_same_v<OpT, CopyOp>) {
    if (inputs[0].getSizeInBytes() != outputs[0].getSizeInBytes())
      return op.emitOpError("copies between buffers of different sizes");
  }
  return success();
}

#define GRAPHC_PLAN_COMMAND(OpT)                                                 \
  LogicalResult OpT::verifySymbolUses(SymbolTableCollection &symbols) {          \
    return verifyCommand(*this, symbols);                                        \
  }
GRAPHC_PLAN_COMMAND(LaunchOp)
GRAPHC_PLAN_COMMAND(Conv2DOp)
GRAPHC_PLAN_COMMAND(Conv2DBackwardDataOp)
GRAPHC_PLAN_COMMAND(Conv2DBackwardFilterOp)
GRAPHC_PLAN_COMMAND(GemmOp)
GRAPHC_PLAN_COMMAND(MaxPool2DOp)
GRAPHC_PLAN_COMMAND(AvgPool2DOp)
GRAPHC_PLAN_COMMAND(MaxPool2DBackwardOp)
GRAPHC_PLAN_COMMAND(AvgPool2DBackwardOp)
GRAPHC_PLAN_COMMAND(AttentionOp)
GRAPHC_PLAN_COMMAND(AttentionBackwardOp)
GRAPHC_PLAN_COMMAND(CopyOp)
GRAPHC_PLAN_COMMAND(AllreduceStartOp)
GRAPHC_PLAN_COMMAND(AllreduceWaitOp)
#undef GRAPHC_PLAN_COMMAND

#define GET_OP_CLASSES
#include "dialects/plan/IR/PlanOps.cpp.inc"
