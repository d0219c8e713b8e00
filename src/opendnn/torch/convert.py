"""``opendnn.torch.convert(model)``: run a PyTorch model's supported modules on opendnn.

Every submodule whose type is exactly one of the PyTorch classes in ``modules.DROP_IN``
(Conv1d/2d/3d, Linear, BatchNorm1d/2d/3d, LayerNorm, GroupNorm, InstanceNorm1d/2d/3d,
RMSNorm, Max/AvgPool1d/2d/3d, AdaptiveAvgPool2d, the activations, Softmax, LogSoftmax,
Dropout, MultiheadAttention) becomes the opendnn drop-in by changing its class: the drop-ins
subclass those classes and add no state, so the module object stays the same one, with
the same parameter and buffer tensors (same objects: optimizers and weight tying keep
working), training mode, device, dtype, hooks, and state_dict. Subclasses of those
classes (a user's ``class MyConv(nn.Conv2d)`` may override forward) and every other type
are left alone; so are modules already converted.
"""

from __future__ import annotations

import copy
from typing import Iterable

import torch.nn as nn

from ..errors import BadParamError
from .modules import DROP_IN

__all__ = ["convert", "revert"]


def convert(model: nn.Module, inplace: bool = True, skip: Iterable[type | str] = ()) -> nn.Module:
    """Swap ``model``'s supported submodules (``model`` itself included) for opendnn's
    drop-ins; returns the model (a deep copy first if ``inplace`` is False).

    ``skip``: module types (PyTorch's class or opendnn's) to leave alone, and qualified
    names from ``model.named_modules()`` (e.g. ``"layer1.0.conv1"``) to leave alone with
    everything under them. A name not in the model is an error (BadParamError)."""
    return _swap(model, inplace, skip, DROP_IN, "convert")


def revert(model: nn.Module, inplace: bool = True, skip: Iterable[type | str] = ()) -> nn.Module:
    """The inverse of ``convert``: opendnn drop-ins back to their PyTorch classes."""
    return _swap(model, inplace, skip, {v: k for k, v in DROP_IN.items()}, "revert")


def _swap(model, inplace, skip, mapping, op):
    if not isinstance(model, nn.Module):
        raise BadParamError(f"expected a torch.nn.Module, got {type(model).__name__}", op=op)
    skip = tuple(skip)
    bad = [s for s in skip if not isinstance(s, (str, type))]
    if bad:
        raise BadParamError(f"skip entries must be module types or names, got {bad!r}", op=op)
    skip_types = {s for s in skip if isinstance(s, type)}
    skip_names = {s for s in skip if isinstance(s, str)}
    names = {name for name, _ in model.named_modules()}
    missing = sorted(skip_names - names)
    if missing:
        raise BadParamError(f"skip names {missing} are not modules of the model", op=op)
    if not inplace:
        model = copy.deepcopy(model)
    for name, module in model.named_modules():
        if any(name == s or name.startswith(s + ".") or s == "" for s in skip_names):
            continue
        cls = mapping.get(type(module))
        if cls is None or type(module) in skip_types or cls in skip_types:
            continue
        module.__class__ = cls
    return model
