"""Softmax and log-softmax along any axis, forward and backward: the float64 reference
against PyTorch; the softmax engine (its three kernels: whole rows in registers, two loops
over each row in one program, two passes with an online maximum) against the reference
through the interpreter, on odd, size-one and empty dims, non-packed strides and every
floating type; properties (rows sum to one, shift invariance, extreme inputs stay
finite); each rule with its error."""

import pytest
import torch
from _util import TORCH_TO_DT, assert_close, check_engine, expect_error, repro, run_reference

import opendnn.frontend as cudnn
from opendnn.engines.base import EngineConfig, Target
from opendnn.engines.softmax.engine import SoftmaxEngine
from opendnn.errors import BadParamError, Status

ID = SoftmaxEngine.id
TWO = dict(PASSES=2, BLOCK_L=16, BLOCK_ROWS=1, num_warps=4)  # + SPLIT


def _torch_fwd(x, axis, log):
    return torch.log_softmax(x, axis) if log else torch.softmax(x, axis)


def _fwd_graph(x, axis, log, out_dtype=None):
    g = cudnn.pygraph()
    tx = g.tensor(list(x.shape), list(x.stride()), TORCH_TO_DT[x.dtype])
    y = g.softmax(tx, axis=axis, log=log)
    y.set_output(True)
    if out_dtype is not None:
        y.set_data_type(TORCH_TO_DT[out_dtype])
    return g, {tx: x}, y


def _bwd_graph(y, dy, axis, log):
    g = cudnn.pygraph()
    ty = g.tensor(list(y.shape), list(y.stride()), TORCH_TO_DT[y.dtype])
    tdy = g.tensor(list(dy.shape), list(dy.stride()), TORCH_TO_DT[dy.dtype])
    dx = g.softmax_backward(tdy, ty, axis=axis, log=log)
    dx.set_output(True)
    return g, {ty: y, tdy: dy}, dx


# ---- the reference against PyTorch ------------------------------------------------------------
@pytest.mark.parametrize("axis", [-1, 0, 1])
@pytest.mark.parametrize("log", [False, True])
def test_reference_matches_pytorch(rng, axis, log):
    x = rng.rand((3, 4, 5), torch.float64)
    g, feeds, y = _fwd_graph(x, axis, log)
    assert_close(run_reference(g, feeds, [y])[y], _torch_fwd(x, axis, log), torch.float64, 5)
    xr = x.clone().requires_grad_(True)
    out = _torch_fwd(xr, axis, log)
    dy = rng.rand(x.shape, torch.float64)
    out.backward(dy)
    g, feeds, dx = _bwd_graph(out.detach(), dy, axis, log)
    assert_close(run_reference(g, feeds, [dx])[dx], xr.grad, torch.float64, 5)


# ---- the engine against the reference ---------------------------------------------------------
CASES = [  # (shape, axis, knobs: None = the engine's own choice)
    ((4, 7), -1, None),
    ((3, 5, 1), 1, None),  # a middle axis, size-one trailing dim
    ((2, 1, 9), -1, None),
    ((5, 3), 0, None),  # the first axis: strided rows
    ((1, 1), -1, None),  # rows of length one
    ((3, 70), -1, dict(TWO, SPLIT=1)),  # two passes, one chunk per row
    ((2, 3, 53), -1, dict(TWO, SPLIT=3)),  # three uneven chunks
    ((2, 70), -1, dict(TWO, SPLIT=4)),  # chunks of 32: the last is all padding
    ((6, 4), 0, dict(TWO, BLOCK_L=2, SPLIT=2)),
    ((3, 70), -1, dict(TWO, PASSES=3, SPLIT=1)),  # both loops in one program per row
    ((4, 5, 3), 1, dict(TWO, PASSES=3, SPLIT=1, BLOCK_L=2)),
    ((7, 70), -1, dict(TWO, PASSES=3, SPLIT=1, PROGRAMS=3)),  # 3 programs walk 7 rows
    ((4, 5, 3), 1, dict(TWO, PASSES=3, SPLIT=1, BLOCK_L=2, PROGRAMS=2)),
    # one read (PASSES=4): on the CPU one chunk per row (chunks of a row wait for each
    # other: GPU only, test_gpu_softmax.py); 2 persistent programs, tagged partials
    ((5, 70), -1, dict(TWO, PASSES=4, BLOCK_L=128, SPLIT=1, PROGRAMS=2, PREFETCH=1)),
    ((4, 5, 3), 1, dict(TWO, PASSES=4, BLOCK_L=8, SPLIT=1, PROGRAMS=2, PREFETCH=0)),
]


@pytest.mark.parametrize("case", CASES, ids=[f"c{i}" for i in range(len(CASES))])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("log", [False, True])
def test_forward_against_reference(rng, case, dtype, log):
    shape, axis, knobs = case
    x = rng.rand(shape, dtype, high=4.0)
    g, feeds, y = _fwd_graph(x, axis, log)
    check_engine(
        g,
        feeds,
        [y],
        ID,
        knobs,
        n=shape[axis],
        msg=repro("softmax", [shape], str(dtype), rng.seed, axis=axis, log=log),
    )


@pytest.mark.parametrize("case", CASES, ids=[f"c{i}" for i in range(len(CASES))])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("log", [False, True])
def test_backward_against_reference(rng, case, dtype, log):
    shape, axis, knobs = case
    y = _torch_fwd(rng.rand(shape, torch.float64), axis, log).to(dtype)
    dy = rng.rand(shape, dtype)
    g, feeds, dx = _bwd_graph(y, dy, axis, log)
    check_engine(
        g,
        feeds,
        [dx],
        ID,
        knobs,
        n=shape[axis],
        msg=repro("softmax_backward", [shape], str(dtype), rng.seed, axis=axis, log=log),
    )


@pytest.mark.parametrize("knobs", [None, dict(TWO, SPLIT=2)])
def test_non_packed_strides_and_an_nhwc_channel_axis(rng, knobs):
    """Softmax over C of an NHWC tensor (stride 1 between rows, C elements apart), into a
    float32 output of another layout; and a transposed (column-major) input."""
    x = rng.rand((2, 20, 3, 5), torch.bfloat16).to(memory_format=torch.channels_last)
    g, feeds, y = _fwd_graph(x, 1, False, torch.float32)
    y.set_stride([300, 15, 5, 1])
    check_engine(g, feeds, [y], ID, knobs, n=20)
    xt = rng.rand((19, 6), torch.float32).t()
    g, feeds, y = _fwd_graph(xt, -1, True)
    check_engine(g, feeds, [y], ID, knobs, n=19)


@pytest.mark.parametrize("shape,axis", [((0, 5), -1), ((4, 0), -1), ((3, 0, 2), 0)])
def test_empty_tensors_run_and_write_nothing(rng, shape, axis):
    x = torch.empty(shape)
    g, feeds, y = _fwd_graph(x, axis, False)
    out = check_engine(g, feeds, [y], ID, None)
    assert out[y].numel() == 0


# ---- properties ------------------------------------------------------------------------------
def _engine_softmax(x, axis=-1, log=False, knobs=None):
    g, feeds, y = _fwd_graph(x, axis, log)
    return check_engine(g, feeds, [y], ID, knobs, n=x.shape[axis])[y]


@pytest.mark.parametrize("knobs", [None, dict(TWO, SPLIT=3), dict(TWO, PASSES=3, SPLIT=1)])
def test_rows_sum_to_one_and_shifts_change_nothing(rng, knobs):
    x = rng.rand((5, 40), torch.float32, high=8.0)
    y = _engine_softmax(x, knobs=knobs)
    assert_close(y.double().sum(-1), torch.ones(5, dtype=torch.float64), torch.float32, 40)
    shifted = _engine_softmax(x + 1000.0, knobs=knobs)
    assert_close(shifted, y, torch.float32, 40)


@pytest.mark.parametrize("knobs", [None, dict(TWO, SPLIT=2), dict(TWO, PASSES=3, SPLIT=1)])
def test_log_softmax_of_extreme_inputs_stays_finite(rng, knobs):
    x = rng.rand((3, 33), torch.float32) * 3e4  # exp overflows float32 without the max
    y = _engine_softmax(x, log=True, knobs=knobs)
    assert bool(torch.isfinite(y).all())
    assert_close(y, torch.log_softmax(x.double(), -1), torch.float32, 33)


# ---- bad input -------------------------------------------------------------------------------
def test_axis_out_of_range_is_rejected():
    g = cudnn.pygraph()
    x = g.tensor([2, 3], [3, 1], cudnn.data_type.FLOAT, name="x")
    g.softmax(x, axis=2, name="sm")
    expect_error(
        BadParamError,
        Status.BAD_PARAM_OUT_OF_BOUND,
        g.validate,
        "softmax 'sm'",
        "x",
        "axis 2 is out of range",
    )


def test_backward_shape_mismatch_is_rejected():
    g = cudnn.pygraph()
    y = g.tensor([2, 3], [3, 1], cudnn.data_type.FLOAT, name="y")
    dy = g.tensor([2, 4], [4, 1], cudnn.data_type.FLOAT, name="dy")
    g.softmax_backward(dy, y, name="smb")
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        g.validate,
        "smb",
        "dy",
        "DY dims [2, 4] must equal [2, 3]",
    )


def test_integer_input_is_rejected():
    g = cudnn.pygraph()
    x = g.tensor([2, 3], [3, 1], cudnn.data_type.INT32, name="xi")
    g.softmax(x, name="smi").set_data_type(cudnn.data_type.FLOAT)
    expect_error(
        BadParamError,
        Status.NOT_SUPPORTED_DATA_TYPE,
        g.validate,
        "smi",
        "xi",
        "not a floating type",
    )


@pytest.mark.parametrize(
    "dtype,knobs,reason",
    [
        (torch.float64, None, "float64 runs on the reference"),
        (
            torch.float32,
            dict(PASSES=1, BLOCK_L=4, BLOCK_ROWS=1, SPLIT=1, num_warps=4),
            "BLOCK_L=4 < row length 9",
        ),
        (torch.float32, dict(TWO, SPLIT=2, BLOCK_ROWS=2), "two passes: BLOCK_ROWS=1"),
        (torch.float32, dict(TWO, SPLIT=2, BLOCK_L=16), "SPLIT at most the row's tiles (1)"),
        (torch.float32, dict(TWO, PASSES=3, SPLIT=2), "two loops: BLOCK_ROWS=1, SPLIT=1"),
        (
            torch.float32,
            dict(TWO, SPLIT=1, PROGRAMS=4),
            "PROGRAMS (persistent programs) is a two-loop",
        ),
    ],
)
def test_engine_declines_with_a_reason(dtype, knobs, reason):
    g, _, _ = _fwd_graph(torch.empty(3, 9, dtype=dtype), -1, False)
    g.validate()
    e = SoftmaxEngine()
    sup = e.check_support(g.op_graph, Target())
    if sup.ok:
        sup = e.check_config(g.op_graph, EngineConfig.make(e, **knobs), Target())
    assert not sup.ok and reason in sup.reason


H100 = Target(device="cuda", name="H100", capability=(9, 0), num_sms=132, bandwidth=3.0e12)
COOP = dict(PASSES=4, BLOCK_L=16384, BLOCK_ROWS=1, SPLIT=16, num_warps=16, PROGRAMS=256)


@pytest.mark.parametrize(
    "target,knobs,reason",
    [
        (Target(), COOP, "SPLIT > 1 needs a GPU"),
        (Target(), dict(COOP, PASSES=3, SPLIT=1, PROGRAMS=1, PREFETCH=1), "PREFETCH is a one-read"),
        (H100, dict(COOP, SPLIT=8), "SPLIT must be the row's chunks (16)"),
        (H100, dict(COOP, PROGRAMS=264), "a multiple of SPLIT=16"),
        (H100, dict(COOP, PROGRAMS=272), "at most 264"),
        (H100, dict(COOP, BLOCK_ROWS=2), "BLOCK_ROWS=1 and BLOCK_L <= 16384"),
    ],
)
def test_one_read_config_rules(target, knobs, reason):
    """PASSES=4 (one read; a row's programs wait for each other) runs only where every
    program of a row is resident at once: a GPU, a persistent grid of at most two
    programs per SM. Its numbers are checked on the GPU (test_gpu_softmax.py)."""
    g, _, _ = _fwd_graph(torch.empty(4, 262144), -1, False)
    g.validate()
    e = SoftmaxEngine()
    sup = e.check_config(g.op_graph, EngineConfig.make(e, **knobs), target)
    assert not sup.ok and reason in sup.reason


def test_heuristics_take_one_read_for_the_longest_rows_on_a_gpu():
    e = SoftmaxEngine()
    for shape, passes in (((256, 262144), 4), ((1024, 65536), 3)):
        g, _, _ = _fwd_graph(torch.empty(shape, dtype=torch.bfloat16), -1, False)
        g.validate()
        first = e.configs(g.op_graph, H100)[0].knob_dict
        assert first["PASSES"] == passes, (shape, first)
        assert e.check_config(g.op_graph, e.configs(g.op_graph, H100)[0], H100).ok
    y = torch.empty(256, 262144, dtype=torch.bfloat16)
    for log in (False, True):  # the backward too (log: one program per SM)
        g, _, _ = _bwd_graph(y, y, -1, log)
        g.validate()
        first = e.configs(g.op_graph, H100)[0]
        assert first.knob_dict["PASSES"] == 4, (log, first)
        assert e.check_config(g.op_graph, first, H100).ok
