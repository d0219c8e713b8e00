"""Triton sources of the softmax engine (the math is in ``ops/softmax.py``).

A problem is R rows of L elements: the softmax axis is the row, every other index
(row-major over the remaining dims) picks a row. Each tensor reaches a row through its
own strides, so any layout works; the offsets are literals of the generated source.

- One pass (``PASSES=1``): a program holds BLOCK_ROWS whole rows ([BLOCK_ROWS, BLOCK_L]
  with BLOCK_L >= L) in registers: max, exp, sum and the store in one read of the input.
- Two loops (``PASSES=3``, long rows, many of them): one program per row streams the row
  twice in BLOCK_L tiles -- the online (max, sum), then the output. The rows in flight
  (a few per SM, 128 KB each at 65536 bf16) fit in L2, so the second read mostly does not
  reach DRAM.
- Two passes (``PASSES=2``, rows longer than a register tile): the row is cut into SPLIT
  chunks, one program per (row, chunk). The first kernel streams its chunk in BLOCK_L
  tiles keeping an online maximum m and sum s (s <- s exp(m - m') + sum exp(x - m') when
  the maximum grows to m'), and stores (m, s) to the workspace; the second combines the
  row's SPLIT pairs (M = max m_k, S = sum s_k exp(m_k - M)) and writes its chunk.
  Backward's first kernel stores partial sums of dy * y (log-softmax: of dy).
"""

from __future__ import annotations

from ...runtime.kernel_math import cast
from ..fusion._codegen import (
    COMBINE_HELPERS,
    POLL_HELPERS,
    TL_TYPE,
    index_decomposition,
    offset_expr,
    poll,
    publish,
)

INT32_LIMIT = 2**31 - 1
NEG_INF = 'float("-inf")'


def chunk(L: int, kn) -> int:
    """Elements per (row, chunk) program of the two-pass kernels: a BLOCK_L multiple."""
    per = -(-L // kn.SPLIT)
    return -(-per // kn.BLOCK_L) * kn.BLOCK_L


class Problem:
    """Rows of one softmax node: R, L, and each tensor's (outer strides, axis stride)."""

    def __init__(self, dims: tuple, axis: int, descs: dict):
        self.axis = axis
        self.L = dims[axis]
        self.outer = [d for i, d in enumerate(dims) if i != axis] or [1]
        self.R = 1
        for d in self.outer:
            self.R *= d
        self.strides = {}
        for role, d in descs.items():
            st = [s for i, s in enumerate(d.strides) if i != axis] or [0]
            self.strides[role] = (st, d.strides[axis])
        self.types = {role: d.data_type for role, d in descs.items()}
        self.big = any(d.span >= INT32_LIMIT for d in descs.values())

    def row_offsets(self, var: str, indent: str) -> list[str]:
        """Lines setting ``off_<ROLE>`` to each tensor's offset of row ``var``."""
        lines = index_decomposition(var, self.outer, "i", indent)
        names = [f"i{k}" for k in range(len(self.outer))]
        for role, (st, _) in self.strides.items():
            lines.append(f"{indent}off_{role} = {offset_expr(names, st, f'{var} * 0')}")
        return lines


def _row_head(name: str, params: list, p: Problem, chunked: bool) -> list[str]:
    """The signature of a one-row-per-program kernel, its row (and chunk) index and each
    tensor's row offset."""
    ind = "    "
    L = [
        COMBINE_HELPERS,
        "@triton.jit",
        f"def {name}({', '.join(params)}):",
        f"{ind}row = {_row_index(p.big, '1')}",
    ]
    if chunked:
        L.append(f"{ind}sl = tl.program_id(1)")
    return L + p.row_offsets("row", ind)


def _row_index(big: bool, per_program: str) -> str:
    pid = "tl.program_id(0).to(tl.int64)" if big else "tl.program_id(0)"
    return f"{pid} * {per_program}" if per_program != "1" else pid


def _load(
    p: Problem, role: str, cols: str, mask: str, other: str, tile2d: bool, last: bool = True
) -> str:
    """A float32 load of a row tile; ``last`` (the data's last read) streams it past L2
    (evict_first), the two-pass kernels' first read leaves it for the second."""
    _, sa = p.strides[role]
    off = (
        f"off_{role}[:, None] + ({cols})[None, :] * {sa}"
        if tile2d
        else f"off_{role} + ({cols}) * {sa}"
    )
    ev = ', eviction_policy="evict_first"' if last else ""
    return f"tl.load({role} + {off}, mask={mask}, other={other}{ev}).to(tl.float32)"


def _store(p: Problem, role: str, cols: str, value: str, mask: str, tile2d: bool) -> str:
    """The output's store, evict_first: written once, it should not push the rows still
    to be re-read out of L2 (H100: +11% at 65536-wide rows; docs/design/softmax.md)."""
    _, sa = p.strides[role]
    off = (
        f"off_{role}[:, None] + ({cols})[None, :] * {sa}"
        if tile2d
        else f"off_{role} + ({cols}) * {sa}"
    )
    return (
        f"tl.store({role} + {off}, {cast(value, TL_TYPE[p.types[role]])}, mask={mask}, "
        'eviction_policy="evict_first")'
    )


# ---- one pass ------------------------------------------------------------------------------
def one_pass_source(name: str, p: Problem, kn, backward: bool, log: bool) -> str:
    """One program per BLOCK_ROWS rows, whole rows in registers."""
    ind = "    "
    roles = ("DY", "Y", "DX") if backward else ("X", "Y")
    br = kn.BLOCK_ROWS
    L = [
        COMBINE_HELPERS,
        "@triton.jit",
        f"def {name}({', '.join(roles)}):",
        f"{ind}rows = {_row_index(p.big, str(br))} + tl.arange(0, {br})",
        f"{ind}cols = tl.arange(0, {kn.BLOCK_L})",
        f"{ind}mask = (rows < {p.R})[:, None] & (cols < {p.L})[None, :]",
    ]
    L += p.row_offsets("rows", ind)
    if backward:
        L += [
            f"{ind}dy = {_load(p, 'DY', 'cols', 'mask', '0.0', True)}",
            f"{ind}y = {_load(p, 'Y', 'cols', 'mask', '0.0', True)}",
        ]
        if log:
            L += [
                f"{ind}s = tl.reduce(dy, 1, _add_combine)",
                f"{ind}dx = dy - tl.exp(y) * s[:, None]",
            ]
        else:
            L += [
                f"{ind}s = tl.reduce(dy * y, 1, _add_combine)",
                f"{ind}dx = y * (dy - s[:, None])",
            ]
        L.append(ind + _store(p, "DX", "cols", "dx", "mask", True))
    else:
        L += [
            f"{ind}x = {_load(p, 'X', 'cols', 'mask', NEG_INF, True)}",
            f"{ind}m = tl.reduce(x, 1, _max_combine)",
            f"{ind}e = tl.exp(x - m[:, None])",
            f"{ind}s = tl.reduce(e, 1, _add_combine)",
        ]
        # a reciprocal a row and a multiply an element, not a division an element
        y = "x - m[:, None] - tl.log(s)[:, None]" if log else "e * (1.0 / s)[:, None]"
        L.append(ind + _store(p, "Y", "cols", y, "mask", True))
    return "\n".join(L) + "\n"


# ---- the statistics loop (shared by the two-loop and two-pass kernels) ---------------------
def _statistics(p: Problem, kn, backward: bool, log: bool, lo: str, hi: str) -> list[str]:
    """Lines streaming row tiles [lo, hi) once (a first read: left in L2). Forward leaves
    the online maximum ``m`` and the sum ``acc`` of exp(x - m); backward the partial sums
    ``acc`` (a BLOCK_L vector) of dy * y (log-softmax: of dy)."""
    ind, ind2 = "    ", "        "
    head = [
        f"{ind}for start in range({lo}, {hi}, {kn.BLOCK_L}):",
        f"{ind2}cols = start + tl.arange(0, {kn.BLOCK_L})",
        f"{ind2}mask = cols < {p.L}",
    ]
    if backward:
        L = (
            [f"{ind}acc = tl.full([{kn.BLOCK_L}], 0.0, tl.float32)"]
            + head
            + [f"{ind2}dy = {_load(p, 'DY', 'cols', 'mask', '0.0', False, False)}"]
        )
        if log:
            return L + [f"{ind2}acc += dy"]
        return L + [
            f"{ind2}y = {_load(p, 'Y', 'cols', 'mask', '0.0', False, False)}",
            f"{ind2}acc += dy * y",
        ]
    # m = -inf until a finite element arrives: exp is shifted by 0 instead, so that
    # (-inf) - (-inf) never makes a NaN of an empty prefix
    return (
        [
            f"{ind}m = tl.reduce(tl.full([{kn.BLOCK_L}], {NEG_INF}, tl.float32), 0, _max_combine)",
            f"{ind}acc = tl.reduce(tl.full([{kn.BLOCK_L}], 0.0, tl.float32), 0, _add_combine)",
        ]
        + head
        + [
            f"{ind2}x = {_load(p, 'X', 'cols', 'mask', NEG_INF, False, False)}",
            f"{ind2}m_new = tl.maximum(m, tl.reduce(x, 0, _max_combine))",
            f"{ind2}shift = tl.where(m_new == {NEG_INF}, 0.0, m_new)",
            f"{ind2}acc = acc * tl.exp(m - shift) + tl.reduce(tl.exp(x - shift), 0, _add_combine)",
            f"{ind2}m = m_new",
        ]
    )


# ---- two loops in one program --------------------------------------------------------------
def two_loop_source(name: str, p: Problem, kn, backward: bool, log: bool) -> str:
    """A program per row -- or, with PROGRAMS > 0, that many programs each walking rows
    pid, pid + PROGRAMS, ... (bounding the rows in flight that L2 must hold between the
    two reads): statistics over the row, then the row's output."""
    ind, ind2 = "    ", "        "
    roles = ("DY", "Y", "DX") if backward else ("X", "Y")
    span = -(-p.L // kn.BLOCK_L) * kn.BLOCK_L
    loop = [
        f"{ind}for start in range(0, {span}, {kn.BLOCK_L}):",
        f"{ind2}cols = start + tl.arange(0, {kn.BLOCK_L})",
        f"{ind2}mask = cols < {p.L}",
    ]
    if kn.PROGRAMS:
        L = [
            COMBINE_HELPERS,
            "@triton.jit",
            f"def {name}({', '.join(roles)}):",
            f"{ind}pid = {_row_index(p.big, '1')}",
            f"{ind}for row in range(pid, {p.R}, {kn.PROGRAMS}):",
        ]
        body = p.row_offsets("row", ind)
    else:
        L, body = _row_head(name, list(roles), p, False), []
    body += _statistics(p, kn, backward, log, "0", str(span))
    if backward:
        body.append(f"{ind}s = tl.reduce(acc, 0, _add_combine)")
        body += loop + [
            f"{ind2}dy = {_load(p, 'DY', 'cols', 'mask', '0.0', False)}",
            f"{ind2}y = {_load(p, 'Y', 'cols', 'mask', '0.0', False)}",
            ind2
            + _store(
                p, "DX", "cols", "dy - tl.exp(y) * s" if log else "y * (dy - s)", "mask", False
            ),
        ]
    else:
        if log:
            body.append(f"{ind}sub = m + tl.log(acc)")
        body += loop + [
            f"{ind2}x = {_load(p, 'X', 'cols', 'mask', '0.0', False)}",
            ind2
            + _store(p, "Y", "cols", "x - sub" if log else "tl.exp(x - m) / acc", "mask", False),
        ]
    return "\n".join(L + [(ind if kn.PROGRAMS else "") + b for b in body]) + "\n"


# ---- two passes ----------------------------------------------------------------------------
def stats_source(name: str, p: Problem, kn, backward: bool, log: bool) -> str:
    """Per (row, chunk): the chunk's (max, sum of exp) -- or backward's partial sum."""
    ind = "    "
    roles = ("DY", "Y") if backward else ("X",)
    ch = chunk(p.L, kn)
    L = _row_head(name, [*roles, "WS"], p, True)
    L.append(f"{ind}lo = sl * {ch}")
    L += _statistics(p, kn, backward, log, "lo", f"lo + {ch}")
    if backward:
        L.append(f"{ind}tl.store(WS + row * {kn.SPLIT} + sl, tl.reduce(acc, 0, _add_combine))")
    else:
        L += [
            f"{ind}tl.store(WS + (row * {kn.SPLIT} + sl) * 2, m)",
            f"{ind}tl.store(WS + (row * {kn.SPLIT} + sl) * 2 + 1, acc)",
        ]
    return "\n".join(L) + "\n"


def write_source(name: str, p: Problem, kn, backward: bool, log: bool) -> str:
    """Per (row, chunk): combine the row's partials, write the chunk's output."""
    ind, ind2 = "    ", "        "
    roles = ("DY", "Y", "DX") if backward else ("X", "Y")
    ch, sp = chunk(p.L, kn), kn.SPLIT
    sp2 = 1 << max(0, (sp - 1).bit_length())
    L = _row_head(name, [*roles, "WS"], p, True)
    L += [f"{ind}k = tl.arange(0, {sp2})", f"{ind}kmask = k < {sp}"]
    if backward:
        L.append(
            f"{ind}s = tl.reduce(tl.load(WS + row * {sp} + k, mask=kmask, other=0.0), 0, "
            "_add_combine)"
        )
    else:
        L += [
            f"{ind}ms = tl.load(WS + (row * {sp} + k) * 2, mask=kmask, other={NEG_INF})",
            f"{ind}ss = tl.load(WS + (row * {sp} + k) * 2 + 1, mask=kmask, other=0.0)",
            f"{ind}mx = tl.reduce(ms, 0, _max_combine)",
            f"{ind}shift = tl.where(mx == {NEG_INF}, 0.0, mx)",
            f"{ind}s = tl.reduce(ss * tl.exp(ms - shift), 0, _add_combine)",
        ]
        if log:
            L.append(f"{ind}sub = mx + tl.log(s)")
    L += [
        f"{ind}lo = sl * {ch}",
        f"{ind}for start in range(lo, lo + {ch}, {kn.BLOCK_L}):",
        f"{ind2}cols = start + tl.arange(0, {kn.BLOCK_L})",
        f"{ind2}mask = cols < {p.L}",
    ]
    if backward:
        L += [
            f"{ind2}dy = {_load(p, 'DY', 'cols', 'mask', '0.0', False)}",
            f"{ind2}y = {_load(p, 'Y', 'cols', 'mask', '0.0', False)}",
        ]
        dx = "dy - tl.exp(y) * s" if log else "y * (dy - s)"
        L.append(ind2 + _store(p, "DX", "cols", dx, "mask", False))
    else:
        L.append(f"{ind2}x = {_load(p, 'X', 'cols', 'mask', '0.0', False)}")
        y = "x - sub" if log else "tl.exp(x - mx) / s"
        L.append(ind2 + _store(p, "Y", "cols", y, "mask", False))
    return "\n".join(L) + "\n"


# ---- one read, cooperative -------------------------------------------------------------------
def partial_floats(p: Problem, kn) -> int:
    """Float32 words of the tagged partials [R, SPLIT, 2] (int64 each), zeroed before each
    run."""
    return p.R * kn.SPLIT * 2 * 2


def _coop_fetch(
    p: Problem, roles, prefix: str, row: str, suffix: str, backward: bool, indent: str
) -> list[str]:
    other = "0.0" if backward else NEG_INF
    out = []
    for r in roles:
        _, sa = p.strides[r]
        out.append(
            f"{indent}{r.lower()}{suffix} = tl.load({r} + {prefix}off_{r} + cols * {sa}, "
            f"mask=mask & ({row} < {p.R}), other={other}, "
            'eviction_policy="evict_first").to(tl.float32)'
        )
    return out


def coop_source(name: str, p: Problem, kn, backward: bool, log: bool) -> str:
    """PASSES=4: a row's SPLIT chunks are held in registers by SPLIT programs running at
    once (PROGRAMS = groups x SPLIT, at most what the GPU keeps resident). Each publishes
    its chunk's partials -- (max, sum of exp), or backward's sum of dy * y (dy) -- as
    64-bit words tagged with row + 1 (no fence, no counter: ``fusion._codegen.publish``),
    with PREFETCH loads the next row's chunk, polls the row's words until all SPLIT carry
    the tag, combining them in the same reduction (``poll``), and writes its chunk from
    registers: one read of the input. Group g takes rows g, g + groups, ..."""
    ind = "    "
    roles = ("DY", "Y") if backward else ("X",)
    sp, bl = kn.SPLIT, kn.BLOCK_L
    sp2 = 1 << max(0, (sp - 1).bit_length())
    groups = kn.PROGRAMS // sp
    L = [
        COMBINE_HELPERS,
        POLL_HELPERS,
        "@triton.jit",
        f"def {name}({', '.join(roles + (('DX',) if backward else ('Y',)))}, WS):",
        f"{ind}pid = {_row_index(p.big, '1')}",
        f"{ind}grp = pid // {sp}",
        f"{ind}sl = pid % {sp}",
        f"{ind}cols = sl * {bl} + tl.arange(0, {bl})",
        f"{ind}mask = cols < {p.L}",
        f"{ind}k = tl.arange(0, {sp2})",
        f"{ind}kmask = k < {sp}",
        f"{ind}WSI = WS.to(tl.pointer_type(tl.int64))",
    ]
    if kn.PREFETCH:
        L += [ln.replace("off_", "noff_") for ln in p.row_offsets("grp", ind)]
        L += _coop_fetch(p, roles, "n", "grp", "", backward, ind)
    L.append(f"{ind}for row in range(grp, {p.R}, {groups}):")
    body = p.row_offsets("row", ind) + [f"{ind}tag = row + 1"]
    if not kn.PREFETCH:
        body += _coop_fetch(p, roles, "", "row", "", backward, ind)
    slot = f"(row * {sp} + sl) * 2"
    if backward:
        body.append(f"{ind}part = tl.reduce({'dy' if log else 'dy * y'}, 0, _add_combine)")
        body += publish("WSI", slot, "part", "tag", ind)
    else:
        body += [
            f"{ind}m = tl.reduce(x, 0, _max_combine)",
            f"{ind}shift = tl.where(m == {NEG_INF}, 0.0, m)",
            f"{ind}e = tl.exp(x - shift)",
            f"{ind}part = tl.reduce(e, 0, _add_combine)",
        ]
        body += publish("WSI", slot, "m", "tag", ind) + publish(
            "WSI", f"{slot} + 1", "part", "tag", ind
        )
    if kn.PREFETCH:
        body.append(f"{ind}nrow = row + {groups}")
        body += [ln.replace("off_", "noff_") for ln in p.row_offsets("nrow", ind)]
        body += _coop_fetch(p, roles, "n", "nrow", "_next", backward, ind)
    at = f"(row * {sp} + k) * 2"
    if backward:
        body += poll(
            "WSI", [at], "kmask", "tag", "tl.reduce((_late, _v0), 0, _poll_add1)", ["s"], ind
        )
        body += [
            ind
            + _store(
                p, "DX", "cols", "dy - tl.exp(y) * s" if log else "y * (dy - s)", "mask", False
            )
        ]
    else:
        red = f"tl.reduce((_late, tl.where(kmask, _v0, {NEG_INF}), _v1), 0, _poll_softmax)"
        body += poll("WSI", [at, f"{at} + 1"], "kmask", "tag", red, ["mx", "s"], ind)
        # softmax: y = e exp(shift - mx) / s, the exponentials already taken (one per
        # element, not two: the exp unit was what held softmax below log-softmax here);
        # a chunk of -inf only has e = 0 and must not meet exp(0 - mx) = inf
        scale = f"tl.where(m == {NEG_INF}, 0.0, tl.exp(shift - mx) / s)"
        body += [
            ind
            + _store(p, "Y", "cols", "x - mx - tl.log(s)" if log else f"e * {scale}", "mask", False)
        ]
    if kn.PREFETCH:
        body += [f"{ind}{r.lower()} = {r.lower()}_next" for r in roles]
    return "\n".join(L + [ind + b for b in body]) + "\n"
