"""Convolution backward in the descriptor API: backward data, backward filter and
backward bias, with the same algorithm queries as the forward pass (see cnn.py).

Every algorithm of both enums is implemented: backward data ALGO_0 (split-K with atomics,
nondeterministic), ALGO_1 (deterministic implicit GEMM over dx's pixels), FFT and
FFT_TILING (the forward FFT on the rewritten problem), WINOGRAD (fused) and
WINOGRAD_NONFUSED; backward filter ALGO_0 (split-K, nondeterministic), ALGO_1
(deterministic implicit GEMM, one program per tap and tile), FFT and FFT_TILING (per-bin
GEMMs over the batch), ALGO_3 (split-K with index tables in the workspace,
nondeterministic) and WINOGRAD_NONFUSED (F(3x3, 2x2) transforms around 16 GEMMs). Filter
WINOGRAD (fused) does not exist in cuDNN either: it reports NOT_SUPPORTED.
"""

from __future__ import annotations

import dataclasses
import enum

import torch

from ..enums import DataType, HeurMode, ReductionMode
from ..errors import Status
from ..graph.graph import Graph
from ..runtime.lru import LRU, legacy_cache_size
from .cnn import Direction
from .common import SCALAR, Determinism, MathType, as_float, buffer, check


class ConvolutionBwdDataAlgo(enum.IntEnum):
    ALGO_0 = 0
    ALGO_1 = 1
    FFT = 2
    FFT_TILING = 3
    WINOGRAD = 4
    WINOGRAD_NONFUSED = 5


class ConvolutionBwdFilterAlgo(enum.IntEnum):
    ALGO_0 = 0
    ALGO_1 = 1
    FFT = 2
    ALGO_3 = 3
    WINOGRAD = 4
    WINOGRAD_NONFUSED = 5
    FFT_TILING = 6


_DATA_ENGINES = {
    ConvolutionBwdDataAlgo.ALGO_0: 17,
    ConvolutionBwdDataAlgo.ALGO_1: 4,
    ConvolutionBwdDataAlgo.FFT: 20,
    ConvolutionBwdDataAlgo.FFT_TILING: 21,
    ConvolutionBwdDataAlgo.WINOGRAD: 18,
    ConvolutionBwdDataAlgo.WINOGRAD_NONFUSED: 16,
}
_FILTER_ENGINES = {
    ConvolutionBwdFilterAlgo.ALGO_0: 10,
    ConvolutionBwdFilterAlgo.ALGO_1: 5,
    ConvolutionBwdFilterAlgo.FFT: 22,
    ConvolutionBwdFilterAlgo.ALGO_3: 19,
    ConvolutionBwdFilterAlgo.WINOGRAD_NONFUSED: 24,
    ConvolutionBwdFilterAlgo.FFT_TILING: 23,
}
# cuDNN's atomics-based algorithms (IntEnums compare by value: one set per enum)
_NONDET_DATA = {ConvolutionBwdDataAlgo.ALGO_0}
_NONDET_FILTER = {ConvolutionBwdFilterAlgo.ALGO_0, ConvolutionBwdFilterAlgo.ALGO_3}


@dataclasses.dataclass
class ConvolutionBwdDataAlgoPerf:
    algo: ConvolutionBwdDataAlgo
    status: Status
    time: float
    memory: int
    determinism: Determinism
    math_type: MathType
    reason: str = ""


@dataclasses.dataclass
class ConvolutionBwdFilterAlgoPerf:
    algo: ConvolutionBwdFilterAlgo
    status: Status
    time: float
    memory: int
    determinism: Determinism
    math_type: MathType
    reason: str = ""


def _det_data(algo) -> Determinism:
    return Determinism.NON_DETERMINISTIC if algo in _NONDET_DATA else Determinism.DETERMINISTIC


def _det_filter(algo) -> Determinism:
    return Determinism.NON_DETERMINISTIC if algo in _NONDET_FILTER else Determinism.DETERMINISTIC


DATA = Direction(
    "conv_dgrad", ConvolutionBwdDataAlgo, _DATA_ENGINES, ConvolutionBwdDataAlgoPerf, _det_data
)
FILTER = Direction(
    "conv_wgrad",
    ConvolutionBwdFilterAlgo,
    _FILTER_ENGINES,
    ConvolutionBwdFilterAlgoPerf,
    _det_filter,
)


# ---- backward data (graph operands: dy, w -> dx) ---------------------------------------------
def get_convolution_backward_data_algorithm_max_count(handle) -> int:
    return len(ConvolutionBwdDataAlgo)


def get_convolution_backward_data_algorithm_v7(
    handle, w_desc, dy_desc, conv, dx_desc, requested: int
) -> list:
    return DATA.ranked(
        handle,
        dy_desc,
        w_desc,
        conv,
        dx_desc,
        requested,
        "get_convolution_backward_data_algorithm_v7",
    )


def find_convolution_backward_data_algorithm(
    handle, w_desc, dy_desc, conv, dx_desc, requested: int
) -> list:
    return DATA.random_find(
        handle,
        dy_desc,
        w_desc,
        conv,
        dx_desc,
        requested,
        "find_convolution_backward_data_algorithm",
    )


def find_convolution_backward_data_algorithm_ex(
    handle, w_desc, w, dy_desc, dy, conv, dx_desc, dx, requested: int, workspace, workspace_size
) -> list:
    """Measured on the given buffers, fastest first. As in cuDNN, ``dx`` is written by the
    timed runs and holds no defined result afterwards (unless it overlaps ``w`` or ``dy``:
    then the runs write a buffer of the library's instead)."""
    return DATA.find(
        handle,
        dy_desc,
        dy,
        w_desc,
        w,
        conv,
        dx_desc,
        dx,
        requested,
        workspace,
        workspace_size,
        "find_convolution_backward_data_algorithm_ex",
    )


def get_convolution_backward_data_workspace_size(
    handle, w_desc, dy_desc, conv, dx_desc, algo
) -> int:
    return DATA.call(
        handle,
        dy_desc,
        w_desc,
        conv,
        dx_desc,
        algo,
        False,
        False,
        "get_convolution_backward_data_workspace_size",
    ).workspace_size


def convolution_backward_data(
    handle, alpha, w_desc, w, dy_desc, dy, conv, algo, workspace, workspace_size, beta, dx_desc, dx
) -> None:
    """dx = alpha * dgrad(dy, w) + beta * dx."""
    DATA.execute(
        handle,
        alpha,
        dy_desc,
        dy,
        w_desc,
        w,
        conv,
        algo,
        workspace,
        workspace_size,
        beta,
        dx_desc,
        dx,
        "convolution_backward_data",
    )


# ---- backward filter (graph operands: x, dy -> dw) -------------------------------------------
def get_convolution_backward_filter_algorithm_max_count(handle) -> int:
    return len(ConvolutionBwdFilterAlgo)


def get_convolution_backward_filter_algorithm_v7(
    handle, x_desc, dy_desc, conv, dw_desc, requested: int
) -> list:
    return FILTER.ranked(
        handle,
        x_desc,
        dy_desc,
        conv,
        dw_desc,
        requested,
        "get_convolution_backward_filter_algorithm_v7",
    )


def find_convolution_backward_filter_algorithm(
    handle, x_desc, dy_desc, conv, dw_desc, requested: int
) -> list:
    return FILTER.random_find(
        handle,
        x_desc,
        dy_desc,
        conv,
        dw_desc,
        requested,
        "find_convolution_backward_filter_algorithm",
    )


def find_convolution_backward_filter_algorithm_ex(
    handle, x_desc, x, dy_desc, dy, conv, dw_desc, dw, requested: int, workspace, workspace_size
) -> list:
    """Measured on the given buffers, fastest first. As in cuDNN, ``dw`` is written by the
    timed runs and holds no defined result afterwards (unless it overlaps ``x`` or ``dy``:
    then the runs write a buffer of the library's instead)."""
    return FILTER.find(
        handle,
        x_desc,
        x,
        dy_desc,
        dy,
        conv,
        dw_desc,
        dw,
        requested,
        workspace,
        workspace_size,
        "find_convolution_backward_filter_algorithm_ex",
    )


def get_convolution_backward_filter_workspace_size(
    handle, x_desc, dy_desc, conv, dw_desc, algo
) -> int:
    return FILTER.call(
        handle,
        x_desc,
        dy_desc,
        conv,
        dw_desc,
        algo,
        False,
        False,
        "get_convolution_backward_filter_workspace_size",
    ).workspace_size


def convolution_backward_filter(
    handle, alpha, x_desc, x, dy_desc, dy, conv, algo, workspace, workspace_size, beta, dw_desc, dw
) -> None:
    """dw = alpha * wgrad(x, dy) + beta * dw."""
    FILTER.execute(
        handle,
        alpha,
        x_desc,
        x,
        dy_desc,
        dy,
        conv,
        algo,
        workspace,
        workspace_size,
        beta,
        dw_desc,
        dw,
        "convolution_backward_filter",
    )


# ---- backward bias ---------------------------------------------------------------------------
_bias_cache = LRU(legacy_cache_size)


def convolution_backward_bias(handle, alpha, dy_desc, dy, beta, db_desc, db) -> None:
    """db = alpha * sum_{n, spatial} dy + beta * db (db is [1, K, 1, ...])."""
    op = "convolution_backward_bias"
    for name, d in (("dy", dy_desc), ("db", db_desc)):
        check(d.is_set(), "descriptor was never set", op, name)
    alpha, beta = as_float(op, "alpha", alpha), as_float(op, "beta", beta)
    dy = buffer(op, "dy", dy, dy_desc, handle)
    db = buffer(op, "db", db, db_desc, handle, output=True)
    want = [1, dy_desc.dims[1]] + [1] * (len(dy_desc.dims) - 2)
    check(
        list(db_desc.dims) == want,
        f"db dims {list(db_desc.dims)} must be {want}",
        op,
        "db",
        Status.BAD_PARAM_SHAPE_MISMATCH,
    )
    key = (
        str(handle.device),
        dy_desc.dims,
        dy_desc.strides,
        int(dy_desc.data_type),
        db_desc.dims,
        db_desc.strides,
        int(db_desc.data_type),
        beta != 0.0,
    )
    built = _bias_cache.get(key)
    if built is None:
        g = Graph(name=op, handle=handle, compute_data_type=DataType.FLOAT)
        tdy = g.tensor(dy_desc.dims, dy_desc.strides, dy_desc.data_type, name="dy")
        ta = g.tensor(name="alpha", **SCALAR)
        s = g.reduction(g.scale(tdy, ta), ReductionMode.ADD)
        s.set_dim(want).set_stride(list(db_desc.strides)).set_data_type(DataType.FLOAT)
        tb = prior = None
        out = s
        if beta != 0.0:
            tb = g.tensor(name="beta", **SCALAR)
            prior = g.tensor(db_desc.dims, db_desc.strides, db_desc.data_type, name="db_prior")
            out = g.add(s, g.scale(prior, tb))
        out.set_output(True).set_data_type(db_desc.data_type).set_name("db")
        g.build([HeurMode.A, HeurMode.FALLBACK])
        built = (g, tdy, ta, tb, prior, out)
        _bias_cache[key] = built
    g, tdy, ta, tb, prior, out = built
    pack = {tdy: dy, ta: float(alpha), out: db}
    if tb is not None:
        pack[tb] = float(beta)
        pack[prior] = db.clone()
    ws = (
        torch.empty(g.get_workspace_size(), dtype=torch.uint8, device=dy.device)
        if g.get_workspace_size()
        else None
    )
    g.execute(pack, ws)


__all__ = [
    n
    for n in dir()
    if not n.startswith("_")
    and n
    not in (
        "annotations",
        "dataclasses",
        "enum",
        "torch",
        "DataType",
        "HeurMode",
        "ReductionMode",
        "Graph",
        "check",
        "as_float",
        "buffer",
        "Direction",
        "DATA",
        "FILTER",
    )
]
