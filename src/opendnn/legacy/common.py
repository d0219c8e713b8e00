"""Common pieces of the descriptor API: handles, versions, errors, shared enums, and the
checks every call runs on its arguments before using them (``as_int``, ``as_float``,
``as_enum``, ``as_dtype``, ``buffer``)."""

from __future__ import annotations

import enum
import operator

import numpy as np
import torch

from .. import BACKEND_VERSION
from ..enums import ConvolutionMode, DataType  # noqa: F401  (re-exported names)
from ..errors import BadParamError, Status, get_error_string  # noqa: F401
from ..handle import Handle
from ..runtime.buffers import RawPointer, check_writable, from_numpy
from ..tensor import as_data_type


class TensorFormat(enum.IntEnum):
    NCHW = 0
    NHWC = 1
    NCHW_VECT_C = 2


class MathType(enum.IntEnum):
    DEFAULT_MATH = 0
    TENSOR_OP_MATH = 1
    TENSOR_OP_MATH_ALLOW_CONVERSION = 2
    FMA_MATH = 3


class Determinism(enum.IntEnum):
    NON_DETERMINISTIC = 0
    DETERMINISTIC = 1


class NanPropagation(enum.IntEnum):
    NOT_PROPAGATE_NAN = 0
    PROPAGATE_NAN = 1


# a host float of the call (alpha, beta) as a graph tensor: pass-by-value, so changing it
# reuses the built plan
SCALAR = dict(dim=[1], stride=[1], data_type=DataType.FLOAT, is_pass_by_value=True)


def get_version() -> int:
    """cudnnGetVersion: the cuDNN-style API version this library offers."""
    return BACKEND_VERSION


def create(device=None) -> Handle:
    """cudnnCreate."""
    return Handle(device)


def destroy(handle: Handle) -> None:
    """cudnnDestroy."""
    handle.stream = None


def set_stream(handle: Handle, stream) -> None:
    handle.set_stream(stream)


def get_stream(handle: Handle):
    return handle.get_stream()


def check(
    cond: bool, rule: str, op: str, tensor: str | None = None, status: Status = Status.BAD_PARAM
) -> None:
    """Raise BAD_PARAM (or ``status``) naming the call and the rule when ``cond`` fails."""
    if not cond:
        raise BadParamError(rule, op=op, tensor=tensor, status=status)


def as_int(op: str, name: str, value) -> int:
    """``value`` as an int: ints and integral floats (3.0) pass; 3.7, '3' and None are
    BAD_PARAM naming ``name``."""
    try:
        return operator.index(value)
    except TypeError:
        pass
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return int(value)
    raise BadParamError(f"{value!r} is not an integer", op=op, tensor=name, status=Status.BAD_PARAM)


def as_ints(op: str, name: str, values) -> tuple:
    """A sequence of ints (``as_int`` each); a non-sequence is BAD_PARAM."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise BadParamError(
            f"must be a sequence of integers, got {values!r}",
            op=op,
            tensor=name,
            status=Status.BAD_PARAM,
        )
    return tuple(as_int(op, name, v) for v in values)


def as_float(op: str, name: str, value) -> float:
    """A host scalar (alpha, beta, a coefficient) as a float; None or 'x' is BAD_PARAM."""
    try:
        return float(value)
    except (TypeError, ValueError, RuntimeError):
        raise BadParamError(
            f"must be a number, got {value!r}", op=op, tensor=name, status=Status.BAD_PARAM
        ) from None


def as_enum(op: str, name: str, enum_type, value):
    """``value`` as a member of ``enum_type`` (a member or its number); anything else is
    BAD_PARAM listing the members."""
    if isinstance(value, enum_type):
        return value
    try:
        return enum_type(as_int(op, name, value))
    except (BadParamError, ValueError):
        members = ", ".join(m.name for m in enum_type) if len(enum_type) <= 10 else None
        rule = f"unknown {name} {value!r}: not a {enum_type.__name__}" + (
            f" ({members})" if members else ""
        )
        raise BadParamError(rule, op=op, tensor=name, status=Status.BAD_PARAM) from None


def as_dtype(op: str, name: str, value) -> DataType:
    """A data type (a DataType, its number or name, or a torch dtype), BAD_PARAM naming
    the call when it is none."""
    try:
        return as_data_type(value)
    except BadParamError as e:
        raise BadParamError(e.rule, op=op, tensor=name, status=e.status) from None


def check_handle(op: str, handle) -> None:
    """cuDNN's first rule of every call taking a handle: it is a live handle from
    ``create()`` (NULL or another object is BAD_PARAM)."""
    if not isinstance(handle, Handle):
        what = "NULL (None)" if handle is None else f"a {type(handle).__name__}"
        raise BadParamError(
            f"handle is {what}: pass the Handle that create() returned",
            op=op,
            status=Status.BAD_PARAM,
        )


def guard_handles(namespace: dict) -> None:
    """Wraps every public function of ``namespace`` with a ``handle`` parameter so that
    ``check_handle`` runs before anything else (the package's names, in __init__)."""
    import functools
    import inspect

    for name, fn in list(namespace.items()):
        if name.startswith("_") or not inspect.isfunction(fn):
            continue
        sig = inspect.signature(fn).parameters
        params = list(sig)
        if "handle" not in params or sig["handle"].default is not inspect.Parameter.empty:
            continue  # no handle, or an optional one (internal helpers)

        def guarded(*args, __fn=fn, __name=name, __at=params.index("handle"), **kw):
            check_handle(__name, args[__at] if len(args) > __at else kw.get("handle"))
            return __fn(*args, **kw)

        namespace[name] = functools.wraps(fn)(guarded)


def buffer(
    op: str, name: str, buf, desc=None, handle=None, optional: bool = False, output: bool = False
):
    """A call's buffer as a torch tensor, checked before any use.

    Torch tensors pass as they are; NumPy arrays and DLPack objects become tensors sharing
    their memory; an integer pointer (with ``desc``, the buffer's descriptor) becomes a
    1-D view of the descriptor's span on the handle's device, as the graph API reads it.
    None (unless ``optional``), meta tensors and other objects are BAD_PARAM, as is a
    read-only NumPy array or ``np.memmap`` given as an ``output`` (the call writes it).
    Shape, data type and device are left to the graph's binding, which names the rule.
    """
    if isinstance(buf, torch.Tensor):
        if buf.is_meta:
            raise BadParamError(
                "is a meta tensor (it has no data to read or write)",
                op=op,
                tensor=name,
                status=Status.BAD_PARAM,
            )
        return buf
    if buf is None:
        if optional:
            return None
        raise BadParamError(
            "is NULL (None)", op=op, tensor=name, status=Status.BAD_PARAM_NULL_POINTER
        )
    kind = type(buf).__name__
    if isinstance(buf, np.ndarray) or hasattr(buf, "__dlpack__"):
        if output:
            check_writable(buf, op, name, "output")
        try:
            t = from_numpy(buf) if isinstance(buf, np.ndarray) else torch.from_dlpack(buf)
        except (TypeError, ValueError, RuntimeError, BufferError) as e:
            raise BadParamError(
                f"cannot read the {kind} as a tensor: {e}",
                op=op,
                tensor=name,
                status=Status.BAD_PARAM_ATTRIBUTE_TYPE,
            ) from None
        return buffer(op, name, t)
    if isinstance(buf, (int, np.integer)) and not isinstance(buf, bool) and desc is not None:
        check(
            buf > 0,
            f"pointer {buf} is not a valid address",
            op,
            name,
            Status.BAD_PARAM_NULL_POINTER,
        )
        check(desc.is_set(), "descriptor was never set", op, name)
        device = getattr(handle, "device", None) or Handle().device
        return RawPointer(int(buf), desc.desc(name=name), torch.device(device)).as_tensor()
    raise BadParamError(
        f"cannot use a {kind} as a buffer: expected a torch tensor, NumPy "
        "array, DLPack object or integer pointer",
        op=op,
        tensor=name,
        status=Status.BAD_PARAM_ATTRIBUTE_TYPE,
    )


def prior(out: torch.Tensor) -> torch.Tensor:
    """A copy of an output's values in the output's own layout, for the ``beta * out``
    term: a graph may not read what it writes, and ``clone()`` would pack a padded layout."""
    copy = out.clone()  # keeps the strides of a dense layout (the common case)
    if copy.stride() == out.stride():
        return copy
    return torch.empty_strided(out.shape, out.stride(), dtype=out.dtype, device=out.device).copy_(
        out
    )
