"""Fused Winograd forward (engine 15) and Winograd backward data (16 non-fused, 18 fused)
against the float64 reference, through the graph API with NaN-poisoned outputs: odd and
1x1 images (partial tiles), batch 1 and 3, channel counts across block boundaries, pad
0-3 and asymmetric padding, NCHW / NHWC / non-packed, both modes, fp32 / fp16 / bf16,
fused epilogues, and one decline per rule.

Tolerances: ``tol`` scales with sqrt(n); a direct 3x3 convolution reduces over n = 9 C
terms. Winograd rounds more: V = B^T d B sums four inputs (up to 4 |d|), U = G g G^T up
to nine taps (up to 2.25 |g|), and the output transform adds nine products back with
signs, so each rounding is an ulp of a value several times larger than the output's
terms. In float32 those are float32 roundings (n x 4, i.e. twice a direct convolution's
tolerance, as the non-fused engine's test). For half types V and U are also rounded to
the operand type before the dot, where a direct convolution's operands are exact
(n x 16, four times the tolerance)."""

import pytest
import torch
from _util import CONV_TYPES as TYPES
from _util import check_engine, repro
from _util import graph_tensor as _tensor
from _util import with_layout as _layout

import opendnn.frontend as cudnn
from opendnn.engines.base import Target
from opendnn.engines.conv.winograd.dgrad import (
    WinogradFusedDgradEngine,
    WinogradNonfusedDgradEngine,
)
from opendnn.engines.conv.winograd.fused import WinogradFusedEngine
from opendnn.enums import NumericalNote

FUSED, DGRAD_NONFUSED, DGRAD_FUSED = (
    WinogradFusedEngine.id,
    WinogradNonfusedDgradEngine.id,
    WinogradFusedDgradEngine.id,
)
SLACK = {torch.float32: 4, torch.float16: 16, torch.bfloat16: 16}


def _n(channels: int, dt) -> int:
    return 9 * channels * SLACK[dt]


def _mode(m):
    return cudnn.convolution_mode[m]


# (N, C, K, H, W, pre, post)
FWD_SHAPES = [
    (1, 3, 5, 5, 7, (1, 1), (1, 1)),  # odd image: partial tiles on both axes
    (3, 19, 20, 6, 5, (0, 0), (0, 0)),  # batch 3, two channel blocks, two K blocks, pad 0
    (1, 2, 3, 1, 1, (1, 1), (1, 1)),  # 1x1 image: one output pixel
    (2, 4, 6, 4, 6, (2, 2), (2, 2)),  # pad 2: the border tiles read only padding
    (1, 5, 4, 7, 6, (1, 2), (0, 1)),  # asymmetric pre/post padding
]
FWD_VARIANTS = [
    ("nchw", "CROSS_CORRELATION"),
    ("nhwc", "CONVOLUTION"),
    ("strided", "CROSS_CORRELATION"),
]


@pytest.mark.parametrize("shape", FWD_SHAPES, ids=[f"s{i}" for i in range(len(FWD_SHAPES))])
@pytest.mark.parametrize("layout,mode", FWD_VARIANTS, ids=[v[0] for v in FWD_VARIANTS])
def test_fused_fprop_against_reference(shape, layout, mode):
    n, c, k, h, w_, pre, post = shape
    torch.manual_seed(n * 1000 + c * 100 + h * 10 + pre[0])
    x = _layout(torch.randn(n, c, h, w_), layout)
    w = _layout(torch.randn(k, c, 3, 3), layout)
    g = cudnn.pygraph()
    tx, tw = _tensor(g, x), _tensor(g, w)
    y = g.conv_fprop(
        tx, tw, pre_padding=list(pre), post_padding=list(post), convolution_mode=_mode(mode)
    )
    y.set_output(True)
    check_engine(
        g,
        {tx: x, tw: w},
        [y],
        FUSED,
        n=_n(c, torch.float32),
        msg=repro(
            "winograd_fused",
            [tuple(x.shape)],
            "float32",
            0,
            layout=layout,
            mode=mode,
            pre=pre,
            post=post,
        ),
    )


KNOB_VARIANTS = [
    dict(FILTER_IN_REGISTERS=1),  # one kernel, no workspace
    dict(PASSES=4, BLOCK_K=32),  # four sweeps over C
    dict(FILTER_IN_REGISTERS=1, PASSES=4, BLOCK_P=64, num_warps=4),
]


@pytest.mark.parametrize("knobs", KNOB_VARIANTS, ids=["in_registers", "passes4", "both"])
@pytest.mark.parametrize("mode", ["CROSS_CORRELATION", "CONVOLUTION"])
def test_fused_fprop_knob_variants(knobs, mode):
    torch.manual_seed(5)
    x = torch.randn(2, 19, 5, 6)
    w = torch.randn(20, 19, 3, 3)
    g = cudnn.pygraph()
    tx, tw = _tensor(g, x), _tensor(g, w)
    y = g.conv_fprop(tx, tw, padding=[1, 1], convolution_mode=_mode(mode))
    y.set_output(True)
    g.validate()
    full = {**WinogradFusedEngine().configs(g.op_graph, Target())[0].knob_dict, **knobs}
    check_engine(
        g,
        {tx: x, tw: w},
        [y],
        FUSED,
        full,
        n=_n(19, torch.float32),
        msg=repro("winograd_fused", [(2, 19, 5, 6)], "float32", 5, knobs=knobs),
    )
    ws = WinogradFusedEngine().workspace_size(g.op_graph, _config(full), Target())
    assert (ws == 0) == bool(full["FILTER_IN_REGISTERS"])


def _config(knobs):
    from opendnn.engines.base import EngineConfig

    return EngineConfig.make(WinogradFusedEngine(), **knobs)


@pytest.mark.parametrize("dt", [torch.float32, torch.float16, torch.bfloat16])
def test_fused_fprop_bias_relu_epilogue_types(dt):
    """relu(conv(x) + bias) in the output type: the epilogue runs on each of a tile's
    four pixels after A^T M A."""
    torch.manual_seed(7)
    x = torch.randn(2, 18, 7, 5, dtype=dt).to(memory_format=torch.channels_last)
    w = (torch.randn(17, 18, 3, 3, dtype=dt) * 0.2).to(memory_format=torch.channels_last)
    b = torch.randn(1, 17, 1, 1, dtype=dt)
    g = cudnn.pygraph(
        intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT
    )
    tx, tw, tb = _tensor(g, x), _tensor(g, w), _tensor(g, b)
    y = g.relu(g.bias(g.conv_fprop(tx, tw, padding=[1, 1]), tb))
    y.set_output(True)
    out = check_engine(
        g,
        {tx: x, tw: w, tb: b},
        [y],
        FUSED,
        n=_n(18, dt),
        msg=repro("relu(winograd+bias)", [(2, 18, 7, 5)], str(dt), 7),
    )
    assert out[y].dtype == dt
    notes = WinogradFusedEngine().numerical_notes(g.op_graph, None)
    assert NumericalNote.WINOGRAD in notes
    assert (NumericalNote.DOWN_CONVERT_INPUTS in notes) == (dt != torch.float32)


# (N, C, K, H, W, pre, post, layout, mode)
DGRAD_CASES = [
    (2, 5, 4, 6, 7, (1, 1), (1, 1), "nhwc", "CROSS_CORRELATION"),
    (1, 3, 18, 5, 5, (0, 2), (2, 0), "nchw", "CONVOLUTION"),  # asymmetric, 2 K blocks
    (3, 17, 3, 4, 3, (3, 0), (0, 1), "strided", "CROSS_CORRELATION"),  # pre 3: pad' = -1
]


@pytest.mark.parametrize("case", DGRAD_CASES, ids=[f"d{i}" for i in range(len(DGRAD_CASES))])
@pytest.mark.parametrize("engine", [DGRAD_NONFUSED, DGRAD_FUSED], ids=["nonfused", "fused"])
def test_dgrad_against_reference(case, engine):
    n, c, k, h, w_, pre, post, layout, mode = case
    torch.manual_seed(n * 100 + c * 10 + k)
    x = _layout(torch.randn(n, c, h, w_), layout)
    w = _layout(torch.randn(k, c, 3, 3), layout)
    dy = _layout(torch.randn(n, k, h + pre[0] + post[0] - 2, w_ + pre[1] + post[1] - 2), layout)
    g = cudnn.pygraph()
    tdy, tw = _tensor(g, dy), _tensor(g, w)
    dx = g.conv_dgrad(
        tdy, tw, pre_padding=list(pre), post_padding=list(post), convolution_mode=_mode(mode)
    )
    dx.set_dim(list(x.shape)).set_stride(list(x.stride())).set_output(True)
    check_engine(
        g,
        {tdy: dy, tw: w},
        [dx],
        engine,
        n=_n(k, torch.float32),
        msg=repro(
            "conv_dgrad_winograd",
            [tuple(dy.shape), tuple(w.shape)],
            "float32",
            0,
            engine=engine,
            layout=layout,
            mode=mode,
        ),
    )


@pytest.mark.parametrize("dt", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("engine", [DGRAD_NONFUSED, DGRAD_FUSED], ids=["nonfused", "fused"])
def test_dgrad_relu_backward_epilogue(dt, engine):
    """DX = relu_backward(dgrad(DY, W), X) in half types: the dgrad + drelu fusion."""
    torch.manual_seed(11)
    x = torch.randn(2, 6, 5, 7, dtype=dt).to(memory_format=torch.channels_last)
    w = (torch.randn(8, 6, 3, 3, dtype=dt) * 0.2).to(memory_format=torch.channels_last)
    dy = torch.randn(2, 8, 5, 7, dtype=dt).to(memory_format=torch.channels_last)
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tdy, tw, tx = _tensor(g, dy), _tensor(g, w), _tensor(g, x)
    dgrad = g.conv_dgrad(tdy, tw, padding=[1, 1])
    dgrad.set_dim(list(x.shape)).set_stride(list(x.stride()))
    out = g.relu_backward(dgrad, tx)
    out.set_output(True).set_data_type(TYPES[dt])
    check_engine(g, {tdy: dy, tw: w, tx: x}, [out], engine, n=_n(8, dt))


# ---- declines ------------------------------------------------------------------------------
def _fprop_graph(xdims=(1, 4, 8, 8), wdims=(4, 4, 3, 3), dt=cudnn.data_type.FLOAT, **kw):
    g = cudnn.pygraph()
    x = g.tensor(dim=list(xdims), data_type=dt)
    w = g.tensor(dim=list(wdims), data_type=dt)
    return g, x, w, kw


DECLINES = [  # (why, graph builder, expected words in the reason)
    ("5x5", dict(wdims=(4, 4, 5, 5)), "3x3"),
    ("1-D", dict(xdims=(1, 4, 8), wdims=(4, 4, 3), padding=[1], stride=[1], dilation=[1]), "2-D"),
    ("stride", dict(stride=[2, 2]), "stride 1"),
    ("dilation", dict(dilation=[2, 2]), "dilation 1"),
    ("groups", dict(wdims=(4, 2, 3, 3)), "one group"),
    ("int8", dict(dt=cudnn.data_type.INT8), "float, half or bfloat16"),
]


@pytest.mark.parametrize("why,spec,words", DECLINES, ids=[d[0] for d in DECLINES])
def test_fused_fprop_declines_with_reason(why, spec, words):
    spec = dict(spec)
    g, x, w, kw = _fprop_graph(**spec)
    y = g.conv_fprop(x, w, **kw)
    y.set_output(True)
    if why == "int8":
        y.set_data_type(cudnn.data_type.FLOAT)
    g.validate()
    s = WinogradFusedEngine().check_support(g.op_graph, Target())
    assert not s.ok and words in s.reason, s.reason


def test_fused_fprop_declines_prologue_and_genstats():
    g, x, w, _ = _fprop_graph()
    g.conv_fprop(g.relu(x), w, padding=[1, 1]).set_output(True)
    g.validate()
    s = WinogradFusedEngine().check_support(g.op_graph, Target())
    assert not s.ok and "prologue" in s.reason, s.reason
    g, x, w, _ = _fprop_graph()
    y = g.conv_fprop(x, w, padding=[1, 1])
    y.set_output(True)
    s_, q = g.genstats(y)
    s_.set_output(True)
    q.set_output(True)
    g.validate()
    s = WinogradFusedEngine().check_support(g.op_graph, Target())
    assert not s.ok and "statistics" in s.reason, s.reason


@pytest.mark.parametrize("engine", [WinogradNonfusedDgradEngine, WinogradFusedDgradEngine])
def test_dgrad_declines_with_reasons(engine):
    for wdims, stride, dy_hw, words in [
        ((4, 4, 5, 5), 1, 4, "3x3"),
        ((4, 4, 3, 3), 2, 3, "stride 1"),
    ]:
        g = cudnn.pygraph()
        dy = g.tensor(dim=[1, 4, dy_hw, dy_hw], data_type=cudnn.data_type.FLOAT)
        w = g.tensor(dim=list(wdims), data_type=cudnn.data_type.FLOAT)
        dx = g.conv_dgrad(dy, w, stride=[stride, stride])
        dx.set_dim([1, 4, 8, 8]).set_output(True)
        g.validate()
        s = engine().check_support(g.op_graph, Target())
        assert not s.ok and words in s.reason, s.reason


def test_cuda_config_check_bounds_the_accumulator_registers():
    g, x, w, _ = _fprop_graph()
    g.conv_fprop(x, w, padding=[1, 1]).set_output(True)
    g.validate()
    h100 = Target("cuda", "H100", (9, 0), 132, 7.1e14, 5e13, 3e12)
    e = WinogradFusedEngine()
    assert all(e.check_config(g.op_graph, c, h100).ok for c in e.configs(g.op_graph, h100))
    s = e.check_config(
        g.op_graph,
        _config(
            dict(BLOCK_P=32, BLOCK_K=32, BLOCK_C=16, num_warps=8, FILTER_IN_REGISTERS=0, PASSES=1)
        ),
        h100,
    )
    assert not s.ok and "registers per thread" in s.reason
