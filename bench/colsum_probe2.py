"""Probe 3 of bf16 column sums (8192 x 8192 -> 8192 float32; the engine reads at 0.78 of
copy): where the time goes and what a single launch gives. Variants, same run:
- ``part``: the engine's partial kernel alone ([BR rows x BC kept] tiles, rows split
  SPLIT ways, evict_first), without the finishing kernel -- the read's own ceiling;
- ``two``: partials + the finishing kernel (BC_F columns per program), as the engine;
- ``incr``: as ``two`` with the tile's pointers advanced by increments (no per-step
  index math);
- ``one``: one launch, no split: a program owns BC whole columns;
- ``last``: one launch -- each program stores its partial, counts itself in a per-column-
  block counter, and the last one of a block sums the block's partials in slice order
  (deterministic) and resets the counter.
Run (GPU): PYTHONPATH=src python bench/colsum_probe2.py"""
import os
import sys

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from colsum_probe import finish  # noqa: E402  (the partials' sum, shared by the probes)


@triton.jit
def part(X, P, N: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr, ROWS: tl.constexpr,
         INCR: tl.constexpr):
    cb = tl.program_id(0)
    rs = tl.program_id(1)
    cols = cb * BC + tl.arange(0, BC)
    acc = tl.zeros([BR, BC], tl.float32)
    if INCR:
        ptrs = X + (rs * ROWS + tl.arange(0, BR))[:, None].to(tl.int64) * N + cols[None, :]
        for _ in range(0, ROWS, BR):
            acc += tl.load(ptrs, eviction_policy="evict_first").to(tl.float32)
            ptrs += BR * N
    else:
        for r in range(rs * ROWS, rs * ROWS + ROWS, BR):
            rows = r + tl.arange(0, BR)
            acc += tl.load(X + rows[:, None].to(tl.int64) * N + cols[None, :],
                           eviction_policy="evict_first").to(tl.float32)
    tl.store(P + rs * N + cols, tl.sum(acc, 0))


@triton.jit
def last(X, P, Y, CNT, N: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr,
         ROWS: tl.constexpr, SPLIT: tl.constexpr):
    cb = tl.program_id(0)
    rs = tl.program_id(1)
    cols = cb * BC + tl.arange(0, BC)
    acc = tl.zeros([BR, BC], tl.float32)
    ptrs = X + (rs * ROWS + tl.arange(0, BR))[:, None].to(tl.int64) * N + cols[None, :]
    for _ in range(0, ROWS, BR):
        acc += tl.load(ptrs, eviction_policy="evict_first").to(tl.float32)
        ptrs += BR * N
    tl.store(P + rs * N + cols, tl.sum(acc, 0))
    tl.debug_barrier()
    seen = tl.atomic_add(CNT + cb, 1, sem="acq_rel", scope="gpu")
    if seen == SPLIT - 1:
        tot = tl.zeros([BC], tl.float32)
        for s in range(SPLIT):
            tot += tl.load(P + s * N + cols, volatile=True)
        tl.store(Y + cols, tot)
        tl.atomic_xchg(CNT + cb, 0, sem="relaxed", scope="gpu")


def main():
    M = N = 8192
    x = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
    ref = x.float().sum(0)
    nbytes = x.numel() * 2
    dst = torch.empty_like(x)
    copy_ms = do_bench(lambda: dst.copy_(x), warmup=10, rep=50, return_mode="median")
    copy = 2 * nbytes / copy_ms / 1e6
    print(f"copy {copy:.0f} GB/s")
    y = torch.empty(N, device="cuda")
    res = []
    for br, bc in ((16, 64), (16, 128), (8, 256), (32, 64), (4, 512), (2, 1024)):
        for split in (4, 8, 16, 32):
            for w in (4, 8):
                rows = M // split
                p = torch.empty(split, N, device="cuda")
                cnt = torch.zeros(N // bc, device="cuda", dtype=torch.int32)
                g = (N // bc, split)
                runs = {
                    "part": lambda: part[g](x, p, N, br, bc, rows, False, num_warps=w),
                    "two": lambda: (part[g](x, p, N, br, bc, rows, False, num_warps=w),
                                    finish[(N // 64,)](p, y, N, split, 64)),
                    "incr": lambda: (part[g](x, p, N, br, bc, rows, True, num_warps=w),
                                     finish[(N // 64,)](p, y, N, split, 64)),
                    "last": lambda: last[g](x, p, y, cnt, N, br, bc, rows, split, num_warps=w),
                }
                for name, fn in runs.items():
                    try:
                        y.fill_(float("nan"))
                        fn()
                        torch.cuda.synchronize()
                    except Exception as e:   # noqa: BLE001 -- reported
                        print(name, br, bc, split, w, "FAILED", str(e)[:100])
                        continue
                    if name != "part":
                        ok = torch.allclose(y, ref, rtol=1e-3, atol=1e-1)
                        if not ok:
                            print(name, br, bc, split, w, "WRONG")
                            continue
                    ms = do_bench(fn, warmup=10, rep=40, return_mode="median")
                    res.append((nbytes / ms / 1e6, name, br, bc, split, w))
    # one launch without a split: each program owns BC whole columns (grid N / BC)
    for br, bc in ((64, 32), (128, 32), (32, 32), (128, 16), (256, 16), (64, 16)):
        for w in (2, 4, 8):
            def fn():
                part[(N // bc, 1)](x, y, N, br, bc, M, True, num_warps=w)
            try:
                y.fill_(float("nan"))
                fn()
                torch.cuda.synchronize()
            except Exception as e:   # noqa: BLE001 -- reported
                print("one", br, bc, w, "FAILED", str(e)[:100])
                continue
            if not torch.allclose(y, ref, rtol=1e-3, atol=1e-1):
                print("one", br, bc, w, "WRONG")
                continue
            ms = do_bench(fn, warmup=10, rep=40, return_mode="median")
            res.append((nbytes / ms / 1e6, "one", br, bc, 1, w))
    for name in ("part", "two", "incr", "last", "one"):
        best = sorted((r for r in res if r[1] == name), reverse=True)[:3]
        for gbs, *cfg in best:
            print(f"{name:5s} {gbs:6.0f} GB/s  {gbs / copy:.3f} of copy  {cfg[1:]}")
    # the 'last' counters must be back at zero after every run (self-resetting)
    print("counters all zero after the runs:", bool((cnt == 0).all()))


if __name__ == "__main__":
    main()
