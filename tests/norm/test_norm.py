"""Layer, RMS, instance and group norm: the float64 reference against PyTorch (forward,
and backward through autograd); the norm engine's forward and backward kernels (whole
rows in registers; long rows: two loops, statistics + column blocks) against the
reference through the interpreter on odd, size-one and empty dims, strided and NHWC
layouts and every floating type; the normalization property; each rule with its error.
Fusion (residual add, activation epilogue): test_norm_fusion.py."""

import pytest
import torch
from _norm_cases import (
    INFERENCE,
    KINDS,
    backward_graph,
    forward_graph,
    param_shape,
    torch_forward,
    torch_stats,
)
from _util import assert_close, check_engine, repro, run_reference

from opendnn.engines.norm.engine import NormEngine

ID = NormEngine.id
LOOP = dict(PATH=2, BLOCK_L=16, BLOCK_ROWS=1, SPLIT=1, PROGRAMS=1, num_warps=4)
SPLIT3 = dict(PATH=3, BLOCK_L=8, BLOCK_ROWS=1, SPLIT=3, PROGRAMS=1, num_warps=4)
COOP = dict(PATH=4, BLOCK_L=64, BLOCK_ROWS=1, SPLIT=1, PROGRAMS=2, num_warps=4, PREFETCH=1)


def _inputs(rng, kind, shape, dtype, axes=None, bias=True):
    ps = param_shape(kind, shape, axes)
    x = rng.rand(shape, dtype, high=3.0)
    w = rng.rand(ps, dtype)
    b = rng.rand(ps, dtype) if bias or kind != "rmsnorm" else None
    return x, w, b


def _groups(kind, shape):
    return 3 if kind == "groupnorm" and shape[1] % 3 == 0 else 1


def _row_length(kind, shape, groups):
    if kind in ("layernorm", "rmsnorm"):
        return max(1, int(torch.tensor(shape[1:]).prod()))
    return int(torch.tensor(shape[1:]).prod()) // (shape[1] if kind == "instancenorm" else groups)


# ---- the reference against PyTorch ------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_reference_matches_pytorch(rng, kind):
    shape = (4, 6, 3, 5)
    groups = _groups(kind, shape)
    x, w, b = _inputs(rng, kind, shape, torch.float64)
    g, feeds, outs = forward_graph(kind, x, w, b, 1e-3, groups, stats_type=torch.float64)
    got = run_reference(g, feeds, outs)
    assert_close(got[outs[0]], torch_forward(kind, x, w, b, 1e-3, groups), torch.float64, 5)
    mean, inv = torch_stats(kind, x, w, 1e-3, groups)
    assert_close(got[outs[-1]], inv, torch.float64, 5)
    xr, wr = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    br = b.clone().requires_grad_(True)
    dy = rng.rand(shape, torch.float64)
    torch_forward(kind, xr, wr, br, 1e-3, groups).backward(dy)
    g, feeds, outs = backward_graph(kind, dy, x, w, mean, inv, groups)
    got = run_reference(g, feeds, outs)
    for t, want in zip(outs, (xr.grad, wr.grad, br.grad)):
        assert_close(got[t], want, torch.float64, 50)


# ---- the engine against the reference ---------------------------------------------------------
CASES = [  # (kind, shape, layer-norm axes or None, knobs: None = the engine's choice)
    ("layernorm", (5, 37), None, None),
    ("layernorm", (5, 37), None, LOOP),
    ("layernorm", (2, 3, 1, 7), None, None),  # size-one normalized axis
    ("layernorm", (3, 4, 5), (2,), dict(LOOP, BLOCK_L=2)),  # [B, S, D] over D
    ("layernorm", (4, 6, 2, 3), (1,), None),  # over C of NCHW: strided rows
    ("layernorm", (3, 1), None, None),  # rows of one element
    ("rmsnorm", (6, 33), None, None),
    ("rmsnorm", (6, 33), None, dict(LOOP, BLOCK_L=8)),
    ("layernorm", (5, 37), None, SPLIT3),  # split rows, two kernels
    ("rmsnorm", (6, 33), None, SPLIT3),
    ("rmsnorm", (2, 5, 9), (1, 2), None),
    ("instancenorm", (2, 3, 4, 5), None, None),
    ("instancenorm", (2, 3, 1, 1), None, None),  # one element per instance
    ("groupnorm", (2, 6, 3, 5), None, None),
    ("groupnorm", (3, 6, 7), None, dict(LOOP, BLOCK_L=4)),
    ("groupnorm", (3, 6, 7), None, dict(SPLIT3, BLOCK_L=4)),  # the last chunk: padding
    # one read (PATH=4): on the CPU a row is one chunk (SPLIT=1; chunks of one row wait for
    # each other: GPU only, test_gpu_norm.py); 2 persistent programs prefetching rows
    ("layernorm", (5, 37), None, COOP),
    ("rmsnorm", (6, 33), None, dict(COOP, PREFETCH=0)),
    ("layernorm", (4, 6, 2, 3), (1,), dict(COOP, BLOCK_L=8)),  # strided rows
    ("layernorm", (5, 37), None, dict(COOP, CHUNK=40)),  # a chunk short of its tile
    ("rmsnorm", (6, 33), None, dict(COOP, PREFETCH=2)),  # the next row loaded first
]


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}{i}" for i, c in enumerate(CASES)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_forward_against_reference(rng, case, dtype):
    kind, shape, axes, knobs = case
    groups = _groups(kind, shape)
    x, w, b = _inputs(rng, kind, shape, dtype, axes, bias=dtype != torch.float16)
    g, feeds, outs = forward_graph(kind, x, w, b, 1e-5, groups)
    n = _row_length(kind, shape, groups) if axes is None else 8
    check_engine(
        g,
        feeds,
        outs,
        ID,
        knobs,
        n=n,
        msg=repro(kind, [shape], str(dtype), rng.seed, axes=axes, knobs=knobs),
    )


BWD = dict(PATH=2, BLOCK_L=2, BLOCK_ROWS=1, SPLIT=2, PROGRAMS=2, num_warps=4)
BWD_CASES = (
    [c[:3] + (None,) for c in CASES if not (c[3] and c[3]["PATH"] in (3, 4))]
    + [c for c in CASES if c[3] and c[3]["PATH"] == 4]
    + [c[:3] + (BWD,) for c in CASES if c[3] and c[3]["PATH"] == 2]
    + [
        (
            "layernorm",
            (7, 37),
            None,
            dict(PATH=1, BLOCK_L=64, BLOCK_ROWS=2, SPLIT=1, PROGRAMS=3, num_warps=4),
        ),
        (
            "layernorm",
            (7, 37),
            None,
            dict(PATH=1, BLOCK_L=64, BLOCK_ROWS=2, SPLIT=1, PROGRAMS=3, num_warps=4, PREFETCH=1),
        ),
        (
            "rmsnorm",
            (9, 20),
            None,
            dict(PATH=1, BLOCK_L=32, BLOCK_ROWS=1, SPLIT=1, PROGRAMS=2, num_warps=4, PREFETCH=1),
        ),
        # the one-read meeting one row late, loading at the top of the step or ahead
        ("layernorm", (7, 37), None, dict(COOP, PREFETCH=0, LAG=1)),
        ("rmsnorm", (5, 33), None, dict(COOP, PREFETCH=0, LAG=2)),
        ("layernorm", (4, 6, 2, 3), (1,), dict(COOP, BLOCK_L=8, PREFETCH=0, LAG=2)),
        ("layernorm", (1, 37), None, dict(COOP, PREFETCH=0, LAG=2)),
    ]
)


@pytest.mark.parametrize("case", BWD_CASES, ids=[f"{c[0]}{i}" for i, c in enumerate(BWD_CASES)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_backward_against_reference(rng, case, dtype):
    kind, shape, axes, knobs = case
    groups = _groups(kind, shape)
    x, w, _ = _inputs(rng, kind, shape, dtype, axes)
    mean, inv = (t.float() for t in torch_stats(kind, x, w, 1e-5, groups))
    dy = rng.rand(shape, dtype)
    g, feeds, outs = backward_graph(kind, dy, x, w, mean, inv, groups)
    check_engine(
        g,
        feeds,
        outs,
        ID,
        knobs,
        n=4 * _row_length(kind, shape, groups),
        msg=repro(kind + "_backward", [shape], str(dtype), rng.seed, knobs=knobs),
    )


@pytest.mark.parametrize("kind", ["instancenorm", "groupnorm", "layernorm"])
def test_nhwc_and_strided_layouts(rng, kind):
    """Channels-last X, Y of another layout, and a non-packed (every other element) X."""
    shape = (2, 6, 3, 4)
    groups = _groups(kind, shape)
    x, w, b = _inputs(rng, kind, shape, torch.bfloat16)
    x = x.contiguous(memory_format=torch.channels_last)
    g, feeds, outs = forward_graph(kind, x, w, b, 1e-5, groups)
    outs[0].set_stride([72, 12, 4, 1]).set_data_type(torch.float32)
    check_engine(g, feeds, outs, ID, None, n=_row_length(kind, shape, groups))
    big = rng.rand((2, 6, 3, 8), torch.float32)
    xs = big[..., ::2]
    for knobs in (None, LOOP):
        g, feeds, outs = forward_graph(kind, xs, w.float(), b.float(), 1e-5, groups)
        check_engine(g, feeds, outs, ID, knobs, n=_row_length(kind, shape, groups))
    mean, inv = (t.float() for t in torch_stats(kind, xs, w, 1e-5, groups))
    dy = rng.rand(shape, torch.float32).contiguous(memory_format=torch.channels_last)
    g, feeds, outs = backward_graph(kind, dy, xs, w.float(), mean, inv, groups)
    check_engine(g, feeds, outs, ID, None, n=4 * _row_length(kind, shape, groups))


@pytest.mark.parametrize(
    "kind,knobs", [("groupnorm", None), ("groupnorm", BWD), ("instancenorm", None)]
)
def test_channels_last_backward_walks_memory_order(rng, kind, knobs):
    """NHWC X: the kernels' columns follow memory (spatial outer, channel inner), and the
    finishing kernel finds each channel's partials there."""
    shape = (2, 6, 3, 5)
    groups = _groups(kind, shape)
    x, w, _ = _inputs(rng, kind, shape, torch.float32)
    x = x.contiguous(memory_format=torch.channels_last)
    mean, inv = (t.float() for t in torch_stats(kind, x, w, 1e-5, groups))
    dy = rng.rand(shape, torch.float32).contiguous(memory_format=torch.channels_last)
    g, feeds, outs = backward_graph(kind, dy, x, w, mean, inv, groups)
    check_engine(g, feeds, outs, ID, knobs, n=4 * _row_length(kind, shape, groups))


@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm"])
def test_inference_writes_no_statistics(rng, kind):
    x, w, b = _inputs(rng, kind, (4, 9), torch.float32)
    g, feeds, outs = forward_graph(kind, x, w, b, 1e-5, phase=INFERENCE)
    assert len(outs) == 1
    y = check_engine(g, feeds, outs, ID, None, n=9)[outs[0]]
    assert_close(y, torch_forward(kind, x.double(), w.double(), b.double()), torch.float32, 9)


@pytest.mark.parametrize("kind", ["layernorm", "groupnorm"])
def test_empty_batch_forward_and_zero_parameter_gradients(rng, kind):
    shape = (0, 6, 5)
    x, w, b = _inputs(rng, kind, shape, torch.float32)
    g, feeds, outs = forward_graph(kind, x, w, b, 1e-5, _groups(kind, shape))
    got = check_engine(g, feeds, outs, ID, None)
    assert got[outs[0]].numel() == 0
    mean, inv = torch_stats(kind, x, w, 1e-5, _groups(kind, shape))
    g, feeds, outs = backward_graph(
        kind, x.clone(), x, w, mean.float(), inv.float(), _groups(kind, shape)
    )
    got = check_engine(g, feeds, outs, ID, None)
    assert bool((got[outs[1]] == 0).all()) and bool((got[outs[2]] == 0).all())


# ---- properties ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kind,knobs",
    [("layernorm", None), ("layernorm", LOOP), ("groupnorm", None), ("instancenorm", LOOP)],
)
def test_rows_have_mean_zero_and_variance_one_before_the_affine(rng, kind, knobs):
    shape = (3, 6, 4, 5)
    groups = _groups(kind, shape)
    x = rng.rand(shape, torch.float32, high=5.0) + 7.0  # far from zero mean
    ps = param_shape(kind, shape)
    g, feeds, outs = forward_graph(kind, x, torch.ones(ps), torch.zeros(ps), 1e-6, groups)
    y = check_engine(g, feeds, outs, ID, knobs, n=60)[outs[0]].double()
    from opendnn.ops import norm as N

    geo = N.geometry(
        {"layernorm": N.LAYER, "groupnorm": N.GROUP, "instancenorm": N.INSTANCE}[kind],
        shape,
        ps,
        groups,
    )
    yv = y.reshape(geo.view)
    assert_close(
        yv.mean(geo.axes),
        torch.zeros(geo.rows).reshape(yv.mean(geo.axes).shape),
        torch.float32,
        100,
    )
    assert_close(
        yv.var(geo.axes, unbiased=False), torch.ones_like(yv.mean(geo.axes)), torch.float32, 100
    )
