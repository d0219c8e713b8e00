"""opendnn.torch.enable(): torch.nn.functional calls routed to opendnn (the functional
layer, OF) with PyTorch's results and fallbacks; the switch's states; re-entrancy; and a
small CNN that gives PyTorch's outputs and gradients converted and under enable()."""

from __future__ import annotations

import copy
import importlib
import threading

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from _util import close_f32 as close
from torch.overrides import TorchFunctionMode

from opendnn.errors import BadParamError, GraphNotSupportedError
from opendnn.torch import functional as OF
from opendnn.torch.convert import convert

E = importlib.import_module("opendnn.torch.enable")


@pytest.fixture(autouse=True)
def _clean_state():
    E.clear_fallbacks()
    yield
    while E.is_enabled():
        E.disable()
    E.clear_fallbacks()


def spy(monkeypatch, *names):
    """Count the calls of each OF.<name> (still running it): {name: [kwargs, ...]}."""
    calls = {n: [] for n in names}
    for n in names:

        def counted(*args, _n=n, _original=getattr(OF, n), **kwargs):
            calls[_n].append(kwargs)
            return _original(*args, **kwargs)

        monkeypatch.setattr(OF, n, counted)
    return calls


# ---------------------------------------------------------------- the small CNN

CNN_OPS = ("conv2d", "batch_norm", "relu", "max_pool2d", "linear")


def _cnn():
    return nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(4 * 3 * 3, 5),
    )


@pytest.mark.parametrize("channels_last", [False, True])
def test_small_cnn_converted_and_enabled(channels_last, rng, monkeypatch):
    torch.manual_seed(rng.seed)
    ref = _cnn()
    runs = {
        "converted": convert(copy.deepcopy(ref), inplace=False),
        "enabled": copy.deepcopy(ref),
        "both": convert(copy.deepcopy(ref)),
    }
    x = rng.rand((2, 3, 6, 6))
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    dy = rng.rand((2, 5))
    x_ref = x.clone().requires_grad_()
    y_ref = ref(x_ref)
    y_ref.backward(dy)
    for how, model in runs.items():
        calls = spy(monkeypatch, *CNN_OPS)
        xi = x.clone().requires_grad_()
        if how == "converted":
            y = model(xi)
        else:
            with E.enable():
                y = model(xi)
        assert {n: len(c) for n, c in calls.items()} == dict.fromkeys(CNN_OPS, 1), how
        y.backward(dy)
        close(y, y_ref, f"{how}: output")
        close(xi.grad, x_ref.grad, f"{how}: input grad")
        for (k, p_ref), p in zip(ref.named_parameters(), model.parameters()):
            close(p.grad, p_ref.grad, f"{how}: grad of {k}")
        close(model[1].running_mean, ref[1].running_mean, f"{how}: running mean")
        close(model[1].running_var, ref[1].running_var, f"{how}: running var")
        assert int(model[1].num_batches_tracked) == 1
    assert E.fallbacks() == {}


# ---------------------------------------------------------------- what is routed


def test_routes_functional_and_aliases(rng, monkeypatch):
    calls = spy(
        monkeypatch,
        "conv2d",
        "relu",
        "sigmoid",
        "tanh",
        "matmul",
        "softmax",
        "log_softmax",
        "gelu",
        "scaled_dot_product_attention",
        "layer_norm",
        "avg_pool1d",
        "dropout",
    )
    x, w = rng.rand((1, 2, 4, 4)), rng.rand((3, 2, 3, 3))
    a, b = rng.rand((2, 3, 4)), rng.rand((4, 5))
    with E.enable():
        got = {
            "F.conv2d": F.conv2d(x, w, padding=1),
            "torch.conv2d": torch.conv2d(x, w),
            "F.relu": F.relu(a),
            "torch.relu": torch.relu(a),
            "Tensor.relu": a.relu(),
            "nn.Sigmoid": nn.Sigmoid()(a),
            "F.sigmoid": F.sigmoid(a),
            "F.tanh": F.tanh(a),
            "@": a @ b,
            "torch.matmul": torch.matmul(a, b),
            "torch.softmax": torch.softmax(a, 1, dtype=torch.float64),
            "Tensor.log_softmax": a.log_softmax(-1),
            "F.gelu": F.gelu(a, approximate="tanh"),
            "sdpa": F.scaled_dot_product_attention(a[None], a[None], a[None], is_causal=True),
            "F.layer_norm": F.layer_norm(a, (4,)),
            "F.avg_pool1d": F.avg_pool1d(a, 2),
            "F.dropout": F.dropout(a, 0.5, training=False),
        }
    assert {n: len(c) for n, c in calls.items()} == dict(
        conv2d=2,
        relu=3,
        sigmoid=2,
        tanh=1,
        matmul=2,
        softmax=1,
        log_softmax=1,
        gelu=1,
        scaled_dot_product_attention=1,
        layer_norm=1,
        avg_pool1d=1,
        dropout=1,
    )
    assert calls["softmax"][0] == {"dtype": torch.float64}
    assert calls["gelu"][0] == {"approximate": "tanh"}
    expected = {
        "F.conv2d": F.conv2d(x, w, padding=1),
        "torch.conv2d": torch.conv2d(x, w),
        "F.relu": F.relu(a),
        "torch.relu": F.relu(a),
        "Tensor.relu": F.relu(a),
        "nn.Sigmoid": torch.sigmoid(a),
        "F.sigmoid": torch.sigmoid(a),
        "F.tanh": torch.tanh(a),
        "@": a @ b,
        "torch.matmul": a @ b,
        "torch.softmax": torch.softmax(a, 1, dtype=torch.float64),
        "Tensor.log_softmax": a.log_softmax(-1),
        "F.gelu": F.gelu(a, approximate="tanh"),
        "sdpa": F.scaled_dot_product_attention(a[None], a[None], a[None], is_causal=True),
        "F.layer_norm": F.layer_norm(a, (4,)),
        "F.avg_pool1d": F.avg_pool1d(a, 2),
        "F.dropout": a,
    }
    for k in expected:
        assert got[k].dtype == expected[k].dtype, k
        close(got[k], expected[k], k)


def test_not_routed(rng, monkeypatch):
    calls = spy(monkeypatch, "relu", "matmul", "conv2d", "tanh")
    a = rng.rand((2, 3))

    class Sub(torch.Tensor):
        pass

    with E.enable():
        torch.tanh(a, out=torch.empty(2, 3))  # out=: PyTorch's
        torch.matmul(a, a.t(), out=torch.empty(2, 2))
        F.relu(torch.arange(-2, 3))  # integers
        F.relu(a.as_subclass(Sub))  # tensor subclasses
        F.conv2d(
            rng.rand((1, 1, 3, 3)).to(torch.complex64), rng.rand((1, 1, 1, 1)).to(torch.complex64)
        )  # complex
        torch.relu_(a.clone())  # in-place aliases
    assert calls == {"relu": [], "matmul": [], "conv2d": [], "tanh": []}


def test_reentrancy_routes_once(rng, monkeypatch):
    """Torch calls inside the routed OF call (here OF itself calling F.relu and F.conv2d)
    go to PyTorch, not back to OF."""
    seen = []
    original_relu = OF.relu

    def relu(input, inplace=False):
        seen.append("relu")
        F.conv2d(input[None, None], torch.ones(1, 1, 1, 1))
        return F.relu(input, inplace=inplace)

    monkeypatch.setattr(OF, "relu", relu)
    conv = spy(monkeypatch, "conv2d")
    a = rng.rand((2, 3))
    with E.enable():
        y = F.relu(a)
        y2 = nn.ReLU()(a)
    assert seen == ["relu", "relu"] and conv == {"conv2d": []}
    close(y, original_relu(a))
    close(y2, original_relu(a))


# ---------------------------------------------------------------- fallback


def test_fallback_to_pytorch_logged_once(rng, monkeypatch, opendnn_log):
    asked = []

    def declining(*args, **kwargs):
        asked.append(args[0].shape)
        raise GraphNotSupportedError("leaky_relu: slope not supported (test)", op="leaky")

    monkeypatch.setattr(OF, "leaky_relu", declining)
    a, b = rng.rand((2, 3)), rng.rand((4,))
    with E.enable():
        ys = [F.leaky_relu(a, 0.3) for _ in range(3)] + [F.leaky_relu(b, 0.3)]
    for y, x in zip(ys, [a, a, a, b]):
        torch.testing.assert_close(y, torch.where(x > 0, x, 0.3 * x), rtol=0, atol=0)
    assert asked == [a.shape, b.shape], "declined calls are remembered by their arguments"
    lines = [m for m in opendnn_log if "falls back" in m]
    assert len(lines) == 1 and "torch.nn.functional.leaky_relu" in lines[0]
    assert "slope not supported" in lines[0]
    ((key, count),) = E.fallbacks().items()
    assert key[0] == "torch.nn.functional.leaky_relu" and count == 4
    E.clear_fallbacks()
    with E.enable():
        F.leaky_relu(a, 0.3)
    assert len(asked) == 3


def test_declined_memory_limits(rng, monkeypatch):
    """Unkeyable calls are asked every time; the memory per caller is bounded."""
    asked = []
    monkeypatch.setattr(OF, "relu", _declining(asked))
    monkeypatch.setattr(E, "DECLINED_PER_CALLER", 2)
    a = rng.rand((4,))
    with E.enable():
        for n in (1, 2, 3, 1):  # 3 evicts everything: 1 is asked again
            F.relu(a[:n])
        table_size = len(E._declined["torch.nn.functional.relu"])
    assert len(asked) == 4 and table_size == 2  # {3, 1}
    asked.clear()
    calls = []
    with E.enable():  # a dict argument: no key, never remembered
        for _ in range(2):
            E.attempt("test", _declining(calls), (a, {"unhashable": 1}), None, lambda: 0)
    assert len(calls) == 2


def _declining(calls):
    def fake(*args, **kwargs):
        calls.append(args)
        raise GraphNotSupportedError("declined (test)", op="fake")

    return fake


def test_bad_arguments_get_pytorch_errors(rng):
    a = rng.rand((2, 3))
    with E.enable(), pytest.raises(TypeError):
        torch.softmax(a)  # no dim: the adapter hands it to PyTorch


def test_fallback_keeps_autograd(rng, monkeypatch):
    monkeypatch.setattr(
        OF,
        "linear",
        lambda *a, **k: (_ for _ in ()).throw(GraphNotSupportedError("no", op="linear")),
    )
    x, w = rng.rand((3, 4)).requires_grad_(), rng.rand((2, 4)).requires_grad_()
    with E.enable():
        F.linear(x, w).sum().backward()
    close(w.grad, x.detach().sum(0).expand(2, 4))


def test_other_errors_propagate(rng, monkeypatch):
    def bad(*args, **kwargs):
        raise BadParamError("bad shape", op="conv2d")

    monkeypatch.setattr(OF, "conv2d", bad)
    with E.enable(), pytest.raises(BadParamError, match="bad shape"):
        F.conv2d(rng.rand((1, 2, 3, 3)), rng.rand((1, 2, 1, 1)))
    assert E.fallbacks() == {}


# ---------------------------------------------------------------- the switch


def test_context_manager_nesting_and_global_switch(rng, monkeypatch):
    calls = spy(monkeypatch, "relu")
    a = rng.rand((3,))
    assert not E.is_enabled()
    with E.enable():
        assert E.is_enabled()
        with E.enable():
            F.relu(a)
        assert E.is_enabled()
        with E.disable():
            assert not E.is_enabled()
            F.relu(a)
        assert E.is_enabled()
    assert not E.is_enabled()
    F.relu(a)
    assert len(calls["relu"]) == 1
    E.enable()
    assert E.is_enabled()
    F.relu(a)
    E.enable()  # enabling twice: one switch, one disable
    E.disable()
    assert not E.is_enabled()
    F.relu(a)
    assert len(calls["relu"]) == 2
    assert not any(
        isinstance(m, E._Router) for m in torch.overrides._get_current_function_mode_stack()
    )


def test_switch_under_another_mode(rng, monkeypatch):
    calls = spy(monkeypatch, "relu")
    a = rng.rand((3,))

    class Other(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    E.enable()
    with Other():
        F.relu(a)
        E.disable()  # ours is not on top: switched off in place
        assert not E.is_enabled()
        F.relu(a)
        E.enable()
        F.relu(a)
        E.disable()
    assert not E.is_enabled() and len(calls["relu"]) == 2
    with E.enable():
        F.relu(a)
    assert len(calls["relu"]) == 3 and not E.is_enabled()


def test_switch_survives_an_emptied_stack(rng):
    E.enable()
    torch.overrides._pop_mode()  # someone else popped our mode
    assert not E.is_enabled()
    with E.enable():
        assert E.is_enabled()
    assert not E.is_enabled()


def test_switch_is_per_thread(rng, monkeypatch):
    calls = spy(monkeypatch, "relu")
    a = rng.rand((3,))
    state = {}

    def other_thread():
        state["enabled"] = E.is_enabled()
        F.relu(a)

    with E.enable():
        t = threading.Thread(target=other_thread)
        t.start()
        t.join()
    assert state == {"enabled": False} and calls["relu"] == []
