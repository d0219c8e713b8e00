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

The Triton expressions use only builtins that the interpreter also runs -- no libdevice and
none of triton.language's own @jit helpers (tl.sigmoid, tl.sum, ...), which exist only
compiled -- so one generated source runs both ways: sigmoid and tanh are written through
exp, pow through exp2/log2 with the sign rule for integral exponents, mod is C's fmod.
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
    return torch.erf(torch.from_numpy(np.asarray(x, dtype=np.float64))).numpy()


def _sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))   # stable for large |x|


def _phi(x):
    return np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


def _gelu_tanh_grad(x):
    inner = SQRT_2_OVER_PI * (x + 0.044715 * x ** 3)
    t = np.tanh(inner)
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * SQRT_2_OVER_PI * (1 + 3 * 0.044715 * x * x)


def _relu_ref(x, a):
    lo, hi, slope = a["relu_lower_clip"], a["relu_upper_clip"], a["relu_lower_clip_slope"]
    return np.where(x > lo, np.minimum(x, hi), lo + slope * (x - lo))


def _relu_bwd_ref(dy, x, a):
    lo, hi, slope = a["relu_lower_clip"], a["relu_upper_clip"], a["relu_lower_clip_slope"]
    return np.where(x > lo, np.where(x < hi, dy, 0.0), slope * dy)


def _pow_ref(a, b):
    with np.errstate(all="ignore"):
        return np.power(a, b)


def _fmod_ref(a, b):
    with np.errstate(all="ignore"):
        return np.fmod(a, b)


def _softplus_ref(x, beta):
    z = beta * x
    return (np.maximum(z, 0) + np.log1p(np.exp(-np.abs(z)))) / beta


# ---- Triton expression helpers: strings over operand expressions --------------------
def _t_sigmoid(x):
    # written out: triton.language's own sigmoid is a compiled-only @jit helper
    return f"(1.0 / (1.0 + tl.exp(-({x}))))"


def _t_tanh(x):
    # tanh(x) = sign(x) (1 - e) / (1 + e), e = exp(-2|x|): no overflow for any x
    return (f"tl.where({x} >= 0, 1.0, -1.0) * (1.0 - tl.exp(-2.0 * tl.abs({x}))) / "
            f"(1.0 + tl.exp(-2.0 * tl.abs({x})))")


def _t_pow(a, b):
    # |a|^b, negated for a < 0 with an odd integral b; NaN for a < 0, non-integral b.
    mag = f"tl.exp2(({b}) * tl.log2(tl.abs({a})))"
    odd = f"(tl.floor(({b}) * 0.5) * 2.0 != tl.floor({b}))"
    integral = f"(tl.floor({b}) == ({b}))"
    # C's pow: x ** 0 and 1 ** y are 1 for every x, y (NaN and inf included)
    return (f"tl.where((({b}) == 0) | (({a}) == 1), 1.0, tl.where(({a}) >= 0, {mag}, "
            f"tl.where({integral}, tl.where({odd}, -{mag}, {mag}), float('nan'))))")


def _t_fmod(a, b):
    # in float64, where a - trunc(a / b) * b is exact for float32 operands (in float32 a
    # quotient rounded onto an integer gives a result off by |b|); fmod(x, +-inf) = x
    a64, b64 = f"(({a}).to(tl.float64))", f"(({b}).to(tl.float64))"
    q = f"({a64} / {b64})"
    r = f"({a64} - tl.where({q} >= 0, tl.floor({q}), tl.ceil({q})) * {b64})"
    fin = f"(tl.abs({a}) < float('inf'))"
    return f"tl.where((tl.abs({b}) == float('inf')) & {fin}, ({a}), {r}).to(({a}).dtype)"


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
    M.ADD_SQUARE: ModeSpec(2, lambda a, b, _: a + b * b, lambda a, b, _: f"({a} + {b} * {b})",
                           "add_square"),
    M.MAX: ModeSpec(2, lambda a, b, _: np.maximum(a, b), lambda a, b, _: f"tl.maximum({a}, {b})",
                    "max"),
    M.MIN: ModeSpec(2, lambda a, b, _: np.minimum(a, b), lambda a, b, _: f"tl.minimum({a}, {b})",
                    "min"),
    M.MOD: ModeSpec(2, lambda a, b, _: _fmod_ref(a, b), lambda a, b, _: _t_fmod(a, b), "mod"),
    M.POW: ModeSpec(2, lambda a, b, _: _pow_ref(a, b), lambda a, b, _: _t_pow(a, b), "pow"),
    M.ABS: ModeSpec(1, lambda a, _: np.abs(a), lambda a, _: f"tl.abs({a})", "abs"),
    M.CEIL: ModeSpec(1, lambda a, _: np.ceil(a), lambda a, _: f"tl.ceil({a})", "ceil"),
    M.FLOOR: ModeSpec(1, lambda a, _: np.floor(a), lambda a, _: f"tl.floor({a})", "floor"),
    M.COS: ModeSpec(1, lambda a, _: np.cos(a), lambda a, _: f"tl.cos({a})", "cos"),
    M.SIN: ModeSpec(1, lambda a, _: np.sin(a), lambda a, _: f"tl.sin({a})", "sin"),
    M.TAN: ModeSpec(1, lambda a, _: np.tan(a), lambda a, _: f"(tl.sin({a}) / tl.cos({a}))", "tan"),
    M.EXP: ModeSpec(1, lambda a, _: _errfree(np.exp, a), lambda a, _: f"tl.exp({a})", "exp"),
    M.LOG: ModeSpec(1, lambda a, _: _errfree(np.log, a), lambda a, _: f"tl.log({a})", "log"),
    M.NEG: ModeSpec(1, lambda a, _: -a, lambda a, _: f"(-{a})", "neg"),
    M.SQRT: ModeSpec(1, lambda a, _: _errfree(np.sqrt, a), lambda a, _: f"tl.sqrt({a})", "sqrt"),
    M.RSQRT: ModeSpec(1, lambda a, _: _errfree(lambda v: 1 / np.sqrt(v), a),
                      lambda a, _: f"tl.rsqrt({a})", "rsqrt"),
    M.RECIPROCAL: ModeSpec(1, lambda a, _: _errfree(lambda v: 1 / v, a),
                           lambda a, _: f"(1.0 / {a})", "reciprocal"),
    M.ERF: ModeSpec(1, lambda a, _: _erf(a), lambda a, _: f"tl.erf({a})", "erf"),
    M.IDENTITY: ModeSpec(1, lambda a, _: a, lambda a, _: f"({a})", "identity"),
    M.RELU_FWD: ModeSpec(1, lambda a, at: _relu_ref(a, at), lambda a, at: (
        f"tl.where({a} > {_f(at['relu_lower_clip'])}, tl.minimum({a}, {_f(at['relu_upper_clip'])}),"
        f" {_f(at['relu_lower_clip'])} + {_f(at['relu_lower_clip_slope'])} * "
        f"({a} - {_f(at['relu_lower_clip'])}))"), "relu"),
    M.TANH_FWD: ModeSpec(1, lambda a, _: np.tanh(a), lambda a, _: _t_tanh(a), "tanh"),
    M.SIGMOID_FWD: ModeSpec(1, lambda a, _: _sigmoid(a), lambda a, _: _t_sigmoid(a), "sigmoid"),
    M.ELU_FWD: ModeSpec(1, lambda a, at: np.where(a > 0, a, at["elu_alpha"] * np.expm1(np.minimum(a, 0))),
                        lambda a, at: f"tl.where({a} > 0, {a}, {_f(at['elu_alpha'])} * "
                                      f"(tl.exp(tl.minimum({a}, 0.0)) - 1.0))", "elu"),
    M.GELU_FWD: ModeSpec(1, lambda a, _: 0.5 * a * (1 + _erf(a / math.sqrt(2))),
                         lambda a, _: f"(0.5 * {a} * (1.0 + tl.erf({a} * {_f(1 / math.sqrt(2))})))",
                         "gelu"),
    M.GELU_APPROX_TANH_FWD: ModeSpec(
        1, lambda a, _: 0.5 * a * (1 + np.tanh(SQRT_2_OVER_PI * (a + 0.044715 * a ** 3))),
        lambda a, _: f"(0.5 * {a} * (1.0 + {_t_tanh(f'({_f(SQRT_2_OVER_PI)} * ({a} + 0.044715 * {a} * {a} * {a}))')}))",
        "gelu_approx_tanh"),
    M.SOFTPLUS_FWD: ModeSpec(
        1, lambda a, at: _softplus_ref(a, at["softplus_beta"]),
        lambda a, at: (f"((tl.maximum({_f(at['softplus_beta'])} * {a}, 0.0) + "
                       f"tl.log(1.0 + tl.exp(-tl.abs({_f(at['softplus_beta'])} * {a})))) / "
                       f"{_f(at['softplus_beta'])})"), "softplus"),
    M.SWISH_FWD: ModeSpec(1, lambda a, at: a * _sigmoid(at["swish_beta"] * a),
                          lambda a, at: f"({a} * {_t_sigmoid(_f(at['swish_beta']) + ' * ' + a)})", "swish"),
    M.RELU_BWD: ModeSpec(2, lambda dy, x, at: _relu_bwd_ref(dy, x, at), lambda dy, x, at: (
        f"tl.where({x} > {_f(at['relu_lower_clip'])}, tl.where({x} < {_f(at['relu_upper_clip'])}, "
        f"{dy}, 0.0), {_f(at['relu_lower_clip_slope'])} * {dy})"), "relu_backward"),
    M.TANH_BWD: ModeSpec(2, lambda dy, x, _: dy * (1 - np.tanh(x) ** 2),
                         lambda dy, x, _: f"({dy} * (1.0 - {_t_tanh(x)} * {_t_tanh(x)}))",
                         "tanh_backward"),
    M.SIGMOID_BWD: ModeSpec(2, lambda dy, x, _: dy * _sigmoid(x) * (1 - _sigmoid(x)),
                            lambda dy, x, _: f"({dy} * {_t_sigmoid(x)} * (1.0 - {_t_sigmoid(x)}))",
                            "sigmoid_backward"),
    M.ELU_BWD: ModeSpec(2, lambda dy, x, at: np.where(x > 0, dy, dy * at["elu_alpha"] * np.exp(np.minimum(x, 0))),
                        lambda dy, x, at: f"tl.where({x} > 0, {dy}, {dy} * {_f(at['elu_alpha'])} * "
                                          f"tl.exp(tl.minimum({x}, 0.0)))", "elu_backward"),
    M.GELU_BWD: ModeSpec(
        2, lambda dy, x, _: dy * (0.5 * (1 + _erf(x / math.sqrt(2))) + x * _phi(x)),
        lambda dy, x, _: (f"({dy} * (0.5 * (1.0 + tl.erf({x} * {_f(1 / math.sqrt(2))})) + {x} * "
                          f"tl.exp(-0.5 * {x} * {x}) * {_f(1 / math.sqrt(2 * math.pi))}))"),
        "gelu_backward"),
    M.GELU_APPROX_TANH_BWD: ModeSpec(
        2, lambda dy, x, _: dy * _gelu_tanh_grad(x),
        lambda dy, x, _: _t_gelu_tanh_bwd(dy, x), "gelu_approx_tanh_backward"),
    M.SOFTPLUS_BWD: ModeSpec(2, lambda dy, x, at: dy * _sigmoid(at["softplus_beta"] * x),
                             lambda dy, x, at: f"({dy} * {_t_sigmoid(_f(at['softplus_beta']) + ' * ' + x)})",
                             "softplus_backward"),
    M.SWISH_BWD: ModeSpec(
        2, lambda dy, x, at: dy * (_sigmoid(at["swish_beta"] * x) * (1 + at["swish_beta"] * x * (1 - _sigmoid(at["swish_beta"] * x)))),
        lambda dy, x, at: (f"({dy} * {_t_sigmoid(_f(at['swish_beta']) + ' * ' + x)} * (1.0 + {_f(at['swish_beta'])} * {x} * "
                           f"(1.0 - {_t_sigmoid(_f(at['swish_beta']) + ' * ' + x)})))"), "swish_backward"),
    M.CMP_EQ: ModeSpec(2, lambda a, b, _: (a == b) * 1.0, lambda a, b, _: f"({a} == {b})", "cmp_eq", True),
    M.CMP_NEQ: ModeSpec(2, lambda a, b, _: (a != b) * 1.0, lambda a, b, _: f"({a} != {b})", "cmp_neq", True),
    M.CMP_GT: ModeSpec(2, lambda a, b, _: (a > b) * 1.0, lambda a, b, _: f"({a} > {b})", "cmp_gt", True),
    M.CMP_GE: ModeSpec(2, lambda a, b, _: (a >= b) * 1.0, lambda a, b, _: f"({a} >= {b})", "cmp_ge", True),
    M.CMP_LT: ModeSpec(2, lambda a, b, _: (a < b) * 1.0, lambda a, b, _: f"({a} < {b})", "cmp_lt", True),
    M.CMP_LE: ModeSpec(2, lambda a, b, _: (a <= b) * 1.0, lambda a, b, _: f"({a} <= {b})", "cmp_le", True),
    M.LOGICAL_AND: ModeSpec(2, lambda a, b, _: ((a != 0) & (b != 0)) * 1.0,
                            lambda a, b, _: f"(({a} != 0) & ({b} != 0))", "logical_and", True),
    M.LOGICAL_OR: ModeSpec(2, lambda a, b, _: ((a != 0) | (b != 0)) * 1.0,
                           lambda a, b, _: f"(({a} != 0) | ({b} != 0))", "logical_or", True),
    M.LOGICAL_NOT: ModeSpec(1, lambda a, _: (a == 0) * 1.0, lambda a, _: f"({a} == 0)",
                            "logical_not", True),
    M.BINARY_SELECT: ModeSpec(3, lambda a, b, m, _: np.where(m != 0, a, b),
                              lambda a, b, m, _: f"tl.where({m} != 0, {a}, {b})", "binary_select"),
    # GEN_INDEX's value is the index along ``axis``: the code generator supplies it.
    M.GEN_INDEX: ModeSpec(1, None, None, "gen_index"),
}


def _t_gelu_tanh_bwd(dy, x):
    inner = f"({_f(SQRT_2_OVER_PI)} * ({x} + 0.044715 * {x} * {x} * {x}))"
    t = _t_tanh(inner)
    return (f"({dy} * (0.5 * (1.0 + {t}) + 0.5 * {x} * (1.0 - {t} * {t}) * {_f(SQRT_2_OVER_PI)} * "
            f"(1.0 + {_f(3 * 0.044715)} * {x} * {x})))")


def _safe_div(a, b):
    with np.errstate(all="ignore"):
        return a / b


def _errfree(fn, a):
    with np.errstate(all="ignore"):
        return fn(a)


DEFAULT_ATTRS = {"relu_lower_clip": 0.0, "relu_upper_clip": math.inf, "relu_lower_clip_slope": 0.0,
                 "elu_alpha": 1.0, "softplus_beta": 1.0, "swish_beta": 1.0, "axis": None}

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
    out = spec.ref(*inputs, full)
    return np.broadcast_to(np.asarray(out, dtype=np.float64), tuple(out_dims))
