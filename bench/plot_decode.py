#!/usr/bin/env python3
"""Draws a decode sweep (bench/gpu/decode_sweep.sh's CSV) as one PNG.

    bench/gpu/decode_sweep.sh csa-run h200-full.csa W sweep.csv
    python3 bench/plot_decode.py sweep.csv -o decode.png [--title TEXT]

Two panels against the batch size (log scale), a line per context: the decode
step's latency (one step makes a token for every sequence of the batch) and
the tokens/s of the batch. Needs matplotlib (Debian's python3-matplotlib,
installed by tools/scripts/setup.sh).
"""
import argparse
import csv
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402


def load(path):
    """{(context, extra): {batch: (step_ms, tokens_per_s)}} from the CSV."""
    lines = {}
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        need = {"context", "batch", "step_ms", "tokens_per_s"}
        if not reader.fieldnames or not need <= set(reader.fieldnames):
            sys.exit(f"{path}: not a decode_sweep.sh CSV (columns {sorted(need)} needed)")
        for line, row in enumerate(reader, start=2):
            if not row["step_ms"]:
                continue  # a run that failed
            try:
                key = (int(row["context"]), row.get("extra") or "")
                point = (float(row["step_ms"]), float(row["tokens_per_s"]))
                lines.setdefault(key, {})[int(row["batch"])] = point
            except ValueError:
                sys.exit(f"{path}:{line}: a number is not one: {row}")
    if not lines:
        sys.exit(f"{path}: no successful runs")
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv")
    parser.add_argument("-o", "--output", required=True, help="the PNG to write")
    parser.add_argument("--title", default="decode steps against batch size")
    args = parser.parse_args()
    lines = load(args.csv)
    fig, (lat, rate) = plt.subplots(1, 2, figsize=(11, 4.2))
    for (context, extra), points in sorted(lines.items()):
        batches = sorted(points)
        label = f"{context // 1024}K context" + (f" {extra}" if extra else "")
        lat.plot(batches, [points[b][0] for b in batches], marker="o", label=label)
        rate.plot(batches, [points[b][1] for b in batches], marker="o", label=label)
    for ax, ylabel in ((lat, "decode step (ms)"), (rate, "tokens/s (all sequences)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch (sequences decoded in one step)")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle(args.title)
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)


if __name__ == "__main__":
    main()
