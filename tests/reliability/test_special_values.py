"""Special values against PyTorch: +-inf, NaN, +-0, subnormals, tiny and huge magnitudes,
in the runtime-fusion engine (generated Triton code, interpreted), the float64 reference
engine and the norm, batch-norm and softmax engines.

Each test states the rule it checks in its docstring. Outputs are NaN-poisoned before
every run (boolean outputs run once filled with False and once with True), NaN must sit
exactly where PyTorch's is, infinities must match with their sign, signs of zeros where
PyTorch keeps them (tanh(-0) = -0), and finite values agree to a tolerance relative to
the value (a few units in the last place), never an absolute one that would let
tanh(1e-7) = 6e-8 pass.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from _norm_cases import forward_graph, torch_forward, torch_stats
from _util import FUSION_ID, REFERENCE_ID, TORCH_TO_DT, fills_for, heuristic_knobs, run_plan

import opendnn.frontend as cudnn
from opendnn.enums import DataType
from opendnn.enums import PointwiseMode as M
from opendnn.enums import ReductionMode as R

INF, NAN = math.inf, math.nan
NORM_ID, BATCHNORM_ID, SOFTMAX_ID = 26, 30, 25
ENGINES = {"fusion": FUSION_ID, "reference": REFERENCE_ID}
DTYPES = [torch.float32, torch.float64]
RTOL = {torch.float32: 4 * 2.0**-24, torch.float64: 8 * 2.0**-53}
# +-0, tiny (1e-7: the near-zero accuracy of tanh / elu / ...; 1e-30; subnormals), one,
# moderate, the exp / log tails (20, 88, 100), huge, +-inf and NaN
VALUES = [
    0.0,
    -0.0,
    1e-40,
    -1e-40,
    1e-30,
    -1e-30,
    1e-7,
    -1e-7,
    1e-3,
    -1e-3,
    0.3,
    -0.3,
    1.0,
    -1.0,
    5.0,
    -5.0,
    20.0,
    -20.0,
    88.0,
    -88.0,
    100.0,
    -100.0,
    1e30,
    -1e30,
    3e38,
    -3e38,
    INF,
    -INF,
    NAN,
]
VALUES64 = VALUES + [1e-310, -1e-310, 1e200, -1e200]


def _repro(test: str, **kw) -> str:
    more = " ".join(f"{k}={v}" for k, v in kw.items())
    return f"[repro] pytest tests/reliability/test_special_values.py -k {test} ({more})"


def _values(dtype) -> torch.Tensor:
    return torch.tensor(VALUES64 if dtype == torch.float64 else VALUES, dtype=torch.float64)


def _graph(dtype):
    t = DataType.DOUBLE if dtype == torch.float64 else DataType.FLOAT
    return cudnn.pygraph(intermediate_data_type=t, compute_data_type=t)


def run_graph(g, feeds: dict, outputs: list, engine_id: int, knobs=None) -> list:
    """The outputs of ``g`` on engine ``engine_id`` (its own first knobs unless given),
    each run once per poison value of its type; every run must give the same result."""
    g.validate()
    if knobs is None:
        knobs = heuristic_knobs(g, engine_id) if engine_id != REFERENCE_ID else {}
    g.create_execution_plan(engine_id, knobs)
    results = None
    for fill in sorted(
        {
            repr(f): f
            for o in outputs
            for f in fills_for({v: k for k, v in TORCH_TO_DT.items()}[o.get_data_type()])
        }.values(),
        key=repr,
    ):
        got = run_plan(g, feeds, outputs, 0, fill)
        now = [got[o] for o in outputs]
        if results is not None:
            for a, b in zip(results, now):
                assert torch.equal(a.isnan(), b.isnan()) and torch.equal(
                    torch.nan_to_num(a), torch.nan_to_num(b)
                ), "output depends on the poison"
        results = now
    return results


def pointwise(mode, xs: list, dtype, engine_id: int, **attrs) -> torch.Tensor:
    """One pointwise node ``mode`` over ``xs`` (cast to ``dtype``), computed in ``dtype``."""
    g = _graph(dtype)
    ts = [g.tensor(list(x.shape), list(x.stride()), TORCH_TO_DT[dtype]) for x in xs]
    y = g._pointwise(mode, ts, **attrs)
    y.set_output(True).set_data_type(TORCH_TO_DT[dtype])
    return run_graph(g, {t: x.to(dtype) for t, x in zip(ts, xs)}, [y], engine_id)[0]


def assert_same(got, expected, dtype, msg, rtol=None, scale=None, signed_zeros=True):
    """NaN where ``expected`` has NaN, the same infinities, zero signs where
    ``signed_zeros``, and |got - expected| <= rtol (|expected| + scale) + 4 subnormal ulps
    elsewhere (``scale``: an absolute size per element, for results PyTorch itself
    computes with cancellation)."""
    rtol = RTOL[dtype] if rtol is None else rtol
    g, e = got.double(), expected.to(dtype).double()
    tiny = 4 * torch.finfo(dtype).smallest_normal * 2 * RTOL[dtype] / 4
    bad = torch.isnan(g) != torch.isnan(e)
    bad |= torch.isinf(e) & (g != e)
    fin = torch.isfinite(e)
    size = e.abs() if scale is None else e.abs() + scale
    bad |= fin & ~((g - e).abs() <= rtol * size + tiny)
    if signed_zeros:
        bad |= (e == 0) & (g == 0) & (torch.signbit(g) != torch.signbit(e))
    if bool(bad.any()):
        i = int(bad.nonzero()[0][0])
        raise AssertionError(
            f"{msg}\n{int(bad.sum())} of {bad.numel()} elements differ; "
            f"first at {i}: got {g[i].item()!r}, expected {e[i].item()!r}"
        )


# ---- 1. clipped activations never make 0 * inf -----------------------------------------------
RELU_FAMILY = {  # name: (cuDNN relu attributes, PyTorch)
    "relu": ({}, torch.relu),
    "relu6": ({"relu_upper_clip": 6.0}, F.relu6),
    "hardtanh": ({"relu_lower_clip": -1.0, "relu_upper_clip": 1.0}, F.hardtanh),
    "clipped_relu": ({"relu_upper_clip": 3.0}, lambda x: F.hardtanh(x, 0.0, 3.0)),
    "leaky_relu": ({"relu_lower_clip_slope": 0.2}, lambda x: F.leaky_relu(x, 0.2)),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", RELU_FAMILY)
def test_relu_family_special_values(name, engine, dtype):
    """relu(-inf) = 0, relu6 / hardtanh / clipped relu clip +-inf, leaky_relu(-inf) = -inf,
    NaN stays NaN and -0 stays -0 (x == lower clip passes through, as PyTorch's clamp):
    the lower side lo + slope (x - lo) was 0 * -inf = NaN for slope 0."""
    attrs, fn = RELU_FAMILY[name]
    x = _values(dtype)
    got = pointwise(M.RELU_FWD, [x], dtype, ENGINES[engine], **attrs)
    assert_same(got, fn(x), dtype, _repro("relu_family", name=name, engine=engine))


def _grad(fn, dy, x):
    # PyTorch's CPU vectorized hardtanh / elu backward give 0 / NaN at a NaN x, its scalar
    # path and CUDA kernels dy: one element at a time is the CUDA rule
    out = torch.empty_like(x)
    for i in range(x.numel()):
        xi = x[i : i + 1].clone().requires_grad_(True)
        (out[i : i + 1],) = torch.autograd.grad(fn(xi), xi, dy[i : i + 1])
    return out


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", RELU_FAMILY)
def test_relu_family_backward_special_values(name, engine, dtype):
    """relu_backward at x = +-inf, NaN, +-0 and with dy = +-inf, NaN is PyTorch's autograd:
    relu'(+inf) = 1 (an infinite upper clip cuts nothing), a clipped side drops dy (even
    an infinite or NaN one), NaN x passes dy (slope 0) or slope * dy (leaky relu)."""
    attrs, fn = RELU_FAMILY[name]
    v = _values(dtype)
    x = torch.cat([v, torch.full_like(v, 0.5), torch.full_like(v, -5.0), torch.full_like(v, 7.0)])
    dy = torch.cat([torch.full_like(v, 0.7), v, v, v])
    got = pointwise(M.RELU_BWD, [dy, x], dtype, ENGINES[engine], **attrs)
    assert_same(
        got,
        _grad(fn, dy, x),
        dtype,
        _repro("relu_family_backward", name=name, engine=engine),
        signed_zeros=False,
    )


@pytest.mark.parametrize("mode", ["RELU", "CLIPPED_RELU"])
def test_legacy_activation_forward_infinities(mode):
    """activation_forward (the descriptor API) with RELU / CLIPPED_RELU: -inf gives 0,
    +inf gives +inf / the clip, NaN propagates (PROPAGATE_NAN)."""
    import opendnn.legacy as legacy

    h = legacy.create("cpu")
    act = legacy.create_activation_descriptor()
    legacy.set_activation_descriptor(
        act, getattr(legacy.ActivationMode, mode), legacy.NanPropagation.PROPAGATE_NAN, 6.0
    )
    d = legacy.create_tensor_descriptor()
    legacy.set_tensor_4d_descriptor(
        d, legacy.TensorFormat.NCHW, legacy.DataType.FLOAT, 1, 1, 1, len(VALUES)
    )
    x = torch.tensor(VALUES, dtype=torch.float32).reshape(1, 1, 1, -1)
    y = torch.full_like(x, NAN)
    legacy.activation_forward(h, act, 1.0, d, x, 0.0, d, y)
    want = torch.relu(x) if mode == "RELU" else F.hardtanh(x, 0.0, 6.0)
    assert_same(y.flatten(), want.flatten(), torch.float32, _repro("legacy_activation", mode=mode))


@pytest.mark.parametrize("name", ["relu6", "hardtanh", "hardsigmoid", "leaky_relu"])
def test_torch_functional_activations_at_infinities(name):
    """opendnn.torch's relu6 / hardtanh / hardsigmoid / leaky_relu (relu nodes underneath)
    at +-inf, NaN and +-0 are PyTorch's."""
    import opendnn.torch.functional as OF

    x = torch.tensor(VALUES, dtype=torch.float32)
    args = (0.2,) if name == "leaky_relu" else ()
    got = getattr(OF, name)(x.clone(), *args)
    assert_same(
        got, getattr(F, name)(x, *args), torch.float32, _repro("torch_functional", name=name)
    )


# ---- 2. accuracy near zero and in the tails; +-0 kept -----------------------------------------
def _softplus(x, beta=1.0):
    # cuDNN's softplus has no threshold: PyTorch's formula without it
    z = beta * x
    return (torch.where(z > 0, z, 0.0) + torch.log1p(torch.exp(-z.abs()))) / beta


SMOOTH = {  # name: (mode, attributes, PyTorch in float64, per-element error size or None)
    "tanh": (M.TANH_FWD, {}, torch.tanh, None),
    "sigmoid": (M.SIGMOID_FWD, {}, torch.sigmoid, None),
    "elu": (M.ELU_FWD, {}, F.elu, None),
    "elu_alpha": (M.ELU_FWD, {"elu_alpha": 0.4}, lambda x: F.elu(x, 0.4), None),
    "softplus": (M.SOFTPLUS_FWD, {}, _softplus, None),
    "softplus_beta": (M.SOFTPLUS_FWD, {"softplus_beta": 2.5}, lambda x: _softplus(x, 2.5), None),
    # x times a sigmoid whose tail is subnormal in float32: an error of |x| subnormal ulps
    "swish": (M.SWISH_FWD, {}, F.silu, "x_subnormal"),
    # PyTorch computes gelu's tails as 1 + erf / 1 + tanh (cancellation): an error of an
    # ulp of |x| there, in its float64 too
    "gelu": (M.GELU_FWD, {}, F.gelu, "x"),
    "gelu_approx_tanh": (M.GELU_APPROX_TANH_FWD, {}, lambda x: F.gelu(x, approximate="tanh"), "x"),
    "exp": (M.EXP, {}, torch.exp, None),
    "log": (M.LOG, {}, torch.log, None),
    "neg": (M.NEG, {}, torch.neg, None),
    "erf": (M.ERF, {}, torch.erf, None),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", SMOOTH)
def test_smooth_activations_relative_accuracy(name, engine, dtype):
    """A few ulps relative to the value at every special point: tanh(1e-7) is 1e-7 (not
    6e-8: tanh and elu go through expm1, softplus through log1p), the sigmoid / softplus /
    swish tails keep their tiny values (sigmoid(-100) = 3.7e-44), tanh(-0) = -0,
    elu(-0) = -0, neg(+0) = -0, and +-inf / NaN are PyTorch's (float64 PyTorch: gelu(inf)
    = inf)."""
    mode, attrs, fn, scale = SMOOTH[name]
    x = _values(dtype)
    got = pointwise(mode, [x], dtype, ENGINES[engine], **attrs)
    ax = x.to(dtype).double().abs().nan_to_num(posinf=0.0)
    size = {"x": ax, "x_subnormal": ax * torch.finfo(dtype).smallest_normal, None: None}[scale]
    assert_same(
        got,
        fn(x.to(dtype).double()),
        dtype,
        _repro("smooth", name=name, engine=engine, dtype=dtype),
        scale=size,
    )


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("engine", ENGINES)
def test_expm1_and_log1p_near_zero(engine, dtype):
    """elu(x) = expm1(x) and softplus(x) = log1p(e^x) for x in (-1e-3, -1e-300): the
    kernels' expm1 (Taylor terms) and log1p (atanh series) to a few ulps, subnormals
    included; and across the switch to exp - 1 / log(1 + x) (|x| near 0.35)."""
    lo = -300 if dtype == torch.float64 else -44
    x = -torch.logspace(lo, -3, 97, dtype=torch.float64)
    x = torch.cat([x, torch.linspace(-0.5, 0.0, 41, dtype=torch.float64)]).to(dtype).double()
    got = pointwise(M.ELU_FWD, [x], dtype, ENGINES[engine])
    assert_same(got, torch.expm1(x), dtype, _repro("expm1", engine=engine), signed_zeros=False)
    z = torch.log(
        torch.cat(
            [
                torch.logspace(lo, 0, 97, dtype=torch.float64),
                torch.linspace(0.6, 1.6, 41, dtype=torch.float64),
            ]
        )
    )
    z = z.to(dtype).double()
    got = pointwise(M.SOFTPLUS_FWD, [z], dtype, ENGINES[engine])
    assert_same(got, torch.log1p(torch.exp(z)), dtype, _repro("log1p", engine=engine))


BACKWARD = {  # name: (mode, attributes, PyTorch's forward)
    "tanh": (M.TANH_BWD, {}, torch.tanh),
    "sigmoid": (M.SIGMOID_BWD, {}, torch.sigmoid),
    "elu": (M.ELU_BWD, {"elu_alpha": 0.4}, lambda x: F.elu(x, 0.4)),
    "gelu": (M.GELU_BWD, {}, F.gelu),
    "gelu_approx_tanh": (M.GELU_APPROX_TANH_BWD, {}, lambda x: F.gelu(x, approximate="tanh")),
    "swish": (M.SWISH_BWD, {}, F.silu),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", BACKWARD)
def test_backward_modes_special_values(name, engine, dtype):
    """dy * f'(x) at x and dy special is PyTorch's autograd (NaN where it has NaN:
    inf * 0 where its 1 - tanh^2 or s (1 - s) rounds to 0; elu's NaN x gives dy, as its
    CUDA kernel); no intermediate overflows (dy * 4 before a tiny slope, beta x before
    its vanishing product)."""
    mode, attrs, fn = BACKWARD[name]
    v = _values(dtype)
    x = torch.cat([v, torch.full_like(v, 0.5), torch.full_like(v, -3.0), torch.full_like(v, 30.0)])
    dy = torch.cat([torch.full_like(v, 0.7), v, v, v])
    got = pointwise(mode, [dy, x], dtype, ENGINES[engine], **attrs)
    # PyTorch's autograd in the engine's compute type (the reference computes in float64)
    ct = torch.float64 if engine == "reference" else dtype
    want = _grad(fn, dy.to(dtype).to(ct), x.to(dtype).to(ct))
    assert_same(
        got,
        want,
        dtype,
        _repro("backward_modes", name=name, engine=engine),
        scale=dy.abs().nan_to_num(posinf=0.0) * (1 + x.abs().nan_to_num(posinf=0.0)),
        signed_zeros=False,
    )


# ---- 5. the other modes' special values ----------------------------------------------------------
def _pairs(dtype):
    v = _values(dtype)
    return v.repeat_interleave(v.numel()), v.repeat(v.numel())


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("engine", ENGINES)
def test_pow_special_values(engine, dtype):
    """C's pow on every pair of special values: (-inf)^0.5 = inf, (-inf)^-1 = -0,
    (-0)^-1 = -inf, (-0)^0.5 = 0, (-1)^+-inf = 1, (-1e30)^-3 = -0, x^0 = 1^y = 1."""
    a, b = _pairs(dtype)
    got = pointwise(M.POW, [a, b], dtype, ENGINES[engine])
    # |a|^b through exp2(b log2 |a|): an error of b log2|a| ulps
    k = (b * torch.log2(a.abs())).abs().nan_to_num(nan=0.0, posinf=0.0)
    want = torch.pow(a, b)
    assert_same(
        got,
        want,
        dtype,
        _repro("pow", engine=engine),
        scale=want.abs().nan_to_num(posinf=0.0) * (1 + k),
    )


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("engine", ENGINES)
def test_mod_exact(engine, dtype):
    """fmod is exact (C's fmod) for every pair of special values and for random pairs
    with quotients up to 2^600, its zero taking a's sign (fmod(-0, b) = fmod(-4, 2) =
    -0); fmod(a, +-inf) = a."""
    import numpy as np

    a, b = _pairs(dtype)
    gen = torch.Generator().manual_seed(7)
    lim = 120 if dtype == torch.float32 else 600
    ea = torch.randint(-lim, lim, (400,), generator=gen).double()
    eb = torch.randint(-lim, lim, (400,), generator=gen).double()
    ra = (torch.rand(400, generator=gen, dtype=torch.float64) * 2 - 1) * 2.0**ea
    rb = (torch.rand(400, generator=gen, dtype=torch.float64) * 2 - 1) * 2.0**eb
    a = torch.cat([a, ra, torch.tensor([-4.0])]).to(dtype)
    b = torch.cat([b, rb, torch.tensor([2.0])]).to(dtype)
    got = pointwise(M.MOD, [a, b], dtype, ENGINES[engine])
    with np.errstate(all="ignore"):
        want = torch.from_numpy(np.fmod(a.numpy(), b.numpy()))
    assert_same(got, want, dtype, _repro("mod", engine=engine), rtol=0.0)


def test_max_min_propagate_nan_when_compiled():
    """MAX / MIN ask Triton for NaN propagation: compiled, tl.maximum's default drops a
    NaN operand (the interpreter's NumPy keeps it), PyTorch's maximum keeps it."""
    from opendnn.ops.pointwise import DEFAULT_ATTRS, MODES

    for mode in (M.MAX, M.MIN):
        assert "propagate_nan=tl.PropagateNan.ALL" in MODES[mode].triton("a", "b", DEFAULT_ATTRS)


# ---- 3. norms at extreme magnitudes --------------------------------------------------------------
def _norm_rows(length: int, seed: int) -> torch.Tensor:
    """Rows of x in float32: 1e20-scaled, 1e-20-scaled, +-3e38 (sums overflow), a
    constant 5e37 row (variance 0), a nearly constant 1e30 row, a row led by inf."""
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(7, length, generator=g, dtype=torch.float64)
    x = base.clone()
    x[0] *= 1e20
    x[1] *= 1e-20
    x[2] = 3e38 * torch.sign(base[2])
    x[2, 0] = 1.0
    x[3] = 5e37
    x[4] = 1e30
    x[4, 3] = 2e30
    x[5, 0] = INF
    x[6] = 1.0 + 1e-3 * base[6]
    return x.float()


NORM_PATHS = {
    1: dict(PATH=1, BLOCK_L=64, BLOCK_ROWS=2),
    2: dict(PATH=2, BLOCK_L=64),
    3: dict(PATH=3, BLOCK_L=32, SPLIT=4),
}


@pytest.mark.parametrize("path", list(NORM_PATHS) + ["reference"])
@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm"])
def test_norm_extreme_magnitudes(kind, path):
    """Layer / RMS norm of float32 rows at 1e20, 1e-20, +-3e38 and constant huge rows:
    Y, MEAN and INV_VARIANCE are PyTorch's float64 results cast (x^2 overflowed float32:
    Y came out as the bias, or NaN), in each forward path (rows in registers, two loops,
    split rows) and the reference; a constant row's mean is exact."""
    length = 300 if path in (2, 3) else 64
    x = _norm_rows(length, path if path != "reference" else 4)
    g = torch.Generator().manual_seed(1)
    w = torch.randn(1, length, generator=g)
    b = torch.randn(1, length, generator=g)
    graph, feeds, outs = forward_graph(kind, x, w, b)
    eid, knobs = (REFERENCE_ID, {}) if path == "reference" else (NORM_ID, NORM_PATHS[path])
    got = run_graph(graph, feeds, outs, eid, knobs)
    y = torch_forward(kind, x.double(), w.double(), b.double())
    mean, inv = torch_stats(kind, x.double(), w.double())
    if kind == "layernorm":  # the constant row, exactly (PyTorch's mean has rounding noise)
        mean[3], inv[3] = x[3, 0].double(), 1 / math.sqrt(1e-5)
        y[3] = b.double()
    want = [y, mean, inv] if kind == "layernorm" else [y, inv]
    rtol = 64 * 2.0**-24 * math.sqrt(length)
    for name, a, e in zip(
        ["Y", "MEAN", "INV_VARIANCE"] if kind == "layernorm" else ["Y", "INV_VARIANCE"], got, want
    ):
        assert_same(
            a.flatten(),
            e.flatten(),
            torch.float32,
            _repro("norm_extreme", kind=kind, path=path, output=name),
            rtol=rtol,
            scale=torch.ones(e.numel(), dtype=torch.float64) if name == "Y" else None,
            signed_zeros=False,
        )


@pytest.mark.parametrize("kind", ["instancenorm", "groupnorm"])
def test_instance_group_norm_extreme_magnitudes(kind):
    """Instance / group norm of channels at 1e20, 1e-20 and +-3e38 against PyTorch in
    float64."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 4, 5, 5, generator=g, dtype=torch.float64)
    x[:, 0] *= 1e20
    x[:, 1] *= 1e-20
    x[:, 2] = 3e38 * torch.sign(x[:, 2])
    x[0, 2, 0, 0] = 1.0
    x = x.float()
    w = torch.randn(1, 4, 1, 1, generator=g)
    b = torch.randn(1, 4, 1, 1, generator=g)
    groups = 2 if kind == "groupnorm" else 1
    graph, feeds, outs = forward_graph(kind, x, w, b, groups=groups)
    got = run_graph(graph, feeds, outs, NORM_ID)
    y = torch_forward(kind, x.double(), w.double(), b.double(), groups=groups)
    assert_same(
        got[0].flatten(),
        y.flatten(),
        torch.float32,
        _repro("instance_group_norm_extreme", kind=kind),
        rtol=1e-4,
        scale=torch.ones(y.numel(), dtype=torch.float64),
        signed_zeros=False,
    )


@pytest.mark.parametrize("engine", ["batchnorm", "reference"])
@pytest.mark.parametrize("split", [1, 3])
def test_batchnorm_extreme_magnitudes(split, engine):
    """Batch norm training of channels at 1e20, 1e-20, +-3e38 (sums overflow float32) and
    one whose first element is inf: Y, MEAN, INV_VARIANCE and the running statistics are
    PyTorch's float64 results cast."""
    from _util import heuristic_knobs as hk

    g = torch.Generator().manual_seed(5)
    x = torch.randn(8, 4, 3, 3, generator=g, dtype=torch.float64)
    x[:, 0] *= 1e20
    x[:, 1] *= 1e-20
    x[:, 2] = 3e38 * torch.sign(x[:, 2])
    x[0, 2, 0, 0] = 1.0
    x[0, 3, 0, 0] = INF
    x = x.float()
    s, b, rm = (torch.randn(1, 4, 1, 1, generator=g) for _ in range(3))
    rv = torch.rand(1, 4, 1, 1, generator=g) + 0.5
    graph = cudnn.pygraph()
    ts = [graph.tensor(list(t.shape), list(t.stride()), DataType.FLOAT) for t in (x, s, b, rm, rv)]
    outs = list(graph.batchnorm(*ts, 1e-5, 0.1))
    for o in outs:
        o.set_output(True)
    graph.validate()
    eid = BATCHNORM_ID if engine == "batchnorm" else REFERENCE_ID
    knobs = {**hk(graph, eid), "SPLIT": split, "BLOCK_R": 4} if eid == BATCHNORM_ID else {}
    got = run_graph(graph, dict(zip(ts, (x, s, b, rm, rv))), outs, eid, knobs)
    xd = x.double()
    rmd, rvd = rm.double().flatten().clone(), rv.double().flatten().clone()
    y = F.batch_norm(xd, rmd, rvd, s.double().flatten(), b.double().flatten(), True, 0.1, 1e-5)
    mean = xd.mean((0, 2, 3))
    inv = 1 / torch.sqrt(((xd - mean[None, :, None, None]) ** 2).mean((0, 2, 3)) + 1e-5)
    for name, a, e in zip(
        ["Y", "MEAN", "INV_VARIANCE", "RUNNING_MEAN", "RUNNING_VAR"], got, [y, mean, inv, rmd, rvd]
    ):
        e = e.reshape(a.shape)
        assert_same(
            a.flatten(),
            e.flatten(),
            torch.float32,
            _repro("batchnorm_extreme", split=split, engine=engine, output=name),
            rtol=1e-4,
            scale=torch.ones(e.numel(), dtype=torch.float64) if name == "Y" else None,
            signed_zeros=False,
        )


@pytest.mark.parametrize("engine", ["softmax", "reference"])
def test_softmax_bfloat16_subnormal_results(engine):
    """Softmax into bfloat16 rounds subnormal results to nearest (Triton's interpreter
    turned them into wrong normal values, and truncated)."""
    x = torch.tensor([[0.0, -85.0, -88.0, -90.0, -95.0, 3.0, -100.0, -1e30]], dtype=torch.bfloat16)
    g = cudnn.pygraph()
    t = g.tensor(list(x.shape), list(x.stride()), DataType.BFLOAT16)
    y = g.softmax(t, axis=-1)
    y.set_output(True).set_data_type(DataType.BFLOAT16)
    eid = SOFTMAX_ID if engine == "softmax" else REFERENCE_ID
    got = run_graph(g, {t: x}, [y], eid)[0]
    want = torch.softmax(x.double(), -1).to(torch.bfloat16)
    assert torch.equal(got.view(torch.int16), want.view(torch.int16)), (
        f"{_repro('softmax_bfloat16', engine=engine)}\ngot {got.tolist()}, want {want.tolist()}"
    )


# ---- 4. empty reductions into BOOLEAN ----------------------------------------------------------
EMPTY_BOOL = {
    R.MAX: False,
    R.MIN: True,
    R.ADD: False,
    R.MUL: True,
    R.AMAX: False,
    R.NORM1: False,
    R.NORM2: False,
    R.MUL_NO_ZEROS: True,
}


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("mode", list(EMPTY_BOOL), ids=lambda m: m.name)
def test_empty_reduction_into_boolean(mode, engine):
    """A reduction over an empty axis into a BOOLEAN output is the mode's identity in
    that type, as torch.any / torch.all of nothing: MAX -> False (not -inf -> True),
    MIN -> True, ADD -> False, MUL -> True."""
    g = _graph(torch.float32)
    x = torch.empty(3, 0)
    t = g.tensor([3, 0], [1, 1], DataType.FLOAT)
    y = g.reduction(t, mode)
    y.set_output(True).set_dim([3, 1]).set_data_type(DataType.BOOLEAN)
    got = run_graph(g, {t: x}, [y], ENGINES[engine])[0]
    want = torch.full((3, 1), EMPTY_BOOL[mode])
    assert torch.equal(got, want), (
        f"{_repro('empty_reduction', mode=mode.name, engine=engine)}\ngot {got.flatten().tolist()}"
    )
