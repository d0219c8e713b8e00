"""Every rule of the norm nodes with its typed error (naming the node, the tensor and the
rule), epsilon as a float, a CPU scalar tensor or a variant-pack value, and the engine's
reasons for declining."""

import dataclasses
import math

import pytest
import torch
from _norm_cases import TRAINING, backward_graph, forward_graph, param_shape, torch_stats
from _util import check_engine, expect_error, run_reference

import opendnn.frontend as cudnn
from opendnn.engines.base import EngineConfig, Target
from opendnn.engines.norm.engine import NormEngine, _coop_backward_knobs
from opendnn.errors import BadParamError, Status

FLOAT = cudnn.data_type.FLOAT


def _ln(
    x_dims=(4, 8), s_dims=(1, 8), b_dims=(1, 8), eps=1e-5, x_type=FLOAT, kind="layernorm", groups=2
):
    g = cudnn.pygraph()
    x = g.tensor(list(x_dims), None, x_type, name="x")
    s = g.tensor(list(s_dims), None, FLOAT, name="scale")
    b = g.tensor(list(b_dims), None, FLOAT, name="bias") if b_dims else None
    if kind == "groupnorm":
        outs = g.groupnorm(TRAINING, x, s, b, eps, groups=groups, name="gn")
    elif kind == "instancenorm":
        outs = g.instancenorm(TRAINING, x, s, b, eps, name="in")
    else:
        outs = g.layernorm(TRAINING, x, s, b, eps, name="ln")
    for t in outs:
        t.set_output(True)
    return g


@pytest.mark.parametrize("eps", [0.0, -1e-5, math.nan, math.inf])
def test_epsilon_must_be_finite_and_positive(eps):
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        _ln(eps=eps).validate,
        "ln",
        "epsilon",
        "must be finite and > 0",
    )


def test_epsilon_from_the_variant_pack_is_checked_at_execution(rng):
    """A pass-by-value epsilon without a build-time value: each engine checks the value
    it is given."""
    x, w, b = rng.rand((3, 5)), rng.rand((1, 5)), rng.rand((1, 5))
    g = cudnn.pygraph()
    tx, tw, tb = g.tensor_like(x), g.tensor_like(w), g.tensor_like(b)
    te = g.tensor([1, 1], [1, 1], FLOAT, is_pass_by_value=True, name="eps")
    y, _, _ = g.layernorm(TRAINING, tx, tw, tb, te, name="ln")
    y.set_output(True)
    g.validate()
    y_buf = torch.empty(3, 5)
    for engine in (NormEngine.id, 0):
        g.create_execution_plan(engine, {})
        pack = {tx: x, tw: w, tb: b, y: y_buf, te: -1.0}
        pack.update({t: torch.empty(3, 1) for t in g._nodes[0].outputs.values() if t is not y})
        expect_error(
            BadParamError, Status.BAD_PARAM, lambda: g.execute(pack, None), "ln", "epsilon -1.0"
        )
        pack[te] = 1e-3
        g.execute(pack, None)
        want = torch.nn.functional.layer_norm(x.double(), (5,), w[0].double(), b[0].double(), 1e-3)
        assert torch.allclose(y_buf.double(), want, atol=1e-5)


def test_epsilon_as_a_cpu_scalar_tensor(rng):
    x, w, b = rng.rand((3, 6)), rng.rand((1, 6)), rng.rand((1, 6))
    eps = torch.full((1, 1), 1e-2)  # cudnn-frontend's samples pass [1, 1, ...]
    g = cudnn.pygraph()
    tx, tw, tb = g.tensor_like(x), g.tensor_like(w), g.tensor_like(b)
    outs = g.layernorm(TRAINING, tx, tw, tb, g.tensor_like(eps))
    for t in outs:
        t.set_output(True)
    got = check_engine(g, {tx: x, tw: w, tb: b}, outs, NormEngine.id, None, n=6)
    want = torch.nn.functional.layer_norm(x.double(), (6,), w[0].double(), b[0].double(), 1e-2)
    assert torch.allclose(got[outs[0]].double(), want, atol=1e-5)


@pytest.mark.parametrize(
    "kw,status,names",
    [
        (dict(b_dims=(1, 7)), Status.BAD_PARAM_SHAPE_MISMATCH, ["bias", "BIAS dims [1, 7]"]),
        (dict(s_dims=(2, 8)), Status.BAD_PARAM_SHAPE_MISMATCH, ["scale", "SCALE dim 0 is 2"]),
        (dict(s_dims=(8,), b_dims=(8,)), Status.BAD_PARAM_SHAPE_MISMATCH, ["scale", "same rank"]),
        (dict(b_dims=None), Status.BAD_PARAM_NULL_POINTER, ["needs a BIAS"]),
        (
            dict(x_dims=(4, 0), s_dims=(1, 0), b_dims=(1, 0)),
            Status.BAD_PARAM_SHAPE_MISMATCH,
            ["x", "no elements"],
        ),
        (
            dict(x_type=cudnn.data_type.INT32),
            Status.NOT_SUPPORTED_DATA_TYPE,
            ["x", "not a floating type"],
        ),
        (
            dict(kind="groupnorm", x_dims=(2, 6, 3), s_dims=(1, 6, 1), b_dims=(1, 6, 1), groups=4),
            Status.BAD_PARAM,
            ["gn", "groups 4", "divide the 6 channels"],
        ),
        (
            dict(kind="groupnorm", x_dims=(2, 6, 3), s_dims=(1, 6, 1), b_dims=(1, 6, 1), groups=0),
            Status.BAD_PARAM,
            ["gn", "groups 0"],
        ),
        (
            dict(kind="instancenorm", x_dims=(2, 6, 3), s_dims=(1, 6, 3), b_dims=(1, 6, 3)),
            Status.BAD_PARAM_SHAPE_MISMATCH,
            ["in", "scale", "one value per channel"],
        ),
        (
            dict(kind="instancenorm", x_dims=(2, 6), s_dims=(1, 6), b_dims=(1, 6)),
            Status.BAD_PARAM_SHAPE_MISMATCH,
            ["in", "at least 3 dims"],
        ),
    ],
)
def test_forward_rules(kw, status, names):
    expect_error(BadParamError, status, _ln(**kw).validate, *names)


def test_epsilon_must_be_one_pass_by_value_element():
    g = cudnn.pygraph()
    x, s, b = (
        g.tensor(d, None, FLOAT, name=n)
        for d, n in (([4, 8], "x"), ([1, 8], "scale"), ([1, 8], "bias"))
    )
    e = g.tensor([2], [1], FLOAT, name="eps2")
    g.layernorm(TRAINING, x, s, b, e, name="ln")[0].set_output(True)
    expect_error(BadParamError, Status.BAD_PARAM, g.validate, "ln", "eps2", "pass-by-value")


@pytest.mark.parametrize("role", ["mean", "inv_variance"])
def test_backward_statistics_must_have_the_statistics_dims(rng, role):
    x, w = rng.rand((4, 6)), rng.rand((1, 6))
    mean, inv = (t.float() for t in torch_stats("layernorm", x, w))
    bad = rng.rand((1, 4), torch.float32)
    args = (bad, inv) if role == "mean" else (mean, bad)
    g, _, _ = backward_graph("layernorm", x, x, w, *args)
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        g.validate,
        "layernorm_backward",
        "dims [1, 4] must be [4, 1]",
    )


def test_backward_needs_the_mean_of_a_layer_norm(rng):
    g = cudnn.pygraph()
    t = g.tensor([4, 6], None, FLOAT)
    s = g.tensor([1, 6], None, FLOAT)
    v = g.tensor([4, 1], None, FLOAT)
    expect_error(
        BadParamError,
        Status.BAD_PARAM_NULL_POINTER,
        lambda: g.layernorm_backward(t, t, s, None, v, name="lnb"),
        "lnb",
        "mean",
    )


def test_inference_graph_has_no_statistics(rng):
    x, w, b = rng.rand((2, 3)), rng.rand((1, 3)), rng.rand((1, 3))
    g = cudnn.pygraph()
    y, m, v = g.layernorm(
        cudnn.norm_forward_phase.INFERENCE,
        g.tensor_like(x),
        g.tensor_like(w),
        g.tensor_like(b),
        1e-5,
    )
    assert m is None and v is None


@pytest.mark.parametrize(
    "build,reason",
    [
        (
            lambda: forward_graph(
                "layernorm", *(torch.ones(s, dtype=torch.float64) for s in ((2, 3), (1, 3), (1, 3)))
            )[0],
            "float64 runs on the reference",
        ),
    ],
)
def test_engine_declines_with_a_reason(build, reason):
    g = build()
    g.validate()
    sup = NormEngine().check_support(g.op_graph, Target())
    assert not sup.ok and reason in sup.reason


@pytest.mark.parametrize(
    "knobs,reason",
    [
        (
            dict(PATH=1, BLOCK_L=4, BLOCK_ROWS=1, SPLIT=1, PROGRAMS=1, num_warps=4),
            "BLOCK_L=4 < row length 9",
        ),
        (
            dict(PATH=2, BLOCK_L=4, BLOCK_ROWS=2, SPLIT=1, PROGRAMS=1, num_warps=4),
            "PATH=2: BLOCK_ROWS=1",
        ),
    ],
)
def test_engine_declines_configs_with_a_reason(knobs, reason):
    g, _, _ = forward_graph("layernorm", torch.ones(3, 9), torch.ones(1, 9), torch.ones(1, 9))
    g.validate()
    e = NormEngine()
    sup = e.check_config(g.op_graph, EngineConfig.make(e, **knobs), Target())
    assert not sup.ok and reason in sup.reason


H100 = Target(device="cuda", name="h100", capability=(9, 0), num_sms=132)
COOP = dict(PATH=4, BLOCK_L=8, BLOCK_ROWS=1, SPLIT=5, PROGRAMS=10, num_warps=4, PREFETCH=1)


@pytest.mark.parametrize(
    "knobs,target,reason",
    [
        (COOP, Target(), "PATH=4 with SPLIT > 1 needs a GPU"),
        (dict(COOP, SPLIT=4, PROGRAMS=8), H100, "SPLIT must be the row's chunks (5)"),
        (dict(COOP, PROGRAMS=12), H100, "PROGRAMS must be a multiple of SPLIT=5"),
        (dict(COOP, PROGRAMS=270), H100, "at most 264"),
        (dict(COOP, BLOCK_ROWS=2), H100, "PATH=4: BLOCK_ROWS=1"),
        (
            dict(PATH=1, BLOCK_L=64, BLOCK_ROWS=1, SPLIT=1, PROGRAMS=1, num_warps=4, PREFETCH=1),
            Target(),
            "PREFETCH is a knob of PATH=4 and of the backward's PATH=1",
        ),
        (dict(COOP, CHUNK=9), H100, "CHUNK=9 is a knob of PATH=4, at most BLOCK_L=8"),
        (
            dict(PATH=2, BLOCK_L=64, BLOCK_ROWS=1, SPLIT=1, PROGRAMS=1, num_warps=4, CHUNK=40),
            H100,
            "CHUNK=40 is a knob of PATH=4",
        ),
        (dict(COOP, CHUNK=6, SPLIT=5), H100, "SPLIT must be the row's chunks (7)"),
        (dict(COOP, PREFETCH=0, LAG=1), H100, "LAG=1 is a knob of the backward's PATH=4"),
    ],
)
def test_one_read_path_declines_configs_with_a_reason(knobs, target, reason):
    g, _, _ = forward_graph("layernorm", torch.ones(3, 37), torch.ones(1, 37), torch.ones(1, 37))
    g.validate()
    e = NormEngine()
    sup = e.check_config(g.op_graph, EngineConfig.make(e, **knobs), target)
    assert not sup.ok and reason in sup.reason, sup.reason


def test_lag_is_a_backward_knob_without_prefetch(rng):
    x, w = rng.rand((3, 37)), rng.rand((1, 37))
    mean, inv = (t.float() for t in torch_stats("layernorm", x, w))
    g, _, _ = backward_graph("layernorm", x, x, w, mean, inv)
    g.validate()
    e = NormEngine()
    sup = e.check_config(g.op_graph, EngineConfig.make(e, **dict(COOP, LAG=2)), H100)
    assert not sup.ok and "with PREFETCH=0 (LAG=2 loads ahead itself)" in sup.reason
    for kn in (
        dict(PATH=1, BLOCK_L=64, BLOCK_ROWS=1, SPLIT=1, PROGRAMS=1, num_warps=4, LAG=1),
        dict(PATH=2, BLOCK_L=64, BLOCK_ROWS=1, SPLIT=1, PROGRAMS=1, num_warps=4, LAG=2),
    ):
        sup = e.check_config(g.op_graph, EngineConfig.make(e, **kn), Target())
        assert not sup.ok and f"LAG={kn['LAG']} is a knob of the backward's PATH=4" in sup.reason, (
            sup.reason
        )


def test_one_read_path_takes_no_group_norm_backward(rng):
    x, w = rng.rand((2, 4, 3)), rng.rand((1, 4, 1))
    mean, inv = (t.float() for t in torch_stats("groupnorm", x, w, groups=2))
    g, _, _ = backward_graph("groupnorm", x, x, w, mean, inv, 2)
    g.validate()
    e = NormEngine()
    sup = e.check_config(g.op_graph, EngineConfig.make(e, **dict(COOP, SPLIT=1, PROGRAMS=1)), H100)
    assert not sup.ok and "backward PATH=4 takes layer / RMS norm" in sup.reason


def test_backward_group_norm_declines_the_rows_path(rng):
    x, w = rng.rand((2, 4, 3)), rng.rand((1, 4, 1))
    mean, inv = (t.float() for t in torch_stats("groupnorm", x, w, groups=2))
    g, feeds, outs = backward_graph("groupnorm", x, x, w, mean, inv, 2)
    g.validate()
    e = NormEngine()
    cfg = EngineConfig.make(e, PATH=1, BLOCK_L=8, BLOCK_ROWS=1, SPLIT=1, PROGRAMS=1, num_warps=4)
    sup = e.check_config(g.op_graph, cfg, Target())
    assert not sup.ok and "group / instance norm take PATH=2" in sup.reason
    run_reference(g, feeds, outs)  # the graph itself is fine


def test_serialize_deserialize_execute_by_uid(rng):
    """A group norm graph (its groups attribute, its float epsilon) survives the round
    trip, and the restored plan computes the same output."""
    x, w, b = rng.rand((2, 6, 5)), rng.rand((1, 6, 1)), rng.rand((1, 6, 1))
    g, feeds, outs = forward_graph("groupnorm", x, w, b, 1e-3, groups=3)
    g.build([cudnn.heur_mode.A])
    assert g.get_plan_name_at_index(0).startswith("norm#26")
    first = {t: torch.full(t.get_dim(), float("nan")) for t in outs}
    g.execute({**feeds, **first}, None)
    g2 = cudnn.pygraph().deserialize(g.serialize())
    again = {t.get_uid(): torch.full(t.get_dim(), float("nan")) for t in outs}
    g2.execute({**{t.get_uid(): v for t, v in feeds.items()}, **again}, None)
    for t in outs:
        assert torch.equal(first[t], again[t.get_uid()])


def test_prefetch_2_is_a_one_read_knob():
    x = torch.ones(3, 37)
    g, _, _ = backward_graph(
        "layernorm", x, x, torch.ones(1, 37), torch.ones(3, 1), torch.ones(3, 1)
    )
    g.validate()
    e = NormEngine()
    kn = dict(PATH=1, BLOCK_L=64, BLOCK_ROWS=1, SPLIT=1, PROGRAMS=1, num_warps=4, PREFETCH=2)
    sup = e.check_config(g.op_graph, EngineConfig.make(e, **kn), Target())
    assert (
        not sup.ok
        and "PREFETCH=2 (the next row loaded before this row's partials) is a knob of PATH=4"
        in sup.reason
    ), sup.reason


@pytest.mark.parametrize(
    "L,split,chunk,programs,prefetch,lag",
    [
        (65536, 8, 0, 128, 2, 0),  # 16 groups of 8 full chunks, the next row loaded first
        (262144, 32, 0, 128, 0, 2),  # 4 groups of 32 full chunks, the meeting a row late
        (200000, 26, 7696, 130, 1, 0),  # chunks not all full: the earlier choice
        (100000, 13, 7696, 130, 1, 0),  # equal chunks, not 12 full ones and a short last
    ],
)
def test_backward_one_read_choice_fills_the_sms(L, split, chunk, programs, prefetch, lag):
    """The backward's one-read config keeps the most rows in flight (groups = SMs // SPLIT),
    then the most programs; PREFETCH=2 with few full chunks, LAG=2 with many. The engine
    accepts it for an H100 and its chunks cover L."""
    kn = _coop_backward_knobs(L, 132)
    assert (kn.SPLIT, kn.CHUNK, kn.PROGRAMS, kn.BLOCK_L, kn.PREFETCH, kn.LAG) == (
        split,
        chunk,
        programs,
        8192,
        prefetch,
        lag,
    )
    assert (kn.CHUNK or kn.BLOCK_L) * kn.SPLIT >= L > (kn.CHUNK or kn.BLOCK_L) * (split - 1)
    x = torch.ones(2, L)
    g, _, _ = backward_graph(
        "layernorm", x, x, torch.ones(1, L), torch.ones(2, 1), torch.ones(2, 1)
    )
    g.validate()
    e = NormEngine()
    sup = e.check_config(g.op_graph, EngineConfig.make(e, **dataclasses.asdict(kn)), H100)
    assert sup.ok, sup.reason


@pytest.mark.parametrize(
    "kind,shape,groups,first",
    [
        ("layernorm", (2048, 65536), 1, (4, 2)),  # one read from 65536, next row first
        ("rmsnorm", (512, 262144), 1, (4, 1)),  # 16 chunks: PREFETCH=1
        ("groupnorm", (4, 64, 128, 128), 8, (4, 1)),  # PREFETCH=2 measured on layer / RMS only
        ("instancenorm", (4, 64, 256, 256), 1, (2, 0)),  # 65536-long rows keep the two loops
    ],
)
def test_forward_first_choice_on_an_h100(kind, shape, groups, first):
    x = torch.empty(shape, dtype=torch.bfloat16)
    if len(shape) == 4:
        x = x.contiguous(memory_format=torch.channels_last)
    w = torch.empty(param_shape(kind, shape), dtype=torch.bfloat16)
    g, _, _ = forward_graph(kind, x, w, w if kind != "rmsnorm" else None, 1e-5, groups)
    g.validate()
    kn = NormEngine().configs(g.op_graph, H100)[0].knob_dict
    assert (kn["PATH"], kn["PREFETCH"]) == first, kn
