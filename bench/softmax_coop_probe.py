"""Probe: softmax over long rows (65536, 262144 bf16) with ONE read of the input. A row
is cut into CHUNKS chunks held in registers by CHUNKS co-resident programs; each
publishes its chunk's (max, sum of exp) to the workspace, bumps the row's arrival
counter, waits until all CHUNKS arrived, combines the row's pairs and writes its chunk
from registers. The grid is persistent (GROUPS x CHUNKS <= one program per SM), so every
program of a row runs at once and the wait cannot deadlock. The counters are zeroed
before each run (a 1 KB memset, timed with the kernel).
Run (GPU): PYTHONPATH=src python bench/softmax_coop_probe.py"""
import os
import sys

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from probe_common import copy_gbs  # noqa: E402


@triton.jit
def coop(X, Y, WS, F, R, L: tl.constexpr, CH: tl.constexpr, CHUNKS: tl.constexpr,
         GROUPS: tl.constexpr):
    pid = tl.program_id(0)
    g = pid // CHUNKS
    c = pid % CHUNKS
    cols = c * CH + tl.arange(0, CH)
    k = tl.arange(0, CHUNKS)
    for row in range(g, R, GROUPS):
        base = row * L
        x = tl.load(X + base + cols, eviction_policy="evict_first").to(tl.float32)
        m = tl.max(x, 0)
        s = tl.sum(tl.exp(x - m), 0)
        tl.store(WS + (row * CHUNKS + c) * 2, m)
        tl.store(WS + (row * CHUNKS + c) * 2 + 1, s)
        tl.debug_barrier()
        tl.atomic_add(F + row, 1, sem="release")
        while tl.atomic_add(F + row, 0, sem="acquire") < CHUNKS:
            pass
        tl.debug_barrier()
        ms = tl.load(WS + (row * CHUNKS + k) * 2, cache_modifier=".cg")
        ss = tl.load(WS + (row * CHUNKS + k) * 2 + 1, cache_modifier=".cg")
        mx = tl.max(ms, 0)
        tot = tl.sum(ss * tl.exp(ms - mx), 0)
        tl.store(Y + base + cols, (tl.exp(x - mx) / tot).to(tl.bfloat16))


@triton.jit
def coop_prefetch(X, Y, WS, F, R, L: tl.constexpr, CH: tl.constexpr, CHUNKS: tl.constexpr,
                  GROUPS: tl.constexpr):
    """As coop, but the next row's chunk is loaded before the wait (two chunks live)."""
    pid = tl.program_id(0)
    g = pid // CHUNKS
    c = pid % CHUNKS
    cols = c * CH + tl.arange(0, CH)
    k = tl.arange(0, CHUNKS)
    x = tl.load(X + g * L + cols, mask=(cols < L) & (g < R), other=0.0,
                eviction_policy="evict_first").to(tl.float32)
    for row in range(g, R, GROUPS):
        base = row * L
        m = tl.max(x, 0)
        s = tl.sum(tl.exp(x - m), 0)
        tl.store(WS + (row * CHUNKS + c) * 2, m)
        tl.store(WS + (row * CHUNKS + c) * 2 + 1, s)
        tl.debug_barrier()
        tl.atomic_add(F + row, 1, sem="release")
        nxt = row + GROUPS
        x_next = tl.load(X + nxt * L + cols, mask=(cols < L) & (nxt < R), other=0.0,
                         eviction_policy="evict_first").to(tl.float32)
        while tl.atomic_add(F + row, 0, sem="acquire") < CHUNKS:
            pass
        tl.debug_barrier()
        ms = tl.load(WS + (row * CHUNKS + k) * 2, cache_modifier=".cg")
        ss = tl.load(WS + (row * CHUNKS + k) * 2 + 1, cache_modifier=".cg")
        mx = tl.max(ms, 0)
        tot = tl.sum(ss * tl.exp(ms - mx), 0)
        tl.store(Y + base + cols, (tl.exp(x - mx) / tot).to(tl.bfloat16),
                 eviction_policy="evict_first")
        x = x_next


def _measure(kern, x, y, ref, rows, width, ch, per_sm, w, sms, nb):
    chunks = width // ch
    groups = (sms * per_sm) // chunks
    if chunks > 64 or groups < 1:
        return None
    ws = torch.empty(rows * chunks * 2, device="cuda")
    flags = torch.zeros(rows, device="cuda", dtype=torch.int32)

    def fn():
        flags.zero_()
        kern[(groups * chunks,)](x, y, ws, flags, rows, width, ch, chunks, groups, num_warps=w)
    try:
        y.fill_(float("nan"))
        fn()
        torch.cuda.synchronize()
    except Exception as e:   # noqa: BLE001 -- reported
        print("FAILED", width, ch, per_sm, w, str(e)[:80])
        return None
    err = (y.float() - ref).abs().max().item()
    if not err < 1e-2:
        print("WRONG", width, ch, per_sm, w, err)
        return None
    ms = do_bench(fn, warmup=5, rep=30, return_mode="median")
    print(f"  {kern.fn.__name__} {width} CH={ch} per_sm={per_sm} warps={w}: "
          f"{nb / ms / 1e6:.0f} GB/s", flush=True)
    return (nb / ms / 1e6, width, ch, per_sm, w, kern.fn.__name__)


def main():
    copy = copy_gbs()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"copy {copy:.0f} GB/s, {sms} SMs")
    res = []
    for rows, width in ((1024, 65536), (256, 262144)):
        x = torch.randn(rows, width, device="cuda", dtype=torch.bfloat16)
        ref = torch.softmax(x.float(), -1)
        y = torch.empty_like(x)
        nb = 2 * x.numel() * 2
        t = do_bench(lambda: torch.softmax(x, -1), return_mode="median")
        print(f"{width}: torch {nb / t / 1e6:.0f} GB/s")
        for kern in (coop, coop_prefetch):
            for ch in (8192, 16384, 32768):
                for per_sm in (1, 2):
                    for w in (8, 16, 32):
                        r = _measure(kern, x, y, ref, rows, width, ch, per_sm, w, sms, nb)
                        if r is not None:
                            res.append(r)
        x = y = ref = None   # free before the next width
    with open(os.path.join(os.environ.get("OUT", "."), "softmax_coop_probe.txt"), "w") as f:
        for r in sorted(res, reverse=True):
            f.write(f"{r}\n")
    for width in (65536, 262144):
        for gbs, _, *cfg in sorted((r for r in res if r[1] == width), reverse=True)[:4]:
            print(f"{width}: {gbs:6.0f} GB/s {gbs / copy:.3f} of copy "
                  f"[CH, per_sm, warps, kernel] = {cfg}")


if __name__ == "__main__":
    main()
