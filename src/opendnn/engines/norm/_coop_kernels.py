"""Triton sources of the norm engine's one-read path (``PATH=4``, GPU only; layout:
``_kernels``).

A row's SPLIT chunks of CHUNK elements (a BLOCK_L tile, masked past CHUNK) are held in
registers by SPLIT programs running at once; PROGRAMS = groups x SPLIT persistent
programs, group g taking rows g, g + groups, ... and program (g, k) always chunk k. For
each row a program computes its chunk's partials and publishes each as one 64-bit word,
(float32 bits << 32) | (row + 1): a reader that sees the row's tag sees the value, so
there is no fence and no counter (a release fence would wait for the program's outstanding
output stores). It then loads the next row's chunk (PREFETCH=1: in flight while it waits),
polls the row's SPLIT words until all carry the tag -- combining them in the same
reduction that checks the tags (``fusion._codegen.poll``) -- and writes its chunk from
registers: the input is read once. A tiny kernel zeroes the words before each run. The
backward can meet a row late (LAG): it publishes row t's partials before waiting for
row t - 1's, so a program a little behind the others no longer stalls them every row.

Forward partials, chunk k of n_k elements: layer norm (mean m_k, M2_k = sum (x - m_k)^2,
from registers, so no cancellation), combined pairwise as Chan et al. (n = n_a + n_b,
d = m_b - m_a: mean = m_a + d n_b / n, M2 = M2_a + M2_b + d^2 n_a n_b / n), var = M2 / L;
RMS norm sum x^2. Backward partials: sum g xh and sum g (g = dy scale), the terms of
dx = r (g - c2 - xh c1); a program also sums dy xh and dy over its rows for its columns
(DSCALE / DBIAS partials [2, groups, L], added in order by the finishing kernel).

Workspace: tagged partials [R, SPLIT, 2] (int64), then (backward) the float32 parameter
partials.
"""

from __future__ import annotations

import re

from ..fusion._codegen import POLL_HELPERS, poll, publish
from ._bwd_kernels import _centered, _names
from ._kernels import IND, IND2, FwdSpec, Problem, _y_lines, header, pid_expr, stat_store, store


def chunk(kn) -> int:
    """Elements of a row per program: CHUNK, or BLOCK_L when it is 0."""
    return kn.CHUNK or kn.BLOCK_L


def partial_floats(p: Problem, kn) -> int:
    """Float32 words of the tagged partials [R (+ groups with LAG), SPLIT, 2] (int64
    each): the kernel that zeroes them before each run covers this many. LAG's last step
    publishes a row past the last (zeros) into the spare rows."""
    rows = p.R + (kn.PROGRAMS // kn.SPLIT if getattr(kn, "LAG", 0) else 0)
    return rows * kn.SPLIT * 2 * 2


def params_offset(p: Problem, kn) -> int:
    """Float32 index of the backward's DSCALE / DBIAS partials (after the partials)."""
    return partial_floats(p, kn)


def workspace_floats(p: Problem, kn, backward: bool) -> int:
    groups = kn.PROGRAMS // kn.SPLIT
    return params_offset(p, kn) + (2 * groups * p.L if backward else 0)


def _head(name: str, p: Problem, kn, params: list, col_names: list) -> list[str]:
    """Signature, the program's group and chunk, its columns and their offsets."""
    sp, bl, ch = kn.SPLIT, kn.BLOCK_L, chunk(kn)
    sp2 = 1 << max(0, (sp - 1).bit_length())
    ar = f"tl.arange(0, {bl})" + (".to(tl.int64)" if p.big else "")
    L = (
        [POLL_HELPERS]
        + header(name, params)
        + [
            f"{IND}pid = {pid_expr(p)}",
            f"{IND}grp = pid // {sp}",
            f"{IND}sl = pid % {sp}",
            f"{IND}cols = sl * {ch} + {ar}",
            f"{IND}cmask = (cols < {p.L})" + (f" & ({ar} < {ch})" if ch < bl else ""),
            f"{IND}kk = tl.arange(0, {sp2})",
            f"{IND}kmask = kk < {sp}",
            f"{IND}mask = cmask",
            f"{IND}WSI = WS.to(tl.pointer_type(tl.int64))",
        ]
    )
    return L + p.col_offsets("cols", col_names, IND)


def _next_offsets(p: Problem, var: str, names: list, indent: str) -> list[str]:
    """Row offsets of row ``var`` as ``noff_<name>`` (the prefetched row's)."""
    return [re.sub(r"^(\s*)off_", r"\1noff_", ln) for ln in p.row_offsets(var, names, indent)]


def _fetch(p: Problem, loads: dict, prefix: str, row: str, indent: str) -> list[str]:
    """Lines loading each ``loads`` entry (variable -> tensor names summed; a str: a
    per-row statistic, one float32 scalar) at row ``row`` (offsets ``{prefix}off_<name>``),
    zero past the last row. A vector of one tensor stays in its storage type as
    ``<var>_raw`` (a bfloat16 row held across the wait takes half the registers); a sum
    is float32."""
    out = []
    for var, names in loads.items():
        if isinstance(names, str):
            out.append(
                f"{indent}{var} = tl.load({names} + {prefix}off_{names}, "
                f"mask={row} < {p.R}, other=0.0).to(tl.float32)"
            )
            continue
        cvt = ".to(tl.float32)" if len(names) > 1 else ""
        terms = [
            f"tl.load({n} + {prefix}off_{n} + coff_{n}, mask=cmask & ({row} < {p.R}), "
            f'other=0.0, eviction_policy="evict_first"){cvt}'
            for n in names
        ]
        out.append(f"{indent}{var}_raw = {' + '.join(terms)}")
    return out


def _fetch_next(p: Problem, loads: dict, names: list, groups: int, indent: str) -> list[str]:
    """Lines loading row ``row + groups`` (the group's next) into ``<var>_next(_raw)``."""
    nxt = {f"{v}_next": n for v, n in loads.items()}
    return (
        [f"{indent}nrow = row + {groups}"]
        + _next_offsets(p, "nrow", names, indent)
        + _fetch(p, nxt, "n", "nrow", indent)
    )


def _partials(sp: int, a: str, b: str | None, indent: str) -> list[str]:
    """Publish this chunk's partials (tagged with row + 1)."""
    out = publish("WSI", f"(row * {sp} + sl) * 2", a, "tag", indent)
    return out + (publish("WSI", f"(row * {sp} + sl) * 2 + 1", b, "tag", indent) if b else [])


def _poll(
    sp: int, words: int, reduce: str, outs: list, indent: str, row: str = "row", tag: str = "tag"
) -> list[str]:
    """Wait for the row's SPLIT chunks (``words`` per chunk), combining them (``poll``)."""
    slots = [f"({row} * {sp} + kk) * 2 + {k}" for k in range(words)]
    return poll("WSI", slots, "kmask", tag, reduce, outs, indent)


def _loop(
    p: Problem, kn, loads: dict, row_names: list, prefetch: int, before_wait: list, after_wait: list
) -> list[str]:
    """The row loop: ``before_wait`` computes and publishes the partials, ``after_wait``
    waits for the row's others, combines them and writes. Without PREFETCH the loads open
    each iteration; PREFETCH=1 issues the next row's loads after this row's partials,
    PREFETCH=2 before them (at the top of the step)."""
    groups = kn.PROGRAMS // kn.SPLIT
    L = []
    names = sorted({n for v in loads.values() for n in ([v] if isinstance(v, str) else v)})
    if prefetch:
        L += _next_offsets(p, "grp", names, IND) + _fetch(p, loads, "n", "grp", IND)
    fetch_next = _fetch_next(p, loads, names, groups, IND2) if prefetch else []
    L.append(f"{IND}for row in range(grp, {p.R}, {groups}):")
    L += p.row_offsets("row", row_names, IND2)
    L.append(f"{IND2}tag = row + 1")
    if not prefetch:
        L += _fetch(p, loads, "", "row", IND2)
    L += [f"{IND2}{v} = {v}_raw.to(tl.float32)" for v, n in loads.items() if not isinstance(n, str)]
    if prefetch == 2:
        L += fetch_next
    L += before_wait
    if prefetch == 1:
        L += fetch_next
    L += after_wait
    if prefetch:
        L += [
            f"{IND2}{v}_raw = {v}_next_raw" if not isinstance(n, str) else f"{IND2}{v} = {v}_next"
            for v, n in loads.items()
        ]
    return L


def fwd_source(name: str, p: Problem, kn, f: FwdSpec) -> str:
    """Forward, one read: a program per (row group, chunk); see the module docstring."""
    sp, bl, I2 = kn.SPLIT, chunk(kn), IND2
    names = f.names()
    params = f.params()
    params = params[: len(names)] + ["WS"] + params[len(names) :]
    L = _head(name, p, kn, params, [n for n in names if n not in f.stats()])
    src = ["X"] + (["R"] if f.residual else [])
    L.append(f"{IND}nk = tl.minimum(tl.maximum({p.L} - kk * {bl}, 0), {bl}).to(tl.float32)")
    L.append(f"{IND}n_here = tl.minimum({p.L} - sl * {bl}, {bl}).to(tl.float32)")
    before = [I2 + store(p, "XS", False, "x", "cmask")] if f.store_sum else []
    if f.rms:
        before += _partials(sp, "tl.reduce(x * x, 0, _add_combine)", None, I2)
        after = _poll(sp, 1, "tl.reduce((_late, _v0), 0, _poll_add1)", ["q"], I2) + [
            f"{I2}ms = q / {p.L}"
        ]
        xc = "x"
    else:
        before += [
            f"{I2}m_here = tl.reduce(x, 0, _add_combine) / n_here",
            f"{I2}d = tl.where(cmask, x - m_here, 0.0)",
        ]
        before += _partials(sp, "m_here", "tl.reduce(d * d, 0, _add_combine)", I2)
        after = _poll(
            sp, 2, "tl.reduce((_late, nk, _v0, _v1), 0, _poll_chan)", ["_cnt", "mean", "q"], I2
        ) + [f"{I2}ms = q / {p.L}"]
        xc = "(x - mean)"
    after.append(f"{I2}rstd = 1.0 / tl.sqrt(ms + EPS)")
    after += _y_lines(p, f, False, xc, "rstd", I2)
    if f.training:
        if not f.rms:
            after.append(I2 + stat_store(p, "MEAN", "mean", "sl == 0"))
        after.append(I2 + stat_store(p, "INV_VARIANCE", "rstd", "sl == 0"))
    L += _loop(p, kn, {"x": src}, names, kn.PREFETCH, before, after)
    return "\n".join(L) + "\n"


def bwd_source(name: str, p: Problem, kn, rms: bool) -> str:
    """Backward (layer / RMS norm), one read: dx, and DSCALE / DBIAS partials per group."""
    sp, I2 = kn.SPLIT, IND2
    groups = kn.PROGRAMS // sp
    names = _names(rms)
    L = _head(name, p, kn, names + ["WS"], ["DY", "X", "SCALE", "DX"])
    L += [
        f"{IND}dw = tl.full([{kn.BLOCK_L}], 0.0, tl.float32)",
        f"{IND}db = tl.full([{kn.BLOCK_L}], 0.0, tl.float32)",
    ]
    # SCALE is read again for every row (an L1 / L2 hit) rather than held across the wait
    before = [
        f"{I2}w = tl.load(SCALE + coff_SCALE, mask=cmask, other=0.0).to(tl.float32)",
        f"{I2}xh = tl.where(cmask, {_centered(rms)} * rstd, 0.0)",
        f"{I2}g = dy * w",
    ]
    before += _partials(
        sp, "tl.reduce(g * xh, 0, _add_combine)", "tl.reduce(g, 0, _add_combine)", I2
    )
    before += [f"{I2}dw += dy * xh", f"{I2}db += dy"]
    c2 = "" if rms else " - c2"
    after = _poll(sp, 2, "tl.reduce((_late, _v0, _v1), 0, _poll_add2)", ["c1", "c2"], I2) + [
        f"{I2}c1 = c1 / {p.L}",
        f"{I2}c2 = c2 / {p.L}",
        I2 + store(p, "DX", False, f"rstd * (g{c2} - xh * c1)", "cmask", True),
    ]
    row_names = [n for n in names if n != "SCALE"]
    loads = {"dy": ["DY"], "x": ["X"], "rstd": "INV_VARIANCE", **({} if rms else {"mean": "MEAN"})}
    if kn.LAG:
        L += _lag_loop(p, kn, loads, row_names, before, rms)
    else:
        L += _loop(p, kn, loads, row_names, kn.PREFETCH, before, after)
    base = params_offset(p, kn)
    L += [
        f"{IND}out = WS + {base} + grp * {p.L} + cols",
        f"{IND}tl.store(out, dw, mask=cmask)",
        f"{IND}tl.store(out + {groups * p.L}, db, mask=cmask)",
    ]
    return "\n".join(L) + "\n"


def _lag_loop(p: Problem, kn, loads: dict, row_names: list, partials: list, rms: bool) -> list[str]:
    """The backward's row loop with the meeting one step late (LAG): step t computes and
    publishes row t's partials, then waits for row t - 1's (published a whole step ago by
    every program, so a program that ran a little behind no longer stalls the others) and
    writes row t - 1's dx from its bf16 values, held since. LAG=1 loads row t at the top
    of step t; LAG=2 loads it during step t - 1, before that step's wait (three rows
    held). The last step publishes a row past the last (masked loads: zeros) into spare
    rows of the workspace."""
    sp, groups, I, I2 = kn.SPLIT, kn.PROGRAMS // kn.SPLIT, IND, IND2
    vec = [v for v, n in loads.items() if not isinstance(n, str)]
    stat = [v for v, n in loads.items() if isinstance(n, str)]
    names = sorted({n for v in loads.values() for n in ([v] if isinstance(v, str) else v)})
    ahead = kn.LAG == 2

    def partial_lines(indent):  # row ``row``'s partials from ``<v>_raw`` and stats
        out = [f"{indent}tag = row + 1"] + [f"{indent}{v} = {v}_raw.to(tl.float32)" for v in vec]
        return out + [indent + ln[len(I2) :] for ln in partials]

    def shift(indent):
        return (
            [f"{indent}p_{v} = {v}" for v in stat]
            + [f"{indent}p_{v}_raw = {v}_raw" for v in vec]
            + [f"{indent}prow = row"]
        )

    c2 = "" if rms else " - c2"
    xh = "p_x" if rms else "(p_x - p_mean)"
    finish = [f"{I2}ptag = prow + 1"]
    finish += _poll(
        sp, 2, "tl.reduce((_late, _v0, _v1), 0, _poll_add2)", ["c1", "c2"], I2, "prow", "ptag"
    )
    finish += [f"{I2}p_{v} = p_{v}_raw.to(tl.float32)" for v in vec]
    finish += [re.sub(r"\boff_", "p_off_", ln) for ln in p.row_offsets("prow", ["DX"], I2)]
    finish += [
        f"{I2}w = tl.load(SCALE + coff_SCALE, mask=cmask, other=0.0).to(tl.float32)",
        f"{I2}p_xh = tl.where(cmask, {xh} * p_rstd, 0.0)",
        f"{I2}c1 = c1 / {p.L}",
        f"{I2}c2 = c2 / {p.L}",
        I2
        + store(p, "DX", False, f"p_rstd * (p_dy * w{c2} - p_xh * c1)", "cmask", True).replace(
            "+ off_DX", "+ p_off_DX"
        ),
    ]

    L = [f"{I}row = grp"] + p.row_offsets("row", row_names, I) + _fetch(p, loads, "", "row", I)
    L += partial_lines(I) + shift(I)
    if ahead:
        L += _fetch_next(p, loads, names, groups, I)
    L.append(f"{I}for row in range(grp + {groups}, {p.R + groups}, {groups}):")
    if ahead:
        L += [f"{I2}{v}_raw = {v}_next_raw" for v in vec] + [f"{I2}{v} = {v}_next" for v in stat]
    else:
        L += p.row_offsets("row", row_names, I2) + _fetch(p, loads, "", "row", I2)
    L += partial_lines(I2)
    if ahead:
        L += _fetch_next(p, loads, names, groups, I2)
    return L + finish + shift(I2)
