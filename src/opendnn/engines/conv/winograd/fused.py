"""Fused Winograd F(2x2, 3x3) convolution (CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD).

Where ``conv_winograd_nonfused`` writes the transformed image V and the 16 products M to
the workspace and runs the 16 GEMMs on the matmul engine, this engine keeps everything
in one kernel: each program gathers 4x4 patches of the image, transforms them in
registers (B^T d B: adds and subtracts only), does the 16 per-position tensor-core dots
into 16 float32 accumulators, and at the end applies A^T M A and the fused epilogue
(bias, activation, residual, scale, type conversion) before storing y. The math and the
index mapping are in ``_winograd_kernels``:

    y_tile(2x2) = A^T [ sum_c (G g_kc G^T) (.) (B^T d_c B) ] A      16 vs 36 multiplies

The filter transform U = G g G^T (16 x C x K values) is, by default, a small pre-kernel
into the workspace: it runs once per convolution instead of once per pixel block, it
puts U in a [16, C, K] layout whose slabs are contiguous rows whatever the filter's
strides (a filter in NCHW is strided along both channel axes), and it keeps nine filter
slabs and their 28-add transform out of the main loop's registers, which the 16
accumulators already fill. The knob FILTER_IN_REGISTERS=1 instead transforms the filter
inside the loop: one kernel and no workspace, at the cost of redundant work.

Supported: 2-D, 3x3, stride 1, dilation 1, one group, both modes, any strides of x, w
and y, float / half / bfloat16 operands (notes WINOGRAD, and for half types or TF32
TENSOR_CORE and DOWN_CONVERT_INPUTS: V and U are rounded to the operand type).
"""

from __future__ import annotations

import dataclasses
import functools

from .... import backends
from ....enums import BehaviorNote, DataType, NumericalNote
from ....runtime.launch import DualKernel, LaunchList, kernel_from_source
from ....tensor import to_torch_dtype
from ...base import SUPPORTED, Engine, EngineConfig, Executable, Knob, Support, decline
from ...fusion import epilogue as fuse_epilogue
from ..analysis import ConvAnalysis, analyze, epilogue
from . import _kernels as WK

ALIGN = 256
FLOAT_TYPES = {DataType.FLOAT, DataType.HALF, DataType.BFLOAT16}
TL_TYPES = {
    DataType.FLOAT: "tl.float32",
    DataType.HALF: "tl.float16",
    DataType.BFLOAT16: "tl.bfloat16",
}


def winograd_rules(a: ConvAnalysis, operand: DataType) -> str | None:
    """Why F(2x2, 3x3) cannot compute this convolution, or None."""
    geo = a.geo
    if len(geo.filt) != 2 or tuple(geo.filt) != (3, 3):
        return f"Winograd F(2x2,3x3) needs a 2-D 3x3 filter, got {list(geo.filt)}"
    if any(s != 1 for s in geo.stride) or any(d != 1 for d in geo.dilation):
        return (
            f"Winograd needs stride 1 and dilation 1, got stride {list(geo.stride)} and "
            f"dilation {list(geo.dilation)}"
        )
    if geo.groups != 1:
        return f"Winograd here takes one group, got {geo.groups}"
    if operand not in FLOAT_TYPES:
        return f"Winograd transforms need float, half or bfloat16 operands, got {operand.name}"
    if a.prologue is not None:
        return "the Winograd kernels fuse no prologue (pointwise operations before the conv)"
    if a.ep.stats:
        return "the Winograd kernels fuse no statistics (genstats) into the epilogue"
    return None


@dataclasses.dataclass(frozen=True)
class FusedPlan:
    a: ConvAnalysis
    geo: WK.WinogradGeometry
    image_uid: int  # x (fprop) or dy (dgrad)
    filter_uid: int
    operand: DataType  # the operands' type: V and U are rounded to it
    tf32: bool

    @property
    def u_bytes(self) -> int:
        """Workspace bytes of U [16, C, K] (aligned)."""
        return -(-16 * self.geo.c * self.geo.k * self.operand.itemsize // ALIGN) * ALIGN


@functools.lru_cache(maxsize=512)
def plan_fused(graph, kind: str) -> FusedPlan | str:
    """The fused kernel's view of a ``conv_fprop`` or ``conv_dgrad`` graph (see the
    ``_winograd_kernels`` docstring for how dgrad becomes a forward pass), or a reason."""
    a = analyze(graph, kind)
    if isinstance(a, str):
        return a
    image = a.x if kind == "conv_fprop" else a.y
    why = winograd_rules(a, image.data_type)
    if why:
        return why
    g, ws = a.geo, a.w.strides
    if kind == "conv_fprop":
        geo = WK.WinogradGeometry(
            g.n,
            g.c_per_group,
            g.k_per_group,
            g.in_dims,
            g.out_dims,
            g.pre,
            tuple(image.strides),
            tuple(ws),
            g.flip,
            g.int64,
        )
    else:  # read dy as the image, the filter's channel axes swapped and flipped
        geo = WK.WinogradGeometry(
            g.n,
            g.k_per_group,
            g.c_per_group,
            g.out_dims,
            g.in_dims,
            tuple(2 - p for p in g.pre),
            tuple(image.strides),
            (ws[1], ws[0], ws[2], ws[3]),
            not g.flip,
            g.int64,
        )
    tf32 = image.data_type == DataType.FLOAT and bool(backends.allow_tf32)
    return FusedPlan(a, geo, image.uid, a.w.uid, image.data_type, tf32)


class WinogradFusedEngine(Engine):
    """F(2x2, 3x3) in one kernel (plus an optional filter-transform pre-kernel)."""

    id = 15
    name = "conv_winograd_fused"
    kind = "conv_fprop"
    behavior_notes = frozenset({BehaviorNote.RUNTIME_COMPILATION})

    def _plan(self, graph) -> FusedPlan | str:
        return plan_fused(graph, self.kind)

    def check_support(self, graph, target) -> Support:
        fp = self._plan(graph)
        return decline(fp) if isinstance(fp, str) else SUPPORTED

    def numerical_notes(self, graph, config) -> frozenset:
        fp = self._plan(graph)
        if isinstance(fp, str):
            return frozenset()
        notes = {NumericalNote.WINOGRAD}
        if fp.operand != DataType.FLOAT or fp.tf32:
            notes |= {NumericalNote.TENSOR_CORE, NumericalNote.DOWN_CONVERT_INPUTS}
        return frozenset(notes)

    def knob_space(self, graph=None) -> list[Knob]:
        space = WK.knob_space()
        return [
            Knob(
                f.name, tuple(sorted({getattr(k, f.name) for k in space} | {f.default})), f.default
            )
            for f in dataclasses.fields(WK.WinogradKnobs)
        ]

    def configs(self, graph, target) -> list[EngineConfig]:
        if isinstance(self._plan(graph), str):
            return []
        # the interpreter: small tiles (each op is a NumPy call; few programs either way)
        cands = WK.knob_space() if target.is_cuda else [WK.WinogradKnobs(32, 16, 16, 2, 0, 1)]
        out = [EngineConfig.make(self, **dataclasses.asdict(k)) for k in cands]
        out.sort(key=lambda c: self.estimate_seconds(graph, c, target))
        return out

    def check_config(self, graph, config, target) -> Support:
        s = super().check_config(graph, config, target)
        if not s.ok:
            return s
        kn = WK.WinogradKnobs(**config.knob_dict)
        if target.is_cuda and WK.accumulator_registers(kn) > 128:
            return decline(
                f"the accumulators of {kn.BLOCK_P}x{kn.BLOCK_K} tiles with "
                f"{kn.num_warps} warps and {kn.PASSES} pass(es) take "
                f"{WK.accumulator_registers(kn)} registers per thread (at most 128 "
                "leave room for the transforms)"
            )
        return SUPPORTED

    def workspace_size(self, graph, config, target) -> int:
        fp = self._plan(graph)
        if isinstance(fp, str) or config.knob_dict.get("FILTER_IN_REGISTERS", 0):
            return 0
        return fp.u_bytes

    def estimate_seconds(self, graph, config, target) -> float:
        fp = self._plan(graph)
        kn = WK.WinogradKnobs(**config.knob_dict)
        peak = (
            target.peak_flops_fp16
            if fp.operand != DataType.FLOAT
            else (target.peak_flops_fp16 / 2 if fp.tf32 else target.peak_flops_fp32)
        )
        t = WK.estimate_seconds(
            fp.geo,
            kn,
            fp.operand.itemsize,
            peak,
            target.peak_flops_fp32,
            target.bandwidth,
            target.num_sms,
        )
        if not kn.FILTER_IN_REGISTERS:  # the pre-kernel: read g, write U, one launch
            t += 25 * fp.geo.c * fp.geo.k * fp.operand.itemsize / target.bandwidth + 3e-6
        return t

    def build(self, graph, config, target) -> Executable:
        return _FusedExecutable(
            graph, self._plan(graph), WK.WinogradKnobs(**config.knob_dict), target, self.kind
        )


class _FusedExecutable(Executable, LaunchList):
    def __init__(self, graph, fp: FusedPlan, kn: WK.WinogradKnobs, target, kind: str):
        LaunchList.__init__(self)
        geo, tag, cuda = fp.geo, graph.key()[:12], target.is_cuda
        operand, dt = TL_TYPES[fp.operand], to_torch_dtype(fp.operand)
        self.in_registers = bool(kn.FILTER_IN_REGISTERS)
        self.workspace_size = 0 if self.in_registers else fp.u_bytes
        self.dtype = dt
        if not self.in_registers:
            fname = f"wino_fused_filter_{tag}"
            self.add_launch(
                kernel_from_source(WK.filter_source(fname, geo, operand), fname),
                (-(-geo.c * geo.k // 256),),
                {"BLOCK": 256, "num_warps": 4},
                [("buf", fp.filter_uid), ("ws", dt)],
                graph,
                cuda,
            )
        params, body = epilogue(graph, fp.a, kind)
        name = f"wino_fused_{kind}_{tag}"
        kw = dict(
            operand=operand,
            epilogue_params=params,
            epilogue_body=body,
            fp32_inputs=fp.operand == DataType.FLOAT,
            allow_tf32=fp.tf32,
        )
        src_c = WK.fused_source(name, geo, kn, interpret=False, **kw)
        src_i = WK.fused_source(name, geo, kn, interpret=True, **kw)
        kern = DualKernel(
            kernel_from_source(src_c, name).compiled, kernel_from_source(src_i, name).interpreted
        )
        self.source = src_c
        second = ("buf", fp.filter_uid) if self.in_registers else ("ws", dt)
        args = [("buf", fp.image_uid), second] + fuse_epilogue.launch_args(fp.a.ep)
        const = {
            "BLOCK_P": kn.BLOCK_P,
            "BLOCK_K": kn.BLOCK_K,
            "BLOCK_C": kn.BLOCK_C,
            "num_warps": kn.num_warps,
            "num_stages": 1,
        }
        self.add_launch(kern, WK.grid(geo, kn), const, args, graph, cuda)

    def run(self, buffers, workspace, stream=None):
        # U is the workspace's first u_bytes, seen as the operand type
        ws = None if self.in_registers else workspace[: self.workspace_size]
        self.run_launches(buffers, ws, stream)


__all__ = ["WinogradFusedEngine", "plan_fused", "winograd_rules"]
