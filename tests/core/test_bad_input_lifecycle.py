"""Bad input to the plan half of a graph's lifecycle: execute / autotune arguments, plan
indices, filters, create_execution_plan, deserialize, and errors from shared executables.
One test per rule; each asserts the type, the Status and that the message names the
operation, the tensor (where there is one) and the rule."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from _util import FUSION_ID, REFERENCE_NAME, expect_error

import opendnn.frontend as cudnn
from opendnn.enums import DataType, HeurMode, NormForwardPhase, ReductionMode
from opendnn.errors import BadParamError, Status

F = DataType.FLOAT


def _exp_graph(name="g"):
    """y = exp(x), x [2, 3], built with heuristics A."""
    g = cudnn.pygraph(name=name)
    x = g.tensor([2, 3], [3, 1], F, name="x")
    y = g.exp(x, name="e").set_output(True).set_name("y")
    g.build([HeurMode.A])
    return g, x, y


def _pack(x, y):
    return {x: torch.rand(2, 3) + 0.1, y: torch.full((2, 3), float("nan"))}


def _mul_graph(name="g_pw"):
    """y = x * s + 2.0 with x [2, 3, 4], s [1, 3, 1] (a Python-number scalar inside)."""
    g = cudnn.pygraph(name=name)
    x = g.tensor([2, 3, 4], [12, 4, 1], F, name="x_in")
    s = g.tensor([1, 3, 1], [3, 1, 1], F, name="s_in")
    m = g.mul(x, s, name="mul_n")
    m.set_name("m_mid")
    y = g.add(m, 2.0, name="add_n")
    y.set_output(True).set_name("y_out")
    g.build([HeurMode.A])
    return g, x, s, y


def _split_reduction():
    """A row sum with a split plan that needs a workspace."""
    g = cudnn.pygraph(name="g_ws")
    x = g.tensor([3, 64], [64, 1], F, name="x_in")
    y = g.reduction(x, ReductionMode.ADD, name="sum_n").set_output(True).set_name("y_out")
    y.set_dim([3, 1])
    g.validate()
    g.create_execution_plan(FUSION_ID, {"SPLIT": 4, "BLOCK_RED": 8, "BLOCK_KEPT": 4})
    return g, {x: torch.rand(3, 64), y: torch.empty(3, 1)}


# ---- argument types of execute, handle and autotune ------------------------------------
@pytest.mark.parametrize("pack", ["pairs", "None", "str"])
def test_execute_needs_a_mapping_as_variant_pack(pack):
    g, x, y = _exp_graph()
    bad = {"pairs": [(x, torch.rand(2, 3)), (y, torch.empty(2, 3))], "None": None, "str": "x"}[pack]
    expect_error(
        BadParamError,
        Status.BAD_PARAM_ATTRIBUTE_TYPE,
        lambda: g.execute(bad, None),
        "execute 'g'",
        "variant pack must be a mapping",
    )
    expect_error(
        BadParamError,
        Status.BAD_PARAM_ATTRIBUTE_TYPE,
        lambda: g.execute_plan_at_index(bad, None, 0),
        "execute_plan_at_index 'g'",
        "variant pack must be a mapping",
    )


@pytest.mark.parametrize("handle", ["cpu", 3, object()])
def test_execute_needs_a_handle_object(handle):
    g, x, y = _exp_graph()
    expect_error(
        BadParamError,
        Status.BAD_PARAM_ATTRIBUTE_TYPE,
        lambda: g.execute(_pack(x, y), None, handle=handle),
        "execute 'g'",
        "handle must be an opendnn Handle",
    )


def test_execute_refuses_a_meta_handle():
    g, x, y = _exp_graph()
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        lambda: g.execute(_pack(x, y), None, handle=cudnn.create_handle("meta")),
        "execute 'g'",
        "meta device",
    )


def test_execute_with_a_cpu_handle_still_runs():
    g, x, y = _exp_graph()
    pack = _pack(x, y)
    g.execute(pack, None, handle=cudnn.create_handle("cpu"))
    assert torch.allclose(pack[y], pack[x].exp())


def test_autotune_checks_pack_handle_and_workspace_types():
    g, x, y = _exp_graph()
    expect_error(
        BadParamError,
        Status.BAD_PARAM_ATTRIBUTE_TYPE,
        lambda: g.autotune(None, None),
        "autotune 'g'",
        "variant pack must be a mapping",
    )
    expect_error(
        BadParamError,
        Status.BAD_PARAM_ATTRIBUTE_TYPE,
        lambda: g.autotune(_pack(x, y), None, "cpu"),
        "autotune 'g'",
        "handle",
    )
    expect_error(
        BadParamError,
        Status.BAD_PARAM_ATTRIBUTE_TYPE,
        lambda: g.autotune(_pack(x, y), 4096),
        "autotune 'g'",
        "workspace must be a tensor",
    )


def test_autotune_before_any_plan_is_not_finalized():
    g = cudnn.pygraph(name="nb")
    x = g.tensor([2, 3], [3, 1], F, name="x")
    y = g.exp(x, name="e").set_output(True).set_name("y")
    g.validate()
    expect_error(
        BadParamError,
        Status.BAD_PARAM_NOT_FINALIZED,
        lambda: g.autotune(_pack(x, y), None),
        "autotune 'nb'",
        "no candidate plans",
    )


# ---- plan indices, filters, knobs --------------------------------------------------------
@pytest.mark.parametrize("index", [None, "0", 0.5, True])
@pytest.mark.parametrize(
    "fn",
    [
        "build_plan_at_index",
        "get_plan_name_at_index",
        "get_workspace_size_plan_at_index",
        "get_behavior_notes_for_plan_at_index",
        "execute_plan_at_index",
    ],
)
def test_plan_index_must_be_an_integer(fn, index):
    g, x, y = _exp_graph()
    call = (
        (lambda: g.execute_plan_at_index(_pack(x, y), None, index))
        if fn == "execute_plan_at_index"
        else (lambda: getattr(g, fn)(index))
    )
    expect_error(
        BadParamError,
        Status.BAD_PARAM_ATTRIBUTE_TYPE,
        call,
        "graph 'g'",
        "plan index must be an integer",
    )


def test_numpy_integer_plan_index_still_works():
    g, _, _ = _exp_graph()
    assert g.get_plan_name_at_index(np.int64(0)) == g.get_plan_name_at_index(0)


@pytest.mark.parametrize(
    "call, status, rule",
    [
        (lambda g: g.deselect_engines(None), Status.BAD_PARAM_ATTRIBUTE_TYPE, "engine names"),
        (lambda g: g.deselect_engines([1]), Status.BAD_PARAM_ATTRIBUTE_TYPE, "must be strings"),
        (
            lambda g: g.deselect_workspace_greater_than("x"),
            Status.BAD_PARAM_ATTRIBUTE_TYPE,
            "workspace limit must be an integer",
        ),
        (
            lambda g: g.deselect_workspace_greater_than(-1),
            Status.BAD_PARAM_OUT_OF_BOUND,
            "workspace limit -1 is negative",
        ),
        (
            lambda g: g.select_numeric_notes([99]),
            Status.BAD_PARAM_ATTRIBUTE_TYPE,
            "99 is not a NumericalNote",
        ),
        (
            lambda g: g.deselect_behavior_notes(["FOO"]),
            Status.BAD_PARAM_ATTRIBUTE_TYPE,
            "'FOO' is not a BehaviorNote",
        ),
        (
            lambda g: g.select_behavior_notes(None),
            Status.BAD_PARAM_ATTRIBUTE_TYPE,
            "notes must be a list",
        ),
    ],
)
def test_a_bad_filter_is_refused_before_it_is_kept(call, status, rule):
    g, x, y = _exp_graph()
    e = expect_error(BadParamError, status, lambda: call(g), rule)
    assert e.op and e.op in str(e) and "select" in e.op
    g.build([HeurMode.A])  # the refused filter did not stick to the graph
    pack = _pack(x, y)
    g.execute(pack, None)
    assert torch.allclose(pack[y], pack[x].exp())


@pytest.mark.parametrize(
    "call, rule",
    [
        (lambda g: g.create_execution_plans(None), "None is not a heur_mode"),
        (lambda g: g.create_execution_plans(["A"]), "'A' is not a heur_mode"),
        (lambda g: g.create_execution_plans([HeurMode.A, 7]), "7 is not a heur_mode"),
        (lambda g: g.build_plans(5), "5 is not a build_plan_policy"),
        (lambda g: g.build_plans("ALL"), "'ALL' is not a build_plan_policy"),
    ],
)
def test_heuristic_modes_and_policies_are_typed(call, rule):
    g, _, _ = _exp_graph()
    e = expect_error(BadParamError, Status.BAD_PARAM_ATTRIBUTE_TYPE, lambda: call(g), rule)
    assert e.op in ("create_execution_plans", "build_plans")


@pytest.mark.parametrize("knobs", [{1: 2}, "BLOCK", [("BLOCK", 1024)]])
def test_create_execution_plan_needs_knobs_by_name(knobs):
    g, _, _ = _exp_graph()
    expect_error(
        BadParamError,
        Status.BAD_PARAM_ATTRIBUTE_TYPE,
        lambda: g.create_execution_plan(FUSION_ID, knobs),
        "create_execution_plan",
        "knobs must map knob names",
    )


@pytest.mark.parametrize("engine_id", [True, "1", None, 1.0])
def test_engine_id_must_be_an_integer(engine_id):
    g, _, _ = _exp_graph()
    expect_error(
        BadParamError,
        Status.BAD_PARAM_OUT_OF_BOUND,
        lambda: g.create_execution_plan(engine_id, {}),
        "create_execution_plan",
        "no engine with id",
    )
    expect_error(
        BadParamError,
        Status.BAD_PARAM_OUT_OF_BOUND,
        lambda: g.get_knobs_for_engine(engine_id),
        "get_knobs_for_engine",
        "no engine with id",
    )


# ---- malformed documents -----------------------------------------------------------------
def _tamper(kind: str, doc: dict) -> bytes:
    gj = doc["graph"]
    if kind == "json_list":
        return b"[1]"
    if kind == "json_null":
        return b"null"
    if kind == "no_types":
        del doc["types"]
    elif kind == "bad_types":
        doc["types"] = ["FOO", "FLOAT", "FLOAT"]
    elif kind == "tensor_bad_dtype":
        gj["tensors"][0]["data_type"] = "FOO"
    elif kind == "node_unknown_kind":
        gj["nodes"][0]["kind"] = "teleport"
    elif kind == "node_bad_attr":
        gj["nodes"][0]["attrs"]["bogus"] = 1
    elif kind == "uid_dangling":
        gj["nodes"][0]["inputs"]["IN_0"] = 4242
    elif kind == "uid_twice":
        gj["tensors"][1]["uid"] = gj["tensors"][0]["uid"]
    elif kind == "scalars_key":
        doc["scalars"] = {"abc": 1.0}
    elif kind == "scalars_value":
        doc["scalars"] = {"3": "x"}
    elif kind == "plans_not_list":
        doc["plans"] = 5
    elif kind == "plan_bad_engine":
        doc["plans"][0]["stages"][0]["config"]["engine_id"] = 999
    elif kind == "plan_bad_stage":
        doc["plans"][0]["stages"][0]["node_index"] = [7]
    elif kind == "plan_missing_node":
        doc["plans"][0]["stages"][0]["node_index"] = [0]
    elif kind == "graph_not_dict":
        doc["graph"] = [1]
    return json.dumps(doc).encode()


MALFORMED = {
    "json_list": "a list, not an object",
    "json_null": "null, not an object",
    "no_types": "key 'types'",
    "bad_types": "'FOO' is not a data type name",
    "tensor_bad_dtype": "'FOO' is not a data type name",
    "node_unknown_kind": "unknown node kind 'teleport'",
    "node_bad_attr": "bogus",
    "uid_dangling": "uid 4242, not a tensor of the graph",
    "uid_twice": "two tensors have uid",
    "scalars_key": "'abc' is not a uid",
    "scalars_value": "'x', not a number",
    "plans_not_list": "a number, not a list",
    "plan_bad_engine": "engine id 999 is not registered",
    "plan_bad_stage": "node index 7 out of range",
    "plan_missing_node": "take 1 of the graph's 2",
    "graph_not_dict": "a list, not an object",
}


@pytest.mark.parametrize("kind", sorted(MALFORMED))
def test_deserialize_names_what_is_malformed_and_leaves_the_graph(kind):
    blob = _tamper(kind, json.loads(_mul_graph()[0].serialize()))
    g, x, y = _exp_graph("victim")
    before = (g._nodes, g._tensors, g._op_graph, g._plans, g._selected)
    expect_error(
        BadParamError,
        Status.SERIALIZATION_VERSION_MISMATCH,
        lambda: g.deserialize(blob),
        "deserialize",
        MALFORMED[kind],
    )
    assert (g._nodes, g._tensors, g._op_graph, g._plans, g._selected) == before
    pack = _pack(x, y)
    g.execute(pack, None)  # the graph still runs as before
    assert torch.allclose(pack[y], pack[x].exp())


def test_deserialize_a_negative_dimension_names_the_tensor():
    doc = json.loads(_mul_graph()[0].serialize())
    doc["graph"]["tensors"][0]["dim"][0] = -2
    name = doc["graph"]["tensors"][0]["name"]
    expect_error(
        BadParamError,
        Status.BAD_PARAM_OUT_OF_BOUND,
        lambda: cudnn.pygraph().deserialize(json.dumps(doc).encode()),
        "deserialize",
        name,
        "negative dimension",
    )


# ---- a deserialized graph is validated as build validates one ----------------------------
def test_deserialize_refuses_a_cycle():
    g = cudnn.pygraph(name="cy")
    a = g.tensor([2, 3], [3, 1], F, name="a")
    e = g.exp(a, name="exp")
    g.neg(e, name="neg").set_output(True).set_name("out")
    g.build([HeurMode.A])
    doc = json.loads(g.serialize())
    nodes = {n["name"]: n for n in doc["graph"]["nodes"]}
    nodes["exp"]["inputs"]["IN_0"] = nodes["neg"]["outputs"]["OUT_0"]
    g2 = cudnn.pygraph(name="g2")
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        lambda: g2.deserialize(json.dumps(doc).encode()),
        "deserialize",
        "has a cycle",
        "pointwise EXP 'exp'",
    )
    assert g2._op_graph is None and g2._nodes == []


def test_deserialize_refuses_dims_that_do_not_broadcast():
    doc = json.loads(_mul_graph()[0].serialize())
    for t in doc["graph"]["tensors"]:
        if t["name"] == "s_in":
            t["dim"], t["stride"] = [1, 5, 1], [5, 1, 1]
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        lambda: cudnn.pygraph().deserialize(json.dumps(doc).encode()),
        "deserialize",
        "pointwise MUL 'mul_n'",
        "s_in",
        "do not broadcast",
    )


def test_deserialize_refuses_partition_stages_out_of_dataflow_order(rng):
    x = rng.rand((5, 9), high=3.0)
    g = cudnn.pygraph(name="softmax")
    X = g.tensor_like(x, name="x")
    m = g.reduction(X, ReductionMode.MAX, name="rowmax")
    m.set_dim([5, 1])
    e = g.exp(g.sub(X, m))
    s = g.reduction(e, ReductionMode.ADD, name="rowsum")
    s.set_dim([5, 1])
    g.div(e, s).set_output(True).set_name("y")
    g.build([HeurMode.A])
    doc = json.loads(g.serialize())
    stages = doc["plans"][0]["stages"]
    assert len(stages) > 1
    stages.reverse()
    expect_error(
        BadParamError,
        Status.SERIALIZATION_VERSION_MISMATCH,
        lambda: cudnn.pygraph().deserialize(json.dumps(doc).encode()),
        "deserialize",
        "plan 0",
        "runs in a stage before the one that produces its input",
    )


def test_deserialized_graph_keeps_its_scalars_and_runs():
    g, x, s, y = _mul_graph()
    g2 = cudnn.pygraph().deserialize(g.serialize())
    xb, sb = torch.rand(2, 3, 4), torch.rand(1, 3, 1)
    out = torch.full((2, 3, 4), float("nan"))
    g2.execute({x.get_uid(): xb, s.get_uid(): sb, y.get_uid(): out}, None)
    assert torch.allclose(out, xb * sb + 2.0)
    assert g2.key() == g.key()


# ---- an executable's error names the plan's own node and tensor --------------------------
def _batchnorm(name: str, eps: float):
    g = cudnn.pygraph(name="g_" + name)
    x = g.tensor([2, 3, 2, 2], [12, 4, 2, 1], F, name="x_in")
    st = [g.tensor([1, 3, 1, 1], [3, 1, 1, 1], F, name=f"st{i}_in") for i in range(4)]
    e = g.tensor([1, 1, 1, 1], [1, 1, 1, 1], F, is_pass_by_value=True, name=name + "_eps")
    m = g.tensor([1, 1, 1, 1], [1, 1, 1, 1], F, is_pass_by_value=True, name=name + "_mom")
    outs = g.batchnorm(x, st[0], st[1], st[2], st[3], epsilon=e, momentum=m, name=name)
    for i, t in enumerate(outs):
        t.set_output(True).set_name(f"o{i}_out")
    g.build([HeurMode.A])
    pack = {x: torch.rand(2, 3, 2, 2), e: eps, m: 0.1}
    pack.update({t: torch.rand(1, 3, 1, 1) + 0.5 for t in st})
    pack.update({t: torch.empty(t.get_dim()) for t in outs})
    ws = g.get_workspace_size()
    return lambda: g.execute(pack, torch.empty(ws, dtype=torch.uint8) if ws else None), g


def _layernorm(name: str, eps: float):
    g = cudnn.pygraph(name="g_" + name)
    x = g.tensor([2, 8], [8, 1], F, name="x_in")
    s = g.tensor([1, 8], [8, 1], F, name="scale_in")
    b = g.tensor([1, 8], [8, 1], F, name="bias_in")
    e = g.tensor([1, 1], [1, 1], F, is_pass_by_value=True, name=name + "_eps")
    outs = [
        t for t in g.layernorm(NormForwardPhase.TRAINING, x, s, b, e, name=name) if t is not None
    ]
    for i, t in enumerate(outs):
        t.set_output(True).set_name(f"o{i}_out")
    g.build([HeurMode.A])
    pack = {x: torch.rand(2, 8), s: torch.rand(1, 8), b: torch.rand(1, 8), e: eps}
    pack.update({t: torch.empty(t.get_dim()) for t in outs})
    ws = g.get_workspace_size()
    return lambda: g.execute(pack, torch.empty(ws, dtype=torch.uint8) if ws else None), g


@pytest.mark.parametrize(
    "make, kind, rule",
    [(_batchnorm, "batchnorm", "below the minimum"), (_layernorm, "layernorm", "must be finite")],
)
def test_shared_executable_names_the_plans_own_node_and_tensor(make, kind, rule):
    run, first = make("first", 1e-5)
    run()
    run, second = make("second", -1.0)
    assert second.get_plan_name_at_index(0) == first.get_plan_name_at_index(0)
    assert "reference" not in second.get_plan_name_at_index(0)
    e = expect_error(
        BadParamError, Status.BAD_PARAM, run, f"{kind} 'second'", "tensor 'second_eps'", rule
    )
    assert "first" not in str(e)


# ---- autotune with a workspace no plan fits ---------------------------------------------
@pytest.mark.parametrize("ws", ["None", "small"])
def test_autotune_refuses_a_workspace_no_plan_fits(ws):
    g, pack = _split_reduction()
    need = g.get_workspace_size()
    assert need > 0
    workspace = None if ws == "None" else np.zeros(1, np.uint8)
    rule = "is required, got None" if ws == "None" else f"the plan needs {need}"
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SIZE_INSUFFICIENT,
        lambda: g.autotune(pack, workspace, warmup=1, iters=1),
        "autotune 'g_ws'",
        "workspace",
        rule,
    )


def test_autotune_times_only_the_plans_that_fit():
    g, pack = _split_reduction()
    g.create_execution_plans([HeurMode.FALLBACK])  # the reference needs no workspace
    g.create_execution_plan(FUSION_ID, {"SPLIT": 4, "BLOCK_RED": 8, "BLOCK_KEPT": 4})
    g.build_plans(cudnn.build_plan_policy.ALL)
    sizes = [g.get_workspace_size_plan_at_index(i) for i in range(g.get_execution_plan_count())]
    assert 0 in sizes and max(sizes) > 0
    timed = g.autotune(pack, None, warmup=1, iters=1)
    assert len(timed) == 1 and timed[0][0].startswith(REFERENCE_NAME), timed
    assert g.get_plan_name_at_index(0) == timed[0][0]
