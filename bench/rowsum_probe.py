"""Probe: why bf16 row sums read at ~2.45 TB/s while fp32 reaches ~2.75 (H100).
Variants of a plain Triton row-sum kernel, all on the same 8192x8192 input."""
import torch
import triton
import triton.language as tl
from triton.testing import do_bench


@triton.jit
def _add(a, b):
    return a + b


@triton.jit
def rowsum(X, Y, N: tl.constexpr, BR: tl.constexpr, UNROLL: tl.constexpr, EVICT: tl.constexpr,
           ROWS: tl.constexpr):
    pid = tl.program_id(0)
    for j in range(ROWS):
        row = pid * ROWS + j
        acc = tl.zeros([BR], tl.float32)
        for start in range(0, N, BR * UNROLL):
            for u in tl.static_range(UNROLL):
                offs = start + u * BR + tl.arange(0, BR)
                if EVICT:
                    x = tl.load(X + row.to(tl.int64) * N + offs, eviction_policy="evict_first")
                else:
                    x = tl.load(X + row.to(tl.int64) * N + offs)
                acc += x.to(tl.float32)
        tl.store(Y + row, tl.reduce(acc, 0, _add))


@triton.jit
def readonly(X, Y, N: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(X + offs)
    tl.store(Y + pid, tl.reduce(x.to(tl.float32), 0, _add))


M = N = 8192
for dt in (torch.bfloat16, torch.float32):
    x = torch.randn(M, N, device="cuda", dtype=dt)
    y = torch.empty(M, device="cuda")
    ref = x.float().sum(1)
    nbytes = x.numel() * x.element_size()
    res = []
    for br in (1024, 2048, 4096):
        for unroll in (1, 2, 4):
            for evict in (0, 1):
                for rows in (1, 4):
                    for w in (4, 8, 16):
                        if br * unroll > N:
                            continue
                        fn = lambda: rowsum[(M // rows,)](x, y, N, br, unroll, evict, rows, num_warps=w)
                        fn()
                        assert torch.allclose(y, ref, rtol=1e-3, atol=1e-2)
                        ms = do_bench(fn, warmup=10, rep=30, return_mode="median")
                        res.append((nbytes / ms / 1e6, br, unroll, evict, rows, w))
    res.sort(reverse=True)
    print(dt, "rowsum best:", [f"{g:.0f} br{b} u{u} ev{e} rows{r} w{w}" for g, b, u, e, r, w in res[:5]])
    for block in (4096, 8192, 16384):
        for w in (4, 8, 16):
            yy = torch.empty(x.numel() // block, device="cuda")
            fn = lambda: readonly[(x.numel() // block,)](x, yy, x.numel(), block, num_warps=w)
            ms = do_bench(fn, warmup=10, rep=30, return_mode="median")
            print(f"  {dt} flat read BLOCK {block} w{w}: {nbytes / ms / 1e6:.0f} GB/s")
    ms = do_bench(lambda: x.sum(1, dtype=torch.float32), warmup=10, rep=30, return_mode="median")
    print(f"  torch sum rows: {nbytes / ms / 1e6:.0f} GB/s")
