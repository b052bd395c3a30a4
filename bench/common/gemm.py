"""The machine's measured fp32 GEMM peak: what a benchmark's useful FLOP/s are set against."""
from __future__ import annotations

import time

SIZE = 2048
TRIES = 5


def fp32_gemm_peak(threads: int) -> float:
    """FLOP/s of torch.mm on two SIZE x SIZE fp32 matrices at `threads` threads, best of TRIES
    (after one warm-up). Prints the figure. Sets this process's torch thread count."""
    import torch

    torch.set_num_threads(threads)
    a, b = torch.randn(SIZE, SIZE), torch.randn(SIZE, SIZE)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(TRIES):
        t = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t)
    peak = 2 * SIZE**3 / best
    print(f"fp32 GEMM peak: torch.mm {SIZE}^3 at {threads} threads, best of {TRIES}: {peak / 1e9:.1f} GFLOP/s")
    return peak
