"""Batch-norm graph nodes (cudnn-frontend's batchnorm, batchnorm_inference,
batchnorm_backward); the math is in ``ops/batchnorm.py``.

Statistics tensors (scale, bias, mean, inv_variance, running stats, dscale, dbias) share
one shape S with X's rank: [1, C, 1, ...] for spatial batch norm (statistics over N and
the spatial dims) or [1, C, H, W, ...] for per-activation batch norm (over N). Epsilon
and momentum are single-element tensors (pass-by-value scalars, or one-element device
tensors).
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

from ..errors import Status
from ..ops.batchnorm import count
from ..tensor import packed_strides
from .nodes import NODE_TYPES, Node


def _fill_stats(ctx, t, like) -> None:
    """A statistics output takes ``like``'s dims (S) and packed strides."""
    if t is None:
        return
    if t.dim is None:
        t.dim = list(like.dim)
    if t.stride is None:
        t.stride = list(packed_strides(t.dim))
    ctx.fill_type(t, like)


class _BatchNormBase(Node):
    DATA: ClassVar[tuple] = ()  # roles with X's dims
    STATS: ClassVar[tuple] = ()  # roles with the statistics shape
    SCALARS: ClassVar[tuple] = ()  # single-element roles
    TRAINING: ClassVar[bool] = False

    def _check(self, desc) -> None:
        roles = {**self.inputs, **self.outputs}
        x = desc(roles["X"])
        if len(x.dims) < 2:
            raise self.error(
                f"X needs at least 2 dims (N, C, ...), has {len(x.dims)}",
                x.label(),
                Status.BAD_PARAM_SHAPE_MISMATCH,
            )
        for r in self.DATA:
            d = desc(roles[r])
            if d.dims != x.dims:
                raise self.error(
                    f"{r} dims {list(d.dims)} must equal X dims {list(x.dims)}",
                    d.label(),
                    Status.BAD_PARAM_SHAPE_MISMATCH,
                )
        s = desc(roles[self.STATS[0]])
        c = x.dims[1]
        spatial = [1] + [c] + [1] * (len(x.dims) - 2)
        per_act = [1] + list(x.dims[1:])
        if list(s.dims) not in (spatial, per_act):
            raise self.error(
                f"{self.STATS[0]} dims {list(s.dims)} must be {spatial} (spatial) "
                f"or {per_act} (per-activation) for X dims {list(x.dims)}",
                s.label(),
                Status.BAD_PARAM_SHAPE_MISMATCH,
            )
        for r in self.STATS[1:]:
            if roles.get(r) is None:
                continue
            d = desc(roles[r])
            if d.dims != s.dims:
                raise self.error(
                    f"{r} dims {list(d.dims)} must equal {self.STATS[0]} dims {list(s.dims)}",
                    d.label(),
                    Status.BAD_PARAM_SHAPE_MISMATCH,
                )
        for r in self.SCALARS:
            if roles.get(r) is None:
                continue
            d = desc(roles[r])
            if d.numel != 1:
                raise self.error(
                    f"{r} must have one element, has dims {list(d.dims)}",
                    d.label(),
                    Status.BAD_PARAM_SHAPE_MISMATCH,
                )
        for r, uid in roles.items():
            d = desc(uid)
            if not d.data_type.is_floating:
                raise self.error(
                    f"{r} data type {d.data_type.name} is not a floating type",
                    d.label(),
                    Status.NOT_SUPPORTED_DATA_TYPE,
                )
        if self.TRAINING and count(x.dims, s.dims) < 2:
            raise self.error(
                f"training needs more than one value per statistic (X dims "
                f"{list(x.dims)} give {count(x.dims, s.dims)}): the variance of "
                "one value is undefined (PyTorch raises the same)",
                x.label(),
                Status.BAD_PARAM_SHAPE_MISMATCH,
            )


@dataclasses.dataclass(eq=False)
class BatchNorm(_BatchNormBase):
    """Training forward: [Y, MEAN, INV_VARIANCE, NEXT_RUNNING_MEAN, NEXT_RUNNING_VAR] from
    X, SCALE, BIAS, EPSILON and (optional, together) PREV_RUNNING_MEAN, PREV_RUNNING_VAR,
    MOMENTUM. Y has X's dims; the others have SCALE's dims."""

    kind: ClassVar[str] = "batchnorm"
    DATA: ClassVar[tuple] = ("Y",)
    STATS: ClassVar[tuple] = (
        "SCALE",
        "BIAS",
        "MEAN",
        "INV_VARIANCE",
        "PREV_RUNNING_MEAN",
        "PREV_RUNNING_VAR",
        "NEXT_RUNNING_MEAN",
        "NEXT_RUNNING_VAR",
    )
    SCALARS: ClassVar[tuple] = ("EPSILON", "MOMENTUM")
    VALUE_ROLES: ClassVar[tuple] = SCALARS
    TRAINING: ClassVar[bool] = True

    def infer_properties(self, ctx) -> None:
        x, scale = self.inputs["X"], self.inputs["SCALE"]
        self.need_dims(self.input_tensors())
        self._check_values()
        ctx.fill_like(self.outputs["Y"], x)
        for r in ("MEAN", "INV_VARIANCE", "NEXT_RUNNING_MEAN", "NEXT_RUNNING_VAR"):
            _fill_stats(ctx, self.outputs.get(r), scale)

    def _check_values(self) -> None:
        """The legacy API's rules on the host values known now (pass-by-value scalars):
        epsilon finite, momentum (the exponential average factor) in [0, 1]. Epsilon below
        CUDNN_BN_MIN_EPSILON (0) is the engine's check when the plan runs, for host and
        device values alike."""
        eps, mom = self.inputs["EPSILON"], self.inputs.get("MOMENTUM")
        e = getattr(eps, "value", None)
        if e is not None and not (isinstance(e, (int, float)) and math.isfinite(e)):
            raise self.error(f"epsilon {e} must be finite", eps, Status.BAD_PARAM)
        m = getattr(mom, "value", None)
        if m is not None and not (isinstance(m, (int, float)) and 0.0 <= m <= 1.0):
            raise self.error(
                f"momentum {m} must be within [0, 1] (the exponential average factor)",
                mom,
                Status.BAD_PARAM,
            )

    def validate(self, desc) -> None:
        self._check(desc)


@dataclasses.dataclass(eq=False)
class BatchNormInference(_BatchNormBase):
    """Y = SCALE * (X - MEAN) * INV_VARIANCE + BIAS; Y has X's dims."""

    kind: ClassVar[str] = "batchnorm_inference"
    DATA: ClassVar[tuple] = ("Y",)
    STATS: ClassVar[tuple] = ("SCALE", "BIAS", "MEAN", "INV_VARIANCE")

    def infer_properties(self, ctx) -> None:
        x = self.inputs["X"]
        self.need_dims(self.input_tensors())
        ctx.fill_like(self.outputs["Y"], x)

    def validate(self, desc) -> None:
        self._check(desc)


@dataclasses.dataclass(eq=False)
class BatchNormBackward(_BatchNormBase):
    """[DX, DSCALE, DBIAS] from DY, X, SCALE and the saved MEAN, INV_VARIANCE."""

    kind: ClassVar[str] = "batchnorm_backward"
    DATA: ClassVar[tuple] = ("DY", "DX")
    STATS: ClassVar[tuple] = ("SCALE", "MEAN", "INV_VARIANCE", "DSCALE", "DBIAS")

    def infer_properties(self, ctx) -> None:
        x, scale = self.inputs["X"], self.inputs["SCALE"]
        self.need_dims(self.input_tensors())
        ctx.fill_like(self.outputs["DX"], x, self.inputs["DY"])
        for r in ("DSCALE", "DBIAS"):
            _fill_stats(ctx, self.outputs.get(r), scale)

    def validate(self, desc) -> None:
        self._check(desc)


for _cls in (BatchNorm, BatchNormInference, BatchNormBackward):
    NODE_TYPES[_cls.kind] = _cls
