"""The descriptor API's pooling calls against PyTorch in float64: the 2-D / N-D
descriptors and their getters, output-dim queries, pooling_forward / pooling_backward for
MAX, MAX_DETERMINISTIC and both AVERAGE modes, NCHW and NHWC, 2-D and 3-D, alpha/beta
blending, both NaN options; and each rule with its error."""

import math

import pytest
import torch
import torch.nn.functional as F
from _util import assert_close, expect_error

import opendnn.legacy as cudnn
from opendnn.errors import BadParamError, Status

FLOAT, HALF = cudnn.DataType.FLOAT, cudnn.DataType.HALF
NCHW, NHWC = cudnn.TensorFormat.NCHW, cudnn.TensorFormat.NHWC
PM = cudnn.PoolingMode
NAN = cudnn.NanPropagation


def _desc(fmt, dims, dtype=FLOAT):
    d = cudnn.create_tensor_descriptor()
    if len(dims) == 4:
        cudnn.set_tensor_4d_descriptor(d, fmt, dtype, *dims)
    else:
        cudnn.set_tensor_nd_descriptor_ex(d, fmt, dtype, len(dims), list(dims))
    return d


def _tensor(fmt, dims, rng, dtype=torch.float32):
    t = rng.rand(dims, dtype)
    if fmt == NHWC:
        t = t.contiguous(
            memory_format=torch.channels_last if len(dims) == 4 else torch.channels_last_3d
        )
    return t


def _pool(mode, window, pad, stride, nan=NAN.NOT_PROPAGATE_NAN):
    p = cudnn.create_pooling_descriptor()
    cudnn.set_pooling_nd_descriptor(p, mode, nan, len(window), window, pad, stride)
    return p


def _torch(x, mode, window, pad, stride):
    nd = x.dim() - 2
    if mode in (PM.MAX, PM.MAX_DETERMINISTIC):
        return getattr(F, f"max_pool{nd}d")(x, window, stride, pad)
    return getattr(F, f"avg_pool{nd}d")(
        x, window, stride, pad, count_include_pad=mode == PM.AVERAGE_COUNT_INCLUDE_PADDING
    )


def test_descriptors_round_trip():
    p = cudnn.create_pooling_descriptor()
    cudnn.set_pooling_2d_descriptor(
        p, PM.AVERAGE_COUNT_EXCLUDE_PADDING, NAN.PROPAGATE_NAN, 3, 2, 1, 0, 2, 1
    )
    assert cudnn.get_pooling_2d_descriptor(p) == (
        PM.AVERAGE_COUNT_EXCLUDE_PADDING,
        NAN.PROPAGATE_NAN,
        3,
        2,
        1,
        0,
        2,
        1,
    )
    assert cudnn.get_pooling_nd_descriptor(p, 2) == (
        PM.AVERAGE_COUNT_EXCLUDE_PADDING,
        NAN.PROPAGATE_NAN,
        2,
        [3, 2],
        [1, 0],
        [2, 1],
    )
    assert cudnn.get_pooling_2d_forward_output_dim(p, _desc(NCHW, (2, 3, 7, 6))) == (2, 3, 4, 5)
    q = _pool(PM.MAX, [2, 3, 3], [0, 1, 1], [2, 2, 1])
    assert cudnn.get_pooling_nd_forward_output_dim(q, _desc(NCHW, (1, 2, 5, 5, 4)), 5) == [
        1,
        2,
        2,
        3,
        4,
    ]
    assert [int(m) for m in PM] == [0, 1, 2, 3]
    cudnn.destroy_pooling_descriptor(p)


CASES = [
    ((2, 5, 7, 9), [3, 3], [1, 1], [2, 2]),
    ((2, 3, 6, 5), [2, 2], [0, 0], [2, 2]),
    ((1, 4, 5, 6, 4), [3, 2, 2], [1, 0, 1], [2, 2, 1]),
]


BLEND = [(CASES[0], NHWC, mode, 0.5, 2.0) for mode in PM]


@pytest.mark.parametrize(
    "case,fmt,mode,alpha,beta",
    [(case, fmt, mode, 1.0, 0.0) for case in CASES for fmt in (NCHW, NHWC) for mode in PM] + BLEND,
    ids=[f"{i}" for i in range(len(CASES) * 8 + len(BLEND))],
)
def test_forward_and_backward(rng, case, fmt, mode, alpha, beta):
    dims, window, pad, stride = case
    handle, p = cudnn.create("cpu"), _pool(mode, window, pad, stride)
    xd = _desc(fmt, dims)
    ydims = cudnn.get_pooling_nd_forward_output_dim(p, xd, len(dims))
    yd = _desc(fmt, ydims)
    x, y = _tensor(fmt, dims, rng), _tensor(fmt, ydims, rng)
    prior = y.clone()
    cudnn.pooling_forward(handle, p, alpha, xd, x, beta, yd, y)
    xr = x.double().requires_grad_(True)
    ref = _torch(xr, mode, window, pad, stride)
    assert_close(y, alpha * ref.detach() + beta * prior.double(), torch.float32, math.prod(window))
    dy, dx = _tensor(fmt, ydims, rng), _tensor(fmt, dims, rng)
    prior = dx.clone()
    ref.backward(dy.double())
    yv = ref.detach().float()
    cudnn.pooling_backward(handle, p, alpha, yd, yv, yd, dy, xd, x, beta, xd, dx)
    assert_close(dx, alpha * xr.grad + beta * prior.double(), torch.float32, 4)


def test_max_modes_give_the_same_bits(rng):
    handle, dims = cudnn.create("cpu"), (2, 4, 9, 9)
    xd = _desc(NHWC, dims)
    x = _tensor(NHWC, dims, rng, torch.float16)
    xd = _desc(NHWC, dims, HALF)
    yd = _desc(NHWC, (2, 4, 5, 5), HALF)
    dy = _tensor(NHWC, (2, 4, 5, 5), rng, torch.float16)
    out = []
    for mode in (PM.MAX, PM.MAX_DETERMINISTIC, PM.MAX_DETERMINISTIC):
        dx = torch.full_like(x, float("nan"))
        cudnn.pooling_backward(
            handle, _pool(mode, [3, 3], [1, 1], [2, 2]), 1.0, yd, dy, yd, dy, xd, x, 0.0, xd, dx
        )
        out.append(dx)
    assert torch.equal(out[0], out[1]) and torch.equal(out[1], out[2])


@pytest.mark.parametrize("nan", list(NAN))
def test_nan_options(rng, nan):
    handle, dims = cudnn.create("cpu"), (1, 2, 6, 6)
    x = _tensor(NCHW, dims, rng)
    x[0, 0, 2, 3] = float("nan")
    p = _pool(PM.MAX, [3, 3], [1, 1], [2, 2], nan)
    y = torch.empty(1, 2, 3, 3)
    cudnn.pooling_forward(handle, p, 1.0, _desc(NCHW, dims), x, 0.0, _desc(NCHW, y.shape), y)
    base = x.double() if nan == NAN.PROPAGATE_NAN else torch.nan_to_num(x.double(), nan=-math.inf)
    assert_close(y, F.max_pool2d(base, 3, 2, 1), torch.float32)
    assert bool(torch.isnan(y).any()) == (nan == NAN.PROPAGATE_NAN)


# ---- rules -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "args,status,rule",
    [
        ((2, [0, 3], [0, 0], [1, 1]), Status.BAD_PARAM_OUT_OF_BOUND, "window [0, 3] must be >= 1"),
        ((2, [3, 3], [0, 0], [1, -1]), Status.BAD_PARAM_OUT_OF_BOUND, "stride [1, -1] must be"),
        ((2, [3, 3], [-1, 0], [1, 1]), Status.BAD_PARAM_OUT_OF_BOUND, "padding [-1, 0] must be"),
        ((2, [3, 3], [3, 0], [1, 1]), Status.BAD_PARAM_OUT_OF_BOUND, "smaller than the window"),
        ((2, [3, 3, 3], [0, 0], [1, 1]), Status.BAD_PARAM_SHAPE_MISMATCH, "nb_dims=2 values"),
        ((4, [3] * 4, [0] * 4, [1] * 4), Status.BAD_PARAM_OUT_OF_BOUND, "nb_dims 4 must be 1..3"),
    ],
)
def test_descriptor_rules(args, status, rule):
    p = cudnn.create_pooling_descriptor()
    expect_error(
        BadParamError,
        status,
        lambda: cudnn.set_pooling_nd_descriptor(p, PM.MAX, NAN.NOT_PROPAGATE_NAN, *args),
        "set_pooling_nd_descriptor",
        rule,
    )


def test_output_dim_rules():
    p = _pool(PM.MAX, [5, 5], [1, 1], [1, 1])
    expect_error(
        BadParamError,
        Status.BAD_PARAM_OUT_OF_BOUND,
        lambda: cudnn.get_pooling_2d_forward_output_dim(p, _desc(NCHW, (1, 1, 2, 9))),
        "larger than the padded input",
    )
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        lambda: cudnn.get_pooling_nd_forward_output_dim(p, _desc(NCHW, (1, 1, 9, 9, 9)), 5),
        "a 2-D pooling descriptor needs 4",
    )
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        lambda: cudnn.get_pooling_nd_forward_output_dim(p, _desc(NCHW, (1, 1, 9, 9)), 5),
        "nb_dims 5 differs",
    )


def test_call_rules(rng):
    handle, p = cudnn.create("cpu"), _pool(PM.MAX, [2, 2], [0, 0], [2, 2])
    x = _tensor(NCHW, (1, 2, 4, 4), rng)
    xd = _desc(NCHW, (1, 2, 4, 4))
    y = torch.empty(1, 2, 3, 3)
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        lambda: cudnn.pooling_forward(handle, p, 1.0, xd, x, 0.0, _desc(NCHW, (1, 2, 3, 3)), y),
        "pooling_forward",
        "'y'",
        "must be [1, 2, 2, 2]",
    )
    yh = torch.empty(1, 2, 2, 2, dtype=torch.float16)
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        lambda: cudnn.pooling_forward(
            handle, p, 1.0, xd, x, 0.0, _desc(NCHW, (1, 2, 2, 2), HALF), yh
        ),
        "pooling_forward",
        "'y'",
        "HALF differs from x's FLOAT",
    )
    yd = _desc(NCHW, (1, 2, 2, 2))
    dy = torch.ones(1, 2, 2, 2)
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        lambda: cudnn.pooling_backward(
            handle,
            p,
            1.0,
            yd,
            dy,
            yd,
            dy,
            xd,
            x,
            0.0,
            _desc(NCHW, (1, 2, 4, 5)),
            torch.empty(1, 2, 4, 5),
        ),
        "pooling_backward",
        "'dx'",
        "must be [1, 2, 4, 4]",
    )
