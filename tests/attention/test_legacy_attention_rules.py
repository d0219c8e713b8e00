"""Every rule of the legacy multi-head attention calls raises its typed error naming the
call, the argument and the rule; and the descriptors' getters give back what was set."""

import math

import pytest
import torch
from _util import expect_error

import opendnn.legacy as cudnn
from opendnn.errors import BadParamError, GraphNotSupportedError, Status

AX = cudnn.SeqDataAxis
WK = cudnn.MultiHeadAttnWeightKind
FLOAT = cudnn.DataType.FLOAT
AXES = (AX.BATCH, AX.BEAM, AX.TIME, AX.VECT)
SET_ATTN = "set_attn_descriptor"
SET_SEQ = "set_seq_data_descriptor"
FWD = "multi_head_attn_forward"

# n_heads 2, q/k/v sizes 5/6/7, projections 8/8/8, o_proj 5, T_q 3, T_kv 4, N 2, M 2
ATTN = dict(
    attn_mode=0,
    n_heads=2,
    sm_scaler=0.5,
    data_type=FLOAT,
    compute_prec=FLOAT,
    math_type=cudnn.MathType.DEFAULT_MATH,
    attn_dropout_desc=None,
    post_dropout_desc=None,
    q_size=5,
    k_size=6,
    v_size=7,
    q_proj_size=8,
    k_proj_size=8,
    v_proj_size=8,
    o_proj_size=5,
    qo_max_seq_length=3,
    kv_max_seq_length=4,
    max_batch_size=2,
    max_beam_size=2,
)


def _attn(**over):
    d = cudnn.create_attn_descriptor()
    cudnn.set_attn_descriptor(d, **{**ATTN, **over})
    return d


def _seq(t, n, m, v, lens=None, dtype=FLOAT, axes=AXES, fill=None):
    d = cudnn.create_seq_data_descriptor()
    dims = [0] * 4
    dims[AX.TIME], dims[AX.BATCH], dims[AX.BEAM], dims[AX.VECT] = t, n, m, v
    lens = [t] * (n * m) if lens is None else lens
    cudnn.set_seq_data_descriptor(d, dtype, 4, dims, axes, len(lens), lens, fill)
    return d


def _set_attn_error(status, name, exc=BadParamError, **over):
    expect_error(exc, status, lambda: _attn(**over), SET_ATTN, *([name] if name else []))


@pytest.mark.parametrize(
    "name",
    [
        "n_heads",
        "q_size",
        "k_size",
        "v_size",
        "qo_max_seq_length",
        "kv_max_seq_length",
        "max_batch_size",
        "max_beam_size",
    ],
)
def test_sizes_at_least_one(name):
    _set_attn_error(Status.BAD_PARAM_OUT_OF_BOUND, name, **{name: 0})


@pytest.mark.parametrize("name", ["q_proj_size", "k_proj_size", "v_proj_size", "o_proj_size"])
def test_projection_sizes_not_negative(name):
    _set_attn_error(Status.BAD_PARAM_OUT_OF_BOUND, name, **{name: -1})


def test_sizes_are_ints():
    _set_attn_error(Status.BAD_PARAM_ATTRIBUTE_TYPE, "n_heads", n_heads=2.0)


def test_attn_mode_flags():
    _set_attn_error(Status.BAD_PARAM, "attn_mode", attn_mode=4)


@pytest.mark.parametrize("value", [-0.5, math.inf, math.nan])
def test_sm_scaler(value):
    _set_attn_error(Status.BAD_PARAM_OUT_OF_BOUND, "sm_scaler", sm_scaler=value)


def test_q_and_k_lengths_after_projection():
    _set_attn_error(Status.BAD_PARAM_SHAPE_MISMATCH, "k_proj_size", k_proj_size=16)
    _set_attn_error(Status.BAD_PARAM_SHAPE_MISMATCH, "k_size", k_proj_size=0)
    _attn(k_proj_size=0, k_size=8)  # k unprojected, of q's projected length: fine


def test_data_types():
    _set_attn_error(
        Status.NOT_SUPPORTED_DATA_TYPE,
        None,
        GraphNotSupportedError,
        data_type=cudnn.DataType.DOUBLE,
    )
    _set_attn_error(Status.BAD_PARAM, "compute_prec", compute_prec=cudnn.DataType.HALF)
    _attn(data_type=cudnn.DataType.HALF, compute_prec=cudnn.DataType.HALF)


def test_math_type():
    _set_attn_error(Status.BAD_PARAM, "math_type", math_type=9)


def test_dropout_descriptors():
    _set_attn_error(
        Status.BAD_PARAM_DESCRIPTOR_TYPE, "attn_dropout_desc", attn_dropout_desc=object()
    )
    drop = cudnn.create_dropout_descriptor()
    _set_attn_error(Status.BAD_PARAM_NOT_FINALIZED, "post_dropout_desc", post_dropout_desc=drop)
    states = torch.zeros(4, dtype=torch.int64)
    cudnn.set_dropout_descriptor(drop, cudnn.create(), 1.0, states, 32, 7)
    _set_attn_error(
        Status.NOT_SUPPORTED, "post_dropout_desc", GraphNotSupportedError, post_dropout_desc=drop
    )
    cudnn.set_dropout_descriptor(drop, cudnn.create(), 0.1, states, 32, 7)
    _attn(attn_dropout_desc=drop, post_dropout_desc=drop)


def test_attn_descriptor_roundtrip_and_unset():
    d = _attn(
        attn_mode=cudnn.AttnQueryMap.QUERYMAP_ONE_TO_ONE | cudnn.AttnQueryMap.ENABLE_PROJ_BIASES
    )
    got = cudnn.get_attn_descriptor(d)
    assert got[0] == 3 and list(got[1:]) == list({**ATTN}.values())[1:]
    expect_error(
        BadParamError,
        Status.BAD_PARAM_NOT_FINALIZED,
        lambda: cudnn.get_attn_descriptor(cudnn.create_attn_descriptor()),
        "get_attn_descriptor",
        "attn_desc",
    )
    expect_error(
        BadParamError,
        Status.BAD_PARAM_NOT_FINALIZED,
        lambda: cudnn.get_multi_head_attn_buffers(cudnn.create(), cudnn.create_attn_descriptor()),
        "get_multi_head_attn_buffers",
        "attn_desc",
    )
    expect_error(
        BadParamError,
        Status.BAD_PARAM_DESCRIPTOR_TYPE,
        lambda: cudnn.set_attn_descriptor(object(), **ATTN),
        SET_ATTN,
        "attn_desc",
    )


# ---- sequence data ---------------------------------------------------------------------
def _seq_call(nb=4, dims=(3, 2, 1, 5), axes=AXES, size=None, lens=None, dtype=FLOAT, fill=None):
    lens = [3, 3] if lens is None else lens
    d = cudnn.create_seq_data_descriptor()
    cudnn.set_seq_data_descriptor(
        d, dtype, nb, list(dims), axes, len(lens) if size is None else size, lens, fill
    )
    return d


@pytest.mark.parametrize(
    "kwargs,status,name",
    [
        (dict(nb=3), Status.BAD_PARAM_OUT_OF_BOUND, "nb_dims"),
        (dict(dims=(3, 0, 1, 5)), Status.BAD_PARAM_OUT_OF_BOUND, "dim_a"),
        (dict(dims=(3, 2, 1)), Status.BAD_PARAM_SHAPE_MISMATCH, "dim_a"),
        (dict(axes=(AX.BATCH, AX.BATCH, AX.TIME, AX.VECT)), Status.BAD_PARAM, "axes"),
        (dict(axes=(AX.BATCH, AX.BEAM, AX.VECT, AX.TIME)), Status.BAD_PARAM, "axes"),
        (dict(size=3), Status.BAD_PARAM_SHAPE_MISMATCH, "seq_length_array"),
        (dict(lens=[3]), Status.BAD_PARAM_SHAPE_MISMATCH, "seq_length_array"),
        (dict(lens=[3, 4]), Status.BAD_PARAM_OUT_OF_BOUND, "seq_length_array"),
        (dict(lens=[-1, 3]), Status.BAD_PARAM_OUT_OF_BOUND, "seq_length_array"),
        (dict(fill="0"), Status.BAD_PARAM, "padding_fill"),
    ],
)
def test_seq_data_rules(kwargs, status, name):
    expect_error(BadParamError, status, lambda: _seq_call(**kwargs), SET_SEQ, name)


def test_seq_data_type_and_roundtrip():
    expect_error(
        GraphNotSupportedError,
        Status.NOT_SUPPORTED_DATA_TYPE,
        lambda: _seq_call(dtype=cudnn.DataType.DOUBLE),
        SET_SEQ,
    )
    d = _seq_call(axes=(AX.TIME, AX.BATCH, AX.BEAM, AX.VECT), lens=[0, 2], fill=-1.0)
    assert cudnn.get_seq_data_descriptor(d) == (
        FLOAT,
        4,
        [3, 2, 1, 5],
        [AX.TIME, AX.BATCH, AX.BEAM, AX.VECT],
        2,
        [0, 2],
        -1.0,
    )
    assert (
        d.strides[AX.VECT] == 1
        and d.strides[AX.BEAM] == 5
        and d.strides[AX.BATCH] == 5
        and d.strides[AX.TIME] == 10
    )


# ---- weights -----------------------------------------------------------------------------
def test_weights_rules():
    h = cudnn.create()
    d = _attn(q_proj_size=0, q_size=8)
    size = cudnn.get_multi_head_attn_buffers(h, d)[0]
    w = torch.zeros(size, dtype=torch.uint8)
    desc, view = cudnn.get_multi_head_attn_weights(h, d, WK.Q_WEIGHTS, size, w)
    assert view is None and not desc.is_set()  # no Q projection
    desc, view = cudnn.get_multi_head_attn_weights(h, d, WK.K_BIASES, size, w)
    assert view is None  # biases disabled
    desc, view = cudnn.get_multi_head_attn_weights(h, d, WK.V_WEIGHTS, size, w)
    assert desc.dims == (2, 7, 8) and view.shape == (2, 7, 8)
    op = "get_multi_head_attn_weights"
    expect_error(
        BadParamError,
        Status.BAD_PARAM_OUT_OF_BOUND,
        lambda: cudnn.get_multi_head_attn_weights(h, d, 8, size, w),
        op,
        "w_kind",
    )
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SIZE_INSUFFICIENT,
        lambda: cudnn.get_multi_head_attn_weights(h, d, WK.O_WEIGHTS, size - 1, w),
        op,
        "weights",
    )
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SIZE_INSUFFICIENT,
        lambda: cudnn.get_multi_head_attn_weights(h, d, WK.O_WEIGHTS, size, w[:-1]),
        op,
        "weights",
    )


# ---- the forward and backward calls --------------------------------------------------------
class Setup:
    """A valid float32 problem (N 2, M 2, ALL_TO_ONE) whose pieces a test replaces."""

    def __init__(self, **attn):
        self.h = cudnn.create()
        self.attn = _attn(**attn)
        a = self.attn
        self.q, self.o = _seq(3, 2, 2, a.q_size), _seq(3, 2, 2, a.o_len)
        self.k, self.v = _seq(4, 2, 1, a.k_size), _seq(4, 2, 1, a.v_size)
        self.sizes = cudnn.get_multi_head_attn_buffers(self.h, a)
        w, ws, rs = self.sizes
        self.bufs = dict(
            weights=torch.randn(w // 4),
            work=torch.empty(ws, dtype=torch.uint8),
            reserve=torch.empty(rs, dtype=torch.uint8),
        )
        self.data = {
            n: torch.randn(d.numel)
            for n, d in (("q", self.q), ("k", self.k), ("v", self.v), ("o", self.o))
        }

    def forward(self, **over):
        args = dict(
            handle=self.h,
            attn_desc=self.attn,
            curr_idx=-1,
            lo_win_idx=[0] * 3,
            hi_win_idx=[4] * 3,
            dev_seq_lengths_qo=torch.tensor([3] * 4),
            dev_seq_lengths_kv=torch.tensor([4, 4]),
            q_desc=self.q,
            queries=self.data["q"],
            residuals=None,
            k_desc=self.k,
            keys=self.data["k"],
            v_desc=self.v,
            values=self.data["v"],
            o_desc=self.o,
            out=self.data["o"],
            weight_size_in_bytes=self.sizes[0],
            weights=self.bufs["weights"],
            work_space_size_in_bytes=self.sizes[1],
            work_space=self.bufs["work"],
            reserve_space_size_in_bytes=self.sizes[2],
            reserve_space=self.bufs["reserve"],
        )
        args.update(over)
        return cudnn.multi_head_attn_forward(**args)

    def error(self, status, *names, exc=BadParamError, **over):
        expect_error(exc, status, lambda: self.forward(**over), FWD, *names)


@pytest.fixture
def setup():
    s = Setup()
    s.forward()  # the valid call works
    return s


def test_forward_descriptor_rules(setup):
    s = setup
    SM = Status.BAD_PARAM_SHAPE_MISMATCH
    s.error(SM, "q_desc", q_desc=_seq(3, 2, 2, 6))  # VECT != q_size
    s.error(SM, "o_desc", o_desc=_seq(2, 2, 2, 5))  # TIME != q's
    s.error(SM, "o_desc", o_desc=_seq(3, 2, 2, 5, lens=[3, 2, 3, 3]))  # lengths != q's
    s.error(SM, "v_desc", v_desc=_seq(3, 2, 1, 7))  # TIME != k's
    s.error(SM, "k_desc", k_desc=_seq(4, 2, 2, 6), v_desc=_seq(4, 2, 2, 7))  # beams
    s.error(SM, "k_desc", k_desc=_seq(4, 1, 1, 6), v_desc=_seq(4, 1, 1, 7))  # batch
    OOB = Status.BAD_PARAM_OUT_OF_BOUND
    s.error(
        OOB,
        "q_desc",
        "qo_max_seq_length",
        q_desc=_seq(4, 2, 2, 5),
        o_desc=_seq(4, 2, 2, 5),
        lo_win_idx=[0] * 4,
        hi_win_idx=[4] * 4,
        queries=torch.randn(80),
        out=torch.randn(80),
    )
    s.error(
        OOB,
        "q_desc",
        "max_beam_size",
        q_desc=_seq(3, 1, 3, 5),
        o_desc=_seq(3, 1, 3, 5),
        k_desc=_seq(4, 1, 1, 6),
        v_desc=_seq(4, 1, 1, 7),
        dev_seq_lengths_qo=[3] * 3,
        dev_seq_lengths_kv=[4],
    )
    s.error(
        Status.BAD_PARAM, "q_desc", "data type", q_desc=_seq(3, 2, 2, 5, dtype=cudnn.DataType.HALF)
    )
    s.error(Status.BAD_PARAM_NOT_FINALIZED, "k_desc", k_desc=cudnn.create_seq_data_descriptor())
    s.error(Status.BAD_PARAM_NOT_FINALIZED, "attn_desc", attn_desc=cudnn.create_attn_descriptor())


def test_forward_head_dims_of_the_attention():
    s = Setup(q_proj_size=264, k_proj_size=264)
    s.error(Status.NOT_SUPPORTED_SHAPE, "q_len", "256", exc=GraphNotSupportedError)
    s = Setup(v_proj_size=257)
    s.error(Status.NOT_SUPPORTED_SHAPE, "v_len", "256", exc=GraphNotSupportedError)


def test_forward_argument_rules(setup):
    s = setup
    s.error(Status.BAD_PARAM, "dev_seq_lengths_qo", dev_seq_lengths_qo=torch.tensor([3, 3, 2, 3]))
    s.error(Status.BAD_PARAM_NULL_POINTER, "dev_seq_lengths_kv", dev_seq_lengths_kv=None)
    s.error(Status.BAD_PARAM, "curr_idx", "training", curr_idx=0)
    s.error(
        Status.BAD_PARAM_OUT_OF_BOUND,
        "curr_idx",
        curr_idx=3,
        reserve_space=None,
        reserve_space_size_in_bytes=0,
    )
    s.error(Status.BAD_PARAM_ATTRIBUTE_TYPE, "curr_idx", curr_idx=0.0)
    s.error(Status.BAD_PARAM_OUT_OF_BOUND, "lo_win_idx", lo_win_idx=[0, -1, 0])
    s.error(Status.BAD_PARAM_OUT_OF_BOUND, "hi_win_idx", lo_win_idx=[0, 2, 0], hi_win_idx=[4, 1, 4])
    s.error(Status.BAD_PARAM_SIZE_INSUFFICIENT, "hi_win_idx", hi_win_idx=[4, 4])
    s.error(Status.BAD_PARAM_NULL_POINTER, "lo_win_idx", lo_win_idx=None)
    s.error(Status.BAD_PARAM_NULL_POINTER, "queries", queries=None)
    s.error(Status.BAD_PARAM, "keys", "dtype", keys=s.data["k"].half())
    s.error(Status.BAD_PARAM_SIZE_INSUFFICIENT, "values", values=s.data["v"][:-1])


def test_forward_buffer_rules(setup):
    s = setup
    w, ws, rs = s.sizes
    SI = Status.BAD_PARAM_SIZE_INSUFFICIENT
    s.error(SI, "weights", weight_size_in_bytes=w - 1)
    s.error(SI, "weights", weights=s.bufs["weights"][:4])
    s.error(SI, "work_space", work_space_size_in_bytes=ws - 1)
    s.error(SI, "work_space", work_space=s.bufs["work"][:16])
    s.error(SI, "reserve_space", reserve_space_size_in_bytes=rs - 1)
    s.error(Status.BAD_PARAM_NULL_POINTER, "work_space", work_space=None)


def test_forward_residual_length():
    s = Setup(o_proj_size=6)  # o_len 6 != q_size 5
    s.error(Status.BAD_PARAM_SHAPE_MISMATCH, "residuals", "q_size", residuals=s.data["q"])


def test_backward_rules(setup):
    s = setup
    h, a = s.h, s.attn
    w, ws, rs = s.sizes
    d = {n: torch.empty_like(s.data[n]) for n in "qkv"}

    def data(**over):
        args = dict(
            handle=h,
            attn_desc=a,
            lo_win_idx=[0] * 3,
            hi_win_idx=[4] * 3,
            dev_seq_lengths_dqdo=[3] * 4,
            dev_seq_lengths_dkdv=[4, 4],
            do_desc=s.o,
            dout=s.data["o"],
            dq_desc=s.q,
            dqueries=d["q"],
            queries=s.data["q"],
            dk_desc=s.k,
            dkeys=d["k"],
            keys=s.data["k"],
            dv_desc=s.v,
            dvalues=d["v"],
            values=s.data["v"],
            weight_size_in_bytes=w,
            weights=s.bufs["weights"],
            work_space_size_in_bytes=ws,
            work_space=s.bufs["work"],
            reserve_space_size_in_bytes=rs,
            reserve_space=s.bufs["reserve"],
        )
        args.update(over)
        return cudnn.multi_head_attn_backward_data(**args)

    def weights(**over):
        args = dict(
            handle=h,
            attn_desc=a,
            add_grad=cudnn.WgradMode.SET,
            q_desc=s.q,
            queries=s.data["q"],
            k_desc=s.k,
            keys=s.data["k"],
            v_desc=s.v,
            values=s.data["v"],
            do_desc=s.o,
            dout=s.data["o"],
            weight_size_in_bytes=w,
            weights=s.bufs["weights"],
            dweights=torch.empty_like(s.bufs["weights"]),
            work_space_size_in_bytes=ws,
            work_space=s.bufs["work"],
            reserve_space_size_in_bytes=rs,
            reserve_space=s.bufs["reserve"],
        )
        args.update(over)
        return cudnn.multi_head_attn_backward_weights(**args)

    data()
    weights()
    op_d, op_w = "multi_head_attn_backward_data", "multi_head_attn_backward_weights"
    expect_error(
        BadParamError,
        Status.BAD_PARAM_NULL_POINTER,
        lambda: data(reserve_space=None),
        op_d,
        "reserve_space",
    )
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        lambda: data(dq_desc=_seq(3, 2, 2, 6)),
        op_d,
        "dq_desc",
    )
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        lambda: data(dev_seq_lengths_dkdv=[4, 3]),
        op_d,
        "dev_seq_lengths_dkdv",
    )
    expect_error(
        BadParamError, Status.BAD_PARAM_OUT_OF_BOUND, lambda: weights(add_grad=2), op_w, "add_grad"
    )
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SIZE_INSUFFICIENT,
        lambda: weights(dweights=s.bufs["weights"][:3]),
        op_w,
        "dweights",
    )
