"""GPU checks of opendnn.torch convolution and linear / matmul (pytest -m gpu) at realistic
sizes against float64 PyTorch on the device: forward and gradients in fp32 / fp16 / bf16,
NCHW and channels-last (output strides equal PyTorch's), groups / depthwise / stride /
dilation / 'same', 1-D and 3-D, autocast, allow_tf32, benchmark mode, opcheck, and
torch.compile with aot_eager and the default (inductor) backend."""

import pytest
import torch
import torch.nn.functional as F

from opendnn import backends
from opendnn.torch import _graphs
from opendnn.torch import conv as C
from opendnn.torch import linear as L

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

TOL = {torch.float32: 1e-4, torch.bfloat16: 1.5e-2, torch.float16: 3e-3}
CL = {4: torch.channels_last, 5: torch.channels_last_3d}


def _relerr(out, ref):
    out, ref = out.double(), ref.double()
    assert not torch.isnan(out).any(), "NaN in the result"
    return ((out - ref).norm() / max(ref.norm().item(), 1e-30)).item()


def _leaves(*ts):
    return [None if t is None else t.detach().requires_grad_(True) for t in ts]


def _fwd_bwd(fn, ts, dy, **kw):
    ts = _leaves(*ts)
    y = fn(*ts, **kw)
    y.backward(dy)
    return [y] + [None if t is None else t.grad for t in ts]


def _check(fn, ref_fn, ts, dtype, label, **kw):
    """fn against ref_fn in float64 on the same (rounded) inputs; returns fn's output."""
    ref_in = [None if t is None else t.double() for t in ts]
    y64 = ref_fn(*ref_in, **kw)
    dy = torch.randn(y64.shape, device="cuda").to(dtype)
    got = _fwd_bwd(fn, ts, dy, **kw)
    ref = _fwd_bwd(ref_fn, ref_in, dy.double(), **kw)
    for name, a, e in zip(("y", "dx", "dw", "db"), got, ref):
        if e is not None:
            assert a.dtype == dtype, f"{label}: {name} is {a.dtype}"
            err = _relerr(a, e)
            assert err < TOL[dtype], f"{label}: {name} relative error {err:.3g}"
    return got[0]


CONVS = [  # (id, x shape, weight shape, kwargs)
    ("resnet-3x3", (32, 64, 56, 56), (64, 64, 3, 3), dict(padding=1)),
    ("resnet-1x1-s2", (32, 256, 56, 56), (512, 256, 1, 1), dict(stride=2)),
    ("stem-7x7", (16, 3, 224, 224), (64, 3, 7, 7), dict(stride=2, padding=3)),
    ("grouped", (8, 128, 28, 28), (128, 4, 3, 3), dict(padding=1, groups=32)),
    ("depthwise", (8, 96, 33, 31), (96, 1, 5, 5), dict(padding=2, groups=96)),
    ("dilated-same", (4, 32, 40, 37), (48, 32, 4, 3), dict(padding="same", dilation=2)),
    ("odd", (3, 17, 23, 19), (29, 17, 3, 2), dict(stride=(2, 1), padding=(1, 0))),
]


CASES_2D = [(c, dt) for c in CONVS for dt in (torch.bfloat16, torch.float32)] + [
    (c, torch.float16) for c in CONVS[:2]
]


@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
@pytest.mark.parametrize(
    "case,dtype", CASES_2D, ids=[f"{c[0]}-{str(dt)[6:]}" for c, dt in CASES_2D]
)
def test_conv2d_matches_pytorch(case, dtype, layout):
    _, xs, ws, kw = case
    torch.manual_seed(0)
    fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
    x = torch.randn(xs, device="cuda").to(dtype).contiguous(memory_format=fmt)
    w = (
        (torch.randn(ws, device="cuda") / (ws[1] * ws[2] * ws[3]) ** 0.5)
        .to(dtype)
        .contiguous(memory_format=fmt)
    )
    b = torch.randn(ws[0], device="cuda").to(dtype)
    y = _check(
        C.conv2d, F.conv2d, (x, w, b), dtype, f"conv2d {xs} {ws} {kw} {dtype} {layout}", **kw
    )
    assert y.stride() == F.conv2d(x, w, b, **kw).stride()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize(
    "case",
    [
        (1, (16, 64, 1000), (128, 64, 5), dict(padding=2)),
        (1, (8, 96, 257), (96, 1, 7), dict(stride=2, groups=96)),
        (3, (2, 32, 16, 28, 28), (64, 32, 3, 3, 3), dict(padding=1)),
        (3, (2, 16, 9, 20, 21), (32, 8, 1, 3, 3), dict(stride=(1, 2, 2), groups=2)),
    ],
    ids=["1d", "1d-depthwise", "3d", "3d-grouped"],
)
@pytest.mark.parametrize("channels_last", [False, True])
def test_conv1d_conv3d_match_pytorch(case, dtype, channels_last):
    nsp, xs, ws, kw = case
    if channels_last and nsp == 1:
        pytest.skip("1-D tensors have no channels-last format")
    torch.manual_seed(1)
    x = torch.randn(xs, device="cuda").to(dtype)
    w = (torch.randn(ws, device="cuda") / (ws[1] * ws[2]) ** 0.5).to(dtype)
    if channels_last:
        x, w = x.contiguous(memory_format=CL[5]), w.contiguous(memory_format=CL[5])
    b = torch.randn(ws[0], device="cuda").to(dtype)
    fn, ref = getattr(C, f"conv{nsp}d"), getattr(F, f"conv{nsp}d")
    y = _check(fn, ref, (x, w, b), dtype, f"conv{nsp}d {xs} {ws} {kw} {dtype}", **kw)
    assert y.stride() == ref(x, w, b, **kw).stride()


def test_noncontiguous_operands():
    torch.manual_seed(2)
    x = torch.randn(8, 64, 30, 60, device="cuda", dtype=torch.bfloat16)[..., ::2]
    w = torch.randn(64, 64, 3, 3, device="cuda", dtype=torch.bfloat16).transpose(2, 3) * 0.05
    b = torch.randn(128, device="cuda", dtype=torch.bfloat16)[::2]
    _check(C.conv2d, F.conv2d, (x, w, b), torch.bfloat16, "strided conv2d", padding=1)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_conv_and_linear(dtype):
    torch.manual_seed(3)
    x = torch.randn(16, 64, 28, 28, device="cuda").contiguous(memory_format=torch.channels_last)
    w, b = torch.randn(128, 64, 3, 3, device="cuda") * 0.05, torch.randn(128, device="cuda")
    lw, lb = torch.randn(10, 128, device="cuda") * 0.1, torch.randn(10, device="cuda")
    with torch.autocast("cuda", dtype=dtype):
        y = C.conv2d(x, w, b, padding=1)
        z = L.linear(y.mean((2, 3)), lw, lb)
    assert y.dtype == z.dtype == dtype
    lo = [t.to(dtype).double() for t in (x, w, b)]
    assert _relerr(y, F.conv2d(*lo, padding=1)) < TOL[dtype]


def test_allow_tf32_changes_the_float32_plans_within_tf32_accuracy():
    torch.manual_seed(4)
    x = torch.randn(16, 256, 28, 28, device="cuda").contiguous(memory_format=torch.channels_last)
    w = torch.randn(256, 256, 3, 3, device="cuda").contiguous(memory_format=torch.channels_last)
    ref = F.conv2d(x.double(), w.double(), padding=1)
    errs = {}
    for flag in (False, True):
        backends.allow_tf32 = flag
        errs[flag] = _relerr(C.conv2d(x, w, padding=1), ref)
        assert any(k[2] is flag and k[0][0] == "opendnn.conv_fwd" for k in _graphs._cache)
    assert errs[False] < 1e-4 and errs[True] < 3e-3, errs


def test_benchmark_mode_finds_then_reuses():
    torch.manual_seed(5)
    backends.benchmark = True
    x = torch.randn(32, 64, 56, 56, device="cuda", dtype=torch.bfloat16).contiguous(
        memory_format=torch.channels_last
    )
    w = (
        (torch.randn(64, 64, 3, 3, device="cuda") * 0.04)
        .to(torch.bfloat16)
        .contiguous(memory_format=torch.channels_last)
    )
    ref = F.conv2d(x.double(), w.double(), padding=1)
    for _ in range(3):
        assert _relerr(C.conv2d(x, w, padding=1), ref) < TOL[torch.bfloat16]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_linear_and_matmul_match_pytorch(dtype):
    torch.manual_seed(6)
    x = torch.randn(8, 512, 1024, device="cuda").to(dtype)
    w = (torch.randn(4096, 1024, device="cuda") * 0.03).to(dtype)
    b = torch.randn(4096, device="cuda").to(dtype)
    y = _check(L.linear, F.linear, (x, w, b), dtype, f"linear {dtype}")
    assert y.stride() == F.linear(x, w, b).stride()
    a = torch.randn(4, 1, 256, 384, device="cuda").to(dtype)
    m = (torch.randn(6, 384, 320, device="cuda") * 0.05).to(dtype)
    _check(L.matmul, torch.matmul, (a, m), dtype, f"matmul broadcast {dtype}")
    # column-major operands: [2, 320, 384] @ [384, 256]
    _check(
        L.matmul,
        torch.matmul,
        (m[:2].transpose(-1, -2), a[0, 0].t()),
        dtype,
        f"matmul transposed {dtype}",
    )


def test_opcheck_on_cuda():
    torch.manual_seed(7)
    x = torch.randn(2, 8, 9, 10, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(8, 4, 3, 3, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8, device="cuda", dtype=torch.bfloat16)
    params = ([2, 1], [1, 0], [0, 1], [1, 2], 2)
    y = C.conv_forward(x, w, b, *params)
    torch.library.opcheck(C.conv_forward.op, (x, w, b) + params)
    dy = torch.randn_like(y)
    torch.library.opcheck(C.conv_backward_input.op, (dy, w, list(x.shape)) + params)
    torch.library.opcheck(C.conv_backward_weight.op, (dy, x, list(w.shape)) + params)
    a, m = torch.randn(3, 17, 40, device="cuda"), torch.randn(40, 24, device="cuda")
    torch.library.opcheck(L.linear_op.op, (a, m.t(), torch.randn(24, device="cuda")))
    torch.library.opcheck(L.matmul_op.op, (a, m))
    torch.library.opcheck(L.sum_to_size.op, (a, [17, 1]))


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_torch_compile_conv_block(backend):
    torch.manual_seed(8)
    x = torch.randn(8, 32, 28, 28, device="cuda", dtype=torch.bfloat16).contiguous(
        memory_format=torch.channels_last
    )
    w1 = (torch.randn(64, 32, 3, 3, device="cuda") * 0.06).to(torch.bfloat16)
    w2 = (torch.randn(10, 64, device="cuda") * 0.1).to(torch.bfloat16)
    b1 = torch.randn(64, device="cuda", dtype=torch.bfloat16)

    def f(x, w1, b1, w2):
        h = torch.relu(C.conv2d(x, w1, b1, stride=2, padding=1))
        return L.linear(h.mean((2, 3)), w2).square().sum()

    def f_ref(x, w1, b1, w2):
        h = torch.relu(F.conv2d(x, w1, b1, stride=2, padding=1))
        return F.linear(h.mean((2, 3)), w2).square().sum()

    got = _leaves(x, w1, b1, w2)
    torch.compile(f, fullgraph=True, backend=backend)(*got).backward()
    ref = _leaves(*(t.double() for t in (x, w1, b1, w2)))
    f_ref(*ref).backward()
    for a, e in zip(got, ref):
        assert _relerr(a.grad, e.grad) < 3e-2
