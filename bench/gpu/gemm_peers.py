# The prefill GEMMs of h200-full at 4096 rows in PyTorch on the same GPU:
# bf16 matmul (cuBLAS) and FP8 torch._scaled_mm (row-wise scales), median
# of 30 timed runs after 5 warm-up runs, CUDA events.
import torch, statistics
def med(fn, n=30):
    for _ in range(5): fn()
    ts = []
    for _ in range(n):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); torch.cuda.synchronize(); ts.append(a.elapsed_time(b))
    return statistics.median(ts)
M = 4096
shapes = [("wo_a 32768x8192 g8", 8, 4096, 1024), ("8192x5120", 1, 8192, 5120),
          ("1280x32768", 1, 1280, 32768), ("5120x1280", 1, 5120, 1280)]
print("| shape | torch bf16 ms | TFLOP/s | torch fp8 _scaled_mm ms | TFLOP/s |")
for name, g, k, n in shapes:
    flop = 2 * M * k * n * g
    x = torch.randn(g, M, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(g, n, k, device="cuda", dtype=torch.bfloat16)
    tb = med(lambda: torch.bmm(x, w.transpose(1, 2)))
    x8 = x.to(torch.float8_e4m3fn); w8 = w.to(torch.float8_e4m3fn)
    sa = torch.ones(M, 1, device="cuda"); sb = torch.ones(1, n, device="cuda")
    def f8():
        for i in range(g):
            torch._scaled_mm(x8[i], w8[i].t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
    try:
        t8 = med(f8); s8 = f"{t8:.3f} | {flop / t8 / 1e9:.0f}"
    except Exception as e:
        s8 = f"n/a ({type(e).__name__}) | "
    print(f"| {name} | {tb:.3f} | {flop / tb / 1e9:.0f} | {s8} |")
