"""Probe 4 of bf16 column sums (8192 x 8192 -> 8192 float32): does software prefetching
raise the partial read's ceiling (0.82 of the bench's copy floor in colsum_probe2)? A
warp issues in order: in ``acc += tl.load(...)`` the next step's load waits for this
step's data, so each warp has one tile in flight. ``DEPTH`` tiles are loaded ahead and
carried through the loop. Variants: DEPTH 0-3, tile shapes, split, warps; the partial
kernel alone, then with the finishing kernel; and slices that interleave row blocks
(``part_interleaved``) instead of owning contiguous row ranges. The copy floor is measured
as the bench does (1 GiB float32).
Run (GPU): PYTHONPATH=src python bench/colsum_probe3.py"""
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
def part(X, P, N: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr, ROWS: tl.constexpr,
         DEPTH: tl.constexpr):
    cb = tl.program_id(0)
    rs = tl.program_id(1)
    cols = cb * BC + tl.arange(0, BC)
    ptrs = X + (rs * ROWS + tl.arange(0, BR))[:, None].to(tl.int64) * N + cols[None, :]
    acc = tl.zeros([BR, BC], tl.float32)
    step = BR * N
    if DEPTH == 0:
        for _ in range(0, ROWS, BR):
            acc += tl.load(ptrs, eviction_policy="evict_first").to(tl.float32)
            ptrs += step
    elif DEPTH == 1:
        a = tl.load(ptrs, eviction_policy="evict_first")
        for _ in range(BR, ROWS, BR):
            ptrs += step
            b = tl.load(ptrs, eviction_policy="evict_first")
            acc += a.to(tl.float32)
            a = b
        acc += a.to(tl.float32)
    elif DEPTH == 2:
        a = tl.load(ptrs, eviction_policy="evict_first")
        b = tl.load(ptrs + step, eviction_policy="evict_first")
        ptrs += step
        for _ in range(2 * BR, ROWS, BR):
            ptrs += step
            c = tl.load(ptrs, eviction_policy="evict_first")
            acc += a.to(tl.float32)
            a = b
            b = c
        acc += a.to(tl.float32) + b.to(tl.float32)
    else:
        a = tl.load(ptrs, eviction_policy="evict_first")
        b = tl.load(ptrs + step, eviction_policy="evict_first")
        c = tl.load(ptrs + 2 * step, eviction_policy="evict_first")
        ptrs += 2 * step
        for _ in range(3 * BR, ROWS, BR):
            ptrs += step
            d = tl.load(ptrs, eviction_policy="evict_first")
            acc += a.to(tl.float32)
            a = b
            b = c
            c = d
        acc += a.to(tl.float32) + b.to(tl.float32) + c.to(tl.float32)
    tl.store(P + rs * N + cols, tl.sum(acc, 0))


@triton.jit
def part_interleaved(X, P, N: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr,
                     ROWS: tl.constexpr, SPLIT: tl.constexpr):
    """Slice s sums row blocks s, s + SPLIT, s + 2 SPLIT, ...: every program of the grid
    walks the same band of rows at the same time (the page locality of row sums)."""
    cb = tl.program_id(0)
    rs = tl.program_id(1)
    cols = cb * BC + tl.arange(0, BC)
    tl.store(P + rs * N + cols, tile_sum(X, cb, rs, N, BR, BC, ROWS, SPLIT))


def main():
    copy = copy_gbs()
    M = N = 8192
    x = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
    ref = x.float().sum(0)
    nbytes = x.numel() * 2
    print(f"copy {copy:.0f} GB/s (1 GiB float32, as the bench)")
    y = torch.empty(N, device="cuda")
    res = []
    for br, bc in ((16, 64), (8, 128), (8, 64)):
        for split in (4, 8):
            for w in (2, 4):
                for depth in (0, 3):
                    rows = M // split
                    if rows < 4 * br:
                        continue
                    p = torch.empty(split, N, device="cuda")
                    g = (N // bc, split)
                    runs = {"part": lambda: part[g](x, p, N, br, bc, rows, depth, num_warps=w),
                            "two": lambda: (part[g](x, p, N, br, bc, rows, depth, num_warps=w),
                                            finish[(N // 64,)](p, y, N, split, 64))}
                    for name, fn in runs.items():
                        try:
                            y.fill_(float("nan"))
                            fn()
                            torch.cuda.synchronize()
                        except Exception as e:   # noqa: BLE001 -- reported
                            print(name, br, bc, split, w, depth, "FAILED", str(e)[:100])
                            continue
                        if name == "two" and not torch.allclose(y, ref, rtol=1e-3, atol=1e-1):
                            print(name, br, bc, split, w, depth, "WRONG")
                            continue
                        ms = do_bench(fn, warmup=10, rep=40, return_mode="median")
                        res.append((nbytes / ms / 1e6, name, depth, br, bc, split, w))
    for br, bc in ((8, 64), (16, 64), (32, 64), (8, 128), (16, 128), (4, 256)):
        for split in (4, 8, 16, 32):
            for w in (2, 4, 8):
                rows = M // split
                p = torch.empty(split, N, device="cuda")
                g = (N // bc, split)
                runs = {"ipart": lambda: part_interleaved[g](x, p, N, br, bc, rows, split,
                                                             num_warps=w),
                        "itwo": lambda: (part_interleaved[g](x, p, N, br, bc, rows, split,
                                                             num_warps=w),
                                         finish[(N // 64,)](p, y, N, split, 64))}
                for name, fn in runs.items():
                    y.fill_(float("nan"))
                    fn()
                    torch.cuda.synchronize()
                    if name == "itwo" and not torch.allclose(y, ref, rtol=1e-3, atol=1e-1):
                        print(name, br, bc, split, w, "WRONG")
                        continue
                    ms = do_bench(fn, warmup=10, rep=40, return_mode="median")
                    res.append((nbytes / ms / 1e6, name, 0, br, bc, split, w))
    for name in ("part", "two", "ipart", "itwo"):
        for depth in (0, 1, 2, 3):
            best = sorted((r for r in res if r[1] == name and r[2] == depth), reverse=True)[:2]
            if name.startswith("i") and depth:
                continue
            for gbs, *cfg in best:
                print(f"{name:5s} depth {depth}: {gbs:6.0f} GB/s  {gbs / copy:.3f} of copy  "
                      f"[BR, BC, split, warps] = {cfg[2:]}")


if __name__ == "__main__":
    main()
