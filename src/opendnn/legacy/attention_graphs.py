"""Checks, buffer carving and the cached graphs behind the multi-head attention calls
(``attention_calls.py`` has the calls and the algorithm; ``attention.py`` the model,
the descriptors and the weight layout)."""

from __future__ import annotations

import dataclasses

import torch

from ..enums import DataType, HeurMode
from ..errors import Status
from ..graph.graph import Graph
from ..runtime.lru import LRU, legacy_cache_size
from ..tensor import as_data_type, to_torch_dtype
from .attention import AttnDescriptor, SeqDataAxis, SeqDataDescriptor, _unsupported
from .common import check

T, N, M, V = SeqDataAxis.TIME, SeqDataAxis.BATCH, SeqDataAxis.BEAM, SeqDataAxis.VECT
_cache = LRU(legacy_cache_size)


@dataclasses.dataclass(frozen=True)
class Problem:
    """The sizes of one call: N batch entries, M query beams, M_kv K/V beams (1 or M),
    T_q / T_kv time steps; lengths per (n, m) and per (n, m_kv), beam fastest."""

    n: int
    m: int
    m_kv: int
    t_q: int
    t_kv: int
    lens_q: tuple
    lens_kv: tuple


# ---- checks ------------------------------------------------------------------------------
def _problem(op, a, descs: dict) -> Problem:
    check(
        isinstance(a, AttnDescriptor) and a.is_set(),
        "the attention descriptor was never set (set_attn_descriptor)",
        op,
        "attn_desc",
        Status.BAD_PARAM_NOT_FINALIZED,
    )
    for name, d in descs.items():
        check(
            isinstance(d, SeqDataDescriptor) and d.is_set(),
            "descriptor was never set (set_seq_data_descriptor)",
            op,
            name,
            Status.BAD_PARAM_NOT_FINALIZED,
        )
        check(
            d.data_type == a.data_type,
            f"data type {d.data_type.name} differs from the "
            f"attention descriptor's {a.data_type.name}",
            op,
            name,
            Status.BAD_PARAM,
        )
    q, k, v, o = (descs[x] for x in descs)
    nq, nk, nv, no = list(descs)
    for d, name, want in (
        (q, nq, a.q_size),
        (k, nk, a.k_size),
        (v, nv, a.v_size),
        (o, no, a.o_len),
    ):
        check(
            d.dims[V] == want,
            f"VECT size {d.dims[V]} must be {want}",
            op,
            name,
            Status.BAD_PARAM_SHAPE_MISMATCH,
        )
    for (d, name), (like, lname) in (((o, no), (q, nq)), ((v, nv), (k, nk))):
        check(
            d.dims[:3] == like.dims[:3],
            f"TIME, BATCH, BEAM {list(d.dims[:3])} must equal {lname}'s {list(like.dims[:3])}",
            op,
            name,
            Status.BAD_PARAM_SHAPE_MISMATCH,
        )
        check(
            d.seq_lengths == like.seq_lengths,
            f"sequence lengths must equal {lname}'s",
            op,
            name,
            Status.BAD_PARAM_SHAPE_MISMATCH,
        )
    check(
        k.dims[N] == q.dims[N],
        f"BATCH {k.dims[N]} must equal {nq}'s {q.dims[N]}",
        op,
        nk,
        Status.BAD_PARAM_SHAPE_MISMATCH,
    )
    m_kv = q.dims[M] if a.one_to_one else 1
    check(
        k.dims[M] == m_kv,
        f"BEAM {k.dims[M]} must be {m_kv} (QUERYMAP_"
        f"{'ONE_TO_ONE: the query beam' if a.one_to_one else 'ALL_TO_ONE: 1'})",
        op,
        nk,
        Status.BAD_PARAM_SHAPE_MISMATCH,
    )
    for d, name, most, what in (
        (q, nq, a.qo_max_seq_length, "qo_max_seq_length"),
        (k, nk, a.kv_max_seq_length, "kv_max_seq_length"),
    ):
        check(
            d.dims[T] <= most,
            f"TIME {d.dims[T]} exceeds {what} {most}",
            op,
            name,
            Status.BAD_PARAM_OUT_OF_BOUND,
        )
    check(
        q.dims[N] <= a.max_batch_size,
        f"BATCH {q.dims[N]} exceeds max_batch_size {a.max_batch_size}",
        op,
        nq,
        Status.BAD_PARAM_OUT_OF_BOUND,
    )
    check(
        q.dims[M] <= a.max_beam_size,
        f"BEAM {q.dims[M]} exceeds max_beam_size {a.max_beam_size}",
        op,
        nq,
        Status.BAD_PARAM_OUT_OF_BOUND,
    )
    for what, size in (("q_len", a.q_len), ("v_len", a.v_len)):
        if size > 256:
            raise _unsupported(
                f"{op}: per-head {what} {size} exceeds 256 (the sdpa node's largest head dim)",
                op,
                Status.NOT_SUPPORTED_SHAPE,
            )
    return Problem(q.dims[N], q.dims[M], m_kv, q.dims[T], k.dims[T], q.seq_lengths, k.seq_lengths)


def _seq_view(buf, d: SeqDataDescriptor, op, name) -> torch.Tensor:
    """``buf`` as [N, M, T, V] with the descriptor's packed strides."""
    check(buf is not None, "is NULL", op, name, Status.BAD_PARAM_NULL_POINTER)
    check(
        isinstance(buf, torch.Tensor),
        f"must be a torch tensor, got {type(buf).__name__}",
        op,
        name,
        Status.BAD_PARAM,
    )
    check(
        buf.dtype == to_torch_dtype(d.data_type),
        f"dtype {buf.dtype} does not match the descriptor's {d.data_type.name}",
        op,
        name,
        Status.BAD_PARAM,
    )
    check(
        buf.is_contiguous() and buf.numel() >= d.numel,
        f"must be a contiguous buffer of at least {d.numel} elements (has {buf.numel()})",
        op,
        name,
        Status.BAD_PARAM_SIZE_INSUFFICIENT,
    )
    st = d.strides
    return buf.reshape(-1)[: d.numel].as_strided(
        (d.dims[N], d.dims[M], d.dims[T], d.dims[V]), (st[N], st[M], st[T], st[V])
    )


def _dev_lengths(dev, want: tuple, op, name) -> None:
    check(dev is not None, "is NULL", op, name, Status.BAD_PARAM_NULL_POINTER)
    got = [int(x) for x in torch.as_tensor(dev).reshape(-1).tolist()]
    check(
        got == list(want),
        f"{got} differs from the descriptor's sequence lengths {list(want)}",
        op,
        name,
        Status.BAD_PARAM,
    )


def _space(buf, size, need, op, name) -> torch.Tensor | None:
    check(
        int(size) >= need,
        f"{name}_size {size} is below the {need} bytes needed (get_multi_head_attn_buffers)",
        op,
        name,
        Status.BAD_PARAM_SIZE_INSUFFICIENT,
    )
    if need == 0:
        return None
    check(
        isinstance(buf, torch.Tensor),
        f"must be a torch tensor of at least {need} bytes",
        op,
        name,
        Status.BAD_PARAM_NULL_POINTER,
    )
    nbytes = buf.numel() * buf.element_size()
    check(
        buf.is_contiguous() and nbytes >= need,
        f"must be a contiguous buffer of at least {need} bytes (holds {nbytes})",
        op,
        name,
        Status.BAD_PARAM_SIZE_INSUFFICIENT,
    )
    check(
        buf.data_ptr() % 16 == 0,
        "must be 16-byte aligned",
        op,
        name,
        Status.BAD_PARAM_MISALIGNED_POINTER,
    )
    return buf.reshape(-1).view(torch.uint8)


class _Carve:
    """Typed pieces of a workspace / reserve byte buffer at the offsets ``buffer_sizes``
    planned (shapes of this call, at most the planned sizes)."""

    def __init__(self, raw, layout, dtype):
        self.raw, self.layout, self.dtype = raw, layout, dtype

    def __call__(self, name, *shape):
        offset, numel, kind = self.layout[name]
        dt = {"float32": torch.float32, "int64": torch.int64}.get(kind, self.dtype)
        count = 1
        for s in shape:
            count *= s
        return self.raw[offset : offset + count * dt.itemsize].view(dt).view(*shape)


def _window(op, lo, hi, p: Problem, steps) -> tuple:
    """Per selected step t: (lo, hi) clipped to [0, T_kv], after the rules."""
    for arr, name in ((lo, "lo_win_idx"), (hi, "hi_win_idx")):
        check(arr is not None, "is NULL", op, name, Status.BAD_PARAM_NULL_POINTER)
        check(
            len(arr) >= p.t_q,
            f"has {len(arr)} entries, fewer than the {p.t_q} query time steps",
            op,
            name,
            Status.BAD_PARAM_SIZE_INSUFFICIENT,
        )
    out = []
    for t in steps:
        a, b = int(lo[t]), int(hi[t])
        check(
            a >= 0,
            f"lo_win_idx[{t}] = {a} is negative",
            op,
            "lo_win_idx",
            Status.BAD_PARAM_OUT_OF_BOUND,
        )
        check(
            b >= a,
            f"hi_win_idx[{t}] = {b} is below lo_win_idx[{t}] = {a}",
            op,
            "hi_win_idx",
            Status.BAD_PARAM_OUT_OF_BOUND,
        )
        out.append((min(a, p.t_kv), min(b, p.t_kv)))
    return tuple(out)


# ---- graphs ------------------------------------------------------------------------------
def _sig(t):
    return None if t is None else (tuple(t.shape), tuple(t.stride()), t.dtype)


def _gt(g, t, name):
    return g.tensor(list(t.shape), list(t.stride()), as_data_type(t.dtype), name=name)


def _new_graph(handle, name):
    return Graph(
        name=name,
        handle=handle,
        intermediate_data_type=DataType.FLOAT,
        compute_data_type=DataType.FLOAT,
    )


def _run(g, pack, device) -> None:
    ws = torch.empty(g.get_workspace_size(), dtype=torch.uint8, device=device)
    g.execute(pack, ws)


def matmul(handle, a, b, c, bias=None, resid=None) -> None:
    """c = a @ b (+ bias) (+ resid) through a cached graph; any strides, batch dims
    broadcast (a [..., m, k], b [..., k, n], c [..., m, n])."""
    key = ("matmul", str(handle.device), _sig(a), _sig(b), _sig(c), _sig(bias), _sig(resid))
    hit = _cache.get(key)
    if hit is None:
        g = _new_graph(handle, "multi_head_attn_matmul")
        ins = [_gt(g, a, "a"), _gt(g, b, "b")]
        t = g.matmul(ins[0], ins[1], name="matmul")
        for extra, name in ((bias, "bias"), (resid, "residual")):
            if extra is not None:
                ins.append(_gt(g, extra, name))
                t = g.add(t, ins[-1], name=f"add_{name}")
        t.set_output(True).set_dim(list(c.shape)).set_stride(list(c.stride()))
        t.set_data_type(as_data_type(c.dtype)).set_name("c")
        g.build([HeurMode.A, HeurMode.FALLBACK])
        hit = _cache[key] = (g, ins, t)
    g, ins, t = hit
    bufs = [x for x in (a, b, bias, resid) if x is not None]
    pack = dict(zip(ins, bufs))
    pack[t] = c
    _run(g, pack, c.device)


def dropout(handle, p: float, seed, offset, x, dest, resid=None, backward=False) -> None:
    """dest = x * mask / (1 - p) (+ resid): the dropout (or, ``backward``, its gradient,
    the same mask) over x's logical elements from (seed, offset) one-element int64
    tensors, through a cached graph."""
    key = ("dropout", str(handle.device), float(p), backward, _sig(x), _sig(dest), _sig(resid))
    hit = _cache.get(key)
    if hit is None:
        g = _new_graph(handle, "multi_head_attn_dropout")
        ins = [_gt(g, x, "x"), _gt(g, seed, "seed"), _gt(g, offset, "offset")]
        if backward:
            t = g.dropout_backward(ins[0], float(p), ins[1], ins[2], name="dropout_backward")
        else:
            t = g.dropout(ins[0], float(p), ins[1], ins[2], generate_mask=False, name="dropout")[0]
        if resid is not None:
            ins.append(_gt(g, resid, "residual"))
            t = g.add(t, ins[-1], name="add_residual")
        t.set_output(True).set_dim(list(dest.shape)).set_stride(list(dest.stride()))
        t.set_data_type(as_data_type(dest.dtype)).set_name("dest")
        g.build([HeurMode.A, HeurMode.FALLBACK])
        hit = _cache[key] = (g, ins, t)
    g, ins, t = hit
    pack = dict(zip(ins, [x, seed, offset] + ([resid] if resid is not None else [])))
    pack[t] = dest
    _run(g, pack, dest.device)


def _band(win: tuple, t_kv: int):
    """(left, right) bounds of the sdpa node's TOP_LEFT band equal to the window
    (row i: keys j with i - left < j <= i + right), or None when it is not a band."""
    right = left = None
    for i, (lo, hi) in enumerate(win):
        if hi < t_kv and right is None:
            right = hi - i - 1
        if lo > 0 and left is None:
            left = i + 1 - lo
    if (right is not None and right < 0) or (left is not None and left < 1):
        return None
    for i, (lo, hi) in enumerate(win):
        want_hi = t_kv if right is None else min(t_kv, max(0, i + 1 + right))
        want_lo = 0 if left is None else min(t_kv, max(0, i + 1 - left))
        if (lo, hi) != (want_lo, want_hi) and not (hi <= lo and want_hi <= want_lo):
            return None
    return left, right


@dataclasses.dataclass(frozen=True)
class Masks:
    """How the window and the key lengths reach the sdpa node."""

    band: tuple | None  # (left, right) or None
    bias: torch.Tensor | None  # [1, 1, R, T_kv] float32 of 0 / -inf
    lens_q: torch.Tensor | None  # [B, 1, 1, 1] int32 (with the padding mask)
    lens_kv: torch.Tensor | None

    def key(self):
        return (self.band, self.bias is not None, self.lens_q is not None)

    def kwargs(self, g, ins: dict) -> dict:
        kw = {}
        if self.band is not None:
            kw.update(diagonal_band_left_bound=self.band[0], diagonal_band_right_bound=self.band[1])
        if self.bias is not None:
            kw["bias"] = ins["bias"] = _gt(g, self.bias, "window")
        if self.lens_q is not None:
            kw["use_padding_mask"] = True
            kw["seq_len_q"] = ins["lens_q"] = _gt(g, self.lens_q, "seq_len_q")
            kw["seq_len_kv"] = ins["lens_kv"] = _gt(g, self.lens_kv, "seq_len_kv")
        return kw

    def bufs(self) -> dict:
        return {"bias": self.bias, "lens_q": self.lens_q, "lens_kv": self.lens_kv}


# window biases by (window, rows, T_kv, device): built once; device tensors, so at most
# BIASES_KEPT even when more graphs are kept
BIASES_KEPT = 64
_biases = LRU(lambda: min(BIASES_KEPT, legacy_cache_size()))


def _window_bias(win: tuple, rows: int, t_kv: int, device) -> torch.Tensor:
    """[1, 1, rows, T_kv] float32: 0 inside row r's window (step r mod len(win)), -inf
    outside."""
    key = (win, rows, t_kv, str(device))
    hit = _biases.get(key)
    if hit is None:
        keep = torch.zeros(rows, t_kv, dtype=torch.bool)
        for r in range(rows):
            lo, hi = win[r % len(win)]
            keep[r, lo:hi] = True
        bias = torch.zeros(1, 1, rows, t_kv, dtype=torch.float32)
        hit = bias.masked_fill_(~keep, float("-inf")).to(device)
        _biases[key] = hit
    return hit


def masks(p: Problem, win: tuple, rows: int, device) -> Masks:
    """The window of every query row (row r is step r mod len(win)) and the key lengths."""
    band, bias = None, None
    full = all(lo == 0 and hi == p.t_kv for lo, hi in win)
    if not full:
        band = _band(win, p.t_kv) if rows == len(win) else None
        if band is None:
            bias = _window_bias(win, rows, p.t_kv, device)
    lens_q = lens_kv = None
    if any(x < p.t_kv for x in p.lens_kv):
        b = p.n * p.m_kv
        lens_kv = torch.tensor(p.lens_kv, dtype=torch.int32, device=device).view(b, 1, 1, 1)
        lens_q = torch.full((b, 1, 1, 1), rows, dtype=torch.int32, device=device)
    return Masks(band, bias, lens_q, lens_kv)


def sdpa(handle, scale, mk: Masks, q, k, v, o, stats=None, grads=None, drop=None) -> None:
    """The attention graph: forward (o, stats) or, with ``grads`` = (dO, dQ, dK, dV),
    the backward from the forward's o and stats. Views are [B, H, S, D]. ``drop``:
    (probability, seed, offset), seed and offset one-element int64 tensors, or None."""
    rng = () if drop is None else (drop[1], drop[2])
    tensors = (q, k, v, o, stats) + tuple(grads or ()) + rng
    key = (
        "sdpa",
        str(handle.device),
        float(scale),
        mk.key(),
        grads is None,
        None if drop is None else float(drop[0]),
        tuple(_sig(t) for t in tensors) + tuple(_sig(t) for t in mk.bufs().values()),
    )
    hit = _cache.get(key)
    if hit is None:
        g = _new_graph(handle, "multi_head_attn_sdpa")
        ins = {r: _gt(g, t, r) for r, t in (("q", q), ("k", k), ("v", v))}
        kw = mk.kwargs(g, ins)
        if drop is not None:
            ins["seed"], ins["offset"] = _gt(g, drop[1], "seed"), _gt(g, drop[2], "offset")
            kw["dropout"] = (float(drop[0]), ins["seed"], ins["offset"])
        if grads is None:
            out, st = g.sdpa(
                ins["q"],
                ins["k"],
                ins["v"],
                attn_scale=float(scale),
                generate_stats=stats is not None,
                name="sdpa",
                **kw,
            )
            outs = {"o": out, "stats": st}
        else:
            ins.update({r: _gt(g, t, r) for r, t in (("o", o), ("stats", stats), ("do", grads[0]))})
            dq, dk, dv = g.sdpa_backward(
                ins["q"],
                ins["k"],
                ins["v"],
                ins["o"],
                ins["do"],
                ins["stats"],
                attn_scale=float(scale),
                name="sdpa_backward",
                **kw,
            )
            outs = {"dq": dq, "dk": dk, "dv": dv}
        like = (
            {"o": o, "stats": stats} if grads is None else dict(zip(("dq", "dk", "dv"), grads[1:]))
        )
        for r, t in outs.items():
            if t is not None:
                t.set_output(True).set_dim(list(like[r].shape))
                t.set_stride(list(like[r].stride())).set_data_type(as_data_type(like[r].dtype))
        g.build([HeurMode.A, HeurMode.FALLBACK])
        hit = _cache[key] = (g, ins, outs)
    g, ins, outs = hit
    vals = {"q": q, "k": k, "v": v, "o": o, "stats": stats, **mk.bufs()}
    if drop is not None:
        vals.update(seed=drop[1], offset=drop[2])
    if grads is not None:
        vals.update(zip(("do", "dq", "dk", "dv"), grads))
    pack = {t: vals[r] for r, t in {**ins, **outs}.items() if t is not None}
    _run(g, pack, q.device)


def padded(store, name, x, h: int, size: int) -> torch.Tensor:
    """x [..., H * size] as the attention reads it: x itself when size is a multiple of
    8, else its copy ``store(name)`` [..., H * pad8(size)] with every head's columns
    zero-padded (zero columns change no dot product and give zero output columns)."""
    width = (size + 7) // 8 * 8
    if width == size:
        return x
    out = store(name, *x.shape[:-1], h * width)
    cols = out.view(*x.shape[:-1], h, width)
    cols[..., size:].zero_()
    cols[..., :size].copy_(x.view(*x.shape[:-1], h, size))
    return out


def compact(x8, h: int, size: int, dest) -> None:
    """dest [..., H * size] = the first ``size`` columns of every head of x8 (no-op when
    x8 is dest)."""
    if x8 is not dest:
        width = x8.shape[-1] // h
        dest.view(*dest.shape[:-1], h, size).copy_(x8.view(*x8.shape[:-1], h, width)[..., :size])


def heads(x, b: int, h: int) -> torch.Tensor:
    """A packed [N, M, T, H * D] buffer as the attention's [B, H, R, D] view."""
    d = x.shape[-1] // h
    return x.reshape(b, -1, h, d).permute(0, 2, 1, 3)
