"""The float64 reference engine against PyTorch (torch ops in float64).

The reference is the ground truth every other engine is compared with, so it is checked
here on its own: every pointwise mode and attribute, every reduction mode and axis set,
genstats, matmul and the layout operations, strided and broadcast operands, integer and
boolean outputs, and multi-node graphs.
"""

from __future__ import annotations

import pytest
import torch
from _util import (
    EMPTY_IDENTITY,
    MODE_CASES,
    MODE_IDS,
    REDUCE_SHAPES,
    assert_close,
    covered_modes,
    nhwc,
    reduce_input,
    repro,
    run_reference,
)

import opendnn.frontend as cudnn
from opendnn.enums import DataType, HeurMode, ReductionMode
from opendnn.errors import BadParamError, Status
from opendnn.ops.pointwise import MODES

R = ReductionMode


def test_mode_table_covers_every_pointwise_mode():
    assert covered_modes() == set(MODES)


# ---- pointwise ------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16])
@pytest.mark.parametrize("case", MODE_CASES, ids=MODE_IDS)
def test_pointwise_mode_vs_torch(case, dtype, rng):
    shape = (3, 7)
    xs = case.inputs(rng, shape, dtype)
    g = cudnn.pygraph()
    ts = [g.tensor_like(x, name=f"in{i}") for i, x in enumerate(xs)]
    y = case.build(g, ts)
    y.set_output(True).set_name("y")
    out = run_reference(g, dict(zip(ts, xs)), [y])[y]
    assert out.dtype == dtype
    want = case.torch_fn(*[x.double() for x in xs])
    assert_close(
        out, want, dtype, msg=repro(case.id, [shape] * len(xs), dtype, rng.seed, engine="reference")
    )


@pytest.mark.parametrize("case", [c for c in MODE_CASES if c.boolean], ids=lambda c: c.id)
def test_pointwise_boolean_output_vs_torch(case, rng):
    shape = (4, 5)
    xs = case.inputs(rng, shape, torch.float32)
    g = cudnn.pygraph()
    ts = [g.tensor_like(x) for x in xs]
    y = case.build(g, ts)
    y.set_output(True).set_data_type(DataType.BOOLEAN)
    want = case.torch_fn(*[x.double() for x in xs]) != 0
    for fill in (True, False):
        out = run_reference(g, dict(zip(ts, xs)), [y], fill=fill)[y]
        assert out.dtype == torch.bool
        assert torch.equal(out, want), repro(case.id, [shape], "bool", rng.seed, fill=fill)


def test_pointwise_broadcast_bias_nchw_and_nhwc(rng):
    for layout in ("nchw", "nhwc"):
        x = rng.rand((2, 3, 4, 5))
        x = nhwc(x) if layout == "nhwc" else x
        b = rng.rand((1, 3, 1, 1))
        g = cudnn.pygraph()
        X, B = g.tensor_like(x), g.tensor_like(b)
        y = g.relu(g.bias(X, B))
        y.set_output(True)
        out = run_reference(g, {X: x, B: b}, [y])[y]
        assert out.stride() == x.stride()
        assert_close(
            out,
            torch.relu(x.double() + b.double()),
            torch.float32,
            msg=repro(
                "relu(bias)", [(2, 3, 4, 5), (1, 3, 1, 1)], "float32", rng.seed, layout=layout
            ),
        )


def test_pointwise_strided_views_and_output_strides(rng):
    base = rng.rand((6, 11))
    a = base[1:6:2, 2:9]  # (3, 7) with strides (22, 1)
    bt = rng.rand((7, 3)).t()  # (3, 7) with strides (1, 3)
    g = cudnn.pygraph()
    A, B = g.tensor_like(a), g.tensor_like(bt)
    y = g.sub(A, B)
    y.set_output(True).set_stride([1, 3])  # column-major output
    out = run_reference(g, {A: a, B: bt}, [y])[y]
    assert out.stride() == (1, 3)
    assert_close(out, a.double() - bt.double(), torch.float32)


def test_pointwise_size_one_and_zero_size(rng):
    for shape in [(1, 1, 1), (0, 4), (3, 0, 2)]:
        x, z = rng.rand(shape), rng.rand(shape)
        g = cudnn.pygraph()
        X, Z = g.tensor_like(x), g.tensor_like(z)
        y = g.mul(X, Z)
        y.set_output(True)
        out = run_reference(g, {X: x, Z: z}, [y])[y]
        assert_close(
            out,
            x.double() * z.double(),
            torch.float32,
            msg=repro("mul", [shape], "float32", rng.seed),
        )


def test_pass_by_value_scalar(rng):
    x = rng.rand((3, 4))
    g = cudnn.pygraph()
    X, S = g.tensor_like(x), g.tensor_like(torch.tensor(-1.5))
    y = g.scale(X, S)
    y.set_output(True)
    g.build([HeurMode.FALLBACK])
    for s in (-1.5, 3.0):
        out = torch.full((3, 4), float("nan"))
        g.execute({X: x, S: torch.tensor(s), y: out}, None)
        assert_close(out, x.double() * s, torch.float32)


def test_integer_tensors(rng):
    a = rng.ints((3, 5), -20, 20)
    b = rng.ints((3, 5), -20, 20)
    g = cudnn.pygraph()
    A, B = g.tensor_like(a), g.tensor_like(b)
    y = g.add(A, g.mul(A, B))
    y.set_output(True)
    out = run_reference(g, {A: a, B: b}, [y], fill=0)[y]
    assert out.dtype == torch.int32
    assert torch.equal(out, a + a * b)


def test_multi_node_dag_two_outputs(rng):
    a, b, c = rng.rand((4, 6)), rng.rand((4, 6)), rng.rand((1, 6))
    g = cudnn.pygraph()
    A, B, C = g.tensor_like(a), g.tensor_like(b), g.tensor_like(c)
    mid = g.add(A, g.mul(B, C))
    s = g.sigmoid(mid)
    t = g.tanh(mid)  # the diamond: mid feeds two nodes
    y = g.mul(s, t)
    y.set_output(True)
    mid.set_output(True)  # an intermediate that is also an output
    outs = run_reference(g, {A: a, B: b, C: c}, [y, mid])
    m = a.double() + b.double() * c.double()
    assert_close(outs[mid], m, torch.float32)
    assert_close(outs[y], torch.sigmoid(m) * torch.tanh(m), torch.float32)


# ---- reductions -----------------------------------------------------------------------------
def _torch_reduce(mode, x, dims):
    axes = [i for i, (a, b) in enumerate(zip(x.shape, dims)) if b == 1 and a != 1]
    if not axes:
        return {
            R.AMAX: x.abs(),
            R.NORM1: x.abs(),
            R.NORM2: x.abs(),
            R.MUL_NO_ZEROS: torch.where(x == 0, torch.ones_like(x), x),
        }.get(mode, x)
    if mode == R.ADD:
        return x.sum(axes, keepdim=True)
    if mode == R.MUL:
        return _prod(x, axes)
    if mode == R.MIN:
        return x.amin(axes, keepdim=True)
    if mode == R.MAX:
        return x.amax(axes, keepdim=True)
    if mode == R.AMAX:
        return x.abs().amax(axes, keepdim=True)
    if mode == R.AVG:
        return x.mean(axes, keepdim=True)
    if mode == R.NORM1:
        return torch.linalg.vector_norm(x, 1, dim=axes, keepdim=True)
    if mode == R.NORM2:
        return torch.linalg.vector_norm(x, 2, dim=axes, keepdim=True)
    if mode == R.MUL_NO_ZEROS:
        return _prod(torch.where(x == 0, torch.ones_like(x), x), axes)
    raise AssertionError(mode)


def _prod(x, axes):
    for a in sorted(axes, reverse=True):
        x = x.prod(a, keepdim=True)
    return x


@pytest.mark.parametrize("shapes", REDUCE_SHAPES, ids=lambda s: f"{s[0]}->{s[1]}")
@pytest.mark.parametrize("mode", list(ReductionMode), ids=lambda m: m.name)
def test_reduction_vs_torch(mode, shapes, rng):
    xs, ys = shapes
    x = reduce_input(rng, mode, xs, torch.float64)
    g = cudnn.pygraph()
    X = g.tensor_like(x)
    y = g.reduction(X, mode)
    y.set_dim(list(ys)).set_output(True)
    out = run_reference(g, {X: x}, [y])[y]
    n = x.numel() // max(1, torch.Size(ys).numel())
    assert_close(
        out,
        _torch_reduce(mode, x, ys),
        torch.float64,
        n=n,
        msg=repro(f"reduction {mode.name}", [xs, ys], "float64", rng.seed),
    )


@pytest.mark.parametrize("mode", list(ReductionMode), ids=lambda m: m.name)
def test_reduction_float32_strided_input_vs_torch(mode, rng):
    base = reduce_input(rng, mode, (9, 6), torch.float32)
    x = base.t()[:, 1:8]  # (6, 7), strides (1, 6): non-packed
    g = cudnn.pygraph()
    X = g.tensor_like(x)
    y = g.reduction(X, mode)
    y.set_dim([6, 1]).set_output(True)
    out = run_reference(g, {X: x}, [y])[y]
    assert_close(
        out,
        _torch_reduce(mode, x.double(), (6, 1)),
        torch.float32,
        n=7,
        msg=repro(f"reduction {mode.name}", [(6, 7)], "float32", rng.seed),
    )


@pytest.mark.parametrize("mode", list(ReductionMode), ids=lambda m: m.name)
def test_reduction_over_empty_axis_gives_identity(mode):
    g = cudnn.pygraph()
    x = torch.empty(3, 0)
    X = g.tensor_like(x)
    y = g.reduction(X, mode)
    y.set_dim([3, 1]).set_output(True)
    out = run_reference(g, {X: x}, [y], fill=12345.0)[y]
    want = torch.full((3, 1), EMPTY_IDENTITY[mode], dtype=torch.float64)
    assert_close(out, want, torch.float32, msg=f"reduction {mode.name} over an empty axis")


def test_genstats_vs_torch_nchw_nhwc(rng):
    for layout in ("nchw", "nhwc"):
        x = rng.rand((2, 3, 5, 7), torch.float32)
        x = nhwc(x) if layout == "nhwc" else x
        g = cudnn.pygraph()
        X = g.tensor_like(x)
        s, sq = g.genstats(X)
        s.set_output(True)
        sq.set_output(True)
        outs = run_reference(g, {X: x}, [s, sq])
        xd = x.double()
        assert outs[s].shape == (1, 3, 1, 1)
        assert_close(
            outs[s],
            xd.sum((0, 2, 3), keepdim=True),
            torch.float32,
            n=70,
            msg=repro("genstats sum", [(2, 3, 5, 7)], "float32", rng.seed, layout=layout),
        )
        assert_close(
            outs[sq],
            (xd * xd).sum((0, 2, 3), keepdim=True),
            torch.float32,
            n=70,
            msg=repro("genstats sq", [(2, 3, 5, 7)], "float32", rng.seed, layout=layout),
        )


def test_softmax_graph_vs_torch(rng):
    """max-reduce, subtract, exp, sum-reduce, divide: a multi-node graph with reductions
    in the middle, run whole by the reference."""
    x = rng.rand((5, 9), torch.float32, high=3.0)
    g = cudnn.pygraph()
    X = g.tensor_like(x)
    m = g.reduction(X, ReductionMode.MAX)
    m.set_dim([5, 1])
    e = g.exp(g.sub(X, m))
    s = g.reduction(e, ReductionMode.ADD)
    s.set_dim([5, 1])
    y = g.div(e, s)
    y.set_output(True)
    out = run_reference(g, {X: x}, [y])[y]
    assert_close(out, torch.softmax(x.double(), 1), torch.float32, n=9)


# ---- matmul and layout ----------------------------------------------------------------------
MATMUL_SHAPES = [
    ((4, 5), (5, 3)),
    ((2, 4, 5), (2, 5, 3)),
    ((1, 4, 5), (3, 5, 3)),  # broadcast batch
    ((2, 1, 3, 7), (1, 3, 7, 1)),  # two batch dims, N = 1
    ((1, 1), (1, 1)),
    ((3, 0), (0, 4)),  # K = 0: zeros
]


@pytest.mark.parametrize("shapes", MATMUL_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_matmul_vs_torch(shapes, dtype, rng):
    a, b = rng.rand(shapes[0], dtype), rng.rand(shapes[1], dtype)
    g = cudnn.pygraph()
    A, B = g.tensor_like(a), g.tensor_like(b)
    c = g.matmul(A, B)
    c.set_output(True).set_data_type(DataType.FLOAT)
    out = run_reference(g, {A: a, B: b}, [c])[c]
    k = shapes[0][-1]
    assert_close(
        out,
        a.double() @ b.double(),
        torch.float32,
        n=k,
        msg=repro("matmul", list(shapes), dtype, rng.seed),
    )


def test_matmul_transposed_operands(rng):
    a = rng.rand((6, 4)).t()  # (4, 6) column-major
    b = rng.rand((3, 6)).t()  # (6, 3) column-major
    g = cudnn.pygraph()
    A, B = g.tensor_like(a), g.tensor_like(b)
    c = g.matmul(A, B)
    c.set_output(True)
    out = run_reference(g, {A: a, B: b}, [c])[c]
    assert_close(out, a.double() @ b.double(), torch.float32, n=6)


@pytest.mark.parametrize("src_t", [False, True])
def test_reshape_vs_torch(src_t, rng):
    x = rng.rand((6, 4)).t() if src_t else rng.rand((4, 6))  # logical (4, 6) either way
    g = cudnn.pygraph()
    X = g.tensor_like(x)
    y = g.reshape(X, reshape_mode=cudnn.reshape_mode.LOGICAL)
    y.set_dim([2, 3, 4]).set_output(True)
    out = run_reference(g, {X: x}, [y])[y]
    assert torch.equal(out, x.reshape(2, 3, 4))


def test_view_only_reshape_of_a_transposed_input_is_not_supported(rng):
    """VIEW_ONLY (cudnn-frontend's default) reads memory as laid out; over a transposed
    input that is not the logical reshape, and it is refused rather than reshaped
    logically."""
    from opendnn.errors import GraphNotSupportedError

    g = cudnn.pygraph()
    X = g.tensor_like(rng.rand((6, 4)).t())
    g.reshape(X).set_dim([2, 3, 4]).set_output(True)
    with pytest.raises((BadParamError, GraphNotSupportedError), match="VIEW_ONLY") as e:
        g.validate()
    assert e.value.status == Status.NOT_SUPPORTED


def test_transpose_vs_torch(rng):
    x = rng.rand((2, 3, 5))
    g = cudnn.pygraph()
    X = g.tensor_like(x)
    y = g.transpose(X, [2, 0, 1])
    y.set_output(True)
    g.validate()
    assert y.get_dim() == [5, 2, 3]
    out = run_reference(g, {X: x}, [y])[y]
    assert torch.equal(out, x.permute(2, 0, 1))


def test_slice_vs_torch(rng):
    x = rng.rand((5, 7, 3))
    g = cudnn.pygraph()
    X = g.tensor_like(x)
    y = g.slice(X, [slice(1, 4), (2, 7), slice(None)])
    y.set_output(True)
    out = run_reference(g, {X: x}, [y])[y]
    assert torch.equal(out, x[1:4, 2:7, :])


@pytest.mark.parametrize("axis", [0, 1])
def test_concatenate_vs_torch(axis, rng):
    shapes = [(2, 3), (2, 3), (2, 3)]
    shapes = [
        tuple(s if i != axis else s + j for i, s in enumerate(sh)) for j, sh in enumerate(shapes)
    ]
    xs = [rng.rand(s) for s in shapes]
    g = cudnn.pygraph()
    ts = [g.tensor_like(x) for x in xs]
    y = g.concatenate(ts, axis=axis)
    y.set_output(True)
    out = run_reference(g, dict(zip(ts, xs)), [y])[y]
    assert torch.equal(out, torch.cat(xs, axis))


def test_matmul_bias_relu_graph_vs_torch(rng):
    a, b, bias = rng.rand((2, 5, 7)), rng.rand((2, 7, 3)), rng.rand((1, 1, 3))
    g = cudnn.pygraph(intermediate_data_type=DataType.FLOAT, compute_data_type=DataType.FLOAT)
    A, B, C = g.tensor_like(a), g.tensor_like(b), g.tensor_like(bias)
    y = g.relu(g.bias(g.matmul(A, B), C))
    y.set_output(True)
    out = run_reference(g, {A: a, B: b, C: bias}, [y])[y]
    assert_close(out, torch.relu(a.double() @ b.double() + bias.double()), torch.float32, n=7)


def test_slice_with_negative_python_indices(rng):
    x = rng.rand((5, 7))
    g = cudnn.pygraph()
    X = g.tensor_like(x)
    y = g.slice(X, [slice(-3, None), slice(1, -1)])
    y.set_output(True)
    out = run_reference(g, {X: x}, [y])[y]
    assert torch.equal(out, x[-3:, 1:-1])
