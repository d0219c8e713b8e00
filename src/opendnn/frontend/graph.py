"""cudnn-frontend's graph helpers: the ``graph`` context manager, the ``jit`` decorator
and ``graph_cache``.

    @cudnn.jit(heur_modes=[cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    def make(handle, x, w):
        with cudnn.graph(handle, io_data_type=cudnn.data_type.HALF) as (g, _):
            X, W = g.tensor_like(x), g.tensor_like(w)
            Y = g.conv_fprop(X, W, padding=[1, 1])
            Y.set_output(True)
            return g, [X, W, Y]

    g, (x_uid, w_uid, y_uid) = make(handle, x, w)   # built; uids for the variant pack

``graph`` yields ``(pygraph, [])``; ``jit`` builds the graph the decorated function
returns (unless it already has plans) with the given heuristic modes and turns its
tensors into uids; ``graph_cache(key_fn)`` memoizes a graph-making function by a key of
its arguments (at most ``maxsize`` entries, the oldest dropped first).
"""

from __future__ import annotations

import contextlib
import functools

from ..enums import DataType, HeurMode
from ..graph.graph import Graph


def graph_cache(key_fn, maxsize: int = 256):
    """Memoize the decorated function by ``key_fn(*args, **kwargs)``; the oldest entry
    goes when ``maxsize`` are held."""

    def decorator(func):
        cache: dict = {}

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            key = key_fn(*args, **kwargs)
            if key in cache:
                return cache[key]
            result = func(*args, **kwargs)
            if len(cache) >= maxsize:
                cache.pop(next(iter(cache)))
            cache[key] = result
            return result

        return wrapper

    return decorator


def jit(heur_modes=HeurMode.A, **kwargs):
    """Decorate a function returning ``(graph, [tensors])``: the wrapper builds the graph
    with ``heur_modes`` when it has no plan yet and returns ``(graph, [uids])``. Other
    keywords are accepted and unused, as in cudnn-frontend."""
    modes = list(heur_modes) if isinstance(heur_modes, (list, tuple)) else [heur_modes]

    def decorator(func):
        @functools.wraps(func)
        def wrapper(*args, **kw):
            g, tensors = func(*args, **kw)
            if g.get_execution_plan_count() <= 0:
                g.build(modes)
            return g, [t.get_uid() for t in tensors]

        return wrapper

    return decorator


@contextlib.contextmanager
def graph(
    handle=None,
    name: str = "cudnn_graph",
    io_data_type=DataType.HALF,
    intermediate_data_type=DataType.FLOAT,
    compute_data_type=DataType.FLOAT,
):
    """A ``pygraph`` with these types on ``handle``, yielded as ``(graph, [])``."""
    yield (
        Graph(
            name=name,
            io_data_type=io_data_type,
            intermediate_data_type=intermediate_data_type,
            compute_data_type=compute_data_type,
            handle=handle,
        ),
        [],
    )
