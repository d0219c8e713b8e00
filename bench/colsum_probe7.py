"""Probe 8 of bf16 column sums (8192 x 8192 -> 8192 float32): staggered reads. Session
12 found the long-row norm backward reading 25% slower when its programs' chunks sit at
16 KB-aligned offsets than when they are staggered (DRAM address aliasing, our reading).
The column-sum partial kernel (probe 4's interleaved slices: program (cb, rs) walks row
blocks rs, rs + SPLIT, ...) has every program at the same row block at once, at
power-of-two column offsets. Here each column block starts its walk ROT x cb blocks
later (k -> (k + ROT cb) mod K), so programs of neighbouring column blocks read
different rows at any moment. Partial kernel alone and with the finishing kernel,
against ROT = 0 in the same run; each result is checked.
Run (GPU): PYTHONPATH=src python bench/colsum_probe7.py"""
import os
import sys

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from colsum_probe import finish  # noqa: E402  (the partials' sum, shared by the probes)
from probe_common import colsum_input  # noqa: E402


@triton.jit
def rpart(X, P, N: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr, K: tl.constexpr,
          SPLIT: tl.constexpr, ROT: tl.constexpr):
    cb = tl.program_id(0)
    rs = tl.program_id(1)
    cols = cb * BC + tl.arange(0, BC)
    rows = tl.arange(0, BR)
    acc = tl.zeros([BR, BC], tl.float32)
    for k in range(K):
        blk = ((k + cb * ROT) % K) * SPLIT + rs
        ptrs = X + (blk * BR + rows)[:, None].to(tl.int64) * N + cols[None, :]
        acc += tl.load(ptrs, eviction_policy="evict_first").to(tl.float32)
    tl.store(P + rs * N + cols, tl.sum(acc, 0))


def main():
    M = N = 8192
    copy, x, ref, nbytes = colsum_input(M, N)
    y = torch.empty(N, device="cuda")
    res = []
    for br, bc, split in ((32, 64, 8), (16, 64, 8), (16, 128, 8), (2, 1024, 128),
                          (4, 1024, 64), (2, 2048, 128), (1, 2048, 128)):
        K = M // (br * split)
        p = torch.empty(split, N, device="cuda")
        for rot in (0, 1, 3, 7, 17):
            for w in (4, 8):
                g = (N // bc, split)
                runs = {"part": lambda: rpart[g](x, p, N, br, bc, K, split, rot, num_warps=w),
                        "two": lambda: (rpart[g](x, p, N, br, bc, K, split, rot, num_warps=w),
                                        finish[(N // 64,)](p, y, N, split, 64))}
                for name, fn in runs.items():
                    y.fill_(float("nan"))
                    fn()
                    torch.cuda.synchronize()
                    if name == "two" and not torch.allclose(y, ref, rtol=1e-4, atol=2e-2):
                        print(name, br, bc, split, rot, w, "WRONG")
                        continue
                    ms = do_bench(fn, warmup=10, rep=40, return_mode="median")
                    res.append((nbytes / ms / 1e6 / copy, name, br, bc, split, rot, w))
    with open(os.path.join(os.environ.get("OUT", "."), "colsum_probe7.txt"), "w") as f:
        f.write(f"copy {copy:.0f} GB/s\n")
        for r in sorted(res, reverse=True):
            f.write(f"{r}\n")
    print("fraction of copy, best warps: [BR, BC, split] x ROT 0 / 1 / 3 / 7 / 17")
    for name in ("part", "two"):
        for br, bc, split in sorted({r[2:5] for r in res}):
            cells = []
            for rot in (0, 1, 3, 7, 17):
                v = [r[0] for r in res if r[1] == name and r[2:6] == (br, bc, split, rot)]
                cells.append(f"{max(v):.3f}" if v else "--")
            print(f"{name:4s} [{br:2d}, {bc:4d}, {split:3d}]: " + " / ".join(cells))


if __name__ == "__main__":
    main()
