"""Split-K backward filter (CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 / ALGO_3-style): the pixel
reduction of each (tap, tile) is cut into SPLIT slices that run in parallel and add their
partial sums into a float32 accumulator with atomics, so the summation order -- and the
last bits of dw -- can change from run to run (note NONDETERMINISTIC). Worth it when
N * prod(out) is long and K x C/G is small (few programs otherwise).

Three launches: zero the accumulator (workspace), the split GEMM, and a finishing pass
that reads the accumulator and runs the epilogue (casts, scale, ...).
"""

from __future__ import annotations

import dataclasses

import torch

from ....enums import NumericalNote
from ....runtime.launch import DualKernel, LaunchList, kernel_from_source
from ...base import EngineConfig, Executable, Knob
from ...fusion import epilogue as fuse_epilogue
from ..analysis import epilogue, tf32
from ..implicit_gemm import _kernels as K
from ..implicit_gemm.engine import ImplicitGemmWgradEngine

SPLITS = (2, 4, 8, 16, 32, 64)


def _knobs(config) -> tuple:
    d = dict(config.knob_dict)
    split = d.pop("SPLIT", 8)
    return K.ConvKnobs(**d), split


class SplitKWgradEngine(ImplicitGemmWgradEngine):
    """Nondeterministic split-K implicit-GEMM backward filter."""

    id = 10
    name = "conv_wgrad_splitk"
    kind = "conv_wgrad"
    tma_path = None

    def numerical_notes(self, graph, config) -> frozenset:
        return super().numerical_notes(graph, config) | {NumericalNote.NONDETERMINISTIC}

    def knob_space(self, graph=None):
        return super().knob_space(graph) + [Knob("SPLIT", SPLITS, 8)]

    def configs(self, graph, target):
        base = super().configs(graph, target)
        a = self._analyze(graph)
        if isinstance(a, str):
            return []
        out = []
        for c in base[:4]:
            kn = K.ConvKnobs(**c.knob_dict)
            programs = K._prod(K.wgrad_grid(a.geo, kn))
            split = 2
            while split < SPLITS[-1] and programs * split < 2 * target.num_sms:
                split *= 2
            out.append(EngineConfig.make(self, **c.knob_dict, SPLIT=split if target.is_cuda else 2))
        return out

    def check_config(self, graph, config, target):
        kn, split = _knobs(config)
        if split not in SPLITS:
            from ...base import decline

            return decline(f"SPLIT={split} not in {SPLITS}")
        return super().check_config(
            graph, EngineConfig.make(self, **dataclasses.asdict(kn)), target
        )

    def estimate_seconds(self, graph, config, target) -> float:
        kn, split = _knobs(config)
        a = self._analyze(graph)
        t = self.gather_roofline(graph, kn, target)
        programs = K._prod(K.wgrad_grid(a.geo, kn))
        fill = min(1.0, programs * split / target.num_sms) / min(1.0, programs / target.num_sms)
        # measured on the H100 (ResNet-50 layers, bf16): 30-60x the gather roofline; the
        # transposed dy slabs, the atomics and the short slices, over the deterministic gather
        model = (
            20.0 * t / max(fill, 1.0)
            + 6e-6
            + self.workspace_size(graph, config, target) * 3 / target.bandwidth
        )
        return max(model, self.gather_loop(graph, kn, target, split))

    def workspace_size(self, graph, config, target) -> int:
        a = self._analyze(graph)
        return 4 * a.geo.groups * a.geo.k_per_group * a.geo.c_per_group * K._prod(a.geo.filt)

    def build(self, graph, config, target) -> Executable:
        kn, split = _knobs(config)
        return _SplitExecutable(graph, self._analyze(graph), kn, split, target)


class _SplitExecutable(Executable, LaunchList):
    def __init__(self, graph, a, kn, split, target):
        LaunchList.__init__(self)
        geo = a.geo
        taps = K._prod(geo.filt)
        total = geo.groups * geo.k_per_group * geo.c_per_group * taps
        self.workspace_size = 4 * total
        tag = graph.key()[:12]
        cuda = target.is_cuda
        acc_index = (
            f"(((g * {geo.k_per_group} + offs_m)[:, None] * {geo.c_per_group} + "
            f"offs_n[None, :]) * {taps} + t)"
        )
        # 1. zero the accumulator
        zname = f"wgrad_zero_{tag}"
        zsrc = (
            f"@triton.jit\ndef {zname}(ACC, BLOCK: tl.constexpr):\n"
            "    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
            f"    tl.store(ACC + i, tl.full([BLOCK], 0.0, tl.float32), mask=i < {total})\n"
        )
        self.add_launch(
            kernel_from_source(zsrc, zname),
            (-(-total // 1024),),
            {"BLOCK": 1024, "num_warps": 4},
            [("ws", torch.float32)],
            graph,
            cuda,
        )
        # 2. split GEMM, atomically accumulated
        name = f"wgrad_split_{tag}"
        body = (
            "ep_mask = mask_m[:, None] & mask_n[None, :]\n"
            f"tl.atomic_add(ACC + {acc_index}, acc, mask=ep_mask)\n"
        )
        kw = dict(
            dy_strides=a.y.strides,
            epilogue_params=["ACC"],
            epilogue_body=body,
            allow_tf32=tf32(a),
            fp32_inputs=a.x.data_type.name == "FLOAT",
            split=split,
        )
        src_c = K.wgrad_source(name, geo, kn, interpret=False, **kw)
        src_i = K.wgrad_source(name, geo, kn, interpret=True, **kw)
        kern = DualKernel(
            kernel_from_source(src_c, name).compiled, kernel_from_source(src_i, name).interpreted
        )
        g0, g1, g2 = K.wgrad_grid(geo, kn)
        const = {
            "BLOCK_M": kn.BLOCK_M,
            "BLOCK_N": kn.BLOCK_N,
            "BLOCK_K": kn.BLOCK_K,
            "num_warps": kn.num_warps,
            "num_stages": kn.num_stages,
        }
        self.add_launch(
            kern,
            (g0 * split, g1, g2),
            const,
            [("buf", a.x.uid), ("buf", a.y.uid), ("ws", torch.float32)],
            graph,
            cuda,
        )
        # 3. finish: read the accumulator, run the epilogue
        params, ep_body = epilogue(graph, a, "conv_wgrad")
        fname = f"wgrad_finish_{tag}"
        tiles_n = -(-geo.c_per_group // kn.BLOCK_N)
        lines = [
            "@triton.jit",
            f"def {fname}(ACC, {', '.join(params)}, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):",
            "    pid = tl.program_id(0)",
            "    t = tl.program_id(1)",
            "    g = tl.program_id(2)",
            f"    pid_m = pid // {tiles_n}",
            f"    pid_n = pid % {tiles_n}",
            "    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)",
            f"    mask_m = offs_m < {geo.k_per_group}",
            "    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)",
            f"    mask_n = offs_n < {geo.c_per_group}",
        ]
        lines += K._div_chain(
            "t", list(geo.filt), [f"r{i}" for i in range(len(geo.filt))], "    ", "_qt"
        )
        lines.append(
            f"    acc = tl.load(ACC + {acc_index}, mask=mask_m[:, None] & "
            "mask_n[None, :], other=0.0)"
        )
        lines += ["    " + ln for ln in ep_body.strip("\n").split("\n")]
        fsrc = "\n".join(lines) + "\n"
        self.add_launch(
            kernel_from_source(fsrc, fname),
            (g0, g1, g2),
            {"BLOCK_M": kn.BLOCK_M, "BLOCK_N": kn.BLOCK_N, "num_warps": 4},
            [("ws", torch.float32)] + fuse_epilogue.launch_args(a.ep),
            graph,
            cuda,
        )
        self.source = src_c

    def run(self, buffers, workspace, stream=None):
        self.run_launches(buffers, workspace, stream)
