"""The graphs behind the PyTorch layer: one built graph per problem, kept and reused.

Every ``opendnn.torch`` operation describes its problem by a key -- the operation, its
attributes and, per tensor, the shape, strides, data type and device (``meta``) -- and a
builder that adds its nodes to an empty graph. The first call with a key validates the
graph, ranks its engines (heuristics A, then FALLBACK) and builds the chosen plan; every
later call with that key binds its buffers to the kept graph and executes it. The switches
in ``opendnn.backends`` apply as in the graph API: ``benchmark`` times the candidate plans
at a graph's first execution and keeps the winner; ``deterministic`` and ``allow_tf32``
are part of the key, since they change which plans exist. PyTorch's own determinism
switches, ``torch.use_deterministic_algorithms(True)`` (warn_only too) and
``torch.backends.cudnn.deterministic = True``, count as ``backends.deterministic``
(``deterministic()``): the graph deselects plans with the NONDETERMINISTIC note (split-K
convolution backward, attention backward adding dQ by atomics), as cuDNN does for
PyTorch.

A graph runs on the device of its tensors, on PyTorch's current stream there.

The float64 reference engine (FALLBACK) is taken only for problems with a float64
tensor, where it is the engine that computes them. For any other problem a plan that
would run a piece on the reference raises GraphNotSupportedError naming why the fast
engines declined: the callers (``enable()``, the modules, the compile backend) then run
PyTorch's own function, and say so in the log, rather than a silently slow path.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import torch

from .. import backends
from ..engines.reference.engine import ReferenceEngine
from ..enums import DataType, HeurMode, NumericalNote
from ..errors import GraphNotSupportedError, Status
from ..graph.graph import Graph
from ..handle import default_handle
from ..runtime.buffers import _exact_in_place
from ..runtime.lru import LRU, plan_cache_size

REFERENCE_ID = ReferenceEngine.id
# graphs kept: a model's every layer and pass (forward, both backward), per shape it
# meets, each holding its built plan; least recently used dropped first
GRAPHS_PER_PLAN = 16
_cache = LRU(lambda: GRAPHS_PER_PLAN * plan_cache_size())


@dataclasses.dataclass
class Built:
    """A built graph and its tensors by role name (``"x"``, ``"y"``, ``"alpha"``, ...)."""

    graph: Graph
    tensors: dict
    workspace: int
    device: torch.device
    runner: "_Runner | None" = None


def meta(t: torch.Tensor | None) -> tuple | None:
    """What of a tensor a graph depends on: (shape, strides, dtype, device)."""
    if t is None:
        return None
    return (tuple(t.shape), tuple(t.stride()), t.dtype, str(t.device))


def deterministic() -> bool:
    """Whether NONDETERMINISTIC plans are kept out: ``opendnn.backends.deterministic``,
    ``torch.use_deterministic_algorithms(True)`` or ``torch.backends.cudnn.deterministic``
    (PyTorch's switches, which its own cuDNN calls honour)."""
    return bool(
        backends.deterministic
        or torch.are_deterministic_algorithms_enabled()
        or torch.backends.cudnn.deterministic
    )


def built(key: tuple, device: torch.device, build: Callable[[Graph], dict]) -> Built:
    """The kept graph for ``key``, made on first use: ``build(g)`` adds the nodes to the
    empty graph ``g`` (on ``device``; FLOAT intermediates and compute) and returns its
    tensors by role name, outputs marked. Under ``deterministic()`` the graph deselects
    NONDETERMINISTIC plans (one kept graph per setting). Raises the graph's typed errors
    (e.g. GraphNotSupportedError) when no engine takes the problem; nothing is kept then."""
    det = deterministic()
    full = (key, det, backends.allow_tf32)
    hit = _cache.get(full)
    if hit is not None:
        return hit
    g = Graph(
        name=str(key[0]),
        handle=default_handle(str(device)),
        intermediate_data_type=DataType.FLOAT,
        compute_data_type=DataType.FLOAT,
    )
    tensors = build(g)
    if det:
        g.deselect_numeric_notes([NumericalNote.NONDETERMINISTIC])
    g.build([HeurMode.A, HeurMode.FALLBACK])
    _refuse_reference(g, str(key[0]))
    b = Built(g, tensors, int(g.get_workspace_size()), device)
    _cache[full] = b
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
        reasons=reasons,
        op=op,
        status=Status.NOT_SUPPORTED,
    )


def run(b: Built, buffers: dict) -> None:
    """Execute ``b`` with ``buffers`` ({role name: torch tensor or Python number}); a
    workspace of the plan's size is taken from PyTorch's caching allocator per call.

    The first call goes through ``Graph.execute`` (every variant-pack rule checked, the
    benchmark-mode search); later calls take ``b.runner``: the same checks of data type,
    shape, strides, device and overlap, done against the descriptors read once."""
    r, g = b.runner, b.graph
    if (
        r is not None
        and r.plan is g._plans[g._selected]
        and not g.tunes_at_execute()
        and r.run(buffers, b.workspace, b.device)
    ):
        return
    pack = {b.tensors[name]: value for name, value in buffers.items()}
    ws = torch.empty(b.workspace, dtype=torch.uint8, device=b.device) if b.workspace else None
    b.graph.execute(pack, ws)
    if r is None or r.plan is not g._plans[g._selected]:  # first run, or a new plan
        b.runner = _Runner(b, buffers)


class _Runner:
    """A built graph's selected plan with its variant pack's checks precomputed by role."""

    def __init__(self, b: Built, buffers: dict):
        g = b.graph
        self.plan = g._plans[g._selected]
        og = self.plan.graph
        self.scalars = dict(g._scalar_defaults_cached())
        self.entries, self.spans = [], []
        outs = og.output_uid_set
        for name in buffers:
            d = og.tensors[b.tensors[name].uid]
            self.entries.append((name, d.uid, d.is_pass_by_value, d.dims, d.strides, d.torch_dtype))
            if not d.is_pass_by_value and d.size_in_bytes:
                self.spans.append((name, d.size_in_bytes, d.uid in outs))
        # (output, input) positions that may share one buffer exactly (in-place pointwise)
        descs = [og.tensors[b.tensors[n].uid] for n, _, _ in self.spans]
        self.in_place = {
            (i, j)
            for i, (_, _, out) in enumerate(self.spans)
            if out
            for j in range(len(descs))
            if j != i and _exact_in_place(og, descs[i], descs[j], True)
        }

    def run(self, buffers: dict, workspace: int, device) -> bool:
        """Launch the plan, or False (nothing run) when a buffer breaks a check: the
        caller then takes the full path, which raises the rule's error."""
        if len(buffers) != len(self.entries):
            return False
        bound = dict(self.scalars)
        for name, uid, by_value, dims, strides, dtype in self.entries:
            v = buffers.get(name)
            if by_value:
                if type(v) not in (float, int, bool):
                    return False
            elif (
                type(v) not in _PLAIN
                or v.dtype != dtype
                or v.device != device
                or v.shape != dims
                or v.stride() != strides
            ):
                return False
            bound[uid] = v
        spans = self.spans
        if len(spans) > 1:  # no output may overlap another buffer
            ptr = [buffers[n].data_ptr() for n, _, _ in spans]
            for i, (_, n0, out) in enumerate(spans):
                if out:
                    s0 = ptr[i]
                    for j, (_, n1, _) in enumerate(spans):
                        if (
                            j != i
                            and ptr[j] < s0 + n0
                            and s0 < ptr[j] + n1
                            and not (ptr[j] == s0 and (i, j) in self.in_place)
                        ):
                            return False
        ws = torch.empty(workspace, dtype=torch.uint8, device=device) if workspace else None
        self.plan.run(bound, ws, None)
        return True


# autocast rules of the custom ops, by qualified name, mirroring their Autocast kernels
# in the dispatcher: rule(args, device type) -> the arguments the kernel passes on, or
# None where the rule does not apply (``lower``: conv, linear, matmul, sdpa; ``to(cuda,
# float32)``: layer / group norm; softmax has its own)
AUTOCAST: dict = {}
_PLAIN = (torch.Tensor, torch.nn.Parameter)


def lower(args: tuple, dev: str) -> tuple:
    """PyTorch's lower-precision rule: floating tensors of ``dev`` other than float64 in
    the autocast type."""
    dt = torch.get_autocast_dtype(dev)
    return tuple(
        a.to(dt)
        if isinstance(a, torch.Tensor)
        and a.is_floating_point()
        and a.dtype != torch.float64
        and a.device.type == dev
        else a
        for a in args
    )


def to(device_type: str, dtype: torch.dtype):
    """The rule of ``torch.library.register_autocast(op, device_type, dtype)``."""

    def rule(args: tuple, dev: str) -> tuple | None:
        if dev != device_type:
            return None
        return tuple(
            a.to(dtype)
            if isinstance(a, torch.Tensor) and a.is_floating_point() and a.device.type == dev
            else a
            for a in args
        )

    return rule


def _function(op):
    """An autograd Function running ``op``'s implementation, setup_context and backward
    themselves: what the dispatcher's generated Function does, less the redispatch."""
    init, setup, backward = op._init_fn, op._setup_context_fn, op._backward_fn

    def forward(*args):
        return init(*args)

    def setup_context(ctx, inputs, output):
        setup(ctx=ctx, inputs=inputs, output=output)

    return type(
        f"Eager_{op._name}",
        (torch.autograd.Function,),
        {
            "forward": staticmethod(forward),
            "setup_context": staticmethod(setup_context),
            "backward": staticmethod(lambda ctx, *grads: backward(ctx, *grads)),
        },
    )


def eager(*tensors) -> bool:
    """True when a call with these tensors (None allowed) needs none of the dispatcher's
    modes: not compiling, and only plain tensors or parameters."""
    return not torch.compiler.is_compiling() and all(
        t is None or type(t) in _PLAIN for t in tensors
    )


def direct(op):
    """``op`` (a ``torch.library`` custom op) as a callable that, in eager mode, does what
    the dispatcher would do without it: casts under autocast by the op's rule
    (``AUTOCAST``), records autograd through an equivalent Function when an input needs a
    gradient, and calls the implementation. It goes through ``op`` when compiling, for
    tensor subclasses (fake tensors, functorch wrappers), for tensors inside lists, for
    calls that leave defaulted arguments out, and for in-place ops under autograd (an op
    that writes its inputs bumps their version counters, as the dispatcher does). The
    dispatcher's wrappers were most of an eager call's host time (docs/design/torch.md);
    the results are the same either way (the implementation is what ``op`` runs)."""
    fn, qual = op._init_fn, op._qualname
    nargs = len(op._opoverload._schema.arguments)
    fwd = _function(op) if op._backward_fn is not None else None
    mutated = [
        i
        for i, a in enumerate(op._opoverload._schema.arguments)
        if a.alias_info is not None and a.alias_info.is_write
    ]

    def call(*args):
        if len(args) != nargs or torch.compiler.is_compiling():
            return op(*args)
        grad, dev = False, None
        for a in args:
            if isinstance(a, torch.Tensor):
                if type(a) not in _PLAIN:
                    return op(*args)
                grad = grad or a.requires_grad
                dev = dev or a.device.type
            elif isinstance(a, (list, tuple)) and any(isinstance(e, torch.Tensor) for e in a):
                return op(*args)
        grad = grad and torch.is_grad_enabled()
        if mutated:  # written in place: version counters bumped, as ADInplaceOrView
            if grad:
                return op(*args)
            for i in mutated:
                if args[i] is not None:
                    torch.autograd.graph.increment_version(args[i])
            return fn(*args)
        rule = AUTOCAST.get(qual)
        if rule is not None and dev is not None and torch.is_autocast_enabled(dev):
            cast = rule(args, dev)
            if cast is not None:
                with torch.autocast(dev, enabled=False):
                    return (
                        fwd.apply(*cast)
                        if grad and fwd is not None
                        else op(*cast)
                        if grad
                        else fn(*cast)
                    )
        if grad:
            return fwd.apply(*args) if fwd is not None else op(*args)
        return fn(*args)

    call.op = op
    call.__doc__ = fn.__doc__
    return call


def clear() -> None:
    """Drop every kept graph (tests; after changing engines' registrations)."""
    _cache.clear()
