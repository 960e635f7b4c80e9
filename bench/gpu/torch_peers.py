#!/usr/bin/env python3
"""PyTorch peers of csa's generated kernels, timed on the same GPU in the same run.

Reads the CSV that `csa-gpu-check --time=N --csv=FILE` wrote and, for each
kernel that has an obvious PyTorch equivalent, times that equivalent on
random inputs of the same shapes: N calls captured in one CUDA graph (so
Python's per-call cost does not count, as csa's batches of back-to-back
launches), replayed between CUDA events; the median of 5 replays, per call:

  linear_<format>_<K>x<N>[_g<G>]  F.linear in bf16 (cuBLAS) on a bf16 weight:
                                  what a Hopper user does today after
                                  converting FP8/FP4 weights to bf16 (twice or
                                  four times the bytes); grouped: torch.bmm.
  rms_norm_<D>                    F.rms_norm in bf16.

Writes a markdown table joining both timings (csa, peer, ratio, roofline
fractions with the same byte and FLOP counts for csa; the peer's bytes are its
own bf16 operands).

  python3 torch_peers.py kernels.csv [--iterations=50] > table.md
"""
import csv
import re
import sys

import torch
import torch.nn.functional as F

COPY_BYTES_PER_S = 4.3e12
BF16_FLOPS_PER_S = 790e12


def median_us(fn, iterations):
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()  # warm-up (cuBLAS heuristics, workspace) outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(iterations):
            fn()
    times = []
    for _ in range(5):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / iterations)
    times.sort()
    return times[len(times) // 2]


def peer(name, rows, iterations):
    """(description, median us, bytes, flops) or None."""
    dev = "cuda"
    m = re.match(r"linear_[a-z0-9_]+?_(\d+)x(\d+)(?:_g(\d+))?(?:_t\d+)?$", name)
    if m:
        k, n, g = int(m.group(1)), int(m.group(2)), int(m.group(3) or 1)
        x = torch.randn(rows, k, device=dev, dtype=torch.bfloat16)
        if g == 1:
            w = torch.randn(n, k, device=dev, dtype=torch.bfloat16)
            fn = lambda: F.linear(x, w)
            what = "F.linear bf16"
        else:
            w = torch.randn(g, n // g, k // g, device=dev, dtype=torch.bfloat16)
            xg = x.view(rows, g, k // g).transpose(0, 1)
            fn = lambda: torch.bmm(xg, w.transpose(1, 2))
            what = "torch.bmm bf16 (groups)"
        bytes_ = 2 * (rows * k + n * k // g + rows * n)
        flops = 2 * rows * k * n / g
        return what, median_us(fn, iterations), bytes_, flops
    m = re.match(r"rms_norm_(\d+)$", name)
    if m:
        d = int(m.group(1))
        x = torch.randn(rows, d, device=dev, dtype=torch.bfloat16)
        w = torch.randn(d, device=dev, dtype=torch.bfloat16)
        fn = lambda: F.rms_norm(x, (d,), w, 1e-6)
        return "F.rms_norm bf16", median_us(fn, iterations), 2 * (2 * rows * d + d), 0
    return None


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    iterations = 20
    for a in sys.argv[1:]:
        if a.startswith("--iterations="):
            iterations = int(a.split("=", 1)[1])
    if len(args) != 1:
        sys.exit(__doc__)
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"per call: median of 5 replays of a graph of {iterations} calls (peer), "
          f"median of 5 batches of back-to-back launches (csa)\n")
    print("| kernel | rows | csa us | csa TB/s | csa TFLOP/s | csa % roofline "
          "| peer | peer us | peer % roofline | csa / peer |")
    print("|---|---:|---:|---:|---:|---:|---|---:|---:|---:|")
    for row in csv.DictReader(open(args[0])):
        name, rows = row["kernel"], int(row["rows"])
        us = float(row["median_us"])
        found = peer(name, rows, iterations)
        cells = [name, str(rows), f"{us:.1f}", f"{float(row['tb_per_s']):.3f}",
                 f"{float(row['tflop_per_s']):.3f}",
                 f"{100 * float(row['roofline_fraction']):.2f}"]
        if found:
            what, peer_us, b, f = found
            roof = max(b / COPY_BYTES_PER_S, f / BF16_FLOPS_PER_S) / (peer_us * 1e-6)
            cells += [what, f"{peer_us:.1f}", f"{100 * roof:.2f}", f"{us / peer_us:.1f}x"]
        else:
            cells += ["-", "-", "-", "-"]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
