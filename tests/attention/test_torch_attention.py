"""opendnn.torch scaled_dot_product_attention against torch.nn.functional's (float64 math
on the same rounded inputs), forward and gradients: causal (L < S and L > S), grouped-query
heads, bool masks (a fully masked row included) and float masks of every broadcast with
their gradient (dBias), ranks 2 / 3 / 5, BSHD (transposed) layouts, an explicit scale;
dropout against the float64 reference with the Philox mask of the (seed, offset) drawn
from PyTorch's generator, forward and backward, and its reproducibility; empty shapes; the
declined cases (GraphNotSupportedError) and PyTorch's argument rules (BadParamError);
opcheck of both custom ops; a torch.compile(fullgraph=True) trace."""

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F
from _util import assert_close, expect_error

from opendnn.errors import BadParamError, GraphNotSupportedError, Status
from opendnn.ops import attention as ref_attention
from opendnn.torch.attention import scaled_dot_product_attention as sdpa
from opendnn.torch.dropout import RNG_HIGH


@dataclasses.dataclass(frozen=True)
class Case:
    id: str
    q: tuple  # query shape (..., H, L, E)
    s: int = 7  # key length
    hk: int | None = None  # key / value heads (None: query's)
    ev: int | None = None  # value head dim (None: E)
    mask: str | None = None  # None, "bool <shape>", "float <shape>" (float: with grad)
    causal: bool = False
    gqa: bool = False
    scale: float | None = None
    bshd: bool = False  # q / k / v as transposed [B, S, H, D] tensors
    dtype: torch.dtype = torch.float16


CASES = [
    Case("plain", (1, 2, 5, 8), ev=16),
    Case("causal_l_gt_s", (2, 2, 9, 8), s=4, causal=True, dtype=torch.bfloat16),
    Case("causal_l_lt_s", (1, 3, 5, 16), s=11, causal=True),
    Case("gqa_causal", (2, 4, 5, 16), hk=2, gqa=True, causal=True, ev=8),
    Case("bool_ls_empty_row", (2, 2, 6, 8), mask="bool 6,7"),
    Case("bool_key_padding", (2, 2, 5, 8), mask="bool 2,1,1,7", dtype=torch.bfloat16),
    Case("float_bhls", (2, 3, 5, 8), mask="float 2,3,5,7"),
    Case("float_1hls", (2, 3, 5, 8), mask="float 3,5,7"),
    Case("float_b1l1", (2, 3, 5, 8), mask="float 2,1,5,1", dtype=torch.bfloat16),
    Case("float_s", (1, 2, 4, 8), s=9, mask="float 9"),
    Case("rank3", (3, 6, 8), mask="bool 6,7"),
    Case("rank2", (5, 8), scale=0.7),
    Case("rank5_float", (2, 2, 2, 4, 8), s=5, mask="float 2,1,1,4,5"),
    Case("bshd_gqa", (2, 4, 6, 8), hk=1, gqa=True, bshd=True, scale=0.25),
]


def _mask(rng, spec: str, dtype):
    kind, shape = spec.split()
    shape = tuple(int(v) for v in shape.split(","))
    if kind == "bool":
        m = rng.bools(shape)
        if len(shape) >= 2 and shape[-2] > 1:
            m[..., 1, :] = False  # a query row with no key: output and grads 0
        m[..., 0, 0] = True
        return m
    return rng.rand(shape, dtype, high=2.0).requires_grad_()


def _inputs(rng, c: Case) -> dict:
    *lead, h, length, e = c.q if len(c.q) > 2 else (1, *c.q)
    hk, ev = c.hk or h, c.ev or e
    lead = lead if len(c.q) > 2 else []
    shapes = {"q": (*lead, h, length, e), "k": (*lead, hk, c.s, e), "v": (*lead, hk, c.s, ev)}
    if len(c.q) == 2:
        shapes = {r: s[1:] for r, s in shapes.items()}
    out = {}
    for r, shape in shapes.items():
        if c.bshd:  # [B, S, H, D] memory, viewed as [B, H, S, D]
            t = rng.rand((shape[0], shape[2], shape[1], shape[3]), c.dtype).transpose(1, 2)
        else:
            t = rng.rand(shape, c.dtype)
        out[r] = t.requires_grad_()
    if c.mask:
        out["mask"] = _mask(rng, c.mask, c.dtype)
    return out


def _grads(fn, ins: dict, dout):
    o = fn(ins)
    diff = [t for t in ins.values() if t.requires_grad]
    return o, torch.autograd.grad(o, diff, dout)


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_against_pytorch(rng, c):
    ins = _inputs(rng, c)
    kw = dict(is_causal=c.causal, enable_gqa=c.gqa, scale=c.scale)
    o, grads = _grads(
        lambda t: sdpa(t["q"], t["k"], t["v"], attn_mask=t.get("mask"), **kw),
        ins,
        dout := rng.rand(ins["q"].shape[:-1] + (ins["v"].shape[-1],), c.dtype),
    )
    assert o.dtype == c.dtype and o.shape == dout.shape
    ref = {
        r: t.detach().double().requires_grad_(t.requires_grad) if t.is_floating_point() else t
        for r, t in ins.items()
    }
    ro, rgrads = _grads(
        lambda t: F.scaled_dot_product_attention(
            t["q"], t["k"], t["v"], attn_mask=t.get("mask"), **kw
        ),
        ref,
        dout.double(),
    )
    n = c.s + c.q[-2]
    assert_close(o, ro, c.dtype, n=c.s)
    for name, g, rg in zip([r for r, t in ins.items() if t.requires_grad], grads, rgrads):
        assert g.shape == ins[name].shape and g.dtype == ins[name].dtype, name
        assert_close(g, rg, c.dtype, n=n, msg=f"{c.id}: gradient of {name}")


def _drawn_rng(seed: int) -> tuple:
    torch.manual_seed(seed)
    return tuple(torch.randint(0, RNG_HIGH, (2,), dtype=torch.int64).tolist())


@pytest.mark.parametrize("causal,mask", [(False, None), (True, None), (False, "float 2,1,5,7")])
def test_dropout_against_reference(rng, causal, mask):
    """Forward and backward with the mask of the drawn (seed, offset): the backward
    regenerates the forward's mask (the reference applies one mask to both)."""
    c = Case("dropout", (2, 2, 5, 8), causal=causal, mask=mask, dtype=torch.bfloat16)
    ins = _inputs(rng, c)
    p, scale = 0.3, 1 / math.sqrt(8)
    dout = rng.rand((2, 2, 5, 8), c.dtype)
    torch.manual_seed(9)
    o, grads = _grads(
        lambda t: sdpa(
            t["q"], t["k"], t["v"], attn_mask=t.get("mask"), dropout_p=p, is_causal=causal
        ),
        ins,
        dout,
    )
    seed, offset = _drawn_rng(9)
    q, k, v = (ins[r].detach().double().numpy() for r in ("q", "k", "v"))
    bias = None if mask is None else ins["mask"].detach().double().numpy()
    keep = (
        None
        if not causal
        else ref_attention.batch_mask(ref_attention.Masking(right_bound=0), 2, 5, 7)
    )
    drop = ref_attention.dropout_keep(seed, offset, p, (2, 2, 5, 7))
    ro, stats = ref_attention.forward(q, k, v, keep, scale, bias, drop, p)
    assert_close(o, torch.from_numpy(ro), c.dtype, n=7)
    want = ref_attention.backward(
        q, k, v, ro, dout.double().numpy(), stats, keep, scale, bias, drop, p
    )
    for g, w in zip(grads, want):
        assert_close(g, torch.from_numpy(w), c.dtype, n=12)


def test_dropout_reproducible(rng):
    ins = _inputs(rng, Case("d", (1, 2, 6, 8)))
    args = (ins["q"].detach(), ins["k"].detach(), ins["v"].detach())
    torch.manual_seed(4)
    a, b = sdpa(*args, dropout_p=0.5), sdpa(*args, dropout_p=0.5)
    torch.manual_seed(4)
    assert torch.equal(a, sdpa(*args, dropout_p=0.5))
    assert not torch.equal(a, b)


def test_empty(rng):
    for q_shape, s in (((2, 2, 0, 8), 5), ((0, 2, 3, 8), 5)):
        q = rng.rand(q_shape, torch.float16).requires_grad_()
        k = rng.rand((*q_shape[:2], s, 8), torch.float16).requires_grad_()
        o = sdpa(q, k, k)
        assert o.shape == q_shape
        gq, gk = torch.autograd.grad(o.sum(), (q, k), allow_unused=True)
        assert gq.shape == q.shape and torch.count_nonzero(gk) == 0


def _qkv(rng, q=(1, 2, 4, 8), k=(1, 2, 5, 8), v=None, dtype=torch.float16):
    return rng.rand(q, dtype), rng.rand(k, dtype), rng.rand(v or k, dtype)


def test_declined(rng):
    ns = GraphNotSupportedError
    q, k, v = _qkv(rng, dtype=torch.float32)
    expect_error(
        ns,
        Status.NOT_SUPPORTED_DATA_TYPE,
        lambda: sdpa(q, k, v),
        "scaled_dot_product_attention",
        "torch.float32",
    )
    q, k, v = _qkv(rng, (1, 2, 4, 12), (1, 2, 5, 12))
    expect_error(ns, Status.NOT_SUPPORTED_SHAPE, lambda: sdpa(q, k, v), "head dim 12")
    q, k, v = _qkv(rng, (1, 4, 4, 8), (1, 2, 5, 8), (1, 1, 5, 8))
    expect_error(ns, Status.NOT_SUPPORTED_SHAPE, lambda: sdpa(q, k, v, enable_gqa=True), "value")
    q, k, v = _qkv(rng)
    expect_error(ns, Status.NOT_SUPPORTED, lambda: sdpa(q, k, v, dropout_p=1.0), "dropout_p")
    q, k, v = _qkv(rng, (2, 2, 4, 8), (1, 2, 5, 8))
    expect_error(ns, Status.NOT_SUPPORTED_SHAPE, lambda: sdpa(q, k, v), "leading dims")
    expect_error(ns, Status.NOT_SUPPORTED_SHAPE, lambda: sdpa(q, k[0], v[0]), "ranks")


def test_bad_arguments(rng):
    bp = BadParamError
    q, k, v = _qkv(rng, (1, 4, 4, 8), (1, 2, 5, 8))
    expect_error(bp, Status.BAD_PARAM_SHAPE_MISMATCH, lambda: sdpa(q, k, v), "enable_gqa")
    q, k, v = _qkv(rng, (1, 4, 4, 8), (1, 3, 5, 8))
    expect_error(
        bp, Status.BAD_PARAM_SHAPE_MISMATCH, lambda: sdpa(q, k, v, enable_gqa=True), "must divide"
    )
    q, k, v = _qkv(rng)
    m = torch.ones(4, 5, dtype=torch.bool)
    expect_error(
        bp, Status.BAD_PARAM, lambda: sdpa(q, k, v, attn_mask=m, is_causal=True), "is_causal"
    )
    expect_error(
        bp,
        Status.BAD_PARAM,
        lambda: sdpa(q, k, v, attn_mask=m.float()),
        "attn_mask",
        "torch.float32",
    )
    expect_error(
        bp,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        lambda: sdpa(q, k, v, attn_mask=torch.ones(3, 5, dtype=torch.bool)),
        "attn_mask",
    )
    expect_error(
        bp, Status.BAD_PARAM_OUT_OF_BOUND, lambda: sdpa(q, k, v, dropout_p=1.5), "between 0 and 1"
    )
    expect_error(bp, Status.BAD_PARAM, lambda: sdpa(q, k.float(), v), "dtype")
    expect_error(
        bp, Status.BAD_PARAM_SHAPE_MISMATCH, lambda: sdpa(q, k[..., :4], v), "key head dim"
    )
    expect_error(
        bp, Status.BAD_PARAM_SHAPE_MISMATCH, lambda: sdpa(q, k, v[:, :, :3]), "value length"
    )
    expect_error(bp, Status.BAD_PARAM_SHAPE_MISMATCH, lambda: sdpa(q, k[0, 0, 0], v), "at least 2")
    expect_error(
        bp,
        Status.BAD_PARAM,
        lambda: torch.ops.opendnn.sdpa(q, k, v, None, 0.5, False, 1.0, None),
        "rng",
    )


def test_opcheck(rng):
    q, k, v = _qkv(rng, (1, 2, 3, 8), (1, 2, 4, 8))
    bias = rng.rand((1, 2, 3, 4), torch.float16)
    r = torch.tensor([987654321, 7], dtype=torch.int64)
    torch.library.opcheck(torch.ops.opendnn.sdpa.default, (q, k, v, bias, 0.2, False, 0.5, r))
    o, st = torch.ops.opendnn.sdpa(q, k, v, bias, 0.2, False, 0.5, r)
    torch.library.opcheck(
        torch.ops.opendnn.sdpa_backward.default,
        (rng.rand(o.shape, torch.float16), q, k, v, o, st, bias, 0.2, False, 0.5, r, True),
    )


def test_compile_fullgraph(rng):
    """A causal attention block traced whole by AOT autograd, gradients included."""
    ins = _inputs(rng, Case("c", (1, 2, 6, 8), s=6))

    def block(f, t):
        o = f(t["q"], t["k"], t["v"], is_causal=True)
        return (o * o).sum()

    got = torch.compile(lambda t: block(sdpa, t), fullgraph=True, backend="aot_eager")(ins)
    grads = torch.autograd.grad(got, list(ins.values()))
    ref = {r: t.detach().double().requires_grad_() for r, t in ins.items()}
    want = block(F.scaled_dot_product_attention, ref)
    rgrads = torch.autograd.grad(want, list(ref.values()))
    assert_close(got.detach(), want.detach(), torch.float16, n=72)
    for g, rg in zip(grads, rgrads):
        assert_close(g, rg, torch.float16, n=12)


def test_autocast_cpu(rng):
    """Under CPU autocast (bfloat16) float32 q / k / v and a float mask run in bfloat16,
    as PyTorch's sdpa does; gradients come back in float32. The op alone casts too."""
    q, k, v = (t.requires_grad_() for t in _qkv(rng, dtype=torch.float32))
    mask = rng.rand((4, 5), torch.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        o = sdpa(q, k, v, attn_mask=mask)
        want_dtype = F.scaled_dot_product_attention(q, k, v, attn_mask=mask).dtype
        direct, stats = torch.ops.opendnn.sdpa(q, k, v, None, 0.0, False, 0.5, None)
    assert o.dtype == want_dtype == direct.dtype == torch.bfloat16
    assert stats.dtype == torch.float32
    low = [t.detach().bfloat16().double().requires_grad_() for t in (q, k, v)]
    ref = F.scaled_dot_product_attention(*low, attn_mask=mask.bfloat16().double())
    assert_close(o, ref, torch.bfloat16, n=5)
    grads = torch.autograd.grad(o.float().sum(), (q, k, v))
    rgrads = torch.autograd.grad(ref.sum(), low)
    for g, rg in zip(grads, rgrads):
        assert g.dtype == torch.float32
        assert_close(g, rg, torch.bfloat16, n=9)


def test_broadcast_gradient(rng):
    """out.sum()'s gradient has zero strides (an expanded one): read as it is."""
    q, k, v = (t.requires_grad_() for t in _qkv(rng))
    grads = torch.autograd.grad(sdpa(q, k, v).sum(), (q, k, v))
    ref = [t.detach().double().requires_grad_() for t in (q, k, v)]
    rgrads = torch.autograd.grad(F.scaled_dot_product_attention(*ref).sum(), ref)
    for g, rg in zip(grads, rgrads):
        assert_close(g, rg, torch.float16, n=9)
