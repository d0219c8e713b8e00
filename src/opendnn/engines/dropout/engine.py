"""The dropout engine: ``dropout`` (Y and, when it is an output, MASK) and
``dropout_backward`` (DX, the mask regenerated from the same seed and offset) as one
streaming Triton kernel each (see ``_kernels``; the random stream is ``ops/dropout.py``).
Any strides, float32 / float16 / bfloat16 data; MASK in a floating, uint8, int8, int32 or
boolean type. A pass-by-value SEED or OFFSET is copied to a small device tensor at each
run (the kernel reads both from memory, so one plan serves every seed and offset).
"""

from __future__ import annotations

import dataclasses

import torch

from ...enums import BehaviorNote, DataType
from ...ops.dropout import scale
from ...runtime.launch import Launcher, LaunchList, kernel_from_source
from ..base import SUPPORTED, Engine, EngineConfig, Executable, Knob, Support, Target, decline
from . import _kernels as K

TYPES = (DataType.FLOAT, DataType.HALF, DataType.BFLOAT16)
MASK_TYPES = TYPES + (DataType.UINT8, DataType.INT8, DataType.INT32, DataType.BOOLEAN)
INTEGER = (DataType.INT32, DataType.INT64)


@dataclasses.dataclass(frozen=True)
class DropoutKnobs:
    BLOCK: int = 1024  # elements per program
    num_warps: int = 4


def _node(graph):
    return graph.nodes[0]


class DropoutEngine(Engine):
    """Dropout forward and backward with a counter-based (Philox) mask."""

    id = 39
    name = "dropout"
    behavior_notes = frozenset({BehaviorNote.RUNTIME_COMPILATION})

    def check_support(self, graph, target: Target) -> Support:
        if len(graph.nodes) != 1 or graph.nodes[0].kind not in ("dropout", "dropout_backward"):
            return decline("takes one dropout or dropout_backward node alone")
        n = _node(graph)
        for role, uid in {**n.inputs, **n.outputs}.items():
            d = graph.tensors[uid]
            allowed = (
                INTEGER if role in ("SEED", "OFFSET") else MASK_TYPES if role == "MASK" else TYPES
            )
            if d.data_type not in allowed:
                return decline(
                    f"tensor {d.label()} ({role}) is {d.data_type.name}: allowed "
                    f"{[t.name for t in allowed]}"
                )
        return SUPPORTED

    def knob_space(self, graph=None) -> list[Knob]:
        return [
            Knob("BLOCK", (128, 256, 512, 1024, 2048, 4096), 1024),
            Knob("num_warps", (1, 2, 4, 8), 4),
        ]

    def configs(self, graph, target: Target) -> list[EngineConfig]:
        return [EngineConfig.make(self, **dataclasses.asdict(DropoutKnobs()))]

    def estimate_seconds(self, graph, config, target) -> float:
        moved = sum(d.size_in_bytes for d in graph.tensors.values() if not d.is_virtual)
        return moved / target.bandwidth + 3e-6

    def build(self, graph, config, target) -> Executable:
        return _DropoutExecutable(graph, DropoutKnobs(**config.knob_dict), target)


class _DropoutExecutable(Executable, LaunchList):
    def __init__(self, graph, kn: DropoutKnobs, target):
        LaunchList.__init__(self)
        n = _node(graph)
        data, out = ("DY", "DX") if n.kind == "dropout_backward" else ("X", "Y")
        mask_uid = n.outputs.get("MASK")
        mask_role = (
            "MASK" if mask_uid is not None and not graph.tensors[mask_uid].is_virtual else None
        )
        uids = {**n.inputs, **n.outputs}
        roles = [data, out] + ([mask_role] if mask_role else [])
        descs = {r: graph.tensors[uids[r]] for r in roles}
        self.host_rng = tuple(
            uids[r] for r in ("SEED", "OFFSET") if graph.tensors[uids[r]].is_pass_by_value
        )
        self.data_uid = uids[data]
        dims = descs[data].dims
        total = descs[data].numel
        if total == 0:
            return
        tag = f"{n.kind}_{graph.key()[:12]}"
        src = K.source(
            tag, dims, descs, data, out, mask_role, n.probability, scale(n.probability), kn.BLOCK
        )
        order = [data, "SEED", "OFFSET", out] + ([mask_role] if mask_role else [])
        launcher = Launcher(
            kernel_from_source(src, tag), (-(-total // kn.BLOCK),), {"num_warps": kn.num_warps}
        )
        if target.is_cuda:  # SEED/OFFSET are always device pointers in the kernel
            launcher.prepare_cuda(
                [
                    torch.int64
                    if r in ("SEED", "OFFSET") and graph.tensors[uids[r]].is_pass_by_value
                    else graph.tensors[uids[r]].torch_dtype
                    for r in order
                ]
            )
        self.launches.append((launcher, [("buf", uids[r]) for r in order]))

    def run(self, buffers, workspace, stream=None):
        if self.host_rng and self.launches:
            dev = buffers[self.data_uid].device
            # two words apart: each pointer 16-byte aligned, as the kernel was compiled for
            vals = [w for u in self.host_rng for w in (_int64(buffers[u]), 0)]
            t = torch.tensor(vals, dtype=torch.int64).to(dev, non_blocking=True)
            buffers = {**buffers, **{u: t[2 * i : 2 * i + 1] for i, u in enumerate(self.host_rng)}}
        self.run_launches(buffers, workspace, stream)


def _int64(v) -> int:
    """A host seed/offset as a signed 64-bit value (wrapping like a C cast)."""
    v = int(v) & 0xFFFFFFFFFFFFFFFF
    return v - (1 << 64) if v >= 1 << 63 else v
