"""Probe 7 of bf16 column sums (8192 x 8192 -> 8192 float32): the last untried idea, a
nondeterministic finish. Six probes put the deterministic sum at 0.77-0.80 of copy: the
partials' size caps the grid, and the finish costs a launch. With fp32 atomics the grid
is free (up to whole-row tiles over thousands of short programs, the row sums' pattern,
which reads at 0.88), and the finish is the atomics themselves.

Variants (program (cb, rs) sums BR x BC tiles of rows rs, rs + SPLIT, ... as blocks):
- ``atom``: zero Y (a memset launch), then scalar ``tl.atomic_add`` of each column sum.
- ``tma``: zero Y, then one bulk TMA reduction (``cp.reduce.async.bulk.tensor.add``) per
  program: the L2 adds the box, no per-element atomics.
- ``last``: one launch, no memset. Atomics into a plan-owned float32 accumulator; a
  counter per column block (zeroed once, never reset: "last" is old % SPLIT == SPLIT - 1)
  picks the last-arriving program, which swaps the accumulator with zeros into Y.
Each variant's result is checked (first run and after timing). The copy floor is
measured as the bench does (1 GiB float32).
Run (GPU): PYTHONPATH=src python bench/colsum_probe6.py"""
import os
import sys

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from colsum_probe import tile_sum  # noqa: E402  (shared by the probes)
from probe_common import colsum_input  # noqa: E402


@triton.jit
def atom(X, Y, N: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr, ROWS: tl.constexpr,
         SPLIT: tl.constexpr):
    cb = tl.program_id(0)
    rs = tl.program_id(1)
    s = tile_sum(X, cb, rs, N, BR, BC, ROWS, SPLIT)
    tl.atomic_add(Y + cb * BC + tl.arange(0, BC), s, sem="relaxed")


@triton.jit
def tma(X, Y, N: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr, ROWS: tl.constexpr,
        SPLIT: tl.constexpr):
    cb = tl.program_id(0)
    rs = tl.program_id(1)
    s = tile_sum(X, cb, rs, N, BR, BC, ROWS, SPLIT)
    W: tl.constexpr = 256 if BC > 256 else BC
    d = tl.make_tensor_descriptor(Y, shape=[N // W, W], strides=[W, 1],
                                  block_shape=[BC // W, W])
    d.atomic_add([cb * (BC // W), 0], tl.reshape(s, [BC // W, W]))


@triton.jit
def last(X, A, Y, C, N: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr,
         ROWS: tl.constexpr, SPLIT: tl.constexpr):
    cb = tl.program_id(0)
    rs = tl.program_id(1)
    s = tile_sum(X, cb, rs, N, BR, BC, ROWS, SPLIT)
    cols = cb * BC + tl.arange(0, BC)
    tl.atomic_add(A + cols, s, sem="relaxed")
    tl.debug_barrier()   # every thread's adds precede the counter's release
    old = tl.atomic_add(C + cb, 1, sem="acq_rel")
    if old % SPLIT == SPLIT - 1:
        tl.store(Y + cols, tl.atomic_xchg(A + cols, tl.zeros([BC], tl.float32),
                                          sem="relaxed"))


def _configs(M, N):
    out = []
    for bc in (256, 512, 1024, 2048, 4096, 8192):
        for br in (1, 2, 4, 8, 16):
            if not 2048 <= br * bc <= 8192:
                continue
            for split in (32, 64, 256, 1024, 2048):
                progs = (N // bc) * split
                if progs < 256 or progs > 8192 or (M // split) % br:
                    continue
                for w in (4, 8):
                    out.append((br, bc, split, w))
    return out


def main():
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8,
                                                                 device="cuda"))
    M = N = 8192
    copy, x, ref, nbytes = colsum_input(M, N)
    y = torch.empty(N, device="cuda")
    acc = torch.zeros(N, device="cuda")
    cfgs = _configs(M, N)
    print(len(cfgs), "configs x 3 variants")
    res = []
    for br, bc, split, w in cfgs:
        g = (N // bc, split)
        a = (N, br, bc, M // split, split)
        cnt = torch.zeros(N // bc, device="cuda", dtype=torch.int32)
        runs = {"atom": lambda: (y.zero_(), atom[g](x, y, *a, num_warps=w)),
                "tma": lambda: (y.zero_(), tma[g](x, y, *a, num_warps=w)),
                "last": lambda: last[g](x, acc, y, cnt, *a, num_warps=w)}
        for name, fn in runs.items():
            if name == "tma" and bc < 256:
                continue
            ok = True
            try:
                for phase in ("first", "timed"):
                    y.fill_(float("nan"))
                    fn()
                    torch.cuda.synchronize()
                    if not torch.allclose(y, ref, rtol=1e-4, atol=2e-2):
                        print(name, br, bc, split, w, "WRONG", phase,
                              float((y - ref).abs().max()))
                        ok = False
                        break
                    if phase == "first":
                        ms = do_bench(fn, warmup=10, rep=40, return_mode="median")
            except Exception as e:   # noqa: BLE001 -- reported
                print(name, br, bc, split, w, "FAILED", str(e)[:100])
                ok = False
            if ok:
                res.append((nbytes / ms / 1e6, name, br, bc, split, w))
    with open(os.path.join(os.environ.get("OUT", "."), "colsum_probe6.txt"), "w") as f:
        f.write(f"copy {copy:.0f} GB/s\n")
        for r in sorted(res, reverse=True):
            f.write(f"{r}\n")
    for name in ("atom", "tma", "last"):
        for gbs, _, *cfg in sorted((r for r in res if r[1] == name), reverse=True)[:3]:
            print(f"{name:4s}: {gbs:6.0f} GB/s  {gbs / copy:.3f} of copy  "
                  f"[BR, BC, split, warps] = {cfg}")
        for bc in (256, 1024, 4096, 8192):
            best = sorted((r for r in res if r[1] == name and r[3] == bc), reverse=True)[:1]
            for gbs, _, *cfg in best:
                print(f"   best at BC {bc:5d}: {gbs / copy:.3f}  {cfg}")


if __name__ == "__main__":
    main()
