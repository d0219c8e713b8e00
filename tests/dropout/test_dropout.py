"""Dropout forward and backward on the graph API: the NumPy Philox stream against
Random123's known-answer vectors; the dropout engine against the float64 reference
(bit-exact masks) in every layout and type; statistics (the kept fraction within a
binomial bound), reproducibility, counter arithmetic, layout independence, the backward's
regenerated mask, p = 0 and p = 1, device and host seeds; each rule with its error."""

import math

import numpy as np
import pytest
import torch
from _util import (
    DT_TO_TORCH,
    REFERENCE_ID,
    TORCH_TO_DT,
    assert_close,
    check_engine,
    expect_error,
    heuristic_knobs,
    nhwc,
    repro,
    with_layout,
)

import opendnn.frontend as cudnn
from opendnn.engines.dropout import shapes
from opendnn.engines.dropout.engine import DropoutEngine
from opendnn.errors import BadParamError, Status
from opendnn.ops import dropout as ref

ID = DropoutEngine.id


def _fwd(x, p, seed, offset, mask_dtype=None, device_rng=False):
    """A dropout graph; seed/offset as host ints (pass-by-value) or int64 tensors."""
    g = cudnn.pygraph()
    tx = g.tensor(list(x.shape), list(x.stride()), TORCH_TO_DT[x.dtype], name="x")
    feeds = {tx: x}
    if device_rng:
        ts = g.tensor([1], [1], cudnn.data_type.INT64, name="seed")
        to = g.tensor([1], [1], cudnn.data_type.INT64, name="offset")
        feeds.update({ts: torch.tensor([seed]), to: torch.tensor([offset])})
        seed, offset = ts, to
    y, m = g.dropout(tx, p, seed, offset, generate_mask=mask_dtype is not None, name="drop")
    y.set_output(True)
    outs = [y]
    if mask_dtype is not None:
        m.set_output(True).set_data_type(TORCH_TO_DT[mask_dtype])
        outs.append(m)
    return g, feeds, outs


def _bwd(dy, p, seed, offset):
    g = cudnn.pygraph()
    tdy = g.tensor(list(dy.shape), list(dy.stride()), TORCH_TO_DT[dy.dtype], name="dy")
    dx = g.dropout_backward(tdy, p, seed, offset, name="drop_bwd")
    dx.set_output(True)
    return g, {tdy: dy}, [dx]


def _run(g, feeds, outs):
    g.build([cudnn.heur_mode.A])
    assert g.get_plan_name_at_index(0).startswith("dropout")
    bufs = {
        o: torch.full(o.get_dim(), float("nan"))
        .to({v: k for k, v in TORCH_TO_DT.items()}[o.get_data_type()])
        .as_strided(o.get_dim(), o.get_stride())
        for o in outs
    }
    g.execute({**feeds, **bufs}, None)
    return [bufs[o] for o in outs]


def _poisoned(o, k):
    """Output buffer of ``o``: NaN if floating, else 7 / 0 / 1 (k-th poison)."""
    dtype = DT_TO_TORCH[o.get_data_type()]
    fill = (
        float("nan")
        if dtype.is_floating_point
        else (7, 0, 1)[k]
        if dtype != torch.bool
        else bool(k % 2)
    )
    return torch.empty_strided(o.get_dim(), o.get_stride(), dtype=dtype).fill_(fill)


def compare_with_reference(g, feeds, outs, knobs=None, msg=""):
    """The engine's plan and the reference's on the same inputs, each output poisoned per
    its own type (check_engine's shared fills cannot mix float and integer outputs); masks
    must agree exactly."""
    g.validate()
    g.create_execution_plan(ID, knobs or heuristic_knobs(g, ID))
    g.create_execution_plan(REFERENCE_ID, {})
    for k in range(2):
        got = []
        for i in range(2):
            bufs = {o: _poisoned(o, k) for o in outs}
            g.execute_plan_at_index({**feeds, **bufs}, None, i)
            got.append(bufs)
        for o in outs:
            assert not bool(torch.isnan(got[1][o].double()).any()), msg
            assert_close(got[0][o], got[1][o], msg=f"{msg} output={o.get_name()}")


# ---- the random stream ------------------------------------------------------------------------
def test_philox_matches_random123_known_answers():
    kat = [
        ((0, 0, 0, 0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
        (
            (0xFFFFFFFFFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF),
            (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD),
        ),
        (
            (0x299F31D0A4093822, 0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
            (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
        ),
    ]
    for (key, *counter), want in kat:
        assert tuple(int(w) for w in ref.philox4x32(key, *counter)) == want


# ---- the engine against the reference ---------------------------------------------------------


@pytest.mark.parametrize("case", shapes.CI, ids=[f"c{i}" for i in range(len(shapes.CI))])
@pytest.mark.parametrize(
    "dtype,mask_dtype",
    [(torch.float32, torch.uint8), (torch.float16, torch.float16), (torch.bfloat16, torch.bool)],
)
def test_forward_and_backward_against_reference(rng, case, dtype, mask_dtype):
    shape, layout = case
    x = with_layout(rng.rand(shape, dtype), layout)
    seed, offset = 1000 + rng.seed % 1000, rng.seed % 77
    g, feeds, outs = _fwd(x, 0.35, seed, offset, mask_dtype)
    msg = repro("dropout", [shape], str(dtype), rng.seed, layout=layout)
    compare_with_reference(g, feeds, outs, msg=msg)
    g, feeds, outs = _bwd(with_layout(rng.rand(shape, dtype), layout), 0.35, seed, offset)
    check_engine(g, feeds, outs, ID, None, msg=msg)


def test_device_seed_and_offset_tensors_and_no_mask_output(rng):
    x = rng.rand((5, 9))
    g, feeds, outs = _fwd(x, 0.5, 77, 3, None, device_rng=True)
    check_engine(g, feeds, outs, ID, dict(BLOCK=128, num_warps=2))


def test_zero_size_tensor_runs_and_writes_nothing():
    g, feeds, outs = _fwd(torch.empty(0, 4), 0.5, 1, 0, torch.float32)
    got = check_engine(g, feeds, outs, ID, None)
    assert got[outs[0]].numel() == 0


# ---- properties ------------------------------------------------------------------------------
@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_kept_fraction_is_binomial(p):
    n = 20000
    x = torch.ones(n)
    y, m = _run(*_fwd(x, p, 2024, 0, torch.uint8))
    kept = int(m.sum())
    bound = 5 * math.sqrt(n * p * (1 - p))  # 5 sigma: ~6e-7 false alarms
    assert abs(kept - n * (1 - p)) < bound, f"kept {kept} of {n} at p={p}"
    assert_close(y, m.double() / (1 - p), torch.float32)


def test_same_seed_same_mask_new_offset_new_mask_counters_shift():
    x = torch.ones(4096)
    m0 = _run(*_fwd(x, 0.5, 5, 0, torch.uint8))[1]
    assert torch.equal(m0, _run(*_fwd(x, 0.5, 5, 0, torch.uint8))[1])
    m1 = _run(*_fwd(x, 0.5, 5, ref.counters(4096), torch.uint8))[1]
    assert (m0 != m1).float().mean() > 0.4  # fresh draws
    m2 = _run(*_fwd(x, 0.5, 5, 250, torch.uint8))[1]
    assert torch.equal(m2[:3096], m0[1000:])  # element i: offset + i // 4
    m3 = _run(*_fwd(x, 0.5, 6, 0, torch.uint8))[1]
    assert (m0 != m3).float().mean() > 0.4


def test_mask_follows_logical_index_not_layout(rng):
    x = rng.rand((2, 5, 3, 4))
    a = _run(*_fwd(x, 0.4, 9, 11, torch.uint8))[1]
    b = _run(*_fwd(nhwc(x), 0.4, 9, 11, torch.uint8))[1]
    assert torch.equal(a.contiguous(), b.contiguous())


def test_backward_regenerates_the_forward_mask(rng):
    x, dy = rng.rand((6, 33)), rng.rand((6, 33))
    y, m = _run(*_fwd(x, 0.3, 42, 7, torch.float32))
    (dx,) = _run(*_bwd(dy, 0.3, 42, 7))
    assert_close(dx, dy.double() * m.double() / 0.7, torch.float32)
    assert torch.equal(dx == 0, y == 0)


def test_a_seed_beyond_2_to_the_53_is_exact():
    """The kernel reads 64-bit seeds exactly (the reference engine reads them as floats,
    so compare with the NumPy stream directly)."""
    seed, offset = 2**62 + 12345, 2**40 + 7
    _, m = _run(*_fwd(torch.ones(300), 0.5, seed, offset, torch.uint8))
    assert np.array_equal(m.numpy(), ref.mask(seed, offset, (300,), 0.5).astype(np.uint8))


def test_p_zero_keeps_everything_and_p_one_drops_everything(rng):
    x = rng.rand((3, 50))
    y, m = _run(*_fwd(x, 0.0, 1, 0, torch.uint8))
    assert torch.equal(y, x) and bool((m == 1).all())
    y, m = _run(*_fwd(x, 1.0, 1, 0, torch.uint8))
    assert bool((y == 0).all()) and bool((m == 0).all())
    (dx,) = _run(*_bwd(x, 1.0, 1, 0))
    assert bool((dx == 0).all())


# ---- bad input -------------------------------------------------------------------------------
@pytest.mark.parametrize("p", [-0.1, 1.5, float("nan")])
def test_probability_outside_0_1_is_rejected(p):
    g, _, _ = _fwd(torch.ones(4), p, 1, 0)
    expect_error(
        BadParamError, Status.BAD_PARAM_OUT_OF_BOUND, g.validate, "drop", "is outside [0, 1]"
    )


def test_seed_must_be_one_integer():
    g = cudnn.pygraph()
    x = g.tensor([4], [1], cudnn.data_type.FLOAT, name="x")
    s = g.tensor([1], [1], cudnn.data_type.FLOAT, name="fseed")
    g.dropout(x, 0.5, s, 0, name="drop")[0].set_output(True)
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        g.validate,
        "drop",
        "fseed",
        "SEED must be one int32/int64 element",
    )
    g = cudnn.pygraph()
    x = g.tensor([4], [1], cudnn.data_type.FLOAT, name="x")
    o = g.tensor([2], [1], cudnn.data_type.INT64, name="off2")
    g.dropout(x, 0.5, 3, o, name="drop")[0].set_output(True)
    expect_error(BadParamError, Status.BAD_PARAM, g.validate, "drop", "off2", "OFFSET")


def test_integer_data_is_rejected():
    g = cudnn.pygraph()
    x = g.tensor([4], [1], cudnn.data_type.INT32, name="xi")
    y, _ = g.dropout(x, 0.5, 1, 0, name="drop")
    y.set_output(True).set_data_type(cudnn.data_type.FLOAT)
    expect_error(
        BadParamError,
        Status.NOT_SUPPORTED_DATA_TYPE,
        g.validate,
        "drop",
        "xi",
        "not a floating type",
    )


# ---- the descriptor API ----------------------------------------------------------------------
def _legacy_setup(p=0.4, seed=123, dims=(2, 3, 4, 5)):
    import opendnn.legacy as L

    h = L.create("cpu")
    d = L.create_tensor_descriptor()
    L.set_tensor_4d_descriptor(d, L.TensorFormat.NCHW, L.DataType.FLOAT, *dims)
    states = torch.empty(L.dropout_get_states_size(h), dtype=torch.uint8)
    desc = L.create_dropout_descriptor()
    L.set_dropout_descriptor(desc, h, p, states, states.numel(), seed)
    return L, h, d, desc, states


def test_legacy_forward_backward_and_offsets_advance(rng):
    L, h, d, desc, states = _legacy_setup()
    x = rng.rand((2, 3, 4, 5))
    size = L.dropout_get_reserve_space_size(d)
    reserves = [torch.empty(size, dtype=torch.uint8) for _ in range(2)]
    ys = []
    for r in reserves:
        y = torch.full_like(x, float("nan"))
        L.dropout_forward(h, desc, d, x, d, y, r, size)
        ys.append(y)
    for i, y in enumerate(ys):  # call i used counters [30 i, 30 (i + 1))
        m = torch.from_numpy(ref.mask(123, 30 * i, x.shape, 0.4))
        assert_close(y, x.double() * m / 0.6, torch.float32)
    assert (ys[0] == 0).ne(ys[1] == 0).any()  # fresh masks each call
    assert states.view(torch.int64).tolist() == [123, 0, 60, 0]
    dy, dx = rng.rand(x.shape), torch.full_like(x, float("nan"))
    L.dropout_backward(h, desc, d, dy, d, dx, reserves[0], size)
    assert torch.equal(dx == 0, ys[0] == 0)
    assert_close(dx, dy.double() * (ys[0] != 0) / 0.6, torch.float32)


def test_legacy_descriptor_round_trip_restore_and_a_mask_sized_reserve(rng):
    L, h, d, desc, states = _legacy_setup(0.25, 9)
    p, st, seed = L.get_dropout_descriptor(desc, h)
    assert (p, seed) == (0.25, 9) and st.data_ptr() == states.data_ptr()
    x = rng.rand((2, 3, 4, 5))
    big = torch.empty(x.numel(), dtype=torch.uint8)  # as cuDNN's mask would need
    y1 = torch.empty_like(x)
    L.dropout_forward(h, desc, d, x, d, y1, big, big.numel())
    again = L.create_dropout_descriptor()  # picks up the advanced states
    L.restore_dropout_descriptor(again, h, 0.25, states, states.numel(), 9)
    y2 = torch.empty_like(x)
    L.dropout_forward(h, again, d, x, d, y2, big, big.numel())
    m = torch.from_numpy(ref.mask(9, ref.counters(x.numel()), x.shape, 0.25))
    assert_close(y2, x.double() * m / 0.75, torch.float32)


def test_legacy_in_place(rng):
    L, h, d, desc, states = _legacy_setup(0.5, 4)
    x = rng.rand((2, 3, 4, 5))
    want = x.double() * torch.from_numpy(ref.mask(4, 0, x.shape, 0.5)) / 0.5
    r = torch.empty(32, dtype=torch.uint8)
    L.dropout_forward(h, desc, d, x, d, x, r, 32)
    assert_close(x, want, torch.float32)


def test_legacy_rules():
    L, h, d, desc, states = _legacy_setup()
    x = torch.ones(2, 3, 4, 5)
    for p in (-0.5, 1.01):
        expect_error(
            BadParamError,
            Status.BAD_PARAM_OUT_OF_BOUND,
            lambda: L.set_dropout_descriptor(desc, h, p, states, 32, 1),
            "set_dropout_descriptor",
            "dropout",
            "outside [0, 1]",
        )
    small = torch.empty(16, dtype=torch.uint8)
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SIZE_INSUFFICIENT,
        lambda: L.set_dropout_descriptor(desc, h, 0.5, small, 16, 1),
        "set_dropout_descriptor",
        "states",
        "below the 32 bytes needed",
    )
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SIZE_INSUFFICIENT,
        lambda: L.set_dropout_descriptor(desc, h, 0.5, small, 32, 1),
        "set_dropout_descriptor",
        "states",
        "holds 16 bytes",
    )
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SIZE_INSUFFICIENT,
        lambda: L.dropout_forward(h, desc, d, x, d, torch.empty_like(x), small, 16),
        "dropout_forward",
        "reserve_space",
        "below the 32 bytes needed",
    )
    expect_error(
        BadParamError,
        Status.BAD_PARAM_NULL_POINTER,
        lambda: L.dropout_backward(h, desc, d, x, d, torch.empty_like(x), None, 32),
        "dropout_backward",
        "reserve_space",
        "is NULL",
    )
    fresh = L.create_dropout_descriptor()
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        lambda: L.dropout_forward(
            h, fresh, d, x, d, torch.empty_like(x), torch.empty(32, dtype=torch.uint8), 32
        ),
        "dropout_forward",
        "never set",
    )
    d2 = L.create_tensor_descriptor()
    L.set_tensor_4d_descriptor(d2, L.TensorFormat.NCHW, L.DataType.FLOAT, 2, 3, 4, 6)
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        lambda: L.dropout_forward(
            h, desc, d, x, d2, torch.empty(2, 3, 4, 6), torch.empty(32, dtype=torch.uint8), 32
        ),
        "dropout_forward",
        "must equal [2, 3, 4, 5]",
    )


def test_grouped_and_per_lane_streams_agree(rng):
    """Row-major data shares one Philox evaluation per four lanes; other layouts select
    their word per lane: the same mask either way, odd sizes and a ragged last group."""
    x = rng.rand((3, 7, 5))
    a = _run(*_fwd(x, 0.5, 31, 2, torch.uint8))[1]
    b = _run(*_fwd(x.transpose(0, 2).contiguous().transpose(0, 2), 0.5, 31, 2, torch.uint8))[1]
    assert torch.equal(a.contiguous(), b.contiguous())
    assert np.array_equal(a.numpy(), ref.mask(31, 2, (3, 7, 5), 0.5).astype(np.uint8))
