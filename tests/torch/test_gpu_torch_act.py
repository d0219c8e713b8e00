"""GPU checks of opendnn.torch's activations, softmax / log_softmax, dropout and
scaled_dot_product_attention (pytest -m gpu): CUDA bfloat16 / float16 / float32 at
realistic sizes against float64 PyTorch, forward and gradients, channels_last and BSHD
layouts, autocast, dropout statistics and its mask against the Philox reference (drawn
from the CUDA generator), and the engine each kept graph chose (never the reference)."""

import math

import pytest
import torch
import torch.nn.functional as F

import opendnn.torch.activation as A
from opendnn.ops import attention as ref_attention
from opendnn.ops import dropout as philox
from opendnn.torch import _graphs
from opendnn.torch.attention import scaled_dot_product_attention as sdpa
from opendnn.torch.dropout import RNG_HIGH, dropout
from opendnn.torch.softmax import log_softmax, softmax

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

DEV = "cuda"
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}


def _relerr(out, ref):
    out, ref = out.double(), ref.double()
    assert not torch.isnan(out).any(), "NaN in the output"
    scale = ref.norm().item()
    return ((out - ref).norm() / scale).item() if scale else out.norm().item()


def _engines(graph_name: str) -> set:
    """Plan names of the kept graphs named ``graph_name`` (the op's key[0])."""
    return {
        b.graph.selected_plan().name.split("#")[0]
        for b in list(_graphs._cache.values())
        if b.graph.name == graph_name
    }


def _randn(shape, dtype, scale=1.0):
    return (torch.randn(shape, device=DEV, dtype=torch.float32) * scale).to(dtype)


# ---- activations ---------------------------------------------------------------------------------
ACTS = [
    ("relu", {}),
    ("leaky_relu", dict(negative_slope=0.1)),
    ("elu", {}),
    ("gelu", {}),
    ("gelu", dict(approximate="tanh")),
    ("silu", {}),
    ("sigmoid", {}),
    ("tanh", {}),
    ("softplus", {}),
    ("mish", {}),
    ("hardswish", {}),
    ("hardsigmoid", {}),
    ("hardtanh", {}),
    ("relu6", {}),
]


@pytest.mark.parametrize(
    "name,kw", ACTS, ids=[n + "".join(map(str, kw.values())) for n, kw in ACTS]
)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
def test_activation(name, kw, dtype):
    x = _randn((64, 4097), dtype, 4.0).requires_grad_()
    y = getattr(A, name)(x, **kw)
    xr = x.detach().double().requires_grad_()
    yr = getattr(F, name)(xr, **kw)
    assert _relerr(y, yr) < TOL[dtype]
    dy = _randn(y.shape, dtype)
    (g,) = torch.autograd.grad(y, x, dy)
    (gr,) = torch.autograd.grad(yr, xr, dy.double())
    assert _relerr(g, gr) < TOL[dtype]
    assert _engines("opendnn.activation") == {"runtime_fusion"}
    assert _engines("opendnn.activation_backward") == {"runtime_fusion"}


@pytest.mark.parametrize("name", ["relu", "gelu", "silu", "hardswish"])
def test_activation_channels_last_and_inplace(name):
    """NCHW-strided-as-NHWC bf16 activations keep the layout; relu / silu in place under
    autograd give PyTorch's gradients."""
    x = _randn((8, 64, 28, 28), torch.bfloat16, 3.0).to(memory_format=torch.channels_last)
    y = getattr(A, name)(x)
    assert y.is_contiguous(memory_format=torch.channels_last)
    assert _relerr(y, getattr(F, name)(x.double())) < TOL[torch.bfloat16]
    if name in ("relu", "silu"):
        leaf = x.clone().requires_grad_()
        h = leaf * 2
        assert getattr(A, name)(h, inplace=True) is h
        (g,) = torch.autograd.grad(h.float().square().sum(), leaf)
        lr = x.double().requires_grad_()
        (gr,) = torch.autograd.grad(getattr(F, name)(lr * 2).square().sum(), lr)
        assert _relerr(g, gr) < 2e-2


# ---- softmax -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "shape,dim", [((4096, 4096), -1), ((32, 1000, 3), 1), ((7, 1), -1), ((64, 50257), -1)], ids=str
)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_softmax(shape, dim, dtype, log):
    x = _randn(shape, dtype, 3.0).requires_grad_()
    y = (log_softmax if log else softmax)(x, dim)
    xr = x.detach().double().requires_grad_()
    yr = (F.log_softmax if log else F.softmax)(xr, dim)
    assert _relerr(y, yr) < TOL[dtype]
    dy = _randn(shape, dtype)
    (g,) = torch.autograd.grad(y, x, dy)
    (gr,) = torch.autograd.grad(yr, xr, dy.double())
    assert _relerr(g, gr) < 2 * TOL[dtype]
    assert _engines("opendnn.softmax") == {"softmax"}


def test_softmax_autocast_and_dtype():
    """CUDA autocast: a half input gives float32, as PyTorch's; dtype= likewise."""
    x = _randn((512, 3000), torch.float16, 3.0).requires_grad_()
    with torch.autocast("cuda", dtype=torch.float16):
        y, want = softmax(x, -1), F.softmax(x, -1)
    assert y.dtype == want.dtype == torch.float32
    assert _relerr(y, F.softmax(x.double(), -1)) < 1e-5
    (g,) = torch.autograd.grad(y.sum(), x)
    assert g.dtype == torch.float16
    z = log_softmax(x.detach(), 0, dtype=torch.float32)
    assert z.dtype == torch.float32 and _relerr(z, F.log_softmax(x.double(), 0)) < 1e-5


# ---- dropout -------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("p", [0.1, 0.5])
def test_dropout_statistics_and_masks(dtype, p):
    n = 1 << 22
    x = torch.ones(n, device=DEV, dtype=dtype, requires_grad=True)
    torch.manual_seed(1)
    y = dropout(x * 1, p)
    dropped = (y == 0).double().mean().item()
    assert abs(dropped - p) < 6 * math.sqrt(p * (1 - p) / n)
    (g,) = torch.autograd.grad(y, x, torch.ones_like(y))
    assert torch.equal(g == 0, y == 0)  # the backward regenerates the mask
    torch.manual_seed(1)
    assert torch.equal(dropout(x.detach(), p), y.detach())
    assert _engines("opendnn.dropout") == {"dropout"}


def test_dropout_mask_is_the_philox_stream():
    """(seed, offset) from the CUDA generator; a channels_last input by logical index."""
    x = _randn((4, 8, 9, 10), torch.bfloat16).to(memory_format=torch.channels_last)
    torch.manual_seed(7)
    seed, offset = torch.randint(0, RNG_HIGH, (2,), dtype=torch.int64, device=DEV).tolist()
    keep = torch.from_numpy(philox.mask(seed, offset, tuple(x.shape), 0.25)).to(DEV)
    torch.manual_seed(7)
    y = dropout(x, 0.25)
    assert y.is_contiguous(memory_format=torch.channels_last)
    assert _relerr(y, x.double() * keep / 0.75) < TOL[torch.bfloat16]


# ---- attention -----------------------------------------------------------------------------------
ATTN = [  # (id, q shape, S, Hk, head dim v, mask, causal, layout)
    ("s1024_d64", (4, 8, 1024, 64), 1024, 8, 64, None, False, "bhsd"),
    ("causal_l512_s2048_d128", (2, 16, 512, 128), 2048, 16, 128, None, True, "bhsd"),
    ("gqa_causal_d128", (1, 32, 1024, 128), 1024, 8, 128, None, True, "bhsd"),
    ("key_padding_bool", (2, 8, 333, 64), 333, 8, 64, "bool", False, "bhsd"),
    ("float_mask_grad", (2, 4, 256, 64), 300, 4, 64, "float", False, "bhsd"),
    ("bshd_d96", (2, 12, 300, 96), 300, 12, 96, None, False, "bshd"),
]


def _qkv(qs, s, hk, dv, dtype, layout):
    b, h, length, e = qs
    shapes = ((b, h, length, e), (b, hk, s, e), (b, hk, s, dv))
    if layout == "bshd":
        return [
            _randn((a, c, bb, d), dtype).transpose(1, 2).requires_grad_() for a, bb, c, d in shapes
        ]
    return [_randn(sh, dtype).requires_grad_() for sh in shapes]


@pytest.mark.parametrize("case", ATTN, ids=[c[0] for c in ATTN])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_attention(case, dtype):
    _, qs, s, hk, dv, mask_kind, causal, layout = case
    q, k, v = _qkv(qs, s, hk, dv, dtype, layout)
    mask = None
    if mask_kind == "bool":  # key padding: batch 1 keeps only its first 200 keys
        mask = torch.ones(qs[0], 1, 1, s, dtype=torch.bool, device=DEV)
        mask[1, ..., 200:] = False
    elif mask_kind == "float":
        mask = _randn((1, qs[1], qs[2], s), dtype).requires_grad_()
    kw = dict(is_causal=causal, enable_gqa=hk != qs[1])
    o = sdpa(q, k, v, attn_mask=mask, **kw)
    ins = [q, k, v] + ([mask] if mask_kind == "float" else [])
    refs = [t.detach().double().requires_grad_() for t in ins]
    rmask = refs[3] if mask_kind == "float" else mask
    ro = F.scaled_dot_product_attention(*refs[:3], attn_mask=rmask, **kw)
    assert _relerr(o, ro) < 1e-2
    do = _randn(o.shape, dtype)
    grads = torch.autograd.grad(o, ins, do)
    rgrads = torch.autograd.grad(ro, refs, do.double())
    for g, rg, t in zip(grads, rgrads, ins):
        assert g.shape == t.shape and g.dtype == t.dtype
        assert _relerr(g, rg) < 2e-2
    assert _engines("opendnn.sdpa") == {"attention"}
    assert _engines("opendnn.sdpa_backward") == {"attention"}


def test_attention_dropout_against_reference():
    """The mask of the (seed, offset) drawn from the CUDA generator, forward and backward."""
    b, h, length, e, p = 1, 2, 128, 64, 0.2
    q, k, v = _qkv((b, h, length, e), length, h, e, torch.bfloat16, "bhsd")
    torch.manual_seed(3)
    o = sdpa(q, k, v, dropout_p=p, is_causal=True)
    torch.manual_seed(3)
    seed, offset = torch.randint(0, RNG_HIGH, (2,), dtype=torch.int64, device=DEV).tolist()
    qn, kn, vn = (t.detach().double().cpu().numpy() for t in (q, k, v))
    keep = ref_attention.batch_mask(ref_attention.Masking(right_bound=0), b, length, length)
    drop = ref_attention.dropout_keep(seed, offset, p, (b, h, length, length))
    ro, stats = ref_attention.forward(qn, kn, vn, keep, 1 / math.sqrt(e), None, drop, p)
    assert _relerr(o.cpu(), torch.from_numpy(ro)) < 1e-2
    do = _randn(o.shape, torch.bfloat16)
    grads = torch.autograd.grad(o, (q, k, v), do)
    want = ref_attention.backward(
        qn, kn, vn, ro, do.double().cpu().numpy(), stats, keep, 1 / math.sqrt(e), None, drop, p
    )
    for g, w in zip(grads, want[:3]):
        assert _relerr(g.cpu(), torch.from_numpy(w)) < 2e-2


def test_attention_autocast():
    """float32 inputs under bf16 autocast run on the engine in bfloat16, as PyTorch's."""
    q, k, v = _qkv((2, 8, 512, 64), 512, 8, 64, torch.float32, "bhsd")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        o = sdpa(q, k, v, is_causal=True)
        want = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert o.dtype == want.dtype == torch.bfloat16
    assert _relerr(o.float(), want.float()) < 1e-2
    grads = torch.autograd.grad(o.float().sum(), (q, k, v))
    assert all(g.dtype == torch.float32 for g in grads)
