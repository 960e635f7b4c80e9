#!/usr/bin/env python3
"""Draws csa-run --json outputs: decode step latency and the per-layer profile.

    csa-run model.csa --weights=W --prompt-file=p.txt --max-new-tokens=64 --json > a.json
    csa-run model.csa ... --profile=json --repeat=5 --warmup > b.json
    python3 bench/plot_run.py a.json b.json -o run.png [--labels A,B] [--title TEXT]
    csa-run tiny.csa --random-weights --prompt=1,2,3 --json | python3 bench/plot_run.py - -o run.png

Each input is a file of csa-run --json objects, one a line (several runs
appended to one file are several inputs), or '-' for stdin. The top panel has
one line per run: the latency of each single-token step in ms (with
--context, the prompt's token-by-token steps first, then the decode steps;
with --repeat, every run of the repetition, the first one solid); the legend
gives each run's prefill and median step. Below it, one panel per run with a
profile (csa-run --profile=json): the time in each layer (the embedding, the
layers, the head), stacked by op (the six slowest ops over the run, the rest
as "other"), prefill and decode together. The JSON schema is
docs/run-json.md. Needs matplotlib (Debian's python3-matplotlib, installed by
tools/scripts/setup.sh).
"""
import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

TOP_OPS = 6


def load(path):
    """The csa-run --json objects of `path` ('-': stdin), each with its name."""
    try:
        text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()
    except OSError as e:
        sys.exit(f"{path}: {e.strerror}")
    name = "stdin" if path == "-" else path
    runs = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
        except ValueError as e:
            sys.exit(f"{name}:{number}: not a csa-run --json output (not JSON: {e})")
        if not isinstance(doc, dict) or not {"prefill", "decode", "generated"} <= set(doc):
            sys.exit(f"{name}:{number}: not a csa-run --json output "
                     "(no prefill, decode and generated members)")
        runs.append((name if number == 1 else f"{name}:{number}", doc))
    if not runs:
        sys.exit(f"{name}: no csa-run --json output in it")
    return runs


def step_series(doc):
    """[(prefill, decode)] of every timed run of `doc` (--repeat: each)."""
    each = doc.get("repeat", {}).get("each") or [
        {"prefill": doc["prefill"], "decode": doc["decode"]}]
    return [(r["prefill"], r["decode"]) for r in each]


def layer_label(row):
    return str(row["layer"]) if row["part"] == "layer" else row["part"]


def draw_profile(ax, label, profile):
    """Stacked bars: each layer's time by op (prefill and decode together)."""
    rows = profile["by_layer"]
    layers = [layer_label(r) for r in profile["layers"]]
    total_by_op = {}
    for r in rows:
        total_by_op[r["op"]] = total_by_op.get(r["op"], 0.0) + r["ms"]
    top = [op for op, _ in sorted(total_by_op.items(), key=lambda kv: -kv[1])[:TOP_OPS]]
    series = {op: [0.0] * len(layers) for op in top + ["other"]}
    index = {name: i for i, name in enumerate(layers)}
    for r in rows:
        op = r["op"] if r["op"] in top else "other"
        series[op][index[layer_label(r)]] += r["ms"]
    bottom = [0.0] * len(layers)
    for op, values in series.items():
        if not any(values):
            continue
        ax.bar(range(len(layers)), values, bottom=bottom, label=op.replace("csa.", ""))
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.set_xticks(range(len(layers)))
    ax.set_xticklabels(layers, rotation=90 if len(layers) > 24 else 0, fontsize=8)
    ax.set_xlabel("layer")
    ax.set_ylabel("ms (all runs)")
    ax.set_title(f"{label}: profile by layer ({profile['total_ms']:.1f} ms)")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8, ncol=2)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("inputs", nargs="+", help="csa-run --json outputs ('-': stdin)")
    parser.add_argument("-o", "--output", required=True, help="PNG to write")
    parser.add_argument("--labels", help="the runs' names in the legend, comma-separated")
    parser.add_argument("--title", default="csa-run")
    args = parser.parse_args()
    runs = [run for path in args.inputs for run in load(path)]
    if args.labels:
        labels = args.labels.split(",")
        if len(labels) != len(runs):
            sys.exit(f"--labels: {len(labels)} names for {len(runs)} runs")
        runs = [(label, doc) for label, (_, doc) in zip(labels, runs)]
    profiled = [(label, doc["profile"]) for label, doc in runs if doc.get("profile")]

    fig, axes = plt.subplots(1 + len(profiled), 1, figsize=(11, 4.2 * (1 + len(profiled))),
                             squeeze=False)
    steps = axes[0][0]
    for i, (label, doc) in enumerate(runs):
        color = f"C{i % 10}"
        decode = doc["decode"]
        median = decode.get("median_ms")
        legend = (f"{label} ({doc.get('device', '?')}): prefill {doc['prefill']['tokens']} "
                  f"tokens {doc['prefill']['ms']:.2f} ms"
                  + (f", step median {median:.3f} ms" if median is not None else ""))
        for j, (prefill, dec) in enumerate(step_series(doc)):
            ms = list(prefill.get("step_ms", [])) + list(dec["step_ms"])
            if not ms:
                continue
            steps.plot(range(1, len(ms) + 1), ms, "o-" if len(ms) < 40 else "-",
                       color=color, alpha=1.0 if j == 0 else 0.35, markersize=3,
                       label=legend if j == 0 else None)
    steps.set_xlabel("single-token step")
    steps.set_ylabel("ms")
    steps.set_ylim(bottom=0)
    steps.set_title("decode step latency")
    steps.grid(True, alpha=0.3)
    if steps.get_legend_handles_labels()[0]:
        steps.legend(fontsize=8)

    for (label, profile), row in zip(profiled, axes[1:]):
        draw_profile(row[0], label, profile)

    fig.suptitle(args.title)
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
