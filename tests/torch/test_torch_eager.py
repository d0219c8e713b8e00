"""The eager fast paths of opendnn.torch (CPU, interpreter):

- ``_graphs.direct``: a custom op called in eager mode skips PyTorch's dispatcher (autocast
  rule, autograd Function and implementation called by opendnn itself). Its results,
  gradients, output types under autocast and version counters must equal the
  dispatcher's (the op called as ``.op``), bit for bit: the same kernels run;
- ``_graphs._Runner``: repeat executions of a kept graph check the buffers against the
  descriptors read once; a buffer that breaks a rule takes the full path, which raises
  the typed error naming the tensor and the rule.
"""

from __future__ import annotations

import pytest
import torch
from _util import expect_error

import opendnn.torch.conv as C
import opendnn.torch.linear as L
from opendnn.errors import BadParamError, Status
from opendnn.torch import _graphs
from opendnn.torch import activation as A
from opendnn.torch import batchnorm as BN
from opendnn.torch import softmax as S

PARAMS = ([1, 2], [1, 0], [1, 1], [1, 1], 1)


def _leaves(*ts):
    return [t.detach().clone().requires_grad_() for t in ts]


def _grads(fn, leaves):
    y = fn(*leaves)
    y = y[0] if isinstance(y, tuple) else y
    gy = torch.linspace(-1, 1, y.numel()).reshape(y.shape).to(y.dtype)
    return y, torch.autograd.grad(y, leaves, gy)


@pytest.mark.parametrize("autocast", [False, True], ids=["fp32", "bf16-autocast"])
def test_direct_equals_dispatcher_conv(rng, autocast):
    """conv forward + backward, eager path vs dispatcher path: identical outputs, output
    types and gradients (fp32, and CPU bf16 autocast, where the rule casts x, w, b)."""
    x, w, b = rng.rand((2, 3, 7, 6)), rng.rand((4, 3, 3, 2)), rng.rand((4,))
    out = []
    for fn in (C.conv_forward, C.conv_forward.op):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            out.append(_grads(lambda *t, fn=fn: fn(*t, *PARAMS), _leaves(x, w, b)))
    (y0, g0), (y1, g1) = out
    assert y0.dtype == y1.dtype == (torch.bfloat16 if autocast else torch.float32)
    assert torch.equal(y0, y1)
    for a, e in zip(g0, g1):
        assert a.dtype == e.dtype == torch.float32 and torch.equal(a, e)


def test_direct_equals_dispatcher_linear_softmax(rng):
    x, w = rng.rand((3, 5)), rng.rand((6, 5))
    (y0, g0), (y1, g1) = (
        _grads(lambda a, b, f=f: f(a, b, None), _leaves(x, w))
        for f in (L.linear_op, L.linear_op.op)
    )
    assert torch.equal(y0, y1) and all(torch.equal(a, e) for a, e in zip(g0, g1))
    s = rng.rand((4, 9))
    (y0, g0), (y1, g1) = (
        _grads(lambda a, f=f: f(a, 1, True, None), _leaves(s))
        for f in (S.softmax_op, S.softmax_op.op)
    )
    assert torch.equal(y0, y1) and torch.equal(g0[0], g1[0])


def test_direct_in_place_bumps_version(rng):
    """An in-place op called without the dispatcher still bumps the version counter (what
    ADInplaceOrView does), so autograd sees the write."""
    x = rng.rand((3, 4)) - 1.0
    v = x._version
    A.activation_inplace_op(x, "relu", [0.0, float("inf"), 0.0])
    assert x._version > v and (x >= 0).all()
    leaf = rng.rand((3, 4)).requires_grad_()
    saved = leaf * leaf  # mul saves leaf: a later in-place write to it ...
    with torch.no_grad():
        A.activation_inplace_op(leaf, "relu", [0.0, float("inf"), 0.0])
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        saved.sum().backward()  # ... is caught by autograd


def test_batch_norm_train_eager_equals_dispatcher(rng):
    """Training batch norm through the eager Function and through the dispatcher: the same
    output, gradients and running statistics."""
    x, w, b = rng.rand((4, 3, 5, 2)), rng.rand((3,)), rng.rand((3,))
    res = []
    for eager in (True, False):
        rm, rv = torch.zeros(3), torch.ones(3)
        leaves = _leaves(x, w, b)
        args = (*leaves, rm, rv, 0.1, 1e-5)
        y = (
            BN._train_autograd(*args, eager=True)
            if eager
            else torch.ops.opendnn.batch_norm_train(*args)
        )[0]
        g = torch.autograd.grad(y, leaves, torch.linspace(-1, 1, y.numel()).reshape(y.shape))
        res.append((y, g, rm, rv))
    for a, e in zip(res[0], res[1]):
        for u, v in zip(a if isinstance(a, tuple) else (a,), e if isinstance(e, tuple) else (e,)):
            assert torch.equal(u, v)


def _kept(op_prefix: str) -> _graphs.Built:
    hits = [b for k, b in _graphs._cache.items() if str(k[0][0]).startswith(op_prefix)]
    assert hits, f"no kept graph for {op_prefix}"
    return hits[-1]


def test_runner_repeat_and_rules(rng):
    """The second execution of a kept graph takes the runner; buffers that break a rule
    (data type, strides, an output overlapping an input) raise the full path's typed
    error naming the tensor."""
    _graphs.clear()
    x, w = rng.rand((2, 5)), rng.rand((5, 3))
    ref = L.matmul_op(x, w)
    b = _kept("opendnn.gemm")
    assert b.runner is not None
    calls = []
    real = b.runner.plan.run
    b.runner.plan.run = lambda *a: (calls.append(1), real(*a))[1]
    try:
        again = L.matmul_op(x, w)
    finally:
        del b.runner.plan.run
    assert calls == [1] and torch.equal(again, ref)
    c = torch.empty(2, 3)
    expect_error(
        BadParamError,
        Status.BAD_PARAM_ATTRIBUTE_TYPE,
        lambda: _graphs.run(b, {"a": x.double(), "b": w, "c": c}),
        "a",
    )
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        lambda: _graphs.run(b, {"a": x, "b": w.t().contiguous().t(), "c": c}),
        "b",
    )
    buf = torch.empty(16)
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        lambda: _graphs.run(b, {"a": buf[:10].view(2, 5), "b": w, "c": buf[4:10].view(2, 3)}),
        "overlaps",
    )


def test_runner_allows_exact_in_place(rng):
    """An in-place activation (output = input, one buffer) runs through the runner on
    repeat calls, as the full path allows it."""
    _graphs.clear()
    x = rng.rand((3, 8)) - 1.0
    kind, args = "relu", [0.0, float("inf"), 0.0]
    A.activation_inplace_op(x, kind, args)
    b = _kept("opendnn.activation")
    assert b.runner is not None and b.runner.in_place
    y = rng.rand((3, 8)) - 1.0
    want = torch.relu(y)
    calls = []
    real = b.runner.run
    b.runner.run = lambda *a: (calls.append(1), real(*a))[1]
    try:
        A.activation_inplace_op(y, kind, args)
    finally:
        del b.runner.run
    assert calls == [1] and torch.equal(y, want)
