"""The ``pool`` benchmark family: max and average pooling, 3x3 stride 2 padding 1 and 2x2
stride 2, 64x256x56x56 bfloat16 (ResNet's first pooling, widened), NHWC then NCHW, forward
and backward, against PyTorch's kernels (``F.max_pool2d`` / ``F.avg_pool2d`` and their
aten backwards, same memory format) in the same run on the same inputs.

Bytes counted: forward reads x and writes y (and the int8 Index when asked); backward
reads dy (and the Index, or x when the argmax is recomputed) and writes dx. Target: max
3x3 s2 p1 forward >= 2x PyTorch (which runs at ~520 GB/s counting 1.25x the input's
bytes)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..engines.pool.shapes import BENCH as CASES
from ..engines.pool.shapes import BENCH_SHAPE as SHAPE


def _build(g, cudnn, pack):
    g.build([cudnn.heur_mode.A])
    ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
    return (lambda: g.execute(pack, ws)), g.get_plan_name_at_index(0)


def _nbytes(*ts) -> int:
    return sum(t.numel() * t.element_size() for t in ts)


def run_pool(r, bench):
    import opendnn.frontend as cudnn

    mode_of = {
        "max": cudnn.resample_mode.MAXPOOL,
        "avg": cudnn.resample_mode.AVGPOOL_INCLUDE_PADDING,
    }
    base = torch.randn(SHAPE, device="cuda", dtype=torch.bfloat16)
    for layout, kind, w, s, p in [(lay, *c) for lay in ("NHWC", "NCHW") for c in CASES]:
        fmt = torch.channels_last if layout == "NHWC" else torch.contiguous_format
        x = base.contiguous(memory_format=fmt)
        mode, tag = mode_of[kind], f"{kind} {w}x{w} s{s} p{p} {layout} {SHAPE} bf16"
        index_modes = (False, True) if kind == "max" else (False,)
        for with_index in index_modes:
            g = cudnn.pygraph()
            tx = g.tensor_like(x)
            ty, tix = g.resample(
                tx, mode, [w, w], [s, s], padding=[p, p], generate_index=with_index
            )
            ty.set_output(True)
            g.validate()
            y = torch.empty(ty.get_dim(), device="cuda", dtype=torch.bfloat16).contiguous(
                memory_format=fmt
            )
            pack = {tx: x, ty: y}
            if with_index:
                ix = torch.empty_strided(
                    tix.get_dim(), tix.get_stride(), device="cuda", dtype=torch.int8
                )
                pack[tix] = ix
            fn, plan = _build(g, cudnn, pack)
            pool = F.max_pool2d if kind == "max" else F.avg_pool2d
            kw = {"return_indices": True} if with_index else {}

            def ref():
                return pool(x, w, s, p, **kw)

            r.add(
                "pool",
                f"{tag} fwd{' +index' if with_index else ''}",
                bench(fn),
                bench(ref),
                nbytes=_nbytes(x, y, *([ix] if with_index else [])),
                plan=plan,
            )
        # backward: PyTorch's own backward kernels on the same dy
        dy = torch.randn_like(y)
        dx = torch.empty_like(x)
        if kind == "max":
            _, pt_idx = F.max_pool2d(x, w, s, p, return_indices=True)

            def ref():
                return torch.ops.aten.max_pool2d_with_indices_backward(
                    dy, x, [w, w], [s, s], [p, p], [1, 1], False, pt_idx
                )

            sources = (("index", True), ("x", False))
        else:

            def ref():
                return torch.ops.aten.avg_pool2d_backward(
                    dy, x, [w, w], [s, s], [p, p], False, True, None
                )

            sources = ((None, False),)
        ref_ms = bench(ref)
        for source, use_index in sources:
            g = cudnn.pygraph()
            tdy = g.tensor_like(dy)
            pack = {tdy: dy}
            kw = {}
            extra = []
            if use_index:
                kw["index"] = g.tensor_like(ix)
                pack[kw["index"]] = ix
                extra = [ix]
            elif source == "x":
                kw["input"] = g.tensor_like(x)
                pack[kw["input"]] = x
                extra = [x]
            tdx = g.resample_backward(tdy, mode, [w, w], [s, s], padding=[p, p], **kw)
            tdx.set_output(True).set_dim(list(x.shape)).set_stride(list(x.stride()))
            pack[tdx] = dx
            fn, plan = _build(g, cudnn, pack)
            name = f"{tag} bwd" + (f" from {source}" if source else "")
            r.add("pool", name, bench(fn), ref_ms, nbytes=_nbytes(dy, dx, *extra), plan=plan)
