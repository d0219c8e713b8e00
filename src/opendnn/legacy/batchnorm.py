"""cudnnBatchNormalization* on the graph API's batch-norm nodes (engines/batchnorm).

    inference: y = alpha * (scale (x - mean) / sqrt(var + eps) + bias) + beta * y
    training:  y = alpha * bn(x) + beta * y; running stats r <- (1 - f) r + f stat
    backward:  dx = alpha_d * dx_bn + beta_d * dx; dscale, dbias = alpha_p * d + beta_p * prior

Modes: SPATIAL (and SPATIAL_PERSISTENT, the same numbers here) take statistics per channel
over N and the spatial dims, the bn descriptor is [1, C, 1, 1(, 1)]; PER_ACTIVATION per
(C, H, W) over N, the bn descriptor is [1, C, H, W(, D)]. Inference takes the estimated
VARIANCE (not its inverse), as cuDNN does: 1 / sqrt(var + eps) is computed on the device
for the C statistics before the normalize kernel. The running buffers are updated in place
(the graph reads a copy of their old values: a graph may not write what it reads); None
skips them, as do None save buffers. Backward with saved statistics None recomputes them
with a training forward pass. Epsilon must be at least ``BN_MIN_EPSILON`` (cuDNN 9's
CUDNN_BN_MIN_EPSILON, 0.0) and the exponential average factor within [0, 1]. Graphs are
built once per (call, descriptors, mode, blend) and kept.
"""

from __future__ import annotations

import enum

import torch

from ..enums import DataType, HeurMode
from ..graph.graph import Graph
from ..runtime.lru import LRU, legacy_cache_size
from ..tensor import nchw_strides
from .common import SCALAR, as_enum, as_float, buffer, check, prior


class BatchNormMode(enum.IntEnum):
    PER_ACTIVATION = 0
    SPATIAL = 1
    SPATIAL_PERSISTENT = 2


BN_MIN_EPSILON = 0.0
_cache = LRU(legacy_cache_size)


def _bn_dims(x_desc, mode: BatchNormMode) -> tuple:
    if mode == BatchNormMode.PER_ACTIVATION:
        return (1,) + tuple(x_desc.dims[1:])
    return (1, x_desc.dims[1]) + (1,) * (len(x_desc.dims) - 2)


def derive_bn_tensor_descriptor(derived_bn_desc, x_desc, mode):
    """cudnnDeriveBNTensorDescriptor: set ``derived_bn_desc`` to the scale / bias / mean /
    variance shape for ``x_desc`` and ``mode`` (float32 statistics for half, bfloat16 and
    float data; double for double). Returns it."""
    op = "derive_bn_tensor_descriptor"
    check(x_desc.is_set(), "descriptor was never set", op, "x_desc")
    check(len(x_desc.dims) in (4, 5), f"x needs 4 or 5 dims, has {len(x_desc.dims)}", op, "x_desc")
    dims = _bn_dims(x_desc, as_enum(op, "mode", BatchNormMode, mode))
    derived_bn_desc.data_type = (
        DataType.DOUBLE if x_desc.data_type == DataType.DOUBLE else DataType.FLOAT
    )
    derived_bn_desc.dims, derived_bn_desc.strides = dims, tuple(nchw_strides(dims))
    return derived_bn_desc


def _check(op, mode, data: dict, bn: dict, epsilon) -> None:
    """Descriptors set, data descriptors alike (4 or 5 dims), bn descriptors shaped for
    ``mode``, epsilon at least the minimum."""
    mode = as_enum(op, "mode", BatchNormMode, mode)
    for name, d in {**data, **bn}.items():
        check(d.is_set(), "descriptor was never set", op, name)
    first_name, first = next(iter(data.items()))
    check(len(first.dims) in (4, 5), f"needs 4 or 5 dims, has {len(first.dims)}", op, first_name)
    for name, d in data.items():
        check(
            d.dims == first.dims,
            f"dims {list(d.dims)} must equal {first_name}'s {list(first.dims)}",
            op,
            name,
        )
    want = _bn_dims(first, mode)
    for name, d in bn.items():
        check(
            tuple(d.dims) == want,
            f"dims {list(d.dims)} must be {list(want)} for mode "
            f"{mode.name} and x dims {list(first.dims)} (derive_bn_tensor_descriptor)",
            op,
            name,
        )
    eps = as_float(op, "epsilon", epsilon)
    check(
        eps >= BN_MIN_EPSILON,
        f"epsilon {eps} is below the minimum {BN_MIN_EPSILON} (CUDNN_BN_MIN_EPSILON)",
        op,
        "epsilon",
    )


def _tensor(g, d, name):
    return g.tensor(list(d.dims), list(d.strides), d.data_type, name=name)


def _blend(g, t, d, name, alpha: bool, beta: bool, extra: dict):
    """t -> alpha * t + beta * prior, as an output of descriptor ``d``; records the added
    tensors in ``extra`` under ``name``."""
    if alpha:
        a = extra[f"{name}_alpha"] = g.tensor(name=f"{name}_alpha", **SCALAR)
        t = g.scale(t, a)
    if beta:
        prior = extra[f"{name}_prior"] = _tensor(g, d, f"{name}_prior")
        b = extra[f"{name}_beta"] = g.tensor(name=f"{name}_beta", **SCALAR)
        t = g.add(t, g.scale(prior, b))
    t.set_output(True).set_dim(list(d.dims)).set_stride(list(d.strides))
    return t.set_data_type(d.data_type).set_name(name)


def _build(key, handle, make):
    hit = _cache.get(key)
    if hit is None:
        g = Graph(
            name=key[0],
            handle=handle,
            intermediate_data_type=DataType.FLOAT,
            compute_data_type=DataType.FLOAT,
        )
        tensors = make(g)
        g.build([HeurMode.A, HeurMode.FALLBACK])
        hit = _cache[key] = (g, tensors)
    return hit


def _key(op, handle, mode, descs: dict, *flags):
    return (
        op,
        str(handle.device),
        int(mode),
        flags,
        tuple((n, d.dims, d.strides, int(d.data_type)) for n, d in descs.items()),
    )


def _execute(g, tensors: dict, bufs: dict, scalars: dict, blend: dict) -> None:
    """Bind ``bufs`` (by tensor name), scalars, and for each blended output its alpha,
    beta and a copy of its prior value; run with a fresh workspace."""
    pack = {tensors[n]: b for n, b in bufs.items() if n in tensors}
    pack.update({tensors[n]: float(v) for n, v in scalars.items() if n in tensors})
    for name, (alpha, beta) in blend.items():
        if f"{name}_alpha" in tensors:
            pack[tensors[f"{name}_alpha"]] = float(alpha)
        if f"{name}_beta" in tensors:
            pack[tensors[f"{name}_beta"]] = float(beta)
            pack[tensors[f"{name}_prior"]] = prior(bufs[name])
    device = next(b.device for b in bufs.values() if isinstance(b, torch.Tensor))
    ws = torch.empty(g.get_workspace_size(), dtype=torch.uint8, device=device)
    g.execute(pack, ws)


def batch_normalization_forward_inference(
    handle,
    mode,
    alpha,
    beta,
    x_desc,
    x,
    y_desc,
    y,
    bn_scale_bias_mean_var_desc,
    bn_scale,
    bn_bias,
    estimated_mean,
    estimated_variance,
    epsilon,
) -> None:
    """y = alpha * (bn_scale (x - mean) / sqrt(variance + epsilon) + bn_bias) + beta * y."""
    op = "batch_normalization_forward_inference"
    bn = bn_scale_bias_mean_var_desc
    _check(op, mode, {"x": x_desc, "y": y_desc}, {"bn_scale_bias_mean_var_desc": bn}, epsilon)
    alpha, beta = as_float(op, "alpha", alpha), as_float(op, "beta", beta)
    blend = (alpha != 1.0, beta != 0.0)
    x, y = buffer(op, "x", x, x_desc, handle), buffer(op, "y", y, y_desc, handle, output=True)
    bn_scale = buffer(op, "bn_scale", bn_scale, bn, handle)
    bn_bias = buffer(op, "bn_bias", bn_bias, bn, handle)
    estimated_mean = buffer(op, "estimated_mean", estimated_mean, bn, handle)
    estimated_variance = buffer(op, "estimated_variance", estimated_variance, bn, handle)

    def make(g):
        t = {
            n: _tensor(g, d, n)
            for n, d in (("x", x_desc), ("scale", bn), ("bias", bn), ("mean", bn), ("variance", bn))
        }
        t["epsilon"] = g.tensor(name="epsilon", **SCALAR)
        inv = g.rsqrt(g.add(t["variance"], t["epsilon"]))
        out = g.batchnorm_inference(t["x"], t["mean"], inv, t["scale"], t["bias"])
        t["y"] = _blend(g, out, y_desc, "y", *blend, t)
        return t

    g, t = _build(_key(op, handle, mode, {"x": x_desc, "y": y_desc, "bn": bn}, blend), handle, make)
    _execute(
        g,
        t,
        {
            "x": x,
            "y": y,
            "scale": bn_scale,
            "bias": bn_bias,
            "mean": estimated_mean,
            "variance": estimated_variance,
        },
        {"epsilon": epsilon},
        {"y": (alpha, beta)},
    )


def batch_normalization_forward_training(
    handle,
    mode,
    alpha,
    beta,
    x_desc,
    x,
    y_desc,
    y,
    bn_scale_bias_mean_var_desc,
    bn_scale,
    bn_bias,
    exponential_average_factor,
    result_running_mean,
    result_running_variance,
    epsilon,
    result_save_mean=None,
    result_save_inv_variance=None,
) -> None:
    """y = alpha * bn(x) + beta * y with batch statistics; the running buffers (both or
    neither) are updated in place with the factor; the save buffers (both or neither)
    receive the batch mean and 1 / sqrt(var + epsilon)."""
    op = "batch_normalization_forward_training"
    bn = bn_scale_bias_mean_var_desc
    _check(op, mode, {"x": x_desc, "y": y_desc}, {"bn_scale_bias_mean_var_desc": bn}, epsilon)
    running = result_running_mean is not None
    check(
        running == (result_running_variance is not None),
        "give both running buffers or neither",
        op,
        "result_running_variance",
    )
    check(
        (result_save_mean is None) == (result_save_inv_variance is None),
        "give both save buffers or neither",
        op,
        "result_save_inv_variance",
    )
    factor = as_float(op, "exponential_average_factor", exponential_average_factor)
    check(
        not running or 0.0 <= factor <= 1.0,
        f"exponential_average_factor {factor} must be within [0, 1]",
        op,
        "exponential_average_factor",
    )
    alpha, beta = as_float(op, "alpha", alpha), as_float(op, "beta", beta)
    blend = (alpha != 1.0, beta != 0.0)
    x, y = buffer(op, "x", x, x_desc, handle), buffer(op, "y", y, y_desc, handle, output=True)
    bn_scale = buffer(op, "bn_scale", bn_scale, bn, handle)
    bn_bias = buffer(op, "bn_bias", bn_bias, bn, handle)
    result_running_mean, result_running_variance, result_save_mean, result_save_inv_variance = (
        buffer(op, n, b, bn, handle, optional=True, output=True)
        for n, b in (
            ("result_running_mean", result_running_mean),
            ("result_running_variance", result_running_variance),
            ("result_save_mean", result_save_mean),
            ("result_save_inv_variance", result_save_inv_variance),
        )
    )

    def make(g):
        t = {n: _tensor(g, bn, n) for n in ("scale", "bias")}
        t["x"] = _tensor(g, x_desc, "x")
        t["epsilon"] = g.tensor(name="epsilon", **SCALAR)
        if running:
            t["old_mean"], t["old_var"] = _tensor(g, bn, "old_mean"), _tensor(g, bn, "old_var")
            t["factor"] = g.tensor(name="factor", **SCALAR)
        out = g.batchnorm(
            t["x"],
            t["scale"],
            t["bias"],
            t.get("old_mean"),
            t.get("old_var"),
            t["epsilon"],
            t.get("factor"),
        )
        t["y"] = _blend(g, out[0], y_desc, "y", *blend, t)
        for name, o in zip(("save_mean", "save_inv", "running_mean", "running_var"), out[1:]):
            if o is not None:
                t[name] = o.set_output(True).set_data_type(bn.data_type).set_name(name)
                o.set_dim(list(bn.dims)).set_stride(list(bn.strides))
        return t

    g, t = _build(
        _key(op, handle, mode, {"x": x_desc, "y": y_desc, "bn": bn}, blend, running), handle, make
    )
    save_mean, save_inv = result_save_mean, result_save_inv_variance
    if save_mean is None:
        save_mean = torch.empty_strided(
            bn.dims, bn.strides, dtype=bn_scale.dtype, device=bn_scale.device
        )
        save_inv = torch.empty_like(save_mean)
    bufs = {
        "x": x,
        "y": y,
        "scale": bn_scale,
        "bias": bn_bias,
        "save_mean": save_mean,
        "save_inv": save_inv,
    }
    if running:
        bufs.update(
            running_mean=result_running_mean,
            running_var=result_running_variance,
            old_mean=result_running_mean.clone(),
            old_var=result_running_variance.clone(),
        )
    _execute(g, t, bufs, {"epsilon": epsilon, "factor": factor}, {"y": (alpha, beta)})


def batch_normalization_backward(
    handle,
    mode,
    alpha_data_diff,
    beta_data_diff,
    alpha_param_diff,
    beta_param_diff,
    x_desc,
    x,
    dy_desc,
    dy,
    dx_desc,
    dx,
    d_bn_scale_bias_desc,
    bn_scale,
    result_bn_scale_diff,
    result_bn_bias_diff,
    epsilon,
    saved_mean=None,
    saved_inv_variance=None,
) -> None:
    """dx = alpha_d * dx_bn + beta_d * dx; dscale / dbias = alpha_p * d + beta_p * prior.
    Saved statistics None (both) are recomputed from x with ``epsilon``."""
    op = "batch_normalization_backward"
    bn = d_bn_scale_bias_desc
    _check(
        op, mode, {"x": x_desc, "dy": dy_desc, "dx": dx_desc}, {"d_bn_scale_bias_desc": bn}, epsilon
    )
    check(
        (saved_mean is None) == (saved_inv_variance is None),
        "give both saved statistics or neither",
        op,
        "saved_inv_variance",
    )
    alpha_data_diff = as_float(op, "alpha_data_diff", alpha_data_diff)
    beta_data_diff = as_float(op, "beta_data_diff", beta_data_diff)
    alpha_param_diff = as_float(op, "alpha_param_diff", alpha_param_diff)
    beta_param_diff = as_float(op, "beta_param_diff", beta_param_diff)
    x, dy = buffer(op, "x", x, x_desc, handle), buffer(op, "dy", dy, dy_desc, handle)
    dx = buffer(op, "dx", dx, dx_desc, handle, output=True)
    bn_scale = buffer(op, "bn_scale", bn_scale, bn, handle)
    result_bn_scale_diff = buffer(
        op, "result_bn_scale_diff", result_bn_scale_diff, bn, handle, output=True
    )
    result_bn_bias_diff = buffer(
        op, "result_bn_bias_diff", result_bn_bias_diff, bn, handle, output=True
    )
    saved_mean = buffer(op, "saved_mean", saved_mean, bn, handle, optional=True)
    saved_inv_variance = buffer(
        op, "saved_inv_variance", saved_inv_variance, bn, handle, optional=True
    )
    if saved_mean is None:
        saved_mean = torch.empty_strided(
            bn.dims, bn.strides, dtype=bn_scale.dtype, device=bn_scale.device
        )
        saved_inv_variance = torch.empty_like(saved_mean)
        scratch = torch.empty_like(dx)
        batch_normalization_forward_training(
            handle,
            mode,
            1.0,
            0.0,
            x_desc,
            x,
            dx_desc,
            scratch,
            bn,
            bn_scale,
            torch.zeros_like(bn_scale),
            0.0,
            None,
            None,
            epsilon,
            saved_mean,
            saved_inv_variance,
        )
    data = (alpha_data_diff != 1.0, beta_data_diff != 0.0)
    param = (alpha_param_diff != 1.0, beta_param_diff != 0.0)

    def make(g):
        t = {
            n: _tensor(g, d, n)
            for n, d in (("x", x_desc), ("dy", dy_desc), ("scale", bn), ("mean", bn), ("inv", bn))
        }
        ddx, dscale, dbias = g.batchnorm_backward(t["dy"], t["x"], t["scale"], t["mean"], t["inv"])
        t["dx"] = _blend(g, ddx, dx_desc, "dx", *data, t)
        t["dscale"] = _blend(g, dscale, bn, "dscale", *param, t)
        t["dbias"] = _blend(g, dbias, bn, "dbias", *param, t)
        return t

    g, t = _build(
        _key(op, handle, mode, {"x": x_desc, "dy": dy_desc, "dx": dx_desc, "bn": bn}, data, param),
        handle,
        make,
    )
    _execute(
        g,
        t,
        {
            "x": x,
            "dy": dy,
            "dx": dx,
            "scale": bn_scale,
            "mean": saved_mean,
            "inv": saved_inv_variance,
            "dscale": result_bn_scale_diff,
            "dbias": result_bn_bias_diff,
        },
        {},
        {
            "dx": (alpha_data_diff, beta_data_diff),
            "dscale": (alpha_param_diff, beta_param_diff),
            "dbias": (alpha_param_diff, beta_param_diff),
        },
    )


__all__ = [
    "BatchNormMode",
    "BN_MIN_EPSILON",
    "derive_bn_tensor_descriptor",
    "batch_normalization_forward_inference",
    "batch_normalization_forward_training",
    "batch_normalization_backward",
]
