"""The process's memory plateaus: every in-process cache is bounded (``opendnn.backends``'
``plan_cache_size`` and ``legacy_cache_size``, least recently used dropped first) and
graphs that differ only in sizes share their generated kernels.

- one small plan executed 10,000 times: no growth after the first half;
- 2,000 distinct small shapes, each a pointwise graph through the frontend, a descriptor
  API ``add_tensor`` and ``activation_forward`` and an ``opendnn.torch`` activation (CPU
  tensors): the resident set grows over the second half by less than a bound derived from
  the (small, here) cache sizes, and every cache holds at most its bound.

The resident set is read from /proc/self/statm. Counts scale with ``--reliability-budget``
(CI runs 1: a quarter of the counts; 4 and more: the full counts). Every failure message
starts with a one-line reproduction and gives the MB numbers.
"""

from __future__ import annotations

import os
import sys

import pytest
import torch

import opendnn.frontend as cudnn
import opendnn.legacy as legacy
import opendnn.torch.functional as OF
from opendnn import backends, heuristics, plan
from opendnn.enums import DataType, HeurMode
from opendnn.graph import graph as graph_module
from opendnn.graph import memo
from opendnn.legacy import tensor_ops
from opendnn.torch import _graphs

pytestmark = pytest.mark.skipif(
    not os.path.exists("/proc/self/statm"), reason="reads the resident set from /proc/self/statm"
)

from _reliability import repro  # noqa: E402

F = DataType.FLOAT
EXECUTES = 10_000
SHAPES = 2_000
CACHE_SIZE = 16  # plan_cache_size and legacy_cache_size during these tests
SLACK_MB = 6.0  # allocator noise: arenas, free lists, torch's CPU caching
PER_ENTRY_MB = 0.25  # what one kept entry may hold (graph, plan, launch set-up)


_repro = repro


def _count(request, full: int) -> int:
    """``full`` at a budget of 4 or more, a quarter of it at 1."""
    budget = request.config.getoption("--reliability-budget")
    return full * min(budget, 4) // 4


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.fixture
def small_caches():
    """Cache bounds small enough that the runs below fill them many times over (the
    switches go back to their defaults after the test: conftest)."""
    backends.plan_cache_size = CACHE_SIZE
    backends.legacy_cache_size = CACHE_SIZE
    if hasattr(backends, "kernel_cache_size"):
        backends.kernel_cache_size = CACHE_SIZE


def _bound_mb() -> float:
    """Growth allowed after the warm-up half: every cache is full by then, so only the
    allocator's noise and (at most) one full turnover of the kept entries remain."""
    return SLACK_MB + PER_ENTRY_MB * (backends.plan_cache_size + backends.legacy_cache_size)


def _pointwise(shape):
    """relu(x * x + z) on ``shape``: (graph, tensors, output)."""
    g = cudnn.pygraph(intermediate_data_type=F, compute_data_type=F)
    x, z = torch.randn(shape), torch.randn(shape)
    tx, tz = g.tensor_like(x), g.tensor_like(z)
    y = g.relu(g.add(g.mul(tx, tx), tz))
    y.set_output(True).set_data_type(F)
    return g, {tx: x, tz: z}, y, torch.relu(x * x + z)


def _run(g, feeds, y, out):
    ws = torch.empty(max(g.get_workspace_size(), 1), dtype=torch.uint8)
    g.execute({**feeds, y: out}, ws)


def test_repeated_executes_plateau(small_caches, request):
    n = _count(request, EXECUTES)
    g, feeds, y, want = _pointwise((4, 8, 16))
    g.build([HeurMode.A])
    out = torch.empty_like(want)
    samples = {}
    for i in range(n):
        _run(g, feeds, y, out)
        if i + 1 in (n // 2, n):
            samples[i + 1] = _rss_mb()
    assert torch.equal(out, want)
    half, end = samples[n // 2], samples[n]
    print(f"{n} executes: resident set {half:.1f} MB at half, {end:.1f} MB at the end")
    assert end - half < SLACK_MB, (
        f"{_repro(request, executes=n)}\nresident set grew {end - half:.1f} MB over the "
        f"second {n - n // 2} executes of one plan ({half:.1f} MB -> {end:.1f} MB; bound "
        f"{SLACK_MB:.1f} MB)"
    )


def _shape(i: int) -> tuple:
    """Distinct small shapes: (n, c, w) with every i giving another one."""
    return (1 + i % 3, 2 + (i // 3) % 13, 3 + i // 39)


def _descriptor(dims):
    d = legacy.create_tensor_descriptor()
    legacy.set_tensor_4d_descriptor(d, legacy.TensorFormat.NCHW, legacy.DataType.FLOAT, *dims)
    return d


def test_distinct_shapes_plateau(small_caches, request):
    n = _count(request, SHAPES)
    handle = legacy.create("cpu")
    act = legacy.create_activation_descriptor()
    legacy.set_activation_descriptor(
        act, legacy.ActivationMode.RELU, legacy.NanPropagation.NOT_PROPAGATE_NAN, 0.0
    )
    samples = {}
    for i in range(n):
        shape = _shape(i)
        g, feeds, y, want = _pointwise(shape)
        g.build([HeurMode.A])
        out = torch.full(shape, float("nan"))
        _run(g, feeds, y, out)
        dims = (shape[0], shape[1], 1, shape[2])
        a, c = torch.randn(dims), torch.randn(dims)
        expected = a + c
        legacy.add_tensor(handle, 1.0, _descriptor(dims), a, 1.0, _descriptor(dims), c)
        legacy.activation_forward(handle, act, 1.0, _descriptor(dims), c, 0.0, _descriptor(dims), a)
        t = OF.tanh(c)
        if i % 97 == 0:  # spot checks: a wrong result would make the memory moot
            assert torch.equal(out, want), f"{_repro(request, shapes=n, shape=shape)}"
            assert torch.equal(c, expected) and torch.equal(a, torch.relu(expected)), (
                f"{_repro(request, shapes=n, shape=shape)}\ndescriptor API result wrong"
            )
            assert torch.allclose(t, torch.tanh(c), atol=1e-6), (
                f"{_repro(request, shapes=n, shape=shape)}\nopendnn.torch result wrong"
            )
        if i + 1 in (n // 2, n):
            samples[i + 1] = _rss_mb()
    half, end = samples[n // 2], samples[n]
    bound = _bound_mb()
    print(
        f"{n} shapes: resident set {half:.1f} MB at half, {end:.1f} MB at the end "
        f"(bound on the growth {bound:.1f} MB)"
    )
    assert end - half < bound, (
        f"{_repro(request, shapes=n)}\nresident set grew {end - half:.1f} MB over the "
        f"second {n - n // 2} distinct shapes ({half:.1f} MB -> {end:.1f} MB; bound "
        f"{bound:.1f} MB for cache sizes {CACHE_SIZE})"
    )
    kept = {
        "plan._built": (len(plan._built), CACHE_SIZE),
        "plan._facts": (len(plan._facts), plan.FACTS_PER_PLAN * CACHE_SIZE),
        "heuristics._ranked": (len(heuristics._ranked), heuristics.LISTS_PER_PLAN * CACHE_SIZE),
        "heuristics._lists": (len(heuristics._lists), heuristics.LISTS_PER_PLAN * CACHE_SIZE),
        "graph memo": (len(memo._OUTCOMES), memo.OUTCOMES_PER_PLAN * CACHE_SIZE),
        "graph descriptors": (len(graph_module._DESCS), graph_module.DESCS_PER_PLAN * CACHE_SIZE),
        "legacy tensor_ops": (len(tensor_ops._cache), CACHE_SIZE),
        "torch graphs": (len(_graphs._cache), _graphs.GRAPHS_PER_PLAN * CACHE_SIZE),
    }
    over = {k: v for k, v in kept.items() if v[0] > v[1]}
    assert not over, f"{_repro(request, shapes=n)}\ncaches over their bounds: {over}"


if __name__ == "__main__":  # pragma: no cover -- a quick manual run
    sys.exit(pytest.main([__file__, "-q"]))
