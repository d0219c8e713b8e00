"""The ``opendnn`` backend for ``torch.compile``: ``torch.compile(model, backend="opendnn")``.

Importing this module registers the backend with dynamo. ``backend(gm, example_inputs)``
rewrites the FX graph dynamo captured and returns it, recompiled; no AOTAutograd: every
opendnn operation is a ``torch.library`` custom op with its own autograd, so the graph
trains eagerly through autograd like any PyTorch code.

Passes, in order:

1. ``call_module`` nodes of supported module types become calls of their functional form
   (``compile_ops.lower_modules``; dynamo inlines ``nn.Module``s, so these come from
   graphs made by ``torch.fx.symbolic_trace``).
2. Every node is read as a canonical call of an opendnn operation
   (``compile_ops.canonical``), or kept PyTorch with the reason.
3. Fusion (``compile_fuse``): conv + batch-norm folding, conv / linear + bias + activation,
   layer / group norm + activation, explicit attention -> scaled-dot-product attention.
   Each chain becomes one call of a ``compile_fused`` function which chooses *at call
   time*: with autograd recording (grad mode on and an input requiring grad) the chain
   runs unfused through the routed operations, so training is exact; without (inference,
   ``torch.no_grad`` / ``inference_mode``) it folds and runs one opendnn graph with the
   activation in the kernel's epilogue. One compiled graph thus serves both modes.
   Attention always runs as opendnn's SDPA (it has its own backward).
4. Routing: the other supported nodes call ``compile_ops.ROUTED[op]``, which runs
   ``opendnn.torch.functional.<op>`` and PyTorch's function where opendnn declines
   (``GraphNotSupportedError``; each reason logged once with ``OPENDNN_LOG=info`` and
   counted in ``runtime_fallbacks()``). Fused chains fall back the same way, to unfused.
5. Everything else (reshapes, adds, indexing, ...) stays PyTorch.

Modes (``torch.compile(model, backend="opendnn", mode=...)``): ``None`` / ``"default"``
return the rewritten graph, run eagerly. ``"reduce-overhead"`` hands it on to PyTorch's
``cudagraphs`` backend: AOTAutograd splits forward and backward (every opendnn operation
is a custom op with a fake implementation and an autograd formula, so both trace; fused
chains trace unfused) and CUDA-graph trees replay each, so a step costs one launch per
graph instead of Python per operation. Inputs not on CUDA run as in the default mode.

``last_report()`` tells what the last compilation did: nodes routed, groups fused, and
nodes left to PyTorch with the reason; ``OPENDNN_LOG=info`` logs it.
"""

from __future__ import annotations

import dataclasses
import threading

import torch
from torch.fx.node import map_arg

from .. import log
from ..errors import BadParamError, Status
from . import compile_fuse
from .compile_ops import (  # noqa: F401
    ROUTED,
    canonical,
    lower_modules,
    reset_fallbacks,
    runtime_fallbacks,
    target_name,
)

ALREADY = "already an opendnn operation"


@dataclasses.dataclass
class Report:
    """What one ``backend`` call did to one FX graph (node names are the graph's)."""

    routed: list = dataclasses.field(default_factory=list)  # (node, operation)
    fused: list = dataclasses.field(default_factory=list)  # (pattern, [nodes])
    left: list = dataclasses.field(default_factory=list)  # (node, target, reason)
    modules: list = dataclasses.field(default_factory=list)  # (node, module) lowered

    def fused_kinds(self) -> list:
        return [kind for kind, _ in self.fused]

    def summary(self) -> str:
        lines = [
            f"opendnn torch.compile: {len(self.routed)} nodes routed, "
            f"{len(self.fused)} groups fused, {len(self.left)} left to PyTorch"
        ]
        lines += [f"  fused {kind}: {', '.join(nodes)}" for kind, nodes in self.fused]
        lines += [f"  routed {node} -> {op}" for node, op in self.routed]
        lines += [
            f"  module {node} ({mod}) read as its functional form" for node, mod in self.modules
        ]
        lines += [f"  PyTorch {node} ({target}): {why}" for node, target, why in self.left]
        return "\n".join(lines)

    __str__ = summary


_lock = threading.Lock()
_reports: list = []
KEEP_REPORTS = 64


def last_report() -> Report | None:
    """The report of the most recent ``backend`` call in this process (None before)."""
    with _lock:
        return _reports[-1] if _reports else None


def reports() -> list:
    """The reports of the last KEEP_REPORTS compilations, oldest first (dynamo compiles one
    graph per graph break and per recompilation)."""
    with _lock:
        return list(_reports)


MODES = (None, "default", "reduce-overhead")


def backend(
    gm: torch.fx.GraphModule, example_inputs, mode: str | None = None, options: dict | None = None
):
    """Rewrite dynamo's FX graph ``gm`` (see the module docstring) and return it, or, in
    mode "reduce-overhead", its CUDA-graphed form."""
    if mode not in MODES:
        raise BadParamError(
            f"mode {mode!r} is not one of {MODES[1:]}", op="torch.compile", status=Status.BAD_PARAM
        )
    if options:
        raise BadParamError(
            f"the opendnn backend takes no options, got {sorted(options)}",
            op="torch.compile",
            status=Status.BAD_PARAM,
        )
    report = Report()
    graph = gm.graph
    report.modules = [(n.name, str(t)) for n, t in lower_modules(gm).items()]
    canon = {
        n: canonical(n)
        for n in graph.nodes
        if n.op in ("call_function", "call_method", "call_module")
    }
    groups = compile_fuse.find(graph, canon)
    in_groups = set()
    for g in groups:
        report.fused.append((g.kind, [n.name for n in g.nodes]))
        in_groups.update(g.nodes)
    replaced = {}
    for g in groups:  # graph order: a group's inputs may be an earlier group's value
        g.args = map_arg(g.args, lambda n: replaced.get(n, n))
        new = compile_fuse.apply(graph, [g])
        replaced[g.nodes[-1]] = next(iter(new))
    for node in canon:
        if node in in_groups:
            continue
        c = canonical(node)  # again: its arguments may now be fused groups' values
        if isinstance(c, str):
            if c == ALREADY:
                report.routed.append((node.name, str(node.target)))
            else:
                if node.op == "call_module":
                    c = f"{type(gm.get_submodule(node.target)).__name__} module: not routed"
                report.left.append((node.name, target_name(node), c))
            continue
        name, args, kwargs = c
        with graph.inserting_before(node):
            new = graph.call_function(ROUTED[name], args, kwargs)
        new.meta = dict(node.meta)
        node.replace_all_uses_with(new)
        graph.erase_node(node)
        report.routed.append((node.name, name))
    graph.lint()
    gm.recompile()
    with _lock:
        _reports.append(report)
        del _reports[:-KEEP_REPORTS]
    if log.info_enabled():
        log.info(report.summary())
    if mode == "reduce-overhead" and any(
        isinstance(t, torch.Tensor) and t.is_cuda for t in example_inputs
    ):
        from torch._dynamo.backends.cudagraphs import cudagraphs

        return cudagraphs(gm, example_inputs)
    return gm


def _register() -> None:
    """Register ``backend`` as "opendnn" unless dynamo has it already, or knows it from
    the package's ``torch_dynamo_backends`` entry point (then its lookup registers it)."""
    from torch._dynamo.backends import registry

    if "opendnn" in registry._COMPILER_FNS or registry._BACKENDS.get("opendnn") is not None:
        return
    registry.register_backend(backend, name="opendnn")


_register()
