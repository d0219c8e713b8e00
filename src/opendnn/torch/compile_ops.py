"""What the ``opendnn`` torch.compile backend can route, and the routed calls themselves.

Every FX node the backend understands is read as one *canonical* call: an operation name
from ``SUPPORTED`` (``opendnn.torch.functional``'s names, which are torch.nn.functional's)
with arguments in torch.nn.functional's signature. Targets reach that form three ways:

- ``call_function`` of torch.nn.functional's function itself (``F.relu``, ``F.batch_norm``)
  or of a PyTorch alias with the same signature (``torch.conv2d`` *is* ``F.conv2d``,
  ``torch._C._nn.linear`` *is* ``F.linear``; ``torch.relu``, ``torch.sigmoid``,
  ``torch.tanh``, ``torch.matmul``, ``operator.matmul`` (``a @ b``)); ``torch.softmax`` and
  ``torch.log_softmax`` have ``dtype`` third, so their arguments are moved to keywords;
- ``call_method`` of a Tensor method: ``x.relu()``, ``.sigmoid()``, ``.tanh()``,
  ``.softmax(dim)``, ``.log_softmax(dim)``, ``.matmul(y)``;
- ``call_module`` of a module type in ``MODULES`` (``lower_modules`` first rewrites it as a
  call of its functional form, its parameters as ``get_attr`` nodes).

``ROUTED[name]`` calls ``functional.<name>`` and, when opendnn declines the case
(``GraphNotSupportedError``), PyTorch's own function with the same arguments; each
distinct reason is logged once (``OPENDNN_LOG=info``) and counted (``runtime_fallbacks``).
"""

from __future__ import annotations

import operator
import threading

import torch
import torch.nn.functional as F

from .. import log
from ..errors import GraphNotSupportedError
from . import functional as OF

SUPPORTED = (
    "conv1d",
    "conv2d",
    "conv3d",
    "linear",
    "matmul",
    "batch_norm",
    "layer_norm",
    "rms_norm",
    "group_norm",
    "instance_norm",
    "max_pool1d",
    "max_pool2d",
    "max_pool3d",
    "avg_pool1d",
    "avg_pool2d",
    "avg_pool3d",
    "adaptive_avg_pool2d",
    "relu",
    "relu6",
    "hardtanh",
    "elu",
    "leaky_relu",
    "gelu",
    "silu",
    "sigmoid",
    "tanh",
    "softplus",
    "softmax",
    "log_softmax",
    "dropout",
    "scaled_dot_product_attention",
)

# parameter names (torch.nn.functional's order) and defaults of the operations the fusion
# patterns read; other operations pass their arguments through untouched
PARAMS = {
    "conv": (
        ("input", "weight", "bias", "stride", "padding", "dilation", "groups"),
        {"bias": None, "stride": 1, "padding": 0, "dilation": 1, "groups": 1},
    ),
    "linear": (("input", "weight", "bias"), {"bias": None}),
    "batch_norm": (
        ("input", "running_mean", "running_var", "weight", "bias", "training", "momentum", "eps"),
        {"weight": None, "bias": None, "training": False, "momentum": 0.1, "eps": 1e-5},
    ),
    "layer_norm": (
        ("input", "normalized_shape", "weight", "bias", "eps"),
        {"weight": None, "bias": None, "eps": 1e-5},
    ),
    "group_norm": (
        ("input", "num_groups", "weight", "bias", "eps"),
        {"weight": None, "bias": None, "eps": 1e-5},
    ),
    "relu": (("input", "inplace"), {"inplace": False}),
    "silu": (("input", "inplace"), {"inplace": False}),
    "gelu": (("input", "approximate"), {"approximate": "none"}),
    "sigmoid": (("input",), {}),
    "tanh": (("input",), {}),
    "softmax": (("input", "dim", "_stacklevel", "dtype"), {"dim": None, "dtype": None}),
    "matmul": (("input", "other"), {}),
}
for _k in ("conv1d", "conv2d", "conv3d"):
    PARAMS[_k] = PARAMS["conv"]


def bind(name: str, args: tuple, kwargs: dict) -> dict | None:
    """{parameter: value} of a canonical call, defaults filled; None if the arguments do
    not fit the signature (then no pattern uses the node)."""
    names, defaults = PARAMS[name]
    if len(args) > len(names) or any(k not in names for k in kwargs):
        return None
    out = dict(defaults)
    out.update(zip(names, args))
    for k, v in kwargs.items():
        if k in out and names.index(k) < len(args):
            return None  # given twice
        out[k] = v
    return out if all(n in out for n in names if n not in ("_stacklevel",)) else None


def _torch_fn(name: str):
    return torch.matmul if name == "matmul" else getattr(F, name)


def _dtype_third(args, kwargs):
    """torch.softmax(input, dim, dtype) / Tensor.softmax(dim, dtype) -> F.softmax's form."""
    kw = dict(kwargs)
    for key, value in zip(("dim", "dtype"), args[1:]):
        kw[key] = value
    return tuple(args[:1]), kw


def _function_table() -> dict:
    table = {}
    for name in SUPPORTED:
        fn = _torch_fn(name)
        table[fn] = (name, None)
    for fn, name in (
        (torch.relu, "relu"),
        (torch.sigmoid, "sigmoid"),
        (torch.tanh, "tanh"),
        (operator.matmul, "matmul"),
        (torch.conv1d, "conv1d"),
        (torch.conv2d, "conv2d"),
        (torch.conv3d, "conv3d"),
    ):
        table.setdefault(fn, (name, None))
    table[torch.softmax] = ("softmax", _dtype_third)
    table[torch.log_softmax] = ("log_softmax", _dtype_third)
    return table


FUNCTIONS = _function_table()
METHODS = {
    "relu": ("relu", None),
    "sigmoid": ("sigmoid", None),
    "tanh": ("tanh", None),
    "matmul": ("matmul", None),
    "softmax": ("softmax", _dtype_third),
    "log_softmax": ("log_softmax", _dtype_third),
}


def canonical(node) -> tuple | str:
    """(name, args, kwargs) of a node the backend can route, else the reason it stays
    PyTorch (a string)."""
    if node.op == "call_function":
        try:
            hit = FUNCTIONS.get(node.target)
        except TypeError:  # an unhashable target
            hit = None
        if hit is None:
            if isinstance(node.target, torch._ops.OpOverload | torch._ops.OpOverloadPacket) and str(
                node.target
            ).startswith("opendnn."):
                return "already an opendnn operation"
            return "no opendnn operation for this function"
    elif node.op == "call_method":
        hit = METHODS.get(node.target)
        if hit is None:
            return "no opendnn operation for this Tensor method"
    else:
        return f"{node.op} node"
    name, adapt = hit
    args, kwargs = adapt(node.args, node.kwargs) if adapt else (tuple(node.args), dict(node.kwargs))
    return name, args, kwargs


def target_name(node) -> str:
    t = node.target
    if isinstance(t, str):
        return f"{node.op} {t}"
    mod = getattr(t, "__module__", None) or ""
    return f"{mod}.{getattr(t, '__name__', repr(t))}".lstrip(".")


# ---- routed calls --------------------------------------------------------------------------
_lock = threading.Lock()
_fallbacks: dict = {}  # (operation, reason) -> times PyTorch ran instead


def note_fallback(op: str, err: Exception) -> None:
    """Count a fallback to PyTorch; log each distinct (operation, reason) once."""
    key = (op, str(err))
    with _lock:
        first = key not in _fallbacks
        _fallbacks[key] = _fallbacks.get(key, 0) + 1
    if first:
        log.info(f"torch.compile backend: {op} runs in PyTorch: {err}")


def runtime_fallbacks() -> dict:
    """{(operation, reason): count} of the calls opendnn declined and PyTorch ran."""
    with _lock:
        return dict(_fallbacks)


def reset_fallbacks() -> None:
    with _lock:
        _fallbacks.clear()


def _make_routed(name: str):
    torch_fn = _torch_fn(name)

    def routed(*args, **kwargs):
        try:
            return getattr(OF, name)(*args, **kwargs)
        except GraphNotSupportedError as err:
            note_fallback(name, err)
            return torch_fn(*args, **kwargs)

    routed.__name__ = routed.__qualname__ = f"routed_{name}"
    routed.__doc__ = f"opendnn's {name}; PyTorch's when opendnn declines the case."
    return routed


ROUTED = {name: _make_routed(name) for name in SUPPORTED}


# ---- call_module nodes -----------------------------------------------------------------------
def _conv(m):
    if m.padding_mode != "zeros":
        return None
    return (
        f"conv{len(m.kernel_size)}d",
        ["weight", "bias"],
        (m.stride, m.padding, m.dilation, m.groups),
        {},
    )


def _pool(name, fields):
    return lambda m: (name, [], tuple(getattr(m, f) for f in fields), {})


def _modules() -> dict:
    nn = torch.nn
    table = {
        nn.Conv1d: _conv,
        nn.Conv2d: _conv,
        nn.Conv3d: _conv,
        nn.Linear: lambda m: ("linear", ["weight", "bias"], (), {}),
        nn.LayerNorm: lambda m: (
            "layer_norm",
            [],
            (m.normalized_shape,),
            {"weight": "weight", "bias": "bias", "eps": m.eps},
        ),
        nn.GroupNorm: lambda m: (
            "group_norm",
            [],
            (m.num_groups,),
            {"weight": "weight", "bias": "bias", "eps": m.eps},
        ),
        nn.ReLU: lambda m: ("relu", [], (), {}),
        nn.SiLU: lambda m: ("silu", [], (), {}),
        nn.GELU: lambda m: ("gelu", [], (), {"approximate": m.approximate}),
        nn.Sigmoid: lambda m: ("sigmoid", [], (), {}),
        nn.Tanh: lambda m: ("tanh", [], (), {}),
        nn.ReLU6: lambda m: ("relu6", [], (), {}),
        nn.LeakyReLU: lambda m: ("leaky_relu", [], (m.negative_slope,), {}),
        nn.ELU: lambda m: ("elu", [], (m.alpha,), {}),
        nn.Softmax: lambda m: ("softmax", [], (), {"dim": m.dim}),
        nn.LogSoftmax: lambda m: ("log_softmax", [], (), {"dim": m.dim}),
    }
    for nd in (1, 2, 3):
        table[getattr(nn, f"MaxPool{nd}d")] = _pool(
            f"max_pool{nd}d",
            ("kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices"),
        )
        table[getattr(nn, f"AvgPool{nd}d")] = _pool(
            f"avg_pool{nd}d",
            ("kernel_size", "stride", "padding", "ceil_mode", "count_include_pad")
            + (("divisor_override",) if nd > 1 else ()),
        )
    table[nn.AdaptiveAvgPool2d] = _pool("adaptive_avg_pool2d", ("output_size",))
    return table


MODULES = _modules()
_KW_PARAMS = ("weight", "bias")


def lower_modules(gm) -> dict:
    """Rewrite ``call_module`` nodes of types in MODULES (exact types, not subclasses, whose
    forward may differ) as calls of torch.nn.functional's function, parameters read by
    ``get_attr``. Returns {new node: original module target} for the report."""
    graph, lowered = gm.graph, {}
    for node in list(graph.nodes):
        if node.op != "call_module" or len(node.args) != 1 or node.kwargs:
            continue
        mod = gm.get_submodule(node.target)
        spec = MODULES.get(type(mod))
        spec = spec(mod) if spec else None
        if spec is None:
            continue
        name, params, consts, kw = spec
        with graph.inserting_before(node):
            tensors = [
                graph.get_attr(f"{node.target}.{p}") if getattr(mod, p) is not None else None
                for p in params
            ]
            kwargs = {
                k: (
                    v
                    if k not in _KW_PARAMS
                    else (
                        graph.get_attr(f"{node.target}.{v}")
                        if getattr(mod, v) is not None
                        else None
                    )
                )
                for k, v in kw.items()
            }
            new = graph.call_function(_torch_fn(name), (node.args[0], *tensors, *consts), kwargs)
        new.meta = dict(node.meta)
        node.replace_all_uses_with(new)
        graph.erase_node(node)
        lowered[new] = node.target
    return lowered
