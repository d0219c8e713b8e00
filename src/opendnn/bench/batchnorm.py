"""The ``batchnorm`` benchmark family: spatial batch norm on NHWC 64x256x56x56 bfloat16
(float32 statistics), training forward (with running statistics, and fused with relu),
inference and backward, against PyTorch (nn.functional.batch_norm, cuDNN or its native
kernels, and autograd for the backward) in the same run on the same inputs.

Bytes counted (the minimum a kernel must move, so ratios compare fairly):
training forward and inference 2 x the input (read x, write y; training reads x twice),
backward 3 x (read x and dy, write dx), backward with a fused relu_backward 4 x (read
the loss and the activation too). Targets: training forward >= 1.5x PyTorch (0.254 ms,
793 GB/s measured), inference near copy speed (PyTorch 1.93 TB/s)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..engines.batchnorm.shapes import BENCH as SHAPE

EPS, MOM = 1e-5, 0.1


def _stats(c):
    return [torch.randn(1, c, 1, 1, device="cuda") for _ in range(2)] + [
        torch.zeros(1, c, 1, 1, device="cuda"),
        torch.ones(1, c, 1, 1, device="cuda"),
    ]


def _exec(g, pack):
    ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
    return (lambda: g.execute(pack, ws)), g.get_plan_name_at_index(0)


def _training(cudnn, x, scale, bias, rm, rv, relu: bool):
    g = cudnn.pygraph()
    tx, ts, tb, trm, trv = (g.tensor_like(t) for t in (x, scale, bias, rm, rv))
    y, mean, inv, nrm, nrv = g.batchnorm(tx, ts, tb, trm, trv, EPS, MOM)
    if relu:
        y = g.relu(y)
    outs = {y: torch.empty_like(x)}
    for t in (mean, inv, nrm, nrv):
        outs[t] = torch.empty_like(scale)
        t.set_output(True).set_data_type(cudnn.data_type.FLOAT)
    y.set_output(True)
    g.build([cudnn.heur_mode.A])
    return _exec(g, {tx: x, ts: scale, tb: bias, trm: rm, trv: rv, **outs})


def run_batchnorm(r, bench):
    import opendnn.frontend as cudnn

    x = (
        torch.randn(SHAPE, device="cuda", dtype=torch.bfloat16).to(
            memory_format=torch.channels_last
        )
        * 2
        + 1
    )
    c = SHAPE[1]
    scale, bias, rm, rv = _stats(c)
    w, b, trm, trv = (
        scale.reshape(-1),
        bias.reshape(-1),
        rm.reshape(-1).clone(),
        rv.reshape(-1).clone(),
    )
    nbytes = x.numel() * x.element_size()
    case = "NHWC 64x256x56x56 bf16"

    fn, plan = _training(cudnn, x, scale, bias, rm, rv, False)
    r.add(
        "batchnorm",
        f"training fwd {case}",
        bench(fn),
        bench(lambda: F.batch_norm(x, trm, trv, w, b, True, MOM, EPS)),
        nbytes=2 * nbytes,
        plan=plan,
    )
    fn, plan = _training(cudnn, x, scale, bias, rm, rv, True)
    r.add(
        "batchnorm",
        f"training fwd+relu {case}",
        bench(fn),
        bench(lambda: F.relu(F.batch_norm(x, trm, trv, w, b, True, MOM, EPS))),
        nbytes=2 * nbytes,
        plan=plan,
        ref_name="pytorch bn->relu",
    )

    inv = torch.rsqrt(rv + EPS)
    g = cudnn.pygraph()
    tx, tm, tv, ts, tb = (g.tensor_like(t) for t in (x, rm, inv, scale, bias))
    ty = g.batchnorm_inference(tx, tm, tv, ts, tb)
    ty.set_output(True)
    g.build([cudnn.heur_mode.A])
    fn, plan = _exec(g, {tx: x, tm: rm, tv: inv, ts: scale, tb: bias, ty: torch.empty_like(x)})
    r.add(
        "batchnorm",
        f"inference {case}",
        bench(fn),
        bench(lambda: F.batch_norm(x, trm, trv, w, b, False, MOM, EPS)),
        nbytes=2 * nbytes,
        plan=plan,
    )

    dy = torch.randn_like(x)
    xr = x.detach().requires_grad_(True)
    wr, br = w.detach().clone().requires_grad_(True), b.detach().clone().requires_grad_(True)
    out = F.batch_norm(xr, None, None, wr, br, True, MOM, EPS)
    mean = x.float().mean((0, 2, 3), keepdim=True)
    inv = torch.rsqrt(x.float().var((0, 2, 3), unbiased=False, keepdim=True) + EPS)
    g = cudnn.pygraph()
    tdy, tx, ts, tm, tv = (g.tensor_like(t) for t in (dy, x, scale, mean, inv))
    tdx, tds, tdb = g.batchnorm_backward(tdy, tx, ts, tm, tv)
    for t in (tdx, tds, tdb):
        t.set_output(True)
    tds.set_data_type(cudnn.data_type.FLOAT)
    tdb.set_data_type(cudnn.data_type.FLOAT)
    g.build([cudnn.heur_mode.A])
    fn, plan = _exec(
        g,
        {
            tdy: dy,
            tx: x,
            ts: scale,
            tm: mean,
            tv: inv,
            tdx: torch.empty_like(x),
            tds: torch.empty_like(scale),
            tdb: torch.empty_like(scale),
        },
    )
    r.add(
        "batchnorm",
        f"backward {case}",
        bench(fn),
        bench(lambda: torch.autograd.grad(out, (xr, wr, br), dy, retain_graph=True)),
        nbytes=3 * nbytes,
        plan=plan,
        ref_name="pytorch autograd",
    )

    # dReLU + dBN in one graph (ResNet's backward through bn -> relu)
    yact = torch.randn_like(x)
    g = cudnn.pygraph()
    tl_, ty, tx, ts, tm, tv = (g.tensor_like(t) for t in (dy, yact, x, scale, mean, inv))
    tdx, tds, tdb = g.batchnorm_backward(g.relu_backward(tl_, ty), tx, ts, tm, tv)
    for t in (tdx, tds, tdb):
        t.set_output(True).set_data_type(
            cudnn.data_type.FLOAT if t is not tdx else cudnn.data_type.BFLOAT16
        )
    g.build([cudnn.heur_mode.A])
    fn, plan = _exec(
        g,
        {
            tl_: dy,
            ty: yact,
            tx: x,
            ts: scale,
            tm: mean,
            tv: inv,
            tdx: torch.empty_like(x),
            tds: torch.empty_like(scale),
            tdb: torch.empty_like(scale),
        },
    )
    mask = yact > 0

    def ref():
        d = torch.where(mask, dy, 0)
        return torch.autograd.grad(out, (xr, wr, br), d, retain_graph=True)

    r.add(
        "batchnorm",
        f"backward+drelu {case}",
        bench(fn),
        bench(ref),
        nbytes=4 * nbytes,
        plan=plan,
        ref_name="pytorch where->autograd",
    )
