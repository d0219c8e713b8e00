"""GPU checks of the attention engine (pytest -m gpu): every plan the engine lists,
forward (O, Stats) and backward (dQ, dK, dV), bfloat16 / float16, against float64
PyTorch (tests/_attention_cases.py: torch_sdpa with autograd): sequence lengths 1, 17 and
1000, head dims 32-256, every mask kind, GQA / MQA, bias (and dBias), padding, BSHD, dropout
(the mask from ops/dropout.py's stream: forward and backward use the same one); the
Gluon forward and backward (GLUON=1) with each of their knobs."""

import pytest
import torch
from _attention_cases import (
    BR,
    Case,
    backward_graph,
    dropout_mask,
    expected_keep,
    forward_graph,
    inputs,
    torch_sdpa,
    total_bias,
)

import opendnn.frontend as cudnn

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

B16 = torch.bfloat16
CASES = [
    Case("s1000_d128", b=2, h_q=4, h_k=4, s_q=1000, s_kv=1000, d=128, dtype=B16),
    Case(
        "alibi_gqa_padding_d128",
        b=2,
        h_q=6,
        h_k=2,
        s_q=300,
        s_kv=300,
        d=128,
        right=0,
        lens=((300, 211), (300, 129)),
        alibi=True,
        dtype=B16,
    ),
    Case(
        "alibi_bias_d64",
        b=1,
        h_q=4,
        h_k=4,
        s_q=64,
        s_kv=200,
        d=64,
        bias="1h",
        alibi=True,
        dtype=torch.float16,
    ),
    Case("s1000_causal_gqa_d64", b=1, h_q=8, h_k=2, s_q=1000, s_kv=1000, d=64, right=0, dtype=B16),
    Case("s17_d32", b=3, h_q=2, h_k=1, s_q=17, s_kv=17, d=32, dtype=torch.float16),
    Case(
        "s1_decode_br_d256", b=2, h_q=4, h_k=1, s_q=1, s_kv=300, d=256, align=BR, right=0, dtype=B16
    ),
    Case(
        "band_br_d96",
        b=1,
        h_q=2,
        h_k=2,
        s_q=200,
        s_kv=333,
        d=96,
        align=BR,
        left=50,
        right=3,
        dtype=B16,
    ),
    Case(
        "padding_bias_d192",
        b=2,
        h_q=2,
        h_k=2,
        s_q=130,
        s_kv=250,
        d=192,
        right=0,
        lens=((130, 77), (250, 100)),
        bias="1h",
        dtype=B16,
    ),
    Case("bshd_d128", b=2, h_q=4, h_k=2, s_q=300, s_kv=300, d=128, layout="bshd", dtype=B16),
    Case("dropout_d64", b=2, h_q=2, h_k=2, s_q=257, s_kv=257, d=64, right=0, p=0.2, dtype=B16),
]
SEED, OFFSET = 2024, 17


def _dt(t):
    return {
        cudnn.data_type.FLOAT: torch.float32,
        cudnn.data_type.HALF: torch.float16,
        cudnn.data_type.BFLOAT16: torch.bfloat16,
    }[t.get_data_type()]


def _relerr(out, ref, elementwise=False):
    """The error relative to the reference's norm, or (``elementwise``) the largest
    element's error relative to the reference's largest magnitude: a norm hides a few
    wrong elements, the element-by-element bound does not."""
    out, ref = out.double().cpu(), ref.double().cpu()
    assert not torch.isnan(out).any(), "unwritten (NaN-poisoned) outputs"
    fin = torch.isfinite(ref)
    assert torch.equal(torch.isfinite(out), fin), "masked rows differ"
    if elementwise:
        scale = max(ref[fin].abs().max().item(), 1e-12) if fin.any() else 1.0
        return ((out[fin] - ref[fin]).abs().max().item() / scale) if fin.any() else 0.0
    return ((out[fin] - ref[fin]).norm() / max(ref[fin].norm().item(), 1e-12)).item()


def _every_plan(g, feeds, outs, refs, tol, elementwise=False):
    g.build([cudnn.heur_mode.A])
    assert g.get_plan_name_at_index(0).startswith("attention"), g.get_plan_name_at_index(0)
    got = None
    for i in range(g.get_execution_plan_count()):
        name = g.get_plan_name_at_index(i)
        if not name.startswith("attention"):
            continue
        g.build_plan_at_index(i)
        ws = torch.full(
            (max(g.get_workspace_size_plan_at_index(i), 1),), 255, dtype=torch.uint8, device="cuda"
        )
        bufs = {
            t: torch.empty_strided(t.get_dim(), t.get_stride(), device="cuda", dtype=_dt(t)).fill_(
                float("nan")
            )
            for t in outs
        }
        g.execute_plan_at_index({**feeds, **bufs}, ws, i)
        for t, ref in zip(outs, refs):
            err = _relerr(bufs[t], ref, elementwise)
            assert err < tol, f"{name} {t.get_name()}: relative error {err:.2e}"
        got = got or bufs
    return got


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_forward_and_backward(rng, c):
    _forward_and_backward(rng, c, (1e-2, 2e-2))


# head dims below 64 in either operand: the forward's V tile is padded to 64 columns, the
# backward's dV = P^T dO, dQ = dS K and dK = dS^T Q have N = a small head dim; checked
# element by element (a narrow wgmma operand gave a few wrong rows, which a norm hides)
SMALL_D = [
    Case("d8_dv8_s1_decode", b=3, h_q=4, h_k=1, s_q=1, s_kv=190, d=8, dtype=B16),
    Case("d16_s64", b=2, h_q=2, h_k=2, s_q=64, s_kv=64, d=16, dtype=torch.float16),
    Case(
        "d32_dv16_s130_causal",
        b=2,
        h_q=4,
        h_k=2,
        s_q=130,
        s_kv=130,
        d=32,
        d_v=16,
        right=0,
        dtype=B16,
    ),
    Case(
        "d16_dv32_s77_190", b=1, h_q=3, h_k=3, s_q=77, s_kv=190, d=16, d_v=32, dtype=torch.float16
    ),
    Case(
        "d48_dv8_br", b=2, h_q=2, h_k=1, s_q=64, s_kv=200, d=48, d_v=8, align=BR, right=0, dtype=B16
    ),
    Case("d24_dv40_s257", b=1, h_q=2, h_k=2, s_q=257, s_kv=257, d=24, d_v=40, dtype=torch.float16),
]


@pytest.mark.parametrize("c", SMALL_D, ids=[c.id for c in SMALL_D])
def test_small_head_dims_element_by_element(rng, c):
    _forward_and_backward(rng, c, (2e-2, 4e-2), elementwise=True)


def _forward_and_backward(rng, c, tols, elementwise=False):
    """Every plan's forward (O, Stats) and backward (dQ, dK, dV, dBias) against float64
    autograd, the forward within ``tols[0]``, the backward within ``tols[1]``."""
    x = inputs(rng, c)
    xc = {n: t.cuda() for n, t in x.items()}
    keep = expected_keep(c)
    shape = (c.b, c.h_q, c.s_q, c.s_kv)
    drop = dropout_mask(SEED, OFFSET, c.p, shape) if c.p else None
    q, k, v = (x[n].double().requires_grad_(True) for n in ("q", "k", "v"))
    bias = x["bias"].double().requires_grad_(True) if "bias" in x else None
    tb = total_bias(c, {} if bias is None else {"bias": bias})
    ro, rst = torch_sdpa(q, k, v, keep, c.scale, tb, drop, c.p or 0.0)
    g, feeds, outs = forward_graph(c, xc, seed=SEED, offset=OFFSET)
    got = _every_plan(g, feeds, outs, [ro.detach(), rst.detach()], tols[0], elementwise)
    o, st = got[outs[0]], got[outs[1]]
    do = rng.rand(tuple(o.shape), c.dtype)
    ro.backward(do.double())
    g, feeds, outs = backward_graph(
        c, xc, o, st, do.cuda(), with_dbias=bias is not None, seed=SEED, offset=OFFSET
    )
    refs = [q.grad, k.grad, v.grad] + ([bias.grad] if bias is not None else [])
    _every_plan(g, feeds, outs, refs, tols[1], elementwise)


def test_dropout_masks_keep_the_fraction_and_match_between_passes(rng):
    """p = 0.5 over 2 x 4 x 512 x 512: the stream keeps a fraction within 6 sigma of 1/2,
    and the engine's forward and backward agree with float64 PyTorch using that mask."""
    c = Case("frac", b=2, h_q=4, h_k=4, s_q=512, s_kv=512, d=64, p=0.5, dtype=B16)
    m = dropout_mask(SEED, OFFSET, 0.5, (2, 4, 512, 512))
    n = m.numel()
    assert abs(m.mean().item() - 0.5) < 6 * (0.25 / n) ** 0.5
    test_forward_and_backward(rng, c)  # the engine's O and grads use exactly this mask


PAGED_GPU = [
    Case("paged32_d128", b=2, h_q=4, h_k=2, s_q=100, s_kv=300, d=128, paged=32, dtype=B16),
    Case(
        "paged128_padding_causal_br",
        b=2,
        h_q=2,
        h_k=2,
        s_q=64,
        s_kv=500,
        d=64,
        paged=128,
        lens=((64, 20), (500, 333)),
        align=BR,
        right=0,
        dtype=torch.float16,
    ),
    Case(
        "paged64_packed_tables",
        b=3,
        h_q=4,
        h_k=1,
        s_q=33,
        s_kv=400,
        d=128,
        paged=64,
        lens=((33, 7, 20), (400, 65, 130)),
        packed_tables=True,
        dtype=B16,
    ),
]


@pytest.mark.parametrize("c", PAGED_GPU, ids=[c.id for c in PAGED_GPU])
def test_paged_kv_forward(rng, c):
    x = inputs(rng, c)
    xc = {n: t.cuda() for n, t in x.items()}
    q, k, v = (x[n].double() for n in ("q", "k", "v"))
    ro, rst = torch_sdpa(q, k, v, expected_keep(c), c.scale)
    g, feeds, outs = forward_graph(c, xc, seed=SEED, offset=OFFSET)
    _every_plan(g, feeds, outs, [ro, rst], 1e-2)


def test_rng_dump_is_the_mask_both_passes_use(rng):
    """rng_dump (forward and backward) holds the stream's mask, every element."""
    c = Case("dump", b=2, h_q=2, h_k=2, s_q=70, s_kv=150, d=64, p=0.2, right=0, dtype=B16)
    x = {n: t.cuda() for n, t in inputs(rng, c).items()}
    want = dropout_mask(SEED, OFFSET, c.p, (c.b, c.h_q, c.s_q, c.s_kv)).float()
    g, feeds, outs = forward_graph(c, x, seed=SEED, offset=OFFSET, rng_dump=True)
    feeds = {t: b.cuda() for t, b in feeds.items()}
    feeds[outs[0]] = torch.empty(c.b, c.h_q, c.s_q, c.dv, dtype=c.dtype, device="cuda")
    feeds[outs[1]] = torch.empty(c.b, c.h_q, c.s_q, 1, device="cuda")
    g.build([cudnn.heur_mode.A])
    ws = torch.empty(g.get_workspace_size(), dtype=torch.uint8, device="cuda")
    g.execute(feeds, ws)
    assert torch.equal(feeds[outs[-1]].cpu(), want)


ATOMIC_CASES = [
    c for c in CASES if c.id in ("s1000_causal_gqa_d64", "padding_bias_d192", "s17_d32")
]


@pytest.mark.parametrize("tma", [0, 1])
@pytest.mark.parametrize("c", ATOMIC_CASES, ids=[c.id for c in ATOMIC_CASES])
def test_backward_with_atomic_dq(rng, c, tma):
    """DQ_ATOMIC=1 (not listed: slower), per-element atomics (TMA=0) and one bulk
    reduction per tile (TMA=1), against float64 PyTorch."""
    x = inputs(rng, c)
    xc = {n: t.cuda() for n, t in x.items()}
    q, k, v = (x[n].double().requires_grad_(True) for n in ("q", "k", "v"))
    bias = x["bias"].double().requires_grad_(True) if "bias" in x else None
    ro, rst = torch_sdpa(q, k, v, expected_keep(c), c.scale, bias)
    do = rng.rand(tuple(ro.shape), c.dtype)
    ro.backward(do.double())
    o = ro.detach().to(c.dtype).cuda()
    g, feeds, outs = backward_graph(
        c, xc, o, rst.detach().float().cuda(), do.cuda(), with_dbias=bias is not None
    )
    g.validate()
    g.build_operation_graph()
    g.create_execution_plan(
        40,
        dict(
            BLOCK_M=64,
            BLOCK_N=64,
            num_warps=4,
            num_stages=2 if c.d <= 128 else 1,
            TMA=tma,
            DQ_ATOMIC=1,
        ),
    )
    g.check_support()
    g.build_plans()
    ws = torch.full((max(g.get_workspace_size(), 1),), 255, dtype=torch.uint8, device="cuda")
    bufs = {
        t: torch.empty_strided(t.get_dim(), t.get_stride(), device="cuda", dtype=_dt(t)).fill_(
            float("nan")
        )
        for t in outs
    }
    g.execute({**feeds, **bufs}, ws)
    refs = [q.grad, k.grad, v.grad] + ([bias.grad] if bias is not None else [])
    for t, ref in zip(outs, refs):
        err = _relerr(bufs[t], ref)
        assert err < 2e-2, f"{c.id} tma={tma} {t.get_name()}: relative error {err:.2e}"


GLUON_CASES = [
    Case("gl_s1000_d128", b=2, h_q=4, h_k=4, s_q=1000, s_kv=1000, d=128, dtype=B16),
    Case(
        "gl_s1024_causal_gqa_d128",
        b=1,
        h_q=8,
        h_k=2,
        s_q=1024,
        s_kv=1024,
        d=128,
        right=0,
        dtype=B16,
    ),
    Case(
        "gl_s80_causal_d64", b=3, h_q=2, h_k=2, s_q=80, s_kv=80, d=64, right=0, dtype=torch.float16
    ),
    Case("gl_s384_mqa_d64", b=2, h_q=4, h_k=1, s_q=384, s_kv=384, d=64, scale=0.125, dtype=B16),
]
GLUON_KNOBS = [
    dict(BLOCK_M=128, BLOCK_N=n, num_warps=4, num_stages=st, GLUON=1, PINGPONG=pp)
    for n, st, pp in ((128, 2, 0), (128, 2, 1), (64, 3, 0), (128, 3, 0))
]


@pytest.mark.parametrize(
    "knobs", GLUON_KNOBS, ids=lambda k: "n{BLOCK_N}s{num_stages}p{PINGPONG}".format(**k)
)
@pytest.mark.parametrize("c", GLUON_CASES, ids=[c.id for c in GLUON_CASES])
def test_gluon_forward(rng, c, knobs):
    """The warp-specialized Gluon forward against float64 PyTorch: tails (S=1000, 80),
    causal (query tiles in either order: LPT 0 / 1), GQA / MQA, half and bfloat16, with and
    without Stats (without: the workspace takes them), each knob combination; run twice on
    one NaN-poisoned workspace."""
    x = inputs(rng, c)
    xc = {n: t.cuda() for n, t in x.items()}
    q, k, v = (x[n].double() for n in ("q", "k", "v"))
    ro, rst = torch_sdpa(q, k, v, expected_keep(c), c.scale)
    lpt = (False, True) if c.right == 0 else (False,)
    for stats, order in ((s, o) for s in (True, False) for o in lpt):
        g, feeds, outs = forward_graph(c, xc, generate_stats=stats)
        outs = [t for t in outs if t is not None]
        g.validate()
        g.build_operation_graph()
        g.create_execution_plan(40, dict(knobs, LPT=int(order)))
        g.check_support()
        g.build_plans()
        ws = torch.full((max(g.get_workspace_size(), 1),), 255, dtype=torch.uint8, device="cuda")
        for _ in range(2):  # the second run: new output buffers, new descriptors
            bufs = {
                t: torch.empty_strided(
                    t.get_dim(), t.get_stride(), device="cuda", dtype=_dt(t)
                ).fill_(float("nan"))
                for t in outs
            }
            g.execute({**feeds, **bufs}, ws)
            for t, ref in zip(outs, [ro, rst]):
                err = _relerr(bufs[t], ref)
                assert err < 1e-2, (
                    f"{c.id} {knobs} lpt={order} stats={stats} {t.get_name()}: {err:.2e}"
                )


# more query tiles than the H100's 132 SMs: each persistent program takes several
PERSIST_CASES = [
    Case(
        "gp_s2048_causal_gqa_d64", b=2, h_q=8, h_k=2, s_q=2048, s_kv=2048, d=64, right=0, dtype=B16
    ),
    Case(
        "gp_s1024_causal_d128_fp16",
        b=4,
        h_q=10,
        h_k=5,
        s_q=1024,
        s_kv=1024,
        d=128,
        right=0,
        dtype=torch.float16,
    ),
    Case("gp_s512_mqa_d128", b=3, h_q=12, h_k=1, s_q=512, s_kv=512, d=128, scale=0.125, dtype=B16),
    Case("gp_s256_causal_d64_few", b=1, h_q=3, h_k=3, s_q=256, s_kv=256, d=64, right=0, dtype=B16),
]
PERSIST_KNOBS = [
    dict(BLOCK_M=128, BLOCK_N=n, num_warps=4, num_stages=st, GLUON=1, PERSIST=1)
    for n, st in ((64, 3), (128, 2), (64, 2))
]


@pytest.mark.parametrize(
    "knobs", PERSIST_KNOBS, ids=lambda k: "n{BLOCK_N}s{num_stages}".format(**k)
)
@pytest.mark.parametrize("c", PERSIST_CASES, ids=[c.id for c in PERSIST_CASES])
def test_gluon_persistent_forward(rng, c, knobs):
    """The persistent Gluon forward (PERSIST=1) against float64 PyTorch: causal and not,
    GQA / MQA, both head dims and types, more query tiles than SMs (and fewer); with and
    without Stats, run twice on one NaN-poisoned workspace."""
    x = inputs(rng, c)
    xc = {n: t.cuda() for n, t in x.items()}
    q, k, v = (x[n].double() for n in ("q", "k", "v"))
    ro, rst = torch_sdpa(q, k, v, expected_keep(c), c.scale)
    for stats in (True, False):
        g, feeds, outs = forward_graph(c, xc, generate_stats=stats)
        outs = [t for t in outs if t is not None]
        g.validate()
        g.build_operation_graph()
        g.create_execution_plan(40, knobs)
        g.check_support()
        g.build_plans()
        ws = torch.full((max(g.get_workspace_size(), 1),), 255, dtype=torch.uint8, device="cuda")
        for _ in range(2):
            bufs = {
                t: torch.empty_strided(
                    t.get_dim(), t.get_stride(), device="cuda", dtype=_dt(t)
                ).fill_(float("nan"))
                for t in outs
            }
            g.execute({**feeds, **bufs}, ws)
            for t, ref in zip(outs, [ro, rst]):
                err = _relerr(bufs[t], ref)
                assert err < 1e-2, f"{c.id} {knobs} stats={stats} {t.get_name()}: {err:.2e}"


GLUON_BWD_CASES = [
    Case(
        "glb_s1024_causal_gqa_d128",
        b=1,
        h_q=8,
        h_k=2,
        s_q=1024,
        s_kv=1024,
        d=128,
        right=0,
        dtype=B16,
    ),
    Case("glb_s512_d128", b=2, h_q=4, h_k=4, s_q=512, s_kv=512, d=128, dtype=B16),
    Case(
        "glb_s256_causal_d64_half",
        b=3,
        h_q=2,
        h_k=2,
        s_q=256,
        s_kv=256,
        d=64,
        right=0,
        dtype=torch.float16,
    ),
    Case("glb_s384_mqa_d64", b=2, h_q=4, h_k=1, s_q=384, s_kv=384, d=64, scale=0.125, dtype=B16),
]
GLUON_BWD_KNOBS = [
    dict(
        BLOCK_M=64,
        BLOCK_N=128,
        num_warps=4,
        num_stages=st,
        DQ_BLOCK_M=128,
        DQ_BLOCK_N=n,
        DQ_WARPS=4,
        DQ_STAGES=dst,
        GLUON=1,
    )
    for st, n, dst in ((2, 64, 3), (3, 64, 2), (4, 128, 2))
]


@pytest.mark.parametrize(
    "knobs", GLUON_BWD_KNOBS, ids=lambda k: "s{num_stages}n{DQ_BLOCK_N}s{DQ_STAGES}".format(**k)
)
@pytest.mark.parametrize("c", GLUON_BWD_CASES, ids=[c.id for c in GLUON_BWD_CASES])
def test_gluon_backward(rng, c, knobs):
    """The warp-specialized Gluon backward against float64 PyTorch: causal, GQA / MQA, half
    and bfloat16, head dims 64 and 128, each knob set (those that fit head dim 128's shared
    memory); run twice on one NaN-poisoned workspace with new gradient buffers."""
    _check_gluon_backward(rng, c, knobs)


ND_STAGES = [(c, st) for c in GLUON_BWD_CASES for st in ((2, 3) if c.d == 128 else (2, 4))]


@pytest.mark.parametrize("c,stages", ND_STAGES, ids=[f"{c.id}-s{st}" for c, st in ND_STAGES])
def test_gluon_nondeterministic_backward(rng, c, stages):
    """The Gluon backward with dQ added by TMA reductions from the dK / dV kernel
    (DQ_ATOMIC=1, note NONDETERMINISTIC) on the same cases. The workspace holds dQ's
    float32 accumulator: NaN-poisoned before the first run, holding the first run's sums
    at the second (the delta kernel zeroes it each run)."""
    _check_gluon_backward(
        rng, c, dict(BLOCK_M=64, BLOCK_N=128, num_warps=4, num_stages=stages, DQ_ATOMIC=1, GLUON=1)
    )


def _check_gluon_backward(rng, c, knobs):
    x = inputs(rng, c)
    xc = {n: t.cuda() for n, t in x.items()}
    q, k, v = (x[n].double().requires_grad_(True) for n in ("q", "k", "v"))
    ro, rst = torch_sdpa(q, k, v, expected_keep(c), c.scale)
    do = rng.rand(tuple(ro.shape), c.dtype)
    ro.backward(do.double())
    o = ro.detach().to(c.dtype).cuda()
    g, feeds, outs = backward_graph(c, xc, o, rst.detach().float().cuda(), do.cuda())
    g.validate()
    g.build_operation_graph()
    g.create_execution_plan(40, knobs)
    g.check_support()
    g.build_plans()
    ws = torch.full((max(g.get_workspace_size(), 1),), 255, dtype=torch.uint8, device="cuda")
    for _ in range(2):
        bufs = {
            t: torch.empty_strided(t.get_dim(), t.get_stride(), device="cuda", dtype=_dt(t)).fill_(
                float("nan")
            )
            for t in outs
        }
        g.execute({**feeds, **bufs}, ws)
        for t, ref in zip(outs, [q.grad, k.grad, v.grad]):
            err = _relerr(bufs[t], ref)
            assert err < 2e-2, f"{c.id} {knobs} {t.get_name()}: relative error {err:.2e}"


RAGGED_GPU = [
    Case(
        "ragged_gqa_causal_d128",
        b=3,
        h_q=4,
        h_k=2,
        s_q=200,
        s_kv=200,
        d=128,
        right=0,
        lens=((200, 77, 13), (200, 150, 1)),
        ragged=True,
        dtype=B16,
    ),
    Case(
        "ragged_br_d64",
        b=2,
        h_q=2,
        h_k=2,
        s_q=64,
        s_kv=300,
        d=64,
        align=BR,
        right=0,
        lens=((64, 20), (300, 111)),
        ragged=True,
        dtype=torch.float16,
    ),
    # head dim V below the key tile (Triton 3.6 miscompiled P V here on sm_90 until the
    # ragged offsets were hinted 16-byte multiples), with a bias and dropout
    Case(
        "ragged_dv32_d192",
        b=2,
        h_q=6,
        h_k=6,
        s_q=24,
        s_kv=512,
        d=192,
        d_v=32,
        lens=((17, 23), (341, 305)),
        ragged=True,
        p=0.1,
        bias="1h",
        dtype=torch.float16,
    ),
]


@pytest.mark.parametrize("c", RAGGED_GPU, ids=[c.id for c in RAGGED_GPU])
def test_ragged_against_reference(rng, c):
    """THD-packed tensors on the GPU: the engine's every plan against the reference on
    the same buffers, forward and backward (the unwritten tails stay NaN in both)."""
    _against_reference(rng, c, backward=True)


def _against_reference(rng, c, backward: bool) -> None:
    """The engine's plan against the reference on the same GPU buffers, the forward and
    (``backward``) the backward from its O and Stats; a ragged case's unwritten tails
    stay NaN in both."""
    from _util import check_engine

    from opendnn.engines.attention.engine import AttentionEngine

    x = {n: t.cuda() for n, t in inputs(rng, c).items()}
    g, feeds, outs = forward_graph(c, x)
    got = check_engine(g, feeds, outs, AttentionEngine.id, n=c.s_kv, allow_nan=c.ragged)
    if backward:
        do = rng.rand((c.b, c.h_q, c.s_q, c.dv), c.dtype).cuda()
        g, feeds, outs = backward_graph(c, x, got[outs[0]], got[outs[1]], do)
        check_engine(g, feeds, outs, AttentionEngine.id, n=c.s_q + c.s_kv, allow_nan=c.ragged)


SINK_GPU = [
    Case(
        "sink_scores_d128",
        b=2,
        h_q=4,
        h_k=2,
        s_q=300,
        s_kv=300,
        d=128,
        right=0,
        sink=True,
        score_stats=True,
        dtype=B16,
    ),
    Case(
        "sink_ragged_stats_d64",
        b=2,
        h_q=2,
        h_k=2,
        s_q=128,
        s_kv=128,
        d=64,
        lens=((128, 40), (100, 128)),
        ragged=True,
        ragged_stats=True,
        sink=True,
        dtype=torch.float16,
    ),
]


@pytest.mark.parametrize("c", SINK_GPU, ids=[c.id for c in SINK_GPU])
def test_sink_against_reference(rng, c):
    """Attention sinks (Stats, O, dSink), the score outputs and ragged Stats on the GPU:
    the engine's plan against the reference on the same buffers."""
    _against_reference(rng, c, backward=True)


BLOCK_GPU = [
    Case(
        "block_mask_gqa_d128",
        b=2,
        h_q=4,
        h_k=2,
        s_q=300,
        s_kv=700,
        d=128,
        block_mask=True,
        dtype=B16,
    ),
    Case(
        "block_mask_padding_causal_d64",
        b=2,
        h_q=2,
        h_k=2,
        s_q=520,
        s_kv=520,
        d=64,
        lens=((520, 131), (200, 520)),
        right=0,
        block_mask=True,
        dtype=torch.float16,
    ),
]


@pytest.mark.parametrize("c", BLOCK_GPU, ids=[c.id for c in BLOCK_GPU])
def test_block_mask_against_reference(rng, c):
    """Block masks (a bit per 128 x 128 tile) on the GPU: the engine's plan against the
    reference on the same buffers (forward; cuDNN has no block-mask backward)."""
    _against_reference(rng, c, backward=False)


def test_decode_with_strides_of_size_one_dims_far_apart():
    """One query row (decode), GQA 21:1, head dim V 8, the layout of cudnn-frontend's
    random decode test (test_mhas_v2's sq1 case 108, which cuDNN passes): Q's and O's
    stride on their size-one S dim is 99,990,001, which addresses nothing (the kernels
    take it as 0). With a 16-column V tile, 64 x 64 tiles gave 80% of O wrong (Triton
    3.6's wgmma path on sm_90); V tiles are now 64 columns at least. Every plan against
    float64."""
    b, hq, skv, dqk, dv = 18, 21, 313, 56, 8
    gen = torch.Generator().manual_seed(7)

    def strided(shape, stride):
        n = 1 + sum((s - 1) * st for s, st in zip(shape, stride))
        x = torch.randn(n, generator=gen).to(torch.bfloat16).cuda()
        return x.as_strided(shape, stride)

    q = strided((b, hq, 1, dqk), (72, 1440, 99990001, 1))
    k = strided((b, 1, skv, dqk), (56, 3331333, b * dqk, 1))
    v = strided((b, 1, skv, dv), (dv, 3331333, b * dv, 1))
    g = cudnn.pygraph(
        io_data_type=cudnn.data_type.BFLOAT16,
        intermediate_data_type=cudnn.data_type.FLOAT,
        compute_data_type=cudnn.data_type.FLOAT,
    )
    tq, tk, tv = g.tensor_like(q), g.tensor_like(k), g.tensor_like(v)
    o, _ = g.sdpa(tq, tk, tv, attn_scale=0.125, generate_stats=False)
    o.set_output(True).set_dim([b, hq, 1, dv]).set_stride([2 * dv, 48 * dv, 99990001, 1])
    kr, vr = (x.double().expand(b, hq, skv, x.shape[3]) for x in (k, v))
    ref = torch.softmax(q.double() @ kr.transpose(-1, -2) * 0.125, -1) @ vr
    _every_plan(g, {tq: q, tk: k, tv: v}, [o], [ref], 1e-2)
