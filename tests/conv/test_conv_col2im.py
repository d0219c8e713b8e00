"""conv_dgrad_col2im (57): few-channel backward data as W^T dY on the matmul engine into
float32 columns, then a deterministic col2im gather with the epilogue; against the
float64 reference (NaN-poisoned outputs) and PyTorch's autograd, with its declines."""

import pytest
import torch
import torch.nn.functional as F
from _util import assert_close, check_engine, conv_backward_graph, seed_for

import opendnn.frontend as cudnn
from opendnn.engines.base import Target
from opendnn.engines.conv.gemm import _col2im_kernels as C
from opendnn.engines.conv.gemm.col2im import Col2imDgradEngine
from opendnn.errors import GraphNotSupportedError

COL2IM = 57
# (dX dims, K, filter, stride, padding, dilation): a stem (7x7 stride 2, odd image),
# padding past the kernel's radius, strided + dilated (no phases on that axis), stride
# 3 in 1-D on one channel, 3-D with mixed strides, a 1x1 stride-2 (dX pixels no tap
# covers stay zero), stride larger than the filter
CASES = [
    ((2, 3, 11, 13), 5, (7, 7), (2, 2), (3, 3), (1, 1)),
    ((1, 2, 6, 7), 4, (3, 3), (1, 1), (3, 2), (1, 1)),
    ((2, 2, 9, 8), 3, (3, 3), (2, 2), (1, 1), (2, 2)),
    ((1, 1, 17), 4, (5,), (3,), (2,), (1,)),
    ((1, 3, 5, 6, 7), 4, (3, 3, 3), (2, 1, 2), (1, 1, 1), (1, 1, 1)),
    ((2, 5, 7, 6), 3, (1, 1), (2, 2), (0, 0), (1, 1)),
    ((1, 3, 10, 9), 6, (2, 3), (3, 4), (1, 0), (1, 1)),
]


def _conv(x, w, stride, pad, dil):
    f = {3: F.conv1d, 4: F.conv2d, 5: F.conv3d}[x.dim()]
    return f(x, w, stride=stride, padding=pad, dilation=dil)


def _problem(case, dtype, gen, layout="nchw", dx_layout=None):
    """(graph, feeds, dX tensor, float64 dX, reduction length)."""
    xdims, k, filt, stride, pad, dil = case
    x = torch.randn(xdims, generator=gen).double().requires_grad_()
    w = (torch.randn((k, xdims[1], *filt), generator=gen) * 0.3).double()
    y = _conv(x, w, stride, pad, dil)
    dy = torch.randn(y.shape, generator=gen)
    (ref,) = torch.autograd.grad(y, (x,), dy.double())
    dyt, wt = dy.to(dtype), w.to(dtype)
    dx_strides = torch.empty(xdims).stride()
    if layout == "nhwc" and len(xdims) in (4, 5):  # 1-D stays NCL
        fmt = torch.channels_last if len(xdims) == 4 else torch.channels_last_3d
        dyt, wt = dyt.to(memory_format=fmt), wt.to(memory_format=fmt)
        dx_strides = torch.empty(xdims).to(memory_format=fmt).stride()
    if dx_layout == "strided":  # every other element along the last axis
        dx_strides = torch.empty(*xdims[:-1], 2 * xdims[-1])[..., ::2].stride()
    g, feeds, out = conv_backward_graph("dgrad", dyt, wt, xdims, dx_strides, stride, pad, pad, dil)
    n = k * max(1, (torch.tensor(filt) // torch.tensor(stride)).prod().item())
    return g, feeds, out, ref, n


@pytest.mark.parametrize("case", CASES, ids=[f"c{i}" for i in range(len(CASES))])
@pytest.mark.parametrize(
    "dtype,layout",
    [(torch.float32, "nchw"), (torch.bfloat16, "nhwc"), (torch.float16, "nchw")],
)
def test_against_reference_and_pytorch(case, dtype, layout, request):
    gen = torch.Generator().manual_seed(seed_for(request.node.name))
    g, feeds, out, ref, n = _problem(case, dtype, gen, layout)
    got = check_engine(g, feeds, [out], COL2IM, n=n)
    assert_close(got[out], ref, dtype, n=n)


def test_strided_dx_and_convolution_mode(request):
    """dX written through the epilogue's pointers into a non-packed tensor; CONVOLUTION
    mode reads the filter flipped."""
    gen = torch.Generator().manual_seed(seed_for(request.node.name))
    g, feeds, out, ref, n = _problem(CASES[0], torch.float32, gen, dx_layout="strided")
    got = check_engine(g, feeds, [out], COL2IM, n=n)
    assert_close(got[out], ref, torch.float32, n=n)
    dy, w = feeds.values()
    gc, fc, oc = conv_backward_graph(
        "dgrad", dy, w, out.get_dim(), out.get_stride(), (2, 2), (3, 3), (3, 3), (1, 1),
        cudnn.convolution_mode.CONVOLUTION,
    )  # fmt: skip
    got = check_engine(gc, fc, [oc], COL2IM, n=n)
    x0 = torch.zeros(out.get_dim(), dtype=torch.float64, requires_grad=True)
    flipped = _conv(x0, w.double().flip(-1, -2), (2, 2), (3, 3), (1, 1))
    (ref_c,) = torch.autograd.grad(flipped, (x0,), dy.double())
    assert_close(got[oc], ref_c, torch.float32, n=n)


def test_relu_backward_and_scale_epilogue(request):
    """dx = 0.5 * relu_backward(dgrad(dy, w), x) in bf16: cuDNN's dgrad + drelu fusion on
    the gather's sums."""
    gen = torch.Generator().manual_seed(seed_for(request.node.name))
    dy = torch.randn(2, 6, 6, 7, generator=gen).to(torch.bfloat16)
    w = (torch.randn(6, 3, 7, 7, generator=gen) * 0.3).to(torch.bfloat16)
    x = torch.randn(2, 3, 11, 13, generator=gen).to(torch.bfloat16)
    g = cudnn.pygraph(
        intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT
    )
    tdy, tw, tx = g.tensor_like(dy), g.tensor_like(w), g.tensor_like(x)
    dgrad = g.conv_dgrad(tdy, tw, padding=[3, 3], stride=[2, 2])
    dgrad.set_dim(list(x.shape)).set_stride(list(x.stride()))
    out = g.scale(g.relu_backward(dgrad, tx), 0.5)
    out.set_output(True).set_data_type(cudnn.data_type.BFLOAT16)
    got = check_engine(g, {tdy: dy, tw: w, tx: x}, [out], COL2IM, n=24)
    assert got[out].dtype == torch.bfloat16


def test_phases_cover_every_pixel_once():
    """Tile rows per axis: ceil(in / s) on a phased axis (stride > 1, dilation 1), the
    image otherwise; the grid's phase axis is the product of the phased strides."""
    xdims, k, filt, stride, pad, dil = CASES[2]
    gen = torch.Generator().manual_seed(0)
    g, _, _, _, _ = _problem(CASES[0], torch.float32, gen)
    g.validate()
    from opendnn.engines.conv.gemm.col2im import plan_col2im

    geo = plan_col2im(g.op_graph)[0].geo
    assert C.phases(geo) == 4 and C._rows_per_axis(geo) == [6, 7]
    g, _, _, _, _ = _problem(CASES[2], torch.float32, gen)  # stride 2 with dilation 2
    g.validate()
    geo = plan_col2im(g.op_graph)[0].geo
    assert C.phases(geo) == 1 and C._rows_per_axis(geo) == [9, 8]


def test_declines_with_reasons():
    gen = torch.Generator().manual_seed(0)
    cases = [
        (((2, 16, 8, 8), 4, (3, 3), (1, 1), (1, 1), (1, 1)), {}, "few channels"),
        (CASES[0], {"w": "odd"}, "neither KCRS- nor KRSC-packed"),
    ]
    for case, change, why in cases:
        g, feeds, out, _, _ = _problem(case, torch.float32, gen)
        if change:
            dy, w = feeds.values()
            odd = w.permute(0, 2, 1, 3).contiguous().permute(0, 2, 1, 3)  # K, R, C, S
            g, feeds, out = conv_backward_graph(
                "dgrad", dy, odd, out.get_dim(), out.get_stride(), (2, 2), (3, 3), (3, 3), (1, 1)
            )
        g.validate()
        s = Col2imDgradEngine().check_support(g.op_graph, Target())
        assert not s.ok and why in s.reason, s.reason
        with pytest.raises(GraphNotSupportedError):
            g.create_execution_plan(COL2IM, {})
    # grouped problems belong to the grouped and depthwise engines
    dy = torch.randn(1, 4, 5, 5)
    g, _, _ = conv_backward_graph(
        "dgrad", dy, torch.randn(4, 1, 3, 3), (1, 2, 5, 5), (50, 25, 5, 1), (1, 1), (1, 1),
        (1, 1), (1, 1),
    )  # fmt: skip
    g.validate()
    s = Col2imDgradEngine().check_support(g.op_graph, Target())
    assert not s.ok and "one group" in s.reason, s.reason


def test_columns_past_int32_address_in_int64(monkeypatch):
    """COL's offsets widen to int64 once N x kk x P reaches the int64 span (lowered here;
    the int64 test runs the plan), after the row index is split in int32."""
    from opendnn.engines.conv import analysis
    from opendnn.engines.conv.gemm.col2im import plan_col2im

    gen = torch.Generator().manual_seed(0)
    g, _, _, _, _ = _problem(CASES[0], torch.float32, gen)
    g.validate()
    a, order = plan_col2im(g.op_graph)
    narrow = C.source("k", a.geo, order, epilogue_params=[], epilogue_body="pass")
    assert "_colrow = nb * " in narrow and ".to(tl.int64)" not in narrow
    monkeypatch.setattr(analysis, "INT64_SPAN", 16)
    wide = C.source("k", a.geo, order, epilogue_params=[], epilogue_body="pass")
    assert "_colrow = nb.to(tl.int64) * " in wide
    assert wide.index("nb = _q") < wide.index("nb.to(tl.int64)")
