"""Convolution in the descriptor API (cuDNN's cnn library): descriptors, output-dim
queries, algorithm heuristics (get_*_v7) and measurement (find_*), forward with
alpha/beta blending, and the fused convolution_bias_activation_forward.

Each call builds (once, then caches by descriptor key) a small graph on the core -- the
convolution, the blending and activation as pointwise nodes -- and runs the engine that
implements the requested algorithm. alpha, beta and the activation coefficient are
pass-by-value scalars, so changing them reuses the built plan.
"""

from __future__ import annotations

import dataclasses
import enum

import torch

from ..enums import ConvolutionMode, DataType
from ..errors import BadParamError, GraphNotSupportedError, Status
from ..graph.graph import Graph
from ..ops.conv import output_dims
from ..runtime.lru import LRU, legacy_cache_size
from ..runtime.scratch import fresh_like, overlaps
from .common import (
    SCALAR,
    Determinism,
    MathType,
    NanPropagation,
    as_enum,
    as_float,
    as_int,
    as_ints,
    buffer,
    check,
)
from .tensor import TensorDescriptor


class ConvolutionFwdAlgo(enum.IntEnum):
    IMPLICIT_GEMM = 0
    IMPLICIT_PRECOMP_GEMM = 1
    GEMM = 2
    DIRECT = 3
    FFT = 4
    FFT_TILING = 5
    WINOGRAD = 6
    WINOGRAD_NONFUSED = 7


class ActivationMode(enum.IntEnum):
    SIGMOID = 0
    RELU = 1
    TANH = 2
    CLIPPED_RELU = 3
    ELU = 4
    IDENTITY = 5
    SWISH = 6


# Which engine implements which algorithm. The one enum value without an engine is
# backward filter WINOGRAD, which cuDNN documents as not implemented: NOT_SUPPORTED.
_FWD_ENGINES = {
    ConvolutionFwdAlgo.IMPLICIT_GEMM: 3,
    ConvolutionFwdAlgo.IMPLICIT_PRECOMP_GEMM: 11,
    ConvolutionFwdAlgo.GEMM: 6,
    ConvolutionFwdAlgo.DIRECT: 7,
    ConvolutionFwdAlgo.FFT: 13,
    ConvolutionFwdAlgo.FFT_TILING: 14,
    ConvolutionFwdAlgo.WINOGRAD: 15,
    ConvolutionFwdAlgo.WINOGRAD_NONFUSED: 8,
}


@dataclasses.dataclass
class ConvolutionFwdAlgoPerf:
    algo: ConvolutionFwdAlgo
    status: Status
    time: float  # milliseconds (estimated by get_v7, measured by find)
    memory: int  # workspace bytes
    determinism: Determinism
    math_type: MathType
    reason: str = ""


class ConvolutionDescriptor:
    def __init__(self):
        self.pre: tuple = ()
        self.post: tuple = ()
        self.stride: tuple = ()
        self.dilation: tuple = ()
        self.mode = ConvolutionMode.CROSS_CORRELATION
        self.compute_type = DataType.FLOAT
        self.group_count = 1
        self.math_type = MathType.DEFAULT_MATH

    def key(self) -> tuple:
        return (
            self.pre,
            self.post,
            self.stride,
            self.dilation,
            int(self.mode),
            int(self.compute_type),
            self.group_count,
            int(self.math_type),
        )


class ActivationDescriptor:
    def __init__(self):
        self.mode = ActivationMode.IDENTITY
        self.nan_opt = NanPropagation.NOT_PROPAGATE_NAN
        self.coef = 0.0
        self.swish_beta = 1.0


def create_convolution_descriptor() -> ConvolutionDescriptor:
    return ConvolutionDescriptor()


def destroy_convolution_descriptor(desc) -> None:
    desc.stride = ()


def set_convolution_2d_descriptor(
    desc, pad_h, pad_w, u, v, dilation_h, dilation_w, mode, compute_type
) -> None:
    set_convolution_nd_descriptor(
        desc, 2, [pad_h, pad_w], [u, v], [dilation_h, dilation_w], mode, compute_type
    )


def set_convolution_nd_descriptor(
    desc, array_length, pads, strides, dilations, mode, compute_type
) -> None:
    op = "set_convolution_nd_descriptor"
    array_length = as_int(op, "array_length", array_length)
    check(1 <= array_length <= 3, f"array_length {array_length} must be 1..3", op)
    pads, strides = as_ints(op, "pads", pads), as_ints(op, "strides", strides)
    dilations = as_ints(op, "dilations", dilations)
    check(
        len(pads) == len(strides) == len(dilations) == array_length,
        "pads, strides and dilations need array_length values each",
        op,
    )
    check(
        all(p >= 0 for p in pads),
        f"padding {list(pads)} must be >= 0",
        op,
        status=Status.BAD_PARAM_OUT_OF_BOUND,
    )
    check(
        all(s >= 1 for s in strides),
        f"strides {list(strides)} must be >= 1",
        op,
        status=Status.BAD_PARAM_OUT_OF_BOUND,
    )
    check(
        all(d >= 1 for d in dilations),
        f"dilations {list(dilations)} must be >= 1",
        op,
        status=Status.BAD_PARAM_OUT_OF_BOUND,
    )
    mode = as_enum(op, "mode", ConvolutionMode, mode)
    compute_type = as_enum(op, "compute_type", DataType, compute_type)
    desc.pre = desc.post = pads
    desc.stride, desc.dilation = strides, dilations
    desc.mode, desc.compute_type = mode, compute_type


def set_convolution_group_count(desc, group_count: int) -> None:
    op = "set_convolution_group_count"
    group_count = as_int(op, "group_count", group_count)
    check(
        group_count >= 1,
        f"group count {group_count} must be >= 1",
        op,
        status=Status.BAD_PARAM_OUT_OF_BOUND,
    )
    desc.group_count = group_count


def set_convolution_math_type(desc, math_type) -> None:
    desc.math_type = as_enum("set_convolution_math_type", "math_type", MathType, math_type)


def get_convolution_2d_descriptor(desc) -> tuple:
    """(pad_h, pad_w, u, v, dilation_h, dilation_w, mode, compute_type)."""
    op = "get_convolution_2d_descriptor"
    check(len(desc.stride) > 0, "convolution descriptor was never set", op)
    check(
        len(desc.stride) == 2,
        f"not a 2-D convolution descriptor (it has {len(desc.stride)} spatial dims)",
        op,
        status=Status.BAD_PARAM_SHAPE_MISMATCH,
    )
    return (
        desc.pre[0],
        desc.pre[1],
        desc.stride[0],
        desc.stride[1],
        desc.dilation[0],
        desc.dilation[1],
        desc.mode,
        desc.compute_type,
    )


def _check_geometry(op, x_desc, w_desc, conv) -> list:
    check(x_desc.is_set() and w_desc.is_set(), "tensor or filter descriptor never set", op)
    check(len(conv.stride) > 0, "convolution descriptor never set", op)
    nsp = len(x_desc.dims) - 2
    check(
        len(conv.stride) == nsp,
        f"convolution has {len(conv.stride)} spatial dims, the tensor {nsp}",
        op,
        "x",
        Status.BAD_PARAM_SHAPE_MISMATCH,
    )
    check(
        len(w_desc.dims) == len(x_desc.dims),
        f"filter rank {len(w_desc.dims)} differs from the tensor's {len(x_desc.dims)}",
        op,
        "w",
        Status.BAD_PARAM_SHAPE_MISMATCH,
    )
    g = conv.group_count
    check(
        x_desc.dims[1] == w_desc.dims[1] * g,
        f"input channels {x_desc.dims[1]} != filter channels {w_desc.dims[1]} x group count {g}",
        op,
        "w",
        Status.BAD_PARAM_SHAPE_MISMATCH,
    )
    check(
        w_desc.dims[0] % g == 0,
        f"group count {g} does not divide {w_desc.dims[0]} filters",
        op,
        "w",
        Status.BAD_PARAM_SHAPE_MISMATCH,
    )
    out = output_dims(x_desc.dims, w_desc.dims, conv.pre, conv.post, conv.stride, conv.dilation)
    check(
        all(o > 0 for o in out[2:]),
        f"output spatial dims {out[2:]} are empty",
        op,
        "x",
        Status.BAD_PARAM_OUT_OF_BOUND,
    )
    return out


def get_convolution_2d_forward_output_dim(conv, x_desc, w_desc) -> tuple:
    """(n, c, h, w) of the output."""
    return tuple(_check_geometry("get_convolution_2d_forward_output_dim", x_desc, w_desc, conv))


def get_convolution_nd_forward_output_dim(conv, x_desc, w_desc, nb_dims: int) -> list:
    op = "get_convolution_nd_forward_output_dim"
    out = _check_geometry(op, x_desc, w_desc, conv)
    nb_dims = as_int(op, "nb_dims", nb_dims)
    check(nb_dims == len(out), f"nb_dims {nb_dims} != {len(out)}", op)
    return out


# ---- activation descriptors ----------------------------------------------------------------
def create_activation_descriptor() -> ActivationDescriptor:
    return ActivationDescriptor()


def destroy_activation_descriptor(desc) -> None:
    desc.mode = ActivationMode.IDENTITY


def set_activation_descriptor(desc, mode, relu_nan_opt, coef: float) -> None:
    op = "set_activation_descriptor"
    mode = as_enum(op, "mode", ActivationMode, mode)
    nan_opt = as_enum(op, "relu_nan_opt", NanPropagation, relu_nan_opt)
    desc.mode, desc.nan_opt, desc.coef = mode, nan_opt, as_float(op, "coef", coef)


def set_activation_descriptor_swish_beta(desc, swish_beta: float) -> None:
    desc.swish_beta = as_float("set_activation_descriptor_swish_beta", "swish_beta", swish_beta)


def get_activation_descriptor(desc) -> tuple:
    return desc.mode, desc.nan_opt, desc.coef


def _apply_activation(g: Graph, t, act: ActivationDescriptor | None):
    if act is None or act.mode == ActivationMode.IDENTITY:
        return t
    m = act.mode
    if m == ActivationMode.RELU:
        return g.relu(t)
    if m == ActivationMode.CLIPPED_RELU:
        return g.relu(t, upper_clip=act.coef)
    if m == ActivationMode.SIGMOID:
        return g.sigmoid(t)
    if m == ActivationMode.TANH:
        return g.tanh(t)
    if m == ActivationMode.ELU:
        return g.elu(t, alpha=act.coef)
    return g.swish(t, swish_beta=act.swish_beta)


# ---- plans ----------------------------------------------------------------------------------
class _ConvCall:
    """A built graph for one (direction, descriptors, algorithm, blend shape).

    ``kind`` is conv_fprop (a = x, b = w, out = y), conv_dgrad (a = dy, b = w, out = dx) or
    conv_wgrad (a = x, b = dy, out = dw). The result is ``act(alpha * conv + beta * prior
    [+ alpha2 * z] [+ bias])``; unused terms are left out of the graph.
    """

    def __init__(
        self,
        handle,
        kind,
        a_desc,
        b_desc,
        conv,
        out_desc,
        algo,
        engine_id,
        blend,
        beta,
        op,
        z_desc=None,
        b_bias=None,
        act=None,
    ):
        check(out_desc.is_set(), "output descriptor never set", op, "out")
        if kind == "conv_fprop":
            want, got, label = _check_geometry(op, a_desc, b_desc, conv), out_desc.dims, "y"
        elif kind == "conv_dgrad":
            want, got, label = _check_geometry(op, out_desc, b_desc, conv), a_desc.dims, "dy"
        else:
            want, got, label = _check_geometry(op, a_desc, out_desc, conv), b_desc.dims, "dy"
        check(
            list(got) == want,
            f"descriptor dims {list(got)} disagree with the output-dim query {want}",
            op,
            label,
            Status.BAD_PARAM_SHAPE_MISMATCH,
        )
        g = Graph(
            name=op,
            handle=handle,
            intermediate_data_type=DataType.FLOAT,
            compute_data_type=DataType.FLOAT,
        )
        names = _NAMES[kind]
        self.a = g.tensor(a_desc.dims, a_desc.strides, a_desc.data_type, name=names[0])
        self.b = g.tensor(b_desc.dims, b_desc.strides, b_desc.data_type, name=names[1])
        params = dict(
            pre_padding=list(conv.pre),
            post_padding=list(conv.post),
            stride=list(conv.stride),
            dilation=list(conv.dilation),
            convolution_mode=conv.mode,
            name="conv",
        )
        t = getattr(g, kind)(self.a, self.b, **params)
        if kind != "conv_fprop":
            t.set_dim(list(out_desc.dims)).set_stride(list(out_desc.strides))
        self.alpha = self.beta = self.z = self.bias = None
        if blend:
            self.alpha = g.tensor(name="alpha", **SCALAR)
            t = g.scale(t, self.alpha)
        if z_desc is not None or beta:
            zd = z_desc if z_desc is not None else out_desc
            self.z = g.tensor(
                zd.dims, zd.strides, zd.data_type, name="z" if z_desc is not None else "prior"
            )
            self.beta = g.tensor(name="alpha2" if z_desc is not None else "beta", **SCALAR)
            t = g.add(t, g.scale(self.z, self.beta))
        if b_bias is not None:
            self.bias = g.tensor(b_bias.dims, b_bias.strides, b_bias.data_type, name="bias")
            t = g.bias(t, self.bias)
        t = _apply_activation(g, t, act)
        t.set_output(True).set_dim(list(out_desc.dims)).set_stride(list(out_desc.strides))
        t.set_data_type(out_desc.data_type).set_name(names[2])
        self.out = t
        self.graph = g
        g.validate()
        if engine_id is None:
            raise GraphNotSupportedError(
                f"algorithm {algo.name} has no implementation (cuDNN implements none either)",
                op=op,
                status=Status.NOT_SUPPORTED,
            )
        try:
            g.build_plan_for_engine(engine_id)
        except GraphNotSupportedError as e:
            raise GraphNotSupportedError(
                f"algorithm {algo.name} does not support this problem: {e.rule}",
                op=op,
                status=Status.NOT_SUPPORTED,
            ) from None
        self.workspace_size = g.get_workspace_size()
        self.engine_id = engine_id

    def run(self, a, b, out, alpha, beta, workspace, z=None, bias=None):
        pack = {self.a: a, self.b: b, self.out: out}
        if self.alpha is not None:
            pack[self.alpha] = float(alpha)
        if self.z is not None:
            pack[self.z] = z if z is not None else out.clone()
            pack[self.beta] = float(beta)
        if self.bias is not None:
            pack[self.bias] = bias
        self.graph.execute(pack, workspace)

    def estimate_ms(self) -> float:
        plan = self.graph.selected_plan()
        cfg = plan.stages[0].config
        from ..engines.registry import by_id

        return by_id(cfg.engine_id).estimate_seconds(plan.stages[0].graph, cfg, plan.target) * 1e3


_cache = LRU(legacy_cache_size)
# the operands' names per direction: (a, b, out)
_NAMES = {
    "conv_fprop": ("x", "w", "y"),
    "conv_dgrad": ("dy", "w", "dx"),
    "conv_wgrad": ("x", "dy", "dw"),
}


def _check_set(op, kind, a_desc, b_desc, out_desc) -> None:
    for name, d in zip(_NAMES[kind], (a_desc, b_desc, out_desc)):
        check(isinstance(d, TensorDescriptor) and d.is_set(), "descriptor was never set", op, name)


def _desc_key(d):
    if d is None:
        return None
    if hasattr(d, "desc"):
        return (d.dims, d.strides, int(d.data_type))
    return (int(d.mode), int(d.nan_opt), d.coef, d.swish_beta)  # activation descriptor


def conv_call(
    handle, kind, a_desc, b_desc, conv, out_desc, algo, engine_id, blend, beta, op, **extra
) -> _ConvCall:
    """The cached built call for these descriptors (plans are reused across calls)."""
    _check_set(op, kind, a_desc, b_desc, out_desc)
    for name, d in extra.items():
        if name == "act":
            check(
                d is None or isinstance(d, ActivationDescriptor),
                f"needs an activation descriptor or None, got {type(d).__name__}",
                op,
                "activation_desc",
            )
        else:
            check(
                d is None or isinstance(d, TensorDescriptor) and d.is_set(),
                "descriptor was never set",
                op,
                {"z_desc": "z", "b_bias": "bias"}[name],
            )
    check(
        isinstance(conv, ConvolutionDescriptor),
        f"needs a convolution descriptor, got {type(conv).__name__}",
        op,
        "conv_desc",
    )
    key = (
        str(getattr(handle, "device", None)),
        kind,
        _desc_key(a_desc),
        _desc_key(b_desc),
        conv.key(),
        _desc_key(out_desc),
        int(algo),
        blend,
        beta,
        op,
        tuple((k, _desc_key(v)) for k, v in sorted(extra.items())),
    )
    call = _cache.get(key)
    if call is None:
        call = _ConvCall(
            handle, kind, a_desc, b_desc, conv, out_desc, algo, engine_id, blend, beta, op, **extra
        )
        _cache[key] = call
    return call


def perf_of(
    perf_cls,
    handle,
    kind,
    a_desc,
    b_desc,
    conv,
    out_desc,
    algo,
    engine_id,
    op,
    determinism=lambda algo: Determinism.DETERMINISTIC,
):
    """One algorithm's heuristic perf entry (status NOT_SUPPORTED with the reason)."""
    det = determinism
    try:
        call = conv_call(
            handle, kind, a_desc, b_desc, conv, out_desc, algo, engine_id, False, False, op
        )
    except GraphNotSupportedError as e:
        return perf_cls(algo, Status.NOT_SUPPORTED, -1.0, 0, det(algo), conv.math_type, e.rule)
    return perf_cls(
        algo, Status.SUCCESS, call.estimate_ms(), call.workspace_size, det(algo), conv.math_type
    )


@dataclasses.dataclass(frozen=True)
class Direction:
    """One convolution direction of the descriptor API: its graph node, algorithm enum,
    the engines implementing the algorithms, its perf struct and determinism rule. The
    public functions below are thin wrappers that keep cuDNN's argument orders."""

    kind: str
    algos: type
    engines: dict
    perf: type
    determinism: object = staticmethod(lambda algo: Determinism.DETERMINISTIC)

    def call(self, handle, a_desc, b_desc, conv, out_desc, algo, blend, beta, op, **extra):
        algo = as_enum(op, "algo", self.algos, algo)
        return conv_call(
            handle,
            self.kind,
            a_desc,
            b_desc,
            conv,
            out_desc,
            algo,
            self.engines.get(algo),
            blend,
            beta,
            op,
            **extra,
        )

    def ranked(self, handle, a_desc, b_desc, conv, out_desc, requested, op) -> list:
        perfs = [
            perf_of(
                self.perf,
                handle,
                self.kind,
                a_desc,
                b_desc,
                conv,
                out_desc,
                a,
                self.engines.get(a),
                op,
                self.determinism,
            )
            for a in self.algos
        ]
        perfs.sort(key=lambda p: (p.status != Status.SUCCESS, p.time))
        return perfs[: max(as_int(op, "requested", requested), 0)]

    def find(
        self,
        handle,
        a_desc,
        a,
        b_desc,
        b,
        conv,
        out_desc,
        out,
        requested,
        workspace,
        workspace_size,
        op,
        own_workspace: bool = False,
    ) -> list:
        """Time every supported algorithm on the buffers given; with ``own_workspace`` (the
        non-Ex find) each algorithm runs on a workspace of its own size, allocated here
        up to ``FIND_WORKSPACE_LIMIT`` bytes."""
        requested = as_int(op, "requested", requested)
        names = _NAMES[self.kind]
        a, b, out = (
            buffer(op, n, t, d, handle)
            for n, t, d in zip(names, (a, b, out), (a_desc, b_desc, out_desc))
        )
        perfs = self.ranked(handle, a_desc, b_desc, conv, out_desc, len(self.algos), op)
        if own_workspace:
            limit = FIND_WORKSPACE_LIMIT
        elif workspace_size is None:
            limit = float("inf")
        else:
            limit = as_int(op, "workspace_size", workspace_size)
        if overlaps(out, a) or overlaps(out, b):
            out = fresh_like(out)  # timed runs must not overwrite what they read
        measure(
            perfs,
            lambda algo, ws: self.call(
                handle, a_desc, b_desc, conv, out_desc, algo, False, False, op
            ).run(a, b, out, 1.0, 0.0, ws if own_workspace else workspace),
            out,
            limit,
            own_workspace,
        )
        return perfs[: max(requested, 0)]

    def random_find(self, handle, a_desc, b_desc, conv, out_desc, requested, op) -> list:
        _check_set(op, self.kind, a_desc, b_desc, out_desc)
        a, b, out = (_random_buffer(d, handle) for d in (a_desc, b_desc, out_desc))
        return self.find(
            handle, a_desc, a, b_desc, b, conv, out_desc, out, requested, None, None, op, True
        )

    def execute(
        self,
        handle,
        alpha,
        a_desc,
        a,
        b_desc,
        b,
        conv,
        algo,
        workspace,
        workspace_size,
        beta,
        out_desc,
        out,
        op,
    ) -> None:
        alpha, beta = as_float(op, "alpha", alpha), as_float(op, "beta", beta)
        names = _NAMES[self.kind]
        a, b, out = (
            buffer(op, n, t, d, handle, output=n == names[2])
            for n, t, d in zip(names, (a, b, out), (a_desc, b_desc, out_desc))
        )
        call = self.call(
            handle, a_desc, b_desc, conv, out_desc, algo, alpha != 1.0, beta != 0.0, op
        )
        check_ws(call, workspace, workspace_size, op)
        call.run(a, b, out, alpha, beta, workspace)


# the non-Ex find calls allocate each algorithm's workspace themselves, as cuDNN's do; an
# algorithm asking for more is reported (BAD_PARAM_SIZE_INSUFFICIENT), not run
FIND_WORKSPACE_LIMIT = 1 << 30


def measure(perfs: list, run_for, like, limit, own_workspace: bool = False) -> list:
    """find_*: time every supported algorithm (``run_for(algo, workspace)`` runs it once;
    with ``own_workspace`` the workspace is allocated here at the algorithm's size)."""
    for p in perfs:
        if p.status != Status.SUCCESS:
            continue
        if p.memory > limit:
            p.status = Status.BAD_PARAM_SIZE_INSUFFICIENT
            p.reason = (
                f"workspace of {p.memory} bytes over the find's {limit}-byte allocation bound"
                if own_workspace
                else f"workspace of {p.memory} bytes > the {limit} bytes given"
            )
            continue
        ws = None
        if own_workspace and p.memory > 0:
            ws = torch.empty(p.memory, dtype=torch.uint8, device=like.device)
        p.time = _time(lambda: run_for(p.algo, ws), like)
    perfs.sort(key=lambda p: (p.status != Status.SUCCESS, p.time))
    return perfs


# ---- algorithm queries ----------------------------------------------------------------------
def get_convolution_forward_algorithm_max_count(handle) -> int:
    return len(ConvolutionFwdAlgo)


FORWARD = Direction("conv_fprop", ConvolutionFwdAlgo, _FWD_ENGINES, ConvolutionFwdAlgoPerf)


def _fwd(handle, x_desc, w_desc, conv, y_desc, algo, blend, beta, op, **extra) -> _ConvCall:
    return FORWARD.call(handle, x_desc, w_desc, conv, y_desc, algo, blend, beta, op, **extra)


def get_convolution_forward_algorithm_v7(
    handle, x_desc, w_desc, conv, y_desc, requested: int
) -> list:
    """Every algorithm ranked by the heuristic: supported ones first by estimated time."""
    op = "get_convolution_forward_algorithm_v7"
    _check_geometry(op, x_desc, w_desc, conv)
    return FORWARD.ranked(handle, x_desc, w_desc, conv, y_desc, requested, op)


def find_convolution_forward_algorithm(
    handle, x_desc, w_desc, conv, y_desc, requested: int
) -> list:
    """Measured: allocates random buffers on the handle's device and times each algorithm."""
    return FORWARD.random_find(
        handle, x_desc, w_desc, conv, y_desc, requested, "find_convolution_forward_algorithm"
    )


def find_convolution_forward_algorithm_ex(
    handle, x_desc, x, w_desc, w, conv, y_desc, y, requested: int, workspace, workspace_size
) -> list:
    """Measured on the given buffers, fastest first; algorithms needing more than
    ``workspace_size`` bytes report BAD_PARAM_SIZE_INSUFFICIENT. As in cuDNN, ``y`` is
    written by the timed runs and holds no defined result afterwards (a ``y`` that overlaps
    ``x`` or ``w`` is left alone: the runs write a buffer of the library's instead)."""
    return FORWARD.find(
        handle,
        x_desc,
        x,
        w_desc,
        w,
        conv,
        y_desc,
        y,
        requested,
        workspace,
        workspace_size,
        "find_convolution_forward_algorithm_ex",
    )


def _random_buffer(desc, handle):
    d = desc.desc()
    return torch.randn(d.span, device=handle.device).to(d.torch_dtype)


def _time(fn, like) -> float:
    """find_*'s measurement: one compiling call, then the median kernel time."""
    from ..runtime import timing

    return timing.median_ms(fn, like.is_cuda, warmup=1, iters=5, batch=4)


def get_convolution_forward_workspace_size(handle, x_desc, w_desc, conv, y_desc, algo) -> int:
    return _fwd(
        handle,
        x_desc,
        w_desc,
        conv,
        y_desc,
        algo,
        False,
        False,
        "get_convolution_forward_workspace_size",
    ).workspace_size


# ---- execution ------------------------------------------------------------------------------
def convolution_forward(
    handle, alpha, x_desc, x, w_desc, w, conv, algo, workspace, workspace_size, beta, y_desc, y
) -> None:
    """y = alpha * conv(x, w) + beta * y."""
    FORWARD.execute(
        handle,
        alpha,
        x_desc,
        x,
        w_desc,
        w,
        conv,
        algo,
        workspace,
        workspace_size,
        beta,
        y_desc,
        y,
        "convolution_forward",
    )


def convolution_bias_activation_forward(
    handle,
    alpha1,
    x_desc,
    x,
    w_desc,
    w,
    conv,
    algo,
    workspace,
    workspace_size,
    alpha2,
    z_desc,
    z,
    bias_desc,
    bias,
    activation_desc,
    y_desc,
    y,
) -> None:
    """y = act(alpha1 * conv(x, w) + alpha2 * z + bias), in one fused kernel."""
    op = "convolution_bias_activation_forward"
    alpha1, alpha2 = as_float(op, "alpha1", alpha1), as_float(op, "alpha2", alpha2)
    for name, d in (("w", w_desc), ("bias", bias_desc)):
        check(isinstance(d, TensorDescriptor) and d.is_set(), "descriptor was never set", op, name)
    check(
        list(bias_desc.dims) == [1, w_desc.dims[0]] + [1] * (len(w_desc.dims) - 2),
        f"bias must be [1, K, 1, ...], got {list(bias_desc.dims)}",
        op,
        "bias",
        Status.BAD_PARAM_SHAPE_MISMATCH,
    )
    use_z = alpha2 != 0.0
    x, w = buffer(op, "x", x, x_desc, handle), buffer(op, "w", w, w_desc, handle)
    y = buffer(op, "y", y, y_desc, handle, output=True)
    bias = buffer(op, "bias", bias, bias_desc, handle)
    z = buffer(op, "z", z, z_desc, handle) if use_z else None
    call = _fwd(
        handle,
        x_desc,
        w_desc,
        conv,
        y_desc,
        algo,
        alpha1 != 1.0,
        False,
        op,
        z_desc=z_desc if use_z else None,
        b_bias=bias_desc,
        act=activation_desc,
    )
    check_ws(call, workspace, workspace_size, op)
    if use_z and z.data_ptr() == y.data_ptr():
        z = z.clone()  # cuDNN allows z == y; a fused multi-node graph may not run in place
    call.run(x, w, y, alpha1, alpha2, workspace, z=z if use_z else None, bias=bias)


def check_ws(call, workspace, workspace_size, op) -> None:
    workspace_size = 0 if workspace_size is None else as_int(op, "workspace_size", workspace_size)
    if call.workspace_size > workspace_size:
        raise BadParamError(
            f"workspace of {workspace_size} bytes; the algorithm needs {call.workspace_size}",
            op=op,
            status=Status.BAD_PARAM_SIZE_INSUFFICIENT,
        )
