"""Activations for PyTorch: ``torch.nn.functional``'s relu, relu6, hardtanh, elu,
leaky_relu, gelu, silu, sigmoid, tanh, softplus, mish, hardswish and hardsigmoid on
opendnn's pointwise graph nodes (one fused kernel per call: the runtime-fusion engine).

Custom ops (namespace ``opendnn``; ``kind`` names the activation, ``args`` its numbers):

- ``activation(x, kind, args) -> y`` with autograd: dx = ``activation_backward(dy, x,
  kind, args, from_output=False)``, the pointwise backward forms of cuDNN
  (relu_backward, elu_backward, ...; composed ones for softplus / mish / hardswish /
  hardsigmoid);
- ``activation_(x, kind, args)`` writes y over x (mutates x, no autograd of its own);
- ``activation_backward(dy, saved, kind, args, from_output)``.

The kinds and their math (x the input, y the output, dy the incoming gradient):

    relu     args (lower, upper, slope): y = min(x, upper) if x > lower
                                             else lower + slope (x - lower)
             relu = (0, inf, 0), relu6 = (0, 6, 0), hardtanh = (min, max, 0),
             leaky_relu = (0, inf, slope); dx = dy [lower < x < upper] + slope dy [x <= lower]
    elu      args (alpha,):  y = x if x > 0 else alpha (e^x - 1)
    gelu, gelu_tanh, silu (swish, beta 1), sigmoid, tanh: cuDNN's modes
    softplus args (beta, threshold): y = x if beta x > threshold
                                        else log(1 + e^(beta x)) / beta
             (a select over cuDNN's softplus, as PyTorch's threshold rule)
    mish     y = x tanh(softplus(x));  dx = dy (t + x sigmoid(x) (1 - t^2)), t = tanh(sp(x))
    hardsigmoid  y = min(max(x + 3, 0), 6) / 6;  dx = dy / 6 where -3 < x < 3, else 0
    hardswish    y = x min(max(x + 3, 0), 6) / 6;
                 dx = 0 (x <= -3), dy (x / 3 + 1/2) (-3 < x < 3), dy (x >= 3)
                 (PyTorch's open interval: at x = 3 the gradient is dy)

``inplace=True`` has PyTorch's semantics: y is written over the input, which is returned.
Under autograd (the input requires grad) an ``autograd.Function`` marks the input dirty.
For relu-family kinds with slope >= 0 and elu with alpha >= 0 the gradient is computed
from the output (x > lower iff y > lower; elu's x <= 0 part has dy (y + alpha)), so
nothing more is kept, as in PyTorch; for the other kinds a copy of the input is kept
for the backward (PyTorch keeps the original too). Negative slopes / alphas in place
under autograd raise GraphNotSupportedError (PyTorch refuses them at backward time).

Zero-size inputs give empty outputs without a graph; 0-dim inputs run as one element.
float16, bfloat16, float32 compute in float32; float64 computes in float64.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import torch

from ..enums import DataType
from ..errors import BadParamError, GraphNotSupportedError, Status
from . import _graphs
from ._bind import graph_tensor, mark_output  # noqa: F401  (used by the other families)

FLOATING = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
INF = math.inf


# ---- graph plumbing -----------------------------------------------------------------------
def use_double(g, t: torch.Tensor) -> None:
    """float64 data computes (and keeps intermediates) in float64."""
    if t.dtype == torch.float64:
        g.compute_data_type = DataType.DOUBLE
        g.intermediate_data_type = DataType.DOUBLE


def run_pointwise(op: str, key: tuple, inputs: dict, out: torch.Tensor, build: Callable) -> None:
    """Run the kept pointwise graph ``build(g, {role: graph tensor}) -> output`` with
    ``inputs`` ({role: tensor}) into ``out`` (which may be one of the inputs: in place)."""
    first = next(iter(inputs.values()))
    full = (op, key) + tuple((r, _graphs.meta(t)) for r, t in inputs.items()) + (_graphs.meta(out),)

    def builder(g):
        use_double(g, first)
        ts = {r: graph_tensor(g, t, r) for r, t in inputs.items()}
        y = mark_output(build(g, ts), out)
        return {**ts, "out": y}

    b = _graphs.built(full, first.device, builder)
    _graphs.run(b, {**inputs, "out": out})


def check_input(op: str, x, role: str = "input") -> None:
    if not isinstance(x, torch.Tensor):
        raise BadParamError(
            f"{role} must be a torch.Tensor, got {type(x).__name__}",
            op=op,
            status=Status.BAD_PARAM_ATTRIBUTE_TYPE,
        )
    if x.dtype not in FLOATING:
        raise GraphNotSupportedError(
            f"{role} is {x.dtype}: opendnn runs float16, bfloat16, float32 and float64",
            op=op,
            tensor=role,
            status=Status.NOT_SUPPORTED_DATA_TYPE,
        )


# ---- the kinds: forward, backward from the input, backward from the output ------------------
def _relu_attrs(a):
    lo, hi, slope = a
    return dict(lower_clip=lo, upper_clip=None if hi == INF else hi, negative_slope=slope)


def _softplus(g, x, a):
    beta, threshold = a
    linear = g.cmp_gt(g.mul(x, beta), threshold)
    return g.binary_select(x, g.softplus(x, beta=beta), linear)


def _softplus_bwd(g, dy, x, a):
    beta, threshold = a
    linear = g.cmp_gt(g.mul(x, beta), threshold)
    return g.binary_select(dy, g.softplus_backward(dy, x, beta=beta), linear)


def _relu6_of_shift(g, x):
    return g.relu(g.add(x, 3.0), lower_clip=0.0, upper_clip=6.0)


def _mish(g, x, a):
    return g.mul(x, g.tanh(g.softplus(x, beta=1.0)))


def _mish_bwd(g, dy, x, a):
    t = g.tanh(g.softplus(x, beta=1.0))
    inner = g.mul(g.mul(x, g.sigmoid(x)), g.sub(1.0, g.mul(t, t)))
    return g.mul(dy, g.add(t, inner))


def _hardswish_bwd(g, dy, x, a):
    ramp = g.mul(dy, g.add(g.div(x, 3.0), 0.5))
    upper = g.binary_select(ramp, dy, g.cmp_lt(x, 3.0))
    return g.binary_select(0.0, upper, g.cmp_le(x, -3.0))


def _elu_bwd_from_output(g, dy, y, a):
    return g.binary_select(dy, g.mul(dy, g.add(y, a[0])), g.cmp_gt(y, 0.0))


FORWARD: dict[str, Callable] = {
    "relu": lambda g, x, a: g.relu(x, **_relu_attrs(a)),
    "elu": lambda g, x, a: g.elu(x, alpha=a[0]),
    "gelu": lambda g, x, a: g.gelu(x),
    "gelu_tanh": lambda g, x, a: g.gelu_approx_tanh(x),
    "silu": lambda g, x, a: g.swish(x, swish_beta=1.0),
    "sigmoid": lambda g, x, a: g.sigmoid(x),
    "tanh": lambda g, x, a: g.tanh(x),
    "softplus": _softplus,
    "mish": _mish,
    "hardsigmoid": lambda g, x, a: g.div(_relu6_of_shift(g, x), 6.0),
    "hardswish": lambda g, x, a: g.div(g.mul(x, _relu6_of_shift(g, x)), 6.0),
}

BACKWARD: dict[str, Callable] = {
    "relu": lambda g, dy, x, a: g.relu_backward(dy, x, **_relu_attrs(a)),
    "elu": lambda g, dy, x, a: g.elu_backward(dy, x, alpha=a[0]),
    "gelu": lambda g, dy, x, a: g.gelu_backward(dy, x),
    "gelu_tanh": lambda g, dy, x, a: g.gelu_approx_tanh_backward(dy, x),
    "silu": lambda g, dy, x, a: g.swish_backward(dy, x, swish_beta=1.0),
    "sigmoid": lambda g, dy, x, a: g.sigmoid_backward(dy, x),
    "tanh": lambda g, dy, x, a: g.tanh_backward(dy, x),
    "softplus": _softplus_bwd,
    "mish": _mish_bwd,
    "hardsigmoid": lambda g, dy, x, a: g.div(
        g.relu_backward(dy, x, lower_clip=-3.0, upper_clip=3.0, negative_slope=0.0), 6.0
    ),
    "hardswish": _hardswish_bwd,
}

# backward from the output y, for kinds whose y decides the gradient (in place)
FROM_OUTPUT: dict[str, Callable] = {
    "relu": lambda g, dy, y, a: g.relu_backward(dy, y, **_relu_attrs(a)),
    "elu": _elu_bwd_from_output,
}
ARITY = {"relu": 3, "elu": 1, "softplus": 2}


def _output_decides(kind: str, args) -> bool:
    """Whether the gradient can be computed from the output (needs slope / alpha >= 0)."""
    return kind == "relu" and args[2] >= 0 or kind == "elu" and args[0] >= 0


def _check_kind(kind: str, args) -> tuple:
    if kind not in FORWARD:
        raise BadParamError(
            f"unknown activation kind {kind!r} (one of {sorted(FORWARD)})",
            op="opendnn::activation",
            status=Status.BAD_PARAM,
        )
    args = tuple(float(a) for a in args)
    if len(args) != ARITY.get(kind, 0):
        raise BadParamError(
            f"{kind} takes {ARITY.get(kind, 0)} numbers, got {len(args)}",
            op="opendnn::activation",
            status=Status.BAD_PARAM,
        )
    return args


def _forward_into(x: torch.Tensor, y: torch.Tensor, kind: str, args) -> None:
    args = _check_kind(kind, args)
    check_input(f"opendnn::activation({kind})", x)
    if x.numel() == 0:
        return
    run_pointwise(
        "opendnn.activation", (kind, args), {"x": x}, y, lambda g, t: FORWARD[kind](g, t["x"], args)
    )


# ---- custom ops ----------------------------------------------------------------------------
@torch.library.custom_op("opendnn::activation", mutates_args=())
def activation_op(x: torch.Tensor, kind: str, args: Sequence[float]) -> torch.Tensor:
    """y = kind(x; args), y laid out as x (torch.empty_like)."""
    y = torch.empty_like(x)
    _forward_into(x, y, kind, args)
    return y


@activation_op.register_fake
def _(x, kind, args):
    return torch.empty_like(x)


@torch.library.custom_op("opendnn::activation_", mutates_args=("x",))
def activation_inplace_op(x: torch.Tensor, kind: str, args: Sequence[float]) -> None:
    """x = kind(x; args), in place."""
    _forward_into(x, x, kind, args)


@activation_inplace_op.register_fake
def _(x, kind, args):
    return None


@torch.library.custom_op("opendnn::activation_backward", mutates_args=())
def activation_backward_op(
    grad: torch.Tensor, saved: torch.Tensor, kind: str, args: Sequence[float], from_output: bool
) -> torch.Tensor:
    """dx from dy = ``grad`` and the forward's input (or, ``from_output``, its output)."""
    args = _check_kind(kind, args)
    table = FROM_OUTPUT if from_output else BACKWARD
    op = f"opendnn::activation_backward({kind})"
    if kind not in table:
        raise BadParamError(
            f"{kind} has no backward from its output", op=op, status=Status.BAD_PARAM
        )
    check_input(op, grad, "grad")
    check_input(op, saved, "saved")
    dx = torch.empty_like(grad)
    if grad.numel():
        run_pointwise(
            "opendnn.activation_backward",
            (kind, args, from_output),
            {"dy": grad, "x": saved},
            dx,
            lambda g, t: table[kind](g, t["dy"], t["x"], args),
        )
    return dx


@activation_backward_op.register_fake
def _(grad, saved, kind, args, from_output):
    return torch.empty_like(grad)


def _setup(ctx, inputs, output):
    x, kind, args = inputs
    ctx.save_for_backward(x)
    ctx.kind, ctx.args = kind, list(args)


def _backward(ctx, grad):
    (x,) = ctx.saved_tensors
    return activation_backward_op(grad, x, ctx.kind, ctx.args, False), None, None


activation_op.register_autograd(_backward, setup_context=_setup)


class _InPlace(torch.autograd.Function):
    """y written over x under autograd: x is marked dirty; the backward reads the output
    (kinds whose output decides the gradient) or a copy of the input taken before."""

    @staticmethod
    def forward(ctx, x, kind, args):
        ctx.kind, ctx.args = kind, list(args)
        ctx.from_output = _output_decides(kind, args)
        saved = None if ctx.from_output else x.clone()
        activation_inplace_op(x, kind, list(args))
        ctx.mark_dirty(x)
        ctx.save_for_backward(x if ctx.from_output else saved)
        return x

    @staticmethod
    def backward(ctx, grad):
        (saved,) = ctx.saved_tensors
        return (
            activation_backward_op(grad, saved, ctx.kind, ctx.args, ctx.from_output),
            None,
            None,
        )


# ---- torch.nn.functional's activations ---------------------------------------------------------
def _apply(op: str, x, kind: str, args: tuple, inplace: bool = False) -> torch.Tensor:
    check_input(op, x)
    args = [float(a) for a in args]
    if not inplace:
        return _activation_direct(x, kind, args)
    if torch.is_grad_enabled() and x.requires_grad:
        if x.is_leaf:
            raise BadParamError(
                "a leaf tensor that requires grad cannot be modified in place (inplace=True)",
                op=op,
                tensor="input",
                status=Status.BAD_PARAM,
            )
        if kind in FROM_OUTPUT and not _output_decides(kind, args):
            what = "slope" if kind == "relu" else "alpha"
            raise GraphNotSupportedError(
                f"inplace=True under autograd with a negative {what} ({args}): the gradient "
                "needs the input, which the in-place write destroys (PyTorch refuses it "
                "too); use inplace=False",
                op=op,
                tensor="input",
            )
        return _InPlace.apply(x, kind, tuple(args))
    activation_inplace_op(x, kind, args)
    return x


def relu(input: torch.Tensor, inplace: bool = False) -> torch.Tensor:
    """max(input, 0)."""
    return _apply("relu", input, "relu", (0.0, INF, 0.0), inplace)


def relu6(input: torch.Tensor, inplace: bool = False) -> torch.Tensor:
    """min(max(input, 0), 6)."""
    return _apply("relu6", input, "relu", (0.0, 6.0, 0.0), inplace)


def hardtanh(
    input: torch.Tensor, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False
) -> torch.Tensor:
    """min(max(input, min_val), max_val)."""
    if not float(min_val) <= float(max_val):
        raise BadParamError(
            f"min_val {min_val} cannot be greater than max_val {max_val}",
            op="hardtanh",
            status=Status.BAD_PARAM,
        )
    return _apply("hardtanh", input, "relu", (min_val, max_val, 0.0), inplace)


def leaky_relu(
    input: torch.Tensor, negative_slope: float = 0.01, inplace: bool = False
) -> torch.Tensor:
    """input if input > 0 else negative_slope * input."""
    return _apply("leaky_relu", input, "relu", (0.0, INF, negative_slope), inplace)


def elu(input: torch.Tensor, alpha: float = 1.0, inplace: bool = False) -> torch.Tensor:
    """input if input > 0 else alpha * (exp(input) - 1)."""
    return _apply("elu", input, "elu", (alpha,), inplace)


def gelu(input: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """input * Phi(input) (``approximate='tanh'``: the tanh approximation)."""
    if approximate not in ("none", "tanh"):
        raise BadParamError(
            f"approximate must be 'none' or 'tanh', got {approximate!r}",
            op="gelu",
            status=Status.BAD_PARAM,
        )
    return _apply("gelu", input, "gelu" if approximate == "none" else "gelu_tanh", ())


def silu(input: torch.Tensor, inplace: bool = False) -> torch.Tensor:
    """input * sigmoid(input)."""
    return _apply("silu", input, "silu", (), inplace)


def sigmoid(input: torch.Tensor) -> torch.Tensor:
    """1 / (1 + exp(-input))."""
    return _apply("sigmoid", input, "sigmoid", ())


def tanh(input: torch.Tensor) -> torch.Tensor:
    return _apply("tanh", input, "tanh", ())


def softplus(input: torch.Tensor, beta: float = 1.0, threshold: float = 20.0) -> torch.Tensor:
    """log(1 + exp(beta * input)) / beta; input where beta * input > threshold."""
    return _apply("softplus", input, "softplus", (beta, threshold))


def mish(input: torch.Tensor, inplace: bool = False) -> torch.Tensor:
    """input * tanh(softplus(input))."""
    return _apply("mish", input, "mish", (), inplace)


def hardsigmoid(input: torch.Tensor, inplace: bool = False) -> torch.Tensor:
    """min(max(input + 3, 0), 6) / 6."""
    return _apply("hardsigmoid", input, "hardsigmoid", (), inplace)


def hardswish(input: torch.Tensor, inplace: bool = False) -> torch.Tensor:
    """input * min(max(input + 3, 0), 6) / 6."""
    return _apply("hardswish", input, "hardswish", (), inplace)


# eager calls skip the dispatcher (_graphs.direct; the ops stay registered)
_activation_direct = _graphs.direct(activation_op)
activation_inplace_op, activation_backward_op = map(
    _graphs.direct, (activation_inplace_op, activation_backward_op)
)

__all__ = [
    "relu",
    "relu6",
    "hardtanh",
    "leaky_relu",
    "elu",
    "gelu",
    "silu",
    "sigmoid",
    "tanh",
    "softplus",
    "mish",
    "hardsigmoid",
    "hardswish",
]
