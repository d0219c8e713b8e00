"""opendnn.torch convolution (conv1d / conv2d / conv3d and the opendnn::conv_* custom ops)
against torch.nn.functional in float64 on the CPU (interpreted kernels: tiny shapes):
forward, input / weight / bias gradients, groups, depthwise, stride / padding ('same',
'valid', asymmetric) / dilation, channels-last, non-contiguous operands, fp32 / fp16 /
bf16, zero-size batches, opcheck, torch.compile, autocast, double backward, and every bad
argument with its typed error."""

import math

import pytest
import torch
import torch.nn.functional as F
from _util import assert_close, expect_error

from opendnn import backends
from opendnn.errors import BadParamError, GraphNotSupportedError, Status
from opendnn.torch import _graphs
from opendnn.torch import conv as C

CL = {2: torch.channels_last, 3: torch.channels_last_3d}

# (nsp, x shape, weight shape, kwargs of F.convNd, bias, layout)
CASES = [
    (1, (2, 4, 11), (6, 2, 3), dict(stride=2, padding=1, groups=2), True, "contig"),
    (1, (1, 3, 9), (2, 3, 4), dict(padding="same", dilation=2), False, "contig"),
    (2, (2, 3, 7, 6), (5, 3, 3, 3), dict(padding=1), True, "contig"),
    (
        2,
        (1, 4, 9, 7),
        (6, 2, 3, 2),
        dict(stride=(2, 1), padding=(1, 0), dilation=(1, 2), groups=2),
        True,
        "contig",
    ),
    (2, (2, 3, 5, 4), (6, 1, 3, 3), dict(padding=1, groups=3), True, "channels_last"),
    (2, (1, 3, 6, 5), (4, 3, 4, 2), dict(padding="same"), True, "channels_last"),
    (2, (3, 5, 1, 1), (4, 5, 1, 1), dict(), True, "contig"),
    (2, (2, 2, 5, 5), (3, 2, 5, 5), dict(padding="valid"), False, "strided"),
    (
        3,
        (1, 4, 5, 4, 3),
        (4, 2, 2, 3, 2),
        dict(stride=2, padding=(1, 0, 1), groups=2),
        True,
        "channels_last",
    ),
    (3, (1, 2, 4, 5, 3), (3, 2, 3, 3, 3), dict(padding="same", dilation=(1, 2, 1)), True, "contig"),
]


# smaller problems for float16 / bfloat16 (NumPy emulates them slowly in the interpreter)
HALF_CASES = [
    (1, (2, 4, 7), (4, 2, 3), dict(stride=2, padding=1, groups=2), True, "contig"),
    (2, (1, 3, 5, 4), (3, 1, 2, 2), dict(padding="same", groups=3), True, "channels_last"),
    (3, (1, 2, 3, 4, 3), (2, 2, 2, 2, 1), dict(stride=(1, 2, 1)), True, "channels_last"),
]


def _fn(nsp):
    return getattr(C, f"conv{nsp}d"), getattr(F, f"conv{nsp}d")


def _layout(t, layout, nsp):
    if layout == "channels_last":
        return t.contiguous(memory_format=CL[nsp])
    if layout == "strided":  # every other element of a wider buffer
        big = torch.randn(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype)
        big[..., ::2] = t
        return big[..., ::2]
    return t


def _leaves(*ts):
    return [t.detach().requires_grad_(True) if t is not None else None for t in ts]


def _run(fn, x, w, b, dy, **kw):
    """y and the gradients of (x, w, b) for upstream gradient dy."""
    x, w, b = _leaves(x, w, b)
    y = fn(x, w, b, **kw)
    y.backward(dy)
    return y, x.grad, w.grad, None if b is None else b.grad


def _check(case, dtype, seed):
    nsp, xs, wsh, kw, has_bias, layout = case
    torch.manual_seed(seed)
    fn, ref_fn = _fn(nsp)
    x = _layout(torch.randn(xs).to(dtype), layout, nsp)
    w = _layout((torch.randn(wsh) / math.sqrt(math.prod(wsh[1:]))).to(dtype), layout, nsp)
    b = torch.randn(wsh[0]).to(dtype) if has_bias else None
    y_ref = ref_fn(*(None if t is None else t.double() for t in (x, w, b)), **kw)
    dy = torch.randn(y_ref.shape).to(dtype)
    got = _run(fn, x, w, b, dy, **kw)
    ref = _run(ref_fn, *(None if t is None else t.double() for t in (x, w, b)), dy.double(), **kw)
    groups = kw.get("groups", 1)
    taps = math.prod(wsh[2:])
    pixels = xs[0] * math.prod(y_ref.shape[2:])
    n = {"y": wsh[1] * taps, "dx": wsh[0] // groups * taps, "dw": pixels, "db": pixels}
    msg = f"[repro] conv{nsp}d x={xs} w={wsh} {kw} bias={has_bias} {layout} {dtype} seed={seed}"
    for name, a, e in zip(("y", "dx", "dw", "db"), got, ref):
        if e is None:
            continue
        assert a.dtype == dtype, f"{msg}: {name} is {a.dtype}"
        assert_close(a, e, dtype, n[name], f"{msg} {name}")
    return got[0], x, w


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}d-{i}-{c[5]}" for i, c in enumerate(CASES)])
def test_forward_and_gradients_match_pytorch(case):
    y, x, w = _check(case, torch.float32, 11)
    nsp = case[0]
    want = CL[nsp] if case[5] == "channels_last" else torch.contiguous_format
    assert y.is_contiguous(memory_format=want), f"output strides {y.stride()}"
    if nsp < 3:  # PyTorch's CPU conv3d keeps NCDHW for some channels_last_3d inputs
        assert y.stride() == _fn(nsp)[1](x, w, **case[3]).stride()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("case", HALF_CASES, ids=["1d", "2d-depthwise-nhwc", "3d-ndhwc"])
def test_half_types_match_float64_pytorch(case, dtype):
    _check(case, dtype, 5)


def test_float64_runs_on_the_reference_engine():
    _check(CASES[3], torch.float64, 2)


def test_unbatched_input_and_strided_bias_and_weight_views():
    torch.manual_seed(3)
    x = torch.randn(3, 6, 5)  # unbatched [C, H, W]
    w = torch.randn(3, 3, 2, 4).permute(0, 1, 3, 2)  # a permuted view
    b = torch.randn(6)[::2]  # stride 2
    y = C.conv2d(x, w, b, padding=(1, 0))
    ref = F.conv2d(x.double(), w.double(), b.double(), padding=(1, 0))
    assert y.shape == ref.shape == (3, 5, 4)
    assert_close(y, ref, torch.float32, 27)


def test_zero_size_batch_gives_empty_output_and_zero_weight_gradients():
    x = torch.randn(0, 4, 5, 5, requires_grad=True)
    w = torch.randn(6, 2, 3, 3, requires_grad=True)
    b = torch.randn(6, requires_grad=True)
    y = C.conv2d(x, w, b, groups=2, padding=1)
    assert y.shape == (0, 6, 5, 5)
    y.sum().backward()
    assert x.grad.shape == x.shape
    assert torch.equal(w.grad, torch.zeros_like(w)) and torch.equal(b.grad, torch.zeros(6))
    assert C.conv2d(torch.randn(2, 4, 5, 5), torch.randn(0, 4, 3, 3)).shape == (2, 0, 3, 3)


def test_opcheck_each_custom_op():
    torch.manual_seed(4)
    x, w, b = torch.randn(2, 4, 5, 6), torch.randn(6, 2, 3, 2), torch.randn(6)
    params = ([2, 1], [1, 0], [0, 1], [1, 2], 2)
    y = C.conv_forward(x, w, b, *params)
    torch.library.opcheck(C.conv_forward.op, (x, w, b) + params)
    dy = torch.randn_like(y)
    torch.library.opcheck(C.conv_backward_input.op, (dy, w, list(x.shape)) + params)
    torch.library.opcheck(C.conv_backward_weight.op, (dy, x, list(w.shape)) + params)


def test_torch_compile_fullgraph_traces_forward_and_backward():
    torch.manual_seed(6)
    x = torch.randn(2, 3, 6, 6).contiguous(memory_format=torch.channels_last)
    w, b = torch.randn(4, 3, 3, 3) * 0.3, torch.randn(4)

    def f(x, w, b):
        return torch.relu(C.conv2d(x, w, b, padding="same")).sum()

    xs, ws, bs = _leaves(x, w, b)
    torch.compile(f, fullgraph=True, backend="aot_eager")(xs, ws, bs).backward()
    xr, wr, br = _leaves(x.double(), w.double(), b.double())
    torch.relu(F.conv2d(xr, wr, br, padding="same")).sum().backward()
    for a, e in ((xs.grad, xr.grad), (ws.grad, wr.grad), (bs.grad, br.grad)):
        assert_close(a, e, torch.float32, 72)


def test_autocast_casts_to_the_autocast_dtype():
    torch.manual_seed(8)
    x, w, b = torch.randn(1, 4, 5, 5), torch.randn(3, 4, 3, 3) * 0.3, torch.randn(3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = C.conv2d(x, w, b)
    assert y.dtype == torch.bfloat16
    lo = [t.to(torch.bfloat16).double() for t in (x, w, b)]
    assert_close(y, F.conv2d(*lo), torch.bfloat16, 36)


def test_double_backward_matches_pytorch():
    torch.manual_seed(9)
    x, w = torch.randn(1, 2, 5, 4), torch.randn(3, 2, 2, 2)
    results = []
    for fn, (xx, ww) in ((C.conv2d, _leaves(x, w)), (F.conv2d, _leaves(x.double(), w.double()))):
        y = fn(xx, ww, stride=(2, 1), padding=1)
        gx, gw = torch.autograd.grad((y * y).sum(), (xx, ww), create_graph=True)
        results.append(torch.autograd.grad((gx**2).sum() + (gw**2).sum(), (xx, ww)))
    for a, e in zip(*results):
        assert_close(a, e, torch.float32, 200)


def test_allow_tf32_is_part_of_the_kept_graph():
    x, w = torch.randn(1, 2, 4, 4), torch.randn(2, 2, 3, 3)
    for flag in (False, True):
        backends.allow_tf32 = flag
        C.conv2d(x, w)
        hits = [
            k
            for k in _graphs._cache
            if k[0][0] == "opendnn.conv_fwd" and _graphs.meta(x) in k[0] and k[2] is flag
        ]
        assert hits, f"no kept conv graph with allow_tf32={flag}"


# ---- bad arguments -> typed errors naming the operation ---------------------------------------
def _x(*s, dtype=torch.float32):
    return torch.randn(*s).to(dtype)


BAD = [  # (id, call, error type, status, names in the message)
    (
        "channels",
        lambda: C.conv2d(_x(1, 4, 5, 5), _x(6, 3, 3, 3)),
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        ["conv2d", "weight", "groups=1"],
    ),
    (
        "groups-channels",
        lambda: C.conv2d(_x(1, 4, 5, 5), _x(6, 4, 3, 3), groups=2),
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        ["conv2d", "weight", "groups=2"],
    ),
    (
        "groups-out",
        lambda: C.conv1d(_x(1, 4, 5), _x(5, 2, 3), groups=2),
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        ["conv1d", "weight", "output channels"],
    ),
    (
        "input-dims",
        lambda: C.conv2d(_x(1, 1, 4, 5, 5), _x(6, 1, 3, 3)),
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        ["conv2d", "input"],
    ),
    (
        "weight-dims",
        lambda: C.conv3d(_x(1, 2, 4, 5, 5), _x(6, 2, 3, 3)),
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        ["conv3d", "weight"],
    ),
    (
        "bias",
        lambda: C.conv2d(_x(1, 2, 5, 5), _x(6, 2, 3, 3), _x(5)),
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        ["conv2d", "bias"],
    ),
    (
        "stride-0",
        lambda: C.conv2d(_x(1, 2, 5, 5), _x(6, 2, 3, 3), stride=0),
        BadParamError,
        Status.BAD_PARAM_OUT_OF_BOUND,
        ["conv2d", "stride"],
    ),
    (
        "padding-neg",
        lambda: C.conv1d(_x(1, 2, 5), _x(6, 2, 3), padding=-1),
        BadParamError,
        Status.BAD_PARAM_OUT_OF_BOUND,
        ["conv1d", "padding"],
    ),
    (
        "dilation-0",
        lambda: C.conv2d(_x(1, 2, 5, 5), _x(6, 2, 3, 3), dilation=(1, 0)),
        BadParamError,
        Status.BAD_PARAM_OUT_OF_BOUND,
        ["conv2d", "dilation"],
    ),
    (
        "stride-len",
        lambda: C.conv2d(_x(1, 2, 5, 5), _x(6, 2, 3, 3), stride=(1, 1, 1)),
        BadParamError,
        Status.BAD_PARAM,
        ["conv2d", "stride"],
    ),
    (
        "same-strided",
        lambda: C.conv2d(_x(1, 2, 5, 5), _x(6, 2, 3, 3), stride=2, padding="same"),
        BadParamError,
        Status.BAD_PARAM,
        ["conv2d", "same"],
    ),
    (
        "padding-str",
        lambda: C.conv2d(_x(1, 2, 5, 5), _x(6, 2, 3, 3), padding="full"),
        BadParamError,
        Status.BAD_PARAM,
        ["conv2d", "full"],
    ),
    (
        "kernel-big",
        lambda: C.conv2d(_x(1, 2, 2, 5), _x(6, 2, 3, 3)),
        BadParamError,
        Status.BAD_PARAM_OUT_OF_BOUND,
        ["conv2d", "input", "kernel"],
    ),
    (
        "groups-0",
        lambda: C.conv2d(_x(1, 2, 5, 5), _x(6, 2, 3, 3), groups=0),
        BadParamError,
        Status.BAD_PARAM_OUT_OF_BOUND,
        ["conv2d", "groups"],
    ),
    (
        "dtype-mix",
        lambda: C.conv2d(_x(1, 2, 5, 5), _x(6, 2, 3, 3, dtype=torch.float16)),
        BadParamError,
        Status.BAD_PARAM_ATTRIBUTE_TYPE,
        ["conv2d", "weight"],
    ),
    (
        "int-input",
        lambda: C.conv2d(
            torch.ones(1, 2, 5, 5, dtype=torch.int32), torch.ones(6, 2, 3, 3, dtype=torch.int32)
        ),
        GraphNotSupportedError,
        Status.NOT_SUPPORTED_DATA_TYPE,
        ["conv2d", "input"],
    ),
    (
        "empty-channels",
        lambda: C.conv2d(_x(2, 0, 5, 5), _x(3, 0, 3, 3)),
        GraphNotSupportedError,
        Status.NOT_SUPPORTED_SHAPE,
        ["conv2d", "input"],
    ),
    (
        "grad-shape",
        lambda: C.conv_backward_input(
            _x(1, 6, 4, 4), _x(6, 2, 3, 3), [1, 2, 5, 5], [1, 1], [0, 0], [0, 0], [1, 1], 1
        ),
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        ["conv2d", "grad_output"],
    ),
]


@pytest.mark.parametrize("call,exc,status,names", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_arguments_raise_typed_errors(call, exc, status, names):
    expect_error(exc, status, call, *names)
