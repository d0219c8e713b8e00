"""The float64 reference engine: every node, computed in float64 with NumPy on the host.

It is the ground truth the other engines are tested against, and the FALLBACK engine
of the heuristics (always last). Inputs are read through their descriptors (any
strides), every node runs in float64 in topological order, virtual tensors stay float64,
and only the graph's outputs are rounded to their data types. Slow by design.
"""

from __future__ import annotations

import numpy as np
import torch

from ...enums import DataType
from ...errors import BadParamError, InternalError, Status
from ...graph.attention_nodes import paged_length
from ...ops import batchnorm, conv, layout, matmul, pointwise, pool, reduction, softmax, stats
from ...ops import dropout as dropout_ref
from ...ops import lrn as lrn_ref
from ...ops import moe as moe_ref
from ...plan import role_error
from ...runtime.buffers import as_tensor, logical_view
from ..base import SUPPORTED, Engine, Executable, Support, Target


def _read(buf, desc) -> np.ndarray:
    if isinstance(buf, (int, float, bool)):
        return np.full(desc.dims, float(buf), dtype=np.float64)
    return logical_view(buf, desc).detach().to("cpu", torch.float64).numpy()


def _write(buf, desc, value: np.ndarray) -> None:
    view = logical_view(buf, desc)
    src = torch.from_numpy(np.array(np.broadcast_to(value, desc.dims), dtype=np.float64))
    if desc.data_type == DataType.BOOLEAN:
        src = src != 0
    elif not desc.data_type.is_floating:
        src = torch.trunc(src)
        if desc.data_type == DataType.INT8:  # saturate, as the kernels do
            src = src.clamp(-128, 127)
        elif desc.data_type == DataType.UINT8:
            src = src.clamp(0, 255)
        elif desc.data_type == DataType.INT32:
            src = src.clamp(-(2**31), 2**31 - 1)
    view.copy_(src.to(view.device, view.dtype))


def run_graph(graph, read) -> dict:
    """Evaluate ``graph`` in float64; ``read(uid)`` gives an input array. Returns all
    tensors' values by uid."""
    vals: dict = {}

    def get(uid):
        if uid not in vals:
            vals[uid] = read(uid)
        return vals[uid]

    for i, n in enumerate(graph.nodes):
        try:
            _node(graph, n, get, vals)
        except BadParamError as e:
            if getattr(e, "node_index", None) == -1:  # from role_error: which node it was
                e.node_index = i
            raise
    return vals


def _node(graph, n, get, vals) -> None:
    """Evaluate node ``n`` into ``vals``. Errors about a node's tensors are raised by role
    (``role_error``): this executable serves every graph of one key, whatever its names."""
    if n.kind == "pointwise":
        out = graph.tensors[n.outputs["OUT_0"]]
        ins = [_expand(get(u), out.ndim) for u in n.inputs.values() if u is not None]
        vals[out.uid] = pointwise.reference(n.mode, ins, n.op_attrs(), out.dims)
    elif n.kind == "reduction":
        y = graph.tensors[n.outputs["Y"]]
        vals[y.uid] = reduction.reference(n.mode, get(n.inputs["X"]), y.dims, y.data_type)
    elif n.kind == "genstats":
        s, sq = stats.reference(get(n.inputs["X"]))
        vals[n.outputs["SUM"]], vals[n.outputs["SQ_SUM"]] = s, sq
    elif n.kind == "matmul":
        vals[n.outputs["C"]] = matmul.reference(get(n.inputs["A"]), get(n.inputs["B"]))
    elif n.kind == "reshape":
        vals[n.outputs["Y"]] = layout.reshape(
            get(n.inputs["X"]), graph.tensors[n.outputs["Y"]].dims
        )
    elif n.kind == "transpose":
        vals[n.outputs["Y"]] = layout.transpose(get(n.inputs["X"]), n.permutation)
    elif n.kind == "slice":
        vals[n.outputs["Y"]] = layout.slice_(get(n.inputs["X"]), n.starts, n.ends)
    elif n.kind == "concatenate":
        vals[n.outputs["Y"]] = layout.concatenate([get(u) for u in n.inputs["X"]], n.axis)
    elif n.kind == "softmax":
        x = get(n.inputs["X"])
        vals[n.outputs["Y"]] = softmax.forward(x, n.axis % x.ndim, n.log)
    elif n.kind == "softmax_backward":
        y = get(n.inputs["Y"])
        vals[n.outputs["DX"]] = softmax.backward(get(n.inputs["DY"]), y, n.axis % y.ndim, n.log)
    # ---- batch norm (engines/batchnorm) ----
    elif n.kind in ("batchnorm", "batchnorm_inference", "batchnorm_backward"):
        _batchnorm(n, get, vals)
    elif n.kind in ("resample", "resample_backward"):  # pooling
        _pool(n, graph, get, vals)
    elif n.kind == "conv_fprop":
        vals[n.outputs["Y"]] = conv.fprop(get(n.inputs["X"]), get(n.inputs["W"]), *_conv_args(n))
    elif n.kind == "conv_dgrad":
        dx = graph.tensors[n.outputs["DX"]]
        pre, post, stride, dil, flip = _conv_args(n)
        vals[dx.uid] = conv.dgrad(
            get(n.inputs["DY"]), get(n.inputs["W"]), dx.dims, pre, post, stride, dil, flip
        )
    elif n.kind == "conv_wgrad":
        dw = graph.tensors[n.outputs["DW"]]
        pre, post, stride, dil, flip = _conv_args(n)
        vals[dw.uid] = conv.wgrad(
            get(n.inputs["X"]), get(n.inputs["DY"]), dw.dims, pre, post, stride, dil, flip
        )
    elif n.kind in LRN_KINDS or n.kind in DROPOUT_KINDS:
        vals.update(_lrn_or_dropout(n, get))
    elif n.kind in _NORM_KINDS:
        _norm(graph, n, get, vals)
    elif n.kind in ATTENTION_KINDS:
        vals.update(_attention(n, graph, get))
    elif n.kind in MOE_KINDS:
        _moe(graph, n, get, vals)
    else:  # check_support guarantees we never get here
        raise InternalError(f"{n.label()} reached the reference without a definition")


def _batchnorm(n, get, vals) -> None:
    """The three batch-norm kinds (a missing optional role is None)."""
    ins = {r: get(u) for r, u in n.inputs.items()}
    if n.kind == "batchnorm_inference":
        vals[n.outputs["Y"]] = batchnorm.forward_inference(
            ins["X"], ins["MEAN"], ins["INV_VARIANCE"], ins["SCALE"], ins["BIAS"]
        )
        return
    if n.kind == "batchnorm_backward":
        outs = batchnorm.backward(
            ins["DY"], ins["X"], ins["SCALE"], ins["MEAN"], ins["INV_VARIANCE"]
        )
        roles = ("DX", "DSCALE", "DBIAS")
    else:
        eps = float(ins["EPSILON"].reshape(-1)[0])
        if not eps >= 0.0:
            raise role_error(
                f"epsilon {eps} is below the minimum 0.0 (CUDNN_BN_MIN_EPSILON)",
                -1,
                "EPSILON",
                n.kind,
            )
        mom = ins.get("MOMENTUM")
        outs = batchnorm.forward_training(
            ins["X"],
            ins["SCALE"],
            ins["BIAS"],
            eps,
            ins.get("PREV_RUNNING_MEAN"),
            ins.get("PREV_RUNNING_VAR"),
            None if mom is None else float(mom.reshape(-1)[0]),
        )
        roles = ("Y", "MEAN", "INV_VARIANCE", "NEXT_RUNNING_MEAN", "NEXT_RUNNING_VAR")
    for r, v in zip(roles, outs):
        if r in n.outputs:
            vals[n.outputs[r]] = v


# ---- lrn, divisive normalization, dropout ---------------------------------------
LRN_KINDS = ("lrn", "lrn_backward", "div_norm", "div_norm_backward")
DROPOUT_KINDS = ("dropout", "dropout_backward")


def _lrn_or_dropout(n, get) -> dict:
    """{uid: value} of one lrn / divisive normalization / dropout node's outputs."""
    if n.kind in DROPOUT_KINDS:
        seed, offset = (int(get(n.inputs[r]).reshape(-1)[0]) for r in ("SEED", "OFFSET"))
        if n.kind == "dropout_backward":
            return {
                n.outputs["DX"]: dropout_ref.backward(
                    get(n.inputs["DY"]), n.probability, seed, offset
                )
            }
        y, m = dropout_ref.forward(get(n.inputs["X"]), n.probability, seed, offset)
        return {n.outputs["Y"]: y, **({n.outputs["MASK"]: m} if "MASK" in n.outputs else {})}
    x = get(n.inputs["X"])
    axes = (1,) if n.kind.startswith("lrn") else tuple(range(2, x.ndim))
    args = (n.lrn_n, n.lrn_alpha, n.lrn_beta, n.lrn_k, axes)
    means = get(n.inputs["MEANS"]) if "MEANS" in n.inputs else None
    if n.kind in ("lrn", "div_norm"):
        return {n.outputs["Y"]: lrn_ref.forward(x, *args, means=means)}
    dd = lrn_ref.backward(get(n.inputs["DY"]), x, *args, means=means)
    out = {n.outputs["DX"]: dd}
    if "DMEANS" in n.outputs:
        out[n.outputs["DMEANS"]] = -dd
    return out


def _pool(n, graph, get, vals) -> None:
    geo = (n.window, n.stride, n.pre_padding, n.post_padding)
    if n.kind == "resample":
        y, idx = pool.forward(get(n.inputs["X"]), n.resample_mode, *geo, n.nan_propagation)
        vals[n.outputs["Y"]] = y
        if "Index" in n.outputs:
            vals[n.outputs["Index"]] = idx.astype(np.float64)
        return
    dx = graph.tensors[n.outputs["DX"]]
    idx = None
    if n.is_max:
        idx = (
            get(n.inputs["Index"])
            if "Index" in n.inputs
            else pool.forward(get(n.inputs["X"]), n.resample_mode, *geo, n.nan_propagation)[1]
        )
    vals[dx.uid] = pool.backward(get(n.inputs["DY"]), dx.dims, n.resample_mode, *geo, idx)


# ---- norm section ----------------------------------------------------------------------------
_NORM_KINDS = {
    "layernorm",
    "rmsnorm",
    "instancenorm",
    "groupnorm",
    "layernorm_backward",
    "rmsnorm_backward",
    "instancenorm_backward",
    "groupnorm_backward",
}


def _norm(graph, n, get, vals) -> None:
    """A layer / RMS / instance / group norm node, forward or backward (ops/norm.py)."""
    from ...ops import norm

    x, s = graph.tensors[n.inputs["X"]], graph.tensors[n.inputs["SCALE"]]
    geo = norm.geometry(n.NORM, x.dims, s.dims, getattr(n, "groups", 1))
    rms = n.NORM == norm.RMS
    if n.kind.endswith("_backward"):
        mean = get(n.inputs["MEAN"]) if "MEAN" in n.inputs else None
        dx, ds, db = norm.backward(
            geo,
            get(n.inputs["DY"]),
            get(x.uid),
            get(s.uid),
            mean,
            get(n.inputs["INV_VARIANCE"]),
            rms,
        )
        for role, v in (("DX", dx), ("DSCALE", ds), ("DBIAS", db)):
            if role in n.outputs:
                vals[n.outputs[role]] = v
        return
    eps = float(np.asarray(get(n.inputs["EPSILON"])).reshape(-1)[0])
    why = norm.check_epsilon(eps)
    if why:
        raise role_error(why, -1, "EPSILON", n.kind)
    bias = get(n.inputs["BIAS"]) if "BIAS" in n.inputs else None
    y, mean, inv = norm.forward(geo, get(x.uid), get(s.uid), bias, eps, rms)
    for role, v in (("Y", y), ("MEAN", mean), ("INV_VARIANCE", inv)):
        if role in n.outputs:
            vals[n.outputs[role]] = v


# ---- mixture-of-experts grouped matmul (ops/moe.py) --------------------------------------
MOE_KINDS = ("moe_grouped_matmul", "moe_grouped_matmul_bwd")


def _moe(graph, n, get, vals) -> None:
    """A moe_grouped_matmul node (rows no group writes keep the output buffer's values; a
    virtual output starts at zeros) or its backward."""
    off = get(n.inputs["FIRST_TOKEN_OFFSET"])
    if n.kind == "moe_grouped_matmul_bwd":
        dw = moe_ref.backward(get(n.inputs["DOUTPUT"]), get(n.inputs["TOKEN"]), off)
        vals[n.outputs["DWEIGHT"]] = dw
        return
    out = graph.tensors[n.outputs["OUTPUT"]]
    base = np.zeros(out.dims) if out.is_virtual else get(out.uid)
    opt = {r: get(n.inputs[r]) for r in ("TOKEN_INDEX", "TOKEN_KS") if r in n.inputs}
    vals[out.uid] = moe_ref.forward(
        get(n.inputs["TOKEN"]),
        get(n.inputs["WEIGHT"]),
        off,
        n.moe_mode.name,
        base,
        opt.get("TOKEN_INDEX"),
        opt.get("TOKEN_KS"),
        n.top_k,
    )


# ---- attention section (sdpa, sdpa_backward; ops/attention.py) ---------------------------
ATTENTION_KINDS = ("sdpa", "sdpa_backward", "sdpa_scores", "sdpa_scores_backward")


def _attention(n, graph, get) -> dict:
    """{uid: value} of an sdpa / sdpa_backward node's outputs. Sequence lengths, the
    scale, the seed and the offset are read like any input (pass-by-value or not)."""
    from ...ops import attention

    if n.kind == "sdpa_scores":
        return {n.outputs["S"]: _sdpa_scores(n, get)}
    if n.kind == "sdpa_scores_backward":
        dq, dk = attention.scores_backward(
            get(n.inputs["DS"]), get(n.inputs["Q"]), get(n.inputs["K"]), _attn_scale(n, get)
        )
        return {n.outputs["DQ"]: dq, n.outputs["DK"]: dk}
    q, k, v = (get(n.inputs[r]) for r in ("Q", "K", "V"))
    b, h_q, s_q, _ = q.shape
    if n.kind == "sdpa" and n.paged:  # K / V from their paged caches
        tables = [get(n.inputs[r]) for r in ("PAGE_TABLE_K", "PAGE_TABLE_V")]
        s_kv = paged_length(n, tables[0].shape[2], k.shape[2])
        for name, c, tab in (("K", k, tables[0]), ("V", v, tables[1])):
            used = tab[:, 0, : -(-s_kv // c.shape[2]), 0]  # the pages s_kv keys reach
            bad = used[(used < 0) | (used >= c.shape[0])]
            if bad.size:
                raise role_error(
                    f"page table entries {sorted(set(bad.astype(int).tolist()))[:4]} are "
                    f"outside the {c.shape[0]} blocks",
                    -1,
                    f"PAGE_TABLE_{name}",
                    n.kind,
                    Status.BAD_PARAM_OUT_OF_BOUND,
                )
        k = attention.paged_gather(k, tables[0], s_kv)
        v = attention.paged_gather(v, tables[1], s_kv)
    s_kv = k.shape[2]
    masking = attention.Masking(
        n.diagonal_alignment,
        n.diagonal_band_left_bound,
        n.diagonal_band_right_bound,
        n.use_padding_mask,
    )
    lengths = {}
    for role, most in (("SEQ_LEN_Q", s_q), ("SEQ_LEN_KV", s_kv)):
        if role in n.inputs:
            lens = get(n.inputs[role]).reshape(-1)
            bad = [int(x) for x in lens if not 0 <= x <= most]
            if bad:
                raise role_error(
                    f"sequence lengths {bad} are outside [0, {most}]",
                    -1,
                    role,
                    n.kind,
                    Status.BAD_PARAM_OUT_OF_BOUND,
                )
            lengths[role] = lens.astype(np.int64)
    keep = attention.batch_mask(
        masking, b, s_q, s_kv, lengths.get("SEQ_LEN_Q"), lengths.get("SEQ_LEN_KV")
    )
    if "BLOCK_MASK" in n.inputs:  # per head: keep [B, Hq, Sq, Skv]
        keep = keep & attention.block_keep(get(n.inputs["BLOCK_MASK"]), s_q, s_kv)
    if n.use_padding_mask:  # rows past a batch's lengths are never read (NaN there stays out)
        q, k, v = q.copy(), k.copy(), v.copy()
        for i, (lq, lkv) in enumerate(zip(lengths["SEQ_LEN_Q"], lengths["SEQ_LEN_KV"])):
            q[i, :, lq:], k[i, :, lkv:], v[i, :, lkv:] = 0.0, 0.0, 0.0
    scale = _attn_scale(n, get)
    bias = get(n.inputs["BIAS"]) if "BIAS" in n.inputs else None
    bias_shape = None if bias is None else bias.shape
    if n.use_alibi_mask:  # a constant added to S: dS, hence dBias, are unchanged
        alibi = attention.alibi_bias(h_q, s_q, s_kv)
        bias = alibi if bias is None else bias + alibi
    p, drop = 0.0, None
    out = {}
    if n.dropout_probability is not None:
        p = n.dropout_probability
        seed, offset = (int(get(n.inputs[r]).reshape(-1)[0]) for r in ("SEED", "OFFSET"))
        drop = attention.dropout_keep(seed, offset, p, (b, h_q, s_q, s_kv))
        if "RNG_DUMP" in n.outputs:
            out[n.outputs["RNG_DUMP"]] = drop
    drop_scale = None
    if "DROPOUT_MASK" in n.inputs:  # the caller's mask and factor
        drop = (get(n.inputs["DROPOUT_MASK"]) != 0).astype(np.float64)
        drop_scale = float(get(n.inputs["DROPOUT_SCALE"]).reshape(-1)[0])
    sink = get(n.inputs["SINK_TOKEN"]) if "SINK_TOKEN" in n.inputs else None
    rows = None
    if n.use_padding_mask:  # the rows that exist: a sink does not make a padded row
        rows = np.arange(s_q)[None, None, :, None] < lengths["SEQ_LEN_Q"][:, None, None, None]
    if n.kind == "sdpa":
        given = get(n.inputs["SCORES"]) if "SCORES" in n.inputs else None
        o, stats, smax, ssum = attention.forward_full(
            q, k, v, keep, scale, bias, drop, p, sink, rows, given, drop_scale
        )
        for role, val in (("O", o), ("STATS", stats), ("SCORE_MAX", smax), ("SCORE_SUM_EXP", ssum)):
            if role in n.outputs:
                out[n.outputs[role]] = val
        return out
    if "SCORES" in n.inputs:  # given scores: dV and dS', the rest by the caller's nodes
        dv, ds = attention.backward_from_scores(
            get(n.inputs["SCORES"]),
            v,
            get(n.inputs["O"]),
            get(n.inputs["DO"]),
            get(n.inputs["STATS"]),
            keep,
            drop,
            p,
            drop_scale,
        )
        out.update({n.outputs["DV"]: dv, n.outputs["DSCORES"]: ds})
        return out
    dq, dk, dv, dbias = attention.backward(
        q,
        k,
        v,
        get(n.inputs["O"]),
        get(n.inputs["DO"]),
        get(n.inputs["STATS"]),
        keep,
        scale,
        bias,
        drop,
        p,
        bias_shape,
        drop_scale,
    )
    out.update({n.outputs["DQ"]: dq, n.outputs["DK"]: dk, n.outputs["DV"]: dv})
    if "DSINK_TOKEN" in n.outputs:
        out[n.outputs["DSINK_TOKEN"]] = attention.sink_grad(
            get(n.inputs["STATS"]), get(n.inputs["O"]), get(n.inputs["DO"]), sink
        )
    if "DBIAS" in n.outputs:
        out[n.outputs["DBIAS"]] = dbias
    return out


def _attn_scale(n, get) -> float:
    """An attention node's ATTN_SCALE (pass-by-value or not); 1 without one."""
    return float(get(n.inputs["ATTN_SCALE"]).reshape(-1)[0]) if "ATTN_SCALE" in n.inputs else 1.0


def _sdpa_scores(n, get) -> np.ndarray:
    """S = scale Q K^T (+ bias) (+ ALiBi) of an sdpa_scores node (K paged or not)."""
    from ...ops import attention

    q, k = get(n.inputs["Q"]), get(n.inputs["K"])
    if "PAGE_TABLE_K" in n.inputs:
        table = get(n.inputs["PAGE_TABLE_K"])
        k = attention.paged_gather(k, table, paged_length(n, table.shape[2], k.shape[2]))
    scale = _attn_scale(n, get)
    bias = get(n.inputs["BIAS"]) if "BIAS" in n.inputs else None
    s = attention.scores(q, k, scale, bias)
    if n.use_alibi_mask:
        s = s + attention.alibi_bias(q.shape[1], q.shape[2], k.shape[2])
    return s


def _conv_args(n):
    from ...enums import ConvolutionMode

    return (
        n.pre_padding,
        n.post_padding,
        n.stride,
        n.dilation,
        n.convolution_mode == ConvolutionMode.CONVOLUTION,
    )


def _expand(a: np.ndarray, ndim: int) -> np.ndarray:
    return a.reshape((1,) * (ndim - a.ndim) + a.shape) if a.ndim < ndim else a


# ---- ragged (packed variable-length) attention tensors ----------------------------------
Q_SIDE = (
    "Q",
    "O",
    "DO",
    "DQ",
    "STATS",
    "SCORE_MAX",
    "SCORE_SUM_EXP",
)  # rows counted by seq_len_q; the others by seq_len_kv
# (page tables: pages, ceil(seq_len_kv / block_size))


def _ragged_layouts(g, buffers) -> dict:
    """{uid: (row offsets [B], rows [B])} of the graph's ragged tensors: batch b's rows
    start at element offsets[b] of the buffer and there are seq_len[b] of them."""
    out = {}
    for i, n in enumerate(g.nodes):
        for r in getattr(n, "ragged_roles", lambda: [])():
            uid = n.inputs.get(r, n.outputs.get(r))
            off_uid = n.inputs[f"RAGGED_{r}"]
            lens_uid = n.inputs["SEQ_LEN_Q" if r in Q_SIDE else "SEQ_LEN_KV"]
            off = _read(buffers[off_uid], g.tensors[off_uid]).reshape(-1).astype(np.int64)
            lens = _read(buffers[lens_uid], g.tensors[lens_uid]).reshape(-1).astype(np.int64)
            d = g.tensors[uid]
            if r.startswith("PAGE_TABLE_"):  # a packed table: the pages each batch's keys use
                block = g.tensors[n.inputs[r[-1]]].dims[2]
                lens = np.minimum(-(-lens // block), d.dims[2])
            buf = as_tensor(buffers[uid])  # the memory from the buffer's start on (a view
            # into an interleaved Q / K / V buffer reaches past its own elements)
            size = buf.untyped_storage().nbytes() // buf.element_size() - buf.storage_offset()
            h_, s_, d_ = d.dims[1:]
            for b in range(d.dims[0]):
                last = off[b] + (h_ - 1) * d.strides[1] + (d_ - 1) * d.strides[3]
                last += (lens[b] - 1) * d.strides[2]
                if off[b] < 0 or not 0 <= lens[b] <= s_ or (lens[b] and last >= size):
                    e = role_error(
                        f"batch {b}'s {lens[b]} rows at ragged offset {off[b]} fall outside "
                        f"its {size}-element buffer (or its {s_} rows)",
                        -1,
                        r,
                        n.kind,
                        Status.BAD_PARAM_OUT_OF_BOUND,
                    )
                    e.node_index = i
                    raise e
            out[uid] = (off[:-1], lens)
    return out


def _ragged_views(buf, desc, off, lens) -> list:
    """Batch b's [H, rows, D] view of a ragged buffer, for each b."""
    t = as_tensor(buf)
    return [
        t.as_strided(
            (desc.dims[1], int(n), desc.dims[3]),
            desc.strides[1:],
            storage_offset=t.storage_offset() + int(o),
        )
        for o, n in zip(off, lens)
    ]


def _read_ragged(buf, desc, off, lens) -> np.ndarray:
    """The logical [B, H, S, D] array of a ragged tensor; rows past a batch's length 0."""
    out = np.zeros(desc.dims, dtype=np.float64)
    for b, v in enumerate(_ragged_views(buf, desc, off, lens)):
        out[b, :, : v.shape[1]] = v.detach().to("cpu", torch.float64).numpy()
    return out


def _write_ragged(buf, desc, value: np.ndarray, off, lens) -> None:
    """Each batch's rows of ``value`` into a ragged buffer (nothing past its length: the
    next batch's rows live there)."""
    for b, v in enumerate(_ragged_views(buf, desc, off, lens)):
        v.copy_(torch.from_numpy(np.array(value[b, :, : v.shape[1]])).to(v.device, v.dtype))


class _ReferenceExecutable(Executable):
    def __init__(self, graph):
        self.graph = graph
        self.workspace_size = 0

    def run(self, buffers, workspace, stream=None):
        g = self.graph
        ragged = _ragged_layouts(g, buffers)

        def read(uid):
            if uid in ragged:
                return _read_ragged(buffers[uid], g.tensors[uid], *ragged[uid])
            return _read(buffers[uid], g.tensors[uid])

        vals = run_graph(g, read)
        for uid in g.output_uids:
            if uid in ragged:
                _write_ragged(buffers[uid], g.tensors[uid], vals[uid], *ragged[uid])
            else:
                _write(buffers[uid], g.tensors[uid], vals[uid])


class ReferenceEngine(Engine):
    """float64 NumPy reference for every operation (FALLBACK; always last)."""

    id = 0
    name = "reference_f64"
    single_pass_pointwise = True  # every output computed in float64, then written
    KINDS = (
        {
            "pointwise",
            "reduction",
            "genstats",
            "matmul",
            "reshape",
            "transpose",
            "slice",
            "concatenate",
            "conv_fprop",
            "conv_dgrad",
            "conv_wgrad",
            "softmax",
            "softmax_backward",
            "batchnorm",
            "batchnorm_inference",
            "batchnorm_backward",
            "resample",
            "resample_backward",
        }
        | set(LRN_KINDS)
        | set(DROPOUT_KINDS)
        | _NORM_KINDS
        | set(ATTENTION_KINDS)
        | set(MOE_KINDS)
    )

    def check_support(self, graph, target: Target) -> Support:
        for n in graph.nodes:
            if n.kind not in self.KINDS:
                return Support(False, f"{n.label()} has no float64 reference yet")
        for d in graph.tensors.values():
            if d.data_type in (DataType.FP8_E4M3, DataType.FP8_E5M2) and not hasattr(
                torch, "float8_e4m3fn"
            ):
                return Support(False, "fp8 tensors need a torch with float8 types")
        return SUPPORTED

    def estimate_seconds(self, graph, config, target) -> float:
        return 1e3  # always ranked last

    def build(self, graph, config, target) -> Executable:
        return _ReferenceExecutable(graph)
