"""The pooling engines: max and average pooling (cuDNN's resample node in its pooling
modes) over 1-3 spatial axes, forward (``PoolEngine``, with the argmax Index when asked)
and backward (``PoolBackwardEngine``: a gather over the windows containing each input,
deterministic), as Triton kernels (``_kernels``, ``_bwd_kernels``). Any strides: NHWC
tiles pixels x contiguous channels, NCHW tiles pixels of one channel. float32, float16,
bfloat16 data; each takes a graph of exactly its one node.
"""

from __future__ import annotations

import dataclasses
import math

from ...enums import BehaviorNote, DataType
from ...runtime.launch import LaunchList, kernel_from_source
from ...tensor import packed_strides, stride_order, to_torch_dtype
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
from . import _bwd_kernels as B
from . import _kernels as K

TYPES = (DataType.FLOAT, DataType.HALF, DataType.BFLOAT16)
INDEX_TYPES = (DataType.INT8, DataType.UINT8, DataType.INT32, DataType.INT64)
MAX_TILE = 16384
POW2 = tuple(1 << i for i in range(15))


@dataclasses.dataclass(frozen=True)
class PoolKnobs:
    BLOCK_P: int = 32  # pixels per program (flat over N and the spatial axes)
    BLOCK_C: int = 64  # channels per program (1: one channel's pixels, NCHW)
    num_warps: int = 4
    BLOCK_W: int = 0  # > 0: plane tiles, BLOCK_P rows x BLOCK_W of the last axis


def _pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def _problem(graph) -> K.Problem:
    n = graph.nodes[0]
    descs = {r: graph.tensors[u] for r, u in {**n.inputs, **n.outputs}.items()}
    if n.kind == "resample":
        x_dims, y_dims = descs["X"].dims, descs["Y"].dims
    else:
        x_dims, y_dims = descs["DX"].dims, descs["DY"].dims
    return K.Problem(n, x_dims, y_dims, descs)


def _workspace_index(graph, p: K.Problem):
    """(descriptor-like strides, data type) of the argmax a MAXPOOL backward without an
    Index stores in its workspace: packed in DY's stride order."""
    dy = graph.tensors[graph.nodes[0].inputs["DY"]]
    return packed_strides(dy.dims, stride_order(dy.strides)), K.index_type(p.volume)


class _PoolBase(Engine):
    KIND = ""
    behavior_notes = frozenset({BehaviorNote.RUNTIME_COMPILATION})

    def check_support(self, graph, target: Target) -> Support:
        if len(graph.nodes) != 1 or graph.nodes[0].kind != self.KIND:
            return decline(f"takes one {self.KIND} node alone")
        mem = operands_in_memory(graph)
        if not mem:
            return mem
        n = graph.nodes[0]
        for role, uid in {**n.inputs, **n.outputs}.items():
            d = graph.tensors[uid]
            allowed = INDEX_TYPES if role == "Index" else TYPES
            if d.data_type not in allowed:
                return decline(
                    f"tensor {d.label()} is {d.data_type.name}: float32, float16 "
                    "or bfloat16 data (float64 runs on the reference)"
                )
        return SUPPORTED

    def knob_space(self, graph=None) -> list[Knob]:
        return [
            Knob("BLOCK_P", POW2[:13], 32),
            Knob("BLOCK_C", POW2[:9], 64),
            Knob("num_warps", (1, 2, 4, 8, 16), 4),
            Knob("BLOCK_W", (0,) + POW2[:11], 0),
        ]

    def check_config(self, graph, config: EngineConfig, target: Target) -> Support:
        sup = super().check_config(graph, config, target)
        if not sup.ok:
            return sup
        kn = PoolKnobs(**config.knob_dict)
        if kn.BLOCK_P * kn.BLOCK_C > MAX_TILE:
            return decline(f"BLOCK_P x BLOCK_C = {kn.BLOCK_P * kn.BLOCK_C} > {MAX_TILE}")
        if kn.BLOCK_W and kn.BLOCK_C != 1:
            return decline(
                f"plane tiles (BLOCK_W={kn.BLOCK_W}) hold one channel a row: "
                f"BLOCK_C must be 1, not {kn.BLOCK_C}"
            )
        if kn.BLOCK_P * max(kn.BLOCK_W, 1) > MAX_TILE:
            return decline(f"BLOCK_P x BLOCK_W = {kn.BLOCK_P * kn.BLOCK_W} > {MAX_TILE}")
        return SUPPORTED

    def _tiles(
        self, p: K.Problem, role: str, target: Target, from_x: bool = False
    ) -> list[PoolKnobs]:
        """Candidate tiles, the preferred first: channels-innermost tensors take up to 128
        channels per pixel; others rows of one channel's planes (BLOCK_W of the last
        spatial axis), or flat blocks of one channel's pixels. ``from_x``: a max backward
        that recomputes the argmax."""
        space = p.out if role == "X" else p.inp
        bw = min(_pow2(space[-1]), 64)
        if not target.is_cuda:  # the interpreter: few, large programs
            if p.channels_fast(role):
                bc = min(_pow2(p.C), 16)
                return [PoolKnobs(max(1, 256 // bc), bc, 4)]
            return [PoolKnobs(max(1, 256 // bw), 1, 4, bw)]
        if p.channels_fast(role):
            # a sweep of every tile on the H100 (NHWC 64x256x56x56 bf16, docs/design/pool.md):
            # 1024-element tiles of 128 channels x 8 pixels were in or near the top four of
            # every case (max / average, forward / backward, 3x3 s2 and 2x2 s2); the earlier
            # first choice, 32 x 64, ranked 7th-29th of 63
            bc = min(_pow2(p.C), 128)
            out = [PoolKnobs(max(1, 1024 // bc), bc, 4)]
            if p.C >= 256:
                out.append(PoolKnobs(4, 256, 8))
            out.append(PoolKnobs(max(1, 2048 // bc), bc, 4))
            return out
        # the NCHW sweep on the H100 (docs/design/pool.md): forward, flat blocks of one
        # channel's pixels (512 x 8 warps 1708 GB/s for max 3x3 s2, 256 x 4 1699; plane
        # tiles at most 1411); backward, plane tiles of 32 rows x 64 (average 3x3 1172 /
        # 2x2 2457, max 2x2 from the Index 2047, max 3x3 691 GB/s; flat 1024 x 4: 1104 /
        # 2263 / 1985 / 683), except max from X, whose argmax pass runs the same tile
        # forward
        flat = [PoolKnobs(512, 1, 8), PoolKnobs(256, 1, 4), PoolKnobs(1024, 1, 4)]
        planes = [PoolKnobs(max(1, 2048 // bw), 1, 4, bw), PoolKnobs(max(1, 4096 // bw), 1, 4, bw)]
        if role == "X":
            return flat
        return flat[2:] + planes if from_x else planes + flat[2:]

    def _estimate(self, graph, p: K.Problem, kn: PoolKnobs, space, target) -> float:
        """Every tensor read or written once from DRAM (overlapping windows re-read from
        L1/L2), plus the argmax's workspace written and read; a GPU not filled by the
        programs runs proportionally slower."""
        moved = sum(d.numel * d.data_type.itemsize for d in graph.tensors.values())
        moved += 2 * self.workspace_size(graph, None, target)
        programs = K.grid_size(p, kn, space)
        fill = max(min(1.0, programs / (2.0 * target.num_sms)), 1e-3)
        return moved / (target.bandwidth * fill) + 3e-6

    def estimate_seconds(self, graph, config, target) -> float:
        p = _problem(graph)
        space = p.out if self.KIND == "resample" else p.inp
        return self._estimate(graph, p, PoolKnobs(**config.knob_dict), space, target)

    def configs(self, graph, target: Target) -> list[EngineConfig]:
        p = _problem(graph)
        role = "X" if self.KIND == "resample" else "DX"
        n = graph.nodes[0]
        from_x = role == "DX" and n.is_max and "Index" not in n.inputs
        return [
            EngineConfig.make(self, **dataclasses.asdict(kn))
            for kn in self._tiles(p, role, target, from_x)
        ]


class PoolEngine(_PoolBase):
    """Max / average pooling forward (Y, and the argmax Index for MAXPOOL on request)."""

    id = 34
    name = "pool"
    KIND = "resample"

    def build(self, graph, config, target) -> Executable:
        return _PoolExecutable(graph, PoolKnobs(**config.knob_dict), target)


class PoolBackwardEngine(_PoolBase):
    """Max / average pooling backward as a deterministic gather (no atomics)."""

    id = 35
    name = "pool_backward"
    KIND = "resample_backward"

    def workspace_size(self, graph, config, target) -> int:
        n = graph.nodes[0]
        if not n.is_max or "Index" in n.inputs:
            return 0
        p = _problem(graph)
        return p.N * p.C * math.prod(p.out) * K.index_type(p.volume).itemsize

    def build(self, graph, config, target) -> Executable:
        return _PoolExecutable(
            graph, PoolKnobs(**config.knob_dict), target, self.workspace_size(graph, config, target)
        )


class _PoolExecutable(Executable, LaunchList):
    def __init__(self, graph, kn: PoolKnobs, target, workspace: int = 0):
        LaunchList.__init__(self)
        self.workspace_size = workspace
        n, p = graph.nodes[0], _problem(graph)
        uids = {**n.inputs, **n.outputs}
        tag = f"pool_{graph.key()[:12]}"
        const = {"num_warps": kn.num_warps}
        if p.N == 0 or p.C == 0:
            return  # nothing to read or write

        def grid(space):
            return (K.grid_size(p, kn, space),)

        if n.kind == "resample":
            index = "Index" if "Index" in uids else None
            src = K.forward_source(tag, p, kn, True, index)
            args = [("buf", uids["X"]), ("buf", uids["Y"])] + (
                [("buf", uids["Index"])] if index else []
            )
            self.add_launch(
                kernel_from_source(src, tag), grid(p.out), const, args, graph, target.is_cuda
            )
            return
        index = None
        if n.is_max and "Index" in uids:
            index = "Index"
        elif n.is_max:  # the argmax first, into the workspace
            strides, itype = _workspace_index(graph, p)
            p.strides["WS"], p.types["WS"] = tuple(strides), itype
            fwd = f"{tag}_argmax"
            self.add_launch(
                kernel_from_source(K.forward_source(fwd, p, kn, False, "WS"), fwd),
                grid(p.out),
                const,
                [("buf", uids["X"]), ("ws", to_torch_dtype(itype))],
                graph,
                target.is_cuda,
            )
            index = "WS"
        src = B.backward_source(tag, p, kn, index)
        args = [("buf", uids["DY"])]
        if index == "Index":
            args.append(("buf", uids["Index"]))
        elif index == "WS":
            args.append(("ws", to_torch_dtype(p.types["WS"])))
        args.append(("buf", uids["DX"]))
        self.add_launch(
            kernel_from_source(src, tag), grid(p.inp), const, args, graph, target.is_cuda
        )

    def run(self, buffers, workspace, stream=None):
        self.run_launches(buffers, workspace, stream)


__all__ = ["PoolEngine", "PoolBackwardEngine", "PoolKnobs"]
