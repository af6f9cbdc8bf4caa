// Tests of compiler/Analysis/ModelStats.cpp: the counts `graphc info` prints.
// The small model's figures are worked out by hand in the comments.

#include "compiler/Analysis/ModelStats.h"

#include "compiler/Transforms/Passes.h"
#include "dialects/nn/IR/NNDialect.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

using namespace mlir;

namespace {

// conv 1->4 3x3 pad 1 with bias on 6x6, BN, ReLU, 2x2 max pool, linear 36->3.
constexpr const char *kSmallModel = R"mlir(
  nn.parameter @conv.weight : tensor<4x1x3x3xf32> = kaiming_normal
  nn.parameter @conv.bias : tensor<4xf32> = zeros
  nn.parameter @bn.weight : tensor<4xf32> = ones
  nn.parameter @bn.bias : tensor<4xf32> = zeros
  nn.state @bn.running_mean : tensor<4xf32> = zeros
  nn.state @bn.running_var : tensor<4xf32> = ones
  nn.parameter @fc.weight : tensor<3x36xf32> = xavier_uniform
  nn.parameter @fc.bias : tensor<3xf32> = zeros
  func.func @forward(%images: tensor<?x1x6x6xf32>, %labels: tensor<?xi32>) -> tensor<f32> {
    %w = nn.load @conv.weight : tensor<4x1x3x3xf32>
    %b = nn.load @conv.bias : tensor<4xf32>
    %conv = nn.conv2d %images, %w, %b padding [1, 1, 1, 1]
        : tensor<?x1x6x6xf32>, tensor<4x1x3x3xf32>, tensor<4xf32>
    %g = nn.load @bn.weight : tensor<4xf32>
    %h = nn.load @bn.bias : tensor<4xf32>
    %m = nn.load @bn.running_mean : tensor<4xf32>
    %v = nn.load @bn.running_var : tensor<4xf32>
    %bn = nn.batch_norm %conv, %g, %h, %m, %v epsilon 1.0e-05 momentum 1.0e-01
        : tensor<?x4x6x6xf32>, tensor<4xf32>
    %relu = nn.relu %bn : tensor<?x4x6x6xf32>
    %pool = nn.max_pool2d %relu window [2, 2] : tensor<?x4x6x6xf32>
    %flat = nn.flatten %pool start_dim 1 : tensor<?x4x3x3xf32>
    %fw = nn.load @fc.weight : tensor<3x36xf32>
    %fb = nn.load @fc.bias : tensor<3xf32>
    %logits = nn.linear %flat, %fw, %fb : tensor<?x36xf32>, tensor<3x36xf32>, tensor<3xf32>
    %loss = nn.softmax_cross_entropy %logits, %labels label_smoothing 0.0
        : tensor<?x3xf32>, tensor<?xi32>
    return %loss : tensor<f32>
  }
)mlir";

class ModelStatsTest : public ::testing::Test {
protected:
  ModelStatsTest() { context.loadDialect<graphc::nn::NNDialect, func::FuncDialect>(); }

  OwningOpRef<ModuleOp> parseWithBatch(int64_t batch) {
    OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(kSmallModel, &context);
    if (!module)
      return nullptr;
    PassManager pm(&context, ModuleOp::getOperationName());
    pm.addPass(graphc::createSetBatchSize(graphc::SetBatchSizeOptions{batch}));
    if (failed(pm.run(*module)))
      return nullptr;
    return module;
  }

  MLIRContext context;
};

TEST_F(ModelStatsTest, CountsParametersAndStateApart) {
  OwningOpRef<ModuleOp> module = parseWithBatch(1);
  ASSERT_TRUE(module);
  FailureOr<graphc::ModelStats> stats = graphc::computeModelStats(*module);
  ASSERT_TRUE(succeeded(stats));
  // 36 + 4 (conv) + 8 (bn affine) + 108 + 3 (fc); running stats are state.
  EXPECT_EQ(stats->parameters, 159);
  EXPECT_EQ(stats->parameterTensors, 6);
  EXPECT_EQ(stats->stateElements, 8);
  EXPECT_EQ(stats->stateTensors, 2);
}

TEST_F(ModelStatsTest, CountsMacsPerImageIndependentOfBatch) {
  for (int64_t batch : {1, 5}) {
    OwningOpRef<ModuleOp> module = parseWithBatch(batch);
    ASSERT_TRUE(module);
    FailureOr<graphc::ModelStats> stats = graphc::computeModelStats(*module);
    ASSERT_TRUE(succeeded(stats));
    // conv: 4x6x6 outputs x 9 MACs = 1296; linear: 36 x 3 = 108.
    EXPECT_EQ(stats->macs, batch * (1296 + 108));
    EXPECT_DOUBLE_EQ(stats->macsPerImage(), 1404.0);
    EXPECT_DOUBLE_EQ(stats->flopsPerImage(), 2808.0);
    // conv bias 144 + bn 8*144 + relu 144 + pool 3*36 + linear bias 3 + loss 5*3.
    EXPECT_EQ(stats->otherFlops, batch * (144 + 1152 + 144 + 108 + 3 + 15));
  }
}

TEST_F(ModelStatsTest, NamesLayersAfterTheirParameters) {
  OwningOpRef<ModuleOp> module = parseWithBatch(2);
  ASSERT_TRUE(module);
  FailureOr<graphc::ModelStats> stats = graphc::computeModelStats(*module);
  ASSERT_TRUE(succeeded(stats));
  ASSERT_EQ(stats->layers.size(), 7u);
  EXPECT_EQ(stats->layers[0].name, "conv");
  EXPECT_EQ(stats->layers[0].parameters, 40);
  EXPECT_EQ(stats->layers[1].name, "bn");
  EXPECT_EQ(stats->layers[1].parameters, 8); // running stats not counted
  EXPECT_EQ(stats->layers[2].name, "");      // relu reads no parameter
  EXPECT_EQ(stats->layers[5].name, "fc");
  // activations: conv, bn, relu 144 each, pool 36, flatten 36, logits 3, loss 1.
  EXPECT_EQ(stats->activationBytes, 4 * (2 * (3 * 144 + 36 + 36 + 3) + 1));
}

TEST_F(ModelStatsTest, RefusesADynamicBatch) {
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(kSmallModel, &context);
  ASSERT_TRUE(module);
  std::string message;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
    message = diag.str();
    return success();
  });
  EXPECT_TRUE(failed(graphc::computeModelStats(*module)));
  EXPECT_NE(message.find("static batch size"), std::string::npos) << message;
}

} // namespace
