"""Buffers the library owns for timing candidates (benchmark mode, ``autotune``, find).

Timing a candidate runs it many times (warm-ups plus timed samples). Run on the caller's
buffers, a graph that reads what it writes -- an in-place pointwise graph (``y = x * 2``
with ``y`` bound to ``x``), a descriptor-API call blending with ``beta != 0`` (``C =
alpha * A + beta * C``) -- would be applied once per run: ``scale_tensor`` by 2 timed 29
times leaves ``y * 2**29``. So every output whose memory overlaps an input's is timed on a
fresh buffer of the same layout instead, and the winner then runs once on the caller's
buffers. Inputs are only read, so they are timed where they are; an output that overlaps
nothing is timed in place (each run writes the same values, and the winner's final run
writes them again).

Scratch outputs are left uninitialised: what an output holds before the call is not read
when the output overlaps no input, and the inputs it overlapped are the caller's, read
where they are.
"""

from __future__ import annotations

import torch

from .buffers import as_tensor, byte_span


def _span(buf) -> tuple[int, int] | None:
    """[first byte, last byte + 1) of a bound buffer, or None for a host scalar / empty."""
    if isinstance(buf, (int, float, bool)):
        return None
    start, end = byte_span(as_tensor(buf))
    return (start, end) if end > start else None


def fresh_like(buf) -> torch.Tensor:
    """An uninitialised buffer with ``buf``'s dtype, device, shape and strides."""
    t = as_tensor(buf)
    start, end = byte_span(t)
    flat = torch.empty((end - start) // t.element_size(), dtype=t.dtype, device=t.device)
    return flat.as_strided(t.shape, t.stride())


def overlaps(a, b) -> bool:
    """Whether two buffers (tensors or raw pointers) on one device share a byte."""
    sa, sb = _span(a), _span(b)
    return (
        sa is not None
        and sb is not None
        and a.device == b.device
        and sa[0] < sb[1]
        and sb[0] < sa[1]
    )


def timing_buffers(graph, bound: dict) -> dict:
    """``bound`` (uid -> buffer of ``graph``'s variant pack, as ``buffers.bind`` returns it)
    with every output that overlaps an input replaced by a scratch buffer of its layout."""
    outputs = graph.output_uid_set
    spans = {u: _span(b) for u, b in bound.items()}
    inputs = [(u, s) for u, s in spans.items() if s is not None and u not in outputs]
    out = dict(bound)
    for u in outputs:
        s = spans.get(u)
        if s is None:
            continue
        if any(
            s[0] < e and b < s[1] and bound[u].device == bound[v].device for v, (b, e) in inputs
        ):
            out[u] = fresh_like(bound[u])
    return out
