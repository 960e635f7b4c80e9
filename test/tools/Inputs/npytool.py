#!/usr/bin/env python3
"""A .npy reader and writer with the Python standard library only (no numpy),
for the tests of csa-run --logits-out and csa-diff; an implementation apart
from runtime/support/Npy.cpp (the header read as numpy reads it, with
ast.literal_eval).

  npytool.py make OUT --shape=2,3 --values=1,0,0,0,1,nan [--version=2]
             [--descr='<f4'] [--fortran] [--raw-header=TEXT]
      writes an array (values repeated cyclically to fill the shape);
      --raw-header: the header bytes exactly as given (backslash escapes
      read), no padding, no newline added
  npytool.py fuzz FILE N COMMAND ARG...
      N times: FILE with 1-3 random bytes of its first 128 changed (seeded),
      written to FILE.fuzz, then COMMAND ARG... (FILE.fuzz as it names it);
      fails when the command dies of a signal or exits other than 0, 1, 2
  npytool.py header FILE
      prints the version, the header dict and the file size
  npytool.py top FILE [--k=5] [--sequence=S] [--from=I] [--to=J]
      prints each step's top-k as csa-run --print-logits does
      ("prefill logits: id:val ..." for step 0, "decode I-1 logits: ..."
      after), for rows I..J-1 of sequence S (rows renumbered from 0)
  npytool.py argmax FILE [--sequence=S]
      prints "argmax: ID ID ..." (lowest id among ties), one per step
  npytool.py status COMMAND ARG...
      runs the command, passes its output through, prints "exit N"
"""
import ast
import struct
import subprocess
import sys


def options(args):
    opts, rest = {}, []
    for a in args:
        if a.startswith("--"):
            key, _, value = a[2:].partition("=")
            opts[key] = value
        else:
            rest.append(a)
    return opts, rest


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    assert data[:6] == b"\x93NUMPY", "no magic"
    major = data[6]
    n = 2 if major == 1 else 4
    length = int.from_bytes(data[8:8 + n], "little")
    header = data[8 + n:8 + n + length].decode("latin1")
    d = ast.literal_eval(header)
    assert d["descr"] == "<f4" and d["fortran_order"] is False, d
    shape = d["shape"]
    count = 1
    for s in shape:
        count *= s
    body = data[8 + n + length:]
    assert len(body) == 4 * count, (len(body), count)
    return major, header, shape, struct.unpack("<%df" % count, body), len(data)


def rows_of(path, opts):
    _, _, shape, values, _ = read(path)
    vocab = shape[-1]
    steps = shape[-2]
    seq = int(opts.get("sequence", 0))
    if len(shape) == 2:
        assert seq == 0
    start = seq * steps
    rows = [values[(start + i) * vocab:(start + i + 1) * vocab] for i in range(steps)]
    lo = int(opts.get("from", 0))
    hi = int(opts.get("to", steps))
    return rows[lo:hi]


def main(argv):
    command, args = argv[1], argv[2:]
    if command == "status":
        r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        sys.stdout.write(r.stdout.decode("utf-8", "replace"))
        print("exit", r.returncode)
        return 0
    if command == "fuzz":
        import random
        path, count, cmd = args[0], int(args[1]), args[2:]
        data = open(path, "rb").read()
        rng = random.Random(1)
        codes = {}
        for i in range(count):
            b = bytearray(data)
            for _ in range(rng.randint(1, 3)):
                b[rng.randrange(min(128, len(b)))] = rng.randrange(256)
            if rng.random() < 0.2:
                b = b[:rng.randrange(len(b))]
            with open(path + ".fuzz", "wb") as f:
                f.write(b)
            r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if r.returncode not in (0, 1, 2):
                print("fuzz case %d: exit %d" % (i, r.returncode))
                return 1
            codes[r.returncode] = codes.get(r.returncode, 0) + 1
        print("fuzz: %d cases, exit 2 in %d" % (count, codes.get(2, 0)))
        return 0
    opts, rest = options(args)
    if command == "make":
        shape = [int(s) for s in opts["shape"].split(",") if s != ""]
        values = [float(v) for v in opts.get("values", "0").split(",")]
        count = 1
        for s in shape:
            count *= s
        data = [values[i % len(values)] for i in range(count)]
        major = int(opts.get("version", 1))
        descr = opts.get("descr", "<f4")
        fortran = "True" if "fortran" in opts else "False"
        shape_text = "(%d,)" % shape[0] if len(shape) == 1 else "(" + ", ".join(map(str, shape)) + ")"
        header = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (descr, fortran, shape_text)
        n = 2 if major == 1 else 4
        total = 8 + n + len(header) + 1
        header += " " * ((-total) % 64) + "\n"
        if "raw-header" in opts:
            header = opts["raw-header"].encode("latin1").decode("unicode_escape")
        out = b"\x93NUMPY" + bytes([major, 0]) + len(header).to_bytes(n, "little")
        out += header.encode("latin1") + struct.pack("<%df" % count, *data)
        with open(rest[0], "wb") as f:
            f.write(out)
        return 0
    if command == "header":
        major, header, shape, _, size = read(rest[0])
        print("version %d.0 header %r size %d" % (major, header, size))
        return 0
    if command == "top":
        k = int(opts.get("k", 5))
        for i, row in enumerate(rows_of(rest[0], opts)):
            order = sorted(range(len(row)), key=lambda j: (-row[j], j))[:k]
            label = "prefill logits" if i == 0 else "decode %d logits" % (i - 1)
            print(label + ":" + "".join(" %d:%.6g" % (j, row[j]) for j in order))
        return 0
    if command == "argmax":
        best = []
        for row in rows_of(rest[0], opts):
            best.append(max(range(len(row)), key=lambda j: (row[j], -j)))
        print("argmax: " + " ".join(map(str, best)))
        return 0
    print("unknown command", command, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
