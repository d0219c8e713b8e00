"""Triton sources of the LRN engine (the math is in ``ops/lrn.py``).

A problem is every element of X's dims, walked as one flat index ``e`` in the order of
X's strides (largest first), so consecutive lanes read consecutive memory of X in any
layout (NCHW: along W; NHWC: along C). ``e`` splits into one index per dim; each tensor
is addressed through its own strides, baked into the source as literals.

- Forward (one kernel): per element, the window sum of d^2 = (x [- means])^2 by shifted,
  masked loads (runtime loops over the n offsets of each window axis; the neighbours
  come from L1/L2, each element is read from DRAM about once), then
  y = d * exp2(-beta * log2(S)).
- Backward (two kernels): the first computes S as above and stores P = S^-beta and
  R = dy * d * P / S (float32) to the workspace, indexed by ``e``; the second sums R over
  the mirrored window (neighbour along dim a: e + o * W_a, W_a being a's stride in the
  walk) and writes dx = dy * P - 2 alpha beta / n^s * d * sum R (and dmeans = -dx).
"""

from __future__ import annotations

from ...ops.lrn import extents
from ..fusion._codegen import TL_TYPE, index_decomposition, offset_expr

INT32_LIMIT = 2**31 - 1


class Problem:
    """One lrn-family node: dims, the window axes and size, each tensor's strides/type."""

    def __init__(self, node, descs: dict):
        x = descs["X"]
        self.dims = tuple(x.dims)
        self.rank = len(self.dims)
        self.axes = (1,) if node.kind.startswith("lrn") else tuple(range(2, self.rank))
        self.n, self.alpha, self.beta, self.k = (
            node.lrn_n,
            node.lrn_alpha,
            node.lrn_beta,
            node.lrn_k,
        )
        self.lo, self.hi = extents(self.n)
        self.coef = self.alpha / self.n ** len(self.axes)
        self.total = 1
        for d in self.dims:
            self.total *= d
        # the walk: dims by X's stride, largest first (ties: the later dim inner)
        self.order = sorted(range(self.rank), key=lambda i: (-x.strides[i], i))
        self.walk_stride = {}
        w = 1
        for i in reversed(self.order):
            self.walk_stride[i] = w
            w *= self.dims[i]
        self.strides = {r: tuple(d.strides) for r, d in descs.items()}
        self.types = {r: d.data_type for r, d in descs.items()}
        self.big = self.total >= INT32_LIMIT // 2 or any(
            d.span >= INT32_LIMIT for d in descs.values()
        )

    def head(self, name: str, params: list, block: int) -> list[str]:
        """Signature, flat index, per-dim indices ``i<dim>`` and offsets ``off_<ROLE>``."""
        ind = "    "
        pid = "tl.program_id(0).to(tl.int64)" if self.big else "tl.program_id(0)"
        L = [
            "@triton.jit",
            f"def {name}({', '.join(params)}):",
            f"{ind}e = {pid} * {block} + tl.arange(0, {block})",
            f"{ind}emask = e < {self.total}",
        ]
        L += index_decomposition("e", [self.dims[i] for i in self.order], "w", ind)
        for k, i in enumerate(self.order):
            L.append(f"{ind}i{i} = w{k}")
        names = [f"i{i}" for i in range(self.rank)]
        for role, st in self.strides.items():
            L.append(f"{ind}off_{role} = {offset_expr(names, st, 'e * 0')}")
        return L

    def window_loop(self, lo: int, hi: int, body, ind: str = "    ") -> list[str]:
        """Nested loops over the window offsets ``o<axis>`` in [-lo, hi] of every window
        axis, with ``ok`` the in-bounds mask; ``body(indent)`` gives the inner lines."""
        L = []
        for depth, a in enumerate(self.axes):
            L.append(f"{ind}{'    ' * depth}for o{a} in range({-lo}, {hi + 1}):")
        inner = ind + "    " * len(self.axes)
        conds = " & ".join(
            f"(i{a} + o{a} >= 0) & (i{a} + o{a} < {self.dims[a]})" for a in self.axes
        )
        L.append(f"{inner}ok = emask & {conds}")
        return L + body(inner)

    def shift(self, role: str) -> str:
        """The offset of the window element ``o`` from ``off_<role>``."""
        st = self.strides[role]
        return " + ".join(f"o{a} * {st[a]}" for a in self.axes)

    def load(self, role: str, mask: str, shifted: bool = False, last: bool = False) -> str:
        off = f"off_{role} + {self.shift(role)}" if shifted else f"off_{role}"
        ev = ', eviction_policy="evict_first"' if last else ""
        return f"tl.load({role} + {off}, mask={mask}, other=0.0{ev}).to(tl.float32)"

    def store(self, role: str, value: str) -> str:
        return (
            f"tl.store({role} + off_{role}, ({value}).to({TL_TYPE[self.types[role]]}), mask=emask)"
        )


def _scale_lines(p: Problem, means: bool, block: int) -> list[str]:
    """Lines leaving ``s`` = k + coef * window sum of d^2 and ``d`` at the element."""
    ind = "    "

    def body(i):
        L = [f"{i}v = {p.load('X', 'ok', True)}"]
        if means:
            L.append(f"{i}v = v - {p.load('MEANS', 'ok', True)}")
        return L + [f"{i}acc += v * v"]

    L = [f"{ind}acc = tl.full([{block}], 0.0, tl.float32)"]
    L += p.window_loop(p.lo, p.hi, body)
    L.append(f"{ind}d = {p.load('X', 'emask')}")
    if means:
        L.append(f"{ind}d = d - {p.load('MEANS', 'emask')}")
    L.append(f"{ind}s = {float(p.k)!r} + {float(p.coef)!r} * acc")
    return L


def forward_source(name: str, p: Problem, block: int, means: bool) -> str:
    """One program per ``block`` elements: y = d * S^-beta."""
    ind = "    "
    params = ["X", "MEANS", "Y"] if means else ["X", "Y"]
    L = p.head(name, params, block)
    L += _scale_lines(p, means, block)
    L.append(f"{ind}y = d * tl.exp2({-float(p.beta)!r} * tl.log2(s))")
    L.append(ind + p.store("Y", "y"))
    return "\n".join(L) + "\n"


def stats_source(name: str, p: Problem, block: int, means: bool) -> str:
    """Backward, first kernel: WS[e] = P = S^-beta, WS[total + e] = R = dy d P / S."""
    ind = "    "
    params = ["DY", "X", "MEANS", "WS"] if means else ["DY", "X", "WS"]
    L = p.head(name, params, block)
    L += _scale_lines(p, means, block)
    L += [
        f"{ind}pw = tl.exp2({-float(p.beta)!r} * tl.log2(s))",
        f"{ind}dy = {p.load('DY', 'emask')}",
        f"{ind}tl.store(WS + e, pw, mask=emask)",
        f"{ind}tl.store(WS + {p.total} + e, dy * d * pw / s, mask=emask)",
    ]
    return "\n".join(L) + "\n"


def grad_source(name: str, p: Problem, block: int, means: bool) -> str:
    """Backward, second kernel: dx = dy P - 2 alpha beta / n^s d sum_{mirrored window} R."""
    ind = "    "
    params = ["DY", "X", "MEANS", "DX", "DMEANS", "WS"] if means else ["DY", "X", "DX", "WS"]
    L = p.head(name, params, block)
    shift = " + ".join(f"o{a} * {p.walk_stride[a]}" for a in p.axes)

    def body(i):
        return [f"{i}t += tl.load(WS + {p.total} + e + {shift}, mask=ok, other=0.0)"]

    L.append(f"{ind}t = tl.full([{block}], 0.0, tl.float32)")
    L += p.window_loop(p.hi, p.lo, body)
    L += [f"{ind}d = {p.load('X', 'emask', last=True)}"]
    if means:
        L.append(f"{ind}d = d - {p.load('MEANS', 'emask', last=True)}")
    L += [
        f"{ind}dy = {p.load('DY', 'emask', last=True)}",
        f"{ind}pw = tl.load(WS + e, mask=emask, other=0.0)",
        f"{ind}dd = dy * pw - {2.0 * p.beta * p.coef!r} * d * t",
        ind + p.store("DX", "dd"),
    ]
    if means:
        L.append(ind + p.store("DMEANS", "-dd"))
    return "\n".join(L) + "\n"


def recompute_source(name: str, p: Problem, block: int) -> str:
    """LRN backward in one kernel (cross-channel only): for each channel c of the mirrored
    window, S_c again from its own window of x (n^2 loads per element, from L1/L2), then
    dx = dy P - 2 alpha beta / n * x * sum_c dy_c x_c S_c^(-beta-1). No workspace."""
    ind, ind2, ind3 = "    ", "        ", "            "
    (a,) = p.axes
    size, sx, sdy = p.dims[a], p.strides["X"][a], p.strides["DY"][a]
    L = p.head(name, ["DY", "X", "DX"], block)
    L += [
        f"{ind}t = tl.full([{block}], 0.0, tl.float32)",
        f"{ind}pw = tl.full([{block}], 0.0, tl.float32)",
        f"{ind}for o in range({-p.hi}, {p.lo + 1}):",
        f"{ind2}okc = emask & (i{a} + o >= 0) & (i{a} + o < {size})",
        f"{ind2}acc = tl.full([{block}], 0.0, tl.float32)",
        f"{ind2}for o2 in range({-p.lo}, {p.hi + 1}):",
        f"{ind3}ok = okc & (i{a} + o + o2 >= 0) & (i{a} + o + o2 < {size})",
        f"{ind3}v = tl.load(X + off_X + (o + o2) * {sx}, mask=ok, other=0.0).to(tl.float32)",
        f"{ind3}acc += v * v",
        f"{ind2}s = {float(p.k)!r} + {float(p.coef)!r} * acc",
        f"{ind2}ps = tl.exp2({-float(p.beta)!r} * tl.log2(s))",
        f"{ind2}pw = tl.where(o == 0, ps, pw)",
        f"{ind2}dyc = tl.load(DY + off_DY + o * {sdy}, mask=okc, other=0.0).to(tl.float32)",
        f"{ind2}xc = tl.load(X + off_X + o * {sx}, mask=okc, other=0.0).to(tl.float32)",
        f"{ind2}t += dyc * xc * ps / s",
        f"{ind}d = {p.load('X', 'emask', last=True)}",
        f"{ind}dy = {p.load('DY', 'emask', last=True)}",
        f"{ind}dd = dy * pw - {2.0 * p.beta * p.coef!r} * d * t",
        ind + p.store("DX", "dd"),
    ]
    return "\n".join(L) + "\n"
