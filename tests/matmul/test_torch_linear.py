"""opendnn.torch linear / matmul (and the opendnn::sum_to_size reduction behind every bias
gradient) against PyTorch in float64 on the CPU: forward and gradients, leading dims,
batch broadcasting, 1-D operands, non-contiguous operands, fp32 / fp16 / bf16,
zero-size dims, opcheck, torch.compile, autocast, allow_tf32, and typed errors."""

import pytest
import torch
import torch.nn.functional as F
from _util import assert_close, expect_error

from opendnn import backends
from opendnn.enums import NumericalNote
from opendnn.errors import BadParamError, GraphNotSupportedError, Status
from opendnn.torch import _graphs
from opendnn.torch import linear as L


def _leaves(*ts):
    return [None if t is None else t.detach().requires_grad_(True) for t in ts]


def _grads(fn, ts, dy):
    ts = _leaves(*ts)
    y = fn(*ts)
    y.backward(dy)
    return [y] + [None if t is None else t.grad for t in ts]


def _compare(fn, ref_fn, ts, dtype, n, msg):
    """fn(*ts) and the gradients of ts against ref_fn on float64 copies."""
    y_ref = ref_fn(*(None if t is None else t.double() for t in ts))
    dy = torch.randn(y_ref.shape).to(dtype)
    got = _grads(fn, ts, dy)
    ref = _grads(ref_fn, [None if t is None else t.double() for t in ts], dy.double())
    for i, (a, e) in enumerate(zip(got, ref)):
        if e is not None:
            assert a.dtype == dtype, f"{msg}: output {i} is {a.dtype}"
            assert_close(a, e, dtype, n, f"{msg} output {i}")
    return got[0]


def _t(*shape, dtype=torch.float32, scale=1.0):
    return (torch.randn(*shape) * scale).to(dtype)


LINEAR = [  # (id, x, weight, bias)
    ("2d", lambda d: _t(5, 7, dtype=d), lambda d: _t(4, 7, dtype=d), lambda d: _t(4, dtype=d)),
    ("3d-nobias", lambda d: _t(2, 3, 6, dtype=d), lambda d: _t(5, 6, dtype=d), lambda d: None),
    ("1d-input", lambda d: _t(6, dtype=d), lambda d: _t(3, 6, dtype=d), lambda d: _t(3, dtype=d)),
    (
        "noncontig",
        lambda d: _t(6, 3, 4, dtype=d).transpose(0, 2),  # [4, 3, 6] view
        lambda d: _t(6, 10, dtype=d)[:, ::2].t(),
        lambda d: _t(10, dtype=d)[::2],
    ),
    (
        "size-one",
        lambda d: _t(1, 1, 1, dtype=d),
        lambda d: _t(1, 1, dtype=d),
        lambda d: _t(1, dtype=d),
    ),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("x,w,b", [c[1:] for c in LINEAR], ids=[c[0] for c in LINEAR])
def test_linear_matches_pytorch(x, w, b, dtype):
    torch.manual_seed(1)
    ts = (x(dtype), w(dtype), b(dtype))
    y = _compare(
        L.linear,
        F.linear,
        ts,
        dtype,
        max(ts[0].shape[0], ts[0].shape[-1]) * 4,
        f"[repro] linear {[None if t is None else tuple(t.shape) for t in ts]} {dtype}",
    )
    assert y.is_contiguous()


MATMUL = [  # (id, a shape, b shape)
    ("2d", (5, 7), (7, 3)),
    ("batch-x-2d", (2, 3, 4, 6), (6, 5)),
    ("2d-x-batch", (4, 6), (3, 6, 5)),
    ("broadcast", (2, 1, 3, 5), (4, 5, 2)),
    ("vec-vec", (7,), (7,)),
    ("vec-mat", (6,), (2, 6, 3)),
    ("mat-vec", (2, 4, 6), (6,)),
]


@pytest.mark.parametrize("sa,sb", [c[1:] for c in MATMUL], ids=[c[0] for c in MATMUL])
def test_matmul_matches_pytorch(sa, sb):
    torch.manual_seed(3)
    ts = (_t(*sa), _t(*sb))
    _compare(L.matmul, torch.matmul, ts, torch.float32, 8 * sa[-1], f"matmul {sa} @ {sb}")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_matmul_half_types_with_transposed_operands(dtype):
    torch.manual_seed(4)
    a = _t(2, 5, 3, dtype=dtype).transpose(-1, -2)  # [2, 3, 5], column-major
    b = _t(2, 4, 5, dtype=dtype).transpose(-1, -2)  # [2, 5, 4]
    _compare(L.matmul, torch.matmul, (a, b), dtype, 20, f"matmul transposed {dtype}")


def test_float64_keeps_float64_precision():
    torch.manual_seed(5)
    ts = (_t(3, 4, dtype=torch.float64), _t(5, 4, dtype=torch.float64), _t(5, dtype=torch.float64))
    _compare(L.linear, F.linear, ts, torch.float64, 4, "linear float64")


def test_zero_size_dims():
    w, b = torch.randn(4, 3, requires_grad=True), torch.randn(4, requires_grad=True)
    y = L.linear(torch.randn(0, 3), w, b)
    assert y.shape == (0, 4)
    y.sum().backward()
    assert torch.equal(w.grad, torch.zeros(4, 3)) and torch.equal(b.grad, torch.zeros(4))
    y = L.linear(torch.randn(2, 0), torch.randn(4, 0), b.detach())  # no input features
    assert torch.equal(y, F.linear(torch.randn(2, 0), torch.randn(4, 0), b.detach()))
    assert L.matmul(torch.randn(3, 0), torch.randn(0, 2)).eq(0).all()
    assert L.matmul(torch.randn(2, 0, 3), torch.randn(3, 5)).shape == (2, 0, 5)


def test_opcheck_each_custom_op():
    torch.manual_seed(6)
    torch.library.opcheck(L.linear_op.op, (_t(2, 3, 5), _t(4, 5), _t(4)))
    torch.library.opcheck(L.matmul_op.op, (_t(2, 1, 3, 5), _t(4, 5, 2)))
    torch.library.opcheck(L.sum_to_size.op, (_t(2, 3, 4), [3, 1]))


def test_torch_compile_fullgraph_traces_an_mlp():
    torch.manual_seed(7)
    x, w1, b1, w2 = _t(4, 6), _t(8, 6, scale=0.4), _t(8), _t(3, 8, scale=0.4)

    def f(x, w1, b1, w2):
        return L.matmul(torch.relu(L.linear(x, w1, b1)), w2.t()).sum()

    got = _leaves(x, w1, b1, w2)
    torch.compile(f, fullgraph=True, backend="aot_eager")(*got).backward()
    ref = _leaves(*(t.double() for t in (x, w1, b1, w2)))
    (torch.relu(F.linear(ref[0], ref[1], ref[2])) @ ref[3].t()).sum().backward()
    for a, e in zip(got, ref):
        assert_close(a.grad, e.grad, torch.float32, 32)


def test_autocast_casts_to_the_autocast_dtype():
    torch.manual_seed(8)
    x, w, b = _t(3, 5), _t(4, 5), _t(4)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # mixed input types are cast too
        y, c = L.linear(x.to(torch.bfloat16), w, b), L.matmul(x, w.t())
    assert y.dtype == c.dtype == torch.bfloat16
    lo = [t.to(torch.bfloat16).double() for t in (x, w, b)]
    assert_close(y, F.linear(*lo), torch.bfloat16, 5)
    assert_close(c, lo[0] @ lo[1].t(), torch.bfloat16, 5)


def test_autocast_inside_torch_compile():
    torch.manual_seed(9)
    x, w = _t(3, 5), _t(4, 5)

    def f(x, w):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return L.linear(x, w)

    y = torch.compile(f, fullgraph=True, backend="aot_eager")(x, w)
    assert y.dtype == torch.bfloat16
    assert_close(
        y, F.linear(x.to(torch.bfloat16).double(), w.to(torch.bfloat16).double()), torch.bfloat16, 5
    )


def test_allow_tf32_reaches_the_matmul_plan():
    x, w = _t(3, 4), _t(5, 4)
    _graphs.clear()
    for flag in (False, True):
        backends.allow_tf32 = flag
        L.linear(x, w, None)
        built = [
            b
            for k, b in _graphs._cache.items()
            if k[0][0] == "opendnn.gemm" and _graphs.meta(w.t()) in k[0] and k[2] is flag
        ]
        assert len(built) == 1
        notes = built[0].graph.get_numerical_notes_for_plan_at_index(0)
        assert (NumericalNote.DOWN_CONVERT_INPUTS in notes) is flag, notes


BAD = [  # (id, call, error type, status, names in the message)
    (
        "inner",
        lambda: L.linear(_t(3, 5), _t(4, 6)),
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        ["linear", "weight"],
    ),
    (
        "bias",
        lambda: L.linear(_t(3, 5), _t(4, 5), _t(3)),
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        ["linear", "bias"],
    ),
    (
        "weight-3d",
        lambda: L.linear(_t(3, 5), _t(1, 4, 5)),
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        ["linear", "weight"],
    ),
    (
        "weight-1d",
        lambda: L.linear(_t(3, 5), _t(5)),
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        ["linear", "weight"],
    ),
    (
        "dtype-mix",
        lambda: L.linear(_t(3, 5), _t(4, 5, dtype=torch.float16)),
        BadParamError,
        Status.BAD_PARAM_ATTRIBUTE_TYPE,
        ["linear", "weight"],
    ),
    (
        "int",
        lambda: L.linear(torch.ones(3, 5, dtype=torch.int64), torch.ones(4, 5, dtype=torch.int64)),
        GraphNotSupportedError,
        Status.NOT_SUPPORTED_DATA_TYPE,
        ["linear", "input"],
    ),
    (
        "mm-inner",
        lambda: L.matmul(_t(3, 5), _t(4, 2)),
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        ["matmul", "inner"],
    ),
    (
        "mm-batch",
        lambda: L.matmul(_t(2, 3, 5), _t(3, 5, 2)),
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        ["matmul", "broadcast"],
    ),
    (
        "mm-0d",
        lambda: L.matmul(torch.tensor(1.0), _t(3)),
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        ["matmul"],
    ),
    (
        "mm-out",
        lambda: L.matmul(_t(2, 3), _t(3, 2), out=torch.empty(2, 2)),
        GraphNotSupportedError,
        Status.NOT_SUPPORTED,
        ["matmul", "out="],
    ),
    (
        "mm-op-1d",
        lambda: L.matmul_op(_t(3), _t(3, 2)),
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        ["matmul", "2 or more dims"],
    ),
    (
        "sum-size",
        lambda: L.sum_to_size(_t(2, 3), [4]),
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        ["sum_to_size", "expandable"],
    ),
]


@pytest.mark.parametrize("call,exc,status,names", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_arguments_raise_typed_errors(call, exc, status, names):
    expect_error(exc, status, call, *names)
