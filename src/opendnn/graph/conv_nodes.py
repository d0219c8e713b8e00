"""Convolution nodes: ConvFprop (X, W -> Y), ConvDgrad (DY, W -> DX), ConvWgrad (X, DY -> DW).

1-, 2- and 3-D (tensors of rank 3, 4, 5: N, C, spatial...). Groups are expressed by the
filter's channel dimension: G = C / W.dims[1] (cuDNN's graph API). Padding is pre/post
per spatial axis, stride and dilation are >= 1. DX (dgrad) and DW (wgrad) dims must be
set by the user (dgrad cannot infer X's size when stride > 1), as in cudnn-frontend.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from ..enums import ConvolutionMode, DataType
from ..errors import Status
from ..ops.conv import output_dims
from .nodes import NODE_TYPES, Node

CONV_TYPES = {DataType.FLOAT, DataType.HALF, DataType.BFLOAT16, DataType.DOUBLE}


@dataclasses.dataclass(eq=False)
class _Conv(Node):
    pre_padding: tuple = ()
    post_padding: tuple = ()
    stride: tuple = ()
    dilation: tuple = ()
    convolution_mode: ConvolutionMode = ConvolutionMode.CROSS_CORRELATION

    ROLES: ClassVar[tuple] = ()  # (x role, w role, y role)

    def _fill_defaults(self, nsp: int) -> None:
        """Parameters given before the rank was known: empty -> default, one value -> all."""
        for name, default in (
            ("pre_padding", 0),
            ("post_padding", 0),
            ("stride", 1),
            ("dilation", 1),
        ):
            v = tuple(getattr(self, name))
            if not v:
                setattr(self, name, (default,) * nsp)
            elif len(v) == 1 and nsp > 1:
                setattr(self, name, v * nsp)

    def _check_params(self, nsp: int, tensor):
        for name in ("pre_padding", "post_padding", "stride", "dilation"):
            v = getattr(self, name)
            if len(v) != nsp:
                raise self.error(
                    f"{name} has {len(v)} values for {nsp} spatial dims",
                    tensor,
                    Status.BAD_PARAM_SHAPE_MISMATCH,
                )
        if any(s < 1 for s in self.stride):
            raise self.error(
                f"stride {list(self.stride)} must be >= 1", tensor, Status.BAD_PARAM_OUT_OF_BOUND
            )
        if any(d < 1 for d in self.dilation):
            raise self.error(
                f"dilation {list(self.dilation)} must be >= 1",
                tensor,
                Status.BAD_PARAM_OUT_OF_BOUND,
            )
        if any(p < 0 for p in self.pre_padding + self.post_padding):
            raise self.error(
                f"padding {list(self.pre_padding)}/{list(self.post_padding)} must be >= 0",
                tensor,
                Status.BAD_PARAM_OUT_OF_BOUND,
            )

    def _geometry(self, x_dims, w_dims, y_dims, labels):
        """Check ranks, groups and the output size; ``labels`` names x, w, y."""
        if not 3 <= len(x_dims) <= 5:
            raise self.error(
                f"rank {len(x_dims)}: convolution tensors have 3 to 5 dims (N, C, 1-3 spatial)",
                labels[0],
                Status.NOT_SUPPORTED_SHAPE,
            )
        for d, lab in zip((w_dims, y_dims), labels[1:]):
            if len(d) != len(x_dims):
                raise self.error(
                    f"rank {len(d)} differs from the image's {len(x_dims)}",
                    lab,
                    Status.BAD_PARAM_SHAPE_MISMATCH,
                )
        self._check_params(len(x_dims) - 2, labels[0])
        c, cg, k = x_dims[1], w_dims[1], w_dims[0]
        if cg < 1 or c % cg:
            raise self.error(
                f"filter channels {cg} do not divide image channels {c} (groups = C / filter C)",
                labels[1],
                Status.BAD_PARAM_SHAPE_MISMATCH,
            )
        groups = c // cg
        if k % groups:
            raise self.error(
                f"{groups} groups do not divide {k} output channels",
                labels[1],
                Status.BAD_PARAM_SHAPE_MISMATCH,
            )
        want = output_dims(
            x_dims, w_dims, self.pre_padding, self.post_padding, self.stride, self.dilation
        )
        if any(o < 1 for o in want[2:]):
            raise self.error(
                f"output spatial dims {want[2:]} are empty: the dilated filter "
                f"{list(w_dims[2:])} is larger than the padded image",
                labels[0],
                Status.BAD_PARAM_OUT_OF_BOUND,
            )
        if list(y_dims) != want:
            raise self.error(
                f"dims {list(y_dims)} disagree with the convolution's output {want}",
                labels[2],
                Status.BAD_PARAM_SHAPE_MISMATCH,
            )
        return groups

    def validate(self, desc) -> None:
        xr, wr, yr = self.ROLES
        x, w, y = (desc(self._uid(r)) for r in (xr, wr, yr))
        self._geometry(x.dims, w.dims, y.dims, (x.label(), w.label(), y.label()))
        int8 = self.kind == "conv_fprop" and x.data_type == DataType.INT8
        for d in (x, w, y):
            int8_ok = self.kind == "conv_fprop" and d.data_type == DataType.INT8
            int32_ok = int8 and d is y and d.data_type == DataType.INT32  # the accumulator
            if d.data_type not in CONV_TYPES and not (int8_ok or int32_ok):
                raise self.error(
                    f"data type {d.data_type.name} is not supported by "
                    f"{self.kind} (int8 only in the forward pass, with an int32 output)",
                    d.label(),
                    Status.NOT_SUPPORTED_DATA_TYPE,
                )
        if self.kind == "conv_fprop" and (x.data_type == DataType.INT8) != (
            w.data_type == DataType.INT8
        ):
            raise self.error(
                "int8 convolution needs both image and filter in int8",
                w.label(),
                Status.NOT_SUPPORTED_DATA_TYPE,
            )

    def _uid(self, role):
        return self.inputs[role] if role in self.inputs else self.outputs[role]

    @property
    def groups_hint(self) -> str:
        return "groups = image C / filter C"


@dataclasses.dataclass(eq=False)
class ConvFprop(_Conv):
    """Y = conv(X, W)."""

    kind: ClassVar[str] = "conv_fprop"
    ROLES: ClassVar[tuple] = ("X", "W", "Y")

    def infer_properties(self, ctx) -> None:
        x, w, y = self.inputs["X"], self.inputs["W"], self.outputs["Y"]
        for t in (x, w):
            if t.dim is None:
                raise self.error("dims are not set", t, Status.BAD_PARAM_NOT_FINALIZED)
        self._fill_defaults(len(x.dim) - 2)
        if y.dim is None:
            if len(w.dim) != len(x.dim):
                raise self.error(
                    f"rank {len(w.dim)} differs from the image's {len(x.dim)}",
                    w,
                    Status.BAD_PARAM_SHAPE_MISMATCH,
                )
            self._check_params(len(x.dim) - 2, x)
            y.dim = output_dims(
                x.dim, w.dim, self.pre_padding, self.post_padding, self.stride, self.dilation
            )
            if any(o < 1 for o in y.dim[2:]):
                raise self.error(
                    f"output spatial dims {y.dim[2:]} are empty: the dilated "
                    f"filter {list(w.dim[2:])} is larger than the padded image",
                    x,
                    Status.BAD_PARAM_OUT_OF_BOUND,
                )
        ctx.fill_type(y, x)
        ctx.fill_strides(y, x)


@dataclasses.dataclass(eq=False)
class ConvDgrad(_Conv):
    """DX = conv_dgrad(DY, W); DX's dims must be set."""

    kind: ClassVar[str] = "conv_dgrad"
    ROLES: ClassVar[tuple] = ("DX", "W", "DY")

    def infer_properties(self, ctx) -> None:
        dy, dx = self.inputs["DY"], self.outputs["DX"]
        self._fill_defaults(len(dy.dim) - 2)
        if dx.dim is None:
            raise self.error(
                "DX dims must be set (the image size is ambiguous with stride > 1)",
                dx,
                Status.BAD_PARAM_NOT_FINALIZED,
            )
        ctx.fill_type(dx, dy)
        ctx.fill_strides(dx, dy)


@dataclasses.dataclass(eq=False)
class ConvWgrad(_Conv):
    """DW = conv_wgrad(X, DY); DW's dims must be set (K, C/G, filter...)."""

    kind: ClassVar[str] = "conv_wgrad"
    ROLES: ClassVar[tuple] = ("X", "DW", "DY")

    def infer_properties(self, ctx) -> None:
        x, dw = self.inputs["X"], self.outputs["DW"]
        self._fill_defaults(len(x.dim) - 2)
        if dw.dim is None:
            raise self.error(
                "DW dims must be set (K, C / groups, filter dims)",
                dw,
                Status.BAD_PARAM_NOT_FINALIZED,
            )
        ctx.fill_type(dw, x)
        ctx.fill_strides(dw, x)


for _cls in (ConvFprop, ConvDgrad, ConvWgrad):
    NODE_TYPES[_cls.kind] = _cls
