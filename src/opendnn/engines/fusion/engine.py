"""Runtime-fusion engine: one generated Triton kernel per fused pointwise graph, optionally
ending in reductions (all reductions of a graph share one output shape; genstats is the
pair sum(x), sum(x^2) per channel).

Virtual tensors stay in registers. The kernel reads every input once and writes every
output once, so its floor is (bytes read + bytes written) / bandwidth; the cost model is
that plus launch latency. Generated kernels are cached by source hash (see _codegen).
"""
from __future__ import annotations

import dataclasses
import math

import torch

from ...enums import BehaviorNote, DataType
from ...runtime.launch import Launcher, kernel_from_source
from ..base import (SUPPORTED, Engine, EngineConfig, Executable, Knob, Support, Target,
                    decline)
from . import _codegen as cg

SUPPORTED_TYPES = {DataType.FLOAT, DataType.HALF, DataType.BFLOAT16, DataType.DOUBLE,
                   DataType.INT8, DataType.UINT8, DataType.BOOLEAN}


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


def view_parts(graph, n) -> list | str:
    """How a layout node's output reads its graph-input operand(s), or why it cannot."""
    xs = n.inputs["X"] if n.kind == "concatenate" else [n.inputs["X"]]
    for u in xs:
        if u in graph.producers:
            return (f"{n.label()} reads a tensor computed in the graph; layout operations "
                    "fuse only on graph inputs")
    y = graph.tensors[n.outputs["Y"]]
    if n.kind == "transpose":
        x = graph.tensors[xs[0]]
        return [ViewPart(x.uid, [x.strides[p] for p in n.permutation])]
    if n.kind == "slice":
        x = graph.tensors[xs[0]]
        return [ViewPart(x.uid, list(x.strides),
                         sum(st * sd for st, sd in zip(n.starts, x.strides)))]
    if n.kind == "reshape":
        x = graph.tensors[xs[0]]
        try:
            st = torch.empty_strided(x.dims, x.strides, device="meta").view(y.dims).stride()
        except RuntimeError:
            return (f"reshape of '{x.label()}' (strides {list(x.strides)}) to {list(y.dims)} "
                    "is not a view of its memory")
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
    space: list                # S
    pointwise: list            # nodes in topological order
    reductions: list           # Reduce
    kept: list | None          # reduction output dims (None: pure pointwise)
    inputs: list               # non-virtual input uids (scalars included)
    outputs: list              # non-virtual pointwise output uids
    compute: str               # tl.float32 / tl.float64
    pinned: set                # S axes that must stay separate (GEN_INDEX, concat axis)
    views: dict = dataclasses.field(default_factory=dict)   # layout output uid -> ViewPart list
    direct: set = dataclasses.field(default_factory=set)    # inputs read without a view


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
            views[n.outputs["Y"]] = parts
            layout.append(n)
        elif n.kind == "reduction":
            from ...ops.reduction import TABLE
            pre, comb, ident, post = TABLE[n.mode]
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
        if d.data_type not in SUPPORTED_TYPES:
            return (f"tensor '{d.label()}' is {d.data_type.name}: the fused kernel computes in "
                    "floating point and handles only float, int8, uint8 and boolean tensors")
    red_outs = {r.out_uid for r in reds}
    for u in red_outs:
        if graph.consumers.get(u):
            return "a reduction's result is consumed inside the graph (reductions must end it)"
    shapes = [list(graph.tensors[n.outputs["OUT_0"]].dims) for n in pw]
    shapes += [list(graph.tensors[r.in_uid].dims) for r in reds]
    shapes += [list(graph.tensors[u].dims) for u in views]
    rank = max(len(s) for s in shapes)
    padded = [[1] * (rank - len(s)) + s for s in shapes]
    space = [0 if any(p[i] == 0 for p in padded) else max(p[i] for p in padded)
             for i in range(rank)]
    outputs, pinned = [], set()
    for n in pw:
        d = graph.tensors[n.outputs["OUT_0"]]
        if not d.is_virtual:
            if list(d.dims) != space:
                return (f"output '{d.label()}' has dims {list(d.dims)}, not the iteration space "
                        f"{space}")
            outputs.append(d.uid)
    for u in views:
        d = graph.tensors[u]
        if not d.is_virtual:
            if list(d.dims) != space:
                return f"output '{d.label()}' has dims {list(d.dims)}, not the iteration space {space}"
            outputs.append(u)
        if len(d.dims) != rank:
            return f"layout output '{d.label()}' has rank {len(d.dims)}, not {rank}"
    for n in layout:
        if n.kind == "concatenate":
            pinned.add(n.axis)
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
            if out.dims[n.axis] > 2 ** 24:
                return f"gen_index axis of size {out.dims[n.axis]} is not exact in float32"
            pinned.add(axis)
    double = any(d.data_type == DataType.DOUBLE for d in graph.tensors.values()) or any(
        n.compute_data_type == DataType.DOUBLE for n in graph.nodes)
    inputs = [u for u in graph.input_uids]
    direct = {u for n in graph.nodes if n.kind not in ("transpose", "slice", "reshape",
                                                         "concatenate")
              for u in graph.node_uids(n, "inputs")}
    for u in direct & set(inputs):
        d = graph.tensors[u]
        if not d.is_pass_by_value and len(d.dims) > rank:
            return f"input '{d.label()}' has more dims than the iteration space"
    return Analysis(space, pw, reds, kept, inputs, outputs,
                    "tl.float64" if double else "tl.float32", pinned, views, direct)


class FusionEngine(Engine):
    """Generated Triton kernel for pointwise DAGs (+ trailing reductions)."""
    id = 1
    name = "runtime_fusion"
    behavior_notes = frozenset({BehaviorNote.RUNTIME_COMPILATION})

    def check_support(self, graph, target: Target) -> Support:
        a = analyze(graph)
        return decline(a) if isinstance(a, str) else SUPPORTED

    def knob_space(self, graph=None) -> list[Knob]:
        return [Knob("BLOCK", (256, 512, 1024, 2048, 4096), 1024),
                Knob("BLOCK_KEPT", (1, 2, 4, 8, 16, 32, 64, 128, 256), 4),
                Knob("BLOCK_RED", (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096), 1024),
                Knob("SPLIT", (1, 2, 4, 8, 16, 32, 64, 128, 256), 1),
                Knob("num_warps", (1, 2, 4, 8, 16), 4),
                Knob("num_stages", (1, 2, 3, 4, 5), 3)]

    def configs(self, graph, target: Target) -> list[EngineConfig]:
        a = analyze(graph)
        if isinstance(a, str):
            return []
        return [EngineConfig.make(self, **k) for k in _choose_knobs(graph, a, target)]

    def estimate_seconds(self, graph, config, target) -> float:
        """Bytes over bandwidth, slowed when the grid cannot fill the GPU (fewer than two
        programs per SM), plus 3 us per launch."""
        moved = sum(graph.tensors[u].numel * graph.tensors[u].data_type.itemsize
                    for u in graph.tensors if not graph.tensors[u].is_virtual)
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
        return _FusedExecutable(graph, a, config.knob_dict, target,
                                self.workspace_size(graph, config, target))


def _choose_knobs(graph, a: Analysis, target: Target) -> list[dict]:
    numel = math.prod(a.space)
    cpu = not target.is_cuda
    if not a.reductions:
        if cpu:
            return [dict(BLOCK=1024, num_warps=4)]
        cands = [dict(BLOCK=2048, num_warps=8), dict(BLOCK=1024, num_warps=4),
                 dict(BLOCK=4096, num_warps=8), dict(BLOCK=512, num_warps=4)]
        if numel < 1 << 16:
            cands.insert(0, dict(BLOCK=256, num_warps=2 if 256 in () else 4))
        return cands
    kept_n = math.prod(k for k in a.kept)
    red_n = numel // max(kept_n, 1) if numel else 0
    inner_red = _inner_is_reduced(graph, a)
    # Measured on the H100 (bench/reduction_sweep.py, 8192^2 sums): rows want one long
    # row per program with 16 warps (2.41 TB/s bf16, 2.75 fp32); columns want 64 kept
    # columns x 16 rows per step, the rows split 8 ways (2.21 / 2.60 TB/s).
    if inner_red:
        bred = min(_pow2_ceil(max(red_n, 1)), 2048 if not cpu else 1024)
        bkept = max(1, min((1024 if cpu else 2048) // bred, _pow2_ceil(max(kept_n, 1))))
        warps = 4 if cpu else (16 if bred >= 2048 else 8 if bred >= 1024 else 4)
    else:
        bkept = min(_pow2_ceil(max(kept_n, 1)), 64)
        bred = max(8, min((1024 if cpu else 1024) // bkept, 16, _pow2_ceil(max(red_n, 1))))
        warps = 4
    bkept = _snap(bkept, (1, 2, 4, 8, 16, 32, 64, 128, 256))
    bred = _snap(bred, (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096))
    programs = -(-kept_n // bkept)
    split = 1
    if not cpu and programs < 4 * target.num_sms and red_n > 8 * bred:
        split = min(256, _pow2_ceil(-(-4 * target.num_sms // max(programs, 1))),
                    _pow2_floor(max(red_n // (8 * bred), 1)))
    out = [dict(BLOCK_KEPT=bkept, BLOCK_RED=bred, SPLIT=max(split, 1), num_warps=warps)]
    if split > 1:
        out.append(dict(BLOCK_KEPT=bkept, BLOCK_RED=bred, SPLIT=1, num_warps=warps))
    return out


def _inner_is_reduced(graph, a: Analysis) -> bool:
    d = graph.tensors[a.reductions[0].in_uid]
    src = d if not d.is_virtual else next(
        (graph.tensors[u] for u in a.inputs if graph.tensors[u].dims == tuple(a.space)), d)
    order = sorted(range(len(a.space)), key=lambda i: (src.strides[i] if i < len(src.strides)
                                                        else 0, i))
    for i in order:
        if a.space[i] != 1:
            return a.kept[i] == 1
    return True


def _pow2_ceil(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def _pow2_floor(n: int) -> int:
    return 1 << max(0, int(n).bit_length() - 1)


def _snap(v, allowed):
    return min(allowed, key=lambda a: (abs(math.log2(a) - math.log2(max(v, 1))), a))


# ======================================================================================
class _FusedExecutable(Executable):
    def __init__(self, graph, a: Analysis, knobs: dict, target: Target, workspace: int):
        self.workspace_size = workspace
        self.launches = []   # (Launcher, [(kind, key)])
        src, name, args, grid, constexprs, extra = _generate(graph, a, knobs)
        if grid[0] == 0:
            return
        kern = kernel_from_source(src, name)
        self.source = src
        self._add(kern, grid, constexprs, args, target, graph)
        if extra is not None:
            fsrc, fname, fargs, fgrid, fconst = extra
            self._add(kernel_from_source(fsrc, fname), fgrid, fconst, fargs, target, graph)
            self.source += "\n" + fsrc

    def _add(self, kern, grid, constexprs, args, target, graph):
        launcher = Launcher(kern, grid, constexprs)
        if target.is_cuda:
            example = []
            for kind, key in args:
                if kind == "buf":
                    example.append(graph.tensors[key].torch_dtype)
                elif kind == "ws":
                    example.append(torch.float64 if key else torch.float32)
                else:
                    example.append(1.5)
            launcher.prepare_cuda(example)
        self.launches.append((launcher, args))

    def run(self, buffers, workspace, stream=None):
        for launcher, args in self.launches:
            vals = []
            for kind, key in args:
                if kind == "ws":
                    vals.append(workspace.view(torch.float64 if key else torch.float32))
                else:
                    vals.append(buffers[key])
            launcher.launch(vals, stream)


def _generate(graph, a: Analysis, knobs: dict):
    """(source, name, args, grid, constexprs, finish) for the fused kernel."""
    rank = len(a.space)
    tensors = [u for u in a.inputs if not graph.tensors[u].is_pass_by_value] + a.outputs
    red_outs = [r.out_uid for r in a.reductions]
    strides = {u: cg.padded_strides(graph.tensors[u], rank) for u in tensors
               if u in a.direct or u in a.outputs}
    for y, parts in a.views.items():
        ydims = graph.tensors[y].dims
        for i, part in enumerate(parts):
            strides[(y, i)] = [0 if d == 1 else st for d, st in zip(ydims, part.strides)]
    if a.reductions:
        classes = ["kept" if a.kept[i] == a.space[i] and a.space[i] != 1 else "red"
                   for i in range(rank)]
        for u in red_outs:
            st = cg.padded_strides(graph.tensors[u], rank)
            strides[u] = [s if c == "kept" else 0 for s, c in zip(st, classes)]
    else:
        classes = ["kept"] * rank
    sizes, cstrides, cclasses, origin = cg.collapse(list(a.space), strides, classes, a.pinned)
    numel = math.prod(a.space)
    big = any(graph.tensors[u].span >= 2 ** 31 for u in tensors) or numel >= 2 ** 31
    ptrs = {u: f"P{u}" for u in tensors + red_outs}
    scalars = [u for u in a.inputs if graph.tensors[u].is_pass_by_value]
    sig = [ptrs[u] for u in tensors + red_outs] + [f"s{u}" for u in scalars]
    args = [("buf", u) for u in tensors + red_outs] + [("buf", u) for u in scalars]
    ct = a.compute
    tag = graph.key()[:12]
    if not a.reductions:
        return _pointwise_source(graph, a, sizes, cstrides, origin, big, sig, args, ptrs,
                                 scalars, ct, knobs, tag)
    return _reduce_source(graph, a, sizes, cstrides, cclasses, origin, big, sig, args, ptrs,
                          scalars, ct, knobs, tag)


def _pointwise_source(graph, a, sizes, strides, origin, big, sig, args, ptrs, scalars, ct,
                      knobs, tag):
    rank = len(a.space)
    numel = math.prod(sizes) if sizes else 1
    block = knobs["BLOCK"]
    name = f"fused_pointwise_{tag}"
    ind = "    "
    lines = [f"@triton.jit", f"def {name}({', '.join(sig + ['BLOCK: tl.constexpr'])}):",
             f"{ind}pid = tl.program_id(0)" + (".to(tl.int64)" if big else ""),
             f"{ind}idx = pid * BLOCK + tl.arange(0, BLOCK)",
             f"{ind}mask = idx < {numel}"]
    lines += cg.index_decomposition("idx", sizes or [1], "i", ind)
    names = [f"i{k}" for k in range(len(sizes or [1]))]
    offs = {u: cg.offset_expr(names, st, "idx * 0") for u, st in strides.items()}

    def index_of(axis, out_rank):
        s_axis = axis + rank - out_rank
        for k, dims in enumerate(origin):
            if dims == [s_axis]:
                return names[k]
        return "idx * 0"

    def load(uid):
        if uid in scalars:
            return f"s{uid}"
        if uid in a.views:
            return _view_load(graph, a, uid, ptrs, lambda key: f"({offs[key]})", "mask", ct,
                              index_of)
        return cg.load_expr(ptrs[uid], f"({offs[uid]})", "mask", ct)

    em = cg.Emitter(graph, ct, load, index_of, ind)
    for n in a.pointwise:
        em.emit_node(n)
    for u in a.outputs:
        em.lines.append(ind + cg.store_expr(ptrs[u], f"({offs[u]})", em.value(u), graph.tensors[u],
                                            "mask"))
    src = "\n".join(lines + em.lines) + "\n"
    grid = (-(-numel // block) if math.prod(a.space) else 0,)
    return src, name, args, grid, {"BLOCK": block, "num_warps": knobs["num_warps"]}, None


def _reduce_source(graph, a, sizes, strides, classes, origin, big, sig, args, ptrs, scalars, ct,
                   knobs, tag):
    rank = len(a.space)
    kdims = [k for k, c in enumerate(classes) if c == "kept"]
    rdims = [k for k, c in enumerate(classes) if c == "red"]
    kept_n = math.prod(sizes[k] for k in kdims) if kdims else 1
    red_n = math.prod(sizes[k] for k in rdims) if rdims else 1
    if math.prod(a.space) == 0:
        red_n = 0 if kept_n else red_n
    BK, BR, split = knobs["BLOCK_KEPT"], knobs["BLOCK_RED"], knobs["SPLIT"]
    # Tile orientation: the memory-contiguous axis goes last, where Triton's layouts
    # vectorize. KA/RA are the broadcast suffixes that place kept and reduced indices.
    kept_last = not _inner_is_reduced(graph, a)
    KA, RA = ("[None, :]", "[:, None]") if kept_last else ("[:, None]", "[None, :]")
    tile = "[BLOCK_RED, BLOCK_KEPT]" if kept_last else "[BLOCK_KEPT, BLOCK_RED]"
    red_axis = 0 if kept_last else 1
    chunk = -(-max(red_n, 1) // split)
    chunk = -(-chunk // BR) * BR
    name = f"fused_reduce_{tag}"
    ind, ind2 = "    ", "        "
    sig2 = sig + (["WS"] if split > 1 else []) + ["BLOCK_KEPT: tl.constexpr",
                                                  "BLOCK_RED: tl.constexpr"]
    if split > 1:
        args = args + [("ws", ct.endswith("64"))]
    itype = ".to(tl.int64)" if big else ""
    lines = ["@triton.jit", f"def {name}({', '.join(sig2)}):",
             f"{ind}pid = tl.program_id(0){itype}",
             f"{ind}pid_s = tl.program_id(1){itype}",
             f"{ind}kept = pid * BLOCK_KEPT + tl.arange(0, BLOCK_KEPT)",
             f"{ind}mask_k = kept < {kept_n}"]
    ksizes = [sizes[k] for k in kdims] or [1]
    rsizes = [sizes[k] for k in rdims] or [1]
    lines += cg.index_decomposition("kept", ksizes, "k", ind)
    knames = [f"k{j}" for j in range(len(ksizes))]
    rnames = [f"r{j}" for j in range(len(rsizes))]
    koff = {u: cg.offset_expr(knames, [st[k] for k in kdims] or [0], "kept * 0")
            for u, st in strides.items()}
    roff = {u: cg.offset_expr(rnames, [st[k] for k in rdims] or [0]) for u, st in strides.items()}
    for r in a.reductions:
        lines.append(f"{ind}acc{r.out_uid} = tl.full({tile}, {cg._lit(r.ident)}, {ct})")
    # Bounds are literals (or a literal multiple of pid_s) and the mask compares with a
    # literal: Triton's alignment analysis then proves the mask constant over 16-byte
    # groups and vectorizes the loads (a runtime bound makes them element-wise).
    # Slices of the reduced range are disjoint; the last one may overrun, masked.
    lines.append(f"{ind}lo = pid_s * {chunk}" if split > 1 else f"{ind}lo = 0")
    lines.append(f"{ind}for start in range(lo, lo + {chunk}, BLOCK_RED):" if split > 1
                 else f"{ind}for start in range(0, {chunk}, BLOCK_RED):")
    lines.append(f"{ind2}rr = start + tl.arange(0, BLOCK_RED)")
    lines.append(f"{ind2}mask = mask_k{KA} & (rr < {red_n}){RA}")
    lines += cg.index_decomposition("rr", rsizes, "r", ind2)

    def off(u):
        k = f"({koff[u]}){KA}"
        r = f"({roff[u]}){RA}" if roff[u] != "0" else f"(rr * 0){RA}"
        return f"({k} + {r})"

    def index_of(axis, out_rank):
        s_axis = axis + rank - out_rank
        for k, dims in enumerate(origin):
            if dims == [s_axis]:
                if k in kdims:
                    return f"({knames[kdims.index(k)]}{KA} + 0 * rr{RA})"
                return f"(0 * kept{KA} + {rnames[rdims.index(k)]}{RA})"
        return f"(0 * kept{KA} + 0 * rr{RA})"

    def load(uid):
        if uid in scalars:
            return f"s{uid}"
        if uid in a.views:
            return _view_load(graph, a, uid, ptrs, off, "mask", ct, index_of)
        return cg.load_expr(ptrs[uid], off(uid), "mask", ct)

    em = cg.Emitter(graph, ct, load, index_of, ind2)
    for n in a.pointwise:
        em.emit_node(n)
    for u in a.outputs:
        em.lines.append(ind2 + cg.store_expr(ptrs[u], off(u), em.value(u), graph.tensors[u], "mask"))
    for r in a.reductions:
        x = em.value(r.in_uid)
        pre = cg.PRE[r.pre].format(x=x)
        em.lines.append(f"{ind2}x{r.out_uid} = tl.where(mask, {pre}, {cg._lit(r.ident)})")
        em.lines.append(f"{ind2}acc{r.out_uid} = " + cg.COMBINE[r.combine].format(
            a=f"acc{r.out_uid}", b=f"x{r.out_uid}"))
    lines += em.lines
    fin_lines = []
    for j, r in enumerate(a.reductions):
        fin_lines.append(f"{ind}res{r.out_uid} = " + cg.FOLD[r.combine].format(
            x=f"acc{r.out_uid}", ax=red_axis))
        if split == 1:
            val = _post(r, f"res{r.out_uid}", red_n)
            fin_lines.append(ind + cg.store_expr(ptrs[r.out_uid], f"({koff[r.out_uid]})", val,
                                                 graph.tensors[r.out_uid], "mask_k"))
        else:
            fin_lines.append(f"{ind}tl.store(WS + ({j} * {split} + pid_s) * {kept_n} + kept, "
                             f"res{r.out_uid}, mask=mask_k)")
    src = "\n".join(lines + fin_lines) + "\n"
    src = cg.COMBINE_HELPERS + "\n\n" + src
    grid = (-(-kept_n // BK) if kept_n and math.prod(a.kept) else 0, split)
    constexprs = {"BLOCK_KEPT": BK, "BLOCK_RED": BR, "num_warps": knobs["num_warps"],
                  "num_stages": knobs.get("num_stages", 3)}
    extra = None
    if split > 1:
        extra = _finish_source(graph, a, kept_n, ksizes, knames, koff, ptrs, split, red_n, ct, tag)
    return src, name, args, grid, constexprs, extra


def _view_load(graph, a, y, ptrs, off, mask, ct, index_of) -> str:
    """Expression reading layout output ``y`` through its input(s)."""
    parts = a.views[y]
    rank_y = len(graph.tensors[y].dims)
    expr = None
    for i, part in enumerate(parts):
        addr = f"{ptrs[part.src]} + {part.offset} + {off((y, i))}"
        if part.axis is None:
            return f"tl.load({addr}, mask={mask}, other=0).to({ct})"
        ia = index_of(part.axis, rank_y)
        cond = f"(({ia}) >= {part.start}) & (({ia}) < {part.end})"
        load = f"tl.load({addr}, mask={mask} & {cond}, other=0).to({ct})"
        expr = load if expr is None else f"tl.where({cond}, {load}, {expr})"
    return expr


def _post(r, val, count):
    if r.post == "mean":
        return f"({val} / {count})" if count else f"({val} * float('nan'))"
    if r.post == "sqrt":
        return f"tl.sqrt({val})"
    return val


def _finish_source(graph, a, kept_n, ksizes, knames, koff, ptrs, split, red_n, ct, tag):
    name = f"fused_finish_{tag}"
    ind = "    "
    outs = [r.out_uid for r in a.reductions]
    lines = ["@triton.jit",
             f"def {name}(WS, {', '.join(ptrs[u] for u in outs)}, BLOCK: tl.constexpr):",
             f"{ind}kept = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)",
             f"{ind}mask_k = kept < {kept_n}"]
    lines += cg.index_decomposition("kept", ksizes, "k", ind)
    for j, r in enumerate(a.reductions):
        lines.append(f"{ind}acc = tl.full([BLOCK], {cg._lit(r.ident)}, {ct})")
        lines.append(f"{ind}for s in tl.static_range({split}):")
        lines.append(f"{ind}    part = tl.load(WS + ({j} * {split} + s) * {kept_n} + kept, "
                     f"mask=mask_k, other={cg._lit(r.ident)})")
        lines.append(f"{ind}    acc = " + cg.COMBINE[r.combine].format(a="acc", b="part"))
        lines.append(ind + cg.store_expr(ptrs[r.out_uid], f"({koff[r.out_uid]})",
                                         _post(r, "acc", red_n), graph.tensors[r.out_uid],
                                         "mask_k"))
    src = "\n".join(lines) + "\n"
    block = 256
    args = [("ws", ct.endswith("64"))] + [("buf", u) for u in outs]
    return src, name, args, (-(-kept_n // block),), {"BLOCK": block, "num_warps": 4}
