"""Convolution through a layout transform: an NCHW (NCDHW, NCL) problem run by an engine of
the channels-last problem, with the copies around it.

PyTorch's default layout is NCHW, while the tensor-core engines read channels innermost
(one vector load per pixel along C). For a layer whose native NCHW engines are slow -- a
patchify stem with C = 3, a 1x1 backward filter, a 3x3 layer in TF32 -- the fastest plan
can be to transpose. For the graph G with its packed NCHW tensors, this engine builds G',
the same nodes with every such tensor given channels-last strides,

    x'[n, h, w, c] = x[n, c, h, w]          (the same for dy, y, dx, w, residuals, ...)

and a plan is: copy each NCHW input into a channels-last workspace buffer, run the inner
engine's config on G', copy each output back.

TF32 tensor cores read both operands of a dot reduction-contiguous (K-major); a float32
operand in the other order costs ~6x a main-loop step. The channels-last image is
K-major for the forward (reduction over C) and the backward data (over K), and so is the
forward's KRSC filter; the backward data's B operand is the filter reduced over its
*first* axis, so with TF32 the backward data also moves the filter to K innermost,

    w'[r, s, c, k] = w[k, c, r, s]          (strides: k 1, c K, then the filter axes)

whatever its layout was (an NHWC backward data in TF32 moves only the filter). A tensor whose memory the permutation does
not change (one channel, or one pixel: a bias [1, K, 1, 1]) is handed over as it is. The
copies cost ``2 x bytes`` of every moved tensor at the device's bandwidth, plus a launch
each; the cost model adds them to the inner config's estimate, and benchmark mode times
the transform plans as their own family, so a copy that does not pay for itself loses to
the native NCHW engines.

With ``DIRECT=1`` the outputs are not copied: G' keeps them NCHW and the inner engine's
epilogue writes them in place (only the inputs move). This saves an output round trip and
a launch -- a backward data of a 56x56 image with 128 channels copies 51 MB of float32 dx
back -- wherever the inner engine takes NCHW outputs; its epilogue then stores along the
pixels instead of the channels, so both forms are offered and benchmark mode times each
(``:direct`` in the family).

A config is the inner engine's config plus ``ENGINE`` (the inner engine's id) and
``DIRECT``: the plan's name says which engine runs inside. The numerical notes are the inner config's; the
result is the inner engine's bit for bit (the copies are exact).
"""

from __future__ import annotations

import dataclasses
import math

import torch

from ....runtime.buffers import as_tensor, logical_view
from ....runtime.launch import Launcher, kernel_from_source
from ...base import SUPPORTED, Engine, EngineConfig, Executable, Knob, Support, Target, decline
from ..analysis import analyze, tf32
from . import _kernels as K

# configs offered: the best few of the inner engines together, by their cost models
CONFIGS = 6
INNER_CONFIGS_PER_ENGINE = 3
ALIGN = 256
COPY_LAUNCH_S = 3e-6


def channels_last_strides(dims: tuple) -> tuple:
    """Strides of ``dims`` = (N, C, D1, .., Dk) with C innermost, then Dk, .., D1, N."""
    c, sp = dims[1], dims[2:]
    out, step = [0] * len(dims), c
    out[1] = 1
    for i in reversed(range(len(sp))):
        out[2 + i] = step
        step *= sp[i]
    out[0] = step
    return tuple(out)


def k_innermost_strides(dims: tuple) -> tuple:
    """Strides of a filter ``dims`` = (K, C, R1, .., Rk) with K innermost, then C, then
    Rk, .., R1: the backward data's filter operand K-major."""
    out, step = [0] * len(dims), dims[0] * dims[1]
    out[0], out[1] = 1, dims[0]
    for i in reversed(range(2, len(dims))):
        out[i] = step
        step *= dims[i]
    return tuple(out)


def _packed(desc) -> bool:
    """Whether ``desc`` is a packed row-major (NCHW-order) tensor."""
    step = 1
    for d, s in zip(reversed(desc.dims), reversed(desc.strides)):
        if d != 1 and s != step:
            return False
        step *= d
    return True


def _moves(desc) -> bool:
    """Whether giving ``desc`` channels-last strides moves its elements (C > 1 and more
    than one pixel); a tensor that does not move is used in place."""
    return len(desc.dims) >= 3 and desc.dims[1] > 1 and math.prod(desc.dims[2:]) > 1


@dataclasses.dataclass(frozen=True)
class _Problem:
    inner: object  # OpGraph with channels-last strides
    moved: tuple  # uids of the non-virtual tensors that are copied


def _channels_last_problem(graph, kind: str, direct: bool = False) -> _Problem | str:
    """The channels-last twin of ``graph`` (with ``direct``, its outputs left as they are),
    or why there is none."""
    a = analyze(graph, kind)
    if isinstance(a, str):
        return a
    tensors, moved = {}, []
    outputs = graph.output_uid_set if direct else frozenset()
    k_major_w = kind == "conv_dgrad" and tf32(a) and a.w.dims[0] > 1
    for uid, desc in graph.tensors.items():
        if k_major_w and uid == a.w.uid:
            want = k_innermost_strides(desc.dims)
            tensors[uid] = dataclasses.replace(desc, strides=want)
            if desc.strides != want:
                moved.append(uid)
            continue
        if len(desc.dims) < 3 or not _moves(desc) or uid in outputs:
            tensors[uid] = desc
            continue
        if desc.strides == channels_last_strides(desc.dims):  # already channels-last
            tensors[uid] = desc
            continue
        if not _packed(desc):
            if desc.is_virtual:
                tensors[uid] = desc
                continue
            return (
                f"tensor '{desc.label()}' with strides {list(desc.strides)} is not packed "
                "NCHW: only a packed NCHW tensor is transposed"
            )
        tensors[uid] = dataclasses.replace(desc, strides=channels_last_strides(desc.dims))
        if not desc.is_virtual:
            moved.append(uid)
    if not moved or (not k_major_w and not {a.x.uid, a.y.uid} & set(moved)):
        return "no image tensor to transpose (already channels-last, one channel or one pixel)"
    inner = dataclasses.replace(graph, tensors=tensors)
    return _Problem(inner, tuple(moved))


class ChannelsLastConvEngine(Engine):
    """Forward convolution of NCHW tensors by a channels-last engine between two copies."""

    id = 44
    name = "conv_fprop_channels_last"
    kind = "conv_fprop"

    # ---- the inner problem ----------------------------------------------------------------
    def _problem(self, graph, direct: bool = False) -> _Problem | str:
        """The channels-last twin (``direct``: outputs kept in place), memoized on the
        graph per kind."""
        key = (self.kind, bool(direct))
        memo = getattr(graph, "__dict__", {}).get("_channels_last")
        if memo is not None and key in memo:
            return memo[key]
        p = _channels_last_problem(graph, self.kind, bool(direct))
        try:
            if memo is None:
                memo = {}
                object.__setattr__(graph, "_channels_last", memo)
            memo[key] = p
        except (AttributeError, TypeError):
            pass
        return p

    def _twin(self, graph, config) -> _Problem | str:
        return self._problem(graph, config.knob_dict.get("DIRECT", 0) == 1)

    def _usable(self, graph, direct: bool, target) -> _Problem | None:
        """The twin when it exists and some engine takes it."""
        p = self._problem(graph, direct)
        if isinstance(p, str) or not self._inner_engines(p.inner, target):
            return None
        return p

    @staticmethod
    def _inner_engines(inner, target) -> list:
        """The engines (not the reference, not a transform) that take ``inner``; memoized
        on the inner graph per target and registry generation."""
        from ...registry import engines, generation, reference

        key = (target, generation())
        memo = inner.__dict__.setdefault("_channels_last_engines", {})
        if key not in memo:
            memo[key] = [
                e
                for e in engines()
                if e is not reference()
                and not isinstance(e, ChannelsLastConvEngine)
                and e.check_support(inner, target).ok
            ]
        return memo[key]

    def _split(self, config: EngineConfig):
        """(inner engine, inner config) of ``config``."""
        from ...registry import by_id

        kd = config.knob_dict
        e = by_id(kd["ENGINE"])
        knobs = {k: v for k, v in kd.items() if k not in ("ENGINE", "DIRECT")}
        return e, EngineConfig.make(e, **knobs)

    # ---- the engine interface -----------------------------------------------------------
    def check_support(self, graph, target) -> Support:
        p = self._problem(graph)
        if isinstance(p, str):
            return decline(p)
        if not self._usable(graph, False, target) and not self._usable(graph, True, target):
            return decline("no engine takes the channels-last problem")
        return SUPPORTED

    def knob_space(self, graph=None) -> list:
        return [Knob("ENGINE", tuple(range(0, 64)), 0), Knob("DIRECT", (0, 1), 0)]

    def complete_knobs(self, graph, knobs: dict) -> dict:
        from ...registry import by_id

        direct = knobs.get("DIRECT", 0)
        p = self._problem(graph, direct == 1)
        if isinstance(p, str):
            return dict(knobs)
        if "ENGINE" not in knobs:  # the first engine (registry order) that takes the problem
            found = self._inner_engines(p.inner, Target())
            if not found:
                return dict(knobs)
            knobs = {"ENGINE": found[0].id, **knobs}
        inner = by_id(knobs["ENGINE"])
        if inner is None or isinstance(inner, ChannelsLastConvEngine):
            return dict(knobs)  # check_config names the bad id
        rest = {k: v for k, v in knobs.items() if k not in ("ENGINE", "DIRECT")}
        # DIRECT stays out of the knobs unless set: the copying plans keep their names
        flag = {"DIRECT": direct} if "DIRECT" in knobs else {}
        return {"ENGINE": knobs["ENGINE"], **flag, **inner.complete_knobs(p.inner, rest)}

    def check_config(self, graph, config, target) -> Support:
        s = self.check_support(graph, target)
        if not s.ok:
            return s
        eid, direct = config.knob_dict.get("ENGINE"), config.knob_dict.get("DIRECT", 0)
        if direct not in (0, 1):
            return decline(f"DIRECT={direct!r}: 0 (outputs copied back) or 1 (written in place)")
        p = self._problem(graph, direct == 1)
        if isinstance(p, str):
            return decline(f"DIRECT={direct}: {p}")
        from ...registry import engines

        ids = {e.id: e for e in self._inner_engines(p.inner, target)}
        if eid not in ids:
            names = ", ".join(f"{e.name} ({e.id})" for e in ids.values()) or "none"
            known = {e.id for e in engines()}
            why = "is not an engine" if eid not in known else "does not take the problem"
            twin = "with its outputs in place" if direct == 1 else ""
            return decline(
                f"ENGINE={eid!r} {why}; the channels-last problem's engines{twin}: {names}"
            )
        e, cfg = self._split(config)
        return e.check_config(p.inner, cfg, target)

    def configs(self, graph, target) -> list:
        # the interpreter gains nothing from a transpose: on the CPU the transform offers
        # the heuristics nothing (create_execution_plan still builds one by its knobs)
        if not target.is_cuda:
            return []
        best = []
        for direct in (0, 1):
            p = self._usable(graph, direct == 1, target)
            if p is None:
                continue
            scored = []
            for e in self._inner_engines(p.inner, target):
                for c in e.configs(p.inner, target)[:INNER_CONFIGS_PER_ENGINE]:
                    flag = {"DIRECT": 1} if direct else {}
                    cfg = EngineConfig.make(self, ENGINE=e.id, **flag, **c.knob_dict)
                    scored.append((self.estimate_seconds(graph, cfg, target), len(scored), cfg))
            best.append(sorted(scored, key=lambda t: t[:2]))
        # the best few of each form (the direct form, estimated cheaper, must not crowd
        # out a copying plan: the inner engines' stores differ in speed by layout, which
        # the models do not see -- ResNet-50's 1x1 TF32 forward ran 36 us copying through
        # the explicit GEMM against 42 us direct through the gather path)
        merged = sorted((t for b in best for t in b[:CONFIGS]), key=lambda t: t[:2])
        return [t[2] for t in merged]

    def numerical_notes(self, graph, config) -> frozenset:
        e, cfg = self._split(config)
        return e.numerical_notes(self._twin(graph, config).inner, cfg)

    def _outer(self, config) -> str:
        """The transform's part of a family or key: the name, ``:direct`` for DIRECT=1."""
        return self.name + (":direct" if config.knob_dict.get("DIRECT", 0) == 1 else "")

    def family(self, config) -> str:
        e, cfg = self._split(config)
        return f"{self._outer(config)}/{e.family(cfg)}"

    def calibration_key(self, graph, config) -> str:
        """``family`` with the inner engine's calibration key (its qualifiers, e.g.
        ``:tf32``, seen on the transformed problem). The plan's model already holds the
        inner factor: this key's factor is what the copies and the strided epilogue add."""
        e, cfg = self._split(config)
        return f"{self._outer(config)}/{e.calibration_key(self._twin(graph, config).inner, cfg)}"

    def estimate_seconds(self, graph, config, target) -> float:
        e, cfg = self._split(config)
        p = self._twin(graph, config)
        moved = sum(graph.tensors[u].numel * graph.tensors[u].data_type.itemsize for u in p.moved)
        copies = 2 * moved / target.bandwidth + COPY_LAUNCH_S * len(p.moved)
        return e.ranked_seconds(p.inner, cfg, target) + copies

    def workspace_size(self, graph, config, target) -> int:
        p = self._twin(graph, config)
        if isinstance(p, str):
            return 0
        e, cfg = self._split(config)
        temps = sum(_align(graph.tensors[u].size_in_bytes) for u in p.moved)
        return temps + e.workspace_size(p.inner, cfg, target)

    def build(self, graph, config, target) -> Executable:
        e, cfg = self._split(config)
        p = self._twin(graph, config)
        return _ChannelsLastExecutable(graph, p, e.build(p.inner, cfg, target), target.is_cuda)


class ChannelsLastDgradEngine(ChannelsLastConvEngine):
    """Backward data of NCHW tensors by a channels-last engine between two copies."""

    id = 45
    name = "conv_dgrad_channels_last"
    kind = "conv_dgrad"


class ChannelsLastWgradEngine(ChannelsLastConvEngine):
    """Backward filter of NCHW tensors by a channels-last engine between two copies."""

    id = 46
    name = "conv_wgrad_channels_last"
    kind = "conv_wgrad"


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _transposer(desc, cl, to_cl: bool, is_cuda: bool):
    """A ``Launcher`` of the tiled transpose (args: src, dst, C, S) moving packed NCHW
    ``desc`` to (``to_cl``) or from its packed channels-last twin ``cl``, or None: another
    move, or fewer channels than ``K.MIN_CHANNELS`` (the generic strided copy takes those)."""
    if len(desc.dims) < 3 or cl.strides != channels_last_strides(desc.dims):
        return None
    if not _packed(desc) or desc.dims[1] < K.MIN_CHANNELS:
        return None
    int64 = desc.numel >= 2**31
    name = f"conv_layout_{'to_cl' if to_cl else 'to_nchw'}{'_i64' if int64 else ''}"
    kern = kernel_from_source(K.transpose_source(name, to_cl, int64), name)
    n, c, s = desc.dims[0], desc.dims[1], math.prod(desc.dims[2:])
    bc, bs, warps = K.tiles(desc.data_type.itemsize)
    launcher = Launcher(
        kern, (-(-s // bs), -(-c // bc), n), {"BLOCK_C": bc, "BLOCK_S": bs, "num_warps": warps}
    )
    if is_cuda:
        launcher.prepare_cuda([desc.torch_dtype, desc.torch_dtype, c, s])
    return launcher, c, s


class _ChannelsLastExecutable(Executable):
    """Copies the moved inputs into channels-last workspace buffers, runs the inner
    executable on them (and the untouched tensors), copies the moved outputs back. An
    NCHW image moves by the tiled transpose (``_kernels``), anything else (a filter made
    K-innermost, say) by a strided copy."""

    def __init__(self, graph, p: _Problem, inner: Executable, is_cuda: bool):
        self.inner, self.inner_graph = inner, p.inner
        outputs = graph.output_uid_set
        self.layout, off = [], 0
        for u in p.moved:
            desc, cl, out = graph.tensors[u], p.inner.tensors[u], u in outputs
            tr = _transposer(desc, cl, not out, is_cuda)
            self.layout.append((u, off, cl, desc, out, tr))
            off += _align(desc.size_in_bytes)
        self.temps = off
        self.workspace_size = off + inner.workspace_size

    def run(self, buffers: dict, workspace, stream=None) -> None:
        # the copies go on the plan's stream, ordered with the inner engine's launches
        if stream is not None:
            with torch.cuda.ExternalStream(stream):
                self._run(buffers, workspace, stream)
        else:
            self._run(buffers, workspace, stream)

    def _run(self, buffers: dict, workspace, stream) -> None:
        ws = as_tensor(workspace) if workspace is not None else None
        inner_buffers = dict(buffers)
        copy_out = []
        for uid, off, cl, desc, is_out, tr in self.layout:
            raw = ws[off : off + desc.size_in_bytes].view(desc.torch_dtype)
            tmp = raw.as_strided(cl.dims, cl.strides)
            user = logical_view(buffers[uid], desc)
            if is_out:
                copy_out.append((user, tmp, tr))
            elif tr is not None:
                tr[0].launch([user, raw, tr[1], tr[2]], stream)
            else:
                tmp.copy_(user)
            inner_buffers[uid] = tmp
        rest = ws[self.temps :] if ws is not None and self.inner.workspace_size else None
        self.inner.run(inner_buffers, rest, stream)
        for dst, tmp, tr in copy_out:
            if tr is not None:
                tr[0].launch([tmp, dst, tr[1], tr[2]], stream)
            else:
                dst.copy_(tmp)


__all__ = ["ChannelsLastConvEngine", "ChannelsLastDgradEngine", "ChannelsLastWgradEngine"]
