//===- Passes.td - graphc compiler passes ------------------*- tablegen -*-===//
//
// The compiler's passes, alphabetical. The order they run in, and why, is in
// compiler/Pipeline/Pipeline.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef GRAPHC_TRANSFORMS_PASSES
#define GRAPHC_TRANSFORMS_PASSES

include "mlir/Pass/PassBase.td"

def SetBatchSize : Pass<"graphc-set-batch-size", "::mlir::ModuleOp"> {
  let summary = "Sets the batch dimension of the model inputs and re-infers shapes";
  let description = [{
    Model files leave the batch dimension of `@forward`'s inputs dynamic (or at
    any size); this pass sets dimension 0 of every input to `batch-size`,
    re-infers the result type of every op in order, and updates the function
    type. Any op whose inference fails (e.g. a reshape that no longer divides)
    is reported at its location.

    ```mlir
    // before, with batch-size=8
    func.func @forward(%x: tensor<?x784xf32>, %y: tensor<?xi32>) -> tensor<f32> {
      %0 = nn.relu %x : tensor<?x784xf32>
    // after
    func.func @forward(%x: tensor<8x784xf32>, %y: tensor<8xi32>) -> tensor<f32> {
      %0 = nn.relu %x : tensor<8x784xf32>
    ```
  }];
  let options = [
    Option<"batchSize", "batch-size", "int64_t", /*default=*/"0",
           "The batch size (must be positive)">
  ];
  let dependentDialects = ["::graphc::nn::NNDialect"];
}

def VerifyModel : Pass<"graphc-verify-model", "::mlir::ModuleOp"> {
  let summary = "Checks that a module is a model graphc can train";
  let description = [{
    The op verifiers check each op; this pass checks the model contract that
    the later phases rely on:

    1. the module holds only `nn.parameter`, `nn.state` and one
       `func.func @forward`;
    2. `@forward` takes `(%images, %labels)`: images a float tensor of rank 2
       or 4, static but for the batch dimension, labels a rank-1 i32/i64
       tensor with the same batch dimension;
    3. it returns one rank-0 f32 loss computed by `nn.softmax_cross_entropy`;
    4. its body holds only `nn` ops and `func.return`, in one block;
    5. every `nn.parameter` is read by `@forward` (an unread one would get no
       gradient).

    ```mlir
    module {
      nn.parameter @fc.weight : tensor<10x784xf32> = zeros
      func.func @forward(%images: tensor<?x784xf32>, %labels: tensor<?xi32>)
          -> tensor<f32> { ... }
    }
    ```
  }];
}

#endif // GRAPHC_TRANSFORMS_PASSES
