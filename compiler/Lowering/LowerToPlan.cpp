//===- LowerToPlan.cpp - step functions to plan buffers and commands ------===//
//
// Bufferization of the training step into the runtime contract. See
// Passes.td for the algorithm; the legality of writing a state in place is the
// one subtle rule and is explained at canWriteStateInPlace.
//
//===----------------------------------------------------------------------===//

#include "compiler/Lowering/KernelEmitter.h"
#include "compiler/Lowering/Passes.h"
#include "dialects/dist/IR/DistOps.h"
#include "dialects/nn/IR/NNOps.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/Debug.h"

#define DEBUG_TYPE "graphc-lower-to-plan"

namespace graphc {
#define GEN_PASS_DEF_LOWERTOPLAN
#include "compiler/Lowering/Passes.h.inc"
} // namespace graphc

using namespace mlir;
using namespace graphc;

namespace {

MemRefType memrefFor(Type tensorType) {
  auto type = llvm::cast<RankedTensorType>(tensorType);
  return MemRefType::get(type.getShape(), type.getElementType());
}

DenseI64ArrayAttr i64Array(OpBuilder &b, Operation *op, StringRef name,
                           ArrayRef<int64_t> fallback) {
  if (auto attr = op->getAttrOfType<DenseI64ArrayAttr>(name))
    return attr;
  return b.getDenseI64ArrayAttr(fallback);
}

class LowerToPlanPass : public graphc::impl::LowerToPlanBase<LowerToPlanPass> {
public:
  void runOnOperation() override;

private:
  LogicalResult lowerFunction(func::FuncOp func);
  LogicalResult lowerOp(Operation *op);
  FlatSymbolRefAttr newBuffer(Location loc, StringRef name, MemRefType type,
                              plan::Region region, FlatSymbolRefAttr alias = {});
  FlatSymbolRefAttr outputBuffer(Value result, const KernelSignature *signature);
  bool canWriteStateInPlace(Value result, nn::AssignOp assign, const KernelSignature *signature);
  FlatSymbolRefAttr rootOf(FlatSymbolRefAttr buffer) {
    auto it = aliasRoot.find(buffer.getValue());
    return it == aliasRoot.end() ? buffer : it->second;
  }

  ModuleOp module;
  ModuleOp kernels;
  OpBuilder moduleBuilder{(MLIRContext *)nullptr};
  OpBuilder programBuilder{(MLIRContext *)nullptr};
  std::string prefix;
  unsigned valueCounter = 0;
  unsigned kernelCounter = 0;
  unsigned constantCounter = 0;
  DenseMap<Attribute, FlatSymbolRefAttr> constants;
  llvm::StringMap<std::string> kernelByBody;
  llvm::StringMap<FlatSymbolRefAttr> aliasRoot;
  llvm::StringMap<plan::Region> regionOf;

  // Per function.
  DenseMap<Value, FlatSymbolRefAttr> bufferOf;
  DenseMap<Operation *, unsigned> position;
  /// Per state: the last op position that reads it, and how often it is assigned.
  /// Per state: each load's position and its last read (through views).
  llvm::StringMap<SmallVector<std::pair<unsigned, unsigned>>> reads;
  /// Per state: the positions of its nn.assigns.
  llvm::StringMap<SmallVector<unsigned>> assignsAt;
  /// Loads read after their state is overwritten: copies, not views.
  llvm::SmallPtrSet<Operation *, 4> snapshots;
  /// The bucket number of the next blocking allreduce: after every gradient
  /// bucket's, so that numbers never repeat within a program.
  int64_t nextBucket = 0;
};

FlatSymbolRefAttr LowerToPlanPass::newBuffer(Location loc, StringRef name,
                                             MemRefType type, plan::Region region,
                                             FlatSymbolRefAttr alias) {
  auto op = moduleBuilder.create<plan::BufferOp>(
      loc, moduleBuilder.getStringAttr(name), TypeAttr::get(type),
      plan::RegionAttr::get(&getContext(), region), IntegerAttr(), alias, IntegerAttr());
  auto ref = FlatSymbolRefAttr::get(op.getSymNameAttr());
  regionOf[name] = region;
  if (alias)
    aliasRoot[name] = rootOf(alias);
  return ref;
}

/// A value assigned to state `s` may be computed directly into s's buffer when
/// nothing reads the old s after the op computing it (the reads through
/// loads before the assign: a load after it reads the new value) and no
/// other assign to s lies in between (micro-batches update batch norm's
/// running statistics once each). The op itself may read s only when it is
/// elementwise over s (element i is read before element i is written and
/// never again), and only through an operand the size of s.
bool LowerToPlanPass::canWriteStateInPlace(Value result, nn::AssignOp assign,
                                           const KernelSignature *signature) {
  StringRef state = assign.getVariable();
  Operation *producer = result.getDefiningOp();
  const unsigned pos = position.lookup(producer), at = position.lookup(assign);
  if (llvm::any_of(assignsAt.lookup(state),
                   [&](unsigned other) { return other >= pos && other < at; }))
    return false;
  std::optional<unsigned> last;
  for (auto [load, read] : reads.lookup(state))
    if (load < at)
      last = std::max(last.value_or(0), read);
  if (!last || *last < pos)
    return true;
  if (*last > pos)
    return false;
  // The producer is the last reader: it must be elementwise over s, and each
  // input that views s the same size as the result (and, in a kernel of
  // independent parts, in the result's group).
  if (!signature || !signature->elementwise)
    return false;
  unsigned output = llvm::cast<OpResult>(result).getResultNumber();
  size_t numInputs = signature->inputs.size();
  int64_t resultElements =
      llvm::cast<RankedTensorType>(result.getType()).getNumElements();
  for (auto [i, input] : llvm::enumerate(signature->inputs)) {
    FlatSymbolRefAttr buffer = bufferOf.lookup(input);
    if (!buffer || rootOf(buffer).getValue() != state)
      continue;
    bool sameGroup = signature->groups.empty() ||
                     (signature->groups[i] >= 0 &&
                      signature->groups[i] == signature->groups[numInputs + output]);
    if (!sameGroup ||
        llvm::cast<RankedTensorType>(input.getType()).getNumElements() != resultElements)
      return false;
  }
  return true;
}

FlatSymbolRefAttr LowerToPlanPass::outputBuffer(Value result,
                                                const KernelSignature *signature) {
  for (Operation *user : result.getUsers()) {
    auto assign = llvm::dyn_cast<nn::AssignOp>(user);
    if (assign && assign.getValue() == result &&
        canWriteStateInPlace(result, assign, signature))
      return FlatSymbolRefAttr::get(assign.getVariableAttr().getAttr());
  }
  // One step further: `result` is last read by an nn.zero_at (in place over
  // its input) whose result is assigned to a state. Then `result` itself may
  // go to the state's buffer, and the zero_at writes only what it zeroes:
  // deep gradient compression's accumulation and momentum, computed into
  // their state and masked there, instead of computed aside and copied.
  for (Operation *user : result.getUsers()) {
    auto mask = llvm::dyn_cast<nn::ZeroAtOp>(user);
    if (!mask || mask.getInput() != result)
      continue;
    unsigned maskAt = position.lookup(mask);
    bool lastUse = llvm::all_of(result.getUsers(), [&](Operation *other) {
      return other == mask || (!llvm::isa<func::ReturnOp, nn::AssignOp, dist::AllreduceStartOp,
                                          nn::ReshapeOp, nn::FlattenOp>(other) &&
                               position.lookup(other) < maskAt);
    });
    if (!lastUse)
      continue;
    for (Operation *maskUser : mask.getResult().getUsers()) {
      auto assign = llvm::dyn_cast<nn::AssignOp>(maskUser);
      if (assign && assign.getValue() == mask.getResult() &&
          canWriteStateInPlace(result, assign, signature))
        return FlatSymbolRefAttr::get(assign.getVariableAttr().getAttr());
    }
  }
  std::string name = prefix + ".v" + std::to_string(valueCounter++);
  return newBuffer(result.getLoc(), name, memrefFor(result.getType()),
                   plan::Region::arena);
}

LogicalResult LowerToPlanPass::lowerOp(Operation *op) {
  Location loc = op->getLoc();
  MLIRContext *ctx = &getContext();

  if (auto load = llvm::dyn_cast<nn::LoadOp>(op)) {
    auto state = FlatSymbolRefAttr::get(load.getVariableAttr().getAttr());
    if (!snapshots.contains(load)) {
      bufferOf[load.getResult()] = state;
      return success();
    }
    std::string name = prefix + ".v" + std::to_string(valueCounter++);
    FlatSymbolRefAttr copy =
        newBuffer(loc, name, memrefFor(load.getType()), plan::Region::arena);
    programBuilder.create<plan::CopyOp>(loc, programBuilder.getArrayAttr({state}),
                                        programBuilder.getArrayAttr({copy}),
                                        DenseI64ArrayAttr());
    bufferOf[load.getResult()] = copy;
    return success();
  }
  if (auto constant = llvm::dyn_cast<nn::ConstantOp>(op)) {
    Attribute value = constant.getValue();
    FlatSymbolRefAttr &ref = constants[value];
    if (!ref) {
      std::string name = "const" + std::to_string(constantCounter++);
      ref = newBuffer(loc, name, memrefFor(constant.getType()), plan::Region::constant);
      moduleBuilder.create<plan::ConstantOp>(loc, ref,
                                             llvm::cast<ElementsAttr>(value));
    }
    bufferOf[constant.getResult()] = ref;
    return success();
  }
  if (llvm::isa<nn::ReshapeOp, nn::FlattenOp>(op)) {
    FlatSymbolRefAttr root = rootOf(bufferOf.lookup(op->getOperand(0)));
    std::string name = prefix + ".v" + std::to_string(valueCounter++);
    bufferOf[op->getResult(0)] =
        newBuffer(loc, name, memrefFor(op->getResult(0).getType()),
                  regionOf.lookup(root.getValue()), root);
    return success();
  }
  if (auto assign = llvm::dyn_cast<nn::AssignOp>(op)) {
    FlatSymbolRefAttr source = bufferOf.lookup(assign.getValue());
    auto target = FlatSymbolRefAttr::get(assign.getVariableAttr().getAttr());
    if (rootOf(source) != target)
      programBuilder.create<plan::CopyOp>(loc, programBuilder.getArrayAttr({source}),
                                          programBuilder.getArrayAttr({target}),
                                          DenseI64ArrayAttr());
    return success();
  }

  // A blocking allreduce (synchronized batch norm) is a start and a wait
  // back to back under a bucket number of its own, in place when nothing else
  // reads its input, else on a copy.
  if (auto reduce = llvm::dyn_cast<dist::AllreduceOp>(op)) {
    FlatSymbolRefAttr input = bufferOf.lookup(reduce.getInput());
    FlatSymbolRefAttr result;
    // In place only when nothing else can read the rank's own value: the
    // input has no other use and is no view of a buffer others may read.
    if (reduce.getInput().hasOneUse() && rootOf(input) == input &&
        regionOf.lookup(input.getValue()) == plan::Region::arena) {
      result = input;
    } else {
      result = outputBuffer(reduce.getResult(), /*signature=*/nullptr);
      programBuilder.create<plan::CopyOp>(loc, ArrayAttr::get(ctx, {input}),
                                          ArrayAttr::get(ctx, {result}), DenseI64ArrayAttr());
    }
    bufferOf[reduce.getResult()] = result;
    if (regionOf.lookup(rootOf(result).getValue()) != plan::Region::arena)
      return op->emitOpError("reduces into a buffer that is not in the arena");
    ArrayAttr list = ArrayAttr::get(ctx, {result});
    auto inPlace = programBuilder.getDenseI64ArrayAttr({0});
    auto bucket = programBuilder.getI64IntegerAttr(nextBucket++);
    auto reduction = plan::ReductionAttr::get(
        ctx, reduce.getReduction() == dist::Reduction::mean ? plan::Reduction::mean
                                                              : plan::Reduction::sum);
    programBuilder.create<plan::AllreduceStartOp>(loc, list, list, inPlace, reduction, bucket,
                                                  TypeAttr(), UnitAttr(), IntegerAttr());
    programBuilder.create<plan::AllreduceWaitOp>(loc, list, list, inPlace, bucket, UnitAttr());
    return success();
  }

  // Collectives reduce their tensors where they are: the in-flight and the
  // reduced values are the gradients' own buffers.
  if (llvm::isa<dist::AllreduceStartOp, dist::AllreduceWaitOp>(op)) {
    SmallVector<Attribute> refs;
    llvm::SmallDenseSet<StringRef> roots;
    for (auto [operand, result] : llvm::zip(op->getOperands(), op->getResults())) {
      FlatSymbolRefAttr buffer = bufferOf.lookup(operand);
      StringRef root = rootOf(buffer).getValue();
      if (regionOf.lookup(root) != plan::Region::arena)
        return op->emitOpError("reduces a tensor that is not in the arena (@") << root << ")";
      if (!roots.insert(root).second)
        return op->emitOpError("reduces the memory of @") << root << " twice";
      bufferOf[result] = buffer;
      refs.push_back(buffer);
    }
    ArrayAttr list = ArrayAttr::get(ctx, refs);
    auto inPlace = programBuilder.getDenseI64ArrayAttr(
        llvm::to_vector(llvm::seq<int64_t>(0, op->getNumOperands())));
    if (auto start = llvm::dyn_cast<dist::AllreduceStartOp>(op)) {
      auto reduction = plan::ReductionAttr::get(
          ctx, start.getReduction() == dist::Reduction::mean ? plan::Reduction::mean
                                                               : plan::Reduction::sum);
      programBuilder.create<plan::AllreduceStartOp>(loc, list, list, inPlace, reduction,
                                                    start.getBucketAttr(),
                                                    start.getWireTypeAttr(),
                                                    start.getSparseAttr(),
                                                    start.getSentEntriesAttr());
    } else {
      auto wait = llvm::cast<dist::AllreduceWaitOp>(op);
      programBuilder.create<plan::AllreduceWaitOp>(loc, list, list, inPlace,
                                                   wait.getStart().getBucketAttr(),
                                                   wait.getStart().getSparseAttr());
    }
    return success();
  }

  auto inputsOf = [&](ValueRange values) {
    SmallVector<Attribute> refs;
    for (Value v : values)
      refs.push_back(bufferOf.lookup(v));
    return ArrayAttr::get(ctx, refs);
  };

  // A kernel whose every result is only measured (a broadcast's shape_of, a
  // fusion's input it only broadcasts to) computes nothing anyone reads: no
  // command, no buffer (the readers' kernels take no argument for it). A
  // transpose that a kernel reads through as a view, still measured by a
  // broadcast, was written for nothing.
  if (llvm::isa<nn::FusionOp, nn::TransposeOp, nn::SliceOp, nn::ConcatOp, nn::BroadcastOp,
                nn::GatherOp, nn::ReduceSumOp, nn::ReduceMeanOp, nn::ReduceMaxOp>(op) ||
      (isKernelOp(op) && nn::isFusibleElementwise(op))) {
    if (llvm::all_of(op->getResults(), [](Value result) {
          return llvm::all_of(result.getUses(), nn::readsShapeOnly);
        }) && !op->use_empty())
      return success();
  }

  if (isKernelOp(op)) {
    std::string name = "k" + std::to_string(kernelCounter);
    FailureOr<KernelSignature> signature = emitKernel(op, kernels, name);
    if (failed(signature))
      return failure();
    // Identical bodies (same op, shapes and attributes: ResNet's repeated
    // blocks) share one kernel.
    auto body = llvm::cast<func::FuncOp>(kernels.getBody()->back());
    body.setSymName("kernel");
    std::string key;
    llvm::raw_string_ostream os(key);
    // Local scope: the default numbers values across the whole module, per call.
    body->print(os, OpPrintingFlags().useLocalScope().assumeVerified());
    auto [it, inserted] = kernelByBody.try_emplace(os.str(), name);
    if (inserted) {
      body.setSymName(name);
      ++kernelCounter;
    } else {
      body.erase();
      name = it->second;
    }
    ArrayAttr inputs = inputsOf(signature->inputs);
    SmallVector<Attribute> outputs;
    SmallVector<int64_t> inPlace;
    bool anyInPlace = false;
    for (Value result : op->getResults()) {
      FlatSymbolRefAttr out = outputBuffer(result, &*signature);
      bufferOf[result] = out;
      outputs.push_back(out);
      int64_t overwritten = -1;
      for (auto [i, input] : llvm::enumerate(inputs))
        if (rootOf(llvm::cast<FlatSymbolRefAttr>(input)) == rootOf(out)) {
          overwritten = i;
          break;
        }
      anyInPlace |= overwritten != -1;
      inPlace.push_back(overwritten);
    }
    if (inserted) {
      SmallVector<int64_t> argBytes;
      SmallVector<Value> args(signature->inputs);
      llvm::append_range(args, op->getResults());
      for (Value v : args) {
        auto type = llvm::cast<RankedTensorType>(v.getType());
        argBytes.push_back(type.getNumElements() *
                           plan::elementBytes(type.getElementType()));
      }
      OpBuilder::InsertionGuard guard(moduleBuilder);
      moduleBuilder.setInsertionPoint(kernels);
      // The ops it computes: a fusion's members, in order.
      SmallVector<StringRef> opNames;
      if (llvm::isa<nn::FusionOp, nn::MultiTensorOp>(op)) {
        for (Operation &inner : op->getRegion(0).front().without_terminator())
          opNames.push_back(inner.getName().getStringRef());
      } else {
        opNames.push_back(op->getName().getStringRef());
      }
      moduleBuilder.create<plan::KernelOp>(
          loc, name, moduleBuilder.getStrArrayAttr(opNames),
          signature->inputs.size(), op->getNumResults(),
          moduleBuilder.getDenseI64ArrayAttr(argBytes), signature->elementwise,
          signature->groups.empty() ? DenseI64ArrayAttr()
                                    : moduleBuilder.getDenseI64ArrayAttr(signature->groups));
    }
    programBuilder.create<plan::LaunchOp>(
        loc, inputs, ArrayAttr::get(ctx, outputs),
        anyInPlace ? programBuilder.getDenseI64ArrayAttr(inPlace) : DenseI64ArrayAttr(),
        FlatSymbolRefAttr::get(ctx, name));
    return success();
  }

  // Library calls: one output, never in place.
  auto libraryOutput = [&]() {
    FlatSymbolRefAttr out = outputBuffer(op->getResult(0), /*signature=*/nullptr);
    bufferOf[op->getResult(0)] = out;
    return ArrayAttr::get(ctx, {out});
  };
  OpBuilder &b = programBuilder;
  auto conv = [&](auto opTag, ValueRange inputs) {
    using OpT = decltype(opTag);
    ArrayAttr ins = inputsOf(inputs);
    int64_t groups = 1;
    if (auto attr = op->getAttrOfType<IntegerAttr>("groups"))
      groups = attr.getInt();
    b.create<OpT>(loc, ins, libraryOutput(), DenseI64ArrayAttr(),
                  i64Array(b, op, "strides", {1, 1}),
                  i64Array(b, op, "padding", {0, 0, 0, 0}),
                  i64Array(b, op, "dilations", {1, 1}), b.getI64IntegerAttr(groups),
                  op->hasAttr("channels_last") ? b.getUnitAttr() : UnitAttr(),
                  op->hasAttr("filter_ohwi") ? b.getUnitAttr() : UnitAttr());
    return success();
  };
  auto pool = [&](auto opTag, ValueRange inputs) {
    using OpT = decltype(opTag);
    ArrayAttr ins = inputsOf(inputs);
    DenseI64ArrayAttr window = i64Array(b, op, "window", {});
    b.create<OpT>(loc, ins, libraryOutput(), DenseI64ArrayAttr(), window,
                  i64Array(b, op, "strides", window.asArrayRef()),
                  i64Array(b, op, "padding", {0, 0, 0, 0}),
                  op->hasAttr("exclude_padding") ? b.getUnitAttr() : UnitAttr(),
                  op->hasAttr("channels_last") ? b.getUnitAttr() : UnitAttr());
    return success();
  };
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](nn::Conv2DOp o) { return conv(plan::Conv2DOp(), o->getOperands()); })
      .Case([&](nn::Conv2DBackwardDataOp o) {
        return conv(plan::Conv2DBackwardDataOp(), o->getOperands());
      })
      .Case([&](nn::Conv2DBackwardFilterOp o) {
        return conv(plan::Conv2DBackwardFilterOp(), o->getOperands());
      })
      .Case([&](nn::MatmulOp o) {
        ArrayAttr ins = inputsOf(o->getOperands());
        b.create<plan::GemmOp>(loc, ins, libraryOutput(), DenseI64ArrayAttr(),
                               o.getTransposeAAttr(), o.getTransposeBAttr());
        return success();
      })
      .Case<nn::AttentionOp, nn::AttentionBackwardOp>([&](Operation *o) {
        // Library calls of several outputs.
        ArrayAttr ins = inputsOf(o->getOperands());
        SmallVector<Attribute> outs;
        for (Value result : o->getResults()) {
          FlatSymbolRefAttr out = outputBuffer(result, /*signature=*/nullptr);
          bufferOf[result] = out;
          outs.push_back(out);
        }
        UnitAttr transposeK = o->hasAttr("transpose_k") ? b.getUnitAttr() : UnitAttr();
        auto strides = o->getAttrOfType<DenseI64ArrayAttr>("bias_strides");
        if (isa<nn::AttentionOp>(o))
          b.create<plan::AttentionOp>(loc, ins, ArrayAttr::get(ctx, outs), DenseI64ArrayAttr(),
                                      transposeK, strides);
        else
          b.create<plan::AttentionBackwardOp>(loc, ins, ArrayAttr::get(ctx, outs),
                                              DenseI64ArrayAttr(), transposeK, strides);
        return success();
      })
      .Case([&](nn::LinearOp o) {
        ArrayAttr ins = inputsOf(o->getOperands());
        b.create<plan::GemmOp>(loc, ins, libraryOutput(), DenseI64ArrayAttr(),
                               UnitAttr(), b.getUnitAttr());
        return success();
      })
      .Case([&](nn::MaxPool2DOp o) { return pool(plan::MaxPool2DOp(), o->getOperands()); })
      .Case([&](nn::AvgPool2DOp o) { return pool(plan::AvgPool2DOp(), o->getOperands()); })
      .Case([&](nn::MaxPool2DBackwardOp o) {
        return pool(plan::MaxPool2DBackwardOp(), o->getOperands());
      })
      .Case([&](nn::AvgPool2DBackwardOp o) {
        return pool(plan::AvgPool2DBackwardOp(), o->getOperands());
      })
      .Default([&](Operation *o) {
        return o->emitOpError("has no lowering to the plan (run the autodiff phase "
                              "first, which decomposes training ops)");
      });
}

LogicalResult LowerToPlanPass::lowerFunction(func::FuncOp func) {
  prefix = func.getSymName().str();
  valueCounter = 0;
  bufferOf.clear();
  position.clear();
  reads.clear();
  assignsAt.clear();
  snapshots.clear();
  nextBucket = 0;
  func.walk([&](dist::AllreduceStartOp start) {
    nextBucket = std::max<int64_t>(nextBucket, start.getBucketAttr().getInt() + 1);
  });
  if (!func.getBody().hasOneBlock())
    return func.emitOpError("must have a single block to become a plan program");
  Block &body = func.front();

  // Who reads each state, through loads and views of loads, and when.
  unsigned pos = 0;
  for (Operation &op : body)
    position[&op] = pos++;
  SmallVector<std::pair<nn::LoadOp, unsigned>> loadReads; // each load's last read
  SmallVector<nn::AssignOp> assigns;
  for (Operation &op : body) {
    if (auto assign = llvm::dyn_cast<nn::AssignOp>(op)) {
      assignsAt[assign.getVariable()].push_back(position[&op]);
      assigns.push_back(assign);
    }
    auto load = llvm::dyn_cast<nn::LoadOp>(op);
    if (!load)
      continue;
    unsigned last = 0;
    SmallVector<Value> worklist = {load.getResult()};
    while (!worklist.empty()) {
      Value v = worklist.pop_back_val();
      for (Operation *user : v.getUsers()) {
        if (llvm::isa<nn::ReshapeOp, nn::FlattenOp>(user))
          worklist.push_back(user->getResult(0));
        else if (!llvm::isa<func::ReturnOp>(user))
          last = std::max(last, position.lookup(user));
        else
          last = std::max(last, pos);
      }
    }
    loadReads.push_back({load, last});
  }
  // A load is a view of the state's buffer. One still read after an
  // nn.assign overwrites that buffer (a model updating a state in @forward
  // whose backward reads the old value) is a copy into the arena instead,
  // taken where it is loaded; the state is then read only there.
  for (auto [load, last] : loadReads) {
    for (nn::AssignOp assign : assigns)
      if (load.getVariable() == assign.getVariable() && position[load] < position[assign] &&
          last > position[assign]) {
        snapshots.insert(load);
        last = position[load];
        break;
      }
    reads[load.getVariable()].push_back({position[load], last});
  }

  moduleBuilder.setInsertionPoint(kernels);
  auto program = moduleBuilder.create<plan::ProgramOp>(
      func.getLoc(), func.getSymName(), moduleBuilder.getArrayAttr({}),
      moduleBuilder.getArrayAttr({}), IntegerAttr());
  program.getBody().emplaceBlock();
  programBuilder.setInsertionPointToStart(&program.getBody().front());
  moduleBuilder.setInsertionPoint(program);

  SmallVector<Attribute> inputs;
  for (BlockArgument arg : func.getArguments()) {
    if (!llvm::isa<RankedTensorType>(arg.getType()) ||
        !llvm::cast<RankedTensorType>(arg.getType()).hasStaticShape())
      return func.emitOpError("argument ") << arg.getArgNumber()
                                           << " needs a static tensor type";
    std::string name = prefix + ".input" + std::to_string(arg.getArgNumber());
    FlatSymbolRefAttr ref =
        newBuffer(func.getLoc(), name, memrefFor(arg.getType()), plan::Region::arena);
    bufferOf[arg] = ref;
    inputs.push_back(ref);
  }
  for (Operation &op : body.without_terminator())
    if (failed(lowerOp(&op)))
      return failure();
  SmallVector<Attribute> outputs;
  for (Value v : body.getTerminator()->getOperands())
    outputs.push_back(bufferOf.lookup(v));
  program.setInputsAttr(moduleBuilder.getArrayAttr(inputs));
  program.setOutputsAttr(moduleBuilder.getArrayAttr(outputs));
  return success();
}

void LowerToPlanPass::runOnOperation() {
  module = getOperation();
  MLIRContext *ctx = &getContext();
  moduleBuilder = OpBuilder(ctx);
  programBuilder = OpBuilder(ctx);

  SmallVector<func::FuncOp> funcs;
  SmallVector<Operation *> variables;
  for (Operation &op : module.getBody()->getOperations()) {
    if (auto func = llvm::dyn_cast<func::FuncOp>(op))
      funcs.push_back(func);
    else if (llvm::isa<nn::ParameterOp, nn::StateOp>(op))
      variables.push_back(&op);
  }
  if (funcs.empty()) {
    module.emitError("nothing to lower: the module has no step function");
    return signalPassFailure();
  }

  moduleBuilder.setInsertionPointToEnd(module.getBody());
  kernels = moduleBuilder.create<ModuleOp>(module.getLoc(), kKernelsModuleName);

  // 1) State buffers and their initializers, in declaration order.
  moduleBuilder.setInsertionPoint(kernels);
  for (Operation *op : variables) {
    auto name = op->getAttrOfType<StringAttr>(SymbolTable::getSymbolAttrName());
    auto type = llvm::cast<RankedTensorType>(
        op->getAttrOfType<TypeAttr>("type").getValue());
    auto init = op->getAttrOfType<nn::InitializerAttr>("initializer");
    auto value = op->getAttrOfType<FloatAttr>("init_value");
    FlatSymbolRefAttr ref = newBuffer(op->getLoc(), name.getValue(), memrefFor(type),
                                      plan::Region::state);
    moduleBuilder.create<plan::StateOp>(
        op->getLoc(), ref,
        plan::InitializerAttr::get(ctx, static_cast<plan::Initializer>(
                                            static_cast<uint32_t>(init.getValue()))),
        value ? value : moduleBuilder.getF64FloatAttr(0.0),
        llvm::isa<nn::ParameterOp>(op) ? moduleBuilder.getUnitAttr() : UnitAttr());
  }

  // 2-4) One program per step function.
  for (func::FuncOp func : funcs)
    if (failed(lowerFunction(func)))
      return signalPassFailure();

  for (func::FuncOp func : funcs)
    func.erase();
  for (Operation *op : variables)
    op->erase();
}

} // namespace
