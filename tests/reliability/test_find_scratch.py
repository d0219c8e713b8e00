"""Benchmark mode, ``autotune`` and find time candidates without applying the call to the
caller's data more than once: an in-place graph, or a descriptor-API call blending with
beta != 0, comes out as if it had run once (runtime/scratch.py)."""

import pytest
import torch
from _reliability import doubling_graph

import opendnn.legacy as legacy
from opendnn import backends
from opendnn.runtime import autotune

pytestmark = pytest.mark.usefixtures("benchmark_mode")  # tests/reliability/conftest.py


def _desc(dims):
    d = legacy.create_tensor_descriptor()
    legacy.set_tensor_4d_descriptor(d, legacy.TensorFormat.NCHW, legacy.DataType.FLOAT, *dims)
    return d


def _repro(name):
    return f"[repro] pytest tests/reliability/test_find_scratch.py -k {name}"


def test_scale_tensor_in_benchmark_mode_scales_once():
    h = legacy.create()
    y = torch.ones(1, 2, 3, 5)
    legacy.scale_tensor(h, _desc(y.shape), y, 2.0)
    assert torch.equal(y, torch.full_like(y, 2.0)), f"{_repro('scale_tensor')}: {y.flatten()[:4]}"


def test_add_tensor_blending_in_benchmark_mode_adds_once():
    h = legacy.create()
    a, c = torch.ones(1, 3, 2, 2), torch.ones(1, 3, 2, 2)
    legacy.add_tensor(h, 1.0, _desc(a.shape), a, 1.0, _desc(c.shape), c)
    assert torch.equal(c, torch.full_like(c, 2.0)), f"{_repro('add_tensor')}: {c.flatten()[:4]}"


def test_in_place_activation_forward_in_benchmark_mode_applies_once():
    h = legacy.create()
    act = legacy.create_activation_descriptor()
    legacy.set_activation_descriptor(
        act, legacy.ActivationMode.TANH, legacy.NanPropagation.PROPAGATE_NAN, 0.0
    )
    x = torch.linspace(-2, 2, 24).reshape(1, 2, 3, 4)
    want = torch.tanh(x.double()).float()
    d = _desc(x.shape)
    legacy.activation_forward(h, act, 1.0, d, x, 0.0, d, x)
    torch.testing.assert_close(x, want, msg=_repro("activation_forward"))


def test_in_place_graph_in_benchmark_mode_applies_once():
    x = torch.arange(1.0, 7.0).reshape(2, 3)
    g, t, y = doubling_graph(x)
    assert g.get_execution_plan_count() > 1, "needs candidates to time"
    ws = torch.empty(g.get_workspace_size(), dtype=torch.uint8)
    g.execute({t: x, y: x}, ws)
    want = torch.arange(1.0, 7.0).reshape(2, 3) * 2
    assert torch.equal(x, want), f"{_repro('in_place_graph')}: {x}"


def test_autotune_of_an_in_place_graph_leaves_the_input_alone():
    backends.benchmark = False
    x = torch.arange(1.0, 7.0).reshape(2, 3)
    g, t, y = doubling_graph(x)
    ws = torch.empty(
        max(g.get_workspace_size_plan_at_index(i) for i in range(g.get_execution_plan_count())),
        dtype=torch.uint8,
    )
    g.autotune({t: x, y: x}, ws)
    assert torch.equal(x, torch.arange(1.0, 7.0).reshape(2, 3)), (
        f"{_repro('autotune_of_an_in_place')}: {x}"
    )
    g.execute({t: x, y: x}, ws)
    assert torch.equal(x, torch.arange(1.0, 7.0).reshape(2, 3) * 2)


def test_a_cached_entry_naming_no_candidate_is_tuned_again_with_a_warning():
    x = torch.arange(1.0, 7.0).reshape(2, 3)
    g, t, y = doubling_graph(x)
    key = g.key()
    target = g._target().name
    autotune.store(key, target, ["an_engine_that_does_not_exist#0"], [0.001])
    with pytest.warns(RuntimeWarning, match="names no plan"):
        g2, t2, y2 = doubling_graph(x)
    assert g2.tunes_at_execute(), "a stale entry must not count as tuned"
    g2.execute({t2: x, y2: x}, torch.empty(g2.get_workspace_size(), dtype=torch.uint8))
    assert torch.equal(x, torch.arange(1.0, 7.0).reshape(2, 3) * 2)
    hit = autotune.lookup(key, target)
    assert hit and hit["order"][0] != "an_engine_that_does_not_exist#0", hit


def test_find_ex_with_y_over_x_times_without_touching_x():
    """find-Ex may write y (cuDNN's contract), but a y that overlaps x must not be written:
    x is what every timed run reads."""
    backends.benchmark = False
    h = legacy.create("cpu")
    x = torch.randn(1, 4, 5, 5)
    before = x.clone()
    xd = _desc(x.shape)
    wd = legacy.create_filter_descriptor()
    legacy.set_filter_4d_descriptor(wd, legacy.DataType.FLOAT, legacy.TensorFormat.NCHW, 4, 4, 1, 1)
    conv = legacy.create_convolution_descriptor()
    legacy.set_convolution_2d_descriptor(
        conv, 0, 0, 1, 1, 1, 1, legacy.ConvolutionMode.CROSS_CORRELATION, legacy.DataType.FLOAT
    )
    w = torch.randn(4, 4, 1, 1)
    ws = torch.empty(1 << 20, dtype=torch.uint8)
    perfs = legacy.find_convolution_forward_algorithm_ex(
        h, xd, x, wd, w, conv, xd, x, 8, ws, ws.numel()
    )
    assert perfs and perfs[0].status == legacy.Status.SUCCESS, perfs
    assert torch.equal(x, before), _repro("find_ex_with_y_over_x")
