"""Dropout graph nodes (see ``ops/dropout.py`` for the random stream):

- ``dropout``: Y = X * MASK / (1 - p) with MASK[i] = 1 where the uniform number of
  element i (word i mod 4 of Philox-4x32-10 of (SEED, OFFSET + i // 4), i the element's
  row-major logical index) is >= p; MASK (left out with the builder's
  generate_mask=False) has X's dims;
- ``dropout_backward``: DX = DY * MASK / (1 - p), the mask regenerated from the same
  (SEED, OFFSET): nothing is stored between the two.

SEED and OFFSET are single-element integer tensors, pass-by-value (host numbers) or in
device memory (int64, as cudnn-frontend's rng node and sdpa's dropout take them). p = 1
drops everything (Y = 0), as PyTorch does.
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

from ..enums import DataType
from ..errors import Status
from .nodes import NODE_TYPES, Node

INTEGER = (DataType.INT32, DataType.INT64)


@dataclasses.dataclass(eq=False)
class _DropoutBase(Node):
    probability: float = 0.5
    kind: ClassVar[str] = "dropout_base"
    DATA: ClassVar[str] = "X"
    OUT: ClassVar[tuple] = ("Y",)

    def infer_properties(self, ctx) -> None:
        x = self.inputs[self.DATA]
        self.need_dims((x, self.inputs["SEED"], self.inputs["OFFSET"]))
        for r in self.OUT:
            if self.outputs.get(r) is not None:
                ctx.fill_like(self.outputs[r], x)

    def validate(self, desc) -> None:
        p = self.probability
        if not (isinstance(p, (int, float)) and math.isfinite(p) and 0.0 <= p <= 1.0):
            raise self.error(
                f"probability {p} is outside [0, 1]",
                f"{self.label()} attributes",
                Status.BAD_PARAM_OUT_OF_BOUND,
            )
        x = desc(self.inputs[self.DATA])
        for role in ("SEED", "OFFSET"):
            d = desc(self.inputs[role])
            if d.numel != 1 or d.data_type not in INTEGER:
                raise self.error(
                    f"{role} must be one int32/int64 element (is "
                    f"{d.data_type.name} {list(d.dims)})",
                    d.label(),
                    Status.BAD_PARAM,
                )
        for r in self.OUT:
            uid = self.outputs.get(r)
            if uid is None:
                continue
            d = desc(uid)
            if d.dims != x.dims:
                raise self.error(
                    f"{r} dims {list(d.dims)} must equal {list(x.dims)}",
                    d.label(),
                    Status.BAD_PARAM_SHAPE_MISMATCH,
                )
        for d in (x, desc(self.outputs[self.OUT[0]])):
            if not d.data_type.is_floating:
                raise self.error(
                    f"data type {d.data_type.name} is not a floating type",
                    d.label(),
                    Status.NOT_SUPPORTED_DATA_TYPE,
                )


@dataclasses.dataclass(eq=False)
class Dropout(_DropoutBase):
    """Y = X * MASK / (1 - p) (and MASK, 0/1 in its own type, when it is an output)."""

    kind: ClassVar[str] = "dropout"
    OUT: ClassVar[tuple] = ("Y", "MASK")


@dataclasses.dataclass(eq=False)
class DropoutBackward(_DropoutBase):
    """DX = DY * MASK / (1 - p), MASK regenerated from (SEED, OFFSET)."""

    kind: ClassVar[str] = "dropout_backward"
    DATA: ClassVar[str] = "DY"
    OUT: ClassVar[tuple] = ("DX",)


for _cls in (Dropout, DropoutBackward):
    NODE_TYPES[_cls.kind] = _cls
