#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks, then configures and builds csa
# into build/ (Ninja, Release, 2 parallel jobs by default: CSA_JOBS=N to change).
set -euo pipefail
cd "$(dirname "$0")/../.."

packages=(cmake ninja-build g++ python3
          llvm-22-dev llvm-22-tools libmlir-22-dev mlir-22-tools
          libgtest-dev libbenchmark-dev libabsl-dev nlohmann-json3-dev
          python3-numpy python3-matplotlib libicu-dev libpcre2-dev pkg-config
          clang-14 libclang-rt-14-dev pybind11-dev python3-dev libtbb-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

mkdir -p build
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir \
  -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit > build/configure.log \
  || { cat build/configure.log; exit 1; }
ninja -C build -j "${CSA_JOBS:-2}"
