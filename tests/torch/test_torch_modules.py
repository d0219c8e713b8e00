"""opendnn.torch drop-in modules and convert(): PyTorch's constructor and state_dict layout,
forward and backward equal to PyTorch's module, the fallback policy, and convert()'s
identity guarantees."""

from __future__ import annotations

import copy
import importlib
import io

import pytest
import torch
import torch.nn as nn
from _util import close_f32 as close

from opendnn.errors import BadParamError, GraphNotSupportedError
from opendnn.torch import functional as OF
from opendnn.torch import modules as M
from opendnn.torch.convert import convert, revert

E = importlib.import_module("opendnn.torch.enable")


@pytest.fixture(autouse=True)
def _fresh_fallbacks():
    E.clear_fallbacks()
    yield
    E.clear_fallbacks()


def spy(monkeypatch, name):
    """Count the calls of OF.<name> (still running it)."""
    original = getattr(OF, name)
    calls = []

    def counted(*args, **kwargs):
        calls.append((args, kwargs))
        return original(*args, **kwargs)

    monkeypatch.setattr(OF, name, counted)
    return calls


def _randomize(module, rng):
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(rng.rand(p.shape, low=0.3, high=1.5))
        for name, b in module.named_buffers():
            if name.endswith("running_var"):
                b.copy_(rng.rand(b.shape, low=0.5, high=1.5, positive=True))
            elif name.endswith("running_mean"):
                b.copy_(rng.rand(b.shape, low=0.1, high=0.5))


# (name, constructor args, kwargs, input shape, OF function, has parameters -> backward)
CASES = [
    ("Conv1d", (3, 4, 3), dict(padding=1), (2, 3, 7), "conv1d"),
    ("Conv2d", (3, 4, 3), dict(stride=2, padding=1), (2, 3, 7, 6), "conv2d"),
    ("Conv2d", (4, 6, 3), dict(groups=2, dilation=2, bias=False), (1, 4, 7, 7), "conv2d"),
    ("Conv2d", (3, 4, 3), dict(padding=1, padding_mode="reflect"), (2, 3, 5, 6), "conv2d"),
    ("Conv2d", (3, 2, 3), dict(padding=(1, 2), padding_mode="circular"), (1, 3, 5, 6), "conv2d"),
    (
        "Conv2d",
        (3, 2, (3, 2)),
        dict(padding="same", padding_mode="replicate"),
        (1, 3, 5, 6),
        "conv2d",
    ),
    ("Conv3d", (2, 3, 3), dict(padding=1), (1, 2, 4, 5, 3), "conv3d"),
    ("Linear", (5, 3), {}, (2, 4, 5), "linear"),
    ("BatchNorm1d", (3,), {}, (4, 3, 5), "batch_norm"),
    ("BatchNorm2d", (3,), {}, (2, 3, 4, 5), "batch_norm"),
    ("BatchNorm3d", (2,), dict(momentum=None), (2, 2, 3, 3, 2), "batch_norm"),
    ("LayerNorm", ((4, 5),), {}, (2, 3, 4, 5), "layer_norm"),
    ("GroupNorm", (2, 4), {}, (2, 4, 3, 5), "group_norm"),
    ("InstanceNorm1d", (3,), dict(affine=True), (2, 3, 7), "instance_norm"),
    ("InstanceNorm2d", (3,), dict(track_running_stats=True), (2, 3, 4, 5), "instance_norm"),
    ("InstanceNorm3d", (2,), dict(affine=True), (1, 2, 3, 4, 3), "instance_norm"),
    ("RMSNorm", (5,), dict(eps=1e-6), (2, 3, 5), "rms_norm"),
    ("MaxPool1d", (3, 2), dict(padding=1), (2, 3, 9), "max_pool1d"),
    ("MaxPool2d", (2,), {}, (2, 3, 4, 6), "max_pool2d"),
    ("MaxPool3d", (2,), {}, (1, 2, 4, 4, 2), "max_pool3d"),
    ("AvgPool1d", (3, 2), dict(padding=1, count_include_pad=False), (2, 3, 9), "avg_pool1d"),
    ("AvgPool2d", (3, 2), dict(padding=1), (2, 3, 7, 6), "avg_pool2d"),
    ("AvgPool3d", (2,), {}, (1, 2, 4, 4, 2), "avg_pool3d"),
    ("AdaptiveAvgPool2d", ((1, 1),), {}, (2, 3, 5, 7), "adaptive_avg_pool2d"),
    ("ReLU", (), {}, (2, 3, 5), "relu"),
    ("ReLU6", (), {}, (2, 3, 5), "hardtanh"),
    ("Hardtanh", (-0.5, 0.7), {}, (2, 3, 5), "hardtanh"),
    ("GELU", (), dict(approximate="tanh"), (2, 3, 5), "gelu"),
    ("SiLU", (), {}, (2, 3, 5), "silu"),
    ("Sigmoid", (), {}, (2, 3, 5), "sigmoid"),
    ("Tanh", (), {}, (2, 3, 5), "tanh"),
    ("ELU", (0.5,), {}, (2, 3, 5), "elu"),
    ("LeakyReLU", (0.2,), {}, (2, 3, 5), "leaky_relu"),
    ("Softplus", (2.0, 1.0), {}, (2, 3, 5), "softplus"),
    ("Softmax", (1,), {}, (2, 3, 5), "softmax"),
    ("LogSoftmax", (-1,), {}, (2, 3, 5), "log_softmax"),
    ("Dropout", (0.25,), {}, (2, 3, 5), "dropout"),
]


def _case_id(case):
    name, args, kwargs = case[:3]
    return name + "".join(f"-{k}={v}" for k, v in kwargs.items() if k != "padding")


def test_every_listed_module_has_a_drop_in():
    names = {c[0] for c in CASES} | {"MultiheadAttention"}
    assert {cls.__name__ for cls in M.DROP_IN} == names
    for torch_cls, cls in M.DROP_IN.items():
        assert issubclass(cls, torch_cls) and cls.__module__.startswith("opendnn.torch.")
        assert getattr(importlib.import_module(cls.__module__), cls.__qualname__) is cls


@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
def test_drop_in_matches_pytorch(case, rng, monkeypatch):
    name, args, kwargs, shape, of_name = case
    torch.manual_seed(rng.seed)
    ref, mod = getattr(nn, name)(*args, **kwargs), getattr(M, name)(*args, **kwargs)
    assert isinstance(mod, getattr(nn, name)) and repr(mod) == repr(ref)
    sd_ref, sd = ref.state_dict(), mod.state_dict()
    assert [(k, v.shape, v.dtype) for k, v in sd.items()] == [
        (k, v.shape, v.dtype) for k, v in sd_ref.items()
    ]
    _randomize(ref, rng)
    mod.load_state_dict(ref.state_dict())
    if name == "Dropout":  # random masks differ: eval mode is the identity
        ref.eval(), mod.eval()

    calls = spy(monkeypatch, of_name)
    x = rng.rand(shape).requires_grad_()
    x2 = x.detach().clone().requires_grad_()
    y_ref, y = ref(x), mod(x2)
    assert len(calls) == 1, f"{name} did not run OF.{of_name}"
    assert E.fallbacks() == {}
    close(y, y_ref, f"{name} forward")
    for (k, b_ref), b in zip(ref.named_buffers(), mod.buffers()):
        close(b, b_ref, f"{name} buffer {k}")
    if not list(ref.parameters()):
        return  # parameterless: backward is the functional's
    dy = rng.rand(y_ref.shape)
    y_ref.backward(dy)
    y.backward(dy)
    close(x2.grad, x.grad, f"{name} input grad")
    for (k, p_ref), p in zip(ref.named_parameters(), mod.parameters()):
        close(p.grad, p_ref.grad, f"{name} grad of {k}")


def test_state_dict_loads_both_ways(rng):
    torch.manual_seed(rng.seed)
    for torch_cls, cls, args in (
        (nn.Conv2d, M.Conv2d, (3, 4, 3)),
        (nn.BatchNorm2d, M.BatchNorm2d, (4,)),
        (nn.MultiheadAttention, M.MultiheadAttention, (16, 2)),
    ):
        a, b = torch_cls(*args), cls(*args)
        _randomize(a, rng)
        b.load_state_dict(a.state_dict())
        c = torch_cls(*args)
        c.load_state_dict(b.state_dict())
        for (k, va), vc in zip(a.state_dict().items(), c.state_dict().values()):
            assert torch.equal(va, vc), k


def test_batch_norm_momentum_none_and_eval(rng):
    torch.manual_seed(rng.seed)
    ref, mod = nn.BatchNorm2d(3, momentum=None), M.BatchNorm2d(3, momentum=None)
    mod.load_state_dict(ref.state_dict())
    for step in range(2):
        x = rng.rand((2, 3, 3, 4))
        close(mod(x), ref(x), f"train step {step}")
    assert int(mod.num_batches_tracked) == 2
    close(mod.running_mean, ref.running_mean)
    close(mod.running_var, ref.running_var)
    ref.eval(), mod.eval()
    x = rng.rand((2, 3, 3, 4))
    close(mod(x), ref(x), "eval")
    untracked = M.BatchNorm2d(3, track_running_stats=False)
    close(untracked(x), nn.BatchNorm2d(3, track_running_stats=False)(x), "untracked")


def test_instance_norm_unbatched(rng):
    ref, mod = nn.InstanceNorm1d(3), M.InstanceNorm1d(3)
    x = rng.rand((3, 6))
    close(mod(x), ref(x))


# ---------------------------------------------------------------- fallback policy


def _declining(calls, reason="no engine takes it (test)"):
    def fake(*args, **kwargs):
        calls.append(args)
        raise GraphNotSupportedError(reason, op="fake")

    return fake


def test_fallback_runs_pytorch_and_logs_once(rng, monkeypatch, opendnn_log):
    calls = []
    monkeypatch.setattr(OF, "conv2d", _declining(calls))
    torch.manual_seed(rng.seed)
    ref = nn.Conv2d(3, 4, 3, padding=1)
    mod = convert(copy.deepcopy(ref))
    x = rng.rand((2, 3, 5, 5))
    for _ in range(3):
        torch.testing.assert_close(mod(x), ref(x), rtol=0, atol=0)
    assert len(calls) == 1, "a declined call is remembered, not retried"
    lines = [m for m in opendnn_log if "falls back" in m]
    assert len(lines) == 1 and "Conv2d" in lines[0] and "no engine takes it" in lines[0]
    (((caller, reason), count),) = E.fallbacks().items()
    assert caller == "Conv2d" and "no engine takes it" in reason and count == 3
    mod(rng.rand((1, 3, 4, 4)))  # another problem: asked again
    assert len(calls) == 2 and len([m for m in opendnn_log if "falls back" in m]) == 1


def test_fallback_batch_norm_counts_batches_once(rng, monkeypatch):
    monkeypatch.setattr(OF, "batch_norm", _declining([]))
    ref, mod = nn.BatchNorm2d(3), M.BatchNorm2d(3)
    x = rng.rand((2, 3, 4, 4))
    torch.testing.assert_close(mod(x), ref(x))
    assert int(mod.num_batches_tracked) == 1
    torch.testing.assert_close(mod.running_mean, ref.running_mean)


def test_other_errors_propagate(rng, monkeypatch):
    def bad(*args, **kwargs):
        raise BadParamError("bad weight", op="linear")

    monkeypatch.setattr(OF, "linear", bad)
    with pytest.raises(BadParamError, match="bad weight"):
        M.Linear(3, 2)(rng.rand((2, 3)))
    assert E.fallbacks() == {}


def test_max_pool_return_indices(rng):
    ref, mod = nn.MaxPool2d(2, return_indices=True), M.MaxPool2d(2, return_indices=True)
    x = rng.rand((1, 2, 4, 6))
    (y_ref, i_ref), (y, i) = ref(x), mod(x)  # opendnn or its fallback: PyTorch's result
    close(y, y_ref)
    assert torch.equal(i, i_ref)


# ---------------------------------------------------------------- MultiheadAttention
# float16 with head dim 8: opendnn's attention engines take half types, head dims of 8k.
# The reference is PyTorch's module in float32 on the same (float16-rounded) weights.


def _mha_pair(rng, *args, dtype=torch.float32, **kwargs):
    torch.manual_seed(rng.seed)
    ref = nn.MultiheadAttention(*args, **kwargs)
    with torch.no_grad():  # xavier-like magnitudes: softmax not saturated
        for p in ref.parameters():
            p.copy_(rng.rand(p.shape, low=0.05, high=0.4).to(dtype))
    mod = M.MultiheadAttention(*args, **kwargs, dtype=dtype)
    mod.load_state_dict(ref.state_dict())
    return ref, mod


def close16(actual, expected, what=""):
    scale = max(1.0, float(expected.detach().abs().max()))
    torch.testing.assert_close(actual.float(), expected, rtol=2e-2, atol=2e-2 * scale, msg=what)


def _causal(length):
    return torch.ones(length, length, dtype=torch.bool).triu(1)


MHA_CASES = {
    "self-batch-first": (dict(batch_first=True), (2, 5), None, {}),
    "self-seq-first-eval": (dict(), (5, 2), None, dict(eval=True)),
    "cross-kdim-vdim-kpm": (dict(kdim=6, vdim=3, bias=False), (4, 2), 6, dict(kpm=True)),
    "cross-bool-mask-kpm": (dict(batch_first=True), (2, 4), 5, dict(kpm=True, bool_mask=True)),
    "float-3d-mask": (dict(batch_first=True), (2, 4), 5, dict(float_mask=True)),
    "causal": (dict(batch_first=True), (2, 5), None, dict(causal=True)),
    "causal-kpm": (dict(), (5, 2), None, dict(causal=True, kpm=True)),
    "unbatched-kpm": (dict(), (5,), 3, dict(kpm=True)),
}
EMBED, HEADS = 16, 2


@pytest.mark.parametrize("case", list(MHA_CASES))
def test_multihead_attention(case, rng, monkeypatch):
    ctor, qshape, source, opts = MHA_CASES[case]
    dt = torch.float16
    ref, mod = _mha_pair(rng, EMBED, HEADS, dtype=dt, **ctor)
    if opts.get("eval"):
        ref.eval(), mod.eval()
    batch_first = ctor.get("batch_first", False)
    batched = len(qshape) == 2
    n = (qshape[0] if batch_first else qshape[1]) if batched else 1
    length = qshape[1] if batch_first else qshape[0]
    query = rng.rand(qshape + (EMBED,), dtype=dt)
    if source is None:
        key = value = query
        s = length
    else:
        s = source
        kshape = ((n, s) if batch_first else (s, n)) if batched else (s,)
        key = rng.rand(kshape + (ctor.get("kdim", EMBED),), dtype=dt)
        value = rng.rand(kshape + (ctor.get("vdim", EMBED),), dtype=dt)
    kw = dict(need_weights=False)
    if opts.get("kpm"):
        kpm = rng.bools((n, s) if batched else (s,))
        kpm[..., 0] = False  # no fully masked row
        kw["key_padding_mask"] = kpm
    if opts.get("bool_mask"):
        mask = rng.bools((length, s))
        mask[:, 0] = False
        kw["attn_mask"] = mask
    if opts.get("float_mask"):
        kw["attn_mask"] = rng.rand((n * HEADS, length, s), low=0.0, high=1.0)
    if opts.get("causal"):
        kw["attn_mask"], kw["is_causal"] = _causal(length), True

    sdpa, linear = spy(monkeypatch, "scaled_dot_product_attention"), spy(monkeypatch, "linear")
    q_ref = query.float().requires_grad_()
    q = query.clone().requires_grad_()
    k_ref, v_ref = (q_ref, q_ref) if source is None else (key.float(), value.float())
    k, v = (q, q) if source is None else (key, value)
    kw16 = dict(kw)
    if opts.get("float_mask"):
        kw16["attn_mask"] = kw["attn_mask"].to(dt)
        kw["attn_mask"] = kw16["attn_mask"].float()
    out_ref, w_ref = ref(q_ref, k_ref, v_ref, **kw)
    out, w = mod(q, k, v, **kw16)
    assert w is None and w_ref is None and out.dtype == dt and out.shape == out_ref.shape
    assert len(sdpa) == 1
    assert len(linear) == (2 if source is None else 4)
    assert E.fallbacks() == {}
    close16(out, out_ref, "output")
    if not opts.get("eval"):
        dy = rng.rand(out_ref.shape, dtype=dt)
        out_ref.backward(dy.float())
        out.backward(dy)
        close16(q.grad, q_ref.grad, "query grad")
        for (name, p_ref), p in zip(ref.named_parameters(), mod.parameters()):
            close16(p.grad, p_ref.grad, f"grad of {name}")


def test_multihead_attention_pytorch_paths(rng, monkeypatch, opendnn_log):
    sdpa = spy(monkeypatch, "scaled_dot_product_attention")
    ref, mod = _mha_pair(rng, EMBED, HEADS, batch_first=True)
    q = rng.rand((2, 4, EMBED))
    for _ in range(2):  # need_weights=True (the default): PyTorch's forward
        (out, w), (out_ref, w_ref) = mod(q, q, q), ref(q, q, q)
        close(out, out_ref)
        close(w, w_ref)
    ref, mod = _mha_pair(rng, EMBED, HEADS, batch_first=True, add_bias_kv=True, add_zero_attn=True)
    close(mod(q, q, q, need_weights=False)[0], ref(q, q, q, need_weights=False)[0])
    ref, mod = _mha_pair(rng, EMBED, HEADS, batch_first=True, add_zero_attn=True)
    close(mod(q, q, q, need_weights=False)[0], ref(q, q, q, need_weights=False)[0])
    assert sdpa == []
    reasons = {(c, r.split("=")[0]): n for (c, r), n in E.fallbacks().items()}
    assert reasons == {
        ("MultiheadAttention", "need_weights"): 2,
        ("MultiheadAttention", "add_bias_kv"): 1,
        ("MultiheadAttention", "add_zero_attn"): 1,
    }
    assert len([m for m in opendnn_log if "falls back" in m]) == 3


def test_multihead_attention_declined_attention(rng, monkeypatch):
    """The attention declines (as for float32 inputs): PyTorch runs the whole forward."""
    monkeypatch.setattr(OF, "scaled_dot_product_attention", _declining([]))
    ref, mod = _mha_pair(rng, EMBED, HEADS)
    q = rng.rand((4, 2, EMBED))
    ref.train(), mod.train()
    close(mod(q, q, q, need_weights=False)[0], ref(q, q, q, need_weights=False)[0])
    ((caller, _),) = E.fallbacks()
    assert caller == "MultiheadAttention"


def test_multihead_attention_errors(rng):
    _, mod = _mha_pair(rng, EMBED, HEADS, batch_first=True)
    q = rng.rand((2, 4, EMBED))
    with pytest.raises(RuntimeError, match="Need attn_mask"):
        mod(q, q, q, need_weights=False, is_causal=True)
    with pytest.raises(RuntimeError, match="2D attn_mask"):
        mod(q, q, q, need_weights=False, attn_mask=torch.zeros(4, 5, dtype=torch.bool))


# ---------------------------------------------------------------- convert


class _MyConv(nn.Conv2d):
    pass


def _model():
    return nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.Sequential(nn.Conv2d(4, 4, 1), nn.GELU(), _MyConv(4, 4, 1)),
        nn.ConvTranspose2d(4, 2, 2),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(2, 3),
    )


def test_convert_swaps_in_place_keeping_tensors():
    model = _model().to(torch.float64).eval()
    params = {k: v for k, v in model.named_parameters()}
    buffers = {k: v for k, v in model.named_buffers()}
    modules = dict(model.named_modules())
    seen = []
    model[2].register_forward_hook(lambda m, i, o: seen.append(type(m)))
    assert convert(model) is model
    assert {k: v for k, v in model.named_parameters()}.keys() == params.keys()
    assert all(v is params[k] for k, v in model.named_parameters())
    assert all(v is buffers[k] for k, v in model.named_buffers())
    assert all(v is modules[k] for k, v in model.named_modules())
    kinds = {k: type(v).__module__.split(".")[0] for k, v in model.named_modules()}
    assert [k for k, v in kinds.items() if v == "opendnn"] == [
        "0",
        "1",
        "2",
        "3.0",
        "3.1",
        "5",
        "7",
    ]
    assert not model.training and model[1].running_mean.dtype == torch.float64
    model(torch.randn(1, 3, 4, 4, dtype=torch.float64))
    assert seen == [M.ReLU], "hooks stay"
    assert convert(model) is model and type(model[0]) is M.Conv2d  # idempotent
    revert(model)
    assert all(
        type(v).__module__.startswith("torch.") or isinstance(v, _MyConv) for v in model.modules()
    )


def test_convert_copy_skip_and_errors():
    model = _model()
    copied = convert(model, inplace=False, skip=[nn.ReLU, "3"])
    assert type(model[0]) is nn.Conv2d and copied is not model
    assert type(copied[0]) is M.Conv2d and type(copied[2]) is nn.ReLU
    assert type(copied[3][0]) is nn.Conv2d and type(copied[3][1]) is nn.GELU
    assert copied[0].weight is not model[0].weight
    assert type(convert(_model(), skip=[M.BatchNorm2d])[1]) is nn.BatchNorm2d
    with pytest.raises(BadParamError, match="not modules of the model"):
        convert(_model(), skip=["3.7"])
    with pytest.raises(BadParamError, match="types or names"):
        convert(_model(), skip=[3])
    with pytest.raises(BadParamError, match="torch.nn.Module"):
        convert(lambda x: x)


def test_converted_model_saves_and_trains(rng):
    torch.manual_seed(rng.seed)
    model = convert(nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 2)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = model[0].weight.detach().clone()
    model(rng.rand((5, 4))).square().sum().backward()
    opt.step()
    assert not torch.equal(model[0].weight, before)
    buf = io.BytesIO()
    torch.save(model, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    assert type(loaded[0]) is M.Linear and torch.equal(loaded[0].weight, model[0].weight)
