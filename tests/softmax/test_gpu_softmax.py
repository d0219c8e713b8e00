"""GPU checks of the softmax engine against float64 PyTorch (pytest -m gpu): the plan
heuristics pick, and every config the engine lists, on long and short rows, a strided
axis, forward and backward, softmax and log-softmax."""

import pytest
import torch
from _util import plan_with_knobs

import opendnn.frontend as cudnn
from opendnn.engines.softmax import shapes

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 2e-3}


def _relerr(out, ref):
    out, ref = out.double().cpu(), ref.double().cpu()
    assert not torch.isnan(out).any(), "unwritten (NaN-poisoned) outputs"
    return ((out - ref).norm() / max(ref.norm().item(), 1e-30)).item()


def _run_every_plan(g, pack, out, ref, tol):
    g.build([cudnn.heur_mode.A])
    assert g.get_plan_name_at_index(0).startswith("softmax")
    names = []
    for i in range(g.get_execution_plan_count()):
        name = g.get_plan_name_at_index(i)
        if not name.startswith("softmax"):
            continue
        g.build_plan_at_index(i)
        ws = torch.empty(
            max(g.get_workspace_size_plan_at_index(i), 1), device="cuda", dtype=torch.uint8
        ).fill_(255)
        out.fill_(float("nan"))
        g.execute_plan_at_index({**pack}, ws, i)
        assert _relerr(out, ref) < tol, name
        names.append(name)
    return names


@pytest.mark.parametrize("shape,axis", shapes.GPU)
@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("log", [False, True])
def test_softmax_forward_and_backward(shape, axis, dt, log):
    x = torch.randn(shape, device="cuda", dtype=dt) * 3
    xd = x.double()
    ref = torch.log_softmax(xd, axis) if log else torch.softmax(xd, axis)
    g = cudnn.pygraph()
    tx = g.tensor_like(x)
    ty = g.softmax(tx, axis=axis, log=log)
    ty.set_output(True)
    y = torch.empty_like(x)
    _run_every_plan(g, {tx: x, ty: y}, y, ref, TOL[dt])
    dy = torch.randn_like(x)
    yd = ref.to(dt)
    dyd, ydd = dy.double(), yd.double()
    dref = (
        (dyd - ydd.exp() * dyd.sum(axis, keepdim=True))
        if log
        else ydd * (dyd - (dyd * ydd).sum(axis, keepdim=True))
    )
    g = cudnn.pygraph()
    tdy, tyv = g.tensor_like(dy), g.tensor_like(yd)
    tdx = g.softmax_backward(tdy, tyv, axis=axis, log=log)
    tdx.set_output(True)
    dx = torch.empty_like(x)
    _run_every_plan(g, {tdy: dy, tyv: yd, tdx: dx}, dx, dref, TOL[dt] * 2)


@pytest.mark.parametrize("mode", ["CHANNEL", "INSTANCE"])
@pytest.mark.parametrize("algo", ["ACCURATE", "LOG"])
def test_legacy_softmax_forward_with_blending(mode, algo):
    import opendnn.legacy as L

    dims = (8, 64, 14, 14)
    x = torch.randn(dims, device="cuda").to(memory_format=torch.channels_last)
    y = torch.randn(dims, device="cuda").to(memory_format=torch.channels_last)
    prior = y.clone()
    d = L.create_tensor_descriptor()
    L.set_tensor_4d_descriptor(d, L.TensorFormat.NHWC, L.DataType.FLOAT, *dims)
    L.softmax_forward(
        L.create("cuda"), L.SoftmaxAlgorithm[algo], L.SoftmaxMode[mode], 0.5, d, x, 2.0, d, y
    )
    xd = x.double()
    flat = xd.reshape(dims[0], -1) if mode == "INSTANCE" else xd
    ref = torch.log_softmax(flat, 1) if algo == "LOG" else torch.softmax(flat, 1)
    assert _relerr(y, 0.5 * ref.reshape(dims) + 2.0 * prior.double()) < 1e-5


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("rows,programs,prefetch", [(300, 24, 1), (300, 264, 0), (3, 264, 1)])
def test_one_read_path_knobs(log, rows, programs, prefetch):
    """PASSES=4 with 12 chunks of 256 (the last partial), few or more groups than rows,
    with and without PREFETCH, forward and backward, run four times on one workspace (the
    programs meet through it: a race would show as a wrong row)."""
    x = torch.randn(rows, 2900, device="cuda", dtype=torch.bfloat16) * 3
    xd = x.double()
    ref = torch.log_softmax(xd, -1) if log else torch.softmax(xd, -1)
    dy = torch.randn_like(x)
    yd = ref.to(torch.bfloat16)
    dyd, ydd = dy.double(), yd.double()
    dref = (
        (dyd - ydd.exp() * dyd.sum(-1, keepdim=True))
        if log
        else ydd * (dyd - (dyd * ydd).sum(-1, keepdim=True))
    )
    knobs = dict(
        PASSES=4,
        BLOCK_L=256,
        BLOCK_ROWS=1,
        SPLIT=12,
        num_warps=4,
        PROGRAMS=programs,
        PREFETCH=prefetch,
    )
    for backward in (False, True):
        g = cudnn.pygraph()
        if backward:
            tdy, tyv = g.tensor_like(dy), g.tensor_like(yd)
            out = g.softmax_backward(tdy, tyv, axis=-1, log=log)
            pack, want = {tdy: dy, tyv: yd}, dref
        else:
            tx = g.tensor_like(x)
            out = g.softmax(tx, axis=-1, log=log)
            pack, want = {tx: x}, ref
        out.set_output(True)
        ws = plan_with_knobs(g, 25, knobs)
        for rep in range(4):
            res = torch.full_like(x, float("nan"))
            g.execute({**pack, out: res}, ws)
            assert not torch.isnan(res).any(), f"backward={backward} run {rep}: unwritten"
            rows_err = (res.double() - want).norm(dim=-1) / want.norm(dim=-1).clamp_min(1e-30)
            assert rows_err.max().item() < 2e-2, f"backward={backward} run {rep}"


@pytest.mark.parametrize("log", [False, True])
def test_one_read_path_chunks_of_minus_infinity(log):
    """A chunk of -inf only next to values near -1000: its programs' exponentials are 0 and
    must stay 0 (not 0 x exp(1000)); the row's result is the reference's."""
    x = torch.randn(5, 2900, device="cuda") - 1000.0
    x[:, :256] = float("-inf")
    x[:, 700:800] = float("-inf")
    ref = torch.log_softmax(x.double(), -1) if log else torch.softmax(x.double(), -1)
    g = cudnn.pygraph()
    tx = g.tensor_like(x)
    out = g.softmax(tx, axis=-1, log=log)
    out.set_output(True)
    ws = plan_with_knobs(
        g,
        25,
        dict(PASSES=4, BLOCK_L=256, BLOCK_ROWS=1, SPLIT=12, num_warps=4, PROGRAMS=24, PREFETCH=1),
    )
    res = torch.full_like(x, float("nan"))
    g.execute({tx: x, out: res}, ws)
    finite = torch.isfinite(ref)
    assert torch.equal(torch.isfinite(res), finite.cpu().to(res.device))
    assert _relerr(res[finite], ref[finite]) < 1e-5
