"""What every convolution engine needs before it picks an algorithm: the problem read off
an operation graph, and the fused pointwise code around the convolution.

``analyze(graph, kind)`` finds the one ``conv_fprop`` / ``conv_dgrad`` / ``conv_wgrad``
node, its operands, the pointwise prologue (fprop only: the previous layer's scale, bias
and activation applied to the image as it is loaded) and epilogue (bias, residual,
scale, activation, type conversion, batch-norm statistics), and the ``ConvGeometry`` every
kernel generator bakes in. It returns a reason string when the graph is not one
convolution an engine can take, so ``check_support`` can decline without compiling.

``epilogue`` and ``prologue_source`` turn the fused nodes into Triton source lines that
an engine's kernel splices in around its tile (see ``engines/fusion/epilogue.py``).
The algorithms themselves live one folder per family: ``implicit_gemm/``, ``split_k/``,
``tma/``, ``winograd/``, ``fft/``, ``gemm/``, ``direct/``.
"""

from __future__ import annotations

import dataclasses
import functools

from ... import backends
from ...enums import ConvolutionMode, DataType
from ..fusion import epilogue as fuse_epilogue

# a tensor spanning this many elements makes the kernels address in int64 (tests lower it
# to run the int64 code paths on small problems in the interpreter)
INT64_SPAN = 2**31


@dataclasses.dataclass(frozen=True)
class ConvGeometry:
    """Everything the kernel bakes in (element strides, sizes, padding...)."""

    n: int
    c_per_group: int
    k_per_group: int
    groups: int
    in_dims: tuple
    out_dims: tuple
    filt: tuple
    pre: tuple
    stride: tuple
    dilation: tuple
    flip: bool
    x_strides: tuple  # (n, c, spatial...)
    w_strides: tuple  # (k, c, spatial...)
    int64: bool


OPERAND_TYPES = {DataType.FLOAT, DataType.HALF, DataType.BFLOAT16}


@dataclasses.dataclass
class Prologue:
    """Pointwise nodes applied to the image before the convolution (e.g. the scale, bias
    and ReLU of the previous layer's batch norm): inputs are the image itself,
    per-channel tensors [1, C, 1, ...] and host scalars."""

    nodes: list
    out_uid: int  # the conv's X (virtual)
    image: int  # the real input tensor
    channel_inputs: list
    scalars: list


@dataclasses.dataclass
class ConvAnalysis:
    node: object
    x: object  # the image in memory (the prologue's input when there is one)
    w: object
    y: object
    ep: fuse_epilogue.Epilogue
    geo: ConvGeometry
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
                return (
                    f"prologue input '{d.label()}' is neither the image nor per-channel "
                    f"[1, C, 1, ...]"
                )
    if image is None:
        return "the prologue has no full-size image input"
    order = [n for n in graph.nodes if id(n) in inside]  # topological
    return Prologue(order, x_uid, image, chans, scalars)


# role names per direction: (image, filter, gradient-or-output, output role)
_ROLES = {
    "conv_fprop": ("X", "W", "Y", "Y"),
    "conv_dgrad": ("DX", "W", "DY", "DX"),
    "conv_wgrad": ("X", "DW", "DY", "DW"),
}


@functools.lru_cache(maxsize=512)  # graphs are frozen; support, cost and build share it
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
        return (
            f"operand types {sorted(t.name for t in types)}: one of float, half or "
            "bfloat16 for all operands"
        )
    out_uid = role[outr]
    ep = fuse_epilogue.collect(
        graph,
        cv,
        out_uid,
        skip=pro.nodes if pro else (),
        allow_stats=kind == "conv_fprop",
        allow_int32=types == {DataType.INT8},
    )
    if isinstance(ep, str):
        return ep
    groups = x.dims[1] // w.dims[1]
    big = any(graph.tensors[u].span >= INT64_SPAN for u in operands + ep.inputs + ep.outputs)
    geo = ConvGeometry(
        n=x.dims[0],
        c_per_group=w.dims[1],
        k_per_group=w.dims[0] // groups,
        groups=groups,
        in_dims=tuple(x.dims[2:]),
        out_dims=tuple(y.dims[2:]),
        filt=tuple(w.dims[2:]),
        pre=tuple(cv.pre_padding),
        stride=tuple(cv.stride),
        dilation=tuple(cv.dilation),
        flip=cv.convolution_mode == ConvolutionMode.CONVOLUTION,
        x_strides=tuple(x.strides),
        w_strides=tuple(w.strides),
        int64=big,
    )
    if prod(x.dims) == 0 or prod(y.dims) == 0 or prod(w.dims) == 0:
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
    w_t = dataclasses.replace(
        w, dims=(w.dims[1], w.dims[0]) + tuple(w.dims[2:]), strides=(ws[1], ws[0]) + tuple(ws[2:])
    )
    geo = dataclasses.replace(
        g,
        c_per_group=g.k_per_group,
        k_per_group=g.c_per_group,
        in_dims=g.out_dims,
        out_dims=g.in_dims,
        pre=tuple(f - 1 - p for f, p in zip(g.filt, g.pre)),
        flip=not g.flip,
        x_strides=tuple(a.y.strides),
        w_strides=tuple(w_t.strides),
    )
    return dataclasses.replace(a, x=a.y, w=w_t, y=a.x, geo=geo)


def prod(v) -> int:
    out = 1
    for a in v:
        out *= a
    return out


def tf32(a: ConvAnalysis) -> bool:
    return a.x.data_type == DataType.FLOAT and bool(backends.allow_tf32)


def peak_flops(a: ConvAnalysis, target, operand=None) -> float:
    """The tensor-core (or, for IEEE float32, CUDA-core) rate ``target`` offers the dots of
    ``a`` whose operand ``operand`` (default x) is loaded: the half-precision peak, half of
    it with TF32, the float32 peak without."""
    if (operand or a.x).data_type != DataType.FLOAT:
        return target.peak_flops_fp16
    return target.peak_flops_fp16 / 2 if tf32(a) else target.peak_flops_fp32


def epilogue(graph, a: ConvAnalysis, kind: str) -> tuple[list, str]:
    """Epilogue on the output tile. fprop / dgrad tiles are (pixels x channels) addressed
    by (nb, o_0.., g*per_group + offs_n); wgrad tiles are (filters x channels) of one tap
    (g*K/G + offs_m, offs_n, r_0..)."""
    d = len(a.geo.filt)

    def per_channel(u) -> bool:  # an input [1, K, 1, ...]: one row for every pixel
        dims = graph.tensors[u].dims
        return u not in a.ep.outputs and dims[0] == 1 and all(v == 1 for v in dims[2:])

    def off_pixels(u, per_group):
        st, dims = graph.tensors[u].strides, graph.tensors[u].dims
        col = f"(g * {per_group} + offs_n) * {st[1] if dims[1] != 1 else 0}"
        if per_channel(u):  # one row of BLOCK_N values, broadcast over pixels
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

        def load_mask(u):
            return "mask_n[None, :]" if per_channel(u) else "ep_mask"

    params, body = fuse_epilogue.source(graph, a.ep, off, load_mask=load_mask)
    if a.ep.stats:  # partial sums per pixel tile: WS[(stat, sum|sq), tile, channel]
        k_total = a.geo.k_per_group * a.geo.groups
        params = ["WS"] + params
        for j in range(len(a.ep.stats)):
            for w_, var in enumerate(("st_s", "st_q")):
                body += (
                    f"tl.store(WS + ({2 * j + w_} * num_pid_m + pid_m) * {k_total} + "
                    f"g * {a.geo.k_per_group} + offs_n, {var}{j}, mask=mask_n)\n"
                )
    return params, "ep_mask = mask_m[:, None] & mask_n[None, :]\n" + body


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
        return (
            f"tl.load(Q{u} + (g * {cgp} + cc) * {st}, mask=mask_c, other=0).to(tl.float32)[None, :]"
        )

    em = cg.Emitter(graph, "tl.float32", load, lambda axis, rank: "0", indent="")
    for n in pro.nodes:
        em.emit_node(n)
    body = (
        "\n".join(
            em.lines
            + [
                f"a = tl.where(valid[:, None] & mask_c[None, :], {em.var[pro.out_uid]}, 0.0)"
                f".to(a.dtype)"
            ]
        )
        + "\n"
    )
    params = [f"Q{u}" for u in pro.channel_inputs] + [f"s{u}" for u in pro.scalars]
    return params, body
