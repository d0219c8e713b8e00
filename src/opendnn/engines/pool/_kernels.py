"""Triton sources of the pooling forward kernel (the math is in ``ops/pool.py``).

A program owns a tile of BLOCK_P output pixels (flat over N and the output's spatial
axes) x BLOCK_C channels. It walks the window (``tl.static_range`` over each axis, so the
window's loads are independent and issued together; windows of more than UNROLL offsets,
global pooling say, loop at run time instead), loading for every offset the
[BLOCK_P, BLOCK_C] input elements it covers: with channels innermost (NHWC) those are
BLOCK_C contiguous elements per pixel (vector loads); with BLOCK_C = 1 (NCHW) a block of
pixels of one channel. Overlapping windows re-read their shared inputs from L1/L2, so
DRAM sees about one read of X and one write of Y.

Program order: with BLOCK_C > 1 the channel blocks of a pixel block are neighbours (one
pixel's channels are contiguous); with BLOCK_C = 1 the pixel blocks of one channel are.

Maximum, with ``m`` = -inf and ``idx`` = -1 to start and v the window element at offset
k (masked lanes are padding):

    take = real & (v > m  |  idx < 0  [| isnan(v) & !isnan(m)  with NaN propagation])

(without propagation NaN is replaced by -inf first), m = take ? v : m, idx = take ? k :
idx: the first maximum in window order, or the first NaN. Without an index output the
maximum alone is kept: m = (v > m | isnan(v)) ? v : m (propagating) or (v > m) ? v : m.
Average: the sum of the real elements over prod(window) or over their count
prod_a(min(start_a + w_a, in_a) - max(start_a, 0)).
"""

from __future__ import annotations

import math

from ...enums import DataType, ResampleMode
from ..fusion._codegen import TL_TYPE, index_decomposition

INT32_LIMIT = 2**31 - 1
NEG_INF = 'float("-inf")'
UNROLL = 64  # window offsets (backward: candidate windows) unrolled at most


def loop(count: int, total: int) -> str:
    """The loop header over ``count`` values: unrolled while the nest's ``total`` trips
    stay within UNROLL (independent loads in flight), a run-time loop beyond."""
    return f"tl.static_range({count})" if total <= UNROLL else f"range({count})"


class Problem:
    """One pooling node's geometry and each tensor's (N, C, spatial...) strides.

    ``space`` is the spatial dims the kernel's pixels range over (the output's forward,
    the input's backward); ``roles`` maps a kernel argument name to its descriptor."""

    def __init__(self, node, x_dims, y_dims, descs: dict):
        self.mode = node.resample_mode
        self.nan = node.nan_propagation
        self.window, self.stride = tuple(node.window), tuple(node.stride)
        self.pre = tuple(node.pre_padding)
        self.N, self.C = x_dims[0], x_dims[1]
        self.inp, self.out = tuple(x_dims[2:]), tuple(y_dims[2:])
        self.nsp = len(self.inp)
        self.strides = {r: tuple(d.strides) for r, d in descs.items()}
        self.types = {r: d.data_type for r, d in descs.items()}
        self.big = any(d.span >= INT32_LIMIT for d in descs.values())
        self.volume = math.prod(self.window)

    @property
    def is_max(self) -> bool:
        return self.mode == ResampleMode.MAXPOOL

    def pixels(self, space) -> int:
        return self.N * math.prod(space)

    def channels_fast(self, role: str) -> bool:
        """Whether ``role``'s channels are its innermost, unit-stride axis (NHWC-like)."""
        st = self.strides[role]
        return self.C > 1 and st[1] == 1

    def flat_window(self, ks: list[str]) -> str:
        """The window offset of per-axis offsets ``ks`` (row-major over the window)."""
        terms, mult = [], 1
        for a in reversed(range(self.nsp)):
            terms.append(ks[a] if mult == 1 else f"{ks[a]} * {mult}")
            mult *= self.window[a]
        return " + ".join(reversed(terms))


def offset(p: Problem, role: str, n: str, sp: list[str]) -> str:
    """Per-pixel offset of ``role`` at image ``n`` and spatial indices ``sp``."""
    st = p.strides[role]
    terms = [f"{n} * {st[0]}"] + [f"{i} * {s}" for i, s in zip(sp, st[2:]) if s != 0]
    return " + ".join(terms)


def plane(kn) -> bool:
    """Whether ``kn`` tiles planes: [BLOCK_P rows, BLOCK_W columns] of the last spatial
    axis, each row one (n, c, leading spatial indices) -- NCHW-like tensors, with no
    per-element index division -- rather than [BLOCK_P pixels, BLOCK_C channels]."""
    return getattr(kn, "BLOCK_W", 0) > 0


def px(kn, expr: str) -> str:
    """A per-pixel expression spread over the tile: [BLOCK_P, 1] in pixel x channel tiles
    (plane tiles' index vectors are already 2-D)."""
    return f"({expr})" if plane(kn) else f"({expr})[:, None]"


def chan(kn, expr: str) -> str:
    """A per-channel expression spread over the tile: [1, BLOCK_C]."""
    return f"({expr})" if plane(kn) else f"({expr})[None, :]"


def tile_shape(kn) -> str:
    return f"[{kn.BLOCK_P}, {kn.BLOCK_W if plane(kn) else kn.BLOCK_C}]"


def grid_size(p: Problem, kn, space) -> int:
    """Programs of a launch over ``space`` (the output's spatial dims forward, the
    input's backward)."""
    if plane(kn):
        rows = p.N * p.C * math.prod(space[:-1])
        return -(-rows // kn.BLOCK_P) * -(-space[-1] // kn.BLOCK_W)
    return -(-p.pixels(space) // kn.BLOCK_P) * -(-p.C // kn.BLOCK_C)


def tile_head(name: str, params: list, p: Problem, kn, space) -> list[str]:
    """Signature, program -> (pixel block, channel block), the pixel decomposition into
    ``n``, ``q1``.. (spatial indices over ``space``) and the channel vector ``c``; plane
    tiles: program -> (row block, column block), ``q0`` (n), ``c`` and the leading
    spatial indices per row ([BLOCK_P, 1]), the last axis's ``q{nsp}`` per column
    ([1, BLOCK_W]) and the tile's ``pmask``."""
    ind = "    "
    bp, bc = kn.BLOCK_P, kn.BLOCK_C
    pid = "tl.program_id(0).to(tl.int64)" if p.big else "tl.program_id(0)"
    L = ["@triton.jit", f"def {name}({', '.join(params)}):", f"{ind}pid = {pid}"]
    if plane(kn):
        bw, last = kn.BLOCK_W, p.nsp
        nwb = -(-space[-1] // bw)
        sizes = [p.N, p.C, *space[:-1]]
        L += [
            f"{ind}rb = pid // {nwb}",
            f"{ind}wb = pid % {nwb}",
            f"{ind}rows = rb * {bp} + tl.arange(0, {bp})",
        ]
        L += index_decomposition("rows", sizes, "r", ind)
        L += [f"{ind}q0 = r0[:, None]", f"{ind}c = r1[:, None]"]
        L += [f"{ind}q{a} = r{a + 1}[:, None]" for a in range(1, last)]
        L += [
            f"{ind}q{last} = (wb * {bw} + tl.arange(0, {bw}))[None, :]",
            f"{ind}pmask = (rows < {math.prod(sizes)})[:, None] & (q{last} < {space[-1]})",
        ]
        return L
    npb, ncb = -(-p.pixels(space) // bp), -(-p.C // bc)
    if bc > 1:
        L += [f"{ind}pb = pid // {ncb}", f"{ind}cb = pid % {ncb}"]
    else:
        L += [f"{ind}cb = pid // {npb}", f"{ind}pb = pid % {npb}"]
    L += [
        f"{ind}pix = pb * {bp} + tl.arange(0, {bp})",
        f"{ind}pmask = pix < {p.pixels(space)}",
        f"{ind}c = cb * {bc} + tl.arange(0, {bc})",
    ]
    L += index_decomposition("pix", [p.N, *space], "q", ind)
    return L


def channel_mask(p: Problem, kn) -> str | None:
    """A [1, BLOCK_C] mask when the channel blocks overhang C, else None (full tiles keep
    the mask constant along channels: vector loads)."""
    return None if plane(kn) or p.C % kn.BLOCK_C == 0 else "(c < %d)[None, :]" % p.C


def tile_mask(kn, pixel_mask: str, cmask: str | None) -> str:
    return px(kn, pixel_mask) + (f" & {cmask}" if cmask else "")


def forward_source(name: str, p: Problem, kn, write_y: bool, index_role: str | None) -> str:
    """The forward kernel: arguments X, then Y when ``write_y``, then ``index_role`` (the
    graph's Index, or the backward's workspace) when given."""
    ind = "    "
    params = ["X"] + (["Y"] if write_y else []) + ([index_role] if index_role else [])
    L = tile_head(name, params, p, kn, p.out)
    cm = channel_mask(p, kn)
    sx = p.strides["X"]
    L.append(f"{ind}cx = {chan(kn, f'c * {sx[1]}')}")
    for a in range(p.nsp):
        L.append(f"{ind}s{a} = q{a + 1} * {p.stride[a]} - {p.pre[a]}")
    shape = tile_shape(kn)
    with_index = p.is_max and index_role is not None
    if p.is_max:
        L.append(f"{ind}m = tl.full({shape}, {NEG_INF}, tl.float32)")
        if with_index:
            L.append(f"{ind}idx = tl.full({shape}, -1, tl.int32)")
    else:
        L.append(f"{ind}acc = tl.full({shape}, 0.0, tl.float32)")
    # the window: one static loop per axis, the row's validity computed at its level
    depth = ind
    ok = "pmask"
    for a in range(p.nsp):
        L += [
            f"{depth}for k{a} in {loop(p.window[a], p.volume)}:",
            f"{depth}    i{a} = s{a} + k{a}",
            f"{depth}    ok{a} = {ok} & (i{a} >= 0) & (i{a} < {p.inp[a]})",
        ]
        ok = f"ok{a}"
        depth += "    "
    sp = [f"i{a}" for a in range(p.nsp)]
    L.append(
        f"{depth}v = tl.load(X + {px(kn, offset(p, 'X', 'q0', sp))} + cx, "
        f"mask={tile_mask(kn, ok, cm)}, other={NEG_INF if p.is_max else '0.0'})"
        ".to(tl.float32)"
    )
    if not p.is_max:
        L.append(f"{depth}acc += v")
    elif with_index:
        real = px(kn, ok)
        if p.nan:
            L.append(f"{depth}take = {real} & ((v > m) | (idx < 0) | ((v != v) & (m == m)))")
        else:
            L += [
                f"{depth}v = tl.where(v != v, {NEG_INF}, v)",
                f"{depth}take = {real} & ((v > m) | (idx < 0))",
            ]
        ks = [f"k{a}" for a in range(p.nsp)]
        L += [
            f"{depth}m = tl.where(take, v, m)",
            f"{depth}idx = tl.where(take, {p.flat_window(ks)}, idx)",
        ]
    elif p.nan:
        L.append(f"{depth}m = tl.where((v > m) | (v != v), v, m)")
    else:
        L.append(f"{depth}m = tl.where(v > m, v, m)")
    # the result
    if p.is_max:
        result = "m"
    elif p.mode == ResampleMode.AVGPOOL_INCLUDE_PADDING:
        result = f"acc * {1.0 / p.volume!r}"
    else:
        counts = [
            f"(tl.minimum(s{a} + {p.window[a]}, {p.inp[a]}) - tl.maximum(s{a}, 0))"
            for a in range(p.nsp)
        ]
        L.append(f"{ind}cnt = ({' * '.join(counts)}).to(tl.float32)")
        result = f"acc / {px(kn, 'cnt')}"
    out_sp = [f"q{a + 1}" for a in range(p.nsp)]
    smask = tile_mask(kn, "pmask", cm)
    for role, value in ((("Y", result),) if write_y else ()) + (
        ((index_role, "idx"),) if with_index else ()
    ):
        st = p.strides[role]
        L.append(
            f"{ind}tl.store({role} + {px(kn, offset(p, role, 'q0', out_sp))} + "
            f"{chan(kn, f'c * {st[1]}')}, ({value}).to({TL_TYPE[p.types[role]]}), "
            f"mask={smask})"
        )
    return "\n".join(L) + "\n"


def index_type(volume: int) -> DataType:
    """The workspace index type of a backward that recomputes the argmax."""
    return DataType.INT8 if volume <= 128 else DataType.INT32
