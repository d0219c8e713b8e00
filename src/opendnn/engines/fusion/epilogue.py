"""Pointwise epilogues shared by the engines that end in a tile of float32 accumulators
(matmul, convolution): which nodes fuse, which tensors they read and write, and the
Triton code that applies them to the tile in registers.

An epilogue is every pointwise node after the main operation whose output has the main
output's dims; its other inputs broadcast to those dims (bias [1, K, 1, 1], a residual,
a scale) or are host scalars. Only non-virtual tensors are stored.
"""

from __future__ import annotations

import dataclasses

from ...enums import DataType, PointwiseMode
from . import _codegen as cg

EPILOGUE_TYPES = {
    DataType.FLOAT,
    DataType.HALF,
    DataType.BFLOAT16,
    DataType.INT8,
    DataType.UINT8,
    DataType.INT32,
    DataType.BOOLEAN,
}


@dataclasses.dataclass
class Epilogue:
    acc_uid: int  # the main output, held in the accumulator tile
    nodes: list  # pointwise nodes, topological
    inputs: list  # tensors read (uids)
    scalars: list  # pass-by-value uids
    outputs: list  # tensors written (the main output first when it is real)
    stats: list = dataclasses.field(default_factory=list)  # (input, SUM, SQ_SUM) uids
    # INT32 compute (an int8 convolution's epilogue): the tile's arithmetic in float64,
    # which holds every int32 exactly, so sums and products of int32 values are exact
    # while below 2^53
    exact_int: bool = False


def collect(
    graph, main, acc_uid: int, skip=(), allow_stats: bool = False, allow_int32: bool = False
) -> Epilogue | str:
    """The epilogue of ``main`` in ``graph`` (nodes in ``skip`` belong elsewhere, e.g. a
    prologue), or why the other nodes do not fit. With ``allow_stats``, genstats nodes on
    output-shaped tensors are collected too (per-channel sums of the tile). Nodes computing
    in INT32 are taken with ``allow_int32`` (``Epilogue.exact_int``), else declined."""
    acc = graph.tensors[acc_uid]
    nodes, inputs, scalars, outputs, stats = [], [], [], [], []
    skip_ids = {id(n) for n in skip}
    for n in graph.nodes:
        if n is main or id(n) in skip_ids:
            continue
        if n.kind == "genstats" and allow_stats:
            src = graph.tensors[n.inputs["X"]]
            if src.dims != acc.dims or (src.uid not in graph.producers and src.uid != acc_uid):
                return f"genstats of '{src.label()}' is not over the {main.kind} output"
            stats.append((src.uid, n.outputs["SUM"], n.outputs["SQ_SUM"]))
            continue
        if n.kind != "pointwise":
            return f"{n.label()} is not a pointwise epilogue operation"
        if n.mode == PointwiseMode.GEN_INDEX:
            return f"gen_index in a {main.kind} epilogue is not supported"
        if n.compute_data_type == DataType.INT32 and not allow_int32:
            return (
                f"{n.label()} computes in INT32: exact integer epilogues are an int8 convolution's"
            )
        out = graph.tensors[n.outputs["OUT_0"]]
        if out.dims != acc.dims:
            return (
                f"epilogue tensor '{out.label()}' has dims {list(out.dims)}, not {list(acc.dims)}"
            )
        if out.data_type not in EPILOGUE_TYPES:
            return f"epilogue tensor '{out.label()}' is {out.data_type.name}"
        nodes.append(n)
        if not out.is_virtual:
            outputs.append(out.uid)
        for u in n.inputs.values():
            d = graph.tensors[u]
            if u in graph.producers:
                continue
            if d.is_pass_by_value:
                if u not in scalars:
                    scalars.append(u)
            elif u not in inputs:
                if d.data_type not in EPILOGUE_TYPES:
                    return f"epilogue input '{d.label()}' is {d.data_type.name}"
                inputs.append(u)
    if not acc.is_virtual:
        outputs.insert(0, acc_uid)
    exact = any(n.compute_data_type == DataType.INT32 for n in nodes)
    if exact and stats:
        return "genstats in an INT32 epilogue is not supported"
    return Epilogue(acc_uid, nodes, inputs, scalars, outputs, stats, exact)


def source(graph, ep: Epilogue, off, mask: str = "ep_mask", load_mask=None) -> tuple[list, str]:
    """(kernel params, body lines) applying ``ep`` to ``acc``. ``off(uid)`` gives the tile
    offset expression of a tensor; ``mask`` must be defined by the caller's kernel.
    ``load_mask(uid)``, when given, names the mask of an input's load instead (an input
    broadcast along a tile axis -- a per-channel bias -- is loaded as one row, offset and
    mask both of shape [1, BLOCK_N])."""
    ptrs = {u: f"E{u}" for u in ep.inputs + ep.outputs}
    ct = "tl.float64" if ep.exact_int else "tl.float32"
    em = cg.Emitter(
        graph,
        ct,
        lambda u: f"(s{u} + tl.full([1], 0, {ct}))"
        if u in ep.scalars
        else cg.load_expr(ptrs[u], off(u), load_mask(u) if load_mask else mask, ct),
        lambda axis, rank: "0",
        indent="",
    )
    em.var[ep.acc_uid] = "acc"
    for n in ep.nodes:
        em.emit_node(n)
    lines = list(em.lines)
    for u in ep.outputs:
        lines.append(cg.store_expr(ptrs[u], off(u), em.var[u], graph.tensors[u], mask))
    for j, (src, _, _) in enumerate(ep.stats):
        # column (channel) sums of the tile; the caller's kernel stores them as partials
        lines.append(f"st_v{j} = tl.where({mask}, {em.value(src)}, 0.0)")
        lines.append(f"st_s{j} = tl.reduce(st_v{j}, 0, _add_combine)")
        lines.append(f"st_q{j} = tl.reduce(st_v{j} * st_v{j}, 0, _add_combine)")
    params = [ptrs[u] for u in ep.inputs + ep.outputs] + [f"s{u}" for u in ep.scalars]
    return params, "\n".join(lines) + "\n"


def launch_args(ep: Epilogue) -> list:
    """The argument template entries matching ``source``'s params."""
    return [("buf", u) for u in ep.inputs + ep.outputs] + [("buf", u) for u in ep.scalars]
