"""The ``lrn`` and ``dropout`` benchmark families (no target set: a first measurement).

- lrn: cross-channel LRN (n = 5, AlexNet's parameters) forward and backward on
  (32, 96, 55, 55) and (64, 256, 27, 27), NCHW and NHWC, float32 and bfloat16, against
  PyTorch's ``local_response_norm`` (eager; the backward through autograd). Divisive
  normalization (n = 5 box, 4-D) forward, against PyTorch's composite (avg_pool2d).
- dropout: p = 0.1 forward (y and a uint8 mask) and backward on 64 Mi bfloat16 elements,
  against ``torch.nn.functional.dropout`` (forward) and ``torch.ops.aten
  .native_dropout_backward`` (backward).

Bytes: forward reads x (and means) once and writes y (and the mask); backward reads dy
and x (and means) and writes dx (and dmeans) -- the minimum, not what the kernels move.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..engines.dropout.shapes import BENCH as DROPOUT_SHAPE
from ..engines.lrn.shapes import BENCH as LRN_CASES

ALEX = dict(lrn_n=5, lrn_alpha=1e-4, lrn_beta=0.75, lrn_k=2.0)


def _build(g, cudnn, pack):
    g.build([cudnn.heur_mode.A])
    ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
    return (lambda: g.execute(pack, ws)), g.get_plan_name_at_index(0)


def run_lrn(r, bench):
    import opendnn.frontend as cudnn

    for shape in LRN_CASES:
        for fmt in ("nchw", "nhwc"):
            for dt in (torch.float32, torch.bfloat16):
                mf = torch.channels_last if fmt == "nhwc" else torch.contiguous_format
                x = torch.randn(shape, device="cuda", dtype=dt).contiguous(memory_format=mf)
                item, tag = x.element_size(), f"{shape} {fmt} {str(dt)[6:]}"
                g = cudnn.pygraph()
                tx = g.tensor_like(x)
                ty = g.lrn(tx, **ALEX)
                ty.set_output(True)
                y = torch.empty_like(x)
                fn, plan = _build(g, cudnn, {tx: x, ty: y})

                def ref():
                    return F.local_response_norm(x, 5, 1e-4, 0.75, 2.0)

                r.add(
                    "lrn",
                    f"lrn fwd {tag}",
                    bench(fn),
                    bench(ref),
                    nbytes=2 * x.numel() * item,
                    plan=plan,
                )
                dy, dx = torch.randn_like(x), torch.empty_like(x)
                g = cudnn.pygraph()
                tdy, tx2, tyv = g.tensor_like(dy), g.tensor_like(x), g.tensor_like(y)
                tdx = g.lrn_backward(tdy, tx2, tyv, **ALEX)
                tdx.set_output(True)
                fn, plan = _build(g, cudnn, {tdy: dy, tx2: x, tyv: y, tdx: dx})
                xr = x.detach().requires_grad_(True)
                out = F.local_response_norm(xr, 5, 1e-4, 0.75, 2.0)
                r.add(
                    "lrn",
                    f"lrn bwd {tag}",
                    bench(fn),
                    bench(lambda: torch.autograd.grad(out, xr, dy, retain_graph=True)),
                    nbytes=3 * x.numel() * item,
                    plan=plan,
                )
    x = torch.randn(32, 64, 56, 56, device="cuda")
    m = F.avg_pool2d(x, 5, 1, 2)
    g = cudnn.pygraph()
    tx, tm = g.tensor_like(x), g.tensor_like(m)
    ty = g.divisive_normalization(tx, tm, **ALEX)
    ty.set_output(True)
    fn, plan = _build(g, cudnn, {tx: x, tm: m, ty: torch.empty_like(x)})

    def ref():
        d = x - m
        box = F.avg_pool2d(F.pad(d * d, (2, 2, 2, 2)), 5, 1) * 25
        return d / (2.0 + 1e-4 / 25 * box) ** 0.75

    r.add(
        "lrn",
        "div_norm fwd (32, 64, 56, 56) nchw float32",
        bench(fn),
        bench(ref),
        nbytes=3 * x.numel() * 4,
        plan=plan,
        ref_name="pytorch composite",
    )


def run_dropout(r, bench):
    import opendnn.frontend as cudnn

    x = torch.randn(DROPOUT_SHAPE, device="cuda", dtype=torch.bfloat16)
    g = cudnn.pygraph()
    tx = g.tensor_like(x)
    ty, tm = g.dropout(tx, 0.1, 1234, 0)
    ty.set_output(True)
    tm.set_output(True).set_data_type(cudnn.data_type.UINT8)
    y, mask = torch.empty_like(x), torch.empty(x.shape, device="cuda", dtype=torch.uint8)
    fn, plan = _build(g, cudnn, {tx: x, ty: y, tm: mask})
    r.add(
        "dropout",
        "dropout fwd 64Mi bf16 (y + mask)",
        bench(fn),
        bench(lambda: torch.ops.aten.native_dropout(x, 0.1, True)),
        nbytes=x.numel() * 5,
        plan=plan,
    )
    g = cudnn.pygraph()
    tdy = g.tensor_like(x)
    tdx = g.dropout_backward(tdy, 0.1, 1234, 0)
    tdx.set_output(True)
    fn, plan = _build(g, cudnn, {tdy: x, tdx: y})
    bmask = mask.bool()
    r.add(
        "dropout",
        "dropout bwd 64Mi bf16 (regenerated mask)",
        bench(fn),
        bench(lambda: torch.ops.aten.native_dropout_backward(x, bmask, 1 / 0.9)),
        nbytes=x.numel() * 4,
        plan=plan,
        ref_name="pytorch (reads the mask)",
    )
