#!/usr/bin/env python3
"""Draws a csa-compile sweep (--sweep=FILE --report=json) as one PNG.

    csa-compile --sweep=bench/sweeps/schedules.json --report=json -o sweep.json
    python3 bench/plot.py sweep.json -o sweep.png

Three panels, one mark per variant: the global KV cache bytes per token; the
cache bytes a decode token reads (index keys + gathered attention rows)
against context; the prefill's weighted FLOPs of the sweep's prompt as each
variant is compiled, and without bounded replay. Needs matplotlib (Debian's
python3-matplotlib, installed by tools/scripts/setup.sh).
"""
import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402


def load(path):
    with open(path, encoding="utf-8") as f:
        sweep = json.load(f)
    if not isinstance(sweep, dict) or "variants" not in sweep or not sweep["variants"]:
        sys.exit(f"{path}: not a csa-compile --sweep --report=json output (no variants)")
    return sweep


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", help="csa-compile --sweep=FILE --report=json output")
    parser.add_argument("-o", "--output", required=True, help="PNG to write")
    args = parser.parse_args()
    sweep = load(args.sweep)
    rows = sweep["variants"]
    names = [r["name"] for r in rows]

    fig, (kv, reads, prefill) = plt.subplots(1, 3, figsize=(17, 5.2))
    kv.barh(names, [r["global_kv_bytes_per_token"] for r in rows], color="tab:blue")
    kv.invert_yaxis()
    kv.set_xlabel("global KV bytes per token")
    kv.set_title("persistent cache per token")
    for i, r in enumerate(rows):
        kv.text(r["global_kv_bytes_per_token"], i, f" {r['global_kv_bytes_per_token']:.0f}",
                va="center", fontsize=8)

    for r in rows:
        contexts = [d["context"] for d in r["decode"]]
        reads.plot(contexts, [d["kv_bytes_read"] / 1e6 for d in r["decode"]], marker="o",
                   label=r["name"])
    reads.set_xscale("log", base=2)
    reads.set_yscale("log")
    reads.set_xlabel("context (tokens)")
    reads.set_ylabel("MB read per decode token (index keys + attention rows)")
    reads.set_title("decode cache reads against context")
    reads.legend(fontsize=8)
    reads.grid(True, which="both", alpha=0.3)

    tokens = sweep.get("prefill_tokens", 0)
    compiled = [r["prefill"]["weighted_flops"] / 1e12 for r in rows]
    every = [r["prefill"].get("weighted_flops_every_layer", 0) / 1e12 for r in rows]
    y = range(len(rows))
    prefill.barh([i + 0.2 for i in y], every, height=0.4, color="tab:gray",
                 label="every layer")
    prefill.barh([i - 0.2 for i in y], compiled, height=0.4, color="tab:orange",
                 label="as compiled")
    prefill.set_yticks(list(y))
    prefill.set_yticklabels(names)
    prefill.invert_yaxis()
    prefill.set_xlabel(f"weighted TFLOPs of a {tokens}-token prefill")
    prefill.set_title("prefill (bounded replay where compiled)")
    prefill.legend(fontsize=8)

    fig.suptitle("csa-compile --sweep: cost by variant")
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)
    print(f"wrote {args.output}: {len(rows)} variants")


if __name__ == "__main__":
    main()
