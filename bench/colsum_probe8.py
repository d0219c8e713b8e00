"""Probe 9 of bf16 column sums: where the time goes, by fitting two sizes.

Each variant runs at M = 8192 and 16384 rows (N = 8192 columns, bfloat16). The time is
fitted as t = bytes / (f * copy) + c: ``f`` is the streaming rate as a fraction of the
copy floor, ``c`` the fixed cost in microseconds (ramp, tail, second launch). Row sums at
0.88-0.89 of copy and column sums at 0.78 could differ in either.

Variants:
- ``rows``: row sums, one row per program (the pattern that reads at 0.88-0.89);
- ``ipart``: probe 4's interleaved partial kernel (alone, + finishing kernel, + the
  finishing kernel launched as a programmatic dependent (PDL: it is resident and waits in
  ``griddepcontrol.wait`` while the partial kernel runs; ``trig`` when the partial
  kernel also signals ``launch_dependents`` at its start);
- ``bpart``: a balanced grid of num_sms x m programs (every SM the same work; the row
  blocks dealt out in turn), alone and with the PDL finish.
The copy floor is measured as the bench does (1 GiB float32).
Run (GPU): PYTHONPATH=src python bench/colsum_probe8.py"""
import os
import sys

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from probe_common import copy_gbs  # noqa: E402


@triton.jit
def rowsum(X, Y, N: tl.constexpr):
    r = tl.program_id(0).to(tl.int64)
    v = tl.load(X + r * N + tl.arange(0, N), eviction_policy="evict_first")
    tl.store(Y + r, tl.sum(v.to(tl.float32), 0))


@triton.jit
def rowsum2(X, Y, N: tl.constexpr, BLOCK: tl.constexpr):
    """The engine's row-sum config: 2048-wide chunks of one row, 16 warps."""
    r = tl.program_id(0).to(tl.int64)
    acc = tl.zeros([BLOCK], tl.float32)
    for c in range(0, N, BLOCK):
        acc += tl.load(X + r * N + c + tl.arange(0, BLOCK),
                       eviction_policy="evict_first").to(tl.float32)
    tl.store(Y + r, tl.sum(acc, 0))


@triton.jit
def part(X, P, NB, G, N: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr,
         TRIG: tl.constexpr):
    """Column block program_id(0), row blocks g, g + G, ... of NB blocks of BR rows."""
    if TRIG:
        tl.extra.cuda.gdc_launch_dependents()
    cb = tl.program_id(0)
    g = tl.program_id(1)
    cols = cb * BC + tl.arange(0, BC)
    ptrs = X + (g * BR + tl.arange(0, BR))[:, None].to(tl.int64) * N + cols[None, :]
    acc = tl.zeros([BR, BC], tl.float32)
    for _ in range(g, NB, G):
        acc += tl.load(ptrs, eviction_policy="evict_first").to(tl.float32)
        ptrs += BR * G * N
    tl.store(P + g * N + cols, tl.sum(acc, 0))


@triton.jit
def finish(P, Y, G, N: tl.constexpr, BC: tl.constexpr, PDL: tl.constexpr):
    if PDL:
        tl.extra.cuda.gdc_wait()
    cols = tl.program_id(0) * BC + tl.arange(0, BC)
    acc = tl.zeros([BC], tl.float32)
    for s in range(G):
        acc += tl.load(P + s * N + cols)
    tl.store(Y + cols, acc)


@triton.jit
def finish2(P, Y, G, N: tl.constexpr, GP: tl.constexpr, BC: tl.constexpr, PDL: tl.constexpr):
    """All G partials of BC columns in one [GP, BC] load (GP = G rounded up to a power of
    two), so the finish is one L2 round trip, not G."""
    if PDL:
        tl.extra.cuda.gdc_wait()
    cols = tl.program_id(0) * BC + tl.arange(0, BC)
    g = tl.arange(0, GP)
    v = tl.load(P + g[:, None] * N + cols[None, :], mask=g[:, None] < G, other=0.0)
    tl.store(Y + cols, tl.sum(v, 0))


def variants(nsm):
    """Probe 9's first run (results/probes/colsum_probe8.txt) swept 28 grids; these are
    its best partial kernels, with warps varied."""
    out = [("ipart", 16, 64, 8, 4), ("ipart", 2, 2048, 128, 8)]
    for br, bc, m, w in ((8, 2048, 1, 8), (8, 2048, 2, 8), (8, 2048, 4, 8), (4, 2048, 4, 8),
                         (8, 2048, 2, 16), (16, 2048, 2, 16), (4, 1024, 4, 4),
                         (8, 1024, 4, 8), (16, 1024, 2, 16), (8, 4096, 2, 16)):
        out.append(("bpart", br, bc, nsm * m * bc // 8192, w))
    return out


def main():
    copy = copy_gbs()
    nsm = torch.cuda.get_device_properties(0).multi_processor_count
    N = 8192
    print(f"copy {copy:.0f} GB/s (1 GiB float32, as the bench); {nsm} SMs", flush=True)
    xs = {M: torch.randn(M, N, device="cuda", dtype=torch.bfloat16) for M in (8192, 16384)}
    refs = {M: x.double().sum(0).float() for M, x in xs.items()}
    y = torch.empty(N, device="cuda")
    rows = []

    def timed(name, fns):
        """fns: {M: (callable, check)}; appends (name, GB/s at 8192, f, c)."""
        t = {}
        for M, (fn, check) in fns.items():
            y.fill_(float("nan"))
            fn()
            torch.cuda.synchronize()
            if check is not None:
                err = (check() - refs[M]).abs().max().item()
                if not err < 0.05:
                    print(name, M, "WRONG", err, flush=True)
                    return
            t[M] = do_bench(fn, warmup=10, rep=60, return_mode="median") * 1e-3
        b = {M: xs[M].numel() * 2 for M in t}
        a = (t[16384] - t[8192]) / (b[16384] - b[8192])
        c = t[8192] - a * b[8192]
        gbs = b[8192] / t[8192] / 1e9
        rows.append((name, gbs, gbs / copy, 1 / a / 1e9 / copy, c * 1e6))
        print(f"{name:42s} {gbs:6.0f} GB/s {gbs / copy:.3f}  f {1 / a / 1e9 / copy:.3f}"
              f"  c {c * 1e6:5.1f} us", flush=True)

    yr = {M: torch.empty(M, device="cuda") for M in xs}
    timed("rows", {M: (lambda M=M: rowsum[(M,)](xs[M], yr[M], N, num_warps=8), None)
                   for M in xs})
    timed("rows (engine config)", {M: (lambda M=M: rowsum2[(M,)](xs[M], yr[M], N, 2048,
                                                                   num_warps=16), None)
                                   for M in xs})
    timed("torch colsum", {M: (lambda M=M: torch.sum(xs[M], 0, dtype=torch.float32, out=y),
                               lambda: y) for M in xs})
    for kind, br, bc, g, w in variants(nsm):
        p = torch.empty(g, N, device="cuda")
        grid = (N // bc, g)
        tag = f"{kind} [{br}x{bc}] g{g} w{w}"

        def mk(M, mode, fb=64):
            nb = M // br

            def fn():
                part[grid](xs[M], p, nb, g, N, br, bc, False, num_warps=w)
                if mode == "two":
                    finish[(N // 256,)](p, y, g, N, 256, False)
                elif mode == "f2":
                    finish2[(N // fb,)](p, y, g, N, gp, fb, False)
                elif mode == "f2pdl":
                    finish2[(N // fb,)](p, y, g, N, gp, fb, True, launch_pdl=True)
            chk = (lambda: p.sum(0)) if mode == "alone" else (lambda: y)
            return fn, chk
        gp = triton.next_power_of_2(g)
        timed(tag + " alone", {M: mk(M, "alone") for M in xs})
        timed(tag + " +finish(loop)", {M: mk(M, "two") for M in xs})
        for fb in (32, 64):
            if gp * fb <= 8192:
                timed(tag + f" +finish2 fb{fb}", {M: mk(M, "f2", fb) for M in xs})
                timed(tag + f" +finish2 fb{fb} pdl", {M: mk(M, "f2pdl", fb) for M in xs})
    with open(os.path.join(os.environ.get("OUT", "."), "colsum_probe8.txt"), "w") as f:
        f.write(f"copy {copy:.0f} GB/s\n")
        for r in rows:
            f.write(f"{r}\n")
    print("\nbest ten by GB/s at M=8192 (name, GB/s, of copy, streaming f, fixed c us):")
    for r in sorted(rows, key=lambda r: -r[1])[:10]:
        print(f"{r[0]:42s} {r[1]:6.0f} {r[2]:.3f} f {r[3]:.3f} c {r[4]:5.1f}")


if __name__ == "__main__":
    main()
