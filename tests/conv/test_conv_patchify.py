"""The patchify engines (50 fprop, 51 dgrad, 52 wgrad): stride = filter convolutions as one
GEMM over the flattened patch axis; checked against the float64 reference (NaN-poisoned
outputs) and PyTorch, with their declines."""

import pytest
import torch
import torch.nn.functional as F
from _util import assert_close, check_engine, conv_backward_graph, seed_for
from _util import graph_tensor as _tensor

import opendnn.frontend as cudnn
from opendnn.engines.base import Target
from opendnn.engines.conv.patchify import _kernels as P
from opendnn.engines.conv.patchify.engine import (
    PatchifyConvEngine,
    PatchifyDgradEngine,
    PatchifyWgradEngine,
)
from opendnn.errors import GraphNotSupportedError
from opendnn.handle import _KNOWN

FPROP, DGRAD, WGRAD = 50, 51, 52
TYPES = {
    torch.float32: cudnn.data_type.FLOAT,
    torch.float16: cudnn.data_type.HALF,
    torch.bfloat16: cudnn.data_type.BFLOAT16,
}
H100 = Target(device="cuda", name="H100", capability=(9, 0), num_sms=132, **_KNOWN["H100"])
# (x dims, K, filter = stride): an RGB stem, a downsampling layer with odd channels, a
# non-square patch, 1-D and 3-D, an image not a multiple of the patch (fprop / wgrad only)
CASES = [
    ((2, 3, 8, 12), 5, (4, 4)),
    ((3, 7, 6, 4), 9, (2, 2)),
    ((1, 2, 6, 10), 3, (3, 5)),
    ((2, 5, 12), 4, (3,)),
    ((1, 3, 4, 6, 2), 6, (2, 3, 2)),
]
UNEVEN = ((2, 3, 9, 13), 4, (4, 4))


def _conv(x, w, stride, groups=1):
    f = {3: F.conv1d, 4: F.conv2d, 5: F.conv3d}[x.dim()]
    return f(x, w, stride=stride, groups=groups)


def _graph(kind, x, w, dy, stride, mode=None, pad=None):
    d = len(stride)
    pad, dil = list(pad or [0] * d), [1] * d
    if kind == "dgrad":
        return conv_backward_graph("dgrad", dy, w, x.shape, x.stride(), stride, pad, pad, dil, mode)
    if kind == "wgrad":
        return conv_backward_graph("wgrad", x, dy, w.shape, w.stride(), stride, pad, pad, dil, mode)
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    kw = {} if mode is None else {"convolution_mode": mode}
    tx, tw = _tensor(g, x), _tensor(g, w)
    out = g.conv_fprop(tx, tw, padding=pad, stride=list(stride), dilation=dil, **kw)
    out.set_dim(list(dy.shape)).set_stride(list(dy.stride())).set_output(True)
    out.set_data_type(TYPES[x.dtype])
    return g, {tx: x, tw: w}, out


def _case(case, dtype, gen, layout="nchw"):
    xdims, k, filt = case
    x = torch.randn(xdims, generator=gen).to(dtype)
    w = (torch.randn((k, xdims[1], *filt), generator=gen) * 0.3).to(dtype)
    xr, wr = x.double().requires_grad_(), w.double().requires_grad_()
    y = _conv(xr, wr, filt)
    dy = torch.randn(y.shape, generator=gen).to(dtype)
    if layout == "nhwc":
        fmt = torch.channels_last if x.dim() == 4 else torch.channels_last_3d
        if x.dim() in (4, 5):
            x, w, dy = (t.to(memory_format=fmt) for t in (x, w, dy))
    return x, w, dy, xr, wr, y


@pytest.mark.parametrize("case", CASES, ids=[f"c{i}" for i in range(len(CASES))])
@pytest.mark.parametrize("kind", ["fprop", "dgrad", "wgrad"])
@pytest.mark.parametrize("dtype,layout", [(torch.float32, "nchw"), (torch.bfloat16, "nhwc")])
def test_against_reference_and_pytorch(case, kind, dtype, layout, request):
    gen = torch.Generator().manual_seed(seed_for(request.node.name))
    x, w, dy, xr, wr, y = _case(case, dtype, gen, layout)
    g, feeds, out = _graph(kind, x, w, dy, case[2])
    eid = {"fprop": FPROP, "dgrad": DGRAD, "wgrad": WGRAD}[kind]
    patch = case[0][1] * torch.tensor(case[2]).prod().item()
    if kind == "fprop":
        ref, n = y.detach(), patch
    else:
        dx, dw = torch.autograd.grad(y, (xr, wr), dy.double())
        ref = dx if kind == "dgrad" else dw
        n = case[1] if kind == "dgrad" else y.numel() // y.shape[1]
    got = check_engine(g, feeds, [out], eid, n=n)
    assert_close(got[out], ref, dtype, n=n)


@pytest.mark.parametrize("kind", ["fprop", "wgrad"])
def test_image_not_a_multiple_of_the_patch(kind, request):
    """The forward and the backward filter ignore the rows past the last patch."""
    gen = torch.Generator().manual_seed(seed_for(request.node.name))
    x, w, dy, xr, wr, y = _case(UNEVEN, torch.float32, gen)
    g, feeds, out = _graph(kind, x, w, dy, UNEVEN[2])
    if kind == "fprop":
        ref, n, eid = y.detach(), 48, FPROP
    else:
        ref, n, eid = torch.autograd.grad(y, (wr,), dy.double())[0], y.numel() // 4, WGRAD
    got = check_engine(g, feeds, [out], eid, n=n)
    assert_close(got[out], ref, torch.float32, n=n)


def test_wgrad_split_and_convolution_mode(request):
    """The filter flipped in CONVOLUTION mode; a split pixel reduction sums its slices."""
    gen = torch.Generator().manual_seed(seed_for(request.node.name))
    case = ((3, 4, 6, 9), 5, (2, 3))
    x, w, dy, xr, wr, y = _case(case, torch.float32, gen)
    dx, dw = torch.autograd.grad(y, (xr, wr), dy.double())
    conv_mode = cudnn.convolution_mode.CONVOLUTION
    for kind, eid in (("fprop", FPROP), ("dgrad", DGRAD), ("wgrad", WGRAD)):
        g, feeds, out = _graph(kind, x, w.flip(2, 3), dy, case[2], mode=conv_mode)
        ref = {"fprop": y.detach(), "dgrad": dx, "wgrad": dw.flip(2, 3)}[kind]
        knobs = {"SPLIT": 3} if kind == "wgrad" else None
        got = check_engine(g, feeds, [out], eid, knobs=knobs, n=24)
        assert_close(got[out], ref, torch.float32, n=24)


def test_patch_order_puts_the_unit_stride_axis_innermost():
    x = torch.empty(2, 3, 8, 8)
    g, _, _ = _graph("fprop", x, torch.empty(4, 3, 4, 4), torch.empty(2, 4, 2, 2), (4, 4))
    g.validate()
    a = PatchifyConvEngine()._analyze(g.op_graph)
    assert [t[0] for t in P.q_order(a.geo)] == ["c", "r0", "r1"]
    xl = x.to(memory_format=torch.channels_last)
    g, _, _ = _graph("fprop", xl, torch.empty(4, 3, 4, 4), torch.empty(2, 4, 2, 2), (4, 4))
    g.validate()
    a = PatchifyConvEngine()._analyze(g.op_graph)
    assert [t[0] for t in P.q_order(a.geo)] == ["r0", "r1", "c"]


def test_declines_with_reasons():
    x, w = torch.randn(2, 4, 8, 8), torch.randn(6, 4, 3, 3)
    cases = [
        ((2, 2), None, "not a patchify convolution", FPROP, torch.empty(2, 6, 3, 3)),
        ((3, 3), [1, 1], "padding", FPROP, torch.empty(2, 6, 3, 3)),
    ]
    for stride, pad, why, eid, dy in cases:
        g, _, _ = _graph("fprop", x, w, dy, stride, pad=pad)
        g.validate()
        s = PatchifyConvEngine().check_support(g.op_graph, Target())
        assert not s.ok and why in s.reason
        with pytest.raises(GraphNotSupportedError):
            g.create_execution_plan(eid, {})
    # backward data: an image not covered by the patches would need zeros past them
    g, _, _ = _graph(
        "dgrad", torch.empty(2, 4, 9, 8), torch.randn(6, 4, 4, 4), torch.empty(2, 6, 2, 2), (4, 4)
    )
    g.validate()
    s = PatchifyDgradEngine().check_support(g.op_graph, Target())
    assert not s.ok and "would need zeros" in s.reason
    # IEEE float32 on a GPU runs elsewhere; explicit bad knobs name themselves
    g, _, _ = _graph(
        "wgrad", torch.randn(2, 4, 8, 8), torch.randn(6, 4, 4, 4), torch.empty(2, 6, 2, 2), (4, 4)
    )
    g.validate()
    assert "without TF32" in PatchifyWgradEngine().check_support(g.op_graph, H100).reason
    for knobs, why in (({"SPLIT": 0}, "SPLIT=0"), ({"BLOCK_K": 24}, "BLOCK_K=24")):
        with pytest.raises(GraphNotSupportedError) as e:
            g.create_execution_plan(WGRAD, knobs)
        assert why in e.value.reasons["conv_wgrad_patchify"]


def test_gpu_configs_fit_the_problem_and_rank_by_the_cost_model(monkeypatch):
    from opendnn import backends

    monkeypatch.setattr(backends, "allow_tf32", True)
    x = torch.empty(32, 3, 224, 224)
    g, _, _ = _graph("dgrad", x, torch.empty(96, 3, 4, 4), torch.empty(32, 96, 56, 56), (4, 4))
    g.validate()
    e = PatchifyDgradEngine()
    cfgs = e.configs(g.op_graph, H100)
    assert cfgs and all(c.knob_dict["BLOCK_N"] <= 64 for c in cfgs)  # 48 patch elements
    est = [e.estimate_seconds(g.op_graph, c, H100) for c in cfgs]
    assert est == sorted(est) and 5e-6 < est[0] < 1e-3
    g, _, _ = _graph("wgrad", x, torch.empty(96, 3, 4, 4), torch.empty(32, 96, 56, 56), (4, 4))
    g.validate()
    e = PatchifyWgradEngine()
    cfgs = e.configs(g.op_graph, H100)
    assert cfgs and all(c.knob_dict["SPLIT"] > 1 for c in cfgs)
    assert e.workspace_size(g.op_graph, cfgs[0], H100) == 4 * cfgs[0].knob_dict["SPLIT"] * 96 * 48
