//===- graphc-opt.cpp - mlir-opt with graphc's dialects and passes --------===//
//
// The tool the lit tests drive: parses, verifies, runs passes and prints IR, with
// only the dialects and passes graphc uses registered (registering everything
// costs ~40 s of compile time per file on 2 cores), and graphc compile's whole
// pipeline as `graphc-compile` with the same options.
//
//===----------------------------------------------------------------------===//

#include "compiler/Lowering/Passes.h"
#include "compiler/Pipeline/CompileOptions.h"
#include "compiler/Transforms/Passes.h"
#include "dialects/dist/IR/DistOps.h"
#include "dialects/nn/IR/NNDialect.h"
#include "dialects/plan/IR/PlanDialect.h"
#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<graphc::dist::DistDialect, graphc::nn::NNDialect, graphc::plan::PlanDialect,
                  mlir::affine::AffineDialect, mlir::arith::ArithDialect, mlir::func::FuncDialect,
                  mlir::gpu::GPUDialect,
                  mlir::linalg::LinalgDialect, mlir::math::MathDialect,
                  mlir::memref::MemRefDialect, mlir::scf::SCFDialect>();
  graphc::registerGraphcPasses();
  graphc::registerGraphcLoweringPasses();
  graphc::registerCompilePipeline();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "graphc optimizer driver\n", registry));
}
