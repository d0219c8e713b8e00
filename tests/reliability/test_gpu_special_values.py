"""Special values on the GPU (pytest -m gpu): what only compiled Triton gets wrong --
tl.maximum / tl.minimum drop NaN unless asked (fused max / min reductions), FMA
contraction breaks an exact remainder written for the interpreter (fmod) -- and the
clipped activations and norms of test_special_values.py on CUDA buffers.

Compiled Triton flushes float32 subnormals in its fast math (exp, log, rsqrt, sin, libdevice
with reflect-ftz), so inputs and results here stay normal."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from _norm_cases import forward_graph, torch_forward, torch_stats
from _util import alloc_output, workspace

import opendnn.frontend as cudnn
from opendnn.enums import DataType
from opendnn.enums import PointwiseMode as M
from opendnn.enums import ReductionMode as R

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

FUSION, NORM = 1, 26


def _run(g, feeds, outputs, engine_id, knobs=None):
    """The outputs of ``g`` on ``engine_id``, CUDA buffers NaN-poisoned first."""
    g.validate()
    g.create_execution_plan(engine_id, knobs or {})
    bufs = {t: alloc_output(t, float("nan")).cuda() for t in outputs}
    ws = workspace(g.get_workspace_size_plan_at_index(0))
    g.execute_plan_at_index(
        {**{t: x.cuda() for t, x in feeds.items()}, **bufs},
        ws.cuda() if ws is not None else None,
        0,
    )
    return [bufs[t].cpu() for t in outputs]


def _graph(dtype=torch.float32):
    t = DataType.DOUBLE if dtype == torch.float64 else DataType.FLOAT
    return cudnn.pygraph(intermediate_data_type=t, compute_data_type=t)


@pytest.mark.parametrize("mode", [R.MAX, R.MIN, R.AMAX])
def test_fused_max_min_reductions_keep_nan(mode):
    """A NaN in a row makes its max / min / amax NaN, as torch.amax."""
    x = torch.randn(4, 300)
    x[1, 17], x[2, 299] = math.nan, math.nan
    g = _graph()
    t = g.tensor_like(x)
    y = g.reduction(t, mode)
    y.set_output(True).set_dim([4, 1])
    got = _run(
        g, {t: x}, [y], FUSION, {"BLOCK_KEPT": 1, "BLOCK_RED": 128, "SPLIT": 1, "num_warps": 4}
    )[0].flatten()
    want = {R.MAX: x.amax(1), R.MIN: x.amin(1), R.AMAX: x.abs().amax(1)}[mode]
    assert torch.equal(got.isnan(), want.isnan()), f"{mode.name}: {got.tolist()}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_fmod_exact_compiled(dtype):
    """fmod of random pairs with quotients up to 2^100 is C's, exactly."""
    gen = torch.Generator().manual_seed(3)
    ea = torch.randint(-50, 50, (2000,), generator=gen).double()
    eb = torch.randint(-50, 50, (2000,), generator=gen).double()
    a = ((torch.rand(2000, generator=gen, dtype=torch.float64) * 2 - 1) * 2.0**ea).to(dtype)
    b = ((torch.rand(2000, generator=gen, dtype=torch.float64) * 2 - 1) * 2.0**eb).to(dtype)
    g = _graph(dtype)
    ta, tb = g.tensor_like(a), g.tensor_like(b)
    y = g.mod(ta, tb)
    y.set_output(True).set_data_type(DataType.DOUBLE if dtype == torch.float64 else DataType.FLOAT)
    got = _run(g, {ta: a, tb: b}, [y], FUSION, {"BLOCK": 1024, "num_warps": 4})[0]
    want = torch.from_numpy(np.fmod(a.numpy(), b.numpy()))
    bad = got != want
    assert not bad.any(), (
        f"{int(bad.sum())} differ; first: fmod({a[bad][0].item()}, "
        f"{b[bad][0].item()}) = {got[bad][0].item()}, C: {want[bad][0].item()}"
    )


def test_clipped_activations_at_infinities():
    """relu / relu6 / hardtanh / leaky_relu of +-inf, NaN, +-0 compiled are PyTorch's."""
    x = torch.tensor([-math.inf, math.inf, math.nan, 0.0, -0.0, -5.0, 7.0, 0.5])
    for attrs, fn in (
        ({}, torch.relu),
        ({"relu_upper_clip": 6.0}, F.relu6),
        ({"relu_lower_clip": -1.0, "relu_upper_clip": 1.0}, F.hardtanh),
        ({"relu_lower_clip_slope": 0.2}, lambda v: F.leaky_relu(v, 0.2)),
    ):
        g = _graph()
        t = g.tensor_like(x)
        y = g._pointwise(M.RELU_FWD, [t], **attrs)
        y.set_output(True)
        got = _run(g, {t: x}, [y], FUSION, {"BLOCK": 1024, "num_warps": 4})[0]
        want = fn(x)
        same = (got == want) | (got.isnan() & want.isnan())
        assert bool(same.all()) and torch.equal(got.signbit(), want.signbit()), (attrs, got)


@pytest.mark.parametrize(
    "knobs",
    [
        dict(PATH=1, BLOCK_L=512, BLOCK_ROWS=1, num_warps=4),
        dict(PATH=2, BLOCK_L=128, num_warps=4),
        dict(PATH=3, BLOCK_L=128, SPLIT=4, num_warps=4),
    ],
    ids=["rows", "loop", "split"],
)
@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm"])
def test_norm_extreme_magnitudes_compiled(kind, knobs):
    """Rows at 1e20, +-3e38 (statistics overflow float32) compiled: PyTorch's float64
    results cast."""
    g = torch.Generator().manual_seed(2)
    length = 500
    x = torch.randn(3, length, generator=g, dtype=torch.float64)
    x[0] *= 1e20
    x[1] = 3e38 * torch.sign(x[1])
    x[1, 0] = 1.0
    x = x.float()
    w, b = torch.randn(1, length, generator=g), torch.randn(1, length, generator=g)
    graph, feeds, outs = forward_graph(kind, x, w, b)
    got = _run(graph, feeds, outs, NORM, knobs)
    y = torch_forward(kind, x.double(), w.double(), b.double()).float()
    mean, inv = torch_stats(kind, x.double(), w.double())
    want = [y, mean.float(), inv.float()] if kind == "layernorm" else [y, inv.float()]
    for a, e in zip(got, want):
        torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-4)
