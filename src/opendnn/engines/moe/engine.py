"""The MoE grouped matmul engine: cuDNN's ``moe_grouped_matmul`` (NONE, GATHER, SCATTER)
and ``moe_grouped_matmul_bwd`` as Triton kernels (``_kernels``; the math in
``ops/moe.py``), one launch each.

It takes a graph of exactly one such node with float32 / float16 / bfloat16 token,
weight, (d)output and (d)weight -- token and weight (doutput and token) of one type --
of any strides, int32 offsets and indices, computing in float32 (a FLOAT problem's dots
are IEEE float32 unless ``opendnn.backends.allow_tf32``). The offsets are read on the
device: a plan serves any routing of its shapes. Knobs: the tile (BLOCK_M rows of the
routed tokens -- the backward's reduction --, BLOCK_N output columns, BLOCK_K of the
hidden size), warps and pipeline stages.
"""

from __future__ import annotations

import dataclasses

from triton import cdiv, next_power_of_2

from ... import backends
from ...enums import BehaviorNote, DataType, NumericalNote
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
KINDS = ("moe_grouped_matmul", "moe_grouped_matmul_bwd")
MAX_GROUPS = 8192  # forward: every program holds the G offsets as one vector
MAX_GRID_Y = 65535  # CUDA's limit on the grid's second axis
INT32_LIMIT = 2**31
SMEM_BYTES = 180 * 1024  # of the H100's 227 KB a program's pipelined tiles may take
POW2 = (16, 32, 64, 128, 256)


@dataclasses.dataclass(frozen=True)
class MoeKnobs:
    BLOCK_M: int = 64  # routed rows per tile (backward: rows per step of the reduction)
    BLOCK_N: int = 64  # output (weight) columns per tile
    BLOCK_K: int = 32  # hidden-size step (backward: DWeight rows per tile)
    num_warps: int = 4
    num_stages: int = 3


@dataclasses.dataclass(frozen=True)
class Problem:
    """One node's sizes and tensors. ``L``: the routed rows the groups partition (TokenIndex
    rows in GATHER, Token rows otherwise; backward: Token rows)."""

    kind: str
    mode: str  # NONE / GATHER / SCATTER ("NONE" for the backward)
    L: int
    K: int
    N: int
    G: int
    E: int
    operand: DataType  # token's (= weight's / doutput's) type
    out: DataType
    roles: dict  # role -> descriptor

    @property
    def backward(self) -> bool:
        return self.kind == "moe_grouped_matmul_bwd"


def problem(graph) -> Problem:
    n = graph.nodes[0]
    roles = {r: graph.tensors[u] for r, u in {**n.inputs, **n.outputs}.items()}
    tok, off = roles["TOKEN"], roles["FIRST_TOKEN_OFFSET"]
    groups = off.dims[0]
    if n.kind == "moe_grouped_matmul_bwd":
        dy, dw = roles["DOUTPUT"], roles["DWEIGHT"]
        n_cols, experts, mode, rows, out = dy.dims[2], groups, "NONE", tok.dims[1], dw
    else:
        w, out = roles["WEIGHT"], roles["OUTPUT"]
        n_cols, experts, mode = w.dims[2], w.dims[0], n.moe_mode.name
        rows = roles["TOKEN_INDEX"].dims[1] if mode == "GATHER" else tok.dims[1]
    return Problem(
        kind=n.kind,
        mode=mode,
        L=rows,
        K=tok.dims[2],
        N=n_cols,
        G=groups,
        E=experts,
        operand=tok.data_type,
        out=out.data_type,
        roles=roles,
    )


def _inner_span(d, skip: int) -> int:
    """The largest element offset inside one index of axis ``skip`` (int32 in the kernels)."""
    return sum((n - 1) * abs(s) for i, (n, s) in enumerate(zip(d.dims, d.strides)) if i != skip)


def _tf32(p: Problem) -> bool:
    return p.operand == DataType.FLOAT and bool(backends.allow_tf32)


def _precision(p: Problem) -> str:
    return "tf32" if _tf32(p) else "ieee"


class MoeEngine(Engine):
    """The MoE grouped matmul, forward (the three routing modes) and weight gradient."""

    id = 56
    name = "moe_grouped_matmul"
    behavior_notes = frozenset({BehaviorNote.RUNTIME_COMPILATION})

    def check_support(self, graph, target: Target) -> Support:
        if len(graph.nodes) != 1 or graph.nodes[0].kind not in KINDS:
            return decline("takes one moe_grouped_matmul or moe_grouped_matmul_bwd node alone")
        mem = operands_in_memory(graph)
        if not mem:
            return mem
        n, p = graph.nodes[0], problem(graph)
        if n.compute_data_type == DataType.DOUBLE:
            return decline("computes in float32; compute_data_type DOUBLE asks for float64")
        data = [r for r in p.roles if r not in ("FIRST_TOKEN_OFFSET", "TOKEN_INDEX", "TOKEN_KS")]
        for r in data:
            d = p.roles[r]
            if d.data_type not in TYPES:
                return decline(
                    f"{r} '{d.label()}' is {d.data_type.name}: float32, float16 or bfloat16 "
                    "only (float64 runs on the reference)"
                )
        other = "DOUTPUT" if p.backward else "WEIGHT"
        if p.roles[other].data_type != p.operand:
            return decline(
                f"TOKEN is {p.operand.name} and {other} {p.roles[other].data_type.name}: the "
                "dot takes operands of one type"
            )
        if p.backward:
            if p.G > MAX_GRID_Y:
                return decline(f"{p.G} groups: the grid's second axis holds at most {MAX_GRID_Y}")
            if _inner_span(p.roles["DWEIGHT"], 0) >= INT32_LIMIT:
                return decline("one group's DWEIGHT spans 2**31 elements or more (int32 offsets)")
        else:
            if p.G > MAX_GROUPS:
                return decline(
                    f"{p.G} groups: each program holds the offsets as one vector, at most "
                    f"{MAX_GROUPS}"
                )
            if _inner_span(p.roles["WEIGHT"], 0) >= INT32_LIMIT:
                return decline("one expert's WEIGHT spans 2**31 elements or more (int32 offsets)")
            if _inner_span(p.roles["OUTPUT"], 1) >= INT32_LIMIT:
                return decline("an OUTPUT row spans 2**31 elements or more (int32 offsets)")
        return SUPPORTED

    def numerical_notes(self, graph, config) -> frozenset:
        if len(graph.nodes) != 1 or graph.nodes[0].kind not in KINDS:
            return frozenset()
        p = problem(graph)
        if p.operand not in TYPES:
            return frozenset()
        notes = set()
        if p.operand != DataType.FLOAT or _tf32(p):
            notes.add(NumericalNote.TENSOR_CORE)
        if _tf32(p):
            notes.add(NumericalNote.DOWN_CONVERT_INPUTS)
        return frozenset(notes)

    def knob_space(self, graph=None) -> list[Knob]:
        return [
            Knob("BLOCK_M", POW2, 64),
            Knob("BLOCK_N", POW2, 64),
            Knob("BLOCK_K", POW2[:4], 32),
            Knob("num_warps", (1, 2, 4, 8), 4),
            Knob("num_stages", (1, 2, 3, 4, 5), 3),
        ]

    def check_config(self, graph, config: EngineConfig, target: Target) -> Support:
        sup = super().check_config(graph, config, target)
        if not sup.ok:
            return sup
        kn, p = MoeKnobs(**config.knob_dict), problem(graph)
        if not p.backward and cdiv(p.N, kn.BLOCK_N) > MAX_GRID_Y:
            return decline(
                f"{cdiv(p.N, kn.BLOCK_N)} column tiles: the grid's second axis holds at "
                f"most {MAX_GRID_Y}"
            )
        if target.is_cuda:
            item = p.operand.itemsize
            tiles = (
                (kn.BLOCK_K * kn.BLOCK_M + kn.BLOCK_M * kn.BLOCK_N)
                if p.backward
                else (kn.BLOCK_M * kn.BLOCK_K + kn.BLOCK_K * kn.BLOCK_N)
            )
            need = tiles * item * max(kn.num_stages, 1)
            if need > SMEM_BYTES:
                return decline(
                    f"the pipelined tiles take {need} bytes of shared memory (at most {SMEM_BYTES})"
                )
        return SUPPORTED

    def configs(self, graph, target: Target) -> list[EngineConfig]:
        p = problem(graph)
        if not target.is_cuda:
            # the interpreter: few, large programs; tiles no wider than the problem needs
            def fit(n, cap):
                return max(16, min(cap, 1 << max(0, (n - 1).bit_length())))

            kns = [MoeKnobs(32, fit(p.N, 64), fit(p.K, 64), 4, 1)]
        elif p.operand == DataType.FLOAT:
            kns = [
                MoeKnobs(64, 64, 32, 4, 3),
                MoeKnobs(64, 128, 32, 4, 3),
                MoeKnobs(128, 128, 32, 8, 2),
            ]
        elif p.backward:  # the best of the H100 sweep (docs/design/moe.md) per problem
            kns = [
                MoeKnobs(32, 128, 128, 4, 3),
                MoeKnobs(32, 128, 128, 4, 4),
                MoeKnobs(64, 128, 128, 4, 3),
                MoeKnobs(32, 64, 64, 4, 4),
            ]
        else:
            kns = [
                MoeKnobs(128, 256, 64, 8, 3),
                MoeKnobs(128, 128, 64, 4, 3),
                MoeKnobs(64, 128, 64, 8, 3),
                MoeKnobs(64, 64, 128, 8, 3),
            ]
        out = [EngineConfig.make(self, **dataclasses.asdict(kn)) for kn in kns]
        out = [c for c in out if self.check_config(graph, c, target).ok]
        out.sort(key=lambda c: self.estimate_seconds(graph, c, target))
        return out

    def estimate_seconds(self, graph, config, target) -> float:
        """Waves of programs: each program's products (forward: its BLOCK_M x BLOCK_N tile
        over K; backward: its BLOCK_K x BLOCK_N tile over a group's rows, L / G on
        average, half a row step wasted) at one SM's share of the dot rate, scaled by the
        tile's efficiency, times the waves ceil(programs / SMs); against the compulsory
        bytes over the bandwidth (the larger, plus a quarter of the smaller); plus one
        launch. Ranks as the H100 sweep of
        docs/design/moe.md measured: 64 x 128 tiles for a few thousand rows, 128 x 256
        for Mixtral-sized experts, 32-row reduction steps backward."""
        p, kn = problem(graph), MoeKnobs(**config.knob_dict)
        item, out_item = p.operand.itemsize, p.out.itemsize
        if p.operand != DataType.FLOAT:
            peak = target.peak_flops_fp16
        else:
            peak = target.peak_flops_fp16 / 2 if _tf32(p) else target.peak_flops_fp32
        sms = max(target.num_sms, 1)
        if p.backward:
            a, b = kn.BLOCK_K, kn.BLOCK_N
            programs = cdiv(p.K, a) * cdiv(p.N, b) * p.G
            depth = p.L / max(p.G, 1) + kn.BLOCK_M / 2
            moved = p.L * (p.K + p.N) * item + p.G * p.K * p.N * out_item
        else:
            a, b = kn.BLOCK_M, kn.BLOCK_N
            programs = (cdiv(p.L, a) + p.G // 2) * cdiv(p.N, b)
            depth = p.K
            moved = p.L * p.K * item + p.E * p.K * p.N * item + p.L * p.N * out_item
        # operand bytes per product: a tile's a b / (a + b), 128 x 256's taken as full rate
        efficiency = min(1.0, (a * b / (a + b)) / (128 * 256 / 384)) ** 0.5
        per_program = 2.0 * a * b * depth / (peak / sms * efficiency)
        waves = max(1, cdiv(int(programs), sms))
        compute, memory = waves * per_program, moved / target.bandwidth
        # the smaller term is never hidden entirely (and breaks the ties of a memory-bound
        # problem by the tiles' compute)
        return max(compute, memory) + 0.25 * min(compute, memory) + 4e-6

    def build(self, graph, config, target) -> Executable:
        return _MoeExecutable(graph, MoeKnobs(**config.knob_dict), target)


class _MoeExecutable(Executable, LaunchList):
    """One launch: the forward's tile list, or the backward's (tile, group) grid; none when
    nothing is written (no routed rows, no columns, an empty DWeight)."""

    def __init__(self, graph, kn: MoeKnobs, target: Target):
        LaunchList.__init__(self)
        p = problem(graph)
        r = p.roles
        const = {
            "BLOCK_M": kn.BLOCK_M,
            "BLOCK_N": kn.BLOCK_N,
            "BLOCK_K": kn.BLOCK_K,
            "num_warps": kn.num_warps,
            "num_stages": kn.num_stages,
        }
        off = r["FIRST_TOKEN_OFFSET"]
        tok = r["TOKEN"]
        if p.backward:
            dy, dw = r["DOUTPUT"], r["DWEIGHT"]
            if p.K == 0 or p.N == 0:
                return
            src = K.backward_source(p.out, _precision(p))
            kernel = kernel_from_source(src, K.backward_name(p.out, _precision(p)))
            ints = [p.L, p.N, p.K, p.G, dy.strides[1], dy.strides[2], tok.strides[1]]
            ints += [tok.strides[2], off.strides[0], *dw.strides]
            args = [("buf", u.uid) for u in (dy, tok, off, dw)] + [("int", v) for v in ints]
            grid = (cdiv(p.K, kn.BLOCK_K) * cdiv(p.N, kn.BLOCK_N), p.G)
            self.add_launch(kernel, grid, const, args, graph, target.is_cuda)
            return
        w, out = r["WEIGHT"], r["OUTPUT"]
        if p.L == 0 or p.N == 0 or out.dims[1] == 0:
            return
        src = K.forward_source(p.mode, p.out, _precision(p))
        kernel = kernel_from_source(src, K.forward_name(p.mode, p.out, _precision(p)))
        routing = {"NONE": (), "GATHER": ("TOKEN_INDEX",), "SCATTER": ("TOKEN_INDEX", "TOKEN_KS")}
        bufs = [tok, w, off, *(r[role] for role in routing[p.mode]), out]
        ints = [p.L, tok.dims[1], out.dims[1], p.N, p.K, p.G, p.E]
        if p.mode == "SCATTER":
            ints.append(graph.nodes[0].top_k)
        ints += [tok.strides[1], tok.strides[2], *w.strides, off.strides[0]]
        if p.mode != "NONE":
            ints.append(r["TOKEN_INDEX"].strides[1])
        if p.mode == "SCATTER":
            ints.append(r["TOKEN_KS"].strides[1])
        ints += [out.strides[1], out.strides[2]]
        args = [("buf", d.uid) for d in bufs] + [("int", v) for v in ints]
        grid = (cdiv(p.L, kn.BLOCK_M) + p.G, cdiv(p.N, kn.BLOCK_N))
        const["BLOCK_G"] = max(2, next_power_of_2(p.G))
        self.add_launch(kernel, grid, const, args, graph, target.is_cuda)

    def run(self, buffers, workspace, stream=None) -> None:
        self.run_launches(buffers, workspace, stream)
