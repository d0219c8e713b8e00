"""The norm engine fuses what the graph asks for: a residual add before the norm (the sum
optionally an output) and pointwise operations after Y (activation, scale, residual),
all in one kernel with Y virtual; against the reference, on both forward paths; the
heuristics pick the fused plan; graphs that do not fit are declined with a reason."""

import pytest
import torch
from _norm_cases import TRAINING, tensor
from _util import check_engine

import opendnn.frontend as cudnn
from opendnn.engines.base import Target
from opendnn.engines.norm.engine import NormEngine

ID = NormEngine.id
LOOP = dict(PATH=2, BLOCK_L=8, BLOCK_ROWS=1, SPLIT=1, PROGRAMS=1, num_warps=4)
SPLIT3 = dict(LOOP, PATH=3, SPLIT=2)
COOP = dict(LOOP, PATH=4, BLOCK_L=32, PROGRAMS=2, PREFETCH=1)

EPILOGUES = {
    "relu": lambda g, y, c: g.relu(y),
    "gelu": lambda g, y, c: g.gelu(y),
    "swish_scale": lambda g, y, c: g.swish(g.mul(y, c)),
    "scale_add_relu": lambda g, y, c: g.relu(g.add(g.mul(y, 0.5), c)),
}


def _graph(rng, kind, shape, dtype, residual, keep_sum, epilogue, keep_y=False):
    w_shape = (
        (1, shape[1]) + (1,) * (len(shape) - 2) if kind == "groupnorm" else (1,) + tuple(shape[1:])
    )
    x, r = rng.rand(shape, dtype), rng.rand(shape, dtype)
    w, b = rng.rand(w_shape, dtype), rng.rand(w_shape, dtype)
    c = rng.rand((1,) + tuple(shape[1:]), dtype)
    g = cudnn.pygraph()
    tx, tw, tb = tensor(g, x), tensor(g, w), tensor(g, b)
    feeds = {tx: x, tw: w, tb: b}
    src, outs = tx, []
    if residual:
        tr = tensor(g, r)
        feeds[tr] = r
        src = g.add(tx, tr)
        if keep_sum:
            src.set_output(True).set_data_type(cudnn.data_type.FLOAT)
            outs.append(src)
    if kind == "groupnorm":
        y, m, v = g.groupnorm(TRAINING, src, tw, tb, 1e-5, groups=2)
    elif kind == "rmsnorm":
        y, v = g.rmsnorm(TRAINING, src, tw, tb, epsilon=1e-5)
        m = None
    else:
        y, m, v = g.layernorm(TRAINING, src, tw, tb, 1e-5)
    if epilogue:
        tc = tensor(g, c)
        if epilogue not in ("relu", "gelu"):
            feeds[tc] = c
        out = EPILOGUES[epilogue](g, y, tc)
        out.set_output(True).set_data_type(
            cudnn.data_type.FLOAT if dtype == torch.float32 else cudnn.data_type.BFLOAT16
        )
        outs.append(out)
        if keep_y:
            y.set_output(True)
            outs.append(y)
    else:
        y.set_output(True)
        outs.append(y)
    for t in (m, v):
        if t is not None:
            t.set_output(True)
            outs.append(t)
    return g, feeds, outs


CASES = [  # (kind, residual, keep the sum, epilogue, keep Y)
    ("layernorm", True, False, None, False),
    ("layernorm", True, True, "relu", False),
    ("layernorm", False, False, "gelu", False),
    ("rmsnorm", True, False, "swish_scale", False),
    ("layernorm", False, False, "scale_add_relu", True),
    ("groupnorm", True, True, "relu", False),
]


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{c[3]}-{i}" for i, c in enumerate(CASES)])
@pytest.mark.parametrize(
    "knobs,dtype",
    [
        (None, torch.float32),
        (None, torch.bfloat16),
        (LOOP, torch.bfloat16),
        (SPLIT3, torch.float32),
        (COOP, torch.bfloat16),
    ],
    ids=["rows-f32", "rows-bf16", "loop-bf16", "split-f32", "coop-bf16"],
)
def test_fused_forward_against_reference(rng, case, knobs, dtype):
    kind, residual, keep_sum, epilogue, keep_y = case
    shape = (5, 4, 6) if kind == "groupnorm" else (5, 24)
    g, feeds, outs = _graph(rng, kind, shape, dtype, residual, keep_sum, epilogue, keep_y)
    check_engine(g, feeds, outs, ID, knobs, n=24)


def test_heuristics_take_the_whole_fused_graph(rng):
    g, feeds, outs = _graph(rng, "layernorm", (3, 16), torch.float32, True, False, "relu")
    g.build([cudnn.heur_mode.A])
    assert g.get_plan_name_at_index(0).startswith("norm#26"), g.get_plan_name_at_index(0)


def _declines(g, reason):
    g.validate()
    sup = NormEngine().check_support(g.op_graph, Target())
    assert not sup.ok and reason in sup.reason, sup.reason


def test_declines_a_prologue_that_is_not_an_add(rng):
    g = cudnn.pygraph()
    x = g.tensor([3, 8], None, cudnn.data_type.FLOAT)
    w = g.tensor([1, 8], None, cudnn.data_type.FLOAT)
    y, m, v = g.layernorm(TRAINING, g.mul(x, x), w, w, 1e-5)
    for t in (y, m, v):
        t.set_output(True)
    _declines(g, "only a residual add fuses before it")


def test_declines_an_epilogue_reading_the_statistics(rng):
    g = cudnn.pygraph()
    x = g.tensor([3, 8], None, cudnn.data_type.FLOAT)
    w = g.tensor([1, 8], None, cudnn.data_type.FLOAT)
    y, m, v = g.layernorm(TRAINING, x, w, w, 1e-5)
    out = g.mul(y, v)
    for t in (out, m):
        t.set_output(True)
    _declines(g, "neither Y nor computed after it")
