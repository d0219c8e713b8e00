"""GPU checks of the batch-norm engine against float64 PyTorch (pytest -m gpu): training
forward (outputs, saved statistics, running statistics), inference and backward on NHWC
and NCHW, the bench shape and odd ones, per-activation statistics, fused add / relu,
bitwise determinism of the statistics, and the legacy calls with blending."""

import pytest
import torch
import torch.nn.functional as F

import opendnn.frontend as cudnn
from opendnn.engines.batchnorm import shapes

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 2e-3}
EPS, MOM = 1e-5, 0.1


def _relerr(out, ref):
    out, ref = out.double().cpu(), ref.double().cpu()
    assert not torch.isnan(out).any(), "unwritten (NaN-poisoned) outputs"
    return ((out - ref).norm() / max(ref.norm().item(), 1e-30)).item()


def _x(shape, layout, dt, shift=1.0):
    x = torch.randn(shape, device="cuda") * 2 + shift
    if layout == "nhwc":
        x = x.to(memory_format=torch.channels_last)
    return x.to(dt)


def _stat(c, per_act_shape=None):
    shape = per_act_shape or (1, c, 1, 1)
    return torch.randn(shape, device="cuda"), torch.rand(shape, device="cuda") + 0.5


def _nan_like(t):
    return torch.full_like(t, float("nan"))


def _plan_is_ours(g):
    assert g.get_plan_name_at_index(0).startswith("batchnorm#30"), g.get_plan_name_at_index(0)


@pytest.mark.parametrize("shape", shapes.GPU)
@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float32])
def test_training_forward(shape, layout, dt):
    x = _x(shape, layout, dt, shift=3.0)
    c = shape[1]
    scale, bias = _stat(c)
    rm, rv = _stat(c)
    g = cudnn.pygraph()
    tx, ts, tb, trm, trv = (g.tensor_like(t) for t in (x, scale, bias, rm, rv))
    y, mean, inv, nrm, nrv = g.batchnorm(tx, ts, tb, trm, trv, EPS, MOM)
    outs = {y: _nan_like(x)}
    for t in (y, mean, inv, nrm, nrv):
        t.set_output(True)
    for t in (mean, inv, nrm, nrv):
        outs[t] = _nan_like(scale)
    g.build([cudnn.heur_mode.A])
    _plan_is_ours(g)
    ws = torch.full((max(g.get_workspace_size(), 1),), 255, device="cuda", dtype=torch.uint8)
    g.execute({tx: x, ts: scale, tb: bias, trm: rm, trv: rv, **outs}, ws)
    xd = x.double()
    wm, wv = rm.double().reshape(-1).clone(), rv.double().reshape(-1).clone()
    ref = F.batch_norm(
        xd, wm, wv, scale.double().reshape(-1), bias.double().reshape(-1), True, MOM, EPS
    )
    axes = (0, 2, 3)
    assert _relerr(outs[y], ref) < TOL[dt]
    assert _relerr(outs[mean].reshape(-1), xd.mean(axes)) < 1e-5
    assert _relerr(outs[inv].reshape(-1), (xd.var(axes, unbiased=False) + EPS) ** -0.5) < 1e-5
    assert _relerr(outs[nrm].reshape(-1), wm) < 1e-5
    assert _relerr(outs[nrv].reshape(-1), wv) < 1e-5


def test_training_statistics_are_bitwise_deterministic():
    x = _x(shapes.GPU[0], "nhwc", torch.bfloat16)
    scale, bias = _stat(256)
    g = cudnn.pygraph()
    tx, ts, tb = (g.tensor_like(t) for t in (x, scale, bias))
    y, mean, inv, _, _ = g.batchnorm(tx, ts, tb, None, None, EPS, None)
    for t in (y, mean, inv):
        t.set_output(True)
    g.build([cudnn.heur_mode.A])
    ws = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
    runs = []
    for _ in range(3):
        outs = {y: _nan_like(x), mean: _nan_like(scale), inv: _nan_like(scale)}
        g.execute({tx: x, ts: scale, tb: bias, **outs}, ws)
        runs.append(outs)
    for t in (y, mean, inv):
        assert torch.equal(runs[0][t], runs[1][t]) and torch.equal(runs[0][t], runs[2][t])


@pytest.mark.parametrize("shape", shapes.GPU[:3])
@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
@pytest.mark.parametrize("epilogue", ["", "relu", "add+relu"])
def test_inference_with_fused_epilogue(shape, layout, epilogue):
    dt = torch.bfloat16
    x, z = _x(shape, layout, dt), _x(shape, layout, dt)
    scale, bias = _stat(shape[1])
    mean, var = _stat(shape[1])
    inv = torch.rsqrt(var + EPS)
    g = cudnn.pygraph()
    tx, tm, tv, ts, tb = (g.tensor_like(t) for t in (x, mean, inv, scale, bias))
    ty = g.batchnorm_inference(tx, tm, tv, ts, tb)
    tz = None
    if "add" in epilogue:
        tz = g.tensor_like(z)
        ty = g.add(ty, tz)
    if "relu" in epilogue:
        ty = g.relu(ty)
    ty.set_output(True)
    g.build([cudnn.heur_mode.A])
    _plan_is_ours(g)
    y = _nan_like(x)
    pack = {tx: x, tm: mean, tv: inv, ts: scale, tb: bias, ty: y}
    if tz is not None:
        pack[tz] = z
    g.execute(pack, None)
    ref = F.batch_norm(
        x.double(),
        mean.double().reshape(-1),
        var.double().reshape(-1),
        scale.double().reshape(-1),
        bias.double().reshape(-1),
        False,
        MOM,
        EPS,
    )
    if "add" in epilogue:
        ref = ref + z.double()
    if "relu" in epilogue:
        ref = ref.relu()
    assert _relerr(y, ref) < TOL[dt]


@pytest.mark.parametrize("shape", shapes.GPU_BACKWARD)
@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float32])
def test_backward(shape, layout, dt):
    x, dy = _x(shape, layout, dt), _x(shape, layout, dt, 0.0)
    scale, _ = _stat(shape[1])
    xd = x.double().requires_grad_(True)
    wd = scale.double().reshape(-1).requires_grad_(True)
    bd = torch.zeros_like(wd).requires_grad_(True)
    F.batch_norm(xd, None, None, wd, bd, True, MOM, EPS).backward(dy.double())
    mean = x.double().mean((0, 2, 3), keepdim=True).float()
    inv = ((x.double().var((0, 2, 3), unbiased=False, keepdim=True) + EPS) ** -0.5).float()
    g = cudnn.pygraph()
    tdy, tx, ts, tm, tv = (g.tensor_like(t) for t in (dy, x, scale, mean, inv))
    tdx, tds, tdb = g.batchnorm_backward(tdy, tx, ts, tm, tv)
    for t in (tdx, tds, tdb):
        t.set_output(True)
    g.build([cudnn.heur_mode.A])
    _plan_is_ours(g)
    dx, ds, db = _nan_like(x), _nan_like(scale), _nan_like(scale)
    ws = torch.full((max(g.get_workspace_size(), 1),), 255, device="cuda", dtype=torch.uint8)
    g.execute({tdy: dy, tx: x, ts: scale, tm: mean, tv: inv, tdx: dx, tds: ds, tdb: db}, ws)
    assert _relerr(dx, xd.grad) < 4 * TOL[dt]
    assert _relerr(ds.reshape(-1), wd.grad) < 4 * TOL[dt]
    assert _relerr(db.reshape(-1), bd.grad) < 4 * TOL[dt]


@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
def test_backward_through_fused_relu_backward(layout):
    shape, dt = (32, 64, 28, 28), torch.bfloat16
    x, loss, y = _x(shape, layout, dt), _x(shape, layout, dt, 0.0), _x(shape, layout, dt, 0.0)
    scale, _ = _stat(shape[1])
    xd = x.double().requires_grad_(True)
    wd = scale.double().reshape(-1).requires_grad_(True)
    bd = torch.zeros_like(wd).requires_grad_(True)
    F.batch_norm(xd, None, None, wd, bd, True, MOM, EPS).backward(loss.double() * (y.double() > 0))
    mean = x.double().mean((0, 2, 3), keepdim=True).float()
    inv = ((x.double().var((0, 2, 3), unbiased=False, keepdim=True) + EPS) ** -0.5).float()
    g = cudnn.pygraph()
    tl_, ty, tx, ts, tm, tv = (g.tensor_like(t) for t in (loss, y, x, scale, mean, inv))
    tdx, tds, tdb = g.batchnorm_backward(g.relu_backward(tl_, ty), tx, ts, tm, tv)
    for t in (tdx, tds, tdb):
        t.set_output(True)
    g.build([cudnn.heur_mode.A])
    _plan_is_ours(g)
    dx, ds, db = _nan_like(x), _nan_like(scale), _nan_like(scale)
    ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
    g.execute(
        {tl_: loss, ty: y, tx: x, ts: scale, tm: mean, tv: inv, tdx: dx, tds: ds, tdb: db}, ws
    )
    assert _relerr(dx, xd.grad) < 4 * TOL[dt]
    assert _relerr(ds.reshape(-1), wd.grad) < 4 * TOL[dt]
    assert _relerr(db.reshape(-1), bd.grad) < 4 * TOL[dt]


def test_per_activation_training():
    x = _x((64, 8, 5, 5), "nchw", torch.float32)
    scale, bias = _stat(8, (1, 8, 5, 5))
    g = cudnn.pygraph()
    tx, ts, tb = (g.tensor_like(t) for t in (x, scale, bias))
    y, mean, inv, _, _ = g.batchnorm(tx, ts, tb, None, None, EPS, None)
    for t in (y, mean, inv):
        t.set_output(True)
    g.build([cudnn.heur_mode.A])
    _plan_is_ours(g)
    outs = {y: _nan_like(x), mean: _nan_like(scale), inv: _nan_like(scale)}
    ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
    g.execute({tx: x, ts: scale, tb: bias, **outs}, ws)
    ref = F.batch_norm(
        x.double().reshape(64, -1),
        None,
        None,
        scale.double().reshape(-1),
        bias.double().reshape(-1),
        True,
        MOM,
        EPS,
    ).reshape(x.shape)
    assert _relerr(outs[y], ref) < 1e-5


def test_legacy_training_updates_running_buffers_in_place():
    import opendnn.legacy as L

    dims = (32, 64, 14, 14)
    x = _x(dims, "nhwc", torch.float16)
    y = torch.randn(dims, device="cuda").to(torch.float16).to(memory_format=torch.channels_last)
    prior = y.clone()
    d = L.create_tensor_descriptor()
    L.set_tensor_4d_descriptor(d, L.TensorFormat.NHWC, L.DataType.HALF, *dims)
    bn = L.derive_bn_tensor_descriptor(L.create_tensor_descriptor(), d, L.BatchNormMode.SPATIAL)
    scale, bias = _stat(64)
    rm, rv = torch.zeros(1, 64, 1, 1, device="cuda"), torch.ones(1, 64, 1, 1, device="cuda")
    L.batch_normalization_forward_training(
        L.create("cuda"),
        L.BatchNormMode.SPATIAL,
        0.5,
        2.0,
        d,
        x,
        d,
        y,
        bn,
        scale,
        bias,
        0.2,
        rm,
        rv,
        EPS,
    )
    wm, wv = torch.zeros(64, dtype=torch.float64), torch.ones(64, dtype=torch.float64)
    ref = F.batch_norm(
        x.double().cpu(),
        wm,
        wv,
        scale.double().reshape(-1).cpu(),
        bias.double().reshape(-1).cpu(),
        True,
        0.2,
        EPS,
    )
    assert _relerr(y, 0.5 * ref + 2.0 * prior.double().cpu()) < 2e-3
    assert _relerr(rm.reshape(-1), wm) < 1e-5 and _relerr(rv.reshape(-1), wv) < 1e-5
