"""Edits an artifact's plan.json and re-signs it (new size and SHA-256 in
manifest.json), as a user editing an artifact by hand would: the runtime must
then reject what the edit broke with a message, not crash.

usage: edit-plan.py ARTIFACT swap-kernel ENTRY INDEX ROLE SYMBOL
       edit-plan.py ARTIFACT set-attr ENTRY INDEX NAME JSON_VALUE
       edit-plan.py ARTIFACT set-arg ENTRY INDEX POSITION JSON_VALUE
       edit-plan.py ARTIFACT set-field ENTRY INDEX NAME JSON_VALUE
"""
import hashlib
import json
import sys

artifact, action, entry, index = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
plan = json.load(open(f"{artifact}/plan.json"))
call = plan["entry_points"][entry][index]
if action == "swap-kernel":
    call["attrs"]["kernels"][sys.argv[5]] = sys.argv[6]
elif action == "set-attr":
    call["attrs"][sys.argv[5]] = json.loads(sys.argv[6])
elif action == "set-arg":
    call["args"][int(sys.argv[5])] = json.loads(sys.argv[6])
elif action == "set-field":
    call[sys.argv[5]] = json.loads(sys.argv[6])
else:
    sys.exit(f"unknown action {action}")
data = json.dumps(plan).encode()
open(f"{artifact}/plan.json", "wb").write(data)
manifest = json.load(open(f"{artifact}/manifest.json"))
for f in manifest["files"]:
    if f["path"] == "plan.json":
        f["bytes"], f["sha256"] = len(data), hashlib.sha256(data).hexdigest()
json.dump(manifest, open(f"{artifact}/manifest.json", "w"))
