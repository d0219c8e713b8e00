"""Per-kernel GPU times of the norm engine's chosen plans (torch.profiler, CUDA activity)
for layer / RMS norm backward at 8192, 65536 and 262144-wide bf16 rows: how much of a
plan is its main kernel and how much the zeroing / finishing launches.
Run (GPU): PYTHONPATH=src python bench/norm_profile.py [same: see ``same``]"""
import os
import sys

import torch
from torch.profiler import ProfilerActivity, profile

import opendnn.bench.norm as N
import opendnn.frontend as cudnn


def _profile(fn, label, nb):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
    total, rows = 0.0, []
    for ev in prof.key_averages():
        if ev.device_type.name != "CUDA" or ev.count == 0:
            continue
        us = ev.device_time_total / 20
        total += us
        rows.append((us, ev.key[-24:], ev.count // 20))
    print(f"{label}: {total:.1f} us/run ({nb / total / 1e3:.0f} GB/s if back to back)")
    for us, k, c in sorted(rows, reverse=True):
        print(f"    {us:8.1f} us  x{c}  {k}")


def same():
    """Session 13: the one-read backward's S=32 x 4 grid at 262144 and S=8 x 16 at 65536
    give every program the same addresses of one buffer, yet time 1.4 against 2.3 TB/s;
    which launch holds the difference?"""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import norm_coop_sweep as S
    x = torch.randn(512, 262144, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn_like(x)
    for R, L, split, groups in ((512, 262144, 32, 4), (2048, 65536, 8, 16)):
        xv, dyv = x.view(R, L), dy.view(R, L)
        w = torch.randn(1, L, device="cuda", dtype=torch.bfloat16)
        mean, rstd = S.row_stats("layernorm", xv.float())
        kn = dict(PATH=4, BLOCK_L=8192, BLOCK_ROWS=1, SPLIT=split, PROGRAMS=split * groups,
                  num_warps=8, PREFETCH=1, CHUNK=0)
        fn, _, _ = S._run("layernorm", True, xv, w, None, dyv, mean, rstd, kn)
        _profile(fn, f"layernorm bwd {R}x{L} SPLIT={split} groups={groups}", 3 * x.numel() * 2)


def main():
    if "same" in sys.argv:
        return same()
    for R, L in ((8192, 8192), (2048, 65536), (512, 262144)):
        x = torch.randn(R, L, device="cuda", dtype=torch.bfloat16)
        dy = torch.randn_like(x)
        w = torch.randn(1, L, device="cuda", dtype=torch.bfloat16)
        xf = x.float()
        mean = xf.mean(1, keepdim=True)
        rstd = torch.rsqrt(xf.var(1, unbiased=False, keepdim=True) + 1e-5)
        for kind in ("layernorm", "rmsnorm"):
            fn, plan = N._backward(cudnn, kind, dy, x, w, mean, rstd)
            _profile(fn, f"{kind} bwd {R}x{L} {plan[:60]}", 3 * x.numel() * 2)


if __name__ == "__main__":
    main()
