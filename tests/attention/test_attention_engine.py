"""The attention engine (flash attention, engine 40) against the float64 reference
through the interpreter: every case of tests/_attention_cases.py in bfloat16 (float16 for
one), forward (O and Stats) and backward (dQ, dK, dV), dropout included; what it
declines, with the reason."""

import dataclasses

import pytest
import torch
from _attention_cases import (
    BLOCK,
    CASES,
    PAGED,
    RAGGED,
    SINK,
    Case,
    backward_graph,
    forward_graph,
    inputs,
)
from _util import check_engine, repro, run_reference

from opendnn.engines.attention.engine import AttentionEngine
from opendnn.engines.base import Target

ID = AttentionEngine.id
RUN = [
    dataclasses.replace(c, dtype=torch.float16 if c.id == "plain" else torch.bfloat16)
    for c in CASES
    if c.id != "kv_heads_differ"
]
RUN += [
    dataclasses.replace(CASES[1], id="dropout", dtype=torch.bfloat16, p=0.25),
    dataclasses.replace(
        CASES[13], id="dropout_gqa_padding", dtype=torch.bfloat16, p=0.5, lens=((17, 9), (12, 17))
    ),
]


def _backward_inputs(rng, c):
    """(inputs, O, Stats, dO): the forward by the reference, a random dO."""
    x = inputs(rng, c)
    g, feeds, outs = forward_graph(c, x)
    got = run_reference(g, feeds, outs)
    o = got[outs[0]].to(c.dtype)
    return x, o, got[outs[1]], rng.rand(tuple(o.shape), c.dtype)


@pytest.mark.parametrize("c", RUN, ids=[c.id for c in RUN])
def test_engine_against_reference(rng, c):
    x = inputs(rng, c)
    g, feeds, outs = forward_graph(c, x, seed=77, offset=5)
    got = check_engine(g, feeds, outs, ID, n=c.s_kv, msg=repro("sdpa", [c], str(c.dtype), rng.seed))
    o, st = got[outs[0]], got[outs[1]]
    do = rng.rand(tuple(o.shape), c.dtype)
    g, feeds, outs = backward_graph(c, x, o, st, do, seed=77, offset=5)
    check_engine(
        g,
        feeds,
        outs,
        ID,
        n=c.s_q + c.s_kv,
        msg=repro("sdpa_backward", [c], str(c.dtype), rng.seed),
    )


@pytest.mark.parametrize("cid", ["bias_bh", "bias_1h", "bias_b1", "bias_11"])
def test_dbias_against_reference(rng, cid):
    """dBias summed over the axes the bias broadcasts over (padding and a band too)."""
    c = dataclasses.replace(next(x for x in CASES if x.id == cid), dtype=torch.bfloat16)
    x, o, st, do = _backward_inputs(rng, c)
    g, feeds, outs = backward_graph(c, x, o, st, do, with_dbias=True)
    check_engine(
        g,
        feeds,
        outs,
        ID,
        n=c.s_q + c.s_kv + c.b * c.h_q,
        msg=repro("sdpa_backward", [c], "dbias", rng.seed),
    )


def test_declines_float32_and_differing_kv_heads(rng):
    e = AttentionEngine()
    c = CASES[0]
    g, _, _ = forward_graph(c, inputs(rng, c))
    g.validate()
    assert "half or bfloat16 only" in e.check_support(g.op_graph, Target()).reason
    c = dataclasses.replace(
        next(x for x in CASES if x.id == "kv_heads_differ"), dtype=torch.bfloat16
    )
    g, _, _ = forward_graph(c, inputs(rng, c))
    g.validate()
    assert "different head counts" in e.check_support(g.op_graph, Target()).reason


def test_configs_fit_the_shared_memory_and_oversized_ones_are_declined(rng):
    from opendnn.engines.base import EngineConfig

    h100 = Target(device="cuda", name="H100", capability=(9, 0), num_sms=132)
    c = dataclasses.replace(CASES[0], d=256, dtype=torch.bfloat16)
    g, _, _ = forward_graph(c, inputs(rng, c))
    g.validate()
    e = AttentionEngine()
    for cfg in e.configs(g.op_graph, h100):
        assert e.check_config(g.op_graph, cfg, h100).ok, cfg
    big = EngineConfig.make(e, BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=3, TMA=0)
    sup = e.check_config(g.op_graph, big, h100)
    assert not sup.ok and "shared memory" in sup.reason


ATOMIC = dict(BLOCK_M=16, BLOCK_N=16, num_warps=4, num_stages=1, TMA=0, DQ_ATOMIC=1)


@pytest.mark.parametrize("cid", ["gqa", "padding_br_causal", "band_br", "bias_bh"])
def test_backward_with_atomic_dq_against_reference(rng, cid):
    """DQ_ATOMIC=1: dQ added by the dK / dV kernel (atomics), NONDETERMINISTIC."""
    c = dataclasses.replace(next(x for x in CASES if x.id == cid), dtype=torch.bfloat16)
    x, o, st, do = _backward_inputs(rng, c)
    g, feeds, outs = backward_graph(c, x, o, st, do)
    check_engine(
        g,
        feeds,
        outs,
        ID,
        ATOMIC,
        n=c.s_q + c.s_kv,
        msg=repro("sdpa_backward", [c], "atomic", rng.seed),
    )
    from opendnn.engines.base import EngineConfig
    from opendnn.enums import NumericalNote

    e = AttentionEngine()
    assert NumericalNote.NONDETERMINISTIC in e.numerical_notes(
        g.op_graph, EngineConfig.make(e, **ATOMIC)
    )


def test_deterministic_request_declines_atomic_dq(rng):
    from opendnn.engines.base import EngineConfig

    c = dataclasses.replace(CASES[0], dtype=torch.bfloat16)
    x, o, st, do = _backward_inputs(rng, c)
    g, _, _ = backward_graph(c, x, o, st, do, deterministic=True)
    g.validate()
    e = AttentionEngine()
    sup = e.check_config(g.op_graph, EngineConfig.make(e, **ATOMIC), Target())
    assert not sup.ok and "deterministic" in sup.reason
    assert all(not cfg.knob_dict.get("DQ_ATOMIC") for cfg in e.configs(g.op_graph, Target()))


SPLIT_DQ = dict(
    BLOCK_M=16,
    BLOCK_N=16,
    num_warps=4,
    num_stages=1,
    TMA=0,
    DQ_BLOCK_M=32,
    DQ_BLOCK_N=16,
    DQ_WARPS=2,
    DQ_STAGES=1,
)


@pytest.mark.parametrize("cid", ["plain", "padding_br_causal", "band_br"])
def test_backward_with_own_dq_tiles_against_reference(rng, cid):
    """DQ_BLOCK_M / DQ_BLOCK_N / DQ_WARPS / DQ_STAGES: the dQ kernel on its own tiles."""
    c = dataclasses.replace(next(x for x in CASES if x.id == cid), dtype=torch.bfloat16)
    x, o, st, do = _backward_inputs(rng, c)
    g, feeds, outs = backward_graph(c, x, o, st, do)
    check_engine(
        g,
        feeds,
        outs,
        ID,
        SPLIT_DQ,
        n=c.s_q + c.s_kv,
        msg=repro("sdpa_backward", [c], "split dq", rng.seed),
    )


def test_dq_knob_and_backward_tma_rules(rng):
    from opendnn.engines.base import EngineConfig

    h100 = Target(device="cuda", name="H100", capability=(9, 0), num_sms=132)
    e = AttentionEngine()
    c = dataclasses.replace(CASES[0], dtype=torch.bfloat16)
    x, o, st, do = _backward_inputs(rng, c)
    g, _, _ = backward_graph(c, x, o, st, do)
    g.validate()
    gf, _, _ = forward_graph(c, inputs(rng, c))
    gf.validate()

    def reason(graph, target, **kw):
        return e.check_config(graph.op_graph, EngineConfig.make(e, **kw), target).reason

    assert "DQ_ATOMIC=0" in reason(g, h100, **dict(ATOMIC, DQ_BLOCK_M=32))
    assert "DQ_ATOMIC=0" in reason(gf, h100, BLOCK_M=64, BLOCK_N=64, DQ_WARPS=8)
    assert "bulk reduction" in reason(g, h100, BLOCK_M=64, BLOCK_N=64, TMA=1)
    assert "on a GPU only" in reason(g, Target(), **dict(ATOMIC, TMA=1))
    assert e.check_config(g.op_graph, EngineConfig.make(e, **dict(ATOMIC, TMA=1)), h100).ok
    cd = dataclasses.replace(CASES[0], d=256, dtype=torch.bfloat16)
    x, o, st, do = _backward_inputs(rng, cd)
    g2, _, _ = backward_graph(cd, x, o, st, do)
    g2.validate()
    assert "dQ kernel: 4 stages" in reason(
        g2, h100, BLOCK_M=16, BLOCK_N=16, num_stages=1, DQ_BLOCK_M=128, DQ_BLOCK_N=128, DQ_STAGES=4
    )


def _first_choice(
    backward: bool, s: int, d: int, causal: bool, index: int = 0, deterministic: bool = True
) -> dict:
    """The heuristic's config ``index`` (0: first) on an H100 for B=4, H=16, S=s, head dim d,
    bf16 (a backward node with use_deterministic_algorithm=``deterministic``)."""
    import opendnn.frontend as cudnn

    h100 = Target(device="cuda", name="H100", capability=(9, 0), num_sms=132)
    g = cudnn.pygraph()
    q, k, v, o, do = (g.tensor([4, 16, s, d], data_type=cudnn.data_type.BFLOAT16) for _ in range(5))
    band = dict(attn_scale=0.125, diagonal_band_right_bound=0 if causal else None)
    if backward:
        st = g.tensor([4, 16, s, 1], data_type=cudnn.data_type.FLOAT)
        for t in g.sdpa_backward(
            q, k, v, o, do, st, use_deterministic_algorithm=deterministic, **band
        ):
            t.set_output(True)
    else:
        g.sdpa(q, k, v, generate_stats=False, **band)[0].set_output(True)
    g.validate()
    return AttentionEngine().configs(g.op_graph, h100)[index].knob_dict


GLUON = (128, 128, 4, 2)
GLUON_SHORT_CAUSAL = (128, 64, 4, 3)  # causal up to S=2048: persistent, 64-key tiles
GLUON_LONG = (128, 128, 4, 3)  # without a mask from S=16384 (head dim 64: 4096)


@pytest.mark.parametrize(
    "backward,s,d,causal,tile,pingpong",
    [
        (False, 4096, 128, False, GLUON, 0),
        (False, 4096, 128, True, GLUON, 0),
        (False, 8192, 128, False, GLUON, 1),
        (False, 8192, 128, True, GLUON, 0),
        (False, 1024, 64, False, (64, 64, 4, 3), 0),
        (False, 1024, 128, True, GLUON_SHORT_CAUSAL, 0),
        (False, 16384, 128, False, GLUON_LONG, 0),
        (False, 1024, 64, True, GLUON_SHORT_CAUSAL, 0),
        (False, 1024, 128, False, GLUON, 0),
        (False, 2048, 64, True, GLUON_LONG, 0),
        (False, 4096, 64, False, GLUON_LONG, 0),
        (False, 2048, 128, True, GLUON_SHORT_CAUSAL, 0),
        (False, 16384, 64, True, GLUON, 0),
        (True, 4096, 128, False, (64, 64, 4, 2), 0),
        (True, 4096, 128, True, (32, 64, 4, 4), 0),
        (True, 4096, 64, False, (32, 128, 4, 3), 0),
        (True, 16384, 64, True, (32, 64, 4, 4), 0),
    ],
)
def test_h100_first_choices(backward, s, d, causal, tile, pingpong):
    """The tiles the H100 sweeps chose (docs/design/attention.md; bench/attention_sweep.py): the Gluon
    forward first where it covers the problem, but for short rows at head dim 64 or causal;
    the Gluon backward first, then the Triton split's best tiles (a deterministic backward
    node: test_h100_nondeterministic_gluon_backward_order has the other kind)."""
    kn = _first_choice(backward, s, d, causal, index=int(backward))
    assert (kn["BLOCK_M"], kn["BLOCK_N"], kn["num_warps"], kn["num_stages"]) == tile, kn
    assert kn["LPT"] == 0, kn
    assert kn["PERSIST"] == int(causal and s <= 2048 and kn["GLUON"] == 1), kn
    assert (kn["GLUON"], kn["PINGPONG"]) == (
        int(tile in (GLUON, GLUON_SHORT_CAUSAL, GLUON_LONG)),
        pingpong,
    ), kn
    if backward:
        assert (kn["DQ_BLOCK_M"], kn["DQ_BLOCK_N"]) == (128, 64), kn
        assert kn["DQ_WARPS"] == (4 if d == 64 and not causal else 8), kn


@pytest.mark.parametrize(
    "s,d,causal,stages,dq_n,dq_stages",
    [
        (1024, 128, False, 2, 64, 3),
        (8192, 128, True, 3, 64, 3),
        (4096, 64, False, 4, 128, 2),
        (16384, 64, True, 4, 128, 2),
    ],
)
def test_h100_gluon_backward_first(s, d, causal, stages, dq_n, dq_stages):
    """The Gluon backward is listed first on an H100 (docs/design/attention.md,
    bench/attention_sweep.py gluon-bwd): dK / dV 64 x 128 keys, dQ 128 rows; stages per head dim / mask."""
    kn = _first_choice(True, s, d, causal)
    assert (kn["GLUON"], kn["BLOCK_M"], kn["BLOCK_N"], kn["num_warps"]) == (1, 64, 128, 4), kn
    assert (kn["num_stages"], kn["DQ_BLOCK_N"], kn["DQ_STAGES"]) == (stages, dq_n, dq_stages)
    assert (kn["DQ_BLOCK_M"], kn["DQ_WARPS"], kn["PINGPONG"]) == (128, 4, 0), kn


ND_BWD = dict(BLOCK_M=64, BLOCK_N=128, num_warps=4, num_stages=2, DQ_ATOMIC=1, GLUON=1)


@pytest.mark.parametrize(
    "s,d,causal", [(4096, 128, False), (8192, 128, True), (4096, 64, False), (1024, 64, True)]
)
def test_h100_nondeterministic_gluon_backward_order(s, d, causal):
    """A backward node that allows nondeterminism (the frontend's default) lists the Gluon
    TMA-reduce dQ kernel (DQ_ATOMIC=1, note NONDETERMINISTIC) first, the H100 measured it
    faster than the deterministic pair (docs/design/attention.md), and the
    deterministic pair second; a deterministic node never lists it."""
    at = 0
    nd = _first_choice(True, s, d, causal, index=at, deterministic=False)
    assert {k: nd[k] for k in ND_BWD} == dict(ND_BWD, num_stages=2 if d == 128 else 4), nd
    assert (nd["DQ_BLOCK_M"], nd["DQ_BLOCK_N"], nd["DQ_WARPS"], nd["DQ_STAGES"]) == (0,) * 4
    det = _first_choice(True, s, d, causal, index=1 - at, deterministic=False)
    assert (det["GLUON"], det["DQ_ATOMIC"], det["DQ_BLOCK_M"]) == (1, 0, 128), det
    assert det == _first_choice(True, s, d, causal)
    import opendnn.frontend as cudnn
    from opendnn.enums import NumericalNote

    h100 = Target(device="cuda", name="H100", capability=(9, 0), num_sms=132)
    for deterministic in (False, True):
        g = cudnn.pygraph()
        q, k, v, o, do = (
            g.tensor([4, 16, s, d], data_type=cudnn.data_type.BFLOAT16) for _ in range(5)
        )
        st = g.tensor([4, 16, s, 1], data_type=cudnn.data_type.FLOAT)
        for t in g.sdpa_backward(
            q, k, v, o, do, st, attn_scale=0.125, use_deterministic_algorithm=deterministic
        ):
            t.set_output(True)
        g.validate()
        e = AttentionEngine()
        cfgs = e.configs(g.op_graph, h100)
        nd = [c for c in cfgs if c.knob_dict["GLUON"] and c.knob_dict["DQ_ATOMIC"]]
        assert len(nd) == int(not deterministic), cfgs
        for c in nd:
            assert e.numerical_notes(g.op_graph, c) == {NumericalNote.NONDETERMINISTIC}


def _gluon_reason(knobs: dict, target=None, backward=False, d=128, s=256, **kw) -> str:
    """Why engine 40 declines ``knobs`` for a B=2, H=4, S=s bf16 sdpa or sdpa_backward (kw:
    the node's arguments)."""
    import opendnn.frontend as cudnn
    from opendnn.engines.base import EngineConfig

    h100 = Target(device="cuda", name="H100", capability=(9, 0), num_sms=132)
    g = cudnn.pygraph()
    q, k, v, o, do = (g.tensor([2, 4, s, d], data_type=cudnn.data_type.BFLOAT16) for _ in range(5))
    if backward:
        st = g.tensor([2, 4, s, 1], data_type=cudnn.data_type.FLOAT)
        for t in g.sdpa_backward(q, k, v, o, do, st, attn_scale=0.125, **kw):
            t.set_output(True)
    else:
        g.sdpa(q, k, v, attn_scale=0.125, **kw)[0].set_output(True)
    g.validate()
    e = AttentionEngine()
    sup = e.check_config(g.op_graph, EngineConfig.make(e, **knobs), target or h100)
    return "" if sup.ok else sup.reason


GLUON_KNOBS = dict(BLOCK_M=128, BLOCK_N=128, num_warps=4, num_stages=2, GLUON=1)


def test_gluon_forward_rules():
    """GLUON=1: each rule of the Gluon forward declines with its reason; the plain case
    and a causal one are accepted on a Hopper target."""
    assert _gluon_reason(GLUON_KNOBS) == ""
    assert _gluon_reason(GLUON_KNOBS, diagonal_band_right_bound=0) == ""
    assert _gluon_reason(dict(GLUON_KNOBS, PINGPONG=1)) == ""
    assert _gluon_reason(dict(GLUON_KNOBS, LPT=1), diagonal_band_right_bound=0) == ""
    assert _gluon_reason(dict(GLUON_KNOBS, PERSIST=1)) == ""
    assert (
        _gluon_reason(
            dict(GLUON_KNOBS, PERSIST=1, BLOCK_N=64, num_stages=3),
            None,
            False,
            64,
            diagonal_band_right_bound=0,
        )
        == ""
    )
    assert "PERSIST: sequence lengths a multiple of 128 (200)" in _gluon_reason(
        dict(GLUON_KNOBS, PERSIST=1), None, False, 128, 200
    )
    for knobs, target, backward, d, kw, reason in [
        (GLUON_KNOBS, Target(), False, 128, {}, "a Hopper GPU"),
        (GLUON_KNOBS, Target(device="cuda", capability=(8, 0)), False, 128, {}, "a Hopper GPU"),
        (GLUON_KNOBS, None, True, 128, {}, "GLUON backward: BLOCK_M=64, BLOCK_N=128"),
        (dict(GLUON_KNOBS, BLOCK_M=64), None, False, 128, {}, "BLOCK_M=128, num_warps=4"),
        (dict(GLUON_KNOBS, num_stages=4), None, False, 128, {}, "num_stages 2 or 3"),
        (GLUON_KNOBS, None, False, 96, {}, "head dims 64 or 128"),
        (
            GLUON_KNOBS,
            None,
            False,
            128,
            dict(diagonal_band_right_bound=0, diagonal_band_left_bound=8),
            "no bias",
        ),
        (
            dict(BLOCK_M=64, BLOCK_N=64, PINGPONG=1),
            None,
            False,
            128,
            {},
            "PINGPONG, LPT and PERSIST are knobs of the Gluon forward",
        ),
        (
            dict(BLOCK_M=64, BLOCK_N=64, LPT=1),
            None,
            False,
            128,
            {},
            "PINGPONG, LPT and PERSIST are knobs of the Gluon forward",
        ),
        (dict(GLUON_KNOBS, LPT=1), None, False, 128, {}, "this node has no mask"),
        (
            dict(BLOCK_M=64, BLOCK_N=64, PERSIST=1),
            None,
            False,
            128,
            {},
            "PINGPONG, LPT and PERSIST are knobs of the Gluon forward",
        ),
        (
            dict(GLUON_KNOBS, PERSIST=1, PINGPONG=1),
            None,
            False,
            128,
            {},
            "PERSIST: no PINGPONG, and no LPT",
        ),
        (
            dict(GLUON_KNOBS, PERSIST=1, LPT=1),
            None,
            False,
            128,
            dict(diagonal_band_right_bound=0),
            "PERSIST: no PINGPONG, and no LPT",
        ),
        # the persistent kernel adds an O tile per warpgroup to the shared memory
        (
            dict(GLUON_KNOBS, PERSIST=1, num_stages=3),
            None,
            False,
            128,
            {},
            "need 256 KB of shared memory",
        ),
    ]:
        got = _gluon_reason(knobs, target, backward, d, **kw)
        assert reason in got, (knobs, got)


GLUON_BWD = dict(
    BLOCK_M=64,
    BLOCK_N=128,
    num_warps=4,
    num_stages=2,
    DQ_BLOCK_M=128,
    DQ_BLOCK_N=64,
    DQ_WARPS=4,
    DQ_STAGES=3,
    GLUON=1,
)


def test_gluon_backward_rules():
    """GLUON=1 on sdpa_backward: each rule of the Gluon backward declines with its reason;
    plain, causal and MQA-free cases are accepted on a Hopper target."""
    assert _gluon_reason(GLUON_BWD, backward=True) == ""
    assert _gluon_reason(GLUON_BWD, backward=True, diagonal_band_right_bound=0) == ""
    assert (
        _gluon_reason(dict(GLUON_BWD, num_stages=4, DQ_BLOCK_N=128, DQ_STAGES=2), None, True, 64)
        == ""
    )
    for stages, d in ((2, 128), (3, 128), (4, 64)):
        assert (
            _gluon_reason(
                dict(ND_BWD, num_stages=stages), None, True, d, diagonal_band_right_bound=0
            )
            == ""
        )
    for knobs, d, s, kw, reason in [
        (
            dict(GLUON_BWD, PINGPONG=1),
            128,
            256,
            {},
            "PINGPONG, LPT and PERSIST are knobs of the Gluon",
        ),
        (dict(GLUON_BWD, LPT=1), 128, 256, {}, "PINGPONG, LPT and PERSIST are knobs of the Gluon"),
        (dict(GLUON_BWD, BLOCK_M=128), 128, 256, {}, "GLUON backward: BLOCK_M=64"),
        (dict(GLUON_BWD, DQ_STAGES=1), 128, 256, {}, "DQ_STAGES 2 or 3"),
        (dict(GLUON_BWD, DQ_BLOCK_N=32), 128, 256, {}, "DQ_BLOCK_N 64 or 128"),
        (dict(GLUON_BWD, DQ_ATOMIC=1), 128, 256, {}, "DQ_ATOMIC=1: BLOCK_M=64, BLOCK_N=128"),
        (dict(ND_BWD, num_stages=1), 128, 256, {}, "DQ_ATOMIC=1: BLOCK_M=64, BLOCK_N=128"),
        (dict(ND_BWD, BLOCK_N=64), 128, 256, {}, "DQ_ATOMIC=1: BLOCK_M=64, BLOCK_N=128"),
        (dict(ND_BWD, TMA=1), 128, 256, {}, "no TMA or DQ_BLOCK_M"),
        (dict(ND_BWD, DQ_STAGES=2), 128, 256, {}, "no TMA or DQ_BLOCK_M"),
        (dict(ND_BWD, PINGPONG=1), 128, 256, {}, "PINGPONG, LPT and PERSIST are knobs"),
        (
            dict(ND_BWD, num_stages=4),
            128,
            256,
            {},
            "DQ_ATOMIC=1 with 4 stages at head dim 128 need 258 KB of shared memory",
        ),
        (
            ND_BWD,
            128,
            256,
            dict(use_deterministic_algorithm=True),
            "DQ_ATOMIC adds dQ by TMA reductions (nondeterministic); the node asks",
        ),
        (
            dict(GLUON_BWD, DQ_BLOCK_N=128, DQ_STAGES=3),
            128,
            256,
            {},
            "need 256 KB of shared memory",
        ),
        (GLUON_BWD, 96, 256, {}, "head dims 64 or 128"),
        (GLUON_BWD, 128, 200, {}, "a multiple of 128 (200)"),
        (
            GLUON_BWD,
            128,
            256,
            dict(diagonal_band_right_bound=4),
            "no bias, ALiBi, paged K / V, ragged offsets, sink, block mask, score",
        ),
    ]:
        got = _gluon_reason(knobs, None, True, d, s, **kw)
        assert reason in got, (knobs, got)
    assert "a Hopper GPU" in _gluon_reason(GLUON_BWD, Target(), True)


def test_gluon_backward_declines_strided_gradients():
    """dO in BSHD strides is not one 2-D TMA view: the Gluon backward declines it and the
    heuristic lists only the Triton split."""
    import opendnn.frontend as cudnn
    from opendnn.engines.base import EngineConfig

    h100 = Target(device="cuda", name="H100", capability=(9, 0), num_sms=132)
    g = cudnn.pygraph()
    dims, bshd = [2, 4, 256, 128], [256 * 4 * 128, 128, 4 * 128, 1]
    q, k, v, o = (g.tensor(dims, data_type=cudnn.data_type.BFLOAT16) for _ in range(4))
    do = g.tensor(dims, bshd, cudnn.data_type.BFLOAT16)
    st = g.tensor([2, 4, 256, 1], data_type=cudnn.data_type.FLOAT)
    for t in g.sdpa_backward(q, k, v, o, do, st, attn_scale=0.125):
        t.set_output(True)
    g.validate()
    e = AttentionEngine()
    sup = e.check_config(g.op_graph, EngineConfig.make(e, **GLUON_BWD), h100)
    assert not sup.ok and "Q, O, DO, DQ, K, V, DK, DV (and Stats) packed" in sup.reason
    assert not any(c.knob_dict.get("GLUON") for c in e.configs(g.op_graph, h100))


def test_gluon_declines_misaligned_buffers_at_execute():
    """A buffer the Gluon kernels read through TMA descriptors must be 16-byte aligned:
    BAD_PARAM_MISALIGNED_POINTER naming the tensor, raised before anything launches (the
    check runs on CPU buffers here, the plan built for a Hopper target)."""
    import opendnn.frontend as cudnn
    from opendnn.engines.base import EngineConfig
    from opendnn.errors import BadParamError, Status

    h100 = Target(device="cuda", name="H100", capability=(9, 0), num_sms=132)
    g = cudnn.pygraph()
    q, k, v = (
        g.tensor([1, 2, 128, 64], data_type=cudnn.data_type.BFLOAT16, name=n)
        for n in ("q", "k", "v")
    )
    o, _ = g.sdpa(q, k, v, attn_scale=0.125, generate_stats=False)
    o.set_output(True).set_name("o")
    g.validate()
    e = AttentionEngine()
    cfg = EngineConfig.make(e, **GLUON_KNOBS)
    ex = e.build(g.op_graph, cfg, h100)
    raw = torch.zeros(2 * 128 * 64 + 1, dtype=torch.bfloat16)
    buffers = {t.uid: raw[:-1] for t in (q, k, v, o)}
    buffers[k.uid] = raw[1:]  # 2 bytes past an aligned address
    buffers[ex.scale_uid] = torch.tensor(0.125)  # passed by value
    ws = torch.zeros(e.workspace_size(g.op_graph, cfg, h100), dtype=torch.uint8)
    with pytest.raises(BadParamError) as err:
        ex.run(buffers, ws)
    assert err.value.status == Status.BAD_PARAM_MISALIGNED_POINTER
    assert "tensor 'k'" in str(err.value) and "16-byte aligned" in str(err.value)
    assert "sdpa" in str(err.value)


def test_gluon_forward_declines_unpacked_and_unlisted():
    """Q in BSHD strides is not one 2-D TMA view: declined, and not listed; a bias
    leaves the Triton configs only."""
    import opendnn.frontend as cudnn

    h100 = Target(device="cuda", name="H100", capability=(9, 0), num_sms=132)
    for variant in ("bshd", "bias"):
        g = cudnn.pygraph()
        if variant == "bshd":
            dims, strides = [2, 4, 256, 128], [256 * 4 * 128, 128, 4 * 128, 1]
            q, k, v = (g.tensor(dims, strides, cudnn.data_type.BFLOAT16) for _ in range(3))
            kw = {}
        else:
            q, k, v = (
                g.tensor([2, 4, 256, 128], data_type=cudnn.data_type.BFLOAT16) for _ in range(3)
            )
            kw = dict(bias=g.tensor([1, 4, 256, 256], data_type=cudnn.data_type.BFLOAT16))
        g.sdpa(q, k, v, attn_scale=0.125, **kw)[0].set_output(True)
        g.validate()
        e = AttentionEngine()
        assert not any(c.knob_dict.get("GLUON") for c in e.configs(g.op_graph, h100))
        if variant == "bshd":
            from opendnn.engines.base import EngineConfig

            sup = e.check_config(g.op_graph, EngineConfig.make(e, **GLUON_KNOBS), h100)
            assert not sup.ok and "packed B, H, S, D" in sup.reason


@pytest.mark.parametrize("backward", [False, True])
def test_rng_dump_against_reference(rng, backward):
    """The dropout mask written to rng_dump by the engine's own kernel equals the
    reference's (every element, padded rows and band-masked ones included)."""
    c = dataclasses.replace(
        next(x for x in CASES if x.id == "padding_br_causal"), dtype=torch.bfloat16, p=0.3
    )
    x = inputs(rng, c)
    g, feeds, outs = forward_graph(c, x, seed=3, offset=9, rng_dump=True)
    got = check_engine(g, feeds, outs, ID, n=c.s_kv, msg=repro("sdpa", [c], "dump", rng.seed))
    if backward:
        o, st = got[outs[0]], got[outs[1]]
        do = rng.rand(tuple(o.shape), c.dtype)
        g, feeds, outs = backward_graph(c, x, o, st, do, seed=3, offset=9, rng_dump=True)
        got = check_engine(
            g, feeds, outs, ID, n=c.s_q + c.s_kv, msg=repro("sdpa_bwd", [c], "dump", rng.seed)
        )
    assert set(got[outs[-1]].unique().tolist()) == {0.0, 1.0}


@pytest.mark.parametrize("c", PAGED, ids=[c.id for c in PAGED])
def test_paged_kv_against_reference(rng, c):
    c = dataclasses.replace(c, dtype=torch.bfloat16)
    x = inputs(rng, c)
    g, feeds, outs = forward_graph(c, x)
    check_engine(g, feeds, outs, ID, n=c.s_kv, msg=repro("sdpa paged", [c], "", rng.seed))


RAGGED_ENGINE = RAGGED + [
    dataclasses.replace(RAGGED[-1], id="ragged_stats_sink", sink=True, score_stats=True)
]


@pytest.mark.parametrize("c", RAGGED_ENGINE, ids=[c.id for c in RAGGED_ENGINE])
def test_ragged_against_reference(rng, c):
    """THD-packed Q, K, V, O and gradients (ragged offsets), forward and backward; the
    buffers' tails past the packed rows stay unwritten in both plans (allow_nan)."""
    c = dataclasses.replace(c, dtype=torch.bfloat16)
    x = inputs(rng, c)
    g, feeds, outs = forward_graph(c, x)
    msg = repro("sdpa ragged", [c], "", rng.seed)
    got = check_engine(g, feeds, outs, ID, n=c.s_kv, msg=msg, allow_nan=True)
    o, st = got[outs[0]], got[outs[1]]
    do = rng.rand((c.b, c.h_q, c.s_q, c.dv), c.dtype)
    g, feeds, outs = backward_graph(c, x, o, st, do, with_dbias="bias" in x)
    check_engine(g, feeds, outs, ID, n=c.s_q + c.s_kv, msg=msg, allow_nan=True)


@pytest.mark.parametrize("aligned", [True, False])
def test_ragged_rows_aligned_vectorize_and_unaligned_narrow_the_key_tile(rng, aligned):
    """Ragged rows of 16-byte multiples: the offsets are taken as 16-byte multiples (the
    kernels hint it, so tiles move in 16-byte vectors). Rows that are not (here V's row
    stride made 196 half-precision elements): the H100's key tiles narrow to max(32, head
    dim V) and a pinned wider one is declined (Triton 3.6 miscompiles P V there, sm_90)."""
    from opendnn.engines.attention import _kernels as K
    from opendnn.engines.attention.engine import AttnKnobs, _problem
    from opendnn.engines.base import EngineConfig

    h100 = Target(device="cuda", name="H100", capability=(9, 0), num_sms=132)
    c = dataclasses.replace(
        RAGGED[0], id="r", h_q=6, h_k=6, d=32, s_q=9, s_kv=200, dtype=torch.float16
    )
    c = dataclasses.replace(c, lens=((9, 4), (200, 77)))
    g, _, _ = forward_graph(c, inputs(rng, c))
    g.validate()
    og = g.op_graph
    if not aligned:
        uid = og.nodes[0].inputs["V"]
        v = og.tensors[uid]
        og.tensors[uid] = dataclasses.replace(v, strides=(v.strides[0], 32, 196, 1))
    p = _problem(og)
    assert dict(p.ragged_align) == {"Q": 8, "K": 8, "O": 8, **({"V": 8} if aligned else {})}
    src = K.fwd_source("f", p, AttnKnobs(), interpret=False)
    assert ("tl.multiple_of(tl.load(RAG_V + b).to(tl.int64), 8)" in src) == aligned
    e = AttentionEngine()
    tiles = {cfg.knob_dict["BLOCK_N"] for cfg in e.configs(og, h100)}
    assert max(tiles) == 64 if aligned else max(tiles) <= 32
    wide = EngineConfig.make(e, BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=1, TMA=0)
    sup = e.check_config(og, wide, h100)
    assert sup.ok == aligned and (aligned or "16-byte aligned" in sup.reason)


@pytest.mark.parametrize("dv", [8, 16, 24, 32, 64, 96])
def test_forward_v_tiles_are_64_columns_at_least(rng, dv):
    """The forward's V tile and O accumulator: head dim V rounded up to a power of two
    and at least 64 columns (narrower ones miscompiled on sm_90 under Triton 3.6), the
    padding masked; the smem estimate counts the padded tile."""
    from opendnn.engines.attention import _kernels as K
    from opendnn.engines.attention.engine import AttnKnobs, _problem

    c = dataclasses.replace(CASES[0], id="v", d=32, d_v=dv, dtype=torch.bfloat16)
    g, _, _ = forward_graph(c, inputs(rng, c))
    g.validate()
    p = _problem(g.op_graph)
    cols = max(64, 1 << (dv - 1).bit_length())
    src = K.fwd_source("f", p, AttnKnobs(), interpret=False)
    assert K.v_cols(p) == cols and f"offs_dv = tl.arange(0, {cols})" in src
    assert ("mask=dvmask[None, :]" in src) == (cols != dv)  # whole key tiles: d masked


def test_head_dims_above_the_kernels_run_on_the_reference(rng):
    """Head dims 264 / 520 (cuDNN takes them): the graph validates, the engine declines
    with the reason, and the reference computes them (against PyTorch's math path)."""
    c = dataclasses.replace(
        CASES[0], id="d520", b=1, h_q=2, h_k=2, d=264, d_v=520, s_q=3, s_kv=5, dtype=torch.bfloat16
    )
    x = inputs(rng, c)
    g, feeds, outs = forward_graph(c, x)
    g.validate()
    sup = AttentionEngine().check_support(g.op_graph, Target())
    assert not sup.ok and "head dims above 256" in sup.reason
    g2, feeds2, outs2 = forward_graph(c, x)
    got = run_reference(g2, feeds2, outs2)
    assert got[outs2[0]].shape == (1, 2, 3, 520) and not got[outs2[0]].isnan().any()


def test_not_supported_rules_are_graph_not_supported_errors():
    """A NOT_SUPPORTED* node rule raises what cudnn-frontend code catches at validate
    (cudnnGraphNotSupportedError), and is still the BadParamError of the rule."""
    import opendnn.frontend as cudnn
    from opendnn.errors import BadParamError, Status

    g = cudnn.pygraph()
    q = g.tensor([1, 2, 3, 1032], None, cudnn.data_type.HALF, name="q")
    k = g.tensor([1, 2, 3, 1032], None, cudnn.data_type.HALF, name="k")
    o, _ = g.sdpa(q, k, k)
    o.set_output(True)
    with pytest.raises(cudnn.cudnnGraphNotSupportedError) as e:
        g.validate()
    assert isinstance(e.value, BadParamError) and e.value.status == Status.NOT_SUPPORTED_SHAPE


@pytest.mark.parametrize("c", SINK, ids=[c.id for c in SINK])
def test_sink_and_score_statistics_against_reference(rng, c):
    """Attention sinks (forward: Stats and O; backward: dSink by its own kernel) and the
    score max / sum-exp outputs."""
    c = dataclasses.replace(c, dtype=torch.bfloat16)
    x = inputs(rng, c)
    g, feeds, outs = forward_graph(c, x)
    msg = repro("sdpa sink", [c], "", rng.seed)
    got = check_engine(g, feeds, outs, ID, n=c.s_kv, msg=msg)
    if not c.sink:
        return
    do = rng.rand(tuple(got[outs[0]].shape), c.dtype)
    g, feeds, outs = backward_graph(c, x, got[outs[0]], got[outs[1]], do, with_dbias="bias" in x)
    check_engine(g, feeds, outs, ID, n=c.s_q + c.s_kv, msg=msg)


@pytest.mark.parametrize("c", BLOCK, ids=[c.id for c in BLOCK])
def test_block_mask_against_reference(rng, c):
    c = dataclasses.replace(c, dtype=torch.bfloat16)
    x = inputs(rng, c)
    g, feeds, outs = forward_graph(c, x)
    check_engine(g, feeds, outs, ID, n=c.s_kv, msg=repro("sdpa block", [c], "", rng.seed))


BIG = [
    (Case("big_sink_gqa_bias", b=2, h_q=4, h_k=2, s_q=13, s_kv=11, d=16, sink=True,
          bias="1h", right=0, dtype=torch.bfloat16), None),
    (Case("big_atomic_padding", b=2, h_q=2, h_k=1, s_q=11, s_kv=14, d=16,
          lens=((11, 6), (9, 14)), dtype=torch.bfloat16), ATOMIC),
]  # fmt: skip


@pytest.mark.parametrize("c,knobs", BIG, ids=[c.id for c, _ in BIG])
def test_backward_of_tensors_past_int32_offsets_widens_after_the_split(rng, monkeypatch, c, knobs):
    """Tensors of 2^31 elements or more: the backward's kernels (delta, dK / dV, dQ, the
    atomic dQ's conversion, dBias, dSink) widen the batch and head indices to int64 after
    the program id's split in int32, so every offset built from them is int64. Run here
    as ``big`` on small problems (a sink, a bias summed over batches, atomic dQ with
    padding): the widened sources compute the same, and each kernel widened."""
    from opendnn.engines.attention import _bwd_kernels as BK
    from opendnn.engines.attention import _kernels as K

    monkeypatch.setattr(K.Problem, "big", property(lambda self: True))
    seen = []
    real = BK._wide
    monkeypatch.setattr(BK, "_wide", lambda names, I, on: seen.append(on) or real(names, I, on))
    x, o, st, do = _backward_inputs(rng, c)
    g, feeds, outs = backward_graph(c, x, o, st, do, with_dbias="bias" in x)
    check_engine(g, feeds, outs, ID, knobs, n=c.s_q + c.s_kv, msg=repro("big", [c], "", rng.seed))
    assert seen and all(seen), seen


def test_rows_strided_past_int32_run_on_the_reference():
    """A row stride times the sequence length of 2^31 elements or more (a strided view of
    a huge buffer): the kernels' offsets within a head are int32, so the engine declines
    with the reason rather than address wrongly; no memory is needed to decide."""
    import opendnn.frontend as cudnn

    g = cudnn.pygraph(
        io_data_type=cudnn.data_type.BFLOAT16,
        intermediate_data_type=cudnn.data_type.FLOAT,
        compute_data_type=cudnn.data_type.FLOAT,
    )
    q = g.tensor(name="Q", dim=[1, 2, 3, 16], stride=[3 * 2**30, 16, 2**30, 1])
    k = g.tensor(name="K", dim=[1, 2, 5, 16], stride=[160, 80, 16, 1])
    v = g.tensor(name="V", dim=[1, 2, 5, 16], stride=[160, 80, 16, 1])
    for x in (q, k, v):
        x.set_data_type(cudnn.data_type.BFLOAT16)
    o, _ = g.sdpa(q, k, v, attn_scale=0.25, generate_stats=False)
    o.set_output(True)
    g.validate()
    why = AttentionEngine().check_support(g.op_graph, Target())
    assert not why.ok and "Q" in why.reason and "2^31" in why.reason, why.reason
