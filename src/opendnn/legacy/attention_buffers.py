"""cudnnGetMultiHeadAttnBuffers / cudnnGetMultiHeadAttnWeights: the sizes of the weight,
workspace and reserve buffers and views of the packed weights (the layout is described
in ``attention.py``)."""

from __future__ import annotations

from ..errors import Status
from ..tensor import to_torch_dtype
from .attention import AttnDescriptor, MultiHeadAttnWeightKind, _aligned
from .common import check
from .tensor import TensorDescriptor


# ---- buffers and weights -----------------------------------------------------------------
def _check_attn(desc, op) -> None:
    check(
        isinstance(desc, AttnDescriptor) and desc.is_set(),
        "the attention descriptor was never set (set_attn_descriptor)",
        op,
        "attn_desc",
        Status.BAD_PARAM_NOT_FINALIZED,
    )


def pad8(size: int) -> int:
    """A head dim rounded up to the attention's multiple of 8."""
    return (size + 7) // 8 * 8


KINDS = {"stats": "float32", "rng": "int64"}  # pieces not of the data type
ITEM = {"float32": 4, "int64": 8}


def buffer_sizes(desc) -> tuple:
    """(workspace bytes, reserve bytes, {"work" | "reserve": {name: (byte offset, numel,
    kind)}}) at the descriptor's maxima. Reserve: the projections qp, kp, vp, the heads'
    outputs hcat, the softmax statistics, the dropout words rng (attention seed, 0,
    offset, 0, then the output dropout's), the backward's dqp, dkp, dvp. Workspace: the
    output before its padding is restored (o), before the output dropout (y), the masked
    dout (do) and after the output dropout (dod), dH (dh), packed inputs of the weight
    gradients (pack) and, in inference, the projections and heads' outputs (i_*). Pieces
    ending in 8 are the zero-padded copies the attention reads when a head dim is not a
    multiple of 8."""
    item = to_torch_dtype(desc.data_type).itemsize
    n, m, h = desc.max_batch_size, desc.max_beam_size, desc.n_heads
    m_kv = m if desc.one_to_one else 1
    qo, kv = n * m * desc.qo_max_seq_length, n * m_kv * desc.kv_max_seq_length
    reserve = {
        "qp": qo * h * desc.q_len,
        "kp": kv * h * desc.k_len,
        "vp": kv * h * desc.v_len,
        "hcat": qo * h * desc.v_len,
        "stats": qo * h,
        "rng": 8,
        "dqp": qo * h * desc.q_len,
        "dkp": kv * h * desc.k_len,
        "dvp": kv * h * desc.v_len,
    }
    widest = max(desc.q_size, desc.k_size, desc.v_size, h * desc.v_len) + 1
    work = {
        "o": qo * desc.o_len,
        "y": qo * desc.o_len,
        "do": qo * desc.o_len,
        "dod": qo * desc.o_len,
        "dh": qo * h * desc.v_len,
        "pack": max(qo, kv) * widest,
        **{f"i_{k}": reserve[k] for k in ("qp", "kp", "vp", "hcat")},
    }
    # head dims not a multiple of 8: the attention runs on zero-padded copies
    qk8, v8 = pad8(desc.q_len), pad8(desc.v_len)
    padded = {}
    if qk8 != desc.q_len:
        padded.update(qp8=qo * h * qk8, kp8=kv * h * qk8, dqp8=qo * h * qk8, dkp8=kv * h * qk8)
    if v8 != desc.v_len:
        padded.update(vp8=kv * h * v8, hcat8=qo * h * v8, dvp8=kv * h * v8)
        work["dh8"] = qo * h * v8
    reserve.update(padded)
    work.update({f"i_{k}": v for k, v in padded.items() if not k.startswith("d")})

    def lay(pieces):
        out, off = {}, 0
        for name, numel in pieces.items():
            kind = KINDS.get(name, "data")
            out[name] = (off, numel, kind)
            off += _aligned(numel * ITEM.get(kind, item))
        return off, out

    w_size, w_map = lay(work)
    r_size, r_map = lay(reserve)
    return w_size, r_size, {"work": w_map, "reserve": r_map}


def get_multi_head_attn_buffers(handle, attn_desc) -> tuple:
    """cudnnGetMultiHeadAttnBuffers -> (weight_size_in_bytes, work_space_size_in_bytes,
    reserve_space_size_in_bytes) for the descriptor's maximum sizes. The reserve space
    (training: a forward with a reserve space, then the backward calls) keeps the projected
    Q, K, V, the heads' outputs and the softmax statistics, then the backward's gradients
    of the projected tensors."""
    _check_attn(attn_desc, "get_multi_head_attn_buffers")
    work, reserve, _ = buffer_sizes(attn_desc)
    return attn_desc.blocks()["size"], work, reserve


_KIND_BLOCK = {0: "q", 1: "k", 2: "v", 3: "o", 4: "q", 5: "k", 6: "v", 7: "o"}


def weight_views(desc, weights) -> dict:
    """{"q"|"k"|"v"|"o": the [rows, cols] matrix of each present block} of ``weights``
    (a torch tensor of at least ``blocks()["size"]`` bytes)."""
    import torch

    dtype = to_torch_dtype(desc.data_type)
    flat = weights.reshape(-1).view(torch.uint8)
    out = {}
    blocks = desc.blocks()
    blocks.pop("size")
    for name, (rows, cols, offset) in blocks.items():
        nbytes = rows * cols * dtype.itemsize
        out[name] = flat[offset : offset + nbytes].view(dtype).view(rows, cols)
    return out


def check_weights(desc, weights, size, op, name="weights") -> dict:
    """Block views of ``weights`` after the size rules (BAD_PARAM naming ``name``)."""
    import torch

    need = desc.blocks()["size"]
    check(
        int(size) >= need,
        f"{name} size {size} is below the {need} bytes the descriptor "
        "needs (get_multi_head_attn_buffers)",
        op,
        name,
        Status.BAD_PARAM_SIZE_INSUFFICIENT,
    )
    if need == 0:
        return {}
    check(
        isinstance(weights, torch.Tensor),
        f"{name} must be a torch tensor, got {type(weights).__name__}",
        op,
        name,
        Status.BAD_PARAM_NULL_POINTER,
    )
    nbytes = weights.numel() * weights.element_size()
    check(
        weights.is_contiguous() and nbytes >= need,
        f"{name} must be a contiguous buffer of at least {need} bytes (holds {nbytes})",
        op,
        name,
        Status.BAD_PARAM_SIZE_INSUFFICIENT,
    )
    check(
        weights.data_ptr() % 16 == 0,
        f"{name} must be 16-byte aligned",
        op,
        name,
        Status.BAD_PARAM_MISALIGNED_POINTER,
    )
    return weight_views(desc, weights)


def get_multi_head_attn_weights(handle, attn_desc, w_kind, weight_size_in_bytes, weights) -> tuple:
    """cudnnGetMultiHeadAttnWeights -> (w_desc, w_view): a 3-D TensorDescriptor and the
    matching torch view into ``weights`` (writes go to the packed buffer). Q/K/V weights
    [n_heads, size, proj] (q'_h = q @ W[h]); O weights [n_heads, v_len, o_proj] (out =
    sum_h y_h @ W[h]); biases [n_heads, 1, proj] and O's [1, 1, o_proj]. A kind whose
    projection is disabled (size 0), or a bias without ENABLE_PROJ_BIASES, gives
    (an unset descriptor, None), as cuDNN gives a NULL address."""
    op = "get_multi_head_attn_weights"
    _check_attn(attn_desc, op)
    try:
        kind = MultiHeadAttnWeightKind(int(w_kind))
    except ValueError:
        kind = None
    check(
        kind is not None,
        f"w_kind {w_kind!r} is not a MultiHeadAttnWeightKind",
        op,
        "w_kind",
        Status.BAD_PARAM_OUT_OF_BOUND,
    )
    views = check_weights(attn_desc, weights, weight_size_in_bytes, op)
    block = _KIND_BLOCK[int(kind)]
    w_desc = TensorDescriptor()
    is_bias = kind >= MultiHeadAttnWeightKind.Q_BIASES
    if block not in views or (is_bias and not attn_desc.biases):
        return w_desc, None
    mat = views[block]
    h = attn_desc.n_heads
    if block == "o":
        rows = h * attn_desc.v_len
        view = (
            mat[rows : rows + 1].unsqueeze(0)
            if is_bias
            else mat[:rows].view(h, attn_desc.v_len, mat.shape[1])
        )
    else:
        size = mat.shape[0] - (1 if attn_desc.biases else 0)
        proj = mat.shape[1] // h
        part = mat[size : size + 1] if is_bias else mat[:size]
        view = part.view(part.shape[0], h, proj).permute(1, 0, 2)
    w_desc.data_type, w_desc.dims = attn_desc.data_type, tuple(view.shape)
    w_desc.strides = tuple(view.stride())
    return w_desc, view


__all__ = ["get_multi_head_attn_buffers", "get_multi_head_attn_weights"]
