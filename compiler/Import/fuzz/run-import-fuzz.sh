#!/bin/bash
# Builds the ONNX importer's fuzzer with clang (libFuzzer + ASan + UBSan: the
# importer's sources instrumented, the nn dialect and MLIR as built) and runs
# it for a bounded time, seeded with the models test/tools/onnx-import.test
# stochastic-depth.test, timm-ops.test and onnx-opset20.test write (every op the
# importer takes, and the refused ones). Every file in
# compiler/Import/fuzz/regressions/ (inputs that once crashed it) is replayed
# first.
#
#   compiler/Import/fuzz/run-import-fuzz.sh SOURCE_DIR BUILD_DIR SECONDS
#
# A crash makes the script fail and leaves the input in BUILD_DIR/import-fuzz/;
# copy it into compiler/Import/fuzz/regressions/ with the fix.
set -euo pipefail
src=$(cd "$1" && pwd)
build=$(cd "$2" && pwd)
seconds=$3

cxx=$(command -v clang++-19 || true)
if [[ -z "$cxx" ]]; then
  echo "run-import-fuzz: SKIP: no clang++-19 (setup.sh installs it)"
  exit 77
fi
python=/usr/bin/python3
if ! "$python" -c 'import onnx, numpy' 2> /dev/null; then
  echo "run-import-fuzz: SKIP: no python3-onnx for the seed models (setup.sh installs it)"
  exit 77
fi
out=$build/import-fuzz
mkdir -p "$out/corpus" "$out/artifacts" "$out/obj"
flags=(-std=c++17 -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined
       -fno-sanitize-recover=undefined -I"$src" -I"$build" -I/usr/lib/llvm-19/include
       -D__STDC_CONSTANT_MACROS -D__STDC_FORMAT_MACROS -D__STDC_LIMIT_MACROS)
# OnnxModel.cpp alone sees ONNX and protobuf, with exceptions and RTTI (as CMake builds it).
"$cxx" "${flags[@]}" -fexceptions -frtti -DONNX_NAMESPACE=onnx -DONNX_ML=1 \
  -c "$src/compiler/Import/OnnxModel.cpp" -o "$out/obj/OnnxModel.o" &
for f in OnnxImport OnnxOps OnnxShapes OnnxTransformer OnnxConstants OnnxNormResize; do
  "$cxx" "${flags[@]}" -fno-exceptions -fno-rtti -c "$src/compiler/Import/$f.cpp" -o "$out/obj/$f.o" &
done
wait
"$cxx" "${flags[@]}" -fno-exceptions -fno-rtti -fsanitize=fuzzer \
  "$src/compiler/Import/fuzz/onnx_import_fuzzer.cc" "$out"/obj/*.o \
  "$build/lib/libGraphcNNDialect.a" -L/usr/lib/llvm-19/lib -Wl,-rpath,/usr/lib/llvm-19/lib \
  -lMLIR -lLLVM -lonnx -lonnx_proto -lprotobuf -o "$out/onnx_import_fuzzer"

"$python" "$src/test/tools/Inputs/make_onnx.py" "$out/models" > /dev/null
"$python" "$src/test/tools/Inputs/stochastic_depth.py" make "$out/models" > /dev/null
mkdir -p "$out/timm"
"$python" "$src/test/tools/Inputs/timm_ops_check.py" make "$out/timm" > /dev/null
cp "$out/timm/model.onnx" "$out/models/timm_ops.onnx"
mkdir -p "$out/opset20"
"$python" "$src/test/tools/Inputs/opset20_check.py" make "$out/opset20" --fault inline > /dev/null
cp "$out/opset20/model.onnx" "$out/models/opset20.onnx"
cp "$out"/models/*.onnx "$src/test/tools/Inputs/vit_tiny.onnx" "$out/corpus/"

regressions=("$src"/compiler/Import/fuzz/regressions/*)
if [[ -e "${regressions[0]}" ]]; then
  "$out/onnx_import_fuzzer" "${regressions[@]}"
fi
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
"$out/onnx_import_fuzzer" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=20 \
  -max_len=131072 -artifact_prefix="$out/artifacts/" -print_final_stats=1 "$out/corpus" 2>&1 |
  tail -n 25
status=${PIPESTATUS[0]}
echo "run-import-fuzz: libFuzzer exited with $status after ${seconds}s"
exit "$status"
