"""Edits an artifact's kernels/kernels.json and re-signs it (new size and
SHA-256 in manifest.json), as a user editing an artifact by hand would.

usage: edit-kernels-json.py ARTIFACT state-to-module-state
         every kernel with state buffers says module_state instead (as
         artifacts before the state buffers did)
       edit-kernels-json.py ARTIFACT set-state KERNEL JSON_VALUE
         sets one kernel's "state" list
"""
import hashlib
import json
import sys

artifact, action = sys.argv[1], sys.argv[2]
path = "kernels/kernels.json"
meta = json.load(open(f"{artifact}/{path}"))
if action == "state-to-module-state":
    for k in meta["kernels"]:
        if k.pop("state", None):
            k["module_state"] = True
elif action == "set-state":
    for k in meta["kernels"]:
        if k["name"] == sys.argv[3]:
            k["state"] = json.loads(sys.argv[4])
else:
    sys.exit(f"unknown action {action}")
data = json.dumps(meta).encode()
open(f"{artifact}/{path}", "wb").write(data)
manifest = json.load(open(f"{artifact}/manifest.json"))
for f in manifest["files"]:
    if f["path"] == path:
        f["bytes"], f["sha256"] = len(data), hashlib.sha256(data).hexdigest()
json.dump(manifest, open(f"{artifact}/manifest.json", "w"))
