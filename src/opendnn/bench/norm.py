"""The ``norm`` benchmark family: layer norm and RMS norm along the last axis, forward
(training: Y plus float32 statistics) and backward (DX, DSCALE, DBIAS), bfloat16, at row
widths 8192, 65536 and 262144 (128 Mi elements or 64 Mi at 8192; targets: forward
>= 2.7 TB/s at 8192 and >= 2.0 at the long rows, backward >= 2.4), and a fused
residual add + RMS norm, against PyTorch's kernels (``F.layer_norm``, ``F.rms_norm``,
``aten.native_layer_norm_backward``, RMS norm's autograd) in the same run.

Bytes counted: forward reads X (and the residual) and writes Y once; backward reads DY and
X and writes DX once (parameters and statistics are negligible)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..engines.norm.shapes import BENCH as CASES

EPS = 1e-5


def _build(g, cudnn, pack):
    g.build([cudnn.heur_mode.A])
    ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
    return (lambda: g.execute(pack, ws)), g.get_plan_name_at_index(0)


def _forward(cudnn, kind, x, w, b, residual=None):
    g = cudnn.pygraph()
    tx, tw = g.tensor_like(x), g.tensor_like(w)
    tb = g.tensor_like(b) if b is not None else None
    pack = {tx: x, tw: w, **({tb: b} if b is not None else {})}
    src = tx
    if residual is not None:
        tr = g.tensor_like(residual)
        pack[tr] = residual
        src = g.add(tx, tr)
    phase = cudnn.norm_forward_phase.TRAINING
    if kind == "layernorm":
        outs = g.layernorm(phase, src, tw, tb, EPS)
    else:
        outs = g.rmsnorm(phase, src, tw, tb, epsilon=EPS)
    y = outs[0]
    y.set_output(True)
    rows = x.shape[0]
    pack[y] = torch.empty_like(x)
    for t in outs[1:]:
        t.set_output(True).set_data_type(cudnn.data_type.FLOAT)
        pack[t] = torch.empty(rows, 1, device="cuda", dtype=torch.float32)
    return _build(g, cudnn, pack)


def _backward(cudnn, kind, dy, x, w, mean, rstd):
    g = cudnn.pygraph()
    tdy, tx, tw, tv = (g.tensor_like(t) for t in (dy, x, w, rstd))
    pack = {tdy: dy, tx: x, tw: w, tv: rstd}
    if kind == "layernorm":
        tm = g.tensor_like(mean)
        pack[tm] = mean
        outs = g.layernorm_backward(tdy, tx, tw, tm, tv)
    else:
        outs = g.rmsnorm_backward(tdy, tx, tw, tv, has_dbias=False)
    for t, like in zip(outs, (x, w, w)):
        if t is not None:
            t.set_output(True)
            pack[t] = torch.empty_like(like)
    return _build(g, cudnn, pack)


def run_norm(r, bench):
    import opendnn.frontend as cudnn

    for rows, width in CASES:
        x = torch.randn(rows, width, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(1, width, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(1, width, device="cuda", dtype=torch.bfloat16)
        dy = torch.randn_like(x)
        n = x.numel()
        shape = f"({rows}, {width}) bf16"
        for kind in ("layernorm", "rmsnorm"):
            bias = b if kind == "layernorm" else None
            fn, plan = _forward(cudnn, kind, x, w, bias)
            if kind == "layernorm":
                ref = lambda: F.layer_norm(x, (width,), w[0], b[0], EPS)  # noqa: E731
            else:
                ref = lambda: F.rms_norm(x, (width,), w[0], EPS)  # noqa: E731
            r.add("norm", f"{kind} fwd {shape}", bench(fn), bench(ref), nbytes=2 * n * 2, plan=plan)
            xd = x.double()
            mean = xd.mean(-1, keepdim=True) if kind == "layernorm" else None
            var = ((xd - (mean if mean is not None else 0)) ** 2).mean(-1, keepdim=True)
            rstd = (1 / torch.sqrt(var + EPS)).float()
            mean = mean.float() if mean is not None else None
            fn, plan = _backward(cudnn, kind, dy, x, w, mean, rstd)
            if kind == "layernorm":  # its own saved statistics (their dtype is its own)
                _, tmean, trstd = torch.native_layer_norm(x, [width], w[0], b[0], EPS)

                def ref():
                    return torch.ops.aten.native_layer_norm_backward(
                        dy, x, [width], tmean, trstd, w[0], b[0], [True, True, True]
                    )
            else:
                xr, wr = x.clone().requires_grad_(True), w[0].clone().requires_grad_(True)
                yr = F.rms_norm(xr, (width,), wr, EPS)

                def ref():
                    return torch.autograd.grad(yr, (xr, wr), dy, retain_graph=True)

            r.add("norm", f"{kind} bwd {shape}", bench(fn), bench(ref), nbytes=3 * n * 2, plan=plan)
        if width == 8192:
            res = torch.randn_like(x)
            fn, plan = _forward(cudnn, "rmsnorm", x, w, None, residual=res)
            r.add(
                "norm",
                f"add+rmsnorm fwd {shape}",
                bench(fn),
                bench(lambda: F.rms_norm(x + res, (width,), w[0], EPS)),
                nbytes=3 * n * 2,
                ref_name="torch add->rms_norm",
                plan=plan,
            )
