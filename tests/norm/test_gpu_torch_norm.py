"""GPU checks of opendnn.torch's normalizations and pooling (pytest -m gpu) against
torch.nn.functional in float64 on the same CUDA inputs, at ResNet / EmoNet / transformer
sizes: bf16 / fp16 / fp32, NCHW and channels_last, running statistics over several
steps, gradients, CUDA autocast (layer / group / RMS norm in float32 as PyTorch), and
torch.compile(fullgraph=True) with the default (inductor) backend."""

import pytest
import torch
import torch.nn.functional as F

from opendnn.torch import norm as N
from opendnn.torch import pool as P

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

TOL = {torch.float32: 2e-5, torch.bfloat16: 1e-2, torch.float16: 2e-3}
DTYPES = [torch.bfloat16, torch.float16, torch.float32]


def _rel(out, ref):
    out, ref = out.double(), ref.double()
    assert not torch.isnan(out).any(), "NaN in the output"
    return ((out - ref).norm() / max(ref.norm().item(), 1e-30)).item()


def _close(out, ref, dtype, what=""):
    err = _rel(out, ref)
    assert err < TOL[dtype], f"{what}: relative error {err:.3g} >= {TOL[dtype]}"


def _x(shape, dtype, cl=False):
    x = torch.randn(shape, device="cuda", dtype=dtype) * 2 + 0.5
    if cl:
        x = x.to(memory_format=torch.channels_last if x.dim() == 4 else torch.channels_last_3d)
    return x


def _pair(*ts):
    """(ours, float64 references): leaves requiring grad (None stays None)."""
    ours = [None if t is None else t.detach().clone().requires_grad_() for t in ts]
    refs = [None if t is None else t.detach().double().requires_grad_() for t in ts]
    return ours, refs


def _grads(ours, refs, dtype, what):
    for i, (a, r) in enumerate(zip(ours, refs)):
        if a is not None:
            _close(a.grad, r.grad, dtype, f"{what} grad {i}")


@pytest.mark.parametrize(
    "shape", [(64, 64, 56, 56), (64, 2048, 7, 7), (256, 512), (8, 32, 8, 16, 16)]
)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cl", [True, False])
def test_batch_norm_training_and_inference(shape, dtype, cl):
    c = shape[1]
    w = torch.rand(c, device="cuda") + 0.5  # float32 parameters and buffers (autocast's)
    b = torch.randn(c, device="cuda")
    rm, rv = torch.randn(c, device="cuda"), torch.rand(c, device="cuda") + 0.5
    rm_ref, rv_ref = rm.double(), rv.double()
    for step in range(3):
        x = _x(shape, dtype, cl and len(shape) >= 4)
        ours, refs = _pair(x, w, b)
        y = N.batch_norm(ours[0], rm, rv, ours[1], ours[2], True, 0.1, 1e-5)
        y_ref = F.batch_norm(refs[0], rm_ref, rv_ref, refs[1], refs[2], True, 0.1, 1e-5)
        assert y.dtype == dtype and y.stride() == x.stride()
        _close(y, y_ref, dtype, f"y step {step}")
        _close(rm, rm_ref, torch.float32, "running_mean")
        _close(rv, rv_ref, torch.float32, "running_var")
        dy = torch.randn_like(y)
        y.backward(dy)
        y_ref.backward(dy.double())
        _grads(ours, refs, dtype, "training")
    x = _x(shape, dtype, cl and len(shape) >= 4)
    ours, refs = _pair(x, w, b)
    y = N.batch_norm(ours[0], rm, rv, ours[1], ours[2], False)
    y_ref = F.batch_norm(refs[0], rm_ref, rv_ref, refs[1], refs[2], False)
    _close(y, y_ref, dtype, "inference")
    dy = torch.randn_like(y)
    y.backward(dy)
    y_ref.backward(dy.double())
    _grads(ours, refs, dtype, "inference")


@pytest.mark.parametrize(
    "kind,shape,arg",
    [
        ("layer", (4096, 1024), [1024]),
        ("layer", (8, 512, 4096), [4096]),
        ("rms", (4096, 4096), [4096]),
        ("rms", (2, 77, 768), [768]),
        ("group", (16, 256, 28, 28), 32),
        ("group", (8, 64, 16, 16, 16), 8),
        ("instance", (8, 64, 128, 128), None),
    ],
)  # EmoNet's instance norm
@pytest.mark.parametrize("dtype", DTYPES)
def test_row_norms(kind, shape, arg, dtype):
    x = _x(shape, dtype, kind in ("group", "instance"))
    pshape = arg if kind in ("layer", "rms") else [shape[1]]
    w = torch.rand(pshape, device="cuda", dtype=dtype) + 0.5
    b = None if kind == "rms" else torch.randn(pshape, device="cuda", dtype=dtype)
    ours, refs = _pair(x, w, b)

    def call(f, x, w, b):
        if kind == "layer":
            return f.layer_norm(x, arg, w, b)
        if kind == "rms":
            return f.rms_norm(x, arg, w, 1e-6)
        if kind == "group":
            return f.group_norm(x, arg, w, b)
        return f.instance_norm(x, weight=w, bias=b)

    y, y_ref = call(N, *ours), call(F, *refs)
    _close(y, y_ref, dtype, kind)
    dy = torch.randn_like(y)
    y.backward(dy)
    y_ref.backward(dy.double())
    _grads(ours, refs, dtype, kind)


def test_instance_norm_running_statistics():
    rm, rv = torch.zeros(64, device="cuda"), torch.ones(64, device="cuda")
    rm_ref, rv_ref = rm.double(), rv.double()
    for _ in range(3):
        x = _x((8, 64, 32, 32), torch.bfloat16, True)
        N.instance_norm(x, rm, rv)
        F.instance_norm(x.double(), rm_ref, rv_ref)
    _close(rm, rm_ref, torch.float32, "running_mean")
    _close(rv, rv_ref, torch.float32, "running_var")


@pytest.mark.parametrize("fn", ["layer_norm", "group_norm", "rms_norm", "batch_norm"])
def test_autocast_types(fn):
    """Under CUDA autocast layer / group / RMS norm compute and return float32, batch norm
    keeps its input's type: the same types as PyTorch's."""
    x = torch.randn(8, 32, 16, 16, device="cuda").to(memory_format=torch.channels_last)
    w = torch.rand(32, device="cuda") + 0.5
    with torch.autocast("cuda", dtype=torch.bfloat16):
        xh = x.to(torch.bfloat16)
        calls = {
            "layer_norm": lambda f: f.layer_norm(xh, [16], w[:16], None),
            "group_norm": lambda f: f.group_norm(xh, 8, w),
            "rms_norm": lambda f: f.rms_norm(xh, [16], w[:16]),
            "batch_norm": lambda f: f.batch_norm(xh, None, None, w, None, True),
        }
        y, y_ref = calls[fn](N), calls[fn](F)
    assert y.dtype == y_ref.dtype, (y.dtype, y_ref.dtype)
    _close(y, y_ref, torch.bfloat16, fn)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cl", [True, False])
def test_max_pool_resnet(dtype, cl):
    x = _x((32, 64, 112, 112), dtype, cl)
    xo, xr = x.clone().requires_grad_(), x.clone().requires_grad_()
    y, y_ref = P.max_pool2d(xo, 3, 2, 1), F.max_pool2d(xr, 3, 2, 1)
    assert torch.equal(y, y_ref)
    assert y.is_contiguous(memory_format=torch.channels_last) == cl
    dy = torch.randn_like(y)
    y.backward(dy)
    y_ref.backward(dy)
    _close(xo.grad, xr.grad, dtype, "dx")
    _, idx = P.max_pool2d(x, 3, 2, 1, return_indices=True)
    assert torch.equal(idx, F.max_pool2d(x, 3, 2, 1, return_indices=True)[1])


@pytest.mark.parametrize(
    "call",
    [
        lambda f, x: f.avg_pool2d(x, 4),  # EmoNet's 4x4
        lambda f, x: f.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
        lambda f, x: f.adaptive_avg_pool2d(x, 1),  # ResNet's head
        lambda f, x: f.max_pool3d(x.unflatten(2, (4, -1)), 2, ceil_mode=True),
    ],
)
@pytest.mark.parametrize("dtype", DTYPES)
def test_pools(call, dtype):
    # the reference runs on the CPU: PyTorch 2.11's CUDA avg_pool2d backward of
    # channels-last float64 with padding is wrong (rel. error 1.19 here; tests/pool/test_gpu_pool.py)
    x = _x((32, 256, 32, 32), dtype, True)
    xo, xr = x.clone().requires_grad_(), x.double().cpu().requires_grad_()
    y, y_ref = call(P, xo), call(F, xr)
    _close(y.cpu(), y_ref, dtype, "y")
    dy = torch.randn_like(y)
    y.backward(dy)
    y_ref.backward(dy.double().cpu())
    _close(xo.grad.cpu(), xr.grad, dtype, "dx")


def test_torch_compile_inductor():
    """A stem (batch norm, max pool), group / layer norm and the pooled head compile with
    the default backend, fullgraph; forward, gradients and running statistics match."""

    def chain(f, x, w, b, rm, rv):
        y = f.max_pool2d(f.batch_norm(x, rm, rv, w, b, True).relu(), 3, 2, 1)
        y = f.group_norm(y, 8, w, b)
        y = f.adaptive_avg_pool2d(y, 1).flatten(1)
        return (f.layer_norm(y, [64]) * proj.to(y.dtype)).sum()

    f32 = torch.float32
    proj = torch.randn(16, 64, device="cuda")
    x = _x((16, 64, 56, 56), f32, True)
    params = [
        torch.rand(64, device="cuda") + 0.5,
        torch.randn(64, device="cuda"),
        torch.zeros(64, device="cuda"),
        torch.ones(64, device="cuda"),
    ]
    ours = [x.clone().requires_grad_()] + [
        p.clone().requires_grad_(i < 2) for i, p in enumerate(params)
    ]
    refs = [x.double().requires_grad_()] + [
        p.double().requires_grad_(i < 2) for i, p in enumerate(params)
    ]
    out = torch.compile(lambda *a: chain(_NS, *a), fullgraph=True)(*ours)
    out_ref = chain(F, *refs)
    _close(out, out_ref, f32, "loss")
    out.backward()
    out_ref.backward()
    for i in (0, 1, 2):
        _close(ours[i].grad, refs[i].grad, f32, f"grad {i}")
    for i in (3, 4):
        _close(ours[i], refs[i], f32, f"running {i}")


class _NS:
    """The opendnn functional functions under torch.nn.functional's names."""

    batch_norm, group_norm, layer_norm = N.batch_norm, N.group_norm, N.layer_norm
    max_pool2d, adaptive_avg_pool2d = P.max_pool2d, P.adaptive_avg_pool2d
