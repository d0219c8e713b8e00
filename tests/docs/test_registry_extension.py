"""The library's extension points, which CONTRIBUTING.md's worked example uses:
``engines.registry.registered(*engines)`` (engines ahead of the built-ins for a ``with``
block, nothing of them cached after it), ``Graph.add_operation(node, output_roles)`` and
``graph.nodes.register_node_type(cls)``."""

from __future__ import annotations

import dataclasses
import threading
from typing import ClassVar

import pytest
import torch
from _util import assert_close, expect_error

import opendnn.frontend as cudnn
from opendnn.engines import registry
from opendnn.engines.base import decline
from opendnn.engines.reference.engine import ReferenceEngine
from opendnn.errors import BadParamError, Status
from opendnn.graph import nodes
from opendnn.graph.softmax_nodes import Softmax

FUSION = "runtime_fusion"


class PointwiseF64(ReferenceEngine):
    """The reference's float64 evaluation as an extra engine for one pointwise node,
    ranked ahead of every other (its estimate is 0)."""

    id = 901
    name = "test_pointwise_f64"

    def check_support(self, graph, target):
        if len(graph.nodes) != 1 or graph.nodes[0].kind != "pointwise":
            return decline("takes one pointwise node alone")
        return super().check_support(graph, target)

    def estimate_seconds(self, graph, config, target) -> float:
        return 0.0


def engine(engine_id: int, name: str) -> PointwiseF64:
    """A PointwiseF64 under another id and name."""
    return type(f"Engine{engine_id}", (PointwiseF64,), {"id": engine_id, "name": name})()


def relu_plan(x: torch.Tensor) -> tuple[str, torch.Tensor]:
    """(the plan mode A chooses for relu(x) on a fresh CPU graph, its result)."""
    g = cudnn.pygraph(handle=cudnn.create_handle("cpu"))
    tx = g.tensor(dim=list(x.shape), stride=list(x.stride()), data_type=cudnn.data_type.FLOAT)
    ty = g.relu(tx).set_output(True)
    g.build([cudnn.heur_mode.A])
    y = torch.full_like(x, float("nan"))
    g.execute({tx: x, ty: y}, torch.empty(g.get_workspace_size(), dtype=torch.uint8))
    return g.get_plan_name_at_index(0), y


def test_extra_engines_come_first_innermost_block_first():
    builtin = registry.builtin_engines()
    assert registry.engines() == builtin and registry.reference() is builtin[-1]
    a, b = PointwiseF64(), engine(902, "test_b")
    with registry.registered(a) as got:
        assert got == (a,)
        assert registry.engines() == (a,) + builtin
        assert registry.by_id(901) is a
        with registry.registered(b):
            assert registry.engines()[:2] == (b, a)
            assert registry.engines()[-1] is registry.reference()
        assert registry.engines() == (a,) + builtin and registry.by_id(902) is None
    with registry.registered(a, b):
        assert registry.engines()[:2] == (a, b)
    assert registry.engines() == builtin
    assert registry.by_id(901) is None and registry.by_id([901]) is None


def test_a_block_changes_the_plan_of_a_problem_and_back(rng):
    """The same problem before, inside and after a block: each time the plan of the
    engines registered then (the caches of candidates and built plans are forgotten)."""
    x = rng.rand((4, 9))
    want = torch.relu(x.double())
    before, y = relu_plan(x)
    assert before.startswith(FUSION), before
    assert_close(y, want, torch.float32)
    with registry.registered(PointwiseF64()):
        inside, y = relu_plan(x)
        assert inside == "test_pointwise_f64#901", inside
        assert_close(y, want, torch.float32)
        g = cudnn.pygraph(handle=cudnn.create_handle("cpu"))
        g.relu(g.tensor(dim=[4, 9], stride=[9, 1], data_type=cudnn.data_type.FLOAT))
        assert g.get_engine_count() == 902  # one past the largest id, the registered 901
        g.create_execution_plan(901, {})  # by id, as any engine
        assert g.get_plan_name_at_index(0) == inside
    after, y = relu_plan(x)
    assert after == before
    assert_close(y, want, torch.float32)
    expect_error(
        BadParamError,
        Status.BAD_PARAM_OUT_OF_BOUND,
        lambda: g.create_execution_plan(901, {}),
        "901",
    )


def test_the_registry_is_restored_when_the_block_raises():
    builtin, generation = registry.builtin_engines(), registry.generation()
    with pytest.raises(ZeroDivisionError):
        with registry.registered(PointwiseF64()):
            assert registry.by_id(901) is not None
            1 / 0
    assert registry.engines() == builtin
    assert registry.generation() == generation + 2


@pytest.mark.parametrize(
    "extra, status, words",
    [
        (lambda: [engine(1, "test_clash")], Status.BAD_PARAM_DUPLICATED_ENTRIES, ["id 1"]),
        (lambda: [engine(905, FUSION)], Status.BAD_PARAM_DUPLICATED_ENTRIES, [FUSION]),
        (
            lambda: [PointwiseF64(), engine(901, "other")],
            Status.BAD_PARAM_DUPLICATED_ENTRIES,
            ["901"],
        ),
        (lambda: [PointwiseF64], Status.BAD_PARAM_ATTRIBUTE_TYPE, ["PointwiseF64", "class"]),
        (lambda: [object()], Status.BAD_PARAM_ATTRIBUTE_TYPE, ["object"]),
        (lambda: [engine(-1, "test_negative")], Status.BAD_PARAM_ATTRIBUTE_TYPE, ["-1"]),
        (lambda: [engine("7", "test_string")], Status.BAD_PARAM_ATTRIBUTE_TYPE, ["'7'"]),
    ],
    ids=[
        "builtin-id",
        "builtin-name",
        "same-id-twice",
        "a-class",
        "not-an-engine",
        "negative-id",
        "string-id",
    ],
)
def test_refused_engines_change_nothing(extra, status, words):
    generation = registry.generation()

    def enter():
        with registry.registered(*extra()):
            raise AssertionError("the block ran")

    expect_error(BadParamError, status, enter, "registered", *words)
    assert registry.engines() == registry.builtin_engines()
    assert registry.generation() == generation


def test_every_thread_sees_the_engines_of_every_open_block():
    opened, release, seen = threading.Event(), threading.Event(), {}
    mine, theirs = engine(903, "test_mine"), engine(904, "test_theirs")

    def other_thread():
        with registry.registered(theirs):
            opened.set()
            release.wait(30)
            seen["mine"] = registry.by_id(903)

    t = threading.Thread(target=other_thread)
    t.start()
    try:
        assert opened.wait(30), "the other thread never opened its block"
        with registry.registered(mine):
            assert registry.engines()[:2] == (mine, theirs)
            release.set()
            t.join(30)
            assert not t.is_alive(), "the other thread never closed its block"
        assert seen["mine"] is mine
    finally:
        release.set()
        t.join(30)
    assert registry.engines() == registry.builtin_engines()


def test_add_operation_is_what_the_builders_do(rng):
    """A built-in node added by add_operation makes the graph its method makes."""
    keys = []
    for use_builder in (True, False):
        g = cudnn.pygraph(handle=cudnn.create_handle("cpu"))
        tx = g.tensor(dim=[3, 7], stride=[7, 1], data_type=cudnn.data_type.FLOAT)
        if use_builder:
            y = g.softmax(tx, axis=1, name="sm")
        else:
            [y] = g.add_operation(Softmax(name="sm", inputs={"X": tx}, axis=1), ["Y"])
        assert y.get_name() == "sm::Y"
        y.set_output(True)
        keys.append(g.key())
    assert keys[0] == keys[1]


def test_add_operation_checks_its_arguments():
    g, other = (cudnn.pygraph(handle=cudnn.create_handle("cpu")) for _ in range(2))
    tx = g.tensor(dim=[4], stride=[1], data_type=cudnn.data_type.FLOAT)
    foreign = other.tensor(dim=[4], stride=[1], data_type=cudnn.data_type.FLOAT)
    expect_error(
        BadParamError,
        Status.BAD_PARAM_ATTRIBUTE_TYPE,
        lambda: g.add_operation(object(), ["Y"]),
        "add_operation",
        "object",
    )
    expect_error(
        BadParamError,
        Status.BAD_PARAM_ATTRIBUTE_TYPE,
        lambda: g.add_operation(nodes.Node(inputs={"X": tx}), ["Y"]),
        "Node",
    )
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        lambda: g.add_operation(Softmax(inputs={"X": foreign}), ["Y"]),
        "X belongs to another graph",
    )
    for roles in ("Y", [], ["Y", "Y"], [1]):
        expect_error(
            BadParamError,
            Status.BAD_PARAM_ATTRIBUTE_TYPE,
            lambda: g.add_operation(Softmax(inputs={"X": tx}), roles),
            "output_roles",
        )
    assert g.add_operation(Softmax(inputs={"X": tx}), ["Y"])[0].get_name() == "softmax_0::Y"


@dataclasses.dataclass(eq=False)
class Twice(nodes.Node):
    """A node kind of this test: Y = 2 X."""

    kind: ClassVar[str] = "test_twice"


def test_register_node_type_rules():
    assert "test_twice" not in nodes.NODE_TYPES
    try:
        assert nodes.register_node_type(Twice) is Twice
        assert nodes.register_node_type(Twice) is Twice  # again: the same class
        same = type("Twice", (nodes.Node,), {"kind": "test_twice", "__module__": __name__})
        assert nodes.register_node_type(same) is same  # the same definition run again
        other = type("Other", (nodes.Node,), {"kind": "test_twice"})
        expect_error(
            BadParamError,
            Status.BAD_PARAM_DUPLICATED_ENTRIES,
            lambda: nodes.register_node_type(other),
            "test_twice",
        )
        expect_error(
            BadParamError,
            Status.BAD_PARAM_DUPLICATED_ENTRIES,
            lambda: nodes.register_node_type(type("P", (nodes.Node,), {"kind": "pointwise"})),
            "pointwise",
            "Pointwise",
        )
        for bad in (nodes.Node, object, Twice()):
            expect_error(
                BadParamError,
                Status.BAD_PARAM_ATTRIBUTE_TYPE,
                lambda: nodes.register_node_type(bad),
                "register_node_type",
            )
    finally:
        nodes.NODE_TYPES.pop("test_twice", None)
