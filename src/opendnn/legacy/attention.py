"""cuDNN's multi-head attention descriptors: the attention descriptor, the sequence data
descriptor and the packed weight layout (``attention_buffers.py`` has the buffer sizes
and the weight views, ``attention_calls.py`` the calls that run the model).

The model (cuDNN's ``cudnnMultiHeadAttnForward``), for one query vector q_t of a
sequence, its keys K and values V (the K/V sequence the query's beam maps to) and the
heads h = 0 .. n_heads-1:

    q'_h = q_t Wq[h] (+ bq[h])          [q_proj]      (q_proj_size 0: q'_h = q_t)
    K'_h = K   Wk[h] (+ bk[h])          [T_kv, k_proj] (k_proj_size 0: K'_h = K)
    V'_h = V   Wv[h] (+ bv[h])          [T_kv, v_proj] (v_proj_size 0: V'_h = V)
    a_h  = softmax_j(sm_scaler * q'_h . K'_h[j])   over keys lo[t] <= j < hi[t], j < L_kv
    y_h  = sum_j D_a[j] a_h[j] V'_h[j]                                [v_len]
    z_t  = sum_h y_h Wo[h] (+ bo)                   (o_proj_size 0: z_t = [y_0 .. y_H-1])
    out_t = D_o z_t (+ residual_t)

where D_a, D_o are the attention and output dropouts (attn_dropout_desc,
post_dropout_desc; training-mode forwards only): 0 with probability p, else 1 / (1 - p),
drawn from the descriptor's Philox stream (``ops/dropout.py``) over the logical elements
of the attention's [B, H, R, T_kv] probabilities and of z [N, M, T_q, o_len] (see
``attention_calls.py`` for B and R); each call advances the descriptor's offset. With
lengths after projection q_len = q_proj_size or q_size (likewise k_len, v_len) and
the output length o_len = o_proj_size or n_heads * v_len. q_len must equal k_len.

Sequence data (``SeqDataDescriptor``): 4 axes TIME, BATCH, BEAM, VECT, packed in the
order the caller gives (outermost first, VECT innermost). Queries, residuals and outputs
have [T_q, N, M] (M beams per batch entry); keys and values have [T_kv, N, M_kv] with
M_kv = 1 (QUERYMAP_ALL_TO_ONE: every beam of entry n attends to the one K/V sequence n)
or M_kv = M (QUERYMAP_ONE_TO_ONE: beam m attends to K/V sequence (n, m)). Sequence
lengths are given per (n, m), beam fastest; vectors beyond a length are padding.

Packed weights (opendnn's layout; cuDNN's is opaque and the user reaches the pieces
only through ``get_multi_head_attn_weights``): four blocks Q, K, V, O in that order, each
starting on a 256-byte boundary, each a row-major matrix

    Q: [q_size + b, n_heads * q_proj]  K: [k_size + b, n_heads * k_proj]
    V: [v_size + b, n_heads * v_proj]  O: [n_heads * v_len + b, o_proj]

whose last row is the bias when projection biases are enabled (b = 1, else 0), and a
block is absent when its projection size is 0. Head h's Wq[h] is columns h*q_proj ..
(h+1)*q_proj-1: ``get_multi_head_attn_weights(Q_WEIGHTS)`` returns the view [n_heads,
q_size, q_proj] with strides [q_proj, n_heads*q_proj, 1] and a 3-D tensor descriptor of
it; Q_BIASES the view [n_heads, 1, q_proj]; O_WEIGHTS [n_heads, v_len, o_proj] (head
h's rows of the O block); O_BIASES [1, 1, o_proj]. The bias row below each block lets
one matmul of [inputs | 1] give a weight gradient and its bias gradient together.
"""

from __future__ import annotations

import dataclasses
import enum
import math

from ..enums import DataType
from ..errors import GraphNotSupportedError, Status
from ..tensor import as_data_type, to_torch_dtype
from .common import MathType, check
from .dropout import DropoutDescriptor

ALIGN = 256  # bytes: every block of the weight, workspace and reserve buffers


class AttnQueryMap(enum.IntFlag):
    """cudnnAttnQueryMap_t / the attn_mode flags (combine with ``|``)."""

    QUERYMAP_ALL_TO_ONE = 0
    QUERYMAP_ONE_TO_ONE = 1
    DISABLE_PROJ_BIASES = 0
    ENABLE_PROJ_BIASES = 2


class MultiHeadAttnWeightKind(enum.IntEnum):
    Q_WEIGHTS = 0
    K_WEIGHTS = 1
    V_WEIGHTS = 2
    O_WEIGHTS = 3
    Q_BIASES = 4
    K_BIASES = 5
    V_BIASES = 6
    O_BIASES = 7


class WgradMode(enum.IntEnum):
    ADD = 0  # add the weight gradients to dweights
    SET = 1  # overwrite dweights


class SeqDataAxis(enum.IntEnum):
    TIME = 0
    BATCH = 1
    BEAM = 2
    VECT = 3


SEQDATA_DIM_COUNT = 4
DATA_TYPES = (DataType.HALF, DataType.BFLOAT16, DataType.FLOAT)


def _unsupported(rule: str, op: str, status=Status.NOT_SUPPORTED):
    return GraphNotSupportedError(rule, op=op, status=status)


# ---- the attention descriptor ----------------------------------------------------------
@dataclasses.dataclass
class AttnDescriptor:
    """cudnnAttnDescriptor_t (mutable, as in C: create, then set)."""

    attn_mode: int = 0
    n_heads: int = 0
    sm_scaler: float = 1.0
    data_type: DataType | None = None
    compute_prec: DataType | None = None
    math_type: MathType = MathType.DEFAULT_MATH
    attn_dropout_desc: object = None
    post_dropout_desc: object = None
    q_size: int = 0
    k_size: int = 0
    v_size: int = 0
    q_proj_size: int = 0
    k_proj_size: int = 0
    v_proj_size: int = 0
    o_proj_size: int = 0
    qo_max_seq_length: int = 0
    kv_max_seq_length: int = 0
    max_batch_size: int = 0
    max_beam_size: int = 0

    def is_set(self) -> bool:
        return self.data_type is not None

    # lengths after the projections
    @property
    def q_len(self) -> int:
        return self.q_proj_size or self.q_size

    @property
    def k_len(self) -> int:
        return self.k_proj_size or self.k_size

    @property
    def v_len(self) -> int:
        return self.v_proj_size or self.v_size

    @property
    def o_len(self) -> int:
        return self.o_proj_size or self.n_heads * self.v_len

    @property
    def biases(self) -> bool:
        return bool(self.attn_mode & AttnQueryMap.ENABLE_PROJ_BIASES)

    @property
    def one_to_one(self) -> bool:
        return bool(self.attn_mode & AttnQueryMap.QUERYMAP_ONE_TO_ONE)

    def blocks(self) -> dict:
        """{"q"|"k"|"v"|"o": (rows, cols, byte offset)} of the packed weights' blocks
        (absent when the projection is disabled) and "size": total bytes."""
        b = 1 if self.biases else 0
        item = to_torch_dtype(self.data_type).itemsize
        h = self.n_heads
        shapes = {
            "q": (self.q_size + b, h * self.q_proj_size, self.q_proj_size),
            "k": (self.k_size + b, h * self.k_proj_size, self.k_proj_size),
            "v": (self.v_size + b, h * self.v_proj_size, self.v_proj_size),
            "o": (h * self.v_len + b, self.o_proj_size, self.o_proj_size),
        }
        out, offset = {}, 0
        for name, (rows, cols, proj) in shapes.items():
            if proj == 0:
                continue
            out[name] = (rows, cols, offset)
            offset += _aligned(rows * cols * item)
        out["size"] = offset
        return out


def _aligned(nbytes: int) -> int:
    return (nbytes + ALIGN - 1) // ALIGN * ALIGN


def create_attn_descriptor() -> AttnDescriptor:
    """cudnnCreateAttnDescriptor."""
    return AttnDescriptor()


def destroy_attn_descriptor(desc) -> None:
    desc.data_type = None


def _int(v, op, name, low, what):
    check(
        isinstance(v, int) and not isinstance(v, bool),
        f"{name} {v!r} is not an int",
        op,
        name,
        Status.BAD_PARAM_ATTRIBUTE_TYPE,
    )
    check(v >= low, f"{name} {v} must be {what}", op, name, Status.BAD_PARAM_OUT_OF_BOUND)
    return int(v)


def _dropout(d, op, name):
    check(
        d is None or isinstance(d, DropoutDescriptor),
        f"{name} must be None or a dropout descriptor, got {type(d).__name__}",
        op,
        name,
        Status.BAD_PARAM_DESCRIPTOR_TYPE,
    )
    if d is None:
        return
    check(
        d.states is not None,
        "the dropout descriptor was never set (set_dropout_descriptor)",
        op,
        name,
        Status.BAD_PARAM_NOT_FINALIZED,
    )
    if d.dropout >= 1.0:
        raise _unsupported(
            f"{name}: dropout probability {d.dropout} leaves no scale "
            "1 / (1 - p); it must be below 1",
            op,
        )


def set_attn_descriptor(
    desc,
    attn_mode,
    n_heads,
    sm_scaler,
    data_type,
    compute_prec,
    math_type,
    attn_dropout_desc,
    post_dropout_desc,
    q_size,
    k_size,
    v_size,
    q_proj_size,
    k_proj_size,
    v_proj_size,
    o_proj_size,
    qo_max_seq_length,
    kv_max_seq_length,
    max_batch_size,
    max_beam_size,
) -> None:
    """cudnnSetAttnDescriptor. Rules (BAD_PARAM naming the argument): attn_mode only
    QUERYMAP / PROJ_BIASES flags; n_heads, q/k/v sizes, the maximum lengths, batch and
    beam sizes >= 1; projection sizes >= 0 (0: no projection); sm_scaler finite and >= 0;
    q_len == k_len after the projections; compute_prec FLOAT (or HALF with HALF data);
    a known math_type; dropout descriptors None or set. NOT_SUPPORTED: data types other
    than half, bfloat16, float; a dropout probability of 1. The dropout descriptors are read
    (probability, generator states) at every training-mode forward."""
    op = "set_attn_descriptor"
    check(
        isinstance(desc, AttnDescriptor),
        "needs a descriptor from create_attn_descriptor",
        op,
        "attn_desc",
        Status.BAD_PARAM_DESCRIPTOR_TYPE,
    )
    mode = _int(
        int(attn_mode) if isinstance(attn_mode, enum.Enum) else attn_mode,
        op,
        "attn_mode",
        0,
        ">= 0",
    )
    check(
        mode & ~3 == 0,
        f"attn_mode {mode:#x} has flags other than QUERYMAP_ONE_TO_ONE (1) "
        "and ENABLE_PROJ_BIASES (2)",
        op,
        "attn_mode",
        Status.BAD_PARAM,
    )
    sizes = dict(
        n_heads=n_heads,
        q_size=q_size,
        k_size=k_size,
        v_size=v_size,
        qo_max_seq_length=qo_max_seq_length,
        kv_max_seq_length=kv_max_seq_length,
        max_batch_size=max_batch_size,
        max_beam_size=max_beam_size,
    )
    vals = {k: _int(v, op, k, 1, ">= 1") for k, v in sizes.items()}
    projs = dict(
        q_proj_size=q_proj_size,
        k_proj_size=k_proj_size,
        v_proj_size=v_proj_size,
        o_proj_size=o_proj_size,
    )
    vals.update({k: _int(v, op, k, 0, ">= 0 (0: no projection)") for k, v in projs.items()})
    check(
        isinstance(sm_scaler, (int, float))
        and not isinstance(sm_scaler, bool)
        and math.isfinite(sm_scaler)
        and sm_scaler >= 0,
        f"sm_scaler {sm_scaler!r} must be a finite number >= 0",
        op,
        "sm_scaler",
        Status.BAD_PARAM_OUT_OF_BOUND,
    )
    q_len = vals["q_proj_size"] or vals["q_size"]
    k_len = vals["k_proj_size"] or vals["k_size"]
    check(
        q_len == k_len,
        f"queries and keys have different lengths after the projections "
        f"(q: {q_len}, k: {k_len}); their dot products need equal lengths",
        op,
        "k_proj_size" if vals["k_proj_size"] else "k_size",
        Status.BAD_PARAM_SHAPE_MISMATCH,
    )
    dt, cp = as_data_type(data_type), as_data_type(compute_prec)
    if dt not in DATA_TYPES:
        raise _unsupported(
            f"data_type {dt.name}: half, bfloat16 and float only",
            op,
            Status.NOT_SUPPORTED_DATA_TYPE,
        )
    check(
        cp == DataType.FLOAT or (cp == DataType.HALF and dt == DataType.HALF),
        f"compute_prec {cp.name} does not fit data_type {dt.name} (FLOAT, or HALF with HALF data)",
        op,
        "compute_prec",
        Status.BAD_PARAM,
    )
    try:
        mt = MathType(int(math_type))
    except ValueError:
        mt = None
    check(mt is not None, f"math_type {math_type!r} is not a MathType", op, "math_type")
    _dropout(attn_dropout_desc, op, "attn_dropout_desc")
    _dropout(post_dropout_desc, op, "post_dropout_desc")
    for k, v in vals.items():
        setattr(desc, k, v)
    desc.attn_mode, desc.sm_scaler, desc.math_type = mode, float(sm_scaler), mt
    desc.data_type, desc.compute_prec = dt, cp
    desc.attn_dropout_desc, desc.post_dropout_desc = attn_dropout_desc, post_dropout_desc


def get_attn_descriptor(desc) -> tuple:
    """cudnnGetAttnDescriptor -> every argument of set_attn_descriptor, in its order."""
    check(
        isinstance(desc, AttnDescriptor) and desc.is_set(),
        "descriptor was never set",
        "get_attn_descriptor",
        "attn_desc",
        Status.BAD_PARAM_NOT_FINALIZED,
    )
    return (
        desc.attn_mode,
        desc.n_heads,
        desc.sm_scaler,
        desc.data_type,
        desc.compute_prec,
        desc.math_type,
        desc.attn_dropout_desc,
        desc.post_dropout_desc,
        desc.q_size,
        desc.k_size,
        desc.v_size,
        desc.q_proj_size,
        desc.k_proj_size,
        desc.v_proj_size,
        desc.o_proj_size,
        desc.qo_max_seq_length,
        desc.kv_max_seq_length,
        desc.max_batch_size,
        desc.max_beam_size,
    )


# ---- the sequence data descriptor ------------------------------------------------------
@dataclasses.dataclass
class SeqDataDescriptor:
    """cudnnSeqDataDescriptor_t: dims indexed by SeqDataAxis, the axes outermost first,
    per-(batch, beam) lengths (beam fastest) and the optional padding fill."""

    data_type: DataType | None = None
    dims: tuple = ()
    axes: tuple = ()
    seq_lengths: tuple = ()
    padding_fill: float | None = None

    def is_set(self) -> bool:
        return self.data_type is not None

    @property
    def strides(self) -> tuple:
        """Element strides indexed by SeqDataAxis (packed in ``axes`` order)."""
        st, running = [0] * SEQDATA_DIM_COUNT, 1
        for ax in reversed(self.axes):
            st[ax] = running
            running *= self.dims[ax]
        return tuple(st)

    @property
    def numel(self) -> int:
        return math.prod(self.dims)


def create_seq_data_descriptor() -> SeqDataDescriptor:
    return SeqDataDescriptor()


def destroy_seq_data_descriptor(desc) -> None:
    desc.data_type = None


def set_seq_data_descriptor(
    desc,
    data_type,
    nb_dims,
    dim_a,
    axes,
    seq_length_array_size,
    seq_length_array,
    padding_fill=None,
) -> None:
    """cudnnSetSeqDataDescriptor. ``dim_a[SeqDataAxis.X]`` is axis X's size; ``axes`` the
    4 axes from outermost to innermost (VECT last: vectors are contiguous);
    ``seq_length_array``: dim_a[BATCH] * dim_a[BEAM] lengths in [0, dim_a[TIME]], beam
    fastest; ``padding_fill``: a number written to output vectors beyond their sequence's
    length, or None (left as they are)."""
    op = "set_seq_data_descriptor"
    check(
        isinstance(desc, SeqDataDescriptor),
        "needs a descriptor from create_seq_data_descriptor",
        op,
        "seq_data_desc",
        Status.BAD_PARAM_DESCRIPTOR_TYPE,
    )
    dt = as_data_type(data_type)
    if dt not in DATA_TYPES:
        raise _unsupported(
            f"data_type {dt.name}: half, bfloat16 and float only",
            op,
            Status.NOT_SUPPORTED_DATA_TYPE,
        )
    check(
        nb_dims == SEQDATA_DIM_COUNT,
        f"nb_dims {nb_dims} must be {SEQDATA_DIM_COUNT} (TIME, BATCH, BEAM, VECT)",
        op,
        "nb_dims",
        Status.BAD_PARAM_OUT_OF_BOUND,
    )
    check(
        len(dim_a) == SEQDATA_DIM_COUNT and len(axes) == SEQDATA_DIM_COUNT,
        f"dim_a and axes need {SEQDATA_DIM_COUNT} entries (have {len(dim_a)}, {len(axes)})",
        op,
        "dim_a",
        Status.BAD_PARAM_SHAPE_MISMATCH,
    )
    dims = tuple(int(d) for d in dim_a)
    check(
        all(d >= 1 for d in dims),
        f"dim_a {list(dims)} must be >= 1 on every axis",
        op,
        "dim_a",
        Status.BAD_PARAM_OUT_OF_BOUND,
    )
    try:
        order = tuple(SeqDataAxis(int(a)) for a in axes)
    except ValueError:
        order = ()
    check(
        sorted(order) == list(SeqDataAxis),
        f"axes {list(axes)} must name TIME, BATCH, BEAM and VECT once each",
        op,
        "axes",
        Status.BAD_PARAM,
    )
    check(
        order[-1] == SeqDataAxis.VECT,
        f"axes {[a.name for a in order]}: VECT must be the innermost (last) axis",
        op,
        "axes",
        Status.BAD_PARAM,
    )
    count = dims[SeqDataAxis.BATCH] * dims[SeqDataAxis.BEAM]
    lengths = [int(x) for x in seq_length_array]
    check(
        int(seq_length_array_size) == count and len(lengths) == count,
        f"seq_length_array_size {seq_length_array_size} ({len(lengths)} given) must be "
        f"BATCH * BEAM = {count}",
        op,
        "seq_length_array",
        Status.BAD_PARAM_SHAPE_MISMATCH,
    )
    t = dims[SeqDataAxis.TIME]
    bad = [x for x in lengths if not 0 <= x <= t]
    check(
        not bad,
        f"sequence lengths {bad} are outside [0, TIME = {t}]",
        op,
        "seq_length_array",
        Status.BAD_PARAM_OUT_OF_BOUND,
    )
    check(
        padding_fill is None
        or (isinstance(padding_fill, (int, float)) and not isinstance(padding_fill, bool)),
        f"padding_fill {padding_fill!r} must be None or a number",
        op,
        "padding_fill",
    )
    desc.data_type, desc.dims, desc.axes = dt, dims, order
    desc.seq_lengths = tuple(lengths)
    desc.padding_fill = None if padding_fill is None else float(padding_fill)


def get_seq_data_descriptor(desc) -> tuple:
    """cudnnGetSeqDataDescriptor -> (data_type, nb_dims, dim_a, axes, seq_length_array_size,
    seq_length_array, padding_fill)."""
    check(
        isinstance(desc, SeqDataDescriptor) and desc.is_set(),
        "descriptor was never set",
        "get_seq_data_descriptor",
        "seq_data_desc",
        Status.BAD_PARAM_NOT_FINALIZED,
    )
    return (
        desc.data_type,
        SEQDATA_DIM_COUNT,
        list(desc.dims),
        list(desc.axes),
        len(desc.seq_lengths),
        list(desc.seq_lengths),
        desc.padding_fill,
    )


__all__ = [
    "AttnQueryMap",
    "MultiHeadAttnWeightKind",
    "WgradMode",
    "SeqDataAxis",
    "AttnDescriptor",
    "SeqDataDescriptor",
    "create_attn_descriptor",
    "destroy_attn_descriptor",
    "set_attn_descriptor",
    "get_attn_descriptor",
    "create_seq_data_descriptor",
    "destroy_seq_data_descriptor",
    "set_seq_data_descriptor",
    "get_seq_data_descriptor",
]
