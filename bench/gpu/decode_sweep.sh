#!/usr/bin/env bash
# Decode steps against batch size and context (issue 17's batch table), as CSV:
#
#   bench/gpu/decode_sweep.sh CSA_RUN ART WEIGHTS OUT.csv [--sequential-batch ...]
#
# ART is `csa-compile --variant=V --emit=artifact --with-ptx`, WEIGHTS a
# checkpoint folder of V. Each row is one `csa-run ART --weights=WEIGHTS
# --context=C --batch=B --prompt=1 --max-new-tokens=N --warmup --device=cuda
# --json` (B sequences with synthetic caches of C positions, decoded together
# in one step a token; extra arguments go to every run): the median decode
# step, the tokens it makes (B), tokens/s over all steps. CONTEXTS (default
# "4096 32768 131072"), BATCHES (default "1 2 4 8 16 32 64") and STEPS (decode
# steps a run, default 8) set the grid; GRID="C:B,B C:B ..." names each
# context's batches instead (issue 17's table: GRID="4096:1,8,64 32768:1
# 131072:1 1048000:1"; a 1M-token sequence holds about 1 GB of h200-full's
# caches, so batch 64 there would not fit). Then `python3
# bench/plot_decode.py OUT.csv -o decode.png` draws it.
set -euo pipefail
if [ $# -lt 4 ]; then
  sed -n '2,18p' "$0" >&2
  exit 2
fi
run=$1 art=$2 weights=$3 out=$4
shift 4
contexts=(${CONTEXTS:-4096 32768 131072})
batches=(${BATCHES:-1 2 4 8 16 32 64})
steps=${STEPS:-8}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "artifact,context,batch,step_ms,tokens_per_s,steps,extra" > "$out.partial"
# The grid as "context:batch,batch,..." words.
if [ -n "${GRID:-}" ]; then
  grid=($GRID)
else
  grid=()
  for c in "${contexts[@]}"; do
    grid+=("$c:$(IFS=,; echo "${batches[*]}")")
  done
fi
for point in "${grid[@]}"; do
  c=${point%%:*}
  IFS=, read -r -a point_batches <<< "${point#*:}"
  for b in "${point_batches[@]}"; do
    if ! "$run" "$art" --weights="$weights" --context="$c" --batch="$b" --prompt=1 \
        --max-new-tokens=$((steps + 1)) --warmup --device=cuda --json "$@" > "$tmp/run.json" 2> "$tmp/err.txt"; then
      echo "decode_sweep: context $c batch $b failed:" >&2
      tail -3 "$tmp/err.txt" >&2
      echo "$(basename "$art"),$c,$b,,,0,$*" >> "$out.partial"
      continue
    fi
    row=$(python3 - "$tmp/run.json" <<'PY'
import json, statistics, sys
d = json.load(open(sys.argv[1]))["decode"]
print(f"{statistics.median(d['step_ms']):.4f},{d['tokens_per_s']:.2f},{d['steps']}")
PY
)
    echo "$(basename "$art"),$c,$b,$row,$*" >> "$out.partial"
    echo "context $c batch $b: $row (step ms, tokens/s, steps)"
  done
done
mv "$out.partial" "$out"
