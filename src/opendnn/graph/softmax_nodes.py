"""Softmax graph nodes: ``Y = softmax(X)`` along one axis (log-softmax with ``log``) and
its backward ``DX = softmax_backward(DY, Y)`` (see ``ops/softmax.py`` for the math)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from ..errors import Status
from .nodes import NODE_TYPES, Node


def _axis_error(node, axis: int, rank: int, t):
    return node.error(
        f"axis {axis} is out of range for {rank} dims (allowed: {-rank} to {rank - 1})",
        t,
        Status.BAD_PARAM_OUT_OF_BOUND,
    )


@dataclasses.dataclass(eq=False)
class Softmax(Node):
    """Y = softmax(X) along ``axis`` (negative counts from the end); Y has X's dims."""

    axis: int = -1
    log: bool = False
    kind: ClassVar[str] = "softmax"

    def infer_properties(self, ctx) -> None:
        x = self.inputs["X"]
        self.need_dims([x])
        if not -len(x.dim) <= self.axis < len(x.dim):
            raise _axis_error(self, self.axis, len(x.dim), x)
        ctx.fill_like(self.outputs["Y"], x)

    def validate(self, desc) -> None:
        x, y = desc(self.inputs["X"]), desc(self.outputs["Y"])
        _same_dims(self, x, y, "Y")
        self.need_floating((x, y))


@dataclasses.dataclass(eq=False)
class SoftmaxBackward(Node):
    """DX = softmax_backward(DY, Y): the gradient through softmax (or log-softmax) along
    ``axis`` from the forward's output Y; every tensor has Y's dims."""

    axis: int = -1
    log: bool = False
    kind: ClassVar[str] = "softmax_backward"

    def infer_properties(self, ctx) -> None:
        dy, y, dx = self.inputs["DY"], self.inputs["Y"], self.outputs["DX"]
        self.need_dims((dy, y))
        if not -len(y.dim) <= self.axis < len(y.dim):
            raise _axis_error(self, self.axis, len(y.dim), y)
        if dx.dim is None:
            dx.dim = list(y.dim)
        ctx.fill_type(dx, dy)
        ctx.fill_strides(dx, dy)

    def validate(self, desc) -> None:
        dy, y, dx = desc(self.inputs["DY"]), desc(self.inputs["Y"]), desc(self.outputs["DX"])
        _same_dims(self, y, dy, "DY")
        _same_dims(self, y, dx, "DX")
        self.need_floating((dy, y, dx))


def _same_dims(node, a, b, role: str) -> None:
    if a.dims != b.dims:
        raise node.error(
            f"{role} dims {list(b.dims)} must equal {list(a.dims)}",
            b.label(),
            Status.BAD_PARAM_SHAPE_MISMATCH,
        )


for _cls in (Softmax, SoftmaxBackward):
    NODE_TYPES[_cls.kind] = _cls
