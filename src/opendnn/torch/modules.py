"""Drop-in ``torch.nn`` modules whose forward runs on opendnn.

Each class subclasses the ``torch.nn`` module of the same name and overrides only the
forward computation, so the constructor arguments, parameters, buffers, ``state_dict``
layout, ``extra_repr``, ``reset_parameters`` and ``isinstance(m, torch.nn.Conv2d)`` are
PyTorch's own; a state_dict loads either way between a PyTorch module and its drop-in.
The forward calls the ``opendnn.torch.functional`` (OF) function with the arguments
PyTorch's forward passes to the ``torch.nn.functional`` function of the same name.

Fallback policy: when OF raises ``opendnn.errors.GraphNotSupportedError`` (no engine
takes the problem, or an argument opendnn does not implement, e.g. ``return_indices`` of
max pooling if so), the module runs PyTorch's own computation for that call -- the same
``torch.nn.functional`` call its PyTorch forward makes -- and logs the reason once (per
module class and reason) at ``OPENDNN_LOG=info``; ``opendnn.torch.enable.fallbacks()``
counts every fallback, and a declined call is remembered so repeats go straight to
PyTorch (``enable.attempt``). Other errors (bad arguments) propagate. Module-level side
effects happen once either way (BatchNorm's ``num_batches_tracked``); OF declines before
it writes anything. ``MultiheadAttention`` is in ``modules_attention``.

Differences from PyTorch by design: Dropout's mask comes from opendnn's kernel (seeded
from PyTorch's generator): the same distribution, not PyTorch's mask bit for bit. The
drop-ins add no state of their own, so ``convert`` can change a module's class in place.

``DROP_IN`` maps each PyTorch class to its drop-in (``convert`` uses it).
"""

from __future__ import annotations

from typing import Callable

import torch.nn as nn
import torch.nn.functional as F

from . import functional as OF
from .enable import attempt

DROP_IN: dict = {}  # torch.nn class -> opendnn drop-in class


def _register(torch_cls: type, cls: type) -> type:
    cls.__module__ = __name__
    cls.__qualname__ = cls.__name__ = torch_cls.__name__
    cls.__doc__ = (
        f"opendnn's drop-in for ``torch.nn.{torch_cls.__name__}``: the same "
        f"constructor, parameters and state_dict; the forward runs on opendnn "
        f"(falling back to PyTorch's when opendnn declines; see the module)."
    )
    DROP_IN[torch_cls] = cls
    return cls


def _drop_in(torch_cls: type, name: str, args_of: Callable) -> type:
    """A drop-in whose forward is ``OF.<name>(*args, **kwargs)`` with
    ``args, kwargs = args_of(module, input)``; PyTorch's forward is the fallback."""

    def forward(self, input):
        args, kwargs = args_of(self, input)
        return attempt(
            type(self).__name__,
            getattr(OF, name),
            args,
            kwargs,
            lambda: torch_cls.forward(self, input),
        )

    return _register(torch_cls, type("_", (torch_cls,), {"forward": forward}))


# ---------------------------------------------------------------- convolution


def _conv(torch_cls: type, name: str) -> type:
    def _conv_forward(self, input, weight, bias):
        if self.padding_mode != "zeros":
            # as PyTorch does: pad explicitly (reflect, replicate, circular), then no padding
            x = F.pad(input, self._reversed_padding_repeated_twice, mode=self.padding_mode)
            args = (
                x,
                weight,
                bias,
                self.stride,
                (0,) * len(self.kernel_size),
                self.dilation,
                self.groups,
            )
        else:
            args = (input, weight, bias, self.stride, self.padding, self.dilation, self.groups)
        return attempt(
            type(self).__name__,
            getattr(OF, name),
            args,
            None,
            lambda: torch_cls._conv_forward(self, input, weight, bias),
        )

    return _register(torch_cls, type("_", (torch_cls,), {"_conv_forward": _conv_forward}))


Conv1d = _conv(nn.Conv1d, "conv1d")
Conv2d = _conv(nn.Conv2d, "conv2d")
Conv3d = _conv(nn.Conv3d, "conv3d")
Linear = _drop_in(nn.Linear, "linear", lambda m, x: ((x, m.weight, m.bias), None))


# ---------------------------------------------------------------- normalization


def _batch_norm_forward(self, input):
    """PyTorch's _BatchNorm.forward, with the batch_norm call on OF."""
    self._check_input_dim(input)
    factor = 0.0 if self.momentum is None else self.momentum
    if self.training and self.track_running_stats and self.num_batches_tracked is not None:
        self.num_batches_tracked.add_(1)
        factor = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
    bn_training = self.training or (self.running_mean is None and self.running_var is None)
    keep = not self.training or self.track_running_stats  # buffers passed only if used
    args = (
        input,
        self.running_mean if keep else None,
        self.running_var if keep else None,
        self.weight,
        self.bias,
        bn_training,
        factor,
        self.eps,
    )
    return attempt(type(self).__name__, OF.batch_norm, args, None, lambda: F.batch_norm(*args))


def _batch_norm(torch_cls: type) -> type:
    return _register(torch_cls, type("_", (torch_cls,), {"forward": _batch_norm_forward}))


BatchNorm1d = _batch_norm(nn.BatchNorm1d)
BatchNorm2d = _batch_norm(nn.BatchNorm2d)
BatchNorm3d = _batch_norm(nn.BatchNorm3d)


def _instance_norm(torch_cls: type) -> type:
    def _apply_instance_norm(self, input):
        args = (
            input,
            self.running_mean,
            self.running_var,
            self.weight,
            self.bias,
            self.training or not self.track_running_stats,
            self.momentum if self.momentum is not None else 0.0,
            self.eps,
        )
        return attempt(
            type(self).__name__,
            OF.instance_norm,
            args,
            None,
            lambda: torch_cls._apply_instance_norm(self, input),
        )

    return _register(
        torch_cls, type("_", (torch_cls,), {"_apply_instance_norm": _apply_instance_norm})
    )


InstanceNorm1d = _instance_norm(nn.InstanceNorm1d)
InstanceNorm2d = _instance_norm(nn.InstanceNorm2d)
InstanceNorm3d = _instance_norm(nn.InstanceNorm3d)
LayerNorm = _drop_in(
    nn.LayerNorm,
    "layer_norm",
    lambda m, x: ((x, m.normalized_shape, m.weight, m.bias, m.eps), None),
)
GroupNorm = _drop_in(
    nn.GroupNorm, "group_norm", lambda m, x: ((x, m.num_groups, m.weight, m.bias, m.eps), None)
)
RMSNorm = _drop_in(
    nn.RMSNorm, "rms_norm", lambda m, x: ((x, m.normalized_shape, m.weight, m.eps), None)
)


# ---------------------------------------------------------------- pooling


def _max_pool_args(m, x):
    return (
        (x, m.kernel_size, m.stride, m.padding, m.dilation),
        {"ceil_mode": m.ceil_mode, "return_indices": m.return_indices},
    )


def _avg_pool_args(m, x):
    return (
        (
            x,
            m.kernel_size,
            m.stride,
            m.padding,
            m.ceil_mode,
            m.count_include_pad,
            m.divisor_override,
        ),
        None,
    )


MaxPool1d = _drop_in(nn.MaxPool1d, "max_pool1d", _max_pool_args)
MaxPool2d = _drop_in(nn.MaxPool2d, "max_pool2d", _max_pool_args)
MaxPool3d = _drop_in(nn.MaxPool3d, "max_pool3d", _max_pool_args)
AvgPool1d = _drop_in(
    nn.AvgPool1d,
    "avg_pool1d",  # F.avg_pool1d has no divisor_override
    lambda m, x: ((x, m.kernel_size, m.stride, m.padding, m.ceil_mode, m.count_include_pad), None),
)
AvgPool2d = _drop_in(nn.AvgPool2d, "avg_pool2d", _avg_pool_args)
AvgPool3d = _drop_in(nn.AvgPool3d, "avg_pool3d", _avg_pool_args)
AdaptiveAvgPool2d = _drop_in(
    nn.AdaptiveAvgPool2d, "adaptive_avg_pool2d", lambda m, x: ((x, m.output_size), None)
)


# ---------------------------------------------------------------- activations, dropout


def _hardtanh_args(m, x):
    return (x, m.min_val, m.max_val, m.inplace), None


ReLU = _drop_in(nn.ReLU, "relu", lambda m, x: ((x,), {"inplace": m.inplace}))
ReLU6 = _drop_in(nn.ReLU6, "hardtanh", _hardtanh_args)  # PyTorch's ReLU6 is a Hardtanh
Hardtanh = _drop_in(nn.Hardtanh, "hardtanh", _hardtanh_args)
GELU = _drop_in(nn.GELU, "gelu", lambda m, x: ((x,), {"approximate": m.approximate}))
SiLU = _drop_in(nn.SiLU, "silu", lambda m, x: ((x,), {"inplace": m.inplace}))
Sigmoid = _drop_in(nn.Sigmoid, "sigmoid", lambda m, x: ((x,), None))
Tanh = _drop_in(nn.Tanh, "tanh", lambda m, x: ((x,), None))
ELU = _drop_in(nn.ELU, "elu", lambda m, x: ((x, m.alpha, m.inplace), None))
LeakyReLU = _drop_in(
    nn.LeakyReLU, "leaky_relu", lambda m, x: ((x, m.negative_slope, m.inplace), None)
)
Softplus = _drop_in(nn.Softplus, "softplus", lambda m, x: ((x, m.beta, m.threshold), None))
Softmax = _drop_in(nn.Softmax, "softmax", lambda m, x: ((x, m.dim), None))
LogSoftmax = _drop_in(nn.LogSoftmax, "log_softmax", lambda m, x: ((x, m.dim), None))
Dropout = _drop_in(nn.Dropout, "dropout", lambda m, x: ((x, m.p, m.training, m.inplace), None))

from .modules_attention import MultiheadAttention  # noqa: E402  (registers itself)

DROP_IN[nn.MultiheadAttention] = MultiheadAttention

__all__ = ["DROP_IN"] + sorted(cls.__name__ for cls in DROP_IN.values())
