"""GPU checks of opendnn.torch's drop-in modules, convert() and enable() (pytest -m gpu):
a small ResNet-style CNN (fp32, bf16, bf16 autocast, channels_last) and a pre-norm
transformer block (bf16) give PyTorch's outputs and gradients, with no fallback."""

import copy
import importlib

import pytest
import torch
import torch.nn as nn
from _util import true_fp32_and_clean

from opendnn.torch.convert import convert

E = importlib.import_module("opendnn.torch.enable")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

TOL = {torch.float32: 1e-4, torch.bfloat16: 3e-2, torch.float16: 5e-3}


@pytest.fixture(autouse=True)
def _no_tf32_and_clean():
    """PyTorch's reference in true float32 (opendnn's allow_tf32 is off by default)."""
    with true_fp32_and_clean():
        yield


def _relerr(out, ref):
    out, ref = out.double(), ref.double()
    assert not torch.isnan(out).any()
    return ((out - ref).norm() / max(ref.norm().item(), 1e-30)).item()


def _cnn():
    return nn.Sequential(
        nn.Conv2d(3, 32, 7, stride=2, padding=3, bias=False),
        nn.BatchNorm2d(32),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(3, stride=2, padding=1),
        nn.Conv2d(32, 64, 3, padding=1, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, 10),
    )


def _run(model, x, how, autocast):
    x = x.clone().requires_grad_()
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
        if how == "enabled":
            with E.enable():
                y = model(x)
        else:
            y = model(x)
    y.float().square().mean().backward()
    return y, x.grad


def _grads(model):
    return [p.grad for p in model.parameters()]


@pytest.mark.parametrize("how", ["converted", "enabled"])
@pytest.mark.parametrize(
    "dtype,autocast,channels_last",
    [
        (torch.float32, False, False),
        (torch.float32, False, True),
        (torch.bfloat16, False, True),
        (torch.float32, True, True),
    ],
)
def test_cnn(how, dtype, autocast, channels_last):
    """Against float32 PyTorch on the same (rounded) weights and inputs: opendnn's error at
    most twice PyTorch's own in the same precision, or the data type's tolerance."""
    torch.manual_seed(0)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    low = torch.bfloat16 if autocast else dtype
    ref = _cnn().cuda()
    with torch.no_grad():
        for p in ref.parameters():
            p.copy_(p.to(low))
    same = copy.deepcopy(ref).to(dtype).to(memory_format=fmt)  # PyTorch, same precision
    model = copy.deepcopy(same)
    if how == "converted":
        convert(model)
    x = torch.randn(8, 3, 64, 64, device="cuda").to(low)
    y_ref, dx_ref = _run(ref, x.float(), "pytorch", False)
    y_same, dx_same = _run(same, x.to(dtype).to(memory_format=fmt), "pytorch", autocast)
    y, dx = _run(model, x.to(dtype).to(memory_format=fmt), how, autocast)
    assert E.fallbacks() == {}
    assert y.dtype == y_same.dtype
    if channels_last:
        assert dx.is_contiguous(memory_format=torch.channels_last)
    tol = TOL[low]
    pairs = [
        ("output", y, y_same, y_ref),
        ("input grad", dx, dx_same, dx_ref),
        ("running var", model[1].running_var, same[1].running_var, ref[1].running_var),
    ]
    pairs += [
        (f"grad of {name}", g, g_same, g_ref)
        for name, g, g_same, g_ref in zip(
            [n for n, _ in ref.named_parameters()], _grads(model), _grads(same), _grads(ref)
        )
    ]
    for what, ours, theirs, exact in pairs:
        bound = max(tol, 2 * _relerr(theirs, exact))
        assert _relerr(ours, exact) < bound, what


class _Block(nn.Module):
    """Pre-norm transformer block: x + MHA(LN(x)), then + MLP(LN(.)) with GELU."""

    def __init__(self, e=256, h=4):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(e), nn.LayerNorm(e)
        self.attn = nn.MultiheadAttention(e, h, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(e, 4 * e), nn.GELU(), nn.Linear(4 * e, e))

    def forward(self, x, causal_mask):
        a = self.ln1(x)
        x = x + self.attn(a, a, a, need_weights=False, attn_mask=causal_mask, is_causal=True)[0]
        return x + self.mlp(self.ln2(x))


@pytest.mark.parametrize("how", ["converted", "enabled"])
def test_transformer_block_bf16(how):
    torch.manual_seed(0)
    ref = _Block().cuda()  # float32 reference on bf16 weights
    with torch.no_grad():
        for p in ref.parameters():
            p.copy_(p.bfloat16())
    model = copy.deepcopy(ref).bfloat16()
    if how == "converted":
        convert(model)
    length = 128
    mask = torch.ones(length, length, dtype=torch.bool, device="cuda").triu(1)
    x = torch.randn(4, length, 256, device="cuda").bfloat16()
    x_ref, xb = x.float().requires_grad_(), x.clone().requires_grad_()
    y_ref = ref(x_ref, mask)
    if how == "enabled":
        with E.enable():
            y = model(xb, mask)
    else:
        y = model(xb, mask)
    dy = torch.randn_like(y_ref)
    y_ref.backward(dy)
    y.backward(dy.bfloat16())
    assert E.fallbacks() == {}
    assert _relerr(y, y_ref) < TOL[torch.bfloat16]
    assert _relerr(xb.grad, x_ref.grad) < TOL[torch.bfloat16]
    for (name, p_ref), p in zip(ref.named_parameters(), model.parameters()):
        assert _relerr(p.grad, p_ref.grad) < TOL[torch.bfloat16], name


def test_transformer_encoder_layer_enabled_bf16():
    """PyTorch's own TransformerEncoderLayer (training mode: no fused fast path) under
    enable(): its linear, layer_norm, sdpa, gelu and dropout calls go to opendnn."""
    torch.manual_seed(0)
    ref = nn.TransformerEncoderLayer(
        256, 4, 1024, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
    ).cuda()
    model = copy.deepcopy(ref).bfloat16()
    with torch.no_grad():
        for p_ref, p in zip(ref.parameters(), model.parameters()):
            p_ref.copy_(p.float())
    x = torch.randn(4, 128, 256, device="cuda").bfloat16()
    y_ref = ref(x.float())
    with E.enable():
        y = model(x)
    assert E.fallbacks() == {}
    assert _relerr(y, y_ref) < TOL[torch.bfloat16]
