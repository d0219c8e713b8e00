"""Convolution nodes: the float64 reference against PyTorch (fprop, dgrad, wgrad), and one
test per validation rule of the convolution nodes."""

import pytest
import torch
import torch.nn.functional as F

import opendnn.frontend as cudnn
from opendnn.errors import BadParamError, Status

CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
CASES = [  # (N, C, K, spatial in, filter, stride, pad, dilation, groups)
    (2, 4, 6, (11,), (3,), (2,), (1,), (1,), 2),
    (1, 3, 5, (9, 7), (3, 2), (2, 1), (1, 0), (1, 2), 1),
    (2, 6, 6, (8, 8), (3, 3), (1, 1), (1, 1), (1, 1), 6),  # depthwise
    (1, 2, 4, (5, 6, 4), (3, 2, 2), (1, 2, 1), (1, 0, 1), (1, 1, 2), 2),
    (3, 1, 1, (1, 1), (1, 1), (1, 1), (0, 0), (1, 1), 1),  # size-one everything
]


def _nhwc(t):
    return t.to(memory_format=torch.channels_last) if t.dim() == 4 else t


def _run(g, pack, out):
    g.build([cudnn.heur_mode.FALLBACK])
    assert g.get_plan_name_at_index(0).startswith("reference_f64")
    g.execute(pack, None)
    return out


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("mode", ["CROSS_CORRELATION", "CONVOLUTION"])
def test_reference_conv_against_torch(case, layout, mode):
    n, c, k, sp, f, stride, pad, dil, groups = case
    torch.manual_seed(hash((case, layout, mode)) % 2**31)
    x = torch.randn(n, c, *sp)
    w = torch.randn(k, c // groups, *f)
    if layout == "nhwc":
        x, w = _nhwc(x), _nhwc(w)
    wt = w.flip(list(range(2, w.dim()))) if mode == "CONVOLUTION" else w
    conv = CONV[len(sp)]
    xd = x.double().requires_grad_(True)
    wd = wt.double().requires_grad_(True)
    y_ref = conv(xd, wd, stride=stride, padding=pad, dilation=dil, groups=groups)
    dy = torch.randn(y_ref.shape, dtype=torch.float64)
    y_ref.backward(dy)
    cmode = cudnn.convolution_mode[mode]

    g = cudnn.pygraph()
    tx, tw = g.tensor_like(x), g.tensor_like(w)
    ty = g.conv_fprop(
        tx, tw, padding=list(pad), stride=list(stride), dilation=list(dil), convolution_mode=cmode
    )
    ty.set_output(True)
    g.validate()  # Y's strides follow X's layout (NHWC in, NHWC out)
    y = torch.empty_strided(ty.get_dim(), ty.get_stride()).fill_(float("nan"))
    _run(g, {tx: x, tw: w, ty: y}, y)
    assert torch.allclose(y.double(), y_ref, rtol=1e-5, atol=1e-5)

    g = cudnn.pygraph()
    tdy, tw = g.tensor_like(dy.float()), g.tensor_like(w)
    tdx = g.conv_dgrad(
        tdy, tw, padding=list(pad), stride=list(stride), dilation=list(dil), convolution_mode=cmode
    )
    tdx.set_dim(list(x.shape)).set_stride(list(x.stride())).set_output(True)
    dx = torch.full_like(x, float("nan"))
    _run(g, {tdy: dy.float(), tw: w, tdx: dx}, dx)
    assert torch.allclose(dx.double(), xd.grad, rtol=1e-5, atol=1e-4)

    g = cudnn.pygraph()
    tx, tdy = g.tensor_like(x), g.tensor_like(dy.float())
    tdw = g.conv_wgrad(
        tx, tdy, padding=list(pad), stride=list(stride), dilation=list(dil), convolution_mode=cmode
    )
    tdw.set_dim(list(w.shape)).set_stride(list(w.stride())).set_output(True)
    dw = torch.full_like(w, float("nan"))
    _run(g, {tx: x, tdy: dy.float(), tdw: dw}, dw)
    want = wd.grad.flip(list(range(2, w.dim()))) if mode == "CONVOLUTION" else wd.grad
    assert torch.allclose(dw.double(), want, rtol=1e-5, atol=1e-4)


def _fprop_graph(x_dims, w_dims, **kw):
    g = cudnn.pygraph(name="convg")
    x = g.tensor(dim=x_dims, data_type=cudnn.data_type.FLOAT, name="x")
    w = g.tensor(dim=w_dims, data_type=cudnn.data_type.FLOAT, name="w")
    y = g.conv_fprop(x, w, name="conv", **kw)
    return g, y


@pytest.mark.parametrize(
    "kw,rule,status",
    [
        (dict(stride=[0, 1]), "stride", Status.BAD_PARAM_OUT_OF_BOUND),
        (dict(dilation=[1, -1]), "dilation", Status.BAD_PARAM_OUT_OF_BOUND),
        (dict(padding=[-1, 0]), "padding", Status.BAD_PARAM_OUT_OF_BOUND),
        (dict(stride=[1, 1, 1]), "stride has 3 values", Status.BAD_PARAM_SHAPE_MISMATCH),
    ],
)
def test_bad_conv_parameters(kw, rule, status):
    g, y = _fprop_graph([1, 4, 8, 8], [4, 4, 3, 3], **kw)
    with pytest.raises(BadParamError) as e:
        g.validate()
    assert e.value.status == status and rule in str(e.value) and "conv" in str(e.value)


def test_channel_mismatch_groups_not_dividing():
    g, _ = _fprop_graph([1, 6, 8, 8], [4, 4, 3, 3])
    with pytest.raises(BadParamError) as e:
        g.validate()
    assert "do not divide image channels" in str(e.value) and "'w'" in str(e.value)
    g, _ = _fprop_graph([1, 6, 8, 8], [5, 3, 3, 3])  # 2 groups, 5 outputs
    with pytest.raises(BadParamError) as e:
        g.validate()
    assert "groups do not divide 5 output channels" in str(e.value)


def test_output_dims_that_disagree_with_the_geometry():
    g, y = _fprop_graph([1, 4, 8, 8], [4, 4, 3, 3])
    y.set_dim([1, 4, 8, 8])  # without padding the output is 6x6
    with pytest.raises(BadParamError) as e:
        g.validate()
    assert e.value.status == Status.BAD_PARAM_SHAPE_MISMATCH and "[1, 4, 6, 6]" in str(e.value)


def test_filter_larger_than_the_padded_image():
    g, _ = _fprop_graph([1, 4, 2, 2], [4, 4, 3, 3])
    with pytest.raises(BadParamError) as e:
        g.validate()
    assert "larger than the padded image" in str(e.value)


def test_dgrad_and_wgrad_need_their_output_dims():
    g = cudnn.pygraph()
    dy = g.tensor(dim=[1, 4, 6, 6], data_type=cudnn.data_type.FLOAT, name="dy")
    w = g.tensor(dim=[4, 4, 3, 3], data_type=cudnn.data_type.FLOAT, name="w")
    g.conv_dgrad(dy, w)
    with pytest.raises(BadParamError) as e:
        g.validate()
    assert e.value.status == Status.BAD_PARAM_NOT_FINALIZED and "DX dims must be set" in str(
        e.value
    )
    g = cudnn.pygraph()
    x = g.tensor(dim=[1, 4, 8, 8], data_type=cudnn.data_type.FLOAT, name="x")
    dy = g.tensor(dim=[1, 4, 6, 6], data_type=cudnn.data_type.FLOAT, name="dy")
    g.conv_wgrad(x, dy)
    with pytest.raises(BadParamError) as e:
        g.validate()
    assert "DW dims must be set" in str(e.value)


def test_rank_outside_1_to_3_spatial_dims():
    g, _ = _fprop_graph([1, 4, 8], [4, 4, 3, 3])
    with pytest.raises(BadParamError) as e:
        g.validate()
    assert e.value.status == Status.BAD_PARAM_SHAPE_MISMATCH
