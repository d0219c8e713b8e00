"""A pass-by-value tensor (a host scalar) as a node's operand where engines load tiles from
memory: the softmax, norm, batch norm, pool and LRN engines and the fusion engine's views
(transpose, slice, reshape, concatenate) decline it with a reason naming the node and the
tensor, and the graph still builds and runs correctly on the engines that take scalars (the
reference). Before, those engines crashed inside their kernels."""

from __future__ import annotations

import pytest
import torch
from _util import assert_close, run_plan

import opendnn.frontend as cudnn
from opendnn.engines.base import operands_in_memory
from opendnn.engines.registry import engines
from opendnn.enums import DataType, HeurMode, NormForwardPhase, ResampleMode

F = DataType.FLOAT
V = 0.75  # the host scalar's value


def _graph(case):
    """(graph, feeds, outputs, expected float64 outputs) with ``pbv_in`` passed by value."""
    g = cudnn.pygraph(name=f"pbv_{case}")
    one = g.tensor([1, 1, 1, 1], [1, 1, 1, 1], F, is_pass_by_value=True, name="pbv_in")
    feeds = {one: torch.tensor(V)}
    v = torch.full((1, 1, 1, 1), V, dtype=torch.float64)
    if case == "softmax":
        y = g.softmax(one, axis=-1, name="op_n")
        want = [torch.ones_like(v)]
    elif case == "transpose":
        y = g.transpose(one, [0, 1, 3, 2], name="op_n")
        want = [v]
    elif case == "layernorm_scale":
        xt = torch.randn(2, 1, 1, 1)  # SCALE's dims [1, 1, 1, 1]: one normalized element
        x = g.tensor_like(xt, name="x_in")
        bt = torch.randn(1, 1, 1, 1)
        b = g.tensor_like(bt, name="bias_in")
        scale = g.tensor([1, 1, 1, 1], [1, 1, 1, 1], F, is_pass_by_value=True, name="pbv_in")
        feeds = {x: xt, b: bt, scale: torch.tensor(V)}
        y = g.layernorm(NormForwardPhase.INFERENCE, x, scale, b, 1e-5, name="op_n")[0]
        x64 = xt.double()
        mu = x64.mean((1, 2, 3), keepdim=True)
        var = x64.var((1, 2, 3), unbiased=False, keepdim=True)
        want = [(x64 - mu) / torch.sqrt(var + 1e-5) * V + bt.double()]
    elif case == "batchnorm_inference":
        xt = torch.randn(2, 1, 2, 2)
        x = g.tensor_like(xt, name="x_in")
        y = g.batchnorm_inference(x, one, one, one, one, name="op_n")
        feeds[x] = xt
        want = [V * (xt.double() - V) * V + V]
    elif case == "pool":
        y = g.resample(one, ResampleMode.MAXPOOL, [1, 1], name="op_n")[0]
        want = [v]
    else:  # lrn
        y = g.lrn(one, lrn_n=1, lrn_alpha=1e-4, lrn_beta=0.75, lrn_k=2.0, name="op_n")
        want = [v / (2.0 + 1e-4 * V * V) ** 0.75]
    y.set_output(True).set_name("y_out")
    return g, feeds, [y], want


CASES = ["softmax", "transpose", "layernorm_scale", "batchnorm_inference", "pool", "lrn"]
MEMORY_ENGINE = {
    "softmax": "softmax",
    "transpose": "runtime_fusion",
    "layernorm_scale": "norm",
    "batchnorm_inference": "batchnorm",
    "pool": "pool",
    "lrn": "lrn",
}


@pytest.mark.parametrize("case", CASES)
def test_engines_decline_and_every_plan_is_right(case):
    g, feeds, outs, want = _graph(case)
    g.validate()
    og, target = g.op_graph, g._target()
    reasons = {e.name: e.check_support(og, target) for e in engines()}
    takers = [n for n, s in reasons.items() if s.ok]
    assert takers, reasons
    # every engine that loads the operand from memory says why it declines
    s = reasons[MEMORY_ENGINE[case]]
    assert not s.ok and "pbv_in" in s.reason and "passed by value" in s.reason, s.reason
    g.build_operation_graph()
    g.create_execution_plans([HeurMode.A, HeurMode.FALLBACK])
    g.check_support()
    g.build_plans(cudnn.build_plan_policy.ALL)
    assert g.get_execution_plan_count() >= 1
    for i in range(g.get_execution_plan_count()):
        got = run_plan(g, feeds, outs, i, float("nan"))
        for o, w in zip(outs, want):
            assert_close(
                got[o],
                w,
                torch.float32,
                msg=f"[repro] pbv operand {case} plan {g.get_plan_name_at_index(i)}",
            )


def test_operands_in_memory_allows_named_roles():
    g = cudnn.pygraph(name="pbv_eps")
    x = g.tensor([2, 1, 1, 3], None, F, name="x_in")
    s = g.tensor([1, 1, 1, 3], None, F, name="s_in")
    y = g.layernorm(NormForwardPhase.INFERENCE, x, s, s, 1e-5, name="ln")[0]
    y.set_output(True)
    g.validate()
    og = g.op_graph
    assert not operands_in_memory(og)  # EPSILON is passed by value
    assert operands_in_memory(og, ("EPSILON",))
    assert operands_in_memory(og, nodes=[])


def test_fusion_still_takes_pointwise_scalars():
    g = cudnn.pygraph(name="pbv_pw")
    xt = torch.randn(3, 4)
    x = g.tensor_like(xt, name="x_in")
    y = g.mul(x, 2.0)
    y.set_output(True)
    g.validate()
    assert (
        [e for e in engines() if e.name == "runtime_fusion"][0]
        .check_support(g.op_graph, g._target())
        .ok
    )


@pytest.mark.parametrize("reduce", [False, True])
def test_double_compute_takes_scalars_as_doubles(reduce):
    """A float64 fused kernel (interpreted here; compiled in test_gpu_core) takes a host
    scalar at full precision: 0.1 rounded to float32 would be 1.5e-9 off, relative."""
    x = torch.randn(50, 33, dtype=torch.float64)
    g = cudnn.pygraph(
        io_data_type=DataType.DOUBLE,
        intermediate_data_type=DataType.DOUBLE,
        compute_data_type=DataType.DOUBLE,
    )
    tx, ts = g.tensor_like(x), g.tensor_like(torch.tensor(0.1, dtype=torch.float64))
    y = g.add(g.mul(tx, ts), 1.0 / 3.0)
    ref = x * 0.1 + 1.0 / 3.0
    if reduce:
        y = g.reduction(y, mode=cudnn.reduction_mode.ADD).set_dim([1, 33])
        y.set_data_type(DataType.DOUBLE)
        ref = ref.sum(0, keepdim=True)
    y.set_output(True)
    g.build([HeurMode.A])
    assert g.get_plan_name_at_index(0).startswith("runtime_fusion")
    out = torch.full(ref.shape, float("nan"), dtype=torch.float64)
    g.execute({tx: x, y: out}, torch.empty(g.get_workspace_size(), dtype=torch.uint8))
    assert ((out - ref).norm() / ref.norm()).item() < 1e-13
