"""Crash safety and concurrency of csa-run's prefix cache (issue 24, item 5).

kill -9 of a writer at random points, in a loop, then two writers at once
on one directory, a few times: afterwards every entry in the directory must
be whole (its trailing SHA-256 is the hash of what comes before) and a reader
must restore from it without a warning.

usage: prefix_cache_crash.py CSA_RUN ARTIFACT CACHE_DIR TURNS_FILE
"""
import hashlib
import os
import random
import subprocess
import sys
import time

csa_run, artifact, cache, turns = sys.argv[1:5]
command = [csa_run, artifact, "--random-weights", f"--turns={turns}", f"--prefix-cache={cache}",
           "--prefix-cache-policy=global+local", "--quiet"]
rng = random.Random(24)

kills = 0
for i in range(12):
    p = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(rng.uniform(0.0, 0.15))
    if p.poll() is None:
        p.kill()
        kills += 1
    p.wait()
print(f"killed {kills} writers of 12")

for i in range(4):
    both = [subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            for _ in range(2)]
    for p in both:
        _, err = p.communicate()
        if p.returncode != 0 or "warning" in err:
            sys.exit(f"a concurrent writer failed ({p.returncode}): {err}")
print("concurrent writers: 8 runs, no warning")

entries = 0
for sub in ("blocks", "local"):
    for name in os.listdir(os.path.join(cache, sub)):
        if name.startswith("."):
            continue  # a killed writer's temporary file, never read
        data = open(os.path.join(cache, sub, name), "rb").read()
        if hashlib.sha256(data[:-32]).digest() != data[-32:]:
            sys.exit(f"torn entry: {sub}/{name}")
        entries += 1
print(f"entries whole: {entries}")

read = subprocess.run(command, capture_output=True, text=True)
if read.returncode != 0 or "warning" in read.stderr:
    sys.exit(f"the reader failed ({read.returncode}): {read.stderr}")
print("reader: no warning")
