"""Source generation for the runtime-fusion engine: the pointwise kernel, the reduction
kernel (kept x reduced tiles, optional split with partials in the workspace) and the
split's finishing kernel. See ``_codegen`` for the shared pieces and the layout math."""

from __future__ import annotations

import math

import torch

from . import _codegen as cg


def inner_is_reduced(graph, a) -> bool:
    """Whether the reduced axes are the memory-contiguous ones (row-style reduction)."""
    d = graph.tensors[a.reductions[0].in_uid]
    src = (
        d
        if not d.is_virtual
        else next(
            (graph.tensors[u] for u in a.inputs if graph.tensors[u].dims == tuple(a.space)), d
        )
    )
    order = sorted(
        range(len(a.space)), key=lambda i: (src.strides[i] if i < len(src.strides) else 0, i)
    )
    for i in order:
        if a.space[i] != 1:
            return a.kept[i] == 1
    return True


def generate(graph, a, knobs: dict):
    """(source, name, args, grid, constexprs, finish) for the fused kernel. The source
    depends on the graph's class only; its sizes and strides are in ``args``."""
    rank = len(a.space)
    tensors = [u for u in a.inputs if not graph.tensors[u].is_pass_by_value] + a.outputs
    red_outs = [r.out_uid for r in a.reductions]
    strides = {
        u: cg.padded_strides(graph.tensors[u], rank)
        for u in tensors
        if u in a.direct or u in a.outputs
    }
    for y, parts in a.views.items():
        ydims = graph.tensors[y].dims
        for i, part in enumerate(parts):
            if part.flat_dims is None:
                strides[(y, i)] = [0 if d == 1 else st for d, st in zip(ydims, part.strides)]
    if a.reductions:
        classes = [
            "kept" if a.kept[i] == a.space[i] and a.space[i] != 1 else "red" for i in range(rank)
        ]
        for u in red_outs:
            st = cg.padded_strides(graph.tensors[u], rank)
            strides[u] = [s if c == "kept" else 0 for s, c in zip(st, classes)]
    else:
        classes = ["kept"] * rank
    perm = _memory_order(graph, a, rank, strides)
    pinned = {k for k, axis in enumerate(perm) if axis in a.pinned}
    sizes, cstrides, cclasses, origin = cg.collapse(
        [a.space[i] for i in perm],
        {u: [st[i] for i in perm] for u, st in strides.items()},
        [classes[i] for i in perm],
        pinned,
    )
    origin = [[perm[k] for k in dims] for dims in origin]
    numel = math.prod(a.space)
    big = any(graph.tensors[u].span >= 2**31 for u in tensors) or numel >= 2**31
    ptrs = {u: f"P{u}" for u in tensors + red_outs}
    scalars = [u for u in a.inputs if graph.tensors[u].is_pass_by_value]
    ct = a.compute
    # scalars enter the float compute as floats (the interpreter makes a Python int an
    # int32 and cannot pass a bool at all); a float64 compute annotates them, or the
    # compiled kernel would take them as float32 (a Python float's default) and round them
    note = ": tl.float64" if ct == "tl.float64" else ""
    sig = [ptrs[u] for u in tensors + red_outs] + [f"s{u}{note}" for u in scalars]
    args = [("buf", u) for u in tensors + red_outs] + [("float", u) for u in scalars]
    if not a.reductions:
        return _pointwise_source(
            graph, a, sizes, cstrides, origin, big, sig, args, ptrs, scalars, ct, knobs
        )
    return _reduce_source(
        graph, a, sizes, cstrides, cclasses, origin, big, sig, args, ptrs, scalars, ct, knobs
    )


def _key(k) -> str:
    """A stride key (a tensor uid, or (layout output, part)) as part of a parameter name."""
    return f"{k[0]}v{k[1]}" if isinstance(k, tuple) else str(k)


def _memory_order(graph, a, rank: int, strides: dict) -> list:
    """The iteration order of a pointwise kernel's flat index: the first output's axes
    from its largest stride to its smallest, so that consecutive lanes store to
    consecutive addresses whatever the layout (an NHWC output iterates C fastest). Reduction
    kernels and views (whose flat index must be row-major) keep the logical order."""
    if a.reductions or a.views or not a.outputs:
        return list(range(rank))
    st = strides[a.outputs[0]]
    return sorted(range(rank), key=lambda i: (-st[i], i))


def _decompose(
    sz, var: str, sizes: list, prefix: str, letter: str, indent: str, contiguous: bool
) -> list:
    """``cg.index_decomposition`` over runtime sizes (``{letter}{k}``); the innermost one
    marked for alignment when memory is ``contiguous`` along it."""
    last = len(sizes) - 1
    names = ["0"] + [
        sz(f"{letter}{k}", d, align=contiguous and k == last) for k, d in enumerate(sizes) if k > 0
    ]
    return cg.index_decomposition(var, names, prefix, indent)


def _def(name: str, params: list, sz, indent: str) -> list:
    """The kernel's first lines: decorator, signature, then ``sz``'s prologue."""
    return ["@triton.jit", f"def {name}({', '.join(params)}):"] + sz.prologue(indent)


def _pointwise_source(graph, a, sizes, strides, origin, big, sig, args, ptrs, scalars, ct, knobs):
    rank = len(a.space)
    numel = math.prod(sizes) if sizes else 1
    block = knobs["BLOCK"]
    ind = "    "
    sz = cg.Sizes(big)
    dims = sizes or [1]
    lines = [
        f"{ind}pid = tl.program_id(0)" + (".to(tl.int64)" if big else ""),
        f"{ind}idx = pid * BLOCK + tl.arange(0, BLOCK)",
        f"{ind}mask = idx < {sz('N', numel, align=True)}",
    ]
    # the last merged dim is the first output's contiguous one (see _memory_order)
    lines += _decompose(sz, "idx", dims, "i", "D", ind, True)
    names = [f"i{k}" for k in range(len(dims))]
    last = len(dims) - 1
    offs = {
        u: cg.offset_expr(
            names, [sz(f"S{_key(u)}_{k}", s, align=k != last) for k, s in enumerate(st)], "idx * 0"
        )
        for u, st in strides.items()
    }

    def index_of(axis, out_rank):
        s_axis = axis + rank - out_rank
        for k, dims_k in enumerate(origin):
            if dims_k == [s_axis]:
                return names[k]
        return "idx * 0"

    def load(uid):
        if uid in scalars:
            return f"(s{uid} + tl.full([1], 0, {ct}))"
        if uid in a.views and a.views[uid][0].flat_dims is not None:
            part = a.views[uid][0]  # Y spans S, so idx is Y's row-major flat index
            return cg.load_expr(
                ptrs[part.src], f"({_flat_offset(sz, 'idx', uid, part)})", "mask", ct
            )
        if uid in a.views:
            return _view_load(
                graph, a, uid, ptrs, lambda key: f"({offs[key]})", "mask", ct, index_of, sz
            )
        return cg.load_expr(ptrs[uid], f"({offs[uid]})", "mask", ct)

    em = cg.Emitter(graph, ct, load, index_of, ind)
    for n in a.pointwise:
        em.emit_node(n)
    for u in a.outputs:
        em.lines.append(
            ind + cg.store_expr(ptrs[u], f"({offs[u]})", em.value(u), graph.tensors[u], "mask")
        )
    base = "fused_pointwise"
    src = (
        "\n".join(
            _def(base, sig + sz.params() + ["BLOCK: tl.constexpr"], sz, ind) + lines + em.lines
        )
        + "\n"
    )
    src, name = cg.name_by_digest(src, base)
    grid = (-(-numel // block) if math.prod(a.space) else 0,)
    return (
        src,
        name,
        args + sz.args(),
        grid,
        {"BLOCK": block, "num_warps": knobs["num_warps"]},
        None,
    )


def _reduce_source(
    graph, a, sizes, strides, classes, origin, big, sig, args, ptrs, scalars, ct, knobs
):
    rank = len(a.space)
    kdims = [k for k, c in enumerate(classes) if c == "kept"]
    rdims = [k for k, c in enumerate(classes) if c == "red"]
    kept_n = math.prod(sizes[k] for k in kdims) if kdims else 1
    red_n = math.prod(sizes[k] for k in rdims) if rdims else 1
    if math.prod(a.space) == 0:
        red_n = 0 if kept_n else red_n
    BK, BR, split = knobs["BLOCK_KEPT"], knobs["BLOCK_RED"], knobs["SPLIT"]
    # Tile orientation: the memory-contiguous axis goes last, where Triton's layouts
    # vectorize. KA/RA are the broadcast suffixes that place kept and reduced indices.
    kept_last = not inner_is_reduced(graph, a)
    KA, RA = ("[None, :]", "[:, None]") if kept_last else ("[:, None]", "[None, :]")
    tile = "[BLOCK_RED, BLOCK_KEPT]" if kept_last else "[BLOCK_KEPT, BLOCK_RED]"
    red_axis = 0 if kept_last else 1
    ind, ind2 = "    ", "        "
    sz = cg.Sizes(big)
    # the bound along the tile's contiguous axis decides its loads' alignment (Sizes)
    kept_e = sz("KEPT_N", kept_n, align=kept_last or split > 1)
    red_e = sz("RED_N", red_n, align=not kept_last)
    if split > 1:
        sig = sig + ["WS"]
        args = args + [("ws", _ws_dtype(ct))]
    # Column tiles over one reduced dim step by a runtime row stride: their offsets from
    # the tile's first row are the same every step, so they are computed once before the
    # loop (int32), and a step adds its first row's offset (an int64 scalar) to the pointer.
    # Recomputed per step, the row offsets took the registers and instructions a literal
    # stride does not need (4104^2 fp32 column sum, L2-resident: 49 us against 26 us;
    # hoisted: 26). Other column tiles index in int64 even when int32 would do: with int32
    # offsets ptxas interleaves the tile's loads with the adds (two 16-byte loads in flight
    # per thread, not eight) and an [8 x 2048] bf16 column sum read at 0.65 of copy instead
    # of 0.81 (H100; docs/design/fusion.md). Row tiles keep int32: int64 took the bf16 row
    # sum from 0.89 to 0.84.
    hoist = kept_last and len(rdims) == 1 and not big
    itype = ".to(tl.int64)" if big or (kept_last and not hoist) else ""
    lines = [
        f"{ind}pid = tl.program_id(0){itype}",
        f"{ind}pid_s = tl.program_id(1){itype}",
        f"{ind}kept = pid * BLOCK_KEPT + tl.arange(0, BLOCK_KEPT)",
        f"{ind}mask_k = kept < {kept_e}",
    ]
    ksizes = [sizes[k] for k in kdims] or [1]
    rsizes = [sizes[k] for k in rdims] or [1]
    lines += _decompose(sz, "kept", ksizes, "k", "K", ind, kept_last)
    knames = [f"k{j}" for j in range(len(ksizes))]
    rnames = [f"r{j}" for j in range(len(rsizes))]
    koff = _kept_offsets(sz, strides, kdims, knames)
    roff = {
        u: cg.offset_expr(rnames, [sz(f"S{_key(u)}_{k}", st[k], align=True) for k in rdims] or [0])
        for u, st in strides.items()
    }
    row_stride = {}
    if hoist:
        for u, st in strides.items():
            if u in {r.out_uid for r in a.reductions}:
                continue
            row_stride[u] = sz(f"S{_key(u)}_{rdims[0]}", st[rdims[0]], align=True)
            lines.append(
                f"{ind}T{_key(u)} = (tl.arange(0, BLOCK_RED) * {row_stride[u]}){RA} + "
                f"({koff[u]}){KA}"
            )
    for r in a.reductions:
        lines.append(f"{ind}acc{r.out_uid} = tl.full({tile}, {cg._lit(r.ident)}, {ct})")
    # Slice s takes the reduced blocks s, s + SPLIT, s + 2 SPLIT, ...: every program walks
    # the same band of the input at once (bf16 column sums read 2-4% faster so than with
    # one contiguous range per slice; docs/design/fusion.md).
    # A reduced extent within one block (the usual row: BLOCK_RED is its power of two) is
    # one step of constant bounds, which the compiler unrolls: with the extent as the
    # bound, a loop stays (bf16 row sums of 128 and 4104: +15% and +6% time).
    if split > 1:
        lines.append(f"{ind}for start in range(pid_s * BLOCK_RED, {red_e}, SPLIT * BLOCK_RED):")
    elif 0 < red_n <= BR:
        lines.append(f"{ind}for start in range(0, BLOCK_RED, BLOCK_RED):")
    else:
        lines.append(f"{ind}for start in range(0, {red_e}, BLOCK_RED):")
    lines.append(f"{ind2}rr = start + tl.arange(0, BLOCK_RED)")
    if hoist:
        # (+ 0 * pid_s: the interpreter's loop index is a Python int, without .to)
        lines.append(f"{ind2}row = (start + 0 * pid_s).to(tl.int64)")
    # Tiles that provably stay inside (sizes divisible by the blocks) need no masks at
    # all: fewer instructions per element on the hot loop.
    full_k = kept_n % BK == 0
    full_r = red_n % BR == 0
    mask = None if (full_k and full_r) else "mask"
    kmask = None if full_k else "mask_k"
    if mask:  # only the bounds a tile can cross (broadcast by the loads)
        parts = ([] if full_k else [f"mask_k{KA}"]) + ([] if full_r else [f"(rr < {red_e}){RA}"])
        lines.append(f"{ind2}mask = {' & '.join(parts)}")
    lines += _decompose(sz, "rr", rsizes, "r", "R", ind2, not kept_last)

    def off(u):
        if hoist:  # no parentheses: the pointer takes the scalar, then the int32 tile
            return f"T{_key(u)}" if row_stride[u] == "0" else f"row * {row_stride[u]} + T{_key(u)}"
        k = f"({koff[u]}){KA}"
        r = f"({roff[u]}){RA}" if roff[u] != "0" else f"(rr * 0){RA}"
        return f"({k} + {r})"

    def index_of(axis, out_rank):
        s_axis = axis + rank - out_rank
        for k, dims in enumerate(origin):
            if dims == [s_axis]:
                if k in kdims:
                    return f"({knames[kdims.index(k)]}{KA} + 0 * rr{RA})"
                return f"(0 * kept{KA} + {rnames[rdims.index(k)]}{RA})"
        return f"(0 * kept{KA} + 0 * rr{RA})"

    def load(uid):
        if uid in scalars:
            return f"(s{uid} + tl.full([1], 0, {ct}))"
        if uid in a.views:
            return _view_load(graph, a, uid, ptrs, off, mask, ct, index_of, sz, stream=True)
        return cg.load_expr(ptrs[uid], off(uid), mask, ct, stream=True)

    em = cg.Emitter(graph, ct, load, index_of, ind2)
    for n in a.pointwise:
        em.emit_node(n)
    for u in a.outputs:
        em.lines.append(ind2 + cg.store_expr(ptrs[u], off(u), em.value(u), graph.tensors[u], mask))
    for r in a.reductions:
        x = em.value(r.in_uid)
        pre = cg.PRE[r.pre].format(x=x)
        em.lines.append(
            f"{ind2}x{r.out_uid} = tl.where(mask, {pre}, {cg._lit(r.ident)})"
            if mask
            else f"{ind2}x{r.out_uid} = {pre}"
        )
        em.lines.append(
            f"{ind2}acc{r.out_uid} = "
            + cg.COMBINE[r.combine].format(a=f"acc{r.out_uid}", b=f"x{r.out_uid}")
        )
    lines += em.lines
    fin_lines = []
    for j, r in enumerate(a.reductions):
        fin_lines.append(
            f"{ind}res{r.out_uid} = " + cg.FOLD[r.combine].format(x=f"acc{r.out_uid}", ax=red_axis)
        )
        if split == 1:
            val = _post(r, f"res{r.out_uid}", red_e)
            fin_lines.append(
                ind
                + cg.store_expr(
                    ptrs[r.out_uid], f"({koff[r.out_uid]})", val, graph.tensors[r.out_uid], kmask
                )
            )
        else:
            fin_lines.append(
                f"{ind}tl.store(WS + ({j} * SPLIT + pid_s) * {kept_e} + kept, "
                f"res{r.out_uid}" + (", mask=mask_k)" if kmask else ")")
            )
    base = "fused_reduce"
    params = (
        sig
        + sz.params()
        + ["BLOCK_KEPT: tl.constexpr", "BLOCK_RED: tl.constexpr"]
        + (["SPLIT: tl.constexpr"] if split > 1 else [])
    )
    src = "\n".join(_def(base, params, sz, ind) + lines + fin_lines) + "\n"
    src, name = cg.name_by_digest(cg.COMBINE_HELPERS + "\n\n" + src, base)
    grid = (-(-kept_n // BK) if kept_n and math.prod(a.kept) else 0, split)
    constexprs = {
        "BLOCK_KEPT": BK,
        "BLOCK_RED": BR,
        "num_warps": knobs["num_warps"],
        "num_stages": knobs.get("num_stages", 3),
    }
    extra = None
    if split > 1:
        constexprs["SPLIT"] = split
        extra = _finish_source(
            graph, a, kept_n, ksizes, kdims, strides, ptrs, split, red_n, kept_last, big
        )
    return src, name, args + sz.args(), grid, constexprs, extra


def _kept_offsets(sz, strides: dict, kdims: list, knames: list) -> dict:
    """Each tensor's offset along the kept dims, strides as ``sz`` parameters."""
    return {
        u: cg.offset_expr(
            knames, [sz(f"S{_key(u)}_{k}", st[k], align=True) for k in kdims] or [0], "kept * 0"
        )
        for u, st in strides.items()
    }


def _flat_offset(sz, flat: str, y, part) -> str:
    """X's element offset for row-major flat index ``flat`` over X's dims (sizes, strides
    and inner extents as ``sz`` parameters)."""
    terms, inner = [], 1
    for j, (d, st) in reversed(list(enumerate(zip(part.flat_dims, part.strides)))):
        if d != 1 and st != 0:
            q = f"({flat} // {sz(f'E{y}_{j}', inner)})" if inner != 1 else flat
            terms.append(
                f"({q} % {sz(f'F{y}_{j}', d)})" + (f" * {sz(f'H{y}_{j}', st)}" if st != 1 else "")
            )
        inner *= d
    return " + ".join(terms) if terms else f"{flat} * 0"


def _view_load(graph, a, y, ptrs, off, mask, ct, index_of, sz, stream=False) -> str:
    """Expression reading layout output ``y`` through its input(s); offsets and the
    concatenation bounds as ``sz`` parameters."""
    parts = a.views[y]
    rank_y = len(graph.tensors[y].dims)
    expr = None
    for i, part in enumerate(parts):
        base = (
            sz(f"O{y}v{i}", part.offset, align=True)
            if part.offset >= 0
            else f"-{sz(f'O{y}v{i}', -part.offset, align=True)}"
        )
        addr = f"{ptrs[part.src]} + {base} + {off((y, i))}"
        if part.axis is None:
            return cg.load_expr(addr, "0", mask, ct, stream)
        ia = index_of(part.axis, rank_y)
        cond = (
            f"(({ia}) >= {sz(f'A{y}v{i}', part.start, align=True)}) & "
            f"(({ia}) < {sz(f'B{y}v{i}', part.end, align=True)})"
        )
        load = cg.load_expr(addr, "0", f"{mask} & {cond}" if mask else cond, ct, stream)
        expr = load if expr is None else f"tl.where({cond}, {load}, {expr})"
    return expr


def _post(r, val, count: str):
    """The reduction's last step; ``count`` is the reduced length's expression."""
    if r.post == "mean":
        return f"({val} / {count})" if count != "0" else f"({val} * float('nan'))"
    if r.post == "sqrt":
        return f"tl.sqrt({val})"
    return val


def _finish_source(graph, a, kept_n, ksizes, kdims, strides, ptrs, split, red_n, kept_last, big):
    """The split's finishing kernel: each program loads the SPLIT partials of BLOCK outputs
    as one [SPLIT (rounded up to a power of two), BLOCK] tile, so the finish costs one L2
    round trip. On the GPU it is launched as a programmatic dependent of the partial kernel
    (PDL): it becomes resident while the partial kernel runs and waits in
    ``griddepcontrol.wait`` for the partial kernel's end and its writes, so the launch
    gap is hidden (H100: 1.5 us of the ~2 us a plain second launch costs)."""
    ind = "    "
    outs = [r.out_uid for r in a.reductions]
    gp = 1 << (split - 1).bit_length()
    block = max(1, min(256, 8192 // gp))
    sz = cg.Sizes(big)
    kept_e = sz("KEPT_N", kept_n, align=True)
    lines = [
        f"{ind}kept = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)",
        f"{ind}mask_k = kept < {kept_e}",
        f"{ind}sl = tl.arange(0, SPLIT_P2)",
        f"{ind}mask = (sl < SPLIT)[:, None] & mask_k[None, :]",
    ]
    lines += _decompose(sz, "kept", ksizes, "k", "K", ind, kept_last)
    knames = [f"k{j}" for j in range(len(ksizes))]
    koff = _kept_offsets(sz, {u: strides[u] for u in outs}, kdims, knames)
    red_e = sz("RED_N", red_n) if any(r.post == "mean" for r in a.reductions) else None
    for j, r in enumerate(a.reductions):
        lines.append(
            f"{ind}part = tl.load(WS + ({j} * SPLIT + sl[:, None]) * {kept_e} "
            f"+ kept[None, :], mask=mask, other={cg._lit(r.ident)})"
        )
        lines.append(f"{ind}acc = " + cg.FOLD[r.combine].format(x="part", ax=0))
        lines.append(
            ind
            + cg.store_expr(
                ptrs[r.out_uid],
                f"({koff[r.out_uid]})",
                _post(r, "acc", red_e),
                graph.tensors[r.out_uid],
                "mask_k",
            )
        )
    base = "fused_finish"
    params = (
        ["WS"]
        + [ptrs[u] for u in outs]
        + sz.params()
        + ["BLOCK: tl.constexpr", "SPLIT: tl.constexpr", "SPLIT_P2: tl.constexpr"]
    )
    head = _def(base, params, sz, ind)
    head[2:2] = [f"{ind}if _COMPILED:", f"{ind}    tl.extra.cuda.gdc_wait()"]
    src = "\n".join([cg.COMBINE_HELPERS, ""] + head + lines) + "\n"
    src, name = cg.name_by_digest(src, base)
    args = [("ws", _ws_dtype(a.compute))] + [("buf", u) for u in outs] + sz.args()
    return (
        src,
        name,
        args,
        (-(-kept_n // block),),
        {"BLOCK": block, "SPLIT": split, "SPLIT_P2": gp, "num_warps": 4},
    )


def _ws_dtype(compute: str):
    """The workspace partials' type: the compute type."""
    return torch.float64 if compute.endswith("64") else torch.float32
