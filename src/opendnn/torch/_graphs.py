"""The graphs behind the PyTorch layer: one built graph per problem, kept and reused.

Every ``opendnn.torch`` operation describes its problem by a key -- the operation, its
attributes and, per tensor, the shape, strides, data type and device (``meta``) -- and a
builder that adds its nodes to an empty graph. The first call with a key validates the
graph, ranks its engines (heuristics A, then FALLBACK) and builds the chosen plan; every
later call with that key binds its buffers to the kept graph and executes it. The switches
in ``opendnn.backends`` apply as in the graph API: ``benchmark`` times the candidate plans
at a graph's first execution and keeps the winner; ``deterministic`` and ``allow_tf32``
are part of the key, since they change which plans exist.

A graph runs on the device of its tensors, on PyTorch's current stream there.

The float64 reference engine (FALLBACK) is taken only for problems with a float64
tensor, where it is the engine that computes them. For any other problem a plan that
would run a piece on the reference raises GraphNotSupportedError naming why the fast
engines declined: the callers (``enable()``, the modules, the compile backend) then run
PyTorch's own function, and say so in the log, rather than a silently slow path.
"""
from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from typing import Callable

import torch

from .. import backends
from ..engines.reference.engine import ReferenceEngine
from ..enums import DataType, HeurMode
from ..errors import GraphNotSupportedError, Status
from ..graph.graph import Graph
from ..handle import default_handle

REFERENCE_ID = ReferenceEngine.id
CACHE_SIZE = 4096          # graphs kept (least recently used dropped first)
_cache: OrderedDict = OrderedDict()
_lock = threading.Lock()


@dataclasses.dataclass
class Built:
    """A built graph and its tensors by role name (``"x"``, ``"y"``, ``"alpha"``, ...)."""
    graph: Graph
    tensors: dict
    workspace: int
    device: torch.device


def meta(t: torch.Tensor | None) -> tuple | None:
    """What of a tensor a graph depends on: (shape, strides, dtype, device)."""
    if t is None:
        return None
    return (tuple(t.shape), tuple(t.stride()), t.dtype, str(t.device))


def built(key: tuple, device: torch.device, build: Callable[[Graph], dict]) -> Built:
    """The kept graph for ``key``, made on first use: ``build(g)`` adds the nodes to the
    empty graph ``g`` (on ``device``; FLOAT intermediates and compute) and returns its
    tensors by role name, outputs marked. Raises the graph's typed errors (e.g.
    GraphNotSupportedError) when no engine takes the problem; nothing is kept then."""
    full = (key, backends.deterministic, backends.allow_tf32)
    with _lock:
        hit = _cache.get(full)
        if hit is not None:
            _cache.move_to_end(full)
            return hit
    g = Graph(name=str(key[0]), handle=default_handle(str(device)),
              intermediate_data_type=DataType.FLOAT, compute_data_type=DataType.FLOAT)
    tensors = build(g)
    g.build([HeurMode.A, HeurMode.FALLBACK])
    _refuse_reference(g, str(key[0]))
    b = Built(g, tensors, int(g.get_workspace_size()), device)
    with _lock:
        _cache[full] = b
        while len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
    return b


def _refuse_reference(g: Graph, op: str) -> None:
    """GraphNotSupportedError when the chosen plan runs a piece on the reference engine
    and no tensor of the graph is float64."""
    stages = g._selected_plan().stages
    if all(s.config.engine_id != REFERENCE_ID for s in stages):
        return
    if any(t.data_type == DataType.DOUBLE for t in g.op_graph.tensors.values()):
        return
    reasons = {k: v for k, v in g._reasons.items() if not k.startswith("reference")}
    raise GraphNotSupportedError(
        "no fast engine takes this problem (only the float64 reference would, slowly)",
        reasons=reasons, op=op, status=Status.NOT_SUPPORTED)


def run(b: Built, buffers: dict) -> None:
    """Execute ``b`` with ``buffers`` ({role name: torch tensor or Python number}); a
    workspace of the plan's size is taken from PyTorch's caching allocator per call."""
    pack = {b.tensors[name]: value for name, value in buffers.items()}
    ws = (torch.empty(b.workspace, dtype=torch.uint8, device=b.device)
          if b.workspace else None)
    b.graph.execute(pack, ws)


def direct(op):
    """``op`` (a ``torch.library`` custom op) as a callable that runs its implementation
    itself when nothing needs PyTorch's dispatcher -- not compiling, no autocast, only
    plain tensors, and no input tensor that needs a gradient -- and goes through ``op``
    otherwise. The dispatcher's wrappers (autograd, redispatch, the dynamo guard) were
    about three quarters of an eager call's host time (bench/notes/torch.md); the
    results are the same either way (the implementation is what ``op`` runs)."""
    fn = op._init_fn
    plain = (torch.Tensor, torch.nn.Parameter)

    def call(*args):
        grad = torch.is_grad_enabled()
        for a in args:
            if isinstance(a, torch.Tensor) and (type(a) not in plain or
                                                (grad and a.requires_grad)):
                return op(*args)
        if torch.compiler.is_compiling() or torch.is_autocast_enabled("cuda") or \
                torch.is_autocast_enabled("cpu"):
            return op(*args)
        return fn(*args)
    call.op = op
    call.__doc__ = fn.__doc__
    return call


def clear() -> None:
    """Drop every kept graph (tests; after changing engines' registrations)."""
    with _lock:
        _cache.clear()
