//===- InputNormalize.cpp - 8-bit images, normalized in the step ----------===//
//
// Implements --graphc-input-normalize (graphc compile --input-normalize): the
// images arrive as bytes and the step normalizes them. See Passes.td.
//
//===----------------------------------------------------------------------===//

#include "compiler/Transforms/Passes.h"

#include "compiler/Transforms/BuildUtils.h"

#include "dialects/nn/IR/NNOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"

#include <cmath>

#define DEBUG_TYPE "graphc-input-normalize"

namespace graphc {
#define GEN_PASS_DEF_INPUTNORMALIZE
#include "compiler/Transforms/Passes.h.inc"
} // namespace graphc

using namespace mlir;

namespace graphc {
namespace {

/// Algorithm: 1) check the option values against the images' shape; 2) give
/// the first argument the i8 element type; 3) at the top of the body, cast
/// it back to the old element type and multiply-add the per-channel (or
/// global) scale and shift, each a constant broadcast to the images' shape;
/// 4) every other use of the argument reads the result; 5) update the
/// function type.
struct InputNormalizePass : impl::InputNormalizeBase<InputNormalizePass> {
  using InputNormalizeBase::InputNormalizeBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    const char *name = module.lookupSymbol("forward") ? "forward" : "infer";
    FailureOr<func::FuncOp> found = lookupModelFunction(module, name);
    if (failed(found))
      return signalPassFailure();
    func::FuncOp function = *found;
    if (function.getNumArguments() < 1) {
      function.emitError("graphc-input-normalize: @") << name << " takes no images";
      return signalPassFailure();
    }
    BlockArgument images = function.getArgument(0);
    auto type = llvm::dyn_cast<RankedTensorType>(images.getType());
    auto element = type ? llvm::dyn_cast<FloatType>(type.getElementType()) : FloatType();
    if (!element) {
      function.emitError("graphc-input-normalize: @")
          << name << "'s images are " << images.getType()
          << ", not a float tensor (are they 8-bit already?)";
      return signalPassFailure();
    }
    const size_t count = mean.size();
    if (count == 0 || std.size() != count) {
      function.emitError("graphc-input-normalize: needs as many mean values as std values "
                         "(one, or one per channel), got ")
          << count << " and " << std.size();
      return signalPassFailure();
    }
    const int64_t channels = type.getRank() == 4 ? type.getDimSize(1) : 1;
    if (count != 1 && (type.getRank() != 4 || static_cast<int64_t>(count) != channels)) {
      function.emitError("graphc-input-normalize: ")
          << count << " mean and std values for images " << type
          << "; give one, or one per channel of NCHW images ("
          << (type.getRank() == 4 ? std::to_string(channels) : std::string("not NCHW")) << ")";
      return signalPassFailure();
    }
    SmallVector<float> scale, shift;
    for (size_t c = 0; c < count; ++c) {
      if (!std::isfinite(mean[c]) || !std::isfinite(std[c]) || !(std[c] > 0)) {
        function.emitError("graphc-input-normalize: mean ")
            << mean[c] << " and std " << std[c] << " must be finite, std positive";
        return signalPassFailure();
      }
      scale.push_back(static_cast<float>(1.0 / (255.0 * std[c])));
      shift.push_back(static_cast<float>(-mean[c] / std[c]));
    }

    images.setType(type.clone(IntegerType::get(&getContext(), 8)));
    Block &body = function.getBody().front();
    OpBuilder b = OpBuilder::atBlockBegin(&body);
    Location loc = function.getLoc();
    auto cast = b.create<nn::CastOp>(loc, images, TypeAttr::get(element));
    Value pixels = cast.getResult();
    auto constant = [&](ArrayRef<float> values) -> Value {
      const bool perChannel = values.size() > 1;
      auto constType = RankedTensorType::get(
          perChannel ? ArrayRef<int64_t>{static_cast<int64_t>(values.size())}
                     : ArrayRef<int64_t>{},
          element);
      SmallVector<APFloat> floats;
      for (float v : values) {
        APFloat f(v);
        bool lost = false;
        f.convert(element.getFloatSemantics(), APFloat::rmNearestTiesToEven, &lost);
        floats.push_back(f);
      }
      Value c = b.create<nn::ConstantOp>(loc, DenseElementsAttr::get(constType, floats));
      return b.create<nn::BroadcastOp>(
          loc, c, pixels,
          b.getDenseI64ArrayAttr(perChannel ? ArrayRef<int64_t>{1} : ArrayRef<int64_t>{}));
    };
    Value scaled = b.create<nn::MulOp>(loc, pixels, constant(scale));
    Value normalized = b.create<nn::AddOp>(loc, scaled, constant(shift));
    images.replaceAllUsesExcept(normalized, cast);

    SmallVector<Type> inputs(body.getArgumentTypes());
    function.setType(FunctionType::get(&getContext(), inputs, function.getResultTypes()));
  }
};

} // namespace
} // namespace graphc
