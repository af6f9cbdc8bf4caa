//===- DistOps.cpp - dist dialect ops -------------------------------------===//
//
// Registration and verifiers of the `dist` ops. The verifiers hold the pairing
// rule every later pass relies on: a start's results are read by exactly one
// wait, which takes all of them in order, so a collective cannot be left in
// flight or half waited.
//
//===----------------------------------------------------------------------===//

#include "dialects/dist/IR/DistOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/DenseSet.h"

using namespace mlir;
using namespace graphc::dist;

#include "dialects/dist/IR/DistDialect.cpp.inc"
#include "dialects/dist/IR/DistEnums.cpp.inc"

void DistDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/dist/IR/DistOps.cpp.inc"
      >();
}

LogicalResult AllreduceStartOp::inferReturnTypes(
    MLIRContext *, std::optional<Location>, ValueRange operands, DictionaryAttr,
    OpaqueProperties, RegionRange, SmallVectorImpl<Type> &inferred) {
  llvm::append_range(inferred, operands.getTypes());
  return success();
}

LogicalResult AllreduceWaitOp::inferReturnTypes(
    MLIRContext *, std::optional<Location>, ValueRange operands, DictionaryAttr,
    OpaqueProperties, RegionRange, SmallVectorImpl<Type> &inferred) {
  llvm::append_range(inferred, operands.getTypes());
  return success();
}

AllreduceWaitOp AllreduceStartOp::getWait() {
  if (getNumResults() == 0 || !getResult(0).hasOneUse())
    return nullptr;
  return llvm::dyn_cast<AllreduceWaitOp>(*getResult(0).getUsers().begin());
}

AllreduceStartOp AllreduceWaitOp::getStart() {
  if (getNumOperands() == 0)
    return nullptr;
  return getOperand(0).getDefiningOp<AllreduceStartOp>();
}

LogicalResult AllreduceStartOp::verify() {
  if (getTensors().empty())
    return emitOpError("needs at least one tensor");
  if (getBucketAttr().getInt() < 0)
    return emitOpError("bucket must be >= 0, got ") << getBucketAttr().getInt();
  if (auto wire = getWireType()) {
    if (!wire->isF16())
      return emitOpError("wire type must be f16 (or absent: each tensor's own), got ")
             << *wire;
  }
  llvm::SmallDenseSet<Value, 8> seen;
  for (Value tensor : getTensors())
    if (!seen.insert(tensor).second)
      return emitOpError("reduces one tensor twice");
  if (getSparse()) {
    // Threes: values f32 [k], indices i32 [k], the dense f32 result.
    if (getTensors().size() % 3 != 0 || getWireType())
      return emitOpError("sparse: takes threes of values, indices and a dense tensor, and no "
                         "wire type");
    int64_t room = 0;
    for (size_t i = 0; i < getTensors().size(); i += 3) {
      auto values = llvm::cast<RankedTensorType>(getTensors()[i].getType());
      room += values.hasStaticShape() ? values.getNumElements() : 0;
      auto indices = llvm::cast<RankedTensorType>(getTensors()[i + 1].getType());
      auto dense = llvm::cast<RankedTensorType>(getTensors()[i + 2].getType());
      if (!values.getElementType().isF32() || !indices.getElementType().isInteger(32) ||
          !dense.getElementType().isF32() || values.getRank() != 1 || indices.getRank() != 1 ||
          !values.hasStaticShape() || !dense.hasStaticShape() ||
          values.getShape() != indices.getShape() || values.getNumElements() < 1 ||
          values.getNumElements() > dense.getNumElements() ||
          dense.getNumElements() >= (int64_t{1} << 31))
        return emitOpError("sparse: set ")
               << i / 3 << " must be values tensor<Kxf32>, indices tensor<Kxi32> and a dense "
               << "f32 tensor of N >= K elements (N < 2^31)";
    }
    if (IntegerAttr attr = getSentEntriesAttr()) {
      const int64_t sent = attr.getInt();
      if (sent < 1 || sent > room)
        return emitOpError("sent_entries ") << sent << " must be in [1, " << room
                                            << "], the entries its sets can hold";
    }
  } else if (getSentEntries()) {
    return emitOpError("sent_entries is for sparse collectives only");
  } else {
    for (Value tensor : getTensors())
      if (!llvm::isa<FloatType>(llvm::cast<RankedTensorType>(tensor.getType()).getElementType()))
        return emitOpError("reduces ") << tensor.getType() << "; only sparse collectives take i32";
  }
  // The pairing rule, checked from the start so that a result read by
  // anything else is reported where the collective begins.
  Operation *wait = nullptr;
  for (auto [i, result] : llvm::enumerate(getInFlight())) {
    if (!result.hasOneUse())
      return emitOpError("in-flight result ")
             << i << " must have exactly one user, the dist.allreduce_wait";
    OpOperand &use = *result.getUses().begin();
    if (!llvm::isa<AllreduceWaitOp>(use.getOwner()) || use.getOperandNumber() != i)
      return emitOpError("in-flight result ")
             << i << " must be operand " << i << " of a dist.allreduce_wait";
    if (wait && use.getOwner() != wait)
      return emitOpError("in-flight results go to more than one dist.allreduce_wait");
    wait = use.getOwner();
  }
  if (wait && wait->getBlock() != getOperation()->getBlock())
    return emitOpError("and its dist.allreduce_wait must be in one block");
  return success();
}

LogicalResult AllreduceWaitOp::verify() {
  AllreduceStartOp start = getStart();
  if (!start)
    return emitOpError("operands must be the results of a dist.allreduce_start");
  if (getNumOperands() != start.getNumResults())
    return emitOpError("takes ") << getNumOperands() << " of the "
                                 << start.getNumResults()
                                 << " tensors its dist.allreduce_start has in flight";
  for (auto [i, operand] : llvm::enumerate(getInFlight()))
    if (operand != start.getResult(i))
      return emitOpError("operand ") << i << " must be in-flight result " << i
                                     << " of one dist.allreduce_start";
  return success();
}

#define GET_OP_CLASSES
#include "dialects/dist/IR/DistOps.cpp.inc"
