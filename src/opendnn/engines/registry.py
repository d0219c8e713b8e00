"""The one ordered engine registry: fastest families first, the reference last.

``engines()`` is the list the heuristics rank, the graph's lifecycle counts and looks
engines up in (``get_engine_count``, ``create_execution_plan``, ``deserialize``) and plans
find their engines in (``by_id``). The built-in engines are ``ENGINE_CLASSES``, made once
on first use. ``registered(*engines)`` is the extension point: it puts more engines ahead
of the built-ins for the duration of a ``with`` block (an engine tried out of tree, a
test's engine), and takes them out again when the block ends.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import sys
import threading

from ..errors import BadParamError, Status
from .base import Engine

# (module under opendnn.engines, class): the order is the registry's order
ENGINE_CLASSES = (
    ("conv.implicit_gemm.engine", "ImplicitGemmEngine"),
    ("conv.implicit_gemm.precomp", "PrecompGemmEngine"),
    ("conv.gemm.engine", "GemmConvEngine"),
    ("conv.gemm.engine", "GemmColumnsConvEngine"),
    ("conv.direct.engine", "DirectConvEngine"),
    ("conv.depthwise.engine", "DepthwiseConvEngine"),
    ("conv.grouped.engine", "GroupedConvEngine"),
    ("conv.winograd.engine", "WinogradNonfusedEngine"),
    ("conv.winograd.engine", "Winograd4x4NonfusedEngine"),
    ("conv.fft.engine", "FftConvEngine"),
    ("conv.fft.engine", "FftTilingConvEngine"),
    ("conv.winograd.fused", "WinogradFusedEngine"),
    ("conv.patchify.engine", "PatchifyConvEngine"),
    ("conv.layout.engine", "ChannelsLastConvEngine"),
    ("conv.implicit_gemm.engine", "ImplicitGemmDgradEngine"),
    ("conv.depthwise.engine", "DepthwiseDgradEngine"),
    ("conv.grouped.engine", "GroupedDgradEngine"),
    ("conv.split_k.dgrad", "SplitKDgradEngine"),
    ("conv.winograd.dgrad", "WinogradNonfusedDgradEngine"),
    ("conv.winograd.dgrad", "WinogradFusedDgradEngine"),
    ("conv.fft.dgrad", "FftDgradEngine"),
    ("conv.fft.dgrad", "FftTilingDgradEngine"),
    ("conv.patchify.engine", "PatchifyDgradEngine"),
    ("conv.gemm.dgrad", "GemmDgradEngine"),
    ("conv.gemm.dgrad", "GemmColumnsDgradEngine"),
    ("conv.gemm.col2im", "Col2imDgradEngine"),
    ("conv.layout.engine", "ChannelsLastDgradEngine"),
    ("conv.implicit_gemm.engine", "ImplicitGemmWgradEngine"),
    ("conv.depthwise.engine", "DepthwiseWgradEngine"),
    ("conv.grouped.engine", "GroupedWgradEngine"),
    ("conv.split_k.wgrad", "SplitKWgradEngine"),
    ("conv.split_k.wgrad_precomp", "PrecompSplitKWgradEngine"),
    ("conv.gemm.wgrad", "GemmWgradEngine"),
    ("conv.fft.wgrad", "FftWgradEngine"),
    ("conv.fft.wgrad", "FftTilingWgradEngine"),
    ("conv.winograd.wgrad", "WinogradNonfusedWgradEngine"),
    ("conv.patchify.engine", "PatchifyWgradEngine"),
    ("conv.layout.engine", "ChannelsLastWgradEngine"),
    ("matmul.engine", "MatmulEngine"),
    ("softmax.engine", "SoftmaxEngine"),
    ("batchnorm.engine", "BatchNormEngine"),
    ("lrn.engine", "LrnEngine"),
    ("dropout.engine", "DropoutEngine"),
    ("pool.engine", "PoolEngine"),  # pooling (resample) forward
    ("pool.engine", "PoolBackwardEngine"),  # pooling (resample) backward
    ("norm.engine", "NormEngine"),
    ("attention.engine", "AttentionEngine"),
    ("moe.engine", "MoeEngine"),
    ("fusion.engine", "FusionEngine"),
    ("reference.engine", "ReferenceEngine"),
)


@functools.lru_cache(maxsize=None)
def builtin_engines() -> tuple:
    """The engines of ``ENGINE_CLASSES``, in its order (the reference last), made once."""
    return tuple(
        getattr(importlib.import_module(f"{__package__}.{mod}"), cls)()
        for mod, cls in ENGINE_CLASSES
    )


_lock = threading.RLock()
_blocks: list = []  # the engines of each open ``registered`` block, oldest first
_state = None  # (engines(), {id: engine}); None until read after a change
_generation = 0


def engines() -> tuple:
    """Every engine, in the order the heuristics consult them: the engines of open
    ``registered`` blocks (the block opened last first), then the built-ins, the
    reference last."""
    state = _state
    if state is None:
        state = _refresh()
    return state[0]


def by_id(engine_id: int):
    """The engine of ``engines()`` with id ``engine_id``, or None."""
    state = _state
    if state is None:
        state = _refresh()
    try:
        return state[1].get(engine_id)
    except TypeError:  # an unhashable id names no engine
        return None


def reference():
    """The float64 reference engine: the built-ins' last, whatever is registered."""
    return builtin_engines()[-1]


def generation() -> int:
    """A number that changes whenever the set of engines does (a ``registered`` block
    opens or closes): a cache that keys what engines decided by it never hands out a
    decision of another engine set."""
    return _generation


def _refresh() -> tuple:
    global _state
    with _lock:
        if _state is None:
            extra = tuple(e for block in reversed(_blocks) for e in block)
            every = extra + builtin_engines()
            _state = (every, {e.id: e for e in every})
        return _state


@contextlib.contextmanager
def registered(*extra: Engine):
    """Run the ``with`` block with the engines ``extra`` ahead of the built-ins.

    Inside the block ``engines()``, ``by_id`` and everything built on them (heuristics
    modes A and B, ``create_execution_plan(engine_id, knobs)``, ``get_engine_count``,
    deserialization) see the extra engines, in the order given, before the built-ins;
    the reference stays last. Blocks nest (the engines of the block opened last come
    first) and may be opened from several threads; the registry is one per process, so every thread
    sees the engines of every open block. Each engine is an ``Engine`` instance whose
    ``id`` (an int >= 0) and ``name`` no other registered engine has: a clash is a
    ``BadParamError`` (BAD_PARAM_DUPLICATED_ENTRIES), raised before anything changes.

    When the block opens and when it closes (normally or by an exception) the library's
    in-process caches are emptied (see ``_forget_decisions``): no candidate list, engine
    fact, built executable or kept graph made with one set of engines is handed out under
    another. What the caller holds is its own: a graph built inside the block keeps its
    plans after it, and an autotune result stored inside names plans that later graphs
    do not have (they are tuned again, with a warning). A plan another thread is
    choosing while a block opens or closes may still be cached under the engines it
    started with: open and close blocks while no other thread builds plans. Yields the
    engines.
    """
    extra = tuple(extra)
    for e in extra:
        if not isinstance(e, Engine):
            what = f"the class {e.__name__}" if isinstance(e, type) else type(e).__name__
            raise BadParamError(
                f"takes Engine instances (subclasses of opendnn.engines.base"
                f".Engine, instantiated), got {what}",
                op="registered",
                status=Status.BAD_PARAM_ATTRIBUTE_TYPE,
            )
        if type(e.id) is not int or e.id < 0 or not isinstance(e.name, str) or not e.name:
            raise BadParamError(
                f"engine {e.name!r:.40} needs an int id >= 0 and a name, has id {e.id!r:.20}",
                op="registered",
                status=Status.BAD_PARAM_ATTRIBUTE_TYPE,
            )
    block = list(extra)  # a fresh object: the block is found by identity
    with _lock:
        ids, names = {}, {}
        for e in engines() + extra:
            for seen, key, what in ((ids, e.id, "id"), (names, e.name, "name")):
                if key in seen:
                    raise BadParamError(
                        f"engine {e.name!r} has the {what} {key!r} of the "
                        f"registered engine {seen[key].name!r}",
                        op="registered",
                        status=Status.BAD_PARAM_DUPLICATED_ENTRIES,
                    )
                seen[key] = e
        _blocks.append(block)
        _changed()
    try:
        yield extra
    finally:
        with _lock:
            for i, b in enumerate(_blocks):
                if b is block:
                    del _blocks[i]
                    break
            _changed()


def _changed() -> None:
    """The set of engines changed (lock held): recompute ``engines()`` on its next read,
    move the generation on and forget what the previous set decided."""
    global _state, _generation
    _state = None
    _generation += 1
    _forget_decisions()


# in-process caches that hold nothing an engine decided: kept when the engines change
# (imported kernel modules are keyed by their source)
KEPT_CACHES = (("opendnn.runtime.launch", "_modules"),)


def _forget_decisions() -> None:
    """Empty the library's in-process caches. Each is a ``runtime.lru.LRU`` that a module
    holds as an attribute (the README's rule: every in-process cache is one): the
    heuristics' candidate lists, the plans' engine facts and built executables, the
    descriptor API's and the PyTorch layer's kept graphs, the validation memo. Only the
    modules imported so far hold any. ``KEPT_CACHES`` are left alone."""
    from ..runtime.lru import LRU

    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith("opendnn."):
            continue
        for attr, value in list(vars(module).items()):
            if isinstance(value, LRU) and (name, attr) not in KEPT_CACHES:
                value.clear()
