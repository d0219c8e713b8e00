"""Runtime-fusion engine: one generated Triton kernel per fused pointwise graph, optionally
ending in reductions (all reductions of a graph share one output shape; genstats is the
pair sum(x), sum(x^2) per channel).

Virtual tensors stay in registers. The kernel reads every input once and writes every
output once, so its floor is (bytes read + bytes written) / bandwidth; the cost model is
that plus launch latency. Generated kernels are cached by source hash (see _codegen).
"""

from __future__ import annotations

import dataclasses
import functools
import math

import torch

from ...enums import BehaviorNote, DataType
from ...runtime.launch import LaunchList, kernel_from_source
from ..base import SUPPORTED, Engine, EngineConfig, Executable, Knob, Support, Target, decline
from . import _kernels

SUPPORTED_TYPES = {
    DataType.FLOAT,
    DataType.HALF,
    DataType.BFLOAT16,
    DataType.DOUBLE,
    DataType.INT8,
    DataType.UINT8,
    DataType.BOOLEAN,
}


@dataclasses.dataclass
class Reduce:
    """One reduction: out = post(combine_i pre(in_i))."""

    in_uid: int
    out_uid: int
    pre: str
    combine: str
    ident: float
    post: str


@dataclasses.dataclass
class ViewPart:
    """Y read straight from input ``src``: element y of Y is at
    ``src + offset + sum(y_k * strides[k])``; for concatenation only where
    ``start <= y[axis] < end`` (axis counted in Y's dims)."""

    src: int
    strides: list
    offset: int = 0
    axis: int | None = None
    start: int = 0
    end: int = 0
    flat_dims: tuple | None = None  # reshape that is no view: X read by Y's flat index


def view_parts(graph, n) -> list | str:
    """How a layout node's output reads its graph-input operand(s), or why it cannot."""
    xs = n.inputs["X"] if n.kind == "concatenate" else [n.inputs["X"]]
    for u in xs:
        if u in graph.producers:
            return (
                f"{n.label()} reads a tensor computed in the graph; layout operations "
                "fuse only on graph inputs"
            )
    y = graph.tensors[n.outputs["Y"]]
    if n.kind == "transpose":
        x = graph.tensors[xs[0]]
        return [ViewPart(x.uid, [x.strides[p] for p in n.permutation])]
    if n.kind == "slice":
        x = graph.tensors[xs[0]]
        return [
            ViewPart(x.uid, list(x.strides), sum(st * sd for st, sd in zip(n.starts, x.strides)))
        ]
    if n.kind == "reshape":
        x = graph.tensors[xs[0]]
        try:
            st = torch.empty_strided(x.dims, x.strides, device="meta").view(y.dims).stride()
        except RuntimeError:
            # not a view: element f (row-major in Y) is X's element f (row-major in X)
            return [ViewPart(x.uid, list(x.strides), flat_dims=tuple(x.dims))]
        return [ViewPart(x.uid, list(st))]
    parts, start = [], 0
    for u in xs:
        x = graph.tensors[u]
        end = start + x.dims[n.axis]
        parts.append(ViewPart(u, list(x.strides), -start * x.strides[n.axis], n.axis, start, end))
        start = end
    return parts


@dataclasses.dataclass
class Analysis:
    space: list  # S
    pointwise: list  # nodes in topological order
    reductions: list  # Reduce
    kept: list | None  # reduction output dims (None: pure pointwise)
    inputs: list  # non-virtual input uids (scalars included)
    outputs: list  # non-virtual pointwise output uids
    compute: str  # tl.float32 / tl.float64
    pinned: set  # S axes that must stay separate (GEN_INDEX, concat axis)
    views: dict = dataclasses.field(default_factory=dict)  # layout output uid -> ViewPart list
    direct: set = dataclasses.field(default_factory=set)  # inputs read without a view


@functools.lru_cache(maxsize=256)  # graphs are frozen; support, cost and build share it
def analyze(graph) -> Analysis | str:
    """The fused kernel's structure, or the reason the graph does not fit."""
    pw, reds, views, layout = [], [], {}, []
    for n in graph.nodes:
        if n.kind == "pointwise":
            pw.append(n)
        elif n.kind in ("transpose", "slice", "reshape", "concatenate"):
            parts = view_parts(graph, n)
            if isinstance(parts, str):
                return parts
            pbv = [p.src for p in parts if graph.tensors[p.src].is_pass_by_value]
            if pbv:
                return (
                    f"{n.label()} reads '{graph.tensors[pbv[0]].label()}', which is passed "
                    "by value (a host scalar): a view reads its input from memory"
                )
            views[n.outputs["Y"]] = parts
            layout.append(n)
        elif n.kind == "reduction":
            from ...ops.reduction import TABLE, identity

            pre, comb, ident, post = TABLE[n.mode]
            x, y = graph.tensors[n.inputs["X"]], graph.tensors[n.outputs["Y"]]
            if any(a == 0 and b == 1 for a, b in zip(x.dims, y.dims)):
                ident = identity(n.mode, y.data_type)  # nothing to reduce: in Y's type
            reds.append(Reduce(n.inputs["X"], n.outputs["Y"], pre, comb, ident, post))
        elif n.kind == "genstats":
            x = n.inputs["X"]
            reds.append(Reduce(x, n.outputs["SUM"], "x", "add", 0.0, "y"))
            reds.append(Reduce(x, n.outputs["SQ_SUM"], "square", "add", 0.0, "y"))
        else:
            return f"{n.label()} is not pointwise, layout, reduction or genstats"
    for d in graph.tensors.values():
        if d.is_pass_by_value and d.data_type in (DataType.INT32, DataType.INT64):
            continue  # a host integer scalar enters the float compute as a float argument
        if d.data_type == DataType.INT32 and d.uid in graph.producers and not d.is_virtual:
            continue  # an int32 result (e.g. indices) is stored from the float compute
        if d.data_type not in SUPPORTED_TYPES:
            return (
                f"tensor '{d.label()}' is {d.data_type.name}: the fused kernel computes in "
                "floating point and handles only float, int8, uint8 and boolean tensors (and "
                "int32 results)"
            )
    red_outs = {r.out_uid for r in reds}
    for u in red_outs:
        if graph.consumers.get(u):
            return "a reduction's result is consumed inside the graph (reductions must end it)"
    shapes = [list(graph.tensors[n.outputs["OUT_0"]].dims) for n in pw]
    shapes += [list(graph.tensors[r.in_uid].dims) for r in reds]
    shapes += [list(graph.tensors[u].dims) for u in views]
    rank = max(len(s) for s in shapes)
    padded = [[1] * (rank - len(s)) + s for s in shapes]
    space = [
        0 if any(p[i] == 0 for p in padded) else max(p[i] for p in padded) for i in range(rank)
    ]
    outputs, pinned = [], set()
    for n in pw:
        d = graph.tensors[n.outputs["OUT_0"]]
        if not d.is_virtual:
            if list(d.dims) != space:
                return (
                    f"output '{d.label()}' has dims {list(d.dims)}, not the iteration space {space}"
                )
            outputs.append(d.uid)
    for u in views:
        d = graph.tensors[u]
        if not d.is_virtual:
            if list(d.dims) != space:
                return (
                    f"output '{d.label()}' has dims {list(d.dims)}, not the iteration space {space}"
                )
            outputs.append(u)
        if len(d.dims) != rank:
            return f"layout output '{d.label()}' has rank {len(d.dims)}, not {rank}"
    for n in layout:
        if n.kind == "concatenate":
            pinned.add(n.axis)
        y = n.outputs["Y"]
        if views[y][0].flat_dims is not None:
            if reds:
                return "a reshape that is not a view cannot feed a fused reduction"
            if list(graph.tensors[y].dims) != space:
                return "a reshape that is not a view must span the whole iteration space"
    for r in reds:
        if list(graph.tensors[r.in_uid].dims) != space:
            return f"reduction input dims {list(graph.tensors[r.in_uid].dims)} differ from {space}"
    kept = None
    if reds:
        kept = list(graph.tensors[reds[0].out_uid].dims)
        for r in reds:
            if list(graph.tensors[r.out_uid].dims) != kept:
                return "reductions with different output shapes cannot share one kernel"
        if len(kept) != rank:
            return f"reduction output rank {len(kept)} differs from the input rank {rank}"
    for n in pw:
        if n.mode.name == "GEN_INDEX":
            out = graph.tensors[n.outputs["OUT_0"]]
            axis = n.axis + rank - len(out.dims)
            if out.dims[n.axis] > 2**24:
                return f"gen_index axis of size {out.dims[n.axis]} is not exact in float32"
            pinned.add(axis)
    for n in graph.nodes:
        if n.compute_data_type == DataType.INT32:
            return (
                f"{n.label()} computes in INT32: exact integer arithmetic is an int8 "
                "convolution's epilogue"
            )
    double = any(d.data_type == DataType.DOUBLE for d in graph.tensors.values()) or any(
        n.compute_data_type == DataType.DOUBLE for n in graph.nodes
    )
    inputs = [u for u in graph.input_uids]
    direct = {
        u
        for n in graph.nodes
        if n.kind not in ("transpose", "slice", "reshape", "concatenate")
        for u in graph.node_uids(n, "inputs")
    }
    for u in direct & set(inputs):
        d = graph.tensors[u]
        if not d.is_pass_by_value and len(d.dims) > rank:
            return f"input '{d.label()}' has more dims than the iteration space"
    return Analysis(
        space,
        pw,
        reds,
        kept,
        inputs,
        outputs,
        "tl.float64" if double else "tl.float32",
        pinned,
        views,
        direct,
    )


class FusionEngine(Engine):
    """Generated Triton kernel for pointwise DAGs (+ trailing reductions)."""

    id = 1
    name = "runtime_fusion"
    behavior_notes = frozenset({BehaviorNote.RUNTIME_COMPILATION})
    single_pass_pointwise = True  # a pointwise graph is one kernel: loads, nodes, stores

    def check_support(self, graph, target: Target) -> Support:
        a = analyze(graph)
        return decline(a) if isinstance(a, str) else SUPPORTED

    def knob_space(self, graph=None) -> list[Knob]:
        return [
            Knob("BLOCK", (256, 512, 1024, 2048, 4096), 1024),
            Knob("BLOCK_KEPT", (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096), 4),
            Knob("BLOCK_RED", (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096), 1024),
            Knob("SPLIT", tuple(range(1, 1025)), 1),
            Knob("num_warps", (1, 2, 4, 8, 16), 4),
            Knob("num_stages", (1, 2, 3, 4, 5), 3),
        ]

    def configs(self, graph, target: Target) -> list[EngineConfig]:
        a = analyze(graph)
        if isinstance(a, str):
            return []
        return [EngineConfig.make(self, **k) for k in _choose_knobs(graph, a, target)]

    def estimate_seconds(self, graph, config, target) -> float:
        """Bytes over bandwidth, slowed when the grid cannot fill the GPU (fewer than two
        programs per SM), plus 3 us per launch."""
        moved = sum(
            graph.tensors[u].numel * graph.tensors[u].data_type.itemsize
            for u in graph.tensors
            if not graph.tensors[u].is_virtual
        )
        k = config.knob_dict
        a = analyze(graph)
        if isinstance(a, str):
            return float("inf")
        if a.reductions:
            kept_n = math.prod(a.kept)
            programs = -(-kept_n // k["BLOCK_KEPT"]) * k["SPLIT"]
        else:
            programs = -(-math.prod(a.space) // k["BLOCK"])
        fill = min(1.0, programs / (2.0 * target.num_sms))
        launches = 2 if k.get("SPLIT", 1) > 1 else 1
        return moved / target.bandwidth / max(fill, 1e-3) + 3e-6 * launches

    def workspace_size(self, graph, config, target) -> int:
        a = analyze(graph)
        k = config.knob_dict
        if isinstance(a, str) or not a.reductions or k.get("SPLIT", 1) == 1:
            return 0
        kept_n = math.prod(d for d, s in zip(a.kept, a.space))
        return 4 * len(a.reductions) * k["SPLIT"] * kept_n * (2 if a.compute.endswith("64") else 1)

    def build(self, graph, config, target) -> Executable:
        a = analyze(graph)
        return _FusedExecutable(
            graph, a, config.knob_dict, target, self.workspace_size(graph, config, target)
        )


def _choose_knobs(graph, a: Analysis, target: Target) -> list[dict]:
    numel = math.prod(a.space)
    cpu = not target.is_cuda
    if not a.reductions:
        if cpu:
            return [dict(BLOCK=1024, num_warps=4)]
        cands = [
            dict(BLOCK=2048, num_warps=8),
            dict(BLOCK=1024, num_warps=4),
            dict(BLOCK=4096, num_warps=8),
            dict(BLOCK=512, num_warps=4),
        ]
        if numel < 1 << 16:
            cands.insert(0, dict(BLOCK=256, num_warps=2 if 256 in () else 4))
        return cands
    kept_n = math.prod(k for k in a.kept)
    red_n = numel // max(kept_n, 1) if numel else 0
    inner_red = _kernels.inner_is_reduced(graph, a)
    # Measured on the H100 (8192^2 sums, docs/design/fusion.md): rows want one long row
    # per program with 16 warps (2.41 TB/s bf16, 2.75 fp32); columns: _column_knobs.
    if inner_red:
        bred = min(_pow2_ceil(max(red_n, 1)), 2048 if not cpu else 1024)
        bkept = max(1, min((1024 if cpu else 2048) // bred, _pow2_ceil(max(kept_n, 1))))
        warps = 4 if cpu else (16 if bred >= 2048 else 8 if bred >= 1024 else 4)
    elif cpu:
        bkept = min(_pow2_ceil(max(kept_n, 1)), 64)
        bred = max(8, min(1024 // bkept, 16, _pow2_ceil(max(red_n, 1))))
        warps = 4
    else:
        k = _column_knobs(graph, a, kept_n, red_n, target)
        return [k] + ([{**k, "SPLIT": 1}] if k["SPLIT"] > 1 else [])
    bkept = _snap(bkept, (1, 2, 4, 8, 16, 32, 64, 128, 256))
    bred = _snap(bred, (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096))
    programs = -(-kept_n // bkept)
    split = 1
    if not cpu and programs < 4 * target.num_sms and red_n > 8 * bred:
        split = min(
            256,
            _pow2_ceil(-(-4 * target.num_sms // max(programs, 1))),
            _pow2_floor(max(red_n // (8 * bred), 1)),
        )
    out = [dict(BLOCK_KEPT=bkept, BLOCK_RED=bred, SPLIT=max(split, 1), num_warps=warps)]
    if split > 1:
        out.append(dict(BLOCK_KEPT=bkept, BLOCK_RED=bred, SPLIT=1, num_warps=warps))
    return out


def _column_knobs(graph, a: Analysis, kept_n: int, red_n: int, target: Target) -> dict:
    """Column-style reductions on the GPU (the kept axis is the contiguous one).

    Measured on the H100 (docs/design/fusion.md): wide tiles (2048 kept columns, 4 KB of
    each row) and a grid of two programs per SM, every SM given the same share of slices,
    read at 0.84 of copy before the finish; the finish then costs one L2 round trip (see
    ``_kernels._finish_source``)."""
    reads = [
        graph.tensors[u].data_type.itemsize
        for u in a.inputs
        if not graph.tensors[u].is_pass_by_value
    ]
    item = max(reads, default=4)
    # one accumulator tile per reduction, one loaded tile per input: keep them in registers
    tile = _pow2_floor((16384 if item <= 2 else 8192) // max(1, len(a.reductions), len(reads)))
    bkept = min(_pow2_ceil(max(kept_n, 1)), 2048)
    # narrow blocks (few kept columns) take at most 64 rows a step: more slices instead
    bred = max(1, min(tile // bkept, 64, _pow2_ceil(max(red_n, 1))))
    programs = -(-kept_n // bkept)
    split = 1
    if programs < 2 * target.num_sms and red_n >= 8 * bred:
        # partials at most ~4% of the input's bytes; every slice at least 4 tiles
        split = max(
            1,
            min(
                round(2 * target.num_sms / programs), red_n // (4 * bred), red_n * item // 100, 1024
            ),
        )
    return dict(
        BLOCK_KEPT=bkept, BLOCK_RED=bred, SPLIT=split, num_warps=8 if bkept * bred >= 4096 else 4
    )


def _pow2_ceil(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def _pow2_floor(n: int) -> int:
    return 1 << max(0, int(n).bit_length() - 1)


def _snap(v, allowed):
    return min(allowed, key=lambda a: (abs(math.log2(a) - math.log2(max(v, 1))), a))


# ======================================================================================
class _FusedExecutable(Executable, LaunchList):
    def __init__(self, graph, a: Analysis, knobs: dict, target: Target, workspace: int):
        LaunchList.__init__(self)
        self.workspace_size = workspace
        src, name, args, grid, constexprs, extra = _kernels.generate(graph, a, knobs)
        if grid[0] == 0:
            return
        kern = kernel_from_source(src, name)
        self.source = src
        self.add_launch(kern, grid, constexprs, args, graph, target.is_cuda)
        if extra is not None:
            fsrc, fname, fargs, fgrid, fconst = extra
            if target.is_cuda:  # a programmatic dependent launch: see _finish_source
                fconst = {**fconst, "launch_pdl": True}
            self.add_launch(
                kernel_from_source(fsrc, fname), fgrid, fconst, fargs, graph, target.is_cuda
            )
            self.source += "\n" + fsrc

    def run(self, buffers, workspace, stream=None):
        self.run_launches(buffers, workspace, stream)
