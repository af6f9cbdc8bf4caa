#!/bin/bash
# Builds the image readers' fuzzer with clang (libFuzzer + ASan + UBSan) and
# runs it for a bounded time, seeded with JPEGs (baseline, progressive, gray,
# 4:2:0, optimized Huffman tables), PNGs (RGBA, palette, 16-bit gray) and tar shards of them (ustar, GNU long names, pax
# headers) that Python writes here. Every file in runtime/fuzz/images_regressions/
# (inputs that once crashed it) is replayed first.
#
#   runtime/fuzz/run-images-fuzz.sh SOURCE_DIR BUILD_DIR SECONDS
#
# A crash makes the script fail and leaves the input in BUILD_DIR/images-fuzz/;
# copy it into runtime/fuzz/images_regressions/ with the fix.
set -euo pipefail
src=$(cd "$1" && pwd)
build=$(cd "$2" && pwd)
seconds=$3

cxx=$(command -v clang++-19 || command -v clang++ || true)
if [[ -z "$cxx" ]]; then
  echo "run-images-fuzz: SKIP: no clang++ (setup.sh installs clang-19)"
  exit 77
fi
if ! /usr/bin/python3 -c 'import PIL' 2> /dev/null; then
  echo "run-images-fuzz: SKIP: no python3-pil for the seed images (setup.sh installs it)"
  exit 77
fi
out=$build/images-fuzz
mkdir -p "$out/corpus" "$out/artifacts" "$out/tmp"
# The fuzzer writes each input to a file (the readers take paths): under the
# build directory, not left behind in /tmp.
export TMPDIR=$out/tmp
"$cxx" -std=c++17 -O1 -g -fno-omit-frame-pointer \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$src" -I"$build" \
  "$src/runtime/fuzz/images_fuzzer.cc" "$src/runtime/train/images.cc" \
  "$src/contract/printable.cc" "$src/contract/status.cc" -lturbojpeg -lpng16 \
  -o "$out/images_fuzzer"

# Seeds: the first byte 0 marks a tar shard, 1 a JPEG.
/usr/bin/python3 - "$out/corpus" <<'PY'
import io, sys, tarfile
from PIL import Image
out = sys.argv[1]
def jpeg(size, mode="RGB", **kw):
    image = Image.new(mode, size)
    image.putdata([((x * 7) % 256, (y * 5) % 256, (x ^ y) % 256)[:len(mode)] if mode == "RGB"
                   else (x * y) % 256 for y in range(size[1]) for x in range(size[0])])
    b = io.BytesIO()
    image.save(b, "JPEG", **kw)
    return b.getvalue()
images = {
    "baseline": jpeg((40, 30), quality=90),
    "progressive": jpeg((33, 17), progressive=True),
    "gray": jpeg((20, 20), "L"),
    "420": jpeg((48, 32), subsampling=2),
    "optimized": jpeg((64, 16), optimize=True),
}
def png(size, mode):
    image = Image.new(mode, size)
    b = io.BytesIO()
    image.save(b, "PNG")
    return b.getvalue()
images["png-rgba"] = png((17, 9), "RGBA")
images["png-palette"] = png((8, 8), "P")
images["png-gray16"] = png((5, 7), "I;16")
for name, data in images.items():
    open(f"{out}/{name}.jpg", "wb").write(b"\x01" + data)
for fmt in (tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT):
    b = io.BytesIO()
    with tarfile.open(fileobj=b, mode="w", format=fmt) as t:
        for i, (name, data) in enumerate(images.items()):
            key = ("d" * 110 + "/" if i == 2 else "") + f"{i:04d}"
            for ext, payload in (("jpg", data), ("cls", str(i).encode())):
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = len(payload)
                t.addfile(info, io.BytesIO(payload))
    open(f"{out}/shard-{fmt}.tar", "wb").write(b"\x00" + b.getvalue())
PY

regressions=("$src"/runtime/fuzz/images_regressions/*)
if [[ -e "${regressions[0]}" ]]; then
  "$out/images_fuzzer" "${regressions[@]}"
fi
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
"$out/images_fuzzer" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=20 \
  -max_len=65536 -artifact_prefix="$out/artifacts/" -print_final_stats=1 "$out/corpus" 2>&1 |
  tail -n 25
status=${PIPESTATUS[0]}
echo "run-images-fuzz: libFuzzer exited with $status after ${seconds}s"
exit "$status"
