#!/usr/bin/env bash
# Decode step time against the GPU block shapes the lowering attributes carry
# (issue 16's per-op tile sizes, issue 17's decode): one artifact per shape,
# each an edit of the variant's tiled.mlir, timed in turn.
#
#   bench/gpu/block_shapes.sh prepare CSA_COMPILE VARIANT OUTDIR
#       here (MLIR): OUTDIR/tiled.mlir, then OUTDIR/<shape>.csa (--with-ptx)
#       for every shape below; a shape that changes no op is an error.
#   bench/gpu/block_shapes.sh run CSA_RUN OUTDIR WEIGHTS OUT.csv [CONTEXT] [ROUNDS]
#       there (a GPU): each artifact's decode step (csa-run --context=CONTEXT
#       --prompt=1 --max-new-tokens=17 --warmup), the artifacts in turn,
#       ROUNDS times (default 4096 and 2); WEIGHTS a checkpoint folder or
#       random:SEED. CSV: shape,round,step_ms,tokens_as_base. CSA_DEVICE=cpu
#       runs the same on the CPU (the script's own test).
#
# Shapes (sed programs on tiled.mlir; the attributes' reference is
# docs/dialect/CsaDialect.md):
#   base           the back end's own choice everywhere
#   moe-oN         csa.moe ops' linears (routed experts included) N outputs a
#                  block (8, 32 and 64 known; the default list has 8 and 32)
#   moe-f4 moe-f16 their outputs in flight
#   linear-f4 linear-f16   every csa.linear's outputs in flight
#   attention-x4 attention-x8   sparse attention's split walk in 4 or 8 blocks
#
# BLOCK_SHAPES="base moe-o64 ..." picks other shapes from those (the same
# list for prepare and run).
set -euo pipefail
shapes=(${BLOCK_SHAPES:-base moe-o8 moe-o32 moe-f4 moe-f16 linear-f4 linear-f16 attention-x4 attention-x8})
edit() {
  local form='#csa.linear_form<split_k>'
  case $1 in
    base) echo '' ;;
    moe-o8 | moe-o32 | moe-o64)
      echo "/csa\\.moe /s/$form/#csa.linear_form<split_k, outputs_per_block = ${1#moe-o}>/" ;;
    moe-f4) echo "/csa\\.moe /s/$form/#csa.linear_form<split_k, outputs_in_flight = 4>/" ;;
    moe-f16) echo "/csa\\.moe /s/$form/#csa.linear_form<split_k, outputs_in_flight = 16>/" ;;
    linear-f4) echo "/csa\\.linear /s/$form/#csa.linear_form<split_k, outputs_in_flight = 4>/" ;;
    linear-f16) echo "/csa\\.linear /s/$form/#csa.linear_form<split_k, outputs_in_flight = 16>/" ;;
    attention-x4 | attention-x8)
      echo "/csa\\.sparse_attention /s/#csa.attention_form<\\(split\\|mma\\)>/#csa.attention_form<\\1, splits = ${1#attention-x}>/" ;;
    *) echo "block_shapes.sh: unknown shape '$1'" >&2; return 1 ;;
  esac
}
usage() { sed -n '2,26p' "$0" >&2; exit 2; }
[ $# -ge 1 ] || usage
case $1 in
  prepare)
    [ $# -eq 4 ] || usage
    compile=$2 variant=$3 out=$4
    mkdir -p "$out"
    "$compile" --variant="$variant" --emit=tiled -o "$out/tiled.mlir"
    for s in "${shapes[@]}"; do
      program=$(edit "$s")
      sed "$program" "$out/tiled.mlir" > "$out/$s.mlir"
      if [ "$s" != base ] && cmp -s "$out/tiled.mlir" "$out/$s.mlir"; then
        echo "block_shapes.sh: shape $s changes no op of $variant" >&2
        exit 1
      fi
      "$compile" --compile-from=tiled "$out/$s.mlir" --emit=artifact --with-ptx -o "$out/$s.csa"
      rm "$out/$s.mlir"
    done
    echo "block_shapes.sh: ${#shapes[@]} artifacts of $variant in $out"
    ;;
  run)
    [ $# -ge 5 ] && [ $# -le 7 ] || usage
    run=$2 dir=$3 weights=$4 csv=$5 context=${6:-4096} rounds=${7:-2}
    case $weights in
      random:*) source=(--random-weights="${weights#random:}") ;;
      *) source=(--weights="$weights") ;;
    esac
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    echo "shape,round,step_ms,tokens_as_base" > "$csv.partial"
    for ((r = 1; r <= rounds; ++r)); do
      for s in "${shapes[@]}"; do
        [ -d "$dir/$s.csa" ] || { echo "block_shapes.sh: $dir/$s.csa is missing (run prepare)" >&2; exit 1; }
        "$run" "$dir/$s.csa" "${source[@]}" --context="$context" --prompt=1 --max-new-tokens=17 \
          --warmup --device="${CSA_DEVICE:-cuda}" > "$tmp/$s.txt" 2>&1 \
          || { cat "$tmp/$s.txt" >&2; echo "block_shapes.sh: $s failed" >&2; exit 1; }
        ms=$(sed -n 's/^decode step: median \([0-9.]*\) ms.*/\1/p' "$tmp/$s.txt")
        [ -n "$ms" ] || { cat "$tmp/$s.txt" >&2; echo "block_shapes.sh: $s printed no decode step" >&2; exit 1; }
        grep '^generated:' "$tmp/$s.txt" > "$tmp/$s.tokens"
        same=true
        cmp -s "$tmp/base.tokens" "$tmp/$s.tokens" || same=false
        echo "$s,$r,$ms,$same" >> "$csv.partial"
        echo "$s round $r: $ms ms (tokens as base: $same)"
      done
    done
    mv "$csv.partial" "$csv"
    ;;
  *) usage ;;
esac
