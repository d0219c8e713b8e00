"""Whole models on opendnn.torch on a CUDA device (pytest -m gpu):

- torchvision ResNet-18 / ResNet-50 (random weights; examples/resnet.py, which has the
  same layout, where torchvision is missing), converted: eval inference against PyTorch
  (fp32 NCHW, fp32 channels_last, bf16 channels_last), batch norms calibrated on a batch
  first so eval does real work; 50 SGD steps (fp32 channels_last, and bf16 autocast
  channels_last) whose loss curve follows PyTorch's;
- the pre-norm transformer block (examples/transformer_block.py; MultiheadAttention via
  convert, hand-written attention via enable()) forward and backward in bf16, fp16 and
  fp32 under bf16 autocast;
- the EmoNet-style network (examples/emonet.py) at the seed's 256x256: training-mode
  forward and backward (fp32 NCHW, bf16 channels_last), and eval with
  ``opendnn.backends.benchmark`` on (the find) against off and PyTorch.

References: PyTorch in float32 (TF32 off, as opendnn's allow_tf32 default) on the same
rounded weights and inputs; a low-precision result may be off by at most twice (curves:
three times) PyTorch's own error in that precision, or the data type's tolerance. No
fallback to PyTorch is allowed anywhere. Every model shares one input size per family
(ResNet 16 x 3 x 128 x 128), so kernels compiled by one test serve the next.

Runtime: the first call of each new layer shape compiles Triton kernels (ResNet-50: a
few minutes for fwd + dgrad + wgrad in two data types). Run a family at a time, e.g.
``pytest -m gpu tests/torch/test_gpu_torch_models.py -k resnet18``.
"""

from __future__ import annotations

import copy
import importlib
import importlib.util

import pytest
import torch
import torch.nn as nn
from _util import load_example, true_fp32_and_clean

from opendnn import backends
from opendnn.torch.convert import convert

E = importlib.import_module("opendnn.torch.enable")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

TOL = {torch.float32: 1e-4, torch.bfloat16: 3e-2, torch.float16: 5e-3}
DEVICE = "cuda"
BATCH, SIZE, CLASSES, STEPS = 16, 128, 10, 50  # ResNet
BLOCK = dict(n=4, length=256, dim=512, heads=8)  # transformer block
EMONET = dict(size=256, width=64, batch=8, bench_batch=32)
CL = torch.channels_last


example = load_example


@pytest.fixture(autouse=True)
def _true_fp32_and_clean():
    with true_fp32_and_clean():
        yield


def relerr(ours, ref) -> float:
    ours, ref = ours.detach().double(), ref.detach().double()
    assert not torch.isnan(ours).any(), "NaN in opendnn's result"
    return ((ours - ref).norm() / max(ref.norm().item(), 1e-30)).item()


def rounded(model: nn.Module, dtype: torch.dtype) -> nn.Module:
    """``model`` with every floating parameter and buffer rounded to ``dtype`` (kept in
    its own type), so a float32 reference sees what a ``dtype`` model sees."""
    with torch.no_grad():
        for t in list(model.parameters()) + list(model.buffers()):
            if t.is_floating_point():
                t.copy_(t.to(dtype))
    return model


def check_grads(ours: dict, same: dict, exact: dict, tol: float) -> None:
    """Parameter gradients {name: tensor} of opendnn (``ours``) and of PyTorch in the same
    precision (``same``) against float32 PyTorch (``exact``). Errors are relative norms
    floored at 1e-2 of the largest gradient norm (a bias before a normalization has an
    analytically zero gradient: rounding noise on both sides). Low-precision gradients of
    individual tensors are noisy (bf16 through batch norms: 5-20% on either side), so the
    2x rule applies to the root mean square over all tensors; each tensor may be off by
    at most 2x PyTorch's error on it or 4x PyTorch's root mean square."""
    floor = 1e-2 * max(v.double().norm().item() for v in exact.values())

    def err(a, b):
        assert not torch.isnan(a).any(), "NaN in a gradient"
        return ((a.double() - b.double()).norm() / max(b.double().norm().item(), floor)).item()

    errs = {n: (err(ours[n], exact[n]), err(same[n], exact[n])) for n in exact}
    rms = [(sum(e[i] ** 2 for e in errs.values()) / len(errs)) ** 0.5 for i in (0, 1)]
    assert rms[0] < max(tol, 2 * rms[1]), (
        f"gradients: rms error {rms[0]:.2e}, PyTorch's {rms[1]:.2e}"
    )
    for n, (e, own) in errs.items():
        assert e < max(tol, 2 * own, 4 * rms[1]), f"grad of {n}: {e:.2e} (PyTorch {own:.2e})"


# ---------------------------------------------------------------- ResNet


def make_resnet(name: str) -> nn.Module:
    """torchvision's model (random weights), or the example's when it is not installed."""
    torch.manual_seed(0)
    if importlib.util.find_spec("torchvision") is not None:
        import torchvision

        return getattr(torchvision.models, name)(num_classes=CLASSES).to(DEVICE)
    return getattr(example("resnet"), name)(num_classes=CLASSES).to(DEVICE)


def calibrate(model: nn.Module, x: torch.Tensor) -> nn.Module:
    """Running statistics = the statistics of batch ``x`` (cumulative average of one
    batch), then eval mode: realistic activations instead of running stats (0, 1)."""
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None
    model.train()
    with torch.no_grad():
        model(x)
    for m in norms:
        m.momentum = 0.1
    return model.eval()


def data(n_batches: int = 4):
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    return [
        (
            torch.randn(BATCH, 3, SIZE, SIZE, device=DEVICE, generator=gen),
            torch.randint(0, CLASSES, (BATCH,), device=DEVICE, generator=gen),
        )
        for _ in range(n_batches)
    ]


@pytest.mark.parametrize("arch", ["resnet18", "resnet50"])
@pytest.mark.parametrize(
    "dtype,fmt",
    [(torch.float32, torch.contiguous_format), (torch.float32, CL), (torch.bfloat16, CL)],
    ids=["fp32-nchw", "fp32-channels_last", "bf16-channels_last"],
)
def test_resnet_inference(arch, dtype, fmt):
    (x_cal, _), (x, _) = data(2)
    exact = rounded(calibrate(make_resnet(arch), x_cal), dtype)
    same = copy.deepcopy(exact).to(dtype).to(memory_format=fmt)
    model = convert(copy.deepcopy(same))
    x = x.to(dtype)
    with torch.no_grad():
        y_ref = exact(x.float())
        y_same = same(x.to(memory_format=fmt))
        y = model(x.to(memory_format=fmt))
    assert E.fallbacks() == {}
    assert y.dtype == dtype and y.shape == (BATCH, CLASSES)
    assert relerr(y, y_ref) < max(TOL[dtype], 2 * relerr(y_same, y_ref))


def train_curve(model: nn.Module, batches, autocast: bool) -> list[float]:
    """STEPS SGD steps (momentum, weight decay) over ``batches`` in turn, channels_last."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    losses = []
    for step in range(STEPS):
        x, target = batches[step % len(batches)]
        with torch.autocast(DEVICE, dtype=torch.bfloat16, enabled=autocast):
            loss = nn.functional.cross_entropy(model(x.to(memory_format=CL)), target)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def deviation(curve, ref) -> float:
    """The largest difference between two loss curves, relative to the first loss."""
    return max(abs(a - b) for a, b in zip(curve, ref)) / max(abs(ref[0]), 1.0)


@pytest.mark.parametrize("arch", ["resnet18", "resnet50"])
@pytest.mark.parametrize("autocast", [False, True], ids=["fp32", "bf16_autocast"])
def test_resnet_training_curve(arch, autocast):
    """STEPS steps against PyTorch's float64 curve: opendnn's deviation at most
    max(2e-3, 3x) PyTorch's own deviation in the same precision (fp32, or bf16 autocast).
    A randomly initialised ResNet is chaotic: fp32 rounding alone moves PyTorch's fp32
    gradients ~2% from float64's (bench/grad_check.py), and curves drift apart over 50
    steps, so the bound scales with PyTorch's own drift."""
    batches = data()
    start = make_resnet(arch).to(memory_format=CL)
    model = convert(copy.deepcopy(start))
    curve = train_curve(model, batches, autocast)
    assert E.fallbacks() == {}
    exact = train_curve(copy.deepcopy(start).double(), [(x.double(), t) for x, t in batches], False)
    k = len(batches)
    assert sum(exact[-k:]) < sum(exact[:k]), (
        "the reference did not learn: the comparison says little"
    )
    own = deviation(train_curve(copy.deepcopy(start), batches, autocast), exact)
    bound = max(2e-3, 3 * own)
    dev = deviation(curve, exact)
    assert dev < bound, (
        f"loss curves: opendnn {curve}\nfloat64 {exact}\n{dev:.2e} >= "
        f"{bound:.2e} (PyTorch's own deviation {own:.2e})"
    )


# ---------------------------------------------------------------- transformer block


@pytest.mark.parametrize("attention", ["mha", "sdpa"])
@pytest.mark.parametrize(
    "dtype,autocast",
    [(torch.bfloat16, False), (torch.float16, False), (torch.float32, True)],
    ids=["bf16", "fp16", "fp32_bf16_autocast"],
)
def test_transformer_block(attention, dtype, autocast):
    torch.manual_seed(2)
    low = torch.bfloat16 if autocast else dtype
    n, length, dim = BLOCK["n"], BLOCK["length"], BLOCK["dim"]
    block = (
        example("transformer_block")
        .TransformerBlock(dim, BLOCK["heads"], attention=attention)
        .to(DEVICE)
    )
    exact = rounded(block, low)  # float32 on the rounded weights
    same = copy.deepcopy(exact).to(dtype)
    model = convert(copy.deepcopy(same))
    x = torch.randn(n, length, dim, device=DEVICE).to(low)
    dy = torch.randn(n, length, dim, device=DEVICE)
    results = []
    for m, dt, ac, on in (
        (exact, torch.float32, False, False),
        (same, dtype, autocast, False),
        (model, dtype, autocast, attention == "sdpa"),
    ):
        xi = x.to(dt).requires_grad_()
        with torch.autocast(DEVICE, dtype=torch.bfloat16, enabled=ac):
            with E.enable() if on else E.disable():
                y = m(xi, causal=True)
        y.backward(dy.to(y.dtype))
        results.append((y, xi.grad, {n: p.grad for n, p in m.named_parameters()}))
    assert E.fallbacks() == {}
    (y_ref, dx_ref, g_ref), (y_same, dx_same, g_same), (y, dx, g) = results
    assert y.dtype == y_same.dtype
    tol = TOL[low]
    for what, ours, theirs, exact_v in (
        ("output", y, y_same, y_ref),
        ("input grad", dx, dx_same, dx_ref),
    ):
        assert relerr(ours, exact_v) < max(tol, 2 * relerr(theirs, exact_v)), what
    check_grads(g, g_same, g_ref, tol)


# ---------------------------------------------------------------- EmoNet-style network


def make_emonet(dtype, fmt, n):
    torch.manual_seed(3)
    size = EMONET["size"]
    exact = rounded(
        example("emonet").EmoNet(n_expression=8, width=EMONET["width"], input_size=size).to(DEVICE),
        dtype,
    ).double()
    same = copy.deepcopy(exact).to(dtype).to(memory_format=fmt)
    x = torch.randn(n, 3, size, size, device=DEVICE).to(dtype)
    return exact, same, convert(copy.deepcopy(same)), x


@pytest.mark.parametrize(
    "dtype,fmt",
    [(torch.float32, torch.contiguous_format), (torch.bfloat16, CL)],
    ids=["fp32-nchw", "bf16-channels_last"],
)
def test_emonet_training_forward_backward(dtype, fmt):
    """N=8 at 256x256, train mode: output, input gradient, every parameter's gradient
    against float64 PyTorch on the same rounded weights (check_grads: the biases before
    instance / batch norm have zero gradients), within twice PyTorch's own error."""
    exact, same, model, x = make_emonet(dtype, fmt, EMONET["batch"])
    dy = torch.randn(EMONET["batch"], 10, device=DEVICE)
    results = []
    for m, dt in ((exact, torch.float64), (same, dtype), (model, dtype)):
        xi = x.to(dt).to(memory_format=fmt if dt == dtype else torch.contiguous_format)
        xi.requires_grad_()
        y = m(xi)
        y.backward(dy.to(y.dtype))
        results.append((y, xi.grad, {n: p.grad for n, p in m.named_parameters()}))
    assert E.fallbacks() == {}
    (y_ref, dx_ref, g_ref), (y_same, dx_same, g_same), (y, dx, g) = results
    tol = TOL[dtype]
    assert relerr(y, y_ref) < max(tol, 2 * relerr(y_same, y_ref))
    assert relerr(dx, dx_ref) < max(tol, 2 * relerr(dx_same, dx_ref))
    check_grads(g, g_same, g_ref, tol)


def test_emonet_benchmark_mode_bf16():
    """The seed's run: eval, fixed 256x256 inputs, N=32, bf16 channels_last; benchmark
    off, then on (the first call finds, the next reuses): the same results as PyTorch."""
    exact, same, model, x = make_emonet(torch.bfloat16, CL, EMONET["bench_batch"])
    for m in (exact, same, model):
        m.eval()
    x = x.to(memory_format=CL)
    with torch.no_grad():
        y_ref, y_same = exact(x.double()), same(x)
        backends.benchmark = False
        y_off = model(x)
        backends.benchmark = True
        y_find = model(x)
        y_reuse = model(x)
    assert E.fallbacks() == {}
    bound = max(TOL[torch.bfloat16], 2 * relerr(y_same, y_ref))
    for what, y in (("off", y_off), ("find", y_find), ("reuse", y_reuse)):
        assert relerr(y, y_ref) < bound, what
