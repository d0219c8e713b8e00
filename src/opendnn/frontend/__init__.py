"""cudnn-frontend's Python names on opendnn: ``import opendnn.frontend as cudnn``.

Code written for cudnn-frontend's bindings runs unchanged: ``cudnn.pygraph``,
``cudnn.data_type``, ``cudnn.heur_mode``, ``cudnn.build_plan_policy``, the note and knob
enums, ``cudnn.cudnnGraphNotSupportedError``, the handle functions, ``knob``, the kernel
cache and device properties (``properties.py``), the ``graph`` / ``jit`` /
``graph_cache`` helpers (``graph.py``) and the ``Graph`` wrapper class (``wrapper.py``).

Versions answer as cuDNN's do for the API level mirrored: ``backend_version()`` is
cuDNN's integer (91900 for 9.19.0), ``backend_version_string()`` its dotted form
("9.19.0"), ``__version__`` the cudnn-frontend release whose Python API this module
follows. opendnn's own version is ``opendnn.__version__``.
"""

from __future__ import annotations

from .. import BACKEND_VERSION
from ..enums import AttentionImplementation as attention_implementation  # noqa: F401
from ..enums import BehaviorNote as behavior_note  # noqa: F401
from ..enums import BuildPlanPolicy as build_plan_policy  # noqa: F401
from ..enums import ConvolutionMode as convolution_mode  # noqa: F401
from ..enums import DataType as data_type  # noqa: F401
from ..enums import DiagonalAlignment as diagonal_alignment  # noqa: F401
from ..enums import HeurMode as heur_mode  # noqa: F401
from ..enums import KnobType as knob_type  # noqa: F401
from ..enums import MoeGroupedMatmulMode as moe_grouped_matmul_mode  # noqa: F401
from ..enums import NormForwardPhase as norm_forward_phase  # noqa: F401
from ..enums import NumericalNote as numerical_note  # noqa: F401
from ..enums import PointwiseMode as pointwise_mode  # noqa: F401
from ..enums import ReductionMode as reduction_mode  # noqa: F401
from ..enums import ResampleMode as resample_mode  # noqa: F401  (pooling)
from ..enums import ReshapeMode as reshape_mode  # noqa: F401
from ..enums import ScalarType as scalar_type  # noqa: F401
from ..enums import TensorReordering as tensor_reordering  # noqa: F401
from ..errors import (  # noqa: F401
    BadParamError,
    ExecutionFailedError,
    get_last_error_string,  # noqa: F401
)
from ..errors import GraphNotSupportedError as cudnnGraphNotSupportedError  # noqa: F401
from ..graph.graph import Graph as pygraph  # noqa: F401
from ..graph.tensor import Tensor as tensor  # noqa: F401
from ..handle import Handle
from .graph import graph, graph_cache, jit  # noqa: F401
from .properties import (  # noqa: F401
    create_device_properties,
    create_kernel_cache,
    device_properties,
    kernel_cache,
    knob,
)
from .wrapper import Graph  # noqa: F401

# the cudnn-frontend release whose Python API this module follows
__version__ = "1.32.0"


def backend_version() -> int:
    """The cuDNN API level mirrored, as cuDNN's integer (major*10000 + minor*100 + patch)."""
    return BACKEND_VERSION


def backend_version_string() -> str:
    """``backend_version()`` dotted, as cuDNN prints it ("9.19.0")."""
    return f"{BACKEND_VERSION // 10000}.{BACKEND_VERSION // 100 % 100}.{BACKEND_VERSION % 100}"


def create_handle(device=None) -> Handle:
    return Handle(device)


def destroy_handle(handle: Handle) -> None:
    handle.stream = None


def set_stream(handle: Handle, stream) -> None:
    handle.set_stream(stream)


def get_stream(handle: Handle):
    return handle.get_stream()


def __getattr__(name: str):
    """``cudnn.experimental`` on first use (its PyTorch operators register when imported)."""
    if name == "experimental":
        import importlib

        module = importlib.import_module(".experimental", __name__)
        globals()[name] = module
        return module
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
