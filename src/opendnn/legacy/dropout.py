"""cuDNN's dropout descriptor API on the graph API's dropout nodes.

    y  = x  * mask / (1 - p)
    dx = dy * mask / (1 - p)

The random stream is counter-based (Philox, ``ops/dropout.py``): a mask is a function of
(seed, offset) alone, so nothing of it is stored.

- ``states`` (``dropout_get_states_size`` = 32 bytes): int64 words in the caller's
  buffer (device memory on a GPU), [seed, 0, offset, 0] -- seed and offset 16 bytes
  apart, so that both pointers keep the alignment the compiled kernel is specialized
  for. ``set_dropout_descriptor`` writes [seed, 0, 0, 0]; every ``dropout_forward``
  takes the current offset and advances it on the device by the Philox counters it
  consumed, ceil(n / 4) for n elements (stream-ordered, no host synchronization), so
  consecutive calls draw fresh masks, as cuDNN's generator states do.
  ``restore_dropout_descriptor`` attaches states without resetting them.
- ``reserve_space`` (``dropout_get_reserve_space_size`` = 32 bytes whatever x is): the
  forward copies the states' words there; the backward regenerates the very same mask
  from them. cuDNN keeps the mask itself there and asks for more; any reserve space of at
  least 32 bytes works, so a buffer sized for cuDNN's mask works too (x of 256 elements
  or more).

In-place calls (y is x, dx is dy) work on a copy of the input. Buffers are torch
tensors; sizes are checked against what the caller says and against the buffers
themselves (BAD_PARAM with the rule).
"""

from __future__ import annotations

import math

import torch

from ..enums import DataType, HeurMode
from ..errors import Status
from ..graph.graph import Graph
from ..ops.dropout import counters
from ..runtime.lru import LRU, legacy_cache_size
from .common import as_float, as_int, buffer, check

STATES_SIZE = 32  # bytes: int64 [seed, 0, offset, 0]
RESERVE_SIZE = 32  # bytes: the forward's copy of the states


class DropoutDescriptor:
    """cudnnDropoutDescriptor_t: probability, seed and the states buffer."""

    def __init__(self):
        self.dropout, self.seed, self.states = 0.0, 0, None


def create_dropout_descriptor() -> DropoutDescriptor:
    return DropoutDescriptor()


def destroy_dropout_descriptor(desc) -> None:
    desc.states = None


def dropout_get_states_size(handle) -> int:
    """cudnnDropoutGetStatesSize: bytes of the generator states (seed and offset)."""
    return STATES_SIZE


def dropout_get_reserve_space_size(x_desc) -> int:
    """cudnnDropoutGetReserveSpaceSize: bytes the forward leaves for the backward."""
    check(x_desc.is_set(), "descriptor was never set", "dropout_get_reserve_space_size", "x")
    return RESERVE_SIZE


def _words(buf, size, need: int, op: str, name: str) -> torch.Tensor:
    """The first ``need`` bytes of ``buf`` as int64 words (a view: writes go to buf)."""
    check(buf is not None, "is NULL", op, name, Status.BAD_PARAM_NULL_POINTER)
    check(
        isinstance(buf, torch.Tensor),
        f"must be a torch tensor, got {type(buf).__name__}",
        op,
        name,
        Status.BAD_PARAM,
    )
    size = as_int(op, f"{name}_size", size)
    check(
        size >= need,
        f"{name}_size {size} is below the {need} bytes needed",
        op,
        name,
        Status.BAD_PARAM_SIZE_INSUFFICIENT,
    )
    nbytes = buf.numel() * buf.element_size()
    check(
        nbytes >= size,
        f"the buffer holds {nbytes} bytes, fewer than the {size} given",
        op,
        name,
        Status.BAD_PARAM_SIZE_INSUFFICIENT,
    )
    check(
        buf.is_contiguous() and buf.data_ptr() % 8 == 0,
        "must be a contiguous, 8-byte aligned buffer",
        op,
        name,
        Status.BAD_PARAM,
    )
    return buf.reshape(-1).view(torch.uint8)[:need].view(torch.int64)


def _set(desc, op, dropout, states, states_size, seed) -> torch.Tensor:
    check(
        isinstance(desc, DropoutDescriptor), "needs a descriptor from create_dropout_descriptor", op
    )
    p = as_float(op, "dropout", dropout)
    check(
        math.isfinite(p) and 0.0 <= p <= 1.0,
        f"dropout {dropout} is outside [0, 1]",
        op,
        "dropout",
        Status.BAD_PARAM_OUT_OF_BOUND,
    )
    words = _words(states, states_size, STATES_SIZE, op, "states")
    desc.dropout, desc.seed, desc.states = p, as_int(op, "seed", seed), words
    return words


def set_dropout_descriptor(desc, handle, dropout, states, states_size, seed) -> None:
    """cudnnSetDropoutDescriptor: probability ``dropout`` and states [seed, 0, 0, 0]."""
    words = _set(desc, "set_dropout_descriptor", dropout, states, states_size, seed)
    v = desc.seed & 0xFFFFFFFFFFFFFFFF
    words.copy_(torch.tensor([v - (1 << 64) if v >= 1 << 63 else v, 0, 0, 0], dtype=torch.int64))


def restore_dropout_descriptor(desc, handle, dropout, states, states_size, seed) -> None:
    """cudnnRestoreDropoutDescriptor: attach states initialized before (not reset)."""
    _set(desc, "restore_dropout_descriptor", dropout, states, states_size, seed)


def get_dropout_descriptor(desc, handle) -> tuple:
    """cudnnGetDropoutDescriptor -> (dropout, states, seed)."""
    return desc.dropout, desc.states, desc.seed


_cache = LRU(legacy_cache_size)


def _graph(handle, op, p, d_in, d_out):
    for name, d in (("x", d_in), ("y", d_out)):
        check(d.is_set(), "descriptor was never set", op, name)
    check(
        d_in.dims == d_out.dims,
        f"dims {list(d_out.dims)} must equal {list(d_in.dims)}",
        op,
        "y" if op == "dropout_forward" else "dx",
        Status.BAD_PARAM_SHAPE_MISMATCH,
    )
    key = (
        op,
        str(handle.device),
        p,
        (d_in.dims, d_in.strides, int(d_in.data_type)),
        (d_out.dims, d_out.strides, int(d_out.data_type)),
    )
    hit = _cache.get(key)
    if hit is not None:
        return hit
    g = Graph(name=op, handle=handle, compute_data_type=DataType.FLOAT)
    t_in = g.tensor(list(d_in.dims), list(d_in.strides), d_in.data_type, name="in")
    seed = g.tensor([1], [1], DataType.INT64, name="seed")
    offset = g.tensor([1], [1], DataType.INT64, name="offset")
    if op == "dropout_forward":
        out = g.dropout(t_in, p, seed, offset, generate_mask=False, name=op)[0]
    else:
        out = g.dropout_backward(t_in, p, seed, offset, name=op)
    out.set_output(True).set_stride(list(d_out.strides)).set_data_type(d_out.data_type)
    g.build([HeurMode.A, HeurMode.FALLBACK])
    hit = _cache[key] = (g, t_in, seed, offset, out)
    return hit


def _execute(built, src, dst, words) -> None:
    g, t_in, seed, offset, out = built
    if (
        isinstance(src, torch.Tensor)
        and isinstance(dst, torch.Tensor)
        and src.untyped_storage().data_ptr() == dst.untyped_storage().data_ptr()
    ):
        src = src.clone()  # in place (y is x): the graph API forbids aliasing
    g.execute({t_in: src, out: dst, seed: words[0:1], offset: words[2:3]}, None)


def _check_desc(desc, op) -> None:
    check(
        isinstance(desc, DropoutDescriptor) and desc.states is not None,
        "the dropout descriptor was never set (set_dropout_descriptor)",
        op,
        "dropout_desc",
    )


def dropout_forward(
    handle, dropout_desc, x_desc, x, y_desc, y, reserve_space, reserve_space_size
) -> None:
    """y = x * mask / (1 - p); records (seed, offset) in reserve_space and advances the
    states' offset by the counters used (ceil(elements / 4))."""
    op = "dropout_forward"
    _check_desc(dropout_desc, op)
    rec = _words(reserve_space, reserve_space_size, RESERVE_SIZE, op, "reserve_space")
    built = _graph(handle, op, dropout_desc.dropout, x_desc, y_desc)
    x, y = buffer(op, "x", x, x_desc, handle), buffer(op, "y", y, y_desc, handle, output=True)
    rec.copy_(dropout_desc.states)  # device to device, stream-ordered
    dropout_desc.states[2:3].add_(counters(math.prod(x_desc.dims)))
    _execute(built, x, y, rec)


def dropout_backward(
    handle, dropout_desc, dy_desc, dy, dx_desc, dx, reserve_space, reserve_space_size
) -> None:
    """dx = dy * mask / (1 - p), the forward's mask regenerated from reserve_space."""
    op = "dropout_backward"
    _check_desc(dropout_desc, op)
    rec = _words(reserve_space, reserve_space_size, RESERVE_SIZE, op, "reserve_space")
    built = _graph(handle, op, dropout_desc.dropout, dy_desc, dx_desc)
    dy = buffer(op, "dy", dy, dy_desc, handle)
    dx = buffer(op, "dx", dx, dx_desc, handle, output=True)
    _execute(built, dy, dx, rec)


__all__ = [
    "DropoutDescriptor",
    "create_dropout_descriptor",
    "destroy_dropout_descriptor",
    "dropout_get_states_size",
    "dropout_get_reserve_space_size",
    "set_dropout_descriptor",
    "restore_dropout_descriptor",
    "get_dropout_descriptor",
    "dropout_forward",
    "dropout_backward",
]
