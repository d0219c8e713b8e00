"""Mixture-of-experts grouped matmul nodes (cuDNN's MoE Grouped Matmul; the math is in
``ops/moe.py``):

- ``MoeGroupedMatmul``: TOKEN [1, M, K] (GATHER: [1, S, K]), WEIGHT [E, K, N],
  FIRST_TOKEN_OFFSET [G, 1, 1] int32 (G = B * E), TOKEN_INDEX [1, R, 1] int32 (GATHER,
  SCATTER), TOKEN_KS [1, M, 1] int32 (SCATTER) -> OUTPUT [1, M_out, N], M_out = R in
  GATHER and M otherwise; row-major unless set. ``moe_mode`` NONE / GATHER / SCATTER,
  ``top_k`` (SCATTER: at least 1).
- ``MoeGroupedMatmulBwd``: DOUTPUT [1, M, N], TOKEN [1, M, K], FIRST_TOKEN_OFFSET
  [G, 1, 1] int32 -> DWEIGHT [G, K, N], column-major in K x N ([K N, 1, K]) unless set.

Rules (each a typed error naming the node, the tensor and the rule): ranks and dims as
above; K of TOKEN equals K of WEIGHT; G a positive multiple of E; offsets and indices
int32; the mode's tensors present (GATHER: TOKEN_INDEX; SCATTER: TOKEN_INDEX, TOKEN_KS
and top_k >= 1); token, weight and output data floating. The offsets and indices are
data: what their values may break is masked at run time (``ops/moe.py``).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from ..enums import DataType, MoeGroupedMatmulMode
from ..errors import Status
from .nodes import NODE_TYPES, Node

OFFSET = "FIRST_TOKEN_OFFSET"


def _dims(t):
    """Dims of a builder tensor (``dim``) or a frozen descriptor (``dims``)."""
    return list(t.dim) if hasattr(t, "dim") else list(t.dims)


def _need_rank3(node, t, role: str, form: str, leading_one: bool = False) -> None:
    dims = _dims(t)
    if len(dims) != 3 or (leading_one and dims[0] != 1):
        raise node.error(f"{role} dims {dims} must be {form}", t, Status.BAD_PARAM_SHAPE_MISMATCH)


def _need_int32(node, d, role: str) -> None:
    if d.data_type != DataType.INT32:
        raise node.error(
            f"{role} must be int32, is {d.data_type.name}", d, Status.NOT_SUPPORTED_DATA_TYPE
        )


def _need_column(node, d, role: str, rows: int | None, what: str) -> None:
    """``d`` is [1, rows, 1] (any rows when None) int32."""
    dims = list(d.dims)
    if len(dims) != 3 or dims[0] != 1 or dims[2] != 1 or (rows is not None and dims[1] != rows):
        want = f"[1, {rows}, 1]" if rows is not None else "[1, R, 1]"
        raise node.error(
            f"{role} dims {dims} must be {want}{what}", d, Status.BAD_PARAM_SHAPE_MISMATCH
        )
    _need_int32(node, d, role)


def _need_offsets(node, off, experts: int | None) -> int:
    """FIRST_TOKEN_OFFSET is [G, 1, 1] int32 with G a positive multiple of ``experts``;
    returns G."""
    dims = list(off.dims)
    if len(dims) != 3 or dims[1:] != [1, 1] or dims[0] < 1:
        raise node.error(
            f"{OFFSET} dims {dims} must be [G, 1, 1] with G = batch x experts >= 1",
            off,
            Status.BAD_PARAM_SHAPE_MISMATCH,
        )
    if experts is not None and dims[0] % experts:
        raise node.error(
            f"{OFFSET} has {dims[0]} groups: must be a multiple of the {experts} experts "
            "(G = batch x experts; group g uses expert g % E)",
            off,
            Status.BAD_PARAM_SHAPE_MISMATCH,
        )
    _need_int32(node, off, OFFSET)
    return dims[0]


@dataclasses.dataclass(eq=False)
class MoeGroupedMatmul(Node):
    """OUTPUT = the grouped product of TOKEN rows with the experts' WEIGHT, routed by
    FIRST_TOKEN_OFFSET (and TOKEN_INDEX / TOKEN_KS in GATHER / SCATTER; ``ops/moe.py``)."""

    moe_mode: MoeGroupedMatmulMode = MoeGroupedMatmulMode.NONE
    top_k: int = 0
    kind: ClassVar[str] = "moe_grouped_matmul"

    def __post_init__(self):  # deserialized graphs give the mode by name
        if isinstance(self.moe_mode, str):
            self.moe_mode = MoeGroupedMatmulMode[self.moe_mode]

    def _check_mode(self) -> None:
        """The mode's tensors and top_k (the roles holding None count as absent)."""
        mode = self.moe_mode
        need = {
            MoeGroupedMatmulMode.NONE: (),
            MoeGroupedMatmulMode.GATHER: ("TOKEN_INDEX",),
            MoeGroupedMatmulMode.SCATTER: ("TOKEN_INDEX", "TOKEN_KS"),
        }[mode]
        for role in need:
            if self.inputs.get(role) is None:
                raise self.error(
                    f"{mode.name} mode needs a {role} tensor", role, Status.BAD_PARAM_NULL_POINTER
                )
        k = self.top_k
        if isinstance(k, bool) or not isinstance(k, int):
            raise self.error(
                f"top_k must be an int, got {k!r}", status=Status.BAD_PARAM_ATTRIBUTE_TYPE
            )
        if k < 0 or (mode == MoeGroupedMatmulMode.SCATTER and k < 1):
            raise self.error(
                f"top_k is {k}: SCATTER mode needs top_k >= 1 (the experts per token), and "
                "no mode takes a negative one",
                status=Status.BAD_PARAM_OUT_OF_BOUND,
            )

    def routed_rows(self, desc) -> int:
        """The rows the groups partition: TOKEN_INDEX's in GATHER, TOKEN's otherwise."""
        if self.moe_mode == MoeGroupedMatmulMode.GATHER:
            return desc(self.inputs["TOKEN_INDEX"]).dims[1]
        return desc(self.inputs["TOKEN"]).dims[1]

    def infer_properties(self, ctx) -> None:
        self._check_mode()
        tok, w = self.inputs["TOKEN"], self.inputs["WEIGHT"]
        idx = self.inputs.get("TOKEN_INDEX")
        self.need_dims([tok, w, self.inputs[OFFSET], idx, self.inputs.get("TOKEN_KS")])
        _need_rank3(self, tok, "TOKEN", "[1, M, K]", leading_one=True)
        _need_rank3(self, w, "WEIGHT", "[E, K, N]")
        out = self.outputs["OUTPUT"]
        if out.dim is None:
            gather = self.moe_mode == MoeGroupedMatmulMode.GATHER
            if gather:
                _need_rank3(self, idx, "TOKEN_INDEX", "[1, R, 1]", leading_one=True)
            out.dim = [1, idx.dim[1] if gather else tok.dim[1], w.dim[2]]
        ctx.fill_type(out, tok)
        ctx.fill_strides(out, None)  # row-major, as cudnn-frontend infers it

    def validate(self, desc) -> None:
        self._check_mode()
        tok, w = desc(self.inputs["TOKEN"]), desc(self.inputs["WEIGHT"])
        out = desc(self.outputs["OUTPUT"])
        _need_rank3(self, tok, "TOKEN", "[1, M, K]", leading_one=True)
        _need_rank3(self, w, "WEIGHT", "[E, K, N]")
        m, k = tok.dims[1], tok.dims[2]
        experts, kw, n = w.dims
        if kw != k:
            raise self.error(
                f"WEIGHT dims {list(w.dims)} must be [E, {k}, N]: K {kw} differs from "
                f"TOKEN's {k} (TOKEN dims {list(tok.dims)})",
                w,
                Status.BAD_PARAM_SHAPE_MISMATCH,
            )
        if experts < 1:
            raise self.error("WEIGHT has no experts (E = 0)", w, Status.BAD_PARAM_SHAPE_MISMATCH)
        _need_offsets(self, desc(self.inputs[OFFSET]), experts)
        mode = self.moe_mode
        if mode == MoeGroupedMatmulMode.GATHER:
            _need_column(self, desc(self.inputs["TOKEN_INDEX"]), "TOKEN_INDEX", None, "")
        elif mode == MoeGroupedMatmulMode.SCATTER:
            for role in ("TOKEN_INDEX", "TOKEN_KS"):
                _need_column(self, desc(self.inputs[role]), role, m, " (one per TOKEN row)")
        self.need_shape(out, (1, self.routed_rows(desc), n), "OUTPUT")
        self.need_floating((tok, w, out))


@dataclasses.dataclass(eq=False)
class MoeGroupedMatmulBwd(Node):
    """DWEIGHT[g] = TOKEN[rows of g]^T @ DOUTPUT[rows of g], g < G (``ops/moe.py``)."""

    kind: ClassVar[str] = "moe_grouped_matmul_bwd"

    def infer_properties(self, ctx) -> None:
        dy, tok, off = self.inputs["DOUTPUT"], self.inputs["TOKEN"], self.inputs[OFFSET]
        self.need_dims([dy, tok, off])
        _need_rank3(self, dy, "DOUTPUT", "[1, M, N]", leading_one=True)
        _need_rank3(self, tok, "TOKEN", "[1, M, K]", leading_one=True)
        dw = self.outputs["DWEIGHT"]
        if dw.dim is None:
            dw.dim = [off.dim[0], tok.dim[2], dy.dim[2]]
        ctx.fill_type(dw, dy)
        if dw.stride is None and len(dw.dim) == 3:
            g, k, n = dw.dim
            dw.stride = [k * n, 1, max(k, 1)]  # column-major in K x N, as cudnn-frontend
        ctx.fill_strides(dw, None)

    def validate(self, desc) -> None:
        dy, tok = desc(self.inputs["DOUTPUT"]), desc(self.inputs["TOKEN"])
        dw = desc(self.outputs["DWEIGHT"])
        _need_rank3(self, dy, "DOUTPUT", "[1, M, N]", leading_one=True)
        _need_rank3(self, tok, "TOKEN", "[1, M, K]", leading_one=True)
        if dy.dims[1] != tok.dims[1]:
            raise self.error(
                f"DOUTPUT dims {list(dy.dims)} must have TOKEN's {tok.dims[1]} rows "
                f"(TOKEN dims {list(tok.dims)})",
                dy,
                Status.BAD_PARAM_SHAPE_MISMATCH,
            )
        groups = _need_offsets(self, desc(self.inputs[OFFSET]), None)
        self.need_shape(dw, (groups, tok.dims[2], dy.dims[2]), "DWEIGHT")
        self.need_floating((dy, tok, dw))


for _cls in (MoeGroupedMatmul, MoeGroupedMatmulBwd):
    NODE_TYPES[_cls.kind] = _cls
