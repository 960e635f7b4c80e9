#!/usr/bin/env python3
"""Draws csa-run --analyze=recall --json outputs: recall per layer and step.

    csa-run a.csa --weights=W --prompt-file=p.txt --max-new-tokens=64 --analyze=recall --json > a.json
    csa-run b.csa ... --analyze=recall --json > b.json      # another schedule
    python3 bench/plot_recall.py a.json b.json -o recall.png [--labels A,B] [--title TEXT]

One panel per sparse attention layer (those with a global cache: Full,
Reindex, Reuse), titled with its number and mode. In each, per input: the
selected set's share of the dense attention mass (recall, solid) and the most
that as many entries hold (ceiling, dashed) at each decode step's position,
and the prefill's mean over its rows as a point at its last row. The gap
between the two lines is what the layer's selection (indexer, HSI pool,
reuse) loses. The rows are docs/run-json.md's `recall`. Needs matplotlib
(Debian's python3-matplotlib, installed by tools/scripts/setup.sh).
"""
import argparse
import json
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402


def load(path):
    """The csa-run --json object of `path` ('-': stdin) with its recall rows."""
    name = "stdin" if path == "-" else path
    try:
        text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()
    except OSError as e:
        sys.exit(f"{path}: {e.strerror}")
    try:
        doc = json.loads(text)
    except ValueError as e:
        sys.exit(f"{name}: not a csa-run --json output (not JSON: {e})")
    if not isinstance(doc, dict) or "recall" not in doc:
        sys.exit(f"{name}: no 'recall' member (run csa-run with --analyze=recall --json)")
    rows = doc["recall"]
    need = {"entry", "layer", "mode", "first_position", "rows", "recall", "ceiling"}
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or not need <= set(row):
            sys.exit(f"{name}: recall[{i}] lacks one of {', '.join(sorted(need))}")
    return name, rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("inputs", nargs="+", help="csa-run --analyze=recall --json outputs ('-': stdin)")
    parser.add_argument("-o", "--output", required=True, help="the PNG to write")
    parser.add_argument("--labels", help="a comma-separated label per input")
    parser.add_argument("--title", default="recall of the selected entries")
    args = parser.parse_args()
    runs = [load(p) for p in args.inputs]
    labels = args.labels.split(",") if args.labels else [name for name, _ in runs]
    if len(labels) != len(runs):
        sys.exit(f"--labels gives {len(labels)} labels for {len(runs)} inputs")

    layers = {}  # layer -> its modes, in input order (schedules may differ)
    for _, rows in runs:
        for row in rows:
            modes = layers.setdefault(row["layer"], [])
            if row["mode"] not in modes:
                modes.append(row["mode"])
    if not layers:
        sys.exit("no recall rows in the inputs (no layer with a global cache ran)")
    order = sorted(layers)
    cols = min(4, len(order))
    grid_rows = math.ceil(len(order) / cols)
    fig, axes = plt.subplots(grid_rows, cols, figsize=(4.2 * cols, 3.0 * grid_rows),
                             squeeze=False, sharey=True)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    points = 0
    for panel, layer in enumerate(order):
        ax = axes[panel // cols][panel % cols]
        for i, ((_, rows), label) in enumerate(zip(runs, labels)):
            color = colors[i % len(colors)]
            mine = [r for r in rows if r["layer"] == layer and r["rows"] > 0]
            decode = sorted((r for r in mine if r["entry"] == "decode"),
                            key=lambda r: r["first_position"])
            if decode:
                x = [r["first_position"] for r in decode]
                ax.plot(x, [r["recall"] for r in decode], color=color, label=f"{label} recall")
                ax.plot(x, [r["ceiling"] for r in decode], color=color, linestyle="--",
                        label=f"{label} ceiling")
                points += len(decode)
            for r in mine:
                if r["entry"] == "prefill":
                    last = r["first_position"] + r["rows"] - 1
                    ax.plot([last], [r["recall"]], marker="o", color=color)
                    ax.plot([last], [r["ceiling"]], marker="^", color=color)
                    points += 1
        ax.set_title(f"layer {layer} ({' / '.join(m or '?' for m in layers[layer])})", fontsize=9)
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        ax.set_xlabel("position", fontsize=8)
        if panel % cols == 0:
            ax.set_ylabel("share of attention mass", fontsize=8)
    for panel in range(len(order), grid_rows * cols):
        axes[panel // cols][panel % cols].axis("off")
    axes[0][0].legend(fontsize=7, loc="lower left")
    fig.suptitle(args.title + " (o, ^: prefill mean recall, ceiling)", fontsize=10)
    fig.tight_layout()
    # A temporary name beside the output, then a rename: a failed draw
    # leaves an existing plot as it was.
    tmp = f"{args.output}.tmp.{os.getpid()}.png"
    try:
        fig.savefig(tmp, dpi=110)
        os.replace(tmp, args.output)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    print(f"wrote {args.output}: {len(order)} layers, {points} points from {len(runs)} inputs")


if __name__ == "__main__":
    main()
