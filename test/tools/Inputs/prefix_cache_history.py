"""Prints a one-turn conversation file: the whole history of a csa-run --turns
run (each turn's appended ids and the ids it generated, from its --json
output) followed by more ids.

usage: prefix_cache_history.py TURNS_FILE RUN_JSON MORE_IDS
"""
import json
import sys

turns_file, run_json, more = sys.argv[1:4]
appended = []
for line in open(turns_file):
    line = line.strip()
    if not line or line.startswith("#"):
        continue
    appended.append(json.loads(line)["tokens"] if line.startswith("{")
                    else [int(t) for t in line.split(",")])
history = []
for turn, ran in zip(appended, json.load(open(run_json))["turns"]):
    history += turn + ran["generated"]
print(",".join(str(t) for t in history + [int(t) for t in more.split(",")]))
