"""The MoE grouped matmul (cuDNN's moe_grouped_matmul and moe_grouped_matmul_bwd): the
float64 reference against a PyTorch loop in every mode; the engine against the reference
through the interpreter in every mode and data type, on odd sizes, a group with no rows,
offsets not starting at 0, two batches of experts, column-major and non-packed weights,
several tiles per group; indices and offsets out of range write nothing outside the
output; cudnn-frontend's experimental ``moe_grouped_matmul`` op; each rule with its
typed error."""

import pytest
import torch
from _util import TORCH_TO_DT, assert_close, check_engine, expect_error, repro, run_reference

import opendnn.frontend as cudnn
from opendnn.engines.base import EngineConfig, Target
from opendnn.engines.moe import shapes
from opendnn.engines.moe.engine import MoeEngine
from opendnn.errors import BadParamError, GraphNotSupportedError, Status, UnsupportedParamError

ID = MoeEngine.id
MODE = cudnn.moe_grouped_matmul_mode
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
SMALL = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, num_warps=4, num_stages=1)  # many tiles
TOP_K = 2


# ---- inputs ----------------------------------------------------------------------------------
def _offsets(off) -> torch.Tensor:
    return torch.tensor(off, dtype=torch.int32).reshape(-1, 1, 1)


def _weight(rng, experts, k, n, dtype, layout="col"):
    """[E, K, N]: "col" column-major in K x N (cudnn-frontend's), "row" packed, "slice"
    every other column of a wider row-major weight (not packed)."""
    if layout == "col":
        return rng.rand((experts, n, k), dtype).transpose(1, 2)
    if layout == "slice":
        return rng.rand((experts, k, 2 * n), dtype)[:, :, ::2]
    return rng.rand((experts, k, n), dtype)


def _routing(rng, mode, case):
    """(token rows S or M, TokenIndex, TokenKs) of a case of T routed rows: GATHER reads
    one of S = ceil(T / TOP_K) tokens per routed row; SCATTER writes each routed row to
    its own slot token * TOP_K + k of the T output rows (a permutation)."""
    rows = case[1]
    if mode == "NONE":
        return rows, None, None
    tokens = -(-rows // TOP_K)
    if mode == "GATHER":
        idx = torch.randint(0, tokens, (1, rows, 1), generator=rng.gen, dtype=torch.int32)
        return tokens, idx, None
    perm = torch.randperm(rows, generator=rng.gen)  # the slot of each routed row
    idx = (perm // TOP_K).to(torch.int32).reshape(1, rows, 1)
    ks = (perm % TOP_K).to(torch.int32).reshape(1, rows, 1)
    return rows, idx, ks


def _graph(token, weight, off, mode="NONE", idx=None, ks=None, top_k=0, out_dtype=None):
    """A moe_grouped_matmul graph over tensors shaped as the given ones: (g, feeds, out)."""
    g = cudnn.pygraph(
        intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT
    )

    def t(x, name):
        return g.tensor(
            dim=list(x.shape), stride=list(x.stride()), data_type=TORCH_TO_DT[x.dtype], name=name
        )

    tt, tw, to = t(token, "token"), t(weight, "weight"), t(off, "first_token_offset")
    feeds = {tt: token, tw: weight, to: off}
    ti = tk = None
    if idx is not None:
        ti = t(idx, "token_index")
        feeds[ti] = idx
    if ks is not None:
        tk = t(ks, "token_ks")
        feeds[tk] = ks
    out = g.moe_grouped_matmul(
        tt, tw, to, token_index=ti, token_ks=tk, mode=MODE[mode], top_k=top_k, name="moe"
    )
    out.set_output(True).set_data_type(TORCH_TO_DT[out_dtype or token.dtype])
    return g, feeds, out


def _bwd_graph(dy, token, off, out_dtype=None):
    g = cudnn.pygraph(
        intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT
    )
    tdy = g.tensor(list(dy.shape), list(dy.stride()), TORCH_TO_DT[dy.dtype], name="doutput")
    tt = g.tensor(list(token.shape), list(token.stride()), TORCH_TO_DT[token.dtype], name="token")
    to = g.tensor(list(off.shape), list(off.stride()), cudnn.data_type.INT32, name="offsets")
    dw = g.moe_grouped_matmul_bwd(tdy, tt, to, name="moe_bwd")
    dw.set_output(True).set_data_type(TORCH_TO_DT[out_dtype or dy.dtype])
    return g, {tdy: dy, tt: token, to: off}, dw


def _torch_loop(token, weight, off, mode, idx=None, ks=None, top_k=0, out_rows=None):
    """The forward by a PyTorch loop over groups and rows (valid routing only), float64;
    rows no group writes are NaN."""
    tok, w = token[0].double(), weight.double()
    experts, groups = w.shape[0], len(off)
    routed = idx.shape[1] if mode == "GATHER" else tok.shape[0]
    y = torch.full((1, out_rows or routed, w.shape[2]), float("nan"), dtype=torch.float64)
    for g in range(groups):
        hi = off[g + 1] if g + 1 < groups else routed
        for r in range(off[g], hi):
            src = int(idx[0, r, 0]) if mode == "GATHER" else r
            dst = int(idx[0, r, 0]) * top_k + int(ks[0, r, 0]) if mode == "SCATTER" else r
            y[0, dst] = tok[src] @ w[g % experts]
    return y


def _case_inputs(rng, case, mode, dtype, layout="col"):
    experts, rows, k, n, off = case
    tokens, idx, ks = _routing(rng, mode, case)
    token = rng.rand((1, tokens, k), dtype)
    weight = _weight(rng, experts, k, n, dtype, layout)
    top_k = TOP_K if mode == "SCATTER" else 0
    return token, weight, list(off), idx, ks, top_k


# ---- the reference against PyTorch -----------------------------------------------------------
@pytest.mark.parametrize("mode", ["NONE", "GATHER", "SCATTER"])
@pytest.mark.parametrize("case", shapes.CI, ids=[f"c{i}" for i in range(len(shapes.CI))])
def test_reference_matches_a_pytorch_loop(rng, mode, case):
    token, weight, off, idx, ks, top_k = _case_inputs(rng, case, mode, torch.float64)
    g, feeds, out = _graph(token, weight, _offsets(off), mode, idx, ks, top_k)
    got = run_reference(g, feeds, [out])[out]
    want = _torch_loop(token, weight, off, mode, idx, ks, top_k, out.get_dim()[1])
    assert_close(got, want, torch.float64, case[2])


def test_backward_reference_matches_autograd(rng):
    """DWeight of the forward (NONE) through PyTorch's autograd, per group (a group
    without rows gets zeros), rows before the first offset adding to nothing."""
    rows, k, n, off = 11, 21, 9, [2, 5, 5, 9]
    token = rng.rand((1, rows, k), torch.float64)
    dy = rng.rand((1, rows, n), torch.float64)
    w = torch.zeros(len(off), k, n, dtype=torch.float64, requires_grad=True)
    y = torch.cat([token[0, lo:hi] @ w[g] for g, (lo, hi) in enumerate(zip(off, off[1:] + [rows]))])
    (y * dy[0, off[0] :]).sum().backward()
    g, feeds, dw = _bwd_graph(dy, token, _offsets(off))
    got = run_reference(g, feeds, [dw])[dw]
    assert_close(got, w.grad, torch.float64, rows)
    assert bool((got[1] == 0).all())  # the empty group's zeros


# ---- the engine against the reference --------------------------------------------------------
def _check_forward(rng, case, mode, dtype, knobs=None, layout="col", out_dtype=None):
    token, weight, off, idx, ks, top_k = _case_inputs(rng, case, mode, dtype, layout)
    g, feeds, out = _graph(token, weight, _offsets(off), mode, idx, ks, top_k, out_dtype)
    unrouted = off[0] > 0  # rows before the first offset: written by no group (NaN stays)
    msg = repro("moe_grouped_matmul", [case[:4]], str(dtype), rng.seed, mode=mode, off=off)
    got = check_engine(g, feeds, [out], ID, knobs, n=case[2], msg=msg, allow_nan=unrouted)[out]
    want = _torch_loop(token, weight, off, mode, idx, ks, top_k, out.get_dim()[1])
    assert torch.equal(torch.isnan(got), torch.isnan(want)), msg  # exactly the routed rows
    return got


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("mode", ["NONE", "GATHER", "SCATTER"])
@pytest.mark.parametrize("case", shapes.CI, ids=[f"c{i}" for i in range(len(shapes.CI))])
def test_forward_against_reference(rng, case, mode, dtype):
    _check_forward(rng, case, mode, dtype)


@pytest.mark.parametrize("mode", ["NONE", "GATHER", "SCATTER"])
def test_forward_many_tiles_per_group(rng, mode):
    """16 x 16 x 16 tiles: several row tiles in a group, three K steps, two column tiles,
    the last of each partial."""
    _check_forward(rng, (2, 40, 37, 19, (0, 27)), mode, torch.bfloat16, SMALL)


@pytest.mark.parametrize("layout", ["row", "slice"])
def test_forward_weight_layouts_and_a_float32_output(rng, layout):
    """A row-major and a non-packed weight (every other column of a wider one), bf16
    data into a float32 output."""
    _check_forward(
        rng, shapes.CI[0], "NONE", torch.bfloat16, layout=layout, out_dtype=torch.float32
    )


def test_forward_strided_token_and_column_major_output(rng):
    experts, rows, k, n, off = shapes.CI[0]
    token = rng.rand((1, rows, 2 * k), torch.float16)[:, :, ::2]  # not packed
    weight = _weight(rng, experts, k, n, torch.float16)
    g, feeds, out = _graph(token, weight, _offsets(off))
    out.set_stride([rows * n, 1, rows])  # column-major output
    got = check_engine(g, feeds, [out], ID, SMALL, n=k)[out]
    assert got.stride() == (rows * n, 1, rows)
    assert_close(got, _torch_loop(token, weight, off, "NONE"), torch.float16, k)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", shapes.CI, ids=[f"c{i}" for i in range(len(shapes.CI))])
def test_backward_against_reference(rng, case, dtype):
    experts, rows, k, n, off = case
    dy, token = rng.rand((1, rows, n), dtype), rng.rand((1, rows, k), dtype)
    g, feeds, dw = _bwd_graph(dy, token, _offsets(off))
    msg = repro("moe_grouped_matmul_bwd", [case[:4]], str(dtype), rng.seed, off=off)
    got = check_engine(g, feeds, [dw], ID, None, n=rows, msg=msg)[dw]
    assert dw.get_stride() == [k * n, 1, k]  # column-major in K x N, as cudnn-frontend
    empty = [i for i, (a, b) in enumerate(zip(off, list(off[1:]) + [rows])) if a == b]
    assert all(bool((got[i] == 0).all()) for i in empty)


def test_backward_many_row_steps_and_tiles(rng):
    dy, token = rng.rand((1, 70, 21), torch.bfloat16), rng.rand((1, 70, 35), torch.bfloat16)
    g, feeds, dw = _bwd_graph(dy, token, _offsets([2, 50]), torch.float32)
    check_engine(g, feeds, [dw], ID, SMALL, n=70)


def test_backward_without_rows_writes_zeros(rng):
    dy, token = torch.empty(1, 0, 5), torch.empty(1, 0, 7)
    g, feeds, dw = _bwd_graph(dy, token, _offsets([0, 0, 0]))
    got = check_engine(g, feeds, [dw], ID, None)[dw]
    assert got.shape == (3, 7, 5) and bool((got == 0).all())


def test_forward_without_rows_writes_nothing():
    token, weight = torch.empty(1, 0, 8), torch.ones(2, 8, 4)
    g, feeds, out = _graph(token, weight, _offsets([0, 0]))
    got = check_engine(g, feeds, [out], ID, None)[out]
    assert got.shape == (1, 0, 4)


# ---- data out of range: masked, nothing written outside the output ----------------------------
def _guarded_run(g, feeds, out, engine_id, fill=-7.0):
    """Run the plan of ``engine_id`` with the output a view of rows 2 .. M_out + 1 of a
    buffer two rows larger on each side, filled with ``fill``: (output, the guard rows)."""
    g.validate()
    g.create_execution_plan(engine_id, SMALL if engine_id == ID else {})
    g.check_support()
    g.build_plans()
    rows, n = out.get_dim()[1], out.get_dim()[2]
    big = torch.full((1, rows + 4, n), fill, dtype=torch.float32)
    view = big[:, 2 : 2 + rows]
    g.execute({**feeds, out: view}, None)
    return view, torch.cat([big[:, :2], big[:, -2:]], 1)


@pytest.mark.parametrize(
    "mode,off,bad",
    [
        ("NONE", [5, 2, 30], None),  # decreasing offsets, one past the rows
        ("GATHER", [0, 6], [0, 7, -1, 1000]),  # token indices outside [0, S)
        ("SCATTER", [-4, 9], [3, 11, -2, 50]),  # targets outside [0, M); an offset below 0
    ],
)
def test_data_out_of_range_is_masked(rng, mode, off, bad):
    """What the docs promise (ops/moe.py): offsets clamped to the rows, out-of-range
    indices skipped, nothing written outside the output; the engine as the reference."""
    case = (len(off), 12, 19, 9, off)
    token, weight, _, idx, ks, top_k = _case_inputs(rng, case, mode, torch.float32)
    if bad is not None:
        idx = idx.clone()
        idx[0, : len(bad), 0] = torch.tensor(bad, dtype=torch.int32)
    results = []
    for engine in (ID, 0):
        g, feeds, out = _graph(token, weight, _offsets(off), mode, idx, ks, top_k)
        got, guard = _guarded_run(g, feeds, out, engine)
        assert bool((guard == -7.0).all()), f"engine {engine} wrote outside the output"
        results.append(got.clone())
    assert_close(results[0], results[1], torch.float32, 19)
    assert bool((results[0] == -7.0).any()), "a row was to stay unwritten"


# ---- cudnn-frontend's graph, its experimental op, serialization ------------------------------
def test_cudnn_frontend_graph_with_flat_buffers(rng):
    """cudnn-frontend's test_moe_grouped_matmul on small sizes: the output's shape and
    row-major strides inferred, bf16 set on it, 1-D buffers bound (the weight column-major
    in H x N); both heuristics' plans."""
    experts, rows, hidden, n = 4, 30, 24, 20
    off = [0, 1, 2, 17]
    g = cudnn.pygraph(
        intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT
    )
    bf16 = cudnn.data_type.BFLOAT16
    tt = g.tensor(
        name="token", dim=[1, rows, hidden], stride=[rows * hidden, hidden, 1], data_type=bf16
    )
    tw = g.tensor(
        name="weight", dim=[experts, hidden, n], stride=[hidden * n, 1, hidden], data_type=bf16
    )
    to = g.tensor(
        name="fto", dim=[experts, 1, 1], stride=[1, 1, 1], data_type=cudnn.data_type.INT32
    )
    out = g.moe_grouped_matmul(
        tt, tw, to, mode=MODE.NONE, compute_data_type=cudnn.data_type.FLOAT, name="moe"
    )
    out.set_data_type(bf16).set_output(True)
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A])
    g.check_support()
    g.build_plans()
    assert out.get_dim() == [1, rows, n] and out.get_stride() == [rows * n, n, 1]
    assert g.get_plan_name_at_index(0).startswith("moe_grouped_matmul#56")
    token = rng.rand((rows * hidden,), torch.bfloat16)
    weight = rng.rand((experts * hidden * n,), torch.bfloat16)
    result = torch.full((rows * n,), float("nan"), dtype=torch.bfloat16)
    g.execute({tt: token, tw: weight, to: torch.tensor(off, dtype=torch.int32), out: result}, None)
    w = weight.view(experts, n, hidden).transpose(1, 2)
    want = _torch_loop(token.view(1, rows, hidden), w, off, "NONE")
    assert_close(result.view(1, rows, n), want, torch.bfloat16, hidden)


def test_serialized_graph_runs_alike(rng):
    token, weight, off, idx, ks, top_k = _case_inputs(rng, shapes.CI[0], "SCATTER", torch.float32)
    g, feeds, out = _graph(token, weight, _offsets(off), "SCATTER", idx, ks, top_k)
    g.build([cudnn.heur_mode.A])
    blob = g.serialize()
    g2 = cudnn.pygraph()
    g2.deserialize(blob)
    pack = {t.get_uid(): v for t, v in feeds.items()}
    a, b = (torch.full((1, token.shape[1], 19), float("nan")) for _ in range(2))
    g.execute({**feeds, out: a}, None)
    g2.execute({**pack, out.get_uid(): b}, None)
    assert torch.equal(a, b) and not bool(torch.isnan(a).any())


def _frontend_op():
    from opendnn.frontend.experimental.ops import moe_grouped_matmul

    return moe_grouped_matmul


@pytest.mark.parametrize("mode", ["none", "gather", "scatter"])
def test_experimental_op(rng, mode):
    """``from cudnn.experimental.ops import moe_grouped_matmul``: a new [1, M_out, N]
    tensor of token's type; one graph kept per configuration."""
    import sys

    op = _frontend_op()
    case = (4, 32, 24, 16, (0, 8, 16, 24))
    token, weight, off, idx, ks, top_k = _case_inputs(rng, case, mode.upper(), torch.float16)
    kw = {"token_index": idx, "token_ks": ks} if mode != "none" else {}
    y = op(token, weight, _offsets(off), mode=mode, top_k=TOP_K, **kw)
    assert y.dtype == torch.float16 and y.shape == (1, 32, 16)
    want = _torch_loop(token, weight, off, mode.upper(), idx, ks, TOP_K)
    assert_close(y, want, torch.float16, 24)
    cache = sys.modules["opendnn.frontend.experimental.ops.moe_grouped_matmul"]._graph_cache
    kept = len(cache)
    op(token, weight, _offsets(off), mode=mode, top_k=TOP_K, **kw)
    assert len(cache) == kept


def test_experimental_op_refuses_as_cudnn_frontend():
    op = _frontend_op()
    t, w, o = torch.ones(1, 4, 8), torch.ones(2, 8, 3), _offsets([0, 2])
    with pytest.raises(ValueError, match="Invalid mode 'sideways'"):
        op(t, w, o, mode="sideways")
    with pytest.raises(ValueError, match="GATHER mode requires token_index"):
        op(t, w, o, mode="gather")
    with pytest.raises(ValueError, match="SCATTER mode requires both"):
        op(t, w, o, token_index=torch.zeros(1, 4, 1, dtype=torch.int32), mode="scatter")


def test_experimental_op_fake_kernel():
    from torch._subclasses.fake_tensor import FakeTensorMode

    op = _frontend_op()
    with FakeTensorMode():
        t, w = (
            torch.empty(1, 6, 8, dtype=torch.bfloat16),
            torch.empty(3, 8, 5, dtype=torch.bfloat16),
        )
        idx = torch.empty(1, 10, 1, dtype=torch.int32)
        y = op(t, w, torch.empty(3, 1, 1, dtype=torch.int32), token_index=idx, mode="gather")
    assert y.shape == (1, 10, 5) and y.dtype == torch.bfloat16


# ---- bad graphs: typed errors naming the operation, the tensor and the rule ----------------------
def _tensors(g, token=(1, 6, 8), weight=(2, 8, 5), off=(2, 1, 1), off_type=None):
    f, i32 = cudnn.data_type.FLOAT, cudnn.data_type.INT32
    return (
        g.tensor(dim=list(token), data_type=f, name="tok"),
        g.tensor(dim=list(weight), data_type=f, name="w"),
        g.tensor(dim=list(off), data_type=i32 if off_type is None else off_type, name="fto"),
    )


def _index(g, rows, name="idx", dtype=None):
    return g.tensor(
        dim=[1, rows, 1], data_type=cudnn.data_type.INT32 if dtype is None else dtype, name=name
    )


@pytest.mark.parametrize(
    "build,exc,status,names",
    [
        (
            lambda g: g.moe_grouped_matmul(*_tensors(g, weight=(2, 7, 5)), name="m"),
            BadParamError,
            Status.BAD_PARAM_SHAPE_MISMATCH,
            ("moe_grouped_matmul 'm'", "w", "K 7 differs from TOKEN's 8"),
        ),
        (
            lambda g: g.moe_grouped_matmul(*_tensors(g, token=(2, 6, 8)), name="m"),
            BadParamError,
            Status.BAD_PARAM_SHAPE_MISMATCH,
            ("'m'", "tok", "TOKEN dims [2, 6, 8] must be [1, M, K]"),
        ),
        (
            lambda g: g.moe_grouped_matmul(*_tensors(g, off_type=cudnn.data_type.INT64), name="m"),
            UnsupportedParamError,
            Status.NOT_SUPPORTED_DATA_TYPE,
            ("'m'", "fto", "FIRST_TOKEN_OFFSET must be int32, is INT64"),
        ),
        (
            lambda g: g.moe_grouped_matmul(*_tensors(g, off=(3, 1, 1)), name="m"),
            BadParamError,
            Status.BAD_PARAM_SHAPE_MISMATCH,
            ("'m'", "fto", "3 groups: must be a multiple of the 2 experts"),
        ),
        (
            lambda g: g.moe_grouped_matmul(*_tensors(g, off=(2, 2)), name="m"),
            BadParamError,
            Status.BAD_PARAM_SHAPE_MISMATCH,
            ("'m'", "fto", "must be [G, 1, 1]"),
        ),
        (
            lambda g: g.moe_grouped_matmul(*_tensors(g), mode=MODE.GATHER, name="m"),
            BadParamError,
            Status.BAD_PARAM_NULL_POINTER,
            ("'m'", "TOKEN_INDEX", "GATHER mode needs a TOKEN_INDEX tensor"),
        ),
        (
            lambda g: g.moe_grouped_matmul(
                *_tensors(g), token_index=_index(g, 6), mode=MODE.SCATTER, top_k=2, name="m"
            ),
            BadParamError,
            Status.BAD_PARAM_NULL_POINTER,
            ("'m'", "TOKEN_KS", "SCATTER mode needs a TOKEN_KS tensor"),
        ),
        (
            lambda g: g.moe_grouped_matmul(
                *_tensors(g),
                token_index=_index(g, 6),
                token_ks=_index(g, 6, "ks"),
                mode=MODE.SCATTER,
                name="m",
            ),
            BadParamError,
            Status.BAD_PARAM_OUT_OF_BOUND,
            ("'m'", "top_k is 0: SCATTER mode needs top_k >= 1"),
        ),
        (
            lambda g: g.moe_grouped_matmul(
                *_tensors(g),
                token_index=_index(g, 6),
                token_ks=_index(g, 5, "ks"),
                mode=MODE.SCATTER,
                top_k=2,
                name="m",
            ),
            BadParamError,
            Status.BAD_PARAM_SHAPE_MISMATCH,
            ("'m'", "ks", "TOKEN_KS dims [1, 5, 1] must be [1, 6, 1]"),
        ),
        (
            lambda g: g.moe_grouped_matmul(
                *_tensors(g),
                token_index=_index(g, 9, dtype=cudnn.data_type.FLOAT),
                mode=MODE.GATHER,
                name="m",
            ),
            UnsupportedParamError,
            Status.NOT_SUPPORTED_DATA_TYPE,
            ("'m'", "idx", "TOKEN_INDEX must be int32, is FLOAT"),
        ),
        (
            lambda g: g.moe_grouped_matmul_bwd(
                g.tensor(dim=[1, 5, 3], name="dy"), *_tensors(g)[::2], name="b"
            ),
            BadParamError,
            Status.BAD_PARAM_SHAPE_MISMATCH,
            ("moe_grouped_matmul_bwd 'b'", "dy", "must have TOKEN's 6 rows"),
        ),
    ],
    ids=[
        "k-mismatch",
        "token-rank",
        "offset-type",
        "groups-not-batches",
        "offset-rank",
        "gather-without-index",
        "scatter-without-ks",
        "scatter-top-k",
        "ks-rows",
        "index-type",
        "bwd-rows",
    ],
)
def test_bad_graphs_raise_typed_errors(build, exc, status, names):
    g = cudnn.pygraph()
    out = build(g)
    out.set_output(True)
    expect_error(exc, status, g.validate, *names)


def test_unsupported_statuses_are_graph_not_supported_errors():
    """A NOT_SUPPORTED* rule is both errors (cudnn-frontend code catches the second)."""
    g = cudnn.pygraph()
    g.moe_grouped_matmul(*_tensors(g, off_type=cudnn.data_type.FLOAT), name="m")
    with pytest.raises(GraphNotSupportedError):
        g.validate()


def test_unused_routing_tensors_are_left_out_and_mode_names_taken(rng):
    """NONE mode takes no index: cuDNN sets only the mode's tensors, so a token_index
    given with it is no input of the node (binding it anyway is ignored)."""
    g = cudnn.pygraph()
    tok, w, off = _tensors(g)
    idx = _index(g, 6)
    out = g.moe_grouped_matmul(tok, w, off, token_index=idx, mode="none", name="m")
    out.set_output(True)
    g.validate()
    [node] = g.op_graph.nodes
    assert set(node.inputs) == {"TOKEN", "WEIGHT", "FIRST_TOKEN_OFFSET"}
    assert out.get_dim() == [1, 6, 5]


@pytest.mark.parametrize(
    "token_dtype,weight_dtype,reason",
    [
        (torch.float64, torch.float64, "float64 runs on the reference"),
        (torch.float32, torch.bfloat16, "TOKEN is FLOAT and WEIGHT BFLOAT16"),
    ],
)
def test_engine_declines_with_a_reason(token_dtype, weight_dtype, reason):
    g, _, _ = _graph(
        torch.empty(1, 4, 8, dtype=token_dtype),
        torch.empty(2, 8, 3, dtype=weight_dtype),
        _offsets([0, 2]),
    )
    g.validate()
    sup = MoeEngine().check_support(g.op_graph, Target())
    assert not sup.ok and reason in sup.reason


H100 = Target(
    device="cuda", name="H100", capability=(9, 0), num_sms=132, bandwidth=3.0e12,
    peak_flops_fp16=9.9e14, peak_flops_fp32=6.7e13,
)  # fmt: skip


def test_gpu_configs_fit_shared_memory_and_rank_by_the_cost_model():
    """On an sm_90 target every listed config fits shared memory and passes its own rules;
    a config that does not fit is declined with its reason."""
    e = MoeEngine()
    for dtype in (torch.bfloat16, torch.float32):
        g, _, _ = _graph(
            torch.empty(1, 2000, 520, dtype=dtype),
            torch.empty(36, 520, 248, dtype=dtype),
            _offsets(list(shapes.FRONTEND_OFFSETS)),
        )
        g.validate()
        configs = e.configs(g.op_graph, H100)
        assert configs and all(e.check_config(g.op_graph, c, H100).ok for c in configs)
        est = [e.estimate_seconds(g.op_graph, c, H100) for c in configs]
        assert est == sorted(est)
    big = EngineConfig.make(e, BLOCK_M=256, BLOCK_N=256, BLOCK_K=128, num_warps=8, num_stages=5)
    sup = e.check_config(g.op_graph, big, H100)
    assert not sup.ok and "bytes of shared memory" in sup.reason
