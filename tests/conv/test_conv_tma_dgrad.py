"""The NHWC fast path of conv_dgrad_implicit_gemm (dy boxes through TMA descriptors, stride
phases, persistent grid) against the float64 reference through the interpreter: stride 1
with padding and dilation, strides 2 and 3 split into phases (some with no taps), odd dx
sizes the forward's rounding leaves partly unused, partial boxes at every edge, K and C
off the block sizes, the pointer-loaded filter for C = 3, both modes, a fused epilogue
into NCHW; and each rule that keeps a problem off the path."""

import types

import pytest
import torch
from _util import check_engine, repro

import opendnn.frontend as cudnn
from opendnn.engines.base import EngineConfig, Target
from opendnn.engines.conv.implicit_gemm.engine import ImplicitGemmDgradEngine
from opendnn.engines.conv.split_k.dgrad import SplitKDgradEngine
from opendnn.engines.conv.tma import _dgrad_kernels as D
from opendnn.engines.conv.tma import dgrad as tma_dgrad
from opendnn.engines.conv.tma import engine as tma
from opendnn.ops.conv import output_dims

DGRAD_ID = ImplicitGemmDgradEngine.id
CL = torch.channels_last
H100 = Target("cuda", "H100", (9, 0), 132, 7.1e14, 5e13, 3e12)
SMALL = dict(TMA_IMGS=1, TMA_TH=4, TMA_TW=8, BLOCK_N=32, BLOCK_K=16, num_warps=4, num_stages=2)
PTR = dict(SMALL, BLOCK_N=16)  # narrow channel blocks for the pointer-loaded filter

CASES = [  # (N, C, K, H, W, filt, stride, pad, dilation, knobs): dx [N, C, H, W]
    # stride 1: K = 24 is 1.5 blocks, 5x7 leaves partial row and column boxes
    (2, 16, 24, 5, 7, 3, 1, 1, 1, SMALL),
    (1, 8, 8, 9, 4, 1, 1, 0, 1, SMALL),
    (3, 24, 24, 6, 6, 3, 1, 2, 2, dict(SMALL, TMA_IMGS=4)),  # 3 images in a box of 4
    (1, 40, 8, 3, 3, 3, 1, 1, 1, dict(SMALL, BLOCK_N=64)),  # box and C block > dx
    (1, 12, 16, 5, 6, 3, 1, 1, 1, PTR),  # C * 2 bytes = 24: filter through pointers
    # stride 2: four phases
    (1, 16, 16, 8, 6, 3, 2, 1, 1, SMALL),
    (2, 16, 8, 9, 7, 3, 2, 1, 1, SMALL),  # odd dx: the last phase row/column is shorter
    (1, 16, 8, 8, 8, 3, 2, 0, 1, SMALL),  # OH = 3: dx row / column 7 gets nothing
    (1, 8, 16, 6, 7, 1, 2, 0, 1, SMALL),  # 1x1: three phases without taps (dx = 0)
    (1, 3, 16, 9, 11, 7, 2, 3, 1, PTR),  # the ResNet stem, small: C = 3
    # stride 3 (nine phases, 5x5 filter) and unequal strides
    (1, 8, 16, 10, 8, 5, 3, 2, 1, SMALL),
    (1, 8, 16, 7, 6, 3, (2, 1), 1, 1, SMALL),
    # two persistent programs per SM: on the interpreter's one "SM", two programs that
    # take every other tile (of 3 images x 2 row boxes, or of 4 phases)
    (3, 16, 24, 5, 7, 3, 1, 1, 1, dict(SMALL, PPS=2)),
    (2, 16, 8, 9, 7, 3, 2, 1, 1, dict(SMALL, PPS=2)),
    # stride 1 reductions split 2 and 3 ways (float32 partials, the forward's sum kernel)
    (2, 16, 24, 5, 7, 3, 1, 1, 1, dict(SMALL, SPLIT=2)),
    (1, 24, 40, 6, 6, 3, 1, 2, 2, dict(SMALL, SPLIT=3)),
]


def _pair(v):
    return tuple(v) if isinstance(v, tuple) else (v, v)


def _problem(n, c, k, h, w, f, stride, pad, dil, dt, seed):
    """(dx template, w, dy): dx only gives the dgrad output its shape and NHWC strides."""
    torch.manual_seed(seed)
    x = torch.empty(n, c, h, w, dtype=dt).to(memory_format=CL)
    wt = (torch.randn(k, c, f, f, dtype=dt) * 0.2).to(memory_format=CL)
    ydims = output_dims(x.shape, wt.shape, [pad] * 2, [pad] * 2, _pair(stride), [dil] * 2)
    dy = torch.randn(*ydims, dtype=dt).to(memory_format=CL)
    return x, wt, dy


def _dgrad_graph(x, wt, dy, p, s, d, mode):
    """(graph, dy tensor, filter tensor, dx) of the 2-D backward data with ``x``'s dims and
    strides for dx (padding ``p``, stride ``s``, dilation ``d``, convolution mode name)."""
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tdy, tw = g.tensor_like(dy), g.tensor_like(wt)
    dx = g.conv_dgrad(
        tdy,
        tw,
        padding=[p, p],
        stride=list(_pair(s)),
        dilation=[d, d],
        convolution_mode=cudnn.convolution_mode[mode],
    )
    dx.set_dim(list(x.shape)).set_stride(list(x.stride())).set_output(True)
    return g, tdy, tw, dx


@pytest.mark.parametrize("case", CASES, ids=[f"c{i}" for i in range(len(CASES))])
@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("mode", ["CROSS_CORRELATION", "CONVOLUTION"])
def test_tma_dgrad_against_reference(case, dt, mode):
    n, c, k, h, w, f, s, p, d, knobs = case
    seed = n * c + k + h
    x, wt, dy = _problem(n, c, k, h, w, f, s, p, d, dt, seed)
    g, tdy, tw, dx = _dgrad_graph(x, wt, dy, p, s, d, mode)
    dx.set_data_type(cudnn.data_type.FLOAT)
    check_engine(
        g,
        {tdy: dy, tw: wt},
        [dx],
        DGRAD_ID,
        knobs,
        n=k * f * f,
        msg=repro(
            "conv_dgrad tma",
            [tuple(dy.shape), tuple(wt.shape)],
            str(dt),
            seed,
            mode=mode,
            stride=s,
            pad=p,
            dilation=d,
        ),
    )


def _k_innermost(wt):
    """``wt`` (K, C, R, S) stored with K innermost, then C, then the taps."""
    return wt.permute(2, 3, 1, 0).contiguous().permute(3, 2, 0, 1)


@pytest.mark.parametrize("case", CASES, ids=[f"c{i}" for i in range(len(CASES))])
@pytest.mark.parametrize("mode", ["CROSS_CORRELATION", "CONVOLUTION"])
def test_tma_dgrad_float32_as_tf32(case, mode, monkeypatch):
    """float32 dy with the filter K-innermost (as the channels-last transform copies it):
    both operands K-major, the filter a [taps, C, K] descriptor; the interpreter's dot is
    IEEE float32."""
    from opendnn import backends

    monkeypatch.setattr(backends, "allow_tf32", True)
    n, c, k, h, w, f, s, p, d, knobs = case
    knobs = dict(knobs, BLOCK_K=min(knobs["BLOCK_K"], 32))
    x, wt, dy = _problem(n, c, k, h, w, f, s, p, d, torch.float32, n * c + k + h + 1)
    wt = _k_innermost(wt)
    g, tdy, tw, dx = _dgrad_graph(x, wt, dy, p, s, d, mode)
    check_engine(g, {tdy: dy, tw: wt}, [dx], DGRAD_ID, knobs, n=k * f * f)


@pytest.mark.parametrize("case", CASES[:4] + CASES[5:9], ids=[f"c{i}" for i in range(8)])
@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float16])
def test_tma_dgrad_half_filter_k_innermost(case, dt):
    """A 16-bit filter that comes K-innermost is read as [taps, C, K] boxes (the K-major B
    operand, as TF32's), not as the KRSC path's [K, taps, C] ones."""
    n, c, k, h, w, f, s, p, d, knobs = case
    x, wt, dy = _problem(n, c, k, h, w, f, s, p, d, dt, n * c + k + h + 2)
    wt = _k_innermost(wt)
    g, tdy, tw, dx = _dgrad_graph(x, wt, dy, p, s, d, "CROSS_CORRELATION")
    dx.set_data_type(cudnn.data_type.FLOAT)
    check_engine(g, {tdy: dy, tw: wt}, [dx], DGRAD_ID, knobs, n=k * f * f)


@pytest.mark.parametrize(
    "filt,knobs,reason",
    [
        ("krsc", SMALL, "needs the filter K-innermost"),
        ("k_innermost", dict(SMALL, BLOCK_K=64), "BLOCK_K <= 32"),
    ],
)
def test_tma_dgrad_float32_rules(filt, knobs, reason, monkeypatch):
    from opendnn import backends

    monkeypatch.setattr(backends, "allow_tf32", True)
    x, wt, dy = _problem(1, 16, 16, 8, 8, 3, 1, 1, 1, torch.float32, 4)
    if filt == "k_innermost":
        wt = _k_innermost(wt)
    g = cudnn.pygraph()
    out = g.conv_dgrad(g.tensor_like(dy), g.tensor_like(wt), padding=[1, 1])
    out.set_dim(list(x.shape)).set_output(True)
    g.validate()
    e = ImplicitGemmDgradEngine()
    sup = e.check_config(g.op_graph, EngineConfig.make(e, **knobs), Target())
    assert not sup.ok and reason in sup.reason, sup.reason


@pytest.mark.parametrize("stride", [1, 2])
def test_tma_dgrad_relu_backward_and_scale_into_nchw(stride):
    """dx = 0.5 * relu_backward(dgrad(dy, w), x), stored bf16 into an NCHW tensor (dx is
    written through the epilogue's pointers, so its layout is free)."""
    _, wt, dy = _problem(2, 16, 8, 7, 6, 3, stride, 1, 1, torch.bfloat16, 7 + stride)
    x = torch.randn(2, 16, 7, 6, dtype=torch.bfloat16)  # NCHW
    g = cudnn.pygraph(
        intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT
    )
    tdy, tw, tx = g.tensor_like(dy), g.tensor_like(wt), g.tensor_like(x)
    dgrad = g.conv_dgrad(tdy, tw, padding=[1, 1], stride=[stride, stride])
    dgrad.set_dim(list(x.shape)).set_stride(list(x.stride()))
    out = g.scale(g.relu_backward(dgrad, tx), 0.5)
    out.set_output(True).set_data_type(cudnn.data_type.BFLOAT16)
    got = check_engine(g, {tdy: dy, tw: wt, tx: x}, [out], DGRAD_ID, SMALL, n=72)
    assert got[out].dtype == torch.bfloat16 and got[out].stride() == x.stride()


@pytest.mark.parametrize(
    "change,reason",
    [
        (dict(dy_layout="nchw"), "packed NHWC dy"),
        (dict(w_layout="nchw"), "packed KRSC (NHWC) or a K-innermost filter"),
        (dict(dt=torch.float32), "half or bfloat16"),
        (dict(k=4), "K (dy's channels) * element size"),
        (dict(stride=2, dilation=2), "stride > 1 only without dilation"),
        (dict(groups=2), "one group"),
        (
            dict(
                knobs=dict(
                    TMA_IMGS=4,
                    TMA_TH=16,
                    TMA_TW=16,
                    BLOCK_N=128,
                    BLOCK_K=128,
                    num_warps=8,
                    num_stages=4,
                )
            ),
            "exceed shared memory",
        ),
        (dict(knobs=dict(SMALL, BLOCK_M=64)), "BLOCK_M belong(s) to the gather path"),
        (dict(stride=2, knobs=dict(SMALL, SPLIT=2)), "SPLIT on the box tiles takes stride 1"),
    ],
)
def test_tma_dgrad_declines_with_a_reason(change, reason):
    dt = change.get("dt", torch.bfloat16)
    k, groups = change.get("k", 16), change.get("groups", 1)
    s, d = change.get("stride", 1), change.get("dilation", 1)
    oh = (8 + 2 - d * 2 - 1) // s + 1
    dy = torch.randn(1, k, oh, oh, dtype=dt)
    wt = torch.randn(k, 16 // groups, 3, 3, dtype=dt)
    if change.get("dy_layout") != "nchw":
        dy = dy.to(memory_format=CL)
    if change.get("w_layout") != "nchw":
        wt = wt.to(memory_format=CL)
    g = cudnn.pygraph()
    tdy, tw = g.tensor_like(dy), g.tensor_like(wt)
    dx = g.conv_dgrad(tdy, tw, padding=[1, 1], stride=[s, s], dilation=[d, d])
    dx.set_dim([1, 16, 8, 8]).set_output(True)
    g.validate()
    e = ImplicitGemmDgradEngine()
    sup = e.check_config(g.op_graph, EngineConfig.make(e, **change.get("knobs", SMALL)), Target())
    assert not sup.ok and reason in sup.reason, sup.reason


def test_tma_dgrad_declines_1d():
    dy = torch.randn(1, 16, 8, dtype=torch.bfloat16)
    wt = torch.randn(16, 16, 3, dtype=torch.bfloat16)
    g = cudnn.pygraph()
    tdy, tw = g.tensor_like(dy), g.tensor_like(wt)
    g.conv_dgrad(tdy, tw, padding=[1]).set_dim([1, 16, 8]).set_output(True)
    g.validate()
    e = ImplicitGemmDgradEngine()
    sup = e.check_config(g.op_graph, EngineConfig.make(e, **SMALL), Target())
    assert not sup.ok and "2-D or 3-D" in sup.reason


def test_tma_configs_offered_on_hopper_by_engine_4_only():
    """Engine 4 ranks TMA configs among its own on Hopper; split-K dgrad (engine 17, a
    subclass) must not inherit the path."""
    _, wt, dy = _problem(8, 64, 64, 14, 14, 3, 1, 1, 1, torch.bfloat16, 3)
    g = cudnn.pygraph()
    tdy, tw = g.tensor_like(dy), g.tensor_like(wt)
    g.conv_dgrad(tdy, tw, padding=[1, 1]).set_dim([8, 64, 14, 14]).set_output(True)
    g.validate()
    cfgs = ImplicitGemmDgradEngine().configs(g.op_graph, H100)
    assert sum(tma.is_tma(c.knob_dict) for c in cfgs) == len(D.KNOB_SPACE)  # no flat: 3x3
    assert SplitKDgradEngine.tma_path is None
    assert not any(tma.is_tma(c.knob_dict) for c in SplitKDgradEngine().configs(g.op_graph, H100))


@pytest.mark.parametrize("f,s,p", [(3, 2, 1), (1, 2, 0), (7, 2, 3), (5, 3, 2), (3, 1, 1)])
def test_phase_taps_partition_the_filter(f, s, p):
    """Every tap belongs to exactly one stride phase: the phases' counts sum to R * S."""
    geo = types.SimpleNamespace(stride=(s, s), pre=(p, p), filt=(f, f))
    taps = D.phase_taps(geo)
    assert len(taps) == s * s and sum(taps) == f * f
    if f == 1 and s == 2:
        assert sorted(taps) == [0, 0, 0, 1]


def test_two_programs_per_sm_only_with_two_stages():
    """Two programs per SM with three stages raced on sm_90 (wrong dx elements from run to
    run); the rule declines them and the knob space holds PPS=2 only with two stages."""
    geo = types.SimpleNamespace(filt=(3, 3), stride=(1, 1))
    assert "races" in D.knob_rule(geo, D.DgradTmaKnobs(1, 8, 16, 128, 64, 8, 3, PPS=2))
    assert D.knob_rule(geo, D.DgradTmaKnobs(1, 8, 16, 128, 64, 8, 2, PPS=2)) is None
    assert D.knob_rule(geo, D.DgradTmaKnobs(1, 8, 16, 128, 64, 8, 4)) is None
    space = D.KNOB_SPACE + tma_dgrad.TF32_KNOBS
    assert any(k.PPS == 2 for k in space)
    assert all(k.num_stages <= 2 for k in space if k.PPS == 2)


def test_programs_per_sm_knob_label_grid_and_cost():
    """PPS=1 keeps the labels configs had before the knob; PPS=2 doubles the persistent
    grid (never past the tile count) and the cost model credits it only when there are
    more tiles than SMs (2 x 7 x 4 x 4 phases = 224 tiles on 132 SMs; 8 tiles on 132)."""
    path = tma_dgrad.DGRAD
    one, two = (
        D.DgradTmaKnobs(4, 4, 8, 128, 64, 8, 3),
        D.DgradTmaKnobs(4, 4, 8, 128, 64, 8, 3, PPS=2),
    )
    assert "PPS" not in path.knob_items(one) and path.knob_items(two)["PPS"] == 2
    big, small = [], []
    for n, h, out in ((8, 56, big), (1, 14, small)):
        _, wt, dy = _problem(n, 128, 128, h, h, 3, 2, 1, 1, torch.bfloat16, 0)
        g = cudnn.pygraph()
        tdy, tw = g.tensor_like(dy), g.tensor_like(wt)
        g.conv_dgrad(tdy, tw, padding=[1, 1], stride=[2, 2]).set_dim([n, 128, h, h]).set_output(
            True
        )
        g.validate()
        e = ImplicitGemmDgradEngine()
        a = e._analyze(g.op_graph)
        for kn in (one, two):
            out.append(
                (
                    D.grid(a.geo, kn, 132)[0],
                    e.estimate_seconds(
                        g.op_graph, EngineConfig.make(e, **path.knob_items(kn)), H100
                    ),
                )
            )
    assert big[0][0] == 132 and big[1][0] == 224 and big[1][1] < big[0][1]
    assert small[0][0] == small[1][0] == 8 and small[1][1] == small[0][1]


def test_cost_model_prices_pipeline_stages():
    """With one tile per SM (ResNet-50's l3_3x3_256 dgrad: 128 tiles of 36 steps on 132
    SMs) two-stage PPS=2 boxes are estimated behind four and three stages (measured 25.5
    against 17.9 and 19.4 us on the H100; the model's L2 term bounds those two alike);
    with 1.7 tiles per SM (l2_3x3_128's 4x4x8 boxes: 224 tiles) two programs of two
    stages cost about what one of four does (20.9 against 20.3 us)."""

    def est(n, c, h, kn):
        g = cudnn.pygraph()
        dy = torch.empty(n, c, h, h, dtype=torch.bfloat16).to(memory_format=CL)
        wt = torch.empty(c, c, 3, 3, dtype=torch.bfloat16).to(memory_format=CL)
        tdy, tw = g.tensor_like(dy), g.tensor_like(wt)
        g.conv_dgrad(tdy, tw, padding=[1, 1]).set_dim([n, c, h, h]).set_output(True)
        g.validate()
        e = ImplicitGemmDgradEngine()
        cfg = EngineConfig.make(e, **tma_dgrad.DGRAD.knob_items(kn))
        return e.estimate_seconds(g.op_graph, cfg, H100)

    four, three = D.DgradTmaKnobs(4, 4, 8, 128, 64, 8, 4), D.DgradTmaKnobs(4, 4, 8, 128, 64, 8, 3)
    pps2 = D.DgradTmaKnobs(4, 4, 8, 128, 64, 8, 2, PPS=2)
    assert est(32, 256, 14, four) <= est(32, 256, 14, three) < est(32, 256, 14, pps2)
    near = est(32, 128, 28, pps2) / est(32, 128, 28, four)
    assert 0.9 < near < 1.1, near


# 3-D: (N, C, K, dx D, H, W, filt, stride, pad, dilation, knobs); the tiles' images are
# the N * D dx depth slices, each walking the depth taps that reach it
CASES_3D = [
    (2, 16, 24, 4, 5, 6, (3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1), SMALL),
    (1, 16, 16, 7, 6, 8, (3, 3, 3), (2, 2, 2), (1, 1, 1), (1, 1, 1), SMALL),
    (1, 8, 16, 6, 5, 7, (3, 3, 3), (1, 2, 1), (2, 1, 1), (2, 1, 1), dict(SMALL, PPS=2)),
    (2, 12, 8, 5, 4, 4, (2, 3, 3), (3, 1, 1), (1, 1, 1), (1, 2, 1), PTR),  # filter by pointers
    (1, 8, 16, 3, 4, 5, (3, 3, 3), (1, 1, 1), (2, 2, 2), (1, 1, 1), SMALL),  # pad > radius
]


@pytest.mark.parametrize("case", CASES_3D, ids=[f"d{i}" for i in range(len(CASES_3D))])
@pytest.mark.parametrize("mode", ["CROSS_CORRELATION", "CONVOLUTION"])
def test_tma_dgrad_3d_against_reference(case, mode):
    n, c, k, dd, h, w, f, s, p, dil, knobs = case
    torch.manual_seed(n + c + k + dd + h)
    cl3 = torch.channels_last_3d
    dx = torch.empty(n, c, dd, h, w, dtype=torch.bfloat16).to(memory_format=cl3)
    wt = torch.randn(k, c, *f, dtype=torch.bfloat16).to(memory_format=cl3)
    dy = torch.randn(*output_dims(dx.shape, wt.shape, p, p, s, dil), dtype=torch.bfloat16)
    dy = dy.to(memory_format=cl3)
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tdy, tw = g.tensor_like(dy), g.tensor_like(wt)
    out = g.conv_dgrad(
        tdy,
        tw,
        padding=list(p),
        stride=list(s),
        dilation=list(dil),
        convolution_mode=cudnn.convolution_mode[mode],
    )
    out.set_dim(list(dx.shape)).set_stride(list(dx.stride())).set_output(True)
    out.set_data_type(cudnn.data_type.FLOAT)
    check_engine(g, {tdy: dy, tw: wt}, [out], DGRAD_ID, knobs, n=k * 27)


def test_tma_dgrad_3d_boxes_hold_one_slice():
    cl3 = torch.channels_last_3d
    dy = torch.randn(1, 16, 4, 4, 4, dtype=torch.bfloat16).to(memory_format=cl3)
    wt = torch.randn(16, 16, 3, 3, 3, dtype=torch.bfloat16).to(memory_format=cl3)
    g = cudnn.pygraph()
    tdy, tw = g.tensor_like(dy), g.tensor_like(wt)
    out = g.conv_dgrad(tdy, tw, padding=[1, 1, 1])
    out.set_dim([1, 16, 4, 4, 4]).set_output(True)
    g.validate()
    e = ImplicitGemmDgradEngine()
    for knobs in (dict(SMALL, TMA_IMGS=2), dict(SMALL, SPLIT=2)):
        sup = e.check_config(g.op_graph, EngineConfig.make(e, **knobs), Target())
        assert not sup.ok and "one dx depth slice" in sup.reason


@pytest.mark.parametrize("kind", ["fprop", "dgrad", "wgrad"])
def test_tma_paths_take_a_1x1_filter_with_free_size_one_strides(kind):
    """A 1x1 channels-last filter may come with strides (C, 1, 1, 1) or (C, 1, C, C): the
    same memory. Every direction's TMA path takes both."""
    from opendnn.engines.registry import by_id

    x = torch.randn(2, 64, 7, 7, dtype=torch.bfloat16).to(memory_format=CL)
    dy = torch.randn(2, 128, 7, 7, dtype=torch.bfloat16).to(memory_format=CL)
    w = torch.randn(128, 64, 1, 1, dtype=torch.bfloat16).as_strided((128, 64, 1, 1), (64, 1, 1, 1))
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    if kind == "fprop":
        out = g.conv_fprop(g.tensor_like(x), g.tensor_like(w), padding=[0, 0])
        eid = 3
    elif kind == "dgrad":
        out = g.conv_dgrad(g.tensor_like(dy), g.tensor_like(w), padding=[0, 0])
        out.set_dim(list(x.shape)).set_stride(list(x.stride()))
        eid = DGRAD_ID
    else:
        out = g.conv_wgrad(g.tensor_like(x), g.tensor_like(dy), padding=[0, 0])
        out.set_dim(list(w.shape)).set_stride(list(w.stride()))
        eid = 5
    out.set_output(True)
    g.validate()
    cfgs = by_id(eid).configs(g.op_graph, H100)
    assert any(tma.is_tma(c.knob_dict) for c in cfgs)
