# Sourced (bash) by the gpu-run/ scripts that tools/scripts/gpu-check.sh
# writes; it sits beside them in gpu-run/ (docs/gpu.md, docs/semantics.md).
#
#   logits_check LABEL NAME RUNNER ARG...
#
# The whole-model check of a GPU run against the CPU executor (the oracle),
# within the tolerance contract instead of bit for bit:
#   1. RUNNER ARG... --device=cpu --logits-out=$out/NAME-cpu.npy
#      (RUNNER: a command or shell function that runs csa-run on an artifact);
#      and --dump-decisions=$TMPDIR/csa-NAME-cpu-decisions (unless
#      CSA_CHECK_DECISIONS=free);
#   2. RUNNER ARG... $CSA_CHECK_GPU_ARGS (default --device=cuda)
#      --forced-tokens=<the CPU run's generated tokens>
#      --force-decisions=<that directory> (the top-k sets, HSI pools and MoE
#      routing held equal),
#      --logits-out=$out/NAME-cuda.npy, so both runs see the same sequence;
#   3. csa-diff on the two files with --max-abs=$CSA_CHECK_MAX_ABS (0.3) and
#      --min-cosine=$CSA_CHECK_MIN_COSINE (0.998).
# Prints "LABEL: <csa-diff's summary line>", then, as information only, the
# CPU run's first line (or the GPU run's, '>') where the printed text of the runs differs (tokens, --print-logits
# lines; timing lines removed), and "LABEL: FAIL ..." when a run failed or a
# bound did not hold. Returns 0 only when csa-diff found every step within
# bounds. Logs: $out/NAME-{cpu,cuda}.txt, $out/NAME-diff.txt ($out: ${OUT:-.}).
# $CSA_DIFF is the csa-diff to run (default ./csa-diff).

logits_check() {
  local label=$1 name=$2 runner=$3
  shift 3
  local dir=${OUT:-.}
  local cpu="$dir/$name-cpu" gpu="$dir/$name-cuda"
  local -a gpuArgs
  read -r -a gpuArgs <<< "${CSA_CHECK_GPU_ARGS:---device=cuda}"
  rm -f "$cpu.npy" "$gpu.npy" "$dir/$name-diff.txt"
  # Decisions held equal (the contract's gate): the CPU run's top-k sets, HSI
  # pools and MoE routing forced into the GPU run; CSA_CHECK_DECISIONS=free
  # lets the GPU run make its own.
  local -a dump force
  if [ "${CSA_CHECK_DECISIONS:-held}" != free ]; then
    # Under $TMPDIR, not $OUT: a large model writes hundreds of files.
    local decisions="${TMPDIR:-/tmp}/csa-$name-cpu-decisions"
    rm -rf "$decisions"
    dump=(--dump-decisions="$decisions")
    force=(--force-decisions="$decisions")
  fi
  if ! "$runner" "$@" --device=cpu "${dump[@]}" --logits-out="$cpu.npy" > "$cpu.txt" 2>&1; then
    echo "$label: FAIL: the CPU run failed: $(tail -n 1 "$cpu.txt")"
    return 1
  fi
  local tokens
  tokens=$(sed -n 's/^generated: //p' "$cpu.txt" | head -n 1 | tr -s ' ' ',')
  if ! "$runner" "$@" "${gpuArgs[@]}" "${force[@]}" --forced-tokens="$tokens" --logits-out="$gpu.npy" > "$gpu.txt" 2>&1; then
    echo "$label: FAIL: the GPU run failed: $(tail -n 1 "$gpu.txt")"
    return 1
  fi
  local rc=0
  "${CSA_DIFF:-./csa-diff}" "$cpu.npy" "$gpu.npy" --max-abs="${CSA_CHECK_MAX_ABS:-0.3}" \
    --min-cosine="${CSA_CHECK_MIN_COSINE:-0.998}" > "$dir/$name-diff.txt" 2>&1 || rc=$?
  echo "$label: $(tail -n 1 "$dir/$name-diff.txt")"
  local first
  first=$(diff <(logits_check_strip "$cpu.txt") <(logits_check_strip "$gpu.txt") | grep -m 1 -e '^<' -e '^>')
  echo "$label: printed text (information only): ${first:+differs: }${first:-identical (tokens and printed logits)}"
  if [ $rc -ne 0 ]; then
    echo "$label: FAIL (csa-diff exit $rc: $([ $rc -eq 1 ] && echo 'a bound failed' || echo 'bad input'); $dir/$name-diff.txt)"
  fi
  return $rc
}

# The printed text of a run without its timings, byte counts and GPU activity.
logits_check_strip() {
  sed "/^profile:/,\$d" "$1" | grep -v -e "ms (" -e "bytes" -e "median" -e "^gpu, " -e "^warm-up"
}
