"""The NHWC fast path of conv_implicit_gemm (TMA boxes, persistent grid) against the
float64 reference, through the interpreter's tensor descriptors: stride 1 and 2, dilation,
padding that the copy engine's zero fill supplies, partial boxes at every edge, both
modes, fused epilogues; and each rule that keeps a problem off the path."""

import pytest
import torch
from _util import check_engine, repro

import opendnn.frontend as cudnn
from opendnn.engines.base import EngineConfig, Target
from opendnn.engines.conv.implicit_gemm.engine import ImplicitGemmEngine

CONV_ID = ImplicitGemmEngine.id
CL = torch.channels_last
SMALL = dict(TMA_IMGS=1, TMA_TH=4, TMA_TW=8, BLOCK_N=32, BLOCK_K=16, num_warps=4, num_stages=2)

CASES = [  # (N, C, K, H, W, filt, stride, pad, dilation, knobs)
    (2, 16, 24, 5, 7, 3, 1, 1, 1, SMALL),
    (1, 8, 8, 9, 4, 1, 1, 0, 1, SMALL),
    (3, 24, 20, 6, 6, 3, 1, 2, 2, dict(SMALL, TMA_IMGS=2, TMA_TH=4, TMA_TW=8)),
    (1, 8, 40, 3, 3, 3, 1, 1, 1, dict(SMALL, TMA_IMGS=4, BLOCK_N=64)),
    (1, 64, 16, 8, 6, 3, 2, 1, 1, dict(SMALL, BLOCK_K=64)),
    (2, 64, 8, 10, 10, 5, 2, 2, 1, dict(SMALL, BLOCK_K=32)),
    (1, 64, 8, 4, 4, 1, 2, 0, 1, dict(SMALL, BLOCK_K=64)),
]


def _problem(n, c, k, h, w, f, dt, seed):
    torch.manual_seed(seed)
    x = torch.randn(n, c, h, w, dtype=dt).to(memory_format=CL)
    wt = (torch.randn(k, c, f, f, dtype=dt) * 0.2).to(memory_format=CL)
    return x, wt


@pytest.mark.parametrize("case", CASES, ids=[f"c{i}" for i in range(len(CASES))])
@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("mode", ["CROSS_CORRELATION", "CONVOLUTION"])
def test_tma_fprop_against_reference(case, dt, mode):
    n, c, k, h, w, f, s, p, d, knobs = case
    x, wt = _problem(n, c, k, h, w, f, dt, n * c + k)
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tx, tw = g.tensor_like(x), g.tensor_like(wt)
    y = g.conv_fprop(
        tx,
        tw,
        padding=[p, p],
        stride=[s, s],
        dilation=[d, d],
        convolution_mode=cudnn.convolution_mode[mode],
    )
    y.set_output(True).set_data_type(cudnn.data_type.FLOAT)
    check_engine(
        g,
        {tx: x, tw: wt},
        [y],
        CONV_ID,
        knobs,
        n=c * f * f,
        msg=repro(
            "conv_fprop tma", [tuple(x.shape), tuple(wt.shape)], str(dt), n * c + k, mode=mode
        ),
    )


@pytest.mark.parametrize("case", CASES, ids=[f"c{i}" for i in range(len(CASES))])
def test_tma_fprop_float32_as_tf32(case, monkeypatch):
    """float32 operands with TF32 allowed take the same boxes (both operands K-major) with
    BLOCK_K <= 32; the interpreter's dot is IEEE float32."""
    from opendnn import backends

    monkeypatch.setattr(backends, "allow_tf32", True)
    n, c, k, h, w, f, s, p, d, knobs = case
    knobs = dict(knobs, BLOCK_K=min(knobs["BLOCK_K"], 32))
    x, wt = _problem(n, c, k, h, w, f, torch.float32, n * c + k + 1)
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tx, tw = g.tensor_like(x), g.tensor_like(wt)
    y = g.conv_fprop(tx, tw, padding=[p, p], stride=[s, s], dilation=[d, d])
    y.set_output(True).set_data_type(cudnn.data_type.FLOAT)
    check_engine(g, {tx: x, tw: wt}, [y], CONV_ID, knobs, n=c * f * f)


@pytest.mark.parametrize(
    "tf32,knobs,reason",
    [
        (False, SMALL, "half or bfloat16"),
        (True, dict(SMALL, BLOCK_K=64), "BLOCK_K <= 32"),
    ],
)
def test_tma_fprop_float32_rules(tf32, knobs, reason, monkeypatch):
    from opendnn import backends

    monkeypatch.setattr(backends, "allow_tf32", tf32)
    x, wt = _problem(1, 64, 16, 8, 8, 3, torch.float32, 3)
    g = cudnn.pygraph()
    y = g.conv_fprop(g.tensor_like(x), g.tensor_like(wt), padding=[1, 1])
    y.set_output(True)
    g.validate()
    e = ImplicitGemmEngine()
    sup = e.check_config(g.op_graph, EngineConfig.make(e, **knobs), Target())
    assert not sup.ok and reason in sup.reason, sup.reason


def test_tma_epilogue_bias_residual_relu_into_nchw():
    x, wt = _problem(2, 16, 12, 6, 5, 3, torch.bfloat16, 5)
    b = torch.randn(1, 12, 1, 1, dtype=torch.bfloat16)
    z = torch.randn(2, 12, 6, 5, dtype=torch.bfloat16)  # NCHW residual
    g = cudnn.pygraph(
        intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT
    )
    tx, tw, tb, tz = (g.tensor_like(t) for t in (x, wt, b, z))
    y = g.relu(g.add(g.bias(g.conv_fprop(tx, tw, padding=[1, 1]), tb), tz))
    y.set_output(True)
    out = check_engine(g, {tx: x, tw: wt, tb: b, tz: z}, [y], CONV_ID, SMALL, n=144)
    assert out[y].dtype == torch.bfloat16


def _support(x, wt, **conv):
    g = cudnn.pygraph()
    tx, tw = g.tensor_like(x), g.tensor_like(wt)
    g.conv_fprop(tx, tw, **conv).set_output(True)
    g.validate()
    e = ImplicitGemmEngine()
    return e.check_config(g.op_graph, EngineConfig.make(e, **SMALL), Target())


@pytest.mark.parametrize(
    "change,reason",
    [
        (dict(layout="nchw"), "packed NHWC image"),
        (dict(dt=torch.float32), "half or bfloat16"),
        (dict(c=4), "16-byte aligned rows"),
        (dict(stride=3), "stride 1, or stride 2"),
        (dict(stride=2, h=7), "even image height"),
        (dict(stride=2, c=32), "multiple of 64"),
        (dict(groups=2), "one group"),
    ],
)
def test_tma_path_declines_with_a_reason(change, reason):
    dt = change.get("dt", torch.bfloat16)
    c, h = change.get("c", 64), change.get("h", 8)
    groups = change.get("groups", 1)
    x = torch.randn(1, c, h, 8, dtype=dt)
    wt = torch.randn(8, c // groups, 3, 3, dtype=dt)
    if change.get("layout") != "nchw":
        x, wt = x.to(memory_format=CL), wt.to(memory_format=CL)
    sup = _support(x, wt, padding=[1, 1], stride=[change.get("stride", 1)] * 2)
    assert not sup.ok and reason in sup.reason


def test_tma_knobs_do_not_mix_with_the_gather_tile():
    x = torch.randn(1, 16, 6, 6, dtype=torch.bfloat16).to(memory_format=CL)
    wt = torch.randn(8, 16, 3, 3, dtype=torch.bfloat16).to(memory_format=CL)
    g = cudnn.pygraph()
    tx, tw = g.tensor_like(x), g.tensor_like(wt)
    g.conv_fprop(tx, tw, padding=[1, 1]).set_output(True)
    g.validate()
    e = ImplicitGemmEngine()
    sup = e.check_config(g.op_graph, EngineConfig.make(e, BLOCK_M=64, **SMALL), Target())
    assert not sup.ok and "BLOCK_M belong(s) to the gather path" in sup.reason


# ---- phase-packed images (PACK=1): small C and strided, any layout of x and w ---------------
PACKED = dict(
    TMA_IMGS=1, TMA_TH=4, TMA_TW=8, BLOCK_N=32, BLOCK_K=16, num_warps=4, num_stages=2, PACK=1
)

PACKED_CASES = [  # (N, C, K, H, W, filt, stride, pre, post, layout, knobs)
    (2, 3, 16, 15, 13, (7, 7), (2, 2), (3, 3), (3, 3), "nhwc", PACKED),  # the stem
    (1, 3, 8, 12, 12, (7, 7), (2, 2), (3, 3), (3, 3), "nchw", PACKED),
    (2, 4, 12, 9, 10, (3, 3), (2, 2), (1, 1), (1, 1), "nchw", dict(PACKED, TMA_IMGS=2)),
    (1, 3, 8, 8, 9, (5, 5), (1, 1), (2, 2), (2, 2), "nhwc", dict(PACKED, BLOCK_K=32)),
    (2, 3, 20, 11, 7, (3, 5), (2, 1), (0, 2), (2, 1), "nchw", dict(PACKED, BLOCK_N=64)),
    (1, 2, 8, 10, 10, (4, 4), (3, 3), (1, 2), (2, 0), "nhwc", PACKED),
]


@pytest.mark.parametrize("case", PACKED_CASES, ids=[f"p{i}" for i in range(len(PACKED_CASES))])
@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("mode", ["CROSS_CORRELATION", "CONVOLUTION"])
def test_tma_packed_fprop_against_reference(case, dt, mode):
    n, c, k, h, w, f, s, pre, post, layout, knobs = case
    torch.manual_seed(n * c + k + h)
    x = torch.randn(n, c, h, w, dtype=dt)
    wt = torch.randn(k, c, *f, dtype=dt) * 0.2
    if layout == "nhwc":
        x, wt = x.to(memory_format=CL), wt.to(memory_format=CL)
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tx, tw = g.tensor_like(x), g.tensor_like(wt)
    y = g.conv_fprop(
        tx,
        tw,
        pre_padding=list(pre),
        post_padding=list(post),
        stride=list(s),
        convolution_mode=cudnn.convolution_mode[mode],
    )
    y.set_output(True).set_data_type(cudnn.data_type.FLOAT)
    check_engine(
        g,
        {tx: x, tw: wt},
        [y],
        CONV_ID,
        knobs,
        n=c * f[0] * f[1],
        msg=repro(
            "conv_fprop tma packed",
            [tuple(x.shape), tuple(wt.shape)],
            str(dt),
            n * c + k + h,
            mode=mode,
        ),
    )


def test_tma_packed_bias_relu_epilogue_into_nchw():
    torch.manual_seed(11)
    x = torch.randn(2, 3, 14, 14, dtype=torch.bfloat16).to(memory_format=CL)
    wt = (torch.randn(16, 3, 7, 7, dtype=torch.bfloat16) * 0.2).to(memory_format=CL)
    b = torch.randn(1, 16, 1, 1, dtype=torch.bfloat16)
    g = cudnn.pygraph(
        intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT
    )
    tx, tw, tb = (g.tensor_like(t) for t in (x, wt, b))
    y = g.relu(g.bias(g.conv_fprop(tx, tw, padding=[3, 3], stride=[2, 2]), tb))
    y.set_output(True).set_stride([16 * 7 * 7, 7 * 7, 7, 1])
    out = check_engine(g, {tx: x, tw: wt, tb: b}, [y], CONV_ID, PACKED, n=147)
    assert out[y].dtype == torch.bfloat16


def test_tma_packed_workspace_and_heuristic_configs():
    """The stem's TMA configs on Hopper are packed ones, with a workspace holding xp and wp."""
    from opendnn.engines.conv.tma import packed as tma_packed

    x = torch.randn(32, 3, 224, 224, dtype=torch.bfloat16).to(memory_format=CL)
    wt = torch.randn(64, 3, 7, 7, dtype=torch.bfloat16).to(memory_format=CL)
    g = cudnn.pygraph()
    tx, tw = g.tensor_like(x), g.tensor_like(wt)
    g.conv_fprop(tx, tw, padding=[3, 3], stride=[2, 2]).set_output(True)
    g.validate()
    e = ImplicitGemmEngine()
    h100 = Target("cuda", "H100", (9, 0), 132, 7.1e14, 5e13, 3e12)
    tma = [c for c in e.configs(g.op_graph, h100) if "TMA_TH" in c.knob_dict]
    assert tma and all(c.knob_dict["PACK"] == 1 for c in tma)
    pk = tma_packed.packing(e._analyze(g.op_graph).geo, 2)
    assert pk.geo.filt == (4, 4) and pk.geo.c_per_group == 16 and pk.geo.in_dims == (115, 115)
    assert (
        e.workspace_size(g.op_graph, tma[0], h100) == pk.workspace_bytes >= 2 * 32 * 115 * 115 * 16
    )


@pytest.mark.parametrize(
    "change,reason",
    [
        (dict(dilation=2), "phase packing takes no dilation"),
        (dict(c=32, stride=2), "it pays only up to 64"),
        (dict(dt=torch.float32), "half or bfloat16"),
    ],
)
def test_tma_packed_declines(change, reason):
    c, dt = change.get("c", 3), change.get("dt", torch.bfloat16)
    x = torch.randn(1, c, 12, 12, dtype=dt).to(memory_format=CL)
    wt = torch.randn(8, c, 3, 3, dtype=dt).to(memory_format=CL)
    g = cudnn.pygraph()
    tx, tw = g.tensor_like(x), g.tensor_like(wt)
    g.conv_fprop(
        tx,
        tw,
        padding=[1, 1],
        stride=[change.get("stride", 1)] * 2,
        dilation=[change.get("dilation", 1)] * 2,
    ).set_output(True)
    g.validate()
    e = ImplicitGemmEngine()
    sup = e.check_config(g.op_graph, EngineConfig.make(e, **PACKED), Target())
    assert not sup.ok and reason in sup.reason


# ---- split reduction (SPLIT > 1): float32 partial tiles, summed in slice order ------------
@pytest.mark.parametrize(
    "case",
    [
        (2, 16, 24, 5, 7, 3, 1, 1, 2),
        (1, 64, 16, 8, 6, 3, 2, 1, 3),
        (3, 8, 40, 3, 3, 3, 1, 1, 4),
        (1, 24, 20, 6, 6, 1, 1, 0, 3),
    ],
    ids=["s1-split2", "s2-split3", "imgs-split4", "1x1-split3"],
)
@pytest.mark.parametrize("mode", ["CROSS_CORRELATION", "CONVOLUTION"])
def test_tma_split_fprop_against_reference(case, mode):
    n, c, k, h, w, f, s, p, split = case
    x, wt = _problem(n, c, k, h, w, f, torch.bfloat16, n * c + k + split)
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tx, tw = g.tensor_like(x), g.tensor_like(wt)
    y = g.conv_fprop(
        tx, tw, padding=[p, p], stride=[s, s], convolution_mode=cudnn.convolution_mode[mode]
    )
    y.set_output(True).set_data_type(cudnn.data_type.FLOAT)
    knobs = dict(SMALL, SPLIT=split, TMA_IMGS=2 if n > 1 else 1, BLOCK_K=64 if s == 2 else 16)
    check_engine(
        g,
        {tx: x, tw: wt},
        [y],
        CONV_ID,
        knobs,
        n=c * f * f,
        msg=repro(
            "conv_fprop tma split",
            [tuple(x.shape), tuple(wt.shape)],
            "bf16",
            n * c + k + split,
            mode=mode,
        ),
    )


def test_tma_split_bias_relu_into_nchw_and_workspace():
    from opendnn.engines.conv.tma import _kernels as T
    from opendnn.engines.conv.tma import engine as tma

    x, wt = _problem(2, 16, 12, 6, 5, 3, torch.bfloat16, 9)
    b = torch.randn(1, 12, 1, 1, dtype=torch.bfloat16)
    g = cudnn.pygraph(
        intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT
    )
    tx, tw, tb = (g.tensor_like(t) for t in (x, wt, b))
    y = g.relu(g.bias(g.conv_fprop(tx, tw, padding=[1, 1]), tb))
    y.set_output(True).set_stride([12 * 30, 30, 5, 1])
    knobs = dict(SMALL, SPLIT=3)
    out = check_engine(g, {tx: x, tw: wt, tb: b}, [y], CONV_ID, knobs, n=144)
    assert out[y].dtype == torch.bfloat16
    e = ImplicitGemmEngine()
    cfg = EngineConfig.make(e, **knobs)
    kn = tma.FpropTmaKnobs(**knobs)
    assert (
        e.workspace_size(g.op_graph, cfg, Target())
        == 4 * 3 * T.tiles(e._analyze(g.op_graph).geo, kn) * kn.block_m * kn.BLOCK_N
        > 0
    )


def test_tma_split_declines_packed():
    x = torch.randn(1, 3, 12, 12, dtype=torch.bfloat16).to(memory_format=CL)
    wt = torch.randn(8, 3, 7, 7, dtype=torch.bfloat16).to(memory_format=CL)
    g = cudnn.pygraph()
    tx, tw = g.tensor_like(x), g.tensor_like(wt)
    g.conv_fprop(tx, tw, padding=[3, 3], stride=[2, 2]).set_output(True)
    g.validate()
    e = ImplicitGemmEngine()
    sup = e.check_config(g.op_graph, EngineConfig.make(e, **dict(PACKED, SPLIT=2)), Target())
    assert not sup.ok and "SPLIT applies to the direct boxes" in sup.reason


# 3-D: (N, C, K, D, H, W, filt, stride, pad, dilation, knobs); tiles over the N * OD
# output depth slices, x's slice n * D + dz per depth tap (image -1 in the padding)
CASES_3D = [
    (2, 16, 24, 4, 5, 6, (3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1), SMALL),
    (1, 64, 16, 6, 6, 8, (3, 3, 3), (2, 2, 2), (1, 1, 1), (1, 1, 1), dict(SMALL, BLOCK_K=64)),
    (1, 8, 16, 7, 5, 6, (3, 2, 3), (2, 1, 1), (2, 0, 1), (2, 1, 1), SMALL),
    (2, 16, 8, 3, 4, 4, (3, 3, 3), (1, 1, 1), (2, 2, 2), (1, 1, 1), SMALL),  # pad > radius
]


@pytest.mark.parametrize("case", CASES_3D, ids=[f"d{i}" for i in range(len(CASES_3D))])
@pytest.mark.parametrize("mode", ["CROSS_CORRELATION", "CONVOLUTION"])
def test_tma_fprop_3d_against_reference(case, mode):
    n, c, k, dd, h, w, f, s, p, dil, knobs = case
    torch.manual_seed(n + c + k + dd + h)
    cl3 = torch.channels_last_3d
    x = torch.randn(n, c, dd, h, w, dtype=torch.bfloat16).to(memory_format=cl3)
    wt = (torch.randn(k, c, *f, dtype=torch.bfloat16) * 0.2).to(memory_format=cl3)
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tx, tw = g.tensor_like(x), g.tensor_like(wt)
    y = g.conv_fprop(
        tx,
        tw,
        padding=list(p),
        stride=list(s),
        dilation=list(dil),
        convolution_mode=cudnn.convolution_mode[mode],
    )
    y.set_output(True).set_data_type(cudnn.data_type.FLOAT)
    check_engine(g, {tx: x, tw: wt}, [y], CONV_ID, knobs, n=c * 27)


def test_tma_fprop_3d_boxes_hold_one_slice():
    cl3 = torch.channels_last_3d
    x = torch.randn(1, 16, 4, 4, 4, dtype=torch.bfloat16).to(memory_format=cl3)
    wt = torch.randn(16, 16, 3, 3, 3, dtype=torch.bfloat16).to(memory_format=cl3)
    g = cudnn.pygraph()
    y = g.conv_fprop(g.tensor_like(x), g.tensor_like(wt), padding=[1, 1, 1])
    y.set_output(True)
    g.validate()
    e = ImplicitGemmEngine()
    for knobs in (dict(SMALL, TMA_IMGS=2), dict(SMALL, SPLIT=2)):
        sup = e.check_config(g.op_graph, EngineConfig.make(e, **knobs), Target())
        assert not sup.ok and "one output depth slice" in sup.reason, sup.reason


def test_tma_fprop_3d_epilogue_bias_residual_relu_into_ncdhw():
    """The 3-D tile's epilogue indices (n, od, oh, ow): bias, an NCDHW residual, relu."""
    cl3 = torch.channels_last_3d
    torch.manual_seed(9)
    x = torch.randn(2, 16, 4, 5, 6, dtype=torch.bfloat16).to(memory_format=cl3)
    wt = (torch.randn(24, 16, 3, 3, 3, dtype=torch.bfloat16) * 0.2).to(memory_format=cl3)
    b = torch.randn(1, 24, 1, 1, 1, dtype=torch.bfloat16)
    z = torch.randn(2, 24, 4, 5, 6, dtype=torch.bfloat16)
    g = cudnn.pygraph(
        intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT
    )
    tx, tw, tb, tz = (g.tensor_like(t) for t in (x, wt, b, z))
    y = g.relu(g.add(g.bias(g.conv_fprop(tx, tw, padding=[1, 1, 1]), tb), tz))
    y.set_output(True)
    check_engine(g, {tx: x, tw: wt, tb: b, tz: z}, [y], CONV_ID, SMALL, n=16 * 27)
