"""Pointwise operations: one table gives, for every ``PointwiseMode``, its arity, the
float64 reference (NumPy) and the Triton expression the fusion code generator emits.

Inputs broadcast to the output's dims (size-1 or stride-0 dimensions). Every value is
computed in the compute type (float32, or float64 when the graph computes in DOUBLE);
comparisons and logical operations produce 1.0 / 0.0 in that type.

Activation formulas (cuDNN's definitions, ``x`` the input, ``dy`` the incoming gradient):

- relu:     y = min(x, upper) if x > lower else lower + slope * (x - lower)
            (defaults lower=0, upper=+inf, slope=0; leaky relu is slope != 0)
- elu:      y = x if x > 0 else alpha * (exp(x) - 1)
- gelu:     y = x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2));   gelu' = Phi(x) + x phi(x)
- gelu_approx_tanh: y = 0.5 x (1 + tanh(k (x + 0.044715 x^3))), k = sqrt(2 / pi)
- softplus: y = log(1 + exp(beta x)) / beta;   softplus' = sigmoid(beta x)
- swish:    y = x sigmoid(beta x);   swish' = s + beta x s (1 - s), s = sigmoid(beta x)
- *_BWD(dy, x) = dy * f'(x)

Special values follow PyTorch (tests/reliability/test_special_values.py, fuzz_values.py):

- relu family: no 0 * inf -- the lower side is ``lower`` itself when slope is 0 -- so
  relu(-inf) = 0, leaky_relu(-inf) = -inf; NaN and x == lower pass through as x
  (relu(-0) = -0), as PyTorch's clamp. Backward: slope 0 (relu, relu6, hardtanh, clipped
  relu) gives 0 where x <= lower or x >= upper, an infinite upper clip cutting nothing
  (relu'(+inf) = 1), dy elsewhere, a NaN x included; a slope gives slope * dy where
  x <= lower or x is NaN (leaky_relu's rule). At a NaN x PyTorch's CPU vectorized
  hardtanh / elu backward give 0 / NaN, its CUDA kernels and CPU scalar path dy: this
  table follows CUDA (elu_backward of a NaN x is dy too).
- tanh, elu go through expm1 and softplus through log1p (runtime/kernel_math has both for
  Triton): tanh(1e-7) = 1e-7, elu(-0) = -0, softplus(-20) = 2.06e-9, to a few ulps.
  sigmoid and swish keep their negative tails (sigmoid(-100) = 3.7e-44; PyTorch's float32
  gives 0 there, its float64 the same as here); swish's tail in float32 is limited by the
  subnormal sigmoid it multiplies.
- softplus has no threshold (cuDNN's): x + log1p(exp(-beta x)) / beta beyond PyTorch's
  beta x > 20, where F.softplus returns x (they differ by under 2e-9 relative).
- gelu, gelu_approx_tanh and the backward modes keep PyTorch's formulas and order of
  operations -- 1 + erf, 1 + tanh, 1 - tanh^2, s (1 - s), silu's s (1 + x (1 - s)) -- so
  their tails round to the same zeros, an infinite dy meets them as NaN where PyTorch's
  does, and gelu_approx_tanh' of |x| > 1.8e19 is NaN in float32 (x^2 overflows), as
  PyTorch's float32.
- neg(+0) = -0 (a product: Triton's unary minus is 0 - x); max / min propagate NaN when
  compiled (Triton's default maxnum drops it); pow is C's pow for every pair of special
  values; mod is C's fmod, exact for any quotient (kernel_math's ``_pw_fmod``).
- Deviations, compiled only (seen on an H100; the CPU interpreter has none): Triton's
  fast float32 math flushes subnormals -- exp / log / rsqrt / sin / cos, libdevice's erf
  (reflect-ftz) -- so sigmoid(-100) = 0 (PyTorch's float32 too), rsqrt(1e-40) = inf,
  erf(1e-40) = 0, pow(1e-40, 1) = 0; tl.exp (ex2.approx) is ~2e-6 relative off near
  |x| = 88, which softplus / sigmoid tails inherit.

The Triton expressions use only builtins that the interpreter also runs -- no libdevice and
none of triton.language's own @jit helpers (tl.sigmoid, tl.sum, ...), which exist only
compiled -- so one generated source runs both ways: sigmoid, tanh, expm1, log1p and fmod
are runtime/kernel_math's helpers, pow goes through exp2/log2 with the sign rule for
integral exponents.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

import numpy as np
import torch

from ..enums import PointwiseMode as M

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _erf(x: np.ndarray) -> np.ndarray:
    return torch.erf(torch.from_numpy(np.array(x, dtype=np.float64))).numpy()


def _sigmoid(x):
    e = np.exp(-np.abs(x))  # never overflows; keeps the negative tail's tiny values
    return np.where(x >= 0, 1.0, e) / (1.0 + e)


def _sigmoid_grad(x):
    e = np.exp(-np.abs(x))  # s (1 - s) without the subtraction
    return e / ((1.0 + e) * (1.0 + e))


def _phi(x):
    return np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(SQRT_2_OVER_PI * (x + 0.044715 * (x * x * x))))


def _gelu_tanh_grad(x):
    # PyTorch's order of operations, so that its zeros and NaNs come out the same (1 + t
    # is 0 in the tail, x^2 overflows first for float32)
    t = np.tanh(SQRT_2_OVER_PI * (x + 0.044715 * (x * x * x)))
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * (
        SQRT_2_OVER_PI * (1.0 + 3 * 0.044715 * (x * x))
    )


def _swish_grad(x, beta):
    # s (1 + x (beta (1 - s))), 1 - s as sigmoid(-beta x): PyTorch's silu_backward for
    # beta = 1 (a sign of zero included), and no beta x alone, which may overflow
    return _sigmoid(beta * x) * (1.0 + x * (beta * _sigmoid(-beta * x)))


def _relu_ref(x, a):
    lo, hi, slope = a["relu_lower_clip"], a["relu_upper_clip"], a["relu_lower_clip_slope"]
    below = np.full_like(x, lo) if slope == 0 else lo + slope * (x - lo)
    return np.where(x < lo, below, np.where(x > hi, hi, x))


def _relu_bwd_ref(dy, x, a):
    lo, hi, slope = a["relu_lower_clip"], a["relu_upper_clip"], a["relu_lower_clip_slope"]
    inside = dy if math.isinf(hi) and hi > 0 else np.where(x >= hi, 0.0, dy)
    if slope == 0:
        return np.where(x <= lo, 0.0, inside)
    return np.where(x > lo, inside, slope * dy)


def _pow_ref(a, b):
    with np.errstate(all="ignore"):
        return np.power(a, b)


def _fmod_ref(a, b):
    with np.errstate(all="ignore"):
        return np.fmod(a, b)


def _softplus_ref(x, beta):
    # max(z, 0) / beta is x itself where z > 0 (z = beta x may overflow where x does not)
    z = beta * x
    return np.where(z > 0, x, 0.0) + np.log1p(np.exp(-np.abs(z))) / beta


# ---- Triton expression helpers: strings over operand expressions --------------------
# _pw_* are runtime/kernel_math's helpers (written out there: triton.language's own
# sigmoid is a compiled-only @jit helper, and Triton has no expm1 / log1p)
def _t_sigmoid(x):
    return f"_pw_sigmoid({x})"


def _t_tanh(x):
    return f"_pw_tanh({x})"


def _t_neg(x):
    # a product, not Triton's unary minus (0 - x), which turns -(+0) into +0
    return f"(({x}) * -1.0)"


def _t_pow(a, b):
    # |a|^b, negated for a negative (or -0) base with an odd integral b; NaN for a finite
    # a < 0 with a non-integral b. C's pow: x ** 0 and 1 ** y are 1 for every x, y (NaN
    # and inf included), (-1) ** +-inf is 1, and (-inf) ** b, (-0) ** b follow the sign
    # rule with no NaN.
    mag = f"tl.exp2(({b}) * tl.log2(tl.abs({a})))"
    odd = f"(tl.floor(({b}) * 0.5) * 2.0 != tl.floor({b}))"
    integral = f"(tl.floor({b}) == ({b}))"
    negative = f"((({a}) < 0) | ((1.0 / ({a})) < 0))"
    invalid = f"((({a}) < 0) & (({a}) > float('-inf')) & ~{integral})"
    one = f"((({b}) == 0) | (({a}) == 1) | ((({a}) == -1) & (tl.abs({b}) == float('inf'))))"
    return (
        f"tl.where({one}, 1.0, tl.where({invalid}, float('nan'), "
        f"tl.where({negative} & {integral} & {odd}, {_t_neg(mag)}, {mag})))"
    )


@dataclasses.dataclass(frozen=True)
class ModeSpec:
    """arity: number of tensor inputs; ref: float64 NumPy function (inputs..., attrs);
    triton: expression builder (input expressions..., attrs) -> str; frontend: the
    cudnn-frontend method name; boolean: the result is a truth value."""

    arity: int
    ref: Callable
    triton: Callable
    frontend: str
    boolean: bool = False


def _f(v) -> str:
    """A Python float literal Triton accepts (inf and nan spelled out)."""
    v = float(v)
    if math.isinf(v):
        return "float('inf')" if v > 0 else "float('-inf')"
    if math.isnan(v):
        return "float('nan')"
    return repr(v)


MODES: dict[M, ModeSpec] = {
    M.ADD: ModeSpec(2, lambda a, b, _: a + b, lambda a, b, _: f"({a} + {b})", "add"),
    M.SUB: ModeSpec(2, lambda a, b, _: a - b, lambda a, b, _: f"({a} - {b})", "sub"),
    M.MUL: ModeSpec(2, lambda a, b, _: a * b, lambda a, b, _: f"({a} * {b})", "mul"),
    M.DIV: ModeSpec(2, lambda a, b, _: _safe_div(a, b), lambda a, b, _: f"({a} / {b})", "div"),
    M.ADD_SQUARE: ModeSpec(
        2, lambda a, b, _: a + b * b, lambda a, b, _: f"({a} + {b} * {b})", "add_square"
    ),
    M.MAX: ModeSpec(
        2,
        lambda a, b, _: np.maximum(a, b),
        lambda a, b, _: (f"tl.maximum({a}, {b}, propagate_nan=tl.PropagateNan.ALL)"),
        "max",
    ),
    M.MIN: ModeSpec(
        2,
        lambda a, b, _: np.minimum(a, b),
        lambda a, b, _: (f"tl.minimum({a}, {b}, propagate_nan=tl.PropagateNan.ALL)"),
        "min",
    ),
    M.MOD: ModeSpec(
        2, lambda a, b, _: _fmod_ref(a, b), lambda a, b, _: f"_pw_fmod({a}, {b})", "mod"
    ),
    M.POW: ModeSpec(2, lambda a, b, _: _pow_ref(a, b), lambda a, b, _: _t_pow(a, b), "pow"),
    M.ABS: ModeSpec(1, lambda a, _: np.abs(a), lambda a, _: f"tl.abs({a})", "abs"),
    M.CEIL: ModeSpec(1, lambda a, _: np.ceil(a), lambda a, _: f"tl.ceil({a})", "ceil"),
    M.FLOOR: ModeSpec(1, lambda a, _: np.floor(a), lambda a, _: f"tl.floor({a})", "floor"),
    M.COS: ModeSpec(1, lambda a, _: np.cos(a), lambda a, _: f"tl.cos({a})", "cos"),
    M.SIN: ModeSpec(1, lambda a, _: np.sin(a), lambda a, _: f"tl.sin({a})", "sin"),
    M.TAN: ModeSpec(1, lambda a, _: np.tan(a), lambda a, _: f"(tl.sin({a}) / tl.cos({a}))", "tan"),
    M.EXP: ModeSpec(1, lambda a, _: _errfree(np.exp, a), lambda a, _: f"tl.exp({a})", "exp"),
    M.LOG: ModeSpec(1, lambda a, _: _errfree(np.log, a), lambda a, _: f"tl.log({a})", "log"),
    M.NEG: ModeSpec(1, lambda a, _: -a, lambda a, _: _t_neg(a), "neg"),
    M.SQRT: ModeSpec(1, lambda a, _: _errfree(np.sqrt, a), lambda a, _: f"tl.sqrt({a})", "sqrt"),
    M.RSQRT: ModeSpec(
        1,
        lambda a, _: _errfree(lambda v: 1 / np.sqrt(v), a),
        lambda a, _: f"tl.rsqrt({a})",
        "rsqrt",
    ),
    M.RECIPROCAL: ModeSpec(
        1, lambda a, _: _errfree(lambda v: 1 / v, a), lambda a, _: f"(1.0 / {a})", "reciprocal"
    ),
    M.ERF: ModeSpec(1, lambda a, _: _erf(a), lambda a, _: f"tl.erf({a})", "erf"),
    M.IDENTITY: ModeSpec(1, lambda a, _: a, lambda a, _: f"({a})", "identity"),
    M.RELU_FWD: ModeSpec(1, lambda a, at: _relu_ref(a, at), lambda a, at: _t_relu(a, at), "relu"),
    M.TANH_FWD: ModeSpec(1, lambda a, _: np.tanh(a), lambda a, _: _t_tanh(a), "tanh"),
    M.SIGMOID_FWD: ModeSpec(1, lambda a, _: _sigmoid(a), lambda a, _: _t_sigmoid(a), "sigmoid"),
    M.ELU_FWD: ModeSpec(
        1,
        lambda a, at: np.where(a > 0, a, at["elu_alpha"] * np.expm1(np.where(a > 0, 0.0, a))),
        lambda a, at: (
            f"tl.where({a} > 0, {a}, {_f(at['elu_alpha'])} * "
            f"_pw_expm1(tl.where({a} > 0, 0.0, {a})))"
        ),
        "elu",
    ),
    M.GELU_FWD: ModeSpec(
        1,
        lambda a, _: 0.5 * a * (1.0 + _erf(a / math.sqrt(2))),
        lambda a, _: f"(0.5 * {a} * (1.0 + tl.erf({a} * {_f(1 / math.sqrt(2))})))",
        "gelu",
    ),
    M.GELU_APPROX_TANH_FWD: ModeSpec(
        1,
        lambda a, _: _gelu_tanh(a),
        lambda a, _: f"(0.5 * {a} * (1.0 + {_t_tanh(_t_gelu_tanh_inner(a))}))",
        "gelu_approx_tanh",
    ),
    M.SOFTPLUS_FWD: ModeSpec(
        1,
        lambda a, at: _softplus_ref(a, at["softplus_beta"]),
        lambda a, at: (
            f"(tl.where({_f(at['softplus_beta'])} * {a} > 0, {a}, 0.0) + "
            f"_pw_log1p(tl.exp(-tl.abs({_f(at['softplus_beta'])} * {a}))) / "
            f"{_f(at['softplus_beta'])})"
        ),
        "softplus",
    ),
    M.SWISH_FWD: ModeSpec(
        1,
        lambda a, at: a * _sigmoid(at["swish_beta"] * a),
        lambda a, at: f"({a} * {_t_sigmoid(_f(at['swish_beta']) + ' * ' + a)})",
        "swish",
    ),
    M.RELU_BWD: ModeSpec(
        2,
        lambda dy, x, at: _relu_bwd_ref(dy, x, at),
        lambda dy, x, at: _t_relu_bwd(dy, x, at),
        "relu_backward",
    ),
    # PyTorch's forms from the output, 1 - t^2 and s (1 - s): 0 where t or s rounds to 1,
    # so an infinite dy gives NaN there, as in PyTorch (not +-inf times a tiny slope)
    M.TANH_BWD: ModeSpec(
        2,
        lambda dy, x, _: dy * (1.0 - np.tanh(x) * np.tanh(x)),
        lambda dy, x, _: f"({dy} * (1.0 - {_t_tanh(x)} * {_t_tanh(x)}))",
        "tanh_backward",
    ),
    M.SIGMOID_BWD: ModeSpec(
        2,
        lambda dy, x, _: dy * ((1.0 - _sigmoid(x)) * _sigmoid(x)),
        lambda dy, x, _: (f"({dy} * ((1.0 - {_t_sigmoid(x)}) * {_t_sigmoid(x)}))"),
        "sigmoid_backward",
    ),
    # x <= 0 selects the exponential side: a NaN x gives dy, as PyTorch's elu_backward
    M.ELU_BWD: ModeSpec(
        2,
        lambda dy, x, at: np.where(
            x <= 0, dy * at["elu_alpha"] * np.exp(np.where(x <= 0, x, 0.0)), dy
        ),
        lambda dy, x, at: (
            f"tl.where({x} <= 0, {dy} * {_f(at['elu_alpha'])} * "
            f"tl.exp(tl.where({x} <= 0, {x}, 0.0)), {dy})"
        ),
        "elu_backward",
    ),
    M.GELU_BWD: ModeSpec(
        2,
        lambda dy, x, _: dy * (0.5 * (1 + _erf(x / math.sqrt(2))) + x * _phi(x)),
        lambda dy, x, _: (
            f"({dy} * (0.5 * (1.0 + tl.erf({x} * {_f(1 / math.sqrt(2))})) + {x} * "
            f"tl.exp(-0.5 * {x} * {x}) * {_f(1 / math.sqrt(2 * math.pi))}))"
        ),
        "gelu_backward",
    ),
    M.GELU_APPROX_TANH_BWD: ModeSpec(
        2,
        lambda dy, x, _: dy * _gelu_tanh_grad(x),
        lambda dy, x, _: _t_gelu_tanh_bwd(dy, x),
        "gelu_approx_tanh_backward",
    ),
    M.SOFTPLUS_BWD: ModeSpec(
        2,
        lambda dy, x, at: dy * _sigmoid(at["softplus_beta"] * x),
        lambda dy, x, at: f"({dy} * {_t_sigmoid(_f(at['softplus_beta']) + ' * ' + x)})",
        "softplus_backward",
    ),
    # swish' = s + (x s) (beta (1 - s)): never beta x alone, which may overflow where the
    # product is 0 (x = -3e38); 1 - s as sigmoid(-beta x), without the subtraction
    M.SWISH_BWD: ModeSpec(
        2,
        lambda dy, x, at: dy * _swish_grad(x, at["swish_beta"]),
        lambda dy, x, at: f"({dy} * {_t_swish_grad(x, at['swish_beta'])})",
        "swish_backward",
    ),
    M.CMP_EQ: ModeSpec(
        2, lambda a, b, _: (a == b) * 1.0, lambda a, b, _: f"({a} == {b})", "cmp_eq", True
    ),
    M.CMP_NEQ: ModeSpec(
        2, lambda a, b, _: (a != b) * 1.0, lambda a, b, _: f"({a} != {b})", "cmp_neq", True
    ),
    M.CMP_GT: ModeSpec(
        2, lambda a, b, _: (a > b) * 1.0, lambda a, b, _: f"({a} > {b})", "cmp_gt", True
    ),
    M.CMP_GE: ModeSpec(
        2, lambda a, b, _: (a >= b) * 1.0, lambda a, b, _: f"({a} >= {b})", "cmp_ge", True
    ),
    M.CMP_LT: ModeSpec(
        2, lambda a, b, _: (a < b) * 1.0, lambda a, b, _: f"({a} < {b})", "cmp_lt", True
    ),
    M.CMP_LE: ModeSpec(
        2, lambda a, b, _: (a <= b) * 1.0, lambda a, b, _: f"({a} <= {b})", "cmp_le", True
    ),
    M.LOGICAL_AND: ModeSpec(
        2,
        lambda a, b, _: ((a != 0) & (b != 0)) * 1.0,
        lambda a, b, _: f"(({a} != 0) & ({b} != 0))",
        "logical_and",
        True,
    ),
    M.LOGICAL_OR: ModeSpec(
        2,
        lambda a, b, _: ((a != 0) | (b != 0)) * 1.0,
        lambda a, b, _: f"(({a} != 0) | ({b} != 0))",
        "logical_or",
        True,
    ),
    M.LOGICAL_NOT: ModeSpec(
        1, lambda a, _: (a == 0) * 1.0, lambda a, _: f"({a} == 0)", "logical_not", True
    ),
    M.BINARY_SELECT: ModeSpec(
        3,
        lambda a, b, m, _: np.where(m != 0, a, b),
        lambda a, b, m, _: f"tl.where({m} != 0, {a}, {b})",
        "binary_select",
    ),
    # GEN_INDEX's value is the index along ``axis``: the code generator supplies it.
    M.GEN_INDEX: ModeSpec(1, None, None, "gen_index"),
}


def _t_gelu_tanh_inner(x):
    return f"({_f(SQRT_2_OVER_PI)} * ({x} + 0.044715 * ({x} * {x} * {x})))"


def _t_gelu_tanh_bwd(dy, x):
    # as _gelu_tanh_grad, in PyTorch's order of operations
    t = _t_tanh(_t_gelu_tanh_inner(x))
    return (
        f"({dy} * (0.5 * (1.0 + {t}) + 0.5 * {x} * (1.0 - {t} * {t}) * "
        f"({_f(SQRT_2_OVER_PI)} * (1.0 + {_f(3 * 0.044715)} * ({x} * {x})))))"
    )


def _t_swish_grad(x, beta):
    s = _t_sigmoid(f"{_f(beta)} * {x}")
    return f"({s} * (1.0 + {x} * ({_f(beta)} * {_t_sigmoid(f'{_f(-beta)} * {x}')})))"


def _t_relu(x, at):
    # x below the lower clip gives lo + slope (x - lo), or lo itself when slope is 0
    # (never 0 * -inf = NaN); NaN and x == lo (+-0 for relu) pass through as x, as in
    # PyTorch's clamp; no tl.minimum / tl.maximum, which drop NaN when compiled
    lo, hi, slope = at["relu_lower_clip"], at["relu_upper_clip"], at["relu_lower_clip_slope"]
    below = _f(lo) if slope == 0 else f"({_f(lo)} + {_f(slope)} * ({x} - {_f(lo)}))"
    inner = x if math.isinf(hi) and hi > 0 else f"tl.where({x} > {_f(hi)}, {_f(hi)}, {x})"
    return f"tl.where({x} < {_f(lo)}, {below}, {inner})"


def _t_relu_bwd(dy, x, at):
    # PyTorch's rules: slope 0 (relu, relu6, hardtanh) gives 0 where x <= lo or x >= hi
    # (an infinite upper clip never cuts: relu'(+inf) = 1) and dy elsewhere, NaN included;
    # a slope (leaky relu) gives dy where x > lo and slope * dy elsewhere, NaN included
    lo, hi, slope = at["relu_lower_clip"], at["relu_upper_clip"], at["relu_lower_clip_slope"]
    inside = dy if math.isinf(hi) and hi > 0 else f"tl.where({x} >= {_f(hi)}, 0.0, {dy})"
    if slope == 0:
        return f"tl.where({x} <= {_f(lo)}, 0.0, {inside})"
    return f"tl.where({x} > {_f(lo)}, {inside}, {_f(slope)} * {dy})"


def _safe_div(a, b):
    with np.errstate(all="ignore"):
        return a / b


def _errfree(fn, a):
    with np.errstate(all="ignore"):
        return fn(a)


DEFAULT_ATTRS = {
    "relu_lower_clip": 0.0,
    "relu_upper_clip": math.inf,
    "relu_lower_clip_slope": 0.0,
    "elu_alpha": 1.0,
    "softplus_beta": 1.0,
    "swish_beta": 1.0,
    "axis": None,
}

BACKWARD_MODES = {m for m in MODES if m.name.endswith("_BWD")}


def reference(mode: M, inputs: list[np.ndarray], attrs: dict, out_dims) -> np.ndarray:
    """float64 reference of one pointwise node; inputs already broadcastable to out_dims."""
    full = {**DEFAULT_ATTRS, **attrs}
    if mode == M.GEN_INDEX:
        axis = full["axis"]
        shape = [1] * len(out_dims)
        shape[axis] = out_dims[axis]
        return np.broadcast_to(np.arange(out_dims[axis], dtype=np.float64).reshape(shape), out_dims)
    spec = MODES[mode]
    with np.errstate(all="ignore"):  # inf * 0 and the like: NaN is the answer
        out = spec.ref(*inputs, full)
    return np.broadcast_to(np.asarray(out, dtype=np.float64), tuple(out_dims))
