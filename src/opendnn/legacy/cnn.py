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
import time

import torch

from ..enums import ConvolutionMode, DataType, HeurMode
from ..errors import BadParamError, GraphNotSupportedError, Status
from ..graph.graph import Graph
from ..ops.conv import output_dims
from .common import Determinism, MathType, NanPropagation, check


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


# Which engine implements which algorithm; the others are not built yet and report
# NOT_SUPPORTED with that reason.
_FWD_ENGINES = {ConvolutionFwdAlgo.IMPLICIT_GEMM: 3}


@dataclasses.dataclass
class ConvolutionFwdAlgoPerf:
    algo: ConvolutionFwdAlgo
    status: Status
    time: float            # milliseconds (estimated by get_v7, measured by find)
    memory: int            # workspace bytes
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
        return (self.pre, self.post, self.stride, self.dilation, int(self.mode),
                int(self.compute_type), self.group_count, int(self.math_type))


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


def set_convolution_2d_descriptor(desc, pad_h, pad_w, u, v, dilation_h, dilation_w, mode,
                                  compute_type) -> None:
    set_convolution_nd_descriptor(desc, 2, [pad_h, pad_w], [u, v], [dilation_h, dilation_w],
                                  mode, compute_type)


def set_convolution_nd_descriptor(desc, array_length, pads, strides, dilations, mode,
                                  compute_type) -> None:
    op = "set_convolution_nd_descriptor"
    check(1 <= array_length <= 3, f"array_length {array_length} must be 1..3", op)
    check(len(pads) == len(strides) == len(dilations) == array_length,
          "pads, strides and dilations need array_length values each", op)
    check(all(p >= 0 for p in pads), f"padding {list(pads)} must be >= 0", op,
          status=Status.BAD_PARAM_OUT_OF_BOUND)
    check(all(s >= 1 for s in strides), f"strides {list(strides)} must be >= 1", op,
          status=Status.BAD_PARAM_OUT_OF_BOUND)
    check(all(d >= 1 for d in dilations), f"dilations {list(dilations)} must be >= 1", op,
          status=Status.BAD_PARAM_OUT_OF_BOUND)
    desc.pre = desc.post = tuple(int(p) for p in pads)
    desc.stride, desc.dilation = tuple(int(s) for s in strides), tuple(int(d) for d in dilations)
    desc.mode = ConvolutionMode(int(mode))
    desc.compute_type = DataType(int(compute_type))


def set_convolution_group_count(desc, group_count: int) -> None:
    check(group_count >= 1, f"group count {group_count} must be >= 1",
          "set_convolution_group_count", status=Status.BAD_PARAM_OUT_OF_BOUND)
    desc.group_count = int(group_count)


def set_convolution_math_type(desc, math_type) -> None:
    desc.math_type = MathType(int(math_type))


def get_convolution_2d_descriptor(desc) -> tuple:
    return (desc.pre[0], desc.pre[1], desc.stride[0], desc.stride[1], desc.dilation[0],
            desc.dilation[1], desc.mode, desc.compute_type)


def _check_geometry(op, x_desc, w_desc, conv) -> list:
    check(x_desc.is_set() and w_desc.is_set(), "tensor or filter descriptor never set", op)
    check(len(conv.stride) > 0, "convolution descriptor never set", op)
    nsp = len(x_desc.dims) - 2
    check(len(conv.stride) == nsp, f"convolution has {len(conv.stride)} spatial dims, the "
          f"tensor {nsp}", op, "x", Status.BAD_PARAM_SHAPE_MISMATCH)
    check(len(w_desc.dims) == len(x_desc.dims), f"filter rank {len(w_desc.dims)} differs from "
          f"the tensor's {len(x_desc.dims)}", op, "w", Status.BAD_PARAM_SHAPE_MISMATCH)
    g = conv.group_count
    check(x_desc.dims[1] == w_desc.dims[1] * g, f"input channels {x_desc.dims[1]} != filter "
          f"channels {w_desc.dims[1]} x group count {g}", op, "w",
          Status.BAD_PARAM_SHAPE_MISMATCH)
    check(w_desc.dims[0] % g == 0, f"group count {g} does not divide {w_desc.dims[0]} filters",
          op, "w", Status.BAD_PARAM_SHAPE_MISMATCH)
    out = output_dims(x_desc.dims, w_desc.dims, conv.pre, conv.post, conv.stride, conv.dilation)
    check(all(o > 0 for o in out[2:]), f"output spatial dims {out[2:]} are empty", op, "x",
          Status.BAD_PARAM_OUT_OF_BOUND)
    return out


def get_convolution_2d_forward_output_dim(conv, x_desc, w_desc) -> tuple:
    """(n, c, h, w) of the output."""
    return tuple(_check_geometry("get_convolution_2d_forward_output_dim", x_desc, w_desc, conv))


def get_convolution_nd_forward_output_dim(conv, x_desc, w_desc, nb_dims: int) -> list:
    out = _check_geometry("get_convolution_nd_forward_output_dim", x_desc, w_desc, conv)
    check(nb_dims == len(out), f"nb_dims {nb_dims} != {len(out)}",
          "get_convolution_nd_forward_output_dim")
    return out


# ---- activation descriptors ----------------------------------------------------------------
def create_activation_descriptor() -> ActivationDescriptor:
    return ActivationDescriptor()


def destroy_activation_descriptor(desc) -> None:
    desc.mode = ActivationMode.IDENTITY


def set_activation_descriptor(desc, mode, relu_nan_opt, coef: float) -> None:
    desc.mode = ActivationMode(int(mode))
    desc.nan_opt = NanPropagation(int(relu_nan_opt))
    desc.coef = float(coef)


def set_activation_descriptor_swish_beta(desc, swish_beta: float) -> None:
    desc.swish_beta = float(swish_beta)


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
class _FwdCall:
    """A built graph for one (descriptors, algorithm, blend shape) and its tensors."""

    def __init__(self, handle, x_desc, w_desc, conv, y_desc, algo, blend: bool, beta: bool,
                 z_desc=None, b_desc=None, act=None, op="convolution_forward"):
        out = _check_geometry(op, x_desc, w_desc, conv)
        check(y_desc.is_set(), "output descriptor never set", op, "y")
        check(list(y_desc.dims) == out, f"output descriptor dims {list(y_desc.dims)} disagree "
              f"with the output-dim query {out}", op, "y", Status.BAD_PARAM_SHAPE_MISMATCH)
        g = Graph(name=op, handle=handle, intermediate_data_type=DataType.FLOAT,
                  compute_data_type=DataType.FLOAT)
        self.x = g.tensor(x_desc.dims, x_desc.strides, x_desc.data_type, name="x")
        self.w = g.tensor(w_desc.dims, w_desc.strides, w_desc.data_type, name="w")
        t = g.conv_fprop(self.x, self.w, pre_padding=list(conv.pre),
                         post_padding=list(conv.post), stride=list(conv.stride),
                         dilation=list(conv.dilation), convolution_mode=conv.mode, name="conv")
        scalar = dict(dim=[1], stride=[1], data_type=DataType.FLOAT, is_pass_by_value=True)
        self.alpha = self.beta = self.z = self.bias = None
        if blend:
            self.alpha = g.tensor(name="alpha", **scalar)
            t = g.scale(t, self.alpha)
        if z_desc is not None:
            self.z = g.tensor(z_desc.dims, z_desc.strides, z_desc.data_type, name="z")
            self.beta = g.tensor(name="alpha2", **scalar)
            t = g.add(t, g.scale(self.z, self.beta))
        elif beta:
            self.z = g.tensor(y_desc.dims, y_desc.strides, y_desc.data_type, name="y_prior")
            self.beta = g.tensor(name="beta", **scalar)
            t = g.add(t, g.scale(self.z, self.beta))
        if b_desc is not None:
            self.bias = g.tensor(b_desc.dims, b_desc.strides, b_desc.data_type, name="bias")
            t = g.bias(t, self.bias)
        t = _apply_activation(g, t, act)
        t.set_output(True).set_dim(list(y_desc.dims)).set_stride(list(y_desc.strides))
        t.set_data_type(y_desc.data_type).set_name("y")
        self.y = t
        self.graph = g
        g.validate()
        self.algo = ConvolutionFwdAlgo(int(algo))
        engine_id = _FWD_ENGINES.get(self.algo)
        if engine_id is None:
            raise GraphNotSupportedError(f"algorithm {self.algo.name} is not implemented in "
                                         "opendnn yet", op=op, status=Status.NOT_SUPPORTED)
        g.create_execution_plans([HeurMode.A])
        cands = [i for i in range(g.get_execution_plan_count())
                 if g._plans[i].stages[0].config.engine_id == engine_id
                 and len(g._plans[i].stages) == 1]
        if not cands:
            reason = g._reasons.get(_engine_name(engine_id), "the engine declines this problem")
            raise GraphNotSupportedError(f"algorithm {self.algo.name} does not support this "
                                         f"problem: {reason}", op=op, status=Status.NOT_SUPPORTED)
        g.build_plan_at_index(cands[0])
        g._selected = cands[0]
        self.workspace_size = g.get_workspace_size()

    def run(self, x, w, y, alpha, beta, workspace, z=None, bias=None):
        pack = {self.x: x, self.w: w, self.y: y}
        if self.alpha is not None:
            pack[self.alpha] = float(alpha)
        if self.z is not None:
            pack[self.z] = z if z is not None else y.clone()
            pack[self.beta] = float(beta)
        if self.bias is not None:
            pack[self.bias] = bias
        self.graph.execute(pack, workspace)


def _engine_name(engine_id: int) -> str:
    from ..engines.registry import by_id
    return by_id(engine_id).name


_cache: dict = {}


def _fwd_call(handle, x_desc, w_desc, conv, y_desc, algo, blend, beta, op, **extra) -> _FwdCall:
    key = (str(getattr(handle, "device", None)), x_desc.desc().to_json().__repr__(),
           w_desc.desc().to_json().__repr__(), conv.key(), y_desc.desc().to_json().__repr__(),
           int(algo), blend, beta, op,
           tuple((k, None if v is None else (v.desc().to_json().__repr__() if hasattr(v, "desc")
                                             else (v.mode, v.nan_opt, v.coef, v.swish_beta)))
                 for k, v in sorted(extra.items())))
    call = _cache.get(key)
    if call is None:
        call = _FwdCall(handle, x_desc, w_desc, conv, y_desc, algo, blend, beta, op=op, **extra)
        _cache[key] = call
    return call


# ---- algorithm queries ----------------------------------------------------------------------
def get_convolution_forward_algorithm_max_count(handle) -> int:
    return len(ConvolutionFwdAlgo)


def _perf(handle, x_desc, w_desc, conv, y_desc, algo, op) -> ConvolutionFwdAlgoPerf:
    try:
        call = _fwd_call(handle, x_desc, w_desc, conv, y_desc, algo, False, False, op)
    except GraphNotSupportedError as e:
        return ConvolutionFwdAlgoPerf(algo, Status.NOT_SUPPORTED, -1.0, 0,
                                      Determinism.DETERMINISTIC, conv.math_type, e.rule)
    plan = call.graph._selected_plan()
    est = plan.stages[0].config
    from ..engines.registry import by_id
    ms = by_id(est.engine_id).estimate_seconds(plan.stages[0].graph, est, plan.target) * 1e3
    return ConvolutionFwdAlgoPerf(algo, Status.SUCCESS, ms, call.workspace_size,
                                  Determinism.DETERMINISTIC, conv.math_type)


def get_convolution_forward_algorithm_v7(handle, x_desc, w_desc, conv, y_desc,
                                         requested: int) -> list:
    """Every algorithm ranked by the heuristic: supported ones first by estimated time."""
    _check_geometry("get_convolution_forward_algorithm_v7", x_desc, w_desc, conv)
    perfs = [_perf(handle, x_desc, w_desc, conv, y_desc, a, "get_convolution_forward_algorithm_v7")
             for a in ConvolutionFwdAlgo]
    perfs.sort(key=lambda p: (p.status != Status.SUCCESS, p.time))
    return perfs[:max(int(requested), 0)]


def find_convolution_forward_algorithm(handle, x_desc, w_desc, conv, y_desc,
                                       requested: int) -> list:
    """Measured: allocates random buffers on the handle's device and times each algorithm."""
    dev = handle.device
    x = torch.randn(x_desc.desc().span, device=dev).to(x_desc.desc().torch_dtype)
    w = torch.randn(w_desc.desc().span, device=dev).to(w_desc.desc().torch_dtype)
    y = torch.empty(y_desc.desc().span, device=dev, dtype=y_desc.desc().torch_dtype)
    return find_convolution_forward_algorithm_ex(handle, x_desc, x, w_desc, w, conv, y_desc, y,
                                                 requested, None, None)


def find_convolution_forward_algorithm_ex(handle, x_desc, x, w_desc, w, conv, y_desc, y,
                                          requested: int, workspace, workspace_size) -> list:
    """Measured on the given buffers, fastest first; algorithms needing more than
    ``workspace_size`` bytes report BAD_PARAM_SIZE_INSUFFICIENT."""
    op = "find_convolution_forward_algorithm_ex"
    limit = workspace_size if workspace_size is not None else float("inf")
    out = []
    for algo in ConvolutionFwdAlgo:
        p = _perf(handle, x_desc, w_desc, conv, y_desc, algo, op)
        if p.status == Status.SUCCESS:
            if p.memory > limit:
                p.status, p.reason = Status.BAD_PARAM_SIZE_INSUFFICIENT, "workspace too small"
            else:
                call = _fwd_call(handle, x_desc, w_desc, conv, y_desc, algo, False, False, op)
                p.time = _time(lambda: call.run(x, w, y, 1.0, 0.0, workspace), y)
        out.append(p)
    out.sort(key=lambda p: (p.status != Status.SUCCESS, p.time))
    return out[:max(int(requested), 0)]


def _time(fn, like, reps: int = 5) -> float:
    fn()   # compile and warm
    if like.is_cuda:
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(reps):
            fn()
        e.record()
        e.synchronize()
        return s.elapsed_time(e) / reps
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def get_convolution_forward_workspace_size(handle, x_desc, w_desc, conv, y_desc, algo) -> int:
    return _fwd_call(handle, x_desc, w_desc, conv, y_desc, algo, False, False,
                     "get_convolution_forward_workspace_size").workspace_size


# ---- execution ------------------------------------------------------------------------------
def convolution_forward(handle, alpha, x_desc, x, w_desc, w, conv, algo, workspace,
                        workspace_size, beta, y_desc, y) -> None:
    """y = alpha * conv(x, w) + beta * y."""
    call = _fwd_call(handle, x_desc, w_desc, conv, y_desc, algo, alpha != 1.0, beta != 0.0,
                     "convolution_forward")
    _check_ws(call, workspace, workspace_size, "convolution_forward")
    call.run(x, w, y, alpha, beta, workspace)


def convolution_bias_activation_forward(handle, alpha1, x_desc, x, w_desc, w, conv, algo,
                                        workspace, workspace_size, alpha2, z_desc, z,
                                        bias_desc, bias, activation_desc, y_desc, y) -> None:
    """y = act(alpha1 * conv(x, w) + alpha2 * z + bias), in one fused kernel."""
    op = "convolution_bias_activation_forward"
    check(bias_desc.is_set() and list(bias_desc.dims) == [1, w_desc.dims[0]] + [1] * (
        len(w_desc.dims) - 2), f"bias must be [1, K, 1, ...], got {list(bias_desc.dims)}", op,
        "bias", Status.BAD_PARAM_SHAPE_MISMATCH)
    use_z = alpha2 != 0.0
    call = _fwd_call(handle, x_desc, w_desc, conv, y_desc, algo, alpha1 != 1.0, False, op,
                     z_desc=z_desc if use_z else None, b_desc=bias_desc, act=activation_desc)
    _check_ws(call, workspace, workspace_size, op)
    if use_z and z is not None and z.data_ptr() == y.data_ptr():
        z = z.clone()   # cuDNN allows z == y; a fused multi-node graph may not run in place
    call.run(x, w, y, alpha1, alpha2, workspace, z=z if use_z else None, bias=bias)


def _check_ws(call, workspace, workspace_size, op) -> None:
    if call.workspace_size > (workspace_size or 0):
        raise BadParamError(f"workspace of {workspace_size} bytes; the algorithm needs "
                            f"{call.workspace_size}", op=op,
                            status=Status.BAD_PARAM_SIZE_INSUFFICIENT)
