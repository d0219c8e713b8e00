"""Shared test helpers: random inputs, poisoned outputs, tolerances, engine-vs-reference runs.

Rules these helpers enforce (DESIGN.md "Testing"):

- inputs are drawn fresh for each case from a seeded generator (the seed comes from the
  test's id, optionally mixed with ``OPENDNN_TEST_SEED``), never zeros;
- outputs are poisoned before every run (NaN for floating types; integer and boolean
  outputs are run twice, once filled with 0 and once with 1) so unwritten elements fail;
- tolerances come from the data type and the reduction length, never tuned per test;
- every failure message starts with a one-line reproduction (op, shapes, dtype, seed).
"""

from __future__ import annotations

import contextlib
import math
import os
import zlib

import pytest
import torch

from opendnn.enums import DataType, HeurMode
from opendnn.errors import Status

REFERENCE_ID = 0
REFERENCE_NAME = "reference_f64"
FUSION_ID = 1
FUSION_NAME = "runtime_fusion"

FLOAT_DTYPES = [torch.float32, torch.float16, torch.bfloat16]

# Unit roundoff-scale tolerances per data type; scaled by sqrt(reduction length).
_BASE_TOL = {
    torch.float64: 1e-12,
    torch.float32: 1e-5,
    torch.float16: 1e-3,
    torch.bfloat16: 8e-3,
}

TORCH_TO_DT = {
    torch.float32: DataType.FLOAT,
    torch.float64: DataType.DOUBLE,
    torch.float16: DataType.HALF,
    torch.bfloat16: DataType.BFLOAT16,
    torch.int8: DataType.INT8,
    torch.int32: DataType.INT32,
    torch.int64: DataType.INT64,
    torch.uint8: DataType.UINT8,
    torch.bool: DataType.BOOLEAN,
}
DT_TO_TORCH = {v: k for k, v in TORCH_TO_DT.items()}


# ---- seeds and random inputs -------------------------------------------------------------
def seed_for(*parts) -> int:
    """A seed derived from ``parts`` (the test id) and the optional OPENDNN_TEST_SEED."""
    base = int(os.environ.get("OPENDNN_TEST_SEED", "0"))
    return (zlib.crc32(repr(parts).encode()) ^ (base * 2654435761)) & 0x7FFFFFFF


class Rng:
    """Seeded source of test inputs (never zero)."""

    def __init__(self, seed: int):
        self.seed = seed
        self.gen = torch.Generator().manual_seed(seed)

    def rand(self, shape, dtype=torch.float32, low=0.1, high=2.0, positive=False) -> torch.Tensor:
        """|x| in [low, high] with a random sign (or positive): never zero, never tiny."""
        mag = torch.empty(tuple(shape), dtype=torch.float64).uniform_(low, high, generator=self.gen)
        if not positive:
            sign = torch.randint(0, 2, tuple(shape), generator=self.gen).to(torch.float64) * 2 - 1
            mag = mag * sign
        return mag.to(dtype)

    def ints(self, shape, low, high, dtype=torch.int32) -> torch.Tensor:
        """Integers in [low, high) with 0 excluded (shifted to 1)."""
        x = torch.randint(low, high, tuple(shape), generator=self.gen)
        x = torch.where(x == 0, torch.ones_like(x), x)
        return x.to(dtype)

    def bools(self, shape) -> torch.Tensor:
        return torch.randint(0, 2, tuple(shape), generator=self.gen).bool()

    def mask(self, shape, dtype=torch.float32) -> torch.Tensor:
        """1.0 / 0.0 values (a float mask) -- both values present for >= 2 elements."""
        m = torch.randint(0, 2, tuple(shape), generator=self.gen)
        if m.numel() >= 2:
            m.view(-1)[0], m.view(-1)[1] = 0, 1
        return m.to(dtype)


# ---- tolerances and comparison -------------------------------------------------------------
def tol(dtype, n: int = 1) -> tuple[float, float]:
    """(rtol, atol) for results of type ``dtype`` that reduce over ``n`` terms."""
    if isinstance(dtype, DataType):
        dtype = DT_TO_TORCH[dtype]
    base = _BASE_TOL[dtype]
    r = base * math.sqrt(max(int(n), 1))
    return r, r


def coarsest(*dtypes) -> torch.dtype:
    """The least precise of the floating types given (for the tolerance)."""
    ds = [DT_TO_TORCH[d] if isinstance(d, DataType) else d for d in dtypes]
    ds = [d for d in ds if d in _BASE_TOL]
    return max(ds, key=lambda d: _BASE_TOL[d]) if ds else torch.float64


def repro(op, shapes, dtype, seed, **extra) -> str:
    more = "".join(f" {k}={v}" for k, v in extra.items())
    return f"[repro] op={op} shapes={shapes} dtype={dtype} seed={seed}{more}"


def assert_close(actual, expected, dtype=None, n: int = 1, msg: str = "") -> None:
    """``actual`` (any dtype) against ``expected`` (float64 ground truth or another engine's
    result) with the tolerance of ``dtype`` (default: actual's dtype) and length ``n``.
    NaN must appear exactly where expected has NaN, infinities must match, and finite
    values satisfy |a - e| <= atol + rtol |e|."""
    if not msg:  # still a reproduction: the test id decides the seed
        msg = f"[repro] test={os.environ.get('PYTEST_CURRENT_TEST', '?')}"
    actual = torch.as_tensor(actual)
    expected = torch.as_tensor(expected)
    assert tuple(actual.shape) == tuple(expected.shape), (
        f"{msg}\nshape {tuple(actual.shape)} != expected {tuple(expected.shape)}"
    )
    if (
        actual.dtype == torch.bool
        or expected.dtype == torch.bool
        or not actual.dtype.is_floating_point
    ):
        a, e = actual.to(torch.float64), expected.to(torch.float64)
        bad = a != e
        if bool(bad.any()):
            idx = tuple(int(i) for i in bad.nonzero()[0])
            raise AssertionError(
                f"{msg}\n{int(bad.sum())} of {a.numel()} elements differ "
                f"(exact compare); first at {idx}: got {a[idx].item()}, "
                f"expected {e[idx].item()}"
            )
        return
    dtype = dtype or actual.dtype
    rtol, atol = tol(dtype, n)
    a, e = actual.to(torch.float64), expected.to(torch.float64)
    nan_e, nan_a = torch.isnan(e), torch.isnan(a)
    inf_e = torch.isinf(e)
    fin = ~nan_e & ~inf_e
    bad = (nan_a != nan_e) | (inf_e & (a != e))
    err = torch.zeros_like(a)
    err[fin] = (a[fin] - e[fin]).abs()
    bad |= fin & ~(err <= atol + rtol * e.abs())  # NaN in a at a finite e fails here too
    if bool(bad.any()):
        idx = tuple(int(i) for i in bad.nonzero()[0])
        worst = (
            float(torch.where(fin & ~nan_a, err, torch.zeros_like(err)).max()) if a.numel() else 0.0
        )
        raise AssertionError(
            f"{msg}\n{int(bad.sum())} of {a.numel()} elements out of tolerance "
            f"(rtol={rtol:.3g}, atol={atol:.3g}, dtype={dtype}, n={n}); first at {idx}: "
            f"got {a[idx].item()!r}, expected {e[idx].item()!r}; max finite |err| {worst:.3g}"
        )


# ---- buffers ----------------------------------------------------------------------------------
def fills_for(dtype: torch.dtype) -> list:
    """Poison values: NaN for floating outputs; 0 and then 1 for integer/boolean ones."""
    if dtype.is_floating_point:
        return [float("nan")]
    return [0, 1]


def alloc_output(t, fill, device="cpu") -> torch.Tensor:
    """A buffer for validated graph tensor ``t`` with its dims, strides and type."""
    dtype = DT_TO_TORCH[t.get_data_type()]
    buf = torch.empty_strided(t.get_dim(), t.get_stride(), dtype=dtype, device=device)
    buf.fill_(fill if dtype != torch.bool else bool(fill))
    return buf


def workspace(nbytes: int, device="cpu"):
    """A workspace of ``nbytes`` poisoned with 0xFF bytes (NaN as float), None when zero."""
    if nbytes == 0:
        return None
    return torch.full((nbytes,), 255, dtype=torch.uint8, device=device)


def fresh_plan_caches(monkeypatch) -> None:
    """Empty the process's caches of built plans and of engine facts (opendnn.plan) for
    one test: they key on graph, knobs and target, not on module settings a test patches
    (a workspace budget), so a plan built earlier in the worker would be handed back."""
    from opendnn import plan

    monkeypatch.setattr(plan, "_built", {})
    monkeypatch.setattr(plan, "_facts", {})


def plan_with_knobs(g, engine_id: int, knobs: dict, device: str = "cuda") -> torch.Tensor:
    """Build ``g``'s one plan of engine ``engine_id`` with ``knobs``; its workspace (at
    least one byte, poisoned with 0xFF) on ``device``."""
    g.validate()
    g.build_operation_graph()
    g.create_execution_plan(engine_id, knobs)
    g.check_support()
    g.build_plans()
    return torch.full((max(g.get_workspace_size(), 1),), 255, dtype=torch.uint8, device=device)


def run_plan(g, feeds: dict, outputs: list, index: int, fill) -> dict:
    """Execute plan ``index`` of ``g`` with fresh output buffers poisoned with ``fill``, on
    the device of the inputs."""
    dev = next((v.device for v in feeds.values() if isinstance(v, torch.Tensor)), "cpu")
    bufs = {t: alloc_output(t, fill, dev) for t in outputs}
    ws = workspace(g.get_workspace_size_plan_at_index(index), dev)
    g.execute_plan_at_index({**feeds, **bufs}, ws, index)
    return bufs


def compare_plans(
    g,
    feeds: dict,
    outputs: list,
    index: int,
    ref_index: int,
    *,
    dtype=None,
    n: int = 1,
    msg: str = "",
    allow_nan: bool = False,
) -> dict:
    """Run plan ``index`` and plan ``ref_index`` (the float64 reference) on the same inputs,
    each with poisoned outputs, and compare every output. Returns the tested results.
    Unless ``allow_nan``, the reference's floating outputs must hold no NaN (so an element
    that neither plan writes cannot pass as 'NaN == NaN')."""
    assert g.get_plan_name_at_index(ref_index).startswith(REFERENCE_NAME), (
        f"{msg}\nplan {ref_index} is {g.get_plan_name_at_index(ref_index)}, not the reference"
    )
    got_all = {}
    fill_sets = sorted(
        {repr(f): f for t in outputs for f in fills_for(DT_TO_TORCH[t.get_data_type()])}.values(),
        key=repr,
    )
    for fill in fill_sets:
        ref = run_plan(g, feeds, outputs, ref_index, fill)
        got = run_plan(g, feeds, outputs, index, fill)
        name = g.get_plan_name_at_index(index)
        for t in outputs:
            d = dtype or coarsest(DT_TO_TORCH[t.get_data_type()])
            if not DT_TO_TORCH[t.get_data_type()].is_floating_point:
                d = None
            elif not allow_nan:
                assert not bool(torch.isnan(ref[t]).any()), (
                    f"{msg}\nreference output {t.get_name()} holds NaN (unwritten?)"
                )
            assert_close(
                got[t], ref[t], d, n, f"{msg} plan={name} output={t.get_name()} fill={fill}"
            )
        got_all = got
    return got_all


def check_engine(
    g,
    feeds: dict,
    outputs: list,
    engine_id: int = FUSION_ID,
    knobs=None,
    *,
    dtype=None,
    n: int = 1,
    msg: str = "",
    allow_nan: bool = False,
) -> dict:
    """Force a plan of ``engine_id`` with ``knobs`` (default: the engine's own first choice
    for this graph on the CPU) and compare it with the reference engine on the same graph.
    Returns the engine's outputs."""
    g.validate()
    if knobs is None:
        knobs = heuristic_knobs(g, engine_id)
    g.create_execution_plan(engine_id, knobs)
    name = g.get_plan_name_at_index(0)
    g.create_execution_plan(REFERENCE_ID, {})
    assert g.get_plan_name_at_index(1) == name
    return compare_plans(g, feeds, outputs, 1, 0, dtype=dtype, n=n, msg=msg, allow_nan=allow_nan)


def heuristic_knobs(g, engine_id: int) -> dict:
    """The knobs the engine itself ranks first for ``g`` on the CPU (what heur_mode.A
    would build when the engine takes the whole graph)."""
    from opendnn.engines.base import Target
    from opendnn.engines.registry import by_id

    configs = by_id(engine_id).configs(g.op_graph, Target())
    return configs[0].knob_dict if configs else {}


def run_reference(g, feeds: dict, outputs: list, fill=float("nan")) -> dict:
    """Build ``g`` with FALLBACK (the reference engine) and run it once."""
    g.build([HeurMode.FALLBACK])
    assert g.get_plan_name_at_index(0).startswith(REFERENCE_NAME)
    return run_plan(g, feeds, outputs, 0, fill)


# ---- error assertions ------------------------------------------------------------------------
def expect_error(exc_type, status: Status, fn, *names):
    """``fn()`` raises ``exc_type`` with ``status``; the message contains every name in
    ``names`` (the operation and the tensor). Returns the exception."""
    with pytest.raises(exc_type) as info:
        fn()
    e = info.value
    assert e.status == status, f"status {e.status!r} != {status!r}: {e}"
    text = str(e)
    for nm in names:
        assert nm in text, f"{nm!r} not named in the message: {text}"
    return e


# ---- convolution tests: tensors with the layout a case names ------------------------------
def conv_types():
    import opendnn.frontend as cudnn

    return {
        torch.float32: cudnn.data_type.FLOAT,
        torch.float16: cudnn.data_type.HALF,
        torch.bfloat16: cudnn.data_type.BFLOAT16,
        torch.int8: cudnn.data_type.INT8,
        torch.uint8: cudnn.data_type.UINT8,
    }


CONV_TYPES = conv_types()


def graph_tensor(g, t):
    """A graph tensor with t's dims, strides and type (never pass-by-value, unlike
    tensor_like of a single-element CPU tensor)."""
    return g.tensor(dim=list(t.shape), stride=list(t.stride()), data_type=CONV_TYPES[t.dtype])


def conv_backward_graph(kind, a, b, dims, strides, stride, pre, post, dil, mode=None):
    """A ``conv_dgrad`` (a = dy, b = w) or ``conv_wgrad`` (a = x, b = dy) graph whose
    output has ``dims`` / ``strides`` and a's type: (graph, feeds, output tensor)."""
    import opendnn.frontend as cudnn

    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    ta, tb = graph_tensor(g, a), graph_tensor(g, b)
    kw = {} if mode is None else {"convolution_mode": mode}
    op = g.conv_dgrad if kind == "dgrad" else g.conv_wgrad
    out = op(
        ta,
        tb,
        pre_padding=list(pre),
        post_padding=list(post),
        stride=list(stride),
        dilation=list(dil),
        **kw,
    )
    out.set_dim(list(dims)).set_stride(list(strides)).set_output(True)
    out.set_data_type(CONV_TYPES[a.dtype])
    return g, {ta: a, tb: b}, out


def with_layout(t, layout: str):
    """``t`` as "nchw" (itself), "nhwc" (channels-last, 4-D) or "strided" (every other
    element of a larger buffer whose other elements are garbage)."""
    if layout == "nhwc" and t.dim() == 4:
        return t.contiguous(memory_format=torch.channels_last)
    if layout == "strided":
        big = torch.randn(*t.shape[:-1], t.shape[-1] * 2, dtype=t.dtype)
        view = big[..., ::2]
        view.copy_(t)
        return view
    return t


def torch_layout(t: torch.Tensor, how: str) -> torch.Tensor:
    """``t`` stored "nchw" (contiguous), "cl" (channels innermost, any rank) or "strided"
    (every other element of a larger, zero-filled buffer): the PyTorch layer's tests."""
    if how == "cl" and t.dim() >= 3:
        perm = [0, *range(2, t.dim()), 1]
        return t.permute(perm).contiguous().permute([0, t.dim() - 1, *range(1, t.dim() - 1)])
    if how == "strided":
        big = torch.zeros(*t.shape[:-1], t.shape[-1] * 2, dtype=t.dtype)
        big[..., ::2] = t
        return big[..., ::2]
    return t


def nhwc(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous(memory_format=torch.channels_last)


# ---- the pointwise mode table used by the reference and fusion tests -----------------------------
import dataclasses as _dc  # noqa: E402
from typing import Callable  # noqa: E402

import torch.nn.functional as _F  # noqa: E402

from opendnn.enums import PointwiseMode as _M  # noqa: E402


def _grad(f):
    """Backward mode reference through autograd: dx = dy * f'(x) (float64)."""

    def fn(dy, x):
        x = x.detach().clone().requires_grad_(True)
        (gx,) = torch.autograd.grad(f(x), x, dy)
        return gx

    return fn


def _clip_slope(x, lo, hi, slope):
    # relu with lower clip, slope below it and upper clip, built from torch primitives
    return torch.clamp(_F.leaky_relu(x - lo, slope) + lo, max=hi)


@_dc.dataclass(frozen=True)
class ModeCase:
    """One pointwise case: ``build(g, tensors) -> output``; ``inputs(rng, shape, dtype)``;
    ``torch_fn(*float64 tensors)`` the PyTorch ground truth; ``modes`` it covers."""

    id: str
    modes: tuple
    build: Callable
    inputs: Callable
    torch_fn: Callable
    boolean: bool = False


def _u(rng, shape, dtype, **kw):
    return [rng.rand(shape, dtype, **kw)]


def _b(rng, shape, dtype, **kw):
    return [rng.rand(shape, dtype, **kw), rng.rand(shape, dtype, **kw)]


def _pos(rng, shape, dtype):
    return [rng.rand(shape, dtype, positive=True)]


def _cmp_inputs(rng, shape, dtype):
    a = rng.rand(shape, dtype)
    b = rng.rand(shape, dtype)
    same = rng.bools(shape)
    return [a, torch.where(same, a, b)]  # about half equal, half not


def _select_inputs(rng, shape, dtype):
    return [rng.rand(shape, dtype), rng.rand(shape, dtype), rng.mask(shape, dtype)]


def _pow_neg_int(rng, shape, dtype):
    a = rng.rand(shape, dtype, low=0.5, high=1.5)
    e = rng.ints(shape, -3, 4, torch.int64).to(dtype)  # integral exponents, sign rule
    return [a, e]


def _tan_inputs(rng, shape, dtype):
    return [rng.rand(shape, dtype, low=0.1, high=1.2)]


def _gen_index(axis):
    def fn(x):
        shape = [1] * x.dim()
        shape[axis] = x.shape[axis]
        return torch.arange(x.shape[axis], dtype=torch.float64).reshape(shape).expand(x.shape)

    return fn


def _m(name, modes, build, inputs, torch_fn, boolean=False):
    return ModeCase(name, tuple(modes), build, inputs, torch_fn, boolean)


MODE_CASES = [
    # unary
    _m("sqrt", [_M.SQRT], lambda g, t: g.sqrt(t[0]), _pos, torch.sqrt),
    _m("tanh", [_M.TANH_FWD], lambda g, t: g.tanh(t[0]), _u, torch.tanh),
    _m("elu", [_M.ELU_FWD], lambda g, t: g.elu(t[0]), _u, _F.elu),
    _m(
        "elu_alpha",
        [_M.ELU_FWD],
        lambda g, t: g.elu(t[0], alpha=0.4),
        _u,
        lambda x: _F.elu(x, alpha=0.4),
    ),
    _m("gelu", [_M.GELU_FWD], lambda g, t: g.gelu(t[0]), _u, _F.gelu),
    _m(
        "gelu_approx_tanh",
        [_M.GELU_APPROX_TANH_FWD],
        lambda g, t: g.gelu_approx_tanh(t[0]),
        _u,
        lambda x: _F.gelu(x, approximate="tanh"),
    ),
    _m("sigmoid", [_M.SIGMOID_FWD], lambda g, t: g.sigmoid(t[0]), _u, torch.sigmoid),
    _m("softplus", [_M.SOFTPLUS_FWD], lambda g, t: g.softplus(t[0]), _u, _F.softplus),
    _m(
        "softplus_beta",
        [_M.SOFTPLUS_FWD],
        lambda g, t: g.softplus(t[0], beta=2.5),
        _u,
        lambda x: _F.softplus(x, beta=2.5),
    ),
    _m("erf", [_M.ERF], lambda g, t: g.erf(t[0]), _u, torch.erf),
    _m("identity", [_M.IDENTITY], lambda g, t: g.identity(t[0]), _u, lambda x: x),
    _m("exp", [_M.EXP], lambda g, t: g.exp(t[0]), _u, torch.exp),
    _m("log", [_M.LOG], lambda g, t: g.log(t[0]), _pos, torch.log),
    _m("neg", [_M.NEG], lambda g, t: g.neg(t[0]), _u, torch.neg),
    _m("abs", [_M.ABS], lambda g, t: g.abs(t[0]), _u, torch.abs),
    _m("ceil", [_M.CEIL], lambda g, t: g.ceil(t[0]), _u, torch.ceil),
    _m("floor", [_M.FLOOR], lambda g, t: g.floor(t[0]), _u, torch.floor),
    _m("rsqrt", [_M.RSQRT], lambda g, t: g.rsqrt(t[0]), _pos, torch.rsqrt),
    _m("reciprocal", [_M.RECIPROCAL], lambda g, t: g.reciprocal(t[0]), _u, torch.reciprocal),
    _m("sin", [_M.SIN], lambda g, t: g.sin(t[0]), _u, torch.sin),
    _m("cos", [_M.COS], lambda g, t: g.cos(t[0]), _u, torch.cos),
    _m("tan", [_M.TAN], lambda g, t: g.tan(t[0]), _tan_inputs, torch.tan),
    _m(
        "logical_not",
        [_M.LOGICAL_NOT],
        lambda g, t: g.logical_not(t[0]),
        lambda r, s, d: [r.mask(s, d)],
        lambda x: (x == 0).double(),
        True,
    ),
    _m("relu", [_M.RELU_FWD], lambda g, t: g.relu(t[0]), _u, torch.relu),
    _m(
        "relu_slope",
        [_M.RELU_FWD],
        lambda g, t: g.relu(t[0], negative_slope=0.2),
        _u,
        lambda x: _F.leaky_relu(x, 0.2),
    ),
    _m(
        "relu_clip",
        [_M.RELU_FWD],
        lambda g, t: g.relu(t[0], lower_clip=-0.5, upper_clip=1.25),
        _u,
        lambda x: torch.clamp(x, -0.5, 1.25),
    ),
    _m(
        "relu_clip_slope",
        [_M.RELU_FWD],
        lambda g, t: g.relu(t[0], negative_slope=0.1, lower_clip=-0.5, upper_clip=1.25),
        _u,
        lambda x: _clip_slope(x, -0.5, 1.25, 0.1),
    ),
    _m(
        "leaky_relu",
        [_M.RELU_FWD],
        lambda g, t: g.leaky_relu(t[0], negative_slope=0.3),
        _u,
        lambda x: _F.leaky_relu(x, 0.3),
    ),
    _m("swish", [_M.SWISH_FWD], lambda g, t: g.swish(t[0]), _u, _F.silu),
    _m(
        "swish_beta",
        [_M.SWISH_FWD],
        lambda g, t: g.swish(t[0], swish_beta=1.7),
        _u,
        lambda x: x * torch.sigmoid(1.7 * x),
    ),
    _m("gen_index_0", [_M.GEN_INDEX], lambda g, t: g.gen_index(t[0], axis=0), _u, _gen_index(0)),
    _m("gen_index_1", [_M.GEN_INDEX], lambda g, t: g.gen_index(t[0], axis=1), _u, _gen_index(1)),
    # binary
    _m("add", [_M.ADD], lambda g, t: g.add(t[0], t[1]), _b, torch.add),
    _m("bias", [_M.ADD], lambda g, t: g.bias(input=t[0], bias=t[1]), _b, torch.add),
    _m("sub", [_M.SUB], lambda g, t: g.sub(t[0], t[1]), _b, torch.sub),
    _m("mul", [_M.MUL], lambda g, t: g.mul(t[0], t[1]), _b, torch.mul),
    _m("scale", [_M.MUL], lambda g, t: g.scale(input=t[0], scale=t[1]), _b, torch.mul),
    _m("div", [_M.DIV], lambda g, t: g.div(t[0], t[1]), _b, torch.div),
    _m(
        "add_square",
        [_M.ADD_SQUARE],
        lambda g, t: g.add_square(t[0], t[1]),
        _b,
        lambda a, b: a + b * b,
    ),
    _m("max", [_M.MAX], lambda g, t: g.max(input0=t[0], input1=t[1]), _b, torch.maximum),
    _m("min", [_M.MIN], lambda g, t: g.min(t[0], t[1]), _b, torch.minimum),
    _m("mod", [_M.MOD], lambda g, t: g.mod(t[0], t[1]), _b, torch.fmod),
    _m(
        "pow",
        [_M.POW],
        lambda g, t: g.pow(t[0], t[1]),
        lambda r, s, d: [r.rand(s, d, positive=True), r.rand(s, d)],
        torch.pow,
    ),
    _m("pow_neg_base_int_exp", [_M.POW], lambda g, t: g.pow(t[0], t[1]), _pow_neg_int, torch.pow),
    _m(
        "logical_and",
        [_M.LOGICAL_AND],
        lambda g, t: g.logical_and(t[0], t[1]),
        lambda r, s, d: [r.mask(s, d), r.mask(s, d)],
        lambda a, b: torch.logical_and(a != 0, b != 0).double(),
        True,
    ),
    _m(
        "logical_or",
        [_M.LOGICAL_OR],
        lambda g, t: g.logical_or(t[0], t[1]),
        lambda r, s, d: [r.mask(s, d), r.mask(s, d)],
        lambda a, b: torch.logical_or(a != 0, b != 0).double(),
        True,
    ),
    _m(
        "cmp_eq",
        [_M.CMP_EQ],
        lambda g, t: g.cmp_eq(input=t[0], comparison=t[1]),
        _cmp_inputs,
        lambda a, b: (a == b).double(),
        True,
    ),
    _m(
        "cmp_neq",
        [_M.CMP_NEQ],
        lambda g, t: g.cmp_neq(t[0], t[1]),
        _cmp_inputs,
        lambda a, b: (a != b).double(),
        True,
    ),
    _m(
        "cmp_gt",
        [_M.CMP_GT],
        lambda g, t: g.cmp_gt(t[0], t[1]),
        _cmp_inputs,
        lambda a, b: (a > b).double(),
        True,
    ),
    _m(
        "cmp_ge",
        [_M.CMP_GE],
        lambda g, t: g.cmp_ge(t[0], t[1]),
        _cmp_inputs,
        lambda a, b: (a >= b).double(),
        True,
    ),
    _m(
        "cmp_lt",
        [_M.CMP_LT],
        lambda g, t: g.cmp_lt(t[0], t[1]),
        _cmp_inputs,
        lambda a, b: (a < b).double(),
        True,
    ),
    _m(
        "cmp_le",
        [_M.CMP_LE],
        lambda g, t: g.cmp_le(t[0], t[1]),
        _cmp_inputs,
        lambda a, b: (a <= b).double(),
        True,
    ),
    # ternary
    _m(
        "binary_select",
        [_M.BINARY_SELECT],
        lambda g, t: g.binary_select(t[0], t[1], t[2]),
        _select_inputs,
        lambda a, b, m: torch.where(m != 0, a, b),
    ),
    # backward (loss, input)
    _m(
        "relu_backward",
        [_M.RELU_BWD],
        lambda g, t: g.relu_backward(t[0], t[1]),
        _b,
        lambda dy, x: _grad(torch.relu)(dy, x),
    ),
    _m(
        "relu_backward_clip_slope",
        [_M.RELU_BWD],
        lambda g, t: g.relu_backward(
            t[0], t[1], negative_slope=0.1, lower_clip=-0.5, upper_clip=1.25
        ),
        _b,
        lambda dy, x: _grad(lambda v: _clip_slope(v, -0.5, 1.25, 0.1))(dy, x),
    ),
    _m(
        "leaky_relu_backward",
        [_M.RELU_BWD],
        lambda g, t: g.leaky_relu_backward(t[0], t[1], negative_slope=0.3),
        _b,
        lambda dy, x: _grad(lambda v: _F.leaky_relu(v, 0.3))(dy, x),
    ),
    _m(
        "tanh_backward",
        [_M.TANH_BWD],
        lambda g, t: g.tanh_backward(t[0], t[1]),
        _b,
        lambda dy, x: _grad(torch.tanh)(dy, x),
    ),
    _m(
        "sigmoid_backward",
        [_M.SIGMOID_BWD],
        lambda g, t: g.sigmoid_backward(t[0], t[1]),
        _b,
        lambda dy, x: _grad(torch.sigmoid)(dy, x),
    ),
    _m(
        "elu_backward",
        [_M.ELU_BWD],
        lambda g, t: g.elu_backward(t[0], t[1], alpha=0.4),
        _b,
        lambda dy, x: _grad(lambda v: _F.elu(v, 0.4))(dy, x),
    ),
    _m(
        "gelu_backward",
        [_M.GELU_BWD],
        lambda g, t: g.gelu_backward(t[0], t[1]),
        _b,
        lambda dy, x: _grad(_F.gelu)(dy, x),
    ),
    _m(
        "gelu_approx_tanh_backward",
        [_M.GELU_APPROX_TANH_BWD],
        lambda g, t: g.gelu_approx_tanh_backward(t[0], t[1]),
        _b,
        lambda dy, x: _grad(lambda v: _F.gelu(v, approximate="tanh"))(dy, x),
    ),
    _m(
        "softplus_backward",
        [_M.SOFTPLUS_BWD],
        lambda g, t: g.softplus_backward(t[0], t[1], beta=2.5),
        _b,
        lambda dy, x: _grad(lambda v: _F.softplus(v, beta=2.5))(dy, x),
    ),
    _m(
        "swish_backward",
        [_M.SWISH_BWD],
        lambda g, t: g.swish_backward(t[0], t[1], swish_beta=1.7),
        _b,
        lambda dy, x: _grad(lambda v: v * torch.sigmoid(1.7 * v))(dy, x),
    ),
]

MODE_IDS = [c.id for c in MODE_CASES]


def covered_modes() -> set:
    return {m for c in MODE_CASES for m in c.modes}


# ---- reduction cases shared by the reference and fusion tests ------------------------------------
from opendnn.enums import ReductionMode as _R  # noqa: E402

REDUCE_SHAPES = [
    ((5, 37), (5, 1)),  # rows
    ((5, 37), (1, 37)),  # columns
    ((3, 4, 5), (3, 1, 1)),  # two trailing axes
    ((3, 4, 5), (1, 4, 1)),  # outer and inner axes
    ((3, 4, 5), (3, 1, 5)),  # the middle axis
    ((3, 4, 5), (1, 1, 1)),  # all axes
    ((2, 3, 4, 5), (1, 3, 1, 1)),  # per channel
    ((4, 1, 3), (1, 1, 3)),  # size-one axis in the input
    ((3, 4), (3, 4)),  # nothing reduced
]


def reduce_input(rng, mode, shape, dtype):
    if mode == _R.MUL:
        return rng.rand(shape, dtype, low=0.6, high=1.4)
    x = rng.rand(shape, dtype)
    if mode == _R.MUL_NO_ZEROS and x.numel() > 1:
        x.view(-1)[::3] = 0  # zeros are the point of this mode
    return x


# documented results of a reduction over nothing
EMPTY_IDENTITY = {
    _R.ADD: 0.0,
    _R.MUL: 1.0,
    _R.MIN: float("inf"),
    _R.MAX: float("-inf"),
    _R.AMAX: 0.0,
    _R.AVG: float("nan"),
    _R.NORM1: 0.0,
    _R.NORM2: 0.0,
    _R.MUL_NO_ZEROS: 1.0,
}


def reduced_count(xdims, ydims) -> int:
    """Number of input elements folded into one output element."""
    return math.prod(a for a, b in zip(xdims, ydims) if b == 1 and a != 1)


def close_f32(actual, expected, what=""):
    """float32 engines against PyTorch: relative 1e-4 of the values' magnitude."""
    scale = max(1.0, float(expected.detach().abs().max())) if expected.numel() else 1.0
    torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-4 * scale, msg=what)


# ---- opendnn.torch tests: the examples as modules, PyTorch's reference in true float32 ------
EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples")


def load_example(name: str):
    """examples/<name>.py as a module (the examples folder is not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        f"opendnn_example_{name}", os.path.join(EXAMPLES, f"{name}.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def true_fp32_and_clean():
    """TF32 off for PyTorch (opendnn's allow_tf32 is off by default), and enable()'s
    fallback log cleared before and after, enable() switched off after."""
    import importlib

    E = importlib.import_module("opendnn.torch.enable")  # the module, not the function
    saved = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    E.clear_fallbacks()
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved
        while E.is_enabled():
            E.disable()
        E.clear_fallbacks()
