"""The LRN engine: cross-channel local response normalization and divisive (spatial)
normalization, forward and backward, as Triton kernels (see ``_kernels`` for the
schedule and ``ops/lrn.py`` for the math). It takes graphs of exactly one ``lrn``,
``lrn_backward``, ``div_norm`` or ``div_norm_backward`` node with float32 / float16 /
bfloat16 tensors of any strides (NCHW, NHWC, NCDHW, NDHWC, strided views).

Cost: the forward reads x (and means) once from DRAM and writes y; the window's other
n - 1 (LRN) or n^s - 1 (divisive) loads of each element hit L1/L2. The backward's first
kernel reads dy and x and writes 8 bytes per element of float32 workspace; its second
reads them back with x and dy and writes dx (and dmeans). LRN's backward also has a
one-kernel form (``PASSES=1``) that recomputes each neighbour's S from x instead (n^2
cached loads per element, no workspace): the default for windows up to 8 channels.
"""

from __future__ import annotations

import dataclasses

import torch

from ...enums import BehaviorNote, DataType
from ...runtime.launch import LaunchList, kernel_from_source
from ..base import (
    SUPPORTED,
    Engine,
    EngineConfig,
    Executable,
    Knob,
    Support,
    Target,
    decline,
    operands_in_memory,
)
from . import _kernels as K

TYPES = (DataType.FLOAT, DataType.HALF, DataType.BFLOAT16)
KINDS = ("lrn", "lrn_backward", "div_norm", "div_norm_backward")
ROLES = {
    "lrn": ("X", "Y"),
    "lrn_backward": ("DY", "X", "DX"),
    "div_norm": ("X", "MEANS", "Y"),
    "div_norm_backward": ("DY", "X", "MEANS", "DX", "DMEANS"),
}
RECOMPUTE_MAX_N = 8  # LRN backward windows the one-kernel form takes by default


@dataclasses.dataclass(frozen=True)
class LrnKnobs:
    PASSES: int = 1  # backward: 1 recomputes neighbours' S (LRN only), 2 uses the
    #                         workspace (two kernels); forward: 1
    BLOCK: int = 1024  # elements per program
    num_warps: int = 4


def _node(graph):
    return graph.nodes[0]


def _problem(graph) -> K.Problem:
    n = _node(graph)
    uids = {**n.inputs, **n.outputs}
    return K.Problem(n, {r: graph.tensors[uids[r]] for r in ROLES[n.kind]})


class LrnEngine(Engine):
    """LRN across channels and divisive normalization over space, forward and backward."""

    id = 38
    name = "lrn"
    behavior_notes = frozenset({BehaviorNote.RUNTIME_COMPILATION})

    def check_support(self, graph, target: Target) -> Support:
        if len(graph.nodes) != 1 or graph.nodes[0].kind not in KINDS:
            return decline("takes one lrn, lrn_backward, div_norm or div_norm_backward node alone")
        mem = operands_in_memory(graph)
        if not mem:
            return mem
        for d in graph.tensors.values():
            if d.data_type not in TYPES:
                return decline(
                    f"tensor {d.label()} is {d.data_type.name}: float32, float16 or "
                    "bfloat16 only (float64 runs on the reference)"
                )
        return SUPPORTED

    def knob_space(self, graph=None) -> list[Knob]:
        return [
            Knob("PASSES", (1, 2), 1),
            Knob("BLOCK", (64, 128, 256, 512, 1024, 2048, 4096), 1024),
            Knob("num_warps", (1, 2, 4, 8), 4),
        ]

    def check_config(self, graph, config: EngineConfig, target: Target) -> Support:
        sup = super().check_config(graph, config, target)
        if not sup.ok:
            return sup
        kind, passes = _node(graph).kind, LrnKnobs(**config.knob_dict).PASSES
        if kind in ("lrn", "div_norm") and passes != 1:
            return decline("the forward is one kernel: PASSES=1")
        if kind == "div_norm_backward" and passes != 2:
            return decline(
                "divisive normalization's backward needs the workspace: PASSES=2 "
                "(recomputing a box's neighbours costs n^(2s) loads)"
            )
        return SUPPORTED

    def configs(self, graph, target: Target) -> list[EngineConfig]:
        kind = _node(graph).kind
        options = (
            [1]
            if kind in ("lrn", "div_norm")
            else [2]
            if kind == "div_norm_backward"
            else ([1, 2] if graph.nodes[0].lrn_n <= RECOMPUTE_MAX_N else [2, 1])
        )
        return [
            EngineConfig.make(self, **dataclasses.asdict(LrnKnobs(passes, 1024, 4)))
            for passes in options
        ]

    def family(self, config: EngineConfig) -> str:
        return f"{self.name}-passes{config.knob_dict.get('PASSES', 1)}"

    def estimate_seconds(self, graph, config, target) -> float:
        p = _problem(graph)
        item = sum(t.itemsize for t in p.types.values())
        kn = LrnKnobs(**config.knob_dict)
        extra = 0.0
        if _node(graph).kind.endswith("backward"):
            # PASSES=2: 8 bytes of workspace written and read back, x and dy read twice;
            # PASSES=1: n^2 + n loads per element from L1/L2, priced as 1/16 byte each
            extra = 16 + 2 * item if kn.PASSES == 2 else p.n * (p.n + 1) * item / 16
        return p.total * (item + extra) / target.bandwidth + 3e-6 * kn.PASSES

    def workspace_size(self, graph, config, target) -> int:
        if not _node(graph).kind.endswith("backward") or LrnKnobs(**config.knob_dict).PASSES == 1:
            return 0
        return 2 * 4 * _problem(graph).total

    def build(self, graph, config, target) -> Executable:
        return _LrnExecutable(
            graph, LrnKnobs(**config.knob_dict), target, self.workspace_size(graph, config, target)
        )


class _LrnExecutable(Executable, LaunchList):
    def __init__(self, graph, kn: LrnKnobs, target, workspace: int):
        LaunchList.__init__(self)
        self.workspace_size = workspace
        n, p = _node(graph), _problem(graph)
        if p.total == 0:
            return  # nothing to read or write
        uids = {**n.inputs, **n.outputs}
        means = n.kind.startswith("div_norm")
        tag = f"{n.kind}_{graph.key()[:12]}"
        grid = (-(-p.total // kn.BLOCK),)
        const = {"num_warps": kn.num_warps}

        def args(roles):
            return [("buf", uids[r]) for r in roles]

        if not n.kind.endswith("backward") or kn.PASSES == 1:
            src = (
                K.recompute_source(tag, p, kn.BLOCK)
                if n.kind == "lrn_backward"
                else K.forward_source(tag, p, kn.BLOCK, means)
            )
            self.add_launch(
                kernel_from_source(src, tag),
                grid,
                const,
                args(ROLES[n.kind]),
                graph,
                target.is_cuda,
            )
            return
        ws = [("ws", torch.float32)]
        stats_roles = ("DY", "X", "MEANS") if means else ("DY", "X")
        grad_roles = ROLES[n.kind]
        for name, src, a in (
            (
                f"{tag}_stats",
                K.stats_source(f"{tag}_stats", p, kn.BLOCK, means),
                args(stats_roles) + ws,
            ),
            (
                f"{tag}_grad",
                K.grad_source(f"{tag}_grad", p, kn.BLOCK, means),
                args(grad_roles) + ws,
            ),
        ):
            self.add_launch(kernel_from_source(src, name), grid, const, a, graph, target.is_cuda)

    def run(self, buffers, workspace, stream=None):
        self.run_launches(buffers, workspace, stream)
