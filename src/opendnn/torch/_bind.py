"""Torch buffers as graph tensors: the descriptions the opendnn.torch operations give
their kept graphs (``_graphs``), and the kept constants standing in for absent
parameters."""

from __future__ import annotations

import torch

_CONSTANTS: dict = {}


def graph_tensor(g, t: torch.Tensor, name: str, dims=None):
    """A graph tensor with ``t``'s dims (or ``dims``, a view of it), strides and type; a
    0-dim ``t`` as one element. Not ``tensor_like``: a one-element CPU tensor stays in
    memory rather than becoming pass-by-value."""
    v = t if dims is None else t.view(dims)
    return g.tensor(list(v.shape) or [1], list(v.stride()) or [1], v.dtype, name=name)


def mark_output(gt, like: torch.Tensor, name: str | None = None, dims=None):
    """Mark graph tensor ``gt`` an output written into the buffer ``like`` (or its view)."""
    v = like if dims is None else like.view(dims)
    gt.set_output(True).set_dim(list(v.shape) or [1]).set_stride(list(v.stride()) or [1])
    gt.set_data_type(v.dtype)
    return gt if name is None else gt.set_name(name)


desc, output = graph_tensor, mark_output  # the names the norm / pool operations use


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
