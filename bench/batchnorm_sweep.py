"""Knob sweep of the batch-norm engine (30) on an H100 (NHWC and NCHW 64x256x56x56 bf16,
the batchnorm rows of the norm bench family): training forward, inference and backward for
a grid of (BLOCK_K, BLOCK_R, SPLIT, APPLY_R, REUSE, num_warps), each against PyTorch in
the same run. Prints one line per config, the best five last.

What it decides: ``BatchNormEngine.configs`` in src/opendnn/engines/batchnorm/engine.py --
the tile (channels x rows per program for NHWC, rows of one channel for NCHW), the SPLIT
that fills the GPU, the warps, and whether REUSE=1 (the second pass over x starting where
the first ended) is listed first.

Run (GPU; a few minutes per layout and kind):

    PYTHONPATH=src python bench/batchnorm_sweep.py [nhwc|nchw] [fwd|inf|bwd]
"""

from __future__ import annotations

import itertools
import sys

import torch
import torch.nn.functional as F
from triton.testing import do_bench

import opendnn.frontend as cudnn

EPS, MOM = 1e-5, 0.1


def main():
    layout = sys.argv[1] if len(sys.argv) > 1 else "nhwc"
    kind = sys.argv[2] if len(sys.argv) > 2 else "fwd"
    x = torch.randn(64, 256, 56, 56, device="cuda", dtype=torch.bfloat16)
    if layout == "nhwc":
        x = x.to(memory_format=torch.channels_last)
    c = 256
    scale, bias = torch.randn(1, c, 1, 1, device="cuda"), torch.randn(1, c, 1, 1, device="cuda")
    mean, inv = torch.zeros(1, c, 1, 1, device="cuda"), torch.ones(1, c, 1, 1, device="cuda")
    dy = torch.randn_like(x)
    g = cudnn.pygraph()
    tx, ts, tb = (g.tensor_like(t) for t in (x, scale, bias))
    pack = {tx: x, ts: scale, tb: bias}
    if kind == "fwd":
        y, tm, tv, _, _ = g.batchnorm(tx, ts, tb, None, None, EPS, None)
        outs = {y: torch.empty_like(x), tm: torch.empty_like(scale), tv: torch.empty_like(scale)}

        def ref():
            return F.batch_norm(x, None, None, scale.view(-1), bias.view(-1), True, MOM, EPS)

        nbytes = 2 * x.numel() * 2
    elif kind == "inf":
        tm, tv = g.tensor_like(mean), g.tensor_like(inv)
        y = g.batchnorm_inference(tx, tm, tv, ts, tb)
        pack.update({tm: mean, tv: inv})
        outs = {y: torch.empty_like(x)}

        def ref():
            return F.batch_norm(
                x, mean.view(-1), inv.view(-1), scale.view(-1), bias.view(-1), False, MOM, EPS
            )

        nbytes = 2 * x.numel() * 2
    else:
        tdy, tm, tv = g.tensor_like(dy), g.tensor_like(mean), g.tensor_like(inv)
        y, ds, db = g.batchnorm_backward(tdy, tx, ts, tm, tv)
        pack.update({tdy: dy, tm: mean, tv: inv})
        del pack[tb]  # the backward takes no bias
        outs = {y: torch.empty_like(x), ds: torch.empty_like(scale), db: torch.empty_like(scale)}
        sm, si = mean.view(-1), inv.view(-1)

        def ref():
            return torch.ops.aten.native_batch_norm_backward(
                dy, x, scale.view(-1), None, None, sm, si, True, EPS, [True, True, True]
            )

        nbytes = 3 * x.numel() * 2
    for t in outs:
        t.set_output(True)
    pack.update(outs)
    g.validate()
    ref_ms = do_bench(ref, warmup=25, rep=100, return_mode="median")
    print(f"pytorch {ref_ms:.4f} ms {nbytes / ref_ms / 1e6:.0f} GB/s")
    if layout == "nhwc":
        grid = itertools.product(
            (64, 128, 256), (8, 16, 32, 64), (132, 264, 528), (16, 32, 64), (0, 1), (4, 8)
        )
    else:
        grid = itertools.product(
            (1, 2), (1024, 2048, 4096), (2, 3, 6), (2048, 4096, 8192), (0, 1), (4, 8)
        )
    results, seen = [], set()
    for bk, br, split, ar, reuse, warps in grid:
        if bk * max(br, ar) > 16384:
            continue
        if kind == "inf":  # the statistics knobs do not apply
            br, split, reuse = 1, 1, 0
            if (bk, ar, warps) in seen:
                continue
            seen.add((bk, ar, warps))
        knobs = dict(BLOCK_K=bk, BLOCK_R=br, SPLIT=split, APPLY_R=ar, REUSE=reuse, num_warps=warps)
        try:
            g.create_execution_plan(30, knobs)
            g.build_plan_at_index(0)
            ws = torch.empty(
                max(g.get_workspace_size_plan_at_index(0), 1), device="cuda", dtype=torch.uint8
            )
            ms = do_bench(
                lambda: g.execute_plan_at_index(pack, ws, 0),
                warmup=10,
                rep=50,
                return_mode="median",
            )
        except Exception as e:  # a config that does not build or run is reported, not fatal
            print(knobs, "failed:", repr(e)[:120])
            continue
        results.append((ms, knobs))
        print(
            f"{ms:.4f} ms {nbytes / ms / 1e6:6.0f} GB/s ratio {ref_ms / ms:5.2f} {knobs}",
            flush=True,
        )
    results.sort(key=lambda r: r[0])
    for ms, knobs in results[:5][::-1]:
        print(f"best: {ms:.4f} ms ratio {ref_ms / ms:.2f} {knobs}")


if __name__ == "__main__":
    main()
