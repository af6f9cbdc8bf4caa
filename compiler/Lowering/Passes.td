//===- Passes.td - lowering from nn to the plan -------------*- tablegen -*-===//
//
// The lowering half of the pipeline, alphabetical. They run in the order
// lower-to-plan, plan-memory, codegen-kernels, plan-contract
// (compiler/Pipeline/Pipeline.cpp says why).
//
//===----------------------------------------------------------------------===//

#ifndef GRAPHC_LOWERING_PASSES
#define GRAPHC_LOWERING_PASSES

include "mlir/Pass/PassBase.td"

def CodegenKernels : Pass<"graphc-codegen-kernels", "::mlir::ModuleOp"> {
  let summary = "Compiles the kernel bodies to an x86-64 shared object and PTX";
  let description = [{
    CPU (`targets` cpu or all): parallel loops first, linalg to scf.parallel;
    each top-level scf.parallel becomes a launch, outlined into a function of
    the buffers it uses and [begin, end) of its outermost dimension, which the
    runtime spreads over the cores; code outside the loops runs in
    one-iteration launches. Lowered to the LLVM dialect with bare-pointer
    calling conventions, with a `graphc_kernel_<entry>(void **, int64_t begin,
    int64_t end)` entry point per launch, optimized at O3 for `cpu` with a real
    TargetMachine (so the loop vectorizer runs), emitted as an object and
    linked into a shared object with ld.lld.

    CUDA (`targets` cuda or all): parallel loops first, linalg to scf.parallel,
    tiled by 256 and mapped to blocks x threads; code left at a kernel's top
    level (full reductions, scalar updates) runs in a one-thread launch. The
    launches are outlined into one gpu.module, lowered to NVVM with bare
    pointers and serialized to PTX for sm_80 and sm_90 (libdevice from
    `cuda-path`); each kernel's launch sequence is recorded.

    The result replaces the kernel bodies:

    ```mlir
    plan.binary cpu_x86_64 elf_shared_object cpu "x86-64-v3" symbols ["k0", ...] data "..." launches [...]
    plan.binary cuda_sm90 ptx cpu "sm_90" symbols ["k0", ...] data "..." launches [...]
    ```
  }];
  let options = [
    Option<"targets", "targets", "std::string", /*default=*/"\"cpu\"",
           "Devices to generate kernels for: cpu, cuda (sm_80 and sm_90) or all">,
    Option<"cudaPath", "cuda-path", "std::string", /*default=*/"\"/usr/local/cuda\"",
           "CUDA toolkit holding nvvm/libdevice/libdevice.10.bc">,
    Option<"cpu", "cpu", "std::string", /*default=*/"\"x86-64-v3\"",
           "CPUs the x86-64 kernels are generated for (LLVM -mcpu names, comma-separated: a shared object each)">,
    Option<"dumpDir", "dump-dir", "std::string", /*default=*/"\"\"",
           "Also write each binary into this directory (for disassembly checks)">,
  ];
  let dependentDialects = ["::graphc::plan::PlanDialect",
                           "::mlir::LLVM::LLVMDialect",
                           "::mlir::NVVM::NVVMDialect",
                           "::mlir::cf::ControlFlowDialect",
                           "::mlir::gpu::GPUDialect",
                           "::mlir::scf::SCFDialect"];
}

def LowerToPlan : Pass<"graphc-lower-to-plan", "::mlir::ModuleOp"> {
  let summary = "Bufferizes the step functions into plan buffers and commands";
  let description = [{
    Algorithm: 1) every nn.parameter / nn.state becomes a `plan.buffer` in the
    state region plus a `plan.state` initializer; 2) each func.func becomes a
    `plan.program`: its arguments and every op result get an arena buffer,
    `nn.load` names the state buffer itself, `nn.reshape` / `nn.flatten` make an
    alias buffer, `nn.constant`s become (deduplicated) constant buffers;
    3) convolutions, matmuls and pools become library commands; every other
    computing op becomes a generated kernel (its body a func.func in the nested
    `module @kernels`) and a `plan.launch`; 4) a value assigned to a state is
    written straight into the state's buffer when no later op reads the old
    state (otherwise a `plan.copy` does it).

    ```mlir
    // before
    %w = nn.load @fc.weight : tensor<10x784xf32>
    %y = nn.linear %x, %w : tensor<32x784xf32>, tensor<10x784xf32>
    %r = nn.relu %y : tensor<32x10xf32>
    // after
    plan.gemm [@train_step.input0, @fc.weight] -> [@train_step.v0] {transpose_b}
    plan.launch @k0 [@train_step.v0] -> [@train_step.v1]
    ```
  }];
  let dependentDialects = ["::graphc::plan::PlanDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::func::FuncDialect",
                           "::mlir::gpu::GPUDialect",
                           "::mlir::linalg::LinalgDialect",
                           "::mlir::math::MathDialect",
                           "::mlir::memref::MemRefDialect",
                           "::mlir::scf::SCFDialect"];
}

def PlanContract : Pass<"graphc-plan-contract", "::mlir::ModuleOp"> {
  let summary = "Fails compilation if anything the runtime cannot execute is left";
  let description = [{
    The module must hold only plan ops: no nn or func ops, no kernel bodies;
    every buffer placed inside its region, aliases matching what they alias;
    every kernel defined by a binary of every requested target; every program's
    commands naming buffers of a region they may touch.
  }];
  let dependentDialects = ["::graphc::plan::PlanDialect"];
}

def PlanMemory : Pass<"graphc-plan-memory", "::mlir::ModuleOp"> {
  let summary = "Liveness-based placement of every buffer in one arena";
  let description = [{
    Algorithm: 0) a concat whose operands are consecutive byte ranges of its
    result (every dim before the concat dim of extent 1), each operand a whole
    buffer that only one earlier command writes (not in place, not a program
    input or output), is removed: each operand becomes an alias of the result
    at its offset, so its producer writes it where the concat would have
    copied it; 1) per program, the live interval of each arena buffer is
    [first write, last read] over the command order (program inputs live from
    the start, outputs to the end; an alias keeps what it aliases alive);
    2) an elementwise kernel whose input dies at that command and has the size
    of an output writes that output over it (declared with `in_place`);
    3) intervals are placed greedily, largest first, at the lowest 64-byte
    aligned offset that overlaps no placed interval alive at the same time
    (TFLite's arena planner); 4) state and constant buffers are packed in
    order. Sets `arena_size` on each program and module attributes
    `plan.arena_size`, `plan.tensor_bytes` (the sum without reuse),
    `plan.state_size`, `plan.constant_size`.
  }];
  let dependentDialects = ["::graphc::plan::PlanDialect"];
}

#endif // GRAPHC_LOWERING_PASSES
