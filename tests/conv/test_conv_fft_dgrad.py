"""The FFT backward-data engines (conv_dgrad_fft #20, conv_dgrad_fft_tiling #21) against
the float64 reference (interpreter): odd and size-one dims, 1x1 to 7x7 and non-square
filters, asymmetric padding and pre padding above R - 1 (a negative forward padding in
the rewrite), NCHW / NHWC / non-packed, both modes, fp32 / fp16 / bf16, a fused
relu_backward, every TILE, tiles in several chunks, the cost model and workspace of the
rewritten forward problem, and every decline with its reason.

Tolerance: as for the forward FFT (``test_conv_fft``), each dx element is a sum over
every frequency bin and the K channels, so ``_n`` passes K * Fh * Fw (roughly) rather
than the direct reduction K * R * S."""

import pytest
import torch
from _util import CONV_TYPES as TYPES
from _util import check_engine, fresh_plan_caches, repro
from _util import graph_tensor as _tensor
from _util import with_layout as _layout

import opendnn.frontend as cudnn
from opendnn.engines.base import EngineConfig, Target
from opendnn.engines.conv.fft import dgrad as fft_dgrad
from opendnn.engines.conv.fft import engine as fft
from opendnn.engines.conv.fft.dgrad import FftDgradEngine, FftTilingDgradEngine
from opendnn.engines.conv.fft.engine import FftConvEngine, FftTilingConvEngine
from opendnn.enums import NumericalNote

FFT_ID, TILING_ID = FftDgradEngine.id, FftTilingDgradEngine.id
H100 = Target("cuda", "NVIDIA H100 (cost model)", (9, 0), 132, 7.1e14, 5e13, 3e12)

ENGINES = [(FFT_ID, None), (TILING_ID, {"TILE": 8})]
ENGINE_IDS = ["fft", "tiling8"]

CASES = [  # (N, C, K, dx (H, W), (R, S), pre, post, layout, mode)
    (2, 3, 4, (7, 9), (3, 3), (1, 1), (1, 1), "nchw", "CROSS_CORRELATION"),
    (1, 2, 3, (5, 6), (5, 5), (2, 1), (0, 2), "nhwc", "CONVOLUTION"),
    (3, 1, 1, (1, 1), (1, 1), (0, 0), (0, 0), "strided", "CROSS_CORRELATION"),
    (1, 3, 2, (9, 8), (7, 7), (3, 3), (3, 3), "nhwc", "CROSS_CORRELATION"),
    (2, 3, 2, (6, 5), (3, 5), (3, 0), (0, 2), "nchw", "CONVOLUTION"),  # pre 3 > R - 1
    (1, 4, 5, (4, 11), (1, 3), (1, 1), (0, 1), "strided", "CROSS_CORRELATION"),  # pre 1 > 0
]


def _dy_hw(hw, rs, pre, post):
    return tuple(hw[i] + pre[i] + post[i] - rs[i] + 1 for i in range(2))


def _n(k, hw, rs):
    """K times the transform area (padded dy: (H + R - 1) x (W + S - 1), and more)."""
    return k * (hw[0] + 2 * rs[0]) * (hw[1] + 2 * rs[1])


def _dgrad(g, dy, w, dx_like, **kw):
    """DX = conv_dgrad(DY, W) with dx_like's dims and strides (not yet an output)."""
    dx = g.conv_dgrad(dy, w, **kw)
    dx.set_dim(list(dx_like.shape)).set_stride(list(dx_like.stride()))
    return dx


def _graph(
    dx_dims,
    w_dims,
    pre=(0, 0),
    post=(0, 0),
    stride=(1, 1),
    dilation=(1, 1),
    dt=cudnn.data_type.FLOAT,
):
    """A validated dgrad graph (no data): dy's dims follow from dx, w and the padding."""
    nsp = len(dx_dims) - 2
    dy_sp = [
        (dx_dims[2 + i] + pre[i] + post[i] - dilation[i] * (w_dims[2 + i] - 1) - 1) // stride[i] + 1
        for i in range(nsp)
    ]
    g = cudnn.pygraph()
    dy = g.tensor(dim=[dx_dims[0], w_dims[0]] + dy_sp, data_type=dt)
    w = g.tensor(dim=list(w_dims), data_type=dt)
    dx = g.conv_dgrad(
        dy,
        w,
        pre_padding=list(pre),
        post_padding=list(post),
        stride=list(stride),
        dilation=list(dilation),
    )
    dx.set_dim(list(dx_dims)).set_output(True)
    g.validate()
    return g


@pytest.mark.parametrize("case", CASES, ids=[f"c{i}" for i in range(len(CASES))])
@pytest.mark.parametrize("engine", ENGINES, ids=ENGINE_IDS)
def test_fft_dgrad_against_reference(case, engine):
    n, c, k, hw, rs, pre, post, layout, mode = case
    torch.manual_seed(n * 100 + c * 10 + k)
    x = _layout(torch.empty(n, c, *hw), layout)  # dx's layout only
    w = _layout(torch.randn(k, c, *rs), layout)
    dy = _layout(torch.randn(n, k, *_dy_hw(hw, rs, pre, post)), layout)
    g = cudnn.pygraph()
    tdy, tw = _tensor(g, dy), _tensor(g, w)
    dx = _dgrad(
        g,
        tdy,
        tw,
        x,
        pre_padding=list(pre),
        post_padding=list(post),
        convolution_mode=cudnn.convolution_mode[mode],
    )
    dx.set_output(True)
    check_engine(
        g,
        {tdy: dy, tw: w},
        [dx],
        engine[0],
        engine[1],
        n=_n(k, hw, rs),
        msg=repro(
            "conv_dgrad_fft",
            [tuple(dy.shape), tuple(w.shape)],
            "float32",
            0,
            engine=engine,
            layout=layout,
            mode=mode,
            pre=pre,
            post=post,
        ),
    )


@pytest.mark.parametrize("tile", fft.TILES)
def test_fft_dgrad_tiling_every_tile(tile):
    """TILE 8 and 16 cut the 10 x 11 dx into several tiles (6 x 7 / 14 x 15 output
    pixels each for a 3x5 filter), 32 takes it in one."""
    torch.manual_seed(tile)
    hw, rs, pre, post = (10, 11), (3, 5), (2, 1), (1, 3)
    w = torch.randn(2, 1, *rs).to(memory_format=torch.channels_last)
    dy = torch.randn(1, 2, *_dy_hw(hw, rs, pre, post)).to(memory_format=torch.channels_last)
    x = torch.empty(1, 1, *hw).to(memory_format=torch.channels_last)
    g = cudnn.pygraph()
    tdy, tw = _tensor(g, dy), _tensor(g, w)
    dx = _dgrad(
        g,
        tdy,
        tw,
        x,
        pre_padding=list(pre),
        post_padding=list(post),
        convolution_mode=cudnn.convolution_mode.CONVOLUTION,
    )
    dx.set_output(True)
    check_engine(
        g,
        {tdy: dy, tw: w},
        [dx],
        TILING_ID,
        {"TILE": tile},
        n=_n(2, hw, rs),
        msg=repro("conv_dgrad_fft_tiling", [tuple(dy.shape)], "float32", tile, tile=tile),
    )


@pytest.mark.parametrize("dt", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("engine", [(FFT_ID, None), (TILING_ID, {"TILE": 8})], ids=ENGINE_IDS)
def test_fft_dgrad_relu_backward_epilogue_types(dt, engine):
    """DX = relu_backward(dgrad(DY, W), X) in the operand type: the dgrad + drelu fusion
    on the inverse transform's float32 tile."""
    torch.manual_seed(11)
    x = torch.randn(2, 5, 7, 6, dtype=dt).to(memory_format=torch.channels_last)
    w = (torch.randn(4, 5, 3, 3, dtype=dt) * 0.2).to(memory_format=torch.channels_last)
    dy = torch.randn(2, 4, 7, 6, dtype=dt).to(memory_format=torch.channels_last)
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tdy, tw, tx = _tensor(g, dy), _tensor(g, w), _tensor(g, x)
    out = g.relu_backward(_dgrad(g, tdy, tw, x, padding=[1, 1]), tx)
    out.set_output(True).set_data_type(TYPES[dt])
    got = check_engine(
        g,
        {tdy: dy, tw: w, tx: x},
        [out],
        engine[0],
        engine[1],
        n=_n(4, (7, 6), (3, 3)),
        msg=repro("relu_backward(conv_dgrad_fft)", [(2, 4, 7, 6)], str(dt), 11, engine=engine),
    )
    assert got[out].dtype == dt


def test_tiling_in_chunks_of_one_tile(monkeypatch):
    """A budget too small for two tiles: every tile of dx is its own pass."""
    torch.manual_seed(5)
    w, dy = torch.randn(3, 2, 3, 3), torch.randn(1, 3, 10, 5)
    x = torch.empty(1, 2, 9, 5)
    g = cudnn.pygraph()
    tdy, tw = _tensor(g, dy), _tensor(g, w)
    dx = _dgrad(g, tdy, tw, x, pre_padding=[2, 1], post_padding=[1, 1])
    dx.set_output(True)
    g.validate()
    cfg = EngineConfig.make(FftTilingDgradEngine(), TILE=8)
    whole = fft_dgrad.plan_fft_dgrad(g.op_graph, 8, fft.TILING_WORKSPACE_BUDGET)
    monkeypatch.setattr(fft, "TILING_WORKSPACE_BUDGET", 1)
    fresh_plan_caches(monkeypatch)  # plans built before used the budget
    chunked = FftTilingDgradEngine()._plan(g.op_graph, cfg)
    assert whole.chunks == 1 and chunked.chunk == 1 and chunked.chunks == whole.planes == 2
    assert chunked.workspace_bytes < whole.workspace_bytes
    check_engine(g, {tdy: dy, tw: w}, [dx], TILING_ID, {"TILE": 8}, n=_n(3, (9, 5), (3, 3)))


def test_notes_fft_and_down_convert_for_half_types():
    for e in (FftDgradEngine(), FftTilingDgradEngine()):
        for dt, down in [
            (cudnn.data_type.FLOAT, False),
            (cudnn.data_type.HALF, True),
            (cudnn.data_type.BFLOAT16, True),
        ]:
            g = _graph((1, 2, 6, 6), (3, 2, 3, 3), (1, 1), (1, 1), dt=dt).op_graph
            notes = e.numerical_notes(g, e.configs(g, Target())[0])
            assert {NumericalNote.FFT, NumericalNote.TENSOR_CORE} <= notes
            assert (NumericalNote.DOWN_CONVERT_INPUTS in notes) == down


def test_plan_is_the_forward_plan_of_the_rewritten_problem():
    """dgrad of dy [N, K, 20, 18] with w [K, C, 5, 3], padding 2/1, is the forward
    correlation of dy with a [C, K, 5, 3] filter and padding 2/1: same transform sizes,
    tiles, workspace and cost as the forward FFT engines on that graph."""
    dt = cudnn.data_type.HALF
    dg = _graph((4, 6, 20, 18), (8, 6, 5, 3), (2, 1), (2, 1), dt=dt).op_graph
    g = cudnn.pygraph()
    x = g.tensor(dim=[4, 8, 20, 18], data_type=dt)
    w = g.tensor(dim=[6, 8, 5, 3], data_type=dt)
    g.conv_fprop(x, w, padding=[2, 1]).set_output(True)
    g.validate()
    fg = g.op_graph
    for back, fwd in [
        (FftDgradEngine(), FftConvEngine()),
        (FftTilingDgradEngine(), FftTilingConvEngine()),
    ]:
        cfgs = back.configs(dg, H100)
        assert [c.knob_dict for c in cfgs] == [c.knob_dict for c in fwd.configs(fg, H100)]
        for cb in cfgs:
            cf = EngineConfig.make(fwd, **cb.knob_dict)
            pb, pf = back._plan(dg, cb), fwd._plan(fg, cf)
            assert (pb.ax_h, pb.ax_w, pb.tiles, pb.out_tile, pb.chunk) == (
                pf.ax_h,
                pf.ax_w,
                pf.tiles,
                pf.out_tile,
                pf.chunk,
            )
            assert pb.a.geo.pre == (2, 1) and pb.a.geo.in_dims == (20, 18)
            assert back.workspace_size(dg, cb, H100) == fwd.workspace_size(fg, cf, H100)
            assert back.estimate_seconds(dg, cb, H100) == fwd.estimate_seconds(fg, cf, H100)


def _best(graph, engine_ids):
    from opendnn.engines.registry import by_id

    times = []
    for eid in engine_ids:
        e = by_id(eid)
        if e.check_support(graph, H100).ok:
            times += [e.estimate_seconds(graph, cfg, H100) for cfg in e.configs(graph, H100)]
    return min(times)


@pytest.mark.parametrize("dt", [cudnn.data_type.HALF, cudnn.data_type.FLOAT])
def test_cost_model_ranks_fft_last_for_3x3_and_first_for_large_filters(dt):
    gemm = [4, 17, 45]  # dgrad implicit GEMM, split-K dgrad, the channels-last transform
    small = _graph((32, 64, 56, 56), (64, 64, 3, 3), (1, 1), (1, 1), dt=dt).op_graph
    assert _best(small, [FFT_ID, TILING_ID]) > _best(small, gemm)
    large = _graph((8, 64, 64, 64), (64, 64, 15, 15), (7, 7), (7, 7), dt=dt).op_graph
    if dt == cudnn.data_type.FLOAT:  # IEEE float32: the native gathers (CUDA cores)
        assert _best(large, [FFT_ID, TILING_ID]) < _best(large, [4, 17])


def test_registered_after_the_winograd_dgrad_engines_and_directions_kept_apart():
    from opendnn.engines.registry import by_id, engines

    names = [e.name for e in engines()]
    i = names.index("conv_dgrad_winograd_fused")
    assert names[i + 1 : i + 3] == ["conv_dgrad_fft", "conv_dgrad_fft_tiling"]
    assert isinstance(by_id(20), FftDgradEngine) and isinstance(by_id(21), FftTilingDgradEngine)
    dgrad = _graph((1, 2, 6, 6), (3, 2, 3, 3), (1, 1), (1, 1))
    fprop = cudnn.pygraph()
    x = fprop.tensor(dim=[1, 2, 6, 6], data_type=cudnn.data_type.FLOAT)
    w = fprop.tensor(dim=[3, 2, 3, 3], data_type=cudnn.data_type.FLOAT)
    fprop.conv_fprop(x, w, padding=[1, 1]).set_output(True)
    fprop.validate()
    for e in (FftDgradEngine(), FftTilingDgradEngine()):
        assert "one conv_dgrad node" in _reason(e, fprop)
    for e in (FftConvEngine(), FftTilingConvEngine()):
        assert "one conv_fprop node" in _reason(e, dgrad)


# ---- declines, one per rule -------------------------------------------------------------
def _reason(engine, g, config=None):
    if config is not None:
        s = engine.check_config(g.op_graph, config, Target())
    else:
        s = engine.check_support(g.op_graph, Target())
    assert not s.ok
    return s.reason


@pytest.mark.parametrize("engine", [FftDgradEngine(), FftTilingDgradEngine()], ids=ENGINE_IDS)
def test_declines_with_reasons(engine):
    assert "take 2-D convolutions, not 1-D" in _reason(
        engine, _graph((1, 2, 9), (2, 2, 3), (0,), (0,), (1,), (1,))
    )
    assert "take 2-D convolutions, not 3-D" in _reason(
        engine, _graph((1, 2, 5, 5, 5), (2, 2, 3, 3, 3), (1,) * 3, (1,) * 3, (1,) * 3, (1,) * 3)
    )
    assert "FFT needs stride 1, got [2, 1]" in _reason(
        engine, _graph((1, 2, 9, 9), (2, 2, 3, 3), stride=(2, 1))
    )
    assert "FFT needs dilation 1, got [1, 2]" in _reason(
        engine, _graph((1, 2, 9, 9), (2, 2, 3, 3), dilation=(1, 2))
    )
    assert "FFT takes one group, got 2" in _reason(engine, _graph((1, 4, 9, 9), (4, 2, 3, 3)))


def test_fft_declines_images_past_256_and_tiling_takes_them():
    g = _graph((1, 1, 300, 300), (1, 1, 5, 5), (2, 2), (2, 2))
    assert "304x304 exceeds 256x256" in _reason(FftDgradEngine(), g)
    assert FftTilingDgradEngine().check_support(g.op_graph, Target()).ok


def test_tiling_declines_filters_larger_than_the_tile():
    g = _graph((1, 1, 40, 40), (1, 1, 33, 33), (16, 16), (16, 16))
    assert "filter 33x33 does not fit a 32x32 FFT tile" in _reason(FftTilingDgradEngine(), g)
    assert FftDgradEngine().check_support(g.op_graph, Target()).ok
    g = _graph((1, 1, 20, 20), (1, 1, 9, 9), (4, 4), (4, 4))
    tiling = FftTilingDgradEngine()
    assert "filter 9x9 does not fit a 8x8 FFT tile (at most 7x7)" in _reason(
        tiling, g, EngineConfig.make(tiling, TILE=8)
    )
    assert sorted(c.knob_dict["TILE"] for c in tiling.configs(g.op_graph, Target())) == [16, 32]
