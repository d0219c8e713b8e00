"""cudnnMultiHeadAttnForward / BackwardData / BackwardWeights on the graph API (the model
and the weight layout are in ``attention.py``).

Forward, for the selected query time steps (all with curr_idx < 0, else curr_idx only):

1. projections, one ``matmul`` graph each (bias fused as an ``add``): Q' = Q Wq (+ bq)
   [N, M, T_q, H * q_proj], K' = K Wk (+ bk), V' = V Wv (+ bv) [N, M_kv, T_kv, H * proj],
   rows packed token by token, head after head: each is the BSHD layout of the
   attention's [B, H, S, D] view. A disabled projection copies the input once per head.
2. attention, one ``sdpa`` graph: B = N * M_kv K/V sequences, each with R = (M / M_kv)
   * T_q query rows (ALL_TO_ONE folds the beams that share keys into the query rows),
   attn_scale = sm_scaler. The window lo[t] <= j < hi[t] is the sdpa node's TOP_LEFT
   band when it has that shape (lo[t] = max(0, t + 1 - L), hi[t] = min(T_kv, t + 1 + R):
   causal is L = None, R = 0) and otherwise an additive bias [1, 1, R, T_kv] of 0 / -inf
   (the flash kernels and the reference both take -inf as a mask). Keys beyond a K/V
   sequence's length are the padding mask (seq_len_kv). A row whose window holds no key
   gives y = 0. The heads' outputs land in H_cat [N, M, T_q, H * v_len]. Training with
   an attention dropout: the sdpa node's dropout (probability, seed, offset) on P.
   Head dims (q_len, v_len up to 256) that are not a multiple of 8, the sdpa node's
   rule, run on copies of Q', K', V' with every head zero-padded to one (zero columns
   change no score and give output columns of zeros, dropped again).
3. output, one ``matmul`` graph: out = H_cat Wo (+ bo) (+ residuals), or H_cat (+
   residuals) without an output projection; with an output dropout (training) z = H_cat
   Wo (+ bo) first, then a ``dropout`` graph: out = D_o z (+ residuals). Query vectors
   beyond their sequence's length are left as they were, or set to o_desc's padding fill.

Dropout streams: a training forward copies each dropout descriptor's states [seed, 0,
offset, 0] into the reserve space, then advances the descriptor's offset by the Philox
counters it uses (ceil(elements / 4): B * H * R * T_kv for the attention, N * M * T_q *
o_len for the output), as dropout_forward does; the backward calls replay the recorded
words, so they see the forward's masks. Inference forwards apply no dropout.

Backward data (from the training forward's reserve space: Q', K', V', H_cat, Stats):
dO with padded vectors zeroed, then through the output dropout's mask (dz); dH_cat =
dz Wo^T (``matmul``); dQ', dK', dV' by ``sdpa_backward`` (kept in the reserve space); dQ =
dQ' Wq^T, dK = dK' Wk^T, dV = dV' Wv^T (``matmul``; a disabled projection sums its
heads). As in cuDNN, dqueries holds no residual term: add dout to it when the residuals
were the queries. Gradients of padded vectors are 0.

Backward weights: [X | 1]^T dX' (``matmul`` over all tokens, X packed with a column of
ones when biases are enabled) is the weight block and its bias row at once; for O,
[H_cat | 1]^T dz. WgradMode.SET writes the blocks, ADD adds to them.

Half and bfloat16 run on the Triton engines (matmul, attention); float32 graphs on the
float64 reference. Layout moves (packing, head copies, padding fills, the head sum of a
disabled projection, ADD accumulation) are torch copies.
"""

from __future__ import annotations

import torch

from ..errors import Status
from ..ops.dropout import counters
from ..runtime.buffers import check_disjoint
from ..tensor import to_torch_dtype
from . import attention_graphs as AG
from .attention import WgradMode
from .attention_buffers import buffer_sizes, check_weights, pad8
from .attention_graphs import _Carve, _dev_lengths, _problem, _seq_view, _space, _window
from .common import check


def _valid(lengths: tuple, n: int, m: int, steps, device) -> torch.Tensor:
    """[N, M, len(steps)] bool: step steps[i] lies within sequence (n, m)'s length."""
    lens = torch.tensor(lengths, dtype=torch.int64).view(n, m, 1)
    return (torch.tensor(list(steps), dtype=torch.int64).view(1, 1, -1) < lens).to(device)


def _project(handle, x, block, biases: bool, heads: int, dest) -> None:
    """dest [.., H * proj] = x [.., size] @ W (+ b) with the packed block [size (+1),
    H * proj]; no block: x copied once per head."""
    if block is None:
        n, m, t, size = x.shape
        dest.view(n, m, t, heads, size).copy_(x.unsqueeze(3).expand(n, m, t, heads, size))
        return
    size = x.shape[-1]
    bias = block[size : size + 1].view(1, 1, 1, -1) if biases else None
    AG.matmul(handle, x, block[:size].view(1, 1, size, -1), dest, bias=bias)


def _unproject(handle, dxp, block, heads: int, dest) -> None:
    """dest [.., size] = dxp [.., H * proj] @ W^T; no block: the heads' sum."""
    n, m, t, size = dest.shape
    if block is None:
        dest.copy_(dxp.view(n, m, t, heads, size).sum(3))
        return
    AG.matmul(handle, dxp, block[:size].t().unsqueeze(0).unsqueeze(0), dest)


def _setup(
    op,
    attn_desc,
    descs,
    bufs,
    devs,
    work_space_size,
    work_space,
    reserve_size,
    reserve,
    need_reserve: bool,
):
    p = _problem(op, attn_desc, descs)
    views = {nm: _seq_view(buf, descs[nm], op, bname) for nm, (bname, buf) in bufs.items()}
    if devs is not None:
        _dev_lengths(devs[0], p.lens_q, op, devs[2])
        _dev_lengths(devs[1], p.lens_kv, op, devs[3])
    w_need, r_need, layout = buffer_sizes(attn_desc)
    dtype = to_torch_dtype(attn_desc.data_type)
    work_raw = _space(work_space, work_space_size, w_need, op, "work_space")
    with_reserve = need_reserve or reserve is not None
    res_raw = _space(reserve, reserve_size, r_need, op, "reserve_space") if with_reserve else None
    # the spaces are written: neither may share a byte with a sequence buffer or the other
    named = {bname: views[nm] for nm, (bname, _) in bufs.items()}
    if res_raw is not None:
        check_disjoint(res_raw, r_need, named, op, "reserve_space")
    if work_raw is not None:
        check_disjoint(work_raw, w_need, {**named, "reserve_space": res_raw}, op, "work_space")
    work = _Carve(work_raw, layout["work"], dtype)
    res = _Carve(res_raw, layout["reserve"], dtype) if with_reserve else None
    return p, views, work, res


def multi_head_attn_forward(
    handle,
    attn_desc,
    curr_idx,
    lo_win_idx,
    hi_win_idx,
    dev_seq_lengths_qo,
    dev_seq_lengths_kv,
    q_desc,
    queries,
    residuals,
    k_desc,
    keys,
    v_desc,
    values,
    o_desc,
    out,
    weight_size_in_bytes,
    weights,
    work_space_size_in_bytes,
    work_space,
    reserve_space_size_in_bytes=0,
    reserve_space=None,
) -> None:
    """cudnnMultiHeadAttnForward: out [N, M, T_q, o_len] (o_desc's layout) from queries
    [N, M, T_q, q_size], keys [N, M_kv, T_kv, k_size], values [N, M_kv, T_kv, v_size] and
    residuals (queries' layout, or None). With a reserve space (training) every query
    time step is computed (curr_idx must be < 0) and the backward's inputs are kept there;
    without one (inference) curr_idx < 0 computes every step and curr_idx >= 0 step
    curr_idx only. lo_win_idx / hi_win_idx: host ints per query time step."""
    op = "multi_head_attn_forward"
    a = attn_desc
    training = reserve_space is not None
    descs = {"q_desc": q_desc, "k_desc": k_desc, "v_desc": v_desc, "o_desc": o_desc}
    bufs = {
        "q_desc": ("queries", queries),
        "k_desc": ("keys", keys),
        "v_desc": ("values", values),
        "o_desc": ("out", out),
    }
    p, views, work, res = _setup(
        op,
        a,
        descs,
        bufs,
        (dev_seq_lengths_qo, dev_seq_lengths_kv, "dev_seq_lengths_qo", "dev_seq_lengths_kv"),
        work_space_size_in_bytes,
        work_space,
        reserve_space_size_in_bytes,
        reserve_space,
        False,
    )
    q, k, v, o = (views[x] for x in descs)
    check(
        isinstance(curr_idx, int) and not isinstance(curr_idx, bool),
        f"curr_idx {curr_idx!r} is not an int",
        op,
        "curr_idx",
        Status.BAD_PARAM_ATTRIBUTE_TYPE,
    )
    check(
        not training or curr_idx < 0,
        f"curr_idx {curr_idx} must be negative in training mode (a reserve space is given)",
        op,
        "curr_idx",
        Status.BAD_PARAM,
    )
    check(
        curr_idx < p.t_q,
        f"curr_idx {curr_idx} is beyond the {p.t_q} query time steps",
        op,
        "curr_idx",
        Status.BAD_PARAM_OUT_OF_BOUND,
    )
    steps = range(p.t_q) if curr_idx < 0 else range(curr_idx, curr_idx + 1)
    win = _window(op, lo_win_idx, hi_win_idx, p, steps)
    resid = None
    if residuals is not None:
        check(
            a.o_len == a.q_size,
            f"residuals need o_len {a.o_len} equal to q_size {a.q_size}",
            op,
            "residuals",
            Status.BAD_PARAM_SHAPE_MISMATCH,
        )
        resid = _seq_view(residuals, q_desc, op, "residuals")[:, :, steps.start : steps.stop]
    blocks = check_weights(a, weights, weight_size_in_bytes, op)
    h, ts, dev = a.n_heads, len(steps), q.device
    store = res if training else work
    pre = "" if training else "i_"
    qp = store(pre + "qp", p.n, p.m, ts, h * a.q_len)
    kp = store(pre + "kp", p.n, p.m_kv, p.t_kv, h * a.k_len)
    vp = store(pre + "vp", p.n, p.m_kv, p.t_kv, h * a.v_len)
    hcat = store(pre + "hcat", p.n, p.m, ts, h * a.v_len)
    _project(handle, q[:, :, steps.start : steps.stop], blocks.get("q"), a.biases, h, qp)
    _project(handle, k, blocks.get("k"), a.biases, h, kp)
    _project(handle, v, blocks.get("v"), a.biases, h, vp)
    pad_kv = ~_valid(p.lens_kv, p.n, p.m_kv, range(p.t_kv), dev)
    if bool(pad_kv.any()):  # padded keys never meet a query; keep NaN out of P @ V
        kp.masked_fill_(pad_kv.unsqueeze(-1), 0)
        vp.masked_fill_(pad_kv.unsqueeze(-1), 0)
    b = p.n * p.m_kv
    rows = (p.m // p.m_kv) * ts
    mk = AG.masks(p, win, rows, dev)
    stats = res("stats", b, h, rows, 1) if training else None
    attn_drop, post_drop = (
        _rng(a, res, b * h * rows * p.t_kv, p.n * p.m * ts * a.o_len, record=True)
        if training
        else (None, None)
    )
    hc8 = _piece8(store, pre + "hcat8", hcat, h, a.v_len)
    AG.sdpa(
        handle,
        a.sm_scaler,
        mk,
        AG.heads(AG.padded(store, pre + "qp8", qp, h, a.q_len), b, h),
        AG.heads(AG.padded(store, pre + "kp8", kp, h, a.k_len), b, h),
        AG.heads(AG.padded(store, pre + "vp8", vp, h, a.v_len), b, h),
        AG.heads(hc8, b, h),
        stats,
        drop=attn_drop,
    )
    AG.compact(hc8, h, a.v_len, hcat)
    dest_o = o[:, :, steps.start : steps.stop]
    valid = _valid(p.lens_q, p.n, p.m, steps, dev)
    full = bool(valid.all())
    y = dest_o if full else work("o", p.n, p.m, ts, a.o_len)
    if post_drop is not None:  # z = H_cat Wo + bo, then y = D_o z + residual
        z = hcat
        if "o" in blocks:
            z = work("y", p.n, p.m, ts, a.o_len)
            _out_projection(handle, a, blocks["o"], hcat, z)
        AG.dropout(handle, *post_drop, z, y, resid=resid)
    elif "o" in blocks:
        _out_projection(handle, a, blocks["o"], hcat, y, resid)
    elif resid is not None:
        torch.add(hcat, resid, out=y)
    else:
        y.copy_(hcat)
    if not full:
        fill = dest_o if o_desc.padding_fill is None else torch.full_like(y, o_desc.padding_fill)
        dest_o.copy_(torch.where(valid.unsqueeze(-1), y, fill))


def _out_projection(handle, a, wo, hcat, dest, resid=None) -> None:
    rows_o = a.n_heads * a.v_len
    bias = wo[rows_o : rows_o + 1].view(1, 1, 1, -1) if a.biases else None
    AG.matmul(handle, hcat, wo[:rows_o].view(1, 1, rows_o, -1), dest, bias=bias, resid=resid)


def _rng(a, res, attn_count: int, post_count: int, record: bool) -> tuple:
    """((p, seed, offset) or None for the attention dropout, the same for the output
    dropout): seed and offset are words of the reserve space. ``record`` (the training
    forward): copy each descriptor's states [seed, 0, offset, 0] there first and advance
    the descriptor's offset by the Philox counters the call consumes, as dropout_forward
    does; the backward calls read the recorded words."""
    words = res("rng", 8)
    out = []
    for i, (d, count) in enumerate(
        ((a.attn_dropout_desc, attn_count), (a.post_dropout_desc, post_count))
    ):
        if d is None or d.dropout == 0.0:
            out.append(None)
            continue
        w = words[4 * i : 4 * i + 4]
        if record:
            w.copy_(d.states)
            d.states[2:3].add_(counters(count))
        out.append((d.dropout, w[0:1], w[2:3]))
    return tuple(out)


def multi_head_attn_backward_data(
    handle,
    attn_desc,
    lo_win_idx,
    hi_win_idx,
    dev_seq_lengths_dqdo,
    dev_seq_lengths_dkdv,
    do_desc,
    dout,
    dq_desc,
    dqueries,
    queries,
    dk_desc,
    dkeys,
    keys,
    dv_desc,
    dvalues,
    values,
    weight_size_in_bytes,
    weights,
    work_space_size_in_bytes,
    work_space,
    reserve_space_size_in_bytes,
    reserve_space,
) -> tuple:
    """cudnnMultiHeadAttnBackwardData: dqueries, dkeys, dvalues (written in place and
    returned) from dout and the reserve space of a training forward with the same
    descriptors, window and inputs. dqueries excludes the residual term (add dout when the
    residuals were the queries); gradients of padded vectors are 0. queries, keys and
    values are not read (the reserve space holds their projections)."""
    op = "multi_head_attn_backward_data"
    a = attn_desc
    descs = {"dq_desc": dq_desc, "dk_desc": dk_desc, "dv_desc": dv_desc, "do_desc": do_desc}
    bufs = {
        "dq_desc": ("dqueries", dqueries),
        "dk_desc": ("dkeys", dkeys),
        "dv_desc": ("dvalues", dvalues),
        "do_desc": ("dout", dout),
    }
    p, views, work, res = _setup(
        op,
        a,
        descs,
        bufs,
        (
            dev_seq_lengths_dqdo,
            dev_seq_lengths_dkdv,
            "dev_seq_lengths_dqdo",
            "dev_seq_lengths_dkdv",
        ),
        work_space_size_in_bytes,
        work_space,
        reserve_space_size_in_bytes,
        reserve_space,
        True,
    )
    dq, dk, dv, do = (views[x] for x in descs)
    steps = range(p.t_q)
    win = _window(op, lo_win_idx, hi_win_idx, p, steps)
    blocks = check_weights(a, weights, weight_size_in_bytes, op)
    h, dev = a.n_heads, dq.device
    b = p.n * p.m_kv
    rows = (p.m // p.m_kv) * p.t_q
    attn_drop, post_drop = _rng(a, res, 0, 0, record=False)
    dom = _masked_dout(p, work, do, a.o_len, dev, post_drop, handle)
    if "o" in blocks:
        rows_o = h * a.v_len
        dh = work("dh", p.n, p.m, p.t_q, rows_o)
        AG.matmul(handle, dom, blocks["o"][:rows_o].t().unsqueeze(0).unsqueeze(0), dh)
    else:
        dh = dom
    mk = AG.masks(p, win, rows, dev)
    saved = _saved(p, res, a)
    lens = {
        "q": a.q_len,
        "k": a.k_len,
        "v": a.v_len,
        "qp": a.q_len,
        "kp": a.k_len,
        "vp": a.v_len,
        "hcat": a.v_len,
    }
    ins = [_piece8(res, x + "8", saved[x], h, lens[x]) for x in ("qp", "kp", "vp", "hcat")]
    grads = [
        res("dqp", *saved["qp"].shape),
        res("dkp", *saved["kp"].shape),
        res("dvp", *saved["vp"].shape),
    ]
    grads8 = [_piece8(res, f"d{x}p8", g, h, lens[x]) for g, x in zip(grads, "qkv")]
    dh8 = AG.padded(work, "dh8", dh, h, a.v_len)
    AG.sdpa(
        handle,
        a.sm_scaler,
        mk,
        *(AG.heads(x, b, h) for x in ins),
        res("stats", b, h, rows, 1),
        grads=[AG.heads(x, b, h) for x in [dh8] + grads8],
        drop=attn_drop,
    )
    for dxp8, dxp, name, dest in zip(grads8, grads, "qkv", (dq, dk, dv)):
        AG.compact(dxp8, h, lens[name], dxp)
        _unproject(handle, dxp, blocks.get(name), h, dest)
    return dqueries, dkeys, dvalues


def _saved(p, res, a) -> dict:
    h = a.n_heads
    return {
        "qp": res("qp", p.n, p.m, p.t_q, h * a.q_len),
        "kp": res("kp", p.n, p.m_kv, p.t_kv, h * a.k_len),
        "vp": res("vp", p.n, p.m_kv, p.t_kv, h * a.v_len),
        "hcat": res("hcat", p.n, p.m, p.t_q, h * a.v_len),
    }


def _piece8(store, name, like, h, size):
    """``like`` [..., H * size] when size is a multiple of 8, else the piece ``name`` of
    the store with every head padded to the next multiple of 8 (the forward's padded
    copies, or room for an output of the attention)."""
    if size % 8 == 0:
        return like
    return store(name, *like.shape[:-1], h * pad8(size))


def _masked_dout(p, work, do, o_len, dev, post_drop, handle) -> torch.Tensor:
    """dout packed [N, M, T_q, o_len] with the vectors beyond each length zeroed, then
    through the output dropout's gradient (the forward's mask) when there is one: dz."""
    dom = work("do", p.n, p.m, p.t_q, o_len)
    valid = _valid(p.lens_q, p.n, p.m, range(p.t_q), dev).unsqueeze(-1)
    dom.copy_(torch.where(valid, do, torch.zeros((), dtype=do.dtype, device=dev)))
    if post_drop is None:
        return dom
    dz = work("dod", p.n, p.m, p.t_q, o_len)
    AG.dropout(handle, *post_drop, dom, dz, backward=True)
    return dz


def multi_head_attn_backward_weights(
    handle,
    attn_desc,
    add_grad,
    q_desc,
    queries,
    k_desc,
    keys,
    v_desc,
    values,
    do_desc,
    dout,
    weight_size_in_bytes,
    weights,
    dweights,
    work_space_size_in_bytes,
    work_space,
    reserve_space_size_in_bytes,
    reserve_space,
):
    """cudnnMultiHeadAttnBackwardWeights: the gradients of every weight and bias, in
    dweights' packed layout (the weights' layout), written (WgradMode.SET) or added
    (WgradMode.ADD). Needs the reserve space after multi_head_attn_backward_data.
    Returns dweights."""
    op = "multi_head_attn_backward_weights"
    a = attn_desc
    try:
        mode = WgradMode(int(add_grad))
    except ValueError:
        mode = None
    check(
        mode is not None,
        f"add_grad {add_grad!r} is not a WgradMode (ADD, SET)",
        op,
        "add_grad",
        Status.BAD_PARAM_OUT_OF_BOUND,
    )
    descs = {"q_desc": q_desc, "k_desc": k_desc, "v_desc": v_desc, "do_desc": do_desc}
    bufs = {
        "q_desc": ("queries", queries),
        "k_desc": ("keys", keys),
        "v_desc": ("values", values),
        "do_desc": ("dout", dout),
    }
    p, views, work, res = _setup(
        op,
        a,
        descs,
        bufs,
        None,
        work_space_size_in_bytes,
        work_space,
        reserve_space_size_in_bytes,
        reserve_space,
        True,
    )
    check_weights(a, weights, weight_size_in_bytes, op)
    grads = check_weights(a, dweights, weight_size_in_bytes, op, "dweights")
    h, dev = a.n_heads, views["q_desc"].device
    saved = _saved(p, res, a)
    dxp = {
        "q": res("dqp", p.n, p.m, p.t_q, h * a.q_len),
        "k": res("dkp", p.n, p.m_kv, p.t_kv, h * a.k_len),
        "v": res("dvp", p.n, p.m_kv, p.t_kv, h * a.v_len),
    }
    xs = {
        "q": (views["q_desc"], p.lens_q, p.m, p.t_q),
        "k": (views["k_desc"], p.lens_kv, p.m_kv, p.t_kv),
        "v": (views["v_desc"], p.lens_kv, p.m_kv, p.t_kv),
    }
    for name, block in grads.items():
        if name == "o":
            x, lengths, m, t = saved["hcat"], p.lens_q, p.m, p.t_q
            dy = _masked_dout(
                p, work, views["do_desc"], a.o_len, dev, _rng(a, res, 0, 0, record=False)[1], handle
            )
        else:
            (x, lengths, m, t), dy = xs[name], dxp[name]
        tokens, size = p.n * m * t, x.shape[-1]
        packed = work("pack", tokens, block.shape[0])
        valid = _valid(lengths, p.n, m, range(t), dev).view(tokens, 1)
        packed[:, :size].copy_(
            torch.where(valid, x.reshape(tokens, size), torch.zeros((), dtype=x.dtype, device=dev))
        )
        if a.biases:
            packed[:, size:].fill_(1)
        dest = block if mode == WgradMode.SET else torch.empty_like(block)
        AG.matmul(handle, packed.t(), dy.reshape(tokens, -1), dest)
        if mode == WgradMode.ADD:
            block.add_(dest)
    return dweights


__all__ = [
    "multi_head_attn_forward",
    "multi_head_attn_backward_data",
    "multi_head_attn_backward_weights",
]
