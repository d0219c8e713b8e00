"""Per-kernel GPU times of the norm engine's chosen plans (torch.profiler, CUDA activity)
for layer / RMS norm backward at 8192, 65536 and 262144-wide bf16 rows: how much of a
plan is its main kernel and how much the zeroing / finishing launches.
Run (GPU): PYTHONPATH=src python bench/norm_profile.py"""
import torch
from torch.profiler import ProfilerActivity, profile

import opendnn.bench.norm as N
import opendnn.frontend as cudnn


def main():
    for R, L in ((8192, 8192), (2048, 65536), (512, 262144)):
        x = torch.randn(R, L, device="cuda", dtype=torch.bfloat16)
        dy = torch.randn_like(x)
        w = torch.randn(1, L, device="cuda", dtype=torch.bfloat16)
        xf = x.float()
        mean = xf.mean(1, keepdim=True)
        rstd = torch.rsqrt(xf.var(1, unbiased=False, keepdim=True) + 1e-5)
        for kind in ("layernorm", "rmsnorm"):
            fn, plan = N._backward(cudnn, kind, dy, x, w, mean, rstd)
            for _ in range(5):
                fn()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(20):
                    fn()
                torch.cuda.synchronize()
            total = 0.0
            rows = []
            for ev in prof.key_averages():
                if ev.device_type.name != "CUDA" or ev.count == 0:
                    continue
                us = ev.device_time_total / 20
                total += us
                rows.append((us, ev.key[-24:], ev.count // 20))
            nb = 3 * x.numel() * 2
            print(f"{kind} bwd {R}x{L} {plan[:60]}: {total:.1f} us/run "
                  f"({nb / total / 1e3:.0f} GB/s if back to back)")
            for us, k, c in sorted(rows, reverse=True):
                print(f"    {us:8.1f} us  x{c}  {k}")


if __name__ == "__main__":
    main()
