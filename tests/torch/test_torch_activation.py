"""opendnn.torch activations against torch.nn.functional (computed in float64 on the same
rounded inputs): forward and gradients for every kind and floating type, odd / size-one /
0-dim / empty shapes, transposed, channels_last and sliced inputs; inplace=True (no
autograd, and under autograd from the output or from a kept copy); opcheck of the three
custom ops; a torch.compile(fullgraph=True) trace; bad arguments with typed errors."""

import pytest
import torch
import torch.nn.functional as F
from _util import assert_close, expect_error

import opendnn.torch.activation as A
from opendnn.errors import BadParamError, GraphNotSupportedError, Status

# (name, keyword arguments): every function and the shapes of its arguments
CASES = [
    ("relu", {}),
    ("relu6", {}),
    ("hardtanh", dict(min_val=-0.5, max_val=2.0)),
    ("leaky_relu", dict(negative_slope=0.2)),
    ("elu", dict(alpha=0.7)),
    ("gelu", {}),
    ("gelu", dict(approximate="tanh")),
    ("silu", {}),
    ("sigmoid", {}),
    ("tanh", {}),
    ("softplus", {}),
    ("softplus", dict(beta=2.0, threshold=1.5)),
    ("mish", {}),
    ("hardsigmoid", {}),
    ("hardswish", {}),
]
IDS = [n + "".join(f"-{v}" for v in kw.values()) for n, kw in CASES]
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]


def _x(rng, shape, dtype):
    """Values on both sides of every kink (0, +-3, 6, softplus thresholds)."""
    return rng.rand(shape, dtype, low=0.05, high=8.0)


def _check(name, kw, x, inplace=False):
    """Our forward and gradient against PyTorch's in float64 on the same inputs."""
    dt = x.dtype
    xr = x.detach().double().requires_grad_()
    yr = getattr(F, name)(xr, **kw)
    xo = x.detach().clone().requires_grad_()
    src = xo * 1 if inplace else xo  # in place needs a non-leaf
    y = getattr(A, name)(src, **kw, **({"inplace": True} if inplace else {}))
    if inplace:
        assert y is src
    assert y.shape == x.shape and y.dtype == dt
    assert_close(y, yr, dt)
    dy = torch.randn(x.shape, dtype=torch.float64).to(dt)
    (g,) = torch.autograd.grad(y, xo, dy)
    (gr,) = torch.autograd.grad(yr, xr, dy.double())
    # PyTorch's hardsigmoid_backward multiplies by float32(1/6) even in float64
    assert_close(g, gr, torch.float32 if (name == "hardsigmoid" and dt == torch.float64) else dt)
    return y


@pytest.mark.parametrize("name,kw", CASES, ids=IDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_forward_and_gradient(rng, name, kw, dtype):
    _check(name, kw, _x(rng, (3, 37), dtype))


@pytest.mark.parametrize("layout", ["transposed", "channels_last", "sliced"])
@pytest.mark.parametrize(
    "name,kw", [CASES[3], CASES[6], CASES[12], CASES[14]], ids=[IDS[3], IDS[6], IDS[12], IDS[14]]
)
def test_layouts(rng, name, kw, layout):
    if layout == "transposed":
        x = _x(rng, (9, 5), torch.float32).t()
    elif layout == "channels_last":
        x = _x(rng, (2, 3, 4, 5), torch.float16).to(memory_format=torch.channels_last)
    else:
        x = _x(rng, (4, 11), torch.bfloat16)[:, 1::3]
    y = _check(name, kw, x)
    assert y.stride() == getattr(F, name)(x, **kw).stride()  # PyTorch's output layout


@pytest.mark.parametrize("shape", [(1,), (), (1, 1, 1), (2, 3, 5, 7), (0, 3), (4, 0, 2)], ids=str)
def test_shapes(rng, shape):
    _check("silu", {}, _x(rng, shape, torch.float32))
    _check("hardswish", {}, _x(rng, shape, torch.float16))


def test_extremes():
    """Large |x| stays finite where PyTorch's does, NaN propagates."""
    x = torch.tensor([-1e4, -90.0, -20.5, -3.0, 0.0, 3.0, 19.9, 20.1, 90.0, 1e4, float("nan")])
    for name in ("relu", "sigmoid", "tanh", "softplus", "silu", "mish", "gelu", "elu", "hardswish"):
        assert_close(getattr(A, name)(x), getattr(F, name)(x.double()), torch.float32)


def test_kinks():
    """Gradients exactly at the kinks (0, +-1, +-3, 6, softplus's threshold) are
    PyTorch's: which side each boundary belongs to."""
    x = torch.tensor([-6.0, -3.0, -1.0, 0.0, 1.0, 3.0, 6.0, 10.0, 20.0])
    for name, kw in CASES + [("softplus", dict(beta=0.5, threshold=5.0))]:
        _check(name, kw, x)


@pytest.mark.parametrize(
    "name,kw",
    [
        ("relu", {}),
        ("relu6", {}),
        ("leaky_relu", dict(negative_slope=0.1)),
        ("elu", dict(alpha=1.3)),
        ("silu", {}),
        ("mish", {}),
        ("hardtanh", dict(min_val=-2.0, max_val=0.5)),
        ("hardsigmoid", {}),
        ("hardswish", {}),
    ],
)
def test_inplace_under_autograd(rng, name, kw):
    """The input is overwritten and returned; the gradient is PyTorch's (from the output
    for the relu family and elu, from a kept copy of the input otherwise)."""
    _check(name, kw, _x(rng, (5, 13), torch.float32), inplace=True)


def test_inplace_without_autograd(rng):
    x = _x(rng, (6, 7), torch.float16)[:, :5]  # a strided view, written in place
    want = F.leaky_relu(x.double(), 0.3)
    base = x._base
    y = A.leaky_relu(x, 0.3, inplace=True)
    assert y is x and x._base is base
    assert_close(x, want, torch.float16)
    with torch.no_grad():
        p = torch.nn.Parameter(_x(rng, (4,), torch.float32))
        want = F.relu6(p.double())
        assert A.relu6(p, inplace=True) is p
        assert_close(p.detach(), want, torch.float32)


def test_inplace_refusals(rng):
    x = _x(rng, (3, 4), torch.float32).requires_grad_()
    expect_error(BadParamError, Status.BAD_PARAM, lambda: A.relu(x, inplace=True), "relu", "leaf")
    for fn in (
        lambda: A.leaky_relu(x * 1, -0.2, inplace=True),
        lambda: A.elu(x * 1, -0.5, inplace=True),
    ):
        expect_error(GraphNotSupportedError, Status.NOT_SUPPORTED, fn, "negative")
    wide = _x(rng, (3, 1), torch.float32).expand(3, 4)  # overlapping elements
    with pytest.raises(BadParamError):
        A.relu(wide, inplace=True)


def test_bad_arguments(rng):
    x = _x(rng, (3, 4), torch.float32)
    expect_error(
        BadParamError, Status.BAD_PARAM, lambda: A.hardtanh(x, 2.0, 1.0), "hardtanh", "min_val"
    )
    expect_error(
        BadParamError, Status.BAD_PARAM, lambda: A.gelu(x, approximate="erf"), "gelu", "approximate"
    )
    expect_error(
        GraphNotSupportedError,
        Status.NOT_SUPPORTED_DATA_TYPE,
        lambda: A.relu(torch.arange(4)),
        "relu",
        "torch.int64",
    )
    expect_error(
        BadParamError,
        Status.BAD_PARAM_ATTRIBUTE_TYPE,
        lambda: A.silu([1.0]),
        "silu",
        "torch.Tensor",
    )
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        lambda: torch.ops.opendnn.activation(x, "swishy", []),
        "swishy",
    )
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        lambda: torch.ops.opendnn.activation(x, "elu", [1.0, 2.0]),
        "elu takes 1",
    )
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        lambda: torch.ops.opendnn.activation_backward(x, x, "gelu", [], True),
        "gelu",
    )


def test_opcheck(rng):
    x = _x(rng, (3, 5), torch.float32)
    dy = _x(rng, (3, 5), torch.float32)
    for args in ((x, "relu", [0.0, 6.0, 0.1]), (x, "softplus", [1.0, 20.0]), (x, "mish", [])):
        torch.library.opcheck(torch.ops.opendnn.activation.default, args)
    torch.library.opcheck(torch.ops.opendnn.activation_.default, (x.clone(), "elu", [1.0]))
    torch.library.opcheck(
        torch.ops.opendnn.activation_backward.default, (dy, x, "gelu_tanh", [], False)
    )
    torch.library.opcheck(
        torch.ops.opendnn.activation_backward.default,
        (dy, x, "relu", [0.0, float("inf"), 0.0], True),
    )


def test_compile_fullgraph(rng):
    """One trace with AOT autograd (forward and backward graphs call our ops), an in-place
    activation under autograd included."""

    def f(x):
        h = A.gelu(x, approximate="tanh") * 2
        return A.relu(h, inplace=True).sum() + A.softplus(x, beta=2.0).sum()

    def g(x):
        h = F.gelu(x, approximate="tanh") * 2
        return F.relu(h, inplace=True).sum() + F.softplus(x, beta=2.0).sum()

    x = _x(rng, (4, 6), torch.float32).requires_grad_()
    out = torch.compile(f, fullgraph=True, backend="aot_eager")(x)
    (gx,) = torch.autograd.grad(out, x)
    xr = x.detach().double().requires_grad_()
    ref = g(xr)
    (gr,) = torch.autograd.grad(ref, xr)
    assert_close(out.detach(), ref.detach(), torch.float32, n=48)
    assert_close(gx, gr, torch.float32)
