//===- PlanContract.cpp - what survives lowering must be executable -------===//
//
// The last pass before export. The runtime checks the file again on load; this
// pass makes a compiler bug a located compile error instead of a plan the
// runtime refuses.
//
//===----------------------------------------------------------------------===//

#include "compiler/Lowering/Passes.h"

namespace graphc {
#define GEN_PASS_DEF_PLANCONTRACT
#include "compiler/Lowering/Passes.h.inc"
} // namespace graphc

using namespace mlir;
using namespace graphc;

namespace {

class PlanContractPass : public graphc::impl::PlanContractBase<PlanContractPass> {
public:
  void runOnOperation() override;
};

void PlanContractPass::runOnOperation() {
  ModuleOp module = getOperation();
  bool failed = false;
  auto fail = [&](Operation *op, const Twine &message) {
    op->emitError("plan contract: ") << message;
    failed = true;
  };

  llvm::DenseMap<plan::Region, int64_t> regionSize;
  for (auto [region, attr] : {std::pair{plan::Region::arena, kArenaSizeAttr},
                              std::pair{plan::Region::state, kStateSizeAttr},
                              std::pair{plan::Region::constant, kConstantSizeAttr}}) {
    auto size = module->getAttrOfType<IntegerAttr>(attr);
    if (!size) {
      module.emitError("plan contract: memory was not planned (missing ") << attr << ")";
      return signalPassFailure();
    }
    regionSize[region] = size.getInt();
  }

  SmallVector<plan::BinaryOp> binaries;
  for (auto binary : module.getOps<plan::BinaryOp>()) {
    binaries.push_back(binary);
    if (binary.getData().empty())
      fail(binary, "binary has no code");
  }

  llvm::StringMap<plan::BufferOp> buffers;
  for (Operation &op : module.getBody()->getOperations()) {
    if (op.getDialect() && op.getDialect()->getNamespace() != "plan") {
      if (auto nested = llvm::dyn_cast<ModuleOp>(op))
        fail(&op, "kernel bodies in module @" + nested.getSymName().value_or("") +
                      " were not compiled (run graphc-codegen-kernels)");
      else
        fail(&op, "'" + op.getName().getStringRef() +
                      "' cannot be executed by the runtime");
      continue;
    }
    if (auto buffer = llvm::dyn_cast<plan::BufferOp>(op)) {
      buffers[buffer.getSymName()] = buffer;
      std::optional<int64_t> offset = buffer.getOffset();
      if (!offset) {
        fail(&op, "buffer @" + buffer.getSymName() + " has no offset");
        continue;
      }
      if (*offset + buffer.getSizeInBytes() > regionSize[buffer.getRegion()])
        fail(&op, "buffer @" + buffer.getSymName() + " ends past its region");
    }
    if (auto kernel = llvm::dyn_cast<plan::KernelOp>(op)) {
      if (binaries.empty())
        fail(&op, "kernel @" + kernel.getSymName() + " has no compiled binary");
      for (plan::BinaryOp binary : binaries)
        if (!llvm::is_contained(binary.getSymbols().getAsValueRange<StringAttr>(),
                                kernel.getSymName()))
          fail(&op, "kernel @" + kernel.getSymName() + " is missing from the " +
                        plan::stringifyTarget(binary.getTarget()) + " binary");
    }
  }
  for (auto &[name, buffer] : buffers) {
    std::optional<StringRef> alias = buffer.getAlias();
    if (!alias)
      continue;
    plan::BufferOp root = buffers.lookup(*alias);
    int64_t within = buffer.getAliasOffset().value_or(0);
    if (!root || root.getRegion() != buffer.getRegion() || !root.getOffset() ||
        !buffer.getOffset() || *root.getOffset() + within != *buffer.getOffset() ||
        within + buffer.getSizeInBytes() > root.getSizeInBytes())
      fail(buffer, "alias @" + name + " does not match the buffer it views");
  }
  if (module.getOps<plan::ProgramOp>().empty())
    fail(module, "the plan has no program");
  if (failed)
    signalPassFailure();
}

} // namespace
