"""cuDNN's tensor operations on the graph API's pointwise nodes (run by the fusion engine):

    set_tensor:       y = value                       (every element of y)
    scale_tensor:     y = alpha * y
    add_tensor:       C = alpha * A + beta * C        (A broadcasts: each dim 1 or C's)
    op_tensor:        C = op(alpha1 * A, alpha2 * B) + beta * C
                      op in ADD, MUL, MIN, MAX (B broadcasts), SQRT, NOT (B is ignored;
                      NOT is logical: 1 where its operand is 0, else 0)
    transform_tensor: y = alpha * x + beta * y        (same dims, any two layouts/types)

C may be one of the inputs (cuDNN's in-place use): a pointwise graph with one output may
write over an identical input buffer. With beta == 0 the prior C is not read (NaN in it
does not leak through), as in cuDNN. Each call's graph is built once per (call,
descriptors, which of alpha / beta are in use) and kept; alpha, beta and value are
pass-by-value scalars, so changing them reuses the plan.
"""

from __future__ import annotations

import enum

import torch

from ..enums import DataType, HeurMode
from ..graph.graph import Graph
from ..runtime.lru import LRU, legacy_cache_size
from .common import SCALAR, NanPropagation, Status, as_enum, as_float, buffer, check


class OpTensorOp(enum.IntEnum):
    ADD = 0
    MUL = 1
    MIN = 2
    MAX = 3
    SQRT = 4
    NOT = 5


class OpTensorDescriptor:
    def __init__(self):
        self.op = None
        self.comp_type = DataType.FLOAT
        self.nan_opt = NanPropagation.NOT_PROPAGATE_NAN


def create_op_tensor_descriptor() -> OpTensorDescriptor:
    return OpTensorDescriptor()


def destroy_op_tensor_descriptor(desc) -> None:
    desc.op = None


def set_op_tensor_descriptor(desc, op_tensor_op, op_tensor_comp_type, op_tensor_nan_opt) -> None:
    op = "set_op_tensor_descriptor"
    kind = as_enum(op, "op_tensor_op", OpTensorOp, op_tensor_op)
    comp = as_enum(op, "op_tensor_comp_type", DataType, op_tensor_comp_type)
    check(
        comp in (DataType.FLOAT, DataType.DOUBLE, DataType.HALF, DataType.BFLOAT16),
        f"compute type {comp.name} is not a floating type",
        op,
    )
    nan_opt = as_enum(op, "op_tensor_nan_opt", NanPropagation, op_tensor_nan_opt)
    desc.op, desc.comp_type, desc.nan_opt = kind, comp, nan_opt


def get_op_tensor_descriptor(desc) -> tuple:
    return desc.op, desc.comp_type, desc.nan_opt


# ---- the cached graphs -----------------------------------------------------------------------
class PointwiseCall:
    """out = [alpha *] body(inputs) [+ beta * out] as a built graph.

    ``descs`` maps input names to TensorDescriptors (``out`` names the output's, which is
    not an input unless beta is used); ``body(g, ins)`` returns the unblended result from
    the graph tensors ``ins``; ``scalars`` names extra pass-by-value inputs of the body.
    """

    def __init__(
        self, handle, op, descs: dict, out: str, body, blend: bool, beta: bool, scalars=()
    ):
        g = Graph(
            name=op,
            handle=handle,
            intermediate_data_type=DataType.FLOAT,
            compute_data_type=DataType.FLOAT,
        )
        self.ins = {
            n: g.tensor(list(d.dims), list(d.strides), d.data_type, name=n)
            for n, d in descs.items()
            if n != out
        }
        for s in scalars:
            self.ins[s] = g.tensor(name=s, **SCALAR)
        t = body(g, self.ins)
        self.alpha = self.beta = self.prior = None
        if blend:
            self.alpha = g.tensor(name="alpha", **SCALAR)
            t = g.scale(t, self.alpha)
        od = descs[out]
        if beta:
            self.prior = g.tensor(
                list(od.dims), list(od.strides), od.data_type, name=f"{out}_prior"
            )
            self.beta = g.tensor(name="beta", **SCALAR)
            t = g.add(t, g.scale(self.prior, self.beta))
        t.set_output(True).set_dim(list(od.dims)).set_stride(list(od.strides))
        t.set_data_type(od.data_type).set_name(out)
        self.out, self.graph = t, g
        g.build([HeurMode.A, HeurMode.FALLBACK])

    def run(self, bufs: dict, out, alpha=1.0, beta=0.0) -> None:
        pack = {self.ins[n]: b for n, b in bufs.items()}
        pack[self.out] = out
        if self.alpha is not None:
            pack[self.alpha] = float(alpha)
        if self.prior is not None:
            pack[self.prior] = out  # read before written, element by element
            pack[self.beta] = float(beta)
        ws = self.graph.get_workspace_size()
        self.graph.execute(
            pack, torch.empty(ws, dtype=torch.uint8, device=out.device) if ws else None
        )


_cache = LRU(legacy_cache_size)


def call(
    handle, op, descs: dict, out: str, body, blend: bool, beta: bool, key=(), scalars=()
) -> PointwiseCall:
    """The cached PointwiseCall for these descriptors (each must be set)."""
    for name, d in descs.items():
        check(d.is_set(), "descriptor was never set", op, name)
    k = (
        op,
        str(handle.device),
        key,
        blend,
        beta,
        scalars,
        tuple((n, d.dims, d.strides, int(d.data_type)) for n, d in descs.items()),
    )
    hit = _cache.get(k)
    if hit is None:
        hit = _cache[k] = PointwiseCall(handle, op, descs, out, body, blend, beta, scalars)
    return hit


def same_dims(op, descs: dict) -> None:
    first_name, first = next(iter(descs.items()))
    for name, d in descs.items():
        check(
            d.dims == first.dims,
            f"dims {list(d.dims)} must equal {first_name}'s {list(first.dims)}",
            op,
            name,
            Status.BAD_PARAM_SHAPE_MISMATCH,
        )


def _broadcasts(op, name, a, c) -> None:
    check(
        len(a.dims) == len(c.dims),
        f"has {len(a.dims)} dims; C has {len(c.dims)}",
        op,
        name,
        Status.BAD_PARAM_SHAPE_MISMATCH,
    )
    for i, (da, dc) in enumerate(zip(a.dims, c.dims)):
        check(
            da in (1, dc),
            f"dim {i} is {da}: each dim must be 1 or C's ({dc})",
            op,
            name,
            Status.BAD_PARAM_SHAPE_MISMATCH,
        )


# ---- the calls ----------------------------------------------------------------------------------
def set_tensor(handle, y_desc, y, value_ptr) -> None:
    """cudnnSetTensor: every element of y becomes ``value_ptr`` (a Python number)."""
    op = "set_tensor"
    value = as_float(op, "value_ptr", value_ptr)
    y = buffer(op, "y", y, y_desc, handle, output=True)
    c = call(
        handle,
        op,
        {"y": y_desc},
        "y",
        lambda g, t: g.identity(t["value"]),
        False,
        False,
        scalars=("value",),
    )
    c.run({"value": value}, y)


def scale_tensor(handle, y_desc, y, alpha) -> None:
    """cudnnScaleTensor: y = alpha * y, in place."""
    op = "scale_tensor"
    alpha, y = as_float(op, "alpha", alpha), buffer(op, "y", y, y_desc, handle, output=True)
    c = call(
        handle,
        op,
        {"y_in": y_desc, "y": y_desc},
        "y",
        lambda g, t: g.scale(t["y_in"], t["alpha_s"]),
        False,
        False,
        scalars=("alpha_s",),
    )
    c.run({"y_in": y, "alpha_s": alpha}, y)


def add_tensor(handle, alpha, a_desc, A, beta, c_desc, C) -> None:
    """cudnnAddTensor: C = alpha * A + beta * C; A's dims are each 1 or C's."""
    op = "add_tensor"
    for n, d in (("A", a_desc), ("C", c_desc)):
        check(d.is_set(), "descriptor was never set", op, n)
    _broadcasts(op, "A", a_desc, c_desc)
    alpha, beta = as_float(op, "alpha", alpha), as_float(op, "beta", beta)
    A, C = buffer(op, "A", A, a_desc, handle), buffer(op, "C", C, c_desc, handle, output=True)
    c = call(
        handle,
        op,
        {"A": a_desc, "C": c_desc},
        "C",
        lambda g, t: g.identity(t["A"]),
        alpha != 1.0,
        beta != 0.0,
    )
    c.run({"A": A}, C, alpha, beta)


def op_tensor(handle, op_desc, alpha1, a_desc, A, alpha2, b_desc, B, beta, c_desc, C) -> None:
    """cudnnOpTensor: C = op(alpha1 * A, alpha2 * B) + beta * C (B unused by SQRT and NOT).

    A must have C's dims; B's dims are each 1 or C's."""
    op = "op_tensor"
    check(op_desc is not None and op_desc.op is not None, "op tensor descriptor was never set", op)
    kind = op_desc.op
    unary = kind in (OpTensorOp.SQRT, OpTensorOp.NOT)
    descs = {"A": a_desc, "C": c_desc} if unary else {"A": a_desc, "B": b_desc, "C": c_desc}
    for n, d in descs.items():
        check(d.is_set(), "descriptor was never set", op, n)
    same_dims(op, {"C": c_desc, "A": a_desc})
    if not unary:
        _broadcasts(op, "B", b_desc, c_desc)
    alpha1, beta = as_float(op, "alpha1", alpha1), as_float(op, "beta", beta)
    A, C = buffer(op, "A", A, a_desc, handle), buffer(op, "C", C, c_desc, handle, output=True)
    if not unary:
        alpha2, B = as_float(op, "alpha2", alpha2), buffer(op, "B", B, b_desc, handle)

    def body(g, t):
        a = g.scale(t["A"], t["alpha1"])
        if kind == OpTensorOp.SQRT:
            return g.sqrt(a)
        if kind == OpTensorOp.NOT:
            return g.logical_not(a)
        b = g.scale(t["B"], t["alpha2"])
        return {
            OpTensorOp.ADD: g.add,
            OpTensorOp.MUL: g.mul,
            OpTensorOp.MIN: g.min,
            OpTensorOp.MAX: g.max,
        }[kind](a, b)

    scalars = ("alpha1",) if unary else ("alpha1", "alpha2")
    c = call(handle, op, descs, "C", body, False, beta != 0.0, key=(int(kind),), scalars=scalars)
    bufs = {"A": A, "alpha1": alpha1}
    if not unary:
        bufs.update(B=B, alpha2=alpha2)
    c.run(bufs, C, 1.0, beta)


def transform_tensor(handle, alpha, x_desc, x, beta, y_desc, y) -> None:
    """cudnnTransformTensor: y = alpha * x + beta * y, x and y of the same dims in any two
    layouts (NCHW <-> NHWC, padded strides) and data types; x and y may not overlap."""
    op = "transform_tensor"
    for n, d in (("x", x_desc), ("y", y_desc)):
        check(d.is_set(), "descriptor was never set", op, n)
    same_dims(op, {"x": x_desc, "y": y_desc})
    alpha, beta = as_float(op, "alpha", alpha), as_float(op, "beta", beta)
    x, y = buffer(op, "x", x, x_desc, handle), buffer(op, "y", y, y_desc, handle, output=True)
    c = call(
        handle,
        op,
        {"x": x_desc, "y": y_desc},
        "y",
        lambda g, t: g.identity(t["x"]),
        alpha != 1.0,
        beta != 0.0,
    )
    c.run({"x": x}, y, alpha, beta)


__all__ = [
    "OpTensorOp",
    "OpTensorDescriptor",
    "create_op_tensor_descriptor",
    "destroy_op_tensor_descriptor",
    "set_op_tensor_descriptor",
    "get_op_tensor_descriptor",
    "set_tensor",
    "scale_tensor",
    "add_tensor",
    "op_tensor",
    "transform_tensor",
]
