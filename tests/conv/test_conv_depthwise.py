"""The depthwise engine (conv_depthwise, engines/conv/depthwise/) through the interpreter
against the float64 reference (NaN-poisoned outputs) and PyTorch: 1-D, 2-D and 3-D,
channel multipliers 1 and 2, strides 1 and 2, dilation, padding wider than the kernel's
radius and causal (pre only) padding, NCHW, NHWC and non-packed strides, float / half /
bfloat16, a fused bias + relu epilogue, zero-size batches; and what it declines."""

import pytest
import torch
import torch.nn.functional as F
from _util import assert_close, check_engine, conv_backward_graph, repro, seed_for
from _util import graph_tensor as _tensor

import opendnn.frontend as cudnn
from opendnn.engines.base import Target
from opendnn.engines.conv.depthwise.engine import PLACE_COST, DepthwiseConvEngine

ID = DepthwiseConvEngine.id
_TORCH_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}

CASES = [  # (x dims, multiplier, filter, stride, pre, post, dilation, layout)
    ((2, 5, 9, 7), 1, (3, 3), (1, 1), (1, 1), (1, 1), (1, 1), "nchw"),
    ((2, 6, 8, 9), 1, (5, 5), (2, 2), (2, 2), (2, 2), (1, 1), "nhwc"),
    ((1, 4, 11, 10), 2, (3, 3), (1, 2), (1, 1), (1, 1), (1, 1), "nhwc"),  # multiplier 2
    ((2, 3, 7, 6), 1, (7, 7), (1, 1), (3, 3), (3, 3), (1, 1), "strided"),
    ((1, 5, 6, 6), 1, (3, 3), (1, 1), (4, 2), (4, 2), (2, 2), "nchw"),  # pad > radius, dil 2
    ((3, 7, 13), 1, (4,), (1,), (3,), (0,), (1,), "nchw"),  # causal 1-D
    ((2, 9, 10), 1, (3,), (2,), (1,), (1,), (1,), "nhwc"),
    ((1, 3, 5, 6, 4), 1, (3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1), (1, 1, 1), "nchw"),
    ((1, 1, 5, 5), 1, (3, 3), (1, 1), (1, 1), (1, 1), (1, 1), "nchw"),  # one channel, G=1
]


def _stored(t: torch.Tensor, layout: str) -> torch.Tensor:
    if layout == "nhwc":
        return t.movedim(1, -1).contiguous().movedim(-1, 1)
    if layout == "strided":
        big = torch.randn(*t.shape[:-1], t.shape[-1] * 2, dtype=t.dtype)
        big[..., ::2] = t
        return big[..., ::2]
    return t


def _graph(x, w, stride, pre, post, dilation, bias=None):
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tx, tw = _tensor(g, x), _tensor(g, w)
    y = g.conv_fprop(
        tx,
        tw,
        pre_padding=list(pre),
        post_padding=list(post),
        stride=list(stride),
        dilation=list(dilation),
    )
    feeds = {tx: x, tw: w}
    if bias is not None:
        tb = _tensor(g, bias)
        y = g.relu(g.bias(y, tb))
        feeds[tb] = bias
    y.set_output(True).set_data_type(
        {
            torch.float32: cudnn.data_type.FLOAT,
            torch.float16: cudnn.data_type.HALF,
            torch.bfloat16: cudnn.data_type.BFLOAT16,
        }[x.dtype]
    )
    return g, feeds, y


def _torch(x, w, stride, pre, post, dilation, bias=None):
    d = x.dim() - 2
    pads = [p for a, b in zip(reversed(pre), reversed(post)) for p in (a, b)]
    y = _TORCH_CONV[d](
        F.pad(x.double(), pads), w.double(), stride=stride, dilation=dilation, groups=x.shape[1]
    )
    return y if bias is None else torch.relu(y + bias.double())


@pytest.mark.parametrize("case", CASES, ids=[f"c{i}" for i in range(len(CASES))])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_against_reference_and_pytorch(case, dtype, request):
    xdims, mult, filt, stride, pre, post, dil, layout = case
    gen = torch.Generator().manual_seed(seed_for(request.node.name))
    c = xdims[1]
    x = _stored(torch.randn(xdims, generator=gen).to(dtype), layout)
    w = _stored(torch.randn((c * mult, 1, *filt), generator=gen).to(dtype), layout)
    g, feeds, y = _graph(x, w, stride, pre, post, dil)
    taps = 1
    for f in filt:
        taps *= f
    msg = repro("conv_depthwise", [xdims, tuple(w.shape)], str(dtype), 0, layout=layout)
    out = check_engine(g, feeds, [y], ID, n=taps, msg=msg)
    assert_close(out[y], _torch(x, w, stride, pre, post, dil), dtype, n=taps, msg=msg)


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_fused_bias_relu_epilogue(layout):
    gen = torch.Generator().manual_seed(5)
    x = _stored(torch.randn((2, 6, 7, 8), generator=gen), layout)
    w = _stored(torch.randn((6, 1, 3, 3), generator=gen), layout)
    b = torch.randn((1, 6, 1, 1), generator=gen)
    g, feeds, y = _graph(x, w, (1, 1), (1, 1), (1, 1), (1, 1), bias=b)
    out = check_engine(g, feeds, [y], ID, n=9)
    assert_close(out[y], _torch(x, w, (1, 1), (1, 1), (1, 1), (1, 1), bias=b), n=9)


def test_zero_size_batch_is_declined_by_every_conv_engine_with_its_reason():
    x, w = torch.empty(0, 4, 5, 5), torch.randn(4, 1, 3, 3)
    g, _, _ = _graph(x, w, (1, 1), (1, 1), (1, 1), (1, 1))
    g.validate()
    s = DepthwiseConvEngine().check_support(g.op_graph, Target())
    assert not s.ok and "empty convolution" in s.reason


@pytest.mark.parametrize(
    "xdims,wdims,why",
    [
        ((1, 8, 5, 5), (8, 2, 3, 3), "one input channel per group"),  # C/G = 2
        ((1, 4, 5, 5), (6, 4, 3, 3), "one input channel per group"),  # dense
    ],
)
def test_declines_what_is_not_depthwise(xdims, wdims, why):
    g, _, _ = _graph(torch.randn(xdims), torch.randn(wdims), (1, 1), (1, 1), (1, 1), (1, 1))
    g.validate()
    s = DepthwiseConvEngine().check_support(g.op_graph, Target())
    assert not s.ok and why in s.reason, s.reason


def test_offered_for_the_benchmark_depthwise_layers_on_h100():
    """Every depthwise layer of the benchmark sets gets this engine's configs on an H100
    (NHWC: channel-wide tiles; NCHW: pixel-wide), ranked by the memory-bound model."""
    from opendnn.bench import conv as bench_conv
    from opendnn.engines.conv import shapes

    h100 = Target(
        device="cuda",
        name="H100",
        capability=(9, 0),
        num_sms=132,
        peak_flops_fp16=990e12,
        bandwidth=3.0e12,
    )
    e = DepthwiseConvEngine()
    seen = 0
    for name in ("mobilenetv3", "convnext_t", "conv1d"):
        for lay in shapes.BENCH_SETS[name]:
            if not lay.depthwise:
                continue
            for variant in ("nhwc-bf16", "nchw-tf32"):
                x, w, b, dy = bench_conv.set_tensors(lay, variant, device="meta")
                g, _, _, _ = bench_conv._graph("fprop", x, w, b, dy, lay)
                g.validate()
                cfgs = e.configs(g.op_graph, h100)
                assert cfgs, (name, lay.name, variant)
                first = cfgs[0].knob_dict
                if variant == "nhwc-bf16":  # channel-wide tiles: >= 32 bytes along C
                    assert first["BLOCK_N"] >= 16, (lay.name, variant, first)
                else:  # pixel-wide tiles
                    assert first["BLOCK_M"] >= 64, (lay.name, variant, first)
                # the model: x, w and y moved once at the bandwidth (these layers are far
                # below the CUDA cores' rate), plus a launch; tiles past the edges cost extra,
                # and each place down the measured order PLACE_COST
                moved = x.element_size() * (x.numel() + w.numel() + dy.numel())
                floor = moved / 3.0e12 + 4e-6
                place = 1 + PLACE_COST * e._place(g.op_graph, cfgs[0], h100)
                t = e.estimate_seconds(g.op_graph, cfgs[0], h100) / place
                assert floor * 0.99 < t < 1.5 * floor, (lay.name, variant, t, floor)
                seen += 1
    assert seen >= 20


# ---- backward data (conv_dgrad_depthwise) --------------------------------------------------
DGRAD_ID = 42


def _dgrad_graph(dy, w, xdims, xlayout_like, stride, pre, post, dilation, mode=None):
    return conv_backward_graph(
        "dgrad", dy, w, xdims, xlayout_like.stride(), stride, pre, post, dilation, mode
    )


@pytest.mark.parametrize("case", CASES, ids=[f"c{i}" for i in range(len(CASES))])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dgrad_against_reference_and_pytorch(case, dtype, request):
    xdims, mult, filt, stride, pre, post, dil, layout = case
    gen = torch.Generator().manual_seed(seed_for(request.node.name))
    c = xdims[1]
    x = torch.randn(xdims, generator=gen).double()
    w = _stored(torch.randn((c * mult, 1, *filt), generator=gen).to(dtype), layout)
    xr = x.clone().requires_grad_()
    y = _torch(xr, w, stride, pre, post, dil)
    dy = _stored(torch.randn(y.shape, generator=gen).to(dtype), layout)
    (dx_ref,) = torch.autograd.grad(y, xr, dy.double())
    like = _stored(torch.empty(xdims), layout)
    g, feeds, dx = _dgrad_graph(dy, w, xdims, like, stride, pre, post, dil)
    taps = mult
    for f in filt:
        taps *= f
    msg = repro("conv_dgrad_depthwise", [tuple(dy.shape), tuple(w.shape)], str(dtype), 0)
    out = check_engine(g, feeds, [dx], DGRAD_ID, n=taps, msg=msg)
    assert_close(out[dx], dx_ref, dtype, n=taps, msg=msg)


def test_dgrad_convolution_mode_flips_the_filter():
    gen = torch.Generator().manual_seed(11)
    dy, w = torch.randn((2, 4, 6, 5), generator=gen), torch.randn((4, 1, 3, 2), generator=gen)
    like = torch.empty(2, 4, 8, 6)
    g, feeds, dx = _dgrad_graph(
        dy,
        w,
        (2, 4, 8, 6),
        like,
        (1, 1),
        (0, 0),
        (0, 0),
        (1, 1),
        mode=cudnn.convolution_mode.CONVOLUTION,
    )
    out = check_engine(g, feeds, [dx], DGRAD_ID, n=6)
    xr = torch.zeros(2, 4, 8, 6, dtype=torch.float64, requires_grad=True)
    y = F.conv2d(xr, w.double().flip(-1, -2), groups=4)
    (ref,) = torch.autograd.grad(y, xr, dy.double())
    assert_close(out[dx], ref, n=6)


def test_dgrad_declines_large_multipliers_with_reason():
    from opendnn.engines.conv.depthwise.engine import DepthwiseDgradEngine

    dy, w = torch.randn(1, 36, 5, 5), torch.randn(36, 1, 3, 3)  # multiplier 9 on C = 4
    g, _, _ = _dgrad_graph(
        dy, w, (1, 4, 5, 5), torch.empty(1, 4, 5, 5), (1, 1), (1, 1), (1, 1), (1, 1)
    )
    g.validate()
    s = DepthwiseDgradEngine().check_support(g.op_graph, Target())
    assert not s.ok and "multiplier 9" in s.reason


# ---- backward filter (conv_wgrad_depthwise) ------------------------------------------------
WGRAD_ID = 43


def _wgrad_graph(x, dy, wdims, wlike, stride, pre, post, dilation, mode=None):
    return conv_backward_graph(
        "wgrad", x, dy, wdims, wlike.stride(), stride, pre, post, dilation, mode
    )


@pytest.mark.parametrize("case", CASES, ids=[f"c{i}" for i in range(len(CASES))])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_wgrad_against_reference_and_pytorch(case, dtype, request):
    xdims, mult, filt, stride, pre, post, dil, layout = case
    gen = torch.Generator().manual_seed(seed_for(request.node.name))
    c = xdims[1]
    x = _stored(torch.randn(xdims, generator=gen).to(dtype), layout)
    wdims = (c * mult, 1, *filt)
    wr = torch.zeros(wdims, dtype=torch.float64, requires_grad=True)
    y = _torch(x, wr, stride, pre, post, dil)
    dy = _stored(torch.randn(y.shape, generator=gen).to(dtype), layout)
    (dw_ref,) = torch.autograd.grad(y, wr, dy.double())
    like = _stored(torch.empty(wdims), layout)
    g, feeds, dw = _wgrad_graph(x, dy, wdims, like, stride, pre, post, dil)
    n = xdims[0]
    for o in y.shape[2:]:
        n *= o
    msg = repro("conv_wgrad_depthwise", [xdims, tuple(dy.shape)], str(dtype), 0)
    out = check_engine(g, feeds, [dw], WGRAD_ID, n=n, msg=msg)
    assert_close(out[dw], dw_ref, dtype, n=n, msg=msg)


def test_wgrad_split_is_deterministic_and_convolution_mode_flips():
    gen = torch.Generator().manual_seed(12)
    x, dy = torch.randn((3, 4, 9, 8), generator=gen), torch.randn((3, 4, 7, 7), generator=gen)
    like = torch.empty(4, 1, 3, 2)
    g, feeds, dw = _wgrad_graph(
        x,
        dy,
        (4, 1, 3, 2),
        like,
        (1, 1),
        (0, 0),
        (0, 0),
        (1, 1),
        mode=cudnn.convolution_mode.CONVOLUTION,
    )
    outs = [
        check_engine(g, feeds, [dw], WGRAD_ID, dict(BLOCK_M=16, BLOCK_N=8, num_warps=4, SPLIT=s))
        for s in (1, 3, 3, 64)  # 64 slices: two chunks of the finishing sum
    ]
    assert torch.equal(outs[1][dw], outs[2][dw])  # the same split: bitwise the same
    wr = torch.zeros(4, 1, 3, 2, dtype=torch.float64, requires_grad=True)
    y = F.conv2d(x.double(), wr.flip(-1, -2), groups=4)
    (ref,) = torch.autograd.grad(y, wr, dy.double())
    assert_close(outs[0][dw], ref, n=3 * 49)


@pytest.mark.parametrize(
    "xdims, filt, stride, pre, dil, layout, rows",
    [
        ((2, 6, 11, 9), (5, 3), (2, 1), (3, 1), (1, 2), "nhwc", 1),
        ((2, 6, 11, 9), (5, 3), (2, 1), (3, 1), (1, 2), "nchw", 2),
        ((1, 3, 5, 6, 7), (3, 2, 3), (1, 2, 1), (1, 0, 2), (1, 1, 1), "nhwc", 2),
    ],
)
def test_wgrad_row_groups_split_the_filter_rows_across_programs(
    xdims, filt, stride, pre, dil, layout, rows, request
):
    """ROWS < filt[0]: each program sums a group of filter rows (the last group short),
    padding past the filter's radius, dilation, both layouts, 2-D and 3-D."""
    gen = torch.Generator().manual_seed(seed_for(request.node.name))
    c = xdims[1]
    x = _stored(torch.randn(xdims, generator=gen), layout)
    wdims = (c, 1, *filt)
    wr = torch.zeros(wdims, dtype=torch.float64, requires_grad=True)
    y = _torch(x, wr, stride, pre, pre, dil)
    dy = _stored(torch.randn(y.shape, generator=gen), layout)
    (ref,) = torch.autograd.grad(y, wr, dy.double())
    like = _stored(torch.empty(wdims), layout)
    g, feeds, dw = _wgrad_graph(x, dy, wdims, like, stride, pre, pre, dil)
    knobs = dict(BLOCK_M=16, BLOCK_N=8, num_warps=4, SPLIT=2, ROWS=rows)
    n = y.numel() // y.shape[1]
    out = check_engine(g, feeds, [dw], WGRAD_ID, knobs, n=n)
    assert_close(out[dw], ref, n=n)


def test_wgrad_declines_an_epilogue_and_huge_filters_with_reason():
    from opendnn.engines.conv.depthwise.engine import DepthwiseWgradEngine

    x, dy = torch.randn(1, 4, 12, 12), torch.randn(1, 4, 2, 2)
    g, _, _ = _wgrad_graph(
        x, dy, (4, 1, 11, 11), torch.empty(4, 1, 11, 11), (1, 1), (0, 0), (0, 0), (1, 1)
    )
    g.validate()
    s = DepthwiseWgradEngine().check_support(g.op_graph, Target())
    assert not s.ok and "121 filter taps" in s.reason
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tx, tdy = _tensor(g, torch.randn(1, 4, 5, 5)), _tensor(g, torch.randn(1, 4, 5, 5))
    dw = g.conv_wgrad(tx, tdy, padding=[1, 1])
    dw.set_dim([4, 1, 3, 3]).set_stride([9, 9, 3, 1])
    g.scale(dw, 0.5).set_output(True)
    g.validate()
    s = DepthwiseWgradEngine().check_support(g.op_graph, Target())
    assert not s.ok and "no fused epilogue" in s.reason


# ---- register strips (STRIP > 1): forward and backward filter ------------------------------
# (x dims, multiplier, filter, stride, pre, post, dilation, layout, strip): a last axis not a
# multiple of the strip, strides 1 and 2, dilation, padding past the radius, causal 1-D,
# 3-D, multiplier 2, CONVOLUTION mode in the wgrad test below
STRIP_CASES = [
    ((2, 6, 7, 11), 1, (7, 7), (1, 1), (3, 3), (3, 3), (1, 1), "nhwc", 4),
    ((1, 5, 9, 10), 1, (3, 3), (2, 2), (1, 1), (1, 1), (1, 1), "nhwc", 2),
    ((1, 4, 6, 9), 2, (3, 5), (1, 1), (4, 1), (2, 3), (1, 2), "nchw", 4),
    ((2, 3, 13), 1, (4,), (1,), (3,), (0,), (1,), "strided", 8),
    ((1, 3, 4, 5, 7), 1, (3, 3, 3), (1, 1, 2), (1, 1, 1), (1, 1, 1), (1, 1, 1), "nhwc", 2),
]


@pytest.mark.parametrize("case", STRIP_CASES, ids=[f"s{i}" for i in range(len(STRIP_CASES))])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_strip_forward_against_reference_and_pytorch(case, dtype, request):
    """The register-strip forward: each loaded input element meets every (output, tap) of
    the strip it belongs to; outputs past the last axis masked, the epilogue per output."""
    xdims, mult, filt, stride, pre, post, dil, layout, strip = case
    gen = torch.Generator().manual_seed(seed_for(request.node.name))
    c = xdims[1]
    x = _stored(torch.randn(xdims, generator=gen).to(dtype), layout)
    w = _stored(torch.randn((c * mult, 1, *filt), generator=gen).to(dtype), layout)
    b = torch.randn((1, c * mult) + (1,) * len(filt), generator=gen).to(dtype)
    g, feeds, y = _graph(x, w, stride, pre, post, dil, bias=b)
    taps = 1
    for f in filt:
        taps *= f
    knobs = dict(BLOCK_M=8, BLOCK_N=8, num_warps=4, STRIP=strip)
    out = check_engine(g, feeds, [y], ID, knobs, n=taps)
    assert_close(out[y], _torch(x, w, stride, pre, post, dil, bias=b), dtype, n=taps)


@pytest.mark.parametrize("case", STRIP_CASES, ids=[f"s{i}" for i in range(len(STRIP_CASES))])
def test_strip_wgrad_against_reference_and_pytorch(case, request):
    """The register-strip backward filter, with row groups where the filter has a leading
    axis, and CONVOLUTION mode (the filter stored flipped)."""
    xdims, mult, filt, stride, pre, post, dil, layout, strip = case
    gen = torch.Generator().manual_seed(seed_for(request.node.name))
    c = xdims[1]
    x = _stored(torch.randn(xdims, generator=gen), layout)
    wdims = (c * mult, 1, *filt)
    wr = torch.zeros(wdims, dtype=torch.float64, requires_grad=True)
    y = _torch(x, wr.flip(list(range(2, 2 + len(filt)))), stride, pre, post, dil)
    dy = _stored(torch.randn(y.shape, generator=gen), layout)
    (ref,) = torch.autograd.grad(y, wr, dy.double())
    like = _stored(torch.empty(wdims), layout)
    mode = cudnn.convolution_mode.CONVOLUTION
    g, feeds, dw = _wgrad_graph(x, dy, wdims, like, stride, pre, post, dil, mode=mode)
    rows = 2 if len(filt) > 1 else 0
    knobs = dict(BLOCK_M=8, BLOCK_N=8, num_warps=4, SPLIT=3, ROWS=rows, STRIP=strip)
    n = y.numel() // y.shape[1]
    out = check_engine(g, feeds, [dw], WGRAD_ID, knobs, n=n)
    assert_close(out[dw], ref, n=n)


def test_strip_rules_are_refused_by_name():
    from opendnn.engines.conv.depthwise.engine import DepthwiseDgradEngine, DepthwiseWgradEngine

    x, dy = torch.randn(1, 3, 9), torch.randn(1, 3, 9)
    g, _, _ = _wgrad_graph(x, dy, (3, 1, 3), torch.empty(3, 1, 3), (1,), (1,), (1,), (1,))
    g.validate()
    e = DepthwiseWgradEngine()
    bad = dict(BLOCK_M=8, BLOCK_N=8, num_warps=4, SPLIT=1, ROWS=1, STRIP=4)
    from opendnn.engines.base import EngineConfig

    s = e.check_config(g.op_graph, EngineConfig.make(e, **bad), Target())
    assert not s.ok and "split the strip's axis" in s.reason, s.reason
    s = e.check_config(g.op_graph, EngineConfig.make(e, **{**bad, "STRIP": 3}), Target())
    assert not s.ok and "STRIP=3" in s.reason, s.reason
    w = torch.randn(3, 1, 3)
    gd, _, _ = _dgrad_graph(dy, w, (1, 3, 9), x, (1,), (1,), (1,), (1,))
    gd.validate()
    d = DepthwiseDgradEngine()
    cfg = EngineConfig.make(d, BLOCK_M=8, BLOCK_N=8, num_warps=4, STRIP=2)
    s = d.check_config(gd.op_graph, cfg, Target())
    assert not s.ok and "no register strips" in s.reason, s.reason


def test_the_measured_order_weighs_in_the_ranking():
    """A config down the measured list costs PLACE_COST a place in the estimate the
    heuristics rank by; one not offered comes last."""
    from opendnn.engines.base import EngineConfig

    h100 = Target(device="cuda", name="H100", capability=(9, 0), num_sms=132)
    x = torch.empty(8, 64, 28, 28).to(memory_format=torch.channels_last)
    w = torch.empty(64, 1, 7, 7).to(memory_format=torch.channels_last)
    g, _, _ = _graph(x, w, (1, 1), (3, 3), (3, 3), (1, 1))
    g.validate()
    e = DepthwiseConvEngine()
    listed = e._listed(g.op_graph, h100)
    assert [e._place(g.op_graph, c, h100) for c in listed] == list(range(len(listed)))
    odd = EngineConfig.make(e, BLOCK_M=256, BLOCK_N=8, num_warps=2)
    assert e._place(g.op_graph, odd, h100) == len(listed)
