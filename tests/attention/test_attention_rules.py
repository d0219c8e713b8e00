"""Every rule of the sdpa / sdpa_backward nodes and builder methods with its typed error
(naming the node, the tensor and the rule)."""

import collections
import math

import pytest
from _util import expect_error

import opendnn.frontend as cudnn
from opendnn.errors import BadParamError, Status

DT = cudnn.data_type
HALF, FLOAT, INT32, INT64 = DT.HALF, DT.FLOAT, DT.INT32, DT.INT64
BR = cudnn.diagonal_alignment.BOTTOM_RIGHT
Q, K, V = (2, 4, 5, 16), (2, 2, 7, 16), (2, 2, 7, 16)

# a tensor the graph helper creates: name, dims, type, pass-by-value
T = collections.namedtuple("T", "name dims type by_value", defaults=(HALF, False))
SEQ_Q, SEQ_KV = T("seq_len_q", (2, 1, 1, 1), INT32), T("seq_len_kv", (2, 1, 1, 1), INT32)
SEED, OFFSET = T("seed", (1, 1, 1, 1), INT64, True), T("offset", (1, 1, 1, 1), INT64, True)
BIAS = T("bias", (1, 4, 5, 7))


def _make(g, v):
    if isinstance(v, T):
        dims = list(v.dims) if v.dims is not None else None
        return g.tensor(dims, None, v.type, is_pass_by_value=v.by_value, name=v.name)
    if isinstance(v, tuple):
        return tuple(_make(g, x) for x in v)
    return v


def _qkv(g, q, k, v, types):
    return [g.tensor(list(d), None, t, name=n) for d, t, n in zip((q, k, v), types, "qkv")]


def _fwd(q=Q, k=K, v=V, types=(HALF,) * 3, o=None, stats=None, **kw):
    """An sdpa graph (T specs in ``kw`` become graph tensors); ``o`` / ``stats``: (dims,
    type) set on the outputs."""
    g = cudnn.pygraph()
    out, st = g.sdpa(
        *_qkv(g, q, k, v, types), name="sdpa", **{n: _make(g, x) for n, x in kw.items()}
    )
    for t, spec in ((out, o), (st, stats)):
        if spec is not None:
            t.set_dim(list(spec[0])).set_data_type(spec[1])
    out.set_output(True)
    return g


def _bwd(
    o=(2, 4, 5, 16),
    do=(2, 4, 5, 16),
    stats=(2, 4, 5, 1),
    do_type=HALF,
    stats_type=FLOAT,
    dq=None,
    k=K,
    **kw,
):
    g = cudnn.pygraph()
    qkv = _qkv(g, Q, k, V, (HALF,) * 3)
    to, tdo = g.tensor(list(o), None, HALF, name="o"), g.tensor(list(do), None, do_type, name="dO")
    tst = g.tensor(list(stats), None, stats_type, name="stats")
    grads = g.sdpa_backward(
        *qkv, to, tdo, tst, name="sdpa_bwd", **{n: _make(g, x) for n, x in kw.items()}
    )
    if dq is not None:
        grads[0].set_dim(list(dq))
    return g


NODE_RULES = [
    # shapes of q, k, v
    (dict(q=(2, 4, 16)), Status.BAD_PARAM_SHAPE_MISMATCH, ["q", "needs 4 dims"]),
    (dict(k=(2, 2, 7, 16, 1)), Status.BAD_PARAM_SHAPE_MISMATCH, ["k", "needs 4 dims"]),
    (
        dict(k=(3, 2, 7, 16), v=(3, 2, 7, 16)),
        Status.BAD_PARAM_SHAPE_MISMATCH,
        ["k", "K batch size 3 differs from Q's 2"],
    ),
    (
        dict(k=(2, 3, 7, 16), v=(2, 3, 7, 16)),
        Status.BAD_PARAM_SHAPE_MISMATCH,
        ["k", "K head count 3 does not divide Q's head count 4"],
    ),
    (dict(v=(2, 3, 7, 16)), Status.BAD_PARAM_SHAPE_MISMATCH, ["v", "V head count 3"]),
    (dict(k=(2, 2, 7, 24)), Status.BAD_PARAM_SHAPE_MISMATCH, ["k", "K head dim 24 differs"]),
    (
        dict(v=(2, 2, 6, 16)),
        Status.BAD_PARAM_SHAPE_MISMATCH,
        ["v", "V sequence length 6 differs from K's 7"],
    ),
    (
        dict(q=(2, 4, 5, 12), k=(2, 2, 7, 12)),
        Status.NOT_SUPPORTED_SHAPE,
        ["q", "Q head dim 12 must be a multiple of 8 in [8, 1024]"],
    ),
    (dict(q=(2, 4, 5, 1032), k=(2, 2, 7, 1032)), Status.NOT_SUPPORTED_SHAPE, ["q", "1032"]),
    (dict(v=(2, 2, 7, 4)), Status.NOT_SUPPORTED_SHAPE, ["v", "V head dim 4"]),
    # types
    (
        dict(types=(DT.DOUBLE,) * 3),
        Status.NOT_SUPPORTED_DATA_TYPE,
        ["q", "DOUBLE is not half, bfloat16 or float"],
    ),
    (dict(types=(DT.INT8,) * 3), Status.NOT_SUPPORTED_DATA_TYPE, ["q", "INT8"]),
    (dict(types=(HALF, DT.BFLOAT16, HALF)), Status.BAD_PARAM, ["k", "one data type"]),
    # padding mask
    (
        dict(use_padding_mask=True, seq_len_q=SEQ_Q),
        Status.BAD_PARAM_NULL_POINTER,
        ["use_padding_mask needs both seq_len_q and seq_len_kv"],
    ),
    (
        dict(use_padding_mask=True, seq_len_q=T("lq", (2, 1, 1), INT32), seq_len_kv=SEQ_KV),
        Status.BAD_PARAM_SHAPE_MISMATCH,
        ["lq", "SEQ_LEN_Q dims [2, 1, 1] must be [2, 1, 1, 1]"],
    ),
    (
        dict(use_padding_mask=True, seq_len_q=SEQ_Q, seq_len_kv=T("lkv", (2, 1, 1, 1), FLOAT)),
        Status.NOT_SUPPORTED_DATA_TYPE,
        ["lkv", "SEQ_LEN_KV must be int32 or int64"],
    ),
    # bias
    (
        dict(bias=T("bias", (4, 5, 7))),
        Status.BAD_PARAM_SHAPE_MISMATCH,
        ["bias", "BIAS dims [4, 5, 7] must be [1 or 2, 1 or 4, 5, 7]"],
    ),
    (dict(bias=T("bias", (3, 4, 5, 7))), Status.BAD_PARAM_SHAPE_MISMATCH, ["bias", "[3, 4"]),
    (dict(bias=T("bias", (1, 2, 5, 7))), Status.BAD_PARAM_SHAPE_MISMATCH, ["bias", "[1, 2"]),
    (dict(bias=T("bias", (1, 1, 5, 6))), Status.BAD_PARAM_SHAPE_MISMATCH, ["bias", "5, 6]"]),
    (
        dict(bias=T("bias", (1, 1, 5, 7), INT32)),
        Status.NOT_SUPPORTED_DATA_TYPE,
        ["bias", "INT32 is not a floating type"],
    ),
    # dropout
    (
        dict(dropout=(1.0, SEED, OFFSET)),
        Status.BAD_PARAM_OUT_OF_BOUND,
        ["dropout probability 1.0 is outside [0, 1)"],
    ),
    (dict(dropout=(-0.1, SEED, OFFSET)), Status.BAD_PARAM_OUT_OF_BOUND, ["-0.1"]),
    (dict(dropout=(math.nan, SEED, OFFSET)), Status.BAD_PARAM_OUT_OF_BOUND, ["nan"]),
    (
        dict(dropout=(0.1, T("seed", (1,), FLOAT, True), OFFSET)),
        Status.BAD_PARAM,
        ["seed", "SEED must be one int32/int64 element"],
    ),
    (
        dict(dropout=(0.1, SEED, T("offset", (2,), INT64))),
        Status.BAD_PARAM,
        ["offset", "OFFSET must be one int32/int64 element"],
    ),
    # band bounds, scale
    (
        dict(diagonal_band_left_bound=-1),
        Status.BAD_PARAM_OUT_OF_BOUND,
        ["diagonal_band_left_bound -1 is negative"],
    ),
    (
        dict(diagonal_band_right_bound=-2),
        Status.BAD_PARAM_OUT_OF_BOUND,
        ["diagonal_band_right_bound -2 is negative"],
    ),
    (
        dict(diagonal_band_left_bound=1.5),
        Status.BAD_PARAM_ATTRIBUTE_TYPE,
        ["diagonal_band_left_bound 1.5 is not an int"],
    ),
    (
        dict(attn_scale=T("scale", (1, 1, 1, 1), FLOAT)),
        Status.BAD_PARAM,
        ["scale", "ATTN_SCALE must be a one-element pass-by-value float", "in device memory"],
    ),
    (dict(attn_scale=T("scale", (1, 1, 1, 1), INT32, True)), Status.BAD_PARAM, ["scale", "INT32"]),
    # outputs
    (
        dict(o=((2, 4, 5, 8), HALF)),
        Status.BAD_PARAM_SHAPE_MISMATCH,
        ["sdpa::O", "O dims [2, 4, 5, 8] must be [2, 4, 5, 16]"],
    ),
    (dict(o=((2, 4, 5, 16), DT.INT8)), Status.NOT_SUPPORTED_DATA_TYPE, ["sdpa::O", "INT8"]),
    (
        dict(stats=((2, 4, 5), FLOAT)),
        Status.BAD_PARAM_SHAPE_MISMATCH,
        ["sdpa::Stats", "STATS dims [2, 4, 5] must be [2, 4, 5, 1]"],
    ),
    (
        dict(stats=((2, 4, 5, 1), HALF)),
        Status.NOT_SUPPORTED_DATA_TYPE,
        ["sdpa::Stats", "STATS must be float32, is HALF"],
    ),
    (
        dict(block_mask=T("bm", (2, 4, 1, 2), DT.UINT8)),
        Status.BAD_PARAM_SHAPE_MISMATCH,
        ["bm", "BLOCK_MASK dims [2, 4, 1, 2] must be [2, 4, 1, 1]"],
    ),
    (
        dict(block_mask=T("bm", (2, 4, 1, 1), INT32)),
        Status.NOT_SUPPORTED_DATA_TYPE,
        ["bm", "BLOCK_MASK must be uint8"],
    ),
    (
        dict(sink_token=T("sink", (1, 3, 1, 1), FLOAT)),
        Status.BAD_PARAM_SHAPE_MISMATCH,
        ["sink", "SINK_TOKEN dims [1, 3, 1, 1] must be [1, 4, 1, 1]"],
    ),
    (
        dict(sink_token=T("sink", (1, 4, 1, 1), HALF)),
        Status.NOT_SUPPORTED_DATA_TYPE,
        ["sink", "SINK_TOKEN must be float32, is HALF"],
    ),
    (
        dict(score_max=T("mx", (2, 4, 5, 1), HALF)),
        Status.NOT_SUPPORTED_DATA_TYPE,
        ["mx", "SCORE_MAX must be float32, is HALF"],
    ),
    (
        dict(score_sum_exp=T("se", (2, 4, 5))),
        Status.BAD_PARAM_SHAPE_MISMATCH,
        ["se", "SCORE_SUM_EXP dims [2, 4, 5] must be [2, 4, 5, 1]"],
    ),
    (dict(rng_dump=T("dump", (2, 4, 5, 7), FLOAT)), Status.BAD_PARAM, ["RNG_DUMP needs dropout"]),
    (
        dict(dropout=(T("mask", (2, 4, 5, 6)), T("scale", (1, 1, 1, 1), FLOAT, True))),
        Status.BAD_PARAM_SHAPE_MISMATCH,
        ["mask", "DROPOUT_MASK dims [2, 4, 5, 6] must be [2, 4, 5, 7]"],
    ),
    (
        dict(dropout=(T("mask", (2, 4, 5, 7)), T("scale", (1, 1, 1, 1), FLOAT))),
        Status.BAD_PARAM,
        ["scale", "DROPOUT_SCALE must be a one-element pass-by-value float"],
    ),
    (
        dict(
            k=(4, 2, 4, 16),
            v=(4, 2, 4, 16),
            paged_attention_k_table=T("kt", (2, 1, 2), INT32),
            paged_attention_v_table=T("vt", (2, 1, 2, 1), INT32),
        ),
        Status.BAD_PARAM_SHAPE_MISMATCH,
        ["kt", "PAGE_TABLE_K dims [2, 1, 2] must be [2, 1, pages, 1]"],
    ),
    (
        dict(
            k=(4, 2, 4, 16),
            v=(4, 2, 4, 16),
            paged_attention_k_table=T("kt", (2, 1, 2, 1), INT64),
            paged_attention_v_table=T("vt", (2, 1, 2, 1), INT32),
        ),
        Status.NOT_SUPPORTED_DATA_TYPE,
        ["kt", "PAGE_TABLE_K must be int32, is INT64"],
    ),
    (
        dict(
            k=(4, 2, 4, 16),
            v=(4, 2, 4, 16),
            paged_attention_k_table=T("kt", (2, 1, 2, 1), INT32),
            paged_attention_v_table=T("vt", (2, 1, 2, 1), INT32),
            paged_attention_max_seq_len_kv=9,
        ),
        Status.BAD_PARAM_OUT_OF_BOUND,
        ["kt", "paged_attention_max_seq_len_kv 9 must be an int in [1, pages x block_size = 8]"],
    ),
    (
        dict(rng_dump=T("dump", (2, 4, 5, 6), FLOAT), dropout=(0.1, SEED, OFFSET)),
        Status.BAD_PARAM_SHAPE_MISMATCH,
        ["dump", "RNG_DUMP dims [2, 4, 5, 6] must be [2, 4, 5, 7]"],
    ),
    (
        dict(rng_dump=T("dump", (2, 4, 5, 7), INT32), dropout=(0.1, SEED, OFFSET)),
        Status.NOT_SUPPORTED_DATA_TYPE,
        ["dump", "not a floating type"],
    ),
]


@pytest.mark.parametrize(
    "kw,status,names", NODE_RULES, ids=[f"{i}-{r[2][-1][:30]}" for i, r in enumerate(NODE_RULES)]
)
def test_forward_rule(kw, status, names):
    expect_error(BadParamError, status, _fwd(**kw).validate, "sdpa", *names)


BUILDER_RULES = [
    (dict(attn_scale=True), Status.BAD_PARAM_ATTRIBUTE_TYPE, ["attn_scale must be a float"]),
    (
        dict(dropout=(0.1, SEED)),
        Status.BAD_PARAM_ATTRIBUTE_TYPE,
        ["dropout must be a tuple (probability, seed, offset)"],
    ),
    (dict(dropout=0.1), Status.BAD_PARAM_ATTRIBUTE_TYPE, ["dropout must be a tuple"]),
    (
        dict(paged_attention_max_seq_len_kv=7),
        Status.BAD_PARAM_NULL_POINTER,
        ["paged attention needs both"],
    ),
    (
        dict(paged_attention_k_table=T("kt", (2, 1, 2, 1), INT32)),
        Status.BAD_PARAM_NULL_POINTER,
        ["paged attention needs both"],
    ),
    (dict(score_mod="softcap"), Status.BAD_PARAM_ATTRIBUTE_TYPE, ["score_mod must be callable"]),
    (dict(unfuse_fma=True), Status.NOT_SUPPORTED, ["unfuse_fma"]),
    (dict(implementation=7), Status.BAD_PARAM, ["implementation 7 is not an attention_impl"]),
    (
        dict(generate_stats=True, is_inference=True),
        Status.BAD_PARAM,
        ["generate_stats=True contradicts the deprecated is_inference=True"],
    ),
    (
        dict(use_causal_mask=True, use_causal_mask_bottom_right=True),
        Status.BAD_PARAM,
        ["contradict each other"],
    ),
    (
        dict(use_causal_mask=True, diagonal_alignment=BR),
        Status.BAD_PARAM,
        ["asks for TOP_LEFT but diagonal_alignment is BOTTOM_RIGHT"],
    ),
    (
        dict(sliding_window_length=3, diagonal_band_left_bound=4),
        Status.BAD_PARAM,
        ["sliding_window_length 3 and diagonal_band_left_bound 4 differ"],
    ),
]


@pytest.mark.parametrize(
    "kw,status,names", BUILDER_RULES, ids=[r[2][-1][:30] for r in BUILDER_RULES]
)
def test_builder_rule(kw, status, names):
    expect_error(BadParamError, status, lambda: _fwd(**kw), "sdpa", *names)


@pytest.mark.parametrize("impl", ["AUTO", "COMPOSITE", "UNIFIED"])
def test_every_implementation_is_taken(impl):
    """cudnn-frontend's ``implementation``: all three name the same function (the fused
    engine runs it), given as the enum, its name or its value."""
    import opendnn.frontend as cudnn

    member = getattr(cudnn.attention_implementation, impl)
    for value in (member, impl.lower(), int(member)):
        _fwd(implementation=value).validate()


def test_stats_output_only_with_generate_stats():
    g = _fwd()
    node = g._nodes[0]
    node.generate_stats = False  # an inconsistent node (a hand-edited graph)
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        g.validate,
        "sdpa",
        "STATS is an output exactly when generate_stats is True",
    )


def test_diagonal_alignment_must_be_the_enum():
    g = _fwd()
    g._nodes[0].diagonal_alignment = 7  # a hand-edited node
    expect_error(
        BadParamError,
        Status.BAD_PARAM_ATTRIBUTE_TYPE,
        g.validate,
        "sdpa",
        "diagonal_alignment 7 is not a DiagonalAlignment",
    )


def test_dropout_needs_seed_and_offset_and_they_need_dropout():
    g = _fwd(dropout=(0.2, SEED, OFFSET))
    node = g._nodes[0]
    node.inputs.pop("OFFSET")
    expect_error(
        BadParamError,
        Status.BAD_PARAM_NULL_POINTER,
        g.validate,
        "sdpa",
        "dropout needs a SEED and an OFFSET",
    )
    g = _fwd(dropout=(0.2, SEED, OFFSET))
    g._nodes[0].dropout_probability = None
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        g.validate,
        "sdpa",
        "seed",
        "SEED / OFFSET are given only with dropout",
    )


BACKWARD_RULES = [
    (
        dict(o=(2, 4, 5, 8)),
        Status.BAD_PARAM_SHAPE_MISMATCH,
        ["o", "O dims [2, 4, 5, 8] must be [2, 4, 5, 16]"],
    ),
    (dict(do=(2, 4, 6, 16)), Status.BAD_PARAM_SHAPE_MISMATCH, ["dO", "DO dims"]),
    (dict(do_type=DT.INT8), Status.NOT_SUPPORTED_DATA_TYPE, ["dO", "INT8"]),
    (dict(stats=(2, 4, 5, 2)), Status.BAD_PARAM_SHAPE_MISMATCH, ["stats", "STATS dims"]),
    (dict(stats_type=HALF), Status.NOT_SUPPORTED_DATA_TYPE, ["stats", "must be float32"]),
    (
        dict(dq=(2, 4, 5, 8)),
        Status.BAD_PARAM_SHAPE_MISMATCH,
        ["sdpa_bwd::dQ", "DQ dims [2, 4, 5, 8] must be [2, 4, 5, 16]"],
    ),
    (dict(k=(2, 3, 7, 16)), Status.BAD_PARAM_SHAPE_MISMATCH, ["k", "K head count 3"]),
    (
        dict(dBias=T("dbias", (1, 4, 5, 7))),
        Status.BAD_PARAM_NULL_POINTER,
        ["dbias", "DBIAS needs a BIAS"],
    ),
    (
        dict(bias=BIAS, dBias=T("dbias", (2, 4, 5, 7))),
        Status.BAD_PARAM_SHAPE_MISMATCH,
        ["dbias", "DBIAS dims [2, 4, 5, 7] must be [1, 4, 5, 7]"],
    ),
    (dict(diagonal_band_right_bound=-1), Status.BAD_PARAM_OUT_OF_BOUND, ["is negative"]),
]


@pytest.mark.parametrize(
    "kw,status,names", BACKWARD_RULES, ids=[r[2][-1][:30] for r in BACKWARD_RULES]
)
def test_backward_rule(kw, status, names):
    expect_error(BadParamError, status, _bwd(**kw).validate, "sdpa_bwd", *names)


def test_backward_ragged_totals_are_taken_and_checked():
    _bwd(max_total_seq_len_q=64, max_total_seq_len_kv=128).validate()
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        lambda: _bwd(max_total_seq_len_q=-1),
        "sdpa_bwd",
        "max_total_seq_len_q -1 is not a non-negative int",
    )


def test_backward_infers_gradient_properties():
    g = _bwd(bias=BIAS, dBias=T("dbias", None))
    g.validate()
    dq, dk, dv = (g.op_graph.tensors[g._nodes[0].outputs[r].uid] for r in ("DQ", "DK", "DV"))
    assert (dq.dims, dk.dims, dv.dims) == (Q, K, V)
    assert g._nodes[0].outputs["DBIAS"].get_dim() == list(BIAS.dims)


@pytest.mark.parametrize(
    "kw,name",
    [
        (dict(score_mod=lambda g, s: s), "score_mod"),
        (dict(score_mod_bprop=lambda g, s: s), "score_mod_bprop"),
    ],
)
def test_backward_score_mod_and_its_bprop_come_together(kw, name):
    expect_error(
        BadParamError,
        Status.BAD_PARAM_NULL_POINTER,
        lambda: _bwd(**kw),
        "sdpa_bwd",
        "score_mod and score_mod_bprop come together",
    )


@pytest.mark.parametrize(
    "kw",
    [
        dict(sink_token=T("sink", (1, 4, 1, 1), FLOAT)),
        dict(dSink_token=T("dsink", (1, 4, 1, 1), FLOAT)),
    ],
)
def test_backward_sink_and_its_gradient_come_together(kw):
    expect_error(
        BadParamError,
        Status.BAD_PARAM_NULL_POINTER,
        lambda: _bwd(**kw),
        "sdpa_bwd",
        "sink_token and dSink_token come together",
    )


def test_lengths_without_the_padding_mask_mask_nothing():
    """cudnn-frontend's flexible-attention tests pass seq_len_q / seq_len_kv without
    use_padding_mask (their score_mod reads them): taken, masking nothing."""
    _fwd(seq_len_q=SEQ_Q, seq_len_kv=SEQ_KV).validate()
