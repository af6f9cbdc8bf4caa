//===- NNOps.cpp - nn dialect ops -----------------------------------------===//
//
// Shape inference, verifiers and folders of the `nn` ops. Inference does the
// shape and dtype checks (it runs while parsing, before the ODS constraints, so it
// must cope with any operand type); `verify()` checks what does not affect the
// result type. Every error names its op and each rule has a test in
// test/Dialect/nn/invalid.mlir.
//
//===----------------------------------------------------------------------===//

#include "dialects/nn/IR/NNOps.h"
#include "dialects/nn/IR/Views.h"

#include "mlir/Dialect/CommonFolders.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/TypeUtilities.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace graphc::nn;

namespace {

constexpr int64_t kDynamic = ShapedType::kDynamic;
/// Default `[top, bottom, left, right]` padding; static storage because an
/// ArrayRef to a braced list would dangle.
constexpr int64_t kNoPadding[4] = {0, 0, 0, 0};

/// Emits "'<op>' op <message>" at `loc` when inference has a location.
template <typename OpT, typename... Args>
LogicalResult inferError(std::optional<Location> loc, Args &&...args) {
  return emitOptionalError(loc, "'", OpT::getOperationName(), "' op ",
                           std::forward<Args>(args)...);
}

RankedTensorType rankedOf(Value value) {
  return value ? llvm::dyn_cast<RankedTensorType>(value.getType())
               : RankedTensorType();
}

bool isStatic(int64_t size) { return !ShapedType::isDynamic(size); }

/// A channels-last op's rank-4 activation [N, H, W, C] as the NCHW type its
/// shape rules are written for (other types as they are).
RankedTensorType nchwOf(RankedTensorType type, bool channelsLast) {
  if (!type || !channelsLast || type.getRank() != 4)
    return type;
  ArrayRef<int64_t> s = type.getShape();
  return type.clone({s[0], s[3], s[1], s[2]});
}

/// The inverse of nchwOf: an NCHW result as the op stores it.
RankedTensorType storedOf(RankedTensorType type, bool channelsLast) {
  if (!type || !channelsLast || type.getRank() != 4)
    return type;
  ArrayRef<int64_t> s = type.getShape();
  return type.clone({s[0], s[2], s[3], s[1]});
}


/// The largest extent or element count an nn op may produce: sizes are
/// multiplied in int64 everywhere (element counts, costs, arena offsets), and
/// 2^40 keeps every such product far from overflow.
constexpr int64_t kMaxElements = int64_t(1) << 40;
/// The largest window, stride, padding or dilation entry.
constexpr int64_t kMaxWindowEntry = int64_t(1) << 24;

/// The product of static `sizes`, or nullopt above kMaxElements.
std::optional<int64_t> boundedProduct(ArrayRef<int64_t> sizes) {
  int64_t product = 1;
  for (int64_t size : sizes)
    if (llvm::MulOverflow(product, size, product) || product > kMaxElements)
      return std::nullopt;
  return product;
}

/// Two extents that may be dynamic can only be shown to disagree when static.
bool extentsConflict(int64_t a, int64_t b) {
  return isStatic(a) && isStatic(b) && a != b;
}

/// Attribute values in messages as written ("0.5", "1e-05"), not "5.000000e-01".
std::string str(double value) { return llvm::formatv("{0}", value).str(); }
std::string str(const APFloat &value) { return str(value.convertToDouble()); }

std::string shapeString(ArrayRef<int64_t> shape) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << "[";
  llvm::interleaveComma(shape, os, [&](int64_t d) {
    if (isStatic(d))
      os << d;
    else
      os << "?";
  });
  os << "]";
  return s;
}

/// Checks a `[h, w]` (or `[top, bottom, left, right]`) attribute.
template <typename OpT>
LogicalResult checkWindowAttr(std::optional<Location> loc, StringRef name,
                              ArrayRef<int64_t> values, size_t size,
                              int64_t minValue) {
  if (values.size() != size)
    return inferError<OpT>(loc, "expects '", name, "' to have ", size,
                           " entries, got ", values.size());
  for (int64_t v : values) {
    if (v < minValue)
      return inferError<OpT>(loc, "expects every '", name, "' entry to be >= ",
                             minValue, ", got ", v);
    if (v > kMaxWindowEntry)
      return inferError<OpT>(loc, "expects every '", name, "' entry to be <= ",
                             kMaxWindowEntry, ", got ", v);
  }
  return success();
}

SmallVector<int64_t, 2> orDefault2(std::optional<ArrayRef<int64_t>> attr,
                                   ArrayRef<int64_t> fallback) {
  return SmallVector<int64_t, 2>(attr ? *attr : fallback);
}

} // namespace

int64_t graphc::nn::slidingWindowOutputSize(int64_t inputSize, int64_t window,
                                            int64_t stride, int64_t padBegin,
                                            int64_t padEnd, int64_t dilation) {
  if (!isStatic(inputSize))
    return kDynamic;
  // 128-bit: a huge dilation times a huge window must not wrap into "fits".
  __int128 span = static_cast<__int128>(inputSize) + padBegin + padEnd -
                  static_cast<__int128>(dilation) * (window - 1) - 1;
  if (span < 0)
    return 0;
  __int128 size = span / stride + 1;
  return size > kMaxElements ? kMaxElements + 1 : static_cast<int64_t>(size);
}

//===----------------------------------------------------------------------===//
// Variables
//===----------------------------------------------------------------------===//

/// Rules shared by nn.parameter and nn.state.
static LogicalResult verifyVariable(Operation *op, RankedTensorType type,
                                    Initializer init,
                                    std::optional<APFloat> value) {
  bool takesValue = init == Initializer::constant ||
                    init == Initializer::normal || init == Initializer::uniform;
  if (takesValue && !value)
    return op->emitOpError("initializer '")
           << stringifyInitializer(init) << "' needs a value, e.g. "
           << stringifyInitializer(init) << "(0.01)";
  if (!takesValue && value)
    return op->emitOpError("initializer '")
           << stringifyInitializer(init) << "' takes no value";
  if ((init == Initializer::normal || init == Initializer::uniform) &&
      !(value->convertToDouble() > 0.0))
    return op->emitOpError("initializer '")
           << stringifyInitializer(init) << "' needs a positive scale, got " << str(*value);
  bool fanBased = init == Initializer::kaiming_normal ||
                  init == Initializer::kaiming_normal_fan_out ||
                  init == Initializer::kaiming_uniform ||
                  init == Initializer::xavier_uniform;
  if (fanBased && type.getRank() < 2)
    return op->emitOpError("initializer '")
           << stringifyInitializer(init)
           << "' needs a tensor of rank >= 2 to compute fans, got rank "
           << type.getRank();
  if (!boundedProduct(type.getShape()))
    return op->emitOpError("declares more than 2^40 elements: ") << type;
  if (type.getNumElements() == 0)
    return op->emitOpError("declares an empty tensor ") << type;
  return success();
}

LogicalResult ParameterOp::verify() {
  if (!llvm::isa<FloatType>(getType().getElementType()))
    return emitOpError("parameters are trainable and must be float, got ")
           << getType();
  return verifyVariable(*this, getType(), getInitializer(), getInitValue());
}

LogicalResult StateOp::verify() {
  Type element = getType().getElementType();
  if (!llvm::isa<FloatType>(element) && !element.isSignlessInteger(32) &&
      !element.isSignlessInteger(64))
    return emitOpError("state must be float, i32 or i64, got ") << getType();
  return verifyVariable(*this, getType(), getInitializer(), getInitValue());
}

/// The declared type of the nn.parameter (or, unless `parametersOnly`, the
/// nn.state) that `op` names, or a failure reported on `op`.
static FailureOr<RankedTensorType>
lookupVariableType(Operation *op, SymbolTableCollection &symbolTable,
                   FlatSymbolRefAttr name, bool parametersOnly) {
  Operation *symbol = symbolTable.lookupNearestSymbolFrom(op, name);
  if (auto param = llvm::dyn_cast_or_null<ParameterOp>(symbol))
    return param.getType();
  if (auto state = llvm::dyn_cast_or_null<StateOp>(symbol); state && !parametersOnly)
    return state.getType();
  return op->emitOpError("'") << name.getValue() << "' does not name an "
                              << (parametersOnly ? "nn.parameter"
                                                 : "nn.parameter or nn.state");
}

/// Verifies that `type` is the declared type of the variable `name`.
static LogicalResult verifyVariableUse(Operation *op, SymbolTableCollection &table,
                                       FlatSymbolRefAttr name, Type type,
                                       bool parametersOnly = false) {
  FailureOr<RankedTensorType> declared =
      lookupVariableType(op, table, name, parametersOnly);
  if (failed(declared))
    return failure();
  if (*declared != type)
    return op->emitOpError("type ") << type << " does not match the declared type "
                                    << *declared << " of @" << name.getValue();
  return success();
}

LogicalResult LoadOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  return verifyVariableUse(*this, symbolTable, getVariableAttr(), getType());
}

LogicalResult AssignOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  return verifyVariableUse(*this, symbolTable, getVariableAttr(),
                           getValue().getType());
}

LogicalResult ApplyGradientOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  // A gradient may be narrower than its parameter (a half-precision gradient
  // of an f32 master weight); the shape must be the parameter's.
  FailureOr<RankedTensorType> declared = lookupVariableType(
      *this, symbolTable, getParameterAttr(), /*parametersOnly=*/true);
  if (failed(declared))
    return failure();
  auto gradient = llvm::cast<RankedTensorType>(getGradient().getType());
  if (gradient.getShape() != declared->getShape() ||
      gradient.getElementType().getIntOrFloatBitWidth() >
          declared->getElementType().getIntOrFloatBitWidth())
    return emitOpError("gradient type ")
           << gradient << " does not fit the declared type " << *declared << " of @"
           << getParameter();
  return success();
}

//===----------------------------------------------------------------------===//
// ConstantOp
//===----------------------------------------------------------------------===//

LogicalResult ConstantOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                           Adaptor adaptor,
                                           SmallVectorImpl<Type> &types) {
  auto type = llvm::dyn_cast_or_null<RankedTensorType>(
      adaptor.getValue() ? adaptor.getValue().getType() : Type());
  if (!type)
    return inferError<ConstantOp>(loc, "expects a ranked tensor value");
  types.push_back(type);
  return success();
}

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

/// A fold to `value`, unless that is `op`'s own result: in a graph region an
/// op may use itself, and folding it to itself would loop the canonicalizer.
static OpFoldResult foldTo(Operation *op, Value value) {
  if (!value || value == op->getResult(0))
    return {};
  return value;
}

OpFoldResult ReluOp::fold(FoldAdaptor) {
  // relu(relu(x)) == relu(x).
  if (auto inner = getInput().getDefiningOp<ReluOp>())
    return foldTo(*this, inner.getResult());
  return {};
}

OpFoldResult NegOp::fold(FoldAdaptor) {
  if (auto inner = getInput().getDefiningOp<NegOp>())
    return foldTo(*this, inner.getInput());
  return {};
}

/// Constant-folds a binary op on float constants (integer ones are left
/// alone: the float folder must never see an integer splat).
template <typename Fn>
static OpFoldResult foldFloatBinary(Operation *op, ArrayRef<Attribute> operands,
                                    Fn &&fn) {
  if (!llvm::isa<FloatType>(getElementTypeOrSelf(op->getResult(0).getType())))
    return {};
  return constFoldBinaryOp<FloatAttr, APFloat, void>(
      operands, [&](const APFloat &a, const APFloat &b) -> std::optional<APFloat> {
        return fn(a, b);
      });
}

OpFoldResult AddOp::fold(FoldAdaptor adaptor) {
  if (matchPattern(getRhs(), m_AnyZeroFloat()))
    return foldTo(*this, getLhs());
  if (matchPattern(getLhs(), m_AnyZeroFloat()))
    return foldTo(*this, getRhs());
  return foldFloatBinary(*this, adaptor.getOperands(),
                         [](APFloat a, const APFloat &b) { return a + b; });
}

OpFoldResult SubOp::fold(FoldAdaptor adaptor) {
  if (matchPattern(getRhs(), m_AnyZeroFloat()))
    return foldTo(*this, getLhs());
  return foldFloatBinary(*this, adaptor.getOperands(),
                         [](APFloat a, const APFloat &b) { return a - b; });
}

OpFoldResult MulOp::fold(FoldAdaptor adaptor) {
  if (matchPattern(getRhs(), m_OneFloat()))
    return foldTo(*this, getLhs());
  if (matchPattern(getLhs(), m_OneFloat()))
    return foldTo(*this, getRhs());
  return foldFloatBinary(*this, adaptor.getOperands(),
                         [](APFloat a, const APFloat &b) { return a * b; });
}

OpFoldResult DivOp::fold(FoldAdaptor adaptor) {
  if (matchPattern(getRhs(), m_OneFloat()))
    return foldTo(*this, getLhs());
  return foldFloatBinary(*this, adaptor.getOperands(),
                         [](APFloat a, const APFloat &b) { return a / b; });
}

OpFoldResult MaxOp::fold(FoldAdaptor adaptor) {
  if (getLhs() == getRhs())
    return foldTo(*this, getLhs());
  return foldFloatBinary(*this, adaptor.getOperands(),
                         [](const APFloat &a, const APFloat &b) {
                           return llvm::maxnum(a, b);
                         });
}

LogicalResult CmpOp::inferReturnTypes(MLIRContext *context,
                                      std::optional<Location> loc, Adaptor adaptor,
                                      SmallVectorImpl<Type> &types) {
  auto lhs = rankedOf(adaptor.getLhs());
  if (!lhs)
    return inferError<CmpOp>(loc, "expects ranked tensor operands");
  types.push_back(RankedTensorType::get(lhs.getShape(), IntegerType::get(context, 1)));
  return success();
}

LogicalResult CastOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                       Adaptor adaptor,
                                       SmallVectorImpl<Type> &types) {
  auto input = rankedOf(adaptor.getInput());
  if (!input)
    return inferError<CastOp>(loc, "expects a ranked tensor operand");
  Type element = adaptor.getElementType();
  if (!llvm::isa<FloatType>(element) && !element.isSignlessInteger(1) &&
      !element.isSignlessInteger(32) && !element.isSignlessInteger(64))
    return inferError<CastOp>(loc, "cannot cast to ", element,
                              "; expects a float, i1, i32 or i64 element type");
  types.push_back(input.clone(element));
  return success();
}

OpFoldResult CastOp::fold(FoldAdaptor) {
  if (getInput().getType() == getType())
    return foldTo(*this, getInput());
  // A float widened and narrowed back is itself (f16 -> f32 -> f16 is exact);
  // the other way round (f32 -> f16 -> f32) rounds, and stays.
  if (auto widen = getInput().getDefiningOp<CastOp>()) {
    Type original = widen.getInput().getType();
    auto from = llvm::dyn_cast<FloatType>(getElementTypeOrSelf(original));
    auto wide = llvm::dyn_cast<FloatType>(getElementTypeOrSelf(widen.getType()));
    // Exact when the wide type has the narrow one's precision and range.
    if (original == getType() && from && wide && from != wide) {
      const llvm::fltSemantics &n = from.getFloatSemantics(), &w = wide.getFloatSemantics();
      if (llvm::APFloat::semanticsPrecision(w) >= llvm::APFloat::semanticsPrecision(n) &&
          llvm::APFloat::semanticsMaxExponent(w) >= llvm::APFloat::semanticsMaxExponent(n) &&
          llvm::APFloat::semanticsMinExponent(w) <= llvm::APFloat::semanticsMinExponent(n))
        return widen.getInput();
    }
  }
  return {};
}

LogicalResult BroadcastOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  auto input = rankedOf(adaptor.getInput());
  auto target = rankedOf(adaptor.getShapeOf());
  if (!input || !target)
    return inferError<BroadcastOp>(loc, "expects ranked tensor operands");
  ArrayRef<int64_t> dims = adaptor.getDims();
  if (static_cast<int64_t>(dims.size()) != input.getRank())
    return inferError<BroadcastOp>(loc, "expects one entry in 'dims' per operand "
                                   "dimension (", input.getRank(), "), got ",
                                   dims.size());
  for (auto [i, dim] : llvm::enumerate(dims)) {
    if (dim < 0 || dim >= target.getRank())
      return inferError<BroadcastOp>(loc, "'dims' entry ", dim,
                                     " is out of range for a result of rank ",
                                     target.getRank());
    if (i > 0 && dim <= dims[i - 1])
      return inferError<BroadcastOp>(loc, "'dims' must be strictly increasing");
  }
  SmallVector<int64_t> shape(target.getShape());
  for (auto [i, dim] : llvm::enumerate(dims)) {
    int64_t from = input.getDimSize(i);
    if (isStatic(from) && from != 1 && extentsConflict(from, shape[dim]))
      return inferError<BroadcastOp>(loc, "operand dimension ", i, " (", from,
                                     ") must be 1 or equal result dimension ",
                                     dim, " (", shape[dim], ")");
    if (!isStatic(shape[dim]) && isStatic(from) && from != 1)
      shape[dim] = from;
  }
  types.push_back(RankedTensorType::get(shape, input.getElementType()));
  return success();
}

OpFoldResult BroadcastOp::fold(FoldAdaptor) {
  bool identityDims = llvm::equal(getDims(), llvm::seq<int64_t>(0, getDims().size()));
  if (identityDims && getInput().getType() == getType() &&
      getType().hasStaticShape())
    return foldTo(*this, getInput());
  return {};
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

template <typename OpT>
static LogicalResult inferReduce(std::optional<Location> loc,
                                 typename OpT::Adaptor adaptor,
                                 SmallVectorImpl<Type> &types) {
  auto input = rankedOf(adaptor.getInput());
  if (!input)
    return inferError<OpT>(loc, "expects a ranked tensor operand");
  ArrayRef<int64_t> dims = adaptor.getDims();
  if (dims.empty())
    return inferError<OpT>(loc, "expects at least one dimension to reduce");
  for (auto [i, dim] : llvm::enumerate(dims)) {
    if (dim < 0 || dim >= input.getRank())
      return inferError<OpT>(loc, "reduction dimension ", dim,
                             " is out of range for rank ", input.getRank());
    if (i > 0 && dim <= dims[i - 1])
      return inferError<OpT>(loc, "reduction dimensions must be strictly increasing");
  }
  SmallVector<int64_t> shape;
  for (int64_t d = 0; d < input.getRank(); ++d) {
    if (!llvm::is_contained(dims, d))
      shape.push_back(input.getDimSize(d));
    else if (adaptor.getKeepDims())
      shape.push_back(1);
  }
  types.push_back(RankedTensorType::get(shape, input.getElementType()));
  return success();
}

#define GRAPHC_REDUCE_INFER(OpT)                                                \
  LogicalResult OpT::inferReturnTypes(MLIRContext *, std::optional<Location> loc, \
                                      Adaptor adaptor,                          \
                                      SmallVectorImpl<Type> &types) {           \
    return inferReduce<OpT>(loc, adaptor, types);                               \
  }
GRAPHC_REDUCE_INFER(ReduceSumOp)
GRAPHC_REDUCE_INFER(ReduceMeanOp)
GRAPHC_REDUCE_INFER(ReduceMaxOp)
#undef GRAPHC_REDUCE_INFER

//===----------------------------------------------------------------------===//
// Conv2DOp and its gradients
//===----------------------------------------------------------------------===//

namespace {

/// The geometry attributes shared by nn.conv2d and its gradient ops, with
/// defaults filled in and checked.
struct ConvGeometry {
  SmallVector<int64_t, 2> strides, dilations;
  SmallVector<int64_t, 4> padding;
  int64_t groups;
};

template <typename OpT, typename AdaptorT>
FailureOr<ConvGeometry> getConvGeometry(std::optional<Location> loc,
                                        AdaptorT adaptor) {
  ConvGeometry g;
  g.strides = orDefault2(adaptor.getStrides(), {1, 1});
  g.dilations = orDefault2(adaptor.getDilations(), {1, 1});
  ArrayRef<int64_t> padding =
      adaptor.getPadding() ? *adaptor.getPadding() : ArrayRef<int64_t>(kNoPadding);
  g.padding.assign(padding.begin(), padding.end());
  if (failed(checkWindowAttr<OpT>(loc, "strides", g.strides, 2, 1)) ||
      failed(checkWindowAttr<OpT>(loc, "padding", g.padding, 4, 0)) ||
      failed(checkWindowAttr<OpT>(loc, "dilations", g.dilations, 2, 1)))
    return failure();
  g.groups = static_cast<int64_t>(adaptor.getGroups().value_or(1));
  if (g.groups < 1)
    return inferError<OpT>(loc, "expects 'groups' >= 1, got ", g.groups);
  if (adaptor.getFilterOhwi() && !adaptor.getChannelsLast())
    return inferError<OpT>(loc, "an OHWI filter ('filter_ohwi') needs channels_last "
                                "activations");
  return g;
}

/// The forward convolution's output `[OH, OW]`, or an error when the kernel
/// does not fit.
template <typename OpT>
FailureOr<SmallVector<int64_t, 2>> convOutputSpatial(std::optional<Location> loc,
                                                     ArrayRef<int64_t> inputHW,
                                                     ArrayRef<int64_t> kernelHW,
                                                     const ConvGeometry &g) {
  SmallVector<int64_t, 2> out;
  for (int i = 0; i < 2; ++i) {
    int64_t size = slidingWindowOutputSize(inputHW[i], kernelHW[i], g.strides[i],
                                           g.padding[2 * i], g.padding[2 * i + 1],
                                           g.dilations[i]);
    if (isStatic(size) && size < 1)
      return inferError<OpT>(loc, "the ", kernelHW[i], "-wide window (dilation ",
                             g.dilations[i], ") does not fit the padded ",
                             i == 0 ? "height" : "width", " ",
                             inputHW[i] + g.padding[2 * i] + g.padding[2 * i + 1]);
    if (size > kMaxElements)
      return inferError<OpT>(loc, "output extent exceeds 2^40");
    out.push_back(size);
  }
  return out;
}

/// Checks that the forward output `[OH, OW]` matches the gradient's.
template <typename OpT>
LogicalResult checkGradOutputSpatial(std::optional<Location> loc,
                                     ArrayRef<int64_t> expected,
                                     RankedTensorType gradOutput) {
  for (int i = 0; i < 2; ++i)
    if (extentsConflict(expected[i], gradOutput.getDimSize(2 + i)))
      return inferError<OpT>(loc, "grad_output is ", shapeString(gradOutput.getShape()),
                             " but the forward op produces ", expected[0], "x",
                             expected[1], " spatially");
  return success();
}

} // namespace

LogicalResult Conv2DOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  using Op = Conv2DOp;
  auto input = nchwOf(rankedOf(adaptor.getInput()), adaptor.getChannelsLast());
  // An OHWI filter is checked as the OIHW one it holds (the same permutation).
  auto filter = nchwOf(rankedOf(adaptor.getFilter()), adaptor.getFilterOhwi());
  if (!input || !filter)
    return inferError<Op>(loc, "expects ranked tensor operands");
  if (input.getRank() != 4)
    return inferError<Op>(loc, "expects an NCHW input of rank 4, got rank ",
                          input.getRank());
  if (filter.getRank() != 4)
    return inferError<Op>(loc, "expects an OIHW filter of rank 4, got rank ",
                          filter.getRank());
  if (input.getElementType() != filter.getElementType())
    return inferError<Op>(loc, "input element type ", input.getElementType(),
                          " differs from filter element type ",
                          filter.getElementType());
  FailureOr<ConvGeometry> geometry = getConvGeometry<Op>(loc, adaptor);
  if (failed(geometry))
    return failure();
  int64_t groups = geometry->groups;
  int64_t channels = input.getDimSize(1);
  int64_t outChannels = filter.getDimSize(0);
  if (isStatic(outChannels) && outChannels % groups != 0)
    return inferError<Op>(loc, "output channels (", outChannels,
                          ") must be divisible by groups (", groups, ")");
  if (isStatic(channels) && channels % groups != 0)
    return inferError<Op>(loc, "input channels (", channels,
                          ") must be divisible by groups (", groups, ")");
  if (isStatic(channels) && extentsConflict(filter.getDimSize(1), channels / groups))
    return inferError<Op>(loc, "filter expects ", filter.getDimSize(1),
                          " input channels per group but the input has ", channels,
                          " channels in ", groups, " group(s)");
  if (auto bias = rankedOf(adaptor.getBias())) {
    if (bias.getRank() != 1 || extentsConflict(bias.getDimSize(0), outChannels))
      return inferError<Op>(loc, "expects a bias of shape [", outChannels,
                            "], got ", shapeString(bias.getShape()));
    if (bias.getElementType() != input.getElementType())
      return inferError<Op>(loc, "bias element type ", bias.getElementType(),
                            " differs from input element type ",
                            input.getElementType());
  }

  FailureOr<SmallVector<int64_t, 2>> spatial = convOutputSpatial<Op>(
      loc, input.getShape().drop_front(2), filter.getShape().drop_front(2), *geometry);
  if (failed(spatial))
    return failure();
  types.push_back(storedOf(
      RankedTensorType::get({input.getDimSize(0), outChannels, (*spatial)[0], (*spatial)[1]},
                            input.getElementType()),
      adaptor.getChannelsLast()));
  return success();
}

LogicalResult Conv2DBackwardDataOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
    SmallVectorImpl<Type> &types) {
  using Op = Conv2DBackwardDataOp;
  auto dy = nchwOf(rankedOf(adaptor.getGradOutput()), adaptor.getChannelsLast());
  auto filter = nchwOf(rankedOf(adaptor.getFilter()), adaptor.getFilterOhwi());
  if (!dy || !filter || dy.getRank() != 4 || filter.getRank() != 4)
    return inferError<Op>(loc, "expects a rank-4 grad_output and a rank-4 filter");
  if (dy.getElementType() != filter.getElementType())
    return inferError<Op>(loc, "grad_output and filter element types differ");
  ArrayRef<int64_t> inputHW = adaptor.getInputSize();
  if (failed(checkWindowAttr<Op>(loc, "input_size", inputHW, 2, 1)))
    return failure();
  FailureOr<ConvGeometry> g = getConvGeometry<Op>(loc, adaptor);
  if (failed(g))
    return failure();
  if (extentsConflict(dy.getDimSize(1), filter.getDimSize(0)))
    return inferError<Op>(loc, "grad_output has ", dy.getDimSize(1),
                          " channels but the filter ", filter.getDimSize(0),
                          " outputs");
  if (isStatic(filter.getDimSize(0)) && filter.getDimSize(0) % g->groups != 0)
    return inferError<Op>(loc, "output channels (", filter.getDimSize(0),
                          ") must be divisible by groups (", g->groups, ")");
  FailureOr<SmallVector<int64_t, 2>> spatial =
      convOutputSpatial<Op>(loc, inputHW, filter.getShape().drop_front(2), *g);
  if (failed(spatial) || failed(checkGradOutputSpatial<Op>(loc, *spatial, dy)))
    return failure();
  int64_t channels = isStatic(filter.getDimSize(1))
                         ? filter.getDimSize(1) * g->groups
                         : kDynamic;
  types.push_back(storedOf(RankedTensorType::get({dy.getDimSize(0), channels, inputHW[0],
                                                   inputHW[1]},
                                                  dy.getElementType()),
                           adaptor.getChannelsLast()));
  return success();
}

LogicalResult Conv2DBackwardFilterOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
    SmallVectorImpl<Type> &types) {
  using Op = Conv2DBackwardFilterOp;
  auto input = nchwOf(rankedOf(adaptor.getInput()), adaptor.getChannelsLast());
  auto dy = nchwOf(rankedOf(adaptor.getGradOutput()), adaptor.getChannelsLast());
  if (!input || !dy || input.getRank() != 4 || dy.getRank() != 4)
    return inferError<Op>(loc, "expects a rank-4 input and a rank-4 grad_output");
  if (input.getElementType() != dy.getElementType())
    return inferError<Op>(loc, "input and grad_output element types differ");
  ArrayRef<int64_t> kernel = adaptor.getKernelSize();
  if (failed(checkWindowAttr<Op>(loc, "kernel_size", kernel, 2, 1)))
    return failure();
  FailureOr<ConvGeometry> g = getConvGeometry<Op>(loc, adaptor);
  if (failed(g))
    return failure();
  if (extentsConflict(input.getDimSize(0), dy.getDimSize(0)))
    return inferError<Op>(loc, "input and grad_output batch sizes differ");
  int64_t channels = input.getDimSize(1), outChannels = dy.getDimSize(1);
  if ((isStatic(channels) && channels % g->groups != 0) ||
      (isStatic(outChannels) && outChannels % g->groups != 0))
    return inferError<Op>(loc, "groups (", g->groups,
                          ") must divide input and output channels (", channels,
                          ", ", outChannels, ")");
  FailureOr<SmallVector<int64_t, 2>> spatial = convOutputSpatial<Op>(
      loc, input.getShape().drop_front(2), kernel, *g);
  if (failed(spatial) || failed(checkGradOutputSpatial<Op>(loc, *spatial, dy)))
    return failure();
  types.push_back(storedOf(
      RankedTensorType::get(
          {outChannels, isStatic(channels) ? channels / g->groups : kDynamic, kernel[0],
           kernel[1]},
          input.getElementType()),
      adaptor.getFilterOhwi()));
  return success();
}

//===----------------------------------------------------------------------===//
// BatchNormOp
//===----------------------------------------------------------------------===//

LogicalResult BatchNormOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  using Op = BatchNormOp;
  auto input = rankedOf(adaptor.getInput());
  auto scale = rankedOf(adaptor.getScale());
  if (!input || !scale)
    return inferError<Op>(loc, "expects ranked tensor operands");
  if (input.getRank() != 2 && input.getRank() != 4)
    return inferError<Op>(loc, "expects an NC or NCHW input, got rank ",
                          input.getRank());
  int64_t channels = input.getDimSize(1);
  if (scale.getRank() != 1 || extentsConflict(scale.getDimSize(0), channels))
    return inferError<Op>(loc, "expects per-channel parameters of shape [", channels,
                          "], got ", shapeString(scale.getShape()));
  Type element = input.getElementType();
  if (scale.getElementType() != element && !scale.getElementType().isF32())
    return inferError<Op>(loc, "parameters must be ", element, " or f32, got ",
                          scale.getElementType());
  types.push_back(input);
  return success();
}

LogicalResult BatchNormOp::verify() {
  double epsilon = getEpsilon().convertToDouble();
  double momentum = getMomentum().convertToDouble();
  if (!(epsilon > 0.0))
    return emitOpError("expects epsilon > 0, got ") << str(epsilon);
  if (!(momentum >= 0.0 && momentum <= 1.0))
    return emitOpError("expects momentum in [0, 1], got ") << str(momentum);
  return success();
}

//===----------------------------------------------------------------------===//
// Pooling
//===----------------------------------------------------------------------===//

/// The output type of pooling `input` (checked to be NCHW) with a window.
template <typename OpT>
static FailureOr<RankedTensorType>
inferPoolType(std::optional<Location> loc, RankedTensorType input,
              ArrayRef<int64_t> window, std::optional<ArrayRef<int64_t>> stridesAttr,
              std::optional<ArrayRef<int64_t>> paddingAttr) {
  if (!input)
    return inferError<OpT>(loc, "expects a ranked tensor operand");
  if (input.getRank() != 4)
    return inferError<OpT>(loc, "expects an NCHW input of rank 4, got rank ",
                           input.getRank());
  if (failed(checkWindowAttr<OpT>(loc, "window", window, 2, 1)))
    return failure();
  ArrayRef<int64_t> strides = stridesAttr ? *stridesAttr : window;
  ArrayRef<int64_t> padding = paddingAttr ? *paddingAttr : ArrayRef<int64_t>(kNoPadding);
  if (failed(checkWindowAttr<OpT>(loc, "strides", strides, 2, 1)) ||
      failed(checkWindowAttr<OpT>(loc, "padding", padding, 4, 0)))
    return failure();
  SmallVector<int64_t, 4> shape = {input.getDimSize(0), input.getDimSize(1)};
  for (int i = 0; i < 2; ++i) {
    if (padding[2 * i] > window[i] / 2 || padding[2 * i + 1] > window[i] / 2)
      return inferError<OpT>(loc, "padding must be at most half the window (",
                             window[i], ") on each side");
    int64_t size = slidingWindowOutputSize(input.getDimSize(2 + i), window[i],
                                           strides[i], padding[2 * i],
                                           padding[2 * i + 1]);
    if (isStatic(size) && size < 1)
      return inferError<OpT>(loc, "the ", window[i], "-wide window does not fit the "
                             "padded ", i == 0 ? "height" : "width", " ",
                             input.getDimSize(2 + i) + padding[2 * i] +
                                 padding[2 * i + 1]);
    if (size > kMaxElements)
      return inferError<OpT>(loc, "output extent exceeds 2^40");
    shape.push_back(size);
  }
  return RankedTensorType::get(shape, input.getElementType());
}

template <typename OpT>
static LogicalResult inferPool2D(std::optional<Location> loc,
                                 typename OpT::Adaptor adaptor,
                                 SmallVectorImpl<Type> &types) {
  const bool nhwc = adaptor.getChannelsLast();
  FailureOr<RankedTensorType> type =
      inferPoolType<OpT>(loc, nchwOf(rankedOf(adaptor.getInput()), nhwc), adaptor.getWindow(),
                         adaptor.getStrides(), adaptor.getPadding());
  if (failed(type))
    return failure();
  types.push_back(storedOf(*type, nhwc));
  return success();
}

/// Checks that pooling `input` gives `gradOutput`'s shape.
template <typename OpT>
static LogicalResult checkPoolGradient(std::optional<Location> loc,
                                       RankedTensorType input,
                                       RankedTensorType gradOutput,
                                       typename OpT::Adaptor adaptor) {
  if (!gradOutput)
    return inferError<OpT>(loc, "expects a ranked grad_output");
  FailureOr<RankedTensorType> pooled = inferPoolType<OpT>(
      loc, input, adaptor.getWindow(), adaptor.getStrides(), adaptor.getPadding());
  if (failed(pooled))
    return failure();
  if (failed(verifyCompatibleShape(pooled->getShape(), gradOutput.getShape())) ||
      pooled->getElementType() != gradOutput.getElementType())
    return inferError<OpT>(loc, "grad_output ", gradOutput,
                           " does not match the forward output ", *pooled);
  return success();
}

LogicalResult MaxPool2DBackwardOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
    SmallVectorImpl<Type> &types) {
  const bool nhwc = adaptor.getChannelsLast();
  auto input = rankedOf(adaptor.getInput());
  if (failed(checkPoolGradient<MaxPool2DBackwardOp>(
          loc, nchwOf(input, nhwc), nchwOf(rankedOf(adaptor.getGradOutput()), nhwc),
          adaptor)))
    return failure();
  types.push_back(input);
  return success();
}

LogicalResult AvgPool2DBackwardOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
    SmallVectorImpl<Type> &types) {
  using Op = AvgPool2DBackwardOp;
  const bool nhwc = adaptor.getChannelsLast();
  auto dy = nchwOf(rankedOf(adaptor.getGradOutput()), nhwc);
  ArrayRef<int64_t> inputHW = adaptor.getInputSize();
  if (!dy || dy.getRank() != 4)
    return inferError<Op>(loc, "expects a rank-4 grad_output");
  if (failed(checkWindowAttr<Op>(loc, "input_size", inputHW, 2, 1)))
    return failure();
  auto input = RankedTensorType::get(
      {dy.getDimSize(0), dy.getDimSize(1), inputHW[0], inputHW[1]},
      dy.getElementType());
  if (failed(checkPoolGradient<Op>(loc, input, dy, adaptor)))
    return failure();
  types.push_back(storedOf(input, nhwc));
  return success();
}

#define GRAPHC_POOL_INFER(OpT)                                                  \
  LogicalResult OpT::inferReturnTypes(MLIRContext *, std::optional<Location> loc, \
                                      Adaptor adaptor,                          \
                                      SmallVectorImpl<Type> &types) {           \
    return inferPool2D<OpT>(loc, adaptor, types);                               \
  }
GRAPHC_POOL_INFER(MaxPool2DOp)
GRAPHC_POOL_INFER(AvgPool2DOp)
#undef GRAPHC_POOL_INFER

LogicalResult GlobalAvgPoolOp::inferReturnTypes(MLIRContext *,
                                                std::optional<Location> loc,
                                                Adaptor adaptor,
                                                SmallVectorImpl<Type> &types) {
  auto input = rankedOf(adaptor.getInput());
  if (!input || input.getRank() != 4)
    return inferError<GlobalAvgPoolOp>(loc, "expects an NCHW input of rank 4");
  if (input.getDimSize(2) == 0 || input.getDimSize(3) == 0)
    return inferError<GlobalAvgPoolOp>(loc, "cannot average an empty ",
                                       input.getDimSize(2), "x", input.getDimSize(3),
                                       " plane");
  types.push_back(RankedTensorType::get(
      {input.getDimSize(0), input.getDimSize(1)}, input.getElementType()));
  return success();
}

//===----------------------------------------------------------------------===//
// Shape ops
//===----------------------------------------------------------------------===//

LogicalResult TransposeOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  auto input = rankedOf(adaptor.getInput());
  if (!input)
    return inferError<TransposeOp>(loc, "expects a ranked tensor operand");
  ArrayRef<int64_t> perm = adaptor.getPermutation();
  if (static_cast<int64_t>(perm.size()) != input.getRank())
    return inferError<TransposeOp>(loc, "permutation has ", perm.size(),
                                   " entries for a rank-", input.getRank(), " input");
  SmallVector<bool> seen(perm.size(), false);
  SmallVector<int64_t> shape;
  for (int64_t p : perm) {
    if (p < 0 || p >= input.getRank() || seen[p])
      return inferError<TransposeOp>(loc, "permutation ", shapeString(perm),
                                     " is not a permutation of [0, ", input.getRank(), ")");
    seen[p] = true;
    shape.push_back(input.getDimSize(p));
  }
  types.push_back(input.clone(shape));
  return success();
}

LogicalResult ReshapeOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  auto input = rankedOf(adaptor.getInput());
  if (!input)
    return inferError<ReshapeOp>(loc, "expects a ranked tensor operand");
  SmallVector<int64_t> shape(adaptor.getShape());
  int64_t inferredDim = -1, known = 1;
  for (auto [i, size] : llvm::enumerate(shape)) {
    if (size == -1) {
      if (inferredDim >= 0)
        return inferError<ReshapeOp>(loc, "at most one 'shape' entry may be -1");
      inferredDim = i;
    } else if (size < 1) {
      return inferError<ReshapeOp>(loc, "'shape' entries must be positive or -1, got ",
                                   size);
    } else if (llvm::MulOverflow(known, size, known) || known > kMaxElements) {
      return inferError<ReshapeOp>(loc, "'shape' has more than 2^40 elements");
    }
  }
  if (input.hasStaticShape()) {
    int64_t total = input.getNumElements();
    if (inferredDim >= 0) {
      if (total % known != 0)
        return inferError<ReshapeOp>(loc, "cannot reshape ", total,
                                     " elements into ", shapeString(shape));
      shape[inferredDim] = total / known;
    } else if (known != total) {
      return inferError<ReshapeOp>(loc, "cannot reshape ", total, " elements into ",
                                   known);
    }
  } else if (inferredDim >= 0) {
    shape[inferredDim] = kDynamic;
  }
  types.push_back(RankedTensorType::get(shape, input.getElementType()));
  return success();
}

OpFoldResult ReshapeOp::fold(FoldAdaptor adaptor) {
  if (getInput().getType() == getType() && getType().hasStaticShape())
    return foldTo(*this, getInput());
  // reshape(reshape(x)) == reshape(x): only the final shape matters. With a
  // dynamic x the -1 of this reshape could infer differently, so only static.
  auto inner = getInput().getDefiningOp<ReshapeOp>();
  if (inner && inner != *this && inner.getInput().getType().hasStaticShape()) {
    getInputMutable().assign(inner.getInput());
    return getResult();
  }
  if (auto constant = llvm::dyn_cast_or_null<DenseElementsAttr>(adaptor.getInput()))
    if (getType().hasStaticShape())
      return constant.reshape(getType());
  return {};
}

LogicalResult FlattenOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  auto input = rankedOf(adaptor.getInput());
  if (!input)
    return inferError<FlattenOp>(loc, "expects a ranked tensor operand");
  int64_t start = static_cast<int64_t>(adaptor.getStartDim());
  if (start < 0 || start >= input.getRank())
    return inferError<FlattenOp>(loc, "'start_dim' ", start,
                                 " is out of range for rank ", input.getRank());
  SmallVector<int64_t> shape(input.getShape().take_front(start));
  ArrayRef<int64_t> tail = input.getShape().drop_front(start);
  int64_t collapsed = kDynamic;
  if (llvm::none_of(tail, ShapedType::isDynamic)) {
    std::optional<int64_t> product = boundedProduct(tail);
    if (!product)
      return inferError<FlattenOp>(loc, "the flattened dimension exceeds 2^40");
    collapsed = *product;
  }
  shape.push_back(collapsed);
  types.push_back(RankedTensorType::get(shape, input.getElementType()));
  return success();
}

OpFoldResult FlattenOp::fold(FoldAdaptor) {
  if (getInput().getType() == getType())
    return foldTo(*this, getInput());
  return {};
}

LogicalResult ConcatOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor, SmallVectorImpl<Type> &types) {
  using Op = ConcatOp;
  ValueRange inputs = adaptor.getInputs();
  if (inputs.empty())
    return inferError<Op>(loc, "expects at least one operand");
  auto first = rankedOf(inputs.front());
  if (!first)
    return inferError<Op>(loc, "expects ranked tensor operands");
  int64_t dim = adaptor.getDim(), rank = first.getRank();
  if (dim < 0 || dim >= rank)
    return inferError<Op>(loc, "'dim' ", dim, " is not in [0, ", rank, ")");
  SmallVector<int64_t> shape(first.getShape());
  shape[dim] = 0;
  for (auto [i, v] : llvm::enumerate(inputs)) {
    auto type = rankedOf(v);
    if (!type || type.getRank() != rank || type.getElementType() != first.getElementType())
      return inferError<Op>(loc, "operand ", i, " is not a rank-", rank, " tensor of ",
                            first.getElementType());
    if (dim == 0 && type.isDynamicDim(0))
      return inferError<Op>(loc, "joins along dim 0, the dynamic batch");
    for (int64_t d = 0; d < rank; ++d) {
      int64_t size = type.getDimSize(d);
      if (d == dim) {
        if (isStatic(shape[d]) && isStatic(size) &&
            (size > (int64_t{1} << 40) || shape[d] > (int64_t{1} << 40)))
          return inferError<Op>(loc, "the joined dim exceeds 2^40");
        shape[d] = isStatic(shape[d]) && isStatic(size) ? shape[d] + size : kDynamic;
      } else if (extentsConflict(shape[d], size)) {
        return inferError<Op>(loc, "operand ", i, " has shape ", shapeString(type.getShape()),
                              ", which differs from operand 0's ",
                              shapeString(first.getShape()), " outside dim ", dim);
      } else if (!isStatic(shape[d])) {
        shape[d] = size;
      }
    }
    if (isStatic(shape[dim]) && shape[dim] > (int64_t{1} << 40))
      return inferError<Op>(loc, "the joined dim exceeds 2^40");
  }
  types.push_back(first.clone(shape));
  return success();
}

OpFoldResult ConcatOp::fold(FoldAdaptor) {
  if (getInputs().size() == 1 && getInputs().front().getType() == getType())
    return foldTo(*this, getInputs().front());
  return {};
}

LogicalResult SliceOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                        Adaptor adaptor, SmallVectorImpl<Type> &types) {
  using Op = SliceOp;
  auto input = rankedOf(adaptor.getInput());
  if (!input)
    return inferError<Op>(loc, "expects a ranked tensor operand");
  int64_t dim = adaptor.getDim(), start = adaptor.getStart(), size = adaptor.getSize();
  if (dim < 0 || dim >= input.getRank())
    return inferError<Op>(loc, "'dim' ", dim, " is not in [0, ", input.getRank(), ")");
  int64_t extent = input.getDimSize(dim);
  if (!isStatic(extent))
    return inferError<Op>(loc, "dim ", dim, " of the input is dynamic");
  if (start < 0 || size < 1 || start > extent || size > extent - start)
    return inferError<Op>(loc, "[", start, ", ", start, " + ", size,
                          ") is not a non-empty window of dim ", dim, " (size ", extent, ")");
  SmallVector<int64_t> shape(input.getShape());
  shape[dim] = size;
  types.push_back(input.clone(shape));
  return success();
}

OpFoldResult SliceOp::fold(FoldAdaptor) {
  if (getInput().getType() == getType())
    return foldTo(*this, getInput());
  return {};
}

LogicalResult GatherOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor, SmallVectorImpl<Type> &types) {
  using Op = GatherOp;
  auto table = rankedOf(adaptor.getTable()), indices = rankedOf(adaptor.getIndices());
  if (!table || !indices)
    return inferError<Op>(loc, "expects ranked tensor operands");
  if (table.getRank() < 1 || !isStatic(table.getDimSize(0)))
    return inferError<Op>(loc, "expects a table whose dim 0 is static, got ",
                          shapeString(table.getShape()));
  if (indices.getRank() != 1 || !isStatic(indices.getDimSize(0)))
    return inferError<Op>(loc, "expects a static rank-1 index tensor, got ",
                          shapeString(indices.getShape()));
  SmallVector<int64_t> shape = {indices.getDimSize(0)};
  shape.append(table.getShape().begin() + 1, table.getShape().end());
  types.push_back(table.clone(shape));
  return success();
}

LogicalResult GatherOp::verify() {
  DenseIntElementsAttr indices;
  if (!matchPattern(getIndices(), m_Constant(&indices)))
    return success();
  const int64_t rows = getTable().getType().getDimSize(0);
  for (const APInt &index : indices)
    if (index.isNegative() || index.getSExtValue() >= rows)
      return emitOpError("index ") << index.getSExtValue() << " is not in [0, " << rows << ")";
  return success();
}

LogicalResult ScatterAddOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                             Adaptor adaptor, SmallVectorImpl<Type> &types) {
  using Op = ScatterAddOp;
  auto input = rankedOf(adaptor.getInput()), offsets = rankedOf(adaptor.getOffsets()),
       sources = rankedOf(adaptor.getSources());
  if (!input || !offsets || !sources)
    return inferError<Op>(loc, "expects ranked tensor operands");
  if (input.getRank() < 1)
    return inferError<Op>(loc, "expects an input of rank 1 or more");
  if (offsets.getRank() != 1 || !isStatic(offsets.getDimSize(0)) || offsets.getDimSize(0) < 2 ||
      sources.getRank() != 1 || !isStatic(sources.getDimSize(0)))
    return inferError<Op>(loc, "expects static rank-1 offsets (2 or more) and sources, got ",
                          shapeString(offsets.getShape()), " and ",
                          shapeString(sources.getShape()));
  SmallVector<int64_t> shape = {offsets.getDimSize(0) - 1};
  shape.append(input.getShape().begin() + 1, input.getShape().end());
  types.push_back(input.clone(shape));
  return success();
}

LogicalResult ScatterAddOp::verify() {
  DenseIntElementsAttr offsets, sources;
  const int64_t count = getSources().getType().getDimSize(0);
  if (matchPattern(getOffsets(), m_Constant(&offsets))) {
    int64_t previous = 0;
    for (auto [i, offset] : llvm::enumerate(offsets.getValues<int32_t>())) {
      if ((i == 0 && offset != 0) || offset < previous || offset > count)
        return emitOpError("offsets must rise from 0 to ") << count << ", got " << offset
                                                            << " at " << i;
      previous = offset;
    }
    if (previous != count)
      return emitOpError("offsets must end at ") << count << ", got " << previous;
  }
  const int64_t rows = getInput().getType().getDimSize(0);
  if (isStatic(rows) && matchPattern(getSources(), m_Constant(&sources)))
    for (int32_t source : sources.getValues<int32_t>())
      if (source < 0 || source >= rows)
        return emitOpError("source ") << source << " is not in [0, " << rows << ")";
  return success();
}

//===----------------------------------------------------------------------===//
// Dense layers
//===----------------------------------------------------------------------===//

LogicalResult LinearOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  using Op = LinearOp;
  auto input = rankedOf(adaptor.getInput());
  auto weight = rankedOf(adaptor.getWeight());
  if (!input || !weight)
    return inferError<Op>(loc, "expects ranked tensor operands");
  if (input.getRank() != 2 || weight.getRank() != 2)
    return inferError<Op>(loc, "expects a [N, in] input and an [out, in] weight, got ",
                          shapeString(input.getShape()), " and ",
                          shapeString(weight.getShape()));
  if (extentsConflict(input.getDimSize(1), weight.getDimSize(1)))
    return inferError<Op>(loc, "input features (", input.getDimSize(1),
                          ") differ from weight input features (",
                          weight.getDimSize(1), ")");
  if (input.getElementType() != weight.getElementType())
    return inferError<Op>(loc, "input element type ", input.getElementType(),
                          " differs from weight element type ",
                          weight.getElementType());
  if (auto bias = rankedOf(adaptor.getBias())) {
    if (bias.getRank() != 1 || extentsConflict(bias.getDimSize(0), weight.getDimSize(0)))
      return inferError<Op>(loc, "expects a bias of shape [", weight.getDimSize(0),
                            "], got ", shapeString(bias.getShape()));
    if (bias.getElementType() != input.getElementType())
      return inferError<Op>(loc, "bias element type ", bias.getElementType(),
                            " differs from input element type ",
                            input.getElementType());
  }
  types.push_back(RankedTensorType::get(
      {input.getDimSize(0), weight.getDimSize(0)}, input.getElementType()));
  return success();
}

LogicalResult OrthonormalizeOp::verify() {
  auto type = llvm::cast<RankedTensorType>(getInput().getType());
  if (type.getRank() != 2 || !type.hasStaticShape() || !type.getElementType().isF32())
    return emitOpError("expects a static rank-2 f32 tensor, got ") << type;
  if (type.getDimSize(0) < 1 || type.getDimSize(0) > type.getDimSize(1))
    return emitOpError("expects 1 <= rows <= columns, got ") << type;
  return success();
}

LogicalResult TopkSelectOp::verify() {
  auto input = llvm::cast<RankedTensorType>(getInput().getType());
  auto values = llvm::cast<RankedTensorType>(getValues().getType());
  auto indices = llvm::cast<RankedTensorType>(getIndices().getType());
  if (!input.hasStaticShape() || !input.getElementType().isF32() ||
      input.getNumElements() >= (int64_t{1} << 31))
    return emitOpError("expects a static f32 input of under 2^31 elements, got ") << input;
  if (values.getRank() != 1 || !values.getElementType().isF32() || indices.getRank() != 1 ||
      !indices.getElementType().isInteger(32) || values.getShape() != indices.getShape() ||
      values.getDimSize(0) < 1 || values.getDimSize(0) > input.getNumElements())
    return emitOpError("expects values tensor<Kxf32> and indices tensor<Kxi32> with 1 <= K <= ")
           << input.getNumElements() << ", got " << values << " and " << indices;
  return success();
}

LogicalResult ZeroAtOp::verify() {
  auto input = llvm::cast<RankedTensorType>(getInput().getType());
  auto indices = llvm::cast<RankedTensorType>(getIndices().getType());
  if (!input.hasStaticShape() || !input.getElementType().isF32() ||
      input.getNumElements() >= (int64_t{1} << 31))
    return emitOpError("expects a static f32 input of under 2^31 elements, got ") << input;
  if (indices.getRank() != 1 || !indices.hasStaticShape() ||
      !indices.getElementType().isInteger(32))
    return emitOpError("expects indices tensor<Kxi32>, got ") << indices;
  return success();
}

LogicalResult MatmulOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  using Op = MatmulOp;
  auto lhs = rankedOf(adaptor.getLhs());
  auto rhs = rankedOf(adaptor.getRhs());
  if (!lhs || !rhs)
    return inferError<Op>(loc, "expects ranked tensor operands");
  int64_t rank = lhs.getRank();
  if ((rank != 2 && rank != 3) || rhs.getRank() != rank)
    return inferError<Op>(loc, "expects two operands of rank 2, or two of rank 3 "
                          "(batched), got ", lhs.getRank(), " and ", rhs.getRank());
  if (lhs.getElementType() != rhs.getElementType())
    return inferError<Op>(loc, "operand element types differ: ", lhs.getElementType(),
                          " and ", rhs.getElementType());
  SmallVector<int64_t> shape;
  if (rank == 3) {
    if (extentsConflict(lhs.getDimSize(0), rhs.getDimSize(0)))
      return inferError<Op>(loc, "batch dimensions differ: ", lhs.getDimSize(0),
                            " and ", rhs.getDimSize(0));
    shape.push_back(isStatic(lhs.getDimSize(0)) ? lhs.getDimSize(0)
                                                : rhs.getDimSize(0));
  }
  int64_t m = lhs.getDimSize(rank - 2), k = lhs.getDimSize(rank - 1);
  if (adaptor.getTransposeA())
    std::swap(m, k);
  int64_t k2 = rhs.getDimSize(rank - 2), n = rhs.getDimSize(rank - 1);
  if (adaptor.getTransposeB())
    std::swap(k2, n);
  if (extentsConflict(k, k2))
    return inferError<Op>(loc, "contraction dimensions differ: ", k, " and ", k2);
  shape.append({m, n});
  types.push_back(RankedTensorType::get(shape, lhs.getElementType()));
  return success();
}

/// The shapes of attention's operands: [G, Lq, D], [G, Lk, D] (or [G, D, Lk]
/// transposed) and [G, Lk, Dv], static and of one element type (f32, f16 or
/// bf16); its [G, Lq, Dv] output.
template <typename OpT>
static FailureOr<SmallVector<int64_t>>
attentionShape(std::optional<Location> loc, Value qv, Value kv, Value vv, bool transposeK) {
  auto q = rankedOf(qv), k = rankedOf(kv), v = rankedOf(vv);
  if (!q || !k || !v || q.getRank() != 3 || k.getRank() != 3 || v.getRank() != 3 ||
      !q.hasStaticShape() || !k.hasStaticShape() || !v.hasStaticShape())
    return inferError<OpT>(loc, "expects static q, k and v of rank 3");
  Type element = q.getElementType();
  if (!(element.isF32() || element.isF16() || element.isBF16()) ||
      k.getElementType() != element || v.getElementType() != element)
    return inferError<OpT>(loc, "expects q, k and v all f32, all f16 or all bf16, got ",
                           q.getElementType(), ", ", k.getElementType(), " and ",
                           v.getElementType());
  const int64_t g = q.getDimSize(0), d = q.getDimSize(2);
  const int64_t lk = k.getDimSize(transposeK ? 2 : 1), kd = k.getDimSize(transposeK ? 1 : 2);
  if (k.getDimSize(0) != g || v.getDimSize(0) != g || kd != d || v.getDimSize(1) != lk)
    return inferError<OpT>(loc, "q ", shapeString(q.getShape()), ", k ",
                           shapeString(k.getShape()), (transposeK ? " (transposed)" : ""),
                           " and v ", shapeString(v.getShape()), " do not fit");
  return SmallVector<int64_t>{g, q.getDimSize(1), v.getDimSize(2)};
}

/// Attention's biases: as many as `strides`, each a static f32 [P, Lq, Lk]
/// with P >= 1, every stride >= 1; the shape holds G, Lq and Dv.
template <typename OpT>
static LogicalResult attentionBiases(std::optional<Location> loc, ArrayRef<int64_t> shape,
                                     int64_t keys, ValueRange biases,
                                     std::optional<ArrayRef<int64_t>> strides) {
  const size_t count = strides ? strides->size() : 0;
  if (biases.size() != count)
    return inferError<OpT>(loc, "has ", biases.size(), " biases and ", count, " bias strides");
  for (auto [i, bias] : llvm::enumerate(biases)) {
    auto type = rankedOf(bias);
    if (!type || !type.hasStaticShape() || type.getRank() != 3 ||
        !type.getElementType().isF32() || type.getDimSize(0) < 1 ||
        type.getDimSize(1) != shape[1] || type.getDimSize(2) != keys)
      return inferError<OpT>(loc, "expects bias ", i, " to be a static f32 [P, ", shape[1], ", ",
                             keys, "], got ", bias.getType());
    if ((*strides)[i] < 1)
      return inferError<OpT>(loc, "expects bias strides >= 1, got ", (*strides)[i]);
  }
  return success();
}

/// The keys attention's k holds.
static int64_t attentionKeys(Value k, bool transposeK) {
  return llvm::cast<RankedTensorType>(k.getType()).getDimSize(transposeK ? 2 : 1);
}

LogicalResult AttentionOp::inferReturnTypes(MLIRContext *context, std::optional<Location> loc,
                                            Adaptor adaptor, SmallVectorImpl<Type> &types) {
  auto shape = attentionShape<AttentionOp>(loc, adaptor.getQ(), adaptor.getK(), adaptor.getV(),
                                           adaptor.getTransposeK());
  if (failed(shape) ||
      failed(attentionBiases<AttentionOp>(
          loc, *shape, attentionKeys(adaptor.getK(), adaptor.getTransposeK()),
          adaptor.getBiases(), adaptor.getBiasStrides())))
    return failure();
  // The output in q's precision; the log-sum-exp always f32.
  Type f32 = Float32Type::get(context);
  types.push_back(RankedTensorType::get(
      *shape, llvm::cast<RankedTensorType>(adaptor.getQ().getType()).getElementType()));
  types.push_back(RankedTensorType::get({(*shape)[0], (*shape)[1]}, f32));
  return success();
}

LogicalResult AttentionBackwardOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                                    Adaptor adaptor,
                                                    SmallVectorImpl<Type> &types) {
  using Op = AttentionBackwardOp;
  auto shape = attentionShape<Op>(loc, adaptor.getQ(), adaptor.getK(), adaptor.getV(),
                                  adaptor.getTransposeK());
  if (failed(shape) ||
      failed(attentionBiases<Op>(loc, *shape,
                                 attentionKeys(adaptor.getK(), adaptor.getTransposeK()),
                                 adaptor.getBiases(), adaptor.getBiasStrides())))
    return failure();
  auto o = rankedOf(adaptor.getOutput()), dy = rankedOf(adaptor.getGradOutput()),
       lse = rankedOf(adaptor.getLse());
  Type element = llvm::cast<RankedTensorType>(adaptor.getQ().getType()).getElementType();
  if (!o || !dy || !lse || o.getShape() != ArrayRef(*shape) || dy.getShape() != o.getShape() ||
      lse.getShape() != ArrayRef(*shape).take_front(2) || o.getElementType() != element ||
      dy.getElementType() != element || !lse.getElementType().isF32())
    return inferError<Op>(loc, "expects the forward's output (in q's element type) and f32 "
                               "lse, and an output gradient of the output's shape and type");
  for (Value v : {adaptor.getQ(), adaptor.getK(), adaptor.getV()})
    types.push_back(v.getType());
  for (Value bias : adaptor.getBiases())
    types.push_back(bias.getType());
  return success();
}

//===----------------------------------------------------------------------===//
// Dropout and loss
//===----------------------------------------------------------------------===//

static LogicalResult verifyRate(Operation *op, const APFloat &value) {
  double rate = value.convertToDouble();
  if (!(rate >= 0.0 && rate < 1.0))
    return op->emitOpError("expects a rate in [0, 1), got ") << str(rate);
  return success();
}

LogicalResult DropoutOp::verify() { return verifyRate(*this, getRate()); }

OpFoldResult DropoutOp::fold(FoldAdaptor) {
  if (getRate().isZero())
    return foldTo(*this, getInput());
  return {};
}

template <typename OpT>
static LogicalResult checkLogitsAndLabels(std::optional<Location> loc,
                                         RankedTensorType logits,
                                         RankedTensorType labels) {
  if (!logits || !labels)
    return inferError<OpT>(loc, "expects ranked tensor operands");
  if (logits.getRank() != 2 || !llvm::isa<FloatType>(logits.getElementType()))
    return inferError<OpT>(loc, "expects float logits of shape [N, classes], got ",
                           logits);
  if (logits.getDimSize(1) == 0)
    return inferError<OpT>(loc, "expects at least one class");
  if (labels.getRank() != 1)
    return inferError<OpT>(loc, "expects labels of shape [N], got rank ",
                           labels.getRank());
  if (!labels.getElementType().isSignlessInteger(32) &&
      !labels.getElementType().isSignlessInteger(64))
    return inferError<OpT>(loc, "expects i32 or i64 class-index labels, got ",
                           labels.getElementType());
  if (extentsConflict(logits.getDimSize(0), labels.getDimSize(0)))
    return inferError<OpT>(loc, "batch of logits (", logits.getDimSize(0),
                           ") differs from batch of labels (", labels.getDimSize(0),
                           ")");
  return success();
}

static LogicalResult verifySmoothing(Operation *op, const APFloat &value) {
  double smoothing = value.convertToDouble();
  if (!(smoothing >= 0.0 && smoothing < 1.0))
    return op->emitOpError("expects label_smoothing in [0, 1), got ") << str(smoothing);
  return success();
}

LogicalResult SoftmaxCrossEntropyOp::inferReturnTypes(
    MLIRContext *context, std::optional<Location> loc, Adaptor adaptor,
    SmallVectorImpl<Type> &types) {
  if (failed(checkLogitsAndLabels<SoftmaxCrossEntropyOp>(
          loc, rankedOf(adaptor.getLogits()), rankedOf(adaptor.getLabels()))))
    return failure();
  types.push_back(RankedTensorType::get({}, Float32Type::get(context)));
  return success();
}

LogicalResult SoftmaxCrossEntropyBackwardOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
    SmallVectorImpl<Type> &types) {
  auto logits = rankedOf(adaptor.getLogits());
  if (failed(checkLogitsAndLabels<SoftmaxCrossEntropyBackwardOp>(
          loc, logits, rankedOf(adaptor.getLabels()))))
    return failure();
  types.push_back(logits);
  return success();
}

LogicalResult SoftmaxCrossEntropyBackwardOp::verify() {
  return verifySmoothing(*this, getLabelSmoothing());
}

LogicalResult SoftmaxCrossEntropyOp::verify() {
  return verifySmoothing(*this, getLabelSmoothing());
}

//===----------------------------------------------------------------------===//
// Training-step ops
//===----------------------------------------------------------------------===//

LogicalResult DropoutMaskOp::inferReturnTypes(MLIRContext *,
                                              std::optional<Location> loc,
                                              Adaptor adaptor,
                                              SmallVectorImpl<Type> &types) {
  auto like = rankedOf(adaptor.getShapeOf());
  if (!like)
    return inferError<DropoutMaskOp>(loc, "expects a ranked tensor operand");
  types.push_back(like);
  return success();
}

LogicalResult DropoutMaskOp::verify() { return verifyRate(*this, getRate()); }

LogicalResult ArgmaxOp::inferReturnTypes(MLIRContext *context,
                                         std::optional<Location> loc, Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  auto input = rankedOf(adaptor.getInput());
  if (!input)
    return inferError<ArgmaxOp>(loc, "expects a ranked tensor operand");
  int64_t dim = static_cast<int64_t>(adaptor.getDim());
  if (dim < 0 || dim >= input.getRank())
    return inferError<ArgmaxOp>(loc, "'dim' ", dim, " is out of range for rank ",
                                input.getRank());
  SmallVector<int64_t> shape(input.getShape());
  shape.erase(shape.begin() + dim);
  types.push_back(RankedTensorType::get(shape, IntegerType::get(context, 64)));
  return success();
}

LogicalResult LrScheduleOp::verify() {
  double base = getBaseLr().convertToDouble();
  if (!(base > 0.0))
    return emitOpError("expects base_lr > 0, got ") << str(base);
  if (static_cast<int64_t>(getWarmupSteps()) < 0)
    return emitOpError("expects warmup_steps >= 0, got ")
           << static_cast<int64_t>(getWarmupSteps());
  switch (getDecay()) {
  case LrDecay::constant:
    return success();
  case LrDecay::cosine: {
    double final = getFinalLr().convertToDouble();
    if (static_cast<int64_t>(getTotalSteps()) <= static_cast<int64_t>(getWarmupSteps()))
      return emitOpError("cosine decay needs total_steps > warmup_steps, got ")
             << static_cast<int64_t>(getTotalSteps()) << " and "
             << static_cast<int64_t>(getWarmupSteps());
    if (!(final >= 0.0 && final <= base))
      return emitOpError("expects final_lr in [0, base_lr], got ") << str(final);
    return success();
  }
  case LrDecay::step: {
    double gamma = getGamma().convertToDouble();
    if (static_cast<int64_t>(getStepSize()) < 1)
      return emitOpError("step decay needs step_size >= 1, got ")
             << static_cast<int64_t>(getStepSize());
    if (!(gamma > 0.0 && gamma <= 1.0))
      return emitOpError("step decay needs gamma in (0, 1], got ") << str(gamma);
    return success();
  }
  }
  return success();
}

/// An optimizer op's parameter type, then `, type` of its gradient when that
/// differs (a half-precision gradient of an f32 parameter).
static ParseResult parseOptimizerTypes(OpAsmParser &parser, Type &param, Type &grad) {
  if (parser.parseType(param))
    return failure();
  grad = param;
  if (succeeded(parser.parseOptionalComma()))
    return parser.parseType(grad);
  return success();
}

static void printOptimizerTypes(OpAsmPrinter &printer, Operation *, Type param, Type grad) {
  printer << param;
  if (grad != param)
    printer << ", " << grad;
}

/// Rules shared by the optimizer ops.
static LogicalResult verifyOptimizer(Operation *op, std::optional<APFloat> momentum,
                                     const APFloat &weightDecay) {
  auto param = llvm::cast<RankedTensorType>(op->getOperand(0).getType());
  auto grad = llvm::cast<RankedTensorType>(op->getOperand(1).getType());
  if (grad.getShape() != param.getShape() ||
      grad.getElementType().getIntOrFloatBitWidth() >
          param.getElementType().getIntOrFloatBitWidth())
    return op->emitOpError("expects a gradient of the parameter's shape and at most its "
                           "width, got ")
           << grad << " for " << param;
  if (momentum) {
    double m = momentum->convertToDouble();
    if (!(m >= 0.0 && m < 1.0))
      return op->emitOpError("expects momentum in [0, 1), got ") << str(m);
  }
  double wd = weightDecay.convertToDouble();
  if (!(wd >= 0.0))
    return op->emitOpError("expects weight_decay >= 0, got ") << str(wd);
  return success();
}

LogicalResult SgdOp::verify() {
  return verifyOptimizer(*this, std::nullopt, getWeightDecay());
}

LogicalResult SgdMomentumOp::verify() {
  if (failed(verifyOptimizer(*this, getMomentum(), getWeightDecay())))
    return failure();
  if (getNesterov() && getMomentum().isZero())
    return emitOpError("Nesterov momentum needs momentum > 0");
  return success();
}

LogicalResult LarsOp::verify() {
  if (failed(verifyOptimizer(*this, getMomentum(), getWeightDecay())))
    return failure();
  double eta = getEta().convertToDouble();
  if (!(eta > 0.0))
    return emitOpError("expects eta > 0, got ") << str(eta);
  return success();
}

LogicalResult AdamOp::verify() {
  if (failed(verifyOptimizer(*this, std::nullopt, getWeightDecay())))
    return failure();
  for (auto [name, beta] : {std::pair{"beta1", getBeta1()}, std::pair{"beta2", getBeta2()}}) {
    double v = beta.convertToDouble();
    if (!(v >= 0.0 && v < 1.0))
      return emitOpError("expects ") << name << " in [0, 1), got " << str(v);
  }
  double eps = getEpsilon().convertToDouble();
  if (!(eps > 0.0))
    return emitOpError("expects epsilon > 0, got ") << str(eps);
  return success();
}

/// The f32 result of a multi-tensor pass over `inputs` (nn.nonfinite_flags,
/// nn.sum_squares): one value per lane of every chunk of every input.
template <typename OpT>
static LogicalResult inferLanes(MLIRContext *context, std::optional<Location> loc,
                                ValueRange inputs, SmallVectorImpl<Type> &types) {
  int64_t lanes = 0;
  for (Value input : inputs) {
    auto type = rankedOf(input);
    if (!type || !type.hasStaticShape())
      return inferError<OpT>(loc, "expects operands of static shapes");
    lanes += NonfiniteFlagsOp::chunksOf(type.getNumElements()) * NonfiniteFlagsOp::kLanes;
  }
  types.push_back(RankedTensorType::get({lanes}, Float32Type::get(context)));
  return success();
}

LogicalResult NonfiniteFlagsOp::inferReturnTypes(MLIRContext *context,
                                                 std::optional<Location> loc,
                                                 Adaptor adaptor,
                                                 SmallVectorImpl<Type> &types) {
  return inferLanes<NonfiniteFlagsOp>(context, loc, adaptor.getInputs(), types);
}

LogicalResult NonfiniteFlagsOp::verify() {
  if (getInputs().empty())
    return emitOpError("needs at least one operand");
  return success();
}

LogicalResult SumSquaresOp::inferReturnTypes(MLIRContext *context, std::optional<Location> loc,
                                             Adaptor adaptor, SmallVectorImpl<Type> &types) {
  return inferLanes<SumSquaresOp>(context, loc, adaptor.getInputs(), types);
}

LogicalResult SumSquaresOp::verify() {
  if (getInputs().empty())
    return emitOpError("needs at least one operand");
  return success();
}

//===----------------------------------------------------------------------===//
// Fusion
//===----------------------------------------------------------------------===//

bool graphc::nn::isFusibleElementwise(Operation *op) {
  return isa<ReluOp, NegOp, ExpOp, LogOp, RsqrtOp, SigmoidOp, ErfOp, AddOp, SubOp, MulOp, DivOp,
             MaxOp, SelectOp, CmpOp, CastOp>(op);
}

bool graphc::nn::readsShapeOnly(OpOperand &use) {
  if (isa<BroadcastOp>(use.getOwner()))
    return use.getOperandNumber() == 1;
  if (auto fusion = dyn_cast<FusionOp>(use.getOwner()))
    return !fusion.isInputRead(use.getOperandNumber());
  return false;
}

bool FusionOp::isInputRead(unsigned i) {
  return llvm::any_of(getBody().front().getArgument(i).getUses(), [](OpOperand &use) {
    return !isa<BroadcastOp>(use.getOwner()) || use.getOperandNumber() == 0;
  });
}

/// The body of an nn.fusion / nn.multi_tensor takes one argument per input,
/// of its type.
static FailureOr<YieldOp> verifyGroupBody(Operation *op, ValueRange inputs, Block &body) {
  if (body.getNumArguments() != inputs.size())
    return op->emitOpError("has ") << inputs.size() << " inputs but its body takes "
                                   << body.getNumArguments();
  for (auto [input, arg] : llvm::zip(inputs, body.getArguments()))
    if (input.getType() != arg.getType())
      return op->emitOpError("body argument ")
             << arg.getArgNumber() << " is " << arg.getType() << ", its input is "
             << input.getType();
  auto yield = llvm::dyn_cast<YieldOp>(body.getTerminator());
  if (!yield)
    return op->emitOpError("body must end with nn.yield");
  if (yield.getValues().getTypes() != op->getResultTypes())
    return op->emitOpError("yields ") << yield.getValues().getTypes().size()
                                      << " values whose types differ from the results";
  return yield;
}

/// A reduction an nn.fusion may end in.
static bool isFusionReduction(Operation *op) {
  return isa_and_nonnull<ReduceSumOp, ReduceMeanOp>(op);
}

ArrayRef<int64_t> FusionOp::getIterationShape() {
  for (Operation &op : getBody().front().without_terminator())
    if (!isFusionReduction(&op) && !isViewOp(&op) && !isViewStart(&op))
      return llvm::cast<RankedTensorType>(op.getResult(0).getType()).getShape();
  // Only views and reductions: what the reductions read.
  for (Operation &op : getBody().front().without_terminator())
    if (isFusionReduction(&op))
      return llvm::cast<RankedTensorType>(op.getOperand(0).getType()).getShape();
  return llvm::cast<RankedTensorType>(getResult(0).getType()).getShape();
}

ArrayRef<int64_t> FusionOp::getReducedDims() {
  for (Operation &op : getBody().front().without_terminator()) {
    if (auto sum = dyn_cast<ReduceSumOp>(op))
      return sum.getDims();
    if (auto mean = dyn_cast<ReduceMeanOp>(op))
      return mean.getDims();
  }
  return {};
}

LogicalResult FusionOp::verify() {
  if (getNumResults() == 0)
    return emitOpError("needs at least one result");
  Block &body = getBody().front();
  if (body.without_terminator().empty())
    return emitOpError("computes nothing");
  FailureOr<YieldOp> yield = verifyGroupBody(*this, getInputs(), body);
  if (failed(yield))
    return failure();
  ArrayRef<int64_t> shape = getIterationShape();
  ArrayRef<int64_t> reduced = getReducedDims();
  // Views of inputs: each chain of view ops reads one block argument that
  // nothing else reads directly, each link read once, and ends in a value of
  // the iteration shape that the kernel reads through a strided map.
  SmallVector<StridedView> views;
  for (Operation &op : body.without_terminator()) {
    if (!isViewOp(&op))
      continue;
    Value input = op.getOperand(0);
    Operation *def = input.getDefiningOp();
    auto arg = llvm::dyn_cast<BlockArgument>(input);
    if (isViewStart(def))
      arg = llvm::dyn_cast<BlockArgument>(def->getOperand(0));
    if (!arg && !isViewOp(def))
      return op.emitOpError("in an nn.fusion must view one of its inputs (through views)");
    // Read through views only (a broadcast may measure it).
    if (arg && llvm::any_of(arg.getUses(), [](OpOperand &use) {
          Operation *u = use.getOwner();
          return !isViewOp(u) && !isViewStart(u) &&
                 !(llvm::isa<BroadcastOp>(u) && use.getOperandNumber() == 1);
        }))
      return op.emitOpError("in an nn.fusion must view an input nothing else reads");
    Value result = op.getResult(0);
    if (result.use_empty())
      return op.emitOpError("in an nn.fusion must be read");
    if (llvm::any_of(result.getUsers(), [](Operation *u) { return isViewOp(u); })) {
      if (!result.hasOneUse())
        return op.emitOpError("in an nn.fusion must be read once when a view reads it");
      continue;
    }
    if (llvm::any_of(result.getUses(), [](OpOperand &use) {
          return llvm::isa<BroadcastOp>(use.getOwner()) && use.getOperandNumber() == 0;
        }))
      return op.emitOpError("in an nn.fusion cannot be broadcast");
    if (llvm::cast<RankedTensorType>(op.getResult(0).getType()).getShape() != shape)
      return op.emitOpError("in an nn.fusion must end at the iteration shape");
    SmallVector<Operation *> chain = {&op};
    while (Operation *link = chain.back()->getOperand(0).getDefiningOp())
      chain.push_back(link);
    std::reverse(chain.begin(), chain.end());
    FailureOr<StridedView> view = viewOfChain(
        chain, llvm::cast<RankedTensorType>(chain.front()->getOperand(0).getType()).getShape());
    if (failed(view))
      return op.emitOpError("in an nn.fusion must be a strided view of its input");
    if (view->isPrefix(
            llvm::cast<RankedTensorType>(chain.front()->getOperand(0).getType()).getNumElements()))
      return op.emitOpError("in an nn.fusion cannot read a prefix of its input in order "
                            "(a contiguous copy, not a view)");
    views.push_back(*view);
  }
  if (!views.empty()) {
    SmallVector<const StridedView *> ptrs;
    for (const StridedView &v : views)
      ptrs.push_back(&v);
    if (failed(refineDims(shape, ptrs)))
      return emitOpError("views its inputs with incompatible splits of the iteration space");
  }
  for (Operation &op : body.without_terminator()) {
    if (isViewOp(&op) || isViewStart(&op))
      continue;
    if (isFusionReduction(&op)) {
      ArrayRef<int64_t> dims = isa<ReduceSumOp>(op) ? cast<ReduceSumOp>(op).getDims()
                                                    : cast<ReduceMeanOp>(op).getDims();
      if (dims != reduced)
        return op.emitOpError("in an nn.fusion must reduce the same dims as the others");
      if (llvm::cast<RankedTensorType>(op.getOperand(0).getType()).getShape() != shape)
        return op.emitOpError("in an nn.fusion must reduce a value of the iteration shape");
      if (!llvm::cast<RankedTensorType>(op.getOperand(0).getType()).getElementType().isF32())
        return op.emitOpError("in an nn.fusion must reduce f32 values");
      if (llvm::any_of(op.getUsers(), [](Operation *u) { return !isa<YieldOp>(u); }))
        return op.emitOpError("in an nn.fusion must only be yielded");
      continue;
    }
    if (auto broadcast = llvm::dyn_cast<BroadcastOp>(op)) {
      if (!llvm::isa<BlockArgument>(broadcast.getInput()))
        return op.emitOpError("in an nn.fusion must broadcast one of its inputs");
    } else if (!isFusibleElementwise(&op)) {
      return op.emitOpError("cannot be fused: only elementwise ops, broadcasts and views of "
                            "inputs are");
    }
    if (llvm::cast<RankedTensorType>(op.getResult(0).getType()).getShape() != shape)
      return op.emitOpError("in an nn.fusion must compute the iteration shape");
  }
  for (Value v : yield->getValues())
    if (!isFusionReduction(v.getDefiningOp()) &&
        llvm::cast<RankedTensorType>(v.getType()).getShape() != shape)
      return emitOpError("results must share one shape (the iteration space)");
  return success();
}

bool graphc::nn::isBatchableUpdate(Operation *op) {
  return isa<SgdOp, SgdMomentumOp, AdamOp>(op);
}

LogicalResult MultiTensorOp::verify() {
  Block &body = getBody().front();
  FailureOr<YieldOp> yield = verifyGroupBody(*this, getInputs(), body);
  if (failed(yield))
    return failure();
  // Members on block arguments; their results yielded member by member.
  unsigned next = 0;
  for (Operation &op : body.without_terminator()) {
    if (!isBatchableUpdate(&op))
      return op.emitOpError("cannot be a member of an nn.multi_tensor: only sgd, "
                            "sgd_momentum and adam are");
    for (Value operand : op.getOperands())
      if (!llvm::isa<BlockArgument>(operand))
        return op.emitOpError("in an nn.multi_tensor must read its block arguments only");
    for (Value result : op.getResults()) {
      if (next >= yield->getValues().size() || yield->getValues()[next] != result)
        return op.emitOpError("results must be yielded in member order, each once");
      ++next;
    }
  }
  if (next == 0)
    return emitOpError("needs at least one member");
  if (next != yield->getValues().size())
    return emitOpError("yields values that are not member results");
  return success();
}

#define GET_OP_CLASSES
#include "dialects/nn/IR/NNOps.cpp.inc"
