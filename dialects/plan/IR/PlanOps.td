//===- PlanOps.td - the plan dialect ------------------------*- tablegen -*-===//
//
// The `plan` dialect mirrors runtime/schema/plan.fbs one to one: buffers placed
// in the arena / state / constant regions, state initializers, constants,
// generated kernels and their binaries, and programs made of commands (kernel
// launches, library calls, copies). graphc-lower-to-plan produces it from the
// training step, graphc-plan-memory places the buffers, graphc-codegen-kernels
// turns the kernel bodies into binaries, graphc-plan-contract checks that
// nothing the runtime cannot execute is left, and PlanExport writes the file.
//
//===----------------------------------------------------------------------===//

#ifndef GRAPHC_PLAN_OPS
#define GRAPHC_PLAN_OPS

include "mlir/IR/OpBase.td"
include "mlir/IR/EnumAttr.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/IR/BuiltinAttributes.td"

def Plan_Dialect : Dialect {
  let name = "plan";
  let summary = "The runtime contract: buffers, kernels and commands";
  let description = [{
    Each op is a table of runtime/schema/plan.fbs. Buffers are module-level
    symbols with a memref type (shape and element type), a region and, once
    graphc-plan-memory has run, a byte offset; commands name their operands by
    symbol, as the file names them by index.
  }];
  let cppNamespace = "::graphc::plan";
  let useDefaultAttributePrinterParser = 1;
}

def Plan_Region : I32EnumAttr<"Region", "the memory a buffer lives in", [
      I32EnumAttrCase<"arena", 0>,
      I32EnumAttrCase<"state", 1>,
      I32EnumAttrCase<"constant", 2>
    ]> {
  let cppNamespace = "::graphc::plan";
  let genSpecializedAttr = 0;
}
def Plan_RegionAttr : EnumAttr<Plan_Dialect, Plan_Region, "region">;

def Plan_Initializer : I32EnumAttr<"Initializer", "how a state starts", [
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
  let cppNamespace = "::graphc::plan";
  let genSpecializedAttr = 0;
}
def Plan_InitializerAttr : EnumAttr<Plan_Dialect, Plan_Initializer, "initializer">;

def Plan_Target : I32EnumAttr<"Target", "a kernel binary's target", [
      I32EnumAttrCase<"cpu_x86_64", 0>,
      I32EnumAttrCase<"cuda_sm80", 1>,
      I32EnumAttrCase<"cuda_sm90", 2>
    ]> {
  let cppNamespace = "::graphc::plan";
  let genSpecializedAttr = 0;
}
def Plan_TargetAttr : EnumAttr<Plan_Dialect, Plan_Target, "target">;

def Plan_BinaryFormat : I32EnumAttr<"BinaryFormat", "a kernel binary's format", [
      I32EnumAttrCase<"elf_shared_object", 0>,
      I32EnumAttrCase<"ptx", 1>
    ]> {
  let cppNamespace = "::graphc::plan";
  let genSpecializedAttr = 0;
}
def Plan_BinaryFormatAttr : EnumAttr<Plan_Dialect, Plan_BinaryFormat, "format">;

def Plan_Reduction : I32EnumAttr<"Reduction", "how a collective combines ranks", [
      I32EnumAttrCase<"sum", 0>,
      I32EnumAttrCase<"mean", 1>
    ]> {
  let cppNamespace = "::graphc::plan";
  let genSpecializedAttr = 0;
}
def Plan_ReductionAttr : EnumAttr<Plan_Dialect, Plan_Reduction, "reduction">;

class Plan_Op<string mnemonic, list<Trait> traits = []> :
    Op<Plan_Dialect, mnemonic, traits>;

//===----------------------------------------------------------------------===//
// Module-level tables
//===----------------------------------------------------------------------===//

def Plan_BufferOp : Plan_Op<"buffer", [Symbol]> {
  let summary = "a tensor's memory: shape, element type, region, offset";
  let description = [{
    `alias` makes the buffer a view of another one: a reshape (same bytes,
    another shape), or with `+ N` the bytes from N on (a concat's operand
    placed where the concat puts it); graphc-plan-memory gives it the offset
    of what it aliases, plus N.

    ```mlir
    plan.buffer @train_step.v12 : memref<32x64x56x56xf32> in arena at 1048576
    plan.buffer @conv1.weight : memref<64x3x7x7xf32> in state at 0
    plan.buffer @train_step.v13 : memref<32x200704xf32> in arena alias @train_step.v12
    plan.buffer @train_step.v14 : memref<2x64xf32> in arena alias @train_step.v15 + 512
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, TypeAttrOf<AnyStaticShapeMemRef>:$type,
                       Plan_RegionAttr:$region, OptionalAttr<I64Attr>:$offset,
                       OptionalAttr<FlatSymbolRefAttr>:$alias,
                       OptionalAttr<I64Attr>:$alias_offset);
  let assemblyFormat = [{
    $sym_name `:` $type `in` $region (`at` $offset^)? (`alias` $alias^)?
    (`+` $alias_offset^)? attr-dict
  }];
  let extraClassDeclaration = [{
    mlir::MemRefType getMemRefType() { return llvm::cast<mlir::MemRefType>(getType()); }
    /// Bytes the buffer covers; i1 is stored as one byte.
    int64_t getSizeInBytes();
  }];
  let hasVerifier = 1;
}

def Plan_StateOp : Plan_Op<"state"> {
  let summary = "a persistent tensor (parameter, optimizer buffer, counter) and its initializer";
  let description = [{
    ```mlir
    plan.state @conv1.weight = kaiming_normal_fan_out trainable
    plan.state @fc.bias = constant 0.5
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$buffer, Plan_InitializerAttr:$init,
                       DefaultValuedAttr<F64Attr, "0.0">:$value, UnitAttr:$trainable);
  let assemblyFormat = "$buffer `=` $init ($value^)? (`trainable` $trainable^)? attr-dict";
}

def Plan_ConstantOp : Plan_Op<"constant"> {
  let summary = "the contents of a constant buffer";
  let description = [{
    ```mlir
    plan.constant @cst0 = dense<1.0> : tensor<f32>
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$buffer, ElementsAttr:$value);
  let assemblyFormat = "$buffer `=` $value attr-dict";
}

def Plan_KernelOp : Plan_Op<"kernel", [Symbol]> {
  let summary = "a generated kernel: its name, the ops it computes, its arity";
  let description = [{
    Until graphc-codegen-kernels runs, its body is `func.func @<name>` in the
    nested `module @kernels`, with inputs then outputs as memref arguments.

    ```mlir
    plan.kernel @k3 ops ["nn.mul"] inputs 2 outputs 1 bytes [64, 64, 64] elementwise
    ```

    `bytes` is the exact size of each argument (inputs, then outputs): the
    code was generated for those shapes, so a launch must pass buffers of
    exactly those sizes.

    `elementwise`: an output may be written over a same-sized input, since
    element i of each output is computed from element i of the inputs.
    `groups` (one per argument) narrows that for a kernel of independent
    parts (an nn.multi_tensor): an output may overwrite only an input of its
    own group; an input of group -1 (shared by all parts) never.
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, StrArrayAttr:$ops,
                       I64Attr:$num_inputs, I64Attr:$num_outputs,
                       DenseI64ArrayAttr:$arg_bytes, UnitAttr:$elementwise,
                       OptionalAttr<DenseI64ArrayAttr>:$groups);
  let assemblyFormat = [{
    $sym_name `ops` $ops `inputs` $num_inputs `outputs` $num_outputs
    `bytes` $arg_bytes (`elementwise` $elementwise^)? (`groups` $groups^)? attr-dict
  }];
  let extraClassDeclaration = [{
    /// Whether output `output` may be written over input `input`.
    bool mayOverwrite(unsigned output, unsigned input);
  }];
  let hasVerifier = 1;
}

def Plan_BinaryOp : Plan_Op<"binary"> {
  let summary = "the compiled kernels of one target";
  let description = [{
    Every binary says how to launch each symbol: per symbol, its launches in
    order, each an entry of the binary, the grid and block sizes, and which of
    the kernel's buffers (inputs, then outputs) are the entry's pointer
    parameters. On the CPU (`cpu` names the x86-64 level) a launch's grid is
    `[iterations, 1, 1]` and its block `[1, 1, 1]`: the runtime spreads
    iterations of the launch's outermost loop over the cores.

    ```mlir
    plan.binary cpu_x86_64 elf_shared_object cpu "x86-64-v3" symbols ["k0"] data "\7FELF..."
        launches [[{entry = "k0_l0", grid = array<i32: 32, 1, 1>,
                    block = array<i32: 1, 1, 1>, args = array<i32: 0, 1>} ] ]
    ```

    For PTX (`cpu` names the SM) each launch is a cuLaunchKernel:

    ```mlir
    plan.binary cuda_sm90 ptx cpu "sm_90" symbols ["k0"] data ".version 8.0 ..."
        launches [[{entry = "k0_kernel", grid = array<i32: 98, 1, 1>,
                    block = array<i32: 256, 1, 1>, args = array<i32: 0, 1>} ] ]
    ```
  }];
  let arguments = (ins Plan_TargetAttr:$target, Plan_BinaryFormatAttr:$format,
                       StrAttr:$cpu, StrArrayAttr:$symbols, StrAttr:$data,
                       OptionalAttr<ArrayAttr>:$launches);
  let assemblyFormat = [{
    $target $format `cpu` $cpu `symbols` $symbols `data` $data
    (`launches` $launches^)? attr-dict
  }];
  let hasVerifier = 1;
}

def Plan_ProgramOp : Plan_Op<"program", [Symbol, NoTerminator,
    SingleBlock, NoRegionArguments]> {
  let summary = "an entry point the runtime calls: its I/O buffers and commands";
  let description = [{
    ```mlir
    plan.program @train_step inputs [@train_step.images, @train_step.labels]
        outputs [@train_step.loss] {
      plan.conv2d [@train_step.images, @conv1.weight] -> [@train_step.v0] {...}
      plan.launch @k0 [@train_step.v0] -> [@train_step.v1]
    }
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, FlatSymbolRefArrayAttr:$inputs,
                       FlatSymbolRefArrayAttr:$outputs,
                       OptionalAttr<I64Attr>:$arena_size);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $sym_name `inputs` $inputs `outputs` $outputs (`arena` $arena_size^)?
    attr-dict-with-keyword $body
  }];
}

//===----------------------------------------------------------------------===//
// Commands
//===----------------------------------------------------------------------===//

class Plan_CommandOp<string mnemonic, int minInputs, int maxInputs,
                     dag extraArgs = (ins), string extraFormat = ""> :
    Plan_Op<mnemonic, [HasParent<"ProgramOp">,
                       DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let arguments = !con((ins FlatSymbolRefArrayAttr:$inputs,
                            FlatSymbolRefArrayAttr:$outputs,
                            OptionalAttr<DenseI64ArrayAttr>:$in_place), extraArgs);
  let assemblyFormat = extraFormat # [{
    $inputs `->` $outputs (`in_place` $in_place^)? attr-dict
  }];
  code commandDecls = [{
    static constexpr int kMinInputs = }] # minInputs # [{;
    static constexpr int kMaxInputs = }] # maxInputs # [{;
  }];
  let extraClassDeclaration = commandDecls;
}

def Plan_LaunchOp : Plan_CommandOp<"launch", 0, 1024,
    (ins FlatSymbolRefAttr:$kernel), "$kernel"> {
  let summary = "run a generated kernel";
  let description = [{
    `in_place` gives, per output, the input it overwrites or -1.

    ```mlir
    plan.launch @k7 [@train_step.v3, @train_step.v4] -> [@train_step.v3] in_place [0]
    ```
  }];
}

// `channels_last`: the activations are NHWC buffers; `filter_ohwi` (only
// with it): the filter and its gradient are OHWI, else OIHW.
defvar ConvArgs = (ins DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$padding,
                       DenseI64ArrayAttr:$dilations, I64Attr:$groups,
                       UnitAttr:$channels_last, UnitAttr:$filter_ohwi);
defvar PoolArgs = (ins DenseI64ArrayAttr:$window, DenseI64ArrayAttr:$strides,
                       DenseI64ArrayAttr:$padding, UnitAttr:$exclude_padding,
                       UnitAttr:$channels_last);

def Plan_Conv2DOp : Plan_CommandOp<"conv2d", 2, 3, ConvArgs> {
  let summary = "library convolution: [x, w(, bias)] -> [y], NCHW or NHWC / OIHW or OHWI";
}
def Plan_Conv2DBackwardDataOp : Plan_CommandOp<"conv2d_backward_data", 2, 2, ConvArgs> {
  let summary = "library convolution gradient: [dy, w] -> [dx]";
}
def Plan_Conv2DBackwardFilterOp : Plan_CommandOp<"conv2d_backward_filter", 2, 2, ConvArgs> {
  let summary = "library convolution gradient: [x, dy] -> [dw]";
}
def Plan_GemmOp : Plan_CommandOp<"gemm", 2, 3,
    (ins UnitAttr:$transpose_a, UnitAttr:$transpose_b)> {
  let summary = "library matrix product: [a, b(, bias)] -> [c], rank 2 or batched rank 3";
}
def Plan_MaxPool2DOp : Plan_CommandOp<"max_pool2d", 1, 1, PoolArgs> {
  let summary = "library max pooling: [x] -> [y]";
}
def Plan_AvgPool2DOp : Plan_CommandOp<"avg_pool2d", 1, 1, PoolArgs> {
  let summary = "library average pooling: [x] -> [y]";
}
def Plan_MaxPool2DBackwardOp : Plan_CommandOp<"max_pool2d_backward", 2, 2, PoolArgs> {
  let summary = "library max pooling gradient: [x, dy] -> [dx]";
}
def Plan_AvgPool2DBackwardOp : Plan_CommandOp<"avg_pool2d_backward", 1, 1, PoolArgs> {
  let summary = "library average pooling gradient: [dy] -> [dx]";
}
// Attention takes up to 4 biases after its operands (kMaxAttentionBiases),
// one per entry of bias_strides; the backward writes one gradient per bias
// after dq, dk and dv.
def Plan_AttentionOp : Plan_CommandOp<"attention", 3, 7,
    (ins UnitAttr:$transpose_k, OptionalAttr<DenseI64ArrayAttr>:$bias_strides)> {
  let summary = "fused attention: [q, k, v, biases...] -> [o, lse] (nn.attention); f32, "
                "or q, k, v, o in f16/bf16";
}
def Plan_AttentionBackwardOp : Plan_CommandOp<"attention_backward", 6, 10,
    (ins UnitAttr:$transpose_k, OptionalAttr<DenseI64ArrayAttr>:$bias_strides)> {
  let summary = "fused attention gradient: [q, k, v, o, lse, do, biases...] -> "
                "[dq, dk, dv, dbiases...]";
}
def Plan_CopyOp : Plan_CommandOp<"copy", 1, 1> {
  let summary = "copy one buffer into another of the same size";
}

def Plan_AllreduceStartOp : Plan_CommandOp<"allreduce_start", 1, 1024,
    (ins Plan_ReductionAttr:$reduction, I64Attr:$bucket, OptionalAttr<TypeAttr>:$wire_type,
         UnitAttr:$sparse, OptionalAttr<I64Attr>:$sent_entries),
    "(`sparse` $sparse^)? $reduction `bucket` $bucket (`wire` $wire_type^)? "
    "(`sends` $sent_entries^)?"> {
  let summary = "start reducing a bucket of buffers across ranks, in place";
  let description = [{
    The outputs are the inputs (declared in place): the communicator reduces
    them while later commands run. Until the `plan.allreduce_wait` of the
    same bucket, no command may touch their bytes. A `sparse` one takes
    threes of buffers, values (f32) and indices (i32) of one set each, then
    the dense f32 buffer that receives the sum (or mean) of every rank's set
    (dist.allreduce_start's sparse form); `sends` is its `sent_entries`.

    ```mlir
    plan.allreduce_start mean bucket 0 [@train_step.v7, @train_step.v9]
        -> [@train_step.v7, @train_step.v9] in_place [0, 1]
    ```
  }];
}
def Plan_AllreduceWaitOp : Plan_CommandOp<"allreduce_wait", 1, 1024,
    (ins I64Attr:$bucket, UnitAttr:$sparse), "(`sparse` $sparse^)? `bucket` $bucket"> {
  let summary = "wait until a bucket's allreduce has finished";
  let description = [{
    Names the same buffers as its start, in the same order.

    ```mlir
    plan.allreduce_wait bucket 0 [@train_step.v7, @train_step.v9]
        -> [@train_step.v7, @train_step.v9] in_place [0, 1]
    ```
  }];
}

#endif // GRAPHC_PLAN_OPS
