//===- DistOps.td - dist dialect: collectives ---------------*- tablegen -*-===//
//
// The `dist` dialect: the collectives of data-parallel training. Its ops sit
// in @train_step between the backward that produces each gradient and the
// optimizer that consumes it; graphc-data-parallel writes them and
// graphc-lower-to-plan turns them into the plan's collective commands.
//
//===----------------------------------------------------------------------===//

#ifndef GRAPHC_DIST_OPS
#define GRAPHC_DIST_OPS

include "mlir/IR/OpBase.td"
include "mlir/IR/EnumAttr.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def Dist_Dialect : Dialect {
  let name = "dist";
  let summary = "Collectives across the ranks of a data-parallel job";
  let description = [{
    Asynchronous collectives on tensors. A collective is a pair: a start that
    hands a bucket of tensors to the communicator and a wait that gives them
    back reduced. Between the two the tensors are *in flight*: nothing may
    read or write them, which the op verifiers enforce in the IR and the
    runtime's plan loader enforces again on the bytes. The world size is not
    part of the IR: a mean divides by the number of ranks the job runs on.
  }];
  let cppNamespace = "::graphc::dist";
}

def Dist_Reduction : I32EnumAttr<"Reduction", "how a collective combines ranks", [
      I32EnumAttrCase<"sum", 0>,
      I32EnumAttrCase<"mean", 1>
    ]> {
  let cppNamespace = "::graphc::dist";
}

def Dist_FloatTensor : RankedTensorOf<[F16, BF16, F32]>;
// A collective's tensors: floats, and a sparse one's i32 indices.
def Dist_Tensor : RankedTensorOf<[F16, BF16, F32, I32]>;

class Dist_Op<string mnemonic, list<Trait> traits = []> :
    Op<Dist_Dialect, mnemonic, traits>;

def Dist_AllreduceOp : Dist_Op<"allreduce", [SameOperandsAndResultType,
    MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "reduces a tensor across ranks and waits for the result";
  let description = [{
    A blocking collective inside the step, where the value is needed at once:
    synchronized batch norm's per-channel statistics (`--sync-bn`).
    Differentiable: with the ranks' losses summed, the adjoint of a mean (or
    sum) across ranks is the mean (or sum) of the ranks' adjoints, which is
    what graphc-autodiff emits. Lowered to a start and a wait back to back.

    ```mlir
    %mean = dist.allreduce mean %local_mean : tensor<64xf32>
    ```
  }];
  let arguments = (ins Dist_FloatTensor:$input, Dist_Reduction:$reduction);
  let results = (outs Dist_FloatTensor:$result);
  let assemblyFormat = "$reduction $input attr-dict `:` type($input)";
}

def Dist_AllreduceStartOp : Dist_Op<"allreduce_start", [
    DeclareOpInterfaceMethods<InferTypeOpInterface>,
    MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "starts an allreduce of a bucket of tensors";
  let description = [{
    Hands `tensors` to the communicator, which reduces them across ranks while
    the step goes on. The results are the same tensors in flight: their only
    user is the `dist.allreduce_wait` that ends the collective, which takes
    all of them, in order. `bucket` numbers the collective within its step
    (for diagnostics and traces). `wire f16` sends f32 tensors as f16 (each
    rank divides by the world size before rounding, for a mean); half
    tensors always travel as they are.

    A `sparse` start (deep gradient compression's sum of sparse sets) takes
    threes of tensors: the values (f32) and indices (i32) of one rank's
    sparse set, up to the first negative index, and a dense f32 tensor that
    the wait gives back holding the sum (or mean) over ranks of their sets
    at those flat positions, zero elsewhere. Its values and indices come back
    unchanged. The sets are gathered, never summed densely. `sent_entries`
    (sparse only) is how many entries the sets hold together in the steady
    state, at most the sum of their sizes: a set's size may leave room for
    more (a warm-up's larger counts, the selection's candidates), and a
    scaling model should cost what is sent.

    ```mlir
    %f:2 = dist.allreduce_start mean %dw, %db bucket 0 : tensor<10x784xf32>, tensor<10xf32>
    ... backward continues ...
    %r:2 = dist.allreduce_wait %f#0, %f#1 : tensor<10x784xf32>, tensor<10xf32>
    ```
  }];
  let arguments = (ins Variadic<Dist_Tensor>:$tensors,
                       Dist_Reduction:$reduction, I64Attr:$bucket,
                       OptionalAttr<TypeAttr>:$wire_type, UnitAttr:$sparse,
                       OptionalAttr<I64Attr>:$sent_entries);
  let results = (outs Variadic<Dist_Tensor>:$in_flight);
  let assemblyFormat = [{
    (`sparse` $sparse^)? $reduction $tensors `bucket` $bucket (`wire` $wire_type^)? attr-dict
    `:` type($tensors)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The wait that ends this collective, or null while the IR is incomplete.
    AllreduceWaitOp getWait();
  }];
}

def Dist_AllreduceWaitOp : Dist_Op<"allreduce_wait", [
    DeclareOpInterfaceMethods<InferTypeOpInterface>,
    MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "waits for an allreduce and gives its tensors back reduced";
  let description = [{
    Takes every in-flight result of one `dist.allreduce_start`, in order, and
    returns the reduced tensors. The optimizer (and, under loss scaling, the
    overflow check) reads these results, never the tensors the start took.

    ```mlir
    %r:2 = dist.allreduce_wait %f#0, %f#1 : tensor<10x784xf32>, tensor<10xf32>
    ```
  }];
  let arguments = (ins Variadic<Dist_Tensor>:$in_flight);
  let results = (outs Variadic<Dist_Tensor>:$reduced);
  let assemblyFormat = "$in_flight attr-dict `:` type($in_flight)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The start whose tensors this waits for (verified to exist).
    AllreduceStartOp getStart();
  }];
}

#endif // GRAPHC_DIST_OPS
