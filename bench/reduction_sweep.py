"""Sweep the runtime-fusion engine's (1) reduction knobs on an H100: sums of 8192 x 8192
into float32, each config built through the graph API and timed with do_bench (GB/s of
the input read once, and its fraction of the copy floor: 1 GiB float32 copied). What it
decides, in src/opendnn/engines/fusion/engine.py:

    rows    ``_choose_knobs`` for reductions of the contiguous axis (row sums): BLOCK_RED x
            BLOCK_KEPT tiles and warps, bf16 and float32; the best four
    cols    ``_column_knobs`` (column sums, the kept axis contiguous): BLOCK_KEPT x
            BLOCK_RED tiles, SPLIT = m x SMs / column blocks (every SM the same number of
            programs), warps, bf16 and float32, against torch's sum; every result checked;
            the best twelve
    shapes  the heuristic's column-sum plan on other shapes (4096^2 to 100000 x 64) against
            torch's sum, results checked

Run (GPU): PYTHONPATH=src python bench/reduction_sweep.py [rows] [cols] [shapes] [quick]
(default all three; ``quick``: the heuristic's plans only; about five minutes in all).
Prints one line per config and writes the summary to $OUT/reduction_sweep.txt (or
./reduction_sweep.txt).
"""

import os
import sys

import torch
from _common import copy_gbs, planned  # bench/ (the script's folder)
from triton.testing import do_bench

import opendnn.frontend as cudnn

FUSION = 1


def _sum(x, out, knobs):
    """(run callable, plan name) of ``out = x.sum`` over the axes ``out`` keeps as 1."""
    g = cudnn.pygraph(compute_data_type=cudnn.data_type.FLOAT)
    tx = g.tensor_like(x)
    y = g.reduction(tx, mode=cudnn.reduction_mode.ADD).set_dim(list(out.shape))
    y.set_output(True).set_data_type(cudnn.data_type.FLOAT)
    fn = planned(g, FUSION, knobs, {tx: x, y: out})
    return fn, (g.get_plan_name_at_index(0) if knobs is None else str(knobs))


def measure(x, out_shape, knobs, copy):
    """(plan name, GB/s or None, text) of one config, its result checked first."""
    out = torch.full(out_shape, float("nan"), device="cuda")
    try:
        fn, name = _sum(x, out, knobs)
        fn()
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 -- a config the engine declines or fails
        return str(knobs), None, f"FAILED {str(e)[:80]}"
    dim = 1 if out_shape[1] == 1 else 0
    ref = x.double().sum(dim, keepdim=True)
    err = (out.double() - ref).abs().max().item()
    if not err < 1e-3 * max(1.0, x.shape[dim] ** 0.5):
        return name, None, f"WRONG {err}"
    ms = do_bench(fn, warmup=25, rep=100, return_mode="median")
    gbs = x.numel() * x.element_size() / ms / 1e6
    return name, gbs, f"{gbs:6.0f} GB/s {gbs / copy:.3f}"


def _torch_gbs(x, dim):
    ms = do_bench(
        lambda: x.sum(dim, keepdim=True, dtype=torch.float32),
        warmup=25,
        rep=100,
        return_mode="median",
    )
    return x.numel() * x.element_size() / ms / 1e6


def sweep(kind, quick, copy, lines):
    """Row (``rows``) or column (``cols``) sums of 8192 x 8192, bf16 and float32."""
    nsm = torch.cuda.get_device_properties(0).multi_processor_count
    for dt in (torch.bfloat16, torch.float32):
        x = torch.randn(8192, 8192, device="cuda", dtype=dt)
        out_shape, dim = ((8192, 1), 1) if kind == "rows" else ((1, 8192), 0)
        lines.append(f"{kind} {dt} torch {_torch_gbs(x, dim):6.0f} GB/s")
        print(lines[-1], flush=True)
        name, _, txt = measure(x, out_shape, None, copy)
        lines.append(f"{kind} {dt} heuristic {name}: {txt}")
        print(lines[-1], flush=True)
        if quick:
            continue
        if kind == "rows":
            grid = [
                dict(BLOCK_KEPT=bk, BLOCK_RED=br, SPLIT=1, num_warps=w)
                for br in (512, 1024, 2048, 4096)
                for bk in (1, 2, 4, 8)
                for w in (4, 8, 16)
                if bk * br <= 16384
            ]
        else:
            grid = [
                dict(BLOCK_KEPT=bk, BLOCK_RED=br, SPLIT=max(1, nsm * m * bk // 8192), num_warps=w)
                for bk in (512, 1024, 2048, 4096)
                for br in (1, 2, 4, 8, 16)
                if 4096 <= bk * br <= 16384
                for m in (1, 2, 4)
                for w in (4, 8, 16)
                if not ((w == 16 and bk * br < 8192) or (w == 4 and bk * br > 8192))
            ]
        res = []
        for knobs in grid:
            name, gbs, txt = measure(x, out_shape, knobs, copy)
            print(f"  {name}: {txt}", flush=True)
            if gbs is not None:
                res.append((gbs, name))
        for gbs, name in sorted(res, reverse=True)[: 4 if kind == "rows" else 12]:
            lines.append(f"{kind} {dt} {name}: {gbs:6.0f} GB/s {gbs / copy:.3f}")
            print(lines[-1], flush=True)


def other_shapes(copy, lines):
    """The heuristic's column-sum plan beyond 8192^2, against torch."""
    for shape in (
        (4096, 4096),
        (16384, 1024),
        (1024, 16384),
        (65536, 256),
        (2048, 65536),
        (100000, 64),
        (1000, 1000),
    ):
        for dt in (torch.bfloat16, torch.float32):
            x = torch.randn(shape, device="cuda", dtype=dt)
            name, _, txt = measure(x, (1, shape[1]), None, copy)
            lines.append(f"cols {shape} {dt} {name}: {txt}  torch {_torch_gbs(x, 0):6.0f} GB/s")
            print(lines[-1], flush=True)


def main(argv):
    modes = [m for m in ("rows", "cols", "shapes") if m in argv] or ["rows", "cols", "shapes"]
    copy = copy_gbs()
    nsm = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"copy {copy:.0f} GB/s; {nsm} SMs", flush=True)
    lines = []
    for m in modes:
        if m == "shapes":
            other_shapes(copy, lines)
        else:
            sweep(m, "quick" in argv, copy, lines)
    with open(os.path.join(os.environ.get("OUT", "."), "reduction_sweep.txt"), "w") as f:
        f.write(f"copy {copy:.0f} GB/s\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
