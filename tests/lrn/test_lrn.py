"""Cross-channel LRN and divisive normalization, forward and backward: the float64
reference against PyTorch (local_response_norm for LRN, odd and even window sizes; a
box-sum built from avg_pool for divisive normalization; autograd for both backwards);
the LRN engine against the reference through the interpreter on 4-D and 5-D tensors,
NCHW / NHWC / strided, float32 / float16 / bfloat16, window sizes 1 to 16; each rule of
cuDNN's LRN descriptor and of the nodes with its error."""

import pytest
import torch
import torch.nn.functional as F
from _util import (
    TORCH_TO_DT,
    assert_close,
    check_engine,
    expect_error,
    nhwc,
    repro,
    run_reference,
    with_layout,
)

import opendnn.frontend as cudnn
from opendnn.engines.base import EngineConfig, Target
from opendnn.engines.lrn import shapes
from opendnn.engines.lrn.engine import LrnEngine
from opendnn.errors import BadParamError, Status

ID = LrnEngine.id
P = dict(lrn_n=5, lrn_alpha=0.8, lrn_beta=0.75, lrn_k=1.5)  # a visible normalization


def _t(g, x, name=""):
    return g.tensor(list(x.shape), list(x.stride()), TORCH_TO_DT[x.dtype], name=name)


def _graph(kind, tensors: dict, attrs: dict, out_dtype=None):
    """A one-node graph of ``kind`` over ``tensors`` (role -> torch tensor)."""
    g = cudnn.pygraph()
    t = {r: _t(g, v, r.lower()) for r, v in tensors.items()}
    if kind == "lrn":
        outs = [g.lrn(t["X"], **attrs)]
    elif kind == "lrn_backward":
        outs = [g.lrn_backward(t["DY"], t["X"], t["Y"], **attrs)]
    elif kind == "div_norm":
        outs = [g.divisive_normalization(t["X"], t["MEANS"], **attrs)]
    else:
        outs = g.divisive_normalization_backward(t["DY"], t["X"], t["MEANS"], **attrs)
    for o in outs:
        o.set_output(True)
        if out_dtype is not None:
            o.set_data_type(TORCH_TO_DT[out_dtype])
    return g, {t[r]: v for r, v in tensors.items()}, outs


# ---- PyTorch ground truths (float64) --------------------------------------------------------
def torch_lrn(x, n, alpha, beta, k):
    """cuDNN's window [c - (n-1)//2, c + n//2]; torch's is [c - n//2, c + (n-1)//2]: the
    same for odd n, mirrored for even n -- so flip the channels around torch's call."""
    if n % 2:
        return F.local_response_norm(x, n, alpha, beta, k)
    return F.local_response_norm(x.flip(1), n, alpha, beta, k).flip(1)


def torch_div_norm(x, means, n, alpha, beta, k):
    d = x - means
    s = d.dim() - 2
    lo, hi = (n - 1) // 2, n - 1 - (n - 1) // 2
    sq = F.pad(d * d, (lo, hi) * s)
    pool = F.avg_pool2d if s == 2 else F.avg_pool3d
    box = pool(sq, n, stride=1) * n**s
    return d / (k + alpha / n**s * box) ** beta


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 16])
def test_lrn_reference_matches_pytorch(rng, n):
    x = rng.rand((2, 7, 3, 2), torch.float64, high=3.0)
    attrs = dict(P, lrn_n=n)
    g, feeds, (y,) = _graph("lrn", {"X": x}, attrs)
    want = torch_lrn(x, n, 0.8, 0.75, 1.5)
    assert_close(run_reference(g, feeds, [y])[y], want, torch.float64, n)
    xr = x.clone().requires_grad_(True)
    dy = rng.rand(x.shape, torch.float64)
    torch_lrn(xr, n, 0.8, 0.75, 1.5).backward(dy)
    g, feeds, (dx,) = _graph("lrn_backward", {"DY": dy, "X": x, "Y": want}, attrs)
    assert_close(run_reference(g, feeds, [dx])[dx], xr.grad, torch.float64, n * n)


@pytest.mark.parametrize(
    "shape,n", [((2, 3, 5, 4), 3), ((1, 2, 4, 5), 4), ((2, 2, 3, 4, 3), 3), ((1, 2, 3, 2, 4), 2)]
)
def test_div_norm_reference_matches_pytorch(rng, shape, n):
    x = rng.rand(shape, torch.float64, high=3.0)
    m = rng.rand(shape, torch.float64, high=0.5)
    g, feeds, (y,) = _graph("div_norm", {"X": x, "MEANS": m}, dict(P, lrn_n=n))
    assert_close(
        run_reference(g, feeds, [y])[y],
        torch_div_norm(x, m, n, 0.8, 0.75, 1.5),
        torch.float64,
        n**3,
    )
    xr, mr = x.clone().requires_grad_(True), m.clone().requires_grad_(True)
    dy = rng.rand(shape, torch.float64)
    torch_div_norm(xr, mr, n, 0.8, 0.75, 1.5).backward(dy)
    g, feeds, (dx, dm) = _graph(
        "div_norm_backward", {"DY": dy, "X": x, "MEANS": m}, dict(P, lrn_n=n)
    )
    got = run_reference(g, feeds, [dx, dm])
    assert_close(got[dx], xr.grad, torch.float64, n**3)
    assert_close(got[dm], mr.grad, torch.float64, n**3)


# ---- the engine against the reference ---------------------------------------------------------


def _layout(t, layout):
    if layout == "ndhwc":
        return t.contiguous(memory_format=torch.channels_last_3d)
    return with_layout(t, layout)


@pytest.mark.parametrize("case", shapes.CI, ids=[f"c{i}" for i in range(len(shapes.CI))])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("kind", ["lrn", "div_norm"])
def test_forward_against_reference(rng, case, dtype, kind):
    shape, layout, n = case
    x = _layout(rng.rand(shape, dtype, high=3.0), layout)
    ins = {"X": x}
    if kind == "div_norm":
        ins["MEANS"] = _layout(rng.rand(shape, dtype, high=0.5), layout)
    g, feeds, outs = _graph(kind, ins, dict(P, lrn_n=n))
    window = n if kind == "lrn" else n ** (len(shape) - 2)
    check_engine(
        g,
        feeds,
        outs,
        ID,
        None,
        n=window,
        msg=repro(kind, [shape], str(dtype), rng.seed, layout=layout, n=n),
    )


@pytest.mark.parametrize("case", shapes.CI, ids=[f"c{i}" for i in range(len(shapes.CI))])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kind", ["lrn_backward", "div_norm_backward"])
def test_backward_against_reference(rng, case, dtype, kind):
    shape, layout, n = case
    x = _layout(rng.rand(shape, dtype, high=3.0), layout)
    ins = {"DY": _layout(rng.rand(shape, dtype), layout), "X": x}
    if kind == "lrn_backward":
        ins["Y"] = torch_lrn(x.double(), n, 0.8, 0.75, 1.5).to(dtype)
    else:
        ins["MEANS"] = _layout(rng.rand(shape, dtype, high=0.5), layout)
    g, feeds, outs = _graph(kind, ins, dict(P, lrn_n=n))
    window = n if kind == "lrn_backward" else n ** (len(shape) - 2)
    check_engine(
        g,
        feeds,
        outs,
        ID,
        None,
        n=window * window,
        msg=repro(kind, [shape], str(dtype), rng.seed, layout=layout, n=n),
    )


@pytest.mark.parametrize("case", shapes.CI, ids=[f"c{i}" for i in range(len(shapes.CI))])
@pytest.mark.parametrize("passes", [1, 2])
def test_lrn_backward_both_schedules(rng, case, passes):
    """PASSES=1 recomputes each neighbour's S from x, PASSES=2 goes through the workspace:
    both against the reference, whatever the heuristic's choice for the window."""
    shape, layout, n = case
    x = _layout(rng.rand(shape, torch.float32, high=3.0), layout)
    ins = {
        "DY": _layout(rng.rand(shape, torch.float32), layout),
        "X": x,
        "Y": torch_lrn(x.double(), n, 0.8, 0.75, 1.5).float(),
    }
    g, feeds, outs = _graph("lrn_backward", ins, dict(P, lrn_n=n))
    check_engine(
        g,
        feeds,
        outs,
        ID,
        dict(PASSES=passes, BLOCK=128, num_warps=4),
        n=n * n,
        msg=repro("lrn_backward", [shape], "float32", rng.seed, passes=passes),
    )


def test_mixed_layouts_and_a_float32_output(rng):
    """X in NHWC, MEANS packed NCHW, Y float32 with its own strides; small BLOCK knobs."""
    shape = (2, 3, 4, 5)
    x = nhwc(rng.rand(shape, torch.bfloat16))
    m = rng.rand(shape, torch.bfloat16, high=0.5)
    g, feeds, (y,) = _graph("div_norm", {"X": x, "MEANS": m}, P, torch.float32)
    y.set_stride([1, 2, 6, 24])
    check_engine(g, feeds, [y], ID, dict(PASSES=1, BLOCK=64, num_warps=2), n=25)


@pytest.mark.parametrize("kind", ["lrn", "lrn_backward", "div_norm", "div_norm_backward"])
def test_empty_tensors_run_and_write_nothing(kind):
    shape = (0, 3, 2, 2)
    ins = {"X": torch.empty(shape)}
    if kind.endswith("backward"):
        ins["DY"] = torch.empty(shape)
    ins.update(
        {"Y": torch.empty(shape)}
        if kind == "lrn_backward"
        else {"MEANS": torch.empty(shape)}
        if kind.startswith("div_norm")
        else {}
    )
    g, feeds, outs = _graph(kind, ins, P)
    got = check_engine(g, feeds, outs, ID, None)
    assert all(got[o].numel() == 0 for o in outs)


def test_lrn_of_zeros_is_zero_and_scaling_follows_the_formula(rng):
    """Properties: x = 0 gives 0 (no NaN from 0 * S^-beta); with alpha -> tiny,
    y = x / k^beta."""
    x = torch.zeros(1, 4, 2, 2)
    g, feeds, (y,) = _graph("lrn", {"X": x}, P)
    assert bool((check_engine(g, feeds, [y], ID, None)[y] == 0).all())
    x = rng.rand((1, 4, 2, 2))
    g, feeds, (y,) = _graph("lrn", {"X": x}, dict(P, lrn_alpha=1e-12, lrn_k=4.0))
    assert_close(check_engine(g, feeds, [y], ID, None)[y], x.double() / 4.0**0.75, torch.float32)


# ---- bad input -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "attrs,rule",
    [
        (dict(lrn_n=0), "lrn_n=0 is outside [1, 16]"),
        (dict(lrn_n=17), "lrn_n=17 is outside [1, 16]"),
        (dict(lrn_k=1e-6), "lrn_k=1e-06 is below the minimum 1e-05"),
        (dict(lrn_beta=0.005), "lrn_beta=0.005 is below the minimum 0.01"),
        (dict(lrn_alpha=float("inf")), "lrn_alpha=inf is not finite"),
    ],
)
@pytest.mark.parametrize("kind", ["lrn", "div_norm"])
def test_descriptor_ranges_are_enforced(attrs, rule, kind):
    x = torch.empty(1, 2, 3, 3)
    ins = {"X": x} if kind == "lrn" else {"X": x, "MEANS": x}
    g, _, _ = _graph(kind, ins, {**P, **attrs, "name": "nrm"})
    expect_error(BadParamError, Status.BAD_PARAM_OUT_OF_BOUND, g.validate, "nrm", rule)


def test_rank_dims_and_types_are_checked():
    g, _, _ = _graph("lrn", {"X": torch.empty(4, 5)}, {**P, "name": "l2"})
    expect_error(
        BadParamError, Status.BAD_PARAM_SHAPE_MISMATCH, g.validate, "l2", "x", "needs 3 to 8 dims"
    )
    g, _, _ = _graph(
        "div_norm",
        {"X": torch.empty(1, 2, 3, 3), "MEANS": torch.empty(1, 2, 3, 4)},
        {**P, "name": "dn"},
    )
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        g.validate,
        "dn",
        "means",
        "MEANS dims [1, 2, 3, 4] must equal X's [1, 2, 3, 3]",
    )
    g = cudnn.pygraph()
    xi = g.tensor([1, 2, 3, 3], [18, 9, 3, 1], cudnn.data_type.INT32, name="xi")
    g.lrn(xi, name="li").set_data_type(cudnn.data_type.FLOAT)
    expect_error(
        BadParamError, Status.NOT_SUPPORTED_DATA_TYPE, g.validate, "li", "xi", "not a floating type"
    )


@pytest.mark.parametrize(
    "kind,passes,reason",
    [
        ("lrn", 2, "the forward is one kernel: PASSES=1"),
        ("div_norm_backward", 1, "needs the workspace: PASSES=2"),
    ],
)
def test_engine_declines_a_schedule_with_a_reason(kind, passes, reason):
    x = torch.empty(1, 2, 3, 3)
    ins = {"X": x} if kind == "lrn" else {"DY": x, "X": x, "MEANS": x}
    g, _, _ = _graph(kind, ins, P)
    g.validate()
    e = LrnEngine()
    sup = e.check_config(
        g.op_graph, EngineConfig.make(e, PASSES=passes, BLOCK=1024, num_warps=4), Target()
    )
    assert not sup.ok and reason in sup.reason


def test_heuristic_schedule_follows_the_window():
    x = torch.empty(1, 20, 3, 3)
    for n, first in ((5, 1), (9, 2)):
        g, _, _ = _graph("lrn_backward", {"DY": x, "X": x, "Y": x}, dict(P, lrn_n=n))
        g.validate()
        assert [c.knob_dict["PASSES"] for c in LrnEngine().configs(g.op_graph, Target())] == [
            first,
            3 - first,
        ]


def test_engine_declines_float64_and_other_nodes_with_a_reason():
    g, _, _ = _graph("lrn", {"X": torch.empty(1, 2, 3, 3, dtype=torch.float64)}, P)
    g.validate()
    sup = LrnEngine().check_support(g.op_graph, Target())
    assert not sup.ok and "float64 runs on the reference" in sup.reason
    g = cudnn.pygraph()
    x = g.tensor([1, 2, 3, 3], [18, 9, 3, 1], cudnn.data_type.FLOAT)
    g.relu(g.lrn(x)).set_output(True)
    g.validate()
    sup = LrnEngine().check_support(g.op_graph, Target())
    assert not sup.ok and "alone" in sup.reason
