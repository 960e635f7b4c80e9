#!/usr/bin/env python3
"""Finds byte stores of registers that a float instruction wrote, in PTX.

ptxas compiles `st.b8 [a], %r` as a float-to-u8 conversion (F2IP.U8.F32 in
the SASS) when a float instruction (mul.rn.f32, ...) wrote %r: a kernel that
stores the bytes of an fp32 value must pass them through an integer
instruction first (the FP8 index-key row's scale came out with a low byte of
0 on an H100 before it did). Exit status 1, with each store named, if any
kernel of the files has one; 0 otherwise.

    tools/scripts/ptx-float-byte-stores.py kernels.ptx [...]
"""
import re
import sys

FLOAT_OP = re.compile(r"\.(f16|bf16|f32|f64)(x2)?$")
DEF = re.compile(r"^(?:@!?%p\d+\s+)?([a-z][\w.]*)\s+(%\w+)\s*,")
BYTE_STORE = re.compile(r"^(?:@!?%p\d+\s+)?st(?:\.\w+)*\.[bsu]8\s+\[[^\]]*\],\s*(%\w+)\s*;")


def float_writer(op):
    """Whether instruction `op` leaves a float in its destination."""
    if op.startswith(("cvt.", "cvta")):
        # cvt.<dst>.<src>: the destination type comes first.
        parts = op.split(".")
        dst = [p for p in parts[1:] if re.match(r"^[bsuf]\d+$|^bf16$", p)]
        return bool(dst) and dst[0].startswith(("f", "bf"))
    if op.startswith(("setp", "set.", "st", "ld", "mov", "selp", "shfl")):
        return False
    return bool(FLOAT_OP.search(op))


def main():
    found = 0
    for path in sys.argv[1:]:
        text = open(path).read()
        for body in re.split(r"\n(?=\.(?:visible|weak|extern)?\s*\.?(?:entry|func)\b)", text):
            head = re.search(r"\.(?:entry|func)\s+(?:\([^)]*\)\s*)?([\w$]+)", body)
            name = head.group(1) if head else "?"
            writers = {}
            lines = [l.strip() for l in body.split("\n")]
            for line in lines:
                m = DEF.match(line)
                if m and not m.group(1).startswith("st"):
                    writers.setdefault(m.group(2), set()).add(m.group(1))
            for line in lines:
                m = BYTE_STORE.match(line)
                if m and any(float_writer(op) for op in writers.get(m.group(1), ())):
                    found += 1
                    print(f"{path}: {name}: '{line}' stores a byte of a register that "
                          f"{', '.join(sorted(writers[m.group(1)]))} wrote")
    print(f"{found} byte stores of float registers")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
