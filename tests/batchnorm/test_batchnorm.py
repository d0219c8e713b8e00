"""Batch norm, forward (training, inference) and backward: the float64 reference against
PyTorch (F.batch_norm, autograd); the batch-norm engine against the reference through the
interpreter on NCHW and NHWC, odd channel and spatial sizes, per-activation statistics,
non-packed strides, every floating type, with and without running statistics and with a
fused residual add / relu; the running statistics against PyTorch's after ten steps;
each rule with its error."""

import pytest
import torch
import torch.nn.functional as F
from _util import (
    TORCH_TO_DT,
    assert_close,
    check_engine,
    expect_error,
    heuristic_knobs,
    nhwc,
    repro,
    run_reference,
)

import opendnn.frontend as cudnn
from opendnn.engines.base import EngineConfig, Target
from opendnn.engines.batchnorm.engine import BatchNormEngine
from opendnn.errors import BadParamError, Status

ID = BatchNormEngine.id
REFERENCE_ID = 0  # the float64 reference engine
EPS, MOM = 1e-5, 0.1


def _stats(rng, c_shape, dtype=torch.float32):
    return (
        rng.rand(c_shape, dtype),
        rng.rand(c_shape, dtype),  # scale, bias
        rng.rand(c_shape, dtype),
        rng.rand(c_shape, dtype, positive=True),
    )  # mean, var


def _t(g, t):
    """A graph tensor with t's dims, strides and type (never pass-by-value)."""
    return g.tensor(list(t.shape), list(t.stride()), TORCH_TO_DT[t.dtype])


def _training(
    x, scale, bias, rm=None, rv=None, eps=EPS, mom=MOM, epilogue="", z=None, stat_dtype=None
):
    g = cudnn.pygraph()
    tx, ts, tb = _t(g, x), _t(g, scale), _t(g, bias)
    feeds = {tx: x, ts: scale, tb: bias}
    trm = trv = None
    if rm is not None:
        trm, trv = _t(g, rm), _t(g, rv)
        feeds.update({trm: rm, trv: rv})
    y, mean, inv, nrm, nrv = g.batchnorm(tx, ts, tb, trm, trv, eps, mom if rm is not None else None)
    outs = [t for t in (mean, inv, nrm, nrv) if t is not None]
    for t in outs:
        t.set_output(True)
        if stat_dtype is not None:
            t.set_data_type(TORCH_TO_DT[stat_dtype])
    y = _epilogue(g, y, epilogue, z, feeds)
    y.set_output(True)
    return g, feeds, [y] + outs


def _epilogue(g, y, epilogue, z, feeds):
    if "add" in epilogue:
        tz = _t(g, z)
        feeds[tz] = z
        y = g.add(y, tz)
    if "relu" in epilogue:
        y = g.relu(y)
    return y


def _inference(x, mean, inv, scale, bias, epilogue="", z=None):
    g = cudnn.pygraph()
    tx, tm, tv, ts, tb = (_t(g, t) for t in (x, mean, inv, scale, bias))
    feeds = {tx: x, tm: mean, tv: inv, ts: scale, tb: bias}
    y = _epilogue(g, g.batchnorm_inference(tx, tm, tv, ts, tb), epilogue, z, feeds)
    y.set_output(True)
    return g, feeds, [y]


def _backward(dy, x, scale, mean, inv):
    g = cudnn.pygraph()
    tdy, tx, ts, tm, tv = (_t(g, t) for t in (dy, x, scale, mean, inv))
    outs = g.batchnorm_backward(tdy, tx, ts, tm, tv)
    for t in outs:
        t.set_output(True)
    return g, {tdy: dy, tx: x, ts: scale, tm: mean, tv: inv}, outs


def _cshape(x, per_activation=False):
    return (1,) + tuple(x.shape[1:]) if per_activation else (1, x.shape[1]) + (1,) * (x.dim() - 2)


# ---- the reference against PyTorch ------------------------------------------------------------
@pytest.mark.parametrize("shape", [(4, 3, 5, 2), (3, 6), (2, 3, 7)])
def test_reference_training_matches_pytorch(rng, shape):
    x = rng.rand(shape, torch.float64) * 3 + 1
    scale, bias, rm, rv = _stats(rng, _cshape(x), torch.float64)
    g, feeds, (y, mean, inv, nrm, nrv) = _training(x, scale, bias, rm, rv)
    out = run_reference(g, feeds, [y, mean, inv, nrm, nrv])
    trm, trv = rm.clone().reshape(-1), rv.clone().reshape(-1)
    want = F.batch_norm(x, trm, trv, scale.reshape(-1), bias.reshape(-1), True, MOM, EPS)
    axes = [0] + list(range(2, x.dim()))
    assert_close(out[y], want, torch.float64, 5)
    assert_close(out[mean].reshape(-1), x.mean(axes), torch.float64, 5)
    assert_close(
        out[inv].reshape(-1), 1 / torch.sqrt(x.var(axes, unbiased=False) + EPS), torch.float64, 5
    )
    assert_close(out[nrm].reshape(-1), trm, torch.float64, 5)
    assert_close(out[nrv].reshape(-1), trv, torch.float64, 5)


def test_reference_inference_and_backward_match_pytorch(rng):
    x = rng.rand((3, 4, 3, 5), torch.float64)
    scale, bias, rm, rv = _stats(rng, _cshape(x), torch.float64)
    inv = 1 / torch.sqrt(rv + EPS)
    g, feeds, (y,) = _inference(x, rm, inv, scale, bias)
    want = F.batch_norm(
        x, rm.reshape(-1), rv.reshape(-1), scale.reshape(-1), bias.reshape(-1), False, MOM, EPS
    )
    assert_close(run_reference(g, feeds, [y])[y], want, torch.float64, 5)
    xr, wr, br = (
        t.clone().reshape(-1 if t is not x else x.shape).requires_grad_(True)
        for t in (x, scale, bias)
    )
    out = F.batch_norm(xr, None, None, wr, br, True, MOM, EPS)
    dy = rng.rand(x.shape, torch.float64)
    out.backward(dy)
    mean = x.mean((0, 2, 3), keepdim=True)
    inv = 1 / torch.sqrt(x.var((0, 2, 3), unbiased=False, keepdim=True) + EPS)
    g, feeds, (dx, ds, db) = _backward(dy, x, scale, mean, inv)
    got = run_reference(g, feeds, [dx, ds, db])
    assert_close(got[dx], xr.grad, torch.float64, 60)
    assert_close(got[ds].reshape(-1), wr.grad, torch.float64, 60)
    assert_close(got[db].reshape(-1), br.grad, torch.float64, 60)


def test_reference_per_activation_is_batch_norm_over_n(rng):
    x = rng.rand((5, 2, 3, 2), torch.float64)
    scale, bias, rm, rv = _stats(rng, _cshape(x, True), torch.float64)
    g, feeds, (y, mean, inv, nrm, nrv) = _training(x, scale, bias, rm, rv)
    out = run_reference(g, feeds, [y, mean, inv, nrm, nrv])
    flat = x.reshape(5, -1)
    trm, trv = rm.clone().reshape(-1), rv.clone().reshape(-1)
    want = F.batch_norm(flat, trm, trv, scale.reshape(-1), bias.reshape(-1), True, MOM, EPS)
    assert_close(out[y], want.reshape(x.shape), torch.float64, 5)
    assert_close(out[nrv].reshape(-1), trv, torch.float64, 5)


# ---- the engine against the reference ---------------------------------------------------------
CASES = [  # (shape, layout, per_activation, knobs: None = the engine's own choice)
    ((3, 5, 4, 3), "nchw", False, None),
    ((3, 5, 4, 3), "nhwc", False, None),
    (
        (2, 7, 3, 5),
        "nhwc",
        False,
        dict(BLOCK_K=4, BLOCK_R=8, SPLIT=3, APPLY_R=16, num_warps=4),
    ),  # masked tiles, three slices
    (
        (3, 3, 5, 2),
        "nchw",
        False,
        dict(BLOCK_K=2, BLOCK_R=4, SPLIT=2, APPLY_R=8, REUSE=1, num_warps=4),
    ),  # the second pass last-first
    ((5, 3, 1, 1), "nchw", False, None),  # no spatial dims to speak of
    ((4, 6), "nchw", False, None),  # BatchNorm1d [N, C]
    ((3, 2, 3, 2), "nchw", True, None),  # per activation
    ((3, 2, 3, 2), "nhwc", True, None),  # per activation, strided kept
    ((2, 3, 4, 5), "strided", False, None),  # every other W element
]
IDS = [f"c{i}" for i in range(len(CASES))]


def _input(rng, shape, layout, dtype, shift=0.0):
    x = rng.rand(shape, torch.float32) * 2 + shift
    if layout == "nhwc":
        x = nhwc(x)
    elif layout == "strided":
        big = torch.full(shape[:-1] + (2 * shape[-1],), float("nan"))
        big[..., ::2] = x
        x = big[..., ::2]
    return x.to(dtype)


@pytest.mark.parametrize("case", CASES, ids=IDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_training_against_reference(rng, case, dtype):
    shape, layout, per_act, knobs = case
    x = _input(rng, shape, layout, dtype, shift=3.0)  # |mean| > std: the shift matters
    scale, bias, rm, rv = _stats(rng, _cshape(x, per_act))
    g, feeds, outs = _training(x, scale, bias, rm, rv)
    n = x.numel() // scale.numel()
    check_engine(
        g,
        feeds,
        outs,
        ID,
        knobs,
        n=n,
        msg=repro("batchnorm", [shape], str(dtype), rng.seed, layout=layout),
    )


@pytest.mark.parametrize("case", CASES, ids=IDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_inference_and_backward_against_reference(rng, case, dtype):
    shape, layout, per_act, knobs = case
    x = _input(rng, shape, layout, dtype)
    scale, bias, mean, var = _stats(rng, _cshape(x, per_act))
    inv = 1 / torch.sqrt(var + EPS)
    msg = repro("batchnorm_inference", [shape], str(dtype), rng.seed, layout=layout)
    check_engine(*_inference(x, mean, inv, scale, bias), ID, knobs, msg=msg)
    dy = _input(rng, shape, layout, dtype)
    n = x.numel() // scale.numel()
    check_engine(
        *_backward(dy, x, scale, mean, inv),
        ID,
        knobs,
        n=n,
        msg=msg.replace("inference", "backward"),
    )


@pytest.mark.parametrize("epilogue", ["relu", "add", "add+relu"])
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_fused_add_and_relu(rng, epilogue, layout):
    x = _input(rng, (2, 5, 3, 3), layout, torch.bfloat16)
    z = _input(rng, (2, 5, 3, 3), layout, torch.bfloat16)
    scale, bias, mean, var = _stats(rng, _cshape(x))
    g, feeds, outs = _training(x, scale, bias, epilogue=epilogue, z=z)
    out = check_engine(g, feeds, outs, ID, None, n=18)
    assert g.get_plan_name_at_index(1).startswith("batchnorm#30")
    if "relu" in epilogue:
        assert bool((out[outs[0]] >= 0).all())
    check_engine(
        *_inference(x, mean, 1 / torch.sqrt(var + EPS), scale, bias, epilogue, z), ID, None
    )


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_backward_through_a_fused_relu_backward(rng, layout):
    """dReLU + dBN: DY = relu_backward(loss, y) read in both passes, never stored."""
    x = _input(rng, (3, 5, 3, 2), layout, torch.bfloat16)
    loss, y = (
        _input(rng, x.shape, layout, torch.bfloat16),
        _input(rng, x.shape, layout, torch.bfloat16),
    )
    scale, _, mean, var = _stats(rng, _cshape(x))
    inv = 1 / torch.sqrt(var + EPS)
    g = cudnn.pygraph()
    tl_, ty, tx, ts, tm, tv = (_t(g, t) for t in (loss, y, x, scale, mean, inv))
    outs = g.batchnorm_backward(g.relu_backward(tl_, ty), tx, ts, tm, tv)
    for t in outs:
        t.set_output(True)
    check_engine(g, {tl_: loss, ty: y, tx: x, ts: scale, tm: mean, tv: inv}, outs, ID, None, n=18)
    assert g.get_plan_name_at_index(1).startswith("batchnorm#30")


def test_fused_relu_keeps_the_batch_norm_output_when_asked(rng):
    x = _input(rng, (3, 4, 2, 2), "nhwc", torch.float32)
    scale, bias, _, _ = _stats(rng, _cshape(x))
    g = cudnn.pygraph()
    tx, ts, tb = _t(g, x), _t(g, scale), _t(g, bias)
    y, mean, inv, _, _ = g.batchnorm(tx, ts, tb, None, None, EPS, None)
    r = g.relu(y)
    for t in (y, mean, inv, r):
        t.set_output(True)
    check_engine(g, {tx: x, ts: scale, tb: bias}, [y, mean, inv, r], ID, None, n=12)


def test_statistics_in_float32_for_half_data_and_python_scalars(rng):
    """bf16 data, float32 mean / inv_var outputs, epsilon and momentum as a CPU tensor."""
    x = _input(rng, (4, 3, 2, 3), "nhwc", torch.bfloat16)
    scale, bias, rm, rv = _stats(rng, _cshape(x))
    g, feeds, outs = _training(
        x,
        scale,
        bias,
        rm,
        rv,
        eps=torch.tensor(1e-3),
        mom=torch.tensor(0.25, dtype=torch.float64),
        stat_dtype=torch.float32,
    )
    check_engine(g, feeds, outs, ID, None, n=24)


def test_epsilon_as_a_double_scalar_tensor_bound_at_execution(rng):
    """A pass-by-value epsilon of any type, its value given in the variant pack."""
    x = _input(rng, (3, 4, 2, 2), "nhwc", torch.float16)
    scale, bias, _, _ = _stats(rng, _cshape(x))
    g = cudnn.pygraph()
    tx, ts, tb = _t(g, x), _t(g, scale), _t(g, bias)
    eps = g.tensor([1, 1, 1, 1], [1, 1, 1, 1], cudnn.data_type.DOUBLE, is_pass_by_value=True)
    outs = [t for t in g.batchnorm(tx, ts, tb, None, None, eps, None) if t is not None]
    for t in outs:
        t.set_output(True)
    check_engine(g, {tx: x, ts: scale, tb: bias, eps: 0.5}, outs, ID, None, n=12)


def test_count_one_runs_inference_and_backward(rng):
    """N = 1 with 1x1 spatial: one value per channel. Inference and backward are defined
    (dx = 0: x equals its mean); training raises (see test_training_with_one_value...)."""
    x = _input(rng, (1, 6, 1, 1), "nchw", torch.float32)
    scale, bias, mean, var = _stats(rng, _cshape(x))
    check_engine(*_inference(x, mean, 1 / torch.sqrt(var + EPS), scale, bias), ID, None)
    g, feeds, outs = _backward(
        _input(rng, x.shape, "nchw", torch.float32), x, scale, x.clone(), 1 / torch.sqrt(var + EPS)
    )
    out = check_engine(g, feeds, outs, ID, None)
    assert bool((out[outs[0]] == 0).all())


def test_empty_batch_runs_inference_and_backward(rng):
    x = torch.empty(0, 3, 2, 2)
    scale, bias, mean, var = _stats(rng, _cshape(x))
    check_engine(*_inference(x, mean, var, scale, bias), ID, None)
    g, feeds, outs = _backward(torch.empty_like(x), x, scale, mean, var)
    out = check_engine(g, feeds, outs, ID, None)
    assert bool((out[outs[1]] == 0).all()) and bool((out[outs[2]] == 0).all())


# ---- properties ------------------------------------------------------------------------------
def _running_graph(rng):
    """A training batch norm with running statistics (NHWC 4x3x3x2 float32): x, scale,
    bias, the running mean (zeros) and variance (ones), the graph, its input tensors [X,
    SCALE, BIAS, PREV_RUNNING_MEAN, PREV_RUNNING_VAR] and its five outputs (all real)."""
    x = _input(rng, (4, 3, 3, 2), "nhwc", torch.float32)
    scale, bias, _, _ = _stats(rng, _cshape(x))
    rm, rv = torch.zeros(1, 3, 1, 1), torch.ones(1, 3, 1, 1)
    g = cudnn.pygraph()
    ins = [_t(g, t) for t in (x, scale, bias, rm, rv)]
    outs = g.batchnorm(*ins, EPS, MOM)
    for t in outs:
        t.set_output(True)
    return x, scale, bias, rm, rv, g, ins, outs


def test_running_statistics_match_pytorch_after_ten_steps(rng):
    x0, scale, bias, rm, rv, g, (tx, ts, tb, trm, trv), outs = _running_graph(rng)
    g.validate()
    g.create_execution_plan(ID, heuristic_knobs(g, ID))
    ws = torch.empty(g.get_workspace_size(), dtype=torch.uint8)
    want_m, want_v = torch.zeros(3), torch.ones(3)
    for step in range(10):
        x = _input(rng, x0.shape, "nhwc", torch.float32, shift=step * 0.5)
        bufs = {
            t: torch.full(t.get_dim(), float("nan")).as_strided(t.get_dim(), t.get_stride())
            for t in outs
        }
        g.execute({tx: x, ts: scale, tb: bias, trm: rm, trv: rv, **bufs}, ws)
        rm, rv = bufs[outs[3]].clone(), bufs[outs[4]].clone()
        F.batch_norm(x, want_m, want_v, None, None, True, MOM, EPS)
    assert_close(rm.reshape(-1), want_m, torch.float32, 24)
    assert_close(rv.reshape(-1), want_v, torch.float32, 24)


# ---- bad input -------------------------------------------------------------------------------
def _graph(x_dims, s_dims, **kw):
    g = cudnn.pygraph()
    x = g.tensor(x_dims, None, cudnn.data_type.FLOAT, name="x")
    s = g.tensor(s_dims, None, cudnn.data_type.FLOAT, name="scale")
    b = g.tensor(s_dims, None, cudnn.data_type.FLOAT, name="bias")
    return g, x, s, b


def test_training_with_one_value_per_channel_is_rejected():
    g, x, s, b = _graph([1, 4, 1, 1], [1, 4, 1, 1])
    g.batchnorm(x, s, b, None, None, EPS, None, name="bn")
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        g.validate,
        "batchnorm 'bn'",
        "x",
        "more than one value per statistic",
    )


@pytest.mark.parametrize(
    "s_dims,role", [([1, 3, 1, 1], "SCALE"), ([4, 1, 1, 1], "SCALE"), ([1, 4, 5, 1], "SCALE")]
)
def test_statistics_dims_must_match_the_channels(s_dims, role):
    g, x, s, b = _graph([2, 4, 5, 6], s_dims)
    g.batchnorm(x, s, b, None, None, EPS, None, name="bn")
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        g.validate,
        "bn",
        "scale",
        f"{role} dims {s_dims} must be [1, 4, 1, 1]",
    )


def test_mismatched_bias_and_grad_dims_are_rejected():
    g, x, s, _ = _graph([2, 4, 5, 6], [1, 4, 1, 1])
    b = g.tensor([1, 4, 5, 6], None, cudnn.data_type.FLOAT, name="b")
    g.batchnorm(x, s, b, None, None, EPS, None, name="bn")
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        g.validate,
        "bn",
        "b",
        "BIAS dims [1, 4, 5, 6] must equal SCALE dims [1, 4, 1, 1]",
    )
    g, x, s, _ = _graph([2, 4, 5, 6], [1, 4, 1, 1])
    dy = g.tensor([2, 4, 5, 5], None, cudnn.data_type.FLOAT, name="dy")
    g.batchnorm_backward(dy, x, s, s, s, name="bnb")
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        g.validate,
        "bnb",
        "dy",
        "DY dims [2, 4, 5, 5] must equal X dims",
    )


def test_running_stats_come_in_pairs_with_a_momentum():
    g, x, s, b = _graph([2, 4, 5, 6], [1, 4, 1, 1])
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        lambda: g.batchnorm(x, s, b, s, None, EPS, MOM, name="bn"),
        "bn",
        "in_running_mean and in_running_var",
    )
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        lambda: g.batchnorm(x, s, b, s, b, EPS, None, name="bn"),
        "bn",
        "momentum",
    )
    expect_error(
        BadParamError,
        Status.NOT_SUPPORTED,
        lambda: g.batchnorm(x, s, b, s, b, EPS, MOM, peer_stats=[x], name="bn"),
        "bn",
        "peer_stats",
    )


def test_epsilon_below_the_minimum_is_rejected_at_execution(rng):
    x = _input(rng, (3, 2, 2, 2), "nchw", torch.float32)
    scale, bias, _, _ = _stats(rng, _cshape(x))
    g, feeds, outs = _training(x, scale, bias, eps=-1e-3)
    g.validate()
    for engine in (ID, 0):
        g.create_execution_plan(engine, heuristic_knobs(g, engine))
        bufs = {t: torch.empty(t.get_dim()) for t in outs}
        expect_error(
            BadParamError,
            Status.BAD_PARAM,
            lambda: g.execute_plan_at_index(
                {**feeds, **bufs},
                torch.empty(g.get_workspace_size_plan_at_index(0), dtype=torch.uint8),
                0,
            ),
            "batchnorm",
            "EPSILON",
            "below the minimum 0.0",
        )
        g._plans.clear()


def test_epsilon_must_be_a_scalar():
    g, x, s, b = _graph([2, 4, 5, 6], [1, 4, 1, 1])
    expect_error(
        BadParamError,
        Status.BAD_PARAM_ATTRIBUTE_TYPE,
        lambda: g.batchnorm(x, s, b, None, None, torch.ones(2), None, name="bn"),
        "bn",
        "epsilon must be",
    )


@pytest.mark.parametrize(
    "build,reason",
    [
        (lambda g, y, z: g.sigmoid(y), "fuses only add (a residual) and relu"),
        (lambda g, y, z: g.add(g.relu(y), z), "add then relu"),
    ],
)
def test_engine_declines_other_epilogues_with_a_reason(build, reason):
    g, x, s, b = _graph([2, 4, 5, 6], [1, 4, 1, 1])
    z = g.tensor([2, 4, 5, 6], None, cudnn.data_type.FLOAT, name="z")
    y = g.batchnorm_inference(x, s, s, s, b)
    build(g, y, z).set_output(True)
    g.validate()
    sup = BatchNormEngine().check_support(g.op_graph, Target())
    assert not sup.ok and reason in sup.reason


def test_engine_declines_float64_and_oversized_tiles():
    g, x, s, b = _graph([2, 4, 5, 6], [1, 4, 1, 1])
    g.batchnorm_inference(x, s, s, s, b).set_output(True)
    g.validate()
    e = BatchNormEngine()
    sup = e.check_config(
        g.op_graph,
        EngineConfig.make(e, BLOCK_K=256, BLOCK_R=128, SPLIT=1, APPLY_R=64, num_warps=4),
        Target(),
    )
    assert not sup.ok and "at most 16384" in sup.reason
    g2 = cudnn.pygraph()
    xd = g2.tensor([2, 4, 5, 6], None, cudnn.data_type.DOUBLE)
    sd = g2.tensor([1, 4, 1, 1], None, cudnn.data_type.DOUBLE)
    g2.batchnorm_inference(xd, sd, sd, sd, sd).set_output(True)
    g2.validate()
    sup = e.check_support(g2.op_graph, Target())
    assert not sup.ok and "float64 runs on the reference" in sup.reason


@pytest.mark.parametrize("engine", [ID, REFERENCE_ID])
def test_running_statistics_in_place(rng, engine):
    """cudnn-frontend binds one buffer as in_running_mean and the next running mean (and
    likewise the variance): the update lands in that buffer, once per execute, matching
    PyTorch's after ten steps."""
    x0, scale, bias, rm, rv, g, (tx, ts, tb, trm, trv), outs = _running_graph(rng)
    g.validate()
    knobs = heuristic_knobs(g, ID) if engine == ID else {}
    g.create_execution_plan(engine, knobs)
    ws = torch.empty(g.get_workspace_size(), dtype=torch.uint8)
    want_m, want_v = torch.zeros(3), torch.ones(3)
    for step in range(10):
        x = _input(rng, x0.shape, "nhwc", torch.float32, shift=step * 0.5)
        bufs = {
            t: torch.empty_strided(t.get_dim(), t.get_stride()).fill_(float("nan"))
            for t in outs[:3]
        }
        pack = {tx: x, ts: scale, tb: bias, trm: rm, trv: rv, outs[3]: rm, outs[4]: rv}
        g.execute({**pack, **bufs}, ws)
        F.batch_norm(x, want_m, want_v, None, None, True, MOM, EPS)
    assert_close(rm.reshape(-1), want_m, torch.float32, 24)
    assert_close(rv.reshape(-1), want_v, torch.float32, 24)


def test_only_running_statistics_may_share_a_buffer(rng):
    """The in-place exception covers a running statistic's own pair, nothing else: the
    next running mean over the previous running variance is refused."""
    x, scale, bias, rm, rv, g, (tx, ts, tb, trm, trv), outs = _running_graph(rng)
    g.build([cudnn.heur_mode.A])
    bufs = {t: torch.empty_strided(t.get_dim(), t.get_stride()) for t in outs[:3]}
    pack = {tx: x, ts: scale, tb: bias, trm: rm, trv: rv, outs[3]: rv, outs[4]: rm.clone()}
    with pytest.raises(BadParamError, match="overlaps"):
        g.execute({**pack, **bufs}, torch.empty(g.get_workspace_size(), dtype=torch.uint8))


def test_running_statistics_in_place_under_benchmark_mode(rng, monkeypatch):
    """Benchmark mode times the candidates on scratch outputs wherever an output overlaps
    an input: the in-place running statistics are updated once, by the winner's run."""
    from opendnn import backends
    from opendnn.runtime import autotune

    monkeypatch.setattr(backends, "benchmark", True)
    monkeypatch.setattr(autotune, "lookup", lambda *a, **k: None)  # no earlier winner
    x, scale, bias, rm, rv, g, (tx, ts, tb, trm, trv), outs = _running_graph(rng)
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    assert g.get_execution_plan_count() > 1 and g.tunes_at_execute()
    bufs = {t: torch.empty_strided(t.get_dim(), t.get_stride()) for t in outs[:3]}
    pack = {tx: x, ts: scale, tb: bias, trm: rm, trv: rv, outs[3]: rm, outs[4]: rv}
    g.execute({**pack, **bufs}, torch.empty(1 << 20, dtype=torch.uint8))
    want_m, want_v = torch.zeros(3), torch.ones(3)
    F.batch_norm(x, want_m, want_v, None, None, True, MOM, EPS)
    assert_close(rm.reshape(-1), want_m, torch.float32, 24)
    assert_close(rv.reshape(-1), want_v, torch.float32, 24)
