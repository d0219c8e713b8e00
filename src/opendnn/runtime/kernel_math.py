"""Math helpers that generated Triton kernels call: the functions Triton lacks (expm1,
log1p) and the activation pieces built on them, written so that special values come out
as PyTorch's do.

``kernel_from_source`` (``launch``) puts in front of a generated source the helpers it
names (``helpers_for``), so a kernel that calls none of them keeps its source and its
cache key. The helpers use only builtins the interpreter also runs (no libdevice, none
of triton.language's compiled-only @jit helpers), like every generated kernel, and take
their precision from the argument: float64 gets longer polynomials than float32.

Accuracy (float32 and float64, checked against PyTorch by tests/reliability):

- ``_pw_expm1(x)``: |x| < ln(2) / 2 takes Taylor terms through x^13 (float64) or x^7
  (float32), the remainder under a quarter of an ulp; elsewhere ``exp(x) - 1``, whose
  result is then at least 0.29 in size (under 3 ulp lost). +-0 and subnormals give x.
- ``_pw_log1p(x)``: 1 + x in [sqrt(2) / 2, sqrt(2)] takes log1p(x) = 2 atanh(s),
  s = x / (2 + x), |s| <= 0.172, by its odd series; elsewhere ``log(1 + x)``.
- ``_pw_tanh(x)`` = sign(x) (-m / (2 + m)), m = expm1(-2|x|): no overflow, no
  cancellation near 0; |x| < 2^-28 gives x (tanh(x) rounds to x there in both types),
  which keeps -0.
- ``_pw_sigmoid(x)`` = 1 / (1 + e) for x >= 0, e / (1 + e) below, e = exp(-|x|): the
  negative tail keeps its tiny values (sigmoid(-100) = 3.7e-44, not 0).
- ``_pw_sigmoid_grad(x)`` = s (1 - s) = e / (1 + e)^2, never 1 - s by subtraction.
- ``_pw_fmod(a, b)``: C's fmod, exact, its sign that of a (+-0 included). In float64,
  steps x -= n y_k with y_k = |b| 2^k, n = floor(x / y_k) < 2^52 (k from the exponents of
  x and |b|, whose quotient may overflow): the remainder x - n y_k is representable,
  so one fma gives it exactly (compiled); the interpreter, whose NumPy has no fma, forms
  n y_k as p + err (Dekker's product of 26-bit halves; compiled, FMA contraction of
  x - p would break it) with x - p exact (Sterbenz: p is within a factor 2 of x); n is
  never too small and at most one too large, which the next line corrects. Each step takes 51 bits off the exponent gap of x and |b|: 6 steps cover
  float32 operands (gap at most 277), 43 float64 ones (2097).
"""

from __future__ import annotations

import re

# name -> (source, helpers it calls)
_HELPERS: dict[str, tuple[str, tuple]] = {}


def _helper(name: str, source: str, needs: tuple = ()) -> None:
    _HELPERS[name] = (source.strip("\n") + "\n", needs)


_helper(
    "_pw_expm1",
    """
@triton.jit
def _pw_expm1(x):
    small = tl.abs(x) < 0.34657359027997264
    z = tl.where(small, x, 0.0)
    if x.dtype == tl.float64:
        p = 1.6059043836821613e-10
        p = p * z + 2.08767569878681e-09
        p = p * z + 2.505210838544172e-08
        p = p * z + 2.755731922398589e-07
        p = p * z + 2.7557319223985893e-06
        p = p * z + 2.48015873015873e-05
        p = p * z + 0.0001984126984126984
    else:
        p = 0.0001984126984126984
    p = p * z + 0.001388888888888889
    p = p * z + 0.008333333333333333
    p = p * z + 0.041666666666666664
    p = p * z + 0.16666666666666666
    p = p * z + 0.5
    p = p * z + 1.0
    return tl.where(small, z * p, tl.exp(x) - 1.0)
""",
)

_helper(
    "_pw_log1p",
    """
@triton.jit
def _pw_log1p(x):
    near = (x > -0.2928932188134524) & (x < 0.41421356237309515)
    z = tl.where(near, x, 0.0)
    s = z / (2.0 + z)
    s2 = s * s
    if x.dtype == tl.float64:
        p = 0.047619047619047616
        p = p * s2 + 0.05263157894736842
        p = p * s2 + 0.058823529411764705
        p = p * s2 + 0.06666666666666667
        p = p * s2 + 0.07692307692307693
        p = p * s2 + 0.09090909090909091
    else:
        p = 0.09090909090909091
    p = p * s2 + 0.1111111111111111
    p = p * s2 + 0.14285714285714285
    p = p * s2 + 0.2
    p = p * s2 + 0.3333333333333333
    p = p * s2 + 1.0
    # log(1 + x) for x = +inf is +inf; x < -1 gives NaN, x = -1 gives -inf
    return tl.where(near, 2.0 * s * p, tl.log(1.0 + tl.where(near, 1.0, x)))
""",
)

_helper(
    "_pw_tanh",
    """
@triton.jit
def _pw_tanh(x):
    m = _pw_expm1(-2.0 * tl.abs(x))
    t = -m / (2.0 + m)
    return tl.where(tl.abs(x) < 3.725290298461914e-09, x, tl.where(x < 0, -t, t))
""",
    ("_pw_expm1",),
)

_helper(
    "_pw_sigmoid",
    """
@triton.jit
def _pw_sigmoid(x):
    e = tl.exp(-tl.abs(x))
    return tl.where(x >= 0, 1.0, e) / (1.0 + e)
""",
)

_helper(
    "_pw_sigmoid_grad",
    """
@triton.jit
def _pw_sigmoid_grad(x):
    e = tl.exp(-tl.abs(x))
    return e / ((1.0 + e) * (1.0 + e))
""",
)

_helper(
    "_pw_pow2",
    """
@triton.jit
def _pw_pow2(k):
    # 2^k as float64 for an int64 k in [-1022, 1023], by its exponent bits
    return ((k + 1023) << 52).to(tl.float64, bitcast=True)
""",
)

_helper(
    "_pw_fmod",
    """
@triton.jit
def _pw_fmod(a, b):
    x = tl.abs(a).to(tl.float64)
    y = tl.abs(b).to(tl.float64)
    if a.dtype == tl.float64:
        steps = 43
    else:
        steps = 6
    # y's biased exponent (a subnormal y scaled up by 2^64 first); x / y may overflow
    tiny = y < 2.2250738585072014e-308
    ys = tl.where(tiny, y * 1.8446744073709552e+19, y)
    ey = ((ys.to(tl.int64, bitcast=True) >> 52) & 2047) - tl.where(tiny, 64, 0)
    for _ in range(steps):
        k = tl.maximum(((x.to(tl.int64, bitcast=True) >> 52) & 2047) - ey - 51, 0)
        k1 = k // 3
        k2 = (k - k1) // 2
        yk = y * _pw_pow2(k1) * _pw_pow2(k2) * _pw_pow2(k - k1 - k2)
        n = tl.floor(x / yk)
        if _COMPILED:   # one rounding of the exact x - n yk, which is representable
            x = tl.fma(-n, yk, x)
        else:           # NumPy has no fma: n yk = p + err exactly (Dekker's product)
            nh = tl.floor(n * 1.4901161193847656e-08) * 67108864.0
            nl = n - nh
            big = yk > 1e300
            t = tl.where(big, yk * 7.888609052210118e-31, yk)
            c = 134217729.0 * t
            yh = c - (c - t)
            yh = tl.where(big, yh * 1.2676506002282294e+30, yh)
            yl = yk - yh
            p = n * yk
            err = (((nh * yh - p) + nh * yl) + nl * yh) + nl * yl
            x = (x - p) - err
        x = tl.where(x < 0, x + yk, x)
    x = tl.where(x >= y, x - y, x)
    r = tl.where(a < 0, x * -1.0, x)
    r = tl.where(r == 0, a.to(tl.float64) * 0.0, r)
    # fmod(a, +-inf) = a for a finite (the steps above would make 0 * inf)
    return tl.where((y == float("inf")) & (tl.abs(a) < float("inf")), a, r.to(a.dtype))
""",
    ("_pw_pow2",),
)


def cast(value: str, tl_type: str) -> str:
    """``value`` converted to ``tl_type`` for a store. bfloat16 goes through the kernel
    header's ``_to_bf16`` (round to nearest even): Triton 3.6's interpreter truncates a
    float32 cast to bfloat16, and turns subnormal results into wrong normal ones."""
    if tl_type == "tl.bfloat16":
        return f"_to_bf16({value})"
    return f"({value}).to({tl_type})"


_NAME = re.compile(r"\b(_pw_[a-z0-9_]+)\(")


def helpers_for(source: str) -> str:
    """The definitions of the helpers ``source`` calls (and of those they call), in an
    order where each comes after what it uses; "" when it calls none."""
    order: list[str] = []

    def add(name):
        if name in order or name not in _HELPERS:
            return
        for dep in _HELPERS[name][1]:
            add(dep)
        order.append(name)

    for name in sorted(set(_NAME.findall(source))):
        add(name)
    return "".join(_HELPERS[n][0] + "\n\n" for n in order)
