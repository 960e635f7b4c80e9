"""Checks a csa-run --json output (docs/run-json.md) and prints what it holds.

    python3 check_run_json.py RUN.json [--text TEXT.txt] [--artifact DIR]

Exits 1 naming the first inconsistency: a member missing or of another type,
step counts that do not match the lists, a median outside [min, max], totals
that are not the sums of their parts. --text compares the generated ids with
a text-mode run's "generated:" lines; --artifact counts the profile's calls
against the plan's steps (plan.json). Prints one line per fact for FileCheck.
"""
import argparse
import json
import math
import sys


def fail(message):
    sys.exit(f"check_run_json: {message}")


def need(doc, key, kind, where="the object"):
    if key not in doc:
        fail(f"{where} has no '{key}'")
    value = doc[key]
    if kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    else:
        ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
    if not ok:
        fail(f"{where}.{key} is {value!r}, not {kind.__name__}")
    return value


def close(a, b):
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6)


def check_timing(prefill, decode, where):
    """One run's prefill and decode members."""
    need(prefill, "tokens", int, f"{where}.prefill")
    ms = need(prefill, "ms", float, f"{where}.prefill")
    need(prefill, "tokens_per_s", float, f"{where}.prefill")
    per_seq = need(prefill, "per_sequence_ms", list, f"{where}.prefill")
    prompt_steps = need(prefill, "step_ms", list, f"{where}.prefill")
    parts = per_seq + prompt_steps
    if parts and not close(sum(parts), ms):
        fail(f"{where}.prefill.ms {ms} is not the sum of its parts {sum(parts)}")
    steps = need(decode, "steps", int, f"{where}.decode")
    step_ms = need(decode, "step_ms", list, f"{where}.decode")
    if len(step_ms) != steps:
        fail(f"{where}.decode: {steps} steps but {len(step_ms)} step_ms")
    tokens = need(decode, "tokens", int, f"{where}.decode")
    if tokens < steps:
        fail(f"{where}.decode: {tokens} tokens from {steps} steps (a step makes one or more)")
    if steps and not close(sum(step_ms), need(decode, "ms", float, f"{where}.decode")):
        fail(f"{where}.decode.ms is not the sum of step_ms")
    # A batch decoded together times its steps alone (not the prompt's
    # single-token steps).
    together = tokens > steps
    timed = sorted(step_ms if together else prompt_steps + step_ms)
    if need(decode, "timed_steps", int, f"{where}.decode") != len(timed):
        fail(f"{where}.decode.timed_steps is not {len(timed)}")
    if timed:
        lo, mid, hi = decode["min_ms"], decode["median_ms"], decode["max_ms"]
        if not (lo <= mid <= hi) or not close(mid, timed[len(timed) // 2]) \
                or not close(lo, timed[0]) or not close(hi, timed[-1]):
            fail(f"{where}.decode: min/median/max {lo}/{mid}/{hi} are not the steps'")
    return steps, len(prompt_steps)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("json")
    parser.add_argument("--text", help="a text-mode run of the same command")
    parser.add_argument("--artifact", help="the artifact, to count the plan's steps")
    args = parser.parse_args()
    with open(args.json, encoding="utf-8") as f:
        lines = [line for line in f.read().splitlines() if line.strip()]
    if len(lines) != 1:
        fail(f"{args.json}: {len(lines)} lines, not one JSON object on one line")
    doc = json.loads(lines[0])
    if need(doc, "schema_version", int) != 1:
        fail("schema_version is not 1")
    need(doc, "version", str)
    artifact = need(doc, "artifact", dict)
    device = need(doc, "device", str)
    batch = need(doc, "batch", int)
    if need(doc, "threads", int) < 1:
        fail(f"threads is {doc['threads']}, not a count of threads")
    print(f"device {device}, model {need(artifact, 'model', str)}, batch {batch}, "
          f"prompt {need(doc, 'prompt_tokens', int)} tokens, context {need(doc, 'context', int)}")
    steps, prompt_steps = check_timing(need(doc, "prefill", dict), need(doc, "decode", dict), "")
    print(f"prefill {doc['prefill']['tokens']} tokens; decode {steps} steps "
          f"({doc['decode']['tokens']} tokens), "
          f"{len(doc['decode']['step_ms'])} step_ms, {doc['decode']['timed_steps']} timed")
    generated = need(doc, "generated", list)
    if len(generated) != batch or len(need(doc, "stopped_at_eos", list)) != batch:
        fail("generated / stopped_at_eos do not hold one list per sequence")
    for ids in generated:
        print("generated: " + " ".join(str(i) for i in ids))
    if args.text:
        with open(args.text, encoding="utf-8") as f:
            text = f.read().splitlines()
        first = [i for i, line in enumerate(text) if line.startswith("generated: ")][0]
        rows = [text[first][len("generated: "):]] + text[first + 1:first + batch]
        if rows != [" ".join(str(i) for i in ids) for ids in generated]:
            fail(f"the ids are not the text run's: {rows}")
        print("the same ids as the text run")
    cache = need(doc, "cache", dict)
    print(f"cache bytes {need(cache, 'bytes_in_use', int)} in use, "
          f"{need(cache, 'tokens_per_sequence', int)} tokens per sequence")
    need(doc, "transients", dict)
    gpu = doc.get("gpu", "missing")
    if gpu == "missing" or (device == "cpu") != (gpu is None):
        fail(f"gpu is {gpu!r} on {device}")
    if gpu is not None:
        print(f"gpu: {need(gpu, 'launches', int)} launches")

    runs = 1
    if "repeat" in doc:
        rep = doc["repeat"]
        runs = need(rep, "runs", int, "repeat")
        each = need(rep, "each", list, "repeat")
        if len(each) != runs:
            fail(f"repeat.each has {len(each)} runs, not {runs}")
        if each[0] != {"prefill": doc["prefill"], "decode": doc["decode"]}:
            fail("repeat.each[0] is not the top-level prefill and decode")
        for i, r in enumerate(each):
            check_timing(r["prefill"], r["decode"], f"repeat.each[{i}]")
        for key in ("prefill_ms", "prefill_tokens_per_s", "decode_step_ms",
                    "decode_tokens_per_s"):
            s = need(rep, key, dict, "repeat")
            values = sorted(s["values"])
            if len(values) != runs or not close(s["median"], values[len(values) // 2]) \
                    or not close(s["min"], values[0]) or not close(s["max"], values[-1]) \
                    or s["stdev"] < 0:
                fail(f"repeat.{key} is not the spread of its values: {s}")
        if [r["prefill"]["ms"] for r in each] != rep["prefill_ms"]["values"]:
            fail("repeat.prefill_ms.values are not each run's")
        print(f"repeat: {runs} runs, each checked")

    if "profile" in doc:
        profile = doc["profile"]
        kinds = need(profile, "by_kind", list, "profile")
        rows = need(profile, "by_layer", list, "profile")
        layers = need(profile, "layers", list, "profile")
        by_op = need(profile, "by_op", list, "profile")
        calls = sum(r["calls"] for r in kinds)
        for name, part in (("by_layer", rows), ("layers", layers), ("by_op", by_op)):
            if sum(r["calls"] for r in part) != calls:
                fail(f"profile.{name} counts other calls than by_kind")
            if not close(sum(r["ms"] for r in part), profile["total_ms"]):
                fail(f"profile.{name}'s ms do not add up to total_ms")
        print(f"profile: {calls} step calls in {len(kinds)} kinds, {len(by_op)} ops, "
              f"{len(rows)} layer rows")
        print("layers: " + " ".join(str(r["layer"]) if r["part"] == "layer" else r["part"]
                                    for r in layers))
        for r in rows:
            if (r["layer"] is None) != (r["part"] != "layer") or r["entry"] not in (
                    "prefill", "decode"):
                fail(f"a by_layer row's layer, part or entry is wrong: {r}")
        # The mHC mixes of each layer's decode steps, as an example of a row.
        mixes = sorted({(r["entry"], r["calls"]) for r in rows if r["op"] == "csa.hc_mix"})
        print("hc_mix rows (entry, calls): " + " ".join(f"{e}:{c}" for e, c in mixes))
        if args.artifact:
            with open(f"{args.artifact}/plan.json", encoding="utf-8") as f:
                plan = json.load(f)["entry_points"]
            prefills = batch * runs if doc["context"] == 0 else 0
            decodes = sum(len(r["decode"]["step_ms"]) + len(r["prefill"]["step_ms"])
                          for r in doc.get("repeat", {}).get("each", [doc]))
            expected = len(plan["prefill"]) * prefills + len(plan["decode"]) * decodes
            if calls != expected:
                fail(f"profile: {calls} step calls, but the plan's steps make {expected}")
            for entry, n in (("prefill", prefills), ("decode", decodes)):
                got = sum(r["calls"] for r in rows if r["entry"] == entry)
                if got != len(plan[entry]) * n:
                    fail(f"profile: {got} {entry} calls, not {len(plan[entry])} x {n}")
            print(f"profile calls = {len(plan['prefill'])} prefill steps x {prefills} + "
                  f"{len(plan['decode'])} decode steps x {decodes}")


if __name__ == "__main__":
    main()
