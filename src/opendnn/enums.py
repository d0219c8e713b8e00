"""Enumerations shared by every front door, with cuDNN's numbering where cuDNN has one.

``DataType`` follows ``cudnnDataType_t``; ``NOT_SET`` is cudnn-frontend's "infer me".
Pointwise and reduction modes follow ``cudnnPointwiseMode_t`` / ``cudnnReduceTensorOp_t``
names. Every enum accepts its member name as a string through ``Enum[...]``.
"""

from __future__ import annotations

import enum


class DataType(enum.IntEnum):
    NOT_SET = -1
    FLOAT = 0
    DOUBLE = 1
    HALF = 2
    INT8 = 3
    INT32 = 4
    INT8x4 = 5
    UINT8 = 6
    UINT8x4 = 7
    INT8x32 = 8
    BFLOAT16 = 9
    INT64 = 10
    BOOLEAN = 11
    FP8_E4M3 = 12
    FP8_E5M2 = 13
    FAST_FLOAT_FOR_FP8 = 14
    FP8_E8M0 = 15
    FP4_E2M1 = 16
    INT4 = 17

    @property
    def is_floating(self) -> bool:
        return self in _FLOATING

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE[self]


_FLOATING = {
    DataType.FLOAT,
    DataType.DOUBLE,
    DataType.HALF,
    DataType.BFLOAT16,
    DataType.FP8_E4M3,
    DataType.FP8_E5M2,
}
_ITEMSIZE = {
    DataType.FLOAT: 4,
    DataType.DOUBLE: 8,
    DataType.HALF: 2,
    DataType.INT8: 1,
    DataType.INT32: 4,
    DataType.UINT8: 1,
    DataType.BFLOAT16: 2,
    DataType.INT64: 8,
    DataType.BOOLEAN: 1,
    DataType.FP8_E4M3: 1,
    DataType.FP8_E5M2: 1,
    DataType.INT8x4: 4,
    DataType.UINT8x4: 4,
    DataType.INT8x32: 32,
    DataType.FAST_FLOAT_FOR_FP8: 4,
    DataType.FP8_E8M0: 1,
    DataType.FP4_E2M1: 1,  # two per byte in cuDNN's packed tensors
    DataType.INT4: 1,  # likewise
    DataType.NOT_SET: 0,
}
# cuDNN's vectorized, block-scale and sub-byte types: named so that cudnn-frontend code
# spells them, refused (NOT_SUPPORTED_DATA_TYPE) by the graph's validate
NAMED_ONLY_TYPES = frozenset(
    {
        DataType.INT8x4,
        DataType.UINT8x4,
        DataType.INT8x32,
        DataType.FAST_FLOAT_FOR_FP8,
        DataType.FP8_E8M0,
        DataType.FP4_E2M1,
        DataType.INT4,
    }
)


class HeurMode(enum.IntEnum):
    """Heuristic modes: A is the instant cost model, B also reads measured results,
    FALLBACK favours coverage (the float64 reference engine)."""

    A = 0
    B = 1
    FALLBACK = 2
    OPENSOURCE = 3  # cuDNN's open-source engines: every engine here is; ranked as A


class BuildPlanPolicy(enum.IntEnum):
    HEURISTICS_CHOICE = 0
    ALL = 1


class NumericalNote(enum.IntEnum):
    TENSOR_CORE = 0
    DOWN_CONVERT_INPUTS = 1
    REDUCED_PRECISION_REDUCTION = 2
    FFT = 3
    NONDETERMINISTIC = 4
    WINOGRAD = 5
    WINOGRAD_TILE_4x4 = 6
    WINOGRAD_TILE_6x6 = 7
    WINOGRAD_TILE_13x13 = 8
    STRICT_NAN_PROP = 9


class BehaviorNote(enum.IntEnum):
    RUNTIME_COMPILATION = 0
    REQUIRES_FILTER_INT8x32_REORDER = 1
    REQUIRES_BIAS_INT8x32_REORDER = 2
    SUPPORTS_CUDA_GRAPH_NATIVE_API = 3
    CUBLASLT_DEPENDENCY = 4


class NormForwardPhase(enum.IntEnum):
    INFERENCE = 0
    TRAINING = 1


class ReductionMode(enum.IntEnum):
    ADD = 0
    MUL = 1
    MIN = 2
    MAX = 3
    AMAX = 4
    AVG = 5
    NORM1 = 6
    NORM2 = 7
    MUL_NO_ZEROS = 8


class ConvolutionMode(enum.IntEnum):
    CONVOLUTION = 0
    CROSS_CORRELATION = 1


class DiagonalAlignment(enum.IntEnum):
    """Where sdpa's diagonal starts (cudnn-frontend's ``diagonal_alignment``): TOP_LEFT
    at (0, 0); BOTTOM_RIGHT shifted right by s_kv - s_q (ops/attention.py)."""

    TOP_LEFT = 0
    BOTTOM_RIGHT = 1


class PointwiseMode(enum.IntEnum):
    ADD = 0
    ADD_SQUARE = 5
    DIV = 6
    MAX = 3
    MIN = 2
    MOD = 7
    MUL = 1
    POW = 8
    SUB = 9
    ABS = 10
    CEIL = 11
    COS = 12
    EXP = 13
    FLOOR = 14
    LOG = 15
    NEG = 16
    RSQRT = 17
    SIN = 18
    SQRT = 4
    TAN = 19
    ERF = 20
    IDENTITY = 21
    RECIPROCAL = 22
    RELU_FWD = 100
    TANH_FWD = 101
    SIGMOID_FWD = 102
    ELU_FWD = 103
    GELU_FWD = 104
    SOFTPLUS_FWD = 105
    SWISH_FWD = 106
    GELU_APPROX_TANH_FWD = 107
    RELU_BWD = 200
    TANH_BWD = 201
    SIGMOID_BWD = 202
    ELU_BWD = 203
    GELU_BWD = 204
    SOFTPLUS_BWD = 205
    SWISH_BWD = 206
    GELU_APPROX_TANH_BWD = 207
    CMP_EQ = 300
    CMP_NEQ = 301
    CMP_GT = 302
    CMP_GE = 303
    CMP_LT = 304
    CMP_LE = 305
    LOGICAL_AND = 400
    LOGICAL_OR = 401
    LOGICAL_NOT = 402
    GEN_INDEX = 501
    BINARY_SELECT = 601


# ---- pooling (resample) ------------------------------------------------------------------
class ResampleMode(enum.IntEnum):
    """``cudnnResampleMode_t`` (cuDNN's numbers; AVGPOOL is INCLUDE_PADDING's alias).
    The pooling nodes take MAXPOOL and the two AVGPOOL modes; NEAREST and BILINEAR are
    named so that cuDNN's values convert, and are NOT_SUPPORTED."""

    NEAREST = 0
    BILINEAR = 1
    AVGPOOL_INCLUDE_PADDING = 2
    AVGPOOL = 2
    MAXPOOL = 3
    AVGPOOL_EXCLUDE_PADDING = 4


# ---- cudnn-frontend's remaining module-level enums -----------------------------------------
class KnobType(enum.IntEnum):
    """cudnn-frontend's ``knob_type``: cuDNN's engine knob kinds (``cudnnBackendKnobType_t``
    names). opendnn's engines name their knobs by string (``get_knobs_for_engine``); this
    enum is for ``cudnn.knob`` objects that cuDNN code builds."""

    NOT_SET = -1
    SWIZZLE = 1
    TILE_SIZE = 2
    EDGE = 4
    MULTIPLY = 11
    SPLIT_K_BUF = 12
    TILEK = 13
    STAGES = 14
    REDUCTION_MODE = 15
    SPLIT_K_SLC = 17
    IDX_MODE = 18
    SPECFILT = 23
    KERNEL_CFG = 24
    WORKSPACE = 25
    TILE_CGA_M = 27
    TILE_CGA_N = 28
    BLOCK_SIZE = 29
    OCCUPANCY = 30
    ARRAY_SIZE_PER_THREAD = 31
    SPLIT_COLS = 33
    TILE_ROWS = 34
    TILE_COLS = 35
    LOAD_SIZE = 36
    CTA_COUNT = 37
    STREAM_K = 38
    SPLIT_P_SLC = 39
    TILE_M = 40
    TILE_N = 41
    WARP_SPEC_CFG = 42


class TensorReordering(enum.IntEnum):
    """A tensor's memory reordering (cudnn-frontend's ``tensor_reordering``): NONE is plain
    strided memory; the others are cuDNN's int8 / fp16 / fp8 block layouts."""

    NONE = 0
    INT8x32 = 1
    F16x16 = 2
    F8_128x4 = 3


class AttentionImplementation(enum.IntEnum):
    """Which sdpa implementation cudnn-frontend builds (``attention_implementation``):
    AUTO picks, COMPOSITE is the graph of matmuls and softmax, UNIFIED the fused kernel."""

    AUTO = 0
    COMPOSITE = 1
    UNIFIED = 2


class MoeGroupedMatmulMode(enum.IntEnum):
    """cudnn-frontend's ``moe_grouped_matmul_mode`` (token gather / scatter around a
    grouped matmul)."""

    NONE = 0
    GATHER = 1
    SCATTER = 2


class ScalarType(enum.IntEnum):
    """How a pass-by-value scalar enters a plan (cudnn-frontend's ``scalar_type``): a
    runtime parameter of every execute, or a constant compiled into the plan."""

    RUNTIME_PARAM = 0
    COMPILE_TIME_CONST = 1


class ReshapeMode(enum.IntEnum):
    """cudnn-frontend's ``reshape_mode``: VIEW_ONLY reinterprets the strides of the same
    memory, LOGICAL reshapes row-major logical order."""

    VIEW_ONLY = 0
    LOGICAL = 1
