"""Local response normalization graph nodes (see ``ops/lrn.py`` for the math):

- ``lrn``: Y = x / (k + alpha/n sum_{n channels} x^2)^beta across channels (axis 1);
- ``lrn_backward``: DX from DY, X and the forward's Y;
- ``div_norm``: Y = (x - means) / (k + alpha/n^s sum_{n^s box} (x - means)^2)^beta over
  the spatial axes (cuDNN's divisive normalization with precomputed means);
- ``div_norm_backward``: DX and DMEANS (= -DX) from DY, X and MEANS.

Every tensor has X's dims: [N, C, spatial...] with at least one spatial dim. The
attributes follow cuDNN's LRN descriptor and its ranges (n in [1, 16], k >= 1e-5,
beta >= 0.01).
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

from ..errors import Status
from ..ops import lrn as ref
from .nodes import NODE_TYPES, Node


@dataclasses.dataclass(eq=False)
class _LrnBase(Node):
    lrn_n: int = 5
    lrn_alpha: float = 1e-4
    lrn_beta: float = 0.75
    lrn_k: float = 2.0
    kind: ClassVar[str] = "lrn_base"
    IN: ClassVar[tuple] = ("X",)
    OUT: ClassVar[tuple] = ("Y",)

    def infer_properties(self, ctx) -> None:
        ins = [self.inputs[r] for r in self.IN]
        self.need_dims(ins)
        x = self.inputs["X"]
        for r in self.OUT:
            out = self.outputs[r]
            if out.dim is None:
                out.dim = list(x.dim)
            ctx.fill_type(out, ins[0])
            ctx.fill_strides(out, ins[0])

    def validate(self, desc) -> None:
        self.check_attributes()
        x = desc(self.inputs["X"])
        if not 3 <= len(x.dims) <= 8:
            raise self.error(
                f"needs 3 to 8 dims (N, C, spatial...), has {len(x.dims)}",
                x.label(),
                Status.BAD_PARAM_SHAPE_MISMATCH,
            )
        roles = [(r, self.inputs[r]) for r in self.IN] + [(r, self.outputs[r]) for r in self.OUT]
        for role, uid in roles:
            d = desc(uid)
            if d.dims != x.dims:
                raise self.error(
                    f"{role} dims {list(d.dims)} must equal X's {list(x.dims)}",
                    d.label(),
                    Status.BAD_PARAM_SHAPE_MISMATCH,
                )
            if not d.data_type.is_floating:
                raise self.error(
                    f"data type {d.data_type.name} is not a floating type",
                    d.label(),
                    Status.NOT_SUPPORTED_DATA_TYPE,
                )

    def check_attributes(self) -> None:
        """cuDNN's LRN descriptor ranges (CUDNN_LRN_MIN_N ... CUDNN_LRN_MIN_BETA)."""
        label = f"{self.label()} attributes"
        if not ref.MIN_N <= self.lrn_n <= ref.MAX_N:
            raise self.error(
                f"lrn_n={self.lrn_n} is outside [{ref.MIN_N}, {ref.MAX_N}]",
                label,
                Status.BAD_PARAM_OUT_OF_BOUND,
            )
        if not (math.isfinite(self.lrn_k) and self.lrn_k >= ref.MIN_K):
            raise self.error(
                f"lrn_k={self.lrn_k} is below the minimum {ref.MIN_K}",
                label,
                Status.BAD_PARAM_OUT_OF_BOUND,
            )
        if not (math.isfinite(self.lrn_beta) and self.lrn_beta >= ref.MIN_BETA):
            raise self.error(
                f"lrn_beta={self.lrn_beta} is below the minimum {ref.MIN_BETA}",
                label,
                Status.BAD_PARAM_OUT_OF_BOUND,
            )
        if not math.isfinite(self.lrn_alpha):
            raise self.error(
                f"lrn_alpha={self.lrn_alpha} is not finite", label, Status.BAD_PARAM_OUT_OF_BOUND
            )


@dataclasses.dataclass(eq=False)
class Lrn(_LrnBase):
    """Y = LRN(X) across channels."""

    kind: ClassVar[str] = "lrn"


@dataclasses.dataclass(eq=False)
class LrnBackward(_LrnBase):
    """DX of LRN from DY, X and the forward's output Y."""

    kind: ClassVar[str] = "lrn_backward"
    IN: ClassVar[tuple] = ("DY", "X", "Y")
    OUT: ClassVar[tuple] = ("DX",)


@dataclasses.dataclass(eq=False)
class DivNorm(_LrnBase):
    """Y = divisive normalization of X - MEANS over a spatial box."""

    kind: ClassVar[str] = "div_norm"
    IN: ClassVar[tuple] = ("X", "MEANS")


@dataclasses.dataclass(eq=False)
class DivNormBackward(_LrnBase):
    """DX and DMEANS (= -DX) of divisive normalization from DY, X and MEANS."""

    kind: ClassVar[str] = "div_norm_backward"
    IN: ClassVar[tuple] = ("DY", "X", "MEANS")
    OUT: ClassVar[tuple] = ("DX", "DMEANS")


def axes_for(node, rank: int) -> tuple:
    """The window axes of ``node`` for tensors of ``rank`` dims."""
    return (1,) if node.kind in ("lrn", "lrn_backward") else tuple(range(2, rank))


for _cls in (Lrn, LrnBackward, DivNorm, DivNormBackward):
    NODE_TYPES[_cls.kind] = _cls
