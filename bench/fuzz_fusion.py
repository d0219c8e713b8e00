#!/usr/bin/env python
"""Randomized differential fuzzer for the runtime-fusion engine (engine 1).

Every case is a JSON-able *spec* drawn from its seed (``gen_case(seed)``): an iteration
space, leaves (graph inputs with a dtype, a broadcast shape, a memory layout and a value
distribution; pass-by-value scalars; Python numbers), 1-6 pointwise nodes, optionally
trailing reductions (or genstats) with an extra pointwise output, output dtypes and
(non-packed) output strides, graph-level io / intermediate / compute types, and either
forced knobs or the engine's own first choice.

For each case the graph is built once, a fusion plan and a reference (float64) plan are
created on it, both are run on the same inputs into poisoned outputs (NaN for floats, 0
and then 1 for integer / boolean outputs; the gaps of non-packed outputs hold a sentinel),
and the fusion results are judged against

  * the reference engine's result ``r`` (float64, rounded to the output type), and
  * an independent PyTorch float64 evaluation of the same DAG, run several times with
    every intermediate rounded to the type the fused kernel holds it in (compute type,
    HALF/BFLOAT16 intermediates) and perturbed by a few units of roundoff ("trials").

An element passes when |f - r| <= base * (1 + |r|) + 4 * max_t |trial_t - r|: the trials
measure how much the result moves under the kernel's own roundings, so ill-conditioned
elements (cancellation, a comparison of computed values near equality, exp overflow in
float32) get exactly the slack they need and well-conditioned ones none. Integer and
boolean outputs must equal ``r`` or one of the trials.

Findings (each printed with the seed, the category and a one-line reason):
  mismatch      a fused output element out of tolerance
  unwritten     a poisoned output element left unwritten (differs between two poisons)
  oob_write     a write into the gaps of a non-packed output
  untyped:*     a Python exception that is not opendnn's own typed error
  typed:*       an opendnn error after the engine accepted the graph (build / execute)
  ref_vs_torch  the reference engine disagrees with the PyTorch float64 evaluation
Notes (counted, not bugs): decline (the engine declined, with its reason), invalid (the
generator built a graph validate() rejects with a typed error).

Known bugs (found by this fuzzer; --avoid steers the generator around them so that new
ones show):
  scalar  pass-by-value scalars reach the kernel raw: Python int -> int32 (float-only
          ops fail), Python float (logical ops / .to() fail in the interpreter), bool
          (the interpreter cannot take it); gen_index over a size-1 axis emits "0.0"
  f64     a float64-computing kernel casts to bfloat16 directly (garbage on the CPU)
  pow     pow(x, 0) for x in {0, inf, nan} and pow(1, inf / nan) give NaN, not 1
  mod     fmod is a - trunc(a / b) * b in float32: off by |b| when a / b rounds onto
          an integer; fmod(x, inf) is NaN, not x
  (bf16)  float32 -> bfloat16 truncates on the CPU: accepted unless --strict-bf16
Reduction tiles are folded element by element by Triton's interpreter (tl.reduce with a
combine function), so forced knobs keep BLOCK_KEPT * BLOCK_RED <= 512 and the grid small.

Usage:  PYTHONPATH=src .venv/bin/python bench/fuzz_fusion.py --seeds 0-499
        ... --avoid f64,scalar,pow,mod   (look past the known bugs)
        ... --seeds 123 --show          (print the spec and the findings of one case)
        ... --seeds 123 --minimize      (greedy shrink of a failing case, prints the spec)
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import random
import signal
import sys
import time
import traceback
import warnings
from collections import Counter

import torch

import opendnn.frontend as cudnn
from opendnn.enums import DataType, HeurMode
from opendnn.errors import GraphNotSupportedError, OpenDNNError

FUSION_ID, REF_ID = 1, 0
# Known bug (reported): on the CPU the fused kernel converts float32 -> bfloat16 by
# truncation. True: accept truncated bfloat16 roundings (trials model them), so the fuzzer
# looks past that bug; --strict-bf16 turns it off.
BF16_RTZ_OK = True
AVOID: set = set()  # known bugs the generator steers around (--avoid)

DT = {
    "f32": torch.float32,
    "f16": torch.float16,
    "bf16": torch.bfloat16,
    "f64": torch.float64,
    "i8": torch.int8,
    "u8": torch.uint8,
    "bool": torch.bool,
    "i32": torch.int32,
}
GDT = {
    None: DataType.NOT_SET,
    "f32": DataType.FLOAT,
    "f16": DataType.HALF,
    "bf16": DataType.BFLOAT16,
    "f64": DataType.DOUBLE,
    "i8": DataType.INT8,
    "u8": DataType.UINT8,
    "bool": DataType.BOOLEAN,
    "i32": DataType.INT32,
}
FROM_GDT = {v: k for k, v in GDT.items() if k is not None}
BASE_TOL = {"f64": 1e-12, "f32": 1e-5, "f16": 1e-3, "bf16": 8e-3}
UNIT = {"f64": 2.0**-53, "f32": 2.0**-24, "f16": 2.0**-11, "bf16": 2.0**-8}
INT_RANGE = {"i8": (-128, 127), "u8": (0, 255), "i32": (-(2**31), 2**31 - 1)}


# ======================================================================================
# Operation table: name -> arity, operand domains, the frontend call, the float64 torch
# function, and its rounding class for the trials:
#   exact  the result is exact (abs, comparisons, select, ...): no perturbation
#   arith  correctly rounded (+ - * / sqrt ...): the result perturbed by a few ulps
#   transc an approximation (exp, tanh via exp, pow via exp2/log2 ...): operands and
#          result perturbed relatively, plus an absolute term of a few ulps
# ======================================================================================
def _sig(x):
    return torch.sigmoid(x)


def _phi(x):
    return torch.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


def _Phi(x):
    return 0.5 * (1 + torch.erf(x / math.sqrt(2)))


K_T = math.sqrt(2 / math.pi)


def _gelu_tanh(x):
    return 0.5 * x * (1 + torch.tanh(K_T * (x + 0.044715 * x**3)))


def _gelu_tanh_grad(x):
    t = torch.tanh(K_T * (x + 0.044715 * x**3))
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * K_T * (1 + 3 * 0.044715 * x * x)


def _softplus(x, beta):
    z = beta * x
    return (torch.clamp(z, min=0) + torch.log1p(torch.exp(-z.abs()))) / beta


def _relu(x, a):
    lo = a.get("lower_clip") or 0.0
    hi = a.get("upper_clip")
    hi = math.inf if hi is None else hi
    slope = a.get("negative_slope") or 0.0
    return torch.where(x > lo, torch.clamp(x, max=hi), lo + slope * (x - lo))


def _relu_bwd(dy, x, a):
    lo = a.get("lower_clip") or 0.0
    hi = a.get("upper_clip")
    hi = math.inf if hi is None else hi
    slope = a.get("negative_slope") or 0.0
    return torch.where(x > lo, torch.where(x < hi, dy, torch.zeros_like(dy)), slope * dy)


def _f(b):
    return b.to(torch.float64)


class Op:
    def __init__(self, name, arity, fn, cls, doms=None, method=None, attrs=None, boolean=False):
        self.name, self.arity, self.fn, self.cls = name, arity, fn, cls
        self.doms = doms or ["any"] * arity
        self.method = method or name
        self.attrs = attrs  # rnd -> dict of keyword attributes (or None)
        self.boolean = boolean


def _relu_attrs(rnd):
    r = rnd.random()
    if r < 0.5:
        return {}
    a = {}
    if rnd.random() < 0.5:
        a["negative_slope"] = rnd.choice([0.1, 0.25, 0.01])
    if rnd.random() < 0.5:
        a["lower_clip"] = rnd.choice([-0.5, 0.3, -1.0])
    if rnd.random() < 0.5:
        a["upper_clip"] = rnd.choice([1.25, 0.8, 6.0])
    if "lower_clip" in a and "upper_clip" in a and a["upper_clip"] < a["lower_clip"]:
        a["upper_clip"] = a["lower_clip"] + 1.0
    return a


OPS = {}


def _add(op):
    OPS[op.name] = op


for _n, _fn in [("sqrt", torch.sqrt), ("reciprocal", lambda x: 1.0 / x)]:
    _add(Op(_n, 1, (lambda f: lambda x, a: f(x))(_fn), "arith", ["pos"]))
_add(Op("rsqrt", 1, lambda x, a: 1.0 / torch.sqrt(x), "transc", ["pos"]))
_add(Op("log", 1, lambda x, a: torch.log(x), "transc", ["pos"]))
for _n, _fn in [
    ("tanh", torch.tanh),
    ("sigmoid", _sig),
    ("erf", torch.erf),
    ("exp", torch.exp),
    ("sin", torch.sin),
    ("cos", torch.cos),
    ("tan", torch.tan),
    ("gelu", lambda x: x * _Phi(x)),
    ("gelu_approx_tanh", _gelu_tanh),
]:
    _add(Op(_n, 1, (lambda f: lambda x, a: f(x))(_fn), "transc"))
for _n, _fn in [
    ("identity", lambda x: x),
    ("neg", lambda x: -x),
    ("abs", torch.abs),
    ("ceil", torch.ceil),
    ("floor", torch.floor),
]:
    _add(
        Op(
            _n,
            1,
            (lambda f: lambda x, a: f(x))(_fn),
            "exact",
            ["disc"] if _n in ("ceil", "floor") else None,
        )
    )
_add(Op("logical_not", 1, lambda x, a: (x == 0).double(), "exact", ["mask"], boolean=True))
_add(
    Op(
        "elu",
        1,
        lambda x, a: torch.where(
            x > 0, x, a.get("alpha", 1.0) * torch.expm1(torch.clamp(x, max=0))
        ),
        "transc",
        attrs=lambda r: {} if r.random() < 0.5 else {"alpha": r.choice([0.4, 1.7])},
    )
)
_add(
    Op(
        "softplus",
        1,
        lambda x, a: _softplus(x, a.get("beta", 1.0)),
        "transc",
        attrs=lambda r: {} if r.random() < 0.5 else {"beta": r.choice([2.5, 0.5, -1.5])},
    )
)
_add(
    Op(
        "swish",
        1,
        lambda x, a: x * _sig(a.get("swish_beta", 1.0) * x),
        "transc",
        attrs=lambda r: {} if r.random() < 0.5 else {"swish_beta": r.choice([1.7, 0.3])},
    )
)
_add(Op("relu", 1, _relu, "relu", ["disc"], attrs=_relu_attrs))
_add(
    Op(
        "leaky_relu",
        1,
        lambda x, a: _relu(x, a),
        "relu",
        ["disc"],
        attrs=lambda r: {"negative_slope": r.choice([0.01, 0.2, 0.0])},
    )
)
_add(
    Op("gen_index", 1, None, "exact", ["shape"], attrs=lambda r: {"axis": 0})
)  # axis fixed up by the generator
# binary
for _n, _fn, _cls in [
    ("add", lambda a, b: a + b, "arith"),
    ("sub", lambda a, b: a - b, "arith"),
    ("mul", lambda a, b: a * b, "arith"),
    ("div", lambda a, b: a / b, "arith"),
    ("add_square", lambda a, b: a + b * b, "arith"),
    ("bias", lambda a, b: a + b, "arith"),
    ("scale", lambda a, b: a * b, "arith"),
    ("max", torch.maximum, "exact"),
    ("min", torch.minimum, "exact"),
]:
    _add(Op(_n, 2, (lambda f: lambda a, b, at: f(a, b))(_fn), _cls))
_add(Op("mod", 2, lambda a, b, at: torch.fmod(a, b), "arith", ["disc", "disc"]))
_add(Op("pow", 2, lambda a, b, at: torch.pow(a, b), "transc", ["pos", "exp"]))
_add(
    Op(
        "logical_and",
        2,
        lambda a, b, at: ((a != 0) & (b != 0)).double(),
        "exact",
        ["mask", "mask"],
        boolean=True,
    )
)
_add(
    Op(
        "logical_or",
        2,
        lambda a, b, at: ((a != 0) | (b != 0)).double(),
        "exact",
        ["mask", "mask"],
        boolean=True,
    )
)
for _n, _fn in [
    ("cmp_eq", torch.eq),
    ("cmp_neq", torch.ne),
    ("cmp_gt", torch.gt),
    ("cmp_ge", torch.ge),
    ("cmp_lt", torch.lt),
    ("cmp_le", torch.le),
]:
    _add(
        Op(
            _n,
            2,
            (lambda f: lambda a, b, at: f(a, b).double())(_fn),
            "exact",
            ["disc", "cmp"],
            boolean=True,
        )
    )
_add(
    Op(
        "binary_select",
        3,
        lambda a, b, m, at: torch.where(m != 0, a, b),
        "exact",
        ["any", "any", "mask"],
    )
)
# backward (loss, input)
_add(Op("relu_backward", 2, _relu_bwd, "relu", ["any", "disc"], attrs=_relu_attrs))
_add(
    Op(
        "leaky_relu_backward",
        2,
        _relu_bwd,
        "relu",
        ["any", "disc"],
        attrs=lambda r: {"negative_slope": r.choice([0.01, 0.3])},
    )
)
_add(Op("tanh_backward", 2, lambda dy, x, a: dy * (1 - torch.tanh(x) ** 2), "transc"))
_add(Op("sigmoid_backward", 2, lambda dy, x, a: dy * _sig(x) * (1 - _sig(x)), "transc"))
_add(
    Op(
        "elu_backward",
        2,
        lambda dy, x, a: torch.where(
            x > 0, dy, dy * a.get("alpha", 1.0) * torch.exp(torch.clamp(x, max=0))
        ),
        "transc",
        ["any", "disc"],
        attrs=lambda r: {} if r.random() < 0.5 else {"alpha": r.choice([0.4, 2.0])},
    )
)
_add(Op("gelu_backward", 2, lambda dy, x, a: dy * (_Phi(x) + x * _phi(x)), "transc"))
_add(Op("gelu_approx_tanh_backward", 2, lambda dy, x, a: dy * _gelu_tanh_grad(x), "transc"))
_add(
    Op(
        "softplus_backward",
        2,
        lambda dy, x, a: dy * _sig(a.get("beta", 1.0) * x),
        "transc",
        attrs=lambda r: {} if r.random() < 0.5 else {"beta": r.choice([2.5, 0.5])},
    )
)
_add(
    Op(
        "swish_backward",
        2,
        lambda dy, x, a: dy
        * (
            _sig(a.get("swish_beta", 1.0) * x)
            * (1 + a.get("swish_beta", 1.0) * x * (1 - _sig(a.get("swish_beta", 1.0) * x)))
        ),
        "transc",
        attrs=lambda r: {} if r.random() < 0.5 else {"swish_beta": r.choice([1.7, 0.6])},
    )
)

OP_WEIGHTS = {n: 1.0 for n in OPS}
OP_WEIGHTS.update(
    {
        "add": 3,
        "mul": 3,
        "sub": 2,
        "div": 1.5,
        "binary_select": 1.5,
        "relu": 2,
        "exp": 1.5,
        "gen_index": 0.5,
        "identity": 0.5,
        "bias": 0.5,
        "scale": 0.5,
    }
)
OP_NAMES = sorted(OPS)

RED_MODES = ["ADD", "MUL", "MIN", "MAX", "AMAX", "AVG", "NORM1", "NORM2", "MUL_NO_ZEROS"]


# ======================================================================================
# Case generation
# ======================================================================================
SIZES = [1, 1, 2, 3, 4, 5, 7, 8, 9, 13, 16, 17, 31, 33, 64, 65, 130]


def gen_space(rnd, rank):
    for _ in range(100):
        s = [rnd.choice(SIZES) for _ in range(rank)]
        n = math.prod(s)
        if n <= (6000 if rank > 1 else 3000):
            break
    if rnd.random() < 0.04:
        s[rnd.randrange(rank)] = 0
    return s


def _dtype_choice(rnd, dom):
    d = _dtype_choice0(rnd, dom)
    return "f32" if d == "f64" and "f64" in AVOID else d


def _dtype_choice0(rnd, dom):
    if dom == "mask":
        return rnd.choice(["bool", "bool", "f32", "f16", "u8"])
    r = rnd.random()
    if r < 0.40:
        return "f32"
    if r < 0.60:
        return "f16"
    if r < 0.80:
        return "bf16"
    if r < 0.84:
        return "f64"
    if r < 0.89 and dom in ("any", "disc", "cmp"):
        return "i8"
    if r < 0.92 and dom in ("any", "pos", "disc", "cmp"):
        return "u8"
    if r < 0.94:
        return "i32"  # an int32 input: the engine declines (a note)
    return "f32"


def gen_leaf(rnd, S, dom, full=False, like=None):
    rank = len(S)
    leaf = {"kind": "tensor", "seed": rnd.randrange(1 << 30), "dom": dom}
    if full or rnd.random() < 0.45:
        leaf["mask"] = [1] * rank
        leaf["drop"] = 0
    else:
        leaf["mask"] = [0 if rnd.random() < 0.4 else 1 for _ in range(rank)]
        leaf["drop"] = rnd.randrange(rank) if rnd.random() < 0.25 else 0
        leaf["drop"] = min(leaf["drop"], next((i for i, m in enumerate(leaf["mask"]) if m), rank))
    leaf["dtype"] = _dtype_choice(rnd, dom)
    if dom == "shape":
        leaf["dtype"] = rnd.choice(["f32", "f16"])
    r = rnd.random()
    leaf["layout"] = (
        "packed"
        if r < 0.4
        else "perm"
        if r < 0.6
        else "step"
        if r < 0.8
        else "expand"
        if r < 0.9
        else "offset"
    )
    leaf["layout_seed"] = rnd.randrange(1 << 30)
    leaf["explicit"] = rnd.random() < 0.15  # g.tensor(...) instead of tensor_like
    leaf["scale"] = rnd.choice([1.0] * 8 + [1e-3, 30.0])
    leaf["special"] = rnd.random() < 0.04  # some 0, inf, nan values
    leaf["zeros"] = rnd.random() < 0.08  # some exact zeros
    if like is not None:
        leaf["like"] = like
    return leaf


def gen_scalar(rnd, dom):
    kind = "pynum" if rnd.random() < 0.4 else "scalar"
    if dom == "mask":
        v = rnd.choice([0.0, 1.0, 2.0])
    elif dom == "pos":
        v = rnd.choice([0.5, 2.0, 3.0, 1.25])
    elif dom == "exp":
        v = rnd.choice([2.0, 3.0, 0.5, -1.0, 0.0])
    else:
        v = rnd.choice([2.0, -0.75, 3.0, 0.0, 1.5, -2.0])
    leaf = {"kind": kind, "value": v, "dom": dom}
    if kind == "pynum":
        leaf["int"] = rnd.random() < 0.3 and float(v).is_integer()
        if "scalar" in AVOID:
            leaf["int"] = False
    else:
        leaf["dtype"] = rnd.choice(
            ["f32", "f32", "f16", "i32", "f64", "bool"]
            if dom == "mask"
            else ["f32", "f32", "f16", "i32", "f64", "bf16"]
        )
        if leaf["dtype"] == "i32" and not float(v).is_integer():
            leaf["dtype"] = "f32"
        leaf["bind"] = rnd.choice(["tensor", "python", "default"])
        if "scalar" in AVOID and leaf["dtype"] in ("i32", "bool"):
            leaf["dtype"] = "f32"
        if "f64" in AVOID and leaf["dtype"] == "f64":
            leaf["dtype"] = "f32"
    return leaf


def leaf_shape(leaf, S):
    if leaf["kind"] != "tensor":
        return [1]
    return [S[i] if leaf["mask"][i] else 1 for i in range(leaf["drop"], len(S))]


def bshape(shapes):
    rank = max(len(s) for s in shapes)
    out = []
    for i in range(rank):
        vals = {s[i - rank + len(s)] for s in shapes if i - rank + len(s) >= 0}
        vals.discard(1)
        out.append(vals.pop() if vals else 1)
    return out


def ref_shape(spec, ref, cache=None):
    kind, i = ref
    S = spec["space"]
    if kind == "leaf":
        return leaf_shape(spec["leaves"][i], S)
    node = spec["nodes"][i]
    return bshape([ref_shape(spec, a) for a in node["args"]])


def gen_case(seed: int) -> dict:
    rnd = random.Random(seed * 7919 + 13)
    rank = rnd.choice([1, 2, 2, 3, 3, 3, 4, 4, 5])
    S = gen_space(rnd, rank)
    spec = {
        "seed": seed,
        "space": S,
        "leaves": [],
        "nodes": [],
        "outputs": {},
        "reductions": [],
        "genstats": False,
        "knobs": None,
        "path": "configs",
    }
    r = rnd.random()
    spec["io"] = None if r < 0.6 else rnd.choice(["f32", "f16", "bf16"])
    r = rnd.random()
    spec["inter"] = (
        None
        if r < 0.4
        else "f32"
        if r < 0.7
        else rnd.choice(["f16", "bf16"])
        if r < 0.97
        else "f64"
    )
    r = rnd.random()
    spec["compute"] = None if r < 0.7 else "f32" if r < 0.9 else rnd.choice(["f16", "f64"])
    if "f64" in AVOID:
        spec["inter"] = "f32" if spec["inter"] == "f64" else spec["inter"]
        spec["compute"] = "f32" if spec["compute"] == "f64" else spec["compute"]
    full = S
    n_nodes = rnd.randint(1, 6)
    avail_nodes = []

    def new_leaf(dom, want_full=False, like=None, scalar_ok=True):
        if dom != "shape" and not want_full and scalar_ok and rnd.random() < 0.1:
            spec["leaves"].append(gen_scalar(rnd, dom))
        else:
            spec["leaves"].append(gen_leaf(rnd, S, dom, full=want_full, like=like))
        return ("leaf", len(spec["leaves"]) - 1)

    for k in range(n_nodes):
        name = rnd.choices(
            OP_NAMES,
            weights=[0.0 if (n == "pow" and "pow" in AVOID) else OP_WEIGHTS[n] for n in OP_NAMES],
        )[0]
        op = OPS[name]
        args = []
        for pos in range(op.arity):
            dom = op.doms[pos]
            p_node = {
                "any": 0.65,
                "pos": 0.3,
                "exp": 0.1,
                "disc": 0.3,
                "cmp": 0.3,
                "mask": 0.3,
                "shape": 0.5,
            }[dom]
            if (
                pos == 0
                and avail_nodes
                and rnd.random() < 0.8 * (p_node / 0.65 if p_node < 0.65 else 1)
            ):
                args.append(
                    ("node", avail_nodes[-1] if rnd.random() < 0.7 else rnd.choice(avail_nodes))
                )
            elif pos > 0 and avail_nodes and rnd.random() < p_node * 0.6:
                args.append(("node", rnd.choice(avail_nodes)))
            elif (
                dom == "cmp"
                and args
                and args[0][0] == "leaf"
                and spec["leaves"][args[0][1]]["kind"] == "tensor"
                and rnd.random() < 0.6
            ):
                a0 = spec["leaves"][args[0][1]]
                lf = gen_leaf(rnd, S, "cmp", like=args[0][1])
                lf["mask"], lf["drop"], lf["dtype"] = list(a0["mask"]), a0["drop"], a0["dtype"]
                spec["leaves"].append(lf)
                args.append(("leaf", len(spec["leaves"]) - 1))
            elif name == "mod" and pos == 0 and rnd.random() < 0.3 and "mod" not in AVOID:
                # a = b * integer (rounded): fmod near its discontinuity
                args.append(("pending_multiple", None))
            else:
                same = [
                    i
                    for i, lf in enumerate(spec["leaves"])
                    if lf.get("dom") == dom and lf["kind"] == "tensor"
                ]
                if same and rnd.random() < 0.15:
                    args.append(("leaf", rnd.choice(same)))
                else:
                    ok = "scalar" not in AVOID or (
                        pos > 0 and dom in ("any", "pos") and not op.boolean
                    )
                    args.append(new_leaf(dom, scalar_ok=ok))
        if args and args[0][0] == "pending_multiple":
            b = args[1]
            if b[0] == "leaf" and spec["leaves"][b[1]]["kind"] == "tensor":
                lb = spec["leaves"][b[1]]
                lf = gen_leaf(rnd, S, "multiple", like=b[1])
                lf["mask"], lf["drop"], lf["dtype"] = list(lb["mask"]), lb["drop"], lb["dtype"]
                spec["leaves"].append(lf)
                args[0] = ("leaf", len(spec["leaves"]) - 1)
            else:
                args[0] = new_leaf("any")
        attrs = op.attrs(rnd) if op.attrs else {}
        node = {"op": name, "args": [list(a) for a in args], "attrs": attrs}
        spec["nodes"].append(node)
        if name == "gen_index":
            shp = ref_shape(spec, args[0])
            node["attrs"] = {"axis": rnd.randrange(len(shp))}
            big = [k for k, d in enumerate(shp) if d != 1]
            if "scalar" in AVOID and big:  # a size-1 axis emits a Python constant
                node["attrs"] = {"axis": rnd.choice(big)}
        avail_nodes.append(len(spec["nodes"]) - 1)

    # every node output not consumed and not full joins the last node (so that the graph
    # has full-size outputs only); the last node is made full if it is not
    def consumed():
        return {a[1] for n in spec["nodes"] for a in n["args"] if a[0] == "node"}

    last = len(spec["nodes"]) - 1
    for j in range(last):
        if j not in consumed() and (ref_shape(spec, ("node", j)) != full or rnd.random() < 0.5):
            spec["nodes"].append(
                {
                    "op": rnd.choice(["add", "mul", "sub", "max"]),
                    "args": [["node", len(spec["nodes"]) - 1], ["node", j]],
                    "attrs": {},
                }
            )
    last = len(spec["nodes"]) - 1
    if ref_shape(spec, ("node", last)) != full:
        lf = new_leaf("any", want_full=True)
        spec["nodes"].append(
            {
                "op": rnd.choice(["add", "mul", "bias", "sub"]),
                "args": [["node", last], list(lf)],
                "attrs": {},
            }
        )
    last = len(spec["nodes"]) - 1

    # outputs: dtype and stride of every non-virtual node output
    def out_props():
        r = rnd.random()
        dt = (
            None
            if r < 0.5
            else "f32"
            if r < 0.65
            else "f16"
            if r < 0.75
            else "bf16"
            if r < 0.85
            else "f64"
            if r < 0.88
            else rnd.choice(["bool", "i8", "u8", "i32"])
        )
        if dt == "f64" and "f64" in AVOID:
            dt = "f32"
        r = rnd.random()
        st = "packed" if r < 0.5 else "perm" if r < 0.75 else "gap"
        return {"dtype": dt, "stride": st, "stride_seed": rnd.randrange(1 << 30)}

    consumed_now = consumed()
    reduce_ = rnd.random() < 0.38
    if reduce_:
        if rank >= 2 and rnd.random() < 0.08:
            spec["genstats"] = True
            kept = [0] * rank
            kept[1] = 1
        else:
            kept = [rnd.random() < 0.5 for _ in range(rank)]
            kept = [int(k) for k in kept]
        src = ["node", last]
        if rnd.random() < 0.1:
            src = list(new_leaf("any", want_full=True))
        nred = 1 if spec["genstats"] else (2 if rnd.random() < 0.25 else 1)
        fulls = [j for j in range(len(spec["nodes"])) if ref_shape(spec, ("node", j)) == full]
        for t in range(nred):
            s = src if t == 0 else (["node", rnd.choice(fulls)] if rnd.random() < 0.6 else src)
            r = rnd.random()
            dt = (
                None
                if r < 0.5
                else "f32"
                if r < 0.7
                else rnd.choice(["f16", "bf16"])
                if r < 0.95
                else rnd.choice(["f64", "i32"])
            )
            if dt == "f64" and "f64" in AVOID:
                dt = "f32"
            spec["reductions"].append(
                {
                    "src": s,
                    "mode": rnd.choice(RED_MODES),
                    "kept": kept,
                    "dtype": dt,
                    "stride": rnd.choice(["packed", "packed", "perm", "gap"]),
                    "stride_seed": rnd.randrange(1 << 30),
                }
            )
        if src == ["node", last]:
            # the reduced node is virtual unless an extra pointwise output is wanted
            if rnd.random() < 0.3:
                spec["outputs"][str(last)] = out_props()
        else:
            spec["outputs"][str(last)] = out_props()
        if rnd.random() < 0.2 and fulls:
            spec["outputs"][str(rnd.choice(fulls))] = out_props()
    else:
        spec["outputs"][str(last)] = out_props()
        # an intermediate that is also an output
        for j in range(last):
            if j in consumed_now and ref_shape(spec, ("node", j)) == full and rnd.random() < 0.15:
                spec["outputs"][str(j)] = out_props()
    # knobs
    if rnd.random() < 0.4:
        if spec["reductions"]:
            while True:
                bk = rnd.choice([1, 2, 4, 8, 16, 32, 64, 128, 256])
                br = rnd.choice([1, 2, 4, 8, 16, 32, 64, 128, 256, 1024])
                if bk * br <= 512:  # the interpreter folds tiles element by element
                    break
            # the interpreter runs programs one by one: keep the grid small
            kept_n = math.prod(sz for sz, kk in zip(S, spec["reductions"][0]["kept"]) if kk)
            split = rnd.choice([1, 2, 3, 4, 5, 8, 16, 64, 300])
            while bk < 256 and bk * br < 512 and -(-kept_n // bk) * split > 128:
                bk *= 2
            while -(-kept_n // bk) * split > 128 and split > 1:
                split = max(1, split // 2)
            spec["knobs"] = {
                "BLOCK_KEPT": bk,
                "BLOCK_RED": br,
                "SPLIT": split,
                "num_warps": rnd.choice([1, 2, 4, 8]),
                "num_stages": rnd.choice([1, 2, 3, 4]),
            }
        else:
            spec["knobs"] = {
                "BLOCK": rnd.choice([256, 512, 1024, 2048, 4096]),
                "num_warps": rnd.choice([1, 2, 4, 8, 16]),
            }
    elif rnd.random() < 0.15:
        spec["path"] = "heurA"
    return spec


# ======================================================================================
# Leaf values and layouts
# ======================================================================================
def _gen_values(leaf, shape, gen, vals_so_far):
    dt = leaf["dtype"]
    dom = leaf["dom"]
    n = math.prod(shape)
    if dt == "bool":
        v = torch.randint(0, 2, shape, generator=gen).bool()
        if n >= 2:
            v.view(-1)[0], v.view(-1)[1] = False, True
        return v
    if dom == "mask":
        v = torch.randint(0, 2, shape, generator=gen).double()
        if n >= 2:
            v.view(-1)[0], v.view(-1)[1] = 0, 1
        if dt in ("f32", "f16", "bf16", "f64") and torch.rand((), generator=gen) < 0.3:
            v = v * torch.empty(shape, dtype=torch.float64).uniform_(-2, 2, generator=gen)
    elif dt in ("i8", "u8", "i32"):
        lo, hi = (1, 10) if dt == "u8" or dom in ("pos", "exp") else (-9, 10)
        v = torch.randint(lo, hi, shape, generator=gen).double()
        v = torch.where(v == 0, torch.ones_like(v), v)
    else:
        mag = torch.empty(shape, dtype=torch.float64).uniform_(0.1, 2.0, generator=gen)
        if dom in ("pos",):
            v = mag
        elif dom == "exp":
            v = mag * (torch.randint(0, 2, shape, generator=gen) * 2 - 1)
            if torch.rand((), generator=gen) < 0.4:
                v = torch.randint(-3, 4, shape, generator=gen).double()
        else:
            v = mag * (torch.randint(0, 2, shape, generator=gen) * 2 - 1)
        v = v * leaf["scale"] if dom not in ("exp",) else v
        if leaf.get("zeros") and n:
            z = torch.rand(shape, generator=gen) < 0.2
            v = torch.where(z, torch.zeros_like(v), v)
        if leaf.get("special") and n:
            flat = v.reshape(-1).clone()
            for s in (0.0, -0.0, math.inf, -math.inf, math.nan):
                i = int(torch.randint(0, n, (), generator=gen))
                flat[i] = s
            v = flat.reshape(shape)
    like = leaf.get("like")
    if like is not None and like in vals_so_far and dt not in ("bool",):
        base = vals_so_far[like].double()
        if tuple(base.shape) == tuple(shape):
            if dom == "cmp":
                same = torch.randint(0, 2, shape, generator=gen).bool()
                v = torch.where(same, base, v)
            elif dom == "multiple":
                k = torch.randint(-4, 5, shape, generator=gen).double()
                # b * k computed in the leaf's type: near-integral a / b
                v = (base.to(DT[dt]) * k.to(DT[dt])).double()
    return v.to(DT[dt])


def _layout(v, leaf, gen):
    lay = leaf["layout"]
    shape = list(v.shape)
    r = len(shape)
    lrnd = random.Random(leaf["layout_seed"])
    if lay == "perm" and r >= 2:
        p = list(range(r))
        lrnd.shuffle(p)
        inv = [p.index(i) for i in range(r)]
        return v.permute(*p).contiguous().permute(*inv)
    if lay == "step":
        steps = [lrnd.choice([1, 2, 3]) for _ in range(r)]
        offs = [lrnd.choice([0, 1]) for _ in range(r)]
        big_shape = [s * st + o for s, st, o in zip(shape, steps, offs)]
        if v.dtype.is_floating_point:
            big = torch.full(big_shape, float("nan"), dtype=v.dtype)
        else:
            big = torch.full(big_shape, 1 if v.dtype == torch.bool else 99, dtype=v.dtype)
        idx = tuple(slice(o, o + s * st, st) for s, st, o in zip(shape, steps, offs))
        view = big[idx]
        view.copy_(v)
        return view
    if lay == "offset":
        k = lrnd.choice([1, 3, 7])
        flat = torch.zeros(v.numel() + k, dtype=v.dtype)
        view = flat[k:].view(shape)
        view.copy_(v)
        return view
    return v.contiguous()


def make_leaf_tensor(leaf, S, vals_so_far, i):
    shape = leaf_shape(leaf, S)
    gen = torch.Generator().manual_seed(leaf["seed"])
    if leaf["layout"] == "expand" and any(d > 1 for d in shape):
        lrnd = random.Random(leaf["layout_seed"])
        small = [1 if (d > 1 and lrnd.random() < 0.6) else d for d in shape]
        if small == shape:
            j = max(range(len(shape)), key=lambda k: shape[k])
            small[j] = 1
        v = _gen_values(leaf, small, gen, {})
        return v.expand(*shape)
    v = _gen_values(leaf, shape, gen, vals_so_far)
    return _layout(v, leaf, gen)


def scalar_tensor(leaf):
    v = leaf["value"]
    dt = DT[leaf["dtype"]]
    if dt == torch.bool:
        return torch.tensor(bool(v))
    return torch.tensor(v, dtype=dt)


# ======================================================================================
# Graph construction
# ======================================================================================
def out_strides(dims, mode, seed):
    r = len(dims)
    rnd = random.Random(seed)
    order = list(range(r))
    if mode in ("perm", "gap"):
        rnd.shuffle(order)
    strides = [0] * r
    run = 1 if mode != "gap" else rnd.choice([1, 2])
    for d in reversed(order):
        strides[d] = run
        pad = rnd.choice([0, 1, 3]) if mode == "gap" else 0
        run *= max(dims[d], 1) + pad
    return strides


def red_dims(spec):
    k = spec["reductions"][0]["kept"] if spec["reductions"] else None
    return [s if kk else 1 for s, kk in zip(spec["space"], k)]


def build_graph(spec, values):
    """(graph, leaf handles, node tensors, outputs: [(tensor, dtype, dims, strides, what)])."""
    g = cudnn.pygraph(
        io_data_type=GDT[spec["io"]],
        intermediate_data_type=GDT[spec["inter"]],
        compute_data_type=GDT[spec["compute"]],
    )
    L = []
    for i, leaf in enumerate(spec["leaves"]):
        if leaf["kind"] == "pynum":
            v = leaf["value"]
            L.append(int(v) if leaf.get("int") else float(v))
        elif leaf["kind"] == "scalar":
            L.append(g.tensor_like(scalar_tensor(leaf), name=f"s{i}"))
        elif leaf.get("explicit") or ("scalar" in AVOID and values[i].numel() == 1):
            x = values[i]
            L.append(
                g.tensor(
                    dim=list(x.shape) or [1],
                    stride=list(x.stride()) or [1],
                    data_type=x.dtype,
                    name=f"x{i}",
                )
            )
        else:
            L.append(g.tensor_like(values[i], name=f"x{i}"))
    N = []
    for j, node in enumerate(spec["nodes"]):
        args = [L[a[1]] if a[0] == "leaf" else N[a[1]] for a in node["args"]]
        fn = getattr(g, OPS[node["op"]].method)
        N.append(fn(*args, name=f"n{j}", **node["attrs"]))
    outs = []
    for js, props in spec["outputs"].items():
        j = int(js)
        t = N[j]
        t.set_output(True)
        if props["dtype"]:
            t.set_data_type(GDT[props["dtype"]])
        dims = ref_shape(spec, ("node", j))
        st = out_strides(dims, props["stride"], props["stride_seed"])
        if props["stride"] != "packed":
            t.set_stride(st)
        outs.append((t, f"n{j}"))
    reds = []
    if spec["genstats"]:
        r0 = spec["reductions"][0]
        src = L[r0["src"][1]] if r0["src"][0] == "leaf" else N[r0["src"][1]]
        s, sq = g.genstats(src, name="gs")
        for t, nm in ((s, "gs_sum"), (sq, "gs_sq")):
            t.set_output(True)
            if r0["dtype"]:
                t.set_data_type(GDT[r0["dtype"]])
            outs.append((t, nm))
            reds.append(t)
    else:
        for k, r in enumerate(spec["reductions"]):
            src = L[r["src"][1]] if r["src"][0] == "leaf" else N[r["src"][1]]
            y = g.reduction(src, getattr(cudnn.reduction_mode, r["mode"]), name=f"red{k}")
            dims = red_dims(spec)
            y.set_dim(dims).set_output(True)
            if r["dtype"]:
                y.set_data_type(GDT[r["dtype"]])
            if r["stride"] != "packed":
                y.set_stride(out_strides(dims, r["stride"], r["stride_seed"]))
            outs.append((y, f"red{k}"))
            reds.append(y)
    return g, L, N, outs


# ======================================================================================
# The PyTorch float64 evaluation (exact, or one rounding/perturbation trial)
# ======================================================================================
class Trial:
    """One evaluation with the kernel's roundings; ``delta``: plus random perturbations of
    a few ulps; ``rtz``: BFLOAT16 conversions truncate (what Triton's interpreter does for
    float32 -> bfloat16, see the report) instead of rounding to nearest even."""

    def __init__(self, gen, u, delta: bool, rtz: bool = False):
        self.gen, self.u, self.delta, self.rtz = gen, u, delta, rtz

    def d(self, like):
        if not self.delta:
            return torch.zeros_like(like)
        return torch.empty(like.shape, dtype=torch.float64).uniform_(-1, 1, generator=self.gen)


def _bf16_rtz(x):
    """float64 -> float32 (nearest) -> bfloat16 by truncation, back in float64."""
    f = x.to(torch.float32).contiguous()
    b = f.view(torch.int32) & -65536
    return b.view(torch.float32).to(torch.float64)


def _round_to(x, key, rtz=False):
    if key is None or key == "f64":
        return x
    if key == "bf16" and rtz:
        return _bf16_rtz(x)
    return x.to(DT[key]).to(torch.float64)


def evaluate(spec, vals64, node_meta, trial=None, compute="f32"):
    """{('node', j) | ('red', k): float64 tensor}. ``node_meta[j]`` = (virtual, dtype key).
    Without ``trial``: the reference semantics (float64 throughout)."""
    out = {}

    def get(ref):
        if ref[0] == "leaf":
            return vals64[ref[1]]
        return out[("node", ref[1])]

    C = 4.0  # ulps of slack per approximated operation
    for j, node in enumerate(spec["nodes"]):
        op = OPS[node["op"]]
        args = [get(a) for a in node["args"]]
        shp = bshape([list(a.shape) for a in args])
        if op.name == "gen_index":
            ax = node["attrs"]["axis"]
            d = list(args[0].shape)
            sh = [1] * len(d)
            sh[ax] = d[ax]
            v = torch.arange(d[ax], dtype=torch.float64).reshape(sh).expand(d).clone()
        else:
            if trial is not None and op.cls == "transc":
                pargs = []
                for k, a in enumerate(args):
                    if op.name == "pow" and k == 1:
                        pargs.append(a)
                    else:
                        pargs.append(a * (1 + C * trial.u * trial.d(a)))
                args_eval = pargs
            else:
                args_eval = args
            with torch.no_grad():
                v = op.fn(*args_eval, node["attrs"])
            v = v.to(torch.float64).expand(shp).clone() if list(v.shape) != shp else v
            if trial is not None:
                if op.cls == "transc":
                    mag = torch.zeros(shp, dtype=torch.float64)
                    for a in args:
                        mag = torch.maximum(
                            mag, torch.nan_to_num(a.abs(), nan=0.0, posinf=0.0).expand(shp)
                        )
                    v = v * (1 + C * trial.u * trial.d(v)) + C * trial.u * trial.d(v) * (1 + mag)
                elif op.cls == "arith":
                    v = v * (1 + 2 * trial.u * trial.d(v))
                elif op.cls == "relu":
                    a = node["attrs"]
                    if (a.get("negative_slope") or 0.0) != 0.0:
                        v = v * (1 + 2 * trial.u * trial.d(v))
        if trial is not None:
            v = _round_to(v, compute)
            virtual, key = node_meta[j]
            if virtual and key in ("f16", "bf16"):
                v = _round_to(v, key, trial.rtz)
        out[("node", j)] = v
    if spec["genstats"]:
        r0 = spec["reductions"][0]
        x = get(r0["src"])
        axes = [i for i in range(x.dim()) if i != 1]
        s = x.sum(dim=axes, keepdim=True) if axes else x.clone()
        q = (x * x).sum(dim=axes, keepdim=True) if axes else x * x
        if trial is not None:
            n = max(1, x.numel() // max(1, x.shape[1]))
            s = s + C * trial.u * math.sqrt(n) * trial.d(s) * x.abs().sum(dim=axes, keepdim=True)
            q = q + C * trial.u * math.sqrt(n) * trial.d(q) * q
            s, q = _round_to(s, compute), _round_to(q, compute)
        out[("red", 0)], out[("red", 1)] = s, q
        return out
    for k, r in enumerate(spec["reductions"]):
        x = get(r["src"])
        out[("red", k)] = reduce64(x, r["mode"], r["kept"], trial, compute)
    return out


def reduce64(x, mode, kept, trial=None, compute="f32"):
    dims = list(x.shape)
    axes = [i for i, (d, kk) in enumerate(zip(dims, kept)) if not kk and d != 1]
    ydims = [d if kk else 1 for d, kk in zip(dims, kept)]
    pre = {
        "ADD": x,
        "MUL": x,
        "MIN": x,
        "MAX": x,
        "AMAX": x.abs(),
        "AVG": x,
        "NORM1": x.abs(),
        "NORM2": x * x,
        "MUL_NO_ZEROS": torch.where(x == 0, torch.ones_like(x), x),
    }[mode]
    comb = {
        "ADD": "add",
        "MUL": "mul",
        "MIN": "min",
        "MAX": "max",
        "AMAX": "max",
        "AVG": "add",
        "NORM1": "add",
        "NORM2": "add",
        "MUL_NO_ZEROS": "mul",
    }[mode]
    ident = {"add": 0.0, "mul": 1.0, "min": math.inf, "max": -math.inf}[comb]
    if mode == "AMAX":
        ident = 0.0
    count = math.prod(dims[a] for a in axes) if axes else 1
    if x.numel() == 0 and math.prod(ydims) == 0:
        return torch.zeros(ydims, dtype=torch.float64)
    if any(dims[a] == 0 for a in axes):
        y = torch.full(ydims, ident, dtype=torch.float64)
        count = 0
    elif not axes:
        y = pre.clone()
    else:
        if comb == "add":
            y = pre.sum(dim=axes, keepdim=True)
        elif comb == "mul":
            y = pre
            for a in axes:
                y = y.prod(dim=a, keepdim=True)
        elif comb == "min":
            y = pre.amin(dim=axes, keepdim=True)
        else:
            y = pre.amax(dim=axes, keepdim=True)
    if trial is not None and axes and count:
        C = 4.0
        if comb == "add":
            y = y + C * trial.u * math.sqrt(count) * trial.d(y) * pre.abs().sum(
                dim=axes, keepdim=True
            )
        elif comb == "mul":
            y = y * (1 + C * trial.u * count * trial.d(y))
        y = _round_to(y, compute)
    if mode == "AVG":
        y = y / count if count else torch.full_like(y, math.nan)
    elif mode == "NORM2":
        y = torch.sqrt(y)
    if trial is not None:
        y = _round_to(y, compute)
    return y.expand(ydims).clone() if list(y.shape) != ydims else y


def round_out(x, key, rtz=False):
    """float64 values as stored into an output of type ``key`` (back in float64)."""
    if key == "bf16" and rtz:
        return _bf16_rtz(x)
    if key in ("f32", "f16", "bf16", "f64"):
        return x.to(DT[key]).to(torch.float64)
    if key == "bool":
        return (x != 0).to(torch.float64)
    lo, hi = INT_RANGE[key]
    return torch.clamp(torch.trunc(x), lo, hi)


# ======================================================================================
# Buffers
# ======================================================================================
def alloc_out(dims, strides, key, fill):
    """(view, base, mask of the view's storage positions) with gaps holding a sentinel."""
    dt = DT[key]
    span = 1 + sum((d - 1) * s for d, s in zip(dims, strides)) if all(d > 0 for d in dims) else 0
    off = 2
    total = off + span + 3
    sentinel = (not bool(fill)) if dt == torch.bool else (77 if not dt.is_floating_point else 7.0)
    base = torch.full((total,), sentinel, dtype=dt)
    view = base.as_strided(dims, strides, off)
    view.fill_(fill if dt != torch.bool else bool(fill))
    pos = torch.zeros(total, dtype=torch.bool)
    if span:
        idx = torch.arange(total).as_strided(dims, strides, off)
        pos[idx.reshape(-1)] = True
    return view, base, pos, sentinel


# ======================================================================================
# Running one case
# ======================================================================================
TYPED = (OpenDNNError,)


class Finding:
    def __init__(self, cat, msg, bug=True):
        self.cat, self.msg, self.bug = cat, msg, bug

    def __repr__(self):
        return f"{self.cat}: {self.msg}"


def _exc_finding(phase, e):
    if isinstance(e, GraphNotSupportedError) and phase == "plan":
        return Finding("decline", str(e)[:300], bug=False)
    if isinstance(e, TYPED):
        if phase in ("validate",):
            return Finding("invalid", f"{type(e).__name__}: {str(e)[:300]}", bug=False)
        if phase in ("ref_plan", "run_ref"):
            return Finding(f"ref_typed:{phase}", f"{type(e).__name__}: {str(e)[:300]}", bug=False)
        return Finding(f"typed:{phase}:{type(e).__name__}", str(e)[:300])
    tb = traceback.extract_tb(e.__traceback__)
    where = ""
    for fr in reversed(tb):
        if "opendnn" in fr.filename or "triton" in fr.filename:
            where = f" at {fr.filename.split('site-packages/')[-1].split('src/')[-1]}:{fr.lineno}"
            break
    return Finding(f"untyped:{phase}:{type(e).__name__}", f"{str(e)[:300]!r}{where}")


def heuristic_knobs(g):
    from opendnn.engines.base import Target
    from opendnn.engines.registry import by_id

    configs = by_id(FUSION_ID).configs(g.op_graph, Target())
    return configs[0].knob_dict if configs else {}


def run_case(spec, verbose=False):
    """List of Findings (empty: the case passed)."""
    S = spec["space"]
    findings = []
    # ---- values
    values = {}
    for i, leaf in enumerate(spec["leaves"]):
        if leaf["kind"] == "tensor":
            values[i] = make_leaf_tensor(leaf, S, values, i)
    try:
        g, L, N, outs = build_graph(spec, values)
    except TYPED as e:
        return [Finding("invalid", f"build: {type(e).__name__}: {str(e)[:300]}", bug=False)]
    except Exception as e:  # noqa: BLE001
        return [_exc_finding("build", e)]
    try:
        g.validate()
    except Exception as e:  # noqa: BLE001
        return [_exc_finding("validate", e)]
    # ---- plans
    try:
        if spec["path"] == "heurA":
            g.build([HeurMode.A])
            name = g.get_plan_name_at_index(0)
            if not name.startswith("runtime_fusion"):
                findings.append(Finding("note_heur_engine", name, bug=False))
                g.create_execution_plan(FUSION_ID, heuristic_knobs(g))
        else:
            knobs = spec["knobs"] if spec["knobs"] is not None else heuristic_knobs(g)
            g.create_execution_plan(FUSION_ID, knobs)
    except Exception as e:  # noqa: BLE001
        return findings + [_exc_finding("plan", e)]
    fi = next(
        i
        for i in range(g.get_execution_plan_count())
        if g.get_plan_name_at_index(i).startswith("runtime_fusion")
    )
    fusion_name = g.get_plan_name_at_index(fi)
    try:
        g.create_execution_plan(REF_ID, {})
    except Exception as e:  # noqa: BLE001
        return findings + [_exc_finding("ref_plan", e)]
    names = [g.get_plan_name_at_index(i) for i in range(g.get_execution_plan_count())]
    ri = names.index(next(n for n in names if n.startswith("reference_f64")))
    fi = names.index(fusion_name)
    # ---- variant pack (inputs)
    feeds = {}
    for i, leaf in enumerate(spec["leaves"]):
        if leaf["kind"] == "tensor":
            feeds[L[i]] = values[i]
        elif leaf["kind"] == "scalar":
            b = leaf["bind"]
            if b == "tensor":
                feeds[L[i]] = scalar_tensor(leaf)
            elif b == "python":
                feeds[L[i]] = scalar_tensor(leaf).item()
    # ---- outputs (validated properties)
    olist = []
    for t, nm in outs:
        key = FROM_GDT.get(t.get_data_type())
        olist.append((t, nm, key, t.get_dim(), t.get_stride()))
    # also every node output the graph made an output by itself (unconsumed)
    named = {id(t) for t, _ in outs}
    for j, t in enumerate(N):
        if id(t) not in named and not t.get_is_virtual():
            key = FROM_GDT.get(t.get_data_type())
            olist.append((t, f"n{j}*", key, t.get_dim(), t.get_stride()))
    # ---- run

    def run(index, fill):
        bufs = {}
        for t, nm, key, dims, strides in olist:
            f = fill
            if not DT[key].is_floating_point and isinstance(fill, float):
                f = 0  # integer / boolean outputs take the 0 / 1 poisons only
            bufs[nm] = alloc_out(dims, strides, key, f)
        pack = dict(feeds)
        for t, nm, *_ in olist:
            pack[t] = bufs[nm][0]
        nb = g.get_workspace_size_plan_at_index(index)
        ws = torch.full((nb,), 255, dtype=torch.uint8) if nb else None
        g.execute_plan_at_index(pack, ws, index)
        return bufs

    def fills():
        fs = set()
        for t, nm, key, dims, strides in olist:
            fs.update([math.nan] if DT[key].is_floating_point else [0, 1])
        return sorted(fs, key=repr)

    try:
        ref = run(ri, math.nan if any(DT[o[2]].is_floating_point for o in olist) else 0)
    except Exception as e:  # noqa: BLE001
        return findings + [_exc_finding("run_ref", e)]
    got_by_fill = {}
    for fill in fills():
        try:
            got_by_fill[repr(fill)] = (fill, run(fi, fill))
        except Exception as e:  # noqa: BLE001
            return findings + [_exc_finding("run_fusion", e)]
    # ---- torch evaluation: exact and trials
    vals64 = {}
    for i, leaf in enumerate(spec["leaves"]):
        if leaf["kind"] == "tensor":
            vals64[i] = values[i].to(torch.float64)
        elif leaf["kind"] == "pynum":
            vals64[i] = torch.tensor([float(leaf["value"])], dtype=torch.float64)
        else:
            vals64[i] = torch.tensor([float(scalar_tensor(leaf).item())], dtype=torch.float64)
    node_meta = {j: (t.get_is_virtual(), FROM_GDT.get(t.get_data_type())) for j, t in enumerate(N)}
    od = g.op_graph
    double = any(d.data_type == DataType.DOUBLE for d in od.tensors.values()) or any(
        n.compute_data_type == DataType.DOUBLE for n in od.nodes
    )
    compute = "f64" if double else "f32"
    try:
        exact = evaluate(spec, vals64, node_meta)
        gen = torch.Generator().manual_seed(spec["seed"] + 1)
        tspecs = [
            Trial(gen, UNIT[compute], k >= 2, rtz=(k % 2 == 1 and BF16_RTZ_OK)) for k in range(6)
        ]
        trials = [(tr.rtz, evaluate(spec, vals64, node_meta, tr, compute)) for tr in tspecs]
    except Exception as e:  # noqa: BLE001
        return findings + [Finding("oracle_error", f"{type(e).__name__}: {e}", bug=False)]

    def oracle_key(nm):
        if nm.startswith("gs_"):
            return ("red", 0 if nm == "gs_sum" else 1)
        if nm.startswith("red"):
            return ("red", int(nm[3:]))
        return ("node", int(nm.rstrip("*")[1:]))

    for t, nm, key, dims, strides in olist:
        ok_ = oracle_key(nm)
        e64 = exact[ok_].expand(dims) if list(exact[ok_].shape) != dims else exact[ok_]
        T = [
            (rtz, tr[ok_].expand(dims) if list(tr[ok_].shape) != dims else tr[ok_])
            for rtz, tr in trials
        ]
        T = torch.stack([round_out(x, key, rtz) for rtz, x in T])
        r_eng = ref[nm][0].to(torch.float64)
        r_torch = round_out(e64, key)
        # the reference engine against PyTorch
        bad = judge(r_eng, r_torch, T, key, e64, slack_only_rounding=True)
        if bad is not None:
            findings.append(Finding("ref_vs_torch", f"output {nm} ({key}): {bad}", bug=False))
        for fkey, (fill, bufs) in got_by_fill.items():
            view, base, pos, sentinel = bufs[nm]
            if not DT[key].is_floating_point and isinstance(fill, float):
                continue
            # gaps
            gap = ~pos
            if bool(gap.any()):
                gb = base[gap]
                changed = (gb != sentinel) if gb.dtype != torch.bool else (gb != sentinel)
                if bool(changed.any()):
                    findings.append(
                        Finding(
                            "oob_write",
                            f"output {nm} ({key}) dims={dims} "
                            f"strides={strides}: {int(changed.sum())} gap "
                            f"elements overwritten",
                        )
                    )
            f = view.to(torch.float64)
            bad = judge(f, r_eng, T, key, e64)
            if bad is not None:
                cat = "mismatch"
                if isinstance(fill, float) and math.isnan(fill):
                    # NaN where none expected: written or not? run once more with 5.0
                    try:
                        again = run(fi, 5.0)[nm][0].to(torch.float64)
                        if not torch.equal(
                            torch.nan_to_num(again, nan=1234.5), torch.nan_to_num(f, nan=1234.5)
                        ):
                            diff = torch.nan_to_num(again, nan=1234.5) != torch.nan_to_num(
                                f, nan=1234.5
                            )
                            cat = "unwritten"
                            bad += f"; {int(diff.sum())} elements depend on the poison"
                    except Exception:  # noqa: BLE001
                        pass
                findings.append(
                    Finding(
                        cat, f"output {nm} ({key}) dims={dims} strides={strides} fill={fill}: {bad}"
                    )
                )
    return findings


def judge(f, r, T, key, e64, slack_only_rounding=False):
    """None if ``f`` is acceptable against ``r`` with trials ``T``, else a description."""
    if f.numel() == 0:
        return None
    if key in BASE_TOL:
        base = BASE_TOL[key] if key != "f64" else 1e-12
        if slack_only_rounding:
            base = max(base, 1e-9)
        fin_r = torch.isfinite(r)
        dev = (T - r.unsqueeze(0)).abs()
        dev = torch.where(torch.isnan(dev), torch.full_like(dev, math.inf), dev)
        # a trial landing on the same non-finite value as r is no deviation
        same = (T == r.unsqueeze(0)) | (torch.isnan(T) & torch.isnan(r).unsqueeze(0))
        dev = torch.where(same, torch.zeros_like(dev), dev)
        sens = dev.max(dim=0).values
        tol = base * (1 + r.abs()) + 4 * sens
        err = (f - r).abs()
        ok = torch.where(fin_r, err <= tol, torch.zeros_like(fin_r))
        # r non-finite: f equal to it, or a trial reached f's class
        nan_r, nan_f = torch.isnan(r), torch.isnan(f)
        ok |= nan_r & nan_f
        ok |= torch.isinf(r) & (f == r)
        ok |= (~fin_r) & (sens == math.inf) & torch.isnan(f).logical_not()
        ok |= (~fin_r) & (sens == math.inf) & nan_f & torch.isnan(T).any(0)
        # r finite, f not: only where some trial was not finite either
        ok |= (
            fin_r
            & ~torch.isfinite(f)
            & ((torch.isnan(T) & nan_f.unsqueeze(0)).any(0) | (T == f.unsqueeze(0)).any(0))
        )
    else:
        # exact, or one of the trials' values, or (large values: a float32 result
        # truncated) within the float32 tolerance and the trials' spread
        sens = (T - r.unsqueeze(0)).abs().max(dim=0).values
        tol = 1e-5 * r.abs() + 4 * sens
        ok = (f == r) | (T == f.unsqueeze(0)).any(0) | ~torch.isfinite(e64) | ((f - r).abs() <= tol)
    bad = ~ok
    if not bool(bad.any()):
        return None
    idx = tuple(int(i) for i in bad.nonzero()[0])
    msg = (
        f"{int(bad.sum())} of {f.numel()} bad; first at {idx}: got {f[idx].item()!r}, "
        f"expected {r[idx].item()!r} (float64 {e64[idx].item()!r}"
    )
    if tol is not None:
        msg += f", tol {tol[idx].item():.3g}"
    return msg + ")"


# ======================================================================================
# Minimization (greedy, on the spec)
# ======================================================================================
def _signature(findings):
    return {f.cat for f in findings if f.bug}


def _variants(spec):
    """Smaller / simpler specs, most aggressive first."""
    S = spec["space"]
    # drop reductions / outputs / knobs / graph types
    if spec["knobs"] is not None:
        yield dict(spec, knobs=None)
        for k in list(spec["knobs"]):
            if k in ("num_warps", "num_stages"):
                kn = dict(spec["knobs"])
                del kn[k]
                yield dict(spec, knobs=kn)
    if spec["path"] != "configs":
        yield dict(spec, path="configs")
    if len(spec["reductions"]) > 1:
        for k in range(len(spec["reductions"])):
            s = copy.deepcopy(spec)
            del s["reductions"][k]
            yield s
    if spec["reductions"] and not spec["genstats"]:
        s = copy.deepcopy(spec)
        s["reductions"] = []
        last = str(len(s["nodes"]) - 1)
        s["outputs"].setdefault(last, {"dtype": None, "stride": "packed", "stride_seed": 0})
        yield s
    for key in ("io", "inter", "compute"):
        if spec[key] is not None:
            yield dict(spec, **{key: None})
    for js in list(spec["outputs"]):
        if len(spec["outputs"]) > 1 or spec["reductions"]:
            s = copy.deepcopy(spec)
            del s["outputs"][js]
            yield s
        o = spec["outputs"][js]
        if o["dtype"] is not None:
            s = copy.deepcopy(spec)
            s["outputs"][js]["dtype"] = None
            yield s
        if o["stride"] != "packed":
            s = copy.deepcopy(spec)
            s["outputs"][js]["stride"] = "packed"
            yield s
    for k, r in enumerate(spec["reductions"]):
        for fld, val in (("dtype", None), ("stride", "packed")):
            if r[fld] != val:
                s = copy.deepcopy(spec)
                s["reductions"][k][fld] = val
                yield s
    # remove a node: its users read its first operand instead
    n = len(spec["nodes"])
    for j in range(n - 1, -1, -1):
        s = _bypass(spec, j)
        if s is not None:
            yield s
    # leaves: simpler layout / dtype / values
    for i, leaf in enumerate(spec["leaves"]):
        if leaf["kind"] != "tensor":
            s = copy.deepcopy(spec)
            s["leaves"][i] = {
                "kind": "tensor",
                "seed": 1,
                "dom": leaf["dom"],
                "mask": [0] * len(S),
                "drop": 0,
                "dtype": "f32",
                "layout": "packed",
                "layout_seed": 0,
                "explicit": True,
                "scale": 1.0,
                "special": False,
                "zeros": False,
            }
            yield s
            continue
        for fld, val in (
            ("layout", "packed"),
            ("explicit", False),
            ("special", False),
            ("zeros", False),
            ("scale", 1.0),
            ("dtype", "f32"),
            ("drop", 0),
        ):
            if leaf.get(fld) != val and not (fld == "dtype" and leaf["dtype"] == "bool"):
                s = copy.deepcopy(spec)
                s["leaves"][i][fld] = val
                yield s
        if any(leaf["mask"]):
            for d in range(len(S)):
                if leaf["mask"][d] and S[d] > 1:
                    s = copy.deepcopy(spec)
                    s["leaves"][i]["mask"][d] = 0
                    yield s
    # shrink the space
    for d in range(len(S)):
        if len(S) > 1:
            yield _drop_dim(spec, d)
        for v in sorted({1, 2, 3, S[d] // 2}):
            if v < S[d]:
                s = copy.deepcopy(spec)
                s["space"][d] = v
                yield s


def _drop_dim(spec, d):
    s = copy.deepcopy(spec)
    del s["space"][d]
    for leaf in s["leaves"]:
        if leaf["kind"] == "tensor":
            del leaf["mask"][d]
            if d < leaf["drop"]:
                leaf["drop"] -= 1
            leaf["drop"] = min(leaf["drop"], len(leaf["mask"]))
    for r in s["reductions"]:
        del r["kept"][d]
    for node in s["nodes"]:
        if node["op"] == "gen_index":
            node["attrs"]["axis"] = max(
                0,
                min(
                    node["attrs"]["axis"] - (1 if node["attrs"]["axis"] > d else 0),
                    len(s["space"]) - 1,
                ),
            )
    return s


def _bypass(spec, j):
    s = copy.deepcopy(spec)
    node = s["nodes"][j]
    repl = node["args"][0]
    if repl[0] == "node" and False:
        pass

    # renumber: node j removed, refs to j -> repl, refs > j shift down
    def fix(a):
        if a[0] == "node":
            if a[1] == j:
                return list(repl)
            if a[1] > j:
                return ["node", a[1] - 1]
        return a

    del s["nodes"][j]
    if not s["nodes"]:
        return None
    for nd in s["nodes"]:
        nd["args"] = [fix(a) for a in nd["args"]]
    outs = {}
    for js, p in s["outputs"].items():
        k = int(js)
        if k == j:
            continue
        outs[str(k - 1 if k > j else k)] = p
    s["outputs"] = outs
    for r in s["reductions"]:
        r["src"] = fix(r["src"])
        if r["src"][0] == "leaf":
            return None
    if not s["outputs"] and not s["reductions"]:
        s["outputs"][str(len(s["nodes"]) - 1)] = {
            "dtype": None,
            "stride": "packed",
            "stride_seed": 0,
        }
    # unused leaves stay (harmless)
    return s


def minimize(spec, target_cats, budget_s=240):
    t0 = time.time()
    best = spec
    improved = True
    while improved and time.time() - t0 < budget_s:
        improved = False
        for v in _variants(best):
            if time.time() - t0 > budget_s:
                break
            try:
                fs = run_case(v)
            except Exception:  # noqa: BLE001
                continue
            if _signature(fs) & target_cats:
                best = v
                improved = True
                break
    return best


# ======================================================================================
def describe(spec):
    parts = []
    for j, n in enumerate(spec["nodes"]):
        a = ",".join(f"{'x' if k == 'leaf' else 'n'}{i}" for k, i in n["args"])
        at = "" if not n["attrs"] else str(n["attrs"])
        parts.append(f"n{j}={n['op']}({a}){at}")
    for k, r in enumerate(spec["reductions"]):
        parts.append(f"red{k}={r['mode']}({r['src'][0][0]}{r['src'][1]})")
    return (
        f"S={spec['space']} "
        + " ".join(parts)
        + (" genstats" if spec["genstats"] else "")
        + (f" knobs={spec['knobs']}" if spec["knobs"] else "")
        + (" heurA" if spec["path"] == "heurA" else "")
    )


def parse_seeds(s):
    out = []
    for part in s.split(","):
        if "-" in part:
            a, b = part.split("-")
            out.extend(range(int(a), int(b) + 1))
        else:
            out.append(int(part))
    return out


class CaseTimeout(Exception):
    pass


def _alarm(signum, frame):
    raise CaseTimeout()


def main(argv=None):
    warnings.simplefilter("ignore")
    signal.signal(signal.SIGALRM, _alarm)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="0-99")
    ap.add_argument("--time-limit", type=float, default=0, help="stop after this many seconds")
    ap.add_argument("--show", action="store_true", help="print each case's spec")
    ap.add_argument("--minimize", action="store_true", help="shrink failing cases")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--case-timeout", type=float, default=90)
    ap.add_argument(
        "--strict-bf16",
        action="store_true",
        help="bfloat16 conversions must round to nearest (known bug: they truncate)",
    )
    ap.add_argument(
        "--avoid",
        default="",
        help="comma list of known bugs the generator steers around: "
        "f64 (float64 compute with bfloat16), scalar (pass-by-value scalars "
        "outside plain arithmetic), pow (pow(x, 0) and pow(1, y)), "
        "mod (fmod with a near-integral quotient)",
    )
    args = ap.parse_args(argv)
    global BF16_RTZ_OK
    BF16_RTZ_OK = not args.strict_bf16
    AVOID.update(a for a in args.avoid.split(",") if a)
    seeds = parse_seeds(args.seeds)
    t0 = time.time()
    stats = Counter()
    kinds = Counter()
    cats = Counter()
    first_seed = {}
    decl = Counter()
    for seed in seeds:
        if args.time_limit and time.time() - t0 > args.time_limit:
            print(f"time limit reached before seed {seed}")
            break
        spec = gen_case(seed)
        kind = (
            "genstats" if spec["genstats"] else "reduction" if spec["reductions"] else "pointwise"
        ) + ("+knobs" if spec["knobs"] else "")
        kinds[kind] += 1
        ts = time.time()
        signal.alarm(int(args.case_timeout))
        try:
            fs = run_case(spec)
        except CaseTimeout:
            fs = [Finding("slow", f"over {args.case_timeout}s", bug=False)]
        except Exception as e:  # noqa: BLE001  (a bug of the fuzzer itself)
            fs = [
                Finding(
                    "fuzzer_error", f"{type(e).__name__}: {e}\n{traceback.format_exc()}", bug=False
                )
            ]
        signal.alarm(0)
        if any("CaseTimeout" in f.msg for f in fs):
            fs = [Finding("slow", f"over {args.case_timeout}s", bug=False)]
        dt = time.time() - ts
        stats["cases"] += 1
        if args.show:
            print(json.dumps(spec))
        bugs = [f for f in fs if f.bug]
        for f in fs:
            cats[f.cat] += 1
            first_seed.setdefault(f.cat, seed)
            if f.cat == "decline":
                reason = f.msg.split("runtime_fusion: ")[-1]
                decl[reason[:90]] += 1
        if not fs:
            stats["passed"] += 1
        elif bugs:
            stats["failed"] += 1
        else:
            stats["noted"] += 1
        if (
            bugs
            or args.show
            or any(f.cat in ("fuzzer_error", "oracle_error", "ref_vs_torch") for f in fs)
        ) and not args.quiet:
            print(f"seed {seed} [{dt:.1f}s] {describe(spec)}")
            for f in fs:
                print(f"    {f.cat}: {f.msg}")
        if bugs and args.minimize:
            m = minimize(spec, {f.cat for f in bugs})
            print(f"  minimized: {describe(m)}")
            print("  spec: " + json.dumps(m))
            for f in run_case(m):
                print(f"    {f.cat}: {f.msg}")
        sys.stdout.flush()
    el = time.time() - t0
    print(
        f"\n{stats['cases']} cases in {el:.0f}s: {stats['passed']} passed, "
        f"{stats['noted']} with notes only, {stats['failed']} with findings"
    )
    print("kinds: " + ", ".join(f"{k}={v}" for k, v in sorted(kinds.items())))
    print(
        "categories: "
        + ", ".join(f"{k}={v} (first seed {first_seed[k]})" for k, v in sorted(cats.items()))
    )
    if decl:
        print("decline reasons:")
        for r, c in decl.most_common(15):
            print(f"   {c:5d}  {r}")


if __name__ == "__main__":
    main()
