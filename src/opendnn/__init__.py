"""opendnn: cuDNN's programming model in the open, with Triton kernels.

Two front doors on one core: the cudnn-frontend-style graph API (``opendnn.frontend``,
importable as ``cudnn``) and the cuDNN-style descriptor API (``opendnn.legacy``).
"""

__version__ = "0.1.0"
BACKEND_VERSION = 91900  # the cuDNN API level mirrored (9.19.0), as cuDNN's integer

from . import backends  # noqa: E402,F401
from .enums import (  # noqa: E402
    BehaviorNote,
    BuildPlanPolicy,
    ConvolutionMode,
    DataType,
    DiagonalAlignment,
    HeurMode,
    NormForwardPhase,
    NumericalNote,
    PointwiseMode,
    ReductionMode,
)
from .errors import (  # noqa: E402
    BadParamError,
    ExecutionFailedError,
    GraphNotSupportedError,
    InternalError,
    OpenDNNError,
    Status,
    get_error_string,
    get_last_error_string,
)
from .handle import Handle  # noqa: E402
from .tensor import TensorDesc, nchw_strides, nhwc_strides, packed_strides  # noqa: E402


def __getattr__(name):
    if name == "Graph":
        from .graph.graph import Graph

        return Graph
    raise AttributeError(name)
