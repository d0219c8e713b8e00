"""Triton matmul engine with a fused epilogue.

Takes a graph of one matmul ``C = A @ B`` followed by any DAG of pointwise operations on
C and on inputs that broadcast to C's dims (bias, scale, residual, activation, type
conversion). The epilogue runs on the float32 accumulator tile in registers; only the
graph's outputs are written. Batch dimensions collapse to at most two (b0, b1) with
per-tensor strides (0 = broadcast).

Knobs (see ``_kernels.MatmulKnobs``): tile sizes, grouped order, stages, warps, split-K
(partials in the workspace, then a reduce kernel that runs the epilogue), persistent
scheduling, TMA descriptors (Hopper). The cost model is the kernels' roofline estimate.
"""

from __future__ import annotations

import dataclasses
import functools

import torch

from ... import backends
from ...enums import BehaviorNote, DataType, NumericalNote
from ...errors import BadParamError, Status
from ...runtime.launch import DualKernel, LaunchList, kernel_from_source
from ..base import SUPPORTED, Engine, EngineConfig, Executable, Knob, Support, Target, decline
from ..fusion import _codegen as cg
from ..fusion import epilogue as fuse_epilogue
from . import _kernels as K

OPERAND_TYPES = {DataType.FLOAT, DataType.HALF, DataType.BFLOAT16}


@dataclasses.dataclass
class MatmulAnalysis:
    node: object
    a: object
    b: object
    c: object
    ep: object  # fusion.epilogue.Epilogue: pointwise nodes after the matmul
    batch: list  # collapsed batch sizes (len 2)
    bstrides: dict  # uid -> [s_b0, s_b1] for A, B and epilogue tensors
    mnk: tuple


@functools.lru_cache(maxsize=256)  # graphs are frozen; support, cost and build share it
def analyze(graph) -> MatmulAnalysis | str:
    mms = [n for n in graph.nodes if n.kind == "matmul"]
    if len(mms) != 1:
        return f"needs exactly one matmul node, found {len(mms)}"
    mm = mms[0]
    a, b, c = (
        graph.tensors[mm.inputs["A"]],
        graph.tensors[mm.inputs["B"]],
        graph.tensors[mm.outputs["C"]],
    )
    if mm.inputs["A"] in graph.producers or mm.inputs["B"] in graph.producers:
        return "matmul operands must be graph inputs (no prologue fusion)"
    if a.is_pass_by_value or b.is_pass_by_value:
        return "matmul operands passed by value (host scalars) are not tiles in memory"
    if a.data_type not in OPERAND_TYPES or b.data_type not in OPERAND_TYPES:
        return f"operand types {a.data_type.name} x {b.data_type.name}: float, half, bfloat16 only"
    if a.data_type != b.data_type:
        return f"mixed operand types {a.data_type.name} x {b.data_type.name}"
    ep = fuse_epilogue.collect(graph, mm, c.uid)
    if isinstance(ep, str):
        return ep
    cdims = list(c.dims)
    inputs, outputs = ep.inputs, ep.outputs
    rank = len(cdims)
    nb = rank - 2
    bsizes = cdims[:nb]
    strides = {}
    for d in [a, b] + [graph.tensors[u] for u in inputs + outputs]:
        pad = cg.padded_strides(d, rank) if d is not a and d is not b else _operand_strides(d, rank)
        strides[d.uid] = pad
    # collapse drops size-1 dims and merges batch dims that every tensor walks contiguously
    bs, cstr, _, _ = cg.collapse(bsizes, {u: s[:nb] for u, s in strides.items()}, ["b"] * nb, set())
    if len(bs) > 2:
        return f"batch dims {bsizes} do not collapse to two dimensions for every tensor"
    batch = [1] * (2 - len(bs)) + bs
    bstrides = {u: ([0] * (2 - len(bs)) + st[: len(bs)]) for u, st in cstr.items()}
    mnk = (a.dims[-2], b.dims[-1], a.dims[-1])
    if batch[0] * batch[1] > 65535:
        return f"batch count {batch[0] * batch[1]} exceeds the grid's 65535 limit"
    full = {u: bstrides[u] + strides[u][-2:] for u in strides}
    return MatmulAnalysis(mm, a, b, c, ep, batch, full, mnk)


def _operand_strides(d, rank):
    st = cg.padded_strides(d, rank)
    return st[:-2] + list(d.strides[-2:])


class MatmulEngine(Engine):
    """Tiled tensor-core matmul (Triton) with a generated pointwise epilogue."""

    id = 2
    name = "triton_matmul"
    behavior_notes = frozenset({BehaviorNote.RUNTIME_COMPILATION})

    def check_support(self, graph, target: Target) -> Support:
        a = analyze(graph)
        return decline(a) if isinstance(a, str) else SUPPORTED

    def numerical_notes(self, graph, config) -> frozenset:
        a = analyze(graph)
        if isinstance(a, str):
            return frozenset()
        notes = set()
        if a.a.data_type != DataType.FLOAT or _tf32(a):
            notes.add(NumericalNote.TENSOR_CORE)
        if _tf32(a):
            notes.add(NumericalNote.DOWN_CONVERT_INPUTS)
        return frozenset(notes)

    def knob_space(self, graph=None) -> list[Knob]:
        fields = dataclasses.fields(K.MatmulKnobs)
        space = K.knob_space()
        out = []
        for f in fields:
            vals = sorted({getattr(k, f.name) for k in space} | {f.default})
            out.append(Knob(f.name, tuple(vals), f.default))
        return out

    def configs(self, graph, target: Target) -> list[EngineConfig]:
        a = analyze(graph)
        if isinstance(a, str):
            return []
        out = []
        for kn in K.knob_space():
            if not self._knobs_ok(graph, a, kn, target).ok:
                continue
            out.append(EngineConfig.make(self, **dataclasses.asdict(kn)))
        out.sort(key=lambda c: self.estimate_seconds(graph, c, target))
        return out

    def _knobs_ok(self, graph, a, kn, target) -> Support:
        if not target.is_cuda and (kn.tma or kn.persistent or kn.warp_specialize):
            return decline("TMA, persistent and warp-specialized kernels run compiled only")
        if K.float32_only(kn) and a.a.data_type != DataType.FLOAT:
            return decline(
                f"{kn.short()} is a float32-operand config (K.FLOAT32_NARROW); "
                f"A is {a.a.data_type.name}"
            )
        if kn.warp_specialize:
            # Measured 2026-11-22 on the H100 with Triton 3.6: warp-specialized variants
            # returned wrong products (tests/core/test_gpu_core.py); offered again once they pass.
            return decline("warp-specialized kernels gave wrong results on Hopper, Triton 3.6")
        if kn.tma:
            if not target.is_hopper:
                return decline("TMA descriptors need a Hopper GPU")
            ok, why = K.tma_ok(a.bstrides[a.a.uid], a.bstrides[a.b.uid], a.a.data_type.itemsize)
            if not ok:
                return decline(why)
        smem = (kn.BLOCK_M + kn.BLOCK_N) * kn.BLOCK_K * a.a.data_type.itemsize * kn.num_stages
        if kn.flatten:
            # the flattened loop keeps the epilogue's staged output tile alive beside the
            # operand stages (Triton asked 278552 bytes for 128x256x64 x 3 stages with a
            # float32 output: 147456 + 131072)
            out = max(
                [graph.tensors[u].data_type.itemsize for u in a.ep.outputs]
                or [a.c.data_type.itemsize]
            )
            smem += kn.BLOCK_M * kn.BLOCK_N // kn.epilogue_subtile * out
        if target.is_cuda and smem > 220 * 1024:
            return decline(
                f"{smem} bytes of shared memory for {kn.num_stages} stages of "
                f"{a.a.data_type.name} tiles (and, flattened, the output tile) "
                "exceed the 227 KB per block"
            )
        if kn.SPLIT_K > 1 and a.mnk[2] < kn.SPLIT_K * kn.BLOCK_K:
            return decline(f"K={a.mnk[2]} too small for SPLIT_K={kn.SPLIT_K}")
        return SUPPORTED

    def check_config(self, graph, config, target) -> Support:
        s = super().check_config(graph, config, target)
        if not s.ok:
            return s
        a = analyze(graph)
        try:
            kn = K.MatmulKnobs(**config.knob_dict)
            K.validate(kn)
        except (TypeError, ValueError) as e:
            return decline(f"invalid knobs: {e}")
        return self._knobs_ok(graph, a, kn, target)

    def estimate_seconds(self, graph, config, target) -> float:
        a = analyze(graph)
        m, n, k = a.mnk
        kn = K.MatmulKnobs(**config.knob_dict)
        peak = (
            target.peak_flops_fp16
            if (a.a.data_type != DataType.FLOAT or _tf32(a))
            else target.peak_flops_fp32
        )
        if a.a.data_type == DataType.FLOAT and _tf32(a):
            peak /= 2
        t = K.estimate_seconds(
            kn,
            m,
            n,
            k,
            a.batch[0] * a.batch[1],
            a.a.data_type.itemsize,
            peak,
            target.bandwidth,
            target.num_sms,
            transposed_fp32=_transposed_fp32(a),
        )
        extra = sum(
            graph.tensors[u].numel * graph.tensors[u].data_type.itemsize
            for u in a.ep.inputs + a.ep.outputs
        )
        return t + extra / target.bandwidth

    def workspace_size(self, graph, config, target) -> int:
        a = analyze(graph)
        kn = K.MatmulKnobs(**config.knob_dict)
        return K.workspace_bytes(kn, a.mnk[0], a.mnk[1], a.batch[0] * a.batch[1])

    def build(self, graph, config, target) -> Executable:
        return _MatmulExecutable(
            graph,
            analyze(graph),
            K.MatmulKnobs(**config.knob_dict),
            target,
            self.workspace_size(graph, config, target),
        )


def _tf32(a: MatmulAnalysis) -> bool:
    return a.a.data_type == DataType.FLOAT and bool(backends.allow_tf32)


def _transposed_fp32(a: MatmulAnalysis) -> bool:
    """A TF32 problem with an operand that is not K-major (A's k stride or B's k stride
    not 1), which the tensor cores cannot read in place (``K.estimate_seconds``)."""
    if not _tf32(a):
        return False
    m, n, k = a.mnk
    sa, sb = a.bstrides[a.a.uid], a.bstrides[a.b.uid]
    a_kmajor = sa[3] == 1 or k <= 1 or m <= 1
    b_kmajor = sb[2] == 1 or k <= 1 or n <= 1
    return not (a_kmajor and b_kmajor)


def epilogue(graph, a: MatmulAnalysis, mask: str = "ep_mask") -> tuple[list, str, list]:
    """(params, body, launch args) of the epilogue on the [BLOCK_M, BLOCK_N] tile of batch
    (b0, b1). The epilogue tensors' batch strides are runtime parameters
    (``_codegen.Sizes``), so that problems differing in M or the batch sizes share the
    kernel; their row and column strides stay literals: as parameters, a bf16
    8192 x 1000 x 1024 matmul + bias + relu + residual took 114 us instead of 106 (H100,
    persistent TMA config), the tile's addresses costing more than the shared source saves."""
    big = any(graph.tensors[u].span >= 2**31 for u in a.ep.inputs + a.ep.outputs)
    i64 = ".to(tl.int64)" if big else ""
    sz = cg.Sizes(big)

    def off(u):
        sb0, sb1, sm, sn = (
            sz(f"es{u}_{j}", v, align=True) if j < 2 else v for j, v in enumerate(a.bstrides[u])
        )
        # the m and n terms stay even with stride 0: they give the pointer its tile shape
        terms = [
            f"b0{i64} * {sb0}" if sb0 != "0" else "",
            f"b1{i64} * {sb1}" if sb1 != "0" else "",
            f"offs_m{i64}[:, None] * {sm}",
            f"offs_n{i64}[None, :] * {sn}",
        ]
        return "(" + " + ".join(t for t in terms if t) + ")"

    params, body = fuse_epilogue.source(graph, a.ep, off, mask)
    head = "".join(line + "\n" for line in sz.prologue(""))
    return (
        params + sz.params(),
        head + "ep_mask = mask_m[:, None] & mask_n[None, :]\n" + body,
        fuse_epilogue.launch_args(a.ep) + sz.args(),
    )


class _MatmulExecutable(Executable, LaunchList):
    def __init__(self, graph, a: MatmulAnalysis, kn, target: Target, workspace: int):
        LaunchList.__init__(self)
        self.workspace_size = workspace
        self.a, self.kn = a, kn
        m, n, k = a.mnk
        self.empty = m == 0 or n == 0 or a.batch[0] * a.batch[1] == 0
        if self.empty:
            return
        params, body, ep_args = epilogue(graph, a)
        tf32 = _tf32(a)
        # kernels named by their source's digest: the source holds no size of the problem
        src_c, name_c = cg.name_by_digest(
            K.matmul_source(
                "mm",
                kn,
                epilogue_params=params,
                epilogue_body=body,
                allow_tf32=tf32,
                interpret=False,
            ),
            "mm",
        )
        src_i, name_i = cg.name_by_digest(
            K.matmul_source(
                "mm",
                kn,
                epilogue_params=params,
                epilogue_body=body,
                allow_tf32=tf32,
                interpret=True,
            ),
            "mm",
        )
        kern = DualKernel(
            kernel_from_source(src_c, name_c).compiled,
            kernel_from_source(src_i, name_i).interpreted,
        )
        self.source = src_c
        sa, sb = a.bstrides[a.a.uid], a.bstrides[a.b.uid]
        ints = [m, n, k, a.batch[1], sa[0], sa[1], sa[2], sa[3], sb[0], sb[1], sb[2], sb[3]]
        ws = [("ws", torch.float32)] if kn.SPLIT_K > 1 else []
        if kn.tma and target.is_cuda:
            K.ensure_allocator()
        # with split-K the main kernel takes WS first; its epilogue params go unused
        main_args = [("buf", a.a.uid), ("buf", a.b.uid)] + ws + ep_args + [("int", v) for v in ints]
        const = dict(K.launch_options(kn))
        if kn.tma:
            const.update(K.tma_flags(sa, sb))
        grid = K.grid(kn, m, n, a.batch[0], a.batch[1], target.num_sms)
        self.add_launch(kern, grid, const, main_args, graph, target.is_cuda)
        if kn.SPLIT_K > 1:
            rsrc, rname = cg.name_by_digest(
                K.splitk_reduce_source("mm_reduce", kn, params, body), "mm_reduce"
            )
            rk = kernel_from_source(rsrc, rname)
            rargs = ws + ep_args + [("int", m), ("int", n), ("int", a.batch[1])]
            self.add_launch(
                rk,
                K.reduce_grid(kn, m, n, a.batch[0], a.batch[1]),
                dict(K.reduce_launch_options(kn)),
                rargs,
                graph,
                target.is_cuda,
            )

    def run(self, buffers, workspace, stream=None):
        for launcher, args in self.launches:
            vals = self.values(args, buffers, workspace)
            if self.kn.tma:
                for v in vals[:2]:
                    if v.data_ptr() % 16:
                        raise BadParamError(
                            "operand is not 16-byte aligned; TMA plans need aligned buffers",
                            op="matmul",
                            status=Status.BAD_PARAM_MISALIGNED_POINTER,
                        )
                K.ensure_allocator()
            launcher.launch(vals, stream)
