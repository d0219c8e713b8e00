"""Split-K backward filter from precomputed index tables
(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3).

The GEMM of ``conv_wgrad_splitk`` (per tap t and group g, dw[k, c, t] = sum over pixels
p = (n, s) of dy[n, k, s] * x[n, c, o(s)*stride - pre + r(t)*dil]), split over SPLIT
slices of the pixels whose partial tiles are added with float32 atomics -- but the index
arithmetic is read from two small tables instead of being redone for every pixel:

    PIX[s], s < prod(out):  dy offset, x offset and first coordinates of output position s
    TAP[t], t < prod(filt): x offset, dw offset (flipped in CONVOLUTION mode) and
                            coordinate steps of tap t

(``_split_kernels`` derives them). As in cuDNN, the tables live in the WORKSPACE and are
written at execute time, by the same first kernel that zeroes the accumulation target;
the plan holds no device memory. When dw is float32 and nothing follows the convolution,
the slices accumulate straight into dw and the workspace is only the tables
(prod(out) + prod(filt)) * (2 + d) indices, rounded to 256 bytes. Otherwise a float32
accumulator follows the tables and a finishing pass runs the epilogue (casts, scale, ...).

Launches: tables + zero, split GEMM, (finish). Atomic additions in a run-dependent order:
note NONDETERMINISTIC, so ``backends.deterministic`` keeps it out of the heuristics' plans.
"""

from __future__ import annotations

import torch

from ....enums import DataType
from ....runtime.launch import DualKernel, LaunchList, kernel_from_source
from ...base import SUPPORTED, Executable, Support, decline
from ...fusion import epilogue as fuse_epilogue
from ..analysis import epilogue, tf32
from ..implicit_gemm import _kernels as K
from . import _kernels as S
from .wgrad import SplitKWgradEngine, _knobs

FINISH_KNOBS = K.ConvKnobs(BLOCK_M=64, BLOCK_N=64, BLOCK_K=16, num_warps=4, num_stages=1)
# each inner step also loads (2 + d) table entries per pixel: a guess, not yet measured
MEASURED = 8.0
TABLE_LOAD_COST = 1.1


def accumulates_in_place(a) -> bool:
    """Whether the split partials can be added straight into dw: dw is float32 and written
    as it is (no epilogue node, no other output)."""
    return a.w.data_type == DataType.FLOAT and not a.ep.nodes and a.ep.outputs == [a.w.uid]


class PrecompSplitKWgradEngine(SplitKWgradEngine):
    """Nondeterministic split-K backward filter driven by workspace index tables. Knobs,
    configs and SPLIT choice as ``conv_wgrad_splitk``; kernels and workspace differ."""

    id = 19
    name = "conv_wgrad_precomp"
    kind = "conv_wgrad"

    def check_support(self, graph, target) -> Support:
        a = self._analyze(graph)
        if isinstance(a, str):
            return decline(a)
        if K._prod(a.geo.filt) > 65535:
            return decline(
                f"{K._prod(a.geo.filt)} filter taps exceed the grid's 65535 limit "
                "(one tap per program along axis 1)"
            )
        return SUPPORTED

    def workspace_size(self, graph, config, target) -> int:
        a = self._analyze(graph)
        return S.table_layout(a.geo, accumulates_in_place(a)).size

    def estimate_seconds(self, graph, config, target) -> float:
        """The deterministic engine's roofline sped up by the extra waves SPLIT fills,
        plus the float32 traffic: zeroing the target, the atomic read-modify-writes (as
        ``conv_wgrad_splitk`` counts them) and, with an accumulator, the finishing read."""
        kn, split = _knobs(config)
        a = self._analyze(graph)
        t = self.gather_roofline(graph, kn, target)
        programs = K._prod(K.wgrad_grid(a.geo, kn))
        gain = min(1.0, programs * split / target.num_sms) / min(1.0, programs / target.num_sms)
        direct = accumulates_in_place(a)
        dw_bytes = 4 * a.geo.groups * a.geo.k_per_group * a.geo.c_per_group * K._prod(a.geo.filt)
        traffic = dw_bytes * (2 if direct else 3) + S.table_layout(a.geo, direct).size
        # measured on the H100 (ResNet-50 layers, bf16): 5-10x this model before the factor
        model = (
            MEASURED * t * TABLE_LOAD_COST / max(gain, 1.0)
            + traffic / target.bandwidth
            + (2 if direct else 3) * 3e-6
        )
        return max(model, self.gather_loop(graph, kn, target, split))

    def build(self, graph, config, target) -> Executable:
        kn, split = _knobs(config)
        return _PrecompWgradExecutable(graph, self._analyze(graph), kn, split, target)


class _PrecompWgradExecutable(Executable, LaunchList):
    def __init__(self, graph, a, kn: K.ConvKnobs, split: int, target):
        LaunchList.__init__(self)
        geo = a.geo
        direct = accumulates_in_place(a)
        lay = S.table_layout(geo, direct)
        self.workspace_size = lay.size
        self.direct = direct
        tag = graph.key()[:12]
        cuda = target.is_cuda
        tab = ("ws", torch.int64 if lay.index_bytes == 8 else torch.int32)
        out = ("buf", a.w.uid) if direct else ("ws", torch.float32)
        # 1. index tables into the workspace; zero dw (direct) or ACC
        tname = f"wgrad_tables_{tag}"
        tsrc, cover = S.wgrad_tables_source(tname, geo, lay, dy_strides=a.y.strides, direct=direct)
        self.add_launch(
            kernel_from_source(tsrc, tname),
            (-(-cover // 1024),),
            {"BLOCK": 1024, "num_warps": 4},
            [tab, out],
            graph,
            cuda,
        )
        # 2. split GEMM reading the tables, atomically accumulated
        name = f"wgrad_precomp_{tag}"
        kw = dict(
            split=split,
            dy_strides=a.y.strides,
            direct=direct,
            allow_tf32=tf32(a),
            fp32_inputs=a.x.data_type == DataType.FLOAT,
        )
        src_c = S.wgrad_precomp_source(name, geo, kn, lay, interpret=False, **kw)
        src_i = S.wgrad_precomp_source(name, geo, kn, lay, interpret=True, **kw)
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
            [("buf", a.x.uid), ("buf", a.y.uid), tab, out],
            graph,
            cuda,
        )
        # 3. finish from the accumulator: the epilogue writes dw and any other output
        if not direct:
            params, body = epilogue(graph, a, "conv_wgrad")
            fname = f"wgrad_precomp_finish_{tag}"
            fsrc = S.wgrad_finish_source(fname, geo, FINISH_KNOBS, lay, params, body)
            self.add_launch(
                kernel_from_source(fsrc, fname),
                K.wgrad_grid(geo, FINISH_KNOBS),
                {
                    "BLOCK_M": FINISH_KNOBS.BLOCK_M,
                    "BLOCK_N": FINISH_KNOBS.BLOCK_N,
                    "num_warps": FINISH_KNOBS.num_warps,
                },
                [("ws", torch.float32)] + fuse_epilogue.launch_args(a.ep),
                graph,
                cuda,
            )
        self.source = src_c

    def run(self, buffers, workspace, stream=None):
        # a larger workspace than asked for is fine: view only our bytes
        self.run_launches(buffers, workspace[: self.workspace_size], stream)


__all__ = ["PrecompSplitKWgradEngine", "accumulates_in_place"]
