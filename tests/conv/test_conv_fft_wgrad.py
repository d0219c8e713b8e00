"""The FFT backward-filter engines (conv_wgrad_fft #22, conv_wgrad_fft_tiling #23) against
the float64 reference (interpreter): odd and size-one dims, 1x1 / 3x3 / 3x5 / 5x5 filters,
asymmetric padding, NCHW / NHWC / non-packed x, dy and dw, both modes, fp32 / fp16 / bf16,
N = 1 and N > 1, every TILE, planes in several chunks (a full and a partial last one), a
fused epilogue, determinism, workspace and cost-model properties, and every decline with
its reason.

Tolerance: dw is a sum over N * Ho * Wo products, but an FFT result is a sum over every
plane and frequency bin, so its rounding grows with N * Fh * Fw; ``_n`` passes that
length (with the padded extents standing in for Fh, Fw) to the tolerance."""

import pytest
import torch
from _util import CONV_TYPES as TYPES
from _util import REFERENCE_NAME, check_engine, fresh_plan_caches, repro, seed_for
from _util import graph_tensor as _tensor
from _util import with_layout as _layout

import opendnn.frontend as cudnn
from opendnn.engines.base import EngineConfig, Target
from opendnn.engines.conv.fft import engine as fft
from opendnn.engines.conv.fft import wgrad as fft_wgrad
from opendnn.engines.conv.fft.wgrad import FftTilingWgradEngine, FftWgradEngine
from opendnn.enums import NumericalNote
from opendnn.ops.conv import output_dims

FFT_ID, TILING_ID = FftWgradEngine.id, FftTilingWgradEngine.id
H100 = Target("cuda", "NVIDIA H100 (cost model)", (9, 0), 132, 7.1e14, 5e13, 3e12)

# engine id, knobs: the whole-image FFT, and 8x8 tiles so small images span several tiles
ENGINES = [(FFT_ID, None), (TILING_ID, {"TILE": 8})]
ENGINE_IDS = ["fft", "tiling8"]

CASES = [  # (N, C, K, (H, W), (R, S), pre, post, layout, mode, dtype)
    (2, 3, 4, (7, 9), (3, 3), (1, 1), (1, 1), "nchw", "CROSS_CORRELATION", torch.float32),
    (1, 2, 3, (6, 7), (3, 5), (2, 1), (0, 2), "nhwc", "CONVOLUTION", torch.float16),
    (3, 2, 2, (5, 5), (1, 1), (0, 0), (0, 0), "nchw", "CONVOLUTION", torch.bfloat16),
    (2, 2, 3, (8, 6), (5, 5), (2, 2), (1, 3), "strided", "CROSS_CORRELATION", torch.float32),
    (1, 3, 2, (1, 9), (1, 3), (0, 1), (0, 1), "nhwc", "CROSS_CORRELATION", torch.float32),
    (2, 1, 1, (9, 8), (5, 3), (1, 0), (3, 2), "strided", "CONVOLUTION", torch.float16),
]
CASE_IDS = [
    "3x3-nchw",
    "3x5-asym-nhwc-f16-conv",
    "1x1-bf16-conv",
    "5x5-asym-strided",
    "1x3-h1-nhwc",
    "5x3-asym-strided-f16-conv",
]


def _n(n, hw, rs, pre, post):
    return n * (hw[0] + pre[0] + post[0] + rs[0]) * (hw[1] + pre[1] + post[1] + rs[1])


def _problem(case, seed):
    """(graph, feeds, dw) for ``case``: x and dy random, dw laid out like x."""
    n, c, k, hw, rs, pre, post, layout, mode, dt = case
    torch.manual_seed(seed)
    x = _layout(torch.randn(n, c, *hw).to(dt), layout)
    dy_dims = output_dims(x.shape, (k, c) + rs, pre, post, (1, 1), (1, 1))
    dy = _layout(torch.randn(*dy_dims).to(dt), layout)
    w = _layout(torch.empty(k, c, *rs, dtype=dt), layout)  # dw's layout
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tx, tdy = _tensor(g, x), _tensor(g, dy)
    dw = g.conv_wgrad(
        tx,
        tdy,
        pre_padding=list(pre),
        post_padding=list(post),
        convolution_mode=cudnn.convolution_mode[mode],
    )
    dw.set_dim(list(w.shape)).set_stride(list(w.stride())).set_data_type(TYPES[dt])
    return g, {tx: x, tdy: dy}, dw


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
@pytest.mark.parametrize("engine", ENGINES, ids=ENGINE_IDS)
def test_fft_wgrad_against_reference(case, engine):
    g, feeds, dw = _problem(case, seed_for("fft_wgrad", CASES.index(case)))
    dw.set_output(True)
    n, c, k, hw, rs, pre, post, layout, mode, dt = case
    check_engine(
        g,
        feeds,
        [dw],
        engine[0],
        engine[1],
        n=_n(n, hw, rs, pre, post),
        msg=repro(
            "conv_wgrad_fft",
            [(n, c) + hw, (k, c) + rs],
            str(dt),
            0,
            engine=engine,
            layout=layout,
            mode=mode,
            pre=pre,
            post=post,
        ),
    )


@pytest.mark.parametrize("tile", fft.TILES)
def test_every_tile_over_several_tiles(tile):
    """x 20x33, 3x5 filter: 4x9 tiles of 8, 2x3 of 16, 1x2 of 32 (the last ones partial)."""
    case = (1, 2, 3, (20, 33), (3, 5), (1, 2), (1, 2), "nhwc", "CROSS_CORRELATION", torch.float32)
    g, feeds, dw = _problem(case, seed_for("fft_wgrad_tile", tile))
    dw.set_output(True)
    g.validate()
    p = FftTilingWgradEngine()._plan(
        g.op_graph, EngineConfig.make(FftTilingWgradEngine(), TILE=tile)
    )
    assert p.tiles == {8: (4, 9), 16: (2, 3), 32: (1, 2)}[tile]
    check_engine(
        g, feeds, [dw], TILING_ID, {"TILE": tile}, n=_n(1, (20, 33), (3, 5), (1, 2), (1, 2))
    )


@pytest.mark.parametrize("engine", ENGINES, ids=ENGINE_IDS)
def test_planes_in_chunks_full_and_partial(engine, monkeypatch):
    """With a budget of one plane, every plane is its own pass; with two planes' worth of 3
    images (five of 3 x 2 x 2 tiles) the last chunk is partial, its empty slots zeros. The
    chunks add into the spectrum in order: two runs agree bit for bit."""
    case = (3, 2, 3, (7, 9), (3, 3), (1, 1), (1, 1), "nchw", "CONVOLUTION", torch.float32)
    g, feeds, dw = _problem(case, seed_for("fft_wgrad_chunks", engine[0]))
    dw.set_output(True)
    g.validate()
    e = FftWgradEngine() if engine[0] == FFT_ID else FftTilingWgradEngine()
    tile = (engine[1] or {}).get("TILE", 0)
    whole = fft_wgrad.plan_fft_wgrad(g.op_graph, tile, fft.TILING_WORKSPACE_BUDGET)
    one = fft_wgrad.plan_fft_wgrad(g.op_graph, tile, 1)
    assert whole.chunks == 1 and one.chunk == 1 and one.chunks == whole.planes
    assert one.planes == (3 if tile == 0 else 12)
    assert one.workspace_bytes < whole.workspace_bytes
    b = one.buffers()
    per_plane = 4 * (max(b["RX"], b["RD"]) + b["X"] + b["D"])
    per_chunk = 2 if tile == 0 else 5
    monkeypatch.setattr(fft, "TILING_WORKSPACE_BUDGET", per_chunk * per_plane)
    fresh_plan_caches(monkeypatch)  # plans built before used the budget
    cfg = EngineConfig.make(e, **(engine[1] or {}))
    p = e._plan(g.op_graph, cfg)
    assert p.chunk == per_chunk and p.chunks == 2 + (tile != 0) and p.chunks * p.chunk > p.planes
    out = check_engine(
        g, feeds, [dw], engine[0], engine[1], n=_n(3, (7, 9), (3, 3), (1, 1), (1, 1))
    )
    index = next(i for i in range(2) if not g.get_plan_name_at_index(i).startswith(REFERENCE_NAME))
    again = torch.full_like(out[dw], float("nan"))
    ws = torch.full((g.get_workspace_size_plan_at_index(index),), 255, dtype=torch.uint8)
    g.execute_plan_at_index({**feeds, dw: again}, ws, index)
    assert torch.equal(again, out[dw])


@pytest.mark.parametrize("dt", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("engine", ENGINES, ids=ENGINE_IDS)
def test_fused_scale_add_epilogue_types(dt, engine):
    """out = 0.5 * dw + z in dt (NHWC), dw itself virtual: the epilogue runs on the float32
    tile of the inverse rows and stores through dw's rotated (CONVOLUTION) index."""
    torch.manual_seed(3)
    x = torch.randn(2, 3, 9, 7, dtype=dt).to(memory_format=torch.channels_last)
    dy = torch.randn(2, 4, 9, 7, dtype=dt).to(memory_format=torch.channels_last)
    z = torch.randn(4, 3, 5, 3, dtype=dt).to(memory_format=torch.channels_last)
    g = cudnn.pygraph(
        intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT
    )
    tx, tdy, tz = _tensor(g, x), _tensor(g, dy), _tensor(g, z)
    dw = g.conv_wgrad(tx, tdy, padding=[2, 1], convolution_mode=cudnn.convolution_mode.CONVOLUTION)
    dw.set_dim(list(z.shape)).set_stride(list(z.stride()))
    out = g.add(g.scale(dw, 0.5), tz)
    out.set_output(True).set_data_type(TYPES[dt])
    got = check_engine(
        g,
        {tx: x, tdy: dy, tz: z},
        [out],
        engine[0],
        engine[1],
        n=_n(2, (9, 7), (5, 3), (2, 1), (2, 1)),
        msg=repro("0.5*conv_wgrad_fft+z", [(2, 3, 9, 7)], str(dt), 3, engine=engine),
    )
    assert got[out].dtype == dt


def test_half_inputs_float_dw():
    case = (2, 3, 2, (6, 6), (3, 3), (1, 1), (1, 1), "nhwc", "CROSS_CORRELATION", torch.float16)
    g, feeds, dw = _problem(case, 11)
    dw.set_data_type(cudnn.data_type.FLOAT).set_output(True)
    check_engine(
        g, feeds, [dw], FFT_ID, None, dtype=torch.float16, n=_n(2, (6, 6), (3, 3), (1, 1), (1, 1))
    )


def _graph(
    shape_x,
    shape_dw,
    pre=(0, 0),
    post=(0, 0),
    stride=(1, 1),
    dilation=(1, 1),
    dt=cudnn.data_type.FLOAT,
    dw_type=None,
    groups=1,
):
    g = cudnn.pygraph()
    x = g.tensor(dim=list(shape_x), data_type=dt)
    dims = output_dims(shape_x, shape_dw, pre, post, stride, dilation)
    dims[1] = shape_dw[0]
    dy = g.tensor(dim=dims, data_type=dt)
    dw = g.conv_wgrad(
        x,
        dy,
        pre_padding=list(pre),
        post_padding=list(post),
        stride=list(stride),
        dilation=list(dilation),
    )
    dw.set_dim(list(shape_dw)).set_output(True).set_data_type(dw_type or dt)
    g.validate()
    return g


def test_tiling_needs_far_less_workspace_for_large_images():
    g = _graph((1, 32, 240, 240), (32, 32, 5, 5), (2, 2), (2, 2)).op_graph
    whole, tiled = FftWgradEngine(), FftTilingWgradEngine()
    assert whole.check_support(g, Target()).ok and tiled.check_support(g, Target()).ok
    ws_whole = whole.workspace_size(g, whole.configs(g, Target())[0], Target())
    ws_tiled = tiled.workspace_size(g, EngineConfig.make(tiled, TILE=32), Target())
    assert ws_tiled * 4 < ws_whole, (ws_tiled, ws_whole)


def test_large_batches_are_chunked_within_the_budget():
    """The per-chunk buffers stay within the budget; only the DW spectrum (and alignment)
    comes on top, so the workspace does not grow with N."""
    small = _graph((8, 64, 200, 200), (64, 64, 7, 7), (3, 3), (3, 3)).op_graph
    large = _graph((256, 64, 200, 200), (64, 64, 7, 7), (3, 3), (3, 3)).op_graph
    for tile in (0, 32):
        p_small = fft_wgrad.plan_fft_wgrad(small, tile, fft.TILING_WORKSPACE_BUDGET)
        p = fft_wgrad.plan_fft_wgrad(large, tile, fft.TILING_WORKSPACE_BUDGET)
        assert p.chunks > 1 and p.chunks * p.chunk >= p.planes
        fixed = 4 * (p.buffers()["DW"] + p.buffers()["RY"]) + 4 * 256
        assert p.workspace_bytes <= fft.TILING_WORKSPACE_BUDGET + fixed
        assert p.workspace_bytes <= 2 * p_small.workspace_bytes


def test_notes_fft_tensor_core_and_down_convert_for_half_types():
    for e in (FftWgradEngine(), FftTilingWgradEngine()):
        for dt, down in [
            (cudnn.data_type.FLOAT, False),
            (cudnn.data_type.HALF, True),
            (cudnn.data_type.BFLOAT16, True),
        ]:
            g = _graph((1, 2, 6, 6), (2, 2, 3, 3), dt=dt).op_graph
            notes = e.numerical_notes(g, e.configs(g, Target())[0])
            assert {NumericalNote.FFT, NumericalNote.TENSOR_CORE} <= notes
            assert (NumericalNote.DOWN_CONVERT_INPUTS in notes) == down


def test_registered_after_the_gemm_wgrad():
    from opendnn.engines.registry import ENGINE_CLASSES, by_id

    assert isinstance(by_id(22), FftWgradEngine) and isinstance(by_id(23), FftTilingWgradEngine)
    names = [cls for _, cls in ENGINE_CLASSES]
    i = names.index("GemmWgradEngine")
    assert names[i + 1 : i + 3] == ["FftWgradEngine", "FftTilingWgradEngine"]


def _best(graph, engine_ids):
    from opendnn.engines.registry import by_id

    times = []
    for eid in engine_ids:
        e = by_id(eid)
        if e.check_support(graph, H100).ok:
            times += [e.ranked_seconds(graph, cfg, H100) for cfg in e.configs(graph, H100)]
    return min(times)


@pytest.mark.parametrize("dt", [cudnn.data_type.HALF, cudnn.data_type.FLOAT])
def test_cost_model_ranks_fft_after_gemm_for_3x3_and_first_for_large_filters(dt):
    # implicit GEMM, split-K, precomputed-index split-K wgrad, explicit GEMM (K-major)
    gemm = [5, 10, 19, 12]
    small = _graph((32, 64, 56, 56), (64, 64, 3, 3), (1, 1), (1, 1), dt=dt).op_graph
    if dt == cudnn.data_type.HALF:  # IEEE float32 GEMMs run on the CUDA cores: no claim
        assert _best(small, [FFT_ID, TILING_ID]) > _best(small, gemm)
    # 15x15 in NCHW: the gather GEMMs walk 225 taps with uncoalesced NCHW loads
    # (``implicit_gemm.engine.NCHW_GATHER``), the FFT's cost does not grow with the filter
    large = _graph((8, 64, 64, 64), (64, 64, 15, 15), (7, 7), (7, 7), dt=dt).op_graph
    assert _best(large, [FFT_ID, TILING_ID]) < _best(large, gemm)


# ---- declines, one per rule -------------------------------------------------------------
def _reason(engine, g, config=None):
    if config is not None:
        s = engine.check_config(g.op_graph, config, Target())
    else:
        s = engine.check_support(g.op_graph, Target())
    assert not s.ok
    return s.reason


@pytest.mark.parametrize("engine", [FftWgradEngine(), FftTilingWgradEngine()], ids=ENGINE_IDS)
def test_declines_with_reasons(engine):
    g = _graph((1, 2, 5, 5, 5), (2, 2, 3, 3, 3), (0, 0, 0), (0, 0, 0), (1, 1, 1), (1, 1, 1))
    assert "take 2-D convolutions, not 3-D" in _reason(engine, g)
    assert "FFT needs stride 1, got [2, 1]" in _reason(
        engine, _graph((1, 2, 9, 9), (2, 2, 3, 3), stride=(2, 1))
    )
    assert "FFT needs dilation 1, got [1, 2]" in _reason(
        engine, _graph((1, 2, 9, 9), (2, 2, 3, 3), dilation=(1, 2))
    )
    assert "FFT takes one group, got 2" in _reason(engine, _graph((1, 4, 9, 9), (4, 2, 3, 3)))
    assert "FFT takes float, half or bfloat16 dW, not DOUBLE" in _reason(
        engine, _graph((1, 2, 9, 9), (2, 2, 3, 3), dw_type=cudnn.data_type.DOUBLE)
    )


@pytest.mark.parametrize("engine", [FftWgradEngine(), FftTilingWgradEngine()], ids=ENGINE_IDS)
def test_declines_mixed_operand_types_and_a_prologue(engine):
    g = cudnn.pygraph()
    x = g.tensor(dim=[1, 2, 6, 6], data_type=cudnn.data_type.HALF)
    dy = g.tensor(dim=[1, 2, 4, 4], data_type=cudnn.data_type.FLOAT)
    g.conv_wgrad(x, dy).set_dim([2, 2, 3, 3]).set_output(True)
    g.validate()
    assert "one of float, half or bfloat16 for all operands" in _reason(engine, g)
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    x = g.tensor(dim=[1, 2, 6, 6], data_type=cudnn.data_type.FLOAT)
    dy = g.tensor(dim=[1, 2, 4, 4], data_type=cudnn.data_type.FLOAT)
    g.conv_wgrad(g.relu(x), dy).set_dim([2, 2, 3, 3]).set_output(True)
    g.validate()
    assert "operands must be graph inputs" in _reason(engine, g)


def test_fft_declines_images_past_256_and_tiling_takes_them():
    g = _graph((1, 1, 300, 300), (1, 1, 5, 5))
    assert "whole padded image: 300x300 exceeds 256x256" in _reason(FftWgradEngine(), g)
    assert FftTilingWgradEngine().check_support(g.op_graph, Target()).ok


def test_tiling_declines_filters_larger_than_the_tile():
    g = _graph((1, 1, 40, 40), (1, 1, 33, 33))
    assert "filter 33x33 does not fit a 32x32 FFT tile" in _reason(FftTilingWgradEngine(), g)
    assert FftWgradEngine().check_support(g.op_graph, Target()).ok
    g = _graph((1, 1, 20, 20), (1, 1, 9, 9))
    tiling = FftTilingWgradEngine()
    assert "(at most 7x7)" in _reason(tiling, g, EngineConfig.make(tiling, TILE=8))
    assert sorted(c.knob_dict["TILE"] for c in tiling.configs(g.op_graph, Target())) == [16, 32]
