#!/usr/bin/env bash
# The AddressSanitizer + UBSan pass of CI (issue 21): builds the runtime's
# libraries, its tools, the compiler (csa-compile, csa-opt: the dialect,
# passes and code generation; LLVM and MLIR themselves are Debian's, not
# instrumented), the unit tests that need no MLIR and the end-to-end test
# with -fsanitize=address,undefined into build-asan/ (CSA_SANITIZE=ON). It
# runs those unit tests, the dialect, pass, conversion and tool lit tests and the
# end-to-end test (compiled artifacts against the reference) with the
# sanitized binaries, compiles tiny (every stage dumped and read back by
# csa-opt) and `reduced`'s PTX, then runs the sanitized tools on tiny, its
# artifact compiled with --sanitize-kernels (the generated host kernels
# instrumented with AddressSanitizer too): a checkpoint generated and
# checked, prefill and decode on the CPU and on the emulated GPU path, a
# decision dump and its injection, logits compared. A positive control calls
# one instrumented kernel past the end of its buffer and requires ASan's
# report (test/sanitize/kernel_overflow_probe.py).
# Any sanitizer report fails the run (UBSan does not recover; leaks count).
# Prints one line a step and "sanitize.sh: N checks clean".
#
#   tools/scripts/sanitize.sh       # after tools/scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -x build/bin/csa-compile ] || { echo "sanitize.sh: build/bin/csa-compile is missing (run tools/scripts/setup.sh)" >&2; exit 1; }
mkdir -p build-asan
if [ ! -f build-asan/build.ninja ]; then
  # -O1, as the sanitizers' documentation advises: the build compiles about
  # 27 % faster than at Release's -O3 (NvptxBackend.cpp 68 -> 49 s), which
  # CI's 90 minutes need, and the instrumented checks stay fast.
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Release -DCSA_SANITIZE=ON \
    -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" -DCMAKE_C_FLAGS_RELEASE="-O1 -DNDEBUG" \
    -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit > build-asan/configure.log \
    || { cat build-asan/configure.log; exit 1; }
fi
tests=(csa-artifact-tests csa-checkpoint-tests csa-cuda-tests csa-device-tests csa-numerics-tests
       csa-sampling-tests csa-tokenizer-tests csa-tool-support-tests csa-models-tests
       csa-reference-tests csa-engram-tests csa-tables-tests)
tools=(csa-run csa-checkpoint csa-diff csa-reference csa-score csa-compile csa-opt csa-op-abi
       csa-gpu-check csa-api-test csa-e2e-tests csa-bench-prefix-cache)
ninja -C build-asan -j "${CSA_JOBS:-2}" "${tests[@]}" "${tools[@]}" > build-asan/build.log \
  || { tail -40 build-asan/build.log; exit 1; }

# allow_user_poisoning=0: LLVM's allocators poison and unpoison memory by
# hand where their inline code is built with ASan, and Debian's libLLVM, built
# without it, does not: that mix reports use-after-poison in MLIR's own
# registration. Bounds and use-after-free are still checked; only the
# allocators' own markings are ignored.
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:exitcode=86:allow_user_poisoning=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:exitcode=86
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
checks=0
# A step fails on a non-zero exit or on any sanitizer report in its output.
step() {
  local name=$1
  shift
  if ! "$@" > "$work/$name.log" 2>&1 ||
     grep -q "ERROR: AddressSanitizer\|ERROR: LeakSanitizer\|runtime error:" "$work/$name.log"; then
    echo "sanitize.sh: $name FAILED: $*" >&2
    tail -40 "$work/$name.log" >&2
    exit 1
  fi
  checks=$((checks + 1))
  echo "$name: ok"
}
for t in "${tests[@]}"; do
  step "$t" "$(find build-asan/test -name "$t" -type f | head -1)" --gtest_brief=1
done
bin=build-asan/bin
# The compiler under the sanitizers: its lit tests, every stage of tiny read
# back, the GPU code generation of the released widths, and the compiled
# artifacts against the reference (test/e2e, which compiles with this tree's
# csa-compile).
step lit-compiler /usr/lib/llvm-22/bin/lit -q build-asan/test --filter 'dialect/|passes/|conversion/'
# Every tool lit test (test/tools: the commands as users type them, their bad
# inputs included) with the sanitized tools.
step lit-tools /usr/lib/llvm-22/bin/lit -q build-asan/test --filter 'tools/'
step compile-tiny "$bin/csa-compile" --variant=tiny --emit=artifact --with-ptx --sanitize-kernels \
  --dump-dir="$work/stages" -o "$work/tiny.csa"
for stage in graph expanded fused tiled host; do
  step "opt-$stage" "$bin/csa-opt" "$work/stages/$stage.mlir" -o /dev/null
done
step compile-reduced-ptx "$bin/csa-compile" --variant=reduced --emit=ptx -o "$work/reduced.ptx"
step e2e "$(find build-asan/test -name csa-e2e-tests -type f | head -1)" --gtest_brief=1
step checkpoint-generate "$bin/csa-checkpoint" generate "$work/tiny.csa/config.json" --out="$work/ckpt" --seed=3
step checkpoint-check "$bin/csa-checkpoint" check "$work/ckpt" --config="$work/tiny.csa/config.json"
step run-cpu "$bin/csa-run" "$work/tiny.csa" --weights="$work/ckpt" --prompt=1,2,3,4,5,6,7 \
  --max-new-tokens=6 --logits-out="$work/cpu.npy" --dump-decisions="$work/decisions" --json
step run-gpu-emulated env CSA_CUDA_EMULATE=1 "$bin/csa-run" "$work/tiny.csa" --weights="$work/ckpt" \
  --prompt=1,2,3,4,5,6,7 --max-new-tokens=6 --device=cuda --force-decisions="$work/decisions" \
  --logits-out="$work/emu.npy"
step run-batch "$bin/csa-run" "$work/tiny.csa" --random-weights=5 --prompt=3,1,4 --batch=3 \
  --max-new-tokens=4 --temperature=0.7 --top-p=0.9 --profile
# An agent loop through the prefix cache: written, then read back by another
# process (global blocks and, with global+local, the local state from disk).
python3 -c "print(','.join(str(i * 7 % 500) for i in range(70))); print('5,6,7'); print('8,9')" \
  > "$work/turns.txt"
for pass in write read; do
  step "turns-$pass" "$bin/csa-run" "$work/tiny.csa" --weights="$work/ckpt" --turns="$work/turns.txt" \
    --max-new-tokens=3 --prefix-cache="$work/prefix-cache" --prefix-cache-policy=global+local
done
step diff "$bin/csa-diff" "$work/cpu.npy" "$work/emu.npy" --max-abs=0 --min-cosine=1
step reference "$bin/csa-reference" "$work/ckpt" --config="$work/tiny.csa/config.json" \
  --prompt=1,2,3,4,5,6,7 --decode=3
# The generated kernels' instrumentation reports: a kernel in bounds runs
# clean, one given a row past its buffer is stopped by ASan's report.
# (A python3 with numpy: Debian's, which setup.sh installs it for.)
python=python3
"$python" -c "import numpy" 2> /dev/null || python=/usr/bin/python3
asan_python() {
  env LD_PRELOAD="$(gcc -print-file-name=libasan.so)" \
    ASAN_OPTIONS=detect_leaks=0:verify_asan_link_order=0 "$python" "$@"
}
step kernels-in-bounds asan_python test/sanitize/kernel_overflow_probe.py "$work/tiny.csa"
if asan_python test/sanitize/kernel_overflow_probe.py "$work/tiny.csa" --overflow \
     > "$work/overflow.log" 2>&1 ||
   ! grep -q "ERROR: AddressSanitizer: heap-buffer-overflow" "$work/overflow.log" ||
   ! grep -q " in rms_norm_" "$work/overflow.log"; then
  echo "sanitize.sh: kernels-overflow FAILED: no ASan report from an instrumented kernel" >&2
  tail -20 "$work/overflow.log" >&2
  exit 1
fi
checks=$((checks + 1))
echo "kernels-overflow: ok (ASan reported the generated kernel's read past its buffer)"
echo "sanitize.sh: $checks checks clean"
