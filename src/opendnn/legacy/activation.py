"""cudnnActivationForward / cudnnActivationBackward on the graph API's pointwise nodes.

    y  = alpha * f(x) + beta * y
    dx = alpha * f'(x) * dy + beta * dx

f by mode (``coef`` from the descriptor):
    SIGMOID       1 / (1 + exp(-x))                 f' = s (1 - s)
    RELU          max(x, 0)                         f' = [x > 0]
    CLIPPED_RELU  min(max(x, 0), coef)              f' = [0 < x < coef]
    TANH          tanh(x)                           f' = 1 - tanh(x)^2
    ELU           x if x > 0 else coef (exp(x) - 1) f' = 1 if x > 0 else coef exp(x)
    SWISH         x sigmoid(beta_s x)               (beta_s: the descriptor's swish beta)
IDENTITY is, as in cuDNN, only for convolution_bias_activation_forward: BAD_PARAM here.

NaN propagation (the descriptor's relu_nan_opt, which only RELU and CLIPPED_RELU can
observe): PROPAGATE_NAN gives NaN for NaN inputs, forward and backward; NOT_PROPAGATE_NAN
gives 0 (max(NaN, 0) = 0, as fmax does). The backward takes y, dy and x as cuDNN's does
and computes from x. y and dy may be the same buffer as dx / y as in cuDNN (in place).
"""

from __future__ import annotations

from .cnn import ActivationDescriptor, ActivationMode, _apply_activation
from .common import NanPropagation, Status, as_float, buffer, check
from .tensor_ops import call, same_dims


def _check_mode(op, act) -> ActivationMode:
    check(act is not None, "activation descriptor is None", op, "activation_desc")
    check(
        isinstance(act, ActivationDescriptor),
        f"needs an activation descriptor, got {type(act).__name__}",
        op,
        "activation_desc",
    )
    mode = act.mode
    check(
        mode != ActivationMode.IDENTITY,
        "IDENTITY is only for convolution_bias_activation_forward (as in cuDNN)",
        op,
        None,
        Status.BAD_PARAM,
    )
    return mode


def _key(act) -> tuple:
    return (int(act.mode), int(act.nan_opt), float(act.coef), float(act.swish_beta))


def _is_nan(g, x):
    return g.cmp_neq(x, x)


def _forward_body(act, mode):
    def body(g, t):
        y = _apply_activation(g, t["x"], act)
        if _relu_like(mode) and act.nan_opt == NanPropagation.NOT_PROPAGATE_NAN:
            y = g.binary_select(t["zero"], y, _is_nan(g, t["x"]))  # fmax(NaN, 0) = 0
        return y

    return body


def _backward_body(act, mode):
    def body(g, t):
        dy, x = t["dy"], t["x"]
        if mode == ActivationMode.SIGMOID:
            return g.sigmoid_backward(dy, x)
        if mode == ActivationMode.TANH:
            return g.tanh_backward(dy, x)
        if mode == ActivationMode.ELU:
            return g.elu_backward(dy, x, alpha=act.coef)
        if mode == ActivationMode.SWISH:
            return g.swish_backward(dy, x, swish_beta=act.swish_beta)
        dx = (
            g.relu_backward(dy, x)
            if mode == ActivationMode.RELU
            else g.relu_backward(dy, x, upper_clip=act.coef)
        )
        if act.nan_opt == NanPropagation.PROPAGATE_NAN:  # NaN in x gives NaN in dx
            dx = g.binary_select(x, dx, _is_nan(g, x))
        else:  # NaN in x is max(NaN, 0) = 0: the clipped side (relu_backward passes dy)
            dx = g.binary_select(t["zero"], dx, _is_nan(g, x))
        return dx

    return body


def _relu_like(mode) -> bool:
    return mode in (ActivationMode.RELU, ActivationMode.CLIPPED_RELU)


def activation_forward(handle, activation_desc, alpha, x_desc, x, beta, y_desc, y) -> None:
    """y = alpha * f(x) + beta * y; x and y have the same dims (any layouts)."""
    op = "activation_forward"
    mode = _check_mode(op, activation_desc)
    for n, d in (("x", x_desc), ("y", y_desc)):
        check(d.is_set(), "descriptor was never set", op, n)
    same_dims(op, {"x": x_desc, "y": y_desc})
    alpha, beta = as_float(op, "alpha", alpha), as_float(op, "beta", beta)
    x, y = buffer(op, "x", x, x_desc, handle), buffer(op, "y", y, y_desc, handle, output=True)
    zero = _relu_like(mode) and activation_desc.nan_opt == NanPropagation.NOT_PROPAGATE_NAN
    c = call(
        handle,
        op,
        {"x": x_desc, "y": y_desc},
        "y",
        _forward_body(activation_desc, mode),
        alpha != 1.0,
        beta != 0.0,
        key=_key(activation_desc),
        scalars=("zero",) if zero else (),
    )
    c.run({"x": x, **({"zero": 0.0} if zero else {})}, y, alpha, beta)


def activation_backward(
    handle, activation_desc, alpha, y_desc, y, dy_desc, dy, x_desc, x, beta, dx_desc, dx
) -> None:
    """dx = alpha * f'(x) * dy + beta * dx; y, dy, x and dx have the same dims. ``y`` is
    checked against its descriptor but not read: the gradient is computed from x."""
    op = "activation_backward"
    mode = _check_mode(op, activation_desc)
    descs = {"y": y_desc, "dy": dy_desc, "x": x_desc, "dx": dx_desc}
    for n, d in descs.items():
        check(d.is_set(), "descriptor was never set", op, n)
    same_dims(op, descs)
    alpha, beta = as_float(op, "alpha", alpha), as_float(op, "beta", beta)
    buffer(op, "y", y, y_desc, handle)  # checked, not read
    dy, x = buffer(op, "dy", dy, dy_desc, handle), buffer(op, "x", x, x_desc, handle)
    dx = buffer(op, "dx", dx, dx_desc, handle, output=True)
    zero = _relu_like(mode) and activation_desc.nan_opt == NanPropagation.NOT_PROPAGATE_NAN
    c = call(
        handle,
        op,
        {"dy": dy_desc, "x": x_desc, "dx": dx_desc},
        "dx",
        _backward_body(activation_desc, mode),
        alpha != 1.0,
        beta != 0.0,
        key=_key(activation_desc),
        scalars=("zero",) if zero else (),
    )
    c.run({"dy": dy, "x": x, **({"zero": 0.0} if zero else {})}, dx, alpha, beta)


__all__ = ["activation_forward", "activation_backward"]
