"""Status codes with cuDNN's numbers and the typed exceptions every front door raises.

Each exception carries the ``Status``, the operation, the tensor and the rule that was
broken, so a message reads ``BAD_PARAM_SHAPE_MISMATCH: matmul 'mm0': tensor 'B': inner
dimension 5 != 7``. Bad parameters are ``ValueError`` subclasses; an unsupported graph is
``GraphNotSupportedError`` and lists the reason each engine gave.
"""

from __future__ import annotations

import enum
import threading


class Status(enum.IntEnum):
    SUCCESS = 0
    NOT_INITIALIZED = 1001
    SUBLIBRARY_VERSION_MISMATCH = 1002
    SERIALIZATION_VERSION_MISMATCH = 1003
    DEPRECATED = 1004
    LICENSE_ERROR = 1005
    RUNTIME_IN_PROGRESS = 1006
    RUNTIME_FP_OVERFLOW = 1007
    SUBLIBRARY_LOADING_FAILED = 1008
    BAD_PARAM = 2000
    BAD_PARAM_NULL_POINTER = 2002
    BAD_PARAM_MISALIGNED_POINTER = 2003
    BAD_PARAM_NOT_FINALIZED = 2004
    BAD_PARAM_OUT_OF_BOUND = 2005
    BAD_PARAM_SIZE_INSUFFICIENT = 2006
    BAD_PARAM_STREAM_MISMATCH = 2007
    BAD_PARAM_SHAPE_MISMATCH = 2008
    BAD_PARAM_DUPLICATED_ENTRIES = 2009
    BAD_PARAM_ATTRIBUTE_TYPE = 2010
    BAD_PARAM_CUDA_GRAPH_MISMATCH = 2011
    BAD_PARAM_DESCRIPTOR_TYPE = 2012
    NOT_SUPPORTED = 3000
    NOT_SUPPORTED_GRAPH_PATTERN = 3001
    NOT_SUPPORTED_SHAPE = 3002
    NOT_SUPPORTED_DATA_TYPE = 3003
    NOT_SUPPORTED_LAYOUT = 3004
    NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER = 3005
    NOT_SUPPORTED_INCOMPATIBLE_CUDART = 3006
    NOT_SUPPORTED_ARCH_MISMATCH = 3007
    NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING = 3008
    NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE = 3009
    NOT_SUPPORTED_SHARED_MEMORY_INSUFFICIENT = 3010
    NOT_SUPPORTED_PADDING = 3011
    NOT_SUPPORTED_BAD_LAUNCH_PARAM = 3012
    NOT_SUPPORTED_CUDA_GRAPH_NATIVE_API = 3013
    INTERNAL_ERROR = 4000
    INTERNAL_ERROR_COMPILATION_FAILED = 4001
    INTERNAL_ERROR_UNEXPECTED_VALUE = 4002
    INTERNAL_ERROR_HOST_ALLOCATION_FAILED = 4003
    INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED = 4004
    INTERNAL_ERROR_BAD_LAUNCH_PARAM = 4005
    INTERNAL_ERROR_TEXTURE_CREATION_FAILED = 4006
    EXECUTION_FAILED = 5000
    EXECUTION_FAILED_CUDA_DRIVER = 5001
    EXECUTION_FAILED_CUBLAS = 5002
    EXECUTION_FAILED_CUDART = 5003
    EXECUTION_FAILED_CURAND = 5004

    @property
    def category(self) -> "Status":
        """The thousand-block a code belongs to (BAD_PARAM, NOT_SUPPORTED, ...)."""
        if self.value == 0:
            return Status.SUCCESS
        return Status(self.value // 1000 * 1000) if self.value >= 2000 else Status.NOT_INITIALIZED


_last_error = threading.local()


def get_last_error_string() -> str:
    """The message of the last error raised in this thread, '' if none."""
    return getattr(_last_error, "message", "")


class OpenDNNError(Exception):
    """Base of all opendnn errors: ``status``, ``op`` (operation), ``tensor``, ``rule``."""

    default_status = Status.INTERNAL_ERROR

    def __init__(
        self,
        rule: str,
        *,
        op: str | None = None,
        tensor: str | None = None,
        status: Status | None = None,
    ):
        self.status = status if status is not None else self.default_status
        self.op, self.tensor, self.rule = op, tensor, rule
        where = []
        if op:
            where.append(op)
        if tensor:
            where.append(f"tensor '{tensor}'")
        prefix = f"{self.status.name}: " + (": ".join(where) + ": " if where else "")
        super().__init__(prefix + rule)
        _last_error.message = str(self)


class BadParamError(OpenDNNError, ValueError):
    """Invalid descriptor, graph, variant pack or workspace (status 2000s)."""

    default_status = Status.BAD_PARAM


class GraphNotSupportedError(OpenDNNError):
    """No engine supports the graph (status 3000s); ``reasons`` maps engine -> reason."""

    default_status = Status.NOT_SUPPORTED

    def __init__(self, rule: str, *, reasons: dict[str, str] | None = None, **kw):
        self.reasons = dict(reasons or {})
        if self.reasons:
            rule = rule + "; " + "; ".join(f"{k}: {v}" for k, v in self.reasons.items())
        super().__init__(rule, **kw)


class UnsupportedParamError(GraphNotSupportedError, BadParamError):
    """A node rule the graph meets but opendnn does not cover (a NOT_SUPPORTED* status at
    validate): cudnn-frontend code catches it as ``cudnnGraphNotSupportedError`` -- what
    cuDNN raises there -- and opendnn's own callers as the BadParamError of the rule."""


class InternalError(OpenDNNError, RuntimeError):
    default_status = Status.INTERNAL_ERROR


class ExecutionFailedError(OpenDNNError, RuntimeError):
    default_status = Status.EXECUTION_FAILED


def get_error_string(status: Status | int) -> str:
    """cuDNN's ``cudnnGetErrorString``: ``CUDNN_STATUS_<NAME>``."""
    return "CUDNN_STATUS_" + Status(int(status)).name
