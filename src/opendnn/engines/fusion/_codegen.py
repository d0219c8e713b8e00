"""Triton source generation for fused pointwise graphs, reductions and epilogues.

The iteration space ``S`` is the dims of the largest pointwise output. Every tensor is
addressed in ``S`` through its strides (a broadcast dimension gets stride 0). Adjacent
dimensions merge when every tensor is contiguous across them, so a packed problem becomes
1-D and its loads are plain ``base + idx`` (vectorized). The source hash is the kernel
cache key, and the source depends on the problem only through its class (see ``Sizes``):
rank after merging, data types, the operations, which dims broadcast (stride 0) or are
contiguous (stride 1), whether tiles divide the extents. Element counts, sizes, strides
and offsets are runtime arguments, so graphs that differ only in sizes share one source,
one module and one compiled kernel per Triton specialization.

Reductions split ``S`` into kept dims (the output's dims) and reduced dims. A program owns
``BLOCK_KEPT`` outputs and walks the reduced extent in ``BLOCK_RED`` chunks, keeping a
[BLOCK_KEPT, BLOCK_RED] accumulator per reduction that is folded once at the end. With
``SPLIT > 1`` the reduced extent is cut into SPLIT slices whose partial results go to the
workspace ([n_reductions, SPLIT, kept] float32) and a second kernel combines them.
"""

from __future__ import annotations

import hashlib
import math

from ...enums import DataType
from ...enums import PointwiseMode as M
from ...ops.pointwise import DEFAULT_ATTRS, MODES
from ...ops.reduction import TABLE as RED_TABLE

TL_TYPE = {
    DataType.FLOAT: "tl.float32",
    DataType.DOUBLE: "tl.float64",
    DataType.HALF: "tl.float16",
    DataType.BFLOAT16: "tl.bfloat16",
    DataType.INT8: "tl.int8",
    DataType.UINT8: "tl.uint8",
    DataType.BOOLEAN: "tl.int1",
    DataType.INT32: "tl.int32",
    DataType.INT64: "tl.int64",
}


def padded_strides(desc, rank: int) -> list[int]:
    """Strides of ``desc`` seen in a rank-``rank`` space; broadcast dims get 0."""
    pad = rank - len(desc.dims)
    dims = [1] * pad + list(desc.dims)
    strides = [0] * pad + list(desc.strides)
    return [0 if d == 1 else s for d, s in zip(dims, strides)]


def collapse(sizes: list, strides: dict, classes: list, pinned: set) -> tuple:
    """Merge adjacent dims (outer i, inner i+1) when every tensor's stride satisfies
    ``st[i] == st[i+1] * sizes[i+1]``, classes agree and neither dim is pinned. Size-1
    dims are dropped. Returns (sizes, strides, classes, origin) with origin[k] the list of
    original dims that merged into k."""
    dims = [[i] for i in range(len(sizes)) if sizes[i] != 1 or i in pinned]
    out_sizes = [sizes[d[0]] for d in dims]
    out_strides = {u: [s[d[0]] for d in dims] for u, s in strides.items()}
    out_classes = [classes[d[0]] for d in dims]
    k = len(dims) - 2
    while k >= 0:
        i, j = k, k + 1
        ok = (
            out_classes[i] == out_classes[j]
            and not (set(dims[i]) | set(dims[j])) & pinned
            and all(st[i] == st[j] * out_sizes[j] for st in out_strides.values())
        )
        if ok:
            dims[i] = dims[i] + dims[j]
            out_sizes[i] *= out_sizes[j]
            for st in out_strides.values():
                st[i] = st[j]
                del st[j]
            del dims[j], out_sizes[j], out_classes[j]
        k -= 1
    return out_sizes, out_strides, out_classes, dims


class Sizes:
    """The integer parameters (sizes, strides, offsets) of one generated kernel.

    ``sizes(name, value)`` is the expression for ``value`` in the source: the literal where
    the value is a class of the problem -- 0 (a broadcast, an empty extent) or 1 (a
    contiguous stride, a size-1 axis) -- and parameter ``name`` otherwise, passed at launch.
    Triton specializes an integer argument on ``== 1`` and on divisibility by 16, which is
    what its alignment analysis needs to vectorize loads whose bound or stride is such a
    value. A value that is even but not a multiple of 16 (a bf16 row of 1000) would look
    odd to it, and its loads go element-wise: a flat bf16 add of 2^24 + 8 elements ran at
    1.27 TB/s with the count as a plain argument against 2.5 TB/s with it as a literal
    (H100; the count passed in units of 8: 2.5). So the values marked ``align`` -- bounds
    and strides along which memory is contiguous -- are passed in units of their common
    power-of-two factor (2, 4 or 8; 16 and more Triton sees itself), and the source
    multiplies them back by that unit, a literal: at most four sources per class.
    """

    def __init__(self, wide: bool = False):
        self.wide = wide  # int64 index math (some extent >= 2^31)
        self.names: list = []
        self.values: dict = {}
        self.aligned: set = set()

    def __call__(self, name: str, value, align: bool = False) -> str:
        value = int(value)
        if value in (0, 1):
            return str(value)
        if name in self.values and self.values[name] != value:
            raise ValueError(f"kernel size {name} given twice: {self.values[name]}, {value}")
        if name not in self.values:
            self.names.append(name)
            self.values[name] = value
        if align:
            self.aligned.add(name)
        return name

    def unit(self) -> int:
        g = 16
        for n in self.aligned:
            g = math.gcd(g, self.values[n])
        return 1 if g == 16 else g

    def params(self) -> list:
        """The kernel's parameters, in launch order."""
        u = self.unit()
        return [f"{n}_u" if u > 1 and n in self.aligned else n for n in self.names]

    def args(self) -> list:
        """The launch template entries matching ``params``."""
        u = self.unit()
        return [
            ("int", self.values[n] // u if n in self.aligned else self.values[n])
            for n in self.names
        ]

    def prologue(self, indent: str) -> list:
        """Lines restoring the aligned values from their units (first in the kernel)."""
        u = self.unit()
        if u == 1:
            return []
        cast = ".to(tl.int64)" if self.wide else ""
        return [f"{indent}{n} = {n}_u{cast} * {u}" for n in self.names if n in self.aligned]


def name_by_digest(source: str, base: str) -> tuple:
    """(source, name): kernel ``base`` renamed ``base_<digest of its source>`` -- the name
    tells kernels apart in a profile while the source stays free of the problem's sizes."""
    tag = hashlib.sha256(source.encode()).hexdigest()[:12]
    name = f"{base}_{tag}"
    return source.replace(f"def {base}(", f"def {name}("), name


def _lit(v) -> str:
    v = float(v)
    if math.isinf(v):
        return "float('inf')" if v > 0 else "float('-inf')"
    if math.isnan(v):
        return "float('nan')"
    return repr(v)


class Emitter:
    """Emits the statements computing every pointwise node of ``graph``.

    ``load(uid)`` must return an expression for a graph input; ``index_of(axis)`` an
    expression for the index along an original axis of S (for GEN_INDEX).
    """

    def __init__(self, graph, compute: str, load, index_of, indent: str = "    "):
        self.graph, self.ct, self.load, self.index_of, self.ind = (
            graph,
            compute,
            load,
            index_of,
            indent,
        )
        self.lines: list[str] = []
        self.var: dict = {}

    def value(self, uid) -> str:
        if uid not in self.var:
            name = f"v{uid}"
            self.lines.append(f"{self.ind}{name} = {self.load(uid)}")
            self.var[uid] = name
        return self.var[uid]

    def emit_node(self, node) -> str:
        out_uid = node.outputs["OUT_0"]
        out = self.graph.tensors[out_uid]
        name = f"v{out_uid}"
        attrs = {**DEFAULT_ATTRS, **node.op_attrs()}
        if node.mode == M.GEN_INDEX and out.dims[attrs["axis"]] == 1:
            expr = f"tl.full([1], 0, {self.ct})"  # a size-1 axis: its index is 0
        elif node.mode == M.GEN_INDEX:
            expr = f"({self.index_of(attrs['axis'], len(out.dims))}).to({self.ct})"
        else:
            spec = MODES[node.mode]
            args = [self.value(u) for u in node.inputs.values()]
            expr = spec.triton(*args, attrs)
            if spec.boolean:
                expr = f"({expr}).to({self.ct})"
        if out.is_virtual and out.data_type == DataType.BFLOAT16:
            expr = f"_to_bf16({expr}).to({self.ct})"  # typed intermediate, rounded
        elif out.is_virtual and out.data_type == DataType.HALF:
            expr = f"({expr}).to({TL_TYPE[out.data_type]}).to({self.ct})"  # typed intermediate
        self.lines.append(f"{self.ind}{name} = {expr}")
        self.var[out_uid] = name
        return name


SATURATE = {DataType.INT8: (-128, 127), DataType.UINT8: (0, 255)}


def store_expr(ptr: str, off: str, value: str, desc, mask: str | None) -> str:
    """A store; ``mask`` None when the tile provably lies inside the tensor. Conversions to
    int8 / uint8 / int32 saturate (then truncate toward zero), as the reference does: an
    out-of-range value is clamped, never wrapped."""
    m = f", mask={mask}" if mask else ""
    if desc.data_type == DataType.INT32:  # float32 reaches 2^31 but not 2^31 - 1
        v = f"tl.maximum({value}, -2147483648.0)"
        return (
            f"tl.store({ptr} + {off}, tl.where({v} >= 2147483648.0, 2147483647, "
            f"({v}).to(tl.int32)){m})"
        )
    if desc.data_type in SATURATE:
        lo, hi = SATURATE[desc.data_type]
        value = f"tl.minimum(tl.maximum({value}, {float(lo)}), {float(hi)})"
    if desc.data_type == DataType.BFLOAT16:  # _to_bf16: launch.py's kernel header
        return f"tl.store({ptr} + {off}, _to_bf16({value}){m})"
    return f"tl.store({ptr} + {off}, ({value}).to({TL_TYPE[desc.data_type]}){m})"


def load_expr(ptr: str, off: str, mask: str | None, compute: str, stream: bool = False) -> str:
    """A load; ``stream`` marks data read exactly once (evict it first from L2: measured
    +9% read bandwidth for bf16 reductions on the H100, docs/design/fusion.md)."""
    m = f", mask={mask}, other=0" if mask else ""
    e = ', eviction_policy="evict_first"' if stream else ""
    return f"tl.load({ptr} + {off}{m}{e}).to({compute})"


def index_decomposition(var: str, sizes: list, prefix: str, indent: str) -> list[str]:
    """Lines splitting flat index ``var`` (row-major over ``sizes``) into ``{prefix}{k}``."""
    if len(sizes) == 1:
        return [f"{indent}{prefix}0 = {var}"]
    lines = [f"{indent}_r = {var}"]
    for k in range(len(sizes) - 1, 0, -1):
        lines.append(f"{indent}{prefix}{k} = _r % {sizes[k]}")
        lines.append(f"{indent}_r = _r // {sizes[k]}")
    lines.append(f"{indent}{prefix}0 = _r")
    return lines


def offset_expr(idx_names: list, strides: list, zero: str = "0") -> str:
    """Sum of index * stride; ``zero`` (a tensor expression) when every stride is 0, so
    pointers stay blocks of the right shape."""
    terms = []
    for name, s in zip(idx_names, strides):
        if s in (0, "0"):
            continue
        terms.append(name if s in (1, "1") else f"{name} * {s}")
    return " + ".join(terms) if terms else zero


# min / max propagate NaN, as torch.amin / amax (compiled, Triton's default drops it)
COMBINE = {
    "add": "{a} + {b}",
    "mul": "{a} * {b}",
    "min": "tl.minimum({a}, {b}, propagate_nan=tl.PropagateNan.ALL)",
    "max": "tl.maximum({a}, {b}, propagate_nan=tl.PropagateNan.ALL)",
}
FOLD = {
    "add": "tl.reduce({x}, {ax}, _add_combine)",
    "mul": "tl.reduce({x}, {ax}, _mul_combine)",
    "min": "tl.reduce({x}, {ax}, _min_combine)",
    "max": "tl.reduce({x}, {ax}, _max_combine)",
}
PRE = {
    "x": "{x}",
    "abs": "tl.abs({x})",
    "square": "{x} * {x}",
    "nonzero_or_one": "tl.where({x} == 0, 1.0, {x})",
}

# Combine functions for tl.reduce, defined in the generated module itself: tl.sum & co.
# are @jit helpers of triton.language that exist only compiled, not in the interpreter.
COMBINE_HELPERS = """
@triton.jit
def _add_combine(a, b):
    return a + b


@triton.jit
def _mul_combine(a, b):
    return a * b


@triton.jit
def _min_combine(a, b):
    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _max_combine(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)
"""


# ---- cooperative kernels (programs of one row meeting through a counter) ---------------------
def zero_flags_source(name: str, offset: int, count: int) -> str:
    """A kernel zeroing ``count`` float32 arrival counters at WS[offset:]: a cooperative
    run must start from 0, and the workspace is the user's (grid: ceil(count / 1024))."""
    return (
        "\n".join(
            [
                "@triton.jit",
                f"def {name}(WS):",
                "    i = tl.program_id(0) * 1024 + tl.arange(0, 1024)",
                f"    tl.store(WS + {offset} + i, tl.full([1024], 0.0, tl.float32), mask=i < {count})",
            ]
        )
        + "\n"
    )


def arrive(counter: str, indent: str) -> list[str]:
    """Lines publishing the partials this program stored just before (a barrier: every
    thread's store is issued) and counting it in at ``counter`` (release)."""
    return [f"{indent}tl.debug_barrier()", f'{indent}tl.atomic_add({counter}, 1.0, sem="release")']


def wait(counter: str, count: int, indent: str) -> list[str]:
    """Lines spinning until ``count`` programs have arrived at ``counter`` (acquire): the
    partials they published are then visible (read them with cache_modifier=".cg")."""
    return [
        f'{indent}while tl.atomic_add({counter}, 0.0, sem="acquire") < {count}:',
        f"{indent}    pass",
        f"{indent}tl.debug_barrier()",
    ]


def publish(ws: str, slot: str, value: str, tag: str, indent: str) -> list[str]:
    """Lines storing float32 scalar ``value`` to int64 word ``slot`` of ``ws`` (an int64
    pointer) with ``tag`` (a positive int64) in its low half: one 64-bit relaxed exchange,
    so that a reader who sees the tag sees the value -- no fence, no counter."""
    return [
        f"{indent}_bits = {value}.to(tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF",
        f'{indent}tl.atomic_xchg({ws} + {slot}, (_bits << 32) | {tag}, sem="relaxed")',
    ]


def poll(
    ws: str, slots: list, mask: str, tag: str, reduce: str, outs: list, indent: str
) -> list[str]:
    """Lines loading the int64 words ``slots`` (vector expressions, one per published
    value) of ``ws`` until every one under ``mask`` carries ``tag``, combining them as they
    come: the values decode to ``_v0, _v1, ...`` (0 where masked) and ``reduce`` -- one
    ``tl.reduce`` over a tuple whose first member is the vector ``_late`` -- sets ``_n``
    (words not yet published) and ``outs``. The check and the values must come from the
    same reduction: a small vector is held in several copies (threads, warps), a
    reduction reads one of each, and a copy it did not read may predate the tag."""
    loads = [
        f"{indent}_w{k} = tl.load({ws} + {sl}, mask={mask}, other=0, volatile=True)"
        for k, sl in enumerate(slots)
    ]
    late = " | ".join(f"((_w{k} & 0xFFFFFFFF) != {tag})" for k in range(len(slots)))
    body = [
        f"{indent}_v{k} = tl.where({mask}, (_w{k} >> 32).to(tl.int32).to(tl.float32, "
        "bitcast=True), 0.0)"
        for k in range(len(slots))
    ]
    body += [
        f"{indent}_late = tl.where({mask} & ({late}), 1, 0)",
        f"{indent}_n, {', '.join(outs)} = {reduce}",
    ]
    inner = [indent + "    " + ln[len(indent) :] for ln in loads + body]
    return loads + body + [f"{indent}while _n > 0:"] + inner


# combine functions for ``poll``'s reductions: (not yet published, values...)
POLL_HELPERS = """
@triton.jit
def _poll_add1(l1, a1, l2, a2):
    return tl.maximum(l1, l2), a1 + a2


@triton.jit
def _poll_add2(l1, a1, b1, l2, a2, b2):
    return tl.maximum(l1, l2), a1 + a2, b1 + b2


@triton.jit
def _poll_softmax(l1, m1, s1, l2, m2, s2):
    # (max, sum of exp(x - max)) pairs; -inf maxima (empty or masked) shift by 0
    m = tl.maximum(m1, m2)
    sh = tl.where(m == float("-inf"), 0.0, m)
    return tl.maximum(l1, l2), m, s1 * tl.exp(m1 - sh) + s2 * tl.exp(m2 - sh)


@triton.jit
def _poll_chan(l1, n1, m1, q1, l2, n2, m2, q2):
    # (count, mean, sum of squared deviations) triples, Chan et al.; count 0 = empty
    n = n1 + n2
    r = tl.where(n > 0, n2 / tl.maximum(n, 1.0), 0.0)
    d = m2 - m1
    return tl.maximum(l1, l2), n, m1 + d * r, q1 + q2 + d * d * n1 * r
"""


def reduction_parts(mode):
    pre, combine, ident, post = RED_TABLE[mode]
    return pre, combine, ident, post
