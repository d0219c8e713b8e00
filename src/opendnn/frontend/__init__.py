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
    GraphNotSupportedError,
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


# cudnn-frontend's CuTe-DSL kernels for Blackwell (sm100), exported lazily by its package
# and importable only with its optional dependencies; opendnn has none of them
OPTIONAL_KERNELS = {
    "NSA": "native sparse attention",
    "grouped_gemm": "the block-scaled grouped GEMM kernels",
    "discrete_grouped_gemm": "the block-scaled discrete grouped GEMM kernels",
    **{
        name: what
        for cls, fn, what in (
            ("GemmSwiglu", "gemm_swiglu", "the block-scaled GEMM + SwiGLU kernel"),
            ("GemmSrelu", "gemm_srelu", "the block-scaled GEMM + squared ReLU kernel"),
            ("GemmDsrelu", "gemm_dsrelu", "the block-scaled GEMM + squared ReLU backward kernel"),
            ("GemmAmax", "gemm_amax", "the block-scaled GEMM + amax kernel"),
            ("RmsNormRhtAmax", "rmsnorm_rht_amax", "the RMS norm + Hadamard + amax kernel"),
            ("GroupedGemmSwiglu", "grouped_gemm_swiglu", "the grouped GEMM + SwiGLU kernel"),
            (
                "GroupedGemmDswiglu",
                "grouped_gemm_dswiglu",
                "the grouped GEMM + SwiGLU backward kernel",
            ),
            ("GroupedGemmSrelu", "grouped_gemm_srelu", "the grouped GEMM + squared ReLU kernel"),
            (
                "GroupedGemmDsrelu",
                "grouped_gemm_dsrelu",
                "the grouped GEMM + squared ReLU backward kernel",
            ),
            ("GroupedGemmQuant", "grouped_gemm_quant", "the quantizing grouped GEMM kernel"),
            ("GroupedGemmGlu", "grouped_gemm_glu", "the grouped GEMM + GLU kernel"),
            (
                "GroupedGemmGluHadamard",
                "grouped_gemm_glu_hadamard",
                "the grouped GEMM + GLU + Hadamard kernel",
            ),
            ("GroupedGemmDglu", "grouped_gemm_dglu", "the grouped GEMM + GLU backward kernel"),
            ("GroupedGemmWgrad", "grouped_gemm_wgrad", "the grouped GEMM weight-gradient kernel"),
            (
                "DiscreteGroupedGemmSwiglu",
                "discrete_grouped_gemm_swiglu",
                "the discrete grouped GEMM + SwiGLU kernel",
            ),
            (
                "DiscreteGroupedGemmDswiglu",
                "discrete_grouped_gemm_dswiglu",
                "the discrete grouped GEMM + SwiGLU backward kernel",
            ),
        )
        for name in (f"{cls}Sm100", f"{fn}_wrapper_sm100")
    },
    "SdpafwdSm100D256": "the head-dim-256 attention forward kernel",
    "sdpa_fwd_wrapper_sm100_d256": "the head-dim-256 attention forward kernel",
    "SdpabwdSm100D256": "the head-dim-256 attention backward kernel",
    "sdpa_bwd_wrapper_sm100_d256": "the head-dim-256 attention backward kernel",
}


class OptionalKernelNotSupportedError(GraphNotSupportedError, ImportError):
    """A cudnn-frontend CuTe-DSL kernel opendnn does not have (NOT_SUPPORTED). An
    ImportError too: ``from cudnn import GemmSwigluSm100`` fails as it does in
    cudnn-frontend without its optional dependencies."""


def __getattr__(name: str):
    """``cudnn.experimental`` and ``cudnn.ops`` on first use (their PyTorch operators
    register when imported);
    the CuTe-DSL kernel names raise NOT_SUPPORTED naming the kernel."""
    if name in ("experimental", "ops"):
        import importlib

        module = importlib.import_module(f".{name}", __name__)
        globals()[name] = module
        return module
    if name in OPTIONAL_KERNELS:
        raise OptionalKernelNotSupportedError(
            f"{OPTIONAL_KERNELS[name]} (cudnn-frontend's CuTe-DSL kernel for Blackwell, "
            "sm100) is not supported",
            op=name,
        )
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
