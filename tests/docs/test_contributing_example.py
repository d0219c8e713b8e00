"""CONTRIBUTING.md's worked example (the ``scaled_clamp`` family), executed.

Every fenced ``python`` block of CONTRIBUTING.md whose first line is
``# contributing-example: <part>`` runs, in document order, as one module (``EXAMPLE``,
loaded when this file is collected, with CONTRIBUTING.md's line numbers in tracebacks);
its ``test_*`` functions are collected here as tests, as they would be from
``tests/scaled_clamp/``. The example's engine is registered only inside
``registry.registered`` blocks: the tests below also check that, once those blocks are
closed, the registry, the plan caches and serialized plans hand out nothing of it.
"""

from __future__ import annotations

import pathlib
import re
import sys
import types

import pytest
import torch
from _util import assert_close

import opendnn.frontend as cudnn
from opendnn import heuristics, plan
from opendnn.engines import registry
from opendnn.errors import BadParamError, GraphNotSupportedError, Status
from opendnn.graph import nodes

DOC = pathlib.Path(__file__).resolve().parents[2] / "CONTRIBUTING.md"
MARKER = "# contributing-example:"
PARTS = ["node", "reference", "engine", "test"]
FENCE = re.compile(r"^```python\n(.*?)^```", re.M | re.S)


def example_blocks(text: str) -> list[tuple[str, int, str]]:
    """(part, first line number, code) of each marked block, in document order."""
    out = []
    for m in FENCE.finditer(text):
        code = m.group(1)
        first = code.split("\n", 1)[0].strip()
        if first.startswith(MARKER):
            out.append((first[len(MARKER) :].strip(), text[: m.start(1)].count("\n"), code))
    return out


def load_example() -> types.ModuleType:
    """The example's blocks run as the module ``contributing_example``."""
    blocks = example_blocks(DOC.read_text())
    found = [part for part, _, _ in blocks]
    if found != PARTS:
        raise AssertionError(f"{DOC}: example blocks {found}, expected {PARTS} in that order")
    module = types.ModuleType("contributing_example")
    module.__file__ = str(DOC)
    sys.modules[module.__name__] = module  # dataclasses look annotations up through it
    try:
        for _, line, code in blocks:
            # padded to the block's place: tracebacks name CONTRIBUTING.md's lines
            exec(compile("\n" * line + code, str(DOC), "exec"), module.__dict__)
    finally:
        del sys.modules[module.__name__]
    return module


EXAMPLE = load_example()
ENGINE_ID = EXAMPLE.ScaledClampEngine.id
EXAMPLE_TESTS = {
    name: fn for name, fn in vars(EXAMPLE).items() if name.startswith("test_") and callable(fn)
}
globals().update(EXAMPLE_TESTS)  # CONTRIBUTING.md's tests, collected from this module


@pytest.fixture(scope="module", autouse=True)
def _forget_example_node_type():
    """The example registers its node kind (for deserialize) when it is loaded; the kind
    leaves ``NODE_TYPES`` with this module's tests."""
    yield
    if nodes.NODE_TYPES.get(EXAMPLE.ScaledClamp.kind) is EXAMPLE.ScaledClamp:
        del nodes.NODE_TYPES[EXAMPLE.ScaledClamp.kind]


def cached_engine_ids() -> set:
    """Engine ids in the heuristics' candidate lists and the plans' caches."""
    ids = set()
    for configs, _, _ in heuristics._ranked.values():
        ids |= {c.engine_id for c in configs}
    for specs, _ in heuristics._lists.values():
        ids |= {config.engine_id for _, config, _ in specs}
    for cache in (plan._built, plan._facts):
        ids |= {k[1].engine_id for k in cache.keys() if k[1] is not None}
    return ids


def clamp_graph(shape):
    """A CPU graph Y = scaled_clamp(X) of float32 ``shape`` with the example's attributes."""
    g = cudnn.pygraph(handle=cudnn.create_handle("cpu"))
    stride = torch.empty(shape).stride()
    tx = g.tensor(dim=list(shape), stride=list(stride), data_type=cudnn.data_type.FLOAT)
    ty = EXAMPLE.scaled_clamp(g, tx, **EXAMPLE.ATTRS).set_output(True)
    return g, tx, ty


def test_the_example_defines_its_tests():
    """No quiet pass: the example's blocks were found and define the tests it describes."""
    want = {
        "test_scaled_clamp_matches_reference",
        "test_scaled_clamp_channels_last",
        "test_scaled_clamp_special_values",
        "test_scaled_clamp_declines_non_packed_with_its_reason",
        "test_scaled_clamp_rejects_lower_above_upper",
        "test_reference_matches_pytorch",
        "test_scaled_clamp_gpu",
    }
    assert want <= set(EXAMPLE_TESTS), sorted(EXAMPLE_TESTS)
    assert EXAMPLE.CI and EXAMPLE.GPU and EXAMPLE.BENCH, "a shapes tag is empty"


def test_the_example_leaves_the_registry_as_it_was(rng):
    before, generation = registry.engines(), registry.generation()
    assert before == registry.builtin_engines()
    x = rng.rand((3, 5))
    y = EXAMPLE.run_engine(x, **EXAMPLE.ATTRS)  # builds and runs inside `registered`
    want = torch.from_numpy(EXAMPLE.scaled_clamp_reference(x.double().numpy(), **EXAMPLE.ATTRS))
    assert_close(y, want, torch.float32)
    assert registry.engines() == before
    assert registry.by_id(ENGINE_ID) is None
    assert registry.generation() == generation + 2  # the block opened and closed
    assert ENGINE_ID not in cached_engine_ids()
    # a fresh graph of the same problem: nothing takes it now, and the reasons say why
    g, _, _ = clamp_graph((3, 5))
    with pytest.raises(GraphNotSupportedError) as info:
        g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    assert EXAMPLE.ScaledClampEngine.name not in info.value.reasons
    assert "has no float64 reference yet" in info.value.reasons["reference_f64"]
    with pytest.raises(BadParamError) as info:
        g.create_execution_plan(ENGINE_ID, {})
    assert info.value.status == Status.BAD_PARAM_OUT_OF_BOUND


def test_a_plan_serialized_in_the_block_is_refused_after_it(rng):
    """Inside the block a serialized plan of the example engine deserializes (the node
    kind is registered) and runs; after it, its engine id names no engine."""
    x = rng.rand((4, 6))
    g, tx, ty = clamp_graph((4, 6))
    with registry.registered(EXAMPLE.ScaledClampEngine()):
        g.build([cudnn.heur_mode.A])
        blob = g.serialize()
        again = cudnn.pygraph(handle=cudnn.create_handle("cpu")).deserialize(blob)
        assert again.get_plan_name_at_index(0) == g.get_plan_name_at_index(0)
        y = torch.full((4, 6), float("nan"))
        again.execute({tx.get_uid(): x, ty.get_uid(): y}, None)
    want = torch.from_numpy(EXAMPLE.scaled_clamp_reference(x.double().numpy(), **EXAMPLE.ATTRS))
    assert_close(y, want, torch.float32)
    with pytest.raises(BadParamError, match=f"engine id {ENGINE_ID} is not registered") as info:
        cudnn.pygraph(handle=cudnn.create_handle("cpu")).deserialize(blob)
    assert info.value.status == Status.SERIALIZATION_VERSION_MISMATCH
