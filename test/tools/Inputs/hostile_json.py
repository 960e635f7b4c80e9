"""Writes the hostile inputs of hostile-json.test: a number past double
(1e400) or a value nested 10^5 deep, placed in a copy of a config, an
artifact's manifest or a safetensors header.

  hostile_json.py config SRC DST (overflow|deep)
  hostile_json.py manifest ARTIFACT_DIR            (in place)
  hostile_json.py safetensors FILE                 (in place)
"""
import json
import struct
import sys

OVERFLOW = '"csa_hostile": 1e400, '
DEEP = '"csa_hostile": ' + "[" * 100000 + "]" * 100000 + ", "


def insert(text, what):
    at = text.index("{") + 1
    return text[:at] + what + text[at:]


def main():
    kind = sys.argv[1]
    if kind == "config":
        text = open(sys.argv[2]).read()
        open(sys.argv[3], "w").write(insert(text, OVERFLOW if sys.argv[4] == "overflow" else DEEP))
    elif kind == "manifest":
        path = sys.argv[2] + "/manifest.json"
        text = open(path).read()
        open(path, "w").write(insert(text, OVERFLOW))
    elif kind == "safetensors":
        data = open(sys.argv[2], "rb").read()
        (n,) = struct.unpack("<Q", data[:8])
        header = insert(data[8:8 + n].decode(), OVERFLOW)
        header += " " * ((8 - len(header) % 8) % 8)
        open(sys.argv[2], "wb").write(struct.pack("<Q", len(header)) + header.encode() + data[8 + n:])
    else:
        sys.exit("unknown kind " + kind)


main()
