"""The NHWC fast path of conv_wgrad_implicit_gemm (pixel boxes through TMA, split pixel
reduction summed in a fixed order) against the float64 reference, through the
interpreter's tensor descriptors: stride 1 and 2, dilation, padding from the copy
engine's zero fill, partial boxes and tiles, one slice and several (uneven, and more
slices than boxes), an epilogue, workspace sizes, and each rule keeping a problem off."""

import pytest
import torch
from _util import check_engine, repro

import opendnn.frontend as cudnn
from opendnn.engines.base import EngineConfig, Target
from opendnn.engines.conv.implicit_gemm.engine import ImplicitGemmWgradEngine

WGRAD_ID = ImplicitGemmWgradEngine.id
CL = torch.channels_last
SMALL = dict(
    TMA_IMGS=1, TMA_TH=4, TMA_TW=4, BLOCK_M=32, BLOCK_N=32, SPLIT=1, num_warps=4, num_stages=2
)

FLAT = dict(SMALL, TMA_TH=1, TMA_TW=16, FLAT=1)

CASES = [  # (N, C, K, H, W, filt, stride, pad, dilation, knobs)
    (2, 16, 24, 5, 7, 3, 1, 1, 1, SMALL),
    (1, 8, 8, 9, 4, 1, 1, 0, 1, dict(SMALL, SPLIT=3)),
    (3, 24, 16, 6, 6, 3, 1, 2, 2, dict(SMALL, TMA_IMGS=2, SPLIT=2)),
    (1, 8, 40, 3, 3, 3, 1, 1, 1, dict(SMALL, BLOCK_M=64, SPLIT=5)),  # more slices than boxes
    (1, 16, 16, 8, 6, 3, 2, 1, 1, dict(SMALL, SPLIT=2)),
    (2, 24, 8, 10, 10, 5, 2, 2, 1, dict(SMALL, BLOCK_N=64)),  # one partial C tile
    (1, 8, 8, 4, 4, 1, 2, 0, 1, SMALL),
    # flat pixel runs: x through a 2-D descriptor (1x1) or gathered (small C, any stride)
    (2, 16, 8, 5, 3, 1, 1, 0, 1, FLAT),
    (1, 8, 16, 6, 5, 1, 1, 0, 1, dict(FLAT, SPLIT=3)),
    (2, 3, 16, 9, 9, 3, 2, 1, 1, FLAT),  # the stem's C = 3
    (1, 3, 8, 7, 7, 3, 1, 2, 2, dict(FLAT, SPLIT=2)),
    (1, 5, 8, 6, 6, 1, 2, 0, 1, dict(FLAT, BLOCK_N=64)),
]


def _problem(n, c, k, h, w, f, s, p, d, dt, seed):
    torch.manual_seed(seed)
    x = torch.randn(n, c, h, w, dtype=dt).to(memory_format=CL)
    oh, ow = ((h + 2 * p - d * (f - 1) - 1) // s + 1, (w + 2 * p - d * (f - 1) - 1) // s + 1)
    dy = torch.randn(n, k, oh, ow, dtype=dt).to(memory_format=CL)
    return x, dy


def _graph(x, dy, k, c, f, s, p, d, mode="CROSS_CORRELATION"):
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tx, tdy = g.tensor_like(x), g.tensor_like(dy)
    dw = g.conv_wgrad(
        tx,
        tdy,
        padding=[p, p],
        stride=[s, s],
        dilation=[d, d],
        convolution_mode=cudnn.convolution_mode[mode],
    )
    dw.set_dim([k, c, f, f]).set_stride([c * f * f, 1, f * c, c])
    return g, tx, tdy, dw


@pytest.mark.parametrize("case", CASES, ids=[f"c{i}" for i in range(len(CASES))])
@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("mode", ["CROSS_CORRELATION", "CONVOLUTION"])
def test_tma_wgrad_against_reference(case, dt, mode):
    n, c, k, h, w, f, s, p, d, knobs = case
    seed = n * c + k + s
    x, dy = _problem(n, c, k, h, w, f, s, p, d, dt, seed)
    g, tx, tdy, dw = _graph(x, dy, k, c, f, s, p, d, mode)
    dw.set_output(True).set_data_type(cudnn.data_type.FLOAT)
    check_engine(
        g,
        {tx: x, tdy: dy},
        [dw],
        WGRAD_ID,
        knobs,
        n=n * dy.shape[2] * dy.shape[3],
        msg=repro(
            "conv_wgrad tma",
            [tuple(x.shape), tuple(dy.shape)],
            str(dt),
            seed,
            mode=mode,
            knobs=knobs,
        ),
    )


@pytest.mark.parametrize("case", [c for c in CASES if not c[-1].get("FLAT")])
def test_tma_wgrad_float32_as_tf32(case, monkeypatch):
    """float32 x and dy with TF32 allowed take the box kernel (tiles of at most 64
    channels); the interpreter's dot is IEEE float32."""
    from opendnn import backends

    monkeypatch.setattr(backends, "allow_tf32", True)
    n, c, k, h, w, f, s, p, d, knobs = case
    x, dy = _problem(n, c, k, h, w, f, s, p, d, torch.float32, n * c + k + 3)
    g, tx, tdy, dw = _graph(x, dy, k, c, f, s, p, d)
    dw.set_output(True).set_data_type(cudnn.data_type.FLOAT)
    check_engine(g, {tx: x, tdy: dy}, [dw], WGRAD_ID, knobs, n=n * dy.shape[2] * dy.shape[3])


def test_tma_wgrad_float32_x_tiles_of_64_channels(monkeypatch):
    from opendnn import backends

    monkeypatch.setattr(backends, "allow_tf32", True)
    x = torch.randn(1, 16, 8, 8).to(memory_format=CL)
    dy = torch.randn(1, 8, 8, 8).to(memory_format=CL)
    sup = _support(x, dy, dict(SMALL, BLOCK_N=128), padding=[1, 1])
    assert not sup.ok and "at most 64 channels" in sup.reason
    assert _support(x, dy, dict(SMALL, BLOCK_M=128), padding=[1, 1]).ok


@pytest.mark.parametrize(
    "case",
    [  # (N, C, K, H, W, filt, stride, pad, knobs): K past one half, or inside the first
        (2, 16, 100, 5, 7, 3, 1, 1, dict(SMALL, BLOCK_M=128)),
        (1, 24, 128, 6, 6, 3, 1, 1, dict(SMALL, BLOCK_M=128, SPLIT=2)),
        (1, 16, 40, 8, 6, 3, 2, 1, dict(SMALL, BLOCK_M=128, BLOCK_N=64, SPLIT=3)),
    ],
)
def test_tma_wgrad_float32_dy_in_two_halves(case, monkeypatch):
    """A float32 tile of 128 dy channels reads dy's box as two loads of 64 channels (one
    of 512-byte rows went wrong on the H100), two accumulators joined after the loop."""
    from opendnn import backends
    from opendnn.engines.conv.tma import _wgrad_kernels as T

    monkeypatch.setattr(backends, "allow_tf32", True)
    n, c, k, h, w, f, s, p, knobs = case
    assert T.dy_halves(T.WgradTmaKnobs(**knobs), 4) == 64
    x, dy = _problem(n, c, k, h, w, f, s, p, 1, torch.float32, n * c + k)
    g, tx, tdy, dw = _graph(x, dy, k, c, f, s, p, 1)
    dw.set_output(True).set_data_type(cudnn.data_type.FLOAT)
    check_engine(g, {tx: x, tdy: dy}, [dw], WGRAD_ID, knobs, n=n * dy.shape[2] * dy.shape[3])


@pytest.mark.parametrize(
    "case",
    [
        (7, 7, 1, 1, SMALL),  # 4x8 boxes over 7x7: partial boxes on both axes
        (9, 6, 1, 0, dict(SMALL, SPLIT=2)),  # no padding: the last row meets tap r=2 only
        (8, 10, 2, 1, SMALL),  # stride 2 through the phase view
    ],
)
def test_tma_wgrad_inf_where_no_output_of_a_tap_reads_it(case):
    """An inf on x's last row and column is read by some taps only: the others' dw must
    stay finite (a partial box's dead pixels add 0 * 0, not 0 * inf), as the reference's."""
    h, w, s, p, knobs = case
    x, dy = _problem(1, 16, 8, h, w, 3, s, p, 1, torch.bfloat16, 17)
    x[:, :, -1, :] = float("inf")
    x[:, 3, :, -1] = float("-inf")
    g, tx, tdy, dw = _graph(x, dy, 8, 16, 3, s, p, 1)
    dw.set_output(True).set_data_type(cudnn.data_type.FLOAT)
    out = check_engine(
        g, {tx: x, tdy: dy}, [dw], WGRAD_ID, knobs, n=dy.shape[2] * dy.shape[3], allow_nan=True
    )
    assert torch.isfinite(out[dw]).any()  # some taps never meet the infs


@pytest.mark.parametrize("split", [1, 3])
def test_tma_wgrad_scale_epilogue_bf16_and_workspace(split):
    """dw * 0.5 stored as bfloat16 into a KCRS (NCHW) filter; the workspace holds the
    float32 partials only when the reduction is split."""
    x, dy = _problem(2, 16, 16, 6, 6, 3, 1, 1, 1, torch.bfloat16, 11)
    g = cudnn.pygraph(
        intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT
    )
    tx, tdy = g.tensor_like(x), g.tensor_like(dy)
    dw = g.conv_wgrad(tx, tdy, padding=[1, 1])
    dw.set_dim([16, 16, 3, 3])
    out = g.scale(dw, 0.5)
    out.set_output(True).set_data_type(cudnn.data_type.BFLOAT16)
    res = check_engine(g, {tx: x, tdy: dy}, [out], WGRAD_ID, dict(SMALL, SPLIT=split), n=72)
    assert res[out].dtype == torch.bfloat16
    ws = g.get_workspace_size_plan_at_index(1)  # check_engine put the reference first
    assert ws == (0 if split == 1 else -(-4 * split * 9 * 16 * 16 // 256) * 256)


# (N, C, K, D, H, W, filt, stride, pad, dilation, knobs): NDHWC as 2-D boxes over N * OD
# images; depth padding read at image -1 (zero-filled), depth stride and dilation free
CASES_3D = [
    (2, 16, 8, 4, 5, 6, (3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1), SMALL),
    (1, 8, 16, 5, 6, 6, (3, 3, 3), (2, 2, 2), (1, 1, 1), (1, 1, 1), dict(SMALL, SPLIT=2)),
    (1, 8, 8, 7, 4, 5, (3, 2, 3), (2, 1, 1), (2, 1, 0), (2, 1, 1), dict(SMALL, SPLIT=3)),
    (2, 8, 24, 3, 4, 4, (1, 3, 3), (3, 1, 1), (0, 1, 1), (1, 2, 1), dict(SMALL, BLOCK_M=64)),
]


@pytest.mark.parametrize("case", CASES_3D, ids=[f"d{i}" for i in range(len(CASES_3D))])
@pytest.mark.parametrize("mode", ["CROSS_CORRELATION", "CONVOLUTION"])
def test_tma_wgrad_3d_against_reference(case, mode):
    n, c, k, dd, h, w, f, s, p, dil, knobs = case
    torch.manual_seed(n + c + k + dd)
    cl3 = torch.channels_last_3d
    x = torch.randn(n, c, dd, h, w, dtype=torch.bfloat16).to(memory_format=cl3)
    out = [
        (i + 2 * pi - di * (fi - 1) - 1) // si + 1
        for i, pi, di, fi, si in zip((dd, h, w), p, dil, f, s)
    ]
    dy = torch.randn(n, k, *out, dtype=torch.bfloat16).to(memory_format=cl3)
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tx, tdy = g.tensor_like(x), g.tensor_like(dy)
    dw = g.conv_wgrad(
        tx,
        tdy,
        padding=list(p),
        stride=list(s),
        dilation=list(dil),
        convolution_mode=cudnn.convolution_mode[mode],
    )
    dw.set_dim([k, c, *f]).set_stride(list(torch.empty(k, c, *f).to(memory_format=cl3).stride()))
    dw.set_output(True).set_data_type(cudnn.data_type.FLOAT)
    check_engine(g, {tx: x, tdy: dy}, [dw], WGRAD_ID, knobs, n=n * out[0] * out[1] * out[2])


def test_tma_wgrad_3d_boxes_hold_one_depth_slice():
    cl3 = torch.channels_last_3d
    x = torch.randn(1, 8, 4, 4, 4, dtype=torch.bfloat16).to(memory_format=cl3)
    dy = torch.randn(1, 8, 4, 4, 4, dtype=torch.bfloat16).to(memory_format=cl3)
    g = cudnn.pygraph()
    tx, tdy = g.tensor_like(x), g.tensor_like(dy)
    dw = g.conv_wgrad(tx, tdy, padding=[1, 1, 1])
    dw.set_dim([8, 8, 3, 3, 3]).set_output(True)
    g.validate()
    e = ImplicitGemmWgradEngine()
    sup = e.check_config(g.op_graph, EngineConfig.make(e, **dict(SMALL, TMA_IMGS=2)), Target())
    assert not sup.ok and "one depth slice" in sup.reason


def test_tma_wgrad_flat_gathers_from_an_nchw_image():
    """The gather reads x through its strides: NCHW x, NHWC dy."""
    x, dy = _problem(2, 3, 8, 7, 6, 3, 2, 1, 1, torch.bfloat16, 21)
    x = x.contiguous()
    g, tx, tdy, dw = _graph(x, dy, 8, 3, 3, 2, 1, 1)
    dw.set_output(True).set_data_type(cudnn.data_type.FLOAT)
    check_engine(g, {tx: x, tdy: dy}, [dw], WGRAD_ID, dict(FLAT, SPLIT=2), n=24)


def _support(x, dy, knobs=SMALL, **conv):
    g = cudnn.pygraph()
    tx, tdy = g.tensor_like(x), g.tensor_like(dy)
    dw = g.conv_wgrad(tx, tdy, **conv)
    dw.set_dim([dy.shape[1], x.shape[1] // conv.get("groups", 1), 3, 3])
    dw.set_output(True)
    g.validate()
    e = ImplicitGemmWgradEngine()
    return e.check_config(g.op_graph, EngineConfig.make(e, **knobs), Target())


@pytest.mark.parametrize(
    "change,reason",
    [
        (dict(layout="nchw"), "packed NHWC image"),
        (dict(dy_layout="nchw"), "packed NHWC dy"),
        (dict(dt=torch.float32), "half or bfloat16"),
        (dict(c=4), "16-byte aligned rows"),
        (dict(stride=3), "stride 1, or stride 2"),
        (dict(stride=2, h=7), "even image height"),
        (dict(knobs=dict(SMALL, BLOCK_K=16)), "BLOCK_K belong(s) to the gather path"),
        (dict(dy_layout="nchw", knobs=FLAT), "flat TMA path needs a packed NHWC dy"),
        (dict(dt=torch.float32, knobs=FLAT), "half or bfloat16"),
        (
            dict(knobs=dict(FLAT, TMA_TW=128, BLOCK_M=64, BLOCK_N=128)),
            "more than 64 registers per thread with 4 warps",
        ),
    ],
)
def test_tma_wgrad_declines_with_a_reason(change, reason):
    dt = change.get("dt", torch.bfloat16)
    c, h, s = change.get("c", 16), change.get("h", 8), change.get("stride", 1)
    x = torch.randn(1, c, h, 8, dtype=dt)
    oh, ow = (h - 1) // s + 1, (8 - 1) // s + 1
    dy = torch.randn(1, 8, oh, ow, dtype=dt)
    if change.get("layout") != "nchw":
        x = x.to(memory_format=CL)
    if change.get("dy_layout") != "nchw":
        dy = dy.to(memory_format=CL)
    sup = _support(x, dy, change.get("knobs", SMALL), padding=[1, 1], stride=[s, s])
    assert not sup.ok and reason in sup.reason


@pytest.mark.parametrize("c,gathered", [(64, False), (3, True)])
def test_flat_gathered_runs_offered_only_where_boxes_cannot_go(c, gathered):
    """A 3x3 layer of 64 channels gets box configs and no gathered flat runs (they ran up
    to 6.5x their model there); an RGB stem, which boxes cannot describe, gets them."""
    from opendnn.handle import _KNOWN

    h100 = Target("cuda", "H100", (9, 0), 132, **_KNOWN["H100"])
    x, dy = _problem(8, c, 64, 56, 56, 3, 1, 1, 1, torch.bfloat16, 5)
    g, tx, tdy, dw = _graph(x, dy, 64, c, 3, 1, 1, 1)
    dw.set_output(True)
    g.validate()
    cfgs = ImplicitGemmWgradEngine().configs(g.op_graph, h100)
    flat = [cf for cf in cfgs if cf.knob_dict.get("FLAT")]
    boxes = [cf for cf in cfgs if "TMA_TW" in cf.knob_dict and not cf.knob_dict.get("FLAT")]
    assert bool(flat) == gathered and bool(boxes) != gathered
