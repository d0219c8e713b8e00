"""``opendnn.torch.enable()``: route ``torch.nn.functional`` calls to opendnn, with PyTorch's
semantics and PyTorch's own functions as the fallback.

Use it as a context manager or as a global switch::

    with opendnn.torch.enable():          # routed inside, previous state restored after
        y = model(x)

    opendnn.torch.enable()                # on until ...
    y = model(x)
    opendnn.torch.disable()               # ... off (also usable as ``with disable():``)

How: a ``torch.overrides.TorchFunctionMode`` sees every torch function call made from
Python. Calls of the functions in ``ROUTED`` -- the ``torch.nn.functional`` functions that
``opendnn.torch.functional`` (OF) implements, plus the aliases PyTorch's own modules and
users reach them by (``torch.conv2d`` is ``F.conv2d``; ``nn.Sigmoid`` calls
``torch.sigmoid``; ``F.sigmoid`` calls ``Tensor.sigmoid``; ``x @ w`` is ``Tensor.matmul``;
``torch.softmax(x, dim, dtype)``) -- go to OF; everything else goes to PyTorch untouched.
Routed: F.conv1d/2d/3d, linear, batch_norm, layer_norm, group_norm, instance_norm,
rms_norm, max_pool1d/2d/3d, avg_pool1d/2d/3d, adaptive_avg_pool2d, relu, relu6, hardtanh,
elu, leaky_relu, gelu, silu, softplus, softmax, log_softmax, dropout,
scaled_dot_product_attention (and mish, hardswish, hardsigmoid, adaptive_avg_pool1d/3d
when OF has them); torch.* and Tensor.* relu, sigmoid, tanh, matmul, softmax,
log_softmax. Not routed: in-place aliases (``torch.relu_``), ``F.pad``, transposed
convolutions and everything else OF does not implement.
Only plain tensors (``torch.Tensor`` / ``nn.Parameter``, not subclasses such as DTensor
or FakeTensor) of a floating type on CPU or CUDA are routed, never calls with ``out=``,
and nothing while ``torch.compile`` traces (its own backend maps graphs to opendnn).

Fallback policy (shared with the drop-in modules, ``attempt``): the routed call runs OF;
if OF raises ``opendnn.errors.GraphNotSupportedError`` (no engine takes the problem, or an
argument opendnn does not implement), the original PyTorch function runs instead and the
reason is logged once per (function, reason) at ``OPENDNN_LOG=info``; ``fallbacks()``
counts every fallback. A declined call is remembered by its arguments' shapes, strides,
dtypes, devices and values (plus grad mode, autocast and the ``opendnn.backends``
switches), so repeating it goes straight to PyTorch without asking the engines again.
Other errors (bad arguments) propagate, as PyTorch's would. A fallback can only happen in
the forward call: once OF ran, its backward is OF's.

Re-entrancy: PyTorch pops a mode while its ``__torch_function__`` runs, and a thread-local
flag keeps every torch call made inside opendnn (OF's own allocations and views, and a
fallback) from being routed again, so a routed call reaches OF exactly once.

Threads: PyTorch keeps the torch-function mode stack per thread, so the switch is per
thread: ``enable()`` in one thread routes that thread's calls only (not DataLoader
workers', not other threads'). The decline memory and fallback counts are shared by all
threads (guarded by a lock). On CPU the autograd engine runs backward in the calling
thread, so routed functions that OF's backward calls from Python go to OF as well.
Cost: with the switch on, every torch call from Python pays one Python-level mode call.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode, _get_current_function_mode_stack

from .. import backends, log
from ..errors import GraphNotSupportedError
from . import functional as OF

__all__ = [
    "enable",
    "disable",
    "is_enabled",
    "attempt",
    "note_fallback",
    "fallbacks",
    "clear_fallbacks",
    "ROUTED",
]

DECLINED_PER_CALLER = 1024  # remembered declined calls per caller (then forgotten)
_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_PLAIN_TYPES = (torch.Tensor, torch.nn.Parameter)
_lock = threading.Lock()
_tls = threading.local()  # .inside (bool), .mode (this thread's _Router or None)
_declined: dict[str, dict] = {}  # caller -> {call key: reason}
_counts: collections.Counter = collections.Counter()  # (caller, reason) -> fallbacks


# ---------------------------------------------------------------- fallback (shared)


def attempt(
    caller: str, op: Callable, args: tuple, kwargs: dict | None, fallback: Callable[[], Any]
) -> Any:
    """``op(*args, **kwargs)``, or ``fallback()`` when it raises GraphNotSupportedError
    (or declined the same call before). ``caller`` names who asks ("Conv2d",
    "torch.nn.functional.conv2d") in the log and in ``fallbacks()``. Torch calls made
    inside ``op`` and ``fallback`` are never routed by ``enable()``."""
    kwargs = kwargs or {}
    key = None
    table = _declined.get(caller)
    if table:
        key = _call_key(args, kwargs)
        reason = table.get(key) if key is not None else None
        if reason is not None:
            note_fallback(caller, reason)
            return _inside(fallback)
    outer = getattr(_tls, "inside", False)
    _tls.inside = True
    try:
        try:
            return op(*args, **kwargs)
        except GraphNotSupportedError as err:
            reason = str(err)
        _remember(caller, key if key is not None else _call_key(args, kwargs), reason)
        note_fallback(caller, reason)
        return fallback()  # outside the except: its errors do not chain to ours
    finally:
        _tls.inside = outer


def note_fallback(caller: str, reason: str) -> None:
    """Count one fallback to PyTorch; log it the first time ``(caller, reason)`` is seen."""
    with _lock:
        first = _counts[(caller, reason)] == 0
        _counts[(caller, reason)] += 1
    if first:
        log.info(f"opendnn.torch: {caller} falls back to PyTorch: {reason}")


def fallbacks() -> dict:
    """{(caller, reason): how many calls fell back to PyTorch} since the last clear."""
    with _lock:
        return dict(_counts)


def clear_fallbacks() -> None:
    """Forget the fallback counts and the declined calls (after changing engines)."""
    with _lock:
        _counts.clear()
        _declined.clear()


def _inside(fn: Callable[[], Any]) -> Any:
    outer = getattr(_tls, "inside", False)
    _tls.inside = True
    try:
        return fn()
    finally:
        _tls.inside = outer


def _remember(caller: str, key, reason: str) -> None:
    if key is None:
        return
    with _lock:
        table = _declined.setdefault(caller, {})
        if len(table) >= DECLINED_PER_CALLER:
            table.clear()
        table[key] = reason


def _freeze(v):
    if isinstance(v, torch.Tensor):
        return (
            "tensor",
            tuple(v.shape),
            v.stride(),
            v.dtype,
            v.device,
            v.requires_grad,
            v.data_ptr() % 16,
        )
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(x) for x in v)
    return v


def _call_key(args: tuple, kwargs: dict):
    """What decides whether opendnn takes a call; None if it cannot be keyed (unhashable
    arguments, tensors without storage)."""
    try:
        ambient = (
            torch.is_grad_enabled(),
            backends.deterministic,
            backends.allow_tf32,
            tuple(
                (torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in ("cuda", "cpu")
            ),
        )
        key = (_freeze(args), tuple(sorted((k, _freeze(v)) for k, v in kwargs.items())), ambient)
        hash(key)
        return key
    except (TypeError, RuntimeError, NotImplementedError):
        return None


# ---------------------------------------------------------------- routes


def _softmax_args(input, dim, dtype=None):
    """torch.softmax / Tensor.softmax (and log_softmax): (input, dim, dtype) -> OF's."""
    if not isinstance(dim, int):  # named dimensions stay with PyTorch
        raise TypeError("named dim")
    return (input, dim), {"dtype": dtype}


@dataclasses.dataclass(frozen=True)
class _Route:
    """A routed torch function: ``name`` in OF, ``adapt`` maps its arguments to OF's (None:
    same signature)."""

    caller: str
    name: str
    adapt: Callable | None = None

    def __call__(self, func, args, kwargs):
        if self.adapt is None:
            a, k = args, kwargs
        else:
            try:
                a, k = self.adapt(*args, **kwargs)
            except TypeError:  # PyTorch raises its own error, or serves it
                return func(*args, **kwargs)
        return attempt(self.caller, getattr(OF, self.name), a, k, lambda: func(*args, **kwargs))


_F_NAMES = (
    "conv1d conv2d conv3d linear batch_norm layer_norm group_norm instance_norm rms_norm "
    "max_pool1d max_pool2d max_pool3d avg_pool1d avg_pool2d avg_pool3d adaptive_avg_pool2d "
    "relu relu6 hardtanh elu leaky_relu gelu silu softplus softmax log_softmax dropout "
    "scaled_dot_product_attention"
).split()


# Routed too when the functional layer has them (same signatures as F's).
_F_OPTIONAL = "mish hardswish hardsigmoid adaptive_avg_pool1d adaptive_avg_pool3d".split()


def _routes() -> dict:
    names = _F_NAMES + [n for n in _F_OPTIONAL if hasattr(OF, n)]
    r = {getattr(F, n): _Route(f"torch.nn.functional.{n}", n) for n in names}
    for owner, prefix in ((torch, "torch"), (torch.Tensor, "torch.Tensor")):
        for n in ("relu", "sigmoid", "tanh", "matmul"):
            r[getattr(owner, n)] = _Route(f"{prefix}.{n}", n)
        for n in ("softmax", "log_softmax"):
            r[getattr(owner, n)] = _Route(f"{prefix}.{n}", n, _softmax_args)
    return r


ROUTED: dict = _routes()  # torch function object -> _Route


def _routable(types, args, kwargs) -> bool:
    if "out" in kwargs or any(t not in _PLAIN_TYPES for t in types):
        return False
    x = args[0] if args else next(iter(kwargs.values()), None)
    if type(x) not in _PLAIN_TYPES or x.dtype not in _FLOATS:
        return False
    return x.device.type in ("cpu", "cuda") and not torch.compiler.is_compiling()


class _Router(TorchFunctionMode):
    """The mode ``enable()`` pushes (one per thread); ``on`` False lets every call pass."""

    def __init__(self):
        super().__init__()
        self.on = True

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        try:
            route = ROUTED.get(func)
        except TypeError:  # an unhashable callable: never routed
            route = None
        if (
            route is None
            or not self.on
            or getattr(_tls, "inside", False)
            or not _routable(types, args, kwargs)
        ):
            return func(*args, **kwargs)
        return route(func, args, kwargs)


# ---------------------------------------------------------------- the switch


class _Switch:
    """What ``enable()`` and ``disable()`` return. The switch is already flipped when it
    is returned; used as a context manager, leaving it restores the state before."""

    def __init__(self, before: bool):
        self._before = before

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _set(self._before)
        return False


def _mode_in_stack(mode) -> bool:
    return any(m is mode for m in _get_current_function_mode_stack())


def is_enabled() -> bool:
    """Whether this thread's torch.nn.functional calls are routed to opendnn."""
    mode = getattr(_tls, "mode", None)
    return mode is not None and mode.on and _mode_in_stack(mode)


def enable() -> _Switch:
    """Route this thread's ``torch.nn.functional`` calls to opendnn (see the module
    docstring). Returns a context manager restoring the previous state on exit; nested
    uses are fine."""
    before = is_enabled()
    _set(True)
    return _Switch(before)


def disable() -> _Switch:
    """Stop routing in this thread. Returns a context manager restoring the previous state
    on exit (``with disable(): ...`` inside ``enable()`` runs plain PyTorch)."""
    before = is_enabled()
    _set(False)
    return _Switch(before)


def _set(on: bool) -> None:
    mode = getattr(_tls, "mode", None)
    if mode is not None and not _mode_in_stack(mode):
        mode = _tls.mode = None  # someone emptied the stack under us
    if on:
        if mode is None:
            mode = _tls.mode = _Router()
            mode.__enter__()
        mode.on = True
    elif mode is not None:
        if _get_current_function_mode_stack()[-1] is mode:
            mode.__exit__(None, None, None)
            _tls.mode = None
        else:  # a mode entered after ours is still active:
            mode.on = False  # leave ours in place, switched off
