"""The split-reduction backward convolution engines against the float64 reference
(interpreter): conv_dgrad_splitk (cuDNN BWD_DATA_ALGO_0) and conv_wgrad_precomp
(BWD_FILTER_ALGO_3). 1-3-D, groups, depthwise, stride, dilation, asymmetric padding, both
modes, NCHW / NHWC / non-packed layouts, fp32 / fp16 / bf16, SPLIT forced by knobs (more
slices than reduction steps included), epilogues, workspace checks, determinism switch."""

import pytest
import torch
from _util import CONV_TYPES as TYPES
from _util import check_engine, expect_error, heuristic_knobs, repro, seed_for
from _util import graph_tensor as _tensor
from _util import with_layout as _layout

import opendnn.frontend as cudnn
from opendnn.engines.base import Target
from opendnn.engines.conv.split_k.dgrad import SplitKDgradEngine
from opendnn.engines.conv.split_k.wgrad_precomp import PrecompSplitKWgradEngine
from opendnn.errors import BadParamError, Status
from opendnn.ops.conv import output_dims

DGRAD_SPLIT_ID, WGRAD_PRECOMP_ID = SplitKDgradEngine.id, PrecompSplitKWgradEngine.id
H100 = Target("cuda", "H100 (cost model only)", (9, 0), 132, 7.1e14, 5e13, 3e12)

CASES = [  # (N, C, K, in, filt, stride, pre, post, dilation, groups, layout, mode, dtype)
    (2, 4, 6, (11,), (3,), (2,), (1,), (0,), (1,), 2, "nchw", "CROSS_CORRELATION", torch.float32),
    (
        1,
        3,
        5,
        (9, 7),
        (3, 2),
        (2, 1),
        (1, 0),
        (0, 1),
        (1, 2),
        1,
        "nhwc",
        "CONVOLUTION",
        torch.float16,
    ),
    (
        2,
        4,
        4,
        (6, 5),
        (3, 3),
        (1, 1),
        (1, 1),
        (1, 1),
        (1, 1),
        4,
        "strided",
        "CROSS_CORRELATION",
        torch.bfloat16,
    ),
    (
        1,
        2,
        4,
        (5, 6, 4),
        (3, 2, 2),
        (1, 2, 1),
        (1, 0, 1),
        (1, 0, 1),
        (1, 1, 2),
        2,
        "strided",
        "CONVOLUTION",
        torch.float32,
    ),
    (
        1,
        33,
        17,
        (5, 5),
        (1, 1),
        (1, 1),
        (0, 0),
        (0, 0),
        (1, 1),
        1,
        "nhwc",
        "CROSS_CORRELATION",
        torch.float32,
    ),
    (
        2,
        5,
        7,
        (9, 8),
        (3, 3),
        (2, 2),
        (1, 1),
        (0, 1),
        (1, 1),
        1,
        "nchw",
        "CONVOLUTION",
        torch.bfloat16,
    ),
]
IDS = [
    "1d-groups-s2",
    "2d-asym-dil-nhwc-f16",
    "depthwise-strided-bf16",
    "3d-groups-strided",
    "1x1-wide-nhwc",
    "2d-s2-conv-bf16",
]


def _problem(case, seed):
    n, c, k, sp, f, stride, pre, post, dil, groups, layout, mode, dt = case
    torch.manual_seed(seed)
    x = _layout(torch.randn(n, c, *sp).to(dt), layout)
    w = _layout((torch.randn(k, c // groups, *f) * 0.5).to(dt), layout)
    dy = _layout(torch.randn(*output_dims(x.shape, w.shape, pre, post, stride, dil)).to(dt), layout)
    params = dict(
        pre_padding=list(pre),
        post_padding=list(post),
        stride=list(stride),
        dilation=list(dil),
        convolution_mode=cudnn.convolution_mode[mode],
    )
    return x, w, dy, params


def _dgrad_graph(x, w, dy, params, **graph_kw):
    g = cudnn.pygraph(**graph_kw)
    tdy, tw = _tensor(g, dy), _tensor(g, w)
    dx = g.conv_dgrad(tdy, tw, **params)
    dx.set_dim(list(x.shape)).set_stride(list(x.stride())).set_data_type(TYPES[x.dtype])
    return g, tdy, tw, dx


def _wgrad_graph(x, w, dy, params, dw_type=None, **graph_kw):
    g = cudnn.pygraph(**graph_kw)
    tx, tdy = _tensor(g, x), _tensor(g, dy)
    dw = g.conv_wgrad(tx, tdy, **params)
    dw.set_dim(list(w.shape)).set_stride(list(w.stride()))
    dw.set_data_type(TYPES[w.dtype] if dw_type is None else dw_type)  # FLOAT is 0
    return g, tx, tdy, dw


def _knobs(g, engine_id, split):
    g.validate()
    return {**heuristic_knobs(g, engine_id), "SPLIT": split}


@pytest.mark.parametrize("split", [2, 4])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_dgrad_splitk_against_reference(case, split):
    x, w, dy, params = _problem(case, seed_for("dgrad", CASES.index(case), split))
    g, tdy, tw, dx = _dgrad_graph(x, w, dy, params)
    dx.set_output(True)
    n_red = case[2] // case[9] * w[0, 0].numel()
    check_engine(
        g,
        {tdy: dy, tw: w},
        [dx],
        DGRAD_SPLIT_ID,
        _knobs(g, DGRAD_SPLIT_ID, split),
        n=n_red,
        msg=repro(
            "conv_dgrad_splitk",
            [tuple(dy.shape), tuple(w.shape)],
            str(x.dtype),
            0,
            layout=case[10],
            mode=case[11],
            split=split,
        ),
    )


@pytest.mark.parametrize("split", [2, 4])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_wgrad_precomp_against_reference(case, split):
    """fp32 dw accumulates in place (tables-only workspace); fp16 / bf16 dw goes through
    the float32 accumulator and the finishing pass."""
    x, w, dy, params = _problem(case, seed_for("wgrad", CASES.index(case), split))
    g, tx, tdy, dw = _wgrad_graph(x, w, dy, params)
    dw.set_output(True)
    n_red = dy.shape[0] * dy[0, 0].numel()
    check_engine(
        g,
        {tx: x, tdy: dy},
        [dw],
        WGRAD_PRECOMP_ID,
        _knobs(g, WGRAD_PRECOMP_ID, split),
        n=n_red,
        msg=repro(
            "conv_wgrad_precomp",
            [tuple(x.shape), tuple(dy.shape)],
            str(x.dtype),
            0,
            layout=case[10],
            mode=case[11],
            split=split,
        ),
    )


@pytest.mark.parametrize("dt", [torch.float16, torch.bfloat16])
def test_dgrad_splitk_relu_backward_epilogue(dt):
    """DX = relu_backward(dgrad(DY, W), X): the dgrad + drelu fusion in the finishing pass."""
    torch.manual_seed(11)
    x = torch.randn(2, 6, 7, 7, dtype=dt).to(memory_format=torch.channels_last)
    w = (torch.randn(8, 6, 3, 3, dtype=dt) * 0.2).to(memory_format=torch.channels_last)
    dy = torch.randn(2, 8, 7, 7, dtype=dt).to(memory_format=torch.channels_last)
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tdy, tw, tx = _tensor(g, dy), _tensor(g, w), _tensor(g, x)
    dgrad = g.conv_dgrad(tdy, tw, padding=[1, 1])
    dgrad.set_dim(list(x.shape)).set_stride(list(x.stride()))
    out = g.relu_backward(dgrad, tx)
    out.set_output(True).set_data_type(TYPES[dt])
    check_engine(
        g, {tdy: dy, tw: w, tx: x}, [out], DGRAD_SPLIT_ID, _knobs(g, DGRAD_SPLIT_ID, 4), n=72
    )


def test_wgrad_precomp_scale_epilogue_and_workspace_sizes():
    """A scaled dw needs the float32 accumulator after the tables; a plain float32 dw
    (here from half inputs) is accumulated in place and the workspace is the tables only."""
    x, w, dy, params = _problem(CASES[1], 5)
    g, tx, tdy, dw = _wgrad_graph(
        x,
        w,
        dy,
        params,
        dw_type=cudnn.data_type.FLOAT,
        intermediate_data_type=cudnn.data_type.FLOAT,
    )
    out = g.scale(dw, 0.5)
    out.set_output(True).set_data_type(cudnn.data_type.BFLOAT16)
    check_engine(g, {tx: x, tdy: dy}, [out], WGRAD_PRECOMP_ID, _knobs(g, WGRAD_PRECOMP_ID, 4), n=63)
    dw_bytes = 4 * w.numel()
    assert g.get_workspace_size_plan_at_index(1) >= dw_bytes

    g, tx, tdy, dw = _wgrad_graph(x, w, dy, params, dw_type=cudnn.data_type.FLOAT)
    dw.set_output(True)
    check_engine(
        g,
        {tx: x, tdy: dy},
        [dw],
        WGRAD_PRECOMP_ID,
        _knobs(g, WGRAD_PRECOMP_ID, 4),
        dtype=torch.float16,
        n=63,
    )
    tables = (dy[0, 0].numel() + w[0, 0].numel()) * (2 + 2) * 4
    assert 0 < g.get_workspace_size_plan_at_index(1) == -(-tables // 256) * 256


@pytest.mark.parametrize("engine", [DGRAD_SPLIT_ID, WGRAD_PRECOMP_ID])
def test_more_slices_than_reduction_steps(engine):
    """SPLIT=64 on a 1x1 convolution with one reduction step (dgrad) or a few pixels
    (wgrad): the empty slices add nothing and every element is still written."""
    x, w, dy, params = _problem(
        (
            2,
            3,
            5,
            (3, 3),
            (1, 1),
            (1, 1),
            (0, 0),
            (0, 0),
            (1, 1),
            1,
            "nchw",
            "CROSS_CORRELATION",
            torch.float32,
        ),
        9,
    )
    if engine == DGRAD_SPLIT_ID:
        g, ta, tb, out = _dgrad_graph(x, w, dy, params)
        feeds = {ta: dy, tb: w}
    else:
        g, ta, tb, out = _wgrad_graph(x, w, dy, params)
        feeds = {ta: x, tb: dy}
    out.set_output(True)
    check_engine(g, feeds, [out], engine, _knobs(g, engine, 64), n=18)


@pytest.mark.parametrize("engine", [DGRAD_SPLIT_ID, WGRAD_PRECOMP_ID])
def test_workspace_too_small_raises(engine):
    x, w, dy, params = _problem(CASES[0], 3)
    if engine == DGRAD_SPLIT_ID:
        g, ta, tb, out = _dgrad_graph(x, w, dy, params)
        feeds = {ta: dy, tb: w}
    else:
        g, ta, tb, out = _wgrad_graph(x, w, dy, params)
        feeds = {ta: x, tb: dy}
    out.set_output(True)
    g.validate()
    g.create_execution_plan(engine, _knobs(g, engine, 2))
    need = g.get_workspace_size_plan_at_index(0)
    assert need > 0
    buf = torch.empty_strided(out.get_dim(), out.get_stride())
    short = torch.empty(need - 4, dtype=torch.uint8)
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SIZE_INSUFFICIENT,
        lambda: g.execute_plan_at_index({**feeds, out: buf}, short, 0),
        str(need),
    )
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SIZE_INSUFFICIENT,
        lambda: g.execute_plan_at_index({**feeds, out: buf}, None, 0),
    )


def test_marked_nondeterministic_and_deterministic_mode_skips_them(monkeypatch):
    from opendnn import backends

    x, w, dy, params = _problem(CASES[4], 1)

    def plan_names():
        out = {}
        for make, name in [
            (_dgrad_graph, "conv_dgrad_splitk"),
            (_wgrad_graph, "conv_wgrad_precomp"),
        ]:
            g, _, _, t = make(x, w, dy, params)
            t.set_output(True)
            g.build([cudnn.heur_mode.A])
            names = [g.get_plan_name_at_index(i) for i in range(g.get_execution_plan_count())]
            out[name] = [
                (nm, g.get_numerical_notes_for_plan_at_index(i))
                for i, nm in enumerate(names)
                if nm.startswith(name)
            ]
        return out

    found = plan_names()
    for name, plans in found.items():
        assert plans, f"{name} offers no plan in heuristics mode A"
        assert all(cudnn.numerical_note.NONDETERMINISTIC in notes for _, notes in plans)
    monkeypatch.setattr(backends, "deterministic", True)
    assert plan_names() == {"conv_dgrad_splitk": [], "conv_wgrad_precomp": []}


def test_split_choice_follows_the_tile_count():
    """On 132 SMs a small dx (few tiles) gets many slices, a large one none."""

    def first_split(n, c, k, hw):
        x, w = torch.empty(n, c, hw, hw), torch.empty(k, c, 3, 3)
        dy = torch.empty(n, k, hw, hw)
        g, *_, dx = _dgrad_graph(x, w, dy, dict(padding=[1, 1]))
        dx.set_output(True)
        g.validate()
        return SplitKDgradEngine().configs(g.op_graph, H100)[0].knob_dict["SPLIT"]

    assert first_split(1, 64, 256, 7) >= 8
    assert first_split(32, 256, 256, 56) == 1


def test_bad_split_knob_is_declined_with_a_reason():
    x, w, dy, params = _problem(CASES[0], 2)
    g, *_, dx = _dgrad_graph(x, w, dy, params)
    dx.set_output(True)
    g.validate()
    from opendnn.engines.base import EngineConfig

    e = SplitKDgradEngine()
    cfg = EngineConfig.make(e, **_knobs(g, e.id, 3))
    s = e.check_config(g.op_graph, cfg, Target())
    assert not s.ok and "SPLIT=3" in s.reason


def test_wgrad_precomp_declines_more_taps_than_the_grid_holds():
    g = cudnn.pygraph()
    x = g.tensor(dim=[1, 1, 41, 41, 41], data_type=cudnn.data_type.FLOAT)
    dy = g.tensor(dim=[1, 1, 1, 1, 1], data_type=cudnn.data_type.FLOAT)
    dw = g.conv_wgrad(x, dy, padding=[0, 0, 0])
    dw.set_dim([1, 1, 41, 41, 41]).set_output(True)
    g.validate()
    s = PrecompSplitKWgradEngine().check_support(g.op_graph, Target())
    assert not s.ok and "65535" in s.reason
