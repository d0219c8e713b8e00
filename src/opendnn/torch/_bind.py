"""Torch buffers as graph tensors: the descriptions the opendnn.torch operations give
their kept graphs (``_graphs``), and the kept constants standing in for absent
parameters."""
from __future__ import annotations

import torch

_CONSTANTS: dict = {}


def desc(g, t: torch.Tensor, name: str, dims=None):
    """A graph tensor with ``t``'s dims (or ``dims``, a view of it), strides and type."""
    v = t if dims is None else t.view(dims)
    return g.tensor(list(v.shape) or [1], list(v.stride()) or [1], v.dtype, name=name)


def output(t, like: torch.Tensor, name: str, dims=None):
    """Mark graph tensor ``t`` an output described like the buffer ``like`` (or its view)."""
    v = like if dims is None else like.view(dims)
    return t.set_output(True).set_dim(list(v.shape)).set_stride(list(v.stride())) \
        .set_data_type(v.dtype).set_name(name)


def constant(value: float, shape, dtype, device) -> torch.Tensor:
    """A kept tensor of ``value`` (the ones / zeros standing in for a None weight or bias);
    never handed to the user, only read by graphs."""
    key = (value, tuple(shape), dtype, str(device))
    t = _CONSTANTS.get(key)
    if t is None:
        if len(_CONSTANTS) > 256:
            _CONSTANTS.clear()
        t = _CONSTANTS[key] = torch.full(tuple(shape), value, dtype=dtype, device=device)
    return t


def stats_dtype(x: torch.Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32
