"""Generated kernels are keyed by the problem's class, not its sizes.

One fused graph (pointwise; with a broadcast input; ending in a row or a column
reduction; reading through a transpose or a slice) built for many distinct shapes must
generate a few distinct Triton sources -- one per class: which dims broadcast, the
common power-of-two factor of the sizes (``_codegen.Sizes``), whether tiles divide the
extents -- not one per shape (each source is a file, an imported module and a compiled
kernel). Every result is compared exactly with PyTorch (the reductions are max / min,
exact in any order).

Shape counts scale with ``--reliability-budget`` (CI runs 1). Every failure message starts
with a one-line reproduction.
"""

from __future__ import annotations

import hashlib
import random

import pytest
import torch
from _reliability import repro  # noqa: E402

import opendnn.frontend as cudnn
from opendnn.engines.fusion import engine as fusion_engine
from opendnn.enums import DataType, HeurMode, ReductionMode

F = DataType.FLOAT
SHAPES_PER_BUDGET = 12
# sources allowed per graph: the alignment unit (1 or >= 16, 2, 4, 8) times, for the
# reductions, whether the tiles divide the kept and the reduced extents
MAX_SOURCES = {
    "pointwise": 4,
    "broadcast": 4,
    "transpose": 4,
    "slice": 4,
    "row_max": 8,
    "column_min": 8,
}


_repro = repro


@pytest.fixture
def sources(monkeypatch):
    """Digests of the sources the fusion engine hands to ``kernel_from_source``."""
    seen: dict = {}
    real = fusion_engine.kernel_from_source

    def spy(source, name):
        digest = hashlib.sha256(source.encode()).hexdigest()[:16]
        seen.setdefault(digest, name)
        return real(source, name)

    monkeypatch.setattr(fusion_engine, "kernel_from_source", spy)
    return seen


def _case(kind: str, n: int, c: int, w: int):
    """(graph, feeds, output tensor, expected) for one shape of graph ``kind``."""
    g = cudnn.pygraph(intermediate_data_type=F, compute_data_type=F)
    x = torch.randn(n, c, w)
    tx = g.tensor_like(x)
    feeds = {tx: x}
    if kind == "pointwise":
        z = torch.randn(n, c, w)
        tz = g.tensor_like(z)
        feeds[tz] = z
        y, want = g.relu(g.add(g.mul(tx, tx), tz)), torch.relu(x * x + z)
    elif kind == "broadcast":
        b = torch.randn(1, c, 1)
        tb = g.tensor_like(b)
        feeds[tb] = b
        y, want = g.mul(g.add(tx, tb), tb), (x + b) * b
    elif kind == "row_max":
        y, want = (
            g.reduction(g.relu(tx), mode=ReductionMode.MAX),
            torch.relu(x).amax(2, keepdim=True),
        )
        y.set_dim([n, c, 1])
    elif kind == "column_min":
        y, want = g.reduction(g.mul(tx, tx), mode=ReductionMode.MIN), (x * x).amin(0, keepdim=True)
        y.set_dim([1, c, w])
    elif kind == "transpose":
        y, want = g.relu(g.transpose(tx, [0, 2, 1])), torch.relu(x.transpose(1, 2))
    else:  # slice, times a host scalar
        s = g.tensor([1, 1, 1], [1, 1, 1], F, is_pass_by_value=True, name="s")
        feeds[s] = torch.full((1, 1, 1), 2.0)
        y, want = g.mul(g.slice(tx, [(0, n), (1, c), (0, w)]), s), x[:, 1:] * 2.0
    y.set_output(True).set_data_type(F)
    return g, feeds, y, want


@pytest.mark.parametrize("kind", sorted(MAX_SOURCES))
def test_distinct_shapes_share_generated_sources(kind, sources, request):
    budget = request.config.getoption("--reliability-budget")
    count = SHAPES_PER_BUDGET * budget
    r = random.Random(f"kernel-reuse-{kind}")
    shapes: set = set()
    while len(shapes) < count:
        shapes.add((r.randint(2, 9), r.randint(2, 40), r.randint(2, 300)))
    for shape in sorted(shapes):
        g, feeds, y, want = _case(kind, *shape)
        g.build([HeurMode.A])
        plan = g.get_plan_name_at_index(0)
        assert plan.startswith("runtime_fusion"), (
            f"{_repro(request, kind=kind, shape=shape)}\nplan {plan} is not the fusion engine"
        )
        got = torch.empty_strided(y.get_dim(), y.get_stride()).fill_(float("nan"))
        ws = torch.empty(max(g.get_workspace_size(), 1), dtype=torch.uint8)
        g.execute({**feeds, y: got}, ws)
        assert torch.equal(got, want), (
            f"{_repro(request, kind=kind, shape=shape)}\nresult differs from PyTorch: "
            f"max |diff| {(got - want).abs().max().item()}"
        )
    assert len(sources) <= MAX_SOURCES[kind], (
        f"{_repro(request, kind=kind)}\n{len(shapes)} shapes of one {kind} graph generated "
        f"{len(sources)} distinct kernel sources (at most {MAX_SOURCES[kind]} expected): "
        f"{sorted(sources.values())}"
    )
