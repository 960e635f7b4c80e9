#!/usr/bin/env bash
# Builds csa's libFuzzer targets (test/fuzz) with clang, AddressSanitizer and
# UBSan into build-fuzz/, replays every saved regression input, then fuzzes
# each target for SECONDS (default 60) from its seed corpus (the repository's
# own files of that format; tiny's IR stages for fuzz-ir) with a JSON (or IR)
# dictionary. Prints one line a target:
# runs, coverage, corpus size, and FAILED with the crashing input's path when
# one crashed (exit 1). CI runs it with a short time; run it for an hour a
# target on demand: tools/scripts/fuzz.sh 3600.
#
#   tools/scripts/fuzz.sh [SECONDS] [TARGET...]
#   FUZZ_RUNS=N tools/scripts/fuzz.sh   # N inputs a target, seed 1: the same
#                                       # inputs on every machine (CI)
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-60}
shift || true
all=(fuzz-config fuzz-schedule-json fuzz-safetensors fuzz-artifact fuzz-tokenizer fuzz-ir)
targets=("${@:-${all[@]}}")
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")

for tool in clang-14 clang++-14; do
  command -v "$tool" > /dev/null || { echo "fuzz.sh: $tool is missing (tools/scripts/setup.sh installs it)" >&2; exit 1; }
done
mkdir -p build-fuzz
if [ ! -f build-fuzz/build.ninja ]; then
  cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 -DCSA_FUZZ=ON \
    -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit > build-fuzz/configure.log \
    || { cat build-fuzz/configure.log; exit 1; }
fi
ninja -C build-fuzz -j "${CSA_JOBS:-2}" "${targets[@]}" > build-fuzz/build.log \
  || { tail -40 build-fuzz/build.log; exit 1; }

# Seeds: the repository's files of each target's format, a tiny artifact's
# JSON files (from build/, when the main build is there) and a two-tensor
# safetensors file.
seeds=build-fuzz/seeds
mkdir -p "$seeds"
if [ -x build/bin/csa-compile ] && [ ! -f "$seeds/artifact/plan.json" ]; then
  build/bin/csa-compile --variant=tiny --emit=artifact -o "$seeds/artifact" > /dev/null
fi
# fuzz-ir: the stages tiny's compile writes (graph .. tiled: the dialects the
# target registers).
if [ -x build/bin/csa-compile ] && [ ! -f "$seeds/ir/tiled.mlir" ]; then
  build/bin/csa-compile --variant=tiny --emit=tiled --dump-dir="$seeds/ir" -o /dev/null
fi
python3 - "$seeds/two.safetensors" <<'PY'
import json, struct, sys
header = {"a": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 8]},
          "b": {"dtype": "F8_E4M3", "shape": [4], "data_offsets": [8, 12]},
          "__metadata__": {"format": "pt"}}
text = json.dumps(header).encode()
text += b" " * (-len(text) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(text)) + text + bytes(range(12)))
PY
seeds() {
  case "$1" in
    fuzz-config) ls models/configs/*.json ;;
    fuzz-schedule-json) ls test/tools/Inputs/override-*.json ;;
    fuzz-safetensors) echo "$seeds/two.safetensors" ;;
    fuzz-artifact) ls "$seeds"/artifact/*.json 2>/dev/null ;;
    fuzz-tokenizer) ls test/fixtures/tokenizer/*.json ;;
    fuzz-ir) ls "$seeds"/ir/{graph,expanded,fused,tiled}.mlir 2>/dev/null ;;
  esac
}

# fuzz-ir: MLIR's uninstrumented libraries and csa's instrumented allocator
# code disagree about poisoned memory (docs/fuzzing.md, sanitize.sh).
export ASAN_OPTIONS=${ASAN_OPTIONS:-allow_user_poisoning=0}
status=0
for t in "${targets[@]}"; do
  corpus=build-fuzz/corpus/$t
  mkdir -p "$corpus" build-fuzz/crashes
  seeds "$t" 2>/dev/null | while read -r f; do [ -f "$f" ] && cp "$f" "$corpus/" || true; done
  # Every input that once crashed this target must not crash it again.
  if [ -d "test/fuzz/regressions/$t" ] && [ -n "$(ls -A "test/fuzz/regressions/$t")" ]; then
    if ! "build-fuzz/fuzz/$t" test/fuzz/regressions/"$t"/* > "build-fuzz/$t-regressions.log" 2>&1; then
      echo "$t: FAILED on a saved regression input (build-fuzz/$t-regressions.log)"
      status=1
      continue
    fi
  fi
  log=build-fuzz/$t.log
  maxlen=65536
  [ "$t" = fuzz-artifact ] && maxlen=400000 # a tiny plan.json is 290 KB
  [ "$t" = fuzz-ir ] && maxlen=131072      # tiny's tiled stage is 84 KB
  dict=test/fuzz/json.dict
  [ "$t" = fuzz-ir ] && dict=test/fuzz/ir.dict
  budget=(-max_total_time="$seconds")
  [ -n "${FUZZ_RUNS:-}" ] && budget=(-runs="$FUZZ_RUNS" -seed=1)
  if "build-fuzz/fuzz/$t" "$corpus" "${budget[@]}" -max_len=$maxlen -timeout=10 \
       -rss_limit_mb=4096 -dict=$dict -artifact_prefix="build-fuzz/crashes/$t-" \
       -print_final_stats=1 > "$log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
    corp=$(ls "$corpus" | wc -l)
    secs=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log")
    echo "$t: ok, $runs runs in ${secs:-?} s, $cov, corpus $corp inputs"
  else
    crash=$(grep -o "build-fuzz/crashes/$t-[a-z]*-[0-9a-f]*" "$log" | tail -1)
    echo "$t: FAILED: ${crash:-see $log} (copy it to test/fuzz/regressions/$t/ once fixed)"
    grep -m3 -E "ERROR|runtime error|SUMMARY" "$log" || true
    status=1
  fi
done
exit $status
