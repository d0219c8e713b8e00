"""Implicit-GEMM convolution forward engine (Triton, tensor cores) with a fused epilogue.

Takes a graph of one ``conv_fprop`` followed by any pointwise epilogue on Y-shaped tensors
(bias [1, K, 1, 1], residual z, scale, activation, type conversion): the cuDNN
CONV -> BIAS -> ACTIVATION and SCALE_BIAS_ADD patterns, in one kernel. Any layout of x,
w and y (NCHW, NHWC, non-packed) is addressed through its strides; NHWC keeps the channel
reduction contiguous. See ``_kernels`` for the index mapping.
"""

from __future__ import annotations

import dataclasses

import torch

from ....enums import BehaviorNote, DataType, NumericalNote
from ....runtime.launch import DualKernel, LaunchList, kernel_from_source
from ...base import (
    SUPPORTED,
    Engine,
    EngineConfig,
    Executable,
    Knob,
    Support,
    Target,
    decline,
)
from ...fusion import epilogue as fuse_epilogue
from ..analysis import ConvAnalysis, analyze, epilogue, peak_flops, prod, prologue_source, tf32
from ..tma import dgrad as tma_dgrad
from ..tma import engine as tma
from ..tma import wgrad as tma_wgrad
from . import _kernels as K


class ImplicitGemmEngine(Engine):
    """CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM: gather-on-the-fly GEMM, fused epilogue."""

    id = 3
    name = "conv_implicit_gemm"
    kind = "conv_fprop"
    behavior_notes = frozenset({BehaviorNote.RUNTIME_COMPILATION})
    tma_path = tma.FPROP  # configs naming TMA_* knobs take this NHWC fast path

    def _analyze(self, graph):
        return analyze(graph, self.kind)

    def check_support(self, graph, target: Target) -> Support:
        a = self._analyze(graph)
        return decline(a) if isinstance(a, str) else SUPPORTED

    def numerical_notes(self, graph, config) -> frozenset:
        a = self._analyze(graph)
        if isinstance(a, str):
            return frozenset()
        notes = set()
        if a.x.data_type != DataType.FLOAT or tf32(a):
            notes.add(NumericalNote.TENSOR_CORE)
        if tf32(a):
            notes.add(NumericalNote.DOWN_CONVERT_INPUTS)
        return frozenset(notes)

    def knob_space(self, graph=None) -> list[Knob]:
        space = K.knob_space()
        values = {
            f.name: ({getattr(k, f.name) for k in space} | {f.default}, f.default)
            for f in dataclasses.fields(K.ConvKnobs)
        }
        if self.tma_path is not None:
            for name, vals in self.tma_path.knob_values().items():
                old = values.get(name, (set(), vals[0]))
                values[name] = (old[0] | set(vals), old[1])
        return [Knob(n, tuple(sorted(v)), d) for n, (v, d) in values.items()]

    def calibration_key(self, graph, config) -> str:
        """The family, with ``:nchw`` when the image (x; dy for the backward data) has
        more than one channel and a channel stride other than 1, and ``:tf32`` for float32
        on the TMA path (its boxes reach the TF32 tensor cores through register
        transposes, which the model leaves out)."""
        key = self.family(config)
        a = self._analyze(graph)
        if isinstance(a, str):
            return key
        image = a.y if self.kind == "conv_dgrad" else a.x
        if ":tma" in key and image.data_type == DataType.FLOAT:
            key += ":tf32"
        return key + ":nchw" if image.dims[1] > 1 and image.strides[1] != 1 else key

    def family(self, config) -> str:
        kd, path = config.knob_dict, self.tma_path
        if path is None or not path.is_tma(kd):
            return f"{self.name}:gather"
        # a split forward or dgrad reduction is its own family: the cost model does not see the
        # L2 traffic it saves, so its best config is timed alongside (wgrad splits always)
        split = self.kind != "conv_wgrad" and kd.get("SPLIT", 1) > 1
        return (
            f"{self.name}:tma" + (":flat" if kd.get("FLAT") else "") + (":split" if split else "")
        )

    def complete_knobs(self, graph, knobs: dict) -> dict:
        """Defaults of the path the knobs choose: the TMA path's when any TMA_* is given."""
        path = self.tma_path
        if path is not None and path.is_tma(knobs):
            return {**path.knob_items(path.knob_class()), **knobs}
        gather = {f.name for f in dataclasses.fields(K.ConvKnobs)}
        return {**{k.name: k.default for k in self.knob_space(graph) if k.name in gather}, **knobs}

    def configs(self, graph, target: Target) -> list[EngineConfig]:
        a = self._analyze(graph)
        if isinstance(a, str):
            return []
        cands = (
            K.knob_space()
            if target.is_cuda
            else [K.ConvKnobs(32, 32, 32 if a.x.data_type == DataType.INT8 else 16, 4, 2)]
        )
        if target.is_cuda and a.x.data_type == DataType.FLOAT and not tf32(a):
            # IEEE float32 dots run on the CUDA cores: a 128x128 float32 tile spills (the
            # FFT helper measured 8.5 ms against a 0.18 ms estimate on a ResNet 3x3 layer)
            cands = [k for k in cands if k.BLOCK_M * k.BLOCK_N <= 64 * 64 and k.BLOCK_K <= 32] or [
                K.ConvKnobs(64, 64, 16, 4, 2)
            ]
        out = [
            EngineConfig.make(self, **dataclasses.asdict(k))
            for k in cands
            if self._fits(a, k, target)
        ]
        path = self.tma_path
        if (
            path is not None
            and target.is_cuda
            and target.capability >= (9, 0)
            and path.unsupported(a) is None
        ):
            out += [EngineConfig.make(self, **path.knob_items(k)) for k in path.knobs(a, target)]
        est = {c: self.estimate_seconds(graph, c, target) for c in out}
        out.sort(key=est.get)
        if path is not None:  # each path's best first: a short list (heuristics keep an
            firsts = []  # engine's top few) must not lose a path to the cost model
            for fam in dict.fromkeys(self.family(c) for c in out):
                firsts += [c for c in out if self.family(c) == fam][:1]
            firsts.sort(key=est.get)
            out = firsts + [c for c in out if c not in firsts]
        return out

    def _fits(self, a, kn, target) -> bool:
        if a.x.data_type == DataType.INT8 and kn.BLOCK_K < 32:
            return False  # int8 tensor-core dots need K steps of 32 or more
        smem = (kn.BLOCK_M + kn.BLOCK_N) * kn.BLOCK_K * a.x.data_type.itemsize * kn.num_stages
        return not target.is_cuda or smem <= 220 * 1024

    def check_config(self, graph, config, target) -> Support:
        s = super().check_config(graph, config, target)
        if not s.ok:
            return s
        kd, path = config.knob_dict, self.tma_path
        if path is not None and path.is_tma(kd):
            foreign = sorted(set(kd) - set(path.knob_names()))
            if foreign:
                return decline(
                    f"{', '.join(foreign)} belong(s) to the gather path; the TMA "
                    f"path's knobs are {', '.join(path.knob_names())}"
                )
            why = path.check(self._analyze(graph), path.knob_class(**kd))
            return decline(why) if why else SUPPORTED
        kn = K.ConvKnobs(**kd)
        if not self._fits(self._analyze(graph), kn, target):
            return decline("the tiles' pipeline stages exceed the shared memory of a block")
        return SUPPORTED

    def workspace_size(self, graph, config, target) -> int:
        a, kd, path = self._analyze(graph), config.knob_dict, self.tma_path
        if isinstance(a, str):
            return 0
        if path is not None and path.is_tma(kd):
            return path.workspace_size(a, path.knob_class(**kd))
        if not a.ep.stats:
            return 0
        return (
            4
            * 2
            * len(a.ep.stats)
            * _stat_tiles(a, K.ConvKnobs(**config.knob_dict))
            * a.geo.k_per_group
            * a.geo.groups
        )

    def estimate_seconds(self, graph, config, target) -> float:
        a = self._analyze(graph)
        peak = peak_flops(a, target)
        kd, path = config.knob_dict, self.tma_path
        if path is not None and path.is_tma(kd):
            return path.estimate_seconds(a, path.knob_class(**kd), peak, target)
        return K.estimate_seconds(
            a.geo,
            K.ConvKnobs(**kd),
            a.x.data_type.itemsize,
            peak,
            target.bandwidth,
            target.num_sms,
            step_scale=transposed_step(a, a.geo.x_strides[1] != 1 or a.geo.w_strides[1] != 1),
        ) * nchw_gather(a, self.kind, target)

    def build(self, graph, config, target) -> Executable:
        a, kd, path = self._analyze(graph), config.knob_dict, self.tma_path
        if path is not None and path.is_tma(kd):
            params, body = epilogue(graph, a, self.kind)
            return path.build(graph, a, path.knob_class(**kd), target, params, body)
        return _ConvExecutable(graph, a, K.ConvKnobs(**kd), target, self.kind)


class ImplicitGemmDgradEngine(ImplicitGemmEngine):
    """CUDNN_CONVOLUTION_BWD_DATA_ALGO_1-style implicit GEMM over dx pixels (deterministic).

    A strided problem also gets the gather path by stride phases (knob ``PHASES=1``, its
    own family; ``_kernels.dgrad_phase_source``): each program takes one phase's dx pixels
    and walks only the taps that reach them, ceil(R/s) per strided axis instead of R."""

    id = 4
    name = "conv_dgrad_implicit_gemm"
    kind = "conv_dgrad"
    tma_path = tma_dgrad.DGRAD
    stride_phases = True  # the PHASES knob (subclasses with their own knobs turn it off)
    PHASE_CONFIGS = 3  # the gather configs offered again by phases

    def knob_space(self, graph=None) -> list[Knob]:
        space = super().knob_space(graph)
        return space + [Knob("PHASES", (0, 1), 0)] if self.stride_phases else space

    def family(self, config) -> str:
        if config.knob_dict.get("PHASES"):
            return f"{self.name}:gather:phases"
        return super().family(config)

    def _phases(self, graph) -> bool:
        a = self._analyze(graph)
        return self.stride_phases and not isinstance(a, str) and K.phases_reason(a.geo) is None

    def configs(self, graph, target: Target) -> list[EngineConfig]:
        out = super().configs(graph, target)
        if not self._phases(graph):
            return out
        gather = [c for c in out if self.family(c) == f"{self.name}:gather"]
        phased = [
            EngineConfig.make(self, **c.knob_dict, PHASES=1) for c in gather[: self.PHASE_CONFIGS]
        ]

        def est(c):
            return self.estimate_seconds(graph, c, target)

        best = sorted(phased, key=est)
        # the base lists each path's best first: this family's best joins them
        fams = len({self.family(c) for c in out})
        return sorted(out[:fams] + best[:1], key=est) + out[fams:] + best[1:]

    def check_config(self, graph, config, target) -> Support:
        kd = config.knob_dict
        if not kd.get("PHASES"):
            return super().check_config(graph, config, target)
        if not self.stride_phases:
            return decline(f"{self.name} has no PHASES knob")
        a = self._analyze(graph)
        if isinstance(a, str):
            return decline(a)
        why = K.phases_reason(a.geo)
        if why:
            return decline(f"PHASES=1: {why}")
        if self.tma_path is not None and self.tma_path.is_tma(kd):
            return decline("PHASES belongs to the gather path (the TMA path has its own phases)")
        rest = {k: v for k, v in kd.items() if k != "PHASES"}
        return super().check_config(graph, EngineConfig.make(self, **rest), target)

    def build(self, graph, config, target) -> Executable:
        kd = dict(config.knob_dict)
        if not kd.pop("PHASES", 0):
            return super().build(graph, config, target)
        return _ConvExecutable(
            graph, self._analyze(graph), K.ConvKnobs(**kd), target, self.kind, phases=True
        )

    def estimate_seconds(self, graph, config, target) -> float:
        """The gather path as the GEMM it runs: M = dx pixels, N = C, reduction = taps x
        K -- every tap is walked for every pixel, so at stride s only 1/s^d of the work
        is useful (the forward's model would count dy pixels and reduce over C). By
        phases: prod(s) GEMMs over a phase's pixels, each reducing over its taps (dy,
        counted once per phase, mostly comes from L2 after the first)."""
        kd = dict(config.knob_dict)
        if self.tma_path is not None and self.tma_path.is_tma(kd):
            return super().estimate_seconds(graph, config, target)
        a = self._analyze(graph)
        phases = kd.pop("PHASES", 0)
        geo = dataclasses.replace(
            a.geo,
            out_dims=a.geo.in_dims,
            in_dims=a.geo.out_dims,
            c_per_group=a.geo.k_per_group,
            k_per_group=a.geo.c_per_group,
        )
        if phases:
            nph = prod(a.geo.stride)
            geo = dataclasses.replace(
                geo,
                n=geo.n * nph,
                out_dims=K.phase_dims(a.geo),
                filt=K.phase_taps(a.geo),
                stride=(1,) * len(a.geo.stride),
            )
        peak = peak_flops(a, target, a.y)
        return K.estimate_seconds(
            geo,
            K.ConvKnobs(**kd),
            a.y.data_type.itemsize,
            peak,
            target.bandwidth,
            target.num_sms,
            # A = dy reduces over K (its channels), B = w over K (the filter's first axis)
            step_scale=transposed_step(a, a.y.strides[1] != 1 or a.geo.w_strides[0] != 1),
        ) * nchw_gather(a, self.kind, target)


class ImplicitGemmWgradEngine(ImplicitGemmEngine):
    """Deterministic backward filter (CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1-style): one
    program per (tap, tile), reducing over all pixels in a fixed order."""

    id = 5
    name = "conv_wgrad_implicit_gemm"
    kind = "conv_wgrad"
    tma_path = tma_wgrad.WGRAD
    # measured on the H100 (ResNet-50 layers, N=32, bf16): the gather path's strided dy
    # slabs and per-pixel index math run 1.9-3.1x slower than its roofline says
    GATHER_SLOWDOWN = 2.5

    def estimate_seconds(self, graph, config, target) -> float:
        """The TMA path's model; the gather path's roofline or its main loop, the longer."""
        if self.tma_path is not None and self.tma_path.is_tma(config.knob_dict):
            return super().estimate_seconds(graph, config, target)
        kn = K.ConvKnobs(**config.knob_dict)
        return max(self.gather_roofline(graph, kn, target), self.gather_loop(graph, kn, target))

    def gather_roofline(self, graph, kn: K.ConvKnobs, target) -> float:
        """The forward's roofline of the same GEMM times GATHER_SLOWDOWN."""
        a = self._analyze(graph)
        peak = peak_flops(a, target)
        size = a.x.data_type.itemsize
        t = K.estimate_seconds(a.geo, kn, size, peak, target.bandwidth, target.num_sms, loop=False)
        return t * self.GATHER_SLOWDOWN * nchw_gather(a, "conv_wgrad", target)

    def gather_loop(self, graph, kn: K.ConvKnobs, target, split: int = 1) -> float:
        """The main loop: each of the (tile, tap, group) programs, times ``split`` slices,
        walks its share of the output pixels BLOCK_K at a time (``K.loop_seconds``)."""
        a = self._analyze(graph)
        programs = K._prod(K.wgrad_grid(a.geo, kn)) * split
        pixels = -(-a.geo.n * K._prod(a.geo.out_dims) // split)
        steps = programs * -(-pixels // kn.BLOCK_K)
        tile = (kn.BLOCK_M + kn.BLOCK_N) * kn.BLOCK_K * a.x.data_type.itemsize
        # the reduction runs over pixels: dy (A) and x (B) are K-major when pixel-contiguous
        scale = transposed_step(a, a.geo.x_strides[1] == 1 or a.y.strides[1] == 1)
        loop = K.loop_seconds(steps, programs, tile, target.num_sms, scale)
        return loop * nchw_gather(a, "conv_wgrad", target)


# The gather path on an image whose channels are not unit-stride (NCHW): the tile's rows
# (pixels) go through the index arithmetic, so no load is provably contiguous and every
# element is its own access. Measured on the H100 (ResNet-50 NCHW layers, N=32): the find's
# native gather timings over this model, relative to the NHWC timings of the same family
# (whose factor ``MEASURED_SCALES`` holds), per direction, in half precision and with TF32
# (whose operand-order term already counts part of it).
NCHW_GATHER = {
    ("conv_fprop", False): 3.2,
    ("conv_fprop", True): 1.6,
    ("conv_dgrad", False): 5.1,
    ("conv_dgrad", True): 2.4,
    ("conv_wgrad", False): 3.6,
    ("conv_wgrad", True): 3.2,
}


# a 1x1 backward data in half precision walks one tap: its native NCHW timings ran at 0.40
# of the 3x3-dominated factor's estimate (24 timings over the pointwise layers)
NCHW_GATHER_POINTWISE_DGRAD = 2.0
# a 1x1 forward walks one tap too, its pixel runs contiguous: native NCHW timings over the
# pointwise layers ran at 0.40 (half precision, 15 timings) and 0.75 (TF32, 9) of the
# estimate under the 3x3-dominated terms, one term of about 1.35 for both
NCHW_GATHER_POINTWISE_FPROP = 1.35


def nchw_gather(a: ConvAnalysis, kind: str, target: Target) -> float:
    """``NCHW_GATHER`` on a GPU for a gather over an image (x; dy for the backward data)
    whose channel stride is not 1, else 1 (the interpreter has no coalescing to lose). A 1-D backward filter in TF32 is exempt: its pixel
    runs are whole rows, and the native NCHW plan (K-major) measured at cuDNN's speed on
    the 1-D set where the channels-last transform (MN-major) ran 3.5-4x slower."""
    image = a.y if kind == "conv_dgrad" else a.x
    if not target.is_cuda or image.strides[1] == 1 or image.dims[1] == 1:
        return 1.0
    if kind == "conv_wgrad" and tf32(a) and len(a.geo.filt) == 1:
        return 1.0
    if kind == "conv_dgrad" and not tf32(a) and prod(a.geo.filt) == 1:
        return NCHW_GATHER_POINTWISE_DGRAD
    if kind == "conv_fprop" and prod(a.geo.filt) == 1:
        return NCHW_GATHER_POINTWISE_FPROP
    return NCHW_GATHER[(kind, tf32(a))]


def transposed_step(a: ConvAnalysis, transposed: bool) -> float:
    """``K.TF32_TRANSPOSED_STEP`` for a TF32 problem whose gathered float32 operand is not
    K-major (``transposed``), else 1."""
    if transposed and a.x.data_type == DataType.FLOAT and tf32(a):
        return K.TF32_TRANSPOSED_STEP
    return 1.0


def source_options(graph, a: ConvAnalysis, kind: str) -> dict:
    """The keyword arguments every implicit-GEMM source generator takes for ``a``: the
    epilogue, the TF32 / float32 switches and, for int8 data, the int8 dot with (INT32
    compute) the float64 epilogue."""
    params, body = epilogue(graph, a, kind)
    kw = dict(
        epilogue_params=params,
        epilogue_body=body,
        allow_tf32=tf32(a),
        fp32_inputs=a.x.data_type == DataType.FLOAT,
    )
    if a.x.data_type == DataType.INT8:
        kw["int8"] = True
        kw["exact_int"] = a.ep.exact_int
    return kw


def _stat_tiles(a: ConvAnalysis, kn: K.ConvKnobs) -> int:
    return -(-a.geo.n * prod(a.geo.out_dims) // kn.BLOCK_M)


def stats_finish_source(graph, a: ConvAnalysis, kn: K.ConvKnobs) -> tuple:
    """Sum the per-tile partials in a fixed order (deterministic, ``K.chunk_sum_lines``)
    into SUM and SQ_SUM."""
    from ...fusion import _codegen as cg

    k_total = a.geo.k_per_group * a.geo.groups
    tiles = _stat_tiles(a, kn)
    name = f"conv_stats_{graph.key()[:12]}"
    outs = [u for _, s_, q in a.ep.stats for u in (s_, q)]
    lines = [
        K.COMBINE_HELPERS,
        "@triton.jit",
        f"def {name}(WS, {', '.join(f'O{u}' for u in outs)}, BLOCK: tl.constexpr, "
        "CHUNK: tl.constexpr):",
        "    e = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)",
        f"    mask = e < {k_total}",
    ]
    for i, u in enumerate(outs):
        lines += K.chunk_sum_lines("acc", f"{i * tiles * k_total}", k_total, tiles) + [
            "    "
            + cg.store_expr(
                f"O{u}", f"e * {graph.tensors[u].strides[1]}", "acc", graph.tensors[u], "mask"
            ),
        ]
    args = [("ws", torch.float32)] + [("buf", u) for u in outs]
    return (
        "\n".join(lines) + "\n",
        name,
        *K.split_sum_launch(k_total, tiles),
        args,
    )


class _ConvExecutable(Executable, LaunchList):
    def __init__(
        self,
        graph,
        a: ConvAnalysis,
        kn: K.ConvKnobs,
        target: Target,
        kind: str,
        phases: bool = False,
    ):
        LaunchList.__init__(self)
        self.workspace_size = 0
        name = f"{kind}_{graph.key()[:12]}"
        kw = source_options(graph, a, kind)
        if kind == "conv_fprop":
            gen, grid, ins = K.fprop_source, K.grid(a.geo, kn), [a.x.uid, a.w.uid]
            if a.prologue is not None:
                pparams, kw["prologue_body"] = prologue_source(graph, a)
                kw["epilogue_params"] = pparams + kw["epilogue_params"]
        elif kind == "conv_dgrad":
            kw["dy_strides"] = a.y.strides
            gen = K.dgrad_phase_source if phases else K.dgrad_source
            grid, ins = K.dgrad_grid(a.geo, kn, phases), [a.y.uid, a.w.uid]
        else:
            kw["dy_strides"] = a.y.strides
            gen, grid, ins = K.wgrad_source, K.wgrad_grid(a.geo, kn), [a.x.uid, a.y.uid]
        src_c = gen(name, a.geo, kn, interpret=False, **kw)
        src_i = gen(name, a.geo, kn, interpret=True, **kw)
        kern = DualKernel(
            kernel_from_source(src_c, name).compiled, kernel_from_source(src_i, name).interpreted
        )
        self.source = src_c
        pro_args = (
            [("buf", u) for u in a.prologue.channel_inputs + a.prologue.scalars]
            if (kind == "conv_fprop" and a.prologue)
            else []
        )
        ws_arg = [("ws", torch.float32)] if a.ep.stats else []
        args = [("buf", u) for u in ins] + pro_args + ws_arg + fuse_epilogue.launch_args(a.ep)
        const = {
            "BLOCK_M": kn.BLOCK_M,
            "BLOCK_N": kn.BLOCK_N,
            "BLOCK_K": kn.BLOCK_K,
            "num_warps": kn.num_warps,
            "num_stages": kn.num_stages,
        }
        self.add_launch(kern, grid, const, args, graph, target.is_cuda)
        if a.ep.stats:
            fsrc, fname, fgrid, fconst, fargs = stats_finish_source(graph, a, kn)
            self.add_launch(
                kernel_from_source(fsrc, fname), fgrid, fconst, fargs, graph, target.is_cuda
            )
            self.workspace_size = (
                4 * 2 * len(a.ep.stats) * _stat_tiles(a, kn) * a.geo.k_per_group * a.geo.groups
            )

    def run(self, buffers, workspace, stream=None):
        self.run_launches(buffers, workspace, stream)


__all__ = ["ImplicitGemmEngine", "ImplicitGemmDgradEngine", "ImplicitGemmWgradEngine"]
