#!/usr/bin/env python3
"""Checks csa-run --analyze=recall --json's `recall` rows (docs/run-json.md).

    check_recall.py RUN.json [--same-as OTHER.json] [--layers 2,3,...]

Every row: 0 <= recall_min <= recall <= ceiling <= 1, selected <= min(k,
visible), counts >= 0; every layer of --layers has a prefill row and (with
decode steps) decode rows; the mode is the schedule's. --same-as: OTHER's
rows are these, value for value (another device path, the same arithmetic).
Prints one summary line a layer; exits non-zero naming the first bad row.
"""
import argparse
import json
import sys

EPS = 1e-9


def fail(message):
    print(f"check_recall: {message}")
    sys.exit(1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("run")
    parser.add_argument("--same-as")
    parser.add_argument("--layers", default="")
    args = parser.parse_args()
    doc = json.load(open(args.run, encoding="utf-8"))
    rows = doc.get("recall")
    if not isinstance(rows, list) or not rows:
        fail("no recall rows")
    for i, r in enumerate(rows):
        where = f"recall[{i}] (layer {r.get('layer')}, {r.get('entry')})"
        for key in ("rows", "k", "run", "first_position"):
            if not isinstance(r[key], int) or r[key] < 0:
                fail(f"{where}: {key} is {r[key]!r}")
        if r["rows"] == 0:
            continue
        if not (-EPS <= r["recall_min"] <= r["recall"] + EPS <= r["ceiling"] + 2 * EPS <= 1 + 3 * EPS):
            fail(f"{where}: not 0 <= recall_min {r['recall_min']} <= recall {r['recall']} "
                 f"<= ceiling {r['ceiling']} <= 1")
        if r["selected"] > min(r["k"], r["visible"]) + EPS:
            fail(f"{where}: selected {r['selected']} > min(k {r['k']}, visible {r['visible']})")
        if r["entry"] not in ("prefill", "decode"):
            fail(f"{where}: entry {r['entry']!r}")
        if r["mode"] not in ("full", "reindex", "reuse"):
            fail(f"{where}: mode {r['mode']!r} (a layer with a global cache)")
    layers = [int(x) for x in args.layers.split(",") if x]
    decode_steps = len(doc["decode"]["step_ms"]) if doc.get("decode") else 0
    for layer in layers:
        mine = [r for r in rows if r["layer"] == layer]
        prefill = [r for r in mine if r["entry"] == "prefill"]
        decode = [r for r in mine if r["entry"] == "decode"]
        if len(prefill) != 1 or len(decode) != decode_steps:
            fail(f"layer {layer}: {len(prefill)} prefill rows and {len(decode)} decode rows "
                 f"({decode_steps} decode steps ran)")
        print(f"layer {layer} {prefill[0]['mode']}: prefill recall {prefill[0]['recall']:.4f} "
              f"ceiling {prefill[0]['ceiling']:.4f}, {len(decode)} decode rows")
    extra = sorted({r["layer"] for r in rows} - set(layers)) if layers else []
    if extra:
        fail(f"rows for layers {extra}, not in --layers")
    if args.same_as:
        other = json.load(open(args.same_as, encoding="utf-8")).get("recall")
        if other != rows:
            fail(f"the rows differ from {args.same_as}'s")
        print(f"the same rows as {args.same_as}")
    print(f"{len(rows)} rows checked")


if __name__ == "__main__":
    main()
