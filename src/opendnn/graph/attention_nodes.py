"""Scaled-dot-product attention graph nodes, forward (``sdpa``) and backward
(``sdpa_backward``); the math, the mask and the dropout stream are in ``ops/attention.py``.

Forward roles: Q [B, Hq, Sq, Dqk], K [B, Hk, Skv, Dqk], V [B, Hv, Skv, Dv] (any
strides: BHSD, BSHD, interleaved), optional BIAS [B or 1, Hq or 1, Sq, Skv],
SEQ_LEN_Q / SEQ_LEN_KV [B, 1, 1, 1] integers (exactly with ``use_padding_mask``),
ATTN_SCALE (a one-element pass-by-value float; absent: 1), SEED / OFFSET (one-element
int32 / int64, host or device; exactly with dropout) -> O [B, Hq, Sq, Dv] (Q's type
and stride order unless set) and, with ``generate_stats``, STATS [B, Hq, Sq, 1]
float32 (packed). ``use_alibi_mask`` adds ALiBi's per-head linear bias. RNG_DUMP
(either direction; a tensor the caller made, as cuDNN's rng_dump) receives the
dropout mask [B, Hq, Sq, Skv]: 1 kept, 0 dropped. Backward roles: the forward's inputs plus O, DO [B, Hq, Sq, Dv] and
STATS -> DQ, DK, DV (dims, type and stride order of Q, K, V) and optional DBIAS
(BIAS's dims).

Rules (each a typed error naming the node, the tensor and the rule): Q, K, V of rank
4, one data type among half, bfloat16 and float (the float32 graph runs on the
reference engine only); equal batch sizes; Hk and Hv dividing Hq; Q's and K's head
dims equal; head dims multiples of 8 in [8, 1024] (the Triton kernels take up to 256); K's and V's sequence lengths equal;
band bounds None or non-negative ints; dropout probability in [0, 1).
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

from ..enums import DataType, DiagonalAlignment
from ..errors import Status
from .nodes import NODE_TYPES, Node

IO_TYPES = (DataType.HALF, DataType.BFLOAT16, DataType.FLOAT)


def paged_length(node, pages: int, block: int) -> int:
    """The logical key count of a paged cache: the node's paged_max_seq_len_kv, else
    every page of the table full (pages x block_size)."""
    return node.paged_max_seq_len_kv or pages * block


INTEGER = (DataType.INT32, DataType.INT64)
MAX_HEAD_DIM = 1024  # above 256 the reference engine computes (the kernels' tiles stop there)


@dataclasses.dataclass(eq=False)
class _SdpaBase(Node):
    """The attributes and rules the forward and backward share."""

    diagonal_alignment: DiagonalAlignment = DiagonalAlignment.TOP_LEFT
    diagonal_band_left_bound: int | None = None
    diagonal_band_right_bound: int | None = None
    use_padding_mask: bool = False
    dropout_probability: float | None = None
    use_alibi_mask: bool = False
    kind: ClassVar[str] = "sdpa_base"

    def __post_init__(self):  # deserialized graphs give the alignment by name
        if isinstance(self.diagonal_alignment, str):
            self.diagonal_alignment = DiagonalAlignment[self.diagonal_alignment]

    RAGGED_ROLES: ClassVar[tuple] = ()  # the roles whose tensors may carry ragged offsets

    def attach_ragged_offsets(self) -> None:
        """Each ragged offset set on a tensor of RAGGED_ROLES becomes the node's input
        RAGGED_<role> (bound and passed like any input); one removed is dropped."""
        for r in self.RAGGED_ROLES:
            t = self.inputs.get(r, self.outputs.get(r))
            off = None if t is None else t.ragged_offset
            if off is None:
                self.inputs.pop(f"RAGGED_{r}", None)
            else:
                self.inputs[f"RAGGED_{r}"] = off

    def ragged_roles(self) -> list:
        return [r for r in self.RAGGED_ROLES if f"RAGGED_{r}" in self.inputs]

    def _check_ragged(self, desc, q) -> None:
        """Ragged (packed variable-length, THD) tensors: each offset [B + 1, 1, 1, 1]
        int32 / int64 gives the element where batch b's rows begin; it needs the padding
        mask (the per-batch lengths say how many rows there are)."""
        roles = self.ragged_roles()
        if not roles:
            return
        b = q.dims[0]
        for r in roles:
            d = desc(self.inputs[f"RAGGED_{r}"])
            if d.numel != b + 1 or d.dims[1:] != (1,) * (len(d.dims) - 1):
                raise self.error(
                    f"ragged offset of {r} dims {list(d.dims)} must be [{b + 1}, 1, 1, 1]",
                    d.label(),
                    Status.BAD_PARAM_SHAPE_MISMATCH,
                )
            if d.data_type not in INTEGER:
                raise self.error(
                    f"ragged offset of {r} must be int32 or int64, is {d.data_type.name}",
                    d.label(),
                    Status.NOT_SUPPORTED_DATA_TYPE,
                )
        if not self.use_padding_mask:
            raise self.error(
                "ragged offsets need use_padding_mask (seq_len_q / seq_len_kv give each "
                "batch's rows)",
                None,
                Status.BAD_PARAM,
            )

    # ---- shared inference ----------------------------------------------------------------
    def _need_qkv(self):
        q, k, v = (self.inputs[r] for r in ("Q", "K", "V"))
        self.need_dims(self.input_tensors())
        for t in (q, k, v):
            if len(t.dim) != 4:
                raise self._rank_error(t, t.dim)
        return q, k, v

    def _rank_error(self, t, dims):
        return self.error(
            f"needs 4 dims [B, H, S, D], got {list(dims)}", t, Status.BAD_PARAM_SHAPE_MISMATCH
        )

    def _check_qkv(self, desc):
        """Q, K, V against each other; returns (q, k, v) descriptors."""
        q, k, v = (desc(self.inputs[r]) for r in ("Q", "K", "V"))
        for d in (q, k, v):
            if len(d.dims) != 4:
                raise self._rank_error(d.label(), d.dims)
        if getattr(self, "paged", False):  # the containers' logical [B, H, S_kv, D]
            self._check_paging(desc, q)
            k, v = self.logical_kv(desc, q, "K"), self.logical_kv(desc, q, "V")
        for d in (q, k, v):
            if d.data_type not in IO_TYPES:
                raise self.error(
                    f"data type {d.data_type.name} is not half, bfloat16 or float",
                    d.label(),
                    Status.NOT_SUPPORTED_DATA_TYPE,
                )
        for d in (k, v):
            if d.data_type != q.data_type:
                raise self.error(
                    f"Q, K and V must have one data type: Q is "
                    f"{q.data_type.name}, {d.label()} is {d.data_type.name}",
                    d.label(),
                    Status.BAD_PARAM,
                )
        b, h_q, _, d_qk = q.dims
        for d, role in ((k, "K"), (v, "V")):
            if d.dims[0] != b:
                raise self.error(
                    f"{role} batch size {d.dims[0]} differs from Q's {b}",
                    d.label(),
                    Status.BAD_PARAM_SHAPE_MISMATCH,
                )
            if d.dims[1] < 1 or h_q % d.dims[1]:
                raise self.error(
                    f"{role} head count {d.dims[1]} does not divide Q's head "
                    f"count {h_q} (grouped-query attention needs whole groups)",
                    d.label(),
                    Status.BAD_PARAM_SHAPE_MISMATCH,
                )
        if k.dims[3] != d_qk:
            raise self.error(
                f"K head dim {k.dims[3]} differs from Q's {d_qk}",
                k.label(),
                Status.BAD_PARAM_SHAPE_MISMATCH,
            )
        if v.dims[2] != k.dims[2]:
            raise self.error(
                f"V sequence length {v.dims[2]} differs from K's {k.dims[2]}",
                v.label(),
                Status.BAD_PARAM_SHAPE_MISMATCH,
            )
        for d, role in ((q, "Q"), (v, "V")):
            hd = d.dims[3]
            if hd % 8 or not 8 <= hd <= MAX_HEAD_DIM:
                raise self.error(
                    f"{role} head dim {hd} must be a multiple of 8 in [8, {MAX_HEAD_DIM}]",
                    d.label(),
                    Status.NOT_SUPPORTED_SHAPE,
                )
        return q, k, v

    def _check_options(self, desc, q, k) -> None:
        """Bias, padding, scale, dropout and the band against Q and K."""
        b, h_q, s_q, _ = q.dims
        s_kv = k.dims[2]
        attrs = None  # attribute rules name no tensor
        if "BIAS" in self.inputs:
            d = desc(self.inputs["BIAS"])
            if (
                len(d.dims) != 4
                or d.dims[0] not in (1, b)
                or d.dims[1] not in (1, h_q)
                or d.dims[2:] != (s_q, s_kv)
            ):
                raise self.error(
                    f"BIAS dims {list(d.dims)} must be [1 or {b}, 1 or {h_q}, {s_q}, {s_kv}]",
                    d.label(),
                    Status.BAD_PARAM_SHAPE_MISMATCH,
                )
            self.need_floating([d])
        lengths = [r for r in ("SEQ_LEN_Q", "SEQ_LEN_KV") if r in self.inputs]
        if self.use_padding_mask and len(lengths) != 2:
            raise self.error(
                "use_padding_mask needs both seq_len_q and seq_len_kv",
                attrs,
                Status.BAD_PARAM_NULL_POINTER,
            )
        # without use_padding_mask the lengths mask nothing (cuDNN takes them so; a
        # score_mod subgraph may read them)
        for r in lengths:
            d = desc(self.inputs[r])
            self.need_shape(d, (b, 1, 1, 1), r)
            if d.data_type not in INTEGER:
                raise self.error(
                    f"{r} must be int32 or int64, is {d.data_type.name}",
                    d.label(),
                    Status.NOT_SUPPORTED_DATA_TYPE,
                )
        if "ATTN_SCALE" in self.inputs:
            d = desc(self.inputs["ATTN_SCALE"])
            if d.numel != 1 or not d.is_pass_by_value or not d.data_type.is_floating:
                raise self.error(
                    "ATTN_SCALE must be a one-element pass-by-value float (is "
                    f"{d.data_type.name} {list(d.dims)}"
                    f"{'' if d.is_pass_by_value else ', in device memory'})",
                    d.label(),
                    Status.BAD_PARAM,
                )
        self._check_dropout(desc, attrs)
        if "BLOCK_MASK" in self.inputs:
            d = desc(self.inputs["BLOCK_MASK"])
            tiles_kv = -(-s_kv // 128)
            self.need_shape(d, (b, h_q, -(-s_q // 128), -(-tiles_kv // 8)), "BLOCK_MASK")
            if d.data_type != DataType.UINT8:
                raise self.error(
                    f"BLOCK_MASK must be uint8 (a bit per 128 x 128 tile), is {d.data_type.name}",
                    d.label(),
                    Status.NOT_SUPPORTED_DATA_TYPE,
                )
        if "SINK_TOKEN" in self.inputs:
            d = desc(self.inputs["SINK_TOKEN"])
            self.need_shape(d, (1, h_q, 1, 1), "SINK_TOKEN")
            if d.data_type != DataType.FLOAT:
                raise self.error(
                    f"SINK_TOKEN must be float32, is {d.data_type.name}",
                    d.label(),
                    Status.NOT_SUPPORTED_DATA_TYPE,
                )
        if not isinstance(self.diagonal_alignment, DiagonalAlignment):
            raise self.error(
                f"diagonal_alignment {self.diagonal_alignment!r} is not a DiagonalAlignment",
                attrs,
                Status.BAD_PARAM_ATTRIBUTE_TYPE,
            )
        for side in ("left", "right"):
            v = getattr(self, f"diagonal_band_{side}_bound")
            if v is None:
                continue
            if not isinstance(v, int) or isinstance(v, bool):
                raise self.error(
                    f"diagonal_band_{side}_bound {v!r} is not an int",
                    attrs,
                    Status.BAD_PARAM_ATTRIBUTE_TYPE,
                )
            if v < 0:
                raise self.error(
                    f"diagonal_band_{side}_bound {v} is negative",
                    attrs,
                    Status.BAD_PARAM_OUT_OF_BOUND,
                )

    def _check_dropout(self, desc, attrs) -> None:
        p = self.dropout_probability
        rng = [r for r in ("SEED", "OFFSET") if r in self.inputs]
        if p is None:
            if rng:
                raise self.error(
                    "SEED / OFFSET are given only with dropout",
                    desc(self.inputs[rng[0]]).label(),
                    Status.BAD_PARAM,
                )
            return
        if not (isinstance(p, (int, float)) and math.isfinite(p) and 0.0 <= p < 1.0):
            why = " (p = 1 leaves no scale 1 / (1 - p))" if p == 1 else ""
            raise self.error(
                f"dropout probability {p} is outside [0, 1){why}",
                attrs,
                Status.BAD_PARAM_OUT_OF_BOUND,
            )
        if len(rng) != 2:
            raise self.error(
                "dropout needs a SEED and an OFFSET", attrs, Status.BAD_PARAM_NULL_POINTER
            )
        for r in rng:
            d = desc(self.inputs[r])
            if d.numel != 1 or d.data_type not in INTEGER:
                raise self.error(
                    f"{r} must be one int32/int64 element (is {d.data_type.name} {list(d.dims)})",
                    d.label(),
                    Status.BAD_PARAM,
                )

    def _check_user_dropout(self, desc, q, k) -> None:
        """DROPOUT_MASK [B, Hq, Sq, Skv] (nonzero: kept) and DROPOUT_SCALE (a one-element
        pass-by-value float): the caller's dropout, instead of probability and seed."""
        if "DROPOUT_MASK" not in self.inputs:
            return
        d = desc(self.inputs["DROPOUT_MASK"])
        self.need_shape(d, (q.dims[0], q.dims[1], q.dims[2], k.dims[2]), "DROPOUT_MASK")
        sc = desc(self.inputs["DROPOUT_SCALE"])
        if sc.numel != 1 or not sc.is_pass_by_value or not sc.data_type.is_floating:
            raise self.error(
                "DROPOUT_SCALE must be a one-element pass-by-value float",
                sc.label(),
                Status.BAD_PARAM,
            )
        if self.dropout_probability is not None:
            raise self.error(
                "dropout is either (probability, seed, offset) or (mask, scale)",
                d.label(),
                Status.BAD_PARAM,
            )

    def _check_rng_dump(self, desc, q, k) -> None:
        """RNG_DUMP (an output): the dropout mask [B, Hq, Sq, Skv], exactly with dropout
        (the caller's mask checked here too)."""
        self._check_user_dropout(desc, q, k)
        if "RNG_DUMP" not in self.outputs:
            return
        d = desc(self.outputs["RNG_DUMP"])
        if self.dropout_probability is None:
            raise self.error("RNG_DUMP needs dropout", d.label(), Status.BAD_PARAM)
        self.need_shape(d, (q.dims[0], q.dims[1], q.dims[2], k.dims[2]), "RNG_DUMP")
        self.need_floating([d])


@dataclasses.dataclass(eq=False)
class Sdpa(_SdpaBase):
    """[O, STATS] = sdpa(Q, K, V, ...); STATS only with ``generate_stats``.

    Paged K / V (``PAGE_TABLE_K`` / ``PAGE_TABLE_V`` inputs): K and V are containers
    [num_blocks, Hk, block_size, D] and the tables [B, 1, pages, 1] int32 name the block
    holding each run of block_size keys of batch b: logical K[b, h, j] =
    K[table[b, 0, j // block_size, 0], h, j % block_size] for j < ``paged_max_seq_len_kv``
    (default pages x block_size), the logical sequence length everything else sees.
    """

    generate_stats: bool = True
    paged_max_seq_len_kv: int | None = None
    kind: ClassVar[str] = "sdpa"
    # a page table's ragged offsets pack it: batch b's pages start at element offset[b]
    RAGGED_ROLES: ClassVar[tuple] = (
        "Q",
        "K",
        "V",
        "O",
        "STATS",
        "SCORE_MAX",
        "SCORE_SUM_EXP",
        "PAGE_TABLE_K",
        "PAGE_TABLE_V",
    )

    @property
    def paged(self) -> bool:
        return "PAGE_TABLE_K" in self.inputs

    def logical_kv(self, desc, q, role: str):
        """K or V (``role``) as the [B, H, S_kv, D] the attention sees: its descriptor, or
        with paged caches the container's logical view (its dims; strides stand in)."""
        t = desc(self.inputs[role])
        if not self.paged:
            return t
        table = desc(self.inputs[f"PAGE_TABLE_{role}"])
        s_kv = paged_length(self, table.dims[2], t.dims[2])
        dims = (q.dims[0], t.dims[1], s_kv, t.dims[3])
        return dataclasses.replace(t, dims=dims, strides=(0, 0, 0, 1))

    def _check_paging(self, desc, q) -> None:
        """The page tables against the containers and the logical length."""
        if not self.paged:
            return
        b = q.dims[0]
        for role, table_role in (("K", "PAGE_TABLE_K"), ("V", "PAGE_TABLE_V")):
            if table_role not in self.inputs:
                raise self.error(
                    "paged attention needs both page tables (K and V)",
                    None,
                    Status.BAD_PARAM_NULL_POINTER,
                )
            c, table = desc(self.inputs[role]), desc(self.inputs[table_role])
            if (
                len(table.dims) != 4
                or table.dims[0] != b
                or table.dims[1] != 1
                or table.dims[3] != 1
            ):
                raise self.error(
                    f"{table_role} dims {list(table.dims)} must be [{b}, 1, pages, 1]",
                    table.label(),
                    Status.BAD_PARAM_SHAPE_MISMATCH,
                )
            if table.data_type != DataType.INT32:
                raise self.error(
                    f"{table_role} must be int32, is {table.data_type.name}",
                    table.label(),
                    Status.NOT_SUPPORTED_DATA_TYPE,
                )
            s_kv = self.paged_max_seq_len_kv
            if s_kv is not None and not (
                isinstance(s_kv, int) and 0 < s_kv <= table.dims[2] * c.dims[2]
            ):
                raise self.error(
                    f"paged_attention_max_seq_len_kv {s_kv!r} must be an int in [1, pages x "
                    f"block_size = {table.dims[2] * c.dims[2]}]",
                    table.label(),
                    Status.BAD_PARAM_OUT_OF_BOUND,
                )

    def infer_properties(self, ctx) -> None:
        q, k, v = self._need_qkv()
        o = self.outputs["O"]
        if o.dim is None:
            o.dim = [q.dim[0], q.dim[1], q.dim[2], v.dim[3]]
        ctx.fill_type(o, q)
        ctx.fill_strides(o, q)
        for role in ("STATS", "SCORE_MAX", "SCORE_SUM_EXP"):
            _fill_float(ctx, self.outputs.get(role), [q.dim[0], q.dim[1], q.dim[2], 1])
        _fill_float(ctx, self.outputs.get("RNG_DUMP"), [q.dim[0], q.dim[1], q.dim[2], k.dim[2]])

    def validate(self, desc) -> None:
        q, k, v = self._check_qkv(desc)
        self._check_options(desc, q, k)
        b, h_q, s_q, _ = q.dims
        o = desc(self.outputs["O"])
        self.need_shape(o, (b, h_q, s_q, v.dims[3]), "O")
        self.need_floating([o])
        if self.generate_stats != ("STATS" in self.outputs):
            raise self.error(
                "STATS is an output exactly when generate_stats is True", None, Status.BAD_PARAM
            )
        for role in ("STATS", "SCORE_MAX", "SCORE_SUM_EXP"):
            if role in self.outputs:
                _check_stats(self, desc(self.outputs[role]), (b, h_q, s_q, 1), role)
        if "SCORES" in self.inputs:  # a score_mod subgraph's result replaces scale Q K^T
            d = desc(self.inputs["SCORES"])
            self.need_shape(d, (b, h_q, s_q, k.dims[2]), "SCORES")
            self.need_floating([d])
        self._check_rng_dump(desc, q, k)
        self._check_ragged(desc, q)
        if self.paged and {"Q", "K", "V", "O", "STATS"} & set(self.ragged_roles()):
            raise self.error(
                "ragged Q / K / V / O with paged K / V are not supported",
                None,
                Status.NOT_SUPPORTED,
            )


@dataclasses.dataclass(eq=False)
class SdpaBackward(_SdpaBase):
    """[DQ, DK, DV] (and DBIAS) = sdpa_backward(Q, K, V, O, DO, STATS, ...)."""

    use_deterministic_algorithm: bool = False
    kind: ClassVar[str] = "sdpa_backward"
    RAGGED_ROLES: ClassVar[tuple] = ("Q", "K", "V", "O", "DO", "STATS", "DQ", "DK", "DV")

    def infer_properties(self, ctx) -> None:
        q, k, v = self._need_qkv()
        for out, like in (("DQ", q), ("DK", k), ("DV", v), ("DBIAS", self.inputs.get("BIAS"))):
            t = self.outputs.get(out)
            if t is not None and like is not None:
                ctx.fill_like(t, like)
        if "DSCORES" in self.outputs:  # dS' for the caller's score_mod_bprop
            _fill_float(ctx, self.outputs["DSCORES"], [q.dim[0], q.dim[1], q.dim[2], k.dim[2]])
        _fill_float(ctx, self.outputs.get("DSINK_TOKEN"), [1, q.dim[1], 1, 1])
        _fill_float(ctx, self.outputs.get("RNG_DUMP"), [q.dim[0], q.dim[1], q.dim[2], k.dim[2]])

    def validate(self, desc) -> None:
        q, k, v = self._check_qkv(desc)
        self._check_options(desc, q, k)
        b, h_q, s_q, _ = q.dims
        o_dims = (b, h_q, s_q, v.dims[3])
        for role in ("O", "DO"):
            d = desc(self.inputs[role])
            self.need_shape(d, o_dims, role)
            self.need_floating([d])
        _check_stats(self, desc(self.inputs["STATS"]), (b, h_q, s_q, 1))
        for role, like in (("DQ", q), ("DK", k), ("DV", v)):
            if role not in self.outputs and "SCORES" in self.inputs:
                continue  # with given scores dQ / dK come from an sdpa_scores_backward
            d = desc(self.outputs[role])
            self.need_shape(d, like.dims, role)
            self.need_floating([d])
        if "SCORES" in self.inputs:
            for role in ("SCORES", "DSCORES"):
                d = desc(self.inputs[role] if role == "SCORES" else self.outputs[role])
                self.need_shape(d, (b, h_q, s_q, k.dims[2]), role)
                self.need_floating([d])
        if "DBIAS" in self.outputs:
            d = desc(self.outputs["DBIAS"])
            if "BIAS" not in self.inputs:
                raise self.error("DBIAS needs a BIAS", d.label(), Status.BAD_PARAM_NULL_POINTER)
            self.need_shape(d, desc(self.inputs["BIAS"]).dims, "DBIAS")
            self.need_floating([d])
        if "DSINK_TOKEN" in self.outputs:
            d = desc(self.outputs["DSINK_TOKEN"])
            if "SINK_TOKEN" not in self.inputs:
                raise self.error(
                    "DSINK_TOKEN needs a SINK_TOKEN", d.label(), Status.BAD_PARAM_NULL_POINTER
                )
            _check_stats(self, d, (1, h_q, 1, 1), "DSINK_TOKEN")
        self._check_rng_dump(desc, q, k)
        self._check_ragged(desc, q)


def _fill_float(ctx, t, dims) -> None:
    """An unset float32 output's dims (``dims``), type (FLOAT) and packed strides."""
    if t is None:
        return
    if t.dim is None:
        t.dim = list(dims)
    if t.data_type == DataType.NOT_SET:
        t.data_type = DataType.FLOAT
    ctx.fill_strides(t, None)


def _check_stats(node, d, want, role="STATS") -> None:
    node.need_shape(d, want, role)
    if d.data_type != DataType.FLOAT:
        raise node.error(
            f"{role} must be float32, is {d.data_type.name}",
            d.label(),
            Status.NOT_SUPPORTED_DATA_TYPE,
        )


@dataclasses.dataclass(eq=False)
class SdpaScores(Node):
    """S [B, Hq, Sq, Skv] (float32) = ATTN_SCALE Q K^T (+ BIAS) (+ ALiBi): the scores an
    ``sdpa`` with a ``score_mod`` hands to the caller's subgraph (graph nodes between this
    node and the sdpa, whose SCORES input is the subgraph's result). K may be a paged
    cache (PAGE_TABLE_K), as the sdpa's."""

    use_alibi_mask: bool = False
    paged_max_seq_len_kv: int | None = None
    kind: ClassVar[str] = "sdpa_scores"

    def _s_kv(self, k_dims, table_dims) -> int:
        if table_dims is None:
            return k_dims[2]
        return paged_length(self, table_dims[2], k_dims[2])

    def infer_properties(self, ctx) -> None:
        q, k = self.inputs["Q"], self.inputs["K"]
        self.need_dims([q, k])
        table = self.inputs.get("PAGE_TABLE_K")
        _fill_float(
            ctx,
            self.outputs["S"],
            [q.dim[0], q.dim[1], q.dim[2], self._s_kv(k.dim, None if table is None else table.dim)],
        )

    def validate(self, desc) -> None:
        q, k = desc(self.inputs["Q"]), desc(self.inputs["K"])
        for d in (q, k):
            if len(d.dims) != 4:
                raise self.error(
                    f"needs 4 dims [B, H, S, D], got {list(d.dims)}",
                    d.label(),
                    Status.BAD_PARAM_SHAPE_MISMATCH,
                )
        if k.dims[3] != q.dims[3] or q.dims[1] % k.dims[1]:
            raise self.error(
                f"K {list(k.dims)} must share Q's head dim and divide its heads {list(q.dims)}",
                k.label(),
                Status.BAD_PARAM_SHAPE_MISMATCH,
            )
        table = self.inputs.get("PAGE_TABLE_K")
        s_kv = self._s_kv(k.dims, None if table is None else desc(table).dims)
        self.need_shape(desc(self.outputs["S"]), (q.dims[0], q.dims[1], q.dims[2], s_kv), "S")


@dataclasses.dataclass(eq=False)
class SdpaScoresBackward(Node):
    """[DQ, DK] = the gradients of S = ATTN_SCALE Q K^T from DS [B, Hq, Sq, Skv] (what a
    score_mod_bprop subgraph made of the sdpa_backward's DSCORES)."""

    kind: ClassVar[str] = "sdpa_scores_backward"

    def infer_properties(self, ctx) -> None:
        self.need_dims([self.inputs["Q"], self.inputs["K"], self.inputs["DS"]])
        for out, like in (("DQ", "Q"), ("DK", "K")):
            ctx.fill_like(self.outputs[out], self.inputs[like])

    def validate(self, desc) -> None:
        q, k, ds = (desc(self.inputs[r]) for r in ("Q", "K", "DS"))
        self.need_shape(ds, (q.dims[0], q.dims[1], q.dims[2], k.dims[2]), "DS")
        for role, like in (("DQ", q), ("DK", k)):
            d = desc(self.outputs[role])
            self.need_shape(d, like.dims, role)
            self.need_floating([d])


for _cls in (Sdpa, SdpaBackward, SdpaScores, SdpaScoresBackward):
    NODE_TYPES[_cls.kind] = _cls
