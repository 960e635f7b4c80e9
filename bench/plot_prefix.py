#!/usr/bin/env python3
"""Draws csa-bench-prefix-cache's JSON (docs/prefix-cache.md) as one PNG.

    csa-bench-prefix-cache h200-full.csa --weights=DIR --device=cuda --history=4096,8192 \\
        --new-tokens=64,512 --replay=0,512,2560 --json=prefix.json
    python3 bench/plot_prefix.py prefix.json -o prefix.png [--title TEXT]

Left: the time to a turn's first logits against the turn's new tokens, one
line per case (cold prefill of the whole request, global + local hit,
global-only hit for each replay length) and history length; with
`--against=history`, against the history length, one line per case and
turn length (several JSON files are merged: one run of long histories
each). Right: the
global-only run's KL from the global + local one at each teacher-forced step
after the turn, per replay length (the first history and turn length).
Needs matplotlib (Debian's python3-matplotlib, installed by
tools/scripts/setup.sh).
"""
import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", nargs="+")
    parser.add_argument("-o", "--output", required=True)
    parser.add_argument("--title", default="")
    parser.add_argument("--against", choices=["new", "history"], default="new",
                        help="the left panel's x axis: the turn's new tokens or the history")
    args = parser.parse_args()
    runs = []
    for path in args.json:
        try:
            doc = json.load(open(path, encoding="utf-8"))
            runs += doc["runs"]
        except (OSError, ValueError, KeyError) as e:
            sys.exit(f"{path}: not a csa-bench-prefix-cache JSON ({e})")
    if not runs:
        sys.exit(f"{args.json[0]}: no runs")

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    if args.against == "history":
        for new in sorted({r["new"] for r in runs}):
            rows = sorted((r for r in runs if r["new"] == new), key=lambda r: r["history"])
            hist = [r["history"] for r in rows]
            left.plot(hist, [r["cold_seconds"] * 1e3 for r in rows], "o-", label=f"cold, N={new}")
            left.plot(hist, [r["global_local"]["seconds"] * 1e3 for r in rows], "s-",
                      label=f"global+local, N={new}")
            left.plot(hist, [r["global_only"][0]["seconds"] * 1e3 for r in rows], "^--",
                      label=f"global-only ({rows[0]['global_only'][0]['replayed_tokens']} "
                            f"replayed), N={new}")
        left.set_xscale("log", base=2)
        left.set_yscale("log")
        left.set_xlabel("history tokens L")
    for history in sorted({r["history"] for r in runs}) if args.against == "new" else []:
        rows = sorted((r for r in runs if r["history"] == history), key=lambda r: r["new"])
        new = [r["new"] for r in rows]
        left.plot(new, [r["cold_seconds"] * 1e3 for r in rows], "o-", label=f"cold, L={history}")
        left.plot(new, [r["global_local"]["seconds"] * 1e3 for r in rows], "s-",
                  label=f"global+local, L={history}")
        for i, g in enumerate(rows[0]["global_only"]):
            left.plot(new, [r["global_only"][i]["seconds"] * 1e3 for r in rows], "^--",
                      label=f"global-only ({g['replayed_tokens']} replayed), L={history}")
    if args.against == "new":
        left.set_xscale("log", base=2)
        left.set_xlabel("new tokens in the turn")
    left.set_ylabel("ms to the turn's first logits")
    left.grid(True, alpha=0.3)
    left.legend(fontsize=7)

    first = runs[0]
    for g in first["global_only"]:
        kl = [s["kl"] for s in g["vs_global_local"]]
        right.plot(range(len(kl)), kl, label=f"{g['replayed_tokens']} replayed")
    right.set_yscale("log")
    right.set_xlabel("step after the turn (teacher-forced)")
    right.set_ylabel("KL(global+local || global-only), nats")
    right.set_title(f"L={first['history']}, N={first['new']}", fontsize=9)
    right.grid(True, alpha=0.3)
    right.legend(fontsize=8)
    fig.suptitle(args.title or f"prefix cache: {doc.get('artifact', '')} on {doc.get('device', '')}")
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
