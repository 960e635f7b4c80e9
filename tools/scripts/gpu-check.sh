#!/usr/bin/env bash
# Prepares gpu-run/ (ignored by git) for one call on a GPU machine that has a
# driver but no MLIR: the csa-gpu-check binary with the shared libraries it
# needs, and for each variant its host kernels (--emit=object) and PTX
# (--emit=ptx). Then, on the GPU machine, from the repository root:
#
#   cd gpu-run && export LD_LIBRARY_PATH=$PWD/lib && ./run.sh
#
# run.sh checks every variant's kernels on the GPU against their host build at
# several row counts, and runs compute-sanitizer memcheck and racecheck;
# run-plan.sh runs the compiled tiny plan with the PTX kernels (csa-run
# --device=cuda, the correctness mode) against the CPU executor, and under
# both sanitizers (a whole plan's GPU run is compared with the CPU run's
# logits within bounds, fed the CPU's tokens: logits-check.sh, csa-diff); run-quick.sh is a shorter set of both (about 190 s);
# run-reduced.sh and run-full.sh run the released widths (docs/gpu.md);
# run-graphs.sh times decode steps with CUDA graphs off, in pieces and a
# graph a step;
# run-moe.sh checks prefill's grouped experts against the CPU and the
# per-expert launches (whole model);
# run-profile.sh times every kernel of an h200-full decode step (ncu);
# bench.sh times the released-width kernels and their PyTorch peers
# (bench/gpu/torch_peers.py); prefill_sweep.sh (bench/gpu/) times h200-full's
# prefill against prompt length with and without bounded replay.
set -euo pipefail
cd "$(dirname "$0")/../.."
variants=(${CSA_GPU_VARIANTS:-tiny reduced})
rm -rf gpu-run && mkdir -p gpu-run/lib
cp build/bin/csa-gpu-check build/bin/csa-run build/bin/csa-checkpoint build/bin/csa-diff \
  tools/scripts/logits-check.sh bench/gpu/torch_peers.py bench/gpu/step_profile.py bench/gpu/prefill_sweep.sh bench/gpu/decode_sweep.sh bench/gpu/block_shapes.sh gpu-run/
for tool in csa-gpu-check csa-run csa-checkpoint csa-diff; do
  ldd "build/bin/$tool" | awk '/libabsl|libicu|libpcre2|libtbb/ {print $3}' | xargs -r -I{} cp {} gpu-run/lib/
done
# The prefix cache's benchmark and agent loop (bench/README.md; the same libraries).
cp build/bin/csa-bench-prefix-cache bench/prefix/agent_loop.py gpu-run/
build/bin/csa-compile --variant=tiny --emit=artifact --with-ptx -o gpu-run/tiny.csa
build/bin/csa-compile --variant=reduced --emit=artifact --with-ptx -o gpu-run/reduced.csa
build/bin/csa-compile --variant=h200-full --emit=artifact --with-ptx -o gpu-run/h200-full.csa
# The prefill sweep's other half (prefill_sweep.sh: with and without CED's bounded replay).
build/bin/csa-compile --variant=h200-full --no-bounded-replay --emit=artifact --with-ptx \
  -o gpu-run/h200-full-noreplay.csa
for v in "${variants[@]}"; do
  build/bin/csa-compile --variant="$v" --emit=object -o "gpu-run/$v.so"
  build/bin/csa-compile --variant="$v" --emit=ptx -o "gpu-run/$v.ptx"
done
cat > gpu-run/run.sh <<'RUN'
#!/usr/bin/env bash
# Written by tools/scripts/gpu-check.sh. Logs go to ${OUT:-.}.
set -uo pipefail
out=${OUT:-.}
status=0
nvidia-smi --query-gpu=name,driver_version --format=csv
for so in *.so; do
  v=${so%.so}
  # tiny at 1, 37 and 300 rows; wider variants at 3 rows without the
  # output layer (their host kernels are plain loops, and the LM head's
  # four forms would take minutes; tiny checks its f32 form).
  rows="1 37 300"; skip=(); [ "$v" = tiny ] || { rows="3"; skip=(--exclude=x129280); }
  for r in $rows; do
    ./csa-gpu-check --host="$so" --ptx="$v.ptx" --rows="$r" --seed="$r" "${skip[@]}" > "$out/$v-rows$r.txt" 2>&1 || status=1
    echo "$v rows=$r: $(tail -1 "$out/$v-rows$r.txt")"
  done
done
# The FP8/FP4 linears of the released widths in their row-tiled form across
# several row tiles and K chunks (their host kernels are quick enough).
if [ -f reduced.so ]; then
  ./csa-gpu-check --host=reduced.so --ptx=reduced.ptx --rows=19 --seed=19 --filter=linear_fp > "$out/reduced-rows19-linear.txt" 2>&1 || status=1
  echo "reduced rows=19 linear_fp*: $(tail -1 "$out/reduced-rows19-linear.txt")"
fi
# The tolerance forms on exact operands (every partial sum exact in fp32):
# they must give the host kernel's bits (docs/semantics.md).
for so in *.so; do
  v=${so%.so}
  ./csa-gpu-check --host="$so" --ptx="$v.ptx" --rows=1 --seed=11 --exclude=x129280 --exact-operands > "$out/$v-exact.txt" 2>&1 || status=1
  echo "$v rows=1 exact operands: $(tail -1 "$out/$v-exact.txt")"
done
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck; do
  "$cs" --tool "$tool" ./csa-gpu-check --host=tiny.so --ptx=tiny.ptx --rows=9 > "$out/$tool.txt" 2>&1 || status=1
  echo "$tool: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/$tool.txt")"
done
exit $status
RUN
chmod +x gpu-run/run.sh
cat > gpu-run/bench.sh <<'RUN'
#!/usr/bin/env bash
# Written by tools/scripts/gpu-check.sh. Times every reduced (released-width)
# kernel that csa-gpu-check can run, after checking it against its host
# build, at 1 row (a decode step) and ${CSA_BENCH_ROWS:-4} rows, and times
# the PyTorch peers in the same call. Tables go to ${OUT:-.}.
set -uo pipefail
out=${OUT:-.}
status=0
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv
for r in 1 ${CSA_BENCH_ROWS:-4}; do
  ./csa-gpu-check --host=reduced.so --ptx=reduced.ptx --rows="$r" --seed="$r" \
    --time=${CSA_BENCH_ITERATIONS:-20} --csv="$out/kernels-rows$r.csv" > "$out/bench-rows$r.txt" 2>&1 || status=1
  echo "reduced rows=$r: $(tail -1 "$out/bench-rows$r.txt")"
  python3 torch_peers.py "$out/kernels-rows$r.csv" > "$out/peers-rows$r.md" 2>&1 || status=1
done
exit $status
RUN
chmod +x gpu-run/bench.sh
cat > gpu-run/run-reduced.sh <<'RUN'
#!/usr/bin/env bash
# Written by tools/scripts/gpu-check.sh. The whole `reduced` plan (released
# widths, 4 GB of random weights generated in memory) on the CPU executor and
# on the GPU fed the CPU's tokens: 3 prompt tokens, 2 new ones, the logits of
# both steps compared by csa-diff within the whole-model bounds
# (logits-check.sh); the top-3 logits as text, for information.
set -uo pipefail
out=${OUT:-.}
. ./logits-check.sh
run() { ./csa-run reduced.csa --random-weights=7 --prompt=1,2,3 --max-new-tokens=2 --print-logits=3 "$@"; }
status=0
logits_check "reduced, cuda" reduced run || status=1
grep -h "ms (" "$out/reduced-cpu.txt" "$out/reduced-cuda.txt"
exit $status
RUN
chmod +x gpu-run/run-reduced.sh
cat > gpu-run/run-full.sh <<'RUN'
#!/usr/bin/env bash
# Written by tools/scripts/gpu-check.sh (docs/gpu.md).
# The full-dimension variant h200-full (released schedule and widths, 40
# layers, 64 of the 384 routed experts): its 64.2 GB of random weights are
# written once to RAM ($CSA_FULL_CKPT, default /dev/shm/h200-full: the
# device's disk is 64 GiB), then, by phase (default: all):
#   compare  the GPU against the CPU executor: 3 prompt tokens, 1 decode step,
#            the GPU fed the CPU's tokens, the logits compared by csa-diff
#            within the whole-model bounds (logits-check.sh; the top-3 logits
#            and tokens as text, for information);
#   latency  decode steps at 4K, 32K and 128K tokens of synthetic context
#            (csa-run --context), median of $CSA_FULL_STEPS steps (8; the
#            first steps after a long synthetic context are slower), GPU;
#   prefill  prompts of 4K and 32K random token ids ($CSA_FULL_PREFILL),
#            after a --warmup (the weights' upload, untimed).
# CSA_FULL_ARGS adds csa-run options to every run (e.g. --profile).
# CSA_FULL_BUDGET=S gives the weight generation and each run at most the
# seconds left of S since the script started (leave the device call a margin
# for its own copying); a run cut short or skipped says so.
# A dry run of the script's logic on a machine without a GPU:
#   CSA_FULL_VARIANT=tiny CSA_FULL_DEVICE=cpu CSA_FULL_CONTEXTS=100 \
#   CSA_FULL_CKPT=/tmp/tiny-ckpt ./run-full.sh
# (CSA_FULL_DEVICE=cuda CSA_CHECK_GPU_ARGS='--device=cuda --gpu-emulate': the
# GPU path's bookkeeping on host memory.)
set -uo pipefail
out=${OUT:-.}
variant=${CSA_FULL_VARIANT:-h200-full}
device=${CSA_FULL_DEVICE:-cuda}
ck=${CSA_FULL_CKPT:-/dev/shm/$variant}
phases=${*:-compare latency prefill}
status=0
budget=${CSA_FULL_BUDGET:-0}
began=$(date +%s)
df -h /dev/shm | tail -1
# Seconds left of CSA_FULL_BUDGET (a large number without one).
left() {
  if [ "$budget" -gt 0 ]; then echo $(( budget - ($(date +%s) - began) )); else echo 1000000; fi
}
if [ ! -f "$ck/config.json" ]; then
  start=$(date +%s)
  timeout -k 10 "$(left)" ./csa-checkpoint generate --variant="$variant" --out="$ck" --seed=7 > "$out/full-generate.txt" 2>&1 \
    || { echo "generate failed:"; tail -3 "$out/full-generate.txt"; exit 1; }
  echo "weights: $(du -sh "$ck" | cut -f1) in $(( $(date +%s) - start )) s"
fi
run() {
  local seconds
  seconds=$(left)
  if [ "$seconds" -lt 10 ]; then echo "skipped: CSA_FULL_BUDGET=$budget s spent"; return 1; fi
  timeout -k 10 "$seconds" ./csa-run "$variant.csa" --weights="$ck" ${CSA_FULL_ARGS:-} "$@"
  local rc=$?
  [ $rc -eq 124 ] && echo "cut short: CSA_FULL_BUDGET=$budget s spent"
  return $rc
}
. ./logits-check.sh
for phase in $phases; do
  echo "== $phase ($(date +%T))"
  case $phase in
  compare)
    # The CPU run first (its tokens are fed to the GPU run); a failed,
    # skipped or cut run is a FAIL, not a match.
    CSA_CHECK_GPU_ARGS=${CSA_CHECK_GPU_ARGS:---device=$device} \
      logits_check "$variant, $device" full run --prompt=1,2,3 --max-new-tokens=2 --print-logits=3 || status=1
    grep -h "ms (" "$out/full-cpu.txt" "$out/full-cuda.txt" 2>/dev/null
    tail -q -n 2 "$out/full-cpu.txt" "$out/full-cuda.txt" 2>/dev/null | grep -i error ;;
  latency)
    for ctx in ${CSA_FULL_CONTEXTS:-4096 32768 131072}; do
      run --context=$ctx --prompt=1 --max-new-tokens=${CSA_FULL_STEPS:-8} --warmup --device="$device" > "$out/full-ctx$ctx.txt" 2>&1 || status=1
      echo "context $ctx: $(grep "decode step" "$out/full-ctx$ctx.txt" || tail -n 1 "$out/full-ctx$ctx.txt")"
      tail -q -n 2 "$out/full-ctx$ctx.txt" | grep -i error
    done ;;
  prefill)
    for n in ${CSA_FULL_PREFILL:-4096 32768}; do
      vocab=$(grep -o '"vocab_size": *[0-9]*' "$variant.csa/config.json" | grep -o '[0-9]*$')
      awk -v n=$n -v v=$vocab 'BEGIN { srand(7); for (i = 0; i < n; i++) print int(rand() * (v - 3)) + 3 }' > "$out/prompt$n.txt"
      run --prompt-file="$out/prompt$n.txt" --max-new-tokens=1 --warmup --device="$device" > "$out/full-prefill$n.txt" 2>&1 || status=1
      echo "prefill $n: $(grep -e "^prefill:" -e "^warm-up" "$out/full-prefill$n.txt" | tr '\n' ' ' || true) $(tail -n 1 "$out/full-prefill$n.txt" | grep -e skipped -e "cut short")"
      tail -q -n 2 "$out/full-prefill$n.txt" | grep -i error
    done ;;
  *) echo "unknown phase $phase (compare, latency, prefill)"; status=1 ;;
  esac
done
echo "== done ($(date +%T))"
exit $status
RUN
chmod +x gpu-run/run-full.sh
cat > gpu-run/run-profile.sh <<'RUN'
#!/usr/bin/env bash
# Written by tools/scripts/gpu-check.sh. The GPU time of every kernel of one
# h200-full decode step (ncu, one metric, no replay; its CSV to
# $OUT/step-ctxC-bB.csv) at each of ${CSA_FULL_CONTEXTS:-4096} tokens of
# context and each batch of ${CSA_PROFILE_BATCHES:-1}, then step_profile.py's
# table. The step is decode step 2 exactly (csa-run --gpu-profile-steps: ncu
# records only inside the capture range). Needs the weights run-full.sh
# writes ($CSA_FULL_CKPT, default /dev/shm/h200-full).
set -uo pipefail
out=${OUT:-.}
ck=${CSA_FULL_CKPT:-/dev/shm/h200-full}
[ -f "$ck/config.json" ] || ./csa-checkpoint generate --variant=h200-full --out="$ck" --seed=7 > "$out/full-generate.txt" 2>&1
status=0
for ctx in ${CSA_FULL_CONTEXTS:-4096}; do
  for batch in ${CSA_PROFILE_BATCHES:-1}; do
    csv=$out/step-ctx$ctx-b$batch.csv
    ncu --profile-from-start off --clock-control none --cache-control none \
      --metrics gpu__time_duration.sum --csv \
      ./csa-run h200-full.csa --weights="$ck" --context=$ctx --prompt=1 --max-new-tokens=4 --warmup \
      --device=cuda --batch=$batch --gpu-profile-steps=2 > "$csv" 2> "${csv%.csv}.err" || status=1
    python3 step_profile.py "context $ctx, batch $batch=$csv" || status=1
  done
done
exit $status
RUN
chmod +x gpu-run/run-profile.sh
cat > gpu-run/run-quick.sh <<'RUN'
#!/usr/bin/env bash
# Written by tools/scripts/gpu-check.sh. The correctness checks in about
# 190 s (188 s measured), to leave a device call room for run-full.sh: tiny's kernels at 37
# and 300 rows, reduced's at 3 (no LM head) and its FP8/FP4 linears at 19,
# both sanitizers on tiny's kernels and on its whole plan (5 tokens), the
# tiny plan against the CPU executor for prompts of 5 and 21 tokens (fed the
# CPU's tokens, the logits compared by csa-diff within the whole-model bounds:
# logits-check.sh), and run-reduced.sh.
set -uo pipefail
out=${OUT:-.}
status=0
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
check() { # name, csa-gpu-check arguments
  local name=$1; shift
  ./csa-gpu-check "$@" > "$out/$name.txt" 2>&1 || status=1
  echo "$name: $(tail -1 "$out/$name.txt")"
}
check tiny-rows37 --host=tiny.so --ptx=tiny.ptx --rows=37 --seed=37
check tiny-rows300 --host=tiny.so --ptx=tiny.ptx --rows=300 --seed=300
check reduced-rows3 --host=reduced.so --ptx=reduced.ptx --rows=3 --seed=3 --exclude=x129280
check reduced-rows19-linear --host=reduced.so --ptx=reduced.ptx --rows=19 --seed=19 --filter=linear_fp
for tool in memcheck racecheck; do
  "$cs" --tool "$tool" ./csa-gpu-check --host=tiny.so --ptx=tiny.ptx --rows=9 > "$out/$tool.txt" 2>&1 || status=1
  echo "$tool, kernels: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/$tool.txt")"
  "$cs" --tool "$tool" ./csa-run tiny.csa --random-weights=7 --prompt=1,2,3,4,5 --max-new-tokens=3 --device=cuda > "$out/$tool-plan.txt" 2>&1 || status=1
  echo "$tool, tiny plan: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/$tool-plan.txt")"
done
. ./logits-check.sh
tiny() { ./csa-run tiny.csa --random-weights=7 --max-new-tokens=32 --print-logits=5 "$@"; }
for prompt in 1,2,3,4,5 $(seq -s, 1 21); do
  n=$(echo "$prompt" | tr ',' '\n' | wc -l)
  logits_check "tiny plan, prompt $n, cuda" "tiny-$n" tiny --prompt="$prompt" || status=1
done
# Chunked prefill: chunks of 9 (longer than tiny's replay tail) and of 5.
for chunk in 9 5; do
  logits_check "tiny plan, prompt 21 in chunks of $chunk, cuda" "tiny-21-chunks$chunk" tiny \
    --prompt="$(seq -s, 1 21)" --prefill-chunk=$chunk || status=1
done
./run-reduced.sh || status=1
exit $status
RUN
chmod +x gpu-run/run-quick.sh
cat > gpu-run/run-graphs.sh <<'RUN'
#!/usr/bin/env bash
# Written by tools/scripts/gpu-check.sh. Decode step latency with CUDA
# graphs off, at most 8 launches a graph (on) or 32, and a step as one graph
# (step) or P graphs (step:P): the median of 32 steps after --warmup, twice
# each in turn, for tiny and reduced (every run must generate the same
# tokens); then h200-full at 4K tokens of context (16 steps) when its
# weights are in $CSA_FULL_CKPT (run-full.sh writes them). reduced's weights
# are written once to $CSA_REDUCED_CKPT (/dev/shm/reduced).
# CSA_GRAPH_VARIANTS (default "tiny reduced h200-full") and CSA_GRAPH_MODES
# (default "off on 32 step step:4") choose.
set -uo pipefail
out=${OUT:-.}
status=0
ck=${CSA_REDUCED_CKPT:-/dev/shm/reduced}
full=${CSA_FULL_CKPT:-/dev/shm/h200-full}
modes=${CSA_GRAPH_MODES:-off on 32 step step:4}
for v in ${CSA_GRAPH_VARIANTS:-tiny reduced h200-full}; do
  args=(--prompt=1,2,3 --max-new-tokens=33)
  case $v in
  tiny) weights=--random-weights=7 ;;
  reduced)
    weights=--weights=$ck
    if [ ! -f "$ck/config.json" ]; then
      ./csa-checkpoint generate --variant=reduced --out="$ck" --seed=7 > "$out/reduced-generate.txt" 2>&1 \
        || { echo "generate failed:"; tail -3 "$out/reduced-generate.txt"; exit 1; }
    fi ;;
  h200-full)
    [ -f "$full/config.json" ] || { echo "h200-full: no weights in $full (run-full.sh writes them)"; continue; }
    weights=--weights=$full
    args=(--context=4096 --prompt=1 --max-new-tokens=17) ;;
  esac
  first=""
  for round in 1 2; do
    for g in $modes; do
      log="$out/graphs-$v-${g/:/-}-$round.txt"
      ./csa-run "$v.csa" "$weights" "${args[@]}" --warmup --device=cuda --cuda-graphs=$g > "$log" 2>&1 || status=1
      echo "$v graphs=$g: $(grep -h -e "decode step" "$log" | tr '\n' ' ')$(grep -h -e "^gpu, " -e "error" "$log")"
      [ -n "$first" ] || first=$log
      if ! cmp -s <(grep "^generated" "$first") <(grep "^generated" "$log"); then
        echo "$v graphs=$g: other tokens than graphs=${modes%% *}"; status=1
      fi
    done
  done
done
exit $status
RUN
chmod +x gpu-run/run-graphs.sh
cat > gpu-run/run-plan.sh <<'RUN'
#!/usr/bin/env bash
# Written by tools/scripts/gpu-check.sh. The whole tiny plan on the GPU.
# The GPU run is fed the CPU run's tokens and their logits compared by
# csa-diff within the whole-model bounds (logits-check.sh).
set -uo pipefail
out=${OUT:-.}
status=0
. ./logits-check.sh
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
tiny() { ./csa-run tiny.csa --random-weights=7 --max-new-tokens=32 --print-logits=5 "$@"; }
for prompt in 1,2,3,4,5 $(seq -s, 1 21); do
  n=$(echo "$prompt" | tr ',' '\n' | wc -l)
  logits_check "prompt $n, cuda" "tiny-$n" tiny --prompt="$prompt" || status=1
  for tool in memcheck racecheck; do
    "$cs" --tool "$tool" ./csa-run tiny.csa --random-weights=7 --prompt="$prompt" --max-new-tokens=3 --device=cuda > "$out/$tool-plan-$n.txt" 2>&1 || status=1
    echo "prompt $n, $tool: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/$tool-plan-$n.txt")"
  done
done
exit $status
RUN
chmod +x gpu-run/run-plan.sh
cat > gpu-run/run-moe.sh <<'RUN'
#!/usr/bin/env bash
# Written by tools/scripts/gpu-check.sh. Prefill's routed experts in their
# grouped tensor-core form (from 64 slots: kGroupedMmaMinSlots) and as one
# launch an expert (--gpu-per-expert-moe), each against the CPU executor,
# whole model, the decisions held equal (logits-check.sh): tiny with a
# 40-token prompt (80 slots at top-2), then h200-full with 16 tokens (96
# slots at top-6) when run-full.sh's weights are there ($CSA_FULL_CKPT).
# The two forms should sit at the same distance from the CPU.
set -uo pipefail
status=0
. ./logits-check.sh
tiny() { ./csa-run tiny.csa --random-weights=7 --max-new-tokens=8 "$@"; }
full() { ./csa-run h200-full.csa --weights="${CSA_FULL_CKPT:-/dev/shm/h200-full}" --max-new-tokens=2 "$@"; }
for model in tiny full; do
  if [ $model = tiny ]; then prompt=$(seq -s, 1 40); else prompt=$(seq -s, 100 115); fi
  [ $model = full ] && [ ! -f "${CSA_FULL_CKPT:-/dev/shm/h200-full}/config.json" ] && { echo "h200-full: no weights (run-full.sh writes them)"; break; }
  for form in grouped per-expert; do
    args=--device=cuda; [ $form = per-expert ] && args="$args --gpu-per-expert-moe"
    CSA_CHECK_GPU_ARGS="$args" logits_check "$model, $form experts" "moe-$model-$form" $model --prompt="$prompt" || status=1
  done
done
exit $status
RUN
chmod +x gpu-run/run-moe.sh
du -sh gpu-run
