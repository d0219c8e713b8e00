"""Probe 5 of bf16 column sums (8192 x 8192 -> 8192 float32). Probe 4 found slices that
interleave row blocks read faster (page locality), but only tried kept blocks of at most
256 columns (512-byte row segments). Here: interleaved slices with wide kept blocks
(512-8192 columns, 1-16 KB contiguous per row, up to whole rows as row sums read), the
partial kernel alone, with the finishing kernel, and with the finish done inside the
last-arriving program of each column block (``lastpart``: a counter per column block,
zeroed once; each run adds SPLIT, so "last" is ``old % SPLIT == SPLIT - 1``).
The copy floor is measured as the bench does (1 GiB float32).
Run (GPU): PYTHONPATH=src python bench/colsum_probe4.py"""
import os
import sys

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from colsum_probe import finish, tile_sum  # noqa: E402  (shared by the probes)
from probe_common import copy_gbs  # noqa: E402


@triton.jit
def ipart(X, P, N: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr,
          ROWS: tl.constexpr, SPLIT: tl.constexpr):
    cb = tl.program_id(0)
    rs = tl.program_id(1)
    cols = cb * BC + tl.arange(0, BC)
    tl.store(P + rs * N + cols, tile_sum(X, cb, rs, N, BR, BC, ROWS, SPLIT))


@triton.jit
def lastpart(X, P, Y, C, N: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr,
             ROWS: tl.constexpr, SPLIT: tl.constexpr, FB: tl.constexpr):
    cb = tl.program_id(0)
    rs = tl.program_id(1)
    cols = cb * BC + tl.arange(0, BC)
    tl.store(P + rs * N + cols, tile_sum(X, cb, rs, N, BR, BC, ROWS, SPLIT))
    tl.debug_barrier()
    old = tl.atomic_add(C + cb, 1, sem="acq_rel")
    if old % SPLIT == SPLIT - 1:
        for c0 in range(0, BC, FB):
            fc = cb * BC + c0 + tl.arange(0, FB)
            tot = tl.zeros([FB], tl.float32)
            for s in range(SPLIT):
                tot += tl.load(P + s * N + fc, cache_modifier=".cg")
            tl.store(Y + fc, tot)


def main():
    copy = copy_gbs()
    M = N = 8192
    x = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
    ref = x.float().sum(0)
    nbytes = x.numel() * 2
    print(f"copy {copy:.0f} GB/s (1 GiB float32, as the bench)")
    y = torch.empty(N, device="cuda")
    res = []
    cfgs = []
    for bc in (64, 256, 512, 1024, 2048, 4096, 8192):
        for br in (1, 2, 4, 8, 16, 32):
            if br * bc > 8192 or br * bc < 2048:
                continue
            for split in (8, 16, 32, 64, 128, 256):
                progs = (N // bc) * split
                if progs < 128 or progs > 4096 or split * N * 4 > nbytes * 0.04:
                    continue
                for w in (4, 8):
                    cfgs.append((br, bc, split, w))
    print(len(cfgs), "configs")
    for br, bc, split, w in cfgs:
        rows = M // split
        p = torch.empty(split, N, device="cuda")
        cnt = torch.zeros(N // bc, device="cuda", dtype=torch.int32)
        g = (N // bc, split)
        fb = min(bc, 512)
        runs = {"ipart": lambda: ipart[g](x, p, N, br, bc, rows, split, num_warps=w),
                "itwo": lambda: (ipart[g](x, p, N, br, bc, rows, split, num_warps=w),
                                 finish[(N // 64,)](p, y, N, split, 64)),
                "ilast": lambda: lastpart[g](x, p, y, cnt, N, br, bc, rows, split, fb,
                                             num_warps=w)}
        for name, fn in runs.items():
            try:
                y.fill_(float("nan"))
                fn()
                torch.cuda.synchronize()
            except Exception as e:   # noqa: BLE001 -- reported
                print(name, br, bc, split, w, "FAILED", str(e)[:100])
                continue
            if name != "ipart" and not torch.allclose(y, ref, rtol=1e-3, atol=1e-1):
                print(name, br, bc, split, w, "WRONG")
                continue
            ms = do_bench(fn, warmup=10, rep=40, return_mode="median")
            if name == "ilast":   # the counters must still be whole multiples of SPLIT
                torch.cuda.synchronize()
                y.fill_(float("nan"))
                fn()
                if not torch.allclose(y, ref, rtol=1e-3, atol=1e-1):
                    print(name, br, bc, split, w, "WRONG after timing")
                    continue
            res.append((nbytes / ms / 1e6, name, br, bc, split, w))
    with open(os.path.join(os.environ.get("OUT", "."), "colsum_probe4.txt"), "w") as f:
        for r in sorted(res, reverse=True):
            f.write(f"{r}\n")
    for name in ("ipart", "itwo", "ilast"):
        for gbs, _, *cfg in sorted((r for r in res if r[1] == name), reverse=True)[:4]:
            print(f"{name:5s}: {gbs:6.0f} GB/s  {gbs / copy:.3f} of copy  "
                  f"[BR, BC, split, warps] = {cfg}")
        for bc in (64, 256, 512, 1024, 2048, 4096, 8192):
            best = sorted((r for r in res if r[1] == name and r[3] == bc), reverse=True)[:1]
            for gbs, _, *cfg in best:
                print(f"   best at BC {bc:5d}: {gbs / copy:.3f}  {cfg}")


if __name__ == "__main__":
    main()
