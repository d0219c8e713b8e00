"""Why the engine's column sum reads slower than the same kernel in bench/colsum_probe8.py:
the engine's plan timed three ways on 8192^2 bf16 (and float32) -- do_bench around
execute() (as the bench), CUDA-graph replays of execute() (GPU time only), and the host
cost of one execute() -- for the heuristic's config and a few forced ones.
Run (GPU): PYTHONPATH=src:bench python bench/colsum_engine_check.py"""
import os
import sys
import time

import torch
from triton.testing import do_bench, do_bench_cudagraph

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from colsum_engine_sweep import colsum  # noqa: E402
from probe_common import copy_gbs  # noqa: E402

CONFIGS = [None, dict(BLOCK_KEPT=2048, BLOCK_RED=8, SPLIT=66, num_warps=8),
           dict(BLOCK_KEPT=1024, BLOCK_RED=8, SPLIT=66, num_warps=4),
           dict(BLOCK_KEPT=2048, BLOCK_RED=8, SPLIT=1, num_warps=8),
           dict(BLOCK_KEPT=64, BLOCK_RED=16, SPLIT=8, num_warps=4)]


def main():
    copy = copy_gbs()
    print(f"copy {copy:.0f} GB/s", flush=True)
    lines = []
    for dt in (torch.bfloat16, torch.float32):
        x = torch.randn(8192, 8192, device="cuda", dtype=dt)
        nb = x.numel() * x.element_size()
        for k in CONFIGS:
            out = torch.empty(1, 8192, device="cuda")
            fn, name = colsum(x, out, k)
            fn()
            torch.cuda.synchronize()
            t_b = do_bench(fn, warmup=25, rep=100, return_mode="median")
            t_g = do_bench_cudagraph(fn, rep=100, return_mode="median")
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(200):
                fn()
            host = (time.perf_counter() - t0) / 200 * 1e6
            torch.cuda.synchronize()
            lines.append(f"{str(dt)[6:]:9s} {name[:70]:70s} do_bench {nb / t_b / 1e6 / copy:.3f}"
                         f"  graph {nb / t_g / 1e6 / copy:.3f}  host {host:5.1f} us")
            print(lines[-1], flush=True)
    with open(os.path.join(os.environ.get("OUT", "."), "colsum_engine_check.txt"), "w") as f:
        f.write(f"copy {copy:.0f} GB/s\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
