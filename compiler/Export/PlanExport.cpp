//===- PlanExport.cpp - plan dialect to a FlatBuffers plan file -----------===//
//
// One pass over the module: buffers get their index in order of appearance,
// every other table refers to buffers and kernels by those indices.
//
//===----------------------------------------------------------------------===//

#include "compiler/Export/PlanExport.h"

#include "compiler/Lowering/Passes.h"
#include "compiler/Transforms/Passes.h"
#include "dialects/plan/IR/PlanDialect.h"
#include "contract/schema/plan_generated.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace graphc;

namespace {

fb::DType toDType(Type type) {
  if (type.isF16())
    return fb::DType::F16;
  if (type.isBF16())
    return fb::DType::BF16;
  if (type.isInteger(32))
    return fb::DType::I32;
  if (type.isInteger(64))
    return fb::DType::I64;
  if (type.isInteger(1))
    return fb::DType::I1;
  if (type.isInteger(8))
    return fb::DType::U8;
  return fb::DType::F32;
}

/// The little-endian bytes of a dense constant, splats expanded, i1 as bytes.
FailureOr<std::vector<uint8_t>> constantBytes(plan::ConstantOp op, int64_t size) {
  auto dense = llvm::dyn_cast<DenseElementsAttr>(op.getValue());
  if (!dense)
    return op.emitError("plan export: only dense constants can be exported");
  std::vector<uint8_t> bytes;
  bytes.reserve(size);
  if (dense.getElementType().isInteger(1)) {
    for (bool v : dense.getValues<bool>())
      bytes.push_back(v ? 1 : 0);
  } else {
    ArrayRef<char> raw = dense.getRawData();
    int64_t count = dense.getNumElements();
    for (int64_t i = 0, e = dense.isSplat() ? count : 1; i < e; ++i)
      bytes.insert(bytes.end(), raw.begin(), raw.end());
  }
  if (static_cast<int64_t>(bytes.size()) != size)
    return op.emitError("plan export: constant has ")
           << bytes.size() << " bytes, its buffer " << size;
  return bytes;
}

std::string locationString(Location loc) {
  std::string text;
  llvm::raw_string_ostream os(text);
  if (auto fileLoc = llvm::dyn_cast<FileLineColLoc>(loc))
    os << fileLoc.getFilename().getValue() << ":" << fileLoc.getLine() << ":"
       << fileLoc.getColumn();
  else if (auto fused = llvm::dyn_cast<FusedLoc>(loc); fused && !fused.getLocations().empty())
    return locationString(fused.getLocations().front());
  else if (auto name = llvm::dyn_cast<NameLoc>(loc)) {
    // A node graphc import made: its file (line 0) and the node, which the
    // importer named by index, ONNX name and op type.
    if (auto file = llvm::dyn_cast<FileLineColLoc>(name.getChildLoc());
        file && file.getLine() == 0)
      return (file.getFilename().getValue() + ": " + name.getName().getValue()).str();
    return locationString(name.getChildLoc());
  }
  return os.str();
}

} // namespace

llvm::StringMap<KernelTraffic> graphc::kernelTraffic(ModuleOp module) {
  llvm::StringMap<int64_t> kernelBytes;
  for (auto kernel : module.getOps<plan::KernelOp>()) {
    int64_t bytes = 0;
    for (int64_t b : kernel.getArgBytes())
      bytes += b;
    kernelBytes[kernel.getSymName()] = bytes;
  }
  auto savings = module->getAttrOfType<DictionaryAttr>(kFusionSavingsAttr);
  llvm::StringMap<KernelTraffic> result;
  for (auto program : module.getOps<plan::ProgramOp>()) {
    KernelTraffic &t = result[program.getSymName()];
    for (auto launch : program.getBody().front().getOps<plan::LaunchOp>()) {
      ++t.launches;
      t.bytes += kernelBytes.lookup(launch.getKernel());
    }
    t.unfusedLaunches = t.launches;
    t.unfusedBytes = t.bytes;
    if (auto saved = savings ? savings.getAs<DenseI64ArrayAttr>(program.getSymName())
                             : DenseI64ArrayAttr();
        saved && saved.size() == 2) {
      t.unfusedLaunches += saved[0];
      t.unfusedBytes += saved[1];
    }
  }
  return result;
}

LogicalResult graphc::exportPlan(ModuleOp module, const PlanMetadata &metadata,
                                 llvm::raw_ostream &os) {
  llvm::StringMap<KernelTraffic> traffic = kernelTraffic(module);
  flatbuffers::FlatBufferBuilder fbb(1 << 20);
  llvm::StringMap<int32_t> bufferIndex, kernelIndex;
  std::vector<flatbuffers::Offset<fb::Buffer>> buffers;
  std::vector<flatbuffers::Offset<fb::State>> states;
  std::vector<flatbuffers::Offset<fb::Constant>> constants;
  std::vector<flatbuffers::Offset<fb::Kernel>> kernels;
  std::vector<flatbuffers::Offset<fb::KernelBinary>> binaries;
  std::vector<flatbuffers::Offset<fb::Program>> programs;
  std::vector<fb::Target> targets;
  llvm::StringMap<int64_t> bufferSize;

  auto indexOf = [&](Attribute ref) {
    return bufferIndex.lookup(llvm::cast<FlatSymbolRefAttr>(ref).getValue());
  };
  auto indices = [&](ArrayAttr refs) {
    std::vector<int32_t> out;
    for (Attribute ref : refs)
      out.push_back(indexOf(ref));
    return fbb.CreateVector(out);
  };
  auto i64s = [&](ArrayRef<int64_t> values) {
    return fbb.CreateVector(std::vector<int64_t>(values.begin(), values.end()));
  };

  for (Operation &op : module.getBody()->getOperations()) {
    if (auto buffer = llvm::dyn_cast<plan::BufferOp>(op)) {
      if (!buffer.getOffset())
        return buffer.emitError("plan export: buffer has no offset");
      MemRefType type = buffer.getMemRefType();
      bufferIndex[buffer.getSymName()] = buffers.size();
      bufferSize[buffer.getSymName()] = buffer.getSizeInBytes();
      buffers.push_back(fb::CreateBuffer(
          fbb, fbb.CreateString(buffer.getSymName().str()), toDType(type.getElementType()),
          i64s(type.getShape()), static_cast<fb::Region>(buffer.getRegion()),
          *buffer.getOffset(), buffer.getSizeInBytes()));
    } else if (auto state = llvm::dyn_cast<plan::StateOp>(op)) {
      states.push_back(fb::CreateState(
          fbb, bufferIndex.lookup(state.getBuffer()),
          static_cast<fb::Initializer>(state.getInit()),
          state.getValue().convertToDouble(), state.getTrainable()));
    } else if (auto constant = llvm::dyn_cast<plan::ConstantOp>(op)) {
      FailureOr<std::vector<uint8_t>> bytes =
          constantBytes(constant, bufferSize.lookup(constant.getBuffer()));
      if (failed(bytes))
        return failure();
      constants.push_back(fb::CreateConstant(
          fbb, bufferIndex.lookup(constant.getBuffer()), fbb.CreateVector(*bytes)));
    } else if (auto kernel = llvm::dyn_cast<plan::KernelOp>(op)) {
      kernelIndex[kernel.getSymName()] = kernels.size();
      std::vector<std::string> ops;
      for (StringRef name : kernel.getOps().getAsValueRange<StringAttr>())
        ops.push_back(name.str());
      std::vector<uint64_t> argBytes(kernel.getArgBytes().begin(),
                                     kernel.getArgBytes().end());
      std::vector<int32_t> groups;
      if (std::optional<ArrayRef<int64_t>> g = kernel.getGroups())
        groups.assign(g->begin(), g->end());
      kernels.push_back(fb::CreateKernel(
          fbb, fbb.CreateString(kernel.getSymName().str()), fbb.CreateVectorOfStrings(ops),
          kernel.getNumInputs(), kernel.getNumOutputs(), kernel.getElementwise(),
          fbb.CreateVector(argBytes), groups.empty() ? 0 : fbb.CreateVector(groups)));
    } else if (auto binary = llvm::dyn_cast<plan::BinaryOp>(op)) {
      std::vector<std::string> symbols;
      for (StringRef name : binary.getSymbols().getAsValueRange<StringAttr>())
        symbols.push_back(name.str());
      StringRef data = binary.getData();
      auto target = static_cast<fb::Target>(binary.getTarget());
      targets.push_back(target);
      flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<fb::GpuKernel>>> launches;
      if (ArrayAttr perKernel = binary.getLaunchesAttr()) {
        // The plan.binary verifier has checked the structure.
        auto toVector = [&](DictionaryAttr launch, StringRef key) {
          ArrayRef<int32_t> values = launch.getAs<DenseI32ArrayAttr>(key).asArrayRef();
          return fbb.CreateVector(std::vector<uint32_t>(values.begin(), values.end()));
        };
        std::vector<flatbuffers::Offset<fb::GpuKernel>> kernelLaunches;
        for (auto list : perKernel.getAsRange<ArrayAttr>()) {
          std::vector<flatbuffers::Offset<fb::GpuLaunch>> entries;
          for (auto launch : list.getAsRange<DictionaryAttr>())
            entries.push_back(fb::CreateGpuLaunch(
                fbb, fbb.CreateString(launch.getAs<StringAttr>("entry").str()),
                toVector(launch, "grid"), toVector(launch, "block"), toVector(launch, "args")));
          kernelLaunches.push_back(fb::CreateGpuKernel(fbb, fbb.CreateVector(entries)));
        }
        launches = fbb.CreateVector(kernelLaunches);
      }
      const auto *code = reinterpret_cast<const uint8_t *>(data.data());
      graphc::Sha256Digest hash = graphc::Sha256Of(code, data.size());
      binaries.push_back(fb::CreateKernelBinary(
          fbb, target, static_cast<fb::BinaryFormat>(binary.getFormat()),
          fbb.CreateString(binary.getCpu().str()), fbb.CreateVector(code, data.size()),
          fbb.CreateVectorOfStrings(symbols), launches,
          fbb.CreateVector(hash.data(), hash.size())));
    } else if (!llvm::isa<plan::ProgramOp>(op)) {
      return op.emitError("plan export: '") << op.getName() << "' is not part of a plan";
    }
  }

  for (auto program : module.getOps<plan::ProgramOp>()) {
    std::vector<flatbuffers::Offset<fb::Command>> commands;
    for (Operation &op : program.getBody().front()) {
      auto inputs = indices(op.getAttrOfType<ArrayAttr>("inputs"));
      auto outputs = indices(op.getAttrOfType<ArrayAttr>("outputs"));
      flatbuffers::Offset<flatbuffers::Vector<int32_t>> inPlace;
      if (auto attr = op.getAttrOfType<DenseI64ArrayAttr>("in_place")) {
        std::vector<int32_t> values(attr.asArrayRef().begin(), attr.asArrayRef().end());
        inPlace = fbb.CreateVector(values);
      }
      auto location = fbb.CreateString(locationString(op.getLoc()));
      fb::Opcode opcode;
      int32_t kernel = -1;
      flatbuffers::Offset<fb::ConvAttrs> conv;
      flatbuffers::Offset<fb::GemmAttrs> gemm;
      flatbuffers::Offset<fb::PoolAttrs> pool;
      flatbuffers::Offset<fb::CollectiveAttrs> collective;
      flatbuffers::Offset<fb::AttentionAttrs> attention;
      auto convAttrs = [&](auto c) {
        return fb::CreateConvAttrs(fbb, i64s(c.getStrides()), i64s(c.getPadding()),
                                   i64s(c.getDilations()), c.getGroups(),
                                   c.getChannelsLast() ? fb::Layout::NHWC : fb::Layout::NCHW,
                                   c.getFilterOhwi() ? fb::Layout::NHWC : fb::Layout::NCHW);
      };
      auto poolAttrs = [&](auto p) {
        return fb::CreatePoolAttrs(fbb, i64s(p.getWindow()), i64s(p.getStrides()),
                                   i64s(p.getPadding()), p.getExcludePadding(),
                                   p.getChannelsLast() ? fb::Layout::NHWC : fb::Layout::NCHW);
      };
      auto attentionAttrs = [&](auto a) {
        std::optional<ArrayRef<int64_t>> strides = a.getBiasStrides();
        return fb::CreateAttentionAttrs(fbb, a.getTransposeK(),
                                        strides ? i64s(*strides)
                                                : flatbuffers::Offset<flatbuffers::Vector<int64_t>>());
      };
      if (auto launch = llvm::dyn_cast<plan::LaunchOp>(op)) {
        opcode = fb::Opcode::Kernel;
        kernel = kernelIndex.lookup(launch.getKernel());
      } else if (auto c = llvm::dyn_cast<plan::Conv2DOp>(op)) {
        opcode = fb::Opcode::Conv2d;
        conv = convAttrs(c);
      } else if (auto c = llvm::dyn_cast<plan::Conv2DBackwardDataOp>(op)) {
        opcode = fb::Opcode::Conv2dBackwardData;
        conv = convAttrs(c);
      } else if (auto c = llvm::dyn_cast<plan::Conv2DBackwardFilterOp>(op)) {
        opcode = fb::Opcode::Conv2dBackwardFilter;
        conv = convAttrs(c);
      } else if (auto g = llvm::dyn_cast<plan::GemmOp>(op)) {
        opcode = fb::Opcode::Gemm;
        gemm = fb::CreateGemmAttrs(fbb, g.getTransposeA(), g.getTransposeB());
      } else if (auto p = llvm::dyn_cast<plan::MaxPool2DOp>(op)) {
        opcode = fb::Opcode::MaxPool2d;
        pool = poolAttrs(p);
      } else if (auto p = llvm::dyn_cast<plan::AvgPool2DOp>(op)) {
        opcode = fb::Opcode::AvgPool2d;
        pool = poolAttrs(p);
      } else if (auto p = llvm::dyn_cast<plan::MaxPool2DBackwardOp>(op)) {
        opcode = fb::Opcode::MaxPool2dBackward;
        pool = poolAttrs(p);
      } else if (auto p = llvm::dyn_cast<plan::AvgPool2DBackwardOp>(op)) {
        opcode = fb::Opcode::AvgPool2dBackward;
        pool = poolAttrs(p);
      } else if (auto a = llvm::dyn_cast<plan::AttentionOp>(op)) {
        opcode = fb::Opcode::Attention;
        attention = attentionAttrs(a);
      } else if (auto a = llvm::dyn_cast<plan::AttentionBackwardOp>(op)) {
        opcode = fb::Opcode::AttentionBackward;
        attention = attentionAttrs(a);
      } else if (llvm::isa<plan::CopyOp>(op)) {
        opcode = fb::Opcode::Copy;
      } else if (auto start = llvm::dyn_cast<plan::AllreduceStartOp>(op)) {
        opcode = fb::Opcode::AllreduceStart;
        Type wire = start.getWireType().value_or(Type());
        collective = fb::CreateCollectiveAttrs(
            fbb, start.getBucket(),
            start.getReduction() == plan::Reduction::mean ? fb::Reduction::Mean
                                                          : fb::Reduction::Sum,
            wire && wire.isF16() ? fb::DType::F16 : fb::DType::F32, start.getSparse(),
            static_cast<uint64_t>(start.getSentEntries().value_or(0)));
      } else if (auto wait = llvm::dyn_cast<plan::AllreduceWaitOp>(op)) {
        opcode = fb::Opcode::AllreduceWait;
        collective = fb::CreateCollectiveAttrs(fbb, wait.getBucket(), fb::Reduction::Sum,
                                               fb::DType::F32, wait.getSparse());
      } else {
        return op.emitError("plan export: unknown command '") << op.getName() << "'";
      }
      commands.push_back(fb::CreateCommand(fbb, opcode, inputs, outputs, inPlace, kernel,
                                           conv, gemm, pool, location, collective,
                                           attention));
    }
    const KernelTraffic &t = traffic[program.getSymName()];
    bool fused = t.unfusedLaunches != t.launches || t.unfusedBytes != t.bytes;
    programs.push_back(fb::CreateProgram(
        fbb, fbb.CreateString(program.getSymName().str()), indices(program.getInputs()),
        indices(program.getOutputs()), fbb.CreateVector(commands),
        program.getArenaSize().value_or(0), fused ? t.unfusedLaunches : 0,
        fused ? t.unfusedBytes : 0));
  }

  auto sizeAttr = [&](StringRef name) -> uint64_t {
    auto attr = module->getAttrOfType<IntegerAttr>(name);
    return attr ? attr.getInt() : 0;
  };
  // The digest and signature are written as zeros, then filled in by SealPlan
  // over the finished bytes (plan_integrity.h).
  std::vector<uint8_t> zeros(graphc::kSignatureBytes, 0);
  auto digest = fbb.CreateVector(zeros.data(), 32);
  flatbuffers::Offset<flatbuffers::Vector<uint8_t>> signature, signer;
  if (metadata.signingKey) {
    graphc::PublicKey publicKey = graphc::PublicKeyOf(*metadata.signingKey);
    signature = fbb.CreateVector(zeros.data(), zeros.size());
    signer = fbb.CreateVector(publicKey.data(), publicKey.size());
  }
  auto plan = fb::CreatePlan(
      fbb, kPlanSchemaVersion, fbb.CreateString(metadata.model), metadata.batchSize,
      fbb.CreateString(metadata.precision), metadata.fused,
      fbb.CreateVector(targets),
      sizeAttr(kArenaSizeAttr), sizeAttr(kStateSizeAttr), sizeAttr(kConstantSizeAttr),
      sizeAttr(kTensorBytesAttr), fbb.CreateVector(buffers), fbb.CreateVector(states),
      fbb.CreateVector(constants), fbb.CreateVector(kernels), fbb.CreateVector(binaries),
      fbb.CreateVector(programs), digest, signature, signer,
      metadata.microBatches > 1 ? metadata.microBatches : 0);
  fb::FinishPlanBuffer(fbb, plan);
  graphc::Status sealed = graphc::SealPlan(
      fbb.GetBufferPointer(), fbb.GetSize(),
      metadata.signingKey ? &*metadata.signingKey : nullptr);
  if (!sealed.ok())
    return module.emitError("plan export: ") << sealed.message();
  os.write(reinterpret_cast<const char *>(fbb.GetBufferPointer()), fbb.GetSize());
  return success();
}
