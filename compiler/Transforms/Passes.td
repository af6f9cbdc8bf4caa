//===- Passes.td - graphc compiler passes ------------------*- tablegen -*-===//
//
// The compiler's passes, alphabetical. The order they run in, and why, is in
// compiler/Pipeline/Pipeline.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef GRAPHC_TRANSFORMS_PASSES
#define GRAPHC_TRANSFORMS_PASSES

include "mlir/Pass/PassBase.td"

def Autodiff : Pass<"graphc-autodiff", "::mlir::ModuleOp"> {
  let summary = "Differentiates @forward into @train_step (reverse mode)";
  let description = [{
    Seeds d(loss) = 1, walks @forward backwards applying one gradient rule per
    op (conv2d, pools, linear, matmul, loss, reductions, broadcasts and every
    elementwise op), sums adjoints at fan-out, and ends each parameter's
    gradient with `nn.apply_gradient`, in the order backward completes them.
    Only values that depend on a parameter get adjoints. Needs static shapes
    and decomposed training ops; a parameter that does not reach the loss is
    an error that names it.

    ```mlir
    // before
    func.func @forward(%x: tensor<8x4xf32>, %y: tensor<8xi32>) -> tensor<f32> {
      %w = nn.load @fc.weight : tensor<3x4xf32>
      %0 = nn.linear %x, %w : tensor<8x4xf32>, tensor<3x4xf32>
      %1 = nn.softmax_cross_entropy %0, %y label_smoothing 0.0 : ...
      return %1 : tensor<f32>
    // after
    func.func @train_step(...) -> tensor<f32> {
      ...
      %d = nn.softmax_cross_entropy_backward %one, %0, %y ...
      %dw = nn.matmul %d, %x transpose_a : tensor<8x3xf32>, tensor<8x4xf32>
      nn.apply_gradient @fc.weight, %dw : tensor<3x4xf32>
      return %1 : tensor<f32>
    ```

    With `micro-batches=N` (gradient accumulation) @train_step takes N times
    @forward's batch and runs @forward on each of N consecutive slices of it
    in turn, each followed by its own backward, seeded with d(loss_i) = 1/N:
    the gradients summed over the micro-batches are those of the mean loss
    over the step's batch, and only one micro-batch's activations are alive
    at a time. Each `nn.apply_gradient` follows the last micro-batch's
    contribution; the step returns the mean of the micro-batches' losses.
    Batch norm normalizes each micro-batch by its own statistics and updates
    the running ones once per micro-batch, as PyTorch does when it
    accumulates.
  }];
  let options = [
    Option<"microBatches", "micro-batches", "int64_t", /*default=*/"1",
           "Micro-batches whose gradients each step sums (gradient accumulation)">
  ];
  let dependentDialects = ["::graphc::nn::NNDialect"];
}

def BuildEvalStep : Pass<"graphc-build-eval-step", "::mlir::ModuleOp"> {
  let summary = "Adds @eval_step: inference-mode forward, logits and hit count";
  let description = [{
    Clones @forward as `@eval_step(images, labels) -> (logits, correct)`:
    batch norm normalizes with the running statistics (one per-channel
    multiply-add), dropout is the identity, and the loss becomes the number of
    rows whose argmax equals the label (an i64 scalar).

    ```mlir
    func.func @eval_step(%images: tensor<8x784xf32>, %labels: tensor<8xi32>)
        -> (tensor<8x10xf32>, tensor<i64>)
    ```

    With `micro-batches=N`, @eval_step takes the training step's batch (N
    times @forward's) and evaluates it in N slices: the logits concatenated,
    the hits summed.
  }];
  let options = [
    Option<"microBatches", "micro-batches", "int64_t", /*default=*/"1",
           "Micro-batches of @forward's batch in each step">
  ];
  let dependentDialects = ["::graphc::nn::NNDialect"];
}

def BuildInfer : Pass<"graphc-build-infer", "::mlir::ModuleOp"> {
  let summary = "Makes @infer, the inference-only program of graphc compile --forward";
  let description = [{
    A training model's @forward becomes `@infer(images) -> logits`: the
    labels argument and the loss are dropped. An inference model's @infer
    (graphc import --forward: any inputs and outputs) is kept as it is.
    Either way batch norm normalizes with the running statistics and dropout
    is the identity, as in @eval_step. Nothing trains: no gradients, no
    optimizer, and every parameter keeps its value.

    ```mlir
    func.func @infer(%images: tensor<8x1x28x28xf32>) -> tensor<8x10xf32>
    ```
  }];
  let dependentDialects = ["::graphc::nn::NNDialect"];
}

def DataParallel : Pass<"graphc-data-parallel", "::mlir::ModuleOp"> {
  let summary = "Averages every gradient across ranks in overlapped, bucketed allreduces";
  let description = [{
    Algorithm: 1) take the gradients of @train_step's `nn.apply_gradient`s (a
    constant gradient is the same on every rank and is left alone) in the
    order backward completes them; 2) pack them into buckets of at most
    `bucket-mb` MiB (the first of at most `first-bucket-mb`, so the first
    collective starts early, as PyTorch DDP does); 3) move the updates to the
    end of the step, bucket by bucket; 4) start each bucket's
    `dist.allreduce_start mean` right after its last gradient is computed (and
    read by any op that wants the rank's own value), so it overlaps the rest
    of backward; 5) wait for each bucket just before the first op that reads
    one of its gradients (the updates, or the overflow check of loss scaling,
    which must see the reduced gradients so that every rank skips the same
    steps); 6) offset the dropout masks by the rank (below).

    The world size is not in the IR: the runtime divides by the number of
    ranks the job has, and a one-rank job skips the collectives. Dropout
    masks draw from the rank's place in the global batch (an `offset` of
    `@graphc.rank` times the mask's size; graphrun sets the state), so the
    ranks together drop what one process would. `overlap=false` starts every
    bucket only once backward is done (the baseline overlap is measured
    against).

    7) `grad-compression=powersgd:R` then rewrites the buckets for PowerSGD
    (GradCompression.h): each gradient whose rank-r factors are under half
    its size leaves its bucket and travels as `P = (G + E) Q` (allreduce sum,
    orthonormalized) and `Q = (G + E)^T P` (allreduce mean), with the error
    `E` and the warm-started `Q` as states; the optimizer gets `P Q^T`.
    `grad-compression=fp16` is `allreduce-dtype=fp16`.

    ```mlir
    // before
    %dw2 = nn.matmul ...
    nn.apply_gradient @fc2.weight, %dw2 : tensor<10x64xf32>
    %dw1 = nn.matmul ...
    nn.apply_gradient @fc1.weight, %dw1 : tensor<64x784xf32>
    // after
    %dw2 = nn.matmul ...
    %f0 = dist.allreduce_start mean %dw2 bucket 0 : tensor<10x64xf32>
    %dw1 = nn.matmul ...
    %f1 = dist.allreduce_start mean %dw1 bucket 1 : tensor<64x784xf32>
    %r0 = dist.allreduce_wait %f0 : tensor<10x64xf32>
    nn.apply_gradient @fc2.weight, %r0 : tensor<10x64xf32>
    %r1 = dist.allreduce_wait %f1 : tensor<64x784xf32>
    nn.apply_gradient @fc1.weight, %r1 : tensor<64x784xf32>
    ```
  }];
  let dependentDialects = ["::graphc::dist::DistDialect"];
  let options = [
    Option<"bucketMb", "bucket-mb", "double", /*default=*/"25.0",
           "Most MiB of gradients per allreduce bucket (PyTorch DDP's bucket_cap_mb)">,
    Option<"firstBucketMb", "first-bucket-mb", "double", /*default=*/"1.0",
           "Most MiB in the first bucket, which backward completes first">,
    Option<"allreduceDtype", "allreduce-dtype", "std::string", /*default=*/"\"\"",
           "Wire type of f32 gradients: empty or fp32 (as computed), fp16 (compressed)">,
    Option<"overlap", "overlap", "bool", /*default=*/"true",
           "Start each bucket as backward completes it (false: all after backward)">,
    Option<"gradCompression", "grad-compression", "std::string", /*default=*/"\"none\"",
           "none, fp16 (as allreduce-dtype=fp16), powersgd:RANK (low-rank factors "
           "with error feedback, PowerSGD) or topk:RATIO[:WARMUP_STEPS] (deep gradient "
           "compression: sparse sets with momentum correction)">,
    Option<"momentum", "momentum", "double", /*default=*/"0.9",
           "For topk: the optimizer's momentum, applied before the selection (0 for sgd)">,
    Option<"weightDecay", "weight-decay", "double", /*default=*/"1e-4",
           "For topk: the optimizer's weight decay, added before the selection">,
  ];
}

def DecomposeTrainingOps : Pass<"graphc-decompose-training-ops", "::mlir::ModuleOp"> {
  let summary = "Rewrites training batch norm and dropout into simpler ops";
  let description = [{
    In @forward, `nn.batch_norm` becomes per-channel `nn.reduce_mean`s (batch
    mean and biased variance) plus elementwise normalize and affine ops, and
    the running statistics are updated with `nn.assign` (unbiased variance,
    PyTorch's momentum convention). `nn.dropout` becomes `x * nn.dropout_mask`
    keyed by its seed and the step counter `@graphc.step`.

    With `sync-bn` the batch statistics are those of the global batch across
    the ranks of a data-parallel job (PyTorch's SyncBatchNorm): each rank's
    per-channel mean, then its mean of squared deviations from the global
    mean, go through `dist.allreduce mean` (every rank holds the same number
    of examples), and Bessel's correction of the running variance counts the
    global batch, from `@graphc.world_size`, a state the runtime sets to the
    number of ranks.

    ```mlir
    // before
    %y = nn.batch_norm %x, %g, %b, %m, %v epsilon 1.0e-05 momentum 0.1 : ...
    // after
    %mean = nn.reduce_mean %x dims [0, 2, 3] : tensor<8x4x5x5xf32>
    %xc = nn.sub %x, %mean_b : tensor<8x4x5x5xf32>
    ...
    nn.assign @bn.running_mean, %new_mean : tensor<4xf32>
    ```
  }];
  let dependentDialects = ["::graphc::nn::NNDialect", "::graphc::dist::DistDialect"];
  let options = [
    Option<"syncBn", "sync-bn", "bool", /*default=*/"false",
           "Batch statistics over the global batch of all ranks (dist.allreduce)">,
  ];
}

def FuseAttention : Pass<"graphc-fuse-attention", "::mlir::ModuleOp"> {
  let summary = "Replaces matmul, softmax, matmul by nn.attention";
  let description = [{
    Finds attention as graphc import writes it, in every function: a batched
    `nn.matmul` of q `[G, Lq, D]` and k (`transpose_b`: `[G, Lk, D]`; else
    `[G, D, Lk]`), possibly reshaped to `[B, H, Lq, Lk]` and added to
    broadcast biases (between reshapes, as Swin adds its relative-position
    bias per head and its shift mask per window: each becomes an
    nn.attention bias with its group stride), a softmax over the
    last dim decomposed as reduce_max, sub, exp, reduce_sum, div (each
    intermediate read only by the next), reshaped back to `[G, Lq, Lk]` and
    multiplied by v `[G, Lk, Dv]`; and replaces it with one `nn.attention`,
    whose runtime computes a block of queries at a time: no `[G, Lq, Lk]`
    tensor is stored, in forward or (through `nn.attention_backward`)
    backward. f32 only. graphc compile runs it before autodiff when it fuses
    (not with `--no-fuse`, whose plan is the unfused reference), for every
    target: the CPU and CUDA backends both run nn.attention.
  }];
  let dependentDialects = ["::graphc::nn::NNDialect"];
}

def FuseElementwise : Pass<"graphc-fuse-elementwise", "::mlir::ModuleOp"> {
  let summary = "Groups chains of elementwise ops into nn.fusion regions";
  let description = [{
    In every step function, walks the ops in order and puts each elementwise
    op (relu, neg, exp, log, rsqrt, add, sub, mul, div, max, select, cmp,
    cast) and each `nn.broadcast` into the group of the ops that produce its
    operands, when the result is legal; each group of two or more becomes one
    `nn.fusion`, which lowers to one kernel: one pass over memory, the
    intermediates in registers, a broadcast an indexing map.

    - Multiple consumers: a member used outside its group becomes one of the
      fusion's results (a multi-output kernel); nothing is recomputed.
    - One iteration space: every member computes the same shape; a broadcast
      joins only to read a group input (its operand comes from outside).
    - No cycles: a group is emitted where its last member was, so no member
      may have a user outside the group before that point. This is also why
      nothing fuses across a library op (a convolution, a gemm, a pool, a
      reduction): the library op sits between producer and consumer.
    - State reads stay before state writes: a load (or a reshape of one) is
      a view of the state's buffer, so no member reading a state moves past
      an `nn.assign` to that state.
    - At most `max-operands` inputs plus results per group (the kernel's
      buffer count). Both limits must be at least 2; `graphc compile
      --no-fuse` is the way to turn fusion off.

    Then the optimizer updates (`nn.sgd`, `nn.sgd_momentum`, `nn.adam`; not
    `nn.lars`, whose per-tensor norms are reductions) are batched, in program
    order, into `nn.multi_tensor` ops of at most `max-batch-operands` buffers
    (256: 2 KiB of kernel parameters on CUDA, whose limit is 4 KiB), one
    launch each instead of one per parameter. A batch is emitted at its last
    member; the `nn.assign`s writing back earlier members move after it when
    nothing in between reads or writes their state, and a member whose result
    is read earlier stays out.

    Reductions take their elementwise prologue: an `nn.reduce_sum` or
    `nn.reduce_mean` (f32) of a fusion's result, or of a lone elementwise op's,
    becomes another result of that fusion, computed in the same pass (batch-norm
    statistics, bias and batch-norm parameter gradients); the reduced value
    stops being a result when nothing else reads it. A fusion's reductions all
    reduce the same dims (the loop nest's reduction loops), and the reduction
    is computed where the fusion is, which is legal since it reads nothing
    else. The loss, pooling and the other non-elementwise kernels are left
    alone.

    ```mlir
    // before
    %b = nn.broadcast %s to %x dims [1] : tensor<64xf32>, tensor<8x64x56x56xf32>
    %m = nn.mul %x, %b : tensor<8x64x56x56xf32>
    %r = nn.relu %m : tensor<8x64x56x56xf32>
    // after: one kernel
    %r = nn.fusion %x, %s : tensor<8x64x56x56xf32>, tensor<64xf32> -> tensor<8x64x56x56xf32> {
    ^bb0(%a: tensor<8x64x56x56xf32>, %c: tensor<64xf32>):
      %0 = nn.broadcast %c to %a dims [1] : tensor<64xf32>, tensor<8x64x56x56xf32>
      %1 = nn.mul %a, %0 : tensor<8x64x56x56xf32>
      %2 = nn.relu %1 : tensor<8x64x56x56xf32>
      nn.yield %2 : tensor<8x64x56x56xf32>
    }
    ```
  }];
  let options = [
    Option<"maxOperands", "max-operands", "int64_t", /*default=*/"32",
           "Most buffers (inputs + results) one fused kernel may take">,
    Option<"maxBatchOperands", "max-batch-operands", "int64_t", /*default=*/"256",
           "Most buffers (inputs + results) one nn.multi_tensor may take">,
  ];
  let dependentDialects = ["::graphc::nn::NNDialect"];
}

def Layout : Pass<"graphc-layout", "::mlir::ModuleOp"> {
  let summary = "Puts activations channels-last (NHWC) through convolutions and pooling";
  let description = [{
    With `layout=nhwc`, in `@forward` and `@eval_step` (after batch norm and
    dropout are decomposed, before autodiff, so backward inherits the layout):
    every convolution computes on NHWC activations (`channels_last`), and so
    does every pool, elementwise op, broadcast and reduction whose activation
    operand is NHWC already. Broadcast and reduction dims move with their
    dims (a per-channel scale broadcasts along dim 3, batch-norm statistics
    reduce dims [0, 1, 2], a channel concat or slice works on dim 3), and a global average pool becomes the mean over
    dims [1, 2], whose [N, C] result is the NCHW op's. A transpose is inserted
    where an NCHW value enters the region (the images) and where an op the
    pass leaves in NCHW (a flatten, a reshape, a reduction whose remaining
    dims would change order) reads a value from it. Filters stay OIHW with
    `filters=oihw`; with `filters=ohwi` each convolution reads its filter
    through a transpose to OHWI (`filter_ohwi`, what cuDNN's channels-last
    tensor-core kernels take), so backward's filter gradient comes out OHWI
    and the transpose's gradient puts it back: parameters, optimizer state
    and checkpoints stay OIHW. Ops already `channels_last` are left alone. The numbers are the NCHW step's, up to the order of sums in the
    library convolutions and the reductions. `layout=nchw` changes nothing.

    ```mlir
    // before
    %c = nn.conv2d %x, %w : tensor<8x3x32x32xf32>, tensor<16x3x3x3xf32>
    %r = nn.relu %c : tensor<8x16x30x30xf32>
    // after
    %t = nn.transpose %x permutation [0, 2, 3, 1] : tensor<8x3x32x32xf32>
    %c = nn.conv2d %t, %w channels_last : tensor<8x32x32x3xf32>, tensor<16x3x3x3xf32>
    %r = nn.relu %c : tensor<8x30x30x16xf32>
    ```
  }];
  let options = [
    Option<"layout", "layout", "std::string", /*default=*/"\"nhwc\"",
           "Activation layout: nhwc (channels last) or nchw (as written)">,
    Option<"filters", "filters", "std::string", /*default=*/"\"oihw\"",
           "Filter layout of channels-last convolutions: oihw (as stored) or ohwi">,
  ];
  let dependentDialects = ["::graphc::nn::NNDialect"];
}

def MixedPrecision : Pass<"graphc-mixed-precision", "::mlir::ModuleOp"> {
  let summary = "FP16 or BF16 training: half-precision math and storage, loss scaling";
  let description = [{
    Runs after graphc-autodiff, before graphc-optimizer, on @train_step and
    @eval_step. Rules:

    - `nn.conv2d`, `nn.conv2d_backward_data`, `nn.conv2d_backward_filter`,
      `nn.linear` and `nn.matmul` read half operands and produce half results
      (the library accumulates in f32). Parameters stay f32 (the master
      copies); the half copy of a weight is one `nn.cast` at its load, shared
      by forward and backward.
    - `nn.attention` and `nn.attention_backward` read q, k and v (backward:
      also the output and its gradient) in half and give half results; their
      biases, the log-sum-exp and the biases' gradients stay f32. The runtime
      computes the scores and the softmax in f32 and rounds the probabilities
      (and the scores' gradient) to half only for their products, as
      PyTorch's autocast runs scaled-dot-product attention in half.
    - Pooling, `nn.reshape` and `nn.flatten` keep their data operand's type.
    - Every other op computes in f32: batch-norm statistics, the loss,
      reductions, elementwise math and the optimizer. A half operand gets an
      `nn.cast` to f32 in front of that one reader, which fusion folds into
      the reader's kernel.
    - Activations are stored in half: a value with the batch dimension that
      has more than one reader is rounded to half once, where it is computed,
      and read from there (that is where AMP saves memory: what backward
      keeps). A value with one reader stays f32; it lives inside a fused
      kernel.
    - Gradients of weights are half (they come from half convolutions);
      `nn.apply_gradient` takes them as they are and the update widens them.

    Loss scaling (`loss-scale`, FP16 only; `dynamic` by default): the
    backward seed d(loss) = 1 becomes the scale S (state
    `@graphc.loss_scale`); after the last gradient, one `nn.nonfinite_flags`
    pass over every gradient and an `nn.reduce_max` give `found` (1.0 on
    overflow); every `nn.apply_gradient` moves after it with
    `scaled_by 1/S skip_if found`, so graphc-optimizer folds unscaling into
    the updates and skips all of them on overflow. `@graphc.skipped_steps`
    counts skipped steps. Dynamic: S starts at `initial-loss-scale`, doubles
    after `loss-scale-window` finite steps in a row and halves on overflow,
    never below 1 (PyTorch's GradScaler, with a floor). A number gives a
    static S. On a skipped step the step counter does not advance (see
    graphc-optimizer), so the learning-rate schedule and Adam's bias
    correction count applied updates only; batch-norm running statistics
    were already updated by the forward pass, as in PyTorch.

    ```mlir
    // before
    %y = nn.conv2d %x, %w : tensor<8x3x32x32xf32>, tensor<16x3x3x3xf32>
    // after (precision=fp16)
    %wh = nn.cast %w : tensor<16x3x3x3xf32> to f16
    %xh = nn.cast %x : tensor<8x3x32x32xf32> to f16
    %y = nn.conv2d %xh, %wh : tensor<8x3x32x32xf16>, tensor<16x3x3x3xf16>
    ```
  }];
  let options = [
    Option<"precision", "precision", "std::string", /*default=*/"\"fp16\"",
           "fp16 or bf16">,
    Option<"lossScale", "loss-scale", "std::string", /*default=*/"\"\"",
           "dynamic (fp16's default), none (bf16's default) or a static scale">,
    Option<"initialScale", "initial-loss-scale", "double", /*default=*/"65536.0",
           "Dynamic scaling's first scale">,
    Option<"window", "loss-scale-window", "int64_t", /*default=*/"2000",
           "Finite steps in a row after which dynamic scaling doubles the scale">,
  ];
  let dependentDialects = ["::graphc::nn::NNDialect"];
}

def Optimizer : Pass<"graphc-optimizer", "::mlir::ModuleOp"> {
  let summary = "Replaces nn.apply_gradient with the optimizer's in-place update";
  let description = [{
    Each `nn.apply_gradient` becomes `nn.sgd`, `nn.sgd_momentum` (optionally
    Nesterov), `nn.lars` or `nn.adam` (AdamW: `decoupled`), with momentum
    buffers declared as state named `<param>.momentum_buffer` and Adam's moments
    as `<param>.exp_avg` and `<param>.exp_avg_sq` (PyTorch's names). Adam's
    bias corrections are rank-0 ops of the step counter, computed once per
    step. Weight decay skips rank-1 parameters (batch-norm
    scales and shifts, biases) unless `exclude-bn-bias=false`; LARS updates
    them with plain momentum (You et al. 2017). The learning rate is an
    `nn.lr_schedule` of the step counter `@graphc.step`, which the step
    increments. With `clip-grad-norm=X`, every gradient is scaled by
    `min(1, X / (norm + 1e-6))`, the norm being the L2 norm of all of them
    together (after loss scaling's unscale, as PyTorch's `clip_grad_norm_`
    after `GradScaler.unscale_`): the factor joins each update's
    `scaled_by`, and every update moves after the last gradient.

    With `ema-decay=D`, the step ends by moving an exponential moving average
    of every parameter and of the model's own float states (batch norm's
    running statistics) towards their new values: `@graphc.ema.X += w (X -
    @graphc.ema.X)`, w = 1 - D, or 1 at the first update (a copy), counted by
    `@graphc.ema_updates` (PyTorch's `AveragedModel` with
    `get_ema_multi_avg_fn(D)` and `use_buffers=True`). `@eval_ema_step` is
    `@eval_step` on the averages.

    ```mlir
    // before
    nn.apply_gradient @fc.weight, %dw : tensor<10x784xf32>
    // after
    %p = nn.load @fc.weight : tensor<10x784xf32>
    %v = nn.load @fc.weight.momentum_buffer : tensor<10x784xf32>
    %p2, %v2 = nn.sgd_momentum %p, %dw, %v, %lr momentum 9.000000e-01
        weight_decay 1.000000e-04 : tensor<10x784xf32>
    nn.assign @fc.weight, %p2 : tensor<10x784xf32>
    nn.assign @fc.weight.momentum_buffer, %v2 : tensor<10x784xf32>
    ```
  }];
  let options = [
    Option<"optimizer", "optimizer", "std::string", /*default=*/"\"momentum\"",
           "sgd, momentum, nesterov, lars, adam or adamw">,
    Option<"lr", "lr", "double", /*default=*/"0.1", "Base learning rate">,
    Option<"momentum", "momentum", "double", /*default=*/"0.9",
           "Momentum (all but sgd)">,
    Option<"weightDecay", "weight-decay", "double", /*default=*/"1e-4",
           "L2 weight decay">,
    Option<"excludeBnBias", "exclude-bn-bias", "bool", /*default=*/"true",
           "No weight decay (and no LARS scaling) for rank-1 parameters">,
    Option<"larsEta", "lars-eta", "double", /*default=*/"0.001",
           "LARS trust coefficient">,
    Option<"beta1", "adam-beta1", "double", /*default=*/"0.9",
           "Adam's first-moment decay">,
    Option<"beta2", "adam-beta2", "double", /*default=*/"0.999",
           "Adam's second-moment decay">,
    Option<"epsilon", "adam-eps", "double", /*default=*/"1e-8",
           "Adam's denominator term">,
    Option<"lrDecay", "lr-decay", "std::string", /*default=*/"\"constant\"",
           "After warmup: constant, cosine or step">,
    Option<"warmupSteps", "warmup-steps", "int64_t", /*default=*/"0",
           "Steps of linear warmup">,
    Option<"totalSteps", "total-steps", "int64_t", /*default=*/"0",
           "Length of the cosine schedule, warmup included">,
    Option<"finalLr", "final-lr", "double", /*default=*/"0.0",
           "Learning rate at the end of the cosine schedule">,
    Option<"decayStepSize", "decay-step-size", "int64_t", /*default=*/"1",
           "Steps between step decays">,
    Option<"decayGamma", "decay-gamma", "double", /*default=*/"0.1",
           "Factor of each step decay">,
    Option<"clipGradNorm", "clip-grad-norm", "double", /*default=*/"0.0",
           "Largest L2 norm of all gradients together (0: no clipping)">,
    Option<"emaDecay", "ema-decay", "double", /*default=*/"0.0",
           "Decay of the weights' exponential moving average (0: none)">
  ];
  let dependentDialects = ["::graphc::nn::NNDialect"];
}

def Rematerialize : Pass<"graphc-rematerialize", "::mlir::ModuleOp"> {
  let summary = "Recomputes cheap forward values in backward instead of keeping them";
  let description = [{
    Whatever forward computes and backward reads stays in memory from forward
    to backward: for batch norm followed by ReLU, the centred activation, the
    normalized one and ReLU's output, three activations per layer where one
    would do. This pass makes backward recompute such values from what it
    keeps anyway, with the same ops on the same operands, so every bit is the
    same and fusion folds the recomputation into the kernel that reads it.

    In `@train_step`, forward ends at the op computing the returned loss. In
    forward order, each value of at least `min-bytes` forward keeps for
    backward that an elementwise op or a broadcast computes is recomputed
    when its cone is cheap: walking
    its operands back through elementwise ops and broadcasts whose values are
    not kept (values chosen earlier are walked through, never kept again),
    stopping at kept values, states and constants, values at most 1/8 of its
    size and any other op, the cone has at most `max-ops` ops, and its
    leaves that are not kept yet take fewer bytes than the value (they are
    kept from then on). A state read in the cone must not be overwritten by an
    `nn.assign` before backward's first read. The cone is cloned just before
    that read, and every backward use takes the clone; a cloned broadcast
    measures a same-shaped leaf instead of its forward `shape_of`.

    ```mlir
    // before: %n and %r live from forward to backward
    %n = nn.mul %c, %s : tensor<8x64x56x56xf32>       // %c: centred, kept anyway
    %r = nn.relu %n : tensor<8x64x56x56xf32>
    ...                                               // the loss, then backward
    %dw = nn.conv2d_backward_filter %r, %dy ...
    // after: forward keeps %c only
    %n2 = nn.mul %c, %s2 : tensor<8x64x56x56xf32>
    %r2 = nn.relu %n2 : tensor<8x64x56x56xf32>
    %dw = nn.conv2d_backward_filter %r2, %dy ...
    ```
  }];
  let options = [
    Option<"maxOps", "max-ops", "int64_t", /*default=*/"16",
           "Most ops one recomputed value may clone">,
    Option<"libraryInputs", "library-inputs", "bool", /*default=*/"true",
           "Also recompute values a library op (convolution, pool, gemm) reads in "
           "backward, which must then be written to memory again">,
    Option<"minBytes", "min-bytes", "int64_t", /*default=*/"65536",
           "Values smaller than this are kept, not recomputed: they hold next to "
           "no memory, and each clone of a value smaller than the activations it "
           "meets is a kernel launch of its own (batch norm's per-channel scale, "
           "cloned into every cone that reads it, was 250 launches per "
           "ResNet-50 step)">,
  ];
  let dependentDialects = ["::graphc::nn::NNDialect"];
}

def InputNormalize : Pass<"graphc-input-normalize", "::mlir::ModuleOp"> {
  let summary = "Takes the images as 8-bit pixels and normalizes them in the step";
  let description = [{
    The model's images (`@forward`'s first input, or `@infer`'s) become i8,
    each byte an unsigned pixel value 0 to 255, and the step begins with
    what a data loader would otherwise do on the host: `(x / 255 - mean) /
    std`, as one multiply-add per element (`x * (1 / (255 std)) - mean /
    std`) that fusion folds into one kernel with the cast. `mean` and `std`
    hold one value for every element, or one per channel of NCHW images.
    A quarter of the bytes cross to the device, and the host does no
    arithmetic on them.

    ```mlir
    // before, with mean=0.5 std=0.25
    func.func @forward(%x: tensor<8x1x28x28xf32>, %y: tensor<8xi32>) -> tensor<f32> {
      %0 = nn.relu %x : tensor<8x1x28x28xf32>
    // after
    func.func @forward(%x: tensor<8x1x28x28xi8>, %y: tensor<8xi32>) -> tensor<f32> {
      %f = nn.cast %x : tensor<8x1x28x28xi8> to f32
      %s = nn.constant dense<0.0156862754> : tensor<f32>
      %sb = nn.broadcast %s to %f dims [] : tensor<f32>, tensor<8x1x28x28xf32>
      %m = nn.mul %f, %sb : tensor<8x1x28x28xf32>
      %b = nn.constant dense<-2.000000e+00> : tensor<f32>
      %bb = nn.broadcast %b to %f dims [] : tensor<f32>, tensor<8x1x28x28xf32>
      %n = nn.add %m, %bb : tensor<8x1x28x28xf32>
      %0 = nn.relu %n : tensor<8x1x28x28xf32>
    ```
  }];
  let options = [
    ListOption<"mean", "mean", "double", "The mean of each channel, or of all (in [0, 1])">,
    ListOption<"std", "std", "double", "The standard deviation of each channel, or of all">
  ];
  let dependentDialects = ["::graphc::nn::NNDialect"];
}

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

def SimplifyReductions : Pass<"graphc-simplify-reductions", "::mlir::ModuleOp"> {
  let summary = "Replaces sums that are known without a pass over memory";
  let description = [{
    Autodiff of batch norm's centring `d = x - mean(x)` sends the mean the
    negated sum of d's gradient, `g * s + 2c * d` (s, c per channel): one more
    reduction over the activation, after which the input's gradient takes one
    more pass too. The sum is `s * sum(g) + 2c * sum(d)`, backward computes
    `sum(g)` anyway (the bias gradient), and `sum(d)` is exactly zero. So:

    Each `nn.reduce_sum` of a float value is written as a linear combination
    of atoms, through `nn.add`, `nn.sub`, `nn.neg` and multiplications by
    values constant along the reduced dims (broadcasts that map no operand
    dim onto one, and products of them), at most 8 terms. When some atom
    sums to zero (`x - broadcast(reduce_mean(x))`, the mean over the same
    dims) and every other one is already summed over the same dims earlier in
    the block, the sum becomes the combination of those sums (each term its
    signed factors, broadcast at the sum's shape, times the sum), or a zero
    constant; not when that would make it one earlier sum as it is (two
    values one buffer). Afterwards the function's trivially dead ops are
    erased. The result is exact where the original rounds: the sum of
    deviations from a mean is zero only up to rounding in float32.

    Sums of values centred on another mean (a synchronized batch norm's
    global one, which the local deviations do not sum to zero about) are left
    alone.

    ```mlir
    // before
    %g = ...                                        // d(loss)/d(normalized)
    %sg = nn.reduce_sum %g dims [0, 1, 2] keep_dims : tensor<8x56x56x64xf32>
    %t = nn.mul %g, %scale : tensor<8x56x56x64xf32>   // %scale = broadcast(%s) dims [3]
    %u = nn.mul %coef, %d : tensor<8x56x56x64xf32>    // %d = %x - broadcast(mean(%x))
    %dd = nn.add %t, %u : tensor<8x56x56x64xf32>
    %n = nn.neg %dd : tensor<8x56x56x64xf32>
    %dmean = nn.reduce_sum %n dims [0, 1, 2] keep_dims : tensor<8x56x56x64xf32>
    // after: %dmean = (-s) * %sg, no pass over the activation
    %s1 = nn.broadcast %s to %sg dims [3] : tensor<64xf32>, tensor<1x1x1x64xf32>
    %n1 = nn.neg %s1 : tensor<1x1x1x64xf32>
    %dmean = nn.mul %n1, %sg : tensor<1x1x1x64xf32>
    ```
  }];
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
       or 4, static but for the batch dimension, non-empty and at most 2^31
       values per example, labels a rank-1 i32/i64
       tensor with the same batch dimension;
    3. it returns one rank-0 f32 loss computed by `nn.softmax_cross_entropy`
       against `%labels` itself;
    4. its body holds only `nn` ops and `func.return`, in one block;
    5. every `nn.parameter` is read by `@forward` (an unread one would get no
       gradient).

    With `forward-only` (graphc compile --forward) the function may instead
    be `@infer`, an inference model (graphc import --forward): any number of
    static, non-empty tensors in, at least one out, only `nn` ops in one
    block, no loss and no `nn.assign`.

    ```mlir
    module {
      nn.parameter @fc.weight : tensor<10x784xf32> = zeros
      func.func @forward(%images: tensor<?x784xf32>, %labels: tensor<?xi32>)
          -> tensor<f32> { ... }
    }
    ```
  }];
  let options = [
    Option<"forwardOnly", "forward-only", "bool", /*default=*/"false",
           "Also accept an inference model (@infer), for an inference-only plan">,
  ];
}

#endif // GRAPHC_TRANSFORMS_PASSES
