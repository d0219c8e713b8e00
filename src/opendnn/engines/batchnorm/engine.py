"""The batch-norm engine: training forward, inference and backward as Triton kernels (see
``_kernels`` for the algorithm), spatial or per-activation, any strides (NHWC is the fast
layout: statistics are column sums there), float32 / float16 / bfloat16 data.

It takes graphs of one batchnorm, batchnorm_inference or batchnorm_backward node; the
forward kinds may be followed by a fused epilogue on their Y: an add of a residual Z
(X's dims) and/or a relu (any of its clip / slope attributes), in that order, computed
in the normalize pass (one read of x and z, one write of the output). The backward may
take its DY from a relu_backward(loss, input) fused into both of its passes (dReLU +
dBN: the masked gradient is never stored). The statistics
are deterministic: fixed-order partial sums in the workspace, no atomics.
"""

from __future__ import annotations

import dataclasses

import torch

from ...enums import BehaviorNote, DataType, PointwiseMode
from ...plan import role_error
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
KINDS = ("batchnorm", "batchnorm_inference", "batchnorm_backward")
POW2 = tuple(1 << i for i in range(14))
MAX_TILE = 16384
BN_MIN_EPSILON = 0.0  # cuDNN 8/9's CUDNN_BN_MIN_EPSILON


@dataclasses.dataclass(frozen=True)
class BatchNormKnobs:
    BLOCK_K: int = 64  # kept elements (channels) per program
    BLOCK_R: int = 32  # rows per step of the statistics kernel
    SPLIT: int = 8  # slices of the rows in the statistics kernel (interleaved)
    APPLY_R: int = 64  # rows per program of the normalize / dx kernel
    REUSE: int = 0  # 1: the second pass walks the rows last-first, reading from L2
    #                         what the statistics pass read last (which then keeps its
    #                         lines: no evict_first)
    num_warps: int = 4


def _pattern(graph):
    """(main node, fused [(mode, attrs)], final output uid, residual uid, relu_backward's
    (loss, input) uids) or a reason. Forward kinds fuse an epilogue (add, relu) on Y; the
    backward fuses a relu_backward that makes its DY (dReLU + dBN, one pass fewer)."""
    nodes = graph.nodes
    if (
        len(nodes) == 2
        and nodes[0].kind == "pointwise"
        and nodes[0].mode == PointwiseMode.RELU_BWD
        and nodes[1].kind == "batchnorm_backward"
    ):
        act, main = nodes
        xdims = graph.tensors[main.inputs["X"]].dims
        d = act.outputs["OUT_0"]
        if main.inputs["DY"] != d or not graph.tensors[d].is_virtual:
            return "a fused relu_backward must make batchnorm_backward's DY (virtual) alone"
        loss, inp = act.inputs["IN_0"], act.inputs["IN_1"]
        if any(graph.tensors[u].dims != xdims for u in (loss, inp)):
            return "a fused relu_backward needs its loss and input with X's dims"
        return main, [(act.mode, act.op_attrs())], None, None, (loss, inp)
    main = nodes[0]
    if main.kind not in KINDS:
        return "takes one batchnorm, batchnorm_inference or batchnorm_backward node"
    if len(nodes) == 1:
        return main, [], main.outputs.get("Y"), None, None
    if main.kind == "batchnorm_backward":
        return "batchnorm_backward fuses only a relu_backward making its DY"
    x = graph.tensors[main.inputs["X"]]
    cur, epi, z = main.outputs["Y"], [], None
    for i, n in enumerate(nodes[1:]):
        if n.kind != "pointwise" or n.mode not in (PointwiseMode.ADD, PointwiseMode.RELU_FWD):
            return f"fuses only add (a residual) and relu after batch norm, not {n.label()}"
        ins = [u for u in n.inputs.values() if u is not None]
        if cur not in ins:
            return f"{n.label()} does not consume the batch norm's output"
        if epi and (n.mode == PointwiseMode.ADD or epi[-1][0] == PointwiseMode.RELU_FWD):
            return "fuses add then relu, each at most once"
        if n.mode == PointwiseMode.ADD:
            other = [u for u in ins if u != cur]
            if (
                len(other) != 1
                or other[0] in graph.producers
                or graph.tensors[other[0]].dims != x.dims
            ):
                return "the fused add needs a residual input with X's dims"
            z = other[0]
        if i > 0 and not graph.tensors[cur].is_virtual:
            return "intermediate results of the fused epilogue must be virtual"
        epi.append((n.mode, n.op_attrs()))
        cur = n.outputs["OUT_0"]
    return main, epi, cur, z, None


def _problem(graph) -> K.Problem:
    main, epi, out, z, drelu = _pattern(graph)
    roles = {r: u for r, u in {**main.inputs, **main.outputs}.items() if u is not None}
    if main.kind == "batchnorm_backward":
        data = ("DY", "X", "DX")
        if drelu is not None:  # DY is relu_backward(loss, input): read those instead
            roles["DY"], roles["YACT"] = drelu
            data += ("YACT",)
        stats = ("SCALE", "MEAN", "INV_VARIANCE", "DSCALE", "DBIAS")
    else:
        y = roles.pop("Y")
        roles["OUT"] = out
        data = ("X", "OUT")
        if z is not None:
            roles["Z"] = z
            data += ("Z",)
        if epi and not graph.tensors[y].is_virtual:
            roles["YPRE"] = y
            data += ("YPRE",)
        stats = tuple(
            r
            for r in (
                "SCALE",
                "BIAS",
                "MEAN",
                "INV_VARIANCE",
                "PREV_RUNNING_MEAN",
                "PREV_RUNNING_VAR",
                "NEXT_RUNNING_MEAN",
                "NEXT_RUNNING_VAR",
            )
            if r in roles
        )
    return K.Problem(graph, main, roles, data, stats, epi)


def _pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class BatchNormEngine(Engine):
    """Batch norm: training forward (+ add, relu), inference (+ add, relu), backward."""

    id = 30
    name = "batchnorm"
    behavior_notes = frozenset({BehaviorNote.RUNTIME_COMPILATION})

    def check_support(self, graph, target: Target) -> Support:
        pat = _pattern(graph)
        if isinstance(pat, str):
            return decline(pat)
        mem = operands_in_memory(
            graph,
            ("EPSILON", "MOMENTUM"),
            [n for n in graph.nodes if n.kind.startswith("batchnorm")],
        )
        if not mem:
            return mem
        for d in graph.tensors.values():
            if d.data_type not in TYPES and not d.is_pass_by_value:  # scalars: host floats
                return decline(
                    f"tensor {d.label()} is {d.data_type.name}: float32, float16 or "
                    "bfloat16 only (float64 runs on the reference)"
                )
        return SUPPORTED

    def knob_space(self, graph=None) -> list[Knob]:
        return [
            Knob("BLOCK_K", POW2, 64),
            Knob("BLOCK_R", POW2, 32),
            Knob("SPLIT", tuple(range(1, 1025)), 8),
            Knob("APPLY_R", POW2, 64),
            Knob("REUSE", (0, 1), 0),
            Knob("num_warps", (1, 2, 4, 8, 16), 4),
        ]

    def check_config(self, graph, config: EngineConfig, target: Target) -> Support:
        sup = super().check_config(graph, config, target)
        if not sup.ok:
            return sup
        kn, p = BatchNormKnobs(**config.knob_dict), _problem(graph)
        if kn.BLOCK_K * max(kn.BLOCK_R, kn.APPLY_R) > MAX_TILE:
            return decline(f"BLOCK_K x max(BLOCK_R, APPLY_R) must be at most {MAX_TILE}")
        if _cdiv(max(p.K, 1), kn.BLOCK_K) > 65535:
            return decline("more than 65535 column blocks: raise BLOCK_K")
        return SUPPORTED

    def configs(self, graph, target: Target) -> list[EngineConfig]:
        p = _problem(graph)
        cuda = target.is_cuda
        if p.columns:
            # NHWC: a tile of whole rows of up to 256 channels is one contiguous block (the
            # column sums' best pattern on the H100, docs/design/fusion.md: wide kept
            # blocks, slices of interleaved row blocks); about two programs per SM
            bk = min(_pow2(p.K), 256 if cuda else 16)
            br = max(1, (8192 if cuda else 16) // bk)
            ar = max(1, (8192 if cuda else 64) // bk)
            per_sm = 2
        else:
            # NCHW: each channel's rows are contiguous runs of H x W elements
            bk = 1
            br = min(_pow2(max(p.R, 1)), 2048 if cuda else 64)
            ar = min(_pow2(max(p.R, 1)), 4096 if cuda else 64)
            per_sm = 4
        blocks = _cdiv(max(p.K, 1), bk)
        nrb = max(1, _cdiv(p.R, br))
        split = (
            max(1, min(nrb, 1024, _cdiv(per_sm * target.num_sms, blocks)))
            if cuda
            else max(1, min(nrb, 3))
        )
        warps = (8 if bk * max(br, ar) >= 4096 else 4) if cuda else 4
        # x (and dy) are read twice; starting the second pass where the first ended saves
        # up to an L2's worth of the re-read (not measured yet: both configs are listed,
        # REUSE=1 first, so that benchmark mode can choose; docs/design/batchnorm.md)
        out = [BatchNormKnobs(bk, br, split, ar, 0, warps)]
        if cuda and p.kind != "batchnorm_inference":
            out.insert(0, BatchNormKnobs(bk, br, split, ar, 1, warps))
        return [EngineConfig.make(self, **dataclasses.asdict(kn)) for kn in out]

    def estimate_seconds(self, graph, config, target) -> float:
        p = _problem(graph)
        kn = BatchNormKnobs(**config.knob_dict)
        t = graph.tensors
        moved = sum(t[p.roles[r]].size_in_bytes for r in p.data)
        if p.kind != "batchnorm_inference":  # the statistics pass reads x (and dy) again
            again = sum(
                t[p.roles[r]].size_in_bytes
                for r in (("X", "DY") if p.kind == "batchnorm_backward" else ("X",))
            )
            # REUSE: the re-read starts with what is still in L2 (a budget of it)
            moved += again - (min(again, K.STREAM_BYTES) if kn.REUSE else 0)
        programs = _cdiv(max(p.R, 1), kn.APPLY_R) * _cdiv(max(p.K, 1), kn.BLOCK_K)
        fill = max(min(1.0, programs / (2.0 * target.num_sms)), 1e-3)
        launches = 1 if p.kind == "batchnorm_inference" else 3
        return moved / (target.bandwidth * fill) + 3e-6 * launches

    def workspace_size(self, graph, config, target) -> int:
        p = _problem(graph)
        if p.kind == "batchnorm_inference":
            return 0
        kn = BatchNormKnobs(**config.knob_dict)
        coefs = 3 if p.kind == "batchnorm_backward" else 2
        return (3 * kn.SPLIT + coefs) * p.K * 4  # partials, overflow flags, coefficients

    def build(self, graph, config, target) -> Executable:
        return _BatchNormExecutable(
            graph,
            BatchNormKnobs(**config.knob_dict),
            target,
            self.workspace_size(graph, config, target),
        )


class _BatchNormExecutable(Executable, LaunchList):
    def __init__(self, graph, kn: BatchNormKnobs, target, workspace: int):
        LaunchList.__init__(self)
        self.workspace_size = workspace
        p = _problem(graph)
        # an error names the node and tensor by position and role (plan.role_error): the
        # executable serves every graph of this key, whatever its names
        main = _pattern(graph)[0]
        self.node = (graph.nodes.index(main), main.kind)
        self.eps_uid = p.roles.get("EPSILON") if p.by_value.get("EPSILON") else None
        if p.K == 0:
            return  # no statistics, no elements
        tag = f"bn_{graph.key()[:12]}"
        const = {"num_warps": kn.num_warps}

        def args(params):
            return [("ws", torch.float32) if r == "WS" else ("buf", p.roles[r]) for r in params]

        if p.kind != "batchnorm_inference":
            name = f"{tag}_stats"
            self.add_launch(
                kernel_from_source(K.stats_source(name, p, kn), name),
                (_cdiv(p.K, kn.BLOCK_K), kn.SPLIT),
                const,
                args(K.stats_params(p)),
                graph,
                target.is_cuda,
            )
            name = f"{tag}_finish"
            self.add_launch(
                kernel_from_source(K.finish_source(name, p, kn), name),
                (_cdiv(p.K, K.FINISH_COLS),),
                {"num_warps": 4},
                args(K.finish_params(p)),
                graph,
                target.is_cuda,
            )
        if p.R == 0:
            return
        name = f"{tag}_apply"
        self.add_launch(
            kernel_from_source(K.apply_source(name, p, kn, kn.SPLIT), name),
            (_cdiv(p.R, kn.APPLY_R), _cdiv(p.K, kn.BLOCK_K)),
            const,
            args(K.apply_params(p)),
            graph,
            target.is_cuda,
        )

    def run(self, buffers, workspace, stream=None):
        if self.eps_uid is not None:
            eps = float(buffers[self.eps_uid])
            if not eps >= BN_MIN_EPSILON:
                raise role_error(
                    f"epsilon {eps} is below the minimum {BN_MIN_EPSILON} (CUDNN_BN_MIN_EPSILON)",
                    self.node[0],
                    "EPSILON",
                    self.node[1],
                )
        self.run_launches(buffers, workspace, stream)
