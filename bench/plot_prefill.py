#!/usr/bin/env python3
"""Draws a prefill sweep (bench/gpu/prefill_sweep.sh's CSV) as one PNG.

    bench/gpu/prefill_sweep.sh csa-run h200-full.csa h200-full-noreplay.csa W sweep.csv
    python3 bench/plot_prefill.py sweep.csv -o prefill.png [--title TEXT]

Two panels against the prompt length (log scale): prefill tokens/s with and
without CED's bounded replay, and the prefill time without replay over the
time with it (CED's saving; the seed's L.Ne + R.Nd over L.(Ne + Nd) is the
ratio it aims at). Needs matplotlib (Debian's python3-matplotlib, installed
by tools/scripts/setup.sh).
"""
import argparse
import csv
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402


def load(path):
    """{replay: {tokens: (ms, tokens_per_s)}} from the sweep's CSV."""
    runs = {}
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        need = {"bounded_replay", "tokens", "prefill_ms", "tokens_per_s"}
        if not reader.fieldnames or not need <= set(reader.fieldnames):
            sys.exit(f"{path}: not a prefill_sweep.sh CSV (columns {sorted(need)} needed)")
        for line, row in enumerate(reader, start=2):
            try:
                tokens = int(row["tokens"])
                ms = float(row["prefill_ms"])
                tps = float(row["tokens_per_s"])
            except ValueError:
                sys.exit(f"{path}:{line}: a number is not one: {row}")
            runs.setdefault(row["bounded_replay"], {})[tokens] = (ms, tps)
    if "on" not in runs:
        sys.exit(f"{path}: no rows with bounded_replay=on")
    return runs


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", help="prefill_sweep.sh's CSV")
    parser.add_argument("-o", "--output", required=True, help="PNG to write")
    parser.add_argument("--title", default="h200-full prefill on one H200")
    args = parser.parse_args()
    runs = load(args.sweep)

    fig, (speed, saving) = plt.subplots(1, 2, figsize=(12, 4.6))
    for replay, label, style in (("on", "bounded replay (default)", "o-"),
                                 ("off", "--no-bounded-replay", "s--")):
        if replay not in runs:
            continue
        tokens = sorted(runs[replay])
        speed.plot(tokens, [runs[replay][t][1] for t in tokens], style, label=label)
    speed.set_xscale("log", base=2)
    speed.set_xlabel("prompt tokens")
    speed.set_ylabel("prefill tokens/s")
    speed.set_title("prefill throughput")
    speed.grid(True, alpha=0.3)
    speed.legend()

    if "off" in runs:
        both = sorted(set(runs["on"]) & set(runs["off"]))
        ratio = [runs["on"][t][0] / runs["off"][t][0] for t in both]
        saving.plot(both, ratio, "o-", color="tab:green")
        for t, r in zip(both, ratio):
            saving.annotate(f"{r:.2f}", (t, r), textcoords="offset points", xytext=(0, 6),
                            ha="center", fontsize=8)
        saving.set_ylim(0, max(1.05, max(ratio) * 1.1))
    saving.axhline(1.0, color="grey", lw=0.8)
    saving.set_xscale("log", base=2)
    saving.set_xlabel("prompt tokens")
    saving.set_ylabel("time with replay / time without")
    saving.set_title("CED's bounded replay: prefill time ratio")
    saving.grid(True, alpha=0.3)

    fig.suptitle(args.title)
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
