"""Winograd backward filter, non-fused (engine 24, F(3x3, 2x2)), against the float64
reference through the graph API with NaN-poisoned outputs and workspace: the transform
matrices checked on their own, odd dy sizes (tiles overhanging dy's edge), batch 1 and
more, odd C and K across the output transform's 32-wide blocks, pad 0-2 with pre != post,
NCHW / NHWC / non-packed x, dy and dw (dw's layout independent of x's), both modes, fp32
/ fp16 / bf16, a dw of another type, the alpha / beta blend epilogue, a split-K GEMM,
bitwise determinism, the workspace, notes and cost model, and one decline per rule.

Tolerances: ``tol`` scales with sqrt(n), n = N * dy pixels (the terms of one dw element).
As for the forward Winograd tests, the transforms round more than a direct sum: V sums
four inputs and DYt four dy values before the product, and the output transform adds
sixteen products back with signs. In float32 these are float32 roundings (n x 4); for
half types DYt and V are also rounded to the operand type before the GEMM, where a direct
convolution's operands are exact (n x 16)."""

import math

import pytest
import torch
from _util import CONV_TYPES as TYPES
from _util import check_engine, heuristic_knobs, repro, run_plan, seed_for
from _util import graph_tensor as _tensor
from _util import with_layout as _layout

import opendnn.frontend as cudnn
from opendnn.engines.base import EngineConfig, Target
from opendnn.engines.conv.winograd.engine import MATRICES
from opendnn.engines.conv.winograd.wgrad import (
    WGRAD_MATRICES,
    WinogradNonfusedWgradEngine,
    plan_winograd_wgrad,
)
from opendnn.enums import NumericalNote
from opendnn.ops.conv import output_dims

ENGINE = WinogradNonfusedWgradEngine.id
SLACK = {torch.float32: 4, torch.float16: 16, torch.bfloat16: 16}
H100 = Target("cuda", "H100 (cost model only)", (9, 0), 132, 7.1e14, 5e13, 3e12)


def _problem(n, c, k, h, w, pre, post, dt, layout, seed, dw_layout=None):
    """x, dy and an (unwritten) dw of the wanted layouts, and the dy pixel count."""
    gen = torch.Generator().manual_seed(seed)
    x = _layout(torch.randn(n, c, h, w, generator=gen).to(dt), layout)
    dy_dims = output_dims((n, c, h, w), (k, c, 3, 3), pre, post, (1, 1), (1, 1))
    dy = _layout(torch.randn(*dy_dims, generator=gen).to(dt), layout)
    dw = _layout(torch.empty(k, c, 3, 3, dtype=dt), dw_layout or layout)
    return x, dy, dw, dy_dims[0] * dy_dims[2] * dy_dims[3]


def _graph(x, dy, dw, pre, post, mode="CROSS_CORRELATION", dw_type=None, **graph_kw):
    g = cudnn.pygraph(**graph_kw)
    tx, tdy = _tensor(g, x), _tensor(g, dy)
    tdw = g.conv_wgrad(
        tx,
        tdy,
        pre_padding=list(pre),
        post_padding=list(post),
        convolution_mode=cudnn.convolution_mode[mode],
    )
    tdw.set_dim(list(dw.shape)).set_stride(list(dw.stride()))
    tdw.set_data_type(dw_type if dw_type is not None else TYPES[dw.dtype])
    return g, tx, tdy, tdw


# ---- the transforms ----------------------------------------------------------------------------
def test_transform_matrices_compute_the_3x3_correlation():
    """A'^T [(G' g G'^T) (.) (B'^T d B')] A' is the 3x3 correlation of a 4x4 patch d with a
    2x2 tile g (float64, exact up to roundoff), and the matrices are the forward's
    transposes."""
    f = MATRICES[2]
    assert WGRAD_MATRICES["BT"] == f["BT"]
    assert WGRAD_MATRICES["G"] == [list(r) for r in zip(*f["AT"])]
    assert WGRAD_MATRICES["AT"] == [list(r) for r in zip(*f["G"])]
    BT, G, AT = (torch.tensor(WGRAD_MATRICES[k], dtype=torch.float64) for k in ("BT", "G", "AT"))
    assert (BT.shape, G.shape, AT.shape) == ((4, 4), (4, 2), (3, 4))
    gen = torch.Generator().manual_seed(3)
    for _ in range(5):
        d = torch.randn(4, 4, dtype=torch.float64, generator=gen)
        g = torch.randn(2, 2, dtype=torch.float64, generator=gen)
        wino = AT @ ((G @ g @ G.T) * (BT @ d @ BT.T)) @ AT.T
        direct = torch.stack(
            [torch.stack([(g * d[r : r + 2, s : s + 2]).sum() for s in range(3)]) for r in range(3)]
        )
        torch.testing.assert_close(wino, direct, rtol=1e-12, atol=1e-12)


# ---- against the reference -------------------------------------------------------------------
# (N, C, K, H, W, pre, post, layout, dw layout, mode, dtype)
CASES = [
    (1, 3, 5, 5, 7, (1, 1), (1, 1), "nchw", "nchw", "CROSS_CORRELATION", torch.float32),
    (2, 4, 3, 6, 5, (0, 0), (0, 0), "nhwc", "nhwc", "CONVOLUTION", torch.float32),
    (3, 5, 7, 4, 6, (2, 2), (2, 2), "nchw", "nhwc", "CONVOLUTION", torch.float16),
    (2, 3, 4, 7, 6, (1, 2), (0, 1), "nhwc", "nchw", "CROSS_CORRELATION", torch.bfloat16),
    (1, 6, 2, 5, 5, (2, 0), (0, 2), "strided", "strided", "CROSS_CORRELATION", torch.float32),
    (2, 33, 35, 3, 4, (0, 1), (1, 0), "nhwc", "nhwc", "CONVOLUTION", torch.bfloat16),
    (1, 1, 1, 3, 3, (0, 0), (0, 0), "nchw", "nchw", "CONVOLUTION", torch.float16),
    (2, 7, 9, 6, 8, (1, 0), (2, 1), "strided", "nchw", "CROSS_CORRELATION", torch.float16),
]
IDS = [
    "odd-out-nchw",
    "pad0-nhwc-conv",
    "pad2-f16-dw-nhwc",
    "asym-bf16-dw-nchw",
    "pre2-post0-strided",
    "two-blocks-bf16",
    "1x1-dy-f16",
    "asym-strided-f16",
]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_wgrad_against_reference(case):
    n, c, k, h, w, pre, post, layout, dw_layout, mode, dt = case
    seed = seed_for("winograd_wgrad", IDS[CASES.index(case)])
    x, dy, dw, n_red = _problem(n, c, k, h, w, pre, post, dt, layout, seed, dw_layout)
    g, tx, tdy, tdw = _graph(x, dy, dw, pre, post, mode)
    tdw.set_output(True)
    out = check_engine(
        g,
        {tx: x, tdy: dy},
        [tdw],
        ENGINE,
        n=n_red * SLACK[dt],
        msg=repro(
            "conv_wgrad_winograd",
            [tuple(x.shape), tuple(dy.shape)],
            str(dt),
            seed,
            layout=layout,
            dw_layout=dw_layout,
            mode=mode,
            pre=pre,
            post=post,
        ),
    )
    assert out[tdw].dtype == dt and out[tdw].stride() == dw.stride()


@pytest.mark.parametrize("dt", [torch.float16, torch.bfloat16])
def test_half_inputs_float_dw(dt):
    """Half x and dy, a float32 dw: only DYt and V are rounded to the operand type."""
    x, dy, dw, n_red = _problem(2, 5, 6, 7, 5, (1, 1), (1, 1), torch.float32, "nhwc", 21)
    x, dy = x.to(dt), dy.to(dt)
    g, tx, tdy, tdw = _graph(x, dy, dw, (1, 1), (1, 1), dw_type=cudnn.data_type.FLOAT)
    tdw.set_output(True)
    out = check_engine(g, {tx: x, tdy: dy}, [tdw], ENGINE, dtype=dt, n=n_red * SLACK[dt])
    assert out[tdw].dtype == torch.float32


def test_blend_epilogue():
    """dw = alpha * wgrad + beta * prior (the descriptor API's blend) in bfloat16,
    CONVOLUTION mode: the prior is read at dw's (flipped) taps."""
    dt = torch.bfloat16
    x, dy, dw, n_red = _problem(2, 4, 5, 6, 7, (1, 0), (0, 1), dt, "nhwc", 33)
    prior = _layout(
        torch.randn(5, 4, 3, 3, generator=torch.Generator().manual_seed(34)).to(dt), "nhwc"
    )
    g, tx, tdy, tdw = _graph(
        x,
        dy,
        dw,
        (1, 0),
        (0, 1),
        "CONVOLUTION",
        dw_type=cudnn.data_type.FLOAT,
        intermediate_data_type=cudnn.data_type.FLOAT,
    )
    tp = _tensor(g, prior)
    out = g.add(g.scale(tdw, 0.75), g.scale(tp, -1.5))
    out.set_output(True).set_data_type(TYPES[dt])
    check_engine(g, {tx: x, tdy: dy, tp: prior}, [out], ENGINE, n=n_red * SLACK[dt])


def _split_k_config(g):
    e = WinogradNonfusedWgradEngine()
    for cfg in e.configs(g.op_graph, Target()):
        if cfg.knob_dict["SPLIT_K"] > 1:
            return cfg
    pytest.fail("the matmul engine offers no split-K config for a long reduction")


def test_split_k_gemm_and_determinism():
    """A long reduction (P = N x tiles = 4 x 64) on a split-K GEMM config, against the
    reference, and twice with bitwise-equal results (partials reduce in a fixed order)."""
    x, dy, dw, n_red = _problem(4, 3, 4, 16, 16, (1, 1), (1, 1), torch.float32, "nchw", 41)
    g, tx, tdy, tdw = _graph(x, dy, dw, (1, 1), (1, 1))
    tdw.set_output(True)
    g.validate()
    cfg = _split_k_config(g)
    first = check_engine(
        g, {tx: x, tdy: dy}, [tdw], ENGINE, cfg.knob_dict, n=n_red * SLACK[torch.float32]
    )[tdw]
    assert g.get_plan_name_at_index(1).startswith(WinogradNonfusedWgradEngine.name)
    again = run_plan(g, {tx: x, tdy: dy}, [tdw], 1, float("nan"))[tdw]
    assert torch.equal(first, again)
    assert NumericalNote.NONDETERMINISTIC not in WinogradNonfusedWgradEngine().numerical_notes(
        g.op_graph, cfg
    )


# ---- workspace, notes, cost --------------------------------------------------------------------
def test_workspace_is_the_three_buffers_and_the_gemms():
    x, dy, dw, _ = _problem(2, 5, 7, 6, 9, (1, 1), (1, 1), torch.float16, "nchw", 51)
    g, _, _, tdw = _graph(x, dy, dw, (1, 1), (1, 1))
    tdw.set_output(True)
    g.validate()
    e, target = WinogradNonfusedWgradEngine(), Target()
    cfg = EngineConfig.make(e, **heuristic_knobs(g, ENGINE))
    wp = plan_winograd_wgrad(g.op_graph)
    p = 2 * 3 * 5  # N x ceil(6 / 2) x ceil(9 / 2) tiles
    assert (wp.p, wp.k, wp.c) == (p, 7, 5)
    dyt, v, m = wp.sizes()
    assert dyt >= 16 * p * 7 * 2 and v >= 16 * p * 5 * 2 and m >= 16 * 7 * 5 * 4
    gemm_ws = e._inner.workspace_size(e.gemm_graph(g.op_graph), cfg, target)
    size = e.workspace_size(g.op_graph, cfg, target)
    assert size == dyt + v + m + gemm_ws
    assert e.build(g.op_graph, cfg, target).workspace_size == size


@pytest.mark.parametrize("dt", [torch.float32, torch.float16])
def test_numerical_notes(dt):
    x, dy, dw, _ = _problem(1, 2, 2, 4, 4, (1, 1), (1, 1), dt, "nchw", 61)
    g, *_rest, tdw = _graph(x, dy, dw, (1, 1), (1, 1))
    tdw.set_output(True)
    g.validate()
    notes = WinogradNonfusedWgradEngine().numerical_notes(g.op_graph, None)
    assert NumericalNote.WINOGRAD in notes
    assert (NumericalNote.DOWN_CONVERT_INPUTS in notes) == (dt != torch.float32)
    assert (NumericalNote.TENSOR_CORE in notes) == (dt != torch.float32)


def test_cost_model_grows_with_the_problem():
    """Finite and positive on a device target; more batch (a longer reduction and more
    transform traffic) costs more; the transforms' traffic is on top of the GEMMs'."""
    e = WinogradNonfusedWgradEngine()
    est = []
    for n in (8, 32):
        x = torch.empty(n, 64, 56, 56, dtype=torch.float16)
        dy = torch.empty(n, 64, 56, 56, dtype=torch.float16)
        dw = torch.empty(64, 64, 3, 3, dtype=torch.float16)
        g, *_rest, tdw = _graph(x, dy, dw, (1, 1), (1, 1))
        tdw.set_output(True)
        g.validate()
        cfg = e.configs(g.op_graph, H100)[0]
        t = e.estimate_seconds(g.op_graph, cfg, H100)
        gemm = e._inner.estimate_seconds(e.gemm_graph(g.op_graph), cfg, H100)
        assert math.isfinite(t) and t > gemm > 0
        est.append(t)
    assert est[1] > est[0]


# ---- declines ----------------------------------------------------------------------------------
def _decline_graph(xdims=(1, 4, 6, 6), filt=(3, 3), dt=cudnn.data_type.FLOAT, groups=1, **kw):
    d = len(filt)
    kw = {"padding": [1] * d, "stride": [1] * d, "dilation": [1] * d, **kw}
    g = cudnn.pygraph()
    x = g.tensor(dim=list(xdims), data_type=dt)
    w_dims = (4, xdims[1] // groups) + tuple(filt)
    dy_dims = output_dims(xdims, w_dims, kw["padding"], kw["padding"], kw["stride"], kw["dilation"])
    dy = g.tensor(dim=list(dy_dims), data_type=dt)
    dw = g.conv_wgrad(x, dy, **kw)
    dw.set_dim(list(w_dims)).set_data_type(cudnn.data_type.FLOAT)
    return g, x, dy, dw


DECLINES = [  # (why, graph spec, exact reason)
    ("5x5", dict(filt=(5, 5)), "the Winograd backward filter needs a 3x3 filter, got [5, 5]"),
    ("3x2", dict(filt=(3, 2)), "the Winograd backward filter needs a 3x3 filter, got [3, 2]"),
    (
        "1-D",
        dict(xdims=(1, 4, 6), filt=(3,)),
        "the Winograd backward filter needs a 2-D convolution, got 1-D",
    ),
    (
        "3-D",
        dict(xdims=(1, 4, 4, 4, 4), filt=(3, 3, 3)),
        "the Winograd backward filter needs a 2-D convolution, got 3-D",
    ),
    (
        "stride",
        dict(stride=[2, 1]),
        "the Winograd backward filter needs stride 1, got stride [2, 1]",
    ),
    (
        "dilation",
        dict(dilation=[1, 2]),
        "the Winograd backward filter needs dilation 1, got dilation [1, 2]",
    ),
    ("groups", dict(groups=2), "the Winograd backward filter takes one group, got 2"),
    (
        "double",
        dict(dt=cudnn.data_type.DOUBLE),
        "operand types ['DOUBLE']: one of float, half or bfloat16 for all operands",
    ),
]


@pytest.mark.parametrize("why,spec,reason", DECLINES, ids=[d[0] for d in DECLINES])
def test_declines_with_reason(why, spec, reason):
    g, _, _, dw = _decline_graph(**spec)
    dw.set_output(True)
    g.validate()
    s = WinogradNonfusedWgradEngine().check_support(g.op_graph, Target())
    assert not s.ok and s.reason == reason, s.reason


def test_declines_prologue_and_non_pointwise_epilogue():
    """Nothing fuses before the wgrad (its operands are graph inputs), and only pointwise
    nodes after it."""
    g = cudnn.pygraph()
    x = g.tensor(dim=[1, 4, 6, 6], data_type=cudnn.data_type.FLOAT)
    dy = g.tensor(dim=[1, 4, 6, 6], data_type=cudnn.data_type.FLOAT)
    dw = g.conv_wgrad(g.relu(x), dy, padding=[1, 1])
    dw.set_dim([4, 4, 3, 3]).set_data_type(cudnn.data_type.FLOAT).set_output(True)
    g.validate()
    s = WinogradNonfusedWgradEngine().check_support(g.op_graph, Target())
    assert not s.ok and s.reason == (
        "conv_wgrad operands must be graph inputs (only fprop fuses a pointwise prologue)"
    ), s.reason

    g, _, _, dw = _decline_graph()
    r = g.reduction(dw, cudnn.reduction_mode.ADD)
    r.set_dim([1, 4, 1, 1]).set_data_type(cudnn.data_type.FLOAT).set_output(True)
    g.validate()
    s = WinogradNonfusedWgradEngine().check_support(g.op_graph, Target())
    assert not s.ok and "is not a pointwise epilogue operation" in s.reason, s.reason
