"""Row-normalization graph nodes (layer, RMS, instance, group norm), forward and backward;
the geometry and the math are in ``ops/norm.py``.

Forward roles: X, SCALE, BIAS (RMS norm: optional), EPSILON (a one-element pass-by-value
tensor) -> Y, and in training MEAN (not RMS norm) and INV_VARIANCE. Backward roles: DY,
X, SCALE, MEAN (not RMS norm), INV_VARIANCE -> DX, DSCALE, DBIAS (RMS norm: only with
``has_dbias``). Statistics default to float32, gradients of the parameters to SCALE's
type.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from ..enums import DataType
from ..errors import Status
from ..ops import norm as N
from .nodes import NODE_TYPES, Node

STAT_ROLES = ("MEAN", "INV_VARIANCE")


class _Norm(Node):
    """What the forward and backward nodes share: the geometry and the type rules."""

    NORM: ClassVar[str] = N.LAYER

    def _groups(self) -> int:
        return getattr(self, "groups", 1)

    def _geometry(self, x, scale) -> N.Geometry:
        geo = N.geometry(
            self.NORM,
            x.dim if hasattr(x, "dim") else x.dims,
            scale.dim if hasattr(scale, "dim") else scale.dims,
            self._groups(),
        )
        if isinstance(geo, str):
            if "groups" in geo:
                raise self.error(geo, x, Status.BAD_PARAM)
            raise self.error(geo, scale if "SCALE" in geo else x, Status.BAD_PARAM_SHAPE_MISMATCH)
        if geo.row_length == 0:
            raise self.error(
                "the normalized axes hold no elements (a row of length 0 has no mean)",
                x,
                Status.BAD_PARAM_SHAPE_MISMATCH,
            )
        return geo

    @staticmethod
    def _fill(ctx, t, dims, like, float_default: bool) -> None:
        if t is None:
            return
        if t.dim is None:
            t.dim = list(dims)
        if float_default and t.data_type == DataType.NOT_SET:
            t.data_type = DataType.FLOAT
        ctx.fill_type(t, like)
        ctx.fill_strides(t, None if float_default else like)


@dataclasses.dataclass(eq=False)
class NormForward(_Norm):
    """Y = normalize(X) * SCALE + BIAS; MEAN and INV_VARIANCE saved in training."""

    training: bool = True
    kind: ClassVar[str] = "norm"
    VALUE_ROLES: ClassVar[tuple] = ("EPSILON",)

    def infer_properties(self, ctx) -> None:
        x, s, b, e = (self.inputs.get(r) for r in ("X", "SCALE", "BIAS", "EPSILON"))
        self.need_dims([x, s, b, e])
        geo = self._geometry(x, s)
        if e.value is not None and N.check_epsilon(e.value):
            raise self.error(N.check_epsilon(e.value), e, Status.BAD_PARAM)
        self._fill(ctx, self.outputs["Y"], x.dim, x, False)
        for role in STAT_ROLES:
            self._fill(ctx, self.outputs.get(role), geo.stats_dims, x, True)

    def validate(self, desc) -> None:
        x, s = desc(self.inputs["X"]), desc(self.inputs["SCALE"])
        geo = self._geometry(x, s)
        b = desc(self.inputs["BIAS"]) if "BIAS" in self.inputs else None
        if b is not None:
            self.need_shape(b, s.dims, "BIAS")
        if "BIAS" not in self.inputs and self.NORM != N.RMS:
            raise self.error("needs a BIAS", None, Status.BAD_PARAM_NULL_POINTER)
        e = desc(self.inputs["EPSILON"])
        if e.numel != 1 or not e.is_pass_by_value:
            raise self.error(
                "EPSILON must be a one-element pass-by-value tensor (a Python "
                "float, or tensor_like of a CPU scalar)",
                e.label(),
                Status.BAD_PARAM,
            )
        y = desc(self.outputs["Y"])
        self.need_shape(y, x.dims, "Y")
        stats = [desc(self.outputs[r]) for r in STAT_ROLES if r in self.outputs]
        if self.training != bool(stats):
            raise self.error("MEAN / INV_VARIANCE are outputs exactly in the TRAINING phase")
        for d in stats:
            self.need_shape(d, geo.stats_dims, d.label())
        self.need_floating([x, s, b, e, y, *stats])


@dataclasses.dataclass(eq=False)
class NormBackward(_Norm):
    """DX, DSCALE, DBIAS from DY and the forward's X, SCALE and saved statistics."""

    kind: ClassVar[str] = "norm_backward"

    def infer_properties(self, ctx) -> None:
        dy, x, s = (self.inputs[r] for r in ("DY", "X", "SCALE"))
        self.need_dims([dy, x, s] + [self.inputs.get(r) for r in STAT_ROLES])
        self._geometry(x, s)
        self._fill(ctx, self.outputs["DX"], x.dim, dy, False)
        for role in ("DSCALE", "DBIAS"):
            self._fill(ctx, self.outputs.get(role), s.dim, s, False)

    def validate(self, desc) -> None:
        dy, x, s = (desc(self.inputs[r]) for r in ("DY", "X", "SCALE"))
        geo = self._geometry(x, s)
        self.need_shape(dy, x.dims, "DY")
        stats = [desc(self.inputs[r]) for r in STAT_ROLES if r in self.inputs]
        for d in stats:
            self.need_shape(d, geo.stats_dims, d.label())
        dx = desc(self.outputs["DX"])
        self.need_shape(dx, x.dims, "DX")
        grads = [desc(self.outputs[r]) for r in ("DSCALE", "DBIAS") if r in self.outputs]
        for d in grads:
            self.need_shape(d, s.dims, d.label())
        self.need_floating([dy, x, s, dx, *stats, *grads])


@dataclasses.dataclass(eq=False)
class LayerNorm(NormForward):
    kind: ClassVar[str] = "layernorm"


@dataclasses.dataclass(eq=False)
class RMSNorm(NormForward):
    NORM: ClassVar[str] = N.RMS
    kind: ClassVar[str] = "rmsnorm"


@dataclasses.dataclass(eq=False)
class InstanceNorm(NormForward):
    NORM: ClassVar[str] = N.INSTANCE
    kind: ClassVar[str] = "instancenorm"


@dataclasses.dataclass(eq=False)
class GroupNorm(NormForward):
    groups: int = 1
    NORM: ClassVar[str] = N.GROUP
    kind: ClassVar[str] = "groupnorm"


@dataclasses.dataclass(eq=False)
class LayerNormBackward(NormBackward):
    kind: ClassVar[str] = "layernorm_backward"


@dataclasses.dataclass(eq=False)
class RMSNormBackward(NormBackward):
    NORM: ClassVar[str] = N.RMS
    kind: ClassVar[str] = "rmsnorm_backward"


@dataclasses.dataclass(eq=False)
class InstanceNormBackward(NormBackward):
    NORM: ClassVar[str] = N.INSTANCE
    kind: ClassVar[str] = "instancenorm_backward"


@dataclasses.dataclass(eq=False)
class GroupNormBackward(NormBackward):
    groups: int = 1
    NORM: ClassVar[str] = N.GROUP
    kind: ClassVar[str] = "groupnorm_backward"


FORWARD_KINDS = ("layernorm", "rmsnorm", "instancenorm", "groupnorm")
BACKWARD_KINDS = tuple(f"{k}_backward" for k in FORWARD_KINDS)


for _cls in (
    LayerNorm,
    LayerNormBackward,
    RMSNorm,
    RMSNormBackward,
    InstanceNorm,
    InstanceNormBackward,
    GroupNorm,
    GroupNormBackward,
):
    NODE_TYPES[_cls.kind] = _cls
