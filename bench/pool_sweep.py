"""Sweep the pooling engines' tiles (BLOCK_P pixels x BLOCK_C channels, or BLOCK_P rows x
BLOCK_W of a channel's plane; warps) on the pool bench family's problem (64x256x56x56 bf16,
3x3 stride 2 padding 1 and 2x2 stride 2), NHWC and NCHW: max forward (with and without the
Index), average forward, max backward from the Index and from X, average backward. GB/s
counted as in the bench (bytes of every tensor read or written once). Prints each case's
best four tiles and where the engine's first choice ranks.

What it decides: the candidate tiles and their order in ``_tiles`` of
src/opendnn/engines/pool/engine.py (forward 34 and backward 35): 128 channels x 8 pixels
first for channels-last tensors; flat blocks forward and plane tiles backward for NCHW.

Run (GPU; a few minutes per layout): PYTHONPATH=src python bench/pool_sweep.py [nhwc|nchw]
"""

import sys

import torch
from triton.testing import do_bench

import opendnn.frontend as cudnn

M = cudnn.resample_mode
SHAPE = (64, 256, 56, 56)


def _tiles(layout):
    """(BLOCK_P, BLOCK_C, warps, BLOCK_W): NCHW takes plane tiles (rows x BLOCK_W of the
    last axis) and the flat pixel tiles the engine lists after them."""
    if layout == "nchw":
        return [
            (bp, 1, w, bw)
            for bw in (16, 32, 64)
            for bp in (8, 16, 32, 64, 128)
            for w in (4, 8)
            if 512 <= bp * bw <= 4096
        ] + [(bp, 1, w, 0) for bp, w in ((256, 4), (512, 8), (1024, 4))]
    return [
        (bp, bc, w, 0)
        for bc in (16, 32, 64, 128, 256)
        for bp in (4, 8, 16, 32, 64, 128)
        for w in (2, 4, 8)
        if 512 <= bp * bc <= 8192
    ]


def _nbytes(pack):
    return sum(t.numel() * t.element_size() for t in pack.values())


def _sweep(label, g, engine_id, pack, layout):
    g.validate()
    g.build([cudnn.heur_mode.A])
    first = g.get_plan_name_at_index(0)
    res = []
    for bp, bc, w, bw in _tiles(layout):
        knobs = dict(BLOCK_P=bp, BLOCK_C=bc, num_warps=w, BLOCK_W=bw)
        try:
            g.create_execution_plan(engine_id, knobs)
        except Exception as e:  # noqa: BLE001 -- a config the engine declines
            print("declined", knobs, str(e)[:80])
            continue
        g.build_plan_at_index(0)
        ws = torch.empty(
            max(g.get_workspace_size_plan_at_index(0), 1), device="cuda", dtype=torch.uint8
        )
        ms = do_bench(lambda: g.execute_plan_at_index(pack, ws, 0), return_mode="median")
        res.append((_nbytes(pack) / ms / 1e6, g.get_plan_name_at_index(0)))
    res.sort(reverse=True)
    rank = next((i for i, (_, n) in enumerate(res) if n == first), None)
    for gbs, name in res[:4]:
        print(f"{label:44s} {gbs:6.0f} GB/s {name}")
    at = f" ({res[rank][0]:.0f} GB/s)" if rank is not None else ""
    print(f"{label:44s} heuristic's first {first}: rank {rank} of {len(res)}{at}", flush=True)


def main(layouts):
    for layout in layouts:
        x = torch.randn(SHAPE, device="cuda", dtype=torch.bfloat16)
        if layout == "nhwc":
            x = x.contiguous(memory_format=torch.channels_last)
        for w, s, p in ((3, 2, 1), (2, 2, 0)):
            for kind in ("max", "avg"):
                mode = M.MAXPOOL if kind == "max" else M.AVGPOOL_INCLUDE_PADDING
                tag = f"{layout} {kind} {w}x{w}s{s}p{p}"
                for with_index in (False, True) if kind == "max" else (False,):
                    g = cudnn.pygraph()
                    tx = g.tensor_like(x)
                    ty, tix = g.resample(
                        tx, mode, [w, w], [s, s], padding=[p, p], generate_index=with_index
                    )
                    ty.set_output(True)
                    g.validate()
                    y = torch.empty_strided(
                        ty.get_dim(), ty.get_stride(), device="cuda", dtype=x.dtype
                    )
                    pack = {tx: x, ty: y}
                    if with_index:
                        ix = torch.empty_strided(
                            tix.get_dim(), tix.get_stride(), device="cuda", dtype=torch.int8
                        )
                        pack[tix] = ix
                    _sweep(f"{tag} fwd{' +index' if with_index else ''}", g, 34, pack, layout)
                dy, dx = torch.randn_like(y), torch.empty_like(x)
                for source in ("index", "x") if kind == "max" else (None,):
                    g = cudnn.pygraph()
                    tdy = g.tensor_like(dy)
                    pack, kw = {tdy: dy}, {}
                    if source == "index":
                        kw["index"] = g.tensor_like(ix)
                        pack[kw["index"]] = ix
                    elif source == "x":
                        kw["input"] = g.tensor_like(x)
                        pack[kw["input"]] = x
                    tdx = g.resample_backward(tdy, mode, [w, w], [s, s], padding=[p, p], **kw)
                    tdx.set_output(True).set_dim(list(x.shape)).set_stride(list(x.stride()))
                    pack[tdx] = dx
                    _sweep(f"{tag} bwd{' from ' + source if source else ''}", g, 35, pack, layout)


if __name__ == "__main__":
    main(sys.argv[1:] or ["nhwc", "nchw"])
