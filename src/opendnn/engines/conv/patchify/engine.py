"""Patchify convolution engines (stride = filter, no padding, no dilation, one group):
forward ``conv_patchify`` (50), backward data ``conv_dgrad_patchify`` (51) and backward
filter ``conv_wgrad_patchify`` (52). Each direction is one GEMM over the flattened patch
axis q = (c, r_0, ..); the kernels and their math are in ``_kernels.py``.

Where they matter: a stem on an RGB image (C = 3) wastes most of the implicit GEMM's
per-tap reduction step, and its backward data walks all prod(f) taps for every dx pixel
of which one is real. Here the reduction is C*prod(f) long (forward), K long (backward
data: dY[p, :] W[:, q], every dx element written once) or the pixel count (backward
filter, split into slices summed in a fixed order: deterministic).

Configs: tiles from the implicit GEMM's list that fit the problem's GEMM (no tile wider
than the next power of two of its side), ranked by the cost model: the tensor cores' FLOPs
on the padded tiles, every tensor moved once, and the main loop (``K.loop_seconds``) with
the TF32 operand-order term -- an operand whose reduction axis is not unit-stride in memory
costs ``TF32_TRANSPOSED_STEP`` a step (dgrad's filter is reduced over K, its first axis:
the layout-transform engine moves it K-innermost).
"""

from __future__ import annotations

import torch

from ....enums import DataType
from ....runtime.launch import DualKernel, LaunchList, kernel_from_source
from ...base import SUPPORTED, EngineConfig, Executable, Knob, Support, decline
from ...fusion import epilogue as fuse_epilogue
from ..analysis import epilogue, peak_flops, tf32
from ..grouped.engine import SHARED_BYTES, fit_stages, stage_bytes
from ..implicit_gemm import _kernels as K
from ..implicit_gemm.engine import ImplicitGemmEngine, transposed_step
from . import _kernels as P

# (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages) offered on a GPU
TILES = (
    (128, 128, 64, 8, 3),
    (128, 64, 64, 4, 4),
    (128, 128, 32, 8, 4),
    (64, 128, 64, 4, 4),
    (128, 64, 32, 4, 3),
    (64, 64, 64, 4, 3),
    (64, 64, 32, 4, 3),
    (256, 64, 32, 8, 3),
    (128, 32, 64, 4, 3),
    (64, 32, 32, 4, 3),
)
INTERPRETER_TILE = (16, 16, 16, 4, 1)
CONFIGS = 8
# the backward filter's slices: about this many programs per SM
WGRAD_PROGRAMS_PER_SM = 4


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def patchify_reason(a, kind: str) -> str | None:
    """Why the analysed problem is not a patchify convolution this engine takes (None:
    it is)."""
    g = a.geo
    if g.groups != 1:
        return f"{g.groups} groups: the patchify engines take one group"
    if any(s != f for s, f in zip(g.stride, g.filt)) or K._prod(g.filt) < 2:
        return (
            f"stride {list(g.stride)} is not the filter {list(g.filt)} (larger than 1x1): "
            "not a patchify convolution"
        )
    if any(p != 0 for p in g.pre) or any(d != 1 for d in g.dilation):
        return f"padding {list(g.pre)} / dilation {list(g.dilation)}: patches need 0 / 1"
    if kind == "conv_dgrad" and any(i != o * f for i, o, f in zip(g.in_dims, g.out_dims, g.filt)):
        return (
            f"dx {list(g.in_dims)} is not covered by the {list(g.out_dims)} patches of "
            f"{list(g.filt)}: the elements past the last patch would need zeros"
        )
    if a.x.data_type == DataType.INT8:
        return "int8 patchify convolution is not supported"
    if a.prologue is not None or a.ep.stats:
        return "the patchify kernels fuse neither a prologue nor batch-norm statistics"
    if kind == "conv_wgrad" and a.ep.nodes:
        return "the patchify backward filter writes dw only (no fused epilogue)"
    return None


class PatchifyConvEngine(ImplicitGemmEngine):
    """Forward patchify convolution as the GEMM X[p, q] W[k, q]^T, fused epilogue."""

    id = 50
    name = "conv_patchify"
    kind = "conv_fprop"
    tma_path = None

    def check_support(self, graph, target) -> Support:
        a = self._analyze(graph)
        if isinstance(a, str):
            return decline(a)
        if target.is_cuda and a.x.data_type == DataType.FLOAT and not tf32(a):
            return decline(
                "float32 without TF32: the GEMM's dots would run on the CUDA cores (the "
                "implicit GEMM's small float32 tiles take it)"
            )
        why = patchify_reason(a, self.kind)
        return decline(why) if why else SUPPORTED

    def family(self, config) -> str:
        return self.name

    def knob_space(self, graph=None) -> list:
        return [
            Knob("BLOCK_M", (16, 32, 64, 128, 256), 64),
            Knob("BLOCK_N", (16, 32, 64, 128, 256), 64),
            Knob("BLOCK_K", (16, 32, 64, 128), 32),
            Knob("num_warps", (1, 2, 4, 8), 4),
            Knob("num_stages", (1, 2, 3, 4), 3),
        ]

    def complete_knobs(self, graph, knobs: dict) -> dict:
        return {**{k.name: k.default for k in self.knob_space(graph)}, **knobs}

    def _gemm(self, a) -> tuple[int, int, int]:
        """(M, N, reduction) of the direction's GEMM."""
        g = a.geo
        pixels, q = g.n * K._prod(g.out_dims), P.patch_size(g)
        return {
            "conv_fprop": (pixels, g.k_per_group, q),
            "conv_dgrad": (pixels, q, g.k_per_group),
            "conv_wgrad": (g.k_per_group, q, pixels),
        }[self.kind]

    def _transposed(self, a) -> bool:
        """Whether an operand's reduction axis is not unit-stride (TF32 reads both
        operands K-major)."""
        inner = P.q_order(a.geo)[-1]
        if self.kind == "conv_fprop":  # X and W reduce over q
            return inner[2] != 1 or a.w.strides[inner[3]] != 1
        if self.kind == "conv_dgrad":  # dY and W reduce over K
            return a.y.strides[1] != 1 or a.w.strides[0] != 1
        return True  # X over pixels walks f_last apart: never unit-stride

    def _knobs(self, kd) -> K.ConvKnobs:
        return K.ConvKnobs(
            kd["BLOCK_M"], kd["BLOCK_N"], kd["BLOCK_K"], kd["num_warps"], kd["num_stages"]
        )

    def check_config(self, graph, config, target) -> Support:
        s = self.check_support(graph, target)
        if not s.ok:
            return s
        kd = self.complete_knobs(graph, config.knob_dict)
        space = {k.name: k.values for k in self.knob_space(graph)}
        for name, v in kd.items():
            if name not in space:
                return decline(f"unknown knob {name}")
            if name != "SPLIT" and v not in space[name]:
                return decline(f"{name}={v!r}: one of {list(space[name])}")
        kn = self._knobs(kd)
        size = self._analyze(graph).x.data_type.itemsize
        smem = kn.num_stages * stage_bytes(kn, size)
        if target.is_cuda and smem > SHARED_BYTES:
            return decline(
                f"num_stages={kn.num_stages} x the operand tiles = {smem} bytes exceed the "
                f"{SHARED_BYTES} bytes of shared memory a program may take"
            )
        return SUPPORTED

    def _tiles(self, a, target) -> list:
        if not target.is_cuda:
            return [INTERPRETER_TILE]
        m, n, r = self._gemm(a)
        size = a.x.data_type.itemsize
        out = []
        for bm, bn, bk, w, st in TILES:
            if bm > max(16, _pow2_at_least(m)) or bn > max(16, _pow2_at_least(n)):
                continue
            if bk > max(16, _pow2_at_least(r)):
                continue
            if fit_stages(K.ConvKnobs(bm, bn, bk, w, st), size, st) < st:
                continue
            out.append((bm, bn, bk, w, st))
        return out or [(64, 64, 32, 4, 3)]

    def configs(self, graph, target) -> list:
        if not self.check_support(graph, target).ok:
            return []
        a = self._analyze(graph)
        out = [
            EngineConfig.make(self, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=w, num_stages=st)
            for bm, bn, bk, w, st in self._tiles(a, target)
        ]
        out.sort(key=lambda c: self.estimate_seconds(graph, c, target))
        return out[:CONFIGS]

    def workspace_size(self, graph, config, target) -> int:
        return 0

    def estimate_seconds(self, graph, config, target) -> float:
        """The tensor cores' FLOPs on the padded tiles, x, w and y moved once, and the
        main loop; the binding bound plus a tenth of the others."""
        a = self._analyze(graph)
        kd = self.complete_knobs(graph, config.knob_dict)
        return self._estimate(a, self._knobs(kd), target, kd.get("SPLIT", 1))

    def _estimate(self, a, kn: K.ConvKnobs, target, split: int) -> float:
        m, n, r = self._gemm(a)
        size = a.x.data_type.itemsize
        tiles = -(-m // kn.BLOCK_M) * -(-n // kn.BLOCK_N)
        per_program = -(-(-(-r // split)) // kn.BLOCK_K)  # reduction steps of one program
        flops = 2.0 * tiles * kn.BLOCK_M * kn.BLOCK_N * split * per_program * kn.BLOCK_K
        eff = 0.6 if kn.BLOCK_M * kn.BLOCK_N < 64 * 64 else 0.85
        compute = flops / (peak_flops(a, target) * eff)
        moved = size * (a.x.numel + a.w.numel + a.y.numel) + 8.0 * (split > 1) * split * m * n
        memory = moved / target.bandwidth
        programs = tiles * split
        tile = (kn.BLOCK_M + kn.BLOCK_N) * kn.BLOCK_K * size
        scale = transposed_step(a, self._transposed(a))
        loop = K.loop_seconds(programs * per_program, programs, tile, target.num_sms, scale)
        return K.combine_bounds(compute, memory, loop)

    def build(self, graph, config, target) -> Executable:
        a = self._analyze(graph)
        kd = self.complete_knobs(graph, config.knob_dict)
        return _PatchifyExecutable(graph, a, self._knobs(kd), target, self.kind)


class PatchifyDgradEngine(PatchifyConvEngine):
    """Backward data of a patchify convolution as the GEMM dY[p, k] W[k, q], each dx
    element written once by the epilogue (deterministic, no workspace)."""

    id = 51
    name = "conv_dgrad_patchify"
    kind = "conv_dgrad"


class PatchifyWgradEngine(PatchifyConvEngine):
    """Backward filter of a patchify convolution as the GEMM dY[p, k]^T X[p, q], the
    pixel reduction split into SPLIT slices summed in a fixed order (deterministic)."""

    id = 52
    name = "conv_wgrad_patchify"
    kind = "conv_wgrad"

    def knob_space(self, graph=None) -> list:
        return super().knob_space(graph) + [Knob("SPLIT", (1, 2, 4, 8, 16, 32, 64, 128), 1)]

    def check_config(self, graph, config, target) -> Support:
        kd = self.complete_knobs(graph, config.knob_dict)
        v = kd["SPLIT"]
        if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= 4096:
            return decline(f"SPLIT={v!r}: an integer in 1..4096 (pixel slices)")
        return super().check_config(graph, config, target)

    def _split(self, a, kn: K.ConvKnobs, target) -> int:
        """Slices: about WGRAD_PROGRAMS_PER_SM programs per SM, none empty."""
        m, n, r = self._gemm(a)
        tiles = -(-m // kn.BLOCK_M) * -(-n // kn.BLOCK_N)
        want = -(-WGRAD_PROGRAMS_PER_SM * target.num_sms // tiles) if target.is_cuda else 2
        return max(1, min(want, -(-r // kn.BLOCK_K), 4096))

    def configs(self, graph, target) -> list:
        if not self.check_support(graph, target).ok:
            return []
        a = self._analyze(graph)
        out = []
        for bm, bn, bk, w, st in self._tiles(a, target):
            kn = K.ConvKnobs(bm, bn, bk, w, st)
            out.append(
                EngineConfig.make(
                    self,
                    BLOCK_M=bm,
                    BLOCK_N=bn,
                    BLOCK_K=bk,
                    SPLIT=self._split(a, kn, target),
                    num_warps=w,
                    num_stages=st,
                )
            )
        out.sort(key=lambda c: self.estimate_seconds(graph, c, target))
        return out[:CONFIGS]

    def workspace_size(self, graph, config, target) -> int:
        a = self._analyze(graph)
        if isinstance(a, str):
            return 0
        m, n, _ = self._gemm(a)
        return 4 * self.complete_knobs(graph, config.knob_dict)["SPLIT"] * m * n

    def estimate_seconds(self, graph, config, target) -> float:
        return super().estimate_seconds(graph, config, target) + 4e-6  # the finishing pass

    def build(self, graph, config, target) -> Executable:
        a = self._analyze(graph)
        kd = self.complete_knobs(graph, config.knob_dict)
        return _PatchifyWgradExecutable(graph, a, self._knobs(kd), kd["SPLIT"], target)


def _dgrad_epilogue(graph, a) -> tuple[list, str]:
    """The conv epilogue on the dx tile: rows are dy pixels (nb, o_i), columns patch
    elements (c, r_i); dx-shaped tensors are addressed at (nb, c, o_i*f_i + r_i)."""
    g = a.geo
    d = len(g.filt)

    def off(u):
        st, dims = graph.tensors[u].strides, graph.tensors[u].dims
        per_channel = u not in a.ep.outputs and dims[0] == 1 and all(v == 1 for v in dims[2:])
        col = [f"c * {st[1] if dims[1] != 1 else 0}"]
        if per_channel:
            return f"({col[0]})[None, :]"
        col += [f"r{i} * {st[2 + i]}" for i in range(d) if dims[2 + i] != 1]
        rows = [f"nb * {st[0] if dims[0] != 1 else 0}"]
        rows += [f"o{i} * {g.filt[i] * st[2 + i]}" for i in range(d) if dims[2 + i] != 1]
        return f"(({' + '.join(rows)})[:, None] + ({' + '.join(col)})[None, :])"

    params, body = fuse_epilogue.source(graph, a.ep, off, load_mask=lambda u: "ep_mask")
    return params, "ep_mask = mask_m[:, None] & mask_n[None, :]\n" + body


def _consts(kn: K.ConvKnobs) -> dict:
    return {
        "BLOCK_M": kn.BLOCK_M,
        "BLOCK_N": kn.BLOCK_N,
        "BLOCK_K": kn.BLOCK_K,
        "num_warps": kn.num_warps,
        "num_stages": kn.num_stages,
    }


def _dual(src_c: str, src_i: str, name: str) -> DualKernel:
    return DualKernel(
        kernel_from_source(src_c, name).compiled, kernel_from_source(src_i, name).interpreted
    )


class _PatchifyExecutable(Executable, LaunchList):
    """One kernel over (pixel tiles x column tiles): the forward's columns are filters,
    the backward data's patch elements."""

    def __init__(self, graph, a, kn: K.ConvKnobs, target, kind: str):
        LaunchList.__init__(self)
        self.workspace_size = 0
        g = a.geo
        kw = dict(allow_tf32=tf32(a), fp32_inputs=a.x.data_type == DataType.FLOAT)
        if kind == "conv_fprop":
            kw["epilogue_params"], kw["epilogue_body"] = epilogue(graph, a, kind)
            gen, ins, cols = P.fprop_source, [a.x.uid, a.w.uid], g.k_per_group
        else:
            kw["epilogue_params"], kw["epilogue_body"] = _dgrad_epilogue(graph, a)
            kw["dy_strides"] = tuple(a.y.strides)
            gen, ins, cols = P.dgrad_source, [a.y.uid, a.w.uid], P.patch_size(g)
        name = f"{kind}_patchify_{graph.key()[:12]}"
        src_c = gen(name, g, kn, interpret=False, **kw)
        self.source = src_c
        kern = _dual(src_c, gen(name, g, kn, interpret=True, **kw), name)
        pixels = g.n * K._prod(g.out_dims)
        grid = (-(-pixels // kn.BLOCK_M) * -(-cols // kn.BLOCK_N), 1)
        args = [("buf", u) for u in ins] + fuse_epilogue.launch_args(a.ep)
        self.add_launch(kern, grid, _consts(kn), args, graph, target.is_cuda)

    def run(self, buffers, workspace, stream=None):
        self.run_launches(buffers, workspace, stream)


class _PatchifyWgradExecutable(Executable, LaunchList):
    """The partial GEMM over (k tiles x q tiles, SPLIT slices), then the ordered sum."""

    def __init__(self, graph, a, kn: K.ConvKnobs, split: int, target):
        LaunchList.__init__(self)
        g = a.geo
        q, kt = P.patch_size(g), g.k_per_group
        self.workspace_size = 4 * split * kt * q
        name = f"conv_wgrad_patchify_{graph.key()[:12]}"
        kw = dict(
            split=split,
            dy_strides=tuple(a.y.strides),
            dw_desc=a.w,
            allow_tf32=tf32(a),
            fp32_inputs=a.x.data_type == DataType.FLOAT,
        )
        part_c, fin = P.wgrad_sources(name, g, kn, interpret=False, **kw)
        part_i, _ = P.wgrad_sources(name, g, kn, interpret=True, **kw)
        self.source = part_c + fin
        grid = (-(-kt // kn.BLOCK_M) * -(-q // kn.BLOCK_N), split)
        args = [("buf", a.x.uid), ("buf", a.y.uid), ("ws", torch.float32)]
        self.add_launch(_dual(part_c, part_i, name), grid, _consts(kn), args, graph, target.is_cuda)
        kf = kernel_from_source(fin, f"{name}_finish")
        self.add_launch(
            DualKernel(kf.compiled, kf.interpreted),
            *K.split_sum_launch(kt * q, split, target.num_sms),
            [("ws", torch.float32), ("buf", a.w.uid)],
            graph,
            target.is_cuda,
        )

    def run(self, buffers, workspace, stream=None):
        self.run_launches(buffers, workspace, stream)


__all__ = ["PatchifyConvEngine", "PatchifyDgradEngine", "PatchifyWgradEngine"]
