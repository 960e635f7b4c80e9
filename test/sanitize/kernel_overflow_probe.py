#!/usr/bin/env python3
"""A positive control for csa-compile --sanitize-kernels (tools/scripts/sanitize.sh).

    LD_PRELOAD=$(gcc -print-file-name=libasan.so) python3 kernel_overflow_probe.py ART [--overflow]

Loads ART's instrumented kernels/host.so into this process (ASan preloaded)
and calls its rms_norm kernel on rows of a numpy buffer: as they are (a clean
run, prints "in bounds: ok"), or, with --overflow, with a descriptor that
claims one row more than the buffer holds, which AddressSanitizer must
report as a heap-buffer-overflow inside the generated kernel (the process
then exits non-zero before printing anything else).
"""
import ctypes
import json
import sys

import numpy as np


class Desc2(ctypes.Structure):
    _fields_ = [("allocated", ctypes.c_void_p), ("aligned", ctypes.c_void_p),
                ("offset", ctypes.c_int64), ("sizes", ctypes.c_int64 * 2),
                ("strides", ctypes.c_int64 * 2)]


class Desc1(ctypes.Structure):
    _fields_ = [("allocated", ctypes.c_void_p), ("aligned", ctypes.c_void_p),
                ("offset", ctypes.c_int64), ("sizes", ctypes.c_int64 * 1),
                ("strides", ctypes.c_int64 * 1)]


def desc2(array, rows, cols):
    p = array.ctypes.data
    return Desc2(p, p, 0, (rows, cols), (cols, 1))


def main():
    artifact = sys.argv[1]
    overflow = "--overflow" in sys.argv[2:]
    listing = json.load(open(f"{artifact}/kernels/host.json", encoding="utf-8"))
    norms = [k for k in listing["kernels"] if k["name"].startswith("rms_norm_")]
    if not norms:
        sys.exit(f"{artifact}: no rms_norm kernel in kernels/host.json")
    kernel = norms[0]
    dim = int(kernel["name"].split("_")[-1])
    library = ctypes.CDLL(f"{artifact}/kernels/host.so")
    fn = getattr(library, kernel["symbol"])
    rows = 64  # a buffer past numpy's small-block cache: malloc'd, so ASan sees its end
    x = (np.random.default_rng(1).standard_normal((rows, dim)).astype(np.float32).view(np.uint32)
         >> 16).astype(np.uint16)
    w = np.full(dim, 0x3F80, dtype=np.uint16)  # bf16 1.0
    y = np.zeros((rows + 1, dim), dtype=np.uint16)
    claimed = rows + 1 if overflow else rows
    dx, dy = desc2(x, claimed, dim), desc2(y, claimed, dim)
    p = w.ctypes.data
    dw = Desc1(p, p, 0, (dim,), (1,))
    fn(ctypes.byref(dx), ctypes.byref(dw), ctypes.byref(dy))
    if not np.isfinite(y[:rows].view(np.int16).astype(np.float64)).all():
        sys.exit("the kernel wrote no rows")
    print(f"{kernel['name']} over {claimed} rows of a {rows}-row buffer: "
          + ("no report (the kernels are not instrumented?)" if overflow else "in bounds: ok"))
    if overflow:
        sys.exit(1)


if __name__ == "__main__":
    main()
