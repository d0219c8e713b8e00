"""Pooling nodes (cuDNN's resample operation in its pooling modes; math in ``ops/pool.py``):

- ``Resample``: X [N, C, *in] -> Y [N, C, *out] and, for MAXPOOL with ``generate_index``,
  Index [N, C, *out] (an integer tensor of window offsets).
- ``ResampleBackward``: DY [N, C, *out] -> DX [N, C, *in]; MAXPOOL routes DY through the
  forward's Index, or through the argmax recomputed from X (Y, when given, is checked and
  not needed); the average modes need DY alone. DX's dims come from X when X is given and
  must be set otherwise.

Rules (each a typed error naming the node, the tensor and the rule): 1 to 3 spatial axes;
one window / stride / padding value per spatial axis; window and stride >= 1; padding >= 0
and < window; the window fits the padded input; Y (DY) dims equal the output formula;
floating data; an Index type that can hold every window offset.
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

from ..enums import DataType, ResampleMode
from ..errors import Status
from ..ops.pool import POOL_MODES, output_dims
from .nodes import NODE_TYPES, Node

# the largest window offset each index type can hold
INDEX_LIMIT = {
    DataType.INT8: 127,
    DataType.UINT8: 255,
    DataType.INT32: 2**31 - 1,
    DataType.INT64: 2**63 - 1,
}


@dataclasses.dataclass(eq=False)
class _Pool(Node):
    resample_mode: ResampleMode = ResampleMode.MAXPOOL
    window: tuple = ()
    stride: tuple = ()
    pre_padding: tuple = ()
    post_padding: tuple = ()
    nan_propagation: bool = True  # MAXPOOL: a NaN in the window gives NaN (cuDNN's graph)

    def __post_init__(self):  # deserialized graphs give the mode by name
        if isinstance(self.resample_mode, str):
            self.resample_mode = ResampleMode[self.resample_mode]
        for name in ("window", "stride", "pre_padding", "post_padding"):
            setattr(self, name, tuple(int(v) for v in getattr(self, name)))

    @property
    def is_max(self) -> bool:
        return self.resample_mode == ResampleMode.MAXPOOL

    def _fill_defaults(self, nsp: int) -> None:
        """Stride and padding left out take 1 and 0; one value stands for every axis."""
        for name, default in (
            ("stride", 1),
            ("pre_padding", 0),
            ("post_padding", 0),
            ("window", None),
        ):
            v = tuple(getattr(self, name))
            if not v and default is not None:
                setattr(self, name, (default,) * nsp)
            elif len(v) == 1 and nsp > 1:
                setattr(self, name, v * nsp)

    def _check(self, x_dims, x_label) -> list[int]:
        """The geometry rules against the input dims; returns the output dims."""
        if self.resample_mode not in POOL_MODES:
            raise self.error(
                f"resample mode {self.resample_mode.name} is not a pooling mode "
                "(MAXPOOL, AVGPOOL_INCLUDE_PADDING, AVGPOOL_EXCLUDE_PADDING)",
                x_label,
                Status.NOT_SUPPORTED,
            )
        if not 3 <= len(x_dims) <= 5:
            raise self.error(
                f"rank {len(x_dims)}: pooling tensors have 3 to 5 dims (N, C, 1-3 spatial)",
                x_label,
                Status.NOT_SUPPORTED_SHAPE,
            )
        nsp = len(x_dims) - 2
        for name in ("window", "stride", "pre_padding", "post_padding"):
            v = getattr(self, name)
            if len(v) != nsp:
                raise self.error(
                    f"{name} has {len(v)} values for {nsp} spatial dims",
                    x_label,
                    Status.BAD_PARAM_SHAPE_MISMATCH,
                )
        for name in ("window", "stride"):
            if any(v < 1 for v in getattr(self, name)):
                raise self.error(
                    f"{name} {list(getattr(self, name))} must be >= 1",
                    x_label,
                    Status.BAD_PARAM_OUT_OF_BOUND,
                )
        for name in ("pre_padding", "post_padding"):
            v = getattr(self, name)
            if any(p < 0 for p in v):
                raise self.error(
                    f"{name} {list(v)} must be >= 0", x_label, Status.BAD_PARAM_OUT_OF_BOUND
                )
            if any(p >= w for p, w in zip(v, self.window)):
                raise self.error(
                    f"{name} {list(v)} must be smaller than the window "
                    f"{list(self.window)} (a window of padding only)",
                    x_label,
                    Status.BAD_PARAM_OUT_OF_BOUND,
                )
        if any(n < 1 for n in x_dims[2:]):
            raise self.error(
                f"spatial dims {list(x_dims[2:])} must be >= 1 (a window of padding only)",
                x_label,
                Status.BAD_PARAM_OUT_OF_BOUND,
            )
        for ax, (n, w, a, b) in enumerate(
            zip(x_dims[2:], self.window, self.pre_padding, self.post_padding)
        ):
            if w > n + a + b:
                raise self.error(
                    f"window {w} on spatial axis {ax} is larger than the padded "
                    f"input {n} + {a} + {b}",
                    x_label,
                    Status.BAD_PARAM_OUT_OF_BOUND,
                )
        return output_dims(x_dims, self.window, self.stride, self.pre_padding, self.post_padding)

    def _check_output(self, want, d, role) -> None:
        if list(d.dims) != list(want):
            raise self.error(
                f"{role} dims {list(d.dims)} disagree with the pooling output "
                f"{list(want)} (floor((in + pre + post - window) / stride) + 1)",
                d.label(),
                Status.BAD_PARAM_SHAPE_MISMATCH,
            )

    def _check_index(self, d) -> None:
        limit = INDEX_LIMIT.get(d.data_type)
        volume = math.prod(self.window)
        if limit is None:
            raise self.error(
                f"index type {d.data_type.name} is not an integer type (int8, uint8, int32, int64)",
                d.label(),
                Status.NOT_SUPPORTED_DATA_TYPE,
            )
        if volume - 1 > limit:
            raise self.error(
                f"index type {d.data_type.name} cannot hold the window's {volume} offsets",
                d.label(),
                Status.NOT_SUPPORTED_DATA_TYPE,
            )


@dataclasses.dataclass(eq=False)
class Resample(_Pool):
    """Y (and Index) = pool(X)."""

    generate_index: bool = False
    kind: ClassVar[str] = "resample"

    def infer_properties(self, ctx) -> None:
        x, y = self.inputs["X"], self.outputs["Y"]
        self.need_dims([x])
        self._fill_defaults(len(x.dim) - 2)
        if y.dim is None:
            y.dim = self._check(x.dim, x.label())
        ctx.fill_type(y, x)
        ctx.fill_strides(y, x)
        idx = self.outputs.get("Index")
        if idx is not None:
            if idx.dim is None:
                idx.dim = list(y.dim)
            if idx.data_type == DataType.NOT_SET:  # cuDNN's samples use int8 indices
                idx.data_type = DataType.INT8 if math.prod(self.window) <= 128 else DataType.INT32
            ctx.fill_strides(idx, y)

    def validate(self, desc) -> None:
        x, y = desc(self.inputs["X"]), desc(self.outputs["Y"])
        want = self._check(x.dims, x.label())
        self._check_output(want, y, "Y")
        self.need_floating((x, y))
        if "Index" in self.outputs:
            idx = desc(self.outputs["Index"])
            self._check_output(want, idx, "Index")
            self._check_index(idx)


@dataclasses.dataclass(eq=False)
class ResampleBackward(_Pool):
    """DX = pool_backward(DY[, Index | X[, Y]])."""

    kind: ClassVar[str] = "resample_backward"

    def infer_properties(self, ctx) -> None:
        dy, dx = self.inputs["DY"], self.outputs["DX"]
        self.need_dims([dy])
        self._fill_defaults(len(dy.dim) - 2)
        x = self.inputs.get("X")
        if dx.dim is None:
            if x is None or x.dim is None:
                raise self.error(
                    "DX dims must be set (no X gives the input size, which is "
                    "ambiguous with stride > 1)",
                    dx,
                    Status.BAD_PARAM_NOT_FINALIZED,
                )
            dx.dim = list(x.dim)
        ctx.fill_type(dx, dy)
        ctx.fill_strides(dx, x if x is not None else dy)

    def validate(self, desc) -> None:
        dy, dx = desc(self.inputs["DY"]), desc(self.outputs["DX"])
        want = self._check(dx.dims, dx.label())
        self._check_output(want, dy, "DY")
        floats = [dy, dx]
        for role in ("X", "Y"):
            if role in self.inputs:
                d = desc(self.inputs[role])
                floats.append(d)
                if role == "X" and d.dims != dx.dims:
                    raise self.error(
                        f"X dims {list(d.dims)} must equal DX dims {list(dx.dims)}",
                        d.label(),
                        Status.BAD_PARAM_SHAPE_MISMATCH,
                    )
                if role == "Y":
                    self._check_output(want, d, "Y")
        self.need_floating(floats)
        if "Index" in self.inputs:
            idx = desc(self.inputs["Index"])
            if not self.is_max:
                raise self.error(
                    "an Index tensor is for MAXPOOL only", idx.label(), Status.BAD_PARAM
                )
            self._check_output(want, idx, "Index")
            self._check_index(idx)
        elif self.is_max and "X" not in self.inputs:
            raise self.error(
                "MAXPOOL backward needs the forward's Index or its input X",
                dy.label(),
                Status.BAD_PARAM_NOT_FINALIZED,
            )


for _cls in (Resample, ResampleBackward):
    NODE_TYPES[_cls.kind] = _cls
