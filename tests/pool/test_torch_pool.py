"""opendnn.torch's pooling (max / avg pool 1-3d, adaptive average pooling) against
torch.nn.functional on CPU (the pooling engines through the Triton interpreter): forward
(max pooling bit for bit), gradients against PyTorch in float64, return_indices equal to
PyTorch's, ties and NaN, ceil_mode, padding, divisor_override, layouts (NCHW,
channels_last, strided), unbatched and zero-batch inputs, data types; opcheck on every
custom op; a torch.compile(fullgraph=True) trace; bad arguments as typed errors."""

import math

import pytest
import torch
import torch.nn.functional as F
from _util import assert_close, expect_error
from _util import torch_layout as layout

from opendnn.errors import BadParamError, GraphNotSupportedError, Status
from opendnn.torch import pool as P

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
ops = torch.ops.opendnn


def _pair(rng, shape, dtype, how):
    x = layout(rng.rand(shape, dtype), how)
    return x.detach().clone().requires_grad_(), x.detach().double().requires_grad_()


def _run(fn, ref_fn, rng, shape, dtype, how, window, exact: bool):
    """fn(x) against ref_fn(x in float64): y (bit for bit when ``exact``), dx, layout."""
    x, xr = _pair(rng, shape, dtype, how)
    y, y_ref = fn(x), ref_fn(xr)
    assert y.dtype == dtype and y.shape == y_ref.shape
    if exact:
        assert torch.equal(y, y_ref.to(dtype)), "max pooling must select PyTorch's values"
    else:
        assert_close(y, y_ref, dtype, window)
    if how == "cl" and y.dim() >= 3 and y.shape[1] > 1:
        assert y.stride(1) == 1, "channels-last input, channels-last output"
    dy = rng.rand(y.shape, dtype)
    y.backward(dy)
    y_ref.backward(dy.double())
    assert_close(x.grad, xr.grad, dtype, window)


# ---- max pooling --------------------------------------------------------------------------
MAX_CASES = [  # (op, shape, kernel, stride, padding, ceil_mode, layout, dtype)
    ("max_pool1d", (2, 3, 10), 3, 2, 1, True, "nchw", F32),
    ("max_pool2d", (2, 3, 7, 9), 3, 2, 1, False, "cl", F32),  # ResNet's stem pool
    ("max_pool2d", (2, 3, 7, 9), (2, 3), (2, 1), (1, 0), False, "strided", BF16),
    ("max_pool2d", (1, 5, 5, 6), 2, None, 0, True, "nchw", F16),
    ("max_pool2d", (2, 1, 4, 4), 1, 1, 0, False, "nchw", F32),
    ("max_pool3d", (2, 3, 3, 5, 4), 2, (1, 2, 2), (1, 0, 1), True, "cl", F32),
]


@pytest.mark.parametrize("op,shape,k,s,p,ceil,how,dtype", MAX_CASES)
def test_max_pool(rng, op, shape, k, s, p, ceil, how, dtype):
    window = math.prod(k) if isinstance(k, tuple) else k ** (len(shape) - 2)
    _run(
        lambda x: getattr(P, op)(x, k, s, p, ceil_mode=ceil),
        lambda x: getattr(F, op)(x, k, s, p, ceil_mode=ceil),
        rng,
        shape,
        dtype,
        how,
        window,
        True,
    )


@pytest.mark.parametrize("op,shape,k,s,p,ceil,how,dtype", MAX_CASES)
def test_max_pool_return_indices(rng, op, shape, k, s, p, ceil, how, dtype):
    """PyTorch's flat indices into each input plane, also on ties (every window of
    integer-valued input holds equal values: the first maximum wins in both)."""
    x = layout(rng.ints(shape, -2, 3).to(dtype), how)
    y, idx = getattr(P, op)(x, k, s, p, ceil_mode=ceil, return_indices=True)
    y_ref, idx_ref = getattr(F, op)(x, k, s, p, ceil_mode=ceil, return_indices=True)
    assert torch.equal(y, y_ref) and idx.dtype == torch.int64
    assert torch.equal(idx, idx_ref)


def test_max_pool_ties_route_to_the_first_maximum(rng):
    """Gradients of tied windows go where PyTorch sends them (the first maximum)."""
    x = layout(rng.ints((2, 3, 6, 7), 0, 2).float(), "cl").requires_grad_()
    xr = x.detach().clone().requires_grad_()
    y, y_ref = P.max_pool2d(x, 3, 2, 1), F.max_pool2d(xr, 3, 2, 1)
    dy = rng.rand(y.shape, F32)
    y.backward(dy)
    y_ref.backward(dy)
    assert_close(x.grad, xr.grad, F32, 9)


def test_max_pool_nan_propagates(rng):
    x = rng.rand((1, 2, 5, 5), F32)
    x[0, 0, 1, 1] = float("nan")
    x[0, 1, 4, 4] = float("nan")
    assert_close(P.max_pool2d(x, 3, 2, 1), F.max_pool2d(x, 3, 2, 1), F32)


def test_max_pool_without_grad_writes_no_index(rng):
    """Without autograd the forward is opendnn::max_pool (no argmax offsets written); its
    own backward recomputes the argmax from x."""
    x = rng.rand((2, 3, 5, 5), F32)
    with torch.no_grad():
        assert torch.equal(P.max_pool2d(x, 2), F.max_pool2d(x, 2))
    xg, xr = x.clone().requires_grad_(), x.clone().requires_grad_()
    ops.max_pool(xg, [3, 3], [2, 2], [1, 1], [1, 1]).sum().backward()
    F.max_pool2d(xr, 3, 2, 1).sum().backward()
    assert torch.equal(xg.grad, xr.grad)


# ---- average pooling ----------------------------------------------------------------------
AVG_CASES = [  # (op, shape, kernel, stride, padding, ceil_mode, include_pad, divisor, layout, dt)
    ("avg_pool2d", (2, 3, 7, 9), 3, 2, 1, False, True, None, "cl", F32),
    ("avg_pool2d", (2, 3, 7, 9), 3, 2, 1, False, False, None, "strided", F32),
    ("avg_pool2d", (2, 3, 7, 9), 2, 2, 0, True, True, None, "nchw", F32),
    ("avg_pool2d", (2, 4, 7, 6), 3, 2, 1, True, False, None, "cl", BF16),
    ("avg_pool2d", (1, 3, 7, 9), 3, 2, 1, True, True, 5, "nchw", F16),
    ("avg_pool2d", (2, 3, 8, 8), 4, None, 0, False, True, None, "cl", F32),  # EmoNet's 4x4
    ("avg_pool1d", (2, 3, 10), 4, 3, 2, False, True, None, "nchw", F32),
    ("avg_pool3d", (2, 3, 4, 5, 3), 2, (2, 2, 1), 0, True, True, None, "cl", F32),
    ("avg_pool3d", (1, 2, 3, 3, 3), 3, 1, 1, False, True, 7, "nchw", F32),
]


@pytest.mark.parametrize("op,shape,k,s,p,ceil,include,div,how,dtype", AVG_CASES)
def test_avg_pool(rng, op, shape, k, s, p, ceil, include, div, how, dtype):
    kw = dict(ceil_mode=ceil, count_include_pad=include)
    if div is not None:
        kw["divisor_override"] = div
    window = math.prod(k) if isinstance(k, tuple) else k ** (len(shape) - 2)
    _run(
        lambda x: getattr(P, op)(x, k, s, p, **kw),
        lambda x: getattr(F, op)(x, k, s, p, **kw),
        rng,
        shape,
        dtype,
        "nchw" if how == "nchw" else how,
        window,
        False,
    )


@pytest.mark.parametrize(
    "op,shape,size,how",
    [
        ("adaptive_avg_pool2d", (2, 3, 7, 7), 1, "cl"),  # ResNet's global pooling
        ("adaptive_avg_pool2d", (2, 3, 6, 9), (None, 3), "nchw"),
        ("adaptive_avg_pool1d", (2, 3, 8), 4, "strided"),
        ("adaptive_avg_pool3d", (1, 2, 4, 4, 2), (2, 2, 1), "cl"),
    ],
)
def test_adaptive_avg_pool(rng, op, shape, size, how):
    _run(
        lambda x: getattr(P, op)(x, size),
        lambda x: getattr(F, op)(x, size),
        rng,
        shape,
        F32,
        how,
        math.prod(shape[2:]),
        False,
    )


@pytest.mark.parametrize(
    "fn", [lambda f, x: f.max_pool2d(x, 2, 1), lambda f, x: f.avg_pool2d(x, 3, 2, 1)]
)
def test_unbatched(rng, fn):
    _run(lambda x: fn(P, x), lambda x: fn(F, x), rng, (3, 5, 6), F32, "nchw", 9, False)


@pytest.mark.parametrize(
    "fn",
    [
        lambda f, x: f.max_pool2d(x, 2),
        lambda f, x: f.max_pool2d(x, 2, return_indices=True)[0],
        lambda f, x: f.avg_pool3d(x.unsqueeze(2), 1),
    ],
)
def test_zero_batch(fn):
    x = torch.empty(0, 3, 4, 4, requires_grad=True)
    y = fn(P, x)
    assert y.shape == fn(F, x).shape
    y.sum().backward()
    assert x.grad.shape == x.shape


@pytest.mark.parametrize(
    "call",
    [
        lambda f, x: f.max_pool2d(x, 3, 2, 1),
        lambda f, x: f.avg_pool2d(x, 3, 2, 1, divisor_override=2),
        lambda f, x: f.adaptive_avg_pool2d(x, 1),
    ],
)
def test_expanded_output_gradient(rng, call):
    """loss = y.sum() hands the backward a gradient of stride 0 everywhere."""
    x, xr = _pair(rng, (2, 3, 5, 6), F32, "cl")
    call(P, x).sum().backward()
    call(F, xr).sum().backward()
    assert_close(x.grad, xr.grad, F32, 9)


# ---- custom ops: opcheck, torch.compile ---------------------------------------------------
def _opcheck_cases():
    g = torch.Generator().manual_seed(5)
    x = torch.randn(2, 3, 5, 6, generator=g).requires_grad_()
    xc = torch.randn(2, 3, 5, 6, generator=g).to(memory_format=torch.channels_last)
    xc.requires_grad_()
    geo = ([3, 3], [2, 2], [1, 1], [1, 1])
    dy = torch.randn(2, 3, 3, 3, generator=g)
    index = torch.randint(0, 9, (2, 3, 3, 3), generator=g, dtype=torch.int8)
    return [
        (ops.max_pool, (x, *geo)),
        (ops.max_pool, (xc, [2, 2], [1, 2], [0, 0], [0, 1])),
        (ops.max_pool_backward, (dy, x.detach(), *geo)),
        (ops.max_pool_with_index, (xc, *geo)),
        (ops.max_pool_index_backward, (dy, index, [2, 3, 5, 6], True, *geo)),
        (ops.avg_pool, (x, *geo, True, 1.0)),
        (ops.avg_pool, (xc, *geo, False, 1.0)),
        (ops.avg_pool, (x, *geo, True, 0.5)),
        (ops.avg_pool_backward, (dy, [2, 3, 5, 6], False, *geo, False, 1.0)),
        (ops.avg_pool_backward, (dy, [2, 3, 5, 6], True, *geo, True, 2.0)),
    ]


@pytest.mark.parametrize("case", range(10))
def test_opcheck(case):
    op, args = _opcheck_cases()[case]
    torch.library.opcheck(op, args)


def test_torch_compile_fullgraph():
    def chain(f, x):
        y = f.max_pool2d(x, 3, 2, 1)
        y = f.avg_pool2d(y, 2, ceil_mode=True)
        return f.adaptive_avg_pool2d(y, 1).square().sum()

    x = torch.randn(2, 3, 9, 9, generator=torch.Generator().manual_seed(1))
    x = x.to(memory_format=torch.channels_last)
    xo, xr = x.clone().requires_grad_(), x.clone().requires_grad_()
    out = torch.compile(lambda t: chain(P, t), fullgraph=True, backend="aot_eager")(xo)
    out_ref = chain(F, xr)
    assert_close(out, out_ref, F32, 81)
    out.backward()
    out_ref.backward()
    assert_close(xo.grad, xr.grad, F32, 81)


# ---- bad arguments ------------------------------------------------------------------------
X = torch.randn(1, 2, 6, 6)
BAD = [  # (error, status, op, tensor or None, call, PyTorch refuses it too)
    (
        GraphNotSupportedError,
        Status.NOT_SUPPORTED,
        "max_pool2d",
        None,
        lambda f: f.max_pool2d(X, 2, dilation=2),
        False,
    ),
    (
        BadParamError,
        Status.BAD_PARAM_OUT_OF_BOUND,
        "max_pool2d",
        None,
        lambda f: f.max_pool2d(X, 3, padding=2),
        True,
    ),
    (
        BadParamError,
        Status.BAD_PARAM_OUT_OF_BOUND,
        "avg_pool2d",
        "input",
        lambda f: f.avg_pool2d(X, 7),
        True,
    ),
    (
        BadParamError,
        Status.BAD_PARAM_OUT_OF_BOUND,
        "max_pool1d",
        None,
        lambda f: f.max_pool1d(X[0], 2, stride=0),
        True,
    ),
    (
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        "max_pool3d",
        "input",
        lambda f: f.max_pool3d(X[0, 0], 2),
        True,
    ),
    (
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        "avg_pool2d",
        None,
        lambda f: f.avg_pool2d(X, (2, 2, 2)),
        True,
    ),
    (
        BadParamError,
        Status.BAD_PARAM_OUT_OF_BOUND,
        "avg_pool2d",
        None,
        lambda f: f.avg_pool2d(X, 2, divisor_override=0),
        True,
    ),
    (
        GraphNotSupportedError,
        Status.NOT_SUPPORTED,
        "avg_pool2d",
        None,
        lambda f: f.avg_pool2d(X, 3, 2, 1, ceil_mode=True),
        False,
    ),
    (
        GraphNotSupportedError,
        Status.NOT_SUPPORTED,
        "adaptive_avg_pool2d",
        None,
        lambda f: f.adaptive_avg_pool2d(X, 4),
        False,
    ),
    (
        GraphNotSupportedError,
        Status.NOT_SUPPORTED_DATA_TYPE,
        "max_pool2d",
        "input",
        lambda f: f.max_pool2d(X.long(), 2),
        False,
    ),
]


@pytest.mark.parametrize(
    "exc,status,op,tensor,call,torch_refuses", BAD, ids=[f"{b[2]}-{i}" for i, b in enumerate(BAD)]
)
def test_bad_arguments(exc, status, op, tensor, call, torch_refuses):
    """A typed error naming the operation (and the tensor); for an argument PyTorch takes
    but opendnn does not, GraphNotSupportedError (what enable() falls back on)."""
    expect_error(exc, status, lambda: call(P), op, *([tensor] if tensor else []))
    if torch_refuses:
        with pytest.raises((RuntimeError, ValueError)):
            call(F)
    elif exc is GraphNotSupportedError:
        call(F)
