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
    src = d if not d.is_virtual else next(
        (graph.tensors[u] for u in a.inputs if graph.tensors[u].dims == tuple(a.space)), d)
    order = sorted(range(len(a.space)), key=lambda i: (src.strides[i] if i < len(src.strides)
                                                        else 0, i))
    for i in order:
        if a.space[i] != 1:
            return a.kept[i] == 1
    return True


def generate(graph, a, knobs: dict):
    """(source, name, args, grid, constexprs, finish) for the fused kernel."""
    rank = len(a.space)
    tensors = [u for u in a.inputs if not graph.tensors[u].is_pass_by_value] + a.outputs
    red_outs = [r.out_uid for r in a.reductions]
    strides = {u: cg.padded_strides(graph.tensors[u], rank) for u in tensors
               if u in a.direct or u in a.outputs}
    for y, parts in a.views.items():
        ydims = graph.tensors[y].dims
        for i, part in enumerate(parts):
            if part.flat_dims is None:
                strides[(y, i)] = [0 if d == 1 else st for d, st in zip(ydims, part.strides)]
    if a.reductions:
        classes = ["kept" if a.kept[i] == a.space[i] and a.space[i] != 1 else "red"
                   for i in range(rank)]
        for u in red_outs:
            st = cg.padded_strides(graph.tensors[u], rank)
            strides[u] = [s if c == "kept" else 0 for s, c in zip(st, classes)]
    else:
        classes = ["kept"] * rank
    perm = _memory_order(graph, a, rank, strides)
    pinned = {k for k, axis in enumerate(perm) if axis in a.pinned}
    sizes, cstrides, cclasses, origin = cg.collapse(
        [a.space[i] for i in perm], {u: [st[i] for i in perm] for u, st in strides.items()},
        [classes[i] for i in perm], pinned)
    origin = [[perm[k] for k in dims] for dims in origin]
    numel = math.prod(a.space)
    big = any(graph.tensors[u].span >= 2 ** 31 for u in tensors) or numel >= 2 ** 31
    ptrs = {u: f"P{u}" for u in tensors + red_outs}
    scalars = [u for u in a.inputs if graph.tensors[u].is_pass_by_value]
    ct = a.compute
    # scalars enter the float compute as floats (the interpreter makes a Python int an
    # int32 and cannot pass a bool at all); a float64 compute annotates them, or the
    # compiled kernel would take them as float32 (a Python float's default) and round them
    note = ": tl.float64" if ct == "tl.float64" else ""
    sig = [ptrs[u] for u in tensors + red_outs] + [f"s{u}{note}" for u in scalars]
    args = [("buf", u) for u in tensors + red_outs] + [("float", u) for u in scalars]
    tag = graph.key()[:12]
    if not a.reductions:
        return _pointwise_source(graph, a, sizes, cstrides, origin, big, sig, args, ptrs,
                                 scalars, ct, knobs, tag)
    return _reduce_source(graph, a, sizes, cstrides, cclasses, origin, big, sig, args, ptrs,
                          scalars, ct, knobs, tag)


def _memory_order(graph, a, rank: int, strides: dict) -> list:
    """The iteration order of a pointwise kernel's flat index: the first output's axes
    from its largest stride to its smallest, so that consecutive lanes store to
    consecutive addresses whatever the layout (an NHWC output iterates C fastest). Reduction
    kernels and views (whose flat index must be row-major) keep the logical order."""
    if a.reductions or a.views or not a.outputs:
        return list(range(rank))
    st = strides[a.outputs[0]]
    return sorted(range(rank), key=lambda i: (-st[i], i))


def _pointwise_source(graph, a, sizes, strides, origin, big, sig, args, ptrs, scalars, ct,
                      knobs, tag):
    rank = len(a.space)
    numel = math.prod(sizes) if sizes else 1
    block = knobs["BLOCK"]
    name = f"fused_pointwise_{tag}"
    ind = "    "
    lines = ["@triton.jit", f"def {name}({', '.join(sig + ['BLOCK: tl.constexpr'])}):",
             f"{ind}pid = tl.program_id(0)" + (".to(tl.int64)" if big else ""),
             f"{ind}idx = pid * BLOCK + tl.arange(0, BLOCK)",
             f"{ind}mask = idx < {numel}"]
    lines += cg.index_decomposition("idx", sizes or [1], "i", ind)
    names = [f"i{k}" for k in range(len(sizes or [1]))]
    offs = {u: cg.offset_expr(names, st, "idx * 0") for u, st in strides.items()}

    def index_of(axis, out_rank):
        s_axis = axis + rank - out_rank
        for k, dims in enumerate(origin):
            if dims == [s_axis]:
                return names[k]
        return "idx * 0"

    def load(uid):
        if uid in scalars:
            return f"(s{uid} + tl.full([1], 0, {ct}))"
        if uid in a.views and a.views[uid][0].flat_dims is not None:
            part = a.views[uid][0]   # Y spans S, so idx is Y's row-major flat index
            return cg.load_expr(ptrs[part.src], f"({_flat_offset('idx', part)})", "mask", ct)
        if uid in a.views:
            return _view_load(graph, a, uid, ptrs, lambda key: f"({offs[key]})", "mask", ct,
                              index_of)
        return cg.load_expr(ptrs[uid], f"({offs[uid]})", "mask", ct)

    em = cg.Emitter(graph, ct, load, index_of, ind)
    for n in a.pointwise:
        em.emit_node(n)
    for u in a.outputs:
        em.lines.append(ind + cg.store_expr(ptrs[u], f"({offs[u]})", em.value(u), graph.tensors[u],
                                            "mask"))
    src = "\n".join(lines + em.lines) + "\n"
    grid = (-(-numel // block) if math.prod(a.space) else 0,)
    return src, name, args, grid, {"BLOCK": block, "num_warps": knobs["num_warps"]}, None


def _reduce_source(graph, a, sizes, strides, classes, origin, big, sig, args, ptrs, scalars, ct,
                   knobs, tag):
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
    name = f"fused_reduce_{tag}"
    ind, ind2 = "    ", "        "
    sig2 = sig + (["WS"] if split > 1 else []) + ["BLOCK_KEPT: tl.constexpr",
                                                  "BLOCK_RED: tl.constexpr"]
    if split > 1:
        args = args + [("ws", _ws_dtype(ct))]
    # Column tiles index in int64 even when int32 would do: with int32 offsets ptxas
    # interleaves the tile's loads with the adds (two 16-byte loads in flight per thread,
    # not eight) and an [8 x 2048] bf16 column sum read at 0.65 of copy instead of 0.81
    # (bench/colsum_engine_isolate.py; notes/fusion.md, probe 9). Row tiles keep int32:
    # int64 took the bf16 row sum from 0.89 to 0.84.
    itype = ".to(tl.int64)" if big or kept_last else ""
    lines = ["@triton.jit", f"def {name}({', '.join(sig2)}):",
             f"{ind}pid = tl.program_id(0){itype}",
             f"{ind}pid_s = tl.program_id(1){itype}",
             f"{ind}kept = pid * BLOCK_KEPT + tl.arange(0, BLOCK_KEPT)",
             f"{ind}mask_k = kept < {kept_n}"]
    ksizes = [sizes[k] for k in kdims] or [1]
    rsizes = [sizes[k] for k in rdims] or [1]
    lines += cg.index_decomposition("kept", ksizes, "k", ind)
    knames = [f"k{j}" for j in range(len(ksizes))]
    rnames = [f"r{j}" for j in range(len(rsizes))]
    koff = {u: cg.offset_expr(knames, [st[k] for k in kdims] or [0], "kept * 0")
            for u, st in strides.items()}
    roff = {u: cg.offset_expr(rnames, [st[k] for k in rdims] or [0]) for u, st in strides.items()}
    for r in a.reductions:
        lines.append(f"{ind}acc{r.out_uid} = tl.full({tile}, {cg._lit(r.ident)}, {ct})")
    # Bounds are literals (or a literal multiple of pid_s) and the mask compares with a
    # literal: Triton's alignment analysis then proves the mask constant over 16-byte
    # groups and vectorizes the loads (a runtime bound makes them element-wise).
    # Slice s takes the reduced blocks s, s + SPLIT, s + 2 SPLIT, ...: every program walks
    # the same band of the input at once (probes 4 and 9 of bench/notes/fusion.md read
    # column sums 2-4% faster so than with one contiguous range per slice).
    lines.append(f"{ind}for start in range(pid_s * BLOCK_RED, {red_n}, {split} * BLOCK_RED):"
                 if split > 1 else f"{ind}for start in range(0, {red_n}, BLOCK_RED):")
    lines.append(f"{ind2}rr = start + tl.arange(0, BLOCK_RED)")
    # Tiles that provably stay inside (sizes divisible by the blocks) need no masks at
    # all: fewer instructions per element on the hot loop.
    full_k = kept_n % BK == 0
    full_r = red_n % BR == 0
    mask = None if (full_k and full_r) else "mask"
    kmask = None if full_k else "mask_k"
    if mask:
        lines.append(f"{ind2}mask = mask_k{KA} & (rr < {red_n}){RA}")
    lines += cg.index_decomposition("rr", rsizes, "r", ind2)

    def off(u):
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
            return _view_load(graph, a, uid, ptrs, off, mask, ct, index_of, stream=True)
        return cg.load_expr(ptrs[uid], off(uid), mask, ct, stream=True)

    em = cg.Emitter(graph, ct, load, index_of, ind2)
    for n in a.pointwise:
        em.emit_node(n)
    for u in a.outputs:
        em.lines.append(ind2 + cg.store_expr(ptrs[u], off(u), em.value(u), graph.tensors[u], mask))
    for r in a.reductions:
        x = em.value(r.in_uid)
        pre = cg.PRE[r.pre].format(x=x)
        em.lines.append(f"{ind2}x{r.out_uid} = tl.where(mask, {pre}, {cg._lit(r.ident)})" if mask
                        else f"{ind2}x{r.out_uid} = {pre}")
        em.lines.append(f"{ind2}acc{r.out_uid} = " + cg.COMBINE[r.combine].format(
            a=f"acc{r.out_uid}", b=f"x{r.out_uid}"))
    lines += em.lines
    fin_lines = []
    for j, r in enumerate(a.reductions):
        fin_lines.append(f"{ind}res{r.out_uid} = " + cg.FOLD[r.combine].format(
            x=f"acc{r.out_uid}", ax=red_axis))
        if split == 1:
            val = _post(r, f"res{r.out_uid}", red_n)
            fin_lines.append(ind + cg.store_expr(ptrs[r.out_uid], f"({koff[r.out_uid]})", val,
                                                 graph.tensors[r.out_uid], kmask))
        else:
            fin_lines.append(f"{ind}tl.store(WS + ({j} * {split} + pid_s) * {kept_n} + kept, "
                             f"res{r.out_uid}" + (", mask=mask_k)" if kmask else ")"))
    src = "\n".join(lines + fin_lines) + "\n"
    src = cg.COMBINE_HELPERS + "\n\n" + src
    grid = (-(-kept_n // BK) if kept_n and math.prod(a.kept) else 0, split)
    constexprs = {"BLOCK_KEPT": BK, "BLOCK_RED": BR, "num_warps": knobs["num_warps"],
                  "num_stages": knobs.get("num_stages", 3)}
    extra = None
    if split > 1:
        extra = _finish_source(graph, a, kept_n, ksizes, knames, koff, ptrs, split, red_n, ct, tag)
    return src, name, args, grid, constexprs, extra


def _flat_offset(flat: str, part) -> str:
    """X's element offset for row-major flat index ``flat`` over X's dims."""
    terms, inner = [], 1
    for d, st in reversed(list(zip(part.flat_dims, part.strides))):
        if d != 1 and st != 0:
            q = f"({flat} // {inner})" if inner != 1 else flat
            terms.append(f"({q} % {d}) * {st}")
        inner *= d
    return " + ".join(terms) if terms else f"{flat} * 0"


def _view_load(graph, a, y, ptrs, off, mask, ct, index_of, stream=False) -> str:
    """Expression reading layout output ``y`` through its input(s)."""
    parts = a.views[y]
    rank_y = len(graph.tensors[y].dims)
    expr = None
    for i, part in enumerate(parts):
        addr = f"{ptrs[part.src]} + {part.offset} + {off((y, i))}"
        if part.axis is None:
            return cg.load_expr(addr, "0", mask, ct, stream)
        ia = index_of(part.axis, rank_y)
        cond = f"(({ia}) >= {part.start}) & (({ia}) < {part.end})"
        load = cg.load_expr(addr, "0", f"{mask} & {cond}" if mask else cond, ct, stream)
        expr = load if expr is None else f"tl.where({cond}, {load}, {expr})"
    return expr


def _post(r, val, count):
    if r.post == "mean":
        return f"({val} / {count})" if count else f"({val} * float('nan'))"
    if r.post == "sqrt":
        return f"tl.sqrt({val})"
    return val


def _finish_source(graph, a, kept_n, ksizes, knames, koff, ptrs, split, red_n, ct, tag):
    """The split's finishing kernel: each program loads the SPLIT partials of BLOCK outputs
    as one [SPLIT (rounded up to a power of two), BLOCK] tile, so the finish costs one L2
    round trip. On the GPU it is launched as a programmatic dependent of the partial kernel
    (PDL): it becomes resident while the partial kernel runs and waits in
    ``griddepcontrol.wait`` for the partial kernel's end and its writes, so the launch
    gap is hidden (probe 9: 1.5 us of the ~2 us a plain second launch costs)."""
    name = f"fused_finish_{tag}"
    ind = "    "
    outs = [r.out_uid for r in a.reductions]
    gp = 1 << (split - 1).bit_length()
    block = max(1, min(256, 8192 // gp))
    lines = [cg.COMBINE_HELPERS, "", "@triton.jit",
             f"def {name}(WS, {', '.join(ptrs[u] for u in outs)}, BLOCK: tl.constexpr):",
             f"{ind}if _COMPILED:",
             f"{ind}    tl.extra.cuda.gdc_wait()",
             f"{ind}kept = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)",
             f"{ind}mask_k = kept < {kept_n}",
             f"{ind}sl = tl.arange(0, {gp})",
             f"{ind}mask = (sl < {split})[:, None] & mask_k[None, :]"]
    lines += cg.index_decomposition("kept", ksizes, "k", ind)
    for j, r in enumerate(a.reductions):
        lines.append(f"{ind}part = tl.load(WS + ({j} * {split} + sl[:, None]) * {kept_n} "
                     f"+ kept[None, :], mask=mask, other={cg._lit(r.ident)})")
        lines.append(f"{ind}acc = " + cg.FOLD[r.combine].format(x="part", ax=0))
        lines.append(ind + cg.store_expr(ptrs[r.out_uid], f"({koff[r.out_uid]})",
                                         _post(r, "acc", red_n), graph.tensors[r.out_uid],
                                         "mask_k"))
    src = "\n".join(lines) + "\n"
    args = [("ws", _ws_dtype(ct))] + [("buf", u) for u in outs]
    return src, name, args, (-(-kept_n // block),), {"BLOCK": block, "num_warps": 4}



def _ws_dtype(compute: str):
    """The workspace partials' type: the compute type."""
    return torch.float64 if compute.endswith("64") else torch.float32
