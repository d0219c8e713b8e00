"""Seeded differential fuzzer of special values: random small graphs whose inputs mix
normal values with +-inf, NaN, +-0, subnormals, tiny and huge magnitudes, run through the
frontend graph API on a fast engine (runtime fusion for pointwise graphs and reductions,
the norm engine, the softmax engine) and on the float64 reference engine, each compared
with PyTorch.

Families (``FAMILIES``):

- ``pointwise``: a chain of one to three pointwise nodes (every mode of
  ``ops.pointwise.MODES`` but GEN_INDEX, activations with PyTorch's parameter sets and
  cuDNN's general clipped relu, the backward modes) over one to three inputs, some
  broadcast. Discontinuous modes (ceil, floor, comparisons, logical operations, mod,
  pow, a select's mask, a backward mode's x) read graph inputs only, never a computed
  value, so that a rounding error cannot flip them.
- ``reduction``: an optional unary pointwise node, then a reduction of any mode over
  some axes.
- ``norm``: layer or RMS norm forward in training (Y, MEAN, INV_VARIANCE), rows mixing
  magnitudes, optionally every row scaled by 1e20 or 1e-20.
- ``softmax``: softmax or log-softmax along an axis.

Data types: float32, float16, bfloat16 (computed in float32) and float64 (computed in
float64: the graph's compute and intermediate types are DOUBLE).

Ground truth. PyTorch evaluates the graph node by node in float64 (``E64``), each output
then cast to the output type. An element passes when it matches E64 or, for an engine
computing in float32, one of three float32 readings of the same chain: PyTorch's float32
functions (``E32``), those with a NaN of the float32 function alone replaced by its
float64 value (PyTorch's float32 gelu(inf) is NaN, its float64 one inf), and PyTorch's
float64 functions with every node's value rounded to float32. Matching means NaN exactly
where the truth has NaN, +-inf exactly where it has +-inf (sign included), and finite
values within a tolerance. The float32 readings admit what float32 itself does to a
chain (exp(100) - exp(100) is inf - inf = NaN) and nothing else; norms are compared with
E64 alone (PyTorch's own float32 layer norm of 1e20-sized rows is NaN). A product whose
partial products can leave float32's range (in some order) binds only an expected NaN.

Tolerance, per element: c u sum_j |d out / d v_j| s_j + 2 u_out |e| + tiny, where v_j
runs over the values the engine computes (node outputs, not the exact inputs), the
derivatives come from PyTorch's autograd in float64, u is the compute type's unit
roundoff, s_j the size of the rounding a node makes (|v_j| for most modes; |dy| for a
backward mode, |x| for gelu, whose tail PyTorch computes as 1 + erf; n-term sums add
sqrt(n) sum |terms|), u_out the output type's unit roundoff and tiny a few of its
smallest subnormals. Ill-conditioned chains (sin(exp(20))) so get a wide tolerance and
well-conditioned ones (tanh(1e-7)) a relative one. Signs of zeros are compared for a
single unary forward node whose input is +-0 (tanh(-0) = -0, relu(-0) = -0).

Command line (a failing case prints this line with its index)::

    python tests/reliability/fuzz_values.py --seed S --cases N    # cases 0 .. N-1
    python tests/reliability/fuzz_values.py --seed S --case I     # one case, verbose
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import random
import sys
import time
import warnings
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)
if os.path.join(os.path.dirname(TESTS), "src") not in sys.path:
    sys.path.insert(0, os.path.join(os.path.dirname(TESTS), "src"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from _util import TORCH_TO_DT, heuristic_knobs, run_plan  # noqa: E402

import opendnn.frontend as cudnn  # noqa: E402
from opendnn.enums import DataType  # noqa: E402
from opendnn.enums import PointwiseMode as M  # noqa: E402
from opendnn.enums import ReductionMode as R  # noqa: E402

FAMILIES = ("pointwise", "reduction", "norm", "softmax")
ENGINES = {"pointwise": 1, "reduction": 1, "norm": 26, "softmax": 25}  # fast engine ids
REFERENCE = 0
INF, NAN = math.inf, math.nan
SPECIALS = [
    INF,
    -INF,
    NAN,
    0.0,
    -0.0,
    1e-40,
    -1e-40,
    5e-39,
    1e-30,
    -1e-30,
    1e-7,
    -1e-7,
    1e20,
    -1e20,
    1e30,
    -1e30,
    3e38,
    -3e38,
    88.0,
    -88.0,
    100.0,
    -100.0,
    20.0,
    -20.0,
    1.0,
    -1.0,
    0.5,
    -3.0,
]
U = {
    torch.float64: 2.0**-53,
    torch.float32: 2.0**-24,
    torch.float16: 2.0**-11,
    torch.bfloat16: 2.0**-8,
}
SLACK = 16  # c: ulps of rounding a node may make beyond its own size
SHAPES = [(37,), (3, 13), (2, 3, 7), (4, 9)]


def repro_line(seed: int, index: int) -> str:
    return f"python tests/reliability/fuzz_values.py --seed {seed} --case {index}"


# ---- the pointwise modes: arity, PyTorch, rounding size, operand rules -----------------
def _relu_torch(x, at):
    lo, hi, slope = at["relu_lower_clip"], at["relu_upper_clip"], at["relu_lower_clip_slope"]
    if slope == 0 and lo == 0 and hi == INF:
        return torch.relu(x)
    if slope == 0:
        return F.hardtanh(x, lo, hi)
    if lo == 0 and hi == INF:
        return F.leaky_relu(x, slope)
    # cuDNN's general clipped relu with a slope: PyTorch has no such function (a NaN x
    # takes the slope's side, as in leaky_relu)
    return torch.where(x > lo, torch.where(x > hi, hi, x), lo + slope * (x - lo))


def _softplus_torch(x, beta):
    # cuDNN's softplus has no threshold (PyTorch's F.softplus returns x beyond beta x > 20)
    z = beta * x
    return (torch.where(z > 0, z, 0.0) + torch.log1p(torch.exp(-z.abs()))) / beta


def _fmod(a, b):
    # NumPy's fmod is C's (exact); PyTorch's vectorized float32 fmod is NaN for huge a / b
    with np.errstate(all="ignore"):
        return torch.from_numpy(np.fmod(a.detach().numpy(), b.detach().numpy()))


FORWARD = {
    M.ABS: torch.abs,
    M.CEIL: torch.ceil,
    M.FLOOR: torch.floor,
    M.COS: torch.cos,
    M.SIN: torch.sin,
    M.TAN: torch.tan,
    M.EXP: torch.exp,
    M.LOG: torch.log,
    M.NEG: torch.neg,
    M.SQRT: torch.sqrt,
    M.RSQRT: torch.rsqrt,
    M.RECIPROCAL: torch.reciprocal,
    M.ERF: torch.erf,
    M.IDENTITY: torch.clone,
    M.TANH_FWD: torch.tanh,
    M.SIGMOID_FWD: torch.sigmoid,
    M.GELU_FWD: F.gelu,
    M.GELU_APPROX_TANH_FWD: lambda x: F.gelu(x, approximate="tanh"),
}
PARAM_FORWARD = {
    M.RELU_FWD: _relu_torch,
    M.ELU_FWD: lambda x, at: F.elu(x, at["elu_alpha"]),
    M.SOFTPLUS_FWD: lambda x, at: _softplus_torch(x, at["softplus_beta"]),
    # F.silu's backward is PyTorch's swish gradient (autograd of x sigmoid(b x) adds two
    # terms, inf - inf = NaN where the gradient is -inf); silu(b x) / b is swish
    M.SWISH_FWD: lambda x, at: F.silu(at["swish_beta"] * x) / at["swish_beta"],
}
BACKWARD_OF = {
    M.RELU_BWD: M.RELU_FWD,
    M.TANH_BWD: M.TANH_FWD,
    M.SIGMOID_BWD: M.SIGMOID_FWD,
    M.ELU_BWD: M.ELU_FWD,
    M.GELU_BWD: M.GELU_FWD,
    M.GELU_APPROX_TANH_BWD: M.GELU_APPROX_TANH_FWD,
    M.SOFTPLUS_BWD: M.SOFTPLUS_FWD,
    M.SWISH_BWD: M.SWISH_FWD,
}
BINARY = {
    M.ADD: torch.add,
    M.SUB: torch.sub,
    M.MUL: torch.mul,
    M.DIV: torch.div,
    M.ADD_SQUARE: lambda a, b: a + b * b,
    M.MAX: torch.maximum,
    M.MIN: torch.minimum,
    M.MOD: _fmod,
    M.POW: torch.pow,
    M.CMP_EQ: lambda a, b: (a == b),
    M.CMP_NEQ: lambda a, b: (a != b),
    M.CMP_GT: lambda a, b: (a > b),
    M.CMP_GE: lambda a, b: (a >= b),
    M.CMP_LT: lambda a, b: (a < b),
    M.CMP_LE: lambda a, b: (a <= b),
    M.LOGICAL_AND: lambda a, b: (a != 0) & (b != 0),
    M.LOGICAL_OR: lambda a, b: (a != 0) | (b != 0),
}
DISCONTINUOUS = {
    M.CEIL,
    M.FLOOR,
    M.LOGICAL_NOT,
    M.MOD,
    M.POW,
    M.CMP_EQ,
    M.CMP_NEQ,
    M.CMP_GT,
    M.CMP_GE,
    M.CMP_LT,
    M.CMP_LE,
    M.LOGICAL_AND,
    M.LOGICAL_OR,
}
RELU_SETS = [
    (0.0, INF, 0.0),
    (0.0, 6.0, 0.0),
    (-1.0, 1.0, 0.0),
    (-0.5, 2.5, 0.0),
    (0.0, INF, 0.01),
    (0.0, INF, 0.2),
    (0.0, 3.0, 0.0),
    (-0.5, 1.25, 0.1),
]


def _mode_attrs(mode, r: random.Random) -> dict:
    base = BACKWARD_OF.get(mode, mode)
    if base == M.RELU_FWD:
        lo, hi, slope = r.choice(RELU_SETS)
        return {"relu_lower_clip": lo, "relu_upper_clip": hi, "relu_lower_clip_slope": slope}
    if base == M.ELU_FWD:
        return {"elu_alpha": r.choice([1.0, 0.4, 2.0])}
    if base == M.SOFTPLUS_FWD:
        return {"softplus_beta": r.choice([1.0, 2.5, 0.5])}
    if base == M.SWISH_FWD:
        return {"swish_beta": r.choice([1.0, 1.7])}
    return {}


def _forward_fn(mode, at):
    if mode in FORWARD:
        return FORWARD[mode]
    return lambda x: PARAM_FORWARD[mode](x, at)


def torch_node(mode, at, args):
    """PyTorch's value of one pointwise node (inputs already in the evaluation type)."""
    if mode == M.LOGICAL_NOT:
        return (args[0] == 0).to(args[0].dtype)
    if mode == M.BINARY_SELECT:
        return torch.where(args[2] != 0, args[0], args[1])
    if mode in BACKWARD_OF:
        dy, x = torch.broadcast_tensors(*args)
        x = x.detach()
        if mode == M.SOFTPLUS_BWD:  # the derivative of the threshold-free softplus
            return dy * torch.sigmoid(at["softplus_beta"] * x)
        lo, hi, slope = (
            at.get(k) for k in ("relu_lower_clip", "relu_upper_clip", "relu_lower_clip_slope")
        )
        if mode == M.RELU_BWD and slope != 0 and hi != INF:
            # cuDNN's general clipped relu: no PyTorch function, its rule (autograd of a
            # composite would add +0 to a -0 gradient)
            return torch.where(x > lo, torch.where(x >= hi, 0.0, dy), slope * dy)
        f = _forward_fn(BACKWARD_OF[mode], at)
        with torch.enable_grad():  # PyTorch's own backward (relu's drops dy where x <= 0)
            xg = x.clone().requires_grad_(True)
            (gx,) = torch.autograd.grad(f(xg), xg, dy.detach())
            xg = x.clone().requires_grad_(True)
            (slope,) = torch.autograd.grad(f(xg), xg, torch.ones_like(xg))
            # at a NaN x, PyTorch's CPU vectorized hardtanh / elu backward give 0 / NaN and
            # its scalar path and CUDA kernels dy: the library follows CUDA
            nan = torch.isnan(x).reshape(-1).nonzero().flatten().tolist()
            flat_x, flat_dy, gx = x.reshape(-1), dy.detach().reshape(-1), gx.clone()
            for i in nan:
                xi = flat_x[i : i + 1].clone().requires_grad_(True)
                (gi,) = torch.autograd.grad(f(xi), xi, flat_dy[i : i + 1])
                gx.view(-1)[i] = gi[0]
        # the value PyTorch gives, with d / d dy = f'(x) for the error estimate of a chain
        return _WithSlope.apply(gx, dy, slope) if dy.requires_grad else gx
    if mode in BINARY:
        out = BINARY[mode](*args)
        return out.to(args[0].dtype)
    return _forward_fn(mode, at)(args[0])


class _WithSlope(torch.autograd.Function):
    """``value`` unchanged, differentiated as ``slope`` * d dy (a backward mode's value is
    PyTorch's masked product, whose sensitivity to dy is f'(x))."""

    @staticmethod
    def forward(ctx, value, dy, slope):
        ctx.save_for_backward(slope)
        return value.clone()

    @staticmethod
    def backward(ctx, grad):
        (slope,) = ctx.saved_tensors
        return None, grad * slope, None


def rounding_size(mode, args, out):
    """s_j: the size of the rounding error of one node (see the module docstring)."""
    a = out.abs()
    if mode == M.SWISH_BWD:  # PyTorch's 1 - s loses its tail, times beta x
        return torch.maximum(a, args[0].abs() * (1.0 + args[1].abs() * 2.0))
    if mode in BACKWARD_OF:
        return torch.maximum(a, args[0].abs())
    if mode in (M.GELU_FWD, M.GELU_APPROX_TANH_FWD):
        return torch.maximum(a, args[0].abs())
    if mode == M.SWISH_FWD:  # x times a sigmoid that may be subnormal
        return a + args[0].abs() * torch.finfo(torch.float32).smallest_normal
    if mode == M.ADD_SQUARE:
        return args[0].abs() + args[1] * args[1]
    if mode == M.POW:
        with np.errstate(all="ignore"):
            k = (args[1] * torch.log2(args[0].abs())).abs()
        return a * (1.0 + torch.nan_to_num(k, nan=0.0))
    return a


def arity(mode) -> int:
    if mode == M.BINARY_SELECT:
        return 3
    if mode in BINARY or mode in BACKWARD_OF:
        return 2
    return 1


POINTWISE_MODES = [m for m in M if m != M.GEN_INDEX]


# ---- values -------------------------------------------------------------------------------
def draw_values(
    r: random.Random, gen: torch.Generator, shape, dtype, density: float, scale: float = 1.0
) -> torch.Tensor:
    """Normal values (|x| in [0.1, 3], random signs) with about ``density`` of them
    replaced by special values; float64 values cast to ``dtype``."""
    n = math.prod(shape)
    x = torch.rand(n, generator=gen, dtype=torch.float64) * 2.9 + 0.1
    x = x * torch.where(torch.rand(n, generator=gen) < 0.5, -1.0, 1.0).double()
    for i in range(n):
        if r.random() < density:
            x[i] = r.choice(SPECIALS)
    x = (x * scale).to(dtype)
    if dtype == torch.bfloat16:
        # Triton 3.6's interpreter converts subnormal bfloat16 to float32 wrongly (the
        # compiled conversion is exact): bfloat16 inputs hold none (results may)
        x = torch.where(x.abs() < torch.finfo(dtype).smallest_normal, x * 0, x)
    return x.reshape(shape)


# ---- cases --------------------------------------------------------------------------------
@dataclasses.dataclass
class Case:
    """One generated case: its family, data type, graph description and inputs."""

    seed: int
    index: int
    family: str
    dtype: torch.dtype
    inputs: list  # torch tensors (graph inputs)
    nodes: list = dataclasses.field(default_factory=list)  # pointwise: (mode, attrs, operands)
    red_mode: R | None = None
    out_dims: tuple | None = None
    norm: str = ""
    log: bool = False
    axis: int = -1

    def describe(self) -> str:
        dt = str(self.dtype).replace("torch.", "")
        shapes = [tuple(t.shape) for t in self.inputs]
        if self.family in ("pointwise", "reduction"):
            ops = " -> ".join(
                f"{m.name}{_short(at)}({','.join(map(str, o))})" for m, at, o in self.nodes
            )
            red = f" -> {self.red_mode.name}{list(self.out_dims)}" if self.red_mode else ""
            return f"{self.family} {dt} {shapes}: {ops or 'x'}{red}"
        if self.family == "norm":
            return f"norm {self.norm} {dt} {shapes}"
        return f"softmax{' log' if self.log else ''} {dt} {shapes} axis={self.axis}"


def _short(at: dict) -> str:
    if not at:
        return ""
    return "[" + ",".join(f"{v:g}" for v in at.values()) + "]"


def make_case(seed: int, index: int, family: str | None = None) -> Case:
    """Case ``index`` of ``seed``: the same case on every machine and run."""
    key = zlib.crc32(f"{seed}:{index}".encode())
    r = random.Random(key)
    gen = torch.Generator().manual_seed(key)
    family = family or r.choices(FAMILIES, weights=(6, 2, 1, 1))[0]
    dtype = r.choices(
        [torch.float32, torch.float64, torch.float16, torch.bfloat16], weights=(5, 2, 1.5, 1.5)
    )[0]
    density = r.choice([0.1, 0.3, 0.6])
    if family == "norm":  # the norm engine takes float32, float16 and bfloat16
        dtype = torch.float32 if dtype == torch.float64 else dtype
        return _norm_case(seed, index, r, gen, dtype, density)
    if family == "softmax":
        shape = r.choice([(3, 13), (2, 3, 7), (5, 6)])
        x = draw_values(r, gen, shape, dtype, density * 0.5)
        return Case(
            seed,
            index,
            "softmax",
            dtype,
            [x],
            log=r.random() < 0.5,
            axis=r.choice([-1, 0]) if len(shape) == 2 else r.choice([-1, 1]),
        )
    shape = r.choice(SHAPES)
    if family == "reduction":
        x = draw_values(r, gen, shape, dtype, density * 0.5)
        nodes = []
        if r.random() < 0.5:
            mode = r.choice(
                [m for m in POINTWISE_MODES if arity(m) == 1 and m not in DISCONTINUOUS]
            )
            nodes.append((mode, _mode_attrs(mode, r), ["in0"]))
        keep = [r.random() < 0.5 for _ in shape]
        if all(keep):
            keep[r.randrange(len(shape))] = False
        out_dims = tuple(d if k else 1 for d, k in zip(shape, keep))
        return Case(seed, index, "reduction", dtype, [x], nodes, r.choice(list(R)), out_dims)
    return _pointwise_case(seed, index, r, gen, dtype, density, shape)


def _pointwise_case(seed, index, r, gen, dtype, density, shape) -> Case:
    n_inputs = r.choice([1, 2, 2, 3])
    inputs = [draw_values(r, gen, shape, dtype, density)]
    for _ in range(n_inputs - 1):
        sub = list(shape)
        if r.random() < 0.3:  # broadcast along a random axis
            sub[r.randrange(len(sub))] = 1
        inputs.append(draw_values(r, gen, tuple(sub), dtype, density))
    names = [f"in{i}" for i in range(n_inputs)]
    nodes, computed = [], []
    for k in range(r.choice([1, 1, 2, 3])):
        if k == 0:
            mode = r.choice(POINTWISE_MODES)
        else:  # a continuous mode reading the last value
            mode = r.choice([m for m in POINTWISE_MODES if m not in DISCONTINUOUS])
        ops = []
        for j in range(arity(mode)):
            exact_only = (
                mode in DISCONTINUOUS
                or (mode == M.BINARY_SELECT and j == 2)
                or (mode in BACKWARD_OF and j == 1)
            )
            if j == 0 and computed and not exact_only:
                ops.append(computed[-1])
            elif exact_only or not computed or r.random() < 0.6:
                ops.append(r.choice(names) if j else names[0])
            else:
                ops.append(r.choice(computed))
        if mode == M.BINARY_SELECT and len(inputs) > 1 and r.random() < 0.5:
            # a 0 / 1 mask with a special value or two
            m = (torch.rand(inputs[-1].shape, generator=gen) < 0.5).to(dtype)
            inputs[-1] = torch.where(torch.rand(m.shape, generator=gen) < 0.1, inputs[-1], m)
        nodes.append((mode, _mode_attrs(mode, r), ops))
        computed.append(f"v{k}")
    # the graph holds only the inputs its nodes read
    used = sorted({int(o[2:]) for _, _, ops in nodes for o in ops if o.startswith("in")})
    rename = {f"in{i}": f"in{j}" for j, i in enumerate(used)}
    nodes = [(m, at, [rename.get(o, o) for o in ops]) for m, at, ops in nodes]
    return Case(seed, index, "pointwise", dtype, [inputs[i] for i in used], nodes)


def _norm_case(seed, index, r, gen, dtype, density) -> Case:
    rows, length = r.choice([(3, 16), (4, 33), (2, 64)])
    scale = r.choice([1.0, 1.0, 1e20, 1e-20])
    x = draw_values(r, gen, (rows, length), torch.float64, density * 0.3, scale)
    if r.random() < 0.5:  # some rows without specials: a shifted, narrow distribution
        x[0] = (1.0 + 1e-3 * torch.randn(length, generator=gen, dtype=torch.float64)) * scale
    x = x.to(dtype)
    w = draw_values(r, gen, (1, length), dtype, 0.0)
    b = draw_values(r, gen, (1, length), dtype, 0.0)
    return Case(seed, index, "norm", dtype, [x, w, b], norm=r.choice(["layernorm", "rmsnorm"]))


# ---- graphs ---------------------------------------------------------------------------
def _graph(case: Case):
    double = case.dtype == torch.float64
    t = DataType.DOUBLE if double else DataType.FLOAT
    return cudnn.pygraph(intermediate_data_type=t, compute_data_type=t)


def build(case: Case):
    """(graph, feeds, outputs) of ``case``."""
    g = _graph(case)
    ts = [
        g.tensor(list(x.shape), list(x.stride()), TORCH_TO_DT[x.dtype], name=f"in{i}")
        for i, x in enumerate(case.inputs)
    ]
    feeds = dict(zip(ts, case.inputs))
    out_dt = TORCH_TO_DT[case.dtype]
    if case.family == "norm":
        phase = cudnn.norm_forward_phase.TRAINING
        if case.norm == "layernorm":
            outs = g.layernorm(phase, ts[0], ts[1], ts[2], 1e-5)
        else:
            outs = g.rmsnorm(phase, ts[0], ts[1], bias=ts[2], epsilon=1e-5)
        outs = [o for o in outs if o is not None]
        outs[0].set_output(True).set_data_type(out_dt)
        for o in outs[1:]:
            o.set_output(True).set_data_type(DataType.FLOAT)
        return g, feeds, outs
    if case.family == "softmax":
        y = g.softmax(ts[0], axis=case.axis, log=case.log)
        y.set_output(True).set_data_type(out_dt)
        return g, feeds, [y]
    vals = {f"in{i}": t for i, t in enumerate(ts)}
    last = ts[0]
    for k, (mode, at, ops) in enumerate(case.nodes):
        last = g._pointwise(mode, [vals[o] for o in ops], **at)
        vals[f"v{k}"] = last
    if case.family == "reduction":
        y = g.reduction(last, case.red_mode)
        y.set_output(True).set_dim(list(case.out_dims)).set_data_type(out_dt)
        return g, feeds, [y]
    last.set_output(True).set_data_type(out_dt)
    return g, feeds, [last]


def run_engine(case: Case, engine_id: int) -> list:
    """The outputs of ``case`` run on ``engine_id`` (outputs NaN-poisoned first)."""
    g, feeds, outs = build(case)
    g.validate()
    g.create_execution_plan(engine_id, heuristic_knobs(g, engine_id) if engine_id else {})
    got = run_plan(g, feeds, outs, 0, NAN)
    return [got[o] for o in outs]


# ---- PyTorch's truth ----------------------------------------------------------------------------
@dataclasses.dataclass
class Truth:
    """E64, the other admitted truths and the tolerance of each output."""

    e64: list
    alts: list  # other admitted truths, each a list like e64
    tol: list
    signed_zero: torch.Tensor | None = None  # elements whose zero sign must match
    loose: torch.Tensor | None = None  # elements only an expected NaN binds


def _eval_chain(
    case: Case,
    ct: torch.dtype,
    grads: bool,
    floor: float = 0.0,
    round_to: torch.dtype | None = None,
    nan_fallback: bool = False,
):
    """Node values of a pointwise chain (+ reduction) evaluated in ``ct``; with ``grads``
    also the size of the error estimate (``floor``: the engine's smallest normal, every
    rounding's subnormal floor); ``round_to`` rounds every node's value to that type."""
    env = {f"in{i}": x.to(ct) for i, x in enumerate(case.inputs)}
    leaves, sizes = [], []
    with torch.enable_grad() if grads else torch.no_grad():
        for k, (mode, at, ops) in enumerate(case.nodes):
            args = [env[o] for o in ops]
            v = torch_node(mode, at, args)
            if nan_fallback:
                # a NaN of PyTorch's float32 function alone (its gelu(inf)) taken as its
                # float64 value
                w = torch_node(mode, at, [a.double() for a in args]).to(ct)
                v = torch.where(torch.isnan(v) & ~torch.isnan(w), w, v)
            v = torch.broadcast_to(v, torch.broadcast_shapes(*[a.shape for a in args]))
            if round_to is not None:
                v = v.to(round_to).to(ct)
            if grads:
                with torch.no_grad():  # + the subnormal floor of every rounding
                    sizes.append(
                        rounding_size(mode, [a.detach() for a in args], v.detach()) + floor
                    )
                # d out / d (a zero added to v) is d out / d v through the rest of the chain
                leaves.append(torch.zeros(v.shape, dtype=ct, requires_grad=True))
                v = v - leaves[-1]  # v - (+0) keeps -0
            env[f"v{k}"] = v
        last = env[f"v{len(case.nodes) - 1}"] if case.nodes else env["in0"]
        out = last
        red_size = None
        if case.family == "reduction":
            out, red_size = _reduce(case, last)
        if not grads:
            return out.detach(), None
        total = torch.zeros_like(out.detach())
        if leaves:
            gs = torch.autograd.grad(out.sum(), leaves, allow_unused=True)
            for leaf, gv, size in zip(leaves, gs, sizes):
                if gv is None:
                    continue
                term = _prod(gv.abs(), size)
                total = total + (_group_sum(case, term) if case.family == "reduction" else term)
        if red_size is not None:
            total = total + red_size
        elif not leaves:
            total = total + out.detach().abs()
        return out.detach(), total


def _prod(a, b):
    """a * b with 0 * inf = 0 (an error of an infinite value that does not matter)."""
    p = a * b
    return torch.where((a == 0) | (b == 0), torch.zeros_like(p), p)


def _group_sum(case, t):
    axes = [i for i, (a, b) in enumerate(zip(t.shape, case.out_dims)) if b == 1 and a != 1]
    return t.sum(axes, keepdim=True) if axes else t


def _reduce(case, v):
    """(reduction of v, the size of its own rounding) as PyTorch computes it."""
    axes = [i for i, (a, b) in enumerate(zip(v.shape, case.out_dims)) if b == 1 and a != 1]
    n = math.prod(v.shape[i] for i in axes) if axes else 1
    kw = dict(dim=axes, keepdim=True) if axes else None

    def red(fn, t):
        if not kw:
            return t
        if fn is torch.prod:  # one axis at a time
            for i in axes:
                t = torch.prod(t, dim=i, keepdim=True)
            return t
        return fn(t, **kw)

    mode = case.red_mode
    if mode == R.ADD:
        y = red(torch.sum, v)
    elif mode == R.MUL:
        y = red(torch.prod, v)
    elif mode == R.MIN:
        y = red(torch.amin, v)
    elif mode == R.MAX:
        y = red(torch.amax, v)
    elif mode == R.AMAX:
        y = red(torch.amax, v.abs())
    elif mode == R.AVG:
        y = red(torch.mean, v)
    elif mode == R.NORM1:
        y = red(torch.sum, v.abs())
    elif mode == R.NORM2:
        y = torch.sqrt(red(torch.sum, v * v))
    else:
        y = red(torch.prod, torch.where(v == 0, torch.ones_like(v), v))
    with torch.no_grad():
        vd = v.detach()
        if mode in (R.ADD, R.AVG, R.NORM1):
            s = math.sqrt(n) * red(torch.sum, vd.abs()) / (n if mode == R.AVG else 1)
        elif mode == R.NORM2:
            s = math.sqrt(n) * y.detach().abs()
        elif mode in (R.MUL, R.MUL_NO_ZEROS):
            s = n * y.detach().abs()
        else:
            s = torch.zeros_like(y.detach())
    return y, s


def truth(case: Case) -> Truth:
    """PyTorch's results for ``case`` and their tolerances."""
    out_t = case.dtype
    ct = torch.float64 if case.dtype == torch.float64 else torch.float32
    u = U[ct]
    tiny = 4 * torch.finfo(out_t).smallest_normal * 2.0 * U[out_t]  # 4 subnormal ulps
    if case.family == "norm":
        return _norm_truth(case, u, tiny)
    if case.family == "softmax":
        x64 = case.inputs[0].double()
        fn = torch.log_softmax if case.log else torch.softmax
        e64 = fn(x64, case.axis)
        e32 = fn(case.inputs[0].to(ct), case.axis).to(out_t)
        n = x64.shape[case.axis]
        shift = (x64 - x64.amax(case.axis, keepdim=True)).abs()
        shift = torch.nan_to_num(shift, nan=0.0, posinf=0.0)
        size = (math.sqrt(n) + shift) * (1.0 if case.log else e64.abs())
        tol = SLACK * u * size + 2 * U[out_t] * e64.abs() + tiny
        return Truth([e64.to(out_t)], [[e32]], [torch.nan_to_num(tol, nan=math.inf)])
    with np.errstate(all="ignore"):
        e64, size = _eval_chain(case, torch.float64, True, torch.finfo(ct).smallest_normal)
        e32, _ = _eval_chain(case, ct, False)
        e32f, _ = _eval_chain(case, ct, False, nan_fallback=ct != torch.float64)
        # PyTorch's float64 functions on values rounded to the compute type at every node
        # (its own float32 gelu(inf) is NaN, its float64 one inf)
        e32r, _ = _eval_chain(case, torch.float64, False, round_to=ct)
    tol = SLACK * u * torch.nan_to_num(size, nan=math.inf) + 2 * U[out_t] * e64.abs() + tiny
    tol = torch.nan_to_num(tol, nan=math.inf)  # NaN expected: structure alone
    signed = None
    if (
        case.family == "pointwise"
        and len(case.nodes) == 1
        and arity(case.nodes[0][0]) == 1
        and case.nodes[0][0] not in BACKWARD_OF
    ):
        signed = case.inputs[0] == 0
    alts = [[e32.to(out_t)]] + ([[e32f.to(out_t)], [e32r.to(out_t)]] if ct != torch.float64 else [])
    loose = None
    if case.family == "reduction" and case.red_mode in (R.MUL, R.MUL_NO_ZEROS):
        # a product whose partial products may leave the compute type's range (in some
        # order) may come out inf, 0, anything between, or NaN (an underflowed 0 times
        # inf): only an expected NaN is checked
        v = case.inputs[0].double()
        for mode, at, ops in case.nodes:
            v = torch_node(mode, at, [v])
        a = v.abs()
        axes = [i for i, (p, q) in enumerate(zip(a.shape, case.out_dims)) if q == 1 and p != 1]
        with np.errstate(all="ignore"):
            logs = torch.log2(a)
        big = torch.where(logs > 0, logs, 0.0).nan_to_num(posinf=0.0)
        small = torch.where(logs < 0, logs, 0.0).nan_to_num(neginf=0.0)
        if axes:
            big, small = big.sum(axes, keepdim=True), small.sum(axes, keepdim=True)
        fin = torch.finfo(ct)
        loose = (big > math.log2(fin.max)) | (small < math.log2(fin.smallest_normal))
    return Truth([e64.to(out_t)], alts, [tol], signed, loose)


def _norm_truth(case, u, tiny) -> Truth:
    x, w, b = (t.double() for t in case.inputs)
    length = x.shape[-1]
    eps = 1e-5
    if case.norm == "layernorm":
        y = F.layer_norm(x, (length,), w.reshape(-1), b.reshape(-1), eps)
        mean = x.mean(-1, keepdim=True)
    else:
        y = F.rms_norm(x, (length,), w.reshape(-1), eps) + b
        mean = torch.zeros(x.shape[0], 1, dtype=torch.float64)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    inv = 1.0 / torch.sqrt(var + eps)
    spread = (x - mean).abs().amax(-1, keepdim=True)
    big = x.abs().amax(-1, keepdim=True)
    root = math.sqrt(length)
    # the statistics' rounding: sums of L terms of the row's size
    cond = torch.nan_to_num(big * big / (var + eps), nan=0.0, posinf=math.inf)
    tol_y = (
        SLACK * u * root * (w.abs() * (1.0 + inv * spread) * torch.sqrt(1.0 + cond) + b.abs())
        + 2 * U[case.dtype] * y.abs()
        + tiny
    )
    tol_mean = SLACK * u * root * big + 1e-45
    tol_inv = SLACK * u * root * inv * (1.0 + cond) + 1e-45
    outs = [y.to(case.dtype), mean.float(), inv.float()]
    # rows holding inf or NaN: their results are NaN (or inf), compared by structure alone
    tols = [torch.nan_to_num(t, nan=math.inf) for t in (tol_y, tol_mean, tol_inv)]
    if case.norm == "rmsnorm":
        outs, tols = [outs[0], outs[2]], [tols[0], tols[2]]
    return Truth(outs, [], tols)


# ---- comparison --------------------------------------------------------------------------
def _matches(got, exp, tol):
    """Per element: structure (NaN, +-inf) and value agree."""
    g, e = got.double(), exp.double()
    nan_ok = torch.isnan(g) == torch.isnan(e)
    inf_e, inf_g = torch.isinf(e), torch.isinf(g)
    inf_ok = (inf_e == inf_g) & (~inf_e | (g == e))
    fin = torch.isfinite(e) & torch.isfinite(g)
    err = torch.where(fin, (g - e).abs(), torch.zeros_like(g))
    val_ok = ~fin | (err <= tol)
    return nan_ok & inf_ok & val_ok


def compare(case: Case, got: list, t: Truth, engine: str) -> list[str]:
    """Failure messages (empty when every element matches E64 or E32)."""
    msgs = []
    roles = _roles(case)
    for k, (a, e64, tol) in enumerate(zip(got, t.e64, t.tol)):
        tol = torch.broadcast_to(tol, e64.shape)
        ok = _matches(a, e64, tol)
        for alt in t.alts:
            ok |= _matches(a, alt[k], tol)
        if t.loose is not None:  # NaN expected stays NaN; anything else goes
            ok |= t.loose & (torch.isnan(a.double()) | ~torch.isnan(e64.double()))
        if t.signed_zero is not None:
            z = t.signed_zero & (e64 == 0) & (a == 0)
            sign = torch.signbit(a.double()) == torch.signbit(e64.double())
            ok &= ~z | sign
        if bool(ok.all()):
            continue
        idx = tuple(int(i) for i in (~ok).nonzero()[0])
        ins = [_at(x, idx) for x in case.inputs]
        e32 = "".join(f", alt {alt[k][idx].item()!r}" for alt in t.alts)
        msgs.append(
            f"{engine} {roles[k]}: {int((~ok).sum())} of {ok.numel()} elements off; "
            f"first at {idx}: got {a[idx].item()!r}, e64 {e64[idx].item()!r}{e32}, "
            f"tol {float(tol[idx]):.3g}; inputs there {ins}"
        )
    return msgs


def _at(x, idx):
    if x.dim() != len(idx):
        return f"{tuple(x.shape)}"
    j = tuple(i if d > 1 else 0 for i, d in zip(idx, x.shape))
    return x[j].item()


def _roles(case):
    if case.family == "norm":
        return ["Y", "MEAN", "INV_VARIANCE"] if case.norm == "layernorm" else ["Y", "INV_VARIANCE"]
    return ["Y"]


def run_case(case: Case) -> list[str]:
    """Failure messages of ``case`` on the fast engine and on the reference engine."""
    t = truth(case)
    msgs = []
    fast = (
        ENGINES[case.family]
        if case.dtype != torch.float64 or case.family in ("pointwise", "reduction")
        else None
    )  # norm, softmax: no float64 engine
    for name, eid in (("fast", fast), ("reference", REFERENCE)):
        if eid is None:
            continue
        try:
            got = run_engine(case, eid)
        except Exception as ex:  # noqa: BLE001 -- an engine error is a finding too
            msgs.append(f"{name}: {type(ex).__name__}: {str(ex).splitlines()[0][:300]}")
            continue
        msgs += compare(case, got, t, name)
    return msgs


def run(seed: int, cases: int, start: int = 0, out=print, family: str | None = None) -> list:
    """Run cases start .. start + cases - 1; returns [(index, description, messages)] of
    the failing ones, printing one reproduction line for each."""
    failures = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for i in range(start, start + cases):
            case = make_case(seed, i, family)
            msgs = run_case(case)
            if msgs:
                failures.append((i, case.describe(), msgs))
                out(f"FAIL case {i}: {case.describe()}: {msgs[0]}\n  repro: {repro_line(seed, i)}")
    return failures


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cases", type=int, default=100)
    p.add_argument("--start", type=int, default=0, help="first case index")
    p.add_argument("--case", type=int, default=None, help="run this one case, verbosely")
    p.add_argument("--family", choices=FAMILIES, default=None, help="only this family")
    a = p.parse_args(argv)
    if a.case is not None:
        case = make_case(a.seed, a.case, a.family)
        print(case.describe())
        for i, x in enumerate(case.inputs):
            print(f"  in{i} = {x.tolist()}")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            msgs = run_case(case)
        print("\n".join(msgs) if msgs else "pass")
        return 1 if msgs else 0
    t0 = time.time()
    failures = run(a.seed, a.cases, a.start, family=a.family)
    print(f"{a.cases} cases, {len(failures)} failing, {time.time() - t0:.1f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
