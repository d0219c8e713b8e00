"""cudnnSoftmaxForward / cudnnSoftmaxBackward on the graph API's softmax nodes.

    y  = alpha * softmax(x) + beta * y
    dx = alpha * softmax_backward(dy, y) + beta * dx

Algorithms: ACCURATE subtracts each row's maximum before exp; LOG gives log-softmax; FAST
(cuDNN skips the maximum, and overflows for inputs beyond ~88 in float32) is computed as
ACCURATE here: the same values wherever FAST's are finite. Modes: CHANNEL takes the
softmax over C for every (n, spatial...) position; INSTANCE over all of C x spatial for
every n. An INSTANCE problem runs as rows of C*H*W elements, which needs each sample of
every tensor to be one dense block laid out alike (packed NCHW or NHWC, say); other
layouts are NOT_SUPPORTED with that reason. The graphs are built once per (call,
descriptors, blend) and kept.
"""

from __future__ import annotations

import enum

import torch

from ..enums import DataType, HeurMode
from ..errors import BadParamError, GraphNotSupportedError, Status
from ..graph.graph import Graph
from ..runtime.lru import LRU, legacy_cache_size
from .common import SCALAR, as_enum, as_float, buffer, check, prior


class SoftmaxAlgorithm(enum.IntEnum):
    FAST = 0
    ACCURATE = 1
    LOG = 2


class SoftmaxMode(enum.IntEnum):
    INSTANCE = 0
    CHANNEL = 1


_cache = LRU(legacy_cache_size)


def _rows(op: str, mode, descs: dict) -> tuple:
    """(dims, {name: strides}, axis) the softmax node sees for ``descs`` ({name: desc})."""
    first = next(iter(descs.values()))
    for name, d in descs.items():
        check(
            d.dims == first.dims,
            f"dims {list(d.dims)} must equal {list(first.dims)}",
            op,
            name,
            Status.BAD_PARAM_SHAPE_MISMATCH,
        )
        check(
            len(d.dims) >= 2,
            f"needs at least 2 dims (N, C, ...), has {len(d.dims)}",
            op,
            name,
            Status.BAD_PARAM_SHAPE_MISMATCH,
        )
    if mode == SoftmaxMode.CHANNEL:
        return list(first.dims), {n: list(d.strides) for n, d in descs.items()}, 1
    n, per = first.dims[0], 1
    for size in first.dims[1:]:
        per *= size
    inner = {
        name: sorted((s, size) for size, s in zip(d.dims[1:], d.strides[1:]) if size > 1)
        for name, d in descs.items()
    }
    for name, d in descs.items():
        running = 1
        for s, size in inner[name]:
            if s != running:
                raise GraphNotSupportedError(
                    f"INSTANCE mode needs every sample of {name} to be one dense block "
                    f"(strides {list(d.strides)} for dims {list(d.dims)} are not)",
                    op=op,
                    status=Status.NOT_SUPPORTED,
                )
            running *= size
        if d.strides[1:] != first.strides[1:]:
            raise GraphNotSupportedError(
                f"INSTANCE mode needs the same layout for every tensor ({name}'s strides "
                f"{list(d.strides)} differ from {list(first.strides)})",
                op=op,
                status=Status.NOT_SUPPORTED,
            )
    return [n, per], {name: [d.strides[0], 1] for name, d in descs.items()}, 1


def _graph(handle, op, algo, mode, descs: dict, out: str, blend: bool, beta: bool):
    for name, d in descs.items():
        check(d.is_set(), "descriptor was never set", op, name)
    algo = as_enum(op, "algo", SoftmaxAlgorithm, algo)
    mode = as_enum(op, "mode", SoftmaxMode, mode)
    key = (
        op,
        str(handle.device),
        int(algo),
        int(mode),
        blend,
        beta,
        tuple((n, d.dims, d.strides, int(d.data_type)) for n, d in descs.items()),
    )
    hit = _cache.get(key)
    if hit is not None:
        return hit
    dims, strides, axis = _rows(op, mode, descs)
    log = algo == SoftmaxAlgorithm.LOG
    g = Graph(
        name=op,
        handle=handle,
        intermediate_data_type=DataType.FLOAT,
        compute_data_type=DataType.FLOAT,
    )
    ins = {n: g.tensor(dims, strides[n], d.data_type, name=n) for n, d in descs.items() if n != out}
    if op == "softmax_forward":
        t = g.softmax(ins["x"], axis=axis, log=log, name="softmax")
    else:
        t = g.softmax_backward(ins["dy"], ins["y"], axis=axis, log=log, name="softmax")
    alpha = beta_t = prior_t = None
    if blend:
        alpha = g.tensor(name="alpha", **SCALAR)
        t = g.scale(t, alpha)
    if beta:
        prior_t = g.tensor(dims, strides[out], descs[out].data_type, name=f"{out}_prior")
        beta_t = g.tensor(name="beta", **SCALAR)
        t = g.add(t, g.scale(prior_t, beta_t))
    t.set_output(True).set_dim(dims).set_stride(strides[out])
    t.set_data_type(descs[out].data_type).set_name(out)
    # INSTANCE mode: the layout (dims, strides of the dims > 1) a buffer must have to be
    # viewed as the node's [N, C*H*W] rows
    layouts = (
        None
        if mode == SoftmaxMode.CHANNEL
        else {n: (d.dims, _significant(d.strides, d.dims)) for n, d in descs.items()}
    )
    g.build([HeurMode.A, HeurMode.FALLBACK])
    hit = _cache[key] = (g, ins, t, alpha, beta_t, prior_t, dims, strides, layouts)
    return hit


def _significant(strides, dims) -> tuple:
    return tuple(s for s, size in zip(strides, dims) if size > 1)


def _run(built, bufs: dict, out, alpha, beta) -> None:
    g, ins, t, ta, tb, prior_t, dims, strides, layouts = built

    def view(buf, name):
        """INSTANCE mode: a buffer laid out as its descriptor says, viewed as the node's
        rows; one with the descriptor's dims but other strides is refused (a layout
        mistake); any other buffer is bound as it is (by pointer where it is dense and
        large enough, as cuDNN reads it; else refused)."""
        if layouts is None or not isinstance(buf, torch.Tensor):
            return buf
        mine = (tuple(buf.shape), _significant(buf.stride(), buf.shape))
        if mine == layouts[name]:
            return buf.as_strided(dims, strides[name])
        if mine[0] == layouts[name][0]:
            raise BadParamError(
                f"buffer strides {list(buf.stride())} differ from the descriptor's",
                op=g.name,
                tensor=name,
                status=Status.BAD_PARAM_SHAPE_MISMATCH,
            )
        return buf

    pack = {ins[n]: view(b, n) for n, b in bufs.items() if n in ins}
    name = t.get_name()
    pack[t] = view(out, name)
    if ta is not None:
        pack[ta] = float(alpha)
    if tb is not None:
        pack[prior_t] = view(prior(out), name)
        pack[tb] = float(beta)
    # a workspace per call (the caching allocator makes it cheap): calls on two streams
    # must not share the two-kernel path's partials
    ws = torch.empty(g.get_workspace_size(), dtype=torch.uint8, device=pack[t].device)
    g.execute(pack, ws)


def softmax_forward(handle, algo, mode, alpha, x_desc, x, beta, y_desc, y) -> None:
    """y = alpha * softmax(x) + beta * y over C (CHANNEL) or C x spatial (INSTANCE)."""
    op = "softmax_forward"
    alpha, beta = as_float(op, "alpha", alpha), as_float(op, "beta", beta)
    x, y = buffer(op, "x", x, x_desc, handle), buffer(op, "y", y, y_desc, handle, output=True)
    built = _graph(
        handle, op, algo, mode, {"x": x_desc, "y": y_desc}, "y", alpha != 1.0, beta != 0.0
    )
    _run(built, {"x": x}, y, alpha, beta)


def softmax_backward(handle, algo, mode, alpha, y_desc, y, dy_desc, dy, beta, dx_desc, dx) -> None:
    """dx = alpha * (gradient through softmax / log-softmax from y and dy) + beta * dx."""
    op = "softmax_backward"
    alpha, beta = as_float(op, "alpha", alpha), as_float(op, "beta", beta)
    y, dy = buffer(op, "y", y, y_desc, handle), buffer(op, "dy", dy, dy_desc, handle)
    dx = buffer(op, "dx", dx, dx_desc, handle, output=True)
    built = _graph(
        handle,
        op,
        algo,
        mode,
        {"y": y_desc, "dy": dy_desc, "dx": dx_desc},
        "dx",
        alpha != 1.0,
        beta != 0.0,
    )
    _run(built, {"y": y, "dy": dy}, dx, alpha, beta)


__all__ = ["SoftmaxAlgorithm", "SoftmaxMode", "softmax_forward", "softmax_backward"]
