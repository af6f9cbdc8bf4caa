#!/usr/bin/env bash
# Installs what graphc needs from Debian, builds it, and runs the main job or the
# tests. Idempotent: packages already present are not reinstalled and the build
# is incremental.
#
#   ./setup.sh run     install, build, then the main job: train ResNet-50 a few
#                      steps and fmnist_cnn an epoch on the CPU
#   ./setup.sh test    install, build, then every test (lit + GoogleTest + CMake)
#   ./setup.sh build   install and build only
set -euo pipefail
cd "$(dirname "$0")"

BUILD_DIR=${GRAPHC_BUILD_DIR:-build}
PACKAGES=(
  # compiler: MLIR/LLVM 19, lit/FileCheck, and what LLVM's CMake package links
  libmlir-19-dev mlir-19-tools llvm-19-dev llvm-19-tools lld-19
  libzstd-dev zlib1g-dev libedit-dev libncurses-dev libxml2-dev libffi-dev
  # build and test tools (clang-19 + its runtime: libFuzzer, ASan, UBSan)
  cmake ninja-build g++ python3 python3-numpy python3-matplotlib googletest libgtest-dev libbenchmark-dev
  clang-19 libclang-rt-19-dev
  # runtime: plan format, CPU kernels, multi-rank, data
  flatbuffers-compiler libflatbuffers-dev libcli11-dev nlohmann-json3-dev libdnnl-dev
  libsodium-dev
  # image folders and shards: JPEG decoding (TurboJPEG API), PNG (libpng),
  # and Pillow to write the tests' images
  libturbojpeg0-dev libpng-dev python3-pil
  # graphc import: ONNX (protobuf) models, the Python that writes test models,
  # and ONNX's own backend node tests (run through graphc compile --forward)
  libonnx-dev libprotobuf-dev python3-onnx libonnx-testdata
  openmpi-bin
  libopenmpi-dev
  # the multi-node tests' and benchmarks' network namespaces (as root)
  iproute2 iputils-ping
  dataset-fashion-mnist
)

install_packages() {
  local missing=()
  for pkg in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" ||
      missing+=("$pkg")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    return
  fi
  echo "setup: installing ${missing[*]}"
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo=sudo; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
}

build() {
  if [ ! -f "$BUILD_DIR/build.ninja" ]; then
    cmake -G Ninja -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release
  fi
  cmake --build "$BUILD_DIR"
}

case "${1:-run}" in
  build)
    install_packages
    build
    ;;
  run)
    install_packages
    build
    # The headline model: compile ResNet-50 (224 px) and train a few steps on
    # synthetic data, then a small CNN for one epoch of Fashion-MNIST.
    "$BUILD_DIR/bin/graphc" compile models/resnet50.mlir --batch-size 8 \
      -o "$BUILD_DIR/resnet50.plan"
    "$BUILD_DIR/bin/graphrun" "$BUILD_DIR/resnet50.plan" --steps 6 --warmup 2 \
      --display-every 2
    "$BUILD_DIR/bin/graphc" compile models/fmnist_cnn.mlir --batch-size 64 --lr 0.01 \
      -o "$BUILD_DIR/fmnist_cnn.plan"
    "$BUILD_DIR/bin/graphrun" "$BUILD_DIR/fmnist_cnn.plan" --data fashion-mnist --epochs 1 \
      --eval --display-every 100 --report "$BUILD_DIR/fmnist_cnn.json"
    ;;
  test)
    install_packages
    build
    cd "$BUILD_DIR"
    ctest --output-on-failure
    ;;
  *)
    echo "usage: $0 [run|test|build]" >&2
    exit 2
    ;;
esac
