"""The channels-last transform engines (44 fprop, 45 dgrad, 46 wgrad): an NCHW problem
run by an engine of its channels-last twin between copies; checked against the float64
reference (NaN-poisoned outputs) and PyTorch, with their declines and their configs."""

import pytest
import torch
import torch.nn.functional as F
from _util import assert_close, check_engine, seed_for
from _util import graph_tensor as _tensor

import opendnn.frontend as cudnn
from opendnn import backends
from opendnn.engines.base import EngineConfig, Target
from opendnn.engines.conv.layout.engine import (
    ChannelsLastConvEngine,
    ChannelsLastDgradEngine,
    ChannelsLastWgradEngine,
    channels_last_strides,
    k_innermost_strides,
)
from opendnn.errors import GraphNotSupportedError

FPROP, DGRAD, WGRAD = 44, 45, 46
TYPES = {
    torch.float32: cudnn.data_type.FLOAT,
    torch.float16: cudnn.data_type.HALF,
    torch.bfloat16: cudnn.data_type.BFLOAT16,
}
# (x dims, K, filter, stride, padding, dilation, groups): odd sizes, a patchify stem,
# padding past the radius, dilation, groups not a power of two, 1-D and 3-D
CASES = [
    ((2, 3, 9, 8), 5, (4, 4), (4, 4), (0, 0), (1, 1), 1),
    ((1, 6, 7, 5), 9, (3, 3), (1, 1), (2, 1), (1, 2), 3),
    ((3, 4, 6, 6), 4, (1, 1), (2, 1), (0, 0), (1, 1), 1),
    ((2, 5, 11), 7, (3,), (2,), (1,), (1,), 1),
    ((1, 2, 4, 5, 3), 3, (3, 1, 2), (1, 2, 1), (1, 0, 1), (1, 1, 1), 1),
]


def _conv(x, w, stride, pad, dil, groups):
    f = {3: F.conv1d, 4: F.conv2d, 5: F.conv3d}[x.dim()]
    return f(x, w, stride=stride, padding=pad, dilation=dil, groups=groups)


def _graph(kind, x, w, dy, stride, pad, dil):
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    conv = dict(padding=list(pad), stride=list(stride), dilation=list(dil))
    if kind == "fprop":
        tx, tw = _tensor(g, x), _tensor(g, w)
        out = g.conv_fprop(tx, tw, **conv)
        feeds, like = {tx: x, tw: w}, dy
    elif kind == "dgrad":
        tdy, tw = _tensor(g, dy), _tensor(g, w)
        out = g.conv_dgrad(tdy, tw, **conv)
        feeds, like = {tdy: dy, tw: w}, x
    else:
        tx, tdy = _tensor(g, x), _tensor(g, dy)
        out = g.conv_wgrad(tx, tdy, **conv)
        feeds, like = {tx: x, tdy: dy}, w
    out.set_dim(list(like.shape)).set_stride(list(like.stride())).set_output(True)
    out.set_data_type(TYPES[x.dtype])
    return g, feeds, out


def _problem(case, kind, dtype, request):
    """(graph, feeds, output, float64 reference, reduction length, engine id) of ``case``
    in direction ``kind``."""
    xdims, k, filt, stride, pad, dil, groups = case
    gen = torch.Generator().manual_seed(seed_for(request.node.name))
    x = torch.randn(xdims, generator=gen).to(dtype)
    w = (torch.randn((k, xdims[1] // groups, *filt), generator=gen) * 0.3).to(dtype)
    xr, wr = x.double().requires_grad_(), w.double().requires_grad_()
    y = _conv(xr, wr, stride, pad, dil, groups)
    dy = torch.randn(y.shape, generator=gen).to(dtype)
    g, feeds, out = _graph(kind, x, w, dy, stride, pad, dil)
    eid = {"fprop": FPROP, "dgrad": DGRAD, "wgrad": WGRAD}[kind]
    if kind == "fprop":
        ref, n = y.detach(), xdims[1] // groups * torch.tensor(filt).prod().item()
    else:
        dx, dw = torch.autograd.grad(y, (xr, wr), dy.double())
        ref = dx if kind == "dgrad" else dw
        n = y.numel() // y.shape[1] if kind == "wgrad" else k * torch.tensor(filt).prod().item()
    return g, feeds, out, ref, n, eid


@pytest.mark.parametrize("case", CASES, ids=[f"c{i}" for i in range(len(CASES))])
@pytest.mark.parametrize("kind", ["fprop", "dgrad", "wgrad"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_against_reference_and_pytorch(case, kind, dtype, request):
    g, feeds, out, ref, n, eid = _problem(case, kind, dtype, request)
    got = check_engine(g, feeds, [out], eid, n=n)
    assert_close(got[out], ref, dtype, n=n)


@pytest.mark.parametrize("case", CASES, ids=[f"c{i}" for i in range(len(CASES))])
@pytest.mark.parametrize("kind", ["fprop", "dgrad", "wgrad"])
def test_outputs_written_in_place_with_direct(case, kind, request):
    """DIRECT=1: only the inputs move; the inner engine writes the NCHW output itself (no
    copy back, no workspace for it), NaN-poisoned, against the float64 reference."""
    g, feeds, out, ref, n, eid = _problem(case, kind, torch.float32, request)
    got = check_engine(g, feeds, [out], eid, knobs={"DIRECT": 1}, n=n)
    assert_close(got[out], ref, torch.float32, n=n)
    e = {"fprop": ChannelsLastConvEngine, "dgrad": ChannelsLastDgradEngine}.get(
        kind, ChannelsLastWgradEngine
    )()
    g.validate()
    cfg = EngineConfig.make(e, **e.complete_knobs(g.op_graph, {"DIRECT": 1}))
    assert e.family(cfg).startswith(f"{e.name}:direct/")
    out_uid = next(iter(g.op_graph.output_uid_set))
    assert out_uid not in e._twin(g.op_graph, cfg).moved


def test_direct_configs_offered_beside_the_copying_ones():
    """On a GPU target both forms are listed, each form's best among them; the direct one
    is estimated cheaper (it moves fewer bytes) with the same inner config."""
    x, w = torch.randn(2, 8, 16, 16), torch.randn(16, 8, 3, 3)
    g, _, _ = _graph("fprop", x, w, torch.empty(2, 16, 14, 14), (1, 1), (0, 0), (1, 1))
    g.validate()
    e = ChannelsLastConvEngine()
    h100 = Target(device="cuda", name="H100", capability=(9, 0), num_sms=132)
    cfgs = e.configs(g.op_graph, h100)
    direct = [c for c in cfgs if c.knob_dict.get("DIRECT") == 1]
    copying = [c for c in cfgs if "DIRECT" not in c.knob_dict]
    assert direct and copying
    twin = EngineConfig.make(e, **{**copying[0].knob_dict, "DIRECT": 1})
    assert e.estimate_seconds(g.op_graph, twin, h100) < e.estimate_seconds(
        g.op_graph, copying[0], h100
    )
    assert e.workspace_size(g.op_graph, twin, h100) < e.workspace_size(g.op_graph, copying[0], h100)
    with pytest.raises(GraphNotSupportedError) as err:
        g.create_execution_plan(FPROP, {"DIRECT": 2})
    assert "DIRECT=2" in err.value.reasons["conv_fprop_channels_last"]


def test_config_names_the_inner_engine_and_workspace_holds_the_copies():
    x, w = torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3)
    g, _, _ = _graph("fprop", x, w, torch.empty(2, 4, 6, 6), (1, 1), (0, 0), (1, 1))
    g.validate()
    e = ChannelsLastConvEngine()
    assert e.configs(g.op_graph, Target()) == []  # the interpreter gains nothing
    h100 = Target(device="cuda", name="H100", capability=(9, 0), num_sms=132)
    cfgs = e.configs(g.op_graph, h100)
    assert cfgs and all("ENGINE" in c.knob_dict for c in cfgs)
    copying = next(c for c in cfgs if "DIRECT" not in c.knob_dict)
    moved = (x.numel() + 4 * 36 + w.numel()) * 4  # x, y and w move (3 channels, 9 taps)
    assert e.workspace_size(g.op_graph, copying, h100) >= moved
    assert e.family(copying).startswith("conv_fprop_channels_last/")


def test_a_tensor_that_does_not_move_is_used_in_place():
    assert channels_last_strides((2, 3, 4, 5)) == (60, 1, 15, 3)
    assert channels_last_strides((2, 3, 7)) == (21, 1, 3)
    # bias [1, K, 1, 1] and one-channel images keep their buffers: nothing to transpose
    x, w = torch.randn(2, 1, 6, 6), torch.randn(1, 1, 3, 3)
    g, _, _ = _graph("fprop", x, w, torch.empty(2, 1, 4, 4), (1, 1), (0, 0), (1, 1))
    g.validate()
    s = ChannelsLastConvEngine().check_support(g.op_graph, Target())
    assert not s.ok and "no image tensor to transpose" in s.reason


def test_declines_channels_last_and_non_packed_tensors_with_reasons():
    x = torch.randn(2, 3, 6, 6).to(memory_format=torch.channels_last)
    w = torch.randn(4, 3, 3, 3).to(memory_format=torch.channels_last)
    dy = torch.randn(2, 4, 4, 4).to(memory_format=torch.channels_last)
    g, _, _ = _graph("dgrad", x, w, dy, (1, 1), (0, 0), (1, 1))
    g.validate()
    s = ChannelsLastDgradEngine().check_support(g.op_graph, Target())
    assert not s.ok and "no image tensor to transpose" in s.reason
    xs = torch.randn(2, 3, 6, 12)[..., ::2]  # NCHW order, not packed
    g, _, _ = _graph("fprop", xs, torch.randn(4, 3, 3, 3), dy, (1, 1), (0, 0), (1, 1))
    g.validate()
    s = ChannelsLastConvEngine().check_support(g.op_graph, Target())
    assert not s.ok and "not packed NCHW" in s.reason


def test_bad_inner_engine_is_declined_by_name():
    x, w = torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3)
    g, _, _ = _graph("fprop", x, w, torch.empty(2, 4, 6, 6), (1, 1), (0, 0), (1, 1))
    g.validate()
    for bad, why in ((FPROP, "does not take the problem"), (63, "is not an engine")):
        with pytest.raises(GraphNotSupportedError) as e:
            g.create_execution_plan(FPROP, {"ENGINE": bad})
        assert why in e.value.reasons["conv_fprop_channels_last"]


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_tf32_dgrad_moves_the_filter_to_k_innermost(layout, monkeypatch, request):
    """With TF32 the backward data's filter operand (reduced over K, its first axis) is
    copied K-innermost; an NHWC problem then moves the filter alone."""
    monkeypatch.setattr(backends, "allow_tf32", True)
    assert k_innermost_strides((4, 3, 2, 5)) == (1, 4, 60, 12)
    assert k_innermost_strides((6, 2, 3)) == (1, 6, 12)
    gen = torch.Generator().manual_seed(seed_for(request.node.name))
    x, w = torch.randn(2, 5, 7, 6, generator=gen), torch.randn(6, 5, 3, 2, generator=gen)
    xr, wr = x.double().requires_grad_(), w.double().requires_grad_()
    y = _conv(xr, wr, (2, 1), (1, 1), (1, 2), 1)
    dy = torch.randn(y.shape, generator=gen)
    if layout == "nhwc":
        x, w, dy = (t.to(memory_format=torch.channels_last) for t in (x, w, dy))
    g, feeds, out = _graph("dgrad", x, w, dy, (2, 1), (1, 1), (1, 2))
    g.validate()
    p = ChannelsLastDgradEngine()._problem(g.op_graph)
    w_uid = next(u for u, d in g.op_graph.tensors.items() if tuple(d.dims) == tuple(w.shape))
    assert p.inner.tensors[w_uid].strides == k_innermost_strides(tuple(w.shape))
    assert (set(p.moved) == {w_uid}) == (layout == "nhwc")
    (dx,) = torch.autograd.grad(y, (xr,), dy.double())
    got = check_engine(g, feeds, [out], DGRAD, n=6 * 6)
    assert_close(got[out], dx, torch.float32, n=6 * 6)


@pytest.mark.parametrize("dims", [(2, 17, 7, 3), (1, 70, 67), (3, 33, 2, 3, 5)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_image_moves_by_the_tiled_transpose(dims, dtype):
    """An NCHW image moves to channels-last and back by the batched 2-D transpose
    (odd sizes, tiles cut by both edges), bit for bit; a filter made K-innermost or an
    image of fewer than 16 channels moves by the strided copy."""
    from opendnn.engines.conv.layout.engine import _transposer
    from opendnn.tensor import TensorDesc

    x = torch.randn(dims).to(dtype)
    t = TYPES[dtype]
    d, cl = TensorDesc(dims, x.stride(), t, 1), TensorDesc(dims, channels_last_strides(dims), t, 1)
    to_cl, back = _transposer(d, cl, True, False), _transposer(d, cl, False, False)
    assert to_cl[1:] == (dims[1], x[0, 0].numel())
    flat = torch.full((x.numel(),), float("nan"), dtype=dtype)
    to_cl[0].launch([x, flat, *to_cl[1:]])
    assert torch.equal(flat, x.movedim(1, -1).contiguous().flatten())
    out = torch.full_like(x, float("nan"))
    back[0].launch([flat, out, *back[1:]])
    assert torch.equal(out, x)
    w = TensorDesc((4, 3, 3, 3), (27, 9, 3, 1), t, 2)
    w_moved = TensorDesc((4, 3, 3, 3), k_innermost_strides((4, 3, 3, 3)), t, 2)
    assert _transposer(w, w_moved, True, False) is None
    rgb = TensorDesc((2, 3, 8, 8), (192, 64, 8, 1), t, 3)
    assert (
        _transposer(
            rgb, TensorDesc((2, 3, 8, 8), channels_last_strides((2, 3, 8, 8)), t, 3), True, False
        )
        is None
    )
