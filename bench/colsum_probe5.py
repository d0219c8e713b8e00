"""Probe 6 of bf16 column sums (8192 x 8192 -> 8192 float32): the read through TMA into
shared memory and the sum done by the tensor cores, as a matmul with a ones operand.

Five probes summed register tiles (pointer loads or TMA boxes, then ``tl.sum``); the read
topped out at 0.843 of copy. Here the tile goes global -> shared memory by TMA, several
stages deep (the matmul pipeline), and never through registers: ``colsum = ones^T X``
(``ones[16, BK] @ x[BK, BC]``, or ``x^T[BC, BK] @ ones[BK, 16]``). A product by 1.0 is
exact and wgmma accumulates in float32, so the result equals a float32 sum in another
order. Variants: ``ta`` (ones on the left), ``tb`` (the tile transposed, ones on the
right), ``reg`` (the same TMA pipeline summed in registers, the control); each with a
split over rows (partials, then the finishing kernel) or none (SPLIT 1 writes Y).
The copy floor is measured as the bench does (1 GiB float32).
Run (GPU): PYTHONPATH=src python bench/colsum_probe5.py"""
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
def tcsum(X, P, N: tl.constexpr, BK: tl.constexpr, BC: tl.constexpr, ROWS: tl.constexpr,
          MODE: tl.constexpr, STAGES: tl.constexpr):
    cb = tl.program_id(0)
    rs = tl.program_id(1)
    desc = tl.make_tensor_descriptor(X, shape=[N, N], strides=[N, 1], block_shape=[BK, BC])
    r0 = rs * ROWS
    if MODE == 0:     # ones[16, BK] @ x[BK, BC] -> [16, BC]
        ones = tl.full([16, BK], 1.0, tl.bfloat16)
        acc = tl.zeros([16, BC], tl.float32)
        for k in tl.range(0, ROWS, BK, num_stages=STAGES):
            acc = tl.dot(ones, desc.load([r0 + k, cb * BC]), acc)
        tot = tl.sum(acc, 0) * (1.0 / 16)
    elif MODE == 1:   # x^T[BC, BK] @ ones[BK, 16] -> [BC, 16]
        ones = tl.full([BK, 16], 1.0, tl.bfloat16)
        acc = tl.zeros([BC, 16], tl.float32)
        for k in tl.range(0, ROWS, BK, num_stages=STAGES):
            acc = tl.dot(tl.trans(desc.load([r0 + k, cb * BC])), ones, acc)
        tot = tl.sum(acc, 1) * (1.0 / 16)
    else:             # the same pipeline summed in registers
        acc = tl.zeros([BC], tl.float32)
        for k in tl.range(0, ROWS, BK, num_stages=STAGES):
            acc += tl.sum(desc.load([r0 + k, cb * BC]).to(tl.float32), 0)
        tot = acc
    tl.store(P + rs * N + cb * BC + tl.arange(0, BC), tot)


def main():
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8,
                                                                 device="cuda"))
    M = N = 8192
    copy, x, ref, nbytes = colsum_input(M, N)
    tms = do_bench(lambda: x.sum(0, dtype=torch.float32), return_mode="median")
    print(f"torch colsum {nbytes / tms / 1e6:.0f} GB/s")
    y = torch.empty(N, device="cuda")
    res = []
    cfgs = []
    for mode in (0, 1, 2):
        for bc in (64, 128, 256):
            for bk in (64, 128, 256):
                if bk * bc * 2 > 65536 or bk * bc < 4096:
                    continue
                for split in (1, 2, 4, 8):
                    for st in (3, 4, 5):
                        if st * bk * bc * 2 > 200000:
                            continue
                        for w in (4, 8):
                            cfgs.append((mode, bk, bc, split, st, w))
    print(len(cfgs), "configs")
    for mode, bk, bc, split, st, w in cfgs:
        rows = M // split
        p = y.view(1, N) if split == 1 else torch.empty(split, N, device="cuda")
        g = (N // bc, split)

        def fn():
            tcsum[g](x, p, N, bk, bc, rows, mode, st, num_warps=w)
            if split > 1:
                finish[(N // 64,)](p, y, N, split, 64)
        try:
            y.fill_(float("nan"))
            fn()
            torch.cuda.synchronize()
        except Exception as e:   # noqa: BLE001 -- reported
            print(mode, bk, bc, split, st, w, "FAILED", str(e)[:120])
            continue
        err = (y - ref).abs().max().item()
        if not err < 1e-2:
            print(mode, bk, bc, split, st, w, "WRONG", err)
            continue
        ms = do_bench(fn, warmup=10, rep=40, return_mode="median")
        res.append((nbytes / ms / 1e6, mode, bk, bc, split, st, w))
    with open(os.path.join(os.environ.get("OUT", "."), "colsum_probe5.txt"), "w") as f:
        for r in sorted(res, reverse=True):
            f.write(f"{r}\n")
    for mode in (0, 1, 2):
        for split in (1, 2, 4, 8):
            for gbs, *cfg in sorted((r for r in res if r[1] == mode and r[4] == split),
                                    reverse=True)[:2]:
                print(f"mode {mode} split {split}: {gbs:6.0f} GB/s  {gbs / copy:.3f} of copy"
                      f"  [mode, BK, BC, split, stages, warps] = {cfg}")


if __name__ == "__main__":
    main()
