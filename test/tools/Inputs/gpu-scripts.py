#!/usr/bin/env python3
"""Writes the scripts tools/scripts/gpu-check.sh writes into gpu-run/ (its
`cat > gpu-run/NAME <<'RUN' ... RUN` blocks) into DIR, without compiling
anything, and prints their names: for checking them with bash -n and running
the ones that need no GPU (test/tools/logits-check.test).

  gpu-scripts.py GPU_CHECK_SH DIR
"""
import os
import re
import sys

text = open(sys.argv[1]).read()
out = sys.argv[2]
os.makedirs(out, exist_ok=True)
blocks = re.findall(r"^cat > gpu-run/(\S+) <<'RUN'\n(.*?)^RUN$", text, re.S | re.M)
for name, body in blocks:
    path = os.path.join(out, name)
    with open(path, "w") as f:
        f.write(body)
    os.chmod(path, 0o755)
    print(name)
