#!/usr/bin/env bash
# Prefill throughput against prompt length, with and without CED's bounded
# replay (issue 20's prefill table), as CSV:
#
#   bench/gpu/prefill_sweep.sh CSA_RUN WITH.csa WITHOUT.csa WEIGHTS OUT.csv [LENGTH...]
#
# WITH.csa is `csa-compile --variant=V --emit=artifact --with-ptx`, WITHOUT.csa
# the same with --no-bounded-replay; WEIGHTS a checkpoint folder of V. Each
# run is `csa-run ART --weights=WEIGHTS --prompt-file=<1..LENGTH>
# --max-new-tokens=1 --device=cuda`: the weights go to the GPU before the
# prefill is timed (csa-run's `weights:` line), so a row is the prefill alone.
# LENGTH defaults to 1024 2048 4096 8192 16384 32768. Then
# `python3 bench/plot_prefill.py OUT.csv -o prefill.png` draws it.
set -euo pipefail
if [ $# -lt 5 ]; then
  sed -n '2,13p' "$0" >&2
  exit 2
fi
run=$1 with=$2 without=$3 weights=$4 out=$5
shift 5
lengths=("$@")
[ ${#lengths[@]} -gt 0 ] || lengths=(1024 2048 4096 8192 16384 32768)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "artifact,bounded_replay,tokens,prefill_ms,tokens_per_s,weights_s" > "$out.partial"
for n in "${lengths[@]}"; do
  seq -s, 1 "$n" > "$tmp/prompt.txt"
  for art in "$with" "$without"; do
    replay=on
    [ "$art" = "$with" ] || replay=off
    log="$tmp/run.txt"
    if ! "$run" "$art" --weights="$weights" --prompt-file="$tmp/prompt.txt" --max-new-tokens=1 \
        --device=cuda > "$log" 2>&1; then
      echo "prefill_sweep: $art at $n tokens failed:" >&2
      tail -3 "$log" >&2
      exit 1
    fi
    # "prefill: N tokens in X ms (Y tokens/s)", "weights: G GB to the GPU in S s (R GB/s; B bytes)"
    line=$(grep -m1 '^prefill:' "$log")
    ms=$(sed -E 's/.* in ([0-9.]+) ms.*/\1/' <<< "$line")
    tps=$(sed -E 's/.*\(([0-9.]+) tokens\/s\).*/\1/' <<< "$line")
    ws=$(grep -m1 '^weights:' "$log" | sed -E 's/.* in ([0-9.]+) s .*/\1/' || true)
    echo "$(basename "$art"),$replay,$n,$ms,$tps,${ws:-}" >> "$out.partial"
    echo "$(basename "$art") replay=$replay $n tokens: $ms ms ($tps tokens/s)"
  done
done
mv "$out.partial" "$out"
