"""GPU checks of the norm engine against float64 PyTorch (pytest -m gpu): the plan the
heuristics pick and every config the engine lists, forward and backward, for layer and
RMS norm at row widths up to 262144 (both paths), instance and group norm in NCHW and
NHWC, float32 / float16 / bfloat16, and a fused residual add + layer norm + GELU."""

import pytest
import torch
import torch.nn.functional as F
from _norm_cases import backward_graph, forward_graph, param_shape, torch_forward, torch_stats
from _util import plan_with_knobs

import opendnn.frontend as cudnn
from opendnn.engines.norm import shapes

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 2e-3}


def _relerr(out, ref):
    out, ref = out.double().cpu(), ref.double().cpu()
    assert not torch.isnan(out).any(), "unwritten (NaN-poisoned) outputs"
    return ((out - ref).norm() / max(ref.norm().item(), 1e-6)).item()


def _close(out, ref, tol, zero_atol):
    """Relative error under ``tol``; against an all-zero reference (DX of rows of one
    element: rstd * (dy - mean(dy) - ...), 0 exactly, which the GPU's fused multiply-adds
    leave at float32 rounding times rstd = 1/sqrt(eps), ~1e-5) magnitudes under
    ``zero_atol``."""
    if zero_atol is not None and ref.abs().max().item() == 0:
        assert not torch.isnan(out).any(), "unwritten (NaN-poisoned) outputs"
        return out.double().abs().max().item() <= zero_atol
    return _relerr(out, ref) < tol


def _run_every_plan(g, feeds, outs, refs, tol, zero_atol=None):
    """Every norm plan of ``g`` on poisoned outputs, each output against its reference."""
    g.build([cudnn.heur_mode.A])
    assert g.get_plan_name_at_index(0).startswith("norm"), g.get_plan_name_at_index(0)
    names = []
    for i in range(g.get_execution_plan_count()):
        name = g.get_plan_name_at_index(i)
        if not name.startswith("norm"):
            continue
        g.build_plan_at_index(i)
        ws = torch.empty(
            max(g.get_workspace_size_plan_at_index(i), 1), device="cuda", dtype=torch.uint8
        ).fill_(255)
        bufs = {
            t: torch.empty_strided(
                t.get_dim(), t.get_stride(), device="cuda", dtype=_dtype(t)
            ).fill_(float("nan"))
            for t in outs
        }
        g.execute_plan_at_index({**feeds, **bufs}, ws, i)
        for t, ref in zip(outs, refs):
            assert _close(bufs[t], ref, tol, zero_atol), f"{name} {t.get_name()}"
        names.append(name)
    return names


def _dtype(t):
    return {
        cudnn.data_type.FLOAT: torch.float32,
        cudnn.data_type.HALF: torch.float16,
        cudnn.data_type.BFLOAT16: torch.bfloat16,
    }[t.get_data_type()]


def _grads(kind, x, w, b, dy, groups):
    xr, wr = x.double().requires_grad_(True), w.double().requires_grad_(True)
    br = b.double().requires_grad_(True) if b is not None else None
    y = torch_forward(kind, xr, wr, br, 1e-5, groups)
    y.backward(dy.double())
    return y.detach(), [xr.grad, wr.grad] + ([br.grad] if br is not None else [])


@pytest.mark.parametrize("case", shapes.GPU, ids=[f"{c[0]}-{c[1]}" for c in shapes.GPU])
@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float32, torch.float16])
def test_forward_and_backward(case, dt):
    kind, shape, groups = case
    if dt == torch.float16 and shape[-1] > 8192:
        pytest.skip("float16 covered at the shorter rows")
    x = (torch.randn(shape, device="cuda") * 2 + 0.5).to(dt)
    if kind in ("instancenorm", "groupnorm") and dt == torch.bfloat16:
        x = x.contiguous(memory_format=torch.channels_last)
    ps = param_shape(kind, shape)
    w = torch.randn(ps, device="cuda").to(dt)
    b = torch.randn(ps, device="cuda").to(dt) if kind != "rmsnorm" else None
    dy = torch.randn(shape, device="cuda").to(dt)
    yref, grads = _grads(kind, x, w, b, dy, groups)
    mean, inv = torch_stats(kind, x.cpu(), w.cpu(), 1e-5, groups)
    g, feeds, outs = forward_graph(kind, x, w, b, 1e-5, groups)
    stats = [inv] if kind == "rmsnorm" else [mean, inv]
    assert _run_every_plan(g, feeds, outs, [yref] + stats, TOL[dt])
    mean, inv = (t.float().cuda() for t in (mean, inv))
    g, feeds, outs = backward_graph(kind, dy, x, w, mean, inv, groups, has_dbias=kind != "rmsnorm")
    _run_every_plan(
        g,
        feeds,
        outs,
        grads,
        3 * TOL[dt],
        zero_atol=8 * 2**-23 * inv.max().item() * dy.abs().max().item(),
    )


@pytest.mark.parametrize("shape", [(4096, 4096), (16, 140000)])
def test_fused_residual_layernorm_gelu(shape):
    L = shape[1]
    x, r = (torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    w, b = (torch.randn(1, L, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    g = cudnn.pygraph()
    tx, tr, tw, tb = (g.tensor_like(t) for t in (x, r, w, b))
    y, m, v = g.layernorm(cudnn.norm_forward_phase.TRAINING, g.add(tx, tr), tw, tb, 1e-5)
    out = g.gelu(y)
    out.set_output(True).set_data_type(cudnn.data_type.BFLOAT16)
    for t in (m, v):
        t.set_output(True).set_data_type(cudnn.data_type.FLOAT)
    s = x.double() + r.double()
    ref = F.gelu(F.layer_norm(s, (L,), w[0].double(), b[0].double(), 1e-5))
    mean = s.mean(-1, keepdim=True)
    inv = 1 / torch.sqrt(s.var(-1, unbiased=False, keepdim=True) + 1e-5)
    names = _run_every_plan(g, {tx: x, tr: r, tw: w, tb: b}, [out, m, v], [ref, mean, inv], 1e-2)
    assert len(g._plans) >= 1 and names


@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm"])
@pytest.mark.parametrize(
    "rows,programs,prefetch,chunk,lag",
    [
        (29, 24, 1, 0, 0),
        (29, 264, 0, 0, 0),
        (3, 264, 1, 0, 0),
        (29, 132, 1, 243, 0),
        (29, 24, 2, 0, 0),
        (29, 24, 0, 0, 1),
        (29, 24, 0, 0, 2),
        (3, 264, 0, 0, 2),
        (29, 132, 0, 243, 2),
    ],
)
def test_one_read_path_knobs(kind, rows, programs, prefetch, chunk, lag):
    """PATH=4 with 12 chunks of 256 (the last partial), few or more groups than rows,
    with and without PREFETCH (1 and 2), forward and backward; 12 chunks of 243 in 256
    tiles; the backward's meeting a row late (LAG 1 and 2)."""
    shape, dt = (rows, 2900), torch.bfloat16
    x = (torch.randn(shape, device="cuda") * 2 + 0.5).to(dt)
    w, dy = torch.randn(1, 2900, device="cuda").to(dt), torch.randn(shape, device="cuda").to(dt)
    b = torch.randn(1, 2900, device="cuda").to(dt) if kind == "layernorm" else None
    yref, grads = _grads(kind, x, w, b, dy, 1)
    mean, inv = torch_stats(kind, x.cpu(), w.cpu(), 1e-5, 1)
    knobs = dict(
        PATH=4,
        BLOCK_L=256,
        BLOCK_ROWS=1,
        SPLIT=12,
        PROGRAMS=programs,
        num_warps=4,
        PREFETCH=prefetch,
        CHUNK=chunk,
        LAG=lag,
    )
    for bwd in (False, True) if not lag else (True,):
        if bwd:
            g, feeds, outs = backward_graph(
                kind, dy, x, w, mean.float().cuda(), inv.float().cuda(), 1, has_dbias=b is not None
            )
            refs = grads
        else:
            g, feeds, outs = forward_graph(kind, x, w, b, 1e-5, 1)
            refs = [yref] + ([inv] if kind == "rmsnorm" else [mean, inv])
        ws = plan_with_knobs(g, 26, knobs)
        for rep in range(4):  # the programs meet through the workspace: run it again
            bufs = {
                t: torch.empty_strided(
                    t.get_dim(), t.get_stride(), device="cuda", dtype=_dtype(t)
                ).fill_(float("nan"))
                for t in outs
            }
            g.execute({**feeds, **bufs}, ws)
            for t, ref in zip(outs, refs):
                assert _close(bufs[t], ref, 3e-2, None), f"backward={bwd} {t.get_name()} {rep}"
