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

#include "mlir/Dialect/CommonFolders.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/OpImplementation.h"
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
  for (int64_t v : values)
    if (v < minValue)
      return inferError<OpT>(loc, "expects every '", name, "' entry to be >= ",
                             minValue, ", got ", v);
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
  int64_t span = inputSize + padBegin + padEnd - dilation * (window - 1) - 1;
  if (span < 0)
    return 0;
  return span / stride + 1;
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
  // Sizes are multiplied in int64 everywhere (element counts, costs, arena
  // offsets); 2^40 elements (4 TiB of f32) bounds them far from overflow.
  int64_t elements = 1;
  for (int64_t size : type.getShape())
    if (size != 0 && (llvm::MulOverflow(elements, size, elements) ||
                      elements > (int64_t(1) << 40)))
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

LogicalResult LoadOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  Operation *symbol =
      symbolTable.lookupNearestSymbolFrom(*this, getVariableAttr());
  RankedTensorType declared;
  if (auto param = llvm::dyn_cast_or_null<ParameterOp>(symbol))
    declared = param.getType();
  else if (auto state = llvm::dyn_cast_or_null<StateOp>(symbol))
    declared = state.getType();
  else
    return emitOpError("'") << getVariable()
                            << "' does not name an nn.parameter or nn.state";
  if (declared != getType())
    return emitOpError("result type ")
           << getType() << " does not match the declared type " << declared
           << " of @" << getVariable();
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

OpFoldResult ReluOp::fold(FoldAdaptor) {
  // relu(relu(x)) == relu(x).
  if (auto inner = getInput().getDefiningOp<ReluOp>())
    return inner.getResult();
  return {};
}

OpFoldResult NegOp::fold(FoldAdaptor) {
  if (auto inner = getInput().getDefiningOp<NegOp>())
    return inner.getInput();
  return {};
}

/// Constant-folds a float binary op when both operands are constants.
template <typename Fn>
static Attribute foldFloatBinary(ArrayRef<Attribute> operands, Fn &&fn) {
  return constFoldBinaryOp<FloatAttr, APFloat, void>(
      operands, [&](const APFloat &a, const APFloat &b) -> std::optional<APFloat> {
        return fn(a, b);
      });
}

OpFoldResult AddOp::fold(FoldAdaptor adaptor) {
  if (matchPattern(getRhs(), m_AnyZeroFloat()))
    return getLhs();
  if (matchPattern(getLhs(), m_AnyZeroFloat()))
    return getRhs();
  return foldFloatBinary(adaptor.getOperands(),
                         [](APFloat a, const APFloat &b) { return a + b; });
}

OpFoldResult SubOp::fold(FoldAdaptor adaptor) {
  if (matchPattern(getRhs(), m_AnyZeroFloat()))
    return getLhs();
  return foldFloatBinary(adaptor.getOperands(),
                         [](APFloat a, const APFloat &b) { return a - b; });
}

OpFoldResult MulOp::fold(FoldAdaptor adaptor) {
  if (matchPattern(getRhs(), m_OneFloat()))
    return getLhs();
  if (matchPattern(getLhs(), m_OneFloat()))
    return getRhs();
  return foldFloatBinary(adaptor.getOperands(),
                         [](APFloat a, const APFloat &b) { return a * b; });
}

OpFoldResult DivOp::fold(FoldAdaptor adaptor) {
  if (matchPattern(getRhs(), m_OneFloat()))
    return getLhs();
  return foldFloatBinary(adaptor.getOperands(),
                         [](APFloat a, const APFloat &b) { return a / b; });
}

OpFoldResult MaxOp::fold(FoldAdaptor adaptor) {
  if (getLhs() == getRhs())
    return getLhs();
  return foldFloatBinary(adaptor.getOperands(),
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
    return getInput();
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
    return getInput();
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
// Conv2DOp
//===----------------------------------------------------------------------===//

SmallVector<int64_t, 2> Conv2DOp::getStridesOrDefault() {
  return orDefault2(getStrides(), {1, 1});
}
SmallVector<int64_t, 4> Conv2DOp::getPaddingOrDefault() {
  auto padding = getPadding();
  return SmallVector<int64_t, 4>(padding ? *padding : ArrayRef<int64_t>(kNoPadding));
}
SmallVector<int64_t, 2> Conv2DOp::getDilationsOrDefault() {
  return orDefault2(getDilations(), {1, 1});
}

LogicalResult Conv2DOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  using Op = Conv2DOp;
  auto input = rankedOf(adaptor.getInput());
  auto filter = rankedOf(adaptor.getFilter());
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
  SmallVector<int64_t, 2> strides = orDefault2(adaptor.getStrides(), {1, 1});
  SmallVector<int64_t, 2> dilations = orDefault2(adaptor.getDilations(), {1, 1});
  ArrayRef<int64_t> padding =
      adaptor.getPadding() ? *adaptor.getPadding() : ArrayRef<int64_t>(kNoPadding);
  if (failed(checkWindowAttr<Op>(loc, "strides", strides, 2, 1)) ||
      failed(checkWindowAttr<Op>(loc, "padding", padding, 4, 0)) ||
      failed(checkWindowAttr<Op>(loc, "dilations", dilations, 2, 1)))
    return failure();
  int64_t groups = static_cast<int64_t>(adaptor.getGroups().value_or(1));
  if (groups < 1)
    return inferError<Op>(loc, "expects 'groups' >= 1, got ", groups);

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

  SmallVector<int64_t, 4> shape = {input.getDimSize(0), outChannels};
  for (int i = 0; i < 2; ++i) {
    int64_t size = slidingWindowOutputSize(
        input.getDimSize(2 + i), filter.getDimSize(2 + i), strides[i],
        padding[2 * i], padding[2 * i + 1], dilations[i]);
    if (isStatic(size) && size < 1)
      return inferError<Op>(loc, "the ", filter.getDimSize(2 + i), "-wide window (dilation ",
                            dilations[i], ") does not fit the padded ",
                            i == 0 ? "height" : "width", " ",
                            input.getDimSize(2 + i) + padding[2 * i] + padding[2 * i + 1]);
    shape.push_back(size);
  }
  types.push_back(RankedTensorType::get(shape, input.getElementType()));
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

template <typename OpT>
static LogicalResult inferPool2D(std::optional<Location> loc,
                                 typename OpT::Adaptor adaptor,
                                 SmallVectorImpl<Type> &types) {
  auto input = rankedOf(adaptor.getInput());
  if (!input)
    return inferError<OpT>(loc, "expects a ranked tensor operand");
  if (input.getRank() != 4)
    return inferError<OpT>(loc, "expects an NCHW input of rank 4, got rank ",
                           input.getRank());
  ArrayRef<int64_t> window = adaptor.getWindow();
  if (failed(checkWindowAttr<OpT>(loc, "window", window, 2, 1)))
    return failure();
  ArrayRef<int64_t> strides = adaptor.getStrides() ? *adaptor.getStrides() : window;
  ArrayRef<int64_t> padding =
      adaptor.getPadding() ? *adaptor.getPadding() : ArrayRef<int64_t>(kNoPadding);
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
    shape.push_back(size);
  }
  types.push_back(RankedTensorType::get(shape, input.getElementType()));
  return success();
}

#define GRAPHC_POOL_METHODS(OpT)                                                \
  LogicalResult OpT::inferReturnTypes(MLIRContext *, std::optional<Location> loc, \
                                      Adaptor adaptor,                          \
                                      SmallVectorImpl<Type> &types) {           \
    return inferPool2D<OpT>(loc, adaptor, types);                               \
  }                                                                             \
  SmallVector<int64_t, 2> OpT::getStridesOrDefault() {                          \
    return orDefault2(getStrides(), getWindow());                               \
  }                                                                             \
  SmallVector<int64_t, 4> OpT::getPaddingOrDefault() {                          \
    auto padding = getPadding();                                                \
    return SmallVector<int64_t, 4>(padding ? *padding                          \
                                           : ArrayRef<int64_t>(kNoPadding));    \
  }
GRAPHC_POOL_METHODS(MaxPool2DOp)
GRAPHC_POOL_METHODS(AvgPool2DOp)
#undef GRAPHC_POOL_METHODS

LogicalResult GlobalAvgPoolOp::inferReturnTypes(MLIRContext *,
                                                std::optional<Location> loc,
                                                Adaptor adaptor,
                                                SmallVectorImpl<Type> &types) {
  auto input = rankedOf(adaptor.getInput());
  if (!input || input.getRank() != 4)
    return inferError<GlobalAvgPoolOp>(loc, "expects an NCHW input of rank 4");
  types.push_back(RankedTensorType::get(
      {input.getDimSize(0), input.getDimSize(1)}, input.getElementType()));
  return success();
}

//===----------------------------------------------------------------------===//
// Shape ops
//===----------------------------------------------------------------------===//

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
    } else {
      known *= size;
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
    return getInput();
  // reshape(reshape(x)) == reshape(x): only the final shape matters.
  if (auto inner = getInput().getDefiningOp<ReshapeOp>()) {
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
  int64_t collapsed = 1;
  for (int64_t size : input.getShape().drop_front(start))
    collapsed = isStatic(size) && isStatic(collapsed) ? collapsed * size : kDynamic;
  shape.push_back(collapsed);
  types.push_back(RankedTensorType::get(shape, input.getElementType()));
  return success();
}

OpFoldResult FlattenOp::fold(FoldAdaptor) {
  if (getInput().getType() == getType())
    return getInput();
  return {};
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

//===----------------------------------------------------------------------===//
// Dropout and loss
//===----------------------------------------------------------------------===//

LogicalResult DropoutOp::verify() {
  double rate = getRate().convertToDouble();
  if (!(rate >= 0.0 && rate < 1.0))
    return emitOpError("expects a rate in [0, 1), got ") << str(rate);
  return success();
}

OpFoldResult DropoutOp::fold(FoldAdaptor) {
  if (getRate().isZero())
    return getInput();
  return {};
}

LogicalResult SoftmaxCrossEntropyOp::inferReturnTypes(
    MLIRContext *context, std::optional<Location> loc, Adaptor adaptor,
    SmallVectorImpl<Type> &types) {
  using Op = SoftmaxCrossEntropyOp;
  auto logits = rankedOf(adaptor.getLogits());
  auto labels = rankedOf(adaptor.getLabels());
  if (!logits || !labels)
    return inferError<Op>(loc, "expects ranked tensor operands");
  if (logits.getRank() != 2 || !llvm::isa<FloatType>(logits.getElementType()))
    return inferError<Op>(loc, "expects float logits of shape [N, classes], got ",
                          logits);
  if (labels.getRank() != 1)
    return inferError<Op>(loc, "expects labels of shape [N], got rank ",
                          labels.getRank());
  if (!labels.getElementType().isSignlessInteger(32) &&
      !labels.getElementType().isSignlessInteger(64))
    return inferError<Op>(loc, "expects i32 or i64 class-index labels, got ",
                          labels.getElementType());
  if (extentsConflict(logits.getDimSize(0), labels.getDimSize(0)))
    return inferError<Op>(loc, "batch of logits (", logits.getDimSize(0),
                          ") differs from batch of labels (", labels.getDimSize(0),
                          ")");
  types.push_back(RankedTensorType::get({}, Float32Type::get(context)));
  return success();
}

LogicalResult SoftmaxCrossEntropyOp::verify() {
  double smoothing = getLabelSmoothing().convertToDouble();
  if (!(smoothing >= 0.0 && smoothing < 1.0))
    return emitOpError("expects label_smoothing in [0, 1), got ") << str(smoothing);
  return success();
}

#define GET_OP_CLASSES
#include "dialects/nn/IR/NNOps.cpp.inc"
