"""cudnn-frontend's Python names on opendnn: ``import opendnn.frontend as cudnn``.

Code written for cudnn-frontend's bindings runs unchanged: ``cudnn.pygraph``,
``cudnn.data_type``, ``cudnn.heur_mode``, ``cudnn.build_plan_policy``, the note enums,
``cudnn.cudnnGraphNotSupportedError`` and the handle functions.
"""

from __future__ import annotations

from . import BACKEND_VERSION, __version__  # noqa: F401
from .enums import BehaviorNote as behavior_note  # noqa: F401
from .enums import BuildPlanPolicy as build_plan_policy  # noqa: F401
from .enums import ConvolutionMode as convolution_mode  # noqa: F401
from .enums import DataType as data_type  # noqa: F401
from .enums import DiagonalAlignment as diagonal_alignment  # noqa: F401
from .enums import HeurMode as heur_mode  # noqa: F401
from .enums import NormForwardPhase as norm_forward_phase  # noqa: F401
from .enums import NumericalNote as numerical_note  # noqa: F401
from .enums import PointwiseMode as pointwise_mode  # noqa: F401
from .enums import ReductionMode as reduction_mode  # noqa: F401
from .enums import ResampleMode as resample_mode  # noqa: F401  (pooling)
from .errors import (  # noqa: F401
    BadParamError,
    ExecutionFailedError,
    get_last_error_string,  # noqa: F401
)
from .errors import GraphNotSupportedError as cudnnGraphNotSupportedError  # noqa: F401
from .graph.graph import Graph as pygraph  # noqa: F401
from .graph.tensor import Tensor as tensor  # noqa: F401
from .handle import Handle


def backend_version() -> int:
    """Integer version in cuDNN's style (major*10000 + minor*100 + patch)."""
    return BACKEND_VERSION


def backend_version_string() -> str:
    return (
        f"opendnn {__version__} (cuDNN API {BACKEND_VERSION // 10000}."
        f"{BACKEND_VERSION // 100 % 100}.{BACKEND_VERSION % 100})"
    )


def create_handle(device=None) -> Handle:
    return Handle(device)


def destroy_handle(handle: Handle) -> None:
    handle.stream = None


def set_stream(handle: Handle, stream) -> None:
    handle.set_stream(stream)


def get_stream(handle: Handle):
    return handle.get_stream()
