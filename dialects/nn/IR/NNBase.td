//===- NNBase.td - nn dialect definition and enums ---------*- tablegen -*-===//
//
// The `nn` dialect: tensor-level neural-network ops with shape inference and full
// verifiers. Model files (models/*.mlir) are written in it; the compiler adds the
// gradient, optimizer and fusion ops in later phases.
//
//===----------------------------------------------------------------------===//

#ifndef GRAPHC_NN_BASE
#define GRAPHC_NN_BASE

include "mlir/IR/OpBase.td"
include "mlir/IR/EnumAttr.td"

def NN_Dialect : Dialect {
  let name = "nn";
  let summary = "Tensor-level neural-network ops for training graphs";
  let description = [{
    Ops on ranked tensors in NCHW layout. A model is a module that declares its
    trainable `nn.parameter`s and its `nn.state` (e.g. batch-norm running
    statistics) as symbols, and a `func.func @forward(%images, %labels)` that
    reads them with `nn.load` and returns the scalar loss. Result types are
    inferred from operands and attributes, so a leading `?` batch dimension in
    the inputs flows through the whole model and `--batch-size` re-infers it.
  }];
  let cppNamespace = "::graphc::nn";
  let hasConstantMaterializer = 1;
}

def NN_Initializer : I32EnumAttr<"Initializer",
    "how a variable's initial value is drawn", [
      I32EnumAttrCase<"zeros", 0>,
      I32EnumAttrCase<"ones", 1>,
      I32EnumAttrCase<"constant", 2>,
      I32EnumAttrCase<"normal", 3>,
      I32EnumAttrCase<"uniform", 4>,
      I32EnumAttrCase<"kaiming_normal", 5>,
      I32EnumAttrCase<"kaiming_normal_fan_out", 6>,
      I32EnumAttrCase<"kaiming_uniform", 7>,
      I32EnumAttrCase<"xavier_uniform", 8>
    ]> {
  let cppNamespace = "::graphc::nn";
}

def NN_CmpPredicate : I32EnumAttr<"CmpPredicate",
    "elementwise comparison predicate", [
      I32EnumAttrCase<"eq", 0>,
      I32EnumAttrCase<"ne", 1>,
      I32EnumAttrCase<"lt", 2>,
      I32EnumAttrCase<"le", 3>,
      I32EnumAttrCase<"gt", 4>,
      I32EnumAttrCase<"ge", 5>
    ]> {
  let cppNamespace = "::graphc::nn";
}

def NN_LrDecay : I32EnumAttr<"LrDecay",
    "learning-rate decay after warmup", [
      I32EnumAttrCase<"constant", 0>,
      I32EnumAttrCase<"cosine", 1>,
      I32EnumAttrCase<"step", 2>
    ]> {
  let cppNamespace = "::graphc::nn";
}

//===----------------------------------------------------------------------===//
// Type constraints
//===----------------------------------------------------------------------===//

def NN_FloatTensor : RankedTensorOf<[F16, BF16, F32, F64]>;
def NN_IntTensor : RankedTensorOf<[I32, I64]>;
def NN_BoolTensor : RankedTensorOf<[I1]>;
def NN_NumericTensor : RankedTensorOf<[F16, BF16, F32, F64, I32, I64]>;
// i8 holds bytes: images as 8-bit pixels (graphc-input-normalize), which
// nn.cast reads as unsigned.
def NN_AnyTensor : RankedTensorOf<[F16, BF16, F32, F64, I1, I8, I32, I64]>;
def NN_F32Scalar : 0DTensorOf<[F32]>,
    BuildableType<"::mlir::RankedTensorType::get({}, $_builder.getF32Type())">;
def NN_I64Scalar : 0DTensorOf<[I64]>,
    BuildableType<"::mlir::RankedTensorType::get({}, $_builder.getI64Type())">;

class NN_Op<string mnemonic, list<Trait> traits = []> :
    Op<NN_Dialect, mnemonic, traits>;

#endif // GRAPHC_NN_BASE
