"""A scripted agent loop through csa-run's prefix cache, one process a turn.

The harness keeps the conversation (every turn's appended ids and the ids
the model generated) and starts csa-run once per turn with the whole history
and the new ids as that run's only turn, with --prefix-cache=DIR: each run
restores what the earlier processes saved. A single process that keeps its
sequence in memory (the exact run) runs the same turns first; each turn's
generated ids are compared with it. Prints a line per turn and a summary;
--json writes the rows.

usage: agent_loop.py CSA_RUN ARTIFACT --cache DIR [--turns 10] [--first 24]
         [--append 5] [--generate 4] [--policy global|global+local]
         [--vocab V] [--seed S] [--json FILE] -- [csa-run flags: --random-weights, --weights=DIR, --device=cuda]
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

parser = argparse.ArgumentParser()
parser.add_argument("csa_run")
parser.add_argument("artifact")
parser.add_argument("--cache", required=True)
parser.add_argument("--turns", type=int, default=10)
parser.add_argument("--first", type=int, default=24)
parser.add_argument("--append", type=int, default=5)
parser.add_argument("--generate", type=int, default=4)
parser.add_argument("--policy", default="global")
parser.add_argument("--vocab", type=int, default=500)
parser.add_argument("--seed", type=int, default=7)
parser.add_argument("--json")
argv = sys.argv[1:]
split = argv.index("--") if "--" in argv else len(argv)
args = parser.parse_args(argv[:split])
args.run_flags = argv[split + 1:]

rng = random.Random(args.seed)
turns = [[rng.randrange(args.vocab) for _ in range(args.first if i == 0 else args.append)]
         for i in range(args.turns)]
work = tempfile.mkdtemp(prefix="agent-loop-")


def csa_run(lines, extra):
    path = os.path.join(work, "turns.txt")
    with open(path, "w") as f:
        for line in lines:
            f.write(",".join(map(str, line)) + "\n")
    command = [args.csa_run, args.artifact, f"--turns={path}", f"--max-new-tokens={args.generate}",
               "--json", "--quiet"] + args.run_flags + extra
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"csa-run failed ({done.returncode}): {done.stderr}")
    return json.loads(done.stdout), done.stderr


exact, _ = csa_run(turns, [])
rows = []
history = []
for i, appended in enumerate(turns):
    request = history + appended
    out, err = csa_run([request], [f"--prefix-cache={args.cache}",
                                   f"--prefix-cache-policy={args.policy}"])
    t = out["turns"][0]
    same = t["generated"] == exact["turns"][i]["generated"]
    rows.append({"turn": i + 1, "case": t["case"], "request_tokens": t["request_tokens"],
                 "restored_tokens": t["restored_tokens"], "replayed_tokens": t["replayed_tokens"],
                 "prefill_tokens": t["prefill_tokens"],
                 "seconds": t["restore_seconds"] + t["prefill_seconds"],
                 "equal_to_exact": same, "warnings": err.count("warning")})
    print(f"turn {i + 1}: {t['case']}, {t['restored_tokens']} of {t['request_tokens']} restored "
          f"({t['replayed_tokens']} replayed), {t['prefill_tokens']} run in "
          f"{(t['restore_seconds'] + t['prefill_seconds']) * 1e3:.1f} ms; "
          f"ids {'equal to' if same else 'differ from'} the exact run's")
    history = request + t["generated"]

cases = {}
for r in rows:
    cases[r["case"]] = cases.get(r["case"], 0) + 1
print("cases: " + ", ".join(f"{k} {v}" for k, v in sorted(cases.items())))
print(f"turns equal to the exact run: {sum(r['equal_to_exact'] for r in rows)} of {len(rows)}")
print(f"warnings: {sum(r['warnings'] for r in rows)}")
if args.json:
    with open(args.json, "w") as f:
        json.dump({"policy": args.policy, "turns": rows}, f, indent=1)
