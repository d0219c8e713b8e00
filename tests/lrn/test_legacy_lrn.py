"""The descriptor API's LRN and divisive normalization calls against PyTorch in float64:
cudnnLRNCrossChannelForward/Backward and cudnnDivisiveNormalizationForward/Backward with
odd and even window sizes, NCHW / NHWC / 5-D, alpha/beta blending, in place; the LRN
descriptor's defaults and ranges; each rule with its error."""

import pytest
import torch
from _util import assert_close, expect_error
from test_lrn import torch_div_norm, torch_lrn

import opendnn.legacy as cudnn
from opendnn.errors import BadParamError, Status

FLOAT = cudnn.DataType.FLOAT
NCHW, NHWC = cudnn.TensorFormat.NCHW, cudnn.TensorFormat.NHWC
CROSS, MEANS = cudnn.LRNMode.CROSS_CHANNEL_DIM1, cudnn.DivNormMode.PRECOMPUTED_MEANS


def _desc(dims, fmt=NCHW, dtype=FLOAT):
    d = cudnn.create_tensor_descriptor()
    if len(dims) == 4:
        cudnn.set_tensor_4d_descriptor(d, fmt, dtype, *dims)
    else:
        cudnn.set_tensor_nd_descriptor_ex(d, fmt, dtype, len(dims), dims)
    return d


def _tensor(dims, fmt, seed, scale=2.0):
    torch.manual_seed(seed)
    t = torch.randn(*dims) * scale
    if fmt == NHWC:
        return t.contiguous(
            memory_format=torch.channels_last if len(dims) == 4 else torch.channels_last_3d
        )
    return t


def _norm(n=5, alpha=0.7, beta=0.75, k=1.5):
    d = cudnn.create_lrn_descriptor()
    cudnn.set_lrn_descriptor(d, n, alpha, beta, k)
    return d


@pytest.mark.parametrize("fmt", [NCHW, NHWC])
@pytest.mark.parametrize("n", [3, 4])
@pytest.mark.parametrize("alpha,beta", [(1.0, 0.0), (0.5, 2.0)])
def test_lrn_forward_and_backward(fmt, n, alpha, beta):
    dims = (2, 6, 3, 4)
    h, d, norm = cudnn.create("cpu"), _desc(dims, fmt), _norm(n)
    x, y = _tensor(dims, fmt, 1), _tensor(dims, fmt, 2)
    prior = y.clone()
    cudnn.lrn_cross_channel_forward(h, norm, CROSS, alpha, d, x, beta, d, y)
    want = torch_lrn(x.double(), n, 0.7, 0.75, 1.5)
    assert_close(y, alpha * want + beta * prior.double(), torch.float32, n)
    xr = x.double().requires_grad_(True)
    dy = _tensor(dims, fmt, 3)
    torch_lrn(xr, n, 0.7, 0.75, 1.5).backward(dy.double())
    dx = _tensor(dims, fmt, 4)
    prior = dx.clone()
    cudnn.lrn_cross_channel_backward(
        h, norm, CROSS, alpha, d, want.float(), d, dy, d, x, beta, d, dx
    )
    assert_close(dx, alpha * xr.grad + beta * prior.double(), torch.float32, n * n)


@pytest.mark.parametrize(
    "dims,fmt,n", [((2, 3, 5, 4), NCHW, 3), ((1, 2, 4, 5), NHWC, 4), ((1, 2, 3, 4, 3), NCHW, 2)]
)
@pytest.mark.parametrize("alpha,beta", [(1.0, 0.0), (2.0, -1.0)])
def test_divisive_normalization_forward_and_backward(dims, fmt, n, alpha, beta):
    h, d, norm = cudnn.create("cpu"), _desc(dims, fmt), _norm(n)
    x, m = _tensor(dims, fmt, 5), _tensor(dims, fmt, 6, 0.3)
    temp, temp2 = torch.empty_like(x), torch.empty_like(x)
    y = _tensor(dims, fmt, 7)
    prior = y.clone()
    cudnn.divisive_normalization_forward(h, norm, MEANS, alpha, d, x, m, temp, temp2, beta, d, y)
    window = n ** (len(dims) - 2)
    want = torch_div_norm(x.double(), m.double(), n, 0.7, 0.75, 1.5)
    assert_close(y, alpha * want + beta * prior.double(), torch.float32, window)
    xr, mr = x.double().requires_grad_(True), m.double().requires_grad_(True)
    dy = _tensor(dims, fmt, 8)
    torch_div_norm(xr, mr, n, 0.7, 0.75, 1.5).backward(dy.double())
    dx, dm = _tensor(dims, fmt, 9), _tensor(dims, fmt, 10)
    pdx, pdm = dx.clone(), dm.clone()
    cudnn.divisive_normalization_backward(
        h, norm, MEANS, alpha, d, x, m, dy, temp, temp2, beta, d, dx, dm
    )
    assert_close(dx, alpha * xr.grad + beta * pdx.double(), torch.float32, window * window)
    assert_close(dm, alpha * mr.grad + beta * pdm.double(), torch.float32, window * window)


def test_lrn_in_place_reads_the_original_x():
    dims = (1, 5, 2, 3)
    h, d, norm = cudnn.create("cpu"), _desc(dims), _norm(5)
    x = _tensor(dims, NCHW, 11)
    want = torch_lrn(x.double(), 5, 0.7, 0.75, 1.5)
    cudnn.lrn_cross_channel_forward(h, norm, CROSS, 1.0, d, x, 0.0, d, x)
    assert_close(x, want, torch.float32, 5)


def test_descriptor_defaults_and_round_trip():
    d = cudnn.create_lrn_descriptor()
    assert cudnn.get_lrn_descriptor(d) == (5, 1e-4, 0.75, 2.0)
    cudnn.set_lrn_descriptor(d, 16, 0.5, 0.01, 1e-5)  # every bound is allowed
    assert cudnn.get_lrn_descriptor(d) == (16, 0.5, 0.01, 1e-5)
    cudnn.destroy_lrn_descriptor(d)


@pytest.mark.parametrize(
    "args,name,rule",
    [
        ((0, 1e-4, 0.75, 2.0), "lrn_n", "lrn_n=0 is outside [CUDNN_LRN_MIN_N=1"),
        ((17, 1e-4, 0.75, 2.0), "lrn_n", "CUDNN_LRN_MAX_N=16"),
        ((5, 1e-4, 0.75, 1e-6), "lrn_k", "below CUDNN_LRN_MIN_K=1e-05"),
        ((5, 1e-4, 0.001, 2.0), "lrn_beta", "below CUDNN_LRN_MIN_BETA=0.01"),
        ((5, float("nan"), 0.75, 2.0), "lrn_alpha", "not finite"),
    ],
)
def test_descriptor_ranges_raise_bad_param(args, name, rule):
    d = cudnn.create_lrn_descriptor()
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        lambda: cudnn.set_lrn_descriptor(d, *args),
        "set_lrn_descriptor",
        name,
        rule,
    )
    assert cudnn.get_lrn_descriptor(d) == (5, 1e-4, 0.75, 2.0)  # unchanged


def test_call_rules():
    h, norm = cudnn.create("cpu"), _norm()
    d3 = cudnn.create_tensor_descriptor()
    cudnn.set_tensor_nd_descriptor(d3, FLOAT, 3, (2, 3, 4), (12, 4, 1))
    x3 = torch.randn(2, 3, 4)
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        lambda: cudnn.lrn_cross_channel_forward(h, norm, CROSS, 1.0, d3, x3, 0.0, d3, x3.clone()),
        "lrn_cross_channel_forward",
        "needs 4 or 5 dims",
    )
    da, db = _desc((1, 2, 3, 3)), _desc((1, 2, 3, 4))
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        lambda: cudnn.lrn_cross_channel_forward(
            h, norm, CROSS, 1.0, da, torch.randn(1, 2, 3, 3), 0.0, db, torch.randn(1, 2, 3, 4)
        ),
        "lrn_cross_channel_forward",
        "y",
        "must equal x's [1, 2, 3, 3]",
    )
    x = torch.randn(1, 2, 3, 3)
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        lambda: cudnn.lrn_cross_channel_forward(h, norm, 7, 1.0, da, x, 0.0, da, x.clone()),
        "lrn_cross_channel_forward",
        "mode 7 is not one of",
    )
    expect_error(
        BadParamError,
        Status.BAD_PARAM_NULL_POINTER,
        lambda: cudnn.divisive_normalization_forward(
            h, norm, MEANS, 1.0, da, x, x, None, x.clone(), 0.0, da, x.clone()
        ),
        "divisive_normalization_forward",
        "temp",
        "is NULL",
    )
