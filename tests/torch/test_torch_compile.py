"""The ``opendnn`` torch.compile backend: compiled models match eager PyTorch in inference
(fused: conv + BN folding, conv / linear + activation, norm + activation, attention) and
in training (forward and backward, unfused); unsupported operations stay PyTorch and the
report says why; declined operations and declined fused graphs fall back to PyTorch /
unfused, logged once per reason; the default backends trace opendnn's functional layer."""

from __future__ import annotations

import copy
import logging
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import opendnn.torch.compile as oc
from opendnn.errors import GraphNotSupportedError
from opendnn.torch import _graphs
from opendnn.torch import compile_fused as CF
from opendnn.torch import functional as OF

TOL = dict(rtol=1e-4, atol=1e-4)  # float32 engines (reductions of <= 100 terms)


@pytest.fixture(autouse=True)
def _fresh(rng, monkeypatch):
    """A fresh dynamo cache and fallback count; the graphs this test builds, recorded."""
    torch._dynamo.reset()
    oc.reset_fallbacks()
    torch.manual_seed(rng.seed)
    keys = []
    built = _graphs.built

    def spy(key, device, build):
        keys.append(key[0])
        return built(key, device, build)

    monkeypatch.setattr(CF._graphs, "built", spy)
    yield keys
    torch._dynamo.reset()


def _compiled(model):
    return torch.compile(model, backend="opendnn", fullgraph=True)


def _randomize_bn(model):
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
    return model


class SmallCNN(nn.Module):
    """conv-bn-relu-maxpool, conv(bias)-relu, flatten, linear."""

    def __init__(self, c=3, k=4, classes=5):
        super().__init__()
        self.conv1 = nn.Conv2d(c, k, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(k)
        self.conv2 = nn.Conv2d(k, k, 3, padding=1)
        self.fc = nn.Linear(k * 2 * 2, classes)

    def forward(self, x):
        y = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        y = torch.relu(self.conv2(y))
        return self.fc(y.flatten(1))


def _no_fallbacks():
    assert oc.runtime_fallbacks() == {}, oc.runtime_fallbacks()


def test_backend_is_registered():
    assert "opendnn" in torch._dynamo.list_backends()


def test_cnn_inference_folds_and_fuses(_fresh):
    model = _randomize_bn(SmallCNN()).eval()
    x = torch.randn(2, 3, 4, 4)
    cm = _compiled(model)
    with torch.no_grad():
        out, ref = cm(x), model(x)
        out2 = cm(x)
    torch.testing.assert_close(out, ref, **TOL)
    torch.testing.assert_close(out2, out, rtol=0, atol=0)
    rep = oc.last_report()
    assert rep.fused_kinds() == ["conv+batch_norm+relu", "conv+relu"], rep.summary()
    assert {op for _, op in rep.routed} == {"max_pool2d", "linear"}, rep.summary()
    assert [t for _, t, _ in rep.left] == ["call_method flatten"], rep.summary()
    assert _fresh.count("opendnn.compile.conv_act") == 4  # two convs, two calls
    _no_fallbacks()


def test_dynamic_shapes_fold_and_fuse():
    """dynamic=True: BN's eps and momentum arrive as SymFloats; batch sizes vary."""
    model = _randomize_bn(SmallCNN()).eval()
    cm = torch.compile(model, backend="opendnn", fullgraph=True, dynamic=True)
    with torch.no_grad():
        for n in (2, 3):
            x = torch.randn(n, 3, 4, 4)
            torch.testing.assert_close(cm(x), model(x), **TOL)
    assert oc.last_report().fused_kinds() == ["conv+batch_norm+relu", "conv+relu"]
    _no_fallbacks()


def test_bn_fold_is_cached_and_follows_weight_updates(_fresh, monkeypatch):
    model = _randomize_bn(SmallCNN()).eval()
    x = torch.randn(1, 3, 4, 4)
    cm = _compiled(model)
    calls = []
    fold = CF.folded

    def counting(*a):
        calls.append(1)
        return fold(*a)

    monkeypatch.setattr(CF, "folded", counting)
    fresh = CF._folds.copy()
    with torch.no_grad():
        cm(x)
        n0 = len(CF._folds)
        cm(x)
        assert len(CF._folds) == n0 and len(calls) == 2  # second call: a cache hit
        hit = {k: v for k, v in CF._folds.items() if k not in fresh}
        model.bn1.weight.mul_(2.0)  # an optimizer-style in-place update
        model.conv1.weight.add_(0.1)
        out, ref = cm(x), model(x)
    torch.testing.assert_close(out, ref, **TOL)
    assert any(CF._folds[k][1] is not v[1] for k, v in hit.items())


def test_cnn_training_matches_eager():
    model = _randomize_bn(SmallCNN()).train()
    eager = copy.deepcopy(model)
    x = torch.randn(3, 3, 4, 4)
    cm = _compiled(model)
    out, ref = cm(x), eager(x)
    torch.testing.assert_close(out, ref, **TOL)
    out.square().sum().backward()
    ref.square().sum().backward()
    for (name, p), q in zip(model.named_parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad, q.grad, **TOL, msg=name)
    torch.testing.assert_close(model.bn1.running_var, eager.bn1.running_var, **TOL)
    assert oc.last_report().fused_kinds() == ["conv+relu"]  # BN in training: no folding


def test_eval_with_grad_runs_unfused(_fresh):
    """Outside torch.no_grad the parameters require grad: the fused chain runs unfused,
    through autograd."""
    model = _randomize_bn(SmallCNN()).eval()
    eager = copy.deepcopy(model)
    x = torch.randn(2, 3, 4, 4)
    out, ref = _compiled(model)(x), eager(x)
    torch.testing.assert_close(out, ref, **TOL)
    out.sum().backward()
    ref.sum().backward()
    torch.testing.assert_close(model.conv1.weight.grad, eager.conv1.weight.grad, **TOL)
    assert "opendnn.compile.conv_act" not in _fresh


class Block(nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.kind = kind
        c = 4
        if kind == "conv3d_bn":
            self.conv, self.bn = nn.Conv3d(c, 6, 3, padding=1), nn.BatchNorm3d(6)
        elif kind in ("conv_bn_add_relu", "conv_bn_iadd_inplace_relu"):
            self.conv, self.bn = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
            self.relu = nn.ReLU(inplace=True)
        elif kind == "conv_add_tanh":
            self.conv = nn.Conv2d(c, c, 1)
        elif kind == "conv_gelu_tanh_groups_stride":
            self.conv = nn.Conv2d(c, 6, 3, stride=2, padding=1, groups=2)
        elif kind == "conv_same_silu_channels_last":
            self.conv = nn.Conv2d(c, 3, 4, padding="same", dilation=2, bias=False)
        elif kind in ("linear_silu", "linear_nobias_sigmoid"):
            self.fc = nn.Linear(c, 5, bias=kind == "linear_silu")
        elif kind == "layer_norm_gelu":
            self.norm = nn.LayerNorm((3, c))
        elif kind == "layer_norm_noaffine_relu":
            self.norm = nn.LayerNorm(c, elementwise_affine=False)
        elif kind == "group_norm_silu":
            self.norm = nn.GroupNorm(2, c)

    def forward(self, x):
        k = self.kind
        if k == "conv3d_bn":
            return self.bn(self.conv(x))
        if k == "conv_bn_add_relu":
            return F.relu(x + self.bn(self.conv(x)))
        if k == "conv_bn_iadd_inplace_relu":  # torchvision's BasicBlock ending
            out = self.bn(self.conv(x))
            out += x
            return self.relu(out)
        if k == "conv_add_tanh":
            return torch.tanh(torch.add(self.conv(x), x))
        if k == "conv_gelu_tanh_groups_stride":
            return F.gelu(self.conv(x), approximate="tanh")
        if k == "conv_same_silu_channels_last":
            return F.silu(self.conv(x))
        if k == "linear_silu":
            return F.silu(self.fc(x))
        if k == "linear_nobias_sigmoid":
            return self.fc(x).sigmoid()
        if k in ("layer_norm_gelu", "group_norm_silu"):
            return F.gelu(self.norm(x)) if k == "layer_norm_gelu" else F.silu(self.norm(x))
        return self.norm(x).relu()


BLOCKS = {  # kind: (input shape, fused pattern, graph key)
    "conv3d_bn": ((1, 4, 3, 4, 3), "conv+batch_norm", "conv_act"),
    "conv_bn_add_relu": ((2, 4, 3, 3), "conv+batch_norm+add+relu", "conv_act"),
    "conv_bn_iadd_inplace_relu": ((1, 4, 3, 4), "conv+batch_norm+add+relu", "conv_act"),
    "conv_add_tanh": ((1, 4, 3, 3), "conv+add+tanh", "conv_act"),
    "conv_gelu_tanh_groups_stride": ((2, 4, 5, 5), "conv+gelu", "conv_act"),
    "conv_same_silu_channels_last": ((1, 4, 5, 6), "conv+silu", "conv_act"),
    "linear_silu": ((2, 3, 4), "linear+silu", "linear_act"),
    "linear_nobias_sigmoid": ((3, 4), "linear+sigmoid", "linear_act"),
    "layer_norm_gelu": ((2, 3, 4), "layer_norm+gelu", "norm_act"),
    "layer_norm_noaffine_relu": ((2, 3, 4), "layer_norm+relu", "norm_act"),
    "group_norm_silu": ((2, 4, 3, 3), "group_norm+silu", "norm_act"),
}


@pytest.mark.parametrize("kind", list(BLOCKS))
def test_fused_blocks_match_eager(kind, _fresh):
    shape, pattern, key = BLOCKS[kind]
    model = _randomize_bn(Block(kind)).eval()
    for p in model.parameters():  # affine parameters away from their init
        nn.init.uniform_(p, -0.5, 1.0)
    x = torch.randn(shape)
    if kind.endswith("channels_last"):
        x = x.to(memory_format=torch.channels_last)
    with torch.no_grad():
        out, ref = _compiled(model)(x), model(x)
    torch.testing.assert_close(out, ref, **TOL)
    assert oc.last_report().fused_kinds() == [pattern]
    assert [k for k in _fresh if k.startswith("opendnn.compile.")] == [f"opendnn.compile.{key}"]
    _no_fallbacks()


class Attention(nn.Module):
    def __init__(self, scale, mask, return_probs=False):
        super().__init__()
        self.scale, self.mask, self.return_probs = scale, mask, return_probs

    def forward(self, q, k, v, mask):
        s = torch.matmul(q, k.transpose(-2, -1))
        if self.scale == "div":
            s = s / math.sqrt(q.shape[-1])
        elif self.scale == "mul":
            s = 0.3 * s
        if self.mask:
            s = s + mask
        p = s.softmax(dim=-1)
        return (p @ v, p) if self.return_probs else p @ v


@pytest.mark.parametrize("scale,mask", [("div", True), ("mul", False), (None, True)])
def test_attention_pattern_becomes_sdpa(scale, mask, monkeypatch):
    calls = []
    sdpa = OF.scaled_dot_product_attention

    def spy(*a, **kw):
        calls.append(kw["scale"])
        return sdpa(*a, **kw)

    monkeypatch.setattr(OF, "scaled_dot_product_attention", spy)
    q, k, v = (
        torch.randn(2, 2, 5, 4, requires_grad=True),
        torch.randn(2, 2, 6, 4),
        torch.randn(2, 2, 6, 3),
    )
    m = torch.randn(5, 6)
    model = Attention(scale, mask)
    out, ref = _compiled(model)(q, k, v, m), model(q, k, v, m)
    torch.testing.assert_close(out, ref, **TOL)
    assert oc.last_report().fused_kinds() == ["attention"]
    assert calls == [{"div": 0.5, "mul": 0.3, None: 1.0}[scale]]
    (gq,) = torch.autograd.grad(out.sum(), q)  # SDPA's own backward
    (rq,) = torch.autograd.grad(ref.sum(), q)
    torch.testing.assert_close(gq, rq, **TOL)


def test_attention_probabilities_used_twice_stay_unfused():
    q, k, v = torch.randn(1, 3, 4), torch.randn(1, 5, 4), torch.randn(1, 5, 4)
    model = Attention("mul", False, return_probs=True)
    out = _compiled(model)(q, k, v, None)
    torch.testing.assert_close(out, model(q, k, v, None), **TOL)
    rep = oc.last_report()
    assert rep.fused == [] and {op for _, op in rep.routed} == {"matmul", "softmax"}


def test_unsupported_ops_stay_pytorch():
    def fn(x, w):
        y = torch.cumsum(x, 1) + 1.0
        return torch.sigmoid(y @ w).tanh()

    x, w = torch.randn(3, 4), torch.randn(4, 2)
    out = torch.compile(fn, backend="opendnn", fullgraph=True)(x, w)
    torch.testing.assert_close(out, fn(x, w), **TOL)
    rep = oc.last_report()
    left = {t: why for _, t, why in rep.left}
    assert "torch.cumsum" in left and "_operator.add" in left, rep.summary()
    assert left["torch.cumsum"] == "no opendnn operation for this function"
    assert [op for _, op in rep.routed] == ["matmul", "sigmoid", "tanh"], rep.summary()


def test_inplace_add_into_the_residual_is_not_fused():
    """z += conv(x) mutates z: the conv's epilogue must not absorb that add."""

    def fn(x, w, z):
        z += F.conv2d(x, w, padding=1)
        return torch.relu(z)

    x, w, z = torch.randn(1, 2, 3, 3), torch.randn(2, 2, 3, 3), torch.randn(1, 2, 3, 3)
    z2 = z.clone()
    with torch.no_grad():
        out = torch.compile(fn, backend="opendnn", fullgraph=True)(x, w, z)
        ref = fn(x, w, z2)
    torch.testing.assert_close(out, ref, **TOL)
    torch.testing.assert_close(z, z2, **TOL)
    assert oc.last_report().fused == []


def test_declined_op_falls_back_to_pytorch_logged_once(monkeypatch):
    def declined(*a, **kw):
        raise GraphNotSupportedError("test: relu declined", op="relu")

    monkeypatch.setattr(OF, "relu", declined)
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("opendnn")
    monkeypatch.setattr(logger, "handlers", [handler])
    monkeypatch.setenv("OPENDNN_LOG", "info")

    def fn(x):
        return F.relu(x + 1.0)  # relu alone: routed, not fused

    x = torch.randn(3, 4)
    cf = torch.compile(fn, backend="opendnn", fullgraph=True)
    level = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        for _ in range(3):
            torch.testing.assert_close(cf(x), fn(x), rtol=0, atol=0)
    finally:
        logger.setLevel(level)
    assert list(oc.runtime_fallbacks().values()) == [3]
    ((op, reason),) = oc.runtime_fallbacks()
    assert op == "relu" and "test: relu declined" in reason
    msgs = [r.getMessage() for r in records if "runs in PyTorch" in r.getMessage()]
    assert len(msgs) == 1 and "test: relu declined" in msgs[0]


def test_declined_fused_graph_runs_unfused(monkeypatch):
    def declined(*a, **kw):
        raise GraphNotSupportedError("test: no engine", op="fused")

    monkeypatch.setattr(CF, "_conv_graph", declined)
    model = _randomize_bn(SmallCNN()).eval()
    x = torch.randn(2, 3, 4, 4)
    with torch.no_grad():
        out, ref = _compiled(model)(x), model(x)
    torch.testing.assert_close(out, ref, **TOL)
    fused = [k for k in oc.runtime_fallbacks() if k[0].startswith("fused")]
    assert fused == [("fused conv+activation", "NOT_SUPPORTED: fused: test: no engine")]
    assert oc.runtime_fallbacks()[fused[0]] == 2  # both convs


def test_call_module_graphs_from_symbolic_trace(_fresh):
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(4, 3),
        nn.GELU(),
        nn.Softmax(dim=1),
    )
    model = _randomize_bn(model).eval()
    x = torch.randn(2, 3, 4, 4)
    gm = torch.fx.symbolic_trace(copy.deepcopy(model))
    compiled = oc.backend(gm, [x])
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), **TOL)
    rep = oc.last_report()
    assert len(rep.modules) == 6, rep.summary()  # all but BatchNorm2d and Flatten
    assert rep.fused_kinds() == ["linear+gelu"], rep.summary()
    assert {op for _, op in rep.routed} == {"conv2d", "relu", "max_pool2d", "softmax"}
    assert {why for _, _, why in rep.left} == {
        "BatchNorm2d module: not routed",
        "Flatten module: not routed",
    }


def test_default_backend_aot_eager_traces_opendnn_functional():
    """torch.compile with a default backend over opendnn's functional layer: AOTAutograd
    traces its custom ops through their fake implementations (CPU; inductor's C++ build
    takes ~40 s on a 2-core CI box: tests/torch/test_gpu_torch_compile.py runs inductor)."""

    def fn(x, w, b, lw):
        y = OF.relu(OF.conv2d(x, w, b, padding=1))
        return OF.softmax(OF.linear(y.flatten(1), lw), dim=-1)

    x, w, b, lw = (
        torch.randn(2, 3, 4, 4, requires_grad=True),
        torch.randn(4, 3, 3, 3),
        torch.randn(4),
        torch.randn(5, 64),
    )
    out = torch.compile(fn, backend="aot_eager", fullgraph=True)(x, w, b, lw)
    ref = F.softmax(F.linear(F.relu(F.conv2d(x, w, b, padding=1)).flatten(1), lw), dim=-1)
    torch.testing.assert_close(out, ref, **TOL)
    (g,) = torch.autograd.grad((out * ref.detach()).sum(), x)
    (r,) = torch.autograd.grad((ref * ref.detach()).sum(), x)
    torch.testing.assert_close(g, r, **TOL)


def test_modes(_fresh):
    """mode=None / "default" / "reduce-overhead" are accepted (reduce-overhead needs CUDA
    inputs for its graphs: CPU inputs run as the default mode, same results); any other
    mode, or options, is a typed error naming torch.compile and the rule."""
    from _util import expect_error

    from opendnn.errors import BadParamError, Status

    model = _randomize_bn(SmallCNN()).eval()
    x = torch.randn(2, 3, 4, 4)
    with torch.no_grad():
        ref = model(x)
        for mode in ("default", "reduce-overhead"):
            torch._dynamo.reset()
            out = torch.compile(model, backend="opendnn", mode=mode, fullgraph=True)(x)
            torch.testing.assert_close(out, ref, **TOL)
    gm = torch.fx.symbolic_trace(model)
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        lambda: oc.backend(gm, [x], mode="max-autotune"),
        "torch.compile",
        "max-autotune",
    )
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        lambda: oc.backend(gm, [x], options={"x": 1}),
        "torch.compile",
        "options",
    )
    _no_fallbacks()
