"""Implicit-GEMM convolution forward engine (Triton, tensor cores) with a fused epilogue.

Takes a graph of one ``conv_fprop`` followed by any pointwise epilogue on Y-shaped tensors
(bias [1, K, 1, 1], residual z, scale, activation, type conversion): the cuDNN
CONV -> BIAS -> ACTIVATION and SCALE_BIAS_ADD patterns, in one kernel. Any layout of x,
w and y (NCHW, NHWC, non-packed) is addressed through its strides; NHWC keeps the channel
reduction contiguous. See ``_kernels`` for the index mapping.
"""
from __future__ import annotations

import dataclasses
import functools

import torch

from ... import backends
from ...enums import BehaviorNote, ConvolutionMode, DataType, NumericalNote
from ...runtime.launch import DualKernel, LaunchList, kernel_from_source
from ..base import SUPPORTED, Engine, EngineConfig, Executable, Knob, Support, Target, decline
from ..fusion import epilogue as fuse_epilogue
from . import _kernels as K
from . import tma, tma_dgrad, tma_wgrad

OPERAND_TYPES = {DataType.FLOAT, DataType.HALF, DataType.BFLOAT16}


@dataclasses.dataclass
class Prologue:
    """Pointwise nodes applied to the image before the convolution (e.g. the scale, bias
    and ReLU of the previous layer's batch norm): inputs are the image itself,
    per-channel tensors [1, C, 1, ...] and host scalars."""
    nodes: list
    out_uid: int          # the conv's X (virtual)
    image: int            # the real input tensor
    channel_inputs: list
    scalars: list


@dataclasses.dataclass
class ConvAnalysis:
    node: object
    x: object             # the image in memory (the prologue's input when there is one)
    w: object
    y: object
    ep: fuse_epilogue.Epilogue
    geo: K.ConvGeometry
    prologue: Prologue | None = None


def _prologue(graph, cv) -> Prologue | str | None:
    x_uid = cv.inputs["X"]
    if x_uid not in graph.producers:
        return None
    xd = graph.tensors[x_uid]
    nodes, frontier, seen = [], [x_uid], set()
    while frontier:
        u = frontier.pop()
        n = graph.producers.get(u)
        if n is None or id(n) in seen:
            continue
        if n.kind != "pointwise":
            return f"{n.label()} before the convolution is not a pointwise prologue"
        seen.add(id(n))
        nodes.append(n)
        frontier.extend(n.inputs.values())
    image, chans, scalars = None, [], []
    inside = {id(n) for n in nodes}
    for n in nodes:
        out = graph.tensors[n.outputs["OUT_0"]]
        if out.uid != x_uid and any(id(c) not in inside for c in graph.consumers.get(out.uid, [])):
            return f"prologue tensor '{out.label()}' is also used outside the prologue"
        if not out.is_virtual:
            return f"prologue tensor '{out.label()}' is an output; the fused kernel never writes it"
        for u in n.inputs.values():
            if u in graph.producers:
                continue
            d = graph.tensors[u]
            if d.is_pass_by_value:
                scalars.append(u) if u not in scalars else None
            elif d.dims == xd.dims:
                if image not in (None, u):
                    return "the prologue reads two full-size tensors; one image is supported"
                image = u
            elif list(d.dims) == [1, xd.dims[1]] + [1] * (len(xd.dims) - 2):
                chans.append(u) if u not in chans else None
            else:
                return (f"prologue input '{d.label()}' is neither the image nor per-channel "
                        f"[1, C, 1, ...]")
    if image is None:
        return "the prologue has no full-size image input"
    order = [n for n in graph.nodes if id(n) in inside]     # topological
    return Prologue(order, x_uid, image, chans, scalars)


# role names per direction: (image, filter, gradient-or-output, output role)
_ROLES = {"conv_fprop": ("X", "W", "Y", "Y"), "conv_dgrad": ("DX", "W", "DY", "DX"),
          "conv_wgrad": ("X", "DW", "DY", "DW")}


@functools.lru_cache(maxsize=512)   # graphs are frozen; support, cost and build share it
def analyze(graph, kind: str = "conv_fprop") -> ConvAnalysis | str:
    convs = [n for n in graph.nodes if n.kind == kind]
    if len(convs) != 1:
        return f"needs exactly one {kind} node, found {len(convs)}"
    cv = convs[0]
    xr, wr, yr, outr = _ROLES[kind]
    role = {**cv.inputs, **cv.outputs}
    x, w, y = (graph.tensors[role[r]] for r in (xr, wr, yr))
    pro = _prologue(graph, cv) if kind == "conv_fprop" else None
    if isinstance(pro, str):
        return pro
    if pro is not None:
        x = graph.tensors[pro.image]
    operands = [pro.image if (pro and r == "X") else u for r, u in cv.inputs.items()]
    if any(u in graph.producers for u in operands):
        return f"{kind} operands must be graph inputs (only fprop fuses a pointwise prologue)"
    if any(graph.tensors[u].is_pass_by_value for u in operands):
        return f"{kind} operands passed by value (host scalars) are not tiles in memory"
    types = {graph.tensors[u].data_type for u in operands}
    if types == {DataType.INT8} and kind == "conv_fprop":
        if pro is not None:
            return "int8 convolution takes no prologue"
    elif len(types) != 1 or not types <= OPERAND_TYPES:
        return (f"operand types {sorted(t.name for t in types)}: one of float, half or "
                "bfloat16 for all operands")
    out_uid = role[outr]
    ep = fuse_epilogue.collect(graph, cv, out_uid, skip=pro.nodes if pro else (),
                               allow_stats=kind == "conv_fprop")
    if isinstance(ep, str):
        return ep
    groups = x.dims[1] // w.dims[1]
    big = any(graph.tensors[u].span >= 2 ** 31 for u in operands + ep.inputs + ep.outputs)
    geo = K.ConvGeometry(
        n=x.dims[0], c_per_group=w.dims[1], k_per_group=w.dims[0] // groups, groups=groups,
        in_dims=tuple(x.dims[2:]), out_dims=tuple(y.dims[2:]), filt=tuple(w.dims[2:]),
        pre=tuple(cv.pre_padding), stride=tuple(cv.stride), dilation=tuple(cv.dilation),
        flip=cv.convolution_mode == ConvolutionMode.CONVOLUTION,
        x_strides=tuple(x.strides), w_strides=tuple(w.strides), int64=big)
    if _prod(x.dims) == 0 or _prod(y.dims) == 0 or _prod(w.dims) == 0:
        return "empty convolution (a zero-size dimension): nothing for a kernel to do"
    if groups > 65535:
        return f"{groups} groups exceed the grid's 65535 limit"
    return ConvAnalysis(cv, x, w, y, ep, geo, pro)


def dgrad_as_forward(a: ConvAnalysis) -> ConvAnalysis:
    """The forward view of the 2-D dgrad ``a`` (stride 1, dilation 1, one group): image dy
    [N, K, Ho, Wo], filter w as [C, K, R, S] (a strided view, same buffer), output dx
    [N, C, H, W] with the dgrad's epilogue, pre padding R - 1 - pre (possibly negative),
    mode toggled."""
    g, w = a.geo, a.w
    ws = w.strides
    w_t = dataclasses.replace(w, dims=(w.dims[1], w.dims[0]) + tuple(w.dims[2:]),
                              strides=(ws[1], ws[0]) + tuple(ws[2:]))
    geo = dataclasses.replace(
        g, c_per_group=g.k_per_group, k_per_group=g.c_per_group, in_dims=g.out_dims,
        out_dims=g.in_dims, pre=tuple(f - 1 - p for f, p in zip(g.filt, g.pre)),
        flip=not g.flip, x_strides=tuple(a.y.strides), w_strides=tuple(w_t.strides))
    return dataclasses.replace(a, x=a.y, w=w_t, y=a.x, geo=geo)


def _prod(v) -> int:
    out = 1
    for a in v:
        out *= a
    return out


def _tf32(a: ConvAnalysis) -> bool:
    return a.x.data_type == DataType.FLOAT and bool(backends.allow_tf32)


class ImplicitGemmEngine(Engine):
    """CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM: gather-on-the-fly GEMM, fused epilogue."""
    id = 3
    name = "conv_implicit_gemm"
    kind = "conv_fprop"
    behavior_notes = frozenset({BehaviorNote.RUNTIME_COMPILATION})
    tma_path = tma.FPROP    # configs naming TMA_* knobs take this NHWC fast path

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
        if a.x.data_type != DataType.FLOAT or _tf32(a):
            notes.add(NumericalNote.TENSOR_CORE)
        if _tf32(a):
            notes.add(NumericalNote.DOWN_CONVERT_INPUTS)
        return frozenset(notes)

    def knob_space(self, graph=None) -> list[Knob]:
        space = K.knob_space()
        values = {f.name: ({getattr(k, f.name) for k in space} | {f.default}, f.default)
                  for f in dataclasses.fields(K.ConvKnobs)}
        if self.tma_path is not None:
            for name, vals in self.tma_path.knob_values().items():
                old = values.get(name, (set(), vals[0]))
                values[name] = (old[0] | set(vals), old[1])
        return [Knob(n, tuple(sorted(v)), d) for n, (v, d) in values.items()]

    def family(self, config) -> str:
        kd, path = config.knob_dict, self.tma_path
        if path is None or not path.is_tma(kd):
            return f"{self.name}:gather"
        # a split forward or dgrad reduction is its own family: the cost model does not see the
        # L2 traffic it saves, so its best config is timed alongside (wgrad splits always)
        split = self.kind != "conv_wgrad" and kd.get("SPLIT", 1) > 1
        return f"{self.name}:tma" + (":flat" if kd.get("FLAT") else "") + \
            (":split" if split else "")

    def complete_knobs(self, graph, knobs: dict) -> dict:
        """Defaults of the path the knobs choose: the TMA path's when any TMA_* is given."""
        path = self.tma_path
        if path is not None and path.is_tma(knobs):
            return {**path.knob_items(path.knob_class()), **knobs}
        gather = {f.name for f in dataclasses.fields(K.ConvKnobs)}
        return {**{k.name: k.default for k in self.knob_space(graph) if k.name in gather},
                **knobs}

    def configs(self, graph, target: Target) -> list[EngineConfig]:
        a = self._analyze(graph)
        if isinstance(a, str):
            return []
        cands = K.knob_space() if target.is_cuda else [
            K.ConvKnobs(32, 32, 32 if a.x.data_type == DataType.INT8 else 16, 4, 2)]
        if target.is_cuda and a.x.data_type == DataType.FLOAT and not _tf32(a):
            # IEEE float32 dots run on the CUDA cores: a 128x128 float32 tile spills (the
            # FFT helper measured 8.5 ms against a 0.18 ms estimate on a ResNet 3x3 layer)
            cands = [k for k in cands if k.BLOCK_M * k.BLOCK_N <= 64 * 64 and k.BLOCK_K <= 32] \
                or [K.ConvKnobs(64, 64, 16, 4, 2)]
        out = [EngineConfig.make(self, **dataclasses.asdict(k)) for k in cands
               if self._fits(a, k, target)]
        path = self.tma_path
        if path is not None and target.is_cuda and target.capability >= (9, 0) and \
                path.unsupported(a) is None:
            out += [EngineConfig.make(self, **path.knob_items(k))
                    for k in path.knobs(a, target)]
        est = {c: self.estimate_seconds(graph, c, target) for c in out}
        out.sort(key=est.get)
        if path is not None:   # each path's best first: a short list (heuristics keep an
            firsts = []        # engine's top few) must not lose a path to the cost model
            for fam in dict.fromkeys(self.family(c) for c in out):
                firsts += [c for c in out if self.family(c) == fam][:1]
            firsts.sort(key=est.get)
            out = firsts + [c for c in out if c not in firsts]
        return out

    def _fits(self, a, kn, target) -> bool:
        if a.x.data_type == DataType.INT8 and kn.BLOCK_K < 32:
            return False            # int8 tensor-core dots need K steps of 32 or more
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
                return decline(f"{', '.join(foreign)} belong(s) to the gather path; the TMA "
                               f"path's knobs are {', '.join(path.knob_names())}")
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
        return 4 * 2 * len(a.ep.stats) * _stat_tiles(a, K.ConvKnobs(**config.knob_dict)) * \
            a.geo.k_per_group * a.geo.groups

    def estimate_seconds(self, graph, config, target) -> float:
        a = self._analyze(graph)
        peak = target.peak_flops_fp16 if a.x.data_type != DataType.FLOAT else (
            target.peak_flops_fp16 / 2 if _tf32(a) else target.peak_flops_fp32)
        kd, path = config.knob_dict, self.tma_path
        if path is not None and path.is_tma(kd):
            return path.estimate_seconds(a, path.knob_class(**kd), peak, target)
        return K.estimate_seconds(a.geo, K.ConvKnobs(**kd),
                                  a.x.data_type.itemsize, peak, target.bandwidth, target.num_sms)

    def build(self, graph, config, target) -> Executable:
        a, kd, path = self._analyze(graph), config.knob_dict, self.tma_path
        if path is not None and path.is_tma(kd):
            params, body = epilogue(graph, a, self.kind)
            return path.build(graph, a, path.knob_class(**kd), target, params, body)
        return _ConvExecutable(graph, a, K.ConvKnobs(**kd), target, self.kind)


class ImplicitGemmDgradEngine(ImplicitGemmEngine):
    """CUDNN_CONVOLUTION_BWD_DATA_ALGO_1-style implicit GEMM over dx pixels (deterministic)."""
    id = 4
    name = "conv_dgrad_implicit_gemm"
    kind = "conv_dgrad"
    tma_path = tma_dgrad.DGRAD

    def estimate_seconds(self, graph, config, target) -> float:
        """The gather path as the GEMM it runs: M = dx pixels, N = C, reduction = taps x
        K -- every tap is walked for every pixel, so at stride s only 1/s^d of the work
        is useful (the forward's model would count dy pixels and reduce over C)."""
        kd = config.knob_dict
        if self.tma_path is not None and self.tma_path.is_tma(kd):
            return super().estimate_seconds(graph, config, target)
        a = self._analyze(graph)
        geo = dataclasses.replace(a.geo, out_dims=a.geo.in_dims, in_dims=a.geo.out_dims,
                                  c_per_group=a.geo.k_per_group, k_per_group=a.geo.c_per_group)
        peak = target.peak_flops_fp16 if a.y.data_type != DataType.FLOAT else (
            target.peak_flops_fp16 / 2 if _tf32(a) else target.peak_flops_fp32)
        return K.estimate_seconds(geo, K.ConvKnobs(**kd), a.y.data_type.itemsize, peak,
                                  target.bandwidth, target.num_sms)


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
        t = super().estimate_seconds(graph, config, target)
        if self.tma_path is not None and self.tma_path.is_tma(config.knob_dict):
            return t
        return t * self.GATHER_SLOWDOWN


def epilogue(graph, a: ConvAnalysis, kind: str) -> tuple[list, str]:
    """Epilogue on the output tile. fprop / dgrad tiles are (pixels x channels) addressed
    by (nb, o_0.., g*per_group + offs_n); wgrad tiles are (filters x channels) of one tap
    (g*K/G + offs_m, offs_n, r_0..)."""
    d = len(a.geo.filt)

    def per_channel(u) -> bool:      # an input [1, K, 1, ...]: one row for every pixel
        dims = graph.tensors[u].dims
        return u not in a.ep.outputs and dims[0] == 1 and all(v == 1 for v in dims[2:])

    def off_pixels(u, per_group):
        st, dims = graph.tensors[u].strides, graph.tensors[u].dims
        col = f"(g * {per_group} + offs_n) * {st[1] if dims[1] != 1 else 0}"
        if per_channel(u):              # one row of BLOCK_N values, broadcast over pixels
            return f"({col})[None, :]"
        rows = [f"nb * {st[0] if dims[0] != 1 else 0}"]
        rows += [f"o{i} * {st[2 + i]}" for i in range(d) if dims[2 + i] != 1]
        return f"(({' + '.join(rows)})[:, None] + ({col})[None, :])"

    def off_filter(u):
        st, dims = graph.tensors[u].strides, graph.tensors[u].dims
        row = f"(g * {a.geo.k_per_group} + offs_m) * {st[0] if dims[0] != 1 else 0}"
        # in CONVOLUTION mode tap r of the image window is filter position filt - 1 - r
        tap = [f"({a.geo.filt[i] - 1} - r{i})" if a.geo.flip else f"r{i}" for i in range(d)]
        taps = " + ".join(f"{tap[i]} * {st[2 + i]}" for i in range(d) if dims[2 + i] != 1) or "0"
        return f"(({row})[:, None] + (offs_n * {st[1] if dims[1] != 1 else 0})[None, :] + {taps})"

    load_mask = None
    if kind == "conv_wgrad":
        off = off_filter
    else:
        per = a.geo.k_per_group if kind == "conv_fprop" else a.geo.c_per_group
        off = functools.partial(off_pixels, per_group=per)
        load_mask = (lambda u: "mask_n[None, :]" if per_channel(u) else "ep_mask")
    params, body = fuse_epilogue.source(graph, a.ep, off, load_mask=load_mask)
    if a.ep.stats:   # partial sums per pixel tile: WS[(stat, sum|sq), tile, channel]
        k_total = a.geo.k_per_group * a.geo.groups
        params = ["WS"] + params
        for j in range(len(a.ep.stats)):
            for w_, var in enumerate(("st_s", "st_q")):
                body += (f"tl.store(WS + ({2 * j + w_} * num_pid_m + pid_m) * {k_total} + "
                         f"g * {a.geo.k_per_group} + offs_n, {var}{j}, mask=mask_n)\n")
    return params, "ep_mask = mask_m[:, None] & mask_n[None, :]\n" + body


def _stat_tiles(a: ConvAnalysis, kn: K.ConvKnobs) -> int:
    return -(-a.geo.n * _prod(a.geo.out_dims) // kn.BLOCK_M)


def stats_finish_source(graph, a: ConvAnalysis, kn: K.ConvKnobs) -> tuple:
    """Sum the per-tile partials in a fixed order (deterministic) into SUM and SQ_SUM."""
    from ..fusion import _codegen as cg
    k_total = a.geo.k_per_group * a.geo.groups
    tiles = _stat_tiles(a, kn)
    name = f"conv_stats_{graph.key()[:12]}"
    outs = [u for _, s_, q in a.ep.stats for u in (s_, q)]
    lines = ["@triton.jit", f"def {name}(WS, {', '.join(f'O{u}' for u in outs)}, "
             "BLOCK: tl.constexpr):",
             "    ch = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)",
             f"    mask = ch < {k_total}"]
    for i, u in enumerate(outs):
        lines += ["    acc = tl.full([BLOCK], 0.0, tl.float32)",
                  f"    for t in range(0, {tiles}):",
                  f"        acc += tl.load(WS + ({i} * {tiles} + t) * {k_total} + ch, mask=mask, "
                  "other=0.0)",
                  "    " + cg.store_expr(f"O{u}", f"ch * {graph.tensors[u].strides[1]}", "acc",
                                         graph.tensors[u], "mask")]
    args = [("ws", torch.float32)] + [("buf", u) for u in outs]
    return "\n".join(lines) + "\n", name, (-(-k_total // 256),), {"BLOCK": 256,
                                                                   "num_warps": 4}, args


def prologue_source(graph, a: ConvAnalysis) -> tuple[list, str]:
    """(params, body) transforming the loaded image slab ``a`` ([BLOCK_M, BLOCK_K], channels
    ``cc`` of group ``g``) before the dot; padding stays zero after the transform."""
    from ..fusion import _codegen as cg
    pro, cgp = a.prologue, a.geo.c_per_group

    def load(u):
        if u == pro.image:
            return "a.to(tl.float32)"
        if u in pro.scalars:
            return f"s{u}"
        st = graph.tensors[u].strides[1]
        return (f"tl.load(Q{u} + (g * {cgp} + cc) * {st}, mask=mask_c, other=0)"
                f".to(tl.float32)[None, :]")
    em = cg.Emitter(graph, "tl.float32", load, lambda axis, rank: "0", indent="")
    for n in pro.nodes:
        em.emit_node(n)
    body = "\n".join(em.lines + [
        f"a = tl.where(valid[:, None] & mask_c[None, :], {em.var[pro.out_uid]}, 0.0)"
        f".to(a.dtype)"]) + "\n"
    params = [f"Q{u}" for u in pro.channel_inputs] + [f"s{u}" for u in pro.scalars]
    return params, body


class _ConvExecutable(Executable, LaunchList):
    def __init__(self, graph, a: ConvAnalysis, kn: K.ConvKnobs, target: Target, kind: str):
        LaunchList.__init__(self)
        self.workspace_size = 0
        params, body = epilogue(graph, a, kind)
        name = f"{kind}_{graph.key()[:12]}"
        kw = dict(epilogue_params=params, epilogue_body=body, allow_tf32=_tf32(a),
                  fp32_inputs=a.x.data_type == DataType.FLOAT)
        if a.x.data_type == DataType.INT8:
            kw["int8"] = True
        if kind == "conv_fprop":
            gen, grid, ins = K.fprop_source, K.grid(a.geo, kn), [a.x.uid, a.w.uid]
            if a.prologue is not None:
                pparams, kw["prologue_body"] = prologue_source(graph, a)
                kw["epilogue_params"] = pparams + params
        elif kind == "conv_dgrad":
            kw["dy_strides"] = a.y.strides
            gen, grid, ins = K.dgrad_source, K.dgrad_grid(a.geo, kn), [a.y.uid, a.w.uid]
        else:
            kw["dy_strides"] = a.y.strides
            gen, grid, ins = K.wgrad_source, K.wgrad_grid(a.geo, kn), [a.x.uid, a.y.uid]
        src_c = gen(name, a.geo, kn, interpret=False, **kw)
        src_i = gen(name, a.geo, kn, interpret=True, **kw)
        kern = DualKernel(kernel_from_source(src_c, name).compiled,
                          kernel_from_source(src_i, name).interpreted)
        self.source = src_c
        pro_args = [("buf", u) for u in a.prologue.channel_inputs + a.prologue.scalars] \
            if (kind == "conv_fprop" and a.prologue) else []
        ws_arg = [("ws", torch.float32)] if a.ep.stats else []
        args = [("buf", u) for u in ins] + pro_args + ws_arg + fuse_epilogue.launch_args(a.ep)
        const = {"BLOCK_M": kn.BLOCK_M, "BLOCK_N": kn.BLOCK_N, "BLOCK_K": kn.BLOCK_K,
                 "num_warps": kn.num_warps, "num_stages": kn.num_stages}
        self.add_launch(kern, grid, const, args, graph, target.is_cuda)
        if a.ep.stats:
            fsrc, fname, fgrid, fconst, fargs = stats_finish_source(graph, a, kn)
            self.add_launch(kernel_from_source(fsrc, fname), fgrid, fconst, fargs, graph,
                            target.is_cuda)
            self.workspace_size = 4 * 2 * len(a.ep.stats) * _stat_tiles(a, kn) * \
                a.geo.k_per_group * a.geo.groups

    def run(self, buffers, workspace, stream=None):
        self.run_launches(buffers, workspace, stream)


__all__ = ["ImplicitGemmEngine", "ImplicitGemmDgradEngine", "ImplicitGemmWgradEngine", "analyze"]
