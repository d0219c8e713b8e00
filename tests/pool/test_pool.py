"""Pooling (the resample node: MAXPOOL with its argmax Index, AVGPOOL including or
excluding padding) over 1-3 spatial axes, forward and backward: the float64 reference
against PyTorch (values, argmax, autograd gradients, NaN propagation); the pooling engines
(forward tiles, the backward gather from the Index or from X) against the reference
through the interpreter on odd, size-one and empty dims, whole-input windows, strides
beyond the window, asymmetric padding, NCHW / NHWC / non-packed strides and every
floating type; properties (max backward routes each gradient to its argmax, the average
modes keep the gradient's sum). The rules and their errors: test_pool_rules.py."""

import math

import pytest
import torch
import torch.nn.functional as F
from _util import TORCH_TO_DT, assert_close, check_engine, repro, run_reference, workspace

import opendnn.frontend as cudnn
from opendnn.engines.base import Target
from opendnn.engines.pool.engine import PoolBackwardEngine, PoolEngine

FWD, BWD = PoolEngine.id, PoolBackwardEngine.id
MODES = ["MAXPOOL", "AVGPOOL_INCLUDE_PADDING", "AVGPOOL_EXCLUDE_PADDING"]
M = cudnn.resample_mode


def _layout(x, layout):
    if layout == "nhwc":
        return (
            x.contiguous(
                memory_format=torch.channels_last if x.dim() == 4 else torch.channels_last_3d
            )
            if x.dim() in (4, 5)
            else x
        )
    if layout == "strided":  # every other element of a larger buffer
        big = torch.full((*x.shape[:-1], 2 * x.shape[-1]), float("nan"), dtype=x.dtype)
        big[..., ::2] = x
        return big[..., ::2]
    return x


def _tensor(g, t, name=""):
    return g.tensor(list(t.shape), list(t.stride()), TORCH_TO_DT[t.dtype], name=name)


def _fwd_graph(x, mode, window, stride, pre, post, index=False, nan=True):
    g = cudnn.pygraph()
    tx = _tensor(g, x, "x")
    y, idx = g.resample(
        tx,
        M[mode],
        window,
        stride,
        pre_padding=pre,
        post_padding=post,
        generate_index=index,
        nan_propagation=nan,
    )
    y.set_output(True)
    return g, {tx: x}, y, idx


def _bwd_graph(dy, x, mode, window, stride, pre, post, index=None, use_x=False):
    g = cudnn.pygraph()
    tdy = _tensor(g, dy, "dy")
    feeds = {tdy: dy}
    tix = tx = None
    if index is not None:
        tix = _tensor(g, index, "index")
        feeds[tix] = index
    if use_x:
        tx = _tensor(g, x, "x")
        feeds[tx] = x
    dx = g.resample_backward(
        tdy, M[mode], window, stride, pre_padding=pre, post_padding=post, index=tix, input=tx
    )
    dx.set_output(True).set_dim(list(x.shape)).set_stride(list(x.stride()))
    dx.set_data_type(TORCH_TO_DT[dy.dtype])
    return g, feeds, dx


def _run(g, feeds, outs, index):
    """Plan ``index`` with outputs poisoned (NaN; -1, never a window offset, for Index)."""
    bufs = {}
    for t in outs:
        dt = {v: k for k, v in TORCH_TO_DT.items()}[t.get_data_type()]
        bufs[t] = torch.empty_strided(t.get_dim(), t.get_stride(), dtype=dt).fill_(
            float("nan") if dt.is_floating_point else -1
        )
    g.execute_plan_at_index(
        {**feeds, **bufs}, workspace(g.get_workspace_size_plan_at_index(index)), index
    )
    return bufs


def _check_with_index(g, feeds, y, idx, knobs, n, msg=""):
    """The forward engine's Y and Index against the reference's (Index exactly)."""
    g.validate()
    g.create_execution_plan(
        FWD, knobs if knobs is not None else PoolEngine().configs(g.op_graph, Target())[0].knob_dict
    )
    g.create_execution_plan(0, {})
    got, ref = _run(g, feeds, [y, idx], 0), _run(g, feeds, [y, idx], 1)
    assert_close(got[y], ref[y], None, n, msg)
    assert torch.equal(got[idx], ref[idx]), f"{msg}\nIndex differs"
    return got


# ---- the reference against PyTorch ------------------------------------------------------------
def _torch_pool(x, mode, window, stride, pad):
    nd = x.dim() - 2
    if mode == "MAXPOOL":
        return getattr(F, f"max_pool{nd}d")(x, window, stride, pad)
    return getattr(F, f"avg_pool{nd}d")(
        x, window, stride, pad, count_include_pad=mode == "AVGPOOL_INCLUDE_PADDING"
    )


REF_CASES = [
    ((2, 3, 7, 9), (3, 3), (2, 2), (1, 1)),
    ((1, 2, 5, 6, 7), (2, 3, 2), (2, 1, 2), (1, 1, 0)),
    ((2, 3, 11), (3,), (2,), (1,)),
    ((2, 2, 4, 5), (4, 5), (1, 1), (0, 0)),
]


@pytest.mark.parametrize(
    "case", REF_CASES, ids=[f"{len(c[1])}d{i}" for i, c in enumerate(REF_CASES)]
)
@pytest.mark.parametrize("mode", MODES)
def test_reference_matches_pytorch(rng, case, mode):
    shape, window, stride, pad = case
    x = rng.rand(shape, torch.float64).requires_grad_(True)
    ref = _torch_pool(x, mode, window, stride, pad)
    g, feeds, y, idx = _fwd_graph(
        x.detach(), mode, window, stride, pad, pad, index=mode == "MAXPOOL"
    )
    outs = [y] + ([idx] if idx is not None else [])
    g.build([cudnn.heur_mode.FALLBACK])
    got = _run(g, feeds, outs, 0)
    assert_close(got[y], ref.detach(), torch.float64, 9)
    dy = rng.rand(ref.shape, torch.float64)
    ref.backward(dy)
    g, feeds, dx = _bwd_graph(
        dy, x.detach(), mode, window, stride, pad, pad, use_x=mode == "MAXPOOL"
    )
    assert_close(run_reference(g, feeds, [dx])[dx], x.grad, torch.float64, 9)


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_reference_argmax_is_pytorchs(rng, nd):
    """Index holds window offsets (row-major over the window); PyTorch returns flat
    positions in the input plane: the same argmax (bfloat16 values make many ties: the
    first maximum wins in both)."""
    shape = (2, 3) + (7, 6, 5)[:nd]
    window, stride, pad = (3,) * nd, (2,) * nd, (1,) * nd
    x = rng.rand(shape, torch.bfloat16).double()
    _, pt = getattr(F, f"max_pool{nd}d")(x, window, stride, pad, return_indices=True)
    g, feeds, y, idx = _fwd_graph(x, "MAXPOOL", window, stride, pad, pad, index=True)
    g.build([cudnn.heur_mode.FALLBACK])
    k = _run(g, feeds, [y, idx], 0)[idx].long()
    flat = torch.zeros_like(k)
    for a in range(nd):
        o = torch.arange(y.get_dim()[2 + a]).reshape([-1 if b == a else 1 for b in range(nd)])
        off = k // math.prod(window[a + 1 :]) % window[a]
        flat = flat * shape[2 + a] + o * stride[a] - pad[a] + off
    assert torch.equal(flat, pt)


@pytest.mark.parametrize("nan", [True, False])
def test_reference_nan_propagation(rng, nan):
    x = rng.rand((2, 2, 6, 6), torch.float64)
    x[0, 0, 1, 1] = x[1, 1, 4, :] = float("nan")
    x[0, 1, 0:2, 0:2] = float("nan")  # a whole (padded) window of NaN
    g, feeds, y, _ = _fwd_graph(x, "MAXPOOL", (3, 3), (2, 2), (1, 1), (1, 1), nan=nan)
    got = run_reference(g, feeds, [y])[y]
    want = F.max_pool2d(x if nan else torch.nan_to_num(x, nan=-math.inf), 3, 2, 1)
    assert_close(got, want, torch.float64)
    assert bool(torch.isnan(got).any()) == nan


# ---- the engines against the reference --------------------------------------------------------
CASES = [  # (shape, layout, window, stride, pre, post, knobs of the forward / backward)
    ((2, 5, 7, 9), "nchw", (3, 3), (2, 2), (1, 1), (1, 1), None),
    ((2, 6, 7, 9), "nhwc", (3, 3), (2, 2), (1, 1), (1, 1), None),
    ((2, 5, 7, 6), "nhwc", (2, 2), (2, 2), (0, 0), (0, 0), dict(BLOCK_P=8, BLOCK_C=4, num_warps=4)),
    ((1, 1, 1, 1), "nchw", (1, 1), (1, 1), (0, 0), (0, 0), None),  # size one
    ((2, 3, 1, 5), "nhwc", (1, 3), (1, 2), (0, 2), (0, 1), None),  # asymmetric pad
    ((2, 3, 4, 5), "nchw", (4, 5), (1, 1), (0, 0), (0, 0), None),  # window == input
    ((2, 3, 9, 8), "strided", (2, 2), (3, 3), (1, 0), (0, 1), None),  # stride > window
    ((2, 4, 5, 6, 4), "nhwc", (2, 3, 2), (2, 1, 2), (1, 1, 0), (1, 1, 1), None),  # 3-D
    ((3, 2, 11), "nchw", (3,), (2,), (1,), (1,), dict(BLOCK_P=4, BLOCK_C=1, num_warps=4)),  # 1-D
    (
        (2, 3, 7, 13),
        "nchw",
        (3, 3),
        (2, 2),
        (1, 1),
        (1, 1),
        dict(BLOCK_P=4, BLOCK_C=1, num_warps=4, BLOCK_W=4),
    ),
    (
        (2, 3, 7, 9),
        "nchw",
        (3, 3),
        (2, 2),
        (1, 1),
        (1, 1),
        dict(BLOCK_P=16, BLOCK_C=1, num_warps=4),
    ),  # flat
    ((2, 3, 5, 6, 7), "nchw", (2, 3, 2), (2, 1, 2), (1, 1, 0), (1, 1, 1), None),  # 3-D planes
]
CASE_IDS = [f"c{i}" for i in range(len(CASES))]


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
@pytest.mark.parametrize("mode", MODES)
def test_forward_against_reference(rng, case, mode):
    shape, layout, window, stride, pre, post, knobs = case
    x = _layout(rng.rand(shape, torch.float32), layout)
    msg = repro("resample", [shape], "float32", rng.seed, mode=mode, layout=layout)
    g, feeds, y, idx = _fwd_graph(x, mode, window, stride, pre, post, index=mode == "MAXPOOL")
    if idx is None:
        check_engine(g, feeds, [y], FWD, knobs, n=math.prod(window), msg=msg)
    else:
        _check_with_index(g, feeds, y, idx, knobs, math.prod(window), msg)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
@pytest.mark.parametrize(
    "mode,source",
    [
        ("MAXPOOL", "index"),
        ("MAXPOOL", "x"),
        ("AVGPOOL_INCLUDE_PADDING", None),
        ("AVGPOOL_EXCLUDE_PADDING", None),
    ],
)
def test_backward_against_reference(rng, case, mode, source):
    shape, layout, window, stride, pre, post, knobs = case
    x = _layout(rng.rand(shape, torch.bfloat16 if source == "x" else torch.float32), layout)
    g, feeds, y, idx = _fwd_graph(x, mode, window, stride, pre, post, index=True)
    g.build([cudnn.heur_mode.FALLBACK])
    index = _run(g, feeds, [y, idx], 0)[idx] if source == "index" else None
    dy = _layout(rng.rand(y.get_dim(), x.dtype), layout)
    g, feeds, dx = _bwd_graph(
        dy, x, mode, window, stride, pre, post, index=index, use_x=source == "x"
    )
    terms = math.prod(-(-w // s) for w, s in zip(window, stride))
    check_engine(
        g,
        feeds,
        [dx],
        BWD,
        knobs,
        n=terms,
        msg=repro(
            "resample_backward",
            [shape],
            str(x.dtype),
            rng.seed,
            mode=mode,
            source=source,
            layout=layout,
        ),
    )


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("mode", MODES)
def test_half_types_both_directions(rng, dtype, mode):
    shape, window, stride, pad = (2, 8, 6, 7), (3, 3), (2, 2), (1, 1)
    x = _layout(rng.rand(shape, dtype), "nhwc")
    g, feeds, y, idx = _fwd_graph(x, mode, window, stride, pad, pad, index=mode == "MAXPOOL")
    if idx is None:
        check_engine(g, feeds, [y], FWD, None, n=9)
    else:
        _check_with_index(g, feeds, y, idx, None, 9)
    dy = _layout(rng.rand(y.get_dim(), dtype), "nhwc")
    g, feeds, dx = _bwd_graph(dy, x, mode, window, stride, pad, pad, use_x=True)
    check_engine(g, feeds, [dx], BWD, None, n=4)


@pytest.mark.parametrize("nan", [True, False])
@pytest.mark.parametrize("index", [True, False])
def test_nan_propagation_both_ways(rng, nan, index):
    x = rng.rand((2, 4, 6, 6), torch.float32).contiguous(memory_format=torch.channels_last)
    x[0, 0, 1, 1] = x[1, 3, 4, :] = float("nan")
    x[0, 1, 0:2, 0:2] = float("nan")  # a whole (padded) window of NaN
    g, feeds, y, idx = _fwd_graph(x, "MAXPOOL", (3, 3), (2, 2), (1, 1), (1, 1), index, nan)
    if index:
        got = _check_with_index(g, feeds, y, idx, None, 9)[y]
    else:
        got = check_engine(g, feeds, [y], FWD, None, n=9, allow_nan=True)[y]
    assert bool(torch.isnan(got).any()) == nan
    if not nan:
        assert float(got[0, 1, 0, 0]) == -math.inf


def test_empty_batch_and_channels_run(rng):
    for shape in [(0, 3, 5, 5), (2, 0, 5, 5)]:
        x = torch.empty(shape)
        g, feeds, y, _ = _fwd_graph(x, "MAXPOOL", (2, 2), (2, 2), (0, 0), (0, 0))
        assert check_engine(g, feeds, [y], FWD, None)[y].numel() == 0
        dy = torch.empty(y.get_dim())
        g, feeds, dx = _bwd_graph(dy, x, "AVGPOOL_INCLUDE_PADDING", (2, 2), (2, 2), (0, 0), (0, 0))
        assert check_engine(g, feeds, [dx], BWD, None)[dx].numel() == 0


# ---- properties ------------------------------------------------------------------------------
def test_max_backward_routes_each_gradient_to_its_argmax(rng):
    """dx = dy scattered (added) onto the argmax of each window, the argmax taken from the
    forward engine's own Index; ties (bfloat16 inputs) and overlapping windows included."""
    x = rng.rand((2, 3, 9, 8), torch.bfloat16).contiguous(memory_format=torch.channels_last)
    window, stride, pad = (3, 3), (2, 2), (1, 1)
    g, feeds, y, idx = _fwd_graph(x, "MAXPOOL", window, stride, pad, pad, index=True)
    g.build([cudnn.heur_mode.A])
    assert g.get_plan_name_at_index(0).startswith("pool")
    k = _run(g, feeds, [y, idx], 0)[idx].long()
    dy = rng.rand(y.get_dim(), torch.float32)
    g, feeds, dx = _bwd_graph(dy, x.float(), "MAXPOOL", window, stride, pad, pad, use_x=True)
    g.build([cudnn.heur_mode.A])
    assert g.get_plan_name_at_index(0).startswith("pool_backward")
    got = _run(g, feeds, [dx], 0)[dx]
    oh = torch.arange(y.get_dim()[2])[:, None]
    ow = torch.arange(y.get_dim()[3])[None, :]
    pos = (oh * 2 - 1 + k // 3) * 8 + (ow * 2 - 1 + k % 3)
    want = (
        torch.zeros(2, 3, 72, dtype=torch.float64)
        .scatter_add_(2, pos.reshape(2, 3, -1), dy.double().reshape(2, 3, -1))
        .reshape(2, 3, 9, 8)
    )
    assert_close(got, want, torch.float32, 4)
    again = _run(g, feeds, [dx], 0)[dx]
    assert torch.equal(got, again)  # a gather: deterministic


@pytest.mark.parametrize("mode", ["MAXPOOL", "AVGPOOL_EXCLUDE_PADDING"])
def test_gradient_sum_is_kept(rng, mode):
    """Each window hands its whole gradient to real inputs: sum(dx) = sum(dy)."""
    x = rng.rand((2, 3, 7, 7), torch.float32)
    dy = rng.rand((2, 3, 4, 4), torch.float32)
    g, feeds, dx = _bwd_graph(dy, x, mode, (3, 3), (2, 2), (1, 1), (1, 1), use_x=mode == "MAXPOOL")
    got = check_engine(g, feeds, [dx], BWD, None, n=4)[dx]
    assert_close(got.double().sum(), dy.double().sum(), torch.float32, 49)


def test_serialized_graph_runs_the_same(rng):
    x = rng.rand((2, 3, 6, 6), torch.float32)
    g, feeds, y, idx = _fwd_graph(x, "MAXPOOL", (3, 3), (2, 2), (1, 1), (1, 1), index=True)
    g.build([cudnn.heur_mode.A])
    g2 = cudnn.pygraph().deserialize(g.serialize())
    assert g2.get_plan_name_at_index(0) == g.get_plan_name_at_index(0)
    assert g2.op_graph.nodes[0].resample_mode == M.MAXPOOL
    a = _run(g, feeds, [y, idx], 0)
    b = _run(g2, {tx.get_uid(): v for tx, v in feeds.items()}, [y, idx], 0)
    assert torch.equal(a[y], b[y]) and torch.equal(a[idx], b[idx])


@pytest.mark.parametrize("nan", [True, False])
def test_max_backward_from_x_follows_the_nan_option(rng, nan):
    """The argmax recomputed from X takes the forward's NaN rule: with propagation a NaN
    wins its windows (and takes their gradient), without it the NaN is passed over."""
    x = rng.rand((1, 2, 6, 6), torch.float32)
    x[0, 0, 2, 2] = float("nan")
    dy = rng.rand((1, 2, 3, 3), torch.float32)
    g = cudnn.pygraph()
    tdy, tx = _tensor(g, dy), _tensor(g, x)
    dx = g.resample_backward(tdy, M.MAXPOOL, 3, 2, padding=1, input=tx, nan_propagation=nan)
    dx.set_output(True)
    got = check_engine(g, {tdy: dy, tx: x}, [dx], BWD, None, n=4)[dx]
    # the NaN at (2, 2) lies in window (1, 1) alone (rows and columns 1..3)
    assert (float(got[0, 0, 2, 2]) != 0.0) == nan


@pytest.mark.parametrize("mode", MODES)
def test_large_windows_loop_at_run_time(rng, mode):
    """A 9x9 window (81 offsets > UNROLL) walks its offsets in a run-time loop; stride 1
    makes the backward's candidate windows 81 as well."""
    x = _layout(rng.rand((1, 3, 11, 10), torch.float32), "nhwc")
    g, feeds, y, idx = _fwd_graph(x, mode, (9, 9), (1, 1), (4, 0), (0, 3), index=mode == "MAXPOOL")
    if idx is None:
        check_engine(g, feeds, [y], FWD, None, n=81)
    else:
        _check_with_index(g, feeds, y, idx, None, 81)
    dy = rng.rand(y.get_dim(), torch.float32)
    g, feeds, dx = _bwd_graph(dy, x, mode, (9, 9), (1, 1), (4, 0), (0, 3), use_x=mode == "MAXPOOL")
    check_engine(g, feeds, [dx], BWD, None, n=81)
