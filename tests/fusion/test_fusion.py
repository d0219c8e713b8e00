"""The runtime-fusion engine (generated Triton kernels, run by the interpreter on CPU
tensors) against the float64 reference engine on the same graph and inputs.

Every case forces a fusion plan (``create_execution_plan(1, knobs)``) and a reference plan
on one graph, runs both on the same fresh inputs with NaN-poisoned outputs, and compares.
"""

from __future__ import annotations

import pytest
import torch
from _util import (
    EMPTY_IDENTITY,
    FLOAT_DTYPES,
    FUSION_ID,
    FUSION_NAME,
    MODE_CASES,
    MODE_IDS,
    REDUCE_SHAPES,
    TORCH_TO_DT,
    assert_close,
    check_engine,
    coarsest,
    compare_plans,
    expect_error,
    nhwc,
    reduce_input,
    reduced_count,
    repro,
    run_plan,
)

import opendnn.frontend as cudnn
from opendnn.engines.fusion.engine import FusionEngine
from opendnn.enums import DataType, HeurMode, ReductionMode
from opendnn.errors import GraphNotSupportedError, Status

R = ReductionMode


def _graph(**kw):
    kw.setdefault("intermediate_data_type", DataType.FLOAT)
    kw.setdefault("compute_data_type", DataType.FLOAT)
    return cudnn.pygraph(**kw)


def _dt(d):
    return str(d).replace("torch.", "")


# ---- every pointwise mode, fp32 / fp16 / bf16 in and out -------------------------------------
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=_dt)
@pytest.mark.parametrize("case", MODE_CASES, ids=MODE_IDS)
def test_pointwise_mode(case, dtype, rng):
    shape = (3, 37)
    xs = case.inputs(rng, shape, dtype)
    g = _graph()
    ts = [g.tensor_like(x, name=f"in{i}") for i, x in enumerate(xs)]
    y = case.build(g, ts)
    y.set_output(True).set_name("y").set_data_type(dtype)
    check_engine(
        g,
        dict(zip(ts, xs)),
        [y],
        FUSION_ID,
        msg=repro(case.id, [shape] * len(xs), _dt(dtype), rng.seed),
    )


@pytest.mark.parametrize("case", MODE_CASES, ids=MODE_IDS)
def test_pointwise_mode_float64(case, rng):
    """DOUBLE tensors make the generated kernel compute in float64."""
    shape = (2, 19)
    xs = case.inputs(rng, shape, torch.float64)
    g = cudnn.pygraph()
    ts = [g.tensor_like(x) for x in xs]
    y = case.build(g, ts)
    y.set_output(True)
    check_engine(
        g,
        dict(zip(ts, xs)),
        [y],
        FUSION_ID,
        dtype=torch.float64,
        msg=repro(case.id, [shape] * len(xs), "float64", rng.seed),
    )


@pytest.mark.parametrize("case", MODE_CASES, ids=MODE_IDS)
def test_pointwise_mode_strided_and_broadcast(case, rng):
    """The first operand a transposed view, the others broadcast from [1, 1, 7] or
    [4, 1, 1]; the output in a permuted (non-row-major) layout (all of shape (4, 3, 7))."""
    full = case.inputs(rng, (7, 3, 4), torch.float32)
    xs = [full[0].permute(2, 1, 0)]  # (4, 3, 7), reversed strides
    for i, t in enumerate(full[1:]):
        t = t.permute(2, 1, 0)
        xs.append(t[:1, :1, :].contiguous() if i == 0 else t[:, :1, :1].contiguous())
    g = _graph()
    ts = [g.tensor_like(x) for x in xs]
    y = case.build(g, ts)
    y.set_output(True).set_stride([1, 28, 4])
    check_engine(
        g,
        dict(zip(ts, xs)),
        [y],
        FUSION_ID,
        msg=repro(
            case.id,
            [tuple(x.shape) for x in xs],
            "float32",
            rng.seed,
            strides=[x.stride() for x in xs],
        ),
    )


@pytest.mark.parametrize("case", [c for c in MODE_CASES if c.boolean], ids=lambda c: c.id)
def test_pointwise_boolean_output(case, rng):
    shape = (5, 13)
    xs = case.inputs(rng, shape, torch.float32)
    g = _graph()
    ts = [g.tensor_like(x) for x in xs]
    y = case.build(g, ts)
    y.set_output(True).set_data_type(DataType.BOOLEAN)
    out = check_engine(
        g, dict(zip(ts, xs)), [y], FUSION_ID, msg=repro(case.id, [shape], "float32->bool", rng.seed)
    )[y]
    assert out.dtype == torch.bool
    assert torch.equal(out, case.torch_fn(*[x.double() for x in xs]) != 0)


def test_boolean_inputs_select_and_logic(rng):
    shape = (4, 9)
    a, b = rng.rand(shape), rng.rand(shape)
    m1, m2 = rng.bools(shape), rng.bools(shape)
    g = _graph()
    A, B, M1, M2 = (g.tensor_like(t) for t in (a, b, m1, m2))
    sel = g.binary_select(A, B, g.logical_and(M1, g.logical_not(M2)))
    sel.set_output(True)
    any_ = g.logical_or(M1, M2)
    any_.set_output(True).set_data_type(DataType.BOOLEAN)
    outs = check_engine(
        g,
        {A: a, B: b, M1: m1, M2: m2},
        [sel, any_],
        FUSION_ID,
        msg=repro("select(and(m1, not m2))", [shape], "bool", rng.seed),
    )
    assert torch.equal(outs[sel], torch.where(m1 & ~m2, a, b))
    assert torch.equal(outs[any_], m1 | m2)


@pytest.mark.parametrize(
    "in_dtype,out_dtype",
    [
        (torch.float16, torch.float32),
        (torch.bfloat16, torch.float16),
        (torch.float32, torch.bfloat16),
        (torch.float32, torch.float16),
        (torch.int8, torch.float32),
        (torch.uint8, torch.float16),
        (torch.float32, torch.float64),
    ],
    ids=lambda d: _dt(d),
)
def test_type_conversion_in_and_out(in_dtype, out_dtype, rng):
    shape = (7, 11)
    if in_dtype.is_floating_point:
        a, b = rng.rand(shape, in_dtype), rng.rand(shape, in_dtype)
    else:
        lo = 1 if in_dtype == torch.uint8 else -9
        a, b = rng.ints(shape, lo, 10, in_dtype), rng.ints(shape, lo, 10, in_dtype)
    g = _graph()
    A, B = g.tensor_like(a), g.tensor_like(b)
    y = g.mul(g.add(A, B), A)
    y.set_output(True).set_data_type(out_dtype)
    check_engine(
        g,
        {A: a, B: b},
        [y],
        FUSION_ID,
        dtype=coarsest(out_dtype, torch.float32),
        msg=repro("(a+b)*a", [shape], f"{_dt(in_dtype)}->{_dt(out_dtype)}", rng.seed),
    )


def test_double_graph_computes_in_float64(rng):
    shape = (4, 33)
    a, b = rng.rand(shape, torch.float64), rng.rand(shape, torch.float64)
    g = cudnn.pygraph()
    A, B = g.tensor_like(a), g.tensor_like(b)
    y = g.gelu(g.div(g.exp(A), g.add(g.abs(B), g.abs(A))))
    y.set_output(True)
    out = check_engine(
        g,
        {A: a, B: b},
        [y],
        FUSION_ID,
        dtype=torch.float64,
        msg=repro("gelu(exp(a)/(|b|+|a|))", [shape], "float64", rng.seed),
    )[y]
    assert out.dtype == torch.float64


@pytest.mark.parametrize("inter", [torch.float16, torch.bfloat16], ids=_dt)
def test_reduced_precision_intermediates(inter, rng):
    """Virtual tensors of a HALF / BFLOAT16 intermediate type are rounded to it (the
    reference keeps them in float64): the tolerance is the intermediate type's."""
    shape = (6, 19)
    a, b = rng.rand(shape), rng.rand(shape)
    g = _graph(intermediate_data_type=TORCH_TO_DT[inter])
    A, B = g.tensor_like(a), g.tensor_like(b)
    y = g.sigmoid(g.mul(g.add(A, B), B))
    y.set_output(True)
    check_engine(
        g,
        {A: a, B: b},
        [y],
        FUSION_ID,
        dtype=inter,
        n=3,
        msg=repro("sigmoid((a+b)*b)", [shape], f"inter={_dt(inter)}", rng.seed),
    )


# ---- multi-node DAGs -----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=_dt)
def test_seed_sigmoid_a_plus_b_times_c(dtype, rng):
    shape = (9, 31)
    a, b, c = (rng.rand(shape, dtype) for _ in range(3))
    g = _graph(io_data_type=TORCH_TO_DT[dtype])
    A, B, C = g.tensor_like(a), g.tensor_like(b), g.tensor_like(c)
    y = g.sigmoid(g.add(A, g.mul(B, C)))
    y.set_output(True)
    g.build([HeurMode.A])
    assert g.get_plan_name_at_index(0).startswith(FUSION_NAME)
    out = torch.full(shape, float("nan"), dtype=dtype)
    g.execute({A: a, B: b, C: c, y: out}, None)
    want = torch.sigmoid(a.double() + b.double() * c.double())
    assert_close(out, want, dtype, n=2, msg=repro("sigmoid(a+b*c)", [shape], _dt(dtype), rng.seed))
    check_engine(
        g,
        {A: a, B: b, C: c},
        [y],
        FUSION_ID,
        msg=repro("sigmoid(a+b*c)", [shape], _dt(dtype), rng.seed),
    )


def test_six_op_chain(rng):
    shape = (5, 23)
    a, b = rng.rand(shape), rng.rand((1, 23))
    g = _graph()
    A, B = g.tensor_like(a), g.tensor_like(b)
    t = g.mul(A, B)
    t = g.add(t, A)
    t = g.tanh(t)
    t = g.scale(t, B)
    t = g.exp(t)
    y = g.sub(t, A)
    y.set_output(True)
    g.validate()
    assert len(g.op_graph.nodes) == 6
    check_engine(
        g,
        {A: a, B: b},
        [y],
        FUSION_ID,
        n=6,
        msg=repro("six-op chain", [shape, (1, 23)], "float32", rng.seed),
    )


def test_diamond_and_two_outputs(rng):
    shape = (4, 3, 5)
    a, b = rng.rand(shape), rng.rand((1, 3, 1))
    g = _graph()
    A, B = g.tensor_like(a), g.tensor_like(b)
    mid = g.bias(A, B)  # one virtual tensor ...
    left = g.sigmoid(mid)  # ... feeds two nodes
    right = g.abs(mid)
    y = g.mul(left, right)
    y.set_output(True).set_name("y")
    z = g.neg(right)
    z.set_output(True).set_name("z").set_data_type(DataType.HALF)
    mid.set_output(True).set_name("mid")  # an intermediate that is also an output
    outs = check_engine(
        g,
        {A: a, B: b},
        [y, z, mid],
        FUSION_ID,
        n=3,
        msg=repro("diamond", [shape, (1, 3, 1)], "float32", rng.seed),
    )
    m = a.double() + b.double()
    assert_close(outs[y], torch.sigmoid(m) * m.abs(), torch.float32, n=3)
    assert_close(outs[z], -m.abs(), torch.float16)


# ---- shapes and layouts --------------------------------------------------------------------------
SHAPE_CASES = [
    ((7,), (7,)),
    ((3, 5, 7), (3, 5, 7)),
    ((3, 1), (1, 4)),  # outer-product broadcast
    ((5,), (3, 5)),  # rank broadcast
    ((2, 3, 4, 5), (1, 3, 1, 1)),  # NCHW bias
    ((1, 1, 1), (1, 1, 1)),
    ((1,), (1,)),
    ((0, 4), (0, 4)),
    ((3, 0, 2), (1, 0, 1)),
    ((17, 61), (17, 61)),  # more than one 1024-block
    ((2, 1, 3, 1, 2, 1, 3, 2), (2, 1, 3, 1, 2, 1, 3, 2)),  # 8 dims
]


@pytest.mark.parametrize("shapes", SHAPE_CASES, ids=lambda s: f"{s[0]}*{s[1]}")
def test_shapes_and_broadcasting(shapes, rng):
    a, b = rng.rand(shapes[0]), rng.rand(shapes[1])
    g = _graph()
    A, B = g.tensor_like(a), g.tensor_like(b)
    y = g.swish(g.sub(A, B))
    y.set_output(True)
    out = check_engine(
        g, {A: a, B: b}, [y], FUSION_ID, msg=repro("swish(a-b)", list(shapes), "float32", rng.seed)
    )[y]
    d = a.double() - b.double()
    assert_close(out, d * torch.sigmoid(d), torch.float32, n=2)


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=_dt)
def test_nchw_nhwc_bias_activation(layout, dtype, rng):
    x = rng.rand((2, 5, 3, 7), dtype)
    x = nhwc(x) if layout == "nhwc" else x
    s, b = rng.rand((1, 5, 1, 1), dtype), rng.rand((1, 5, 1, 1), dtype)
    g = _graph()
    X, S, B = g.tensor_like(x), g.tensor_like(s), g.tensor_like(b)
    y = g.gelu(g.bias(g.scale(X, S), B))
    y.set_output(True)
    g.validate()
    assert tuple(y.get_stride()) == x.stride()  # the output follows the input layout
    out = check_engine(
        g,
        {X: x, S: s, B: b},
        [y],
        FUSION_ID,
        msg=repro("gelu(x*s+b)", [(2, 5, 3, 7), (1, 5, 1, 1)], _dt(dtype), rng.seed, layout=layout),
    )[y]
    assert out.stride() == x.stride()


def test_non_packed_input_views(rng):
    base = rng.rand((8, 13))
    a = base[1:7:2, 3:12]  # (3, 9), strides (26, 1)
    bt = rng.rand((9, 3)).t()  # (3, 9), strides (1, 3)
    c = rng.rand((3, 9, 2))[:, :, 1]  # (3, 9), strides (18, 2)
    g = _graph()
    A, B, C = g.tensor_like(a), g.tensor_like(bt), g.tensor_like(c)
    y = g.add(g.mul(A, B), C)
    y.set_output(True)
    check_engine(
        g,
        {A: a, B: bt, C: c},
        [y],
        FUSION_ID,
        msg=repro("a*b+c strided", [(3, 9)], "float32", rng.seed),
    )


@pytest.mark.parametrize("stride", [[1, 5], [20, 2], [40, 3]])
def test_non_packed_output_strides(stride, rng):
    a = rng.rand((5, 7))
    g = _graph()
    A = g.tensor_like(a)
    y = g.cos(A)
    y.set_output(True).set_stride(stride)
    out = check_engine(
        g,
        {A: a},
        [y],
        FUSION_ID,
        msg=repro("cos -> strided out", [(5, 7)], "float32", rng.seed, stride=stride),
    )[y]
    assert list(out.stride()) == stride


def test_gen_index_on_a_packed_collapsible_tensor(rng):
    """gen_index's axis must stay a separate index even where every tensor is packed
    (where the code generator would otherwise merge the dimensions)."""
    x = rng.rand((3, 4, 5))
    g = _graph()
    X = g.tensor_like(x)
    i0, i1, i2 = (g.gen_index(X, axis=k) for k in range(3))
    y = g.add(g.mul(i0, X), g.add(g.mul(i1, X), i2))
    y.set_output(True)
    out = check_engine(
        g, {X: x}, [y], FUSION_ID, msg=repro("gen_index", [(3, 4, 5)], "float32", rng.seed)
    )[y]
    ii = torch.meshgrid(*[torch.arange(n, dtype=torch.float64) for n in (3, 4, 5)], indexing="ij")
    assert_close(out, ii[0] * x.double() + (ii[1] * x.double() + ii[2]), torch.float32, n=3)


def test_in_place_single_node(rng):
    x = rng.rand((6, 7))
    g = _graph()
    X = g.tensor_like(x).set_uid(3)
    y = g.tanh(X)
    y.set_uid(3).set_output(True)
    g.validate()
    g.create_execution_plan(FUSION_ID, {})
    buf = x.clone()
    g.execute({3: buf}, None)
    assert_close(buf, torch.tanh(x.double()), torch.float32)


# ---- pass-by-value scalars -------------------------------------------------------------------
def test_pass_by_value_tensor_scalars(rng):
    x = rng.rand((4, 10))
    g = _graph()
    X = g.tensor_like(x)
    S = g.tensor_like(torch.tensor(2.0))
    T = g.tensor_like(torch.tensor(-0.75, dtype=torch.float32))
    y = g.add(g.mul(X, S), T)
    y.set_output(True)
    assert S.get_is_pass_by_value() and T.get_is_pass_by_value()
    outs = check_engine(
        g,
        {X: x, S: torch.tensor(2.0), T: -0.75},
        [y],
        FUSION_ID,
        msg=repro("x*s+t", [(4, 10)], "float32", rng.seed),
    )
    assert_close(outs[y], x.double() * 2.0 - 0.75, torch.float32)
    out = torch.full((4, 10), float("nan"))
    g.execute_plan_at_index({X: x, S: 3.5, T: 1.0, y: out}, None, 1)  # new values, same plan
    assert_close(out, x.double() * 3.5 + 1.0, torch.float32)


@pytest.mark.parametrize("scalar", [2.0, 3], ids=["float", "int"])
def test_pass_by_value_python_numbers(scalar, rng):
    """``g.mul(x, 2.0)``: a Python number becomes a pass-by-value scalar whose value the
    graph knows; the user has no tensor to bind for it."""
    x = rng.rand((4, 10))
    g = _graph()
    X = g.tensor_like(x)
    y = g.add(g.mul(X, scalar), 1.0)
    y.set_output(True)
    g.build([HeurMode.A])
    out = torch.full((4, 10), float("nan"))
    g.execute({X: x, y: out}, None)
    assert_close(
        out,
        x.double() * scalar + 1.0,
        torch.float32,
        msg=repro(f"x*{scalar}+1", [(4, 10)], "float32", rng.seed),
    )


# ---- reductions -------------------------------------------------------------------------------
@pytest.mark.parametrize("shapes", REDUCE_SHAPES, ids=lambda s: f"{s[0]}->{s[1]}")
@pytest.mark.parametrize("mode", list(ReductionMode), ids=lambda m: m.name)
def test_reduction_modes_and_axes(mode, shapes, rng):
    xs, ys = shapes
    x = reduce_input(rng, mode, xs, torch.float32)
    g = _graph()
    X = g.tensor_like(x)
    y = g.reduction(X, mode)
    y.set_dim(list(ys)).set_output(True)
    check_engine(
        g,
        {X: x},
        [y],
        FUSION_ID,
        n=reduced_count(xs, ys),
        msg=repro(f"reduction {mode.name}", [xs, ys], "float32", rng.seed),
    )


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=_dt)
@pytest.mark.parametrize("mode", [R.ADD, R.MAX, R.AVG, R.NORM2], ids=lambda m: m.name)
def test_reduction_with_pointwise_prologue(mode, dtype, rng):
    shape = (6, 45)
    x, w = rng.rand(shape, dtype), rng.rand((1, 45), dtype)
    b = rng.rand((6, 1), dtype)
    g = _graph()
    X, W, B = g.tensor_like(x), g.tensor_like(w), g.tensor_like(b)
    y = g.reduction(g.relu(g.add(g.mul(X, W), B)), mode)
    y.set_dim([6, 1]).set_output(True).set_data_type(dtype)
    check_engine(
        g,
        {X: x, W: w, B: b},
        [y],
        FUSION_ID,
        n=45,
        msg=repro(f"reduction {mode.name}(relu(x*w+b))", [shape], _dt(dtype), rng.seed),
    )


@pytest.mark.parametrize("ydims", [[1, 5, 1, 1], [2, 1, 3, 1], [1, 1, 1, 1]])
def test_reduction_nhwc_and_strided_inputs(ydims, rng):
    x = nhwc(rng.rand((2, 5, 3, 4)))
    g = _graph()
    X = g.tensor_like(x)
    y = g.reduction(g.abs(X), ReductionMode.ADD)
    y.set_dim(ydims).set_output(True)
    check_engine(
        g,
        {X: x},
        [y],
        FUSION_ID,
        n=120,
        msg=repro("sum(|x|) nhwc", [(2, 5, 3, 4), ydims], "float32", rng.seed),
    )
    xt = rng.rand((4, 3, 5, 2)).permute(3, 2, 1, 0)  # (2, 5, 3, 4), reversed strides
    g2 = _graph()
    X2 = g2.tensor_like(xt)
    y2 = g2.reduction(X2, ReductionMode.MAX)
    y2.set_dim(ydims).set_output(True)
    check_engine(
        g2,
        {X2: xt},
        [y2],
        FUSION_ID,
        msg=repro("max(x) permuted", [(2, 5, 3, 4), ydims], "float32", rng.seed),
    )


def test_reduction_with_pointwise_output_in_the_same_kernel(rng):
    x = rng.rand((7, 30))
    g = _graph()
    X = g.tensor_like(x)
    e = g.exp(X)
    e.set_output(True).set_name("e")
    s = g.reduction(e, ReductionMode.ADD)
    s.set_dim([7, 1]).set_output(True).set_name("s")
    m = g.reduction(X, ReductionMode.MIN)
    m.set_dim([7, 1]).set_output(True).set_name("m")
    check_engine(
        g,
        {X: x},
        [e, s, m],
        FUSION_ID,
        n=30,
        msg=repro("exp + sum + min", [(7, 30)], "float32", rng.seed),
    )


def test_reduction_output_strides_and_type(rng):
    x = rng.rand((4, 6, 5), torch.bfloat16)
    g = _graph()
    X = g.tensor_like(x)
    y = g.reduction(X, ReductionMode.AMAX)
    y.set_dim([4, 1, 5]).set_stride([1, 1, 4]).set_output(True).set_data_type(DataType.HALF)
    out = check_engine(
        g,
        {X: x},
        [y],
        FUSION_ID,
        msg=repro("amax -> strided half", [(4, 6, 5)], "bfloat16", rng.seed),
    )[y]
    assert out.stride() == (1, 1, 4) and out.dtype == torch.float16


def test_gen_index_inside_a_reduction(rng):
    x = rng.rand((5, 8))
    g = _graph()
    X = g.tensor_like(x)
    y = g.reduction(g.mul(g.gen_index(X, axis=1), X), ReductionMode.ADD)
    y.set_dim([5, 1]).set_output(True)
    out = check_engine(
        g, {X: x}, [y], FUSION_ID, n=8, msg=repro("sum(j * x)", [(5, 8)], "float32", rng.seed)
    )[y]
    want = (torch.arange(8, dtype=torch.float64) * x.double()).sum(1, keepdim=True)
    assert_close(out, want, torch.float32, n=8)


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=_dt)
def test_genstats(layout, dtype, rng):
    x = rng.rand((3, 4, 5, 6), dtype)
    x = nhwc(x) if layout == "nhwc" else x
    g = _graph()
    X = g.tensor_like(x)
    s, sq = g.genstats(X)
    s.set_output(True)
    sq.set_output(True)
    outs = check_engine(
        g,
        {X: x},
        [s, sq],
        FUSION_ID,
        n=90,
        msg=repro("genstats", [(3, 4, 5, 6)], _dt(dtype), rng.seed, layout=layout),
    )
    xd = x.double()
    assert_close(outs[s], xd.sum((0, 2, 3), keepdim=True), torch.float32, n=90)
    assert_close(outs[sq], (xd * xd).sum((0, 2, 3), keepdim=True), torch.float32, n=90)


@pytest.mark.parametrize("mode", list(ReductionMode), ids=lambda m: m.name)
@pytest.mark.parametrize(
    "knobs",
    [
        dict(SPLIT=4, BLOCK_RED=8, BLOCK_KEPT=4),
        dict(SPLIT=2, BLOCK_RED=16, BLOCK_KEPT=1),
        dict(SPLIT=8, BLOCK_RED=8, BLOCK_KEPT=64, num_warps=2),
        dict(SPLIT=3, BLOCK_RED=8, BLOCK_KEPT=2),  # slices of 4 and 3 tiles, the last masked
        dict(SPLIT=6, BLOCK_RED=2, BLOCK_KEPT=4),
    ],
    ids=lambda k: "-".join(f"{a}{b}" for a, b in k.items()),
)
def test_split_reduction_by_forced_knobs(mode, knobs, rng):
    shape = (5, 77)
    x = reduce_input(rng, mode, shape, torch.float32)
    g = _graph()
    X = g.tensor_like(x)
    y = g.reduction(g.identity(X), mode)
    y.set_dim([5, 1]).set_output(True)
    check_engine(
        g,
        {X: x},
        [y],
        FUSION_ID,
        knobs,
        n=77,
        msg=repro(f"split reduction {mode.name}", [shape], "float32", rng.seed, knobs=knobs),
    )
    assert g.get_plan_name_at_index(1) == (
        f"{FUSION_NAME}#{FUSION_ID}{{"
        + ",".join(f"{k}={v}" for k, v in sorted({**_default_knobs(), **knobs}.items()))
        + "}"
    )
    assert g.get_workspace_size_plan_at_index(1) > 0


def _default_knobs():
    return {k.name: k.default for k in FusionEngine().knob_space()}


def test_split_reduction_columns_and_genstats(rng):
    x = rng.rand((40, 6))
    g = _graph()
    X = g.tensor_like(x)
    y = g.reduction(X, ReductionMode.NORM2)
    y.set_dim([1, 6]).set_output(True)
    check_engine(
        g,
        {X: x},
        [y],
        FUSION_ID,
        dict(SPLIT=4, BLOCK_RED=8, BLOCK_KEPT=2),
        n=40,
        msg=repro("split norm2 columns", [(40, 6)], "float32", rng.seed),
    )
    x4 = nhwc(rng.rand((4, 3, 5, 5)))
    g2 = _graph()
    X4 = g2.tensor_like(x4)
    s, sq = g2.genstats(X4)
    check_engine(
        g2,
        {X4: x4},
        [s, sq],
        FUSION_ID,
        dict(SPLIT=16, BLOCK_RED=8, BLOCK_KEPT=4),
        n=100,
        msg=repro("split genstats nhwc", [(4, 3, 5, 5)], "float32", rng.seed),
    )


def test_split_reduction_with_pointwise_output(rng):
    x = rng.rand((3, 50))
    g = _graph()
    X = g.tensor_like(x)
    e = g.sigmoid(X)
    e.set_output(True)
    y = g.reduction(e, ReductionMode.AVG)
    y.set_dim([3, 1]).set_output(True)
    check_engine(
        g,
        {X: x},
        [e, y],
        FUSION_ID,
        dict(SPLIT=4, BLOCK_RED=8, BLOCK_KEPT=4),
        n=50,
        msg=repro("split avg(sigmoid) + sigmoid out", [(3, 50)], "float32", rng.seed),
    )


@pytest.mark.parametrize(
    "knobs",
    [dict(BLOCK=256, num_warps=1), dict(BLOCK=4096, num_warps=8)],
    ids=["block256", "block4096"],
)
def test_pointwise_knobs(knobs, rng):
    shape = (17, 61)
    a, b = rng.rand(shape), rng.rand((17, 1))
    g = _graph()
    A, B = g.tensor_like(a), g.tensor_like(b)
    y = g.elu(g.div(A, B), alpha=0.7)
    y.set_output(True)
    check_engine(
        g,
        {A: a, B: b},
        [y],
        FUSION_ID,
        knobs,
        msg=repro("elu(a/b)", [shape, (17, 1)], "float32", rng.seed, knobs=knobs),
    )


# ---- zero-size reductions -----------------------------------------------------------------------
@pytest.mark.parametrize("mode", list(ReductionMode), ids=lambda m: m.name)
def test_reduction_over_an_empty_axis(mode):
    g = _graph()
    x = torch.empty(3, 0)
    X = g.tensor_like(x)
    y = g.reduction(X, mode)
    y.set_dim([3, 1]).set_output(True)
    g.validate()
    g.create_execution_plan(FUSION_ID, {})
    out = run_plan(g, {X: x}, [y], 0, 12345.0)[y]  # a non-NaN poison: AVG gives NaN
    want = torch.full((3, 1), EMPTY_IDENTITY[mode], dtype=torch.float64)
    assert_close(out, want, torch.float32, msg=f"[repro] reduction {mode.name} of (3, 0)")


@pytest.mark.parametrize(
    "xdims,ydims", [((0, 5), (0, 1)), ((0, 5), (1, 5)), ((4, 0, 3), (4, 1, 1))]
)
def test_reduction_zero_size(xdims, ydims):
    g = _graph()
    x = torch.empty(xdims)
    X = g.tensor_like(x)
    y = g.reduction(X, ReductionMode.ADD)
    y.set_dim(list(ydims)).set_output(True)
    g.validate()
    g.create_execution_plan(FUSION_ID, {})
    out = run_plan(g, {X: x}, [y], 0, float("nan"))[y]
    assert_close(
        out,
        torch.zeros(ydims, dtype=torch.float64),
        torch.float32,
        msg=f"[repro] sum {xdims}->{ydims}",
    )


# ---- what the engine declines -------------------------------------------------------------------
def _declines(g, frag):
    g.validate()
    s = FusionEngine().check_support(g.op_graph, g._target())
    assert not s.ok and frag in s.reason, s.reason
    e = expect_error(
        GraphNotSupportedError,
        Status.NOT_SUPPORTED,
        lambda: g.create_execution_plan(FUSION_ID, {}),
        "create_execution_plan",
        FUSION_NAME,
        frag,
    )
    return e


def test_declines_int32_with_a_reason_and_fallback_runs(rng):
    a, b = rng.ints((3, 5), -50, 50), rng.ints((3, 5), -50, 50)
    g = _graph()
    A, B = g.tensor_like(a, name="a32"), g.tensor_like(b)
    y = g.sub(A, B)
    y.set_output(True)
    _declines(g, "INT32")
    g.build([HeurMode.FALLBACK])
    out = torch.full((3, 5), 7, dtype=torch.int32)
    g.execute({A: a, B: b, y: out}, None)
    assert torch.equal(out, a - b)


def test_declines_a_reduction_result_consumed_inside_the_graph(rng):
    g = _graph()
    X = g.tensor([4, 6], [6, 1], DataType.FLOAT)
    r = g.reduction(X, ReductionMode.MAX)
    r.set_dim([4, 1])
    y = g.sub(X, r)
    y.set_output(True)
    _declines(g, "consumed inside the graph")


def test_declines_reductions_of_different_shapes():
    g = _graph()
    X = g.tensor([4, 6], [6, 1], DataType.FLOAT)
    r1 = g.reduction(X, ReductionMode.ADD)
    r1.set_dim([4, 1])
    r2 = g.reduction(X, ReductionMode.ADD)
    r2.set_dim([1, 6])
    _declines(g, "different output shapes")


def test_declines_matmul():
    g = _graph()
    A = g.tensor([4, 6], [6, 1], DataType.FLOAT)
    B = g.tensor([6, 3], [3, 1], DataType.FLOAT)
    g.matmul(A, B, name="mm")
    _declines(g, "not pointwise")


def test_rejects_unknown_knob_and_value():
    g = _graph()
    X = g.tensor([4, 6], [6, 1], DataType.FLOAT)
    g.exp(X)
    g.validate()
    expect_error(
        GraphNotSupportedError,
        Status.NOT_SUPPORTED,
        lambda: g.create_execution_plan(FUSION_ID, {"TILE": 3}),
        "TILE",
    )
    expect_error(
        GraphNotSupportedError,
        Status.NOT_SUPPORTED,
        lambda: g.create_execution_plan(FUSION_ID, {"BLOCK": 1000}),
        "BLOCK=1000",
    )


def test_knob_space_names():
    names = [k.name for k in FusionEngine().knob_space()]
    assert len(set(names)) == len(names)
    assert {"BLOCK", "BLOCK_KEPT", "BLOCK_RED", "SPLIT", "num_warps"} <= set(names)
    for k in FusionEngine().knob_space():
        assert k.default in k.values


# ---- more corners -------------------------------------------------------------------------------
def test_gen_index_of_a_broadcast_input(rng):
    """gen_index of a [1, 5] tensor along axis 0 is 0 everywhere, even when the graph's
    iteration space is [3, 5] because another operand is bigger."""
    a, b = rng.rand((3, 5)), rng.rand((1, 5))
    g = _graph()
    A, B = g.tensor_like(a), g.tensor_like(b)
    y = g.add(g.gen_index(B, axis=0), A)
    y.set_output(True)
    out = check_engine(
        g,
        {A: a, B: b},
        [y],
        FUSION_ID,
        msg=repro("gen_index([1,5], axis=0) + a[3,5]", [(3, 5), (1, 5)], "float32", rng.seed),
    )[y]
    assert torch.equal(out, a)


def test_boolean_output_of_arithmetic(rng):
    a, b = rng.rand((4, 9)), rng.rand((4, 9))
    b.view(-1)[::2] = a.view(-1)[::2]  # half the differences are exactly zero
    g = _graph()
    A, B = g.tensor_like(a), g.tensor_like(b)
    y = g.sub(A, B)
    y.set_output(True).set_data_type(DataType.BOOLEAN)
    out = check_engine(
        g, {A: a, B: b}, [y], FUSION_ID, msg=repro("bool(a-b)", [(4, 9)], "float32->bool", rng.seed)
    )[y]
    assert torch.equal(out, a != b)


def test_integer_output_truncates(rng):
    a = rng.rand((5, 7), high=3.3)
    g = _graph()
    A = g.tensor_like(a)
    y = g.mul(A, A)
    y.set_output(True).set_data_type(DataType.INT8)
    out = check_engine(
        g, {A: a}, [y], FUSION_ID, msg=repro("int8(a*a)", [(5, 7)], "float32->int8", rng.seed)
    )[y]
    assert torch.equal(out, torch.trunc(a.double() * a.double()).to(torch.int8))


def test_expanded_zero_stride_inputs(rng):
    a = rng.rand((1, 6)).expand(4, 6)  # dims (4, 6), strides (0, 1)
    b = rng.rand((4, 6))
    g = _graph()
    A, B = g.tensor_like(a), g.tensor_like(b)
    assert A.get_stride() == [0, 1]
    y = g.mul(A, B)
    y.set_output(True)
    check_engine(
        g, {A: a, B: b}, [y], FUSION_ID, msg=repro("expand(a)*b", [(4, 6)], "float32", rng.seed)
    )
    g2 = _graph()
    A2 = g2.tensor_like(a)
    r = g2.reduction(A2, ReductionMode.ADD)
    r.set_dim([1, 6]).set_output(True)
    check_engine(
        g2, {A2: a}, [r], FUSION_ID, n=4, msg=repro("sum(expand(a))", [(4, 6)], "float32", rng.seed)
    )


@pytest.mark.parametrize("xdims,ydims", [((1, 1), (1, 1)), ((1,), (1,)), ((4, 1), (1, 1))])
def test_reduction_of_single_element_tensors(xdims, ydims, rng):
    x = rng.rand(xdims)
    g = _graph()
    X = g.tensor_like(x)
    y = g.reduction(g.exp(X), ReductionMode.ADD)
    y.set_dim(list(ydims)).set_output(True)
    check_engine(
        g,
        {X: x},
        [y],
        FUSION_ID,
        n=4,
        msg=repro("sum(exp(x))", [xdims, ydims], "float32", rng.seed),
    )


def test_integer_input_reduction(rng):
    x = rng.ints((4, 6), -100, 100, torch.int8)
    g = _graph()
    X = g.tensor_like(x)
    y = g.reduction(X, ReductionMode.ADD)
    y.set_dim([4, 1]).set_output(True).set_data_type(DataType.FLOAT)
    out = check_engine(
        g, {X: x}, [y], FUSION_ID, msg=repro("sum(int8)", [(4, 6)], "int8", rng.seed)
    )[y]
    assert torch.equal(out, x.float().sum(1, keepdim=True))


def test_split_reduction_in_double(rng):
    x = rng.rand((3, 40), torch.float64)
    g = cudnn.pygraph()
    X = g.tensor_like(x)
    y = g.reduction(X, ReductionMode.NORM2)
    y.set_dim([3, 1]).set_output(True)
    check_engine(
        g,
        {X: x},
        [y],
        FUSION_ID,
        dict(SPLIT=4, BLOCK_RED=8),
        dtype=torch.float64,
        n=40,
        msg=repro("split norm2 float64", [(3, 40)], "float64", rng.seed),
    )


@pytest.mark.parametrize("mode", [R.MAX, R.MUL_NO_ZEROS, R.AVG], ids=lambda m: m.name)
def test_split_reduction_over_all_axes(mode, rng):
    x = reduce_input(rng, mode, (3, 4, 5), torch.float32)
    g = _graph()
    X = g.tensor_like(x)
    y = g.reduction(X, mode)
    y.set_dim([1, 1, 1]).set_output(True)
    check_engine(
        g,
        {X: x},
        [y],
        FUSION_ID,
        dict(SPLIT=4, BLOCK_RED=8, BLOCK_KEPT=1),
        n=60,
        msg=repro(f"split {mode.name} all axes", [(3, 4, 5)], "float32", rng.seed),
    )


@pytest.mark.parametrize("mode", list(ReductionMode), ids=lambda m: m.name)
def test_split_reduction_over_an_empty_axis(mode):
    g = _graph()
    x = torch.empty(3, 0)
    X = g.tensor_like(x)
    y = g.reduction(X, mode)
    y.set_dim([3, 1]).set_output(True)
    g.validate()
    g.create_execution_plan(FUSION_ID, dict(SPLIT=4, BLOCK_RED=8))
    out = run_plan(g, {X: x}, [y], 0, 12345.0)[y]
    want = torch.full((3, 1), EMPTY_IDENTITY[mode], dtype=torch.float64)
    assert_close(out, want, torch.float32, msg=f"[repro] split reduction {mode.name} of (3, 0)")


def test_half_pass_by_value_scalar(rng):
    x = rng.rand((3, 4), torch.float16)
    s = torch.tensor(1.5, dtype=torch.float16)
    g = _graph()
    X, S = g.tensor_like(x), g.tensor_like(s)
    y = g.mul(X, S)
    y.set_output(True)
    check_engine(
        g,
        {X: x, S: s},
        [y],
        FUSION_ID,
        msg=repro("x*s (half scalar)", [(3, 4)], "float16", rng.seed),
    )


def test_integer_pass_by_value_scalar(rng):
    """A CPU integer scalar (``tensor_like(torch.tensor(3))``) is passed by value: its
    integer type says nothing about the floating-point kernel, which can take it."""
    x = rng.rand((3, 4))
    g = _graph()
    X, S = g.tensor_like(x), g.tensor_like(torch.tensor(3))
    assert S.get_is_pass_by_value()
    y = g.mul(X, S)
    y.set_output(True)
    check_engine(
        g,
        {X: x, S: torch.tensor(3)},
        [y],
        FUSION_ID,
        msg=repro("x*3 (int64 scalar)", [(3, 4)], "float32", rng.seed),
    )


# ---- layout operations (read through views of graph inputs) -------------------------------------
def _layout_case(rng, kind, dtype=torch.float32):
    """(graph, feeds, outputs, torch result) for one layout-in-fusion case."""
    g = _graph()
    if kind == "transpose_add":
        x, b = rng.rand((2, 3, 5), dtype), rng.rand((5, 1, 3), dtype)
        X, B = g.tensor_like(x), g.tensor_like(b)
        y = g.add(g.transpose(X, [2, 0, 1]), B)
        want = x.double().permute(2, 0, 1) + b.double()
        feeds = {X: x, B: b}
    elif kind == "transpose_only":
        x = rng.rand((2, 3, 5), dtype)
        X = g.tensor_like(x)
        y = g.transpose(X, [2, 0, 1])
        want, feeds = x.double().permute(2, 0, 1), {X: x}
    elif kind == "transpose_nhwc":
        x = nhwc(rng.rand((2, 3, 4, 5), dtype))
        X = g.tensor_like(x)
        y = g.sigmoid(g.transpose(X, [0, 2, 3, 1]))
        want, feeds = torch.sigmoid(x.double().permute(0, 2, 3, 1)), {X: x}
    elif kind == "x_minus_xT":
        x = rng.rand((5, 5), dtype)
        X = g.tensor_like(x)
        y = g.sub(X, g.transpose(X, [1, 0]))
        want, feeds = x.double() - x.double().t(), {X: x}
    elif kind == "slice":
        x = rng.rand((6, 9), dtype)
        X = g.tensor_like(x)
        y = g.exp(g.slice(X, [(1, 5), (2, 9)]))
        want, feeds = x.double()[1:5, 2:9].exp(), {X: x}
    elif kind == "slice_broadcast":
        x, b = rng.rand((6, 9), dtype), rng.rand((1, 7), dtype)
        X, B = g.tensor_like(x), g.tensor_like(b)
        y = g.mul(g.slice(X, [(0, 6), (1, 8)]), B)
        want, feeds = x.double()[:, 1:8] * b.double(), {X: x, B: b}
    elif kind == "slice_empty":
        x = rng.rand((4, 5), dtype)
        X = g.tensor_like(x)
        y = g.exp(g.slice(X, [(2, 2), (0, 5)]))
        want, feeds = x.double()[2:2].exp(), {X: x}
    elif kind == "reshape_view":
        x = rng.rand((4, 6), dtype)
        X = g.tensor_like(x)
        r = g.reshape(X)
        r.set_dim([2, 2, 6])
        y = g.neg(r)
        want, feeds = -x.double().reshape(2, 2, 6), {X: x}
    elif kind == "concatenate":
        a, b, c = rng.rand((2, 3), dtype), rng.rand((2, 4), dtype), rng.rand((2, 1), dtype)
        A, B, C = g.tensor_like(a), g.tensor_like(b), g.tensor_like(c)
        y = g.relu(g.concatenate([A, B, C], axis=1))
        want, feeds = torch.relu(torch.cat([a, b, c], 1).double()), {A: a, B: b, C: c}
    elif kind == "concatenate_gen_index":
        a, b = rng.rand((2, 3), dtype), rng.rand((2, 4), dtype)
        A, B = g.tensor_like(a), g.tensor_like(b)
        c = g.concatenate([A, B], axis=1)
        y = g.add(c, g.gen_index(c, axis=1))
        want = torch.cat([a, b], 1).double() + torch.arange(7, dtype=torch.float64)
        feeds = {A: a, B: b}
    elif kind == "concatenate_max_reduction":
        a, b = rng.rand((3, 2, 4), dtype), rng.rand((3, 5, 4), dtype)
        A, B = g.tensor_like(a), g.tensor_like(b)
        y = g.reduction(g.concatenate([A, B], axis=1), ReductionMode.MAX)
        y.set_dim([3, 1, 4])
        want, feeds = torch.cat([a, b], 1).double().amax(1, keepdim=True), {A: a, B: b}
    else:
        raise AssertionError(kind)
    y.set_output(True)
    return g, feeds, y, want


LAYOUT_KINDS = [
    "transpose_add",
    "transpose_only",
    "transpose_nhwc",
    "x_minus_xT",
    "slice",
    "slice_broadcast",
    "slice_empty",
    "reshape_view",
    "concatenate",
    "concatenate_gen_index",
    "concatenate_max_reduction",
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=_dt)
@pytest.mark.parametrize("kind", LAYOUT_KINDS)
def test_layout_operations_fuse(kind, dtype, rng):
    g, feeds, y, want = _layout_case(rng, kind, dtype)
    msg = repro(kind, [tuple(v.shape) for v in feeds.values()], _dt(dtype), rng.seed)
    out = check_engine(g, feeds, [y], FUSION_ID, msg=msg)[y]
    assert_close(out, want, dtype, n=2, msg=msg)
    g2, feeds2, y2, _ = _layout_case(rng, kind, dtype)
    g2.build([HeurMode.A])
    assert g2.get_plan_name_at_index(0).startswith(FUSION_NAME), msg


def test_split_reduction_of_a_concatenation(rng):
    g, feeds, y, want = _layout_case(rng, "concatenate_max_reduction")
    out = check_engine(
        g,
        feeds,
        [y],
        FUSION_ID,
        dict(SPLIT=2, BLOCK_RED=8, BLOCK_KEPT=4),
        msg=repro("split max(concat)", [(3, 2, 4), (3, 5, 4)], "float32", rng.seed),
    )[y]
    assert_close(out, want, torch.float32)


@pytest.mark.parametrize("shape,new", [((6, 4), (24,)), ((5, 3, 4), (6, 10)), ((4, 1, 6), (3, 8))])
def test_reshape_that_is_not_a_view_copies_by_flat_index(rng, shape, new):
    """A transposed input has no flat view: the fused kernel reads X at Y's row-major
    flat index, unflattened over X's dims."""
    x = rng.rand(tuple(reversed(shape))).permute(*reversed(range(len(shape))))
    g = _graph()
    X = g.tensor_like(x)
    r = g.reshape(X, reshape_mode=cudnn.reshape_mode.LOGICAL)
    r.set_dim(list(new))
    y = g.neg(r)
    y.set_output(True)
    out = check_engine(
        g, {X: x}, [y], FUSION_ID, msg=repro("neg(reshape(x^T))", [shape], "float32", rng.seed)
    )
    assert torch.equal(out[y], -x.reshape(new))


def test_declines_non_view_reshape_into_a_reduction(rng):
    x = rng.rand((6, 4)).t()
    g = _graph()
    X = g.tensor_like(x)
    r = g.reshape(X, reshape_mode=cudnn.reshape_mode.LOGICAL)
    r.set_dim([2, 12])
    s = g.reduction(r, ReductionMode.ADD)
    s.set_dim([2, 1])
    s.set_output(True)
    _declines(g, "not a view cannot feed a fused reduction")
    g.build([HeurMode.A, HeurMode.FALLBACK])
    out = _against_last(g, {X: x}, s, repro("sum(reshape(x^T))", [(4, 6)], "float32", rng.seed))
    assert_close(out, x.reshape(2, 12).double().sum(1, keepdim=True), torch.float32, n=12)


def test_declines_layout_of_a_computed_tensor(rng):
    x = rng.rand((3, 4))
    g = _graph()
    X = g.tensor_like(x)
    y = g.transpose(g.exp(X), [1, 0])
    y.set_output(True)
    _declines(g, "computed in the graph")
    g.build([HeurMode.A, HeurMode.FALLBACK])
    out = _against_last(g, {X: x}, y, repro("exp(x)^T", [(3, 4)], "float32", rng.seed))
    assert_close(out, x.double().exp().t(), torch.float32)


def _against_last(g, feeds, y, msg):
    """Plan 0 against the reference plan at the end of the list."""
    return compare_plans(g, feeds, [y], 0, g.get_execution_plan_count() - 1, msg=msg)[y]


def test_declines_gen_index_beyond_float32_exactness():
    g = _graph()
    X = g.tensor([2, 2**24 + 2], [2**24 + 2, 1], DataType.FLOAT)  # never allocated
    y = g.gen_index(X, axis=1)
    y.set_output(True)
    _declines(g, "not exact in float32")


def test_boolean_mask_in_arithmetic(rng):
    x, m = rng.rand((5, 6)), rng.bools((5, 6))
    g = _graph()
    X, Mk = g.tensor_like(x), g.tensor_like(m)
    y = g.add(g.mul(X, Mk), Mk)  # bool reads as 1.0 / 0.0
    y.set_output(True)
    out = check_engine(
        g, {X: x, Mk: m}, [y], FUSION_ID, msg=repro("x*m+m", [(5, 6)], "float32,bool", rng.seed)
    )[y]
    assert_close(out, x.double() * m.double() + m.double(), torch.float32)


@pytest.mark.parametrize(
    "dtype,shape,want",
    [
        # [8 x 2048] bf16 tiles ([4 x 2048] float32), two programs per SM: 4 column blocks
        # x 66 slices on 132 SMs (docs/design/fusion.md)
        (torch.bfloat16, (8192, 8192), dict(BLOCK_KEPT=2048, BLOCK_RED=8, SPLIT=66, num_warps=8)),
        (torch.float32, (8192, 8192), dict(BLOCK_KEPT=2048, BLOCK_RED=4, SPLIT=66, num_warps=8)),
        # few rows: the partials stay under ~4% of the input's bytes
        (torch.float32, (64, 4096), dict(BLOCK_KEPT=2048, BLOCK_RED=4, SPLIT=2, num_warps=8)),
        # many column blocks fill the GPU without a split
        (torch.bfloat16, (16, 1 << 20), dict(BLOCK_KEPT=2048, BLOCK_RED=8, SPLIT=1, num_warps=8)),
    ],
    ids=["bf16-8192", "fp32-8192", "fp32-64rows", "bf16-wide"],
)
def test_h100_column_sum_knobs(dtype, shape, want):
    from opendnn.engines.base import Target

    h100 = Target(device="cuda", name="H100", capability=(9, 0), num_sms=132)
    g = _graph()
    dt = DataType.BFLOAT16 if dtype == torch.bfloat16 else DataType.FLOAT
    X = g.tensor(dim=list(shape), stride=[shape[1], 1], data_type=dt)
    y = g.reduction(X, ReductionMode.ADD)
    y.set_dim([1, shape[1]]).set_output(True)
    g.validate()
    configs = FusionEngine().configs(g.op_graph, h100)
    assert {k: v for k, v in configs[0].knob_dict.items() if k in want} == want
    if want["SPLIT"] > 1:  # the unsplit grid is offered second (benchmark mode)
        assert configs[1].knob_dict["SPLIT"] == 1


def test_h100_column_knobs_are_in_the_knob_space():
    """Five float32 inputs shrink the column tile (8192 / 5 elements): every config offered
    for an H100 stays inside the knob space (powers of two), so check_config accepts it (a
    batch norm backward's statistics once got BLOCK_RED=25)."""
    from opendnn.engines.base import Target

    h100 = Target(device="cuda", name="H100", capability=(9, 0), num_sms=132)
    g = _graph()
    a, b, c, d, e = (
        g.tensor(dim=[256, 64, 7, 7], stride=[64 * 49, 1, 64 * 7, 64], data_type=DataType.FLOAT)
        for _ in range(5)
    )
    y = g.reduction(g.sub(g.add(g.mul(a, b), g.mul(c, d)), e), ReductionMode.ADD)
    y.set_dim([1, 64, 1, 1]).set_output(True)
    g.validate()
    eng = FusionEngine()
    configs = eng.configs(g.op_graph, h100)
    assert configs
    for cfg in configs:
        assert eng.check_config(g.op_graph, cfg, h100).ok, cfg


# ---- found by bench/fuzz_fusion.py -------------------------------------------------------------
def _fused_1d(build, out_dtype=torch.float32, n=4, **gkw):
    """A graph ``build(g) -> (y, feeds)`` run by a forced fusion plan; y's values."""
    g = _graph(**gkw)
    y, feeds = build(g)
    y.set_output(True).set_data_type(out_dtype)
    g.validate()
    g.create_execution_plan(FUSION_ID, {})
    out = torch.full((n,), float("nan"), dtype=out_dtype)
    g.execute({**feeds, y: out}, None)
    return out


@pytest.mark.parametrize("kind", ["int_exponent", "logical_or", "bool_mask", "gen_index_1"])
def test_scalars_of_every_kind_enter_the_float_compute(kind):
    """A Python int, a float used by a logical op, a boolean mask scalar and the index of
    a size-1 axis all used to reach the kernel raw (int32, Python float, bool)."""
    x = torch.tensor([0.0, 1.0, 2.0, 0.5])

    def build(g):
        X = g.tensor_like(x if kind != "gen_index_1" else x[None])
        feeds = {X: x if kind != "gen_index_1" else x[None]}
        if kind == "int_exponent":
            return g.pow(X, 3), feeds
        if kind == "logical_or":
            S = g.tensor_like(torch.tensor(1.0))
            return g.logical_or(X, S), {**feeds, S: torch.tensor(1.0)}
        if kind == "bool_mask":
            M = g.tensor_like(torch.tensor(True))
            return g.binary_select(X, X, M), {**feeds, M: torch.tensor(True)}
        return g.logical_or(g.gen_index(X, axis=0), X), feeds

    want = {
        "int_exponent": x**3,
        "logical_or": torch.ones(4),
        "bool_mask": x,
        "gen_index_1": (x != 0).float(),
    }[kind]
    assert_close(_fused_1d(build), want.double(), torch.float32, msg=kind)


def test_bfloat16_outputs_round_to_nearest_even():
    """float32 -> bfloat16 rounds to nearest even (the interpreter's own cast truncates),
    and a float64 compute reaches bfloat16 through float32 (it used to bit-cast)."""
    xc = torch.tensor([0.7694, 1.999, -0.7694, 1.01171875])
    out = _fused_1d(
        lambda g: (lambda X: (g.identity(X), {X: xc}))(g.tensor_like(xc)), torch.bfloat16
    )
    assert out.tolist() == xc.bfloat16().tolist()
    xb = torch.tensor([1.5, -0.75, 3.0, 0.25], dtype=torch.bfloat16)
    out = _fused_1d(
        lambda g: (lambda X: (g.identity(X), {X: xb}))(g.tensor_like(xb)),
        torch.bfloat16,
        compute_data_type=DataType.DOUBLE,
    )
    assert out.tolist() == xb.tolist()
    # a virtual bfloat16 intermediate is rounded the same way
    out = _fused_1d(
        lambda g: (lambda X: (g.neg(g.neg(X).set_data_type(DataType.BFLOAT16)), {X: xc}))(
            g.tensor_like(xc)
        )
    )
    assert out.tolist() == xc.bfloat16().float().tolist()


def test_pow_of_zero_exponent_or_unit_base_is_one_and_fmod_is_exact():
    a = torch.tensor([0.0, float("inf"), float("nan"), 1.0])
    b = torch.tensor([0.0, 0.0, 0.0, float("inf")])
    out = _fused_1d(
        lambda g: (lambda A, B: (g.pow(A, B), {A: a, B: b}))(g.tensor_like(a), g.tensor_like(b))
    )
    assert out.tolist() == [1.0, 1.0, 1.0, 1.0]
    am = torch.tensor([2.1, 1.5, -3.0, 7.0])
    bm = torch.tensor([0.7, float("inf"), float("-inf"), 2.5])
    out = _fused_1d(
        lambda g: (lambda A, B: (g.mod(A, B), {A: am, B: bm}))(g.tensor_like(am), g.tensor_like(bm))
    )
    assert out.tolist() == torch.fmod(am, bm).tolist()
