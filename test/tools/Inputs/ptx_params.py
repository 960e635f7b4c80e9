"""Checks that each kernel's "params" in kernels.json (what a launch passes,
one 8-byte slot each) are its PTX entry's parameters, one for one.

usage: ptx_params.py DIR   (the folder of kernels.json and kernels.ptx)
"""
import json, re, sys
d = json.load(open(sys.argv[1] + "/kernels.json"))
ptx = open(sys.argv[1] + "/kernels.ptx").read()
bad = []
for k in d["kernels"]:
    m = re.search(r"\.entry " + re.escape(k["name"]) + r"\((.*?)\)", ptx, re.S)
    n = len(re.findall(r"\.param ", m.group(1))) if m else -1
    if n != len(k["params"]):
        bad.append((k["name"], n, len(k["params"])))
print(len(d["kernels"]), "kernels;", "mismatched:", bad)
sys.exit(1 if bad else 0)
