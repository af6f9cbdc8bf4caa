// Unit tests of the nn dialect's shape arithmetic and of shape inference through
// the C++ builders (the lit tests cover the same rules through the parser).

#include "dialects/nn/IR/NNOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"

#include <gtest/gtest.h>

#include <limits>

using namespace mlir;
using graphc::nn::slidingWindowOutputSize;

namespace {

TEST(SlidingWindowTest, MatchesTheConvolutionFormula) {
  // ResNet-50 stem: 224 -> 112 with a 7x7/2 window and pad 3.
  EXPECT_EQ(slidingWindowOutputSize(224, 7, 2, 3, 3), 112);
  // Its max pool: 112 -> 56 with 3x3/2 and pad 1.
  EXPECT_EQ(slidingWindowOutputSize(112, 3, 2, 1, 1), 56);
  // Dilation 2 makes a 3-wide kernel span 5.
  EXPECT_EQ(slidingWindowOutputSize(10, 3, 1, 0, 0, 2), 6);
  // Asymmetric padding.
  EXPECT_EQ(slidingWindowOutputSize(5, 2, 2, 0, 1), 3);
}

TEST(SlidingWindowTest, ReportsWindowsThatDoNotFit) {
  EXPECT_LT(slidingWindowOutputSize(2, 7, 1, 0, 0), 1);
  // One short of fitting: truncating division would wrongly give 1 here.
  EXPECT_LT(slidingWindowOutputSize(4, 5, 2, 0, 0), 1);
  EXPECT_EQ(slidingWindowOutputSize(5, 5, 2, 0, 0), 1);
}

TEST(SlidingWindowTest, DoesNotWrapAround) {
  // dilation * (window - 1) overflows int64; the window cannot fit.
  EXPECT_LT(slidingWindowOutputSize(28, 5, 1, 0, 0, int64_t(1) << 62), 1);
  // A sum of paddings past int64 is still a (too) large output, not a wrap.
  int64_t huge = std::numeric_limits<int64_t>::max();
  EXPECT_GT(slidingWindowOutputSize(28, 3, 1, huge, huge), int64_t(1) << 40);
}

TEST(SlidingWindowTest, KeepsDynamicExtentsDynamic) {
  EXPECT_TRUE(ShapedType::isDynamic(
      slidingWindowOutputSize(ShapedType::kDynamic, 3, 1, 1, 1)));
}

class NNBuilderTest : public ::testing::Test {
protected:
  NNBuilderTest() : builder(&context) {
    context.loadDialect<graphc::nn::NNDialect, func::FuncDialect>();
    module = ModuleOp::create(builder.getUnknownLoc());
    builder.setInsertionPointToEnd(module->getBody());
  }

  /// A function argument of `type` to feed the ops under test.
  Value argument(Type type) {
    if (!block) {
      auto func = builder.create<func::FuncOp>(builder.getUnknownLoc(), "f",
                                               builder.getFunctionType({}, {}));
      block = func.addEntryBlock();
      builder.setInsertionPointToStart(block);
    }
    return block->addArgument(type, builder.getUnknownLoc());
  }

  MLIRContext context;
  OpBuilder builder;
  OwningOpRef<ModuleOp> module;
  Block *block = nullptr;
};

TEST_F(NNBuilderTest, Conv2DInfersGroupedStridedShape) {
  Type f32 = builder.getF32Type();
  Value x = argument(RankedTensorType::get({ShapedType::kDynamic, 32, 56, 56}, f32));
  Value w = argument(RankedTensorType::get({64, 8, 3, 3}, f32));
  auto conv = builder.create<graphc::nn::Conv2DOp>(
      builder.getUnknownLoc(), x, w, /*bias=*/Value(),
      builder.getDenseI64ArrayAttr({2, 2}), builder.getDenseI64ArrayAttr({1, 1, 1, 1}),
      /*dilations=*/nullptr, builder.getI64IntegerAttr(4));
  auto type = llvm::cast<RankedTensorType>(conv.getType());
  EXPECT_TRUE(ShapedType::isDynamic(type.getDimSize(0)));
  EXPECT_EQ(type.getShape().drop_front(), ArrayRef<int64_t>({64, 28, 28}));
  EXPECT_TRUE(succeeded(verify(conv)));
}

TEST_F(NNBuilderTest, BroadcastTakesTheShapeOfItsTarget) {
  Type f32 = builder.getF32Type();
  Value scale = argument(RankedTensorType::get({64}, f32));
  Value x = argument(RankedTensorType::get({8, 64, 7, 7}, f32));
  auto broadcast = builder.create<graphc::nn::BroadcastOp>(
      builder.getUnknownLoc(), scale, x, builder.getDenseI64ArrayAttr({1}));
  EXPECT_EQ(broadcast.getType(), x.getType());
}

TEST_F(NNBuilderTest, ReshapeInfersTheMinusOneEntry) {
  Type f32 = builder.getF32Type();
  Value x = argument(RankedTensorType::get({8, 2048, 1, 1}, f32));
  auto reshape = builder.create<graphc::nn::ReshapeOp>(
      builder.getUnknownLoc(), x, builder.getDenseI64ArrayAttr({-1, 2048}));
  EXPECT_EQ(reshape.getType().getShape(), ArrayRef<int64_t>({8, 2048}));
}

} // namespace
