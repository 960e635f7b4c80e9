"""Replaces one file of an artifact and re-signs it (its new size and SHA-256
in manifest.json), as someone swapping an artifact's files by hand would: the
runtime must still refuse what does not belong to the artifact's model.

usage: resign.py ARTIFACT RELATIVE_PATH SOURCE_FILE
       resign.py ARTIFACT config.json set KEY JSON_VALUE
"""
import hashlib
import json
import sys

artifact, relative = sys.argv[1], sys.argv[2]
if len(sys.argv) == 4:
    data = open(sys.argv[3], "rb").read()
elif sys.argv[3] == "set":
    config = json.load(open(f"{artifact}/{relative}"))
    config[sys.argv[4]] = json.loads(sys.argv[5])
    data = (json.dumps(config, indent=2) + "\n").encode()
else:
    sys.exit(__doc__)
open(f"{artifact}/{relative}", "wb").write(data)
manifest = json.load(open(f"{artifact}/manifest.json"))
for f in manifest["files"]:
    if f["path"] == relative:
        f["bytes"], f["sha256"] = len(data), hashlib.sha256(data).hexdigest()
json.dump(manifest, open(f"{artifact}/manifest.json", "w"))
