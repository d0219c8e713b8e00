"""The FFT convolution engines (conv_fft #13, conv_fft_tiling #14) against the float64
reference (interpreter): odd and size-one dims, 1x1 to 7x7 filters, asymmetric padding,
NCHW / NHWC / non-packed, both modes, fp32 / fp16 / bf16, a fused bias + relu, tiles in
several chunks, workspace and cost-model properties, and every decline with its reason.

Tolerance: an FFT output is a sum over every frequency bin and channel, so its rounding
grows with C * Fh * Fw rather than the direct reduction C * R * S; ``_n`` passes that
length to the tolerance."""

import pytest
import torch
from _util import check_engine, fresh_plan_caches, repro
from _util import graph_tensor as _tensor
from _util import with_layout as _layout

import opendnn.frontend as cudnn
from opendnn.engines.base import EngineConfig, Target
from opendnn.engines.conv.fft import engine as fft
from opendnn.engines.conv.fft.engine import FftConvEngine, FftTilingConvEngine
from opendnn.enums import NumericalNote

FFT_ID, TILING_ID = FftConvEngine.id, FftTilingConvEngine.id
H100 = Target("cuda", "NVIDIA H100 (cost model)", (9, 0), 132, 7.1e14, 5e13, 3e12)

# engine id, knobs: the whole-image FFT, and 8x8 tiles so small images span several tiles
ENGINES = [(FFT_ID, None), (TILING_ID, {"TILE": 8})]
ENGINE_IDS = ["fft", "tiling8"]

CASES = [  # (N, C, K, (H, W), (R, S), pre, post, layout, mode)
    (2, 3, 4, (7, 9), (3, 3), (1, 1), (1, 1), "nchw", "CROSS_CORRELATION"),
    (1, 2, 3, (5, 6), (5, 5), (2, 1), (0, 2), "nhwc", "CONVOLUTION"),
    (3, 1, 1, (1, 1), (1, 1), (0, 0), (0, 0), "nchw", "CROSS_CORRELATION"),
    (1, 3, 2, (9, 8), (7, 7), (3, 3), (3, 3), "strided", "CONVOLUTION"),
    (2, 5, 3, (6, 1), (3, 1), (1, 0), (1, 0), "nhwc", "CROSS_CORRELATION"),
    (1, 4, 5, (4, 11), (1, 3), (0, 1), (0, 1), "strided", "CROSS_CORRELATION"),
]


def _n(c, hw, rs, pre, post):
    return c * (hw[0] + pre[0] + post[0] + rs[0]) * (hw[1] + pre[1] + post[1] + rs[1])


def _graph(
    shape_x,
    shape_w,
    pre=(0, 0),
    post=(0, 0),
    stride=(1, 1),
    dilation=(1, 1),
    dt=cudnn.data_type.FLOAT,
):
    g = cudnn.pygraph()
    x = g.tensor(dim=list(shape_x), data_type=dt)
    w = g.tensor(dim=list(shape_w), data_type=dt)
    g.conv_fprop(
        x,
        w,
        pre_padding=list(pre),
        post_padding=list(post),
        stride=list(stride),
        dilation=list(dilation),
    ).set_output(True)
    g.validate()
    return g


@pytest.mark.parametrize("case", CASES, ids=[f"c{i}" for i in range(len(CASES))])
@pytest.mark.parametrize("engine", ENGINES, ids=ENGINE_IDS)
def test_fft_against_reference(case, engine):
    n, c, k, hw, rs, pre, post, layout, mode = case
    torch.manual_seed(n * 100 + c * 10 + k)
    x = _layout(torch.randn(n, c, *hw), layout)
    w = _layout(torch.randn(k, c, *rs), layout)
    g = cudnn.pygraph()
    tx, tw = _tensor(g, x), _tensor(g, w)
    y = g.conv_fprop(
        tx,
        tw,
        pre_padding=list(pre),
        post_padding=list(post),
        convolution_mode=cudnn.convolution_mode[mode],
    )
    y.set_output(True)
    check_engine(
        g,
        {tx: x, tw: w},
        [y],
        engine[0],
        engine[1],
        n=_n(c, hw, rs, pre, post),
        msg=repro(
            "conv_fft",
            [tuple(x.shape), tuple(w.shape)],
            "float32",
            0,
            engine=engine,
            layout=layout,
            mode=mode,
        ),
    )


@pytest.mark.parametrize("dt", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize(
    "engine", ENGINES + [(TILING_ID, {"TILE": 16})], ids=ENGINE_IDS + ["tiling16"]
)
def test_fft_bias_relu_epilogue_types(dt, engine):
    torch.manual_seed(7)
    x = torch.randn(2, 6, 9, 7, dtype=dt).to(memory_format=torch.channels_last)
    w = (torch.randn(5, 6, 5, 3, dtype=dt) * 0.2).to(memory_format=torch.channels_last)
    b = torch.randn(1, 5, 1, 1, dtype=dt)
    g = cudnn.pygraph(
        intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT
    )
    tx, tw, tb = _tensor(g, x), _tensor(g, w), _tensor(g, b)
    y = g.relu(g.bias(g.conv_fprop(tx, tw, padding=[2, 1]), tb))
    y.set_output(True)
    out = check_engine(
        g,
        {tx: x, tw: w, tb: b},
        [y],
        engine[0],
        engine[1],
        n=_n(6, (9, 7), (5, 3), (2, 1), (2, 1)),
        msg=repro("relu(conv_fft+bias)", [(2, 6, 9, 7)], str(dt), 7, engine=engine),
    )
    assert out[y].dtype == dt


def test_tiling_in_chunks_of_one_tile(monkeypatch):
    """With a workspace budget too small for two tiles, every tile is its own pass: the
    chunk loop (P0) must still cover the image exactly once, with less workspace."""
    torch.manual_seed(5)
    x, w = torch.randn(2, 3, 10, 7), torch.randn(4, 3, 3, 3)
    g = cudnn.pygraph()
    tx, tw = _tensor(g, x), _tensor(g, w)
    y = g.conv_fprop(tx, tw, padding=[1, 1])
    y.set_output(True)
    g.validate()
    cfg = EngineConfig.make(FftTilingConvEngine(), TILE=8)
    whole = fft.plan_fft(g.op_graph, 8, fft.TILING_WORKSPACE_BUDGET)
    monkeypatch.setattr(fft, "TILING_WORKSPACE_BUDGET", 1)
    fresh_plan_caches(monkeypatch)  # plans built before used the budget
    chunked = FftTilingConvEngine()._plan(g.op_graph, cfg)
    assert whole.chunks == 1 and chunked.chunk == 1 and chunked.chunks == whole.planes == 8
    assert chunked.workspace_bytes < whole.workspace_bytes
    check_engine(
        g, {tx: x, tw: w}, [y], TILING_ID, {"TILE": 8}, n=_n(3, (10, 7), (3, 3), (1, 1), (1, 1))
    )


def test_tiling_needs_far_less_workspace_for_large_images():
    g = _graph((1, 32, 240, 240), (32, 32, 5, 5), (2, 2), (2, 2)).op_graph
    whole = FftConvEngine()
    tiled = FftTilingConvEngine()
    assert whole.check_support(g, Target()).ok and tiled.check_support(g, Target()).ok
    ws_whole = whole.workspace_size(g, whole.configs(g, Target())[0], Target())
    ws_tiled = tiled.workspace_size(g, EngineConfig.make(tiled, TILE=32), Target())
    assert ws_tiled * 4 < ws_whole, (ws_tiled, ws_whole)


def test_notes_fft_and_down_convert_for_half_types():
    e = FftConvEngine()
    for dt, down in [
        (cudnn.data_type.FLOAT, False),
        (cudnn.data_type.HALF, True),
        (cudnn.data_type.BFLOAT16, True),
    ]:
        g = _graph((1, 2, 6, 6), (2, 2, 3, 3), dt=dt).op_graph
        notes = e.numerical_notes(g, e.configs(g, Target())[0])
        assert NumericalNote.FFT in notes
        assert (NumericalNote.DOWN_CONVERT_INPUTS in notes) == down


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
    # implicit GEMM, precomputed-index implicit GEMM, the channels-last transform (NCHW)
    gemm = [3, 11, 44]
    small = _graph((32, 64, 56, 56), (64, 64, 3, 3), (1, 1), (1, 1), dt=dt).op_graph
    assert _best(small, [FFT_ID, TILING_ID]) > _best(small, gemm)
    large = _graph((8, 64, 64, 64), (64, 64, 15, 15), (7, 7), (7, 7), dt=dt).op_graph
    if dt == cudnn.data_type.FLOAT:  # IEEE float32: the native gathers (CUDA cores)
        assert _best(large, [FFT_ID, TILING_ID]) < _best(large, [3, 11])


# ---- declines, one per rule -------------------------------------------------------------
def _reason(engine, g, config=None):
    if config is not None:
        s = engine.check_config(g.op_graph, config, Target())
    else:
        s = engine.check_support(g.op_graph, Target())
    assert not s.ok
    return s.reason


@pytest.mark.parametrize("engine", [FftConvEngine(), FftTilingConvEngine()], ids=ENGINE_IDS)
def test_declines_with_reasons(engine):
    g = cudnn.pygraph()
    x = g.tensor(dim=[1, 2, 9], data_type=cudnn.data_type.FLOAT)
    w = g.tensor(dim=[2, 2, 3], data_type=cudnn.data_type.FLOAT)
    g.conv_fprop(x, w).set_output(True)
    g.validate()
    assert "2-D" in _reason(engine, g)
    assert "stride 1" in _reason(engine, _graph((1, 2, 9, 9), (2, 2, 3, 3), stride=(2, 1)))
    assert "dilation 1" in _reason(engine, _graph((1, 2, 9, 9), (2, 2, 3, 3), dilation=(1, 2)))
    assert "one group" in _reason(engine, _graph((1, 4, 9, 9), (4, 2, 3, 3)))


@pytest.mark.parametrize("engine", [FftConvEngine(), FftTilingConvEngine()], ids=ENGINE_IDS)
def test_declines_int8_and_prologue(engine):
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    x = g.tensor(dim=[1, 4, 6, 6], stride=[144, 1, 24, 4], data_type=cudnn.data_type.INT8)
    w = g.tensor(dim=[4, 4, 3, 3], stride=[36, 1, 12, 4], data_type=cudnn.data_type.INT8)
    y = g.scale(g.conv_fprop(x, w), 0.5)
    y.set_output(True).set_data_type(cudnn.data_type.INT8)
    g.validate()
    assert "float, half or bfloat16" in _reason(engine, g)
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    x = g.tensor(dim=[1, 4, 6, 6], data_type=cudnn.data_type.FLOAT)
    w = g.tensor(dim=[4, 4, 3, 3], data_type=cudnn.data_type.FLOAT)
    g.conv_fprop(g.relu(x), w).set_output(True)
    g.validate()
    assert "prologue" in _reason(engine, g)


def test_fft_declines_images_past_256_and_tiling_takes_them():
    g = _graph((1, 1, 300, 300), (1, 1, 5, 5))
    assert "exceeds 256x256" in _reason(FftConvEngine(), g)
    assert FftTilingConvEngine().check_support(g.op_graph, Target()).ok


def test_tiling_declines_filters_larger_than_the_tile():
    g = _graph((1, 1, 40, 40), (1, 1, 33, 33))
    assert "does not fit a 32x32 FFT tile" in _reason(FftTilingConvEngine(), g)
    assert FftConvEngine().check_support(g.op_graph, Target()).ok
    g = _graph((1, 1, 20, 20), (1, 1, 9, 9))
    tiling = FftTilingConvEngine()
    assert "at most 7x7" in _reason(tiling, g, EngineConfig.make(tiling, TILE=8))
    assert [c.knob_dict["TILE"] for c in tiling.configs(g.op_graph, Target())] in (
        [16, 32],
        [32, 16],
    )
