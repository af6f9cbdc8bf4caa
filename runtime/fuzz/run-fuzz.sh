#!/bin/bash
# Builds the plan-loader fuzzer with clang (libFuzzer + ASan + UBSan) and runs
# it for a bounded time, seeded with valid plans graphc compiles (each with an
# embedded x86-64 kernel library and its launch table: elementwise, fused,
# reduction and multi-tensor kernels; one with PTX too; gradient allreduce
# buckets and synchronized batch norm's collectives; PowerSGD's factors;
# fused attention) and with the kernel library alone. Every file in
# runtime/fuzz/regressions/ (inputs that once crashed it) is replayed first.
#
# Then, for a third of SECONDS more, the reader of `graphrun --predict
# --step-profile REPORT.json` and the prediction made from what it reads
# (step_profile_fuzzer.cc), beside one of those plans, seeded with that plan's
# real --profile --report.
#
#   runtime/fuzz/run-fuzz.sh SOURCE_DIR BUILD_DIR SECONDS
#
# A crash makes the script fail and leaves the input in BUILD_DIR/fuzz/; copy it
# into runtime/fuzz/regressions/ with the fix.
set -euo pipefail
src=$(cd "$1" && pwd)
build=$(cd "$2" && pwd)
seconds=$3

cxx=$(command -v clang++-19 || command -v clang++ || true)
if [[ -z "$cxx" ]]; then
  echo "run-fuzz: SKIP: no clang++ (setup.sh installs clang-19)"
  exit 77
fi
out=$build/fuzz
mkdir -p "$out/corpus" "$out/artifacts"
"$cxx" -std=c++17 -O1 -g -fno-omit-frame-pointer \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$src" -I"$build" \
  "$src/runtime/fuzz/plan_loader_fuzzer.cc" "$src/runtime/core/plan_loader.cc" \
  "$src/runtime/core/plan_verifier.cc" "$src/runtime/core/command_checks.cc" \
  "$src/runtime/core/binary_checks.cc" "$src/runtime/core/dataflow_checks.cc" \
  "$src/runtime/core/elf_check.cc" "$src/contract/plan_integrity.cc" \
  "$src/contract/printable.cc" "$src/contract/launch_record.cc" \
  "$src/runtime/core/plan_printer.cc" "$src/contract/status.cc" -lsodium \
  -o "$out/plan_loader_fuzzer"
loader=("$src/runtime/core/plan_loader.cc" "$src/runtime/core/plan_verifier.cc"
  "$src/runtime/core/command_checks.cc" "$src/runtime/core/binary_checks.cc"
  "$src/runtime/core/dataflow_checks.cc" "$src/runtime/core/elf_check.cc"
  "$src/contract/plan_integrity.cc" "$src/contract/printable.cc"
  "$src/contract/launch_record.cc" "$src/contract/status.cc")
"$cxx" -std=c++17 -O1 -g -fno-omit-frame-pointer \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$src" -I"$build" \
  "$src/runtime/fuzz/step_profile_fuzzer.cc" "$src/runtime/train/scaling_model.cc" \
  "${loader[@]}" -lsodium -o "$out/step_profile_fuzzer"

"$build/bin/graphc" compile "$src/models/mnist_softmax.mlir" --batch-size 2 --target=all \
  -o "$out/corpus/mnist_softmax.plan" > /dev/null
"$build/bin/graphc" compile "$src/models/fmnist_cnn.mlir" --batch-size 2 \
  --dump-kernels="$out" -o "$out/corpus/fmnist_cnn.plan" > /dev/null
cp "$out/cpu_x86_64.so" "$out/corpus/fmnist_cnn_kernels.so"
"$build/bin/graphc" compile "$src/models/resnet_tiny.mlir" --batch-size 1 --no-fuse \
  --optimizer adam -o "$out/corpus/resnet_tiny_unfused_adam.plan" > /dev/null
# The CPU's default layout is NHWC; the convolutions and pools of NCHW too.
"$build/bin/graphc" compile "$src/models/resnet_tiny.mlir" --batch-size 1 --layout=nchw \
  -o "$out/corpus/resnet_tiny_nchw.plan" > /dev/null
# Collectives: many small gradient buckets in flight at once, fp16 on the
# wire, and synchronized batch norm's blocking allreduces between them.
"$build/bin/graphc" compile "$src/models/resnet_tiny.mlir" --batch-size 2 --sync-bn \
  --bucket-mb 0.01 --allreduce-dtype fp16 -o "$out/corpus/resnet_tiny_collectives.plan" > /dev/null

# PowerSGD: sum and mean buckets of factors, the Q phase's waits after
# backward, Gram-Schmidt kernels, the error feedback's states.
"$build/bin/graphc" compile "$src/models/fmnist_cnn.mlir" --batch-size 2 \
  --grad-compression=powersgd:2 -o "$out/corpus/fmnist_cnn_powersgd.plan" > /dev/null

# Top-k: sparse collectives (values, indices and dense buffers in threes),
# the radix selection and masking kernels, the warm-up's count.
"$build/bin/graphc" compile "$src/models/fmnist_cnn.mlir" --batch-size 2 \
  --grad-compression=topk:0.01:8 -o "$out/corpus/fmnist_cnn_topk.plan" > /dev/null

# Fused attention (Attention and AttentionBackward commands, schema v7).
"$build/bin/graphc" compile "$src/test/tools/Inputs/long_attention.mlir" --batch-size 1 \
  -o "$out/corpus/long_attention.plan" > /dev/null
# and with biases (a per-head bias and a per-window mask: bias_strides).
"$build/bin/graphc" compile "$src/test/tools/Inputs/window_attention.mlir" --batch-size 1 \
  -o "$out/corpus/window_attention.plan" > /dev/null
# and in half (q, k, v, o and their gradients BF16; lse and the biases F32).
"$build/bin/graphc" compile "$src/test/tools/Inputs/window_attention.mlir" --batch-size 1 \
  --amp=bf16 -o "$out/corpus/window_attention_bf16.plan" > /dev/null

regressions=("$src"/runtime/fuzz/regressions/*)
if [[ -e "${regressions[0]}" ]]; then
  "$out/plan_loader_fuzzer" "${regressions[@]}"
fi
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
"$out/plan_loader_fuzzer" -max_total_time="$seconds" -rss_limit_mb=2048 \
  -artifact_prefix="$out/artifacts/" -print_final_stats=1 "$out/corpus" 2>&1 | tail -n 25
status=${PIPESTATUS[0]}
echo "run-fuzz: libFuzzer exited with $status after ${seconds}s"
if [[ $status -ne 0 ]]; then exit "$status"; fi

# The step profile: a real report of the PowerSGD plan (its collectives are
# P and Q buckets) and of fused attention's, as seeds.
mkdir -p "$out/profile-corpus" "$out/tmp"
# The fuzzer writes each input to a file of its own (its reader takes a path):
# under the build directory, not left behind in /tmp.
export TMPDIR=$out/tmp
export GRAPHC_FUZZ_PLAN=$out/corpus/fmnist_cnn_powersgd.plan
"$build/bin/graphrun" "$GRAPHC_FUZZ_PLAN" --steps 4 --warmup 1 --profile \
  --report "$out/profile-corpus/report.json" > /dev/null
profile_seconds=$(( seconds / 3 > 1 ? seconds / 3 : 1 ))
"$out/step_profile_fuzzer" -max_total_time="$profile_seconds" -rss_limit_mb=2048 -timeout=10 \
  -artifact_prefix="$out/artifacts/profile-" -print_final_stats=1 "$out/profile-corpus" 2>&1 |
  tail -n 12
status=${PIPESTATUS[0]}
echo "run-fuzz: the step-profile fuzzer exited with $status after ${profile_seconds}s"
exit "$status"
