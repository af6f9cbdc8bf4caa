//===- NNOps.td - nn dialect ops ---------------------------*- tablegen -*-===//
//
// The forward ops of the `nn` dialect. Every op infers its result type, so a model
// file spells operand types only and `--batch-size` can re-infer every shape.
// Shape, dtype and attribute rules are checked in NNOps.cpp; each rule has a case
// in test/Dialect/nn/invalid.mlir.
//
//===----------------------------------------------------------------------===//

#ifndef GRAPHC_NN_OPS
#define GRAPHC_NN_OPS

include "dialects/nn/IR/NNBase.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

//===----------------------------------------------------------------------===//
// Variables: parameters and state
//===----------------------------------------------------------------------===//

class NN_VariableOp<string mnemonic> : NN_Op<mnemonic,
    [Symbol, HasParent<"::mlir::ModuleOp">]> {
  let arguments = (ins
    SymbolNameAttr:$sym_name,
    TypeAttrOf<AnyStaticShapeTensor>:$type,
    NN_Initializer:$initializer,
    OptionalAttr<F64Attr>:$init_value);
  let assemblyFormat = [{
    $sym_name `:` $type `=` $initializer (`(` $init_value^ `)`)? attr-dict
  }];
  let hasVerifier = 1;
  code extraVarDecls = [{
    /// Number of scalar elements of the variable.
    int64_t getNumElements() { return getType().getNumElements(); }
  }];
}

def NN_ParameterOp : NN_VariableOp<"parameter"> {
  let summary = "declares a trainable parameter of the model";
  let description = [{
    A named, statically shaped tensor that the optimizer trains. Names follow
    the PyTorch state-dict convention so checkpoints map one to one. The
    initializer is one of `zeros`, `ones`, `constant(v)`, `normal(std)`,
    `uniform(bound)` (U(-bound, bound)), `kaiming_normal` (fan-in, ReLU gain),
    `kaiming_normal_fan_out`, `kaiming_uniform` and `xavier_uniform`; the fan-based
    ones need a rank of at least 2.

    ```mlir
    nn.parameter @conv1.weight : tensor<64x3x7x7xf32> = kaiming_normal_fan_out
    nn.parameter @fc.weight : tensor<1000x2048xf32> = normal(0.01)
    ```
  }];
  let extraClassDeclaration = extraVarDecls;
}

def NN_StateOp : NN_VariableOp<"state"> {
  let summary = "declares non-trainable state that persists across steps";
  let description = [{
    Like `nn.parameter`, but not trained and not counted as a parameter: batch
    norm running statistics, and later optimizer slots and the step counter.

    ```mlir
    nn.state @bn1.running_mean : tensor<64xf32> = zeros
    nn.state @bn1.running_var : tensor<64xf32> = ones
    ```
  }];
  let extraClassDeclaration = extraVarDecls;
}

def NN_LoadOp : NN_Op<"load", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>,
    MemoryEffects<[MemRead]>]> {
  let summary = "reads the current value of a parameter or state";
  let description = [{
    ```mlir
    %w = nn.load @conv1.weight : tensor<64x3x7x7xf32>
    ```
    The result type must equal the declared type of the variable.
  }];
  let arguments = (ins FlatSymbolRefAttr:$variable);
  let results = (outs AnyStaticShapeTensor:$result);
  let assemblyFormat = "$variable attr-dict `:` type($result)";
}

def NN_ConstantOp : NN_Op<"constant", [
    ConstantLike, Pure, InferTypeOpAdaptor]> {
  let summary = "a constant tensor";
  let description = [{
    ```mlir
    %half = nn.constant dense<5.000000e-01> : tensor<f32>
    ```
  }];
  let arguments = (ins ElementsAttr:$value);
  let results = (outs NN_AnyTensor:$result);
  let assemblyFormat = "attr-dict $value";
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

// AllTypesMatch, not SameOperandsAndResultType: the latter accepts merely
// compatible shapes (tensor<?x10xf32> with tensor<1x10xf32>), which would let
// an implicit broadcast through.
class NN_UnaryFloatOp<string mnemonic, list<Trait> traits = []> :
    NN_Op<mnemonic, !listconcat(traits,
        [Pure, AllTypesMatch<["input", "result"]>,
         DeclareOpInterfaceMethods<InferTypeOpInterface>])> {
  let arguments = (ins NN_FloatTensor:$input);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def NN_ReluOp : NN_UnaryFloatOp<"relu"> {
  let summary = "max(x, 0)";
  let description = [{
    ```mlir
    %y = nn.relu %x : tensor<?x64x112x112xf32>
    ```
  }];
  let hasFolder = 1;
}

def NN_NegOp : NN_UnaryFloatOp<"neg"> {
  let summary = "-x";
  let description = "`%y = nn.neg %x : tensor<4xf32>`";
  let hasFolder = 1;
}

def NN_ExpOp : NN_UnaryFloatOp<"exp"> {
  let summary = "e^x";
  let description = "`%y = nn.exp %x : tensor<4xf32>`";
}

def NN_LogOp : NN_UnaryFloatOp<"log"> {
  let summary = "natural logarithm";
  let description = "`%y = nn.log %x : tensor<4xf32>`";
}

def NN_RsqrtOp : NN_UnaryFloatOp<"rsqrt"> {
  let summary = "1 / sqrt(x)";
  let description = "`%y = nn.rsqrt %x : tensor<4xf32>`";
}

def NN_SigmoidOp : NN_UnaryFloatOp<"sigmoid"> {
  let summary = "1 / (1 + e^-x)";
  let description = [{
    The logistic function: squeeze-excite gates (EfficientNet, RegNetY) and
    SiLU (`x * sigmoid(x)`). Its gradient is `dy * y * (1 - y)`, from the
    result, finite wherever the result is.

    ```mlir
    %y = nn.sigmoid %x : tensor<?x96x1x1xf32>
    ```
  }];
}

def NN_ErfOp : NN_UnaryFloatOp<"erf"> {
  let summary = "the error function";
  let description = [{
    GELU as PyTorch writes it (`0.5 * x * (1 + erf(x / sqrt(2)))`, ViT's and
    ConvNeXt's MLPs). Its gradient is `dy * 2 / sqrt(pi) * e^(-x^2)`.

    ```mlir
    %y = nn.erf %x : tensor<8x197x3072xf32>
    ```
  }];
}

class NN_BinaryOp<string mnemonic, list<Trait> traits = []> :
    NN_Op<mnemonic, !listconcat(traits,
        [Pure, AllTypesMatch<["lhs", "rhs", "result"]>,
         DeclareOpInterfaceMethods<InferTypeOpInterface>])> {
  let arguments = (ins NN_NumericTensor:$lhs, NN_NumericTensor:$rhs);
  let results = (outs NN_NumericTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($result)";
  let hasFolder = 1;
  let description = [{
    Both operands have the result's type; broadcasting is explicit
    (`nn.broadcast`), which keeps gradients and fusion simple.

    ```mlir
    %y = nn.}] # mnemonic # [{ %a, %b : tensor<?x256x56x56xf32>
    ```
  }];
}

def NN_AddOp : NN_BinaryOp<"add", [Commutative]> { let summary = "a + b"; }
def NN_SubOp : NN_BinaryOp<"sub"> { let summary = "a - b"; }
def NN_MulOp : NN_BinaryOp<"mul", [Commutative]> { let summary = "a * b"; }
def NN_DivOp : NN_BinaryOp<"div"> { let summary = "a / b"; }
def NN_MaxOp : NN_BinaryOp<"max", [Commutative]> { let summary = "max(a, b)"; }

def NN_SelectOp : NN_Op<"select", [Pure,
    AllTypesMatch<["true_value", "false_value", "result"]>,
    AllShapesMatch<["condition", "result"]>,
    DeclareOpInterfaceMethods<InferTypeOpInterface>]> {
  let summary = "condition ? a : b, elementwise";
  let description = [{
    ```mlir
    %y = nn.select %mask, %a, %b : tensor<?x10xi1>, tensor<?x10xf32>
    ```
  }];
  let arguments = (ins NN_BoolTensor:$condition, NN_AnyTensor:$true_value,
                       NN_AnyTensor:$false_value);
  let results = (outs NN_AnyTensor:$result);
  let assemblyFormat = [{
    $condition `,` $true_value `,` $false_value attr-dict `:`
    type($condition) `,` type($result)
  }];
}

def NN_CmpOp : NN_Op<"cmp", [Pure, AllTypesMatch<["lhs", "rhs"]>,
    InferTypeOpAdaptor]> {
  let summary = "elementwise comparison producing i1";
  let description = [{
    ```mlir
    %m = nn.cmp gt, %a, %b : tensor<?x10xf32>
    ```
  }];
  let arguments = (ins NN_CmpPredicate:$predicate, NN_NumericTensor:$lhs,
                       NN_NumericTensor:$rhs);
  let results = (outs NN_BoolTensor:$result);
  let assemblyFormat = "$predicate `,` $lhs `,` $rhs attr-dict `:` type($lhs)";
}

def NN_CastOp : NN_Op<"cast", [Pure, InferTypeOpAdaptor]> {
  let summary = "converts the element type";
  let description = [{
    Float-to-float rounds to nearest even; float-to-int truncates toward zero;
    an i8 operand is an unsigned byte (a pixel, 0 to 255).

    ```mlir
    %h = nn.cast %x : tensor<?x64x56x56xf32> to f16
    ```
  }];
  let arguments = (ins NN_AnyTensor:$input, TypeAttr:$element_type);
  let results = (outs NN_AnyTensor:$result);
  let assemblyFormat = "$input `:` type($input) `to` $element_type attr-dict";
  let hasFolder = 1;
}

def NN_BroadcastOp : NN_Op<"broadcast", [Pure, InferTypeOpAdaptor]> {
  let summary = "broadcasts a tensor to the shape of another";
  let description = [{
    Operand dimension `i` maps to result dimension `dims[i]` (strictly
    increasing); it must equal that dimension or be 1. The result takes its
    shape from `shape_of`, whose values are not read, so the batch size flows
    through. This is how a per-channel scale meets an NCHW activation:

    ```mlir
    %s = nn.broadcast %scale to %x dims [1] : tensor<64xf32>, tensor<?x64x56x56xf32>
    ```
  }];
  let arguments = (ins NN_AnyTensor:$input, NN_AnyTensor:$shape_of,
                       DenseI64ArrayAttr:$dims);
  let results = (outs NN_AnyTensor:$result);
  let assemblyFormat = [{
    $input `to` $shape_of `dims` $dims attr-dict `:` type($input) `,` type($shape_of)
  }];
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

class NN_ReduceOp<string mnemonic> : NN_Op<mnemonic, [Pure, InferTypeOpAdaptor]> {
  let arguments = (ins NN_NumericTensor:$input, DenseI64ArrayAttr:$dims,
                       UnitAttr:$keep_dims);
  let results = (outs NN_NumericTensor:$result);
  let assemblyFormat = [{
    $input `dims` $dims (`keep_dims` $keep_dims^)? attr-dict `:` type($input)
  }];
  let description = [{
    Reduces over `dims` (non-empty, strictly increasing, in range); with
    `keep_dims` the reduced dimensions stay as size 1.

    ```mlir
    %r = nn.}] # mnemonic # [{ %x dims [0, 2, 3] keep_dims : tensor<?x64x56x56xf32>
    ```
  }];
}

def NN_ReduceSumOp : NN_ReduceOp<"reduce_sum"> { let summary = "sum over dims"; }
def NN_ReduceMeanOp : NN_ReduceOp<"reduce_mean"> { let summary = "mean over dims"; }
def NN_ReduceMaxOp : NN_ReduceOp<"reduce_max"> { let summary = "max over dims"; }

//===----------------------------------------------------------------------===//
// Convolution, normalization, pooling
//===----------------------------------------------------------------------===//

def NN_Conv2DOp : NN_Op<"conv2d", [Pure, InferTypeOpAdaptor]> {
  let summary = "2-D convolution, NCHW input and OIHW filter";
  let description = [{
    `filter` is `[O, C / groups, KH, KW]`; the optional `bias` is `[O]`.
    `strides` and `dilations` are `[h, w]` (default 1), `padding` is
    `[top, bottom, left, right]` (default 0), `groups` divides both C and O.
    Output size per spatial dim: `(in + pads - dilation * (k - 1) - 1) / stride + 1`,
    which must be at least 1. With `channels_last` the input and result are
    stored NHWC (`[N, H, W, C]`, the layout the fast CPU and GPU kernels want;
    graphc-layout chooses it); the filter stays OIHW unless `filter_ohwi`
    (only with `channels_last`) stores it `[O, KH, KW, C / groups]`, the
    layout cuDNN's channels-last tensor-core kernels take.

    ```mlir
    %y = nn.conv2d %x, %w strides [2, 2] padding [3, 3, 3, 3]
        : tensor<?x3x224x224xf32>, tensor<64x3x7x7xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$input, NN_FloatTensor:$filter,
                       Optional<NN_FloatTensor>:$bias,
                       OptionalAttr<DenseI64ArrayAttr>:$strides,
                       OptionalAttr<DenseI64ArrayAttr>:$padding,
                       OptionalAttr<DenseI64ArrayAttr>:$dilations,
                       OptionalAttr<I64Attr>:$groups,
                       UnitAttr:$channels_last,
                       UnitAttr:$filter_ohwi);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $filter (`,` $bias^)? (`strides` $strides^)? (`padding` $padding^)?
    (`dilations` $dilations^)? (`groups` $groups^)? (`channels_last` $channels_last^)?
    (`filter_ohwi` $filter_ohwi^)? attr-dict `:`
    type($input) `,` type($filter) (`,` type($bias)^)?
  }];
}

def NN_BatchNormOp : NN_Op<"batch_norm", [Pure, InferTypeOpAdaptor,
    AllTypesMatch<["scale", "shift", "running_mean", "running_var"]>]> {
  let summary = "batch normalization (training mode)";
  let description = [{
    Normalizes each channel (dimension 1 of an NC or NCHW input) with the
    batch's mean and biased variance, then applies `scale` and `shift`. The
    running statistics are operands so that the training step can update
    them (`momentum`, PyTorch convention: new = (1 - m) * old + m * batch) and
    the evaluation step can normalize with them. Parameters are `[C]`, of the
    input's element type or f32 (mixed precision keeps them in f32).

    ```mlir
    %y = nn.batch_norm %x, %gamma, %beta, %mean, %var epsilon 1.0e-05 momentum 0.1
        : tensor<?x64x112x112xf32>, tensor<64xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$input, NN_FloatTensor:$scale,
                       NN_FloatTensor:$shift, NN_FloatTensor:$running_mean,
                       NN_FloatTensor:$running_var,
                       DefaultValuedAttr<F64Attr, "1e-5">:$epsilon,
                       DefaultValuedAttr<F64Attr, "0.1">:$momentum);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $scale `,` $shift `,` $running_mean `,` $running_var
    `epsilon` $epsilon `momentum` $momentum attr-dict `:`
    type($input) `,` type($scale)
  }];
  let hasVerifier = 1;
}

class NN_Pool2DOp<string mnemonic> : NN_Op<mnemonic, [Pure, InferTypeOpAdaptor]> {
  let results = (outs NN_FloatTensor:$result);
}

def NN_MaxPool2DOp : NN_Pool2DOp<"max_pool2d"> {
  let summary = "2-D max pooling over NCHW";
  let description = [{
    `window` and `strides` are `[h, w]` (strides default to the window),
    `padding` is `[top, bottom, left, right]`; each pad is at most half the
    window, and padded cells never win the max. With `channels_last` the
    input and result are NHWC.

    ```mlir
    %y = nn.max_pool2d %x window [3, 3] strides [2, 2] padding [1, 1, 1, 1]
        : tensor<?x64x112x112xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$input, DenseI64ArrayAttr:$window,
                       OptionalAttr<DenseI64ArrayAttr>:$strides,
                       OptionalAttr<DenseI64ArrayAttr>:$padding,
                       UnitAttr:$channels_last);
  let assemblyFormat = [{
    $input `window` $window (`strides` $strides^)? (`padding` $padding^)?
    (`channels_last` $channels_last^)? attr-dict `:` type($input)
  }];
}

def NN_AvgPool2DOp : NN_Pool2DOp<"avg_pool2d"> {
  let summary = "2-D average pooling over NCHW";
  let description = [{
    As `nn.max_pool2d`; with `exclude_padding` the divisor counts only the
    cells inside the input (PyTorch's `count_include_pad=False`).

    ```mlir
    %y = nn.avg_pool2d %x window [2, 2] strides [2, 2] : tensor<?x64x28x28xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$input, DenseI64ArrayAttr:$window,
                       OptionalAttr<DenseI64ArrayAttr>:$strides,
                       OptionalAttr<DenseI64ArrayAttr>:$padding,
                       UnitAttr:$exclude_padding, UnitAttr:$channels_last);
  let assemblyFormat = [{
    $input `window` $window (`strides` $strides^)? (`padding` $padding^)?
    (`exclude_padding` $exclude_padding^)? (`channels_last` $channels_last^)?
    attr-dict `:` type($input)
  }];
}

def NN_GlobalAvgPoolOp : NN_Op<"global_avg_pool", [Pure, InferTypeOpAdaptor]> {
  let summary = "mean over the spatial dims: [N, C, H, W] -> [N, C]";
  let description = [{
    ```mlir
    %y = nn.global_avg_pool %x : tensor<?x2048x7x7xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$input);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

//===----------------------------------------------------------------------===//
// Shape
//===----------------------------------------------------------------------===//

def NN_ReshapeOp : NN_Op<"reshape", [Pure, InferTypeOpAdaptor]> {
  let summary = "reshapes to `shape`, at most one entry -1 (inferred)";
  let description = [{
    Entries are positive sizes or a single `-1`, which takes whatever the
    element count leaves. When the input is static the element counts must
    agree.

    ```mlir
    %y = nn.reshape %x shape [-1, 2048] : tensor<?x2048x1x1xf32>
    ```
  }];
  let arguments = (ins NN_AnyTensor:$input, DenseI64ArrayAttr:$shape);
  let results = (outs NN_AnyTensor:$result);
  let assemblyFormat = "$input `shape` $shape attr-dict `:` type($input)";
  let hasFolder = 1;
}

def NN_FlattenOp : NN_Op<"flatten", [Pure, InferTypeOpAdaptor]> {
  let summary = "collapses dims [start_dim, rank) into one";
  let description = [{
    ```mlir
    %y = nn.flatten %x start_dim 1 : tensor<?x512x7x7xf32>   // tensor<?x25088xf32>
    ```
  }];
  let arguments = (ins NN_AnyTensor:$input,
                       DefaultValuedAttr<I64Attr, "1">:$start_dim);
  let results = (outs NN_AnyTensor:$result);
  let assemblyFormat = "$input `start_dim` $start_dim attr-dict `:` type($input)";
  let hasFolder = 1;
}

def NN_TransposeOp : NN_Op<"transpose", [Pure, InferTypeOpAdaptor]> {
  let summary = "permutes dims: result dim i is input dim permutation[i]";
  let description = [{
    graphc-layout puts one at each edge of a channels-last region: the images
    from NCHW to NHWC (`[0, 2, 3, 1]`) where they enter, and back
    (`[0, 3, 1, 2]`) before an op that reads NCHW (a flatten before a linear).

    ```mlir
    %y = nn.transpose %x permutation [0, 2, 3, 1] : tensor<8x3x224x224xf32>
    ```
  }];
  let arguments = (ins NN_AnyTensor:$input, DenseI64ArrayAttr:$permutation);
  let results = (outs NN_AnyTensor:$result);
  let assemblyFormat = "$input `permutation` $permutation attr-dict `:` type($input)";
}

def NN_ConcatOp : NN_Op<"concat", [Pure, InferTypeOpAdaptor]> {
  let summary = "joins its operands along `dim`";
  let description = [{
    Operands of one element type and rank, equal in every dim but `dim`
    (DenseNet's dense blocks, SqueezeNet's fire modules, ShuffleNet's channel
    halves); along dim 0 only where it is static (never the dynamic batch).

    ```mlir
    %y = nn.concat %a, %b dim 1 : tensor<?x64x28x28xf32>, tensor<?x32x28x28xf32>
    ```
  }];
  let arguments = (ins Variadic<NN_AnyTensor>:$inputs, I64Attr:$dim);
  let results = (outs NN_AnyTensor:$result);
  let assemblyFormat = "$inputs `dim` $dim attr-dict `:` type($inputs)";
  let hasFolder = 1;
}

def NN_SliceOp : NN_Op<"slice", [Pure, InferTypeOpAdaptor]> {
  let summary = "elements [start, start + size) of `dim`, unit stride";
  let description = [{
    A static window of one dim, whose extent must be static (so never the
    dynamic batch); the other dims are kept whole. Its gradient writes the incoming one back into zeros of the
    input's shape, as a concat.

    ```mlir
    %y = nn.slice %x dim 1 start 58 size 58 : tensor<?x116x28x28xf32>
    ```
  }];
  let arguments = (ins NN_AnyTensor:$input, I64Attr:$dim, I64Attr:$start, I64Attr:$size);
  let results = (outs NN_AnyTensor:$result);
  let assemblyFormat = [{
    $input `dim` $dim `start` $start `size` $size attr-dict `:` type($input)
  }];
  let hasFolder = 1;
}

def NN_GatherOp : NN_Op<"gather", [Pure, InferTypeOpAdaptor]> {
  let summary = "rows of dim 0 picked by constant indices (embedding lookup)";
  let description = [{
    `result[i, ...] = table[indices[i], ...]`: the rows of the table's first
    dim (which must be static) named by a rank-1 `i32` tensor, in any order
    and with repeats; each index must lie in `[0, rows)`. The indices must be
    an `nn.constant` for training: the gradient is `nn.scatter_add` over the
    index lists autodiff builds from them (a relative-position bias table
    gathered by an index table, as Swin's attention does).

    ```mlir
    %b = nn.gather %table, %index : tensor<169x3xf32>, tensor<2401xi32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$table, TensorOf<[I32]>:$indices);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $table `,` $indices attr-dict `:` type($table) `,` type($indices)
  }];
  let hasVerifier = 1;
}

def NN_ScatterAddOp : NN_Op<"scatter_add", [Pure, InferTypeOpAdaptor]> {
  let summary = "sums of rows of dim 0 by index lists (nn.gather's gradient)";
  let description = [{
    Row `r` of the result (of `offsets`' size minus one rows) is the sum of
    the input's rows `sources[offsets[r]]` to `sources[offsets[r + 1] - 1]`,
    added in that order (so the result does not depend on how the work is
    split); a row with no sources is zero. `offsets` is non-decreasing from 0
    to the size of `sources`, every source lies in `[0, rows of the input)`.
    Autodiff emits it for `nn.gather` with the index lists of each table row
    as constants; it accumulates in f32 for half inputs.

    ```mlir
    %dt = nn.scatter_add %dy, %offsets, %sources
        : tensor<2401x3xf32>, tensor<170xi32>, tensor<2401xi32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$input, TensorOf<[I32]>:$offsets,
                       TensorOf<[I32]>:$sources);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $offsets `,` $sources attr-dict `:` type($input) `,` type($offsets) `,`
    type($sources)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Dense layers
//===----------------------------------------------------------------------===//

def NN_LinearOp : NN_Op<"linear", [Pure, InferTypeOpAdaptor]> {
  let summary = "x * W^T + b, with W as [out, in] (PyTorch layout)";
  let description = [{
    ```mlir
    %y = nn.linear %x, %w, %b : tensor<?x2048xf32>, tensor<1000x2048xf32>, tensor<1000xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$input, NN_FloatTensor:$weight,
                       Optional<NN_FloatTensor>:$bias);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $weight (`,` $bias^)? attr-dict `:` type($input) `,` type($weight)
    (`,` type($bias)^)?
  }];
}

def NN_MatmulOp : NN_Op<"matmul", [Pure, InferTypeOpAdaptor]> {
  let summary = "(batched) matrix product with optional transposes";
  let description = [{
    Rank 2 (`[M, K] x [K, N]`) or rank 3 with equal batch dims; `transpose_a` /
    `transpose_b` swap the last two dims of an operand first.

    ```mlir
    %c = nn.matmul %a, %b transpose_b : tensor<?x784xf32>, tensor<10x784xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$lhs, NN_FloatTensor:$rhs,
                       UnitAttr:$transpose_a, UnitAttr:$transpose_b);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs (`transpose_a` $transpose_a^)? (`transpose_b` $transpose_b^)?
    attr-dict `:` type($lhs) `,` type($rhs)
  }];
}

def NN_OrthonormalizeOp : NN_Op<"orthonormalize", [Pure, AllTypesMatch<["input", "result"]>]> {
  let summary = "the rows of a matrix made orthonormal (Gram-Schmidt)";
  let description = [{
    Modified Gram-Schmidt over the rows of an `[r, n]` f32 matrix (r <= n),
    in order: row i is divided by its norm, then its projection is taken out
    of every later row. A row with a squared norm under 1e-30 (nothing left
    of it: a zero gradient's) is replaced first by a fixed pseudo-random row
    made orthogonal to the rows before it, so that the result is always
    orthonormal and never NaN. PowerSGD's low-rank factors
    (graphc-data-parallel's `grad-compression=powersgd:R`) are kept
    orthonormal with it; sums are accumulated in f64. Not differentiable: it
    only ever follows backward.

    ```mlir
    %q = nn.orthonormalize %p : tensor<4x4608xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$input);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def NN_TopkSelectOp : NN_Op<"topk_select", [Pure]> {
  let summary = "the entries of largest magnitude, with their flat indices";
  let description = [{
    Selects the `count` entries of the f32 `input` (flat) whose magnitudes
    are largest, ties going to the lower index, and writes them in index
    order: `values[j] = input[indices[j]]`. The selection is exact, and no
    sort: a radix select on the magnitudes' bits (three histogram passes,
    then one that collects). When `count` is at least 64 and at most an
    eighth of the input and of K, a sample of about 8 n / count entries
    first sets a threshold that about 4 count entries reach; one pass gathers
    those into the results, and the radix select runs over them alone (the
    exact passes over the input remain the fallback when the sample misled:
    the result is the same either way). So K > count is room the selection
    uses. `count` (an i64 scalar, clamped to [1, K]) defaults to K, the size
    of the results; the entries past it are padding, value 0 and index -1,
    where a sparse collective's set ends.
    Deep gradient compression (graphc-data-parallel's
    `grad-compression=topk:RATIO`) sends these sets. NaN counts as largest.
    Not differentiable.

    ```mlir
    %v, %i = nn.topk_select %acc count %k : tensor<64x3x3x3xf32> -> tensor<2xf32>, tensor<2xi32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$input, Optional<NN_I64Scalar>:$count);
  let results = (outs NN_FloatTensor:$values, NN_IntTensor:$indices);
  let assemblyFormat = [{
    $input (`count` $count^)? attr-dict `:` type($input) `->` type($values) `,` type($indices)
  }];
  let hasVerifier = 1;
}

def NN_ZeroAtOp : NN_Op<"zero_at", [Pure, AllTypesMatch<["input", "result"]>]> {
  let summary = "a tensor with the entries at some flat indices set to zero";
  let description = [{
    `result` is `input` with each flat position named in `indices` set to
    zero; negative indices (nn.topk_select's padding) and indices past the
    end name nothing. Deep gradient compression clears what it sent from its
    accumulated gradient and momentum with it (momentum factor masking).

    ```mlir
    %v2 = nn.zero_at %v, %i : tensor<64x3x3x3xf32>, tensor<2xi32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$input, NN_IntTensor:$indices);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = "$input `,` $indices attr-dict `:` type($input) `,` type($indices)";
  let hasVerifier = 1;
}

def NN_AttentionOp : NN_Op<"attention", [Pure, InferTypeOpAdaptor]> {
  let summary = "softmax(q k^T + biases) v without the score matrix (fused attention)";
  let description = [{
    Per group g (the batch and the heads merged): `o[g] = softmax(q[g] k[g]^T
    + sum_i biases[i][(g / bias_strides[i]) % P_i]) v[g]`, the softmax along
    the keys, with `lse[g, i]` the log of row i's softmax denominator (after
    subtracting its maximum, which it includes) for the backward. `q` is
    `[G, Lq, D]`, `k` is `[G, Lk, D]` (`[G, D, Lk]` with `transpose_k`), `v`
    is `[G, Lk, Dv]`; each bias is `[P_i, Lq, Lk]`, added to the scores of
    the groups its index map picks (a relative-position bias per head has
    stride 1 and P the heads; Swin's shift mask per window has stride the
    heads and P the windows). q, k and v are all f32, all f16 or all bf16
    (mixed precision's attention), the output in their type; `lse` and the
    biases are f32. In half, the scores, softmax and `lse` are computed in f32
    and the probabilities are rounded to the half type before they multiply v
    (FlashAttention's scheme), the output rounded once. Any scaling is the
    operands' (exporters scale q and k). graphc-fuse-attention makes it from the
    matmul-add-softmax-matmul the importer writes; the runtime computes it a
    block of queries at a time, so memory grows with L, not L^2 (the biases
    are the model's own tensors).

    ```mlir
    %o, %lse = nn.attention %q, %k, %v transpose_k
        : tensor<384x197x64xf32>, tensor<384x64x197xf32>, tensor<384x197x64xf32>
    %o, %lse = nn.attention %q, %k, %v biases(%rel, %mask : tensor<3x49x49xf32>,
        tensor<64x49x49xf32>) strides [1, 3]
        : tensor<384x49x32xf32>, tensor<384x49x32xf32>, tensor<384x49x32xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$q, NN_FloatTensor:$k, NN_FloatTensor:$v,
                       Variadic<NN_FloatTensor>:$biases, UnitAttr:$transpose_k,
                       OptionalAttr<DenseI64ArrayAttr>:$bias_strides);
  let results = (outs NN_FloatTensor:$output, NN_FloatTensor:$lse);
  let assemblyFormat = [{
    $q `,` $k `,` $v (`transpose_k` $transpose_k^)?
    (`biases` `(` $biases^ `:` type($biases) `)` `strides` $bias_strides)?
    attr-dict `:` type($q) `,` type($k) `,` type($v)
  }];
}

def NN_AttentionBackwardOp : NN_Op<"attention_backward", [Pure, InferTypeOpAdaptor]> {
  let summary = "the gradients of nn.attention's q, k, v and biases";
  let description = [{
    From the forward's operands, its output and `lse`, and the output's
    gradient `dy`: the scores are recomputed a block of queries at a time
    (FlashAttention's backward), never stored whole. Each bias's gradient
    sums the score gradients of the groups that read it. `output` and
    `grad_output` are in q's element type, `lse` f32; the gradients of q, k
    and v in theirs, the biases' f32. In half, the probabilities and the
    scores' gradient are rounded to the half type before their products
    (with f32 accumulation), the bias gradients not.

    ```mlir
    %dq, %dk, %dv = nn.attention_backward %q, %k, %v, %o, %lse, %dy transpose_k
        : tensor<384x197x64xf32>, tensor<384x64x197xf32>, tensor<384x197x64xf32>,
          tensor<384x197x64xf32>, tensor<384x197xf32>, tensor<384x197x64xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$q, NN_FloatTensor:$k, NN_FloatTensor:$v,
                       NN_FloatTensor:$output, NN_FloatTensor:$lse,
                       NN_FloatTensor:$grad_output, Variadic<NN_FloatTensor>:$biases,
                       UnitAttr:$transpose_k, OptionalAttr<DenseI64ArrayAttr>:$bias_strides);
  let results = (outs NN_FloatTensor:$grad_q, NN_FloatTensor:$grad_k, NN_FloatTensor:$grad_v,
                      Variadic<NN_FloatTensor>:$grad_biases);
  let assemblyFormat = [{
    $q `,` $k `,` $v `,` $output `,` $lse `,` $grad_output (`transpose_k` $transpose_k^)?
    (`biases` `(` $biases^ `:` type($biases) `)` `strides` $bias_strides)?
    attr-dict `:` type($q) `,` type($k) `,` type($v) `,` type($output) `,` type($lse) `,`
    type($grad_output)
  }];
}

//===----------------------------------------------------------------------===//
// Regularization and loss
//===----------------------------------------------------------------------===//

def NN_DropoutOp : NN_Op<"dropout", [Pure, AllTypesMatch<["input", "result"]>,
    DeclareOpInterfaceMethods<InferTypeOpInterface>]> {
  let summary = "inverted dropout with a seeded mask";
  let description = [{
    Zeroes each element with probability `rate` (0 <= rate < 1) and scales the
    survivors by 1 / (1 - rate); the identity in evaluation. The mask comes
    from `seed` and the step counter, so runs are reproducible.

    ```mlir
    %y = nn.dropout %x rate 5.0e-01 seed 7 : tensor<?x4096xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$input, F64Attr:$rate,
                       DefaultValuedAttr<I64Attr, "0">:$seed);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = "$input `rate` $rate `seed` $seed attr-dict `:` type($input)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def NN_SoftmaxCrossEntropyOp : NN_Op<"softmax_cross_entropy", [Pure,
    InferTypeOpAdaptor]> {
  let summary = "mean softmax cross-entropy of logits against integer labels";
  let description = [{
    `logits` is `[N, K]` float, `labels` is `[N]` i32 or i64 class indices;
    the result is the mean loss over the batch as a rank-0 f32 tensor. With
    `label_smoothing` s (0 <= s < 1) the target is (1 - s) one-hot + s / K.

    ```mlir
    %loss = nn.softmax_cross_entropy %logits, %labels label_smoothing 1.0e-01
        : tensor<?x1000xf32>, tensor<?xi32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$logits, AnyRankedTensor:$labels,
                       DefaultValuedAttr<F64Attr, "0.0">:$label_smoothing);
  let results = (outs 0DTensorOf<[F32]>:$loss);
  let assemblyFormat = [{
    $logits `,` $labels `label_smoothing` $label_smoothing attr-dict `:`
    type($logits) `,` type($labels)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Training step: state updates, gradients, optimizers
//===----------------------------------------------------------------------===//

def NN_AssignOp : NN_Op<"assign", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>,
    MemoryEffects<[MemWrite]>]> {
  let summary = "writes a new value into a parameter or state, in place";
  let description = [{
    Ops after it that `nn.load` the variable see the new value. The training
    step ends with the assigns of every updated parameter and state.

    ```mlir
    nn.assign @bn1.running_mean, %new_mean : tensor<64xf32>
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$variable, AnyStaticShapeTensor:$value);
  let assemblyFormat = "$variable `,` $value attr-dict `:` type($value)";
}

def NN_ApplyGradientOp : NN_Op<"apply_gradient", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>, AttrSizedOperandSegments,
    MemoryEffects<[MemWrite]>]> {
  let summary = "hands a parameter's gradient to the optimizer";
  let description = [{
    Written by graphc-autodiff, one per parameter, and replaced by the update
    rule of the chosen optimizer in graphc-optimizer. Between the two, passes
    may rewrite the gradient (loss scaling, allreduce).

    The gradient has the parameter's shape; its element type may be narrower
    (a half-precision gradient of a parameter kept in f32). graphc-mixed-precision
    adds `scaled_by`, a factor the update multiplies the gradient by first (the
    inverse of the loss scale), and `skip_if`, a flag: when it is not 0 the
    update leaves the parameter and its optimizer state as they are.

    ```mlir
    nn.apply_gradient @fc.weight, %grad : tensor<10x784xf32>
    nn.apply_gradient @conv1.weight, %g scaled_by %inv skip_if %found
        : tensor<64x3x7x7xf16>
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$parameter, NN_FloatTensor:$gradient,
                       Optional<NN_F32Scalar>:$grad_scale,
                       Optional<NN_F32Scalar>:$skip);
  let assemblyFormat = [{
    $parameter `,` $gradient (`scaled_by` $grad_scale^)? (`skip_if` $skip^)? attr-dict
    `:` type($gradient)
  }];
}

class NN_ConvGeometryArgs {
  dag geometry = (ins OptionalAttr<DenseI64ArrayAttr>:$strides,
                      OptionalAttr<DenseI64ArrayAttr>:$padding,
                      OptionalAttr<DenseI64ArrayAttr>:$dilations,
                      OptionalAttr<I64Attr>:$groups,
                      UnitAttr:$channels_last,
                      UnitAttr:$filter_ohwi);
  string geometryFormat = [{
    (`strides` $strides^)? (`padding` $padding^)? (`dilations` $dilations^)?
    (`groups` $groups^)? (`channels_last` $channels_last^)? (`filter_ohwi` $filter_ohwi^)?
  }];
}

def NN_Conv2DBackwardDataOp : NN_Op<"conv2d_backward_data",
    [Pure, InferTypeOpAdaptor]>, NN_ConvGeometryArgs {
  let summary = "gradient of nn.conv2d with respect to its input";
  let description = [{
    The transposed convolution of `grad_output` with `filter`, under the
    forward op's geometry; `input_size` is the forward input's `[H, W]`
    (strided convolutions lose it).

    ```mlir
    %dx = nn.conv2d_backward_data %dy, %w input_size [56, 56] strides [2, 2]
        padding [1, 1, 1, 1] : tensor<8x128x28x28xf32>, tensor<128x128x3x3xf32>
    ```
  }];
  let arguments = !con((ins NN_FloatTensor:$grad_output, NN_FloatTensor:$filter,
                            DenseI64ArrayAttr:$input_size), geometry);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = "$grad_output `,` $filter `input_size` $input_size " #
      geometryFormat # " attr-dict `:` type($grad_output) `,` type($filter)";
}

def NN_Conv2DBackwardFilterOp : NN_Op<"conv2d_backward_filter",
    [Pure, InferTypeOpAdaptor]>, NN_ConvGeometryArgs {
  let summary = "gradient of nn.conv2d with respect to its filter";
  let description = [{
    Correlates the forward `input` with `grad_output`; `kernel_size` is the
    filter's `[KH, KW]`.

    ```mlir
    %dw = nn.conv2d_backward_filter %x, %dy kernel_size [3, 3] padding [1, 1, 1, 1]
        : tensor<8x64x56x56xf32>, tensor<8x64x56x56xf32>
    ```
  }];
  let arguments = !con((ins NN_FloatTensor:$input, NN_FloatTensor:$grad_output,
                            DenseI64ArrayAttr:$kernel_size), geometry);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = "$input `,` $grad_output `kernel_size` $kernel_size " #
      geometryFormat # " attr-dict `:` type($input) `,` type($grad_output)";
}

def NN_MaxPool2DBackwardOp : NN_Op<"max_pool2d_backward",
    [Pure, InferTypeOpAdaptor]> {
  let summary = "gradient of nn.max_pool2d";
  let description = [{
    Routes each output gradient to the input cell that won its window (the
    first one on ties), recomputed from the forward `input`.

    ```mlir
    %dx = nn.max_pool2d_backward %x, %dy window [3, 3] strides [2, 2]
        padding [1, 1, 1, 1] : tensor<8x64x112x112xf32>, tensor<8x64x56x56xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$input, NN_FloatTensor:$grad_output,
                       DenseI64ArrayAttr:$window,
                       OptionalAttr<DenseI64ArrayAttr>:$strides,
                       OptionalAttr<DenseI64ArrayAttr>:$padding,
                       UnitAttr:$channels_last);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $grad_output `window` $window (`strides` $strides^)?
    (`padding` $padding^)? (`channels_last` $channels_last^)? attr-dict `:`
    type($input) `,` type($grad_output)
  }];
}

def NN_AvgPool2DBackwardOp : NN_Op<"avg_pool2d_backward",
    [Pure, InferTypeOpAdaptor]> {
  let summary = "gradient of nn.avg_pool2d";
  let description = [{
    Spreads each output gradient evenly over its window; `input_size` is the
    forward input's `[H, W]`.

    ```mlir
    %dx = nn.avg_pool2d_backward %dy input_size [28, 28] window [2, 2]
        : tensor<8x64x14x14xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$grad_output, DenseI64ArrayAttr:$input_size,
                       DenseI64ArrayAttr:$window,
                       OptionalAttr<DenseI64ArrayAttr>:$strides,
                       OptionalAttr<DenseI64ArrayAttr>:$padding,
                       UnitAttr:$exclude_padding, UnitAttr:$channels_last);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $grad_output `input_size` $input_size `window` $window (`strides` $strides^)?
    (`padding` $padding^)? (`exclude_padding` $exclude_padding^)?
    (`channels_last` $channels_last^)? attr-dict `:` type($grad_output)
  }];
}

def NN_SoftmaxCrossEntropyBackwardOp : NN_Op<"softmax_cross_entropy_backward",
    [Pure, InferTypeOpAdaptor]> {
  let summary = "gradient of nn.softmax_cross_entropy with respect to the logits";
  let description = [{
    `grad_loss * (softmax(logits) - target) / N`, with the target smoothed as
    in the forward op.

    ```mlir
    %dlogits = nn.softmax_cross_entropy_backward %dloss, %logits, %labels
        label_smoothing 1.000000e-01 : tensor<f32>, tensor<8x1000xf32>, tensor<8xi32>
    ```
  }];
  let arguments = (ins NN_F32Scalar:$grad_loss, NN_FloatTensor:$logits,
                       NN_IntTensor:$labels,
                       DefaultValuedAttr<F64Attr, "0.0">:$label_smoothing);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $grad_loss `,` $logits `,` $labels `label_smoothing` $label_smoothing attr-dict
    `:` type($grad_loss) `,` type($logits) `,` type($labels)
  }];
  let hasVerifier = 1;
}

def NN_DropoutMaskOp : NN_Op<"dropout_mask", [Pure, InferTypeOpAdaptor]> {
  let summary = "the scaled keep-mask of inverted dropout";
  let description = [{
    A tensor shaped like `shape_of` (whose values are not read) holding 0 with
    probability `rate` and 1 / (1 - rate) otherwise, drawn from a counter-based
    generator keyed by `seed` and the step counter `step`, so each step gets a
    fresh mask and a rerun the same one. Training-mode dropout is `x * mask`.
    Element i draws with counter `offset + i` (offset 0 when absent):
    graphc-data-parallel passes a rank's first index in the global batch, so
    that the ranks together draw the mask one process would.

    ```mlir
    %m = nn.dropout_mask %x, %step rate 5.000000e-01 seed 1
        : tensor<8x4096xf32>, tensor<i64>
    %m = nn.dropout_mask %x, %step offset %o rate 5.000000e-01 seed 1
        : tensor<8x4096xf32>, tensor<i64>, tensor<i64>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$shape_of, NN_I64Scalar:$step,
                       Optional<NN_I64Scalar>:$offset, F64Attr:$rate, I64Attr:$seed);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $shape_of `,` $step (`offset` $offset^)? `rate` $rate `seed` $seed attr-dict `:`
    type($shape_of) `,` type($step) (`,` type($offset)^)?
  }];
  let hasVerifier = 1;
}

def NN_ArgmaxOp : NN_Op<"argmax", [Pure, InferTypeOpAdaptor]> {
  let summary = "index of the largest element along a dimension (first on ties)";
  let description = [{
    ```mlir
    %pred = nn.argmax %logits dim 1 : tensor<8x10xf32>   // tensor<8xi64>
    ```
  }];
  let arguments = (ins NN_NumericTensor:$input, I64Attr:$dim);
  let results = (outs RankedTensorOf<[I64]>:$result);
  let assemblyFormat = "$input `dim` $dim attr-dict `:` type($input)";
}

def NN_LrScheduleOp : NN_Op<"lr_schedule", [Pure,
    DeclareOpInterfaceMethods<InferTypeOpInterface>]> {
  let summary = "the learning rate of a step, computed on the device";
  let description = [{
    For step `s` (0-based): during `warmup_steps` the rate rises linearly,
    `base_lr * (s + 1) / warmup_steps`; after it, with `t = s - warmup_steps`:
    `constant` keeps `base_lr`; `cosine` gives `final_lr + (base_lr - final_lr)
    * (1 + cos(pi * min(t, T) / T)) / 2` with `T = total_steps - warmup_steps`;
    `step` gives `base_lr * gamma ^ floor(t / step_size)`.

    ```mlir
    %lr = nn.lr_schedule %step {base_lr = 1.0e-01 : f64, decay = 1 : i32,
        final_lr = 0.0 : f64, total_steps = 1000 : i64, warmup_steps = 50 : i64}
        : tensor<i64>
    ```
  }];
  let arguments = (ins NN_I64Scalar:$step, F64Attr:$base_lr,
                       NN_LrDecay:$decay,
                       DefaultValuedAttr<I64Attr, "0">:$warmup_steps,
                       DefaultValuedAttr<I64Attr, "0">:$total_steps,
                       DefaultValuedAttr<F64Attr, "0.0">:$final_lr,
                       DefaultValuedAttr<I64Attr, "1">:$step_size,
                       DefaultValuedAttr<F64Attr, "0.1">:$gamma);
  let results = (outs NN_F32Scalar:$result);
  let assemblyFormat = "$step attr-dict `:` type($step)";
  let hasVerifier = 1;
}

// The update ops. `grad` has the parameter's shape and may have a narrower
// float type (read and widened per element). The optional `scaled_by` factor
// multiplies the gradient before anything else reads it (unscaling a
// loss-scaled gradient); with `skip_if` not 0 every result equals the operand
// it replaces (an overflowed step leaves parameters and state untouched).
class NN_OptimizerOp<string mnemonic, list<string> sameTyped> :
    NN_Op<mnemonic, [Pure, AllTypesMatch<sameTyped>, AttrSizedOperandSegments,
                     DeclareOpInterfaceMethods<InferTypeOpInterface>]>;

defvar NN_GradScaling = (ins Optional<NN_F32Scalar>:$grad_scale,
                             Optional<NN_F32Scalar>:$skip);
defvar NN_OptimizerTail = [{
  (`scaled_by` $grad_scale^)? (`skip_if` $skip^)? attr-dict
  `:` custom<OptimizerTypes>(type($param), type($grad))
}];

def NN_SgdOp : NN_OptimizerOp<"sgd", ["param", "new_param"]> {
  let summary = "plain SGD step: p - lr * (g + weight_decay * p)";
  let description = [{
    ```mlir
    %p2 = nn.sgd %p, %g, %lr weight_decay 1.000000e-04 : tensor<10x784xf32>
    ```
  }];
  let arguments = !con((ins NN_FloatTensor:$param, NN_FloatTensor:$grad,
                            NN_F32Scalar:$lr, F64Attr:$weight_decay), NN_GradScaling);
  let results = (outs NN_FloatTensor:$new_param);
  let assemblyFormat = !strconcat([{
    $param `,` $grad `,` $lr `weight_decay` $weight_decay
  }], NN_OptimizerTail);
  let hasVerifier = 1;
}

def NN_SgdMomentumOp : NN_OptimizerOp<"sgd_momentum",
    ["param", "velocity", "new_param", "new_velocity"]> {
  let summary = "SGD with momentum (PyTorch's rule), optionally Nesterov";
  let description = [{
    `d = g + weight_decay * p; v' = momentum * v + d;
    p' = p - lr * (nesterov ? d + momentum * v' : v')`. Returns `(p', v')`.

    ```mlir
    %p2, %v2 = nn.sgd_momentum %p, %g, %v, %lr momentum 9.000000e-01
        weight_decay 1.000000e-04 : tensor<64x3x7x7xf32>
    ```
  }];
  let arguments = !con((ins NN_FloatTensor:$param, NN_FloatTensor:$grad,
                            NN_FloatTensor:$velocity, NN_F32Scalar:$lr,
                            F64Attr:$momentum, F64Attr:$weight_decay, UnitAttr:$nesterov),
                       NN_GradScaling);
  let results = (outs NN_FloatTensor:$new_param, NN_FloatTensor:$new_velocity);
  let assemblyFormat = !strconcat([{
    $param `,` $grad `,` $velocity `,` $lr `momentum` $momentum `weight_decay`
    $weight_decay (`nesterov` $nesterov^)?
  }], NN_OptimizerTail);
  let hasVerifier = 1;
}

def NN_LarsOp : NN_OptimizerOp<"lars",
    ["param", "velocity", "new_param", "new_velocity"]> {
  let summary = "LARS step (You et al. 2017): a per-layer trust ratio";
  let description = [{
    `local = eta * |p| / (|g| + weight_decay * |p|)` (1 when either norm is 0);
    `v' = momentum * v + lr * local * (g + weight_decay * p); p' = p - v'`.
    Returns `(p', v')`. Batch-norm and bias parameters are usually updated with
    `nn.sgd_momentum` instead.

    ```mlir
    %p2, %v2 = nn.lars %p, %g, %v, %lr momentum 9.000000e-01
        weight_decay 5.000000e-05 eta 1.000000e-03 : tensor<64x3x7x7xf32>
    ```
  }];
  let arguments = !con((ins NN_FloatTensor:$param, NN_FloatTensor:$grad,
                            NN_FloatTensor:$velocity, NN_F32Scalar:$lr,
                            F64Attr:$momentum, F64Attr:$weight_decay, F64Attr:$eta),
                       NN_GradScaling);
  let results = (outs NN_FloatTensor:$new_param, NN_FloatTensor:$new_velocity);
  let assemblyFormat = !strconcat([{
    $param `,` $grad `,` $velocity `,` $lr `momentum` $momentum `weight_decay`
    $weight_decay `eta` $eta
  }], NN_OptimizerTail);
  let hasVerifier = 1;
}

def NN_AdamOp : NN_OptimizerOp<"adam",
    ["param", "exp_avg", "exp_avg_sq", "new_param", "new_exp_avg",
     "new_exp_avg_sq"]> {
  let summary = "Adam step (Kingma & Ba 2015; PyTorch's rule), or AdamW";
  let description = [{
    `d = g + weight_decay * p` (Adam) or `d = g` (`decoupled`, AdamW);
    `m' = beta1 * m + (1 - beta1) * d; v' = beta2 * v + (1 - beta2) * d^2;
    p' = p * (decoupled ? 1 - lr * weight_decay : 1)
         - lr * corr1 * m' / (sqrt(v') * corr2 + epsilon)`.
    `corr1 = 1 / (1 - beta1^t)` and `corr2 = 1 / sqrt(1 - beta2^t)` are the
    bias corrections of step `t` (counted from 1), rank-0 operands computed
    once per step. Returns `(p', m', v')`.

    ```mlir
    %p2, %m2, %v2 = nn.adam %p, %g, %m, %v, %lr, %c1, %c2 beta1 9.000000e-01
        beta2 0.99899999999999999 epsilon 1.000000e-08 weight_decay 0.000000e+00
        : tensor<64x3x7x7xf32>
    ```
  }];
  let arguments = !con((ins NN_FloatTensor:$param, NN_FloatTensor:$grad,
                            NN_FloatTensor:$exp_avg, NN_FloatTensor:$exp_avg_sq,
                            NN_F32Scalar:$lr, NN_F32Scalar:$corr1, NN_F32Scalar:$corr2,
                            F64Attr:$beta1, F64Attr:$beta2, F64Attr:$epsilon,
                            F64Attr:$weight_decay, UnitAttr:$decoupled),
                       NN_GradScaling);
  let results = (outs NN_FloatTensor:$new_param, NN_FloatTensor:$new_exp_avg,
                      NN_FloatTensor:$new_exp_avg_sq);
  let assemblyFormat = !strconcat([{
    $param `,` $grad `,` $exp_avg `,` $exp_avg_sq `,` $lr `,` $corr1 `,` $corr2
    `beta1` $beta1 `beta2` $beta2 `epsilon` $epsilon `weight_decay` $weight_decay
    (`decoupled` $decoupled^)?
  }], NN_OptimizerTail);
  let hasVerifier = 1;
}

def NN_NonfiniteFlagsOp : NN_Op<"nonfinite_flags", [Pure, InferTypeOpAdaptor]> {
  let summary = "flags where many tensors hold an inf or NaN: one multi-tensor pass";
  let description = [{
    The overflow check of loss scaling, over every gradient of a step in one
    kernel (as Apex's and PyTorch's multi-tensor checks): each operand's
    elements are cut into chunks of `kChunk`, every chunk is read by `kLanes`
    lanes (lane `l` reads elements `l`, `l + kLanes`, ... of its chunk:
    consecutive lanes, consecutive addresses), and the result holds one flag
    per lane of every chunk, operand after operand: 1.0 when one of the lane's
    elements is an inf or NaN, else 0.0. `nn.reduce_max` of the result is the
    check. Operands may be of any float type and shape.

    ```mlir
    %flags = nn.nonfinite_flags %g0, %g1 : tensor<64x3x7x7xf16>, tensor<64xf32>
    %found = nn.reduce_max %flags dims [0] : tensor<2048xf32>
    ```
  }];
  let arguments = (ins Variadic<NN_FloatTensor>:$inputs);
  let results = (outs RankedTensorOf<[F32]>:$flags);
  let assemblyFormat = "$inputs attr-dict `:` type($inputs)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Elements per chunk, and lanes per chunk.
    static constexpr int64_t kChunk = 32768;
    static constexpr int64_t kLanes = 1024;
    /// Chunks of a tensor of `elements` (at least one).
    static int64_t chunksOf(int64_t elements) {
      return elements <= kChunk ? 1 : (elements + kChunk - 1) / kChunk;
    }
  }];
}

def NN_SumSquaresOp : NN_Op<"sum_squares", [Pure, InferTypeOpAdaptor]> {
  let summary = "partial sums of squares of many tensors: one multi-tensor pass";
  let description = [{
    The gradient norm of clipping, over every gradient of a step in one kernel,
    laid out as `nn.nonfinite_flags`: each operand's elements are cut into
    chunks of `kChunk`, lane `l` of a chunk sums the squares (in f32, in
    order) of its elements `l`, `l + kLanes`, ..., and the result holds one
    sum per lane of every chunk, operand after operand. `nn.reduce_sum` of the
    result is the sum of the squares of every element; each lane writes its
    own sum, so it is the same on any thread count. Operands may be of any
    float type and shape.

    ```mlir
    %parts = nn.sum_squares %g0, %g1 : tensor<64x3x7x7xf16>, tensor<64xf32>
    %total = nn.reduce_sum %parts dims [0] : tensor<2048xf32>
    ```
  }];
  let arguments = (ins Variadic<NN_FloatTensor>:$inputs);
  let results = (outs RankedTensorOf<[F32]>:$sums);
  let assemblyFormat = "$inputs attr-dict `:` type($inputs)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Fusion
//===----------------------------------------------------------------------===//

def NN_FusionOp : NN_Op<"fusion", [IsolatedFromAbove, Pure, SingleBlock]> {
  let summary = "elementwise ops computed together: one kernel, one pass over memory";
  let description = [{
    Written by graphc-fuse-elementwise. The body computes, per element of one
    iteration space (the shape every result has), a chain of elementwise ops
    on the block arguments (the inputs) and yields the results. An input of
    that shape is read at each element; an input reaches a smaller shape
    through an `nn.broadcast` in the body (a per-channel scale), which costs no
    memory: it becomes an indexing map. A rank-0 input (a learning rate) is
    read as a scalar. Intermediate values never reach memory.

    The body may also end in reductions (`nn.reduce_sum`, `nn.reduce_mean`, all
    over the same dims) of values of the iteration shape, yielded as results
    of the reduced shape: batch-norm statistics and bias gradients then take
    their elementwise prologue in the same pass over memory, and the reduced
    value is never materialized.

    ```mlir
    %y, %r = nn.fusion %x, %scale : tensor<8x64x56x56xf32>, tensor<64xf32>
        -> tensor<8x64x56x56xf32>, tensor<8x64x56x56xf32> {
    ^bb0(%a: tensor<8x64x56x56xf32>, %s: tensor<64xf32>):
      %b = nn.broadcast %s to %a dims [1] : tensor<64xf32>, tensor<8x64x56x56xf32>
      %m = nn.mul %a, %b : tensor<8x64x56x56xf32>
      %q = nn.relu %m : tensor<8x64x56x56xf32>
      nn.yield %m, %q : tensor<8x64x56x56xf32>, tensor<8x64x56x56xf32>
    }
    ```
  }];
  let arguments = (ins Variadic<AnyStaticShapeTensor>:$inputs);
  let results = (outs Variadic<AnyStaticShapeTensor>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $inputs attr-dict `:` type($inputs) `->` type($results) $body
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The shape every elementwise op in the body computes and every result
    /// but the reductions' has.
    ::llvm::ArrayRef<int64_t> getIterationShape();
    /// The dims the body's reductions reduce (empty: no reduction).
    ::llvm::ArrayRef<int64_t> getReducedDims();
    /// Whether the kernel reads input `i`: an input that is only a
    /// broadcast's `shape_of` is never read (and gets no buffer).
    bool isInputRead(unsigned i);
  }];
}

def NN_MultiTensorOp : NN_Op<"multi_tensor", [IsolatedFromAbove, Pure, SingleBlock]> {
  let summary = "independent elementwise updates of many tensors: one kernel";
  let description = [{
    Written by graphc-fuse-elementwise. The body holds optimizer updates
    (`nn.sgd`, `nn.sgd_momentum`, `nn.adam`), the members, each on block
    arguments only, of any shapes; it yields every member's results, member by
    member. The kernel runs them all in one launch, as PyTorch's and Apex's
    multi-tensor apply do: each member's elements are split into blocks of a
    fixed size, the blocks of all members are one parallel loop, and each block
    finds its member with a binary search on the block index. Element i of a
    member's results is computed from element i of that member's operands
    only (and the rank-0 ones, such as the learning rate, shared by all).

    ```mlir
    %p2, %v2, %q2, %w2 = nn.multi_tensor %p, %g, %v, %lr, %q, %h, %w
        : tensor<64x3x7x7xf32>, tensor<64x3x7x7xf32>, tensor<64x3x7x7xf32>, tensor<f32>,
          tensor<64xf32>, tensor<64xf32>, tensor<64xf32>
        -> tensor<64x3x7x7xf32>, tensor<64x3x7x7xf32>, tensor<64xf32>, tensor<64xf32> {
    ^bb0(%a: tensor<64x3x7x7xf32>, %b: tensor<64x3x7x7xf32>, %c: tensor<64x3x7x7xf32>,
         %r: tensor<f32>, %d: tensor<64xf32>, %e: tensor<64xf32>, %f: tensor<64xf32>):
      %0:2 = nn.sgd_momentum %a, %b, %c, %r momentum 9.000000e-01
          weight_decay 1.000000e-04 : tensor<64x3x7x7xf32>
      %1:2 = nn.sgd_momentum %d, %e, %f, %r momentum 9.000000e-01
          weight_decay 0.000000e+00 : tensor<64xf32>
      nn.yield %0#0, %0#1, %1#0, %1#1 : tensor<64x3x7x7xf32>, tensor<64x3x7x7xf32>,
          tensor<64xf32>, tensor<64xf32>
    }
    ```
  }];
  let arguments = (ins Variadic<AnyStaticShapeTensor>:$inputs);
  let results = (outs Variadic<AnyStaticShapeTensor>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $inputs attr-dict `:` type($inputs) `->` type($results) $body
  }];
  let hasVerifier = 1;
}

def NN_YieldOp : NN_Op<"yield", [Pure, Terminator,
                                 ParentOneOf<["FusionOp", "MultiTensorOp"]>]> {
  let summary = "the results of an nn.fusion or nn.multi_tensor";
  let arguments = (ins Variadic<AnyStaticShapeTensor>:$values);
  let assemblyFormat = "$values attr-dict `:` type($values)";
}

#endif // GRAPHC_NN_OPS
