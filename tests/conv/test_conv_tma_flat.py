"""Flat-row TMA tiles (FLAT=1: 1x1 unpadded stride-1 filters) of conv_implicit_gemm and
conv_dgrad_implicit_gemm against the float64 reference through the interpreter: odd
image sizes, channels off the block sizes, a last tile past the pixels, split reductions
(partials summed in order), both modes, fused epilogues into NCHW; and each rule that
keeps a problem off the flat tiles."""

import pytest
import torch
from _util import check_engine, repro

import opendnn.frontend as cudnn
from opendnn.engines.base import EngineConfig, Target
from opendnn.engines.conv.implicit_gemm.engine import ImplicitGemmDgradEngine, ImplicitGemmEngine
from opendnn.engines.conv.tma import _flat_kernels as F

CL = torch.channels_last
H100 = Target("cuda", "H100", (9, 0), 132, 7.1e14, 5e13, 3e12)
FLAT = dict(
    TMA_IMGS=1, TMA_TH=1, TMA_TW=16, BLOCK_N=32, BLOCK_K=16, num_warps=4, num_stages=2, FLAT=1
)

CASES = [  # (N, C, K, H, W, knobs)
    (3, 16, 16, 4, 6, FLAT),
    (2, 24, 48, 5, 7, FLAT),  # K = 1.5 blocks; 70 pixels
    (1, 24, 16, 3, 3, dict(FLAT, TMA_TW=64)),  # one tile larger than the image
    (2, 40, 16, 5, 5, dict(FLAT, SPLIT=2)),  # 3 channel blocks in 2 slices
    (1, 48, 32, 7, 7, dict(FLAT, SPLIT=3, BLOCK_N=32)),
]


def _problem(n, c, k, h, w, f, dt, seed):
    torch.manual_seed(seed)
    x = torch.randn(n, c, h, w, dtype=dt).to(memory_format=CL)
    wt = (torch.randn(k, c, f, f, dtype=dt) * 0.2).to(memory_format=CL)
    dy = torch.randn(n, k, h, w, dtype=dt).to(memory_format=CL)
    return x, wt, dy


@pytest.mark.parametrize("case", CASES, ids=[f"c{i}" for i in range(len(CASES))])
@pytest.mark.parametrize("kind", ["fprop", "dgrad"])
@pytest.mark.parametrize("mode", ["CROSS_CORRELATION", "CONVOLUTION"])
def test_flat_against_reference(case, kind, mode):
    n, c, k, h, w, knobs = case
    f, p, d = 1, 0, 1
    dt = torch.bfloat16 if (n + c) % 2 else torch.float16
    seed = n * c + k + h
    x, wt, dy = _problem(n, c, k, h, w, f, dt, seed)
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    cm = cudnn.convolution_mode[mode]
    tw = g.tensor_like(wt)
    if kind == "fprop":
        tx = g.tensor_like(x)
        out = g.conv_fprop(tx, tw, padding=[p, p], dilation=[d, d], convolution_mode=cm)
        feeds, eid, red = {tx: x, tw: wt}, ImplicitGemmEngine.id, c * f * f
    else:
        tdy = g.tensor_like(dy)
        out = g.conv_dgrad(tdy, tw, padding=[p, p], dilation=[d, d], convolution_mode=cm)
        out.set_dim(list(x.shape)).set_stride(list(x.stride()))
        feeds, eid, red = {tdy: dy, tw: wt}, ImplicitGemmDgradEngine.id, k * f * f
    out.set_output(True).set_data_type(cudnn.data_type.FLOAT)
    check_engine(
        g,
        feeds,
        [out],
        eid,
        knobs,
        n=red,
        msg=repro(
            f"conv_{kind} flat",
            [tuple(x.shape), tuple(wt.shape)],
            str(dt),
            seed,
            mode=mode,
            pad=p,
            dilation=d,
            knobs=knobs,
        ),
    )


@pytest.mark.parametrize("split", [1, 2])
def test_flat_fused_epilogues_into_nchw(split):
    """y = relu(conv(x, w) + bias) and dx = relu_backward(dgrad(dy, w), x), both stored
    bf16 into NCHW tensors through the epilogue's pointers (after the partials' sum when
    split)."""
    x, wt, dy = _problem(2, 16, 16, 5, 6, 1, torch.bfloat16, 11 + split)
    knobs = dict(FLAT, SPLIT=split)
    bias = torch.randn(1, 16, 1, 1, dtype=torch.bfloat16)
    g = cudnn.pygraph(
        intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT
    )
    tx, tw, tb = g.tensor_like(x), g.tensor_like(wt), g.tensor_like(bias)
    y = g.relu(g.bias(g.conv_fprop(tx, tw, padding=[0, 0]), tb))
    y.set_output(True).set_data_type(cudnn.data_type.BFLOAT16).set_stride([16 * 30, 30, 6, 1])
    got = check_engine(g, {tx: x, tw: wt, tb: bias}, [y], ImplicitGemmEngine.id, knobs, n=16)
    assert got[y].stride() == (480, 30, 6, 1)
    xn = x.contiguous()  # NCHW
    g = cudnn.pygraph(
        intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT
    )
    tdy, tw, tx = g.tensor_like(dy), g.tensor_like(wt), g.tensor_like(xn)
    dgrad = (
        g.conv_dgrad(tdy, tw, padding=[0, 0]).set_dim(list(xn.shape)).set_stride(list(xn.stride()))
    )
    dx = g.relu_backward(dgrad, tx).set_output(True).set_data_type(cudnn.data_type.BFLOAT16)
    got = check_engine(g, {tdy: dy, tw: wt, tx: xn}, [dx], ImplicitGemmDgradEngine.id, knobs, n=16)
    assert got[dx].stride() == xn.stride()


@pytest.mark.parametrize("kind", ["fprop", "dgrad"])
@pytest.mark.parametrize(
    "change,reason",
    [
        (dict(stride=2), "1x1 unpadded stride-1"),
        (dict(pad=1), "1x1 unpadded stride-1"),
        (dict(f=3, pad=1), "1x1 unpadded stride-1"),
        (dict(layout="nchw"), "packed NHWC"),
        (dict(knobs=dict(FLAT, TMA_TH=4)), "TMA_IMGS and TMA_TH must be 1"),
        (
            dict(knobs=dict(FLAT, TMA_TW=128, BLOCK_N=256, BLOCK_K=128, num_stages=4)),
            "exceed shared memory",
        ),
    ],
)
def test_flat_declines_with_a_reason(kind, change, reason):
    s, p, f = change.get("stride", 1), change.get("pad", 0), change.get("f", 1)
    x = torch.randn(1, 16, 8, 8, dtype=torch.bfloat16)
    wt = torch.randn(16, 16, f, f, dtype=torch.bfloat16).to(memory_format=CL)
    o = (8 + 2 * p - f) // s + 1
    dy = torch.randn(1, 16, o, o, dtype=torch.bfloat16)
    if change.get("layout") != "nchw":
        x, dy = x.to(memory_format=CL), dy.to(memory_format=CL)
    g = cudnn.pygraph()
    tw = g.tensor_like(wt)
    if kind == "fprop":
        g.conv_fprop(g.tensor_like(x), tw, padding=[p, p], stride=[s, s]).set_output(True)
        e = ImplicitGemmEngine()
    else:
        g.conv_dgrad(g.tensor_like(dy), tw, padding=[p, p], stride=[s, s]).set_dim(
            [1, 16, 8, 8]
        ).set_output(True)
        e = ImplicitGemmDgradEngine()
    g.validate()
    sup = e.check_config(g.op_graph, EngineConfig.make(e, **change.get("knobs", FLAT)), Target())
    assert not sup.ok and reason in sup.reason, sup.reason


@pytest.mark.parametrize("f", [1, 3])
def test_flat_configs_offered_for_1x1_only(f):
    """On ResNet's 7x7, 512-channel layers both directions offer flat tiles for the 1x1
    filter (no padding rows: 1568 pixels in 13 tiles of 128, where 8x8 boxes hold 49
    pixels in 64) but not for the 3x3 one; there the split box configs are a family of
    their own, timed by benchmark mode."""
    x, wt, dy = _problem(32, 512, 512, 7, 7, f, torch.bfloat16, 0)
    p = f // 2
    for kind, e in (("fprop", ImplicitGemmEngine()), ("dgrad", ImplicitGemmDgradEngine())):
        g = cudnn.pygraph()
        tw = g.tensor_like(wt)
        if kind == "fprop":
            g.conv_fprop(g.tensor_like(x), tw, padding=[p, p]).set_output(True)
        else:
            g.conv_dgrad(g.tensor_like(dy), tw, padding=[p, p]).set_dim(list(x.shape)).set_output(
                True
            )
        g.validate()
        cfgs = e.configs(g.op_graph, H100)
        fams = {e.family(c) for c in cfgs}
        assert (f"{e.name}:tma:flat" in fams) == (f == 1), fams
        assert f"{e.name}:tma:split" in fams, fams
        flat = [c for c in cfgs if c.knob_dict.get("FLAT")]
        assert all(c.knob_dict["TMA_IMGS"] == c.knob_dict["TMA_TH"] == 1 for c in flat)
        assert F.pixels(e._analyze(g.op_graph).geo) == 1568
