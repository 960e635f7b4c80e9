#!/usr/bin/env python3
"""The GPU time of a decode step, kernel by kernel, from ncu's CSV.

    ncu --profile-from-start off --clock-control none --cache-control none \
        --metrics gpu__time_duration.sum --csv \
        ./csa-run MODEL.csa ... --gpu-profile-steps=N > step.csv
    bench/gpu/step_profile.py LABEL=step.csv[.gz] [LABEL=...] [--top=N] [--png=F]

csa-run --gpu-profile-steps=N puts exactly decode step N's kernels inside the
capture range (docs/gpu.md, "Profiling one step"). Prints, per file, the total kernel time and a Markdown table
of the N longest kernels (time in the step, launches, time a launch, share);
with --png (matplotlib), a bar chart of those kernels' time in each file.
"""
import argparse
import collections
import csv
import gzip
import io
import sys


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        lines = f.read().splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith('"ID"')]
    if not starts:
        sys.exit(f"{path}: no ncu CSV header (a line starting with \"ID\")")
    rows = list(csv.reader(io.StringIO("\n".join(lines[starts[0]:]))))
    header = rows[0]
    try:
        name, value, unit = (header.index(k) for k in ("Kernel Name", "Metric Value", "Metric Unit"))
    except ValueError as e:
        sys.exit(f"{path}: {e}")
    scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
    total, calls = collections.defaultdict(float), collections.Counter()
    for r in rows[1:]:
        if len(r) <= max(name, value, unit):
            continue
        if r[unit] not in scale:
            sys.exit(f"{path}: unit '{r[unit]}' of {r[name]} is not a time")
        total[r[name]] += float(r[value].replace(",", "")) * scale[r[unit]]
        calls[r[name]] += 1
    return total, calls


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+", help="LABEL=PATH (an ncu CSV, optionally gzipped)")
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--png", help="write a bar chart here (needs matplotlib)")
    a = p.parse_args()
    runs = []
    for spec in a.files:
        label, _, path = spec.partition("=")
        if not path:
            sys.exit(f"'{spec}' is not LABEL=PATH")
        runs.append((label, *load(path)))
    for label, total, calls in runs:
        step = sum(total.values())
        print(f"### {label}: {step / 1e3:.2f} ms of kernel time in {sum(calls.values())} launches\n")
        print("| kernel | us a step | launches | us a launch | share |\n|---|---:|---:|---:|---:|")
        for k, t in sorted(total.items(), key=lambda kv: -kv[1])[: a.top]:
            print(f"| `{k}` | {t:.0f} | {calls[k]} | {t / calls[k]:.2f} | {100 * t / step:.1f} % |")
        print()
    if a.png:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        first = runs[0][1]
        names = [k for k, _ in sorted(first.items(), key=lambda kv: -kv[1])[: a.top]]
        fig, ax = plt.subplots(figsize=(10, 0.35 * len(names) + 1.5))
        height = 0.8 / len(runs)
        for j, (label, total, _) in enumerate(runs):
            ax.barh([i + j * height for i in range(len(names))], [total.get(n, 0) / 1e3 for n in names],
                    height=height, label=f"{label} ({sum(total.values()) / 1e3:.1f} ms)")
        ax.set_yticks([i + 0.4 - height / 2 for i in range(len(names))])
        ax.set_yticklabels(names, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("ms of GPU time in one decode step")
        ax.legend()
        fig.tight_layout()
        fig.savefig(a.png, dpi=110)


if __name__ == "__main__":
    main()
