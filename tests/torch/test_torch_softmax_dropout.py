"""opendnn.torch softmax / log_softmax against torch.nn.functional (float64 on the same
rounded inputs), forward and gradient, any dim, every floating type, odd / size-one /
0-dim / empty shapes, transposed, channels_last and sliced inputs, ``dtype=``, the
implicit dim, extreme rows; dropout's statistics, reproducibility from torch.manual_seed,
its mask against the reference Philox stream (forward and backward), identity cases,
in place; opcheck of the five custom ops; a torch.compile(fullgraph=True) trace; bad
arguments with typed errors."""

import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from _util import assert_close, expect_error

from opendnn.errors import BadParamError, GraphNotSupportedError, Status
from opendnn.ops import dropout as philox
from opendnn.torch.dropout import RNG_HIGH, dropout
from opendnn.torch.softmax import log_softmax, softmax

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
OURS = {False: softmax, True: log_softmax}
THEIRS = {False: F.softmax, True: F.log_softmax}


def _check_softmax(x, dim, log, dtype=None):
    """Forward and gradient against PyTorch's in float64 on the same inputs."""
    xo = x.detach().clone().requires_grad_()
    y = OURS[log](xo, dim, dtype=dtype)
    out_dt = dtype or x.dtype
    xr = x.detach().double().requires_grad_()
    yr = THEIRS[log](xr, dim)
    assert y.dtype == out_dt and y.shape == x.shape
    assert y.stride() == THEIRS[log](x, dim, dtype=dtype).stride()  # contiguous, as PyTorch
    n = x.shape[dim] if x.dim() else 1
    assert_close(y, yr, out_dt, n=n)
    dy = torch.randn(x.shape, dtype=torch.float64).to(out_dt)
    (g,) = torch.autograd.grad(y, xo, dy)
    (gr,) = torch.autograd.grad(yr, xr, dy.double())
    assert g.dtype == x.dtype
    assert_close(g, gr, x.dtype, n=n)


@pytest.mark.parametrize("shape,dim", [((3, 37), -1), ((4, 5, 6), 1), ((13, 2), 0)], ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_softmax(rng, shape, dim, dtype, log):
    _check_softmax(rng.rand(shape, dtype, high=4.0), dim, log)


@pytest.mark.parametrize("layout", ["transposed", "channels_last", "sliced"])
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_softmax_layouts(rng, layout, log):
    if layout == "transposed":
        x, dim = rng.rand((9, 5), torch.float32).t(), 1
    elif layout == "channels_last":
        x, dim = rng.rand((2, 3, 4, 5), torch.float16).to(memory_format=torch.channels_last), 1
    else:
        x, dim = rng.rand((4, 20), torch.bfloat16)[:, 1::3], -1
    _check_softmax(x, dim, log)


@pytest.mark.parametrize(
    "shape,dim",
    [((), 0), ((), -1), ((1,), 0), ((5, 1), 1), ((0, 4), 1), ((3, 0), 1), ((2, 1, 3), 1)],
    ids=str,
)
def test_softmax_shapes(rng, shape, dim):
    _check_softmax(rng.rand(shape, torch.float32), dim, False)
    _check_softmax(rng.rand(shape, torch.float32), dim, True)


def test_softmax_dtype_argument(rng):
    """dtype=: read in the input's type, written (and differentiated) in dtype."""
    _check_softmax(rng.rand((4, 33), torch.float16, high=6.0), 1, False, torch.float32)
    _check_softmax(rng.rand((4, 33), torch.bfloat16, high=6.0), 0, True, torch.float32)


def test_softmax_implicit_dim(rng):
    for shape, dim in (((5,), 0), ((2, 3, 4), 0), ((2, 3), 1), ((2, 3, 4, 5), 1)):
        x = rng.rand(shape, torch.float32)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            y = softmax(x)
        assert any("Implicit dimension" in str(w.message) for w in seen)
        assert_close(y, F.softmax(x.double(), dim), torch.float32, n=shape[dim])


def test_softmax_extreme_rows():
    inf = math.inf
    x = torch.tensor(
        [[-inf] * 4, [1.0, -inf, 2.0, 3.0], [1e4, -1e4, 0.0, 1.0], [60.0, 60.0, 60.0, 60.0]]
    )
    for log in (False, True):
        assert_close(OURS[log](x, 1), THEIRS[log](x.double(), 1), torch.float32, n=4)


def test_softmax_bad_arguments(rng):
    x = rng.rand((3, 4), torch.float32)
    expect_error(
        BadParamError, Status.BAD_PARAM_OUT_OF_BOUND, lambda: softmax(x, 2), "softmax", "dim 2"
    )
    expect_error(
        BadParamError, Status.BAD_PARAM_OUT_OF_BOUND, lambda: log_softmax(x, -3), "log_softmax"
    )
    expect_error(
        BadParamError, Status.BAD_PARAM_ATTRIBUTE_TYPE, lambda: softmax(x, 1.0), "softmax", "int"
    )
    expect_error(
        GraphNotSupportedError,
        Status.NOT_SUPPORTED_DATA_TYPE,
        lambda: softmax(torch.arange(6), 0),
        "softmax",
        "torch.int64",
    )
    expect_error(
        GraphNotSupportedError,
        Status.NOT_SUPPORTED_DATA_TYPE,
        lambda: softmax(x, 1, dtype=torch.int32),
        "softmax",
        "torch.int32",
    )
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        lambda: torch.ops.opendnn.softmax_backward(x[:2], x, 1, False, x.dtype),
        "softmax_backward",
        "grad",
    )


# ---- dropout ---------------------------------------------------------------------------------
def _drawn_rng(seed: int):
    """The (seed, offset) dropout draws right after torch.manual_seed(seed)."""
    torch.manual_seed(seed)
    s, o = torch.randint(0, RNG_HIGH, (2,), dtype=torch.int64).tolist()
    return s, o


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("p", [0.2, 0.5, 0.875])
def test_dropout_statistics(dtype, p):
    """The dropped fraction is p (within 5 sigma); kept elements are scaled by 1/(1-p)."""
    n = 6000
    y = dropout(torch.ones(n, dtype=dtype), p)
    dropped = (y == 0).double().mean().item()
    assert abs(dropped - p) < 5 * math.sqrt(p * (1 - p) / n), (dropped, p)
    kept = y[y != 0]
    assert_close(kept, torch.full(kept.shape, 1 / (1 - p), dtype=torch.float64), dtype)


def test_dropout_reproducible_and_fresh(rng):
    x = rng.rand((37, 29), torch.float32)
    torch.manual_seed(11)
    a, b = dropout(x, 0.5), dropout(x, 0.5)
    torch.manual_seed(11)
    c = dropout(x, 0.5)
    assert torch.equal(a, c)  # same seed: the same output
    assert not torch.equal(a == 0, b == 0)  # the next call: a fresh mask


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced", "0-dim"])
def test_dropout_mask_is_the_philox_stream(rng, layout):
    """Forward and backward use the mask the reference stream gives for the (seed,
    offset) drawn from PyTorch's generator, by logical index whatever the layout."""
    base = rng.rand((8, 13), torch.float16)
    x = {"contiguous": base, "transposed": base.t(), "sliced": base[:, 2::3], "0-dim": base[0, 0]}[
        layout
    ]
    p = 0.3
    seed, offset = _drawn_rng(5)
    keep = torch.as_tensor(philox.mask(seed, offset, tuple(x.shape), p))
    xo = x.detach().clone().requires_grad_()
    torch.manual_seed(5)
    y = dropout(xo * 1, p)
    assert_close(y, x.double() * keep / (1 - p), torch.float16)
    dy = rng.rand(x.shape, torch.float16)
    (g,) = torch.autograd.grad(y, xo, dy)
    assert_close(g, dy.double() * keep / (1 - p), torch.float16)


def test_dropout_identity_cases(rng):
    x = rng.rand((4, 5), torch.float32)
    assert dropout(x, 0.5, training=False) is x
    assert dropout(x, 0.0) is x
    empty = torch.empty(0, 3)
    assert dropout(empty, 0.5) is empty
    x.requires_grad_()
    y = dropout(x * 1, 1.0)
    assert torch.equal(y, torch.zeros_like(y))
    (g,) = torch.autograd.grad(y, x, torch.ones_like(y))
    assert torch.equal(g, torch.zeros_like(g))


def test_dropout_inplace(rng):
    x = rng.rand((6, 7), torch.float32)
    seed, offset = _drawn_rng(3)
    keep = torch.from_numpy(philox.mask(seed, offset, (6, 7), 0.4))
    want = x.double() * keep / 0.6
    xo = x.clone()
    torch.manual_seed(3)
    assert dropout(xo, 0.4, inplace=True) is xo
    assert_close(xo, want, torch.float32)
    leaf = x.clone().requires_grad_()
    h = leaf * 1
    torch.manual_seed(3)
    assert dropout(h, 0.4, inplace=True) is h
    assert_close(h, want, torch.float32)
    (g,) = torch.autograd.grad(h, leaf, torch.ones_like(h))
    assert_close(g, keep / 0.6, torch.float32)
    expect_error(
        BadParamError, Status.BAD_PARAM, lambda: dropout(leaf, 0.4, inplace=True), "dropout", "leaf"
    )


def test_dropout_bad_arguments(rng):
    x = rng.rand((3, 4), torch.float32)
    for p in (-0.1, 1.5, math.nan):
        expect_error(
            BadParamError,
            Status.BAD_PARAM_OUT_OF_BOUND,
            lambda: dropout(x, p),
            "dropout",
            "between 0 and 1",
        )
    expect_error(
        GraphNotSupportedError,
        Status.NOT_SUPPORTED_DATA_TYPE,
        lambda: dropout(torch.arange(5), 0.5),
        "dropout",
        "torch.int64",
    )
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        lambda: torch.ops.opendnn.dropout(x, 0.5, torch.zeros(2, dtype=torch.int32)),
        "opendnn::dropout",
        "rng",
    )


# ---- torch.library and torch.compile ---------------------------------------------------------
def test_opcheck(rng):
    x = rng.rand((3, 5), torch.float32)
    h = rng.rand((3, 5), torch.float16)
    ops = torch.ops.opendnn
    torch.library.opcheck(ops.softmax.default, (x, 1, False, None))
    torch.library.opcheck(ops.softmax.default, (h, 0, True, torch.float32))
    y = torch.softmax(x, 1)
    torch.library.opcheck(ops.softmax_backward.default, (x, y, 1, False, torch.float32))
    r = torch.tensor([123456789, 42], dtype=torch.int64)
    torch.library.opcheck(ops.dropout.default, (x, 0.25, r))
    torch.library.opcheck(ops.dropout_.default, (x.clone(), 0.25, r))
    torch.library.opcheck(ops.dropout_backward.default, (x, 0.25, r))


def test_compile_fullgraph(rng):
    """AOT autograd traces dropout's draw and both ops; with the same seed the compiled
    function repeats the eager one, gradients included."""

    def f(x):
        return (log_softmax(dropout(x, 0.25), 1) * softmax(x, 0)).sum()

    x = rng.rand((6, 9), torch.float32).requires_grad_()
    torch.manual_seed(21)
    want = f(x)
    (gw,) = torch.autograd.grad(want, x)
    torch.manual_seed(21)
    got = torch.compile(f, fullgraph=True, backend="aot_eager")(x)
    (gg,) = torch.autograd.grad(got, x)
    assert_close(got.detach(), want.detach().double(), torch.float32, n=54)
    assert_close(gg, gw.double(), torch.float32, n=9)


def test_softmax_autocast_policy(rng):
    """The CUDA autocast kernel's policy, registered for CPU autocast for this test: a
    half / bfloat16 input gives a float32 result (PyTorch's fp32_set_opt_dtype); an
    explicit dtype is kept; gradients come back in the input's type."""
    from opendnn.torch import _graphs
    from opendnn.torch.softmax import _autocast_rule, autocast_kernel

    lib = torch.library.Library("opendnn", "IMPL")
    lib.impl("softmax", autocast_kernel("cpu"), "AutocastCPU")
    old = _graphs.AUTOCAST.get("opendnn::softmax")  # eager calls skip the dispatcher
    _graphs.AUTOCAST["opendnn::softmax"] = lambda a, d: _autocast_rule(a, d, ("cpu",))
    try:
        x = rng.rand((3, 17), torch.bfloat16, high=4.0).requires_grad_()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = log_softmax(x, 1)
            kept = softmax(x.detach(), 1, dtype=torch.bfloat16)
        assert y.dtype == torch.float32 and kept.dtype == torch.bfloat16
        xr = x.detach().double().requires_grad_()
        yr = F.log_softmax(xr, 1)
        assert_close(y, yr, torch.float32, n=17)
        (g,) = torch.autograd.grad(y.sum(), x)
        (gr,) = torch.autograd.grad(yr.sum(), xr)
        assert g.dtype == torch.bfloat16
        assert_close(g, gr, torch.bfloat16, n=17)
    finally:
        lib._destroy()
        _graphs.AUTOCAST.pop("opendnn::softmax")
        if old is not None:
            _graphs.AUTOCAST["opendnn::softmax"] = old
