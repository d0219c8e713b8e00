"""conv_grouped (engine 47): grouped forward with several groups per program and
block-diagonal filter tiles, against the float64 reference (NaN-poisoned outputs) and
PyTorch; its declines and its group blocks."""

import pytest
import torch
import torch.nn.functional as F
from _util import assert_close, check_engine, conv_backward_graph, seed_for, torch_layout
from _util import graph_tensor as _tensor

import opendnn.frontend as cudnn
from opendnn import backends
from opendnn.engines.base import Target
from opendnn.engines.conv.grouped.engine import GroupedConvEngine, group_blocks
from opendnn.handle import _KNOWN

ID = 47
# the rates target_for gives an H100 (the cost models compare compute with memory)
H100 = Target(device="cuda", name="H100", capability=(9, 0), num_sms=132, **_KNOWN["H100"])
_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
# (x dims, K, groups, filter, stride, pre, post, dilation, layout): odd sizes, groups not a
# power of two, padding past the radius, asymmetric padding, dilation, 1-3-D, NHWC / NCHW /
# non-packed strides
CASES = [
    ((2, 8, 7, 6), 8, 4, (3, 3), (1, 1), (1, 1), (1, 1), (1, 1), "nhwc"),
    ((2, 16, 9, 7), 32, 4, (3, 3), (2, 2), (2, 2), (1, 0), (1, 1), "nchw"),
    ((1, 16, 5, 6), 16, 8, (3, 2), (1, 1), (3, 0), (3, 1), (2, 1), "strided"),
    ((3, 8, 11), 16, 4, (3,), (1,), (1,), (1,), (2,), "nhwc"),
    ((1, 8, 3, 5, 4), 8, 2, (3, 3, 1), (1, 2, 1), (1, 1, 0), (1, 1, 0), (1, 1, 1), "nhwc"),
    ((2, 32, 6, 6), 32, 8, (1, 1), (1, 1), (0, 0), (0, 0), (1, 1), "nchw"),
]


def _stored(t, layout):
    return torch_layout(t, "cl" if layout == "nhwc" else layout)


def _graph(x, w, stride, pre, post, dil, bias=None):
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tx, tw = _tensor(g, x), _tensor(g, w)
    y = g.conv_fprop(
        tx,
        tw,
        pre_padding=list(pre),
        post_padding=list(post),
        stride=list(stride),
        dilation=list(dil),
    )
    feeds = {tx: x, tw: w}
    if bias is not None:
        tb = _tensor(g, bias)
        y = g.relu(g.bias(y, tb))
        feeds[tb] = bias
    types = {torch.float32: cudnn.data_type.FLOAT, torch.bfloat16: cudnn.data_type.BFLOAT16}
    y.set_output(True).set_data_type(types[x.dtype])
    return g, feeds, y


def _torch(x, w, stride, pre, post, dil, groups, bias=None):
    pads = [p for a, b in zip(reversed(pre), reversed(post)) for p in (a, b)]
    y = _CONV[x.dim() - 2](
        F.pad(x.double(), pads), w.double(), stride=stride, dilation=dil, groups=groups
    )
    return y if bias is None else torch.relu(y + bias.double())


@pytest.mark.parametrize("case", CASES, ids=[f"c{i}" for i in range(len(CASES))])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_against_reference_and_pytorch(case, dtype, request):
    xdims, k, groups, filt, stride, pre, post, dil, layout = case
    gen = torch.Generator().manual_seed(seed_for(request.node.name))
    x = _stored(torch.randn(xdims, generator=gen).to(dtype), layout)
    w = _stored(
        (torch.randn((k, xdims[1] // groups, *filt), generator=gen) * 0.3).to(dtype), layout
    )
    g, feeds, y = _graph(x, w, stride, pre, post, dil)
    n = xdims[1] // groups * torch.tensor(filt).prod().item()
    out = check_engine(g, feeds, [y], ID, n=n)
    assert_close(out[y], _torch(x, w, stride, pre, post, dil, groups), dtype, n=n)


@pytest.mark.parametrize("gb", [2, 4])
def test_every_group_block_and_the_fused_epilogue(gb):
    """GB = 2 and 4 groups per program (N tiles of 16 and 32 outputs) with bias + relu."""
    gen = torch.Generator().manual_seed(7 + gb)
    x = _stored(torch.randn((2, 16, 6, 5), generator=gen), "nhwc")
    w = torch.randn((32, 4, 3, 3), generator=gen) * 0.3
    b = torch.randn((1, 32, 1, 1), generator=gen)
    g, feeds, y = _graph(x, w, (1, 1), (1, 1), (1, 1), (1, 1), bias=b)
    knobs = dict(BLOCK_M=16, GB=gb, num_warps=4, num_stages=1)
    out = check_engine(g, feeds, [y], ID, knobs, n=36)
    assert_close(out[y], _torch(x, w, (1, 1), (1, 1), (1, 1), (1, 1), 4, bias=b), n=36)


def test_group_blocks_keep_tensor_core_tiles():
    # ResNeXt-50 32x4d: 32 groups of 4, 8, 16 and 32 channels
    assert group_blocks(4, 4, 32) == [4, 8, 16, 32]
    assert group_blocks(32, 32, 32) == [2, 4]
    assert group_blocks(64, 64, 2) == [2]  # 2 x 64 = 128 wide
    assert group_blocks(128, 128, 4) == []  # wide groups: the implicit GEMM's
    assert group_blocks(3, 5, 6) == []  # no power-of-two N tile


def test_declines_with_reasons():
    e = GroupedConvEngine()
    cases = [
        ((1, 4, 5, 5), (4, 1, 3, 3), "one channel per group is depthwise"),
        ((1, 4, 5, 5), (4, 4, 3, 3), "1 group(s)"),
        ((1, 6, 5, 5), (9, 2, 3, 3), "no group block fits"),
    ]
    bf = torch.bfloat16
    for xd, wd, why in cases:
        x, w = torch.randn(xd, dtype=bf), torch.randn(wd, dtype=bf)
        g, _, _ = _graph(x, w, (1, 1), (1, 1), (1, 1), (1, 1))
        g.validate()
        s = e.check_support(g.op_graph, H100)
        assert not s.ok and why in s.reason, s.reason
    # IEEE float32 on a GPU: the zero blocks would run on the CUDA cores
    g, _, _ = _graph(
        torch.randn(1, 32, 5, 5), torch.randn(32, 4, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1)
    )
    g.validate()
    tf32, backends.allow_tf32 = backends.allow_tf32, False
    try:
        s = e.check_support(g.op_graph, H100)
        assert not s.ok and "float32 without TF32" in s.reason, s.reason
        assert e.check_support(g.op_graph, Target()).ok  # the interpreter takes it
        backends.allow_tf32 = True
        assert e.check_support(g.op_graph, H100).ok
    finally:
        backends.allow_tf32 = tf32


def test_bad_group_block_is_refused_by_name():
    g, _, _ = _graph(
        torch.randn(1, 8, 5, 5), torch.randn(8, 2, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1)
    )
    g.validate()
    e = GroupedConvEngine()
    cfg = e.configs(g.op_graph, Target())[0]
    bad = type(cfg).make(e, **{**cfg.knob_dict, "GB": 3})
    s = e.check_config(g.op_graph, bad, Target())
    assert not s.ok and "GB=3" in s.reason


# ---- backward data (conv_dgrad_grouped, 48) ------------------------------------------------
DGRAD_ID = 48


def _dgrad_graph(dy, w, xlike, stride, pre, post, dil, mode=None):
    return conv_backward_graph(
        "dgrad", dy, w, xlike.shape, xlike.stride(), stride, pre, post, dil, mode
    )


@pytest.mark.parametrize("case", CASES, ids=[f"c{i}" for i in range(len(CASES))])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dgrad_against_reference_and_pytorch(case, dtype, request):
    xdims, k, groups, filt, stride, pre, post, dil, layout = case
    gen = torch.Generator().manual_seed(seed_for(request.node.name))
    w = _stored(
        (torch.randn((k, xdims[1] // groups, *filt), generator=gen) * 0.3).to(dtype), layout
    )
    xr = torch.zeros(xdims, dtype=torch.float64, requires_grad=True)
    y = _torch(xr, w, stride, pre, post, dil, groups)
    dy = _stored(torch.randn(y.shape, generator=gen).to(dtype), layout)
    (ref,) = torch.autograd.grad(y, xr, dy.double())
    xlike = _stored(torch.empty(xdims, dtype=dtype), layout)
    g, feeds, dx = _dgrad_graph(dy, w, xlike, stride, pre, post, dil)
    n = k // groups * torch.tensor(filt).prod().item()
    out = check_engine(g, feeds, [dx], DGRAD_ID, n=n)
    assert_close(out[dx], ref, dtype, n=n)


def test_dgrad_convolution_mode_flips_the_filter():
    gen = torch.Generator().manual_seed(31)
    w = torch.randn((16, 4, 3, 2), generator=gen)
    dy = torch.randn((2, 16, 5, 6), generator=gen)
    xr = torch.zeros((2, 16, 7, 7), dtype=torch.float64, requires_grad=True)
    y = F.conv2d(xr, w.double().flip(-1, -2), groups=4)
    (ref,) = torch.autograd.grad(y, xr, dy.double())
    g, feeds, dx = _dgrad_graph(
        dy,
        w,
        torch.empty(2, 16, 7, 7),
        (1, 1),
        (0, 0),
        (0, 0),
        (1, 1),
        mode=cudnn.convolution_mode.CONVOLUTION,
    )
    out = check_engine(g, feeds, [dx], DGRAD_ID, n=24)
    assert_close(out[dx], ref, n=24)


# ---- backward filter (conv_wgrad_grouped, 49) ----------------------------------------------
WGRAD_ID = 49


def _wgrad_graph(x, dy, wlike, stride, pre, post, dil, mode=None):
    return conv_backward_graph(
        "wgrad", x, dy, wlike.shape, wlike.stride(), stride, pre, post, dil, mode
    )


@pytest.mark.parametrize("case", CASES, ids=[f"c{i}" for i in range(len(CASES))])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_wgrad_against_reference_and_pytorch(case, dtype, request):
    xdims, k, groups, filt, stride, pre, post, dil, layout = case
    gen = torch.Generator().manual_seed(seed_for(request.node.name))
    x = _stored(torch.randn(xdims, generator=gen).to(dtype), layout)
    wdims = (k, xdims[1] // groups, *filt)
    wr = torch.zeros(wdims, dtype=torch.float64, requires_grad=True)
    y = _torch(x, wr, stride, pre, post, dil, groups)
    dy = _stored(torch.randn(y.shape, generator=gen).to(dtype), layout)
    (ref,) = torch.autograd.grad(y, wr, dy.double())
    g, feeds, dw = _wgrad_graph(x, dy, _stored(torch.empty(wdims), layout), stride, pre, post, dil)
    n = y.numel() // y.shape[1]
    out = check_engine(g, feeds, [dw], WGRAD_ID, n=n)
    assert_close(out[dw], ref, dtype, n=n)


def test_wgrad_split_is_deterministic_and_convolution_mode_flips():
    gen = torch.Generator().manual_seed(41)
    x, dy = torch.randn((3, 16, 9, 8), generator=gen), torch.randn((3, 16, 7, 7), generator=gen)
    g, feeds, dw = _wgrad_graph(
        x,
        dy,
        torch.empty(16, 4, 3, 2),
        (1, 1),
        (0, 0),
        (0, 0),
        (1, 1),
        mode=cudnn.convolution_mode.CONVOLUTION,
    )
    knobs = dict(BLOCK_M=8, GB=2, BLOCK_K=16, SPLIT=3, num_warps=4, num_stages=1)
    outs = [check_engine(g, feeds, [dw], WGRAD_ID, {**knobs, "SPLIT": s}) for s in (1, 3, 3, 64)]
    assert torch.equal(outs[1][dw], outs[2][dw])  # the same split: bitwise the same
    wr = torch.zeros(16, 4, 3, 2, dtype=torch.float64, requires_grad=True)
    y = F.conv2d(x.double(), wr.flip(-1, -2), groups=4)
    (ref,) = torch.autograd.grad(y, wr, dy.double())
    assert_close(outs[0][dw], ref, n=3 * 49)


def test_wgrad_refuses_rows_that_are_not_the_group_block():
    from opendnn.engines.conv.grouped.engine import GroupedWgradEngine

    x, dy = torch.randn(2, 16, 6, 6), torch.randn(2, 16, 4, 4)
    g, _, _ = _wgrad_graph(x, dy, torch.empty(16, 4, 3, 3), (1, 1), (0, 0), (0, 0), (1, 1))
    g.validate()
    e = GroupedWgradEngine()
    bad = e.configs(g.op_graph, Target())[0]
    bad = type(bad).make(e, **{**bad.knob_dict, "BLOCK_M": 64})
    s = e.check_config(g.op_graph, bad, Target())
    assert not s.ok and "BLOCK_M=64" in s.reason


def test_tf32_tiles_fit_shared_memory():
    """float32 operands take twice the shared memory of half precision: on a GPU every
    offered config's pipeline fits, and an explicit config that does not is refused."""
    from opendnn.engines.conv.grouped.engine import (
        SHARED_BYTES,
        GroupedWgradEngine,
        stage_bytes,
    )

    # ResNeXt's l4: 32 groups of 32, where GB=4 makes 128-wide tiles on both operands
    x, w = torch.randn(1, 1024, 7, 7), torch.randn(1024, 32, 3, 3)
    fwd, _, _ = _graph(x, w, (1, 1), (1, 1), (1, 1), (1, 1))
    dy = torch.randn(1, 1024, 7, 7)
    bwd, _, _ = _wgrad_graph(x, dy, torch.empty(1024, 32, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1))
    tf32, backends.allow_tf32 = backends.allow_tf32, True
    try:
        for g, e in ((fwd, GroupedConvEngine()), (bwd, GroupedWgradEngine())):
            g.validate()
            a = e._analyze(g.op_graph)
            cfgs = e.configs(g.op_graph, H100)
            assert cfgs
            for cfg in cfgs:
                kn = e._conv_knobs(a, e.complete_knobs(g.op_graph, cfg.knob_dict))
                assert kn.num_stages * stage_bytes(kn, 4) <= SHARED_BYTES, cfg.label()
            # the widest tiles: most groups per program, then the widest backward-filter step
            wide = max(cfgs, key=lambda c: (c.knob_dict["GB"], c.knob_dict.get("BLOCK_K", 0)))
            bad = type(wide).make(e, **{**wide.knob_dict, "num_stages": 4})
            s = e.check_config(g.op_graph, bad, H100)
            assert not s.ok and "shared memory" in s.reason, s.reason
    finally:
        backends.allow_tf32 = tf32
