"""The softmax engine: softmax / log-softmax along any axis, forward and backward, as
Triton kernels (one pass for rows that fit a register tile, two passes with an online
maximum for longer rows; see ``_kernels``). It takes graphs of exactly one softmax or
softmax_backward node with float32 / float16 / bfloat16 tensors of any strides.
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
    one_read_grid,
    operands_in_memory,
)
from ..fusion._codegen import zero_flags_source
from . import _kernels as K

TYPES = (DataType.FLOAT, DataType.HALF, DataType.BFLOAT16)
MAX_TILE = 16384  # elements of one program's register tile (rows x BLOCK_L)
POW2 = tuple(1 << i for i in range(15))
L2_BYTES = 40e6  # the part of the H100's 50 MB L2 that rows re-read may count on


@dataclasses.dataclass(frozen=True)
class SoftmaxKnobs:
    PASSES: int = 1  # 1: whole rows in registers; 2: statistics, then the output
    #                         (two kernels); 3: both loops in one program per row;
    #                         4: one read, SPLIT co-resident programs per row (GPU only)
    BLOCK_L: int = 1024  # elements of a row per tile (PASSES=1: at least the row)
    BLOCK_ROWS: int = 1  # rows per program (PASSES=1)
    SPLIT: int = 1  # chunks per row, one program each (PASSES=2)
    num_warps: int = 4
    PROGRAMS: int = 0  # PASSES=3: 0 = a program per row, else that many programs
    #                         walking the rows (bounds the rows L2 must hold); PASSES=4:
    #                         the persistent grid, a multiple of SPLIT
    PREFETCH: int = 0  # PASSES=4: load the next row while waiting for the others


def _node(graph):
    return graph.nodes[0]


def _problem(graph) -> K.Problem:
    n = _node(graph)
    roles = ("DY", "Y", "DX") if n.kind == "softmax_backward" else ("X", "Y")
    uids = {**n.inputs, **n.outputs}
    descs = {r: graph.tensors[uids[r]] for r in roles}
    dims = descs["Y"].dims
    return K.Problem(dims, n.axis % len(dims), descs)


def _pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


COOP_BLOCK = 16384  # PASSES=4: elements per program (16 warps: 32 fp32 per thread)
COOP_MAX_SPLIT = 64


def _check_coop(p, kn, target) -> Support:
    if not target.is_cuda and kn.SPLIT > 1:
        return decline(
            "one read (PASSES=4) with SPLIT > 1 needs a GPU: a row's programs wait "
            "for each other, and the interpreter runs programs one at a time"
        )
    if kn.BLOCK_ROWS != 1 or kn.BLOCK_L > COOP_BLOCK:
        return decline(f"one read: BLOCK_ROWS=1 and BLOCK_L <= {COOP_BLOCK}")
    return one_read_grid(
        "one read", kn.SPLIT, -(-p.L // kn.BLOCK_L), COOP_MAX_SPLIT, kn.PROGRAMS, target.num_sms
    )


def _coop_knobs(p, target, backward: bool, log: bool):
    """The one-read config for rows of 4 to 64 chunks on a GPU, or None (measured on the
    H100 at 256 x 262144 bf16; docs/design/softmax.md). Backward holds two tensors' chunks
    (dy and y), so its chunks are half as long."""
    if not target.is_cuda:
        return None
    # the H100 sweeps of the tagged-partial kernels: forward 16384-element chunks, 8 warps,
    # two programs per SM (softmax with its exponentials reused and PREFETCH 2.45 TB/s, 2.12
    # without; log-softmax 2.17-2.23 without, PREFETCH slower); softmax backward 8192,
    # 8 warps, two per SM, PREFETCH (2.51-2.65); log-softmax backward 16384, 16 warps, one
    # per SM, PREFETCH (2.49; 8192 x 8 without PREFETCH: 2.22-2.44 over three runs)
    if backward and log:
        block, warps, per_sm, prefetch = COOP_BLOCK, 16, 1, 1
    elif backward:
        block, warps, per_sm, prefetch = COOP_BLOCK // 2, 8, 2, 1
    else:
        block, warps, per_sm, prefetch = COOP_BLOCK, 8, 2, 0 if log else 1
    split = -(-p.L // block)
    if split < 4 or split > COOP_MAX_SPLIT:
        return None
    programs = (per_sm * target.num_sms // split) * split
    return SoftmaxKnobs(4, block, 1, split, warps, programs, prefetch)


class SoftmaxEngine(Engine):
    """Softmax and log-softmax, forward and backward, along any axis."""

    id = 25
    name = "softmax"
    behavior_notes = frozenset({BehaviorNote.RUNTIME_COMPILATION})

    def check_support(self, graph, target: Target) -> Support:
        if len(graph.nodes) != 1 or graph.nodes[0].kind not in ("softmax", "softmax_backward"):
            return decline("takes one softmax or softmax_backward node alone")
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
            Knob("PASSES", (1, 2, 3, 4), 1),
            Knob("BLOCK_L", POW2, 1024),
            Knob("BLOCK_ROWS", POW2[:9], 1),
            Knob("SPLIT", tuple(range(1, 257)), 1),
            Knob("num_warps", (1, 2, 4, 8, 16), 4),
            Knob("PROGRAMS", tuple(range(0, 4097)), 0),
            Knob("PREFETCH", (0, 1), 0),
        ]

    def check_config(self, graph, config: EngineConfig, target: Target) -> Support:
        sup = super().check_config(graph, config, target)
        if not sup.ok:
            return sup
        kn, p = SoftmaxKnobs(**config.knob_dict), _problem(graph)
        if kn.PREFETCH and kn.PASSES != 4:
            return decline("PREFETCH is a one-read (PASSES=4) knob")
        if kn.PASSES == 4:
            return _check_coop(p, kn, target)
        if kn.PROGRAMS and kn.PASSES != 3:
            return decline("PROGRAMS (persistent programs) is a two-loop (PASSES=3) knob")
        if kn.PASSES == 1:
            if kn.BLOCK_L < p.L:
                return decline(
                    f"one pass holds whole rows: BLOCK_L={kn.BLOCK_L} < row length {p.L}"
                )
            if kn.BLOCK_L * kn.BLOCK_ROWS > MAX_TILE or kn.SPLIT != 1:
                return decline(f"one pass: BLOCK_ROWS x BLOCK_L <= {MAX_TILE} and SPLIT=1")
        elif kn.PASSES == 3:
            if kn.BLOCK_ROWS != 1 or kn.SPLIT != 1 or kn.BLOCK_L > MAX_TILE:
                return decline(f"two loops: BLOCK_ROWS=1, SPLIT=1, BLOCK_L <= {MAX_TILE}")
        elif kn.BLOCK_ROWS != 1 or kn.SPLIT > max(1, -(-p.L // kn.BLOCK_L)):
            return decline(
                "two passes: BLOCK_ROWS=1 and SPLIT at most the row's tiles "
                f"({max(1, -(-p.L // kn.BLOCK_L))})"
            )
        elif kn.BLOCK_L > MAX_TILE:
            return decline(f"two passes: BLOCK_L <= {MAX_TILE}")
        return SUPPORTED

    def configs(self, graph, target: Target) -> list[EngineConfig]:
        p = _problem(graph)
        out = []
        cap = MAX_TILE if target.is_cuda else 1024
        if _pow2(p.L) <= cap:
            bl = _pow2(max(p.L, 1))
            br = max(1, min(256, (4096 if target.is_cuda else 256) // bl))
            warps = max(1, min(16, bl * br // 512)) if target.is_cuda else 4
            out.append(SoftmaxKnobs(1, bl, br, 1, warps))
        bl = 4096 if target.is_cuda else 256
        tiles = max(1, -(-p.L // bl))
        split = max(1, min(256, tiles, _pow2(-(-16 * target.num_sms // max(p.R, 1)))))
        if p.L > bl or not out:
            # measured on the H100 (a sweep of every config): two kernels want 4096-wide
            # tiles and a SPLIT that fills the GPU; one program per row wants 8192-wide
            # tiles, 16 warps when it streams two tensors (backward)
            out.append(SoftmaxKnobs(2, bl, 1, split, 8 if target.is_cuda else 4))
            two_loop_warps = 16 if _node(graph).kind == "softmax_backward" else 8
            # measured on the H100 (65536-wide bf16): two programs per SM
            # walking the rows beat a program per row by 11% forward; backward re-reads two
            # tensors, and a program per row measured best (2.6 TB/s; 264 programs: 2.3)
            backward = _node(graph).kind == "softmax_backward"
            progs = (
                2 * target.num_sms
                if target.is_cuda and not backward and p.R > 2 * target.num_sms
                else 0
            )
            out.append(
                SoftmaxKnobs(3, 2 * bl, 1, 1, two_loop_warps if target.is_cuda else 4, progs)
            )
            coop = _coop_knobs(p, target, backward, _node(graph).log)
            if coop is not None:
                out.append(coop)
        out.sort(key=lambda kn: self._estimate(p, kn, target))
        return [EngineConfig.make(self, **dataclasses.asdict(kn)) for kn in out]

    @staticmethod
    def _estimate(p, kn, target) -> float:
        item = sum(t.itemsize for t in p.types.values())
        # PASSES=2 reads its inputs twice from DRAM; PASSES=3's second read comes from L2
        # while the rows in flight (one per SM) fit there, else from DRAM as well
        inputs = ("X",) if "X" in p.types else ("DY", "Y")
        reread = sum(p.types[r].itemsize for r in inputs)
        in_flight = min(p.R, kn.PROGRAMS or target.num_sms) * p.L * reread
        again = 1.15 if in_flight <= L2_BYTES else 1.8
        # PASSES=4 reads once but its programs wait for each other at every row: its first
        # version measured 0.66-0.70 of copy on the H100 (docs/design/softmax.md), hence 1.3
        moved = p.R * p.L * item * {1: 1.0, 2: 1.6, 3: again, 4: 1.3}[kn.PASSES]
        programs = -(-p.R // kn.BLOCK_ROWS) if kn.PASSES == 1 else (kn.PROGRAMS or p.R * kn.SPLIT)
        # PASSES=4 runs its persistent grid at once, one or two programs per SM (its own
        # choice, from the registers): it fills the GPU with a program per SM
        per_sm = 1.0 if kn.PASSES == 4 else 2.0
        fill = max(min(1.0, programs / (per_sm * target.num_sms)), 1e-3)
        return moved / (target.bandwidth * fill) + 3e-6 * (2 if kn.PASSES in (2, 4) else 1)

    def estimate_seconds(self, graph, config, target) -> float:
        return self._estimate(_problem(graph), SoftmaxKnobs(**config.knob_dict), target)

    def workspace_size(self, graph, config, target) -> int:
        kn = SoftmaxKnobs(**config.knob_dict)
        if kn.PASSES == 4:
            return K.partial_floats(_problem(graph), kn) * 4
        if kn.PASSES != 2:
            return 0
        per = 1 if _node(graph).kind == "softmax_backward" else 2
        return _problem(graph).R * kn.SPLIT * per * 4

    def build(self, graph, config, target) -> Executable:
        return _SoftmaxExecutable(
            graph,
            SoftmaxKnobs(**config.knob_dict),
            target,
            self.workspace_size(graph, config, target),
        )


class _SoftmaxExecutable(Executable, LaunchList):
    def __init__(self, graph, kn: SoftmaxKnobs, target, workspace: int):
        LaunchList.__init__(self)
        self.workspace_size = workspace
        n, p = _node(graph), _problem(graph)
        if p.R == 0 or p.L == 0:
            return  # nothing to read or write
        backward = n.kind == "softmax_backward"
        roles = ("DY", "Y", "DX") if backward else ("X", "Y")
        uids = {**n.inputs, **n.outputs}
        bufs = [("buf", uids[r]) for r in roles]
        tag = f"softmax_{graph.key()[:12]}"
        const = {"num_warps": kn.num_warps}
        ws = [("ws", torch.float32)]
        if kn.PASSES == 4:
            zero = f"{tag}_zero"
            words = K.partial_floats(p, kn)
            self.add_launch(
                kernel_from_source(zero_flags_source(zero, 0, words), zero),
                (-(-words // 1024),),
                {"num_warps": 4},
                ws,
                graph,
                target.is_cuda,
            )
            src = K.coop_source(f"{tag}_coop", p, kn, backward, n.log)
            self.add_launch(
                kernel_from_source(src, f"{tag}_coop"),
                (kn.PROGRAMS,),
                const,
                bufs + ws,
                graph,
                target.is_cuda,
            )
            return
        if kn.PASSES != 2:
            src = (K.one_pass_source if kn.PASSES == 1 else K.two_loop_source)(
                tag, p, kn, backward, n.log
            )
            grid = kn.PROGRAMS or -(-p.R // kn.BLOCK_ROWS)
            self.add_launch(
                kernel_from_source(src, tag), (grid,), const, bufs, graph, target.is_cuda
            )
            return
        stats_roles = bufs[:2] if backward else bufs[:1]
        for name, src, args in (
            (
                f"{tag}_stats",
                K.stats_source(f"{tag}_stats", p, kn, backward, n.log),
                stats_roles + ws,
            ),
            (f"{tag}_write", K.write_source(f"{tag}_write", p, kn, backward, n.log), bufs + ws),
        ):
            self.add_launch(
                kernel_from_source(src, name), (p.R, kn.SPLIT), const, args, graph, target.is_cuda
            )

    def run(self, buffers, workspace, stream=None):
        self.run_launches(buffers, workspace, stream)
