"""The descriptor API's tensor operations (set, scale, add, op_tensor, transform,
reduce_tensor with indices) and activation_forward / activation_backward against PyTorch
in float64: NCHW and NHWC, padded strides, fp32/fp16/bf16, alpha/beta blending, in-place
use; and each rule with its error."""

import math

import pytest
import torch
from _util import assert_close, expect_error

import opendnn.legacy as cudnn
from opendnn.errors import BadParamError, GraphNotSupportedError, Status

FLOAT, HALF, BF16 = cudnn.DataType.FLOAT, cudnn.DataType.HALF, cudnn.DataType.BFLOAT16
TORCH = {FLOAT: torch.float32, HALF: torch.float16, BF16: torch.bfloat16}
NCHW, NHWC = cudnn.TensorFormat.NCHW, cudnn.TensorFormat.NHWC
ACT, NAN = cudnn.ActivationMode, cudnn.NanPropagation


def _desc(dims, dtype=FLOAT, fmt=NCHW, strides=None):
    d = cudnn.create_tensor_descriptor()
    if strides is not None:
        cudnn.set_tensor_4d_descriptor_ex(d, dtype, *dims, *strides)
    else:
        cudnn.set_tensor_4d_descriptor(d, fmt, dtype, *dims)
    return d


def _buf(rng, dims, dtype=FLOAT, fmt=NCHW, scale=1.0):
    t = (rng.rand(dims, torch.float32) * 2 - 1) * scale
    t = t.to(TORCH[dtype])
    return t.to(memory_format=torch.channels_last) if fmt == NHWC else t.contiguous()


def _padded(rng, dims, dtype=FLOAT, with_base=False):
    """An NCHW view whose rows have a pitch of W + 3 (non-packed)."""
    n, c, h, w = dims
    base = _buf(rng, (n, c, h, w + 3), dtype)
    view, strides = base[..., :w], (c * h * (w + 3), h * (w + 3), w + 3, 1)
    return (view, strides, base) if with_base else (view, strides)


H = cudnn.create("cpu")


# ---- set / scale / add -----------------------------------------------------------------------
@pytest.mark.parametrize("dtype,fmt", [(FLOAT, NCHW), (HALF, NHWC), (BF16, NCHW)])
def test_set_and_scale_tensor(rng, dtype, fmt):
    dims = (2, 3, 4, 5)
    d, y = _desc(dims, dtype, fmt), torch.full(dims, math.nan, dtype=TORCH[dtype])
    if fmt == NHWC:
        y = y.to(memory_format=torch.channels_last)
    cudnn.set_tensor(H, d, y, 1.5)
    assert torch.equal(y, torch.full(dims, 1.5, dtype=TORCH[dtype]))
    cudnn.scale_tensor(H, d, y, -2.0)
    assert torch.equal(y, torch.full(dims, -3.0, dtype=TORCH[dtype]))


def test_set_tensor_leaves_the_padding_alone(rng):
    dims = (2, 3, 4, 5)
    y, strides, base = _padded(rng, dims, with_base=True)
    before = base.clone()
    cudnn.set_tensor(H, _desc(dims, strides=strides), y, 7.0)
    assert torch.equal(y, torch.full(dims, 7.0))
    assert torch.equal(base[..., 5:], before[..., 5:])


@pytest.mark.parametrize("a_dims", [(2, 3, 4, 5), (1, 3, 1, 1), (2, 1, 4, 1), (1, 1, 1, 1)])
@pytest.mark.parametrize("alpha,beta", [(1.0, 0.0), (0.5, 2.0)])
def test_add_tensor_broadcasts(rng, a_dims, alpha, beta):
    dims = (2, 3, 4, 5)
    a, c = _buf(rng, a_dims), _buf(rng, dims, fmt=NHWC)
    prior = c.clone()
    cudnn.add_tensor(H, alpha, _desc(a_dims), a, beta, _desc(dims, fmt=NHWC), c)
    assert_close(c, alpha * a.double() + beta * prior.double(), torch.float32, 2)


def test_add_tensor_with_beta_zero_does_not_read_c(rng):
    dims = (2, 3, 4, 5)
    a, c = _buf(rng, dims), torch.full(dims, math.nan)
    cudnn.add_tensor(H, 1.0, _desc(dims), a, 0.0, _desc(dims), c)
    assert torch.equal(c, a)


# ---- op_tensor -----------------------------------------------------------------------------
OPS = {
    cudnn.OpTensorOp.ADD: torch.add,
    cudnn.OpTensorOp.MUL: torch.mul,
    cudnn.OpTensorOp.MIN: torch.minimum,
    cudnn.OpTensorOp.MAX: torch.maximum,
}


def _op_desc(op):
    d = cudnn.create_op_tensor_descriptor()
    cudnn.set_op_tensor_descriptor(d, op, FLOAT, NAN.NOT_PROPAGATE_NAN)
    return d


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("dtype", [FLOAT, HALF])
def test_op_tensor_binary(rng, op, dtype):
    dims, b_dims = (2, 3, 4, 5), (1, 3, 1, 5)
    a, b, c = _buf(rng, dims, dtype), _buf(rng, b_dims, dtype), _buf(rng, dims, dtype)
    prior = c.clone()
    cudnn.op_tensor(
        H,
        _op_desc(op),
        2.0,
        _desc(dims, dtype),
        a,
        -1.5,
        _desc(b_dims, dtype),
        b,
        0.5,
        _desc(dims, dtype),
        c,
    )
    want = OPS[op](2.0 * a.double(), -1.5 * b.double()) + 0.5 * prior.double()
    assert_close(c, want, TORCH[dtype], 2)


def test_op_tensor_sqrt_and_not(rng):
    dims = (2, 3, 4, 5)
    a = _buf(rng, dims).abs()
    a[0, 0, 0, :2] = 0.0
    c = torch.full(dims, math.nan)
    cudnn.op_tensor(
        H,
        _op_desc(cudnn.OpTensorOp.SQRT),
        4.0,
        _desc(dims),
        a,
        1.0,
        None,
        None,
        0.0,
        _desc(dims),
        c,
    )
    assert_close(c, torch.sqrt(4.0 * a.double()), torch.float32, 1)
    cudnn.op_tensor(
        H, _op_desc(cudnn.OpTensorOp.NOT), 1.0, _desc(dims), a, 1.0, None, None, 0.0, _desc(dims), c
    )
    assert torch.equal(c, (a == 0).float())


def test_op_tensor_in_place_over_a(rng):
    """cuDNN allows C to be A (same descriptor): each element is read before written."""
    dims = (3, 4, 5, 6)
    a, b = _buf(rng, dims), _buf(rng, (1, 4, 1, 1))
    want = a.double() * 3.0 * b.double() + 2.0 * a.double()
    cudnn.op_tensor(
        H,
        _op_desc(cudnn.OpTensorOp.MUL),
        3.0,
        _desc(dims),
        a,
        1.0,
        _desc((1, 4, 1, 1)),
        b,
        2.0,
        _desc(dims),
        a,
    )
    assert_close(a, want, torch.float32, 3)


# ---- transform_tensor -----------------------------------------------------------------------
@pytest.mark.parametrize("src,dst", [((FLOAT, NCHW), (HALF, NHWC)), ((BF16, NHWC), (FLOAT, NCHW))])
@pytest.mark.parametrize("alpha,beta", [(1.0, 0.0), (2.0, 0.5)])
def test_transform_tensor_between_layouts_and_types(rng, src, dst, alpha, beta):
    dims = (2, 5, 3, 7)
    x, y = _buf(rng, dims, *src), _buf(rng, dims, *dst)
    prior = y.clone()
    cudnn.transform_tensor(H, alpha, _desc(dims, *src), x, beta, _desc(dims, *dst), y)
    assert y.is_contiguous(memory_format=torch.channels_last) == (dst[1] == NHWC)
    want = alpha * x.double() + beta * prior.double()
    assert_close(y, want, TORCH[dst[0]], 2)


def test_transform_tensor_from_a_padded_view(rng):
    dims = (2, 3, 4, 5)
    x, strides = _padded(rng, dims)
    y = torch.full(dims, math.nan).to(memory_format=torch.channels_last)
    cudnn.transform_tensor(H, 1.0, _desc(dims, strides=strides), x, 0.0, _desc(dims, fmt=NHWC), y)
    assert torch.equal(y, x)


# ---- reduce_tensor --------------------------------------------------------------------------
R = cudnn.ReduceTensorOp


def _prod(x, dims):
    for d in sorted(dims, reverse=True):
        x = x.prod(d, keepdim=True)
    return x


RED = {
    R.ADD: lambda x, d: x.sum(d),
    R.MUL: _prod,
    R.MIN: lambda x, d: x.amin(d),
    R.MAX: lambda x, d: x.amax(d),
    R.AMAX: lambda x, d: x.abs().amax(d),
    R.AVG: lambda x, d: x.mean(d),
    R.NORM1: lambda x, d: x.abs().sum(d),
    R.NORM2: lambda x, d: x.square().sum(d).sqrt(),
    R.MUL_NO_ZEROS: lambda x, d: _prod(torch.where(x == 0, 1.0, x), d),
}


def _red_desc(op, indices=False):
    d = cudnn.create_reduce_tensor_descriptor()
    cudnn.set_reduce_tensor_descriptor(
        d,
        op,
        FLOAT,
        NAN.NOT_PROPAGATE_NAN,
        cudnn.ReduceTensorIndices.FLATTENED_INDICES
        if indices
        else cudnn.ReduceTensorIndices.NO_INDICES,
        cudnn.IndicesType.INDICES_32BIT,
    )
    return d


def _reduce(rng, op, a, c_dims, alpha=1.0, beta=0.0, indices=False, c=None):
    a_d, c_d = _desc(tuple(a.shape)), _desc(c_dims)
    rd = _red_desc(op, indices)
    c = torch.full(c_dims, math.nan) if c is None else c
    isz = cudnn.get_reduction_indices_size(H, rd, a_d, c_d)
    wsz = cudnn.get_reduction_workspace_size(H, rd, a_d, c_d)
    ind = torch.full((max(isz // 4, 1),), -1, dtype=torch.int32)
    cudnn.reduce_tensor(
        H, rd, ind, isz, torch.empty(wsz, dtype=torch.uint8), wsz, alpha, a_d, a, beta, c_d, c
    )
    return c, ind[: isz // 4]


@pytest.mark.parametrize("op", list(R))
@pytest.mark.parametrize("c_dims", [(2, 1, 4, 1), (1, 1, 1, 1), (2, 3, 1, 5)])
def test_reduce_tensor(rng, op, c_dims):
    a = _buf(rng, (2, 3, 4, 5)) + (1.5 if op in (R.MUL, R.MUL_NO_ZEROS) else 0.0)
    axes = [i for i, s in enumerate(c_dims) if s == 1 and a.shape[i] != 1]
    c, _ = _reduce(rng, op, a, c_dims)
    want = RED[op](a.double(), axes).reshape(c_dims)
    n = math.prod(a.shape[i] for i in axes)
    assert_close(c, want, torch.float32, n)


def test_reduce_tensor_blends(rng):
    a, c = _buf(rng, (2, 3, 4, 5)), _buf(rng, (2, 3, 1, 1))
    prior = c.clone()
    _reduce(rng, R.ADD, a, (2, 3, 1, 1), alpha=0.5, beta=-2.0, c=c)
    assert_close(
        c, 0.5 * a.double().sum((2, 3), keepdim=True) - 2.0 * prior.double(), torch.float32, 20
    )


@pytest.mark.parametrize("op", [R.MIN, R.MAX, R.AMAX])
@pytest.mark.parametrize("c_dims", [(2, 1, 4, 1), (1, 1, 1, 1), (2, 3, 4, 1)])
def test_reduce_tensor_flattened_indices(rng, op, c_dims):
    """Indices count row-major over the reduced dims within each region: the first
    extreme element (ties go to the lower index)."""
    a = _buf(rng, (2, 3, 4, 5))
    a[0, 1, 0, 2] = a[0, 2, 0, 3] = 9.0 if op != R.MIN else -9.0  # a tie in one region
    c, ind = _reduce(rng, op, a, c_dims, indices=True)
    axes = [i for i, s in enumerate(c_dims) if s == 1 and a.shape[i] != 1]
    kept = [i for i in range(4) if i not in axes]
    v = a.double().abs() if op == R.AMAX else a.double()
    flat = v.permute(*kept, *axes).reshape(*[a.shape[i] for i in kept], -1)
    want_idx = (flat.argmin(-1) if op == R.MIN else flat.argmax(-1)).reshape(c_dims)
    assert torch.equal(ind.view(c_dims).long(), want_idx)
    assert_close(c, RED[op](a.double(), axes).reshape(c_dims), torch.float32, 1)


def test_reduce_tensor_index_of_a_nan_region(rng):
    """When the extreme is NaN (it propagates), the index is the first NaN's."""
    a = _buf(rng, (1, 2, 1, 6))
    a[0, 1, 0, 4] = math.nan
    c, ind = _reduce(rng, R.MAX, a, (1, 2, 1, 1), indices=True)
    assert math.isnan(c[0, 1, 0, 0]) and ind[1].item() == 4
    assert ind[0].item() == int(a[0, 0, 0].argmax())


# ---- activations -------------------------------------------------------------------------------
def _act(mode, nan=NAN.PROPAGATE_NAN, coef=0.0, swish_beta=None):
    d = cudnn.create_activation_descriptor()
    cudnn.set_activation_descriptor(d, mode, nan, coef)
    if swish_beta is not None:
        cudnn.set_activation_descriptor_swish_beta(d, swish_beta)
    return d


CASES = {  # mode: (coef, swish beta, f in float64)
    ACT.SIGMOID: (0.0, None, torch.sigmoid),
    ACT.RELU: (0.0, None, torch.relu),
    ACT.TANH: (0.0, None, torch.tanh),
    ACT.CLIPPED_RELU: (0.75, None, lambda x: x.clamp(0.0, 0.75)),
    ACT.ELU: (0.6, None, lambda x: torch.where(x > 0, x, 0.6 * torch.expm1(x))),
    ACT.SWISH: (0.0, 1.7, lambda x: x * torch.sigmoid(1.7 * x)),
}


@pytest.mark.parametrize("mode", list(CASES))
@pytest.mark.parametrize("dtype,fmt", [(FLOAT, NCHW), (HALF, NHWC), (BF16, NCHW)])
@pytest.mark.parametrize("alpha,beta", [(1.0, 0.0), (0.5, 1.5)])
def test_activation_forward_and_backward(rng, mode, dtype, fmt, alpha, beta):
    coef, sb, f = CASES[mode]
    dims = (2, 3, 5, 7)
    d, act = _desc(dims, dtype, fmt), _act(mode, coef=coef, swish_beta=sb)
    x, y = _buf(rng, dims, dtype, fmt, 3.0), _buf(rng, dims, dtype, fmt)
    prior = y.clone()
    cudnn.activation_forward(H, act, alpha, d, x, beta, d, y)
    xd = x.double().requires_grad_(True)
    fx = f(xd)
    assert_close(y, alpha * fx.detach() + beta * prior.double(), TORCH[dtype], 2)
    dy, dx = _buf(rng, dims, dtype, fmt), _buf(rng, dims, dtype, fmt)
    dprior = dx.clone()
    fx.backward(dy.double())
    grad = xd.grad
    if mode == ACT.CLIPPED_RELU:  # the gradient is 0 at x == coef (autograd's is dy)
        grad = torch.where((x.double() > 0) & (x.double() < coef), dy.double(), 0.0)
    cudnn.activation_backward(H, act, alpha, d, y, d, dy, d, x, beta, d, dx)
    assert_close(dx, alpha * grad + beta * dprior.double(), TORCH[dtype], 4)


@pytest.mark.parametrize("mode", [ACT.RELU, ACT.CLIPPED_RELU])
def test_relu_nan_option(rng, mode):
    dims = (1, 2, 2, 3)
    x = _buf(rng, dims)
    x[0, 0, 0, 0], x[0, 1, 1, 2] = math.nan, math.nan
    d, y, dx = _desc(dims), torch.empty(dims), torch.empty(dims)
    dy = torch.ones(dims)
    keep = _act(mode, NAN.PROPAGATE_NAN, 6.0)
    cudnn.activation_forward(H, keep, 1.0, d, x, 0.0, d, y)
    cudnn.activation_backward(H, keep, 1.0, d, y, d, dy, d, x, 0.0, d, dx)
    assert torch.isnan(y).sum() == 2 and torch.isnan(dx).sum() == 2
    drop = _act(mode, NAN.NOT_PROPAGATE_NAN, 6.0)
    cudnn.activation_forward(H, drop, 1.0, d, x, 0.0, d, y)
    cudnn.activation_backward(H, drop, 1.0, d, y, d, dy, d, x, 0.0, d, dx)
    assert y[0, 0, 0, 0] == 0 and y[0, 1, 1, 2] == 0 and not torch.isnan(y).any()
    assert dx[0, 0, 0, 0] == 0 and not torch.isnan(dx).any()


def test_activation_in_place(rng):
    dims = (2, 3, 4, 5)
    x = _buf(rng, dims, scale=3.0)
    want = torch.tanh(x.double())
    cudnn.activation_forward(H, _act(ACT.TANH), 1.0, _desc(dims), x, 0.0, _desc(dims), x)
    assert_close(x, want, torch.float32, 1)


# ---- rules ---------------------------------------------------------------------------------------
def test_rules(rng):
    d4, d5 = _desc((2, 3, 4, 5)), _desc((2, 3, 4, 6))
    x, y = _buf(rng, (2, 3, 4, 5)), _buf(rng, (2, 3, 4, 6))
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        lambda: cudnn.activation_forward(H, _act(ACT.IDENTITY), 1.0, d4, x, 0.0, d4, x),
        "activation_forward",
        "IDENTITY",
    )
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        lambda: cudnn.activation_forward(H, _act(ACT.RELU), 1.0, d4, x, 0.0, d5, y),
        "activation_forward",
        "'y'",
        "must equal",
    )
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        lambda: cudnn.add_tensor(H, 1.0, _desc((1, 2, 1, 1)), x[:1, :2, :1, :1], 1.0, d4, x),
        "add_tensor",
        "'A'",
        "1 or C's",
    )
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        lambda: cudnn.transform_tensor(H, 1.0, d4, x, 0.0, d5, y),
        "transform_tensor",
        "'y'",
        "must equal",
    )
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        lambda: cudnn.transform_tensor(
            H, 1.0, d4, x, 0.0, _desc((2, 3, 4, 5), fmt=NHWC), x.as_strided(x.shape, (60, 1, 15, 3))
        ),
        "transform_tensor",
        "'y'",
        "in place",
    )
    never = cudnn.create_tensor_descriptor()
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        lambda: cudnn.set_tensor(H, never, x, 1.0),
        "set_tensor",
        "never set",
    )
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        lambda: cudnn.op_tensor(
            H, cudnn.create_op_tensor_descriptor(), 1.0, d4, x, 1.0, d4, x, 0.0, d4, x
        ),
        "op_tensor",
        "never set",
    )
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        lambda: cudnn.set_op_tensor_descriptor(cudnn.create_op_tensor_descriptor(), 9, FLOAT, 0),
        "set_op_tensor_descriptor",
        "unknown op",
    )


def test_reduce_rules(rng):
    a_d, c_d = _desc((2, 3, 4, 5)), _desc((2, 1, 4, 1))
    rd = cudnn.create_reduce_tensor_descriptor()
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        lambda: cudnn.set_reduce_tensor_descriptor(rd, R.AVG, FLOAT, 0, 1, 0),
        "set_reduce_tensor_descriptor",
        "only for MIN, MAX and AMAX",
    )
    expect_error(
        BadParamError,
        Status.NOT_SUPPORTED,
        lambda: cudnn.set_reduce_tensor_descriptor(rd, R.MAX, FLOAT, 0, 1, 1),
        "set_reduce_tensor_descriptor",
        "INDICES_64BIT",
    )
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        lambda: cudnn.get_reduction_workspace_size(H, _red_desc(R.ADD), a_d, _desc((2, 2, 4, 1))),
        "get_reduction_workspace_size",
        "'C'",
        "A's (3) or 1",
    )
    a = _buf(rng, (2, 3, 4, 5))
    rd = _red_desc(R.MAX, indices=True)
    wsz = cudnn.get_reduction_workspace_size(H, rd, a_d, c_d)
    ws = torch.empty(wsz, dtype=torch.uint8)
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SIZE_INSUFFICIENT,
        lambda: cudnn.reduce_tensor(
            H,
            rd,
            torch.empty(3, dtype=torch.int32),
            12,
            ws,
            wsz,
            1.0,
            a_d,
            a,
            0.0,
            c_d,
            torch.empty(2, 1, 4, 1),
        ),
        "reduce_tensor",
        "'indices'",
        "32",
    )
    assert wsz > 0  # the maximum crosses from the value graph to the indices'
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SIZE_INSUFFICIENT,
        lambda: cudnn.reduce_tensor(
            H,
            rd,
            torch.empty(8, dtype=torch.int32),
            32,
            ws,
            0,
            1.0,
            a_d,
            a,
            0.0,
            c_d,
            torch.empty(2, 1, 4, 1),
        ),
        "reduce_tensor",
        "workspace",
    )


def test_huge_index_regions_are_not_supported():
    a_d, c_d = _desc((1, 1, 4096, 4096)), _desc((1, 1, 1, 1))
    with pytest.raises(GraphNotSupportedError) as e:
        cudnn.get_reduction_workspace_size(H, _red_desc(R.MAX, indices=True), a_d, c_d)
    assert e.value.status == Status.NOT_SUPPORTED and "16777216" in str(e.value)
