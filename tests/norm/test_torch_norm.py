"""opendnn.torch's normalizations (batch, layer, RMS, group, instance norm) against
torch.nn.functional on CPU (the Triton engines through the interpreter): forward,
gradients and running statistics over several training steps, against PyTorch in float64
on the same inputs; layouts (NCHW, channels_last, strided), odd and size-one dims, zero
batches, data types; opcheck on every custom op; a torch.compile(fullgraph=True) trace;
bad arguments as typed errors (PyTorch refuses the same arguments)."""

import math

import pytest
import torch
import torch.nn.functional as F
from _util import assert_close, expect_error
from _util import torch_layout as layout

from opendnn.errors import BadParamError, Status
from opendnn.torch import norm as N

F32, F16, BF16, F64 = torch.float32, torch.float16, torch.bfloat16, torch.float64
ops = torch.ops.opendnn


def leaf(t, grad=True):
    return None if t is None else t.detach().clone().requires_grad_(grad)


def ref(t):
    return None if t is None else t.detach().double().requires_grad_(t.requires_grad)


def check_grads(ours: list, refs: list, dtype, n: int) -> None:
    for a, r in zip(ours, refs):
        if a is None:
            continue
        assert r.grad is not None and a.grad is not None
        assert_close(a.grad, r.grad, dtype, n)


# ---- batch norm ---------------------------------------------------------------------------
BN_CASES = [
    ((5, 3), "nchw", F32),
    ((4, 3, 5), "cl", F32),
    ((2, 3, 4, 5), "nchw", F32),
    ((2, 3, 3, 5), "cl", F32),
    ((2, 3, 2, 3, 2), "cl", F32),
    ((2, 3, 4, 5), "strided", F32),
    ((3, 4, 5, 3), "cl", BF16),
    ((3, 4, 1, 3), "nchw", F16),
    ((2, 3, 4, 5), "nchw", F64),
    ((3, 1, 5), "nchw", F32),
]


@pytest.mark.parametrize("shape,how,dtype", BN_CASES)
@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_training_steps(rng, shape, how, dtype, affine):
    """Three training steps: y, dx, dw, db and the running buffers after each step."""
    c = shape[1]
    m = math.prod(shape) // c
    w = rng.rand((c,), dtype) if affine else None
    b = rng.rand((c,), dtype) if affine else None
    rm, rv = rng.rand((c,), dtype), rng.rand((c,), dtype, positive=True)
    rm_ref, rv_ref = rm.double(), rv.double()
    for step in range(3):
        x = layout(rng.rand(shape, dtype), how)
        ours = [leaf(x), leaf(w), leaf(b)]
        refs = [ref(t) for t in ours]
        y = N.batch_norm(ours[0], rm, rv, ours[1], ours[2], True, 0.2, 1e-4)
        y_ref = F.batch_norm(refs[0], rm_ref, rv_ref, refs[1], refs[2], True, 0.2, 1e-4)
        assert y.dtype == dtype and y.stride() == torch.empty_like(x).stride()
        assert_close(y, y_ref, dtype, m, msg=f"y, step {step}")
        assert_close(rm, rm_ref, dtype, m, msg=f"running_mean, step {step}")
        assert_close(rv, rv_ref, dtype, m, msg=f"running_var, step {step}")
        dy = rng.rand(shape, dtype)
        y.backward(dy)
        y_ref.backward(dy.double())
        check_grads(ours, refs, dtype, m)


@pytest.mark.parametrize(
    "shape,how,dtype",
    [
        ((2, 3, 4, 5), "cl", F32),
        ((6, 4), "nchw", F32),
        ((2, 3, 5), "strided", BF16),
        ((2, 3, 2, 2, 3), "nchw", F16),
    ],
)
@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_inference(rng, shape, how, dtype, affine):
    c = shape[1]
    x = layout(rng.rand(shape, dtype), how)
    w, b = (rng.rand((c,), dtype), rng.rand((c,), dtype)) if affine else (None, None)
    rm, rv = rng.rand((c,), dtype), rng.rand((c,), dtype, positive=True)
    ours = [leaf(x), leaf(w), leaf(b)]
    refs = [ref(t) for t in ours]
    y = N.batch_norm(ours[0], rm, rv, ours[1], ours[2], False, 0.1, 1e-3)
    y_ref = F.batch_norm(refs[0], rm.double(), rv.double(), refs[1], refs[2], False, 0.1, 1e-3)
    assert y.stride() == torch.empty_like(x).stride()
    assert_close(y, y_ref, dtype)
    dy = rng.rand(shape, dtype)
    y.backward(dy)
    y_ref.backward(dy.double())
    check_grads(ours, refs, dtype, math.prod(shape) // c)


def test_batch_norm_mixed_types_and_untracked(rng):
    """bfloat16 data with float32 parameters and buffers (autocast's case); training without
    running buffers (track_running_stats=False)."""
    x = layout(rng.rand((4, 3, 3, 5), BF16), "cl")
    w, b = rng.rand((3,), F32), rng.rand((3,), F32)
    rm, rv = rng.rand((3,), F32), rng.rand((3,), F32, positive=True)
    rm_ref, rv_ref = rm.double(), rv.double()
    ours = [leaf(x), leaf(w), leaf(b)]
    refs = [ref(t) for t in ours]
    y = N.batch_norm(ours[0], rm, rv, ours[1], ours[2], True)
    y_ref = F.batch_norm(refs[0], rm_ref, rv_ref, refs[1], refs[2], True)
    assert y.dtype == BF16
    assert_close(y, y_ref, BF16, 60)
    assert_close(rm, rm_ref, F32, 60)
    assert_close(rv, rv_ref, F32, 60)
    y.backward(torch.ones_like(y))
    y_ref.backward(torch.ones_like(y_ref))
    assert ours[1].grad.dtype == F32
    check_grads(ours, refs, BF16, 60)
    x = rng.rand((3, 4, 5), F32)
    assert_close(
        N.batch_norm(x, None, None, training=True),
        F.batch_norm(x.double(), None, None, training=True),
        F32,
        15,
    )


def test_batch_norm_zero_batch():
    x = torch.empty(0, 3, 4, 4)
    rm, rv = torch.zeros(3), torch.ones(3)
    y = N.batch_norm(x, rm, rv, None, None, True)
    assert y.shape == x.shape and torch.equal(rm, torch.zeros(3)) and torch.equal(rv, torch.ones(3))


# ---- layer, RMS, group and instance norm --------------------------------------------------
ROW_CASES = [
    ((3, 5, 7), [7], "nchw", F32),
    ((3, 5, 7), [5, 7], "strided", F32),
    ((2, 1, 9), [9], "nchw", BF16),
    ((4, 33), [33], "nchw", F16),
    ((2, 3, 4), [4], "transposed", F32),
    ((3, 6), [6], "nchw", F64),
    ((4, 2, 3, 1), [3, 1], "nchw", F32),
]


def _rows(rng, shape, how, dtype):
    if how == "transposed":
        return rng.rand(shape[::-1], dtype).transpose(0, -1)
    return layout(rng.rand(shape, dtype), how)


@pytest.mark.parametrize("shape,nshape,how,dtype", ROW_CASES)
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm(rng, shape, nshape, how, dtype, affine):
    x = _rows(rng, shape, how, dtype)
    w, b = (rng.rand(nshape, dtype), rng.rand(nshape, dtype)) if affine else (None, None)
    ours = [leaf(x), leaf(w), leaf(b)]
    refs = [ref(t) for t in ours]
    y = N.layer_norm(ours[0], nshape, ours[1], ours[2], 1e-5)
    y_ref = F.layer_norm(refs[0], nshape, refs[1], refs[2], 1e-5)
    assert y.is_contiguous() and y.dtype == dtype
    length = math.prod(nshape)
    assert_close(y, y_ref, dtype, length)
    dy = rng.rand(shape, dtype)
    y.backward(dy)
    y_ref.backward(dy.double())
    check_grads(ours, refs, dtype, max(length, x.numel() // length))


@pytest.mark.parametrize("shape,nshape,how,dtype", ROW_CASES)
@pytest.mark.parametrize("eps", [None, 1e-3])
def test_rms_norm(rng, shape, nshape, how, dtype, eps):
    x = _rows(rng, shape, how, dtype)
    w = rng.rand(nshape, dtype) if eps is None else None
    ours = [leaf(x), leaf(w)]
    refs = [ref(t) for t in ours]
    y = N.rms_norm(ours[0], nshape, ours[1], eps)
    e = torch.finfo(dtype).eps if eps is None else eps  # the input type's epsilon
    y_ref = F.rms_norm(refs[0], nshape, refs[1], e)
    length = math.prod(nshape)
    assert_close(y, y_ref, dtype, length)
    dy = rng.rand(shape, dtype)
    y.backward(dy)
    y_ref.backward(dy.double())
    check_grads(ours, refs, dtype, max(length, x.numel() // length))


GROUP_CASES = [
    ((2, 6, 3, 5), 3, "cl", F32),
    ((4, 6), 2, "nchw", F32),
    ((2, 4, 5), 4, "strided", F32),
    ((2, 4, 3, 2, 2), 1, "cl", BF16),
    ((3, 6, 5, 1), 6, "nchw", F16),
    ((1, 4, 3, 3), 2, "nchw", F64),
]


@pytest.mark.parametrize("shape,groups,how,dtype", GROUP_CASES)
@pytest.mark.parametrize("affine", [True, False])
def test_group_norm(rng, shape, groups, how, dtype, affine):
    c = shape[1]
    x = layout(rng.rand(shape, dtype), how)
    w, b = (rng.rand((c,), dtype), rng.rand((c,), dtype)) if affine else (None, None)
    ours = [leaf(x), leaf(w), leaf(b)]
    refs = [ref(t) for t in ours]
    y = N.group_norm(ours[0], groups, ours[1], ours[2], 1e-5)
    y_ref = F.group_norm(refs[0], groups, refs[1], refs[2], 1e-5)
    assert y.stride() == torch.empty_like(x).stride()
    length = x.numel() // (shape[0] * groups)
    assert_close(y, y_ref, dtype, length)
    dy = rng.rand(shape, dtype)
    y.backward(dy)
    y_ref.backward(dy.double())
    check_grads(ours, refs, dtype, max(length, x.numel() // c))


@pytest.mark.parametrize(
    "shape,how,dtype",
    [((2, 3, 4, 5), "cl", F32), ((3, 2, 7), "nchw", F32), ((2, 3, 2, 3, 2), "nchw", BF16)],
)
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("running", [True, False])
def test_instance_norm(rng, shape, how, dtype, affine, running):
    """Input statistics (two steps: running buffers updated as PyTorch's), then the
    running statistics (use_input_stats=False)."""
    c = shape[1]
    w, b = (rng.rand((c,), dtype), rng.rand((c,), dtype)) if affine else (None, None)
    rm, rv = (rng.rand((c,), F32), rng.rand((c,), F32, positive=True)) if running else (None, None)
    rm_ref, rv_ref = (rm.double(), rv.double()) if running else (None, None)
    length = math.prod(shape[2:])
    for use_input_stats in (True, True, False):
        if not use_input_stats and not running:
            continue
        x = layout(rng.rand(shape, dtype), how)
        ours = [leaf(x), leaf(w), leaf(b)]
        refs = [ref(t) for t in ours]
        y = N.instance_norm(ours[0], rm, rv, ours[1], ours[2], use_input_stats, 0.3, 1e-5)
        y_ref = F.instance_norm(
            refs[0], rm_ref, rv_ref, refs[1], refs[2], use_input_stats, 0.3, 1e-5
        )
        assert_close(y, y_ref, dtype, length)
        if running:
            assert_close(rm, rm_ref, F32, length)
            assert_close(rv, rv_ref, F32, length)
        dy = rng.rand(shape, dtype)
        y.backward(dy)
        y_ref.backward(dy.double())
        check_grads(ours, refs, dtype, max(length, shape[0] * length))


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: N.layer_norm(x, [3]),
        lambda x: N.rms_norm(x, [3]),
        lambda x: N.group_norm(x.transpose(1, 2), 1),
        lambda x: N.instance_norm(x.transpose(1, 2).expand(0, 3, 4)),
    ],
)
def test_zero_rows(fn):
    x = torch.empty(0, 4, 3, requires_grad=True)
    y = fn(x)
    assert y.numel() == 0
    y.sum().backward()
    assert x.grad.shape == x.shape


@pytest.mark.parametrize(
    "call",
    [
        lambda f, x, w: f.batch_norm(x, None, None, w, None, True),
        lambda f, x, w: f.batch_norm(x, w - 1, w, w, None, False),
        lambda f, x, w: f.layer_norm(x, [5]),
        lambda f, x, w: f.rms_norm(x, [4, 5]),
        lambda f, x, w: f.group_norm(x, 3, w),
        lambda f, x, w: f.instance_norm(x, weight=w),
    ],
)
def test_expanded_output_gradient(rng, call):
    """loss = y.sum() hands the backward a gradient of stride 0 everywhere."""
    x, w = rng.rand((2, 3, 4, 5), F32), rng.rand((3,), F32, positive=True)
    ours, refs = leaf(x), leaf(x.double())
    call(N, ours, w).sum().backward()
    call(F, refs, w.double()).sum().backward()
    assert_close(ours.grad, refs.grad, F32, 40)


# ---- custom ops: opcheck, torch.compile ---------------------------------------------------
def _opcheck_cases():
    g = torch.Generator().manual_seed(7)

    def r(*s, grad=False, pos=False):
        t = torch.rand(*s, generator=g) + 0.5 if pos else torch.randn(*s, generator=g)
        return t.requires_grad_(grad)

    x, w, b = r(2, 3, 4, 5, grad=True), r(3, grad=True), r(3, grad=True)
    xc = r(2, 3, 4, 5).to(memory_format=torch.channels_last).requires_grad_()
    rm, rv = r(3), r(3, pos=True)
    dy = r(2, 3, 4, 5)
    stats = r(3, pos=True)
    return [
        (ops.batch_norm_train, (x, w, b, rm.clone(), rv.clone(), 0.1, 1e-5)),
        (ops.batch_norm_train, (xc, None, None, None, None, 0.1, 1e-5)),
        (ops.batch_norm_backward, (dy, x.detach(), w.detach(), rm, stats)),
        (ops.batch_norm_eval, (xc, w, None, rm, rv, 1e-5)),
        (ops.batch_norm_eval_backward, (dy, x.detach(), None, rm, rv, 1e-5)),
        (ops.layer_norm, (x, [4, 5], r(4, 5, grad=True), None, 1e-5)),
        (
            ops.layer_norm_backward,
            (dy, x.detach(), [5], r(2, 3, 4, 1), r(2, 3, 4, 1, pos=True), r(5)),
        ),
        (ops.rms_norm, (x, [5], r(5, grad=True), 1e-5)),
        (ops.rms_norm_backward, (dy, x.detach(), [4, 5], r(2, 3, 1, 1, pos=True), None)),
        (ops.group_norm, (xc, 3, w, b, 1e-5)),
        (ops.group_norm_backward, (dy, x.detach(), 1, r(2, 1), r(2, 1, pos=True), w.detach())),
        (ops.instance_norm, (xc, None, b, 1e-5)),
        (ops.instance_norm_backward, (dy, x.detach(), r(2, 3), r(2, 3, pos=True), None)),
        (
            ops.instance_norm_update_running,
            (rm.clone(), rv.clone(), r(2, 3), r(2, 3, pos=True), 0.1, 1e-5, 20),
        ),
    ]


@pytest.mark.parametrize("case", range(14))
def test_opcheck(case):
    op, args = _opcheck_cases()[case]
    torch.library.opcheck(op, args)


def test_torch_compile_fullgraph():
    """Batch norm (training, running buffers mutated in the traced graph), group, instance,
    layer and RMS norm under torch.compile(fullgraph=True, backend="aot_eager")."""

    def chain(fns, x, w, b, rm, rv, rm2, rv2, lw):
        y = fns.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5)
        y = fns.group_norm(y, 3, w, b)
        y = fns.instance_norm(y, rm2, rv2)
        y = fns.layer_norm(y, [4, 5])
        return fns.rms_norm(y, [5], lw).square().sum()

    g = torch.Generator().manual_seed(3)
    base = [
        torch.randn(2, 3, 4, 5, generator=g).to(memory_format=torch.channels_last),
        torch.rand(3, generator=g) + 0.5,
        torch.randn(3, generator=g),
        torch.randn(3, generator=g),
        torch.rand(3, generator=g) + 0.5,
        torch.randn(3, generator=g),
        torch.rand(3, generator=g) + 0.5,
        torch.randn(5, generator=g),
    ]
    grads = (0, 1, 2, 7)
    ours = [t.clone().requires_grad_(i in grads) for i, t in enumerate(base)]
    refs = [t.clone().requires_grad_(i in grads) for i, t in enumerate(base)]
    compiled = torch.compile(lambda *a: chain(N, *a), fullgraph=True, backend="aot_eager")
    out = compiled(*ours)
    out_ref = chain(F, *refs)
    assert_close(out, out_ref, F32, 120)
    out.backward()
    out_ref.backward()
    for i in grads:
        assert_close(ours[i].grad, refs[i].grad, F32, 120)
    for i in (3, 4, 5, 6):  # the running buffers, mutated once each
        assert_close(ours[i], refs[i], F32, 40)


# ---- bad arguments ------------------------------------------------------------------------
X = torch.randn(2, 3, 4)
BAD = [
    (
        "batch_norm",
        lambda f: f.batch_norm(torch.randn(3), None, None, training=True),
        Status.BAD_PARAM_SHAPE_MISMATCH,
        "input",
    ),
    (
        "batch_norm",
        lambda f: f.batch_norm(X, None, None, torch.ones(4), training=True),
        Status.BAD_PARAM_SHAPE_MISMATCH,
        "weight",
    ),
    (
        "batch_norm",
        lambda f: f.batch_norm(torch.randn(1, 3), None, None, training=True),
        Status.BAD_PARAM_SHAPE_MISMATCH,
        "input",
    ),
    (
        "batch_norm",
        lambda f: f.batch_norm(X, None, None, training=False),
        Status.BAD_PARAM_NULL_POINTER,
        "running_mean",
    ),
    (
        "batch_norm",
        lambda f: f.batch_norm(X, torch.zeros(3), torch.ones(2), training=True),
        Status.BAD_PARAM_SHAPE_MISMATCH,
        "running_var",
    ),
    ("layer_norm", lambda f: f.layer_norm(X, [3]), Status.BAD_PARAM_SHAPE_MISMATCH, "input"),
    (
        "layer_norm",
        lambda f: f.layer_norm(X, [4], torch.ones(3)),
        Status.BAD_PARAM_SHAPE_MISMATCH,
        "weight",
    ),
    (
        "rms_norm",
        lambda f: f.rms_norm(X, [3, 4], torch.ones(4)),
        Status.BAD_PARAM_SHAPE_MISMATCH,
        "weight",
    ),
    ("group_norm", lambda f: f.group_norm(X, 2), Status.BAD_PARAM, "input"),
    (
        "group_norm",
        lambda f: f.group_norm(X, 3, bias=torch.ones(2)),
        Status.BAD_PARAM_SHAPE_MISMATCH,
        "bias",
    ),
    (
        "instance_norm",
        lambda f: f.instance_norm(torch.randn(2, 3, 1)),
        Status.BAD_PARAM_SHAPE_MISMATCH,
        "input",
    ),
    (
        "instance_norm",
        lambda f: f.instance_norm(X, use_input_stats=False),
        Status.BAD_PARAM_NULL_POINTER,
        "running_mean",
    ),
    ("layer_norm", lambda f: f.layer_norm(X.long(), [4]), Status.NOT_SUPPORTED_DATA_TYPE, "input"),
]


@pytest.mark.parametrize(
    "op,call,status,tensor", BAD, ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)]
)
def test_bad_arguments(op, call, status, tensor):
    """opendnn raises a typed error naming the operation and the tensor; PyTorch refuses
    the same call."""
    expect_error(BadParamError, status, lambda: call(N), op, tensor)
    with pytest.raises((RuntimeError, ValueError, IndexError)):
        call(F)
