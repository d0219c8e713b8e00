"""Scaled-dot-product attention on the graph API, computed by the float64 reference
engine, against PyTorch: the forward against torch's math-path
scaled_dot_product_attention (float64, an explicit additive mask, enable_gqa) and Stats
against torch.logsumexp; the backward against torch.autograd in float64; every mask
kind (none, causal top-left / bottom-right, bands, padding, padding + bottom-right),
GQA / MQA, bias broadcasts (and dBias), odd sequence lengths, head dims 8..256, BSHD
strides, half types; literal masks that pin cuDNN's band semantics; dropout's stream,
its statistics, and the forward and backward drawing the same mask; the deprecated
aliases; generate_stats=False."""

import dataclasses
import math

import numpy as np
import pytest
import torch
from _attention_cases import (
    BLOCK,
    BR,
    CASES,
    PAGED,
    RAGGED,
    SINK,
    TL,
    Case,
    _ragged_side,
    backward_graph,
    block_keep,
    dropout_mask,
    expected_keep,
    forward_graph,
    inputs,
    ragged_pack,
    ragged_unpack,
    thd_offsets,
    torch_math_sdpa,
    torch_sdpa,
    torch_sdpa_sink,
    total_bias,
)
from _util import assert_close, expect_error, repro, run_reference

import opendnn.frontend as cudnn
from opendnn.errors import BadParamError, Status
from opendnn.ops import attention as A
from opendnn.ops import dropout as dropout_ref
from opendnn.runtime.buffers import bind, check_workspace

BY_ID = {c.id: c for c in CASES}


def _f64(x: dict) -> dict:
    return {n: t.to(torch.float64) if t.is_floating_point() else t for n, t in x.items()}


def _scale(c: Case) -> float:
    return 1.0 if c.scale is None else c.scale


def _tol_n(c: Case) -> int:
    return max(c.s_q, c.s_kv) * c.h_q


# ---- the mask, literally ---------------------------------------------------------------
@pytest.mark.parametrize(
    "align,left,right,lens,s_q,s_kv,want",
    [
        (TL, None, 0, None, 3, 5, ["10000", "11000", "11100"]),  # causal, top-left
        (BR, None, 0, None, 3, 5, ["11100", "11110", "11111"]),  # diagonal shifted by 2
        (BR, 2, 0, None, 3, 5, ["01100", "00110", "00011"]),  # window of 2 keys
        (TL, 2, None, None, 4, 4, ["1111", "1111", "0111", "0011"]),  # left bound only
        (TL, 1, 1, None, 3, 4, ["1100", "0110", "0011"]),  # band i <= j <= i + 1
        (BR, None, 0, (2, 3), 4, 4, ["1100", "1110", "0000", "0000"]),  # padded: actual lengths
        (TL, None, None, (3, 2), 4, 4, ["1100", "1100", "1100", "0000"]),
    ],
)
def test_mask_literal(align, left, right, lens, s_q, s_kv, want):
    m = A.Masking(align, left, right, padding=lens is not None)
    got = A.score_mask(m, s_q, s_kv, *(lens or (None, None)))
    assert ["".join("1" if x else "0" for x in row) for row in got] == want


# ---- forward ------------------------------------------------------------------------------
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_forward_matches_torch(case, rng):
    x = inputs(rng, case)
    g, feeds, (o, st) = forward_graph(case, x)
    got = run_reference(g, feeds, [o, st])
    if case.layout == "bshd":  # O takes Q's stride order when unset
        assert o.get_stride() == list(x["q"].stride()[:1]) + [case.dv, case.h_q * case.dv, 1]
    keep, y = expected_keep(case), _f64(x)
    msg = repro(
        "sdpa", {n: tuple(t.shape) for n, t in x.items()}, case.dtype, rng.seed, case=case.id
    )
    want_o = torch_math_sdpa(y["q"], y["k"], y["v"], keep, _scale(case), total_bias(case, y))
    assert_close(got[o], want_o, case.dtype, _tol_n(case), msg)
    kk = y["k"].repeat_interleave(case.h_q // case.h_k, 1)
    s = _scale(case) * (y["q"] @ kk.transpose(-1, -2))
    s = s if total_bias(case, y) is None else s + total_bias(case, y)
    want_stats = torch.logsumexp(s.masked_fill(~keep, -math.inf), -1, keepdim=True)
    assert_close(got[st], want_stats, torch.float32, _tol_n(case), msg)
    dead = ~keep.expand(case.b, case.h_q, -1, -1).any(-1)
    assert bool((got[o][dead] == 0).all()) and bool((got[st][dead] == -math.inf).all())


def test_generate_stats_false_gives_no_stats(rng):
    c = BY_ID["causal_br"]
    x = inputs(rng, c)
    for kw in (dict(generate_stats=False), dict(is_inference=True)):
        g = cudnn.pygraph()
        tq, tk, tv = (g.tensor_like(x[n]) for n in ("q", "k", "v"))
        o, st = g.sdpa(
            tq, tk, tv, attn_scale=0.25, diagonal_alignment=BR, diagonal_band_right_bound=0, **kw
        )
        assert st is None
        got = run_reference(g, {tq: x["q"], tk: x["k"], tv: x["v"]}, [o])
        want = torch_math_sdpa(*_f64(x).values(), expected_keep(c), 0.25)
        assert_close(got[o], want, torch.float32, _tol_n(c))
        assert [n.kind for n in g.op_graph.nodes] == ["sdpa"]
        assert len(g.op_graph.output_uids) == 1


def test_deprecated_aliases_mean_the_new_arguments(rng):
    c = Case("aliases", s_q=5, s_kv=9)
    x = inputs(rng, c)

    def node(**kw):
        g = cudnn.pygraph()
        t = [g.tensor_like(x[n]) for n in ("q", "k", "v")]
        g.sdpa(*t, **kw)
        n = g._nodes[0]
        return (
            n.diagonal_alignment,
            n.diagonal_band_left_bound,
            n.diagonal_band_right_bound,
            n.generate_stats,
        )

    assert node(use_causal_mask=True) == node(diagonal_band_right_bound=0)
    assert node(use_causal_mask_bottom_right=True, is_inference=True) == node(
        diagonal_alignment=BR, diagonal_band_right_bound=0, generate_stats=False
    )
    assert node(sliding_window_length=3, use_causal_mask=True) == node(
        diagonal_band_left_bound=3, diagonal_band_right_bound=0
    )
    assert node(use_causal_mask=True, diagonal_band_right_bound=2)[2] == 2


# ---- backward -----------------------------------------------------------------------------
BACKWARD = [
    "plain",
    "causal_tl",
    "causal_br",
    "causal_br_sq_gt_skv",
    "band_br",
    "empty_band",
    "padding",
    "padding_br_causal",
    "gqa",
    "mqa",
    "kv_heads_differ",
    "bias_bh",
    "bias_1h",
    "bias_b1",
    "bias_11",
    "s1",
    "d24_dv40",
    "bshd",
    "no_scale",
    "bf16",
    "alibi",
    "alibi_padding_br",
    "alibi_bias_rect",
]


@pytest.mark.parametrize("cid", BACKWARD)
def test_backward_matches_autograd(cid, rng):
    c = BY_ID[cid]
    x = inputs(rng, c)
    y = {n: t.detach().clone().requires_grad_(t.is_floating_point()) for n, t in _f64(x).items()}
    o, stats = torch_sdpa(y["q"], y["k"], y["v"], expected_keep(c), _scale(c), total_bias(c, y))
    do = rng.rand(o.shape, c.dtype)
    o.backward(do.to(torch.float64))
    g, feeds, outs = backward_graph(
        c, x, o.detach().to(c.dtype), stats.detach().float(), do, with_dbias="bias" in x
    )
    got = run_reference(g, feeds, outs)
    msg = repro(
        "sdpa_backward", {n: tuple(t.shape) for n, t in x.items()}, c.dtype, rng.seed, case=cid
    )
    for t, n in zip(outs, ("q", "k", "v", "bias")):
        assert_close(got[t], y[n].grad, c.dtype, _tol_n(c), f"{msg} grad={n}")


def test_backward_gqa_against_torch_sdpa_autograd(rng):
    """The explicit float64 function the other tests use agrees with torch's own
    scaled_dot_product_attention (enable_gqa) here; the reference matches both."""
    c = BY_ID["gqa"]
    x = inputs(rng, c)
    y = {n: t.detach().clone().double().requires_grad_(True) for n, t in x.items()}
    o = torch.nn.functional.scaled_dot_product_attention(
        y["q"], y["k"], y["v"], scale=0.25, is_causal=True, enable_gqa=True
    )
    do = rng.rand(o.shape)
    o.backward(do.double())
    o2, stats = torch_sdpa(*(t.detach() for t in y.values()), expected_keep(c), 0.25)
    assert_close(o2, o.detach(), torch.float64, _tol_n(c))
    g, feeds, outs = backward_graph(c, x, o.detach().float(), stats.float(), do)
    got = run_reference(g, feeds, outs)
    for t, n in zip(outs, ("q", "k", "v")):
        assert_close(got[t], y[n].grad, torch.float32, _tol_n(c), f"grad={n}")


# ---- dropout ------------------------------------------------------------------------------
def test_dropout_mask_stream_and_statistics():
    """M[b, h, i, j] is the Philox uniform of its row-major index compared with p; over
    65536 elements the kept fraction is within 6 binomial sigmas of 1 - p."""
    shape, p = (2, 4, 64, 128), 0.3
    m = A.dropout_keep(99, 7, p, shape)
    n = m.size
    assert abs(m.mean() - (1 - p)) < 6 * math.sqrt(p * (1 - p) / n)
    idx = np.array([0, 1, 5, 4097, n - 1])
    u = dropout_ref.uniform_at(99, 7, idx)
    assert (m.reshape(-1)[idx] == (u >= np.float32(p))).all()
    assert (A.dropout_keep(99, 8, p, shape) != m).mean() > 0.3  # another offset: new mask


@pytest.mark.parametrize("cid", ["causal_tl", "padding_br_causal", "gqa", "bias_1h"])
def test_dropout_forward_and_backward_share_the_mask(cid, rng):
    c = dataclasses.replace(BY_ID[cid], p=0.3)
    x = inputs(rng, c)
    seed, offset = 20240917, 12
    drop = dropout_mask(seed, offset, c.p, (c.b, c.h_q, c.s_q, c.s_kv))
    assert 0.5 < drop.mean() < 0.9
    y = {n: t.detach().clone().requires_grad_(t.is_floating_point()) for n, t in _f64(x).items()}
    o, stats = torch_sdpa(
        y["q"], y["k"], y["v"], expected_keep(c), _scale(c), y.get("bias"), drop, c.p
    )
    do = rng.rand(o.shape)
    o.backward(do.double())
    msg = repro(
        "sdpa dropout", {n: tuple(t.shape) for n, t in x.items()}, c.dtype, rng.seed, case=cid
    )
    # host ints, then one-element int64 device-style tensors: the same stream
    dev = (torch.tensor([[[[seed]]]], dtype=torch.int64), torch.tensor([[[[offset]]]]))
    for s_, o_ in ((seed, offset), dev):
        g, feeds, (to, tst) = forward_graph(c, x, seed=s_, offset=o_)
        got = run_reference(g, feeds, [to, tst])
        assert_close(got[to], o, torch.float32, _tol_n(c), msg)
        assert_close(got[tst], stats, torch.float32, _tol_n(c), msg)
    g, feeds, outs = backward_graph(
        c,
        x,
        o.detach().float(),
        stats.detach().float(),
        do,
        with_dbias="bias" in x,
        seed=seed,
        offset=offset,
    )
    got = run_reference(g, feeds, outs)
    for t, n in zip(outs, ("q", "k", "v", "bias")):
        assert_close(got[t], y[n].grad, torch.float32, _tol_n(c), f"{msg} grad={n}")


# ---- execution-time checks ---------------------------------------------------------------------
def test_sequence_lengths_out_of_range_fail_at_execution(rng):
    c = BY_ID["padding"]
    x = inputs(rng, c)
    x["seq_len_kv"] = torch.tensor([18, 3], dtype=torch.int32).reshape(2, 1, 1, 1)
    g, feeds, outs = forward_graph(c, x)
    expect_error(
        BadParamError,
        Status.BAD_PARAM_OUT_OF_BOUND,
        lambda: run_reference(g, feeds, outs),
        "sdpa",
        "seq_len_kv",
        "[18]",
    )


def test_serialized_graph_round_trips(rng):
    c = BY_ID["padding_br_band"]
    x = inputs(rng, c)
    g, feeds, outs = forward_graph(c, x)
    first = run_reference(g, feeds, outs)
    g2 = cudnn.pygraph().deserialize(g.serialize())
    node = g2.op_graph.nodes[0]
    assert node.diagonal_alignment == BR and node.diagonal_band_left_bound == 4
    pack = {t.get_uid(): v for t, v in feeds.items()}
    bufs = {t.get_uid(): torch.full(t.get_dim(), math.nan) for t in outs}
    g2.execute({**pack, **bufs}, None)
    for t in outs:
        assert torch.equal(bufs[t.get_uid()], first[t])


@pytest.mark.parametrize("backward", [False, True])
def test_rng_dump_receives_the_dropout_mask(rng, backward):
    """rng_dump (a caller's [B, Hq, Sq, Skv] float tensor, either direction) receives
    the mask the kernels apply: 1 kept, 0 dropped (cudnn-frontend's tests rebuild their
    reference from it), every element written."""
    c = dataclasses.replace(BY_ID["padding_br_causal"], p=0.25)
    x = inputs(rng, c)
    want = dropout_mask(77, 5, c.p, (c.b, c.h_q, c.s_q, c.s_kv))
    g, feeds, outs = forward_graph(c, x, seed=77, offset=5, rng_dump=True)
    got = run_reference(g, feeds, outs)
    if backward:
        o, st = got[outs[0]].to(c.dtype), got[outs[1]]
        do = rng.rand(tuple(o.shape), c.dtype)
        g, feeds, outs = backward_graph(c, x, o, st, do, seed=77, offset=5, rng_dump=True)
        got = run_reference(g, feeds, outs)
    assert torch.equal(got[outs[-1]].double(), want)


@pytest.mark.parametrize("c", PAGED, ids=[c.id for c in PAGED])
def test_paged_kv_forward_matches_torch(rng, c):
    """K / V read through shuffled page tables (spare blocks and the last page's tail
    NaN): O and Stats as attention over the logical K / V."""
    x = inputs(rng, c)
    g, feeds, (o, st) = forward_graph(c, x)
    got = run_reference(g, feeds, [o, st])
    y = _f64(x)
    want = torch_math_sdpa(y["q"], y["k"], y["v"], expected_keep(c), _scale(c), total_bias(c, y))
    assert_close(got[o], want, c.dtype, _tol_n(c), repro("sdpa paged", [c], "", rng.seed))
    assert not got[st].isnan().any()


@pytest.mark.parametrize("c", RAGGED, ids=[c.id for c in RAGGED])
def test_ragged_forward_and_backward_match_torch(rng, c):
    """Q, K, V, O, dO and the gradients packed THD (each batch's rows back to back, found
    by ragged offsets): unpacked, the results are attention over the padded tensors; the
    buffers' rows past the packed ones are never written."""
    x = inputs(rng, c)
    y = {n: t.detach().clone().requires_grad_(t.is_floating_point()) for n, t in _f64(x).items()}
    keep = expected_keep(c)
    o, stats = torch_sdpa(y["q"], y["k"], y["v"], keep, _scale(c), total_bias(c, y))
    g, feeds, (to, tst) = forward_graph(c, x)
    got = run_reference(g, feeds, [to, tst])
    lq, lkv = c.lens
    offs = {n: thd_offsets(*_ragged_side(c, n)) for n in ("o", "dq", "dk", "dv")}
    msg = repro("sdpa ragged", [c], "", rng.seed)
    assert_close(ragged_unpack(got[to], offs["o"], lq), o, c.dtype, _tol_n(c), msg)
    st_got = got[tst]
    if c.ragged_stats:  # rows past a batch's length read as 0 here; Stats has -inf there
        st_got = ragged_unpack(st_got, thd_offsets(*_ragged_side(c, "stats")), lq)
        stats_want = torch.where(torch.isinf(stats), 0.0, stats)
    else:
        stats_want = stats
    assert_close(st_got, stats_want, torch.float32, _tol_n(c), msg)
    total = sum(lq) * c.h_q * c.dv
    flat = got[to].as_strided((got[to].numel(),), (1,))  # the buffer spans B S H Dv
    assert flat[total:].isnan().all()  # past the packed rows: untouched (NaN-poisoned)
    do = rng.rand(tuple(o.shape), c.dtype)
    o.backward(do.double())
    o_packed = ragged_pack(o.detach().to(c.dtype), lq)[0]
    st = stats.detach().float()
    if c.ragged_stats:
        st = ragged_pack(st, lq)[0]
    g, feeds, outs = backward_graph(c, x, o_packed, st, do, with_dbias="bias" in x)
    got = run_reference(g, feeds, outs)
    for t, n in zip(outs, ("q", "k", "v", "bias")):
        want = y[n].grad
        have = (
            got[t]
            if n == "bias"
            else ragged_unpack(got[t], offs[f"d{n}"], _ragged_side(c, f"d{n}")[0])
        )
        assert_close(have, want, c.dtype, _tol_n(c), f"{msg} grad={n}")


@pytest.mark.parametrize("c", SINK, ids=[c.id for c in SINK])
def test_sink_and_score_statistics_match_torch(rng, c):
    """An attention sink (a per-head logit in each row's softmax, without a value) and the
    score max / sum-exp outputs, forward and backward (dSink included), against float64
    autograd of cudnn-frontend's reference formulas."""
    x = inputs(rng, c)
    y = {n: t.detach().clone().requires_grad_(t.is_floating_point()) for n, t in _f64(x).items()}
    keep = expected_keep(c)
    rows = None
    if c.lens:
        rows = torch.arange(c.s_q).reshape(1, 1, -1, 1) < torch.tensor(c.lens[0]).reshape(
            -1, 1, 1, 1
        )
    sink = y.get("sink", torch.full((1, c.h_q, 1, 1), -math.inf, dtype=torch.float64))
    o, lse, m, total = torch_sdpa_sink(
        y["q"], y["k"], y["v"], keep, _scale(c), sink, total_bias(c, y), rows
    )
    g, feeds, outs = forward_graph(c, x)
    got = run_reference(g, feeds, outs)
    msg = repro("sdpa sink", [c], "", rng.seed)
    assert_close(got[outs[0]], o, c.dtype, _tol_n(c), msg)
    assert_close(got[outs[1]], lse, torch.float32, _tol_n(c), msg)
    if c.score_stats:
        assert_close(got[outs[2]], m, torch.float32, _tol_n(c), msg)
        assert_close(got[outs[3]], total, torch.float32, _tol_n(c), msg)
    if not c.sink:
        return
    do = rng.rand(tuple(o.shape), c.dtype)
    o.backward(do.double())
    g, feeds, outs = backward_graph(
        c, x, o.detach().to(c.dtype), lse.detach().float(), do, with_dbias="bias" in x
    )
    got = run_reference(g, feeds, outs)
    names = ("q", "k", "v") + (("bias",) if "bias" in x else ()) + ("sink",)
    for t, n in zip(outs, names):
        assert_close(got[t], y[n].grad, c.dtype, _tol_n(c) * c.s_q, f"{msg} grad={n}")


@pytest.mark.parametrize("c", BLOCK, ids=[c.id for c in BLOCK])
def test_block_mask_matches_torch(rng, c):
    """A uint8 block mask (a bit per 128 x 128 tile) joins the mask per head."""
    x = inputs(rng, c)
    y = _f64(x)
    keep = expected_keep(c) & block_keep(x["block_mask"], c.s_q, c.s_kv)
    o, stats = torch_sdpa(y["q"], y["k"], y["v"], keep, _scale(c), total_bias(c, y))
    g, feeds, (to, tst) = forward_graph(c, x)
    got = run_reference(g, feeds, [to, tst])
    msg = repro("sdpa block mask", [c], "", rng.seed)
    assert_close(got[to], o, c.dtype, _tol_n(c), msg)
    assert_close(got[tst], stats, torch.float32, _tol_n(c), msg)
    assert (~keep).any() and keep.any()


def _softcap_causal(g, s, cap, neg_inf):
    """cudnn-frontend's flexible-attention pattern: softcap the scores, then mask the
    upper triangle by a generated index comparison and a select."""
    t = g.mul(a=g.tanh(input=g.div(a=s, b=cap)), b=cap)
    row = g.gen_index(input=t, axis=2, compute_data_type=cudnn.data_type.INT32)
    row.set_data_type(cudnn.data_type.INT32)
    col = g.gen_index(input=t, axis=3, compute_data_type=cudnn.data_type.INT32)
    col.set_data_type(cudnn.data_type.INT32)
    keep = g.cmp_ge(input=row, comparison=col, compute_data_type=cudnn.data_type.BOOLEAN)
    keep.set_data_type(cudnn.data_type.BOOLEAN)
    return g.binary_select(input0=t, input1=neg_inf, mask=keep)


@pytest.mark.parametrize("with_bias", [False, True])
def test_score_mod_subgraph_matches_torch(rng, with_bias):
    """score_mod(graph, S) builds graph nodes on S = scale Q K^T (+ bias); the softmax
    reads their result: a softcap and a causal mask by generated indices."""
    c = Case("score_mod", b=2, h_q=4, h_k=2, s_q=9, s_kv=13, bias="1h" if with_bias else None)
    x = inputs(rng, c)
    y = _f64(x)
    g = cudnn.pygraph()
    t = {n: g.tensor_like(x[n], name=n) for n in ("q", "k", "v") + (("bias",) if with_bias else ())}
    cap = g.tensor([1, 1, 1, 1], [1, 1, 1, 1], cudnn.data_type.FLOAT, is_pass_by_value=True)
    neg = g.tensor([1, 1, 1, 1], [1, 1, 1, 1], cudnn.data_type.FLOAT, is_pass_by_value=True)
    o, st = g.sdpa(
        t["q"],
        t["k"],
        t["v"],
        attn_scale=c.scale,
        bias=t.get("bias"),
        score_mod=lambda gr, s: _softcap_causal(gr, s, cap, neg),
    )
    o.set_output(True)
    st.set_output(True)
    feeds = {t[n]: x[n] for n in t}
    feeds.update({cap: 0.8, neg: -1e9})
    got = run_reference(g, feeds, [o, st])
    kk = y["k"].repeat_interleave(2, 1)
    s = c.scale * (y["q"] @ kk.transpose(-1, -2)) + (y["bias"] if with_bias else 0.0)
    s = torch.tanh(s / 0.8) * 0.8
    s = torch.where(
        torch.ones(9, 13, dtype=torch.bool).tril(), s, torch.tensor(-1e9, dtype=s.dtype)
    )
    want_o = torch.softmax(s, -1) @ y["v"].repeat_interleave(2, 1)
    msg = repro("sdpa score_mod", [c], "", rng.seed)
    assert_close(got[o], want_o, c.dtype, _tol_n(c), msg)
    assert_close(got[st], torch.logsumexp(s, -1, keepdim=True), torch.float32, _tol_n(c), msg)


def _causal_keep(g, t):
    """row >= column over t's last two axes, as a boolean graph tensor."""
    row = g.gen_index(input=t, axis=2)
    row.set_data_type(cudnn.data_type.INT32)
    col = g.gen_index(input=t, axis=3)
    col.set_data_type(cudnn.data_type.INT32)
    keep = g.cmp_ge(input=row, comparison=col, compute_data_type=cudnn.data_type.BOOLEAN)
    keep.set_data_type(cudnn.data_type.BOOLEAN)
    return keep


def _causal_select(g, s, neg):
    """score_mod of a causal mask: S where row >= column, ``neg`` elsewhere."""
    return g.binary_select(input0=s, input1=neg, mask=_causal_keep(g, s))


def _causal_zero(g, ds, zero):
    """score_mod_bprop of a causal select: the gradient is 0 where the mask held -inf."""
    return g.binary_select(input0=ds, input1=zero, mask=_causal_keep(g, ds))


def test_score_mod_backward_with_its_bprop_matches_autograd(rng):
    """The backward with score_mod (S' rebuilt) and score_mod_bprop (dS' -> dS): a causal
    mask written as a subgraph, against float64 autograd of causal attention."""
    c = Case("score_mod_bwd", b=2, h_q=4, h_k=2, s_q=9, s_kv=9)
    x = inputs(rng, c)
    y = {n: t.detach().clone().requires_grad_(True) for n, t in _f64(x).items()}
    keep = torch.ones(9, 9, dtype=torch.bool).tril().reshape(1, 1, 9, 9)
    o, stats = torch_sdpa(y["q"], y["k"], y["v"], keep, c.scale)
    do = rng.rand(tuple(o.shape), c.dtype)
    o.backward(do.double())
    g = cudnn.pygraph()
    t = {n: g.tensor_like(x[n], name=n) for n in ("q", "k", "v")}
    to, tdo = g.tensor_like(o.detach().float(), name="o"), g.tensor_like(do, name="dO")
    tst = g.tensor_like(stats.detach().float(), name="stats")
    neg, zero = (
        g.tensor([1, 1, 1, 1], [1, 1, 1, 1], cudnn.data_type.FLOAT, is_pass_by_value=True)
        for _ in range(2)
    )
    grads = g.sdpa_backward(
        t["q"],
        t["k"],
        t["v"],
        to,
        tdo,
        tst,
        attn_scale=c.scale,
        score_mod=lambda gr, s: _causal_select(gr, s, neg),
        score_mod_bprop=lambda gr, ds: _causal_zero(gr, ds, zero),
    )
    for x_ in grads:
        x_.set_output(True)
    feeds = {t[n]: x[n] for n in t}
    feeds.update(
        {to: o.detach().float(), tdo: do, tst: stats.detach().float(), neg: -1e9, zero: 0.0}
    )
    got = run_reference(g, feeds, grads)
    for tt, n in zip(grads, "qkv"):
        assert_close(got[tt], y[n].grad, c.dtype, _tol_n(c), f"grad={n} seed={rng.seed}")


def test_dropout_with_the_callers_mask_and_scale(rng):
    """dropout=(mask, scale): M = [mask != 0], kept elements times ``scale``, forward and
    backward, against float64 autograd."""
    c = BY_ID["causal_tl"]
    x = inputs(rng, c)
    y = {n: t.detach().clone().requires_grad_(True) for n, t in _f64(x).items()}
    mask = (torch.rand((c.b, c.h_q, c.s_q, c.s_kv), generator=rng.gen) > 0.3).float()
    keep = expected_keep(c)
    o, stats = torch_sdpa(y["q"], y["k"], y["v"], keep, _scale(c), None, mask.double(), 0.2)
    do = rng.rand(tuple(o.shape), c.dtype)
    o.backward(do.double())
    msg = repro("sdpa user dropout", [c], "", rng.seed)
    for backward in (False, True):
        g = cudnn.pygraph()
        t = {n: g.tensor_like(x[n], name=n) for n in ("q", "k", "v")}
        tm = g.tensor_like(mask, name="mask")
        kw = dict(attn_scale=c.scale, diagonal_band_right_bound=0, dropout=(tm, 1.25))
        feeds = {**{t[n]: x[n] for n in t}, tm: mask}
        if not backward:
            to, tst = g.sdpa(t["q"], t["k"], t["v"], **kw)
            to.set_output(True)
            tst.set_output(True)
            got = run_reference(g, feeds, [to, tst])
            assert_close(got[to], o, c.dtype, _tol_n(c), msg)
            continue
        to, tdo = g.tensor_like(o.detach().float(), name="o"), g.tensor_like(do, name="dO")
        tst = g.tensor_like(stats.detach().float(), name="stats")
        grads = g.sdpa_backward(t["q"], t["k"], t["v"], to, tdo, tst, **kw)
        for t_ in grads:
            t_.set_output(True)
        feeds.update({to: o.detach().float(), tdo: do, tst: stats.detach().float()})
        got = run_reference(g, feeds, grads)
        for t_, n in zip(grads, "qkv"):
            assert_close(got[t_], y[n].grad, c.dtype, _tol_n(c), f"{msg} grad={n}")


def test_ragged_interleaved_qkv(rng):
    """T3HD: Q, K and V interleaved in one packed buffer, each a view at its own start
    with ragged offsets into the shared rows (the buffer reaches past each view's own
    elements): attention over the unpacked tensors."""
    b, h, s, d, lens = 2, 2, 7, 8, (5, 7)
    c = Case("t3hd", b=b, h_q=h, h_k=h, s_q=s, s_kv=s, d=d, lens=(lens, lens), right=0)
    x = inputs(rng, c)
    buf = torch.full((b * s * 3 * h * d,), float("nan"))
    start = 0
    for i, n in enumerate(lens):
        rows = torch.stack([x[m][i, :, :n] for m in "qkv"], 1)  # [h, 3, n, d]
        buf[start : start + n * 3 * h * d] = rows.permute(2, 1, 0, 3).reshape(-1)
        start += n * 3 * h * d
    strides = (s * 3 * h * d, d, 3 * h * d, 1)
    views = {m: buf.as_strided((b, h, s, d), strides, j * h * d) for j, m in enumerate("qkv")}
    offs = torch.tensor([0, lens[0] * 3 * h * d, sum(lens) * 3 * h * d]).reshape(-1, 1, 1, 1)
    g = cudnn.pygraph()
    t = {m: g.tensor([b, h, s, d], list(strides), cudnn.data_type.FLOAT, name=m) for m in "qkv"}
    feeds = {t[m]: views[m] for m in "qkv"}
    for m in "qkv":
        ot = g.tensor_like(offs, name=f"{m}_off")
        t[m].set_ragged_offset(ot)
        feeds[ot] = offs
    lq = g.tensor_like(x["seq_len_q"], name="lq")
    lkv = g.tensor_like(x["seq_len_kv"], name="lkv")
    feeds.update({lq: x["seq_len_q"], lkv: x["seq_len_kv"]})
    o, _ = g.sdpa(
        t["q"],
        t["k"],
        t["v"],
        attn_scale=c.scale,
        use_padding_mask=True,
        seq_len_q=lq,
        seq_len_kv=lkv,
        diagonal_band_right_bound=0,
        generate_stats=False,
    )
    o.set_output(True)
    got = run_reference(g, feeds, [o])
    y = _f64(x)
    want = torch_sdpa(y["q"], y["k"], y["v"], expected_keep(c), c.scale)[0]
    assert_close(got[o], want, torch.float32, _tol_n(c), f"seed={rng.seed}")


def test_ragged_buffers_hold_only_the_packed_rows(rng):
    """cudnn-frontend's packed (THD) tensors: the Q, K, V and O buffers [T, H, D] hold
    the batches' real rows only -- fewer elements than the [B, H, S, D] descriptors span
    -- and the ragged offsets place the rows; an entry for a tensor made on the graph
    that no operation uses is ignored by uid, as cuDNN does, and an unknown uid is not."""
    b, h, s, d, lq, lkv = 2, 2, 9, 8, (4, 9), (6, 3)
    c = Case("thd", b=b, h_q=h, h_k=h, s_q=s, s_kv=s, d=d, lens=(lq, lkv), dtype=torch.float16)
    x = inputs(rng, c)

    def pack(t, lens):  # [B, H, S, D] -> [sum(lens), H, D]
        return torch.cat([t[i, :, :n].transpose(0, 1) for i, n in enumerate(lens)]).contiguous()

    def offsets(lens):
        return torch.tensor([0, lens[0] * h * d, sum(lens) * h * d]).reshape(-1, 1, 1, 1)

    g = cudnn.pygraph(
        intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT
    )
    strides = [s * h * d, d, h * d, 1]
    t = {m: g.tensor([b, h, s, d], strides, cudnn.data_type.HALF, name=m) for m in "qkv"}
    feeds = {t["q"]: pack(x["q"], lq), t["k"]: pack(x["k"], lkv), t["v"]: pack(x["v"], lkv)}
    offs = {m: offsets(lq if m in "qo" else lkv) for m in "qkvo"}
    ot = {m: g.tensor_like(offs[m], name=f"{m}_off") for m in "qkvo"}
    for m in "qkv":
        t[m].set_ragged_offset(ot[m])
    for m in "qkvo":  # uids as cudnn-frontend's tests give them; 5 is made but unused
        ot[m].set_uid("qkvo".index(m) + 1)
    g.tensor(uid=5, dim=[b + 1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=cudnn.data_type.INT64)
    lqt = g.tensor_like(x["seq_len_q"], name="lq")
    lkt = g.tensor_like(x["seq_len_kv"], name="lkv")
    o, _ = g.sdpa(
        t["q"],
        t["k"],
        t["v"],
        attn_scale=c.scale,
        use_padding_mask=True,
        seq_len_q=lqt,
        seq_len_kv=lkt,
        generate_stats=False,
    )
    o.set_output(True).set_dim([b, h, s, d]).set_stride(strides).set_ragged_offset(ot["o"])
    g.build([cudnn.heur_mode.A])
    assert 5 not in {x.get_uid() for x in (*t.values(), lqt, lkt, o)}  # auto uids skip it
    assert g.get_plan_name_at_index(0).startswith("attention#")  # the kernel, interpreted
    # O's rows right after Q's in one allocation: the dims would span past Q's rows
    both = torch.full((2 * sum(lq) * h * d + 32,), float("nan"), dtype=torch.float16)
    feeds[t["q"]] = both[: sum(lq) * h * d].view(sum(lq), h, d).copy_(feeds[t["q"]])
    o_buf = both[sum(lq) * h * d : 2 * sum(lq) * h * d].view(sum(lq), h, d)
    feeds.update({ot[m]: offs[m] for m in "qkvo"})
    feeds.update({lqt: x["seq_len_q"], lkt: x["seq_len_kv"], o: o_buf, 5: offs["q"]})
    ws = torch.empty(g.get_workspace_size(), dtype=torch.uint8)
    g.execute(feeds, ws)
    y = _f64(x)
    want = torch_sdpa(y["q"], y["k"], y["v"], expected_keep(c), c.scale)[0]
    assert_close(o_buf, pack(want, lq), torch.float16, _tol_n(c), f"seed={rng.seed}")
    # a workspace right after O's rows is not O's memory (its dims would span past it)
    pack_ = {k: v for k, v in feeds.items() if k != 5}  # uid 5: made, unused
    bound, dev = bind(g.op_graph, pack_, "execute", torch.device("cpu"), g._scalar_defaults())
    check_workspace(
        both[2 * sum(lq) * h * d :].view(torch.uint8), 64, dev, "execute", g.op_graph, bound
    )
    with pytest.raises(BadParamError) as e:
        g.execute({**feeds, 100: offs["q"]}, ws)
    assert "uid 100 is not a tensor of this graph" in str(e.value)
