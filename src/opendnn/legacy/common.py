"""Common pieces of the descriptor API: handles, versions, errors, shared enums."""
from __future__ import annotations

import enum

from .. import BACKEND_VERSION
from ..enums import ConvolutionMode, DataType  # noqa: F401  (re-exported names)
from ..errors import BadParamError, Status, get_error_string  # noqa: F401
from ..handle import Handle


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


def check(cond: bool, rule: str, op: str, tensor: str | None = None,
          status: Status = Status.BAD_PARAM) -> None:
    """Raise BAD_PARAM (or ``status``) naming the call and the rule when ``cond`` fails."""
    if not cond:
        raise BadParamError(rule, op=op, tensor=tensor, status=status)
