"""The descriptor API's convolution: results against PyTorch, algorithm queries, and one
test per bad-input rule."""

import pytest
import torch
import torch.nn.functional as F

import opendnn.legacy as cudnn
from opendnn.errors import BadParamError, GraphNotSupportedError, Status

FLOAT = cudnn.DataType.FLOAT
NCHW = cudnn.TensorFormat.NCHW


def _problem(
    n=2, c=4, h=9, w=7, k=6, r=3, s=3, pad=(1, 1), stride=(2, 1), dil=(1, 1), groups=1, fmt=NCHW
):
    handle = cudnn.create("cpu")
    x_desc = cudnn.create_tensor_descriptor()
    cudnn.set_tensor_4d_descriptor(x_desc, fmt, FLOAT, n, c, h, w)
    w_desc = cudnn.create_filter_descriptor()
    cudnn.set_filter_4d_descriptor(w_desc, FLOAT, fmt, k, c // groups, r, s)
    conv = cudnn.create_convolution_descriptor()
    cudnn.set_convolution_2d_descriptor(
        conv,
        pad[0],
        pad[1],
        stride[0],
        stride[1],
        dil[0],
        dil[1],
        cudnn.ConvolutionMode.CROSS_CORRELATION,
        FLOAT,
    )
    cudnn.set_convolution_group_count(conv, groups)
    dims = cudnn.get_convolution_2d_forward_output_dim(conv, x_desc, w_desc)
    y_desc = cudnn.create_tensor_descriptor()
    cudnn.set_tensor_4d_descriptor(y_desc, fmt, FLOAT, *dims)
    cl = torch.channels_last if fmt == cudnn.TensorFormat.NHWC else torch.contiguous_format
    x = torch.randn(n, c, h, w).to(memory_format=cl)
    wt = torch.randn(k, c // groups, r, s).to(memory_format=cl)
    y = torch.randn(*dims).to(memory_format=cl)
    return (
        handle,
        x_desc,
        w_desc,
        conv,
        y_desc,
        x,
        wt,
        y,
        dict(stride=stride, padding=pad, dilation=dil, groups=groups),
    )


@pytest.mark.parametrize("fmt", [NCHW, cudnn.TensorFormat.NHWC])
@pytest.mark.parametrize("alpha,beta", [(1.0, 0.0), (0.5, 0.0), (1.0, 1.0), (2.0, -0.5)])
def test_convolution_forward_with_blending(fmt, alpha, beta):
    h, xd, wd, conv, yd, x, w, y, kw = _problem(groups=2, fmt=fmt)
    y0 = y.clone()
    algo = cudnn.get_convolution_forward_algorithm_v7(h, xd, wd, conv, yd, 1)[0].algo
    cudnn.convolution_forward(h, alpha, xd, x, wd, w, conv, algo, None, 0, beta, yd, y)
    want = alpha * F.conv2d(x.double(), w.double(), **kw) + beta * y0.double()
    assert torch.allclose(y.double(), want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("mode", list(cudnn.ActivationMode))
def test_bias_activation_forward_every_mode(mode):
    h, xd, wd, conv, yd, x, w, y, kw = _problem(pad=(1, 0))
    z = torch.randn_like(y)
    bd = cudnn.create_tensor_descriptor()
    cudnn.set_tensor_4d_descriptor(bd, NCHW, FLOAT, 1, 6, 1, 1)
    b = torch.randn(1, 6, 1, 1)
    act = cudnn.create_activation_descriptor()
    cudnn.set_activation_descriptor(act, mode, cudnn.NanPropagation.NOT_PROPAGATE_NAN, 0.7)
    cudnn.convolution_bias_activation_forward(
        h,
        0.5,
        xd,
        x,
        wd,
        w,
        conv,
        cudnn.ConvolutionFwdAlgo.IMPLICIT_GEMM,
        None,
        0,
        0.25,
        yd,
        z,
        bd,
        b,
        act,
        yd,
        y,
    )
    pre = 0.5 * F.conv2d(x.double(), w.double(), **kw) + 0.25 * z.double() + b.double()
    want = {
        cudnn.ActivationMode.SIGMOID: torch.sigmoid,
        cudnn.ActivationMode.RELU: torch.relu,
        cudnn.ActivationMode.TANH: torch.tanh,
        cudnn.ActivationMode.CLIPPED_RELU: lambda t: t.clamp(0, 0.7),
        cudnn.ActivationMode.ELU: lambda t: F.elu(t, 0.7),
        cudnn.ActivationMode.IDENTITY: lambda t: t,
        cudnn.ActivationMode.SWISH: F.silu,
    }[mode](pre)
    assert torch.allclose(y.double(), want, rtol=1e-5, atol=1e-4)


def test_bias_activation_with_z_aliasing_y():
    """cuDNN lets z be y (residual in place): y = relu(conv + y + bias)."""
    h, xd, wd, conv, yd, x, w, y, kw = _problem()
    y0 = y.clone()
    bd = cudnn.create_tensor_descriptor()
    cudnn.set_tensor_4d_descriptor(bd, NCHW, FLOAT, 1, 6, 1, 1)
    b = torch.randn(1, 6, 1, 1)
    act = cudnn.create_activation_descriptor()
    cudnn.set_activation_descriptor(act, cudnn.ActivationMode.RELU, 0, 0.0)
    cudnn.convolution_bias_activation_forward(
        h,
        1.0,
        xd,
        x,
        wd,
        w,
        conv,
        cudnn.ConvolutionFwdAlgo.IMPLICIT_GEMM,
        None,
        0,
        1.0,
        yd,
        y,
        bd,
        b,
        act,
        yd,
        y,
    )
    want = torch.relu(F.conv2d(x.double(), w.double(), **kw) + y0.double() + b.double())
    assert torch.allclose(y.double(), want, rtol=1e-5, atol=1e-4)


def test_algorithm_queries_rank_and_explain():
    h, xd, wd, conv, yd, x, w, y, _ = _problem()
    assert cudnn.get_convolution_forward_algorithm_max_count(h) == 8
    perfs = cudnn.get_convolution_forward_algorithm_v7(h, xd, wd, conv, yd, 8)
    assert len(perfs) == 8 and perfs[0].status == Status.SUCCESS and perfs[0].time > 0
    built = {
        cudnn.ConvolutionFwdAlgo.IMPLICIT_GEMM,
        cudnn.ConvolutionFwdAlgo.GEMM,
        cudnn.ConvolutionFwdAlgo.DIRECT,
        cudnn.ConvolutionFwdAlgo.IMPLICIT_PRECOMP_GEMM,
    }
    # stride (2, 1): Winograd declines, and says why
    wino = next(p for p in perfs if p.algo == cudnn.ConvolutionFwdAlgo.WINOGRAD_NONFUSED)
    assert wino.status == Status.NOT_SUPPORTED and "stride 1" in wino.reason
    assert {p.algo for p in perfs if p.status == Status.SUCCESS} == built
    times = [p.time for p in perfs if p.status == Status.SUCCESS]
    assert times == sorted(times)
    unsupported = [p for p in perfs if p.status != Status.SUCCESS]
    assert unsupported and all(p.status == Status.NOT_SUPPORTED and p.reason for p in unsupported)
    found = cudnn.find_convolution_forward_algorithm_ex(h, xd, x, wd, w, conv, yd, y, 8, None, 0)
    assert found[0].status == Status.SUCCESS and found[0].time > 0
    assert (
        cudnn.get_convolution_forward_workspace_size(
            h, xd, wd, conv, yd, cudnn.ConvolutionFwdAlgo.IMPLICIT_GEMM
        )
        == 0
    )


def test_unimplemented_algorithm_is_not_supported_with_reason():
    h, xd, wd, conv, yd, x, w, y, _ = _problem()
    with pytest.raises(GraphNotSupportedError) as e:
        cudnn.convolution_forward(
            h, 1.0, xd, x, wd, w, conv, cudnn.ConvolutionFwdAlgo.FFT, None, 0, 0.0, yd, y
        )
    assert "FFT" in str(e.value)


@pytest.mark.parametrize(
    "args,rule",
    [
        ((-1, 0, 1, 1, 1, 1), "padding"),
        ((0, 0, 0, 1, 1, 1), "strides"),
        ((0, 0, 1, 1, 0, 1), "dilations"),
    ],
)
def test_bad_convolution_descriptor(args, rule):
    conv = cudnn.create_convolution_descriptor()
    with pytest.raises(BadParamError) as e:
        cudnn.set_convolution_2d_descriptor(
            conv, *args, cudnn.ConvolutionMode.CROSS_CORRELATION, FLOAT
        )
    assert e.value.status == Status.BAD_PARAM_OUT_OF_BOUND and rule in str(e.value)


def test_group_count_that_does_not_match_channels():
    h, xd, wd, conv, yd, x, w, y, _ = _problem()
    cudnn.set_convolution_group_count(conv, 3)  # C=4 filters C=4: 4 != 4*3
    with pytest.raises(BadParamError) as e:
        cudnn.get_convolution_2d_forward_output_dim(conv, xd, wd)
    assert e.value.status == Status.BAD_PARAM_SHAPE_MISMATCH and "group count" in str(e.value)


def test_output_descriptor_that_disagrees_with_the_query():
    h, xd, wd, conv, yd, x, w, y, _ = _problem()
    cudnn.set_tensor_4d_descriptor(yd, NCHW, FLOAT, 2, 6, 9, 7)
    with pytest.raises(BadParamError) as e:
        cudnn.convolution_forward(
            h,
            1.0,
            xd,
            x,
            wd,
            w,
            conv,
            cudnn.ConvolutionFwdAlgo.IMPLICIT_GEMM,
            None,
            0,
            0.0,
            yd,
            torch.empty(2, 6, 9, 7),
        )
    assert e.value.status == Status.BAD_PARAM_SHAPE_MISMATCH and "output-dim query" in str(e.value)


def test_buffer_that_disagrees_with_its_descriptor():
    h, xd, wd, conv, yd, x, w, y, _ = _problem()
    with pytest.raises(BadParamError) as e:
        cudnn.convolution_forward(
            h,
            1.0,
            xd,
            x[:, :, :5],
            wd,
            w,
            conv,
            cudnn.ConvolutionFwdAlgo.IMPLICIT_GEMM,
            None,
            0,
            0.0,
            yd,
            y,
        )
    assert e.value.status == Status.BAD_PARAM_SHAPE_MISMATCH and "'x'" in str(e.value)


def test_descriptor_never_set():
    xd = cudnn.create_tensor_descriptor()
    wd = cudnn.create_filter_descriptor()
    conv = cudnn.create_convolution_descriptor()
    with pytest.raises(BadParamError) as e:
        cudnn.get_convolution_2d_forward_output_dim(conv, xd, wd)
    assert "never set" in str(e.value)


def test_bad_tensor_descriptor_values():
    d = cudnn.create_tensor_descriptor()
    with pytest.raises(BadParamError):
        cudnn.set_tensor_4d_descriptor(d, NCHW, FLOAT, 1, 0, 4, 4)
    with pytest.raises(BadParamError):
        cudnn.set_tensor_4d_descriptor_ex(d, FLOAT, 1, 2, 4, 4, 32, 16, -4, 1)


def _backward_descs(fmt=NCHW, groups=2, stride=(2, 1)):
    h, xd, wd, conv, yd, x, w, y, kw = _problem(groups=groups, fmt=fmt, stride=stride)
    return h, xd, wd, conv, yd, x, w, torch.randn_like(y), kw


@pytest.mark.parametrize("fmt", [NCHW, cudnn.TensorFormat.NHWC])
@pytest.mark.parametrize("alpha,beta", [(1.0, 0.0), (0.5, 2.0)])
def test_backward_data_and_filter(fmt, alpha, beta):
    h, xd, wd, conv, yd, x, w, dy, kw = _backward_descs(fmt)
    xr, wr = x.double().requires_grad_(True), w.double().requires_grad_(True)
    F.conv2d(xr, wr, **kw).backward(dy.double())
    dx0, dw0 = torch.randn_like(x), torch.randn_like(w)
    dx, dw = dx0.clone(), dw0.clone()
    algo_d = cudnn.get_convolution_backward_data_algorithm_v7(h, wd, yd, conv, xd, 1)[0]
    assert algo_d.algo == cudnn.ConvolutionBwdDataAlgo.ALGO_1 and algo_d.status == Status.SUCCESS
    cudnn.convolution_backward_data(
        h, alpha, wd, w, yd, dy, conv, algo_d.algo, None, 0, beta, xd, dx
    )
    assert torch.allclose(dx.double(), alpha * xr.grad + beta * dx0.double(), rtol=1e-5, atol=1e-4)
    algo_f = cudnn.get_convolution_backward_filter_algorithm_v7(h, xd, yd, conv, wd, 1)[0]
    assert algo_f.algo == cudnn.ConvolutionBwdFilterAlgo.ALGO_1
    assert algo_f.determinism == cudnn.Determinism.DETERMINISTIC
    cudnn.convolution_backward_filter(
        h, alpha, xd, x, yd, dy, conv, algo_f.algo, None, 0, beta, wd, dw
    )
    assert torch.allclose(dw.double(), alpha * wr.grad + beta * dw0.double(), rtol=1e-5, atol=1e-4)


def test_backward_queries_and_find():
    h, xd, wd, conv, yd, x, w, dy, _ = _backward_descs()
    assert cudnn.get_convolution_backward_data_algorithm_max_count(h) == 6
    assert cudnn.get_convolution_backward_filter_algorithm_max_count(h) == 7
    perfs = cudnn.get_convolution_backward_filter_algorithm_v7(h, xd, yd, conv, wd, 7)
    nd = [
        p
        for p in perfs
        if p.algo in (cudnn.ConvolutionBwdFilterAlgo.ALGO_0, cudnn.ConvolutionBwdFilterAlgo.ALGO_3)
    ]
    assert all(p.determinism == cudnn.Determinism.NON_DETERMINISTIC for p in nd)
    assert all(p.reason for p in perfs if p.status != Status.SUCCESS)
    found = cudnn.find_convolution_backward_data_algorithm_ex(
        h, wd, w, yd, dy, conv, xd, torch.empty_like(x), 6, None, 0
    )
    assert found[0].status == Status.SUCCESS and found[0].time > 0
    assert (
        cudnn.get_convolution_backward_filter_workspace_size(
            h, xd, yd, conv, wd, cudnn.ConvolutionBwdFilterAlgo.ALGO_1
        )
        == 0
    )


@pytest.mark.parametrize("beta", [0.0, 1.0])
def test_backward_bias(beta):
    h, xd, wd, conv, yd, x, w, dy, _ = _backward_descs()
    bd = cudnn.create_tensor_descriptor()
    cudnn.set_tensor_4d_descriptor(bd, NCHW, FLOAT, 1, 6, 1, 1)
    db0 = torch.randn(1, 6, 1, 1)
    db = db0.clone()
    cudnn.convolution_backward_bias(h, 2.0, yd, dy, beta, bd, db)
    want = 2.0 * dy.double().sum((0, 2, 3), keepdim=True) + beta * db0.double()
    assert torch.allclose(db.double(), want, rtol=1e-5, atol=1e-4)


def test_backward_dy_descriptor_that_disagrees():
    h, xd, wd, conv, yd, x, w, dy, _ = _backward_descs()
    bad = cudnn.create_tensor_descriptor()
    cudnn.set_tensor_4d_descriptor(bad, NCHW, FLOAT, 2, 6, 4, 4)
    with pytest.raises(BadParamError) as e:
        cudnn.convolution_backward_data(
            h,
            1.0,
            wd,
            w,
            bad,
            torch.randn(2, 6, 4, 4),
            conv,
            cudnn.ConvolutionBwdDataAlgo.ALGO_1,
            None,
            0,
            0.0,
            xd,
            torch.empty_like(x),
        )
    assert e.value.status == Status.BAD_PARAM_SHAPE_MISMATCH and "'dy'" in str(e.value)


def test_workspace_too_small_for_the_gemm_algorithm():
    h, xd, wd, conv, yd, x, w, y, _ = _problem()
    need = cudnn.get_convolution_forward_workspace_size(
        h, xd, wd, conv, yd, cudnn.ConvolutionFwdAlgo.GEMM
    )
    assert need > 0  # the im2col matrix lives in the workspace
    small = torch.empty(need - 1, dtype=torch.uint8)
    with pytest.raises(BadParamError) as e:
        cudnn.convolution_forward(
            h, 1.0, xd, x, wd, w, conv, cudnn.ConvolutionFwdAlgo.GEMM, small, need - 1, 0.0, yd, y
        )
    assert e.value.status == Status.BAD_PARAM_SIZE_INSUFFICIENT
    ws = torch.empty(need, dtype=torch.uint8)
    cudnn.convolution_forward(
        h, 1.0, xd, x, wd, w, conv, cudnn.ConvolutionFwdAlgo.GEMM, ws, need, 0.0, yd, y
    )
    assert torch.isfinite(y).all()


def test_find_honours_the_workspace_limit():
    h, xd, wd, conv, yd, x, w, y, _ = _problem()
    perfs = cudnn.find_convolution_forward_algorithm_ex(h, xd, x, wd, w, conv, yd, y, 8, None, 0)
    gemm = next(p for p in perfs if p.algo == cudnn.ConvolutionFwdAlgo.GEMM)
    assert gemm.status == Status.BAD_PARAM_SIZE_INSUFFICIENT and gemm.memory > 0
    assert perfs[0].status == Status.SUCCESS and perfs[0].memory == 0


def test_find_allocates_each_algorithms_workspace():
    """The non-Ex find calls allocate the workspace an algorithm asks for (cuDNN does):
    the algorithms that need one (GEMM's im2col, FFT) are timed, not refused."""
    h, xd, wd, conv, yd, *_ = _problem()
    perfs = cudnn.find_convolution_forward_algorithm(h, xd, wd, conv, yd, 8)
    need = [p for p in perfs if p.memory > 0 and p.status == Status.SUCCESS]
    assert any(p.algo == cudnn.ConvolutionFwdAlgo.GEMM for p in need)
    assert all(p.time > 0 for p in need)
    assert not [p for p in perfs if p.status == Status.BAD_PARAM_SIZE_INSUFFICIENT]
    dy_desc, dx_desc, dw_desc = yd, xd, wd
    for found in (
        cudnn.find_convolution_backward_data_algorithm(h, dw_desc, dy_desc, conv, dx_desc, 8),
        cudnn.find_convolution_backward_filter_algorithm(h, dx_desc, dy_desc, conv, dw_desc, 8),
    ):
        ok = [p for p in found if p.status == Status.SUCCESS]
        assert ok and all(p.time > 0 for p in ok)
        assert any(p.memory > 0 for p in ok)
        assert not [p for p in found if p.status == Status.BAD_PARAM_SIZE_INSUFFICIENT]


def test_find_bounds_what_it_allocates(monkeypatch):
    """An algorithm asking for more than the find's allocation bound is reported with the
    sizes, and the others are still timed."""
    from opendnn.legacy import cnn

    monkeypatch.setattr(cnn, "FIND_WORKSPACE_LIMIT", 1)
    h, xd, wd, conv, yd, *_ = _problem()
    perfs = cudnn.find_convolution_forward_algorithm(h, xd, wd, conv, yd, 8)
    gemm = next(p for p in perfs if p.algo == cudnn.ConvolutionFwdAlgo.GEMM)
    assert gemm.status == Status.BAD_PARAM_SIZE_INSUFFICIENT
    assert "allocation bound" in gemm.reason and str(gemm.memory) in gemm.reason
    assert perfs[0].status == Status.SUCCESS and perfs[0].memory <= 1


@pytest.mark.parametrize(
    "algo",
    [
        cudnn.ConvolutionFwdAlgo.FFT,
        cudnn.ConvolutionFwdAlgo.FFT_TILING,
        cudnn.ConvolutionFwdAlgo.WINOGRAD,
    ],
)
def test_every_forward_algorithm_runs_on_a_problem_it_claims(algo):
    """Stride 1, 3x3: the FFT, FFT-tiling and fused Winograd engines behind the enum."""
    h, xd, wd, conv, yd, x, w, y, kw = _problem(stride=(1, 1), h=7, w=6)
    y.fill_(float("nan"))
    ws_size = cudnn.get_convolution_forward_workspace_size(h, xd, wd, conv, yd, algo)
    cudnn.convolution_forward(
        h,
        1.0,
        xd,
        x,
        wd,
        w,
        conv,
        algo,
        torch.empty(ws_size, dtype=torch.uint8),
        ws_size,
        0.0,
        yd,
        y,
    )
    ref = F.conv2d(x.double(), w.double(), **kw)
    assert torch.allclose(y.double(), ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "algo",
    [
        cudnn.ConvolutionBwdDataAlgo.ALGO_0,
        cudnn.ConvolutionBwdDataAlgo.FFT,
        cudnn.ConvolutionBwdDataAlgo.FFT_TILING,
        cudnn.ConvolutionBwdDataAlgo.WINOGRAD,
        cudnn.ConvolutionBwdDataAlgo.WINOGRAD_NONFUSED,
    ],
)
def test_every_backward_data_algorithm_runs(algo):
    h, xd, wd, conv, yd, x, w, dy, kw = _backward_descs(groups=1, stride=(1, 1))
    xr = x.double().requires_grad_(True)
    F.conv2d(xr, w.double(), **kw).backward(dy.double())
    dx = torch.full_like(x, float("nan"))
    ws_size = cudnn.get_convolution_backward_data_workspace_size(h, wd, yd, conv, xd, algo)
    ws = torch.empty(ws_size, dtype=torch.uint8)
    cudnn.convolution_backward_data(h, 1.0, wd, w, yd, dy, conv, algo, ws, ws_size, 0.0, xd, dx)
    assert torch.allclose(dx.double(), xr.grad, rtol=1e-4, atol=1e-4)


def test_backward_filter_algo_3_uses_a_small_workspace():
    h, xd, wd, conv, yd, x, w, dy, kw = _backward_descs(groups=1, stride=(1, 1))
    wr = w.double().requires_grad_(True)
    F.conv2d(x.double(), wr, **kw).backward(dy.double())
    algo = cudnn.ConvolutionBwdFilterAlgo.ALGO_3
    ws_size = cudnn.get_convolution_backward_filter_workspace_size(h, xd, yd, conv, wd, algo)
    assert ws_size > 0
    dw = torch.full_like(w, float("nan"))
    cudnn.convolution_backward_filter(
        h,
        1.0,
        xd,
        x,
        yd,
        dy,
        conv,
        algo,
        torch.empty(ws_size, dtype=torch.uint8),
        ws_size,
        0.0,
        wd,
        dw,
    )
    assert torch.allclose(dw.double(), wr.grad, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "algo",
    [
        cudnn.ConvolutionBwdFilterAlgo.ALGO_0,
        cudnn.ConvolutionBwdFilterAlgo.FFT,
        cudnn.ConvolutionBwdFilterAlgo.FFT_TILING,
        cudnn.ConvolutionBwdFilterAlgo.WINOGRAD_NONFUSED,
    ],
)
def test_every_backward_filter_algorithm_runs(algo):
    """Stride 1, 3x3: the FFT, FFT-tiling and non-fused Winograd backward filters behind
    the enum, with alpha/beta blending into a prior dw."""
    h, xd, wd, conv, yd, x, w, dy, kw = _backward_descs(groups=1, stride=(1, 1))
    wr = w.double().requires_grad_(True)
    F.conv2d(x.double(), wr, **kw).backward(dy.double())
    prior = torch.randn_like(w)
    dw = prior.clone()
    ws_size = cudnn.get_convolution_backward_filter_workspace_size(h, xd, yd, conv, wd, algo)
    cudnn.convolution_backward_filter(
        h,
        0.5,
        xd,
        x,
        yd,
        dy,
        conv,
        algo,
        torch.empty(ws_size, dtype=torch.uint8),
        ws_size,
        2.0,
        wd,
        dw,
    )
    want = 0.5 * wr.grad + 2.0 * prior.double()
    assert torch.allclose(dw.double(), want, rtol=1e-4, atol=1e-4)


def test_backward_filter_winograd_fused_is_not_supported():
    h, xd, wd, conv, yd, x, w, dy, kw = _backward_descs(groups=1, stride=(1, 1))
    algo = cudnn.ConvolutionBwdFilterAlgo.WINOGRAD
    with pytest.raises(GraphNotSupportedError) as e:
        cudnn.get_convolution_backward_filter_workspace_size(h, xd, yd, conv, wd, algo)
    assert e.value.status == Status.NOT_SUPPORTED
    assert "WINOGRAD" in str(e.value) and "cuDNN implements none either" in str(e.value)


@pytest.mark.parametrize("out_type", [cudnn.DataType.FLOAT, cudnn.DataType.INT8])
def test_int8_convolution_through_the_descriptor_api(out_type):
    """INT8 image and filter, INT32 compute (the convolution descriptor's type), FLOAT or
    INT8 output: the v7 query ranks supported algorithms first (those that cannot take
    int8 say why), the find times them, and convolution_forward is exact."""
    nhwc = cudnn.TensorFormat.NHWC
    n, c, h, w, k = 2, 16, 6, 5, 8
    handle = cudnn.create("cpu")
    xd = cudnn.create_tensor_descriptor()
    cudnn.set_tensor_4d_descriptor(xd, nhwc, cudnn.DataType.INT8, n, c, h, w)
    wd = cudnn.create_filter_descriptor()
    cudnn.set_filter_4d_descriptor(wd, cudnn.DataType.INT8, nhwc, k, c, 3, 3)
    conv = cudnn.create_convolution_descriptor()
    cudnn.set_convolution_2d_descriptor(
        conv, 1, 1, 1, 1, 1, 1, cudnn.ConvolutionMode.CROSS_CORRELATION, cudnn.DataType.INT32
    )
    yd = cudnn.create_tensor_descriptor()
    cudnn.set_tensor_4d_descriptor(yd, nhwc, out_type, n, k, h, w)
    perfs = cudnn.get_convolution_forward_algorithm_v7(handle, xd, wd, conv, yd, 8)
    ok = [p for p in perfs if p.status == Status.SUCCESS]
    assert ok and perfs[: len(ok)] == ok
    gemm = next(p for p in perfs if p.algo == cudnn.ConvolutionFwdAlgo.GEMM)
    assert gemm.status == Status.NOT_SUPPORTED and "INT8" in gemm.reason
    found = cudnn.find_convolution_forward_algorithm(handle, xd, wd, conv, yd, 8)
    assert [p.algo for p in found if p.status == Status.SUCCESS]
    gen = torch.Generator().manual_seed(45)
    scale = 1 if out_type == cudnn.DataType.FLOAT else 0  # int8 out: small sums
    x = torch.randint(-9 * scale - 1, 9 * scale + 2, (n, c, h, w), generator=gen)
    wt = torch.randint(-3, 4, (k, c, 3, 3), generator=gen)
    x, wt = (t.to(torch.int8).to(memory_format=torch.channels_last) for t in (x, wt))
    dt = torch.float32 if out_type == cudnn.DataType.FLOAT else torch.int8
    y = torch.zeros(n, k, h, w, dtype=dt).to(memory_format=torch.channels_last)
    algo = ok[0].algo
    size = cudnn.get_convolution_forward_workspace_size(handle, xd, wd, conv, yd, algo)
    ws = torch.empty(max(size, 1), dtype=torch.uint8)
    cudnn.convolution_forward(handle, 1.0, xd, x, wd, wt, conv, algo, ws, size, 0.0, yd, y)
    exact = F.conv2d(x.double(), wt.double(), padding=1)
    if out_type == cudnn.DataType.INT8:
        exact = exact.clamp(-128, 127)
    assert torch.equal(y.double(), exact)
